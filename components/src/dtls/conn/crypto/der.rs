//! A small DER walker that reads a peer certificate only as far as its EC public key.
//!
//! WebRTC certificates are self-signed and trusted by their SDP fingerprint (RFC 8122
//! §5), so nothing in them is validated beyond the key that signs ServerKeyExchange or
//! CertificateVerify. The walk follows RFC 5280 §4.1:
//!
//! ```text
//! Certificate ::= SEQUENCE { tbsCertificate TBSCertificate, signatureAlgorithm, signatureValue }
//! TBSCertificate ::= SEQUENCE {
//!     version [0] EXPLICIT Version DEFAULT v1, serialNumber, signature, issuer, validity,
//!     subject, subjectPublicKeyInfo SubjectPublicKeyInfo, ... }
//! SubjectPublicKeyInfo ::= SEQUENCE { algorithm AlgorithmIdentifier, subjectPublicKey BIT STRING }
//! ```
//!
//! and RFC 5480 §2.1.1 / §2.2 for the EC key: the algorithm is id-ecPublicKey
//! { iso(1) member-body(2) us(840) ansi-X9-62(10045) keyType(2) 1 } with a namedCurve
//! parameter (secp256r1 { ... curves(3) prime(1) 7 } or secp384r1 { iso(1)
//! identified-organization(3) certicom(132) curve(0) 34 }), and the key is an ECPoint
//! whose "first octet ... indicates whether the key is compressed or uncompressed. The
//! uncompressed form is indicated by 0x04".
//!
//! Bounded and panic-free: a fixed number of TLV reads (no recursion, no loops over
//! input), every length checked against what remains, single-byte tags and lengths of
//! at most three bytes only.

/// Why a certificate could not be read as far as its public key.
#[derive(thiserror::Error, Debug, Clone, Copy, PartialEq, Eq)]
pub enum DerError {
    /// The input ended inside a tag, length or value.
    #[error("DER truncated")]
    Truncated,
    /// A different tag than the structure requires.
    #[error("DER tag {found:#04x} where {expected:#04x} was expected")]
    UnexpectedTag {
        /// The tag the structure requires.
        expected: u8,
        /// The tag present.
        found: u8,
    },
    /// A length form DER forbids or this walker does not read (indefinite, over 3 bytes).
    #[error("unsupported DER length form")]
    BadLength,
    /// A multi-byte (high-number) tag.
    #[error("unsupported DER tag form")]
    BadTag,
    /// Bytes after the end of a structure that must end there.
    #[error("trailing bytes after DER structure")]
    TrailingData,
    /// The key is not an id-ecPublicKey key.
    #[error("public key algorithm is not id-ecPublicKey")]
    NotEcPublicKey,
    /// An EC key on a curve other than P-256 or P-384.
    #[error("EC public key on an unsupported curve")]
    UnsupportedCurve,
    /// The key's curve is supported, but not by the caller that asked.
    #[error("EC public key on {0:?}, not the curve required")]
    WrongCurve(EcCurve),
    /// The BIT STRING is not an uncompressed point of the curve's size.
    #[error("EC public key is not an uncompressed point")]
    BadPoint,
}

/// The curve of a certificate's EC public key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EcCurve {
    /// secp256r1 / prime256v1 (NIST P-256).
    P256,
    /// secp384r1 (NIST P-384).
    P384,
}

impl EcCurve {
    /// Bytes of an uncompressed point: 0x04 || X || Y.
    pub fn point_len(self) -> usize {
        match self {
            Self::P256 => 65,
            Self::P384 => 97,
        }
    }
}

const SEQUENCE: u8 = 0x30;
const INTEGER: u8 = 0x02;
const BIT_STRING: u8 = 0x03;
const OID: u8 = 0x06;
/// [0] EXPLICIT, constructed, context-specific.
const VERSION_TAG: u8 = 0xA0;

/// DER content of id-ecPublicKey, 1.2.840.10045.2.1.
const ID_EC_PUBLIC_KEY: &[u8] = &[0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x02, 0x01];
/// DER content of secp256r1 (prime256v1), 1.2.840.10045.3.1.7.
const SECP256R1: &[u8] = &[0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x03, 0x01, 0x07];
/// DER content of secp384r1, 1.3.132.0.34.
const SECP384R1: &[u8] = &[0x2B, 0x81, 0x04, 0x00, 0x22];

/// The uncompressed EC P-256 point (65 bytes, 0x04 || X || Y) of a DER X.509
/// certificate's subjectPublicKeyInfo, for [`super::verify_ecdsa_p256_sha256`].
pub fn peer_public_key(cert_der: &[u8]) -> Result<Vec<u8>, super::CryptoError> {
    match peer_public_key_with_curve(cert_der)? {
        (EcCurve::P256, point) => Ok(point),
        (other, _) => Err(DerError::WrongCurve(other).into()),
    }
}

