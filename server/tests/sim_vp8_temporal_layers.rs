//! A VP8 stream of three temporal layers (RFC 7741 §4.2), thinned by shoal to what a
//! subscriber's bottleneck carries, end to end in the simulator. A publisher client
//! sends one VP8 track of 1.2 Mbit/s at 30 frames a second in Chromium's L1T3 pattern
//! (TIDs 0, 2, 1, 2, Y set on frames 1 and 2 of every eight, layers of 40, 20 and
//! 40 % of the rate, a 15-bit PictureID, TL0PICIDX); a server shard forwards it to a
//! subscriber client (shoal's own stack: transport-cc feedback, NACK, RTX) over a
//! link that steps 3 Mbit/s → 600 kbit/s → 3 Mbit/s, with 100 ms of drop-tail queue
//! and 1 % random loss besides. For each of 10 seeds:
//!
//! - before the drop the subscriber receives every layer;
//! - within 3 s of the drop only layers it can carry (0 and at most 1), and from
//!   then until the recovery it loses under 2 % of what it was sent;
//! - within 10 s of the recovery every layer again;
//! - throughout, its sequence numbers form one space with no number twice and its
//!   PictureIDs step by one from frame to frame (libwebrtc holds back a frame after
//!   a missing PictureID), and every packet, retransmissions included, carries the
//!   frame the publisher sent under that PictureID.

mod media_sim;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use media_sim::{
    PT, RECEIVED, SRV, addr, assert_one_sequence, bottleneck, cli, connected_sim, subscription,
    vp8_body, vp8_video,
};
use shoal_components::media::TrackId;
use shoal_components::peer::PeerId;
use shoal_components::rtp::{RtpFields, RtpPacket, RtpWriter};
use shoal_components::tick::ShardEvent;
use shoal_server::sim::LinkConfig;
use shoal_systems::Command;

const TWCC_ID: u8 = 3;
const STEP: Duration = Duration::from_millis(5);
const TRACK: TrackId = TrackId(7);
const SOURCE: TrackId = TrackId(100);
const PUB_SSRC: u32 = 0x1000;
const PUB_RTX: u32 = 0x1001;
const SUB_SSRC: u32 = 0x2004;
const SUB_RTX: u32 = 0x2005;
const RATE: u64 = 900_000;
const FPS: u64 = 30;
const MTU_PAYLOAD: usize = 1100;
const DROP_AT: Duration = Duration::from_secs(10);
const RECOVER_AT: Duration = Duration::from_secs(22);
const END_AT: Duration = Duration::from_secs(34);
const DOWN_WITHIN: Duration = Duration::from_secs(3);
const UP_WITHIN: Duration = Duration::from_secs(10);

/// Chromium's L1T3 pattern: TID and Y of frame `i` of a run from a key frame.
fn pattern(i: u64) -> (u8, bool) {
    match i % 8 {
        0 | 4 => (0, false),
        1 => (2, true),
        2 => (1, true),
        6 => (1, false),
        _ => (2, false),
    }
}

struct Encoder {
    seq: u16,
    timestamp: u32,
    picture: u16,
    tl0: u8,
    /// Frames since the last key frame.
    since_key: u64,
    frame: u32,
    keyframe: bool,
}

impl Encoder {
    /// The packets of the next frame: a VP8 descriptor (X; S on the first; I, L, T
    /// with a 15-bit PictureID, TL0PICIDX, TID and Y), the payload header, then the
    /// frame number and TID.
    fn frame(&mut self, noise: &mut u64) -> Vec<Bytes> {
        if std::mem::take(&mut self.keyframe) {
            self.since_key = 0;
        }
        let key = self.since_key == 0;
        let (tid, sync) = pattern(self.since_key);
        if tid == 0 {
            self.tl0 = self.tl0.wrapping_add(1);
        }
        *noise = noise
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let scale = 0.8 + 0.4 * ((*noise >> 33) as f64 / (1u64 << 31) as f64);
        // 40 % of the rate in a quarter of the frames, 20 % in an eighth, 40 % in
        // half of them.
        let share = [1.6, 1.6, 0.8][usize::from(tid)];
        let mut bytes = (RATE as f64 * share * scale / FPS as f64 / 8.0) as usize;
        if key {
            bytes *= 3;
        }
        let count = bytes.div_ceil(MTU_PAYLOAD).max(1);
        let mut out = Vec::with_capacity(count);
        for i in 0..count {
            let mut payload = BytesMut::new();
            payload.put_u8(if i == 0 { 0x90 } else { 0x80 });
            payload.put_u8(0xe0);
            payload.put_u16(0x8000 | self.picture);
            payload.put_u8(self.tl0);
            payload.put_u8(tid << 6 | if sync || key { 0x20 } else { 0 });
            if i == 0 {
                payload.put_u8(if key { 0x00 } else { 0x01 });
                payload.put_u16(0);
                if key {
                    payload.put_slice(&[0x9d, 0x01, 0x2a]);
                    payload.put_u16_le(640);
                    payload.put_u16_le(360);
                }
            }
            payload.put_u32(self.frame);
            payload.put_u8(tid);
            let size = (bytes / count).clamp(payload.len(), MTU_PAYLOAD);
            payload.resize(size, 0x55);
            let fields = RtpFields {
                marker: i + 1 == count,
                payload_type: PT,
                sequence_number: self.seq,
                timestamp: self.timestamp,
                ssrc: 0xAB00,
            };
            let mut packet = BytesMut::new();
            let mut w = RtpWriter::new(&mut packet, &fields, &[]);
            w.payload(&payload);
            w.finish(0);
            out.push(packet.freeze());
            self.seq = self.seq.wrapping_add(1);
        }
        self.timestamp = self.timestamp.wrapping_add((90_000 / FPS) as u32);
        self.picture = (self.picture + 1) & 0x7fff;
        self.since_key += 1;
        self.frame += 1;
        out
    }
}

