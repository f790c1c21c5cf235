//! The server's side of the full handshake (RFC 5246 §7.3, RFC 6347 §4.2.4 Figure 1):
//! an optional stateless cookie exchange, then ServerHello, Certificate,
//! ServerKeyExchange, CertificateRequest, ServerHelloDone; then the client's flight;
//! then ChangeCipherSpec and Finished.

use crate::dtls::extension::{
    POINT_FORMAT_UNCOMPRESSED, write_ec_point_formats, write_extended_master_secret,
    write_renegotiation_info, write_use_srtp,
};
use crate::dtls::messages::{CERT_TYPE_ECDSA_SIGN, SIG_ECDSA_SHA256, parse_finished};
use crate::dtls::{
    Certificate, CertificateRequest, CertificateVerify, ClientHello, ClientKeyExchange, DTLS_1_0,
    DTLS_1_2, DigitallySigned, Extensions, HandshakeType, HelloVerifyRequest, ServerHello,
    ServerKeyExchange,
};
use crate::time::Time;
use bytes::BytesMut;
use ring::hmac;

use super::DtlsError;
use super::client::ring_eq;
use super::connection::DtlsConn;
use super::crypto::{EphemeralKey, NamedGroup, RecordCipher, SrtpProfile, fill_random};
use super::handshake::{Expect, SIGNATURE_ALGORITHMS, body};
use super::reassembly::Message;
use super::send::FlightItem;

/// TLS_EMPTY_RENEGOTIATION_INFO_SCSV {0x00, 0xFF}, which RFC 5746 §3.6 has the server
/// check for.
const EMPTY_RENEGOTIATION_INFO_SCSV: u16 = 0x00ff;

/// What the server chose from a ClientHello.
struct Choice {
    suite: super::crypto::CipherSuite,
    group: NamedGroup,
    srtp: Option<SrtpProfile>,
    secure_renegotiation: bool,
    point_formats: bool,
}

impl DtlsConn {
    /// A server starts waiting, "with empty buffers and no retransmit timer" (RFC 6347
    /// §4.2.4). With hello_verify it draws its cookie secret.
    pub(super) fn server_init(&mut self) -> Result<(), DtlsError> {
        if self.config.hello_verify {
            let hs = self.hs_mut()?;
            if fill_random(&mut hs.cookie_secret).is_err() {
                // Fall back on the caller's randomness, which is all we have left.
                let random = hs.server_random;
                hs.cookie_secret = ring::digest::digest(&ring::digest::SHA256, &random)
                    .as_ref()
                    .try_into()
                    .unwrap_or([7; 32]);
            }
        }
        Ok(())
    }

    pub(super) fn server_message(&mut self, now: Time, m: Message) -> Result<(), DtlsError> {
        let expect = self.hs_mut()?.expect;
        match (expect, m.msg_type) {
            (Expect::ClientHello, HandshakeType::ClientHello) if m.epoch == 0 => {
                self.on_client_hello(now, &m)
            }
            (Expect::ClientCertificate, HandshakeType::Certificate) => {
                self.on_client_certificate(&m)
            }
            (Expect::ClientKeyExchange, HandshakeType::ClientKeyExchange) => {
                self.on_client_key_exchange(&m)
            }
            (Expect::CertificateVerify, HandshakeType::CertificateVerify) => {
                self.on_certificate_verify(&m)
            }
            (Expect::ClientFinished, HandshakeType::Finished) if m.epoch == 1 => {
                self.on_client_finished(now, &m)
            }
            (_, t) => Err(DtlsError::UnexpectedMessage(t)),
        }
    }

