//! A subscriber's simulcast stream follows its bottleneck, end to end in the
//! simulator. A publisher client sends one VP8 track as three SSRC-signalled
//! simulcast streams (200 kbit/s, 700 kbit/s and 2 Mbit/s at 30 frames a second,
//! each with its own PictureID and TL0PICIDX, a keyframe on every request); a server
//! shard forwards one of them to a subscriber client (shoal's own stack, which sends
//! transport-cc feedback) over a link whose rate steps 3 Mbit/s → 600 kbit/s → 3
//! Mbit/s, with 100 ms of drop-tail queue, and a delay, jitter and random loss that
//! vary with the seed. For each of 20 seeds:
//!
//! - on the 3 Mbit/s link the subscriber is on the top stream before the drop;
//! - within 2 s of the drop it receives only the lowest stream, and from then until
//!   the link recovers it loses under 2 % of what it was sent (RFC 3550 A.3's
//!   expected minus received, retransmissions counted as received);
//! - within 10 s of the recovery it is on the top stream again;
//! - over the whole run its sequence numbers are one continuous space, and its VP8
//!   PictureIDs never go backwards across a switch.

mod media_sim;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use media_sim::{
    PT, RECEIVED, SRV, addr, assert_one_sequence, bottleneck, cli, connected_sim, subscription,
    vp8_body, vp8_video,
};
use shoal_components::dtls::DtlsRole;
use shoal_components::media::{LayerSpec, SubscriptionSpec, TrackId, TrackSpec};
use shoal_components::peer::PeerId;
use shoal_components::room::RoomId;
use shoal_components::rtp::{RtpFields, RtpPacket, RtpWriter};
use shoal_components::tick::ShardEvent;
use shoal_server::sim::{LinkConfig, Sim};
use shoal_systems::Command;

/// The transport-wide extension's id on both sides of the subscriber's session.
const TWCC_ID: u8 = 3;
const STEP: Duration = Duration::from_millis(5);
/// The server's track.
const TRACK: TrackId = TrackId(7);
/// The subscriber's SSRCs.
const SUB_SSRC: u32 = 0x2004;
const SUB_RTX: u32 = 0x2005;
/// The streams' rates and picture sizes, lowest first.
const RATES: [u64; 3] = [200_000, 700_000, 2_000_000];
const SIZES: [(u16, u16); 3] = [(320, 180), (640, 360), (1280, 720)];
/// The order the publisher lists them in, by rank: its offer's order says nothing of
/// which is which, their keyframes' picture sizes do.
const OFFER_ORDER: [usize; 3] = [1, 2, 0];
const FPS: u64 = 30;
/// Largest payload per packet.
const MTU_PAYLOAD: usize = 1100;

/// When the link drops and recovers, and when the run ends.
const DROP_AT: Duration = Duration::from_secs(12);
const RECOVER_AT: Duration = Duration::from_secs(24);
const END_AT: Duration = Duration::from_secs(36);
/// The targets.
const DOWN_WITHIN: Duration = Duration::from_secs(2);
const UP_WITHIN: Duration = Duration::from_secs(10);

/// One simulcast stream's encoder at the publisher.
struct Encoder {
    source: TrackId,
    rate: u64,
    size: (u16, u16),
    seq: u16,
    timestamp: u32,
    picture: u16,
    tl0: u8,
    frame: u32,
    keyframe: bool,
    next_frame: Duration,
    /// Chromium's three temporal layers (L1T3): TIDs 0, 2, 1, 2 from each key
    /// frame, Y on frames 1 and 2 of every eight; else no T in the descriptor.
    temporal: bool,
    since_key: u64,
    /// Packets sent.
    sent: u64,
}

