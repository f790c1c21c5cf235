//! A room's link between two nodes fails with messages in flight: the members'
//! reliable channels report it by closing, and never skip a message.

use std::collections::HashMap;
use std::net::UdpSocket;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use nix::sys::signal::Signal;
use shoal_components::sctp::dcep::ChannelType;
use shoal_server::endpoint::{self, Control, signal};
use shoal_systems::{Shard, ShardEvent};

use super::cluster_harness::{ClusterNode, Etcd, wait_formed};
use super::{NODE, create, events, join_client, log_with, runtime, wait_fully_linked};

/// Long enough that node-1, stopped for a few seconds, keeps its lease and its span.
const TTL: u32 = 20;
/// Messages each member sends before the link fails, and again after.
const ROUND: usize = 20;
/// Messages ann sends while node-1 is stopped: more than the link can queue.
const FLOOD: usize = 400;

/// Member `sender`'s message `seq`: its name and number, and padding (1 000 bytes in
/// the flood, so that it fills the link's queue).
fn message(sender: &str, seq: usize) -> Vec<u8> {
    let pad = if (ROUND..ROUND + FLOOD).contains(&seq) {
        1000
    } else {
        seq * 7 % 100
    };
    format!("{sender} {seq} {}", "x".repeat(pad)).into_bytes()
}

/// The sender and number of a message.
fn parse(m: &[u8]) -> (String, usize) {
    let text = std::str::from_utf8(m).expect("utf-8");
    let mut words = text.split(' ');
    let sender = words.next().expect("a sender").to_owned();
    let seq = words.next().and_then(|s| s.parse().ok()).expect("a number");
    (sender, seq)
}

/// One data channel as a member saw it, from its opening: its label, the numbers
/// of the messages it delivered in order, and whether it closed.
#[derive(Debug, Default)]
struct Instance {
    label: String,
    seqs: Vec<usize>,
    closed: bool,
}

/// What the members do, as the test moves them on: up to how many messages each
/// sends, by member; and what they tell it.
struct Script {
    names: Vec<&'static str>,
    targets: Vec<AtomicUsize>,
    /// The targets are final: a member that has every other member's last message
    /// counts itself in `done`.
    last_round: AtomicBool,
    done: AtomicUsize,
    /// By member: how many messages of every other member it has at least (the
    /// fewest it has of any, counting to the last it got).
    upto: Vec<AtomicUsize>,
    /// By member: leave now.
    stop: Vec<AtomicBool>,
    connected: AtomicUsize,
}

/// One member's endpoint loop: it opens a reliable channel labelled with its name,
/// sends its messages on it up to its target (opening a new one with the same label
/// whenever shoal closes it), and returns every channel instance it saw.
fn member(
    socket: UdpSocket,
    shard: Shard,
    index: usize,
    name: &'static str,
    script: &Script,
) -> Result<Vec<Instance>, String> {
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut own: Option<u16> = None;
    let mut instances: Vec<Instance> = Vec::new();
    let mut current: HashMap<u16, usize> = HashMap::new();
    let mut sent = 0;
    let mut finished = false;
    let mut failure = None;
    endpoint::run(socket, shard, |shard, _now, events| {
        for event in events.drain(..) {
            match event {
                ShardEvent::SctpEstablished { .. } => {
                    script.connected.fetch_add(1, Ordering::SeqCst);
                    own = shard
                        .open_channel(NODE, name, "", ChannelType::default())
                        .ok();
                }
                ShardEvent::ChannelOpen { channel, label, .. } if Some(channel) != own => {
                    current.insert(channel, instances.len());
                    instances.push(Instance {
                        label,
                        ..Instance::default()
                    });
                }
                ShardEvent::ChannelMessage {
                    channel, payload, ..
                } => match current.get(&channel) {
                    Some(&i) => instances[i].seqs.push(parse(&payload).1),
                    None => failure = Some(format!("{name}: a message on channel {channel}")),
                },
                ShardEvent::ChannelClosed { channel, .. } => {
                    if own == Some(channel) {
                        // Shoal closed the channel this member sends on: it opens
                        // another with the same label and goes on there.
                        own = shard
                            .open_channel(NODE, name, "", ChannelType::default())
                            .ok();
                    } else if let Some(i) = current.remove(&channel) {
                        instances[i].closed = true;
                    }
                }
                // Stopping closes the session: that is the test's.
                ShardEvent::SctpClosed { .. } | ShardEvent::PeerRemoved { .. }
                    if !script.stop[index].load(Ordering::SeqCst) =>
                {
                    failure = Some(format!("{name}: connection lost: {event:?}"));
                }
                _ => {}
            }
        }
        if failure.is_some() || script.stop[index].load(Ordering::SeqCst) {
            return Control::Stop;
        }
        let target = script.targets[index].load(Ordering::SeqCst);
        if let Some(id) = own {
            while sent < target
                && shard
                    .channel_send(NODE, id, true, Bytes::from(message(name, sent)))
                    .is_ok()
            {
                sent += 1;
            }
        }
        let upto = script
            .names
            .iter()
            .enumerate()
            .filter(|(s, _)| *s != index)
            .map(|(_, sender)| last_from(&instances, sender).map_or(0, |l| l + 1))
            .min()
            .unwrap_or(0);
        script.upto[index].store(upto, Ordering::SeqCst);
        if !finished && script.last_round.load(Ordering::SeqCst) {
            let all = script.names.iter().enumerate().all(|(s, sender)| {
                s == index
                    || last_from(&instances, sender)
                        == script.targets[s].load(Ordering::SeqCst).checked_sub(1)
            });
            if all {
                finished = true;
                script.done.fetch_add(1, Ordering::SeqCst);
            }
        }
        if Instant::now() > deadline {
            failure = Some(format!("{name}: still running at the deadline"));
            return Control::Stop;
        }
        Control::Continue
    })
    .expect("the endpoint runs");
    failure.map_or(Ok(instances), Err)
}

