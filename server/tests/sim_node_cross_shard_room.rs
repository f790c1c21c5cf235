//! One shoal node of three shards in the simulated network (`Sim::add_node`, the
//! same `shoal_systems::Node` logic the shard threads of a running node use): a room
//! whose four members sit on all three shards. Every member's data-channel messages
//! reach every other member once and in order, and one member's video reaches the
//! three others, each shard's part crossing the node once. With the queues between
//! the shards cut to one batch, so that a shard's siblings fill its queue before it
//! takes from it, reliable messages still arrive once and in order; with one shard
//! standing still for seconds (`Sim::stall`), its siblings hold their senders back
//! rather than piling up what they cannot hand it.

mod media_sim;
mod room;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use media_sim::{
    PT, PUB_RTX, PUB_SSRC, RTX_PT, SOURCE, intact, packet, publish_source, subscribe_and_receive,
    track_spec,
};
use room::{Log, cli, join, open_from_client, send_range};
use shoal_components::dtls::DtlsCertificate;
use shoal_components::media::TrackId;
use shoal_components::peer::PeerId;
use shoal_components::room::RoomId;
use shoal_components::rtp::RtpPacket;
use shoal_components::sctp::dcep::{ChannelType, Reliability};
use shoal_components::tick::RemoveReason;
use shoal_server::sim::{LinkConfig, Sim};
use shoal_systems::{Command, RelayLimits, ShardConfig};

const ROOM: RoomId = RoomId(9);
const RELIABLE: ChannelType = ChannelType {
    ordered: true,
    reliability: Reliability::Reliable,
};
/// Messages each member sends.
const N: u32 = 60;
/// Video packets the publisher (member 1) sends, one per 10 ms.
const PACKETS: u16 = 400;
/// The server's track.
const TRACK: TrackId = TrackId(70);

/// The node's shards, by index.
fn shards() -> [SocketAddr; 3] {
    ["10.9.0.1:7100", "10.9.0.2:7100", "10.9.0.3:7100"].map(|a| a.parse().unwrap())
}

/// How long a test's messages may take to reach everyone.
const LIMIT: Duration = Duration::from_secs(120);

/// A reliable ordered channel labelled "chat" opened by each member; member `i`'s
/// at index `i`.
fn open_chats(sim: &mut Sim, log: &mut Log) -> [u16; 5] {
    let mut chat = [0u16; 5];
    for i in 1..=4 {
        chat[i as usize] = open_from_client(sim, log, i, "chat", "", RELIABLE);
    }
    chat
}

/// Member `i`'s shard: members 1 and 2 on shard 0, 3 on shard 1, 4 on shard 2.
fn home(i: u64) -> usize {
    match i {
        1 | 2 => 0,
        3 => 1,
        _ => 2,
    }
}

/// The node, the four members joined and connected over `link`, each shard told
/// which others hold members of the room (as the control plane does).
fn node_room(seed: u64, link: &LinkConfig) -> Sim {
    node_room_with(seed, link, RelayLimits::default())
}

/// [`node_room`] with the relay's limits `relay` on every shard of the node.
fn node_room_with(seed: u64, link: &LinkConfig, relay: RelayLimits) -> Sim {
    let mut sim = Sim::new(seed);
    let certificate = Arc::new(DtlsCertificate::generate().unwrap());
    let configs = shards()
        .iter()
        .map(|&a| {
            let mut c = ShardConfig::with_certificate(a, sim.rng().next_u64(), certificate.clone());
            c.relay = relay;
            c
        })
        .collect();
    sim.add_node_with(configs);
    for i in 1..=4 {
        join(&mut sim, shards()[home(i)], i, ROOM, link);
    }
    for (s, at) in shards().into_iter().enumerate() {
        let others: Vec<usize> = (0..3).filter(|&o| o != s).collect();
        sim.shard_mut(at).set_room_siblings(ROOM, &others);
    }
    sim.run_until(
        |s| {
            (1..=4).all(|i| {
                s.shard(shards()[home(i)]).sctp_established(PeerId(i))
                    && s.shard(cli(i)).sctp_established(PeerId(i))
            })
        },
        Duration::from_secs(90),
    )
    .unwrap_or_else(|e| panic!("seed {seed}: associations not up: {e}"));
    sim.drain_events().count();
    sim
}

