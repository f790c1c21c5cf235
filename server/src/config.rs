//! The `shoal` command line: every setting of a node, from flags, `SHOAL_*`
//! environment variables or a TOML file (`--config`). A flag wins over its variable,
//! a variable over the file, the file over the default.

use std::ffi::OsString;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4};
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use clap::Parser;
use clap::builder::TypedValueParser;
use shoal_components::peer::{IceCredentials, IceRole, PeerId};
use shoal_systems::PeerSpec;

use crate::addresses::Family;
use crate::control::auth::{ApiKey, ApiKeyError};
use crate::ice_servers::{
    DEFAULT_TURN_TTL_SECS, IceServerUri, IceServers, IceServersError, Secret, Username,
};

/// The default first UDP port: shard `i` binds `DEFAULT_UDP_PORT_BASE + i`.
pub const DEFAULT_UDP_PORT_BASE: u16 = 7100;
/// The default number of datagrams read from the socket and fed to a shard per tick.
pub const DEFAULT_MAX_DATAGRAMS_PER_TICK: usize = 64;
/// The default number of peers one shard holds at once.
pub const DEFAULT_MAX_PEERS_PER_SHARD: usize = 10_000;
/// The default address of the gRPC control plane.
pub const DEFAULT_GRPC_ADDR: SocketAddr =
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 7071));
/// The default address of the HTTP server (WHIP, WHEP, /signal, the demo page).
pub const DEFAULT_HTTP_ADDR: SocketAddr =
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 7070));
/// The largest configuration file read, in bytes.
pub const MAX_CONFIG_FILE_BYTES: u64 = 64 * 1024;
/// The default number of rooms a node holds at once.
pub const DEFAULT_MAX_ROOMS: u32 = 10_000;
/// The default number of participants one room admits.
pub const DEFAULT_MAX_PARTICIPANTS_PER_ROOM: u32 = 1_000;
/// The default number of seconds an empty room stays open.
pub const DEFAULT_ROOM_EMPTY_TIMEOUT_SECS: u32 = 300;
/// Default `--token-clock-skew`.
pub const DEFAULT_TOKEN_CLOCK_SKEW_SECS: u64 = 10;
/// Default of `--drain-timeout`: how long a drain waits for participants to go.
pub const DEFAULT_DRAIN_TIMEOUT_SECS: u64 = 30;
/// The largest API keys file read, in bytes.
pub const MAX_API_KEYS_FILE_BYTES: u64 = 64 * 1024;
/// Default `--sctp-heartbeat-interval`: RFC 9260 §16's HB.interval.
pub const DEFAULT_SCTP_HEARTBEAT_INTERVAL_SECS: u32 = 30;
/// Default `--consent-timeout`: RFC 7675 §5.1's 30 s.
pub const DEFAULT_CONSENT_TIMEOUT_SECS: u32 = 30;
/// `--relay-high-watermark`'s default: 1 MiB.
pub const DEFAULT_RELAY_HIGH_WATERMARK: usize = 1 << 20;
/// `--relay-low-watermark`'s default: 512 KiB.
pub const DEFAULT_RELAY_LOW_WATERMARK: usize = 512 << 10;
/// `--relay-hold-limit`'s default, seconds.
pub const DEFAULT_RELAY_HOLD_LIMIT_SECS: u64 = 10;
/// `--max-link-sockets`'s default.
pub const DEFAULT_MAX_LINK_SOCKETS: usize = 1000;
/// `--pacer-burst-ms`'s default: the pacer's own.
pub const DEFAULT_PACER_BURST_MS: u64 =
    shoal_components::congestion::pacer::DEFAULT_BURST.as_millis() as u64;

/// shoal: a WebRTC selective forwarding unit. One process is one cluster node; it runs
/// one shard per core, each with its own UDP port.
#[derive(Parser, Clone, Debug, PartialEq, Eq)]
#[command(name = "shoal", version)]
pub struct Config {
    /// A TOML file with settings: keys are the long flag names (`shards = 2`,
    /// `http-addr = "127.0.0.1:8080"`, `static-peer = ["…"]`). Flags and `SHOAL_*`
    /// variables win over it.
    #[arg(long, env = "SHOAL_CONFIG", value_name = "PATH")]
    pub config: Option<PathBuf>,

    /// Number of shards, one thread and one UDP socket each; defaults to the available
    /// cores.
    #[arg(long, env = "SHOAL_SHARDS", value_name = "N", default_value_t = default_shards())]
    pub shards: NonZeroUsize,

    /// First UDP port: shard i binds port base+i. 0 gives every shard an ephemeral port
    /// (the bound addresses are printed at start-up).
    #[arg(long, env = "SHOAL_UDP_PORT_BASE", value_name = "PORT", default_value_t = DEFAULT_UDP_PORT_BASE)]
    pub udp_port_base: u16,

