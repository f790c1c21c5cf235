//! Reassembly of user messages from DATA chunks (RFC 9260 §6.9), unordered delivery as
//! soon as a message is whole and ordered delivery by SSN (§6.6), FORWARD TSN's
//! clean-up (RFC 3758 §3.6) and stream resets (RFC 6525 §5.2.2), within a bounded
//! receive buffer (§6.2).
//!
//! The fragments of one message carry consecutive TSNs from its B chunk to its E chunk
//! (RFC 9260 §3.3.1: they "MUST be strictly sequential"), whatever stream they are on.
//! So partial messages are kept as runs of consecutive TSNs, indexed by their first and
//! last TSN: a fragment joins its neighbours with two hash lookups, and a message is
//! whole when its run holds both a B and an E. That is O(1) per fragment, plus one
//! pass over the fragments when the message is joined into a single buffer.

use std::collections::VecDeque;

use crate::sctp::FastMap as HashMap;

use bytes::{Bytes, BytesMut};

use crate::sctp::num::{Ppid, Ssn, StreamId, Tsn};

use super::ordered::{Inserted, OrderedStreams, Released};
use super::{DataIn, Message};

/// Bounds on what one association's receive side holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReassemblyLimits {
    /// The receive buffer, announced as a_rwnd in INIT/INIT ACK; payload bytes held
    /// (fragments and undelivered messages) never exceed it (RFC 9260 §6.2).
    pub receive_window_bytes: u32,
    /// The largest user message accepted; at most the receive window. WebRTC peers
    /// learn it from SDP's max-message-size.
    pub max_message_bytes: u32,
    /// Most chunks and messages held at once, whatever their size, so 1-byte
    /// fragments cannot make the per-entry overhead unbounded. Each held payload is a
    /// zero-copy slice that keeps its whole receive buffer alive (the DTLS layer's
    /// 16 KiB chunk today), so this also bounds the memory pinned that way.
    pub max_buffered_chunks: u32,
    /// Inbound streams negotiated in INIT/INIT ACK; stream ids from 0 to one less.
    pub inbound_streams: u32,
}

impl ReassemblyLimits {
    /// The limits with every field brought into its allowed range.
    pub fn clamped(self) -> ReassemblyLimits {
        let window = self.receive_window_bytes.max(1);
        ReassemblyLimits {
            receive_window_bytes: window,
            max_message_bytes: self.max_message_bytes.clamp(1, window),
            max_buffered_chunks: self.max_buffered_chunks.max(4),
            inbound_streams: self.inbound_streams.min(1 << 16),
        }
    }
}

impl Default for ReassemblyLimits {
    fn default() -> Self {
        ReassemblyLimits {
            receive_window_bytes: 1 << 20,
            max_message_bytes: 256 << 10,
            max_buffered_chunks: 4 << 10,
            inbound_streams: u32::from(u16::MAX),
        }
    }
}

