//! Outstanding DATA chunks (RFC 9260 §6.2.1, §6.3, §7.2.4) and partial reliability
//! (RFC 3758 §3.5, RFC 7496 §3.1).
//!
//! The queue assigns TSNs itself, consecutively, as chunks are added, and keeps them in
//! a ring (`VecDeque`) indexed by their offset from the Cumulative TSN Ack Point: the
//! chunk with TSN `t` sits at `t - cum_ack - 1`. TSNs are unwrapped to `u64` inside, so
//! serial-number arithmetic happens only where a TSN comes in from the network. Every
//! operation touches only the chunks it affects:
//!
//! - a SACK pops the chunks its cumulative ack covers; its (capped, merged) gap blocks are
//!   compared with the previous SACK's, so only TSNs newly gap-acked or reneged on are
//!   visited; and the holes are walked up to the Highest TSN Newly Acknowledged. The
//!   work follows what changed, never the window (`RetransmissionStats::sack_tsn_visits`);
//! - chunks to retransmit sit in a min-heap of TSNs, so the lowest is found in O(log n);
//! - an abandoned message's fragments have consecutive TSNs, found by walking out from
//!   one of them;
//! - the Advanced.Peer.Ack.Point only moves forward, over abandoned chunks, and the
//!   FORWARD-TSN stream list is updated as it moves (see `forward_tsn`).
//!
//! Only the T3-rtx expiry visits the whole window: it marks every chunk in flight.

mod sack;
#[cfg(test)]
mod tests;

pub use sack::{SackError, SackOutcome};

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use bytes::Bytes;

use super::forward_tsn::ForwardTsnStreams;
use super::{DataToSend, MessageId, Reliability, data_chunk_len};
use crate::sctp::num::{Ssn, StreamId, Tsn};
use crate::time::Time;

/// [`RetransmissionQueueConfig::max_outstanding_chunks`] by default.
pub const DEFAULT_MAX_OUTSTANDING_CHUNKS: usize = 1024;

/// Bounds of a [`RetransmissionQueue`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetransmissionQueueConfig {
    /// Most chunks outstanding (sent, not yet cumulatively acked, gap-acked ones
    /// included): the span of TSNs past the peer's cumulative ack. An association
    /// takes it from `SctpLimits::max_outstanding_tsns`, whose doc says why it is
    /// small.
    pub max_outstanding_chunks: usize,
    /// Gap Ack Blocks read from one SACK; the rest are ignored (they are advisory, §7.1).
    pub max_gap_blocks: usize,
    /// Streams one FORWARD-TSN may list. 256 entries take 1 KiB, which fits a packet of
    /// `DEFAULT_SCTP_MTU`; past it the Advanced.Peer.Ack.Point waits (RFC 3758 §3.5 C4).
    pub max_forward_tsn_streams: usize,
}

impl Default for RetransmissionQueueConfig {
    fn default() -> Self {
        RetransmissionQueueConfig {
            max_outstanding_chunks: DEFAULT_MAX_OUTSTANDING_CHUNKS,
            max_gap_blocks: 256,
            max_forward_tsn_streams: 256,
        }
    }
}

/// Counters of a [`RetransmissionQueue`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RetransmissionStats {
    /// SACKs dropped as out of order.
    pub out_of_order_sacks: u64,
    /// SACKs dropped for acknowledging TSNs never sent.
    pub invalid_sacks: u64,
    /// Gap Ack Blocks ignored for Start 0 or Start > End.
    pub bad_gap_blocks: u64,
    /// Chunks marked for fast retransmission.
    pub fast_retransmit_marks: u64,
    /// Chunks marked for retransmission by a T3-rtx expiry.
    pub t3_marks: u64,
    /// Chunks handed out again by `next_retransmission`.
    pub retransmissions: u64,
    /// Messages abandoned (RFC 3758 §3.4).
    pub abandoned_messages: u64,
    /// Chunks abandoned.
    pub abandoned_chunks: u64,
    /// TSNs visited by SACK processing beyond the cumulative ack (gap blocks, holes,
    /// reneging): the work SACKs cost, which must grow with what changes, not the window.
    pub sack_tsn_visits: u64,
}

