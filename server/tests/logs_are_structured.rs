//! The log as a collector reads it: `shoal --log-format json` (the binary, with an
//! API key) takes a WHIP join with a valid token, its DELETE (the leave), and a WHIP
//! offer with a forged token (refused), then stops on SIGTERM. Every line of its
//! stderr must be one JSON object; the join, the leave and the refusal must each be
//! exactly one line with the fields an operator filters on; the configuration comes
//! first; and neither token, the API secret nor any signature may appear anywhere in
//! the log.

mod http_client;
mod node_process;
mod tokens;

use node_process::Node;
use serde_json::Value;

const ROOM: &str = "logged";

#[test]
fn logs_are_structured() {
    let key = format!("{}:{}", tokens::KEY, tokens::SECRET);
    let mut node = Node::start(&["--api-key", &key, "--log-format", "json"]);
    let http = node.http;

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

    // SIGTERM: the node stops (nobody to drain), and its log is complete.
    node.signal(nix::sys::signal::Signal::SIGTERM);
    let status = node.wait(std::time::Duration::from_secs(20));
    assert!(status.success(), "{status}");
    let log = node.log();

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
