//! Ordered delivery per stream (RFC 9260 §6.6): complete ordered messages wait here
//! until every earlier Stream Sequence Number was delivered or skipped by FORWARD TSN
//! (RFC 3758 §3.6), and stream resets (RFC 6525 §5.2.2) restart the numbering at 0.
//!
//! Waiting messages are keyed by their 16-bit SSN in a hash map, so delivering the next
//! one is one lookup. A FORWARD TSN that skips `k` SSNs costs O(min(k, waiting)) plus
//! sorting the messages it frees; since `k` is also how far the stream advances, that
//! is O(1) amortised per SSN.

use std::collections::VecDeque;

use crate::sctp::FastMap as HashMap;

use crate::sctp::num::{Ssn, StreamId};

use super::Message;

/// Bytes and entries of messages dropped rather than delivered, for the caller's books.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Released {
    pub bytes: usize,
    pub messages: usize,
}

impl Released {
    fn add(&mut self, message: &Message) {
        self.bytes += message.payload.len();
        self.messages += 1;
    }
}

/// What became of a complete ordered message handed to [`OrderedStreams::insert`].
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Inserted {
    /// Delivered now or waiting for an earlier SSN.
    Kept,
    /// Its SSN is already delivered or skipped: dropped.
    Stale(Message),
    /// Another complete message already waits with this SSN: the new one is dropped.
    DuplicateSsn(Message),
}

/// One stream's ordering state.
#[derive(Debug, Default)]
struct StreamQueue {
    /// The SSN delivered next.
    next_ssn: Ssn,
    /// Complete messages whose SSN is after `next_ssn`, by SSN.
    waiting: HashMap<u16, Message>,
    /// A deferred reset covers this stream (RFC 6525 §5.2.2 E2).
    reset_pending: bool,
    /// Messages of the stream's next life, held until its reset is performed.
    held: Vec<(Ssn, Message)>,
}

/// The ordering state of every stream that has carried ordered messages.
#[derive(Debug, Default)]
pub(super) struct OrderedStreams {
    streams: HashMap<StreamId, StreamQueue>,
    /// Reused for sorting SSNs freed by a FORWARD TSN.
    scratch: Vec<u16>,
    /// Reused for the stream ids of a reset.
    ids: Vec<StreamId>,
}

/// SSNs `ssn - next` apart, if `ssn` is not before `next` (RFC 1982 over 16 bits).
fn ahead_of(ssn: Ssn, next: Ssn) -> Option<u16> {
    let d = ssn.0.wrapping_sub(next.0);
    (d < 0x8000).then_some(d)
}

impl StreamQueue {
    /// Delivers `next_ssn` and what follows it while it is waiting.
    fn drain(&mut self, ready: &mut VecDeque<Message>) {
        while let Some(message) = self.waiting.remove(&self.next_ssn.0) {
            ready.push_back(message);
            self.next_ssn = self.next_ssn.next();
        }
    }

    fn insert(&mut self, ssn: Ssn, message: Message, ready: &mut VecDeque<Message>) -> Inserted {
        match ahead_of(ssn, self.next_ssn) {
            Some(0) => {
                ready.push_back(message);
                self.next_ssn = self.next_ssn.next();
                self.drain(ready);
                Inserted::Kept
            }
            Some(_) if self.waiting.contains_key(&ssn.0) => Inserted::DuplicateSsn(message),
            Some(_) => {
                self.waiting.insert(ssn.0, message);
                Inserted::Kept
            }
            None => Inserted::Stale(message),
        }
    }
}

impl OrderedStreams {
    /// Takes a complete ordered message: delivers it (and any that were waiting for
    /// it) into `ready` if its SSN is next, else keeps it waiting.
    pub fn insert(
        &mut self,
        stream: StreamId,
        ssn: Ssn,
        message: Message,
        ready: &mut VecDeque<Message>,
    ) -> Inserted {
        self.streams
            .entry(stream)
            .or_default()
            .insert(ssn, message, ready)
    }

    /// Whether a deferred reset holds back this stream's new messages.
    pub fn reset_pending(&self, stream: StreamId) -> bool {
        self.streams.get(&stream).is_some_and(|q| q.reset_pending)
    }

    /// Holds a message of the stream's next life until its reset is performed.
    pub fn hold(&mut self, stream: StreamId, ssn: Ssn, message: Message) {
        self.streams
            .entry(stream)
            .or_default()
            .held
            .push((ssn, message));
    }

    /// RFC 3758 §3.6: the receiver "MUST use the stream sequence information to
    /// examine all of the listed stream reordering queues, and immediately make
    /// available for delivery stream sequence numbers earlier than or equal to the
    /// stream sequence number listed inside the FORWARD TSN". Then `ssn + 1` is next.
    pub fn skip(&mut self, stream: StreamId, ssn: Ssn, ready: &mut VecDeque<Message>) {
        let queue = self.streams.entry(stream).or_default();
        let Some(span) = ahead_of(ssn, queue.next_ssn) else {
            return; // Already past it: a repeated or reordered FORWARD TSN.
        };
        let next = queue.next_ssn.0;
        let count = usize::from(span) + 1;
        if count <= queue.waiting.len() {
            for i in 0..=span {
                if let Some(message) = queue.waiting.remove(&next.wrapping_add(i)) {
                    ready.push_back(message);
                }
            }
        } else {
            self.scratch.clear();
            self.scratch.extend(
                queue
                    .waiting
                    .keys()
                    .copied()
                    .filter(|s| s.wrapping_sub(next) <= span),
            );
            self.scratch.sort_unstable_by_key(|s| s.wrapping_sub(next));
            for s in &self.scratch {
                if let Some(message) = queue.waiting.remove(s) {
                    ready.push_back(message);
                }
            }
        }
        queue.next_ssn = ssn.next();
        queue.drain(ready);
    }

    /// Marks `streams` (every known stream when empty) as having a deferred reset.
    pub fn mark_reset(&mut self, streams: &[StreamId]) {
        if streams.is_empty() {
            self.streams
                .values_mut()
                .for_each(|q| q.reset_pending = true);
        } else {
            for stream in streams {
                self.streams.entry(*stream).or_default().reset_pending = true;
            }
        }
    }

    /// Performs a reset (RFC 6525 §5.2.2 E3): the next expected SSN of each stream in
    /// `streams` (every known stream when empty) goes back to 0. Messages still waiting
    /// from before the reset can never be delivered and are dropped into `released`;
    /// messages held for the new numbering go through ordering again (E4).
    pub fn reset(
        &mut self,
        streams: &[StreamId],
        ready: &mut VecDeque<Message>,
        released: &mut Released,
    ) {
        let mut ids = std::mem::take(&mut self.ids);
        if streams.is_empty() {
            ids.extend(self.streams.keys().copied());
            // Deterministic delivery order across streams, whatever the hasher.
            ids.sort_unstable();
        } else {
            ids.extend_from_slice(streams);
        }
        for id in &ids {
            let Some(queue) = self.streams.get_mut(id) else {
                continue;
            };
            for (_, message) in queue.waiting.drain() {
                released.add(&message);
            }
            queue.next_ssn = Ssn(0);
            queue.reset_pending = false;
            let held = std::mem::take(&mut queue.held);
            for (ssn, message) in held {
                match queue.insert(ssn, message, ready) {
                    Inserted::Kept => {}
                    Inserted::Stale(m) | Inserted::DuplicateSsn(m) => released.add(&m),
                }
            }
        }
        ids.clear();
        self.ids = ids;
    }
}
