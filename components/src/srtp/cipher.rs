//! The per-packet cryptography of each profile, keyed once when a context is built:
//! AES-CM with HMAC-SHA1 (RFC 3711 §4.1.1, §4.2.1) on RustCrypto, AES-GCM (RFC 7714) on
//! ring. Per packet there is no key schedule and no allocation: the AES key schedule and
//! the HMAC state after absorbing the key are kept, and each packet clones the latter.

use aes::Aes128Enc;
use aes::cipher::{InnerIvInit, KeyInit, StreamCipher, StreamCipherCoreWrapper};
use hmac::{Hmac, Mac};
use ring::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey};
use sha1::Sha1;

use super::SrtpError;
use super::kdf::SessionKeys;

/// The HMAC-SHA1-80 tag length.
pub(crate) const CM_TAG_LEN: usize = 10;

/// The GCM tag length (RFC 7714 §14.2 profiles: 16 octets).
pub(crate) const GCM_TAG_LEN: usize = 16;

/// One direction's transform for SRTP or for SRTCP.
#[allow(
    clippy::large_enum_variant,
    reason = "two per context, built once and never moved per packet; a Box would add a \
              pointer chase to every packet"
)]
pub(crate) enum Transform {
    /// SRTP_AES128_CM_HMAC_SHA1_80.
    CmHmac(CmHmac),
    /// SRTP_AEAD_AES_128_GCM and SRTP_AEAD_AES_256_GCM.
    Gcm(Gcm),
}

impl Transform {
    /// Keys the transform with one direction's session keys.
    pub(crate) fn new(keys: &SessionKeys) -> Result<Transform, SrtpError> {
        if keys.profile.is_aead() {
            Ok(Transform::Gcm(Gcm::new(keys)?))
        } else {
            Ok(Transform::CmHmac(CmHmac::new(keys)?))
        }
    }
}

/// AES-128 in counter mode and HMAC-SHA1 with an 80-bit tag.
pub(crate) struct CmHmac {
    /// Encryption round keys only: counter mode never decrypts a block.
    aes: Aes128Enc,
    /// k_s, the 112-bit session salt.
    salt: [u8; 14],
    /// The HMAC state with the session authentication key absorbed.
    mac: Hmac<Sha1>,
}

impl CmHmac {
    fn new(keys: &SessionKeys) -> Result<CmHmac, SrtpError> {
        let aes = Aes128Enc::new_from_slice(&keys.encryption_key).map_err(|_| {
            SrtpError::BadKeyLength {
                expected: 16,
                actual: keys.encryption_key.len(),
            }
        })?;
        let salt = keys
            .salt
            .as_slice()
            .try_into()
            .map_err(|_| SrtpError::BadSaltLength {
                expected: 14,
                actual: keys.salt.len(),
            })?;
        // HMAC takes keys of any length; SessionKeys already checked it is 160 bits.
        let mac = <Hmac<Sha1> as Mac>::new_from_slice(&keys.auth_key).map_err(|_| {
            SrtpError::BadKeyLength {
                expected: 20,
                actual: keys.auth_key.len(),
            }
        })?;
        Ok(CmHmac { aes, salt, mac })
    }

    /// RFC 3711 §4.1.1: `IV = (k_s * 2^16) XOR (SSRC * 2^64) XOR (i * 2^16)`, with `i`
    /// the 48-bit SRTP packet index or the 31-bit SRTCP index (§3.4).
    fn iv(&self, ssrc: u32, index: u64) -> [u8; 16] {
        let mut iv = [0u8; 16];
        iv[..14].copy_from_slice(&self.salt);
        for (b, s) in iv[4..8].iter_mut().zip(ssrc.to_be_bytes()) {
            *b ^= s;
        }
        for (b, s) in iv[8..14].iter_mut().zip(&index.to_be_bytes()[2..]) {
            *b ^= s;
        }
        iv
    }

    /// Encrypts or decrypts `data` in place (the keystream is XORed either way).
    pub(crate) fn apply_keystream(&self, ssrc: u32, index: u64, data: &mut [u8]) {
        let iv = self.iv(ssrc, index);
        // The keyed AES is borrowed, not cloned: only the counter is per packet.
        let core = ctr::CtrCore::<&Aes128Enc, ctr::flavors::Ctr128BE>::inner_iv_init(
            &self.aes,
            &iv.into(),
        );
        StreamCipherCoreWrapper::from_core(core).apply_keystream(data);
    }

