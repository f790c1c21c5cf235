//! The room relay over whole shards in the simulated network: one server shard,
//! one client shard per participant. What a member sends on a channel reaches
//! every other member of its room once, in the sender's order and reliability,
//! on a channel of the same label (opened by shoal where missing); other rooms
//! hear nothing. A slow receiver holds reliable senders back (their SCTP windows
//! close) for at most the relay's hold limit, after which it alone is cut off; on
//! unreliable channels it loses messages and nobody else notices.

mod room;

use std::collections::HashSet;
use std::time::Duration;

use bytes::Bytes;
use room::{
    Got, Log, SRV, add_server_with, addr, cli, header, join, message, open_from_client, room_sim,
    room_sim_with, send_paced, send_range,
};
use shoal_components::peer::PeerId;
use shoal_components::room::RoomId;
use shoal_components::sctp::assoc::{AssocEnd, SctpLimits};
use shoal_components::sctp::dcep::{ChannelType, Reliability};
use shoal_components::tick::{RemoveReason, ShardEvent};
use shoal_server::sim::{LinkConfig, Sim};
use shoal_systems::{Command, CommandError, RelayLimits};

const RELIABLE: ChannelType = ChannelType {
    ordered: true,
    reliability: Reliability::Reliable,
};
const UDP_LIKE: ChannelType = ChannelType {
    ordered: false,
    reliability: Reliability::MaxRetransmits(0),
};
const ROOM: RoomId = RoomId(1);
const OTHER_ROOM: RoomId = RoomId(2);

fn link(loss: f64) -> LinkConfig {
    LinkConfig::lossy(Duration::from_millis(20), loss)
}

/// Runs until `done` holds on the log, failing with the seed's name if it does not.
fn run(sim: &mut Sim, log: &mut Log, limit: Duration, what: &str, done: impl Fn(&Log) -> bool) {
    sim.run_until(
        |s| {
            log.take(s);
            done(log)
        },
        limit,
    )
    .unwrap_or_else(|e| {
        let got: Vec<_> = log.messages.iter().map(|(k, v)| (k, v.len())).collect();
        panic!(
            "{what}: {e}; got {got:?}; removed {:?}; server {:?}",
            log.removed,
            sim.shard(addr(SRV)).stats()
        )
    });
}

/// The numbers of the messages receiver `r` got on `label`, sorted, each checked
/// whole against what its sender sent.
fn numbers_on(log: &Log, r: u64, label: &str) -> Vec<u32> {
    let mut got: Vec<u32> = log
        .on(r, label)
        .iter()
        .map(|g| {
            let (s, k) = header(&g.payload).unwrap();
            assert_eq!(g, &message(s, k, false), "corrupted");
            k
        })
        .collect();
    got.sort_unstable();
    got
}

/// Of what `receiver` got on `label`, the messages of sender `s` (empty ones count
/// as the sender's when only it sends empties), in arrival order.
fn from_sender(got: &[Got], s: u64, empties_are_s: bool) -> Vec<Got> {
    got.iter()
        .filter(|g| {
            if g.payload.is_empty() {
                return empties_are_s;
            }
            header(&g.payload).is_some_and(|(from, _)| from == s)
        })
        .cloned()
        .collect()
}

#[test]
fn sim_room_relay_ordered_reliable_exactly_once_in_order_under_loss() {
    const N: u32 = 120;
    for seed in 0..3 {
        let members = [(1, ROOM), (2, ROOM), (3, ROOM), (4, OTHER_ROOM)];
        let mut sim = room_sim(seed, &link(0.03), SctpLimits::default(), &members);
        let mut log = Log::default();
        let mut chat = [0u16; 5];
        for i in 1..=4 {
            chat[i as usize] = open_from_client(&mut sim, &mut log, i, "chat", "", RELIABLE);
        }
        // Only sender 1 sends empty messages, so a receiver can place them.
        for i in 1..=3 {
            send_range(&mut sim, i, chat[i as usize], 0..N, i == 1);
        }
        // The member of the other room talks too, to nobody.
        send_range(&mut sim, 4, chat[4], 0..20, false);
        let expected = 2 * N as usize;
        run(
            &mut sim,
            &mut log,
            Duration::from_secs(120),
            &format!("seed {seed}"),
            |log| (1..=3).all(|r| log.on(r, "chat").len() >= expected),
        );
        // Anything duplicated or late would show now.
        sim.run_for(Duration::from_secs(3)).ok();
        log.take(&mut sim);
        for r in 1..=3u64 {
            let got = log.on(r, "chat");
            assert_eq!(got.len(), expected, "seed {seed}: receiver {r}");
            for s in (1..=3).filter(|&s| s != r) {
                let want: Vec<Got> = (0..N).map(|k| message(s, k, s == 1)).collect();
                assert!(
                    from_sender(got, s, s == 1) == want,
                    "seed {seed}: receiver {r} did not get sender {s}'s messages once and in order"
                );
            }
            assert!(
                got.iter().all(|g| g.payload.is_empty()
                    || header(&g.payload).is_some_and(|(s, _)| s != 4 && s != r)),
                "seed {seed}: receiver {r} got its own or another room's message"
            );
        }
        assert_eq!(
            log.total(),
            3 * expected,
            "seed {seed}: room 2 heard something"
        );
        assert_eq!(
            log.server_messages, 0,
            "members' messages are relayed, not reported"
        );
        let stats = sim.shard(addr(SRV)).stats();
        assert_eq!(stats.relay_messages, 3 * expected as u64, "seed {seed}");
        assert_eq!(
            (
                stats.relay_dropped,
                stats.relay_slow_receivers,
                stats.relay_undeliverable
            ),
            (0, 0, 0),
            "seed {seed}"
        );
    }
}

