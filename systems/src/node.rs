//! A node: the shards of one process and what passes between them, sans-I/O.
//!
//! A room may span the shards of a node. What one shard's passes put out for the
//! others in a tick (room messages from the relay, packets of tracks other shards
//! mirror, keyframe requests back to a track's origin) is gathered after the tick
//! into one [`SiblingBatch`] per sibling ([`Links::collect`]), in the order the passes
//! produced it, every payload shared rather than copied. A sibling takes a batch with
//! [`Shard::deliver_from_sibling`]: room messages go to its own members and are never
//! forwarded again (one hop), packets to its mirrors' subscribers, keyframe requests
//! to the publisher. A batch that goes from one shard to a sibling travels one FIFO
//! queue, so every receiver gets a sender's messages in the sender's order.
//!
//! Two owners run it, with the same code:
//! - [`Node`] holds N shards and the bounded queues between them in one place: the
//!   simulator runs a multi-shard node on one virtual clock with it, and so can an
//!   application that embeds shoal.
//! - The mio driver runs each shard on a thread of its own with its own [`Links`],
//!   and carries the batches over the shards' command channels.
//!
//! Either way a shard thread never blocks on another. A batch a sibling cannot take now
//! because its queue is full is given back ([`Refused::Full`]): its packets and
//! unreliable room messages are dropped and counted in the sender's
//! `ShardStats::media_relay_dropped` and `relay_forwards_dropped` (subscribers NACK
//! what they miss; an unreliable channel may lose a message), and its reliable room
//! messages wait in [`Links`] to go to that sibling again, before anything newer, at
//! the next try ([`FORWARD_RETRY`] at the latest). While any wait for a sibling the
//! shard's relay lets no further reliable message of a room with members there out
//! of its sender's receive buffer, which closes the senders' SCTP windows as a slow
//! receiver does: a reliable message is delivered once, in order, never dropped for
//! a full queue. A batch for a sibling that is gone ([`Refused::Gone`]) is dropped
//! and counted whole. Either is a node past its capacity, not a normal event.

use std::collections::VecDeque;

use shoal_components::net::Datagram;
use shoal_components::relay::{Forwarded, MediaRelay};
use shoal_components::sctp::dcep::Reliability;
use shoal_components::time::Time;

pub use crate::passes::datachannel::relay::FORWARD_RETRY;

use crate::shard::{Shard, ShardConfig};

/// Batches a [`Node`] holds for one shard at most, unless set otherwise
/// ([`Node::set_sibling_queue_len`]); one more is refused ([`Refused::Full`]). The
/// driver's command queue has the same bound.
pub const SIBLING_QUEUE_LEN: usize = 1024;

/// What one shard's passes put out for one sibling in one tick, in their order.
#[derive(Clone, Debug, Default)]
pub struct SiblingBatch {
    /// Room messages for the sibling's members of their rooms.
    pub room: Vec<Forwarded>,
    /// Packets of tracks the sibling mirrors, keyframe requests for tracks it
    /// publishes.
    pub media: Vec<MediaRelay>,
}

impl SiblingBatch {
    /// Nothing in it.
    pub fn is_empty(&self) -> bool {
        self.room.is_empty() && self.media.is_empty()
    }
}

/// Why a sibling did not take a batch: `send` gives it back in one of these.
#[derive(Debug)]
pub enum Refused {
    /// Its queue is full for now: the batch's reliable room messages wait to go to
    /// it again, the rest is dropped.
    Full(SiblingBatch),
    /// It is gone, or no such shard: the batch is dropped.
    Gone(SiblingBatch),
}

/// One shard's side of the queues between the shards of its node: the batches it is
/// filling for each sibling, reused from tick to tick, and the reliable room
/// messages waiting to go again to each sibling whose queue was full.
#[derive(Debug)]
pub struct Links {
    index: usize,
    batches: Vec<SiblingBatch>,
    forwards: Vec<Forwarded>,
    media: Vec<MediaRelay>,
    waiting: Vec<Vec<Forwarded>>,
}

impl Links {
    /// The links of shard `index` of a node of `shards` shards.
    pub fn new(index: usize, shards: usize) -> Links {
        Links {
            index,
            batches: vec![SiblingBatch::default(); shards],
            forwards: Vec::new(),
            media: Vec::new(),
            waiting: vec![Vec::new(); shards],
        }
    }

