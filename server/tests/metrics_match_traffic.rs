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
mod media_pair;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use media_pair::{Shared, participant, publish, runtime, subscribe};
use serde_json::{Value, json};
use shoal_server::config::Config;
use shoal_server::endpoint::OfferShape;
use tokio_tungstenite::tungstenite::Message;

const ROOM: &str = "metered";
/// Audio packets the publisher sends.
const AUDIO_PACKETS: u64 = 120;
/// Reliable messages the publisher sends.
const MESSAGES: u64 = 40;
const DEADLINE: Duration = Duration::from_secs(30);

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

    let shared = Arc::new(Shared {
        room: ROOM.into(),
        messages: MESSAGES,
        audio_packets: AUDIO_PACKETS,
        deadline: DEADLINE * 2,
        ..Shared::default()
    });
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
