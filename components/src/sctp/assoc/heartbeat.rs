//! Path heartbeats (RFC 9260 §8.3) on an idle association: one HEARTBEAT every
//! `SctpLimits::heartbeat_interval` plus an RTO with ±50 % jitter, each answered or
//! counted against Association.Max.Retrans (§8.1) one RTO later. A peer that lost
//! its association answers ABORT (§8.4 rule 8), so a half-open association is found
//! within one interval; one that answers nothing runs the error count out.

use bytes::Bytes;

use super::{AssocEnd, AssocState, MAX_ASSOCIATION_RETRANSMITS, Sctp, SctpLimits};
use crate::sctp::chunk::{Heartbeat, WriteChunk};
use crate::time::Time;

/// Heartbeat Information shoal sends: a random nonce and the send time, 16 bytes.
/// §8.3 lets the sender put in what it likes; only an echo of ours counts.
const INFO_LEN: usize = 16;

/// The last HEARTBEAT sent, until it is answered or the next one goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeartbeatSent {
    /// Its nonce: an answer must echo it.
    pub nonce: u64,
    /// When it went, for the RTT its answer measures.
    pub sent_at: Time,
    /// No answer came within an RTO: counted as an error. A late answer still clears
    /// the count (§8.3), so a path slower than the RTO's cap is not torn down for it.
    pub overdue: bool,
}

/// The heartbeat timer fired at `now` (`random` is fresh randomness from the shard:
/// the next nonce and the jitter). Returns when it should fire next, or `None` when
/// the association no longer heartbeats (not established, heartbeats off, or just
/// given up on).
pub fn on_heartbeat_timer(
    a: &mut Sctp,
    now: Time,
    random: u64,
    limits: &SctpLimits,
) -> Option<Time> {
    if a.state != AssocState::Established || limits.heartbeat_interval.is_zero() {
        a.heartbeat = None;
        return None;
    }
    let rto = a.tx.as_ref().map(|tx| tx.rto.rto())?;
    // One RTO has passed since the last HEARTBEAT went, unanswered (§8.3): an error,
    // and the RTO backs off as for T3-rtx.
    if let Some(sent) = a.heartbeat.as_mut()
        && !sent.overdue
    {
        sent.overdue = true;
        a.error_count += 1;
        if let Some(tx) = a.tx.as_mut() {
            tx.rto.on_t3_expiry();
        }
        if a.error_count > MAX_ASSOCIATION_RETRANSMITS {
            a.give_up(AssocEnd::PeerUnreachable);
            return None;
        }
        // The next one a whole interval on, plus the backed-off RTO.
        let rto = a.tx.as_ref().map_or(rto, |tx| tx.rto.rto());
        return Some(next_interval(now, rto, random, limits));
    }
    // DATA in flight is watched by T3-rtx: the path is not idle.
    let busy =
        a.tx.as_ref()
            .is_some_and(|tx| tx.outstanding.has_outstanding_data());
    if busy {
        return Some(next_interval(now, rto, random, limits));
    }
    let mut info = [0u8; INFO_LEN];
    info[..8].copy_from_slice(&random.to_be_bytes());
    info[8..].copy_from_slice(&now.as_micros().to_be_bytes());
    Heartbeat {
        info: Bytes::copy_from_slice(&info),
    }
    .write_to(&mut a.control.scratch);
    a.control.commit();
    a.heartbeat = Some(HeartbeatSent {
        nonce: random,
        sent_at: now,
        overdue: false,
    });
    let rto = a.tx.as_ref().map_or(rto, |tx| tx.rto.rto());
    Some(now + rto)
}

/// When the next HEARTBEAT is due after an answer at `now`.
pub fn next_after_answer(a: &Sctp, now: Time, random: u64, limits: &SctpLimits) -> Option<Time> {
    if a.state != AssocState::Established || limits.heartbeat_interval.is_zero() {
        return None;
    }
    let rto = a.tx.as_ref().map(|tx| tx.rto.rto())?;
    Some(next_interval(now, rto, random, limits))
}

/// HB.interval plus the RTO with ±50 % jitter (§8.3).
fn next_interval(now: Time, rto: std::time::Duration, random: u64, limits: &SctpLimits) -> Time {
    let fraction = (random >> 32) as u32;
    let jitter = rto.mul_f64(0.5 + f64::from(fraction) / f64::from(u32::MAX));
    now + limits.heartbeat_interval + jitter
}

/// A HEARTBEAT ACK with `info`: true when it answers the last HEARTBEAT, in time or
/// late, which then clears the error count (§8.3: "SHOULD also clear the association
/// overall error count") and measures the RTT.
pub(super) fn on_ack(a: &mut Sctp, info: &[u8], now: Time) -> bool {
    let Some(sent) = a.heartbeat else {
        return false;
    };
    let ours = info.len() == INFO_LEN && info[..8] == sent.nonce.to_be_bytes();
    if !ours {
        return false;
    }
    a.heartbeat = None;
    a.error_count = 0;
    if let Some(tx) = a.tx.as_mut() {
        tx.rto.on_rtt_sample(now.saturating_since(sent.sent_at));
    }
    true
}