/// A DATA chunk reassembly refused. The first five are the caller's to avoid (the
/// [`super::Receiver`] does); the others are the peer breaking the protocol, after
/// which the association aborts.
#[derive(Debug, thiserror::Error, Clone, Copy, PartialEq, Eq)]
pub enum ReassemblyError {
    /// A DATA chunk without user data (RFC 9260 §3.3.1 requires L > 0; §6.2 answers
    /// with ABORT and the "No User Data" cause).
    #[error("DATA chunk {} carries no user data", tsn.0)]
    NoUserData {
        /// The TSN of the empty chunk.
        tsn: Tsn,
    },
    /// A stream id at or past the negotiated inbound stream count (RFC 9260 §6.5).
    #[error("DATA on stream {} which was not negotiated", stream.0)]
    InvalidStream {
        /// The stream id as received.
        stream: StreamId,
    },
    /// A TSN at or behind a FORWARD TSN's New Cumulative TSN.
    #[error("TSN {} is at or behind the cumulative TSN", tsn.0)]
    BehindCumulative {
        /// The TSN.
        tsn: Tsn,
    },
    /// This TSN is already held.
    #[error("TSN {} is already held", tsn.0)]
    AlreadyBuffered {
        /// The TSN.
        tsn: Tsn,
    },
    /// No room left in the receive buffer (bytes or chunks).
    #[error("no room in the receive buffer for TSN {}", tsn.0)]
    WindowFull {
        /// The TSN refused.
        tsn: Tsn,
    },
    /// A user message grew past [`ReassemblyLimits::max_message_bytes`].
    #[error("message on stream {} exceeds {bytes} bytes", stream.0)]
    MessageTooLarge {
        /// The stream the message came on.
        stream: StreamId,
        /// Its size so far, in bytes.
        bytes: usize,
    },
    /// A fragment's stream, U bit or SSN differs from its neighbours' in the same
    /// message (RFC 9260 §3.3.1, §6.9).
    #[error("fragment TSN {} does not match the rest of its message", tsn.0)]
    InconsistentFragments {
        /// The TSN of the fragment.
        tsn: Tsn,
    },
    /// Two different complete messages with one SSN on one stream (RFC 9260 §6.5).
    #[error("two messages with SSN {} on stream {}", ssn.0, stream.0)]
    DuplicateSsn {
        /// The stream.
        stream: StreamId,
        /// The SSN used twice.
        ssn: Ssn,
    },
    /// A stream reset request while a deferred one still waits (RFC 6525 §5.2.2 E2);
    /// answer "In progress".
    #[error("a stream reset is already in progress")]
    ResetInProgress,
}

/// Where a stream reset request stands (RFC 6525 §5.2.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResetProgress {
    /// The incoming SSNs are back at 0 (E3): answer "Success - Performed".
    Performed,
    /// The cumulative TSN has not reached the sender's last assigned TSN (E2): answer
    /// "In progress"; [`Reassembly::take_reset_performed`] says when it is done.
    Deferred,
}

/// A run of held fragments with consecutive TSNs, all of one message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Run {
    last: Tsn,
    bytes: usize,
    /// The first fragment has the B bit: the run starts its message.
    begins: bool,
    /// The last fragment has the E bit: the run ends its message.
    ends: bool,
    stream: StreamId,
    ssn: Ssn,
    /// The PPID of the run's first fragment.
    ppid: Ppid,
    unordered: bool,
}

impl Run {
    /// Whether `chunk` may belong to the same message (RFC 9260 §6.9: same stream,
    /// same SSN, U bit on every fragment or none; §6.6: SSN ignored when unordered).
    fn matches(&self, chunk: &DataIn) -> bool {
        self.stream == chunk.stream
            && self.unordered == chunk.unordered
            && (self.unordered || self.ssn == chunk.ssn)
    }
}

/// A reset waiting for the cumulative TSN to reach the sender's last assigned TSN.
#[derive(Clone, Debug, PartialEq, Eq)]
struct DeferredReset {
    last_tsn: Tsn,
    /// The streams to reset; empty for all of them.
    streams: Vec<StreamId>,
}

/// One association's reassembly queue and ordered-delivery state.
#[derive(Debug)]
pub struct Reassembly {
    limits: ReassemblyLimits,
    /// Held fragments by TSN.
    fragments: HashMap<Tsn, Bytes>,
    /// Runs of held fragments by their first TSN.
    runs: HashMap<Tsn, Run>,
    /// The first TSN of each run, by its last TSN.
    run_by_last: HashMap<Tsn, Tsn>,
    ordered: OrderedStreams,
    /// Whole messages in delivery order.
    ready: VecDeque<Message>,
    /// Payload bytes held: fragments, waiting and ready messages.
    buffered_bytes: usize,
    /// Fragments and messages held.
    buffered_entries: usize,
    /// The highest New Cumulative TSN a FORWARD TSN brought. No run starts at or
    /// before it: that is what lets FORWARD TSN find stale runs without a scan.
    floor: Option<Tsn>,
    deferred_reset: Option<DeferredReset>,
    reset_performed: bool,
    /// Payload bytes accepted and then thrown away (abandoned, orphaned or stale).
    discarded_bytes: u64,
    /// Reused for the first TSNs of runs a FORWARD TSN removes.
    scratch: Vec<Tsn>,
}

