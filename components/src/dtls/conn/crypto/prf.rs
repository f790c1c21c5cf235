//! The TLS 1.2 PRF (RFC 5246 §5) and every secret DTLS 1.2 and DTLS-SRTP derive from it.

use std::fmt;

use ring::hmac;

use super::{CipherSuite, CryptoError, PrfHash, SrtpProfile};

/// RFC 5246 §5 P_hash PRF: `PRF(secret, label, seed) = P_<hash>(secret, label + seed)`,
/// filling all of `out`.
///
/// ```text
/// P_hash(secret, seed) = HMAC_hash(secret, A(1) + seed) +
///                        HMAC_hash(secret, A(2) + seed) + ...
/// A(0) = seed
/// A(i) = HMAC_hash(secret, A(i-1))
/// ```
pub fn prf(hash: PrfHash, secret: &[u8], label: &[u8], seed: &[u8], out: &mut [u8]) {
    prf_parts(hash, secret, label, &[seed], out);
}

/// The PRF with its seed given in parts (`client_random + server_random` and the like),
/// so that no caller concatenates into a temporary buffer.
fn prf_parts(hash: PrfHash, secret: &[u8], label: &[u8], seed: &[&[u8]], out: &mut [u8]) {
    let key = hmac::Key::new(hash.hmac(), secret);
    // "label + seed" is the P_hash seed; A(1) = HMAC(secret, A(0)).
    let mut ctx = hmac::Context::with_key(&key);
    ctx.update(label);
    for part in seed {
        ctx.update(part);
    }
    let mut a = ctx.sign();

    let mut filled = 0;
    while filled < out.len() {
        let mut ctx = hmac::Context::with_key(&key);
        ctx.update(a.as_ref());
        ctx.update(label);
        for part in seed {
            ctx.update(part);
        }
        let block = ctx.sign();
        let n = block.as_ref().len().min(out.len() - filled);
        out[filled..filled + n].copy_from_slice(&block.as_ref()[..n]);
        filled += n;
        if filled < out.len() {
            a = hmac::sign(&key, a.as_ref());
        }
    }
}

/// RFC 5246 §8.1 master secret (classic):
/// `PRF(pre_master_secret, "master secret", ClientHello.random + ServerHello.random)[0..47]`.
pub fn master_secret(
    hash: PrfHash,
    pre_master: &[u8],
    client_random: &[u8; 32],
    server_random: &[u8; 32],
) -> [u8; 48] {
    let mut out = [0u8; 48];
    prf_parts(
        hash,
        pre_master,
        b"master secret",
        &[client_random, server_random],
        &mut out,
    );
    out
}

/// RFC 7627 §4 extended master secret:
/// `PRF(pre_master_secret, "extended master secret", session_hash)[0..47]`, where
/// `session_hash` is (§3) the hash of "all handshake messages sent or received, starting
/// at the ClientHello up to and including the ClientKeyExchange message".
pub fn extended_master_secret(hash: PrfHash, pre_master: &[u8], session_hash: &[u8]) -> [u8; 48] {
    let mut out = [0u8; 48];
    prf(
        hash,
        pre_master,
        b"extended master secret",
        session_hash,
        &mut out,
    );
    out
}

/// RFC 5246 §7.4.9 verify_data (12 bytes):
/// `PRF(master_secret, finished_label, Hash(handshake_messages))[0..11]`, with
/// `label` "client finished" or "server finished".
pub fn verify_data(
    hash: PrfHash,
    master: &[u8; 48],
    label: &[u8],
    handshake_hash: &[u8],
) -> [u8; 12] {
    let mut out = [0u8; 12];
    prf(hash, master, label, handshake_hash, &mut out);
    out
}

/// RFC 5705 §4 exporter without context (what DTLS-SRTP uses):
/// `PRF(SecurityParameters.master_secret, label, SecurityParameters.client_random +
/// SecurityParameters.server_random)[length]`, `length` being `out.len()`.
pub fn export_keying_material(
    hash: PrfHash,
    master: &[u8; 48],
    label: &[u8],
    client_random: &[u8; 32],
    server_random: &[u8; 32],
    out: &mut [u8],
) {
    prf_parts(hash, master, label, &[client_random, server_random], out);
}