/// The curve and uncompressed point of a DER X.509 certificate's EC public key (P-256
/// or P-384).
pub fn peer_public_key_with_curve(
    cert_der: &[u8],
) -> Result<(EcCurve, Vec<u8>), super::CryptoError> {
    let (curve, point) = walk(cert_der)?;
    Ok((curve, point.to_vec()))
}

fn walk(cert_der: &[u8]) -> Result<(EcCurve, &[u8]), DerError> {
    let (certificate, rest) = expect(cert_der, SEQUENCE)?;
    if !rest.is_empty() {
        return Err(DerError::TrailingData);
    }
    let (tbs, _signature_parts) = expect(certificate, SEQUENCE)?;

    let mut fields = tbs;
    if fields.first() == Some(&VERSION_TAG) {
        fields = expect(fields, VERSION_TAG)?.1;
    }
    fields = expect(fields, INTEGER)?.1; // serialNumber
    fields = expect(fields, SEQUENCE)?.1; // signature AlgorithmIdentifier
    fields = expect(fields, SEQUENCE)?.1; // issuer
    fields = expect(fields, SEQUENCE)?.1; // validity
    fields = expect(fields, SEQUENCE)?.1; // subject
    let (spki, _extensions) = expect(fields, SEQUENCE)?;

    let (algorithm, rest) = expect(spki, SEQUENCE)?;
    let (bits, rest) = expect(rest, BIT_STRING)?;
    if !rest.is_empty() {
        return Err(DerError::TrailingData);
    }
    let (alg_oid, params) = expect(algorithm, OID)?;
    if alg_oid != ID_EC_PUBLIC_KEY {
        return Err(DerError::NotEcPublicKey);
    }
    let (curve_oid, rest) = expect(params, OID)?;
    if !rest.is_empty() {
        return Err(DerError::TrailingData);
    }
    let curve = match curve_oid {
        SECP256R1 => EcCurve::P256,
        SECP384R1 => EcCurve::P384,
        _ => return Err(DerError::UnsupportedCurve),
    };

    // BIT STRING content: the count of unused bits, then the ECPoint octets.
    let point = match bits.split_first() {
        Some((0, point)) => point,
        _ => return Err(DerError::BadPoint),
    };
    if point.len() != curve.point_len() || point.first() != Some(&0x04) {
        return Err(DerError::BadPoint);
    }
    Ok((curve, point))
}

/// Reads one TLV with tag `tag`; returns its value and what follows it.
fn expect(input: &[u8], tag: u8) -> Result<(&[u8], &[u8]), DerError> {
    let (found, value, rest) = read_tlv(input)?;
    if found != tag {
        return Err(DerError::UnexpectedTag {
            expected: tag,
            found,
        });
    }
    Ok((value, rest))
}

/// Reads one TLV: (tag, value, rest).
fn read_tlv(input: &[u8]) -> Result<(u8, &[u8], &[u8]), DerError> {
    let (&tag, rest) = input.split_first().ok_or(DerError::Truncated)?;
    if tag & 0x1F == 0x1F {
        return Err(DerError::BadTag);
    }
    let (&first, rest) = rest.split_first().ok_or(DerError::Truncated)?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7F);
        // 0x80 is the indefinite form, which DER forbids; over 3 bytes is over 16 MiB.
        if n == 0 || n > 3 {
            return Err(DerError::BadLength);
        }
        if rest.len() < n {
            return Err(DerError::Truncated);
        }
        let (len_bytes, rest) = rest.split_at(n);
        let len = len_bytes
            .iter()
            .fold(0usize, |acc, &b| (acc << 8) | usize::from(b));
        (len, rest)
    };
    if rest.len() < len {
        return Err(DerError::Truncated);
    }
    let (value, rest) = rest.split_at(len);
    Ok((tag, value, rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths() {
        assert_eq!(
            read_tlv(&[0x04, 0x01, 0xAA]),
            Ok((0x04, &[0xAA][..], &[][..]))
        );
        let mut long = vec![0x04, 0x81, 0x80];
        long.extend_from_slice(&[0u8; 0x80]);
        assert_eq!(read_tlv(&long).map(|t| t.1.len()), Ok(0x80));
        assert_eq!(read_tlv(&[0x04, 0x80]), Err(DerError::BadLength));
        assert_eq!(
            read_tlv(&[0x04, 0x84, 0, 0, 0, 1]),
            Err(DerError::BadLength)
        );
        assert_eq!(read_tlv(&[0x04, 0x82, 0x01]), Err(DerError::Truncated));
        assert_eq!(read_tlv(&[0x04, 0x05, 0x00]), Err(DerError::Truncated));
        assert_eq!(read_tlv(&[0x1F, 0x01, 0x00]), Err(DerError::BadTag));
        assert_eq!(read_tlv(&[]), Err(DerError::Truncated));
        assert_eq!(read_tlv(&[0x30]), Err(DerError::Truncated));
    }
}