    fn on_client_hello(&mut self, now: Time, m: &Message) -> Result<(), DtlsError> {
        let ch = ClientHello::parse(&m.body)?;
        if self.config.hello_verify {
            let cookie = self.cookie(&ch)?;
            // §4.2.1: "If a server receives a ClientHello with an invalid cookie, it
            // SHOULD treat it the same as a ClientHello with no cookie."
            if !ring_eq(ch.cookie, &cookie) {
                return self.send_hello_verify_request(m, &cookie);
            }
        }
        let choice = self.choose(&ch)?;
        let hs = self.hs_mut()?;
        hs.client_random = ch.random;
        hs.suite = Some(choice.suite);
        hs.srtp = choice.srtp;
        hs.secure_renegotiation = choice.secure_renegotiation;
        hs.client_sent_point_formats = choice.point_formats;
        // §4.2.6: a cookie exchange's first ClientHello and HelloVerifyRequest are not
        // hashed; this ClientHello starts the log.
        hs.log.clear();
        hs.log_message(m.msg_type, m.seq, &m.body)?;
        // §4.2.2: our messages are numbered from the ClientHello's message_seq, so a
        // ServerHello after a cookie exchange is 1; §4.2.1: "the server MUST use the
        // record sequence number in the ClientHello as the record sequence number in
        // its initial ServerHello".
        hs.send_seq = m.seq;
        self.send.set_epoch0_seq(m.record_seq);
        let flight = self.server_flight(choice.group)?;
        self.hs_mut()?.expect = Expect::ClientCertificate;
        self.send_flight(now, flight, true)
    }

    /// RFC 6347 §4.2.1: `Cookie = HMAC(Secret, Client-IP, Client-Parameters)`; the
    /// connection is per peer address, so the parameters are what remains: version,
    /// random, session_id, cipher_suites and compression methods.
    fn cookie(&mut self, ch: &ClientHello) -> Result<[u8; 32], DtlsError> {
        let hs = self.hs_mut()?;
        let key = hmac::Key::new(hmac::HMAC_SHA256, &hs.cookie_secret);
        let mut ctx = hmac::Context::with_key(&key);
        ctx.update(&ch.client_version.to_be_bytes());
        ctx.update(&ch.random);
        ctx.update(&[ch.session_id.len() as u8]);
        ctx.update(ch.session_id);
        ctx.update(ch.cipher_suites.as_bytes());
        ctx.update(ch.compression_methods);
        let mut out = [0u8; 32];
        out.copy_from_slice(ctx.sign().as_ref());
        Ok(out)
    }

    /// Answers statelessly: HelloVerifyRequest with the ClientHello's message_seq and
    /// record sequence number (RFC 6347 §4.2.1), DTLS 1.0 as the version ("DTLS 1.2
    /// server implementations SHOULD use DTLS version 1.0"). Nothing is kept.
    fn send_hello_verify_request(&mut self, m: &Message, cookie: &[u8]) -> Result<(), DtlsError> {
        let mut b = BytesMut::with_capacity(3 + cookie.len());
        HelloVerifyRequest {
            server_version: DTLS_1_0,
            cookie,
        }
        .write(&mut b);
        self.send.set_epoch0_seq(m.record_seq);
        self.reasm.forget_popped();
        self.stats.hello_verify_requests += 1;
        self.send_stateless(&[FlightItem::Handshake {
            msg_type: HandshakeType::HelloVerifyRequest,
            seq: m.seq,
            epoch: 0,
            body: b.freeze(),
        }])
    }

