//! Acceptance: a client that has no `.proto` files can use the control plane. The
//! standard health service reports SERVING for the server and each shoal service, and
//! server reflection (v1 and v1alpha) lists the shoal.v1 services it serves and hands
//! out their descriptors.

mod grpc_node;

use grpc_node::connect;
use std::num::NonZeroUsize;

use prost::Message;
use shoal_server::config::Config;
use shoal_server::control::ControlPlane;
use shoal_server::driver::Server;
use tonic::Code;
use tonic::transport::Channel;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_reflection::pb::{v1, v1alpha};

fn start_node() -> (Server, ControlPlane) {
    grpc_node::start_node(Config {
        shards: NonZeroUsize::MIN,
        ..Config::default()
    })
}

/// One v1 reflection request on its own stream, and its one response.
async fn reflect_v1(
    channel: &Channel,
    request: v1::server_reflection_request::MessageRequest,
) -> v1::server_reflection_response::MessageResponse {
    let mut client = v1::server_reflection_client::ServerReflectionClient::new(channel.clone());
    let request = v1::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(request),
    };
    let mut responses = client
        .server_reflection_info(tokio_stream::once(request))
        .await
        .expect("reflection stream")
        .into_inner();
    responses
        .message()
        .await
        .expect("a reflection response")
        .expect("the stream carries one")
        .message_response
        .expect("with a body")
}

#[test]
fn grpc_reflection_and_health() {
    let (server, control) = start_node();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a client runtime");
    runtime.block_on(async {
        let channel = connect(control.grpc_addr().expect("gRPC is on")).await;

        // Health: the server as a whole ("") and each shoal service are SERVING.
        let mut health = HealthClient::new(channel.clone());
        for service in [
            "",
            "shoal.v1.RoomService",
            "shoal.v1.NodeService",
            "shoal.v1.SignalService",
        ] {
            let status = health
                .check(HealthCheckRequest {
                    service: service.into(),
                })
                .await
                .unwrap_or_else(|e| panic!("health check {service:?}: {e:?}"))
                .into_inner()
                .status;
            assert_eq!(status, ServingStatus::Serving as i32, "{service:?}");
        }
        // A service this node does not serve is unknown to health, per the protocol.
        let unknown = health
            .check(HealthCheckRequest {
                service: "shoal.v1.MediaService".into(),
            })
            .await;
        assert_eq!(
            unknown.map(|_| ()).map_err(|s| s.code()),
            Err(Code::NotFound)
        );

        // Reflection v1: the served services are listed.
        let listed = match reflect_v1(
            &channel,
            v1::server_reflection_request::MessageRequest::ListServices(String::new()),
        )
        .await
        {
            v1::server_reflection_response::MessageResponse::ListServicesResponse(list) => list,
            other => panic!("expected a service list, got {other:?}"),
        };
        let names: Vec<&str> = listed.service.iter().map(|s| s.name.as_str()).collect();
        for name in [
            "shoal.v1.RoomService",
            "shoal.v1.NodeService",
            "shoal.v1.SignalService",
            "grpc.health.v1.Health",
            "grpc.reflection.v1.ServerReflection",
        ] {
            assert!(names.contains(&name), "{name} not in {names:?}");
        }

        // The descriptor of RoomService comes with its documentation, and the
        // descriptors it depends on can be fetched by file name.
        let files = match reflect_v1(
            &channel,
            v1::server_reflection_request::MessageRequest::FileContainingSymbol(
                "shoal.v1.RoomService".into(),
            ),
        )
        .await
        {
            v1::server_reflection_response::MessageResponse::FileDescriptorResponse(f) => f,
            other => panic!("expected descriptors, got {other:?}"),
        };
        let file = prost_types::FileDescriptorProto::decode(
            files
                .file_descriptor_proto
                .first()
                .expect("one file")
                .as_slice(),
        )
        .expect("a valid descriptor");
        assert_eq!(file.name(), "shoal/v1/room.proto");
        assert_eq!(file.package(), "shoal.v1");
        let service = file
            .service
            .iter()
            .find(|s| s.name() == "RoomService")
            .expect("RoomService in room.proto");
        let methods: Vec<&str> = service.method.iter().map(|m| m.name()).collect();
        assert_eq!(
            methods,
            [
                "CreateRoom",
                "GetRoom",
                "ListRooms",
                "DeleteRoom",
                "ListParticipants",
                "RemoveParticipant",
                "SendData",
                "UpdateSubscriptions",
                "MutePublishedTrack"
            ]
        );
        assert!(
            file.source_code_info
                .as_ref()
                .is_some_and(|info| info.location.iter().any(|l| l.leading_comments.is_some())),
            "comments travel with the descriptor"
        );
        match reflect_v1(
            &channel,
            v1::server_reflection_request::MessageRequest::FileByFilename(
                "shoal/v1/node.proto".into(),
            ),
        )
        .await
        {
            v1::server_reflection_response::MessageResponse::FileDescriptorResponse(f) => {
                assert_eq!(f.file_descriptor_proto.len(), 1)
            }
            other => panic!("expected node.proto, got {other:?}"),
        }

        // Reflection v1alpha, which older grpcurl and grpcio releases speak.
        let mut alpha =
            v1alpha::server_reflection_client::ServerReflectionClient::new(channel.clone());
        let request = v1alpha::ServerReflectionRequest {
            host: String::new(),
            message_request: Some(
                v1alpha::server_reflection_request::MessageRequest::ListServices(String::new()),
            ),
        };
        let response = alpha
            .server_reflection_info(tokio_stream::once(request))
            .await
            .expect("v1alpha reflection stream")
            .into_inner()
            .message()
            .await
            .expect("a v1alpha response")
            .expect("the stream carries one")
            .message_response;
        match response {
            Some(v1alpha::server_reflection_response::MessageResponse::ListServicesResponse(
                list,
            )) => {
                let names: Vec<&str> = list.service.iter().map(|s| s.name.as_str()).collect();
                assert!(names.contains(&"shoal.v1.RoomService"), "{names:?}");
                assert!(names.contains(&"shoal.v1.NodeService"), "{names:?}");
            }
            other => panic!("expected a service list, got {other:?}"),
        }
    });
    drop(runtime);

    control.shutdown().expect("the control plane stops cleanly");
    server.shutdown().expect("the shards stop cleanly");
}
