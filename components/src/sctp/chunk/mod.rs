//! SCTP chunks (RFC 9260 §3.2, §3.3; RFC 3758 §3.2; RFC 6525 §3.1): one file per chunk
//! type, each with a parsed form that keeps slices of the received [`Bytes`] (a DATA
//! payload is never copied) and a writer that appends to a caller-owned [`BytesMut`].
//!
//! Chunks that carry lists are generic over the list: the default type parameter is the
//! parsed, zero-copy view of received bytes, and a slice (`&[GapAckBlock]`,
//! `&[InitParam]`, …) builds one to send without allocating. Both write the same bytes,
//! so a parsed chunk written back is byte-identical to what arrived.

mod abort;
mod cause;
mod cookie_ack;
mod cookie_echo;
mod data;
mod forward_tsn;
mod heartbeat;
mod init;
mod operation_error;
mod param;
mod reconfig;
mod sack;
mod shutdown;
mod shutdown_ack;
mod shutdown_complete;

use bytes::{BufMut, Bytes, BytesMut};

use super::error::SctpError;

pub use abort::Abort;
pub use cause::{ErrorCause, cause_code};
pub use cookie_ack::CookieAck;
pub use cookie_echo::CookieEcho;
pub use data::{DATA_HEADER_LEN, Data, DataHeader};
pub use forward_tsn::{ForwardTsn, SkippedStream, SkippedStreams};
pub use heartbeat::{Heartbeat, HeartbeatAck, HeartbeatChunk};
pub use init::{EDMID_DTLS, Init, InitAck, InitChunk, InitParam};
pub use operation_error::OperationError;
pub use param::{
    PARAM_HEADER_LEN, Param, ParamIter, ParamList, Params, WriteParam, param_type,
    unknown_param_action,
};
pub use reconfig::{ReConfig, ReconfigParam, ReconfigResult, StreamIdList, StreamList};
pub use sack::{DuplicateTsns, GapAckBlock, GapAckBlocks, Sack};
pub use shutdown::Shutdown;
pub use shutdown_ack::ShutdownAck;
pub use shutdown_complete::ShutdownComplete;

/// Chunk Type values (RFC 9260 §3.2, RFC 3758 §3.2, RFC 6525 §3.1).
pub mod chunk_type {
    /// Payload Data (RFC 9260 §3.3.1).
    pub const DATA: u8 = 0;
    /// Initiation (RFC 9260 §3.3.2).
    pub const INIT: u8 = 1;
    /// Initiation Acknowledgement (RFC 9260 §3.3.3).
    pub const INIT_ACK: u8 = 2;
    /// Selective Acknowledgement (RFC 9260 §3.3.4).
    pub const SACK: u8 = 3;
    /// Heartbeat Request (RFC 9260 §3.3.5).
    pub const HEARTBEAT: u8 = 4;
    /// Heartbeat Acknowledgement (RFC 9260 §3.3.6).
    pub const HEARTBEAT_ACK: u8 = 5;
    /// Abort (RFC 9260 §3.3.7).
    pub const ABORT: u8 = 6;
    /// Shutdown (RFC 9260 §3.3.8).
    pub const SHUTDOWN: u8 = 7;
    /// Shutdown Acknowledgement (RFC 9260 §3.3.9).
    pub const SHUTDOWN_ACK: u8 = 8;
    /// Operation Error (RFC 9260 §3.3.10).
    pub const ERROR: u8 = 9;
    /// State Cookie (RFC 9260 §3.3.11).
    pub const COOKIE_ECHO: u8 = 10;
    /// Cookie Acknowledgement (RFC 9260 §3.3.12).
    pub const COOKIE_ACK: u8 = 11;
    /// Shutdown Complete (RFC 9260 §3.3.13).
    pub const SHUTDOWN_COMPLETE: u8 = 14;
    /// Re-configuration (RFC 6525 §3.1).
    pub const RE_CONFIG: u8 = 130;
    /// Forward Cumulative TSN (RFC 3758 §3.2).
    pub const FORWARD_TSN: u8 = 192;
}

/// Every chunk header is 4 bytes: type, flags, length (RFC 9260 §3.2).
pub const CHUNK_HEADER_LEN: usize = 4;
/// At most this many chunks are read from one packet; more is [`SctpError::TooManyChunks`].
/// A 16 KiB DTLS record of the smallest DATA chunks (20 bytes padded) holds about 820.
pub const MAX_CHUNKS_PER_PACKET: usize = 1024;
/// At most this many parameters (or error causes) per INIT, INIT ACK, ABORT or ERROR.
pub const MAX_PARAMS_PER_CHUNK: usize = 64;
/// At most this many gap ack blocks, duplicate TSNs, FORWARD TSN streams or RE-CONFIG
/// stream numbers in one list. A DTLS record (at most 16 KiB) cannot carry more 4-byte
/// items than this, so the bound costs a real peer nothing.
pub const MAX_LIST_ITEMS: usize = 4096;

