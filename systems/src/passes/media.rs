//! The `media` pass: routes what `srtp_in` decrypted. An RTP packet finds its track
//! by SSRC (or binds a new SSRC by its mid header extension, RFC 8843 §9.2), unwraps
//! RTX (RFC 4588 §4), goes into the track's retransmission cache and out to every
//! subscription as the same `Bytes` (and to the shards that mirror the track). Gaps
//! in a publisher's sequence are NACKed back to it; keyframe requests reach a track's
//! publisher, throttled, wherever it is.
//!
//! [`rtcp`] is the RTCP half: what arrives from publishers (SR) and subscribers
//! (NACK, PLI, FIR) and the reports and feedback shoal writes back (RFC 3550 §6.4,
//! RFC 4585), each on its own hop. `egress` writes and protects every copy.

mod layers;
mod rtcp;

use bevy_ecs::prelude::*;
use bevy_ecs::query::QueryFilter;
use bevy_ecs::system::SystemParam;
use bytes::{Bytes, BytesMut};
use shoal_components::congestion::remb::MAX_REMB_SSRCS;
use shoal_components::congestion::{FEEDBACK_INTERVAL, INITIAL_ESTIMATE_BPS, TransportWide};
use shoal_components::media::temporal::Shift;
use shoal_components::media::{
    AUDIO_LEVEL_INTERVAL, PayloadFormat, PeerMedia, ReceiveStats, Subscription, Track, TrackKind,
};
use shoal_components::peer::Peer;
use shoal_components::relay::{MediaRelay, MediaRelayOut};
use shoal_components::rtcp::twcc::FeedbackEncoder;
use shoal_components::rtcp::{NackEntry, ReportBlock};
use shoal_components::rtp::payload::{Vp8Descriptor, h264_sps_size, vp8_keyframe_size};
use shoal_components::rtp::{RtpFields, RtpPacket, RtpWriter};
use shoal_components::stats::ShardStats;
use shoal_components::tick::{
    DueTimers, Events, MediaOut, MediaPlain, MediaStart, Now, Outgoing, ShardEvent, SharedRtp,
};
use shoal_components::time::Time;
use shoal_components::timer::{TimerHeap, TimerKind, Timers};
use shoal_components::transport::{PeerSrtp, RtcpSender};

use rtcp::{
    on_rtcp, send_feedback, send_remb, send_transport_feedback, subscription_timer, track_timer,
};

/// How often shoal reports: RR to publishers, SR to subscribers (RFC 3550 §6.2 sizes
/// the interval by bandwidth; WebRTC stacks report about once a second).
pub const REPORT_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);
/// At most one keyframe request to a publisher per track this often.
pub const KEYFRAME_REQUEST_INTERVAL: std::time::Duration = std::time::Duration::from_millis(500);
/// Missing sequence numbers a track keeps NACKing at most.
pub const MAX_MISSING: usize = 128;
/// How often a missing packet is NACKed again.
pub const NACK_RETRY: std::time::Duration = std::time::Duration::from_millis(40);
/// How many times a missing packet is NACKed before shoal gives it up.
pub const MAX_NACKS_PER_PACKET: u8 = 5;
/// Packets one NACK can make shoal resend at most (RFC 4585 §6.2.1 lets one FCI
/// entry name 17; a NACK of many entries is answered in part, and the subscriber asks
/// again for the rest).
pub const MAX_RETRANSMITS_PER_NACK: usize = 64;
/// Retransmissions a subscription remembers, to ignore a NACK repeated within a round
/// trip.
pub const RECENT_RESENDS: usize = 128;
/// A gap larger than this is a jump (the source restarted), not loss.
pub const MAX_GAP: u64 = 512;
/// Buffer grown at a time for decrypting.
const SCRATCH_CHUNK: usize = 64 * 1024;
/// The media pass's own buffers, reused tick after tick.
#[derive(Debug, Default)]
pub struct MediaScratch {
    buf: BytesMut,
    lost: Vec<u16>,
    nack: Vec<NackEntry>,
    blocks: Vec<ReportBlock>,
    arrivals: Vec<Option<i64>>,
    encoder: FeedbackEncoder,
}

