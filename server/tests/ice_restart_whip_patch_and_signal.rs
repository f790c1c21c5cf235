//! ICE restarts from Chromium (RFC 8445 §9): shoal runs in namespace `sfu`; a
//! Chromium in `client-a` publishes its camera over WHIP, one in `client-b` joins
//! over `/signal` and plays it.
//! - The publisher restarts over WHIP PATCH (`restartIce()`, a trickle-ice-sdpfrag
//!   with new credentials and `If-Match: "*"`, RFC 9725 §4.3): 200 with shoal's new
//!   credentials and a new ETag; the player keeps decoding within 2 s.
//! - The player restarts over `/signal` (`restartIce()`, a new offer): its own
//!   decoding goes on within 2 s.
//! - The publisher's network changes address (its veth is readdressed, as a
//!   laptop moving between networks) and it restarts over PATCH again: shoal moves
//!   the session to the new source address and the player decodes again within 5 s.
//!
//! No second DTLS handshake happens (`dtls_connected` stays 2) and each restart
//! completes on shoal's side (`ice_restarts_completed` 3).
//!
//! Needs root, iproute2, nftables and `/usr/bin/chromium` (`scripts/test-all`
//! installs them); see `lab` for how it skips elsewhere.

mod chromium;
mod grpc_node;
mod lab;
mod lab_node;
mod video_page;
mod whip_page;

use std::time::{Duration, Instant};

use chromium::launch_in;
use lab_node::{Page, Star, page_url, secure_origin_flag, star, start_sfu};
use whip_page::{RESTART_OVER_PATCH, STATS, publish_script};

const ROOM: &str = "restart";
/// How soon media must go on after a restart on an unchanged network.
const SAME_NETWORK: Duration = Duration::from_secs(2);
/// How soon media must come back after the publisher's address changed.
const NEW_ADDRESS: Duration = Duration::from_secs(5);

#[test]
fn ice_restart_whip_patch_and_signal() {
    let Some(mut lab) = lab::Lab::new("restart") else {
        return;
    };
    let Star {
        sfu,
        client_a,
        client_b,
        ..
    } = star(&mut lab, &[]);
    let (server, control) = start_sfu(&sfu, ROOM, &[]);
    let shard = || {
        server
            .command_sender(0)
            .and_then(|s| s.stats().ok())
            .expect("the shard reports")
            .shard
    };

    let page = page_url();
    let secure = secure_origin_flag();
    let camera = launch_in(Some(&client_a), &page, &[&secure]);
    let viewer = launch_in(Some(&client_b), &page, &[&secure]);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let mut a = Page::open(&lab, &client_a, &camera, &page).await;
        a.eval(&publish_script(ROOM, "camera")).await;
        let first_etag = a.eval("window.shoal.etag").await;
        assert!(
            first_etag.as_str().is_some_and(|t| t.starts_with('"')),
            "a strong ETag in the 201: {first_etag}"
        );
        let mut b = Page::open(&lab, &client_b, &viewer, &page).await;
        let joined = b.eval(&video_page::join_script(ROOM, "player")).await;
        assert_eq!(joined, "joined");
        let got = b.media(30, false, Duration::from_secs(20)).await;
        assert!(got["framesDecoded"].as_u64().unwrap_or(0) >= 30, "{got}");
        let before = shard();
        assert_eq!(before.dtls_connected, 2, "{before:?}");

        // 1. The publisher restarts over PATCH.
        let etag = a.eval(RESTART_OVER_PATCH).await;
        assert!(etag.as_str().is_some_and(|t| t.starts_with('"')), "{etag}");
        assert_ne!(etag, first_etag, "a new ICE session, a new entity-tag");
        keeps_decoding(&mut b, SAME_NETWORK, "after the WHIP restart").await;

        // 2. The player restarts over /signal.
        let restarted = b.eval("window.shoal.restart()").await;
        assert_eq!(restarted, "restarted");
        keeps_decoding(&mut b, SAME_NETWORK, "after the /signal restart").await;

        // 3. The publisher's address changes; it restarts over PATCH.
        lab.ip(
            &client_a,
            &["addr", "del", "198.51.100.2/26", "dev", "eth0"],
        );
        lab.ip(
            &client_a,
            &["addr", "add", "198.51.100.3/26", "dev", "eth0"],
        );
        lab.ip(
            &client_a,
            &["route", "replace", "default", "via", "198.51.100.1"],
        );
        // Chromium notices the new address before it gathers again.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let moved_at = Instant::now();
        a.eval(RESTART_OVER_PATCH).await;
        keeps_decoding(
            &mut b,
            NEW_ADDRESS.saturating_sub(moved_at.elapsed()),
            "after the move",
        )
        .await;
        let sent = a.eval(STATS).await;
        assert_eq!(
            sent["local"], "198.51.100.3",
            "the publisher's new address: {sent}"
        );

        let after = shard();
        assert_eq!(
            after.dtls_connected, 2,
            "no second DTLS handshake: {after:?}"
        );
        assert_eq!(after.ice_restarts, 3, "{after:?}");
        assert_eq!(after.ice_restarts_completed, 3, "{after:?}");
        assert_eq!(after.srtp_unprotect_failed, 0, "{after:?}");
    });
    drop(camera);
    drop(viewer);
    drop(control);
    drop(server);
}

/// Waits at most `within` for the page's decoded frames to grow by 10 from now.
async fn keeps_decoding(page: &mut Page, within: Duration, what: &str) {
    let start = page.eval(STATS).await["framesDecoded"]
        .as_u64()
        .unwrap_or(0);
    let got = page.media(start + 10, false, within).await;
    assert!(
        got["framesDecoded"].as_u64().unwrap_or(0) >= start + 10,
        "no new frames within {within:?} {what}: {got} (from {start})"
    );
}