    /// IP addresses the shards' UDP sockets bind to, at most one per family: repeat
    /// the flag (or separate with commas) for IPv4 and IPv6, e.g. `--bind 0.0.0.0
    /// --bind ::`. Each shard binds one socket per address, all on its port. A socket
    /// bound to 0.0.0.0 or :: receives on every interface of its family, and the shard
    /// announces every usable address of it (interfaces up; no link-local; loopback
    /// only when the host has nothing else), unless --announce says otherwise.
    #[arg(
        long,
        env = "SHOAL_BIND",
        value_name = "IP",
        value_delimiter = ',',
        default_value = "127.0.0.1"
    )]
    pub bind: Vec<IpAddr>,

    /// Addresses the shards' candidates carry instead of their sockets' own: a 1:1
    /// NAT's public address, a container host's. Repeatable or comma-separated, IPv4
    /// and IPv6; each goes with the port of the shard's socket of its family (there
    /// must be one). Given, the candidates are exactly these.
    #[arg(long, env = "SHOAL_ANNOUNCE", value_name = "IP", value_delimiter = ',')]
    pub announce: Vec<IpAddr>,

    /// The family whose candidates lead when a shard announces both; after the first,
    /// the families alternate (RFC 8421 §4).
    #[arg(long, env = "SHOAL_PREFER_FAMILY", value_name = "FAMILY", default_value_t = Family::Ipv6)]
    pub prefer_family: Family,

    /// Datagrams a shard reads from its socket and handles in one tick; the batch is the
    /// unit of work, so larger batches amortise more per-tick cost.
    #[arg(
        long,
        env = "SHOAL_MAX_DATAGRAMS_PER_TICK",
        value_name = "N",
        default_value_t = DEFAULT_MAX_DATAGRAMS_PER_TICK,
        value_parser = clap::value_parser!(u16).range(1..=4096).map(usize::from),
    )]
    pub max_datagrams_per_tick: usize,

    /// Peers one shard holds at once; more are refused.
    #[arg(long, env = "SHOAL_MAX_PEERS_PER_SHARD", value_name = "N", default_value_t = DEFAULT_MAX_PEERS_PER_SHARD)]
    pub max_peers_per_shard: usize,

    /// TCP address the gRPC control plane (RoomService, NodeService, health,
    /// reflection) listens on, or "off". Port 0 takes an ephemeral port (the bound
    /// address is printed at start-up).
    #[arg(long, env = "SHOAL_GRPC_ADDR", value_name = "ADDR|off", default_value_t = Listen::Addr(DEFAULT_GRPC_ADDR))]
    pub grpc_addr: Listen,

    /// TCP address the HTTP server (WHIP, WHEP, the /signal WebSocket, the demo page,
    /// /healthz) listens on, or "off". Port 0 takes an ephemeral port.
    #[arg(long, env = "SHOAL_HTTP_ADDR", value_name = "ADDR|off", default_value_t = Listen::Addr(DEFAULT_HTTP_ADDR))]
    pub http_addr: Listen,

    /// Rooms this node holds at once; CreateRoom beyond it fails with RESOURCE_EXHAUSTED.
    #[arg(
        long,
        env = "SHOAL_MAX_ROOMS",
        value_name = "N",
        default_value_t = DEFAULT_MAX_ROOMS,
        value_parser = clap::value_parser!(u32).range(1..),
    )]
    pub max_rooms: u32,

    /// Participants one room admits at most; also the limit of a room created with
    /// max_participants 0.
    #[arg(
        long,
        env = "SHOAL_MAX_PARTICIPANTS_PER_ROOM",
        value_name = "N",
        default_value_t = DEFAULT_MAX_PARTICIPANTS_PER_ROOM,
        value_parser = clap::value_parser!(u32).range(1..),
    )]
    pub max_participants_per_room: u32,

    /// Seconds an empty room stays open when it was created without an empty timeout
    /// of its own (1 to 86400).
    #[arg(
        long,
        env = "SHOAL_ROOM_EMPTY_TIMEOUT",
        value_name = "SECONDS",
        default_value_t = DEFAULT_ROOM_EMPTY_TIMEOUT_SECS,
        value_parser = clap::value_parser!(u32).range(1..=86_400),
    )]
    pub room_empty_timeout: u32,

    /// Seconds after the last valid ICE check (on a link this node dials: the last
    /// valid response to its own) after which a connected peer's consent lapses and
    /// it is taken out, 15 to 30 (before its DTLS connects, the 60 s connect
    /// timeout applies instead). RFC 7675 §5.1: "Consent expires after 30 seconds"
    /// and the endpoint "MUST cease transmission" then, so this may shorten it,
    /// never lengthen it. A shorter time notices peers that vanished sooner, and
    /// survives fewer lost checks: peers check every 4 to 6 s (§5.1), so at 15 s
    /// two checks lost in a row may take a live peer out.
    #[arg(
        long,
        env = "SHOAL_CONSENT_TIMEOUT",
        value_name = "SECONDS",
        default_value_t = DEFAULT_CONSENT_TIMEOUT_SECS,
        value_parser = clap::value_parser!(u32).range(15..=30),
    )]
    pub consent_timeout: u32,

    /// Seconds between the HEARTBEATs of an idle SCTP association (RFC 9260 §8.3's
    /// HB.interval; each waits one RTO more, jittered), 0 to 3600; 0 turns them off.
    /// A peer that lost its association is found within one interval.
    #[arg(
        long,
        env = "SHOAL_SCTP_HEARTBEAT_INTERVAL",
        value_name = "SECONDS",
        default_value_t = DEFAULT_SCTP_HEARTBEAT_INTERVAL_SECS,
        value_parser = clap::value_parser!(u32).range(0..=3600),
    )]
    pub sctp_heartbeat_interval: u32,

    /// INIT or COOKIE ECHO retransmissions before an SCTP setup gives up (RFC 9260
    /// §16's Max.Init.Retransmits). Unset, the default: no limit; the setup goes on
    /// while the peer's DTLS lives, as WebRTC stacks set it.
    #[arg(long, env = "SHOAL_SCTP_MAX_INIT_RETRANSMITS", value_name = "N")]
    pub sctp_max_init_retransmits: Option<u32>,

    /// TSNs an SCTP association may send past its peer's cumulative ack, 256 to
    /// 16384: while one chunk stays missing, new DATA waits at this distance rather
    /// than growing what the peer must track above the hole (chunks acknowledged
    /// out of order count). Each message takes at least one TSN, so this also
    /// bounds the messages sent per round trip; 1024 full chunks are 1.1 MB.
    #[arg(
        long,
        env = "SHOAL_SCTP_MAX_OUTSTANDING_TSNS",
        value_name = "N",
        default_value_t = shoal_components::sctp::assoc::DEFAULT_MAX_OUTSTANDING_TSNS,
        value_parser = clap::value_parser!(u64).range(256..=16384).map(|n| n as usize),
    )]
    pub sctp_max_outstanding_tsns: usize,

    /// Bytes a room member may have queued (its data channels' buffered amount)
    /// before the room relay holds back the senders of reliable messages to it
    /// (their SCTP windows close until it is down to --relay-low-watermark) and
    /// drops unreliable messages for it, counted per member.
    #[arg(
        long,
        env = "SHOAL_RELAY_HIGH_WATERMARK",
        value_name = "BYTES",
        default_value_t = DEFAULT_RELAY_HIGH_WATERMARK,
        value_parser = clap::value_parser!(u32).range(16_384..=3_145_728).map(|n| n as usize)
    )]
    pub relay_high_watermark: usize,

    /// Bytes a room member's queue must fall to before the senders it held back go
    /// on; at most --relay-high-watermark (a larger value is taken as it).
    #[arg(
        long,
        env = "SHOAL_RELAY_LOW_WATERMARK",
        value_name = "BYTES",
        default_value_t = DEFAULT_RELAY_LOW_WATERMARK,
        value_parser = clap::value_parser!(u32).range(0..=3_145_728).map(|n| n as usize)
    )]
    pub relay_low_watermark: usize,

    /// Seconds a room member may hold a sender back without its queue falling to
    /// --relay-low-watermark; then it is disconnected as a slow receiver and the
    /// room goes on without it.
    #[arg(
        long,
        env = "SHOAL_RELAY_HOLD_LIMIT",
        value_name = "SECONDS",
        default_value_t = DEFAULT_RELAY_HOLD_LIMIT_SECS,
        value_parser = clap::value_parser!(u64).range(1..=3600)
    )]
    pub relay_hold_limit: u64,

    /// The most of a subscriber's pacing rate that may go at once when its queue was
    /// idle, in milliseconds (at most 63 000 bytes). Bursts start at 5 ms of the
    /// rate (or this, if less) and grow toward this only as the subscriber's
    /// feedback shows its path takes them at once: what the rate its recent bursts
    /// crossed at carries in 2.25 ms, at most 8 times what crossed, and less than
    /// half any recent burst that spread and than the allowance at an over-use
    /// (docs/architecture.md). Long bursts cut the delay pacing adds to keyframes
    /// where paths have room to spare; a burst that lands at once in a narrow
    /// link's queue reads to the bandwidth estimate as congestion.
    #[arg(
        long,
        env = "SHOAL_PACER_BURST_MS",
        value_name = "MS",
        default_value_t = DEFAULT_PACER_BURST_MS,
        value_parser = clap::value_parser!(u64).range(1..=100)
    )]
    pub pacer_burst_ms: u64,

    /// The first shard's TCP port for ICE over TCP (RFC 6544, passive candidates
    /// below the UDP ones), shard n listening on base + n on each --bind address;
    /// `auto` (the default) is --udp-port-base + 100 (ephemeral with a UDP base of
    /// 0), `off` listens on none.
    #[arg(long, env = "SHOAL_TCP_PORT_BASE", value_name = "PORT|auto|off", default_value_t = TcpPortBase::Auto)]
    pub tcp_port_base: TcpPortBase,

    /// ICE-TCP connections one shard holds at most; more are closed at once.
    #[arg(
        long,
        env = "SHOAL_MAX_TCP_CONNECTIONS",
        value_name = "N",
        default_value_t = crate::tcp::DEFAULT_MAX_CONNECTIONS,
        value_parser = clap::value_parser!(u32).range(1..=100_000).map(|n| n as usize)
    )]
    pub max_tcp_connections: usize,

    /// Links to other nodes one shard dials from UDP sockets of their own, at most
    /// (each a file descriptor; docs/cluster.md, "A path for each link"); a link
    /// past that goes from the shard's socket, where it meets any other link
    /// between the same two shards. 0: every link goes from the shard's socket.
    #[arg(
        long,
        env = "SHOAL_MAX_LINK_SOCKETS",
        value_name = "N",
        default_value_t = DEFAULT_MAX_LINK_SOCKETS,
        value_parser = clap::value_parser!(u32)
            .range(0..=crate::driver::MAX_LINK_SOCKETS as i64)
            .map(|n| n as usize)
    )]
    pub max_link_sockets: usize,

    /// Bytes queued for sending on one ICE-TCP connection at most; packets past
    /// that are dropped, as UDP would.
    #[arg(
        long,
        env = "SHOAL_TCP_BUFFER_BYTES",
        value_name = "BYTES",
        default_value_t = crate::tcp::DEFAULT_BUFFER_BYTES,
        value_parser = clap::value_parser!(u32).range(16_384..=16_777_216).map(|n| n as usize)
    )]
    pub tcp_buffer_bytes: usize,

    /// Seconds an ICE-TCP connection may stay open before a peer's check has
    /// validated it; then it is closed.
    #[arg(
        long,
        env = "SHOAL_TCP_AUTH_TIMEOUT",
        value_name = "SECONDS",
        default_value_t = crate::tcp::DEFAULT_AUTH_TIMEOUT_SECS,
        value_parser = clap::value_parser!(u64).range(1..=300)
    )]
    pub tcp_auth_timeout: u64,

    /// A STUN or TURN server clients may use: `stun:HOST[:PORT]`, `stuns:…`,
    /// `turn:HOST[:PORT][?transport=udp|tcp]`, `turns:…` (RFC 7064, RFC 7065).
    /// Repeatable or comma-separated, at most 8. shoal hands them to every client in
    /// WHIP/WHEP `Link` headers and the signalling join response; it uses none
    /// itself. A turn: URI needs --turn-secret, or --turn-username and
    /// --turn-password.
    #[arg(
        long = "ice-server",
        env = "SHOAL_ICE_SERVER",
        value_name = "URI",
        value_delimiter = ','
    )]
    pub ice_servers: Vec<IceServerUri>,

    /// The secret shared with the TURN servers (coturn: `use-auth-secret` and
    /// `static-auth-secret`): each client gets a username `EXPIRY:PEER-ID` and the
    /// password HMAC-SHA1(secret, username) in base64, valid for --turn-ttl.
    #[arg(
        long,
        env = "SHOAL_TURN_SECRET",
        value_name = "SECRET",
        hide_env_values = true,
        value_parser = SecretParser
    )]
    pub turn_secret: Option<Secret>,

    /// Seconds the credentials minted from --turn-secret can open a relay (1 to
    /// 604800, a week). The TURN server checks them when a client allocates; an
    /// allocation made in time lives on.
    #[arg(
        long,
        env = "SHOAL_TURN_TTL",
        value_name = "SECONDS",
        default_value_t = DEFAULT_TURN_TTL_SECS,
        value_parser = clap::value_parser!(u32).range(1..=604_800)
    )]
    pub turn_ttl: u32,

    /// A TURN username every client gets (with --turn-password; instead of
    /// --turn-secret).
    #[arg(long, env = "SHOAL_TURN_USERNAME", value_name = "NAME")]
    pub turn_username: Option<Username>,

    /// The TURN password that goes with --turn-username.
    #[arg(
        long,
        env = "SHOAL_TURN_PASSWORD",
        value_name = "PASSWORD",
        hide_env_values = true,
        value_parser = SecretParser
    )]
    pub turn_password: Option<Secret>,

    /// An API key and its secret, `KEY:SECRET`: access tokens signed with the secret
    /// (HS256, `iss` the key; LiveKit's token SDKs mint them, and `shoal token`)
    /// are what every WHIP, WHEP, signalling and RoomService request must carry.
    /// Repeatable. The secret is at least 32 characters and never printed. With no
    /// key (here or in --api-keys-file) the node runs open, which it does only while
    /// its HTTP and gRPC listeners are on loopback addresses (see --insecure-open).
    #[arg(
        long = "api-key",
        env = "SHOAL_API_KEY",
        value_name = "KEY:SECRET",
        hide_env_values = true,
        value_parser = ApiKeyParser
    )]
    pub api_keys: Vec<ApiKey>,

    /// A file of API keys, one `KEY: SECRET` per line (LiveKit's key file format;
    /// `#` at the start of a line or after a space starts a comment). Its keys add to
    /// --api-key's; a key may be given once.
    #[arg(long, env = "SHOAL_API_KEYS_FILE", value_name = "PATH")]
    pub api_keys_file: Option<PathBuf>,

    /// Runs open (no API keys: anyone who reaches the node may create and delete
    /// rooms, join under any identity and publish) even with an HTTP or gRPC
    /// listener on a non-loopback address. Without it, such a node refuses to start.
    #[arg(long, env = "SHOAL_INSECURE_OPEN")]
    pub insecure_open: bool,

    /// Seconds of clock skew allowed on a token's nbf and exp (0 to 300).
    #[arg(
        long,
        env = "SHOAL_TOKEN_CLOCK_SKEW",
        value_name = "SECONDS",
        default_value_t = DEFAULT_TOKEN_CLOCK_SKEW_SECS,
        value_parser = clap::value_parser!(u64).range(0..=300)
    )]
    pub token_clock_skew: u64,

    /// Whether a join (WHIP, WHEP, signalling) to a room that is not open opens it
    /// (within --max-rooms; with API keys, the joiner's token must grant roomJoin of
    /// it). `false`: rooms are opened by RoomService.CreateRoom only.
    #[arg(
        long,
        env = "SHOAL_AUTO_CREATE_ROOMS",
        value_name = "BOOL",
        default_value_t = true,
        action = clap::ArgAction::Set
    )]
    pub auto_create_rooms: bool,

    /// Signalling connections open at once, `/signal` WebSockets and `SignalService`
    /// streams together; more are refused (503, or UNAVAILABLE).
    #[arg(
        long,
        env = "SHOAL_MAX_SIGNAL_CONNECTIONS",
        value_name = "N",
        default_value_t = crate::control::http::DEFAULT_MAX_SIGNAL_CONNECTIONS,
        value_parser = clap::value_parser!(u32).range(1..=1_000_000).map(|n| n as usize)
    )]
    pub max_signal_connections: usize,

    /// With API keys: `/signal` WebSockets that came without `?access_token=` and may
    /// still send an `auth` message, at once; more get 401 at once.
    #[arg(
        long,
        env = "SHOAL_MAX_UNAUTHENTICATED_SIGNAL",
        value_name = "N",
        default_value_t = crate::control::http::DEFAULT_MAX_UNAUTHENTICATED_SIGNAL,
        value_parser = clap::value_parser!(u32).range(0..=100_000).map(|n| n as usize)
    )]
    pub max_unauthenticated_signal: usize,

    /// With API keys: seconds such a WebSocket has to send `auth` and `join`.
    #[arg(
        long,
        env = "SHOAL_SIGNAL_AUTH_TIMEOUT",
        value_name = "SECONDS",
        default_value_t = crate::control::signal::DEFAULT_AUTH_TIMEOUT_SECS,
        value_parser = clap::value_parser!(u64).range(1..=60)
    )]
    pub signal_auth_timeout: u64,

    /// Bytes (encoded) one signalling connection, `/signal` or SignalService, may
    /// owe its client; a client that falls further behind is disconnected (leave
    /// reason SIGNAL_SLOW_READER, counted in NodeInfo.slow_signal_readers) rather
    /// than miss room events. A join sends the room's other participants in pages of
    /// 32 KiB as the client reads them, so a large room never needs more. Default
    /// 1 MiB: 128 events with the largest metadata, 16 of the largest SDP.
    #[arg(
        long,
        env = "SHOAL_SIGNAL_QUEUE_BYTES",
        value_name = "BYTES",
        default_value_t = crate::control::signal::DEFAULT_QUEUE_BYTES,
        value_parser = clap::value_parser!(u32)
            .range(crate::control::signal::MIN_QUEUE_BYTES as i64..=256 * 1024 * 1024)
            .map(|n| n as usize)
    )]
    pub signal_queue_bytes: usize,

    /// Seconds one write to a signalling connection may take; a client that reads
    /// none of it for that long is disconnected the same way (SIGNAL_SLOW_READER).
    #[arg(
        long,
        env = "SHOAL_SIGNAL_WRITE_TIMEOUT",
        value_name = "SECONDS",
        default_value_t = crate::control::signal::DEFAULT_WRITE_TIMEOUT_SECS,
        value_parser = clap::value_parser!(u64).range(1..=300)
    )]
    pub signal_write_timeout: u64,

    /// Bytes a WHIP/WHEP request body (an SDP offer, an ICE fragment) may have; a
    /// larger one gets 413. At most 64 KiB, what the SDP parser takes.
    #[arg(
        long,
        env = "SHOAL_MAX_HTTP_BODY_BYTES",
        value_name = "BYTES",
        default_value_t = crate::control::http::MAX_BODY_BYTES,
        value_parser = clap::value_parser!(u32)
            .range(1024..=crate::control::http::MAX_BODY_BYTES as i64)
            .map(|n| n as usize)
    )]
    pub max_http_body_bytes: usize,

    /// Bytes a `/signal` WebSocket message may have; a larger one ends the session
    /// with an `error` and close code 1009 (RFC 6455 §7.4.1).
    #[arg(
        long,
        env = "SHOAL_MAX_SIGNAL_MESSAGE_BYTES",
        value_name = "BYTES",
        default_value_t = crate::control::http::MAX_SIGNAL_MESSAGE_BYTES,
        value_parser = clap::value_parser!(u32).range(4096..=1_048_576).map(|n| n as usize)
    )]
    pub max_signal_message_bytes: usize,

    /// Bytes a gRPC request message (RoomService, NodeService, SignalService) may
    /// have; a larger one gets RESOURCE_EXHAUSTED. At least 72 KiB, room for
    /// SendData's 64 KiB payload.
    #[arg(
        long,
        env = "SHOAL_MAX_GRPC_MESSAGE_BYTES",
        value_name = "BYTES",
        default_value_t = crate::control::DEFAULT_MAX_GRPC_MESSAGE_BYTES,
        value_parser = clap::value_parser!(u32).range(73_728..=16_777_216).map(|n| n as usize)
    )]
    pub max_grpc_message_bytes: usize,

    /// Bytes a request head may have: an HTTP/1.1 request line with its headers (a
    /// larger one gets 431) or an HTTP/2 header list (gRPC).
    #[arg(
        long,
        env = "SHOAL_MAX_REQUEST_HEAD_BYTES",
        value_name = "BYTES",
        default_value_t = crate::control::connections::DEFAULT_MAX_REQUEST_HEAD_BYTES,
        value_parser = clap::value_parser!(u32).range(8192..=1_048_576).map(|n| n as usize)
    )]
    pub max_request_head_bytes: usize,

    /// Seconds a drain (the first SIGTERM or SIGINT, or `NodeService.Drain`) waits
    /// for every participant to be gone before the process exits anyway; a second
    /// signal exits at once. 0: a signal exits without draining, and a
    /// `NodeService.Drain` waits until everyone is gone (consent expiry bounds it).
    #[arg(
        long,
        env = "SHOAL_DRAIN_TIMEOUT",
        value_name = "SECONDS",
        default_value_t = DEFAULT_DRAIN_TIMEOUT_SECS,
        value_parser = clap::value_parser!(u64).range(0..=3600)
    )]
    pub drain_timeout: u64,

    /// Seconds a session has from its WHIP/WHEP POST or signalling join until its
    /// connection is up (ICE and DTLS); a session still not connected then is
    /// removed (leave reason CONNECTION_TIMEOUT) and counted.
    #[arg(
        long,
        env = "SHOAL_SESSION_SETUP_TIMEOUT",
        value_name = "SECONDS",
        default_value_t = crate::control::pending::DEFAULT_SETUP_TIMEOUT_SECS,
        value_parser = clap::value_parser!(u64).range(1..=600)
    )]
    pub session_setup_timeout: u64,

    /// Sessions on the node that have not connected yet, at most; more get 503 with
    /// Retry-After (gRPC: UNAVAILABLE with grpc-retry-pushback-ms).
    #[arg(
        long,
        env = "SHOAL_MAX_PENDING_SESSIONS",
        value_name = "N",
        default_value_t = crate::control::pending::DEFAULT_MAX_PENDING,
        value_parser = clap::value_parser!(u32).range(1..=1_000_000).map(|n| n as usize)
    )]
    pub max_pending_sessions: usize,

    /// Sessions from one client address (an IPv4 address, an IPv6 /64) that have not
    /// connected yet, at most; more get 503 with Retry-After.
    #[arg(
        long,
        env = "SHOAL_MAX_PENDING_SESSIONS_PER_ADDRESS",
        value_name = "N",
        default_value_t = crate::control::pending::DEFAULT_MAX_PENDING_PER_ADDRESS,
        value_parser = clap::value_parser!(u32).range(1..=1_000_000).map(|n| n as usize)
    )]
    pub max_pending_sessions_per_address: usize,
    /// Seconds an HTTP client has to send a whole request head, from the
    /// connection's start (after TLS) or the head's first byte, and a gRPC client to
    /// start its first request (1 to 300); slower connections are closed.
    #[arg(
        long,
        env = "SHOAL_HTTP_HEADER_TIMEOUT",
        value_name = "SECONDS",
        default_value_t = crate::control::connections::DEFAULT_HEADER_TIMEOUT_SECS,
        value_parser = clap::value_parser!(u64).range(1..=300)
    )]
    pub http_header_timeout: u64,

    /// Seconds a connection may stay idle before it is closed (1 to 3600): an HTTP
    /// keep-alive connection between requests, a gRPC connection with no call open
    /// (GOAWAY), a `/signal` WebSocket from which no frame came (shoal pings it after
    /// half of it; browsers answer).
    #[arg(
        long,
        env = "SHOAL_IDLE_TIMEOUT",
        value_name = "SECONDS",
        default_value_t = crate::control::connections::DEFAULT_IDLE_TIMEOUT_SECS,
        value_parser = clap::value_parser!(u64).range(1..=3600)
    )]
    pub idle_timeout: u64,

    /// Seconds a client has to complete its TLS handshake with HTTP or gRPC (1 to
    /// 300).
    #[arg(
        long,
        env = "SHOAL_TLS_HANDSHAKE_TIMEOUT",
        value_name = "SECONDS",
        default_value_t = crate::control::connections::DEFAULT_TLS_HANDSHAKE_TIMEOUT_SECS,
        value_parser = clap::value_parser!(u64).range(1..=300)
    )]
    pub tls_handshake_timeout: u64,

    /// TLS handshakes under way at once on the HTTP and gRPC ports together; past
    /// it, a new connection lets the oldest handshake under way go.
    #[arg(
        long,
        env = "SHOAL_MAX_TLS_HANDSHAKES",
        value_name = "N",
        default_value_t = crate::control::connections::DEFAULT_MAX_TLS_HANDSHAKES,
        value_parser = clap::value_parser!(u32).range(1..=1_000_000).map(|n| n as usize)
    )]
    pub max_tls_handshakes: usize,

    /// TLS handshakes under way at once from one client address (an IPv6 address
    /// counts by its /64); a connection past it is closed before its handshake, so
    /// handshakes one address never finishes cannot hold everyone's.
    #[arg(
        long,
        env = "SHOAL_MAX_TLS_HANDSHAKES_PER_ADDRESS",
        value_name = "N",
        default_value_t = crate::control::connections::DEFAULT_MAX_TLS_HANDSHAKES_PER_ADDRESS,
        value_parser = clap::value_parser!(u32).range(1..=1_000_000).map(|n| n as usize)
    )]
    pub max_tls_handshakes_per_address: usize,

    /// TCP connections one client address may hold on the HTTP and gRPC ports
    /// together (an IPv6 address counts by its /64); more are closed at once. A NAT's
    /// clients share one address, each participant holding a WebSocket.
    #[arg(
        long,
        env = "SHOAL_MAX_CONNECTIONS_PER_ADDRESS",
        value_name = "N",
        default_value_t = crate::control::connections::DEFAULT_MAX_CONNECTIONS_PER_ADDRESS,
        value_parser = clap::value_parser!(u32).range(1..=1_000_000).map(|n| n as usize)
    )]
    pub max_connections_per_address: usize,

    /// TCP connections the HTTP and gRPC ports hold at once in all; more are closed
    /// at once. Each is a file descriptor: keep `ulimit -n` above it.
    #[arg(
        long,
        env = "SHOAL_MAX_CONNECTIONS",
        value_name = "N",
        default_value_t = crate::control::connections::DEFAULT_MAX_CONNECTIONS,
        value_parser = clap::value_parser!(u32).range(1..=1_000_000).map(|n| n as usize)
    )]
    pub max_connections: usize,

    /// Web origins (`https://app.example`, SCHEME://HOST[:PORT]) whose pages may open
    /// `/signal` and read WHIP/WHEP responses; repeatable or comma-separated. Unset:
    /// any origin. A `/signal` upgrade whose `Origin` is not listed gets 403; a
    /// request without `Origin` (not a browser's) is not affected.
    #[arg(
        long,
        env = "SHOAL_ALLOWED_ORIGINS",
        value_name = "ORIGIN",
        value_delimiter = ','
    )]
    pub allowed_origins: Vec<crate::control::origin::AllowedOrigin>,

    /// A PEM certificate chain: with --tls-key, HTTP serves HTTPS and WSS and gRPC
    /// serves over TLS, on the same ports. SIGHUP reads both files again (a pair that
    /// does not load leaves the old one in use).
    #[arg(
        long,
        env = "SHOAL_TLS_CERT",
        value_name = "PATH",
        requires = "tls_key"
    )]
    pub tls_cert: Option<PathBuf>,

    /// The PEM private key of --tls-cert (PKCS#8, PKCS#1 or SEC1).
    #[arg(
        long,
        env = "SHOAL_TLS_KEY",
        value_name = "PATH",
        requires = "tls_cert"
    )]
    pub tls_key: Option<PathBuf>,

    /// etcd client URLs (`http://HOST:PORT`, or `https://HOST:PORT` with --etcd-ca),
    /// repeatable or comma-separated: the node joins the cluster they coordinate
    /// (membership, room ownership, routing; see docs/cluster.md). Unset: the node
    /// runs alone and needs no etcd.
    #[arg(long, env = "SHOAL_ETCD", value_name = "URL", value_delimiter = ',')]
    pub etcd: Vec<crate::control::cluster::EtcdEndpoint>,

    /// PEM CA certificates that etcd's server certificate must chain to: required
    /// with `https://` etcd URLs (the node trusts no system roots).
    #[arg(long, env = "SHOAL_ETCD_CA", value_name = "PATH")]
    pub etcd_ca: Option<PathBuf>,

    /// A PEM certificate chain the node presents to etcd as a TLS client (for
    /// etcd's `--client-cert-auth`), with --etcd-key.
    #[arg(
        long,
        env = "SHOAL_ETCD_CERT",
        value_name = "PATH",
        requires = "etcd_key"
    )]
    pub etcd_cert: Option<PathBuf>,

    /// The PEM private key of --etcd-cert (PKCS#8, PKCS#1 or SEC1).
    #[arg(
        long,
        env = "SHOAL_ETCD_KEY",
        value_name = "PATH",
        requires = "etcd_cert"
    )]
    pub etcd_key: Option<PathBuf>,

    /// The etcd user the node authenticates as (etcd's `auth enable`), with
    /// --etcd-password-file. It needs read and write permission on the cluster's
    /// prefix (`etcdctl role grant-permission ROLE --prefix=true readwrite PREFIX/`).
    #[arg(
        long,
        env = "SHOAL_ETCD_USER",
        value_name = "NAME",
        requires = "etcd_password_file"
    )]
    pub etcd_user: Option<String>,

    /// A file whose first line is the password of --etcd-user (spaces included, the
    /// line ending not; at most 4096 bytes). Read at start and whenever the node
    /// authenticates anew, so a password changed in the file and then in etcd is
    /// taken without a restart.
    #[arg(
        long,
        env = "SHOAL_ETCD_PASSWORD_FILE",
        value_name = "PATH",
        requires = "etcd_user"
    )]
    pub etcd_password_file: Option<PathBuf>,

    /// PEM CA certificates that other nodes' gRPC certificates (their --tls-cert)
    /// must chain to: nodes call each other's gRPC over TLS when they serve it. A
    /// cluster node with --tls-cert needs it.
    #[arg(long, env = "SHOAL_CLUSTER_CA", value_name = "PATH")]
    pub cluster_ca: Option<PathBuf>,

    /// The etcd key prefix of this cluster: nodes register under PREFIX/nodes/ and
    /// rooms' owners live under PREFIX/rooms/. Clusters with different prefixes
    /// share an etcd without meeting.
    #[arg(long, env = "SHOAL_CLUSTER_PREFIX", value_name = "PREFIX", default_value = crate::control::cluster::DEFAULT_PREFIX, value_parser = parse_cluster_prefix)]
    pub cluster_prefix: String,

    /// This node's id in its cluster (1 to 64 of A-Z a-z 0-9 . _ -), unique among
    /// the live nodes. Unset: a random one at every start.
    #[arg(long, env = "SHOAL_NODE_ID", value_name = "ID")]
    pub node_id: Option<crate::control::cluster::Label>,

    /// This node's region label (as --node-id's characters). A room that a request
    /// arriving here places goes to a node of this region while one takes rooms; a
    /// signalling joiner reaching this node for a room owned in another region is
    /// served here, the room cascaded over both nodes (docs/cluster.md).
    #[arg(long, env = "SHOAL_REGION", value_name = "REGION")]
    pub region: Option<crate::control::cluster::Label>,

    /// In a cluster, the participants of one room this node serves before the room's
    /// further signalling joiners go to other nodes, the room then spanning them
    /// (cascaded; links to other nodes are not counted; docs/cluster.md). 0: no
    /// share, every joiner of a room goes to its owner (unless regions differ).
    #[arg(
        long,
        env = "SHOAL_ROOM_SHARE",
        value_name = "PARTICIPANTS",
        default_value_t = 0,
        value_parser = clap::value_parser!(u32).range(0..=100_000)
    )]
    pub room_share: u32,

    /// Seconds the node's membership lease lives without a keep-alive (3-300). A
    /// node that cannot reach etcd closes its rooms a second before this could run
    /// out, and a dead node's rooms are free again after it.
    #[arg(
        long,
        env = "SHOAL_CLUSTER_LEASE_TTL",
        value_name = "SECONDS",
        default_value_t = crate::control::cluster::DEFAULT_LEASE_TTL_SECS,
        value_parser = clap::value_parser!(u32).range(3..=300)
    )]
    pub cluster_lease_ttl: u32,

    /// The host name or IP address other nodes reach this node's gRPC at and clients
    /// are redirected to for its HTTP, in a cluster. Unset: the listeners' own
    /// address, which then must not be 0.0.0.0 or ::.
    #[arg(long, env = "SHOAL_ADVERTISE_HOST", value_name = "HOST", value_parser = parse_advertise_host)]
    pub advertise_host: Option<String>,

    /// Log filter: a level (error, warn, info, debug, trace) or directives in
    /// RUST_LOG's syntax (`info,shoal_server::control=debug`). Unset: RUST_LOG, else
    /// info.
    #[arg(long, env = "SHOAL_LOG_LEVEL", value_name = "FILTER")]
    pub log_level: Option<crate::logging::LogLevel>,

    /// How log lines (stderr) look: text, or json (one object per line).
    #[arg(long, env = "SHOAL_LOG_FORMAT", value_name = "FORMAT", default_value_t = crate::logging::LogFormat::Text)]
    pub log_format: crate::logging::LogFormat,

    /// TEST ONLY: registers an ICE-lite peer with these credentials on every shard at
    /// start-up, for tests that reach a shard without signalling. Repeatable; the n-th flag (from 0) is
    /// peer id n. Format LOCAL_UFRAG:LOCAL_PWD:REMOTE_UFRAG:REMOTE_PWD (RFC 8839 §5.4:
    /// ufrags 4-256 and passwords 22-256 ice-chars).
    #[arg(long = "static-peer", value_name = "CREDENTIALS")]
    pub static_peers: Vec<StaticPeer>,
}