#[test]
fn sim_room_relay_unordered_unreliable_opens_the_channel_with_the_senders_parameters() {
    const N: u32 = 300;
    for seed in 10..13 {
        let members = [(1, ROOM), (2, ROOM), (3, ROOM)];
        let mut sim = room_sim(seed, &link(0.05), SctpLimits::default(), &members);
        let mut log = Log::default();
        let game = open_from_client(&mut sim, &mut log, 1, "game", "proto-x", UDP_LIKE);
        let sent = sim
            .shard(addr(SRV))
            .channel(PeerId(1), game)
            .cloned()
            .expect("the sender's channel on the server");
        for k in 0..N {
            // Small messages: each fits one packet, so a loss costs one message.
            let m = Bytes::from(format!("1:{k}:{}", "z".repeat((k % 40) as usize)));
            sim.shard_mut(cli(1))
                .channel_send(PeerId(1), game, true, m)
                .unwrap();
            if k % 20 == 19 {
                sim.run_for(Duration::from_millis(50)).ok();
            }
        }
        sim.run_for(Duration::from_secs(10)).ok();
        log.take(&mut sim);
        for r in [2u64, 3] {
            let opened = log.opened.get(&r).cloned().unwrap_or_default();
            assert_eq!(
                opened.len(),
                1,
                "seed {seed}: receiver {r} channels {opened:?}"
            );
            let (id, label, protocol) = &opened[0];
            assert_eq!((label.as_str(), protocol.as_str()), ("game", "proto-x"));
            // RFC 8831 §6.5: shoal is the DTLS server here, so its streams are odd.
            assert_eq!(id % 2, 1, "seed {seed}");
            let ch = sim.shard(cli(r)).channel(PeerId(r), *id).unwrap();
            assert_eq!((ch.kind, ch.priority), (UDP_LIKE, sent.priority));
            let got = log.on(r, "game");
            let mut seen = HashSet::new();
            for g in got {
                let (s, k) = header(&g.payload).expect("a header");
                assert_eq!(s, 1);
                assert!(seen.insert(k), "seed {seed}: receiver {r} got {k} twice");
                let want = format!("1:{k}:{}", "z".repeat((k % 40) as usize));
                assert_eq!(g.payload, want.as_bytes(), "seed {seed}");
                assert!(g.binary);
            }
            // 5% loss each way on both hops: most arrive, not all need to.
            assert!(
                got.len() > N as usize * 3 / 4,
                "seed {seed}: only {} of {N}",
                got.len()
            );
        }
        assert!(log.on(1, "game").is_empty(), "the sender hears itself");
    }
}

#[test]
fn sim_room_relay_send_data_to_the_room_and_to_one_member() {
    let members = [(1, ROOM), (2, ROOM), (3, ROOM), (4, OTHER_ROOM)];
    let mut sim = room_sim(21, &link(0.0), SctpLimits::default(), &members);
    let mut log = Log::default();
    let srv = addr(SRV);
    let hello = Bytes::from_static(b"hello");
    let n = sim
        .shard_mut(srv)
        .send_data(ROOM, None, "announce", false, hello.clone())
        .unwrap();
    assert_eq!(n, 3);
    let to_two = Bytes::from_static(&[1, 2, 3]);
    let n = sim
        .shard_mut(srv)
        .send_data(ROOM, Some(PeerId(2)), "announce", true, to_two.clone())
        .unwrap();
    assert_eq!(n, 1);
    sim.command(
        srv,
        Command::SendData {
            room: ROOM,
            to: None,
            label: "announce".into(),
            binary: false,
            payload: Bytes::new(),
        },
    )
    .unwrap();
    assert_eq!(
        sim.shard_mut(srv)
            .send_data(ROOM, Some(PeerId(4)), "announce", false, hello.clone()),
        Err(CommandError::NotMember {
            peer: PeerId(4),
            room: ROOM
        })
    );
    assert_eq!(
        sim.shard_mut(srv).send_data(
            ROOM,
            None,
            "announce",
            true,
            Bytes::from(vec![0; 256 * 1024 + 1])
        ),
        Err(CommandError::TooLarge {
            size: 256 * 1024 + 1,
            max: 256 * 1024
        })
    );
    run(
        &mut sim,
        &mut log,
        Duration::from_secs(10),
        "send data",
        |log| (1..=3).all(|r| log.on(r, "announce").len() >= 2 + usize::from(r == 2)),
    );
    sim.run_for(Duration::from_secs(2)).ok();
    log.take(&mut sim);
    let text = |p: &Bytes| Got {
        binary: false,
        payload: p.clone(),
    };
    for r in 1..=3u64 {
        let mut want = vec![text(&hello)];
        if r == 2 {
            want.push(Got {
                binary: true,
                payload: to_two.clone(),
            });
        }
        want.push(text(&Bytes::new()));
        assert_eq!(log.on(r, "announce"), want.as_slice(), "member {r}");
        let (id, _, protocol) = log.opened[&r][0].clone();
        assert_eq!(protocol, "");
        let ch = sim.shard(cli(r)).channel(PeerId(r), id).unwrap();
        assert_eq!(ch.kind, RELIABLE, "opened reliable and ordered");
    }
    assert_eq!(log.total(), 3 * 2 + 1, "the other room heard something");
    assert_eq!(sim.shard(srv).stats().relay_messages, 7);
}

/// Members 1–3 in one room; the server's send buffer is small (1 MiB, so the relay's
/// high watermark is 768 KiB) so a receiver that stops reading reaches it quickly.
fn slow_room(seed: u64) -> Sim {
    let limits = SctpLimits {
        send_buffer: 1024 * 1024,
        ..SctpLimits::default()
    };
    room_sim(seed, &link(0.0), limits, &[(1, ROOM), (2, ROOM), (3, ROOM)])
}

/// Member 3 stops reading (nothing from the server reaches it any more) while
/// member 1 sends messages `range` on `channel` at a pace member 2 keeps up with;
/// runs until member 2 has every message of `label` up to `range.end`, and a
/// little longer.
fn member_3_goes_deaf(
    sim: &mut Sim,
    log: &mut Log,
    channel: u16,
    label: &str,
    range: std::ops::Range<u32>,
) {
    sim.set_link(addr(SRV), cli(3), link(1.0));
    let end = range.end as usize;
    send_paced(sim, 1, channel, range, 20, Duration::from_millis(50));
    run(sim, log, Duration::from_secs(60), label, |log| {
        log.on(2, label).len() >= end
    });
    sim.run_for(Duration::from_secs(2)).ok();
    log.take(sim);
}

