//! Interop: a real headless Chromium joins a room over WHIP and its data channel
//! opens, so ICE (shoal is ICE-lite), DTLS (shoal is the DTLS 1.2 server), SCTP and
//! DCEP all work against a stack we did not write, end to end over 127.0.0.1.
//!
//! The page is shoal's own `/` (so `fetch` to `/whip/…` is same-origin); the test
//! drives it over the DevTools protocol: it reads the port Chromium picked from the
//! `DevToolsActivePort` file of a fresh user-data-dir, attaches to the page and runs
//! JavaScript there. When the page closes its RTCPeerConnection, Chromium sends a
//! DTLS close_notify, the shard removes the peer and reports it, and the participant
//! leaves the room directory: checked over gRPC.
//!
//! Needs `/usr/bin/chromium` (Debian package `chromium`; `scripts/test-all`
//! installs it).

mod grpc_node;

use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use shoal_proto::v1::CreateRoomRequest;
use shoal_proto::v1::room_service_client::RoomServiceClient;
use shoal_server::config::Config;
use tokio_tungstenite::tungstenite::Message;

const CHROMIUM: &str = "/usr/bin/chromium";
/// How long Chromium may take to start and open its DevTools port.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the page may take to open its data channel.
const OPEN_TIMEOUT_MS: u64 = 20_000;

