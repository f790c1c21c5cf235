//! Answers over `/signal` are tied to the offers they answer (`SessionDescription.id`).
//! Two participants of one room, shoal's own client stacks signalling only: `sub`
//! (it receives) and publishers that make shoal offer `sub` their tracks.
//!
//! - `sub`'s numbered offers are answered with their ids.
//! - shoal offers `sub` the first publisher's tracks (offer n); `sub` offers again
//!   instead of answering (glare: shoal drops offer n, RFC 8829 §4.1.10.2, as it
//!   drops one that timed out) and shoal offers the tracks again (offer n + k).
//!   `sub`'s late answer to offer n is stale: no error, nothing applied,
//!   `shoal_stale_answers_total` counts it; its answer to the newer offer is then
//!   taken (a second answer to it is stale too: the offer is no longer out).
//! - An answer without an id (older clients) answers whatever offer is out, as
//!   before: the second publisher's offer is taken, and the same answer again
//!   is refused for want of an offer.

mod grpc_node;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use shoal_components::peer::PeerId;
use shoal_proto::v1::SessionDescription;
use shoal_server::endpoint::{self, MediaOffer, MediaSession, OfferShape, media_offer};
use tokio_tungstenite::tungstenite::Message;

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// The next message with `key`, or an `error` (others, such as participant and
/// track events, skipped).
async fn next(ws: &mut Ws, key: &str) -> Value {
    loop {
        let frame = tokio::time::timeout(Duration::from_secs(10), ws.next())
            .await
            .unwrap_or_else(|_| panic!("no {key} in time"));
        let Some(Ok(Message::Text(t))) = frame else {
            panic!("the socket ended: {frame:?}");
        };
        let v: Value = serde_json::from_str(&t).expect("JSON");
        if v.get(key).is_some() || v.get("error").is_some() {
            return v;
        }
    }
}

/// The next message with `key`, which must be one (not an `error`).
async fn expect(ws: &mut Ws, key: &str) -> Value {
    let v = next(ws, key).await;
    assert!(v.get(key).is_some(), "{key} expected, got {v}");
    v[key].clone()
}

async fn send(ws: &mut Ws, v: Value) {
    ws.send(Message::Text(v.to_string().into()))
        .await
        .expect("sent");
}

/// Messages are handled in order: an unknown one gets an `error` once everything
/// sent before it has been handled, so nothing else came back in between.
async fn nothing_came_back(ws: &mut Ws) {
    send(ws, json!({ "bogus": {} })).await;
    let e = next(ws, "error").await;
    assert_eq!(
        e["error"]["code"], "invalid_argument",
        "only the probe's error came back: {e}"
    );
}

/// A client stack's first offer of `shape`.
fn offer(shape: OfferShape) -> MediaOffer {
    let mut rng = endpoint::os_rng().expect("a random generator");
    media_offer(PeerId(1), [0x5a; 32], shape, &mut rng)
}

async fn connect(http: SocketAddr, identity: &str) -> Ws {
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{http}/signal"))
        .await
        .expect("WebSocket handshake");
    send(
        &mut ws,
        json!({ "join": { "room": "lobby", "identity": identity } }),
    )
    .await;
    expect(&mut ws, "join").await;
    ws
}

/// Joins a publisher whose tracks make shoal offer the room's others.
async fn publisher(http: SocketAddr, identity: &str) -> Ws {
    let mut ws = connect(http, identity).await;
    let o = offer(OfferShape::PUBLISH);
    send(&mut ws, json!({ "offer": { "sdp": o.sdp() } })).await;
    let answer = expect(&mut ws, "answer").await;
    assert_eq!(
        answer["id"], 0,
        "an unnumbered offer gets an answer without id"
    );
    ws
}

/// `/metrics`' `shoal_stale_answers_total`.
fn stale_answers(http: SocketAddr) -> u64 {
    let mut s = TcpStream::connect(http).expect("connect");
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: {http}\r\nConnection: close\r\n\r\n"
    )
    .expect("request");
    let mut text = String::new();
    s.read_to_string(&mut text).expect("response");
    text.lines()
        .find_map(|l| l.strip_prefix("shoal_stale_answers_total "))
        .unwrap_or_else(|| panic!("no shoal_stale_answers_total in\n{text}"))
        .trim()
        .parse()
        .expect("a count")
}

