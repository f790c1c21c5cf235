//! AES-GCM record protection for DTLS 1.2, in place.
//!
//! A protected record on the wire (RFC 6347 §4.1 header, RFC 5246 §6.2.3.3
//! GenericAEADCipher, RFC 5288 §3 nonce):
//!
//! ```text
//! type(1) version(2) epoch(2) sequence_number(6) length(2) | nonce_explicit(8) | ciphertext | tag(16)
//! ```
//!
//! - nonce = salt(4) || nonce_explicit(8), the salt being client_write_IV or
//!   server_write_IV. RFC 5288 §3: "Each value of the nonce_explicit MUST be distinct for
//!   each distinct invocation of the GCM encrypt function for any fixed key" and "MAY be
//!   the 64-bit sequence number"; we send epoch || sequence_number, which the record
//!   layer never repeats within an epoch, and one key serves exactly one epoch.
//! - additional_data = seq_num + type + version + length (RFC 5246 §6.2.3.3), where the
//!   length is the plaintext's and, in DTLS, seq_num is "the 64-bit value formed by
//!   concatenating the epoch and the sequence number" (RFC 6347 §4.1.2.1, which states it
//!   for the MAC; AEAD suites use the same seq_num).

use std::fmt;

use bytes::BytesMut;
use ring::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey};

use super::{CipherSuite, CryptoError};

/// Bytes of the DTLS record header: type, version, epoch, sequence_number, length.
pub const RECORD_HEADER_LEN: usize = 13;
/// Bytes of GenericAEADCipher.nonce_explicit (RFC 5288 §3, record_iv_length).
pub const EXPLICIT_NONCE_LEN: usize = 8;
/// Bytes of the GCM tag (RFC 5288 §3: "a 128-bit authentication tag").
pub const AEAD_TAG_LEN: usize = 16;
/// What protection adds to a record's plaintext: explicit nonce and tag.
pub const RECORD_OVERHEAD: usize = EXPLICIT_NONCE_LEN + AEAD_TAG_LEN;
/// The most plaintext one record may carry (RFC 5246 §6.2.1: "The length MUST NOT
/// exceed 2^14").
pub const MAX_PLAINTEXT_LEN: usize = 1 << 14;

/// Where the plaintext starts inside a record.
const BODY_OFFSET: usize = RECORD_HEADER_LEN + EXPLICIT_NONCE_LEN;

/// AES-GCM protection of one direction of one epoch: built from that direction's write
/// key and write IV (the nonce salt).
pub struct RecordCipher {
    suite: CipherSuite,
    key: LessSafeKey,
    salt: [u8; 4],
}

impl RecordCipher {
    /// A cipher for `suite` from a write key of `suite.key_len()` bytes and its 4-byte
    /// implicit IV.
    pub fn new(suite: CipherSuite, key: &[u8], salt: [u8; 4]) -> Result<Self, CryptoError> {
        if key.len() != suite.key_len() {
            return Err(CryptoError::BadKeyLength {
                expected: suite.key_len(),
                actual: key.len(),
            });
        }
        let alg = match suite {
            CipherSuite::EcdheEcdsaAes128GcmSha256 => &aead::AES_128_GCM,
            CipherSuite::EcdheEcdsaAes256GcmSha384 => &aead::AES_256_GCM,
        };
        let unbound = UnboundKey::new(alg, key).map_err(|_| CryptoError::BadKeyLength {
            expected: alg.key_len(),
            actual: key.len(),
        })?;
        Ok(Self {
            suite,
            key: LessSafeKey::new(unbound),
            salt,
        })
    }

    /// The suite this cipher was built for.
    pub fn suite(&self) -> CipherSuite {
        self.suite
    }

