//! Acceptance: untrusted signalling input gets a 4xx or a gRPC error that says what
//! is wrong, and shoal keeps serving: malformed SDP, SDP without a sha-256
//! fingerprint, unknown rooms and sessions, wrong content types, oversized bodies,
//! invalid JSON and unknown messages on `/signal` (which closes after repeated
//! abuse), and bad `SignalService` and `RoomService` requests. Afterwards `/healthz`
//! answers 200 and a valid WHIP offer gets its 201, and its session can be ended.

mod grpc_node;
mod http_client;
mod signal_ws;

use signal_ws::{WAIT, Ws, next_json};
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::time::Duration;

use futures_util::SinkExt;
use http_client::{fixture_offer, post_offer, request};
use shoal_proto::v1::room_service_client::RoomServiceClient;
use shoal_proto::v1::signal_service_client::SignalServiceClient;
use shoal_proto::v1::{
    CreateRoomRequest, JoinRequest, SessionDescription, SignalRequest, signal_request,
};
use shoal_server::config::Config;
use tokio_tungstenite::tungstenite::Message;
use tonic::Code;

fn offer_without_sha256() -> String {
    fixture_offer("chromium156_data_offer.sdp")
        .split_inclusive("\r\n")
        .filter(|l| !l.starts_with("a=fingerprint:sha-256"))
        .collect()
}

#[track_caller]
fn assert_reply(reply: &http_client::Reply, status: u16, mention: &str) {
    assert_eq!(reply.status, status, "{reply:?}");
    assert!(
        reply.body.contains(mention),
        "the body {:?} should mention {mention:?}",
        reply.body
    );
}

/// The CORS headers every WHIP/WHEP response carries (RFC 9725 §4.2).
#[track_caller]
fn assert_cors(reply: &http_client::Reply) {
    assert_eq!(
        reply.header("access-control-allow-origin"),
        Some("*"),
        "{reply:?}"
    );
    assert_eq!(
        reply.header("access-control-expose-headers"),
        Some("Location, Link, ETag, WWW-Authenticate"),
        "{reply:?}"
    );
}