/// The four SRTP master keys and salts of RFC 5764 §4.2. Its `Debug` shows the profile
/// and lengths, never key bytes.
#[derive(Clone, PartialEq, Eq)]
pub struct SrtpKeys {
    /// The negotiated protection profile.
    pub profile: SrtpProfile,
    /// client_write_SRTP_master_key: protects what the DTLS client sends.
    pub client_key: Vec<u8>,
    /// client_write_SRTP_master_salt.
    pub client_salt: Vec<u8>,
    /// server_write_SRTP_master_key: protects what the DTLS server sends.
    pub server_key: Vec<u8>,
    /// server_write_SRTP_master_salt.
    pub server_salt: Vec<u8>,
}

impl SrtpKeys {
    /// The exporter label of RFC 5764 §4.2.
    pub const EXPORTER_LABEL: &'static [u8] = b"EXTRACTOR-dtls_srtp";

    /// RFC 5764 §4.2: the exporter generates "2 * (SRTPSecurityParams.master_key_len +
    /// SRTPSecurityParams.master_salt_len) bytes of data".
    pub fn exported_len(profile: SrtpProfile) -> usize {
        2 * (profile.key_len() + profile.salt_len())
    }

    /// Splits EXTRACTOR-dtls_srtp output in the order RFC 5764 §4.2 assigns it:
    /// client key, server key, client salt, server salt.
    pub fn from_exported(profile: SrtpProfile, material: &[u8]) -> Result<SrtpKeys, CryptoError> {
        let expected = Self::exported_len(profile);
        if material.len() != expected {
            return Err(CryptoError::BadSrtpMaterialLength {
                expected,
                actual: material.len(),
            });
        }
        let (client_key, rest) = material.split_at(profile.key_len());
        let (server_key, rest) = rest.split_at(profile.key_len());
        let (client_salt, server_salt) = rest.split_at(profile.salt_len());
        Ok(SrtpKeys {
            profile,
            client_key: client_key.to_vec(),
            client_salt: client_salt.to_vec(),
            server_key: server_key.to_vec(),
            server_salt: server_salt.to_vec(),
        })
    }

    /// Runs the exporter with the EXTRACTOR-dtls_srtp label and an empty context (RFC 5764
    /// §4.2: "The per-association context value is empty") and splits its output.
    pub fn derive(
        hash: PrfHash,
        profile: SrtpProfile,
        master: &[u8; 48],
        client_random: &[u8; 32],
        server_random: &[u8; 32],
    ) -> SrtpKeys {
        // 2 * (32 + 12) = 88 bytes is the most any supported profile needs.
        let mut material = [0u8; 88];
        let len = Self::exported_len(profile);
        let out = &mut material[..len];
        export_keying_material(
            hash,
            master,
            Self::EXPORTER_LABEL,
            client_random,
            server_random,
            out,
        );
        let (client_key, rest) = out.split_at(profile.key_len());
        let (server_key, rest) = rest.split_at(profile.key_len());
        let (client_salt, server_salt) = rest.split_at(profile.salt_len());
        SrtpKeys {
            profile,
            client_key: client_key.to_vec(),
            client_salt: client_salt.to_vec(),
            server_key: server_key.to_vec(),
            server_salt: server_salt.to_vec(),
        }
    }
}

impl fmt::Debug for SrtpKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SrtpKeys")
            .field("profile", &self.profile)
            .field("key_len", &self.client_key.len())
            .field("salt_len", &self.client_salt.len())
            .finish_non_exhaustive()
    }
}