/// What to do with a chunk or parameter whose type is not understood: its two
/// highest-order bits say (RFC 9260 §3.2 for chunks, §3.2.1 for parameters).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnknownAction {
    /// `00`: stop processing the packet (for a parameter: the chunk's parameters),
    /// discarding this and everything after it.
    Stop,
    /// `01`: as [`UnknownAction::Stop`], and report it ("Unrecognized Chunk Type" error
    /// cause for chunks, "Unrecognized Parameter" for parameters).
    StopAndReport,
    /// `10`: skip it and go on.
    Skip,
    /// `11`: skip it, go on, and report it.
    SkipAndReport,
}

/// RFC 9260 §3.2, "Processing of Unknown Chunks": the action the upper two bits of an
/// unrecognized Chunk Type call for. The caller applies it to [`Chunk::Unknown`].
pub const fn unknown_chunk_action(typ: u8) -> UnknownAction {
    action_from_bits(typ >> 6)
}

pub(crate) const fn action_from_bits(bits: u8) -> UnknownAction {
    match bits & 0b11 {
        0b00 => UnknownAction::Stop,
        0b01 => UnknownAction::StopAndReport,
        0b10 => UnknownAction::Skip,
        _ => UnknownAction::SkipAndReport,
    }
}

/// A chunk that can be appended to a packet being written.
pub trait WriteChunk {
    /// The Chunk Length field: header and value, without trailing padding (RFC 9260 §3.2).
    fn encoded_len(&self) -> usize;

    /// Appends the chunk to `out`, padded with zeros to a multiple of 4 bytes.
    ///
    /// # Panics
    ///
    /// Only on a programmer error: a chunk longer than 65535 bytes.
    fn write_to(&self, out: &mut BytesMut);

    /// The bytes the chunk takes in a packet: [`WriteChunk::encoded_len`] padded to 4.
    fn padded_len(&self) -> usize {
        pad4(self.encoded_len())
    }
}

/// A chunk already encoded and padded (a queued control chunk, a SACK written
/// earlier), written as it is.
pub struct RawChunk<'a>(pub &'a [u8]);

impl WriteChunk for RawChunk<'_> {
    fn encoded_len(&self) -> usize {
        self.0.len()
    }
    fn write_to(&self, out: &mut BytesMut) {
        out.extend_from_slice(self.0);
    }
}

/// Rounds `len` up to a multiple of 4 (RFC 9260 §3.2: chunks and parameters are padded).
pub const fn pad4(len: usize) -> usize {
    (len + 3) & !3
}

/// Writes a chunk header. The length counts header and value, not padding.
pub(crate) fn put_chunk_header(out: &mut BytesMut, typ: u8, flags: u8, len: usize) {
    let len = u16::try_from(len).expect("SCTP chunk longer than 65535 bytes");
    out.put_u8(typ);
    out.put_u8(flags);
    out.put_u16(len);
}

/// Pads what was written since a chunk of `len` unpadded bytes started.
pub(crate) fn put_padding(out: &mut BytesMut, len: usize) {
    out.put_bytes(0, pad4(len) - len);
}

/// Big-endian u16 at `at`; the caller has checked `at + 2 <= b.len()`.
pub(crate) fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// Big-endian u32 at `at`; the caller has checked `at + 4 <= b.len()`.
pub(crate) fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// One chunk of a packet, parsed. Cheap to clone: variable parts are [`Bytes`] slices of
/// the received packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Chunk {
    /// DATA (RFC 9260 §3.3.1).
    Data(Data),
    /// INIT (RFC 9260 §3.3.2).
    Init(Init),
    /// INIT ACK (RFC 9260 §3.3.3).
    InitAck(InitAck),
    /// SACK (RFC 9260 §3.3.4).
    Sack(Sack),
    /// HEARTBEAT (RFC 9260 §3.3.5).
    Heartbeat(Heartbeat),
    /// HEARTBEAT ACK (RFC 9260 §3.3.6).
    HeartbeatAck(HeartbeatAck),
    /// ABORT (RFC 9260 §3.3.7).
    Abort(Abort),
    /// SHUTDOWN (RFC 9260 §3.3.8).
    Shutdown(Shutdown),
    /// SHUTDOWN ACK (RFC 9260 §3.3.9).
    ShutdownAck(ShutdownAck),
    /// ERROR (RFC 9260 §3.3.10).
    Error(OperationError),
    /// COOKIE ECHO (RFC 9260 §3.3.11).
    CookieEcho(CookieEcho),
    /// COOKIE ACK (RFC 9260 §3.3.12).
    CookieAck(CookieAck),
    /// SHUTDOWN COMPLETE (RFC 9260 §3.3.13).
    ShutdownComplete(ShutdownComplete),
    /// FORWARD TSN (RFC 3758 §3.2).
    ForwardTsn(ForwardTsn),
    /// RE-CONFIG (RFC 6525 §3.1).
    ReConfig(ReConfig),
    /// A chunk type this parser does not know. The caller applies
    /// [`unknown_chunk_action`] to `typ` (RFC 9260 §3.2).
    Unknown {
        /// The Chunk Type.
        typ: u8,
        /// The Chunk Flags.
        flags: u8,
        /// The Chunk Value, without padding.
        value: Bytes,
    },
}

