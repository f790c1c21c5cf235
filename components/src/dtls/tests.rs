//! Round trips and refusals for the DTLS wire formats.

use bytes::BytesMut;

use super::extension::*;
use super::messages::*;
use super::*;

fn u16s(values: &[u16]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_be_bytes()).collect()
}

fn sample_extensions() -> BytesMut {
    let mut ext = BytesMut::new();
    write_u16_list_extension(&mut ext, EXT_SUPPORTED_GROUPS, &[29, 23]);
    write_ec_point_formats(&mut ext);
    write_u16_list_extension(&mut ext, EXT_SIGNATURE_ALGORITHMS, &[SIG_ECDSA_SHA256]);
    write_use_srtp(&mut ext, &[7, 8, 1], &[]);
    write_extended_master_secret(&mut ext);
    write_renegotiation_info(&mut ext, &[]);
    write_extension(&mut ext, EXT_SUPPORTED_VERSIONS, &[2, 0xfe, 0xfc]);
    ext
}

#[test]
fn record_header_round_trip_and_iteration() {
    let mut dgram = BytesMut::new();
    for (i, body) in [&b"abc"[..], &b""[..], &b"hello"[..]].iter().enumerate() {
        RecordHeader {
            content_type: ContentType::Handshake,
            version: DTLS_1_2,
            epoch: 1,
            sequence_number: 0x0000_1234_5678_9abc + i as u64,
            length: body.len() as u16,
        }
        .write(&mut dgram);
        dgram.extend_from_slice(body);
    }
    let records: Vec<_> = Records::new(&dgram).collect::<Result<_, _>>().unwrap();
    assert_eq!(records.len(), 3);
    assert_eq!(records[2].fragment, b"hello");
    assert_eq!(records[0].header.sequence_number, 0x1234_5678_9abc);
    assert_eq!(
        records[0].header.epoch_and_sequence(),
        (1u64 << 48) | 0x1234_5678_9abc
    );
    assert_eq!(records[1].raw.len(), RECORD_HEADER_LEN);
}

