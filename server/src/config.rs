//! The `shoal` command line: every setting of a node, from flags or `SHOAL_*`
//! environment variables (a flag wins over its variable).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4};
use std::num::NonZeroUsize;
use std::str::FromStr;
use std::time::Duration;

use clap::Parser;
use clap::builder::TypedValueParser;
use shoal_components::peer::{IceCredentials, IceRole, PeerId};
use shoal_systems::PeerSpec;

/// The default first UDP port: shard `i` binds `DEFAULT_UDP_PORT_BASE + i`.
pub const DEFAULT_UDP_PORT_BASE: u16 = 7100;
/// The default number of datagrams read from the socket and fed to a shard per tick.
pub const DEFAULT_MAX_DATAGRAMS_PER_TICK: usize = 64;
/// The default number of peers one shard holds at once.
pub const DEFAULT_MAX_PEERS_PER_SHARD: usize = 10_000;
/// The default address of the gRPC control plane.
pub const DEFAULT_GRPC_ADDR: SocketAddr =
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 7071));
/// The default number of rooms a node holds at once.
pub const DEFAULT_MAX_ROOMS: u32 = 10_000;
/// The default number of participants one room admits.
pub const DEFAULT_MAX_PARTICIPANTS_PER_ROOM: u32 = 1_000;
/// The default number of seconds an empty room stays open.
pub const DEFAULT_ROOM_EMPTY_TIMEOUT_SECS: u32 = 300;

/// shoal: a WebRTC selective forwarding unit. One process is one cluster node; it runs
/// one shard per core, each with its own UDP port.
#[derive(Parser, Clone, Debug, PartialEq, Eq)]
#[command(name = "shoal", version)]
pub struct Config {
    /// Number of shards, one thread and one UDP socket each; defaults to the available
    /// cores.
    #[arg(long, env = "SHOAL_SHARDS", value_name = "N", default_value_t = default_shards())]
    pub shards: NonZeroUsize,

    /// First UDP port: shard i binds port base+i. 0 gives every shard an ephemeral port
    /// (the bound addresses are printed at start-up).
    #[arg(long, env = "SHOAL_UDP_PORT_BASE", value_name = "PORT", default_value_t = DEFAULT_UDP_PORT_BASE)]
    pub udp_port_base: u16,

    /// IP address the shards' UDP sockets bind to.
    #[arg(long, env = "SHOAL_BIND", value_name = "IP", default_value_t = IpAddr::V4(Ipv4Addr::LOCALHOST))]
    pub bind: IpAddr,

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

    /// TEST ONLY, until signalling exists: registers an ICE-lite peer with these
    /// credentials on every shard at start-up. Repeatable; the n-th flag (from 0) is
    /// peer id n. Format LOCAL_UFRAG:LOCAL_PWD:REMOTE_UFRAG:REMOTE_PWD (RFC 8839 §5.4:
    /// ufrags 4-256 and passwords 22-256 ice-chars).
    #[arg(long = "static-peer", value_name = "CREDENTIALS")]
    pub static_peers: Vec<StaticPeer>,
}

impl Default for Config {
    /// The defaults of every flag, without reading the environment.
    fn default() -> Config {
        Config {
            shards: default_shards(),
            udp_port_base: DEFAULT_UDP_PORT_BASE,
            bind: IpAddr::V4(Ipv4Addr::LOCALHOST),
            max_datagrams_per_tick: DEFAULT_MAX_DATAGRAMS_PER_TICK,
            max_peers_per_shard: DEFAULT_MAX_PEERS_PER_SHARD,
            grpc_addr: Listen::Addr(DEFAULT_GRPC_ADDR),
            max_rooms: DEFAULT_MAX_ROOMS,
            max_participants_per_room: DEFAULT_MAX_PARTICIPANTS_PER_ROOM,
            room_empty_timeout: DEFAULT_ROOM_EMPTY_TIMEOUT_SECS,
            static_peers: Vec::new(),
        }
    }
}

impl Config {
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
            })
    }

    /// How long a room created without an empty timeout stays open while empty.
    pub fn room_empty_timeout(&self) -> Duration {
        Duration::from_secs(u64::from(self.room_empty_timeout))
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

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(c.bind, IpAddr::V4(Ipv4Addr::UNSPECIFIED));
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
    fn clap_definition_is_consistent() {
        use clap::CommandFactory;
        Config::command().debug_assert();
    }
}
