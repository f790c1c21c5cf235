//! A browser in a cluster: one headless Chromium publishes its fake camera over WHIP
//! and plays it back over WHEP, each POST sent to a node that does not own the room.
//! Each gets `307 Temporary Redirect` to the owner (RFC 9725 §4.5) and `fetch`
//! repeats it there, on another origin, so the owner's CORS answers are what let the
//! page read its 201 (Fetch, "HTTP-redirect fetch" and "CORS check"):
//!
//! - the publisher's page is a non-owner's `/` and POSTs same-origin; the redirect
//!   makes the request cross-origin, preflighted at the owner;
//! - the player's page is the same node's `/` and POSTs to a second non-owner, so the
//!   request is cross-origin from the start and, redirected to a third origin,
//!   reaches the owner with `Origin: null` (Fetch's tainted origin).

use std::collections::HashSet;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::cluster_harness::ClusterNode;

#[path = "../chromium/mod.rs"]
mod chromium;
#[path = "../whip_page/mod.rs"]
mod whip_page;

use chromium::{Cdp, attach, devtools, launch, open_page};
use whip_page::{CONNECT_TIMEOUT_MS, STATS};

/// Frames the player must decode.
const FRAMES: u64 = 30;
/// How long the player has to decode them once connected.
const MEDIA_TIMEOUT: Duration = Duration::from_secs(15);

/// Sends the page's offer to `endpoint` (`fetch` follows redirects), applies the
/// answer and waits for the connection. Resolves with where the POST ended
/// (`redirected`, `url`) and the 201's `Location`; keeps the connection in
/// `window.shoal` for [`STATS`].
fn exchange(setup: &str, endpoint: &str) -> String {
    format!(
        r#"(async () => {{
  const pc = new RTCPeerConnection({{ iceServers: [] }});
  const state = {{ tracks: [] }};
  pc.ontrack = (e) => state.tracks.push(e.track.kind);
  window.shoal = {{ pc, state }};
  {setup}
  await pc.setLocalDescription(await pc.createOffer());
  let response;
  try {{
    response = await fetch("{endpoint}", {{
      method: "POST", headers: {{ "Content-Type": "application/sdp" }}, body: pc.localDescription.sdp,
    }});
  }} catch (e) {{
    throw new Error("POST {endpoint} (a CORS refusal looks like this): " + e);
  }}
  const answer = await response.text();
  if (response.status !== 201) throw new Error("POST {endpoint}: " + response.status + " at " + response.url + ": " + answer);
  await pc.setRemoteDescription({{ type: "answer", sdp: answer }});
  await new Promise((ok, fail) => {{
    const started = Date.now();
    const check = () => {{
      if (pc.connectionState === "connected") return ok();
      if (pc.connectionState === "failed" || Date.now() - started > {CONNECT_TIMEOUT_MS})
        return fail(new Error("connection " + pc.connectionState + ", ice " + pc.iceConnectionState));
      setTimeout(check, 50);
    }};
    check();
  }});
  return {{ redirected: response.redirected, url: response.url, location: response.headers.get("Location") }};
}})()"#
    )
}

/// Publishes the fake camera (video only) to `endpoint`.
fn publish_script(endpoint: &str) -> String {
    exchange(
        r#"const stream = await navigator.mediaDevices.getUserMedia({ video: { width: 320, height: 240 } });
  for (const t of stream.getTracks()) pc.addTransceiver(t, { direction: "sendonly", streams: [stream] });"#,
        endpoint,
    )
}

/// Plays the room's video from `endpoint`.
fn play_script(endpoint: &str) -> String {
    exchange(
        r#"pc.addTransceiver("video", { direction: "recvonly" });"#,
        endpoint,
    )
}

