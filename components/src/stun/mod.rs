//! STUN (RFC 8489) messages: zero-copy parse, integrity and fingerprint, and a writer.
//!
//! [`StunMessage::parse`] checks the header and walks the attributes of one datagram
//! without allocating: it keeps the [`bytes::Bytes`] it was given and records where each
//! attribute sits in a fixed-size inline table. [`StunWriter`] appends one message to a
//! caller-owned [`bytes::BytesMut`]. Both sides follow RFC 8489 and the ICE attributes of
//! RFC 8445 §7.1; RFC 5769's test vectors are in `components/tests/`.

pub mod attr;
mod error;
mod message;
mod writer;

#[cfg(test)]
mod tests;

pub use error::StunError;
pub use message::StunMessage;
pub use writer::StunWriter;

/// RFC 8489 §5: the fixed value of the second 32-bit word of every message.
pub const MAGIC_COOKIE: u32 = 0x2112_A442;
/// The Binding method (RFC 8489 §18.2), the only one ICE uses.
pub const BINDING: u16 = 0x0001;
/// RFC 8489 §5: every message starts with a 20-byte header.
pub const HEADER_LEN: usize = 20;
/// At most this many attributes are kept per message; more is [`StunError::TooManyAttributes`].
pub const MAX_ATTRIBUTES: usize = 32;
/// At most this many unknown comprehension-required types are reported per message.
pub const MAX_UNKNOWN: usize = 16;

/// The 96-bit transaction ID of RFC 8489 §5.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TransactionId(pub [u8; 12]);

/// The class of a STUN message (RFC 8489 §5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// C1 C0 = 0b00.
    Request,
    /// C1 C0 = 0b01.
    Indication,
    /// C1 C0 = 0b10.
    SuccessResponse,
    /// C1 C0 = 0b11.
    ErrorResponse,
}

// RFC 8489 §5, Figure 3: the 14-bit message type interleaves the class bits with the
// method: M11..M7 C1 M6..M4 C0 M3..M0.
const CLASS_MASK: u16 = 0x0110;
const C0: u16 = 0x0010;
const C1: u16 = 0x0100;

impl Class {
    /// The class bits in their place in the message type field.
    const fn type_bits(self) -> u16 {
        match self {
            Class::Request => 0,
            Class::Indication => C0,
            Class::SuccessResponse => C1,
            Class::ErrorResponse => C1 | C0,
        }
    }

    /// The class of a message type field.
    const fn from_type(typ: u16) -> Class {
        match typ & CLASS_MASK {
            0 => Class::Request,
            C0 => Class::Indication,
            C1 => Class::SuccessResponse,
            _ => Class::ErrorResponse,
        }
    }
}

/// The 12-bit method of a message type field (RFC 8489 §5).
const fn method_from_type(typ: u16) -> u16 {
    (typ & 0x000F) | ((typ & 0x00E0) >> 1) | ((typ & 0x3E00) >> 2)
}

/// The message type field for a class and a 12-bit method (RFC 8489 §5).
const fn message_type(class: Class, method: u16) -> u16 {
    (method & 0x000F) | ((method & 0x0070) << 1) | ((method & 0x0F80) << 2) | class.type_bits()
}

/// Peek without a full parse: true when the first two bits are 0 and bytes 4..8 are the
/// magic cookie (RFC 8489 §5; RFC 7983 §7 sends first bytes 0-3 to STUN). A buffer
/// shorter than the 20-byte header cannot be STUN and gives false.
pub fn looks_like_stun(buf: &[u8]) -> bool {
    match (buf.first(), buf.get(4..8)) {
        (Some(first), Some(cookie)) if buf.len() >= HEADER_LEN => {
            first & 0xC0 == 0 && cookie == MAGIC_COOKIE.to_be_bytes()
        }
        _ => false,
    }
}