impl MediaScratch {
    /// Room for `n` more bytes without reallocating what was split off.
    fn reserve(&mut self, n: usize) {
        if self.buf.capacity() - self.buf.len() < n {
            self.buf.reserve(SCRATCH_CHUNK.max(n));
        }
    }
}

/// What the media pass reads and writes besides the tables.
#[derive(SystemParam)]
pub struct MediaCtx<'w, 's> {
    now: Res<'w, Now>,
    plain: ResMut<'w, MediaPlain>,
    out: ResMut<'w, MediaOut>,
    scratch: Local<'s, MediaScratch>,
    stats: ResMut<'w, ShardStats>,
    due: Res<'w, DueTimers>,
    heap: ResMut<'w, TimerHeap>,
    events: ResMut<'w, Events>,
    start: ResMut<'w, MediaStart>,
    relay: ResMut<'w, MediaRelayOut>,
}

/// A peer's transport-wide state with its timers (a peer is neither a track nor a
/// subscription).
pub(crate) type TransportQuery<'w, 's> = Query<
    'w,
    's,
    (&'static mut TransportWide, &'static mut Timers),
    (Without<Track>, Without<Subscription>),
>;

/// The `media` pass.
pub fn media(
    mut ctx: MediaCtx,
    mut peers: Query<(&mut PeerMedia, Option<&PeerSrtp>)>,
    mut tracks: Query<(&mut Track, &mut Timers), Without<Subscription>>,
    mut subs: Query<(&mut Subscription, &mut Timers), Without<Track>>,
    mut transport: TransportQuery,
    ids: Query<&Peer>,
) {
    let now = ctx.now.0;
    // A subscription made before its subscriber could receive (a WHEP answer, a new
    // participant's own answer) gets its keyframe now: one sent earlier went nowhere.
    let mut wanted = std::mem::take(&mut ctx.start.tracks);
    for peer in ctx.start.peers.drain(..) {
        let Ok((media, _)) = peers.get(peer) else {
            continue;
        };
        wanted.extend(
            media
                .subscriptions
                .iter()
                .filter_map(|(_, sub)| subs.get(*sub).ok().map(|(s, _)| s.track)),
        );
    }
    for &track in &wanted {
        request_keyframe(&mut ctx, now, track, &mut tracks, &peers);
    }
    wanted.clear();
    ctx.start.tracks = wanted;
    let rtp = std::mem::take(&mut ctx.plain.rtp);
    for (peer, packet, arrived) in &rtp {
        on_rtp(
            &mut ctx,
            now,
            *arrived,
            *peer,
            packet,
            &mut peers,
            &mut tracks,
            &mut subs,
            &mut transport,
            &ids,
        );
    }
    ctx.plain.rtp = rtp;
    ctx.plain.rtp.clear();
    let rtcp = std::mem::take(&mut ctx.plain.rtcp);
    for (peer, packet) in &rtcp {
        on_rtcp(
            &mut ctx,
            now,
            *peer,
            packet,
            &mut peers,
            &mut tracks,
            &mut subs,
            &mut transport,
        );
    }
    ctx.plain.rtcp = rtcp;
    ctx.plain.rtcp.clear();

    for i in 0..ctx.due.0.len() {
        let (entity, kind) = ctx.due.0[i];
        if kind == TimerKind::TransportFeedback {
            if let Ok((mut tw, mut timers)) = transport.get_mut(entity) {
                let sender = peers
                    .get(entity)
                    .ok()
                    .map_or(RtcpSender::UNKEYED, |(_, s)| rtcp_sender(s));
                send_transport_feedback(&mut ctx, entity, &mut tw.receive, sender);
                if let Some(bps) = tw.remb.run(now) {
                    // The streams it publishes now (aiortc applies a REMB to a
                    // sender it names).
                    let ssrcs: Vec<u32> = peers
                        .get(entity)
                        .map(|(media, _)| {
                            media
                                .tracks
                                .iter()
                                .filter_map(|&(_, t)| tracks.get(t).ok()?.0.ssrc)
                                .take(MAX_REMB_SSRCS)
                                .collect()
                        })
                        .unwrap_or_default();
                    send_remb(&mut ctx, entity, &ssrcs, bps, sender);
                }
                // More than one interval's messages describe: the rest next time.
                if tw.receive.pending() {
                    ctx.heap.arm(
                        &mut timers,
                        entity,
                        TimerKind::TransportFeedback,
                        now + FEEDBACK_INTERVAL,
                    );
                }
            }
            continue;
        }
        if kind == TimerKind::Probe {
            probe_step(
                &mut ctx,
                now,
                entity,
                &mut transport,
                &peers,
                &tracks,
                &subs,
            );
            continue;
        }
        if kind == TimerKind::AudioLevel {
            if let Ok((mut track, _)) = tracks.get_mut(entity)
                && let Some((level, voice)) = track.levels.take()
                && let Some(peer) = track.publisher.and_then(|p| ids.get(p).ok())
            {
                ctx.events.0.push(ShardEvent::AudioLevel {
                    peer: peer.id,
                    track: track.spec.id,
                    level,
                    voice,
                });
            }
            continue;
        }
        if kind != TimerKind::MediaReport {
            continue;
        }
        if let Ok((mut track, mut timers)) = tracks.get_mut(entity) {
            let sender = track
                .publisher
                .and_then(|p| peers.get(p).ok())
                .map_or(RtcpSender::UNKEYED, |(_, s)| rtcp_sender(s));
            track_timer(&mut ctx, now, entity, &mut track, &mut timers, sender);
        } else if let Ok((mut sub, mut timers)) = subs.get_mut(entity) {
            subscription_timer(&mut ctx, now, entity, &mut sub, &mut timers, &tracks);
            // Streams come and go with the publisher's encoder: a simulcast
            // subscriber's choice is made again each report interval even without
            // feedback.
            if layers::has_choice(&sub, &tracks, now) {
                let subscriber = sub.subscriber;
                // A subscriber that gives feedback but gave none yet starts from
                // the initial estimate.
                let estimate = transport.get(subscriber).ok().and_then(|(tw, _)| {
                    tw.send.estimate_bps().or(sub
                        .spec
                        .extensions
                        .transport_cc
                        .map(|_| INITIAL_ESTIMATE_BPS as u64))
                });
                let loss = transport
                    .get(subscriber)
                    .ok()
                    .and_then(|(tw, _)| tw.send.estimator.as_ref()?.last_loss());
                let shortfall = layers::choose(
                    &mut ctx,
                    now,
                    subscriber,
                    estimate,
                    loss,
                    &peers,
                    &mut tracks,
                    &mut subs,
                );
                if let Some(shortfall) = shortfall {
                    start_probe(&mut ctx, now, subscriber, shortfall, &mut transport);
                }
            }
        }
    }
}

