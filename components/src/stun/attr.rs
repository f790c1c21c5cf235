//! STUN attribute types (RFC 8489 §18.3, RFC 8445 §16.1) and the checks on their values.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use super::{MAGIC_COOKIE, TransactionId};

// RFC 8489 §14: types 0x0000-0x7FFF are comprehension-required, 0x8000-0xFFFF
// comprehension-optional. §18.3 lists the registry this module follows.

/// MAPPED-ADDRESS (RFC 8489 §14.1).
pub const MAPPED_ADDRESS: u16 = 0x0001;
/// USERNAME (RFC 8489 §14.3).
pub const USERNAME: u16 = 0x0006;
/// MESSAGE-INTEGRITY, HMAC-SHA1 (RFC 8489 §14.5).
pub const MESSAGE_INTEGRITY: u16 = 0x0008;
/// ERROR-CODE (RFC 8489 §14.8).
pub const ERROR_CODE: u16 = 0x0009;
/// UNKNOWN-ATTRIBUTES (RFC 8489 §14.13).
pub const UNKNOWN_ATTRIBUTES: u16 = 0x000A;
/// REALM (RFC 8489 §14.9).
pub const REALM: u16 = 0x0014;
/// NONCE (RFC 8489 §14.10).
pub const NONCE: u16 = 0x0015;
/// MESSAGE-INTEGRITY-SHA256 (RFC 8489 §14.6).
pub const MESSAGE_INTEGRITY_SHA256: u16 = 0x001C;
/// PASSWORD-ALGORITHM (RFC 8489 §14.12).
pub const PASSWORD_ALGORITHM: u16 = 0x001D;
/// USERHASH (RFC 8489 §14.4).
pub const USERHASH: u16 = 0x001E;
/// XOR-MAPPED-ADDRESS (RFC 8489 §14.2).
pub const XOR_MAPPED_ADDRESS: u16 = 0x0020;
/// PRIORITY (RFC 8445 §7.1.1).
pub const PRIORITY: u16 = 0x0024;
/// USE-CANDIDATE (RFC 8445 §7.1.2).
pub const USE_CANDIDATE: u16 = 0x0025;
/// PASSWORD-ALGORITHMS (RFC 8489 §14.11).
pub const PASSWORD_ALGORITHMS: u16 = 0x8002;
/// ALTERNATE-DOMAIN (RFC 8489 §14.16).
pub const ALTERNATE_DOMAIN: u16 = 0x8003;
/// SOFTWARE (RFC 8489 §14.14).
pub const SOFTWARE: u16 = 0x8022;
/// ALTERNATE-SERVER (RFC 8489 §14.15).
pub const ALTERNATE_SERVER: u16 = 0x8023;
/// FINGERPRINT (RFC 8489 §14.7).
pub const FINGERPRINT: u16 = 0x8028;
/// ICE-CONTROLLED (RFC 8445 §7.1.3).
pub const ICE_CONTROLLED: u16 = 0x8029;
/// ICE-CONTROLLING (RFC 8445 §7.1.3).
pub const ICE_CONTROLLING: u16 = 0x802A;

/// True for types 0x0000-0x7FFF, which a receiver must understand (RFC 8489 §14).
pub const fn is_comprehension_required(typ: u16) -> bool {
    typ < 0x8000
}

/// True for the comprehension-required types this parser understands; anything else below
/// 0x8000 is reported by `StunMessage::unknown_comprehension_required`.
pub(crate) const fn is_known(typ: u16) -> bool {
    matches!(
        typ,
        MAPPED_ADDRESS
            | USERNAME
            | MESSAGE_INTEGRITY
            | ERROR_CODE
            | UNKNOWN_ATTRIBUTES
            | REALM
            | NONCE
            | MESSAGE_INTEGRITY_SHA256
            | PASSWORD_ALGORITHM
            | USERHASH
            | XOR_MAPPED_ADDRESS
            | PRIORITY
            | USE_CANDIDATE
    )
}

/// Length of a MESSAGE-INTEGRITY value: an HMAC-SHA1 (RFC 8489 §14.5).
pub(crate) const INTEGRITY_LEN: usize = 20;
/// Length of a FINGERPRINT value: a CRC-32 (RFC 8489 §14.7).
pub(crate) const FINGERPRINT_LEN: usize = 4;
/// RFC 8489 §14.7: the CRC-32 is XOR'ed with this so FINGERPRINT differs from other CRCs.
pub(crate) const FINGERPRINT_XOR: u32 = 0x5354_554E;
/// RFC 8489 §14.3: USERNAME is "a UTF-8-encoded sequence of fewer than 509 bytes".
pub(crate) const USERNAME_MAX_LEN: usize = 508;
/// RFC 8489 §14.8, §14.9, §14.10, §14.14: fewer than 128 characters, "as long as 763 bytes
/// when decoding them".
pub(crate) const TEXT_MAX_LEN: usize = 763;

