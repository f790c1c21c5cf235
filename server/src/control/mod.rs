//! The control plane: one thread (`shoal-control`) running a single-threaded tokio
//! runtime that serves gRPC: `shoal.v1.RoomService`, `shoal.v1.NodeService`, the
//! standard `grpc.health.v1.Health` service and server reflection (v1 and v1alpha),
//! so `grpcurl` and `grpcio` clients need no `.proto` files.
//!
//! It never touches a World. It owns the room directory ([`rooms`], plain data behind
//! one mutex) and reaches the shards only through the driver's command channels
//! ([`ShardSender`]); those round trips block, so they run on tokio's blocking pool,
//! bounded by a timeout ([`shards`]). A periodic task closes rooms that stayed empty
//! for their empty-timeout.
//!
//! `shoal.v1.SignalService` is defined in the API but not served: answering SDP does
//! not exist yet, and a server that accepted the stream and could not negotiate would
//! be worse than `UNIMPLEMENTED`.
//!
//! Limits: request messages (128 KiB for RoomService, 4 KiB for NodeService),
//! concurrent streams and requests per connection, a handler timeout, HTTP/2
//! keep-alive that drops dead clients, and at most a few shard round trips at once.
//! The number of connections is not capped: the default address is loopback, and a
//! node exposed further belongs behind a firewall or proxy (there is no
//! authentication yet).

pub mod grpc;
pub mod rooms;
pub mod shards;

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use shoal_proto::v1::node_service_server::NodeServiceServer;
use shoal_proto::v1::room_service_server::RoomServiceServer;
use tokio::sync::oneshot;
use tonic::server::NamedService;
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;

use self::grpc::{ControlApi, ControlState};
use self::rooms::{RoomDirectory, RoomLimits};
use crate::config::Config;
use crate::driver::ShardSender;

/// How often empty rooms are checked for expiry; rooms close at most this late.
pub const EXPIRY_INTERVAL: Duration = Duration::from_secs(1);
/// How long shutting down waits for requests in flight (and watchers) to finish.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);
/// How long one gRPC handler may run.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Requests one connection runs at once; more wait.
const CONCURRENCY_PER_CONNECTION: usize = 64;
/// HTTP/2 streams one connection may open at once.
const MAX_CONCURRENT_STREAMS: u32 = 128;
/// HTTP/2 header block size accepted.
const MAX_HEADER_LIST_BYTES: u32 = 16 * 1024;
/// Largest RoomService request: a SendData payload of 64 KiB plus its fields.
const MAX_ROOM_REQUEST_BYTES: usize = 128 * 1024;
/// Largest NodeService request (GetNodeInfoRequest is empty).
const MAX_NODE_REQUEST_BYTES: usize = 4 * 1024;
/// HTTP/2 ping interval, and how long a ping may go unanswered before the
/// connection is dropped.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);
/// Threads the runtime may start for blocking shard round trips.
const MAX_BLOCKING_THREADS: usize = 8;

/// What the control plane needs from the node's configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControlSettings {
    /// Where gRPC listens (port 0: ephemeral).
    pub grpc_addr: SocketAddr,
    /// The room directory's limits.
    pub limits: RoomLimits,
    /// Peers one shard holds at most, to report load.
    pub max_peers_per_shard: usize,
}

impl ControlSettings {
    /// The settings in `config`; `None` when gRPC is off.
    pub fn from_config(config: &Config) -> Option<ControlSettings> {
        Some(ControlSettings {
            grpc_addr: config.grpc_addr.addr()?,
            limits: RoomLimits {
                max_rooms: usize::try_from(config.max_rooms).unwrap_or(usize::MAX),
                max_participants_per_room: config.max_participants_per_room,
                default_empty_timeout: config.room_empty_timeout(),
            },
            max_peers_per_shard: config.max_peers_per_shard,
        })
    }
}

