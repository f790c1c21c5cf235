//! Media as data: a published track and a subscription are entities of their own,
//! beside the peers that own them, so the `media` pass fans a packet out by walking a
//! track's subscription list and the `egress` pass writes each subscriber's copy from
//! the subscription's row.
//!
//! - A [`Track`] is what a publisher sends in one section: its SSRCs (announced, or
//!   learned from the mid header extension, RFC 8843 §9.2), its payload types and
//!   header extension ids, a bounded cache of recent packets for retransmission, and
//!   what receiving it has measured (RFC 3550 §6.4.1 report block fields).
//! - A [`Subscription`] is one subscriber's copy of a track: the SSRC, payload types
//!   and extension ids of the subscriber's session, and the offsets that keep its
//!   sequence numbers and timestamps continuous (RFC 3550 §5.1).
//! - [`PeerMedia`] on the peer: its tracks and subscriptions by SSRC, so incoming RTP
//!   (by the publisher's SSRC) and RTCP feedback (by the SSRC shoal sends with) find
//!   their entity in O(1).
//!
//! The tables follow the entities by hooks where a despawn must not leave a dangling
//! reference: removing a track removes its subscriptions (the shard does it, since
//! subscribers must be told), and a peer's despawn takes its tracks and subscriptions
//! with it.

pub mod temporal;

use std::collections::VecDeque;

use bevy_ecs::lifecycle::HookContext;
use bevy_ecs::prelude::{Component, Entity, Resource};
use bevy_ecs::world::DeferredWorld;
use bytes::Bytes;

use crate::hash::FastMap;
use crate::time::Time;

/// A track's id, unique on the node (the control plane assigns it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TrackId(pub u64);

/// Audio or video.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TrackKind {
    /// Audio.
    Audio,
    /// Video.
    Video,
}

/// The header extension ids (RFC 8285) one side of a session uses, `None` where the
/// extension was not negotiated.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ExtensionIds {
    /// `urn:ietf:params:rtp-hdrext:sdes:mid` (RFC 8843 §15.2).
    pub mid: Option<u8>,
    /// `urn:ietf:params:rtp-hdrext:ssrc-audio-level` (RFC 6464).
    pub audio_level: Option<u8>,
    /// `urn:ietf:params:rtp-hdrext:sdes:rtp-stream-id` (RFC 8852 §3.1).
    pub rid: Option<u8>,
    /// `urn:ietf:params:rtp-hdrext:sdes:repaired-rtp-stream-id` (RFC 8852 §3.2).
    pub repaired_rid: Option<u8>,
    /// The transport-wide sequence number
    /// (draft-holmer-rmcat-transport-wide-cc-extensions-01 §2).
    pub transport_cc: Option<u8>,
    /// webrtc's abs-send-time, for shoal's own estimate of a publisher's path.
    pub abs_send_time: Option<u8>,
    /// webrtc's abs-capture-time: read from a publisher, written to a subscriber.
    pub abs_capture_time: Option<u8>,
}

/// RTCP feedback negotiated for a stream (RFC 4585 §4.2, RFC 5104 §7.1).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FeedbackKinds {
    /// Generic NACK.
    pub nack: bool,
    /// Picture Loss Indication.
    pub pli: bool,
    /// Full Intra Request.
    pub fir: bool,
    /// Transport-wide congestion control feedback
    /// (draft-holmer-rmcat-transport-wide-cc-extensions-01 §3.1).
    pub transport_cc: bool,
    /// Receiver estimated maximum bitrate (draft-alvestrand-rmcat-remb-03).
    pub remb: bool,
}

/// What forwarding needs to know of a track's payload format.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum PayloadFormat {
    /// Opus audio.
    Opus,
    /// VP8 video (RFC 7741): keyframes and picture numbers are read.
    Vp8,
    /// H.264 video (RFC 6184): keyframes are read.
    H264,
    /// Anything else: forwarded as it is.
    #[default]
    Other,
}

/// One simulcast stream of a published track (RFC 8853 §5.1): its rid (RFC 8851),
/// and its SSRCs where the offer announced them (an `a=ssrc-group:SIM`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LayerSpec {
    /// The rid its packets carry (RFC 8852 §3.1), for rid-signalled simulcast.
    pub rid: Option<String>,
    /// Its SSRC, when announced.
    pub ssrc: Option<u32>,
    /// Its retransmission SSRC, when announced.
    pub rtx_ssrc: Option<u32>,
}