/// Member 1 publishes video on shard 0; member 2 subscribes there, members 3 and 4
/// through mirrors on shards 1 and 2 fed by shard 0: what negotiation and the
/// control plane set up for such a room.
fn publish_to_all(sim: &mut Sim) {
    let [s0, s1, s2] = shards();
    publish_source(sim, cli(1), s0, TRACK);
    for (to, at) in [(1, s1), (2, s2)] {
        sim.command(
            at,
            Command::MirrorTrack {
                track: track_spec(TRACK, PUB_SSRC, PUB_RTX),
                origin: 0,
            },
        )
        .unwrap();
        sim.command(s0, Command::RelayTrack { track: TRACK, to })
            .unwrap();
    }
    for i in 2..=4 {
        let ssrcs = (0x6000 + i as u32 * 2, 0x6001 + i as u32 * 2);
        subscribe_and_receive(sim, shards()[home(i)], cli(i), PeerId(i), TRACK, ssrcs);
    }
}

#[test]
fn sim_node_cross_shard_room() {
    assert_eq!((PT, RTX_PT), (96, 97));
    let link = LinkConfig {
        latency: Duration::from_millis(15),
        jitter: Duration::from_millis(3),
        loss: 0.03,
        ..LinkConfig::default()
    };
    for seed in 0..20 {
        let mut sim = node_room(seed, &link);
        let mut log = Log::default();
        let chat = open_chats(&mut sim, &mut log);
        publish_to_all(&mut sim);
        for i in 1..=4 {
            send_range(&mut sim, i, chat[i as usize], 0..N, false);
        }
        for p in 0..PACKETS {
            let now = sim.now();
            sim.shard_mut(cli(1))
                .send_rtp(now, SOURCE, packet(p))
                .unwrap();
            sim.run_for(Duration::from_millis(10)).unwrap();
            log.take(&mut sim);
        }
        // Every message once, in each sender's order, on every other member.
        let chat_of_all = (&[1, 2, 3, 4][..], "chat", N);
        room::run_until_heard_once_in_order(&mut sim, &mut log, chat_of_all, LIMIT, seed);
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
                got * 100 >= usize::from(PACKETS) * 99,
                "seed {seed}: member {r} got {got} of {PACKETS} packets"
            );
        }

        // One hop: each shard puts out its own members' messages, once each, and
        // takes the others'; shard 0 alone puts video out, one copy per mirror, and
        // the mirrors take it all and send none on.
        let stats: Vec<_> = shards()
            .iter()
            .map(|&a| sim.shard(a).stats().clone())
            .collect();
        let n = u64::from(N);
        let out: Vec<u64> = stats.iter().map(|s| s.relay_forwards_out).collect();
        let inn: Vec<u64> = stats.iter().map(|s| s.relay_forwards_in).collect();
        assert_eq!(out, [2 * n, n, n], "seed {seed}: forwards out");
        assert_eq!(inn, [2 * n, 3 * n, 3 * n], "seed {seed}: forwards in");
        let relayed = stats[0].media_relay_out;
        assert!(relayed >= 2 * u64::from(PACKETS) * 99 / 100, "seed {seed}");
        assert_eq!((stats[1].media_relay_out, stats[2].media_relay_out), (0, 0));
        assert_eq!(
            stats[1].media_relay_in + stats[2].media_relay_in,
            relayed,
            "seed {seed}: media in"
        );
        for s in &stats {
            assert_eq!(s.relay_forwards_dropped + s.media_relay_dropped, 0);
        }
    }
}

/// Messages each member sends when the queues between the shards are one batch long.
const FLOOD: u32 = 400;

