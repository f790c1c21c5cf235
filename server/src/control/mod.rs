//! The control plane: one thread (`shoal-control`) running a single-threaded tokio
//! runtime that serves gRPC (`shoal.v1.RoomService`, `NodeService`, `SignalService`,
//! the standard `grpc.health.v1.Health` service and server reflection, v1 and
//! v1alpha, so `grpcurl` and `grpcio` clients need no `.proto` files) and HTTP
//! ([`http`]: WHIP, WHEP, the `/signal` WebSocket ([`websocket`]), the demo page,
//! `/healthz`).
//!
//! It never touches a World. It owns the room directory ([`rooms`], plain data behind
//! one mutex) and signalling's tables ([`participants`]: placement, sessions,
//! signalling connections), and reaches the shards only through the driver's command
//! channels (`ShardSender`); those round trips block, so they run on tokio's blocking
//! pool, bounded by a timeout ([`shards`]). Shards report peers that left on their own
//! (consent lost, DTLS closed or failed) on an event channel that a task here reads,
//! so their participants leave the directory and their rooms hear of it. A periodic
//! task closes rooms that stayed empty for their empty-timeout.
//!
//! Limits: request messages (128 KiB for RoomService, 4 KiB for NodeService),
//! concurrent streams and requests per connection, a handler timeout, HTTP/2
//! keep-alive that drops dead clients, and at most a few shard round trips at once.
//! Connections to both listeners are capped per client address and in all, and a
//! connection that is slow to send its request, or idle, is closed ([`listen`]).
//!
//! Who may do what is [`auth`]'s: with API keys configured, every WHIP, WHEP,
//! signalling and RoomService request carries an access token whose grants cover
//! it; without, the node runs open, and only on loopback listeners.

pub mod auth;
pub mod cluster;
pub mod connections;
pub mod drain;
pub mod grpc;
pub mod http;
pub mod ice_restart;
pub mod join_pages;
pub mod listen;
pub mod media;
pub mod media_backlog;
#[cfg(test)]
mod media_without_keys_tests;
pub mod metrics;
#[cfg(test)]
mod one_shard_tests;
pub mod origin;
pub mod outbox;
#[cfg(test)]
mod participant_events_tests;
pub mod participants;
pub mod pending;
pub mod presence;
pub mod rooms;
pub mod sdpfrag;
pub mod selection;
pub mod shards;
pub mod signal;
pub mod speakers;
pub mod tls;
pub mod websocket;

use std::io;

use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use shoal_proto::v1::node_service_server::NodeServiceServer;
use shoal_proto::v1::room_service_server::RoomServiceServer;
use shoal_proto::v1::signal_service_server::SignalServiceServer;
use tokio::sync::oneshot;
use tonic::server::NamedService;
use tonic::service::Routes;
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;

use self::auth::{ApiKey, Auth};
use self::connections::ConnectionLimits;
use self::grpc::{ControlApi, ControlState};
use self::listen::{Http2Settings, Listening};
use self::origin::AllowedOrigins;
use self::pending::PendingLimits;
use self::rooms::{RoomDirectory, RoomLimits};
use self::signal::SignalLimits;
use self::tls::{Certificate, TlsError, TlsFiles};
use crate::config::Config;
use crate::driver::{ShardEventReceiver, ShardHandles};
use crate::ice_servers::IceServers;

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
/// Default of `--max-grpc-message-bytes`: a SendData payload of 64 KiB, or an SDP
/// offer of at most 64 KiB, plus their fields.
pub const DEFAULT_MAX_GRPC_MESSAGE_BYTES: usize = 128 * 1024;
/// HTTP/2 ping interval, and how long a ping may go unanswered before the
/// connection is dropped.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);
/// Threads the runtime may start for blocking shard round trips.
const MAX_BLOCKING_THREADS: usize = 8;
/// The kernel send buffer of each gRPC and HTTP connection (Linux doubles it for
/// its bookkeeping). Set, it is no longer tuned up to `net.ipv4.tcp_wmem`'s most
/// (4 MiB by default), which a client that never reads would hold in the kernel on
/// every connection; the node's own queues are bounded
/// (`--signal-queue-bytes`), and this bounds what is under them. At 100 ms of
/// round trip it still carries 10 Mbit/s, far more than control and signalling
/// need.
const TCP_SEND_BUFFER_BYTES: usize = 64 * 1024;
/// Connections waiting to be accepted, as tokio's own listeners have.
const LISTEN_BACKLOG: i32 = 1024;

