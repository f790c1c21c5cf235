//! `/metrics` against what went through the node: a node (real shards on UDP, the
//! control plane on HTTP and gRPC) with one room; a join to a room that does not
//! exist, refused; then two shoal client stacks join over `/signal`, each a shard of
//! its own on a real socket: a publisher (Opus and VP8, and a data channel) and a
//! subscriber with a data channel. The publisher sends audio packets and reliable
//! messages on a channel of its own; the subscriber counts what arrives. The node's
//! `/metrics`, read with a Prometheus text parser shoal did not write
//! (`prometheus-parse`), must say exactly that: the packets received from the
//! publisher, the copies forwarded (each one the subscriber received), the messages
//! relayed, the two joins and the refused one, the tracks, subscriptions, channels
//! and associations the shard holds, the gRPC and HTTP requests made; and after both
//! leave, two leaves and no peer.
//!
//! Every wait has a wall-clock deadline, so a stall fails rather than hangs; nothing
//! sleeps to let a race pass (the waits poll what they wait for).

mod grpc_node;

use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use shoal_components::media::TrackSpec;
use shoal_components::peer::PeerId;
use shoal_components::rtp::{RtpFields, RtpWriter};
use shoal_components::sctp::dcep::ChannelType;
use shoal_server::config::Config;
use shoal_server::endpoint::media::AUDIO_SOURCE;
use shoal_server::endpoint::{self, Control, MediaOffer, OfferShape, media_offer};
use shoal_systems::{Command, Shard, ShardConfig, ShardEvent};
use tokio::sync::oneshot;
use tokio_tungstenite::tungstenite::Message;

const ROOM: &str = "metered";
/// The client stacks' one peer: the node.
const NODE: PeerId = PeerId(1);
/// Audio packets the publisher sends.
const AUDIO_PACKETS: u64 = 120;
/// Reliable messages the publisher sends.
const MESSAGES: u64 = 40;
const DEADLINE: Duration = Duration::from_secs(30);
/// Audio packets and messages the publisher sends in one turn of its loop, at most.
const PER_TURN: usize = 8;

/// What a participant's signalling hands its shard thread.
enum Signalled {
    /// The node's answer, read: the peer, the sources, the first tracks to receive.
    Session(Box<endpoint::MediaSession>),
    /// Tracks a later offer of the node added.
    Receive(Vec<TrackSpec>),
}

/// What the two participants share.
#[derive(Default)]
struct Shared {
    /// The subscriber's association is up, and it receives the publisher's tracks.
    subscriber_ready: AtomicBool,
    /// Audio packets the publisher handed its shard.
    audio_sent: AtomicU64,
    /// Messages the publisher queued.
    messages_sent: AtomicU64,
    /// Audio packets the subscriber received.
    audio_received: AtomicU64,
    /// Messages the subscriber received on the publisher's channel, in order.
    messages_received: AtomicU64,
    /// Set when the test has read what it needs: the participants stop.
    stop: AtomicBool,
}

