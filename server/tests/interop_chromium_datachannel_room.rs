//! Interop: two headless Chromium pages join one room, one over the `/signal`
//! WebSocket and one over WHIP, and exchange data-channel messages through shoal's
//! room relay, checked from the pages' own JavaScript: on a reliable ordered channel
//! every message of the other page arrives exactly once, in order, with its type
//! (string or binary) and bytes intact; on an unordered channel sent once, nothing
//! arrives twice or corrupted. The `/signal` page also checks the events it was sent:
//! the other page joined, became active and (the WHIP page first) left, and its own
//! two channels opened. Each page leaves (a WHIP DELETE; the socket closes) and the
//! room is empty again.
//!
//! Needs `/usr/bin/chromium` (`scripts/test-all` installs it).

mod chromium;
mod grpc_node;

use std::time::{Duration, Instant};

use chromium::{attach, devtools, launch, open_page, poll};
use serde_json::Value;

const ROOM: &str = "chromium-room";
/// Messages each page sends on each channel.
const COUNT: usize = 300;
/// How long the pages have for the whole exchange.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(60);

/// One page's side of the exchange; its result lands in `window.shoalResult`.
///
/// Until the other page is heard (messages sent before it joined reach no one), the
/// page says `ready:<me>` every 100 ms, then once more; then it sends COUNT numbered
/// messages on each channel (even ones strings, odd ones binary, 0 to ~3 KB), pacing
/// on `bufferedAmount`; once it has all of the other's it says `done:<me>`. The
/// /signal page, once the other's `done` arrives, says `bye:<me>` and finishes when
/// its signalling reports the other left; the WHIP page leaves once `bye` arrives.
/// So neither leaves with a message still on its way that the other waits for (a page
/// that left at once on the other's `done` could take its own `done` with it).
fn room_script(me: &str, via_signal: bool) -> String {
    format!(
        r#"window.shoalResult = null;
(async () => {{
  const me = "{me}", count = {COUNT}, viaSignal = {via_signal};
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
  const location_host = () => window.location.host;
  const size = (i) => (i * 37) % 3000;
  const text = (who, i) => `${{who}}:${{i}}:` + "x".repeat(size(i));
  const bytes = (who, i) => {{
    const head = new TextEncoder().encode(`${{who}}:${{i}}:`);
    const out = new Uint8Array(head.length + size(i));
    out.set(head);
    for (let k = 0; k < size(i); k++) out[head.length + k] = (i + k) % 251;
    return out;
  }};
  const payload = (who, i) => (i % 2 === 0 ? text(who, i) : bytes(who, i));
  // (sender, index) of a well-formed message from someone else, else null.
  const parse = (data) => {{
    const raw = typeof data === "string" ? data : new TextDecoder().decode(new Uint8Array(data).slice(0, 64));
    const [who, idx] = raw.split(":");
    const i = Number(idx);
    if (!who || who === me || !Number.isInteger(i)) return null;
    const want = payload(who, i);
    if (typeof data === "string") return data === want ? [who, i] : null;
    if (typeof want === "string") return null;
    const got = new Uint8Array(data);
    return got.length === want.length && got.every((b, k) => b === want[k]) ? [who, i] : null;
  }};
  const pc = new RTCPeerConnection({{ iceServers: [] }});
  const dc = pc.createDataChannel("ordered");
  const un = pc.createDataChannel("unordered", {{ ordered: false, maxRetransmits: 0 }});
  dc.binaryType = un.binaryType = "arraybuffer";
  const r = {{ me, peer: null, ordered: 0, unordered: 0, errors: [] }};
  let next = 0, peerDone = false, bye = false;
  const seen = new Set();
  dc.onmessage = (e) => {{
    if (typeof e.data === "string" && e.data.startsWith("ready:")) {{ r.peer = e.data.slice(6); return; }}
    if (typeof e.data === "string" && e.data.startsWith("done:")) {{ peerDone = true; return; }}
    if (typeof e.data === "string" && e.data.startsWith("bye:")) {{ bye = true; return; }}
    const m = parse(e.data);
    if (!m || m[0] !== r.peer) r.errors.push("malformed ordered message");
    else if (m[1] !== next) {{ r.errors.push(`expected ${{next}}, got ${{m[1]}}`); next = m[1] + 1; }}
    else next++;
    r.ordered++;
  }};
  un.onmessage = (e) => {{
    const m = parse(e.data);
    if (!m) r.errors.push("malformed unordered message");
    else if (seen.has(m[1])) r.errors.push(`unordered ${{m[1]}} twice`);
    else seen.add(m[1]);
    r.unordered++;
  }};
  const opened = Promise.all([dc, un].map((c) => new Promise((ok) => (c.onopen = ok))));
  await pc.setLocalDescription(await pc.createOffer());
  let location = null, ws = null;
  const heard = [];
  if (viaSignal) {{
    // SignalService over the WebSocket, as JSON: join, offer, then the answer.
    ws = new WebSocket(`ws://${{location_host()}}/signal`);
    ws.onmessage = (e) => heard.push(JSON.parse(e.data));
    await new Promise((ok, fail) => {{ ws.onopen = ok; ws.onerror = fail; }});
    ws.send(JSON.stringify({{ join: {{ room: "{ROOM}", identity: me }} }}));
    ws.send(JSON.stringify({{ offer: {{ sdp: pc.localDescription.sdp }} }}));
    let answer;
    while (!(answer = heard.find((m) => m.answer))) {{
      const error = heard.find((m) => m.error);
      if (error) throw new Error("signal: " + JSON.stringify(error));
      await sleep(20);
    }}
    await pc.setRemoteDescription({{ type: "answer", sdp: answer.answer.sdp }});
    window.shoalJoined = true;
  }} else {{
    const response = await fetch(`/whip/{ROOM}?identity=${{me}}`, {{
      method: "POST", headers: {{ "Content-Type": "application/sdp" }}, body: pc.localDescription.sdp,
    }});
    const answer = await response.text();
    if (response.status !== 201) throw new Error(`POST ${{response.status}}: ${{answer}}`);
    location = response.headers.get("Location");
    await pc.setRemoteDescription({{ type: "answer", sdp: answer }});
  }}
  await opened;
  while (!r.peer) {{ dc.send(`ready:${{me}}`); await sleep(100); }}
  dc.send(`ready:${{me}}`);
  for (let i = 0; i < count; i++) {{
    dc.send(payload(me, i));
    un.send(payload(me, i));
    while (dc.bufferedAmount > 256 * 1024) await sleep(5);
  }}
  while (r.ordered < count) await sleep(20);
  dc.send(`done:${{me}}`);
  while (!peerDone) await sleep(20);
  if (viaSignal) {{
    dc.send(`bye:${{me}}`);
    // The other leaves once it has this: wait for its leaving (KIND_LEFT, 3).
    const left = () => heard.some((m) => m.participant && m.participant.kind === 3
      && m.participant.participant.identity === r.peer);
    while (!left()) await sleep(20);
    // What the events said: the other joined (1) and became active (2); our own
    // channels opened (1), by label.
    const events = heard.filter((m) => m.participant && m.participant.participant.identity === r.peer);
    r.peerEvents = events.map((m) => m.participant.kind);
    const joined = heard.find((m) => m.join);
    r.othersAtJoin = ((joined && joined.join.others) || []).map((p) => p.identity);
    r.channelsOpened = heard
      .filter((m) => m.dataChannel && m.dataChannel.kind === 1)
      .map((m) => m.dataChannel.channel.label)
      .sort();
    ws.close();
    r.deleted = 200;
  }} else {{
    while (!bye) await sleep(20);
    const gone = await fetch(location, {{ method: "DELETE" }});
    r.deleted = gone.status;
  }}
  pc.close();
  return r;
}})().then((r) => (window.shoalResult = r), (e) => (window.shoalResult = {{ failed: String(e) }}));
"started""#
    )
}

