//! Acceptance: choosing what to receive, and muting. Two headless Chromium pages
//! join a room over `/signal`, each with its fake camera and microphone: `pub`
//! first, then `sub` with `autoSubscribe: false`.
//!
//! - `sub` receives nothing of `pub`'s (no video frame decoded, no offer carrying
//!   them) until it sends `{"subscription": {"trackIds": [...], "subscribe": true}}`;
//!   then shoal offers them and it decodes `pub`'s video.
//! - Unsubscribing from the video stops it: shoal's next offer disables its section
//!   and no frame is decoded afterwards.
//! - Subscribed again, `pub` mutes its video (`{"mute": {...}}`): `sub` hears
//!   TrackEvent KIND_MUTED, no frame is decoded while muted and the shard counts the
//!   muted packets it kept back; unmuted, `sub` hears KIND_UNMUTED and decodes again,
//!   starting on a keyframe (its `keyFramesDecoded` grows).
//! - ListParticipants reports each connection: Chromium's transport-wide feedback on
//!   what shoal sent `sub` gave shoal an estimate, and `pub` got shoal's feedback.
//!
//! Needs `/usr/bin/chromium` (`scripts/test-all` installs it).

mod chromium;
mod grpc_node;
mod video_page;

use std::time::{Duration, Instant};

use chromium::{Cdp, attach, devtools, launch, open_page, poll};
use serde_json::Value;
use shoal_proto::v1::ListParticipantsRequest;
use video_page::{CONNECTED, join_script_opts};

const ROOM: &str = "selective";
const JOIN_TIMEOUT: Duration = Duration::from_secs(20);
const MEDIA_TIMEOUT: Duration = Duration::from_secs(15);
/// How long "nothing arrives" is watched for.
const QUIET: Duration = Duration::from_secs(3);

/// The video the page decodes of others: frames and keyframes, over all its
/// inbound video streams.
const VIDEO: &str = r#"(async () => {
  const r = { frames: 0, keyframes: 0, streams: 0 };
  (await window.shoal.pc.getStats()).forEach((s) => {
    if (s.type === "inbound-rtp" && s.kind === "video") {
      r.streams++;
      r.frames += s.framesDecoded || 0;
      r.keyframes += s.keyFramesDecoded || 0;
    }
  });
  r.offers = window.shoal.state.offers;
  r.errors = window.shoal.state.errors;
  r.events = window.shoal.state.trackEvents.map((e) => e.kind + ":" + (e.track && e.track.id));
  return r;
})()"#;

async fn video(cdp: &mut Cdp, page: &str) -> Value {
    cdp.evaluate(page, VIDEO).await
}

fn n(v: &Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or(0)
}

/// Sends `message` (JSON) on the page's signalling socket.
async fn send(cdp: &mut Cdp, page: &str, message: &Value) {
    let script = format!("window.shoal.ws.send({:?}); true", message.to_string());
    assert_eq!(cdp.evaluate(page, &script).await, true);
}