/// The next message is an error whose text mentions `mention`.
async fn expect_error(ws: &mut Ws, mention: &str) {
    let e = next_json(ws).await.expect("an error message");
    let message = e["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains(mention), "{e} should mention {mention:?}");
}

async fn signal_socket(http: SocketAddr) -> Ws {
    let (ws, _) = tokio_tungstenite::connect_async(format!("ws://{http}/signal"))
        .await
        .expect("WebSocket handshake");
    ws
}

#[test]
fn bad_signalling_input() {
    let (_server, control) = grpc_node::start_node(Config {
        shards: NonZeroUsize::new(2).expect("non-zero"),
        ..Config::default()
    });
    let http = control.http_addr().expect("HTTP is on");
    let grpc = control.grpc_addr().expect("gRPC is on");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let channel = runtime.block_on(grpc_node::connect(grpc));
    let mut rooms = RoomServiceClient::new(channel.clone());
    runtime
        .block_on(rooms.create_room(CreateRoomRequest {
            name: "lobby".into(),
            ..CreateRoomRequest::default()
        }))
        .expect("room created");

    // WHIP: each mistake gets its own status and a message that names it.
    let offer = fixture_offer("chromium156_data_offer.sdp");
    assert_reply(
        &post_offer(http, "/whip/lobby", "v=0\r\no=broken\r\n"),
        400,
        "invalid SDP offer",
    );
    assert_reply(
        &post_offer(http, "/whip/lobby", "\u{0}\u{1}garbage"),
        400,
        "SDP",
    );
    assert_reply(
        &post_offer(http, "/whip/lobby", &offer_without_sha256()),
        400,
        "a=fingerprint:sha-256",
    );
    // Every section disabled (port 0): nothing to answer.
    let disabled: String = offer
        .lines()
        .map(|l| match l.strip_prefix("m=application ") {
            Some(rest) => format!(
                "m=application 0 {}\r\n",
                rest.split_once(' ').map_or("", |(_, r)| r)
            ),
            None => format!("{l}\r\n"),
        })
        .collect();
    assert_reply(
        &post_offer(http, "/whip/lobby", &disabled),
        400,
        "no section shoal can accept",
    );
    // A room that is not open opens on join, but only under a valid name.
    assert_reply(
        &post_offer(http, "/whip/%20padded%20", &offer),
        400,
        "room name",
    );
    assert_reply(
        &post_offer(http, "/whep/%20padded%20", &offer),
        400,
        "room name",
    );
    assert_reply(
        &request(
            http,
            "POST",
            "/whip/lobby",
            Some("application/json"),
            offer.as_bytes(),
        ),
        415,
        "application/sdp",
    );
    assert_reply(
        &request(http, "POST", "/whip/lobby", None, offer.as_bytes()),
        415,
        "application/sdp",
    );
    let huge = vec![b'a'; 80 * 1024];
    assert_reply(
        &request(http, "POST", "/whip/lobby", Some("application/sdp"), &huge),
        413,
        "larger than",
    );
    assert_reply(
        &request(http, "DELETE", "/whip/lobby/0123", None, b""),
        404,
        "no such session",
    );
    // A bad identity is the directory's INVALID_ARGUMENT: 400.
    assert_reply(
        &post_offer(http, "/whip/lobby?identity=%20padded%20", &offer),
        400,
        "identity",
    );
    // So is one kept for links between cluster nodes, which it would replace.
    assert_reply(
        &post_offer(http, "/whip/lobby?identity=cascade:node-a", &offer),
        400,
        "kept for links",
    );

    runtime.block_on(async {
        // /signal: invalid JSON and unknown messages get error messages...
        let mut ws = signal_socket(http).await;
        ws.send(Message::text("{not json")).await.unwrap();
        let e = next_json(&mut ws).await.expect("an error message");
        assert_eq!(e["error"]["code"], "invalid_argument", "{e}");
        assert!(
            e["error"]["message"]
                .as_str()
                .unwrap()
                .contains("invalid JSON"),
            "{e}"
        );
        // (errors before join end the session: join must come first)
        assert_eq!(
            next_json(&mut ws).await,
            None,
            "closed after a bad first message"
        );

        let mut ws = signal_socket(http).await;
        ws.send(Message::text(
            r#"{"join": {"room": "lobby", "identity": "mallory"}}"#,
        ))
        .await
        .unwrap();
        let joined = next_json(&mut ws).await.expect("joined");
        assert_eq!(
            joined["join"]["participant"]["identity"], "mallory",
            "{joined}"
        );
        ws.send(Message::text(r#"{"bogus": {}}"#)).await.unwrap();
        expect_error(&mut ws, "not a signalling message").await;
        ws.send(Message::text(r#"{"offer": {"sdp": "v=0 garbage"}}"#))
            .await
            .unwrap();
        expect_error(&mut ws, "invalid SDP offer").await;
        ws.send(Message::binary(vec![1, 2, 3])).await.unwrap();
        let e = next_json(&mut ws).await.expect("an error message");
        assert!(
            e["error"]["message"].as_str().unwrap().contains("binary"),
            "{e}"
        );
        // ...and repeated abuse closes the socket, which takes mallory out of the room.
        let mut closed = false;
        for _ in 0..10 {
            if ws.send(Message::text("[]")).await.is_err() {
                closed = true;
                break;
            }
            match next_json(&mut ws).await {
                None => {
                    closed = true;
                    break;
                }
                Some(e) => assert!(e.get("error").is_some(), "{e}"),
            }
        }
        assert!(closed, "the socket should close after repeated abuse");
        let mut left = false;
        for _ in 0..100 {
            if grpc_node::participants(&mut rooms, "lobby").await == 0 {
                left = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(left, "mallory should have left the room");

        // An oversized WebSocket message is refused with an error, and closes the
        // socket.
        let mut ws = signal_socket(http).await;
        let big = format!(r#"{{"join": {{"room": "{}"}}}}"#, "x".repeat(100 * 1024));
        let _ = ws.send(Message::text(big)).await;
        expect_error(&mut ws, "bytes was refused").await;
        assert_eq!(
            next_json(&mut ws).await,
            None,
            "closed after an oversized message"
        );

        // gRPC SignalService: the first message must be join; room names must be
        // valid (a room that is not open opens on join).
        let mut signal = SignalServiceClient::new(channel.clone());
        for (first, code, mention) in [
            (
                signal_request::Message::Offer(SessionDescription {
                    sdp: offer.clone(),
                    id: 0,
                }),
                Code::FailedPrecondition,
                "join",
            ),
            (
                signal_request::Message::Join(JoinRequest {
                    room: " nowhere".into(),
                    ..JoinRequest::default()
                }),
                Code::InvalidArgument,
                "room name",
            ),
            (
                signal_request::Message::Join(JoinRequest {
                    room: "lobby".into(),
                    identity: "a\nb".into(),
                    ..JoinRequest::default()
                }),
                Code::InvalidArgument,
                "identity",
            ),
        ] {
            let requests = tokio_stream::iter([SignalRequest {
                message: Some(first),
            }]);
            let mut responses = signal.connect(requests).await.expect("stream").into_inner();
            let end = tokio::time::timeout(WAIT, responses.message())
                .await
                .expect("an answer in time");
            let status = end.expect_err("a status");
            assert_eq!(status.code(), code, "{status:?}");
            assert!(status.message().contains(mention), "{status:?}");
        }
        // RoomService: bad names are INVALID_ARGUMENT.
        let bad = rooms
            .create_room(CreateRoomRequest {
                name: String::new(),
                ..CreateRoomRequest::default()
            })
            .await
            .expect_err("refused");
        assert_eq!(bad.code(), Code::InvalidArgument);
    });

    // shoal still serves.
    assert_reply(&request(http, "GET", "/healthz", None, b""), 200, "ok");
    let created = post_offer(http, "/whip/lobby?identity=alice", &offer);
    assert_eq!(created.status, 201, "{created:?}");
    assert_eq!(created.header("content-type"), Some("application/sdp"));
    assert!(created.body.contains("a=ice-lite"), "{}", created.body);
    let location = created.header("location").expect("a Location").to_owned();
    assert!(location.starts_with("/whip/lobby/"), "{location}");
    // No --ice-server: no Link header (RFC 9725 §4.6 makes them optional).
    assert_eq!(created.header("link"), None, "{created:?}");
    // RFC 9725 §4.2 CORS: a page on another origin reads the answer and its Location.
    assert_cors(&created);
    for (path, methods) in [
        ("/whip/lobby", "POST, OPTIONS"),
        ("/whep/lobby", "POST, OPTIONS"),
        (location.as_str(), "DELETE, OPTIONS, PATCH"),
    ] {
        let preflight = request(http, "OPTIONS", path, None, b"");
        assert_eq!(preflight.status, 200, "{path}: {preflight:?}");
        assert_cors(&preflight);
        assert_eq!(
            preflight.header("access-control-allow-methods"),
            Some(methods),
            "{path}"
        );
        let allowed = preflight
            .header("access-control-allow-headers")
            .unwrap_or_default()
            .to_ascii_lowercase();
        assert!(allowed.contains("content-type"), "{path}: {allowed}");
        assert!(allowed.contains("authorization"), "{path}: {allowed}");
    }
    let endpoint = request(http, "OPTIONS", "/whip/lobby", None, b"");
    assert_eq!(endpoint.header("accept-post"), Some("application/sdp"));
    // Errors too, so the page can show them.
    assert_cors(&request(http, "DELETE", "/whip/lobby/0123", None, b""));
    // PATCH (RFC 9725 §4.3): an entity-tag in the 201; a PATCH without If-Match is
    // 428, one of another type 415, one for an unknown session 404.
    assert!(
        created.header("etag").is_some_and(|t| t.starts_with('"')),
        "{created:?}"
    );
    let patched = request(
        http,
        "PATCH",
        &location,
        Some("application/trickle-ice-sdpfrag"),
        b"a=end-of-candidates\r\n",
    );
    assert_reply(&patched, 428, "If-Match");
    let patched = request(
        http,
        "PATCH",
        &location,
        Some("application/sdp"),
        b"v=0\r\n",
    );
    assert_reply(&patched, 415, "trickle-ice-sdpfrag");
    let patched = request(
        http,
        "PATCH",
        "/whip/lobby/0123",
        Some("application/trickle-ice-sdpfrag"),
        b"a=end-of-candidates\r\n",
    );
    assert_reply(&patched, 404, "no such session");
    // A second session of the identity replaces the first, whose session ends.
    let second = post_offer(http, "/whip/lobby?identity=alice", &offer);
    assert_eq!(second.status, 201, "{second:?}");
    assert_reply(
        &request(http, "DELETE", &location, None, b""),
        404,
        "no such session",
    );
    let location = second.header("location").expect("a Location").to_owned();
    assert_reply(&request(http, "DELETE", &location, None, b""), 200, "ended");
    assert_reply(
        &request(http, "DELETE", &location, None, b""),
        404,
        "no such session",
    );
    let again = post_offer(http, "/whip/lobby?identity=alice", &offer);
    assert_eq!(again.status, 201, "{again:?}");
}
