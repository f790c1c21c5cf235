//! What strangers can make a node hold, and that it lets go: sessions that never
//! connect (`pending_sessions_are_bounded`), signalling clients that never read
//! (`slow_readers_cannot_grow_memory`), and connections that are slow, idle or too
//! many (`idle_and_slow_connections_time_out`, in `connection_limits/`). The tests
//! run one at a time: two measure the process's memory, the third the time each
//! connection is held.
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
//!
//! `slow_readers_cannot_grow_memory`: seven members that read join a room with 8 KiB
//! of metadata each (the last of them gets its join in pages), then 300 `/signal`
//! clients join it with 8 KiB of metadata each and never read, over sockets with
//! small receive buffers, one after another once every member has heard the one
//! before. Each is disconnected for not reading (its queue past
//! `--signal-queue-bytes`, or a write stuck for `--signal-write-timeout`, here 2 s),
//! counted in `GetNodeInfo.slow_signal_readers`, and its socket ends (after the
//! `leave` saying SIGNAL_SLOW_READER, where that could be written). Every reading
//! member heard every slow client join and leave, once, after its own pages, and
//! none was disconnected. The process's RSS, sampled throughout, stays within
//! 64 MiB of its RSS after a warm-up round of 100 such clients (without the bounds
//! it grew by 600 MB and kept it).

mod connection_limits;
mod grpc_node;
mod http_client;
mod signal_ws;
mod tls_cert;

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
/// `--session-setup-timeout`: long enough that the phases which count what is
/// pending at once (the node's cap, the usurper) finish before the first of their
/// sessions times out, even on a loaded machine.
const SETUP_TIMEOUT: Duration = Duration::from_secs(4);
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

/// The room the slow readers join.
const CROWDED: &str = "crowded";
/// `--signal-write-timeout` of the slow readers' node, in seconds.
const SLOW_WRITE_TIMEOUT_SECS: u64 = 2;
/// Metadata of every member of the crowded room: the most a join may carry.
const METADATA_BYTES: usize = 8192;
/// Reading members in the room before the slow readers come: enough metadata that
/// the last of them to join gets its join in pages.
const LISTENERS: usize = 7;
/// Slow readers in the measured round.
const SLOW_READERS: usize = 300;
/// Slow readers in the warm-up round.
const WARM_UP_READERS: usize = 100;
/// What the process's RSS may grow by while the slow readers are in the room,
/// over its RSS after the warm-up round, in KiB. Without bounds it grew by 600 MB
/// at 300 such sockets.
const RSS_GROWTH_BOUND_KIB: u64 = 64 * 1024;
/// A slow reader's socket receive buffer (the kernel doubles it): small, so that
/// what the node writes to it waits in the node, not in the test's kernel.
const SLOW_RCVBUF_BYTES: u32 = 4096;

/// What one reading member heard, in order.
#[derive(Debug, Default)]
struct Heard {
    /// The identities of its join response and the pages after it.
    initial: Vec<String>,
    /// `others` pages after the join response.
    pages: usize,
    /// The last page (or the join response itself) said no more follow.
    complete: bool,
    /// Participant events that came before the view was complete.
    early_events: usize,
    /// Participant events: kind and identity, and the reason of a `left`.
    events: Vec<(i64, String, i64)>,
    /// A `leave`: it was removed.
    leave: Option<serde_json::Value>,
}

impl Heard {
    fn joined(&self) -> impl Iterator<Item = &str> {
        self.events
            .iter()
            .filter(|(kind, _, _)| *kind == 1)
            .map(|(_, who, _)| who.as_str())
    }

    fn left(&self) -> impl Iterator<Item = (&str, i64)> {
        self.events
            .iter()
            .filter(|(kind, _, _)| *kind == 3)
            .map(|(_, who, reason)| (who.as_str(), *reason))
    }

    /// The room as its messages describe it: the pages, then every event in order.
    fn view(&self) -> std::collections::BTreeSet<String> {
        let mut view: std::collections::BTreeSet<String> = self.initial.iter().cloned().collect();
        for (kind, who, _) in &self.events {
            if *kind == 3 {
                view.remove(who);
            } else {
                view.insert(who.clone());
            }
        }
        view
    }
}

