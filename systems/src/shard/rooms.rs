//! The room half of the [`Shard`] surface: membership, which other shards share a
//! room, messages from the owner to a room (`Command::SendData`), room messages
//! to and from other shards, and the counts that show a shard let go of what
//! departed peers had.

use bevy_ecs::prelude::*;
use bytes::Bytes;
use shoal_components::datachannel::{self, ChannelParams, DataChannels, PRIORITY_NORMAL};
use shoal_components::peer::{Ice, IceState, PeerId};
use shoal_components::relay::{
    Forwarded, ForwardsWaiting, LINK_GAP_PPID, RelayClosing, RelayLimits, RelayOutbox,
};
use shoal_components::room::{RoomId, RoomIndex, RoomMember, RoomPresence};
use shoal_components::sctp::Ppid;
use shoal_components::sctp::assoc::Sctp;
use shoal_components::sctp::dcep::ChannelType;
use shoal_components::stats::ShardStats;
use shoal_components::tick::{Now, RemoveReason};
use shoal_components::time::Time;

use super::{CommandError, Shard};
use crate::passes::datachannel::relay::{self, Delivery};

impl Shard {
    /// Makes a new peer a member of `room`. Leaving needs no call: despawning the
    /// peer, for whatever reason, takes it out of the index (`RoomMember`'s hook).
    pub(super) fn join_room(&mut self, entity: Entity, room: RoomId, link: bool) {
        self.world
            .entity_mut(entity)
            .insert(RoomMember { room, link });
        self.world.resource_mut::<RoomIndex>().join(room, entity);
    }

    /// Sends a message from the owner to every member of `room` on this shard, or to
    /// the member `to` only, on their channel labelled `label` (opened reliable and
    /// ordered where a member has none; RFC 8832 §6 lets data follow the OPEN at
    /// once). Members whose association is not yet established are skipped. The
    /// relay's back-pressure policy applies: a member whose send buffer refuses the
    /// message is removed with [`RemoveReason::SlowReceiver`] (retired: what it sent
    /// and SCTP acknowledged still reaches its room).
    ///
    /// Returns how many members it was queued for.
    pub fn send_data(
        &mut self,
        room: RoomId,
        to: Option<PeerId>,
        label: &str,
        binary: bool,
        payload: Bytes,
    ) -> Result<usize, CommandError> {
        let max = self.config.sctp.max_message_size;
        if payload.len() > max {
            return Err(CommandError::TooLarge {
                size: payload.len(),
                max,
            });
        }
        if label.len() > usize::from(u16::MAX) {
            return Err(CommandError::LabelTooLong);
        }
        let mut targets = std::mem::take(&mut self.room_targets);
        targets.clear();
        match to {
            Some(peer) => {
                let entity = self.peer_entity(peer)?;
                if self.world.get::<RoomMember>(entity).map(|m| m.room) != Some(room) {
                    self.room_targets = targets;
                    return Err(CommandError::NotMember { peer, room });
                }
                targets.push(entity);
            }
            None => targets.extend_from_slice(self.world.resource::<RoomIndex>().members(room)),
        }
        let (ppid, payload) = datachannel::encode(binary, payload);
        let params = ChannelParams {
            label,
            protocol: "",
            kind: ChannelType::default(),
            priority: PRIORITY_NORMAL,
        };
        let queued = self.deliver_to(&targets, params, ppid, &payload);
        self.room_targets = targets;
        self.collect_events();
        Ok(queued)
    }

    /// Delivers a room message to each of `targets` under the relay's back-pressure
    /// policy (`relay::deliver`), wakes those it was queued for and removes slow
    /// receivers. Returns how many it was queued for.
    fn deliver_to(
        &mut self,
        targets: &[Entity],
        params: ChannelParams<'_>,
        ppid: Ppid,
        payload: &Bytes,
    ) -> usize {
        let now = self.world.resource::<Now>().0;
        let limits = *self.world.resource::<RelayLimits>();
        let mut queued = 0;
        for &entity in targets {
            let delivery = self
                .world
                .resource_scope(|world, mut stats: Mut<ShardStats>| {
                    let mut e = world.entity_mut(entity);
                    // A member that closed (and is kept only to relay what it
                    // sent) receives nothing.
                    if e.get::<Ice>().is_some_and(|i| i.state == IceState::Failed) {
                        return Delivery::Skipped;
                    }
                    let Ok((mut a, mut dc)) =
                        e.get_components_mut::<(&mut Sctp, &mut DataChannels)>()
                    else {
                        return Delivery::Skipped;
                    };
                    relay::deliver(
                        &mut a,
                        &mut dc,
                        &mut stats,
                        &limits,
                        now,
                        params,
                        ppid,
                        payload.clone(),
                    )
                });
            match delivery {
                Delivery::Queued => {
                    queued += 1;
                    self.wake_sctp(entity, now);
                }
                Delivery::Skipped => {}
                Delivery::SlowReceiver => self.retire_entity(entity, RemoveReason::SlowReceiver),
            }
        }
        queued
    }

