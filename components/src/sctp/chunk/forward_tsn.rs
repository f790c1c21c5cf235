//! FORWARD TSN (RFC 3758 §3.2): the new cumulative TSN and, per ordered stream that had
//! messages abandoned, the largest SSN skipped.

use bytes::{BufMut, Bytes, BytesMut};

use super::{
    CHUNK_HEADER_LEN, Header, MAX_LIST_ITEMS, RawWords, WordList, WriteChunk, be32, chunk_type,
    put_chunk_header,
};
use crate::sctp::error::SctpError;
use crate::sctp::num::{Ssn, StreamId, Tsn};

/// One (Stream-N, Stream Sequence-N) pair: the largest SSN skipped on that stream.
/// RFC 3758 §3.2: it "MUST NOT report TSN's corresponding to DATA chunk that are marked
/// as unordered".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SkippedStream {
    /// Stream-N.
    pub stream_id: StreamId,
    /// Stream Sequence-N: the largest SSN skipped on this stream.
    pub ssn: Ssn,
}

/// A FORWARD TSN chunk. `S` is the stream list: [`SkippedStreams`] as parsed,
/// `&[SkippedStream]` to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForwardTsn<S = SkippedStreams> {
    /// New Cumulative TSN: the receiver treats every TSN up to it as received.
    pub new_cumulative_tsn: Tsn,
    /// The skipped ordered streams.
    pub skipped: S,
}

impl ForwardTsn {
    /// RFC 3758 §3.2: 4 bytes of TSN, then whole 4-byte pairs, at most [`MAX_LIST_ITEMS`].
    pub(crate) fn parse(h: Header, value: Bytes) -> Result<ForwardTsn, SctpError> {
        let tsn = value.get(..4).ok_or(h.too_short())?;
        let pairs = value.len() - 4;
        if !pairs.is_multiple_of(4) || pairs / 4 > MAX_LIST_ITEMS {
            return Err(SctpError::ForwardTsnBadLength { length: h.length });
        }
        Ok(ForwardTsn {
            new_cumulative_tsn: Tsn(be32(tsn, 0)),
            skipped: SkippedStreams(RawWords(value.slice(4..))),
        })
    }
}

impl<S: WordList> WriteChunk for ForwardTsn<S> {
    fn encoded_len(&self) -> usize {
        CHUNK_HEADER_LEN + 4 + 4 * self.skipped.count()
    }

    fn write_to(&self, out: &mut BytesMut) {
        put_chunk_header(out, chunk_type::FORWARD_TSN, 0, self.encoded_len());
        out.put_u32(self.new_cumulative_tsn.0);
        self.skipped.write_to(out);
    }
}

/// The (stream, SSN) pairs of a received FORWARD TSN.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct SkippedStreams(RawWords);

impl SkippedStreams {
    /// The pairs in packet order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = SkippedStream> + '_ {
        self.0.iter().map(|w| SkippedStream {
            stream_id: StreamId(u16::from_be_bytes([w[0], w[1]])),
            ssn: Ssn(u16::from_be_bytes([w[2], w[3]])),
        })
    }

    /// Number of pairs.
    pub fn len(&self) -> usize {
        self.0.count()
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.0.count() == 0
    }
}

impl WordList for SkippedStreams {
    fn count(&self) -> usize {
        self.0.count()
    }

    fn write_to(&self, out: &mut BytesMut) {
        self.0.write_to(out);
    }
}

impl WordList for &[SkippedStream] {
    fn count(&self) -> usize {
        self.len()
    }

    fn write_to(&self, out: &mut BytesMut) {
        for s in self.iter() {
            out.put_u16(s.stream_id.0);
            out.put_u16(s.ssn.0);
        }
    }
}
