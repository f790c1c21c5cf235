//! The honest side refuses a peer whose certificate does not match the SDP fingerprint,
//! a CertificateVerify or ServerKeyExchange altered by a man in the middle, a Finished
//! whose verify_data is wrong, a peer without the extended master secret, and records
//! with bad tags or replayed — with the fatal alert and `Failed` where the handshake
//! breaks, silently (counted) for records, and never surfacing application data before
//! the peer is authenticated.

mod dtls_util;

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use dtls_util::{Link, Side, app_data, certs, closed, failed, pair, pair_with};
use shoal_components::dtls::extension::{
    EXT_SIGNATURE_ALGORITHMS, EXT_SUPPORTED_GROUPS, write_ec_point_formats,
    write_extended_master_secret, write_u16_list_extension,
};
use shoal_components::dtls::{
    Certificate, ClientHello, ClientKeyExchange, ContentType, DTLS_1_2, DigitallySigned,
    Extensions, HandshakeFragments, HandshakeType, RecordHeader, Records, ServerKeyExchange,
    U16List, write_handshake,
};
use shoal_components::time::Time;
use shoal_systems::dtls::crypto::{
    EphemeralKey, NamedGroup, PrfHash, RecordCipher, extended_master_secret, key_block, verify_data,
};
use shoal_systems::dtls::{CipherSuite, DtlsConfig, DtlsConn, DtlsError, DtlsEvent, DtlsRole};

const DECRYPT_ERROR: u8 = 51;
const BAD_CERTIFICATE: u8 = 42;

/// Flips the last byte of the first handshake message of type `t` in a datagram.
fn tamper_message(d: &Bytes, t: HandshakeType) -> Option<Bytes> {
    let mut out = d.to_vec();
    let mut record_at = 0;
    let mut hit = false;
    for r in Records::new(d) {
        let r = r.ok()?;
        if r.header.epoch == 0 && r.header.content_type == ContentType::Handshake {
            let mut at = record_at + 13;
            for f in HandshakeFragments::new(r.fragment) {
                let f = f.ok()?;
                let end = at + 12 + f.body.len();
                if f.header.msg_type == t && !hit && !f.body.is_empty() {
                    out[end - 1] ^= 0x01;
                    hit = true;
                }
                at = end;
            }
        }
        record_at += r.raw.len();
    }
    hit.then(|| Bytes::from(out))
}

fn fingerprint_mismatch() {
    let (ccert, scert) = certs();
    let wrong = [0xee; 32];
    // The server pins a different client certificate.
    let mut p = pair_with(
        DtlsConfig::default(),
        DtlsConfig::default(),
        1,
        Link::clean(),
        scert.fingerprint_sha256(),
        wrong,
    );
    p.run_until(1000, |p| {
        failed(&p.server_events).is_some() && closed(&p.client_events).is_some()
    });
    assert_eq!(
        failed(&p.server_events),
        Some(&DtlsError::FingerprintMismatch)
    );
    assert_eq!(closed(&p.client_events), Some(Some(BAD_CERTIFICATE)));
    assert!(!p.server.is_connected() && !p.client.is_connected());

    // The client pins a different server certificate.
    let mut p = pair_with(
        DtlsConfig::default(),
        DtlsConfig::default(),
        2,
        Link::clean(),
        wrong,
        ccert.fingerprint_sha256(),
    );
    p.run_until(1000, |p| {
        failed(&p.client_events).is_some() && closed(&p.server_events).is_some()
    });
    assert_eq!(
        failed(&p.client_events),
        Some(&DtlsError::FingerprintMismatch)
    );
    assert_eq!(closed(&p.server_events), Some(Some(BAD_CERTIFICATE)));
}