/// Polls [`VIDEO`] until `done` holds or `timeout` passes; the last reading.
async fn video_until(
    cdp: &mut Cdp,
    page: &str,
    timeout: Duration,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + timeout;
    loop {
        let v = video(cdp, page).await;
        if done(&v) || Instant::now() > deadline {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Frames decoded over `QUIET`, once what was on its way when the video stopped
/// has played out (no new frame for half a second, within `MEDIA_TIMEOUT`): none
/// when the video is stopped.
async fn frames_over_quiet(cdp: &mut Cdp, page: &str) -> (u64, Value) {
    let deadline = Instant::now() + MEDIA_TIMEOUT;
    let mut last = n(&video(cdp, page).await, "frames");
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = n(&video(cdp, page).await, "frames");
        if now == last || Instant::now() > deadline {
            break;
        }
        last = now;
    }
    let before = video(cdp, page).await;
    tokio::time::sleep(QUIET).await;
    let after = video(cdp, page).await;
    (n(&after, "frames") - n(&before, "frames"), after)
}

#[test]
fn selective_subscription_and_mute() {
    let grpc_node::RoomNode {
        server,
        http,
        runtime,
        control: _control,
        mut rooms,
    } = grpc_node::node_with_room(ROOM);
    let url = format!("http://{http}/");
    let browser = launch(&url);
    let shard = || grpc_node::shard_report(&server, 0).shard;
    runtime.block_on(async {
        let mut cdp = devtools(&browser).await;
        let publisher = attach(&mut cdp, &url).await;
        let subscriber = open_page(&mut cdp, &url).await;
        let joined = cdp
            .evaluate(&publisher, &join_script_opts(ROOM, "pub", false, true))
            .await;
        assert_eq!(joined, "joined");
        poll(&mut cdp, &publisher, CONNECTED, Instant::now() + JOIN_TIMEOUT).await;
        let joined = cdp
            .evaluate(&subscriber, &join_script_opts(ROOM, "sub", false, false))
            .await;
        assert_eq!(joined, "joined");
        poll(&mut cdp, &subscriber, CONNECTED, Instant::now() + JOIN_TIMEOUT).await;

        // pub's tracks, as sub's join listed them.
        let others = cdp
            .evaluate(&subscriber, "window.shoal.state.join.others")
            .await;
        let tracks = others[0]["tracks"].as_array().cloned().unwrap_or_default();
        let id_of = |kind: i64| {
            tracks
                .iter()
                .find(|t| t["kind"].as_i64() == Some(kind))
                .and_then(|t| t["id"].as_str())
                .unwrap_or_else(|| panic!("pub publishes no kind {kind}: {others}"))
                .to_owned()
        };
        let (audio, video_id) = (id_of(1), id_of(2));

        // Nothing of pub's reaches sub while it has not subscribed.
        let (frames, seen) = frames_over_quiet(&mut cdp, &subscriber).await;
        assert_eq!(frames, 0, "{seen}");
        assert_eq!(n(&seen, "streams"), 0, "no video stream offered: {seen}");

        let subscribe = |ids: &[&str], on: bool| {
            serde_json::json!({"subscription": {"trackIds": ids, "subscribe": on}})
        };
        send(&mut cdp, &subscriber, &subscribe(&[&audio, &video_id], true)).await;
        let got = video_until(&mut cdp, &subscriber, MEDIA_TIMEOUT, |v| n(v, "frames") >= 30).await;
        assert!(n(&got, "frames") >= 30, "subscribed: {got}");

        // Unsubscribed from the video: shoal offers the change, and it stops.
        let offers = n(&got, "offers");
        send(&mut cdp, &subscriber, &subscribe(&[&video_id], false)).await;
        let v = video_until(&mut cdp, &subscriber, MEDIA_TIMEOUT, |v| n(v, "offers") > offers).await;
        assert!(n(&v, "offers") > offers, "no offer after unsubscribing: {v}");
        let (frames, seen) = frames_over_quiet(&mut cdp, &subscriber).await;
        assert_eq!(frames, 0, "unsubscribed: {seen}");

        // Subscribed again, then pub mutes its video.
        send(&mut cdp, &subscriber, &subscribe(&[&video_id], true)).await;
        let base = n(&video(&mut cdp, &subscriber).await, "frames");
        let got = video_until(&mut cdp, &subscriber, MEDIA_TIMEOUT, |v| {
            n(v, "frames") >= base + 30
        })
        .await;
        assert!(n(&got, "frames") >= base + 30, "subscribed again: {got}");
        let mute = |on: bool| serde_json::json!({"mute": {"trackId": video_id, "muted": on}});
        send(&mut cdp, &publisher, &mute(true)).await;
        let muted_event = format!("3:{video_id}");
        let v = video_until(&mut cdp, &subscriber, MEDIA_TIMEOUT, |v| {
            v["events"].as_array().is_some_and(|e| e.iter().any(|x| x == &muted_event))
        })
        .await;
        assert!(
            v["events"].as_array().is_some_and(|e| e.iter().any(|x| x == &muted_event)),
            "no KIND_MUTED: {v}"
        );
        let held = shard().rtp_muted;
        let (frames, seen) = frames_over_quiet(&mut cdp, &subscriber).await;
        assert_eq!(frames, 0, "muted: {seen}");
        assert!(shard().rtp_muted > held, "the shard kept the muted video back");

        // Unmuted: the event, then frames again, from a keyframe.
        let keyframes = n(&seen, "keyframes");
        let frames = n(&seen, "frames");
        send(&mut cdp, &publisher, &mute(false)).await;
        let unmuted_event = format!("4:{video_id}");
        let v = video_until(&mut cdp, &subscriber, MEDIA_TIMEOUT, |v| {
            n(v, "frames") >= frames + 10
                && v["events"].as_array().is_some_and(|e| e.iter().any(|x| x == &unmuted_event))
        })
        .await;
        assert!(n(&v, "frames") >= frames + 10, "unmuted: {v}");
        assert!(
            v["events"].as_array().is_some_and(|e| e.iter().any(|x| x == &unmuted_event)),
            "no KIND_UNMUTED: {v}"
        );
        assert!(n(&v, "keyframes") > keyframes, "resumed on a keyframe: {v}");
        assert_eq!(v["errors"], serde_json::json!([]), "{v}");

        // ListParticipants tells how each connection does: sub's transport-wide
        // feedback on what shoal sent it gave an estimate; pub got feedback on what
        // it sent.
        let list = rooms
            .list_participants(ListParticipantsRequest {
                room: ROOM.into(),
                ..ListParticipantsRequest::default()
            })
            .await
            .expect("the participants")
            .into_inner();
        let connection = |who: &str| {
            list.participants
                .iter()
                .find(|p| p.identity == who)
                .and_then(|p| p.connection.clone())
                .unwrap_or_else(|| panic!("no connection stats for {who}: {list:?}"))
        };
        let sub = connection("sub");
        assert!(
            sub.packets_stamped > 0 && sub.feedback_received > 0 && sub.estimated_bps > 0,
            "{sub:?}"
        );
        assert!(connection("pub").feedback_sent > 0, "{:?}", connection("pub"));
    });
}
