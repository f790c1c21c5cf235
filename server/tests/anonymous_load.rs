//! What strangers can make a node hold, and that it lets go: sessions that never
//! connect (`pending_sessions_are_bounded`, here) and connections that are slow,
//! idle or too many (`idle_and_slow_connections_time_out`, in
//! `connection_limits/`). The tests run one at a time: one measures the process's
//! memory, the other the time each connection is held.
//!
//! `pending_sessions_are_bounded`: 5 000 WHIP POSTs whose sessions never connect,
//! from three client addresses (127.0.0.2–4), against a node with short setup
//! timeouts: the node never holds more pending sessions than its caps allow, the
//! excess gets 503 with a `Retry-After`, every session times out and frees its
//! participant, its peer and its memory, and meanwhile a legitimate client on
//! another address (127.0.0.1, shoal's own client stack over real UDP) publishes
//! over WHIP and connects, again and again. A `/signal` join that never offers
//! holds a pending slot too, and times out the same way: the client hears `leave`
//! with CONNECTION_TIMEOUT. At the end, the node's own cap is reached from many
//! addresses and refuses too, and a refused session with a taken identity does not
//! replace that identity's participant.
//!
//! Memory: the process's RSS after the flood is within 10 % of its RSS after a
//! warm-up round of the same flood (the allocator keeps what it once needed; a leak
//! grows with every round, which the comparison catches).

mod connection_limits;
mod grpc_node;
mod http_client;
mod signal_ws;

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use shoal_components::peer::PeerId;
use shoal_components::time::Time;
use shoal_proto::v1::DisconnectReason;
use shoal_proto::v1::node_service_client::NodeServiceClient;
use shoal_server::config::Config;
use shoal_server::endpoint::{self, Control, data_offer};
use shoal_systems::{Command, Shard, ShardConfig, ShardEvent};

const ROOM: &str = "flooded";
/// `--session-setup-timeout`.
const SETUP_TIMEOUT: Duration = Duration::from_secs(2);
/// `--max-pending-sessions-per-address`.
const PER_ADDRESS: usize = 40;
/// `--max-pending-sessions`: above what the three flooding addresses can hold, so
/// the legitimate client always finds a slot.
const PER_NODE: usize = 3 * PER_ADDRESS + 8;
/// POSTs in the flood.
const FLOOD: u32 = 5_000;
/// How long a legitimate session may take to connect while the flood runs.
const CONNECT_DEADLINE: Duration = Duration::from_secs(10);
/// The client stack's one peer: the node.
const NODE: PeerId = PeerId(1);

fn loopback(last: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, last))
}

/// The process's resident set, in KiB.
fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// What the flood saw.
#[derive(Debug, Default)]
struct Flood {
    created: u32,
    refused: u32,
    other: Vec<String>,
}

/// POSTs `count` offers to the room from `sources` (one thread each, at most
/// `per_source` from each) and checks each refusal's `Retry-After`.
fn flood(
    http: SocketAddr,
    sources: &[IpAddr],
    count: u32,
    per_source: u32,
    offer: &Arc<String>,
) -> Flood {
    let left = Arc::new(AtomicU32::new(count));
    let threads: Vec<_> = sources
        .iter()
        .map(|&source| {
            let (left, offer) = (left.clone(), offer.clone());
            std::thread::spawn(move || {
                let mut seen = Flood::default();
                while seen.created + seen.refused + (seen.other.len() as u32) < per_source
                    && left
                        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                        .is_ok()
                {
                    let reply = http_client::post_offer_from(
                        source,
                        http,
                        &format!("/whip/{ROOM}"),
                        &offer,
                    );
                    match reply.status {
                        201 => seen.created += 1,
                        503 => {
                            seen.refused += 1;
                            let retry: Option<u64> =
                                reply.header("retry-after").and_then(|v| v.parse().ok());
                            // The setup timeout, and the second it takes to sweep.
                            let bound = SETUP_TIMEOUT.as_secs() + 1;
                            if !retry.is_some_and(|s| (1..=bound).contains(&s)) {
                                seen.other.push(format!(
                                    "503 from {source} with Retry-After {:?}: {}",
                                    reply.header("retry-after"),
                                    reply.body
                                ));
                            }
                        }
                        status => seen
                            .other
                            .push(format!("{status} from {source}: {}", reply.body)),
                    }
                }
                seen
            })
        })
        .collect();
    threads
        .into_iter()
        .map(|t| t.join().expect("a flooding thread"))
        .fold(Flood::default(), |mut all, f| {
            all.created += f.created;
            all.refused += f.refused;
            all.other.extend(f.other);
            all
        })
}