impl Encoder {
    /// The packets of the next frame: a VP8 descriptor (X, S on the first, I with a
    /// 15-bit PictureID, L), a payload header whose P bit is clear on a keyframe,
    /// then the stream's index and the frame number.
    fn frame(&mut self, layer: u8, noise: &mut u64) -> Vec<Bytes> {
        let key = std::mem::take(&mut self.keyframe);
        if key {
            self.since_key = 0;
        }
        let (tid, sync) = match self.since_key % 8 {
            0 | 4 => (0u8, key),
            1 => (2, true),
            2 => (1, true),
            6 => (1, false),
            _ => (2, false),
        };
        self.since_key += 1;
        // Frames vary by ±30 % around the stream's rate.
        *noise = noise
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let scale = 0.7 + 0.6 * ((*noise >> 33) as f64 / (1u64 << 31) as f64);
        let mut bytes = (self.rate as f64 * scale / FPS as f64 / 8.0) as usize;
        if key {
            bytes *= 3;
        }
        let count = bytes.div_ceil(MTU_PAYLOAD).max(1);
        let mut out = Vec::with_capacity(count);
        for i in 0..count {
            let mut payload = BytesMut::new();
            payload.put_u8(if i == 0 { 0x90 } else { 0x80 });
            payload.put_u8(if self.temporal { 0xe0 } else { 0xc0 });
            payload.put_u16(0x8000 | self.picture);
            payload.put_u8(self.tl0);
            if self.temporal {
                payload.put_u8(tid << 6 | if sync { 0x20 } else { 0 });
            }
            if i == 0 {
                // RFC 6386 §9.1: the frame tag (its low bit clear for a key frame),
                // and a key frame's start code and picture size.
                payload.put_u8(if key { 0x00 } else { 0x01 });
                payload.put_u16(0);
                if key {
                    payload.put_slice(&[0x9d, 0x01, 0x2a]);
                    payload.put_u16_le(self.size.0);
                    payload.put_u16_le(self.size.1);
                }
            }
            payload.put_u8(layer);
            payload.put_u32(self.frame);
            let size = (bytes / count).clamp(payload.len(), MTU_PAYLOAD);
            payload.resize(size, 0x55);
            let fields = RtpFields {
                marker: i + 1 == count,
                payload_type: PT,
                sequence_number: self.seq,
                timestamp: self.timestamp,
                ssrc: 0xAB00 + (self.source.0 - 100) as u32,
            };
            let mut packet = BytesMut::new();
            let mut w = RtpWriter::new(&mut packet, &fields, &[]);
            w.payload(&payload);
            w.finish(0);
            out.push(packet.freeze());
            self.seq = self.seq.wrapping_add(1);
            self.sent += 1;
        }
        self.timestamp = self.timestamp.wrapping_add((90_000 / FPS) as u32);
        self.picture = (self.picture + 1) & 0x7fff;
        // RFC 7741 §4.2: TL0PICIDX counts base layer frames.
        if !self.temporal || tid == 0 {
            self.tl0 = self.tl0.wrapping_add(1);
        }
        self.frame += 1;
        out
    }
}

/// What the subscriber received: when, its sequence number, the stream and its
/// PictureID.
struct Received {
    at: Duration,
    seq: u64,
    layer: u8,
    picture: u16,
}

/// One seed's run through the link's steps: what the subscriber received.
fn run(seed: u64, temporal: bool) -> Vec<Received> {
    let (mut dropped, mut recovered) = (false, false);
    run_script(seed, END_AT, temporal, |elapsed, sim| {
        if elapsed >= DROP_AT && !dropped {
            dropped = true;
            sim.set_link(addr(SRV), cli(2), bottleneck(seed, 600_000, 0.002));
        }
        if elapsed >= RECOVER_AT && !recovered {
            recovered = true;
            sim.set_link(addr(SRV), cli(2), bottleneck(seed, 3_000_000, 0.002));
        }
    })
}

/// One seed's run over a 3 Mbit/s link for `end`, `script` acting on the sim before
/// each step: what the subscriber received.
fn run_script(
    seed: u64,
    end: Duration,
    temporal: bool,
    mut script: impl FnMut(Duration, &mut Sim),
) -> Vec<Received> {
    let mut sim = connected_sim(seed, &LinkConfig::default(), 1);
    sim.set_link(addr(SRV), cli(2), bottleneck(seed, 3_000_000, 0.002));
    let (mut encoders, track) = simulcast_publisher(&mut sim, seed, temporal);
    sim.command(
        addr(SRV),
        Command::Publish {
            peer: PeerId(1),
            track,
        },
    )
    .unwrap();
    receive_with_feedback(&mut sim, addr(SRV), 2, TRACK);
    let start = sim.now();
    let mut noise = seed;
    let mut got = Vec::new();
    loop {
        let elapsed = sim.now().saturating_since(start);
        if elapsed >= end {
            break;
        }
        script(elapsed, &mut sim);
        step(&mut sim, &mut encoders, elapsed, &mut noise);
        let at = sim.now().saturating_since(start);
        got.extend(take_events(&mut sim, &mut encoders, at).map(|(_, r)| r));
    }
    got
}

