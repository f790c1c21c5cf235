//! Source description (RFC 3550 §6.5): chunks of an SSRC and its items, each chunk
//! ended by a null octet and padded with nulls to 32 bits.

use bytes::{BufMut, Bytes, BytesMut};

use super::error::RtcpError;
use super::{WriteRtcp, be32, count5, packet_type};

/// SDES item types (RFC 3550 §6.5, §12.2).
pub mod sdes_type {
    /// The end of a chunk's item list.
    pub const END: u8 = 0;
    /// Canonical end-point identifier (RFC 3550 §6.5.1).
    pub const CNAME: u8 = 1;
    /// User name (§6.5.2).
    pub const NAME: u8 = 2;
    /// Electronic mail address (§6.5.3).
    pub const EMAIL: u8 = 3;
    /// Phone number (§6.5.4).
    pub const PHONE: u8 = 4;
    /// Geographic user location (§6.5.5).
    pub const LOC: u8 = 5;
    /// Application or tool name (§6.5.6).
    pub const TOOL: u8 = 6;
    /// Notice/status (§6.5.7).
    pub const NOTE: u8 = 7;
    /// Private extensions (§6.5.8).
    pub const PRIV: u8 = 8;
}

/// One SDES item: its type and text (UTF-8 by RFC 3550 §6.5, not checked here).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SdesItem<'a> {
    /// The item type, see [`sdes_type`]; never [`sdes_type::END`].
    pub kind: u8,
    /// The text, at most 255 bytes.
    pub text: &'a [u8],
}

/// One chunk to send: an SSRC or CSRC and its items.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SdesChunk<'a> {
    /// The SSRC or CSRC the items describe.
    pub ssrc: u32,
    /// The items, in order.
    pub items: &'a [SdesItem<'a>],
}

impl SdesChunk<'_> {
    /// SSRC, items, the null octet and null padding to 32 bits.
    fn encoded_len(&self) -> usize {
        let items: usize = self.items.iter().map(|i| 2 + i.text.len()).sum();
        (4 + items + 1).next_multiple_of(4)
    }

    /// # Panics
    ///
    /// Only on a programmer error: an item text over 255 bytes, or an END item.
    fn write_to(&self, out: &mut BytesMut) {
        let at = out.len();
        out.put_u32(self.ssrc);
        for item in self.items {
            assert_ne!(item.kind, sdes_type::END, "END is not an item");
            let len = u8::try_from(item.text.len()).expect("SDES item over 255 bytes");
            out.put_u8(item.kind);
            out.put_u8(len);
            out.put_slice(item.text);
        }
        // RFC 3550 §6.5: "terminated by one or more null octets", padded with nulls to
        // the next 32-bit boundary.
        let written = out.len() - at;
        out.put_bytes(0, (written + 1).next_multiple_of(4) - written);
    }
}

/// The items of one received chunk, in order.
#[derive(Clone, Debug)]
pub struct SdesItems<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for SdesItems<'a> {
    type Item = SdesItem<'a>;

    fn next(&mut self) -> Option<SdesItem<'a>> {
        let (&kind, after) = self.rest.split_first()?;
        if kind == sdes_type::END {
            return None;
        }
        let (&len, after) = after.split_first()?;
        let text = after.get(..usize::from(len))?;
        self.rest = &after[usize::from(len)..];
        Some(SdesItem { kind, text })
    }
}

/// One received chunk.
#[derive(Clone, Debug)]
pub struct SdesChunkView<'a> {
    /// The SSRC or CSRC the items describe.
    pub ssrc: u32,
    /// The items.
    pub items: SdesItems<'a>,
}

impl<'a> SdesChunkView<'a> {
    /// The CNAME item's text (RFC 3550 §6.5.1), if the chunk has one.
    pub fn cname(&self) -> Option<&'a [u8]> {
        self.items
            .clone()
            .find(|i| i.kind == sdes_type::CNAME)
            .map(|i| i.text)
    }
}

/// The chunks of a received SDES, checked when parsed.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct SdesChunks {
    raw: Bytes,
    count: u8,
}

