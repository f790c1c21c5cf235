//! VP8 temporal layers (RFC 7741 §4.2) with Chromium on both sides. One page joins a
//! room over `/signal` and sends its fake camera as one VP8 stream of three temporal
//! layers (`scalabilityMode` L1T3 by setParameters: TIDs 0, 2, 1, 2 over and over).
//! A second page receives it and asks, by `TrackSettings.max_temporal_layer`, for the
//! base layer only, then for layers 0 and 1, then for all of them. Over each phase
//! (after it settles) the player decodes a quarter, a half and all of the frames the
//! publisher encodes, and its own getStats() counts no packet lost and sends no
//! NACK: shoal's sequence numbers and PictureIDs close over every frame it drops.
//! With PictureIDs left with gaps, libwebrtc holds back the non-sync frames of
//! layer 1 (a half would read three eighths); with sequence numbers left with gaps,
//! the player would count them lost and NACK them. shoal's own report
//! (ListParticipants) names the layer it sends and the frames it dropped.
//!
//! Needs `/usr/bin/chromium` (`scripts/test-all` installs it).

mod chromium;
mod grpc_node;
mod video_page;

use std::time::{Duration, Instant};

use chromium::{Cdp, attach, devtools, launch, open_page, poll};
use serde_json::Value;
use video_page::{CONNECTED, join_script};

const ROOM: &str = "temporal";
const JOIN_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a phase settles before it is measured: a rise waits for a layer sync
/// frame (one in eight), and the decoder's queue plays out.
const SETTLE: Duration = Duration::from_secs(2);
/// How long a phase is measured.
const WINDOW: Duration = Duration::from_secs(5);

/// Asks the publisher's video sender for three temporal layers; resolves with the
/// mode the sender then reports.
const L1T3: &str = r#"(async () => {
  const sender = window.shoal.pc.getSenders().find((s) => s.track && s.track.kind === "video");
  const p = sender.getParameters();
  p.encodings[0].scalabilityMode = "L1T3";
  await sender.setParameters(p);
  return sender.getParameters().encodings[0].scalabilityMode || null;
})()"#;

/// Frames the publisher encoded, and its encoder's mode.
const SENT: &str = r#"(async () => {
  const r = { encoded: 0, mode: null, codec: null };
  const stats = await window.shoal.pc.getStats();
  stats.forEach((s) => {
    if (s.type !== "outbound-rtp" || s.kind !== "video") return;
    r.encoded += s.framesEncoded || 0;
    r.mode = s.scalabilityMode || null;
    const codec = stats.get(s.codecId);
    r.codec = codec ? codec.mimeType : null;
  });
  return r;
})()"#;

/// What the player decoded and received of the remote video.
const RECEIVED: &str = r#"(async () => {
  const r = { decoded: 0, lost: 0, nacks: 0, received: 0, freezes: 0 };
  (await window.shoal.pc.getStats()).forEach((s) => {
    if (s.type !== "inbound-rtp" || s.kind !== "video") return;
    r.decoded += s.framesDecoded || 0;
    r.lost += s.packetsLost || 0;
    r.nacks += s.nackCount || 0;
    r.received += s.packetsReceived || 0;
    r.freezes += s.freezeCount || 0;
  });
  return r;
})()"#;

fn n(v: &Value, key: &str) -> i64 {
    v[key].as_i64().unwrap_or(0)
}

/// Sends `message` (JSON) on the page's signalling socket.
async fn send(cdp: &mut Cdp, page: &str, message: &Value) {
    let script = format!("window.shoal.ws.send({:?}); true", message.to_string());
    assert_eq!(cdp.evaluate(page, &script).await, true);
}

/// One phase's measure: frames encoded and decoded, packets lost and NACKs sent by
/// the player over [`WINDOW`].
struct Phase {
    encoded: i64,
    decoded: i64,
    lost: i64,
    nacks: i64,
    received: i64,
}

async fn measure(cdp: &mut Cdp, publisher: &str, player: &str) -> Phase {
    tokio::time::sleep(SETTLE).await;
    let (s0, r0) = (
        cdp.evaluate(publisher, SENT).await,
        cdp.evaluate(player, RECEIVED).await,
    );
    tokio::time::sleep(WINDOW).await;
    let (s1, r1) = (
        cdp.evaluate(publisher, SENT).await,
        cdp.evaluate(player, RECEIVED).await,
    );
    let d = |a: &Value, b: &Value, k: &str| n(b, k) - n(a, k);
    Phase {
        encoded: d(&s0, &s1, "encoded"),
        decoded: d(&r0, &r1, "decoded"),
        lost: d(&r0, &r1, "lost"),
        nacks: d(&r0, &r1, "nacks"),
        received: d(&r0, &r1, "received"),
    }
}