/// Simulcast streams a track may have; further ones offered are declined.
pub const MAX_LAYERS: usize = 3;

/// What the shard needs to receive a published track (from negotiation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrackSpec {
    /// The node's id for it.
    pub id: TrackId,
    /// Audio or video.
    pub kind: TrackKind,
    /// The publisher's section.
    pub mid: String,
    /// Its SSRC, when announced in SDP.
    pub ssrc: Option<u32>,
    /// Its retransmission SSRC (RFC 4588), when announced.
    pub rtx_ssrc: Option<u32>,
    /// Its payload type in the publisher's session.
    pub payload_type: u8,
    /// Its RTX payload type, when negotiated.
    pub rtx_payload_type: Option<u8>,
    /// The RTP clock rate (RFC 3550 §5.1), for jitter and reports.
    pub clock_rate: u32,
    /// The publisher's extension ids.
    pub extensions: ExtensionIds,
    /// Feedback the publisher takes.
    pub feedback: FeedbackKinds,
    /// Its payload format.
    pub format: PayloadFormat,
    /// Its simulcast streams, in the offer's order; empty for a single stream (whose
    /// SSRCs are `ssrc` and `rtx_ssrc`).
    pub layers: Vec<LayerSpec>,
}

/// What the shard needs to send a track to a subscriber (from negotiation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubscriptionSpec {
    /// The track.
    pub track: TrackId,
    /// The subscriber's section.
    pub mid: String,
    /// The SSRC shoal sends it with.
    pub ssrc: u32,
    /// The SSRC of its retransmissions, when RTX is negotiated.
    pub rtx_ssrc: Option<u32>,
    /// Its payload type in the subscriber's session.
    pub payload_type: u8,
    /// Its RTX payload type there, when negotiated.
    pub rtx_payload_type: Option<u8>,
    /// The subscriber's extension ids.
    pub extensions: ExtensionIds,
    /// Feedback the subscriber sends.
    pub feedback: FeedbackKinds,
    /// The CNAME its SSRCs have in the subscriber's SDP (`a=ssrc:… cname:`, RFC 5576
    /// §6.1): the publisher's stream id. Its sender reports carry it in an SDES
    /// (RFC 3550 §6.1), and streams to be synchronised share it (RFC 7022 §4.1).
    pub cname: String,
    /// One simulcast stream of the track only (its index in the publisher's order),
    /// sent as it comes, with no choice among streams and no switch: a node-to-node
    /// link carries each stream of a track this way, so that the other node's
    /// subscribers choose among them. `None`: the track, a simulcast one's stream
    /// chosen for the subscriber.
    pub stream: Option<u8>,
}

/// How often a published audio track's level is reported to the owner
/// ([`crate::tick::ShardEvent::AudioLevel`]) while packets with levels arrive.
pub const AUDIO_LEVEL_INTERVAL: std::time::Duration = std::time::Duration::from_millis(200);

/// Packets kept per track for retransmission: about a second of 2.5 Mbit/s video in
/// 1200-byte packets, and a power of two so a sequence number indexes it.
pub const PACKET_CACHE: usize = 512;

/// One cached packet: its extended sequence number and the plaintext RTP packet.
#[derive(Clone, Debug)]
pub struct CachedPacket {
    /// The sequence number extended past wraps (RFC 3550 Appendix A.1).
    pub seq: u64,
    /// The whole plaintext packet as the publisher sent it.
    pub packet: Bytes,
}

/// A bounded ring of a track's recent packets, by sequence number.
#[derive(Clone, Debug)]
pub struct PacketCache {
    slots: Vec<Option<CachedPacket>>,
}

impl Default for PacketCache {
    fn default() -> Self {
        Self {
            slots: vec![None; PACKET_CACHE],
        }
    }
}

impl PacketCache {
    /// Keeps `packet` under `seq`, replacing what was `PACKET_CACHE` packets older.
    pub fn insert(&mut self, seq: u64, packet: Bytes) {
        let slot = (seq % PACKET_CACHE as u64) as usize;
        if let Some(s) = self.slots.get_mut(slot) {
            *s = Some(CachedPacket { seq, packet });
        }
    }

