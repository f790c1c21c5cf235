//! shoal's send-side estimate of the path to a subscriber, end to end in the
//! simulator: a publisher client sends video to a server shard, which forwards it to
//! a subscriber client over a link of fixed rate with a drop-tail queue, stamping its
//! transport-wide sequence numbers; the subscriber (shoal's own client stack)
//! reports their arrival in transport-cc feedback every 50 ms; the server's
//! estimator (draft-ietf-rmcat-gcc-02) reads it. The publisher plays an encoder that
//! follows the estimate (5 % above it, as a probe would), as a layer choice will:
//! once settled, every estimate sampled over the last 5 s lies within ±20 % of the
//! link's rate, over 5 seeds and two rates.
//!
//! With a publisher that sends whole frames at once, the pacer's bursts follow what
//! the subscriber's feedback shows drained: on a 3 Mbit/s link 5 ms of the pacing
//! rate at once, on a 1 Gbit/s one the whole 40 ms.
//!
//! A stream above the estimate that shoal cannot thin is probed for.

mod media_sim;

use std::time::Duration;

use bytes::{BufMut, BytesMut};
use media_sim::{
    PT, RECEIVED, SOURCE, SRV, TRACK, addr, cli, connected_sim, nack_feedback, publish_source,
    subscription, track_spec,
};
use shoal_components::congestion::bursts::GROWTH;
use shoal_components::congestion::pacer::{BURST_TIME, DEFAULT_BURST, bytes_in};
use shoal_components::media::{SubscriptionSpec, TrackSpec};
use shoal_components::peer::PeerId;
use shoal_components::rtp::{RtpFields, RtpWriter};
use shoal_server::sim::LinkConfig;
use shoal_systems::Command;
use shoal_systems::shard::CongestionReport;

/// The transport-wide extension's id on both sides of the subscriber's session.
const TWCC_ID: u8 = 3;
/// Payload of each video packet.
const PAYLOAD: usize = 1100;
const STEP: Duration = Duration::from_millis(5);

fn with_twcc_sub(mut s: SubscriptionSpec) -> SubscriptionSpec {
    s.extensions.transport_cc = Some(TWCC_ID);
    s.feedback.transport_cc = true;
    s
}

fn with_twcc_track(mut t: TrackSpec) -> TrackSpec {
    t.extensions.transport_cc = Some(TWCC_ID);
    t.feedback.transport_cc = true;
    t
}

/// What the publisher sends.
#[derive(Clone, Copy)]
enum Encoder {
    /// 5 % above the estimate, as evenly as the 5 ms steps allow.
    FollowsEstimate,
    /// Frames of this many bit/s, 30 a second, each frame's packets at once.
    Frames(u64),
}

/// What one run sampled.
struct Run {
    /// Estimates every 100 ms over the last 5 s.
    estimates: Vec<u64>,
    /// Every 5 ms from the first feedback on: (estimate, the pacer's burst, bytes).
    bursts: Vec<(u64, i64)>,
    /// The server's last report on the subscriber.
    report: CongestionReport,
}

/// Runs one seed over a subscriber link of `link_bps` for `secs` seconds.
fn run(seed: u64, link_bps: u64, secs: u64, encoder: Encoder) -> Run {
    let mut sim = connected_sim(seed, &LinkConfig::default(), 1);
    // The subscriber's downlink: its rate, 100 ms of queue.
    sim.set_link(
        addr(SRV),
        cli(2),
        LinkConfig {
            bandwidth_bps: Some(link_bps),
            queue_limit_bytes: (link_bps / 80) as usize,
            ..LinkConfig::default()
        },
    );
    publish_source(&mut sim, cli(1), addr(SRV), TRACK);
    let (ssrc, rtx) = (0x2004, 0x2005);
    sim.command(
        addr(SRV),
        Command::Subscribe {
            peer: PeerId(2),
            subscription: with_twcc_sub(subscription(TRACK, ssrc, rtx)),
        },
    )
    .unwrap();
    let mut received = track_spec(RECEIVED, ssrc, rtx);
    received.feedback = nack_feedback();
    sim.command(
        cli(2),
        Command::Receive {
            peer: PeerId(2),
            track: with_twcc_track(received),
        },
    )
    .unwrap();

    let start = sim.now();
    let mut seq: u16 = 0;
    let mut credit = 0.0f64;
    let mut samples = Vec::new();
    let mut bursts = Vec::new();
    let mut next_sample = Duration::from_secs(secs - 5);
    loop {
        let elapsed = sim.now().saturating_since(start);
        if elapsed >= Duration::from_secs(secs) {
            break;
        }
        let report = sim.shard(addr(SRV)).congestion(PeerId(2)).unwrap();
        let estimate = report
            .estimate_bps
            .unwrap_or(shoal_components::congestion::INITIAL_ESTIMATE_BPS as u64);
        if report.estimate_bps.is_some() {
            bursts.push((estimate, report.pacer_burst_bytes));
        }
        if elapsed >= next_sample {
            samples.push(estimate);
            next_sample += Duration::from_millis(100);
        }
        let packets = |bps: f64| bps * STEP.as_secs_f64() / (PAYLOAD as f64 * 8.0);
        match encoder {
            Encoder::FollowsEstimate => credit += packets(estimate as f64 * 1.05),
            Encoder::Frames(bps) => {
                // A frame is due when the step crosses a 1/30 s boundary.
                let frame = Duration::from_secs(1) / 30;
                if elapsed.as_nanos() / frame.as_nanos()
                    != (elapsed + STEP).as_nanos() / frame.as_nanos()
                {
                    credit += packets(bps as f64) * (frame.as_secs_f64() / STEP.as_secs_f64());
                }
            }
        }
        while credit >= 1.0 {
            credit -= 1.0;
            let now = sim.now();
            sim.shard_mut(cli(1))
                .send_rtp(now, SOURCE, packet(seq))
                .unwrap();
            seq = seq.wrapping_add(1);
        }
        let _ = sim.run_for(STEP);
    }
    let report = sim.shard(addr(SRV)).congestion(PeerId(2)).unwrap();
    assert!(report.feedback_received > 0, "seed {seed}: {report:?}");
    assert!(report.stamped > 0, "seed {seed}: {report:?}");
    Run {
        estimates: samples,
        bursts,
        report,
    }
}