fn identities(list: &serde_json::Value) -> impl Iterator<Item = String> + '_ {
    list.as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["identity"].as_str().map(str::to_owned))
}

/// Joins the crowded room as `identity`, and reads everything the node sends into
/// `heard` until the socket closes (or the task is aborted).
async fn reading_member(
    http: SocketAddr,
    identity: String,
    heard: Arc<std::sync::Mutex<Heard>>,
) -> tokio::task::JoinHandle<()> {
    use futures_util::{SinkExt, StreamExt};
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{http}/signal"))
        .await
        .expect("WebSocket handshake");
    let join = serde_json::json!({"join": {
        "room": CROWDED, "identity": identity, "metadata": "r".repeat(METADATA_BYTES)
    }});
    ws.send(tokio_tungstenite::tungstenite::Message::text(
        join.to_string(),
    ))
    .await
    .expect("join sent");
    tokio::spawn(async move {
        while let Some(Ok(frame)) = ws.next().await {
            let tokio_tungstenite::tungstenite::Message::Text(text) = frame else {
                continue;
            };
            let m: serde_json::Value = serde_json::from_str(&text).expect("JSON");
            let mut h = heard.lock().expect("heard");
            if let Some(join) = m.get("join") {
                h.initial.extend(identities(&join["others"]));
                h.complete = join["more"] != true;
            } else if let Some(page) = m.get("others") {
                h.initial.extend(identities(&page["others"]));
                h.pages += 1;
                h.complete = page["more"] != true;
            } else if let Some(event) = m.get("participant") {
                if !h.complete {
                    h.early_events += 1;
                }
                let who = event["participant"]["identity"].as_str().unwrap_or("");
                let kind = event["kind"].as_i64().unwrap_or(0);
                let reason = event["reason"].as_i64().unwrap_or(0);
                h.events.push((kind, who.to_owned(), reason));
            } else if m.get("leave").is_some() {
                h.leave = Some(m);
            }
        }
    })
}

/// A `/signal` client that joins the crowded room with the most metadata and never
/// reads, over a socket with a small receive buffer.
async fn slow_reader(http: SocketAddr, identity: &str) -> signal_ws::Ws {
    use futures_util::SinkExt;
    let socket = tokio::net::TcpSocket::new_v4().expect("a socket");
    // Before connecting: the window scale is agreed in the handshake.
    socket
        .set_recv_buffer_size(SLOW_RCVBUF_BYTES)
        .expect("SO_RCVBUF");
    let stream = socket.connect(http).await.expect("connected");
    let config =
        tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default().read_buffer_size(4096);
    let (mut ws, _) = tokio_tungstenite::client_async_with_config(
        format!("ws://{http}/signal"),
        tokio_tungstenite::MaybeTlsStream::Plain(stream),
        Some(config),
    )
    .await
    .expect("WebSocket handshake");
    let join = serde_json::json!({"join": {
        "room": CROWDED, "identity": identity, "metadata": "s".repeat(METADATA_BYTES)
    }});
    ws.send(tokio_tungstenite::tungstenite::Message::text(
        join.to_string(),
    ))
    .await
    .expect("join sent");
    ws
}

