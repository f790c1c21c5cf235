//! The `egress` pass: everything the passes queued this tick becomes one batch of
//! datagrams for the driver: the records and packets already sealed where they were
//! made, then the media half: each subscriber's copy (its SSRC, payload type,
//! continuous sequence numbers and timestamps, its own mid header extension, the
//! audio level carried over, shoal's transport-wide sequence number) written straight into the shared buffer and protected
//! there with the subscriber's outbound SRTP context, and every RTCP compound
//! protected likewise: one decrypt per incoming packet, one encrypt per copy, no
//! allocation per packet once warm.

use bevy_ecs::prelude::*;
use bevy_ecs::system::SystemParam;
use rand_core::RngCore;
use shoal_components::congestion::TransportWide;
use shoal_components::congestion::pacer::{Paced, Pacer};
use shoal_components::media::{RetiredSsrcs, Subscription};
use shoal_components::net::Datagram;
use shoal_components::peer::Ice;
use shoal_components::rtp::{RtpFields, RtpWriter};
use shoal_components::shared::ShardRng;
use shoal_components::stats::ShardStats;
use shoal_components::tick::{
    DueTimers, MediaOut, Now, Outbox, Outgoing, SharedRtp, Transmits, WriteBuffer,
};
use shoal_components::time::Time;
use shoal_components::timer::{TimerHeap, TimerKind, Timers};
use shoal_components::transport::PeerSrtp;

/// The RTP clock of VP8 and H.264 (RFC 7741 §4.1, RFC 6184 §5.1): 90 kHz.
const VIDEO_CLOCK: u32 = 90_000;

/// What the egress pass reads and writes besides the tables.
#[derive(SystemParam)]
pub struct EgressCtx<'w, 's> {
    now: Res<'w, Now>,
    outbox: ResMut<'w, Outbox>,
    tx: ResMut<'w, Transmits>,
    stats: ResMut<'w, ShardStats>,
    media_out: ResMut<'w, MediaOut>,
    write: ResMut<'w, WriteBuffer>,
    rng: ResMut<'w, ShardRng>,
    retired: ResMut<'w, RetiredSsrcs>,
    due: Res<'w, DueTimers>,
    heap: ResMut<'w, TimerHeap>,
    /// Peers whose pacing queue took packets this tick.
    touched: Local<'s, Vec<Entity>>,
}

/// A peer's path and SRTP, and what it estimates of shoal's sending.
type PeerQuery<'w, 's> = Query<
    'w,
    's,
    (
        &'static Ice,
        &'static mut PeerSrtp,
        Option<&'static mut TransportWide>,
    ),
>;

/// The egress pass.
pub fn egress(
    mut ctx: EgressCtx,
    mut subs: Query<&mut Subscription>,
    mut peers: PeerQuery,
    mut pacers: Query<(&mut Pacer, &mut Timers)>,
) {
    let now = ctx.now.0;
    let sent = ctx.outbox.0.len() as u64;
    ctx.stats.datagrams_out += sent;
    let mut outbox = std::mem::take(&mut ctx.outbox.0);
    ctx.tx.0.append(&mut outbox);
    ctx.outbox.0 = outbox;
    // Ended subscriptions' SSRCs leave their subscriber's outbound context, so it
    // does not fill up over a long session; the negotiation never gives one out again
    // in that session (an SRTP index must not repeat under one key: the keystream,
    // or the GCM nonce, would repeat).
    for (peer, ssrc) in ctx.retired.0.drain(..) {
        if let Ok((_, mut srtp, _)) = peers.get_mut(peer) {
            srtp.session.outbound.forget_ssrc(ssrc);
        }
    }
    let before = ctx.tx.0.len();
    let mut touched = std::mem::take(&mut *ctx.touched);
    // Pacing queues whose next packet is due.
    for i in 0..ctx.due.0.len() {
        if let (peer, TimerKind::Pace) = ctx.due.0[i] {
            touched.push(peer);
        }
    }
    if !ctx.media_out.0.is_empty() {
        egress_media(&mut ctx, &mut subs, &mut peers, &mut pacers, &mut touched);
    }
    touched.sort_unstable();
    touched.dedup();
    for &peer in &touched {
        drain(&mut ctx, peer, &mut subs, &mut peers, &mut pacers, now);
    }
    touched.clear();
    *ctx.touched = touched;
    let sent = (ctx.tx.0.len() - before) as u64;
    ctx.stats.datagrams_out += sent;
}