struct Received {
    at: Duration,
    seq: u64,
    picture: u16,
    frame: u32,
    tid: u8,
}

fn run(seed: u64) -> Vec<Received> {
    let mut sim = connected_sim(seed, &LinkConfig::default(), 1);
    sim.set_link(addr(SRV), cli(2), bottleneck(seed, 3_000_000, 0.01));
    sim.command(
        cli(1),
        Command::AddSource {
            peer: PeerId(1),
            track: vp8_video(SOURCE, Some(0xAB00), None),
            subscription: subscription(SOURCE, PUB_SSRC, PUB_RTX),
        },
    )
    .unwrap();
    sim.command(
        addr(SRV),
        Command::Publish {
            peer: PeerId(1),
            track: vp8_video(TRACK, Some(PUB_SSRC), Some(PUB_RTX)),
        },
    )
    .unwrap();
    let mut sub = subscription(TRACK, SUB_SSRC, SUB_RTX);
    sub.extensions.transport_cc = Some(TWCC_ID);
    sub.feedback.transport_cc = true;
    sim.command(
        addr(SRV),
        Command::Subscribe {
            peer: PeerId(2),
            subscription: sub,
        },
    )
    .unwrap();
    let mut received = vp8_video(RECEIVED, Some(SUB_SSRC), Some(SUB_RTX));
    received.extensions.transport_cc = Some(TWCC_ID);
    received.feedback.transport_cc = true;
    sim.command(
        cli(2),
        Command::Receive {
            peer: PeerId(2),
            track: received,
        },
    )
    .unwrap();
    let mut encoder = Encoder {
        seq: (seed as u16).wrapping_mul(7919),
        timestamp: (seed as u32).wrapping_mul(104_729),
        picture: (seed as u16).wrapping_mul(331) & 0x7fff,
        tl0: seed as u8,
        since_key: 0,
        frame: 0,
        keyframe: true,
    };
    let start = sim.now();
    let mut next_frame = Duration::ZERO;
    let mut noise = seed;
    let mut got = Vec::new();
    let (mut dropped, mut recovered) = (false, false);
    loop {
        let elapsed = sim.now().saturating_since(start);
        if elapsed >= END_AT {
            break;
        }
        if elapsed >= DROP_AT && !dropped {
            dropped = true;
            sim.set_link(addr(SRV), cli(2), bottleneck(seed, 600_000, 0.01));
        }
        if elapsed >= RECOVER_AT && !recovered {
            recovered = true;
            sim.set_link(addr(SRV), cli(2), bottleneck(seed, 3_000_000, 0.01));
        }
        if elapsed >= next_frame {
            next_frame += Duration::from_micros(1_000_000 / FPS);
            let now = sim.now();
            for p in encoder.frame(&mut noise) {
                sim.shard_mut(cli(1)).send_rtp(now, SOURCE, p).unwrap();
            }
        }
        let _ = sim.run_for(STEP);
        let at = sim.now().saturating_since(start);
        for (_, event) in sim.drain_events() {
            match event {
                ShardEvent::KeyframeRequested { .. } => encoder.keyframe = true,
                ShardEvent::RtpReceived { seq, packet, .. } => {
                    let p = RtpPacket::parse(&packet).unwrap();
                    let (d, body) = vp8_body(p.payload());
                    got.push(Received {
                        at,
                        seq,
                        picture: d.picture_id.unwrap().0,
                        frame: u32::from_be_bytes([body[0], body[1], body[2], body[3]]),
                        tid: body[4],
                    });
                    assert_eq!(d.temporal_id, Some(body[4]), "seed {seed}: TID rewritten");
                }
                _ => {}
            }
        }
    }
    got
}

/// The highest TID received over `[from, to)`, and from when the subscriber received
/// nothing above `tid` until `to`.
fn settled_at_most(got: &[Received], tid: u8, from: Duration, to: Duration) -> Option<Duration> {
    let window: Vec<&Received> = got.iter().filter(|r| r.at >= from && r.at < to).collect();
    match window.iter().rposition(|r| r.tid > tid) {
        None => window.first().map(|r| r.at),
        Some(i) if i + 1 < window.len() => Some(window[i + 1].at),
        Some(_) => None,
    }
}