impl Chunk {
    /// Parses one chunk from its type, flags and value (the Chunk Length bytes after the
    /// 4-byte header, padding excluded). A type this parser does not know is
    /// [`Chunk::Unknown`], not an error.
    pub fn parse(typ: u8, flags: u8, value: Bytes) -> Result<Chunk, SctpError> {
        use chunk_type as t;
        // The value of a chunk in a packet is at most 65535 - 4 bytes.
        let length = u16::try_from(value.len() + CHUNK_HEADER_LEN).unwrap_or(u16::MAX);
        let h = Header { typ, flags, length };
        Ok(match typ {
            t::DATA => Chunk::Data(Data::parse(h, value)?),
            t::INIT => Chunk::Init(Init::parse(h, value)?),
            t::INIT_ACK => Chunk::InitAck(InitAck::parse(h, value)?),
            t::SACK => Chunk::Sack(Sack::parse(h, value)?),
            t::HEARTBEAT => Chunk::Heartbeat(Heartbeat::parse(h, value)?),
            t::HEARTBEAT_ACK => Chunk::HeartbeatAck(HeartbeatAck::parse(h, value)?),
            t::ABORT => Chunk::Abort(Abort::parse(h, value)?),
            t::SHUTDOWN => Chunk::Shutdown(Shutdown::parse(h, value)?),
            t::SHUTDOWN_ACK => Chunk::ShutdownAck(ShutdownAck::parse(h, value)?),
            t::ERROR => Chunk::Error(OperationError::parse(h, value)?),
            t::COOKIE_ECHO => Chunk::CookieEcho(CookieEcho::parse(h, value)?),
            t::COOKIE_ACK => Chunk::CookieAck(CookieAck::parse(h, value)?),
            t::SHUTDOWN_COMPLETE => Chunk::ShutdownComplete(ShutdownComplete::parse(h, value)?),
            t::FORWARD_TSN => Chunk::ForwardTsn(ForwardTsn::parse(h, value)?),
            t::RE_CONFIG => Chunk::ReConfig(ReConfig::parse(h, value)?),
            _ => Chunk::Unknown { typ, flags, value },
        })
    }

    /// The Chunk Type of this chunk.
    pub fn chunk_type(&self) -> u8 {
        use chunk_type as t;
        match self {
            Chunk::Data(_) => t::DATA,
            Chunk::Init(_) => t::INIT,
            Chunk::InitAck(_) => t::INIT_ACK,
            Chunk::Sack(_) => t::SACK,
            Chunk::Heartbeat(_) => t::HEARTBEAT,
            Chunk::HeartbeatAck(_) => t::HEARTBEAT_ACK,
            Chunk::Abort(_) => t::ABORT,
            Chunk::Shutdown(_) => t::SHUTDOWN,
            Chunk::ShutdownAck(_) => t::SHUTDOWN_ACK,
            Chunk::Error(_) => t::ERROR,
            Chunk::CookieEcho(_) => t::COOKIE_ECHO,
            Chunk::CookieAck(_) => t::COOKIE_ACK,
            Chunk::ShutdownComplete(_) => t::SHUTDOWN_COMPLETE,
            Chunk::ForwardTsn(_) => t::FORWARD_TSN,
            Chunk::ReConfig(_) => t::RE_CONFIG,
            Chunk::Unknown { typ, .. } => *typ,
        }
    }

    /// The chunk as a writer; `None` for [`Chunk::Unknown`], which writes itself.
    fn as_write(&self) -> Option<&dyn WriteChunk> {
        Some(match self {
            Chunk::Data(c) => c,
            Chunk::Init(c) => c,
            Chunk::InitAck(c) => c,
            Chunk::Sack(c) => c,
            Chunk::Heartbeat(c) => c,
            Chunk::HeartbeatAck(c) => c,
            Chunk::Abort(c) => c,
            Chunk::Shutdown(c) => c,
            Chunk::ShutdownAck(c) => c,
            Chunk::Error(c) => c,
            Chunk::CookieEcho(c) => c,
            Chunk::CookieAck(c) => c,
            Chunk::ShutdownComplete(c) => c,
            Chunk::ForwardTsn(c) => c,
            Chunk::ReConfig(c) => c,
            Chunk::Unknown { .. } => return None,
        })
    }
}

