//! SRTP and SRTCP protection cost: nanoseconds per protect and per unprotect of one RTP
//! packet (1200 and 100 bytes) and one 104-byte RTCP packet, for each profile shoal
//! negotiates, in place in reused buffers; then the crypto backends under the AES-CM
//! profile side by side (HMAC-SHA1 in RustCrypto and in ring, AES-CTR, and ring's
//! AES-GCM for scale).

use std::hint::black_box;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use shoal_components::srtp::{SrtpConfig, SrtpInbound, SrtpOutbound, SrtpProfile};

use crate::opt;

/// Whole RTP packet sizes: a full video packet under a 1280-byte path MTU budget, and
/// an audio packet.
const RTP_SIZES: [usize; 2] = [1200, 100];

/// A receiver report with four report blocks: 8 + 4 * 24 bytes.
const RTCP_LEN: usize = 104;

/// Packets protected ahead of each timed unprotect batch: 256 packets of 1216 bytes stay
/// in L2 like a tick's worth of received datagrams.
const BATCH: usize = 256;

const SSRC: u32 = 0x5EED_0001;

const PROFILES: [(SrtpProfile, &str); 3] = [
    (SrtpProfile::Aes128CmHmacSha1_80, "AES128_CM_HMAC_SHA1_80"),
    (SrtpProfile::AeadAes128Gcm, "AEAD_AES_128_GCM"),
    (SrtpProfile::AeadAes256Gcm, "AEAD_AES_256_GCM"),
];

pub(crate) fn run(args: &[String]) -> ExitCode {
    let packets = match opt(args, "--packets", 500_000) {
        Ok(v) => v.clamp(BATCH as u64, 100_000_000) as usize,
        Err(e) => {
            eprintln!("shoal-bench srtp: {e}");
            return ExitCode::from(2);
        }
    };
    println!(
        "srtp: {packets} packets per figure, in place, one SSRC; unprotect figures include \
         restoring each packet from a batch of {BATCH} (the copy is shown beside them)"
    );
    #[cfg(target_arch = "x86_64")]
    println!(
        "cpu: aes {}, pclmulqdq {}, sha {}",
        std::arch::is_x86_feature_detected!("aes"),
        std::arch::is_x86_feature_detected!("pclmulqdq"),
        std::arch::is_x86_feature_detected!("sha"),
    );
    for (profile, name) in PROFILES {
        if let Err(e) = bench_profile(profile, name, packets) {
            eprintln!("shoal-bench srtp: {name}: {e}");
            return ExitCode::FAILURE;
        }
    }
    backends(packets);
    ExitCode::SUCCESS
}

fn contexts(profile: SrtpProfile) -> Result<(SrtpOutbound, SrtpInbound), String> {
    let key: Vec<u8> = (0..profile.key_len() as u8).collect();
    let salt: Vec<u8> = (0..profile.salt_len() as u8).map(|b| b ^ 0xA5).collect();
    let config = SrtpConfig::default();
    Ok((
        SrtpOutbound::new(profile, &key, &salt, config).map_err(|e| e.to_string())?,
        SrtpInbound::new(profile, &key, &salt, config).map_err(|e| e.to_string())?,
    ))
}

fn rtp_packet(len: usize) -> Vec<u8> {
    let mut p = vec![0x80, 96, 0, 0, 0, 0, 0, 0];
    p.extend_from_slice(&SSRC.to_be_bytes());
    p.extend((12..len).map(|i| i as u8));
    p
}

fn rtcp_packet() -> Vec<u8> {
    let mut p = vec![0x84, 201, 0, (RTCP_LEN / 4 - 1) as u8];
    p.extend_from_slice(&SSRC.to_be_bytes());
    p.extend((8..RTCP_LEN).map(|i| i as u8));
    p
}

fn set_seq(packet: &mut [u8], seq: u16) {
    packet[2..4].copy_from_slice(&seq.to_be_bytes());
}

fn bench_profile(profile: SrtpProfile, name: &str, packets: usize) -> Result<(), String> {
    for size in RTP_SIZES {
        let protect = protect_rtp(profile, size, packets)?;
        let (unprotect, copy) = unprotect_rtp(profile, size, packets)?;
        print_line(
            name,
            &format!("RTP {size:>4} B"),
            packets,
            protect,
            unprotect,
            copy,
        );
    }
    let protect = protect_rtcp(profile, packets)?;
    let (unprotect, copy) = unprotect_rtcp(profile, packets)?;
    print_line(
        name,
        &format!("RTCP {RTCP_LEN:>3} B"),
        packets,
        protect,
        unprotect,
        copy,
    );
    Ok(())
}