/// Where an outstanding chunk stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ChunkState {
    /// Sent and counted in flightsize.
    InFlight,
    /// Acked by a gap block: not in flight, but kept until the cumulative ack (§7.1).
    GapAcked,
    /// Waiting in the heap to be retransmitted; not in flight (§6.2.1 C).
    Marked,
    /// Given up on (RFC 3758 §3.4); its payload is released.
    Abandoned,
}

#[derive(Debug)]
struct Outstanding {
    data: DataToSend,
    /// Kept apart from `data.payload`, which is released on abandonment.
    payload_len: usize,
    /// When the chunk was first sent.
    first_sent: Time,
    state: ChunkState,
    misses: u8,
    retransmissions: u16,
    /// Fast retransmitted once already: not eligible again (§7.2.4 rule 5).
    fast_retransmitted: bool,
    /// Acknowledged by some SACK already: if reneged on and acked again, it is not "newly
    /// acknowledged" (§7.2.4) and is not credited twice.
    acked_before: bool,
}

impl Outstanding {
    fn chunk_len(&self) -> usize {
        data_chunk_len(self.payload_len)
    }
}

/// The chunks an association has sent and not yet seen cumulatively acknowledged.
#[derive(Debug)]
pub struct RetransmissionQueue {
    config: RetransmissionQueueConfig,
    items: VecDeque<Outstanding>,
    /// The Cumulative TSN Ack Point, unwrapped; `items[0]` has TSN `cum_ack + 1`.
    cum_ack: u64,
    /// The Advanced.Peer.Ack.Point (RFC 3758 §3.5 A1), unwrapped, never below `cum_ack`.
    adv_peer_ack: u64,
    bytes_in_flight: usize,
    payload_in_flight: usize,
    peer_a_rwnd: u32,
    /// The previous SACK's gap blocks (merged, unwrapped): exactly the TSNs it left
    /// gap-acked, so a SACK is compared with it instead of revisiting its blocks' span.
    prev_blocks: Vec<(u64, u64)>,
    /// TSNs of `Marked` chunks, lowest first; entries whose chunk moved on are stale.
    rtx_heap: BinaryHeap<Reverse<u64>>,
    marked: usize,
    /// The chunk being timed for an RTT sample, one per round trip (§6.3.1 C4).
    rtt_probe: Option<u64>,
    /// The highest TSN assigned when a chunk was last retransmitted: chunks up to it may
    /// not give RTT samples (§6.3.1 C5, applied conservatively to every earlier TSN).
    karn_fence: u64,
    forward: ForwardTsnStreams,
    /// Sender's Last Assigned TSNs of outgoing SSN reset requests the cumulative ack has
    /// not reached yet, lowest first (see `begin_stream_reset`).
    reset_points: VecDeque<u64>,
    discards: Vec<(StreamId, MessageId)>,
    /// Reused per SACK: the gap blocks as received, then merged and unwrapped.
    gap_scratch: Vec<(u16, u16)>,
    merged: Vec<(u64, u64)>,
    block_diff: Vec<(u64, u64)>,
    stats: RetransmissionStats,
}

impl RetransmissionQueue {
    /// An empty queue whose first chunk gets `initial_tsn`, the peer's receive window
    /// starting at the a_rwnd of its INIT or INIT ACK (RFC 9260 §6.2.1 A).
    pub fn new(
        config: RetransmissionQueueConfig,
        initial_tsn: Tsn,
        peer_a_rwnd: u32,
    ) -> RetransmissionQueue {
        // Offset by 2^32 so that `initial_tsn - 1` does not underflow.
        let cum_ack = (1u64 << 32) + u64::from(initial_tsn.0) - 1;
        RetransmissionQueue {
            forward: ForwardTsnStreams::new(config.max_forward_tsn_streams),
            config,
            items: VecDeque::new(),
            cum_ack,
            adv_peer_ack: cum_ack,
            bytes_in_flight: 0,
            payload_in_flight: 0,
            peer_a_rwnd,
            prev_blocks: Vec::new(),
            rtx_heap: BinaryHeap::new(),
            marked: 0,
            rtt_probe: None,
            karn_fence: cum_ack,
            reset_points: VecDeque::new(),
            discards: Vec::new(),
            gap_scratch: Vec::new(),
            merged: Vec::new(),
            block_diff: Vec::new(),
            stats: RetransmissionStats::default(),
        }
    }

