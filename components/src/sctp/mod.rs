//! SCTP over DTLS (RFC 8261) as WebRTC data channels use it (RFC 8831): the wire
//! formats (`chunk`), the receive side (`rx`: data tracker and reassembly), the
//! send side (`tx`: send queues, retransmission queue, congestion control), and the
//! association that joins them (`assoc`, with its State Cookie in `cookie`): the
//! rules applied to what arrives. Nothing here sends or keeps time; the SCTP passes
//! in `shoal-systems` drive it.

pub mod assoc;
pub mod chunk;
pub mod cookie;
pub mod dcep;
pub mod error;
pub mod num;
pub mod packet;
pub mod rx;
pub mod tx;

pub use num::{Ppid, Ssn, StreamId, Tsn};

pub use crate::hash::FastMap;
