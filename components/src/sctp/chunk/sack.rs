//! SACK (RFC 9260 §3.3.4): cumulative TSN ack, receive window, gap ack blocks as
//! offsets from the cumulative TSN, and duplicate TSNs. Parsing yields iterators over
//! the received bytes; writing takes slices, so neither side allocates.

use bytes::{BufMut, Bytes, BytesMut};

use super::{
    CHUNK_HEADER_LEN, Header, MAX_LIST_ITEMS, RawWords, WordList, WriteChunk, be16, be32,
    chunk_type, put_chunk_header,
};
use crate::sctp::error::SctpError;
use crate::sctp::num::Tsn;

/// The fixed fields after the chunk header: cum TSN, a_rwnd, the two counts.
const FIXED_LEN: usize = 12;

/// One Gap Ack Block: TSNs `cumulative_tsn_ack + start ..= cumulative_tsn_ack + end`
/// were received (RFC 9260 §3.3.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GapAckBlock {
    /// Gap Ack Block Start, an offset from the Cumulative TSN Ack; at least 1.
    pub start: u16,
    /// Gap Ack Block End, an offset from the Cumulative TSN Ack; at least `start`.
    pub end: u16,
}

impl GapAckBlock {
    /// The lowest TSN this block acknowledges.
    pub fn first_tsn(&self, cumulative_tsn_ack: Tsn) -> Tsn {
        Tsn(cumulative_tsn_ack.0.wrapping_add(u32::from(self.start)))
    }

    /// The highest TSN this block acknowledges.
    pub fn last_tsn(&self, cumulative_tsn_ack: Tsn) -> Tsn {
        Tsn(cumulative_tsn_ack.0.wrapping_add(u32::from(self.end)))
    }
}

/// A SACK chunk. `G` and `D` are the gap ack blocks and duplicate TSNs: received views
/// ([`GapAckBlocks`], [`DuplicateTsns`]) as parsed, `&[GapAckBlock]` and `&[Tsn]` to
/// send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sack<G = GapAckBlocks, D = DuplicateTsns> {
    /// Cumulative TSN Ack: every TSN up to and including it was received.
    pub cumulative_tsn_ack: Tsn,
    /// Advertised Receiver Window Credit, in bytes.
    pub a_rwnd: u32,
    /// Gap Ack Blocks, in the order of the packet (lowest first from a correct sender).
    pub gap_ack_blocks: G,
    /// Duplicate TSNs received since the last SACK; a TSN seen three times is listed twice.
    pub duplicate_tsns: D,
}

impl Sack {
    /// RFC 9260 §3.3.4. The counts must describe exactly the rest of the chunk, each list
    /// at most [`MAX_LIST_ITEMS`]; every gap block must satisfy 1 <= start <= end.
    pub(crate) fn parse(h: Header, value: Bytes) -> Result<Sack, SctpError> {
        let fixed = value.get(..FIXED_LEN).ok_or(h.too_short())?;
        let (gaps, dups) = (be16(fixed, 8), be16(fixed, 10));
        let (n, m) = (usize::from(gaps), usize::from(dups));
        if n > MAX_LIST_ITEMS || m > MAX_LIST_ITEMS || FIXED_LEN + 4 * (n + m) != value.len() {
            return Err(SctpError::SackCountMismatch {
                gap_ack_blocks: gaps,
                duplicate_tsns: dups,
            });
        }
        let blocks = GapAckBlocks(RawWords(value.slice(FIXED_LEN..FIXED_LEN + 4 * n)));
        if let Some(bad) = blocks.iter().find(|b| b.start == 0 || b.start > b.end) {
            return Err(SctpError::BadGapAckBlock {
                start: bad.start,
                end: bad.end,
            });
        }
        Ok(Sack {
            cumulative_tsn_ack: Tsn(be32(fixed, 0)),
            a_rwnd: be32(fixed, 4),
            gap_ack_blocks: blocks,
            duplicate_tsns: DuplicateTsns(RawWords(value.slice(FIXED_LEN + 4 * n..))),
        })
    }
}

impl<G: WordList, D: WordList> WriteChunk for Sack<G, D> {
    fn encoded_len(&self) -> usize {
        CHUNK_HEADER_LEN
            + FIXED_LEN
            + 4 * (self.gap_ack_blocks.count() + self.duplicate_tsns.count())
    }

    /// # Panics
    ///
    /// Only on a programmer error: more than 65535 gap blocks or duplicates, or a chunk
    /// over 65535 bytes.
    fn write_to(&self, out: &mut BytesMut) {
        let count = |n: usize| u16::try_from(n).expect("over 65535 SACK list items");
        put_chunk_header(out, chunk_type::SACK, 0, self.encoded_len());
        out.put_u32(self.cumulative_tsn_ack.0);
        out.put_u32(self.a_rwnd);
        out.put_u16(count(self.gap_ack_blocks.count()));
        out.put_u16(count(self.duplicate_tsns.count()));
        self.gap_ack_blocks.write_to(out);
        self.duplicate_tsns.write_to(out);
    }
}

/// The gap ack blocks of a received SACK.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct GapAckBlocks(RawWords);

impl GapAckBlocks {
    /// The blocks in packet order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = GapAckBlock> + '_ {
        self.0.iter().map(|w| GapAckBlock {
            start: u16::from_be_bytes([w[0], w[1]]),
            end: u16::from_be_bytes([w[2], w[3]]),
        })
    }

    /// Number of blocks.
    pub fn len(&self) -> usize {
        self.0.count()
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.0.count() == 0
    }
}

/// The duplicate TSNs of a received SACK.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct DuplicateTsns(RawWords);

impl DuplicateTsns {
    /// The duplicate TSNs in packet order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = Tsn> + '_ {
        self.0.iter().map(|w| Tsn(u32::from_be_bytes(w)))
    }

    /// Number of duplicate TSNs.
    pub fn len(&self) -> usize {
        self.0.count()
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.0.count() == 0
    }
}

impl WordList for GapAckBlocks {
    fn count(&self) -> usize {
        self.0.count()
    }

    fn write_to(&self, out: &mut BytesMut) {
        self.0.write_to(out);
    }
}

impl WordList for DuplicateTsns {
    fn count(&self) -> usize {
        self.0.count()
    }

    fn write_to(&self, out: &mut BytesMut) {
        self.0.write_to(out);
    }
}

impl WordList for &[GapAckBlock] {
    fn count(&self) -> usize {
        self.len()
    }

    fn write_to(&self, out: &mut BytesMut) {
        for b in self.iter() {
            out.put_u16(b.start);
            out.put_u16(b.end);
        }
    }
}

impl WordList for &[Tsn] {
    fn count(&self) -> usize {
        self.len()
    }

    fn write_to(&self, out: &mut BytesMut) {
        for t in self.iter() {
            out.put_u32(t.0);
        }
    }
}
