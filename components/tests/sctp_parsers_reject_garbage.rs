//! Over 100 000 random and mutated SCTP packets, chunk areas and DCEP messages through
//! every parser: the packet header and checksum, the chunk walk, every chunk type, every
//! parameter list and list accessor, and DCEP. Whatever the input, each parser returns a
//! value or a typed error; nothing panics. Most mutants get their checksum repaired, so
//! the chunk parsers see them rather than the CRC check stopping them. Whatever parses
//! is written back and parsed again, and must come back the same.

mod mutate;

use std::path::PathBuf;

use bytes::{Bytes, BytesMut};
use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};
use shoal_components::sctp::chunk::*;
use shoal_components::sctp::dcep::*;
use shoal_components::sctp::packet::*;

const ITERATIONS: usize = 120_000;

/// The aiortc fixtures: SCTP packets and DCEP messages.
fn seeds() -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sctp");
    let (mut packets, mut dcep) = (Vec::new(), Vec::new());
    for e in std::fs::read_dir(&dir).unwrap().flatten() {
        let name = e.file_name().into_string().unwrap();
        if !name.ends_with(".bin") {
            continue;
        }
        let bytes = std::fs::read(e.path()).unwrap();
        if name.starts_with("dcep_") {
            dcep.push(bytes);
        } else {
            packets.push(bytes);
        }
    }
    packets.sort();
    dcep.sort();
    (packets, dcep)
}

/// Sets a correct checksum, so the chunk parsers see the packet.
fn fix_checksum(d: &mut [u8]) {
    if d.len() >= COMMON_HEADER_LEN {
        let crc = checksum(d);
        d[8..12].copy_from_slice(&crc.to_le_bytes());
    }
}

/// Walks everything a chunk offers, and checks that writing it and parsing it again
/// gives the same chunk. Returns a count so the work is not optimised away.
fn exercise(chunk: &Chunk) -> usize {
    let mut n = 1;
    match chunk {
        Chunk::Data(d) => n += d.payload.len(),
        Chunk::Init(c) => {
            n += c.params.iter().count() + c.validate().is_ok() as usize;
            n += c.state_cookie().map_or(0, |b| b.len());
            n += c.forward_tsn_supported() as usize + c.supports_chunk(130) as usize;
            n += c
                .params
                .iter()
                .map(|p| p.address_types().count())
                .sum::<usize>();
        }
        Chunk::InitAck(c) => {
            n += c.params.iter().count() + c.validate().is_ok() as usize;
            n += c.state_cookie().map_or(0, |b| b.len());
        }
        Chunk::Sack(s) => {
            let cum = s.cumulative_tsn_ack;
            for b in s.gap_ack_blocks.iter() {
                assert!(b.start >= 1 && b.start <= b.end);
                n += b.last_tsn(cum).distance_from(b.first_tsn(cum)) as usize;
            }
            n += s.duplicate_tsns.iter().count();
            assert_eq!(s.gap_ack_blocks.iter().len(), s.gap_ack_blocks.len());
        }
        Chunk::Abort(a) => n += walk_causes(a.causes.iter()),
        Chunk::Error(e) => n += walk_causes(e.causes.iter()),
        Chunk::ForwardTsn(f) => n += f.skipped.iter().count(),
        Chunk::ReConfig(r) => {
            for p in r.params.iter() {
                n += match p {
                    ReconfigParam::OutgoingSsnReset { streams, .. }
                    | ReconfigParam::IncomingSsnReset { streams, .. } => streams.iter().count(),
                    _ => 1,
                };
            }
        }
        Chunk::Heartbeat(h) => n += h.info.len(),
        Chunk::HeartbeatAck(h) => n += h.info.len(),
        Chunk::CookieEcho(c) => n += c.cookie.len(),
        Chunk::Unknown { typ, .. } => n += unknown_chunk_action(*typ) as usize,
        Chunk::Shutdown(_)
        | Chunk::ShutdownAck(_)
        | Chunk::ShutdownComplete(_)
        | Chunk::CookieAck(_) => {}
    }
    // Encode, then decode: the same chunk again (both sides of the pair).
    let mut out = BytesMut::new();
    chunk.write_to(&mut out);
    assert_eq!(out.len(), chunk.padded_len());
    let mut again = Chunks::new(out.freeze());
    let reparsed = again.next().expect("one chunk").expect("reparses");
    assert_eq!(&reparsed, chunk);
    assert!(again.next().is_none());
    n
}

