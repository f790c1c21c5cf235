//! ICE over TCP (RFC 6544) for a client whose network drops all UDP: shoal runs in
//! namespace `sfu` and answers with a passive TCP candidate beside its UDP one; a
//! Chromium in `client-a` joins over `/signal` with its camera (over UDP); a
//! Chromium in `client-b`, whose namespace drops every UDP datagram in and out,
//! joins too. Its selected pair is TCP to shoal's listener; it decodes the
//! camera's video, and the two exchange 1 000 data-channel messages each way
//! through the room, each received exactly once and in order.
//!
//! Needs root, iproute2, nftables and `/usr/bin/chromium` (`scripts/test-all`
//! installs them); see `lab` for how it skips elsewhere.

mod chromium;
mod grpc_node;
mod lab;
mod lab_node;
mod video_page;
mod whip_page;

use std::time::{Duration, Instant};

use chromium::launch_in;
use lab_node::{Page, SFU, Star, UDP_PORT, page_url, secure_origin_flag, star, start_sfu};
use whip_page::STATS;

const ROOM: &str = "tcp";
/// The default: the UDP base + 100.
const TCP_PORT: u16 = UDP_PORT + 100;
const FRAMES: u64 = 60;
const MESSAGES: usize = 1_000;
const TIMEOUT: Duration = Duration::from_secs(30);

/// Sends `MESSAGES` numbered messages on the page's chat channel once it is open.
fn send_script(me: &str) -> String {
    format!(
        r#"(async () => {{
  const chat = window.shoal.chat;
  if (chat.readyState !== "open") await new Promise((ok) => chat.addEventListener("open", ok, {{ once: true }}));
  for (let i = 0; i < {MESSAGES}; i++) chat.send("{me}-" + i);
  return "sent";
}})()"#
    )
}

#[test]
fn netns_ice_tcp_when_udp_blocked() {
    let Some(mut lab) = lab::Lab::new("tcp") else {
        return;
    };
    let Star {
        sfu,
        client_a,
        client_b,
        ..
    } = star(&mut lab, &[]);
    lab.drop_udp(&client_b);

    let (server, control) = start_sfu(&sfu, ROOM, &[]);
    assert_eq!(
        server.tcp_candidates(0),
        Some(&[format!("{SFU}:{TCP_PORT}").parse().expect("an address")][..])
    );
    let shard = || {
        server
            .command_sender(0)
            .and_then(|s| s.stats().ok())
            .expect("the shard reports")
    };

    let page = page_url();
    let secure = secure_origin_flag();
    let camera = launch_in(Some(&client_a), &page, &[&secure]);
    let walled = launch_in(Some(&client_b), &page, &[&secure]);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let mut a = Page::open(&lab, &client_a, &camera, &page).await;
        assert_eq!(a.eval(&video_page::join_script(ROOM, "a")).await, "joined");
        let mut b = Page::open(&lab, &client_b, &walled, &page).await;
        assert_eq!(b.eval(&video_page::join_script(ROOM, "b")).await, "joined");

        let got = b.media(FRAMES, false, TIMEOUT).await;
        let report = format!("walled: {got}\nshard: {:?}", shard());
        assert!(
            got["framesDecoded"].as_u64().unwrap_or(0) >= FRAMES,
            "{report}"
        );
        assert_eq!(got["protocol"], "tcp", "{report}");
        assert_eq!(
            got["remote"],
            serde_json::json!(format!("{SFU} {TCP_PORT}")),
            "{report}"
        );

        assert_eq!(a.eval(&send_script("a")).await, "sent");
        assert_eq!(b.eval(&send_script("b")).await, "sent");
        let deadline = Instant::now() + TIMEOUT;
        let (mut at_a, mut at_b) = (Vec::new(), Vec::new());
        while Instant::now() < deadline {
            at_a = strings(&a.eval("window.shoal.state.received").await);
            at_b = strings(&b.eval("window.shoal.state.received").await);
            if at_a.len() >= MESSAGES && at_b.len() >= MESSAGES {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let want =
            |from: &str| -> Vec<String> { (0..MESSAGES).map(|i| format!("{from}-{i}")).collect() };
        // Exactly once, in order: the received lists are the sent ones.
        assert_eq!(at_b, want("a"), "b's messages over TCP");
        assert_eq!(at_a, want("b"), "a's messages from the TCP client");
        let sent = a.eval(STATS).await;
        assert_eq!(sent["protocol"], "udp", "a is not walled: {sent}");
    });
    let report = shard();
    assert!(report.driver.tcp_accepted >= 1, "{:?}", report.driver);
    assert!(report.driver.tcp_frames_in > 0, "{:?}", report.driver);
    assert_eq!(report.driver.tcp_closed_garbage, 0, "{:?}", report.driver);
    assert_eq!(report.shard.srtp_unprotect_failed, 0, "{:?}", report.shard);
    drop(camera);
    drop(walled);
    drop(control);
    drop(server);
}

/// A JSON array of strings as a vector.
fn strings(v: &serde_json::Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_owned))
        .collect()
}
