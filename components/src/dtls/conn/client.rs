//! The client's side of the full handshake (RFC 5246 §7.3, RFC 6347 §4.2.4 Figure 1):
//! ClientHello (again with a cookie after HelloVerifyRequest), then the server's flight,
//! then Certificate, ClientKeyExchange, CertificateVerify, ChangeCipherSpec, Finished,
//! then the server's Finished.

use crate::dtls::extension::{
    EXT_EC_POINT_FORMATS, EXT_EXTENDED_MASTER_SECRET, EXT_RENEGOTIATION_INFO,
    EXT_SIGNATURE_ALGORITHMS, EXT_SUPPORTED_GROUPS, EXT_USE_SRTP, POINT_FORMAT_UNCOMPRESSED,
    write_ec_point_formats, write_extended_master_secret, write_renegotiation_info,
    write_u16_list_extension, write_use_srtp,
};
use crate::dtls::messages::{
    CERT_TYPE_ECDSA_SIGN, SIG_ECDSA_SHA256, parse_finished, parse_server_hello_done,
};
use crate::dtls::{
    Certificate, CertificateRequest, ClientHello, ClientKeyExchange, DTLS_1_2, DigitallySigned,
    Extensions, HandshakeType, HelloVerifyRequest, ServerHello, ServerKeyExchange, U16List,
};
use crate::time::Time;
use bytes::BytesMut;

use super::DtlsError;
use super::connection::DtlsConn;
use super::crypto::{
    CipherSuite, EphemeralKey, NamedGroup, RecordCipher, SrtpProfile, fingerprint_sha256,
    peer_public_key_with_curve,
};
use super::handshake::{Expect, MAX_HELLO_VERIFY, SIGNATURE_ALGORITHMS, body};
use super::reassembly::Message;
use super::send::FlightItem;

impl DtlsConn {
    /// Flight 1: the first ClientHello.
    pub(super) fn client_start(&mut self, now: Time) -> Result<(), DtlsError> {
        self.send_client_hello(now)
    }

    /// (Re)builds and sends ClientHello with the current cookie. RFC 6347 §4.2.1: after
    /// HelloVerifyRequest "the client MUST use the same parameter values (version,
    /// random, session_id, cipher_suites, compression_method)".
    fn send_client_hello(&mut self, now: Time) -> Result<(), DtlsError> {
        let config = self.config.clone();
        let hs = self.hs_mut()?;
        let mut ext = BytesMut::with_capacity(128);
        let groups: Vec<u16> = config.groups.iter().map(|g| g.to_u16()).collect();
        write_u16_list_extension(&mut ext, EXT_SUPPORTED_GROUPS, &groups);
        write_ec_point_formats(&mut ext);
        write_u16_list_extension(&mut ext, EXT_SIGNATURE_ALGORITHMS, &SIGNATURE_ALGORITHMS);
        if !config.srtp_profiles.is_empty() {
            let profiles: Vec<u16> = config.srtp_profiles.iter().map(|p| p.to_u16()).collect();
            write_use_srtp(&mut ext, &profiles, &[]);
        }
        // RFC 7627 §5.2: "a client implementing this document MUST send the
        // extended_master_secret extension in its ClientHello".
        write_extended_master_secret(&mut ext);
        // RFC 5746 §3.2: on an initial handshake renegotiated_connection is empty.
        write_renegotiation_info(&mut ext, &[]);
        let suites: Vec<u8> = config
            .cipher_suites
            .iter()
            .flat_map(|s| s.to_u16().to_be_bytes())
            .collect();
        let hello = ClientHello {
            client_version: DTLS_1_2,
            random: hs.client_random,
            session_id: &[],
            cookie: &hs.cookie,
            cipher_suites: U16List::parse(&suites, 1, "cipher_suites")?,
            compression_methods: &[0],
            extensions: Extensions::parse(&ext)?,
        };
        let mut b = body();
        hello.write(&mut b);
        let item = hs.outgoing(HandshakeType::ClientHello, 0, b)?;
        self.send_flight(now, vec![item], true)
    }