#[test]
fn sim_node_sibling_queue_full_loses_no_reliable_message() {
    // No jitter: the members' messages reach the three shards at the same instants,
    // so in one step two shards hand the third a batch each before it runs, and a
    // queue of one refuses the second.
    let link = LinkConfig {
        latency: Duration::from_millis(15),
        loss: 0.01,
        ..LinkConfig::default()
    };
    for seed in 0..6 {
        let mut sim = node_room(seed, &link);
        sim.set_sibling_queue_len(shards()[0], 1);
        let mut log = Log::default();
        let chat = open_chats(&mut sim, &mut log);
        for i in 1..=4 {
            send_range(&mut sim, i, chat[i as usize], 0..FLOOD, false);
        }
        let chat_of_all = (&[1, 2, 3, 4][..], "chat", FLOOD);
        room::run_until_heard_once_in_order(&mut sim, &mut log, chat_of_all, LIMIT, seed);
        let stats: Vec<_> = shards()
            .iter()
            .map(|&a| sim.shard(a).stats().clone())
            .collect();
        // The full queues happened, and nothing was dropped for them: what they
        // refused went again.
        let requeued: u64 = stats.iter().map(|s| s.relay_forwards_requeued).sum();
        assert!(requeued > 0, "seed {seed}: no queue was full: {stats:?}");
        for s in &stats {
            assert_eq!(s.relay_forwards_dropped, 0, "seed {seed}");
        }
        let n = u64::from(FLOOD);
        let inn: Vec<u64> = stats.iter().map(|s| s.relay_forwards_in).collect();
        assert_eq!(inn, [2 * n, 3 * n, 3 * n], "seed {seed}: forwards in");
    }
}

/// What a tick forwards at most while a shard stands still.
const STALL_TICK_FORWARDS: usize = 32;
/// How long a shard stands still.
const STALL: Duration = Duration::from_secs(3);

/// [`node_room`] on 15 ms links, with the queues between the shards cut to one
/// batch and [`STALL_TICK_FORWARDS`] forwards a tick, each member's chat open.
fn stall_ready_room(seed: u64) -> (Sim, Log, [u16; 5]) {
    stall_ready_room_with(seed, RelayLimits::default())
}

/// [`stall_ready_room`] with the relay's limits `relay` but for its forwards a tick.
fn stall_ready_room_with(seed: u64, relay: RelayLimits) -> (Sim, Log, [u16; 5]) {
    let link = LinkConfig {
        latency: Duration::from_millis(15),
        ..LinkConfig::default()
    };
    let relay = RelayLimits {
        max_forwards_per_tick: STALL_TICK_FORWARDS,
        ..relay
    };
    let mut sim = node_room_with(seed, &link, relay);
    sim.set_sibling_queue_len(shards()[0], 1);
    let mut log = Log::default();
    let chat = open_chats(&mut sim, &mut log);
    (sim, log, chat)
}

#[test]
fn sim_node_stalled_sibling_holds_senders_not_records() {
    // Shard 1 (member 3) stands still for three seconds while the others flood the
    // room; its queue of one batch fills at once. What its siblings could not hand
    // it waits in their `Links`, and so must their senders: no reliable message
    // of a room with members on shard 1 leaves a sender's receive buffer while
    // records wait for it, so what waits stays within a tick's forwards (one
    // record per sibling per message) instead of growing with the flood.
    let stall = STALL;
    for seed in 0..2 {
        let (mut sim, mut log, chat) = stall_ready_room(seed);
        sim.stall(shards()[1], stall);
        for i in 1..=4 {
            send_range(&mut sim, i, chat[i as usize], 0..FLOOD, false);
        }
        let end = sim.now() + stall;
        let mut most = [0usize; 3];
        while sim.next_event_at().is_some_and(|at| at < end) {
            sim.step();
            for (s, at) in shards().into_iter().enumerate() {
                most[s] = most[s].max(sim.forwards_waiting(at));
            }
        }
        let waits = sim.shard(shards()[0]).stats().relay_forward_waits;
        // The stall filled shard 1's queue: shard 0's messages waited for it.
        assert!(
            most[0] > 0 && waits > 0,
            "seed {seed}: {most:?}, {waits} waits"
        );
        for (s, &m) in most.iter().enumerate() {
            assert!(
                m <= 2 * STALL_TICK_FORWARDS,
                "seed {seed}: shard {s} kept {m} records for its siblings"
            );
        }
        // Shard 1 runs again: everyone hears everyone, once and in order, and
        // nothing was dropped.
        let chat_of_all = (&[1, 2, 3, 4][..], "chat", FLOOD);
        room::run_until_heard_once_in_order(&mut sim, &mut log, chat_of_all, LIMIT, seed);
        for at in shards() {
            assert_eq!(
                sim.shard(at).stats().relay_forwards_dropped,
                0,
                "seed {seed}"
            );
            assert_eq!(sim.forwards_waiting(at), 0, "seed {seed}");
        }
    }
}