    /// Whether reliable room messages wait to go again to a sibling whose queue was
    /// full: the owner calls [`Links::collect`] again within [`FORWARD_RETRY`],
    /// whether or not the shard has anything new.
    pub fn has_waiting(&self) -> bool {
        self.waiting.iter().any(|w| !w.is_empty())
    }

    /// Moves what `shard` put out for its siblings since the last call into one batch
    /// per sibling, behind the reliable room messages waiting for that sibling, and
    /// hands each batch that has anything to `send`, which gives it back if the
    /// sibling cannot take it now ([`Refused`]). A room message goes to every shard
    /// its room's presence names (`Shard::room_siblings`); a media item to the shard
    /// it names. What names the shard itself or an index outside the node goes
    /// nowhere, counted as dropped. The shard's relay is told whether anything waits
    /// (`Shard::set_forwards_waiting`).
    pub fn collect(
        &mut self,
        shard: &mut Shard,
        mut send: impl FnMut(usize, SiblingBatch) -> Result<(), Refused>,
    ) {
        shard.poll_forward(&mut self.forwards);
        shard.poll_media_relay(&mut self.media);
        let had_waiting = self.has_waiting();
        if self.forwards.is_empty() && self.media.is_empty() && !had_waiting {
            return;
        }
        let (mut room_dropped, mut media_dropped, mut requeued) = (0u64, 0u64, 0u64);
        for message in self.forwards.drain(..) {
            for &to in shard.room_siblings(message.room) {
                match self.batches.get_mut(to).filter(|_| to != self.index) {
                    Some(batch) => batch.room.push(message.clone()),
                    None => room_dropped += 1,
                }
            }
        }
        for item in self.media.drain(..) {
            let to = item.to();
            match self.batches.get_mut(to).filter(|_| to != self.index) {
                Some(batch) => batch.media.push(item),
                None => media_dropped += 1,
            }
        }
        for (to, batch) in self.batches.iter_mut().enumerate() {
            let Some(waiting) = self.waiting.get_mut(to) else {
                continue;
            };
            if !waiting.is_empty() {
                // What waits goes first, then what is new: the relay's order.
                waiting.append(&mut batch.room);
                std::mem::swap(waiting, &mut batch.room);
            }
            if batch.is_empty() {
                continue;
            }
            match send(to, std::mem::take(batch)) {
                Ok(()) => {}
                Err(Refused::Full(refused)) => {
                    media_dropped += refused.media.len() as u64;
                    for message in refused.room {
                        if message.kind.reliability == Reliability::Reliable {
                            waiting.push(message);
                        } else {
                            room_dropped += 1;
                        }
                    }
                    requeued += waiting.len() as u64;
                }
                Err(Refused::Gone(refused)) => {
                    room_dropped += refused.room.len() as u64;
                    media_dropped += refused.media.len() as u64;
                }
            }
        }
        if had_waiting || self.has_waiting() {
            let waiting = self.waiting.iter().enumerate();
            shard.set_forwards_waiting(waiting.filter(|(_, w)| !w.is_empty()).map(|(to, _)| to));
        }
        if requeued > 0 {
            shard.count_forwards_requeued(requeued);
        }
        if room_dropped > 0 {
            shard.count_forwards_dropped(room_dropped);
        }
        if media_dropped > 0 {
            shard.count_media_relay_dropped(media_dropped);
        }
    }
}

impl Shard {
    /// Takes what a sibling shard of the node put out for this one, at `now`: room
    /// messages to this shard's members of their rooms (under the relay's
    /// back-pressure policy, never forwarded again), packets to mirrors'
    /// subscribers, keyframe requests to publishers. Work it starts happens in the
    /// next tick, which [`Shard::poll_timeout`] asks for.
    pub fn deliver_from_sibling(&mut self, now: Time, batch: SiblingBatch) {
        for message in &batch.room {
            self.deliver_forwarded(now, message);
        }
        if !batch.media.is_empty() {
            self.deliver_media_relay(now, batch.media);
        }
    }
}

/// A node of shards in one place: each shard with its [`Links`] and the bounded
/// queue of batches its siblings put out for it, delivered before its next tick.
/// Shards are addressed by index, as room presence and mirrors name them.
pub struct Node {
    shards: Vec<Shard>,
    links: Vec<Links>,
    inboxes: Vec<VecDeque<SiblingBatch>>,
    queue_len: usize,
}