    /// The packet with extended sequence number `seq`, if still held.
    pub fn get(&self, seq: u64) -> Option<&Bytes> {
        let slot = (seq % PACKET_CACHE as u64) as usize;
        match self.slots.get(slot) {
            Some(Some(c)) if c.seq == seq => Some(&c.packet),
            _ => None,
        }
    }
}

/// RFC 3550 Appendix A.1 and A.8: what a receiver tracks of one source to write its
/// report block.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReceiveStats {
    /// Whether a packet arrived yet.
    pub started: bool,
    /// The first extended sequence number received.
    pub base_seq: u64,
    /// The highest extended sequence number received.
    pub max_seq: u64,
    /// Packets received (duplicates included, as A.3 counts).
    pub received: u64,
    /// `expected` at the last report (A.3 `expected_prior`).
    pub expected_prior: u64,
    /// `received` at the last report (A.3 `received_prior`).
    pub received_prior: u64,
    /// Interarrival jitter in timestamp units, scaled by 16 (A.8).
    pub jitter_q4: u32,
    /// The last packet's relative transit time (A.8 `transit`).
    pub transit: i64,
    /// The middle 32 bits of the last SR's NTP timestamp (RFC 3550 §6.4.1 LSR).
    pub last_sr: u32,
    /// When that SR arrived, for DLSR.
    pub last_sr_at: Option<Time>,
}

impl ReceiveStats {
    /// Extends a 16-bit sequence number against the highest seen (A.1), and counts
    /// the packet. Returns the extended number.
    pub fn note(&mut self, seq: u16) -> u64 {
        let ext = if self.started {
            extend_seq(self.max_seq, seq)
        } else {
            u64::from(seq) + (1 << 16)
        };
        self.note_extended(ext);
        ext
    }

    /// Counts a packet whose extended number is known already (a mirror's packets
    /// carry their origin's).
    pub fn note_extended(&mut self, ext: u64) {
        if !self.started {
            self.started = true;
            self.base_seq = ext;
            self.max_seq = ext;
        }
        self.max_seq = self.max_seq.max(ext);
        self.received += 1;
    }

    /// A.3: packets expected so far.
    pub fn expected(&self) -> u64 {
        if self.started {
            self.max_seq - self.base_seq + 1
        } else {
            0
        }
    }
}

/// The extended sequence number closest to `max` whose low 16 bits are `seq` (RFC
/// 3550 Appendix A.1's idea, without its probation): a packet up to half the space
/// behind or ahead.
pub fn extend_seq(max: u64, seq: u16) -> u64 {
    let cycle = max & !0xffff;
    let candidate = cycle | u64::from(seq);
    let delta = candidate as i64 - max as i64;
    if delta > 0x8000 && candidate >= 0x1_0000 {
        candidate - 0x1_0000
    } else if delta < -0x8000 {
        candidate + 0x1_0000
    } else {
        candidate
    }
}

/// SSRCs of ended subscriptions, by subscriber, for the egress to drop from the
/// subscriber's outbound SRTP context (filled by the `Subscription` hook).
#[derive(Resource, Debug, Default)]
pub struct RetiredSsrcs(pub Vec<(Entity, u32)>);

/// The shard's tracks by id.
#[derive(Resource, Debug, Default)]
pub struct TrackIndex(pub FastMap<TrackId, Entity>);