fn tampered_signatures() {
    // CertificateVerify altered on its way to the server.
    let mut p = pair(
        DtlsConfig::default(),
        DtlsConfig::default(),
        3,
        Link::clean(),
    );
    p.mitm = Some(Box::new(|from, d| match from {
        Side::Client => Some(tamper_message(&d, HandshakeType::CertificateVerify).unwrap_or(d)),
        Side::Server => Some(d),
    }));
    p.run_until(1000, |p| failed(&p.server_events).is_some());
    assert_eq!(
        failed(&p.server_events),
        Some(&DtlsError::BadSignature(HandshakeType::CertificateVerify))
    );
    p.run_until(1000, |p| closed(&p.client_events).is_some());
    assert_eq!(closed(&p.client_events), Some(Some(DECRYPT_ERROR)));
    assert!(app_data(&p.server_events).is_empty());

    // ServerKeyExchange altered on its way to the client.
    let mut p = pair(
        DtlsConfig::default(),
        DtlsConfig::default(),
        4,
        Link::clean(),
    );
    p.mitm = Some(Box::new(|from, d| match from {
        Side::Server => Some(tamper_message(&d, HandshakeType::ServerKeyExchange).unwrap_or(d)),
        Side::Client => Some(d),
    }));
    p.run_until(1000, |p| failed(&p.client_events).is_some());
    assert_eq!(
        failed(&p.client_events),
        Some(&DtlsError::BadSignature(HandshakeType::ServerKeyExchange))
    );
}

/// A Finished record altered in flight fails its tag: dropped silently and counted,
/// never accepted; the handshake cannot complete without the real one.
fn tampered_finished_record() {
    let cfg = DtlsConfig {
        max_retransmits: 2,
        ..DtlsConfig::default()
    };
    let mut p = pair(cfg.clone(), cfg, 5, Link::clean());
    p.mitm = Some(Box::new(|_, d| {
        let mut out = d.to_vec();
        let mut at = 0;
        for r in Records::new(&d) {
            let Ok(r) = r else { break };
            if r.header.epoch == 1 {
                out[at + r.raw.len() - 1] ^= 0x80;
            }
            at += r.raw.len();
        }
        Some(Bytes::from(out))
    }));
    p.run_until(10_000, |p| failed(&p.client_events).is_some());
    assert!(!p.client.is_connected());
    assert!(!p.server.is_connected());
    assert!(p.server.stats().records_bad_tag > 0);
    assert_eq!(failed(&p.client_events), Some(&DtlsError::Timeout));
    assert!(app_data(&p.server_events).is_empty());
}

/// A dishonest client, written against the wire formats and the crypto directly: it
/// runs a real handshake with a shoal server but lets the test spoil one thing.
struct RawClient {
    random: [u8; 32],
    log: Vec<u8>,
}

#[derive(Clone, Copy, PartialEq)]
enum Spoil {
    /// Nothing: an honest client.
    Nothing,
    /// No extended_master_secret in ClientHello.
    NoEms,
    /// A wrong verify_data in Finished.
    Finished,
}

fn record(out: &mut BytesMut, ct: ContentType, epoch: u16, seq: u64, body: &[u8]) {
    RecordHeader {
        content_type: ct,
        version: DTLS_1_2,
        epoch,
        sequence_number: seq,
        length: body.len() as u16,
    }
    .write(out);
    out.extend_from_slice(body);
}

impl RawClient {
    fn handshake_record(
        &mut self,
        out: &mut BytesMut,
        seq: u16,
        rec_seq: u64,
        t: HandshakeType,
        body: &[u8],
    ) {
        let mut m = BytesMut::new();
        write_handshake(&mut m, t, seq, body);
        self.log.extend_from_slice(&m);
        record(out, ContentType::Handshake, 0, rec_seq, &m);
    }

    fn client_hello(&mut self, spoil: Spoil) -> BytesMut {
        let mut ext = BytesMut::new();
        write_u16_list_extension(&mut ext, EXT_SUPPORTED_GROUPS, &[29]);
        write_ec_point_formats(&mut ext);
        write_u16_list_extension(&mut ext, EXT_SIGNATURE_ALGORITHMS, &[0x0403]);
        if spoil != Spoil::NoEms {
            write_extended_master_secret(&mut ext);
        }
        let suites = [0xc0, 0x2b];
        let mut body = BytesMut::new();
        ClientHello {
            client_version: DTLS_1_2,
            random: self.random,
            session_id: &[],
            cookie: &[],
            cipher_suites: U16List::parse(&suites, 1, "suites").unwrap(),
            compression_methods: &[0],
            extensions: Extensions::parse(&ext).unwrap(),
        }
        .write(&mut body);
        let mut out = BytesMut::new();
        self.handshake_record(&mut out, 0, 0, HandshakeType::ClientHello, &body);
        out
    }

