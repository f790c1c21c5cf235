//! Which shards hold members of each room, and what each shard must be told when
//! that changes, so its relay forwards the room's messages to the others (the one
//! channel hop of a room split across shards).
//!
//! Placement decides where every participant sits, so the control plane is the one
//! that knows; it counts each room's participants per shard as it admits and
//! forgets them. When a room's set of shards changes, each shard whose view of it
//! changed gets the room's other shards ([`ShardCommand::RoomPresence`]), an empty
//! set once it holds none or no other shard does. A view is the whole set, so
//! telling a shard twice is harmless and a lost update is repaired by sending the
//! current view again: an update a full command queue refused is retried by
//! [`Presence::retries`] (the control plane's one-second sweep).
//!
//! [`ShardCommand::RoomPresence`]: crate::driver::ShardCommand::RoomPresence

use std::collections::{BTreeMap, BTreeSet, HashMap};

use shoal_components::room::RoomId;

/// What one shard must be told about one room.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PresenceUpdate {
    /// The shard to tell.
    pub shard: usize,
    /// The room.
    pub room: RoomId,
    /// The other shards holding members of the room (empty: none).
    pub siblings: Vec<usize>,
}

/// Each room's participants per shard, and the updates still owed to shards.
#[derive(Debug, Default)]
pub struct Presence {
    /// Room → shard → participants placed there (no zero counts, no empty rooms).
    rooms: HashMap<RoomId, BTreeMap<usize, usize>>,
    /// Updates a shard could not take; its current view is sent again.
    owed: BTreeSet<(RoomId, usize)>,
}

impl Presence {
    /// A participant of `room` was placed on `shard`; returns who must be told.
    pub fn join(&mut self, room: RoomId, shard: usize) -> Vec<PresenceUpdate> {
        let counts = self.rooms.entry(room).or_default();
        let before = shards_of(counts);
        *counts.entry(shard).or_default() += 1;
        let after = shards_of(counts);
        updates(room, &before, &after)
    }

    /// A participant of `room` left `shard`; returns who must be told.
    pub fn leave(&mut self, room: RoomId, shard: usize) -> Vec<PresenceUpdate> {
        let Some(counts) = self.rooms.get_mut(&room) else {
            return Vec::new();
        };
        let before = shards_of(counts);
        if let Some(n) = counts.get_mut(&shard) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                counts.remove(&shard);
            }
        }
        let after = shards_of(counts);
        if counts.is_empty() {
            self.rooms.remove(&room);
        }
        updates(room, &before, &after)
    }

    /// The shards holding members of `room`, in index order.
    pub fn shards(&self, room: RoomId) -> Vec<usize> {
        self.rooms.get(&room).map(shards_of).unwrap_or_default()
    }

    /// Remembers that `update` did not reach its shard.
    pub fn owe(&mut self, update: &PresenceUpdate) {
        self.owed.insert((update.room, update.shard));
    }

    /// The current view of every room for every shard an update did not reach, to
    /// send again; the debt is cleared (owe it again if a send fails).
    pub fn retries(&mut self) -> Vec<PresenceUpdate> {
        std::mem::take(&mut self.owed)
            .into_iter()
            .map(|(room, shard)| PresenceUpdate {
                shard,
                room,
                siblings: view(shard, &self.shards(room)),
            })
            .collect()
    }
}

fn shards_of(counts: &BTreeMap<usize, usize>) -> Vec<usize> {
    counts.keys().copied().collect()
}

/// What `shard` should know of a room held by `shards`: the others, if it is one.
fn view(shard: usize, shards: &[usize]) -> Vec<usize> {
    if !shards.contains(&shard) {
        return Vec::new();
    }
    shards.iter().copied().filter(|&s| s != shard).collect()
}

/// An update for each shard whose view changed from `before` to `after`.
fn updates(room: RoomId, before: &[usize], after: &[usize]) -> Vec<PresenceUpdate> {
    let touched: BTreeSet<usize> = before.iter().chain(after).copied().collect();
    touched
        .into_iter()
        .filter_map(|shard| {
            let siblings = view(shard, after);
            (view(shard, before) != siblings).then_some(PresenceUpdate {
                shard,
                room,
                siblings,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const R: RoomId = RoomId(1);

    fn told(updates: &[PresenceUpdate]) -> Vec<(usize, Vec<usize>)> {
        updates
            .iter()
            .map(|u| (u.shard, u.siblings.clone()))
            .collect()
    }

    #[test]
    fn shards_hear_when_a_room_spreads_and_when_it_shrinks() {
        let mut p = Presence::default();
        // Alone on shard 0: nobody to forward to, nothing to say.
        assert!(p.join(R, 0).is_empty());
        assert!(p.join(R, 0).is_empty());
        // Shard 2 joins the room: both learn of each other.
        assert_eq!(told(&p.join(R, 2)), [(0, vec![2]), (2, vec![0])]);
        // A third shard: everyone's view changes.
        assert_eq!(
            told(&p.join(R, 1)),
            [(0, vec![1, 2]), (1, vec![0, 2]), (2, vec![0, 1])]
        );
        // More members on a shard already there: no change.
        assert!(p.join(R, 1).is_empty());
        assert!(p.leave(R, 1).is_empty());
        // Shard 1's last member leaves: its entry goes, the others drop it.
        assert_eq!(
            told(&p.leave(R, 1)),
            [(0, vec![2]), (1, vec![]), (2, vec![0])]
        );
        assert_eq!(p.shards(R), [0, 2]);
        // Shard 2's last member leaves: the room is on one shard again.
        assert_eq!(told(&p.leave(R, 2)), [(0, vec![]), (2, vec![])]);
        assert!(p.leave(R, 0).is_empty());
        assert!(p.leave(R, 0).is_empty());
        assert!(p.shards(R).is_empty());
        assert!(p.rooms.is_empty(), "an empty room leaves nothing behind");
        // Leaving a room nobody is in is harmless.
        assert!(p.leave(RoomId(9), 3).is_empty());
    }

    #[test]
    fn an_update_that_did_not_arrive_is_sent_again_as_the_current_view() {
        let mut p = Presence::default();
        p.join(R, 0);
        let updates = p.join(R, 1);
        for u in &updates {
            p.owe(u);
        }
        // Meanwhile a third shard joins; the retry carries what is true now.
        p.join(R, 2);
        assert_eq!(told(&p.retries()), [(0, vec![1, 2]), (1, vec![0, 2])]);
        assert!(p.retries().is_empty(), "paid once");
        // Owed to a shard that has left the room since: it is told it has none.
        let updates = p.leave(R, 2);
        p.owe(&updates[2]);
        p.leave(R, 1);
        assert_eq!(told(&p.retries()), [(2, vec![])]);
    }
}