/// A published track. Removing it (or despawning it) removes its subscriptions and
/// its entries in the publisher's [`PeerMedia`] and the [`TrackIndex`].
#[derive(Component, Debug)]
#[component(on_remove = track_removed)]
pub struct Track {
    /// What negotiation agreed.
    pub spec: TrackSpec,
    /// The peer it is received from; `None` for a local source, whose packets the
    /// shard's owner hands in (`Shard::send_rtp`, a client endpoint's camera).
    pub publisher: Option<Entity>,
    /// Its publisher is a node-to-node link (`RoomMember::link`): the track is
    /// another node's participant's, crossing that link.
    pub from_link: bool,
    /// Whether each received packet is reported to the owner (`ShardEvent::RtpReceived`:
    /// a client endpoint playing it out).
    pub report: bool,
    /// The SSRC in use (announced or learned).
    pub ssrc: Option<u32>,
    /// The RTX SSRC in use.
    pub rtx_ssrc: Option<u32>,
    /// Its subscriptions on this shard.
    pub subscribers: Vec<Entity>,
    /// Its subscriptions their subscribers paused: off `subscribers`, so the
    /// fan-out never sees them, and still ended with the track.
    pub paused: Vec<Entity>,
    /// Recent packets, for subscribers' NACKs.
    pub cache: PacketCache,
    /// What receiving it measured.
    pub stats: ReceiveStats,
    /// When shoal last asked the publisher for a keyframe (throttling, RFC 4585
    /// §3.4's spirit: not more than one request per interval).
    pub last_keyframe_request: Option<Time>,
    /// A keyframe request waits for the throttle interval to pass.
    pub keyframe_wanted: bool,
    /// Sequence numbers missing, oldest first, with when shoal last NACKed each and
    /// how often.
    pub missing: VecDeque<(u64, Option<Time>, u8)>,
    /// The publisher's last sender report: its NTP and RTP times, and when it came
    /// (RFC 3550 §6.4.1), for the reports shoal sends subscribers.
    pub sender_report: Option<(u64, u32, Time)>,
    /// Sibling shards that mirror this track: each packet goes to them too.
    pub relay_to: Vec<usize>,
    /// For a mirror of a track published on another shard: that shard, which its
    /// keyframe requests go to.
    pub origin: Option<usize>,
    /// The publisher's audio levels (RFC 6464) since the last report.
    pub levels: LevelMeter,
    /// Its publisher muted it: its packets are neither forwarded nor cached (so no
    /// retransmission can carry them), and its levels not reported.
    pub muted: bool,
    /// For one simulcast stream of a track: which, and its siblings.
    pub layering: Option<Layering>,
    /// What arrives on it, for choosing among simulcast streams.
    pub rate: RateMeter,
    /// What arrives of each VP8 temporal layer (TID 0 to 3), for choosing among
    /// them; all zero for a stream without temporal layers.
    pub temporal_rates: [RateMeter; 4],
    /// A packet with a TID has come on it: its packets go through each
    /// subscriber's temporal filter from then on.
    pub temporal_seen: bool,
}

/// One simulcast stream among its track's (each stream is a `Track` of its own: its
/// SSRCs, cache, losses and reports are its own). The first stream's entity stands
/// for the track: the track index, the publisher's mids and every subscription name
/// it; a subscription is listed on every stream and takes one at a time, except one
/// to a single stream (`SubscriptionSpec::stream`, a link's), listed on that stream
/// alone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layering {
    /// Its place in the offer's list.
    pub index: u8,
    /// Its rid, for rid-signalled simulcast.
    pub rid: Option<String>,
    /// Every stream of the track, itself included, in the offer's order.
    pub siblings: Vec<Entity>,
    /// Its picture size, from its last keyframe (VP8's frame header, H.264's
    /// sequence parameter set).
    pub size: Option<(u16, u16)>,
}

/// Bytes received over the last second, in ten 100 ms buckets: O(1) per packet.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RateMeter {
    buckets: [u32; 10],
    /// The 100 ms period the newest bucket counts.
    period: u64,
}

impl RateMeter {
    const BUCKET_US: u64 = 100_000;

    /// Counts `bytes` received at `now`.
    pub fn add(&mut self, now: Time, bytes: usize) {
        self.advance(now);
        let i = (self.period % 10) as usize;
        self.buckets[i] = self.buckets[i].saturating_add(bytes as u32);
    }

    fn advance(&mut self, now: Time) {
        let period = now.as_micros() / Self::BUCKET_US;
        if period <= self.period {
            return;
        }
        let gone = (period - self.period).min(10);
        for k in 1..=gone {
            self.buckets[((self.period + k) % 10) as usize] = 0;
        }
        self.period = period;
    }

    /// Bits per second over the last second, at `now`: the nine whole buckets before
    /// now's and what now's has counted, over the time they span.
    pub fn bps(&self, now: Time) -> u64 {
        let us = now.as_micros();
        let period = us / Self::BUCKET_US;
        let age = period.saturating_sub(self.period);
        if age >= 10 {
            return 0;
        }
        // The buckets still inside the window that ends now.
        let bytes: u64 = (0..10 - age)
            .map(|k| u64::from(self.buckets[((self.period + 10 - k) % 10) as usize]))
            .sum();
        let span_us = 9 * Self::BUCKET_US + (us % Self::BUCKET_US).max(1);
        bytes * 8 * 1_000_000 / span_us
    }
}

