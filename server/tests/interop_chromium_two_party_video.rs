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
mod video_page;

use std::time::{Duration, Instant};

use chromium::{attach, devtools, launch, open_page};
use video_page::{count, join_and_connect, join_script, stats_until, tracks_of};

const ROOM: &str = "video-room";
/// Frames each page must decode of the other's video (the bar).
const FRAMES: u64 = 60;
/// How long the pages have, from the second joining.
const MEDIA_TIMEOUT: Duration = Duration::from_secs(10);
/// How long joining may take.
const JOIN_TIMEOUT: Duration = Duration::from_secs(20);

#[test]
fn interop_chromium_two_party_video() {
    let grpc_node::RoomNode {
        server,
        http,
        runtime,
        mut rooms,
        control: _control,
    } = grpc_node::node_with_room(ROOM);
    let page = format!("http://{http}/");
    let browser = launch(&page);
    runtime.block_on(async {
        let mut cdp = devtools(&browser).await;
        let alice = attach(&mut cdp, &page).await;
        let bob = open_page(&mut cdp, &page).await;
        // Alice's connection first, so Bob's answer can carry her tracks.
        join_and_connect(
            &mut cdp,
            &alice,
            ROOM,
            "alice",
            Instant::now() + JOIN_TIMEOUT,
        )
        .await;
        let joined = cdp.evaluate(&bob, &join_script(ROOM, "bob")).await;
        assert_eq!(joined, "joined");

        let deadline = Instant::now() + MEDIA_TIMEOUT + JOIN_TIMEOUT;
        let stats = stats_until(&mut cdp, &[&alice, &bob], deadline, |v| {
            count(v, "framesDecoded") >= FRAMES && count(v, "audioPackets") > 0
        })
        .await;
        let (a, b) = (&stats[0], &stats[1]);
        let report = server.command_sender(0).and_then(|s| s.stats().ok());
        for (who, v) in [("alice", a), ("bob", b)] {
            assert!(
                count(v, "framesDecoded") >= FRAMES && count(v, "audioPackets") > 0,
                "{who} did not get the other's media: {v}\nshard: {:?}",
                report.as_ref().map(|r| &r.shard)
            );
            assert_eq!(v["state"]["errors"], serde_json::json!([]), "{who}: {v}");
        }
        // Alice heard of Bob's tracks through an offer from shoal.
        assert!(count(&a["state"], "offers") >= 1, "{a}");
        // RoomService lists what each participant publishes.
        let listed = grpc_node::list_participants(&mut rooms, ROOM).await;
        assert_eq!(tracks_of(a, &listed), ["audio/bob", "video/bob"]);
        assert_eq!(tracks_of(b, &listed), ["audio/alice", "video/alice"]);
        for p in &listed {
            let mut mimes: Vec<&str> = p.tracks.iter().map(|t| t.mime_type.as_str()).collect();
            mimes.sort_unstable();
            assert_eq!(
                mimes,
                ["audio/opus", "video/VP8"],
                "{}: {:?}",
                p.identity,
                p.tracks
            );
            // One stream per publisher, named at random (a token, RFC 8830 §2), not
            // by its identity.
            let stream = &p.tracks[0].stream_id;
            assert!(p.tracks.iter().all(|t| &t.stream_id == stream), "{p:?}");
            assert!(stream.len() == 32 && stream.bytes().all(|b| b.is_ascii_hexdigit()));
        }
        assert_eq!(listed.len(), 2);
        assert_ne!(listed[0].tracks[0].stream_id, listed[1].tracks[0].stream_id);
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