impl Default for Config {
    /// The defaults of every flag, without reading the environment.
    fn default() -> Config {
        Config {
            config: None,
            shards: default_shards(),
            udp_port_base: DEFAULT_UDP_PORT_BASE,
            bind: vec![IpAddr::V4(Ipv4Addr::LOCALHOST)],
            announce: Vec::new(),
            prefer_family: Family::Ipv6,
            max_datagrams_per_tick: DEFAULT_MAX_DATAGRAMS_PER_TICK,
            max_peers_per_shard: DEFAULT_MAX_PEERS_PER_SHARD,
            grpc_addr: Listen::Addr(DEFAULT_GRPC_ADDR),
            http_addr: Listen::Addr(DEFAULT_HTTP_ADDR),
            max_rooms: DEFAULT_MAX_ROOMS,
            max_participants_per_room: DEFAULT_MAX_PARTICIPANTS_PER_ROOM,
            room_empty_timeout: DEFAULT_ROOM_EMPTY_TIMEOUT_SECS,
            consent_timeout: DEFAULT_CONSENT_TIMEOUT_SECS,
            sctp_heartbeat_interval: DEFAULT_SCTP_HEARTBEAT_INTERVAL_SECS,
            sctp_max_init_retransmits: None,
            sctp_max_outstanding_tsns: shoal_components::sctp::assoc::DEFAULT_MAX_OUTSTANDING_TSNS,
            relay_high_watermark: DEFAULT_RELAY_HIGH_WATERMARK,
            relay_low_watermark: DEFAULT_RELAY_LOW_WATERMARK,
            relay_hold_limit: DEFAULT_RELAY_HOLD_LIMIT_SECS,
            pacer_burst_ms: DEFAULT_PACER_BURST_MS,
            tcp_port_base: TcpPortBase::Auto,
            max_tcp_connections: crate::tcp::DEFAULT_MAX_CONNECTIONS,
            max_link_sockets: DEFAULT_MAX_LINK_SOCKETS,
            tcp_buffer_bytes: crate::tcp::DEFAULT_BUFFER_BYTES,
            tcp_auth_timeout: crate::tcp::DEFAULT_AUTH_TIMEOUT_SECS,
            ice_servers: Vec::new(),
            turn_secret: None,
            turn_ttl: DEFAULT_TURN_TTL_SECS,
            turn_username: None,
            turn_password: None,
            api_keys: Vec::new(),
            api_keys_file: None,
            insecure_open: false,
            token_clock_skew: DEFAULT_TOKEN_CLOCK_SKEW_SECS,
            auto_create_rooms: true,
            max_signal_connections: crate::control::http::DEFAULT_MAX_SIGNAL_CONNECTIONS,
            max_unauthenticated_signal: crate::control::http::DEFAULT_MAX_UNAUTHENTICATED_SIGNAL,
            signal_auth_timeout: crate::control::signal::DEFAULT_AUTH_TIMEOUT_SECS,
            signal_queue_bytes: crate::control::signal::DEFAULT_QUEUE_BYTES,
            signal_write_timeout: crate::control::signal::DEFAULT_WRITE_TIMEOUT_SECS,
            max_http_body_bytes: crate::control::http::MAX_BODY_BYTES,
            max_signal_message_bytes: crate::control::http::MAX_SIGNAL_MESSAGE_BYTES,
            max_grpc_message_bytes: crate::control::DEFAULT_MAX_GRPC_MESSAGE_BYTES,
            max_request_head_bytes: crate::control::connections::DEFAULT_MAX_REQUEST_HEAD_BYTES,
            drain_timeout: DEFAULT_DRAIN_TIMEOUT_SECS,
            session_setup_timeout: crate::control::pending::DEFAULT_SETUP_TIMEOUT_SECS,
            max_pending_sessions: crate::control::pending::DEFAULT_MAX_PENDING,
            max_pending_sessions_per_address:
                crate::control::pending::DEFAULT_MAX_PENDING_PER_ADDRESS,
            http_header_timeout: crate::control::connections::DEFAULT_HEADER_TIMEOUT_SECS,
            idle_timeout: crate::control::connections::DEFAULT_IDLE_TIMEOUT_SECS,
            tls_handshake_timeout: crate::control::connections::DEFAULT_TLS_HANDSHAKE_TIMEOUT_SECS,
            max_tls_handshakes: crate::control::connections::DEFAULT_MAX_TLS_HANDSHAKES,
            max_tls_handshakes_per_address:
                crate::control::connections::DEFAULT_MAX_TLS_HANDSHAKES_PER_ADDRESS,
            max_connections_per_address:
                crate::control::connections::DEFAULT_MAX_CONNECTIONS_PER_ADDRESS,
            max_connections: crate::control::connections::DEFAULT_MAX_CONNECTIONS,
            allowed_origins: Vec::new(),
            etcd: Vec::new(),
            etcd_ca: None,
            etcd_cert: None,
            etcd_key: None,
            etcd_user: None,
            etcd_password_file: None,
            cluster_ca: None,
            cluster_prefix: crate::control::cluster::DEFAULT_PREFIX.to_owned(),
            node_id: None,
            region: None,
            room_share: 0,
            cluster_lease_ttl: crate::control::cluster::DEFAULT_LEASE_TTL_SECS,
            advertise_host: None,
            log_level: None,
            log_format: crate::logging::LogFormat::Text,
            tls_cert: None,
            tls_key: None,
            static_peers: Vec::new(),
        }
    }
}