    pub(super) fn client_message(&mut self, now: Time, m: Message) -> Result<(), DtlsError> {
        let expect = self.hs_mut()?.expect;
        match (expect, m.msg_type) {
            (Expect::ServerHello, HandshakeType::HelloVerifyRequest) => {
                self.on_hello_verify_request(now, &m)
            }
            (Expect::ServerHello, HandshakeType::ServerHello) => self.on_server_hello(&m),
            (Expect::ServerCertificate, HandshakeType::Certificate) => {
                self.on_server_certificate(&m)
            }
            (Expect::ServerKeyExchange, HandshakeType::ServerKeyExchange) => {
                self.on_server_key_exchange(&m)
            }
            (Expect::CertificateRequestOrDone, HandshakeType::CertificateRequest) => {
                self.on_certificate_request(&m)
            }
            (
                Expect::CertificateRequestOrDone | Expect::ServerHelloDone,
                HandshakeType::ServerHelloDone,
            ) => self.on_server_hello_done(now, &m),
            (Expect::ServerFinished, HandshakeType::Finished) if m.epoch == 1 => {
                self.on_server_finished(&m)
            }
            // RFC 5246 §7.4.1.1: HelloRequest "will be ignored by the client if the
            // client is currently negotiating a session".
            (_, HandshakeType::HelloRequest) => Ok(()),
            (_, t) => Err(DtlsError::UnexpectedMessage(t)),
        }
    }

    /// Flight 2 → flight 3 (RFC 6347 §4.2.1). The first ClientHello and the
    /// HelloVerifyRequest stay out of the handshake hash (§4.2.6).
    fn on_hello_verify_request(&mut self, now: Time, m: &Message) -> Result<(), DtlsError> {
        let hvr = HelloVerifyRequest::parse(&m.body)?;
        self.stats.hello_verify_requests += 1;
        let hs = self.hs_mut()?;
        if hs.hello_verifies >= MAX_HELLO_VERIFY {
            return Err(DtlsError::TooManyHelloVerifyRequests);
        }
        hs.hello_verifies += 1;
        hs.cookie = hvr.cookie.to_vec();
        hs.log.clear();
        // The new ClientHello is a new message: message_seq moves on (§4.2.2 example).
        self.send_client_hello(now)
    }

    fn on_server_hello(&mut self, m: &Message) -> Result<(), DtlsError> {
        let config = self.config.clone();
        let sh = ServerHello::parse(&m.body)?;
        if sh.server_version != DTLS_1_2 {
            return Err(DtlsError::ProtocolVersion(sh.server_version));
        }
        let suite = CipherSuite::from_u16(sh.cipher_suite)
            .filter(|s| config.cipher_suites.contains(s))
            .ok_or(DtlsError::IllegalParameter("cipher suite not offered"))?;
        if sh.compression_method != 0 {
            return Err(DtlsError::IllegalParameter(
                "compression method not offered",
            ));
        }
        let srtp = check_server_extensions(&sh.extensions, &config.srtp_profiles)?;
        if srtp.is_none() && self.srtp_required {
            return Err(DtlsError::NoSharedSrtpProfile);
        }
        let hs = self.hs_mut()?;
        hs.server_random = sh.random;
        hs.suite = Some(suite);
        hs.srtp = srtp;
        hs.log_message(m.msg_type, m.seq, &m.body)?;
        hs.expect = Expect::ServerCertificate;
        Ok(())
    }

    fn on_server_certificate(&mut self, m: &Message) -> Result<(), DtlsError> {
        let key = self.check_peer_certificate(&m.body)?;
        let hs = self.hs_mut()?;
        hs.peer_key = Some(key);
        hs.log_message(m.msg_type, m.seq, &m.body)?;
        hs.expect = Expect::ServerKeyExchange;
        Ok(())
    }