/// Queues `packet` (extended sequence number `seq`) of stream `stream` for every
/// subscription of `track` that takes it: the one `Bytes`, shared. A simulcast
/// stream's packet goes only to the subscriptions it is the stream of (or, a keyframe,
/// the target of: [`admit`]); a VP8 packet with a temporal layer, only to those sent
/// its layer.
pub(crate) fn fan_out<F: QueryFilter>(
    track: &Track,
    stream: Entity,
    packet: &Bytes,
    seq: u64,
    subs: &mut Query<(&mut Subscription, &mut Timers), F>,
    out: &mut MediaOut,
) {
    if track.subscribers.is_empty() {
        return;
    }
    let Some(shared) = SharedRtp::of(track, packet, seq) else {
        return;
    };
    // A stream that has carried temporal layers goes through each subscriber's
    // filter from then on, even a packet without a TID (the publisher went back to
    // one layer, padding): a subscriber that dropped frames numbers it its way.
    let layered = track.temporal_seen || shared.vp8.is_some_and(|d| d.temporal_id.is_some());
    if shared.layer.is_none() && !layered {
        out.0
            .extend(track.subscribers.iter().map(|&subscription| Outgoing::Rtp {
                subscription,
                packet: shared.clone(),
                retransmission: false,
                probe: false,
            }));
        return;
    }
    for &subscription in &track.subscribers {
        if let Ok((mut sub, _)) = subs.get_mut(subscription)
            && let Some(shift) = admit(&mut sub, stream, &shared)
        {
            out.0.push(Outgoing::Rtp {
                subscription,
                packet: SharedRtp {
                    shift,
                    ..shared.clone()
                },
                retransmission: false,
                probe: false,
            });
        }
    }
}

