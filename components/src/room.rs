//! Rooms as data: a peer's membership is a [`RoomMember`] component, and each shard
//! keeps a [`RoomIndex`] from room to the member entities it holds, so the relay
//! finds a room's members by hash, never by scanning peers.
//!
//! The index follows the component by a hook: whenever a `RoomMember` leaves its
//! entity (the peer is despawned for any reason, or the component is removed), the
//! entity leaves the index, and a room's entry goes with its last member. No removal
//! path can forget it.
//!
//! A room's members may sit on several shards of a node. [`RoomPresence`] is what a
//! shard knows of the others: for each room, the other shards that hold members of
//! it, as the control plane (which places every participant) last told it.

use bevy_ecs::lifecycle::HookContext;
use bevy_ecs::prelude::{Component, Entity, Resource};
use bevy_ecs::world::DeferredWorld;

use crate::hash::FastMap;

/// The control plane's name for a room, the same on every shard.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RoomId(pub u64);

/// Marks a peer as a member of a room. Inserting it does not join the index (the
/// shard does that when it adds the peer); removing it, or despawning the peer, leaves.
#[derive(Component, Clone, Copy, Debug, PartialEq, Eq)]
#[component(on_remove = leave_room_index)]
pub struct RoomMember {
    /// The room.
    pub room: RoomId,
    /// A node-to-node link of the room (a cascade), not a participant: a message
    /// that came in on a link goes to members only, never out on another link.
    pub link: bool,
}

fn leave_room_index(mut world: DeferredWorld, ctx: HookContext) {
    let Some(room) = world.get::<RoomMember>(ctx.entity).map(|m| m.room) else {
        return;
    };
    if let Some(mut index) = world.get_resource_mut::<RoomIndex>() {
        index.leave(room, ctx.entity);
    }
}

/// A shard's rooms: each to the member entities on this shard, in joining order.
#[derive(Resource, Debug, Default)]
pub struct RoomIndex {
    rooms: FastMap<RoomId, Vec<Entity>>,
}

impl RoomIndex {
    /// Adds `entity` to `room` (creating the room's entry); a second join is a no-op.
    pub fn join(&mut self, room: RoomId, entity: Entity) {
        let members = self.rooms.entry(room).or_default();
        if !members.contains(&entity) {
            members.push(entity);
        }
    }

    /// Removes `entity` from `room`; the room's entry goes with its last member.
    /// O(members): leaving is rare next to relaying.
    pub fn leave(&mut self, room: RoomId, entity: Entity) {
        let Some(members) = self.rooms.get_mut(&room) else {
            return;
        };
        if let Some(i) = members.iter().position(|&e| e == entity) {
            // Order among the remaining members does not matter to the relay.
            members.swap_remove(i);
        }
        if members.is_empty() {
            self.rooms.remove(&room);
        }
    }

    /// The room's members on this shard; empty for a room with none here.
    pub fn members(&self, room: RoomId) -> &[Entity] {
        self.rooms.get(&room).map_or(&[], Vec::as_slice)
    }

    /// Rooms with at least one member on this shard.
    pub fn room_count(&self) -> usize {
        self.rooms.len()
    }

    /// Members across all rooms of this shard.
    pub fn member_count(&self) -> usize {
        self.rooms.values().map(Vec::len).sum()
    }
}

/// For each room, the *other* shards of the node that hold members of it (by shard
/// index, sorted, without repeats). Set whole by the control plane whenever a room's
/// set of shards changes; a room no other shard shares has no entry.
#[derive(Resource, Debug, Default)]
pub struct RoomPresence {
    rooms: FastMap<RoomId, Vec<usize>>,
}

impl RoomPresence {
    /// Replaces what is known of `room`: `siblings` are the other shards holding
    /// members of it. An empty set removes the room's entry.
    pub fn set(&mut self, room: RoomId, siblings: &[usize]) {
        if siblings.is_empty() {
            self.rooms.remove(&room);
            return;
        }
        let entry = self.rooms.entry(room).or_default();
        entry.clear();
        entry.extend_from_slice(siblings);
        entry.sort_unstable();
        entry.dedup();
    }

    /// The other shards holding members of `room`; empty when none does.
    pub fn siblings(&self, room: RoomId) -> &[usize] {
        self.rooms.get(&room).map_or(&[], Vec::as_slice)
    }

    /// Rooms that some other shard shares with this one.
    pub fn room_count(&self) -> usize {
        self.rooms.len()
    }
}

#[cfg(test)]
mod tests {
    use bevy_ecs::world::World;

    use super::*;

    #[test]
    fn despawning_a_member_leaves_the_index_and_the_last_one_closes_the_room() {
        let mut world = World::new();
        world.init_resource::<RoomIndex>();
        let room = RoomId(7);
        let member = |room| RoomMember { room, link: false };
        let a = world.spawn(member(room)).id();
        let b = world.spawn(member(room)).id();
        let other = world.spawn(member(RoomId(8))).id();
        {
            let mut index = world.resource_mut::<RoomIndex>();
            index.join(room, a);
            index.join(room, b);
            index.join(room, b);
            index.join(RoomId(8), other);
        }
        assert_eq!(world.resource::<RoomIndex>().members(room), &[a, b]);
        world.despawn(a);
        assert_eq!(world.resource::<RoomIndex>().members(room), &[b]);
        world.entity_mut(b).remove::<RoomMember>();
        let index = world.resource::<RoomIndex>();
        assert!(index.members(room).is_empty());
        assert_eq!(index.room_count(), 1);
        assert_eq!(index.member_count(), 1);
    }

    #[test]
    fn presence_is_replaced_whole_and_an_empty_set_removes_the_room() {
        let mut presence = RoomPresence::default();
        presence.set(RoomId(1), &[3, 1, 3]);
        presence.set(RoomId(2), &[2]);
        assert_eq!(presence.siblings(RoomId(1)), &[1, 3]);
        presence.set(RoomId(1), &[2]);
        assert_eq!(presence.siblings(RoomId(1)), &[2]);
        presence.set(RoomId(1), &[]);
        assert!(presence.siblings(RoomId(1)).is_empty());
        assert!(presence.siblings(RoomId(9)).is_empty());
        assert_eq!(presence.room_count(), 1);
    }
}
