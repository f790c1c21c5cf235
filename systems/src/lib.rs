//! shoal's behaviour: the ordered passes that run the protocol machines of
//! `shoal-components` over the ECS tables of a [`Shard`], and the [`Node`] of shards
//! that forwards between them.
//!
//! Sans-I/O throughout: nothing here owns a socket or reads a clock. A [`Shard`] is
//! fed datagrams and the current time, drained of datagrams, and asked when it next
//! wants to be woken. The mio driver in `shoal-server` and the deterministic simulator
//! drive the very same type.

pub mod node;
pub mod passes;
pub mod peer;
pub mod shard;

pub use node::{Links, Node, Refused, SiblingBatch};
pub use passes::Pass;
pub use shard::{
    Census, Command, CommandError, CongestionReport, LayerReport, PeerDtls, PeerSpec,
    SctpSendError, Shard, ShardConfig,
};
pub use shoal_components::relay::RelayLimits;
pub use shoal_components::tick::{RemoveReason, ShardEvent};
