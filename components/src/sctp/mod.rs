//! SCTP over DTLS (RFC 8261) as WebRTC data channels use it (RFC 8831): the wire
//! formats (`chunk`), the receive side (`rx`: data tracker and reassembly) and the
//! send side (`tx`: send queues, retransmission queue, congestion control), all as
//! plain data the passes in `shoal-systems` drive.

pub mod chunk;
pub mod dcep;
pub mod error;
pub mod num;
pub mod packet;
pub mod rx;
pub mod tx;

pub use num::{Ppid, Ssn, StreamId, Tsn};

pub use crate::hash::FastMap;