impl Node {
    /// A node of one shard per configuration, indexed in that order.
    pub fn new(configs: impl IntoIterator<Item = ShardConfig>) -> Node {
        let shards: Vec<Shard> = configs.into_iter().map(Shard::new).collect();
        let n = shards.len();
        Node {
            links: (0..n).map(|i| Links::new(i, n)).collect(),
            inboxes: (0..n).map(|_| VecDeque::new()).collect(),
            shards,
            queue_len: SIBLING_QUEUE_LEN,
        }
    }

    /// Bounds each shard's queue of batches from its siblings at `len` (at least
    /// one) instead of [`SIBLING_QUEUE_LEN`]: a short queue shows what a node does
    /// when a shard falls behind its siblings.
    pub fn set_sibling_queue_len(&mut self, len: usize) {
        self.queue_len = len.max(1);
    }

    /// How many shards the node has.
    pub fn len(&self) -> usize {
        self.shards.len()
    }

    /// Whether the node has no shard.
    pub fn is_empty(&self) -> bool {
        self.shards.is_empty()
    }

    /// Shard `index`.
    pub fn shard(&self, index: usize) -> Option<&Shard> {
        self.shards.get(index)
    }

    /// Shard `index`, to drive directly; call [`Node::route`] after, so what it put
    /// out for its siblings moves.
    pub fn shard_mut(&mut self, index: usize) -> Option<&mut Shard> {
        self.shards.get_mut(index)
    }

    /// Feeds shard `index` a batch of datagrams at `now`: first what its siblings
    /// queued for it, then one tick over the batch; what the tick put out for its
    /// siblings goes to their queues.
    pub fn handle_datagrams(
        &mut self,
        index: usize,
        now: Time,
        datagrams: impl IntoIterator<Item = Datagram>,
    ) {
        self.take_inbox(index, now);
        if let Some(shard) = self.shards.get_mut(index) {
            shard.handle_datagrams(now, datagrams);
        }
        self.route(index);
    }

    /// Runs shard `index`'s timers due by `now`, after what its siblings queued for
    /// it; what the tick put out for its siblings goes to their queues.
    pub fn handle_timeout(&mut self, index: usize, now: Time) {
        self.take_inbox(index, now);
        if let Some(shard) = self.shards.get_mut(index) {
            shard.handle_timeout(now);
        }
        self.route(index);
    }

    /// When shard `index` next wants [`Node::handle_timeout`]: at once (its own
    /// clock's now) while its siblings have batches waiting for it, else its own
    /// deadline, and within [`FORWARD_RETRY`] while its messages wait for a
    /// sibling's full queue.
    pub fn poll_timeout(&self, index: usize) -> Option<Time> {
        let shard = self.shards.get(index)?;
        if self.inboxes.get(index).is_some_and(|q| !q.is_empty()) {
            return Some(shard.now());
        }
        let deadline = shard.poll_timeout();
        if self.links.get(index).is_some_and(Links::has_waiting) {
            let retry = shard.now() + FORWARD_RETRY;
            return Some(deadline.map_or(retry, |d| d.min(retry)));
        }
        deadline
    }

    /// How many reliable room messages shard `index` keeps for siblings whose
    /// queues refused them, to hand over again (each counted once per sibling).
    pub fn forwards_waiting(&self, index: usize) -> usize {
        self.links
            .get(index)
            .map_or(0, |l| l.waiting.iter().map(Vec::len).sum())
    }

    /// Moves what shard `index` put out for its siblings into their queues (a full
    /// queue refuses the batch: [`Refused::Full`]).
    pub fn route(&mut self, index: usize) {
        let (Some(links), Some(shard)) = (self.links.get_mut(index), self.shards.get_mut(index))
        else {
            return;
        };
        let (inboxes, queue_len) = (&mut self.inboxes, self.queue_len);
        links.collect(shard, |to, batch| {
            let Some(queue) = inboxes.get_mut(to) else {
                return Err(Refused::Gone(batch));
            };
            if queue.len() >= queue_len {
                return Err(Refused::Full(batch));
            }
            queue.push_back(batch);
            Ok(())
        });
    }

    /// Delivers every batch waiting for shard `index` (bounded by the queue).
    fn take_inbox(&mut self, index: usize, now: Time) {
        let (Some(queue), Some(shard)) = (self.inboxes.get_mut(index), self.shards.get_mut(index))
        else {
            return;
        };
        while let Some(batch) = queue.pop_front() {
            shard.deliver_from_sibling(now, batch);
        }
    }
}
