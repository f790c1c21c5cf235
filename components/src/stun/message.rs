//! A parsed STUN message: the received bytes plus an inline table of attribute offsets.

use std::fmt;
use std::net::SocketAddr;

use bytes::Bytes;
use ring::hmac;

use super::attr;
use super::{
    Class, HEADER_LEN, MAGIC_COOKIE, MAX_ATTRIBUTES, MAX_UNKNOWN, StunError, TransactionId,
    method_from_type,
};

/// Where one kept attribute's value sits in the message.
#[derive(Clone, Copy, Default)]
struct AttrRef {
    typ: u16,
    len: u16,
    /// Offset of the value from the start of the message (a message can be 20 + 65535
    /// bytes, so this does not fit in a u16).
    value_at: u32,
}

impl fmt::Debug for AttrRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#06x}/{}", self.typ, self.len)
    }
}

impl AttrRef {
    fn header_at(&self) -> usize {
        self.value_at as usize - 4
    }
}

/// Which attributes are still processed after an integrity attribute.
#[derive(Clone, Copy, PartialEq, Eq)]
enum After {
    /// No integrity attribute yet: everything is processed.
    Open,
    /// RFC 8489 §14.5: after MESSAGE-INTEGRITY only MESSAGE-INTEGRITY-SHA256 and
    /// FINGERPRINT are processed.
    Integrity,
    /// RFC 8489 §14.6: after MESSAGE-INTEGRITY-SHA256 only FINGERPRINT is processed.
    IntegritySha256,
}

/// A parsed STUN message. Cheap to clone (Bytes inside).
#[derive(Clone)]
pub struct StunMessage {
    raw: Bytes,
    attrs: [AttrRef; MAX_ATTRIBUTES],
    attr_count: u8,
    unknown: [u16; MAX_UNKNOWN],
    unknown_count: u8,
    /// Index in `attrs` of MESSAGE-INTEGRITY, if present before any ignored region.
    integrity: Option<u8>,
    /// Index in `attrs` of MESSAGE-INTEGRITY-SHA256.
    integrity_sha256: Option<u8>,
    fingerprint: bool,
}

impl StunMessage {
    /// RFC 8489 §5/§6.3 header checks + attribute walk; if FINGERPRINT is present it is
    /// verified here (§14.7) and a mismatch is Err(StunError::BadFingerprint). Attributes
    /// after MESSAGE-INTEGRITY other than MESSAGE-INTEGRITY-SHA256 and FINGERPRINT are
    /// ignored per §14.5/§14.6. Does NOT reject unknown comprehension-required attributes:
    /// see unknown_comprehension_required().
    ///
    /// The datagram must hold exactly one message. Known attributes with a malformed value
    /// give [`StunError::BadAttribute`]. The method is not checked: the caller decides
    /// which methods it supports (§6.3).
    pub fn parse(buf: Bytes) -> Result<StunMessage, StunError> {
        let header = buf.get(..HEADER_LEN).ok_or(StunError::Truncated)?;
        let word = |i: usize| u16::from_be_bytes([header[i], header[i + 1]]);
        let (typ, length) = (word(0), word(2));
        // RFC 8489 §5: "The most significant 2 bits of every STUN message MUST be zeroes."
        // and "The Magic Cookie field MUST contain the fixed value 0x2112A442".
        if typ & 0xC000 != 0 || header[4..8] != MAGIC_COOKIE.to_be_bytes() {
            return Err(StunError::NotStun);
        }
        // RFC 8489 §5: the length excludes the header, and since attributes are padded to
        // 4 bytes "the last 2 bits of this field are always zero".
        if length % 4 != 0 {
            return Err(StunError::BadLength { length });
        }
        let end = HEADER_LEN + usize::from(length);
        if buf.len() < end {
            return Err(StunError::Truncated);
        }
        if buf.len() > end {
            return Err(StunError::BadLength { length });
        }
        // The walk borrows `buf` while it fills the tables; the message takes it after.
        let mut msg = StunMessage {
            raw: Bytes::new(),
            attrs: [AttrRef::default(); MAX_ATTRIBUTES],
            attr_count: 0,
            unknown: [0; MAX_UNKNOWN],
            unknown_count: 0,
            integrity: None,
            integrity_sha256: None,
            fingerprint: false,
        };
        msg.walk_attributes(&buf)?;
        msg.raw = buf;
        Ok(msg)
    }

