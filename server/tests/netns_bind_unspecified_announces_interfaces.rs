//! A wildcard bind on a host with two networks: the `shoal` binary runs in namespace
//! `sfu`, which has an interface on network A (10.1.0.1, fd00:a::1) and one on
//! network B (10.2.0.1, fd00:b::1), started with `--bind 0.0.0.0 --bind ::`. It
//! prints that it announces exactly those four addresses on its port (not 0.0.0.0,
//! `::`, loopback or link-local), IPv6 first as RFC 8421 §4 has it, and the answers
//! carry exactly them. A headless Chromium in `client-a` (network A only) publishes
//! over WHIP and one in `client-b` (network B only) plays over WHEP: both connect,
//! each through an address of its own network, and the player decodes the
//! publisher's video.
//!
//! Needs root, iproute2, nftables and `/usr/bin/chromium` (`scripts/test-all`
//! installs them); see `lab` for how it skips elsewhere.

mod chromium;
mod grpc_node;
mod lab;
mod lab_node;
mod whip_page;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use chromium::launch_in;
use lab_node::{Page, create_room_in};
use whip_page::{STATS, play_script, publish_script, sdp_addresses};

const SHOAL: &str = env!("CARGO_BIN_EXE_shoal");
const ROOM: &str = "two-networks";
const UDP_PORT: u16 = 7100;
const HTTP_PORT: u16 = 8080;
/// Frames the player must decode.
const FRAMES: u64 = 60;
/// How long shoal may take to start, and the player to get its frames.
const TIMEOUT: Duration = Duration::from_secs(20);

/// The lines shoal prints at start-up, up to the HTTP address.
fn start_up_lines(lines: &mpsc::Receiver<String>) -> Vec<String> {
    let deadline = Instant::now() + TIMEOUT;
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = lines
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("shoal did not finish starting: {seen:#?}"));
        let done = line.starts_with("shoal: http ");
        seen.push(line);
        if done {
            return seen;
        }
    }
}

/// The addresses after `prefix` in one of `lines`.
fn addresses(lines: &[String], prefix: &str) -> Vec<SocketAddr> {
    let line = lines
        .iter()
        .find_map(|l| l.strip_prefix(prefix))
        .unwrap_or_else(|| panic!("no {prefix:?} line in {lines:#?}"));
    line.split_whitespace()
        .map(|a| a.parse().expect("a socket address"))
        .collect()
}

#[test]
fn netns_bind_unspecified_announces_interfaces() {
    let Some(mut lab) = lab::Lab::new("any") else {
        return;
    };
    let sfu = lab.namespace("sfu");
    let client_a = lab.namespace("client-a");
    let client_b = lab.namespace("client-b");
    let nets = [
        (
            &client_a,
            "lan-a",
            ["10.1.0.1/24", "fd00:a::1/64"],
            ["10.1.0.2/24", "fd00:a::2/64"],
        ),
        (
            &client_b,
            "lan-b",
            ["10.2.0.1/24", "fd00:b::1/64"],
            ["10.2.0.2/24", "fd00:b::2/64"],
        ),
    ];
    // No routes beyond each client's own network: an address of the other network
    // would reach shoal too (Linux accepts any of its addresses on any interface),
    // and each client must get through on its own network's.
    for (client, lan, sfu_addrs, client_addrs) in &nets {
        lab.link(&sfu, lan, sfu_addrs, client, "eth0", client_addrs);
    }

    let udp_base = UDP_PORT.to_string();
    let http = format!("0.0.0.0:{HTTP_PORT}");
    let child = lab.spawn(
        &sfu,
        SHOAL,
        &[
            "--shards",
            "1",
            "--bind",
            "0.0.0.0",
            "--bind",
            "::",
            "--udp-port-base",
            &udp_base,
            "--http-addr",
            &http,
            "--grpc-addr",
            "127.0.0.1:7071",
            // The lab's private networks, no API key: open on purpose.
            "--insecure-open",
        ],
    );
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let printed = start_up_lines(&lines);
    let bound = addresses(&printed, "shoal: shard 0 udp ");
    assert_eq!(
        bound,
        [
            SocketAddr::from(([0, 0, 0, 0], UDP_PORT)),
            format!("[::]:{UDP_PORT}").parse().expect("an address"),
        ],
        "{printed:#?}"
    );
    let announced = addresses(&printed, "shoal: shard 0 announces ");
    let expected: BTreeSet<SocketAddr> = ["10.1.0.1", "10.2.0.1", "[fd00:a::1]", "[fd00:b::1]"]
        .iter()
        .map(|ip| format!("{ip}:{UDP_PORT}").parse().expect("an address"))
        .collect();
    assert_eq!(
        announced.iter().copied().collect::<BTreeSet<_>>(),
        expected,
        "{printed:#?}"
    );
    assert_eq!(announced.len(), 4, "each once: {printed:#?}");
    // RFC 8421 §4's head start, (2 + 2) / 2 = 2 IPv6 addresses, then IPv4.
    let families: Vec<bool> = announced.iter().map(SocketAddr::is_ipv6).collect();
    assert_eq!(families, [true, true, false, false], "{printed:#?}");

    create_room_in(&sfu, SocketAddr::from(([127, 0, 0, 1], 7071)), ROOM);

    let page_a = format!("http://10.1.0.1:{HTTP_PORT}/");
    let page_b = format!("http://10.2.0.1:{HTTP_PORT}/");
    let secure = format!("--unsafely-treat-insecure-origin-as-secure={page_a}");
    let camera = launch_in(Some(&client_a), &page_a, &[secure.trim_end_matches('/')]);
    let viewer = launch_in(Some(&client_b), &page_b, &[]);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let mut a = Page::open(&lab, &client_a, &camera, &page_a).await;
        let mut b = Page::open(&lab, &client_b, &viewer, &page_b).await;
        let published = a.eval(&publish_script(ROOM, "camera")).await;
        let played = b.eval(&play_script(ROOM, "viewer")).await;

        for (who, answer) in [("publisher", &published), ("player", &played)] {
            let answer = answer.as_str().unwrap_or_default();
            let (candidates, _) = sdp_addresses(answer);
            let in_answer: Vec<SocketAddr> = candidates
                .iter()
                .map(|(ip, port)| {
                    let ip: std::net::IpAddr = ip.parse().expect("an IP address");
                    SocketAddr::new(ip, *port)
                })
                .collect();
            // Every accepted section carries the same candidates, in the same order.
            assert!(!in_answer.is_empty(), "{who}:\n{answer}");
            assert_eq!(in_answer.len() % announced.len(), 0, "{who}:\n{answer}");
            for section in in_answer.chunks(announced.len()) {
                assert_eq!(section, announced, "{who}:\n{answer}");
            }
        }

        let got = b.media(FRAMES, false, TIMEOUT).await;
        let sent = a.eval(STATS).await;
        let report = format!("player: {got}\npublisher: {sent}");
        println!("{report}");
        assert!(
            got["framesDecoded"].as_u64().unwrap_or(0) >= FRAMES,
            "{report}"
        );
        // Each through its own network's address of shoal.
        let remote = |v: &serde_json::Value| {
            let text = v["remote"].as_str().unwrap_or_default().to_owned();
            text.split_whitespace()
                .next()
                .unwrap_or_default()
                .to_owned()
        };
        assert!(
            ["10.1.0.1", "fd00:a::1"].contains(&remote(&sent).as_str()),
            "{report}"
        );
        assert!(
            ["10.2.0.1", "fd00:b::1"].contains(&remote(&got).as_str()),
            "{report}"
        );
    });
    drop(camera);
    drop(viewer);
}