/// What the control plane needs from the node's configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControlSettings {
    /// Where gRPC listens (port 0: ephemeral); `None`: not at all.
    pub grpc_addr: Option<SocketAddr>,
    /// Where HTTP listens (port 0: ephemeral); `None`: not at all.
    pub http_addr: Option<SocketAddr>,
    /// The room directory's limits.
    pub limits: RoomLimits,
    /// Peers one shard holds at most, to report load.
    pub max_peers_per_shard: usize,
    /// The STUN and TURN servers handed to clients.
    pub ice_servers: IceServers,
    /// The API keys whose tokens the node accepts; none: it runs open.
    pub api_keys: Vec<ApiKey>,
    /// The clock skew allowed on a token's `nbf` and `exp`.
    pub token_clock_skew: Duration,
    /// Whether a join opens a room that is not open.
    pub auto_create_rooms: bool,
    /// The certificate and key that HTTP and gRPC serve TLS with; `None`: plain.
    pub tls: Option<TlsFiles>,
    /// Bounds on signalling connections.
    pub signal_limits: SignalLimits,
    /// Bounds on sessions that have not connected.
    pub pending: PendingLimits,
    /// Bytes of a WHIP/WHEP request body.
    pub max_http_body_bytes: usize,
    /// Bytes of a gRPC request message.
    pub max_grpc_message_bytes: usize,
    /// Bounds on the HTTP and gRPC listeners' connections.
    pub connection_limits: ConnectionLimits,
    /// The web origins whose pages may open `/signal` and read WHIP/WHEP
    /// responses; empty: any.
    pub allowed_origins: AllowedOrigins,
    /// The cluster to join (`--etcd`); `None`: the node runs alone.
    pub cluster: Option<ClusterConfig>,
}

/// `--etcd` and the settings that go with it, before the listeners are bound.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterConfig {
    /// etcd's client URLs.
    pub endpoints: Vec<String>,
    /// The cluster's key prefix.
    pub prefix: String,
    /// This node's id.
    pub node_id: String,
    /// This node's region label.
    pub region: String,
    /// The membership lease's time to live.
    pub lease_ttl: Duration,
    /// A room's participants this node serves before others join elsewhere; 0:
    /// no share (`--room-share`).
    pub room_share: u32,
    /// The host the node's URLs carry; `None`: the listeners' addresses.
    pub advertise_host: Option<String>,
    /// TLS to etcd (`https://` URLs): what the node trusts and presents.
    pub etcd_tls: Option<self::tls::ClientTlsFiles>,
    /// The CA certificates other nodes' gRPC certificates must chain to
    /// (`--cluster-ca`).
    pub cluster_ca: Option<std::path::PathBuf>,
    /// The etcd user the node authenticates as (`--etcd-user`).
    pub etcd_credentials: Option<cluster::EtcdCredentials>,
}