/// Why the configuration could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A flag, variable or file value is invalid (clap's message says which).
    #[error("{0}")]
    Invalid(#[from] clap::Error),
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The file is larger than [`MAX_CONFIG_FILE_BYTES`].
    #[error("{0}: larger than {MAX_CONFIG_FILE_BYTES} bytes")]
    TooLarge(PathBuf),
    /// The file is not TOML.
    #[error("{path}: {source}")]
    Toml {
        /// The file.
        path: PathBuf,
        /// Where and why parsing failed.
        source: toml::de::Error,
    },
    /// The ICE server settings do not fit together.
    #[error("{0}")]
    IceServers(#[from] IceServersError),
    /// A line of the API keys file is not `KEY: SECRET`.
    #[error("{path}:{line}: {reason}")]
    ApiKeysFile {
        /// The file.
        path: PathBuf,
        /// The line, from 1.
        line: usize,
        /// What is wrong.
        reason: ApiKeyError,
    },
    /// The API keys do not fit together.
    #[error("{0}")]
    ApiKey(ApiKeyError),
    /// No API key, and a listener that others can reach.
    #[error(
        "{what} listens on {addr}, which is not a loopback address, and no API key is \
         configured: anyone who reaches it could create and delete rooms and join any \
         room. Give an API key (--api-key KEY:SECRET with a secret of 32 or more \
         characters, or --api-keys-file), or --insecure-open to run open anyway."
    )]
    OpenNotOnLoopback {
        /// "HTTP" or "gRPC".
        what: &'static str,
        /// Its address.
        addr: SocketAddr,
    },
    /// The cluster's settings (TLS, etcd credentials) do not fit together.
    #[error("{0}")]
    Cluster(String),
    /// A key names no setting, or its value has the wrong shape.
    #[error("{path}: {key}: {reason}")]
    Key {
        /// The file.
        path: PathBuf,
        /// The key.
        key: String,
        /// What is wrong.
        reason: &'static str,
    },
}

