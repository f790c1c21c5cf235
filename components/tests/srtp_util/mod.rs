//! Helpers shared by the SRTP tests: hex, contexts keyed from vectors, packet builders.

#![allow(dead_code)]

pub mod libsrtp;

use shoal_components::srtp::{
    SessionKeys, SrtpConfig, SrtpError, SrtpInbound, SrtpOutbound, SrtpProfile,
};

/// The three profiles shoal speaks.
pub const PROFILES: [SrtpProfile; 3] = [
    SrtpProfile::Aes128CmHmacSha1_80,
    SrtpProfile::AeadAes128Gcm,
    SrtpProfile::AeadAes256Gcm,
];

/// Bytes from hex, ignoring whitespace.
pub fn hex(s: &str) -> Vec<u8> {
    let digits: Vec<u8> = s.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    assert!(digits.len().is_multiple_of(2), "odd hex: {s}");
    digits
        .chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap())
        .collect()
}

/// A fixed master key and salt of the profile's lengths.
pub fn master(profile: SrtpProfile, seed: u8) -> (Vec<u8>, Vec<u8>) {
    let key = (0..profile.key_len())
        .map(|i| seed.wrapping_add(i as u8))
        .collect();
    let salt = (0..profile.salt_len())
        .map(|i| seed.wrapping_mul(3).wrapping_add(0x40 + i as u8))
        .collect();
    (key, salt)
}

/// A sender and a receiver sharing one master key.
pub fn pair(profile: SrtpProfile, config: SrtpConfig) -> (SrtpOutbound, SrtpInbound) {
    let (key, salt) = master(profile, 0x21);
    (
        SrtpOutbound::new(profile, &key, &salt, config).unwrap(),
        SrtpInbound::new(profile, &key, &salt, config).unwrap(),
    )
}

/// Both directions keyed with the same session keys, given directly (RFC 7714 §16-17).
pub fn with_session_keys(
    profile: SrtpProfile,
    key: &[u8],
    salt: &[u8],
    auth_key: &[u8],
) -> (SrtpOutbound, SrtpInbound) {
    let keys = SessionKeys::new(profile, key, salt, auth_key).unwrap();
    (
        SrtpOutbound::from_session_keys(&keys, &keys, SrtpConfig::default()).unwrap(),
        SrtpInbound::from_session_keys(&keys, &keys, SrtpConfig::default()).unwrap(),
    )
}

/// An RTP packet: version 2, payload type 96, the given sequence number and SSRC, and
/// `payload_len` bytes of payload.
pub fn rtp(seq: u16, ssrc: u32, payload_len: usize) -> Vec<u8> {
    let mut p = vec![0x80, 96];
    p.extend_from_slice(&seq.to_be_bytes());
    p.extend_from_slice(&(u32::from(seq) * 960).to_be_bytes());
    p.extend_from_slice(&ssrc.to_be_bytes());
    p.extend((0..payload_len).map(|i| (i as u8).wrapping_mul(13).wrapping_add(seq as u8)));
    p
}

/// An RTP packet with two CSRCs and a one-word header extension before its payload.
pub fn rtp_with_csrcs_and_extension(seq: u16, ssrc: u32, payload_len: usize) -> Vec<u8> {
    let plain = rtp(seq, ssrc, payload_len);
    let mut p = plain[..12].to_vec();
    p[0] |= 0x10 | 2;
    p.extend_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
    p.extend_from_slice(&[0xBE, 0xDE, 0, 1, 0x10, 0xAA, 0, 0]);
    p.extend_from_slice(&plain[12..]);
    p
}

/// An RTCP receiver report (RFC 3550 §6.4.2) from `ssrc` with one report block.
pub fn rtcp_rr(ssrc: u32) -> Vec<u8> {
    let mut p = vec![0x81, 201, 0, 7];
    p.extend_from_slice(&ssrc.to_be_bytes());
    p.extend_from_slice(&0x0BAD_CAFEu32.to_be_bytes());
    p.extend_from_slice(&[
        1, 0, 0, 2, 0, 1, 0x23, 0x45, 0, 0, 0, 9, 0x12, 0x34, 0x56, 0x78, 0, 0, 0, 0x10,
    ]);
    assert_eq!(p.len(), 32);
    p
}

/// Protects an RTP packet into a fresh buffer.
pub fn protect_rtp(tx: &mut SrtpOutbound, plain: &[u8]) -> Result<Vec<u8>, SrtpError> {
    let mut buf = plain.to_vec();
    buf.resize(plain.len() + tx.profile().rtp_overhead(), 0);
    let n = tx.protect_rtp(&mut buf, plain.len())?;
    buf.truncate(n);
    Ok(buf)
}

/// Protects an RTCP packet into a fresh buffer.
pub fn protect_rtcp(tx: &mut SrtpOutbound, plain: &[u8]) -> Result<Vec<u8>, SrtpError> {
    let mut buf = plain.to_vec();
    buf.resize(plain.len() + tx.profile().rtcp_overhead(), 0);
    let n = tx.protect_rtcp(&mut buf, plain.len())?;
    buf.truncate(n);
    Ok(buf)
}

/// Unprotects an SRTP packet from a copy; the plaintext on success.
pub fn unprotect_rtp(rx: &mut SrtpInbound, packet: &[u8]) -> Result<Vec<u8>, SrtpError> {
    let mut buf = packet.to_vec();
    let out = rx.unprotect_rtp(&mut buf)?;
    buf.truncate(out.len);
    Ok(buf)
}

/// Unprotects an SRTCP packet from a copy; the plaintext on success.
pub fn unprotect_rtcp(rx: &mut SrtpInbound, packet: &[u8]) -> Result<Vec<u8>, SrtpError> {
    let mut buf = packet.to_vec();
    let out = rx.unprotect_rtcp(&mut buf)?;
    buf.truncate(out.len);
    Ok(buf)
}
