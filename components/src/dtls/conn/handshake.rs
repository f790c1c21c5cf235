//! Handshake state shared by both roles: what has been negotiated so far, the log of
//! handshake messages that the signatures and Finished hashes cover, and the key
//! derivations of RFC 5246 §6.3/§8.1 with the extended master secret of RFC 7627.

use crate::dtls::messages::SIG_ECDSA_SHA256;
use crate::dtls::{HandshakeType, write_handshake};
use bytes::BytesMut;
use ring::digest;

use super::DtlsError;
use super::crypto::{
    CipherSuite, EcCurve, EphemeralKey, KeyBlock, SrtpProfile, extended_master_secret, key_block,
    verify_data, verify_ecdsa_p256_sha256, verify_ecdsa_p384_sha384,
};
use super::send::FlightItem;

/// SignatureAndHashAlgorithm {sha384(5), ecdsa(3)}, for peers with P-384 keys.
pub const SIG_ECDSA_SHA384: u16 = 0x0503;
/// The signature algorithms shoal verifies, in preference order; it signs with the
/// first (its own key is P-256).
pub const SIGNATURE_ALGORITHMS: [u16; 2] = [SIG_ECDSA_SHA256, SIG_ECDSA_SHA384];
/// The most bytes of handshake messages one handshake may log.
pub const MAX_LOG_BYTES: usize = 64 * 1024;
/// The most HelloVerifyRequests a client answers in one handshake.
pub const MAX_HELLO_VERIFY: u8 = 4;

/// The message each role waits for next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// Client: HelloVerifyRequest or ServerHello.
    ServerHello,
    /// Client: the server's Certificate.
    ServerCertificate,
    /// Client: ServerKeyExchange.
    ServerKeyExchange,
    /// Client: CertificateRequest or ServerHelloDone.
    CertificateRequestOrDone,
    /// Client: ServerHelloDone after a CertificateRequest.
    ServerHelloDone,
    /// Client: the server's Finished.
    ServerFinished,
    /// Server: a ClientHello.
    ClientHello,
    /// Server: the client's Certificate.
    ClientCertificate,
    /// Server: ClientKeyExchange.
    ClientKeyExchange,
    /// Server: CertificateVerify.
    CertificateVerify,
    /// Server: the client's Finished.
    ClientFinished,
}

/// The keys and parameters a finished handshake leaves behind.
#[derive(Clone)]
pub struct Session {
    /// The suite in use.
    pub suite: CipherSuite,
    /// The (extended) master secret.
    pub master: [u8; 48],
    /// ClientHello.random.
    pub client_random: [u8; 32],
    /// ServerHello.random.
    pub server_random: [u8; 32],
    /// The SRTP profile, when use_srtp was negotiated.
    pub srtp: Option<SrtpProfile>,
}

/// One handshake in progress.
pub struct Handshake {
    /// What comes next.
    pub expect: Expect,
    /// RFC 5246 §7.4.8 handshake_messages: every handshake message so far, each as a
    /// single fragment (RFC 6347 §4.2.6), without the initial ClientHello and
    /// HelloVerifyRequest of a cookie exchange.
    pub log: Vec<u8>,
    /// The next message_seq we send.
    pub send_seq: u16,
    /// ClientHello.random.
    pub client_random: [u8; 32],
    /// ServerHello.random.
    pub server_random: [u8; 32],
    /// The suite, once chosen.
    pub suite: Option<CipherSuite>,
    /// The SRTP profile, once chosen.
    pub srtp: Option<SrtpProfile>,
    /// The curve and point of the peer's certificate key.
    pub peer_key: Option<(EcCurve, Vec<u8>)>,
    /// Our ephemeral key (server: made for ServerKeyExchange).
    pub ephemeral: Option<EphemeralKey>,
    /// Client: the premaster secret, computed on ServerKeyExchange.
    pub pre_master: Option<Vec<u8>>,
    /// Client: our ephemeral public value for ClientKeyExchange.
    pub client_public: Vec<u8>,
    /// The master secret, once derived.
    pub master: Option<[u8; 48]>,
    /// Client: the cookie of the last HelloVerifyRequest.
    pub cookie: Vec<u8>,
    /// Client: HelloVerifyRequests answered.
    pub hello_verifies: u8,
    /// Client: the server sent CertificateRequest.
    pub cert_requested: bool,
    /// Server: secret for stateless cookies (RFC 6347 §4.2.1).
    pub cookie_secret: [u8; 32],
    /// Server: the client sent renegotiation_info or the SCSV (RFC 5746 §3.6).
    pub secure_renegotiation: bool,
    /// Server: the client sent ec_point_formats.
    pub client_sent_point_formats: bool,
}

