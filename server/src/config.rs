//! The `shoal` command line: every setting of a node, from flags or `SHOAL_*`
//! environment variables (a flag wins over its variable).

use std::net::{IpAddr, Ipv4Addr};
use std::num::NonZeroUsize;
use std::str::FromStr;

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

    /// TEST ONLY, until the control plane exists: registers an ICE-lite peer with these
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
            })
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
            "--static-peer",
            "abcd:0123456789012345678901:wxyz:abcdefghijklmnopqrstuv",
            "--static-peer",
            "efgh:0123456789012345678901:wxyz:abcdefghijklmnopqrstuv",
        ])
        .unwrap();
        assert_eq!(c.shards.get(), 3);
        assert_eq!(c.udp_port_base, 0);
        assert_eq!(c.bind, IpAddr::V4(Ipv4Addr::UNSPECIFIED));
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
        ] {
            assert!(Config::try_parse_from(args).is_err(), "{args:?}");
        }
    }

    #[test]
    fn clap_definition_is_consistent() {
        use clap::CommandFactory;
        Config::command().debug_assert();
    }
}
