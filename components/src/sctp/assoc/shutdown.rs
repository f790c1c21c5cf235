//! Closing an association the peer asked to close (RFC 9260 §9.2): a SHUTDOWN
//! acknowledges by its cumulative TSN and stops new user messages; the SHUTDOWN ACK
//! waits until every chunk of ours is acknowledged. shoal never starts a SHUTDOWN.

use super::{AssocEnd, AssocState, Effects, Sctp};
use crate::sctp::Tsn;
use crate::sctp::chunk::{ShutdownAck, WriteChunk};
use crate::sctp::tx::SackError;
use crate::time::Time;

impl Sctp {
    /// Queues a SHUTDOWN ACK (first send, or again on T2-shutdown or a repeated
    /// SHUTDOWN or INIT).
    pub fn queue_shutdown_ack(&mut self) {
        ShutdownAck.write_to(&mut self.control.scratch);
        self.control.commit();
    }

    /// RFC 9260 §9.2: in SHUTDOWN-RECEIVED, once no DATA is queued or outstanding,
    /// "the SHUTDOWN chunk receiver MUST send a SHUTDOWN ACK chunk and start a
    /// T2-shutdown timer of its own, entering the SHUTDOWN-ACK-SENT state". True when
    /// it just did (the caller arms T2).
    pub fn ack_shutdown_when_drained(&mut self) -> bool {
        if self.state != AssocState::ShutdownReceived {
            return false;
        }
        // Every TSN we assigned is covered by the peer's cumulative ack: a chunk
        // gap-acked or abandoned but still above it (a FORWARD TSN owed) is not done.
        let drained = self
            .tx
            .as_ref()
            .is_none_or(|tx| !tx.queue.has_data() && tx.outstanding.is_empty());
        if drained {
            self.queue_shutdown_ack();
            self.state = AssocState::ShutdownAckSent;
        }
        drained
    }
}

/// A SHUTDOWN chunk (RFC 9260 §9.2). False: the association was aborted.
pub(super) fn on_shutdown(a: &mut Sctp, cum_ack: Tsn, now: Time, fx: &mut Effects) -> bool {
    match a.state {
        AssocState::Established | AssocState::ShutdownReceived => {
            // "verify, by checking the Cumulative TSN Ack field of the chunk, that all
            // its outstanding DATA chunks have been received by the SHUTDOWN chunk
            // sender": it acknowledges what it covers.
            if let Some(tx) = a.tx.as_mut() {
                match tx.outstanding.handle_shutdown_cum_ack(now, cum_ack) {
                    Ok(out) => {
                        tx.cc.on_sack(&out);
                        tx.apply_discards();
                        // §6.3.2 R3: T3 restarts only when the earliest outstanding
                        // TSN is acknowledged, not on every repeated SHUTDOWN.
                        if out.newly_acked_cumulative {
                            a.error_count = 0;
                            fx.sack_processed = true;
                            fx.cumulative_advanced = true;
                        }
                    }
                    Err(SackError::AcksUnsentTsn { .. }) => {
                        // §11.4, as for a SACK acknowledging a TSN never sent.
                        a.abort(AssocEnd::ProtocolViolation);
                        return false;
                    }
                    Err(SackError::OutOfOrder { .. }) => {}
                }
            }
            // "enter the SHUTDOWN-RECEIVED state, stop accepting new data from its SCTP
            // user"; the SHUTDOWN ACK waits until our data is acknowledged.
            a.state = AssocState::ShutdownReceived;
            fx.shutdown_acked = a.ack_shutdown_when_drained();
        }
        // "If an endpoint is in the SHUTDOWN-SENT state and receives a SHUTDOWN chunk
        // from its peer, the endpoint SHOULD respond immediately with a SHUTDOWN ACK
        // chunk"; in SHUTDOWN-ACK-SENT it "MUST continue responding to SHUTDOWN
        // chunks".
        AssocState::ShutdownSent | AssocState::ShutdownAckSent => {
            a.queue_shutdown_ack();
            a.state = AssocState::ShutdownAckSent;
            fx.shutdown_acked = true;
        }
        // "If a SHUTDOWN chunk is received in the COOKIE-WAIT or COOKIE ECHOED state,
        // the SHUTDOWN chunk SHOULD be silently discarded."
        AssocState::Closed | AssocState::CookieWait | AssocState::CookieEchoed => {
            fx.dropped = true;
        }
    }
    true
}