    /// Whether another chunk may be added (`max_outstanding_chunks`).
    pub fn can_add(&self) -> bool {
        self.items.len() < self.config.max_outstanding_chunks
    }

    /// Records a chunk being sent for the first time at `now` and returns its TSN, the
    /// next in sequence, with the stored chunk to serialize (no copy). Returns `None` when
    /// the chunk's message has expired (RFC 3758 §4.1 TR4): it still consumes a TSN, but
    /// it and the rest of its message are abandoned at once and must not be transmitted.
    ///
    /// The caller checks `can_add` first and adds every chunk `SendQueue::produce` gives,
    /// in order, so that a message's fragments have consecutive TSNs.
    pub fn add(&mut self, now: Time, data: DataToSend) -> Option<(Tsn, &DataToSend)> {
        debug_assert!(self.can_add(), "RetransmissionQueue::add past its limit");
        let tsn = self.next_unwrapped();
        let expired = data.is_expired(now);
        let payload_len = data.payload.len();
        self.items.push_back(Outstanding {
            data,
            payload_len,
            first_sent: now,
            state: ChunkState::InFlight,
            misses: 0,
            retransmissions: 0,
            fast_retransmitted: false,
            acked_before: false,
        });
        self.bytes_in_flight += data_chunk_len(payload_len);
        self.payload_in_flight += payload_len;
        if expired {
            self.abandon_message(tsn);
            return None;
        }
        if self.rtt_probe.is_none() {
            self.rtt_probe = Some(tsn);
        }
        let stored = &self.items.back()?.data;
        Some((wrap(tsn), stored))
    }

    /// The T3-rtx timer expired (RFC 9260 §6.3.3): every chunk in flight is marked for
    /// retransmission, or abandoned if its policy says so, and the Advanced.Peer.Ack.Point
    /// is advanced (RFC 3758 §3.5 A5). Returns how many chunks were marked. O(window).
    pub fn handle_t3_expiry(&mut self, now: Time) -> usize {
        let before = self.stats.t3_marks;
        for idx in 0..self.items.len() {
            if self.items[idx].state == ChunkState::InFlight {
                let tsn = self.cum_ack + 1 + idx as u64;
                self.mark_or_abandon(now, tsn, false);
            }
        }
        // Everything in flight will be sent again: nothing can be timed (Karn).
        self.rtt_probe = None;
        self.advance_peer_ack_point();
        (self.stats.t3_marks - before) as usize
    }

    /// The lowest-TSN chunk marked for retransmission if its user data, padded to 4 bytes,
    /// fits `max_payload` bytes (RFC 9260 §6.3.3 E3 and §7.2.4 rule 3 take the earliest first), now counted
    /// in flight again. Chunks whose lifetime has run out are abandoned on the way (RFC
    /// 3758 §4.1 TR4). `None` when nothing is marked or the lowest does not fit: a chunk
    /// keeps its TSN, so it cannot be split, and TSNs go out in increasing order within a
    /// packet (§6.10), so the caller starts a new packet. The chunk is lent, not copied.
    pub fn next_retransmission(
        &mut self,
        now: Time,
        max_payload: usize,
    ) -> Option<(Tsn, &DataToSend)> {
        while let Some(&Reverse(tsn)) = self.rtx_heap.peek() {
            let Some(idx) = self.index_of(tsn) else {
                self.rtx_heap.pop();
                continue;
            };
            let item = &self.items[idx];
            if item.state != ChunkState::Marked {
                self.rtx_heap.pop();
                continue;
            }
            if item.data.is_expired(now) {
                self.rtx_heap.pop();
                self.abandon_message(tsn);
                continue;
            }
            if item.payload_len.div_ceil(4) * 4 > max_payload {
                return None;
            }
            self.rtx_heap.pop();
            let item = &mut self.items[idx];
            item.state = ChunkState::InFlight;
            item.retransmissions = item.retransmissions.saturating_add(1);
            item.misses = 0;
            let (chunk_len, payload_len) = (item.chunk_len(), item.payload_len);
            self.marked -= 1;
            self.bytes_in_flight += chunk_len;
            self.payload_in_flight += payload_len;
            self.karn_fence = self.highest_unwrapped();
            self.stats.retransmissions += 1;
            return Some((wrap(tsn), &self.items[idx].data));
        }
        None
    }

