//! shoal nodes as a cluster on a real etcd (Debian's etcd-server), each node a real
//! `shoal` process: placement with one owner per room, routing from any node to the
//! owner, and what a node does while etcd is away. A node alone needs no etcd.
//!
//! Waits poll real processes for a condition with a deadline; none sleeps to let a
//! race pass.

mod cluster_chromium;
mod cluster_harness;
mod cluster_link_loss;
mod http_client;
mod lab;
mod media_pair;
mod node_process;
mod tls_cert;
mod tokens;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::net::{IpAddr, Ipv4Addr, UdpSocket};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use cluster_harness::{ClusterNode, Etcd, EtcdTls, NodeApi, wait_formed};
use shoal_components::peer::PeerId;
use shoal_components::sctp::dcep::ChannelType;
use shoal_components::time::Time;
use shoal_proto::v1::{
    CreateRoomRequest, GetRoomRequest, ListParticipantsRequest, ListRoomsRequest,
};
use shoal_server::endpoint::{self, Control, data_offer, signal};
use shoal_systems::{Command as ShardCommand, Shard, ShardConfig, ShardEvent};
use tonic::Code;
use tonic::transport::{Certificate, ClientTlsConfig};

/// The lease TTL the tests' nodes run with (seconds).
const TTL: u32 = 4;
/// The client stacks' one peer: the node.
const NODE: PeerId = PeerId(1);

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

/// `n` nodes named node-0 … of a cluster on `etcd` under `prefix`.
fn start_nodes(etcd: &Etcd, prefix: &str, n: usize) -> Vec<ClusterNode> {
    (0..n)
        .map(|i| ClusterNode::start(&etcd.url(), prefix, &format!("node-{i}"), TTL, &[]))
        .collect()
}

/// Creates `room` through `node`; the owner's id.
async fn create(node: &NodeApi, room: &str) -> Result<String, tonic::Status> {
    node.rooms()
        .await
        .create_room(CreateRoomRequest {
            name: room.to_owned(),
            ..CreateRoomRequest::default()
        })
        .await
        .map(|r| r.into_inner().node_id)
}

