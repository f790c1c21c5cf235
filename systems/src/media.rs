//! The `srtp_in` and `media` passes, and the media half of `egress`.
//!
//! - `srtp_in` decrypts each SRTP/SRTCP datagram of the tick once (RFC 3711, RFC 7714)
//!   with its peer's inbound context, into a shared plaintext `Bytes`.
//! - `media` routes: an RTP packet finds its track by SSRC (or binds a new SSRC by its
//!   mid header extension, RFC 8843 §9.2), unwraps RTX (RFC 4588 §4), goes into the
//!   track's retransmission cache and out to every subscription as the same `Bytes`.
//!   RTCP from a publisher (SR) feeds the reports shoal writes back; RTCP from a
//!   subscriber stays on its own hop: a NACK is answered from the cache (RFC 4585
//!   §6.2.1, as RTX), a PLI or FIR (RFC 4585 §6.3.1, RFC 5104 §4.3.1) becomes one
//!   throttled PLI to the publisher, never the subscriber's packet itself. Gaps in a
//!   publisher's sequence are NACKed back to it. Per-track and per-subscription
//!   timers send receiver reports to publishers and sender reports to subscribers
//!   (RFC 3550 §6.4) so each side sees the loss and jitter of its own hop.
//! - `egress` writes each subscriber's copy (its SSRC, payload type, continuous
//!   sequence numbers and timestamps, its own mid header extension, the audio level
//!   carried over) straight into the outgoing buffer and protects it there with the
//!   subscriber's outbound context: one decrypt per incoming packet, one encrypt per
//!   subscriber, no allocation per packet once warm.

use bevy_ecs::prelude::*;
use bevy_ecs::system::SystemParam;
use bytes::{Bytes, BytesMut};
use shoal_components::media::{PeerMedia, ReceiveStats, Subscription, Track, extend_seq};
use shoal_components::net::Datagram;
use shoal_components::peer::Ice;
use shoal_components::peer::Peer;
use shoal_components::rtcp::{
    Compound, Nack, NackEntry, Pli, ReceiverReport, ReportBlock, RtcpBody, SenderReport, WriteRtcp,
    lost_to_nack_entries,
};
use shoal_components::rtp::{RtpFields, RtpHeader, RtpOrRtcp, RtpPacket, RtpWriter};
use shoal_components::stats::ShardStats;
use shoal_components::tick::{DueTimers, Events, Now, ShardEvent, WriteBuffer};
use shoal_components::time::Time;
use shoal_components::timer::{TimerHeap, TimerKind, Timers};

use shoal_components::dtls::DtlsRole;
use crate::shard::ShardRng;
use shoal_components::srtp::{SrtpConfig, SrtpKeys, SrtpSession};
use rand_core::RngCore;

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

/// A peer's SRTP contexts (from its DTLS-SRTP export) and the SSRC shoal sends its
/// own RTCP with on that session.
#[derive(Component)]
pub struct PeerSrtp {
    /// Both directions.
    pub session: SrtpSession,
    /// shoal's RTCP sender SSRC in this session.
    pub rtcp_ssrc: u32,
}

impl PeerSrtp {
    /// Contexts keyed from `keys` for shoal's DTLS `role`. Retransmissions go as RTX
    /// (new indices), so the sender never protects an index twice.
    pub fn new(keys: &SrtpKeys, role: DtlsRole, rtcp_ssrc: u32) -> Option<PeerSrtp> {
        // Room for every SSRC a peer may be sent at once (a subscription and its
        // RTX) and its own, with the ones of ended subscriptions forgotten.
        let config = SrtpConfig {
            max_ssrcs: 2 * crate::shard::MAX_SUBSCRIPTIONS_PER_PEER
                + 2 * crate::shard::MAX_TRACKS_PER_PEER
                + 8,
            ..SrtpConfig::default()
        };
        let session = SrtpSession::new(keys, role, config).ok()?;
        Some(PeerSrtp { session, rtcp_ssrc })
    }
}

/// Where a keyframe is now wanted (from `dtls`, the subscribe command and the relay
/// from a sibling): the media pass asks each track's publisher, throttled, through one
/// path (`request_keyframe`) whether the publisher is a peer here, on another shard, or
/// the owner's local source.
#[derive(Resource, Debug, Default)]
pub struct MediaStart {
    /// Peers whose SRTP keys arrived: each of their subscriptions' tracks.
    pub peers: Vec<Entity>,
    /// Tracks with a new receiver that can take a keyframe now (a subscription to an
    /// already connected peer, a keyframe request relayed from a mirror's shard).
    pub tracks: Vec<Entity>,
}

