//! The send queue: user messages waiting for their first transmission, per stream, with
//! back-pressure, buffered-amount events, fair scheduling between streams, fragmentation
//! into zero-copy chunks and the send half of stream reset (RFC 6525 §5.1.2).
//!
//! Scheduling is round-robin between streams one message at a time: with DATA chunks (no
//! I-DATA) the fragments of a message must carry consecutive TSNs (RFC 9260 §6.9), so a
//! stream keeps the turn until its current message is out. Streams with queued data sit
//! in a ring (a `VecDeque` of slots), so choosing the next stream is O(1) and producing a
//! chunk allocates nothing: the payload is a `Bytes::slice` of the message.

#[cfg(test)]
mod tests;

use std::collections::VecDeque;

use crate::sctp::FastMap as HashMap;

use bytes::Bytes;

use super::{DataToSend, MessageId, OutgoingMessage, Reliability};
use crate::sctp::num::{Ppid, Ssn, StreamId};
use crate::time::Time;

/// Limits and thresholds of a [`SendQueue`]; together they bound its memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SendQueueConfig {
    /// Streams `0..outbound_streams` may be used (the outbound stream count agreed in
    /// INIT/INIT ACK, RFC 9260 §5.1.1).
    pub outbound_streams: u16,
    /// Largest message accepted (the SDP max-message-size of RFC 8841 §6).
    pub max_message_size: usize,
    /// Most bytes queued across all streams; past it `send` says `WouldBlock`.
    pub max_buffered_total: usize,
    /// Most bytes queued on one stream (the high watermark).
    pub max_buffered_per_stream: usize,
    /// Most messages queued across all streams, so tiny messages cannot bloat memory.
    pub max_queued_messages: usize,
    /// Per-stream low watermark until `set_low_watermark` says otherwise (WebRTC's
    /// `bufferedAmountLowThreshold` starts at 0).
    pub default_low_watermark: usize,
    /// Low watermark of the total buffered amount.
    pub total_low_watermark: usize,
}

impl Default for SendQueueConfig {
    fn default() -> Self {
        SendQueueConfig {
            outbound_streams: u16::MAX,
            max_message_size: 256 * 1024,
            max_buffered_total: 2 * 1024 * 1024,
            max_buffered_per_stream: 2 * 1024 * 1024,
            max_queued_messages: 16 * 1024,
            default_low_watermark: 0,
            total_low_watermark: 0,
        }
    }
}

impl SendQueueConfig {
    /// Whether every message `send` accepts can also fit the buffers.
    pub fn is_valid(&self) -> bool {
        self.max_message_size > 0
            && self.max_message_size <= self.max_buffered_per_stream
            && self.max_buffered_per_stream <= self.max_buffered_total
            && self.max_queued_messages > 0
    }
}

/// Why [`SendQueue::send`] refused a message.
#[derive(Debug, thiserror::Error, Clone, Copy, PartialEq, Eq)]
pub enum SendError {
    /// The stream's or the association's send buffer is full: wait for a low-watermark
    /// event and try again.
    #[error("send buffer full")]
    WouldBlock,
    /// Larger than the configured maximum message size.
    #[error("message larger than the maximum message size")]
    TooLarge,
    /// Zero bytes: RFC 9260 §6.2 says not to send a DATA chunk without user data (data
    /// channels send empty messages as one byte with an "Empty" PPID, RFC 8831 §6.6).
    #[error("empty message")]
    Empty,
    /// The stream id is not below the association's outbound stream count.
    #[error("stream is not open")]
    StreamClosed,
    /// The stream is being reset (RFC 6525 §5.1.2 A1): no new data until it completes.
    #[error("stream is being reset")]
    Resetting,
}

/// What a [`SendQueue`] threw away, for the shard's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SendQueueStats {
    /// Messages whose lifetime ran out before their first byte was sent (RFC 3758 §4.1 TR3).
    pub expired_unsent: u64,
    /// Messages dropped by `discard_message` (their message was abandoned in flight).
    pub discarded: u64,
}

/// Where a stream is in the outgoing SSN reset procedure (RFC 6525 §5.1.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ResetPhase {
    /// Taking new messages.
    Open,
    /// `prepare_reset` was called: no new messages; what is queued is still sent.
    Draining,
    /// Queue empty and handed out by `take_streams_ready_to_reset`: the request is out.
    Resetting,
}