    /// RFC 8422 §5.4: the client "verifies the signature (when present) and retrieves
    /// the server's elliptic curve domain parameters and ephemeral ECDH public key".
    fn on_server_key_exchange(&mut self, m: &Message) -> Result<(), DtlsError> {
        let groups = self.config.groups.clone();
        let ske = ServerKeyExchange::parse(&m.body)?;
        let group = NamedGroup::from_u16(ske.group)
            .filter(|g| groups.contains(g))
            .ok_or(DtlsError::NoSharedGroup)?;
        let hs = self.hs_mut()?;
        // signed_params: SHA(ClientHello.random + ServerHello.random + params).
        let mut signed = Vec::with_capacity(64 + ske.params.len());
        signed.extend_from_slice(&hs.client_random);
        signed.extend_from_slice(&hs.server_random);
        signed.extend_from_slice(ske.params);
        hs.verify_peer_signature(
            ske.signed.scheme,
            &signed,
            ske.signed.signature,
            HandshakeType::ServerKeyExchange,
        )?;
        let key = EphemeralKey::generate(group)?;
        hs.client_public = key.public_key().to_vec();
        hs.pre_master = Some(key.agree(ske.public)?);
        hs.log_message(m.msg_type, m.seq, &m.body)?;
        hs.expect = Expect::CertificateRequestOrDone;
        Ok(())
    }

    fn on_certificate_request(&mut self, m: &Message) -> Result<(), DtlsError> {
        let cr = CertificateRequest::parse(&m.body)?;
        // Our certificate is ECDSA P-256 and signs with {sha256, ecdsa} only.
        if !cr.certificate_types.contains(&CERT_TYPE_ECDSA_SIGN)
            || !cr.signature_algorithms.contains(SIG_ECDSA_SHA256)
        {
            return Err(DtlsError::NoSharedSignatureAlgorithm);
        }
        let hs = self.hs_mut()?;
        hs.cert_requested = true;
        hs.log_message(m.msg_type, m.seq, &m.body)?;
        hs.expect = Expect::ServerHelloDone;
        Ok(())
    }

    /// Flight 5: [Certificate], ClientKeyExchange, [CertificateVerify],
    /// ChangeCipherSpec, Finished.
    fn on_server_hello_done(&mut self, now: Time, m: &Message) -> Result<(), DtlsError> {
        parse_server_hello_done(&m.body)?;
        let cert = self.cert.clone();
        let hs = self.hs_mut()?;
        hs.log_message(m.msg_type, m.seq, &m.body)?;
        let mut flight: Vec<FlightItem> = Vec::with_capacity(5);
        if hs.cert_requested {
            let mut b = body();
            Certificate::write(&[cert.der()], &mut b);
            flight.push(hs.outgoing(HandshakeType::Certificate, 0, b)?);
        }
        let mut b = body();
        ClientKeyExchange {
            public: &hs.client_public,
        }
        .write(&mut b);
        flight.push(hs.outgoing(HandshakeType::ClientKeyExchange, 0, b)?);
        let pre_master = hs
            .pre_master
            .take()
            .ok_or(DtlsError::Internal("no premaster secret"))?;
        let keys = hs.derive_keys(&pre_master)?;
        if hs.cert_requested {
            // RFC 5246 §7.4.8: the signature covers every handshake message so far.
            let signature = cert.sign(&hs.log)?;
            let mut b = body();
            DigitallySigned {
                scheme: SIG_ECDSA_SHA256,
                signature: &signature,
            }
            .write(&mut b);
            flight.push(hs.outgoing(HandshakeType::CertificateVerify, 0, b)?);
        }
        flight.push(FlightItem::ChangeCipherSpec);
        let verify_data = hs.finished(b"client finished")?;
        let mut b = body();
        b.extend_from_slice(&verify_data);
        flight.push(hs.outgoing(HandshakeType::Finished, 1, b)?);
        hs.expect = Expect::ServerFinished;
        let suite = hs.suite()?;
        self.send.set_cipher(RecordCipher::new(
            suite,
            &keys.client_write_key,
            keys.client_write_iv,
        )?);
        self.send.epoch = 1;
        self.read_cipher = Some(RecordCipher::new(
            suite,
            &keys.server_write_key,
            keys.server_write_iv,
        )?);
        self.send_flight(now, flight, true)
    }