/// The publisher, client 1: three local sources, each sent on its own SSRC pair, and
/// the track a server publishes them as, one track's three streams (as
/// `a=ssrc-group:SIM` would give); the sources' encoders, in the offer's order.
fn simulcast_publisher(sim: &mut Sim, seed: u64, temporal: bool) -> (Vec<Encoder>, TrackSpec) {
    let mut layers = Vec::new();
    let mut encoders = Vec::new();
    for (i, &rank) in OFFER_ORDER.iter().enumerate() {
        let source = TrackId(100 + i as u64);
        let (ssrc, rtx) = (0x1000 + 2 * i as u32, 0x1001 + 2 * i as u32);
        sim.command(
            cli(1),
            Command::AddSource {
                peer: PeerId(1),
                track: vp8_video(source, Some(0xAB00 + i as u32), None),
                subscription: subscription(source, ssrc, rtx),
            },
        )
        .unwrap();
        layers.push(LayerSpec {
            rid: None,
            ssrc: Some(ssrc),
            rtx_ssrc: Some(rtx),
        });
        encoders.push(Encoder {
            source,
            rate: RATES[rank],
            size: SIZES[rank],
            seq: (seed as u16)
                .wrapping_mul(7919)
                .wrapping_add(1000 * i as u16),
            timestamp: (seed as u32).wrapping_mul(104_729) ^ (i as u32) << 20,
            picture: (100 * i as u16 + seed as u16) & 0x7fff,
            tl0: 50 * i as u8,
            frame: 0,
            keyframe: true,
            next_frame: Duration::ZERO,
            temporal,
            since_key: 0,
            sent: 0,
        });
    }
    let mut track = vp8_video(TRACK, None, None);
    track.layers = layers;
    (encoders, track)
}

/// Subscriber `i` (client `i`) is sent `track` by shard `server`, on the
/// subscriber's SSRCs, with transport-cc feedback.
fn receive_with_feedback(sim: &mut Sim, server: SocketAddr, i: u64, track: TrackId) {
    let (ssrc, rtx) = (SUB_SSRC + 2 * (i as u32 - 2), SUB_RTX + 2 * (i as u32 - 2));
    let mut subscription = subscription(track, ssrc, rtx);
    subscription.extensions.transport_cc = Some(TWCC_ID);
    subscription.feedback.transport_cc = true;
    sim.command(
        server,
        Command::Subscribe {
            peer: PeerId(i),
            subscription,
        },
    )
    .unwrap();
    let mut received = vp8_video(RECEIVED, Some(ssrc), Some(rtx));
    received.extensions.transport_cc = Some(TWCC_ID);
    received.feedback.transport_cc = true;
    sim.command(
        cli(i),
        Command::Receive {
            peer: PeerId(i),
            track: received,
        },
    )
    .unwrap();
}

/// Sends each encoder's frame when it is due at `elapsed`, and runs the sim a step.
fn step(sim: &mut Sim, encoders: &mut [Encoder], elapsed: Duration, noise: &mut u64) {
    for (i, e) in encoders.iter_mut().enumerate() {
        if elapsed >= e.next_frame {
            e.next_frame += Duration::from_micros(1_000_000 / FPS);
            let now = sim.now();
            for p in e.frame(OFFER_ORDER[i] as u8, noise) {
                sim.shard_mut(cli(1)).send_rtp(now, e.source, p).unwrap();
            }
        }
    }
    let _ = sim.run_for(STEP);
}