impl Config {
    /// The configuration from the process's arguments, environment and `--config`
    /// file.
    pub fn load() -> Result<Config, ConfigError> {
        Config::load_from(std::env::args_os())
    }

    /// The configuration from `args` (the first is the program name), the
    /// environment and the `--config` file, in that order of precedence.
    ///
    /// The file's settings go through clap like flags: each key whose setting came
    /// from neither a flag nor a variable becomes `--key value` ahead of the real
    /// arguments, so a file value is validated exactly as a flag would be.
    pub fn load_from<I, T>(args: I) -> Result<Config, ConfigError>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        use clap::parser::ValueSource;
        use clap::{CommandFactory, FromArgMatches};

        let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
        let matches = Config::command().try_get_matches_from(&args)?;
        let config = Config::from_arg_matches(&matches)?;
        let Some(path) = config.config.clone() else {
            config.ice_servers()?;
            config.check_cluster()?;
            return Ok(config);
        };
        let table = read_table(&path)?;
        let command = Config::command();
        let mut merged: Vec<OsString> = args.first().cloned().into_iter().collect();
        for (key, value) in &table {
            let key_err = |reason| ConfigError::Key {
                path: path.clone(),
                key: key.clone(),
                reason,
            };
            let arg = command
                .get_arguments()
                .find(|a| a.get_long() == Some(key.as_str()) && key != "config")
                .ok_or_else(|| key_err("no such setting (keys are the long flag names)"))?;
            let id = arg.get_id().as_str();
            if matches.value_source(id) != Some(ValueSource::DefaultValue)
                && matches.value_source(id).is_some()
            {
                continue;
            }
            // A switch (`insecure-open = true`) is the bare flag, or nothing.
            if !arg.get_action().takes_values() {
                match value {
                    toml::Value::Boolean(true) => merged.push(format!("--{key}").into()),
                    toml::Value::Boolean(false) => {}
                    _ => return Err(key_err("expected true or false")),
                }
                continue;
            }
            let values = match value {
                toml::Value::Array(items) => items.iter().map(toml_scalar).collect(),
                v => vec![toml_scalar(v)],
            };
            for v in values {
                let v = v.ok_or_else(|| key_err("expected a string, number or boolean"))?;
                merged.push(format!("--{key}").into());
                merged.push(v.into());
            }
        }
        merged.extend(args.into_iter().skip(1));
        let matches = Config::command().try_get_matches_from(merged)?;
        let config = Config::from_arg_matches(&matches)?;
        config.ice_servers()?;
        config.check_cluster()?;
        Ok(config)
    }

    /// The STUN and TURN servers for clients, with their credentials; an error when
    /// the settings do not fit together ([`Config::load_from`] refuses those).
    pub fn ice_servers(&self) -> Result<IceServers, IceServersError> {
        IceServers::new(
            self.ice_servers.clone(),
            self.turn_username.clone(),
            self.turn_password.clone(),
            self.turn_secret.clone(),
            self.turn_ttl,
        )
    }

    /// The static peers as shard commands: ICE-lite, id = position on the command line.
    pub fn static_peer_specs(&self) -> impl Iterator<Item = PeerSpec> + '_ {
        self.static_peers
            .iter()
            .zip(0u64..)
            .map(|(p, id)| PeerSpec {
                id: PeerId(id),
                role: IceRole::Lite,
                credentials: p.credentials.clone(),
                remote_candidates: Vec::new(),
                dtls: None,
                room: None,
                may_send_data: true,
                link: false,
            })
    }

    /// Every API key: --api-key's, then the keys file's; a key given twice is
    /// refused (which secret would sign its tokens?).
    pub fn api_keys(&self) -> Result<Vec<ApiKey>, ConfigError> {
        let mut keys = self.api_keys.clone();
        if let Some(path) = &self.api_keys_file {
            keys.extend(read_api_keys(path)?);
        }
        let mut seen = std::collections::BTreeSet::new();
        for k in &keys {
            if !seen.insert(k.key.as_str()) {
                return Err(ConfigError::ApiKey(ApiKeyError::Duplicate(k.key.clone())));
            }
        }
        Ok(keys)
    }

    /// Refuses to run open (no API key) with an HTTP or gRPC listener on an address
    /// that is not loopback, unless --insecure-open says so.
    pub fn check_exposure(&self, keys: &[ApiKey]) -> Result<(), ConfigError> {
        if !keys.is_empty() || self.insecure_open {
            return Ok(());
        }
        for (what, listen) in [("HTTP", self.http_addr), ("gRPC", self.grpc_addr)] {
            if let Some(addr) = listen.addr()
                && !addr.ip().is_loopback()
            {
                return Err(ConfigError::OpenNotOnLoopback { what, addr });
            }
        }
        Ok(())
    }

    /// Refuses cluster settings that do not fit together: etcd URLs of both schemes,
    /// `https://` ones without --etcd-ca, etcd TLS files for plain `http://` URLs,
    /// --cluster-ca or --etcd-user without --etcd, and a cluster node serving TLS
    /// with no --cluster-ca to verify the other nodes by.
    pub fn check_cluster(&self) -> Result<(), ConfigError> {
        let refuse = |why: &str| Err(ConfigError::Cluster(why.to_owned()));
        if self.etcd.is_empty() && self.etcd_user.is_some() {
            return refuse("--etcd-user applies to a cluster node (--etcd) only");
        }
        if self.etcd_user.as_deref() == Some("") {
            return refuse("--etcd-user names no user");
        }
        let https = self.etcd.iter().filter(|e| e.is_https()).count();
        if https > 0 && https < self.etcd.len() {
            return refuse("--etcd mixes http:// and https:// URLs: give one kind");
        }
        if https > 0 && self.etcd_ca.is_none() {
            return refuse(
                "https:// etcd URLs need --etcd-ca, the CA certificates etcd's \
                 certificate must chain to",
            );
        }
        if https == 0 && (self.etcd_ca.is_some() || self.etcd_cert.is_some()) {
            return refuse("--etcd-ca and --etcd-cert apply to https:// etcd URLs only");
        }
        if self.etcd.is_empty() && self.cluster_ca.is_some() {
            return refuse("--cluster-ca applies to a cluster node (--etcd) only");
        }
        if !self.etcd.is_empty() && self.tls_cert.is_some() && self.cluster_ca.is_none() {
            return refuse(
                "a cluster node serving TLS (--tls-cert) needs --cluster-ca, the CA \
                 certificates the other nodes' gRPC certificates must chain to",
            );
        }
        Ok(())
    }

    /// What the node trusts and presents when it calls etcd over TLS: `None` for
    /// plain `http://` URLs ([`Config::check_cluster`] refuses what does not fit).
    pub fn etcd_tls(&self) -> Option<crate::control::tls::ClientTlsFiles> {
        Some(crate::control::tls::ClientTlsFiles {
            ca: self.etcd_ca.clone()?,
            identity: self
                .etcd_cert
                .clone()
                .zip(self.etcd_key.clone())
                .map(|(cert, key)| crate::control::tls::TlsFiles { cert, key }),
        })
    }

    /// The etcd user and the file of its password, when given.
    pub fn etcd_credentials(&self) -> Option<crate::control::cluster::EtcdCredentials> {
        Some(crate::control::cluster::EtcdCredentials {
            user: self.etcd_user.clone()?,
            password_file: self.etcd_password_file.clone()?,
        })
    }

    /// The certificate and key files, when both are given.
    pub fn tls_files(&self) -> Option<crate::control::tls::TlsFiles> {
        Some(crate::control::tls::TlsFiles {
            cert: self.tls_cert.clone()?,
            key: self.tls_key.clone()?,
        })
    }

    /// How long a room created without an empty timeout stays open while empty.
    pub fn room_empty_timeout(&self) -> Duration {
        Duration::from_secs(u64::from(self.room_empty_timeout))
    }
}