/// Whether a subscription takes `rtp` of stream `stream`, and what its numbers come
/// down by if it does. Of a simulcast track, the packets of the stream it is sent,
/// from where it switched to it, and the keyframe of its target, where it switches
/// (RFC 8853 §5.1 leaves the choice among streams to the receiver of all of them; a
/// decoder can start only at a keyframe). Of a VP8 stream with temporal layers, the
/// frames of the layers it is sent (`temporal`).
pub(crate) fn admit(sub: &mut Subscription, stream: Entity, rtp: &SharedRtp) -> Option<Shift> {
    if let Some(layer) = rtp.layer {
        let before = sub.layers.and_then(|c| c.current);
        if !admit_stream(sub, stream, layer.index, rtp.seq, layer.keyframe) {
            return None;
        }
        if sub.layers.and_then(|c| c.current) != before {
            sub.temporal.restart();
        }
    }
    match rtp.vp8 {
        Some(d) if d.temporal_id.is_some() || sub.temporal.dropping() => {
            sub.temporal
                .admit(rtp.seq, rtp.header.marker, &d, d.keyframe_start)
        }
        // Padding, or a payload that is no VP8 descriptor: numbered in its place.
        None if sub.temporal.dropping() => {
            sub.temporal.admit_undescribed(rtp.seq, rtp.header.marker)
        }
        _ => Some(Shift::default()),
    }
}

fn admit_stream(
    sub: &mut Subscription,
    stream: Entity,
    index: u8,
    seq: u64,
    keyframe: bool,
) -> bool {
    let started = sub.started;
    let Some(choice) = sub.layers.as_mut() else {
        return true;
    };
    if choice.current == Some(index) {
        return !started || seq >= sub.first_seq;
    }
    if choice.target != index || !keyframe {
        return false;
    }
    choice.current = Some(index);
    if started {
        choice.switches += 1;
        // NACKs for the stream left are no longer this subscriber's to ask.
        sub.first_seq = seq;
    }
    sub.track = stream;
    true
}

/// Asks `track`'s publisher for a keyframe (RFC 4585 §6.3.1 PLI): now if the throttle
/// allows, else when it does (the track's timer); a local source's owner is told
/// instead. Nothing for a publisher that did not negotiate `nack pli`.
fn request_keyframe(
    ctx: &mut MediaCtx,
    now: Time,
    track: Entity,
    tracks: &mut Query<(&mut Track, &mut Timers), Without<Subscription>>,
    peers: &Query<(&mut PeerMedia, Option<&PeerSrtp>)>,
) {
    let Ok((mut t, mut timers)) = tracks.get_mut(track) else {
        return;
    };
    let Some(publisher) = t.publisher else {
        match t.origin {
            // A mirror: the publisher is on the origin shard.
            Some(to) => ctx.relay.0.push(MediaRelay::Keyframe {
                to,
                track: t.spec.id,
                layer: t.layering.as_ref().map_or(0, |l| l.index),
            }),
            None => ctx
                .events
                .0
                .push(ShardEvent::KeyframeRequested { track: t.spec.id }),
        }
        return;
    };
    if !t.spec.feedback.pli {
        return;
    }
    t.keyframe_wanted = true;
    if keyframe_allowed(&t, now) {
        let sender = peers
            .get(publisher)
            .ok()
            .map_or(RtcpSender::UNKEYED, |(_, s)| rtcp_sender(s));
        send_feedback(ctx, now, publisher, &mut t, sender);
    } else if let Some(at) = t.last_keyframe_request {
        let when = at + KEYFRAME_REQUEST_INTERVAL;
        if timers.get(TimerKind::MediaReport).is_none_or(|d| d > when) {
            ctx.heap
                .arm(&mut timers, track, TimerKind::MediaReport, when);
        }
    }
}