    /// Picks suite, group and SRTP profile by the server's preference, and refuses a
    /// client shoal cannot or will not serve.
    fn choose(&self, ch: &ClientHello) -> Result<Choice, DtlsError> {
        let config = &self.config;
        // DTLS versions are the 1's complement of the TLS ones, so they count down
        // under the high byte 254 (RFC 6347 §4.1): 0xfeff is 1.0, 0xfefd 1.2, 0xfefc
        // 1.3. A client offering 1.2 or higher gets 1.2 (RFC 5246 §7.4.1.2, RFC 5746
        // §3.6: servers "MUST accept version numbers higher than their highest version
        // number"); anything without the DTLS high byte (a TLS 0x0303, a zero) is no
        // DTLS version at all. supported_versions, with which Chromium offers 1.3, is
        // ignored: a 1.2 server does not know it (RFC 5246 §7.4.1.4).
        let [major, _] = ch.client_version.to_be_bytes();
        if major != 0xfe || ch.client_version > DTLS_1_2 {
            return Err(DtlsError::ProtocolVersion(ch.client_version));
        }
        // RFC 5246 §7.4.1.2: the list "MUST contain, and all implementations MUST
        // support, CompressionMethod.null".
        if !ch.compression_methods.contains(&0) {
            return Err(DtlsError::IllegalParameter("no null compression"));
        }
        let suite = config
            .cipher_suites
            .iter()
            .copied()
            .find(|s| ch.cipher_suites.contains(s.to_u16()))
            .ok_or(DtlsError::NoSharedCipherSuite)?;
        let ext = &ch.extensions;
        // RFC 7627 §5.2: the server "SHOULD abort the handshake if it does not wish to
        // interoperate with legacy clients" — shoal does not.
        if ext.extended_master_secret() != Some(true) {
            return Err(DtlsError::ExtendedMasterSecretRequired);
        }
        // RFC 5746 §3.6: a renegotiation_info must be empty on an initial handshake.
        let mut secure_renegotiation = ch.cipher_suites.contains(EMPTY_RENEGOTIATION_INFO_SCSV);
        if let Some(reneg) = ext.renegotiation_info() {
            if !reneg?.is_empty() {
                return Err(DtlsError::BadRenegotiationInfo);
            }
            secure_renegotiation = true;
        }
        let group = match ext.supported_groups() {
            Some(groups) => {
                let groups = groups?;
                config
                    .groups
                    .iter()
                    .copied()
                    .find(|g| groups.contains(g.to_u16()))
                    .ok_or(DtlsError::NoSharedGroup)?
            }
            None => config
                .groups
                .first()
                .copied()
                .ok_or(DtlsError::NoSharedGroup)?,
        };
        let point_formats = match ext.ec_point_formats() {
            Some(formats) => {
                if !formats?.contains(&POINT_FORMAT_UNCOMPRESSED) {
                    return Err(DtlsError::IllegalParameter("no uncompressed point format"));
                }
                true
            }
            None => false,
        };
        // Our certificate signs with {sha256, ecdsa}; without signature_algorithms the
        // client would expect SHA-1 (RFC 5246 §7.4.1.4.1), which shoal does not sign.
        match ext.signature_algorithms() {
            Some(algs) if algs?.contains(SIG_ECDSA_SHA256) => {}
            _ => return Err(DtlsError::NoSharedSignatureAlgorithm),
        }
        // RFC 5764 §4.1.1: pick a profile the client offered; with none in common, no
        // use_srtp in the answer.
        let srtp = match ext.use_srtp() {
            Some(use_srtp) => {
                let offered = use_srtp?.profiles;
                config
                    .srtp_profiles
                    .iter()
                    .copied()
                    .find(|p| offered.contains(p.to_u16()))
            }
            None => None,
        };
        // A session with media cannot fall back to DTLS alone.
        if srtp.is_none() && self.srtp_required {
            return Err(DtlsError::NoSharedSrtpProfile);
        }
        Ok(Choice {
            suite,
            group,
            srtp,
            secure_renegotiation,
            point_formats,
        })
    }

    /// Flight 4: ServerHello, Certificate, ServerKeyExchange, CertificateRequest,
    /// ServerHelloDone.
    fn server_flight(&mut self, group: NamedGroup) -> Result<Vec<FlightItem>, DtlsError> {
        let cert = self.cert.clone();
        let hs = self.hs_mut()?;
        let suite = hs.suite()?;
        let mut ext = BytesMut::with_capacity(32);
        if hs.secure_renegotiation {
            write_renegotiation_info(&mut ext, &[]);
        }
        // RFC 7627 §5.2: "it MUST include the extension in its ServerHello message".
        write_extended_master_secret(&mut ext);
        if let Some(profile) = hs.srtp {
            // RFC 5764 §4.1.3: an empty srtp_mki says we use no MKI.
            write_use_srtp(&mut ext, &[profile.to_u16()], &[]);
        }
        if hs.client_sent_point_formats {
            write_ec_point_formats(&mut ext);
        }
        let mut flight = Vec::with_capacity(5);
        let mut b = body();
        ServerHello {
            server_version: DTLS_1_2,
            random: hs.server_random,
            session_id: &[],
            cipher_suite: suite.to_u16(),
            compression_method: 0,
            extensions: Extensions::parse(&ext)?,
        }
        .write(&mut b);
        flight.push(hs.outgoing(HandshakeType::ServerHello, 0, b)?);

        let mut b = body();
        Certificate::write(&[cert.der()], &mut b);
        flight.push(hs.outgoing(HandshakeType::Certificate, 0, b)?);

        let key = EphemeralKey::generate(group)?;
        let mut b = body();
        ServerKeyExchange::write_params(group.to_u16(), key.public_key(), &mut b);
        // RFC 8422 §5.4: sign ClientHello.random + ServerHello.random + params.
        let mut signed = Vec::with_capacity(64 + b.len());
        signed.extend_from_slice(&hs.client_random);
        signed.extend_from_slice(&hs.server_random);
        signed.extend_from_slice(&b);
        let signature = cert.sign(&signed)?;
        DigitallySigned {
            scheme: SIG_ECDSA_SHA256,
            signature: &signature,
        }
        .write(&mut b);
        hs.ephemeral = Some(key);
        flight.push(hs.outgoing(HandshakeType::ServerKeyExchange, 0, b)?);

        // RFC 5764 §4.1: "The CertificateRequest, client and server Certificates, and
        // CertificateVerify will be sent in DTLS-SRTP" (mutual DTLS, RFC 5763 §1).
        let mut b = body();
        CertificateRequest::write(&[CERT_TYPE_ECDSA_SIGN], &SIGNATURE_ALGORITHMS, &mut b);
        flight.push(hs.outgoing(HandshakeType::CertificateRequest, 0, b)?);

        flight.push(hs.outgoing(HandshakeType::ServerHelloDone, 0, body())?);
        Ok(flight)
    }

