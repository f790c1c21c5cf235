//! shoal's send-side estimate of the path to a subscriber, end to end in the
//! simulator: a publisher client sends video to a server shard, which forwards it to
//! a subscriber client over a link of fixed rate with a drop-tail queue, stamping its
//! transport-wide sequence numbers; the subscriber (shoal's own client stack)
//! reports their arrival in transport-cc feedback every 50 ms; the server's
//! estimator (draft-ietf-rmcat-gcc-02) reads it. The publisher plays an encoder that
//! follows the estimate (5 % above it, as a probe would), as a layer choice will:
//! once settled, every estimate sampled over the last 5 s lies within ±20 % of the
//! link's rate, over 5 seeds and two rates.

mod media_sim;

use std::time::Duration;

use bytes::{BufMut, BytesMut};
use media_sim::{
    PT, RECEIVED, SOURCE, SRV, TRACK, addr, cli, connected_sim, nack_feedback, publish_source,
    subscription, track_spec,
};
use shoal_components::media::{SubscriptionSpec, TrackSpec};
use shoal_components::peer::PeerId;
use shoal_components::rtp::{RtpFields, RtpWriter};
use shoal_server::sim::LinkConfig;
use shoal_systems::Command;

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

/// Runs one seed over a subscriber link of `link_bps`; returns the estimates
/// sampled every 100 ms over the last 5 of `secs` seconds.
fn run(seed: u64, link_bps: u64, secs: u64) -> Vec<u64> {
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
        if elapsed >= next_sample {
            samples.push(estimate);
            next_sample += Duration::from_millis(100);
        }
        // The encoder: 5 % above the estimate, in whole packets.
        credit += estimate as f64 * 1.05 * STEP.as_secs_f64() / (PAYLOAD as f64 * 8.0);
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
    samples
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
            let samples = run(seed, link, 30);
            let (low, high) = (link * 8 / 10, link * 12 / 10);
            let outside: Vec<u64> = samples
                .iter()
                .copied()
                .filter(|e| !(low..=high).contains(e))
                .collect();
            assert!(
                outside.is_empty(),
                "link {link}, seed {seed}: estimates outside [{low}, {high}]: {outside:?}\nall: {samples:?}"
            );
        }
    }
}
