//! HEARTBEAT and HEARTBEAT ACK (RFC 9260 §3.3.5, §3.3.6): one Heartbeat Info parameter
//! whose value only its sender understands, reflected back unchanged.

use bytes::{BufMut, Bytes, BytesMut};

use super::param::{PARAM_HEADER_LEN, next_tlv, param_type};
use super::{CHUNK_HEADER_LEN, Header, WriteChunk, chunk_type, put_chunk_header, put_padding};
use crate::sctp::error::SctpError;

/// HEARTBEAT (`TYPE` 4) or HEARTBEAT ACK (`TYPE` 5); use the [`Heartbeat`] and
/// [`HeartbeatAck`] aliases. `I` is the Sender-Specific Heartbeat Info: [`Bytes`] as
/// parsed, any `AsRef<[u8]>` to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeartbeatChunk<const TYPE: u8, I = Bytes> {
    /// The value of the Heartbeat Info parameter (type 1), without its TLV header.
    pub info: I,
}

/// HEARTBEAT (RFC 9260 §3.3.5).
pub type Heartbeat<I = Bytes> = HeartbeatChunk<{ chunk_type::HEARTBEAT }, I>;
/// HEARTBEAT ACK (RFC 9260 §3.3.6).
pub type HeartbeatAck<I = Bytes> = HeartbeatChunk<{ chunk_type::HEARTBEAT_ACK }, I>;

impl<const TYPE: u8> HeartbeatChunk<TYPE> {
    /// The value must be exactly one Heartbeat Info TLV (type 1), "Mandatory" in both
    /// chunks' parameter tables (RFC 9260 §3.3.5, §3.3.6).
    pub(crate) fn parse(h: Header, value: Bytes) -> Result<Self, SctpError> {
        let missing = SctpError::MissingParameter { chunk: h.typ };
        let (typ, info, next) = next_tlv(&value, 0).ok_or(missing)??;
        if typ != param_type::HEARTBEAT_INFO {
            return Err(SctpError::BadParameter { typ });
        }
        if next != value.len() {
            return Err(SctpError::TooManyParameters { chunk: h.typ });
        }
        Ok(HeartbeatChunk { info })
    }
}

impl<const TYPE: u8, I: AsRef<[u8]>> WriteChunk for HeartbeatChunk<TYPE, I> {
    fn encoded_len(&self) -> usize {
        CHUNK_HEADER_LEN + PARAM_HEADER_LEN + self.info.as_ref().len()
    }

    /// # Panics
    ///
    /// Only on a programmer error: info longer than 65535 - 8 bytes.
    fn write_to(&self, out: &mut BytesMut) {
        let len = self.encoded_len();
        put_chunk_header(out, TYPE, 0, len);
        out.put_u16(param_type::HEARTBEAT_INFO);
        out.put_u16((len - CHUNK_HEADER_LEN) as u16);
        out.put_slice(self.info.as_ref());
        put_padding(out, len);
    }
}