    /// Flight 5 after the server's flight 4 (whole messages, as shoal sends them), and
    /// the client's and server's write ciphers.
    fn flight5(
        &mut self,
        server_flight: &[Bytes],
        spoil: Spoil,
    ) -> (BytesMut, RecordCipher, RecordCipher) {
        let (ccert, _) = certs();
        let mut server_random = [0u8; 32];
        let mut ske_public = Vec::new();
        for d in server_flight {
            for r in Records::new(d) {
                let r = r.unwrap();
                for f in HandshakeFragments::new(r.fragment) {
                    let f = f.unwrap();
                    assert!(f.header.is_whole());
                    let mut m = BytesMut::new();
                    write_handshake(&mut m, f.header.msg_type, f.header.message_seq, f.body);
                    self.log.extend_from_slice(&m);
                    match f.header.msg_type {
                        HandshakeType::ServerHello => server_random.copy_from_slice(&f.body[2..34]),
                        HandshakeType::ServerKeyExchange => {
                            ske_public = ServerKeyExchange::parse(f.body).unwrap().public.to_vec()
                        }
                        _ => {}
                    }
                }
            }
        }
        let key = EphemeralKey::generate(NamedGroup::X25519).unwrap();
        let public = key.public_key().to_vec();
        let pre_master = key.agree(&ske_public).unwrap();
        let mut out = BytesMut::new();
        let mut b = BytesMut::new();
        Certificate::write(&[ccert.der()], &mut b);
        self.handshake_record(&mut out, 1, 1, HandshakeType::Certificate, &b);
        let mut b = BytesMut::new();
        ClientKeyExchange { public: &public }.write(&mut b);
        self.handshake_record(&mut out, 2, 2, HandshakeType::ClientKeyExchange, &b);
        let session_hash = ring::digest::digest(&ring::digest::SHA256, &self.log);
        let master = extended_master_secret(PrfHash::Sha256, &pre_master, session_hash.as_ref());
        let keys = key_block(
            CipherSuite::EcdheEcdsaAes128GcmSha256,
            &master,
            &self.random,
            &server_random,
        );
        let signature = ccert.sign(&self.log).unwrap();
        let mut b = BytesMut::new();
        DigitallySigned {
            scheme: 0x0403,
            signature: &signature,
        }
        .write(&mut b);
        self.handshake_record(&mut out, 3, 3, HandshakeType::CertificateVerify, &b);
        record(&mut out, ContentType::ChangeCipherSpec, 0, 4, &[1]);
        let hash = ring::digest::digest(&ring::digest::SHA256, &self.log);
        let mut vd = verify_data(PrfHash::Sha256, &master, b"client finished", hash.as_ref());
        if spoil == Spoil::Finished {
            vd[0] ^= 0xff;
        }
        let mut fin = BytesMut::new();
        write_handshake(&mut fin, HandshakeType::Finished, 4, &vd);
        let cipher = RecordCipher::new(
            CipherSuite::EcdheEcdsaAes128GcmSha256,
            &keys.client_write_key,
            keys.client_write_iv,
        )
        .unwrap();
        let start = out.len();
        RecordHeader {
            content_type: ContentType::Handshake,
            version: DTLS_1_2,
            epoch: 1,
            sequence_number: 0,
            length: 0,
        }
        .write(&mut out);
        out.extend_from_slice(&[0; 8]);
        out.extend_from_slice(&fin);
        cipher.seal_record(&mut out, start).unwrap();
        // Application data right behind it: must never surface.
        let start = out.len();
        RecordHeader {
            content_type: ContentType::ApplicationData,
            version: DTLS_1_2,
            epoch: 1,
            sequence_number: 1,
            length: 0,
        }
        .write(&mut out);
        out.extend_from_slice(&[0; 8]);
        out.extend_from_slice(b"smuggled");
        cipher.seal_record(&mut out, start).unwrap();
        let server_cipher = RecordCipher::new(
            CipherSuite::EcdheEcdsaAes128GcmSha256,
            &keys.server_write_key,
            keys.server_write_iv,
        )
        .unwrap();
        (out, cipher, server_cipher)
    }
}

