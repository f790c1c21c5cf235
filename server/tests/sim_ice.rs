//! ICE across the simulated network, seed by seed: an ICE-lite server and a
//! controlling client connect under loss, keep consent fresh, and the server drops
//! the peer once consent lapses. And the simulator itself replays a seed exactly.

use std::net::SocketAddr;
use std::time::Duration;

use shoal_server::sim::{
    IceState, LinkConfig, PeerId, RemoveReason, ShardEvent, Sim, SimError, Time,
};

/// Seeds per run; `SHOAL_SIM_SEEDS=n` soaks with more.
const SEEDS: u64 = 100;
const PEER: PeerId = PeerId(1);

fn server_addr() -> SocketAddr {
    "10.0.0.1:3478".parse().unwrap()
}

fn client_addr(i: u8) -> SocketAddr {
    SocketAddr::from(([10, 0, 1, i], 50_000))
}

/// The events seen so far with the time they happened, gathered after every step
/// (so an event's time is the step's).
#[derive(Default)]
struct Seen(Vec<(Time, SocketAddr, ShardEvent)>);

impl Seen {
    fn gather(&mut self, sim: &mut Sim) {
        let now = sim.now();
        self.0
            .extend(sim.drain_events().map(|(node, e)| (now, node, e)));
    }

    fn connected(&self, node: SocketAddr, remote: SocketAddr) -> bool {
        self.0
            .iter()
            .any(|(_, n, e)| *n == node && *e == ShardEvent::IceConnected { peer: PEER, remote })
    }

    /// When and why `node` removed the peer.
    fn removal(&self, node: SocketAddr) -> Option<(Time, RemoveReason)> {
        self.0.iter().find_map(|(at, n, e)| match e {
            ShardEvent::PeerRemoved { peer, reason } if *n == node && *peer == PEER => {
                Some((*at, *reason))
            }
            _ => None,
        })
    }
}

fn both_connected(sim: &Sim, server: SocketAddr, client: SocketAddr) -> bool {
    sim.shard(server).ice_state(PEER) == Some(IceState::Connected)
        && sim.shard(client).ice_state(PEER) == Some(IceState::Connected)
}

/// One seed of the loss scenario; `Err` says what went wrong and when.
fn lossy_ice_lifecycle(seed: u64) -> Result<(), String> {
    let (server, client) = (server_addr(), client_addr(2));
    let mut sim = Sim::new(seed);
    sim.enable_trace_log(64);
    sim.add_shard(server);
    sim.add_shard(client);
    let lossy = LinkConfig {
        latency: Duration::from_millis(30),
        jitter: Duration::from_millis(5),
        loss: 0.1,
        ..LinkConfig::default()
    };
    sim.set_link_both(server, client, lossy.clone());
    sim.connect_ice(server, client, PEER)
        .map_err(|e| format!("connect_ice: {e}"))?;
    let fail = |sim: &Sim, what: String| format!("{what}\n{}", sim.trace_log());

    // client -> check, server -> response, client -> check + USE-CANDIDATE, server
    // -> response; each leg retransmitted on the 500 ms..3 s RTO ladder as loss needs.
    let mut seen = Seen::default();
    sim.run_until(
        |s| {
            seen.gather(s);
            both_connected(s, server, client)
                && seen.connected(server, client)
                && seen.connected(client, server)
        },
        Duration::from_secs(30),
    )
    .map_err(|e| fail(&sim, format!("not connected: {e}")))?;
    if sim.shard(server).selected_remote(PEER) != Some(client) {
        return Err(fail(&sim, "server selected the wrong remote".into()));
    }

    // Consent: the client's checks every 4-6 s keep the server's consent fresh, and
    // the responses keep the client's, for a minute of 10 % loss.
    let held = sim.run_until(
        |s| {
            seen.gather(s);
            seen.removal(server).is_some() || seen.removal(client).is_some()
        },
        Duration::from_secs(60),
    );
    if !matches!(held, Err(SimError::TimeLimit(_))) || !both_connected(&sim, server, client) {
        let removed = [
            (server, seen.removal(server)),
            (client, seen.removal(client)),
        ];
        return Err(fail(
            &sim,
            format!("lost consent under 10 % loss: {removed:?}"),
        ));
    }

    // Cut the link. RFC 7675 §5.1: consent lapses 30 s after the last valid check.
    sim.set_link_both(server, client, LinkConfig { loss: 1.0, ..lossy });
    sim.run_until(
        |s| {
            seen.gather(s);
            seen.removal(server).is_some() && seen.removal(client).is_some()
        },
        Duration::from_secs(45),
    )
    .map_err(|e| fail(&sim, format!("peers not removed after the cut: {e}")))?;
    for (node, from) in [(server, client), (client, server)] {
        let Some((removed, RemoveReason::ConsentExpired)) = seen.removal(node) else {
            return Err(fail(
                &sim,
                format!("{node} removed for {:?}", seen.removal(node)),
            ));
        };
        let last = sim
            .link_stats(from, node)
            .last_delivered_at
            .ok_or_else(|| fail(&sim, format!("nothing ever reached {node}")))?;
        let after = removed.saturating_since(last);
        if !(Duration::from_secs(30)..=Duration::from_millis(30_010)).contains(&after) {
            return Err(fail(
                &sim,
                format!("{node} removed {after:?} after the last check"),
            ));
        }
    }
    Ok(())
}

