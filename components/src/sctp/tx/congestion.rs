//! Congestion control for one association (RFC 9260 §7.2): slow start, congestion
//! avoidance, fast recovery and the reaction to T3-rtx expiry, plus the sending rules of
//! §6.1 that combine cwnd and the peer's receive window.
//!
//! WebRTC associations have one path, so there is one set of cwnd, ssthresh and
//! partial_bytes_acked. Byte counts are DATA chunk lengths with header and padding (§7.2).

use super::retransmission_queue::SackOutcome;
use super::{COMMON_HEADER_LEN, DEFAULT_SCTP_MTU, data_chunk_len};
use crate::sctp::num::Tsn;
use crate::time::Time;
use std::time::Duration;

/// Parameters of a [`CongestionControl`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CongestionConfig {
    /// The SCTP packet size limit (PMTU, RFC 9260 §1.3); PMDCS is this less the common header.
    pub mtu: usize,
    /// The peer's address is IPv6, which changes the initial cwnd (§7.2.1).
    pub ipv6: bool,
    /// Slow start grows cwnd by at most L × PMDCS per SACK; RFC 9260 §7.2.1 says L SHOULD
    /// be 1.
    pub slow_start_l: usize,
}

impl Default for CongestionConfig {
    fn default() -> Self {
        CongestionConfig {
            mtu: DEFAULT_SCTP_MTU,
            ipv6: false,
            slow_start_l: 1,
        }
    }
}

/// cwnd, ssthresh and partial_bytes_acked, and the Fast Recovery state.
#[derive(Clone, Debug)]
pub struct CongestionControl {
    pmdcs: usize,
    initial_cwnd: usize,
    slow_start_l: usize,
    cwnd: usize,
    ssthresh: usize,
    partial_bytes_acked: usize,
    /// While in Fast Recovery: the highest TSN outstanding when it began (§7.2.4 rule 6).
    fast_recovery_exit: Option<Tsn>,
    last_transmit: Option<Time>,
    /// The end of the last idle period already decayed for (§7.2.1).
    idle_decayed_to: Option<Time>,
}

impl CongestionControl {
    /// Fresh state for a new association or path.
    pub fn new(config: &CongestionConfig) -> CongestionControl {
        // PMDCS: the largest DATA chunk, header included, that fits a packet (§1.3).
        let pmdcs = config
            .mtu
            .saturating_sub(COMMON_HEADER_LEN)
            .max(data_chunk_len(1));
        // §7.2.1: "The initial cwnd before data transmission MUST be set to min(4 * PMDCS,
        // max(2 * PMDCS, 4404)) bytes if the peer address is an IPv4 address and to
        // min(4 * PMDCS, max(2 * PMDCS, 4344)) bytes if the peer address is an IPv6 address."
        let floor = if config.ipv6 { 4344 } else { 4404 };
        let initial_cwnd = (4 * pmdcs).min((2 * pmdcs).max(floor));
        CongestionControl {
            pmdcs,
            initial_cwnd,
            slow_start_l: config.slow_start_l.max(1),
            cwnd: initial_cwnd,
            // §7.2.1: "arbitrarily high (e.g., the size of the largest-possible advertised
            // window)"; a_rwnd is 32 bits.
            ssthresh: u32::MAX as usize,
            partial_bytes_acked: 0,
            fast_recovery_exit: None,
            last_transmit: None,
            idle_decayed_to: None,
        }
    }

    /// Back to the initial values (RFC 9260 §7.2.5; RFC 8831 §5 after an address change).
    pub fn reset(&mut self) {
        self.cwnd = self.initial_cwnd;
        self.ssthresh = u32::MAX as usize;
        self.partial_bytes_acked = 0;
        self.fast_recovery_exit = None;
        self.last_transmit = None;
        self.idle_decayed_to = None;
    }

    /// The congestion window in bytes.
    pub fn cwnd(&self) -> usize {
        self.cwnd
    }

    /// The slow-start threshold in bytes.
    pub fn ssthresh(&self) -> usize {
        self.ssthresh
    }

    /// partial_bytes_acked (§7.2.2).
    pub fn partial_bytes_acked(&self) -> usize {
        self.partial_bytes_acked
    }

    /// PMDCS in bytes.
    pub fn pmdcs(&self) -> usize {
        self.pmdcs
    }

    /// Whether Fast Recovery is on (§7.2.4); pass it to `RetransmissionQueue::handle_sack`.
    pub fn in_fast_recovery(&self) -> bool {
        self.fast_recovery_exit.is_some()
    }

    /// Whether a new DATA chunk of `payload_len` bytes may be sent (RFC 9260 §6.1):
    ///
    /// - rule B: not if `bytes_in_flight` (flightsize) has reached cwnd; below it, one
    ///   packet may overshoot by up to PMDCS - 1, which checking each chunk against
    ///   flightsize before it gives;
    /// - rule A: not if the peer's rwnd is smaller than the chunk, except as a zero window
    ///   probe when nothing is in flight. §6.1 A says to send the first probe one RTO after
    ///   the window closed: the caller arms that timer.
    pub fn can_send(&self, bytes_in_flight: usize, peer_rwnd: usize, payload_len: usize) -> bool {
        let cwnd_allows = bytes_in_flight < self.cwnd;
        let rwnd_allows = payload_len <= peer_rwnd || bytes_in_flight == 0;
        cwnd_allows && rwnd_allows
    }