    /// Whether chunks wait for retransmission.
    pub fn has_retransmissions(&self) -> bool {
        self.marked > 0
    }

    /// Whether a FORWARD TSN is owed (the Advanced.Peer.Ack.Point is past the
    /// cumulative ack, RFC 3758 §3.5 C1): [`RetransmissionQueue::forward_tsn`]
    /// without building its stream list.
    pub fn forward_tsn_owed(&self) -> bool {
        self.adv_peer_ack > self.cum_ack
    }

    /// The FORWARD-TSN to send, if the Advanced.Peer.Ack.Point is past the Cumulative TSN
    /// Ack Point (RFC 3758 §3.5 C3): returns the New Cumulative TSN and appends to `out`
    /// each ordered stream skipped with its largest skipped SSN (C4; unordered streams are
    /// never listed, §3.2). O(streams listed).
    pub fn forward_tsn(&self, out: &mut Vec<(StreamId, Ssn)>) -> Option<Tsn> {
        if self.adv_peer_ack <= self.cum_ack {
            return None;
        }
        self.forward.write(out);
        Some(wrap(self.adv_peer_ack))
    }

    /// An Outgoing SSN Reset Request is about to go out: returns its Sender's Last Assigned
    /// TSN (RFC 6525 §5.1.2 A3). Until the peer's cumulative ack reaches that TSN, no
    /// FORWARD-TSN moves past it: the peer resets the streams once its cumulative TSN gets
    /// there, so a FORWARD-TSN reaching beyond it could pair a stream's SSN from before the
    /// reset with the stream's new, restarted sequence. RFC 6525 §5.1.1 allows one request
    /// in flight, so at most a few such points are kept (16; more are not recorded).
    pub fn begin_stream_reset(&mut self) -> Tsn {
        let point = self.highest_unwrapped();
        if point > self.cum_ack
            && self.reset_points.back() != Some(&point)
            && self.reset_points.len() < 16
        {
            self.reset_points.push_back(point);
        }
        wrap(point)
    }

    /// Moves into `out` the messages abandoned while fragments of them were still in the
    /// send queue: pass each to `SendQueue::discard_message` (RFC 3758 §3.5 A3).
    pub fn take_discards(&mut self, out: &mut Vec<(StreamId, MessageId)>) {
        out.append(&mut self.discards);
    }

    /// Chunk bytes in flight (flightsize, RFC 9260 §7.2).
    pub fn bytes_in_flight(&self) -> usize {
        self.bytes_in_flight
    }

    /// User data bytes in flight.
    pub fn payload_bytes_in_flight(&self) -> usize {
        self.payload_in_flight
    }

    /// The a_rwnd of the peer's last SACK (or of its INIT / INIT ACK): zero while it
    /// keeps its window closed, whatever is in flight.
    pub fn peer_advertised_rwnd(&self) -> u32 {
        self.peer_a_rwnd
    }

    /// The peer's receive window: the last a_rwnd less the user data still outstanding
    /// (RFC 9260 §6.2.1 B, C, D ii).
    pub fn peer_rwnd(&self) -> usize {
        (self.peer_a_rwnd as usize).saturating_sub(self.payload_in_flight)
    }

