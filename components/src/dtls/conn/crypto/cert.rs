//! Our DTLS certificate (ECDSA P-256, self-signed, as browsers make theirs) and ECDSA
//! signature checks with the peer's key.
//!
//! TLS 1.2 signs with SignatureAndHashAlgorithm {sha256(4), ecdsa(3)} (RFC 5246
//! §7.4.1.4.1; 0x0403). RFC 4492 §5.8: "an ECDSA signature consists of a pair of
//! integers, r and s", encoded as "the DER encoding ... Ecdsa-Sig-Value ::= SEQUENCE {
//! r INTEGER, s INTEGER }", which is ring's `*_ASN1` form.

use std::fmt;

use ring::digest;
use ring::rand::SystemRandom;
use ring::signature::{self, EcdsaKeyPair, KeyPair, UnparsedPublicKey};

use super::CryptoError;
use super::der::peer_public_key;

/// Our certificate and its private key. The certificate is what the Certificate message
/// carries; its SHA-256 fingerprint is what our SDP's `a=fingerprint` announces. `Debug`
/// shows the fingerprint only.
pub struct DtlsCertificate {
    der: Vec<u8>,
    key: EcdsaKeyPair,
    fingerprint: [u8; 32],
    rng: SystemRandom,
}

impl DtlsCertificate {
    /// A fresh ECDSA P-256 key and a self-signed certificate for it, made by rcgen on
    /// ring. Subject CN "shoal"; rcgen's default validity (1975 to 4096), so no clock is
    /// read: WebRTC peers trust the certificate by fingerprint, not by dates.
    pub fn generate() -> Result<Self, CryptoError> {
        let gen_err = |e: rcgen::Error| CryptoError::CertificateGeneration(e.to_string());
        let key_pair =
            rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(gen_err)?;
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).map_err(gen_err)?;
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "shoal");
        let cert = params.self_signed(&key_pair).map_err(gen_err)?;
        Self::from_der(cert.der().to_vec(), &key_pair.serialize_der())
    }

    /// A certificate loaded from DER, with its private key as unencrypted PKCS#8 v1 DER
    /// whose ECPrivateKey includes the public key (what `openssl pkcs8 -topk8 -nocrypt
    /// -outform DER` and rcgen write; ring requires it). The key must be ECDSA P-256 and
    /// must be the certificate's.
    pub fn from_der(cert_der: Vec<u8>, pkcs8_key_der: &[u8]) -> Result<Self, CryptoError> {
        let rng = SystemRandom::new();
        let key = EcdsaKeyPair::from_pkcs8(
            &signature::ECDSA_P256_SHA256_ASN1_SIGNING,
            pkcs8_key_der,
            &rng,
        )
        .map_err(|_| CryptoError::BadPrivateKey)?;
        let cert_point = peer_public_key(&cert_der)?;
        if cert_point.as_slice() != key.public_key().as_ref() {
            return Err(CryptoError::KeyMismatch);
        }
        let fingerprint = fingerprint_sha256(&cert_der);
        Ok(Self {
            der: cert_der,
            key,
            fingerprint,
            rng,
        })
    }

    /// The DER certificate.
    pub fn der(&self) -> &[u8] {
        &self.der
    }

    /// SHA-256 of the DER certificate, as a=fingerprint carries it (RFC 8122 §5).
    pub fn fingerprint_sha256(&self) -> [u8; 32] {
        self.fingerprint
    }

    /// The uncompressed P-256 public point (65 bytes).
    pub fn public_key(&self) -> &[u8] {
        self.key.public_key().as_ref()
    }

    /// ECDSA P-256 SHA-256 signature in ASN.1 DER form (TLS 1.2 signature_algorithms
    /// ecdsa_secp256r1_sha256 = 0x0403). ring hashes `message` itself.
    pub fn sign(&self, message: &[u8]) -> Result<Vec<u8>, CryptoError> {
        self.key
            .sign(&self.rng, message)
            .map(|sig| sig.as_ref().to_vec())
            .map_err(|_| CryptoError::Signing)
    }
}

impl fmt::Debug for DtlsCertificate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DtlsCertificate {{ sha-256 ")?;
        for (i, b) in self.fingerprint.iter().enumerate() {
            let sep = if i == 0 { "" } else { ":" };
            write!(f, "{sep}{b:02X}")?;
        }
        write!(f, " }}")
    }
}

/// SHA-256 of a DER certificate. RFC 8122 §5: "A certificate fingerprint is a secure
/// one-way hash of the Distinguished Encoding Rules (DER) form of the certificate."
pub fn fingerprint_sha256(cert_der: &[u8]) -> [u8; 32] {
    let d = digest::digest(&digest::SHA256, cert_der);
    let mut out = [0u8; 32];
    out.copy_from_slice(d.as_ref());
    out
}

/// Verifies an ECDSA P-256 SHA-256 ASN.1 signature (scheme 0x0403) with
/// `ring::signature::ECDSA_P256_SHA256_ASN1`; `public_key` is the uncompressed point
/// [`super::peer_public_key`] returns.
pub fn verify_ecdsa_p256_sha256(
    public_key: &[u8],
    message: &[u8],
    signature: &[u8],
) -> Result<(), CryptoError> {
    UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_ASN1, public_key)
        .verify(message, signature)
        .map_err(|_| CryptoError::BadSignature)
}

/// Verifies an ECDSA P-384 SHA-384 ASN.1 signature (scheme 0x0503, {sha384(5),
/// ecdsa(3)}), for peers whose certificate key is on P-384
/// ([`super::peer_public_key_with_curve`]).
pub fn verify_ecdsa_p384_sha384(
    public_key: &[u8],
    message: &[u8],
    signature: &[u8],
) -> Result<(), CryptoError> {
    UnparsedPublicKey::new(&signature::ECDSA_P384_SHA384_ASN1, public_key)
        .verify(message, signature)
        .map_err(|_| CryptoError::BadSignature)
}
