//! One room cascaded over three shoal nodes in the simulated network, each pair of
//! nodes joined by one link (`Sim::connect_link`, a `PeerSpec::link` peer on each
//! side): node A of two shards, nodes B and C of one each, and a member on every
//! shard. Every member's data-channel messages reach every other member once and in
//! order, crossing one link at most (a message that came in on a link never goes
//! out on another, also from a sibling shard), and one member's video reaches the
//! members of the other nodes over the links, each track crossing each link once,
//! with NACKs answered and lost packets repaired across them.

mod media_sim;
mod room;

use std::net::SocketAddr;
use std::time::Duration;

use media_sim::{
    PUB_RTX, PUB_SSRC, SOURCE, intact, packet, publish_source, subscribe_and_receive, subscription,
    track_spec,
};
use room::{Log, cli, join, open_from_client, send_range};
use shoal_components::media::TrackId;
use shoal_components::peer::PeerId;
use shoal_components::room::RoomId;
use shoal_components::rtp::RtpPacket;
use shoal_components::sctp::dcep::{ChannelType, Reliability};
use shoal_server::sim::{LinkConfig, Sim};
use shoal_systems::Command;

const ROOM: RoomId = RoomId(5);
const RELIABLE: ChannelType = ChannelType {
    ordered: true,
    reliability: Reliability::Reliable,
};
/// Messages each member sends.
const N: u32 = 50;
/// Video packets member 1 sends, one per 10 ms.
const PACKETS: u16 = 300;
/// Member 1's track on node A, and what nodes B and C publish it as on their links.
const TRACK_A: TrackId = TrackId(70);
const TRACK_B: TrackId = TrackId(80);
const TRACK_C: TrackId = TrackId(90);
/// The links: A0–B0, A1–C0 and B0–C0 (the first address of each is the lite side).
const LINK_AB: PeerId = PeerId(101);
const LINK_AC: PeerId = PeerId(102);
const LINK_BC: PeerId = PeerId(103);
/// The SSRCs each link's sending side gives member 1's video (primary, RTX).
const SSRCS_AB: (u32, u32) = (0x7000, 0x7001);
const SSRCS_AC: (u32, u32) = (0x7100, 0x7101);

fn a0() -> SocketAddr {
    "10.9.0.1:7100".parse().unwrap()
}
fn a1() -> SocketAddr {
    "10.9.0.2:7100".parse().unwrap()
}
fn b0() -> SocketAddr {
    "10.9.1.1:7100".parse().unwrap()
}
fn c0() -> SocketAddr {
    "10.9.2.1:7100".parse().unwrap()
}

/// Member `i`'s shard.
fn home(i: u64) -> SocketAddr {
    match i {
        1 => a0(),
        2 => a1(),
        3 => b0(),
        _ => c0(),
    }
}

/// The links as (lite shard, controlling shard, peer).
fn links() -> [(SocketAddr, SocketAddr, PeerId); 3] {
    [
        (a0(), b0(), LINK_AB),
        (c0(), a1(), LINK_AC),
        (c0(), b0(), LINK_BC),
    ]
}

/// Three nodes, four members and three links, all connected.
fn cascade(seed: u64, member: &LinkConfig, between_nodes: &LinkConfig) -> Sim {
    let mut sim = Sim::new(seed);
    sim.add_node(&[a0(), a1()]);
    sim.add_node(&[b0()]);
    sim.add_node(&[c0()]);
    for i in 1..=4 {
        join(&mut sim, home(i), i, ROOM, member);
    }
    sim.shard_mut(a0()).set_room_siblings(ROOM, &[1]);
    sim.shard_mut(a1()).set_room_siblings(ROOM, &[0]);
    for (lite, controlling, id) in links() {
        sim.set_link_both(lite, controlling, between_nodes.clone());
        sim.connect_link(lite, controlling, id, ROOM).unwrap();
    }
    sim.run_until(
        |s| {
            (1..=4).all(|i| {
                s.shard(home(i)).sctp_established(PeerId(i))
                    && s.shard(cli(i)).sctp_established(PeerId(i))
            }) && links().iter().all(|&(l, c, id)| {
                s.shard(l).sctp_established(id) && s.shard(c).sctp_established(id)
            })
        },
        Duration::from_secs(90),
    )
    .unwrap_or_else(|e| panic!("seed {seed}: associations not up: {e}"));
    sim.drain_events().count();
    sim
}