    /// RFC 5246 §7.4.6: "If the client does not send any certificates, the server MAY
    /// ... respond with a fatal handshake_failure alert" — a WebRTC server must.
    fn on_client_certificate(&mut self, m: &Message) -> Result<(), DtlsError> {
        let key = self.check_peer_certificate(&m.body)?;
        let hs = self.hs_mut()?;
        hs.peer_key = Some(key);
        hs.log_message(m.msg_type, m.seq, &m.body)?;
        hs.expect = Expect::ClientKeyExchange;
        Ok(())
    }

    /// RFC 8422 §5.7: the server "retrieves the client's ephemeral ECDH public key ...
    /// and checks that it is on the same elliptic curve as the server's ECDH key".
    fn on_client_key_exchange(&mut self, m: &Message) -> Result<(), DtlsError> {
        let cke = ClientKeyExchange::parse(&m.body)?;
        let hs = self.hs_mut()?;
        let key = hs
            .ephemeral
            .take()
            .ok_or(DtlsError::Internal("no ephemeral key"))?;
        let pre_master = key.agree(cke.public)?;
        hs.log_message(m.msg_type, m.seq, &m.body)?;
        let keys = hs.derive_keys(&pre_master)?;
        let suite = hs.suite()?;
        hs.expect = Expect::CertificateVerify;
        self.read_cipher = Some(RecordCipher::new(
            suite,
            &keys.client_write_key,
            keys.client_write_iv,
        )?);
        self.send.set_cipher(RecordCipher::new(
            suite,
            &keys.server_write_key,
            keys.server_write_iv,
        )?);
        Ok(())
    }

    /// RFC 8422 §5.8: the server "verifies the signature using the public key it
    /// received in the client's Certificate message", over the log up to
    /// ClientKeyExchange.
    fn on_certificate_verify(&mut self, m: &Message) -> Result<(), DtlsError> {
        let cv = CertificateVerify::parse(&m.body)?;
        let hs = self.hs_mut()?;
        hs.verify_peer_signature(
            cv.signed.scheme,
            &hs.log,
            cv.signed.signature,
            HandshakeType::CertificateVerify,
        )?;
        hs.log_message(m.msg_type, m.seq, &m.body)?;
        hs.expect = Expect::ClientFinished;
        Ok(())
    }

    /// The client's Finished, then flight 6: ChangeCipherSpec and our Finished. The
    /// server is then done but keeps flight 6 to answer a retransmitted flight 5
    /// (RFC 6347 §4.2.4).
    fn on_client_finished(&mut self, now: Time, m: &Message) -> Result<(), DtlsError> {
        let received = parse_finished(&m.body)?;
        let hs = self.hs_mut()?;
        let expected = hs.finished(b"client finished")?;
        if !ring_eq(&received, &expected) {
            return Err(DtlsError::BadFinished);
        }
        hs.log_message(m.msg_type, m.seq, &m.body)?;
        let verify_data = hs.finished(b"server finished")?;
        let mut b = body();
        b.extend_from_slice(&verify_data);
        let finished = hs.outgoing(HandshakeType::Finished, 1, b)?;
        self.send.epoch = 1;
        self.send_flight(now, vec![FlightItem::ChangeCipherSpec, finished], false)?;
        self.connected()
    }
}
