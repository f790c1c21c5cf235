//! TURN for clients: a real coturn (Debian's) runs in namespace `turn` with a TURN
//! REST shared secret (`use-auth-secret`); shoal runs in namespace `sfu` with
//! `--ice-server turn:…` and the same `--turn-secret`, and mints each client its
//! own credentials. A router namespace joins them to two client namespaces:
//! - `client-a` publishes the fake camera over WHIP, directly;
//! - `client-b` cannot reach shoal over UDP at all (its nftables drop every
//!   datagram to or from shoal's address), only coturn. Two pages there connect
//!   with `iceTransportPolicy: "relay"`: one plays over WHEP with the servers of the
//!   POST's `Link` headers (RFC 9725 §4.6), one joins over `/signal` with the join
//!   response's `iceServers`. Both decode the camera's video through coturn.
//!
//! Checked: the Link headers and `iceServers` carry the TURN URI and REST
//! credentials of each client's own (`EXPIRY:PEER-ID`, HMAC-SHA1 in base64);
//! each relayed page's selected pair is relay → shoal's address; coturn's log shows
//! an allocation for each relayed client's username.
//!
//! Needs root, iproute2, nftables, coturn and `/usr/bin/chromium`
//! (`scripts/test-all` installs them); see `lab` for how it skips elsewhere.

mod chromium;
mod grpc_node;
mod lab;
mod lab_node;
mod video_page;
mod whip_page;

use std::io::{BufRead, BufReader};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use chromium::launch_in;
use lab::Spoke;
use lab_node::{Page, SFU, Star, UDP_PORT, page_url, secure_origin_flag, star, start_sfu};
use ring::hmac;
use whip_page::{Path, play_script_via, publish_script};

const ROOM: &str = "relayed";
/// coturn's address, where it listens and relays from.
const TURN: &str = "192.0.2.2";
const TURN_PORT: u16 = 3478;
const SECRET: &str = "lab-shared-secret";
/// Frames each relayed page must decode.
const FRAMES: u64 = 60;
const MEDIA_TIMEOUT: Duration = Duration::from_secs(25);
/// How long coturn may take to open its listener.
const TURN_START: Duration = Duration::from_secs(10);

#[test]
fn netns_turn_relay_coturn() {
    let Some(mut lab) = lab::Lab::new("turn") else {
        return;
    };
    let turn = lab.namespace("turn");
    let Star {
        sfu,
        client_a,
        client_b,
        ..
    } = star(
        &mut lab,
        &[Spoke {
            ns: &turn,
            side: "to-turn",
            inside: "192.0.2.2/24",
            outside: "192.0.2.1/24",
            gateway: "192.0.2.1",
        }],
    );
    // client-b reaches shoal over TCP (its page) but never over UDP.
    lab.nft(
        &client_b,
        &format!(
            "table ip shoal_no_sfu_udp {{\n\
             \tchain output {{ type filter hook output priority filter; ip daddr {SFU} meta l4proto udp drop; }}\n\
             \tchain input {{ type filter hook input priority filter; ip saddr {SFU} meta l4proto udp drop; }}\n\
             }}\n"
        ),
    );

    let coturn_dir = std::env::temp_dir().join(format!("shoal-coturn-{}", std::process::id()));
    std::fs::create_dir_all(&coturn_dir).expect("a directory for coturn");
    let coturn_log = start_coturn(&mut lab, &turn, &coturn_dir);

    let turn_uri = format!("turn:{TURN}:{TURN_PORT}?transport=udp");
    let (server, control) = start_sfu(
        &sfu,
        ROOM,
        &[
            &format!("--ice-server={turn_uri}"),
            &format!("--turn-secret={SECRET}"),
            "--turn-ttl=600",
        ],
    );

    let page = page_url();
    let secure = secure_origin_flag();
    let camera = launch_in(Some(&client_a), &page, &[&secure]);
    let viewers = launch_in(Some(&client_b), &page, &[&secure]);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let started = SystemTime::now();
    runtime.block_on(async {
        let mut a = Page::open(&lab, &client_a, &camera, &page).await;
        a.eval(&publish_script(ROOM, "camera")).await;
        // The publisher, too, was handed the server with its own credentials.
        let links = a.eval("window.shoal.links").await;
        check_link(links.as_str().unwrap_or_default(), &turn_uri, started);

        let mut whep = Page::open(&lab, &client_b, &viewers, &page).await;
        let answer = whep
            .eval(&play_script_via(ROOM, "whep-viewer", Path::RelayFromLinks))
            .await;
        assert!(
            answer.as_str().is_some_and(|a| a.starts_with("v=0")),
            "{answer}"
        );
        let links = whep.eval("window.shoal.links").await;
        let whep_user = check_link(links.as_str().unwrap_or_default(), &turn_uri, started);

        let mut signal = Page::open(&lab, &client_b, &viewers, &page).await;
        let joined = signal
            .eval(&video_page::join_script_with(ROOM, "signal-viewer", true))
            .await;
        assert_eq!(joined, "joined");
        let given = signal.eval("window.shoal.state.iceServers").await;
        assert_eq!(given[0]["urls"], serde_json::json!([turn_uri]), "{given}");
        let signal_user = given[0]["username"].as_str().unwrap_or_default().to_owned();
        check_credentials(
            &signal_user,
            given[0]["credential"].as_str().unwrap_or_default(),
            started,
        );
        assert_ne!(signal_user, whep_user, "each client its own credentials");

        for (who, page) in [("WHEP", &mut whep), ("/signal", &mut signal)] {
            let got = page.media(FRAMES, false, MEDIA_TIMEOUT).await;
            let shard = server.command_sender(0).and_then(|s| s.stats().ok());
            let report = format!(
                "{who}: {got}\nshard: {shard:?}\ncoturn:\n{}",
                tail(&coturn_log)
            );
            assert!(
                got["framesDecoded"].as_u64().unwrap_or(0) >= FRAMES,
                "{report}"
            );
            // Relayed, to shoal's address: nothing else was possible.
            assert_eq!(got["localType"], "relay", "{report}");
            assert_eq!(
                got["remote"],
                serde_json::json!(format!("{SFU} {UDP_PORT}")),
                "{report}"
            );
        }
        // coturn allocated for both relayed clients, with shoal's credentials.
        let log = coturn_log.lock().expect("the log").join("\n");
        for user in [&whep_user, &signal_user] {
            assert!(
                log.lines().any(|l| l.contains(user.as_str())
                    && l.contains("ALLOCATE processed, success")),
                "no allocation for {user} in coturn's log:\n{log}"
            );
        }
    });
    let report = server
        .command_sender(0)
        .and_then(|s| s.stats().ok())
        .expect("the shard reports");
    assert_eq!(report.shard.srtp_unprotect_failed, 0, "{:?}", report.shard);
    drop(camera);
    drop(viewers);
    drop(control);
    drop(server);
    drop(lab);
    let _ = std::fs::remove_dir_all(&coturn_dir);
}