#[test]
fn sim_room_relay_slow_receiver_on_a_reliable_channel_is_disconnected() {
    const N: u32 = 600;
    let mut sim = slow_room(31);
    let entities_with_three = sim.shard(addr(SRV)).entity_count();
    let mut log = Log::default();
    let mut chat = [0u16; 4];
    for i in 1..=3 {
        chat[i as usize] = open_from_client(&mut sim, &mut log, i, "chat", "", RELIABLE);
    }
    // 600 messages with twelve of 70 KiB: over the 768 KiB member 3 may owe, so it
    // holds member 1 back until the hold limit cuts it off.
    member_3_goes_deaf(&mut sim, &mut log, chat[1], "chat", 0..N);
    let want: Vec<Got> = (0..N).map(|k| message(1, k, false)).collect();
    assert!(
        log.on(2, "chat") == want.as_slice(),
        "member 2 missed or reordered"
    );
    assert_eq!(
        log.removed,
        vec![(addr(SRV), PeerId(3), RemoveReason::SlowReceiver)]
    );
    let srv = sim.shard(addr(SRV));
    assert_eq!(srv.stats().relay_slow_receivers, 1);
    assert_eq!(srv.room_member_count(ROOM), 2);
    assert_eq!(srv.peer_count(), 2);
    assert_eq!(
        srv.entity_count(),
        entities_with_three - 1,
        "member 3 left something"
    );
}

#[test]
fn sim_room_relay_slow_receiver_on_an_unreliable_channel_loses_messages_not_membership() {
    const N: u32 = 600;
    let mut sim = slow_room(32);
    let mut log = Log::default();
    let game = open_from_client(&mut sim, &mut log, 1, "game", "", UDP_LIKE);
    // Let shoal open "game" on members 2 and 3 before member 3 goes deaf.
    send_range(&mut sim, 1, game, 0..1, false);
    run(
        &mut sim,
        &mut log,
        Duration::from_secs(10),
        "game opened",
        |log| log.label(3, 1).is_some() && log.label(2, 1).is_some(),
    );
    member_3_goes_deaf(&mut sim, &mut log, game, "game", 1..N);
    assert_eq!(
        numbers_on(&log, 2, "game"),
        (0..N).collect::<Vec<_>>(),
        "member 2 lost or duplicated"
    );
    let srv = sim.shard(addr(SRV));
    assert!(
        srv.stats().relay_dropped > 0,
        "member 3's full buffer dropped nothing"
    );
    assert_eq!(srv.stats().relay_slow_receivers, 0);
    assert!(log.removed.is_empty(), "{:?}", log.removed);
    assert_eq!(srv.room_member_count(ROOM), 3);
}

/// A member the server removes (WHIP DELETE, RemoveParticipant, DeleteRoom) is told at
/// once with a DTLS close_notify (RFC 7675 §5.2), not left to find out when its
/// consent checks go unanswered 30 s later.
#[test]
fn a_member_the_server_removes_is_told_at_once() {
    let mut sim = slow_room(33);
    sim.command(addr(SRV), Command::RemovePeer(PeerId(2)))
        .unwrap();
    sim.run_until(
        |s| s.shard(cli(2)).peer_count() == 0,
        Duration::from_secs(2),
    )
    .expect("the client saw close_notify");
    assert_eq!(sim.shard(cli(1)).peer_count(), 1, "member 1 stays");
}

/// A label longer than shoal relays (a DATA_CHANNEL_OPEN may carry 64 KiB of label
/// and protocol) gets no channel opened on the others: its messages are counted as
/// undeliverable, and nobody's send buffer fills with OPENs, so nobody is
/// disconnected for it.
#[test]
fn huge_labels_are_not_relayed_and_cost_no_one_their_membership() {
    let mut sim = slow_room(34);
    let mut log = Log::default();
    let label = "x".repeat(shoal_systems::passes::datachannel::relay::MAX_RELAYED_NAME + 1);
    let ch = open_from_client(&mut sim, &mut log, 1, &label, "", RELIABLE);
    send_range(&mut sim, 1, ch, 0..3, false);
    sim.run_for(Duration::from_secs(2)).unwrap();
    log.take(&mut sim);
    assert!(log.on(2, &label).is_empty() && log.on(3, &label).is_empty());
    let srv = sim.shard(addr(SRV));
    assert_eq!(
        srv.stats().relay_undeliverable,
        6,
        "3 messages, 2 receivers"
    );
    assert_eq!(srv.room_member_count(ROOM), 3);
}

#[test]
fn a_member_that_restarts_its_association_gets_nothing_on_its_old_channels() {
    let room = RoomId(1);
    let link = LinkConfig::default();
    let mut sim = room_sim(1, &link, SctpLimits::default(), &[(1, room), (2, room)]);
    let mut log = Log::default();
    let chat = open_from_client(&mut sim, &mut log, 1, "chat", "", RELIABLE);
    send_range(&mut sim, 1, chat, 0..1, false);
    sim.run_until(
        |s| {
            log.take(s);
            log.on(2, "chat").len() == 1
        },
        Duration::from_secs(10),
    )
    .unwrap();
    sim.run_for(Duration::from_millis(500)).unwrap();
    log.take(&mut sim);
    // Member 1's next message is slow to reach the server: it arrives in the tick
    // of member 2's restart (INIT, INIT ACK, COOKIE ECHO: 30 ms).
    let slow = LinkConfig {
        latency: Duration::from_millis(30),
        ..LinkConfig::default()
    };
    sim.set_link(cli(1), addr(SRV), slow);
    send_range(&mut sim, 1, chat, 1..2, false);
    sim.shard_mut(cli(2)).forget_sctp(PeerId(2), true).unwrap();
    let mut server = Vec::new();
    let mut stray = 0;
    sim.run_until(
        |s| {
            for (node, e) in s.drain_events() {
                match e {
                    ShardEvent::SctpMessage { .. } if node == cli(2) => stray += 1,
                    e if node == addr(SRV) => server.push(e),
                    e => log.take_one(node, e),
                }
            }
            log.on(2, "chat").len() == 2
        },
        Duration::from_secs(10),
    )
    .expect("member 2 gets the message on a channel opened anew");
    // Nothing reached member 2 on a stream of the old association.
    assert_eq!(stray, 0);
    assert_eq!(log.on(2, "chat")[1], message(1, 1, false));
    // The server reported the restart in order: the old association and its channel
    // ended before the new association came up.
    let at = |f: &dyn Fn(&ShardEvent) -> bool| server.iter().position(f).unwrap();
    let closed = at(
        &|e| matches!(e, ShardEvent::SctpClosed { peer: PeerId(2), reason } if *reason == AssocEnd::PeerRestarted),
    );
    let channel = at(&|e| {
        matches!(
            e,
            ShardEvent::ChannelClosed {
                peer: PeerId(2),
                ..
            }
        )
    });
    let up = at(&|e| matches!(e, ShardEvent::SctpEstablished { peer: PeerId(2) }));
    assert!(closed < channel && channel < up, "{server:?}");
}

