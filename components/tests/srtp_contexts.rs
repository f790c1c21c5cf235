//! The SRTP contexts as the passes will use them: keyed by DTLS role, bounded in SSRCs,
//! protecting into caller buffers, refusing to reuse an index, and never panicking on
//! what the network sends.

mod srtp_util;

use bytes::BytesMut;
use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};
use shoal_components::dtls::{DtlsRole, SrtpKeys};
use shoal_components::srtp::{SrtpConfig, SrtpError, SrtpSession};
use srtp_util::{
    PROFILES, pair, protect_rtcp, protect_rtp, rtcp_rr, rtp, rtp_with_csrcs_and_extension,
    unprotect_rtcp, unprotect_rtp,
};

fn exported(profile: shoal_components::srtp::SrtpProfile) -> SrtpKeys {
    let material: Vec<u8> = (0..SrtpKeys::exported_len(profile))
        .map(|i| (i as u8).wrapping_mul(29).wrapping_add(5))
        .collect();
    SrtpKeys::from_exported(profile, &material).unwrap()
}

/// RFC 5764 §4.2: what the DTLS client sends is protected with the client write key and
/// the server unprotects it with the same; and the other way round. A context never
/// accepts its own direction's packets.
#[test]
fn keys_follow_the_dtls_role() {
    for profile in PROFILES {
        let keys = exported(profile);
        let config = SrtpConfig::default();
        let mut client = SrtpSession::new(&keys, DtlsRole::Client, config).unwrap();
        let mut server = SrtpSession::new(&keys, DtlsRole::Server, config).unwrap();
        let plain = rtp(1, 0xC11E_0001, 50);

        let up = protect_rtp(&mut client.outbound, &plain).unwrap();
        assert_eq!(unprotect_rtp(&mut server.inbound, &up).unwrap(), plain);
        let down = protect_rtp(&mut server.outbound, &plain).unwrap();
        assert_eq!(unprotect_rtp(&mut client.inbound, &down).unwrap(), plain);
        assert_ne!(
            up, down,
            "{profile:?}: the two directions use different keys"
        );
        let down = protect_rtp(&mut server.outbound, &rtp(2, 0xC11E_0001, 50)).unwrap();

        // The server's own packet is not something its inbound context accepts.
        assert_eq!(
            unprotect_rtp(&mut server.inbound, &down),
            Err(SrtpError::AuthenticationFailed)
        );
        let rr = rtcp_rr(0xC11E_0001);
        let up = protect_rtcp(&mut client.outbound, &rr).unwrap();
        assert_eq!(unprotect_rtcp(&mut server.inbound, &up).unwrap(), rr);
    }
}

/// At most `max_ssrcs` SSRCs per context and per kind; a forged packet of a new SSRC
/// takes no slot; forgetting an SSRC frees one.
#[test]
fn ssrcs_are_bounded() {
    for profile in PROFILES {
        let config = SrtpConfig {
            max_ssrcs: 2,
            ..SrtpConfig::default()
        };
        let (mut tx, mut rx) = pair(profile, config);
        let a = protect_rtp(&mut tx, &rtp(1, 1, 10)).unwrap();
        let b = protect_rtp(&mut tx, &rtp(1, 2, 10)).unwrap();
        assert_eq!(
            protect_rtp(&mut tx, &rtp(1, 3, 10)),
            Err(SrtpError::TooManySsrcs { limit: 2 })
        );
        // A forgery of SSRC 9 fails authentication and leaves both slots free.
        let mut forged = a.clone();
        forged[8..12].copy_from_slice(&9u32.to_be_bytes());
        assert_eq!(
            unprotect_rtp(&mut rx, &forged),
            Err(SrtpError::AuthenticationFailed)
        );
        unprotect_rtp(&mut rx, &a).unwrap();
        unprotect_rtp(&mut rx, &b).unwrap();
        assert_eq!(rx.ssrc_count(), 2);
        tx.forget_ssrc(2);
        let c = protect_rtp(&mut tx, &rtp(1, 3, 10)).unwrap();
        assert_eq!(
            unprotect_rtp(&mut rx, &c),
            Err(SrtpError::TooManySsrcs { limit: 2 })
        );
        rx.forget_ssrc(2);
        unprotect_rtp(&mut rx, &c).unwrap();

        // SRTCP counts its own sender SSRCs.
        for ssrc in [1, 2] {
            let p = protect_rtcp(&mut tx, &rtcp_rr(ssrc)).unwrap();
            unprotect_rtcp(&mut rx, &p).unwrap();
        }
        assert_eq!(
            protect_rtcp(&mut tx, &rtcp_rr(5)),
            Err(SrtpError::TooManySsrcs { limit: 2 })
        );
        assert_eq!(
            tx.set_next_srtcp_index(5, 10),
            Err(SrtpError::TooManySsrcs { limit: 2 })
        );
    }
}

