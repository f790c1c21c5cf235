//! Over 100 000 random and mutated DTLS datagrams through every DTLS parser: records,
//! handshake fragments, each handshake message, alerts and extensions. Whatever the
//! input, each parser returns a value or a typed error; nothing panics. (The same
//! treatment of `DtlsConn` in both roles lives in `shoal-systems`'s
//! `dtls_conn_rejects_garbage`.)

mod mutate;

use std::path::PathBuf;

use bytes::BytesMut;
use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};
use shoal_components::dtls::extension::*;
use shoal_components::dtls::messages::*;
use shoal_components::dtls::*;

/// Real and hand-built datagrams to mutate.
fn seeds() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/dtls");
    if let Ok(entries) = std::fs::read_dir(&dir) {
        for e in entries.flatten() {
            if e.path().extension().is_some_and(|x| x == "bin") {
                out.push(std::fs::read(e.path()).unwrap());
            }
        }
    }
    let mut ext = BytesMut::new();
    write_u16_list_extension(&mut ext, EXT_SUPPORTED_GROUPS, &[29, 23]);
    write_ec_point_formats(&mut ext);
    write_u16_list_extension(&mut ext, EXT_SIGNATURE_ALGORITHMS, &[0x0403, 0x0503]);
    write_use_srtp(&mut ext, &[7, 8, 1], &[1, 2]);
    write_extended_master_secret(&mut ext);
    write_renegotiation_info(&mut ext, &[]);
    let suites = [0xc0, 0x2b, 0xc0, 0x2c];
    let mut ch = BytesMut::new();
    ClientHello {
        client_version: DTLS_1_2,
        random: [1; 32],
        session_id: &[2; 32],
        cookie: &[3; 20],
        cipher_suites: U16List::parse(&suites, 1, "s").unwrap(),
        compression_methods: &[0],
        extensions: Extensions::parse(&ext).unwrap(),
    }
    .write(&mut ch);
    let mut sh = BytesMut::new();
    ServerHello {
        server_version: DTLS_1_2,
        random: [4; 32],
        session_id: &[],
        cipher_suite: 0xc02b,
        compression_method: 0,
        extensions: Extensions::parse(&ext).unwrap(),
    }
    .write(&mut sh);
    let mut cert = BytesMut::new();
    Certificate::write(&[&[0x30; 300], &[0x31; 20]], &mut cert);
    let mut ske = BytesMut::new();
    ServerKeyExchange::write_params(23, &[4; 65], &mut ske);
    DigitallySigned {
        scheme: 0x0403,
        signature: &[0x30; 70],
    }
    .write(&mut ske);
    let mut cr = BytesMut::new();
    CertificateRequest::write(&[64, 1], &[0x0403, 0x0804], &mut cr);
    let mut cke = BytesMut::new();
    ClientKeyExchange { public: &[9; 32] }.write(&mut cke);
    let mut hvr = BytesMut::new();
    HelloVerifyRequest {
        server_version: DTLS_1_0,
        cookie: &[5; 32],
    }
    .write(&mut hvr);
    let messages: [(HandshakeType, &[u8]); 8] = [
        (HandshakeType::ClientHello, &ch),
        (HandshakeType::ServerHello, &sh),
        (HandshakeType::HelloVerifyRequest, &hvr),
        (HandshakeType::Certificate, &cert),
        (HandshakeType::ServerKeyExchange, &ske),
        (HandshakeType::CertificateRequest, &cr),
        (HandshakeType::ClientKeyExchange, &cke),
        (HandshakeType::Finished, &[7; 12]),
    ];
    // One datagram per message, one with all of them in one record, and one with a
    // message split into two fragments.
    let mut all = BytesMut::new();
    for (seq, (t, body)) in messages.iter().enumerate() {
        let mut m = BytesMut::new();
        write_handshake(&mut m, *t, seq as u16, body);
        out.push(datagram(ContentType::Handshake, &m));
        all.extend_from_slice(&m);
    }
    out.push(datagram(ContentType::Handshake, &all));
    let mut split = BytesMut::new();
    for (off, part) in [(0u32, &ch[..50]), (50, &ch[50..])] {
        HandshakeHeader {
            msg_type: HandshakeType::ClientHello,
            length: ch.len() as u32,
            message_seq: 0,
            fragment_offset: off,
            fragment_length: part.len() as u32,
        }
        .write(&mut split);
        split.extend_from_slice(part);
    }
    out.push(datagram(ContentType::Handshake, &split));
    out.push(datagram(ContentType::Alert, &[2, 40]));
    out.push(datagram(ContentType::ChangeCipherSpec, &[1]));
    out
}