#[test]
fn sim_ice_lite_connects_under_loss() {
    let seeds = std::env::var("SHOAL_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(SEEDS);
    let failures: Vec<String> = (0..seeds)
        .filter_map(|seed| {
            lossy_ice_lifecycle(seed)
                .err()
                .map(|e| format!("seed {seed}: {e}"))
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {seeds} seeds failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// A busy, messy network: three clients on one server over links with jitter, loss,
/// duplication, reordering and a rate limit. Returns the trace hash, datagrams
/// delivered and peers connected on the server.
fn messy_scenario(seed: u64) -> (u64, u64, usize) {
    let server = server_addr();
    let clients: Vec<SocketAddr> = (1..=3).map(client_addr).collect();
    let mut sim = Sim::new(seed);
    sim.set_default_link(LinkConfig {
        latency: Duration::from_millis(20),
        jitter: Duration::from_millis(15),
        loss: 0.05,
        duplicate: 0.05,
        reorder: 0.1,
        bandwidth_bps: Some(2_000_000),
        queue_limit_bytes: 16 * 1024,
        tcp_like: false,
    });
    sim.add_shard(server);
    for (i, &client) in clients.iter().enumerate() {
        sim.add_shard(client);
        sim.connect_ice(server, client, PeerId(i as u64 + 1))
            .unwrap();
    }
    let ids: Vec<PeerId> = (1..=3).map(PeerId).collect();
    let all_connected = |s: &mut Sim| {
        ids.iter()
            .all(|&id| s.shard(server).ice_state(id) == Some(IceState::Connected))
    };
    sim.run_until(all_connected, Duration::from_secs(30))
        .unwrap();
    sim.run_for(Duration::from_secs(20)).unwrap();
    let connected = ids
        .iter()
        .filter(|&&id| sim.shard(server).ice_state(id) == Some(IceState::Connected))
        .count();
    (sim.trace_hash(), sim.stats().delivered, connected)
}

#[test]
fn sim_is_deterministic() {
    let (a, delivered, connected) = messy_scenario(7);
    assert!(delivered > 0, "the scenario carried no traffic");
    assert_eq!(connected, 3);
    let (again, delivered_again, _) = messy_scenario(7);
    assert_eq!(a, again, "one seed, two different runs");
    assert_eq!(delivered, delivered_again);
    let (b, _, _) = messy_scenario(8);
    assert_ne!(a, b, "the hash ignores the seed");
    assert_ne!(a, Sim::new(7).trace_hash(), "the hash ignores the traffic");
}
