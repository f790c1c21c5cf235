//! SRTP and SRTCP against numbers shoal did not produce: the test vectors of RFC 3711
//! Appendix B (AES-CM keystream, key derivation), RFC 6188 §7.2 (the AES-256 PRF) and
//! RFC 7714 §16-17 (AES-GCM for RTP and RTCP), libsrtp's own reference packets (its `srtp_validate` and
//! `srtp_validate_gcm`), and packets libsrtp 2.7.0 protected through pylibsrtp 1.0.0
//! (`scripts/srtp-vectors/generate.py`). Then the rules the vectors cannot show:
//! tampering, replay, the rollover counter across a wrap, and the SRTCP index and E bit.
//!
//! A transform that is wrong but self-consistent round-trips with itself perfectly; only
//! vectors from elsewhere tell it apart.

mod srtp_util;

use shoal_components::srtp::kdf::{self, label};
use shoal_components::srtp::{
    SRTP_REPLAY_WINDOW, SrtpConfig, SrtpError, SrtpInbound, SrtpOutbound, SrtpProfile,
};
use srtp_util::libsrtp::{self, LibsrtpVectors};
use srtp_util::{
    PROFILES, hex, pair, protect_rtcp, protect_rtp, rtcp_rr, rtp, rtp_with_csrcs_and_extension,
    unprotect_rtcp, unprotect_rtp, with_session_keys,
};

// ---------------------------------------------------------------------------------------
// RFC 3711 Appendix B
// ---------------------------------------------------------------------------------------

const B2_SESSION_KEY: &str = "2B7E151628AED2A6ABF7158809CF4F3C";
const B2_SESSION_SALT: &str = "F0F1F2F3F4F5F6F7F8F9FAFBFCFD";