/// Relay limits small enough for a test to pass them within seconds.
fn tight_relay() -> RelayLimits {
    RelayLimits {
        high_watermark: 256 * 1024,
        low_watermark: 128 * 1024,
        hold_limit: Duration::from_secs(5),
        ..RelayLimits::default()
    }
}

/// Members 1–3 in one room on clean 10 ms links, except that what the server sends
/// member 3 goes at `slow_bps` through a 64 KiB drop-tail queue. The server's
/// receive window is 512 KiB (4 MiB by default), so what it holds back of a sender
/// fills the window soon.
fn room_with_a_slow_member(seed: u64, slow_bps: u64) -> Sim {
    room_with_a_slow_member_and(seed, slow_bps, small_receive_window(), tight_relay())
}

/// The server's SCTP limits of [`room_with_a_slow_member`].
fn small_receive_window() -> SctpLimits {
    SctpLimits {
        receive_window: 512 * 1024,
        ..SctpLimits::default()
    }
}

/// [`room_with_a_slow_member`] with the server's SCTP and relay limits given.
fn room_with_a_slow_member_and(
    seed: u64,
    slow_bps: u64,
    limits: SctpLimits,
    relay: RelayLimits,
) -> Sim {
    let members = [(1, ROOM), (2, ROOM), (3, ROOM)];
    let mut sim = room_sim_with(seed, &LinkConfig::default(), limits, relay, &members);
    sim.set_link(addr(SRV), cli(3), slow_link(slow_bps, 0.0));
    sim
}

/// Runs until member `i`'s stack has sent all it had queued, and a second more:
/// on these loss-free 10 ms links the server has acknowledged all of it by then.
fn until_sent(sim: &mut Sim, log: &mut Log, i: u64) {
    sim.run_until(
        |s| {
            log.take(s);
            s.shard(cli(i)).sctp_buffered_amount(PeerId(i)) == 0
        },
        Duration::from_secs(120),
    )
    .unwrap_or_else(|e| panic!("member {i} still has queued messages: {e}"));
    sim.run_for(Duration::from_secs(1)).ok();
    log.take(sim);
}

fn slow_link(bps: u64, loss: f64) -> LinkConfig {
    LinkConfig {
        bandwidth_bps: Some(bps),
        queue_limit_bytes: 64 * 1024,
        loss,
        ..LinkConfig::default()
    }
}

/// What a browser application with flow control keeps queued at most
/// (`bufferedAmount` against its own high watermark).
const APP_HIGH: usize = 1024 * 1024;

/// Sends member `i`'s messages `range` on `channel` as an application with flow
/// control does: in steps of 5 ms of virtual time, as many as keep its buffered
/// amount under [`APP_HIGH`]. `each` runs after every step. Returns the largest
/// buffered amount the sender had.
fn send_with_flow_control(
    sim: &mut Sim,
    log: &mut Log,
    i: u64,
    channel: u16,
    range: std::ops::Range<u32>,
    mut each: impl FnMut(&mut Sim, &mut Log),
) -> usize {
    let mut most = 0;
    let mut k = range.start;
    while k < range.end {
        while k < range.end && sim.shard(cli(i)).sctp_buffered_amount(PeerId(i)) < APP_HIGH {
            send_range(sim, i, channel, k..k + 1, false);
            k += 1;
        }
        most = most.max(sim.shard(cli(i)).sctp_buffered_amount(PeerId(i)));
        sim.run_for(Duration::from_millis(5)).ok();
        log.take(sim);
        each(sim, log);
    }
    most
}

/// Member 1 sends on a reliable channel far faster than member 3's 1 Mbit/s path
/// takes. The relay holds member 1 back (its SCTP window closes) instead of letting
/// member 3's queue grow: both receivers get every message exactly once and in
/// order, member 1's own stack buffers what its application sends, nobody is
/// disconnected, and member 3's queue at the server never passes the high
/// watermark. Then member 3's path dies: once it has held member 1 back for the hold
/// limit it alone is cut off, as a slow receiver, and the room goes on.
#[test]
fn reliable_relay_paces_sender() {
    const FIRST: u32 = 1500;
    const ALL: u32 = 2500;
    let relay = tight_relay();
    let mut sim = room_with_a_slow_member(41, 1_000_000);
    let mut log = Log::default();
    let chat = open_from_client(&mut sim, &mut log, 1, "chat", "", RELIABLE);
    let mut fullest = 0;
    let mut watch = |sim: &mut Sim, _: &mut Log| {
        fullest = fullest.max(sim.shard(addr(SRV)).sctp_buffered_amount(PeerId(3)));
    };
    let sender_most = send_with_flow_control(&mut sim, &mut log, 1, chat, 0..FIRST, &mut watch);
    run(
        &mut sim,
        &mut log,
        Duration::from_secs(60),
        "first part",
        |log| log.on(3, "chat").len() >= FIRST as usize,
    );
    sim.run_for(Duration::from_secs(1)).ok();
    log.take(&mut sim);
    let want: Vec<Got> = (0..FIRST).map(|k| message(1, k, false)).collect();
    for r in [2, 3] {
        assert!(
            log.on(r, "chat") == want.as_slice(),
            "member {r} missed, repeated or reordered"
        );
    }
    assert!(log.removed.is_empty(), "{:?}", log.removed);
    let srv = sim.shard(addr(SRV));
    assert!(
        srv.stats().relay_holds > 0 && srv.congestion(PeerId(1)).unwrap().relay_holds > 0,
        "member 1 was never held back"
    );
    assert!(
        sender_most >= APP_HIGH / 2,
        "the back-pressure never reached member 1's stack: it buffered at most {sender_most}"
    );
    assert!(
        fullest <= relay.high_watermark,
        "member 3's queue reached {fullest}"
    );
    assert_eq!(srv.stats().relay_slow_receivers, 0);

    // Member 3's path dies; member 1 goes on.
    let dead_at = sim.now();
    sim.set_link(addr(SRV), cli(3), slow_link(1_000_000, 1.0));
    let mut cut_at = None;
    let mut note_cut = |sim: &mut Sim, log: &mut Log| {
        if cut_at.is_none() && !log.removed.is_empty() {
            cut_at = Some(sim.now());
        }
    };
    send_with_flow_control(&mut sim, &mut log, 1, chat, FIRST..ALL, &mut note_cut);
    run(
        &mut sim,
        &mut log,
        Duration::from_secs(60),
        "second part",
        |log| log.on(2, "chat").len() >= ALL as usize,
    );
    sim.run_for(Duration::from_secs(1)).ok();
    log.take(&mut sim);
    let cut_at = cut_at.unwrap_or_else(|| sim.now());
    assert_eq!(
        log.removed,
        vec![(addr(SRV), PeerId(3), RemoveReason::SlowReceiver)],
        "only member 3 is cut off, as a slow receiver"
    );
    let after = cut_at.saturating_since(dead_at);
    assert!(
        after >= relay.hold_limit && after <= relay.hold_limit + Duration::from_secs(5),
        "member 3 was cut off {after:?} after its path died"
    );
    let want: Vec<Got> = (0..ALL).map(|k| message(1, k, false)).collect();
    assert!(
        log.on(2, "chat") == want.as_slice(),
        "member 2 missed, repeated or reordered"
    );
    let got3 = log.on(3, "chat");
    assert!(
        got3 == &want[..got3.len()],
        "member 3 got a gap or a repeat before it was cut off"
    );
    let srv = sim.shard(addr(SRV));
    assert_eq!(srv.stats().relay_slow_receivers, 1);
    assert_eq!(srv.room_member_count(ROOM), 2);
}

