//! Why a STUN message was refused: one typed error per rule of RFC 8489 that a datagram can break.

/// A STUN message that cannot be used. Every variant is an operating error (drop the
/// datagram and count it), never a reason to panic.
#[derive(Debug, thiserror::Error, Clone, Copy, PartialEq, Eq)]
pub enum StunError {
    /// Shorter than the 20-byte header, or shorter than the header's Message Length says.
    #[error("truncated STUN message")]
    Truncated,
    /// The two leading bits are not zero or the magic cookie is wrong (RFC 8489 §5).
    #[error("not a STUN message")]
    NotStun,
    /// Message Length is not a multiple of 4, or the datagram is longer than it says
    /// (RFC 8489 §5).
    #[error("bad STUN message length {length}")]
    BadLength {
        /// The Message Length field as received.
        length: u16,
    },
    /// More attributes than [`super::MAX_ATTRIBUTES`]; such a message is not worth parsing.
    #[error("more than {} STUN attributes", super::MAX_ATTRIBUTES)]
    TooManyAttributes,
    /// An attribute's length runs past the end of the message (RFC 8489 §14).
    #[error("STUN attribute {typ:#06x} runs past the end of the message")]
    AttributeOverrun {
        /// The attribute type.
        typ: u16,
    },
    /// A known attribute whose value has the wrong size or an out-of-range field.
    #[error("malformed STUN attribute {typ:#06x}")]
    BadAttribute {
        /// The attribute type.
        typ: u16,
    },
    /// FINGERPRINT does not match the CRC-32 of the message (RFC 8489 §14.7).
    #[error("STUN FINGERPRINT mismatch")]
    BadFingerprint,
    /// An attribute follows FINGERPRINT, which must be last (RFC 8489 §14.7).
    #[error("STUN FINGERPRINT is not the last attribute")]
    FingerprintNotLast,
    /// Integrity was asked for but the message carries no such attribute.
    #[error("STUN message has no MESSAGE-INTEGRITY")]
    IntegrityMissing,
    /// The HMAC does not match under the given key (RFC 8489 §14.5, §14.6).
    #[error("STUN MESSAGE-INTEGRITY mismatch")]
    BadIntegrity,
}
