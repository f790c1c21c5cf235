//! RTCP (RFC 3550 §6) as WebRTC uses it: compound and reduced-size (RFC 5506) packets,
//! sender and receiver reports, SDES, BYE, APP, and the feedback messages an SFU reads
//! and writes: generic NACK and PLI (RFC 4585 §6.2.1, §6.3.1), FIR (RFC 5104 §4.3.1),
//! REMB (draft-alvestrand-rmcat-remb-03 §2.2) and transport-wide congestion control
//! feedback (draft-holmer-rmcat-transport-wide-cc-extensions-01 §3.1).
//!
//! [`Compound::new`] walks the packets of one datagram (after SRTCP), yielding each
//! parsed packet or the first error; each packet keeps [`Bytes`] slices of the datagram,
//! so nothing is copied and lists are read lazily from the bytes. Every type writes
//! itself ([`WriteRtcp`]) to a caller-owned [`BytesMut`]; a parsed packet writes back
//! the bytes it was parsed from, padding included. Types that carry lists are generic
//! over the list: the default is the received view, and a slice builds one to send
//! without allocating.
//!
//! Rules read leniently on purpose, each for a stated reason:
//! - The first packet of a compound need not be SR or RR (RFC 3550 §6.1): RFC 5506
//!   reduced-size RTCP sends a feedback message alone, and browsers do.
//! - Padding is accepted on any packet of a compound, not only the last (RFC 3550
//!   §6.4.1 says it "MUST only be added to the last individual packet"): libwebrtc pads
//!   transport-cc feedback wherever it sits, and its padding count need not be a
//!   multiple of four. The count must still be at least 1 and fit the packet.

mod app;
mod bye;
mod compound;
mod error;
mod feedback;
mod report;
mod sdes;
pub mod twcc;

use bytes::{BufMut, Bytes, BytesMut};

pub use app::App;
pub use bye::Bye;
pub use compound::{Compound, RtcpBody, RtcpPacket};
pub use error::RtcpError;
pub use feedback::{
    Fir, FirEntries, FirEntry, Nack, NackEntries, NackEntry, Pli, Remb, lost_to_nack_entries,
};
pub use report::{ReceiverReport, ReportBlock, ReportBlocks, SenderReport};
pub use sdes::{
    Sdes, SdesChunk, SdesChunkView, SdesChunks, SdesItem, SdesItems, SdesList, sdes_type,
};
pub use twcc::TransportCc;

/// RTCP packet types (RFC 3550 §12.1, RFC 4585 §6.1, RFC 3611 §2).
pub mod packet_type {
    /// Sender report (RFC 3550 §6.4.1).
    pub const SR: u8 = 200;
    /// Receiver report (RFC 3550 §6.4.2).
    pub const RR: u8 = 201;
    /// Source description (RFC 3550 §6.5).
    pub const SDES: u8 = 202;
    /// Goodbye (RFC 3550 §6.6).
    pub const BYE: u8 = 203;
    /// Application-defined (RFC 3550 §6.7).
    pub const APP: u8 = 204;
    /// Transport-layer feedback (RFC 4585 §6.1).
    pub const RTPFB: u8 = 205;
    /// Payload-specific feedback (RFC 4585 §6.1).
    pub const PSFB: u8 = 206;
    /// Extended report (RFC 3611 §2).
    pub const XR: u8 = 207;
}

/// Feedback message types (FMT) this module parses.
pub mod fmt {
    /// RTPFB: generic NACK (RFC 4585 §6.2.1).
    pub const NACK: u8 = 1;
    /// RTPFB: transport-wide congestion control feedback (transport-cc draft §3.1).
    pub const TRANSPORT_CC: u8 = 15;
    /// PSFB: picture loss indication (RFC 4585 §6.3.1).
    pub const PLI: u8 = 1;
    /// PSFB: full intra request (RFC 5104 §4.3.1).
    pub const FIR: u8 = 4;
    /// PSFB: application layer feedback (RFC 4585 §6.4), REMB among them.
    pub const AFB: u8 = 15;
}

/// RFC 3550 §6.4.1: the common header is 4 bytes.
pub const HEADER_LEN: usize = 4;
/// RFC 3550 §6.4.1: the version field of every RTCP packet.
pub const RTCP_VERSION: u8 = 2;
/// At most this many packets are read from one compound; more is
/// [`RtcpError::TooManyPackets`]. A 1500-byte datagram holds at most 187 of the
/// smallest (8-byte) packets.
pub const MAX_PACKETS_PER_COMPOUND: usize = 256;
/// At most this many NACK or FIR entries in one feedback message; more is
/// [`RtcpError::TooManyEntries`]. A 1500-byte datagram holds about 370 NACK entries.
pub const MAX_FCI_ENTRIES: usize = 1024;
/// At most this many packet statuses in one transport-cc feedback; more is
/// [`RtcpError::TwccTooManyStatuses`]. libwebrtc sends feedback every 25-250 ms, and
/// 16384 packets is 4 s at 4000 packets/s, the rate the draft's 250 µs resolution can
/// represent (§3.1.5); the cap bounds the work one feedback can ask for.
pub const MAX_TWCC_STATUS_COUNT: u16 = 16384;

/// An RTCP packet that can be appended to a compound being written: its header fields
/// and body, from which the common header and its length are derived.
pub trait WriteRtcp {
    /// The packet type (PT).
    fn packet_type(&self) -> u8;

