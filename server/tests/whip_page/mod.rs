//! WHIP and WHEP from a Chromium page (RFC 9725): a publisher of the fake camera and
//! microphone, a player of a room's tracks, and what each sees in getStats(). The
//! page is shoal's own `/`, so `fetch("/whip/…")` is same-origin.

#![allow(dead_code)]

/// How long a page waits for its connection, in milliseconds.
pub const CONNECT_TIMEOUT_MS: u64 = 20_000;

/// The JavaScript that waits (at most [`CONNECT_TIMEOUT_MS`]) for `pc` to connect.
const WAIT_CONNECTED: &str = r#"await new Promise((ok, fail) => {
    const started = Date.now();
    const check = () => {
      if (pc.connectionState === "connected") return ok();
      if (pc.connectionState === "failed" || Date.now() - started > TIMEOUT)
        return fail(new Error("connection " + pc.connectionState + ", ice " + pc.iceConnectionState));
      setTimeout(check, 50);
    };
    check();
  });"#;

/// The RTCIceServer entries of a response's `Link` headers with
/// `rel="ice-server"` (RFC 9725 §4.6), which `fetch` joins with ", ".
const PARSE_LINKS: &str = r#"const iceServersOf = (links) => (links || "").split(/,\s*(?=<)/).filter((l) => /rel="ice-server"/.test(l)).map((l) => {
    const server = { urls: l.slice(l.indexOf("<") + 1, l.indexOf(">")) };
    for (const [, key, value] of l.matchAll(/;\s*([a-z-]+)="((?:[^"\\]|\\.)*)"/g)) {
      if (key === "username" || key === "credential") server[key] = value.replace(/\\(.)/g, "$1");
    }
    return server;
  });"#;

/// How a page reaches shoal.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Path {
    /// Any candidate pair; no STUN/TURN server.
    Direct,
    /// Relayed only (`iceTransportPolicy: "relay"`), through the servers of the
    /// POST's `Link` headers: the offer is created first, and the servers set before
    /// it is applied, so gathering uses them (RFC 9725 §4.6's note on
    /// setConfiguration).
    RelayFromLinks,
}

/// POSTs the page's offer to `path`, applies the answer and waits for the
/// connection; resolves with the answer's SDP. `window.shoal.offer` keeps the offer
/// (set before the POST, so a test can read it when the POST fails) and
/// `window.shoal.links` the response's `Link` headers.
fn exchange(setup: &str, path: &str, via: Path) -> String {
    let wait = WAIT_CONNECTED.replace("TIMEOUT", &CONNECT_TIMEOUT_MS.to_string());
    let relay = via == Path::RelayFromLinks;
    format!(
        r#"(async () => {{
  {PARSE_LINKS}
  const relay = {relay};
  const pc = new RTCPeerConnection({{ iceServers: [], iceTransportPolicy: relay ? "relay" : "all" }});
  const state = {{ tracks: [] }};
  pc.ontrack = (e) => state.tracks.push(e.track.kind);
  {setup}
  const offer = await pc.createOffer();
  window.shoal = {{ pc, state, offer: offer.sdp }};
  if (!relay) await pc.setLocalDescription(offer);
  const response = await fetch("{path}", {{
    method: "POST", headers: {{ "Content-Type": "application/sdp" }}, body: offer.sdp,
  }});
  const answer = await response.text();
  if (response.status !== 201) throw new Error("POST {path}: " + response.status + ": " + answer);
  const links = response.headers.get("Link");
  window.shoal = {{ pc, state, offer: offer.sdp, answer, links, location: response.headers.get("Location"), etag: response.headers.get("ETag") }};
  if (relay) {{
    pc.setConfiguration({{ iceServers: iceServersOf(links), iceTransportPolicy: "relay" }});
    await pc.setLocalDescription(offer);
  }}
  await pc.setRemoteDescription({{ type: "answer", sdp: answer }});
  {wait}
  return answer;
}})()"#
    )
}

/// Publishes the fake camera and microphone into `room` over WHIP as `identity`;
/// resolves with shoal's answer once connected.
pub fn publish_script(room: &str, identity: &str) -> String {
    exchange(
        r#"const stream = await navigator.mediaDevices.getUserMedia({ audio: true, video: { width: 320, height: 240 } });
  for (const t of stream.getTracks()) pc.addTransceiver(t, { direction: "sendonly", streams: [stream] });"#,
        &format!("/whip/{room}?identity={identity}"),
        Path::Direct,
    )
}

