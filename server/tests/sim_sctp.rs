//! SCTP through whole shards in the simulated network: ICE, DTLS, then an
//! association, and user messages on it under loss, reordering and duplication.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use shoal_components::dtls::DtlsRole;
use shoal_components::peer::PeerId;
use shoal_components::sctp::tx::Reliability;
use shoal_components::tick::ShardEvent;
use shoal_server::sim::{LinkConfig, Sim};

const SRV: &str = "10.0.0.1:7100";
const CLI: &str = "10.0.0.2:50000";

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// Seeds to run: 1 000 by default (what CI runs); `SHOAL_SIM_SEEDS` for more (3 000
/// pass).
fn seeds() -> u64 {
    std::env::var("SHOAL_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1000)
}

/// A message whose bytes say which message it is and where in it they are.
fn message(i: u32, len: usize) -> Bytes {
    (0..len)
        .map(|k| (i as usize * 31 + k * 7) as u8)
        .collect::<Vec<u8>>()
        .into()
}

#[test]
fn sim_reliable_ordered_exactly_once() {
    let mut failures = Vec::new();
    for seed in 0..seeds() {
        let mut sim = Sim::new(seed);
        sim.add_shard(addr(SRV));
        sim.add_shard(addr(CLI));
        let loss = (seed % 5) as f64 * 0.05; // 0-20 %
        let latency = Duration::from_millis(5 + (seed % 20) * 5); // 5-100 ms
        let link = LinkConfig {
            latency,
            jitter: latency / 4,
            loss,
            duplicate: 0.02,
            reorder: 0.05,
            ..LinkConfig::default()
        };
        sim.set_link_both(addr(SRV), addr(CLI), link);
        let id = PeerId(1);
        let role = if seed % 2 == 0 {
            DtlsRole::Server
        } else {
            DtlsRole::Client
        };
        sim.connect_dtls(addr(SRV), addr(CLI), id, role).unwrap();
        let up = sim.run_until(
            |s| s.shard(addr(SRV)).sctp_established(id) && s.shard(addr(CLI)).sctp_established(id),
            Duration::from_secs(120),
        );
        if up.is_err() {
            failures.push(format!("seed {seed}: no association by {:?}", sim.now()));
            continue;
        }
        sim.drain_events().count();
        // Sizes from 1 B to 256 KiB (0-byte messages are the data channel layer's
        // business: RFC 8831 §6.6 sends them as one byte with an "empty" PPID).
        let sizes: Vec<usize> = (0..12u32)
            .map(|i| match i % 6 {
                0 => 1,
                1 => 100,
                2 => 1_200,
                3 => 5_000,
                4 => 65_536,
                _ => 256 * 1024 - (i as usize),
            })
            .collect();
        for (i, &len) in sizes.iter().enumerate() {
            sim.shard_mut(addr(CLI))
                .sctp_send(
                    id,
                    1,
                    53,
                    message(i as u32, len),
                    false,
                    Reliability::Reliable,
                )
                .unwrap();
        }
        let mut got: Vec<Bytes> = Vec::new();
        let done = sim.run_until(
            |s| {
                for (node, e) in s.drain_events() {
                    if let (
                        true,
                        ShardEvent::SctpMessage {
                            stream: 1,
                            ppid: 53,
                            payload,
                            ..
                        },
                    ) = (node == addr(SRV), e)
                    {
                        got.push(payload);
                    }
                }
                got.len() >= sizes.len()
            },
            Duration::from_secs(600),
        );
        if done.is_err() {
            failures.push(format!(
                "seed {seed} (loss {loss}, {latency:?}): {} of {} messages by {:?}",
                got.len(),
                sizes.len(),
                sim.now()
            ));
            continue;
        }
        // Exactly once and in order: the i-th delivery is the i-th message, intact.
        for (i, m) in got.iter().enumerate() {
            if *m != message(i as u32, sizes[i]) {
                failures.push(format!(
                    "seed {seed}: message {i} wrong ({} bytes)",
                    m.len()
                ));
                break;
            }
        }
        // Nothing more arrives afterwards (no duplicate delivery).
        sim.run_for(Duration::from_secs(5)).ok();
        let extra = sim
            .drain_events()
            .filter(|(n, e)| *n == addr(SRV) && matches!(e, ShardEvent::SctpMessage { .. }))
            .count();
        if extra != 0 {
            failures.push(format!("seed {seed}: {extra} extra deliveries"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// A steady stream of reliable ordered messages under loss: a chunk lost and lost
/// again when fast-retransmitted is left to T3-rtx, which the SACKs for the chunks
/// after it must not keep pushing back (RFC 9260 §6.3.2 R3 restarts it only when the
/// earliest outstanding TSN is acknowledged). Were they to, the stream would stall
/// until the sender ran out of new data. Every message is delivered within a few
/// back-offs (RTO.Min 400 ms, the back-off capped at 3 s) of being sent.
#[test]
fn sim_lost_head_is_retransmitted_while_later_data_flows() {
    const MESSAGES: u32 = 1_000;
    const EVERY: Duration = Duration::from_millis(20);
    const BOUND: Duration = Duration::from_secs(4);
    let mut failures = Vec::new();
    let mut worst_overall = Duration::ZERO;
    for seed in 0..12u64 {
        let mut sim = Sim::new(seed);
        sim.add_shard(addr(SRV));
        sim.add_shard(addr(CLI));
        let link = LinkConfig {
            latency: Duration::from_millis(20),
            loss: 0.05,
            ..LinkConfig::default()
        };
        sim.set_link_both(addr(SRV), addr(CLI), link);
        let id = PeerId(1);
        sim.connect_dtls(addr(SRV), addr(CLI), id, DtlsRole::Server)
            .unwrap();
        let up = sim.run_until(
            |s| s.shard(addr(SRV)).sctp_established(id) && s.shard(addr(CLI)).sctp_established(id),
            Duration::from_secs(120),
        );
        if up.is_err() {
            failures.push(format!("seed {seed}: no association"));
            continue;
        }
        sim.drain_events().count();
        let mut sent_at = Vec::new();
        let mut seen = Delivered::default();
        for i in 0..MESSAGES {
            sent_at.push(sim.now());
            sim.shard_mut(addr(SRV))
                .sctp_send(id, 1, 53, message(i, 1_000), false, Reliability::Reliable)
                .unwrap();
            sim.run_for(EVERY).unwrap();
            seen.take(&mut sim, &sent_at);
        }
        let _ = sim.run_until(
            |s| seen.take(s, &sent_at) >= MESSAGES as usize,
            Duration::from_secs(60),
        );
        let Delivered { got, worst } = seen;
        worst_overall = worst_overall.max(worst);
        if got < MESSAGES as usize || worst > BOUND {
            failures.push(format!(
                "seed {seed}: {got} of {MESSAGES} delivered, the slowest after {worst:?}"
            ));
        }
    }
    eprintln!("slowest delivery over every seed: {worst_overall:?}");
    assert!(
        failures.is_empty(),
        "{failures:#?} (slowest anywhere {worst_overall:?})"
    );
}

/// What the client delivered on stream 1, and the longest a message took.
#[derive(Default)]
struct Delivered {
    got: usize,
    worst: Duration,
}

impl Delivered {
    /// Counts the deliveries since the last call (message i was sent at
    /// `sent_at[i]`); returns how many so far.
    fn take(&mut self, sim: &mut Sim, sent_at: &[shoal_components::time::Time]) -> usize {
        let now = sim.now();
        for (node, e) in sim.drain_events() {
            if node == addr(CLI) && matches!(e, ShardEvent::SctpMessage { stream: 1, .. }) {
                if let Some(at) = sent_at.get(self.got) {
                    self.worst = self.worst.max(now.saturating_since(*at));
                }
                self.got += 1;
            }
        }
        self.got
    }
}

/// RFC 9260 §7.2.4 rule 4: a fast retransmission of the earliest outstanding chunk
/// restarts T3-rtx. On a 300 ms round trip with RTO at its 400 ms floor, the timer
/// started when the chunk was first sent would expire before the fast
/// retransmission's SACK is back: a needless expiry that collapses cwnd to one packet
/// and sends everything outstanding again.
#[test]
fn sim_fast_retransmit_of_the_head_restarts_t3() {
    let mut sim = Sim::new(7);
    sim.add_shard(addr(SRV));
    sim.add_shard(addr(CLI));
    let link = LinkConfig {
        latency: Duration::from_millis(150),
        ..LinkConfig::default()
    };
    sim.set_link_both(addr(SRV), addr(CLI), link);
    let id = PeerId(1);
    sim.connect_dtls(addr(SRV), addr(CLI), id, DtlsRole::Server)
        .unwrap();
    sim.run_until(
        |s| s.shard(addr(SRV)).sctp_established(id) && s.shard(addr(CLI)).sctp_established(id),
        Duration::from_secs(60),
    )
    .expect("an association");
    // Round trips to settle SRTT at 300 ms and RTTVAR low: RTO sits at RTO.Min.
    // Two packets each time, so that the receiver acknowledges at once rather than
    // after its SACK delay.
    for i in 0..40 {
        for k in 0..2 {
            sim.shard_mut(addr(SRV))
                .sctp_send(
                    id,
                    1,
                    53,
                    message(i * 2 + k, 1_100),
                    false,
                    Reliability::Reliable,
                )
                .unwrap();
        }
        sim.run_for(Duration::from_millis(400)).unwrap();
    }
    sim.drain_events().count();
    let before = sim.shard(addr(SRV)).stats().sctp_t3_expiries;
    // Five packets; the first is lost, once.
    let mut dropped = false;
    sim.set_drop_filter(
        addr(SRV),
        addr(CLI),
        Some(Box::new(move |_, datagram: &[u8]| {
            let drop = !dropped && datagram.len() > 1_000;
            dropped |= drop;
            drop
        })),
    );
    // Spaced, so that each arrives alone and draws its own SACK: three of them
    // report the first missing, which fast-retransmits it.
    for i in 100..105 {
        sim.shard_mut(addr(SRV))
            .sctp_send(id, 1, 53, message(i, 1_100), false, Reliability::Reliable)
            .unwrap();
        sim.run_for(Duration::from_millis(10)).unwrap();
    }
    let mut got = 0;
    sim.run_until(
        |s| {
            got += s
                .drain_events()
                .filter(|(n, e)| *n == addr(CLI) && matches!(e, ShardEvent::SctpMessage { .. }))
                .count();
            got == 5
        },
        Duration::from_secs(10),
    )
    .expect("all five delivered");
    sim.run_for(Duration::from_secs(2)).unwrap();
    let expiries = sim.shard(addr(SRV)).stats().sctp_t3_expiries - before;
    assert_eq!(
        expiries, 0,
        "T3-rtx expired though the fast retransmission got through"
    );
}