/// `session`'s answer to shoal's offer `o`, echoing its id.
fn answer(session: &mut MediaSession, o: &Value) -> SessionDescription {
    let o: SessionDescription = serde_json::from_value(o.clone()).expect("an offer");
    session.answer_description(&o).expect("answered").0
}

#[test]
fn signal_answers_tied_to_offers() {
    let grpc_node::RoomNode {
        http,
        runtime,
        server: _server,
        control: _control,
        ..
    } = grpc_node::node_with_room("lobby");
    runtime.block_on(async {
        let mut sub = connect(http, "sub").await;
        // Only a data channel: its own offer cannot take the room's tracks, so
        // shoal offers them (sections of its own to receive in would be filled by
        // shoal's answer to its glare offer; the unit tests of `control::media` show
        // a timed-out offer made again with the very same sections).
        let shape = OfferShape {
            data: true,
            ..OfferShape::default()
        };
        let mine = offer(shape);
        // A numbered offer: the answer names it.
        send(&mut sub, json!({ "offer": { "sdp": mine.sdp(), "id": 5 } })).await;
        let answered = expect(&mut sub, "answer").await;
        assert_eq!(answered["id"], 5, "{answered}");
        let mut session = mine
            .accept(answered["sdp"].as_str().expect("sdp"))
            .expect("the node's answer");

        // A publisher comes: shoal offers sub its tracks.
        let _first = publisher(http, "pub-1").await;
        let dropped = expect(&mut sub, "offer").await;
        let dropped_id = dropped["id"].as_u64().expect("an id");
        assert!(dropped_id >= 1, "offers are numbered from 1: {dropped}");
        // Glare: sub offers again instead of answering; shoal drops its offer,
        // answers, and offers the same sections again under a new id.
        send(&mut sub, json!({ "offer": { "sdp": mine.sdp(), "id": 6 } })).await;
        let again = expect(&mut sub, "answer").await;
        assert_eq!(again["id"], 6, "{again}");
        let current = expect(&mut sub, "offer").await;
        let current_id = current["id"].as_u64().expect("an id");
        assert!(current_id > dropped_id, "{current_id} after {dropped_id}");

        // The late answer to the dropped offer is stale: ignored, counted, and the
        // session goes on.
        assert_eq!(stale_answers(http), 0);
        let late = answer(&mut session, &dropped);
        assert_eq!(u64::from(late.id), dropped_id);
        send(&mut sub, json!({ "answer": late })).await;
        nothing_came_back(&mut sub).await;
        assert_eq!(stale_answers(http), 1);
        // The current offer's answer is taken (before, the late answer had taken
        // the offer and this one was refused for want of one).
        let right = answer(&mut session, &current);
        assert_eq!(u64::from(right.id), current_id);
        send(&mut sub, json!({ "answer": right.clone() })).await;
        nothing_came_back(&mut sub).await;
        assert_eq!(stale_answers(http), 1);
        // It was applied: the offer is no longer out, so the same answer again is
        // stale.
        send(&mut sub, json!({ "answer": right })).await;
        nothing_came_back(&mut sub).await;
        assert_eq!(stale_answers(http), 2);

        // An answer without an id answers whatever offer is out.
        let _second = publisher(http, "pub-2").await;
        let third = expect(&mut sub, "offer").await;
        assert!(third["id"].as_u64().expect("an id") > current_id, "{third}");
        let unnumbered = answer(&mut session, &third).sdp;
        send(&mut sub, json!({ "answer": { "sdp": unnumbered } })).await;
        nothing_came_back(&mut sub).await;
        // Taken: the same answer again finds no offer out, as it always did.
        send(&mut sub, json!({ "answer": { "sdp": unnumbered } })).await;
        let refused = next(&mut sub, "error").await;
        assert_eq!(refused["error"]["code"], "failed_precondition", "{refused}");
        assert_eq!(stale_answers(http), 2);
    });
}
