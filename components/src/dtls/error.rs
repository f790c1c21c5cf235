//! Why a DTLS record or handshake message was refused: one typed error per rule that a
//! datagram can break.

/// A DTLS record, handshake fragment or message that cannot be used. Every variant is an
/// operating error (drop the record, or abort the handshake with an alert the state
/// machine chooses), never a reason to panic.
#[derive(Debug, thiserror::Error, Clone, Copy, PartialEq, Eq)]
pub enum DtlsWireError {
    /// The bytes end before the named field does.
    #[error("DTLS {field} truncated")]
    Truncated {
        /// The field that runs past the end.
        field: &'static str,
    },
    /// Bytes are left over after the named structure ends.
    #[error("trailing bytes after DTLS {field}")]
    TrailingBytes {
        /// The structure that should have ended there.
        field: &'static str,
    },
    /// A length or a vector length outside the bounds its definition gives.
    #[error("DTLS {field} has a bad length {len}")]
    BadLength {
        /// The field.
        field: &'static str,
        /// The length as received.
        len: usize,
    },
    /// A field with a value its definition does not allow.
    #[error("DTLS {field} has a bad value {value:#x}")]
    BadValue {
        /// The field.
        field: &'static str,
        /// The value as received.
        value: u32,
    },
    /// A record content type outside RFC 5246 §6.2.1's four.
    #[error("unknown DTLS content type {0}")]
    UnknownContentType(u8),
    /// A handshake type that DTLS 1.2 does not define (RFC 6347 §4.2.2).
    #[error("unknown DTLS handshake type {0}")]
    UnknownHandshakeType(u8),
    /// A record version that is neither DTLS 1.2 nor DTLS 1.0 (RFC 6347 §4.1).
    #[error("DTLS record version {0:#06x} is not 1.0 or 1.2")]
    BadVersion(u16),
    /// More entries than the bound shoal keeps for the named list.
    #[error("too many entries in DTLS {field}")]
    TooMany {
        /// The list.
        field: &'static str,
    },
    /// The same extension twice (RFC 5246 §7.4.1.4).
    #[error("duplicate TLS extension {0:#06x}")]
    DuplicateExtension(u16),
}
