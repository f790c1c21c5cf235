//! Acceptance: a second join with an identity already in the room replaces the
//! first, as LiveKit does. An aiortc WHEP player "viewer" watches an aiortc
//! publisher; a second player joins as "viewer": it receives the room's video, the
//! first one's peer leaves its shard (its media stops) and its session is gone. Over
//! `/signal`, the replaced participant hears `leave` with DUPLICATE_IDENTITY and its
//! socket closes, and the room announces the newcomer to the others.

mod aiortc;
mod grpc_node;
mod signal_ws;

use signal_ws::{Ws, next_json};
use std::num::NonZeroUsize;
use std::time::{Duration, Instant};

use aiortc::{CLIENT_TIMEOUT, MARGIN, VideoClient};
use futures_util::SinkExt;
use serde_json::Value;
use shoal_proto::v1::DisconnectReason;
use shoal_proto::v1::room_service_client::RoomServiceClient;
use shoal_proto::v1::{ListParticipantsRequest, Participant};
use shoal_server::config::Config;
use tokio_tungstenite::tungstenite::Message;

const ROOM: &str = "dup";

async fn join(http: std::net::SocketAddr, identity: &str) -> (Ws, Value) {
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{http}/signal"))
        .await
        .expect("WebSocket handshake");
    let join = serde_json::json!({"join": {"room": ROOM, "identity": identity}});
    ws.send(Message::text(join.to_string())).await.unwrap();
    let joined = next_json(&mut ws).await.expect("joined");
    assert!(joined.get("join").is_some(), "{joined}");
    (ws, joined)
}

fn participants(
    runtime: &tokio::runtime::Runtime,
    rooms: &mut RoomServiceClient<tonic::transport::Channel>,
) -> Vec<Participant> {
    runtime
        .block_on(rooms.list_participants(ListParticipantsRequest {
            room: ROOM.into(),
            ..ListParticipantsRequest::default()
        }))
        .expect("listed")
        .into_inner()
        .participants
}

#[test]
fn duplicate_identity_replaces_first() {
    let grpc_node::RoomNode {
        server,
        control: _control,
        http,
        runtime,
        mut rooms,
    } = grpc_node::node_in(Config {
        shards: NonZeroUsize::MIN,
        ..Config::default()
    });

    // Signalling: the first "sam" hears why it goes; "ann" hears sam come again.
    let _still_joined = runtime.block_on(async {
        let (mut ann, _) = join(http, "ann").await;
        let (mut first, _) = join(http, "sam").await;
        let joined = next_json(&mut ann).await.expect("sam joined");
        assert_eq!(joined["participant"]["participant"]["identity"], "sam");
        let (second, joined) = join(http, "sam").await;
        assert_eq!(joined["join"]["participant"]["identity"], "sam", "{joined}");
        let leave = next_json(&mut first).await.expect("a leave message");
        assert_eq!(
            leave["leave"]["reason"],
            DisconnectReason::DuplicateIdentity as i32,
            "{leave}"
        );
        assert_eq!(next_json(&mut first).await, None, "the first socket closes");
        // ann: sam left (DUPLICATE_IDENTITY), then sam joined again.
        let left = next_json(&mut ann).await.expect("sam left");
        assert_eq!(
            left["participant"]["reason"],
            DisconnectReason::DuplicateIdentity as i32,
            "{left}"
        );
        let again = next_json(&mut ann).await.expect("sam joined again");
        assert_eq!(
            again["participant"]["participant"]["identity"], "sam",
            "{again}"
        );
        (ann, second)
    });
    let sams = participants(&runtime, &mut rooms)
        .into_iter()
        .filter(|p| p.identity == "sam")
        .count();
    assert_eq!(sams, 1);

    // Media: a publisher, a first player, then a second player of the same identity.
    let mut publisher = VideoClient::start(
        "publish",
        &format!("http://{http}/whip/{ROOM}?identity=camera"),
        &[],
    );
    let up = publisher.next_report(Instant::now() + CLIENT_TIMEOUT + MARGIN, "publisher");
    assert_eq!(up["event"], "connected", "publisher: {up}");
    let whep = format!("http://{http}/whep/{ROOM}?identity=viewer");
    let first = VideoClient::start(
        "subscribe",
        &whep,
        &["--frames", "100000", "--progress", "10"],
    );
    let progress = first.next_report(Instant::now() + CLIENT_TIMEOUT + MARGIN, "first player");
    assert_eq!(progress["event"], "frames", "first player: {progress}");
    let first_peer = participants(&runtime, &mut rooms)
        .into_iter()
        .find(|p| p.identity == "viewer")
        .expect("the first viewer")
        .peer_id;

    let mut second = VideoClient::start("subscribe", &whep, &["--frames", "30"]);
    let deadline = Instant::now() + CLIENT_TIMEOUT + MARGIN;
    let got = second.next_report(deadline, "second player");
    assert!(second.exit_ok(deadline, "the second player"), "{got}");
    assert_eq!(got["error"], Value::Null, "{got}");
    assert!(got["video_frames"].as_u64().unwrap_or(0) >= 30, "{got}");

    // The first viewer's peer left its shard: shoal sends it nothing more. (The
    // second one has left by now too; the camera and the signalling clients' peers
    // are what is left: two never offered, so the shard holds the camera alone.)
    let viewers: Vec<u64> = participants(&runtime, &mut rooms)
        .into_iter()
        .filter(|p| p.identity == "viewer")
        .map(|p| p.peer_id)
        .collect();
    assert!(!viewers.contains(&first_peer), "{viewers:?}");
    grpc_node::wait_for_shards(&server, Duration::from_secs(5), "one peer left", |r| {
        r[0].peers == 1
    });
    // And the first player's frames stop: once it has worked through what reached it
    // before the replacement (a loaded machine may decode that late), it goes quiet.
    // At 30 fps with a progress line per 10 frames, media still flowing would print
    // one every third of a second; two seconds without one is silence.
    let quiet = Duration::from_secs(2);
    let give_up = Instant::now() + Duration::from_secs(15);
    let mut late = 0;
    let went_quiet = loop {
        if Instant::now() >= give_up {
            break false;
        }
        match first.try_report(Instant::now() + quiet) {
            Some(line) if line["event"] == "frames" => late += 1,
            // Silence, or the player ended: no more frames either way.
            Some(_) | None => break true,
        }
    };
    assert!(
        went_quiet,
        "the first player still got frames 15 s after the replacement ({late} progress \
         reports)"
    );

    let done = publisher.stop_publishing();
    assert_eq!(done["connection"], "connected", "publisher: {done}");
}
