//! Writes one STUN message into a caller-owned buffer.

use std::net::SocketAddr;

use bytes::{BufMut, BytesMut};
use ring::hmac;

use super::attr;
use super::message::hmac_with_length;
use super::{Class, HEADER_LEN, MAGIC_COOKIE, TransactionId, message_type};

/// Writes one STUN message into a caller-owned buffer (bytes::BytesMut), appending at its
/// end; no other allocation. Attributes are padded to 4 bytes (§14). The header length is
/// kept up to date.
///
/// Attributes are written in call order; the caller keeps RFC 8489's order: everything
/// else, then MESSAGE-INTEGRITY (§14.5), then MESSAGE-INTEGRITY-SHA256 (§14.6), then
/// FINGERPRINT last (§14.7).
///
/// # Panics
///
/// Only on programmer errors: a method above 0xFFF, an ERROR-CODE outside 300-699, an
/// attribute value or a whole message longer than 65535 bytes, or an attribute after
/// [`StunWriter::fingerprint`].
pub struct StunWriter<'a> {
    buf: &'a mut BytesMut,
    /// Where this message starts in `buf`.
    start: usize,
    tid: TransactionId,
    /// The byte used to pad values to 4 bytes; 0 unless [`StunWriter::padding_byte`] is set.
    padding: u8,
    /// Set by [`StunWriter::fingerprint`]; nothing may follow it.
    sealed: bool,
}

impl<'a> StunWriter<'a> {
    /// Starts a message: appends its 20-byte header (RFC 8489 §5) with length 0.
    pub fn new(buf: &'a mut BytesMut, class: Class, method: u16, tid: TransactionId) -> Self {
        assert!(method <= 0x0FFF, "STUN methods are 12 bits");
        let start = buf.len();
        buf.put_u16(message_type(class, method));
        buf.put_u16(0);
        buf.put_u32(MAGIC_COOKIE);
        buf.put_slice(&tid.0);
        StunWriter {
            buf,
            start,
            tid,
            padding: 0,
            sealed: false,
        }
    }

    /// Sets the byte that pads later attributes. RFC 8489 §14 says padding "MUST be set to
    /// zero on sending"; RFC 5389 §15 allowed any value and RFC 5769's test vectors pad
    /// with 0x20. This exists to reproduce those vectors byte for byte; leave it at zero
    /// otherwise.
    pub fn padding_byte(&mut self, byte: u8) -> &mut Self {
        self.padding = byte;
        self
    }

    /// USERNAME (RFC 8489 §14.3).
    pub fn username(&mut self, u: &[u8]) -> &mut Self {
        self.raw_attribute(attr::USERNAME, u)
    }

    /// SOFTWARE (RFC 8489 §14.14).
    pub fn software(&mut self, s: &str) -> &mut Self {
        self.raw_attribute(attr::SOFTWARE, s.as_bytes())
    }

    /// PRIORITY (RFC 8445 §7.1.1).
    pub fn priority(&mut self, p: u32) -> &mut Self {
        self.raw_attribute(attr::PRIORITY, &p.to_be_bytes())
    }

    /// USE-CANDIDATE, which has no value (RFC 8445 §7.1.2).
    pub fn use_candidate(&mut self) -> &mut Self {
        self.raw_attribute(attr::USE_CANDIDATE, &[])
    }

    /// ICE-CONTROLLING with its tie-breaker (RFC 8445 §7.1.3).
    pub fn ice_controlling(&mut self, tie_breaker: u64) -> &mut Self {
        self.raw_attribute(attr::ICE_CONTROLLING, &tie_breaker.to_be_bytes())
    }

    /// ICE-CONTROLLED with its tie-breaker (RFC 8445 §7.1.3).
    pub fn ice_controlled(&mut self, tie_breaker: u64) -> &mut Self {
        self.raw_attribute(attr::ICE_CONTROLLED, &tie_breaker.to_be_bytes())
    }

    /// XOR-MAPPED-ADDRESS, IPv4 or IPv6 (RFC 8489 §14.2).
    pub fn xor_mapped_address(&mut self, addr: SocketAddr) -> &mut Self {
        let mut value = [0u8; 20];
        let len = attr::encode_xor_address(addr, self.tid, &mut value);
        self.raw_attribute(attr::XOR_MAPPED_ADDRESS, &value[..len])
    }