/// Publishes the microphone and, as video, a `width` × `height` canvas of random
/// colour blocks redrawn 30 times a second: content no encoder compresses well, so
/// the publisher sends as much as its congestion controller allows (the fake camera's
/// test pattern needs about 0.5 Mbit/s at any size). Resolves with shoal's answer
/// once connected.
pub fn publish_noise_script(room: &str, identity: &str, width: u32, height: u32) -> String {
    exchange(
        &format!(
            r#"const canvas = document.createElement("canvas");
  canvas.width = {width}; canvas.height = {height};
  const g = canvas.getContext("2d");
  const block = 8, tile = g.createImageData({width} / block, {height} / block);
  const small = new OffscreenCanvas({width} / block, {height} / block);
  const draw = () => {{
    const d = tile.data;
    for (let i = 0; i < d.length; i++) d[i] = (i & 3) === 3 ? 255 : (Math.random() * 256) | 0;
    small.getContext("2d").putImageData(tile, 0, 0);
    g.imageSmoothingEnabled = false;
    g.drawImage(small, 0, 0, {width}, {height});
  }};
  draw();
  setInterval(draw, 33);
  const video = canvas.captureStream(30).getVideoTracks()[0];
  // Keep the resolution (and so the encoder's appetite) whatever the estimate.
  video.contentHint = "detail";
  const mic = await navigator.mediaDevices.getUserMedia({{ audio: true }});
  const stream = new MediaStream([mic.getAudioTracks()[0], video]);
  for (const t of stream.getTracks()) pc.addTransceiver(t, {{ direction: "sendonly", streams: [stream] }});"#
        ),
        &format!("/whip/{room}?identity={identity}"),
        Path::Direct,
    )
}

/// Publishes the fake camera at 1280 × 720 (asking for 30 frames a second; it gives
/// 20) into `room` over WHIP as `identity`, as three simulcast streams of one track
/// (RFC 8853; rids, RFC 8851): `q` at a quarter of its width and height up to
/// 150 kbit/s, `h` at half up to 500 kbit/s, `f` whole up to 1.5 Mbit/s. The video
/// section offers `codec` alone (`"VP8"` or `"H264"`, with its RTX format): for H.264
/// packetization mode 1 first (shoal forwards no other), Constrained Baseline level
/// 3.1 (`42e01f`) first among those. No audio. Resolves with shoal's answer once
/// connected.
pub fn publish_simulcast_script(room: &str, identity: &str, codec: &str) -> String {
    exchange(
        &format!(
            r#"const stream = await navigator.mediaDevices.getUserMedia({{ video: {{ width: 1280, height: 720, frameRate: 30 }} }});
  const track = stream.getVideoTracks()[0];
  const transceiver = pc.addTransceiver(track, {{ direction: "sendonly", sendEncodings: [
    {{ rid: "q", scaleResolutionDownBy: 4, maxBitrate: 150000 }},
    {{ rid: "h", scaleResolutionDownBy: 2, maxBitrate: 500000 }},
    {{ rid: "f", scaleResolutionDownBy: 1, maxBitrate: 1500000 }},
  ] }});
  const codecs = RTCRtpSender.getCapabilities("video").codecs;
  const fmtp = (c) => c.sdpFmtpLine || "";
  const rank = (c) => (/packetization-mode=1/.test(fmtp(c)) ? 0 : 2) + (/profile-level-id=42e01f/.test(fmtp(c)) ? 0 : 1);
  const wanted = codecs.filter((c) => c.mimeType.toLowerCase() === "video/{codec}".toLowerCase()).sort((a, b) => rank(a) - rank(b));
  if (!wanted.length) throw new Error("Chromium cannot send {codec}: " + codecs.map((c) => c.mimeType + " " + fmtp(c)).join(", "));
  transceiver.setCodecPreferences([...wanted, ...codecs.filter((c) => c.mimeType === "video/rtx")]);"#
        ),
        &format!("/whip/{room}?identity={identity}"),
        Path::Direct,
    )
}

/// Plays `room` over WHEP as `identity` (an audio and a video transceiver,
/// receive-only); resolves with shoal's answer once connected.
pub fn play_script(room: &str, identity: &str) -> String {
    play_script_via(room, identity, Path::Direct)
}

/// [`play_script`], reaching shoal `via` that path.
pub fn play_script_via(room: &str, identity: &str, via: Path) -> String {
    exchange(
        r#"pc.addTransceiver("audio", { direction: "recvonly" });
  pc.addTransceiver("video", { direction: "recvonly" });"#,
        &format!("/whep/{room}?identity={identity}"),
        via,
    )
}