impl ClusterConfig {
    /// The cluster settings once the listeners are bound at `grpc` and `http`,
    /// served with TLS or not, taking gRPC messages of `max_message_bytes`.
    fn settings(
        &self,
        grpc: Option<SocketAddr>,
        http: Option<SocketAddr>,
        tls: bool,
        max_message_bytes: usize,
    ) -> Result<cluster::ClusterSettings, ControlError> {
        let scheme = if tls { "https" } else { "http" };
        let url = |what: &'static str, addr: Option<SocketAddr>| -> Result<String, ControlError> {
            let Some(addr) = addr else {
                return Ok(String::new());
            };
            let host = match &self.advertise_host {
                Some(host) if host.contains(':') => format!("[{host}]"),
                Some(host) => host.clone(),
                None if addr.ip().is_unspecified() => {
                    return Err(ControlError::Cluster(format!(
                        "{what} listens on {addr}: give --advertise-host, the address other \
                         nodes and redirected clients reach this node at"
                    )));
                }
                None if addr.is_ipv6() => format!("[{}]", addr.ip()),
                None => addr.ip().to_string(),
            };
            Ok(format!("{scheme}://{host}:{}", addr.port()))
        };
        if grpc.is_none() || http.is_none() {
            return Err(ControlError::Cluster(
                "a cluster node needs its gRPC listener (--grpc-addr), over which nodes \
                 forward requests to each other, and its HTTP listener (--http-addr), to \
                 which clients are redirected"
                    .to_owned(),
            ));
        }
        if tls && self.cluster_ca.is_none() {
            return Err(ControlError::Cluster(
                "a cluster node serving TLS (--tls-cert) needs --cluster-ca, the CA \
                 certificates the other nodes' gRPC certificates must chain to"
                    .to_owned(),
            ));
        }
        Ok(cluster::ClusterSettings {
            endpoints: self.endpoints.clone(),
            prefix: self.prefix.clone(),
            node_id: self.node_id.clone(),
            region: self.region.clone(),
            lease_ttl: self.lease_ttl,
            room_share: self.room_share,
            grpc_url: url("gRPC", grpc)?,
            http_url: url("HTTP", http)?,
            max_message_bytes,
            etcd_tls: self.etcd_tls.clone(),
            cluster_ca: self.cluster_ca.clone(),
            etcd_credentials: self.etcd_credentials.clone(),
        })
    }
}

impl ControlSettings {
    /// The settings in `config`; `None` when both gRPC and HTTP are off. The API
    /// keys are `--api-key`'s only: the caller adds the keys file's
    /// ([`Config::api_keys`], which can fail).
    pub fn from_config(config: &Config) -> Option<ControlSettings> {
        let grpc_addr = config.grpc_addr.addr();
        let http_addr = config.http_addr.addr();
        if grpc_addr.is_none() && http_addr.is_none() {
            return None;
        }
        Some(ControlSettings {
            grpc_addr,
            http_addr,
            limits: RoomLimits {
                max_rooms: usize::try_from(config.max_rooms).unwrap_or(usize::MAX),
                max_participants_per_room: config.max_participants_per_room,
                default_empty_timeout: config.room_empty_timeout(),
            },
            max_peers_per_shard: config.max_peers_per_shard,
            // Config::load_from refuses ICE server settings that do not fit.
            ice_servers: config.ice_servers().unwrap_or_default(),
            api_keys: config.api_keys.clone(),
            token_clock_skew: Duration::from_secs(config.token_clock_skew),
            auto_create_rooms: config.auto_create_rooms,
            tls: config.tls_files(),
            signal_limits: SignalLimits {
                connections: config.max_signal_connections,
                per_address: config.max_connections_per_address,
                unauthenticated: config.max_unauthenticated_signal,
                auth_timeout: Duration::from_secs(config.signal_auth_timeout),
                idle_timeout: Duration::from_secs(config.idle_timeout),
                queue_bytes: config.signal_queue_bytes,
                write_timeout: Duration::from_secs(config.signal_write_timeout),
                message_bytes: config.max_signal_message_bytes,
            },
            max_http_body_bytes: config.max_http_body_bytes,
            max_grpc_message_bytes: config.max_grpc_message_bytes,
            pending: PendingLimits {
                per_node: config.max_pending_sessions,
                per_address: config.max_pending_sessions_per_address,
                setup_timeout: Duration::from_secs(config.session_setup_timeout),
            },
            connection_limits: ConnectionLimits {
                per_address: config.max_connections_per_address,
                total: config.max_connections,
                header_timeout: Duration::from_secs(config.http_header_timeout),
                idle_timeout: Duration::from_secs(config.idle_timeout),
                tls_handshake_timeout: Duration::from_secs(config.tls_handshake_timeout),
                tls_handshakes: config.max_tls_handshakes,
                tls_handshakes_per_address: config.max_tls_handshakes_per_address,
                head_bytes: config.max_request_head_bytes,
            },
            allowed_origins: AllowedOrigins::new(config.allowed_origins.clone()),
            cluster: (!config.etcd.is_empty()).then(|| ClusterConfig {
                endpoints: config.etcd.iter().map(|e| e.0.clone()).collect(),
                prefix: config.cluster_prefix.clone(),
                node_id: config
                    .node_id
                    .as_ref()
                    .map_or_else(random_node_id, |id| id.0.clone()),
                region: config
                    .region
                    .as_ref()
                    .map(|r| r.0.clone())
                    .unwrap_or_default(),
                lease_ttl: Duration::from_secs(config.cluster_lease_ttl.into()),
                room_share: config.room_share,
                advertise_host: config.advertise_host.clone(),
                etcd_tls: config.etcd_tls(),
                cluster_ca: config.cluster_ca.clone(),
                etcd_credentials: config.etcd_credentials(),
            }),
        })
    }
}