    /// RFC 8489 §14: walks the type-length-value attributes, each padded to 4 bytes.
    /// Bounded by the message length: at most 65535 / 4 steps.
    fn walk_attributes(&mut self, buf: &[u8]) -> Result<(), StunError> {
        let end = buf.len();
        let mut after = After::Open;
        let mut at = HEADER_LEN;
        while at < end {
            let head = buf.get(at..at + 4).ok_or(StunError::Truncated)?;
            let typ = u16::from_be_bytes([head[0], head[1]]);
            let len = u16::from_be_bytes([head[2], head[3]]);
            let value_at = at + 4;
            let value = buf
                .get(value_at..value_at + usize::from(len))
                .ok_or(StunError::AttributeOverrun { typ })?;
            // RFC 8489 §14: the value is padded to a multiple of 4 bytes.
            let next = value_at + usize::from(len).div_ceil(4) * 4;
            if next > end {
                return Err(StunError::AttributeOverrun { typ });
            }
            // RFC 8489 §14.7: "When present, the FINGERPRINT attribute MUST be the last
            // attribute in the message".
            if self.fingerprint {
                return Err(StunError::FingerprintNotLast);
            }
            let keep = matches!(
                (after, typ),
                (_, attr::FINGERPRINT)
                    | (After::Open, _)
                    | (After::Integrity, attr::MESSAGE_INTEGRITY_SHA256)
            );
            if keep {
                if !attr::value_ok(typ, value) {
                    return Err(StunError::BadAttribute { typ });
                }
                if typ == attr::FINGERPRINT {
                    check_fingerprint(buf, at, value)?;
                    self.fingerprint = true;
                }
                let index = self.push(typ, len, value_at)?;
                match typ {
                    attr::MESSAGE_INTEGRITY => {
                        self.integrity = Some(index);
                        after = After::Integrity;
                    }
                    attr::MESSAGE_INTEGRITY_SHA256 => {
                        self.integrity_sha256 = Some(index);
                        after = After::IntegritySha256;
                    }
                    _ => {}
                }
                if attr::is_comprehension_required(typ) && !attr::is_known(typ) {
                    self.note_unknown(typ);
                }
            }
            at = next;
        }
        Ok(())
    }

    /// Records one kept attribute; returns its index.
    fn push(&mut self, typ: u16, len: u16, value_at: usize) -> Result<u8, StunError> {
        let index = self.attr_count;
        let slot = self
            .attrs
            .get_mut(usize::from(index))
            .ok_or(StunError::TooManyAttributes)?;
        // value_at <= 20 + 65535, so it fits in a u32.
        *slot = AttrRef {
            typ,
            len,
            value_at: value_at as u32,
        };
        self.attr_count += 1;
        Ok(index)
    }

    /// Remembers an unknown comprehension-required type, once, while there is room.
    fn note_unknown(&mut self, typ: u16) {
        if self.unknown_comprehension_required().contains(&typ) {
            return;
        }
        if let Some(slot) = self.unknown.get_mut(usize::from(self.unknown_count)) {
            *slot = typ;
            self.unknown_count += 1;
        }
    }

    fn kept(&self) -> &[AttrRef] {
        &self.attrs[..usize::from(self.attr_count)]
    }

    fn value(&self, a: &AttrRef) -> &[u8] {
        let start = a.value_at as usize;
        // Offsets were checked against the buffer in parse; an empty slice is unreachable.
        self.raw
            .get(start..start + usize::from(a.len))
            .unwrap_or_default()
    }

    /// The message class (RFC 8489 §5).
    pub fn class(&self) -> Class {
        Class::from_type(self.message_type())
    }

    /// The 12-bit method (RFC 8489 §5), e.g. [`super::BINDING`].
    pub fn method(&self) -> u16 {
        method_from_type(self.message_type())
    }

    fn message_type(&self) -> u16 {
        u16::from_be_bytes([self.raw[0], self.raw[1]])
    }

