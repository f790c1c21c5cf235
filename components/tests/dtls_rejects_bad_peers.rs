//! The honest side refuses a peer whose certificate does not match the SDP fingerprint,
//! a CertificateVerify or ServerKeyExchange altered by a man in the middle, a Finished
//! whose verify_data is wrong or that comes unprotected, a peer without the extended
//! master secret, a client that leaves out its Certificate (or sends an empty one) or
//! its CertificateVerify, a server that leaves out its Certificate or
//! ServerKeyExchange, and records with bad tags or replayed — with the fatal alert and
//! `Failed` where the handshake breaks, silently (counted) for records, and never
//! surfacing application data before the peer is authenticated.

mod dtls_util;

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use dtls_util::raw::{ClientSpoil, RawClient, RawServer, ServerSpoil, alert_in};
use dtls_util::{Link, Side, app_data, certs, closed, failed, pair, pair_with};
use shoal_components::dtls::{
    ClientHello, ContentType, DTLS_1_2, Extensions, HandshakeFragments, HandshakeType, Records,
    U16List,
};
use shoal_components::dtls::{DtlsConfig, DtlsConn, DtlsError, DtlsEvent, DtlsRole};
use shoal_components::time::Time;

const UNEXPECTED_MESSAGE: u8 = 10;
const HANDSHAKE_FAILURE: u8 = 40;
const BAD_CERTIFICATE: u8 = 42;
const DECRYPT_ERROR: u8 = 51;
const NO_RENEGOTIATION: u8 = 100;

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

/// A shoal endpoint in `role` that pins the other test certificate.
fn shoal(role: DtlsRole, seed: u8) -> DtlsConn {
    let (ccert, scert) = certs();
    let (ours, theirs) = match role {
        DtlsRole::Client => (ccert, scert),
        DtlsRole::Server => (scert, ccert),
    };
    let fingerprint = theirs.fingerprint_sha256();
    let config = Arc::new(DtlsConfig::default());
    DtlsConn::new(role, config, ours, fingerprint, [seed; 32], Time::ZERO)
}

fn shoal_server(seed: u8) -> DtlsConn {
    shoal(DtlsRole::Server, seed)
}

fn shoal_client(seed: u8) -> DtlsConn {
    shoal(DtlsRole::Client, seed)
}

fn events(c: &mut DtlsConn) -> Vec<DtlsEvent> {
    std::iter::from_fn(|| c.poll_event()).collect()
}

fn drain(c: &mut DtlsConn) -> Vec<Bytes> {
    std::iter::from_fn(|| c.poll_transmit()).collect()
}

/// A shoal server against a client that spoils its flight 5: each is refused with its
/// fatal alert, no Connected, and the application data sealed right before and after
/// the Finished never surfaces.
fn dishonest_client() {
    let cases = [
        // RFC 5246 §7.4.6: a client asked for a certificate "MUST send a certificate
        // message"; without one, ClientKeyExchange comes where Certificate should.
        (
            ClientSpoil::NoCertificate,
            DtlsError::UnexpectedMessage(HandshakeType::ClientKeyExchange),
            UNEXPECTED_MESSAGE,
        ),
        // An empty certificate_list: handshake_failure (RFC 5246 §7.4.6).
        (
            ClientSpoil::EmptyCertificate,
            DtlsError::NoCertificate,
            HANDSHAKE_FAILURE,
        ),
        (
            ClientSpoil::NoCertificateVerify,
            DtlsError::UnexpectedMessage(HandshakeType::Finished),
            UNEXPECTED_MESSAGE,
        ),
        // The right verify_data unprotected: a Finished counts only in epoch 1.
        (
            ClientSpoil::PlaintextFinished,
            DtlsError::UnexpectedMessage(HandshakeType::Finished),
            UNEXPECTED_MESSAGE,
        ),
        (
            ClientSpoil::BadFinished,
            DtlsError::BadFinished,
            DECRYPT_ERROR,
        ),
    ];
    for (i, (spoil, error, alert)) in cases.into_iter().enumerate() {
        let mut server = shoal_server(i as u8);
        let mut raw = RawClient::new([9; 32]);
        server
            .handle_datagram(Time::ZERO, &raw.client_hello(0))
            .unwrap();
        let flight4 = drain(&mut server);
        let f5 = raw.flight5(&flight4, spoil);
        let d = raw.write_with(&f5, Some(b"before Finished"), Some(b"after Finished"));
        assert_eq!(
            server.handle_datagram(Time::ZERO, &d),
            Err(error.clone()),
            "{spoil:?}"
        );
        let out = drain(&mut server);
        assert_eq!(out.len(), 1, "{spoil:?}: only the alert");
        assert_eq!(alert_in(&out[0], None), Some((2, alert)), "{spoil:?}");
        let ev = events(&mut server);
        assert_eq!(ev, [DtlsEvent::Failed(error)], "{spoil:?}");
        assert!(!server.is_connected());
        // Nothing more is accepted.
        server.handle_datagram(Time::ZERO, &d).unwrap();
        assert!(events(&mut server).is_empty());
        assert!(drain(&mut server).is_empty());
    }

    // No extended master secret: handshake_failure (RFC 7627 §5.2).
    let mut server = shoal_server(9);
    let mut raw = RawClient::new([8; 32]);
    raw.ems = false;
    assert_eq!(
        server.handle_datagram(Time::ZERO, &raw.client_hello(0)),
        Err(DtlsError::ExtendedMasterSecretRequired)
    );
    let alert = server.poll_transmit().expect("an alert");
    assert_eq!(alert_in(&alert, None), Some((2, HANDSHAKE_FAILURE)));
}