/// Asserts that each of `receivers` got sender `s`'s messages `0..n` on "chat",
/// once and in order.
fn assert_got_all(log: &Log, receivers: &[u64], s: u64, n: u32) {
    let want: Vec<Got> = (0..n).map(|k| message(s, k, false)).collect();
    for &r in receivers {
        assert!(
            log.on(r, "chat") == want.as_slice(),
            "member {r} missed, repeated or reordered: got {}",
            log.on(r, "chat").len()
        );
    }
}

/// Asserts that the server kept one leaving member until the relay had taken
/// what its buffer held, none standing still too long, that it cut `slow`
/// receivers off, and that two members are left.
fn assert_one_kept_two_left(sim: &Sim, slow: u64) {
    let srv = sim.shard(addr(SRV));
    let stats = srv.stats();
    assert_eq!(stats.relay_closing_kept, 1, "{stats:?}");
    assert_eq!(stats.relay_closing_expired, 0, "{stats:?}");
    assert_eq!(stats.relay_slow_receivers, slow, "{stats:?}");
    assert_eq!(srv.peer_count(), 2);
    assert_eq!(srv.room_member_count(ROOM), 2);
}

/// How far members 2 and 3 got on "chat", who was removed, and the server's
/// counters: what a test that waited in vain says.
fn where_things_stand(sim: &Sim, log: &Log) -> String {
    format!(
        "member 2 has {}, member 3 {}; removed {:?}; server {:?}",
        log.on(2, "chat").len(),
        log.on(3, "chat").len(),
        log.removed,
        sim.shard(addr(SRV)).stats()
    )
}

/// Member 1 sends on a reliable channel faster than member 3's 1 Mbit/s path takes,
/// so the relay holds its messages back in the server's receive buffer, and then
/// leaves cleanly: its SCTP association ends (RFC 9260 §9.2: SHUTDOWN once all it
/// sent is acknowledged) and its DTLS connection closes, both in one batch. Whatever
/// member 1 sent was acknowledged, so it reaches both other members, once and in
/// order; member 1 is removed once the relay has taken it, as a client that left,
/// after its association's end was seen. Member 1 sends its whole range, and the
/// server's buffer of 512 KiB holds up to about 500 of its messages, so it still
/// held some when member 1 left (`relay_closing_kept`).
#[test]
fn a_member_that_leaves_cleanly_has_what_was_held_for_it_relayed() {
    const N: u32 = 1500;
    let mut sim = room_with_a_slow_member(43, 1_000_000);
    let mut log = Log::default();
    let chat = open_from_client(&mut sim, &mut log, 1, "chat", "", RELIABLE);
    send_with_flow_control(&mut sim, &mut log, 1, chat, 0..N, |_, _| {});
    assert!(
        sim.shard(addr(SRV)).stats().relay_holds > 0,
        "member 1 was never held back"
    );
    sim.shard_mut(cli(1)).drain();
    // What the server reported of member 1's end, in order.
    let mut ends = Vec::new();
    let everything =
        |log: &Log| log.on(2, "chat").len() >= N as usize && log.on(3, "chat").len() >= N as usize;
    sim.run_until(
        |s| {
            for (node, e) in s.drain_events() {
                if node == addr(SRV) {
                    match &e {
                        ShardEvent::SctpClosed { peer, reason } if *peer == PeerId(1) => {
                            ends.push(format!("sctp closed: {reason:?}"));
                        }
                        ShardEvent::PeerRemoved { peer, reason } if *peer == PeerId(1) => {
                            ends.push(format!("removed: {reason:?}"));
                        }
                        _ => {}
                    }
                }
                log.take_one(node, e);
            }
            everything(&log) && !log.removed.is_empty()
        },
        Duration::from_secs(120),
    )
    .unwrap_or_else(|e| panic!("{e}: {}", where_things_stand(&sim, &log)));
    sim.run_for(Duration::from_secs(1)).ok();
    log.take(&mut sim);
    assert_got_all(&log, &[2, 3], 1, N);
    assert_eq!(
        log.removed,
        vec![(addr(SRV), PeerId(1), RemoveReason::DtlsClosed)]
    );
    assert_eq!(
        ends,
        [
            format!("sctp closed: {:?}", AssocEnd::Shutdown),
            format!("removed: {:?}", RemoveReason::DtlsClosed),
        ]
    );
    assert_one_kept_two_left(&sim, 0);
}

