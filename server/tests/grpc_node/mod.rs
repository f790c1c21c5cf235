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

/// Shard `index`'s report, fetched from its thread.
#[allow(dead_code)]
pub fn shard_report(server: &Server, index: usize) -> shoal_server::driver::ShardReport {
    server
        .command_sender(index)
        .expect("such a shard")
        .stats()
        .expect("the shard answers")
}

/// Polls until `done` holds on every shard's report, failing with `what` after
/// `limit`.
#[allow(dead_code)]
pub fn wait_for_shards(
    server: &Server,
    limit: Duration,
    what: &str,
    done: impl Fn(&[shoal_server::driver::ShardReport]) -> bool,
) {
    let deadline = std::time::Instant::now() + limit;
    loop {
        let reports: Vec<_> = (0..server.shard_count())
            .map(|i| shard_report(server, i))
            .collect();
        if done(&reports) {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "{what}: {reports:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// How many participants `room` has now, by ListParticipants.
#[allow(dead_code)]
pub async fn participants(rooms: &mut RoomServiceClient<Channel>, room: &str) -> usize {
    list_participants(rooms, room).await.len()
}

/// The participants of `room` now (the first page), by ListParticipants.
#[allow(dead_code)]
pub async fn list_participants(
    rooms: &mut RoomServiceClient<Channel>,
    room: &str,
) -> Vec<shoal_proto::v1::Participant> {
    rooms
        .list_participants(ListParticipantsRequest {
            room: room.into(),
            ..ListParticipantsRequest::default()
        })
        .await
        .expect("list participants")
        .into_inner()
        .participants
}

/// Waits (at most 10 s, polling) until `room` on `node` has no participant left.
#[allow(dead_code)]
pub fn wait_until_empty(node: &mut RoomNode, room: &str) {
    let rooms = &mut node.rooms;
    node.runtime.block_on(async {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while participants(rooms, room).await != 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "room {room} should be empty"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
}

/// A node with a room made over gRPC, for the interop tests: the shards, the
/// control plane, a runtime to call it from, and a RoomService client.
#[allow(dead_code)]
pub struct RoomNode {
    /// The shards.
    pub server: Server,
    /// The control plane.
    pub control: ControlPlane,
    /// Where HTTP (WHIP, the demo page) listens.
    pub http: SocketAddr,
    /// A runtime for the gRPC client.
    pub runtime: tokio::runtime::Runtime,
    /// The RoomService client.
    pub rooms: RoomServiceClient<Channel>,
}

/// Starts a one-shard node and creates `room` on it.
#[allow(dead_code)]
pub fn node_with_room(room: &str) -> RoomNode {
    node_with_room_in(
        room,
        Config {
            shards: std::num::NonZeroUsize::new(1).expect("non-zero"),
            ..Config::default()
        },
    )
}

/// Starts a two-shard node that holds one participant per shard, so a room's
/// second participant lands on the other shard, and creates `room` on it.
#[allow(dead_code)]
pub fn node_with_split_room(room: &str) -> RoomNode {
    node_with_room_in(
        room,
        Config {
            shards: std::num::NonZeroUsize::new(2).expect("non-zero"),
            max_peers_per_shard: 1,
            ..Config::default()
        },
    )
}

/// Starts a node from `config` (ports made ephemeral) and creates `room` on it.
#[allow(dead_code)]
pub fn node_with_room_in(room: &str, config: Config) -> RoomNode {
    let mut node = node_in(config);
    node.runtime
        .block_on(node.rooms.create_room(shoal_proto::v1::CreateRoomRequest {
            name: room.into(),
            ..Default::default()
        }))
        .expect("room created");
    node
}

/// Starts a node from `config` (ports ephemeral), with a runtime and a RoomService
/// client; no room.
#[allow(dead_code)]
pub fn node_in(config: Config) -> RoomNode {
    let (server, control) = start_node(config);
    let http = control.http_addr().expect("HTTP is on");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let rooms =
        RoomServiceClient::new(runtime.block_on(connect(control.grpc_addr().expect("gRPC is on"))));
    RoomNode {
        server,
        control,
        http,
        runtime,
        rooms,
    }
}