/// A shoal client against a server that spoils its flights: each is refused with its
/// fatal alert, no Connected, and the application data sealed behind a bad Finished
/// never surfaces. The honest case first, to show the raw server is right.
fn dishonest_server() {
    let cases = [
        (ServerSpoil::Nothing, None, 0),
        // RFC 7627 §5.2: a client "MUST abort the handshake" when the server does not
        // use the extension (shoal requires it).
        (
            ServerSpoil::NoEms,
            Some(DtlsError::ExtendedMasterSecretRequired),
            HANDSHAKE_FAILURE,
        ),
        (
            ServerSpoil::NoCertificate,
            Some(DtlsError::UnexpectedMessage(
                HandshakeType::ServerKeyExchange,
            )),
            UNEXPECTED_MESSAGE,
        ),
        (
            ServerSpoil::NoServerKeyExchange,
            Some(DtlsError::UnexpectedMessage(
                HandshakeType::CertificateRequest,
            )),
            UNEXPECTED_MESSAGE,
        ),
        (
            ServerSpoil::BadFinished,
            Some(DtlsError::BadFinished),
            DECRYPT_ERROR,
        ),
    ];
    for (i, (spoil, error, alert)) in cases.into_iter().enumerate() {
        let mut client = shoal_client(i as u8);
        let hello = drain(&mut client);
        let mut raw = RawServer::new([i as u8 + 1; 32]);
        let f4 = raw.flight4(&hello[0], spoil);
        let got = client.handle_datagram(Time::ZERO, &f4);
        let mut out = drain(&mut client);
        if got.is_ok() {
            let f6 = raw.flight6(&out, spoil, Some(b"server data"));
            let got = client.handle_datagram(Time::ZERO, &f6);
            assert_eq!(got.err(), error, "{spoil:?}");
            out = drain(&mut client);
        } else {
            assert_eq!(got.err(), error, "{spoil:?}");
        }
        let ev = events(&mut client);
        let Some(error) = error else {
            assert!(client.is_connected());
            assert_eq!(&app_data(&ev)[0][..], b"server data");
            continue;
        };
        // After flight 5 the client writes in epoch 1, so its alert is sealed.
        let cipher = raw.keys.as_ref().map(|k| &k.client);
        assert_eq!(out.len(), 1, "{spoil:?}: only the alert");
        assert_eq!(alert_in(&out[0], cipher), Some((2, alert)), "{spoil:?}");
        assert_eq!(ev, [DtlsEvent::Failed(error)], "{spoil:?}");
        assert!(!client.is_connected());
    }
}

/// An honest client built from the primitives completes the handshake with a shoal
/// server (the application data it sent right behind Finished is delivered after
/// Connected); a ClientHello after the handshake is refused with a no_renegotiation
/// warning (RFC 5746 §4.2 via RFC 5246 §7.2.2) and the connection stays up.
fn renegotiation_refused() {
    let mut server = shoal_server(3);
    let mut raw = RawClient::new([7; 32]);
    server
        .handle_datagram(Time::ZERO, &raw.client_hello(0))
        .unwrap();
    let flight4 = drain(&mut server);
    let f5 = raw.flight5(&flight4, ClientSpoil::Nothing);
    let d = raw.write_with(&f5, None, Some(b"smuggled"));
    server.handle_datagram(Time::ZERO, &d).unwrap();
    assert!(server.is_connected());
    let ev = events(&mut server);
    assert!(matches!(ev[0], DtlsEvent::Connected { .. }), "{ev:?}");
    assert_eq!(&app_data(&ev)[0][..], b"smuggled");
    // Flight 6: ChangeCipherSpec, then Finished in epoch 1, which opens with the
    // server's key.
    let server_cipher = &raw.keys.as_ref().unwrap().server;
    let mut saw_finished = false;
    for d in drain(&mut server) {
        for r in Records::new(&d) {
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
    let d = raw.sealed_handshake(HandshakeType::ClientHello, 5, &body);
    server.handle_datagram(Time::ZERO, &d).unwrap();
    let reply = server.poll_transmit().expect("an alert");
    let server_cipher = &raw.keys.as_ref().unwrap().server;
    assert_eq!(
        alert_in(&reply, Some(server_cipher)),
        Some((1, NO_RENEGOTIATION))
    );
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
    dishonest_server();
    renegotiation_refused();
    bad_tag_and_replay();
}
