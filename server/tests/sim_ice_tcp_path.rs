//! A peer on an ICE-TCP path, in the simulator: the driver frames datagrams onto a
//! TCP stream, so the shard sees a path that loses, duplicates and reorders nothing
//! but stalls behind each retransmission (`LinkConfig::tcp_like`). ICE, DTLS and SCTP
//! come up over it as over UDP, and reliable messages arrive exactly once and in
//! order, with the wire losing 10 % of the segments.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use shoal_components::dtls::DtlsRole;
use shoal_components::peer::PeerId;
use shoal_components::sctp::tx::Reliability;
use shoal_components::tick::ShardEvent;
use shoal_server::sim::{LinkConfig, Sim};

const SRV: &str = "10.0.0.1:7200";
const CLI: &str = "10.0.0.2:50000";
const MESSAGES: u32 = 200;

fn addr(s: &str) -> SocketAddr {
    s.parse().expect("an address")
}

#[test]
fn sim_ice_tcp_path_carries_a_session_in_order() {
    let mut retransmitted = 0;
    for seed in 0..50 {
        let mut sim = Sim::new(seed);
        sim.add_shard(addr(SRV));
        sim.add_shard(addr(CLI));
        let latency = Duration::from_millis(10 + (seed % 5) * 20);
        sim.set_link_both(addr(SRV), addr(CLI), LinkConfig::tcp_like(latency, 0.1));
        let id = PeerId(1);
        sim.connect_dtls(addr(SRV), addr(CLI), id, DtlsRole::Server)
            .expect("connect");
        sim.run_until(
            |s| s.shard(addr(SRV)).sctp_established(id) && s.shard(addr(CLI)).sctp_established(id),
            Duration::from_secs(60),
        )
        .unwrap_or_else(|_| panic!("seed {seed}: no association"));
        sim.drain_events().count();
        for i in 0..MESSAGES {
            sim.shard_mut(addr(CLI))
                .sctp_send(id, 1, 53, message(i), false, Reliability::Reliable)
                .expect("queued");
        }
        let mut got = Vec::new();
        sim.run_until(
            |s| {
                for (node, e) in s.drain_events() {
                    if let ShardEvent::SctpMessage { payload, .. } = e
                        && node == addr(SRV)
                    {
                        got.push(payload);
                    }
                }
                got.len() >= MESSAGES as usize
            },
            Duration::from_secs(120),
        )
        .unwrap_or_else(|_| panic!("seed {seed}: {} of {MESSAGES} messages", got.len()));
        let want: Vec<Bytes> = (0..MESSAGES).map(message).collect();
        assert_eq!(got, want, "seed {seed}: exactly once, in order");
        let wire = sim.stats();
        assert_eq!(
            (wire.lost, wire.reordered, wire.duplicated),
            (0, 0, 0),
            "seed {seed}: {wire:?}"
        );
        retransmitted += wire.retransmitted;
    }
    // The wire did lose segments (10 %): the stream hid every loss.
    assert!(
        retransmitted > 100,
        "{retransmitted} retransmissions in all"
    );
}

/// Message `i`: 1 000 bytes that say which message they are.
fn message(i: u32) -> Bytes {
    let mut m = vec![(i % 251) as u8; 1_000];
    m[..4].copy_from_slice(&i.to_be_bytes());
    Bytes::from(m)
}
