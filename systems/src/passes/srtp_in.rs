//! The `srtp_in` pass: decrypts each SRTP/SRTCP datagram of the tick once (RFC 3711,
//! RFC 7714) with its peer's inbound context, into a plaintext `Bytes` of its own
//! size that the media pass routes; failures (authentication, replay, too short) are
//! counted and dropped.

use bevy_ecs::prelude::*;
use bytes::BytesMut;
use shoal_components::rtp::RtpOrRtcp;
use shoal_components::stats::ShardStats;
use shoal_components::tick::{MediaInbox, MediaPlain};
use shoal_components::transport::PeerSrtp;

/// The `srtp_in` pass.
pub fn srtp_in(
    mut inbox: ResMut<MediaInbox>,
    mut peers: Query<&mut PeerSrtp>,
    mut plain: ResMut<MediaPlain>,
    mut stats: ResMut<ShardStats>,
) {
    for (entity, d, arrived) in inbox.0.drain(..) {
        stats.media_in += 1;
        let Ok(mut srtp) = peers.get_mut(entity) else {
            stats.media_without_keys += 1;
            continue;
        };
        let Some(kind) = RtpOrRtcp::of(&d.payload) else {
            stats.media_malformed += 1;
            continue;
        };
        // A buffer of the packet's own size: the plaintext may sit in a track's cache
        // for a while, and must keep nothing else alive there.
        let mut packet = BytesMut::with_capacity(d.payload.len());
        packet.extend_from_slice(&d.payload);
        let inbound = &mut srtp.session.inbound;
        let len = match kind {
            RtpOrRtcp::Rtp => inbound.unprotect_rtp(&mut packet).map(|u| u.len),
            RtpOrRtcp::Rtcp => inbound.unprotect_rtcp(&mut packet).map(|u| u.len),
        };
        match len {
            Ok(len) => {
                packet.truncate(len);
                match kind {
                    RtpOrRtcp::Rtp => plain.rtp.push((entity, packet.freeze(), arrived)),
                    RtpOrRtcp::Rtcp => plain.rtcp.push((entity, packet.freeze())),
                }
            }
            Err(_) => stats.srtp_unprotect_failed += 1,
        }
    }
}