/// The bytes of the file at `path`, or `None` when it holds more than `max`
/// (reading stops one byte past `max`, so a huge file or a device costs no more).
pub(crate) fn read_at_most(path: &std::path::Path, max: u64) -> std::io::Result<Option<Vec<u8>>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::fs::File::open(path)?
        .take(max + 1)
        .read_to_end(&mut bytes)?;
    Ok((bytes.len() as u64 <= max).then_some(bytes))
}

/// [`read_at_most`] as UTF-8 text (not UTF-8: an `InvalidData` error, as
/// `read_to_string`'s).
pub(crate) fn read_text_at_most(
    path: &std::path::Path,
    max: u64,
) -> std::io::Result<Option<String>> {
    read_at_most(path, max)?
        .map(|bytes| {
            String::from_utf8(bytes)
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
        })
        .transpose()
}

/// [`read_text_at_most`] with the configuration's errors: unreadable is
/// [`ConfigError::Read`], past `max` [`ConfigError::TooLarge`].
fn read_config_text(path: &std::path::Path, max: u64) -> Result<String, ConfigError> {
    read_text_at_most(path, max)
        .map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?
        .ok_or_else(|| ConfigError::TooLarge(path.to_owned()))
}

/// Reads a TOML file of at most [`MAX_CONFIG_FILE_BYTES`].
fn read_table(path: &std::path::Path) -> Result<toml::Table, ConfigError> {
    let text = read_config_text(path, MAX_CONFIG_FILE_BYTES)?;
    text.parse::<toml::Table>()
        .map_err(|source| ConfigError::Toml {
            path: path.to_owned(),
            source,
        })
}

/// The keys of an API keys file: `KEY: SECRET` (or `KEY:SECRET`) per line, blank
/// lines and `#` comments skipped.
fn read_api_keys(path: &std::path::Path) -> Result<Vec<ApiKey>, ConfigError> {
    let text = read_config_text(path, MAX_API_KEYS_FILE_BYTES)?;
    let mut keys = Vec::new();
    for (index, line) in text.lines().enumerate() {
        // A comment: a whole line, or after a space (YAML's rule).
        let line = line.find(" #").map_or(line, |i| &line[..i]).trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let key = match line.split_once(':') {
            Some((k, s)) => format!("{}:{}", k.trim(), s.trim()).parse(),
            None => Err(ApiKeyError::Shape),
        };
        keys.push(key.map_err(|reason| ConfigError::ApiKeysFile {
            path: path.to_owned(),
            line: index + 1,
            reason,
        })?);
    }
    Ok(keys)
}

/// A TOML scalar as a flag value.
fn toml_scalar(value: &toml::Value) -> Option<String> {
    match value {
        toml::Value::String(s) => Some(s.clone()),
        toml::Value::Integer(i) => Some(i.to_string()),
        toml::Value::Boolean(b) => Some(b.to_string()),
        _ => None,
    }
}

/// `--tcp-port-base`: a port, `auto` (the UDP base + 100) or `off`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TcpPortBase {
    /// --udp-port-base + 100 (0 stays 0: ephemeral).
    Auto,
    /// This port for shard 0.
    Port(u16),
    /// No ICE-TCP.
    Off,
}

impl TcpPortBase {
    /// Shard 0's TCP port given the UDP base, `None` when off or out of range.
    pub fn resolve(self, udp_base: u16) -> Option<u16> {
        match self {
            TcpPortBase::Auto if udp_base == 0 => Some(0),
            TcpPortBase::Auto => udp_base.checked_add(100),
            TcpPortBase::Port(p) => Some(p),
            TcpPortBase::Off => None,
        }
    }
}

impl fmt::Display for TcpPortBase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TcpPortBase::Auto => f.write_str("auto"),
            TcpPortBase::Port(p) => write!(f, "{p}"),
            TcpPortBase::Off => f.write_str("off"),
        }
    }
}

impl FromStr for TcpPortBase {
    type Err = String;

    fn from_str(s: &str) -> Result<TcpPortBase, String> {
        match s {
            "auto" => Ok(TcpPortBase::Auto),
            "off" => Ok(TcpPortBase::Off),
            p => p
                .parse()
                .map(TcpPortBase::Port)
                .map_err(|_| "expected a port, auto or off".to_owned()),
        }
    }
}

/// clap's parser of `--turn-secret` and `--turn-password`: a value it refuses is not
/// repeated in the message, which goes to stderr and logs.
#[derive(Clone, Copy, Debug)]
struct SecretParser;

impl TypedValueParser for SecretParser {
    type Value = Secret;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<Secret, clap::Error> {
        value.to_str().and_then(|s| s.parse().ok()).ok_or_else(|| {
            let name = arg.map(ToString::to_string).unwrap_or_default();
            clap::Error::raw(
                clap::error::ErrorKind::ValueValidation,
                format!(
                    "{name}: {} (the value is not shown)\n",
                    crate::ice_servers::TextError
                ),
            )
            .with_cmd(cmd)
        })
    }
}

/// clap's parser of `--api-key`: a value it refuses is not repeated in the message.
#[derive(Clone, Copy, Debug)]
struct ApiKeyParser;

impl TypedValueParser for ApiKeyParser {
    type Value = ApiKey;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        _arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<ApiKey, clap::Error> {
        let parsed = value.to_str().map(str::parse::<ApiKey>);
        match parsed {
            Some(Ok(key)) => Ok(key),
            Some(Err(e)) => Err(clap::Error::raw(
                clap::error::ErrorKind::ValueValidation,
                format!("--api-key: {e}\n"),
            )
            .with_cmd(cmd)),
            None => Err(clap::Error::raw(
                clap::error::ErrorKind::ValueValidation,
                "--api-key: not UTF-8 (the value is not shown)\n",
            )
            .with_cmd(cmd)),
        }
    }
}

/// Where a server listens: a socket address, or nowhere.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Listen {
    /// The server is not started.
    Off,
    /// The server listens on this address (port 0: an ephemeral port).
    Addr(SocketAddr),
}

impl Listen {
    /// The address, unless the server is off.
    pub fn addr(self) -> Option<SocketAddr> {
        match self {
            Listen::Off => None,
            Listen::Addr(a) => Some(a),
        }
    }
}

impl fmt::Display for Listen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Listen::Off => f.write_str("off"),
            Listen::Addr(a) => a.fmt(f),
        }
    }
}

/// Why a listen address did not parse.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("expected IP:PORT (e.g. 127.0.0.1:7071, [::1]:7071) or \"off\"")]
pub struct ListenError;

impl FromStr for Listen {
    type Err = ListenError;

    fn from_str(s: &str) -> Result<Listen, ListenError> {
        if s.eq_ignore_ascii_case("off") {
            return Ok(Listen::Off);
        }
        s.parse().map(Listen::Addr).map_err(|_| ListenError)
    }
}

/// One core per shard; one shard when the core count is unknown.
fn default_shards() -> NonZeroUsize {
    std::thread::available_parallelism().unwrap_or(NonZeroUsize::MIN)
}

/// The credentials of a `--static-peer` flag (test only).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StaticPeer {
    /// Both ends' ufrags and passwords; the shard checks their lengths.
    pub credentials: IceCredentials,
}

/// Why a `--static-peer` value did not parse.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("expected LOCAL_UFRAG:LOCAL_PWD:REMOTE_UFRAG:REMOTE_PWD, four non-empty fields")]
pub struct StaticPeerError;

impl FromStr for StaticPeer {
    type Err = StaticPeerError;

    /// Splits on ':', which is not an ice-char (RFC 8839 §5.4), so the split is exact.
    fn from_str(s: &str) -> Result<StaticPeer, StaticPeerError> {
        let mut fields = s.split(':').map(str::to_owned);
        let (Some(lu), Some(lp), Some(ru), Some(rp), None) = (
            fields.next(),
            fields.next(),
            fields.next(),
            fields.next(),
            fields.next(),
        ) else {
            return Err(StaticPeerError);
        };
        if [&lu, &lp, &ru, &rp].iter().any(|f| f.is_empty()) {
            return Err(StaticPeerError);
        }
        Ok(StaticPeer {
            credentials: IceCredentials {
                local_ufrag: lu,
                local_pwd: lp,
                remote_ufrag: ru,
                remote_pwd: rp,
            },
        })
    }
}

/// `--cluster-prefix`: `/` then printable ASCII without spaces, at most 128 bytes,
/// no trailing `/`.
fn parse_cluster_prefix(s: &str) -> Result<String, String> {
    let ok = s.starts_with('/')
        && s.len() <= 128
        && s.len() > 1
        && !s.ends_with('/')
        && s.bytes().all(|b| b.is_ascii_graphic());
    if ok {
        Ok(s.to_owned())
    } else {
        Err("expected / then up to 127 printable ASCII characters, not ending in /".to_owned())
    }
}

