//! The `egress` pass: everything the passes queued this tick becomes one batch of
//! datagrams for the driver: the records and packets already sealed where they were
//! made, then the media half: each subscriber's copy (its SSRC, payload type,
//! continuous sequence numbers and timestamps, its own mid header extension, the
//! audio level carried over, shoal's transport-wide sequence number) written straight into the shared buffer and protected
//! there with the subscriber's outbound SRTP context, and every RTCP compound
//! protected likewise: one decrypt per incoming packet, one encrypt per copy, no
//! allocation per packet once warm.

use bevy_ecs::prelude::*;
use rand_core::RngCore;
use shoal_components::congestion::TransportWide;
use shoal_components::media::{RetiredSsrcs, Subscription};
use shoal_components::net::Datagram;
use shoal_components::peer::Ice;
use shoal_components::rtp::{RtpFields, RtpWriter};
use shoal_components::shared::ShardRng;
use shoal_components::stats::ShardStats;
use shoal_components::tick::{MediaOut, Now, Outbox, Outgoing, SharedRtp, Transmits, WriteBuffer};
use shoal_components::time::Time;
use shoal_components::transport::PeerSrtp;

/// The RTP clock of VP8 and H.264 (RFC 7741 §4.1, RFC 6184 §5.1): 90 kHz.
const VIDEO_CLOCK: u32 = 90_000;

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
    mut peers: Query<(&Ice, &mut PeerSrtp, Option<&mut TransportWide>)>,
    mut retired: ResMut<RetiredSsrcs>,
) {
    stats.datagrams_out += outbox.0.len() as u64;
    tx.0.append(&mut outbox.0);
    // Ended subscriptions' SSRCs leave their subscriber's outbound context, so it
    // does not fill up over a long session; the negotiation never gives one out again
    // in that session (an SRTP index must not repeat under one key: the keystream,
    // or the GCM nonce, would repeat).
    for (peer, ssrc) in retired.0.drain(..) {
        if let Ok((_, mut srtp, _)) = peers.get_mut(peer) {
            srtp.session.outbound.forget_ssrc(ssrc);
        }
    }
    if media_out.0.is_empty() {
        return;
    }
    let before = tx.0.len();
    egress_media(
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

/// The media half: every subscriber's copy written and protected into `write`,
/// every RTCP compound protected, as datagrams on each peer's selected path.
fn egress_media(
    out: &mut MediaOut,
    write: &mut WriteBuffer,
    subs: &mut Query<&mut Subscription>,
    peers: &mut Query<(&Ice, &mut PeerSrtp, Option<&mut TransportWide>)>,
    rng: &mut ShardRng,
    now: Time,
    stats: &mut ShardStats,
    transmits: &mut Vec<Datagram>,
) {
    for item in out.0.drain(..) {
        match item {
            Outgoing::Rtp {
                subscription,
                packet,
                retransmission,
            } => {
                let Ok(mut sub) = subs.get_mut(subscription) else {
                    continue;
                };
                match send_copy(
                    &mut sub,
                    &packet,
                    retransmission,
                    write,
                    peers,
                    rng,
                    now,
                    transmits,
                ) {
                    Sent::Yes if retransmission => stats.rtp_retransmitted += 1,
                    Sent::Yes => stats.rtp_forwarded += 1,
                    Sent::NotReady => stats.media_receiver_not_ready += 1,
                    Sent::Failed => stats.media_send_failed += 1,
                }
            }
            Outgoing::Rtcp { peer, packet } => {
                let Ok((ice, mut srtp, _)) = peers.get_mut(peer) else {
                    stats.media_receiver_not_ready += 1;
                    continue;
                };
                let Some(path) = ice.selected else {
                    stats.media_receiver_not_ready += 1;
                    continue;
                };
                reserve(write, packet.len());
                write.0.extend_from_slice(&packet);
                if srtp
                    .session
                    .outbound
                    .protect_rtcp_tail(&mut write.0, 0)
                    .is_err()
                {
                    write.0.clear();
                    stats.media_send_failed += 1;
                    continue;
                }
                let payload = write.0.split().freeze();
                transmits.push(Datagram {
                    local: path.local,
                    remote: path.remote,
                    payload,
                });
                stats.rtcp_sent += 1;
            }
        }
    }
}

/// What became of a subscriber's copy.
enum Sent {
    /// Out.
    Yes,
    /// The subscriber cannot receive yet (no SRTP keys or no selected path).
    NotReady,
    /// Protection failed (an SSRC limit, an index the context refuses to repeat) or the
    /// packet was not RTP.
    Failed,
}

/// Room for one more packet in the shared write buffer (empty between packets: each
/// is split off whole).
fn reserve(write: &mut WriteBuffer, n: usize) {
    const CHUNK: usize = 64 * 1024;
    debug_assert!(write.0.is_empty());
    if write.0.capacity() < n + 64 {
        write.0.reserve(CHUNK.max(n + 64));
    }
}

/// Writes the subscriber's copy and protects it; false if it could not be sent.
fn send_copy(
    sub: &mut Subscription,
    rtp: &SharedRtp,
    rtx: bool,
    write: &mut WriteBuffer,
    peers: &mut Query<(&Ice, &mut PeerSrtp, Option<&mut TransportWide>)>,
    rng: &mut ShardRng,
    now: Time,
    transmits: &mut Vec<Datagram>,
) -> Sent {
    let (h, seq) = (&rtp.header, rtp.seq);
    let Some(payload) = rtp.packet.get(h.payload_range()) else {
        return Sent::Failed;
    };
    // No keys or no path yet: the subscriber is still connecting.
    let Ok((ice, mut srtp, transport)) = peers.get_mut(sub.subscriber) else {
        return Sent::NotReady;
    };
    let Some(path) = ice.selected else {
        return Sent::NotReady;
    };
    if !sub.started {
        if rtx {
            return Sent::NotReady;
        }
        // RFC 3550 §5.1: random initial sequence numbers (the RTX stream's too) and
        // timestamp.
        sub.started = true;
        sub.first_seq = seq;
        let r = rng.0.next_u64();
        sub.seq_offset = (r as u16).wrapping_sub((seq & 0xffff) as u16);
        sub.ts_offset = ((r >> 16) as u32).wrapping_sub(h.timestamp);
        sub.rtx_seq = (r >> 48) as u16;
    }
    // Packets of the stream left, queued in this tick before the switch, still go
    // out on the old offsets; the first of the new stream re-bases them.
    if let (Some(choice), Some(layer), false) = (sub.layers.as_mut(), rtp.layer, rtx)
        && choice.rebase
        && choice.current == Some(layer.index)
    {
        // A switch of simulcast stream (RFC 8853): the new stream's numbers go on
        // from the last ones sent, its timestamps from the last one by the time
        // between them (RFC 3550 §5.1: the timestamp follows the sampling clock),
        // its VP8 picture numbers from the last picture's (RFC 7741 §4.2).
        choice.rebase = false;
        sub.seq_offset = choice
            .last_seq
            .wrapping_add(1)
            .wrapping_sub((seq & 0xffff) as u16);
        if let Some((last, at)) = sub.last_rtp_ts {
            let elapsed = now.saturating_since(at).as_micros();
            let step = ((elapsed * u128::from(VIDEO_CLOCK) / 1_000_000) as u32).max(1);
            sub.ts_offset = last.wrapping_add(step).wrapping_sub(h.timestamp);
        }
        if let Some(d) = layer.vp8 {
            let (last_picture, last_tl0) = choice.last_picture;
            let picture = d.picture_id.map_or(0, |(p, _, _)| p);
            let tl0 = d.tl0_pic_idx.map_or(0, |(t, _)| t);
            choice.picture_offset = (
                last_picture.wrapping_add(1).wrapping_sub(picture),
                last_tl0.wrapping_add(1).wrapping_sub(tl0),
            );
        }
    }
    let out_seq = ((seq & 0xffff) as u16).wrapping_add(sub.seq_offset);
    let timestamp = h.timestamp.wrapping_add(sub.ts_offset);
    // A simulcast stream's VP8 descriptor, renumbered for this subscriber.
    let mut descriptor = [0u8; 8];
    let mut renumbered = 0;
    if let (Some(choice), Some(d)) = (sub.layers.as_mut(), rtp.layer.and_then(|l| l.vp8))
        && let Some(prefix) = payload.get(..d.len).filter(|p| p.len() <= descriptor.len())
    {
        let picture = d.picture_id.map_or(0, |(p, _, wide)| {
            let mask = if wide { 0x7fff } else { 0x7f };
            p.wrapping_add(choice.picture_offset.0) & mask
        });
        let tl0 = d
            .tl0_pic_idx
            .map_or(0, |(t, _)| t.wrapping_add(choice.picture_offset.1));
        descriptor[..prefix.len()].copy_from_slice(prefix);
        d.rewrite(&mut descriptor[..prefix.len()], picture, tl0);
        renumbered = prefix.len();
        if !rtx {
            choice.last_picture = (picture, tl0);
        }
    }
    let (ssrc, payload_type, sequence_number) = if rtx {
        let (Some(ssrc), Some(pt)) = (sub.spec.rtx_ssrc, sub.spec.rtx_payload_type) else {
            return Sent::Failed;
        };
        let n = sub.rtx_seq;
        sub.rtx_seq = n.wrapping_add(1);
        (ssrc, pt, n)
    } else {
        (sub.spec.ssrc, sub.spec.payload_type, out_seq)
    };
    let fields = RtpFields {
        marker: h.marker,
        payload_type,
        sequence_number,
        timestamp,
        ssrc,
    };
    reserve(write, rtp.packet.len() + 32);
    // The transport-wide stream, when the subscriber takes it: a number is used only
    // by a packet that leaves with it (a gap would read as loss).
    let mut transport = transport.filter(|_| sub.spec.extensions.transport_cc.is_some());
    let mut stamped = false;
    {
        let mut w = RtpWriter::new(&mut write.0, &fields, &[]);
        // The subscriber's own mid (RFC 8843 §9.2), never the publisher's.
        if let Some(id) = sub.spec.extensions.mid {
            let _ = w.extension(id, sub.spec.mid.as_bytes());
        }
        // RFC 6464's level, carried over under the subscriber's id.
        if let (Some(id), Some(level)) = (sub.spec.extensions.audio_level, rtp.audio_level) {
            let _ = w.extension(id, &[level]);
        }
        // shoal's own transport-wide number (draft-holmer-rmcat-transport-wide-cc-
        // extensions-01 §2), one space over everything the subscriber is sent.
        if let (Some(id), Some(tw)) = (sub.spec.extensions.transport_cc, transport.as_mut()) {
            let seq = tw.send.stamp(now);
            stamped = w.extension(id, &seq.to_be_bytes()).is_ok();
            if !stamped {
                tw.send.unstamp_last();
            }
        }
        if rtx {
            w.payload(&out_seq.to_be_bytes());
        }
        w.payload(&descriptor[..renumbered]);
        w.payload(&payload[renumbered..]);
        w.finish(0);
    }
    if srtp
        .session
        .outbound
        .protect_rtp_tail(&mut write.0, 0)
        .is_err()
    {
        write.0.clear();
        if let (true, Some(tw)) = (stamped, transport.as_mut()) {
            tw.send.unstamp_last();
        }
        return Sent::Failed;
    }
    if let (true, Some(tw)) = (stamped, transport.as_mut()) {
        tw.send.history.resize_last(write.0.len());
    }
    if let (Some(choice), false) = (sub.layers.as_mut(), rtx)
        && (out_seq.wrapping_sub(choice.last_seq) < 0x8000 || sub.packets_sent == 0)
    {
        choice.last_seq = out_seq;
    }
    if !rtx {
        // RFC 3550 §6.4.1: the SR's octet count is payload octets only, "not
        // including header or padding" (nor SRTP's tag).
        sub.packets_sent = sub.packets_sent.wrapping_add(1);
        sub.octets_sent = sub.octets_sent.wrapping_add(payload.len() as u32);
        sub.last_rtp_ts = Some((timestamp, now));
    }
    transmits.push(Datagram {
        local: path.local,
        remote: path.remote,
        payload: write.0.split().freeze(),
    });
    Sent::Yes
}
