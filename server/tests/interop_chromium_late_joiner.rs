//! Interop: a third headless Chromium page joins a room where two are already in a
//! video call through shoal. The newcomer receives both existing videos and audios
//! (one pair in the sections of its own offer, the other through the offer shoal
//! sends it right after), and the first two receive the newcomer's tracks through
//! renegotiation, each decoding video from both others: checked from the pages'
//! getStats() and `ontrack` stream ids.
//!
//! Needs `/usr/bin/chromium` (`scripts/test-all` installs it).

mod chromium;
mod grpc_node;
mod video_page;

use std::time::{Duration, Instant};

use chromium::{attach, devtools, launch, open_page, poll};
use video_page::{
    STATS, count, join_and_connect, join_script, stats_until, tracks_of, videos_decoding,
};

const ROOM: &str = "late-room";
/// Frames each incoming video must decode.
const FRAMES: u64 = 60;
/// How long media may take once everyone joined (the bar is 10 s; joining
/// and renegotiating come on top).
const MEDIA_TIMEOUT: Duration = Duration::from_secs(20);
const JOIN_TIMEOUT: Duration = Duration::from_secs(20);

#[test]
fn interop_chromium_late_joiner() {
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
        let pages = [
            attach(&mut cdp, &page).await,
            open_page(&mut cdp, &page).await,
            open_page(&mut cdp, &page).await,
        ];
        let names = ["alice", "bob", "carol"];
        // Alice and Bob first, and their call running.
        for (session, name) in pages.iter().zip(names).take(2) {
            join_and_connect(&mut cdp, session, ROOM, name, Instant::now() + JOIN_TIMEOUT).await;
        }
        let deadline = Instant::now() + MEDIA_TIMEOUT;
        for session in &pages[..2] {
            poll(
                &mut cdp,
                session,
                &format!(
                    "(async () => {{ const r = await {STATS}; return r.framesDecoded >= {FRAMES} ? r : null; }})()"
                ),
                deadline,
            )
            .await;
        }

        // Carol joins late.
        let joined = cdp.evaluate(&pages[2], &join_script(ROOM, "carol")).await;
        assert_eq!(joined, "joined");
        let deadline = Instant::now() + MEDIA_TIMEOUT + JOIN_TIMEOUT;
        let sessions: Vec<&str> = pages.iter().map(String::as_str).collect();
        let stats = stats_until(&mut cdp, &sessions, deadline, |v| {
            videos_decoding(v, FRAMES) == 2 && count(v, "audioStreams") == 2
        })
        .await;
        let report = server.command_sender(0).and_then(|s| s.stats().ok());
        for (name, v) in names.iter().zip(&stats) {
            assert_eq!(
                videos_decoding(v, FRAMES),
                2,
                "{name} should decode both others' video: {v}\nshard: {:?}",
                report.as_ref().map(|r| &r.shard)
            );
            assert_eq!(count(v, "audioStreams"), 2, "{name}: {v}");
            assert_eq!(v["state"]["errors"], serde_json::json!([]), "{name}: {v}");
        }
        let listed = grpc_node::list_participants(&mut rooms, ROOM).await;
        assert_eq!(
            tracks_of(&stats[2], &listed),
            ["audio/alice", "audio/bob", "video/alice", "video/bob"]
        );
        assert_eq!(
            tracks_of(&stats[0], &listed),
            ["audio/bob", "audio/carol", "video/bob", "video/carol"]
        );
        assert_eq!(
            tracks_of(&stats[1], &listed),
            ["audio/alice", "audio/carol", "video/alice", "video/carol"]
        );
        // Carol got the tracks her own sections could not hold through shoal's offer.
        assert!(count(&stats[2]["state"], "offers") >= 1, "{}", stats[2]);
    });
    drop(browser);
}
