//! shoal's server: configuration, the mio driver that runs one shard per core on its
//! own UDP socket, the [`control`] plane (gRPC on a tokio thread of its own, talking
//! to shards only through their command channels), and [`sim`], the deterministic
//! simulated network that tests, benchmarks and embedding users drive the very same
//! shards through.

pub mod addresses;
pub mod config;
pub mod control;
pub mod driver;
pub mod endpoint;
pub mod ice_servers;
pub mod logging;
pub mod sim;
pub mod tcp;
pub mod token;
pub mod udp;
