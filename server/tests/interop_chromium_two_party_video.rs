//! Interop: two headless Chromium pages with the fake camera and microphone join one
//! room over the `/signal` WebSocket; each publishes audio and video, and each
//! decodes the other's video and receives the other's audio through shoal, checked
//! from the pages' own getStats(): SRTP both ways (the AEAD profile shoal picks as
//! DTLS server), SSRC-based demultiplexing, per-subscriber header rewriting, and
//! keyframe requests for the late subscriber. The first page receives the second's
//! tracks through a renegotiation shoal starts; the second gets the first's in its
//! own answer.
//!
//! Needs `/usr/bin/chromium` (`scripts/test-all` installs it).

mod chromium;
mod grpc_node;

use std::time::{Duration, Instant};

use chromium::{attach, devtools, launch, open_page, poll};
use serde_json::Value;

const ROOM: &str = "video-room";
/// Frames each page must decode of the other's video (the issue's bar).
const FRAMES: u64 = 60;
/// How long the pages have, from the second joining.
const MEDIA_TIMEOUT: Duration = Duration::from_secs(10);
/// How long joining may take.
const JOIN_TIMEOUT: Duration = Duration::from_secs(20);

/// Joins the room over `/signal` with fake camera and microphone, answers every offer
/// shoal sends, and keeps `window.shoal` up to date.
fn join_script(me: &str) -> String {
    format!(
        r#"(async () => {{
  const me = "{me}";
  const pc = new RTCPeerConnection({{ iceServers: [] }});
  const stream = await navigator.mediaDevices.getUserMedia({{ audio: true, video: {{ width: 320, height: 240 }} }});
  for (const t of stream.getTracks()) pc.addTrack(t, stream);
  pc.createDataChannel("chat");
  const state = {{ me, errors: [], offers: 0, tracks: [] }};
  window.shoal = {{ pc, state }};
  pc.ontrack = (e) => state.tracks.push(e.track.kind + "/" + e.streams.map((s) => s.id).join(","));
  const ws = new WebSocket(`ws://${{window.location.host}}/signal`);
  await new Promise((ok, fail) => {{ ws.onopen = ok; ws.onerror = fail; }});
  // One description at a time, in the order they came.
  let chain = Promise.resolve();
  let answered;
  const gotAnswer = new Promise((ok) => (answered = ok));
  ws.onmessage = (e) => {{
    const m = JSON.parse(e.data);
    if (m.error) state.errors.push(JSON.stringify(m.error));
    if (m.answer) chain = chain.then(() => pc.setRemoteDescription({{ type: "answer", sdp: m.answer.sdp }})).then(answered);
    if (m.offer) chain = chain.then(async () => {{
      state.offers++;
      await pc.setRemoteDescription({{ type: "offer", sdp: m.offer.sdp }});
      await pc.setLocalDescription(await pc.createAnswer());
      ws.send(JSON.stringify({{ answer: {{ sdp: pc.localDescription.sdp }} }}));
    }}).catch((err) => state.errors.push(String(err)));
  }};
  ws.send(JSON.stringify({{ join: {{ room: "{ROOM}", identity: me }} }}));
  await pc.setLocalDescription(await pc.createOffer());
  ws.send(JSON.stringify({{ offer: {{ sdp: pc.localDescription.sdp }} }}));
  await gotAnswer;
  return "joined";
}})()"#
    )
}

/// The page's receive side, from getStats(): frames decoded of the remote video,
/// packets received of the remote audio.
const STATS: &str = r#"(async () => {
  const r = { framesDecoded: 0, audioPackets: 0, videoPackets: 0 };
  const stats = await window.shoal.pc.getStats();
  stats.forEach((s) => {
    if (s.type !== "inbound-rtp") return;
    if (s.kind === "video") { r.framesDecoded += s.framesDecoded || 0; r.videoPackets += s.packetsReceived || 0; }
    if (s.kind === "audio") r.audioPackets += s.packetsReceived || 0;
  });
  r.state = window.shoal.state;
  r.connection = window.shoal.pc.connectionState;
  return r;
})()"#;

fn count(v: &Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or(0)
}

#[test]
fn interop_chromium_two_party_video() {
    let grpc_node::RoomNode {
        server,
        http,
        runtime,
        rooms: _rooms,
        control: _control,
    } = grpc_node::node_with_room(ROOM);
    let page = format!("http://{http}/");
    let browser = launch(&page);
    runtime.block_on(async {
        let mut cdp = devtools(&browser).await;
        let alice = attach(&mut cdp, &page).await;
        let bob = open_page(&mut cdp, &page).await;
        let joined = cdp.evaluate(&alice, &join_script("alice")).await;
        assert_eq!(joined, "joined");
        // Alice's connection first, so Bob's answer can carry her tracks.
        let deadline = Instant::now() + JOIN_TIMEOUT;
        poll(
            &mut cdp,
            &alice,
            "window.shoal.pc.connectionState === 'connected' ? true : null",
            deadline,
        )
        .await;
        let joined = cdp.evaluate(&bob, &join_script("bob")).await;
        assert_eq!(joined, "joined");

        let deadline = Instant::now() + MEDIA_TIMEOUT + JOIN_TIMEOUT;
        let (a, b) = loop {
            let a = cdp.evaluate(&alice, STATS).await;
            let b = cdp.evaluate(&bob, STATS).await;
            let done =
                |v: &Value| count(v, "framesDecoded") >= FRAMES && count(v, "audioPackets") > 0;
            if (done(&a) && done(&b)) || Instant::now() > deadline {
                break (a, b);
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        };
        let report = server.command_sender(0).and_then(|s| s.stats().ok());
        for (who, v) in [("alice", &a), ("bob", &b)] {
            assert!(
                count(v, "framesDecoded") >= FRAMES && count(v, "audioPackets") > 0,
                "{who} did not get the other's media: {v}\nshard: {:?}",
                report.as_ref().map(|r| &r.shard)
            );
            assert_eq!(v["state"]["errors"], serde_json::json!([]), "{who}: {v}");
        }
        // Alice heard of Bob's tracks through an offer from shoal.
        assert!(count(&a["state"], "offers") >= 1, "{a}");
        let tracks = |v: &Value| {
            let mut t: Vec<String> = v["state"]["tracks"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|x| x.as_str().map(str::to_owned))
                .collect();
            t.sort();
            t
        };
        assert_eq!(tracks(&a), ["audio/bob", "video/bob"]);
        assert_eq!(tracks(&b), ["audio/alice", "video/alice"]);
        let report = report.expect("the shard reports");
        assert_eq!(report.shard.srtp_unprotect_failed, 0, "{:?}", report.shard);
        assert!(
            report.shard.keyframe_requests_sent >= 2,
            "{:?}",
            report.shard
        );
    });
    drop(browser);
}