    /// Adjusts the window for a processed SACK. Returns true when this SACK starts Fast
    /// Recovery: the caller then sends one packet of the lowest-TSN marked chunks at once,
    /// ignoring cwnd (§7.2.4 rule 3).
    pub fn on_sack(&mut self, sack: &SackOutcome) -> bool {
        // §6.2.1 D iv: "If the Cumulative TSN Ack matches or exceeds the Fast Recovery exit
        // point (Section 7.2.4), Fast Recovery is exited."
        if let Some(exit) = self.fast_recovery_exit
            && sack.cumulative_tsn_ack.is_at_or_after(exit)
        {
            self.fast_recovery_exit = None;
        }
        // §7.2.4 note: the §7.2.1/§7.2.2 adjustments for what this SACK acks come first.
        let acked = sack.bytes_acked;
        // "Fully utilized": flightsize had reached cwnd, which rule B makes the case
        // whenever cwnd, not the application or rwnd, was the limit.
        let fully_utilized = sack.bytes_in_flight_before >= self.cwnd;
        if acked > 0 {
            if self.cwnd <= self.ssthresh {
                // §7.2.1: grow only if fully utilized and not in Fast Recovery, by at most
                // the lesser of the bytes acked and L × PMDCS.
                if fully_utilized && !self.in_fast_recovery() {
                    self.cwnd += acked.min(self.slow_start_l * self.pmdcs);
                }
            } else {
                // §7.2.2, in its practical form.
                self.partial_bytes_acked += acked;
                if self.partial_bytes_acked >= self.cwnd && fully_utilized {
                    self.partial_bytes_acked -= self.cwnd;
                    self.cwnd += self.pmdcs;
                } else if self.partial_bytes_acked > self.cwnd {
                    self.partial_bytes_acked = self.cwnd;
                }
            }
        }
        if sack.all_acked {
            // §7.2.2: "When all of the data transmitted by the sender has been acknowledged
            // by the receiver, partial_bytes_acked is initialized to 0."
            self.partial_bytes_acked = 0;
        }
        if sack.fast_retransmit_triggered && !self.in_fast_recovery() {
            // §7.2.4 rule 2 with §7.2.3's formula; rule 6: enter Fast Recovery with the
            // highest outstanding TSN as exit point, one reduction per recovery.
            self.ssthresh = (self.cwnd / 2).max(4 * self.pmdcs);
            self.cwnd = self.ssthresh;
            self.partial_bytes_acked = 0;
            self.fast_recovery_exit = Some(sack.highest_sent_tsn);
            return true;
        }
        false
    }

    /// The T3-rtx timer expired (§6.3.3 E1, §7.2.3): ssthresh = max(cwnd/2, 4 × PMDCS),
    /// cwnd = PMDCS, so one packet is in flight until an ack arrives. Fast Recovery ends
    /// too (the RFC is silent; slow start from one packet supersedes it, as in Linux).
    pub fn on_t3_expiry(&mut self) {
        self.ssthresh = (self.cwnd / 2).max(4 * self.pmdcs);
        self.cwnd = self.pmdcs;
        self.partial_bytes_acked = 0;
        self.fast_recovery_exit = None;
    }

    /// A packet with DATA went out at `now`: the path is not idle.
    pub fn on_transmit(&mut self, now: Time) {
        self.last_transmit = Some(now);
        self.idle_decayed_to = None;
    }

    /// §7.2.1: "While the endpoint does not transmit data on a given transport address,
    /// the cwnd of the transport address SHOULD be adjusted to max(cwnd / 2, 4 * PMDCS)
    /// once per RTO. Before the first cwnd adjustment, the ssthresh of the transport
    /// address SHOULD be set to the cwnd." Call before sending after a pause, with the
    /// current RTO; it applies one adjustment per whole RTO idle. The adjustment never
    /// raises cwnd (after a T3 expiry cwnd can be below 4 × PMDCS).
    pub fn on_idle(&mut self, now: Time, rto: Duration) {
        let Some(last) = self.last_transmit else {
            return;
        };
        if rto.is_zero() {
            return;
        }
        let mut mark = self.idle_decayed_to.unwrap_or(last);
        // cwnd reaches its floor within ~30 halvings; bound the loop anyway.
        for _ in 0..64 {
            if now.saturating_since(mark) < rto {
                break;
            }
            if self.idle_decayed_to.is_none() {
                self.ssthresh = self.cwnd;
            }
            self.cwnd = (self.cwnd / 2).max(4 * self.pmdcs).min(self.cwnd);
            mark = mark + rto;
            self.idle_decayed_to = Some(mark);
        }
    }
}

#[cfg(test)]
mod tests;