fn shoal_server(seed: u8) -> DtlsConn {
    let (ccert, scert) = certs();
    DtlsConn::new(
        DtlsRole::Server,
        Arc::new(DtlsConfig::default()),
        scert,
        ccert.fingerprint_sha256(),
        [seed; 32],
        Time::ZERO,
    )
}

fn events(c: &mut DtlsConn) -> Vec<DtlsEvent> {
    std::iter::from_fn(|| c.poll_event()).collect()
}

/// The plaintext alert (level, description) in a datagram, if it is one.
fn plaintext_alert(d: &[u8]) -> Option<(u8, u8)> {
    let r = Records::new(d).next()?.ok()?;
    (r.header.content_type == ContentType::Alert && r.header.epoch == 0)
        .then(|| (r.fragment[0], r.fragment[1]))
}

fn dishonest_client() {
    // A wrong Finished under the right keys: decrypt_error and Failed(BadFinished).
    let mut server = shoal_server(1);
    let mut raw = RawClient {
        random: [9; 32],
        log: Vec::new(),
    };
    let ch = raw.client_hello(Spoil::Finished);
    server.handle_datagram(Time::ZERO, &ch).unwrap();
    let flight4: Vec<_> = std::iter::from_fn(|| server.poll_transmit()).collect();
    let (f5, _, _) = raw.flight5(&flight4, Spoil::Finished);
    assert_eq!(
        server.handle_datagram(Time::ZERO, &f5),
        Err(DtlsError::BadFinished)
    );
    let alert = server.poll_transmit().expect("an alert");
    assert_eq!(plaintext_alert(&alert), Some((2, DECRYPT_ERROR)));
    let ev = events(&mut server);
    assert_eq!(failed(&ev), Some(&DtlsError::BadFinished));
    assert!(
        app_data(&ev).is_empty(),
        "data surfaced before authentication"
    );
    assert!(!server.is_connected());
    // Nothing more is accepted.
    server.handle_datagram(Time::ZERO, &f5).unwrap();
    assert!(events(&mut server).is_empty());

    // No extended master secret: handshake_failure (RFC 7627 §5.2).
    let mut server = shoal_server(2);
    let mut raw = RawClient {
        random: [8; 32],
        log: Vec::new(),
    };
    let ch = raw.client_hello(Spoil::NoEms);
    assert_eq!(
        server.handle_datagram(Time::ZERO, &ch),
        Err(DtlsError::ExtendedMasterSecretRequired)
    );
    let alert = server.poll_transmit().expect("an alert");
    assert_eq!(plaintext_alert(&alert), Some((2, 40)));
}

