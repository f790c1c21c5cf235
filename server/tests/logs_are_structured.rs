//! The log as a collector reads it: `shoal --log-format json` (the binary, with an
//! API key) takes a WHIP join with a valid token, its DELETE (the leave), and a WHIP
//! offer with a forged token (refused), then stops on SIGTERM. Every line of its
//! stderr must be one JSON object; the join, the leave and the refusal must each be
//! exactly one line with the fields an operator filters on; the configuration comes
//! first; and neither token, the API secret nor any signature may appear anywhere in
//! the log.

mod http_client;
mod tokens;

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

const SHOAL: &str = env!("CARGO_BIN_EXE_shoal");
const ROOM: &str = "logged";
const TIMEOUT: Duration = Duration::from_secs(20);

/// Kills the node if the test fails before it stops it.
struct ChildGuard(Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

#[test]
fn logs_are_structured() {
    let key = format!("{}:{}", tokens::KEY, tokens::SECRET);
    let mut child = Command::new(SHOAL)
        .env_clear()
        .args([
            "--shards",
            "1",
            "--udp-port-base",
            "0",
            "--tcp-port-base",
            "off",
            "--grpc-addr",
            "127.0.0.1:0",
            "--http-addr",
            "127.0.0.1:0",
            "--api-key",
            &key,
            "--log-format",
            "json",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn shoal");
    let stdout = child.stdout.take().expect("stdout");
    let mut stderr = child.stderr.take().expect("stderr");
    let mut guard = ChildGuard(child);
    let (log_tx, log_rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut all = String::new();
        let _ = stderr.read_to_string(&mut all);
        let _ = log_tx.send(all);
    });
    let http = http_addr(stdout);

    // A join with a valid token, and its leave.
    let token = tokens::token("alice", tokens::join(ROOM));
    let bearer = format!("Bearer {token}");
    let offer = http_client::fixture_offer("chromium156_data_offer.sdp");
    let created = http_client::request_with_headers(
        http,
        "POST",
        &format!("/whip/{ROOM}"),
        &[
            ("Content-Type", "application/sdp"),
            ("Authorization", &bearer),
        ],
        offer.as_bytes(),
    );
    assert_eq!(created.status, 201, "{created:?}");
    let location = created.header("location").expect("a Location").to_owned();
    let ended = http_client::request_with_headers(
        http,
        "DELETE",
        &location,
        &[("Authorization", &bearer)],
        b"",
    );
    assert_eq!(ended.status, 200, "{ended:?}");

    // A forged token: refused.
    let forged = tokens::forged(&tokens::claims("mallory", tokens::join(ROOM)));
    let refused = http_client::request_with_headers(
        http,
        "POST",
        &format!("/whip/{ROOM}"),
        &[
            ("Content-Type", "application/sdp"),
            ("Authorization", &format!("Bearer {forged}")),
        ],
        offer.as_bytes(),
    );
    assert_eq!(refused.status, 401, "{refused:?}");

    // SIGTERM: the node stops, and its log is complete.
    let pid = nix::unistd::Pid::from_raw(i32::try_from(guard.0.id()).expect("a pid"));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
    let status = guard.0.wait().expect("shoal exits");
    assert!(status.success(), "{status}");
    let log = log_rx.recv_timeout(TIMEOUT).expect("the whole log");

    let lines: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    for line in &lines {
        for field in ["timestamp", "level", "target", "fields"] {
            assert!(line.get(field).is_some(), "{field} in {line}");
        }
    }
    let events = |name: &str| -> Vec<&Value> {
        lines
            .iter()
            .filter(|l| l["fields"]["event"] == name)
            .map(|l| &l["fields"])
            .collect()
    };
    let config = events("config");
    assert_eq!(config.len(), 1, "{log}");
    assert_eq!(config[0]["api_keys"], tokens::KEY);
    assert_eq!(
        lines.first().map(|l| &l["fields"]["event"]),
        Some(&Value::from("config"))
    );

    let joins = events("join");
    assert_eq!(joins.len(), 1, "{log}");
    let join = joins[0];
    assert_eq!(join["room"], ROOM);
    assert_eq!(join["identity"], "alice");
    assert_eq!(join["kind"], "whip");
    assert!(join["peer"].is_u64() && join["shard"] == 0, "{join}");

    let leaves = events("leave");
    assert_eq!(leaves.len(), 1, "{log}");
    let leave = leaves[0];
    assert_eq!(leave["room"], ROOM);
    assert_eq!(leave["identity"], "alice");
    assert_eq!(leave["reason"], "client_left");
    assert_eq!(leave["peer"], join["peer"]);

    let refusals = events("auth_refused");
    assert_eq!(refusals.len(), 1, "{log}");
    assert_eq!(refusals[0]["reason"], "bad_signature");
    let refusal_line = lines
        .iter()
        .find(|l| l["fields"]["event"] == "auth_refused")
        .expect("the refusal");
    assert_eq!(refusal_line["level"], "INFO");

    // Nothing secret anywhere: not the tokens, their signatures, nor the API secret.
    for secret in [token.as_str(), forged.as_str(), tokens::SECRET] {
        assert!(!log.contains(secret), "a secret in the log");
    }
    for t in [&token, &forged] {
        let signature = t.rsplit('.').next().expect("a signature");
        assert!(!log.contains(signature), "a signature in the log");
    }
}

/// Reads the node's stdout until it prints its HTTP address.
fn http_addr(stdout: std::process::ChildStdout) -> SocketAddr {
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = lines.recv_timeout(left).expect("shoal starts");
        if let Some(addr) = line.strip_prefix("shoal: http http://") {
            return addr.trim().parse().expect("an address");
        }
    }
}