impl Reassembly {
    /// An empty reassembly queue.
    pub fn new(limits: ReassemblyLimits) -> Reassembly {
        Reassembly {
            limits: limits.clamped(),
            fragments: HashMap::default(),
            runs: HashMap::default(),
            run_by_last: HashMap::default(),
            ordered: OrderedStreams::default(),
            ready: VecDeque::new(),
            buffered_bytes: 0,
            buffered_entries: 0,
            floor: None,
            deferred_reset: None,
            reset_performed: false,
            discarded_bytes: 0,
            scratch: Vec::new(),
        }
    }

    /// The limits in force (after clamping).
    pub fn limits(&self) -> &ReassemblyLimits {
        &self.limits
    }

    /// Payload bytes held; a_rwnd is the receive window minus this (RFC 9260 §6.2,
    /// "decrement a_rwnd by the number of bytes received and buffered").
    pub fn buffered_bytes(&self) -> usize {
        self.buffered_bytes
    }

    /// Fragments and whole messages held.
    pub fn buffered_chunks(&self) -> usize {
        self.buffered_entries
    }

    /// Payload bytes accepted and later discarded: abandoned by FORWARD TSN, orphaned
    /// (their message's start was abandoned) or stale (their SSN already passed).
    pub fn discarded_bytes(&self) -> u64 {
        self.discarded_bytes
    }

    /// Whether `stream` is one of the negotiated inbound streams (RFC 9260 §6.5).
    pub fn accepts_stream(&self, stream: StreamId) -> bool {
        u32::from(stream.0) < self.limits.inbound_streams
    }

    /// Whether a chunk of `len` bytes may be buffered now. A chunk that would move the
    /// cumulative TSN may use the whole buffer; any other keeps a reserve free (the
    /// smaller of the largest message and half the window, and a quarter of the chunk
    /// count), so a buffer filled with out-of-order data can still take the
    /// retransmission that fills the gap and let delivery go on.
    pub fn has_room(&self, len: usize, advances_cumulative: bool) -> bool {
        let window = self.limits.receive_window_bytes as usize;
        let chunks = self.limits.max_buffered_chunks as usize;
        let (bytes_cap, chunks_cap) = if advances_cumulative {
            (window, chunks)
        } else {
            let reserve = (self.limits.max_message_bytes as usize).min(window / 2);
            (window - reserve, chunks - chunks / 4)
        };
        self.buffered_bytes.saturating_add(len) <= bytes_cap && self.buffered_entries < chunks_cap
    }

    /// Takes a DATA chunk the tracker found new. Its payload is kept as is; a message
    /// in one chunk is delivered without a copy.
    pub fn add(&mut self, chunk: DataIn) -> Result<(), ReassemblyError> {
        let tsn = chunk.tsn;
        let len = chunk.payload.len();
        if len == 0 {
            return Err(ReassemblyError::NoUserData { tsn });
        }
        if !self.accepts_stream(chunk.stream) {
            return Err(ReassemblyError::InvalidStream {
                stream: chunk.stream,
            });
        }
        if self.floor.is_some_and(|f| !tsn.is_after(f)) {
            return Err(ReassemblyError::BehindCumulative { tsn });
        }
        if self.fragments.contains_key(&tsn) {
            return Err(ReassemblyError::AlreadyBuffered { tsn });
        }
        if self.buffered_bytes.saturating_add(len) > self.limits.receive_window_bytes as usize
            || self.buffered_entries >= self.limits.max_buffered_chunks as usize
        {
            return Err(ReassemblyError::WindowFull { tsn });
        }
        if !(chunk.begin && chunk.end) {
            return self.add_fragment(chunk);
        }
        if len > self.limits.max_message_bytes as usize {
            return Err(ReassemblyError::MessageTooLarge {
                stream: chunk.stream,
                bytes: len,
            });
        }
        self.buffered_bytes += len;
        self.buffered_entries += 1;
        let message = Message {
            stream: chunk.stream,
            ppid: chunk.ppid,
            payload: chunk.payload,
            unordered: chunk.unordered,
        };
        self.complete(message, chunk.ssn, tsn)
    }

