//! COOKIE ECHO (RFC 9260 §3.3.11): the State Cookie from the INIT ACK, sent back as the
//! whole chunk value.

use bytes::{BufMut, Bytes, BytesMut};

use super::{CHUNK_HEADER_LEN, Header, WriteChunk, chunk_type, put_chunk_header, put_padding};
use crate::sctp::error::SctpError;

/// A COOKIE ECHO chunk. `C` is the cookie: [`Bytes`] as parsed, any `AsRef<[u8]>` to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CookieEcho<C = Bytes> {
    /// "the exact cookie received in the State Cookie parameter" (RFC 9260 §3.3.11).
    pub cookie: C,
}

impl CookieEcho {
    pub(crate) fn parse(_h: Header, value: Bytes) -> Result<CookieEcho, SctpError> {
        Ok(CookieEcho { cookie: value })
    }
}

impl<C: AsRef<[u8]>> WriteChunk for CookieEcho<C> {
    fn encoded_len(&self) -> usize {
        CHUNK_HEADER_LEN + self.cookie.as_ref().len()
    }

    fn write_to(&self, out: &mut BytesMut) {
        let len = self.encoded_len();
        put_chunk_header(out, chunk_type::COOKIE_ECHO, 0, len);
        out.put_slice(self.cookie.as_ref());
        put_padding(out, len);
    }
}