/// A queued message and how much of it has been produced.
#[derive(Debug)]
struct QueuedMessage {
    id: MessageId,
    ppid: Ppid,
    payload: Bytes,
    /// Bytes of `payload` already handed out as chunks.
    offset: usize,
    unordered: bool,
    policy: Reliability,
    expires_at: Option<Time>,
    /// Assigned with the first fragment of an ordered message.
    ssn: Ssn,
}

impl QueuedMessage {
    fn remaining(&self) -> usize {
        self.payload.len() - self.offset
    }
}

/// One outgoing stream.
#[derive(Debug)]
struct OutStream {
    id: StreamId,
    messages: VecDeque<QueuedMessage>,
    /// Bytes queued and not yet produced (WebRTC's `bufferedAmount`).
    buffered: usize,
    low_watermark: usize,
    next_ssn: Ssn,
    phase: ResetPhase,
    /// The stream's slot is in the scheduling ring.
    in_ring: bool,
    /// A low-watermark event for this stream waits in `low_events`.
    event_pending: bool,
}

/// The per-association send queue. See the module documentation.
#[derive(Debug)]
pub struct SendQueue {
    config: SendQueueConfig,
    /// Streams that were ever used, by slot; `index` maps ids to slots.
    streams: Vec<OutStream>,
    index: HashMap<StreamId, u32>,
    /// Slots of streams with queued messages, in turn order; the front has the turn.
    ring: VecDeque<u32>,
    total_buffered: usize,
    queued_messages: usize,
    next_message_id: u64,
    low_events: Vec<StreamId>,
    total_low_event: bool,
    /// Slots of streams in `ResetPhase::Draining`.
    draining: Vec<u32>,
    stats: SendQueueStats,
}