    /// Sets which other shards hold members of `room` (by shard index; empty: none).
    /// The control plane calls this whenever the room's set of shards changes;
    /// the relay forwards the room's messages to those shards.
    ///
    /// While a member of `room` that left is still relaying what it sent
    /// (`RelayClosing`), the room keeps the shards it had as well until that
    /// member is gone: the owner, which counts it gone already, may have said the
    /// room has no members here any more. So it does while records of the room
    /// that the owner has not yet taken (`Shard::poll_forward`) wait: they go to
    /// the shards the room had when they were put out.
    pub fn set_room_siblings(&mut self, room: RoomId, siblings: &[usize]) {
        self.presence_after_closing.retain(|(r, _)| *r != room);
        let unrouted = self
            .world
            .resource::<RelayOutbox>()
            .0
            .iter()
            .any(|f| f.room == room);
        if unrouted || self.closing_in(room) {
            self.presence_after_closing.push((room, siblings.to_vec()));
            let mut kept = self.room_siblings(room).to_vec();
            kept.extend_from_slice(siblings);
            self.world.resource_mut::<RoomPresence>().set(room, &kept);
            return;
        }
        self.world
            .resource_mut::<RoomPresence>()
            .set(room, siblings);
    }

    /// Whether a member of `room` that left is still relaying what it sent.
    fn closing_in(&self, room: RoomId) -> bool {
        self.world.resource::<RelayClosing>().0.iter().any(|m| {
            self.world
                .get::<RoomMember>(m.entity)
                .is_some_and(|r| r.room == room)
        })
    }

    /// Whether a room's presence waits for a tick to apply it: its closing members
    /// are gone.
    pub(super) fn presence_to_settle(&self) -> bool {
        self.presence_after_closing
            .iter()
            .any(|(room, _)| !self.closing_in(*room))
    }

    /// Applies what the owner last set for rooms whose closing members are gone (at
    /// the start of a tick: what they put out in the tick before, and any record
    /// that waited when the owner set it, went to the siblings they had, since the
    /// owner hands a tick's forwards over after it).
    pub(super) fn settle_presence(&mut self) {
        if self.presence_after_closing.is_empty() {
            return;
        }
        let pending = std::mem::take(&mut self.presence_after_closing);
        for (room, siblings) in pending {
            if self.closing_in(room) {
                self.presence_after_closing.push((room, siblings));
            } else {
                self.world
                    .resource_mut::<RoomPresence>()
                    .set(room, &siblings);
            }
        }
    }

    /// The other shards holding members of `room`, as last set.
    pub(crate) fn room_siblings(&self, room: RoomId) -> &[usize] {
        self.world.resource::<RoomPresence>().siblings(room)
    }

    /// Rooms some other shard shares with this one.
    pub fn shared_room_count(&self) -> usize {
        self.world.resource::<RoomPresence>().room_count()
    }

    /// Moves the room messages the last ticks put out for other shards into `out`
    /// (appending, in the order the relay handled them), for the node's `Links`,
    /// which batch them per sibling and count what could not be sent.
    pub(crate) fn poll_forward(&mut self, out: &mut Vec<Forwarded>) {
        out.append(&mut self.world.resource_mut::<RelayOutbox>().0);
    }

    /// Counts forwarded messages the owner could not hand to another shard.
    pub(crate) fn count_forwards_dropped(&mut self, messages: u64) {
        self.world
            .resource_mut::<ShardStats>()
            .relay_forwards_dropped += messages;
    }

    /// Counts reliable forwarded messages a full queue refused, kept to go again.
    pub(crate) fn count_forwards_requeued(&mut self, messages: u64) {
        self.world
            .resource_mut::<ShardStats>()
            .relay_forwards_requeued += messages;
    }

