//! A publisher's identity is not its MediaStream id. An identity may hold spaces (any
//! Unicode up to 128 bytes); an `a=msid` stream id is `1*64token-char` (RFC 8830 §2).
//! "Alice Smith" publishes over `/signal`; the offer shoal then makes a subscriber
//! parses with shoal's own SDP parser (which refuses a bad msid), and names her audio
//! and video by one token stream id that is also their CNAME (RFC 7022 §4.1) and the
//! `stream_id` the RoomService lists. shoal's own client stack answers it.

mod grpc_node;

use std::collections::HashSet;
use std::net::SocketAddr;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use shoal_components::peer::PeerId;
use shoal_components::sdp::{MediaKind, SessionDescription};
use shoal_proto::v1::SessionDescription as Described;
use shoal_server::endpoint::{self, MediaOffer, OfferShape, media_offer};
use tokio_tungstenite::tungstenite::Message;

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

const ROOM: &str = "lobby";
const PUBLISHER: &str = "Alice Smith";

/// The next message with `key` (others skipped); an `error` fails the test.
async fn expect(ws: &mut Ws, key: &str) -> Value {
    loop {
        let frame = tokio::time::timeout(Duration::from_secs(10), ws.next())
            .await
            .unwrap_or_else(|_| panic!("no {key} in time"));
        let Some(Ok(Message::Text(t))) = frame else {
            panic!("the socket ended: {frame:?}");
        };
        let v: Value = serde_json::from_str(&t).expect("JSON");
        assert!(v.get("error").is_none(), "{key} expected, got {v}");
        if let Some(m) = v.get(key) {
            return m.clone();
        }
    }
}

async fn send(ws: &mut Ws, v: Value) {
    ws.send(Message::Text(v.to_string().into()))
        .await
        .expect("sent");
}

fn offer(shape: OfferShape) -> MediaOffer {
    let mut rng = endpoint::os_rng().expect("a random generator");
    media_offer(PeerId(1), [0x5a; 32], shape, &mut rng)
}

async fn join(http: SocketAddr, identity: &str) -> Ws {
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{http}/signal"))
        .await
        .expect("WebSocket handshake");
    send(
        &mut ws,
        json!({ "join": { "room": ROOM, "identity": identity } }),
    )
    .await;
    let joined = expect(&mut ws, "join").await;
    assert_eq!(joined["participant"]["identity"], identity, "{joined}");
    ws
}

/// Whether `s` is an RFC 8830 §2 msid-id: 1 to 64 token-chars (RFC 8866 §9).
fn is_msid_id(s: &str) -> bool {
    (1..=64).contains(&s.len())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`{|}~".contains(c))
}

#[test]
fn a_publisher_named_with_a_space_gets_a_token_stream_id() {
    let grpc_node::RoomNode {
        http,
        runtime,
        mut rooms,
        server: _server,
        control: _control,
    } = grpc_node::node_with_room(ROOM);
    runtime.block_on(async {
        // The subscriber offers only a data channel, so the room's tracks come to
        // it in offers of shoal's.
        let mut sub = join(http, "sub").await;
        let mine = offer(OfferShape {
            data: true,
            ..OfferShape::default()
        });
        send(&mut sub, json!({ "offer": { "sdp": mine.sdp() } })).await;
        let answered = expect(&mut sub, "answer").await;
        let mut session = mine
            .accept(answered["sdp"].as_str().expect("sdp"))
            .expect("the node's answer");

        let mut alice = join(http, PUBLISHER).await;
        let published = offer(OfferShape::PUBLISH);
        send(&mut alice, json!({ "offer": { "sdp": published.sdp() } })).await;
        expect(&mut alice, "answer").await;

        let offered = expect(&mut sub, "offer").await;
        let text = offered["sdp"].as_str().expect("sdp");
        let sdp = SessionDescription::parse(text)
            .unwrap_or_else(|e| panic!("shoal's offer parses ({e:?}):\n{text}"));
        let sections: Vec<_> = sdp
            .media
            .iter()
            .filter(|m| matches!(m.kind, MediaKind::Audio | MediaKind::Video) && m.port != 0)
            .collect();
        assert_eq!(sections.len(), 2, "her audio and video:\n{text}");
        let mut streams = HashSet::new();
        for m in &sections {
            let msids: Vec<_> = m.msids().collect();
            assert_eq!(msids.len(), 1, "one a=msid:\n{text}");
            let stream = &msids[0].stream_id;
            assert!(is_msid_id(stream), "{stream:?} is an msid-id");
            assert!(!stream.contains("Alice"), "not her identity: {stream}");
            // Every SSRC shoal sends with is named by the stream id (RFC 5576 §6.1),
            // so the subscriber synchronises her audio and video.
            let cnames: Vec<_> = m.ssrcs().filter(|s| s.attribute == "cname").collect();
            assert!(!cnames.is_empty(), "a=ssrc cname:\n{text}");
            for c in cnames {
                assert_eq!(c.value.as_deref(), Some(stream.as_str()), "{text}");
            }
            streams.insert(stream.clone());
        }
        assert_eq!(
            streams.len(),
            1,
            "one stream for one publisher: {streams:?}"
        );

        // shoal's own client stack takes the offer.
        let o: Described = serde_json::from_value(offered).expect("an offer");
        session.answer_description(&o).expect("the client answers");

        // The RoomService lists the same stream id for her tracks.
        let listed = grpc_node::list_participants(&mut rooms, ROOM).await;
        let her = listed
            .iter()
            .find(|p| p.identity == PUBLISHER)
            .expect("Alice is listed");
        assert_eq!(her.tracks.len(), 2, "{her:?}");
        for t in &her.tracks {
            assert!(streams.contains(&t.stream_id), "{t:?} vs {streams:?}");
        }
    });
}
