//! Acceptance: rooms are created, read, listed and deleted, and participants listed
//! and removed, over a real gRPC connection to the control plane of a node with real
//! shards; every refusal carries the gRPC status code its cause calls for.

mod grpc_node;

use grpc_node::connect;
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::time::{SystemTime, UNIX_EPOCH};

use shoal_proto::v1::node_service_client::NodeServiceClient;
use shoal_proto::v1::room_service_client::RoomServiceClient;
use shoal_proto::v1::{
    CreateRoomRequest, DeleteRoomRequest, GetNodeInfoRequest, GetRoomRequest,
    ListParticipantsRequest, ListRoomsRequest, RemoveParticipantRequest, SendDataRequest,
};
use shoal_server::config::Config;
use shoal_server::control::ControlPlane;
use shoal_server::driver::Server;
use tonic::{Code, Status};

const MAX_ROOMS: u32 = 3;
const MAX_PARTICIPANTS: u32 = 50;

fn start_node() -> (Server, ControlPlane) {
    grpc_node::start_node(Config {
        shards: NonZeroUsize::new(2).expect("non-zero"),
        max_rooms: MAX_ROOMS,
        max_participants_per_room: MAX_PARTICIPANTS,
        ..Config::default()
    })
}

#[track_caller]
fn assert_code<T: std::fmt::Debug>(result: Result<T, Status>, code: Code, mention: &str) {
    match result {
        Ok(v) => panic!("expected {code:?}, got {v:?}"),
        Err(status) => {
            assert_eq!(status.code(), code, "{status:?}");
            assert!(
                status.message().contains(mention),
                "the message {:?} should mention {mention:?}",
                status.message()
            );
        }
    }
}

fn create(name: &str) -> CreateRoomRequest {
    CreateRoomRequest {
        name: name.into(),
        ..CreateRoomRequest::default()
    }
}

fn unix_ms_now() -> u64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970");
    u64::try_from(since.as_millis()).expect("fits")
}

