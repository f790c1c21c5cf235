//! Tests of the receive side: the tracker, reassembly, the two together, and a seeded
//! randomized exchange with loss, reordering, duplication and FORWARD TSN.

mod random;
mod reassembly;
mod receiver;
mod tracker;

use bytes::Bytes;

use super::DataIn;
use crate::sctp::num::{Ppid, Ssn, StreamId, Tsn};

/// A DATA chunk. `flags` holds `B`, `E` and `U` for the B, E and U bits.
fn chunk(tsn: u32, stream: u16, ssn: u16, flags: &str, payload: &[u8]) -> DataIn {
    DataIn {
        tsn: Tsn(tsn),
        stream: StreamId(stream),
        ssn: Ssn(ssn),
        ppid: Ppid::BINARY,
        unordered: flags.contains('U'),
        begin: flags.contains('B'),
        end: flags.contains('E'),
        immediate_ack: false,
        payload: Bytes::copy_from_slice(payload),
    }
}
