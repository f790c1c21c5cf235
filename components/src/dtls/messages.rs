//! The handshake messages after the hellos: Certificate (RFC 5246 §7.4.2),
//! ServerKeyExchange for ECDHE (RFC 8422 §5.4), CertificateRequest (RFC 5246 §7.4.4),
//! ServerHelloDone, ClientKeyExchange for ECDHE (RFC 8422 §5.7), CertificateVerify
//! (RFC 5246 §7.4.8) and Finished (RFC 5246 §7.4.9).

use bytes::{BufMut, BytesMut};

use super::codec::{Reader, U16List, put_u16_list, put_vec8, put_vec16, put_vec24};
use super::{DtlsWireError, MAX_CERTIFICATES, MAX_DISTINGUISHED_NAMES, VERIFY_DATA_LEN};

/// ECCurveType named_curve(3), the only one left (RFC 8422 §5.4).
pub const CURVE_TYPE_NAMED_CURVE: u8 = 3;
/// ClientCertificateType ecdsa_sign(64) (RFC 8422 §5.5).
pub const CERT_TYPE_ECDSA_SIGN: u8 = 64;
/// SignatureAndHashAlgorithm {sha256(4), ecdsa(3)} (RFC 5246 §7.4.1.4.1), which TLS
/// 1.3 calls ecdsa_secp256r1_sha256.
pub const SIG_ECDSA_SHA256: u16 = 0x0403;

/// Certificate: `ASN.1Cert certificate_list<0..2^24-1>`, each `<1..2^24-1>`, sender's
/// certificate first (RFC 5246 §7.4.2). Validated: at most [`MAX_CERTIFICATES`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Certificate<'a> {
    list: &'a [u8],
}

impl<'a> Certificate<'a> {
    /// Parses a Certificate body.
    pub fn parse(body: &'a [u8]) -> Result<Certificate<'a>, DtlsWireError> {
        let mut r = Reader::new(body);
        let list = r.vec24(0, "certificate_list")?;
        r.finish("certificate")?;
        let mut inner = Reader::new(list);
        let mut count = 0usize;
        while inner.remaining() > 0 {
            inner.vec24(1, "ASN.1Cert")?;
            count += 1;
            if count > MAX_CERTIFICATES {
                return Err(DtlsWireError::TooMany {
                    field: "certificate_list",
                });
            }
        }
        Ok(Certificate { list })
    }

    /// The DER certificates in order (the sender's own first).
    pub fn iter(&self) -> impl Iterator<Item = &'a [u8]> + 'a {
        let mut r = Reader::new(self.list);
        // Framing validated by `parse`.
        std::iter::from_fn(move || r.vec24(1, "ASN.1Cert").ok())
    }

    /// The sender's own certificate, if the list is not empty.
    pub fn end_entity(&self) -> Option<&'a [u8]> {
        self.iter().next()
    }

    /// Appends a Certificate body carrying `chain`. Panics (programmer error) past
    /// 2^24-1 bytes.
    pub fn write(chain: &[&[u8]], out: &mut BytesMut) {
        let total: usize = chain.iter().map(|c| 3 + c.len()).sum();
        super::codec::put_u24(
            out,
            u32::try_from(total).expect("certificate list fits in 24 bits"),
        );
        for cert in chain {
            put_vec24(out, cert);
        }
    }
}

/// `digitally-signed` with TLS 1.2's explicit algorithm (RFC 5246 §4.7): the
/// SignatureAndHashAlgorithm and `opaque signature<0..2^16-1>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DigitallySigned<'a> {
    /// The SignatureAndHashAlgorithm as one uint16 (hash high byte, signature low byte).
    pub scheme: u16,
    /// The signature; for ECDSA the DER Ecdsa-Sig-Value (RFC 8422 §5.4).
    pub signature: &'a [u8],
}

impl<'a> DigitallySigned<'a> {
    fn read(r: &mut Reader<'a>) -> Result<Self, DtlsWireError> {
        let scheme = r.u16("signature algorithm")?;
        let signature = r.vec16(0, "signature")?;
        Ok(DigitallySigned { scheme, signature })
    }

    /// Appends the algorithm and the signature.
    pub fn write(&self, out: &mut BytesMut) {
        out.put_u16(self.scheme);
        put_vec16(out, self.signature);
    }
}

/// ServerKeyExchange for ECDHE (RFC 8422 §5.4): ServerECDHParams and their signature.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServerKeyExchange<'a> {
    /// The NamedCurve (named group) of the ephemeral key.
    pub group: u16,
    /// The ephemeral public key (`ECPoint`, `<1..2^8-1>`).
    pub public: &'a [u8],
    /// The encoded ServerECDHParams, which the signature covers after the two randoms.
    pub params: &'a [u8],
    /// The signature over ClientHello.random + ServerHello.random + params.
    pub signed: DigitallySigned<'a>,
}