/// Why the control plane could not start, or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// A listener could not be bound.
    #[error("cannot bind {what} {addr}: {source}")]
    Bind {
        /// "gRPC" or "HTTP".
        what: &'static str,
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
    /// The TLS certificate or key could not be loaded.
    #[error("TLS: {0}")]
    Tls(#[from] TlsError),
    /// The control thread panicked.
    #[error("the control thread panicked")]
    Panicked,
    /// The cluster settings do not fit, or the etcd client could not be made.
    #[error("cluster: {0}")]
    Cluster(String),
}

/// The running control plane. Dropping it stops it (as [`ControlPlane::shutdown`]
/// does, without the report).
#[derive(Debug)]
pub struct ControlPlane {
    drain: Arc<drain::Drain>,
    grpc_addr: Option<SocketAddr>,
    http_addr: Option<SocketAddr>,
    certificate: Option<Arc<Certificate>>,
    /// This node's id and cluster prefix, in a cluster.
    cluster_node: Option<(String, String)>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<Result<(), ControlError>>>,
}

impl ControlPlane {
    /// Binds the listeners and starts the control thread over `shards`. Set-up errors
    /// surface here, before the thread starts.
    pub fn start(
        settings: ControlSettings,
        shards: ShardHandles,
    ) -> Result<ControlPlane, ControlError> {
        let io_err = |what| move |source| ControlError::Io { what, source };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .max_blocking_threads(MAX_BLOCKING_THREADS)
            .thread_name("shoal-control-blocking")
            .build()
            .map_err(io_err("runtime"))?;
        let grpc = settings
            .grpc_addr
            .map(|addr| bind(&runtime, "gRPC", addr))
            .transpose()?;
        let http = settings
            .http_addr
            .map(|addr| bind(&runtime, "HTTP", addr))
            .transpose()?;
        let grpc_addr = grpc.as_ref().map(|(_, a)| *a);
        let http_addr = http.as_ref().map(|(_, a)| *a);
        let certificate = settings
            .tls
            .clone()
            .map(Certificate::load)
            .transpose()?
            .map(Arc::new);
        let listeners = Listeners {
            grpc: grpc.map(|(l, _)| l),
            http: http.map(|(l, _)| l),
            certificate: certificate.clone(),
        };
        let cluster = settings
            .cluster
            .as_ref()
            .map(|c| {
                c.settings(
                    grpc_addr,
                    http_addr,
                    certificate.is_some(),
                    settings.max_grpc_message_bytes,
                )
            })
            .transpose()?
            .map(|c| runtime.block_on(cluster::Cluster::new(c)))
            .transpose()
            .map_err(|e| ControlError::Cluster(e.to_string()))?;
        let cluster_node = cluster
            .as_ref()
            .map(|c| (c.node_id().to_owned(), c.settings().prefix.clone()));
        let services = Services::new(settings, shards, cluster)?;
        let drain = services.state.drain().clone();

        let (stop, stopped) = oneshot::channel();
        let thread = std::thread::Builder::new()
            .name("shoal-control".into())
            .spawn(move || {
                let result = runtime.block_on(services.serve(listeners, stopped));
                // Blocking shard round trips end by their own timeout.
                runtime.shutdown_timeout(shards::SHARD_REPLY_TIMEOUT);
                result
            })
            .map_err(io_err("spawn"))?;
        Ok(ControlPlane {
            drain,
            grpc_addr,
            http_addr,
            certificate,
            cluster_node,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// The address gRPC listens on (the bound port when 0 was asked for).
    pub fn grpc_addr(&self) -> Option<SocketAddr> {
        self.grpc_addr
    }

    /// The address HTTP listens on (the bound port when 0 was asked for).
    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.http_addr
    }

    /// This node's id and its cluster's key prefix, when it runs in a cluster.
    pub fn cluster_node(&self) -> Option<(&str, &str)> {
        self.cluster_node
            .as_ref()
            .map(|(id, prefix)| (id.as_str(), prefix.as_str()))
    }

    /// Whether HTTP and gRPC serve TLS.
    pub fn is_tls(&self) -> bool {
        self.certificate.is_some()
    }

    /// Reads the TLS certificate and key again (SIGHUP); `None` without TLS. New
    /// connections get the new pair; on failure the old one stays in use.
    pub fn reload_tls(&self) -> Option<Result<(), TlsError>> {
        self.certificate.as_ref().map(|c| c.reload())
    }

    /// Starts draining the node ([`drain`]); true if this call started it.
    pub fn drain(&self) -> bool {
        self.drain.request()
    }

    /// Whether the node drains (asked here, or by `NodeService.Drain`).
    pub fn is_draining(&self) -> bool {
        self.drain.is_requested()
    }

    /// Whether the drain is over: no peer left on any shard.
    pub fn is_drained(&self) -> bool {
        self.drain.is_finished()
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

/// Binds a TCP listener on `addr` for the runtime; returns it with its bound address.
/// Its connections inherit a fixed send buffer of [`TCP_SEND_BUFFER_BYTES`].
fn bind(
    runtime: &tokio::runtime::Runtime,
    what: &'static str,
    addr: SocketAddr,
) -> Result<(tokio::net::TcpListener, SocketAddr), ControlError> {
    use socket2::{Domain, Protocol, Socket, Type};
    let io_err = |what| move |source| ControlError::Io { what, source };
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))
        .map_err(io_err("socket"))?;
    // As std's TcpListener::bind: a restarted node binds its port again at once.
    #[cfg(unix)]
    socket
        .set_reuse_address(true)
        .map_err(io_err("SO_REUSEADDR"))?;
    socket
        .set_send_buffer_size(TCP_SEND_BUFFER_BYTES)
        .map_err(io_err("SO_SNDBUF"))?;
    socket
        .bind(&addr.into())
        .and_then(|()| socket.listen(LISTEN_BACKLOG))
        .map_err(|source| ControlError::Bind { what, addr, source })?;
    let listener = std::net::TcpListener::from(socket);
    listener
        .set_nonblocking(true)
        .map_err(io_err("non-blocking listener"))?;
    let bound = listener.local_addr().map_err(io_err("local_addr"))?;
    let _in_runtime = runtime.enter();
    let listener = tokio::net::TcpListener::from_std(listener).map_err(io_err("listener"))?;
    Ok((listener, bound))
}

/// The bound listeners, each optional.
struct Listeners {
    grpc: Option<tokio::net::TcpListener>,
    http: Option<tokio::net::TcpListener>,
    certificate: Option<Arc<Certificate>>,
}

/// Everything the control thread serves, built before it starts.
struct Services {
    state: Arc<ControlState>,
    health: HealthReporter,
    routes: Routes,
    listening: Listening,
    events: Option<ShardEventReceiver>,
}

/// The gRPC listener's HTTP/2 settings.
const HTTP2: Http2Settings = Http2Settings {
    request_timeout: REQUEST_TIMEOUT,
    concurrency_per_connection: CONCURRENCY_PER_CONNECTION,
    max_concurrent_streams: MAX_CONCURRENT_STREAMS,
    // `--max-request-head-bytes` replaces it.
    max_header_list_bytes: connections::DEFAULT_MAX_REQUEST_HEAD_BYTES as u32,
    keepalive: (KEEPALIVE_INTERVAL, KEEPALIVE_TIMEOUT),
};

/// The names health reports on: the server as a whole ("") and each service.
const HEALTH_NAMES: [&str; 4] = [
    "",
    <RoomServiceServer<ControlApi> as NamedService>::NAME,
    <NodeServiceServer<ControlApi> as NamedService>::NAME,
    <SignalServiceServer<ControlApi> as NamedService>::NAME,
];

impl Services {
    fn new(
        settings: ControlSettings,
        shards: ShardHandles,
        cluster: Option<Arc<cluster::Cluster>>,
    ) -> Result<Services, ControlError> {
        let state = Arc::new(
            ControlState::new(
                RoomDirectory::new(settings.limits),
                shards.senders,
                settings.max_peers_per_shard,
            )
            .with_transport(
                shards.candidates,
                shards.tcp_candidates,
                shards.fingerprint_sha256,
            )
            .with_ice_servers(settings.ice_servers)
            .with_auth(
                Auth::new(&settings.api_keys, settings.token_clock_skew),
                settings.auto_create_rooms,
            )
            .with_signal_limits(settings.signal_limits)
            .with_pending_limits(settings.pending)
            // A body is bounded in time as its head is (a slow body would hold
            // its connection busy, out of the idle timeout's reach).
            .with_body_limits(
                settings.max_http_body_bytes,
                settings.connection_limits.header_timeout,
            )
            .with_allowed_origins(settings.allowed_origins)
            .with_cluster(cluster),
        );
        let listening = Listening::new(
            settings.connection_limits,
            state.limit_counters().clone(),
            state.metrics().clone(),
        );
        let api = ControlApi::new(state.clone());
        let (health, health_service) = tonic_health::server::health_reporter();
        let routes = Routes::new(health_service)
            .add_service(reflection()?.build_v1()?)
            .add_service(reflection()?.build_v1alpha()?)
            .add_service(
                RoomServiceServer::new(api.clone())
                    .max_decoding_message_size(settings.max_grpc_message_bytes),
            )
            .add_service(
                NodeServiceServer::new(api.clone())
                    .max_decoding_message_size(settings.max_grpc_message_bytes),
            )
            .add_service(
                SignalServiceServer::new(api)
                    .max_decoding_message_size(settings.max_grpc_message_bytes),
            )
            .prepare();
        Ok(Services {
            state,
            health,
            routes,
            listening,
            events: shards.events,
        })
    }

    /// Serves until `stop` fires (or its sender is dropped), then shuts down
    /// gracefully within [`SHUTDOWN_GRACE`].
    async fn serve(
        self,
        listeners: Listeners,
        stop: oneshot::Receiver<()>,
    ) -> Result<(), ControlError> {
        let Services {
            state,
            health,
            routes,
            listening,
            events,
        } = self;
        for name in HEALTH_NAMES {
            health
                .set_service_status(name, ServingStatus::Serving)
                .await;
        }
        let expiry = tokio::spawn(expire_rooms(state.clone()));
        let draining = tokio::spawn(drain::run(state.clone(), health.clone()));
        let shard_events =
            events.map(|events| tokio::spawn(apply_shard_events(state.clone(), events)));
        let state_cluster = state.cluster().cloned();
        let cluster_state = state.clone();
        let cluster_tasks: Vec<_> = state
            .cluster()
            .map(|c| {
                vec![
                    tokio::spawn(cluster::membership::run(c.clone(), state.clone())),
                    tokio::spawn(cluster::membership::fence(c.clone(), state.clone())),
                    tokio::spawn(cluster::view::run(c.clone())),
                    tokio::spawn(cluster::cascade::run(state.clone(), c.clone())),
                ]
            })
            .unwrap_or_default();
        let (graceful, graceful_rx) = tokio::sync::watch::channel(false);
        let mut server = tokio::spawn(serve_all(listeners, routes, listening, state, graceful_rx));
        let early = tokio::select! {
            _ = stop => None,
            ended = &mut server => Some(ended),
        };
        expiry.abort();
        draining.abort();
        if let Some(task) = shard_events {
            task.abort();
        }
        for task in cluster_tasks {
            task.abort();
        }
        if let Some(cluster) = state_cluster {
            // Its rooms close here before its lease goes, so no other node opens
            // one of them while it is still open here.
            let rooms = cluster_state.rooms().names();
            cluster_state.close_rooms(&rooms).await;
            cluster.leave().await;
        }
        if let Some(ended) = early {
            // The server stopped without being asked: that is a failure.
            return match ended {
                Ok(result) => result,
                Err(_) => Err(ControlError::Panicked),
            };
        }
        for name in HEALTH_NAMES {
            health
                .set_service_status(name, ServingStatus::NotServing)
                .await;
        }
        let _ = graceful.send(true);
        match tokio::time::timeout(SHUTDOWN_GRACE, &mut server).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(ControlError::Panicked),
            // Streams still open (health watchers, reflection) are cut.
            Err(_) => {
                server.abort();
                Ok(())
            }
        }
    }
}

/// Serves gRPC and HTTP on their listeners until `graceful` turns true, then until
/// their connections have ended.
async fn serve_all(
    listeners: Listeners,
    routes: Routes,
    listening: Listening,
    state: Arc<ControlState>,
    graceful: tokio::sync::watch::Receiver<bool>,
) -> Result<(), ControlError> {
    let certificate = listeners.certificate;
    let grpc_tls = certificate
        .as_ref()
        .map(|c| c.server_config(&[b"h2"]))
        .transpose()?;
    let http_tls = certificate
        .as_ref()
        .map(|c| c.server_config(&[b"http/1.1"]))
        .transpose()?;
    let grpc = async {
        if let Some(listener) = listeners.grpc {
            let (listening, stop) = (listening.clone(), graceful.clone());
            let http2 = Http2Settings {
                max_header_list_bytes: u32::try_from(listening.limits.head_bytes)
                    .unwrap_or(u32::MAX),
                ..HTTP2
            };
            listen::serve_grpc(listener, grpc_tls, routes, http2, listening, stop).await;
        }
    };
    let http = async {
        if let Some(listener) = listeners.http {
            let (listening, stop) = (listening.clone(), graceful.clone());
            listen::serve_http(listener, http_tls, http::router(state), listening, stop).await;
        }
    };
    tokio::join!(grpc, http);
    Ok(())
}

/// Applies what the shards report to the directory (see [`participants`]).
async fn apply_shard_events(state: Arc<ControlState>, mut events: ShardEventReceiver) {
    while let Some((_shard, event)) = events.recv().await {
        state.shard_event(&event);
    }
}

/// Reflection over shoal.v1, health and reflection itself, listing the services this
/// node serves.
fn reflection() -> Result<tonic_reflection::server::Builder<'static>, ControlError> {
    Ok(tonic_reflection::server::Builder::configure()
        .include_reflection_service(false)
        .register_encoded_file_descriptor_set(shoal_proto::v1::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_reflection::pb::v1::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_reflection::pb::v1alpha::FILE_DESCRIPTOR_SET)
        .with_service_name(<RoomServiceServer<ControlApi> as NamedService>::NAME)
        .with_service_name(<NodeServiceServer<ControlApi> as NamedService>::NAME)
        .with_service_name(<SignalServiceServer<ControlApi> as NamedService>::NAME)
        .with_service_name("grpc.health.v1.Health")
        .with_service_name("grpc.reflection.v1.ServerReflection")
        .with_service_name("grpc.reflection.v1alpha.ServerReflection"))
}

/// Closes empty rooms whose time is up, removes sessions that did not connect in
/// time, resends room presence and media commands that a full shard queue
/// refused, and announces
/// speaker rankings that changed without a report, every [`EXPIRY_INTERVAL`].
async fn expire_rooms(state: Arc<ControlState>) {
    let mut tick = tokio::time::interval(EXPIRY_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        state.retry_presence();
        state.retry_media_commands();
        state.members().sweep_speakers();
        state.expire_pending().await;
        for name in state.expire_rooms() {
            tracing::info!(
                event = "room_closed",
                room = name.as_str(),
                "room closed after its empty timeout"
            );
        }
    }
}

/// A random node id: 12 hex digits.
fn random_node_id() -> String {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; 6];
    // The system's generator does not fail on Linux; zeros would still be an id.
    let _ = ring::rand::SystemRandom::new().fill(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
