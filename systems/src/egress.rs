//! The `egress` pass: everything the passes queued this tick becomes one batch of
//! datagrams for the driver. (DTLS and SRTP protection join here with their issues.)

use bevy_ecs::prelude::*;
use shoal_components::stats::ShardStats;
use shoal_components::tick::{Outbox, Transmits};

/// The egress pass.
pub fn egress(
    mut outbox: ResMut<Outbox>,
    mut tx: ResMut<Transmits>,
    mut stats: ResMut<ShardStats>,
) {
    stats.datagrams_out += outbox.0.len() as u64;
    tx.0.append(&mut outbox.0);
}
