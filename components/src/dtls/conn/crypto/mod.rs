//! The cryptography of DTLS 1.2 (RFC 6347 over RFC 5246) and of DTLS-SRTP keying
//! (RFC 5764), on `ring` only.
//!
//! What lives here is the arithmetic, not the protocol: the TLS 1.2 PRF and the secrets
//! derived from it (master secret, extended master secret, Finished verify_data, the
//! AEAD key block, the RFC 5705 exporter and its EXTRACTOR-dtls_srtp split), the running
//! handshake hash, AES-GCM record protection in place, ECDHE over X25519 and P-256,
//! and the ECDSA P-256 certificate that WebRTC peers pin by fingerprint. The handshake
//! state machine and the wire formats call into it.
//!
//! Sans-I/O like the rest of the crate: nothing here reads a clock or a socket. Random
//! numbers come from `ring::rand::SystemRandom` (nonces and ephemeral keys must not be
//! predictable, so they cannot come from a seeded simulation RNG). Every function that
//! sees bytes from the network returns a typed [`CryptoError`] and never panics.

mod cert;
mod cipher;
mod der;
mod ecdhe;
mod prf;
mod transcript;

pub use cert::{
    DtlsCertificate, fingerprint_sha256, verify_ecdsa_p256_sha256, verify_ecdsa_p384_sha384,
};
pub use cipher::{
    AEAD_TAG_LEN, EXPLICIT_NONCE_LEN, MAX_PLAINTEXT_LEN, RECORD_HEADER_LEN, RECORD_OVERHEAD,
    RecordCipher,
};
pub use der::{DerError, EcCurve, peer_public_key, peer_public_key_with_curve};
pub use ecdhe::EphemeralKey;
pub use prf::{
    KeyBlock, SrtpKeys, export_keying_material, extended_master_secret, key_block, master_secret,
    prf, verify_data,
};
pub use transcript::Transcript;

use ring::rand::{SecureRandom, SystemRandom};

/// The cipher suites shoal speaks: ECDHE with ECDSA certificates and AES-GCM records
/// (RFC 8422 §6, whose table lists both identifiers; AES-GCM as in RFC 5288 §3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum CipherSuite {
    /// TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256 {0xC0, 0x2B}: the one every browser offers.
    EcdheEcdsaAes128GcmSha256 = 0xC02B,
    /// TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384 {0xC0, 0x2C}.
    EcdheEcdsaAes256GcmSha384 = 0xC02C,
}

impl CipherSuite {
    /// The suite with this wire value, if shoal implements it.
    pub fn from_u16(v: u16) -> Option<Self> {
        match v {
            0xC02B => Some(Self::EcdheEcdsaAes128GcmSha256),
            0xC02C => Some(Self::EcdheEcdsaAes256GcmSha384),
            _ => None,
        }
    }

    /// The wire value.
    pub fn to_u16(self) -> u16 {
        self as u16
    }

    /// The hash of the suite's PRF. RFC 5288 §3: "For cipher suites ending with _SHA384,
    /// the PRF is the TLS PRF \[RFC5246\] with SHA-384 as the hash function"; the others
    /// use SHA-256 (RFC 5246 §5).
    pub fn prf_hash(self) -> PrfHash {
        match self {
            Self::EcdheEcdsaAes128GcmSha256 => PrfHash::Sha256,
            Self::EcdheEcdsaAes256GcmSha384 => PrfHash::Sha384,
        }
    }

    /// The AES key length in bytes (SecurityParameters.enc_key_length).
    pub fn key_len(self) -> usize {
        match self {
            Self::EcdheEcdsaAes128GcmSha256 => 16,
            Self::EcdheEcdsaAes256GcmSha384 => 32,
        }
    }
}

/// The hash function under the TLS 1.2 PRF (RFC 5246 §5 `P_<hash>`) and the handshake
/// hash of the Finished message (RFC 5246 §7.4.9: "the Hash MUST be the Hash used as the
/// basis for the PRF").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrfHash {
    /// SHA-256.
    Sha256,
    /// SHA-384.
    Sha384,
}

impl PrfHash {
    /// The digest length in bytes.
    pub fn output_len(self) -> usize {
        match self {
            Self::Sha256 => 32,
            Self::Sha384 => 48,
        }
    }

    pub(crate) fn hmac(self) -> ring::hmac::Algorithm {
        match self {
            Self::Sha256 => ring::hmac::HMAC_SHA256,
            Self::Sha384 => ring::hmac::HMAC_SHA384,
        }
    }

    pub(crate) fn digest(self) -> &'static ring::digest::Algorithm {
        match self {
            Self::Sha256 => &ring::digest::SHA256,
            Self::Sha384 => &ring::digest::SHA384,
        }
    }
}

/// The ECDHE groups shoal implements: NamedCurve secp256r1 (23) of RFC 4492 §5.1.1 and
/// x25519 (29), which RFC 8422 adds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum NamedGroup {
    /// secp256r1 (NIST P-256); points travel uncompressed, 65 bytes.
    Secp256r1 = 23,
    /// X25519; public values are 32 bytes.
    X25519 = 29,
}

impl NamedGroup {
    /// The group with this wire value, if shoal implements it.
    pub fn from_u16(v: u16) -> Option<Self> {
        match v {
            23 => Some(Self::Secp256r1),
            29 => Some(Self::X25519),
            _ => None,
        }
    }

    /// The wire value.
    pub fn to_u16(self) -> u16 {
        self as u16
    }
}

