//! Ephemeral ECDH (the "E" of ECDHE_ECDSA) with `ring::agreement`.
//!
//! RFC 4492 §5.10: "the premaster secret is the x-coordinate of the ECDH shared secret
//! elliptic curve point represented as an octet string ... leading zeros found in this
//! octet string MUST NOT be truncated"; ring returns exactly that for P-256, and the
//! 32-byte X25519 output for X25519.

use std::fmt;

use ring::agreement::{self, EphemeralPrivateKey, PublicKey, UnparsedPublicKey};
use ring::rand::SystemRandom;

use super::{CryptoError, NamedGroup};

/// An ephemeral key pair for one handshake; [`EphemeralKey::agree`] consumes it.
pub struct EphemeralKey {
    group: NamedGroup,
    private: EphemeralPrivateKey,
    public: PublicKey,
}

impl EphemeralKey {
    /// A fresh key pair on `group`.
    pub fn generate(group: NamedGroup) -> Result<Self, CryptoError> {
        let rng = SystemRandom::new();
        let private = EphemeralPrivateKey::generate(algorithm(group), &rng)
            .map_err(|_| CryptoError::KeyGeneration)?;
        let public = private
            .compute_public_key()
            .map_err(|_| CryptoError::KeyGeneration)?;
        Ok(Self {
            group,
            private,
            public,
        })
    }

    /// The group this key lives on.
    pub fn group(&self) -> NamedGroup {
        self.group
    }

    /// The public value as the ECPoint of ServerKeyExchange / ClientKeyExchange carries
    /// it (without its length prefix): 32 bytes for X25519, the 65-byte uncompressed
    /// point 0x04 || X || Y for P-256.
    pub fn public_key(&self) -> &[u8] {
        self.public.as_ref()
    }

    /// The pre-master secret shared with the owner of `peer_public`. Rejects a value of
    /// the wrong length, a P-256 point that is compressed or not on the curve (ring
    /// validates the point), and an X25519 value of small order, whose shared secret is
    /// the "all-zero value" of RFC 7748 §6.1 (ring refuses it; the check here keeps the
    /// rule visible).
    pub fn agree(self, peer_public: &[u8]) -> Result<Vec<u8>, CryptoError> {
        let well_formed = match self.group {
            NamedGroup::X25519 => peer_public.len() == 32,
            // Uncompressed only: RFC 4492 §5.1.2 makes it the one format every
            // implementation "MUST support"; compressed ones are a MAY we do not offer.
            NamedGroup::Secp256r1 => peer_public.len() == 65 && peer_public.first() == Some(&4),
        };
        if !well_formed {
            return Err(CryptoError::BadPeerPublicKey);
        }
        let peer = UnparsedPublicKey::new(algorithm(self.group), peer_public);
        let secret = agreement::agree_ephemeral(self.private, &peer, |z| z.to_vec())
            .map_err(|_| CryptoError::BadPeerPublicKey)?;
        if secret.iter().all(|&b| b == 0) {
            return Err(CryptoError::BadPeerPublicKey);
        }
        Ok(secret)
    }
}

impl fmt::Debug for EphemeralKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EphemeralKey")
            .field("group", &self.group)
            .finish_non_exhaustive()
    }
}

fn algorithm(group: NamedGroup) -> &'static agreement::Algorithm {
    match group {
        NamedGroup::X25519 => &agreement::X25519,
        NamedGroup::Secp256r1 => &agreement::ECDH_P256,
    }
}
