//! TLS for the control plane's listeners: HTTPS and WSS on the HTTP port, gRPC over
//! TLS on the gRPC port, with rustls on ring (`--tls-cert`, `--tls-key`: PEM files).
//!
//! The certificate sits behind a resolver ([`Certificate`]) that every handshake
//! asks, so [`Certificate::reload`] (SIGHUP) swaps it for new connections while the
//! open ones carry on; a file that does not load leaves the old certificate in place.
//!
//! Handshakes run in the listeners ([`super::listen`]): each in its connection's own
//! task, within `--tls-handshake-timeout`, a bounded number at once. ALPN (RFC 7301)
//! offers `h2` on the gRPC port and `http/1.1` on the HTTP port.
//!
//! A cluster node is a TLS client too ([`ClientTlsFiles`]): of etcd, when its URLs
//! are `https://` (`--etcd-ca`, and `--etcd-cert`/`--etcd-key` for etcd's client
//! certificate authentication), and of other nodes' gRPC when they serve TLS
//! (`--cluster-ca`). It trusts only the CA certificates given, never system roots.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use rustls::ServerConfig;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// The largest PEM file read.
const MAX_PEM_BYTES: u64 = 1024 * 1024;

/// Why a certificate could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        source: io::Error,
    },
    /// A file holds no PEM object of the kind needed.
    #[error("{path}: {what}")]
    Pem {
        /// The file.
        path: PathBuf,
        /// What is missing or wrong.
        what: String,
    },
    /// rustls refused the key or the pair.
    #[error("the certificate and key do not make a usable pair: {0}")]
    Key(#[from] rustls::Error),
}

/// The PEM files of the certificate (chain first, leaf first) and its private key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain.
    pub cert: PathBuf,
    /// The private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

/// What a node trusts, and what it presents, as a TLS client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientTlsFiles {
    /// PEM CA certificates the server's certificate must chain to.
    pub ca: PathBuf,
    /// The certificate chain and key presented when the server asks for one.
    pub identity: Option<TlsFiles>,
}

impl ClientTlsFiles {
    /// A gRPC client TLS configuration that trusts the CA file's certificates only
    /// and presents the identity, if any. Every file is checked here: each CA
    /// certificate must make a trust anchor, and the identity's key must match its
    /// certificate.
    pub fn load(&self) -> Result<tonic::transport::ClientTlsConfig, TlsError> {
        let (ca_pem, anchors) = read_certificates(&self.ca)?;
        let mut roots = rustls::RootCertStore::empty();
        for anchor in anchors {
            roots.add(anchor).map_err(|e| TlsError::Pem {
                path: self.ca.clone(),
                what: format!("a certificate that is no trust anchor: {e}"),
            })?;
        }
        let mut config = tonic::transport::ClientTlsConfig::new()
            .ca_certificate(tonic::transport::Certificate::from_pem(ca_pem));
        if let Some(identity) = &self.identity {
            load_pair(identity)?;
            config = config.identity(tonic::transport::Identity::from_pem(
                read_pem(&identity.cert)?,
                read_pem(&identity.key)?,
            ));
        }
        Ok(config)
    }
}

/// `endpoint` over TLS with `tls`, the server's certificate verified for the host
/// of the endpoint's URI (an IPv6 address without its brackets).
///
/// # Errors
/// When tonic cannot set TLS up for the endpoint.
pub fn verified_endpoint(
    endpoint: tonic::transport::Endpoint,
    tls: &tonic::transport::ClientTlsConfig,
) -> Result<tonic::transport::Endpoint, tonic::transport::Error> {
    let host = endpoint.uri().host().unwrap_or_default();
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    endpoint.tls_config(tls.clone().domain_name(host))
}

/// The node's certificate, reloadable.
pub struct Certificate {
    files: TlsFiles,
    current: RwLock<Arc<CertifiedKey>>,
}

impl fmt::Debug for Certificate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Certificate")
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

impl Certificate {
    /// Loads `files`.
    pub fn load(files: TlsFiles) -> Result<Certificate, TlsError> {
        let key = load_pair(&files)?;
        Ok(Certificate {
            files,
            current: RwLock::new(Arc::new(key)),
        })
    }

    /// Reads the files again; on failure the certificate in use stays.
    pub fn reload(&self) -> Result<(), TlsError> {
        let key = load_pair(&self.files)?;
        *self
            .current
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(key);
        Ok(())
    }

    /// A rustls server configuration that serves this certificate, offering the
    /// ALPN protocols `alpn` (RFC 7301), TLS 1.3 and 1.2 with ring's suites.
    pub fn server_config(self: &Arc<Self>, alpn: &[&[u8]]) -> Result<Arc<ServerConfig>, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_cert_resolver(self.clone());
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Ok(Arc::new(config))
    }
}

impl ResolvesServerCert for Certificate {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(
            self.current
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone(),
        )
    }
}

