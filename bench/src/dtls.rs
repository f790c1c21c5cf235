//! DTLS 1.2 record protection throughput: AES-GCM seal and open of 1200-byte records,
//! in place, one reused buffer, for both cipher suites.

use std::hint::black_box;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use shoal_components::dtls::crypto::{
    AEAD_TAG_LEN, CipherSuite, EXPLICIT_NONCE_LEN, RECORD_HEADER_LEN, RecordCipher, key_block,
};

use crate::opt;

/// Plaintext bytes per record: a typical SCTP packet under a 1280-byte path MTU budget.
const PLAINTEXT_LEN: usize = 1200;

pub(crate) fn run(args: &[String]) -> ExitCode {
    let records = match opt(args, "--records", 1_000_000) {
        Ok(v) => v.clamp(1, 100_000_000),
        Err(e) => {
            eprintln!("shoal-bench dtls: {e}");
            return ExitCode::from(2);
        }
    };
    println!(
        "dtls record protection: {records} records of {PLAINTEXT_LEN} plaintext bytes per line, \
         in place, one reused buffer"
    );
    for suite in [
        CipherSuite::EcdheEcdsaAes128GcmSha256,
        CipherSuite::EcdheEcdsaAes256GcmSha384,
    ] {
        let kb = key_block(suite, &[0x42; 48], &[1; 32], &[2; 32]);
        let cipher = match RecordCipher::new(suite, &kb.client_write_key, kb.client_write_iv) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("shoal-bench dtls: {e}");
                return ExitCode::FAILURE;
            }
        };
        match seal(&cipher, records) {
            Ok(elapsed) => report(suite, "seal", records, elapsed, None),
            Err(e) => {
                eprintln!("shoal-bench dtls: seal: {e}");
                return ExitCode::FAILURE;
            }
        }
        match open(&cipher, records) {
            Ok((elapsed, copy)) => report(suite, "open", records, elapsed, Some(copy)),
            Err(e) => {
                eprintln!("shoal-bench dtls: open: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}

/// A buffer with one unsealed record (header, reserved explicit nonce, plaintext) and room
/// for the tag, so sealing never allocates.
fn record_buffer() -> BytesMut {
    let mut buf =
        BytesMut::with_capacity(RECORD_HEADER_LEN + EXPLICIT_NONCE_LEN + PLAINTEXT_LEN + 64);
    buf.extend_from_slice(&[23, 0xFE, 0xFD, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0]);
    buf.extend_from_slice(&[0; EXPLICIT_NONCE_LEN]);
    buf.extend_from_slice(&[0x5A; PLAINTEXT_LEN]);
    buf
}

/// Writes the 48-bit sequence number into the header, so every record has its own nonce.
fn set_seq(record: &mut [u8], seq: u64) {
    record[5..11].copy_from_slice(&seq.to_be_bytes()[2..]);
}

/// Seals `records` records: each round drops the previous tag, takes the next sequence
/// number and seals the buffer's bytes again (ciphertext re-encrypted as plaintext; the
/// cost is the same).
fn seal(cipher: &RecordCipher, records: u64) -> Result<Duration, String> {
    let mut buf = record_buffer();
    let unsealed_len = buf.len();
    let round = |seq: u64, buf: &mut BytesMut| -> Result<(), String> {
        buf.truncate(unsealed_len);
        set_seq(buf, seq);
        cipher.seal_record(buf, 0).map_err(|e| e.to_string())?;
        black_box(&buf[..]);
        Ok(())
    };
    for seq in 0..records.min(10_000) {
        round(seq, &mut buf)?;
    }
    let capacity = buf.capacity();
    let start = Instant::now();
    for seq in 0..records {
        round(seq, &mut buf)?;
    }
    let elapsed = start.elapsed();
    if buf.capacity() != capacity {
        return Err("the record buffer grew inside the loop".into());
    }
    Ok(elapsed)
}

/// Opens `records` records. Opening decrypts in place, so each round first restores the
/// sealed bytes from a pristine copy (a 1237-byte memcpy, timed separately and reported
/// beside the result).
fn open(cipher: &RecordCipher, records: u64) -> Result<(Duration, Duration), String> {
    let mut buf = record_buffer();
    set_seq(&mut buf, 7);
    cipher.seal_record(&mut buf, 0).map_err(|e| e.to_string())?;
    let sealed = buf.to_vec();
    let mut work = sealed.clone();
    if work.len() != RECORD_HEADER_LEN + EXPLICIT_NONCE_LEN + PLAINTEXT_LEN + AEAD_TAG_LEN {
        return Err("unexpected sealed length".into());
    }

    let round = |work: &mut [u8]| -> Result<(), String> {
        work.copy_from_slice(&sealed);
        let plain = cipher.open_record(work).map_err(|e| e.to_string())?;
        black_box(plain);
        Ok(())
    };
    for _ in 0..records.min(10_000) {
        round(&mut work)?;
    }
    let start = Instant::now();
    for _ in 0..records {
        round(&mut work)?;
    }
    let elapsed = start.elapsed();

    let start = Instant::now();
    for _ in 0..records {
        work.copy_from_slice(black_box(&sealed));
        black_box(&work);
    }
    let copy = start.elapsed();
    Ok((elapsed, copy))
}

fn report(suite: CipherSuite, op: &str, records: u64, elapsed: Duration, copy: Option<Duration>) {
    let secs = elapsed.as_secs_f64().max(1e-9);
    let per_record_ns = secs * 1e9 / records as f64;
    let mib_s = (records as f64 * PLAINTEXT_LEN as f64) / secs / (1024.0 * 1024.0);
    let name = match suite {
        CipherSuite::EcdheEcdsaAes128GcmSha256 => "AES_128_GCM_SHA256 (0xC02B)",
        CipherSuite::EcdheEcdsaAes256GcmSha384 => "AES_256_GCM_SHA384 (0xC02C)",
    };
    let note = match copy {
        Some(c) => format!(
            "  (includes restoring the record: {:.0} ns)",
            c.as_secs_f64() * 1e9 / records as f64
        ),
        None => String::new(),
    };
    println!(
        "{name} {op}: {:>10.0} records/s {:>8.1} MiB/s {:>7.1} ns/record{note}",
        records as f64 / secs,
        mib_s,
        per_record_ns
    );
}
