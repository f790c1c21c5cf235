//! Interop: the demo page shoal serves at `/` makes a call. Two headless Chromium
//! tabs open it, join one room with the fake camera and microphone, and each ends up
//! playing two videos (its own preview and the other's, with the other's identity as
//! caption) and sees the other in the room list; a chat line typed in one appears in
//! the other's log.
//!
//! Needs `/usr/bin/chromium` (`scripts/test-all` installs it).

mod chromium;
mod grpc_node;

use std::time::{Duration, Instant};

use chromium::{attach, devtools, launch, open_page, poll};

const ROOM: &str = "demo-room";
const TIMEOUT: Duration = Duration::from_secs(30);

fn join(identity: &str) -> String {
    format!(
        r#"(() => {{
  document.getElementById("room").value = "{ROOM}";
  document.getElementById("identity").value = "{identity}";
  document.getElementById("join").requestSubmit();
  return "submitted";
}})()"#
    )
}

/// The captions of the videos that play (have a decoded frame), sorted, once there
/// are two; else null.
const PLAYING: &str = r##"(() => {
  const figures = [...document.querySelectorAll("#videos figure")];
  const playing = figures.filter((f) => {
    const v = f.querySelector("video");
    return v.readyState >= 2 && v.videoWidth > 0;
  });
  return playing.length === 2 ? playing.map((f) => f.querySelector("figcaption").textContent).sort().join(",") : null;
})()"##;

#[test]
fn interop_chromium_demo_page() {
    let grpc_node::RoomNode {
        server: _server,
        http,
        runtime,
        rooms: _rooms,
        control: _control,
    } = grpc_node::node_with_room(ROOM);
    let page = format!("http://{http}/");
    let browser = launch(&page);
    runtime.block_on(async {
        let mut cdp = devtools(&browser).await;
        let ann = attach(&mut cdp, &page).await;
        let ben = open_page(&mut cdp, &page).await;
        assert_eq!(cdp.evaluate(&ann, &join("ann")).await, "submitted");
        let deadline = Instant::now() + TIMEOUT;
        poll(
            &mut cdp,
            &ann,
            "document.getElementById('status').textContent === 'connected' ? true : null",
            deadline,
        )
        .await;
        assert_eq!(cdp.evaluate(&ben, &join("ben")).await, "submitted");
        let deadline = Instant::now() + TIMEOUT;
        let a = poll(&mut cdp, &ann, PLAYING, deadline).await;
        let b = poll(&mut cdp, &ben, PLAYING, deadline).await;
        assert_eq!(a, "ben,you");
        assert_eq!(b, "ann,you");
        // The room list and the chat.
        let people =
            "[...document.querySelectorAll('#people li')].map((l) => l.textContent).join(',')";
        assert_eq!(cdp.evaluate(&ann, people).await, "ann (you),ben");
        poll(
            &mut cdp,
            &ben,
            "document.getElementById('send').disabled ? null : true",
            deadline,
        )
        .await;
        cdp.evaluate(
            &ben,
            "document.getElementById('text').value = 'hello'; \
             document.getElementById('chat').requestSubmit(); 'sent'",
        )
        .await;
        poll(
            &mut cdp,
            &ann,
            "document.getElementById('log').textContent.includes('ben: hello') ? true : null",
            deadline,
        )
        .await;
    });
    drop(browser);
}