fn print_line(
    name: &str,
    what: &str,
    packets: usize,
    protect: Duration,
    unprotect: Duration,
    copy: Duration,
) {
    let ns = |d: Duration| d.as_secs_f64() * 1e9 / packets as f64;
    println!(
        "{name:<24} {what}  protect {:>6.0} ns  unprotect {:>6.0} ns  (copy {:>3.0} ns)",
        ns(protect),
        ns(unprotect),
        ns(copy)
    );
}

/// Protects one buffer over and over, each time under the next sequence number (the
/// payload is re-encrypted ciphertext; the cost is the same).
fn protect_rtp(profile: SrtpProfile, size: usize, packets: usize) -> Result<Duration, String> {
    let (mut tx, _) = contexts(profile)?;
    let mut buf = rtp_packet(size);
    buf.resize(size + profile.rtp_overhead(), 0);
    let mut round = |i: usize| -> Result<(), String> {
        set_seq(&mut buf, i as u16);
        let n = tx.protect_rtp(&mut buf, size).map_err(|e| e.to_string())?;
        black_box(&buf[..n]);
        Ok(())
    };
    let warm = packets.min(10_000);
    for i in 0..warm {
        round(i)?;
    }
    let start = Instant::now();
    for i in warm..warm + packets {
        round(i)?;
    }
    Ok(start.elapsed())
}

/// Unprotects `packets` packets, protected (untimed) a batch at a time; each timed
/// round copies one protected packet into the work buffer and unprotects it there.
/// Returns the time and, separately, the time of the copies alone.
fn unprotect_rtp(
    profile: SrtpProfile,
    size: usize,
    packets: usize,
) -> Result<(Duration, Duration), String> {
    let (mut tx, mut rx) = contexts(profile)?;
    let stride = size + profile.rtp_overhead();
    let template = rtp_packet(size);
    let mut seq = 0usize;
    let fill = |tx: &mut SrtpOutbound, pool: &mut [u8], seq: &mut usize| -> Result<(), String> {
        for slot in pool.chunks_mut(stride) {
            slot[..size].copy_from_slice(&template);
            set_seq(slot, *seq as u16);
            *seq += 1;
            tx.protect_rtp(slot, size).map_err(|e| e.to_string())?;
        }
        Ok(())
    };
    unprotect_batches(packets, stride, &mut tx, &mut seq, fill, |work| {
        rx.unprotect_rtp(work)
            .map(|p| p.len)
            .map_err(|e| e.to_string())
    })
}

fn protect_rtcp(profile: SrtpProfile, packets: usize) -> Result<Duration, String> {
    let (mut tx, _) = contexts(profile)?;
    let plain = rtcp_packet();
    let mut buf = plain.clone();
    buf.resize(RTCP_LEN + profile.rtcp_overhead(), 0);
    let mut round = || -> Result<(), String> {
        let n = tx
            .protect_rtcp(&mut buf, RTCP_LEN)
            .map_err(|e| e.to_string())?;
        black_box(&buf[..n]);
        Ok(())
    };
    for _ in 0..packets.min(10_000) {
        round()?;
    }
    let start = Instant::now();
    for _ in 0..packets {
        round()?;
    }
    Ok(start.elapsed())
}

fn unprotect_rtcp(profile: SrtpProfile, packets: usize) -> Result<(Duration, Duration), String> {
    let (mut tx, mut rx) = contexts(profile)?;
    let stride = RTCP_LEN + profile.rtcp_overhead();
    let template = rtcp_packet();
    let mut unused = 0usize;
    let fill = |tx: &mut SrtpOutbound, pool: &mut [u8], _: &mut usize| -> Result<(), String> {
        for slot in pool.chunks_mut(stride) {
            slot[..RTCP_LEN].copy_from_slice(&template);
            tx.protect_rtcp(slot, RTCP_LEN).map_err(|e| e.to_string())?;
        }
        Ok(())
    };
    unprotect_batches(packets, stride, &mut tx, &mut unused, fill, |work| {
        rx.unprotect_rtcp(work)
            .map(|p| p.len)
            .map_err(|e| e.to_string())
    })
}