fn walk_causes(causes: impl Iterator<Item = ErrorCause>) -> usize {
    let mut n = 0;
    for c in causes {
        n += c.invalid_stream().is_some() as usize;
        n += c.stale_cookie_staleness_us().is_some() as usize;
        n += c.missing_mandatory_params().map_or(0, |i| i.count());
        n += c.no_user_data_tsn().is_some() as usize;
        n += c.unrecognized_chunk_bytes().map_or(0, |b| b.len());
        n += c.unrecognized_parameters().map_or(0, |b| b.len());
    }
    n
}

/// Every parser over one input. Returns how much parsed, so nothing is optimised away.
fn parse_everything(d: &[u8]) -> usize {
    let mut ok = 0;
    let bytes = Bytes::copy_from_slice(d);
    if let Ok(p) = Packet::parse(&bytes) {
        ok += 1;
        for c in p.chunks() {
            match c {
                Ok(c) => ok += exercise(&c),
                Err(e) => ok += e.to_string().len() % 2,
            }
        }
    }
    // The same bytes as a chunk area without a header.
    for c in Chunks::new(bytes.clone()).flatten() {
        ok += exercise(&c);
    }
    // And as a DCEP message: what parses writes back the same.
    if let Ok(m) = DcepMessage::parse(d) {
        let mut out = BytesMut::new();
        m.write_to(&mut out);
        assert_eq!(out.len(), m.encoded_len());
        assert_eq!(DcepMessage::parse(&out), Ok(m));
        ok += 1;
    }
    ok
}

/// One mutation of a seed: bit flips, boundary bytes, cuts, insertions, length-field
/// and count attacks, chunk splicing, or pure noise.
fn mutate(rng: &mut ChaCha8Rng, seed: &[u8], other: &[u8]) -> Vec<u8> {
    let mut d = seed.to_vec();
    let op = rng.next_u32() % 9;
    match op {
        5 => {
            // Length and count fields: chunk length (14..16), the first parameter's
            // length or SACK counts (22..24, 24..28), and a few more 16-bit fields.
            for at in [14usize, 15, 22, 23, 24, 25, 26, 27, 34, 35] {
                if rng.next_u32().is_multiple_of(2)
                    && let Some(b) = d.get_mut(at)
                {
                    *b = [0, 1, 3, 4, 5, 0xff, rng.next_u32() as u8][mutate::pick(rng, 7)];
                }
            }
            d
        }
        6 => {
            // Change the first chunk's type, keeping its body: every parser sees every body.
            if let Some(b) = d.get_mut(COMMON_HEADER_LEN) {
                *b = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 14, 130, 192][mutate::pick(rng, 15)];
            }
            d
        }
        7 => {
            // Splice another packet's chunks onto this one.
            d.extend_from_slice(other.get(COMMON_HEADER_LEN..).unwrap_or(&[]));
            d
        }
        _ => mutate::generic(
            rng,
            d,
            op,
            1500,
            &[0, 1, 2, 3, 4, 0x7f, 0x80, 0xc0, 0xfe, 0xff],
        ),
    }
}

#[test]
fn sctp_parsers_reject_garbage() {
    let (packets, dcep) = seeds();
    assert!(packets.len() >= 40 && dcep.len() >= 8);
    let mut rng = ChaCha8Rng::seed_from_u64(0x5c7b);
    let (mut inputs, mut parsed) = (0usize, 0usize);
    // The seeds themselves parse.
    for p in &packets {
        assert!(parse_everything(p) > 0);
    }
    for m in &dcep {
        assert!(parse_everything(m) > 0);
    }
    for i in 0..ITERATIONS {
        let (seed, other) = if i % 5 == 4 {
            (&dcep[i % dcep.len()], &dcep[(i / 3) % dcep.len()])
        } else {
            (
                &packets[i % packets.len()],
                &packets[(i / 7) % packets.len()],
            )
        };
        let mut d = mutate(&mut rng, seed, other);
        // Stack a second mutation now and then.
        if rng.next_u32().is_multiple_of(4) {
            d = mutate(&mut rng, &d, other);
        }
        if !rng.next_u32().is_multiple_of(5) {
            fix_checksum(&mut d);
        }
        parsed += parse_everything(&d);
        inputs += 1;
    }
    assert!(inputs >= 100_000);
    assert!(parsed > inputs, "too little parsed: {parsed}");
}