/// Creates `room` through `node`, again and again while it is UNAVAILABLE (etcd
/// away, or the node not back in the cluster yet), for up to 15 s; the owner's id.
async fn create_when_able(node: &NodeApi, room: &str, when: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        match create(node, room).await {
            Ok(owner) => {
                assert!(!owner.is_empty());
                return owner;
            }
            Err(e) => {
                assert_eq!(e.code(), Code::Unavailable, "{e:?}");
                assert!(
                    Instant::now() < deadline,
                    "{}: no placement {when}: {e:?}",
                    node.id
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Waits until every node's view of the cluster (its watch of etcd) holds `rooms`
/// rooms in all, for up to 15 s.
async fn wait_rooms_seen(nodes: &[ClusterNode], rooms: u32) {
    let deadline = Instant::now() + Duration::from_secs(15);
    for node in nodes {
        loop {
            let view = node.info().await.cluster.expect("cluster info");
            let seen: u32 = view.nodes.iter().map(|n| n.rooms).sum();
            if seen == rooms {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{} sees {seen} rooms, not {rooms}",
                node.id
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// GetRoom for `room` through `node`.
async fn get_room(node: &NodeApi, room: &str) -> Result<shoal_proto::v1::Room, tonic::Status> {
    node.rooms()
        .await
        .get_room(GetRoomRequest {
            name: room.to_owned(),
        })
        .await
        .map(tonic::Response::into_inner)
}

/// The owner of every room etcd holds under `prefix`, by room.
async fn owners_in_etcd(etcd: &Etcd, prefix: &str) -> BTreeMap<String, String> {
    let mut client = etcd.client().await;
    let rooms = format!("{prefix}/rooms/");
    let response = client
        .get(
            rooms.clone(),
            Some(etcd_client::GetOptions::new().with_prefix()),
        )
        .await
        .expect("etcd answers");
    response
        .kvs()
        .iter()
        .map(|kv| {
            let room = kv
                .key_str()
                .expect("UTF-8")
                .strip_prefix(&rooms)
                .expect("prefix");
            let value: serde_json::Value = serde_json::from_slice(kv.value()).expect("JSON");
            (
                room.to_owned(),
                value["owner"].as_str().expect("owner").to_owned(),
            )
        })
        .collect()
}

#[test]
fn cluster_place_and_route() {
    let etcd = Etcd::start();
    let prefix = "/place-and-route";
    let nodes = start_nodes(&etcd, prefix, 3);
    let ids: HashSet<String> = nodes.iter().map(|n| n.id.clone()).collect();
    let rt = runtime();
    let owners = rt.block_on(async {
        wait_formed(&nodes).await;
        // 30 rooms, each created through a node picked by a fixed sequence.
        let mut owners = BTreeMap::new();
        for i in 0..30usize {
            let via = &nodes[(i * 7 + i / 3) % 3];
            let room = format!("room-{i:02}");
            let owner = create(via, &room).await.expect("room created");
            assert!(ids.contains(&owner), "{room}: owner {owner:?} is no node");
            owners.insert(room, owner);
        }
        owners
    });
    let per_node: HashMap<&String, usize> = owners.values().fold(HashMap::new(), |mut m, o| {
        *m.entry(o).or_default() += 1;
        m
    });
    assert_eq!(
        per_node.len(),
        3,
        "rooms spread over every node: {per_node:?}"
    );
    rt.block_on(async {
        // etcd holds exactly these owners, one key per room.
        assert_eq!(owners_in_etcd(&etcd, prefix).await, owners);
        for node in &nodes {
            // Every node lists the whole cluster's rooms with their owners.
            let listed = node
                .rooms()
                .await
                .list_rooms(ListRoomsRequest {
                    page_size: 100,
                    ..ListRoomsRequest::default()
                })
                .await
                .expect("ListRooms")
                .into_inner();
            let listed: BTreeMap<String, String> = listed
                .rooms
                .into_iter()
                .map(|r| (r.name, r.node_id))
                .collect();
            assert_eq!(listed, owners, "ListRooms through {}", node.id);
            // Any node answers for any room, with the owner's view of it.
            for (room, owner) in owners.iter().step_by(7) {
                let got = get_room(node, room).await.expect("GetRoom");
                assert_eq!(&got.node_id, owner, "GetRoom {room} through {}", node.id);
            }
            // A second creation, through any node, reaches the owner and is refused.
            let again = create(node, "room-00").await.expect_err("exists");
            assert_eq!(again.code(), Code::AlreadyExists, "{again:?}");
            let info = node.info().await;
            assert_eq!(info.node_id, node.id);
            assert_eq!(
                info.rooms as usize,
                per_node.get(&node.id).copied().unwrap_or(0),
                "rooms open on {}",
                node.id
            );
        }
    });

    // Three client stacks join one room, each through a different node: two of the
    // joins are redirected to the owner, and all three exchange messages there.
    let room = "room-00";
    let owner = &owners[room];
    let members = ["alice", "bob", "carol"];
    let via: Vec<&ClusterNode> = nodes.iter().collect();
    let exchange = Exchange::start(room, &members, &via);
    exchange.wait();
    // The owner holds them; asked through a node that is not the owner.
    let other = nodes.iter().find(|n| &n.id != owner).expect("a non-owner");
    let listed = rt.block_on(async {
        other
            .rooms()
            .await
            .list_participants(ListParticipantsRequest {
                room: room.to_owned(),
                ..ListParticipantsRequest::default()
            })
            .await
            .expect("ListParticipants through a non-owner")
            .into_inner()
    });
    let mut names: Vec<String> = listed
        .participants
        .into_iter()
        .map(|p| p.identity)
        .collect();
    names.sort();
    assert_eq!(names, members);
    exchange.finish();

    // A browser publishes video and plays it back, each POST through a non-owner.
    cluster_chromium::video_through_redirects(&rt, &nodes, "room-01", &owners["room-01"]);
}

/// Messages each member sends.
const MESSAGES: usize = 40;

/// Message `seq` of `sender`.
fn message(sender: &str, seq: usize) -> Vec<u8> {
    format!("{sender} {seq} {}", "x".repeat(seq * 13 % 300)).into_bytes()
}

/// Members in one room: each joined through a node of its own, opened a channel
/// labelled with its name and sends [`MESSAGES`] on it once everyone is connected.
/// Each runs on a thread until [`Exchange::finish`], also after it received
/// everything, so its session outlives the exchange.
struct Exchange {
    threads: Vec<std::thread::JoinHandle<Result<Vec<(String, Bytes)>, String>>>,
    done: Arc<AtomicUsize>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    signaller: signal::Signaller,
    members: Vec<&'static str>,
}

impl Exchange {
    /// Joins `members` to `room`, member i through `via[i]`.
    fn start(room: &str, members: &[&'static str], via: &[&ClusterNode]) -> Exchange {
        Exchange::start_gated(room, members, via, Arc::new(AtomicBool::new(true)))
    }

    /// [`Exchange::start`], the members sending only once `go` is set too.
    fn start_gated(
        room: &str,
        members: &[&'static str],
        via: &[&ClusterNode],
        go: Arc<AtomicBool>,
    ) -> Exchange {
        Exchange::start_with(room, members, via, go, None)
    }

    /// [`Exchange::start_gated`], joining through nodes whose gRPC serves TLS, their
    /// certificates verified with `tls`.
    fn start_with(
        room: &str,
        members: &[&'static str],
        via: &[&ClusterNode],
        go: Arc<AtomicBool>,
        tls: Option<signal::Tls>,
    ) -> Exchange {
        let mut rng = endpoint::os_rng().expect("randomness");
        let signaller = signal::Signaller::start_tls(tls).expect("signalling");
        let connected = Arc::new(AtomicUsize::new(0));
        let done = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let n = members.len();
        let mut threads = Vec::new();
        for (i, &name) in members.iter().enumerate() {
            let (socket, shard) = join_client(&signaller, &mut rng, via[i], room, name, i);
            let (connected, done, stop) = (connected.clone(), done.clone(), stop.clone());
            let go = go.clone();
            threads.push(std::thread::spawn(move || {
                member(socket, shard, name, n, (&connected, &go), &done, &stop)
            }));
        }
        Exchange {
            threads,
            done,
            stop,
            signaller,
            members: members.to_vec(),
        }
    }

    /// Waits until every member has received everything (or one failed).
    fn wait(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.done.load(Ordering::SeqCst) < self.members.len()
            && !self.threads.iter().any(|t| t.is_finished())
        {
            assert!(Instant::now() < deadline, "the exchange did not finish");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops every member and checks that each received every message of every
    /// other member once, in order.
    fn finish(self) {
        self.stop.store(true, Ordering::SeqCst);
        let got: Vec<Vec<(String, Bytes)>> = self
            .threads
            .into_iter()
            .map(|t| {
                t.join()
                    .expect("no panic")
                    .unwrap_or_else(|e| panic!("{e}"))
            })
            .collect();
        drop(self.signaller);
        for (i, name) in self.members.iter().enumerate() {
            for sender in self.members.iter().filter(|s| *s != name) {
                let from: Vec<&Bytes> = got[i]
                    .iter()
                    .filter(|(l, _)| l == sender)
                    .map(|(_, m)| m)
                    .collect();
                assert_eq!(
                    from.len(),
                    MESSAGES,
                    "{name} got {} from {sender}",
                    from.len()
                );
                for (seq, m) in from.iter().enumerate() {
                    assert_eq!(
                        &m[..],
                        &message(sender, seq)[..],
                        "{name}: message {seq} of {sender}"
                    );
                }
            }
        }
    }
}

/// A client stack of its own (shard `index`, on a loopback socket) that joins `room`
/// as `name` through `node`'s signalling; its endpoint loop is the caller's to run.
fn join_client(
    signaller: &signal::Signaller,
    rng: &mut impl rand_core::RngCore,
    node: &ClusterNode,
    room: &str,
    name: &str,
    index: usize,
) -> (UdpSocket, Shard) {
    let socket = UdpSocket::bind("127.0.0.1:0").expect("a socket");
    let mut shard = Shard::new(ShardConfig::new(
        socket.local_addr().expect("bound"),
        index as u64,
    ));
    let offer = data_offer(NODE, shard.fingerprint(), rng);
    let answer = signaller
        .join(node.grpc, room, name, offer.sdp())
        .unwrap_or_else(|e| panic!("{name} joins through {}: {e}", node.id));
    let peer = offer.accept(&answer).expect("a usable answer");
    shard
        .command(Time::ZERO, ShardCommand::AddPeer(peer))
        .expect("peer added");
    (socket, shard)
}

/// One member's endpoint loop; what it received, as (label, message).
fn member(
    socket: UdpSocket,
    shard: Shard,
    name: &'static str,
    n: usize,
    (connected, go): (&AtomicUsize, &AtomicBool),
    done: &AtomicUsize,
    stop: &std::sync::atomic::AtomicBool,
) -> Result<Vec<(String, Bytes)>, String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut channel = None;
    let mut labels: HashMap<u16, String> = HashMap::new();
    let mut got: Vec<(String, Bytes)> = Vec::new();
    let mut sent = 0;
    let mut finished = false;
    let mut failure = None;
    endpoint::run(socket, shard, |shard, _now, events| {
        for event in events.drain(..) {
            match event {
                ShardEvent::SctpEstablished { .. } => {
                    connected.fetch_add(1, Ordering::SeqCst);
                    channel = shard
                        .open_channel(NODE, name, "", ChannelType::default())
                        .ok();
                }
                ShardEvent::ChannelOpen { channel, label, .. } => {
                    labels.insert(channel, label);
                }
                ShardEvent::ChannelMessage {
                    channel, payload, ..
                } => {
                    if let Some(label) = labels.get(&channel) {
                        got.push((label.clone(), payload));
                    }
                }
                // After the exchange, the node may go away: that is the test's.
                ShardEvent::SctpClosed { .. } | ShardEvent::PeerRemoved { .. } if !finished => {
                    failure = Some(format!("{name}: connection lost: {event:?}"));
                }
                _ => {}
            }
        }
        if failure.is_some() || stop.load(Ordering::SeqCst) {
            return Control::Stop;
        }
        let ready = connected.load(Ordering::SeqCst) == n && go.load(Ordering::SeqCst);
        if let Some(id) = channel.filter(|_| ready) {
            while sent < MESSAGES
                && shard
                    .channel_send(NODE, id, true, Bytes::from(message(name, sent)))
                    .is_ok()
            {
                sent += 1;
            }
        }
        if !finished && got.len() == MESSAGES * (n - 1) {
            finished = true;
            done.fetch_add(1, Ordering::SeqCst);
        }
        if !finished && Instant::now() > deadline {
            failure = Some(format!(
                "{name}: {} of {} messages by the deadline",
                got.len(),
                MESSAGES * (n - 1)
            ));
            return Control::Stop;
        }
        Control::Continue
    })
    .expect("the endpoint runs");
    failure.map_or(Ok(got), Err)
}

/// Asserts that no node took a link of `room` for lost: none closed its members'
/// reliable channels (`cascade_link_lost`). A drain shuts links down cleanly, and a
/// node that stops hosting the room takes its link with it.
fn no_link_lost(nodes: &[ClusterNode], room: &str) {
    for node in nodes {
        assert_eq!(
            events(&node.process.log_so_far(), "cascade_link_lost", room),
            0,
            "{}: a link of {room} taken for lost",
            node.id
        );
    }
}

/// The other nodes whose link of `room` a node's log says is up.
fn links_up(log: &str, room: &str) -> BTreeSet<String> {
    log.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| {
            v["fields"]["event"].as_str() == Some("cascade_link_up")
                && v["fields"]["room"].as_str() == Some(room)
        })
        .filter_map(|v| v["fields"]["node"].as_str().map(str::to_owned))
        .collect()
}

/// etcd and three nodes under `prefix`, node-i in region eu, us and ap.
fn three_regions(prefix: &str) -> (Etcd, Vec<ClusterNode>) {
    let etcd = Etcd::start();
    let nodes = ["eu", "us", "ap"]
        .iter()
        .enumerate()
        .map(|(i, region)| {
            let id = format!("node-{i}");
            ClusterNode::start(&etcd.url(), prefix, &id, TTL, &["--region", region])
        })
        .collect();
    (etcd, nodes)
}

/// Lines of a node's log with `event` for `room`.
fn events(log: &str, event: &str, room: &str) -> usize {
    log.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| {
            v["fields"]["event"].as_str() == Some(event)
                && v["fields"]["room"].as_str() == Some(room)
        })
        .count()
}

/// A room whose members join three nodes in three regions: each is served by the
/// node it reached (no redirect), the nodes link every pair once, and every
/// member's data-channel messages reach every other member once and in order. Once
/// the members have left, the nodes that spanned the room close it.
#[test]
fn cluster_cascaded_room_messages() {
    let (_etcd, nodes) = three_regions("/cascaded");
    let rt = runtime();
    let room = "spanning";
    let owner = rt.block_on(async {
        wait_formed(&nodes).await;
        create(&nodes[0], room).await.expect("room created")
    });
    let go = Arc::new(AtomicBool::new(false));
    let via: Vec<&ClusterNode> = nodes.iter().collect();
    let exchange = Exchange::start_gated(room, &["ann", "bob", "cid"], &via, go.clone());
    // Every node holds the room, and links to both others.
    wait_fully_linked(&via, room);
    rt.block_on(async {
        for node in &nodes {
            assert_eq!(node.info().await.rooms, 1, "{} holds the room", node.id);
        }
    });
    go.store(true, Ordering::SeqCst);
    exchange.wait();
    exchange.finish();
    // Each node but the owner spanned the room, and linked each other node once.
    for node in &nodes {
        let log = node.process.log_so_far();
        let spanned = usize::from(node.id != owner);
        assert_eq!(events(&log, "room_spanned", room), spanned, "{}", node.id);
        let opened =
            events(&log, "cascade_link_opened", room) + events(&log, "cascade_link_accepted", room);
        assert_eq!(opened, 2, "{}: links opened", node.id);
    }
    // The members gone, the nodes that spanned the room close it; the owner's
    // closes as any empty room.
    let deadline = Instant::now() + Duration::from_secs(20);
    for node in nodes.iter().filter(|n| n.id != owner) {
        while events(&node.process.log_so_far(), "room_unspanned", room) == 0 {
            assert!(
                Instant::now() < deadline,
                "{} still spans the room",
                node.id
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let rooms = rt.block_on(node.info()).rooms;
        assert_eq!(rooms, 0, "{} closed the room", node.id);
    }
}

/// The identities that joined `room` on a node, by its log: its own participants,
/// links to other nodes left out.
fn served(log: &str, room: &str) -> BTreeSet<String> {
    log.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| {
            v["fields"]["event"].as_str() == Some("join")
                && v["fields"]["room"].as_str() == Some(room)
        })
        .filter_map(|v| v["fields"]["identity"].as_str().map(str::to_owned))
        .filter(|identity| !identity.starts_with("cascade:"))
        .collect()
}

/// Waits until every node's log says its links of `room` to each other node are up.
fn wait_fully_linked(nodes: &[&ClusterNode], room: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    for node in nodes {
        let others: BTreeSet<String> = nodes
            .iter()
            .filter(|n| n.id != node.id)
            .map(|n| n.id.clone())
            .collect();
        loop {
            let up = links_up(&node.process.log_so_far(), room);
            if up == others {
                break;
            }
            if Instant::now() >= deadline {
                let logs: Vec<String> = nodes.iter().map(|n| n.process.log_so_far()).collect();
                panic!(
                    "{}: links up to {up:?}, not {others:?}; logs: {logs:#?}",
                    node.id
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// A room that outgrows a node's share spans other nodes: three nodes of one region
/// with `--room-share 2`, and five members who all join through the room's owner.
/// The owner serves two; the others are sent on to nodes that then span the room,
/// none serving more than two; the three nodes link, every member's messages reach
/// every other member once and in order, and ListParticipants through any node
/// lists all five.
#[test]
fn cluster_room_share_spreads_a_room() {
    let etcd = Etcd::start();
    let nodes: Vec<ClusterNode> = (0..3)
        .map(|i| {
            let id = format!("node-{i}");
            ClusterNode::start(&etcd.url(), "/share", &id, TTL, &["--room-share", "2"])
        })
        .collect();
    let rt = runtime();
    let room = "crowd";
    let owner = rt.block_on(async {
        wait_formed(&nodes).await;
        create(&nodes[1], room).await.expect("room created")
    });
    let at_owner = nodes.iter().find(|n| n.id == owner).expect("the owner");
    let members = ["ann", "bob", "cid", "dee", "eve"];
    let go = Arc::new(AtomicBool::new(false));
    let exchange = Exchange::start_gated(room, &members, &[at_owner; 5], go.clone());
    // The logs are read a moment behind: each node's join lines come before its
    // links are up.
    let all: Vec<&ClusterNode> = nodes.iter().collect();
    wait_fully_linked(&all, room);
    let mut total = 0;
    for node in &nodes {
        let here = served(&node.process.log_so_far(), room);
        assert!(
            !here.is_empty() && here.len() <= 2,
            "{} serves {here:?}: between one and the share of two",
            node.id
        );
        total += here.len();
    }
    assert_eq!(total, members.len(), "each member served once");
    let first_two: BTreeSet<String> = ["ann", "bob"].map(str::to_owned).into();
    assert_eq!(served(&at_owner.process.log_so_far(), room), first_two);
    assert!(
        events(&at_owner.process.log_so_far(), "room_share_taken", room) >= 3,
        "the owner sent the last three on"
    );
    go.store(true, Ordering::SeqCst);
    exchange.wait();
    // ListParticipants, through any node, lists the members of every node (links
    // are not participants), once the hosts' lists crossed the links.
    let everyone: Vec<String> = members.map(str::to_owned).to_vec();
    let deadline = Instant::now() + Duration::from_secs(10);
    for node in &nodes {
        loop {
            let listed: Vec<String> = rt
                .block_on(async {
                    node.rooms()
                        .await
                        .list_participants(ListParticipantsRequest {
                            room: room.to_owned(),
                            ..ListParticipantsRequest::default()
                        })
                        .await
                })
                .expect("ListParticipants")
                .into_inner()
                .participants
                .into_iter()
                .map(|p| p.identity)
                .collect();
            if listed == everyone {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{} lists {listed:?}, not {everyone:?}",
                node.id
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    exchange.finish();
    for node in nodes.iter().filter(|n| n.id != owner) {
        let log = node.process.log_so_far();
        assert_eq!(events(&log, "room_spanned", room), 1, "{}", node.id);
    }
}

/// The create revision of `room`'s key under `prefix`, and the owner it names
/// (`None`: no key).
async fn room_key(etcd: &Etcd, prefix: &str, room: &str) -> Option<(i64, String)> {
    let mut client = etcd.client().await;
    let response = client
        .get(format!("{prefix}/rooms/{room}"), None)
        .await
        .expect("etcd answers");
    response.kvs().first().map(|kv| {
        let value: serde_json::Value = serde_json::from_slice(kv.value()).expect("JSON");
        let owner = value["owner"].as_str().expect("owner").to_owned();
        (kv.create_revision(), owner)
    })
}

/// Creates `room` through `node` (node-0 of [`three_regions`]) in region eu,
/// with 7 participants at most, an empty-timeout of 120 s and `metadata`.
async fn create_settled(node: &NodeApi, room: &str, metadata: &str) {
    let created = node
        .rooms()
        .await
        .create_room(CreateRoomRequest {
            name: room.to_owned(),
            region: "eu".to_owned(),
            max_participants: 7,
            empty_timeout_secs: 120,
            metadata: metadata.to_owned(),
        })
        .await
        .expect("created")
        .into_inner();
    assert_eq!(created.node_id, "node-0", "placed in eu");
}

/// A node's log once it has a line with `event` (for `room`, when given): the log
/// is read as the process writes it, a moment behind.
fn log_with(node: &ClusterNode, event: &str, room: Option<&str>) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let log = node.process.log_so_far();
        if line_of(&log, event, room, None).is_some() {
            return log;
        }
        assert!(Instant::now() < deadline, "{}: no {event}: {log}", node.id);
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Asks `node` to drain.
async fn drain(node: &NodeApi) {
    let started =
        shoal_proto::v1::node_service_client::NodeServiceClient::new(node.channel().await)
            .drain(shoal_proto::v1::DrainRequest {})
            .await
            .expect("Drain")
            .into_inner()
            .started;
    assert!(started, "{} drains", node.id);
}

/// Waits until `who` is told to leave with SERVER_SHUTDOWN.
async fn told_to_leave(who: &Listener) {
    let shutdown = shoal_proto::v1::DisconnectReason::ServerShutdown as i32;
    who.until("told the node shuts down", |s| {
        s.iter().any(|m| m["leave"]["reason"] == shutdown)
    })
    .await;
}

/// Where in a node's log the first line with `event` (and `room`, `node` when
/// given) is, by line.
fn line_of(log: &str, event: &str, room: Option<&str>, node: Option<&str>) -> Option<usize> {
    log.lines().position(|l| {
        serde_json::from_str::<serde_json::Value>(l).is_ok_and(|v| {
            let f = &v["fields"];
            f["event"] == event
                && room.is_none_or(|r| f["room"] == r)
                && node.is_none_or(|n| f["node"] == n)
        })
    })
}

/// A draining owner hands a room only it hosts to a node that did not host it: the
/// draining node opens the room's link to that node while it drains (links are
/// still admitted while the rooms are handed over), and tells its participant to
/// leave only once the link is up.
#[test]
fn cluster_drain_links_an_heir_that_did_not_host_the_room() {
    let etcd = Etcd::start();
    let prefix = "/drain-new-heir";
    let mut nodes = start_nodes(&etcd, prefix, 2);
    let rt = runtime();
    let room = "moving";
    let owner = rt.block_on(async {
        wait_formed(&nodes).await;
        create(&nodes[0], room).await.expect("created")
    });
    let d = nodes.iter().position(|n| n.id == owner).expect("the owner");
    let heir = nodes[1 - d].id.clone();
    rt.block_on(async {
        let ann = Listener::join(nodes[d].process.http, room, "ann").await;
        ann.until("ann joined", |s| s.iter().any(|m| m.get("join").is_some()))
            .await;
        drain(&nodes[d]).await;
        told_to_leave(&ann).await;
    });
    let log = log_with(&nodes[d], "drain_started", None);
    let up = line_of(&log, "cascade_link_up", Some(room), Some(&heir));
    let told = line_of(&log, "drain_started", None, None);
    assert!(
        up.is_some() && up < told,
        "the link to {heir} was up ({up:?}) before the participants were told ({told:?}): {log}"
    );
    assert_eq!(
        rt.block_on(owners_in_etcd(&etcd, prefix)).get(room),
        Some(&heir)
    );
    let status = nodes[d].process.wait(Duration::from_secs(30));
    assert!(status.success(), "{owner} exited with {status}");
}

/// A draining owner hands its room over: the room spans three nodes (three
/// regions), and its owner drains. The room's key in etcd comes to name a node
/// that spans the room, never deleted in between (its create revision stays); the
/// new owner serves the room with the settings and metadata it was created with;
/// the draining node's participant is told SERVER_SHUTDOWN; the members of the
/// other two nodes stay connected throughout and exchange every message once and
/// in order afterwards; and the drained node exits.
/// A room created on node-0 of [`three_regions`] (its settings settled, its key
/// made at `created_at`), with bob and cid in it through node-1 and node-2 (their
/// message exchange held until `go`) and ann through node-0, once every pair of
/// the three nodes is linked for it.
struct Spread {
    etcd: Etcd,
    nodes: Vec<ClusterNode>,
    rt: tokio::runtime::Runtime,
    created_at: i64,
    go: Arc<AtomicBool>,
    exchange: Exchange,
    ann: Listener,
}

fn spread_room(prefix: &str, room: &str) -> Spread {
    let (etcd, nodes) = three_regions(prefix);
    let rt = runtime();
    rt.block_on(async {
        wait_formed(&nodes).await;
        create_settled(&nodes[0], room, "kept").await;
    });
    let (created_at, _) = rt
        .block_on(room_key(&etcd, prefix, room))
        .expect("the room's key");
    let go = Arc::new(AtomicBool::new(false));
    let exchange =
        Exchange::start_gated(room, &["bob", "cid"], &[&nodes[1], &nodes[2]], go.clone());
    let ann = rt.block_on(Listener::join(nodes[0].process.http, room, "ann"));
    let all: Vec<&ClusterNode> = nodes.iter().collect();
    wait_fully_linked(&all, room);
    Spread {
        etcd,
        nodes,
        rt,
        created_at,
        go,
        exchange,
        ann,
    }
}

#[test]
fn cluster_drain_hands_rooms_over() {
    let prefix = "/drain-hand-over";
    let room = "handed";
    let Spread {
        etcd,
        mut nodes,
        rt,
        created_at,
        go,
        exchange,
        ann,
    } = spread_room(prefix, room);

    rt.block_on(async {
        drain(&nodes[0]).await;
        told_to_leave(&ann).await;
    });
    let (revision, heir) = rt
        .block_on(room_key(&etcd, prefix, room))
        .expect("the room's key outlives the drain");
    assert_eq!(revision, created_at, "the key was never deleted");
    assert!(heir == "node-1" || heir == "node-2", "heir {heir}");
    let log0 = log_with(&nodes[0], "room_handed_over", Some(room));
    assert_eq!(events(&log0, "room_handed_over", room), 1, "{log0}");
    assert_eq!(events(&log0, "room_not_handed_over", room), 0, "{log0}");
    let at_heir = nodes.iter().find(|n| n.id == heir).expect("the heir");
    let log = log_with(at_heir, "room_taken_over", Some(room));
    assert_eq!(events(&log, "room_taken_over", room), 1, "{log}");
    // Asked through either node, the heir serves the room as it was created.
    for node in &nodes[1..] {
        let held = rt
            .block_on(async { get_room(node, room).await })
            .expect("GetRoom");
        assert_eq!(
            (
                held.node_id.as_str(),
                held.metadata.as_str(),
                held.max_participants,
                held.empty_timeout_secs
            ),
            (heir.as_str(), "kept", 7, 120),
            "through {}",
            node.id
        );
    }
    // The drained node exits on its own once its peers are gone.
    let status = nodes[0].process.wait(Duration::from_secs(30));
    assert!(status.success(), "node-0 exited with {status}");
    // bob and cid were never disconnected: they exchange everything now.
    go.store(true, Ordering::SeqCst);
    exchange.wait();
    exchange.finish();
    no_link_lost(&nodes, room);
    assert_eq!(
        rt.block_on(room_key(&etcd, prefix, room)),
        Some((created_at, heir)),
        "the room stays the heir's"
    );
}

/// A room spans three nodes in three regions, and its owner is killed with SIGKILL
/// (no drain, no lease revoked). The killed node's member joins again through a
/// survivor at once and is admitted there. Once the owner's lease has expired, one
/// node that spans the room claims it (`room_inherited`), within TTL + 5 s of the
/// kill, keeping its settings, so the members connected to the two other nodes,
/// never disconnected, then exchange every message once and in order, and the
/// rejoined members are never told to leave. Then the heir deletes the room, and
/// the other survivor closes its span rather than inheriting it. With the
/// inheritance removed, the spanning nodes close the room instead and the test
/// fails.
#[test]
fn cluster_dead_owners_room_is_inherited() {
    let prefix = "/inherit";
    let room = "inherited";
    let Spread {
        etcd,
        nodes,
        rt,
        created_at,
        go,
        exchange,
        ann,
    } = spread_room(prefix, room);

    nodes[0].process.signal(nix::sys::signal::Signal::SIGKILL);
    let killed = Instant::now();
    drop(ann);
    // ann joins again through a survivor, and dan through the other: each is
    // admitted into the room its node spans.
    let rejoined = rt.block_on(async {
        let ann = Listener::join(nodes[1].process.http, room, "ann").await;
        let dan = Listener::join(nodes[2].process.http, room, "dan").await;
        for who in [&ann, &dan] {
            who.until("admitted through a survivor", |s| {
                s.iter().any(|m| m.get("join").is_some())
            })
            .await;
        }
        [ann, dan]
    });
    let limit = Duration::from_secs(u64::from(TTL) + 5);
    let (revision, heir) = rt.block_on(async {
        loop {
            match room_key(&etcd, prefix, room).await {
                Some((revision, owner)) if owner != "node-0" => break (revision, owner),
                _ => {
                    assert!(
                        killed.elapsed() < limit,
                        "not inherited {:?} after the kill",
                        killed.elapsed()
                    );
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    });
    assert_ne!(revision, created_at, "the key went with the owner's lease");
    let at_heir = nodes
        .iter()
        .find(|n| n.id == heir)
        .expect("the heir is a survivor");
    let log = log_with(at_heir, "room_inherited", Some(room));
    assert_eq!(events(&log, "room_inherited", room), 1, "{log}");
    let other = nodes[1..]
        .iter()
        .find(|n| n.id != heir)
        .expect("the other survivor");
    // The heir serves the room with the settings it was created with.
    let held = rt
        .block_on(async { get_room(other, room).await })
        .expect("GetRoom");
    assert_eq!(
        (
            held.node_id.as_str(),
            held.metadata.as_str(),
            held.max_participants
        ),
        (heir.as_str(), "kept", 7)
    );
    // bob and cid were never disconnected: they exchange everything now.
    go.store(true, Ordering::SeqCst);
    exchange.wait();
    exchange.finish();
    no_link_lost(&nodes, room);
    for who in &rejoined {
        assert!(
            !who.said().iter().any(|m| m.get("leave").is_some()),
            "a rejoined member was told to leave: {:#?}",
            who.said()
        );
    }
    // By now (the exchange took the logs well past the inheritance): one heir, and
    // the other survivor placed nothing (its claim lost) and still spans the room.
    assert_eq!(
        events(&at_heir.process.log_so_far(), "room_inherited", room),
        1
    );
    let other_log = other.process.log_so_far();
    for event in ["room_inherited", "room_placed", "room_unspanned"] {
        assert_eq!(events(&other_log, event, room), 0, "{event}: {other_log}");
    }
    // Deleted by its live owner, the room closes on the other survivor too (a
    // rejoined member is still there) and nobody inherits it.
    rt.block_on(async {
        at_heir
            .rooms()
            .await
            .delete_room(shoal_proto::v1::DeleteRoomRequest {
                name: room.to_owned(),
            })
            .await
    })
    .expect("DeleteRoom");
    let other_log = log_with(other, "room_unspanned", Some(room));
    assert_eq!(events(&other_log, "room_inherited", room), 0, "{other_log}");
    assert_eq!(rt.block_on(room_key(&etcd, prefix, room)), None, "deleted");
}

/// Audio packets, and video packets, each participant of the cascaded room sends.
const CASCADE_PACKETS: u16 = 150;

/// What one participant of the cascaded room received: the sequence numbers of
/// each other participant's audio and video (by their index), packets that came
/// twice, and the messages, as (label, message).
#[derive(Default)]
struct CascadeGot {
    media: BTreeMap<(u8, bool), BTreeSet<u16>>,
    duplicates: u64,
    messages: Vec<(String, Bytes)>,
    /// What signalling said of the room, in order.
    room: Vec<serde_json::Value>,
}

/// The join response `identity` gets joining `room` over the `/signal` of the node
/// at `http` (the connection is closed after).
async fn join_response(
    http: std::net::SocketAddr,
    room: &str,
    identity: &str,
) -> serde_json::Value {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{http}/signal"))
        .await
        .expect("connect /signal");
    let join = serde_json::json!({"join": {"room": room, "identity": identity}});
    ws.send(Message::Text(join.to_string().into()))
        .await
        .expect("send join");
    let answer = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(Ok(m)) = ws.next().await {
            if let Message::Text(text) = m {
                let v: serde_json::Value = serde_json::from_str(text.as_str()).expect("JSON");
                if v.get("join").is_some() {
                    return v;
                }
            }
        }
        panic!("{identity}: the connection ended before the join response");
    })
    .await
    .expect("a join response in time");
    let _ = ws.close(None).await;
    answer
}

/// The room as `said` (a join response, pages, participant and track events, in
/// order) leaves it: each other participant's identity with the kinds of the
/// tracks it publishes (1 audio, 2 video).
fn room_seen(said: &[serde_json::Value]) -> BTreeMap<String, BTreeSet<i64>> {
    let mut room: BTreeMap<String, BTreeSet<i64>> = BTreeMap::new();
    let kinds = |p: &serde_json::Value| -> BTreeSet<i64> {
        p["tracks"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| t["kind"].as_i64())
            .collect()
    };
    for m in said {
        let listed = m
            .pointer("/join/others")
            .or_else(|| m.pointer("/others/others"));
        for p in listed.and_then(|l| l.as_array()).into_iter().flatten() {
            let who = p["identity"].as_str().unwrap_or_default().to_owned();
            room.insert(who, kinds(p));
        }
        if let Some(e) = m.get("participant") {
            let who = e["participant"]["identity"].as_str().unwrap_or_default();
            match e["kind"].as_i64() {
                // JOINED, UPDATED: as shown; LEFT: gone.
                Some(1 | 2) => {
                    room.insert(who.to_owned(), kinds(&e["participant"]));
                }
                Some(3) => {
                    room.remove(who);
                }
                _ => {}
            }
        }
        if let Some(e) = m.get("track") {
            let who = e["participantIdentity"].as_str().unwrap_or_default();
            let kind = e["track"]["kind"].as_i64().unwrap_or_default();
            // PUBLISHED and UNPUBLISHED change what it publishes; a track of
            // someone the room has not shown is kept apart, to fail below.
            let entry = room.entry(who.to_owned()).or_default();
            match e["kind"].as_i64() {
                Some(1) => {
                    entry.insert(kind);
                }
                Some(2) => {
                    entry.remove(&kind);
                }
                _ => {}
            }
        }
    }
    room
}

/// The first packet of a VP8 key frame (RFC 7741 §4.2 descriptor, RFC 6386 §9.1
/// frame tag, start code and a 320×240 size), then `index` and `seq`.
fn vp8_key_frame(index: u8, seq: u16) -> Vec<u8> {
    vp8_key_frame_of((320, 240), index, seq)
}

/// [`vp8_key_frame`] of a picture `width` × `height`.
fn vp8_key_frame_of((width, height): (u16, u16), index: u8, seq: u16) -> Vec<u8> {
    let mut p = vec![0x10, 0x00, 0x00, 0x00, 0x9d, 0x01, 0x2a];
    p.extend_from_slice(&width.to_le_bytes());
    p.extend_from_slice(&height.to_le_bytes());
    p.push(index);
    p.extend_from_slice(&seq.to_be_bytes());
    p.resize(300, 0x55);
    p
}

/// Where a participant's payloads carry its index and the packet's number.
const VP8_TAG_AT: usize = 11;

/// One participant of the cascaded room: joins `room` over `/signal` at `http`,
/// publishes Opus and VP8, takes the node's offers of others' tracks, and opens a
/// channel labelled `name`. Once it receives the tracks of `others` participants
/// it counts itself `ready`; once `go`, it sends [`CASCADE_PACKETS`] of each
/// kind, tagged with `index`, and [`MESSAGES`] messages. Runs until `stop`.
fn cascade_member(
    http: std::net::SocketAddr,
    room: &str,
    (name, index): (&'static str, u8),
    others: usize,
    (ready, go, stop): (Arc<AtomicUsize>, Arc<AtomicBool>, Arc<AtomicBool>),
) -> std::thread::JoinHandle<Result<CascadeGot, String>> {
    use shoal_components::rtp::{RtpFields, RtpPacket, RtpWriter};
    use shoal_server::endpoint::media::{AUDIO_SOURCE, OPUS_PT, VIDEO_SOURCE, VP8_PT};
    let shape = endpoint::OfferShape {
        data: true,
        ..endpoint::OfferShape::PUBLISH
    };
    let (socket, shard, inbox, hang_up) =
        signalled_client(http, room, name, shape, media_pair::no_reply);
    std::thread::spawn(move || {
        let _hang_up = hang_up;
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut got = CascadeGot::default();
        let mut receiving = 0;
        let mut channel = None;
        let mut labels: HashMap<u16, String> = HashMap::new();
        let (mut counted, mut sent, mut said) = (false, 0u16, 0usize);
        let mut failure = None;
        let mut buf = bytes::BytesMut::new();
        endpoint::run(socket, shard, |shard, now, events| {
            if let Err(e) = take_signalled(shard, now, &inbox, &mut receiving, &mut got.room) {
                failure = Some(format!("{name}: {e}"));
            }
            for event in events.drain(..) {
                match event {
                    ShardEvent::RtpReceived { packet, .. } => {
                        let Ok(p) = RtpPacket::parse(&packet) else {
                            failure = Some(format!("{name}: a packet that does not parse"));
                            continue;
                        };
                        let video = p.header().payload_type == VP8_PT;
                        let at = if video { VP8_TAG_AT } else { 0 };
                        let Some(tag) = p.payload().get(at..at + 3) else {
                            failure = Some(format!("{name}: a packet without its tag"));
                            continue;
                        };
                        let seq = u16::from_be_bytes([tag[1], tag[2]]);
                        if !got.media.entry((tag[0], video)).or_default().insert(seq) {
                            got.duplicates += 1;
                        }
                    }
                    ShardEvent::SctpEstablished { .. } => {
                        channel = shard
                            .open_channel(NODE, name, "", ChannelType::default())
                            .ok();
                    }
                    ShardEvent::ChannelOpen { channel, label, .. } => {
                        labels.insert(channel, label);
                    }
                    ShardEvent::ChannelMessage {
                        channel, payload, ..
                    } => {
                        let label = labels.get(&channel).cloned().unwrap_or_default();
                        got.messages.push((label, payload));
                    }
                    ShardEvent::PeerRemoved { .. } | ShardEvent::SctpClosed { .. } => {
                        failure = Some(format!("{name}: connection lost: {event:?}"));
                    }
                    _ => {}
                }
            }
            // Each other participant's audio and video.
            if !counted && channel.is_some() && receiving >= 2 * others {
                counted = true;
                ready.fetch_add(1, Ordering::SeqCst);
            }
            if go.load(Ordering::SeqCst) {
                for _ in 0..4 {
                    if sent < CASCADE_PACKETS {
                        for (source, pt, payload) in [
                            (AUDIO_SOURCE, OPUS_PT, {
                                let mut a = vec![index];
                                a.extend_from_slice(&sent.to_be_bytes());
                                a.resize(80, 0x78);
                                a
                            }),
                            (VIDEO_SOURCE, VP8_PT, vp8_key_frame(index, sent)),
                        ] {
                            let fields = RtpFields {
                                marker: pt == VP8_PT,
                                payload_type: pt,
                                sequence_number: sent,
                                timestamp: u32::from(sent).wrapping_mul(960),
                                ssrc: 0,
                            };
                            let mut w = RtpWriter::new(&mut buf, &fields, &[]);
                            w.payload(&payload);
                            w.finish(0);
                            if let Err(e) = shard.send_rtp(now, source, buf.split().freeze()) {
                                failure = Some(format!("{name}: send_rtp: {e:?}"));
                            }
                        }
                        sent += 1;
                    }
                    if let Some(c) = channel
                        && said < MESSAGES
                        && shard
                            .channel_send(NODE, c, false, Bytes::from(format!("{name} {said}")))
                            .is_ok()
                    {
                        said += 1;
                    }
                }
            }
            turn_end(&mut failure, &stop, deadline, name)
        })
        .map_err(|e| e.to_string())?;
        failure.map_or(Ok(got), Err)
    })
}

/// Rounds the simulcast camera sends: a packet of each stream, every 10 ms.
const SIMULCAST_ROUNDS: u16 = 400;
/// The camera's streams' picture sizes, lowest first.
const SIMULCAST_SIZES: [(u16, u16); 3] = [(320, 180), (640, 360), (1280, 720)];

/// A camera publishes three simulcast streams through node-0; two players play
/// them through node-1, one asking for quality LOW. The three streams cross the
/// link whole, and node-1 chooses among them for each player: over the second half
/// of the rounds, the LOW player is sent only the lowest stream and the other the
/// top one, each nearly every packet of it, once. node-1 takes in over its links
/// each packet of each stream once (a link carrying one stream, as before, took in
/// a third of them and sent both players the same).
#[test]
fn cluster_simulcast_crosses_links_whole() {
    let (_etcd, nodes) = three_regions("/cascaded-simulcast");
    let rt = runtime();
    let room = "spanning-simulcast";
    rt.block_on(async {
        wait_formed(&nodes).await;
        create(&nodes[0], room).await.expect("room created");
    });
    let ready = Arc::new(AtomicUsize::new(0));
    let go = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let flags = || (ready.clone(), go.clone(), stop.clone());
    let http = |i: usize| nodes[i].process.http;
    let camera = simulcast_member(http(0), room, "cam", None, flags());
    let players = [
        simulcast_member(http(1), room, "low", Some(low_quality), flags()),
        simulcast_member(http(1), room, "high", Some(media_pair::no_reply), flags()),
    ];
    let deadline = Instant::now() + Duration::from_secs(30);
    while ready.load(Ordering::SeqCst) < players.len() {
        let ended = camera.is_finished() || players.iter().any(|p| p.is_finished());
        if Instant::now() > deadline || ended {
            let logs: Vec<String> = nodes.iter().map(|n| n.process.log_so_far()).collect();
            panic!("the players never received the camera; logs: {logs:#?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let before = metric_sum(http(1), "shoal_shard_rtp_received_from_links_total");
    go.store(true, Ordering::SeqCst);
    // Shards report their counters up to a second late; then time for anything
    // more that should not come.
    let sent = 3 * u64::from(SIMULCAST_ROUNDS);
    let deadline = Instant::now() + Duration::from_secs(20);
    while metric_sum(http(1), "shoal_shard_rtp_received_from_links_total") - before < sent
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(1500));
    let crossed = metric_sum(http(1), "shoal_shard_rtp_received_from_links_total") - before;
    stop.store(true, Ordering::SeqCst);
    camera
        .join()
        .expect("the camera's thread")
        .expect("the camera");
    let [low, high] = players.map(|p| p.join().expect("a player's thread").expect("a player"));
    assert_eq!(
        crossed, sent,
        "node-1 takes in each packet of the three streams once"
    );
    let second_half = SIMULCAST_ROUNDS / 2..SIMULCAST_ROUNDS;
    for (who, got, stream) in [("low", &low, 0u8), ("high", &high, 2)] {
        let late: BTreeMap<u8, usize> = got
            .iter()
            .map(|(&l, seqs)| (l, seqs.iter().filter(|s| second_half.contains(s)).count()))
            .filter(|&(_, n)| n > 0)
            .collect();
        let only: Vec<u8> = late.keys().copied().collect();
        assert_eq!(
            only,
            [stream],
            "{who} is sent stream {stream} alone over the second half: {late:?}"
        );
        assert!(
            late[&stream] * 100 >= second_half.len() * 95,
            "{who} got {} of the {} packets of stream {stream} over the second half",
            late[&stream],
            second_half.len()
        );
    }
}

/// Asks for quality LOW of every video track the node tells of.
fn low_quality(said: &serde_json::Value) -> Option<serde_json::Value> {
    use serde_json::Value;
    let listed = [said.pointer("/join/others"), said.pointer("/others/others")];
    let people = listed
        .into_iter()
        .flatten()
        .filter_map(Value::as_array)
        .flatten()
        .chain(said.pointer("/participant/participant"));
    let tracks = people
        .filter_map(|p| p["tracks"].as_array())
        .flatten()
        .chain(said.pointer("/track/track"));
    let video: Vec<&str> = tracks
        .filter(|t| t["kind"].as_i64() == Some(2))
        .filter_map(|t| t["id"].as_str())
        .collect();
    (!video.is_empty()).then(|| {
        serde_json::json!({
            "trackSettings": { "trackIds": video, "quality": shoal_proto::v1::VideoQuality::Low as i32 }
        })
    })
}

/// A participant of the simulcast test until `stop`: the camera (`reply` `None`),
/// which once `go` sends [`SIMULCAST_ROUNDS`] rounds of a key frame of each of its
/// three streams, each of its size in [`SIMULCAST_SIZES`] and tagged with the
/// stream's index and the round; or a player answering the room with `reply`,
/// `ready` once it receives the camera's audio and video. Each returns each
/// stream's rounds it received (a round twice is a failure).
fn simulcast_member(
    http: std::net::SocketAddr,
    room: &str,
    name: &'static str,
    reply: Option<media_pair::Reply>,
    (ready, go, stop): (Arc<AtomicUsize>, Arc<AtomicBool>, Arc<AtomicBool>),
) -> std::thread::JoinHandle<Result<BTreeMap<u8, BTreeSet<u16>>, String>> {
    use shoal_components::rtp::{RtpFields, RtpPacket, RtpWriter};
    use shoal_server::endpoint::media::{VIDEO_LAYER_SOURCES, VP8_PT};
    let shape = match reply {
        None => endpoint::OfferShape::PUBLISH_SIMULCAST,
        Some(_) => endpoint::OfferShape {
            data: true,
            ..endpoint::OfferShape::default()
        },
    };
    let (socket, shard, inbox, hang_up) = signalled_client(
        http,
        room,
        name,
        shape,
        reply.unwrap_or(media_pair::no_reply),
    );
    std::thread::spawn(move || {
        let _hang_up = hang_up;
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut got: BTreeMap<u8, BTreeSet<u16>> = BTreeMap::new();
        let (mut receiving, mut said) = (0, Vec::new());
        let (mut counted, mut round, mut next) = (false, 0u16, None);
        let mut failure = None;
        let mut buf = bytes::BytesMut::new();
        endpoint::run(socket, shard, |shard, now, events| {
            if let Err(e) = take_signalled(shard, now, &inbox, &mut receiving, &mut said) {
                failure = Some(format!("{name}: {e}"));
            }
            for event in events.drain(..) {
                match event {
                    ShardEvent::RtpReceived { packet, .. } => {
                        let tag = RtpPacket::parse(&packet).ok().and_then(|p| {
                            p.payload().get(VP8_TAG_AT..VP8_TAG_AT + 3)?.try_into().ok()
                        });
                        let Some([stream, hi, lo]) = tag.map(|t: [u8; 3]| t) else {
                            failure = Some(format!("{name}: a packet without its tag"));
                            continue;
                        };
                        let r = u16::from_be_bytes([hi, lo]);
                        if !got.entry(stream).or_default().insert(r) {
                            failure = Some(format!("{name}: round {r} of stream {stream} twice"));
                        }
                    }
                    ShardEvent::PeerRemoved { .. } => {
                        failure = Some(format!("{name}: connection lost: {event:?}"));
                    }
                    _ => {}
                }
            }
            if reply.is_some() && !counted && receiving >= 2 {
                counted = true;
                ready.fetch_add(1, Ordering::SeqCst);
            }
            if reply.is_none() && go.load(Ordering::SeqCst) {
                let due = next.get_or_insert_with(Instant::now);
                // The rounds due since the last turn.
                while round < SIMULCAST_ROUNDS && Instant::now() >= *due {
                    *due += Duration::from_millis(10);
                    for (i, source) in VIDEO_LAYER_SOURCES.into_iter().enumerate() {
                        let fields = RtpFields {
                            marker: true,
                            payload_type: VP8_PT,
                            sequence_number: round,
                            timestamp: u32::from(round).wrapping_mul(900),
                            ssrc: 0,
                        };
                        let mut w = RtpWriter::new(&mut buf, &fields, &[]);
                        w.payload(&vp8_key_frame_of(SIMULCAST_SIZES[i], i as u8, round));
                        w.finish(0);
                        if let Err(e) = shard.send_rtp(now, source, buf.split().freeze()) {
                            failure = Some(format!("{name}: send_rtp: {e:?}"));
                        }
                    }
                    round += 1;
                }
            }
            turn_end(&mut failure, &stop, deadline, name)
        })
        .map_err(|e| e.to_string())?;
        failure.map_or(Ok(got), Err)
    })
}

/// A client stack for participant `name` of `room`, joining over `/signal` at
/// `http` with an offer of `shape`: its socket and shard, what its signalling
/// learns (`reply` answering what the node says of the room), and the handle that
/// ends the signalling when dropped.
fn signalled_client(
    http: std::net::SocketAddr,
    room: &str,
    name: &'static str,
    shape: endpoint::OfferShape,
    reply: media_pair::Reply,
) -> (
    UdpSocket,
    Shard,
    std::sync::mpsc::Receiver<media_pair::Signalled>,
    tokio::sync::oneshot::Sender<()>,
) {
    let socket = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let local = socket.local_addr().expect("an address");
    let shard = Shard::new(ShardConfig::new(local, u64::from(local.port())));
    let mut rng = endpoint::os_rng().expect("a random generator");
    let offer = endpoint::media_offer(NODE, shard.fingerprint(), shape, &mut rng);
    let (to_shard, inbox) = std::sync::mpsc::channel();
    let (hang_up, stopped) = tokio::sync::oneshot::channel();
    let room = room.to_owned();
    std::thread::spawn(move || {
        runtime().block_on(media_pair::signal(
            http,
            &room,
            name,
            offer,
            (to_shard, reply),
            stopped,
        ));
    });
    (socket, shard, inbox, hang_up)
}

/// How a client stack's turn ends: it stops on a failure or at `stop`, and past
/// `deadline` with that failure.
fn turn_end(
    failure: &mut Option<String>,
    stop: &AtomicBool,
    deadline: Instant,
    name: &str,
) -> Control {
    if failure.is_none() && !stop.load(Ordering::SeqCst) && Instant::now() > deadline {
        *failure = Some(format!("{name}: deadline"));
    }
    if failure.is_some() || stop.load(Ordering::SeqCst) {
        Control::Stop
    } else {
        Control::Continue
    }
}

/// Carries out on `shard` what a participant's signalling learnt: its session,
/// the tracks it receives (counted in `receiving`); what the node said of the room
/// goes into `room`.
fn take_signalled(
    shard: &mut Shard,
    now: Time,
    inbox: &std::sync::mpsc::Receiver<media_pair::Signalled>,
    receiving: &mut usize,
    room: &mut Vec<serde_json::Value>,
) -> Result<(), String> {
    use media_pair::Signalled;
    while let Ok(s) = inbox.try_recv() {
        let r = match s {
            Signalled::Session(session) => {
                let peer = session.peer.id;
                let mut r = shard.command(now, ShardCommand::AddPeer(session.peer.clone()));
                for (track, subscription) in session.sources.iter().cloned() {
                    r = r.and_then(|()| {
                        shard.command(
                            now,
                            ShardCommand::AddSource {
                                peer,
                                track,
                                subscription,
                            },
                        )
                    });
                }
                *receiving += session.receives.len();
                for track in session.receives.iter().cloned() {
                    r = r.and_then(|()| shard.command(now, ShardCommand::Receive { peer, track }));
                }
                r
            }
            Signalled::Receive(tracks) => {
                *receiving += tracks.len();
                tracks.into_iter().try_for_each(|track| {
                    shard.command(now, ShardCommand::Receive { peer: NODE, track })
                })
            }
            Signalled::Room(said) => {
                room.push(said);
                Ok(())
            }
        };
        r.map_err(|e| format!("a command failed: {e:?}"))?;
    }
    Ok(())
}

/// The sum of counter `name` over every shard in a node's `/metrics`.
fn metric_sum(http: std::net::SocketAddr, name: &str) -> u64 {
    let reply = http_client::request(http, "GET", "/metrics", None, b"");
    assert_eq!(reply.status, 200, "{}", reply.body);
    reply
        .body
        .lines()
        .filter(|l| l.split(['{', ' ']).next() == Some(name))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// Two rooms whose participants join three nodes in three regions, each
/// publishing audio and video and sending messages: every participant receives
/// every packet of every other participant of its room's tracks, none twice, and
/// nothing of the other room's; each node takes in over its links exactly the other
/// nodes' packets (each track crosses each link once, and no track comes round
/// through a third node); every message reaches everyone in its room once and in
/// order. Every pair of nodes is linked twice, once for each room, each link on a
/// path of its own.
#[test]
fn cluster_cascaded_room() {
    let (_etcd, nodes) = three_regions("/cascaded-media");
    let rt = runtime();
    let rooms = [
        ("spanning-media", ["ann", "bob", "cid"]),
        ("spanning-too", ["dee", "fay", "gus"]),
    ];
    rt.block_on(async {
        wait_formed(&nodes).await;
        create(&nodes[0], rooms[0].0).await.expect("room created");
        create(&nodes[1], rooms[1].0).await.expect("room created");
    });
    let ready = Arc::new(AtomicUsize::new(0));
    let go = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    // Participant i of room r joins through node i, tagged 3r + i.
    let mut members = Vec::new();
    for (r, (room, names)) in rooms.iter().enumerate() {
        for (i, &name) in names.iter().enumerate() {
            let flags = (ready.clone(), go.clone(), stop.clone());
            let tag = (3 * r + i) as u8;
            members.push(cascade_member(
                nodes[i].process.http,
                room,
                (name, tag),
                2,
                flags,
            ));
        }
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while ready.load(Ordering::SeqCst) < members.len() {
        if Instant::now() > deadline || members.iter().any(|m| m.is_finished()) {
            let logs: Vec<String> = nodes.iter().map(|n| n.process.log_so_far()).collect();
            panic!(
                "{} of 6 participants receive their room's others' tracks; logs: {logs:#?}",
                ready.load(Ordering::SeqCst)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let before: Vec<u64> = nodes
        .iter()
        .map(|n| metric_sum(n.process.http, "shoal_shard_rtp_received_from_links_total"))
        .collect();
    assert_eq!(
        before,
        [0, 0, 0],
        "nothing crossed a link before the sending"
    );
    go.store(true, Ordering::SeqCst);
    // Everything in: every participant has both others' packets, and each node's
    // links (shards report their counters up to a second late) took in both
    // other nodes' audio and video, of both rooms.
    let expected = 2 * 2 * 2 * u64::from(CASCADE_PACKETS);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut crossed = Vec::new();
    while Instant::now() < deadline {
        crossed = nodes
            .iter()
            .map(|n| metric_sum(n.process.http, "shoal_shard_rtp_received_from_links_total"))
            .collect();
        if crossed.iter().all(|&c| c >= expected) {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // Time for anything more to arrive that should not: a track coming round a
    // second time through a third node.
    std::thread::sleep(Duration::from_millis(1500));
    let settled: Vec<u64> = nodes
        .iter()
        .map(|n| metric_sum(n.process.http, "shoal_shard_rtp_received_from_links_total"))
        .collect();
    // A late joiner through node-1 is shown the whole room at once: bob of its own
    // node, ann and cid of the others, each with audio and video.
    let (room, names) = rooms[0];
    let joined = rt.block_on(join_response(nodes[1].process.http, room, "eve"));
    let everyone: BTreeMap<String, BTreeSet<i64>> = names
        .iter()
        .map(|n| (n.to_string(), BTreeSet::from([1, 2])))
        .collect();
    assert_eq!(
        room_seen(std::slice::from_ref(&joined)),
        everyone,
        "{joined:#}"
    );
    assert_eq!(joined["join"]["room"]["numParticipants"], 4, "{joined:#}");
    // Each room has its own links: the node with the lower id of each pair opened
    // one for each room (a link dialled again is the same pair), and every node
    // hosts both rooms.
    for (room, _) in rooms {
        let opened: Vec<BTreeSet<String>> = nodes
            .iter()
            .map(|n| {
                n.process
                    .log_so_far()
                    .lines()
                    .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                    .filter(|v| {
                        v["fields"]["event"] == "cascade_link_opened" && v["fields"]["room"] == room
                    })
                    .filter_map(|v| v["fields"]["node"].as_str().map(str::to_owned))
                    .collect()
            })
            .collect();
        let want: Vec<BTreeSet<String>> = vec![
            ["node-1".to_owned(), "node-2".to_owned()].into(),
            ["node-2".to_owned()].into(),
            BTreeSet::new(),
        ];
        assert_eq!(opened, want, "links of {room} opened by each node");
    }
    let held: Vec<u32> = rt.block_on(async {
        let mut held = Vec::new();
        for n in &nodes {
            held.push(n.info().await.rooms);
        }
        held
    });
    assert_eq!(held, [2, 2, 2], "every node hosts both rooms");
    stop.store(true, Ordering::SeqCst);
    let got: Vec<CascadeGot> = members
        .into_iter()
        .map(|m| {
            m.join()
                .expect("no panic")
                .unwrap_or_else(|e| panic!("{e}"))
        })
        .collect();
    assert_eq!(
        settled, [expected; 3],
        "each node took in exactly the others' packets over its links (first {crossed:?})"
    );
    let all: BTreeSet<u16> = (0..CASCADE_PACKETS).collect();
    for (r, (_, names)) in rooms.iter().enumerate() {
        let tags: Vec<u8> = (0..3).map(|i| (3 * r + i) as u8).collect();
        for (i, g) in got[3 * r..3 * r + 3].iter().enumerate() {
            assert_eq!(g.duplicates, 0, "{} got packets twice", names[i]);
            assert!(
                g.media.keys().all(|(tag, _)| tags.contains(tag)),
                "{} got another room's tracks: {:?}",
                names[i],
                g.media.keys().collect::<Vec<_>>()
            );
            assert!(
                g.messages.iter().all(|(l, _)| names.iter().any(|n| n == l)),
                "{} got another room's messages",
                names[i]
            );
            for j in (0..names.len()).filter(|&j| j != i) {
                for video in [false, true] {
                    let seen = g.media.get(&(tags[j], video)).cloned().unwrap_or_default();
                    assert_eq!(
                        seen,
                        all,
                        "{} got {} of {}'s {} packets",
                        names[i],
                        seen.len(),
                        names[j],
                        if video { "video" } else { "audio" }
                    );
                }
                let from: Vec<&Bytes> = g
                    .messages
                    .iter()
                    .filter(|(l, _)| l == names[j])
                    .map(|(_, m)| m)
                    .collect();
                let want: Vec<Bytes> = (0..MESSAGES)
                    .map(|k| Bytes::from(format!("{} {k}", names[j])))
                    .collect();
                assert!(
                    from.iter().copied().eq(want.iter()),
                    "{} got {} messages from {}, not {MESSAGES} in order",
                    names[i],
                    from.len(),
                    names[j]
                );
            }
            assert!(
                !g.media.contains_key(&(tags[i], false)),
                "{} got its own audio back",
                names[i]
            );
            // Each sees the participants of the other nodes, with their audio and
            // video, under their own identities.
            let others: BTreeMap<String, BTreeSet<i64>> = names
                .iter()
                .filter(|&&n| n != names[i])
                .map(|n| (n.to_string(), BTreeSet::from([1, 2])))
                .collect();
            // (eve came and went meanwhile; whether her LEFT has crossed yet depends
            // on when the links last ticked.)
            let mut seen = room_seen(&g.room);
            seen.remove("eve");
            assert_eq!(seen, others, "{}: {:#?}", names[i], g.room);
        }
    }
}

/// A `/signal` participant that joins and records everything its node says, in
/// order, until it is dropped.
struct Listener {
    said: Arc<std::sync::Mutex<Vec<serde_json::Value>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Listener {
    async fn join(http: std::net::SocketAddr, room: &str, identity: &str) -> Listener {
        Listener::join_with(http, room, identity, "").await
    }

    async fn join_with(
        http: std::net::SocketAddr,
        room: &str,
        identity: &str,
        metadata: &str,
    ) -> Listener {
        use futures_util::{SinkExt, StreamExt};
        use tokio_tungstenite::tungstenite::Message;
        let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{http}/signal"))
            .await
            .expect("connect /signal");
        let join = serde_json::json!({
            "join": {"room": room, "identity": identity, "metadata": metadata}
        });
        ws.send(Message::Text(join.to_string().into()))
            .await
            .expect("send join");
        let said = Arc::new(std::sync::Mutex::new(Vec::new()));
        let into = said.clone();
        let task = tokio::spawn(async move {
            // The socket stays open (unread frames are not sent back) until dropped.
            while let Some(Ok(m)) = ws.next().await {
                if let Message::Text(text) = m {
                    let v = serde_json::from_str(text.as_str()).expect("JSON");
                    into.lock().expect("said").push(v);
                }
            }
        });
        Listener { said, task }
    }

    fn said(&self) -> Vec<serde_json::Value> {
        self.said.lock().expect("said").clone()
    }

    /// Waits until what was said passes `done`; fails with `what` after 20 s.
    async fn until(&self, what: &str, done: impl Fn(&[serde_json::Value]) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !done(&self.said()) {
            assert!(Instant::now() < deadline, "{what}: {:#?}", self.said());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Whether `said` names `identity` as another participant anywhere: in a join
/// response's or page's others, or in a participant event.
fn names(said: &[serde_json::Value], identity: &str) -> bool {
    said.iter().any(|m| {
        let listed = m
            .pointer("/join/others")
            .or_else(|| m.pointer("/others/others"))
            .and_then(|l| l.as_array())
            .is_some_and(|l| l.iter().any(|p| p["identity"] == identity));
        listed || m.pointer("/participant/participant/identity") == Some(&identity.into())
    })
}

/// An identity that joins again through another node replaces its first session,
/// as it would on one node: the first session ends with DUPLICATE_IDENTITY, a
/// client of a third node sees the identity all along (no LEFT of the first hides
/// the second), and the second session is never shown itself as a participant of
/// another node.
#[test]
fn cluster_identity_moves_between_nodes() {
    let (_etcd, nodes) = three_regions("/moves");
    let rt = runtime();
    let room = "moving";
    rt.block_on(async {
        wait_formed(&nodes).await;
        create(&nodes[0], room).await.expect("room created");
        let wes = Listener::join(nodes[2].process.http, room, "wes").await;
        let first = Listener::join(nodes[0].process.http, room, "sam").await;
        wes.until("wes sees the first sam", |s| {
            room_seen(s).contains_key("sam")
        })
        .await;
        let second = Listener::join(nodes[1].process.http, room, "sam").await;
        let replaced = shoal_proto::v1::DisconnectReason::DuplicateIdentity as i32;
        first
            .until("the first sam is replaced", |s| {
                s.iter().any(|m| m["leave"]["reason"] == replaced)
            })
            .await;
        // Joined through node-0 after the first sam left it: once wes and the
        // second sam see zed, node-0's lists without the first sam reached them.
        let _zed = Listener::join(nodes[0].process.http, room, "zed").await;
        // wes ends with sam there: whichever of node-0's LEFT and node-1's JOINED
        // came first, the second sam is shown.
        wes.until("wes sees zed and sam", |s| {
            let seen = room_seen(s);
            seen.contains_key("zed") && seen.contains_key("sam")
        })
        .await;
        second
            .until("the second sam sees zed", |s| {
                room_seen(s).contains_key("zed")
            })
            .await;
        // And after a later list of node-0's, still: wes was not caught between a
        // LEFT and the JOINED that follows it.
        let _yan = Listener::join(nodes[0].process.http, room, "yan").await;
        wes.until("wes sees yan", |s| room_seen(s).contains_key("yan"))
            .await;
        let seen = room_seen(&wes.said());
        assert!(seen.contains_key("sam"), "wes: {:#?}", wes.said());
        let said = second.said();
        assert!(!names(&said, "sam"), "the second sam: {said:#?}");
    });
    // Node-0 logged why the first sam left.
    let left = nodes[0]
        .process
        .log_so_far()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| {
            v["fields"]["event"] == "leave"
                && v["fields"]["identity"] == "sam"
                && v["fields"]["reason"] == "duplicate_identity"
        })
        .count();
    assert_eq!(left, 1, "node-0 replaced the first sam once");
}

/// A node that starts spanning a room opens it as its owner holds it: a joiner
/// through that node is told the owner's settings and metadata.
#[test]
fn cluster_spanned_room_has_the_owners_settings() {
    let (_etcd, nodes) = three_regions("/spanned-settings");
    let rt = runtime();
    let room = "settled";
    let joined = rt.block_on(async {
        wait_formed(&nodes).await;
        create_settled(&nodes[0], room, "from the owner").await;
        join_response(nodes[2].process.http, room, "ann").await
    });
    let r = &joined["join"]["room"];
    assert_eq!(r["metadata"], "from the owner", "{joined:#}");
    assert_eq!(r["maxParticipants"], 7, "{joined:#}");
    assert_eq!(r["emptyTimeoutSecs"], 120, "{joined:#}");
    assert_eq!(r["nodeId"], "node-2", "served where it landed: {joined:#}");
    let log = log_with(&nodes[2], "room_spanned", Some(room));
    assert_eq!(events(&log, "room_spanned", room), 1, "{log}");
    assert_eq!(events(&log, "spanned_room_unknown", room), 0, "{log}");
}

/// Participants with the most metadata, more than one LinkTracks call may carry
/// under the default gRPC message limit (128 KiB): the lists cross in parts, and a
/// client of another node sees every one of them, metadata and all.
#[test]
fn cluster_lists_too_large_for_one_call_cross_in_parts() {
    let (_etcd, nodes) = three_regions("/large-lists");
    let rt = runtime();
    let room = "crowded";
    let metadata = "m".repeat(8192);
    let names: BTreeSet<String> = (0..20).map(|i| format!("p{i:02}")).collect();
    rt.block_on(async {
        wait_formed(&nodes).await;
        create(&nodes[0], room).await.expect("room created");
        let wes = Listener::join(nodes[2].process.http, room, "wes").await;
        let mut crowd = Vec::new();
        for name in &names {
            crowd.push(Listener::join_with(nodes[0].process.http, room, name, &metadata).await);
        }
        wes.until("wes sees the whole crowd", |s| {
            let seen: BTreeSet<String> = room_seen(s).into_keys().collect();
            seen == names
        })
        .await;
        // Each as it is, from the JOINED that came over the link.
        for m in wes.said() {
            if let Some(p) = m.pointer("/participant/participant") {
                assert_eq!(p["metadata"].as_str().map(str::len), Some(8192), "{p}");
            }
        }
    });
    let log = nodes[0].process.log_so_far();
    assert_eq!(events(&log, "cascade_lists_too_large", room), 0, "{log}");
}

/// Creates `room` through `node`, naming `region`; the owner's id.
async fn create_in(node: &NodeApi, room: &str, region: &str) -> Result<String, tonic::Status> {
    node.rooms()
        .await
        .create_room(CreateRoomRequest {
            name: room.to_owned(),
            region: region.to_owned(),
            ..CreateRoomRequest::default()
        })
        .await
        .map(|r| r.into_inner().node_id)
}

#[test]
fn cluster_region_aware_placement() {
    let etcd = Etcd::start();
    let prefix = "/regions";
    let mut nodes: Vec<ClusterNode> = [("node-a", "eu"), ("node-b", "eu"), ("node-c", "us")]
        .iter()
        .map(|(id, region)| ClusterNode::start(&etcd.url(), prefix, id, TTL, &["--region", region]))
        .collect();
    let eu: HashSet<String> = ["node-a".to_owned(), "node-b".to_owned()].into();
    let rt = runtime();
    rt.block_on(async {
        wait_formed(&nodes).await;
        // Through node-c, the only node in us: every room lands there, although it
        // soon holds more rooms than the others (load alone would spread them).
        for i in 0..4 {
            let owner = create(&nodes[2], &format!("us-{i}"))
                .await
                .expect("created");
            assert_eq!(owner, "node-c", "us-{i}");
        }
        // Through an eu node: eu nodes only, spread between them by load.
        let mut owners = HashSet::new();
        for i in 0..6 {
            let room = format!("eu-{i}");
            let owner = create(&nodes[i % 2], &room).await.expect("created");
            assert!(eu.contains(&owner), "{room} on {owner}");
            owners.insert(owner);
        }
        assert_eq!(owners, eu, "rooms through eu nodes use both of them");
        // A request naming its region goes there, whichever node it arrives at.
        let owner = create_in(&nodes[0], "named-us", "us")
            .await
            .expect("created");
        assert_eq!(owner, "node-c");
        let owner = create_in(&nodes[2], "named-eu", "eu")
            .await
            .expect("created");
        assert!(eu.contains(&owner), "named-eu on {owner}");
        // A region no node runs in: anywhere, by load (not node-c, the busiest).
        let owner = create_in(&nodes[2], "named-ap", "ap")
            .await
            .expect("created");
        assert!(eu.contains(&owner), "named-ap on {owner}");
        // A malformed region is refused before anything is placed.
        let bad = create_in(&nodes[0], "bad-region", "eu west")
            .await
            .expect_err("refused");
        assert_eq!(bad.code(), Code::InvalidArgument, "{bad:?}");
        assert!(
            !owners_in_etcd(&etcd, prefix)
                .await
                .contains_key("bad-region")
        );
    });
    // node-c stops (SIGINT revokes its lease): us has no node left, and a room
    // meant for us goes to eu rather than fail.
    nodes[2].process.signal(nix::sys::signal::Signal::SIGINT);
    nodes[2].process.wait(Duration::from_secs(20));
    let c = nodes.remove(2);
    rt.block_on(async {
        wait_formed(&nodes).await;
        let owner = create_in(&nodes[0], "named-us-later", "us")
            .await
            .expect("created");
        assert!(eu.contains(&owner), "named-us-later on {owner}");
    });
    let per_owner = rt.block_on(owners_in_etcd(&etcd, prefix));
    assert!(
        per_owner.values().all(|o| eu.contains(o)),
        "node-c's rooms left with its lease: {per_owner:?}"
    );
    drop(c);
}

#[test]
fn cluster_no_double_owner_under_race() {
    let etcd = Etcd::start();
    let prefix = "/race";
    let nodes = start_nodes(&etcd, prefix, 3);
    let rt = runtime();
    rt.block_on(async {
        wait_formed(&nodes).await;
        for round in 0..5 {
            let room = format!("contested-{round}");
            // 20 creations at once, through the nodes in turn.
            let attempts = (0..20).map(|i| create(&nodes[(i + round) % 3], &room));
            let outcomes = futures_util::future::join_all(attempts).await;
            let created: Vec<&String> = outcomes.iter().filter_map(|o| o.as_ref().ok()).collect();
            assert_eq!(
                created.len(),
                1,
                "{room}: one creation succeeds: {outcomes:?}"
            );
            let owner = created[0].clone();
            for o in &outcomes {
                if let Err(e) = o {
                    assert_eq!(e.code(), Code::AlreadyExists, "{room}: {e:?}");
                }
            }
            let in_etcd = owners_in_etcd(&etcd, prefix).await;
            assert_eq!(in_etcd.get(&room), Some(&owner), "{room} in etcd");
            // Exactly one node has it open, and every node routes to it.
            let mut open = 0;
            for node in &nodes {
                let got = get_room(node, &room).await.expect("GetRoom");
                assert_eq!(got.node_id, owner, "{room} through {}", node.id);
                open += node.info().await.rooms;
            }
            assert_eq!(
                open as usize,
                round + 1,
                "rooms open over the cluster after {room}"
            );
        }
    });
}

#[test]
fn cluster_etcd_unavailable() {
    let mut etcd = Etcd::start();
    let prefix = "/outage";
    let nodes = start_nodes(&etcd, prefix, 2);
    let rt = runtime();
    let owner = rt.block_on(async {
        wait_formed(&nodes).await;
        create(&nodes[0], "kept").await.expect("room created")
    });
    let owner_id = owner;
    let owner = nodes.iter().find(|n| n.id == owner_id).expect("the owner");
    etcd.stop();
    let stopped = Instant::now();
    rt.block_on(async {
        // The owner still serves its room while its lease is surely valid...
        let kept = get_room(owner, "kept")
            .await
            .expect("the room is still served");
        assert_eq!(kept.node_id, owner.id);
        // ...and nobody places a new one.
        for node in &nodes {
            let refused = create(node, "new")
                .await
                .expect_err("no placement without etcd");
            assert_eq!(refused.code(), Code::Unavailable, "{refused:?}");
            assert!(refused.message().contains("etcd"), "{refused:?}");
        }
        // The owner closes its room before its lease could have expired: the last
        // keep-alive etcd acknowledged was sent at most a quarter of the TTL before
        // etcd stopped, and the node serves until a second before that plus the TTL.
        loop {
            let info = owner.info().await;
            let cluster = info.cluster.expect("cluster info");
            if info.rooms == 0 {
                assert!(!cluster.member, "a member without its room");
                break;
            }
            let ttl = Duration::from_secs(u64::from(TTL));
            assert!(
                stopped.elapsed() < ttl - Duration::from_millis(500),
                "the room is still open {:?} after etcd stopped",
                stopped.elapsed()
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        let fenced_after = stopped.elapsed();
        let earliest = Duration::from_secs(u64::from(TTL)) * 3 / 4 - Duration::from_millis(1100);
        assert!(
            fenced_after >= earliest,
            "fenced after {fenced_after:?}: before the lease was due (TTL {TTL} s)"
        );
    });
    etcd.resume();
    rt.block_on(async {
        // Placement works again, through every node.
        for (i, node) in nodes.iter().enumerate() {
            create_when_able(node, &format!("after-{i}"), "after etcd returned").await;
        }
        for node in &nodes {
            assert!(node.info().await.cluster.expect("cluster info").member);
        }
        // Each sees the other again: a node that lost its lease registered anew,
        // and placement below counts only the nodes a node's view holds.
        wait_formed(&nodes).await;
    });
    // A node that stops (SIGTERM) drains first, handing its rooms to the other
    // node, and then revokes its lease: the rooms are the other node's at once, not
    // a TTL later.
    let mut nodes = nodes;
    let o = nodes.iter().position(|n| n.id == owner_id).expect("owner");
    let mut owner_process = nodes.remove(o);
    // Rooms until the owner holds some (placement goes by load, and the other
    // node's rooms count too).
    let (theirs, placed): (Vec<String>, _) = rt.block_on(async {
        let mut theirs = Vec::new();
        for i in 0..40 {
            let room = format!("tail-{i}");
            if create(&nodes[0], &room).await.expect("created") == owner_id {
                theirs.push(room);
                if theirs.len() == 2 {
                    break;
                }
            }
        }
        (theirs, owners_in_etcd(&etcd, prefix).await)
    });
    assert!(
        !theirs.is_empty(),
        "the owner holds rooms placed after the outage: {placed:?}"
    );
    owner_process
        .process
        .signal(nix::sys::signal::Signal::SIGTERM);
    owner_process.process.wait(Duration::from_secs(20));
    let stopped = Instant::now();
    rt.block_on(async {
        for room in &theirs {
            let refused = create(&nodes[0], room).await.expect_err("handed over");
            assert_eq!(refused.code(), Code::AlreadyExists, "{refused:?}");
            let held = get_room(&nodes[0], room).await.expect("GetRoom");
            assert_eq!(held.node_id, nodes[0].id, "{room} served by the other node");
        }
        let in_etcd = owners_in_etcd(&etcd, prefix).await;
        for room in &theirs {
            assert_eq!(in_etcd.get(room), Some(&nodes[0].id), "{room} in etcd");
        }
    });
    assert!(
        stopped.elapsed() < Duration::from_secs(u64::from(TTL) - 1),
        "placed again {:?} after the owner stopped",
        stopped.elapsed()
    );
    let log = owner_process.process.log();
    assert!(log.contains("\"cluster_left\""), "leaving is logged");
    assert!(log.contains("\"cluster_fenced\""), "the fencing is logged");
    assert!(
        log.contains("\"room_fenced\""),
        "the room's closing is logged"
    );
}

#[test]
fn cluster_node_failure() {
    let etcd = Etcd::start();
    let prefix = "/failure";
    let nodes = start_nodes(&etcd, prefix, 3);
    let rt = runtime();
    // Six rooms: placement by room count gives each node two.
    let owners = rt.block_on(async {
        wait_formed(&nodes).await;
        let mut owners = BTreeMap::new();
        for i in 0..6 {
            let room = format!("r{i}");
            let owner = create(&nodes[i % 3], &room).await.expect("created");
            owners.insert(room, owner);
        }
        owners
    });
    let victim = owners["r0"].clone();
    let victim_rooms: Vec<String> = owners
        .iter()
        .filter(|(_, o)| **o == victim)
        .map(|(r, _)| r.clone())
        .collect();
    let survivors: Vec<usize> = (0..3).filter(|&i| nodes[i].id != victim).collect();
    // Two clients in r0, joined through the survivors, exchange messages.
    let members = ["alice", "bob"];
    let via: Vec<&ClusterNode> = survivors.iter().map(|&i| &nodes[i]).collect();
    let exchange = Exchange::start("r0", &members, &via);
    exchange.wait();
    // The owner dies with them in the room.
    let v = nodes
        .iter()
        .position(|n| n.id == victim)
        .expect("the victim");
    nodes[v].process.signal(nix::sys::signal::Signal::SIGKILL);
    let killed = Instant::now();
    exchange.finish();
    let limit = Duration::from_secs(u64::from(TTL) + 5);
    // Its rooms are placed again, each through a survivor, within TTL + 5 s.
    let placed = rt.block_on(async {
        let mut placed = BTreeMap::new();
        for (k, room) in victim_rooms.iter().enumerate() {
            let via = &nodes[survivors[k % 2]];
            loop {
                match create(via, room).await {
                    Ok(owner) => {
                        placed.insert(room.clone(), owner);
                        break;
                    }
                    Err(e) => {
                        assert_eq!(e.code(), Code::Unavailable, "{room}: {e:?}");
                        assert!(
                            killed.elapsed() < limit,
                            "{room} not placeable {:?} after the kill: {e:?}",
                            killed.elapsed()
                        );
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            }
        }
        placed
    });
    let recovered = killed.elapsed();
    assert!(recovered < limit, "rooms placed again after {recovered:?}");
    for (room, owner) in &placed {
        assert_ne!(owner, &victim, "{room} is placed on a live node");
    }
    // The clients join again through the other survivor and exchange messages.
    let rejoined: Vec<&ClusterNode> = survivors.iter().rev().map(|&i| &nodes[i]).collect();
    let exchange = Exchange::start("r0", &members, &rejoined);
    exchange.wait();
    exchange.finish();
    // The other nodes no longer see the victim.
    rt.block_on(async {
        for &i in &survivors {
            let seen: Vec<String> = nodes[i]
                .info()
                .await
                .cluster
                .expect("cluster info")
                .nodes
                .into_iter()
                .map(|n| n.id)
                .collect();
            assert!(
                !seen.contains(&victim),
                "{} still sees {victim}",
                nodes[i].id
            );
        }
    });
    eprintln!("rooms of the killed node placed again {recovered:?} after the kill");
}

/// The time of a JSON log line's `timestamp` (RFC 3339, UTC), as (date, seconds
/// into the day), for the first line whose `fields` hold every `(name, value)`.
fn logged_at(log: &str, fields: &[(&str, &str)]) -> Option<(String, f64)> {
    log.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| {
            fields
                .iter()
                .all(|(k, want)| v["fields"][*k].as_str() == Some(*want))
        })
        .and_then(|v| {
            let ts = v["timestamp"].as_str()?.trim_end_matches('Z').to_owned();
            let (date, time) = ts.split_once('T')?;
            let mut parts = time.split(':');
            let h: f64 = parts.next()?.parse().ok()?;
            let m: f64 = parts.next()?.parse().ok()?;
            let sec: f64 = parts.next()?.parse().ok()?;
            Some((date.to_owned(), h * 3600.0 + m * 60.0 + sec))
        })
}

#[test]
fn cluster_partitioned_node_fences_itself() {
    let Some(mut lab) = lab::Lab::new("clu") else {
        return;
    };
    // etcd, two nodes and the test's client, each in a namespace of its own on one
    // router.
    let [router, e, a, b, t] = ["r", "e", "a", "b", "t"].map(|n| lab.namespace(n));
    let spokes = [
        (&e, "re", "1"),
        (&a, "ra", "2"),
        (&b, "rb", "3"),
        (&t, "rt", "4"),
    ];
    let (inside, outside, gateway): (Vec<String>, Vec<String>, Vec<String>) = spokes
        .iter()
        .map(|(_, _, n)| {
            (
                format!("10.91.{n}.2/24"),
                format!("10.91.{n}.1/24"),
                format!("10.91.{n}.1"),
            )
        })
        .fold(
            (vec![], vec![], vec![]),
            |(mut i, mut o, mut g), (x, y, z)| {
                i.push(x);
                o.push(y);
                g.push(z);
                (i, o, g)
            },
        );
    let star: Vec<lab::Spoke<'_>> = spokes
        .iter()
        .enumerate()
        .map(|(k, (ns, side, _))| lab::Spoke {
            ns,
            side,
            inside: &inside[k],
            outside: &outside[k],
            gateway: &gateway[k],
        })
        .collect();
    lab.star(&router, &star);
    let etcd = Etcd::start_in(&e, "10.91.1.2");
    let node_a = ClusterNode::start_in((&a, "10.91.2.2"), &etcd.url(), "/cut", "node-a", TTL);
    let node_b = ClusterNode::start_in((&b, "10.91.3.2"), &etcd.url(), "/cut", "node-b", TTL);
    let (grpc_a, grpc_b, http_a) = (node_a.grpc, node_b.grpc, node_a.process.http);
    let owner = in_t_result(&t, move || {
        let owner = runtime().block_on(async move {
            let nodes = [NodeApi::at(grpc_a), NodeApi::at(grpc_b)];
            wait_formed(&nodes).await;
            // Equal load: the room goes to the lowest id, node-a.
            create(&nodes[1], "cut").await.expect("created")
        });
        // A participant in it (a WHIP session: admitted, not yet connected).
        let offer = http_client::fixture_offer("chromium156_data_offer.sdp");
        let joined = http_client::post_offer(http_a, "/whip/cut", &offer);
        assert_eq!(joined.status, 201, "{}", joined.body);
        owner
    });
    assert_eq!(owner, "node-a");
    // node-a loses etcd, and only etcd: the router still carries everything else.
    lab.nft(
        &a,
        "table inet shoal_cut {\n\
         \tchain input { type filter hook input priority filter; ip saddr 10.91.1.2 drop; }\n\
         \tchain output { type filter hook output priority filter; ip daddr 10.91.1.2 drop; }\n\
         }\n",
    );
    let cut = Instant::now();
    // Through node-b, the room is created again as soon as it can be: while node-a
    // serves it, node-b forwards to node-a (ALREADY_EXISTS); once node-a's lease
    // expired in etcd, node-b places it anew.
    let taken = in_t_result(&t, move || {
        runtime().block_on(async move {
            let b = NodeApi::at(grpc_b);
            loop {
                match create(&b, "cut").await {
                    Ok(owner) => return owner,
                    Err(e) => {
                        assert!(
                            matches!(e.code(), Code::AlreadyExists | Code::Unavailable),
                            "{e:?}"
                        );
                        assert!(
                            cut.elapsed() < Duration::from_secs(u64::from(TTL) + 5),
                            "not taken over {:?} after the cut: {e:?}",
                            cut.elapsed()
                        );
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            }
        })
    });
    assert_eq!(taken, "node-b");
    // The cut heals: node-a learns its lease is gone and registers anew.
    lab.exec(&a, &["nft", "delete", "table", "inet", "shoal_cut"]);
    in_t_result(&t, move || {
        runtime().block_on(async move {
            let a = NodeApi::at(grpc_a);
            let deadline = Instant::now() + Duration::from_secs(15);
            loop {
                let cluster = a.info().await.cluster.expect("cluster info");
                if cluster.member && cluster.nodes.len() == 2 {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "node-a did not rejoin: {cluster:?}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    });
    // From both logs: node-a closed the room (its participant left) before node-b
    // placed it, so no instant had it open on both.
    for node in [&node_a, &node_b] {
        node.process.signal(nix::sys::signal::Signal::SIGKILL);
    }
    let (log_a, log_b) = (node_a.process.log(), node_b.process.log());
    let fenced = logged_at(&log_a, &[("event", "room_fenced"), ("room", "cut")]).expect("fenced");
    let left = logged_at(&log_a, &[("event", "leave"), ("reason", "node_fenced")])
        .expect("the participant left");
    let placed = logged_at(
        &log_b,
        &[
            ("event", "room_placed"),
            ("room", "cut"),
            ("owner", "node-b"),
        ],
    )
    .expect("placed on node-b");
    assert_eq!(fenced.0, placed.0, "one day");
    assert!(
        left.1 <= fenced.1,
        "the participant left before the room was logged closed"
    );
    let gap = placed.1 - fenced.1;
    assert!(
        gap > 0.0,
        "node-b placed the room {gap} s after node-a closed it"
    );
    assert!(logged_at(&log_a, &[("event", "cluster_lease_lost")]).is_some());
    eprintln!("node-a closed the room {gap:.3} s before node-b placed it");
}

/// Runs `f` in namespace `ns` and returns its result.
fn in_t_result<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    lab::netns::run_in(ns, f)
}

/// A WHIP POST with a token, sent to a node that does not own the room: the 307
/// carries a short-lived token in its URL (clients drop `Authorization` on a
/// redirect to another origin), and the owner admits the POST with it alone.
#[test]
fn whip_redirect_carries_a_short_lived_token() {
    let etcd = Etcd::start();
    let key = format!("{}:{}", tokens::KEY, tokens::SECRET);
    let operator = tokens::token("operator", tokens::operator("tokened"));
    let nodes: Vec<ClusterNode> = (0..2)
        .map(|i| {
            let mut node = ClusterNode::start(
                &etcd.url(),
                "/tokens",
                &format!("node-{i}"),
                TTL,
                &["--api-key", &key],
            );
            node.token = Some(operator.clone());
            node
        })
        .collect();
    let rt = runtime();
    let owner = rt.block_on(async {
        wait_formed(&nodes).await;
        let mut request = tonic::Request::new(CreateRoomRequest {
            name: "tokened".into(),
            ..CreateRoomRequest::default()
        });
        request.metadata_mut().insert(
            "authorization",
            format!("Bearer {operator}").parse().expect("metadata"),
        );
        nodes[0]
            .rooms()
            .await
            .create_room(request)
            .await
            .expect("room created")
            .into_inner()
            .node_id
    });
    let owner = nodes.iter().find(|n| n.id == owner).expect("the owner");
    let other = nodes.iter().find(|n| n.id != owner.id).expect("the other");
    let offer = http_client::fixture_offer("chromium156_data_offer.sdp");
    let token = tokens::token("alice", tokens::join("tokened"));
    let bearer = format!("Bearer {token}");
    let reply = http_client::request_with_headers(
        other.process.http,
        "POST",
        "/whip/tokened?name=Alice",
        &[
            ("Content-Type", "application/sdp"),
            ("Authorization", &bearer),
        ],
        offer.as_bytes(),
    );
    assert_eq!(reply.status, 307, "{}", reply.body);
    let location = reply.header("location").expect("a Location");
    let base = format!("http://{}", owner.process.http);
    let rest = location
        .strip_prefix(&base)
        .unwrap_or_else(|| panic!("{location} is on {base}"));
    let (path, query) = rest.split_once('?').expect("a query");
    assert_eq!(path, "/whip/tokened");
    assert!(query.contains("name=Alice"), "{query}");
    let carried = query
        .split('&')
        .find_map(|p| p.strip_prefix("access_token="))
        .expect("a token in the URL");
    assert_ne!(carried, token, "a new token, not the caller's");
    let claims: serde_json::Value = {
        use base64::Engine;
        let payload = carried.split('.').nth(1).expect("a JWT");
        let json = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(payload)
            .expect("base64url");
        serde_json::from_slice(&json).expect("JSON claims")
    };
    assert_eq!(claims["sub"], "alice");
    let exp = claims["exp"].as_u64().expect("exp");
    assert!(exp <= tokens::now() + 61, "short-lived: exp {exp}");
    // Followed without the header, as a browser does across origins.
    let followed = http_client::post_offer(owner.process.http, rest, &offer);
    assert_eq!(followed.status, 201, "{}", followed.body);
    // The redirecting node checked the token first: without one, no redirect.
    let refused = http_client::post_offer(other.process.http, "/whip/tokened", &offer);
    assert_eq!(refused.status, 401, "{}", refused.body);
}

/// The README's run command: `shoal` with no flags and no environment runs alone,
/// with no etcd anywhere.
#[test]
fn single_node_needs_no_etcd() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_shoal"))
        .env_clear()
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("shoal starts");
    let stdout = child.stdout.take().expect("stdout");
    let mut banner = Vec::new();
    for line in BufReader::new(stdout).lines() {
        let line = line.expect("a line");
        let last = line.starts_with("shoal: http ");
        banner.push(line);
        if last {
            break;
        }
    }
    assert!(
        banner.iter().any(|l| l == "shoal: cluster off (no --etcd)"),
        "{banner:?}"
    );
    let grpc = banner
        .iter()
        .find_map(|l| l.strip_prefix("shoal: grpc http://"))
        .expect("gRPC address")
        .to_owned();
    let rt = runtime();
    rt.block_on(async {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{grpc}"))
            .expect("URI")
            .connect()
            .await
            .expect("gRPC connects");
        let mut rooms =
            shoal_proto::v1::room_service_client::RoomServiceClient::new(channel.clone());
        let room = rooms
            .create_room(CreateRoomRequest {
                name: "alone".into(),
                ..CreateRoomRequest::default()
            })
            .await
            .expect("a room without etcd")
            .into_inner();
        assert_eq!(room.node_id, "");
        let info = shoal_proto::v1::node_service_client::NodeServiceClient::new(channel)
            .get_node_info(shoal_proto::v1::GetNodeInfoRequest {})
            .await
            .expect("NodeInfo")
            .into_inner();
        assert_eq!(info.node_id, "");
        assert!(info.cluster.is_none());
        assert_eq!(info.rooms, 1);
    });
    let _ = child.kill();
    let _ = child.wait();
}

/// A cluster with TLS on every connection. etcd serves `https://` and admits only
/// clients whose certificate the cluster's CA issued (`--client-cert-auth`); the
/// nodes serve gRPC and HTTP over TLS and call each other's gRPC verifying the
/// certificates against `--cluster-ca`. Over it, a room is placed (through etcd)
/// and a call about it forwarded to its owner, and a room cascaded over three nodes
/// (its links set up over the nodes' gRPC) carries every message once and in
/// order. A node whose `--etcd-ca` does not verify etcd never registers and says
/// why; a node whose `--cluster-ca` does not verify the others joins, but forwards
/// nothing to them.
#[test]
fn cluster_over_tls() {
    let dir = std::env::temp_dir().join(format!("shoal-cluster-tls-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a directory");
    let loopback = [IpAddr::V4(Ipv4Addr::LOCALHOST)];
    let ca = tls_cert::Ca::new(&dir, "cluster");
    let stranger = tls_cert::Ca::new(&dir, "stranger");
    let etcd_server = ca.issue("etcd", &loopback);
    let etcd_client = ca.issue("shoal-node", &[]);
    let node_cert = ca.issue("node", &loopback);
    let etcd = Etcd::start_tls(EtcdTls {
        cert: etcd_server.cert.clone(),
        key: etcd_server.key.clone(),
        ca: ca.cert.clone(),
        client_cert: etcd_client.cert.clone(),
        client_key: etcd_client.key.clone(),
    });
    assert!(etcd.url().starts_with("https://"));
    let prefix = "/tls";
    let text = |p: &Path| p.to_str().expect("a UTF-8 path").to_owned();
    // A node's flags: TLS on its listeners, and the CAs it verifies etcd and the
    // other nodes with.
    // A node's flags: its certificate (none: no TLS on its listeners, and no
    // --cluster-ca), and the CAs it verifies etcd and the other nodes with.
    let start_with = |id: &str,
                      region: &str,
                      cert: Option<&tls_cert::Issued>,
                      etcd_ca: &Path,
                      cluster_ca: &Path| {
        let mut flags = vec![
            "--region".to_owned(),
            region.to_owned(),
            "--etcd-ca".to_owned(),
            text(etcd_ca),
            "--etcd-cert".to_owned(),
            text(&etcd_client.cert),
            "--etcd-key".to_owned(),
            text(&etcd_client.key),
        ];
        if let Some(cert) = cert {
            flags.extend([
                "--tls-cert".to_owned(),
                text(&cert.cert),
                "--tls-key".to_owned(),
                text(&cert.key),
                "--cluster-ca".to_owned(),
                text(cluster_ca),
            ]);
        }
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let mut node = ClusterNode::start(&etcd.url(), prefix, id, TTL, &flags);
        if cert.is_some() {
            node.api.tls =
                Some(ClientTlsConfig::new().ca_certificate(Certificate::from_pem(&ca.pem)));
        }
        node
    };
    let start = |id: &str, region: &str, etcd_ca: &Path, cluster_ca: &Path| {
        start_with(id, region, Some(&node_cert), etcd_ca, cluster_ca)
    };
    let nodes: Vec<ClusterNode> = ["eu", "us", "ap"]
        .iter()
        .enumerate()
        .map(|(i, region)| start(&format!("node-{i}"), region, &ca.cert, &ca.cert))
        .collect();
    let rt = runtime();
    rt.block_on(async {
        wait_formed(&nodes).await;
        let seen = nodes[0].info().await.cluster.expect("a cluster").nodes;
        for n in &seen {
            assert!(n.grpc_url.starts_with("https://127.0.0.1:"), "{n:?}");
            assert!(n.http_url.starts_with("https://127.0.0.1:"), "{n:?}");
        }
        // Placed through etcd over TLS: the room created through node-0 for region
        // us is node-1's. node-2 knows its metadata only by asking node-1.
        let created = nodes[0]
            .rooms()
            .await
            .create_room(CreateRoomRequest {
                name: "placed".to_owned(),
                region: "us".to_owned(),
                metadata: "over tls".to_owned(),
                ..CreateRoomRequest::default()
            })
            .await
            .expect("created")
            .into_inner();
        assert_eq!(created.node_id, "node-1");
        assert_eq!(
            owners_in_etcd(&etcd, prefix).await.get("placed"),
            Some(&"node-1".to_owned())
        );
        let got = get_room(&nodes[2], "placed")
            .await
            .expect("GetRoom forwarded to the owner");
        assert_eq!(
            (got.node_id.as_str(), got.metadata.as_str()),
            ("node-1", "over tls")
        );
    });

    // One member per node, in three regions: the room spans all three. They send
    // once every link is up.
    let trust = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(&ca.pem));
    let via: Vec<&ClusterNode> = nodes.iter().collect();
    let go = Arc::new(AtomicBool::new(false));
    let exchange = Exchange::start_with(
        "spread",
        &["ann", "bob", "cid"],
        &via,
        go.clone(),
        Some(trust),
    );
    wait_fully_linked(&via, "spread");
    go.store(true, Ordering::SeqCst);
    exchange.wait();
    exchange.finish();

    // etcd's certificate does not chain to this node's --etcd-ca.
    let lost = start("node-lost", "eu", &stranger.cert, &ca.cert);
    let log = log_with(&lost, "cluster_register_failed", None);
    let line = log
        .lines()
        .find(|l| l.contains("cluster_register_failed"))
        .expect("the line");
    assert!(line.contains("certificate"), "{line}");
    // The other nodes' certificates do not chain to this node's --cluster-ca.
    let wary = start("node-wary", "eu", &ca.cert, &stranger.cert);
    rt.block_on(async {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let seen = wary.info().await.cluster.expect("a cluster").nodes;
            if seen.len() == 4 {
                let ids: BTreeSet<String> = seen.into_iter().map(|n| n.id).collect();
                assert!(!ids.contains("node-lost"), "{ids:?}");
                break;
            }
            assert!(
                Instant::now() < deadline,
                "node-wary sees {} nodes",
                seen.len()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let refused = get_room(&wary, "placed")
            .await
            .expect_err("node-1's certificate is not trusted");
        assert_eq!(refused.code(), Code::Unavailable, "{refused:?}");
        assert!(refused.message().contains("certificate"), "{refused:?}");
    });
    // A node whose certificate names another address than the one it registered:
    // no node calls it. A node that serves no TLS: the TLS nodes neither place
    // rooms on it nor call it.
    let elsewhere = [IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2))];
    let misnamed_cert = ca.issue("misnamed", &elsewhere);
    let misnamed = start_with(
        "node-misnamed",
        "sa",
        Some(&misnamed_cert),
        &ca.cert,
        &ca.cert,
    );
    let plain = start_with("node-plain", "pl", None, &ca.cert, &ca.cert);
    // node-0 leaves the plain node out of its view, and says so.
    let log = log_with(&nodes[0], "cluster_node_without_tls", None);
    assert!(
        log.lines()
            .any(|l| l.contains("cluster_node_without_tls") && l.contains("node-plain")),
        "{log}"
    );
    rt.block_on(async {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let seen = nodes[0].info().await.cluster.expect("a cluster").nodes;
            let ids: BTreeSet<String> = seen.into_iter().map(|n| n.id).collect();
            assert!(!ids.contains("node-plain"), "{ids:?}");
            if ids.contains("node-misnamed") {
                break;
            }
            assert!(Instant::now() < deadline, "node-0 sees {ids:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let refused = create_in(&nodes[0], "misnamed-room", "sa")
            .await
            .expect_err("node-misnamed's certificate is not for its address");
        assert_eq!(refused.code(), Code::Unavailable, "{refused:?}");
        assert!(
            refused.message().contains("not valid for name"),
            "{refused:?}"
        );
        let owner = create_in(&nodes[0], "plain-room", "pl")
            .await
            .expect("placed on a node that serves TLS");
        assert_ne!(owner, "node-plain");
    });
    drop((lost, wary, misnamed, plain, nodes, etcd));
    let _ = std::fs::remove_dir_all(&dir);
}

/// An etcd whose authentication is turned on (`auth enable`) under running nodes
/// given a user whose role may read and write the cluster's prefix (`--etcd-user`,
/// `--etcd-password-file`): they formed the cluster without a token, and place
/// rooms with one. A node with a wrong password, and one without a user, never
/// become members; their logs carry etcd's refusal. After etcd restarts (its
/// simple tokens live in its memory, so every token is gone) the nodes place rooms
/// again, and their views follow etcd again; and after the user's password
/// changes, in the file and then in etcd, without a restart of theirs.
#[test]
fn cluster_etcd_password_auth() {
    let dir = Scratch::new("auth");
    let wrong = dir.0.join("wrong");
    std::fs::write(&wrong, "not-the-secret\n").expect("the wrong password file");
    let wrong = wrong.to_str().expect("a UTF-8 path");

    let mut etcd = Etcd::start();
    let prefix = "/guarded";
    let rt = runtime();
    // A lease long enough that etcd's restart below never outlasts it.
    let ttl = 10;
    rt.block_on(etcd.add_users(prefix, "shoal-node", "node-secret"));
    let (nodes, password) = user_nodes(&etcd, prefix, &dir.0, ttl);
    rt.block_on(async {
        wait_formed(&nodes).await;
        etcd.turn_auth_on().await;
        let owner = create_when_able(&nodes[0], "guarded", "once authentication is on").await;
        assert_eq!(
            owners_in_etcd(&etcd, prefix).await.get("guarded"),
            Some(&owner)
        );
    });
    let as_user = ["--etcd-user", "shoal-node", "--etcd-password-file", wrong];
    let impostor = ClusterNode::start(&etcd.url(), prefix, "impostor", ttl, &as_user);
    let anonymous = ClusterNode::start(&etcd.url(), prefix, "anonymous", ttl, &[]);
    // Each says why it cannot register (it tries at once, and logs the first
    // failure): etcd refused the impostor's password, and the anonymous node's
    // requests.
    for (outsider, why) in [
        (&impostor, "authentication failed"),
        (&anonymous, "user name is empty"),
    ] {
        wait_logged(outsider, why);
    }
    rt.block_on(async {
        for outsider in [&impostor, &anonymous] {
            let cluster = outsider.info().await.cluster.expect("cluster info");
            assert!(!cluster.member, "{} is no member", outsider.id);
            let refused = create(outsider, "taken-over")
                .await
                .expect_err("an outsider places nothing");
            assert_eq!(refused.code(), Code::Unavailable, "{refused:?}");
        }
        // Neither registered: the members' views hold the two of them only.
        let view = nodes[1].info().await.cluster.expect("cluster info");
        let ids: BTreeSet<String> = view.nodes.iter().map(|n| n.id.clone()).collect();
        assert_eq!(
            ids,
            BTreeSet::from(["node-0".to_owned(), "node-1".to_owned()])
        );
        assert!(
            !owners_in_etcd(&etcd, prefix)
                .await
                .contains_key("taken-over")
        );
    });
    // A restart forgets every simple token.
    etcd.stop();
    etcd.resume();
    rt.block_on(async {
        for (i, node) in nodes.iter().enumerate() {
            create_when_able(node, &format!("after-restart-{i}"), "after etcd restarted").await;
        }
        wait_rooms_seen(&nodes, 3).await;
    });
    rotate_password(&rt, &etcd, &nodes, &password, 3);
    drop((nodes, impostor, anonymous));
}

/// A member whose password etcd stops taking (changed in etcd, not yet in its
/// file) finds out at its next request, and lets its lease lapse: etcd renews
/// leases without checking credentials, and a member that can place, release and
/// publish nothing must not stay in the others' views. Once its file has the new
/// password it authenticates and registers again, and places rooms.
#[test]
fn cluster_etcd_member_refused_lets_its_lease_lapse() {
    let dir = Scratch::new("refused");
    let mut etcd = Etcd::start();
    let prefix = "/guarded";
    let rt = runtime();
    rt.block_on(etcd.enable_auth(prefix, "shoal-node", "node-secret"));
    let (nodes, password) = user_nodes(&etcd, prefix, &dir.0, TTL);
    rt.block_on(async {
        wait_formed(&nodes).await;
        let mut root = etcd.client().await;
        root.user_change_password("shoal-node", "changed-in-etcd")
            .await
            .expect("the password changed");
        // node-0's next requests: its token is refused, then its password.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let refused = create(&nodes[0], "refused").await.expect_err("refused");
            assert_eq!(refused.code(), Code::Unavailable, "{refused:?}");
            if refused.message().contains("refused user") {
                break;
            }
            assert!(Instant::now() < deadline, "never refused: {refused:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let deadline = Instant::now() + Duration::from_secs(u64::from(TTL) + 5);
        loop {
            let view = nodes[1].info().await.cluster.expect("cluster info");
            if view.nodes.iter().all(|n| n.id != "node-0") {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "node-0 is still in node-1's view"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(!nodes[0].info().await.cluster.expect("cluster info").member);
    });
    wait_logged(&nodes[0], "cluster_auth_refused");
    std::fs::write(&password, "changed-in-etcd\n").expect("the new password");
    rt.block_on(async {
        wait_formed(&nodes).await;
        create_when_able(&nodes[0], "taken-again", "with the new password").await;
    });
    drop(nodes);
}

/// As `cluster_etcd_password_auth`, with etcd handing out JWT tokens (what etcd
/// advises for production): a token names the revision of etcd's users and roles
/// it was minted at, and etcd refuses it once they change ("revision of auth store
/// is old"), where etcd-client does not renew it by itself. Nodes place rooms
/// after an unrelated user is added, and after their own password changes.
#[test]
fn cluster_etcd_jwt_tokens_follow_auth_changes() {
    let dir = Scratch::new("jwt");
    let mut etcd = Etcd::start_jwt();
    let prefix = "/guarded";
    let rt = runtime();
    rt.block_on(etcd.enable_auth(prefix, "shoal-node", "node-secret"));
    let (nodes, password) = user_nodes(&etcd, prefix, &dir.0, TTL);
    rt.block_on(async {
        wait_formed(&nodes).await;
        create(&nodes[0], "guarded").await.expect("room created");
        let mut root = etcd.client().await;
        root.user_add("bystander", "bystander-secret", None)
            .await
            .expect("a user added");
        for (i, node) in nodes.iter().enumerate() {
            create_when_able(node, &format!("after-change-{i}"), "after a user was added").await;
        }
        wait_rooms_seen(&nodes, 3).await;
    });
    rotate_password(&rt, &etcd, &nodes, &password, 3);
    drop(nodes);
}

/// A directory of the test's own, deleted when it ends, failed or not.
struct Scratch(std::path::PathBuf);

impl Scratch {
    fn new(what: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("shoal-cluster-{what}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a directory");
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Waits up to 10 s until `node`'s log holds `text`.
fn wait_logged(node: &ClusterNode, text: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !node.process.log_so_far().contains(text) {
        assert!(
            Instant::now() < deadline,
            "{} does not log {text:?}: {}",
            node.id,
            node.process.log_so_far()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Two nodes of the cluster on `etcd` under `prefix`, as user `shoal-node`, its
/// password `node-secret` in a file in `dir`, with a lease of `ttl` seconds; the
/// nodes and the password file.
fn user_nodes(
    etcd: &Etcd,
    prefix: &str,
    dir: &Path,
    ttl: u32,
) -> (Vec<ClusterNode>, std::path::PathBuf) {
    let password = dir.join("password");
    std::fs::write(&password, "node-secret\n").expect("the password file");
    let file = password.to_str().expect("a UTF-8 path");
    let as_user = ["--etcd-user", "shoal-node", "--etcd-password-file", file];
    let nodes = (0..2)
        .map(|i| ClusterNode::start(&etcd.url(), prefix, &format!("node-{i}"), ttl, &as_user))
        .collect();
    (nodes, password)
}
/// Changes the nodes' password: first in its file, then in etcd. Each node then
/// places a room, and every view holds them (`rooms` rooms before).
fn rotate_password(
    rt: &tokio::runtime::Runtime,
    etcd: &Etcd,
    nodes: &[ClusterNode],
    password: &Path,
    rooms: u32,
) {
    std::fs::write(password, "rotated-secret\n").expect("the new password");
    rt.block_on(async {
        let mut root = etcd.client().await;
        root.user_change_password("shoal-node", "rotated-secret")
            .await
            .expect("the password changed");
        for (i, node) in nodes.iter().enumerate() {
            create_when_able(
                node,
                &format!("after-rotation-{i}"),
                "after the password changed",
            )
            .await;
        }
        wait_rooms_seen(nodes, rooms + 2).await;
    });
}
