//! Headless Chromium for the interop tests: launched with the flags WebRTC on
//! loopback needs, driven over the DevTools protocol (the port it picked is read from
//! `DevToolsActivePort` in a fresh user-data-dir), JavaScript run in its pages. It can
//! run inside a network namespace of the test's network lab ([`launch_in`]); its
//! DevTools port is then reached over a stream the lab connected from inside
//! ([`devtools_over`]).
//!
//! Needs `/usr/bin/chromium` (Debian package `chromium`; `scripts/test-all` installs
//! it).

#![allow(dead_code)]

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

pub const CHROMIUM: &str = "/usr/bin/chromium";
/// How long Chromium may take to start and open its DevTools port.
pub const START_TIMEOUT: Duration = Duration::from_secs(30);

/// A Chromium process group and its profile directory, both gone when dropped.
pub struct Browser {
    child: Child,
    /// Its profile directory.
    pub profile: PathBuf,
}

impl Drop for Browser {
    /// Kills the whole process group: the browser's helpers (zygote, renderers, GPU,
    /// crash handler) outlive a killed browser process for a while and go on writing
    /// into the profile, which a removal racing them leaves behind.
    fn drop(&mut self) {
        if let Ok(pid) = i32::try_from(self.child.id()) {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        // Helpers of the group may still be exiting; their files go with a retry.
        for _ in 0..20 {
            if std::fs::remove_dir_all(&self.profile).is_ok() || !self.profile.exists() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Starts Chromium on `url` with a fresh profile.
pub fn launch(url: &str) -> Browser {
    launch_in(None, url, &[])
}

/// Starts Chromium on `url` with a fresh profile, in network namespace `netns` (`ip
/// netns exec`) when given, with `extra` flags.
pub fn launch_in(netns: Option<&str>, url: &str, extra: &[&str]) -> Browser {
    assert!(
        Path::new(CHROMIUM).exists(),
        "{CHROMIUM} is missing: install the Debian package chromium (scripts/test-all does)"
    );
    static LAUNCHES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = LAUNCHES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let profile = std::env::temp_dir().join(format!("shoal-chromium-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&profile);
    std::fs::create_dir_all(&profile).expect("a profile directory");
    let mut command = match netns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns, CHROMIUM]);
            c
        }
        None => Command::new(CHROMIUM),
    };
    let child = command
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
        .args(extra)
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        // A group of its own, so that dropping the browser kills its helpers too.
        .process_group(0)
        .spawn()
        .expect("start chromium");
    Browser { child, profile }
}

/// The browser's DevTools WebSocket URL, from `DevToolsActivePort` (port, then path).
pub fn devtools_url(profile: &Path) -> String {
    let (port, path) = devtools_port(profile);
    format!("ws://127.0.0.1:{port}{path}")
}

/// The browser's DevTools port and WebSocket path, from `DevToolsActivePort`.
pub fn devtools_port(profile: &Path) -> (u16, String) {
    let file = profile.join("DevToolsActivePort");
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if let Ok(text) = std::fs::read_to_string(&file) {
            let mut lines = text.lines();
            if let (Some(Ok(port)), Some(path)) = (lines.next().map(str::parse), lines.next()) {
                return (port, path.to_owned());
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

/// The DevTools WebSocket.
pub type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A DevTools connection: commands with ids, answers matched by id.
pub struct Cdp {
    /// The connection.
    pub ws: Ws,
    /// The last command id used.
    pub next_id: u64,
}

impl Cdp {
    /// Sends `method` (to `session`, or the browser) and returns its result.
    pub async fn call(&mut self, session: Option<&str>, method: &str, params: Value) -> Value {
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
    pub async fn evaluate(&mut self, session: &str, expression: &str) -> Value {
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
pub async fn attach(cdp: &mut Cdp, url: &str) -> String {
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
            return attach_loaded(cdp, &page["targetId"], url, deadline).await;
        }
        assert!(Instant::now() < deadline, "no page at {url}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until the page of `session` shows `url`, loaded: a new target may still show
/// its initial about:blank document, and `fetch("/whip/…")` must be same-origin.
async fn wait_loaded(cdp: &mut Cdp, session: &str, url: &str, deadline: Instant) {
    let ready = r#"location.href + " " + document.readyState"#;
    loop {
        let state = cdp.evaluate(session, ready).await;
        let state = state.as_str().unwrap_or_default();
        if state.starts_with(url) && state.ends_with("complete") {
            return;
        }
        assert!(Instant::now() < deadline, "the page did not load: {state}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Opens another page (a tab) on `url`, attaches to it and waits until it loaded.
pub async fn open_page(cdp: &mut Cdp, url: &str) -> String {
    let deadline = Instant::now() + START_TIMEOUT;
    let created = cdp
        .call(None, "Target.createTarget", json!({ "url": url }))
        .await;
    attach_loaded(cdp, &created["targetId"], url, deadline).await
}

/// Attaches to `target` and waits until it shows `url`, loaded; returns the session.
async fn attach_loaded(cdp: &mut Cdp, target: &Value, url: &str, deadline: Instant) -> String {
    let attached = cdp
        .call(
            None,
            "Target.attachToTarget",
            json!({"targetId": target, "flatten": true}),
        )
        .await;
    let session = attached["sessionId"]
        .as_str()
        .expect("a session id")
        .to_owned();
    wait_loaded(cdp, &session, url, deadline).await;
    session
}

/// Polls `expression` in the page until it is not null, or panics at `deadline`.
pub async fn poll(cdp: &mut Cdp, session: &str, expression: &str, deadline: Instant) -> Value {
    loop {
        let v = cdp.evaluate(session, expression).await;
        if !v.is_null() {
            return v;
        }
        assert!(Instant::now() < deadline, "no value for {expression}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A DevTools connection to `browser`.
pub async fn devtools(browser: &Browser) -> Cdp {
    let url = devtools_url(&browser.profile);
    let (ws, _) = tokio_tungstenite::connect_async(url.as_str())
        .await
        .expect("connect to DevTools");
    Cdp { ws, next_id: 0 }
}

/// A DevTools connection to `browser` over `stream`, a connection to its DevTools
/// port made elsewhere (from inside its network namespace).
pub async fn devtools_over(browser: &Browser, stream: std::net::TcpStream) -> Cdp {
    let url = devtools_url(&browser.profile);
    stream.set_nonblocking(true).expect("a non-blocking stream");
    let stream = tokio::net::TcpStream::from_std(stream).expect("a tokio stream");
    let (ws, _) = tokio_tungstenite::client_async(
        url.as_str(),
        tokio_tungstenite::MaybeTlsStream::Plain(stream),
    )
    .await
    .expect("the DevTools handshake");
    Cdp { ws, next_id: 0 }
}