/// Member 1 publishes video on A0; member 2 gets it through a mirror on A1; link
/// A0–B0 carries it to node B and link A1–C0 (fed by the mirror) to node C, where
/// each link peer publishes it for members 3 and 4. Nothing sends it on B0–C0.
fn publish_across(sim: &mut Sim) {
    publish_source(sim, cli(1), a0(), TRACK_A);
    sim.command(
        a1(),
        Command::MirrorTrack {
            track: track_spec(TRACK_A, PUB_SSRC, PUB_RTX),
            origin: 0,
        },
    )
    .unwrap();
    sim.command(
        a0(),
        Command::RelayTrack {
            track: TRACK_A,
            to: 1,
        },
    )
    .unwrap();
    for (at, link, ssrcs, remote, track) in [
        (a0(), LINK_AB, SSRCS_AB, b0(), TRACK_B),
        (a1(), LINK_AC, SSRCS_AC, c0(), TRACK_C),
    ] {
        sim.command(
            at,
            Command::Subscribe {
                peer: link,
                subscription: subscription(TRACK_A, ssrcs.0, ssrcs.1),
            },
        )
        .unwrap();
        sim.command(
            remote,
            Command::Publish {
                peer: link,
                track: track_spec(track, ssrcs.0, ssrcs.1),
            },
        )
        .unwrap();
    }
    for (i, track) in [(2, TRACK_A), (3, TRACK_B), (4, TRACK_C)] {
        let ssrcs = (0x6000 + i as u32 * 2, 0x6001 + i as u32 * 2);
        subscribe_and_receive(sim, home(i), cli(i), PeerId(i), track, ssrcs);
    }
}

#[test]
fn sim_room_cascaded_over_links() {
    let member = LinkConfig {
        latency: Duration::from_millis(15),
        jitter: Duration::from_millis(3),
        loss: 0.03,
        ..LinkConfig::default()
    };
    // Between nodes: a datacenter path, with loss too, so links repair it.
    let between_nodes = LinkConfig {
        latency: Duration::from_millis(5),
        jitter: Duration::from_millis(1),
        loss: 0.02,
        ..LinkConfig::default()
    };
    for seed in 0..12 {
        let mut sim = cascade(seed, &member, &between_nodes);
        let mut log = Log::default();
        let mut chat = [0u16; 5];
        for i in 1..=4 {
            chat[i as usize] = open_from_client(&mut sim, &mut log, i, "chat", "", RELIABLE);
        }
        publish_across(&mut sim);
        for i in 1..=4 {
            send_range(&mut sim, i, chat[i as usize], 0..N, false);
        }
        let before: Vec<u64> = [b0(), c0()]
            .iter()
            .map(|&s| sim.shard(s).stats().rtp_received)
            .collect();
        for p in 0..PACKETS {
            let now = sim.now();
            sim.shard_mut(cli(1))
                .send_rtp(now, SOURCE, packet(p))
                .unwrap();
            sim.run_for(Duration::from_millis(10)).unwrap();
            log.take(&mut sim);
        }
        // Every message once, in each sender's order, on every other member: none
        // went round a second link.
        let chat_of_all = (&[1, 2, 3, 4][..], "chat", N);
        let limit = Duration::from_secs(120);
        room::run_until_heard_once_in_order(&mut sim, &mut log, chat_of_all, limit, seed);
        // The video on every other member: intact, each packet at most once.
        for r in 2..=4u64 {
            let rtp = log.rtp.get(&r).map_or(&[][..], Vec::as_slice);
            let mut seen = vec![false; usize::from(PACKETS)];
            for (_, p) in rtp {
                let p = RtpPacket::parse(p).unwrap();
                let i = intact(&p)
                    .unwrap_or_else(|| panic!("seed {seed}: member {r} got a corrupt packet"));
                assert!(
                    !seen[usize::from(i)],
                    "seed {seed}: member {r} got {i} twice"
                );
                seen[usize::from(i)] = true;
            }
            let got = seen.iter().filter(|&&s| s).count();
            assert!(
                got * 100 >= usize::from(PACKETS) * 98,
                "seed {seed}: member {r} got {got} of {PACKETS} packets"
            );
        }

        // Each node past A took the track over one link, once: what B0 and C0
        // received is the track's packets plus the retransmissions their own NACKs
        // asked for, not a second copy over B0–C0.
        for (k, &s) in [b0(), c0()].iter().enumerate() {
            let stats = sim.shard(s).stats();
            let received = stats.rtp_received - before[k];
            let packets = u64::from(PACKETS);
            assert!(
                received >= packets * 97 / 100 && received <= packets + stats.nacks_sent * 17,
                "seed {seed}: shard {s} received {received} packets, NACKs sent {}",
                stats.nacks_sent
            );
        }
        // Links repaired what the path between nodes lost.
        let retransmitted: u64 = [a0(), a1()]
            .iter()
            .map(|&s| sim.shard(s).stats().rtp_retransmitted)
            .sum();
        assert!(retransmitted > 0, "seed {seed}: no retransmissions");
        // Node A's shards dropped no room message between them.
        for s in [a0(), a1()] {
            assert_eq!(sim.shard(s).stats().relay_forwards_dropped, 0);
        }
    }
}
