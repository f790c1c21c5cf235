//! shoal's data: the ECS components and resources a shard's tables hold, and the
//! protocols they carry, as wire formats and sans-I/O state machines.
//!
//! Nothing in this crate does I/O, reads a clock or runs a pass. Time arrives as a
//! [`time::Time`] argument; bytes arrive as [`bytes::Bytes`] and are parsed without
//! copying. Every parser takes untrusted input and returns a typed error: nothing
//! here panics on what came from the network.
//!
//! **Protocols** (no ECS in them, bar the `Component` derive of the association
//! that is a peer's component as it is): [`stun`] (RFC 8489); [`dtls`] records and
//! handshake messages (RFC 6347) and [`dtls::DtlsConn`], the DTLS 1.2 machine with
//! its crypto; [`srtp`] contexts (RFC 3711, RFC 7714); [`sctp`] chunks, DCEP, the
//! receive and send sides and the association (RFC 9260, RFC 8832); [`sdp`] (RFC
//! 8866, JSEP negotiation per RFC 8829); [`rtp`] packets with RFC 8285 header
//! extensions; [`rtcp`] compound packets with the feedback an SFU uses (NACK, PLI,
//! FIR, REMB, transport-cc). Each parser keeps or borrows the received bytes and
//! each writer appends to a caller-owned [`bytes::BytesMut`]. [`net::PacketClass`]
//! and [`rtp::RtpOrRtcp`] sort a datagram by its first two bytes (RFC 7983 §7, RFC
//! 5761 §4).
//!
//! **ECS data**: a peer and its ICE state ([`peer`]), its secured transport
//! ([`transport`]: DTLS session, SRTP contexts), its data channels
//! ([`datachannel`]), its transport-wide congestion control state ([`congestion`]), tracks and subscriptions ([`media`]), rooms ([`room`]), the
//! per-tick work lists and events ([`tick`]), what crosses to sibling shards
//! ([`relay`]), timers ([`timer`]), counters ([`stats`]) and what every pass shares
//! ([`shared`]). The machines live here, beside their formats, because the
//! components are their state: a component type must come from this crate or one
//! below it.

pub mod congestion;
pub mod datachannel;
pub mod dtls;
pub mod hash;
pub mod media;
pub mod net;
pub mod peer;
pub mod relay;
pub mod room;
pub mod rtcp;
pub mod rtp;
pub mod sctp;
pub mod sdp;
pub mod shared;
pub mod srtp;
pub mod stats;
pub mod stun;
pub mod tick;
pub mod time;
pub mod timer;
pub mod transport;
