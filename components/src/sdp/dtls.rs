//! Attribute values that set up DTLS: the certificate `fingerprint` (RFC 8122 §5) and the
//! `setup` role (RFC 4145 §4, used for DTLS by RFC 5763 §5).

use std::fmt;

use super::text::is_token;

/// The hash function of a fingerprint (RFC 8122 §5 `hash-func`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum HashFunction {
    /// `sha-1`.
    Sha1,
    /// `sha-224`.
    Sha224,
    /// `sha-256`, the one browsers send.
    Sha256,
    /// `sha-384`.
    Sha384,
    /// `sha-512`.
    Sha512,
    /// `md5`: listed only so it can be recognised; RFC 8122 §5 forbids using it.
    Md5,
    /// `md2`: likewise forbidden.
    Md2,
    /// Any other token, lower-cased.
    Other(String),
}

impl HashFunction {
    /// Parses a `hash-func` token. RFC 8122 §5 writes them in lower case; other cases are
    /// taken too (and serialize in lower case).
    pub fn parse(s: &str) -> Option<Self> {
        if !is_token(s) {
            return None;
        }
        let lower = s.to_ascii_lowercase();
        Some(match lower.as_str() {
            "sha-1" => Self::Sha1,
            "sha-224" => Self::Sha224,
            "sha-256" => Self::Sha256,
            "sha-384" => Self::Sha384,
            "sha-512" => Self::Sha512,
            "md5" => Self::Md5,
            "md2" => Self::Md2,
            _ => Self::Other(lower),
        })
    }

    /// The token as written.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Sha1 => "sha-1",
            Self::Sha224 => "sha-224",
            Self::Sha256 => "sha-256",
            Self::Sha384 => "sha-384",
            Self::Sha512 => "sha-512",
            Self::Md5 => "md5",
            Self::Md2 => "md2",
            Self::Other(s) => s,
        }
    }

    /// The digest length in bytes, for the functions RFC 8122 §5 names.
    pub fn digest_len(&self) -> Option<usize> {
        Some(match self {
            Self::Sha1 => 20,
            Self::Sha224 => 28,
            Self::Sha256 => 32,
            Self::Sha384 => 48,
            Self::Sha512 => 64,
            Self::Md5 | Self::Md2 => 16,
            Self::Other(_) => return None,
        })
    }
}

impl fmt::Display for HashFunction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Longest digest accepted from an unknown hash function (SHA-512's, twice over).
const MAX_DIGEST_LEN: usize = 128;

/// `a=fingerprint` (RFC 8122 §5): `hash-func SP fingerprint`, where the fingerprint is
/// upper-case hex bytes separated by colons.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Fingerprint {
    /// The hash function.
    pub hash: HashFunction,
    /// The digest of the DER certificate.
    pub bytes: Vec<u8>,
}

impl Fingerprint {
    /// A fingerprint from a digest computed elsewhere (the DTLS layer hashes the certificate).
    pub fn new(hash: HashFunction, bytes: &[u8]) -> Self {
        Self {
            hash,
            bytes: bytes.to_vec(),
        }
    }

    /// Parses `hash-func SP fingerprint`. Lower-case hex is accepted as well; the digest
    /// must have the length its hash function gives.
    pub(crate) fn parse(value: &str) -> Option<Self> {
        let (hash, hex) = value.split_once(' ')?;
        let hash = HashFunction::parse(hash)?;
        let bytes = hex
            .split(':')
            .map(parse_hex_byte)
            .collect::<Option<Vec<u8>>>()?;
        let length_ok = match hash.digest_len() {
            Some(len) => bytes.len() == len,
            None => bytes.len() <= MAX_DIGEST_LEN,
        };
        length_ok.then_some(Self { hash, bytes })
    }
}

/// Two hex digits (RFC 8122 §5 `2UHEX`).
fn parse_hex_byte(s: &str) -> Option<u8> {
    let b = s.as_bytes();
    if b.len() != 2 {
        return None;
    }
    let hi = char::from(*b.first()?).to_digit(16)?;
    let lo = char::from(*b.get(1)?).to_digit(16)?;
    u8::try_from(hi * 16 + lo).ok()
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ", self.hash)?;
        for (i, b) in self.bytes.iter().enumerate() {
            if i > 0 {
                f.write_str(":")?;
            }
            write!(f, "{b:02X}")?;
        }
        Ok(())
    }
}

/// `a=setup` (RFC 4145 §4): which side opens the connection; for DTLS (RFC 5763 §5),
/// `active` is the DTLS client.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Setup {
    /// `active`: this side connects (the DTLS client).
    Active,
    /// `passive`: this side accepts (the DTLS server).
    Passive,
    /// `actpass`: either; what an offer says (RFC 5763 §5).
    ActPass,
    /// `holdconn`: no connection for now.
    HoldConn,
}

impl Setup {
    /// Parses a `role` token.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "active" => Self::Active,
            "passive" => Self::Passive,
            "actpass" => Self::ActPass,
            "holdconn" => Self::HoldConn,
            _ => return None,
        })
    }

    /// The token as written.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Active => "active",
            Self::Passive => "passive",
            Self::ActPass => "actpass",
            Self::HoldConn => "holdconn",
        }
    }
}

impl fmt::Display for Setup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