#[test]
fn interop_chromium_vp8_temporal_layers() {
    let grpc_node::RoomNode {
        server,
        http,
        runtime,
        control: _control,
        mut rooms,
    } = grpc_node::node_with_room(ROOM);
    let url = format!("http://{http}/");
    let browser = launch(&url);
    runtime.block_on(async {
        let mut cdp = devtools(&browser).await;
        let publisher = attach(&mut cdp, &url).await;
        let player = open_page(&mut cdp, &url).await;
        assert_eq!(cdp.evaluate(&publisher, &join_script(ROOM, "pub")).await, "joined");
        poll(&mut cdp, &publisher, CONNECTED, Instant::now() + JOIN_TIMEOUT).await;
        assert_eq!(cdp.evaluate(&publisher, L1T3).await, "L1T3");
        assert_eq!(cdp.evaluate(&player, &join_script(ROOM, "player")).await, "joined");
        poll(&mut cdp, &player, CONNECTED, Instant::now() + JOIN_TIMEOUT).await;
        let others = cdp.evaluate(&player, "window.shoal.state.join.others").await;
        let video = others[0]["tracks"]
            .as_array()
            .and_then(|t| t.iter().find(|t| t["kind"].as_i64() == Some(2)))
            .and_then(|t| t["id"].as_str())
            .unwrap_or_else(|| panic!("pub publishes no video: {others}"))
            .to_owned();
        // The encoder takes the new mode at its next reconfiguration: its stats may
        // name the old one for the first frames after setParameters resolves.
        let deadline = Instant::now() + JOIN_TIMEOUT;
        let sent = loop {
            let sent = cdp.evaluate(&publisher, SENT).await;
            if sent["mode"] == "L1T3" || Instant::now() >= deadline {
                break sent;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert_eq!(sent["codec"], "video/VP8", "{sent}");
        assert_eq!(sent["mode"], "L1T3", "{sent}");

        let report = |rooms: &mut shoal_proto::v1::room_service_client::RoomServiceClient<_>| {
            let mut rooms = rooms.clone();
            async move {
                let listed = grpc_node::list_participants(&mut rooms, ROOM).await;
                listed
                    .into_iter()
                    .find(|p| p.identity == "player")
                    .and_then(|p| p.connection)
                    .map(|c| c.layers)
                    .unwrap_or_default()
            }
        };
        // (bound, share of the frames decoded, its tolerance)
        let phases: [(Option<u32>, f64); 4] =
            [(None, 1.0), (Some(0), 0.25), (Some(1), 0.5), (None, 1.0)];
        let mut log = String::new();
        for (bound, share) in phases {
            let mut settings = serde_json::json!({"trackIds": [video]});
            if let Some(b) = bound {
                settings["maxTemporalLayer"] = b.into();
            }
            send(&mut cdp, &player, &serde_json::json!({ "trackSettings": settings })).await;
            let p = measure(&mut cdp, &publisher, &player).await;
            let layers = report(&mut rooms).await;
            let ratio = p.decoded as f64 / p.encoded.max(1) as f64;
            log += &format!(
                "\n{bound:?}: encoded {} decoded {} ({ratio:.2}) received {} lost {} nacks {}; shoal {:?}",
                p.encoded, p.decoded, p.received, p.lost, p.nacks, layers
            );
            assert!(p.encoded >= 50, "the publisher encodes too little:{log}");
            let tolerance = if share < 1.0 { 0.07 } else { 0.1 };
            assert!(
                (ratio - share).abs() <= tolerance,
                "decoded {ratio:.2} of the frames, not {share}:{log}"
            );
            assert_eq!(p.lost, 0, "sequence numbers with gaps:{log}");
            assert_eq!(p.nacks, 0, "the player asked for packets:{log}");
            let video_layer = layers.iter().find(|l| l.track_id == video);
            match bound {
                Some(b) => {
                    let l = video_layer.unwrap_or_else(|| panic!("no layer report:{log}"));
                    assert_eq!(l.temporal_current, b as i32, "{log}");
                    assert!(l.frames_dropped > 0, "{log}");
                }
                // Every layer: Chromium's top one is 2.
                None => assert!(
                    video_layer.is_none_or(|l| l.temporal_target == -1
                        && matches!(l.temporal_current, -1 | 2)),
                    "{log}"
                ),
            }
        }
        eprintln!("phases:{log}");
        let shard = grpc_node::shard_report(&server, 0).shard;
        assert_eq!(shard.srtp_unprotect_failed, 0, "{shard:?}");
    });
    drop(browser);
}
