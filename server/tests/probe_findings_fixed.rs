//! Acceptance: what a probe of a running node found, each case refused or handled as
//! it should be now:
//! - an offer whose media sections share a mid (RFC 5888 §4) is refused on WHIP and
//!   on `/signal`;
//! - a WHIP session is not reached through `/whep/…` (nor a WHEP one through
//!   `/whip/…`).

mod grpc_node;
mod http_client;

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use http_client::{Reply, fixture_offer, post_offer, request, request_with_headers};
use shoal_proto::v1::signal_service_client::SignalServiceClient;
use shoal_proto::v1::{
    JoinRequest, SessionDescription, SignalRequest, SignalResponse, signal_request, signal_response,
};
use tokio_tungstenite::tungstenite::Message;

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