    /// RFC 3711 §4.2.1: HMAC-SHA1 over the Authenticated Portion followed by `suffix`
    /// (§4.2: the ROC for SRTP; nothing for SRTCP, whose index is inside the
    /// Authenticated Portion), truncated to its leftmost 80 bits.
    pub(crate) fn tag(&self, authenticated: &[u8], suffix: &[u8]) -> [u8; CM_TAG_LEN] {
        let mut mac = self.mac.clone();
        mac.update(authenticated);
        mac.update(suffix);
        let full = mac.finalize().into_bytes();
        let mut tag = [0u8; CM_TAG_LEN];
        tag.copy_from_slice(&full[..CM_TAG_LEN]);
        tag
    }

    /// Checks `tag` against the HMAC of `authenticated || suffix` in constant time.
    pub(crate) fn verify(
        &self,
        authenticated: &[u8],
        suffix: &[u8],
        tag: &[u8],
    ) -> Result<(), SrtpError> {
        if tag.len() != CM_TAG_LEN {
            return Err(SrtpError::AuthenticationFailed);
        }
        let mut mac = self.mac.clone();
        mac.update(authenticated);
        mac.update(suffix);
        mac.verify_truncated_left(tag)
            .map_err(|_| SrtpError::AuthenticationFailed)
    }
}

/// AES-GCM with a 16-octet tag (RFC 7714).
pub(crate) struct Gcm {
    key: LessSafeKey,
    /// The 96-bit session salt.
    salt: [u8; 12],
}

impl Gcm {
    fn new(keys: &SessionKeys) -> Result<Gcm, SrtpError> {
        let algorithm = match keys.encryption_key.len() {
            16 => &aead::AES_128_GCM,
            32 => &aead::AES_256_GCM,
            n => {
                return Err(SrtpError::BadKeyLength {
                    expected: keys.profile.session_key_len(),
                    actual: n,
                });
            }
        };
        let key = UnboundKey::new(algorithm, &keys.encryption_key).map_err(|_| {
            SrtpError::BadKeyLength {
                expected: algorithm.key_len(),
                actual: keys.encryption_key.len(),
            }
        })?;
        let salt = keys
            .salt
            .as_slice()
            .try_into()
            .map_err(|_| SrtpError::BadSaltLength {
                expected: 12,
                actual: keys.salt.len(),
            })?;
        Ok(Gcm {
            key: LessSafeKey::new(key),
            salt,
        })
    }

    /// XORs the salt into a 12-octet IV block.
    fn nonce(&self, mut block: [u8; 12]) -> Nonce {
        for (b, s) in block.iter_mut().zip(self.salt) {
            *b ^= s;
        }
        Nonce::assume_unique_for_key(block)
    }

    /// RFC 7714 §8.1: `IV = (00 00 || SSRC || ROC || SEQ) XOR salt`.
    pub(crate) fn rtp_nonce(&self, ssrc: u32, roc: u32, seq: u16) -> Nonce {
        let mut block = [0u8; 12];
        block[2..6].copy_from_slice(&ssrc.to_be_bytes());
        block[6..10].copy_from_slice(&roc.to_be_bytes());
        block[10..12].copy_from_slice(&seq.to_be_bytes());
        self.nonce(block)
    }

    /// RFC 7714 §9.1: `IV = (00 00 || SSRC || 00 00 || 0 || SRTCP index) XOR salt`, the
    /// 31-bit index right-justified in 32 bits.
    pub(crate) fn rtcp_nonce(&self, ssrc: u32, index: u32) -> Nonce {
        let mut block = [0u8; 12];
        block[2..6].copy_from_slice(&ssrc.to_be_bytes());
        block[8..12].copy_from_slice(&(index & 0x7FFF_FFFF).to_be_bytes());
        self.nonce(block)
    }

    /// Encrypts `plaintext` in place and returns the tag.
    pub(crate) fn seal(
        &self,
        nonce: Nonce,
        aad: &[u8],
        plaintext: &mut [u8],
    ) -> Result<aead::Tag, SrtpError> {
        self.key
            .seal_in_place_separate_tag(nonce, Aad::from(aad), plaintext)
            .map_err(|_| SrtpError::SealFailed)
    }

    /// Authenticates and decrypts `ciphertext_and_tag` in place; the plaintext is its
    /// first `len - 16` bytes.
    pub(crate) fn open(
        &self,
        nonce: Nonce,
        aad: &[u8],
        ciphertext_and_tag: &mut [u8],
    ) -> Result<(), SrtpError> {
        self.key
            .open_in_place(nonce, Aad::from(aad), ciphertext_and_tag)
            .map(|_| ())
            .map_err(|_| SrtpError::AuthenticationFailed)
    }
}
