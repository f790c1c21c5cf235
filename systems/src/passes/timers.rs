//! The `timers` pass: leaves the deadline heap with a live entry on top, so the
//! shard's next wake-up is the heap's minimum.

use bevy_ecs::prelude::*;
use shoal_components::timer::{TimerHeap, Timers};

/// Stale entries pruned per tick at most (each costs O(log n)).
pub const MAX_PRUNE_PER_TICK: usize = 4096;

/// The timers pass.
pub fn timers(mut heap: ResMut<TimerHeap>, table: Query<&Timers>) {
    let mut budget = MAX_PRUNE_PER_TICK;
    heap.prune(|entity, kind, at| {
        if budget == 0 {
            return true;
        }
        budget -= 1;
        table.get(entity).is_ok_and(|t| t.get(kind) == Some(at))
    });
}