/// RFC 6464 audio levels of one track over a report interval: the mean of their
/// linear amplitudes, so a loud moment weighs as loud and silence as silence.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LevelMeter {
    /// Sum of 10^(−level/20) over the packets (level in −dBov, RFC 6464 §3).
    pub amplitude_sum: f64,
    /// Packets that carried a level.
    pub packets: u32,
    /// Packets whose voice activity flag was set.
    pub voiced: u32,
}

/// RFC 6464's level (−dBov, 0 loudest to 127 silence) as a linear amplitude
/// relative to full scale: 10^(−level/20).
pub fn level_amplitude(level: u8) -> f64 {
    10f64.powf(-f64::from(level.min(127)) / 20.0)
}

impl LevelMeter {
    /// Counts one packet's level: 0 (loudest) to 127 (silence), in −dBov.
    pub fn add(&mut self, level: u8, voice: bool) {
        self.amplitude_sum += level_amplitude(level);
        self.packets += 1;
        self.voiced += u32::from(voice);
    }

    /// The mean level in −dBov (0 to 127), if any packet was counted; the meter
    /// starts over.
    pub fn take(&mut self) -> Option<(u8, bool)> {
        if self.packets == 0 {
            return None;
        }
        let mean = self.amplitude_sum / f64::from(self.packets);
        let level = (-20.0 * mean.max(1e-7).log10()).round().clamp(0.0, 127.0) as u8;
        let voice = self.voiced * 2 > self.packets;
        *self = LevelMeter::default();
        Some((level, voice))
    }
}

/// One subscriber's copy of a track. Removing it takes it off its track's list and
/// out of the subscriber's [`PeerMedia`].
#[derive(Component, Debug)]
#[component(on_remove = subscription_removed)]
pub struct Subscription {
    /// What negotiation agreed.
    pub spec: SubscriptionSpec,
    /// The subscriber's peer entity.
    pub subscriber: Entity,
    /// The track's entity.
    pub track: Entity,
    /// Added to the publisher's extended sequence number, modulo 2^16.
    pub seq_offset: u16,
    /// Added to the publisher's timestamp.
    pub ts_offset: u32,
    /// The RTX stream's own sequence numbers (RFC 4588 §4).
    pub rtx_seq: u16,
    /// Packets and payload octets sent, for SR (RFC 3550 §6.4.1).
    pub packets_sent: u32,
    /// See `packets_sent`.
    pub octets_sent: u32,
    /// The last RTP timestamp sent and when, for SR's RTP timestamp.
    pub last_rtp_ts: Option<(u32, Time)>,
    /// Whether anything was sent yet.
    pub started: bool,
    /// The publisher's extended sequence number of the first packet sent: NACKs for
    /// anything older are not this subscriber's to ask for.
    pub first_seq: u64,
    /// Sequence numbers recently retransmitted and when (bounded), so a NACK repeated
    /// within a round trip does not resend again.
    pub recent_resends: VecDeque<(u64, Time)>,
    /// For a simulcast track: which stream it is sent, and how the switches between
    /// them are hidden. `None` for one stream taken alone (`SubscriptionSpec::stream`).
    pub layers: Option<LayerChoice>,
    /// Paused by its subscriber: off its track's subscriber lists, nothing sent.
    pub paused: bool,
    /// Which VP8 temporal layers of the stream it is sent.
    pub temporal: temporal::TemporalFilter,
}

/// How a subscriber wants a track it subscribes to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TrackSettings {
    /// Nothing sent while paused.
    pub paused: bool,
    /// The highest simulcast stream by rank (0 the lowest picture), `None` for any.
    pub max_rank: Option<u8>,
    /// The largest picture wanted, width and height (0: no bound on that side).
    pub max_size: Option<(u16, u16)>,
    /// The highest VP8 temporal layer wanted (0 the base layer), `None` for any.
    pub max_temporal: Option<u8>,
}