#[test]
fn metrics_match_traffic() {
    let config = Config {
        shards: std::num::NonZeroUsize::new(1).expect("non-zero"),
        auto_create_rooms: false,
        ..Config::default()
    };
    let node = grpc_node::node_with_room_in(ROOM, config);
    let http = node.http;

    // A join to a room that does not exist: refused with not_found.
    let refused = refused_join(http, "no-such-room");
    assert_eq!(refused, "not_found");

    let shared = Arc::new(Shared::default());
    let (publisher, publisher_signal) = participant(
        http,
        "publisher",
        OfferShape {
            data: true,
            ..OfferShape::PUBLISH
        },
        &shared,
        publish,
    );
    let (subscriber, subscriber_signal) = participant(
        http,
        "subscriber",
        OfferShape {
            data: true,
            ..OfferShape::default()
        },
        &shared,
        subscribe,
    );

    // Everything sent, and everything that can arrive arrived.
    let deadline = Instant::now() + DEADLINE;
    while !(shared.messages_received.load(Ordering::SeqCst) == MESSAGES
        && shared.audio_sent.load(Ordering::SeqCst) == AUDIO_PACKETS
        && shared.audio_received.load(Ordering::SeqCst) > 0)
    {
        assert!(
            Instant::now() < deadline,
            "traffic did not complete: {} of {MESSAGES} messages, {} sent and {} received audio packets",
            shared.messages_received.load(Ordering::SeqCst),
            shared.audio_sent.load(Ordering::SeqCst),
            shared.audio_received.load(Ordering::SeqCst),
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // The last forwarded copies reach the subscriber: what the node forwarded
    // stops growing once the subscriber has it all.
    // (A scrape's shard numbers may be up to a second old: wait for a snapshot that
    // has the last packet in and every copy out.)
    let metrics = wait_for_metrics(http, "the subscriber receives every forwarded copy", |m| {
        m.sum("shoal_shard_rtp_received_total") == shared.audio_sent.load(Ordering::SeqCst)
            && m.sum("shoal_shard_rtp_forwarded_total")
                == shared.audio_received.load(Ordering::SeqCst)
    });

    let sent = shared.audio_sent.load(Ordering::SeqCst);
    let received = shared.audio_received.load(Ordering::SeqCst);
    // Every packet the publisher sent reached the node over loopback.
    assert_eq!(metrics.sum("shoal_shard_rtp_received_total"), sent);
    assert_eq!(metrics.sum("shoal_shard_rtp_forwarded_total"), received);
    assert_eq!(metrics.sum("shoal_shard_relay_messages_total"), MESSAGES);
    assert_eq!(metrics.sum("shoal_shard_relay_dropped_total"), 0);
    assert_eq!(metrics.sum("shoal_shard_srtp_unprotect_failed_total"), 0);
    // The shard read what its socket took in.
    assert_eq!(
        metrics.sum("shoal_shard_datagrams_in_total"),
        metrics.sum("shoal_io_datagrams_received_total")
    );
    assert!(metrics.sum("shoal_shard_datagrams_in_total") >= sent + MESSAGES);
    // Joins, the refused one, and the gRPC and HTTP requests behind them.
    assert_eq!(metrics.get("shoal_joins_total", &[("kind", "signal")]), 2);
    assert_eq!(
        metrics.get(
            "shoal_join_refusals_total",
            &[("kind", "signal"), ("reason", "not_found")]
        ),
        1
    );
    assert_eq!(metrics.sum("shoal_join_refusals_total"), 1);
    assert_eq!(metrics.sum("shoal_auth_refusals_total"), 0);
    assert_eq!(metrics.histogram_count("shoal_join_seconds"), 2);
    assert_eq!(
        metrics.get(
            "shoal_grpc_requests_total",
            &[
                ("method", "/shoal.v1.RoomService/CreateRoom"),
                ("code", "ok")
            ]
        ),
        1
    );
    assert_eq!(
        metrics.get(
            "shoal_http_requests_total",
            &[("route", "/signal"), ("method", "GET"), ("status", "101")]
        ),
        3
    );
    // What the shard holds: two peers, the publisher's audio and video, the
    // subscriber's copy of each, a channel each (the publisher's, and the one shoal
    // opened to relay it), an association each.
    assert_eq!(metrics.get("shoal_rooms", &[]), 1);
    assert_eq!(metrics.get("shoal_participants", &[]), 2);
    assert_eq!(metrics.get("shoal_shard_peers", &[("shard", "0")]), 2);
    assert_eq!(metrics.get("shoal_shard_tracks", &[("shard", "0")]), 2);
    assert_eq!(
        metrics.get("shoal_shard_subscriptions", &[("shard", "0")]),
        2
    );
    assert_eq!(
        metrics.get("shoal_shard_data_channels", &[("shard", "0")]),
        2
    );
    assert_eq!(
        metrics.get("shoal_shard_associations", &[("shard", "0")]),
        2
    );
    assert!(metrics.histogram_count("shoal_shard_tick_seconds") > 0);
    assert_eq!(
        metrics.histogram_count("shoal_shard_batch_datagrams"),
        metrics.sum("shoal_io_batches_total")
    );

    // Both leave: their signalling closes.
    shared.stop.store(true, Ordering::SeqCst);
    for (name, t) in [("publisher", publisher), ("subscriber", subscriber)] {
        let outcome = t.join().expect("the participant thread");
        outcome.unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    drop(publisher_signal);
    drop(subscriber_signal);
    let metrics = wait_for_metrics(http, "both participants leave", |m| {
        m.get("shoal_shard_peers", &[("shard", "0")]) == 0
    });
    assert_eq!(
        metrics.get("shoal_leaves_total", &[("reason", "client_left")]),
        2
    );
    assert_eq!(metrics.sum("shoal_leaves_total"), 2);
    assert_eq!(metrics.get("shoal_participants", &[]), 0);
    assert_eq!(metrics.get("shoal_shard_tracks", &[("shard", "0")]), 0);
    assert_eq!(
        metrics.get("shoal_shard_subscriptions", &[("shard", "0")]),
        0
    );
    // The scrapes before this one were counted too (this one is rendered first).
    assert_eq!(
        metrics.get(
            "shoal_http_requests_total",
            &[("route", "/metrics"), ("method", "GET"), ("status", "200")]
        ),
        SCRAPES.load(Ordering::SeqCst) - 1
    );
    drop(node.control);
    node.server.shutdown().expect("shards stop");
}

/// `/metrics`, parsed.
struct Metrics(prometheus_parse::Scrape);

impl Metrics {
    fn samples(&self, name: &str) -> impl Iterator<Item = &prometheus_parse::Sample> {
        self.0.samples.iter().filter(move |s| s.metric == name)
    }

    /// The value of `name` with exactly these labels (0 if there is no such sample).
    fn get(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        let found: Vec<u64> = self
            .samples(name)
            .filter(|s| {
                s.labels.len() == labels.len()
                    && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v))
            })
            .map(|s| value(&s.value))
            .collect();
        assert!(found.len() <= 1, "{name} {labels:?}: {found:?}");
        found.first().copied().unwrap_or(0)
    }

    /// The sum of every sample of counter or gauge `name`.
    fn sum(&self, name: &str) -> u64 {
        self.samples(name).map(|s| value(&s.value)).sum()
    }

    /// Observations of histogram `name`, over every label set.
    fn histogram_count(&self, name: &str) -> u64 {
        self.samples(name)
            .map(|s| match &s.value {
                prometheus_parse::Value::Histogram(buckets) => {
                    let inf = buckets
                        .iter()
                        .find(|b| b.less_than == f64::INFINITY)
                        .expect("a +Inf bucket");
                    inf.count as u64
                }
                other => panic!("{name} is not a histogram: {other:?}"),
            })
            .sum()
    }
}

fn value(v: &prometheus_parse::Value) -> u64 {
    let f = match v {
        prometheus_parse::Value::Counter(f)
        | prometheus_parse::Value::Gauge(f)
        | prometheus_parse::Value::Untyped(f) => *f,
        other => panic!("not a counter or gauge: {other:?}"),
    };
    assert!(f >= 0.0 && f.fract() == 0.0, "{f}");
    f as u64
}

/// Scrapes made.
static SCRAPES: AtomicU64 = AtomicU64::new(0);

/// GET `/metrics`, checked for status and type, and parsed.
fn scrape(http: SocketAddr) -> Metrics {
    SCRAPES.fetch_add(1, Ordering::SeqCst);
    use std::io::{Read, Write};
    let mut conn = std::net::TcpStream::connect(http).expect("connect to HTTP");
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("a timeout");
    write!(
        conn,
        "GET /metrics HTTP/1.1\r\nHost: {http}\r\nConnection: close\r\n\r\n"
    )
    .expect("send the request");
    let mut response = Vec::new();
    conn.read_to_end(&mut response).expect("read the response");
    let text = String::from_utf8(response).expect("UTF-8");
    let (head, body) = text.split_once("\r\n\r\n").expect("a head and a body");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: text/plain; version=0.0.4"),
        "{head}"
    );
    // Not chunked: axum sends a String with its length.
    let lines = body.lines().map(|l| Ok(l.to_owned()));
    Metrics(prometheus_parse::Scrape::parse(lines.into_iter()).expect("Prometheus text parses"))
}

