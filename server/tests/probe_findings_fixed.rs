//! Acceptance: what a probe of a running node found, each case refused or handled as
//! it should be now:
//! - an offer whose media sections share a mid (RFC 5888 §4) is refused on WHIP and
//!   on `/signal`;
//! - a WHIP session is not reached through `/whep/…` (nor a WHEP one through
//!   `/whip/…`);
//! - room names and identities are one whatever their Unicode normal form, and
//!   invisible format characters (zero-width, bidi controls) are refused;
//! - a query escape that is not UTF-8 (`?identity=%ff`) is a 400, not U+FFFD;
//! - a `/signal` message over the size limit closes with 1009 after an `error`, and a
//!   `SignalService.Connect` message over the limit ends with RESOURCE_EXHAUSTED.

mod grpc_node;
mod http_client;

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use http_client::{Reply, fixture_offer, post_offer, request, request_with_headers};
use shoal_proto::v1::signal_service_client::SignalServiceClient;
use shoal_proto::v1::{
    CreateRoomRequest, JoinRequest, SessionDescription, SignalRequest, SignalResponse,
    signal_request, signal_response,
};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tonic::Code;

/// How long a test waits for one message.
const WAIT: Duration = Duration::from_secs(10);

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

#[track_caller]
fn assert_reply(reply: &Reply, status: u16, mention: &str) {
    assert_eq!(reply.status, status, "{reply:?}");
    assert!(
        reply.body.contains(mention),
        "the body {:?} should mention {mention:?}",
        reply.body
    );
}

/// The next frame that is not a ping or pong; `None` once the socket ends.
async fn next_frame(ws: &mut Ws) -> Option<Message> {
    loop {
        let frame = tokio::time::timeout(WAIT, ws.next())
            .await
            .expect("a frame in time");
        match frame {
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
            Some(Ok(frame)) => return Some(frame),
            None | Some(Err(_)) => return None,
        }
    }
}

/// The next JSON message with `key` or `error` (room events skipped).
async fn next_json(ws: &mut Ws, key: &str) -> serde_json::Value {
    loop {
        let frame = next_frame(ws).await;
        let Some(Message::Text(text)) = frame else {
            panic!("expected a {key} message, the socket gave {frame:?}");
        };
        let v: serde_json::Value = serde_json::from_str(&text).expect("JSON");
        if v.get(key).is_some() || v.get("error").is_some() {
            return v;
        }
    }
}

async fn joined_socket(http: std::net::SocketAddr, room: &str, identity: &str) -> Ws {
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{http}/signal"))
        .await
        .expect("WebSocket handshake");
    let join = serde_json::json!({"join": {"room": room, "identity": identity}});
    ws.send(Message::text(join.to_string()))
        .await
        .expect("sent");
    let joined = next_json(&mut ws, "join").await;
    assert_eq!(
        joined["join"]["participant"]["identity"], identity,
        "{joined}"
    );
    ws
}

/// A real offer with audio, video and a data channel whose second section takes the
/// first one's mid.
fn offer_with_mid_twice() -> String {
    let offer = fixture_offer("chromium156_av_data_offer.sdp");
    assert!(offer.contains("a=mid:0\r\n") && offer.contains("a=mid:1\r\n"));
    offer.replacen("a=mid:1\r\n", "a=mid:0\r\n", 1)
}

/// A gRPC signalling stream fed from a channel, so a test sends as it goes.
struct GrpcSession {
    requests: tokio::sync::mpsc::Sender<SignalRequest>,
    responses: tonic::Streaming<SignalResponse>,
}

impl GrpcSession {
    async fn open(channel: tonic::transport::Channel) -> GrpcSession {
        let (requests, rx) = tokio::sync::mpsc::channel(4);
        let outbound =
            futures_util::stream::unfold(
                rx,
                |mut rx| async move { rx.recv().await.map(|r| (r, rx)) },
            );
        let responses = SignalServiceClient::new(channel)
            .connect(outbound)
            .await
            .expect("a stream")
            .into_inner();
        GrpcSession {
            requests,
            responses,
        }
    }

    async fn send(&self, message: signal_request::Message) {
        self.requests
            .send(SignalRequest {
                message: Some(message),
            })
            .await
            .expect("the stream takes requests");
    }