impl Handshake {
    /// A fresh handshake that waits for `expect`.
    pub fn new(expect: Expect) -> Self {
        Handshake {
            expect,
            log: Vec::new(),
            send_seq: 0,
            client_random: [0; 32],
            server_random: [0; 32],
            suite: None,
            srtp: None,
            peer_key: None,
            ephemeral: None,
            pre_master: None,
            client_public: Vec::new(),
            master: None,
            cookie: Vec::new(),
            hello_verifies: 0,
            cert_requested: false,
            cookie_secret: [0; 32],
            secure_renegotiation: false,
            client_sent_point_formats: false,
        }
    }

    /// Appends one message to the log in its unfragmented form.
    pub fn log_message(
        &mut self,
        msg_type: HandshakeType,
        seq: u16,
        body: &[u8],
    ) -> Result<(), DtlsError> {
        if self.log.len() + 12 + body.len() > MAX_LOG_BYTES {
            return Err(DtlsError::HandshakeTooLarge);
        }
        let mut m = BytesMut::with_capacity(12 + body.len());
        write_handshake(&mut m, msg_type, seq, body);
        self.log.extend_from_slice(&m);
        Ok(())
    }

    /// Logs a message of ours and makes it a flight item with the next message_seq.
    pub fn outgoing(
        &mut self,
        msg_type: HandshakeType,
        epoch: u16,
        body: BytesMut,
    ) -> Result<FlightItem, DtlsError> {
        let seq = self.send_seq;
        self.log_message(msg_type, seq, &body)?;
        self.send_seq = self.send_seq.wrapping_add(1);
        Ok(FlightItem::Handshake {
            msg_type,
            seq,
            epoch,
            body: body.freeze(),
        })
    }

    /// The suite, which every step after ServerHello has.
    pub fn suite(&self) -> Result<CipherSuite, DtlsError> {
        self.suite
            .ok_or(DtlsError::Internal("cipher suite not negotiated"))
    }

    /// Hash(handshake_messages) with the suite's PRF hash (RFC 5246 §7.4.9).
    pub fn log_hash(&self) -> Result<digest::Digest, DtlsError> {
        Ok(digest::digest(self.suite()?.prf_hash().digest(), &self.log))
    }

    /// RFC 7627 §4: `master_secret = PRF(pre_master_secret, "extended master secret",
    /// session_hash)`, where §3 makes session_hash the hash of the log up to and
    /// including ClientKeyExchange — which is where the log ends when this is called.
    /// Returns the key block for the suite (RFC 5246 §6.3).
    pub fn derive_keys(&mut self, pre_master: &[u8]) -> Result<KeyBlock, DtlsError> {
        let suite = self.suite()?;
        let session_hash = self.log_hash()?;
        let master = extended_master_secret(suite.prf_hash(), pre_master, session_hash.as_ref());
        self.master = Some(master);
        Ok(key_block(
            suite,
            &master,
            &self.client_random,
            &self.server_random,
        ))
    }

    /// verify_data for `label` over the log so far (RFC 5246 §7.4.9).
    pub fn finished(&self, label: &[u8]) -> Result<[u8; 12], DtlsError> {
        let suite = self.suite()?;
        let master = self
            .master
            .as_ref()
            .ok_or(DtlsError::Internal("master secret not derived"))?;
        Ok(verify_data(
            suite.prf_hash(),
            master,
            label,
            self.log_hash()?.as_ref(),
        ))
    }

    /// Checks a peer's signature over `message` with the key of its certificate. The
    /// algorithm must be the one that key's curve signs with; we offered no other.
    pub fn verify_peer_signature(
        &self,
        scheme: u16,
        message: &[u8],
        signature: &[u8],
        over: HandshakeType,
    ) -> Result<(), DtlsError> {
        let Some((curve, point)) = &self.peer_key else {
            return Err(DtlsError::BadCertificate);
        };
        let verified = match (curve, scheme) {
            (EcCurve::P256, SIG_ECDSA_SHA256) => {
                verify_ecdsa_p256_sha256(point, message, signature)
            }
            (EcCurve::P384, SIG_ECDSA_SHA384) => {
                verify_ecdsa_p384_sha384(point, message, signature)
            }
            _ => {
                return Err(DtlsError::IllegalParameter(
                    "signature algorithm does not fit the key",
                ));
            }
        };
        verified.map_err(|_| DtlsError::BadSignature(over))
    }

    /// The session this handshake established.
    pub fn session(&self) -> Result<Session, DtlsError> {
        Ok(Session {
            suite: self.suite()?,
            master: self
                .master
                .ok_or(DtlsError::Internal("master secret not derived"))?,
            client_random: self.client_random,
            server_random: self.server_random,
            srtp: self.srtp,
        })
    }
}

/// A new handshake message body buffer.
pub fn body() -> BytesMut {
    BytesMut::with_capacity(256)
}
