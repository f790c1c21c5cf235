//! The simulator's own behaviour, below the ICE acceptance tests in `tests/sim_ice.rs`.

use super::*;

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn raw(from: SocketAddr, to: SocketAddr, byte: u8) -> Datagram {
    // First byte 0xff: no protocol of RFC 7983, so the shard drops and counts it.
    Datagram {
        local: from,
        remote: to,
        payload: Bytes::from(vec![0xff, byte]),
    }
}

#[test]
fn datagrams_arrive_after_latency_as_one_batch() {
    let (a, b) = (addr("10.0.0.1:1000"), addr("10.0.0.2:2000"));
    let mut sim = Sim::new(1);
    sim.add_shard(b);
    sim.set_link(a, b, LinkConfig::lossy(Duration::from_millis(25), 0.0));
    for i in 0..3 {
        sim.inject(raw(a, b, i));
    }
    assert!(sim.step());
    assert_eq!(sim.now(), Time::ZERO + Duration::from_millis(25));
    let stats = sim.shard(b).stats();
    assert_eq!(stats.datagrams_in, 3);
    assert_eq!(stats.dropped_unknown_class, 3);
    assert_eq!(sim.link_stats(a, b).delivered, 3);
    assert_eq!(sim.link_stats(a, b).last_delivered_at, Some(sim.now()));
    assert!(!sim.step(), "nothing else is scheduled");
}

#[test]
fn undeliverable_datagrams_are_counted() {
    let (a, nowhere) = (addr("10.0.0.1:1000"), addr("10.9.9.9:9"));
    let mut sim = Sim::new(2);
    sim.inject(raw(a, nowhere, 0));
    sim.run_for(Duration::from_secs(1)).unwrap();
    assert_eq!(sim.stats().undeliverable, 1);
    assert_eq!(sim.stats().delivered, 0);
    assert_eq!(sim.now(), Time::ZERO + Duration::from_secs(1));
}

#[test]
fn duplicates_are_delivered_twice() {
    let (a, b) = (addr("10.0.0.1:1000"), addr("10.0.0.2:2000"));
    let mut sim = Sim::new(3);
    sim.add_shard(b);
    sim.set_link(
        a,
        b,
        LinkConfig {
            duplicate: 1.0,
            ..LinkConfig::default()
        },
    );
    sim.inject(raw(a, b, 0));
    sim.run_for(Duration::from_secs(1)).unwrap();
    assert_eq!(sim.shard(b).stats().datagrams_in, 2);
    assert_eq!(sim.stats().duplicated, 1);
}

#[test]
fn run_until_reports_why_it_stopped() {
    let (a, b) = (addr("10.0.0.1:1000"), addr("10.0.0.2:2000"));
    let mut sim = Sim::new(4);
    sim.add_shard(b);
    assert_eq!(
        sim.run_until(|_| false, Duration::from_secs(1)),
        Err(SimError::Idle(Time::ZERO))
    );
    sim.inject(raw(a, b, 0));
    let limit = Time::ZERO + Duration::from_millis(5);
    assert_eq!(
        sim.run_until(|_| false, Duration::from_millis(5)),
        Err(SimError::TimeLimit(limit))
    );
    assert_eq!(sim.now(), limit);
    let got = sim.run_until(|s| s.stats().delivered == 1, Duration::from_secs(1));
    assert_eq!(got, Ok(Time::ZERO + Duration::from_millis(10)));
    sim.inject(raw(a, b, 1));
    sim.set_step_limit(0);
    assert!(matches!(
        sim.run_until(|_| false, Duration::from_secs(1)),
        Err(SimError::StepLimit(0, _))
    ));
}

#[test]
fn shard_mut_output_is_collected() {
    let (server, client) = (addr("10.0.0.1:3478"), addr("10.0.0.2:5000"));
    let mut sim = Sim::new(5);
    sim.add_shard(server);
    sim.add_shard(client);
    let pair = sim.connect_ice(server, client, PeerId(7)).unwrap();
    assert_eq!(pair.client.remote_candidates, vec![server]);
    // Removing the client's peer directly through the shard still surfaces its event.
    let now = sim.now();
    sim.shard_mut(client)
        .command(now, Command::RemovePeer(PeerId(7)))
        .unwrap();
    assert_eq!(
        sim.poll_event(),
        Some((
            client,
            ShardEvent::PeerRemoved {
                peer: PeerId(7),
                reason: RemoveReason::Command
            }
        ))
    );
    assert_eq!(sim.poll_event(), None);
}

#[test]
#[should_panic(expected = "outside [0, 1]")]
fn invalid_probability_is_refused() {
    Sim::new(6).set_default_link(LinkConfig {
        loss: 1.5,
        ..LinkConfig::default()
    });
}