impl WriteChunk for Chunk {
    fn encoded_len(&self) -> usize {
        match (self, self.as_write()) {
            (_, Some(c)) => c.encoded_len(),
            (Chunk::Unknown { value, .. }, None) => CHUNK_HEADER_LEN + value.len(),
            (_, None) => 0,
        }
    }

    fn write_to(&self, out: &mut BytesMut) {
        match (self, self.as_write()) {
            (_, Some(c)) => c.write_to(out),
            (Chunk::Unknown { typ, flags, value }, None) => {
                let len = CHUNK_HEADER_LEN + value.len();
                put_chunk_header(out, *typ, *flags, len);
                out.put_slice(value);
                put_padding(out, len);
            }
            (_, None) => {}
        }
    }
}

/// A chunk's header fields, handed to each type's parser for its errors.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Header {
    pub(crate) typ: u8,
    pub(crate) flags: u8,
    pub(crate) length: u16,
}

impl Header {
    pub(crate) fn too_short(self) -> SctpError {
        SctpError::ChunkTooShort {
            typ: self.typ,
            length: self.length,
        }
    }

    pub(crate) fn bad_length(self) -> SctpError {
        SctpError::BadChunkLength {
            typ: self.typ,
            length: self.length,
        }
    }
}

/// Walks the chunks of a packet's chunk area (everything after the common header),
/// yielding each parsed chunk or the first error, after which it stops. Allocates
/// nothing: each chunk keeps slices of the one [`Bytes`].
#[derive(Clone, Debug)]
pub struct Chunks {
    raw: Bytes,
    at: usize,
    count: usize,
    done: bool,
}

impl Chunks {
    /// Iterates the chunks in `area`: chunks back to back, each padded to 4 bytes
    /// (RFC 9260 §3.2). The last chunk's padding may be missing.
    pub fn new(area: Bytes) -> Chunks {
        Chunks {
            raw: area,
            at: 0,
            count: 0,
            done: false,
        }
    }

    fn next_chunk(&mut self) -> Result<Chunk, SctpError> {
        let rest = self.raw.len() - self.at;
        let head = self
            .raw
            .get(self.at..self.at + CHUNK_HEADER_LEN)
            .ok_or(SctpError::TrailingBytes { len: rest })?;
        let (typ, flags, length) = (head[0], head[1], be16(head, 2));
        if usize::from(length) < CHUNK_HEADER_LEN {
            return Err(SctpError::ChunkTooShort { typ, length });
        }
        let end = self.at + usize::from(length);
        if end > self.raw.len() {
            return Err(SctpError::ChunkOverrun { typ, length });
        }
        self.count += 1;
        if self.count > MAX_CHUNKS_PER_PACKET {
            return Err(SctpError::TooManyChunks);
        }
        let value = self.raw.slice(self.at + CHUNK_HEADER_LEN..end);
        // RFC 9260 §3.2: the padding is not counted in the length; "the receiver MUST
        // ignore the padding bytes". A last chunk without its padding is accepted.
        self.at = pad4(end).min(self.raw.len());
        Chunk::parse(typ, flags, value)
    }
}

impl Iterator for Chunks {
    type Item = Result<Chunk, SctpError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done || self.at >= self.raw.len() {
            return None;
        }
        let item = self.next_chunk();
        self.done = item.is_err();
        Some(item)
    }
}

/// A list of 4-byte items inside a chunk (gap ack blocks, duplicate TSNs, FORWARD TSN
/// streams): a received view or a slice to send.
pub trait WordList {
    /// Number of items.
    fn count(&self) -> usize;
    /// Appends the items, 4 bytes each, in network byte order.
    fn write_to(&self, out: &mut BytesMut);
}

/// The raw bytes of a validated list of 4-byte items from a received chunk.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub(crate) struct RawWords(pub(crate) Bytes);

impl RawWords {
    pub(crate) fn count(&self) -> usize {
        self.0.len() / 4
    }

    /// The items, 4 bytes each.
    pub(crate) fn iter(&self) -> impl ExactSizeIterator<Item = [u8; 4]> + '_ {
        self.0.chunks_exact(4).map(|w| [w[0], w[1], w[2], w[3]])
    }

    pub(crate) fn write_to(&self, out: &mut BytesMut) {
        out.put_slice(&self.0);
    }
}
