//! Why an SCTP packet, chunk or DCEP message was refused: one typed error per rule of
//! RFC 9260 (and RFC 3758, RFC 6525, RFC 8832) that received bytes can break.

use super::num::Tsn;

/// An SCTP packet or chunk that cannot be used. Every variant is an operating error
/// (drop the packet, or answer as RFC 9260 says, and count it), never a reason to panic.
#[derive(Debug, thiserror::Error, Clone, Copy, PartialEq, Eq)]
pub enum SctpError {
    /// Shorter than the 12-byte common header plus one 4-byte chunk header (RFC 9260 §3).
    #[error("SCTP packet of {len} bytes is shorter than a common header and one chunk")]
    PacketTooShort {
        /// The packet's length in bytes.
        len: usize,
    },
    /// The CRC32c checksum does not match (RFC 9260 §6.8): the packet is invalid.
    #[error("SCTP checksum mismatch: received {received:#010x}, computed {computed:#010x}")]
    BadChecksum {
        /// The checksum field as received, read little-endian (RFC 9260 Appendix A).
        received: u32,
        /// The CRC32c of the packet with its checksum field zeroed.
        computed: u32,
    },
    /// Source or destination port 0, which "MUST NOT be used" (RFC 9260 §3.1).
    #[error("SCTP port 0")]
    ZeroPort,
    /// One to three bytes follow the last chunk: not even a chunk header (RFC 9260 §3.2).
    #[error("{len} stray bytes after the last SCTP chunk")]
    TrailingBytes {
        /// How many bytes are left over.
        len: usize,
    },
    /// Chunk Length below 4, or below the fixed part of this chunk type (RFC 9260 §3.2).
    #[error("SCTP chunk {typ} has length {length}, shorter than its fixed part")]
    ChunkTooShort {
        /// The chunk type.
        typ: u8,
        /// The Chunk Length field as received.
        length: u16,
    },
    /// Chunk Length runs past the end of the packet (RFC 9260 §3.2).
    #[error("SCTP chunk {typ} of length {length} runs past the end of the packet")]
    ChunkOverrun {
        /// The chunk type.
        typ: u8,
        /// The Chunk Length field as received.
        length: u16,
    },
    /// A chunk whose length is fixed by the RFC has another one (e.g. SHUTDOWN is 8).
    #[error("SCTP chunk {typ} has length {length}, not the length its type fixes")]
    BadChunkLength {
        /// The chunk type.
        typ: u8,
        /// The Chunk Length field as received.
        length: u16,
    },
    /// More chunks than [`super::chunk::MAX_CHUNKS_PER_PACKET`] in one packet.
    #[error(
        "more than {} chunks in one SCTP packet",
        super::chunk::MAX_CHUNKS_PER_PACKET
    )]
    TooManyChunks,
    /// A DATA chunk without user data; RFC 9260 §3.3.1 requires L > 0 and §3.3.10.9
    /// has the receiver report "No User Data" with this TSN.
    #[error("SCTP DATA chunk {} carries no user data", tsn.0)]
    NoUserData {
        /// The TSN of the empty DATA chunk.
        tsn: Tsn,
    },
    /// A parameter (or error cause) header is cut short or its length is below 4
    /// (RFC 9260 §3.2.1).
    #[error("SCTP parameter {typ:#06x} is shorter than its header")]
    ParameterTooShort {
        /// The parameter type (or cause code); 0 when not even the type was readable.
        typ: u16,
    },
    /// A parameter's length runs past the end of its chunk (RFC 9260 §3.2.1).
    #[error("SCTP parameter {typ:#06x} runs past the end of its chunk")]
    ParameterOverrun {
        /// The parameter type (or cause code).
        typ: u16,
    },
    /// A known parameter whose value has the wrong size or shape.
    #[error("malformed SCTP parameter {typ:#06x}")]
    BadParameter {
        /// The parameter type.
        typ: u16,
    },
    /// More parameters than the chunk allows (see [`super::chunk::MAX_PARAMS_PER_CHUNK`],
    /// and RFC 6525 §3.1's one or two parameters per RE-CONFIG).
    #[error("too many parameters in SCTP chunk {chunk}")]
    TooManyParameters {
        /// The chunk type.
        chunk: u8,
    },
    /// A chunk lacks the parameter it must carry (HEARTBEAT's Heartbeat Info, a
    /// RE-CONFIG's request or response, an ERROR's cause).
    #[error("SCTP chunk {chunk} lacks its mandatory parameter")]
    MissingParameter {
        /// The chunk type.
        chunk: u8,
    },
    /// The SACK's Number of Gap Ack Blocks and Number of Duplicate TSNs do not match its
    /// length, or exceed [`super::chunk::MAX_LIST_ITEMS`] (RFC 9260 §3.3.4).
    #[error(
        "SACK says {gap_ack_blocks} gap ack blocks and {duplicate_tsns} duplicate TSNs, which do not fit its length"
    )]
    SackCountMismatch {
        /// Number of Gap Ack Blocks as received.
        gap_ack_blocks: u16,
        /// Number of Duplicate TSNs as received.
        duplicate_tsns: u16,
    },
    /// A Gap Ack Block with start 0 or start after end: its offsets must name TSNs after
    /// the Cumulative TSN Ack, lowest first (RFC 9260 §3.3.4).
    #[error("SACK gap ack block {start}..={end} is not a range after the cumulative TSN")]
    BadGapAckBlock {
        /// Gap Ack Block Start as received.
        start: u16,
        /// Gap Ack Block End as received.
        end: u16,
    },
    /// FORWARD TSN whose stream list is not whole 4-byte (stream, SSN) pairs, or longer
    /// than [`super::chunk::MAX_LIST_ITEMS`] (RFC 3758 §3.2).
    #[error("FORWARD TSN chunk of length {length} does not hold whole (stream, SSN) pairs")]
    ForwardTsnBadLength {
        /// The Chunk Length field as received.
        length: u16,
    },
    /// An INIT or INIT ACK mandatory field breaks RFC 9260 §3.3.2/§3.3.3 (Initiate Tag 0,
    /// a_rwnd below 1500, zero streams). Reported by `InitChunk::validate`.
    #[error("invalid mandatory parameter in INIT or INIT ACK")]
    InvalidMandatoryParameter,
}