/// Messages one member sends, and what a tick forwards at most in that test: a
/// tick's share of the sender's window passes it.
const BURST: u32 = 3_000;
const TICK_FORWARDS: usize = 16;

#[test]
fn sim_node_tick_forward_limit_loses_no_reliable_message() {
    let link = LinkConfig {
        latency: Duration::from_millis(20),
        loss: 0.01,
        ..LinkConfig::default()
    };
    let relay = RelayLimits {
        max_forwards_per_tick: TICK_FORWARDS,
        ..RelayLimits::default()
    };
    for seed in 0..4 {
        let mut sim = node_room_with(seed, &link, relay);
        let mut log = Log::default();
        let chat = open_chats(&mut sim, &mut log);
        // Small messages, many to a datagram.
        for k in 0..BURST {
            let payload = Bytes::from(format!("2:{k}:"));
            sim.shard_mut(cli(2))
                .channel_send(PeerId(2), chat[2], false, payload)
                .unwrap_or_else(|e| panic!("message {k}: {e}"));
        }
        sim.run_until(
            |s| {
                log.take(s);
                [1, 3, 4]
                    .iter()
                    .all(|&r| log.on(r, "chat").len() >= BURST as usize)
            },
            Duration::from_secs(120),
        )
        .unwrap_or_else(|e| panic!("seed {seed}: messages: {e}"));
        sim.run_for(Duration::from_secs(3)).unwrap();
        log.take(&mut sim);

        // The member beside the sender and those on the other shards got every
        // message once, in order.
        let want: Vec<Option<(u64, u32)>> = (0..BURST).map(|k| Some((2, k))).collect();
        for r in [1u64, 3, 4] {
            let got: Vec<Option<(u64, u32)>> = log
                .on(r, "chat")
                .iter()
                .map(|m| room::header(&m.payload))
                .collect();
            assert!(
                got == want,
                "seed {seed}: member {r} got {} messages, not each once in order",
                got.len()
            );
        }
        // Ticks put out their limit, and the sender's next messages waited for the
        // next tick rather than being dropped.
        let stats = sim.shard(shards()[0]).stats().clone();
        assert!(stats.relay_forward_waits > 0, "seed {seed}: {stats:?}");
        assert_eq!(stats.relay_forwards_dropped, 0, "seed {seed}");
        assert_eq!(stats.relay_forwards_out, u64::from(BURST), "seed {seed}");
    }
}

/// Shard 2 stands still for `stall` while member 3 sends its flood on its chat;
/// once shard 1 has acknowledged all of it, the owner lets member 3 go and tells
/// the shards, as the control plane does, that shard 1 holds no member of the room
/// any more. Returns when shard 2 runs again.
fn let_go_3_while_2_stands_still(
    sim: &mut Sim,
    log: &mut Log,
    chat: &[u16; 5],
    stall: Duration,
) -> shoal_components::time::Time {
    let stalled_until = sim.now() + stall;
    sim.stall(shards()[2], stall);
    send_range(sim, 3, chat[3], 0..FLOOD, false);
    sim.run_until(
        |s| {
            log.take(s);
            s.shard(cli(3)).sctp_buffered_amount(PeerId(3)) == 0
        },
        Duration::from_secs(2),
    )
    .unwrap_or_else(|e| panic!("member 3 still sending: {e}"));
    sim.run_for(Duration::from_millis(300)).unwrap();
    log.take(sim);
    assert!(sim.now() < stalled_until, "shard 2 ran again first");
    sim.command(shards()[1], Command::LetGo(PeerId(3))).unwrap();
    sim.shard_mut(shards()[1]).set_room_siblings(ROOM, &[]);
    sim.shard_mut(shards()[0]).set_room_siblings(ROOM, &[2]);
    sim.shard_mut(shards()[2]).set_room_siblings(ROOM, &[0]);
    stalled_until
}