#[test]
fn record_refusals() {
    // Unknown content type, bad version, truncated fragment, oversized length.
    let mut bad = vec![24, 0xfe, 0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    assert_eq!(
        Records::new(&bad).next(),
        Some(Err(DtlsWireError::UnknownContentType(24)))
    );
    bad[0] = 22;
    bad[2] = 0xfc;
    assert_eq!(
        Records::new(&bad).next(),
        Some(Err(DtlsWireError::BadVersion(0xfefc)))
    );
    bad[2] = 0xfd;
    bad[12] = 5;
    assert!(matches!(
        Records::new(&bad).next(),
        Some(Err(DtlsWireError::Truncated { .. }))
    ));
    bad[11] = 0x48;
    assert!(matches!(
        RecordHeader::parse(&bad),
        Err(DtlsWireError::BadLength { .. })
    ));
    // After an error the iterator stops.
    let mut it = Records::new(&bad);
    assert!(it.next().unwrap().is_err());
    assert!(it.next().is_none());
}

#[test]
fn handshake_fragments() {
    let mut rec = BytesMut::new();
    write_handshake(&mut rec, HandshakeType::ServerHelloDone, 4, &[]);
    HandshakeHeader {
        msg_type: HandshakeType::Certificate,
        length: 10,
        message_seq: 1,
        fragment_offset: 4,
        fragment_length: 3,
    }
    .write(&mut rec);
    rec.extend_from_slice(b"xyz");
    let frags: Vec<_> = HandshakeFragments::new(&rec)
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(frags.len(), 2);
    assert!(frags[0].header.is_whole());
    assert_eq!(frags[1].body, b"xyz");
    assert!(!frags[1].header.is_whole());

    // A fragment reaching past the message's length is refused.
    let mut bad = BytesMut::new();
    HandshakeHeader {
        msg_type: HandshakeType::Certificate,
        length: 5,
        message_seq: 1,
        fragment_offset: 4,
        fragment_length: 3,
    }
    .write(&mut bad);
    bad.extend_from_slice(b"xyz");
    assert!(matches!(
        HandshakeFragments::new(&bad).next(),
        Some(Err(DtlsWireError::BadLength { .. }))
    ));
    assert_eq!(
        HandshakeFragments::new(&[99; 12]).next(),
        Some(Err(DtlsWireError::UnknownHandshakeType(99)))
    );
}

#[test]
fn client_hello_round_trip() {
    let ext = sample_extensions();
    let suites = u16s(&[0xc02b, 0xc02c]);
    let hello = ClientHello {
        client_version: DTLS_1_2,
        random: [7; 32],
        session_id: &[],
        cookie: &[1, 2, 3],
        cipher_suites: U16List::parse(&suites, 1, "t").unwrap(),
        compression_methods: &[0],
        extensions: Extensions::parse(&ext).unwrap(),
    };
    let mut body = BytesMut::new();
    hello.write(&mut body);
    let parsed = ClientHello::parse(&body).unwrap();
    assert_eq!(parsed, hello);
    assert!(parsed.cipher_suites.contains(0xc02c));
    let e = parsed.extensions;
    assert_eq!(e.extended_master_secret(), Some(true));
    let srtp = e.use_srtp().unwrap().unwrap();
    assert_eq!(srtp.profiles.iter().collect::<Vec<_>>(), vec![7, 8, 1]);
    assert!(srtp.mki.is_empty());
    assert_eq!(
        e.supported_groups()
            .unwrap()
            .unwrap()
            .iter()
            .collect::<Vec<_>>(),
        vec![29, 23]
    );
    assert!(
        e.signature_algorithms()
            .unwrap()
            .unwrap()
            .contains(SIG_ECDSA_SHA256)
    );
    assert_eq!(e.ec_point_formats().unwrap().unwrap(), &[0]);
    assert_eq!(e.renegotiation_info().unwrap().unwrap(), &[] as &[u8]);
    assert_eq!(e.get(EXT_SUPPORTED_VERSIONS), Some(&[2, 0xfe, 0xfc][..]));
    assert_eq!(e.iter().count(), 7);

    // Every truncation is an error, never a panic.
    for cut in 0..body.len() {
        // Cutting exactly after compression_methods leaves a valid hello without
        // extensions.
        if let Ok(hello) = ClientHello::parse(&body[..cut]) {
            assert_eq!(hello.extensions, Extensions::default());
        }
    }
    let mut long = body.clone();
    long.extend_from_slice(&[0]);
    assert!(ClientHello::parse(&long).is_err());
}

#[test]
fn extension_refusals() {
    let mut dup = BytesMut::new();
    write_extended_master_secret(&mut dup);
    write_extended_master_secret(&mut dup);
    assert_eq!(
        Extensions::parse(&dup),
        Err(DtlsWireError::DuplicateExtension(0x17))
    );
    let mut many = BytesMut::new();
    for t in 0..=MAX_EXTENSIONS as u16 {
        write_extension(&mut many, 1000 + t, &[]);
    }
    assert_eq!(
        Extensions::parse(&many),
        Err(DtlsWireError::TooMany {
            field: "extensions"
        })
    );
    // use_srtp with an odd profile list, or trailing bytes.
    assert!(UseSrtp::parse(&[0, 3, 0, 1, 0, 0]).is_err());
    assert!(UseSrtp::parse(&[0, 2, 0, 1, 0, 9]).is_err());
    assert!(UseSrtp::parse(&[0, 0, 0]).is_err());
    let ok = UseSrtp::parse(&[0, 2, 0, 1, 2, 0xaa, 0xbb]).unwrap();
    assert_eq!(ok.mki, &[0xaa, 0xbb]);
}

#[test]
fn server_hello_and_verify_request_round_trip() {
    let mut ext = BytesMut::new();
    write_use_srtp(&mut ext, &[7], &[]);
    write_extended_master_secret(&mut ext);
    let hello = ServerHello {
        server_version: DTLS_1_2,
        random: [9; 32],
        session_id: &[],
        cipher_suite: 0xc02b,
        compression_method: 0,
        extensions: Extensions::parse(&ext).unwrap(),
    };
    let mut body = BytesMut::new();
    hello.write(&mut body);
    assert_eq!(ServerHello::parse(&body).unwrap(), hello);

    let hvr = HelloVerifyRequest {
        server_version: DTLS_1_0,
        cookie: &[5; 32],
    };
    let mut body = BytesMut::new();
    hvr.write(&mut body);
    assert_eq!(HelloVerifyRequest::parse(&body).unwrap(), hvr);
    assert!(HelloVerifyRequest::parse(&body[..body.len() - 1]).is_err());
}

#[test]
fn certificate_and_key_exchange_round_trip() {
    let mut body = BytesMut::new();
    Certificate::write(&[b"cert-one", b"two"], &mut body);
    let cert = Certificate::parse(&body).unwrap();
    assert_eq!(cert.end_entity(), Some(&b"cert-one"[..]));
    assert_eq!(cert.iter().count(), 2);
    // An empty ASN.1Cert is refused.
    assert!(Certificate::parse(&[0, 0, 3, 0, 0, 0]).is_err());
    assert_eq!(Certificate::parse(&[0, 0, 0]).unwrap().end_entity(), None);

    let mut ske = BytesMut::new();
    ServerKeyExchange::write_params(29, &[4; 32], &mut ske);
    let params_len = ske.len();
    DigitallySigned {
        scheme: SIG_ECDSA_SHA256,
        signature: &[1, 2, 3],
    }
    .write(&mut ske);
    let parsed = ServerKeyExchange::parse(&ske).unwrap();
    assert_eq!(parsed.group, 29);
    assert_eq!(parsed.public, &[4; 32]);
    assert_eq!(parsed.params, &ske[..params_len]);
    assert_eq!(parsed.signed.signature, &[1, 2, 3]);
    let mut explicit = ske.clone();
    explicit[0] = 1;
    assert!(ServerKeyExchange::parse(&explicit).is_err());

    let mut cr = BytesMut::new();
    CertificateRequest::write(&[CERT_TYPE_ECDSA_SIGN], &[SIG_ECDSA_SHA256], &mut cr);
    let parsed = CertificateRequest::parse(&cr).unwrap();
    assert_eq!(parsed.certificate_types, &[CERT_TYPE_ECDSA_SIGN]);
    assert!(parsed.signature_algorithms.contains(SIG_ECDSA_SHA256));

    let mut cke = BytesMut::new();
    ClientKeyExchange { public: &[4; 65] }.write(&mut cke);
    assert_eq!(ClientKeyExchange::parse(&cke).unwrap().public, &[4; 65]);
    assert!(ClientKeyExchange::parse(&[0]).is_err());

    assert_eq!(parse_finished(&[3; 12]).unwrap(), [3; 12]);
    assert!(parse_finished(&[3; 11]).is_err());
    assert!(parse_finished(&[3; 13]).is_err());
    assert!(parse_server_hello_done(&[]).is_ok());
    assert!(parse_server_hello_done(&[0]).is_err());
}

#[test]
fn alerts() {
    let a = Alert {
        level: AlertLevel::Fatal,
        description: AlertDescription::HANDSHAKE_FAILURE,
    };
    let mut b = BytesMut::new();
    a.write(&mut b);
    assert_eq!(&b[..], &[2, 40]);
    assert_eq!(Alert::parse(&b).unwrap(), a);
    assert!(Alert::parse(&[3, 0]).is_err());
    assert!(Alert::parse(&[1]).is_err());
    assert!(Alert::parse(&[1, 0, 0]).is_err());
}