/// SRTP/SRTCP datagrams of this tick, by peer (from `ingest`).
#[derive(Resource, Debug, Default)]
pub struct MediaInbox(pub Vec<(Entity, Datagram)>);

/// Plaintext of this tick (from `srtp_in`).
#[derive(Resource, Debug, Default)]
pub struct MediaPlain {
    /// RTP packets, by peer.
    pub rtp: Vec<(Entity, Bytes)>,
    /// RTCP compounds, by peer.
    pub rtcp: Vec<(Entity, Bytes)>,
}

/// What `media` asks `egress` to send.
#[derive(Debug)]
pub enum Outgoing {
    /// A track's packet for one subscription: forwarded, or resent as RTX because the
    /// subscriber NACKed it.
    Rtp {
        /// The subscription.
        subscription: Entity,
        /// What was parsed of the packet once, for every copy.
        copy: Copy,
        /// A retransmission (RFC 4588 §4), else a forward.
        retransmission: bool,
    },
    /// A plaintext RTCP compound for a peer.
    Rtcp {
        /// The peer.
        peer: Entity,
        /// The compound.
        packet: Bytes,
    },
}

/// What one shard hands a sibling for tracks that cross shards.
#[derive(Clone, Debug)]
pub enum MediaRelay {
    /// A packet of a track the sibling mirrors.
    Packet {
        /// The sibling.
        to: usize,
        /// The track.
        track: shoal_components::media::TrackId,
        /// Its extended sequence number at the origin.
        seq: u64,
        /// The plaintext packet.
        packet: Bytes,
    },
    /// A subscriber on this shard wants a keyframe of a track published on `to`.
    Keyframe {
        /// The origin shard.
        to: usize,
        /// The track.
        track: shoal_components::media::TrackId,
    },
}

impl MediaRelay {
    /// The shard it goes to.
    pub fn to(&self) -> usize {
        match self {
            MediaRelay::Packet { to, .. } | MediaRelay::Keyframe { to, .. } => *to,
        }
    }

    /// The track it is about.
    pub fn track(&self) -> shoal_components::media::TrackId {
        match self {
            MediaRelay::Packet { track, .. } | MediaRelay::Keyframe { track, .. } => *track,
        }
    }
}

/// What the media pass put out for sibling shards this tick.
#[derive(Resource, Debug, Default)]
pub struct MediaRelayOut(pub Vec<MediaRelay>);

/// The media packets of this tick for `egress`.
#[derive(Resource, Debug, Default)]
pub struct MediaOut(pub Vec<Outgoing>);

/// Reused buffers.
#[derive(Resource, Debug, Default)]
pub struct MediaScratch {
    buf: BytesMut,
    lost: Vec<u16>,
    nack: Vec<NackEntry>,
    blocks: Vec<ReportBlock>,
}

impl MediaScratch {
    /// Room for `n` more bytes without reallocating what was split off.
    fn reserve(&mut self, n: usize) {
        if self.buf.capacity() - self.buf.len() < n {
            self.buf.reserve(SCRATCH_CHUNK.max(n));
        }
    }
}

/// The `srtp_in` pass.
pub fn srtp_in(
    mut inbox: ResMut<MediaInbox>,
    mut peers: Query<&mut PeerSrtp>,
    mut plain: ResMut<MediaPlain>,
    mut stats: ResMut<ShardStats>,
) {
    for (entity, d) in inbox.0.drain(..) {
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
                let list = match kind {
                    RtpOrRtcp::Rtp => &mut plain.rtp,
                    RtpOrRtcp::Rtcp => &mut plain.rtcp,
                };
                list.push((entity, packet.freeze()));
            }
            Err(_) => stats.srtp_unprotect_failed += 1,
        }
    }
}

/// What the media pass reads and writes besides the tables.
#[derive(SystemParam)]
pub struct MediaCtx<'w> {
    now: Res<'w, Now>,
    plain: ResMut<'w, MediaPlain>,
    out: ResMut<'w, MediaOut>,
    scratch: ResMut<'w, MediaScratch>,
    stats: ResMut<'w, ShardStats>,
    due: Res<'w, DueTimers>,
    heap: ResMut<'w, TimerHeap>,
    events: ResMut<'w, Events>,
    start: ResMut<'w, MediaStart>,
    relay: ResMut<'w, MediaRelayOut>,
}

