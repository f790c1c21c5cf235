//! What can go wrong protecting or unprotecting a packet.

/// An SRTP or SRTCP failure. Those caused by a received packet are operating errors: the
/// caller drops the packet, counts it by variant, and goes on. On any error the packet
/// buffer's contents are unspecified (a failed unprotect may have been part-decrypted)
/// and the context's state is unchanged.
#[derive(thiserror::Error, Debug, Clone, Copy, PartialEq, Eq)]
pub enum SrtpError {
    /// The packet ends before its header, or before the header and the SRTP trailer.
    #[error("packet of {len} bytes is too short: its headers and trailer need {needed}")]
    TooShort {
        /// Bytes present.
        len: usize,
        /// Bytes the headers (and, when unprotecting, the trailer) need.
        needed: usize,
    },
    /// The first two bits are not RTP/RTCP version 2 (RFC 3550 §5.1).
    #[error("RTP/RTCP version {0}, not 2")]
    BadVersion(u8),
    /// The authentication tag did not verify (RFC 3711 §3.3 step 5, §4.2; RFC 7714 §8.2).
    #[error("packet failed authentication")]
    AuthenticationFailed,
    /// The packet index was already received (RFC 3711 §3.3.2).
    #[error("packet index {index} was already received (replay)")]
    Replayed {
        /// The SRTP packet index (ROC * 2^16 + SEQ) or the SRTCP index.
        index: u64,
    },
    /// The packet index lies behind the replay window, so it cannot be told from a
    /// replay (RFC 3711 §3.3.2), or before the stream's first packet.
    #[error("packet index {index} is behind the replay window")]
    TooOld {
        /// The SRTP packet index or the SRTCP index.
        index: u64,
    },
    /// A protection profile shoal does not implement.
    #[error("SRTP protection profile {0:#06x} is not implemented")]
    UnknownProfile(u16),
    /// The context already tracks as many SSRCs as its configuration allows.
    #[error("context already tracks its limit of {limit} SSRCs")]
    TooManySsrcs {
        /// `SrtpConfig::max_ssrcs`.
        limit: usize,
    },
    /// The caller's buffer has no room for the trailer (protect), or `len` exceeds it.
    #[error("buffer of {capacity} bytes cannot hold the {needed} needed")]
    BufferTooSmall {
        /// Bytes the protected packet needs.
        needed: usize,
        /// Bytes the buffer has.
        capacity: usize,
    },
    /// A master or session key of the wrong length for the profile.
    #[error("key of {actual} bytes where {expected} are needed")]
    BadKeyLength {
        /// Bytes the profile needs.
        expected: usize,
        /// Bytes given.
        actual: usize,
    },
    /// A master or session salt of the wrong length for the profile.
    #[error("salt of {actual} bytes where {expected} are needed")]
    BadSaltLength {
        /// Bytes the profile needs.
        expected: usize,
        /// Bytes given.
        actual: usize,
    },
    /// This sender has used all 2^31 SRTCP indices of its key (RFC 3711 §3.4, §9.2):
    /// the key must change before it sends more RTCP.
    #[error("SRTCP index space of this key is used up; re-key")]
    SrtcpIndexExhausted,
    /// The sender was asked to protect a packet index it already protected under this
    /// key. With AES-GCM that would reuse a nonce (RFC 7714 §8.1 relies on unique IVs),
    /// so it is refused unless `SrtpConfig::allow_repeated_tx` says the repeat is a
    /// retransmission of the very same packet.
    #[error("packet index {index} was already protected under this key")]
    RepeatedIndex {
        /// The SRTP packet index.
        index: u64,
    },
    /// ring refused to seal (it does so only past its per-key limits).
    #[error("AEAD seal failed")]
    SealFailed,
}
