//! SIGTERM drains the node (the `shoal` binary): a headless Chromium page and an
//! aiortc client (`scripts/interop/aiortc_signal_client.py`), each in the room over
//! the `/signal` WebSocket with a data channel open, are told and let go cleanly:
//!
//! - each gets `leave` with SERVER_SHUTDOWN over signalling;
//! - each data channel closes (shoal's SCTP SHUTDOWN, RFC 9260 §9.2), and then each
//!   DTLS transport reaches `closed`, which only a close_notify gives (W3C WebRTC
//!   `RTCDtlsTransportState`, RFC 5246 §7.2.1), never `failed`; Chromium's peer
//!   connection never reports `failed` either;
//! - while the drain waits on a participant, `/healthz` answers 503 `draining` and a
//!   new WHIP join 503;
//! - the process exits 0 once both are gone, well before `--drain-timeout`, and its
//!   log says why each left, that each association ended by the SHUTDOWN sequence
//!   and that each peer was then removed as drained.
//!
//! To hold the drain open long enough to look (on loopback it would end in
//! milliseconds), the aiortc process is stopped (SIGSTOP) just before the SIGTERM
//! and continued once the 503s are seen: shoal's SHUTDOWN to it is retransmitted on
//! T2-shutdown meanwhile.
//!
//! Needs `/usr/bin/chromium` and the aiortc venv (`scripts/test-all` makes both).

mod aiortc;
mod chromium;
mod http_client;
mod node_process;

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use chromium::{attach, devtools, launch, poll};
use nix::sys::signal::Signal;
use node_process::Node;
use serde_json::Value;

const ROOM: &str = "draining";
/// The node's `--drain-timeout`: the drain must end well before it.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(25);
/// How long each client has to join and open its channel, and then to be let go.
const STEP: Duration = Duration::from_secs(30);
/// `DisconnectReason::SERVER_SHUTDOWN`'s number in shoal.v1.
const SERVER_SHUTDOWN: u64 = 6;

/// The Chromium page: joins over `/signal` with one data channel, says
/// `window.shoalReady` once it is open, then records what ending the session looks
/// like from inside the browser until the channel and the DTLS transport are closed
/// and the leave has come; the record lands in `window.shoalResult`.
fn page_script() -> String {
    format!(
        r#"window.shoalResult = null;
(async () => {{
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
  const r = {{ leave: null, dcClosed: false, dcErrors: [], sctpStates: [], dtlsStates: [],
    connectionStates: [], socketClosed: false }};
  const pc = new RTCPeerConnection({{ iceServers: [] }});
  pc.onconnectionstatechange = () => r.connectionStates.push(pc.connectionState);
  const dc = pc.createDataChannel("chat");
  dc.onclose = () => (r.dcClosed = true);
  dc.onerror = (e) => r.dcErrors.push(String(e.error && e.error.message));
  const opened = new Promise((ok) => (dc.onopen = ok));
  await pc.setLocalDescription(await pc.createOffer());
  const heard = [];
  const ws = new WebSocket(`ws://${{window.location.host}}/signal`);
  ws.onmessage = (e) => heard.push(JSON.parse(e.data));
  ws.onclose = () => (r.socketClosed = true);
  await new Promise((ok, fail) => {{ ws.onopen = ok; ws.onerror = fail; }});
  ws.send(JSON.stringify({{ join: {{ room: "{ROOM}", identity: "chromium" }} }}));
  ws.send(JSON.stringify({{ offer: {{ sdp: pc.localDescription.sdp }} }}));
  let answer;
  while (!(answer = heard.find((m) => m.answer))) {{
    const error = heard.find((m) => m.error);
    if (error) throw new Error("signal: " + JSON.stringify(error));
    await sleep(20);
  }}
  await pc.setRemoteDescription({{ type: "answer", sdp: answer.answer.sdp }});
  await opened;
  const sctp = pc.sctp, dtls = pc.sctp.transport;
  sctp.onstatechange = () => r.sctpStates.push(sctp.state);
  dtls.onstatechange = () => r.dtlsStates.push(dtls.state);
  window.shoalReady = true;
  const over = () => r.dcClosed && (dtls.state === "closed" || dtls.state === "failed")
    && heard.some((m) => m.leave);
  while (!over()) await sleep(20);
  r.leave = heard.find((m) => m.leave).leave;
  r.sctpState = sctp.state;
  r.dtlsState = dtls.state;
  r.connectionState = pc.connectionState;
  pc.close();
  return r;
}})().then((r) => (window.shoalResult = r), (e) => (window.shoalResult = {{ failed: String(e) }}));
"started""#
    )
}