/// The sender refuses to protect an index twice unless told the repeat is a
/// retransmission of the same packet, which then protects to the same bytes.
#[test]
fn repeated_tx_index_refused_unless_allowed() {
    for profile in PROFILES {
        let (mut tx, _) = pair(profile, SrtpConfig::default());
        let plain = rtp(10, 0xAAAA, 30);
        protect_rtp(&mut tx, &plain).unwrap();
        assert_eq!(
            protect_rtp(&mut tx, &plain),
            Err(SrtpError::RepeatedIndex { index: 10 })
        );
        let config = SrtpConfig {
            allow_repeated_tx: true,
            ..SrtpConfig::default()
        };
        let (mut tx, mut rx) = pair(profile, config);
        let first = protect_rtp(&mut tx, &plain).unwrap();
        assert_eq!(protect_rtp(&mut tx, &plain).unwrap(), first);
        unprotect_rtp(&mut rx, &first).unwrap();
        assert_eq!(
            unprotect_rtp(&mut rx, &first),
            Err(SrtpError::Replayed { index: 10 })
        );
    }
}

/// Protecting in place into a slice needs room for the trailer; the `_tail` forms grow a
/// `Vec` or `BytesMut` whose tail is the packet, leaving what precedes it alone.
#[test]
fn caller_buffers() {
    for profile in PROFILES {
        let (mut tx, mut rx) = pair(profile, SrtpConfig::default());
        let plain = rtp(1, 0xB0B0, 100);
        let mut tight = plain.clone();
        assert_eq!(
            tx.protect_rtp(&mut tight, plain.len()),
            Err(SrtpError::BufferTooSmall {
                needed: plain.len() + profile.rtp_overhead(),
                capacity: plain.len()
            })
        );
        assert_eq!(
            tx.protect_rtp(&mut tight, plain.len() + 1),
            Err(SrtpError::BufferTooSmall {
                needed: plain.len() + 1,
                capacity: plain.len()
            })
        );

        // Two packets back to back in one datagram buffer.
        let mut datagrams = BytesMut::with_capacity(1024);
        datagrams.extend_from_slice(&plain);
        tx.protect_rtp_tail(&mut datagrams, 0).unwrap();
        let first_len = datagrams.len();
        let rr = rtcp_rr(0xB0B0);
        datagrams.extend_from_slice(&rr);
        tx.protect_rtcp_tail(&mut datagrams, first_len).unwrap();
        assert_eq!(
            datagrams.len(),
            first_len + rr.len() + profile.rtcp_overhead()
        );
        let mut first = datagrams[..first_len].to_vec();
        let out = rx.unprotect_rtp(&mut first).unwrap();
        assert_eq!(first[..out.len], plain[..]);
        assert_eq!(
            unprotect_rtcp(&mut rx, &datagrams[first_len..]).unwrap(),
            rr
        );

        // A failed protect leaves the Vec as it was.
        let mut v = vec![0x55; 3];
        v.extend_from_slice(&[0x40; 20]); // version 1
        assert_eq!(
            tx.protect_rtp_tail(&mut v, 3),
            Err(SrtpError::BadVersion(1))
        );
        assert_eq!(v.len(), 23);
        assert_eq!(
            tx.protect_rtp_tail(&mut v, 30),
            Err(SrtpError::BufferTooSmall {
                needed: 30,
                capacity: 23
            })
        );
    }
}

/// Truncations, corruptions and random bytes: errors every time, never a panic, and no
/// state for SSRCs that never authenticated.
#[test]
fn garbage_never_panics() {
    let mut rng = ChaCha8Rng::seed_from_u64(0x5e7a);
    for profile in PROFILES {
        let (mut tx, mut rx) = pair(profile, SrtpConfig::default());
        let srtp = protect_rtp(&mut tx, &rtp_with_csrcs_and_extension(3, 0xD00D, 64)).unwrap();
        let srtcp = protect_rtcp(&mut tx, &rtcp_rr(0xD00D)).unwrap();
        for len in 0..srtp.len() {
            assert!(
                unprotect_rtp(&mut rx, &srtp[..len]).is_err(),
                "{profile:?} len {len}"
            );
        }
        for len in 0..srtcp.len() {
            assert!(
                unprotect_rtcp(&mut rx, &srtcp[..len]).is_err(),
                "{profile:?} len {len}"
            );
        }
        for _ in 0..20_000 {
            let len = (rng.next_u32() % 200) as usize;
            let mut buf = vec![0u8; len];
            rng.fill_bytes(&mut buf);
            if let Some(b) = buf.first_mut() {
                // Mostly version 2, so the parsers get past the first check.
                if rng.next_u32() % 4 != 0 {
                    *b = (*b & 0x3F) | 0x80;
                }
            }
            assert!(rx.unprotect_rtp(&mut buf.clone()).is_err());
            assert!(rx.unprotect_rtcp(&mut buf).is_err());
        }
        // Valid packets with random bytes overwritten.
        for _ in 0..5_000 {
            let mut bad = srtp.clone();
            let at = rng.next_u32() as usize % bad.len();
            bad[at] ^= (rng.next_u32() as u8) | 1;
            assert!(unprotect_rtp(&mut rx, &bad).is_err());
        }
        assert_eq!(rx.ssrc_count(), 0);
        assert_eq!(
            unprotect_rtp(&mut rx, &srtp).map(|p| p.len()),
            Ok(12 + 8 + 8 + 64)
        );
    }
}
