//! `churn_no_leaks`: `shoal-bench churn` puts 500 sessions through a real `shoal`
//! (two shards) across 20 rooms, each publishing audio and video with a data
//! channel, half over `/signal` (answering the node's offers of the room's other
//! tracks) and half over WHIP; a third of them vanish without a word (no DELETE, no
//! close_notify, no SCTP SHUTDOWN, no close frame: sockets just dropped). Afterwards,
//! once the node has noticed the last of them (ICE consent: `--consent-timeout 15`
//! here, where RFC 7675's 30 s would make the test wait 30 s longer), every
//! count it exports is back where it was before: per shard its peers, rooms,
//! tracks, subscriptions, associations, data channels and World entities; the node's
//! rooms, participants and pending sessions. Every join has its leave, and the
//! process's resident memory is within 10 % of what it was after a warm-up of the
//! same churn twice over (the allocator keeps what the load once needed; a leak
//! grows with every round).

mod shoal_bin;

use shoal_bin::shoal_bin;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

const SESSIONS: u64 = 500;
const ROOMS: u64 = 20;
/// How long the node may take to notice every session gone: consent expiry (15 s
/// here) for the last abrupt WHIP session, the rooms' empty timeout (1 s here),
/// margin.
const SETTLE: Duration = Duration::from_secs(60);

/// Kills the node if the test ends before it stopped.
struct Node(Child);

impl Drop for Node {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// The counts that must come back: every gauge of what the node holds.
const HELD: [&str; 10] = [
    "shoal_shard_peers",
    "shoal_shard_rooms",
    "shoal_shard_tracks",
    "shoal_shard_subscriptions",
    "shoal_shard_associations",
    "shoal_shard_data_channels",
    "shoal_shard_entities",
    "shoal_rooms",
    "shoal_participants",
    "shoal_pending_sessions",
];

/// `/metrics` as `name{labels}` → value.
fn scrape(http: SocketAddr) -> BTreeMap<String, f64> {
    let mut s = TcpStream::connect(http).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("a timeout");
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: {http}\r\nConnection: close\r\n\r\n"
    )
    .expect("send");
    let mut text = String::new();
    s.read_to_string(&mut text).expect("read");
    let (head, body) = text.split_once("\r\n\r\n").expect("a response");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    body.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.rsplit_once(' '))
        .filter_map(|(k, v)| Some((k.to_owned(), v.parse().ok()?)))
        .collect()
}

/// The held counts only.
fn held(metrics: &BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    metrics
        .iter()
        .filter(|(k, _)| {
            let name = k.split('{').next().unwrap_or_default();
            HELD.contains(&name)
        })
        .map(|(k, v)| (k.clone(), *v))
        .collect()
}

/// The sum of a counter over its labels.
fn total(metrics: &BTreeMap<String, f64>, name: &str) -> f64 {
    metrics
        .iter()
        .filter(|(k, _)| k.split('{').next() == Some(name))
        .map(|(_, v)| v)
        .sum()
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("its status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS")
}

/// Runs `shoal-bench churn` against the node; its JSON summary.
fn churn(http: SocketAddr, prefix: &str, sessions: u64, abrupt: &str) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_shoal-bench"))
        .args(["churn", "--http", &http.to_string(), "--json"])
        .args(["--sessions", &sessions.to_string()])
        .args(["--rooms", &ROOMS.to_string()])
        .args([
            "--abrupt",
            abrupt,
            "--concurrency",
            "40",
            "--hold-ms",
            "300",
        ])
        .args(["--prefix", prefix])
        .stderr(Stdio::inherit())
        .output()
        .expect("run shoal-bench churn");
    let text = String::from_utf8_lossy(&out.stdout);
    let summary: Value = serde_json::from_str(text.trim())
        .unwrap_or_else(|e| panic!("not a JSON summary ({e}): {text}"));
    assert!(out.status.success(), "churn failed: {summary}");
    summary
}

/// Waits until the held counts equal `baseline`; the last scrape.
fn settle(http: SocketAddr, baseline: &BTreeMap<String, f64>, what: &str) -> BTreeMap<String, f64> {
    let deadline = Instant::now() + SETTLE;
    loop {
        let now = scrape(http);
        if held(&now) == *baseline {
            return now;
        }
        if Instant::now() > deadline {
            let diff: Vec<String> = held(&now)
                .iter()
                .filter(|(k, v)| baseline.get(*k) != Some(v))
                .map(|(k, v)| format!("{k}: {v} (was {:?})", baseline.get(k)))
                .collect();
            panic!("{what}: not back to baseline after {SETTLE:?}: {diff:?}");
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn churn_no_leaks() {
    let mut child = Command::new(shoal_bin())
        .env_clear()
        .args([
            "--shards",
            "2",
            "--udp-port-base",
            "0",
            "--tcp-port-base",
            "off",
        ])
        .args(["--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"])
        // Rooms close a second after their last member, and consent lapses 15 s
        // after a peer's last check; one address (the test's) may hold all 40
        // sessions that connect at once.
        .args(["--room-empty-timeout", "1", "--consent-timeout", "15"])
        .args(["--max-pending-sessions-per-address", "64"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start shoal");
    let stdout = child.stdout.take().expect("stdout");
    let node = Node(child);
    let pid = node.0.id();
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let http: SocketAddr = loop {
        let line = lines
            .recv_timeout(Duration::from_secs(20))
            .expect("shoal starts");
        if let Some(a) = line.strip_prefix("shoal: http http://") {
            break a.trim().parse().expect("an address");
        }
    };

    let start = scrape(http);
    let baseline = held(&start);
    assert_eq!(
        baseline.len(),
        7 * 2 + 3,
        "two shards' gauges and the node's: {baseline:?}"
    );

    // Warm-up: the same churn twice over in one run, so that thread pools,
    // allocator arenas and tables grow to at least what the measured round needs
    // at its peak (the abrupt WHIP sessions are held until their consent expires,
    // 15 s, about as long as the warm-up takes, so those of both halves are mostly
    // held at once), and the allocator keeps what it once needed. A leak
    // grows with every round, which comparing the measured round with the warm-up
    // catches.
    let warm = churn(http, "warm", 2 * SESSIONS, "0.334");
    assert_eq!(warm["failed"], 0, "{warm}");
    let warmed = settle(http, &baseline, "warm-up");
    let rss_before = rss_kib(pid);

    let summary = churn(http, "churn", SESSIONS, "0.334");
    assert_eq!(summary["failed"], 0, "{summary}");
    assert_eq!(summary["graceful"], 333, "{summary}");
    assert_eq!(summary["abrupt"], 167, "{summary}");
    let after = settle(http, &baseline, "churn");
    let rss_after = rss_kib(pid);
    eprintln!(
        "churn: {summary}\nRSS {rss_before} KiB after the warm-up, {rss_after} KiB after \
         {SESSIONS} sessions; entities {:?}",
        held(&after)
            .iter()
            .filter(|(k, _)| k.starts_with("shoal_shard_entities"))
            .collect::<Vec<_>>()
    );

    // Every join of the run has its leave.
    let joins = total(&after, "shoal_joins_total") - total(&warmed, "shoal_joins_total");
    let leaves = total(&after, "shoal_leaves_total") - total(&warmed, "shoal_leaves_total");
    assert_eq!(joins, SESSIONS as f64);
    assert_eq!(leaves, SESSIONS as f64);
    // Memory: within 10 % of after the warm-up.
    assert!(
        rss_after * 10 <= rss_before * 11,
        "RSS grew from {rss_before} KiB to {rss_after} KiB"
    );
}
