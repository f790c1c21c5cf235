//! DATA (RFC 9260 §3.3.1): one fragment of a user message. The payload is a slice of
//! the received packet, never copied.

use bytes::{BufMut, Bytes, BytesMut};

use super::{CHUNK_HEADER_LEN, Header, WriteChunk, be16, be32, chunk_type, put_chunk_header};
use super::{pad4, put_padding};
use crate::sctp::error::SctpError;
use crate::sctp::num::{Ppid, Ssn, StreamId, Tsn};

/// DATA's fixed part: chunk header, TSN, stream, SSN, PPID (RFC 9260 §3.3.1).
pub const DATA_HEADER_LEN: usize = 16;

// RFC 9260 §3.3.1: flags are `Res(4) I U B E`.
const FLAG_END: u8 = 0x01;
const FLAG_BEGINNING: u8 = 0x02;
const FLAG_UNORDERED: u8 = 0x04;
const FLAG_IMMEDIATE: u8 = 0x08;

/// The fields of a DATA chunk other than its payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct DataHeader {
    /// TSN of this fragment.
    pub tsn: Tsn,
    /// Stream Identifier S.
    pub stream_id: StreamId,
    /// Stream Sequence Number n; the receiver ignores it when `unordered`.
    pub ssn: Ssn,
    /// Payload Protocol Identifier (RFC 8831 §8 for WebRTC's values).
    pub ppid: Ppid,
    /// I bit: the sender asks for a SACK without delay.
    pub immediate: bool,
    /// U bit: unordered; no SSN applies.
    pub unordered: bool,
    /// B bit: first fragment of a user message.
    pub beginning: bool,
    /// E bit: last fragment of a user message (B and E both set: unfragmented).
    pub end: bool,
}

impl DataHeader {
    /// The Chunk Flags byte; reserved bits are zero on transmit.
    pub fn flags(&self) -> u8 {
        (u8::from(self.immediate) * FLAG_IMMEDIATE)
            | (u8::from(self.unordered) * FLAG_UNORDERED)
            | (u8::from(self.beginning) * FLAG_BEGINNING)
            | (u8::from(self.end) * FLAG_END)
    }

    /// Appends the 16-byte chunk header and fixed fields for a payload of
    /// `payload_len` bytes. The caller appends the payload and then
    /// [`DataHeader::padding_len`] zero bytes.
    ///
    /// # Panics
    ///
    /// Only on a programmer error: a payload longer than 65535 - 16 bytes.
    pub fn write_to(&self, out: &mut BytesMut, payload_len: usize) {
        put_chunk_header(
            out,
            chunk_type::DATA,
            self.flags(),
            DATA_HEADER_LEN + payload_len,
        );
        out.put_u32(self.tsn.0);
        out.put_u16(self.stream_id.0);
        out.put_u16(self.ssn.0);
        out.put_u32(self.ppid.0);
    }

    /// How many padding bytes follow a payload of `payload_len` bytes.
    pub const fn padding_len(payload_len: usize) -> usize {
        pad4(DATA_HEADER_LEN + payload_len) - (DATA_HEADER_LEN + payload_len)
    }
}

/// A DATA chunk. `P` is the payload: [`Bytes`] as parsed (a slice of the packet), or any
/// `AsRef<[u8]>` to send (e.g. `&[u8]`, a slice of the message being fragmented).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Data<P = Bytes> {
    /// Everything but the payload.
    pub header: DataHeader,
    /// User Data, without padding; never empty on the wire.
    pub payload: P,
}

impl Data {
    /// RFC 9260 §3.3.1. A DATA chunk without user data is [`SctpError::NoUserData`]:
    /// "L MUST be greater than 0", and §3.3.10.9 has the receiver report it.
    pub(crate) fn parse(h: Header, value: Bytes) -> Result<Data, SctpError> {
        let fixed = value
            .get(..DATA_HEADER_LEN - CHUNK_HEADER_LEN)
            .ok_or(h.too_short())?;
        let header = DataHeader {
            tsn: Tsn(be32(fixed, 0)),
            stream_id: StreamId(be16(fixed, 4)),
            ssn: Ssn(be16(fixed, 6)),
            ppid: Ppid(be32(fixed, 8)),
            immediate: h.flags & FLAG_IMMEDIATE != 0,
            unordered: h.flags & FLAG_UNORDERED != 0,
            beginning: h.flags & FLAG_BEGINNING != 0,
            end: h.flags & FLAG_END != 0,
        };
        if value.len() == fixed.len() {
            return Err(SctpError::NoUserData { tsn: header.tsn });
        }
        let payload = value.slice(DATA_HEADER_LEN - CHUNK_HEADER_LEN..);
        Ok(Data { header, payload })
    }
}

impl<P: AsRef<[u8]>> WriteChunk for Data<P> {
    fn encoded_len(&self) -> usize {
        DATA_HEADER_LEN + self.payload.as_ref().len()
    }

    fn write_to(&self, out: &mut BytesMut) {
        let payload = self.payload.as_ref();
        self.header.write_to(out, payload.len());
        out.put_slice(payload);
        put_padding(out, DATA_HEADER_LEN + payload.len());
    }
}