/// The UDP addresses `node` announces, as getStats() writes a candidate's
/// (`address port`).
fn announced(node: &ClusterNode) -> HashSet<String> {
    let line = node
        .process
        .banner
        .iter()
        .find_map(|l| l.strip_prefix("shoal: shard 0 announces "))
        .unwrap_or_else(|| panic!("no announced addresses in {:?}", node.process.banner));
    line.split_whitespace()
        .map(|a| {
            let a: std::net::SocketAddr = a.parse().expect("an address");
            format!("{} {}", a.ip(), a.port())
        })
        .collect()
}

/// Checks that a POST to `asked` was redirected to the same path and query on
/// `owner` and answered there with a session of `kind` in `room`.
fn assert_redirected(went: &Value, asked: &str, owner: &ClusterNode, kind: &str, room: &str) {
    let path_and_query = &asked[asked.find(&format!("/{kind}/")).expect("a WHIP/WHEP path")..];
    assert_eq!(went["redirected"], true, "POST {asked}: {went}");
    assert_eq!(
        went["url"],
        format!("http://{}{path_and_query}", owner.process.http),
        "POST {asked} ends at the owner {}: {went}",
        owner.id
    );
    // The owner's Location is readable across origins (Access-Control-Expose-Headers).
    let location = went["location"].as_str().unwrap_or_default();
    assert!(
        location.starts_with(&format!("/{kind}/{room}/")),
        "POST {asked}: the session's Location: {went}"
    );
}

/// Reads [`STATS`] on `session` until `frames` are decoded or `deadline` passes;
/// the last reading.
async fn decoded(cdp: &mut Cdp, session: &str, frames: u64, deadline: Instant) -> Value {
    loop {
        let stats = cdp.evaluate(session, STATS).await;
        if stats["framesDecoded"].as_u64().unwrap_or(0) >= frames || Instant::now() > deadline {
            return stats;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// One Chromium publishes video into `room` through one of the two `nodes` that are
/// not its `owner` and plays it through the other; both POSTs are redirected to the
/// owner, both sessions run there, and the player decodes the video.
pub fn video_through_redirects(
    rt: &tokio::runtime::Runtime,
    nodes: &[ClusterNode],
    room: &str,
    owner: &str,
) {
    let owner = nodes.iter().find(|n| n.id == owner).expect("the owner");
    let others: Vec<&ClusterNode> = nodes.iter().filter(|n| n.id != owner.id).collect();
    let [publish_via, play_via] = others[..] else {
        panic!("two nodes besides the owner")
    };
    let page = format!("http://{}/", publish_via.process.http);
    let whip = format!("/whip/{room}?identity=camera");
    let whep = format!(
        "http://{}/whep/{room}?identity=player",
        play_via.process.http
    );
    let at_owner = announced(owner);
    let browser = launch(&page);
    rt.block_on(async {
        let mut cdp = devtools(&browser).await;
        let camera = attach(&mut cdp, &page).await;
        let went = cdp.evaluate(&camera, &publish_script(&whip)).await;
        assert_redirected(&went, &whip, owner, "whip", room);
        // WHEP gets what the room has when it joins: the camera is there first.
        let player = open_page(&mut cdp, &page).await;
        let went = cdp.evaluate(&player, &play_script(&whep)).await;
        assert_redirected(&went, &whep, owner, "whep", room);

        let deadline = Instant::now() + MEDIA_TIMEOUT;
        let got = decoded(&mut cdp, &player, FRAMES, deadline).await;
        assert!(
            got["framesDecoded"].as_u64().unwrap_or(0) >= FRAMES,
            "the player decodes the camera through the owner {}: {got}",
            owner.id
        );
        assert_eq!(got["tracks"], serde_json::json!(["video"]), "{got}");
        // Media flows to the owner's shard, not to the nodes the POSTs went to.
        let sent = cdp.evaluate(&camera, STATS).await;
        for (who, stats) in [("camera", &sent), ("player", &got)] {
            let remote = stats["remote"].as_str().unwrap_or_default();
            assert!(
                at_owner.contains(remote),
                "{who}'s selected pair leads to {remote:?}, not to the owner's {at_owner:?}"
            );
        }
    });
}