/// One legitimate publisher: shoal's client stack posts a data-channel offer over
/// WHIP from 127.0.0.1, connects (ICE, DTLS, SCTP) over real UDP, stays connected
/// for `stay`, then DELETEs its session (a 404 would say the node dropped it).
/// Returns how long the connection took.
fn legitimate_session(http: SocketAddr, seed: u64, stay: Duration) -> Result<Duration, String> {
    let started = Instant::now();
    let socket = UdpSocket::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    let mut shard = Shard::new(ShardConfig::new(
        socket.local_addr().map_err(|e| e.to_string())?,
        seed,
    ));
    let mut rng = endpoint::os_rng().map_err(|e| e.to_string())?;
    let offer = data_offer(NODE, shard.fingerprint(), &mut rng);
    let reply =
        http_client::post_offer_from(loopback(1), http, &format!("/whip/{ROOM}"), offer.sdp());
    if reply.status != 201 {
        return Err(format!("POST answered {}: {}", reply.status, reply.body));
    }
    let location = reply.header("location").unwrap_or_default().to_owned();
    let peer = offer.accept(&reply.body).map_err(|e| format!("{e:?}"))?;
    shard
        .command(Time::ZERO, Command::AddPeer(peer))
        .map_err(|e| format!("{e:?}"))?;
    let mut connected = None;
    let mut lost = None;
    endpoint::run(socket, shard, |_, _, events| {
        for event in events.drain(..) {
            match event {
                ShardEvent::SctpEstablished { .. } => connected = Some(started.elapsed()),
                ShardEvent::PeerRemoved { .. } => lost = Some(format!("{event:?}")),
                _ => {}
            }
        }
        let stayed = connected.is_some_and(|took| started.elapsed() >= took + stay);
        if stayed || lost.is_some() || (connected.is_none() && started.elapsed() > CONNECT_DEADLINE)
        {
            Control::Stop
        } else {
            Control::Continue
        }
    })
    .map_err(|e| e.to_string())?;
    let deleted = http_client::request(http, "DELETE", &location, None, b"");
    if deleted.status != 200 {
        return Err(format!("DELETE answered {}", deleted.status));
    }
    match (connected, lost) {
        (Some(took), _) => Ok(took),
        (None, Some(lost)) => Err(format!("lost before connecting: {lost}")),
        (None, None) => Err(format!("not connected within {CONNECT_DEADLINE:?}")),
    }
}