    /// The transaction ID (RFC 8489 §5).
    pub fn transaction_id(&self) -> TransactionId {
        let mut tid = [0u8; 12];
        tid.copy_from_slice(&self.raw[8..HEADER_LEN]);
        TransactionId(tid)
    }

    /// The whole message as received.
    pub fn raw(&self) -> &Bytes {
        &self.raw
    }

    /// The value of the first occurrence of an attribute type (RFC 8489 §14: only the
    /// first needs to be processed). Ignored attributes (after an integrity attribute)
    /// are not found.
    pub fn attribute(&self, typ: u16) -> Option<&[u8]> {
        let a = self.kept().iter().find(|a| a.typ == typ)?;
        Some(self.value(a))
    }

    /// Every kept attribute in order, as (type, value).
    pub fn attributes(&self) -> impl Iterator<Item = (u16, &[u8])> {
        self.kept().iter().map(|a| (a.typ, self.value(a)))
    }

    /// USERNAME (RFC 8489 §14.3), as raw bytes.
    pub fn username(&self) -> Option<&[u8]> {
        self.attribute(attr::USERNAME)
    }

    /// PRIORITY (RFC 8445 §7.1.1).
    pub fn priority(&self) -> Option<u32> {
        attr::be_u32(self.attribute(attr::PRIORITY)?)
    }

    /// Whether USE-CANDIDATE is present (RFC 8445 §7.1.2).
    pub fn use_candidate(&self) -> bool {
        self.attribute(attr::USE_CANDIDATE).is_some()
    }

    /// The ICE-CONTROLLING tie-breaker (RFC 8445 §7.1.3).
    pub fn ice_controlling(&self) -> Option<u64> {
        attr::be_u64(self.attribute(attr::ICE_CONTROLLING)?)
    }

    /// The ICE-CONTROLLED tie-breaker (RFC 8445 §7.1.3).
    pub fn ice_controlled(&self) -> Option<u64> {
        attr::be_u64(self.attribute(attr::ICE_CONTROLLED)?)
    }

    /// XOR-MAPPED-ADDRESS, IPv4 or IPv6 (RFC 8489 §14.2).
    pub fn xor_mapped_address(&self) -> Option<SocketAddr> {
        attr::decode_xor_address(
            self.attribute(attr::XOR_MAPPED_ADDRESS)?,
            self.transaction_id(),
        )
    }

    /// ERROR-CODE as (class * 100 + number, reason phrase) (RFC 8489 §14.8).
    pub fn error_code(&self) -> Option<(u16, &str)> {
        attr::decode_error_code(self.attribute(attr::ERROR_CODE)?)
    }

    /// The types listed in UNKNOWN-ATTRIBUTES (RFC 8489 §14.13).
    pub fn unknown_attributes(&self) -> impl Iterator<Item = u16> {
        self.attribute(attr::UNKNOWN_ATTRIBUTES)
            .unwrap_or_default()
            .chunks_exact(2)
            .map(|c| u16::from_be_bytes([c[0], c[1]]))
    }

    /// Whether a FINGERPRINT is present (it was verified by [`StunMessage::parse`]).
    pub fn has_fingerprint(&self) -> bool {
        self.fingerprint
    }

    /// Whether a MESSAGE-INTEGRITY is present (not yet verified).
    pub fn has_message_integrity(&self) -> bool {
        self.integrity.is_some()
    }

    /// RFC 8489 §14.5 short-term credential: key = the password bytes (after OpaqueString;
    /// treat as raw bytes). HMAC-SHA1 with ring::hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, over
    /// the message up to M-I with the header length adjusted. Constant-time compare.
    ///
    /// For long-term credentials (§9.2.2) pass the derived key, e.g.
    /// MD5(username ":" realm ":" password).
    pub fn verify_integrity(&self, key: &[u8]) -> Result<(), StunError> {
        let index = self.integrity.ok_or(StunError::IntegrityMissing)?;
        let key = hmac::Key::new(hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, key);
        self.verify_hmac(index, &key)
    }