/// Whether a value is well formed for the attribute types this parser reads. Types it does
/// not read are accepted as opaque bytes.
pub(crate) fn value_ok(typ: u16, value: &[u8]) -> bool {
    let len = value.len();
    match typ {
        MAPPED_ADDRESS | XOR_MAPPED_ADDRESS => address_family_len_ok(value),
        USERNAME => len <= USERNAME_MAX_LEN,
        // RFC 8489 §14.4: USERHASH is a SHA-256 hash, 32 bytes.
        USERHASH => len == 32,
        MESSAGE_INTEGRITY => len == INTEGRITY_LEN,
        // RFC 8489 §14.6: "at most 32 bytes, but it MUST be at least 16 bytes and MUST be a
        // multiple of 4 bytes".
        MESSAGE_INTEGRITY_SHA256 => (16..=32).contains(&len) && len.is_multiple_of(4),
        FINGERPRINT => len == FINGERPRINT_LEN,
        ERROR_CODE => decode_error_code(value).is_some(),
        REALM | NONCE => len <= TEXT_MAX_LEN,
        // RFC 8489 §14.13: a list of 16-bit types.
        UNKNOWN_ATTRIBUTES => len.is_multiple_of(2),
        // RFC 8489 §14.12: Algorithm (16 bits), Parameters Length (16 bits), Parameters.
        PASSWORD_ALGORITHM => len >= 4,
        PRIORITY => len == 4,
        USE_CANDIDATE => len == 0,
        ICE_CONTROLLED | ICE_CONTROLLING => len == 8,
        _ => true,
    }
}

/// RFC 8489 §14.1: family 0x01 is IPv4 with a 4-byte address, 0x02 is IPv6 with 16 bytes.
fn address_family_len_ok(value: &[u8]) -> bool {
    match value.get(1) {
        Some(0x01) => value.len() == 8,
        Some(0x02) => value.len() == 20,
        _ => false,
    }
}

/// Reads a big-endian u32 from exactly four bytes.
pub(crate) fn be_u32(value: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(value.try_into().ok()?))
}

/// Reads a big-endian u64 from exactly eight bytes.
pub(crate) fn be_u64(value: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(value.try_into().ok()?))
}

/// The 16 bytes an IPv6 X-Address is XOR'ed with: magic cookie then transaction ID
/// (RFC 8489 §14.2).
fn xor_mask(tid: TransactionId) -> [u8; 16] {
    let mut mask = [0u8; 16];
    let (cookie, rest) = mask.split_at_mut(4);
    cookie.copy_from_slice(&MAGIC_COOKIE.to_be_bytes());
    rest.copy_from_slice(&tid.0);
    mask
}

/// Decodes an XOR-MAPPED-ADDRESS value (RFC 8489 §14.2): X-Port is the port XOR the top
/// 16 bits of the cookie; X-Address is XOR'ed with the cookie (IPv4) or with the cookie
/// and transaction ID (IPv6).
pub(crate) fn decode_xor_address(value: &[u8], tid: TransactionId) -> Option<SocketAddr> {
    let mask = xor_mask(tid);
    let x_port = u16::from_be_bytes([*value.get(2)?, *value.get(3)?]);
    let port = x_port ^ (MAGIC_COOKIE >> 16) as u16;
    let x_addr = value.get(4..)?;
    let ip = match (value.get(1)?, x_addr.len()) {
        (0x01, 4) => {
            let mut b = [0u8; 4];
            for ((o, x), m) in b.iter_mut().zip(x_addr).zip(&mask) {
                *o = x ^ m;
            }
            IpAddr::V4(Ipv4Addr::from(b))
        }
        (0x02, 16) => {
            let mut b = [0u8; 16];
            for ((o, x), m) in b.iter_mut().zip(x_addr).zip(&mask) {
                *o = x ^ m;
            }
            IpAddr::V6(Ipv6Addr::from(b))
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

/// Encodes an XOR-MAPPED-ADDRESS value into `out`; returns how many bytes are used
/// (8 for IPv4, 20 for IPv6). RFC 8489 §14.2.
pub(crate) fn encode_xor_address(
    addr: SocketAddr,
    tid: TransactionId,
    out: &mut [u8; 20],
) -> usize {
    let mask = xor_mask(tid);
    let x_port = addr.port() ^ (MAGIC_COOKIE >> 16) as u16;
    let (family, ip_len) = match addr.ip() {
        IpAddr::V4(ip) => {
            out[4..8].copy_from_slice(&ip.octets());
            (0x01, 4)
        }
        IpAddr::V6(ip) => {
            out[4..20].copy_from_slice(&ip.octets());
            (0x02, 16)
        }
    };
    // RFC 8489 §14.1: the first 8 bits MUST be zero.
    out[0] = 0;
    out[1] = family;
    out[2..4].copy_from_slice(&x_port.to_be_bytes());
    for (o, m) in out[4..4 + ip_len].iter_mut().zip(&mask) {
        *o ^= m;
    }
    4 + ip_len
}

/// Decodes an ERROR-CODE value (RFC 8489 §14.8) into (class * 100 + number, reason).
/// The class must be 3-6 and the number 0-99; the 21 reserved bits are ignored; the reason
/// must be UTF-8 of at most 763 bytes.
pub(crate) fn decode_error_code(value: &[u8]) -> Option<(u16, &str)> {
    let class = u16::from(*value.get(2)? & 0x07);
    let number = u16::from(*value.get(3)?);
    if !(3..=6).contains(&class) || number > 99 {
        return None;
    }
    let reason = value.get(4..)?;
    if reason.len() > TEXT_MAX_LEN {
        return None;
    }
    let reason = std::str::from_utf8(reason).ok()?;
    Some((class * 100 + number, reason))
}
