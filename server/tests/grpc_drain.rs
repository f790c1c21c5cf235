//! `NodeService.Drain` turns the node away from new work, as SIGTERM does (the
//! process side is `drain_tells_participants`): it needs a token granting roomCreate
//! and roomList; the first call starts the drain and later ones say it was running;
//! gRPC health turns NOT_SERVING, `/healthz` 503 `draining`, CreateRoom and a WHIP
//! join are refused with UNAVAILABLE / 503; GetNodeInfo still answers; with no one
//! connected the drain is over at once.

mod grpc_node;
mod http_client;
mod tokens;

use std::time::{Duration, Instant};

use shoal_proto::v1::node_service_client::NodeServiceClient;
use shoal_proto::v1::room_service_client::RoomServiceClient;
use shoal_proto::v1::{CreateRoomRequest, DrainRequest, GetNodeInfoRequest};
use shoal_server::config::Config;
use shoal_server::control::drain::DRAINING;
use tonic::Code;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

const ROOM: &str = "drain-rpc";

fn with_token<T>(message: T, token: &str) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.metadata_mut().insert(
        "authorization",
        format!("Bearer {token}").parse().expect("ASCII"),
    );
    request
}

#[test]
fn grpc_drain() {
    let (_server, control) = grpc_node::start_node(Config {
        api_keys: vec![tokens::api_key()],
        ..Config::default()
    });
    let http = control.http_addr().expect("HTTP is on");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let channel = grpc_node::connect(control.grpc_addr().expect("gRPC is on")).await;
        let mut node = NodeServiceClient::new(channel.clone());
        let mut rooms = RoomServiceClient::new(channel.clone());
        let mut health = HealthClient::new(channel);
        let operator = tokens::token("operator", tokens::operator(ROOM));

        // A token that only creates rooms may not drain the node.
        let creator = tokens::token(
            "creator",
            shoal_server::control::auth::VideoGrant {
                room_create: true,
                ..Default::default()
            },
        );
        let refused = node
            .drain(with_token(DrainRequest {}, &creator))
            .await
            .expect_err("roomCreate alone");
        assert_eq!(refused.code(), Code::PermissionDenied, "{refused:?}");
        assert!(!control.is_draining());

        let first = node
            .drain(with_token(DrainRequest {}, &operator))
            .await
            .expect("Drain")
            .into_inner();
        assert!(first.started);
        let again = node
            .drain(with_token(DrainRequest {}, &operator))
            .await
            .expect("Drain again")
            .into_inner();
        assert!(!again.started, "a second Drain starts nothing");
        assert!(control.is_draining());

        // Load balancers see it: gRPC health and /healthz.
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let status = health
                .check(HealthCheckRequest {
                    service: String::new(),
                })
                .await
                .expect("health")
                .into_inner()
                .status;
            if status == ServingStatus::NotServing as i32 {
                break;
            }
            assert!(Instant::now() < deadline, "health still {status}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let healthz = http_client::request(http, "GET", "/healthz", None, b"");
        assert_eq!(healthz.status, 503, "{healthz:?}");
        assert_eq!(healthz.body.trim(), "draining");

        // No new room, no new session.
        let create = rooms
            .create_room(with_token(
                CreateRoomRequest {
                    name: ROOM.into(),
                    ..CreateRoomRequest::default()
                },
                &operator,
            ))
            .await
            .expect_err("CreateRoom while draining");
        assert_eq!(create.code(), Code::Unavailable, "{create:?}");
        assert_eq!(create.message(), DRAINING);
        let join = tokens::token("alice", tokens::join(ROOM));
        let offer = http_client::fixture_offer("chromium156_data_offer.sdp");
        let whip = http_client::request_with_headers(
            http,
            "POST",
            &format!("/whip/{ROOM}"),
            &[
                ("Content-Type", "application/sdp"),
                ("Authorization", &format!("Bearer {join}")),
            ],
            offer.as_bytes(),
        );
        assert_eq!(whip.status, 503, "{whip:?}");
        assert!(whip.body.contains("draining"), "{whip:?}");

        // The node still reports on itself.
        let info = node
            .get_node_info(with_token(GetNodeInfoRequest {}, &operator))
            .await
            .expect("GetNodeInfo while draining")
            .into_inner();
        assert_eq!(info.participants, 0);
    });
    // Nobody was connected: the drain is over as soon as the shards say so.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !control.is_drained() {
        assert!(Instant::now() < deadline, "the drain never ended");
        std::thread::sleep(Duration::from_millis(20));
    }
}