    /// Protects the record that starts at `buf[record_start]` and runs to the end of
    /// `buf`: a 13-byte header whose type, version, epoch and sequence number are final,
    /// then [`EXPLICIT_NONCE_LEN`] bytes reserved for the explicit nonce (any content),
    /// then the plaintext. Writes the explicit nonce (epoch || sequence_number), encrypts
    /// the plaintext in place, appends the 16-byte tag and rewrites the header's length.
    ///
    /// Nothing is allocated when `buf` has [`AEAD_TAG_LEN`] bytes of spare capacity;
    /// otherwise `BytesMut` grows once. Several records may share one buffer: seal each
    /// before writing the next.
    pub fn seal_record(&self, buf: &mut BytesMut, record_start: usize) -> Result<(), CryptoError> {
        let len = buf.len();
        let record_len = len.saturating_sub(record_start);
        if record_start > len || record_len < BODY_OFFSET {
            return Err(CryptoError::RecordTooShort { len: record_len });
        }
        let plain_len = record_len - BODY_OFFSET;
        if plain_len > MAX_PLAINTEXT_LEN {
            return Err(CryptoError::RecordTooLong { len: plain_len });
        }
        let record = &mut buf[record_start..];
        let seq = seq_num(record);
        record[RECORD_HEADER_LEN..BODY_OFFSET].copy_from_slice(&seq);
        let aad = additional_data(record, &seq, plain_len);
        let nonce = self.nonce(&seq);
        let tag = self
            .key
            .seal_in_place_separate_tag(nonce, Aad::from(aad), &mut record[BODY_OFFSET..])
            .map_err(|_| CryptoError::SealFailed)?;
        buf.extend_from_slice(tag.as_ref());
        // ≤ 8 + 2^14 + 16, so it fits the u16 length field.
        let fragment_len = (plain_len + RECORD_OVERHEAD) as u16;
        buf[record_start + 11..record_start + RECORD_HEADER_LEN]
            .copy_from_slice(&fragment_len.to_be_bytes());
        Ok(())
    }

    /// Authenticates and decrypts one whole received record (header, explicit nonce,
    /// ciphertext, tag) in place. Returns the plaintext, which is always
    /// `record[RECORD_HEADER_LEN + EXPLICIT_NONCE_LEN..][..len]`. A failed tag, a changed
    /// header field or a sequence number other than the one sealed gives
    /// [`CryptoError::BadRecordMac`]; the record's bytes are then unspecified.
    pub fn open_record<'a>(&self, record: &'a mut [u8]) -> Result<&'a mut [u8], CryptoError> {
        if record.len() < BODY_OFFSET + AEAD_TAG_LEN {
            return Err(CryptoError::RecordTooShort { len: record.len() });
        }
        let fragment_len = usize::from(u16::from_be_bytes([record[11], record[12]]));
        if fragment_len != record.len() - RECORD_HEADER_LEN {
            return Err(CryptoError::RecordLengthMismatch {
                header: fragment_len,
                actual: record.len() - RECORD_HEADER_LEN,
            });
        }
        let plain_len = fragment_len - RECORD_OVERHEAD;
        if plain_len > MAX_PLAINTEXT_LEN {
            return Err(CryptoError::RecordTooLong { len: plain_len });
        }
        let seq = seq_num(record);
        let aad = additional_data(record, &seq, plain_len);
        let mut explicit = [0u8; EXPLICIT_NONCE_LEN];
        explicit.copy_from_slice(&record[RECORD_HEADER_LEN..BODY_OFFSET]);
        let nonce = self.nonce(&explicit);
        self.key
            .open_in_place(nonce, Aad::from(aad), &mut record[BODY_OFFSET..])
            .map_err(|_| CryptoError::BadRecordMac)
    }

    /// RFC 5288 §3 GCMNonce: salt[4] || nonce_explicit[8].
    fn nonce(&self, explicit: &[u8; EXPLICIT_NONCE_LEN]) -> Nonce {
        let mut n = [0u8; aead::NONCE_LEN];
        n[..4].copy_from_slice(&self.salt);
        n[4..].copy_from_slice(explicit);
        Nonce::assume_unique_for_key(n)
    }
}

impl fmt::Debug for RecordCipher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecordCipher")
            .field("suite", &self.suite)
            .finish_non_exhaustive()
    }
}

/// The header's epoch(2) || sequence_number(6). `record` holds at least the header.
fn seq_num(record: &[u8]) -> [u8; 8] {
    let mut seq = [0u8; 8];
    seq.copy_from_slice(&record[3..11]);
    seq
}

/// additional_data = seq_num(8) + type(1) + version(2) + length(2) of the plaintext.
fn additional_data(record: &[u8], seq: &[u8; 8], plain_len: usize) -> [u8; 13] {
    let mut aad = [0u8; 13];
    aad[..8].copy_from_slice(seq);
    aad[8..11].copy_from_slice(&record[..3]);
    // plain_len ≤ 2^14, checked by both callers.
    aad[11..].copy_from_slice(&(plain_len as u16).to_be_bytes());
    aad
}