/// Member 3, alone of its room on shard 1, sends while shard 2 stands still, so its
/// messages wait in shard 1's receive buffer for room among the forwards; then its
/// session ends on its side and the owner lets it go (`Command::LetGo`), telling
/// the shards, as the control plane does, that shard 1 holds no member of the room
/// any more. Everything member 3 sent had been acknowledged: it still reaches the
/// members on both other shards, once and in order, and then shard 1 takes the
/// room's new siblings.
#[test]
fn sim_node_a_member_let_go_alone_on_its_shard_has_its_messages_relayed() {
    let stall = STALL;
    for seed in 0..2 {
        let (mut sim, mut log, chat) = stall_ready_room(seed);
        let_go_3_while_2_stands_still(&mut sim, &mut log, &chat, stall);
        let want: Vec<room::Got> = (0..FLOOD).map(|k| room::message(3, k, false)).collect();
        sim.run_until(
            |s| {
                log.take(s);
                [1, 2, 4]
                    .iter()
                    .all(|&r| log.on(r, "chat").len() >= want.len())
            },
            LIMIT,
        )
        .unwrap_or_else(|e| {
            let got: Vec<usize> = [1, 2, 4].iter().map(|&r| log.on(r, "chat").len()).collect();
            panic!(
                "seed {seed}: {e}: got {got:?}; waiting {:?} at {:?}",
                shards().map(|a| sim.forwards_waiting(a)),
                sim.now()
            )
        });
        sim.run_for(Duration::from_secs(3)).unwrap();
        log.take(&mut sim);
        for r in [1, 2, 4] {
            assert!(
                log.on(r, "chat") == want.as_slice(),
                "seed {seed}: member {r} missed, repeated or reordered: got {}",
                log.on(r, "chat").len()
            );
        }
        assert_eq!(
            log.removed,
            vec![(shards()[1], PeerId(3), RemoveReason::Left)],
            "seed {seed}"
        );
        let s1 = sim.shard(shards()[1]);
        assert_eq!(s1.stats().relay_closing_kept, 1, "seed {seed}");
        assert_eq!(s1.stats().relay_closing_expired, 0, "seed {seed}");
        assert!(s1.stats().relay_forward_waits > 0, "seed {seed}");
        // Member 3 is gone, and shard 1 took what the owner last said of the room.
        assert_eq!(s1.room_member_count(ROOM), 0, "seed {seed}");
        assert_eq!(s1.shared_room_count(), 0, "seed {seed}");
        assert_eq!(s1.peer_count(), 0, "seed {seed}");
    }
}