/// The estimates not in `range`.
fn outside(estimates: &[u64], range: std::ops::RangeInclusive<u64>) -> Vec<u64> {
    estimates
        .iter()
        .copied()
        .filter(|e| !range.contains(e))
        .collect()
}

fn packet(i: u16) -> bytes::Bytes {
    let mut payload = BytesMut::new();
    payload.put_u16(i);
    payload.put_bytes(i as u8, PAYLOAD - 2);
    let mut out = BytesMut::new();
    let fields = RtpFields {
        marker: i % 4 == 3,
        payload_type: PT,
        sequence_number: i,
        timestamp: u32::from(i / 4) * 3000,
        ssrc: 0xABCD,
    };
    let mut w = RtpWriter::new(&mut out, &fields, &[]);
    w.payload(&payload);
    w.finish(0);
    out.freeze()
}

#[test]
fn sim_bwe_estimate_follows_the_link() {
    for link in [600_000u64, 3_000_000] {
        for seed in 1..=5 {
            let samples = run(seed, link, 30, Encoder::FollowsEstimate).estimates;
            let (low, high) = (link * 8 / 10, link * 12 / 10);
            let outside = outside(&samples, low..=high);
            assert!(
                outside.is_empty(),
                "link {link}, seed {seed}: estimates outside [{low}, {high}]: {outside:?}\nall: {samples:?}"
            );
        }
    }
}

#[test]
fn sim_pacer_bursts_as_the_path_drains() {
    let video = Encoder::Frames(1_000_000);
    for seed in 1..=3 {
        // Near its capacity (two packets take 3.2 ms on it, a frame of 4 kB 11 ms):
        // no burst crosses within 2.5 ms, and at no time does the pacer send more
        // than 5 ms of its rate at once.
        let run_ = run(seed, 3_000_000, 20, video);
        let r = &run_.report;
        assert_eq!(r.earned_burst_bytes, None, "seed {seed}: {r:?}");
        for &(estimate, burst) in &run_.bursts {
            let five_ms = bytes_in(estimate * 12 / 10, BURST_TIME).max(1500);
            assert!(burst <= five_ms, "seed {seed}: {burst} at {estimate} bit/s");
        }
        // Far from it: whole frames cross at once, and over the last 5 s the
        // pacer's burst is the whole 40 ms of its rate (or what the path earned,
        // if less).
        let run_ = run(seed, 1_000_000_000, 20, video);
        let r = &run_.report;
        let earned = r.earned_burst_bytes.unwrap_or(0);
        assert!(earned >= GROWTH * 3_000, "seed {seed}: {r:?}");
        let last = &run_.bursts[run_.bursts.len() - 1000..];
        for &(estimate, burst) in last {
            let whole = bytes_in(estimate * 9 / 10, DEFAULT_BURST).min(earned);
            let five_ms = bytes_in(estimate * 12 / 10, BURST_TIME).max(1500);
            assert!(
                burst >= whole && burst > five_ms,
                "seed {seed}: {burst}: {r:?}"
            );
        }
    }
}

/// A subscriber sent more than its estimate by streams shoal cannot thin (no
/// simulcast, no temporal layers: a room of ten at 400 kbit/s each is 3.6 Mbit/s
/// against the initial 1 Mbit/s) is probed: on a fast path the estimate covers the
/// stream within 3 s, where growing at 8 % a second from what arrives takes some
/// 18 s and the pacer holds the difference back; on a path a little wider than the
/// stream the estimate covers it and stays; on a path narrower than the stream,
/// the probes find no more than the path carries, and stop once over-use or loss
/// has cut the estimate.
#[test]
fn sim_probe_when_sent_more_than_estimated() {
    let video = Encoder::Frames(4_000_000);
    for seed in 1..=3 {
        let run_ = run(seed, 1_000_000_000, 8, video);
        let r = &run_.report;
        assert!(r.probe_clusters > 0, "seed {seed}: {r:?}");
        // Sampled every 5 ms from the first feedback; 3 s is 600 samples.
        let at_3s = run_.bursts.get(600).map(|b| b.0);
        assert!(
            at_3s.is_some_and(|e| e >= 4_000_000),
            "seed {seed}: {at_3s:?} at 3 s: {r:?}"
        );
        // A path a third wider than the stream: the estimate covers it and stays.
        let run_ = run(seed, 5_300_000, 20, video);
        let under = outside(&run_.estimates, 4_000_000..=u64::MAX);
        assert!(
            under.is_empty(),
            "seed {seed}: under the stream: {under:?}: {:?}",
            run_.report
        );
        // A path narrower than the stream: the probes find no more than it
        // carries, and stop once the estimate is cut.
        let run_ = run(seed, 3_000_000, 30, video);
        let high = 3_000_000 * 12 / 10;
        let over = outside(&run_.estimates, 0..=high);
        assert!(
            over.is_empty(),
            "seed {seed}: over {high}: {over:?}: {:?}",
            run_.report
        );
        assert!(
            run_.report.probe_clusters <= 3,
            "seed {seed}: {:?}",
            run_.report
        );
    }
}
