//! SHUTDOWN COMPLETE (RFC 9260 §3.3.13): a bare header with the T bit, Length = 4.

use bytes::{Bytes, BytesMut};

use super::{CHUNK_HEADER_LEN, Header, WriteChunk, chunk_type, put_chunk_header};
use crate::sctp::error::SctpError;

/// RFC 9260 §3.3.13: the T bit is the lowest flag bit.
const FLAG_T: u8 = 0x01;

/// A SHUTDOWN COMPLETE chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ShutdownComplete {
    /// T bit: set when the Verification Tag is reflected rather than the peer's own.
    pub t_bit: bool,
}

impl ShutdownComplete {
    pub(crate) fn parse(h: Header, value: Bytes) -> Result<ShutdownComplete, SctpError> {
        let chunk = ShutdownComplete {
            t_bit: h.flags & FLAG_T != 0,
        };
        value.is_empty().then_some(chunk).ok_or(h.bad_length())
    }
}

impl WriteChunk for ShutdownComplete {
    fn encoded_len(&self) -> usize {
        CHUNK_HEADER_LEN
    }

    fn write_to(&self, out: &mut BytesMut) {
        let flags = u8::from(self.t_bit) * FLAG_T;
        put_chunk_header(out, chunk_type::SHUTDOWN_COMPLETE, flags, CHUNK_HEADER_LEN);
    }
}
