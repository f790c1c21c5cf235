//! A room whose members sit on the two shards of one node (`Sim::add_node`), in the
//! simulated network: the node carries what a shard puts out for its room's other
//! shard, as the shard threads of a running node do over their command channels. A
//! member's messages reach the members on both shards once and in order; a
//! forwarded message is delivered where it lands and goes no further.

mod room;

use std::net::SocketAddr;
use std::time::Duration;

use room::{Log, SRV, addr, cli, join, message, open_from_client, send_range};
use shoal_components::peer::PeerId;
use shoal_components::room::RoomId;
use shoal_components::sctp::dcep::{ChannelType, Reliability};
use shoal_server::sim::{LinkConfig, Sim};

const RELIABLE: ChannelType = ChannelType {
    ordered: true,
    reliability: Reliability::Reliable,
};
const ROOM: RoomId = RoomId(1);
const OTHER_ROOM: RoomId = RoomId(2);
/// The second server shard (index 1; `SRV` is index 0).
const SRV2: &str = "10.0.0.2:7100";

fn servers() -> [SocketAddr; 2] {
    [addr(SRV), addr(SRV2)]
}

/// A node of server shards 0 and 1; members 1 and 2 of `ROOM` on shard 0, member 3
/// of `ROOM` and member 4 of `OTHER_ROOM` on shard 1; every association up. Each
/// shard is told the other holds members of `ROOM`.
fn two_shard_room(seed: u64) -> Sim {
    let link = LinkConfig::lossy(Duration::from_millis(10), 0.01);
    let mut sim = Sim::new(seed);
    sim.add_node(&servers());
    for (i, shard, room) in [(1, 0, ROOM), (2, 0, ROOM), (3, 1, ROOM), (4, 1, OTHER_ROOM)] {
        join(&mut sim, servers()[shard], i, room, &link);
    }
    sim.shard_mut(addr(SRV)).set_room_siblings(ROOM, &[1]);
    sim.shard_mut(addr(SRV2)).set_room_siblings(ROOM, &[0]);
    sim.run_until(
        |s| {
            [(1, 0), (2, 0), (3, 1), (4, 1)].iter().all(|&(i, shard)| {
                s.shard(servers()[shard]).sctp_established(PeerId(i))
                    && s.shard(cli(i)).sctp_established(PeerId(i))
            })
        },
        Duration::from_secs(60),
    )
    .unwrap_or_else(|e| panic!("seed {seed}: associations not up: {e}"));
    sim.drain_events().count();
    sim
}

#[test]
fn sim_room_across_shards_every_member_hears_every_other_once_in_order() {
    const N: u32 = 80;
    for seed in 0..2 {
        let mut sim = two_shard_room(seed);
        let mut log = Log::default();
        let mut chat = [0u16; 5];
        for i in 1..=4 {
            chat[i as usize] = open_from_client(&mut sim, &mut log, i, "chat", "", RELIABLE);
        }
        for i in 1..=4 {
            send_range(&mut sim, i, chat[i as usize], 0..N, false);
        }
        let expected = 2 * N as usize;
        sim.run_until(
            |s| {
                log.take(s);
                (1..=3).all(|r| log.on(r, "chat").len() >= expected)
            },
            Duration::from_secs(120),
        )
        .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        // Anything duplicated or late would show now.
        sim.run_until(
            |s| {
                log.take(s);
                false
            },
            Duration::from_secs(3),
        )
        .ok();
        room::assert_heard_once_in_order(&log, &[1, 2, 3], "chat", N, seed);
        assert!(
            log.on(4, "chat").is_empty(),
            "the other room heard the room"
        );
        // Shard 0 forwards what members 1 and 2 sent, shard 1 what member 3 sent;
        // member 4's room has no other shard. Each record went one hop.
        let (s0, s1) = (sim.shard(addr(SRV)).stats(), sim.shard(addr(SRV2)).stats());
        assert_eq!(s0.relay_forwards_out, 2 * u64::from(N), "seed {seed}");
        assert_eq!(s1.relay_forwards_out, u64::from(N), "seed {seed}");
        assert_eq!(s0.relay_forwards_in, u64::from(N), "seed {seed}");
        assert_eq!(s1.relay_forwards_in, 2 * u64::from(N), "seed {seed}");
        assert_eq!(s0.relay_forwards_dropped + s1.relay_forwards_dropped, 0);
    }
}

#[test]
fn sim_room_across_shards_a_forwarded_message_is_delivered_here_and_not_forwarded_again() {
    let mut sim = two_shard_room(7);
    let mut log = Log::default();
    let chat = open_from_client(&mut sim, &mut log, 3, "chat", "", RELIABLE);
    // Member 3 (shard 1) speaks; shard 1 puts one record out for shard 0, which
    // delivers it to its two members of the room and puts nothing out, though
    // shard 1 is its sibling for this room.
    let m = message(3, 0, false);
    sim.shard_mut(cli(3))
        .channel_send(PeerId(3), chat, m.binary, m.payload.clone())
        .unwrap();
    sim.run_until(
        |s| {
            log.take(s);
            log.on(1, "chat").len() == 1 && log.on(2, "chat").len() == 1
        },
        Duration::from_secs(10),
    )
    .expect("members 1 and 2 get member 3's message");
    // Anything forwarded twice would arrive now.
    sim.run_for(Duration::from_secs(3)).unwrap();
    log.take(&mut sim);
    assert_eq!(log.on(1, "chat"), std::slice::from_ref(&m));
    assert_eq!(log.on(2, "chat"), std::slice::from_ref(&m));
    assert!(log.on(3, "chat").is_empty(), "member 3 heard itself");
    let (s0, s1) = (sim.shard(addr(SRV)).stats(), sim.shard(addr(SRV2)).stats());
    assert_eq!((s1.relay_forwards_out, s0.relay_forwards_in), (1, 1));
    assert_eq!(
        s0.relay_forwards_out, 0,
        "a forwarded message was forwarded again"
    );
    assert_eq!(s1.relay_forwards_in, 0);
}

#[test]
fn sim_room_across_shards_without_siblings_nothing_is_put_out() {
    let mut sim = two_shard_room(3);
    // The control plane says member 3 is the room's only member off shard 0 and has
    // left: each shard's presence entry for the room goes.
    sim.shard_mut(addr(SRV)).set_room_siblings(ROOM, &[]);
    sim.shard_mut(addr(SRV2)).set_room_siblings(ROOM, &[]);
    assert_eq!(sim.shard(addr(SRV)).shared_room_count(), 0);
    let mut log = Log::default();
    let chat = open_from_client(&mut sim, &mut log, 1, "chat", "", RELIABLE);
    send_range(&mut sim, 1, chat, 0..5, false);
    sim.run_until(
        |s| {
            log.take(s);
            log.on(2, "chat").len() == 5
        },
        Duration::from_secs(30),
    )
    .expect("member 2 gets member 1's messages");
    sim.run_for(Duration::from_secs(3)).unwrap();
    log.take(&mut sim);
    assert_eq!(sim.shard(addr(SRV)).stats().relay_forwards_out, 0);
    assert_eq!(sim.shard(addr(SRV2)).stats().relay_forwards_in, 0);
    assert!(log.on(3, "chat").is_empty());
}