/// An honest client built from the primitives completes the handshake with a shoal
/// server (the application data it sent right behind Finished is delivered after
/// Connected); a ClientHello after the handshake is refused with a no_renegotiation
/// warning (RFC 5746 §4.2 via RFC 5246 §7.2.2) and the connection stays up.
fn renegotiation_refused() {
    let mut server = shoal_server(3);
    let mut raw = RawClient {
        random: [7; 32],
        log: Vec::new(),
    };
    let ch = raw.client_hello(Spoil::Nothing);
    server.handle_datagram(Time::ZERO, &ch).unwrap();
    let flight4: Vec<_> = std::iter::from_fn(|| server.poll_transmit()).collect();
    let (f5, client_cipher, server_cipher) = raw.flight5(&flight4, Spoil::Nothing);
    server.handle_datagram(Time::ZERO, &f5).unwrap();
    assert!(server.is_connected());
    let ev = events(&mut server);
    assert!(matches!(ev[0], DtlsEvent::Connected { .. }), "{ev:?}");
    assert_eq!(&app_data(&ev)[0][..], b"smuggled");
    // Flight 6: ChangeCipherSpec, then Finished in epoch 1, which opens with the
    // server's key.
    let flight6: Vec<_> = std::iter::from_fn(|| server.poll_transmit()).collect();
    let mut saw_finished = false;
    for d in &flight6 {
        for r in Records::new(d) {
            let r = r.unwrap();
            if r.header.epoch == 1 {
                let mut rec = r.raw.to_vec();
                let plain = server_cipher.open_record(&mut rec).unwrap();
                assert_eq!(plain[0], HandshakeType::Finished as u8);
                saw_finished = true;
            }
        }
    }
    assert!(saw_finished);

    // A renegotiating ClientHello, protected under the current keys.
    let mut body = BytesMut::new();
    ClientHello {
        client_version: DTLS_1_2,
        random: [6; 32],
        session_id: &[],
        cookie: &[],
        cipher_suites: U16List::parse(&[0xc0, 0x2b], 1, "s").unwrap(),
        compression_methods: &[0],
        extensions: Extensions::default(),
    }
    .write(&mut body);
    let mut msg = BytesMut::new();
    write_handshake(&mut msg, HandshakeType::ClientHello, 5, &body);
    let mut out = BytesMut::new();
    RecordHeader {
        content_type: ContentType::Handshake,
        version: DTLS_1_2,
        epoch: 1,
        sequence_number: 2,
        length: 0,
    }
    .write(&mut out);
    out.extend_from_slice(&[0; 8]);
    out.extend_from_slice(&msg);
    client_cipher.seal_record(&mut out, 0).unwrap();
    server.handle_datagram(Time::ZERO, &out).unwrap();
    let reply = server.poll_transmit().expect("an alert");
    let r = Records::new(&reply).next().unwrap().unwrap();
    assert_eq!(r.header.content_type, ContentType::Alert);
    let mut rec = r.raw.to_vec();
    let plain = server_cipher.open_record(&mut rec).unwrap();
    assert_eq!(plain, &[1, 100]);
    assert!(server.is_connected());
}

/// After the handshake: a record with a bad tag is dropped and counted, a replayed one
/// too, and the connection carries on.
fn bad_tag_and_replay() {
    let mut p = pair(
        DtlsConfig::default(),
        DtlsConfig::default(),
        6,
        Link::clean(),
    );
    assert!(p.handshake(1000));
    let base = p.server.stats();
    let mut n = 0;
    p.mitm = Some(Box::new(move |from, d| {
        if from != Side::Client {
            return Some(d);
        }
        n += 1;
        if n == 1 {
            let mut out = d.to_vec();
            let last = out.len() - 1;
            out[last] ^= 1;
            return Some(Bytes::from(out));
        }
        Some(d)
    }));
    p.client.send_application_data(b"tampered").unwrap();
    p.run_until(100, |_| false);
    assert_eq!(p.server.stats().records_bad_tag, base.records_bad_tag + 1);
    assert!(app_data(&p.server_events).is_empty());

    // Replay: the same datagram twice gives one record.
    p.mitm = Some(Box::new(|_, d| Some(d)));
    p.client.send_application_data(b"once").unwrap();
    let d = p.client.poll_transmit().unwrap();
    p.server.handle_datagram(p.now, &d).unwrap();
    p.server.handle_datagram(p.now, &d).unwrap();
    p.flush();
    let got = app_data(&p.server_events);
    assert_eq!(got.len(), 1);
    assert_eq!(&got[0][..], b"once");
    assert_eq!(p.server.stats().records_replayed, base.records_replayed + 1);
    assert!(p.server.is_connected() && p.client.is_connected());
}

#[test]
fn dtls_rejects_bad_peers() {
    fingerprint_mismatch();
    tampered_signatures();
    tampered_finished_record();
    dishonest_client();
    renegotiation_refused();
    bad_tag_and_replay();
}