/// A subscription's simulcast state. `Subscription::track` is the stream it is sent
/// (or waits for, before its first keyframe); a switch happens at a keyframe of the
/// target, and each switch continues the subscriber's sequence numbers, timestamps
/// and (VP8) picture numbers from where the last stream left them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LayerChoice {
    /// The stream it is sent now (its index), `None` before the first keyframe.
    pub current: Option<u8>,
    /// The stream chosen for it.
    pub target: u8,
    /// The highest rank (0 the lowest picture) the subscriber prefers.
    pub max_rank: u8,
    /// The largest picture it wants, width and height (0: no bound on that side).
    pub max_size: Option<(u16, u16)>,
    /// Switches made.
    pub switches: u32,
    /// The stream of the last packet sent: a packet of another re-bases the
    /// offsets.
    pub sent: Option<u8>,
    /// The highest sequence number sent, in the subscriber's numbering.
    pub last_seq: u16,
    /// The last VP8 PictureID and TL0PICIDX sent.
    pub last_picture: (u16, u8),
    /// Added to the stream's PictureID and TL0PICIDX.
    pub picture_offset: (u16, u8),
    /// When the target was last changed.
    pub target_since: Option<Time>,
    /// When the target last climbed, while the climb is on trial.
    pub climbed_at: Option<Time>,
    /// A failed climb holds the target below the stream `held_below` until then.
    pub held_until: Option<Time>,
    /// See `held_until`.
    pub held_below: u8,
    /// The temporal layers chosen of `held_below` when its climb failed.
    pub held_below_temporal: u8,
    /// How long the last failed climb held it.
    pub hold: std::time::Duration,
}

/// A peer's media index. Removing it (the peer's despawn) despawns the peer's tracks
/// and subscriptions.
#[derive(Component, Debug, Default)]
#[component(on_remove = peer_media_removed)]
pub struct PeerMedia {
    /// Tracks it publishes, by SSRC (primary and RTX).
    pub tracks_by_ssrc: FastMap<u32, Entity>,
    /// Tracks it publishes, by mid (to bind an unannounced SSRC, RFC 8843 §9.2).
    pub tracks_by_mid: Vec<(String, Entity)>,
    /// Its subscriptions, by the SSRC shoal sends with (primary and RTX).
    pub subscriptions_by_ssrc: FastMap<u32, Entity>,
    /// Its tracks, by id.
    pub tracks: Vec<(TrackId, Entity)>,
    /// Its subscriptions, by track id.
    pub subscriptions: Vec<(TrackId, Entity)>,
    /// SSRCs of its ended subscriptions: never sent with again under these SRTP keys.
    pub retired_ssrcs: Vec<u32>,
}

fn track_removed(mut world: DeferredWorld, ctx: HookContext) {
    let Some(track) = world.get::<Track>(ctx.entity) else {
        return;
    };
    let (id, publisher) = (track.spec.id, track.publisher);
    let subscribers: Vec<Entity> = track
        .subscribers
        .iter()
        .chain(&track.paused)
        .copied()
        .collect();
    // The first stream of a simulcast track stands for it: the others go with it.
    let siblings: Vec<Entity> = match &track.layering {
        Some(l) if l.siblings.first() == Some(&ctx.entity) => l.siblings[1..].to_vec(),
        _ => Vec::new(),
    };
    if let Some(mut index) = world.get_resource_mut::<TrackIndex>()
        && index.0.get(&id) == Some(&ctx.entity)
    {
        index.0.remove(&id);
    }
    if let Some(mut media) = publisher.and_then(|p| world.get_mut::<PeerMedia>(p)) {
        media.forget_entity(ctx.entity);
    }
    let mut commands = world.commands();
    for s in subscribers {
        commands.entity(s).try_despawn();
    }
    for e in siblings {
        commands.entity(e).try_despawn();
    }
}

fn subscription_removed(mut world: DeferredWorld, ctx: HookContext) {
    let Some(sub) = world.get::<Subscription>(ctx.entity) else {
        return;
    };
    let (track, subscriber) = (sub.track, sub.subscriber);
    let ssrcs = [Some(sub.spec.ssrc), sub.spec.rtx_ssrc];
    if let Some(mut retired) = world.get_resource_mut::<RetiredSsrcs>() {
        retired
            .0
            .extend(ssrcs.into_iter().flatten().map(|s| (subscriber, s)));
    }
    // Listed on every stream of a simulcast track (or, taking one alone, on that
    // one: leaving the others' lists is a no-op).
    let streams = match world.get::<Track>(track).and_then(|t| t.layering.as_ref()) {
        Some(l) => l.siblings.clone(),
        None => vec![track],
    };
    for stream in streams {
        if let Some(mut t) = world.get_mut::<Track>(stream) {
            t.subscribers.retain(|e| *e != ctx.entity);
            t.paused.retain(|e| *e != ctx.entity);
        }
    }
    if let Some(mut media) = world.get_mut::<PeerMedia>(subscriber) {
        media.forget_entity(ctx.entity);
        media.retired_ssrcs.extend(ssrcs.into_iter().flatten());
    }
}