#[test]
fn drain_tells_participants() {
    let mut node = Node::start(&[
        "--log-format",
        "json",
        "--drain-timeout",
        &DRAIN_TIMEOUT.as_secs().to_string(),
    ]);
    let http = node.http;
    let page = format!("http://{http}/");
    let browser = launch(&page);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let mut cdp = runtime.block_on(devtools(&browser));
    let tab = runtime.block_on(attach(&mut cdp, &page));

    // Chromium joins and opens its channel.
    let started = runtime.block_on(cdp.evaluate(&tab, &page_script()));
    assert_eq!(started, Value::from("started"));
    let ready = runtime.block_on(poll(
        &mut cdp,
        &tab,
        "window.shoalReady || window.shoalResult || null",
        Instant::now() + STEP,
    ));
    assert_eq!(ready, Value::Bool(true), "chromium: {ready}");

    // aiortc joins and opens its channel.
    let mut client = start_aiortc(http, "aiortc");
    let lines = lines_of(&mut client);
    let ready = lines
        .recv_timeout(STEP + aiortc::MARGIN)
        .expect("aiortc reports ready");
    assert_eq!(ready, r#"{"ready": true}"#);

    // aiortc holds the drain open while stopped.
    let pid = nix::unistd::Pid::from_raw(i32::try_from(client.0.id()).expect("a pid"));
    nix::sys::signal::kill(pid, Signal::SIGSTOP).expect("SIGSTOP aiortc");
    let sigterm = Instant::now();
    node.signal(Signal::SIGTERM);

    // Draining: health says so, and a new join is refused.
    let health = wait_draining(http);
    assert_eq!(health.status, 503, "{health:?}");
    assert_eq!(health.body.trim(), "draining");
    let offer = http_client::fixture_offer("chromium156_data_offer.sdp");
    let refused = http_client::post_offer(http, &format!("/whip/{ROOM}"), &offer);
    assert_eq!(refused.status, 503, "{refused:?}");
    assert!(refused.body.contains("draining"), "{refused:?}");
    // Still running: aiortc has not answered its SHUTDOWN.
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        node.try_status().is_none(),
        "shoal exited while a peer remained"
    );

    // Chromium was let go meanwhile.
    let r = runtime.block_on(poll(
        &mut cdp,
        &tab,
        "window.shoalResult",
        Instant::now() + STEP,
    ));
    assert!(r.get("failed").is_none(), "chromium: {r}");
    assert_eq!(r["leave"]["reason"], Value::from(SERVER_SHUTDOWN), "{r}");
    assert_eq!(r["dcClosed"], Value::Bool(true), "{r}");
    assert_eq!(r["dcErrors"], serde_json::json!([]), "{r}");
    assert_eq!(r["sctpState"], Value::from("closed"), "{r}");
    assert_eq!(r["dtlsState"], Value::from("closed"), "{r}");
    let states = r["connectionStates"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(!states.contains(&Value::from("failed")), "{r}");

    // aiortc goes on, answers, and is let go; then the node exits 0.
    nix::sys::signal::kill(pid, Signal::SIGCONT).expect("SIGCONT aiortc");
    let status = node.wait(DRAIN_TIMEOUT);
    let took = sigterm.elapsed();
    assert!(status.success(), "{status}");
    assert!(
        took < DRAIN_TIMEOUT - Duration::from_secs(5),
        "the drain took {took:?}"
    );
    let report = lines
        .recv_timeout(STEP + aiortc::MARGIN)
        .expect("aiortc's report");
    let report: Value = serde_json::from_str(&report).expect("a JSON report");
    assert_eq!(
        report["leave"]["reason"],
        Value::from(SERVER_SHUTDOWN),
        "{report}"
    );
    assert_eq!(report["channel_closed"], Value::Bool(true), "{report}");
    assert_eq!(report["dtls_state"], Value::from("closed"), "{report}");
    assert_eq!(report["errors"], serde_json::json!([]), "{report}");
    eprintln!("drained in {took:?}\nchromium: {r}\naiortc: {report}");
    let exited = client.0.wait().expect("aiortc exits");
    assert!(exited.success(), "aiortc: {exited}");

    // The log: the drain, and both participants leaving for it.
    let log = node.log();
    let events: Vec<Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|l| l["fields"].clone())
        .collect();
    let count = |name: &str| events.iter().filter(|e| e["event"] == name).count();
    assert_eq!(count("drain_started"), 1, "{log}");
    assert_eq!(count("drained"), 1, "{log}");
    let leaves: Vec<&Value> = events.iter().filter(|e| e["event"] == "leave").collect();
    assert_eq!(leaves.len(), 2, "{log}");
    assert!(
        leaves.iter().all(|l| l["reason"] == "server_shutdown"),
        "{log}"
    );
    // Each association ended by the SHUTDOWN sequence (not an ABORT, not given up),
    // and each peer was then removed as drained.
    let ended: Vec<&Value> = events
        .iter()
        .filter(|e| e["event"] == "sctp_closed")
        .map(|e| &e["reason"])
        .collect();
    assert_eq!(ended, [&Value::from("Shutdown"); 2], "{log}");
    let removed: Vec<&Value> = events
        .iter()
        .filter(|e| e["event"] == "peer_removed")
        .map(|e| &e["reason"])
        .collect();
    assert_eq!(removed, [&Value::from("drained"); 2], "{log}");
    drop(browser);
}