/// The media half: every subscriber's copy written and protected (or queued in its
/// pacer), every RTCP compound protected, as datagrams on each peer's selected path.
fn egress_media(
    ctx: &mut EgressCtx,
    subs: &mut Query<&mut Subscription>,
    peers: &mut PeerQuery,
    pacers: &mut Query<(&mut Pacer, &mut Timers)>,
    touched: &mut Vec<Entity>,
) {
    let now = ctx.now.0;
    let mut out = std::mem::take(&mut ctx.media_out.0);
    for item in out.drain(..) {
        match item {
            Outgoing::Rtp {
                subscription,
                packet,
                retransmission,
                probe,
            } => {
                let Ok(mut sub) = subs.get_mut(subscription) else {
                    continue;
                };
                let peer = sub.subscriber;
                // Paced once the peer's feedback gives an estimate: straight out while
                // its queue is empty and its budget allows, else queued.
                let (estimate, allowed) = pacing(peers, peer, now);
                if let (Some(estimate), Ok((mut pacer, _)), false) =
                    (estimate, pacers.get_mut(peer), probe)
                {
                    pacer.refill(now, estimate, allowed);
                    if !(pacer.is_empty() && pacer.may_send()) {
                        let item = Paced {
                            subscription,
                            packet,
                            retransmission,
                        };
                        if pacer.push(item) {
                            ctx.stats.rtp_paced += 1;
                        } else {
                            ctx.stats.pacer_dropped += 1;
                        }
                        touched.push(peer);
                        continue;
                    }
                    pacer.spend(packet.packet.len());
                }
                forward(ctx, &mut sub, peers, &packet, retransmission);
            }
            Outgoing::Rtcp { peer, packet } => {
                let Ok((ice, mut srtp, _)) = peers.get_mut(peer) else {
                    ctx.stats.media_receiver_not_ready += 1;
                    continue;
                };
                let Some(path) = ice.selected else {
                    ctx.stats.media_receiver_not_ready += 1;
                    continue;
                };
                reserve(&mut ctx.write, packet.len());
                ctx.write.0.extend_from_slice(&packet);
                if srtp
                    .session
                    .outbound
                    .protect_rtcp_tail(&mut ctx.write.0, 0)
                    .is_err()
                {
                    ctx.write.0.clear();
                    ctx.stats.media_send_failed += 1;
                    continue;
                }
                let payload = ctx.write.0.split().freeze();
                ctx.tx.0.push(Datagram {
                    local: path.local,
                    remote: path.remote,
                    payload,
                });
                ctx.stats.rtcp_sent += 1;
            }
        }
    }
    ctx.media_out.0 = out;
}

/// What `peer`'s feedback says of its path at `now`: the estimate, bit/s, and the
/// largest burst to send it, bytes.
fn pacing(peers: &PeerQuery, peer: Entity, now: Time) -> (Option<u64>, Option<i64>) {
    peers
        .get(peer)
        .ok()
        .and_then(|(_, _, tw)| tw)
        .map_or((None, None), |tw| {
            (tw.send.estimate_bps(), tw.send.allowed_burst(now))
        })
}

/// Sends what `peer`'s pacing budget allows of its queue; the rest waits for the
/// peer's pacing timer.
fn drain(
    ctx: &mut EgressCtx,
    peer: Entity,
    subs: &mut Query<&mut Subscription>,
    peers: &mut PeerQuery,
    pacers: &mut Query<(&mut Pacer, &mut Timers)>,
    now: Time,
) {
    let (estimate, allowed) = pacing(peers, peer, now);
    loop {
        let Ok((mut pacer, mut timers)) = pacers.get_mut(peer) else {
            return;
        };
        if let Some(estimate) = estimate {
            pacer.refill(now, estimate, allowed);
        }
        if pacer.is_empty() {
            return;
        }
        if !pacer.may_send() {
            let at = pacer.next_send(now);
            ctx.heap.arm(&mut timers, peer, TimerKind::Pace, at);
            return;
        }
        let Some(item) = pacer.pop() else {
            return;
        };
        pacer.spend(item.packet.packet.len());
        if let Ok(mut sub) = subs.get_mut(item.subscription) {
            forward(ctx, &mut sub, peers, &item.packet, item.retransmission);
        }
    }
}