/// RFC 3550 Appendix A.8: the interarrival jitter estimate, in timestamp units × 16.
fn update_jitter(stats: &mut ReceiveStats, now: Time, rtp_ts: u32, clock_rate: u32) {
    let arrival = (u128::from(now.as_micros()) * u128::from(clock_rate) / 1_000_000) as i64;
    let transit = arrival.wrapping_sub(i64::from(rtp_ts));
    if stats.received > 1 {
        let d = (transit - stats.transit)
            .unsigned_abs()
            .min(u64::from(u32::MAX)) as i64;
        let j = i64::from(stats.jitter_q4);
        stats.jitter_q4 = (j + d - ((j + 8) >> 4)).clamp(0, i64::from(u32::MAX)) as u32;
    }
    stats.transit = transit;
}

#[allow(clippy::too_many_arguments)]
fn on_rtp(
    ctx: &mut MediaCtx,
    now: Time,
    arrived: Time,
    peer: Entity,
    packet: &Bytes,
    peers: &mut Query<(&mut PeerMedia, Option<&PeerSrtp>)>,
    tracks: &mut Query<(&mut Track, &mut Timers), Without<Subscription>>,
    subs: &mut Query<(&mut Subscription, &mut Timers), Without<Track>>,
    transport: &mut TransportQuery,
    ids: &Query<&Peer>,
) {
    let Ok(p) = RtpPacket::parse(packet) else {
        ctx.stats.media_malformed += 1;
        return;
    };
    let h = *p.header();
    // Every packet the transport carried counts for the publisher's estimate,
    // whatever becomes of it here: padding-only probes, RTX, an SSRC not bound yet.
    // Without transport-wide numbers, shoal's own estimate runs on the packet's
    // abs-send-time; the same timer runs it and sends REMB.
    if let Ok((mut tw, mut timers)) = transport.get_mut(peer) {
        let twcc = tw.receive.ext_id.is_some_and(|id| {
            matches!(p.transport_cc_seq(id), Ok(Some(seq)) if tw.receive.record(seq, h.ssrc, arrived))
        });
        let remb = !twcc
            && match tw.remb.ext_id.map(|id| p.abs_send_time(id)) {
                Some(Ok(Some(sent))) => {
                    tw.remb.record(sent, packet.len(), arrived);
                    true
                }
                _ => false,
            };
        if (twcc || remb) && timers.get(TimerKind::TransportFeedback).is_none() {
            ctx.heap.arm(
                &mut timers,
                peer,
                TimerKind::TransportFeedback,
                now + FEEDBACK_INTERVAL,
            );
        }
    }
    let Ok((mut media, srtp)) = peers.get_mut(peer) else {
        ctx.stats.rtp_unknown_ssrc += 1;
        return;
    };
    let sender = rtcp_sender(srtp);
    let entity = match media.tracks_by_ssrc.get(&h.ssrc) {
        Some(e) => *e,
        None => {
            // RFC 8843 §9.2: an SSRC not announced in SDP is bound by its mid.
            // Only while the track has no SSRC of that kind: a second stream under
            // the same mid (a simulcast layer, a restarted source) would otherwise
            // mix into the first one's sequence space.
            // A simulcast track's streams are told apart by their rid (RFC 8852
            // §3.1), a retransmission stream by the rid of the stream it repairs
            // (§3.2).
            let bound = media.tracks_by_mid.iter().find_map(|(mid, e)| {
                let (t, _) = tracks.get(*e).ok()?;
                let id = t.spec.extensions.mid?;
                if p.mid(id).ok()?? != mid.as_str() {
                    return None;
                }
                let rtx = Some(h.payload_type) == t.spec.rtx_payload_type;
                let stream = match &t.layering {
                    None => *e,
                    Some(l) => {
                        let rid = if rtx {
                            p.repaired_rid(t.spec.extensions.repaired_rid?).ok()??
                        } else {
                            p.rid(t.spec.extensions.rid?).ok()??
                        };
                        *l.siblings.iter().find(|s| {
                            tracks.get(**s).is_ok_and(|(x, _)| {
                                x.layering.as_ref().and_then(|l| l.rid.as_deref()) == Some(rid)
                            })
                        })?
                    }
                };
                let (t, _) = tracks.get(stream).ok()?;
                let free = if rtx {
                    t.rtx_ssrc.is_none()
                } else {
                    t.ssrc.is_none()
                };
                free.then_some(stream)
            });
            let Some(e) = bound else {
                ctx.stats.rtp_unknown_ssrc += 1;
                return;
            };
            let Ok((mut t, _)) = tracks.get_mut(e) else {
                return;
            };
            if Some(h.payload_type) == t.spec.rtx_payload_type {
                t.rtx_ssrc.get_or_insert(h.ssrc);
            } else {
                t.ssrc.get_or_insert(h.ssrc);
            }
            media.tracks_by_ssrc.insert(h.ssrc, e);
            e
        }
    };
    let Ok((mut track, mut timers)) = tracks.get_mut(entity) else {
        return;
    };
    let is_rtx = Some(h.ssrc) == track.rtx_ssrc && track.rtx_ssrc.is_some();
    let (packet, seq) = if is_rtx {
        // RFC 4588 §4: the original sequence number, then the original payload. A
        // payload of padding only (a bandwidth probe) carries nothing to forward.
        let payload = p.payload();
        let (Some(osn), Some(original)) = (payload.get(..2), payload.get(2..)) else {
            return;
        };
        let osn = u16::from_be_bytes([osn[0], osn[1]]);
        let Some(ssrc) = track.ssrc else {
            return;
        };
        let fields = RtpFields {
            marker: h.marker,
            payload_type: track.spec.payload_type,
            sequence_number: osn,
            timestamp: h.timestamp,
            ssrc,
        };
        let mut unwrapped = BytesMut::with_capacity(packet.len());
        let mut w = RtpWriter::new(&mut unwrapped, &fields, &[]);
        w.payload(original);
        w.finish(0);
        (unwrapped.freeze(), osn)
    } else {
        if h.payload_type != track.spec.payload_type {
            ctx.stats.media_malformed += 1;
            return;
        }
        (packet.clone(), h.sequence_number)
    };
    let previous_max = track.stats.started.then_some(track.stats.max_seq);
    let ext = track.stats.note(seq);
    if !is_rtx {
        track.rate.add(now, packet.len());
        note_picture_size(&mut track, p.payload());
        track.note_temporal(now, p.payload(), packet.len());
    }
    ctx.stats.rtp_received += 1;
    if track.from_link && !is_rtx {
        ctx.stats.rtp_received_from_links += 1;
    }
    if !is_rtx {
        let clock = track.spec.clock_rate;
        update_jitter(&mut track.stats, now, h.timestamp, clock);
    }
    if track.cache.get(ext).is_some() {
        // A duplicate, or a retransmission of what arrived after all.
        track.missing.retain(|(s, _, _)| *s != ext);
        return;
    }
    // RFC 6464: a publisher's audio level, reported to the owner every
    // AUDIO_LEVEL_INTERVAL for the room's speaker ranking.
    // A muted track is no speaker.
    if let (false, false, TrackKind::Audio, Some(id)) = (
        is_rtx,
        track.muted,
        track.spec.kind,
        track.spec.extensions.audio_level,
    ) && let Ok(Some(level)) = p.audio_level(id)
    {
        track.levels.add(level.level_neg_dbov, level.voice);
        if timers.get(TimerKind::AudioLevel).is_none() {
            ctx.heap.arm(
                &mut timers,
                entity,
                TimerKind::AudioLevel,
                now + AUDIO_LEVEL_INTERVAL,
            );
        }
    }
    match previous_max {
        Some(max) if ext > max + 1 && ext - max <= MAX_GAP && track.spec.feedback.nack => {
            for missing in (max + 1)..ext {
                if track.missing.len() >= MAX_MISSING {
                    track.missing.pop_front();
                }
                track.missing.push_back((missing, None, 0));
            }
        }
        Some(max) if ext <= max => track.missing.retain(|(s, _, _)| *s != ext),
        _ => {}
    }
    // A muted track's packets are not even cached: no NACK may fetch them later.
    if !track.muted {
        track.cache.insert(ext, packet.clone());
    }
    if track.report
        && let Ok(id) = ids.get(peer)
    {
        ctx.events.0.push(ShardEvent::RtpReceived {
            peer: id.id,
            track: track.spec.id,
            seq: ext,
            packet: packet.clone(),
        });
    }
    if track.muted {
        ctx.stats.rtp_muted += 1;
    } else {
        fan_out(&track, entity, &packet, ext, subs, &mut ctx.out);
        let layer = track.layering.as_ref().map_or(0, |l| l.index);
        for &to in &track.relay_to {
            ctx.relay.0.push(MediaRelay::Packet {
                to,
                track: track.spec.id,
                layer,
                seq: ext,
                packet: packet.clone(),
            });
        }
    }
    // Newly missing packets are NACKed at once; keyframe requests go out as soon as
    // the throttle lets them.
    let wants_feedback = track.missing.iter().any(|(_, at, _)| at.is_none())
        || (track.keyframe_wanted && keyframe_allowed(&track, now));
    if wants_feedback {
        send_feedback(ctx, now, peer, &mut track, sender);
    }
    if timers.get(TimerKind::MediaReport).is_none() {
        ctx.heap.arm(
            &mut timers,
            entity,
            TimerKind::MediaReport,
            now + REPORT_INTERVAL,
        );
    }
}

