//! Reachable behind a 1:1 NAT, as on a cloud VM: shoal runs in namespace `sfu`,
//! bound to its private address 10.77.1.2 only, behind a `router` namespace that maps
//! the "public" address 203.0.113.10 to it one to one (nftables dnat/snat), and is
//! started with `--announce 203.0.113.10`. Two headless Chromiums, each in a client
//! namespace that reaches only the router's public side, load the demo page from the
//! public address: the one in `client-a` publishes its fake camera and microphone
//! over WHIP, the one in `client-b` plays the room over WHEP and decodes at least 60
//! video frames and receives audio. Every candidate and `c=` line of both answers
//! carries the public address (no loopback, private or unspecified one), and both
//! browsers' selected pairs lead there.
//!
//! Needs root, iproute2, nftables and `/usr/bin/chromium` (`scripts/test-all`
//! installs them); see `lab` for how it skips elsewhere.

mod chromium;
mod grpc_node;
mod lab;
mod lab_node;
mod whip_page;

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use chromium::launch_in;
use lab_node::{Page, start_in};
use whip_page::{STATS, play_script, publish_script, sdp_addresses, sdp_candidates};

const ROOM: &str = "nat";
/// What the NAT maps to shoal, and what shoal announces.
const PUBLIC: &str = "203.0.113.10";
/// shoal's own address, behind the NAT.
const PRIVATE: &str = "10.77.1.2";
const UDP_PORT: u16 = 7100;
const HTTP_PORT: u16 = 8080;
/// Frames the player must decode (the bar).
const FRAMES: u64 = 60;
/// How long the player has to get them once connected.
const MEDIA_TIMEOUT: Duration = Duration::from_secs(20);

#[test]
fn netns_browser_via_announced_address() {
    let Some(mut lab) = lab::Lab::new("nat") else {
        return;
    };
    let sfu = lab.namespace("sfu");
    let router = lab.namespace("router");
    let client_a = lab.namespace("client-a");
    let client_b = lab.namespace("client-b");
    lab.link(
        &sfu,
        "eth0",
        &["10.77.1.2/24"],
        &router,
        "priv0",
        &["10.77.1.1/24"],
    );
    lab.link(
        &router,
        "pub-a",
        &["198.51.100.1/26"],
        &client_a,
        "eth0",
        &["198.51.100.2/26"],
    );
    lab.link(
        &router,
        "pub-b",
        &["198.51.100.65/26"],
        &client_b,
        "eth0",
        &["198.51.100.66/26"],
    );
    lab.ip(&sfu, &["route", "add", "default", "via", "10.77.1.1"]);
    lab.ip(
        &client_a,
        &["route", "add", "default", "via", "198.51.100.1"],
    );
    lab.ip(
        &client_b,
        &["route", "add", "default", "via", "198.51.100.65"],
    );
    lab.one_to_one_nat(&router, PUBLIC, PRIVATE);

    let (server, control) = start_in(
        &sfu,
        &[
            "--shards=1",
            &format!("--bind={PRIVATE}"),
            &format!("--announce={PUBLIC}"),
            &format!("--udp-port-base={UDP_PORT}"),
            &format!("--http-addr={PRIVATE}:{HTTP_PORT}"),
            "--grpc-addr=127.0.0.1:7071",
        ],
        ROOM,
    );
    let public: IpAddr = PUBLIC.parse().expect("an address");
    assert_eq!(
        server.candidates(0),
        Some(&[SocketAddr::new(public, UDP_PORT)][..])
    );
    assert_eq!(
        server.bound_addrs(0),
        Some(
            &[SocketAddr::new(
                PRIVATE.parse().expect("an address"),
                UDP_PORT
            )][..]
        )
    );

    let page = format!("http://{PUBLIC}:{HTTP_PORT}/");
    // The public address is plain HTTP, which getUserMedia refuses unless told.
    let secure = format!("--unsafely-treat-insecure-origin-as-secure=http://{PUBLIC}:{HTTP_PORT}");
    let camera = launch_in(Some(&client_a), &page, &[&secure]);
    let viewer = launch_in(Some(&client_b), &page, &[&secure]);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let mut a = Page::open(&lab, &client_a, &camera, &page).await;
        let mut b = Page::open(&lab, &client_b, &viewer, &page).await;
        let published = a.eval(&publish_script(ROOM, "camera")).await;
        let played = b.eval(&play_script(ROOM, "viewer")).await;

        for (who, answer) in [("publisher", &published), ("player", &played)] {
            let answer = answer.as_str().unwrap_or_default();
            let (candidates, connections) = sdp_addresses(answer);
            assert!(!candidates.is_empty(), "{who}: no candidate in\n{answer}");
            for (addr, port) in &candidates {
                assert_eq!(
                    (addr.as_str(), *port),
                    (PUBLIC, UDP_PORT),
                    "{who}:\n{answer}"
                );
            }
            // The passive TCP candidates (ICE-TCP) carry the public address too.
            let (tcp, _) = sdp_candidates(answer, "tcp");
            assert!(!tcp.is_empty(), "{who}: no TCP candidate in\n{answer}");
            for (addr, port) in &tcp {
                assert_eq!(
                    (addr.as_str(), *port),
                    (PUBLIC, UDP_PORT + 100),
                    "{who}:\n{answer}"
                );
            }
            assert!(!connections.is_empty(), "{who}: no c= line in\n{answer}");
            for c in &connections {
                assert_eq!(c, PUBLIC, "{who}:\n{answer}");
            }
        }

        let got = b.media(FRAMES, true, MEDIA_TIMEOUT).await;
        let sent = a.eval(STATS).await;
        let shard = server.command_sender(0).and_then(|s| s.stats().ok());
        let report = format!("player: {got}\npublisher: {sent}\nshard: {shard:?}");
        assert!(
            got["framesDecoded"].as_u64().unwrap_or(0) >= FRAMES,
            "{report}"
        );
        assert!(got["audioPackets"].as_u64().unwrap_or(0) > 0, "{report}");
        assert_eq!(
            got["tracks"],
            serde_json::json!(["audio", "video"]),
            "{report}"
        );
        let reached = format!("{PUBLIC} {UDP_PORT}");
        assert_eq!(got["remote"], serde_json::json!(reached), "{report}");
        assert_eq!(sent["remote"], serde_json::json!(reached), "{report}");
        let shard = shard.expect("the shard reports").shard;
        assert_eq!(shard.srtp_unprotect_failed, 0, "{report}");
    });
    drop(camera);
    drop(viewer);
    drop(control);
    drop(server);
}