/// A Chromium process and its profile directory, both gone when dropped.
struct Browser {
    child: Child,
    profile: PathBuf,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

fn launch(url: &str) -> Browser {
    assert!(
        Path::new(CHROMIUM).exists(),
        "{CHROMIUM} is missing: install the Debian package chromium (scripts/test-all does)"
    );
    let profile = std::env::temp_dir().join(format!("shoal-chromium-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&profile);
    std::fs::create_dir_all(&profile).expect("a profile directory");
    let child = Command::new(CHROMIUM)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--allow-loopback-in-peer-connection",
            "--disable-features=WebRtcHideLocalIpsWithMdns",
            "--use-fake-device-for-media-stream",
            "--use-fake-ui-for-media-stream",
            "--remote-debugging-port=0",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start chromium");
    Browser { child, profile }
}

/// The browser's DevTools WebSocket URL, from `DevToolsActivePort` (port, then path).
fn devtools_url(profile: &Path) -> String {
    let file = profile.join("DevToolsActivePort");
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if let Ok(text) = std::fs::read_to_string(&file) {
            let mut lines = text.lines();
            if let (Some(port), Some(path)) = (lines.next(), lines.next()) {
                return format!("ws://127.0.0.1:{port}{path}");
            }
        }
        assert!(
            Instant::now() < deadline,
            "Chromium wrote no {}",
            file.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A DevTools connection: commands with ids, answers matched by id.
struct Cdp {
    ws: Ws,
    next_id: u64,
}

impl Cdp {
    async fn call(&mut self, session: Option<&str>, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut command = json!({"id": id, "method": method, "params": params});
        if let Some(s) = session {
            command["sessionId"] = json!(s);
        }
        self.ws
            .send(Message::text(command.to_string()))
            .await
            .expect("send a DevTools command");
        let deadline = tokio::time::Instant::now() + START_TIMEOUT;
        loop {
            let frame = tokio::time::timeout_at(deadline, self.ws.next())
                .await
                .unwrap_or_else(|_| panic!("no answer to {method}"))
                .unwrap_or_else(|| panic!("DevTools closed during {method}"))
                .expect("a DevTools frame");
            let Message::Text(text) = frame else { continue };
            let reply: Value = serde_json::from_str(&text).expect("DevTools JSON");
            if reply["id"] == json!(id) {
                assert!(reply.get("error").is_none(), "{method}: {reply}");
                return reply["result"].clone();
            }
        }
    }

    /// Runs `expression` in the page, awaits its promise, returns its value.
    async fn evaluate(&mut self, session: &str, expression: &str) -> Value {
        let result = self
            .call(
                Some(session),
                "Runtime.evaluate",
                json!({"expression": expression, "awaitPromise": true, "returnByValue": true}),
            )
            .await;
        if let Some(e) = result.get("exceptionDetails") {
            panic!("the page threw: {}", e["exception"]["description"]);
        }
        result["result"]["value"].clone()
    }
}

/// Attaches to the page target whose URL starts with `url`.
async fn attach(cdp: &mut Cdp, url: &str) -> String {
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        let targets = cdp.call(None, "Target.getTargets", json!({})).await;
        let page = targets["targetInfos"].as_array().and_then(|t| {
            t.iter()
                .find(|t| {
                    t["type"] == "page" && t["url"].as_str().is_some_and(|u| u.starts_with(url))
                })
                .cloned()
        });
        if let Some(page) = page {
            let attached = cdp
                .call(
                    None,
                    "Target.attachToTarget",
                    json!({"targetId": page["targetId"], "flatten": true}),
                )
                .await;
            let session = attached["sessionId"]
                .as_str()
                .expect("a session id")
                .to_owned();
            // The target may still show its initial about:blank document: wait until
            // shoal's page has loaded, so that fetch("/whip/…") is same-origin.
            let ready = r#"location.href + " " + document.readyState"#;
            loop {
                let state = cdp.evaluate(&session, ready).await;
                let state = state.as_str().unwrap_or_default();
                if state.starts_with(url) && state.ends_with("complete") {
                    return session;
                }
                assert!(Instant::now() < deadline, "the page did not load: {state}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        assert!(Instant::now() < deadline, "no page at {url}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The page's side: an RTCPeerConnection with no ICE servers and a data channel,
/// its offer POSTed to WHIP, the answer applied; resolves when the channel opens.
fn whip_script(room: &str) -> String {
    format!(
        r#"(async () => {{
  const pc = new RTCPeerConnection({{ iceServers: [] }});
  const dc = pc.createDataChannel("chat");
  const opened = new Promise((resolve, reject) => {{
    dc.onopen = () => resolve("open");
    setTimeout(() => reject(new Error("no open after {OPEN_TIMEOUT_MS} ms: connection "
      + pc.connectionState + ", ice " + pc.iceConnectionState + ", channel " + dc.readyState)),
      {OPEN_TIMEOUT_MS});
  }});
  await pc.setLocalDescription(await pc.createOffer());
  const response = await fetch("/whip/{room}?identity=chromium", {{
    method: "POST", headers: {{ "Content-Type": "application/sdp" }}, body: pc.localDescription.sdp,
  }});
  const body = await response.text();
  if (response.status !== 201) throw new Error("POST " + response.status + ": " + body);
  await pc.setRemoteDescription({{ type: "answer", sdp: body }});
  const state = await opened;
  window.shoalTest = {{ pc, dc }};
  return state + " " + response.headers.get("Location");
}})()"#
    )
}

#[test]
fn interop_chromium_whip_datachannel_opens() {
    let (server, control) = grpc_node::start_node(Config {
        shards: NonZeroUsize::new(1).expect("non-zero"),
        ..Config::default()
    });
    let http: SocketAddr = control.http_addr().expect("HTTP is on");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let mut rooms = RoomServiceClient::new(
        runtime.block_on(grpc_node::connect(control.grpc_addr().expect("gRPC is on"))),
    );
    runtime
        .block_on(rooms.create_room(CreateRoomRequest {
            name: "interop".into(),
            ..CreateRoomRequest::default()
        }))
        .expect("room created");

    let page = format!("http://{http}/");
    let browser = launch(&page);
    let url = devtools_url(&browser.profile);
    runtime.block_on(async {
        let (ws, _) = tokio_tungstenite::connect_async(url.as_str())
            .await
            .expect("connect to DevTools");
        let mut cdp = Cdp { ws, next_id: 0 };
        let session = attach(&mut cdp, &page).await;
        let opened = cdp.evaluate(&session, &whip_script("interop")).await;
        let opened = opened.as_str().unwrap_or_default().to_owned();
        let stats = server
            .command_sender(0)
            .and_then(|s| s.stats().ok())
            .map(|r| format!("{:?}", r.shard));
        assert!(
            opened.starts_with("open /whip/interop/"),
            "the data channel did not open: {opened:?}; shard counters: {stats:?}"
        );
        assert_eq!(grpc_node::participants(&mut rooms, "interop").await, 1);

        // Closing the connection sends close_notify: the participant leaves.
        cdp.evaluate(&session, "window.shoalTest.pc.close(); 'closed'")
            .await;
        let deadline = Instant::now() + Duration::from_secs(10);
        while grpc_node::participants(&mut rooms, "interop").await != 0 {
            assert!(
                Instant::now() < deadline,
                "the participant should leave once Chromium closes DTLS"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    drop(browser);
}
