//! Acceptance: tokens minted by LiveKit's own server SDK (PyPI `livekit-api`, in the
//! interop venv) with the node's API key and secret work unchanged. An aiortc
//! publisher joins over WHIP with one; headless Chromium opens the demo page with
//! `?token=` and joins over `/signal`, playing the publisher's video. A token without
//! canPublish cannot publish: WHIP refuses it (403), and Chromium's camera is answered
//! as not received (an error event says why) while it still plays the room's video.
//! Without canPublishData its chat messages are dropped (counted) while it receives
//! the others'.

mod aiortc;
mod chromium;
mod grpc_node;
mod http_client;
mod tokens;

use std::num::NonZeroUsize;
use std::time::{Duration, Instant};

use aiortc::{CLIENT_TIMEOUT, MARGIN, VideoClient};
use chromium::{attach, devtools, launch, open_page, poll};
use shoal_proto::v1::ListParticipantsRequest;
use shoal_server::config::Config;

const ROOM: &str = "livekit-room";
const TIMEOUT: Duration = Duration::from_secs(30);

/// A token from `livekit.api.AccessToken`: joins ROOM as `identity`, publishing
/// media and data or not.
fn livekit_token(identity: &str, can_publish: bool) -> String {
    let py = if can_publish { "True" } else { "False" };
    let program = format!(
        "import sys\n\
         from livekit import api\n\
         grants = api.VideoGrants(room_join=True, room={ROOM:?}, can_publish={py}, \
         can_publish_data={py})\n\
         t = api.AccessToken({:?}, {:?}).with_identity({identity:?})\n\
         t = t.with_name({:?}).with_grants(grants)\n\
         sys.stdout.write(t.to_jwt())\n",
        tokens::KEY,
        tokens::SECRET,
        format!("{identity} (LiveKit)"),
    );
    let out = std::process::Command::new(aiortc::python())
        .args(["-c", &program])
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "livekit-api: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("a token")
}

/// How many videos the page plays (with a decoded frame), with their captions.
const PLAYING: &str = r##"(() => {
  const playing = [...document.querySelectorAll("#videos figure")].filter((f) => {
    const v = f.querySelector("video");
    return v.readyState >= 2 && v.videoWidth > 0;
  });
  return playing.map((f) => f.querySelector("figcaption").textContent).sort().join(",");
})()"##;

fn join_button() -> &'static str {
    "document.getElementById('join').requestSubmit(); 'submitted'"
}

