//! SCTP packets (RFC 9260 §3): the 12-byte common header with its CRC32c checksum
//! (§6.8, Appendix A) and the chunks after it; [`Packet`] parses one, [`PacketWriter`]
//! bundles chunks into one in a caller-owned buffer.
//!
//! Over DTLS (RFC 8261) a packet is the whole plaintext of one DTLS record; the ports are
//! SCTP's own (WebRTC uses 5000 unless SDP says otherwise).

use bytes::{BufMut, Bytes, BytesMut};

use super::chunk::{CHUNK_HEADER_LEN, Chunks, DATA_HEADER_LEN, DataHeader, WriteChunk, chunk_type};
use super::error::SctpError;

/// The common header is 12 bytes (RFC 9260 §3.1).
pub const COMMON_HEADER_LEN: usize = 12;
/// The default SCTP packet size budget for bundling, in bytes; the DTLS record, UDP and
/// IP headers come on top of it.
pub const DEFAULT_MTU: usize = 1200;
/// Where the checksum sits in the common header.
const CHECKSUM_AT: usize = 8;

/// CRC32c (Castagnoli, RFC 9260 Appendix A) of `data`: the standard reflected value,
/// computed with SSE4.2 or ARMv8 CRC instructions when the CPU has them.
pub fn crc32c(data: &[u8]) -> u32 {
    crc32c::crc32c(data)
}

/// RFC 9260 §6.8 and Appendix A: the CRC32c of the packet with its checksum field taken
/// as zero, without copying the packet.
pub fn checksum(packet: &[u8]) -> u32 {
    let head = packet.get(..CHECKSUM_AT).unwrap_or(packet);
    let tail = packet.get(CHECKSUM_AT + 4..).unwrap_or(&[]);
    let crc = crc32c::crc32c_append(crc32c::crc32c(head), &[0; 4]);
    crc32c::crc32c_append(crc, tail)
}

/// A parsed SCTP packet: the common header, and the chunk area for [`Packet::chunks`].
/// Cheap to clone (one [`Bytes`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Packet {
    raw: Bytes,
    /// Source Port Number.
    pub src_port: u16,
    /// Destination Port Number.
    pub dst_port: u16,
    /// Verification Tag.
    pub verification_tag: u32,
}

impl Packet {
    /// Checks the common header (RFC 9260 §3.1) and the CRC32c checksum (§6.8: the
    /// receiver "MUST first check the CRC32c checksum"; a mismatch is an invalid packet).
    /// Chunks are parsed lazily by [`Packet::chunks`]. Clones `buf` (a reference count),
    /// never copies it.
    pub fn parse(buf: &Bytes) -> Result<Packet, SctpError> {
        Packet::parse_with(buf, false)
    }

    /// [`Packet::parse`] for an endpoint that announced an alternate error detection
    /// method (`zero_checksum_ok`), which RFC 9653 §5.3 obliges to "accept SCTP packets
    /// that have an incorrect checksum value of zero and that fulfill the requirements
    /// of the announced alternate error detection method" besides correctly checksummed
    /// ones. A zero checksum on a packet that starts with INIT or COOKIE ECHO is still
    /// checked: §5.2 requires their senders to include a correct CRC32c (COOKIE ECHO
    /// leads its packet, RFC 9260 §5.1). Any other wrong checksum is a mismatch.
    pub fn parse_with(buf: &Bytes, zero_checksum_ok: bool) -> Result<Packet, SctpError> {
        if buf.len() < COMMON_HEADER_LEN + CHUNK_HEADER_LEN {
            return Err(SctpError::PacketTooShort { len: buf.len() });
        }
        let sum = &buf[CHECKSUM_AT..CHECKSUM_AT + 4];
        // Appendix A: the checksum goes on the wire least significant byte first.
        let received = u32::from_le_bytes([sum[0], sum[1], sum[2], sum[3]]);
        let first_chunk = buf[COMMON_HEADER_LEN];
        let zero_allowed =
            zero_checksum_ok && !matches!(first_chunk, chunk_type::INIT | chunk_type::COOKIE_ECHO);
        if !(zero_allowed && received == 0) {
            let computed = checksum(buf);
            if received != computed {
                return Err(SctpError::BadChecksum { received, computed });
            }
        }
        let src_port = u16::from_be_bytes([buf[0], buf[1]]);
        let dst_port = u16::from_be_bytes([buf[2], buf[3]]);
        // RFC 9260 §3.1: port number 0 "MUST NOT be used".
        if src_port == 0 || dst_port == 0 {
            return Err(SctpError::ZeroPort);
        }
        Ok(Packet {
            raw: buf.clone(),
            src_port,
            dst_port,
            verification_tag: u32::from_be_bytes([buf[4], buf[5], buf[6], buf[7]]),
        })
    }

    /// The chunks in order, each `Ok(chunk)` or the first error, after which the walk
    /// stops (RFC 9260 §3.2). Allocates nothing. Chunks the parser does not know come
    /// as [`super::chunk::Chunk::Unknown`]; the caller applies
    /// [`super::chunk::unknown_chunk_action`].
    pub fn chunks(&self) -> Chunks {
        Chunks::new(self.raw.slice(COMMON_HEADER_LEN..))
    }

    /// The whole packet as received.
    pub fn raw(&self) -> &Bytes {
        &self.raw
    }
}