    /// The Cumulative TSN Ack Point.
    pub fn cumulative_tsn_ack(&self) -> Tsn {
        wrap(self.cum_ack)
    }

    /// The Advanced.Peer.Ack.Point (RFC 3758 §3.5 A1).
    pub fn advanced_peer_ack_point(&self) -> Tsn {
        wrap(self.adv_peer_ack)
    }

    /// The TSN the next added chunk will get.
    pub fn next_tsn(&self) -> Tsn {
        wrap(self.next_unwrapped())
    }

    /// The highest TSN assigned so far (the initial TSN minus one before any).
    pub fn highest_sent_tsn(&self) -> Tsn {
        wrap(self.highest_unwrapped())
    }

    /// Chunks held: outstanding, gap-acked or abandoned, up to the cumulative ack.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether every chunk sent has been cumulatively acknowledged.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Whether anything is in flight or waits for retransmission (T3-rtx should run).
    pub fn has_outstanding_data(&self) -> bool {
        self.bytes_in_flight > 0 || self.marked > 0
    }

    /// Counters.
    pub fn stats(&self) -> RetransmissionStats {
        self.stats
    }

    fn next_unwrapped(&self) -> u64 {
        self.cum_ack + 1 + self.items.len() as u64
    }

    fn highest_unwrapped(&self) -> u64 {
        self.cum_ack + self.items.len() as u64
    }

    fn index_of(&self, tsn: u64) -> Option<usize> {
        let idx = tsn.checked_sub(self.cum_ack + 1)? as usize;
        (idx < self.items.len()).then_some(idx)
    }

    fn leave_flight(&mut self, chunk_len: usize, payload_len: usize) {
        self.bytes_in_flight -= chunk_len;
        self.payload_in_flight -= payload_len;
    }

    /// Marks the in-flight chunk `tsn` for retransmission, or abandons its message when
    /// one more retransmission would break its policy (RFC 7496 §3.1, RFC 3758 §4.1 TR4).
    fn mark_or_abandon(&mut self, now: Time, tsn: u64, fast: bool) {
        let Some(idx) = self.index_of(tsn) else {
            return;
        };
        let item = &mut self.items[idx];
        let give_up = match item.data.policy {
            Reliability::Reliable => false,
            Reliability::MaxRetransmits(max) => item.retransmissions >= max,
            Reliability::MaxLifetime(_) => item.data.is_expired(now),
        };
        if give_up {
            self.abandon_message(tsn);
            return;
        }
        debug_assert_eq!(item.state, ChunkState::InFlight);
        item.state = ChunkState::Marked;
        item.misses = 0;
        if fast {
            // §7.2.4 rule 5: not eligible for another fast retransmit.
            item.fast_retransmitted = true;
            self.stats.fast_retransmit_marks += 1;
        } else {
            self.stats.t3_marks += 1;
        }
        let (chunk_len, payload_len) = (item.chunk_len(), item.payload_len);
        self.leave_flight(chunk_len, payload_len);
        self.marked += 1;
        self.rtx_heap.push(Reverse(tsn));
        if self.rtt_probe == Some(tsn) {
            self.rtt_probe = None;
        }
    }

    /// Abandons every fragment of the message `tsn` belongs to (RFC 3758 §3.5 A2, A3).
    /// The fragments have consecutive TSNs, so this walks out from `tsn` and no further.
    fn abandon_message(&mut self, tsn: u64) {
        let Some(idx) = self.index_of(tsn) else {
            return;
        };
        let id = self.items[idx].data.message_id;
        let mut first = idx;
        while first > 0
            && !self.items[first].data.begin
            && self.items[first - 1].data.message_id == id
        {
            first -= 1;
        }
        let mut last = idx;
        while !self.items[last].data.end
            && last + 1 < self.items.len()
            && self.items[last + 1].data.message_id == id
        {
            last += 1;
        }
        for i in first..=last {
            self.abandon_chunk(i);
        }
        if !self.items[last].data.end {
            // The rest of the message is still in the send queue: it goes too, and an
            // end marker takes the next TSN (see `push_end_marker`).
            let tail = &self.items[last].data;
            self.discards.push((tail.stream, id));
            // A started message is the tail when the caller adds every produced chunk.
            if last + 1 == self.items.len() {
                self.push_end_marker(last);
            }
        }
        self.stats.abandoned_messages += 1;
        self.advance_peer_ack_point();
    }