/// Scrapes until `done` holds, failing with `what` after [`DEADLINE`].
fn wait_for_metrics(http: SocketAddr, what: &str, done: impl Fn(&Metrics) -> bool) -> Metrics {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let m = scrape(http);
        if done(&m) {
            return m;
        }
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A `/signal` join to `room`, which the node must refuse; the error's code.
fn refused_join(http: SocketAddr, room: &str) -> String {
    let runtime = runtime();
    runtime.block_on(async {
        let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{http}/signal"))
            .await
            .expect("connect /signal");
        let join = json!({"join": {"room": room, "identity": "nobody"}});
        ws.send(Message::Text(join.to_string().into()))
            .await
            .expect("send join");
        let deadline = tokio::time::Instant::now() + DEADLINE;
        loop {
            let m = tokio::time::timeout_at(deadline, ws.next())
                .await
                .expect("an answer to the join")
                .expect("the socket stays open until the error")
                .expect("a message");
            if let Message::Text(t) = m {
                let v: Value = serde_json::from_str(t.as_str()).expect("JSON");
                if let Some(code) = v.pointer("/error/code").and_then(Value::as_str) {
                    return code.to_owned();
                }
                panic!("expected an error, got {v}");
            }
        }
    })
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

/// What a participant does each turn of its loop once connected.
type Behaviour = fn(&mut Shard, &mut Turn<'_>) -> Result<(), String>;

/// A participant's view of one turn.
struct Turn<'a> {
    events: &'a mut Vec<ShardEvent>,
    shared: &'a Shared,
    now: shoal_components::time::Time,
    state: &'a mut HashMap<&'static str, u64>,
    packet: &'a mut BytesMut,
}

/// Starts a participant: its shard on a socket of its own, its signalling on a
/// thread of its own. Returns the shard thread and the signalling's stop handle.
fn participant(
    http: SocketAddr,
    identity: &'static str,
    shape: OfferShape,
    shared: &Arc<Shared>,
    behaviour: Behaviour,
) -> (
    std::thread::JoinHandle<Result<(), String>>,
    oneshot::Sender<()>,
) {
    let socket = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let local = socket.local_addr().expect("an address");
    let shard = Shard::new(ShardConfig::new(local, u64::from(local.port())));
    let mut rng = endpoint::os_rng().expect("a random generator");
    let offer = media_offer(NODE, shard.fingerprint(), shape, &mut rng);
    let (to_shard, inbox) = mpsc::channel();
    let (stop, stopped) = oneshot::channel();
    std::thread::spawn(move || {
        runtime().block_on(signal(http, identity, offer, to_shard, stopped));
    });
    let shared = shared.clone();
    let thread = std::thread::spawn(move || run(socket, shard, inbox, &shared, behaviour));
    (thread, stop)
}

/// The participant's shard loop: takes what signalling learnt, then its behaviour.
fn run(
    socket: UdpSocket,
    shard: Shard,
    inbox: mpsc::Receiver<Signalled>,
    shared: &Shared,
    behaviour: Behaviour,
) -> Result<(), String> {
    let deadline = Instant::now() + DEADLINE * 2;
    let mut failure = None;
    let mut state = HashMap::new();
    let mut packet = BytesMut::new();
    endpoint::run(socket, shard, |shard, now, events| {
        while let Ok(s) = inbox.try_recv() {
            let outcome = match s {
                Signalled::Session(session) => {
                    let peer = session.peer.id;
                    let mut r = shard.command(now, Command::AddPeer(session.peer.clone()));
                    for (track, subscription) in session.sources.iter().cloned() {
                        r = r.and_then(|()| {
                            shard.command(
                                now,
                                Command::AddSource {
                                    peer,
                                    track,
                                    subscription,
                                },
                            )
                        });
                    }
                    for track in session.receives.iter().cloned() {
                        r = r.and_then(|()| shard.command(now, Command::Receive { peer, track }));
                    }
                    state.insert("session", 1);
                    r
                }
                Signalled::Receive(tracks) => {
                    *state.entry("receiving").or_default() += tracks.len() as u64;
                    tracks.into_iter().try_for_each(|track| {
                        shard.command(now, Command::Receive { peer: NODE, track })
                    })
                }
            };
            if let Err(e) = outcome {
                failure = Some(format!("a command failed: {e:?}"));
            }
        }
        let mut turn = Turn {
            events,
            shared,
            now,
            state: &mut state,
            packet: &mut packet,
        };
        if let Err(e) = behaviour(shard, &mut turn) {
            failure = Some(e);
        }
        if failure.is_some() || shared.stop.load(Ordering::SeqCst) {
            return Control::Stop;
        }
        if Instant::now() > deadline {
            failure = Some("deadline".into());
            return Control::Stop;
        }
        Control::Continue
    })
    .map_err(|e| e.to_string())?;
    failure.map_or(Ok(()), Err)
}

/// The publisher: once the subscriber is ready, opens its channel and sends every
/// message and audio packet.
fn publish(shard: &mut Shard, turn: &mut Turn<'_>) -> Result<(), String> {
    for event in turn.events.drain(..) {
        if let ShardEvent::PeerRemoved { .. } | ShardEvent::SctpClosed { .. } = event {
            return Err(format!("publisher: connection lost: {event:?}"));
        }
    }
    if !turn.shared.subscriber_ready.load(Ordering::SeqCst) || !shard.sctp_established(NODE) {
        return Ok(());
    }
    let channel = match turn.state.get("channel") {
        Some(&c) => c as u16,
        None => {
            let c = shard
                .open_channel(NODE, "news", "", ChannelType::default())
                .map_err(|e| format!("open: {e:?}"))?;
            turn.state.insert("channel", u64::from(c));
            c
        }
    };
    // A few of each a turn: the loop turns at least every MAX_POLL_WAIT.
    for _ in 0..PER_TURN {
        let sent = turn.shared.messages_sent.load(Ordering::SeqCst);
        if sent < MESSAGES {
            let message = Bytes::from(format!("message {sent}"));
            if shard.channel_send(NODE, channel, false, message).is_ok() {
                turn.shared.messages_sent.fetch_add(1, Ordering::SeqCst);
            }
        }
        let audio = turn.shared.audio_sent.load(Ordering::SeqCst);
        if audio >= AUDIO_PACKETS {
            continue;
        }
        let fields = RtpFields {
            marker: false,
            payload_type: endpoint::media::OPUS_PT,
            sequence_number: audio as u16,
            timestamp: (audio as u32).wrapping_mul(960),
            ssrc: 0,
        };
        let mut w = RtpWriter::new(turn.packet, &fields, &[]);
        w.payload(&[0x78; 80]);
        w.finish(0);
        let packet = turn.packet.split().freeze();
        shard
            .send_rtp(turn.now, AUDIO_SOURCE, packet)
            .map_err(|e| format!("send_rtp: {e:?}"))?;
        turn.shared.audio_sent.fetch_add(1, Ordering::SeqCst);
    }
    Ok(())
}

/// The subscriber: ready once its association is up and it receives both of the
/// publisher's tracks; counts the audio and the messages that arrive.
fn subscribe(shard: &mut Shard, turn: &mut Turn<'_>) -> Result<(), String> {
    for event in turn.events.drain(..) {
        match event {
            ShardEvent::RtpReceived { .. } => {
                turn.shared.audio_received.fetch_add(1, Ordering::SeqCst);
            }
            ShardEvent::ChannelOpen { channel, label, .. } if label == "news" => {
                turn.state.insert("news", u64::from(channel));
            }
            ShardEvent::ChannelMessage {
                channel, payload, ..
            } if turn.state.get("news") == Some(&u64::from(channel)) => {
                let n = turn.shared.messages_received.load(Ordering::SeqCst);
                if payload != format!("message {n}").as_bytes() {
                    return Err(format!("message {n} arrived as {payload:?}"));
                }
                turn.shared.messages_received.fetch_add(1, Ordering::SeqCst);
            }
            ShardEvent::PeerRemoved { .. } | ShardEvent::SctpClosed { .. } => {
                return Err(format!("subscriber: connection lost: {event:?}"));
            }
            _ => {}
        }
    }
    let receiving = turn.state.get("receiving").copied().unwrap_or(0);
    if receiving >= 2 && shard.sctp_established(NODE) {
        turn.shared.subscriber_ready.store(true, Ordering::SeqCst);
    }
    Ok(())
}

/// A participant's `/signal`: join, the first offer, the answer to the shard
/// thread; the node's later offers answered, and their tracks to the shard thread,
/// until `stop` fires or is dropped (the socket then closes: the participant leaves).
async fn signal(
    http: SocketAddr,
    identity: &str,
    offer: MediaOffer,
    to_shard: mpsc::Sender<Signalled>,
    mut stop: oneshot::Receiver<()>,
) {
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{http}/signal"))
        .await
        .expect("connect /signal");
    let send = |v: Value| Message::Text(v.to_string().into());
    ws.send(send(json!({"join": {"room": ROOM, "identity": identity}})))
        .await
        .expect("send join");
    ws.send(send(json!({"offer": {"sdp": offer.sdp()}})))
        .await
        .expect("send offer");
    let mut session: Option<endpoint::MediaSession> = None;
    loop {
        let message = tokio::select! {
            m = ws.next() => m,
            _ = &mut stop => break,
        };
        let Some(Ok(Message::Text(text))) = message else {
            match message {
                Some(Ok(_)) => continue,
                _ => break,
            }
        };
        let v: Value = serde_json::from_str(text.as_str()).expect("JSON");
        if let Some(sdp) = v.pointer("/answer/sdp").and_then(Value::as_str) {
            let s = offer.accept(sdp).expect("the node's answer");
            let _ = to_shard.send(Signalled::Session(Box::new(s.clone())));
            session = Some(s);
        } else if let Some(sdp) = v.pointer("/offer/sdp").and_then(Value::as_str) {
            let s = session.as_mut().expect("an offer after the answer");
            let (answer, tracks) = s.answer(sdp).expect("the node's offer");
            let _ = to_shard.send(Signalled::Receive(tracks));
            ws.send(send(json!({"answer": {"sdp": answer}})))
                .await
                .expect("send answer");
        } else if let Some(e) = v.get("error") {
            panic!("{identity}: the node said {e}");
        }
    }
    let _ = ws.close(None).await;
}