    /// Holds one fragment, joining it to the runs just before and after it.
    fn add_fragment(&mut self, chunk: DataIn) -> Result<(), ReassemblyError> {
        let tsn = chunk.tsn;
        let left = match chunk.begin {
            true => None,
            false => self
                .run_by_last
                .get(&tsn.prev())
                .and_then(|first| self.runs.get(first).map(|run| (*first, *run)))
                .filter(|(_, run)| !run.ends),
        };
        let right = match chunk.end {
            true => None,
            false => self
                .runs
                .get(&tsn.next())
                .copied()
                .filter(|run| !run.begins),
        };
        let neighbours = left.map(|(_, run)| run).into_iter().chain(right);
        if neighbours.clone().any(|run| !run.matches(&chunk)) {
            return Err(ReassemblyError::InconsistentFragments { tsn });
        }
        let bytes = chunk.payload.len() + neighbours.map(|run| run.bytes).sum::<usize>();
        if bytes > self.limits.max_message_bytes as usize {
            return Err(ReassemblyError::MessageTooLarge {
                stream: chunk.stream,
                bytes,
            });
        }
        let first = left.map_or(tsn, |(first, _)| first);
        let run = Run {
            last: right.map_or(tsn, |run| run.last),
            bytes,
            begins: left.map_or(chunk.begin, |(_, run)| run.begins),
            ends: right.map_or(chunk.end, |run| run.ends),
            stream: chunk.stream,
            ssn: chunk.ssn,
            ppid: left.map_or(chunk.ppid, |(_, run)| run.ppid),
            unordered: chunk.unordered,
        };
        if let Some((_, old)) = left {
            self.run_by_last.remove(&old.last);
        }
        if let Some(old) = right {
            self.runs.remove(&tsn.next());
            self.run_by_last.remove(&old.last);
        }
        self.buffered_bytes += chunk.payload.len();
        self.buffered_entries += 1;
        self.fragments.insert(tsn, chunk.payload);
        self.runs.insert(first, run);
        self.run_by_last.insert(run.last, first);
        if run.begins && run.ends {
            return self.assemble(first);
        }
        if !run.begins && self.floor.is_some_and(|f| !first.prev().is_after(f)) {
            // Its message began at or before a FORWARD TSN's point: that start was
            // abandoned, so this run can never be whole (RFC 3758 §3.5 A3).
            self.discard_run(first);
        }
        Ok(())
    }

    /// Joins a whole run into one buffer of exactly its size and passes the message on.
    fn assemble(&mut self, first: Tsn) -> Result<(), ReassemblyError> {
        let Some(run) = self.runs.remove(&first) else {
            return Ok(());
        };
        self.run_by_last.remove(&run.last);
        let mut payload = BytesMut::with_capacity(run.bytes);
        let mut tsn = first;
        for _ in 0..self.run_len(first, &run) {
            if let Some(fragment) = self.fragments.remove(&tsn) {
                payload.extend_from_slice(&fragment);
                self.buffered_entries -= 1;
            }
            tsn = tsn.next();
        }
        self.buffered_entries += 1;
        let message = Message {
            stream: run.stream,
            ppid: run.ppid,
            payload: payload.freeze(),
            unordered: run.unordered,
        };
        self.complete(message, run.ssn, first)
    }

    /// The TSNs in a run; each has a held fragment, so never more than are held.
    fn run_len(&self, first: Tsn, run: &Run) -> usize {
        (run.last.distance_from(first) as usize + 1).min(self.fragments.len())
    }