    /// RFC 8489 §14.6: verifies MESSAGE-INTEGRITY-SHA256 (HMAC-SHA256, possibly truncated
    /// to the attribute's length) with the same input rule as [`Self::verify_integrity`].
    pub fn verify_integrity_sha256(&self, key: &[u8]) -> Result<(), StunError> {
        let index = self.integrity_sha256.ok_or(StunError::IntegrityMissing)?;
        let key = hmac::Key::new(hmac::HMAC_SHA256, key);
        self.verify_hmac(index, &key)
    }

    /// RFC 8489 §14.5/§14.6: "The text used as input to HMAC is the STUN message, up to
    /// and including the attribute preceding the MESSAGE-INTEGRITY attribute. The Length
    /// field of the STUN message header is adjusted to point to the end of the
    /// MESSAGE-INTEGRITY attribute."
    fn verify_hmac(&self, index: u8, key: &hmac::Key) -> Result<(), StunError> {
        let a = self
            .attrs
            .get(usize::from(index))
            .ok_or(StunError::IntegrityMissing)?;
        let received = self.value(a);
        let tag = hmac_with_length(key, &self.raw, a.header_at(), received.len());
        // The received value may be a truncation (§14.6); its length is not secret.
        let computed = tag.as_ref().get(..received.len()).unwrap_or_default();
        if received.is_empty() || !constant_time_eq(computed, received) {
            return Err(StunError::BadIntegrity);
        }
        Ok(())
    }

    /// Comprehension-required attribute types (0x0000-0x7FFF) this parser does not know,
    /// in order, bounded (at most 16 kept). Empty when all are known. RFC 8489 §6.3.1: a
    /// request with these gets a 420 with UNKNOWN-ATTRIBUTES; a response with them is
    /// discarded — the caller decides.
    pub fn unknown_comprehension_required(&self) -> &[u16] {
        &self.unknown[..usize::from(self.unknown_count)]
    }
}

/// HMAC over `msg[..attr_at]` as if the header's Message Length ended the message right
/// after an integrity attribute of `value_len` bytes starting at `attr_at`. The header is
/// copied to the stack so the received bytes are neither copied nor changed.
pub(crate) fn hmac_with_length(
    key: &hmac::Key,
    msg: &[u8],
    attr_at: usize,
    value_len: usize,
) -> hmac::Tag {
    let mut header = [0u8; HEADER_LEN];
    if let Some(h) = msg.get(..HEADER_LEN) {
        header.copy_from_slice(h);
    }
    // The adjusted length fits: the attribute lies within a message of at most 65535.
    let length = (attr_at + 4 + value_len - HEADER_LEN) as u16;
    header[2..4].copy_from_slice(&length.to_be_bytes());
    let mut ctx = hmac::Context::with_key(key);
    ctx.update(&header);
    ctx.update(msg.get(HEADER_LEN..attr_at).unwrap_or_default());
    ctx.sign()
}

/// RFC 8489 §14.7: "the CRC-32 of the STUN message up to (but excluding) the FINGERPRINT
/// attribute itself, XOR'ed with the 32-bit value 0x5354554e". The header length already
/// counts FINGERPRINT since it is the last attribute.
fn check_fingerprint(buf: &[u8], attr_at: usize, value: &[u8]) -> Result<(), StunError> {
    let covered = buf.get(..attr_at).ok_or(StunError::BadFingerprint)?;
    let expected = crc32fast::hash(covered) ^ attr::FINGERPRINT_XOR;
    if attr::be_u32(value) != Some(expected) {
        return Err(StunError::BadFingerprint);
    }
    Ok(())
}

/// Compares two equally long byte strings without an early exit, so the time taken does
/// not tell an attacker how many leading bytes of a forged HMAC were right. ring's own
/// `hmac::verify` needs the signed text in one slice, which would mean copying the message
/// to patch its length field; its public constant-time helper is deprecated.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

impl fmt::Debug for StunMessage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StunMessage")
            .field("class", &self.class())
            .field("method", &format_args!("{:#05x}", self.method()))
            .field("transaction_id", &self.transaction_id())
            .field("len", &self.raw.len())
            .field("attributes", &self.kept())
            .finish()
    }
}