    /// The 5-bit field after P: RC, SC, FMT or APP's subtype.
    fn count(&self) -> u8;

    /// The bytes after the 4-byte header, without RTCP padding. A multiple of 4 for
    /// every type except transport-cc feedback, whose writer pads with the P bit.
    fn body_len(&self) -> usize;

    /// Appends the body, `body_len()` bytes.
    fn write_body(&self, out: &mut BytesMut);

    /// The packet's length on the wire: header, body and padding to 32 bits.
    fn encoded_len(&self) -> usize {
        HEADER_LEN + self.body_len().next_multiple_of(4)
    }

    /// Appends the packet: header, body, and, when the body is not a multiple of 4
    /// bytes, RTCP padding with P set (RFC 3550 §6.4.1).
    ///
    /// # Panics
    ///
    /// Only on a programmer error: a packet longer than 65536 words.
    fn write_to(&self, out: &mut BytesMut) {
        write_packet(self, &[], out);
    }
}

/// Writes a packet with the given RTCP padding (empty: pad only as the body needs).
/// The padding, when given, is written as it stands (its last octet the count).
pub(crate) fn write_packet<P: WriteRtcp + ?Sized>(p: &P, padding: &[u8], out: &mut BytesMut) {
    let body_len = p.body_len();
    let pad_len = if padding.is_empty() {
        body_len.next_multiple_of(4) - body_len
    } else {
        padding.len()
    };
    let total = HEADER_LEN + body_len + pad_len;
    debug_assert!(total.is_multiple_of(4), "RTCP packet not padded to 32 bits");
    let length_words = u16::try_from(total / 4 - 1).expect("RTCP packet over 65536 words");
    let at = out.len();
    out.reserve(total);
    out.put_u8(RTCP_VERSION << 6 | u8::from(pad_len > 0) << 5 | (p.count() & 0x1F));
    out.put_u8(p.packet_type());
    out.put_u16(length_words);
    p.write_body(out);
    debug_assert_eq!(
        out.len() - at,
        HEADER_LEN + body_len,
        "RTCP body length lies"
    );
    if !padding.is_empty() {
        out.put_slice(padding);
    } else if pad_len > 0 {
        // RFC 3550 §6.4.1: the last padding octet counts the padding, itself included.
        out.put_bytes(0, pad_len - 1);
        out.put_u8(pad_len as u8);
    }
}

/// A list of fixed-size items inside an RTCP packet (report blocks, SSRCs, NACK and FIR
/// entries): a received view or a slice to send.
pub trait ItemList {
    /// Number of items.
    fn count(&self) -> usize;
    /// Their length in bytes.
    fn byte_len(&self) -> usize;
    /// Appends the items in network byte order.
    fn write_to(&self, out: &mut BytesMut);
}

/// A fixed-size item of an RTCP list: its size on the wire and how it reads and
/// writes.
pub trait WireItem: Sized {
    /// Bytes per item.
    const LEN: usize;
    /// Reads one item from exactly `LEN` bytes.
    fn read(b: &[u8]) -> Self;
    /// Appends its `LEN` bytes.
    fn write(&self, out: &mut BytesMut);
}

/// The items of a received list (report blocks, SSRCs, NACK or FIR entries), read as
/// they are iterated; the bytes are the packet's own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WireList<T> {
    bytes: Bytes,
    item: std::marker::PhantomData<T>,
}

impl<T> Default for WireList<T> {
    fn default() -> Self {
        WireList::new(Bytes::new())
    }
}

impl<T> WireList<T> {
    /// The list over `bytes`, whose length the parser has checked.
    pub(crate) fn new(bytes: Bytes) -> Self {
        WireList {
            bytes,
            item: std::marker::PhantomData,
        }
    }
}

impl<T: WireItem> WireList<T> {
    /// The items in packet order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = T> + '_ {
        self.bytes.chunks_exact(T::LEN).map(T::read)
    }

    /// Number of items.
    pub fn len(&self) -> usize {
        self.bytes.len() / T::LEN
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

impl<T: WireItem> ItemList for WireList<T> {
    fn count(&self) -> usize {
        self.len()
    }

    fn byte_len(&self) -> usize {
        self.bytes.len()
    }

    fn write_to(&self, out: &mut BytesMut) {
        out.put_slice(&self.bytes);
    }
}

impl<T: WireItem> ItemList for &[T] {
    fn count(&self) -> usize {
        self.len()
    }

    fn byte_len(&self) -> usize {
        T::LEN * self.len()
    }

    fn write_to(&self, out: &mut BytesMut) {
        for item in self.iter() {
            item.write(out);
        }
    }
}

impl WireItem for u32 {
    const LEN: usize = 4;

    fn read(b: &[u8]) -> Self {
        be32(b, 0)
    }

    fn write(&self, out: &mut BytesMut) {
        out.put_u32(*self);
    }
}

/// The SSRCs of a received BYE or REMB.
pub type Ssrcs = WireList<u32>;

/// Big-endian u16 at `at`; the caller has checked `at + 2 <= b.len()`.
pub(crate) fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// Big-endian u32 at `at`; the caller has checked `at + 4 <= b.len()`.
pub(crate) fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// A 5-bit count field for `n` items.
///
/// # Panics
///
/// Only on a programmer error: more than 31 items, which the field cannot say.
pub(crate) fn count5(n: usize) -> u8 {
    u8::try_from(n)
        .ok()
        .filter(|&n| n <= 31)
        .expect("at most 31 items in a 5-bit RTCP count")
}