    /// Routes a whole message (already counted as one held entry): unordered ones are
    /// ready at once (RFC 9260 §6.6, "bypasses the ordering mechanism"), ordered ones
    /// go by SSN.
    fn complete(
        &mut self,
        message: Message,
        ssn: Ssn,
        first_tsn: Tsn,
    ) -> Result<(), ReassemblyError> {
        if message.unordered {
            self.ready.push_back(message);
            return Ok(());
        }
        let stream = message.stream;
        let held = self.deferred_reset.as_ref().is_some_and(|reset| {
            first_tsn.is_after(reset.last_tsn)
                && (reset.streams.is_empty() || self.ordered.reset_pending(stream))
        });
        if held {
            // RFC 6525 §5.2.2 E2: data after the sender's last assigned TSN "MUST be
            // queued locally and held until the cumulative acknowledgment point reaches"
            // it; it belongs to the stream's new numbering.
            self.ordered.hold(stream, ssn, message);
            return Ok(());
        }
        match self.ordered.insert(stream, ssn, message, &mut self.ready) {
            Inserted::Kept => Ok(()),
            Inserted::Stale(message) => {
                self.release(&message);
                Ok(())
            }
            Inserted::DuplicateSsn(message) => {
                self.release(&message);
                Err(ReassemblyError::DuplicateSsn { stream, ssn })
            }
        }
    }

    fn release(&mut self, message: &Message) {
        let bytes = message.payload.len();
        self.buffered_bytes -= bytes;
        self.buffered_entries -= 1;
        self.discarded_bytes += bytes as u64;
    }

    fn release_all(&mut self, released: Released) {
        self.buffered_bytes -= released.bytes;
        self.buffered_entries -= released.messages;
        self.discarded_bytes += released.bytes as u64;
    }

    /// Drops a run and its fragments.
    fn discard_run(&mut self, first: Tsn) {
        let Some(run) = self.runs.remove(&first) else {
            return;
        };
        self.run_by_last.remove(&run.last);
        let mut tsn = first;
        for _ in 0..self.run_len(first, &run) {
            if self.fragments.remove(&tsn).is_some() {
                self.buffered_entries -= 1;
            }
            tsn = tsn.next();
        }
        self.buffered_bytes -= run.bytes;
        self.discarded_bytes += run.bytes as u64;
    }

    /// Whether a whole message on `stream` waits to be taken. O(messages waiting).
    pub fn has_message_on(&self, stream: StreamId) -> bool {
        self.ready.iter().any(|m| m.stream == stream)
    }

    /// The next whole message in delivery order, left where it is (its bytes still
    /// count against the window).
    pub fn peek_message(&self) -> Option<&Message> {
        self.ready.front()
    }

    /// The next whole message in delivery order, freeing its bytes.
    pub fn pop_message(&mut self) -> Option<Message> {
        let message = self.ready.pop_front()?;
        self.buffered_bytes -= message.payload.len();
        self.buffered_entries -= 1;
        Some(message)
    }

    /// Applies a FORWARD TSN (RFC 3758 §3.6): drops every partial message with a TSN at
    /// or before `new_cumulative` ("The receiver MUST remove any partially reassembled
    /// message, which is still missing one or more TSNs earlier than or equal to the
    /// new cumulative TSN point"; a whole message's TSNs are abandoned together, §3.5
    /// A3), then for each `(stream, ssn)` delivers what waited for SSNs up to `ssn`
    /// and expects `ssn + 1` next. Costs O(min(TSNs skipped, runs held)) plus the work
    /// on what it frees: O(1) amortised per TSN.
    pub fn handle_forward_tsn(&mut self, new_cumulative: Tsn, skipped: &[(StreamId, Ssn)]) {
        if self.floor.is_none_or(|f| new_cumulative.is_after(f)) {
            self.discard_runs_through(new_cumulative);
            self.floor = Some(new_cumulative);
            if self
                .runs
                .get(&new_cumulative.next())
                .is_some_and(|run| !run.begins)
            {
                self.discard_run(new_cumulative.next());
            }
        }
        // A reset due by now applies before the skips: the sender numbers SSNs after
        // its last assigned TSN from 0 again.
        self.on_cumulative_tsn(new_cumulative);
        for (stream, ssn) in skipped {
            if self.accepts_stream(*stream) {
                self.ordered.skip(*stream, *ssn, &mut self.ready);
            }
        }
    }

