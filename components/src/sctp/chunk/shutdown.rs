//! SHUTDOWN (RFC 9260 §3.3.8): the Cumulative TSN Ack, Length = 8.

use bytes::{BufMut, Bytes, BytesMut};

use super::{CHUNK_HEADER_LEN, Header, WriteChunk, be32, chunk_type, put_chunk_header};
use crate::sctp::error::SctpError;
use crate::sctp::num::Tsn;

/// A SHUTDOWN chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Shutdown {
    /// Cumulative TSN Ack; SHUTDOWN carries no gap blocks, so their absence is no renege.
    pub cumulative_tsn_ack: Tsn,
}

impl Shutdown {
    pub(crate) fn parse(h: Header, value: Bytes) -> Result<Shutdown, SctpError> {
        if value.len() != 4 {
            return Err(h.bad_length());
        }
        Ok(Shutdown {
            cumulative_tsn_ack: Tsn(be32(&value, 0)),
        })
    }
}

impl WriteChunk for Shutdown {
    fn encoded_len(&self) -> usize {
        CHUNK_HEADER_LEN + 4
    }

    fn write_to(&self, out: &mut BytesMut) {
        put_chunk_header(out, chunk_type::SHUTDOWN, 0, CHUNK_HEADER_LEN + 4);
        out.put_u32(self.cumulative_tsn_ack.0);
    }
}
