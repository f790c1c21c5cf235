//! The receive side of an SCTP association as plain data: which TSNs arrived and when a
//! SACK is owed ([`DataTracker`]), reassembly and ordered delivery of user messages
//! ([`Reassembly`]), and the two driven together for one association ([`Receiver`]).
//!
//! Nothing here does I/O or reads a clock: the delayed-ack timer is the association's
//! (armed for [`TrackerLimits::sack_delay`] when [`AckUrgency::Delayed`] appears). Every
//! number comes from the network, so every operation is bounded and returns a typed
//! result instead of panicking.
//!
//! How a tick uses it: the `sctp` pass calls [`Receiver::handle_data`] and
//! [`Receiver::handle_forward_tsn`] per chunk and [`Receiver::end_of_packet`] per
//! packet; `datachannel` drains [`Receiver::pop_message`]; `sack_batch` reads
//! [`Receiver::ack_urgency`] and builds at most one SACK with [`Receiver::build_sack`].
//! N packets in one tick thus share one SACK.
//!
//! Cost, per operation (R = runs of partial messages held, W = messages waiting for an
//! earlier SSN on one stream, G = gap blocks ≤ [`TrackerLimits::max_gap_blocks`]):
//! - a DATA chunk: O(1) expected (hash lookups); a TSN landing between two gap blocks
//!   adds a binary search and a shift within the G-entry ring;
//! - completing a message of F fragments: O(F), one allocation of its exact size;
//!   an ordered message delivered in order: O(1); one arriving early: O(1) to park;
//! - FORWARD TSN skipping K TSNs: O(min(K, R)) plus the runs and gap blocks it drops
//!   and, per listed stream skipping S SSNs, O(min(S, W)) plus sorting what it frees;
//!   since K and S are also how far the sequence moves, all of it is O(1) amortised
//!   per TSN or SSN;
//! - a SACK: O(G) into the caller's reused buffers, no allocation.
//!
//! Memory: the tracker holds at most G ranges and [`TrackerLimits::max_duplicates`]
//! TSNs (under 1 KiB with the defaults). Reassembly holds at most
//! [`ReassemblyLimits::receive_window_bytes`] of payload in at most
//! [`ReassemblyLimits::max_buffered_chunks`] entries, plus a few words of index per
//! entry and one small record per ordered stream seen (at most the negotiated inbound
//! streams). Payloads are zero-copy slices of the packet they came in, so in the worst
//! case each held entry keeps its whole receive buffer alive: the entry limit bounds
//! that too.
//!
//! Choices beyond the RFC text, each for a stated reason:
//! - A chunk that does not move the cumulative TSN may not fill the last
//!   min(max message, window / 2) bytes or the last quarter of the entries: that
//!   reserve lets the retransmission that fills a gap in, so a buffer full of
//!   out-of-order data cannot deadlock against a sender that overshoots a_rwnd.
//! - A chunk is acknowledged only after reassembly took it, so one dropped for lack
//!   of room never appears in a SACK (RFC 9260 §6.2).
//! - Any duplicate makes the SACK immediate (RFC 9260 §6.2 requires it only when a
//!   packet has no new DATA, and allows it otherwise).
//! - A FORWARD TSN removes every partial message with a TSN at or before its point;
//!   RFC 3758 §3.5 A3 has senders abandon all fragments of a message together.
//! - Two complete messages with one SSN on one stream, fragments of one message that
//!   disagree on stream, U bit or SSN, and oversize messages are errors on which the
//!   association aborts.

mod data_tracker;
mod ordered;
mod reassembly;
mod receiver;

#[cfg(test)]
mod tests;

pub use data_tracker::{AckUrgency, DataTracker, ForwardTsnOutcome, Observed, TrackerLimits};
pub use reassembly::{Reassembly, ReassemblyError, ReassemblyLimits, ResetProgress};
pub use receiver::{DataOutcome, DropReason, Receiver, RxLimits, SackFields};

use bytes::Bytes;

use crate::sctp::num::{Ppid, Ssn, StreamId, Tsn};

/// A received DATA chunk's fields (RFC 9260 §3.3.1) as reassembly needs them; the
/// payload is the chunk's own `Bytes`, sliced out of the packet without copying.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DataIn {
    /// Transmission Sequence Number.
    pub tsn: Tsn,
    /// Stream Identifier.
    pub stream: StreamId,
    /// Stream Sequence Number; meaningless when `unordered` (RFC 9260 §6.6).
    pub ssn: Ssn,
    /// Payload Protocol Identifier.
    pub ppid: Ppid,
    /// U bit: deliver without ordering.
    pub unordered: bool,
    /// B bit: first fragment of a user message.
    pub begin: bool,
    /// E bit: last fragment of a user message.
    pub end: bool,
    /// I bit: the sender asks for the SACK without delay (RFC 9260 §3.3.1, §6.2).
    pub immediate_ack: bool,
    /// User Data, without padding.
    pub payload: Bytes,
}

/// A reassembled user message, ready for the data channel layer (RFC 8831 §6.6).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// The stream (data channel) it arrived on.
    pub stream: StreamId,
    /// The PPID of its first fragment.
    pub ppid: Ppid,
    /// The whole message: the chunk's own bytes when it came in one DATA chunk, else
    /// one buffer of exactly its size.
    pub payload: Bytes,
    /// It was sent unordered (U bit).
    pub unordered: bool,
}