    /// Removes every run starting at or before `new_cumulative`: by probing each TSN
    /// since the last FORWARD TSN when that is fewer than the runs, else by one pass
    /// over the runs.
    fn discard_runs_through(&mut self, new_cumulative: Tsn) {
        let skipped = self
            .floor
            .map_or(usize::MAX, |f| new_cumulative.distance_from(f) as usize);
        if let Some(floor) = self.floor
            && skipped <= self.runs.len()
        {
            let mut tsn = floor;
            for _ in 0..skipped {
                tsn = tsn.next();
                if self.runs.contains_key(&tsn) {
                    self.discard_run(tsn);
                }
            }
            return;
        }
        let mut firsts = std::mem::take(&mut self.scratch);
        firsts.clear();
        firsts.extend(
            self.runs
                .keys()
                .copied()
                .filter(|first| !first.is_after(new_cumulative)),
        );
        for first in &firsts {
            self.discard_run(*first);
        }
        firsts.clear();
        self.scratch = firsts;
    }

    /// A request to reset incoming `streams` (all when empty) from a peer whose last
    /// assigned TSN before the reset was `sender_last_tsn` (RFC 6525 §4.1, §5.2.2).
    /// Done at once if `cumulative_tsn` has reached that TSN, else deferred (E2) until
    /// [`Reassembly::on_cumulative_tsn`] sees it reached. Stream ids that were not
    /// negotiated are ignored.
    pub fn reset_streams(
        &mut self,
        streams: &[StreamId],
        sender_last_tsn: Tsn,
        cumulative_tsn: Tsn,
    ) -> Result<ResetProgress, ReassemblyError> {
        if self.deferred_reset.is_some() {
            return Err(ReassemblyError::ResetInProgress);
        }
        let all = streams.is_empty();
        let valid = |stream: &&StreamId| u32::from(stream.0) < self.limits.inbound_streams;
        let streams: Vec<StreamId> = streams.iter().filter(valid).copied().collect();
        if !all && streams.is_empty() {
            return Ok(ResetProgress::Performed); // Only streams that do not exist.
        }
        if sender_last_tsn.is_after(cumulative_tsn) {
            self.ordered.mark_reset(&streams);
            self.deferred_reset = Some(DeferredReset {
                last_tsn: sender_last_tsn,
                streams,
            });
            return Ok(ResetProgress::Deferred);
        }
        self.perform_reset(&streams);
        Ok(ResetProgress::Performed)
    }

    fn perform_reset(&mut self, streams: &[StreamId]) {
        let mut released = Released::default();
        self.ordered.reset(streams, &mut self.ready, &mut released);
        self.release_all(released);
    }

    /// The cumulative TSN is now `cumulative_tsn`: performs a deferred reset it has
    /// reached (RFC 6525 §5.2.2 E2 to E4). Returns whether one was performed.
    pub fn on_cumulative_tsn(&mut self, cumulative_tsn: Tsn) -> bool {
        let due = self
            .deferred_reset
            .as_ref()
            .is_some_and(|reset| !reset.last_tsn.is_after(cumulative_tsn));
        if !due {
            return false;
        }
        if let Some(reset) = self.deferred_reset.take() {
            self.perform_reset(&reset.streams);
            self.reset_performed = true;
        }
        true
    }

    /// Whether a reset waits for the cumulative TSN.
    pub fn has_deferred_reset(&self) -> bool {
        self.deferred_reset.is_some()
    }

    /// Whether a deferred reset was performed since the last call: the association
    /// then answers "Success - Performed" (RFC 6525 §5.2.2 E5).
    pub fn take_reset_performed(&mut self) -> bool {
        std::mem::take(&mut self.reset_performed)
    }
}
