//! Acceptance: a stock WHIP client (aiortc, one URL and, with API keys, one token)
//! publishes into a room nobody created, a WHEP player receives its video, and the
//! room closes after its empty timeout once both have left. In open mode and with
//! an access token alike. With `--auto-create-rooms false`, a join to a room that is
//! not open is 404, as before.

mod aiortc;
mod grpc_node;
mod http_client;
mod tokens;

use std::num::NonZeroUsize;
use std::time::{Duration, Instant};

use aiortc::{CLIENT_TIMEOUT, MARGIN, VideoClient};
use serde_json::Value;
use shoal_proto::v1::GetRoomRequest;
use shoal_server::config::Config;
use tonic::Code;

/// The empty timeout of rooms opened by a join, in seconds.
const EMPTY_TIMEOUT_SECS: u32 = 2;
/// Frames the player must decode.
const FRAMES: u64 = 30;

/// Publishes into `room` (which must not be open), plays it back, and waits for the
/// room to close; `token` is `Some` on a node with API keys.
fn publish_into_new_room(keys: bool) {
    let room = if keys { "made-with-token" } else { "made-open" };
    let config = Config {
        shards: NonZeroUsize::MIN,
        room_empty_timeout: EMPTY_TIMEOUT_SECS,
        api_keys: if keys {
            vec![tokens::api_key()]
        } else {
            Vec::new()
        },
        ..Config::default()
    };
    let grpc_node::RoomNode {
        server: _server,
        control: _control,
        http,
        runtime,
        mut rooms,
    } = grpc_node::node_in(config);
    let operator = tokens::token("operator", tokens::operator(room));
    let mut room_state = || {
        let mut request = tonic::Request::new(GetRoomRequest { name: room.into() });
        if keys {
            let bearer = format!("Bearer {operator}").parse().unwrap();
            request.metadata_mut().insert("authorization", bearer);
        }
        runtime.block_on(rooms.get_room(request))
    };
    assert_eq!(
        room_state().expect_err("not open yet").code(),
        Code::NotFound
    );

    let token_args = |identity: &str| -> Vec<String> {
        if keys {
            vec![
                "--token".into(),
                tokens::token(identity, tokens::join(room)),
            ]
        } else {
            Vec::new()
        }
    };
    let args = token_args("camera");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut publisher = VideoClient::start("publish", &format!("http://{http}/whip/{room}"), &args);
    let up = publisher.next_report(Instant::now() + CLIENT_TIMEOUT + MARGIN, "publisher");
    assert_eq!(up["event"], "connected", "publisher: {up}");
    let opened = room_state().expect("the join opened the room").into_inner();
    assert_eq!(opened.num_participants, 1, "{opened:?}");
    assert_eq!(opened.empty_timeout_secs, EMPTY_TIMEOUT_SECS, "{opened:?}");

    let frames = FRAMES.to_string();
    let mut args = token_args("viewer");
    args.extend(["--frames".to_owned(), frames]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut player = VideoClient::start("subscribe", &format!("http://{http}/whep/{room}"), &args);
    let deadline = Instant::now() + CLIENT_TIMEOUT + MARGIN;
    let got = player.next_report(deadline, "player");
    assert!(player.exit_ok(deadline, "the player"), "{got}");
    assert_eq!(got["error"], Value::Null, "{got}");
    assert!(got["video_frames"].as_u64().unwrap_or(0) >= FRAMES, "{got}");

    let done = publisher.stop_publishing();
    assert_eq!(done["connection"], "connected", "publisher: {done}");

    // Both left by DELETE (with their tokens): the room empties, then closes after
    // its empty timeout, not before.
    let deadline = Instant::now() + Duration::from_secs(10);
    let emptied = loop {
        let state = room_state().expect("still open").into_inner();
        if state.num_participants == 0 {
            break Instant::now();
        }
        assert!(
            Instant::now() < deadline,
            "the room should empty: {state:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let timeout = Duration::from_secs(EMPTY_TIMEOUT_SECS.into());
    let deadline = emptied + timeout + Duration::from_secs(3);
    let closed = loop {
        match room_state() {
            Err(status) if status.code() == Code::NotFound => break Instant::now(),
            Err(status) => panic!("{status:?}"),
            Ok(_) => {}
        }
        assert!(Instant::now() < deadline, "the room should close");
        std::thread::sleep(Duration::from_millis(50));
    };
    // The directory closes rooms on a one-second tick.
    assert!(
        closed + Duration::from_secs(1) >= emptied + timeout,
        "closed {:?} after emptying, before its timeout",
        closed - emptied
    );
}

#[test]
fn whip_creates_room_on_join() {
    publish_into_new_room(false);
    publish_into_new_room(true);

    // Rooms only by CreateRoom: a join to a room that is not open is 404.
    let (_server, control) = grpc_node::start_node(Config {
        shards: NonZeroUsize::MIN,
        auto_create_rooms: false,
        ..Config::default()
    });
    let http = control.http_addr().expect("HTTP is on");
    let offer = http_client::fixture_offer("chromium156_data_offer.sdp");
    let reply = http_client::post_offer(http, "/whip/nowhere", &offer);
    assert_eq!(reply.status, 404, "{reply:?}");
    assert!(reply.body.contains("not found"), "{reply:?}");
}