/// The sim's events: keyframe requests go to the encoders; each packet a client
/// received is returned with the client's address, as received `at`.
fn take_events<'a>(
    sim: &'a mut Sim,
    encoders: &'a mut [Encoder],
    at: Duration,
) -> impl Iterator<Item = (SocketAddr, Received)> + 'a {
    sim.drain_events()
        .filter_map(move |(from, event)| match event {
            ShardEvent::KeyframeRequested { track } => {
                if let Some(e) = encoders.iter_mut().find(|e| e.source == track) {
                    e.keyframe = true;
                }
                None
            }
            ShardEvent::RtpReceived { seq, packet, .. } => {
                let p = RtpPacket::parse(&packet).unwrap();
                let (d, body) = vp8_body(p.payload());
                Some((
                    from,
                    Received {
                        at,
                        seq,
                        layer: body[0],
                        picture: d.picture_id.unwrap().0,
                    },
                ))
            }
            _ => None,
        })
}

/// When the subscriber went on to which stream, for a failure's message.
fn timeline(got: &[Received]) -> String {
    let mut timeline = String::new();
    let mut last = None;
    for r in got {
        if last != Some(r.layer) {
            timeline += &format!(" {:.2}s→{}", r.at.as_secs_f64(), r.layer);
            last = Some(r.layer);
        }
    }
    timeline
}

/// The stream received over `[from, to)`: `Some` if it was one stream throughout.
fn only_layer(got: &[Received], from: Duration, to: Duration) -> Option<u8> {
    let layers: BTreeSet<u8> = got
        .iter()
        .filter(|r| r.at >= from && r.at < to)
        .map(|r| r.layer)
        .collect();
    (layers.len() == 1).then(|| *layers.first().unwrap())
}

/// When the subscriber was last not on `layer` in `[from, to)`: the time from which it
/// received only `layer` until `to`.
fn settled_on(got: &[Received], layer: u8, from: Duration, to: Duration) -> Option<Duration> {
    let window: Vec<&Received> = got.iter().filter(|r| r.at >= from && r.at < to).collect();
    let last_other = window.iter().rposition(|r| r.layer != layer);
    match last_other {
        None => window.first().map(|r| r.at),
        Some(i) if i + 1 < window.len() => Some(window[i + 1].at),
        Some(_) => None,
    }
}

#[test]
fn sim_bwe_tracks_bottleneck() {
    tracks_bottleneck(1..=20, false);
}

/// The same with each stream in three VP8 temporal layers, as Chromium sends them:
/// the lowest stream's layers are steps of the choice of their own, the others
/// whole.
#[test]
fn sim_bwe_tracks_bottleneck_with_temporal_layers() {
    tracks_bottleneck(1..=10, true);
}

fn tracks_bottleneck(seeds: std::ops::RangeInclusive<u64>, temporal: bool) {
    let top = (RATES.len() - 1) as u8;
    for seed in seeds {
        let got = run(seed, temporal);
        let report = |what: &str| format!("seed {seed}: {what}; streams:{}", timeline(&got));
        assert_eq!(
            only_layer(&got, DROP_AT - Duration::from_secs(2), DROP_AT),
            Some(top),
            "{}",
            report("not on the top stream before the drop")
        );
        let down = settled_on(&got, 0, DROP_AT, RECOVER_AT)
            .unwrap_or_else(|| panic!("{}", report("never on the lowest stream")));
        assert!(
            down <= DROP_AT + DOWN_WITHIN,
            "{}",
            report(&format!("lowest stream only from {down:?}"))
        );
        // Loss after the switch, until the recovery.
        let after: BTreeSet<u64> = got
            .iter()
            .filter(|r| r.at >= DROP_AT + DOWN_WITHIN && r.at < RECOVER_AT)
            .map(|r| r.seq)
            .collect();
        let (first, last) = (*after.first().unwrap(), *after.last().unwrap());
        let expected = last - first + 1;
        let loss = 1.0 - after.len() as f64 / expected as f64;
        assert!(
            loss < 0.02,
            "{}",
            report(&format!("lost {:.2} % after the switch", loss * 100.0))
        );
        let up = settled_on(&got, top, RECOVER_AT, END_AT)
            .unwrap_or_else(|| panic!("{}", report("never back on the top stream")));
        assert!(
            up <= RECOVER_AT + UP_WITHIN,
            "{}",
            report(&format!("top stream only from {up:?}"))
        );
        eprintln!(
            "seed {seed}: lowest stream {:.2} s after the drop, lost {:.2} % after it, top \
             stream {:.2} s after the recovery",
            (down - DROP_AT).as_secs_f64(),
            loss * 100.0,
            (up - RECOVER_AT).as_secs_f64()
        );
        // One continuous stream: no sequence number seen twice (the client reports
        // each once), PictureIDs in order across every switch.
        assert_one_sequence(got.iter().map(|r| r.seq), 0.95, report);
        let mut by_seq: Vec<&Received> = got.iter().collect();
        by_seq.sort_by_key(|r| r.seq);
        for w in by_seq.windows(2) {
            let step = w[1].picture.wrapping_sub(w[0].picture) & 0x7fff;
            // Across a switch with nothing lost between, the next picture; else
            // forward.
            let adjacent = w[0].layer != w[1].layer && w[1].seq == w[0].seq + 1;
            assert!(
                if adjacent { step == 1 } else { step < 0x4000 },
                "{}",
                report(&format!(
                    "PictureID {} then {} at sequence numbers {} and {}",
                    w[0].picture, w[1].picture, w[0].seq, w[1].seq
                ))
            );
        }
    }
}