/// Why the control plane could not start, or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// The gRPC listener could not be bound.
    #[error("cannot bind gRPC {addr}: {source}")]
    Bind {
        /// The address tried.
        addr: SocketAddr,
        /// What the OS said.
        source: io::Error,
    },
    /// Setting up the runtime or the listener failed.
    #[error("control plane: {what}: {source}")]
    Io {
        /// The call that failed.
        what: &'static str,
        /// What the OS said.
        source: io::Error,
    },
    /// The reflection service refused the embedded descriptor sets (a build bug).
    #[error("control plane: reflection: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    /// The gRPC server failed while serving.
    #[error("control plane: gRPC server: {0}")]
    Serve(#[from] tonic::transport::Error),
    /// The control thread panicked.
    #[error("the control thread panicked")]
    Panicked,
}

/// The running control plane. Dropping it stops it (as [`ControlPlane::shutdown`]
/// does, without the report).
#[derive(Debug)]
pub struct ControlPlane {
    grpc_addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<Result<(), ControlError>>>,
}

impl ControlPlane {
    /// Binds the gRPC listener and starts the control thread over `shards` (their
    /// handles by shard index). Set-up errors surface here, before the thread starts.
    pub fn start(
        settings: ControlSettings,
        shards: Vec<ShardSender>,
    ) -> Result<ControlPlane, ControlError> {
        let io_err = |what| move |source| ControlError::Io { what, source };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .max_blocking_threads(MAX_BLOCKING_THREADS)
            .thread_name("shoal-control-blocking")
            .build()
            .map_err(io_err("runtime"))?;
        let addr = settings.grpc_addr;
        let listener = std::net::TcpListener::bind(addr)
            .map_err(|source| ControlError::Bind { addr, source })?;
        listener
            .set_nonblocking(true)
            .map_err(io_err("non-blocking listener"))?;
        let grpc_addr = listener.local_addr().map_err(io_err("local_addr"))?;
        let listener = {
            let _in_runtime = runtime.enter();
            tokio::net::TcpListener::from_std(listener).map_err(io_err("listener"))?
        };
        let services = Services::new(settings, shards)?;

        let (stop, stopped) = oneshot::channel();
        let thread = std::thread::Builder::new()
            .name("shoal-control".into())
            .spawn(move || {
                let result = runtime.block_on(services.serve(listener, stopped));
                // Blocking shard round trips end by their own timeout.
                runtime.shutdown_timeout(shards::SHARD_REPLY_TIMEOUT);
                result
            })
            .map_err(io_err("spawn"))?;
        Ok(ControlPlane {
            grpc_addr,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// The address gRPC listens on (the bound port when 0 was asked for).
    pub fn grpc_addr(&self) -> SocketAddr {
        self.grpc_addr
    }

    /// Whether the control thread has ended (it only does so on its own on failure;
    /// [`ControlPlane::shutdown`] says why).
    pub fn is_finished(&self) -> bool {
        self.thread.as_ref().is_none_or(|t| t.is_finished())
    }

    /// Stops serving: health turns NOT_SERVING, requests in flight get
    /// [`SHUTDOWN_GRACE`] to finish, then the thread ends.
    pub fn shutdown(mut self) -> Result<(), ControlError> {
        self.stop_and_join()
    }

    fn stop_and_join(&mut self) -> Result<(), ControlError> {
        if let Some(stop) = self.stop.take() {
            // A thread that ended already dropped the receiver; joining says why.
            let _ = stop.send(());
        }
        match self.thread.take() {
            Some(thread) => thread.join().unwrap_or(Err(ControlError::Panicked)),
            None => Ok(()),
        }
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        let _ = self.stop_and_join();
    }
}

/// Everything the control thread serves, built before it starts.
struct Services {
    state: Arc<ControlState>,
    health: HealthReporter,
    router: tonic::transport::server::Router,
}

/// The names health reports on: the server as a whole ("") and each service.
const HEALTH_NAMES: [&str; 3] = [
    "",
    <RoomServiceServer<ControlApi> as NamedService>::NAME,
    <NodeServiceServer<ControlApi> as NamedService>::NAME,
];

impl Services {
    fn new(settings: ControlSettings, shards: Vec<ShardSender>) -> Result<Services, ControlError> {
        let state = Arc::new(ControlState::new(
            RoomDirectory::new(settings.limits),
            shards,
            settings.max_peers_per_shard,
        ));
        let api = ControlApi::new(state.clone());
        let (health, health_service) = tonic_health::server::health_reporter();
        let router = Server::builder()
            .timeout(REQUEST_TIMEOUT)
            .concurrency_limit_per_connection(CONCURRENCY_PER_CONNECTION)
            .max_concurrent_streams(MAX_CONCURRENT_STREAMS)
            .http2_max_header_list_size(MAX_HEADER_LIST_BYTES)
            .http2_keepalive_interval(Some(KEEPALIVE_INTERVAL))
            .http2_keepalive_timeout(Some(KEEPALIVE_TIMEOUT))
            .add_service(health_service)
            .add_service(reflection()?.build_v1()?)
            .add_service(reflection()?.build_v1alpha()?)
            .add_service(
                RoomServiceServer::new(api.clone())
                    .max_decoding_message_size(MAX_ROOM_REQUEST_BYTES),
            )
            .add_service(
                NodeServiceServer::new(api).max_decoding_message_size(MAX_NODE_REQUEST_BYTES),
            );
        Ok(Services {
            state,
            health,
            router,
        })
    }

    /// Serves until `stop` fires (or its sender is dropped), then shuts down
    /// gracefully within [`SHUTDOWN_GRACE`].
    async fn serve(
        self,
        listener: tokio::net::TcpListener,
        stop: oneshot::Receiver<()>,
    ) -> Result<(), ControlError> {
        let Services {
            state,
            health,
            router,
        } = self;
        for name in HEALTH_NAMES {
            health
                .set_service_status(name, ServingStatus::Serving)
                .await;
        }
        let expiry = tokio::spawn(expire_rooms(state));
        let (graceful, graceful_rx) = oneshot::channel::<()>();
        let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
        let mut server = tokio::spawn(router.serve_with_incoming_shutdown(incoming, async {
            let _ = graceful_rx.await;
        }));
        let early = tokio::select! {
            _ = stop => None,
            ended = &mut server => Some(ended),
        };
        expiry.abort();
        if let Some(ended) = early {
            // The server stopped without being asked: that is a failure.
            return match ended {
                Ok(result) => result.map_err(ControlError::from),
                Err(_) => Err(ControlError::Panicked),
            };
        }
        for name in HEALTH_NAMES {
            health
                .set_service_status(name, ServingStatus::NotServing)
                .await;
        }
        let _ = graceful.send(());
        match tokio::time::timeout(SHUTDOWN_GRACE, &mut server).await {
            Ok(Ok(result)) => result.map_err(ControlError::from),
            Ok(Err(_)) => Err(ControlError::Panicked),
            // Streams still open (health watchers, reflection) are cut.
            Err(_) => {
                server.abort();
                Ok(())
            }
        }
    }
}

/// Reflection over shoal.v1, health and reflection itself, listing only the services
/// this node serves (SignalService's types are there, but it is not listed).
fn reflection() -> Result<tonic_reflection::server::Builder<'static>, ControlError> {
    Ok(tonic_reflection::server::Builder::configure()
        .include_reflection_service(false)
        .register_encoded_file_descriptor_set(shoal_proto::v1::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_reflection::pb::v1::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_reflection::pb::v1alpha::FILE_DESCRIPTOR_SET)
        .with_service_name(<RoomServiceServer<ControlApi> as NamedService>::NAME)
        .with_service_name(<NodeServiceServer<ControlApi> as NamedService>::NAME)
        .with_service_name("grpc.health.v1.Health")
        .with_service_name("grpc.reflection.v1.ServerReflection")
        .with_service_name("grpc.reflection.v1alpha.ServerReflection"))
}

/// Closes empty rooms whose time is up, every [`EXPIRY_INTERVAL`].
async fn expire_rooms(state: Arc<ControlState>) {
    let mut tick = tokio::time::interval(EXPIRY_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        for name in state.expire_rooms() {
            eprintln!("shoal: control: room {name:?} closed after its empty timeout");
        }
    }
}
