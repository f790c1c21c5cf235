//! A video-call page for the Chromium interop tests: joins a room over the `/signal`
//! WebSocket with the fake camera and microphone, answers every offer shoal sends,
//! and reports what it receives from getStats().

#![allow(dead_code)]

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::chromium::{Cdp, poll};

/// Null until the page's peer connection is connected.
pub const CONNECTED: &str = "window.shoal.pc.connectionState === 'connected' ? true : null";

/// Joins `room` as `me` on page `session` and waits, until `deadline`, for its
/// connection to come up.
pub async fn join_and_connect(
    cdp: &mut Cdp,
    session: &str,
    room: &str,
    me: &str,
    deadline: Instant,
) {
    let joined = cdp.evaluate(session, &join_script(room, me)).await;
    assert_eq!(joined, "joined", "{me}");
    poll(cdp, session, CONNECTED, deadline).await;
}

/// Reads [`STATS`] from every page in `sessions` every 250 ms until `done` holds for
/// all of them or `deadline` passes, and returns the last readings, in order.
pub async fn stats_until(
    cdp: &mut Cdp,
    sessions: &[&str],
    deadline: Instant,
    done: impl Fn(&Value) -> bool,
) -> Vec<Value> {
    loop {
        let mut all = Vec::with_capacity(sessions.len());
        for session in sessions {
            all.push(cdp.evaluate(session, STATS).await);
        }
        if all.iter().all(&done) || Instant::now() > deadline {
            return all;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Joins the room over `/signal` with fake camera and microphone, answers every offer
/// shoal sends, and keeps `window.shoal` up to date.
pub fn join_script(room: &str, me: &str) -> String {
    join_script_with(room, me, false)
}

/// [`join_script`]; with `relay`, the page waits for the join response and
/// connects only through the TURN servers it names (`iceServers`,
/// `iceTransportPolicy: "relay"`), set before its offer starts gathering.
pub fn join_script_with(room: &str, me: &str, relay: bool) -> String {
    join_script_opts(room, me, relay, true)
}

/// [`join_script_with`], joining with `autoSubscribe` as given. The page keeps its
/// socket in `window.shoal.ws`, the join response in `state.join` and every track
/// event in `state.trackEvents`.
pub fn join_script_opts(room: &str, me: &str, relay: bool, auto_subscribe: bool) -> String {
    format!(
        r#"(async () => {{
  const me = "{me}";
  const relay = {relay};
  const pc = new RTCPeerConnection({{ iceServers: [] }});
  const stream = await navigator.mediaDevices.getUserMedia({{ audio: true, video: {{ width: 320, height: 240 }} }});
  for (const t of stream.getTracks()) pc.addTrack(t, stream);
  const chat = pc.createDataChannel("chat");
  const state = {{ me, errors: [], offers: 0, tracks: [], received: [], trackEvents: [] }};
  chat.onmessage = (e) => state.received.push(e.data);
  window.shoal = {{ pc, state, chat, ws: null }};
  pc.ontrack = (e) => state.tracks.push(e.track.kind + "/" + e.streams.map((s) => s.id).join(","));
  const ws = new WebSocket(`ws://${{window.location.host}}/signal`);
  await new Promise((ok, fail) => {{ ws.onopen = ok; ws.onerror = fail; }});
  window.shoal.ws = ws;
  // One description at a time, in the order they came.
  let chain = Promise.resolve();
  let answered;
  const gotAnswer = new Promise((ok) => (answered = ok));
  let joined;
  const gotJoin = new Promise((ok) => (joined = ok));
  ws.onmessage = (e) => {{
    const m = JSON.parse(e.data);
    if (m.join) {{ state.join = m.join; joined(m.join); }}
    if (m.track) state.trackEvents.push(m.track);
    if (m.error) state.errors.push(JSON.stringify(m.error));
    if (m.answer) chain = chain.then(() => pc.setRemoteDescription({{ type: "answer", sdp: m.answer.sdp }})).then(answered);
    if (m.offer) chain = chain.then(async () => {{
      state.offers++;
      await pc.setRemoteDescription({{ type: "offer", sdp: m.offer.sdp }});
      await pc.setLocalDescription(await pc.createAnswer());
      ws.send(JSON.stringify({{ answer: {{ sdp: pc.localDescription.sdp, id: m.offer.id || 0 }} }}));
    }}).catch((err) => state.errors.push(String(err)));
  }};
  ws.send(JSON.stringify({{ join: {{ room: "{room}", identity: me, autoSubscribe: {auto_subscribe} }} }}));
  // An ICE restart over /signal: an offer with new credentials, and its answer.
  window.shoal.restart = async () => {{
    const done = new Promise((ok) => (answered = ok));
    pc.restartIce();
    await pc.setLocalDescription(await pc.createOffer());
    ws.send(JSON.stringify({{ offer: {{ sdp: pc.localDescription.sdp }} }}));
    await done;
    return "restarted";
  }};
  if (relay) {{
    const join = await gotJoin;
    state.iceServers = join.iceServers || [];
    pc.setConfiguration({{ iceServers: state.iceServers, iceTransportPolicy: "relay" }});
  }}
  await pc.setLocalDescription(await pc.createOffer());
  ws.send(JSON.stringify({{ offer: {{ sdp: pc.localDescription.sdp }} }}));
  await gotAnswer;
  return "joined";
}})()"#
    )
}

