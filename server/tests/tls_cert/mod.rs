//! A self-signed certificate for tests that serve TLS, written as PEM files.

#![allow(dead_code)]

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    PublicKeyData, SanType,
};

/// A certificate and its key, as files and as what clients trust.
pub struct TestCertificate {
    /// The certificate's PEM file (`--tls-cert`).
    pub cert_path: PathBuf,
    /// The private key's PEM file (`--tls-key`).
    pub key_path: PathBuf,
    /// The certificate, DER.
    pub der: Vec<u8>,
    /// The certificate, PEM.
    pub pem: String,
    /// The SPKI pin Chromium takes: base64 of the SHA-256 of the
    /// SubjectPublicKeyInfo.
    pub spki_pin: String,
}

/// A self-signed certificate for `addresses`, written into `dir` as `name.crt`
/// and `name.key`.
pub fn certificate(dir: &Path, name: &str, addresses: &[IpAddr]) -> TestCertificate {
    let key = KeyPair::generate().expect("a key");
    let mut params = CertificateParams::default();
    params.subject_alt_names = addresses.iter().map(|a| SanType::IpAddress(*a)).collect();
    let cert = params.self_signed(&key).expect("signed");
    let cert_pem = pem("CERTIFICATE", cert.der());
    let cert_path = dir.join(format!("{name}.crt"));
    let key_path = dir.join(format!("{name}.key"));
    std::fs::write(&cert_path, &cert_pem).expect("write");
    std::fs::write(&key_path, pem("PRIVATE KEY", &key.serialize_der())).expect("write");
    let spki = ring::digest::digest(&ring::digest::SHA256, &key.subject_public_key_info());
    TestCertificate {
        cert_path,
        key_path,
        der: cert.der().to_vec(),
        pem: cert_pem,
        spki_pin: STANDARD.encode(spki.as_ref()),
    }
}

/// `der` as PEM (RFC 7468) under `label`.
pub fn pem(label: &str, der: &[u8]) -> String {
    let b64 = STANDARD.encode(der);
    let lines: Vec<&str> = b64
        .as_bytes()
        .chunks(64)
        .map(|c| std::str::from_utf8(c).expect("ASCII"))
        .collect();
    format!(
        "-----BEGIN {label}-----\n{}\n-----END {label}-----\n",
        lines.join("\n")
    )
}

/// A certificate a [`Ca`] issued, as PEM files.
pub struct Issued {
    /// The certificate's PEM file.
    pub cert: PathBuf,
    /// Its private key's PEM file.
    pub key: PathBuf,
}

/// A certificate authority of a test, its certificate written as `NAME-ca.crt`.
pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    dir: PathBuf,
    /// The CA certificate's PEM file (what clients trust).
    pub cert: PathBuf,
    /// The CA certificate, PEM.
    pub pem: String,
}

impl Ca {
    /// A new CA named `name`, its files in `dir`.
    pub fn new(dir: &Path, name: &str) -> Ca {
        let key = KeyPair::generate().expect("a key");
        let mut params = CertificateParams::default();
        params
            .distinguished_name
            .push(DnType::CommonName, format!("{name} test CA"));
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let cert = params.self_signed(&key).expect("signed");
        let pem = pem("CERTIFICATE", cert.der());
        let path = dir.join(format!("{name}-ca.crt"));
        std::fs::write(&path, &pem).expect("write");
        Ca {
            issuer: Issuer::new(params, key),
            dir: dir.to_owned(),
            cert: path,
            pem,
        }
    }

    /// A certificate for `name`: a server's for `addresses` (IP SANs) when there
    /// are any, else a TLS client's with `name` as its common name. Written as
    /// `name.crt` and `name.key`.
    pub fn issue(&self, name: &str, addresses: &[IpAddr]) -> Issued {
        let key = KeyPair::generate().expect("a key");
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, name);
        params.subject_alt_names = addresses.iter().map(|a| SanType::IpAddress(*a)).collect();
        params.extended_key_usages = if addresses.is_empty() {
            vec![ExtendedKeyUsagePurpose::ClientAuth]
        } else {
            vec![ExtendedKeyUsagePurpose::ServerAuth]
        };
        let cert = params.signed_by(&key, &self.issuer).expect("signed");
        let issued = Issued {
            cert: self.dir.join(format!("{name}.crt")),
            key: self.dir.join(format!("{name}.key")),
        };
        std::fs::write(&issued.cert, pem("CERTIFICATE", cert.der())).expect("write");
        std::fs::write(&issued.key, pem("PRIVATE KEY", &key.serialize_der())).expect("write");
        issued
    }
}