/// Writes one SCTP packet into a caller-owned buffer: the common header, then chunks,
/// each padded to 4 bytes, then the checksum on [`PacketWriter::finish`]. Nothing else
/// is allocated.
///
/// # Panics
///
/// Only on programmer errors: a chunk over 65535 bytes, or (debug builds) INIT, INIT ACK
/// or SHUTDOWN COMPLETE bundled with another chunk, which RFC 9260 §3 forbids.
pub struct PacketWriter<'a> {
    buf: &'a mut BytesMut,
    /// Where this packet starts in `buf`.
    start: usize,
    chunks: usize,
    /// A chunk that must be alone has been written.
    alone: bool,
}

impl<'a> PacketWriter<'a> {
    /// Starts a packet at the end of `buf`: the common header with a zero checksum.
    pub fn new(
        buf: &'a mut BytesMut,
        src_port: u16,
        dst_port: u16,
        verification_tag: u32,
    ) -> PacketWriter<'a> {
        let start = buf.len();
        buf.put_u16(src_port);
        buf.put_u16(dst_port);
        buf.put_u32(verification_tag);
        buf.put_u32(0);
        PacketWriter {
            buf,
            start,
            chunks: 0,
            alone: false,
        }
    }

    /// The packet's length so far, header included.
    pub fn len(&self) -> usize {
        self.buf.len() - self.start
    }

    /// True when no chunk has been written yet.
    pub fn is_empty(&self) -> bool {
        self.chunks == 0
    }

    /// How many more bytes fit before the packet reaches `mtu` bytes; compare a chunk's
    /// [`WriteChunk::padded_len`] with it before pushing.
    pub fn remaining(&self, mtu: usize) -> usize {
        mtu.saturating_sub(self.len())
    }

    /// How many payload bytes a DATA chunk may carry and still fit within `mtu`.
    pub fn remaining_data_payload(&self, mtu: usize) -> usize {
        // The payload is padded too; only whole 4-byte steps count.
        (self.remaining(mtu) & !3).saturating_sub(DATA_HEADER_LEN)
    }

    /// Appends one chunk, padded.
    pub fn push<C: WriteChunk + ?Sized>(&mut self, chunk: &C) -> &mut Self {
        let at = self.buf.len();
        chunk.write_to(self.buf);
        self.note_chunk(at);
        debug_assert_eq!(self.buf.len() - at, chunk.padded_len(), "chunk length lies");
        self
    }

    /// Appends a DATA chunk whose payload is copied once, from `payload` straight into
    /// the packet.
    pub fn push_data(&mut self, header: &DataHeader, payload: &[u8]) -> &mut Self {
        let at = self.buf.len();
        header.write_to(self.buf, payload.len());
        self.buf.put_slice(payload);
        self.buf
            .put_bytes(0, DataHeader::padding_len(payload.len()));
        self.note_chunk(at);
        self
    }

    /// RFC 9260 §3: "INIT, INIT ACK, and SHUTDOWN COMPLETE chunks MUST NOT be bundled
    /// with any other chunk into an SCTP packet."
    fn note_chunk(&mut self, at: usize) {
        let typ = self.buf[at];
        let alone = matches!(
            typ,
            chunk_type::INIT | chunk_type::INIT_ACK | chunk_type::SHUTDOWN_COMPLETE
        );
        debug_assert!(
            self.chunks == 0 || !(alone || self.alone),
            "INIT, INIT ACK and SHUTDOWN COMPLETE go alone in a packet"
        );
        self.alone |= alone;
        self.chunks += 1;
    }

    /// Fills in the CRC32c checksum (RFC 9260 §6.8, least significant byte first per
    /// Appendix A) and leaves the packet where it was written, at the end of `buf`
    /// (for a buffer that is sealed and sent as it stands, like a DTLS record's).
    pub fn finish_in_place(self) {
        debug_assert!(self.chunks > 0, "an SCTP packet carries at least one chunk");
        let crc = checksum(&self.buf[self.start..]);
        let at = self.start + CHECKSUM_AT;
        self.buf[at..at + 4].copy_from_slice(&crc.to_le_bytes());
    }

    /// Leaves the checksum zero and the packet where it was written: for a peer that
    /// announced an alternate error detection method we use too (RFC 9653 §5.2). The
    /// caller keeps the CRC32c for packets §5.2 names (INIT, COOKIE ECHO).
    pub fn finish_in_place_zero_checksum(self) {
        debug_assert!(self.chunks > 0, "an SCTP packet carries at least one chunk");
        debug_assert!(
            !matches!(
                self.buf[self.start + COMMON_HEADER_LEN],
                chunk_type::INIT | chunk_type::COOKIE_ECHO
            ),
            "RFC 9653 §5.2: INIT and COOKIE ECHO packets carry a correct CRC32c"
        );
    }

    /// Fills in the CRC32c checksum (RFC 9260 §6.8, least significant byte first per
    /// Appendix A) and splits the packet off `buf`. When the packet started at the
    /// beginning of `buf`, `buf` keeps its spare capacity for the next packet.
    pub fn finish(self) -> Bytes {
        debug_assert!(self.chunks > 0, "an SCTP packet carries at least one chunk");
        let crc = checksum(&self.buf[self.start..]);
        let at = self.start + CHECKSUM_AT;
        self.buf[at..at + 4].copy_from_slice(&crc.to_le_bytes());
        if self.start == 0 {
            self.buf.split().freeze()
        } else {
            self.buf.split_off(self.start).freeze()
        }
    }
}