/// The flood, watched: pending sessions sampled while it runs, and legitimate
/// sessions connecting one after another until it ends; checks both and returns
/// what the flood saw.
fn watched_flood(
    http: SocketAddr,
    grpc: SocketAddr,
    flooders: &[IpAddr],
    count: u32,
    offer: &Arc<String>,
) -> Flood {
    let done = Arc::new(AtomicBool::new(false));
    let watcher = {
        let done = done.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            let mut nodes = NodeServiceClient::new(runtime.block_on(grpc_node::connect(grpc)));
            let mut most = 0;
            while !done.load(Ordering::SeqCst) {
                let info = runtime
                    .block_on(nodes.get_node_info(shoal_proto::v1::GetNodeInfoRequest {}))
                    .expect("GetNodeInfo")
                    .into_inner();
                most = most.max(info.pending_sessions);
                std::thread::sleep(Duration::from_millis(10));
            }
            most
        })
    };
    let legitimate = {
        let done = done.clone();
        std::thread::spawn(move || {
            let mut results = Vec::new();
            let mut seed = 1;
            while !done.load(Ordering::SeqCst) {
                results.push(legitimate_session(http, seed, Duration::ZERO));
                seed += 1;
            }
            results
        })
    };
    // One more stays past the setup timeout: connected, it must not be taken for a
    // session that never connected.
    let stayer = std::thread::spawn(move || {
        legitimate_session(http, 1_000, SETUP_TIMEOUT + Duration::from_millis(1_500))
    });
    let started = Instant::now();
    let seen = flood(http, flooders, count, u32::MAX, offer);
    let flood_took = started.elapsed();
    // Let one more legitimate session start after the flood's last POST.
    std::thread::sleep(Duration::from_millis(100));
    done.store(true, Ordering::SeqCst);
    let most_pending = watcher.join().expect("the watcher");
    let sessions = legitimate.join().expect("the legitimate client");
    let stayed = stayer.join().expect("the client that stays");
    assert!(stayed.is_ok(), "the session that stayed: {stayed:?}");

    assert!(
        seen.other.is_empty(),
        "unexpected replies: {:?}",
        seen.other
    );
    assert_eq!(seen.created + seen.refused, count);
    assert!(
        seen.refused > 0 && seen.created > 0,
        "the caps must both admit and refuse: {seen:?} in {flood_took:?}"
    );
    // The flooders hold at most their caps; the legitimate client one more.
    assert!(
        most_pending as usize <= flooders.len() * PER_ADDRESS + 1,
        "{most_pending} pending at once"
    );
    assert!(
        sessions.len() >= 2,
        "the flood ended before two legitimate sessions: {sessions:?} ({flood_took:?})"
    );
    for (i, session) in sessions.iter().enumerate() {
        assert!(session.is_ok(), "legitimate session {i}: {session:?}");
    }
    seen
}