/// The batch loop shared by the unprotect figures.
fn unprotect_batches(
    packets: usize,
    stride: usize,
    tx: &mut SrtpOutbound,
    seq: &mut usize,
    mut fill: impl FnMut(&mut SrtpOutbound, &mut [u8], &mut usize) -> Result<(), String>,
    mut unprotect: impl FnMut(&mut [u8]) -> Result<usize, String>,
) -> Result<(Duration, Duration), String> {
    let mut pool = vec![0u8; stride * BATCH];
    let mut work = vec![0u8; stride];
    // One untimed batch to warm up.
    fill(tx, &mut pool, seq)?;
    for slot in pool.chunks(stride) {
        work.copy_from_slice(slot);
        black_box(unprotect(&mut work)?);
    }
    let (mut elapsed, mut copy) = (Duration::ZERO, Duration::ZERO);
    let mut done = 0;
    while done < packets {
        fill(tx, &mut pool, seq)?;
        let n = BATCH.min(packets - done);
        let start = Instant::now();
        for slot in pool.chunks(stride).take(n) {
            work.copy_from_slice(slot);
            black_box(unprotect(&mut work)?);
        }
        elapsed += start.elapsed();
        let start = Instant::now();
        for slot in pool.chunks(stride).take(n) {
            work.copy_from_slice(black_box(slot));
            black_box(&work);
        }
        copy += start.elapsed();
        done += n;
    }
    Ok((elapsed, copy))
}

/// The primitives under SRTP_AES128_CM_HMAC_SHA1_80 over one 1200-byte packet, and
/// ring's AES-128-GCM seal for scale: what chose the backends.
fn backends(packets: usize) {
    use aes::cipher::{InnerIvInit, KeyInit, StreamCipher, StreamCipherCoreWrapper};
    use hmac::{Hmac, Mac};

    const LEN: usize = 1200;
    let mut data = vec![0x5Au8; LEN];
    let key20 = [7u8; 20];
    let ns = |d: Duration| d.as_secs_f64() * 1e9 / packets as f64;
    let time = |f: &mut dyn FnMut()| {
        for _ in 0..packets.min(10_000) {
            f();
        }
        let start = Instant::now();
        for _ in 0..packets {
            f();
        }
        start.elapsed()
    };
    let show = |what: &str, d: Duration| println!("  {what:<66} {:>6.0} ns", ns(d));
    println!("backends, one {LEN}-byte packet:");

    let Ok(prepared) = <Hmac<sha1::Sha1> as Mac>::new_from_slice(&key20) else {
        return;
    };
    let d = time(&mut || {
        let mut mac = prepared.clone();
        mac.update(black_box(&data));
        black_box(mac.finalize().into_bytes());
    });
    show(
        "HMAC-SHA1 RustCrypto hmac 0.12 + sha1 0.10, prepared state cloned",
        d,
    );
    let d = time(&mut || {
        if let Ok(mut mac) = <Hmac<sha1::Sha1> as Mac>::new_from_slice(black_box(&key20)) {
            mac.update(black_box(&data));
            black_box(mac.finalize().into_bytes());
        }
    });
    show("HMAC-SHA1 RustCrypto, keyed per packet", d);
    let ring_key = ring::hmac::Key::new(ring::hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, &key20);
    let d = time(&mut || {
        let mut ctx = ring::hmac::Context::with_key(&ring_key);
        ctx.update(black_box(&data));
        black_box(ctx.sign());
    });
    show("HMAC-SHA1 ring 0.17, prepared key", d);

    let Ok(aes) = aes::Aes128Enc::new_from_slice(&[9u8; 16]) else {
        return;
    };
    let mut counter = 0u64;
    let d = time(&mut || {
        counter += 1;
        let mut iv = [0u8; 16];
        iv[6..14].copy_from_slice(&counter.to_be_bytes());
        let core = ctr::CtrCore::<&aes::Aes128Enc, ctr::flavors::Ctr128BE>::inner_iv_init(
            &aes,
            &iv.into(),
        );
        StreamCipherCoreWrapper::from_core(core).apply_keystream(black_box(&mut data[12..]));
    });
    show(
        &format!(
            "AES-128-CTR RustCrypto aes 0.8 + ctr 0.9, {} bytes",
            LEN - 12
        ),
        d,
    );

    let Ok(unbound) = ring::aead::UnboundKey::new(&ring::aead::AES_128_GCM, &[9u8; 16]) else {
        return;
    };
    let gcm = ring::aead::LessSafeKey::new(unbound);
    let mut counter = 0u64;
    let d = time(&mut || {
        counter += 1;
        let mut nonce = [0u8; 12];
        nonce[4..].copy_from_slice(&counter.to_be_bytes());
        let (header, payload) = data.split_at_mut(12);
        let tag = gcm.seal_in_place_separate_tag(
            ring::aead::Nonce::assume_unique_for_key(nonce),
            ring::aead::Aad::from(&header[..]),
            payload,
        );
        black_box(tag.ok());
    });
    show(
        &format!("AES-128-GCM ring 0.17 seal, {} bytes", LEN - 12),
        d,
    );
}
