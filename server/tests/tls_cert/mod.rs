//! A self-signed certificate for tests that serve TLS, written as PEM files.

#![allow(dead_code)]

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use rcgen::{CertificateParams, KeyPair, PublicKeyData, SanType};

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
    let pem = |label: &str, der: &[u8]| {
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
    };
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