/// From when the subscriber received every layer (each of them at least once a
/// second) until `to`.
fn every_layer_from(got: &[Received], from: Duration, to: Duration) -> Option<Duration> {
    let mut t = from;
    while t + Duration::from_secs(1) <= to {
        let all = (t.as_millis()..to.as_millis()).step_by(1000).all(|ms| {
            let a = Duration::from_millis(ms as u64);
            let tids: BTreeSet<u8> = got
                .iter()
                .filter(|r| r.at >= a && r.at < a + Duration::from_secs(1))
                .map(|r| r.tid)
                .collect();
            tids.len() == 3
        });
        if all {
            return Some(t);
        }
        t += Duration::from_millis(250);
    }
    None
}

#[test]
fn sim_vp8_temporal_layers() {
    for seed in 1..=10 {
        let got = run(seed);
        let report = |what: &str| {
            let mut timeline = String::new();
            let mut last = None;
            for r in &got {
                if last != Some(r.tid) {
                    timeline += &format!(" {:.2}s→{}", r.at.as_secs_f64(), r.tid);
                    last = Some(r.tid);
                }
            }
            let _ = timeline;
            // Frames received each second, by TID.
            let mut per_second = String::new();
            for k in 0..END_AT.as_secs() {
                let a = Duration::from_secs(k);
                let frames: BTreeSet<(u32, u8)> = got
                    .iter()
                    .filter(|r| r.at >= a && r.at < a + Duration::from_secs(1))
                    .map(|r| (r.frame, r.tid))
                    .collect();
                let by_tid: Vec<usize> = (0..3)
                    .map(|t| frames.iter().filter(|f| f.1 == t).count())
                    .collect();
                per_second += &format!(" {k}s:{by_tid:?}");
            }
            format!("seed {seed}: {what}; frames a second by TID:{per_second}")
        };
        let before = every_layer_from(&got, DROP_AT - Duration::from_secs(3), DROP_AT);
        assert!(
            before.is_some(),
            "{}",
            report("not every layer before the drop")
        );
        let down = settled_at_most(&got, 1, DROP_AT, RECOVER_AT)
            .unwrap_or_else(|| panic!("{}", report("never thinned")));
        assert!(
            down <= DROP_AT + DOWN_WITHIN,
            "{}",
            report(&format!("thinned from {down:?}"))
        );
        let after: BTreeSet<u64> = got
            .iter()
            .filter(|r| r.at >= DROP_AT + DOWN_WITHIN && r.at < RECOVER_AT)
            .map(|r| r.seq)
            .collect();
        let (first, last) = (*after.first().unwrap(), *after.last().unwrap());
        let loss = 1.0 - after.len() as f64 / (last - first + 1) as f64;
        assert!(
            loss < 0.02,
            "{}",
            report(&format!("lost {:.2} %", loss * 100.0))
        );
        let up = every_layer_from(&got, RECOVER_AT, END_AT)
            .unwrap_or_else(|| panic!("{}", report("never every layer again")));
        assert!(
            up <= RECOVER_AT + UP_WITHIN,
            "{}",
            report(&format!("every layer from {up:?}"))
        );
        eprintln!(
            "seed {seed}: layers ≤ 1 {:.2} s after the drop, lost {:.2} % after it, every \
             layer {:.2} s after the recovery, {} packets",
            (down - DROP_AT).as_secs_f64(),
            loss * 100.0,
            (up - RECOVER_AT).as_secs_f64(),
            got.len()
        );
        // One space of sequence numbers, none twice.
        assert_one_sequence(got.iter().map(|r| r.seq), 0.97, report);
        // A PictureID names one frame, and frames received step by one PictureID.
        let mut frames: BTreeMap<u32, u16> = BTreeMap::new();
        let mut pictures: BTreeMap<u16, u32> = BTreeMap::new();
        for r in &got {
            let f = *frames.entry(r.frame).or_insert(r.picture);
            let p = *pictures.entry(r.picture).or_insert(r.frame);
            assert!(
                f == r.picture && p == r.frame,
                "{}",
                report(&format!(
                    "frame {} under PictureIDs {f} and {}, or PictureID {} for frames {p} and {}",
                    r.frame, r.picture, r.picture, r.frame
                ))
            );
        }
        let mut by_frame: Vec<(u32, u16)> = frames.into_iter().collect();
        by_frame.sort_unstable();
        let gaps = by_frame
            .windows(2)
            .filter(|w| w[1].1.wrapping_sub(w[0].1) & 0x7fff != 1)
            .count();
        // A frame lost whole (every packet of it, and its retransmissions) is a
        // gap the receiver sees as well; rare at 1 % loss.
        assert!(
            gaps * 100 <= by_frame.len(),
            "{}",
            report(&format!(
                "{gaps} PictureID gaps over {} frames",
                by_frame.len()
            ))
        );
    }
}