    /// ERROR-CODE (RFC 8489 §14.8): `code` is class * 100 + number, 300-699.
    pub fn error_code(&mut self, code: u16, reason: &str) -> &mut Self {
        assert!((300..700).contains(&code), "STUN error codes are 300-699");
        let head = [0, 0, (code / 100) as u8, (code % 100) as u8];
        self.attribute_parts(attr::ERROR_CODE, &head, reason.as_bytes())
    }

    /// UNKNOWN-ATTRIBUTES (RFC 8489 §14.13): the types, 16 bits each.
    pub fn unknown_attributes(&mut self, types: &[u16]) -> &mut Self {
        let len = types.len() * 2;
        let typ = attr::UNKNOWN_ATTRIBUTES;
        self.put_header(typ, len);
        for t in types {
            self.buf.put_u16(*t);
        }
        self.put_padding(len)
    }

    /// Any attribute, value as given, padded to 4 bytes.
    pub fn raw_attribute(&mut self, typ: u16, value: &[u8]) -> &mut Self {
        self.attribute_parts(typ, value, &[])
    }

    /// MESSAGE-INTEGRITY (RFC 8489 §14.5): HMAC-SHA1 keyed with `key` (the short-term
    /// password, or the long-term key of §9.2.2) over the message so far, with the header
    /// length counting this attribute.
    pub fn message_integrity(&mut self, key: &[u8]) -> &mut Self {
        let key = hmac::Key::new(hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, key);
        self.integrity(attr::MESSAGE_INTEGRITY, &key, attr::INTEGRITY_LEN)
    }

    /// MESSAGE-INTEGRITY-SHA256 (RFC 8489 §14.6), untruncated (32 bytes).
    pub fn message_integrity_sha256(&mut self, key: &[u8]) -> &mut Self {
        let key = hmac::Key::new(hmac::HMAC_SHA256, key);
        self.integrity(attr::MESSAGE_INTEGRITY_SHA256, &key, 32)
    }

    fn integrity(&mut self, typ: u16, key: &hmac::Key, len: usize) -> &mut Self {
        let at = self.buf.len() - self.start;
        let tag = hmac_with_length(key, &self.buf[self.start..], at, len);
        let value = &tag.as_ref()[..len];
        self.raw_attribute(typ, value)
    }

    /// FINGERPRINT (RFC 8489 §14.7), CRC-32 (crc32fast) XOR 0x5354554e over the message
    /// so far with the header length already counting this attribute. Must be last.
    pub fn fingerprint(&mut self) -> &mut Self {
        let at = self.buf.len();
        self.set_length(at - self.start - HEADER_LEN + 4 + attr::FINGERPRINT_LEN);
        let crc = crc32fast::hash(&self.buf[self.start..at]) ^ attr::FINGERPRINT_XOR;
        self.raw_attribute(attr::FINGERPRINT, &crc.to_be_bytes());
        self.sealed = true;
        self
    }

    /// Finishes and returns the written message's length in bytes.
    pub fn finish(self) -> usize {
        let len = self.buf.len() - self.start;
        debug_assert_eq!(
            self.buf[self.start + 2..self.start + 4],
            ((len - HEADER_LEN) as u16).to_be_bytes(),
            "header length out of date"
        );
        len
    }

    /// Writes one attribute whose value is `a` followed by `b`.
    fn attribute_parts(&mut self, typ: u16, a: &[u8], b: &[u8]) -> &mut Self {
        let len = a.len() + b.len();
        self.put_header(typ, len);
        self.buf.put_slice(a);
        self.buf.put_slice(b);
        self.put_padding(len)
    }

    fn put_header(&mut self, typ: u16, len: usize) {
        assert!(!self.sealed, "FINGERPRINT must be the last STUN attribute");
        let len = u16::try_from(len).expect("STUN attribute value longer than 65535 bytes");
        self.buf.put_u16(typ);
        self.buf.put_u16(len);
    }

    /// RFC 8489 §14: pads the value to a multiple of 4 bytes and updates the header length.
    fn put_padding(&mut self, value_len: usize) -> &mut Self {
        let pad = (4 - value_len % 4) % 4;
        self.buf.put_bytes(self.padding, pad);
        self.set_length(self.buf.len() - self.start - HEADER_LEN);
        self
    }

    fn set_length(&mut self, len: usize) {
        let len = u16::try_from(len).expect("STUN message longer than 65535 bytes");
        let at = self.start + 2;
        self.buf[at..at + 2].copy_from_slice(&len.to_be_bytes());
    }
}