/// Reads a PEM file of at most [`MAX_PEM_BYTES`].
fn read_pem(path: &Path) -> Result<Vec<u8>, TlsError> {
    crate::config::read_at_most(path, MAX_PEM_BYTES)
        .map_err(|source| TlsError::Read {
            path: path.to_owned(),
            source,
        })?
        .ok_or_else(|| TlsError::Pem {
            path: path.to_owned(),
            what: format!("larger than {MAX_PEM_BYTES} bytes"),
        })
}

/// A PEM file of certificates (at least one): its bytes, and the certificates.
fn read_certificates(path: &Path) -> Result<(Vec<u8>, Vec<CertificateDer<'static>>), TlsError> {
    let pem_err = |what: String| TlsError::Pem {
        path: path.to_owned(),
        what,
    };
    let pem = read_pem(path)?;
    let certificates: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<_, _>>()
        .map_err(|e| pem_err(format!("not PEM certificates: {e}")))?;
    if certificates.is_empty() {
        return Err(pem_err("holds no CERTIFICATE".into()));
    }
    Ok((pem, certificates))
}

fn load_pair(files: &TlsFiles) -> Result<CertifiedKey, TlsError> {
    let (_, chain) = read_certificates(&files.cert)?;
    let key_pem = read_pem(&files.key)?;
    // The key's bytes are never shown.
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|_| TlsError::Pem {
        path: files.key.clone(),
        what: "holds no usable PRIVATE KEY".into(),
    })?;
    let provider = rustls::crypto::ring::default_provider();
    let signing = provider.key_provider.load_private_key(key)?;
    let pair = CertifiedKey::new(chain, signing);
    pair.keys_match()?;
    Ok(pair)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `der` as PEM (RFC 7468) under `label`.
    fn pem(label: &str, der: &[u8]) -> String {
        use base64::Engine;
        let b64 = base64::engine::general_purpose::STANDARD.encode(der);
        let lines: Vec<&str> = b64
            .as_bytes()
            .chunks(64)
            .map(|c| std::str::from_utf8(c).unwrap())
            .collect();
        format!(
            "-----BEGIN {label}-----\n{}\n-----END {label}-----\n",
            lines.join("\n")
        )
    }

    fn write_pair(dir: &Path, name: &str) -> TlsFiles {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec![name.to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let files = TlsFiles {
            cert: dir.join(format!("{name}.crt")),
            key: dir.join(format!("{name}.key")),
        };
        std::fs::write(&files.cert, pem("CERTIFICATE", cert.der())).unwrap();
        std::fs::write(&files.key, pem("PRIVATE KEY", &key.serialize_der())).unwrap();
        files
    }

    #[test]
    fn certificates_load_reload_and_keep_the_old_one_on_failure() {
        let dir = std::env::temp_dir().join(format!("shoal-tls-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let files = write_pair(&dir, "one.test");
        let cert = Certificate::load(files.clone()).unwrap();
        let first = cert.current.read().unwrap().cert[0].clone();
        // A new pair in the same files: reloaded.
        let other = write_pair(&dir, "two.test");
        std::fs::copy(&other.cert, &files.cert).unwrap();
        std::fs::copy(&other.key, &files.key).unwrap();
        cert.reload().unwrap();
        let second = cert.current.read().unwrap().cert[0].clone();
        assert_ne!(first, second);
        // A key that does not match the certificate: refused, the old pair stays.
        std::fs::copy(&write_pair(&dir, "three.test").key, &files.key).unwrap();
        assert!(matches!(cert.reload(), Err(TlsError::Key(_))));
        assert_eq!(cert.current.read().unwrap().cert[0], second);
        // Garbage: refused without showing it.
        std::fs::write(&files.key, "-----BEGIN PRIVATE KEY-----\nsecret\n").unwrap();
        let e = cert.reload().unwrap_err().to_string();
        assert!(!e.contains("secret"), "{e}");
        assert!(
            Certificate::load(TlsFiles {
                cert: dir.join("missing.crt"),
                key: files.key.clone(),
            })
            .is_err()
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn client_tls_files_are_checked_when_loaded() {
        let dir = std::env::temp_dir().join(format!("shoal-tls-client-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ca = write_pair(&dir, "ca.test");
        let me = write_pair(&dir, "me.test");
        let files = |ca: &Path, identity: Option<TlsFiles>| ClientTlsFiles {
            ca: ca.to_owned(),
            identity,
        };
        files(&ca.cert, None).load().expect("a CA alone");
        files(&ca.cert, Some(me.clone()))
            .load()
            .expect("with a client certificate");
        // A CA file without a certificate, or with a key only, or none at all.
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, "").unwrap();
        for bad in [&empty, &ca.key, &dir.join("missing.pem")] {
            assert!(files(bad, None).load().is_err(), "{bad:?}");
        }
        // A client certificate whose key is another's.
        let mismatched = TlsFiles {
            cert: me.cert.clone(),
            key: ca.key.clone(),
        };
        assert!(matches!(
            files(&ca.cert, Some(mismatched)).load(),
            Err(TlsError::Key(_))
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