fn datagram(ct: ContentType, body: &[u8]) -> Vec<u8> {
    let mut d = BytesMut::new();
    RecordHeader {
        content_type: ct,
        version: DTLS_1_2,
        epoch: 0,
        sequence_number: 7,
        length: body.len() as u16,
    }
    .write(&mut d);
    d.extend_from_slice(body);
    // A second record in the same datagram.
    let first = d.clone();
    d.extend_from_slice(&first);
    d.to_vec()
}

/// Runs every parser over whatever `datagram` contains. Returns how many parser calls
/// succeeded, so the optimiser cannot drop them.
fn parse_everything(datagram: &[u8]) -> usize {
    let mut ok = 0;
    for record in Records::new(datagram) {
        let Ok(record) = record else { continue };
        ok += 1;
        let _ = Alert::parse(record.fragment).map(|_| ok += 1);
        for fragment in HandshakeFragments::new(record.fragment) {
            let Ok(f) = fragment else { continue };
            ok += parse_body(f.body);
        }
        // Also treat the whole fragment as a message body of every type.
        ok += parse_body(record.fragment);
    }
    ok
}

fn parse_body(body: &[u8]) -> usize {
    let mut ok = 0;
    if let Ok(ch) = ClientHello::parse(body) {
        ok += 1 + walk_extensions(&ch.extensions);
        ok += ch.cipher_suites.iter().count();
    }
    if let Ok(sh) = ServerHello::parse(body) {
        ok += 1 + walk_extensions(&sh.extensions);
    }
    ok += HelloVerifyRequest::parse(body).is_ok() as usize;
    if let Ok(c) = Certificate::parse(body) {
        ok += c.iter().count();
    }
    ok += ServerKeyExchange::parse(body).is_ok() as usize;
    if let Ok(cr) = CertificateRequest::parse(body) {
        ok += cr.signature_algorithms.len();
    }
    ok += ClientKeyExchange::parse(body).is_ok() as usize;
    ok += CertificateVerify::parse(body).is_ok() as usize;
    ok += parse_finished(body).is_ok() as usize;
    ok += parse_server_hello_done(body).is_ok() as usize;
    if let Ok(e) = Extensions::parse(body) {
        ok += walk_extensions(&e);
    }
    ok += UseSrtp::parse(body).is_ok() as usize;
    ok
}

fn walk_extensions(e: &Extensions) -> usize {
    let mut ok = e.iter().count();
    ok += e.use_srtp().is_some_and(|r| r.is_ok()) as usize;
    ok += e.supported_groups().is_some_and(|r| r.is_ok()) as usize;
    ok += e.signature_algorithms().is_some_and(|r| r.is_ok()) as usize;
    ok += e.ec_point_formats().is_some_and(|r| r.is_ok()) as usize;
    ok += e.renegotiation_info().is_some_and(|r| r.is_ok()) as usize;
    ok += e.extended_master_secret().is_some() as usize;
    ok
}

/// One mutation of a seed: bit flips, byte overwrites with boundary values, cuts,
/// insertions, length-field attacks, or pure noise.
fn mutate(rng: &mut ChaCha8Rng, seed: &[u8]) -> Vec<u8> {
    let mut d = seed.to_vec();
    let op = rng.next_u32() % 7;
    match op {
        5 => {
            // Length fields: record length (11..13), handshake length, fragment
            // offset and fragment length (14.., 19.., 22..).
            for at in [11usize, 14, 19, 22, 13 + 12 + 35] {
                if rng.next_u32().is_multiple_of(2)
                    && let Some(b) = d.get_mut(at)
                {
                    *b = rng.next_u32() as u8;
                }
            }
            d
        }
        _ => mutate::generic(rng, d, op, 2048, &[0, 1, 0x7f, 0x80, 0xfe, 0xff]),
    }
}

#[test]
fn dtls_parsers_reject_garbage() {
    let seeds = seeds();
    assert!(seeds.len() >= 10);
    let mut rng = ChaCha8Rng::seed_from_u64(0xd715);
    let mut total_ok = 0usize;
    // Unmutated seeds parse.
    for s in &seeds {
        assert!(parse_everything(s) > 0);
    }
    let rounds = 120_000;
    for i in 0..rounds {
        let seed = &seeds[i % seeds.len()];
        let input = mutate(&mut rng, seed);
        total_ok += parse_everything(&input);
    }
    // Many mutants still parse in part: the mutations reach past the first check.
    assert!(total_ok > rounds, "only {total_ok} successful parses");
}
