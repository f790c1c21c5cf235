//! Acceptance test of the DTLS 1.2 / DTLS-SRTP crypto layer (`shoal_components::dtls::crypto`):
//! the TLS 1.2 PRF against published vectors, every derived secret and a protected record
//! against an independent implementation, record protection round trips and tampering,
//! ECDHE, ECDSA with rcgen and openssl certificates, and a panic-free DER walker.
//!
//! The independent implementation is this Python (3.11, standard hmac/hashlib, and
//! pyca/cryptography 48 for AES-GCM), saved as /tmp/dtls_vectors.py and run with
//! `python3 /tmp/dtls_vectors.py`; it also re-checks the two published vectors:
//!
//! ```text
//! import hmac, hashlib
//! from cryptography.hazmat.primitives.ciphers.aead import AESGCM
//! def prf(h, secret, label, seed, n):  # RFC 5246 §5
//!     seed, out, a = label + seed, b"", label + seed
//!     while len(out) < n:
//!         a = hmac.new(secret, a, h).digest()
//!         out += hmac.new(secret, a + seed, h).digest()
//!     return out[:n]
//! def record(key, salt, ctype, epoch, seq, pt):  # RFC 5288 §3, RFC 5246 §6.2.3.3
//!     seqnum = epoch.to_bytes(2, "big") + seq.to_bytes(6, "big")
//!     aad = seqnum + bytes([ctype]) + b"\xfe\xfd" + len(pt).to_bytes(2, "big")
//!     body = seqnum + AESGCM(key).encrypt(salt + seqnum, pt, aad)
//!     return bytes([ctype]) + b"\xfe\xfd" + seqnum + len(body).to_bytes(2, "big") + body
//! S256, S384 = hashlib.sha256, hashlib.sha384
//! assert prf(S256, bytes.fromhex("9bbe436ba940f017b17652849a71db35"), b"test label",
//!            bytes.fromhex("a0ba9f936cda311827a6f796ffd5198c"), 100)[:4].hex() == "e3f229ba"
//! assert prf(S384, bytes.fromhex("b80b733d6ceefcdc71566ea48e5567df"), b"test label",
//!            bytes.fromhex("cd665cf6a8447dd6ff8b27555edb7465"), 148)[:4].hex() == "7b0c18e9"
//! master, cr, sr = bytes(range(0x10, 0x40)), bytes(range(0x40, 0x60)), bytes(range(0x60, 0x80))
//! pms = bytes(range(0xA0, 0xC0))
//! for h, n in [(S256, 60), (S256, 56), (S384, 88)]:
//!     print("srtp", n, prf(h, master, b"EXTRACTOR-dtls_srtp", cr + sr, n).hex())
//! for h in (S256, S384):
//!     sh = h(b"shoal handshake messages").digest()
//!     print("ms", prf(h, pms, b"master secret", cr + sr, 48).hex())
//!     print("ems", prf(h, pms, b"extended master secret", sh, 48).hex())
//!     print("fin", prf(h, master, b"client finished", sh, 12).hex())
//! kb = prf(S256, master, b"key expansion", sr + cr, 40)
//! print("kb", kb.hex())
//! print("rec", record(kb[0:16], kb[32:36], 23, 1, 5, b"hello shoal over DTLS 1.2").hex())
//! kb = prf(S384, master, b"key expansion", sr + cr, 72)
//! print("kb", kb.hex())
//! print("rec", record(kb[32:64], kb[68:72], 22, 1, 0x010203040506, b"finished").hex())
//! ```

use bytes::BytesMut;
use shoal_components::dtls::crypto::{
    AEAD_TAG_LEN, CipherSuite, CryptoError, DerError, DtlsCertificate, EXPLICIT_NONCE_LEN, EcCurve,
    EphemeralKey, MAX_PLAINTEXT_LEN, NamedGroup, PrfHash, RECORD_HEADER_LEN, RecordCipher,
    SrtpKeys, SrtpProfile, Transcript, export_keying_material, extended_master_secret,
    fingerprint_sha256, key_block, master_secret, peer_public_key, peer_public_key_with_curve, prf,
    verify_data, verify_ecdsa_p256_sha256, verify_ecdsa_p384_sha384,
};

/// Hex with any whitespace in it.
fn h(s: &str) -> Vec<u8> {
    let digits: Vec<u8> = s.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    assert!(digits.len().is_multiple_of(2), "odd hex");
    digits
        .chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap())
        .collect()
}

fn arr<const N: usize>(v: &[u8]) -> [u8; N] {
    v.try_into().unwrap()
}