    /// Closes a message abandoned before its last fragment was sent with an abandoned,
    /// never-sent "end" that takes the next TSN. Without it the next message's first
    /// fragment would directly follow this message's last sent one, and a receiver that
    /// reassembles unordered messages by TSN adjacency could see a B fragment where it
    /// waits for this message's E (dcSCTP does the same). The FORWARD-TSN covers it.
    fn push_end_marker(&mut self, last: usize) {
        let tail = &self.items[last];
        let data = DataToSend {
            begin: false,
            end: true,
            payload: Bytes::new(),
            ..tail.data.clone()
        };
        let first_sent = tail.first_sent;
        self.items.push_back(Outstanding {
            data,
            payload_len: 0,
            first_sent,
            state: ChunkState::Abandoned,
            misses: 0,
            retransmissions: 0,
            fast_retransmitted: false,
            acked_before: false,
        });
    }

    fn abandon_chunk(&mut self, idx: usize) {
        let item = &mut self.items[idx];
        match item.state {
            ChunkState::InFlight => {
                let (chunk_len, payload_len) = (item.chunk_len(), item.payload_len);
                self.leave_flight(chunk_len, payload_len);
            }
            ChunkState::Marked => self.marked -= 1,
            ChunkState::GapAcked => {}
            ChunkState::Abandoned => return,
        }
        let item = &mut self.items[idx];
        item.state = ChunkState::Abandoned;
        // Treated as acked and no longer outstanding (A2): nothing needs the bytes now.
        item.data.payload = Bytes::new();
        self.stats.abandoned_chunks += 1;
        let tsn = self.cum_ack + 1 + idx as u64;
        if self.rtt_probe == Some(tsn) {
            self.rtt_probe = None;
        }
    }

    /// RFC 3758 §3.5 C1, C2: the Advanced.Peer.Ack.Point follows the Cumulative TSN Ack
    /// Point and moves on over abandoned chunks, recording the ordered ones for the
    /// FORWARD-TSN as it goes. It only ever moves forward, so each chunk is passed once.
    fn advance_peer_ack_point(&mut self) {
        self.adv_peer_ack = self.adv_peer_ack.max(self.cum_ack);
        while self
            .reset_points
            .front()
            .is_some_and(|&p| p <= self.cum_ack)
        {
            self.reset_points.pop_front();
        }
        let limit = self.reset_points.front().copied().unwrap_or(u64::MAX);
        while let Some(item) = self.items.get((self.adv_peer_ack - self.cum_ack) as usize) {
            if item.state != ChunkState::Abandoned || self.adv_peer_ack >= limit {
                break;
            }
            let data = &item.data;
            if !data.unordered
                && !self
                    .forward
                    .record(data.stream, data.ssn, self.adv_peer_ack + 1)
            {
                break;
            }
            self.adv_peer_ack += 1;
        }
    }

    /// Rebuilds the heap once stale entries outnumber live ones: amortized O(1) per push.
    fn tidy_heap(&mut self) {
        if self.rtx_heap.len() <= 2 * self.marked + 64 {
            return;
        }
        self.rtx_heap.clear();
        for (idx, item) in self.items.iter().enumerate() {
            if item.state == ChunkState::Marked {
                self.rtx_heap.push(Reverse(self.cum_ack + 1 + idx as u64));
            }
        }
    }

    #[cfg(test)]
    fn forward_streams(&self) -> usize {
        self.forward.len()
    }
}

fn wrap(tsn: u64) -> Tsn {
    Tsn(tsn as u32)
}