impl SdesChunks {
    /// Checks `count` chunks and that they fill `raw` exactly (RFC 3550 §6.5).
    fn parse(count: u8, raw: Bytes) -> Result<SdesChunks, RtcpError> {
        let mut at = 0;
        for _ in 0..count {
            at = chunk_end(&raw, at).ok_or(if raw.len() < at + 4 {
                RtcpError::CountMismatch {
                    pt: packet_type::SDES,
                    count,
                }
            } else {
                RtcpError::BadSdes
            })?;
        }
        if at != raw.len() {
            return Err(RtcpError::CountMismatch {
                pt: packet_type::SDES,
                count,
            });
        }
        Ok(SdesChunks { raw, count })
    }

    /// The chunks in packet order.
    pub fn iter(&self) -> impl Iterator<Item = SdesChunkView<'_>> + '_ {
        let mut at = 0;
        (0..self.count).map_while(move |_| {
            let end = chunk_end(&self.raw, at)?;
            let chunk = self.raw.get(at..end)?;
            at = end;
            Some(SdesChunkView {
                ssrc: be32(chunk, 0),
                items: SdesItems { rest: &chunk[4..] },
            })
        })
    }

    /// Number of chunks.
    pub fn len(&self) -> usize {
        usize::from(self.count)
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
}

/// The end of the chunk that starts at `at`: after its null terminator and the null
/// octets up to the next 32-bit boundary. `None` when the chunk is cut short, an item
/// runs past the end, or a padding octet is not null.
fn chunk_end(raw: &[u8], at: usize) -> Option<usize> {
    raw.get(at..at + 4)?;
    let mut pos = at + 4;
    loop {
        let kind = *raw.get(pos)?;
        if kind == sdes_type::END {
            break;
        }
        let len = usize::from(*raw.get(pos + 1)?);
        pos += 2 + len;
        raw.get(..pos)?;
    }
    // `pos` is the null terminator; chunks start on 32-bit boundaries of the body.
    let end = (pos + 1).next_multiple_of(4);
    let pad = raw.get(pos..end)?;
    pad.iter().all(|&b| b == 0).then_some(end)
}

/// A list of SDES chunks: [`SdesChunks`] as parsed, `&[SdesChunk]` to send.
pub trait SdesList {
    /// Number of chunks.
    fn count(&self) -> usize;
    /// Their length in bytes.
    fn byte_len(&self) -> usize;
    /// Appends them.
    fn write_to(&self, out: &mut BytesMut);
}

impl SdesList for SdesChunks {
    fn count(&self) -> usize {
        self.len()
    }

    fn byte_len(&self) -> usize {
        self.raw.len()
    }

    fn write_to(&self, out: &mut BytesMut) {
        out.put_slice(&self.raw);
    }
}

impl SdesList for &[SdesChunk<'_>] {
    fn count(&self) -> usize {
        self.len()
    }

    fn byte_len(&self) -> usize {
        self.iter().map(SdesChunk::encoded_len).sum()
    }

    fn write_to(&self, out: &mut BytesMut) {
        for chunk in self.iter() {
            chunk.write_to(out);
        }
    }
}

/// A source description packet (RFC 3550 §6.5). `C` is the chunks: [`SdesChunks`] as
/// parsed, `&[SdesChunk]` to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sdes<C = SdesChunks> {
    /// The chunks, at most 31.
    pub chunks: C,
}

impl Sdes {
    /// RFC 3550 §6.5: SC chunks that fill the packet.
    pub(crate) fn parse(sc: u8, body: Bytes) -> Result<Sdes, RtcpError> {
        Ok(Sdes {
            chunks: SdesChunks::parse(sc, body)?,
        })
    }
}

impl<C: SdesList> WriteRtcp for Sdes<C> {
    fn packet_type(&self) -> u8 {
        packet_type::SDES
    }

    fn count(&self) -> u8 {
        count5(self.chunks.count())
    }

    fn body_len(&self) -> usize {
        self.chunks.byte_len()
    }

    fn write_body(&self, out: &mut BytesMut) {
        self.chunks.write_to(out);
    }
}
