//! shoal's behaviour: protocol state machines and the ordered passes that run them
//! over the ECS tables of a [`Shard`].
//!
//! Sans-I/O throughout: nothing here owns a socket or reads a clock. A [`Shard`] is
//! fed datagrams and the current time, drained of datagrams, and asked when it next
//! wants to be woken. The mio driver in `shoal-server` and the deterministic simulator
//! drive the very same type.

pub mod datachannel;
pub mod dtls;
pub mod egress;
pub mod ice;
pub mod ingest;
pub mod media;
pub mod pass;
pub mod relay;
pub mod sctp;
pub mod shard;
pub mod timers;

pub use pass::Pass;
pub use shard::{Command, CommandError, PeerDtls, PeerSpec, SctpSendError, Shard, ShardConfig};
pub use shoal_components::tick::{RemoveReason, ShardEvent};
