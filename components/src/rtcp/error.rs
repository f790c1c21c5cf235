//! Why an RTCP packet was refused: one typed error per rule of RFC 3550 §6, RFC 4585 §6,
//! RFC 5104 §4.3, draft-alvestrand-rmcat-remb-03 §2.2 and
//! draft-holmer-rmcat-transport-wide-cc-extensions-01 §3.1 that received bytes can break.

/// An RTCP packet (or the rest of a compound packet from it on) that cannot be used.
/// Every variant is an operating error (drop and count), never a reason to panic.
#[derive(Debug, thiserror::Error, Clone, Copy, PartialEq, Eq)]
pub enum RtcpError {
    /// Fewer than 4 bytes left where a packet header should start (RFC 3550 §6.4.1);
    /// `len` 0 is an empty datagram.
    #[error("{len} bytes where an RTCP header should start")]
    Truncated {
        /// How many bytes were left.
        len: usize,
    },
    /// The version field is not 2 (RFC 3550 §6.4.1, Appendix A.2).
    #[error("RTCP version {version}, not 2")]
    BadVersion {
        /// The version field as received.
        version: u8,
    },
    /// The length field counts past the end of the datagram (RFC 3550 §6.4.1: "length
    /// of this RTCP packet in 32-bit words minus one").
    #[error("RTCP packet type {pt} of {length_words} words + 1 runs past the end")]
    LengthPastEnd {
        /// The packet type.
        pt: u8,
        /// The length field as received.
        length_words: u16,
    },
    /// P is set but the padding count (the packet's last octet) is 0 or larger than the
    /// packet after its header (RFC 3550 §6.4.1).
    #[error("RTCP packet type {pt} has padding count {count}")]
    BadPadding {
        /// The packet type.
        pt: u8,
        /// The last octet of the packet.
        count: u8,
    },
    /// Shorter than the fixed part of its type (SR's sender info, a feedback message's
    /// two SSRCs, APP's name, REMB's header, TWCC's fixed fields).
    #[error("RTCP packet type {pt} is shorter than its fixed part")]
    TooShort {
        /// The packet type.
        pt: u8,
    },
    /// The count field (RC, SC) announces more items than the packet holds (RFC 3550
    /// §6.4, §6.5, §6.6), or items end before the packet does where nothing may follow.
    #[error("RTCP packet type {pt} count {count} does not match its length")]
    CountMismatch {
        /// The packet type.
        pt: u8,
        /// The count field as received.
        count: u8,
    },
    /// An SDES chunk whose items run past the packet or lack the null terminator, or
    /// whose padding is not null octets (RFC 3550 §6.5).
    #[error("malformed SDES chunk")]
    BadSdes,
    /// A BYE reason that runs past the packet, or padding after it that is not at most
    /// three null octets (RFC 3550 §6.6).
    #[error("malformed BYE reason")]
    BadBye,
    /// A feedback message whose FCI has a size its FMT does not allow: PLI with FCI
    /// (RFC 4585 §6.3.1), a NACK or FIR FCI that is empty or not whole entries (RFC 4585
    /// §6.2.1, RFC 5104 §4.3.1), a REMB whose SSRC count does not match (REMB §2.2).
    #[error("RTCP feedback PT {pt} FMT {fmt} has a malformed FCI")]
    BadFci {
        /// The packet type, 205 or 206.
        pt: u8,
        /// The feedback message type.
        fmt: u8,
    },
    /// More FCI entries than [`super::MAX_FCI_ENTRIES`].
    #[error("RTCP feedback PT {pt} FMT {fmt} carries too many entries")]
    TooManyEntries {
        /// The packet type, 205 or 206.
        pt: u8,
        /// The feedback message type.
        fmt: u8,
    },
    /// A transport-cc feedback whose packet status count exceeds
    /// [`super::MAX_TWCC_STATUS_COUNT`].
    #[error("transport-cc feedback reports {count} packets, more than allowed")]
    TwccTooManyStatuses {
        /// The packet status count as received.
        count: u16,
    },
    /// A transport-cc feedback whose chunks do not cover its packet status count, whose
    /// receive deltas run past the packet, or which has more than 3 bytes after them
    /// (draft-holmer-rmcat-transport-wide-cc-extensions-01 §3.1).
    #[error("transport-cc feedback with {count} statuses does not match its length")]
    TwccInconsistent {
        /// The packet status count as received.
        count: u16,
    },
    /// More packets in one compound than [`super::MAX_PACKETS_PER_COMPOUND`].
    #[error("too many packets in one RTCP compound")]
    TooManyPackets,
}
