//! Chromium 156's real ClientHello (1413 bytes in two datagrams, offering DTLS 1.3 in
//! supported_versions and an X25519MLKEM768 key share) must get a DTLS 1.2 answer from
//! shoal's server: ServerHello 0xfefd without supported_versions, with use_srtp (an
//! AEAD profile) and extended_master_secret, then Certificate, ServerKeyExchange,
//! CertificateRequest and ServerHelloDone.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use shoal_components::dtls::crypto::verify_ecdsa_p256_sha256;
use shoal_components::dtls::extension::{EXT_SUPPORTED_VERSIONS, EXT_USE_SRTP};
use shoal_components::dtls::messages::{CERT_TYPE_ECDSA_SIGN, SIG_ECDSA_SHA256};
use shoal_components::dtls::{
    Certificate, CertificateRequest, ContentType, DTLS_1_2, HandshakeFragments, HandshakeType,
    Records, ServerHello, ServerKeyExchange, UseSrtp,
};
use shoal_components::dtls::{DtlsCertificate, DtlsConfig, DtlsConn, DtlsRole, SrtpProfile};
use shoal_components::time::Time;

/// A committed capture; its absence is a broken checkout, not a reason to skip.
fn fixture(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/dtls")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("fixture {}: {e}", path.display()))
}

/// (type, message_seq, body, record sequence number) of every handshake message in
/// `datagrams`, which must be whole fragments in epoch 0.
fn messages(datagrams: &[bytes::Bytes]) -> Vec<(HandshakeType, u16, Vec<u8>, u64)> {
    let mut out = Vec::new();
    for d in datagrams {
        assert!(d.len() <= 1200);
        for r in Records::new(d) {
            let r = r.unwrap();
            assert_eq!(r.header.version, DTLS_1_2);
            assert_eq!(r.header.epoch, 0);
            assert_eq!(r.header.content_type, ContentType::Handshake);
            for f in HandshakeFragments::new(r.fragment) {
                let f = f.unwrap();
                assert!(f.header.is_whole(), "flight 4 fits one 1200-byte datagram");
                out.push((
                    f.header.msg_type,
                    f.header.message_seq,
                    f.body.to_vec(),
                    r.header.sequence_number,
                ));
            }
        }
    }
    out
}

fn check_server_flight(
    conn: &mut DtlsConn,
    cert: &DtlsCertificate,
    client_random: &[u8],
    server_random: [u8; 32],
    first: bool,
) {
    let datagrams: Vec<_> = std::iter::from_fn(|| conn.poll_transmit()).collect();
    assert!(!datagrams.is_empty(), "no answer to Chromium's ClientHello");
    let msgs = messages(&datagrams);
    let types: Vec<_> = msgs.iter().map(|m| m.0).collect();
    assert_eq!(
        types,
        [
            HandshakeType::ServerHello,
            HandshakeType::Certificate,
            HandshakeType::ServerKeyExchange,
            HandshakeType::CertificateRequest,
            HandshakeType::ServerHelloDone,
        ]
    );
    let seqs: Vec<_> = msgs.iter().map(|m| m.1).collect();
    assert_eq!(seqs, [0, 1, 2, 3, 4]);
    // RFC 6347 §4.2.1: the initial ServerHello reuses the ClientHello's record sequence
    // number (the ClientHello completed in record 1); retransmissions count on.
    if first {
        assert_eq!(msgs[0].3, 1);
    } else {
        assert!(msgs[0].3 > 5);
    }

    let sh = ServerHello::parse(&msgs[0].2).unwrap();
    assert_eq!(sh.server_version, DTLS_1_2);
    assert_eq!(sh.random, server_random);
    assert_eq!(sh.cipher_suite, 0xc02b);
    assert_eq!(sh.compression_method, 0);
    assert!(sh.extensions.get(EXT_SUPPORTED_VERSIONS).is_none());
    assert_eq!(sh.extensions.extended_master_secret(), Some(true));
    assert_eq!(sh.extensions.renegotiation_info().unwrap().unwrap(), b"");
    let srtp = UseSrtp::parse(sh.extensions.get(EXT_USE_SRTP).unwrap()).unwrap();
    let profiles: Vec<_> = srtp.profiles.iter().collect();
    // Chromium offers 0x0001, 0x0008, 0x0007; shoal prefers AEAD_AES_128_GCM.
    assert_eq!(profiles, [SrtpProfile::AeadAes128Gcm.to_u16()]);
    assert!(srtp.mki.is_empty());

    let certs = Certificate::parse(&msgs[1].2).unwrap();
    assert_eq!(certs.end_entity().unwrap(), cert.der());

    let ske = ServerKeyExchange::parse(&msgs[2].2).unwrap();
    assert_eq!(ske.group, 29, "x25519: Chromium's first classical group");
    assert_eq!(ske.public.len(), 32);
    assert_eq!(ske.signed.scheme, SIG_ECDSA_SHA256);
    let mut signed = client_random.to_vec();
    signed.extend_from_slice(&server_random);
    signed.extend_from_slice(ske.params);
    verify_ecdsa_p256_sha256(cert.public_key(), &signed, ske.signed.signature).unwrap();

    let cr = CertificateRequest::parse(&msgs[3].2).unwrap();
    assert!(cr.certificate_types.contains(&CERT_TYPE_ECDSA_SIGN));
    assert!(cr.signature_algorithms.contains(SIG_ECDSA_SHA256));
    assert!(msgs[4].2.is_empty());
}

#[test]
fn dtls_chrome_hello_gets_dtls12() {
    let runs = [
        (
            "chromium156_client_hello_1.bin",
            "chromium156_client_hello_2.bin",
        ),
        (
            "chromium156_client_hello_run2_1.bin",
            "chromium156_client_hello_run2_2.bin",
        ),
    ];
    let cert = Arc::new(DtlsCertificate::generate().unwrap());
    for (first, second) in runs {
        let (d1, d2) = (fixture(first), fixture(second));
        // The client random sits after the record header (13), handshake header (12)
        // and client_version (2).
        let client_random = d1[27..59].to_vec();
        for reversed in [false, true] {
            let server_random = [0x5a; 32];
            let now = Time::from_millis(5);
            let mut conn = DtlsConn::new(
                DtlsRole::Server,
                Arc::new(DtlsConfig::default()),
                cert.clone(),
                [0; 32],
                server_random,
                now,
            );
            let (a, b) = if reversed { (&d2, &d1) } else { (&d1, &d2) };
            conn.handle_datagram(now, a).unwrap();
            assert!(
                conn.poll_transmit().is_none(),
                "half a ClientHello is no ClientHello"
            );
            conn.handle_datagram(now, b).unwrap();
            check_server_flight(&mut conn, &cert, &client_random, server_random, true);
            assert_eq!(conn.stats().handshake_partial_fragments, 2);

            // Chromium's retransmission of its flight (as it does at +57 ms) makes
            // shoal retransmit flight 4 once the guard time has passed, and once the
            // whole flight has come again: half of it prompts nothing.
            let later = now + Duration::from_millis(300);
            conn.handle_datagram(later, a).unwrap();
            assert!(
                conn.poll_transmit().is_none(),
                "half a flight is no retransmission"
            );
            conn.handle_datagram(later, b).unwrap();
            check_server_flight(&mut conn, &cert, &client_random, server_random, false);
            assert_eq!(conn.stats().retransmits_peer, 1);
        }
    }
}