    /// The next message, or the status the stream ended with (OK as `Ok(None)`).
    async fn next(&mut self) -> Result<Option<signal_response::Message>, tonic::Status> {
        let next = tokio::time::timeout(WAIT, self.responses.message())
            .await
            .expect("a response in time")?;
        Ok(next.and_then(|r| r.message))
    }

    async fn join(&mut self, room: &str, identity: &str) {
        self.send(signal_request::Message::Join(JoinRequest {
            room: room.into(),
            identity: identity.into(),
            ..JoinRequest::default()
        }))
        .await;
        match self.next().await {
            Ok(Some(signal_response::Message::Join(j))) => {
                assert_eq!(j.participant.map(|p| p.identity).as_deref(), Some(identity));
            }
            other => panic!("expected a join response, got {other:?}"),
        }
    }
}

#[test]
fn an_offer_with_a_mid_twice_is_refused() {
    let mut node = grpc_node::node_with_room("lobby");
    let http = node.http;
    let offer = offer_with_mid_twice();

    // WHIP: 400, naming the mid and the rule; nobody joins.
    let reply = post_offer(http, "/whip/lobby?identity=twice", &offer);
    assert_reply(&reply, 400, "a=mid:0");
    assert!(reply.body.contains("RFC 5888"), "{reply:?}");
    assert_reply(&post_offer(http, "/whep/lobby", &offer), 400, "a=mid:0");

    let channel = node.runtime.block_on(grpc_node::connect(
        node.control.grpc_addr().expect("gRPC is on"),
    ));
    let rooms = &mut node.rooms;
    node.runtime.block_on(async {
        assert_eq!(grpc_node::participants(rooms, "lobby").await, 0);

        // /signal: an error message of INVALID_ARGUMENT, and the session goes on.
        let mut ws = joined_socket(http, "lobby", "ws-twice").await;
        let sdp = serde_json::json!({"offer": {"sdp": offer}});
        ws.send(Message::text(sdp.to_string())).await.expect("sent");
        let e = next_json(&mut ws, "answer").await;
        assert_eq!(e["error"]["code"], "invalid_argument", "{e}");
        let message = e["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("a=mid:0"), "{e}");
        let good = fixture_offer("chromium156_av_data_offer.sdp");
        let sdp = serde_json::json!({"offer": {"sdp": good}});
        ws.send(Message::text(sdp.to_string())).await.expect("sent");
        let answer = next_json(&mut ws, "answer").await;
        let answer = answer["answer"]["sdp"].as_str().expect("an answer");
        assert!(answer.contains("a=mid:1\r\n"), "{answer}");

        // SignalService: the same error message, on the gRPC stream.
        let mut grpc = GrpcSession::open(channel).await;
        grpc.join("lobby", "grpc-twice").await;
        grpc.send(signal_request::Message::Offer(SessionDescription {
            sdp: offer.clone(),
            id: 0,
        }))
        .await;
        match grpc.next().await {
            Ok(Some(signal_response::Message::Error(e))) => {
                assert_eq!(e.code, "invalid_argument", "{e:?}");
                assert!(e.message.contains("a=mid:0"), "{e:?}");
            }
            other => panic!("expected an error message, got {other:?}"),
        }
    });
}

#[test]
fn a_session_is_reached_only_under_its_own_kind() {
    let node = grpc_node::node_with_room("lobby");
    let http = node.http;
    let offer = fixture_offer("chromium156_data_offer.sdp");
    let trickle = [
        ("Content-Type", "application/trickle-ice-sdpfrag"),
        ("If-Match", "*"),
    ];
    for (created_as, other) in [("whip", "whep"), ("whep", "whip")] {
        let created = post_offer(http, &format!("/{created_as}/lobby"), &offer);
        assert_eq!(created.status, 201, "{created:?}");
        let location = created.header("location").expect("a Location").to_owned();
        let prefix = format!("/{created_as}/");
        assert!(location.starts_with(&prefix), "{location}");
        let elsewhere = location.replacen(&prefix, &format!("/{other}/"), 1);

        // Through the other kind's path the session does not exist...
        let patched = request_with_headers(
            http,
            "PATCH",
            &elsewhere,
            &trickle,
            b"a=end-of-candidates\r\n",
        );
        assert_reply(&patched, 404, "no such session");
        assert_reply(
            &request(http, "DELETE", &elsewhere, None, b""),
            404,
            "no such session",
        );
        // ...and through its own it is there still, and ends.
        let patched = request_with_headers(
            http,
            "PATCH",
            &location,
            &trickle,
            b"a=end-of-candidates\r\n",
        );
        assert_eq!(patched.status, 204, "{patched:?}");
        assert_reply(&request(http, "DELETE", &location, None, b""), 200, "ended");
    }
}

#[test]
fn names_are_one_whatever_their_normal_form_and_never_invisible() {
    let mut node = grpc_node::node_with_room("caf\u{e9}");
    let http = node.http;
    let offer = fixture_offer("chromium156_data_offer.sdp");
    // The room "café" made with U+00E9 is the room "cafe" + U+0301 (NFC).
    let created = post_offer(http, "/whip/cafe%CC%81?identity=jos%C3%A9", &offer);
    assert_eq!(created.status, 201, "{created:?}");
    let location = created.header("location").expect("a Location").to_owned();
    assert!(location.starts_with("/whip/caf%C3%A9/"), "{location}");
    // ...and "josé" is "jose" + U+0301: the same identity, so the second join
    // replaces the first, whose session ends.
    let again = post_offer(http, "/whip/caf%C3%A9?identity=jose%CC%81", &offer);
    assert_eq!(again.status, 201, "{again:?}");
    assert_reply(
        &request(http, "DELETE", &location, None, b""),
        404,
        "no such session",
    );
    // Invisible format characters are refused: a zero-width space, a right-to-left
    // override, a BOM, a soft hyphen; in identities, display names and room names.
    for (query, mention) in [
        ("identity=jos%E2%80%8B%C3%A9", "U+200B"),
        ("identity=%E2%80%AEnimda", "U+202E"),
        ("identity=%EF%BB%BFbob", "U+FEFF"),
        ("identity=bob&name=B%C2%ADob", "U+00AD"),
    ] {
        let reply = post_offer(http, &format!("/whip/caf%C3%A9?{query}"), &offer);
        assert_reply(&reply, 400, mention);
    }
    assert_reply(
        &post_offer(http, "/whip/caf%E2%80%8D%C3%A9", &offer),
        400,
        "U+200D",
    );

    let rooms = &mut node.rooms;
    node.runtime.block_on(async {
        // The directory lists the participant under its NFC identity, whichever
        // form asks.
        let listed = rooms
            .list_participants(shoal_proto::v1::ListParticipantsRequest {
                room: "cafe\u{301}".into(),
                ..Default::default()
            })
            .await
            .expect("listed")
            .into_inner();
        let identities: Vec<_> = listed.participants.iter().map(|p| &p.identity).collect();
        assert_eq!(identities, ["jos\u{e9}"]);
        let twice = rooms
            .create_room(CreateRoomRequest {
                name: "cafe\u{301}".into(),
                ..CreateRoomRequest::default()
            })
            .await
            .expect_err("the same room");
        assert_eq!(twice.code(), Code::AlreadyExists, "{twice:?}");
        let bidi = rooms
            .create_room(CreateRoomRequest {
                name: "lobby\u{2066}".into(),
                ..CreateRoomRequest::default()
            })
            .await
            .expect_err("refused");
        assert_eq!(bidi.code(), Code::InvalidArgument, "{bidi:?}");
        assert!(bidi.message().contains("U+2066"), "{bidi:?}");
        // /signal joins under the same identity rules.
        let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{http}/signal"))
            .await
            .expect("WebSocket handshake");
        let join = serde_json::json!({"join": {"room": "caf\u{e9}", "identity": "jose\u{301}"}});
        ws.send(Message::text(join.to_string()))
            .await
            .expect("sent");
        // The same identity in its other form: this join replaces the WHIP one.
        let joined = next_json(&mut ws, "join").await;
        assert_eq!(
            joined["join"]["participant"]["identity"], "jos\u{e9}",
            "{joined}"
        );
    });
    // A session is ended through either form of the room's name.
    let created = post_offer(http, "/whip/caf%C3%A9?identity=ann", &offer);
    assert_eq!(created.status, 201, "{created:?}");
    let location = created.header("location").expect("a Location").to_owned();
    let decomposed = location.replacen("caf%C3%A9", "cafe%CC%81", 1);
    assert_reply(
        &request(http, "DELETE", &decomposed, None, b""),
        200,
        "ended",
    );
}

#[test]
fn a_query_escape_that_is_not_utf8_is_refused() {
    let mut node = grpc_node::node_with_room("lobby");
    let http = node.http;
    let offer = fixture_offer("chromium156_data_offer.sdp");
    for (path, mention) in [
        ("/whip/lobby?identity=%ff", "?identity= is not UTF-8"),
        ("/whep/lobby?identity=%fe", "?identity= is not UTF-8"),
        ("/whip/lobby?identity=ok&name=%C3", "?name= is not UTF-8"),
        ("/whip/lobby?identity=a&identity=b", "more than once"),
    ] {
        assert_reply(&post_offer(http, path, &offer), 400, mention);
    }
    // As in the path.
    assert_eq!(post_offer(http, "/whip/%ff", &offer).status, 400);
    let rooms = &mut node.rooms;
    node.runtime.block_on(async {
        assert_eq!(grpc_node::participants(rooms, "lobby").await, 0);
    });
    // Valid escapes and `+` still decode.
    let created = post_offer(http, "/whip/lobby?identity=al%C3%A9+x&name=A+B", &offer);
    assert_eq!(created.status, 201, "{created:?}");
    node.runtime.block_on(async {
        let listed = rooms
            .list_participants(shoal_proto::v1::ListParticipantsRequest {
                room: "lobby".into(),
                ..Default::default()
            })
            .await
            .expect("listed")
            .into_inner();
        let who: Vec<_> = listed
            .participants
            .iter()
            .map(|p| (p.identity.as_str(), p.name.as_str()))
            .collect();
        assert_eq!(who, [("al\u{e9} x", "A B")]);
    });
}

#[test]
fn an_oversized_signalling_message_ends_the_session_with_an_error() {
    let mut node = grpc_node::node_with_room("lobby");
    let http = node.http;
    let channel = node.runtime.block_on(grpc_node::connect(
        node.control.grpc_addr().expect("gRPC is on"),
    ));
    let rooms = &mut node.rooms;
    node.runtime.block_on(async {
        // /signal: over 64 KiB, an error message says what was refused, then the
        // close frame says 1009 (RFC 6455 §7.4.1); the participant has left.
        let mut ws = joined_socket(http, "lobby", "big-ws").await;
        let big = serde_json::json!({"offer": {"sdp": "x".repeat(100 * 1024)}});
        let _ = ws.send(Message::text(big.to_string())).await;
        let e = next_json(&mut ws, "error").await;
        assert_eq!(e["error"]["code"], "resource_exhausted", "{e}");
        let message = e["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("65536 bytes"), "{e}");
        match next_frame(&mut ws).await {
            Some(Message::Close(Some(close))) => {
                assert_eq!(close.code, CloseCode::Size, "{close:?}");
                assert_eq!(close.reason.as_str(), "message too big");
            }
            other => panic!("expected a close frame, got {other:?}"),
        }
        assert_eq!(grpc_node::participants(rooms, "lobby").await, 0);

        // Before join too.
        let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{http}/signal"))
            .await
            .expect("WebSocket handshake");
        let big = format!(r#"{{"join": {{"room": "{}"}}}}"#, "x".repeat(100 * 1024));
        let _ = ws.send(Message::text(big)).await;
        let e = next_json(&mut ws, "error").await;
        assert_eq!(e["error"]["code"], "resource_exhausted", "{e}");
        assert!(
            matches!(next_frame(&mut ws).await, Some(Message::Close(Some(c))) if c.code == CloseCode::Size)
        );

        // SignalService: the stream ends with RESOURCE_EXHAUSTED, not OK.
        let mut grpc = GrpcSession::open(channel).await;
        grpc.join("lobby", "big-grpc").await;
        assert_eq!(grpc_node::participants(rooms, "lobby").await, 1);
        // Over `--max-grpc-message-bytes` (its default).
        let over = shoal_server::control::DEFAULT_MAX_GRPC_MESSAGE_BYTES + 1024;
        grpc.send(signal_request::Message::Offer(SessionDescription {
            sdp: "x".repeat(over),
            id: 0,
        }))
        .await;
        let status = loop {
            match grpc.next().await {
                Ok(Some(signal_response::Message::Participant(_))) => {}
                Ok(other) => panic!("expected the stream to fail, got {other:?}"),
                Err(status) => break status,
            }
        };
        assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
        assert!(status.message().contains("too large"), "{status:?}");
        assert_eq!(grpc_node::participants(rooms, "lobby").await, 0);
    });
}