/// `--advertise-host`: an IP address or a DNS name.
fn parse_advertise_host(s: &str) -> Result<String, String> {
    if s.parse::<IpAddr>().is_ok() {
        return Ok(s.to_owned());
    }
    let ok = (1..=253).contains(&s.len())
        && s.split('.').all(|l| {
            (1..=63).contains(&l.len())
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        });
    if ok {
        Ok(s.to_owned())
    } else {
        Err("expected an IP address or a host name".to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_etcd_user_needs_its_password_file_and_a_cluster() {
        let load = |args: &[&str]| Config::load_from([&["shoal"], args].concat());
        let etcd = "http://127.0.0.1:2379";
        let user = ["--etcd-user", "node", "--etcd-password-file", "pw"];
        match load(&user) {
            Err(ConfigError::Cluster(why)) => assert!(why.contains("--etcd"), "{why}"),
            other => panic!("{other:?}"),
        }
        assert!(load(&["--etcd", etcd, "--etcd-user", "node"]).is_err());
        match load(&[
            "--etcd",
            etcd,
            "--etcd-user",
            "",
            "--etcd-password-file",
            "pw",
        ]) {
            Err(ConfigError::Cluster(why)) => assert!(why.contains("no user"), "{why}"),
            other => panic!("{other:?}"),
        }
        assert!(load(&["--etcd", etcd, "--etcd-password-file", "pw"]).is_err());
        let c = load(&[&["--etcd", etcd][..], &user[..]].concat()).expect("fits");
        let credentials = c.etcd_credentials().expect("a user");
        assert_eq!(
            (credentials.user.as_str(), credentials.password_file),
            ("node", PathBuf::from("pw"))
        );
        let (_dir, path) = config_file(
            "etcd = [\"http://127.0.0.1:2379\"]
etcd-user = \"node\"
etcd-password-file = \"pw\"
",
        );
        let c = Config::load_from(["shoal", "--config", &path]).unwrap();
        assert_eq!(c.etcd_user.as_deref(), Some("node"));
        assert!(
            Config::load_from(["shoal"])
                .unwrap()
                .etcd_credentials()
                .is_none()
        );
    }

    #[test]
    fn cluster_tls_settings_that_do_not_fit_are_refused() {
        let load = |args: &[&str]| Config::load_from([&["shoal"], args].concat());
        let refused = |args: &[&str], needle: &str| match load(args) {
            Err(ConfigError::Cluster(why)) => assert!(why.contains(needle), "{why}"),
            other => panic!("{args:?}: {other:?}"),
        };
        let (plain, tls) = ("http://127.0.0.1:2379", "https://127.0.0.1:2379");
        refused(&["--etcd", &format!("{plain},{tls}")], "mixes");
        refused(&["--etcd", tls], "need --etcd-ca");
        refused(
            &["--etcd", plain, "--etcd-ca", "ca.pem"],
            "https:// etcd URLs only",
        );
        refused(
            &[
                "--etcd",
                plain,
                "--etcd-cert",
                "c.pem",
                "--etcd-key",
                "k.pem",
            ],
            "https:// etcd URLs only",
        );
        refused(&["--cluster-ca", "ca.pem"], "--etcd");
        refused(
            &["--etcd", plain, "--tls-cert", "c.pem", "--tls-key", "k.pem"],
            "needs --cluster-ca",
        );
        assert!(matches!(
            load(&["--etcd", "ftp://127.0.0.1:2379"]),
            Err(ConfigError::Invalid(_))
        ));
        // What fits: TLS to etcd with a client certificate, and TLS between nodes.
        let c = load(&[
            "--etcd",
            tls,
            "--etcd-ca",
            "ca.pem",
            "--etcd-cert",
            "c.pem",
            "--etcd-key",
            "k.pem",
            "--tls-cert",
            "n.pem",
            "--tls-key",
            "nk.pem",
            "--cluster-ca",
            "nodes.pem",
        ])
        .expect("fits");
        let files = c.etcd_tls().expect("TLS to etcd");
        assert_eq!(files.ca, PathBuf::from("ca.pem"));
        let identity = files.identity.expect("a client certificate");
        assert_eq!(
            (identity.cert, identity.key),
            (PathBuf::from("c.pem"), PathBuf::from("k.pem"))
        );
        assert_eq!(c.cluster_ca, Some(PathBuf::from("nodes.pem")));
        assert!(load(&["--etcd", plain]).expect("fits").etcd_tls().is_none());
    }

    #[test]
    fn flags_parse() {
        let c = Config::try_parse_from([
            "shoal",
            "--shards",
            "3",
            "--udp-port-base",
            "0",
            "--bind",
            "0.0.0.0",
            "--grpc-addr",
            "[::1]:0",
            "--max-rooms",
            "7",
            "--max-participants-per-room",
            "12",
            "--room-empty-timeout",
            "45",
            "--static-peer",
            "abcd:0123456789012345678901:wxyz:abcdefghijklmnopqrstuv",
            "--static-peer",
            "efgh:0123456789012345678901:wxyz:abcdefghijklmnopqrstuv",
        ])
        .unwrap();
        assert_eq!(c.shards.get(), 3);
        assert_eq!(c.udp_port_base, 0);
        assert_eq!(c.bind, [IpAddr::V4(Ipv4Addr::UNSPECIFIED)]);
        assert_eq!(c.prefer_family, Family::Ipv6);
        assert_eq!(c.grpc_addr, Listen::Addr("[::1]:0".parse().unwrap()));
        assert_eq!((c.max_rooms, c.max_participants_per_room), (7, 12));
        assert_eq!(c.room_empty_timeout(), Duration::from_secs(45));
        let specs: Vec<_> = c.static_peer_specs().collect();
        assert_eq!(specs.len(), 2);
        assert_eq!(specs[1].id, PeerId(1));
        assert_eq!(specs[1].role, IceRole::Lite);
        assert_eq!(specs[1].credentials.local_ufrag, "efgh");
        assert_eq!(specs[1].credentials.remote_pwd, "abcdefghijklmnopqrstuv");
    }

    #[test]
    fn binds_and_announcements_repeat_and_split_on_commas() {
        let c = Config::try_parse_from([
            "shoal",
            "--bind",
            "0.0.0.0",
            "--bind",
            "::",
            "--announce",
            "203.0.113.9,2001:db8::9",
            "--prefer-family",
            "ipv4",
        ])
        .unwrap();
        assert_eq!(c.bind, [IpAddr::from([0, 0, 0, 0]), "::".parse().unwrap()]);
        assert_eq!(
            c.announce,
            [
                IpAddr::from([203, 0, 113, 9]),
                "2001:db8::9".parse().unwrap()
            ]
        );
        assert_eq!(c.prefer_family, Family::Ipv4);
        let d = Config::try_parse_from(["shoal"]).unwrap();
        assert_eq!(
            (d.bind, d.announce),
            (vec![IpAddr::from([127, 0, 0, 1])], vec![])
        );
        let (_dir, path) =
            config_file("bind = [\"0.0.0.0\", \"::\"]\nannounce = \"198.51.100.4\"\n");
        let f = Config::load_from(["shoal", "--config", &path]).unwrap();
        assert_eq!(f.bind.len(), 2);
        assert_eq!(f.announce, [IpAddr::from([198, 51, 100, 4])]);
    }

    #[test]
    fn bad_values_are_refused() {
        for args in [
            &["shoal", "--shards", "0"][..],
            &["shoal", "--max-datagrams-per-tick", "0"],
            &["shoal", "--static-peer", "a:b:c"],
            &["shoal", "--static-peer", "a:b:c:d:e"],
            &["shoal", "--static-peer", "a::c:d"],
            &["shoal", "--grpc-addr", "7071"],
            &["shoal", "--grpc-addr", "localhost:7071"],
            &["shoal", "--max-rooms", "0"],
            &["shoal", "--max-participants-per-room", "0"],
            &["shoal", "--room-empty-timeout", "0"],
            &["shoal", "--room-empty-timeout", "86401"],
            &["shoal", "--sctp-heartbeat-interval", "3601"],
            &["shoal", "--sctp-max-init-retransmits", "-1"],
            &["shoal", "--bind", "localhost"],
            &["shoal", "--announce", "example.com"],
            &["shoal", "--prefer-family", "ipx"],
        ] {
            assert!(Config::try_parse_from(args).is_err(), "{args:?}");
        }
    }

    #[test]
    fn grpc_defaults_to_loopback_and_can_be_off() {
        let c = Config::try_parse_from(["shoal"]).unwrap();
        assert_eq!(c.grpc_addr.addr(), Some(DEFAULT_GRPC_ADDR));
        assert_eq!(DEFAULT_GRPC_ADDR.to_string(), "127.0.0.1:7071");
        for off in ["off", "OFF"] {
            let c = Config::try_parse_from(["shoal", "--grpc-addr", off]).unwrap();
            assert_eq!(c.grpc_addr, Listen::Off);
            assert_eq!(c.grpc_addr.addr(), None);
        }
        assert_eq!(Listen::Off.to_string().parse(), Ok(Listen::Off));
        let a = Listen::Addr("127.0.0.1:0".parse().unwrap());
        assert_eq!(a.to_string().parse(), Ok(a));
    }

    #[test]
    fn http_defaults_to_loopback_7070() {
        let c = Config::try_parse_from(["shoal"]).unwrap();
        assert_eq!(c.http_addr.addr(), Some(DEFAULT_HTTP_ADDR));
        assert_eq!(DEFAULT_HTTP_ADDR.to_string(), "127.0.0.1:7070");
        let c = Config::try_parse_from(["shoal", "--http-addr", "off"]).unwrap();
        assert_eq!(c.http_addr, Listen::Off);
    }

    fn config_file(text: &str) -> (tempdir::Dir, String) {
        let dir = tempdir::Dir::new();
        let path = dir.path().join("shoal.toml");
        std::fs::write(&path, text).unwrap();
        (dir, path.to_string_lossy().into_owned())
    }

    #[test]
    fn a_config_file_sits_between_flags_and_defaults() {
        let (_dir, path) = config_file(
            "shards = 3\nhttp-addr = \"127.0.0.1:0\"\nmax-rooms = 9\n\
             static-peer = [\"abcd:0123456789012345678901:wxyz:abcdefghijklmnopqrstuv\"]\n",
        );
        let c = Config::load_from(["shoal", "--config", &path, "--max-rooms", "4"]).unwrap();
        assert_eq!(c.shards.get(), 3, "from the file");
        assert_eq!(c.http_addr, Listen::Addr("127.0.0.1:0".parse().unwrap()));
        assert_eq!(c.max_rooms, 4, "the flag wins");
        assert_eq!(c.static_peers.len(), 1);
        assert_eq!(c.grpc_addr.addr(), Some(DEFAULT_GRPC_ADDR), "the default");
    }

    #[test]
    fn ice_servers_come_from_flags_or_the_file_and_must_fit_together() {
        let c = Config::load_from([
            "shoal",
            "--ice-server",
            "stun:192.0.2.1:3478,turn:192.0.2.1:3478?transport=udp",
            "--ice-server",
            "turns:turn.example.org:443?transport=tcp",
            "--turn-secret",
            "s3cret",
        ])
        .unwrap();
        let uris: Vec<&str> = c.ice_servers.iter().map(IceServerUri::as_str).collect();
        assert_eq!(
            uris,
            [
                "stun:192.0.2.1:3478",
                "turn:192.0.2.1:3478?transport=udp",
                "turns:turn.example.org:443?transport=tcp"
            ]
        );
        assert_eq!(c.turn_ttl, DEFAULT_TURN_TTL_SECS);
        assert!(!c.ice_servers().unwrap().is_empty());
        assert!(
            !format!("{c:?}").contains("s3cret"),
            "the secret stays hidden"
        );

        let (_dir, path) = config_file(
            "ice-server = [\"turn:192.0.2.9\"]\nturn-username = \"u\"\nturn-password = \"p\"\n",
        );
        let c = Config::load_from(["shoal", "--config", &path]).unwrap();
        assert_eq!(c.ice_servers.len(), 1);
        assert_eq!(c.turn_username, Some(Username("u".into())));

        for (args, why) in [
            (
                &["shoal", "--ice-server", "turn:192.0.2.1"][..],
                "needs credentials",
            ),
            (&["shoal", "--turn-secret", "s"], "no turn: or turns:"),
            (
                &[
                    "shoal",
                    "--ice-server",
                    "turn:h",
                    "--turn-secret",
                    "s",
                    "--turn-username",
                    "u",
                    "--turn-password",
                    "p",
                ],
                "exclude each other",
            ),
            (
                &["shoal", "--ice-server", "turn:h", "--turn-username", "u"],
                "go together",
            ),
            (&["shoal", "--ice-server", "http://h"], "scheme"),
            (
                &["shoal", "--ice-server", "turn:h", "--turn-secret", ""],
                "printable",
            ),
            (&["shoal", "--turn-ttl", "604801"], "604800"),
        ] {
            let err = Config::load_from(args).expect_err("refused").to_string();
            assert!(err.contains(why), "{args:?}: {err}");
        }
        // A refused secret or password is not repeated in the message.
        for flag in ["--turn-secret", "--turn-password"] {
            let args = ["shoal", "--ice-server", "turn:h", flag, "TOPSECRET\tx"];
            let err = Config::load_from(args).expect_err("refused").to_string();
            assert!(!err.contains("TOPSECRET"), "{err}");
            assert!(err.contains(flag), "{err}");
        }
    }

    #[test]
    fn tcp_ports_follow_the_udp_base_unless_set_or_off() {
        let c = Config::try_parse_from(["shoal"]).unwrap();
        assert_eq!(c.tcp_port_base, TcpPortBase::Auto);
        assert_eq!(c.tcp_port_base.resolve(c.udp_port_base), Some(7200));
        assert_eq!(
            TcpPortBase::Auto.resolve(0),
            Some(0),
            "ephemeral stays ephemeral"
        );
        assert_eq!(TcpPortBase::Auto.resolve(65_500), None, "out of range");
        let c = Config::try_parse_from(["shoal", "--tcp-port-base", "443"]).unwrap();
        assert_eq!(c.tcp_port_base.resolve(7100), Some(443));
        let c = Config::try_parse_from(["shoal", "--tcp-port-base", "off"]).unwrap();
        assert_eq!(c.tcp_port_base.resolve(7100), None);
        assert_eq!(c.max_tcp_connections, crate::tcp::DEFAULT_MAX_CONNECTIONS);
        for args in [
            &["shoal", "--tcp-port-base", "tcp"][..],
            &["shoal", "--tcp-port-base", "70000"],
            &["shoal", "--max-tcp-connections", "0"],
            &["shoal", "--tcp-buffer-bytes", "100"],
            &["shoal", "--tcp-auth-timeout", "0"],
        ] {
            assert!(Config::try_parse_from(args).is_err(), "{args:?}");
        }
    }

    #[test]
    fn link_sockets_are_bounded_by_what_a_shard_tells_apart() {
        let c = Config::try_parse_from(["shoal"]).unwrap();
        assert_eq!(c.max_link_sockets, DEFAULT_MAX_LINK_SOCKETS);
        let c = Config::try_parse_from(["shoal", "--max-link-sockets", "0"]).unwrap();
        assert_eq!(c.max_link_sockets, 0);
        let most = crate::driver::MAX_LINK_SOCKETS.to_string();
        let c = Config::try_parse_from(["shoal", "--max-link-sockets", &most]).unwrap();
        assert_eq!(c.max_link_sockets, crate::driver::MAX_LINK_SOCKETS);
        let past = (crate::driver::MAX_LINK_SOCKETS + 1).to_string();
        assert!(Config::try_parse_from(["shoal", "--max-link-sockets", &past]).is_err());
    }

    #[test]
    fn consent_timeout_defaults_to_rfc_7675_and_stays_within_it() {
        let c = Config::try_parse_from(["shoal"]).unwrap();
        assert_eq!(c.consent_timeout, 30);
        let (_dir, path) = config_file("consent-timeout = 15\n");
        let c = Config::load_from(["shoal", "--config", &path]).unwrap();
        assert_eq!(c.consent_timeout, 15);
        for out_of_range in ["14", "31"] {
            assert!(Config::try_parse_from(["shoal", "--consent-timeout", out_of_range]).is_err());
        }
    }

    #[test]
    fn sctp_settings_default_to_webrtc_practice() {
        let c = Config::try_parse_from(["shoal"]).unwrap();
        assert_eq!(
            (
                c.sctp_heartbeat_interval,
                c.sctp_max_init_retransmits,
                c.sctp_max_outstanding_tsns
            ),
            (30, None, 1024)
        );
        let (_dir, path) = config_file(
            "sctp-heartbeat-interval = 0
sctp-max-init-retransmits = 8
sctp-max-outstanding-tsns = 4096
",
        );
        let c = Config::load_from(["shoal", "--config", &path]).unwrap();
        assert_eq!(
            (
                c.sctp_heartbeat_interval,
                c.sctp_max_init_retransmits,
                c.sctp_max_outstanding_tsns
            ),
            (0, Some(8), 4096)
        );
        for out_of_range in ["255", "16385"] {
            assert!(
                Config::try_parse_from(["shoal", "--sctp-max-outstanding-tsns", out_of_range])
                    .is_err()
            );
        }
    }

    #[test]
    fn relay_limits_default_and_come_from_flags_or_the_file() {
        let c = Config::try_parse_from(["shoal"]).unwrap();
        assert_eq!(
            (
                c.relay_high_watermark,
                c.relay_low_watermark,
                c.relay_hold_limit
            ),
            (1 << 20, 512 << 10, 10)
        );
        let (_dir, path) = config_file(
            "relay-high-watermark = 65536
relay-low-watermark = 16384
relay-hold-limit = 3
",
        );
        let c = Config::load_from(["shoal", "--config", &path]).unwrap();
        assert_eq!(
            (
                c.relay_high_watermark,
                c.relay_low_watermark,
                c.relay_hold_limit
            ),
            (65_536, 16_384, 3)
        );
        for args in [
            &["shoal", "--relay-high-watermark", "100"][..],
            &["shoal", "--relay-high-watermark", "4194304"],
            &["shoal", "--relay-hold-limit", "0"],
        ] {
            assert!(Config::try_parse_from(args).is_err(), "{args:?}");
        }
    }

    #[test]
    fn pacer_burst_defaults_and_comes_from_a_flag_or_the_file() {
        let c = Config::try_parse_from(["shoal"]).unwrap();
        assert_eq!(c.pacer_burst_ms, 40);
        let c = Config::try_parse_from(["shoal", "--pacer-burst-ms", "5"]).unwrap();
        assert_eq!(c.pacer_burst_ms, 5);
        let (_dir, path) = config_file("pacer-burst-ms = 20\n");
        let c = Config::load_from(["shoal", "--config", &path]).unwrap();
        assert_eq!(c.pacer_burst_ms, 20);
        for args in [
            &["shoal", "--pacer-burst-ms", "0"][..],
            &["shoal", "--pacer-burst-ms", "101"],
        ] {
            assert!(Config::try_parse_from(args).is_err(), "{args:?}");
        }
    }

    #[test]
    fn connection_limits_default_and_come_from_flags_or_the_file() {
        let c = Config::try_parse_from(["shoal"]).unwrap();
        assert_eq!(
            (
                c.http_header_timeout,
                c.idle_timeout,
                c.tls_handshake_timeout,
                c.max_connections_per_address,
                c.max_connections,
                c.max_tls_handshakes,
                c.max_tls_handshakes_per_address
            ),
            (10, 60, 10, 512, 16_384, 256, 64)
        );
        assert!(c.allowed_origins.is_empty());
        let (_dir, path) = config_file(
            "idle-timeout = 5\nmax-connections = 100\nmax-tls-handshakes-per-address = 4\n\
             allowed-origins = [\"https://a.example\", \"http://b.example:8080\"]\n",
        );
        let c = Config::load_from([
            "shoal",
            "--config",
            &path,
            "--http-header-timeout",
            "2",
            "--allowed-origins",
            "https://C.example:443",
        ])
        .unwrap();
        assert_eq!((c.http_header_timeout, c.idle_timeout), (2, 5));
        assert_eq!(c.max_connections, 100);
        assert_eq!(c.max_tls_handshakes_per_address, 4);
        let origins: Vec<&str> = c.allowed_origins.iter().map(|o| o.as_str()).collect();
        assert_eq!(origins, ["https://c.example"], "the flag wins");
        for args in [
            &["shoal", "--http-header-timeout", "0"][..],
            &["shoal", "--idle-timeout", "3601"],
            &["shoal", "--tls-handshake-timeout", "0"],
            &["shoal", "--max-connections-per-address", "0"],
            &["shoal", "--max-connections", "0"],
            &["shoal", "--max-tls-handshakes-per-address", "0"],
            &["shoal", "--allowed-origins", "a.example"],
            &["shoal", "--allowed-origins", "https://a.example/path"],
        ] {
            assert!(Config::try_parse_from(args).is_err(), "{args:?}");
        }
    }

    #[test]
    fn bad_config_files_are_refused_with_the_key() {
        for (text, needle) in [
            ("shardz = 3", "shardz"),
            ("shards = 0", "0"),
            ("shards = [[1]]", "shards"),
            ("shards = ", "TOML"),
            ("config = \"x\"", "config"),
        ] {
            let (_dir, path) = config_file(text);
            let err = Config::load_from(["shoal", "--config", &path]).unwrap_err();
            let message = err.to_string();
            let found = message.contains(needle)
                || (needle == "TOML" && matches!(err, ConfigError::Toml { .. }));
            assert!(found, "{text}: {message}");
        }
        let err = Config::load_from(["shoal", "--config", "/nonexistent/shoal.toml"]).unwrap_err();
        assert!(matches!(err, ConfigError::Read { .. }), "{err}");
    }

    /// A directory removed when dropped.
    mod tempdir {
        pub struct Dir(std::path::PathBuf);
        impl Dir {
            pub fn new() -> Dir {
                use std::sync::atomic::{AtomicU32, Ordering};
                static NEXT: AtomicU32 = AtomicU32::new(0);
                let n = NEXT.fetch_add(1, Ordering::Relaxed);
                let path =
                    std::env::temp_dir().join(format!("shoal-config-{}-{n}", std::process::id()));
                std::fs::create_dir_all(&path).unwrap();
                Dir(path)
            }
            pub fn path(&self) -> &std::path::Path {
                &self.0
            }
        }
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }

    #[test]
    fn clap_definition_is_consistent() {
        use clap::CommandFactory;
        Config::command().debug_assert();
    }
}
