//! The handlers called directly, with participants placed in the directory by hand
//! (signalling will do that), over real shards: removing a participant or deleting
//! its room takes its peer off its shard.

use std::num::NonZeroUsize;

use super::*;
use crate::config::Config;
use crate::control::rooms::{ParticipantSpec, RoomLimits};
use crate::driver::{Server, lite_peer};

const LIMITS: RoomLimits = RoomLimits {
    max_rooms: 10,
    max_participants_per_room: 10,
    default_empty_timeout: Duration::from_secs(300),
};

/// Two shards, a room "r" with alice (shard 0, peer 1) and bob (shard 1, peer 2),
/// whose peers exist on their shards.
fn setup() -> (Server, ControlApi, Arc<ControlState>) {
    let config = Config {
        shards: NonZeroUsize::new(2).unwrap(),
        udp_port_base: 0,
        ..Config::default()
    };
    let server = Server::start(&config).unwrap();
    let senders = server.command_senders();
    senders[0].add_peer(lite_peer(1, "alice")).unwrap();
    senders[1].add_peer(lite_peer(2, "bobby")).unwrap();
    let state = Arc::new(ControlState::new(RoomDirectory::new(LIMITS), senders, 100));
    {
        let now = state.clock().now();
        let mut rooms = state.rooms();
        rooms
            .create(
                RoomSpec {
                    name: "r".into(),
                    ..RoomSpec::default()
                },
                now,
            )
            .unwrap();
        for (identity, shard, peer) in [("alice", 0, 1), ("bob", 1, 2)] {
            let spec = ParticipantSpec {
                identity: identity.into(),
                name: String::new(),
                metadata: String::new(),
                shard,
                peer: PeerId(peer),
            };
            rooms.join("r", spec, now).unwrap();
        }
    }
    (server, ControlApi::new(state.clone()), state)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn peers_on(server: &Server, shard: usize) -> usize {
    server.command_sender(shard).unwrap().stats().unwrap().peers
}

#[test]
fn removing_a_participant_takes_its_peer_off_its_shard() {
    let (server, api, state) = setup();
    runtime().block_on(async {
        let listed = api
            .list_participants(Request::new(v1::ListParticipantsRequest {
                room: "r".into(),
                ..Default::default()
            }))
            .await
            .unwrap()
            .into_inner();
        let ids: Vec<(&str, u32, u64)> = listed
            .participants
            .iter()
            .map(|p| (p.identity.as_str(), p.shard, p.peer_id))
            .collect();
        assert_eq!(ids, [("alice", 0, 1), ("bob", 1, 2)]);
        assert_eq!(
            listed.participants[0].state,
            i32::from(v1::ParticipantState::Joining)
        );

        // SendData to someone present is accepted (nobody receives yet).
        let sent = api
            .send_data(Request::new(v1::SendDataRequest {
                room: "r".into(),
                identity: "bob".into(),
                channel: "chat".into(),
                payload: b"hi".to_vec(),
            }))
            .await
            .unwrap();
        assert_eq!(sent.into_inner().recipients, 0);

        api.remove_participant(Request::new(v1::RemoveParticipantRequest {
            room: "r".into(),
            identity: "bob".into(),
        }))
        .await
        .unwrap();
        let again = api
            .remove_participant(Request::new(v1::RemoveParticipantRequest {
                room: "r".into(),
                identity: "bob".into(),
            }))
            .await;
        assert_eq!(again.unwrap_err().code(), tonic::Code::NotFound);
    });
    assert_eq!((peers_on(&server, 0), peers_on(&server, 1)), (1, 0));
    assert_eq!(state.rooms().participant_count(), 1);
    server.shutdown().unwrap();
}

#[test]
fn deleting_a_room_disconnects_everyone() {
    let (server, api, state) = setup();
    let response = runtime().block_on(async {
        api.delete_room(Request::new(v1::DeleteRoomRequest { name: "r".into() }))
            .await
            .unwrap()
            .into_inner()
    });
    assert_eq!(response.participants_removed, 2);
    assert_eq!((peers_on(&server, 0), peers_on(&server, 1)), (0, 0));
    assert_eq!(state.rooms().room_count(), 0);
    assert_eq!(state.rooms().participant_count(), 0);
    server.shutdown().unwrap();
}

#[test]
fn node_info_reports_peers_and_load() {
    let (server, api, _state) = setup();
    let info = runtime().block_on(async {
        api.get_node_info(Request::new(v1::GetNodeInfoRequest {}))
            .await
            .unwrap()
            .into_inner()
    });
    assert_eq!((info.rooms, info.participants), (1, 2));
    let peers: Vec<(u32, u32, u32)> = info
        .shards
        .iter()
        .map(|s| (s.index, s.peers, s.max_peers))
        .collect();
    assert_eq!(peers, [(0, 1, 100), (1, 1, 100)]);
    assert_eq!(info.shards[0].load, 0.01);
    assert_eq!(info.load, 0.01);
    server.shutdown().unwrap();
}

#[test]
fn a_stopped_shard_makes_node_info_unavailable() {
    let (server, api, _state) = setup();
    // Keep the handles, stop the threads: the shards' channels disconnect.
    server.shutdown().unwrap();
    let status = runtime()
        .block_on(api.get_node_info(Request::new(v1::GetNodeInfoRequest {})))
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    assert!(status.message().contains("shard 0"), "{status:?}");
}

#[test]
fn room_errors_map_to_status_codes() {
    use tonic::Code;
    let cases = [
        (RoomError::RoomNotFound("r".into()), Code::NotFound),
        (
            RoomError::ParticipantNotFound {
                room: "r".into(),
                identity: "i".into(),
            },
            Code::NotFound,
        ),
        (RoomError::RoomExists("r".into()), Code::AlreadyExists),
        (RoomError::TooManyRooms(1), Code::ResourceExhausted),
        (
            RoomError::RoomFull {
                room: "r".into(),
                max: 1,
            },
            Code::ResourceExhausted,
        ),
        (RoomError::MetadataTooLong(9000), Code::InvalidArgument),
        (
            RoomError::EmptyTimeoutTooLong(Duration::from_secs(90_000)),
            Code::InvalidArgument,
        ),
    ];
    for (error, code) in cases {
        let message = error.to_string();
        let status = Status::from(error);
        assert_eq!((status.code(), status.message()), (code, message.as_str()));
    }
}