fn keyframe_allowed(track: &Track, now: Time) -> bool {
    track
        .last_keyframe_request
        .is_none_or(|at| now.saturating_since(at) >= KEYFRAME_REQUEST_INTERVAL)
}

/// How far back in a stream a probe looks for packets its subscriber was sent.
pub const PROBE_LOOKBACK: u64 = 64;

/// How far above what a climb needs a probe cluster is sent, so that a path that
/// carries it measures enough for the climb.
pub const PROBE_OVERSHOOT: f64 = 1.25;

/// Starts a probe cluster to `peer` when the stream choice wants more than its
/// estimate gives (see `congestion::probe`): its first packet goes at once. For
/// streams that cannot be thinned and already pass the estimate, only while
/// over-use or loss has never lowered the estimate: that finds a fresh subscriber's
/// path (or one whose room grew) at once, while a path that has shown itself
/// narrower than what it was sent is left to the estimate's own climb, as before
/// such probes (probing it every second or few, beside a stream that follows the
/// estimate, drove the estimate of a 600 kbit/s path to half of it in
/// `sim_bwe_estimate_follows_the_link`).
pub(crate) fn start_probe(
    ctx: &mut MediaCtx,
    now: Time,
    peer: Entity,
    shortfall: layers::Shortfall,
    transport: &mut TransportQuery,
) {
    let Ok((mut tw, mut timers)) = transport.get_mut(peer) else {
        return;
    };
    let Some(estimator) = tw.send.estimator.as_ref() else {
        return;
    };
    if shortfall.sent_past_estimate && estimator.was_cut() {
        return;
    }
    let estimate = estimator.bps();
    let target = ((shortfall.wanted_bps as f64 * PROBE_OVERSHOOT) as u64).max(estimate);
    if tw.send.prober.start(now, target, 1200).is_some() {
        ctx.heap.arm(&mut timers, peer, TimerKind::Probe, now);
    }
}

