//! Closing an association (RFC 9260 §9.2), either way. The peer's SHUTDOWN
//! acknowledges by its cumulative TSN and stops new user messages; the SHUTDOWN ACK
//! waits until every chunk of ours is acknowledged. Ours (when the node drains)
//! waits in SHUTDOWN-PENDING until what we queued and sent is acknowledged, then
//! goes under T2-shutdown until the peer's SHUTDOWN ACK.

use super::{AssocEnd, AssocState, Effects, Sctp};
use crate::sctp::Tsn;
use crate::sctp::chunk::{Shutdown, ShutdownAck, WriteChunk};
use crate::sctp::tx::SackError;
use crate::time::Time;

impl Sctp {
    /// The SHUTDOWN primitive (RFC 9260 §9.2): "Upon receipt of the SHUTDOWN
    /// primitive from its upper layer, the endpoint enters the SHUTDOWN-PENDING state
    /// and remains there until all outstanding data has been acknowledged by its
    /// peer. The endpoint accepts no new data from its upper layer, but retransmits
    /// data to the far end if necessary to fill gaps." True when the association is
    /// closing (or closed) after the call; the caller then runs
    /// [`Sctp::send_shutdown_when_drained`] (at once, and after every SACK) and arms
    /// T2-shutdown when it sends.
    ///
    /// An association still being set up has no data to wait for: it just ends
    /// (the caller closes the DTLS connection under it, which tells the peer). A
    /// peer closing already (SHUTDOWN received) is left to finish its own sequence.
    pub fn shutdown(&mut self) -> bool {
        match self.state {
            AssocState::Established => {
                self.state = AssocState::ShutdownPending;
                true
            }
            AssocState::CookieWait | AssocState::CookieEchoed => {
                self.end(AssocEnd::Shutdown);
                true
            }
            AssocState::ShutdownPending
            | AssocState::ShutdownSent
            | AssocState::ShutdownReceived
            | AssocState::ShutdownAckSent => true,
            // Never started, or over.
            AssocState::Closed => self.ended.is_some(),
        }
    }

    /// RFC 9260 §9.2: in SHUTDOWN-PENDING, "Once all its outstanding data has been
    /// acknowledged, the endpoint sends a SHUTDOWN chunk to its peer, including in
    /// the Cumulative TSN Ack field the last sequential TSN it has received from the
    /// peer. It SHOULD then start the T2-shutdown timer and enter the SHUTDOWN-SENT
    /// state." True when it just did (the caller arms T2).
    pub fn send_shutdown_when_drained(&mut self) -> bool {
        if self.state != AssocState::ShutdownPending || !self.our_data_acknowledged() {
            return false;
        }
        self.queue_shutdown();
        self.state = AssocState::ShutdownSent;
        true
    }

    /// Queues a SHUTDOWN carrying the last TSN received in sequence from the peer
    /// (first send, on T2-shutdown, or answering DATA in SHUTDOWN-SENT).
    pub fn queue_shutdown(&mut self) {
        let Some(rx) = self.rx.as_ref() else {
            return;
        };
        Shutdown {
            cumulative_tsn_ack: rx.tracker().cumulative_tsn(),
        }
        .write_to(&mut self.control.scratch);
        self.control.commit();
    }

    /// Every TSN we assigned is covered by the peer's cumulative ack and nothing is
    /// queued: a chunk gap-acked or abandoned but still above it (a FORWARD TSN owed)
    /// is not done.
    fn our_data_acknowledged(&self) -> bool {
        self.tx
            .as_ref()
            .is_none_or(|tx| !tx.queue.has_data() && tx.outstanding.is_empty())
    }

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
        let drained = self.our_data_acknowledged();
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
        // SHUTDOWN-PENDING too: the peer closes first, and its SHUTDOWN ACK waits for
        // our data as ours would have.
        AssocState::Established | AssocState::ShutdownPending | AssocState::ShutdownReceived => {
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
                        a.violation("SHUTDOWN acknowledges a TSN never sent");
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

/// RFC 9260 §9.2: "While in the SHUTDOWN-SENT state, the SHUTDOWN chunk sender MUST
/// immediately respond to each received packet containing one or more DATA chunks
/// with a SHUTDOWN chunk and restart the T2-shutdown timer. If a SHUTDOWN chunk by
/// itself cannot acknowledge all of the received DATA chunks (i.e., there are TSNs
/// that can be acknowledged that are larger than the cumulative TSN, and thus gaps
/// exist in the TSN sequence), or if duplicate TSNs have been received, then a SACK
/// chunk MUST also be sent." (A duplicate already asks for a SACK in `on_data`.)
pub(super) fn answer_data_while_shutting_down(a: &mut Sctp, fx: &mut Effects) {
    a.queue_shutdown();
    fx.shutdown_sent = true;
    if a.rx.as_ref().is_some_and(|rx| rx.tracker().has_gaps()) {
        a.sack_now = true;
    }
}
