//! ABORT (RFC 9260 §3.3.7): the T bit and zero or more error causes.

use bytes::{Bytes, BytesMut};

use super::cause::ErrorCause;
use super::param::{ParamList, Params};
use super::{
    CHUNK_HEADER_LEN, Header, MAX_PARAMS_PER_CHUNK, WriteChunk, chunk_type, put_chunk_header,
    put_padding,
};
use crate::sctp::error::SctpError;

/// RFC 9260 §3.3.7: the T bit is the lowest flag bit.
const FLAG_T: u8 = 0x01;

/// An ABORT chunk. `P` is the cause list: [`Params`] as parsed, `&[ErrorCause]` to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Abort<P = Params<ErrorCause>> {
    /// T bit: set when the Verification Tag is reflected rather than the peer's own.
    pub t_bit: bool,
    /// Zero or more error causes.
    pub causes: P,
}

impl Abort {
    pub(crate) fn parse(h: Header, value: Bytes) -> Result<Abort, SctpError> {
        Ok(Abort {
            t_bit: h.flags & FLAG_T != 0,
            causes: Params::parse(value, h.typ, MAX_PARAMS_PER_CHUNK)?,
        })
    }
}

impl<P: ParamList> WriteChunk for Abort<P> {
    fn encoded_len(&self) -> usize {
        CHUNK_HEADER_LEN + self.causes.encoded_len()
    }

    fn write_to(&self, out: &mut BytesMut) {
        let len = self.encoded_len();
        put_chunk_header(out, chunk_type::ABORT, u8::from(self.t_bit) * FLAG_T, len);
        self.causes.write_to(out);
        put_padding(out, len);
    }
}
