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
//! Either way a shard never waits for another: a batch a sibling cannot take now (its
//! queue is full, or it is gone) is dropped and counted in the sender's
//! `ShardStats::relay_forwards_dropped` and `media_relay_dropped`. That is a node past
//! its capacity, not a normal event: its subscribers NACK what they miss, but a room
//! message on a reliable channel is a gap its receivers do not see as an error.

use std::collections::VecDeque;

use shoal_components::net::Datagram;
use shoal_components::relay::{Forwarded, MediaRelay};
use shoal_components::time::Time;

use crate::shard::{Shard, ShardConfig};

/// Batches a [`Node`] holds for one shard at most; one more is dropped and counted
/// in its sender's stats (the driver's command queue has the same bound).
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

/// One shard's side of the queues between the shards of its node: the batches it is
/// filling for each sibling, reused from tick to tick.
#[derive(Debug)]
pub struct Links {
    index: usize,
    batches: Vec<SiblingBatch>,
    forwards: Vec<Forwarded>,
    media: Vec<MediaRelay>,
}

impl Links {
    /// The links of shard `index` of a node of `shards` shards.
    pub fn new(index: usize, shards: usize) -> Links {
        Links {
            index,
            batches: vec![SiblingBatch::default(); shards],
            forwards: Vec::new(),
            media: Vec::new(),
        }
    }

    /// Moves what `shard` put out for its siblings since the last call into one batch
    /// per sibling, and hands each batch that has anything to `send`, which gives it
    /// back if the sibling cannot take it now; a batch given back is dropped and
    /// counted. A room message goes to every shard its room's presence names
    /// (`Shard::room_siblings`); a media item to the shard it names. What names the
    /// shard itself or an index outside the node goes nowhere, counted as dropped.
    pub fn collect(
        &mut self,
        shard: &mut Shard,
        mut send: impl FnMut(usize, SiblingBatch) -> Result<(), SiblingBatch>,
    ) {
        shard.poll_forward(&mut self.forwards);
        shard.poll_media_relay(&mut self.media);
        if self.forwards.is_empty() && self.media.is_empty() {
            return;
        }
        let (mut room_dropped, mut media_dropped) = (0u64, 0u64);
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
            if batch.is_empty() {
                continue;
            }
            if let Err(refused) = send(to, std::mem::take(batch)) {
                room_dropped += refused.room.len() as u64;
                media_dropped += refused.media.len() as u64;
            }
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
        }
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
    /// deadline.
    pub fn poll_timeout(&self, index: usize) -> Option<Time> {
        let shard = self.shards.get(index)?;
        if self.inboxes.get(index).is_some_and(|q| !q.is_empty()) {
            return Some(shard.now());
        }
        shard.poll_timeout()
    }

    /// Moves what shard `index` put out for its siblings into their queues (a queue
    /// at [`SIBLING_QUEUE_LEN`] refuses the batch, which is counted as dropped).
    pub fn route(&mut self, index: usize) {
        let (Some(links), Some(shard)) = (self.links.get_mut(index), self.shards.get_mut(index))
        else {
            return;
        };
        let inboxes = &mut self.inboxes;
        links.collect(shard, |to, batch| {
            let Some(queue) = inboxes.get_mut(to) else {
                return Err(batch);
            };
            if queue.len() >= SIBLING_QUEUE_LEN {
                return Err(batch);
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