fn peer_media_removed(mut world: DeferredWorld, ctx: HookContext) {
    let Some(media) = world.get::<PeerMedia>(ctx.entity) else {
        return;
    };
    let owned: Vec<Entity> = media
        .tracks
        .iter()
        .chain(&media.subscriptions)
        .map(|(_, e)| *e)
        .collect();
    let mut commands = world.commands();
    for e in owned {
        commands.entity(e).try_despawn();
    }
}

impl Track {
    /// Counts a packet of `len` bytes with RTP payload `payload` that arrived at
    /// `now` towards its VP8 temporal layer's rate, if it has one.
    pub fn note_temporal(&mut self, now: Time, payload: &[u8], len: usize) {
        if self.spec.format != PayloadFormat::Vp8 {
            return;
        }
        if let Some(tid) =
            crate::rtp::payload::Vp8Descriptor::parse(payload).and_then(|d| d.temporal_id)
            && let Some(meter) = self.temporal_rates.get_mut(usize::from(tid))
        {
            meter.add(now, len);
            self.temporal_seen = true;
        }
    }

    /// What a subscriber is sent of this stream with temporal layers up to each TID,
    /// bit/s, while they are measured: `None` for a stream without them. Layers
    /// above the first silent one count as absent.
    pub fn temporal_bps(&self, now: Time) -> Option<Vec<u64>> {
        let mut cumulative = Vec::new();
        let mut sum = 0;
        for meter in &self.temporal_rates {
            let bps = meter.bps(now);
            if bps == 0 {
                break;
            }
            sum += bps;
            cumulative.push(sum);
        }
        (cumulative.len() > 1).then_some(cumulative)
    }
}

impl PeerMedia {
    /// Drops every entry that names `entity` (a track or a subscription).
    pub fn forget_entity(&mut self, entity: Entity) {
        self.tracks_by_ssrc.retain(|_, e| *e != entity);
        self.tracks_by_mid.retain(|(_, e)| *e != entity);
        self.subscriptions_by_ssrc.retain(|_, e| *e != entity);
        self.tracks.retain(|(_, e)| *e != entity);
        self.subscriptions.retain(|(_, e)| *e != entity);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_numbers_extend_across_wraps_and_reordering() {
        assert_eq!(extend_seq(0x1_fff0, 0xfff5), 0x1_fff5);
        assert_eq!(extend_seq(0x1_fff0, 0x0002), 0x2_0002, "wrapped forward");
        assert_eq!(
            extend_seq(0x2_0002, 0xfff0),
            0x1_fff0,
            "reordered from before the wrap"
        );
        assert_eq!(extend_seq(0x1_0005, 0x0003), 0x1_0003);
        let mut s = ReceiveStats::default();
        let first = s.note(65_534);
        assert_eq!(s.note(65_535), first + 1);
        assert_eq!(s.note(0), first + 2);
        assert_eq!(s.note(65_535), first + 1);
        assert_eq!(s.expected(), 3);
        assert_eq!(s.received, 4);
    }

    #[test]
    fn the_rate_meter_counts_the_last_second() {
        let mut m = RateMeter::default();
        // 1250 bytes every 10 ms: 1 Mbit/s.
        for i in 0..300u64 {
            let at = Time::from_millis(10 * i);
            m.add(at, 1250);
            if i >= 100 {
                let bps = m.bps(at);
                assert!((950_000..=1_050_000).contains(&bps), "{at:?}: {bps}");
            }
        }
        assert_eq!(m.bps(Time::from_millis(4_100)), 0, "silent for a second");
    }

    #[test]
    fn the_cache_holds_the_latest_window() {
        let mut c = PacketCache::default();
        for seq in 0..(PACKET_CACHE as u64 + 10) {
            c.insert(seq, Bytes::from(seq.to_be_bytes().to_vec()));
        }
        assert!(c.get(5).is_none(), "overwritten");
        assert_eq!(
            c.get(PACKET_CACHE as u64 + 5).unwrap()[7],
            (PACKET_CACHE + 5) as u8
        );
        assert!(c.get(PACKET_CACHE as u64 + 10).is_none(), "not yet sent");
    }
}