/// As above, but member 3's path dies once member 1 has left: member 3 holds the
/// closing member back like any sender and is cut off as a slow receiver after the
/// hold limit; member 2 still gets everything, once and in order, and member 1 goes
/// once it has, its buffer never having stood still for twice the hold limit.
#[test]
fn a_receiver_that_dies_does_not_keep_a_closing_member() {
    const N: u32 = 1500;
    let mut sim = room_with_a_slow_member(44, 1_000_000);
    let mut log = Log::default();
    let chat = open_from_client(&mut sim, &mut log, 1, "chat", "", RELIABLE);
    send_with_flow_control(&mut sim, &mut log, 1, chat, 0..N, |_, _| {});
    sim.shard_mut(cli(1)).drain();
    sim.run_until(
        |s| {
            log.take(s);
            s.shard(addr(SRV)).stats().relay_closing_kept > 0
        },
        Duration::from_secs(10),
    )
    .expect("member 1 closes with messages left");
    sim.set_link(addr(SRV), cli(3), link(1.0));
    run(
        &mut sim,
        &mut log,
        Duration::from_secs(60),
        "member 2 has everything and member 1 is gone",
        |log| log.on(2, "chat").len() >= N as usize && log.removed.iter().any(|r| r.1 == PeerId(1)),
    );
    let want: Vec<Got> = (0..N).map(|k| message(1, k, false)).collect();
    assert!(
        log.on(2, "chat") == want.as_slice(),
        "member 2 missed, repeated or reordered: got {}",
        log.on(2, "chat").len()
    );
    assert!(log.on(3, "chat").len() < N as usize);
    let mut removed = log.removed.clone();
    removed.sort_by_key(|r| r.1.0);
    assert_eq!(
        removed,
        vec![
            (addr(SRV), PeerId(1), RemoveReason::DtlsClosed),
            (addr(SRV), PeerId(3), RemoveReason::SlowReceiver),
        ]
    );
    let stats = sim.shard(addr(SRV)).stats();
    assert_eq!(stats.relay_closing_kept, 1, "{stats:?}");
    assert_eq!(stats.relay_closing_expired, 0, "{stats:?}");
    assert_eq!(stats.relay_slow_receivers, 1, "{stats:?}");
}

/// Member 1 sends on a reliable channel faster than member 3's 100 kbit/s path
/// takes, so the relay holds its messages back in the server's receive buffer.
/// Once the server has acknowledged all of them, member 1's path dies both ways,
/// and its consent expires some 30 s later (RFC 7675 §5.1) while the server still
/// holds some of them (`relay_closing_kept`: about 930 KB sent, of which the server
/// held up to 768 KB, draining at 12.5 KB/s). SCTP acknowledged them, so they reach
/// both other members, once and in order; member 1 is removed for its lost consent
/// when it expires, not when the last of its messages has gone. The hold limit is
/// long enough that member 3, which reaches the low watermark every 10 s or so, is
/// never cut off.
#[test]
fn a_member_whose_consent_expires_has_what_was_held_for_it_relayed() {
    const N: u32 = 600;
    let relay = RelayLimits {
        hold_limit: Duration::from_secs(60),
        ..tight_relay()
    };
    let mut sim = room_with_a_slow_member_and(45, 100_000, small_receive_window(), relay);
    let mut log = Log::default();
    let chat = open_from_client(&mut sim, &mut log, 1, "chat", "", RELIABLE);
    send_with_flow_control(&mut sim, &mut log, 1, chat, 0..N, |_, _| {});
    until_sent(&mut sim, &mut log, 1);
    let dead_at = sim.now();
    sim.set_link_both(addr(SRV), cli(1), link(1.0));
    let mut removed_at = None;
    let mut held_then = 0;
    sim.run_until(
        |s| {
            log.take(s);
            if removed_at.is_none() && !log.removed.is_empty() {
                removed_at = Some(s.now());
                held_then = N as usize - log.on(3, "chat").len();
            }
            removed_at.is_some()
                && log.on(2, "chat").len() >= N as usize
                && log.on(3, "chat").len() >= N as usize
        },
        Duration::from_secs(180),
    )
    .unwrap_or_else(|e| panic!("{e}: {}", where_things_stand(&sim, &log)));
    sim.run_for(Duration::from_secs(1)).ok();
    log.take(&mut sim);
    assert_got_all(&log, &[2, 3], 1, N);
    assert_eq!(
        log.removed,
        vec![(addr(SRV), PeerId(1), RemoveReason::ConsentExpired)]
    );
    let after = removed_at.expect("removed").saturating_since(dead_at);
    assert!(
        after >= Duration::from_secs(23) && after <= Duration::from_secs(31),
        "member 1 was removed {after:?} after its path died"
    );
    assert!(
        held_then > 0,
        "nothing was held when member 1's consent expired"
    );
    assert_eq!(sim.shard(addr(SRV)).stats().consent_expired, 1);
    assert_one_kept_two_left(&sim, 0);
}

/// Member 2 sends on a reliable channel faster than member 3's 1 Mbit/s path takes,
/// so the relay holds its messages back in the server's receive buffer. Once the
/// server has acknowledged all of them, nothing the server sends member 2 reaches
/// it any more (its checks still arrive, so its consent holds), and the owner sends
/// it 70 KiB messages until its 1 MiB send buffer refuses one: it is cut off as a
/// slow receiver (`Shard::send_data`, outside a tick). What it sent was
/// acknowledged, so it still reaches members 1 and 3, once and in order.
#[test]
fn a_slow_receiver_cut_off_has_what_it_sent_relayed() {
    const N: u32 = 1500;
    let limits = SctpLimits {
        send_buffer: 1024 * 1024,
        ..small_receive_window()
    };
    let mut sim = room_with_a_slow_member_and(46, 1_000_000, limits, tight_relay());
    let mut log = Log::default();
    let chat = open_from_client(&mut sim, &mut log, 2, "chat", "", RELIABLE);
    send_with_flow_control(&mut sim, &mut log, 2, chat, 0..N, |_, _| {});
    until_sent(&mut sim, &mut log, 2);
    sim.set_link(addr(SRV), cli(2), link(1.0));
    let note = Bytes::from(vec![b'n'; 70 * 1024]);
    let mut notes = 0;
    while sim.shard(addr(SRV)).stats().relay_slow_receivers == 0 {
        assert!(notes < 32, "member 2's send buffer never filled");
        sim.shard_mut(addr(SRV))
            .send_data(ROOM, Some(PeerId(2)), "notes", true, note.clone())
            .expect("send_data");
        notes += 1;
    }
    let held_then = N as usize - log.on(3, "chat").len();
    run(
        &mut sim,
        &mut log,
        Duration::from_secs(120),
        "members 1 and 3 have everything",
        |log| log.on(1, "chat").len() >= N as usize && log.on(3, "chat").len() >= N as usize,
    );
    sim.run_for(Duration::from_secs(1)).ok();
    log.take(&mut sim);
    assert_got_all(&log, &[1, 3], 2, N);
    assert!(held_then > 0, "nothing was held when member 2 was cut off");
    assert_eq!(
        log.removed,
        vec![(addr(SRV), PeerId(2), RemoveReason::SlowReceiver)]
    );
    assert_one_kept_two_left(&sim, 1);
}