/// A subscriber's own settings bound what it is sent, over a link with room for the
/// top stream: quality LOW gives the lowest stream; paused, nothing; resumed with a
/// largest picture of 640 × 360, the middle stream (by the pictures' sizes in their
/// keyframes, whatever the offer's order); the bound lifted, the top again.
#[test]
fn sim_subscriber_track_settings_bound_the_stream() {
    use shoal_components::media::TrackSettings;
    let settings = |s: TrackSettings| Command::SetTrackSettings {
        peer: PeerId(2),
        track: TRACK,
        settings: s,
    };
    let s = |t: u64| Duration::from_secs(t);
    let mut done = [false; 4];
    let got = run_script(7, s(36), false, |elapsed, sim| {
        let step = [s(12), s(18), s(22), s(28)]
            .iter()
            .rposition(|t| elapsed >= *t);
        let Some(i) = step.filter(|i| !done[*i]) else {
            return;
        };
        done[i] = true;
        let command = match i {
            0 => settings(TrackSettings {
                max_rank: Some(0),
                ..TrackSettings::default()
            }),
            1 => settings(TrackSettings {
                paused: true,
                max_rank: Some(0),
                ..TrackSettings::default()
            }),
            2 => settings(TrackSettings {
                max_size: Some((640, 360)),
                ..TrackSettings::default()
            }),
            _ => settings(TrackSettings::default()),
        };
        sim.command(addr(SRV), command).unwrap();
    });
    let timeline = timeline(&got);
    assert_eq!(
        only_layer(&got, s(10), s(12)),
        Some(2),
        "top first:{timeline}"
    );
    assert_eq!(only_layer(&got, s(14), s(18)), Some(0), "LOW:{timeline}");
    let during_pause = got
        .iter()
        .filter(|r| r.at >= s(18) + Duration::from_millis(200) && r.at < s(22))
        .count();
    assert_eq!(during_pause, 0, "paused:{timeline}");
    assert_eq!(
        only_layer(&got, s(24), s(28)),
        Some(1),
        "640 × 360 at most:{timeline}"
    );
    assert_eq!(
        only_layer(&got, s(32), s(36)),
        Some(2),
        "unbounded:{timeline}"
    );
}

/// Node B's shard, linked to the publisher's (`SRV`, node A).
const SRV_B: &str = "10.0.0.2:7100";
/// The link between the nodes, and the room it serves.
const LINK: PeerId = PeerId(9);
const LINKED_ROOM: RoomId = RoomId(4);
/// The track as node B publishes it on its side of the link.
const TRACK_B: TrackId = TrackId(8);
/// How long before the drop's end the subscriber behind the link must be on the
/// lowest stream.
const SETTLED: Duration = Duration::from_secs(6);
/// The SSRCs of stream `i` on the link (primary, RTX).
fn link_ssrcs(i: u8) -> (u32, u32) {
    (0x3000 + 2 * u32::from(i), 0x3001 + 2 * u32::from(i))
}

