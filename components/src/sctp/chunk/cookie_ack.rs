//! COOKIE ACK (RFC 9260 §3.3.12): a bare header, Length = 4.

use bytes::{Bytes, BytesMut};

use super::{CHUNK_HEADER_LEN, Header, WriteChunk, chunk_type, put_chunk_header};
use crate::sctp::error::SctpError;

/// A COOKIE ACK chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct CookieAck;

impl CookieAck {
    pub(crate) fn parse(h: Header, value: Bytes) -> Result<CookieAck, SctpError> {
        value.is_empty().then_some(CookieAck).ok_or(h.bad_length())
    }
}

impl WriteChunk for CookieAck {
    fn encoded_len(&self) -> usize {
        CHUNK_HEADER_LEN
    }

    fn write_to(&self, out: &mut BytesMut) {
        put_chunk_header(out, chunk_type::COOKIE_ACK, 0, CHUNK_HEADER_LEN);
    }
}