/// A node-to-node link whose association did not shut down cleanly goes with what
/// it holds. On the server, link peer 9 to another node (one shard, member 2 there)
/// holds member 2's messages back for member 3's 100 kbit/s path; then the two
/// nodes lose each other, and the link's consent expires on the server. A node
/// closes the room's reliable channels for a link lost so (docs/cluster.md, "A link
/// that fails"): what the link held must not reach member 3 after that close, with
/// the loss before it unseen. So the link is not kept (`relay_closing_kept` stays
/// 0): member 3 has member 2's first messages, in order and none twice, and not the
/// rest, which a member that is not a link would have had relayed.
#[test]
fn a_link_lost_uncleanly_goes_with_what_it_held() {
    const N: u32 = 600;
    const LINK: PeerId = PeerId(9);
    let far: std::net::SocketAddr = "10.0.9.1:7100".parse().unwrap();
    let relay = RelayLimits {
        hold_limit: Duration::from_secs(60),
        ..tight_relay()
    };
    let mut sim = Sim::new(47);
    add_server_with(&mut sim, addr(SRV), small_receive_window(), relay);
    add_server_with(&mut sim, far, SctpLimits::default(), RelayLimits::default());
    join(&mut sim, addr(SRV), 3, ROOM, &LinkConfig::default());
    join(&mut sim, far, 2, ROOM, &LinkConfig::default());
    sim.set_link(addr(SRV), cli(3), slow_link(100_000, 0.0));
    sim.set_link_both(addr(SRV), far, LinkConfig::default());
    sim.connect_link(addr(SRV), far, LINK, ROOM).unwrap();
    sim.run_until(
        |s| {
            [(addr(SRV), 3), (far, 2)].iter().all(|&(at, i)| {
                s.shard(at).sctp_established(PeerId(i))
                    && s.shard(cli(i)).sctp_established(PeerId(i))
            }) && s.shard(addr(SRV)).sctp_established(LINK)
                && s.shard(far).sctp_established(LINK)
        },
        Duration::from_secs(60),
    )
    .expect("associations up");
    let mut log = Log::default();
    log.take(&mut sim);
    let chat = open_from_client(&mut sim, &mut log, 2, "chat", "", RELIABLE);
    send_with_flow_control(&mut sim, &mut log, 2, chat, 0..N, |_, _| {});
    until_sent(&mut sim, &mut log, 2);
    sim.run_until(
        |s| s.shard(far).sctp_buffered_amount(LINK) == 0,
        Duration::from_secs(60),
    )
    .expect("the far node sent everything over the link");
    sim.run_for(Duration::from_secs(1)).ok();
    log.take(&mut sim);
    sim.set_link_both(addr(SRV), far, link(1.0));
    sim.run_until(
        |s| {
            log.take(s);
            log.removed.iter().any(|r| r.0 == addr(SRV) && r.1 == LINK)
        },
        Duration::from_secs(60),
    )
    .expect("the link's consent expires");
    sim.run_for(Duration::from_secs(90)).ok();
    log.take(&mut sim);
    assert!(
        log.removed
            .contains(&(addr(SRV), LINK, RemoveReason::ConsentExpired)),
        "{:?}",
        log.removed
    );
    let want: Vec<Got> = (0..N).map(|k| message(2, k, false)).collect();
    let got = log.on(3, "chat");
    assert!(got == &want[..got.len()], "member 3 got a gap or a repeat");
    assert!(
        got.len() < N as usize,
        "member 3 got everything: the link was kept after it was lost"
    );
    let stats = sim.shard(addr(SRV)).stats();
    assert_eq!(stats.relay_closing_kept, 0, "{stats:?}");
    assert_eq!(stats.relay_slow_receivers, 0, "{stats:?}");
    assert_eq!(sim.shard(addr(SRV)).peer_count(), 1);
}

/// Member 1 floods an unreliable channel at about 6 Mbit/s; member 2's path takes
/// it all, member 3's only 1 Mbit/s. Member 2 gets every message, once; what member 3
/// cannot take is dropped at its queue at the server and counted for it alone;
/// member 1 is never held back; member 3's queue stays at the high watermark (plus
/// one message), and nobody is disconnected.
#[test]
fn unreliable_relay_drops_at_receiver() {
    const N: u32 = 3000;
    let relay = tight_relay();
    let mut sim = room_with_a_slow_member(42, 1_000_000);
    let mut log = Log::default();
    let game = open_from_client(&mut sim, &mut log, 1, "game", "", UDP_LIKE);
    let largest = (0..N)
        .map(|k| message(1, k, false).payload.len())
        .max()
        .unwrap();
    let mut fullest = 0;
    let mut sender_most = 0;
    for k in (0..N).step_by(10) {
        send_range(&mut sim, 1, game, k..(k + 10).min(N), false);
        sim.run_for(Duration::from_millis(20)).ok();
        log.take(&mut sim);
        fullest = fullest.max(sim.shard(addr(SRV)).sctp_buffered_amount(PeerId(3)));
        sender_most = sender_most.max(sim.shard(cli(1)).sctp_buffered_amount(PeerId(1)));
    }
    sim.run_for(Duration::from_secs(10)).ok();
    log.take(&mut sim);
    assert_eq!(
        numbers_on(&log, 2, "game"),
        (0..N).collect::<Vec<_>>(),
        "member 2 lost or repeated"
    );
    let mut got3: Vec<u32> = log
        .on(3, "game")
        .iter()
        .map(|g| header(&g.payload).unwrap().1)
        .collect();
    got3.sort_unstable();
    got3.dedup();
    assert_eq!(got3.len(), log.on(3, "game").len(), "member 3 got a repeat");
    let srv = sim.shard(addr(SRV));
    let dropped3 = srv.congestion(PeerId(3)).unwrap().relay_dropped;
    assert!(
        dropped3 > 0 && got3.len() < N as usize,
        "member 3 got {} and had {dropped3} dropped",
        got3.len()
    );
    assert!(got3.len() as u64 + dropped3 <= u64::from(N));
    assert_eq!(srv.congestion(PeerId(2)).unwrap().relay_dropped, 0);
    assert_eq!(srv.stats().relay_dropped, dropped3);
    assert_eq!(srv.stats().relay_holds, 0, "member 1 was held back");
    assert!(
        sender_most < relay.high_watermark,
        "member 1's stack buffered {sender_most}"
    );
    assert!(
        fullest <= relay.high_watermark + largest,
        "member 3's queue reached {fullest}"
    );
    assert!(log.removed.is_empty(), "{:?}", log.removed);
    assert_eq!(srv.room_member_count(ROOM), 3);
}

