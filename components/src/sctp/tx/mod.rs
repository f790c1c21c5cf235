//! The send side of an SCTP association as plain data: the per-stream send queue, the
//! queue of outstanding DATA chunks, congestion control and the retransmission timeout.
//!
//! Nothing here does I/O or reads a clock: time comes in as [`Time`]. The pieces are
//! separate structs that an association's pass drives in this order:
//!
//! 1. `SendQueue::send` takes a user message (bounded: back-pressure with `WouldBlock`).
//! 2. On a SACK: `RetransmissionQueue::handle_sack` (given
//!    `CongestionControl::in_fast_recovery`), then `CongestionControl::on_sack` with its
//!    outcome (true: send one packet of retransmissions now, ignoring cwnd, §7.2.4 rule
//!    3), `RtoEstimator::on_rtt_sample` with its RTT sample, and
//!    `SendQueue::discard_message` for every message `RetransmissionQueue::take_discards`
//!    names (RFC 3758 §3.5 A3: all fragments of an abandoned message go together).
//! 3. To transmit (RFC 9260 §6.1 C then E): `CongestionControl::on_idle`, then first
//!    `RetransmissionQueue::next_retransmission` while cwnd allows, then new data while
//!    `CongestionControl::can_send` allows, each chunk from `SendQueue::produce` handed
//!    straight to `RetransmissionQueue::add`, which assigns its TSN. Fragments of one
//!    message therefore get consecutive TSNs (RFC 9260 §6.9), which is what lets an
//!    abandonment find all of a message's fragments without a scan. Then
//!    `CongestionControl::on_transmit`.
//! 4. A FORWARD-TSN is due whenever `RetransmissionQueue::forward_tsn` says so (bundle it
//!    first in the packet, control chunks before DATA, §6.10).
//! 5. On T3-rtx expiry: `RtoEstimator::on_t3_expiry`, `CongestionControl::on_t3_expiry`,
//!    `RetransmissionQueue::handle_t3_expiry`, the discards, then transmit.
//!
//! The T3-rtx timer itself is the caller's (a `Timers` slot); `RtoEstimator` gives its
//! duration and `SackOutcome` says when RFC 9260 §6.3.2 R2-R4 stop or (re)start it.
//! `sim_tests.rs` wires all of this against a model receiver and is the reference.

pub mod congestion;
mod forward_tsn;
pub mod retransmission_queue;
pub mod rto;
pub mod send_queue;

#[cfg(test)]
mod sim_tests;

use std::time::Duration;

use bytes::Bytes;

use super::num::{Ppid, Ssn, StreamId};
use crate::time::Time;

pub use congestion::{CongestionConfig, CongestionControl};
pub use retransmission_queue::{
    RetransmissionQueue, RetransmissionQueueConfig, RetransmissionStats, SackError, SackOutcome,
};
pub use rto::{RtoConfig, RtoEstimator};
pub use send_queue::{SendError, SendQueue, SendQueueConfig, SendQueueStats};

/// Bytes in a DATA chunk header (RFC 9260 §3.3.1).
pub const DATA_CHUNK_HEADER_LEN: usize = 16;

/// Bytes in the SCTP common header (RFC 9260 §3.1).
pub const COMMON_HEADER_LEN: usize = 12;

/// shoal's default SCTP packet size limit (the PMTU as RFC 9260 §1.3 defines it): RFC 8831
/// §5 keeps the initial IP-layer PMTU at 1200 bytes for IPv4, less 28 bytes of IPv4 and
/// UDP headers and 37 bytes of DTLS 1.2 AES-GCM record overhead (13 header, 8 explicit
/// nonce, 16 tag).
pub const DEFAULT_SCTP_MTU: usize = 1200 - 28 - 37;

/// The bytes a DATA chunk carrying `payload_len` bytes of user data takes on the wire,
/// padding included: what cwnd and flightsize count (RFC 9260 §7.2).
pub fn data_chunk_len(payload_len: usize) -> usize {
    DATA_CHUNK_HEADER_LEN + payload_len.div_ceil(4) * 4
}

/// The largest user data a DATA chunk may carry in a packet of `mtu` bytes (PMDCS of RFC
/// 9260 §1.3 less the DATA chunk header), for a packet holding nothing else.
pub fn max_payload_for_mtu(mtu: usize) -> usize {
    mtu.saturating_sub(COMMON_HEADER_LEN + DATA_CHUNK_HEADER_LEN) & !3
}

/// Identifies one user message of an association's send side, unique for its lifetime.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct MessageId(pub u64);

/// How hard the send side tries to deliver a message (RFC 8831 §6.1, RFC 3758 §4.1,
/// RFC 7496 §3.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Reliability {
    /// Retransmitted until acknowledged.
    #[default]
    Reliable,
    /// Abandoned when a chunk of it would be retransmitted more than this many times
    /// (RFC 7496 §3.1; 0 means it is sent once).
    MaxRetransmits(u16),
    /// Abandoned once this long has passed since `send` (RFC 3758 §4.1 "timed reliability").
    MaxLifetime(Duration),
}

/// A user message handed to [`SendQueue::send`].
#[derive(Clone, Debug)]
pub struct OutgoingMessage {
    /// Payload Protocol Identifier (RFC 8831 §8).
    pub ppid: Ppid,
    /// The message; chunks are zero-copy slices of it.
    pub payload: Bytes,
    /// Sent with the U bit: delivered on arrival, no SSN (RFC 9260 §6.6).
    pub unordered: bool,
    /// Partial reliability policy.
    pub policy: Reliability,
}

/// One DATA chunk's worth of a message: what [`SendQueue::produce`] hands out and the
/// [`RetransmissionQueue`] keeps until it is acknowledged or abandoned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DataToSend {
    /// Stream identifier.
    pub stream: StreamId,
    /// Stream sequence number; 0 for unordered chunks, whose SSN the receiver ignores.
    pub ssn: Ssn,
    /// Payload Protocol Identifier.
    pub ppid: Ppid,
    /// The U bit.
    pub unordered: bool,
    /// The B bit: first fragment of the message.
    pub begin: bool,
    /// The E bit: last fragment of the message.
    pub end: bool,
    /// The user data: a zero-copy slice of the message.
    pub payload: Bytes,
    /// Which message this fragment belongs to.
    pub message_id: MessageId,
    /// The message's partial reliability policy.
    pub policy: Reliability,
    /// When a [`Reliability::MaxLifetime`] message expires.
    pub expires_at: Option<Time>,
}

impl DataToSend {
    /// Bytes of the DATA chunk on the wire, padding included.
    pub fn chunk_len(&self) -> usize {
        data_chunk_len(self.payload.len())
    }

    /// Whether the message's lifetime has run out at `now` (RFC 3758 §4.1 TR2).
    pub fn is_expired(&self, now: Time) -> bool {
        self.expires_at.is_some_and(|at| at <= now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_lengths_are_padded() {
        // RFC 9260 §3.3.1: 16-byte header; §3.2: chunks are padded to 4 bytes.
        assert_eq!(data_chunk_len(1), 20);
        assert_eq!(data_chunk_len(4), 20);
        assert_eq!(data_chunk_len(5), 24);
        assert_eq!(max_payload_for_mtu(DEFAULT_SCTP_MTU), 1104);
        assert_eq!(max_payload_for_mtu(10), 0);
    }
}
