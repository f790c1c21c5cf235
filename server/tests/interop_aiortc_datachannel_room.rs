//! Interop: two aiortc 1.16 clients (`scripts/interop/aiortc_room_client.py`) join
//! one room over WHIP and exchange 1 000 messages each way through shoal's room relay
//! on a reliable ordered channel (each delivered once, in order, type and bytes
//! intact) and on an unordered channel sent once (never twice, never corrupted); both
//! leave by WHIP DELETE and the room is empty again. The exchange runs twice: on a
//! one-shard node, and on a two-shard node with one participant per shard, where
//! every message crosses from one shard to the other over the relay's hop.
//!
//! A third test has one aiortc client (`scripts/interop/aiortc_leave_client.py`)
//! stall while another sends to it and leaves as soon as shoal has acknowledged
//! everything: what the relay still held of the sender's messages when it left
//! reaches the receiver all the same, once and in order.
//!
//! The Python interpreter is `SHOAL_INTEROP_PYTHON`, else the venv
//! `target/interop-venv` that `scripts/test-all` creates with aiortc.

mod aiortc;
mod grpc_node;

use std::io::Read;

use std::process::Stdio;
use std::time::{Duration, Instant};

use aiortc::Process;
use serde_json::Value;

const ROOM: &str = "aiortc-room";
const COUNT: u64 = 1000;
/// How long both clients have for the whole exchange.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a client waits for each step (open, announce, send, receive, the
/// other's `done`, acknowledgement). Long enough for aiortc to recover from a loss
/// burst on a starved two-core machine: the burst (its socket buffer overflowing
/// while it falls behind) leaves holes of sent-once messages in the cumulative TSN,
/// and each costs a FORWARD TSN round trip through aiortc's backlog (RFC 3758 §3.5
/// C2 moves the peer over abandoned chunks only, one run at a time), while
/// aiortc's work per packet grows with the TSNs it holds out of order. With two
/// busy loops beside a debug build, its cumulative TSN caught up 17 s after the
/// burst in the slowest run traced, past the 15 s this step had before. shoal sends
/// at most `--sctp-max-outstanding-tsns` (1024) past the cumulative TSN, which
/// bounds that work; with 16 384, CI saw a client 45 s behind, each of shoal's
/// T3-rtx expiries (sixteen) spurious. A client that times out reports its SCTP
/// state (`sctp` in its JSON line).
const STEP_TIMEOUT_SECS: &str = "45";
/// One exchange at a time: each keeps two Python clients busy, and their step
/// timeouts are meant for a machine that is not also running the other's. Taken
/// before the node starts: a node (and its gRPC channel) left idle while the other
/// exchange runs, up to its whole timeout when that one fails, had its channel
/// break and failed for that too.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn start_client(whip: &str, identity: &str) -> Process {
    let count = COUNT.to_string();
    start_script(
        "aiortc_room_client.py",
        whip,
        identity,
        &["--count", &count],
    )
}

/// Starts `script` as `identity` in the room at `whip`, with `args` and the step
/// timeout.
fn start_script(script: &str, whip: &str, identity: &str, args: &[&str]) -> Process {
    let child = aiortc::script(script)
        .arg(format!("{whip}?identity={identity}"))
        .arg(identity)
        .args(args)
        .args(["--timeout", STEP_TIMEOUT_SECS])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the aiortc client");
    Process(child)
}

