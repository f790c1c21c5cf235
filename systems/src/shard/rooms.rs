//! The room half of the [`Shard`] surface: membership, which other shards share a
//! room, messages from the owner to a room (`Command::SendData`), room messages
//! to and from other shards, closing a peer, and the counts that show a shard let
//! go of what departed peers had.

use bevy_ecs::prelude::*;
use bytes::Bytes;
use shoal_components::net::Datagram;
use shoal_components::peer::{Ice, PeerId, PeerIndex};
use shoal_components::room::{RoomId, RoomIndex, RoomMember, RoomPresence};
use shoal_components::sctp::Ppid;
use shoal_components::sctp::dcep::ChannelType;
use shoal_components::stats::ShardStats;
use shoal_components::tick::{Now, RemoveReason, Transmits};
use shoal_components::time::Time;

use super::{CommandError, Shard};
use crate::datachannel::{self, Channel, ChannelParams, DataChannels, PRIORITY_NORMAL};
use crate::dtls::pass::DtlsSession;
use crate::ice;
use crate::relay::{self, Delivery, Forwarded, RelayOutbox};
use shoal_components::sctp::assoc::Sctp;

impl Shard {
    /// Makes a new peer a member of `room`. Leaving needs no call: despawning the
    /// peer, for whatever reason, takes it out of the index (`RoomMember`'s hook).
    pub(super) fn join_room(&mut self, entity: Entity, room: RoomId) {
        self.world.entity_mut(entity).insert(RoomMember { room });
        self.world.resource_mut::<RoomIndex>().join(room, entity);
    }

    /// Sends a message from the owner to every member of `room` on this shard, or to
    /// the member `to` only, on their channel labelled `label` (opened reliable and
    /// ordered where a member has none; RFC 8832 §6 lets data follow the OPEN at
    /// once). Members whose association is not yet established are skipped. The
    /// relay's back-pressure policy applies: a member whose send buffer refuses the
    /// message is removed with [`RemoveReason::SlowReceiver`].
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
        let mut queued = 0;
        for &entity in targets {
            let delivery = self
                .world
                .resource_scope(|world, mut stats: Mut<ShardStats>| {
                    let mut e = world.entity_mut(entity);
                    let Ok((mut a, mut dc)) =
                        e.get_components_mut::<(&mut Sctp, &mut DataChannels)>()
                    else {
                        return Delivery::Skipped;
                    };
                    relay::deliver(
                        &mut a,
                        &mut dc,
                        &mut stats,
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
                Delivery::SlowReceiver => self.close_entity(entity, RemoveReason::SlowReceiver),
            }
        }
        queued
    }

    /// Sets which other shards hold members of `room` (by shard index; empty: none).
    /// The control plane calls this whenever the room's set of shards changes;
    /// the relay forwards the room's messages to those shards.
    pub fn set_room_siblings(&mut self, room: RoomId, siblings: &[usize]) {
        self.world
            .resource_mut::<RoomPresence>()
            .set(room, siblings);
    }

    /// The other shards holding members of `room`, as last set.
    pub fn room_siblings(&self, room: RoomId) -> &[usize] {
        self.world.resource::<RoomPresence>().siblings(room)
    }

    /// Rooms some other shard shares with this one.
    pub fn shared_room_count(&self) -> usize {
        self.world.resource::<RoomPresence>().room_count()
    }

    /// Moves the room messages the last ticks put out for other shards into `out`
    /// (appending, in the order the relay handled them). Send each to every shard of
    /// [`Shard::room_siblings`] for its room, and call
    /// [`Shard::count_forwards_dropped`] for those that could not be sent.
    pub fn poll_forward(&mut self, out: &mut Vec<Forwarded>) {
        out.append(&mut self.world.resource_mut::<RelayOutbox>().0);
    }

    /// Counts forwarded messages the owner could not hand to another shard.
    pub fn count_forwards_dropped(&mut self, messages: u64) {
        self.world
            .resource_mut::<ShardStats>()
            .relay_forwards_dropped += messages;
    }

    /// Delivers a room message that another shard's relay forwarded to this shard's
    /// members of its room, under the relay's back-pressure policy, and returns how
    /// many it was queued for. It is never forwarded again: one hop at most.
    pub fn deliver_forwarded(&mut self, now: Time, message: &Forwarded) -> usize {
        self.advance_clock(now);
        self.world.resource_mut::<ShardStats>().relay_forwards_in += 1;
        let mut targets = std::mem::take(&mut self.room_targets);
        targets.clear();
        targets.extend_from_slice(self.world.resource::<RoomIndex>().members(message.room));
        let queued = self.deliver_to(&targets, message.params(), message.ppid, &message.payload);
        self.room_targets = targets;
        self.collect_events();
        queued
    }

    /// Ends the peer's DTLS connection with close_notify (RFC 5246 §7.2.1: either
    /// side may close this way) and removes the peer with everything it had, as
    /// [`Command::RemovePeer`](super::Command::RemovePeer) does. The alert is ready
    /// at the next [`Shard::poll_transmit`]; a peer without a DTLS connection is
    /// just removed.
    pub fn close_peer(&mut self, id: PeerId) -> Result<(), CommandError> {
        let entity = self.peer_entity(id)?;
        self.close_entity(entity, RemoveReason::Command);
        Ok(())
    }

    /// [`Shard::close_peer`] for an entity, removed for `reason`. RFC 7675 §5.2 and
    /// RFC 9725 (a server ending a session revokes consent at once, e.g. by an
    /// authenticated closing alert): the peer learns it is gone now, not when its
    /// consent checks go unanswered.
    pub(crate) fn close_entity(&mut self, entity: Entity, reason: RemoveReason) {
        let selected = self.world.get::<Ice>(entity).and_then(|i| i.selected);
        let mut sealed = Vec::new();
        let mut path = None;
        if let Some(mut session) = self.world.get_mut::<DtlsSession>(entity) {
            path = selected.or(session.reply_path);
            if let Some(conn) = session.conn.as_deref_mut() {
                conn.close();
                while let Some(payload) = conn.poll_transmit() {
                    sealed.push(payload);
                }
            }
        }
        if let Some(p) = path {
            let count = sealed.len() as u64;
            self.world
                .resource_mut::<Transmits>()
                .0
                .extend(sealed.into_iter().map(|payload| Datagram {
                    local: p.local,
                    remote: p.remote,
                    payload,
                }));
            self.world.resource_mut::<ShardStats>().datagrams_out += count;
        }
        ice::remove_peer_now(&mut self.world, entity, reason);
        self.collect_events();
    }

    /// How many entities the shard's World holds: one per peer (with all of its
    /// components), plus the ones bevy keeps for the shard's resources, so compare
    /// it with a baseline. O(entities): for tests and reports.
    pub fn entity_count(&self) -> usize {
        self.world.entity_count() as usize
    }

    /// The peer's data channel `channel`: its label, protocol, type and state.
    pub fn channel(&self, id: PeerId, channel: u16) -> Option<&Channel> {
        let entity = *self.world.resource::<PeerIndex>().by_id.get(&id)?;
        self.world
            .get::<DataChannels>(entity)?
            .channels
            .get(&channel)
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