/// SRTP protection profiles of RFC 5764 §4.1.2 and RFC 7714 §14.2.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum SrtpProfile {
    /// SRTP_AES128_CM_HMAC_SHA1_80 {0x00, 0x01}: cipher_key_length 128, cipher_salt_length
    /// 112 (RFC 5764 §4.1.2). Chromium picks it whenever it is offered.
    Aes128CmHmacSha1_80 = 0x0001,
    /// SRTP_AEAD_AES_128_GCM {0x00, 0x07}: cipher_key_length 128 bits, cipher_salt_length
    /// 96 bits (RFC 7714 §14.2).
    AeadAes128Gcm = 0x0007,
    /// SRTP_AEAD_AES_256_GCM {0x00, 0x08}: a 256-bit key and the same 96-bit salt.
    AeadAes256Gcm = 0x0008,
}

impl SrtpProfile {
    /// The profile with this wire value, if shoal implements it.
    pub fn from_u16(v: u16) -> Option<Self> {
        match v {
            0x0001 => Some(Self::Aes128CmHmacSha1_80),
            0x0007 => Some(Self::AeadAes128Gcm),
            0x0008 => Some(Self::AeadAes256Gcm),
            _ => None,
        }
    }

    /// The wire value.
    pub fn to_u16(self) -> u16 {
        self as u16
    }

    /// SRTPSecurityParams.master_key_len in bytes.
    pub fn key_len(self) -> usize {
        match self {
            Self::Aes128CmHmacSha1_80 | Self::AeadAes128Gcm => 16,
            Self::AeadAes256Gcm => 32,
        }
    }

    /// SRTPSecurityParams.master_salt_len in bytes.
    pub fn salt_len(self) -> usize {
        match self {
            Self::Aes128CmHmacSha1_80 => 14,
            Self::AeadAes128Gcm | Self::AeadAes256Gcm => 12,
        }
    }
}

/// What can go wrong in the DTLS cryptography. Variants caused by peer input are
/// operating errors: the caller drops the record or aborts the handshake with the alert
/// the handshake layer chooses.
#[derive(thiserror::Error, Debug, PartialEq, Eq)]
pub enum CryptoError {
    /// AEAD authentication failed (RFC 5246 §6.2.3.3: "If the decryption fails, a fatal
    /// bad_record_mac alert MUST be generated"; the record layer decides whether DTLS
    /// drops the record instead).
    #[error("record failed authentication (bad_record_mac)")]
    BadRecordMac,
    /// A record too short to hold a header, explicit nonce and tag.
    #[error("record of {len} bytes is too short for AES-GCM protection")]
    RecordTooShort {
        /// Bytes present.
        len: usize,
    },
    /// The header's length field disagrees with the bytes handed in.
    #[error("record header says {header} bytes of fragment, {actual} present")]
    RecordLengthMismatch {
        /// The header's length field.
        header: usize,
        /// The fragment bytes actually present.
        actual: usize,
    },
    /// More plaintext than one record may carry (RFC 5246 §6.2.1, 2^14 bytes).
    #[error("record plaintext of {len} bytes exceeds 2^14")]
    RecordTooLong {
        /// The plaintext length.
        len: usize,
    },
    /// ring refused to encrypt (it does so only past its per-key limits).
    #[error("AEAD seal failed")]
    SealFailed,
    /// A key of the wrong length for the cipher.
    #[error("key of {actual} bytes where {expected} are needed")]
    BadKeyLength {
        /// Bytes the cipher needs.
        expected: usize,
        /// Bytes given.
        actual: usize,
    },
    /// Exported keying material of the wrong length for the SRTP profile.
    #[error("SRTP keying material of {actual} bytes where {expected} are needed")]
    BadSrtpMaterialLength {
        /// 2 * (key + salt) for the profile.
        expected: usize,
        /// Bytes given.
        actual: usize,
    },
    /// The peer's ECDHE public value is malformed, off the curve, or of small order.
    #[error("peer ECDHE public key rejected")]
    BadPeerPublicKey,
    /// The operating system's random number generator failed.
    #[error("random number generator failed")]
    Random,
    /// Generating an ephemeral or long-term key failed.
    #[error("key generation failed")]
    KeyGeneration,
    /// The handshake hash was asked for before the suite chose its hash function.
    #[error("handshake hash function not chosen yet")]
    TranscriptHashUnset,
    /// The handshake hash function was chosen twice, differently.
    #[error("handshake hash function already chosen as another")]
    TranscriptHashMismatch,
    /// More handshake bytes buffered before the hash was chosen than the bound allows.
    #[error("handshake transcript buffer over its bound")]
    TranscriptTooLong,
    /// rcgen could not build the self-signed certificate.
    #[error("certificate generation failed: {0}")]
    CertificateGeneration(String),
    /// The PKCS#8 private key is not an ECDSA P-256 key ring accepts.
    #[error("private key rejected")]
    BadPrivateKey,
    /// The private key does not belong to the certificate.
    #[error("private key does not match the certificate's public key")]
    KeyMismatch,
    /// The certificate could not be read as far as its public key.
    #[error("certificate: {0}")]
    Certificate(#[from] DerError),
    /// Signing failed.
    #[error("signing failed")]
    Signing,
    /// A signature did not verify.
    #[error("signature did not verify")]
    BadSignature,
}

/// Fills `out` with cryptographically secure random bytes (Hello randoms, cookie
/// secrets).
pub fn fill_random(out: &mut [u8]) -> Result<(), CryptoError> {
    SystemRandom::new()
        .fill(out)
        .map_err(|_| CryptoError::Random)
}