/// The `media` pass.
pub fn media(
    mut ctx: MediaCtx,
    mut peers: Query<(&mut PeerMedia, Option<&PeerSrtp>)>,
    mut tracks: Query<(&mut Track, &mut Timers), Without<Subscription>>,
    mut subs: Query<(&mut Subscription, &mut Timers), Without<Track>>,
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
    for (peer, packet) in &rtp {
        on_rtp(&mut ctx, now, *peer, packet, &mut peers, &mut tracks, &ids);
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
        );
    }
    ctx.plain.rtcp = rtcp;
    ctx.plain.rtcp.clear();

    for i in 0..ctx.due.0.len() {
        let (entity, kind) = ctx.due.0[i];
        if kind != TimerKind::MediaReport {
            continue;
        }
        if let Ok((mut track, mut timers)) = tracks.get_mut(entity) {
            let rtcp_ssrc = track
                .publisher
                .and_then(|p| peers.get(p).ok())
                .and_then(|(_, s)| s.map(|s| s.rtcp_ssrc))
                .unwrap_or(1);
            track_timer(&mut ctx, now, entity, &mut track, &mut timers, rtcp_ssrc);
        } else if let Ok((mut sub, mut timers)) = subs.get_mut(entity) {
            subscription_timer(&mut ctx, now, entity, &mut sub, &mut timers, &tracks);
        }
    }
}