/// A member held back for a slow receiver closes one of its other channels: the
/// close completes while it is still held (a stream's reset waits only for that
/// stream's own messages, not for everything the member sent behind it).
#[test]
fn a_held_sender_closes_a_channel_at_once() {
    let mut sim = room_with_a_slow_member(43, 300_000);
    let mut log = Log::default();
    let bulk = open_from_client(&mut sim, &mut log, 1, "bulk", "", RELIABLE);
    let chat = open_from_client(&mut sim, &mut log, 1, "chat", "", RELIABLE);
    let held = |sim: &Sim| {
        sim.shard(addr(SRV))
            .congestion(PeerId(1))
            .is_some_and(|c| c.relay_held)
    };
    // Bulk data until the relay holds member 1 back.
    let mut k = 0;
    while !held(&sim) {
        assert!(k < 3000, "member 1 was never held back");
        send_range(&mut sim, 1, bulk, k..k + 20, false);
        k += 20;
        sim.run_for(Duration::from_millis(5)).ok();
        log.take(&mut sim);
    }
    sim.shard_mut(cli(1))
        .close_channel(PeerId(1), chat)
        .unwrap();
    let mut closed_while_held = None;
    sim.run_until(
        |s| {
            let now_held = held(s);
            let events: Vec<_> = s.drain_events().collect();
            for (node, e) in events {
                match e {
                    ShardEvent::ChannelClosed { peer, channel }
                        if node == addr(SRV) && peer == PeerId(1) =>
                    {
                        closed_while_held.get_or_insert((channel, now_held));
                    }
                    e => log.take_one(node, e),
                }
            }
            closed_while_held.is_some()
        },
        Duration::from_secs(5),
    )
    .expect("the server closed member 1's chat");
    let (channel, still_held) = closed_while_held.unwrap();
    assert!(still_held, "chat closed only once member 1 was let go");
    // The server's channel is member 1's chat (the same stream id on both sides).
    assert_eq!(channel, chat);
    assert!(log.removed.is_empty(), "{:?}", log.removed);
}

/// The id of client `r`'s channel labelled `label`, as it opened.
fn channel_of(log: &Log, r: u64, label: &str) -> u16 {
    log.opened
        .get(&r)
        .and_then(|l| l.iter().find(|(_, l, _)| l == label))
        .map(|(id, ..)| *id)
        .unwrap_or_else(|| panic!("client {r} has no channel {label}"))
}

/// `Command::CloseReliableChannels` (what a node does when a link of the room failed
/// with messages in flight): every reliable channel of the room's members closes on
/// both sides, their unreliable ones stay open and carry on, and another room's
/// members keep theirs. A member that sends on the label again gets its messages
/// relayed on new channels.
#[test]
fn closing_a_rooms_reliable_channels_leaves_the_rest_open() {
    let members = [
        (1, ROOM),
        (2, ROOM),
        (3, ROOM),
        (4, OTHER_ROOM),
        (5, OTHER_ROOM),
    ];
    let mut sim = room_sim(40, &link(0.0), SctpLimits::default(), &members);
    let mut log = Log::default();
    let chat = open_from_client(&mut sim, &mut log, 1, "chat", "", RELIABLE);
    let game = open_from_client(&mut sim, &mut log, 1, "game", "", UDP_LIKE);
    let other = open_from_client(&mut sim, &mut log, 4, "chat", "", RELIABLE);
    send_range(&mut sim, 1, chat, 0..1, false);
    send_range(&mut sim, 1, game, 0..1, false);
    send_range(&mut sim, 4, other, 0..1, false);
    run(&mut sim, &mut log, Duration::from_secs(10), "first", |l| {
        [2, 3]
            .iter()
            .all(|&r| l.on(r, "chat").len() == 1 && l.on(r, "game").len() == 1)
            && l.on(5, "chat").len() == 1
    });

    sim.command(addr(SRV), Command::CloseReliableChannels { room: ROOM })
        .expect("taken");
    assert_eq!(
        sim.shard(addr(SRV)).stats().relay_gap_channels_closed,
        3,
        "member 1's chat, and the chat shoal opened on 2 and 3"
    );
    let open = |sim: &Sim, log: &Log, r: u64, label: &str| {
        sim.shard(cli(r))
            .channel(PeerId(r), channel_of(log, r, label))
            .is_some()
    };
    let chats: Vec<(u64, u16)> = [1, 2, 3]
        .iter()
        .map(|&r| (r, channel_of(&log, r, "chat")))
        .collect();
    sim.run_until(
        |s| {
            chats
                .iter()
                .all(|&(r, id)| s.shard(cli(r)).channel(PeerId(r), id).is_none())
        },
        Duration::from_secs(10),
    )
    .expect("the room's reliable channels close");
    log.take(&mut sim);
    for r in [1, 2, 3] {
        assert!(open(&sim, &log, r, "game"), "client {r}'s game channel");
    }
    for r in [4, 5] {
        assert!(open(&sim, &log, r, "chat"), "client {r}, in another room");
    }

    // The unreliable channel carries on; the label, sent on again, opens anew.
    send_range(&mut sim, 1, game, 1..2, false);
    let chat = open_from_client(&mut sim, &mut log, 1, "chat", "", RELIABLE);
    send_range(&mut sim, 1, chat, 1..2, false);
    run(&mut sim, &mut log, Duration::from_secs(10), "after", |l| {
        [2, 3]
            .iter()
            .all(|&r| l.on(r, "chat").len() == 2 && l.on(r, "game").len() == 2)
    });
    for r in [2, 3] {
        assert!(open(&sim, &log, r, "chat"), "client {r}'s new chat channel");
        assert_eq!(numbers_on(&log, r, "chat"), [0, 1]);
    }
}