/// A simulcast track crosses a node-to-node link whole, and each subscriber on the
/// other node is sent the stream chosen for it there. The publisher (client 1) sends
/// three streams to node A, whose link peer takes each as a subscription of its own
/// (`SubscriptionSpec::stream`) and sends it to node B on SSRCs of its own; node B
/// publishes the three as one track's streams, as the cluster's LinkTracks does.
/// Subscriber 2 on node B asks for quality LOW (the lowest rank), subscriber 3 has a
/// downlink that steps 3 Mbit/s → 600 kbit/s → 3 Mbit/s, as in
/// `sim_bwe_tracks_bottleneck`. For each seed: subscriber 2 is sent only the lowest
/// stream; subscriber 3 the top one before the drop, only the lowest for the last
/// [`SETTLED`] of the drop (how fast an estimate falls with its path is
/// `sim_bwe_tracks_bottleneck`'s target) and the top again within 10 s of the recovery;
/// both in one continuous sequence; node B took in over the link each packet of each
/// stream once, and its repairs besides.
#[test]
fn sim_simulcast_crosses_a_link_whole() {
    let top = (RATES.len() - 1) as u8;
    for seed in 1..=5 {
        let (low, got, sent, received) = run_across_link(seed);
        let report = |got: &[Received], what: &str| {
            format!("seed {seed}: {what}; streams:{}", timeline(got))
        };
        assert_eq!(
            only_layer(&low, Duration::from_secs(4), END_AT),
            Some(0),
            "{}",
            report(&low, "quality LOW across the link")
        );
        assert_eq!(
            only_layer(&got, DROP_AT - Duration::from_secs(2), DROP_AT),
            Some(top),
            "{}",
            report(&got, "not on the top stream before the drop")
        );
        // How fast the estimate follows the path is the single-node tests' target;
        // here, that the subscriber's own estimate chooses among the streams that
        // crossed.
        let down = settled_on(&got, 0, DROP_AT, RECOVER_AT)
            .unwrap_or_else(|| panic!("{}", report(&got, "never on the lowest stream")));
        assert!(
            down <= RECOVER_AT - SETTLED,
            "{}",
            report(&got, &format!("lowest stream only from {down:?}"))
        );
        let up = settled_on(&got, top, RECOVER_AT, END_AT)
            .unwrap_or_else(|| panic!("{}", report(&got, "never back on the top stream")));
        assert!(
            up <= RECOVER_AT + UP_WITHIN,
            "{}",
            report(&got, &format!("top stream only from {up:?}"))
        );
        for (who, got) in [("LOW", &low), ("bottlenecked", &got)] {
            let report = |what: &str| format!("seed {seed}: {who}: {what}");
            assert_one_sequence(got.iter().map(|r| r.seq), 0.95, report);
        }
        // Every packet of the three streams crossed once: what node B took in is at
        // least what the path let through and at most that and its repairs.
        let (taken, nacks) = received;
        assert!(
            taken >= sent * 97 / 100 && taken <= sent + nacks * 17,
            "seed {seed}: node B took in {taken} packets of the {sent} sent, {nacks} NACKs"
        );
        eprintln!(
            "seed {seed}: lowest stream {:.2} s after the drop, top {:.2} s after the \
             recovery; node B took in {taken} of {sent} packets",
            (down - DROP_AT).as_secs_f64(),
            (up - RECOVER_AT).as_secs_f64()
        );
    }
}