/// A second SIGTERM during a drain stops the node at once (exit 0), whoever is
/// still connected: here the aiortc client, stopped so that it cannot answer.
#[test]
fn a_second_sigterm_stops_at_once() {
    let mut node = Node::start(&["--drain-timeout", &DRAIN_TIMEOUT.as_secs().to_string()]);
    let http = node.http;
    let mut client = start_aiortc(http, "held");
    let lines = lines_of(&mut client);
    let ready = lines
        .recv_timeout(STEP + aiortc::MARGIN)
        .expect("aiortc reports ready");
    assert_eq!(ready, r#"{"ready": true}"#);
    let pid = nix::unistd::Pid::from_raw(i32::try_from(client.0.id()).expect("a pid"));
    nix::sys::signal::kill(pid, Signal::SIGSTOP).expect("SIGSTOP aiortc");
    node.signal(Signal::SIGTERM);
    wait_draining(http);
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        node.try_status().is_none(),
        "shoal exited while a peer remained"
    );
    let second = Instant::now();
    node.signal(Signal::SIGTERM);
    let status = node.wait(Duration::from_secs(10));
    assert!(status.success(), "{status}");
    // The control plane's shutdown grace (2 s) at most, not the drain timeout.
    assert!(
        second.elapsed() < Duration::from_secs(5),
        "{:?}",
        second.elapsed()
    );
    let _ = nix::sys::signal::kill(pid, Signal::SIGCONT);
}

/// Starts the aiortc client joining [`ROOM`] as `identity` over `/signal`.
fn start_aiortc(http: std::net::SocketAddr, identity: &str) -> aiortc::Process {
    aiortc::Process(
        aiortc::script("aiortc_signal_client.py")
            .arg(format!("ws://{http}/signal"))
            .args([ROOM, identity, "--timeout", &STEP.as_secs().to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the aiortc client"),
    )
}

/// Waits until `/healthz` stops answering 200; returns that reply.
fn wait_draining(http: std::net::SocketAddr) -> http_client::Reply {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let reply = http_client::request(http, "GET", "/healthz", None, b"");
        if reply.status != 200 || Instant::now() > deadline {
            return reply;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The client's stdout, line by line, on a channel.
fn lines_of(client: &mut aiortc::Process) -> mpsc::Receiver<String> {
    let stdout = client.0.stdout.take().expect("stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}
