//! Why a DTLS connection failed, and the alert each failure sends.

use crate::dtls::{AlertDescription, DtlsWireError, HandshakeType};

use super::crypto::CryptoError;

/// A reason the handshake or the connection failed, or an API misuse. Failures caused
/// by the peer come with the fatal alert RFC 5246 §7.2.2 names for them
/// ([`DtlsError::alert`]).
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum DtlsError {
    /// The SHA-256 of the peer's certificate is not the fingerprint its SDP announced
    /// (RFC 8122 §5, RFC 5763 §5).
    #[error("peer certificate does not match the SDP fingerprint")]
    FingerprintMismatch,
    /// The peer's certificate is unusable: its key is not one shoal can verify with.
    #[error("peer certificate unusable")]
    BadCertificate,
    /// The peer's Certificate message is empty (RFC 5246 §7.4.6: the server "MAY ...
    /// respond with a fatal handshake_failure alert"; WebRTC authenticates both ends).
    #[error("peer sent no certificate")]
    NoCertificate,
    /// The peer's Finished verify_data is wrong (RFC 5246 §7.4.9).
    #[error("bad Finished verify_data")]
    BadFinished,
    /// A ServerKeyExchange or CertificateVerify signature did not verify.
    #[error("bad signature in {0:?}")]
    BadSignature(HandshakeType),
    /// The peer did not offer or accept extended_master_secret (RFC 7627 §5.2).
    #[error("peer does not use the extended master secret")]
    ExtendedMasterSecretRequired,
    /// No cipher suite in common.
    #[error("no cipher suite in common")]
    NoSharedCipherSuite,
    /// No ECDHE group in common, or the peer chose one not offered.
    #[error("no ECDHE group in common")]
    NoSharedGroup,
    /// No signature algorithm in common with the peer.
    #[error("no signature algorithm in common")]
    NoSharedSignatureAlgorithm,
    /// The session must key SRTP (the peer's SDP has media sections) and no SRTP
    /// protection profile was agreed: RFC 5764 §4.1.1 lets the handshake fall back to
    /// DTLS alone, "If that is not acceptable" the server sends an alert.
    #[error("no SRTP protection profile in common, and the session carries media")]
    NoSharedSrtpProfile,
    /// The peer speaks no DTLS 1.2.
    #[error("unsupported DTLS version {0:#06x}")]
    ProtocolVersion(u16),
    /// A handshake message that is not the one this state expects.
    #[error("unexpected {0:?} message")]
    UnexpectedMessage(HandshakeType),
    /// A message whose fields are well-formed but not acceptable.
    #[error("illegal parameter: {0}")]
    IllegalParameter(&'static str),
    /// The peer answered with an extension shoal did not offer (RFC 5246 §7.4.1.4).
    #[error("unsolicited extension {0:#06x}")]
    UnsupportedExtension(u16),
    /// renegotiation_info carries a renegotiated_connection on an initial handshake
    /// (RFC 5746 §3.2, §3.6).
    #[error("renegotiation_info is not empty on an initial handshake")]
    BadRenegotiationInfo,
    /// A handshake message that does not parse.
    #[error("malformed handshake message: {0}")]
    Decode(#[from] DtlsWireError),
    /// The peer's ECDHE public value is malformed or off the curve.
    #[error("bad ECDHE public value")]
    BadKeyShare,
    /// The handshake transcript grew past its bound.
    #[error("handshake too large")]
    HandshakeTooLarge,
    /// Too many HelloVerifyRequests in one handshake.
    #[error("too many HelloVerifyRequests")]
    TooManyHelloVerifyRequests,
    /// Our own cryptography failed (key generation, signing, sealing).
    #[error("local cryptographic failure: {0}")]
    Internal(&'static str),
    /// The handshake did not complete in time, or a flight went unanswered for
    /// `max_retransmits` retransmissions.
    #[error("handshake timed out")]
    Timeout,
    /// The operation needs an established connection.
    #[error("DTLS connection not established")]
    NotConnected,
    /// The connection is closed or failed.
    #[error("DTLS connection closed")]
    Closed,
    /// The outgoing buffer is full: poll_transmit has not been drained.
    #[error("DTLS send buffer full")]
    SendBufferFull,
    /// RFC 5705 §6 reserves the TLS PRF's own labels: they "MUST NOT be used" for export.
    #[error("reserved exporter label")]
    ReservedExporterLabel,
}

impl DtlsError {
    /// The fatal alert this failure sends to the peer, if any (RFC 5246 §7.2.2).
    pub fn alert(&self) -> Option<AlertDescription> {
        use DtlsError::*;
        Some(match self {
            FingerprintMismatch | BadCertificate => AlertDescription::BAD_CERTIFICATE,
            BadFinished | BadSignature(_) => AlertDescription::DECRYPT_ERROR,
            ExtendedMasterSecretRequired
            | NoCertificate
            | NoSharedCipherSuite
            | NoSharedGroup
            | NoSharedSignatureAlgorithm
            | NoSharedSrtpProfile
            | BadRenegotiationInfo
            | HandshakeTooLarge
            | TooManyHelloVerifyRequests => AlertDescription::HANDSHAKE_FAILURE,
            ProtocolVersion(_) => AlertDescription::PROTOCOL_VERSION,
            UnexpectedMessage(_) => AlertDescription::UNEXPECTED_MESSAGE,
            IllegalParameter(_) | BadKeyShare => AlertDescription::ILLEGAL_PARAMETER,
            UnsupportedExtension(_) => AlertDescription::UNSUPPORTED_EXTENSION,
            Decode(_) => AlertDescription::DECODE_ERROR,
            Internal(_) => AlertDescription::INTERNAL_ERROR,
            Timeout | NotConnected | Closed | SendBufferFull | ReservedExporterLabel => {
                return None;
            }
        })
    }
}

impl From<CryptoError> for DtlsError {
    /// Crypto failures during the handshake: those a peer causes map to their protocol
    /// error, the rest are ours.
    fn from(e: CryptoError) -> Self {
        match e {
            CryptoError::BadPeerPublicKey => DtlsError::BadKeyShare,
            CryptoError::Certificate(_) | CryptoError::KeyMismatch => DtlsError::BadCertificate,
            CryptoError::TranscriptTooLong => DtlsError::HandshakeTooLarge,
            CryptoError::Signing => DtlsError::Internal("signing failed"),
            CryptoError::KeyGeneration => DtlsError::Internal("key generation failed"),
            CryptoError::Random => DtlsError::Internal("random number generator failed"),
            CryptoError::SealFailed => DtlsError::Internal("record sealing failed"),
            _ => DtlsError::Internal("cryptographic operation failed"),
        }
    }
}