impl SendQueue {
    /// An empty queue.
    ///
    /// # Panics
    /// If `config.is_valid()` is false: a configuration error, not an operating one.
    pub fn new(config: SendQueueConfig) -> SendQueue {
        assert!(config.is_valid(), "invalid SendQueueConfig: {config:?}");
        SendQueue {
            config,
            streams: Vec::new(),
            index: HashMap::default(),
            ring: VecDeque::new(),
            total_buffered: 0,
            queued_messages: 0,
            next_message_id: 0,
            low_events: Vec::new(),
            total_low_event: false,
            draining: Vec::new(),
            stats: SendQueueStats::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &SendQueueConfig {
        &self.config
    }

    /// Queues `msg` on `stream` and returns its id.
    pub fn send(
        &mut self,
        now: Time,
        stream: StreamId,
        msg: OutgoingMessage,
    ) -> Result<MessageId, SendError> {
        let len = msg.payload.len();
        if len == 0 {
            return Err(SendError::Empty);
        }
        if len > self.config.max_message_size {
            return Err(SendError::TooLarge);
        }
        let slot = self.slot_or_insert(stream)?;
        let s = &self.streams[slot as usize];
        if s.phase != ResetPhase::Open {
            return Err(SendError::Resetting);
        }
        if self.queued_messages >= self.config.max_queued_messages
            || self.total_buffered + len > self.config.max_buffered_total
            || s.buffered + len > self.config.max_buffered_per_stream
        {
            return Err(SendError::WouldBlock);
        }
        let expires_at = match msg.policy {
            Reliability::MaxLifetime(lifetime) => Some(now + lifetime),
            _ => None,
        };
        let id = MessageId(self.next_message_id);
        self.next_message_id += 1;
        let s = &mut self.streams[slot as usize];
        s.messages.push_back(QueuedMessage {
            id,
            ppid: msg.ppid,
            payload: msg.payload,
            offset: 0,
            unordered: msg.unordered,
            policy: msg.policy,
            expires_at,
            ssn: Ssn(0),
        });
        s.buffered += len;
        self.total_buffered += len;
        self.queued_messages += 1;
        if !s.in_ring {
            s.in_ring = true;
            self.ring.push_back(slot);
        }
        Ok(id)
    }

    /// The next chunk to send, its user data padded to 4 bytes (RFC 9260 §3.2) no longer
    /// than `max_payload`, or `None` when nothing is queued or nothing fits. Messages whose lifetime ran out before their first byte was
    /// sent are dropped here without a TSN (RFC 3758 §4.1 TR3) and counted. Later
    /// fragments of a started message are handed out even if it has expired: the
    /// [`super::RetransmissionQueue`] abandons them when they are added (TR4), since their
    /// message already holds TSNs.
    pub fn produce(&mut self, now: Time, max_payload: usize) -> Option<DataToSend> {
        // Whole 4-byte words only, so padding never overshoots the room given.
        let max_payload = max_payload & !3;
        if max_payload == 0 {
            return None;
        }
        // Every pass either returns or removes a message or a ring entry: bounded.
        loop {
            let slot = *self.ring.front()?;
            let s = &mut self.streams[slot as usize];
            let Some(msg) = s.messages.front_mut() else {
                // Emptied by discard_message; leave the ring lazily.
                s.in_ring = false;
                self.ring.pop_front();
                continue;
            };
            if msg.offset == 0 && msg.expires_at.is_some_and(|at| at <= now) {
                let len = msg.payload.len();
                s.messages.pop_front();
                self.queued_messages -= 1;
                self.stats.expired_unsent += 1;
                self.consume(slot, len);
                // The stream keeps its turn: a message that never went out must not
                // cost it one, or a backlog of expired messages starves it.
                continue;
            }
            let n = msg.remaining().min(max_payload);
            let begin = msg.offset == 0;
            if begin && !msg.unordered {
                // RFC 9260 §6.9: every fragment of an ordered message carries the same SSN,
                // taken when the first one goes out (§6.6: unordered messages take none).
                msg.ssn = s.next_ssn;
                s.next_ssn = s.next_ssn.next();
            }
            let payload = msg.payload.slice(msg.offset..msg.offset + n);
            msg.offset += n;
            let end = msg.offset == msg.payload.len();
            let chunk = DataToSend {
                stream: s.id,
                ssn: msg.ssn,
                ppid: msg.ppid,
                unordered: msg.unordered,
                begin,
                end,
                payload,
                message_id: msg.id,
                policy: msg.policy,
                expires_at: msg.expires_at,
            };
            if end {
                s.messages.pop_front();
                self.queued_messages -= 1;
            }
            self.consume(slot, n);
            if end {
                self.end_turn(slot);
            }
            return Some(chunk);
        }
    }

    /// Drops what is left of a message whose chunks were abandoned in flight (RFC 3758
    /// §3.5 A3). Returns whether it was still queued.
    pub fn discard_message(&mut self, stream: StreamId, message_id: MessageId) -> bool {
        let Some(&slot) = self.index.get(&stream) else {
            return false;
        };
        let s = &mut self.streams[slot as usize];
        // Only the head can be partly sent, so it is nearly always the one.
        let Some(pos) = s.messages.iter().position(|m| m.id == message_id) else {
            return false;
        };
        let Some(msg) = s.messages.remove(pos) else {
            return false;
        };
        self.queued_messages -= 1;
        self.stats.discarded += 1;
        self.consume(slot, msg.remaining());
        if pos == 0 && msg.offset > 0 {
            // The stream had the turn for this message; the next one waits its turn.
            self.end_turn(slot);
        }
        true
    }

    /// Whether any message is queued.
    pub fn has_data(&self) -> bool {
        self.queued_messages > 0
    }

    /// The unsent bytes of the message [`SendQueue::produce`] would take from next
    /// (it may still drop that message as expired instead).
    pub fn peek_remaining(&self) -> Option<usize> {
        self.ring.iter().find_map(|&slot| {
            self.streams[slot as usize]
                .messages
                .front()
                .map(QueuedMessage::remaining)
        })
    }

    /// Messages queued across all streams.
    pub fn queued_messages(&self) -> usize {
        self.queued_messages
    }

    /// Bytes queued on `stream` and not yet sent (WebRTC's `bufferedAmount`).
    pub fn buffered_amount(&self, stream: StreamId) -> usize {
        self.index
            .get(&stream)
            .map_or(0, |&slot| self.streams[slot as usize].buffered)
    }

    /// Bytes queued across all streams and not yet sent.
    pub fn total_buffered_amount(&self) -> usize {
        self.total_buffered
    }

    /// Sets `stream`'s low watermark: an event is raised when its buffered amount falls
    /// from above it to at or below it. Ignored for streams that cannot be opened.
    pub fn set_low_watermark(&mut self, stream: StreamId, bytes: usize) {
        if let Ok(slot) = self.slot_or_insert(stream) {
            self.streams[slot as usize].low_watermark = bytes;
        }
    }

    /// Moves the streams whose buffered amount crossed their low watermark since the last
    /// call into `out` (appended; each stream at most once per call).
    pub fn take_low_watermark_events(&mut self, out: &mut Vec<StreamId>) {
        for id in self.low_events.drain(..) {
            if let Some(&slot) = self.index.get(&id) {
                self.streams[slot as usize].event_pending = false;
            }
            out.push(id);
        }
    }

    /// Whether the total buffered amount crossed the total low watermark since the last call.
    pub fn take_total_low_watermark_event(&mut self) -> bool {
        std::mem::take(&mut self.total_low_event)
    }

    /// Starts the outgoing SSN reset of `streams` (RFC 6525 §5.1.2): from now on `send`
    /// refuses them with [`SendError::Resetting`]; what they have queued is still sent.
    /// Unknown ids are ignored; streams already being reset are left as they are.
    pub fn prepare_reset(&mut self, streams: &[StreamId]) {
        for &stream in streams {
            let Ok(slot) = self.slot_or_insert(stream) else {
                continue;
            };
            let s = &mut self.streams[slot as usize];
            if s.phase == ResetPhase::Open {
                s.phase = ResetPhase::Draining;
                self.draining.push(slot);
            }
        }
    }

    /// Moves into `out` the streams being reset whose queued data has all been produced:
    /// their Outgoing SSN Reset Request can go now, its Sender's Last Assigned TSN being
    /// the last TSN assigned so far (RFC 6525 §5.1.2 A3).
    pub fn take_streams_ready_to_reset(&mut self, out: &mut Vec<StreamId>) {
        let streams = &mut self.streams;
        self.draining.retain(|&slot| {
            let s = &mut streams[slot as usize];
            if s.messages.is_empty() {
                s.phase = ResetPhase::Resetting;
                out.push(s.id);
                false
            } else {
                true
            }
        });
    }

    /// The peer performed the reset: the streams' next SSN is 0 and they take data again.
    pub fn commit_reset(&mut self, streams: &[StreamId]) {
        for stream in streams {
            if let Some(&slot) = self.index.get(stream) {
                let s = &mut self.streams[slot as usize];
                if s.phase == ResetPhase::Resetting {
                    s.phase = ResetPhase::Open;
                    s.next_ssn = Ssn(0);
                }
            }
        }
    }

    /// The peer denied the reset: the streams take data again with their SSNs unchanged.
    pub fn rollback_reset(&mut self, streams: &[StreamId]) {
        for stream in streams {
            if let Some(&slot) = self.index.get(stream) {
                let s = &mut self.streams[slot as usize];
                if s.phase == ResetPhase::Resetting {
                    s.phase = ResetPhase::Open;
                }
            }
        }
    }

    /// The SSN the next ordered message on `stream` will carry.
    pub fn next_ssn(&self, stream: StreamId) -> Ssn {
        self.index
            .get(&stream)
            .map_or(Ssn(0), |&slot| self.streams[slot as usize].next_ssn)
    }

    /// Counters.
    pub fn stats(&self) -> SendQueueStats {
        self.stats
    }

    fn slot_or_insert(&mut self, stream: StreamId) -> Result<u32, SendError> {
        if let Some(&slot) = self.index.get(&stream) {
            return Ok(slot);
        }
        if stream.0 >= self.config.outbound_streams {
            return Err(SendError::StreamClosed);
        }
        // At most `outbound_streams` slots: bounded by the association's configuration.
        let slot = self.streams.len() as u32;
        self.streams.push(OutStream {
            id: stream,
            messages: VecDeque::new(),
            buffered: 0,
            low_watermark: self.config.default_low_watermark,
            next_ssn: Ssn(0),
            phase: ResetPhase::Open,
            in_ring: false,
            event_pending: false,
        });
        self.index.insert(stream, slot);
        Ok(slot)
    }

    /// `n` queued bytes of `slot` left the queue: account and raise low-watermark events.
    fn consume(&mut self, slot: u32, n: usize) {
        let s = &mut self.streams[slot as usize];
        let before = s.buffered;
        s.buffered -= n;
        if before > s.low_watermark && s.buffered <= s.low_watermark && !s.event_pending {
            s.event_pending = true;
            self.low_events.push(s.id);
        }
        let total_before = self.total_buffered;
        self.total_buffered -= n;
        let threshold = self.config.total_low_watermark;
        if total_before > threshold && self.total_buffered <= threshold {
            self.total_low_event = true;
        }
    }

    /// `slot`'s message is finished (or gone): pass the turn to the next stream.
    fn end_turn(&mut self, slot: u32) {
        if self.ring.front() != Some(&slot) {
            return;
        }
        self.ring.pop_front();
        let s = &mut self.streams[slot as usize];
        if s.messages.is_empty() {
            s.in_ring = false;
        } else {
            self.ring.push_back(slot);
        }
    }
}