    /// Tells the relay for which siblings reliable forwarded messages wait to go
    /// again ([`ForwardsWaiting`]): while they do, reliable messages of rooms with
    /// members on those siblings stay in their senders' receive buffers.
    pub(crate) fn set_forwards_waiting(&mut self, siblings: impl IntoIterator<Item = usize>) {
        let mut waiting = self.world.resource_mut::<ForwardsWaiting>();
        waiting.0.clear();
        waiting.0.extend(siblings);
    }

    /// Delivers a room message that another shard's relay forwarded to this shard's
    /// members of its room, under the relay's back-pressure policy, and returns how
    /// many it was queued for. It is never forwarded again: one hop at most. One that
    /// came into the node on a link goes to no link here (one link at most).
    pub(crate) fn deliver_forwarded(&mut self, now: Time, message: &Forwarded) -> usize {
        self.advance_clock(now);
        if message.gap {
            self.close_reliable_channels(message.room);
            if !message.from_link && !message.label.is_empty() {
                self.tell_links_of_gap(message.room, message.params());
            }
            self.collect_events();
            return 0;
        }
        self.world.resource_mut::<ShardStats>().relay_forwards_in += 1;
        let mut targets = std::mem::take(&mut self.room_targets);
        targets.clear();
        targets.extend_from_slice(self.world.resource::<RoomIndex>().members(message.room));
        if message.from_link {
            targets.retain(|&e| self.world.get::<RoomMember>(e).is_some_and(|m| !m.link));
        }
        let queued = self.deliver_to(&targets, message.params(), message.ppid, &message.payload);
        self.room_targets = targets;
        self.collect_events();
        queued
    }

    /// Passes a gap in `room`'s reliable messages on from this shard, behind what it
    /// sent before: to the room's other shards of the node (a [`Forwarded::gap`]
    /// record), and, for a gap of this node's own (not `from_link`), over the
    /// room's links here on their channel of `channel`'s label
    /// ([`Shard::tell_links_of_gap`]). The shard closed its own channels already.
    pub(crate) fn pass_gap_on(
        &mut self,
        room: RoomId,
        channel: Option<ChannelParams<'_>>,
        from_link: bool,
    ) {
        if !self.room_siblings(room).is_empty() {
            self.world
                .resource_mut::<RelayOutbox>()
                .0
                .push(Forwarded::gap(room, channel, from_link));
        }
        if let Some(channel) = channel.filter(|_| !from_link) {
            self.tell_links_of_gap(room, channel);
        }
    }

    /// Tells the node-to-node links of `room` on this shard that this node lost
    /// reliable messages of the room that came before now: a gap marker
    /// ([`LINK_GAP_PPID`]) on each link's channel of `channel`'s label (opened as
    /// the relay opens one where missing), queued behind what went out on it
    /// before. The node at the other end closes the room's reliable channels when
    /// it takes it. A link whose send buffer refuses it is cut off as a slow
    /// receiver, which the other node counts as a lost link.
    pub(crate) fn tell_links_of_gap(&mut self, room: RoomId, channel: ChannelParams<'_>) {
        let mut targets = std::mem::take(&mut self.room_targets);
        targets.clear();
        targets.extend_from_slice(self.world.resource::<RoomIndex>().members(room));
        targets.retain(|&e| self.world.get::<RoomMember>(e).is_some_and(|m| m.link));
        if !targets.is_empty() {
            // SCTP carries no empty DATA (RFC 9260 §3.3.1): one byte, unread.
            let queued =
                self.deliver_to(&targets, channel, LINK_GAP_PPID, &Bytes::from_static(&[0]));
            self.world
                .resource_mut::<ShardStats>()
                .relay_gap_markers_sent += queued as u64;
        }
        self.room_targets = targets;
    }

    /// Rooms with at least one member on this shard.
    pub fn room_count(&self) -> usize {
        self.world.resource::<RoomIndex>().room_count()
    }

    /// Members of `room` on this shard.
    pub fn room_member_count(&self, room: RoomId) -> usize {
        self.world.resource::<RoomIndex>().members(room).len()
    }

    /// Members across all rooms of this shard.
    pub fn room_members_total(&self) -> usize {
        self.world.resource::<RoomIndex>().member_count()
    }
}
