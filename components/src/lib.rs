//! shoal's plain data: ECS components and resources, and the wire formats.
//!
//! Nothing in this crate does I/O or reads a clock. Time arrives as a [`time::Time`]
//! argument; bytes arrive as [`bytes::Bytes`] and are parsed without copying.
//! Every parser takes untrusted input and returns a typed error: nothing here panics
//! on what came from the network.
//!
//! The wire formats: [`stun`] (RFC 8489), [`dtls`] records and handshake messages
//! (RFC 6347), [`sctp`] chunks and DCEP (RFC 9260, RFC 8832), [`sdp`] (RFC 8866, JSEP
//! answers per RFC 8829), [`rtp`] packets with RFC 8285 header extensions, and [`rtcp`]
//! compound packets with the feedback an SFU uses (NACK, PLI, FIR, REMB,
//! transport-cc). Each parses a view that keeps or borrows the received bytes, and
//! writes to a caller-owned [`bytes::BytesMut`]; a parsed RTCP packet writes back the
//! bytes it was parsed from. [`net::PacketClass`] and [`rtp::RtpOrRtcp`] sort a
//! datagram by its first two bytes (RFC 7983 §7, RFC 5761 §4).

pub mod dtls;
pub mod hash;
pub mod media;
pub mod net;
pub mod peer;
pub mod room;
pub mod rtcp;
pub mod rtp;
pub mod sctp;
pub mod sdp;
pub mod srtp;
pub mod stats;
pub mod stun;
pub mod tick;
pub mod time;
pub mod timer;