impl<'a> ServerKeyExchange<'a> {
    /// Parses a ServerKeyExchange body; only `named_curve` parameters are accepted.
    pub fn parse(body: &'a [u8]) -> Result<ServerKeyExchange<'a>, DtlsWireError> {
        let mut r = Reader::new(body);
        let curve_type = r.u8("curve_type")?;
        if curve_type != CURVE_TYPE_NAMED_CURVE {
            return Err(DtlsWireError::BadValue {
                field: "curve_type",
                value: u32::from(curve_type),
            });
        }
        let group = r.u16("named_curve")?;
        let public = r.vec8(1, "ECPoint")?;
        let params = body
            .get(..4 + public.len())
            .ok_or(DtlsWireError::Truncated {
                field: "ServerECDHParams",
            })?;
        let signed = DigitallySigned::read(&mut r)?;
        r.finish("server_key_exchange")?;
        Ok(ServerKeyExchange {
            group,
            public,
            params,
            signed,
        })
    }

    /// Appends encoded ServerECDHParams (what the signature covers).
    pub fn write_params(group: u16, public: &[u8], out: &mut BytesMut) {
        out.put_u8(CURVE_TYPE_NAMED_CURVE);
        out.put_u16(group);
        put_vec8(out, public);
    }
}

/// CertificateRequest (RFC 5246 §7.4.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CertificateRequest<'a> {
    /// `ClientCertificateType certificate_types<1..2^8-1>`.
    pub certificate_types: &'a [u8],
    /// `SignatureAndHashAlgorithm supported_signature_algorithms<2..2^16-2>`.
    pub signature_algorithms: U16List<'a>,
    /// The body of `DistinguishedName certificate_authorities<0..2^16-1>`, validated.
    pub certificate_authorities: &'a [u8],
}

impl<'a> CertificateRequest<'a> {
    /// Parses a CertificateRequest body.
    pub fn parse(body: &'a [u8]) -> Result<CertificateRequest<'a>, DtlsWireError> {
        let mut r = Reader::new(body);
        let certificate_types = r.vec8(1, "certificate_types")?;
        let signature_algorithms = U16List::parse(
            r.vec16(2, "supported_signature_algorithms")?,
            1,
            "supported_signature_algorithms",
        )?;
        let certificate_authorities = r.vec16(0, "certificate_authorities")?;
        r.finish("certificate_request")?;
        let mut names = Reader::new(certificate_authorities);
        let mut count = 0usize;
        while names.remaining() > 0 {
            names.vec16(1, "DistinguishedName")?;
            count += 1;
            if count > MAX_DISTINGUISHED_NAMES {
                return Err(DtlsWireError::TooMany {
                    field: "certificate_authorities",
                });
            }
        }
        Ok(CertificateRequest {
            certificate_types,
            signature_algorithms,
            certificate_authorities,
        })
    }

    /// Appends a CertificateRequest with these types and algorithms and no CAs.
    pub fn write(certificate_types: &[u8], signature_algorithms: &[u16], out: &mut BytesMut) {
        put_vec8(out, certificate_types);
        put_u16_list(out, signature_algorithms);
        put_vec16(out, &[]);
    }
}

/// ServerHelloDone has an empty body (RFC 5246 §7.4.5).
pub fn parse_server_hello_done(body: &[u8]) -> Result<(), DtlsWireError> {
    Reader::new(body).finish("server_hello_done")
}

/// ClientKeyExchange for ECDHE: `ClientECDiffieHellmanPublic` with its explicit
/// `ecdh_Yc<1..2^8-1>` (RFC 8422 §5.7).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientKeyExchange<'a> {
    /// The client's ephemeral public key.
    pub public: &'a [u8],
}

impl<'a> ClientKeyExchange<'a> {
    /// Parses a ClientKeyExchange body.
    pub fn parse(body: &'a [u8]) -> Result<ClientKeyExchange<'a>, DtlsWireError> {
        let mut r = Reader::new(body);
        let public = r.vec8(1, "ecdh_Yc")?;
        r.finish("client_key_exchange")?;
        Ok(ClientKeyExchange { public })
    }

    /// Appends the body.
    pub fn write(&self, out: &mut BytesMut) {
        put_vec8(out, self.public);
    }
}

/// CertificateVerify: one `digitally-signed` over the handshake messages so far
/// (RFC 5246 §7.4.8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CertificateVerify<'a> {
    /// The algorithm and signature.
    pub signed: DigitallySigned<'a>,
}

impl<'a> CertificateVerify<'a> {
    /// Parses a CertificateVerify body.
    pub fn parse(body: &'a [u8]) -> Result<CertificateVerify<'a>, DtlsWireError> {
        let mut r = Reader::new(body);
        let signed = DigitallySigned::read(&mut r)?;
        r.finish("certificate_verify")?;
        Ok(CertificateVerify { signed })
    }
}

/// Finished: `verify_data[verify_data_length]`, 12 bytes for every suite shoal speaks
/// (RFC 5246 §7.4.9).
pub fn parse_finished(body: &[u8]) -> Result<[u8; VERIFY_DATA_LEN], DtlsWireError> {
    let mut r = Reader::new(body);
    let verify_data = r.array("verify_data")?;
    r.finish("finished")?;
    Ok(verify_data)
}