// Fixed inputs of the independent vectors below.
fn master() -> [u8; 48] {
    arr(&(0x10..0x40).collect::<Vec<u8>>())
}
fn client_random() -> [u8; 32] {
    arr(&(0x40..0x60).collect::<Vec<u8>>())
}
fn server_random() -> [u8; 32] {
    arr(&(0x60..0x80).collect::<Vec<u8>>())
}
fn pre_master() -> Vec<u8> {
    (0xA0..0xC0).collect()
}

/// The TLS 1.2 PRF against the published test vectors, then the DTLS-SRTP exporter
/// (RFC 5764 §4.2) against an independent implementation, and its split.
#[test]
fn dtls_prf_vectors() {
    // Published TLS 1.2 PRF test vectors, posted to the IETF TLS WG list
    // (https://www.ietf.org/mail-archive/web/tls/current/msg03416.html, also at
    // https://mailarchive.ietf.org/arch/msg/tls/fzVCzk-z3FShgGJ6DOXqM1ydxms/) and embedded
    // in, among others, netty's PseudoRandomFunctionTest and the rustls-boring provider's
    // prf.rs tests, from which these bytes were taken.
    let mut out = [0u8; 100];
    prf(
        PrfHash::Sha256,
        &h("9b be 43 6b a9 40 f0 17 b1 76 52 84 9a 71 db 35"),
        b"test label",
        &h("a0 ba 9f 93 6c da 31 18 27 a6 f7 96 ff d5 19 8c"),
        &mut out,
    );
    assert_eq!(
        out.to_vec(),
        h("e3 f2 29 ba 72 7b e1 7b 8d 12 26 20 55 7c d4 53
           c2 aa b2 1d 07 c3 d4 95 32 9b 52 d4 e6 1e db 5a
           6b 30 17 91 e9 0d 35 c9 c9 a4 6b 4e 14 ba f9 af
           0f a0 22 f7 07 7d ef 17 ab fd 37 97 c0 56 4b ab
           4f bc 91 66 6e 9d ef 9b 97 fc e3 4f 79 67 89 ba
           a4 80 82 d1 22 ee 42 c5 a7 2e 5a 51 10 ff f7 01
           87 34 7b 66"),
        "TLS1.2PRF-SHA256, 100 bytes"
    );

    // The SHA-384 vector of the same set ("148 bytes of pseudo-randomness using
    // TLS1.2PRF-SHA384"); note it has its own secret and seed.
    let mut out = [0u8; 148];
    prf(
        PrfHash::Sha384,
        &h("b8 0b 73 3d 6c ee fc dc 71 56 6e a4 8e 55 67 df"),
        b"test label",
        &h("cd 66 5c f6 a8 44 7d d6 ff 8b 27 55 5e db 74 65"),
        &mut out,
    );
    assert_eq!(
        out.to_vec(),
        h("7b 0c 18 e9 ce d4 10 ed 18 04 f2 cf a3 4a 33 6a
           1c 14 df fb 49 00 bb 5f d7 94 21 07 e8 1c 83 cd
           e9 ca 0f aa 60 be 9f e3 4f 82 b1 23 3c 91 46 a0
           e5 34 cb 40 0f ed 27 00 88 4f 9d c2 36 f8 0e dd
           8b fa 96 11 44 c9 e8 d7 92 ec a7 22 a7 b3 2f c3
           d4 16 d4 73 eb c2 c5 fd 4a bf da d0 5d 91 84 25
           9b 5b f8 cd 4d 90 fa 0d 31 e2 de c4 79 e4 f1 a2
           60 66 f2 ee a9 a6 92 36 a3 e5 26 55 c9 e9 ae e6
           91 c8 f3 a2 68 54 30 8d 5e aa 3b e8 5e 09 90 70
           3d 73 e5 6f"),
        "TLS1.2PRF-SHA384, 148 bytes"
    );

    // EXTRACTOR-dtls_srtp over a fixed master secret and randoms: master = 10 11 .. 3f,
    // client_random = 40 .. 5f, server_random = 60 .. 7f. Expected bytes from the
    // independent implementation at the top of this file (`python3 /tmp/dtls_vectors.py`).
    let (m, cr, sr) = (master(), client_random(), server_random());
    let cases = [
        (
            PrfHash::Sha256,
            SrtpProfile::Aes128CmHmacSha1_80,
            "875bcdbc0847a18958601b743872ee4047f21cf1532293be76b0e39c76ecc5d0
             69e6af6698c98a89216426a16d6eed86b7a4d0187b3ea2da1cecf025",
        ),
        (
            PrfHash::Sha256,
            SrtpProfile::AeadAes128Gcm,
            "875bcdbc0847a18958601b743872ee4047f21cf1532293be76b0e39c76ecc5d0
             69e6af6698c98a89216426a16d6eed86b7a4d0187b3ea2da",
        ),
        (
            PrfHash::Sha384,
            SrtpProfile::AeadAes256Gcm,
            "12f2bfc8e3a9c378e3abbed5daa5354951eb974dfb785c365ca854d4c5c30bed
             463d00734c21040c6a2b604cd5c3ecfc81b919256d76c7d9bd6be072cfde11a5
             eaba38645586ca2161dede84b62e7063c555b166e4994d9a",
        ),
    ];
    for (hash, profile, expected) in cases {
        let expected = h(expected);
        assert_eq!(SrtpKeys::exported_len(profile), expected.len());
        let mut material = vec![0u8; SrtpKeys::exported_len(profile)];
        export_keying_material(hash, &m, b"EXTRACTOR-dtls_srtp", &cr, &sr, &mut material);
        assert_eq!(material, expected, "{profile:?}");

        // RFC 5764 §4.2 order: client key, server key, client salt, server salt.
        let keys = SrtpKeys::from_exported(profile, &material).unwrap();
        let (k, s) = (profile.key_len(), profile.salt_len());
        assert_eq!(keys.profile, profile);
        assert_eq!(keys.client_key, expected[..k]);
        assert_eq!(keys.server_key, expected[k..2 * k]);
        assert_eq!(keys.client_salt, expected[2 * k..2 * k + s]);
        assert_eq!(keys.server_salt, expected[2 * k + s..]);
        assert_eq!(SrtpKeys::derive(hash, profile, &m, &cr, &sr), keys);
        // Debug shows no key bytes.
        let debug = format!("{keys:?}");
        assert!(!debug.contains(&format!("{}", expected[0])), "{debug}");
    }
    assert_eq!(
        (
            SrtpKeys::exported_len(SrtpProfile::Aes128CmHmacSha1_80),
            SrtpKeys::exported_len(SrtpProfile::AeadAes128Gcm),
            SrtpKeys::exported_len(SrtpProfile::AeadAes256Gcm)
        ),
        (60, 56, 88)
    );
    assert_eq!(
        SrtpKeys::from_exported(SrtpProfile::AeadAes256Gcm, &[0; 87]),
        Err(CryptoError::BadSrtpMaterialLength {
            expected: 88,
            actual: 87
        })
    );
}

/// Master secret, extended master secret, Finished verify_data and the key block, each
/// against the same independent Python implementation (`python3 /tmp/dtls_vectors.py`,
/// see above): pre_master = a0 .. bf, session/handshake hash = Hash("shoal handshake
/// messages").
#[test]
fn derived_secrets_match_independent_implementation() {
    let (m, cr, sr, pms) = (master(), client_random(), server_random(), pre_master());
    let expect = [
        (
            PrfHash::Sha256,
            "c6a0cfd1b1495dd67fd79e5c6fe843912a7965dcb6864c68c0f73b3f29aba0f2
             e6ff726d48900bcb6c6b804bccbc62c8",
            "53689c2951ff45752ab08fc39947f44d3c767975c808b08c287980bc9d96c540
             38d5d8125203c6661f6e4d0ad0061da7",
            "4485bbc323746f647f39f8c6",
        ),
        (
            PrfHash::Sha384,
            "40dc8512dee77b5fd90485b6b455872780faa7faef227c3730150ea2453427c1
             ef1265b845920b2a357e0e787e5523d4",
            "803bb6eed4698b41a5bcec156b0c532a3d4673c7f8435a116f2b62aa2cbfe711
             81839786977ec163103095b448da531f",
            "a2483332072d836fa6bd7311",
        ),
    ];
    for (hash, ms, ems, fin) in expect {
        assert_eq!(master_secret(hash, &pms, &cr, &sr).to_vec(), h(ms));
        // The session hash comes out of a Transcript, as the handshake will use it.
        let mut t = Transcript::new();
        t.update(b"shoal handshake ").unwrap();
        t.set_hash(hash).unwrap();
        t.update(b"messages").unwrap();
        let session_hash = t.current().unwrap();
        assert_eq!(
            extended_master_secret(hash, &pms, session_hash.as_ref()).to_vec(),
            h(ems)
        );
        assert_eq!(
            verify_data(hash, &m, b"client finished", session_hash.as_ref()).to_vec(),
            h(fin)
        );
    }

    // key_block = PRF(master, "key expansion", server_random + client_random).
    let kb = key_block(CipherSuite::EcdheEcdsaAes128GcmSha256, &m, &cr, &sr);
    let expected = h(
        "39da05e40005782b46e6e6f313465a54fdd484a512861e19108274002b7f7e6c
                      45e469d5bb1c4908",
    );
    assert_eq!(kb.client_write_key, expected[..16]);
    assert_eq!(kb.server_write_key, expected[16..32]);
    assert_eq!(kb.client_write_iv.to_vec(), expected[32..36]);
    assert_eq!(kb.server_write_iv.to_vec(), expected[36..40]);
    let kb = key_block(CipherSuite::EcdheEcdsaAes256GcmSha384, &m, &cr, &sr);
    let expected = h(
        "e71cd3adb5c7277a210c39ba2a55b268e52ce186041d89d76505995ec19e7e91
                      b08387f0cdb516d2632c08621d50d5f04aa100368d7821209234287c78396014
                      f53c4407a1ecf5b8",
    );
    assert_eq!(kb.client_write_key, expected[..32]);
    assert_eq!(kb.server_write_key, expected[32..64]);
    assert_eq!(kb.client_write_iv.to_vec(), expected[64..68]);
    assert_eq!(kb.server_write_iv.to_vec(), expected[68..72]);
}

/// Writes a record for sealing at the end of `buf`: header, 8 reserved bytes, plaintext.
fn push_record(buf: &mut BytesMut, content_type: u8, epoch: u16, seq: u64, plaintext: &[u8]) {
    buf.extend_from_slice(&[content_type, 0xFE, 0xFD]);
    buf.extend_from_slice(&epoch.to_be_bytes());
    buf.extend_from_slice(&seq.to_be_bytes()[2..]);
    buf.extend_from_slice(&[0, 0]); // length, rewritten by seal_record
    buf.extend_from_slice(&[0; EXPLICIT_NONCE_LEN]);
    buf.extend_from_slice(plaintext);
}

fn ciphers(suite: CipherSuite) -> (RecordCipher, RecordCipher) {
    let kb = key_block(suite, &master(), &client_random(), &server_random());
    (
        RecordCipher::new(suite, &kb.client_write_key, kb.client_write_iv).unwrap(),
        RecordCipher::new(suite, &kb.server_write_key, kb.server_write_iv).unwrap(),
    )
}

/// Protected records byte for byte as pyca/cryptography's AESGCM makes them with the
/// RFC 5288 §3 nonce and the RFC 5246 §6.2.3.3 additional_data over the DTLS
/// epoch || sequence_number (`record()` in the script at the top of this file).
#[test]
fn records_match_independent_implementation() {
    let (client, _) = ciphers(CipherSuite::EcdheEcdsaAes128GcmSha256);
    let mut buf = BytesMut::with_capacity(256);
    push_record(&mut buf, 23, 1, 5, b"hello shoal over DTLS 1.2");
    client.seal_record(&mut buf, 0).unwrap();
    assert_eq!(
        buf.to_vec(),
        h(
            "17fefd000100000000000500310001000000000005079a54ec24765230339f7333
           b3227e56b64f78fe978e047339790f2c7c4ab891fa885a9d42a629fe46"
        )
    );

    let (_, server) = ciphers(CipherSuite::EcdheEcdsaAes256GcmSha384);
    let mut buf = BytesMut::with_capacity(256);
    push_record(&mut buf, 22, 1, 0x0102_0304_0506, b"finished");
    server.seal_record(&mut buf, 0).unwrap();
    let expected = h(
        "16fefd000101020304050600200001010203040506eb3270ec72c205a609a009
                      f6be4d542af400347f7b8e646d",
    );
    assert_eq!(buf.to_vec(), expected);

    // And the independent record opens here.
    let mut record = expected.clone();
    let plain = server.open_record(&mut record).unwrap();
    assert_eq!(plain, b"finished");
}

#[test]
fn seal_open_round_trip_both_suites() {
    for suite in [
        CipherSuite::EcdheEcdsaAes128GcmSha256,
        CipherSuite::EcdheEcdsaAes256GcmSha384,
    ] {
        let (client, server) = ciphers(suite);
        // Three records back to back in one buffer, as egress batches them.
        let payloads: [&[u8]; 3] = [b"", &[0x5A; 1200], &vec![7u8; MAX_PLAINTEXT_LEN]];
        let mut buf = BytesMut::with_capacity(20_000);
        let mut starts = Vec::new();
        for (i, p) in payloads.iter().enumerate() {
            let start = buf.len();
            starts.push(start);
            push_record(&mut buf, 23, 1, 100 + i as u64, p);
            client.seal_record(&mut buf, start).unwrap();
            let sealed_len = buf.len() - start;
            assert_eq!(
                sealed_len,
                RECORD_HEADER_LEN + EXPLICIT_NONCE_LEN + p.len() + AEAD_TAG_LEN
            );
            let len = u16::from_be_bytes([buf[start + 11], buf[start + 12]]) as usize;
            assert_eq!(len, sealed_len - RECORD_HEADER_LEN);
            if !p.is_empty() {
                assert_ne!(&buf[start + 21..start + 21 + p.len()], *p, "encrypted");
            }
        }
        starts.push(buf.len());
        for (i, p) in payloads.iter().enumerate() {
            let mut record = buf[starts[i]..starts[i + 1]].to_vec();
            // The server's receive direction uses the client's write key.
            assert_eq!(
                server.open_record(&mut record.clone()),
                Err(CryptoError::BadRecordMac),
                "wrong direction's key"
            );
            let plain = client.open_record(&mut record).unwrap();
            assert_eq!(plain, *p);
        }
    }
}

#[test]
fn tampering_is_rejected() {
    let (client, _) = ciphers(CipherSuite::EcdheEcdsaAes128GcmSha256);
    let mut buf = BytesMut::with_capacity(128);
    push_record(&mut buf, 23, 2, 9, b"sixteen bytes..!");
    client.seal_record(&mut buf, 0).unwrap();
    let good = buf.to_vec();
    assert_eq!(
        client.open_record(&mut good.clone()).unwrap(),
        b"sixteen bytes..!"
    );

    // Every single-bit flip anywhere (type, version, epoch, sequence number, length,
    // explicit nonce, ciphertext, tag) is refused.
    for i in 0..good.len() {
        for bit in [0x01u8, 0x80] {
            let mut bad = good.clone();
            bad[i] ^= bit;
            let err = client.open_record(&mut bad).unwrap_err();
            if i == 11 || i == 12 {
                assert!(
                    matches!(err, CryptoError::RecordLengthMismatch { .. }),
                    "byte {i}: {err:?}"
                );
            } else {
                assert_eq!(err, CryptoError::BadRecordMac, "byte {i}");
            }
        }
    }

    // The same bytes replayed under another epoch or sequence number (header rewritten,
    // explicit nonce untouched) do not authenticate.
    for (epoch, seq) in [(1u16, 9u64), (3, 9), (2, 8), (2, 10), (2, 9 | 1 << 40)] {
        let mut bad = good.clone();
        bad[3..5].copy_from_slice(&epoch.to_be_bytes());
        bad[5..11].copy_from_slice(&seq.to_be_bytes()[2..]);
        assert_eq!(
            client.open_record(&mut bad),
            Err(CryptoError::BadRecordMac),
            "epoch {epoch} seq {seq}"
        );
    }

    // Truncated, padded, and empty records are typed errors, never panics.
    for len in 0..good.len() {
        let mut short = good[..len].to_vec();
        assert!(client.open_record(&mut short).is_err());
    }
    let mut long = good.clone();
    long.push(0);
    assert!(matches!(
        client.open_record(&mut long),
        Err(CryptoError::RecordLengthMismatch { .. })
    ));
}

#[test]
fn seal_argument_errors() {
    let (client, _) = ciphers(CipherSuite::EcdheEcdsaAes128GcmSha256);
    let mut buf = BytesMut::from(&[0u8; 20][..]);
    assert_eq!(
        client.seal_record(&mut buf, 0),
        Err(CryptoError::RecordTooShort { len: 20 })
    );
    assert_eq!(
        client.seal_record(&mut buf, 30),
        Err(CryptoError::RecordTooShort { len: 0 })
    );
    let mut buf = BytesMut::new();
    push_record(&mut buf, 23, 1, 1, &vec![0; MAX_PLAINTEXT_LEN + 1]);
    assert_eq!(
        client.seal_record(&mut buf, 0),
        Err(CryptoError::RecordTooLong {
            len: MAX_PLAINTEXT_LEN + 1
        })
    );
    assert_eq!(
        RecordCipher::new(CipherSuite::EcdheEcdsaAes256GcmSha384, &[0; 16], [0; 4]).unwrap_err(),
        CryptoError::BadKeyLength {
            expected: 32,
            actual: 16
        }
    );
}

#[test]
fn ecdhe_agreement_both_groups() {
    for group in [NamedGroup::X25519, NamedGroup::Secp256r1] {
        let a = EphemeralKey::generate(group).unwrap();
        let b = EphemeralKey::generate(group).unwrap();
        assert_eq!(a.group(), group);
        let (a_pub, b_pub) = (a.public_key().to_vec(), b.public_key().to_vec());
        match group {
            NamedGroup::X25519 => assert_eq!(a_pub.len(), 32),
            NamedGroup::Secp256r1 => assert_eq!((a_pub.len(), a_pub[0]), (65, 4)),
        }
        let s1 = a.agree(&b_pub).unwrap();
        let s2 = b.agree(&a_pub).unwrap();
        assert_eq!(s1, s2);
        assert_eq!(s1.len(), 32);
        assert_ne!(
            EphemeralKey::generate(group).unwrap().public_key(),
            &a_pub[..]
        );
    }
    assert_eq!(NamedGroup::from_u16(29), Some(NamedGroup::X25519));
    assert_eq!(NamedGroup::from_u16(23), Some(NamedGroup::Secp256r1));
    assert_eq!(NamedGroup::from_u16(24), None);
}

#[test]
fn ecdhe_bad_peer_points_rejected() {
    let p256 = EphemeralKey::generate(NamedGroup::Secp256r1).unwrap();
    let good = p256.public_key().to_vec();
    let mut compressed = vec![0x02 | (good[64] & 1)];
    compressed.extend_from_slice(&good[1..33]);
    let mut off_curve = good.clone();
    off_curve[64] ^= 1;
    let mut infinity_like = vec![0x04];
    infinity_like.extend_from_slice(&[0; 64]);
    let bad_p256: Vec<Vec<u8>> = vec![
        vec![],
        vec![0x04],
        good[..64].to_vec(),
        [good.clone(), vec![0]].concat(),
        compressed,
        off_curve,
        infinity_like,
        {
            let mut b = good.clone();
            b[0] = 0x06; // hybrid form
            b
        },
    ];
    for bad in &bad_p256 {
        let k = EphemeralKey::generate(NamedGroup::Secp256r1).unwrap();
        assert_eq!(
            k.agree(bad),
            Err(CryptoError::BadPeerPublicKey),
            "{bad:02x?}"
        );
    }

    // X25519: wrong lengths, and points of small order whose shared secret is all zero
    // (u = 0 and u = 1, RFC 7748 §6.1's "all-zero value").
    let mut one = [0u8; 32];
    one[0] = 1;
    let bad_x25519: Vec<Vec<u8>> =
        vec![vec![], vec![9; 31], vec![9; 33], vec![0; 32], one.to_vec()];
    for bad in &bad_x25519 {
        let k = EphemeralKey::generate(NamedGroup::X25519).unwrap();
        assert_eq!(
            k.agree(bad),
            Err(CryptoError::BadPeerPublicKey),
            "{bad:02x?}"
        );
    }
    // A P-256 point offered to an X25519 key, and the other way round.
    let x = EphemeralKey::generate(NamedGroup::X25519).unwrap();
    assert_eq!(x.agree(&good), Err(CryptoError::BadPeerPublicKey));
    let p = EphemeralKey::generate(NamedGroup::Secp256r1).unwrap();
    assert_eq!(p.agree(&[9; 32]), Err(CryptoError::BadPeerPublicKey));
}

#[test]
fn certificate_sign_verify_round_trip() {
    let cert = DtlsCertificate::generate().unwrap();
    assert_eq!(cert.fingerprint_sha256(), fingerprint_sha256(cert.der()));
    let pk = peer_public_key(cert.der()).unwrap();
    assert_eq!(pk, cert.public_key());
    assert_eq!(pk.len(), 65);

    let msg = b"client_random + server_random + ServerECDHParams";
    let sig = cert.sign(msg).unwrap();
    verify_ecdsa_p256_sha256(&pk, msg, &sig).unwrap();
    assert_eq!(
        verify_ecdsa_p256_sha256(&pk, b"another message", &sig),
        Err(CryptoError::BadSignature)
    );
    let mut bad_sig = sig.clone();
    let last = bad_sig.len() - 1;
    bad_sig[last] ^= 1;
    assert_eq!(
        verify_ecdsa_p256_sha256(&pk, msg, &bad_sig),
        Err(CryptoError::BadSignature)
    );
    assert_eq!(
        verify_ecdsa_p256_sha256(&pk[..64], msg, &sig),
        Err(CryptoError::BadSignature)
    );

    // Two generated certificates differ; Debug shows the fingerprint only.
    let other = DtlsCertificate::generate().unwrap();
    assert_ne!(other.fingerprint_sha256(), cert.fingerprint_sha256());
    assert_eq!(
        verify_ecdsa_p256_sha256(other.public_key(), msg, &sig),
        Err(CryptoError::BadSignature)
    );
    let debug = format!("{cert:?}");
    assert!(debug.starts_with("DtlsCertificate { sha-256 "), "{debug}");
    assert_eq!(debug.matches(':').count(), 31, "{debug}");
}

// Made with the openssl 3.0 command line; fixtures/dtls/README.md has every command:
//   openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
//     -keyout key.pem -subj "/CN=shoal-openssl-fixture" -days 36500 -outform DER \
//     -out openssl_p256_cert.der
//   openssl pkcs8 -topk8 -nocrypt -in key.pem -outform DER -out openssl_p256_key.pk8
//   openssl dgst -sha256 -sign key.pem -out openssl_p256_message.sig openssl_p256_message.bin
// and the same with secp384r1 / -sha384 (openssl_p384_*) and rsa:2048 (openssl_rsa_cert.der).
const OPENSSL_P256_CERT: &[u8] = include_bytes!("fixtures/dtls/openssl/openssl_p256_cert.der");
const OPENSSL_P256_KEY: &[u8] = include_bytes!("fixtures/dtls/openssl/openssl_p256_key.pk8");
const OPENSSL_MESSAGE: &[u8] = include_bytes!("fixtures/dtls/openssl/openssl_p256_message.bin");
const OPENSSL_P256_SIG: &[u8] = include_bytes!("fixtures/dtls/openssl/openssl_p256_message.sig");
const OPENSSL_P384_CERT: &[u8] = include_bytes!("fixtures/dtls/openssl/openssl_p384_cert.der");
const OPENSSL_P384_SIG: &[u8] = include_bytes!("fixtures/dtls/openssl/openssl_p384_message.sig");
const OPENSSL_RSA_CERT: &[u8] = include_bytes!("fixtures/dtls/openssl/openssl_rsa_cert.der");

#[test]
fn openssl_certificates() {
    // openssl's certificate: our walker finds its key, and openssl's signature verifies.
    let pk = peer_public_key(OPENSSL_P256_CERT).unwrap();
    assert_eq!(pk.len(), 65);
    verify_ecdsa_p256_sha256(&pk, OPENSSL_MESSAGE, OPENSSL_P256_SIG).unwrap();
    assert_eq!(
        verify_ecdsa_p256_sha256(&pk, &OPENSSL_MESSAGE[1..], OPENSSL_P256_SIG),
        Err(CryptoError::BadSignature)
    );
    // `openssl x509 -inform DER -noout -fingerprint -sha256` printed this.
    assert_eq!(
        fingerprint_sha256(OPENSSL_P256_CERT).to_vec(),
        h("2B62B9A05CB8A54E109E3D97A6B77A756281522EB39735F8AAA6B4DBB1FD4893")
    );

    // Loaded as our own certificate from openssl's DER and PKCS#8 files, it signs what
    // its public key verifies.
    let ours = DtlsCertificate::from_der(OPENSSL_P256_CERT.to_vec(), OPENSSL_P256_KEY).unwrap();
    assert_eq!(ours.der(), OPENSSL_P256_CERT);
    let sig = ours.sign(b"m").unwrap();
    verify_ecdsa_p256_sha256(&pk, b"m", &sig).unwrap();

    // A key that is not the certificate's, and keys that are not keys.
    let rcgen = DtlsCertificate::generate().unwrap();
    assert_eq!(
        DtlsCertificate::from_der(rcgen.der().to_vec(), OPENSSL_P256_KEY).unwrap_err(),
        CryptoError::KeyMismatch
    );
    assert_eq!(
        DtlsCertificate::from_der(OPENSSL_P256_CERT.to_vec(), &OPENSSL_P256_KEY[1..]).unwrap_err(),
        CryptoError::BadPrivateKey
    );

    // P-384: found with its curve, verified with the P-384 scheme; refused where P-256
    // is required.
    let (curve, pk384) = peer_public_key_with_curve(OPENSSL_P384_CERT).unwrap();
    assert_eq!((curve, pk384.len()), (EcCurve::P384, 97));
    verify_ecdsa_p384_sha384(&pk384, OPENSSL_MESSAGE, OPENSSL_P384_SIG).unwrap();
    assert_eq!(
        peer_public_key(OPENSSL_P384_CERT),
        Err(CryptoError::Certificate(DerError::WrongCurve(
            EcCurve::P384
        )))
    );
    // RSA: not an EC key.
    assert_eq!(
        peer_public_key(OPENSSL_RSA_CERT),
        Err(CryptoError::Certificate(DerError::NotEcPublicKey))
    );
}

/// A small deterministic generator for the mutation loop.
struct XorShift(u64);
impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Garbage and mutated DER never panics the walker: every truncation, then a bounded
/// number of random mutations (byte flips, length bytes set to extremes, cuts, splices)
/// of rcgen and openssl certificates, then random bytes.
#[test]
fn garbage_der_never_panics() {
    let rcgen = DtlsCertificate::generate().unwrap();
    let seeds: [&[u8]; 4] = [
        rcgen.der(),
        OPENSSL_P256_CERT,
        OPENSSL_P384_CERT,
        OPENSSL_RSA_CERT,
    ];
    let check = |input: &[u8]| match peer_public_key_with_curve(input) {
        Ok((curve, point)) => assert_eq!(point.len(), curve.point_len()),
        Err(CryptoError::Certificate(_)) => {}
        Err(other) => panic!("unexpected error {other:?}"),
    };

    for seed in seeds {
        for len in 0..seed.len() {
            check(&seed[..len]);
            assert!(peer_public_key(&seed[..len]).is_err());
        }
    }

    let mut rng = XorShift(0x5EED_D7A5_C0FF_EE01);
    let mut accepted = 0;
    for i in 0..40_000 {
        let seed = seeds[i % seeds.len()];
        let mut m = seed.to_vec();
        for _ in 0..1 + rng.below(4) {
            match rng.below(5) {
                0 => {
                    let j = rng.below(m.len());
                    m[j] ^= 1 << rng.below(8);
                }
                1 => {
                    let j = rng.below(m.len());
                    m[j] = [0x00, 0x7F, 0x80, 0x81, 0x82, 0x83, 0x84, 0xFF][rng.below(8)];
                }
                2 => {
                    let j = rng.below(m.len());
                    m.truncate(j.max(1));
                }
                3 => {
                    let j = rng.below(m.len());
                    let k = rng.below(m.len());
                    let (lo, hi) = (j.min(k), j.max(k));
                    m.drain(lo..hi);
                    if m.is_empty() {
                        m.push(0x30);
                    }
                }
                _ => {
                    let j = rng.below(m.len());
                    let extra: Vec<u8> = (0..rng.below(8)).map(|_| rng.next() as u8).collect();
                    m.splice(j..j, extra);
                }
            }
        }
        if peer_public_key_with_curve(&m).is_ok() {
            accepted += 1;
        }
        check(&m);
    }
    // Most mutations hit bytes the walker skips (names, dates, signature), so some
    // mutants still parse; many do not.
    assert!(accepted > 0 && accepted < 40_000, "{accepted}");

    for _ in 0..5_000 {
        let len = rng.below(600);
        let mut m: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        if !m.is_empty() {
            m[0] = 0x30;
        }
        check(&m);
    }
}

#[test]
fn enums_round_trip() {
    for s in [
        CipherSuite::EcdheEcdsaAes128GcmSha256,
        CipherSuite::EcdheEcdsaAes256GcmSha384,
    ] {
        assert_eq!(CipherSuite::from_u16(s as u16), Some(s));
    }
    assert_eq!(CipherSuite::from_u16(0xC02F), None);
    assert_eq!(
        CipherSuite::EcdheEcdsaAes256GcmSha384.prf_hash(),
        PrfHash::Sha384
    );
    assert_eq!(CipherSuite::EcdheEcdsaAes128GcmSha256.key_len(), 16);
    for p in [
        SrtpProfile::Aes128CmHmacSha1_80,
        SrtpProfile::AeadAes128Gcm,
        SrtpProfile::AeadAes256Gcm,
    ] {
        assert_eq!(SrtpProfile::from_u16(p as u16), Some(p));
    }
    assert_eq!(SrtpProfile::from_u16(0x0002), None);
    assert_eq!(
        (
            SrtpProfile::Aes128CmHmacSha1_80.salt_len(),
            SrtpProfile::AeadAes256Gcm.key_len()
        ),
        (14, 32)
    );
}
