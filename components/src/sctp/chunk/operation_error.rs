//! ERROR (RFC 9260 §3.3.10): one or more error causes.

use bytes::{Bytes, BytesMut};

use super::cause::ErrorCause;
use super::param::{ParamList, Params};
use super::{
    CHUNK_HEADER_LEN, Header, MAX_PARAMS_PER_CHUNK, WriteChunk, chunk_type, put_chunk_header,
    put_padding,
};
use crate::sctp::error::SctpError;

/// An ERROR (Operation Error) chunk. `P` is the cause list: [`Params`] as parsed,
/// `&[ErrorCause]` to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OperationError<P = Params<ErrorCause>> {
    /// One or more error causes.
    pub causes: P,
}

impl OperationError {
    /// RFC 9260 §3.3.10: "It contains one or more error causes"; none is malformed.
    pub(crate) fn parse(h: Header, value: Bytes) -> Result<OperationError, SctpError> {
        let causes = Params::parse(value, h.typ, MAX_PARAMS_PER_CHUNK)?;
        if causes.is_empty() {
            return Err(SctpError::MissingParameter { chunk: h.typ });
        }
        Ok(OperationError { causes })
    }
}

impl<P: ParamList> WriteChunk for OperationError<P> {
    fn encoded_len(&self) -> usize {
        CHUNK_HEADER_LEN + self.causes.encoded_len()
    }

    fn write_to(&self, out: &mut BytesMut) {
        let len = self.encoded_len();
        put_chunk_header(out, chunk_type::ERROR, 0, len);
        self.causes.write_to(out);
        put_padding(out, len);
    }
}