/// Whether a node's log says the participant `identity` was cut off as a slow
/// receiver.
fn cut_off(log: &str, identity: &str) -> bool {
    log.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .any(|v| {
            let f = &v["fields"];
            f["event"] == "leave" && f["identity"] == identity && f["reason"] == "slow_receiver"
        })
}

/// The last message number of `sender` that `instances` delivered, if any.
fn last_from(instances: &[Instance], sender: &str) -> Option<usize> {
    instances
        .iter()
        .filter(|i| i.label == sender)
        .filter_map(|i| i.seqs.last().copied())
        .max()
}

/// Two nodes in two regions host a room: ann and bob on node-0, its owner, and cid
/// on node-1, which spans it. node-1 is stopped (SIGSTOP) while ann floods her
/// channel, so node-0's link to it fills and is cut off as a slow receiver
/// (`--relay-hold-limit 1`) with messages in flight; node-1, resumed, is linked
/// again. Every member's reliable channels are closed on both nodes
/// (`cascade_link_lost`), so none skips a message: on each channel instance, each
/// sender's messages come in order and without a gap. cid did miss messages of
/// ann's, and once linked again every member's later messages reach every other
/// member on new channels.
#[test]
fn cluster_lost_link_closes_reliable_channels() {
    let etcd = Etcd::start();
    let nodes = [
        ClusterNode::start(
            &etcd.url(),
            "/lost",
            "node-0",
            TTL,
            &[
                "--region",
                "eu",
                "--relay-high-watermark",
                "16384",
                "--relay-low-watermark",
                "8192",
                "--relay-hold-limit",
                "1",
            ],
        ),
        ClusterNode::start(&etcd.url(), "/lost", "node-1", TTL, &["--region", "us"]),
    ];
    let rt = runtime();
    let room = "lost-link";
    rt.block_on(async {
        wait_formed(&nodes).await;
        create(&nodes[0], room).await.expect("room created")
    });
    let members: [&'static str; 3] = ["ann", "bob", "cid"];
    let via = [&nodes[0], &nodes[0], &nodes[1]];
    let script = Arc::new(Script {
        names: members.to_vec(),
        targets: members.iter().map(|_| AtomicUsize::new(0)).collect(),
        last_round: AtomicBool::new(false),
        done: AtomicUsize::new(0),
        upto: members.iter().map(|_| AtomicUsize::new(0)).collect(),
        stop: members.iter().map(|_| AtomicBool::new(false)).collect(),
        connected: AtomicUsize::new(0),
    });
    let mut rng = endpoint::os_rng().expect("randomness");
    // A signalling session each: one ends, and its member leaves, when it is dropped.
    let mut signallers: Vec<Option<signal::Signaller>> = Vec::new();
    let mut threads = Vec::new();
    for (i, &name) in members.iter().enumerate() {
        let signaller = signal::Signaller::start_tls(None).expect("signalling");
        let (socket, shard) = join_client(&signaller, &mut rng, via[i], room, name, i);
        signallers.push(Some(signaller));
        let script = script.clone();
        threads.push(std::thread::spawn(move || {
            member(socket, shard, i, name, &script)
        }));
    }
    wait_fully_linked(&[&nodes[0], &nodes[1]], room);
    let deadline = Instant::now() + Duration::from_secs(20);
    while script.connected.load(Ordering::SeqCst) < members.len() {
        assert!(Instant::now() < deadline, "the members did not connect");
        std::thread::sleep(Duration::from_millis(20));
    }
    let finished = |threads: &[std::thread::JoinHandle<_>]| threads.iter().any(|t| t.is_finished());

    // A first round reaches everyone over the link.
    for t in &script.targets {
        t.store(ROUND, Ordering::SeqCst);
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while script.upto.iter().any(|u| u.load(Ordering::SeqCst) < ROUND) {
        assert!(
            Instant::now() < deadline && !finished(&threads),
            "the first round did not reach everyone"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // node-1 stops; ann floods; node-0 cuts the link off, which carried messages.
    nodes[1].process.signal(Signal::SIGSTOP);
    script.targets[0].store(ROUND + FLOOD, Ordering::SeqCst);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !cut_off(&nodes[0].process.log_so_far(), "cascade:node-1") {
        assert!(Instant::now() < deadline, "node-0 did not cut its link off");
        std::thread::sleep(Duration::from_millis(20));
    }
    nodes[1].process.signal(Signal::SIGCONT);
    log_with(&nodes[0], "cascade_link_lost", Some(room));
    assert!(!finished(&threads), "a member failed");
    // Resumed, node-1 learns its link went too, and node-0 links it again.
    log_with(&nodes[1], "cascade_link_lost", Some(room));
    let deadline = Instant::now() + Duration::from_secs(20);
    for node in &nodes {
        while events(&node.process.log_so_far(), "cascade_link_up", room) < 2 {
            assert!(Instant::now() < deadline, "{} not linked again", node.id);
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    // A second round, on new channels where the old ones closed.
    for (i, t) in script.targets.iter().enumerate() {
        let base = if i == 0 { ROUND + FLOOD } else { ROUND };
        t.store(base + ROUND, Ordering::SeqCst);
    }
    script.last_round.store(true, Ordering::SeqCst);
    let last = |i: usize| if i == 0 { 2 * ROUND + FLOOD } else { 2 * ROUND } - 1;
    // Each member's last message reaches every other member.
    let deadline = Instant::now() + Duration::from_secs(30);
    while script.done.load(Ordering::SeqCst) < members.len() && !finished(&threads) {
        assert!(
            Instant::now() < deadline,
            "the second round did not reach everyone"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // cid leaves, and node-1 closes the room it spanned for cid, link and all: not
    // a lost link, so ann's and bob's channels stay open.
    script.stop[2].store(true, Ordering::SeqCst);
    signallers[2] = None;
    let deadline = Instant::now() + Duration::from_secs(20);
    while events(&nodes[1].process.log_so_far(), "room_unspanned", room) == 0 {
        assert!(Instant::now() < deadline, "node-1 still spans the room");
        std::thread::sleep(Duration::from_millis(50));
    }
    // node-0 would take its link for lost within LOST_LINK_SETTLE (5 s) of it going,
    // and a tick.
    std::thread::sleep(Duration::from_secs(6));
    for s in &script.stop {
        s.store(true, Ordering::SeqCst);
    }
    drop(signallers);
    let got: Vec<Vec<Instance>> = threads
        .into_iter()
        .map(|t| {
            t.join().expect("no panic").unwrap_or_else(|e| {
                let logs: Vec<String> = nodes.iter().map(|n| n.process.log_so_far()).collect();
                panic!("{e}; logs: {logs:#?}")
            })
        })
        .collect();

    // Never a gap on a channel: each instance delivers consecutive messages.
    for (r, receiver) in members.iter().enumerate() {
        for instance in &got[r] {
            for pair in instance.seqs.windows(2) {
                assert_eq!(
                    pair[1],
                    pair[0] + 1,
                    "{receiver}: on a channel labelled {}, message {} after {}: {instance:?}",
                    instance.label,
                    pair[1],
                    pair[0]
                );
            }
        }
    }
    for (r, receiver) in members.iter().enumerate() {
        let instances = &got[r];
        // The failed link closed this member's channels: some channel of every
        // other member's closed.
        for (s, sender) in members.iter().enumerate().filter(|(s, _)| *s != r) {
            assert!(
                instances.iter().any(|i| i.label == *sender && i.closed),
                "{receiver}: no channel of {sender}'s was closed: {instances:?}"
            );
            assert_eq!(
                last_from(instances, sender),
                Some(last(s)),
                "{receiver}: {sender}'s last message"
            );
        }
    }
    // cid did miss some of ann's messages: the link failed with them in flight.
    let cid_from_ann: usize = got[2]
        .iter()
        .filter(|i| i.label == "ann")
        .map(|i| i.seqs.len())
        .sum();
    assert!(
        cid_from_ann < last(0) + 1,
        "cid got all {cid_from_ann} of ann's messages: nothing was lost"
    );
    // Each node reported the lost link once: node-1 closing the room it spanned,
    // with its link, once cid left, is not a loss, and the channels of ann and bob
    // stayed open (the last of their instances of each other's channels).
    for (r, other) in [(0, "bob"), (1, "ann")] {
        let last = got[r]
            .iter()
            .rfind(|i| i.label == other)
            .expect("a channel");
        assert!(!last.closed, "{}: {other}'s channel closed", members[r]);
    }
    for node in &nodes {
        assert_eq!(
            events(&node.process.log_so_far(), "cascade_link_lost", room),
            1,
            "{}: the link was lost once",
            node.id
        );
    }
}
