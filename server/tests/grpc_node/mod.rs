//! A node for the control-plane tests: real shards on ephemeral UDP ports, gRPC and
//! HTTP on ephemeral TCP ports of 127.0.0.1, and a client channel to gRPC.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use shoal_proto::v1::ListParticipantsRequest;
use shoal_proto::v1::room_service_client::RoomServiceClient;
use shoal_server::config::{Config, Listen};
use shoal_server::control::{ControlPlane, ControlSettings};
use shoal_server::driver::Server;
use tonic::transport::{Channel, Endpoint};

/// How long a client waits to connect, and for each call.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Starts shards and the control plane from `config`, with every port ephemeral.
pub fn start_node(config: Config) -> (Server, ControlPlane) {
    let config = Config {
        udp_port_base: 0,
        grpc_addr: Listen::Addr(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0)),
        http_addr: Listen::Addr(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0)),
        ..config
    };
    let mut server = Server::start(&config).expect("shards start");
    let settings = ControlSettings::from_config(&config).expect("gRPC is on");
    let control =
        ControlPlane::start(settings, server.control_handles()).expect("control plane starts");
    (server, control)
}

/// A channel to the control plane at `addr`.
pub async fn connect(addr: SocketAddr) -> Channel {
    Endpoint::from_shared(format!("http://{addr}"))
        .expect("a valid URI")
        .connect_timeout(CONNECT_TIMEOUT)
        .timeout(CONNECT_TIMEOUT)
        .connect()
        .await
        .expect("connect to the control plane")
}

/// How many participants `room` has now, by ListParticipants.
#[allow(dead_code)]
pub async fn participants(rooms: &mut RoomServiceClient<Channel>, room: &str) -> usize {
    rooms
        .list_participants(ListParticipantsRequest {
            room: room.into(),
            ..ListParticipantsRequest::default()
        })
        .await
        .expect("list participants")
        .into_inner()
        .participants
        .len()
}