/// A DCEP message (RFC 8832 §5) that cannot be used. The receiver closes the data
/// channel (RFC 8832 §6) rather than answering with DATA_CHANNEL_ACK.
#[derive(Debug, thiserror::Error, Clone, Copy, PartialEq, Eq)]
pub enum DcepError {
    /// A zero-length message: not even a Message Type.
    #[error("empty DCEP message")]
    Empty,
    /// A Message Type other than DATA_CHANNEL_OPEN (0x03) or DATA_CHANNEL_ACK (0x02).
    #[error("unknown DCEP message type {0:#04x}")]
    UnknownMessageType(u8),
    /// Shorter than the 12-byte DATA_CHANNEL_OPEN header plus its label and protocol.
    #[error("truncated DCEP message")]
    Truncated,
    /// Bytes after the end of the message its own length fields describe.
    #[error("{len} bytes after the end of the DCEP message")]
    TrailingBytes {
        /// How many bytes are left over.
        len: usize,
    },
    /// A Channel Type that RFC 8832 §8.2.2 does not define.
    #[error("unknown DCEP channel type {0:#04x}")]
    UnknownChannelType(u8),
    /// The Label is not valid UTF-8 (RFC 8832 §5.1).
    #[error("DCEP label is not UTF-8")]
    LabelNotUtf8,
    /// The Protocol is not valid UTF-8 (RFC 8832 §5.1).
    #[error("DCEP protocol is not UTF-8")]
    ProtocolNotUtf8,
    /// A label or protocol longer than its 16-bit length field can say.
    #[error("DCEP label or protocol longer than 65535 bytes")]
    TooLong,
}
