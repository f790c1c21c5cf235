//! A bounded property test: random and mutated inputs to the STUN and SDP parsers
//! give errors or values, never a panic; whatever parses can be used and serialized.

use bytes::{Bytes, BytesMut};
use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};
use shoal_components::sdp::SessionDescription;
use shoal_components::stun::{BINDING, Class, StunMessage, StunWriter, TransactionId};

const STUN_CASES: usize = 120_000;
const SDP_CASES: usize = 100_000;

fn below(rng: &mut ChaCha8Rng, n: usize) -> usize {
    (rng.next_u64() % n.max(1) as u64) as usize
}

fn valid_stun(rng: &mut ChaCha8Rng) -> Vec<u8> {
    let mut buf = BytesMut::new();
    let mut tid = [0u8; 12];
    rng.fill_bytes(&mut tid);
    let class = [Class::Request, Class::SuccessResponse, Class::ErrorResponse][below(rng, 3)];
    let mut w = StunWriter::new(&mut buf, class, BINDING, TransactionId(tid));
    w.username(b"abcd:efgh")
        .priority(rng.next_u64() as u32)
        .ice_controlling(rng.next_u64());
    if below(rng, 2) == 0 {
        w.use_candidate();
    }
    if class == Class::ErrorResponse {
        w.error_code(487, "Role Conflict");
    } else {
        w.xor_mapped_address("192.0.2.1:3478".parse().unwrap_or_else(|_| unreachable!()));
    }
    w.message_integrity(b"0123456789abcdefghijkl");
    // Without FINGERPRINT, mutations past the header often still parse, which
    // exercises the attribute walk and accessors rather than only the CRC check.
    if below(rng, 2) == 0 {
        w.fingerprint();
    }
    w.finish();
    buf.to_vec()
}

/// Exercises every accessor of a parsed message.
fn use_stun(m: &StunMessage) {
    let _ = (
        m.class(),
        m.method(),
        m.transaction_id(),
        m.username(),
        m.priority(),
    );
    let _ = (m.use_candidate(), m.ice_controlling(), m.ice_controlled());
    let _ = (m.xor_mapped_address(), m.error_code(), m.has_fingerprint());
    let _ = (
        m.has_message_integrity(),
        m.unknown_comprehension_required(),
    );
    let _ = m.verify_integrity(b"0123456789abcdefghijkl");
    let _ = m.verify_integrity(b"");
}

fn mutate(rng: &mut ChaCha8Rng, input: &mut Vec<u8>) {
    for _ in 0..1 + below(rng, 4) {
        match below(rng, 6) {
            0 if !input.is_empty() => {
                let i = below(rng, input.len());
                input[i] ^= 1 << below(rng, 8);
            }
            1 if !input.is_empty() => {
                let i = below(rng, input.len());
                input[i] = rng.next_u32() as u8;
            }
            2 => input.truncate(below(rng, input.len() + 1)),
            3 => {
                let i = below(rng, input.len() + 1);
                let n = below(rng, 16);
                for _ in 0..n {
                    input.insert(i, rng.next_u32() as u8);
                }
            }
            4 if input.len() >= 4 => {
                // Length fields are where parsers go wrong: poke the header's.
                let v = rng.next_u32() as u16;
                input[2..4].copy_from_slice(&v.to_be_bytes());
            }
            _ => {
                let i = below(rng, input.len() + 1);
                input.truncate(i);
                input.extend_from_slice(&[0x80, 0x28, 0x00, 0x04, 0, 0, 0, 0]);
            }
        }
    }
}

#[test]
fn parsers_reject_garbage() {
    let mut rng = ChaCha8Rng::seed_from_u64(0x5eed);

    let mut stun_ok = 0usize;
    let mut stun_err = 0usize;
    for i in 0..STUN_CASES {
        let input = if i % 3 == 0 {
            let mut v = vec![0u8; below(&mut rng, 600)];
            rng.fill_bytes(&mut v);
            // Half of the random inputs look like STUN at first glance.
            if v.len() >= 8 && below(&mut rng, 2) == 0 {
                v[0] &= 0x3f;
                v[4..8].copy_from_slice(&0x2112_a442u32.to_be_bytes());
            }
            v
        } else {
            let mut v = valid_stun(&mut rng);
            mutate(&mut rng, &mut v);
            v
        };
        match StunMessage::parse(Bytes::from(input)) {
            Ok(m) => {
                use_stun(&m);
                stun_ok += 1;
            }
            Err(_) => stun_err += 1,
        }
    }
    // The mutations must really exercise both outcomes, or the test proves nothing.
    assert!(
        stun_err > STUN_CASES / 2,
        "only {stun_err} STUN inputs rejected"
    );
    assert!(
        stun_ok > STUN_CASES / 50,
        "only {stun_ok} STUN inputs parsed"
    );

    let fixtures: Vec<String> =
        std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/sdp"))
            .map(|rd| {
                rd.filter_map(|e| e.ok())
                    .filter(|e| e.path().extension().is_some_and(|x| x == "sdp"))
                    .filter_map(|e| std::fs::read_to_string(e.path()).ok())
                    .collect()
            })
            .unwrap_or_default();
    assert!(!fixtures.is_empty(), "SDP fixtures missing");
    const PIECES: &[&str] = &[
        "a=",
        "m=",
        "c=",
        "v=0",
        ":",
        " ",
        "\r\n",
        "\n",
        "=",
        "a=rtpmap:",
        "a=candidate:",
        "a=fingerprint:sha-256 ",
        "a=extmap:",
        "a=ssrc:",
        "a=rid:",
        "a=simulcast:",
        "/",
        "99999999999999999999",
        "-1",
        "\u{0}",
        "é",
        "a=group:BUNDLE",
        "m=video 9 UDP/TLS/RTP/SAVPF",
    ];
    let mut sdp_ok = 0usize;
    let mut sdp_err = 0usize;
    for i in 0..SDP_CASES {
        let base = &fixtures[i % fixtures.len()];
        let mut text = base.clone();
        for _ in 0..1 + below(&mut rng, 4) {
            let mut at = below(&mut rng, text.len() + 1);
            while !text.is_char_boundary(at) {
                at -= 1;
            }
            match below(&mut rng, 4) {
                0 => text.insert_str(at, PIECES[below(&mut rng, PIECES.len())]),
                1 => {
                    let mut end = (at + below(&mut rng, 40)).min(text.len());
                    while !text.is_char_boundary(end) {
                        end -= 1;
                    }
                    text.replace_range(at..end, "");
                }
                2 => text.truncate(at),
                _ => {
                    let mut lines: Vec<&str> = text.split("\r\n").collect();
                    if lines.len() > 1 {
                        let a = below(&mut rng, lines.len());
                        let b = below(&mut rng, lines.len());
                        lines.swap(a, b);
                    }
                    text = lines.join("\r\n");
                }
            }
        }
        match SessionDescription::parse(&text) {
            Ok(sd) => {
                // Whatever parses serializes, and what it serializes to parses again.
                let again = sd.to_string();
                let _ = SessionDescription::parse(&again);
                sdp_ok += 1;
            }
            Err(_) => sdp_err += 1,
        }
    }
    assert!(sdp_err > 1000, "only {sdp_err} SDP inputs rejected");
    assert!(sdp_ok > 1000, "only {sdp_ok} SDP inputs parsed");
    eprintln!(
        "stun: {stun_ok} parsed, {stun_err} rejected; sdp: {sdp_ok} parsed, {sdp_err} rejected"
    );
}