/// Writes, protects and sends one subscriber's copy, counting what became of it.
fn forward(
    ctx: &mut EgressCtx,
    sub: &mut Subscription,
    peers: &mut PeerQuery,
    packet: &SharedRtp,
    retransmission: bool,
) {
    let now = ctx.now.0;
    let EgressCtx {
        write,
        rng,
        tx,
        stats,
        ..
    } = ctx;
    match send_copy(
        sub,
        packet,
        retransmission,
        write,
        peers,
        rng,
        now,
        &mut tx.0,
    ) {
        Sent::Yes if retransmission => stats.rtp_retransmitted += 1,
        Sent::Yes => stats.rtp_forwarded += 1,
        Sent::NotReady => stats.media_receiver_not_ready += 1,
        Sent::Failed => stats.media_send_failed += 1,
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
    peers: &mut PeerQuery,
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
    // A retransmission of a simulcast stream other than the one sent last: its
    // numbers belong to offsets no longer in force.
    if let (Some(choice), Some(layer), true) = (sub.layers.as_ref(), rtp.layer, rtx)
        && choice.sent != Some(layer.index)
    {
        return Sent::Failed;
    }
    // The publisher's number less what temporal layers not sent took out before it.
    let numbered = ((seq & 0xffff) as u16).wrapping_sub(rtp.shift.seq);
    if !sub.started {
        if rtx {
            return Sent::NotReady;
        }
        // RFC 3550 §5.1: random initial sequence numbers (the RTX stream's too) and
        // timestamp.
        sub.started = true;
        sub.first_seq = seq;
        let r = rng.0.next_u64();
        sub.seq_offset = (r as u16).wrapping_sub(numbered);
        sub.ts_offset = ((r >> 16) as u32).wrapping_sub(h.timestamp);
        sub.rtx_seq = (r >> 48) as u16;
        if let (Some(choice), Some(layer)) = (sub.layers.as_mut(), rtp.layer) {
            choice.sent = Some(layer.index);
        }
    }
    // The first packet sent of another simulcast stream (RFC 8853) than the last:
    // the new stream's numbers go on from the last ones sent, its timestamps from the
    // last one by the time between them (RFC 3550 §5.1: the timestamp follows the
    // sampling clock), its VP8 picture numbers from the last picture's (RFC 7741
    // §4.2). Judged by what is sent, in the order it is sent: a pacing queue may
    // still hold the old stream's packets when the media pass switched.
    if let (Some(choice), Some(layer), false) = (sub.layers.as_mut(), rtp.layer, rtx)
        && choice.sent != Some(layer.index)
    {
        choice.sent = Some(layer.index);
        sub.seq_offset = choice.last_seq.wrapping_add(1).wrapping_sub(numbered);
        if let Some((last, at)) = sub.last_rtp_ts {
            let elapsed = now.saturating_since(at).as_micros();
            let step = ((elapsed * u128::from(VIDEO_CLOCK) / 1_000_000) as u32).max(1);
            sub.ts_offset = last.wrapping_add(step).wrapping_sub(h.timestamp);
        }
        if let Some(d) = rtp.vp8 {
            let (last_picture, last_tl0) = choice.last_picture;
            let picture = d
                .picture_id
                .map_or(0, |(p, _, _)| p.wrapping_sub(rtp.shift.picture));
            let tl0 = d.tl0_pic_idx.map_or(0, |(t, _)| t);
            choice.picture_offset = (
                last_picture.wrapping_add(1).wrapping_sub(picture),
                last_tl0.wrapping_add(1).wrapping_sub(tl0),
            );
        }
    }
    let out_seq = numbered.wrapping_add(sub.seq_offset);
    let timestamp = h.timestamp.wrapping_add(sub.ts_offset);
    // The VP8 descriptor renumbered for this subscriber: a simulcast stream's, and
    // any stream's once temporal layers were dropped from it.
    let mut descriptor = [0u8; 8];
    let mut renumbered = 0;
    if let Some(d) = rtp
        .vp8
        .filter(|_| sub.layers.is_some() || sub.temporal.dropping())
        && let Some(prefix) = payload.get(..d.len).filter(|p| p.len() <= descriptor.len())
    {
        let offset = sub.layers.map_or((0, 0), |c| c.picture_offset);
        let picture = d.picture_id.map_or(0, |(p, _, wide)| {
            let mask = if wide { 0x7fff } else { 0x7f };
            p.wrapping_sub(rtp.shift.picture).wrapping_add(offset.0) & mask
        });
        let tl0 = d.tl0_pic_idx.map_or(0, |(t, _)| t.wrapping_add(offset.1));
        descriptor[..prefix.len()].copy_from_slice(prefix);
        d.rewrite(&mut descriptor[..prefix.len()], picture, tl0);
        renumbered = prefix.len();
        if let (Some(choice), false) = (sub.layers.as_mut(), rtx) {
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
        // The capture time, in the extension's 8-byte form under the subscriber's id.
        if let (Some(id), Some(ntp)) = (sub.spec.extensions.abs_capture_time, rtp.capture_time) {
            let _ = w.extension(id, &ntp.to_be_bytes());
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