/// RFC 5246 §6.3 key block for AEAD suites: the write keys and the 4-byte implicit IVs,
/// which RFC 5288 §3 uses as the GCM nonce salt ("it is either the client_write_IV
/// (when the client is sending) or the server_write_IV"). AEAD suites have no MAC keys.
/// Its `Debug` never shows key bytes.
#[derive(Clone, PartialEq, Eq)]
pub struct KeyBlock {
    /// client_write_key.
    pub client_write_key: Vec<u8>,
    /// server_write_key.
    pub server_write_key: Vec<u8>,
    /// client_write_IV (the salt of the client's GCM nonces).
    pub client_write_iv: [u8; 4],
    /// server_write_IV.
    pub server_write_iv: [u8; 4],
}

impl fmt::Debug for KeyBlock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyBlock")
            .field("key_len", &self.client_write_key.len())
            .finish_non_exhaustive()
    }
}

/// RFC 5246 §6.3: `key_block = PRF(master_secret, "key expansion", server_random +
/// client_random)`, partitioned client_write_MAC_key, server_write_MAC_key (both empty
/// for AEAD), client_write_key, server_write_key, client_write_IV, server_write_IV.
/// Note the seed order: server random first, unlike the master secret.
pub fn key_block(
    suite: CipherSuite,
    master: &[u8; 48],
    client_random: &[u8; 32],
    server_random: &[u8; 32],
) -> KeyBlock {
    // 2 * 32 + 2 * 4 = 72 bytes is the most any supported suite needs.
    let mut block = [0u8; 72];
    let key_len = suite.key_len();
    let out = &mut block[..2 * key_len + 2 * 4];
    prf_parts(
        suite.prf_hash(),
        master,
        b"key expansion",
        &[server_random, client_random],
        out,
    );
    let (client_write_key, rest) = out.split_at(key_len);
    let (server_write_key, rest) = rest.split_at(key_len);
    let mut client_write_iv = [0u8; 4];
    let mut server_write_iv = [0u8; 4];
    client_write_iv.copy_from_slice(&rest[..4]);
    server_write_iv.copy_from_slice(&rest[4..8]);
    KeyBlock {
        client_write_key: client_write_key.to_vec(),
        server_write_key: server_write_key.to_vec(),
        client_write_iv,
        server_write_iv,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The PRF in parts equals the PRF over the concatenation, at every length across
    /// block boundaries.
    #[test]
    fn parts_equal_concatenation() {
        for hash in [PrfHash::Sha256, PrfHash::Sha384] {
            for len in [0usize, 1, 31, 32, 33, 47, 48, 49, 97, 150] {
                let mut a = vec![0u8; len];
                let mut b = vec![0u8; len];
                prf_parts(hash, b"secret", b"label", &[b"ab", b"", b"cd"], &mut a);
                prf(hash, b"secret", b"label", b"abcd", &mut b);
                assert_eq!(a, b);
            }
        }
    }

    /// A longer output starts with the shorter one (P_hash is a stream).
    #[test]
    fn prefix_property() {
        let mut long = [0u8; 100];
        let mut short = [0u8; 40];
        prf(PrfHash::Sha384, b"k", b"l", b"s", &mut long);
        prf(PrfHash::Sha384, b"k", b"l", b"s", &mut short);
        assert_eq!(&long[..40], &short[..]);
    }

    #[test]
    fn srtp_split_rejects_wrong_length() {
        let err = SrtpKeys::from_exported(SrtpProfile::AeadAes128Gcm, &[0u8; 10]);
        assert_eq!(
            err,
            Err(CryptoError::BadSrtpMaterialLength {
                expected: 56,
                actual: 10
            })
        );
    }

    #[test]
    fn debug_hides_keys() {
        let keys = SrtpKeys::from_exported(SrtpProfile::Aes128CmHmacSha1_80, &[0xAB; 60]);
        let text = format!("{keys:?}");
        assert!(!text.contains("171"), "{text}");
        assert!(!text.to_lowercase().contains("ab, "), "{text}");
        let kb = key_block(
            CipherSuite::EcdheEcdsaAes128GcmSha256,
            &[7; 48],
            &[1; 32],
            &[2; 32],
        );
        assert!(!format!("{kb:?}").contains('['));
    }
}