/// Member 3, alone of its room on shard 1, sends while shard 2 stands still for
/// ten seconds, so its messages wait in shard 1's receive buffer; then it is let
/// go, as in the test above. Its buffer cannot shrink while shard 2 stands still,
/// and after twice the hold limit shard 1 lets it go with what is left
/// (`relay_closing_expired`). Every other member missed those messages, so each
/// one's chat channel closes: on shard 0 at once, on shard 2 once it runs again and
/// has delivered what shard 1 forwarded before (`Forwarded::gap`), and on a second
/// node of two shards, whose member 5 (on its shard 1) hears the room over a link
/// from shard 0 to its shard 0, once the link has carried what shard 0 sent on it
/// before (a gap marker, `LINK_GAP_PPID`) and the second node's shard 0 has handed
/// it on with what came before (a gap record from a link). Each got a first part
/// of member 3's messages, once and in order, then its channel closed.
#[test]
fn sim_node_an_expired_leaving_member_closes_the_rooms_channels_everywhere() {
    const LINK: PeerId = PeerId(50);
    let stall = Duration::from_secs(10);
    let relay = RelayLimits {
        hold_limit: Duration::from_secs(1),
        ..RelayLimits::default()
    };
    let (mut sim, mut log, chat) = stall_ready_room_with(7, relay);
    // The second node: the link on its shard 0, member 5 on its shard 1.
    let [far, far1]: [SocketAddr; 2] =
        ["10.9.1.1:7100", "10.9.1.2:7100"].map(|a| a.parse().unwrap());
    let link = LinkConfig {
        latency: Duration::from_millis(15),
        ..LinkConfig::default()
    };
    sim.add_node(&[far, far1]);
    join(&mut sim, far1, 5, ROOM, &link);
    sim.shard_mut(far).set_room_siblings(ROOM, &[1]);
    sim.shard_mut(far1).set_room_siblings(ROOM, &[0]);
    sim.set_link_both(shards()[0], far, link);
    sim.connect_link(shards()[0], far, LINK, ROOM).unwrap();
    sim.run_until(
        |s| {
            s.shard(far1).sctp_established(PeerId(5))
                && s.shard(cli(5)).sctp_established(PeerId(5))
                && s.shard(far).sctp_established(LINK)
                && s.shard(shards()[0]).sctp_established(LINK)
        },
        Duration::from_secs(30),
    )
    .expect("the second node's member and link are up");
    let chat5 = open_from_client(&mut sim, &mut log, 5, "chat", "", RELIABLE);
    let channel_of = |r: u64| if r == 5 { chat5 } else { chat[r as usize] };
    let stalled_until = let_go_3_while_2_stands_still(&mut sim, &mut log, &chat, stall);
    sim.run_until(
        |s| {
            log.take(s);
            s.shard(shards()[1]).stats().relay_closing_expired > 0
        },
        Duration::from_secs(5),
    )
    .expect("member 3's buffer expires");
    assert!(sim.now() < stalled_until, "shard 2 ran again first");
    // The gap goes to shard 2 behind records that wait for it.
    assert!(sim.forwards_waiting(shards()[1]) > 0);
    sim.run_until(
        |s| {
            log.take(s);
            s.shard(shards()[0]).stats().relay_gap_channels_closed == 2
        },
        Duration::from_secs(1),
    )
    .expect("shard 0 closes its members' chat at once");
    assert!(sim.now() < stalled_until, "shard 0 closed late");
    sim.run_until(
        |s| {
            log.take(s);
            s.now() > stalled_until
                && [1, 2, 4, 5]
                    .iter()
                    .all(|&r| s.shard(cli(r)).channel(PeerId(r), channel_of(r)).is_none())
        },
        Duration::from_secs(30),
    )
    .unwrap_or_else(|e| {
        let open: Vec<u64> = [1, 2, 4, 5]
            .into_iter()
            .filter(|&r| {
                sim.shard(cli(r))
                    .channel(PeerId(r), channel_of(r))
                    .is_some()
            })
            .collect();
        panic!("{e}: members {open:?} still have their chat open")
    });
    sim.run_for(Duration::from_secs(1)).unwrap();
    log.take(&mut sim);
    let want: Vec<room::Got> = (0..FLOOD).map(|k| room::message(3, k, false)).collect();
    let forwarded = sim.shard(shards()[1]).stats().relay_forwards_out as usize;
    for r in [1, 2, 4, 5] {
        let got = log.on(r, "chat");
        assert!(
            got == &want[..got.len()],
            "member {r} got a gap or a repeat before its channel closed"
        );
        // Everything shard 1 forwarded arrived before the channel closed.
        assert_eq!(got.len(), forwarded, "member {r}");
    }
    assert!(forwarded < want.len(), "nothing was lost");
    for at in shards().into_iter().chain([far, far1]) {
        assert_eq!(sim.shard(at).stats().relay_undeliverable, 0, "{at}");
    }
    assert_eq!(
        log.removed,
        vec![(shards()[1], PeerId(3), RemoveReason::Left)]
    );
    let closed = [shards()[0], shards()[1], shards()[2], far, far1]
        .map(|at| sim.shard(at).stats().relay_gap_channels_closed);
    assert_eq!(
        closed,
        [2, 0, 1, 0, 1],
        "chat of members 1 and 2, none, chat of member 4, none, chat of member 5"
    );
    // One marker, for the one label, from the shard that holds the link, taken by
    // the shard at its other end.
    let markers = [shards()[0], shards()[1], shards()[2], far, far1].map(|at| {
        let s = sim.shard(at).stats();
        (s.relay_gap_markers_sent, s.relay_gap_markers_taken)
    });
    assert_eq!(markers, [(1, 0), (0, 0), (0, 0), (0, 1), (0, 0)]);
    assert_eq!(sim.shard(shards()[1]).peer_count(), 0);
}
