//! SRTP and SRTCP (RFC 3711) with the AES-GCM AEAD transforms of RFC 7714, for the three
//! DTLS-SRTP protection profiles shoal negotiates: SRTP_AES128_CM_HMAC_SHA1_80 (which
//! Chromium picks), SRTP_AEAD_AES_128_GCM and SRTP_AEAD_AES_256_GCM.
//!
//! Sans-I/O and allocation-free per packet: every operation transforms a caller's
//! buffer in place.
//!
//! # Keys and contexts
//!
//! The DTLS handshake exports [`SrtpKeys`] (RFC 5764 §4.2): a master key and salt for
//! what the DTLS client writes and one for what the server writes. [`SrtpSession::new`]
//! picks by shoal's DTLS role: the peer's write key keys the [`SrtpInbound`] context,
//! shoal's own keys the [`SrtpOutbound`] one. Each context derives its session keys
//! once (the AES-CM PRF of RFC 3711 §4.3, on AES-256 for 256-bit master keys: RFC
//! 6188's AES_256_CM_PRF, as RFC 7714 §11 asks) and keeps the keyed ciphers: the AES key schedule and the HMAC
//! state after the key for AES-CM, ring's AES-GCM key for the AEAD profiles. Per packet
//! it clones the prepared HMAC state and nothing else.
//!
//! Inside a context, state is per SSRC (RFC 3711 §3.2.3): for SRTP the highest packet
//! index (so the rollover counter and s_l, §3.3.1) and a 1024-packet replay list
//! (§3.3.2); for SRTCP a 128-packet replay list (inbound) or the next index (outbound).
//! At most [`SrtpConfig::max_ssrcs`] SSRCs each; one more is refused with
//! [`SrtpError::TooManySsrcs`]. An inbound SSRC's state is created only by a packet
//! that authenticated.
//!
//! # Using it
//!
//! ```text
//! let SrtpSession { mut inbound, mut outbound } =
//!     SrtpSession::new(&keys, role, SrtpConfig::default())?;
//! // receive: buf is one SRTP datagram, decrypted in place
//! let rtp = inbound.unprotect_rtp(&mut buf)?;        // plaintext: buf[..rtp.len]
//! let rtcp = inbound.unprotect_rtcp(&mut buf)?;      // plaintext: buf[..rtcp.len]
//! // send: the RTP packet is buf[..len], with rtp_overhead() bytes of room after it
//! let n = outbound.protect_rtp(&mut buf, len)?;      // SRTP packet: buf[..n]
//! let n = outbound.protect_rtcp(&mut buf, len)?;
//! // or grow a Vec<u8>/BytesMut whose tail (from `start`) is the packet
//! outbound.protect_rtp_tail(&mut datagrams, start)?;
//! ```
//!
//! Every failure is a typed [`SrtpError`]; a received packet that fails is dropped and
//! counted by the caller, and leaves the context unchanged. Nothing here panics on
//! received bytes. RFC 7983 demultiplexing and telling RTP from RTCP (RFC 5761 §4) are
//! the caller's: this module parses only enough of the RTP header (CSRCs, extension) to
//! find the payload.
//!
//! # Rules shoal chose
//!
//! - The outbound index uses the receiver's estimate (RFC 3711 §3.3.1) against the
//!   highest index sent, so a forwarded packet that is late by a few places keeps its
//!   index instead of being counted into a new rollover.
//! - The sender refuses to protect an SRTP index twice ([`SrtpError::RepeatedIndex`])
//!   unless [`SrtpConfig::allow_repeated_tx`]: with AES-GCM a repeated nonce over
//!   different contents gives the key away.
//! - SRTCP indices start at 0, as RFC 3711 §3.4 says ("MUST be set to zero before the
//!   first SRTCP packet is sent"); libsrtp starts at 1. Receivers accept either.
//! - The key derivation rate is zero and there is no MKI (DTLS-SRTP as shoal
//!   negotiates it).

mod cipher;
mod context;
mod error;
mod header;
pub mod kdf;
mod profile;
mod replay;

pub use crate::dtls::{DtlsRole, SrtpKeys, SrtpProfile};
pub use context::{
    PacketBuf, SRTCP_REPLAY_WINDOW, SRTP_REPLAY_WINDOW, SrtpConfig, SrtpInbound, SrtpOutbound,
    UnprotectedRtcp, UnprotectedRtp,
};
pub use error::SrtpError;
pub use kdf::SessionKeys;
pub use profile::SRTCP_INDEX_LEN;

/// Both directions of one peer's SRTP, keyed from the DTLS-SRTP export.
pub struct SrtpSession {
    /// Unprotects what the peer sends.
    pub inbound: SrtpInbound,
    /// Protects what shoal sends the peer.
    pub outbound: SrtpOutbound,
}

impl SrtpSession {
    /// Keys both directions from `keys`, by shoal's DTLS `role` (RFC 5764 §4.2): the
    /// client_write_SRTP_master_key and salt protect what the DTLS client sends, the
    /// server_write ones what the server sends.
    pub fn new(
        keys: &SrtpKeys,
        role: DtlsRole,
        config: SrtpConfig,
    ) -> Result<SrtpSession, SrtpError> {
        let ((our_key, our_salt), (their_key, their_salt)) = match role {
            DtlsRole::Client => (
                (&keys.client_key, &keys.client_salt),
                (&keys.server_key, &keys.server_salt),
            ),
            DtlsRole::Server => (
                (&keys.server_key, &keys.server_salt),
                (&keys.client_key, &keys.client_salt),
            ),
        };
        Ok(SrtpSession {
            inbound: SrtpInbound::new(keys.profile, their_key, their_salt, config)?,
            outbound: SrtpOutbound::new(keys.profile, our_key, our_salt, config)?,
        })
    }
}