#[test]
fn livekit_minted_token_joins() {
    let grpc_node::RoomNode {
        server,
        control: _control,
        http,
        runtime,
        mut rooms,
    } = grpc_node::node_in(Config {
        shards: NonZeroUsize::MIN,
        api_keys: vec![tokens::api_key()],
        ..Config::default()
    });

    // WHIP from aiortc with a LiveKit token: the room opens, the camera publishes.
    let camera = livekit_token("camera", true);
    let whip = format!("http://{http}/whip/{ROOM}");
    let mut publisher = VideoClient::start("publish", &whip, &["--token", &camera]);
    let up = publisher.next_report(Instant::now() + CLIENT_TIMEOUT + MARGIN, "publisher");
    assert_eq!(up["event"], "connected", "publisher: {up}");

    // Without canPublish, WHIP is refused.
    let muted = livekit_token("muted", false);
    let offer = http_client::fixture_offer("chromium156_data_offer.sdp");
    let bearer = format!("Bearer {muted}");
    let refused = http_client::request_with_headers(
        http,
        "POST",
        &format!("/whip/{ROOM}"),
        &[
            ("Content-Type", "application/sdp"),
            ("Authorization", &bearer),
        ],
        offer.as_bytes(),
    );
    assert_eq!(refused.status, 403, "{refused:?}");
    assert!(refused.body.contains("canPublish"), "{refused:?}");

    // Chromium over /signal with ?token=: the page shows who it joins as, joins, and
    // plays the camera (and its own preview).
    let viewer = format!("http://{http}/?token={}", livekit_token("viewer", true));
    let watcher = format!("http://{http}/?token={}", livekit_token("watcher", false));
    let browser = launch(&viewer);
    runtime.block_on(async {
        let mut cdp = devtools(&browser).await;
        let v = attach(&mut cdp, &viewer).await;
        let info = cdp
            .evaluate(&v, "document.getElementById('tokenInfo').textContent")
            .await;
        assert!(
            info.as_str().unwrap_or_default().contains("as \"viewer\""),
            "{info}"
        );
        assert_eq!(cdp.evaluate(&v, join_button()).await, "submitted");
        let deadline = Instant::now() + TIMEOUT;
        let playing =
            format!("(() => {{ const p = {PLAYING}; return p === 'camera,you' ? p : null; }})()");
        poll(&mut cdp, &v, &playing, deadline).await;

        // Without canPublish: the camera is answered as not received, an error event
        // says why, and the room's video still plays.
        let w = open_page(&mut cdp, &watcher).await;
        assert_eq!(cdp.evaluate(&w, join_button()).await, "submitted");
        let deadline = Instant::now() + TIMEOUT;
        poll(
            &mut cdp,
            &w,
            "document.getElementById('log').textContent.includes('canPublish') ? true : null",
            deadline,
        )
        .await;
        // The watcher plays the camera and the viewer (and its own preview)...
        let all = format!(
            "(() => {{ const p = {PLAYING}; return p === 'camera,viewer,you' ? p : null; }})()"
        );
        poll(&mut cdp, &w, &all, deadline).await;
        // ...and the viewer never gets a video from the watcher.
        let people =
            "[...document.querySelectorAll('#people li')].map((l) => l.textContent).join(',')";
        poll(
            &mut cdp,
            &v,
            &format!(
                "(() => {{ const p = {people}; return p.includes('watcher') ? p : null; }})()"
            ),
            deadline,
        )
        .await;
        assert_eq!(cdp.evaluate(&v, PLAYING).await, "camera,you");

        // Chat: the watcher's line is dropped on its shard, the viewer's arrives.
        let chat = |text: &str| {
            format!(
                "document.getElementById('text').value = '{text}'; \
                 document.getElementById('chat').requestSubmit(); 'sent'"
            )
        };
        let open = "document.getElementById('send').disabled ? null : true";
        poll(&mut cdp, &w, open, deadline).await;
        poll(&mut cdp, &v, open, deadline).await;
        cdp.evaluate(&w, &chat("from the watcher")).await;
        grpc_node::wait_for_shards(&server, TIMEOUT, "the watcher's line refused", |r| {
            r[0].shard.data_messages_refused >= 1
        });
        cdp.evaluate(&v, &chat("from the viewer")).await;
        poll(
            &mut cdp,
            &w,
            "document.getElementById('log').textContent.includes('viewer: from the viewer') ? true : null",
            deadline,
        )
        .await;
        let log = cdp
            .evaluate(&v, "document.getElementById('log').textContent")
            .await;
        assert!(
            !log.as_str().unwrap_or_default().contains("from the watcher"),
            "{log}"
        );

        let participants = rooms
            .list_participants({
                let mut r = tonic::Request::new(ListParticipantsRequest {
                    room: ROOM.into(),
                    ..ListParticipantsRequest::default()
                });
                let t = tokens::token("operator", tokens::operator(ROOM));
                r.metadata_mut()
                    .insert("authorization", format!("Bearer {t}").parse().unwrap());
                r
            })
            .await
            .expect("listed")
            .into_inner()
            .participants;
        let by = |id: &str| {
            participants
                .iter()
                .find(|p| p.identity == id)
                .unwrap_or_else(|| panic!("{id} in {participants:?}"))
        };
        assert_eq!(by("camera").tracks.len(), 2, "{participants:?}");
        assert_eq!(by("viewer").name, "viewer (LiveKit)");
        assert!(!by("viewer").tracks.is_empty(), "{participants:?}");
        assert!(by("watcher").tracks.is_empty(), "{participants:?}");
    });
    drop(browser);
    let done = publisher.stop_publishing();
    assert_eq!(done["connection"], "connected", "publisher: {done}");
}
