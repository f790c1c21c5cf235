//! The `ingest` pass: sorts the tick's datagram batch into per-protocol work lists by
//! the first byte (RFC 7983 §7), attaches the owning peer where the path is known, and
//! collects the timers that fell due.

use bevy_ecs::prelude::*;
use shoal_components::net::PacketClass;
use shoal_components::peer::PeerIndex;
use shoal_components::stats::ShardStats;
use shoal_components::tick::{DtlsInbox, DueTimers, Inbox, MediaInbox, Now, StunInbox};
use shoal_components::timer::{TimerHeap, Timers};

/// Timers fired per tick at most; the rest wait for the next tick (which the heap's
/// top then asks for at once).
pub const MAX_TIMERS_PER_TICK: usize = 4096;

/// The ingest pass.
pub fn ingest(
    now: Res<Now>,
    mut inbox: ResMut<Inbox>,
    mut stun: ResMut<StunInbox>,
    mut dtls: ResMut<DtlsInbox>,
    mut media: ResMut<MediaInbox>,
    mut due: ResMut<DueTimers>,
    mut heap: ResMut<TimerHeap>,
    mut timers: Query<&mut Timers>,
    index: Res<PeerIndex>,
    mut stats: ResMut<ShardStats>,
) {
    for (d, arrived) in inbox.0.drain(..) {
        match PacketClass::of(&d.payload) {
            PacketClass::Stun => {
                stun.0.push(d);
            }
            // Ownership is resolved in the dtls pass: ICE may validate the path of
            // a ClientHello that arrives in the same batch as the check before it.
            PacketClass::Dtls => dtls.0.push(d),
            PacketClass::Rtp => {
                // Only validated paths may carry media (RFC 8445 §11: data flows on
                // the selected pair).
                match index.by_path.get(&d.five_tuple()) {
                    Some(&entity) => media.0.push((entity, d, arrived)),
                    None => stats.dropped_unknown_source += 1,
                }
            }
            PacketClass::Zrtp | PacketClass::TurnChannel | PacketClass::Unknown => {
                stats.dropped_unknown_class += 1;
            }
        }
    }

    due.0.clear();
    while due.0.len() < MAX_TIMERS_PER_TICK {
        let Some((at, entity, kind)) = heap.pop_due(now.0) else {
            break;
        };
        // Stale entries (re-armed, cancelled, or of a removed entity) are skipped.
        if let Ok(mut t) = timers.get_mut(entity)
            && TimerHeap::take_if_live(&mut t, kind, at)
        {
            due.0.push((entity, kind));
        }
    }
}