/// Sends `peer` the next packet of its probe cluster: a retransmission (RFC 4588) of
/// a recent packet of one of its video subscriptions, which it already has; closes
/// the cluster after its last packet (or when nothing can be sent).
fn probe_step(
    ctx: &mut MediaCtx,
    now: Time,
    peer: Entity,
    transport: &mut TransportQuery,
    peers: &Query<(&mut PeerMedia, Option<&PeerSrtp>)>,
    tracks: &Query<(&mut Track, &mut Timers), Without<Subscription>>,
    subs: &Query<(&mut Subscription, &mut Timers), Without<Track>>,
) {
    let Ok((mut tw, mut timers)) = transport.get_mut(peer) else {
        return;
    };
    let Some(cluster) = tw.send.prober.sending() else {
        return;
    };
    let packet = (cluster.left > 0)
        .then(|| probe_packet(peer, cluster.left, peers, tracks, subs))
        .flatten();
    let Some((subscription, packet)) = packet else {
        tw.send.prober.close(now);
        return;
    };
    // Paced at the cluster's rate: the next packet when this one's bits have gone.
    let bits = (packet.packet.len() as u64 + 40) * 8;
    let gap = std::time::Duration::from_micros(bits * 1_000_000 / cluster.target_bps.max(1));
    tw.send.prober.sent_one();
    ctx.heap.arm(&mut timers, peer, TimerKind::Probe, now + gap);
    ctx.out.0.push(Outgoing::Rtp {
        subscription,
        packet,
        retransmission: true,
        probe: true,
    });
}

