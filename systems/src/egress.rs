//! The `egress` pass: everything the passes queued this tick becomes one batch of
//! datagrams for the driver: the records and packets already sealed, then each
//! subscriber's media written and SRTP-protected straight into the shared buffer
//! (`media::egress_media`).

use bevy_ecs::prelude::*;
use shoal_components::media::{RetiredSsrcs, Subscription};
use shoal_components::peer::Ice;
use shoal_components::stats::ShardStats;
use shoal_components::tick::{Now, Outbox, Transmits, WriteBuffer};

use crate::media::{self, MediaOut, PeerSrtp};
use crate::shard::ShardRng;

/// The egress pass.
pub fn egress(
    now: Res<Now>,
    mut outbox: ResMut<Outbox>,
    mut tx: ResMut<Transmits>,
    mut stats: ResMut<ShardStats>,
    mut media_out: ResMut<MediaOut>,
    mut write: ResMut<WriteBuffer>,
    mut rng: ResMut<ShardRng>,
    mut subs: Query<&mut Subscription>,
    mut peers: Query<(&Ice, &mut PeerSrtp)>,
    mut retired: ResMut<RetiredSsrcs>,
) {
    stats.datagrams_out += outbox.0.len() as u64;
    tx.0.append(&mut outbox.0);
    // Ended subscriptions' SSRCs leave their subscriber's outbound context, so it
    // does not fill up over a long session; the negotiation never gives one out again
    // in that session (an SRTP index must not repeat under one key: the keystream,
    // or the GCM nonce, would repeat).
    for (peer, ssrc) in retired.0.drain(..) {
        if let Ok((_, mut srtp)) = peers.get_mut(peer) {
            srtp.session.outbound.forget_ssrc(ssrc);
        }
    }
    if media_out.0.is_empty() {
        return;
    }
    let before = tx.0.len();
    media::egress_media(
        &mut media_out,
        &mut write,
        &mut subs,
        &mut peers,
        &mut rng,
        now.0,
        &mut stats,
        &mut tx.0,
    );
    stats.datagrams_out += (tx.0.len() - before) as u64;
}