#[test]
fn grpc_room_lifecycle() {
    let (server, control) = start_node();
    let addr = control.grpc_addr().expect("gRPC is on");
    assert!(addr.ip().is_loopback() && addr.port() != 0, "{addr}");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a client runtime");
    runtime.block_on(async {
        let channel = connect(addr).await;
        let mut rooms = RoomServiceClient::new(channel.clone());

        // Create, with every setting given, then with the node's defaults.
        let before = unix_ms_now();
        let lobby = rooms
            .create_room(CreateRoomRequest {
                name: "lobby".into(),
                max_participants: 8,
                empty_timeout_secs: 60,
                metadata: r#"{"topic":"rust"}"#.into(),
                ..CreateRoomRequest::default()
            })
            .await
            .expect("create lobby")
            .into_inner();
        assert_eq!(lobby.name, "lobby");
        assert_eq!(lobby.max_participants, 8);
        assert_eq!(lobby.empty_timeout_secs, 60);
        assert_eq!(lobby.metadata, r#"{"topic":"rust"}"#);
        assert_eq!(lobby.num_participants, 0);
        // The node clock and ours agree to within a second or so.
        assert!(
            lobby.creation_time_unix_ms + 2_000 >= before
                && lobby.creation_time_unix_ms <= unix_ms_now() + 2_000,
            "creation time {} vs {before}",
            lobby.creation_time_unix_ms
        );
        let annex = rooms
            .create_room(create("annex"))
            .await
            .expect("create annex")
            .into_inner();
        assert_eq!(annex.max_participants, MAX_PARTICIPANTS);
        assert_eq!(annex.empty_timeout_secs, 300);

        // ALREADY_EXISTS for a name in use.
        assert_code(
            rooms.create_room(create("lobby")).await,
            Code::AlreadyExists,
            "lobby",
        );

        // INVALID_ARGUMENT for what breaks the rules; nothing is created.
        assert_code(
            rooms.create_room(create("")).await,
            Code::InvalidArgument,
            "empty",
        );
        assert_code(
            rooms.create_room(create(&"x".repeat(129))).await,
            Code::InvalidArgument,
            "129 bytes",
        );
        assert_code(
            rooms.create_room(create("line\nbreak")).await,
            Code::InvalidArgument,
            "control",
        );
        assert_code(
            rooms
                .create_room(CreateRoomRequest {
                    metadata: "m".repeat(8193),
                    ..create("big")
                })
                .await,
            Code::InvalidArgument,
            "metadata",
        );
        assert_code(
            rooms
                .create_room(CreateRoomRequest {
                    max_participants: MAX_PARTICIPANTS + 1,
                    ..create("crowd")
                })
                .await,
            Code::InvalidArgument,
            "max_participants",
        );
        assert_code(
            rooms
                .create_room(CreateRoomRequest {
                    empty_timeout_secs: 86_401,
                    ..create("forever")
                })
                .await,
            Code::InvalidArgument,
            "empty timeout",
        );

        // RESOURCE_EXHAUSTED past --max-rooms.
        rooms
            .create_room(create("third"))
            .await
            .expect("create third");
        assert_code(
            rooms.create_room(create("fourth")).await,
            Code::ResourceExhausted,
            "3 rooms",
        );

        // Get.
        let got = rooms
            .get_room(GetRoomRequest {
                name: "lobby".into(),
            })
            .await
            .expect("get lobby")
            .into_inner();
        assert_eq!(got, lobby);
        assert_code(
            rooms
                .get_room(GetRoomRequest {
                    name: "nowhere".into(),
                })
                .await,
            Code::NotFound,
            "nowhere",
        );
        assert_code(
            rooms.get_room(GetRoomRequest { name: "".into() }).await,
            Code::InvalidArgument,
            "room name",
        );

        // List, in name order, two pages of two.
        let first = rooms
            .list_rooms(ListRoomsRequest {
                page_size: 2,
                page_token: String::new(),
            })
            .await
            .expect("list rooms")
            .into_inner();
        let names: Vec<&str> = first.rooms.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["annex", "lobby"]);
        assert_eq!(first.next_page_token, "lobby");
        let second = rooms
            .list_rooms(ListRoomsRequest {
                page_size: 2,
                page_token: first.next_page_token,
            })
            .await
            .expect("list rooms, page 2")
            .into_inner();
        let names: Vec<&str> = second.rooms.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["third"]);
        assert_eq!(second.next_page_token, "", "the last page");

        // Participants: nobody has joined (signalling is not used here), so the room
        // is empty, and acting on someone who is not there is NOT_FOUND.
        let members = rooms
            .list_participants(ListParticipantsRequest {
                room: "lobby".into(),
                ..ListParticipantsRequest::default()
            })
            .await
            .expect("list participants")
            .into_inner();
        assert!(members.participants.is_empty());
        assert_eq!(members.next_page_token, "");
        assert_code(
            rooms
                .list_participants(ListParticipantsRequest {
                    room: "nowhere".into(),
                    ..ListParticipantsRequest::default()
                })
                .await,
            Code::NotFound,
            "nowhere",
        );
        assert_code(
            rooms
                .remove_participant(RemoveParticipantRequest {
                    room: "lobby".into(),
                    identity: "alice".into(),
                })
                .await,
            Code::NotFound,
            "no participant \"alice\"",
        );
        assert_code(
            rooms
                .remove_participant(RemoveParticipantRequest {
                    room: "nowhere".into(),
                    identity: "alice".into(),
                })
                .await,
            Code::NotFound,
            "room \"nowhere\" not found",
        );
        assert_code(
            rooms
                .remove_participant(RemoveParticipantRequest {
                    room: "lobby".into(),
                    identity: String::new(),
                })
                .await,
            Code::InvalidArgument,
            "identity",
        );

        // SendData: to the room reaches its (zero) members; to someone absent is
        // NOT_FOUND; an oversized payload is INVALID_ARGUMENT.
        let sent = rooms
            .send_data(SendDataRequest {
                room: "lobby".into(),
                identity: String::new(),
                channel: "chat".into(),
                payload: b"hello".to_vec(),
            })
            .await
            .expect("send to the room")
            .into_inner();
        assert_eq!(sent.recipients, 0);
        assert_code(
            rooms
                .send_data(SendDataRequest {
                    room: "lobby".into(),
                    identity: "bob".into(),
                    channel: "chat".into(),
                    payload: b"hello".to_vec(),
                })
                .await,
            Code::NotFound,
            "no participant \"bob\"",
        );
        assert_code(
            rooms
                .send_data(SendDataRequest {
                    room: "lobby".into(),
                    identity: String::new(),
                    channel: "chat".into(),
                    payload: vec![0; 65_537],
                })
                .await,
            Code::InvalidArgument,
            "payload",
        );
        assert_code(
            rooms
                .send_data(SendDataRequest {
                    room: "lobby".into(),
                    channel: String::new(),
                    ..SendDataRequest::default()
                })
                .await,
            Code::InvalidArgument,
            "channel",
        );

        // The node reports its shards and rooms.
        let info = NodeServiceClient::new(channel.clone())
            .get_node_info(GetNodeInfoRequest {})
            .await
            .expect("node info")
            .into_inner();
        assert_eq!(info.version, env!("CARGO_PKG_VERSION"));
        assert_eq!((info.rooms, info.participants, info.max_rooms), (3, 0, 3));
        assert_eq!(info.shards.len(), 2);
        for (i, shard) in info.shards.iter().enumerate() {
            assert_eq!(shard.index as usize, i);
            let udp: SocketAddr = shard.udp_addr.parse().expect("a socket address");
            assert_eq!(Some(udp), server.local_addr(i));
            assert_eq!(shard.bound_addrs, [udp.to_string()]);
            // Bound to 127.0.0.1, the shard announces just that.
            assert_eq!(shard.announced_addrs, [udp.to_string()]);
            assert_eq!(shard.peers, 0);
            assert_eq!(shard.load, 0.0);
        }

        // Delete: the room is gone, its name and its slot are free again.
        let deleted = rooms
            .delete_room(DeleteRoomRequest {
                name: "lobby".into(),
            })
            .await
            .expect("delete lobby")
            .into_inner();
        assert_eq!(deleted.participants_removed, 0);
        assert_code(
            rooms
                .delete_room(DeleteRoomRequest {
                    name: "lobby".into(),
                })
                .await,
            Code::NotFound,
            "lobby",
        );
        assert_code(
            rooms
                .get_room(GetRoomRequest {
                    name: "lobby".into(),
                })
                .await,
            Code::NotFound,
            "lobby",
        );
        rooms
            .create_room(create("fourth"))
            .await
            .expect("a deleted room's slot is free");
        let all = rooms
            .list_rooms(ListRoomsRequest::default())
            .await
            .expect("list rooms")
            .into_inner();
        let names: Vec<&str> = all.rooms.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["annex", "fourth", "third"]);
    });
    drop(runtime);

    control.shutdown().expect("the control plane stops cleanly");
    server.shutdown().expect("the shards stop cleanly");
}