/// What the page's connection reports: video frames decoded and audio packets
/// received, its state, and the selected candidate pair's remote (shoal's) and local
/// addresses, the local candidate's type (`host`, `srflx`, `relay`) and its
/// protocol (`udp`, `tcp`).
pub const STATS: &str = r#"(async () => {
  const pc = window.shoal.pc;
  const r = { framesDecoded: 0, audioPackets: 0, connection: pc.connectionState, remote: null, local: null };
  const stats = await pc.getStats();
  stats.forEach((s) => {
    if (s.type === "inbound-rtp" && s.kind === "video") r.framesDecoded += s.framesDecoded || 0;
    if (s.type === "inbound-rtp" && s.kind === "audio") r.audioPackets += s.packetsReceived || 0;
    if (s.type === "transport" && s.selectedCandidatePairId) {
      const pair = stats.get(s.selectedCandidatePairId);
      const remote = pair && stats.get(pair.remoteCandidateId);
      const local = pair && stats.get(pair.localCandidateId);
      if (remote) r.remote = remote.address + " " + remote.port;
      if (local) { r.local = local.address; r.localType = local.candidateType; r.protocol = local.protocol; }
    }
  });
  r.tracks = window.shoal.state.tracks.slice().sort();
  return r;
})()"#;

/// The addresses and ports of an SDP's UDP `a=candidate` lines, and the addresses
/// of its `c=` lines.
pub fn sdp_addresses(sdp: &str) -> (Vec<(String, u16)>, Vec<String>) {
    sdp_candidates(sdp, "udp")
}

/// The addresses and ports of an SDP's `a=candidate` lines of `transport` (`udp`,
/// `tcp`), and the addresses of its `c=` lines.
pub fn sdp_candidates(sdp: &str, transport: &str) -> (Vec<(String, u16)>, Vec<String>) {
    let mut candidates = Vec::new();
    let mut connections = Vec::new();
    for line in sdp.lines() {
        if let Some(c) = line.strip_prefix("a=candidate:") {
            let fields: Vec<&str> = c.split_whitespace().collect();
            if !fields
                .get(2)
                .is_some_and(|t| t.eq_ignore_ascii_case(transport))
            {
                continue;
            }
            let (Some(addr), Some(port)) = (fields.get(4), fields.get(5)) else {
                panic!("a short candidate line: {line}");
            };
            candidates.push(((*addr).to_owned(), port.parse().expect("a port")));
        }
        if let Some(c) = line.strip_prefix("c=") {
            let addr = c.split_whitespace().nth(2).expect("c=IN IP4 ADDR");
            connections.push(addr.to_owned());
        }
    }
    (candidates, connections)
}

/// Restarts the page's ICE over WHIP/WHEP PATCH (RFC 9725 §4.3): `restartIce()`, a
/// fragment with the new credentials and `If-Match: "*"`, and the answer again with
/// shoal's new credentials from the 200 and, in place of the old candidates, the
/// 200's (as WHIP clients do); resolves with the new ETag.
pub const RESTART_OVER_PATCH: &str = r#"(async () => {
  const s = window.shoal;
  s.pc.restartIce();
  const offer = await s.pc.createOffer();
  await s.pc.setLocalDescription(offer);
  const ufrag = offer.sdp.match(/a=ice-ufrag:(.*)\r\n/)[1];
  const pwd = offer.sdp.match(/a=ice-pwd:(.*)\r\n/)[1];
  const response = await fetch(s.location, {
    method: "PATCH",
    headers: { "Content-Type": "application/trickle-ice-sdpfrag", "If-Match": "*" },
    body: "a=ice-ufrag:" + ufrag + "\r\na=ice-pwd:" + pwd + "\r\n",
  });
  const fragment = await response.text();
  if (response.status !== 200) throw new Error("PATCH: " + response.status + ": " + fragment);
  const newUfrag = fragment.match(/a=ice-ufrag:(.*)\r\n/)[1];
  const newPwd = fragment.match(/a=ice-pwd:(.*)\r\n/)[1];
  const candidates = (fragment.match(/a=candidate:.*\r\n/g) || []).join("");
  if (!candidates) throw new Error("no candidates in the PATCH answer: " + fragment);
  s.answer = s.answer
    .replace(/a=candidate:.*\r\n/g, "")
    .replace(/a=end-of-candidates\r\n/g, "")
    .replace(/a=ice-ufrag:.*\r\n/g, "a=ice-ufrag:" + newUfrag + "\r\n")
    .replace(/a=ice-pwd:.*\r\n/g, "a=ice-pwd:" + newPwd + "\r\n" + candidates + "a=end-of-candidates\r\n");
  s.etag = response.headers.get("ETag");
  await s.pc.setRemoteDescription({ type: "answer", sdp: s.answer });
  return s.etag;
})()"#;