/// B.2: the AES-CM keystream from counter F0F1...FCFD0000, its first three blocks and
/// the last three of the 1 044 512-octet segment (counters ...FEFF to ...FF01).
#[test]
fn rfc3711_b2_aes_cm_keystream() {
    let key = hex(B2_SESSION_KEY);
    let iv: [u8; 16] = hex("F0F1F2F3F4F5F6F7F8F9FAFBFCFD0000").try_into().unwrap();
    let mut stream = vec![0u8; 1_044_512];
    kdf::aes_cm_apply_keystream(&key, &iv, &mut stream).unwrap();
    assert_eq!(
        stream[..48],
        hex("E03EAD0935C95E80E166B16DD92B4EB4
             D23513162B02D0F72A43A2FE4A5F97AB
             41E95B3BB0A2E8DD477901E4FCA894C0")[..]
    );
    assert_eq!(
        stream[stream.len() - 48..],
        hex("EC8CDF7398607CB0F2D21675EA9EA1E4
             362B7C3C6773516318A077D7FC5073AE
             6A2CC3787889374FBEB4C81B17BA6C44")[..]
    );
}

/// B.2 through a context: with SSRC 0 and packet index 0 the IV of RFC 3711 §4.1.1 is
/// the session salt times 2^16, so an all-zero payload encrypts to the keystream.
#[test]
fn rfc3711_b2_keystream_is_what_an_srtp_packet_of_index_zero_gets() {
    let (mut tx, _) = with_session_keys(
        SrtpProfile::Aes128CmHmacSha1_80,
        &hex(B2_SESSION_KEY),
        &hex(B2_SESSION_SALT),
        &[0; 20],
    );
    let mut plain = rtp(0, 0, 0);
    plain.extend_from_slice(&[0; 48]);
    let protected = protect_rtp(&mut tx, &plain).unwrap();
    assert_eq!(
        protected[12..60],
        hex("E03EAD0935C95E80E166B16DD92B4EB4
             D23513162B02D0F72A43A2FE4A5F97AB
             41E95B3BB0A2E8DD477901E4FCA894C0")[..]
    );
}

/// B.3: the cipher key, cipher salt and (94 octets of) auth key the AES-CM PRF derives
/// from the master key and salt with kdr = 0.
#[test]
fn rfc3711_b3_key_derivation() {
    let master_key = hex("E1F97A0D3E018BE0D64FA32C06DE4139");
    let master_salt = hex("0EC675AD498AFEEBB6960B3AABE6");
    let mut cipher_key = [0u8; 16];
    kdf::aes_cm_prf(
        &master_key,
        &master_salt,
        label::RTP_ENCRYPTION,
        &mut cipher_key,
    )
    .unwrap();
    assert_eq!(cipher_key[..], hex("C61E7A93744F39EE10734AFE3FF7A087")[..]);
    let mut cipher_salt = [0u8; 14];
    kdf::aes_cm_prf(&master_key, &master_salt, label::RTP_SALT, &mut cipher_salt).unwrap();
    assert_eq!(cipher_salt[..], hex("30CBBC08863D8C85D49DB34A9AE1")[..]);
    let mut auth_key = [0u8; 94];
    kdf::aes_cm_prf(
        &master_key,
        &master_salt,
        label::RTP_AUTHENTICATION,
        &mut auth_key,
    )
    .unwrap();
    assert_eq!(
        auth_key[..],
        hex("CEBE321F6FF7716B6FD4AB49AF256A15
             6D38BAA48F0A0ACF3C34E2359E6CDBCE
             E049646C43D9327AD175578EF7227098
             6371C10C9A369AC2F94A8C5FBCDDDC25
             6D6E919A48B610EF17C2041E47403576
             6B68642C59BBFC2F34DB60DBDFB2")[..]
    );
}

/// RFC 6188 §7.2: the AES_256_CM_PRF test case, a 256-bit master key with the 112-bit
/// salt: the PRF that RFC 7714 §11 names for AEAD_AES_256_GCM.
#[test]
fn rfc6188_aes_256_cm_prf() {
    let master_key = hex("f0f04914b513f2763a1b1fa130f10e29 98f6f6e43e4309d1e622a0e332b9f1b6");
    let master_salt = hex("3b04803de51ee7c96423ab5b78d2");
    let mut cipher_key = [0u8; 32];
    kdf::aes_cm_prf(
        &master_key,
        &master_salt,
        label::RTP_ENCRYPTION,
        &mut cipher_key,
    )
    .unwrap();
    assert_eq!(
        cipher_key[..],
        hex("5ba1064e30ec51613cad926c5a28ef73 1ec7fb397f70a960653caf06554cd8c4")[..]
    );
    let mut cipher_salt = [0u8; 14];
    kdf::aes_cm_prf(&master_key, &master_salt, label::RTP_SALT, &mut cipher_salt).unwrap();
    assert_eq!(cipher_salt[..], hex("fa31791685ca444a9e07c6c64e93")[..]);
    let mut auth_key = [0u8; 20];
    kdf::aes_cm_prf(
        &master_key,
        &master_salt,
        label::RTP_AUTHENTICATION,
        &mut auth_key,
    )
    .unwrap();
    assert_eq!(
        auth_key[..],
        hex("fd9c32d39ed5fbb5a9dc96b30818454d1313dc05")[..]
    );
}

// ---------------------------------------------------------------------------------------
// RFC 7714 §16 (RTP) and §17 (RTCP). Session keys are given directly: key 00 01 .. 0f
// (or .. 1f) and the salt "Quid pro quo".
// ---------------------------------------------------------------------------------------

const QUID_PRO_QUO: &str = "517569642070726f2071756f";
const KEY_128: &str = "000102030405060708090a0b0c0d0e0f";
const KEY_256: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

/// §16: "Gallia est omnis divisa in partes tres" under header 8040f17b 8041f8d3
/// 5501a0b2 (SSRC 5501a0b2, SEQ f17b, ROC 0).
const RFC7714_RTP: &str = "8040f17b 8041f8d3 5501a0b2 47616c6c 69612065 7374206f 6d6e6973
                           20646976 69736120 696e2070 61727465 73207472 6573";

/// §17.1-17.4: the RTCP packet, SSRC 4d617273, SRTCP index 000005d4.
const RFC7714_RTCP: &str = "81c8000d 4d617273 4e545031 4e545032 52545020 0000042a 0000e930
                            4c756e61 deadbeef deadbeef deadbeef deadbeef deadbeef";

fn rfc7714(profile: SrtpProfile) -> (SrtpOutbound, SrtpInbound) {
    let key = if profile == SrtpProfile::AeadAes128Gcm {
        KEY_128
    } else {
        KEY_256
    };
    with_session_keys(profile, &hex(key), &hex(QUID_PRO_QUO), &[])
}

/// §16.1.1 / §16.1.2 and §16.2.1 / §16.2.2: encryption gives the RFC's packet, and
/// decrypting the RFC's packet gives the plaintext back.
#[test]
fn rfc7714_16_rtp_aes_gcm() {
    let cases = [
        (
            SrtpProfile::AeadAes128Gcm,
            "8040f17b 8041f8d3 5501a0b2 f24de3a3 fb34de6c acba861c 9d7e4bca be633bd5
             0d294e6f 42a5f47a 51c7d19b 36de3adf 8833899d 7f27beb1 6a9152cf 765ee439 0cce",
        ),
        (
            SrtpProfile::AeadAes256Gcm,
            "8040f17b 8041f8d3 5501a0b2 32b1de78 a822fe12 ef9f78fa 332e33aa b1801238
             9a58e2f3 b50b2a02 76ffae0f 1ba63799 b87b7aa3 db36dfff d6b0f9bb 7878d7a7 6c13",
        ),
    ];
    for (profile, expected) in cases {
        let (mut tx, mut rx) = rfc7714(profile);
        let plain = hex(RFC7714_RTP);
        assert_eq!(
            protect_rtp(&mut tx, &plain).unwrap(),
            hex(expected),
            "{profile:?}"
        );
        let mut buf = hex(expected);
        let out = rx.unprotect_rtp(&mut buf).unwrap();
        assert_eq!(buf[..out.len], plain[..], "{profile:?}");
        assert_eq!(
            (out.ssrc, out.index, out.header_len),
            (0x5501_a0b2, 0xf17b, 12)
        );
    }
}

/// §17.1: SRTCP AEAD_AES_128_GCM encryption and tagging at index 5d4, E = 1: header,
/// cipher, tag, then the ESRTCP word (§9.2).
#[test]
fn rfc7714_17_1_srtcp_aes_128_gcm_encryption() {
    let expected = hex(
        "81c8000d 4d617273 63e94885 dcdab67c a727d766 2f6b7e99 7ff5c0f7 6c06f32d
         c676a5f1 730d6fda 4ce09b46 86303ded 0bb9275b c84aa458 96cf4d2f c5abf872
         45d9eade 800005d4",
    );
    let (mut tx, mut rx) = rfc7714(SrtpProfile::AeadAes128Gcm);
    tx.set_next_srtcp_index(0x4d61_7273, 0x5d4).unwrap();
    assert_eq!(protect_rtcp(&mut tx, &hex(RFC7714_RTCP)).unwrap(), expected);
    let mut buf = expected.clone();
    let out = rx.unprotect_rtcp(&mut buf).unwrap();
    assert_eq!(buf[..out.len], hex(RFC7714_RTCP)[..]);
    assert_eq!(
        (out.ssrc, out.index, out.encrypted),
        (0x4d61_7273, 0x5d4, true)
    );
}

/// §17.2: SRTCP AEAD_AES_256_GCM verification and decryption.
#[test]
fn rfc7714_17_2_srtcp_aes_256_gcm_decryption() {
    let protected = hex(
        "81c8000d 4d617273 d50ae4d1 f5ce5d30 4ba297e4 7d470c28 2c3ece5d bffe0a50
         a2eaa5c1 110555be 8415f658 c61de047 6f1b6fad 1d1eb30c 4446839f 57ff6f6c
         b26ac3be 800005d4",
    );
    let (mut tx, mut rx) = rfc7714(SrtpProfile::AeadAes256Gcm);
    assert_eq!(
        unprotect_rtcp(&mut rx, &protected).unwrap(),
        hex(RFC7714_RTCP)
    );
    // And the other way: shoal's sender at the same index makes the same packet.
    tx.set_next_srtcp_index(0x4d61_7273, 0x5d4).unwrap();
    assert_eq!(
        protect_rtcp(&mut tx, &hex(RFC7714_RTCP)).unwrap(),
        protected
    );
}

/// §17.3 and §17.4: tagged but not encrypted (E = 0, §9.3: the whole packet and the
/// ESRTCP word are the AAD, the tag is the whole cipher). shoal never sends this form,
/// but a peer may, and the receiver verifies it and leaves the payload alone.
#[test]
fn rfc7714_17_3_and_17_4_srtcp_tagged_only() {
    let cases = [
        (
            SrtpProfile::AeadAes128Gcm,
            "841dd968 3dd78ec9 2ae58790 125f62b3", // §17.3
        ),
        (
            SrtpProfile::AeadAes256Gcm,
            "91db4afb feee5a97 8fab4393 ed2615fe", // §17.4
        ),
    ];
    for (profile, tag) in cases {
        let mut tagged = hex(RFC7714_RTCP);
        tagged.extend(hex(tag));
        tagged.extend(hex("000005d4"));
        let (_, mut rx) = rfc7714(profile);
        let mut buf = tagged.clone();
        let out = rx.unprotect_rtcp(&mut buf).unwrap();
        assert_eq!(buf[..out.len], hex(RFC7714_RTCP)[..], "{profile:?}");
        assert_eq!((out.index, out.encrypted), (0x5d4, false), "{profile:?}");
        // One flipped bit of the tag and it no longer verifies.
        let (_, mut rx) = rfc7714(profile);
        let last_tag_byte = tagged.len() - 5;
        tagged[last_tag_byte] ^= 1;
        assert_eq!(
            unprotect_rtcp(&mut rx, &tagged),
            Err(SrtpError::AuthenticationFailed)
        );
    }
}

// ---------------------------------------------------------------------------------------
// libsrtp's reference packets (test/srtp_driver.c: srtp_validate, srtp_validate_gcm):
// whole SRTP and SRTCP packets from master keys, key derivation included. libsrtp's
// SRTCP index starts at 1.
// ---------------------------------------------------------------------------------------

struct Reference {
    profile: SrtpProfile,
    master_key: &'static str,
    master_salt: &'static str,
    rtp: &'static str,
    srtp: &'static str,
    rtcp: &'static str,
    srtcp: &'static str,
}

const SRTP_VALIDATE: Reference = Reference {
    profile: SrtpProfile::Aes128CmHmacSha1_80,
    master_key: "e1f97a0d3e018be0d64fa32c06de4139",
    master_salt: "0ec675ad498afeebb6960b3aabe6",
    rtp: "800f1234 decafbad cafebabe abababab abababab abababab abababab",
    srtp: "800f1234 decafbad cafebabe 4e55dc4c e79978d8 8ca4d215 949d2402 b78d6acc
           99ea179b 8dbb",
    rtcp: "81c8000b cafebabe abababab abababab abababab abababab",
    srtcp: "81c8000b cafebabe 7128035b e487b9bd bef89041 f977a5a8 80000001 993e08cd
            54d6c123 0798",
};

const SRTP_VALIDATE_GCM: Reference = Reference {
    profile: SrtpProfile::AeadAes128Gcm,
    master_key: "000102030405060708090a0b0c0d0e0f",
    master_salt: "a0a1a2a3a4a5a6a7a8a9aaab",
    rtp: "800f1234 decafbad cafebabe abababab abababab abababab abababab",
    srtp: "800f1234 decafbad cafebabe c5002ede 04cfdd2e b91159e0 880aa06e d2976826
           f796b201 df3131a1 27e8a392",
    rtcp: "81c8000b cafebabe abababab abababab abababab abababab",
    srtcp: "81c8000b cafebabe c98b8b5d f0392a55 852b6c21 ac8e7025 c52c6fbe a2b3b446
            ea31123b a88ce61e 80000001",
};

/// The full-packet AES_CM_HMAC_SHA1_80 RTP and RTCP vector (and its GCM sibling).
#[test]
fn libsrtp_reference_packets() {
    for r in [SRTP_VALIDATE, SRTP_VALIDATE_GCM] {
        let (key, salt) = (hex(r.master_key), hex(r.master_salt));
        let config = SrtpConfig::default();
        let mut tx = SrtpOutbound::new(r.profile, &key, &salt, config).unwrap();
        let mut rx = SrtpInbound::new(r.profile, &key, &salt, config).unwrap();
        assert_eq!(protect_rtp(&mut tx, &hex(r.rtp)).unwrap(), hex(r.srtp));
        tx.set_next_srtcp_index(0xcafe_babe, 1).unwrap();
        assert_eq!(protect_rtcp(&mut tx, &hex(r.rtcp)).unwrap(), hex(r.srtcp));
        assert_eq!(unprotect_rtp(&mut rx, &hex(r.srtp)).unwrap(), hex(r.rtp));
        assert_eq!(unprotect_rtcp(&mut rx, &hex(r.srtcp)).unwrap(), hex(r.rtcp));
    }
}

// ---------------------------------------------------------------------------------------
// libsrtp 2.7.0 via pylibsrtp 1.0.0: every profile, CSRCs and a header extension, a
// sequence-number wrap, compound RTCP.
// ---------------------------------------------------------------------------------------

/// Unprotecting libsrtp's packets gives the plaintext, and protecting the plaintext in
/// the same order gives libsrtp's packets byte for byte.
#[test]
fn libsrtp_via_pylibsrtp_1_0_0() {
    let all: [&LibsrtpVectors; 3] = [
        &libsrtp::LIBSRTP_AES128_CM_SHA1_80,
        &libsrtp::LIBSRTP_AEAD_AES_128_GCM,
        &libsrtp::LIBSRTP_AEAD_AES_256_GCM,
    ];
    for v in all {
        let profile = SrtpProfile::try_from(v.profile).unwrap();
        let (key, salt) = (hex(v.master_key), hex(v.master_salt));
        let config = SrtpConfig::default();
        let mut tx = SrtpOutbound::new(profile, &key, &salt, config).unwrap();
        let mut rx = SrtpInbound::new(profile, &key, &salt, config).unwrap();
        for (i, (plain, protected)) in v.rtp.iter().enumerate() {
            let (plain, protected) = (hex(plain), hex(protected));
            assert_eq!(
                protect_rtp(&mut tx, &plain).unwrap(),
                protected,
                "{profile:?} rtp {i}"
            );
            assert_eq!(
                unprotect_rtp(&mut rx, &protected).unwrap(),
                plain,
                "{profile:?} rtp {i}"
            );
        }
        // The wrap from 0xffff to 0 moved both sides to ROC 1.
        assert_eq!(tx.rollover_counter(v.ssrc), Some(1));
        assert_eq!(rx.rollover_counter(v.ssrc), Some(1));
        tx.set_next_srtcp_index(v.ssrc, 1).unwrap();
        for (i, (plain, protected)) in v.rtcp.iter().enumerate() {
            let (plain, protected) = (hex(plain), hex(protected));
            assert_eq!(
                protect_rtcp(&mut tx, &plain).unwrap(),
                protected,
                "{profile:?} rtcp {i}"
            );
            assert_eq!(
                unprotect_rtcp(&mut rx, &protected).unwrap(),
                plain,
                "{profile:?} rtcp {i}"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------
// Tampering (RFC 3711 §3.3 step 5, §4.2; RFC 7714 §8.2, §9.2)
// ---------------------------------------------------------------------------------------

/// Flipping any bit of the payload or the tag fails authentication; a flipped header
/// bit fails one way or another. Failures leave the context as it was: the untouched
/// packet is accepted afterwards.
#[test]
fn tampered_srtp_is_rejected_at_every_byte() {
    for profile in PROFILES {
        let (mut tx, mut rx) = pair(profile, SrtpConfig::default());
        let plain = rtp_with_csrcs_and_extension(7, 0x1111_2222, 40);
        let header_len = 12 + 8 + 8;
        let protected = protect_rtp(&mut tx, &plain).unwrap();
        for at in 0..protected.len() {
            for bit in [0x01u8, 0x80] {
                let mut bad = protected.clone();
                bad[at] ^= bit;
                let result = unprotect_rtp(&mut rx, &bad);
                if at >= header_len {
                    assert_eq!(
                        result,
                        Err(SrtpError::AuthenticationFailed),
                        "{profile:?} byte {at} bit {bit:#x}"
                    );
                } else {
                    assert!(result.is_err(), "{profile:?} header byte {at} bit {bit:#x}");
                }
            }
        }
        assert_eq!(rx.ssrc_count(), 0, "{profile:?}: no forged SSRC got state");
        assert_eq!(unprotect_rtp(&mut rx, &protected).unwrap(), plain);
    }
}

/// The same for SRTCP: every byte after the clear header, the index word included
/// (the E flag and index are authenticated), and the tag.
#[test]
fn tampered_srtcp_is_rejected_at_every_byte() {
    for profile in PROFILES {
        let (mut tx, mut rx) = pair(profile, SrtpConfig::default());
        let plain = rtcp_rr(0x3333_4444);
        let protected = protect_rtcp(&mut tx, &plain).unwrap();
        for at in 0..protected.len() {
            for bit in [0x01u8, 0x80] {
                let mut bad = protected.clone();
                bad[at] ^= bit;
                let result = unprotect_rtcp(&mut rx, &bad);
                if at >= 8 {
                    assert_eq!(
                        result,
                        Err(SrtpError::AuthenticationFailed),
                        "{profile:?} byte {at} bit {bit:#x}"
                    );
                } else {
                    assert!(result.is_err(), "{profile:?} header byte {at} bit {bit:#x}");
                }
            }
        }
        assert_eq!(unprotect_rtcp(&mut rx, &protected).unwrap(), plain);
    }
}

// ---------------------------------------------------------------------------------------
// Replay (RFC 3711 §3.3.2)
// ---------------------------------------------------------------------------------------

/// Packets reordered within the window are accepted; every repeat is refused; a packet
/// that has fallen behind the window is refused as too old.
#[test]
fn replays_rejected_and_reordering_within_the_window_accepted() {
    const SSRC: u32 = 0xABCD_0001;
    for profile in PROFILES {
        let (mut tx, mut rx) = pair(profile, SrtpConfig::default());
        let packets: Vec<(Vec<u8>, Vec<u8>)> = (0..300u16)
            .map(|i| {
                let plain = rtp(1000 + i, SSRC, 60);
                let protected = protect_rtp(&mut tx, &plain).unwrap();
                (plain, protected)
            })
            .collect();
        // A video burst arriving reordered: each run of 32 backwards.
        for chunk in packets.chunks(32) {
            for (plain, protected) in chunk.iter().rev() {
                assert_eq!(
                    unprotect_rtp(&mut rx, protected).as_ref(),
                    Ok(plain),
                    "{profile:?}"
                );
            }
        }
        for (i, (_, protected)) in packets.iter().enumerate() {
            assert_eq!(
                unprotect_rtp(&mut rx, protected),
                Err(SrtpError::Replayed {
                    index: 1000 + i as u64
                }),
                "{profile:?}"
            );
        }
        // Jump ahead by a whole window: the held-back packet a window behind is too
        // old, the one just inside it is still accepted.
        let window = SRTP_REPLAY_WINDOW as u16;
        let held_old = protect_rtp(&mut tx, &rtp(1400, SSRC, 10)).unwrap();
        let held_inside = protect_rtp(&mut tx, &rtp(1401, SSRC, 10)).unwrap();
        let ahead = protect_rtp(&mut tx, &rtp(1400 + window, SSRC, 10)).unwrap();
        unprotect_rtp(&mut rx, &ahead).unwrap();
        assert_eq!(
            unprotect_rtp(&mut rx, &held_old),
            Err(SrtpError::TooOld { index: 1400 })
        );
        unprotect_rtp(&mut rx, &held_inside).unwrap();
    }
}

/// SRTCP has its own replay list per sender SSRC, over the explicit index.
#[test]
fn srtcp_replays_rejected_and_reordering_accepted() {
    for profile in PROFILES {
        let (mut tx, mut rx) = pair(profile, SrtpConfig::default());
        let packets: Vec<Vec<u8>> = (0..5)
            .map(|_| protect_rtcp(&mut tx, &rtcp_rr(0x5555_0001)).unwrap())
            .collect();
        for i in [0, 2, 1, 4, 3] {
            let mut buf = packets[i].clone();
            assert_eq!(rx.unprotect_rtcp(&mut buf).unwrap().index, i as u32);
        }
        for (i, p) in packets.iter().enumerate() {
            assert_eq!(
                unprotect_rtcp(&mut rx, p),
                Err(SrtpError::Replayed { index: i as u64 })
            );
        }
    }
}

// ---------------------------------------------------------------------------------------
// The rollover counter (RFC 3711 §3.3.1, Appendix A)
// ---------------------------------------------------------------------------------------

/// Across 65535 -> 0 the ROC becomes 1 on both sides; a packet from before the wrap that
/// arrives after it is decrypted under ROC 0; repeats on either side of the wrap are
/// replays.
#[test]
fn roc_rolls_over_and_a_late_packet_from_before_the_wrap_is_accepted() {
    const SSRC: u32 = 0x0F0F_0F0F;
    for profile in PROFILES {
        let (mut tx, mut rx) = pair(profile, SrtpConfig::default());
        let seqs: Vec<u16> = (65_530..=65_535).chain(0..=5).collect();
        let sent: Vec<(u16, Vec<u8>, Vec<u8>)> = seqs
            .iter()
            .map(|&seq| {
                let plain = rtp(seq, SSRC, 33);
                let protected = protect_rtp(&mut tx, &plain).unwrap();
                (seq, plain, protected)
            })
            .collect();
        assert_eq!(tx.rollover_counter(SSRC), Some(1));
        let order = [
            65_530, 65_531, 65_532, 65_533, 65_535, 0, 1, 65_534, 2, 3, 5, 4,
        ];
        for seq in order {
            let (_, plain, protected) = sent.iter().find(|(s, ..)| *s == seq).unwrap();
            let mut buf = protected.clone();
            let out = rx.unprotect_rtp(&mut buf).unwrap();
            let roc = if seq >= 65_530 { 0 } else { 1 };
            assert_eq!(
                out.index,
                (roc << 16) | u64::from(seq),
                "{profile:?} seq {seq}"
            );
            assert_eq!(out.roc(), roc as u32);
            assert_eq!(buf[..out.len], plain[..], "{profile:?} seq {seq}");
        }
        assert_eq!(rx.rollover_counter(SSRC), Some(1));
        for (seq, _, protected) in &sent {
            let roc = if *seq >= 65_530 { 0 } else { 1 };
            assert_eq!(
                unprotect_rtp(&mut rx, protected),
                Err(SrtpError::Replayed {
                    index: (roc << 16) | u64::from(*seq)
                }),
                "{profile:?} seq {seq}"
            );
        }
    }
}

/// A sender that forwards packets out of order across the wrap gives the late one the
/// index the receiver estimates (ROC 0), not a new rollover.
#[test]
fn sender_forwarding_out_of_order_across_the_wrap_keeps_the_receivers_index() {
    const SSRC: u32 = 0x0F0F_0F10;
    for profile in PROFILES {
        let (mut tx, mut rx) = pair(profile, SrtpConfig::default());
        for (seq, roc) in [(65_534u16, 0u64), (0, 1), (65_535, 0), (1, 1)] {
            let plain = rtp(seq, SSRC, 20);
            let protected = protect_rtp(&mut tx, &plain).unwrap();
            let mut buf = protected.clone();
            let out = rx.unprotect_rtp(&mut buf).unwrap();
            assert_eq!(out.index, roc << 16 | u64::from(seq), "{profile:?}");
            assert_eq!(buf[..out.len], plain[..]);
        }
    }
}

// ---------------------------------------------------------------------------------------
// The SRTCP index and E bit (RFC 3711 §3.4, RFC 7714 §9)
// ---------------------------------------------------------------------------------------

/// The index starts at 0 and counts up per sender SSRC; the E flag is set; the word sits
/// before the tag for AES-CM and last for AEAD; the last index of the key is 2^31 - 1.
#[test]
fn srtcp_index_and_e_bit() {
    for profile in PROFILES {
        let (mut tx, mut rx) = pair(profile, SrtpConfig::default());
        let tag_len = profile.tag_len();
        for ssrc in [0x7777_0001u32, 0x7777_0002] {
            for expected in 0u32..3 {
                let plain = rtcp_rr(ssrc);
                let protected = protect_rtcp(&mut tx, &plain).unwrap();
                assert_eq!(protected.len(), plain.len() + 4 + tag_len);
                let word_at = if profile.is_aead() {
                    protected.len() - 4
                } else {
                    protected.len() - tag_len - 4
                };
                let word = u32::from_be_bytes(protected[word_at..word_at + 4].try_into().unwrap());
                assert_eq!(word, 0x8000_0000 | expected, "{profile:?}");
                assert_ne!(protected[8..plain.len()], plain[8..], "payload encrypted");
                let mut buf = protected.clone();
                let out = rx.unprotect_rtcp(&mut buf).unwrap();
                assert_eq!((out.ssrc, out.index, out.encrypted), (ssrc, expected, true));
                assert_eq!(buf[..out.len], plain[..]);
            }
            assert_eq!(tx.next_srtcp_index(ssrc), Some(3));
        }
        tx.set_next_srtcp_index(0x7777_0001, 0x7FFF_FFFF).unwrap();
        let last = protect_rtcp(&mut tx, &rtcp_rr(0x7777_0001)).unwrap();
        assert_eq!(
            rx.unprotect_rtcp(&mut last.clone()).unwrap().index,
            0x7FFF_FFFF
        );
        assert_eq!(
            protect_rtcp(&mut tx, &rtcp_rr(0x7777_0001)),
            Err(SrtpError::SrtcpIndexExhausted)
        );
    }
}

/// An AES-CM SRTCP packet with the E flag clear (RFC 3711 §3.4: sent unencrypted but
/// authenticated), built here from the RFC's definition with the derived SRTCP
/// authentication key: accepted, payload untouched, reported as not encrypted.
#[test]
fn srtcp_with_e_bit_clear_is_authenticated_not_decrypted() {
    use hmac::{Hmac, Mac};
    let profile = SrtpProfile::Aes128CmHmacSha1_80;
    let (key, salt) = srtp_util::master(profile, 0x21);
    let mut auth_key = [0u8; 20];
    kdf::aes_cm_prf(&key, &salt, label::RTCP_AUTHENTICATION, &mut auth_key).unwrap();
    let plain = rtcp_rr(0x9999_0001);
    let mut packet = plain.clone();
    packet.extend_from_slice(&42u32.to_be_bytes()); // E = 0, index 42
    let mut mac = <Hmac<sha1::Sha1> as Mac>::new_from_slice(&auth_key).unwrap();
    mac.update(&packet);
    packet.extend_from_slice(&mac.finalize().into_bytes()[..10]);

    let (_, mut rx) = pair(profile, SrtpConfig::default());
    let mut buf = packet.clone();
    let out = rx.unprotect_rtcp(&mut buf).unwrap();
    assert_eq!((out.index, out.encrypted), (42, false));
    assert_eq!(buf[..out.len], plain[..]);
    // Setting the E flag without the key to match breaks the tag.
    let (_, mut rx) = pair(profile, SrtpConfig::default());
    packet[plain.len()] |= 0x80;
    assert_eq!(
        unprotect_rtcp(&mut rx, &packet),
        Err(SrtpError::AuthenticationFailed)
    );
}