/// Waits for the client to exit by `deadline`; returns its exit status and report.
fn finish(client: &mut Process, deadline: Instant) -> (bool, Value) {
    let status = loop {
        if let Some(status) = client.0.try_wait().expect("poll the client") {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the aiortc client did not finish"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut out = String::new();
    if let Some(mut stdout) = client.0.stdout.take() {
        stdout.read_to_string(&mut out).expect("read its report");
    }
    let line = out.lines().last().unwrap_or_default();
    let report = serde_json::from_str(line)
        .unwrap_or_else(|e| panic!("no JSON report ({e}): {out:?}, exit {status}"));
    (status.success(), report)
}

/// Runs the exchange between alice and bob on `node`'s room (the caller holds
/// [`one_at_a_time`]) and checks what each client reported (with every shard's
/// counters on failure); returns once both have left the room.
fn exchange(node: &mut grpc_node::RoomNode) {
    let whip = format!("http://{}/whip/{ROOM}", node.http);
    let mut clients = [
        ("alice", "bob", start_client(&whip, "alice")),
        ("bob", "alice", start_client(&whip, "bob")),
    ];
    let deadline = Instant::now() + EXCHANGE_TIMEOUT;
    let reports: Vec<(bool, Value)> = clients
        .iter_mut()
        .map(|(_, _, client)| finish(client, deadline))
        .collect();
    let counters: Vec<String> = (0..node.server.shard_count())
        .map(|i| {
            let r = grpc_node::shard_report(&node.server, i);
            format!("{:?} {:?}", r.shard, r.driver)
        })
        .collect();
    // Every client's report goes into a failure: a stall on one side shows on the
    // other's too (what it sent, what it still waited for).
    let all: Vec<String> = clients
        .iter()
        .zip(&reports)
        .map(|((me, _, _), (ok, r))| format!("{me} (exit ok: {ok}): {r}"))
        .collect();
    let context = format!("{}\nshards: {counters:?}", all.join("\n"));
    for ((me, other, _), (ok, r)) in clients.iter().zip(&reports) {
        assert_eq!(r["peer"], Value::from(*other), "{me}\n{context}");
        assert_eq!(r["ordered_received"], Value::from(COUNT), "{me}\n{context}");
        assert_eq!(
            r["ordered_errors"],
            Value::Array(Vec::new()),
            "{me}\n{context}"
        );
        assert_eq!(
            r["unordered_errors"],
            Value::Array(Vec::new()),
            "{me}\n{context}"
        );
        // Sent once each on loopback; the relay may drop an unreliable message for a
        // slow receiver, but never duplicates or corrupts one.
        let unordered = r["unordered_received"].as_u64().unwrap_or(0);
        assert!(unordered > 0 && unordered <= COUNT, "{me}\n{context}");
        assert!(*ok, "{me} exited with a failure\n{context}");
    }
    // Both DELETEs took their participants out.
    grpc_node::wait_until_empty(node, ROOM);
}

#[test]
fn interop_aiortc_datachannel_room() {
    let _turn = one_at_a_time();
    let mut node = grpc_node::node_with_room(ROOM);
    exchange(&mut node);
}

#[test]
fn interop_aiortc_datachannel_room_across_shards() {
    let _turn = one_at_a_time();
    // One participant per shard: the second to join cannot share the first's shard.
    let mut node = grpc_node::node_with_split_room(ROOM);
    exchange(&mut node);
    let reports: Vec<_> = (0..2)
        .map(|i| grpc_node::shard_report(&node.server, i))
        .collect();
    for r in &reports {
        // Each shard held one of them: it forwarded its member's messages (at least
        // the ordered ones and the `ready`) and delivered the other's.
        let s = &r.shard;
        assert!(s.relay_forwards_out > COUNT, "shard {}: {s:?}", r.index);
        assert!(s.relay_forwards_in > COUNT, "shard {}: {s:?}", r.index);
        assert_eq!(s.relay_forwards_dropped, 0, "shard {}: {s:?}", r.index);
    }
    // Both left: neither shard shares the room any more.
    grpc_node::wait_for_shards(&node.server, Duration::from_secs(10), "presence", |r| {
        r.iter().all(|r| r.shared_rooms == 0)
    });
}

/// Messages the leaving sender sends: about 2.2 MB, more than the relay queues
/// toward a receiver that reads nothing (its high watermark, 1 MiB), less than that
/// plus the sender's receive window at shoal (4 MiB), so shoal acknowledges all of
/// them while holding some back.
const LEAVE_COUNT: u64 = 1500;
/// How long the receiver reads nothing: the sender sends, is acknowledged and
/// leaves meanwhile.
const STALL_SECS: &str = "4";
/// The node's relay hold limit in that test: the receiver, behind from the moment
/// the sender is first held, must get down to the low watermark within it after its
/// stall and shoal's backed-off retransmission timer; 30 s rather than the default
/// 10 s, so a starved machine does not cut it off as a slow receiver.
const LEAVE_HOLD_LIMIT_SECS: u64 = 30;

fn start_leave_client(whip: &str, identity: &str, role: &str) -> Process {
    let count = LEAVE_COUNT.to_string();
    let args = [role, "--count", &count, "--stall", STALL_SECS];
    start_script("aiortc_leave_client.py", whip, identity, &args)
}

/// carol stops reading; dave sends 1 500 messages on a reliable ordered channel,
/// and leaves (WHIP DELETE) as soon as shoal has acknowledged them all, while the
/// relay still holds some in his receive buffer for carol. Once carol reads again
/// she gets every one, once and in order: what SCTP acknowledged to a member that
/// left is not lost with it.
#[test]
fn interop_aiortc_sender_leaves_while_held() {
    let _turn = one_at_a_time();
    let config = shoal_server::config::Config {
        shards: std::num::NonZeroUsize::MIN,
        relay_hold_limit: LEAVE_HOLD_LIMIT_SECS,
        ..Default::default()
    };
    let mut node = grpc_node::node_with_room_in(ROOM, config);
    let whip = format!("http://{}/whip/{ROOM}", node.http);
    let mut carol = start_leave_client(&whip, "carol", "receive");
    let mut dave = start_leave_client(&whip, "dave", "send");
    let deadline = Instant::now() + EXCHANGE_TIMEOUT;
    let (dave_ok, sent) = finish(&mut dave, deadline);
    let (carol_ok, got) = finish(&mut carol, deadline);
    let s = grpc_node::shard_report(&node.server, 0).shard;
    let context = format!("dave: {sent}\ncarol: {got}\nshard: {s:?}");
    assert!(dave_ok, "dave failed\n{context}");
    assert_eq!(sent["sent"], Value::from(LEAVE_COUNT), "{context}");
    assert!(carol_ok, "carol failed\n{context}");
    assert_eq!(got["received"], Value::from(LEAVE_COUNT), "{context}");
    assert_eq!(got["errors"], Value::Array(Vec::new()), "{context}");
    // dave was held back for carol, and left with messages still held.
    assert!(s.relay_holds > 0, "{context}");
    assert_eq!(s.relay_closing_kept, 1, "{context}");
    assert_eq!(s.relay_closing_expired, 0, "{context}");
    assert_eq!(s.relay_slow_receivers, 0, "{context}");
    grpc_node::wait_until_empty(&mut node, ROOM);
}