/// Polls until the node holds no pending session, no participant and only
/// `entities` entities on its shard.
fn wait_until_freed(
    node: &mut grpc_node::RoomNode,
    nodes: &mut NodeServiceClient<tonic::transport::Channel>,
    entities: usize,
) {
    let deadline = Instant::now() + SETUP_TIMEOUT * 3 + Duration::from_secs(5);
    loop {
        let info = node
            .runtime
            .block_on(nodes.get_node_info(shoal_proto::v1::GetNodeInfoRequest {}))
            .expect("GetNodeInfo")
            .into_inner();
        let report = grpc_node::shard_report(&node.server, 0);
        if info.pending_sessions == 0 && info.participants == 0 && report.entities <= entities {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "still held after the setup timeout: {} pending, {} participants, {} entities \
             (baseline {entities}), {} peers",
            info.pending_sessions,
            info.participants,
            report.entities,
            report.peers
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One test at a time: see the module's doc.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn pending_sessions_are_bounded() {
    let _turn = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut node = grpc_node::node_with_room_in(
        ROOM,
        Config {
            shards: std::num::NonZeroUsize::new(1).expect("non-zero"),
            session_setup_timeout: SETUP_TIMEOUT.as_secs(),
            max_pending_sessions: PER_NODE,
            max_pending_sessions_per_address: PER_ADDRESS,
            // Room for every session the caps let in, so the room is never the limit.
            max_participants_per_room: 1_000,
            ..Config::default()
        },
    );
    let http = node.http;
    let grpc = node.control.grpc_addr().expect("gRPC is on");
    let mut nodes = NodeServiceClient::new(node.runtime.block_on(grpc_node::connect(grpc)));
    let offer = Arc::new(http_client::fixture_offer("chromium156_av_data_offer.sdp"));
    let flooders = [loopback(2), loopback(3), loopback(4)];
    let baseline_entities = grpc_node::shard_report(&node.server, 0).entities;

    // Warm-up: the same watched flood, smaller, and everything it left freed.
    let warm = watched_flood(http, grpc, &flooders, 2_000, &offer);
    wait_until_freed(&mut node, &mut nodes, baseline_entities);
    let rss_before = rss_kib();

    let seen = watched_flood(http, grpc, &flooders, FLOOD, &offer);

    // Every flooded session times out and leaves nothing behind.
    wait_until_freed(&mut node, &mut nodes, baseline_entities);
    let info = node
        .runtime
        .block_on(nodes.get_node_info(shoal_proto::v1::GetNodeInfoRequest {}))
        .expect("GetNodeInfo")
        .into_inner();
    let timed_out = u64::from(warm.created + seen.created);
    assert_eq!(
        info.session_setup_timeouts, timed_out,
        "every session that did not connect timed out, and only those"
    );
    assert_eq!(
        info.pending_refusals.get("address").copied(),
        Some(u64::from(warm.refused + seen.refused))
    );
    let rss_after = rss_kib();
    assert!(
        rss_after * 10 <= rss_before * 11,
        "RSS grew from {rss_before} KiB to {rss_after} KiB"
    );

    eprintln!(
        "flood: {} created, {} refused; RSS {rss_before} KiB after the warm-up, \
         {rss_after} KiB after the flood",
        seen.created, seen.refused
    );

    // A signalling join that never offers.
    node.runtime.block_on(async {
        use futures_util::SinkExt;
        let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{http}/signal"))
            .await
            .expect("WebSocket handshake");
        let join = serde_json::json!({"join": {"room": ROOM, "identity": "silent"}});
        ws.send(tokio_tungstenite::tungstenite::Message::text(
            join.to_string(),
        ))
        .await
        .expect("join sent");
        let joined = signal_ws::next_json(&mut ws).await.expect("joined");
        assert!(joined.get("join").is_some(), "{joined}");
        let started = Instant::now();
        let leave = loop {
            let message = signal_ws::next_json(&mut ws)
                .await
                .expect("a leave before the socket closes");
            if message.get("leave").is_some() {
                break message;
            }
        };
        let took = started.elapsed();
        assert_eq!(
            leave["leave"]["reason"],
            DisconnectReason::ConnectionTimeout as i32,
            "{leave}"
        );
        assert!(
            took >= SETUP_TIMEOUT - Duration::from_millis(100)
                && took <= SETUP_TIMEOUT + Duration::from_secs(2),
            "left after {took:?}"
        );
        assert!(
            signal_ws::next_json(&mut ws).await.is_none(),
            "then it closes"
        );
    });
    wait_until_freed(&mut node, &mut nodes, baseline_entities);

    // The node's own cap: many addresses, a few sessions each, after one session
    // with a known identity.
    let keeper = http_client::post_offer_from(
        loopback(100),
        http,
        &format!("/whip/{ROOM}?identity=keeper"),
        &offer,
    );
    assert_eq!(keeper.status, 201, "{}", keeper.body);
    let many: Vec<IpAddr> = (10..10 + (PER_NODE / 4 + 2) as u8).map(loopback).collect();
    let wide = flood(http, &many, (PER_NODE + 20) as u32, 5, &offer);
    assert!(wide.other.is_empty(), "{:?}", wide.other);
    assert_eq!(wide.created as usize, PER_NODE - 1);
    // A refused session replaces no one: the keeper's identity stays taken.
    let usurper = http_client::post_offer_from(
        loopback(101),
        http,
        &format!("/whip/{ROOM}?identity=keeper"),
        &offer,
    );
    assert_eq!(usurper.status, 503, "{}", usurper.body);
    let listed = node
        .runtime
        .block_on(
            node.rooms
                .list_participants(shoal_proto::v1::ListParticipantsRequest {
                    room: ROOM.into(),
                    page_size: 250,
                    ..Default::default()
                }),
        )
        .expect("listed")
        .into_inner()
        .participants;
    assert_eq!(listed.len(), PER_NODE);
    assert!(
        listed.iter().any(|p| p.identity == "keeper"),
        "the keeper is still there"
    );
    let info = node
        .runtime
        .block_on(nodes.get_node_info(shoal_proto::v1::GetNodeInfoRequest {}))
        .expect("GetNodeInfo")
        .into_inner();
    // The flood's excess and the usurper.
    assert_eq!(
        info.pending_refusals.get("node").copied(),
        Some(u64::from(wide.refused) + 1)
    );
    wait_until_freed(&mut node, &mut nodes, baseline_entities);
}
