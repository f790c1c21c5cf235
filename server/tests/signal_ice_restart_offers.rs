//! ICE restarts over `/signal`, as the control plane and the shard see them: an
//! offer with new ice-ufrag and ice-pwd is answered with new credentials of
//! shoal's and the shard restarts the peer's ICE (RFC 8839 §4.4.1.1.1, §4.4.2.1);
//! a restarting offer refused for another reason (a new DTLS fingerprint) and one
//! changing only the ufrag change nothing, on the shard either.

mod grpc_node;
mod http_client;

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use http_client::fixture_offer;
use tokio_tungstenite::tungstenite::Message;

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// The next message with `key` (others, such as participant events, skipped).
async fn next(ws: &mut Ws, key: &str) -> serde_json::Value {
    loop {
        let frame = tokio::time::timeout(Duration::from_secs(10), ws.next())
            .await
            .expect("a message in time");
        let Some(Ok(Message::Text(t))) = frame else {
            panic!("the socket ended: {frame:?}");
        };
        let v: serde_json::Value = serde_json::from_str(&t).expect("JSON");
        if v.get(key).is_some() || v.get("error").is_some() {
            return v;
        }
    }
}

async fn send(ws: &mut Ws, v: serde_json::Value) {
    ws.send(Message::Text(v.to_string().into()))
        .await
        .expect("sent");
}

/// The value of the first `a=NAME:` line of `sdp`.
fn attribute<'a>(sdp: &'a str, name: &str) -> &'a str {
    let prefix = format!("a={name}:");
    sdp.lines()
        .find_map(|l| l.trim_end().strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no a={name} in\n{sdp}"))
}

/// `offer` with its ICE credentials (and, with `fingerprint`, its first
/// fingerprint byte) replaced.
fn changed(offer: &str, ufrag: &str, pwd: Option<&str>, fingerprint: bool) -> String {
    offer
        .split_inclusive("\r\n")
        .map(|l| {
            if l.starts_with("a=ice-ufrag:") {
                format!("a=ice-ufrag:{ufrag}\r\n")
            } else if let (true, Some(pwd)) = (l.starts_with("a=ice-pwd:"), pwd) {
                format!("a=ice-pwd:{pwd}\r\n")
            } else if fingerprint && l.starts_with("a=fingerprint:sha-256 ") {
                let (head, rest) = l.split_at("a=fingerprint:sha-256 ".len());
                let flipped = if rest.starts_with("00") { "11" } else { "00" };
                format!("{head}{flipped}{}", &rest[2..])
            } else {
                l.to_owned()
            }
        })
        .collect()
}

#[test]
fn signal_ice_restart_offers() {
    let grpc_node::RoomNode {
        server,
        http,
        runtime,
        control: _control,
        ..
    } = grpc_node::node_with_room("lobby");
    let restarts = || grpc_node::shard_report(&server, 0).shard.ice_restarts;
    runtime.block_on(async {
        let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{http}/signal"))
            .await
            .expect("WebSocket handshake");
        send(
            &mut ws,
            serde_json::json!({ "join": { "room": "lobby", "identity": "al" } }),
        )
        .await;
        next(&mut ws, "join").await;
        let offer = fixture_offer("chromium156_data_offer.sdp");
        send(&mut ws, serde_json::json!({ "offer": { "sdp": offer } })).await;
        let first = next(&mut ws, "answer").await;
        let first = first["answer"]["sdp"]
            .as_str()
            .expect("an answer")
            .to_owned();
        let ufrag = attribute(&first, "ice-ufrag").to_owned();

        // New credentials but a new fingerprint: refused, nothing restarted.
        let bad = changed(&offer, "newU", Some("newpasswordnewpassword00"), true);
        send(&mut ws, serde_json::json!({ "offer": { "sdp": bad } })).await;
        let refused = next(&mut ws, "answer").await;
        assert!(
            refused["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("fingerprint")),
            "{refused}"
        );
        assert_eq!(restarts(), 0);
        // Only the ufrag: refused as half a restart.
        let half = changed(&offer, "newU", None, false);
        send(&mut ws, serde_json::json!({ "offer": { "sdp": half } })).await;
        let refused = next(&mut ws, "answer").await;
        assert!(
            refused["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("only one")),
            "{refused}"
        );
        assert_eq!(restarts(), 0);

        // A restart: new credentials of shoal's, the shard restarted.
        let restart = changed(&offer, "newU", Some("newpasswordnewpassword00"), false);
        send(&mut ws, serde_json::json!({ "offer": { "sdp": restart } })).await;
        let again = next(&mut ws, "answer").await;
        let again = again["answer"]["sdp"]
            .as_str()
            .unwrap_or_else(|| panic!("{again}"));
        assert_ne!(attribute(again, "ice-ufrag"), ufrag);
        assert_ne!(attribute(again, "ice-pwd"), attribute(&first, "ice-pwd"));
        assert_eq!(
            attribute(again, "fingerprint"),
            attribute(&first, "fingerprint")
        );
        assert_eq!(attribute(again, "setup"), attribute(&first, "setup"));
        assert_eq!(restarts(), 1);
        // The same offer again is a renegotiation, no restart.
        let same = changed(&offer, "newU", Some("newpasswordnewpassword00"), false);
        send(&mut ws, serde_json::json!({ "offer": { "sdp": same } })).await;
        let kept = next(&mut ws, "answer").await;
        let kept = kept["answer"]["sdp"]
            .as_str()
            .unwrap_or_else(|| panic!("{kept}"));
        assert_eq!(attribute(kept, "ice-ufrag"), attribute(again, "ice-ufrag"));
        assert_eq!(restarts(), 1);
    });
}