/// Starts coturn in `ns` with the shared secret, logging to stdout, and waits for
/// its UDP listener; returns its log lines as they come.
fn start_coturn(lab: &mut lab::Lab, ns: &str, dir: &std::path::Path) -> Arc<Mutex<Vec<String>>> {
    let pid = dir.join("turnserver.pid");
    let db = dir.join("turndb");
    let args = [
        "-n".to_owned(),
        format!("--listening-ip={TURN}"),
        format!("--relay-ip={TURN}"),
        format!("--listening-port={TURN_PORT}"),
        "--min-port=49152".into(),
        "--max-port=49300".into(),
        "--use-auth-secret".into(),
        format!("--static-auth-secret={SECRET}"),
        "--realm=shoal.test".into(),
        "--no-tls".into(),
        "--no-dtls".into(),
        "--no-cli".into(),
        "--log-file=stdout".into(),
        "--simple-log".into(),
        "--verbose".into(),
        format!("--pidfile={}", pid.display()),
        format!("--userdb={}", db.display()),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let child = lab.spawn(ns, "turnserver", &args);
    let stdout = child.stdout.take().expect("coturn's stdout");
    let log = Arc::new(Mutex::new(Vec::new()));
    let sink = log.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            sink.lock().expect("the log").push(line);
        }
    });
    let deadline = Instant::now() + TURN_START;
    let ready = format!("UDP listener opened on: {TURN}:{TURN_PORT}");
    while !log
        .lock()
        .expect("the log")
        .iter()
        .any(|l| l.contains(&ready))
    {
        assert!(
            Instant::now() < deadline,
            "coturn did not open its listener:\n{}",
            tail(&log)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    log
}

/// The last lines of coturn's log.
fn tail(log: &Mutex<Vec<String>>) -> String {
    let log = log.lock().expect("the log");
    log[log.len().saturating_sub(40)..].join("\n")
}

/// Checks that `links` (a response's `Link` headers, joined) names exactly the TURN
/// server `uri` with REST credentials; returns the username.
fn check_link(links: &str, uri: &str, started: SystemTime) -> String {
    let prefix = format!("<{uri}>; rel=\"ice-server\"; username=\"");
    let rest = links
        .strip_prefix(&prefix)
        .unwrap_or_else(|| panic!("Link headers: {links}"));
    let (username, rest) = rest.split_once('"').expect("a quoted username");
    let rest = rest
        .strip_prefix("; credential=\"")
        .unwrap_or_else(|| panic!("Link headers: {links}"));
    let (credential, rest) = rest.split_once('"').expect("a quoted credential");
    assert_eq!(rest, "; credential-type=\"password\"", "{links}");
    check_credentials(username, credential, started);
    username.to_owned()
}

/// Checks TURN REST credentials (draft-uberti-behave-turn-rest-00 §2.2): the
/// username is `EXPIRY:ID` with EXPIRY --turn-ttl (600 s) after the test started,
/// give or take the test's own length, and ID the client's peer id (opaque, not its
/// identity), and the credential is base64(HMAC-SHA1(secret, username)).
fn check_credentials(username: &str, credential: &str, started: SystemTime) {
    let (expiry, id) = username.split_once(':').expect("EXPIRY:ID");
    assert!(
        !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()),
        "{username}"
    );
    let expiry: u64 = expiry.parse().expect("a Unix time");
    let start = started
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs();
    assert!(
        (start + 600..start + 600 + 120).contains(&expiry),
        "{expiry} vs start {start}"
    );
    let key = hmac::Key::new(hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, SECRET.as_bytes());
    let tag = base64::engine::general_purpose::STANDARD
        .decode(credential)
        .expect("base64");
    hmac::verify(&key, username.as_bytes(), &tag).expect("HMAC-SHA1(secret, username)");
}