    fn on_server_finished(&mut self, m: &Message) -> Result<(), DtlsError> {
        let received = parse_finished(&m.body)?;
        let hs = self.hs_mut()?;
        let expected = hs.finished(b"server finished")?;
        if !ring_eq(&received, &expected) {
            return Err(DtlsError::BadFinished);
        }
        hs.log_message(m.msg_type, m.seq, &m.body)?;
        self.connected()
    }

    /// The peer's Certificate: not empty, its first certificate hashing to the SDP
    /// fingerprint (RFC 5763 §5) and carrying an EC key shoal can verify.
    pub(super) fn check_peer_certificate(
        &self,
        body: &[u8],
    ) -> Result<(super::crypto::EcCurve, Vec<u8>), DtlsError> {
        let cert = Certificate::parse(body)?;
        let end_entity = cert.end_entity().ok_or(DtlsError::NoCertificate)?;
        if !ring_eq(&fingerprint_sha256(end_entity), &self.remote_fingerprint) {
            return Err(DtlsError::FingerprintMismatch);
        }
        Ok(peer_public_key_with_curve(end_entity)?)
    }

    pub(super) fn hs_mut(&mut self) -> Result<&mut super::handshake::Handshake, DtlsError> {
        self.hs
            .as_deref_mut()
            .ok_or(DtlsError::Internal("no handshake state"))
    }
}

/// Constant-time comparison of two secrets' public checks.
pub(super) fn ring_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The ServerHello's extensions: only ones we offered (RFC 5246 §7.4.1.4), the
/// extended master secret present (RFC 7627 §5.2, which shoal requires), an empty
/// renegotiation_info (RFC 5746 §3.2), and at most one offered SRTP profile with no
/// MKI (RFC 5764 §4.1.1: "The server MUST NOT select a value that the client has not
/// offered").
fn check_server_extensions(
    ext: &Extensions,
    offered_srtp: &[SrtpProfile],
) -> Result<Option<SrtpProfile>, DtlsError> {
    for e in ext.iter() {
        let offered = match e.typ {
            EXT_USE_SRTP => !offered_srtp.is_empty(),
            EXT_EXTENDED_MASTER_SECRET | EXT_RENEGOTIATION_INFO | EXT_EC_POINT_FORMATS => true,
            _ => false,
        };
        if !offered {
            return Err(DtlsError::UnsupportedExtension(e.typ));
        }
    }
    if ext.extended_master_secret() != Some(true) {
        return Err(DtlsError::ExtendedMasterSecretRequired);
    }
    if let Some(reneg) = ext.renegotiation_info()
        && !reneg?.is_empty()
    {
        return Err(DtlsError::BadRenegotiationInfo);
    }
    if let Some(formats) = ext.ec_point_formats()
        && !formats?.contains(&POINT_FORMAT_UNCOMPRESSED)
    {
        return Err(DtlsError::IllegalParameter("no uncompressed point format"));
    }
    let Some(use_srtp) = ext.use_srtp() else {
        return Ok(None);
    };
    let use_srtp = use_srtp?;
    let mut profiles = use_srtp.profiles.iter();
    let chosen = match (profiles.next(), profiles.next()) {
        (Some(p), None) => SrtpProfile::from_u16(p).filter(|p| offered_srtp.contains(p)),
        _ => None,
    };
    // RFC 5764 §4.1.3: we offered no MKI, so a non-empty one is not ours.
    if chosen.is_none() || !use_srtp.mki.is_empty() {
        return Err(DtlsError::IllegalParameter("use_srtp"));
    }
    Ok(chosen)
}
