//! The room half of the [`Shard`] surface: membership, messages from the owner to a
//! room (`Command::SendData`), closing a peer, and the counts that show a shard let
//! go of what departed peers had.

use bevy_ecs::prelude::*;
use bytes::Bytes;
use shoal_components::net::Datagram;
use shoal_components::peer::{Ice, PeerId, PeerIndex};
use shoal_components::room::{RoomId, RoomIndex, RoomMember};
use shoal_components::sctp::dcep::ChannelType;
use shoal_components::stats::ShardStats;
use shoal_components::tick::{Now, RemoveReason, Transmits};

use super::{CommandError, Shard};
use crate::datachannel::{self, Channel, ChannelParams, DataChannels, PRIORITY_NORMAL};
use crate::dtls::pass::DtlsSession;
use crate::ice;
use crate::relay::{self, Delivery};
use crate::sctp::assoc::Sctp;

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
        let now = self.world.resource::<Now>().0;
        let (ppid, payload) = datachannel::encode(binary, payload);
        let params = ChannelParams {
            label,
            protocol: "",
            kind: ChannelType::default(),
            priority: PRIORITY_NORMAL,
        };
        let mut queued = 0;
        for &entity in &targets {
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
        self.room_targets = targets;
        self.collect_events();
        Ok(queued)
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