/// Polls `done` every few milliseconds (sampling the RSS into `peak_kib`) until it
/// holds; fails with `what` after `limit`.
async fn poll_until(
    limit: Duration,
    what: &str,
    peak_kib: &mut u64,
    mut done: impl AsyncFnMut() -> Result<(), String>,
) {
    let deadline = Instant::now() + limit;
    loop {
        *peak_kib = (*peak_kib).max(rss_kib());
        match done().await {
            Ok(()) => return,
            Err(state) => assert!(
                Instant::now() < deadline,
                "{what}: {state} (RSS peak {peak_kib} KiB)"
            ),
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// One round: `LISTENERS` reading members join the crowded room, then `slow` slow
/// readers, one after another, each once every listener heard the one before.
/// Waits until the node has disconnected every slow reader, checks what everyone
/// heard, then closes everything and waits for the room to empty. Returns the
/// highest RSS seen (KiB).
async fn slow_round(
    http: SocketAddr,
    nodes: &mut NodeServiceClient<tonic::transport::Channel>,
    rooms: &mut shoal_proto::v1::room_service_client::RoomServiceClient<tonic::transport::Channel>,
    round: &str,
    slow: usize,
) -> u64 {
    let mut peak_kib = rss_kib();
    let node_info = async |nodes: &mut NodeServiceClient<tonic::transport::Channel>| {
        nodes
            .get_node_info(shoal_proto::v1::GetNodeInfoRequest {})
            .await
            .expect("GetNodeInfo")
            .into_inner()
    };
    let counted_before = node_info(nodes).await.slow_signal_readers;

    let mut listeners = Vec::new();
    for i in 0..LISTENERS {
        let heard = Arc::new(std::sync::Mutex::new(Heard::default()));
        let identity = format!("{round}-listener-{i}");
        let task = reading_member(http, identity.clone(), heard.clone()).await;
        let seen = heard.clone();
        poll_until(
            WAIT_FOR_NODE,
            "a listener's join",
            &mut peak_kib,
            async || {
                let h = seen.lock().expect("heard");
                (h.complete && h.initial.len() == i)
                    .then_some(())
                    .ok_or_else(|| format!("{h:?}"))
            },
        )
        .await;
        listeners.push((identity, heard, task));
    }

    let mut slow_sockets = Vec::new();
    let slow_ids: Vec<String> = (0..slow).map(|i| format!("{round}-slow-{i:03}")).collect();
    for (i, identity) in slow_ids.iter().enumerate() {
        slow_sockets.push(slow_reader(http, identity).await);
        poll_until(
            WAIT_FOR_NODE,
            "every listener hears the join",
            &mut peak_kib,
            async || {
                for (who, heard, _) in &listeners {
                    let n = heard.lock().expect("heard").joined().count();
                    if n <= i {
                        return Err(format!("{who} heard {n} joins of {}", i + 1));
                    }
                }
                Ok(())
            },
        )
        .await;
    }

    // Each slow reader is disconnected: past its queue's bound, or its write stuck.
    let deadline = Duration::from_secs(SLOW_WRITE_TIMEOUT_SECS * 10 + 30);
    poll_until(
        deadline,
        "every slow reader disconnected",
        &mut peak_kib,
        async || {
            let counted = node_info(nodes).await.slow_signal_readers - counted_before;
            let left: Vec<usize> = listeners
                .iter()
                .map(|(_, heard, _)| heard.lock().expect("heard").left().count())
                .collect();
            (counted == slow as u64 && left.iter().all(|n| *n == slow))
                .then_some(())
                .ok_or_else(|| {
                    format!("{counted} counted, listeners heard {left:?} leave, of {slow}")
                })
        },
    )
    .await;

    // Every listener heard every slow reader come and go, once, in order, and is
    // still there.
    let patients: Vec<String> = listeners.iter().map(|(who, _, _)| who.clone()).collect();
    for (i, (who, heard, _)) in listeners.iter().enumerate() {
        let h = heard.lock().expect("heard");
        assert!(h.leave.is_none(), "{who} was removed: {:?}", h.leave);
        assert_eq!(h.early_events, 0, "{who}: an event before its pages");
        assert_eq!(h.initial, patients[..i], "{who}'s join and pages");
        let joined: Vec<&str> = h.joined().filter(|j| j.contains("-slow-")).collect();
        assert_eq!(
            joined, slow_ids,
            "{who} heard every slow join once, in order"
        );
        let mut left: Vec<(&str, i64)> = h.left().collect();
        left.sort();
        let expected: Vec<(&str, i64)> = slow_ids
            .iter()
            .map(|s| (s.as_str(), DisconnectReason::SignalSlowReader as i64))
            .collect();
        assert_eq!(left, expected, "{who} heard every slow reader leave, once");
        // Pages, then events: the room as it is.
        let expected: std::collections::BTreeSet<String> =
            patients.iter().filter(|p| *p != who).cloned().collect();
        assert_eq!(h.view(), expected, "{who}'s view of the room");
    }
    {
        let last = listeners[LISTENERS - 1].1.lock().expect("heard");
        assert!(
            last.pages >= 1,
            "{} others with {METADATA_BYTES} bytes of metadata come in pages: {:?}",
            LISTENERS - 1,
            last.initial
        );
    }
    let in_room = grpc_node::participants(rooms, CROWDED).await;
    assert_eq!(in_room, LISTENERS, "only the listeners are left");

    // What each slow socket got: its join first, then, if it could be written, the
    // leave saying why; then the socket ends.
    let mut told = 0;
    for (identity, mut ws) in slow_ids.iter().zip(slow_sockets) {
        let first = signal_ws::next_json(&mut ws).await;
        let first = first.unwrap_or_else(|| panic!("{identity} got nothing"));
        assert!(first.get("join").is_some(), "{identity}: {first}");
        let mut last = first;
        while let Some(m) = signal_ws::next_json(&mut ws).await {
            last = m;
        }
        if let Some(leave) = last.get("leave") {
            assert_eq!(
                leave["reason"],
                DisconnectReason::SignalSlowReader as i32,
                "{identity}: {leave}"
            );
            told += 1;
        }
    }
    eprintln!(
        "{round}: {slow} slow readers disconnected, {told} of them read the leave before \
         the socket ended"
    );

    for (_, _, task) in listeners {
        task.abort();
    }
    poll_until(
        WAIT_FOR_NODE,
        "the room empties",
        &mut peak_kib,
        async || {
            let n = grpc_node::participants(rooms, CROWDED).await;
            (n == 0).then_some(()).ok_or_else(|| format!("{n} left"))
        },
    )
    .await;
    peak_kib
}

/// How long the node may take for anything it is waiting on here.
const WAIT_FOR_NODE: Duration = Duration::from_secs(10);

#[test]
fn idle_and_slow_connections_time_out() {
    // Its timings would stretch under another test's flood.
    let _turn = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    connection_limits::run();
}

#[test]
fn slow_readers_cannot_grow_memory() {
    let _turn = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut node = grpc_node::node_in(Config {
        shards: std::num::NonZeroUsize::new(1).expect("non-zero"),
        signal_write_timeout: SLOW_WRITE_TIMEOUT_SECS,
        // Signalling joins that never offer are pending sessions: neither their caps
        // nor their timeout may remove the slow readers first.
        session_setup_timeout: 600,
        max_pending_sessions: 10_000,
        max_pending_sessions_per_address: 10_000,
        ..Config::default()
    });
    let http = node.http;
    let grpc = node.control.grpc_addr().expect("gRPC is on");
    let runtime = &node.runtime;
    let rooms = &mut node.rooms;
    runtime.block_on(async {
        let mut nodes = NodeServiceClient::new(grpc_node::connect(grpc).await);
        let warm_peak = slow_round(http, &mut nodes, rooms, "warm", WARM_UP_READERS).await;
        let rss_before = rss_kib();
        let peak = slow_round(http, &mut nodes, rooms, "main", SLOW_READERS).await;
        let rss_after = rss_kib();
        let info = nodes
            .get_node_info(shoal_proto::v1::GetNodeInfoRequest {})
            .await
            .expect("GetNodeInfo")
            .into_inner();
        assert_eq!(
            info.slow_signal_readers,
            (WARM_UP_READERS + SLOW_READERS) as u64
        );
        eprintln!(
            "slow readers: RSS peak {warm_peak} KiB in the warm-up, {rss_before} KiB after \
             it; peak {peak} KiB with {SLOW_READERS} slow readers, {rss_after} KiB after"
        );
        assert!(
            peak <= rss_before + RSS_GROWTH_BOUND_KIB,
            "RSS grew from {rss_before} KiB to {peak} KiB with {SLOW_READERS} slow readers"
        );
        assert!(
            rss_after <= rss_before + RSS_GROWTH_BOUND_KIB,
            "RSS {rss_after} KiB after the slow readers left, {rss_before} KiB before"
        );
    });
}
