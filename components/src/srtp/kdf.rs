//! Session keys from master keys: the AES-CM PRF of RFC 3711 §4.3 (with AES-256 for
//! 256-bit master keys: the AES_256_CM_PRF of RFC 6188), and the AES counter-mode keystream it is built on
//! (RFC 3711 §4.1.1). Public so that the RFC's own test vectors can reach them; the
//! contexts call them once, when they are built, never per packet.

use std::fmt;

use aes::cipher::{KeyIvInit, StreamCipher};
use aes::{Aes128, Aes256};

use super::SrtpError;
use crate::dtls::SrtpProfile;

/// Key derivation labels (RFC 3711 §4.3.1 for SRTP, §4.3.2 for SRTCP).
pub mod label {
    /// SRTP encryption key.
    pub const RTP_ENCRYPTION: u8 = 0x00;
    /// SRTP authentication key.
    pub const RTP_AUTHENTICATION: u8 = 0x01;
    /// SRTP salting key.
    pub const RTP_SALT: u8 = 0x02;
    /// SRTCP encryption key.
    pub const RTCP_ENCRYPTION: u8 = 0x03;
    /// SRTCP authentication key.
    pub const RTCP_AUTHENTICATION: u8 = 0x04;
    /// SRTCP salting key.
    pub const RTCP_SALT: u8 = 0x05;
}

/// The master salt length the AES-CM PRF is defined over: 112 bits (RFC 3711 §4.3.1).
const PRF_SALT_LEN: usize = 14;

/// XORs `data` with the AES-CM keystream that starts at counter block `iv` (RFC 3711
/// §4.1.1: block j is E(k, IV + j mod 2^128), a 128-bit big-endian counter), under a
/// 128- or 256-bit `key`.
pub fn aes_cm_apply_keystream(key: &[u8], iv: &[u8; 16], data: &mut [u8]) -> Result<(), SrtpError> {
    match key.len() {
        16 => ctr::Ctr128BE::<Aes128>::new_from_slices(key, iv)
            .map_err(|_| bad_key(16, key.len()))?
            .apply_keystream(data),
        32 => ctr::Ctr128BE::<Aes256>::new_from_slices(key, iv)
            .map_err(|_| bad_key(32, key.len()))?
            .apply_keystream(data),
        n => return Err(bad_key(16, n)),
    }
    Ok(())
}

/// The AES-CM PRF with a key derivation rate of zero (RFC 3711 §4.3.1, §4.3.3): fills
/// `out` with `PRF_n(k_master, x)`, the AES-CM keystream under the master key from
/// counter `x * 2^16`, where `x = (label || r) XOR master_salt` and `r = index DIV kdr`
/// is zero. DTLS-SRTP signals no key derivation rate, so RFC 3711 §8.2's default of
/// zero applies and keys are derived once per context.
///
/// `master_salt` is 14 bytes for AES-CM profiles. For the AEAD profiles it is 12 bytes
/// and is multiplied by 2^16 into the 112-bit salt the PRF takes (RFC 7714 §11 as
/// corrected by verified erratum 4938): padded with two zero bytes on the right. A
/// 32-byte master key runs the PRF on AES-256 (RFC 6188's AES_256_CM_PRF, which RFC 7714 §11 names
/// for AEAD_AES_256_GCM).
pub fn aes_cm_prf(
    master_key: &[u8],
    master_salt: &[u8],
    label: u8,
    out: &mut [u8],
) -> Result<(), SrtpError> {
    if master_salt.len() != PRF_SALT_LEN && master_salt.len() != 12 {
        return Err(SrtpError::BadSaltLength {
            expected: PRF_SALT_LEN,
            actual: master_salt.len(),
        });
    }
    // x is 112 bits; key_id = label || r (8 + 48 bits) is right-aligned against the
    // salt, so the label lands in byte 7 of x; the last two bytes of the counter block
    // are the * 2^16.
    let mut iv = [0u8; 16];
    iv[..master_salt.len()].copy_from_slice(master_salt);
    iv[7] ^= label;
    out.fill(0);
    aes_cm_apply_keystream(master_key, &iv, out)
}

/// One direction's session keys for SRTP or for SRTCP (RFC 3711 §4.3): the encryption
/// key, the salt, and (AES-CM only) the HMAC-SHA1 key. Its `Debug` never shows key
/// bytes.
#[derive(Clone, PartialEq, Eq)]
pub struct SessionKeys {
    pub(crate) profile: SrtpProfile,
    pub(crate) encryption_key: Vec<u8>,
    pub(crate) salt: Vec<u8>,
    pub(crate) auth_key: Vec<u8>,
}

impl SessionKeys {
    /// Session keys given directly (RFC 7714 §16 states its test vectors this way),
    /// checked against the profile's lengths.
    pub fn new(
        profile: SrtpProfile,
        encryption_key: &[u8],
        salt: &[u8],
        auth_key: &[u8],
    ) -> Result<SessionKeys, SrtpError> {
        if encryption_key.len() != profile.session_key_len() {
            return Err(bad_key(profile.session_key_len(), encryption_key.len()));
        }
        if salt.len() != profile.session_salt_len() {
            return Err(SrtpError::BadSaltLength {
                expected: profile.session_salt_len(),
                actual: salt.len(),
            });
        }
        if auth_key.len() != profile.session_auth_key_len() {
            return Err(bad_key(profile.session_auth_key_len(), auth_key.len()));
        }
        Ok(SessionKeys {
            profile,
            encryption_key: encryption_key.to_vec(),
            salt: salt.to_vec(),
            auth_key: auth_key.to_vec(),
        })
    }

    /// Derives the SRTP (`rtcp` false: labels 0, 1, 2) or SRTCP (`rtcp` true: labels
    /// 3, 4, 5) session keys from one sender's master key and salt (RFC 3711 §4.3.1,
    /// §4.3.2).
    pub fn derive(
        profile: SrtpProfile,
        master_key: &[u8],
        master_salt: &[u8],
        rtcp: bool,
    ) -> Result<SessionKeys, SrtpError> {
        if master_key.len() != profile.key_len() {
            return Err(bad_key(profile.key_len(), master_key.len()));
        }
        if master_salt.len() != profile.salt_len() {
            return Err(SrtpError::BadSaltLength {
                expected: profile.salt_len(),
                actual: master_salt.len(),
            });
        }
        let (enc, auth, salt) = if rtcp {
            (
                label::RTCP_ENCRYPTION,
                label::RTCP_AUTHENTICATION,
                label::RTCP_SALT,
            )
        } else {
            (
                label::RTP_ENCRYPTION,
                label::RTP_AUTHENTICATION,
                label::RTP_SALT,
            )
        };
        let mut keys = SessionKeys {
            profile,
            encryption_key: vec![0; profile.session_key_len()],
            salt: vec![0; profile.session_salt_len()],
            auth_key: vec![0; profile.session_auth_key_len()],
        };
        aes_cm_prf(master_key, master_salt, enc, &mut keys.encryption_key)?;
        aes_cm_prf(master_key, master_salt, salt, &mut keys.salt)?;
        if !keys.auth_key.is_empty() {
            aes_cm_prf(master_key, master_salt, auth, &mut keys.auth_key)?;
        }
        Ok(keys)
    }

    /// The profile these keys are for.
    pub fn profile(&self) -> SrtpProfile {
        self.profile
    }
}

impl fmt::Debug for SessionKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionKeys")
            .field("profile", &self.profile)
            .finish_non_exhaustive()
    }
}

fn bad_key(expected: usize, actual: usize) -> SrtpError {
    SrtpError::BadKeyLength { expected, actual }
}
