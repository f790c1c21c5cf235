//! The STUN and TURN servers of `--ice-server`, handed to each client without a
//! browser or a TURN server in the way: a WHIP POST's `Link` headers (RFC 9725
//! §4.6, exposed to cross-origin pages), and the `iceServers` of a `/signal` join,
//! each with TURN REST credentials of the client's own (`EXPIRY:PEER-ID`,
//! base64(HMAC-SHA1(secret, username)), draft-uberti-behave-turn-rest-00 §2.2).

mod grpc_node;
mod http_client;

use std::num::NonZeroUsize;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use futures_util::{SinkExt, StreamExt};
use http_client::{fixture_offer, post_offer};
use ring::hmac;
use shoal_server::config::Config;
use tokio_tungstenite::tungstenite::Message;

const SECRET: &str = "handed-out-secret";
const TTL: u64 = 600;

/// Checks `username` and `credential` are TURN REST credentials minted now.
#[track_caller]
fn check_credentials(username: &str, credential: &str) {
    let (expiry, id) = username.split_once(':').expect("EXPIRY:ID");
    assert!(
        !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()),
        "an opaque peer id: {username}"
    );
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs();
    let expiry: u64 = expiry.parse().expect("a Unix time");
    assert!(
        (now + TTL - 60..=now + TTL).contains(&expiry),
        "{expiry} vs {now}"
    );
    let key = hmac::Key::new(hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, SECRET.as_bytes());
    let tag = base64::engine::general_purpose::STANDARD
        .decode(credential)
        .expect("base64");
    hmac::verify(&key, username.as_bytes(), &tag).expect("HMAC-SHA1(secret, username)");
}

#[test]
fn ice_servers_handed_out() {
    let config = Config::load_from([
        "shoal",
        "--shards=1",
        "--ice-server=stun:192.0.2.7:3478",
        "--ice-server=turn:192.0.2.7:3478?transport=udp,turns:turn.example.org:443?transport=tcp",
        &format!("--turn-secret={SECRET}"),
        &format!("--turn-ttl={TTL}"),
    ])
    .expect("valid flags");
    let grpc_node::RoomNode {
        http,
        runtime,
        server: _server,
        control: _control,
        ..
    } = grpc_node::node_with_room_in(
        "lobby",
        Config {
            shards: NonZeroUsize::MIN,
            ..config
        },
    );

    // WHIP: one Link per URI; STUN without credentials, TURN with.
    let created = post_offer(
        http,
        "/whip/lobby?identity=alice",
        &fixture_offer("chromium156_data_offer.sdp"),
    );
    assert_eq!(created.status, 201, "{created:?}");
    let links: Vec<&str> = created
        .headers
        .iter()
        .filter(|(n, _)| n == "link")
        .map(|(_, v)| v.as_str())
        .collect();
    assert_eq!(links.len(), 3, "{links:?}");
    assert_eq!(links[0], "<stun:192.0.2.7:3478>; rel=\"ice-server\"");
    let mut turn_users = Vec::new();
    for (link, uri) in links[1..].iter().zip([
        "turn:192.0.2.7:3478?transport=udp",
        "turns:turn.example.org:443?transport=tcp",
    ]) {
        let rest = link
            .strip_prefix(&format!("<{uri}>; rel=\"ice-server\"; username=\""))
            .unwrap_or_else(|| panic!("{link}"));
        let (username, rest) = rest.split_once('"').expect("quoted");
        let credential = rest
            .strip_prefix("; credential=\"")
            .and_then(|r| r.strip_suffix("\"; credential-type=\"password\""))
            .unwrap_or_else(|| panic!("{link}"));
        check_credentials(username, credential);
        turn_users.push(username.to_owned());
    }
    assert_eq!(turn_users[0], turn_users[1], "one client, one username");
    let exposed = created
        .header("access-control-expose-headers")
        .unwrap_or_default();
    assert!(exposed.contains("Link"), "{exposed}");

    // /signal: the join response's iceServers, credentials of another client.
    let joined = runtime.block_on(async {
        let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{http}/signal"))
            .await
            .expect("WebSocket handshake");
        let join = serde_json::json!({ "join": { "room": "lobby", "identity": "bob" } });
        ws.send(Message::Text(join.to_string().into()))
            .await
            .expect("sent");
        loop {
            let frame = tokio::time::timeout(Duration::from_secs(10), ws.next())
                .await
                .expect("a message in time");
            if let Some(Ok(Message::Text(t))) = frame {
                let v: serde_json::Value = serde_json::from_str(&t).expect("JSON");
                if v.get("join").is_some() {
                    break v;
                }
            } else {
                panic!("no join response: {frame:?}");
            }
        }
    });
    let servers = &joined["join"]["iceServers"];
    assert_eq!(
        servers[0]["urls"],
        serde_json::json!(["stun:192.0.2.7:3478"]),
        "{servers}"
    );
    assert_eq!(
        servers[1]["urls"],
        serde_json::json!([
            "turn:192.0.2.7:3478?transport=udp",
            "turns:turn.example.org:443?transport=tcp"
        ]),
        "{servers}"
    );
    let username = servers[1]["username"].as_str().unwrap_or_default();
    check_credentials(
        username,
        servers[1]["credential"].as_str().unwrap_or_default(),
    );
    assert_ne!(username, turn_users[0], "each client its own");
}
