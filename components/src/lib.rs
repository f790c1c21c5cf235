//! shoal's plain data: ECS components and resources, and the wire formats.
//!
//! Nothing in this crate does I/O or reads a clock. Time arrives as a [`time::Time`]
//! argument; bytes arrive as [`bytes::Bytes`] and are parsed without copying.
//! Every parser takes untrusted input and returns a typed error: nothing here panics
//! on what came from the network.

pub mod dtls;
pub mod hash;
pub mod net;
pub mod peer;
pub mod room;
pub mod rtcp;
pub mod rtp;
pub mod sctp;
pub mod sdp;
pub mod stats;
pub mod stun;
pub mod tick;
pub mod time;
pub mod timer;
