//! SCTP associations for WebRTC data channels (RFC 9260 over DTLS, RFC 8261): the
//! state the association passes keep in each peer's components and the pieces they
//! are built from.

pub mod assoc;
pub mod cookie;
pub mod pass;