/// A packet to probe `peer` with: one of the last few of the stream a started
/// subscription of its sends, with RTX negotiated, chosen by `turn`.
fn probe_packet(
    peer: Entity,
    turn: u32,
    peers: &Query<(&mut PeerMedia, Option<&PeerSrtp>)>,
    tracks: &Query<(&mut Track, &mut Timers), Without<Subscription>>,
    subs: &Query<(&mut Subscription, &mut Timers), Without<Track>>,
) -> Option<(Entity, SharedRtp)> {
    let (media, _) = peers.get(peer).ok()?;
    media.subscriptions.iter().find_map(|&(_, entity)| {
        let (sub, _) = subs.get(entity).ok()?;
        if !sub.started
            || sub.paused
            || sub.spec.rtx_ssrc.is_none()
            || sub.spec.rtx_payload_type.is_none()
        {
            return None;
        }
        let (track, _) = tracks.get(sub.track).ok()?;
        if track.muted || track.spec.kind != TrackKind::Video {
            return None;
        }
        let newest = track.stats.max_seq;
        let dropping = sub.temporal.dropping();
        if dropping && sub.layers.is_some_and(|c| c.current != c.sent) {
            return None;
        }
        // One of the last eight packets the subscriber was sent, in turn: a frame
        // of a temporal layer it is not sent is no copy of anything.
        let mut sent = (0..PROBE_LOOKBACK).filter_map(|k| {
            let seq = newest.checked_sub(k)?;
            if seq < sub.first_seq {
                return None;
            }
            let p = track.cache.get(seq)?;
            let shared = SharedRtp::of(track, p, seq)?;
            let shift = if dropping {
                sub.temporal.resend(seq, shared.vp8.as_ref())?
            } else {
                Shift::default()
            };
            Some((entity, SharedRtp { shift, ..shared }))
        });
        let first = sent.next()?;
        match (turn % 8) as usize {
            0 => Some(first),
            n => Some(sent.nth(n - 1).unwrap_or(first)),
        }
    })
}

/// A simulcast stream's picture size, from its keyframes (streams rank by it): VP8's
/// key frame header, H.264's sequence parameter set.
pub(crate) fn note_picture_size(track: &mut Track, payload: &[u8]) {
    let format = track.spec.format;
    let Some(layering) = track.layering.as_mut() else {
        return;
    };
    let size = match format {
        PayloadFormat::Vp8 => Vp8Descriptor::parse(payload)
            .filter(|d| d.keyframe_start)
            .and_then(|d| vp8_keyframe_size(payload, d.len)),
        PayloadFormat::H264 => h264_sps_size(payload),
        _ => None,
    };
    if size.is_some() {
        layering.size = size;
    }
}

/// Who shoal's RTCP to a peer comes from; a peer without SRTP keys gets none anyway.
fn rtcp_sender(srtp: Option<&PeerSrtp>) -> RtcpSender {
    srtp.map_or(RtcpSender::UNKEYED, |s| s.rtcp)
}
