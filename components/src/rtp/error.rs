//! Why an RTP packet, or a header extension value in it, was refused: one typed error per
//! rule of RFC 3550 §5 and RFC 8285 that received bytes can break.

/// An RTP packet that cannot be used, or an extension that cannot be read or rewritten.
/// Every variant is an operating error (drop the packet and count it), never a reason
/// to panic.
#[derive(Debug, thiserror::Error, Clone, Copy, PartialEq, Eq)]
pub enum RtpError {
    /// Shorter than the 12-byte fixed header (RFC 3550 §5.1).
    #[error("RTP packet of {len} bytes is shorter than the fixed header")]
    TooShort {
        /// The packet's length in bytes.
        len: usize,
    },
    /// The version field is not 2 (RFC 3550 §5.1).
    #[error("RTP version {version}, not 2")]
    BadVersion {
        /// The version field as received.
        version: u8,
    },
    /// The CSRC list that the CC field announces runs past the end (RFC 3550 §5.1).
    #[error("{count} CSRCs run past the end of the RTP packet")]
    CsrcOverrun {
        /// The CC field as received.
        count: u8,
    },
    /// The header extension, or its 4-byte header, runs past the end (RFC 3550 §5.3.1).
    #[error("RTP header extension runs past the end of the packet")]
    ExtensionOverrun,
    /// An RFC 8285 element runs past the end of its extension block (RFC 8285 §4.2, §4.3).
    #[error("RTP header extension element {id} runs past the end of the extension")]
    ElementOverrun {
        /// The element's ID.
        id: u8,
    },
    /// The P bit is set but the last octet, the padding count, is 0 or counts more
    /// octets than follow the header (RFC 3550 §5.1).
    #[error("bad RTP padding count {count}")]
    BadPadding {
        /// The last octet of the packet.
        count: u8,
    },
    /// No element with this ID in the packet (or the packet has no RFC 8285 extension).
    #[error("no RTP header extension element {id}")]
    ExtensionNotFound {
        /// The ID looked for.
        id: u8,
    },
    /// An element's value has a size its type does not allow, or a rewrite would change
    /// the value's size (which in-place rewriting cannot do).
    #[error("RTP header extension element {id} has {len} bytes, not a size its type allows")]
    ExtensionLength {
        /// The element's ID.
        id: u8,
        /// The value's length in bytes.
        len: usize,
    },
    /// An element's value breaks its type's syntax (an empty MID, a RID outside the
    /// rid-id grammar, text that is not UTF-8).
    #[error("malformed value in RTP header extension element {id}")]
    BadExtensionValue {
        /// The element's ID.
        id: u8,
    },
    /// An ID or value length the chosen header form cannot carry (RFC 8285 §4.2: IDs
    /// 1-14 and 1-16 bytes in the one-byte form; §4.3: IDs 1-255 and 0-255 bytes in
    /// the two-byte form).
    #[error("RTP header extension element {id} of {len} bytes does not fit the header form")]
    ElementNotEncodable {
        /// The element's ID.
        id: u8,
        /// The value's length in bytes.
        len: usize,
    },
}