/// The page's receive side, from getStats(): frames decoded of the remote video (in
/// all and per stream), packets received of the remote audio (in all, and how many
/// audio streams have any).
pub const STATS: &str = r#"(async () => {
  const r = { framesDecoded: 0, audioPackets: 0, videoPackets: 0, videoFrames: [], audioStreams: 0 };
  const stats = await window.shoal.pc.getStats();
  stats.forEach((s) => {
    if (s.type !== "inbound-rtp") return;
    if (s.kind === "video") {
      r.framesDecoded += s.framesDecoded || 0;
      r.videoPackets += s.packetsReceived || 0;
      r.videoFrames.push(s.framesDecoded || 0);
    }
    if (s.kind === "audio") {
      r.audioPackets += s.packetsReceived || 0;
      if ((s.packetsReceived || 0) > 0) r.audioStreams++;
    }
  });
  r.state = window.shoal.state;
  r.connection = window.shoal.pc.connectionState;
  return r;
})()"#;

/// `v[key]` as a count (0 when absent).
pub fn count(v: &Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or(0)
}

/// The kinds and stream ids of the tracks the page's `ontrack` saw, sorted.
pub fn tracks(v: &Value) -> Vec<String> {
    let mut t: Vec<String> = v["state"]["tracks"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|x| x.as_str().map(str::to_owned))
        .collect();
    t.sort();
    t
}

/// [`tracks`] with each stream id replaced by the identity of the participant that
/// publishes it, from `participants` (as RoomService lists them): shoal names
/// streams at random.
pub fn tracks_of(v: &Value, participants: &[shoal_proto::v1::Participant]) -> Vec<String> {
    let mut t: Vec<String> = tracks(v)
        .into_iter()
        .map(|kind_stream| {
            let (kind, stream) = kind_stream.split_once('/').unwrap_or(("", &kind_stream));
            let owner = participants
                .iter()
                .find(|p| p.tracks.iter().any(|t| t.stream_id == stream))
                .map_or(stream, |p| p.identity.as_str());
            format!("{kind}/{owner}")
        })
        .collect();
    t.sort();
    t
}

/// How many of the page's incoming video streams decoded at least `frames` frames.
pub fn videos_decoding(v: &Value, frames: u64) -> usize {
    v["videoFrames"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|f| f.as_u64().unwrap_or(0) >= frames)
        .count()
}