/// Queues `packet` (extended sequence number `seq`) for every subscription of `track`:
/// the one `Bytes`, shared.
pub(crate) fn fan_out(track: &Track, packet: &Bytes, seq: u64, out: &mut MediaOut) {
    if track.subscribers.is_empty() {
        return;
    }
    let Some(copy) = Copy::of(track, packet, seq) else {
        return;
    };
    out.0
        .extend(track.subscribers.iter().map(|&subscription| Outgoing::Rtp {
            subscription,
            copy: copy.clone(),
            retransmission: false,
        }));
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
        let rtcp_ssrc = peers
            .get(publisher)
            .ok()
            .and_then(|(_, s)| s.map(|s| s.rtcp_ssrc))
            .unwrap_or(1);
        send_feedback(ctx, now, publisher, &mut t, rtcp_ssrc);
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

fn on_rtp(
    ctx: &mut MediaCtx,
    now: Time,
    peer: Entity,
    packet: &Bytes,
    peers: &mut Query<(&mut PeerMedia, Option<&PeerSrtp>)>,
    tracks: &mut Query<(&mut Track, &mut Timers), Without<Subscription>>,
    ids: &Query<&Peer>,
) {
    let Ok(p) = RtpPacket::parse(packet) else {
        ctx.stats.media_malformed += 1;
        return;
    };
    let h = *p.header();
    let Ok((mut media, srtp)) = peers.get_mut(peer) else {
        ctx.stats.rtp_unknown_ssrc += 1;
        return;
    };
    let rtcp_ssrc = srtp.map_or(1, |s| s.rtcp_ssrc);
    let entity = match media.tracks_by_ssrc.get(&h.ssrc) {
        Some(e) => *e,
        None => {
            // RFC 8843 §9.2: an SSRC not announced in SDP is bound by its mid.
            // Only while the track has no SSRC of that kind: a second stream under
            // the same mid (a simulcast layer, a restarted source) would otherwise
            // mix into the first one's sequence space.
            let bound = media.tracks_by_mid.iter().find_map(|(mid, e)| {
                let (t, _) = tracks.get(*e).ok()?;
                let id = t.spec.extensions.mid?;
                let free = if Some(h.payload_type) == t.spec.rtx_payload_type {
                    t.rtx_ssrc.is_none()
                } else {
                    t.ssrc.is_none()
                };
                (free && p.mid(id).ok()?? == mid.as_str()).then_some(*e)
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
    ctx.stats.rtp_received += 1;
    if !is_rtx {
        let clock = track.spec.clock_rate;
        update_jitter(&mut track.stats, now, h.timestamp, clock);
    }
    if track.cache.get(ext).is_some() {
        // A duplicate, or a retransmission of what arrived after all.
        track.missing.retain(|(s, _, _)| *s != ext);
        return;
    }
    match previous_max {
        Some(max) if ext > max + 1 && ext - max <= MAX_GAP && track.spec.feedback.nack => {
            for missing in (max + 1)..ext {
                if track.missing.len() >= MAX_MISSING {
                    track.missing.remove(0);
                }
                track.missing.push((missing, None, 0));
            }
        }
        Some(max) if ext <= max => track.missing.retain(|(s, _, _)| *s != ext),
        _ => {}
    }
    track.cache.insert(ext, packet.clone());
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
    fan_out(&track, &packet, ext, &mut ctx.out);
    for &to in &track.relay_to {
        ctx.relay.0.push(MediaRelay::Packet {
            to,
            track: track.spec.id,
            seq: ext,
            packet: packet.clone(),
        });
    }
    // Newly missing packets are NACKed at once; keyframe requests go out as soon as
    // the throttle lets them.
    let wants_feedback = track.missing.iter().any(|(_, at, _)| at.is_none())
        || (track.keyframe_wanted && keyframe_allowed(&track, now));
    if wants_feedback {
        send_feedback(ctx, now, peer, &mut track, rtcp_ssrc);
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

/// One RTCP compound to the publisher: a receiver report, then what feedback is due:
/// a PLI if a keyframe is wanted and allowed, a NACK for missing packets due again.
fn send_feedback(
    ctx: &mut MediaCtx,
    now: Time,
    publisher: Entity,
    track: &mut Track,
    rtcp_ssrc: u32,
) {
    let Some(media_ssrc) = track.ssrc else {
        return;
    };
    ctx.scratch.reserve(1500);
    let mut blocks = std::mem::take(&mut ctx.scratch.blocks);
    blocks.clear();
    // RFC 3550 §6.4: a report block only for a source heard from since the last
    // report (an RR with none still heads the feedback that follows).
    let heard = track.stats.received > track.stats.received_prior;
    if heard {
        blocks.push(report_block(&mut track.stats, media_ssrc, now));
    }
    let start = ctx.scratch.buf.len();
    ReceiverReport {
        ssrc: rtcp_ssrc,
        reports: blocks.as_slice(),
        extension: Bytes::new(),
    }
    .write_to(&mut ctx.scratch.buf);
    ctx.scratch.blocks = blocks;
    // keyframe_wanted is only set for a track that takes PLI (request_keyframe).
    if track.keyframe_wanted && keyframe_allowed(track, now) {
        Pli {
            sender_ssrc: rtcp_ssrc,
            media_ssrc,
        }
        .write_to(&mut ctx.scratch.buf);
        track.keyframe_wanted = false;
        track.last_keyframe_request = Some(now);
        ctx.stats.keyframe_requests_sent += 1;
    }
    let mut lost = std::mem::take(&mut ctx.scratch.lost);
    lost.clear();
    for (seq, at, count) in &mut track.missing {
        let due = at.is_none_or(|t| now.saturating_since(t) >= NACK_RETRY);
        if due && *count < MAX_NACKS_PER_PACKET {
            lost.push((*seq & 0xffff) as u16);
            *at = Some(now);
            *count += 1;
        }
    }
    track
        .missing
        .retain(|(_, _, count)| *count < MAX_NACKS_PER_PACKET);
    if !lost.is_empty() {
        let mut entries = std::mem::take(&mut ctx.scratch.nack);
        entries.clear();
        entries.extend(lost_to_nack_entries(lost.iter().copied()));
        Nack {
            sender_ssrc: rtcp_ssrc,
            media_ssrc,
            entries: entries.as_slice(),
        }
        .write_to(&mut ctx.scratch.buf);
        ctx.scratch.nack = entries;
        ctx.stats.nacks_sent += 1;
    }
    ctx.scratch.lost = lost;
    // Nothing to report and no feedback: nothing to send.
    if !heard && ctx.scratch.buf.len() - start == RR_HEADER_LEN {
        ctx.scratch.buf.truncate(start);
        return;
    }
    let packet = ctx.scratch.buf.split().freeze();
    ctx.out.0.push(Outgoing::Rtcp {
        peer: publisher,
        packet,
    });
}

/// An RR with no report blocks: the 4-byte header and the sender's SSRC.
const RR_HEADER_LEN: usize = 8;

/// RFC 3550 §6.4.1 and Appendix A.3: the report block for one received source.
fn report_block(s: &mut ReceiveStats, ssrc: u32, now: Time) -> ReportBlock {
    let expected = s.expected();
    let lost = expected as i64 - s.received as i64;
    let expected_interval = expected - s.expected_prior;
    let received_interval = s.received - s.received_prior;
    s.expected_prior = expected;
    s.received_prior = s.received;
    let lost_interval = expected_interval as i64 - received_interval as i64;
    let fraction_lost = if expected_interval == 0 || lost_interval <= 0 {
        0
    } else {
        ((lost_interval << 8) / expected_interval as i64).min(255) as u8
    };
    let dlsr = s.last_sr_at.map_or(0, |at| {
        let d = now.saturating_since(at);
        (d.as_micros() * 65_536 / 1_000_000).min(u128::from(u32::MAX)) as u32
    });
    ReportBlock {
        ssrc,
        fraction_lost,
        cumulative_lost: lost.clamp(-0x80_0000, 0x7f_ffff) as i32,
        // The extension started the cycle count at one (see `ReceiveStats::note`).
        extended_highest_seq: s.max_seq.saturating_sub(1 << 16) as u32,
        jitter: s.jitter_q4 >> 4,
        last_sr: s.last_sr,
        delay_since_last_sr: dlsr,
    }
}

fn track_timer(
    ctx: &mut MediaCtx,
    now: Time,
    entity: Entity,
    track: &mut Track,
    timers: &mut Timers,
    rtcp_ssrc: u32,
) {
    let Some(publisher) = track.publisher else {
        // A local source has no one to report to.
        return;
    };
    send_feedback(ctx, now, publisher, track, rtcp_ssrc);
    let mut next = now + REPORT_INTERVAL;
    if !track.missing.is_empty() {
        next = next.min(now + NACK_RETRY);
    }
    if track.keyframe_wanted
        && let Some(at) = track.last_keyframe_request
    {
        next = next.min(at + KEYFRAME_REQUEST_INTERVAL);
    }
    ctx.heap.arm(timers, entity, TimerKind::MediaReport, next);
}

/// RFC 3550 §6.4.1: a sender report for what shoal sent the subscriber. Its NTP and
/// RTP times are the publisher's last SR moved on to now (the RTP time through the
/// subscription's timestamp offset), so the subscriber lines a publisher's audio and
/// video up by the publisher's own clock (§6.4.1: the pair is what "lip sync" needs).
/// Before the publisher's first SR, the shard's clock and the last timestamp sent.
/// Nothing once the stream stopped: an SR reports a sender.
fn subscription_timer(
    ctx: &mut MediaCtx,
    now: Time,
    entity: Entity,
    sub: &mut Subscription,
    timers: &mut Timers,
    tracks: &Query<(&mut Track, &mut Timers), Without<Subscription>>,
) {
    ctx.heap.arm(
        timers,
        entity,
        TimerKind::MediaReport,
        now + REPORT_INTERVAL,
    );
    let Some((ts, at)) = sub.last_rtp_ts else {
        return;
    };
    // RFC 3550 §6.4: senders report; one silent for two intervals is not one.
    if now.saturating_since(at) > 2 * REPORT_INTERVAL {
        return;
    }
    let Ok((track, _)) = tracks.get(sub.track) else {
        return;
    };
    let clock = u128::from(track.spec.clock_rate);
    let units = |d: std::time::Duration| (d.as_micros() * clock / 1_000_000) as u32;
    let (ntp_time, rtp_time) = match track.sender_report {
        Some((sr_ntp, sr_rtp, sr_at)) => {
            let elapsed = now.saturating_since(sr_at);
            (
                sr_ntp.wrapping_add(ntp_duration(elapsed)),
                sr_rtp
                    .wrapping_add(sub.ts_offset)
                    .wrapping_add(units(elapsed)),
            )
        }
        None => (ntp(now), ts.wrapping_add(units(now.saturating_since(at)))),
    };
    ctx.scratch.reserve(64);
    SenderReport {
        ssrc: sub.spec.ssrc,
        ntp_time,
        rtp_time,
        packet_count: sub.packets_sent,
        octet_count: sub.octets_sent,
        reports: &[] as &[ReportBlock],
        extension: Bytes::new(),
    }
    .write_to(&mut ctx.scratch.buf);
    let packet = ctx.scratch.buf.split().freeze();
    ctx.out.0.push(Outgoing::Rtcp {
        peer: sub.subscriber,
        packet,
    });
}

/// A duration in 64-bit NTP units (32.32 fixed point seconds).
fn ntp_duration(d: std::time::Duration) -> u64 {
    (d.as_secs() << 32) | ((u64::from(d.subsec_nanos()) << 32) / 1_000_000_000)
}

/// The shard's time as a 64-bit NTP timestamp (RFC 3550 §4): seconds and fraction.
fn ntp(now: Time) -> u64 {
    let us = now.as_micros();
    let secs = us / 1_000_000;
    let frac = ((us % 1_000_000) << 32) / 1_000_000;
    (secs << 32) | frac
}

fn on_rtcp(
    ctx: &mut MediaCtx,
    now: Time,
    peer: Entity,
    packet: &Bytes,
    peers: &mut Query<(&mut PeerMedia, Option<&PeerSrtp>)>,
    tracks: &mut Query<(&mut Track, &mut Timers), Without<Subscription>>,
    subs: &mut Query<(&mut Subscription, &mut Timers), Without<Track>>,
) {
    let Ok((media, _)) = peers.get(peer) else {
        return;
    };
    // RTCP stays on its hop: each packet acts on this peer's own tracks or
    // subscriptions, found by SSRC, and is never forwarded.
    for item in Compound::new(packet.clone()) {
        let Ok(p) = item else {
            ctx.stats.media_malformed += 1;
            break;
        };
        match p.body {
            RtcpBody::SenderReport(sr) => {
                if let Some(&track) = media.tracks_by_ssrc.get(&sr.ssrc)
                    && let Ok((mut t, _)) = tracks.get_mut(track)
                {
                    // RFC 3550 §6.4.1 LSR: the middle 32 bits of the NTP timestamp.
                    t.stats.last_sr = (sr.ntp_time >> 16) as u32;
                    t.stats.last_sr_at = Some(now);
                    t.sender_report = Some((sr.ntp_time, sr.rtp_time, now));
                }
            }
            RtcpBody::Nack(n) => {
                if let Some(&sub) = media.subscriptions_by_ssrc.get(&n.media_ssrc) {
                    let mut lost = std::mem::take(&mut ctx.scratch.lost);
                    lost.clear();
                    lost.extend(n.entries.lost());
                    answer_nack(ctx, now, sub, &mut lost, tracks, subs);
                    ctx.scratch.lost = lost;
                }
            }
            RtcpBody::Pli(p) => {
                if let Some(&sub) = media.subscriptions_by_ssrc.get(&p.media_ssrc)
                    && let Ok((s, _)) = subs.get(sub)
                {
                    request_keyframe(ctx, now, s.track, tracks, peers);
                }
            }
            RtcpBody::Fir(f) => {
                for e in f.entries.iter() {
                    if let Some(&sub) = media.subscriptions_by_ssrc.get(&e.ssrc)
                        && let Ok((s, _)) = subs.get(sub)
                    {
                        request_keyframe(ctx, now, s.track, tracks, peers);
                    }
                }
            }
            _ => {}
        }
    }
}

/// A subscriber's NACK (RFC 4585 §6.2.1) for the sequence numbers in `lost` (its own
/// numbering): each answered once from the track's cache as RTX, at most
/// MAX_RETRANSMITS_PER_NACK of them, none from before the subscription started or
/// resent within a round trip.
fn answer_nack(
    ctx: &mut MediaCtx,
    now: Time,
    sub: Entity,
    lost: &mut Vec<u16>,
    tracks: &Query<(&mut Track, &mut Timers), Without<Subscription>>,
    subs: &mut Query<(&mut Subscription, &mut Timers), Without<Track>>,
) {
    let Ok((mut s, _)) = subs.get_mut(sub) else {
        return;
    };
    if !s.started {
        return;
    }
    let (offset, track, first) = (s.seq_offset, s.track, s.first_seq);
    let rtx = s.spec.rtx_ssrc.is_some() && s.spec.rtx_payload_type.is_some();
    let Ok((t, _)) = tracks.get(track) else {
        return;
    };
    // One NACK's entries may repeat a number.
    lost.sort_unstable();
    lost.dedup();
    let mut budget = MAX_RETRANSMITS_PER_NACK;
    for &seq in lost.iter() {
        // The subscriber's number back to the publisher's, extended.
        let original = seq.wrapping_sub(offset);
        let ext = extend_seq(t.stats.max_seq, original);
        let recent = s
            .recent_resends
            .iter()
            .any(|(r, at)| *r == ext && now.saturating_since(*at) < NACK_RETRY);
        if ext < first || recent || budget == 0 {
            ctx.stats.nack_unanswered += 1;
            continue;
        }
        match t.cache.get(ext).and_then(|p| Copy::of(t, p, ext)) {
            Some(copy) if rtx => {
                budget -= 1;
                if s.recent_resends.len() >= RECENT_RESENDS {
                    s.recent_resends.remove(0);
                }
                s.recent_resends.push((ext, now));
                ctx.out.0.push(Outgoing::Rtp {
                    subscription: sub,
                    copy: Copy {
                        audio_level: None,
                        ..copy
                    },
                    retransmission: true,
                });
            }
            _ => ctx.stats.nack_unanswered += 1,
        }
    }
}

/// The media half of `egress`: every subscriber's copy written and protected into
/// `write`, every RTCP compound protected, as datagrams on each peer's selected path.
pub fn egress_media(
    out: &mut MediaOut,
    write: &mut WriteBuffer,
    subs: &mut Query<&mut Subscription>,
    peers: &mut Query<(&Ice, &mut PeerSrtp)>,
    rng: &mut ShardRng,
    now: Time,
    stats: &mut ShardStats,
    transmits: &mut Vec<Datagram>,
) {
    for item in out.0.drain(..) {
        match item {
            Outgoing::Rtp {
                subscription,
                copy,
                retransmission,
            } => {
                let Ok(mut sub) = subs.get_mut(subscription) else {
                    continue;
                };
                match send_copy(
                    &mut sub,
                    &copy,
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
                let Ok((ice, mut srtp)) = peers.get_mut(peer) else {
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

/// One packet of a track as every subscriber's copy is written from it: parsed once,
/// when it is queued.
#[derive(Clone, Debug)]
pub struct Copy {
    /// The publisher's plaintext packet, shared by every subscription.
    packet: Bytes,
    /// Its header.
    header: RtpHeader,
    /// Its extended sequence number.
    seq: u64,
    /// Its audio level (RFC 6464: one byte), to carry over.
    audio_level: Option<u8>,
}

impl Copy {
    /// `packet` of `track` (extended sequence number `seq`), or `None` if it is not
    /// RTP.
    fn of(track: &Track, packet: &Bytes, seq: u64) -> Option<Copy> {
        let p = RtpPacket::parse(packet).ok()?;
        let audio_level = track
            .spec
            .extensions
            .audio_level
            .and_then(|id| match p.extension(id) {
                Some(&[level]) => Some(level),
                _ => None,
            });
        Some(Copy {
            header: *p.header(),
            packet: packet.clone(),
            seq,
            audio_level,
        })
    }
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
    copy: &Copy,
    rtx: bool,
    write: &mut WriteBuffer,
    peers: &mut Query<(&Ice, &mut PeerSrtp)>,
    rng: &mut ShardRng,
    now: Time,
    transmits: &mut Vec<Datagram>,
) -> Sent {
    let (h, seq) = (&copy.header, copy.seq);
    let Some(payload) = copy.packet.get(h.payload_range()) else {
        return Sent::Failed;
    };
    // No keys or no path yet: the subscriber is still connecting.
    let Ok((ice, mut srtp)) = peers.get_mut(sub.subscriber) else {
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
    let out_seq = ((seq & 0xffff) as u16).wrapping_add(sub.seq_offset);
    let timestamp = h.timestamp.wrapping_add(sub.ts_offset);
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
    reserve(write, copy.packet.len() + 32);
    {
        let mut w = RtpWriter::new(&mut write.0, &fields, &[]);
        // The subscriber's own mid (RFC 8843 §9.2), never the publisher's.
        if let Some(id) = sub.spec.extensions.mid {
            let _ = w.extension(id, sub.spec.mid.as_bytes());
        }
        // RFC 6464's level, carried over under the subscriber's id.
        if let (Some(id), Some(level)) = (sub.spec.extensions.audio_level, copy.audio_level) {
            let _ = w.extension(id, &[level]);
        }
        if rtx {
            w.payload(&out_seq.to_be_bytes());
        }
        w.payload(payload);
        w.finish(0);
    }
    if srtp
        .session
        .outbound
        .protect_rtp_tail(&mut write.0, 0)
        .is_err()
    {
        write.0.clear();
        return Sent::Failed;
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
