//! Interop: an aiortc 1.16 publisher (`scripts/interop/aiortc_video.py publish`)
//! sends generated 320x240 video at 30 fps and a 440 Hz tone into a room over WHIP;
//! once it is connected, an aiortc subscriber (`… subscribe`) asks for the room over
//! WHEP and decodes what shoal forwards: at least 60 video frames at the size sent,
//! in the order sent (each picture carries its frame number), and the tone. Along
//! the way shoal picks the codecs from aiortc's offers, decrypts the publisher's SRTP
//! and re-encrypts it for the subscriber, asks the publisher for a keyframe for the
//! new subscription, and sends receiver reports to the publisher and sender reports
//! to the subscriber for both tracks. aiortc has no transport-wide feedback, so
//! shoal's answer agrees `goog-remb` and abs-send-time for its video, estimates the
//! path from the publisher's send times and sends it REMB, which aiortc's encoder
//! takes as its target. It runs twice: with VP8, and with the publisher's video
//! offer limited to H264 (packetization-mode 1).
//!
//! The Python interpreter is `SHOAL_INTEROP_PYTHON`, else the venv
//! `target/interop-venv` that `scripts/test-all` creates with aiortc.

mod aiortc;
mod grpc_node;

use std::time::Instant;

use aiortc::VideoClient as Client;
use serde_json::{Value, json};

const ROOM: &str = "aiortc-video";
/// Video frames the subscriber must decode (the bar).
const FRAMES: u64 = 60;
use aiortc::{CLIENT_TIMEOUT, MARGIN};
/// One run at a time: each keeps two Python clients encoding and decoding, and
/// their timeouts are meant for a machine that is not also running the other's.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
/// The publisher's tone peaks at 8 000; what comes out of Opus and aiortc's
/// resampling is lower, but far from silence.
const TONE_PEAK_MIN: u64 = 2000;

fn count(v: &Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or(0)
}

/// Publishes with aiortc's video offer limited to `video_codec`, subscribes, and
/// checks what the subscriber decoded and the shard counted.
fn publish_and_watch(video_codec: &str) {
    let _turn = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut node = grpc_node::node_with_room(ROOM);
    let shard = |node: &grpc_node::RoomNode| grpc_node::shard_report(&node.server, 0).shard;

    let whip = format!("http://{}/whip/{ROOM}?identity=camera", node.http);
    let mut publisher = Client::start("publish", &whip, &["--video-codec", video_codec]);
    let up = publisher.next_report(Instant::now() + CLIENT_TIMEOUT + MARGIN, "publisher");
    assert_eq!(up["event"], "connected", "publisher: {up}");
    assert_eq!(
        up["codecs"],
        json!({"video": format!("video/{video_codec}"), "audio": "audio/opus"}),
        "{up}"
    );

    // The publisher is connected, so its tracks are the room's: the subscriber's
    // answer carries them.
    let whep = format!("http://{}/whep/{ROOM}?identity=viewer", node.http);
    let frames = FRAMES.to_string();
    let mut subscriber = Client::start("subscribe", &whep, &["--frames", &frames]);
    let deadline = Instant::now() + CLIENT_TIMEOUT + MARGIN;
    let got = subscriber.next_report(deadline, "subscriber");
    let ok = subscriber.exit_ok(deadline, "the subscriber");
    let counters = shard(&node);
    // Shown with --nocapture, and with a failure.
    println!("publisher: {up}\nsubscriber: {got}\nshard: {counters:?}");
    assert!(ok, "the subscriber failed: {got}\nshard: {counters:?}");
    assert_eq!(got["error"], Value::Null, "{got}");

    assert_eq!(got["codecs"], up["codecs"], "{got}");
    let mut tracks: Vec<&str> = got["tracks"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    tracks.sort_unstable();
    assert_eq!(tracks, ["audio", "video"], "{got}");
    assert!(count(&got, "video_frames") >= FRAMES, "{got}");
    let size = format!("{}x{}", up["width"], up["height"]);
    assert_eq!(got["sizes"], json!([size]), "{got}");
    // Pictures in the order they were sent, and newer ones coming.
    assert_eq!(count(&got, "index_regressions"), 0, "{got}");
    assert!(
        count(&got, "last_index") > count(&got, "first_index"),
        "{got}"
    );
    assert!(count(&got, "audio_frames") >= 1, "{got}");
    assert!(count(&got, "audio_peak") >= TONE_PEAK_MIN, "{got}");
    assert_eq!(got["sender_reports"], json!(["audio", "video"]), "{got}");

    assert_eq!(counters.srtp_unprotect_failed, 0, "{counters:?}");
    assert_eq!(counters.media_malformed, 0, "{counters:?}");
    assert_eq!(counters.rtp_unknown_ssrc, 0, "{counters:?}");
    assert!(counters.rtp_forwarded >= FRAMES, "{counters:?}");
    assert!(counters.keyframe_requests_sent >= 1, "{counters:?}");

    // No transport-cc from aiortc: shoal agreed REMB and the send time it runs on,
    // and sends REMB once a second at least.
    let feedback: Vec<&str> = up["feedback"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        feedback.iter().any(|l| l.ends_with(" goog-remb")),
        "shoal's answer agrees goog-remb: {up}"
    );
    assert!(
        feedback
            .iter()
            .any(|l| l.ends_with(" http://www.webrtc.org/experiments/rtp-hdrext/abs-send-time")),
        "shoal's answer agrees abs-send-time: {up}"
    );
    assert!(
        !feedback.iter().any(|l| l.ends_with(" transport-cc")),
        "{up}"
    );
    assert!(counters.remb_sent >= 1, "{counters:?}");

    // shoal reports to the publisher too.
    let reports = publisher.next_report(Instant::now() + CLIENT_TIMEOUT, "publisher");
    assert_eq!(reports["event"], "receiver_reports", "publisher: {reports}");

    publisher.close_stdin();
    let done = publisher.next_report(Instant::now() + MARGIN, "publisher");
    println!("publisher: {done}");
    assert_eq!(done["event"], "done", "publisher: {done}");
    assert_eq!(done["connection"], "connected", "publisher: {done}");
    // aiortc's encoder starts at its default and takes a REMB that names its stream
    // as its target, clamped to its range (VP8: 500 kbit/s, 250 kbit/s - 1.5 Mbit/s;
    // H.264: 1 Mbit/s, 500 kbit/s - 3 Mbit/s); shoal's first REMB is 1.5 times what
    // it measured arriving, far below either default on this small picture.
    let (default, range) = match video_codec {
        "VP8" => (500_000, 250_000..=1_500_000),
        _ => (1_000_000, 500_000..=3_000_000),
    };
    let target = count(&done, "video_target_bitrate");
    assert!(
        target != default && range.contains(&target),
        "aiortc's encoder follows shoal's REMB: {done}"
    );
    assert!(
        publisher.exit_ok(Instant::now() + MARGIN, "the publisher"),
        "the publisher failed: {done}"
    );

    // Both left by DELETE.
    grpc_node::wait_until_empty(&mut node, ROOM);
}

#[test]
fn interop_aiortc_video() {
    publish_and_watch("VP8");
}

#[test]
fn interop_aiortc_video_h264() {
    publish_and_watch("H264");
}