/// One seed's run of [`sim_simulcast_crosses_a_link_whole`]: what subscribers 2 and
/// 3 received, the packets the publisher sent, and the packets node B took in over
/// the link with the NACKs it sent.
fn run_across_link(seed: u64) -> (Vec<Received>, Vec<Received>, u64, (u64, u64)) {
    let (a, b) = (addr(SRV), addr(SRV_B));
    let mut sim = Sim::new(seed);
    sim.add_shard(a);
    sim.add_shard(b);
    for (server, i) in [(a, 1), (b, 2), (b, 3)] {
        sim.add_shard(cli(i));
        sim.set_link_both(server, cli(i), LinkConfig::default());
        sim.connect_dtls(server, cli(i), PeerId(i), DtlsRole::Server)
            .unwrap();
    }
    // A datacenter path between the nodes, with loss, so the link repairs it.
    let between = LinkConfig {
        latency: Duration::from_millis(5),
        jitter: Duration::from_millis(1),
        loss: 0.01,
        ..LinkConfig::default()
    };
    sim.set_link_both(b, a, between);
    sim.connect_link(b, a, LINK, LINKED_ROOM).unwrap();
    sim.run_until(
        |s| {
            [(a, 1), (b, 2), (b, 3)].iter().all(|&(server, i)| {
                s.shard(cli(i)).dtls_connected(PeerId(i))
                    && s.shard(server).dtls_connected(PeerId(i))
            }) && s.shard(a).dtls_connected(LINK)
                && s.shard(b).dtls_connected(LINK)
        },
        Duration::from_secs(60),
    )
    .unwrap_or_else(|e| panic!("seed {seed}: DTLS not up: {e}"));
    sim.set_link(b, cli(3), bottleneck(seed, 3_000_000, 0.002));
    let (mut encoders, track) = simulcast_publisher(&mut sim, seed, false);
    let streams = track.layers.len() as u8;
    sim.command(
        a,
        Command::Publish {
            peer: PeerId(1),
            track: track.clone(),
        },
    )
    .unwrap();
    // Node A's link peer takes each stream on its own; node B publishes them as one
    // track's streams, told apart by their SSRCs on the link.
    let mut on_link = vp8_video(TRACK_B, None, None);
    for i in 0..streams {
        let (ssrc, rtx) = link_ssrcs(i);
        sim.command(
            a,
            Command::Subscribe {
                peer: LINK,
                subscription: SubscriptionSpec {
                    stream: Some(i),
                    ..subscription(TRACK, ssrc, rtx)
                },
            },
        )
        .unwrap();
        on_link.layers.push(LayerSpec {
            rid: None,
            ssrc: Some(ssrc),
            rtx_ssrc: Some(rtx),
        });
    }
    sim.command(
        b,
        Command::Publish {
            peer: LINK,
            track: on_link,
        },
    )
    .unwrap();
    for i in [2, 3] {
        receive_with_feedback(&mut sim, b, i, TRACK_B);
    }
    sim.command(
        b,
        Command::SetTrackSettings {
            peer: PeerId(2),
            track: TRACK_B,
            settings: shoal_components::media::TrackSettings {
                max_rank: Some(0),
                ..Default::default()
            },
        },
    )
    .unwrap();
    let before = sim.shard(b).stats().rtp_received;
    let start = sim.now();
    let mut noise = seed;
    let (mut low, mut got) = (Vec::new(), Vec::new());
    let (mut dropped, mut recovered) = (false, false);
    loop {
        let elapsed = sim.now().saturating_since(start);
        if elapsed >= END_AT {
            break;
        }
        if elapsed >= DROP_AT && !dropped {
            dropped = true;
            sim.set_link(b, cli(3), bottleneck(seed, 600_000, 0.002));
        }
        if elapsed >= RECOVER_AT && !recovered {
            recovered = true;
            sim.set_link(b, cli(3), bottleneck(seed, 3_000_000, 0.002));
        }
        step(&mut sim, &mut encoders, elapsed, &mut noise);
        let at = sim.now().saturating_since(start);
        for (to, r) in take_events(&mut sim, &mut encoders, at) {
            if to == cli(2) {
                low.push(r);
            } else if to == cli(3) {
                got.push(r);
            }
        }
    }
    // What is still on its way.
    let _ = sim.run_for(Duration::from_millis(500));
    let stats = sim.shard(b).stats();
    let sent = encoders.iter().map(|e| e.sent).sum();
    (
        low,
        got,
        sent,
        (stats.rtp_received - before, stats.nacks_sent),
    )
}
