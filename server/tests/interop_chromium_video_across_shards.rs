//! Interop: two headless Chromium pages in one room on a two-shard node that holds
//! one participant per shard, so each page's connection lives on a different shard:
//! each decodes the other's video and receives its audio, through the mirror of the
//! other's tracks on its own shard (one crossbeam hop per batch of packets, keyframe
//! requests back to the publisher's shard).
//!
//! Needs `/usr/bin/chromium` (`scripts/test-all` installs it).

mod chromium;
mod grpc_node;
mod video_page;

use std::time::{Duration, Instant};

use chromium::{attach, devtools, launch, open_page};
use video_page::{count, join_and_connect, join_script, stats_until, tracks_of};

const ROOM: &str = "split-video-room";
const FRAMES: u64 = 60;
const TIMEOUT: Duration = Duration::from_secs(30);

#[test]
fn interop_chromium_video_across_shards() {
    let grpc_node::RoomNode {
        server,
        http,
        runtime,
        mut rooms,
        control: _control,
    } = grpc_node::node_with_split_room(ROOM);
    let page = format!("http://{http}/");
    let browser = launch(&page);
    runtime.block_on(async {
        let mut cdp = devtools(&browser).await;
        let alice = attach(&mut cdp, &page).await;
        let bob = open_page(&mut cdp, &page).await;
        join_and_connect(&mut cdp, &alice, ROOM, "alice", Instant::now() + TIMEOUT).await;
        assert_eq!(
            cdp.evaluate(&bob, &join_script(ROOM, "bob")).await,
            "joined"
        );
        let stats = stats_until(&mut cdp, &[&alice, &bob], Instant::now() + TIMEOUT, |v| {
            count(v, "framesDecoded") >= FRAMES && count(v, "audioPackets") > 0
        })
        .await;
        let (a, b) = (&stats[0], &stats[1]);
        let reports: Vec<_> = (0..2)
            .filter_map(|i| server.command_sender(i).and_then(|s| s.stats().ok()))
            .collect();
        // One participant on each shard.
        assert_eq!(reports.len(), 2);
        for (who, v) in [("alice", a), ("bob", b)] {
            assert!(
                count(v, "framesDecoded") >= FRAMES && count(v, "audioPackets") > 0,
                "{who} did not get the other's media across shards: {v}\nshards: {:?}",
                reports.iter().map(|r| &r.shard).collect::<Vec<_>>()
            );
        }
        let listed = grpc_node::list_participants(&mut rooms, ROOM).await;
        assert_eq!(tracks_of(a, &listed), ["audio/bob", "video/bob"]);
        assert_eq!(tracks_of(b, &listed), ["audio/alice", "video/alice"]);
        for r in &reports {
            assert!(r.shard.rtp_received > 0, "{:?}", r.shard);
            assert!(r.shard.rtp_forwarded > 0, "{:?}", r.shard);
        }
    });
    drop(browser);
}