#[test]
fn interop_chromium_datachannel_room() {
    let grpc_node::RoomNode {
        http,
        runtime,
        mut rooms,
        control: _control,
        server: _server,
    } = grpc_node::node_with_room(ROOM);
    let page = format!("http://{http}/");
    let browser = launch(&page);
    runtime.block_on(async {
        let mut cdp = devtools(&browser).await;
        let first = attach(&mut cdp, &page).await;
        let second = open_page(&mut cdp, &page).await;
        let deadline = Instant::now() + EXCHANGE_TIMEOUT;
        // The /signal page joins first, so it hears the WHIP page join and become
        // active as events.
        let started = cdp.evaluate(&first, &room_script("left", true)).await;
        assert_eq!(started, Value::from("started"));
        poll(
            &mut cdp,
            &first,
            "window.shoalJoined || window.shoalResult || null",
            deadline,
        )
        .await;
        let started = cdp.evaluate(&second, &room_script("right", false)).await;
        assert_eq!(started, Value::from("started"));
        let probe = "window.shoalResult";
        for (session, me, other) in [(&first, "left", "right"), (&second, "right", "left")] {
            let r = poll(&mut cdp, session, probe, deadline).await;
            assert!(r.get("failed").is_none(), "{me}: {r}");
            assert_eq!(r["peer"], Value::from(other), "{me}: {r}");
            assert_eq!(r["ordered"], Value::from(COUNT), "{me}: {r}");
            assert_eq!(r["errors"], Value::Array(Vec::new()), "{me}: {r}");
            // Sent once each on loopback; the relay may drop an unreliable message
            // for a slow receiver, but never duplicates or corrupts one.
            let unordered = r["unordered"].as_u64().unwrap_or(0);
            assert!(
                unordered > 0 && unordered <= COUNT as u64,
                "{me}: {unordered} unordered"
            );
            assert_eq!(r["deleted"], Value::from(200), "{me}: {r}");
            if me == "left" {
                // The /signal page, in the room first, heard the other join (1),
                // then become active (2), then leave (3), and saw its own two
                // channels open.
                let kinds = r["peerEvents"].as_array().cloned().unwrap_or_default();
                assert_eq!(r["othersAtJoin"], serde_json::json!([]), "{me}: {r}");
                assert!(kinds.contains(&Value::from(1)), "{me}: joined? {r}");
                assert!(kinds.contains(&Value::from(2)), "{me}: active? {r}");
                assert!(kinds.contains(&Value::from(3)), "{me}: left? {r}");
                assert_eq!(
                    r["channelsOpened"],
                    serde_json::json!(["ordered", "unordered"]),
                    "{me}: {r}"
                );
            }
        }
        assert_eq!(grpc_node::participants(&mut rooms, ROOM).await, 0);
    });
    drop(browser);
}
