//! Client ↔ server DTLS handshakes over the seeded in-memory network: every role
//! assignment, suite and group; keys agree; application data both ways; and handshakes
//! that complete under loss, reordering and duplication.

mod dtls_util;

use std::time::Duration;

use dtls_util::{Link, app_data, connected, pair};
use shoal_components::dtls::{
    CipherSuite, DtlsConfig, DtlsConn, DtlsError, DtlsEvent, NamedGroup, SrtpKeys, SrtpProfile,
};

fn config(suite: CipherSuite, group: NamedGroup) -> DtlsConfig {
    DtlsConfig {
        cipher_suites: vec![suite],
        groups: vec![group],
        ..DtlsConfig::default()
    }
}

fn export(c: &DtlsConn) -> [u8; 60] {
    let mut out = [0u8; 60];
    c.export_keying_material(b"EXTRACTOR-dtls_srtp", &mut out)
        .unwrap();
    out
}

fn srtp_of(events: &[DtlsEvent]) -> (CipherSuite, Option<SrtpKeys>) {
    match connected(events) {
        Some(DtlsEvent::Connected { suite, srtp, .. }) => (*suite, srtp.clone()),
        _ => panic!("not connected: {events:?}"),
    }
}

/// Both ends agree on everything, and data flows both ways.
fn check_connected(p: &mut dtls_util::Pair, suite: CipherSuite) {
    let (cs, ckeys) = srtp_of(&p.client_events);
    let (ss, skeys) = srtp_of(&p.server_events);
    assert_eq!(cs, suite);
    assert_eq!(ss, suite);
    assert_eq!(ckeys, skeys);
    assert_eq!(export(&p.client), export(&p.server));
    p.client.send_application_data(b"ping from client").unwrap();
    p.server.send_application_data(b"pong from server").unwrap();
    let big = vec![0xabu8; 3000];
    p.client.send_application_data(&big).unwrap();
    p.run_until(1000, |p| {
        app_data(&p.server_events).len() >= 2 && !app_data(&p.client_events).is_empty()
    });
    let at_server = app_data(&p.server_events);
    assert_eq!(&at_server[0][..], b"ping from client");
    let joined: Vec<u8> = at_server[1..].iter().flat_map(|b| b.to_vec()).collect();
    assert_eq!(joined, big);
    assert_eq!(&app_data(&p.client_events)[0][..], b"pong from server");
}

#[test]
fn every_suite_and_group_in_both_role_assignments() {
    let suites = [
        CipherSuite::EcdheEcdsaAes128GcmSha256,
        CipherSuite::EcdheEcdsaAes256GcmSha384,
    ];
    let groups = [NamedGroup::X25519, NamedGroup::Secp256r1];
    let mut seed = 0;
    for suite in suites {
        for group in groups {
            for client_constrains in [true, false] {
                for hello_verify in [false, true] {
                    seed += 1;
                    let (mut c, mut s) = if client_constrains {
                        (config(suite, group), DtlsConfig::default())
                    } else {
                        (DtlsConfig::default(), config(suite, group))
                    };
                    s.hello_verify = hello_verify;
                    c.srtp_profiles = vec![SrtpProfile::Aes128CmHmacSha1_80];
                    let mut p = pair(c, s, seed, Link::clean());
                    assert!(
                        p.handshake(1000),
                        "{suite:?} {group:?} client_constrains={client_constrains} hvr={hello_verify}: {:?} {:?}",
                        p.client_events,
                        p.server_events
                    );
                    check_connected(&mut p, suite);
                    let (_, keys) = srtp_of(&p.client_events);
                    assert_eq!(keys.unwrap().profile, SrtpProfile::Aes128CmHmacSha1_80);
                }
            }
        }
    }
}

#[test]
fn server_prefers_an_aead_srtp_profile() {
    // Chromium's order: 0x0001, 0x0008, 0x0007.
    let c = DtlsConfig {
        srtp_profiles: vec![
            SrtpProfile::Aes128CmHmacSha1_80,
            SrtpProfile::AeadAes256Gcm,
            SrtpProfile::AeadAes128Gcm,
        ],
        ..DtlsConfig::default()
    };
    let mut p = pair(c, DtlsConfig::default(), 7, Link::clean());
    assert!(p.handshake(1000));
    let (_, keys) = srtp_of(&p.server_events);
    assert_eq!(keys.unwrap().profile, SrtpProfile::AeadAes128Gcm);
}

#[test]
fn no_common_srtp_profile_connects_without_srtp() {
    let c = DtlsConfig {
        srtp_profiles: vec![SrtpProfile::Aes128CmHmacSha1_80],
        ..DtlsConfig::default()
    };
    let s = DtlsConfig {
        srtp_profiles: vec![SrtpProfile::AeadAes128Gcm],
        ..DtlsConfig::default()
    };
    let mut p = pair(c, s, 8, Link::clean());
    assert!(p.handshake(1000));
    assert_eq!(srtp_of(&p.client_events).1, None);
    assert_eq!(srtp_of(&p.server_events).1, None);
}

/// A session with media requires SRTP: with no profile in common the side that sees
/// it fails the handshake with handshake_failure (RFC 5764 §4.1.1), as server on the
/// ClientHello and as client on the ServerHello, and the peer is told.
#[test]
fn a_session_that_requires_srtp_refuses_one_without_it() {
    let cm80 = DtlsConfig {
        srtp_profiles: vec![SrtpProfile::Aes128CmHmacSha1_80],
        ..DtlsConfig::default()
    };
    let none = DtlsConfig {
        srtp_profiles: Vec::new(),
        ..DtlsConfig::default()
    };
    let gcm = DtlsConfig {
        srtp_profiles: vec![SrtpProfile::AeadAes128Gcm],
        ..DtlsConfig::default()
    };
    // Server requires: a client offering no use_srtp, or no common profile.
    for (seed, client) in [(30, none.clone()), (31, cm80.clone())] {
        let mut p = pair(client, gcm.clone(), seed, Link::clean());
        p.server.require_srtp();
        p.run_until(1000, |p| dtls_util::closed(&p.client_events).is_some());
        assert_eq!(
            dtls_util::failed(&p.server_events),
            Some(&DtlsError::NoSharedSrtpProfile)
        );
        assert_eq!(dtls_util::closed(&p.client_events), Some(Some(40)));
        assert!(!p.client.is_connected() && !p.server.is_connected());
    }
    // Client requires: a server that answers without use_srtp.
    let mut p = pair(cm80.clone(), none, 32, Link::clean());
    p.client.require_srtp();
    p.run_until(1000, |p| dtls_util::closed(&p.server_events).is_some());
    assert_eq!(
        dtls_util::failed(&p.client_events),
        Some(&DtlsError::NoSharedSrtpProfile)
    );
    assert_eq!(dtls_util::closed(&p.server_events), Some(Some(40)));
    // Required and agreed: connects with keys.
    let mut p = pair(cm80.clone(), cm80, 33, Link::clean());
    p.server.require_srtp();
    p.client.require_srtp();
    assert!(p.handshake(1000));
    assert!(srtp_of(&p.server_events).1.is_some());
}

#[test]
fn close_notify_closes_both_sides() {
    let mut p = pair(
        DtlsConfig::default(),
        DtlsConfig::default(),
        9,
        Link::clean(),
    );
    assert!(p.handshake(1000));
    p.client.close();
    p.run_until(100, |p| dtls_util::closed(&p.server_events).is_some());
    assert_eq!(dtls_util::closed(&p.client_events), Some(None));
    assert_eq!(dtls_util::closed(&p.server_events), Some(Some(0)));
    assert!(!p.server.is_connected());
    assert!(p.client.send_application_data(b"x").is_err());
}

/// 20% loss each way, reordering by jitter and 5% duplication, over 100 seeds.
#[test]
fn handshake_completes_under_loss_reordering_and_duplication() {
    let link = Link {
        latency: Duration::from_millis(20),
        jitter: Duration::from_millis(40),
        loss: 0.2,
        duplicate: 0.05,
    };
    let patient = DtlsConfig {
        handshake_timeout: Duration::from_secs(600),
        max_retransmits: 12,
        retransmit_max: Duration::from_secs(8),
        mtu: 500, // several fragments per flight
        ..DtlsConfig::default()
    };
    let mut retransmits = 0;
    for seed in 0..100 {
        let mut s = patient.clone();
        s.hello_verify = seed % 3 == 0;
        let mut p = pair(patient.clone(), s, 1000 + seed, link);
        assert!(
            p.handshake(20_000),
            "seed {seed}: {:?} {:?}\n{:?}\n{:?}",
            p.client_events,
            p.server_events,
            p.client,
            p.server
        );
        // The handshake may complete on one side first; data still gets through.
        let (_, ck) = srtp_of(&p.client_events);
        let (_, sk) = srtp_of(&p.server_events);
        assert_eq!(ck, sk, "seed {seed}");
        retransmits += p.client.stats().retransmits_timer + p.server.stats().retransmits_timer;
        let mut delivered = false;
        for _ in 0..50 {
            p.client.send_application_data(b"data").unwrap();
            p.run_until(200, |p| !app_data(&p.server_events).is_empty());
            if !app_data(&p.server_events).is_empty() {
                delivered = true;
                break;
            }
        }
        assert!(delivered, "seed {seed}: no data");
    }
    eprintln!("timer retransmissions over 100 seeds: {retransmits}");
    assert!(retransmits > 0, "loss never forced a retransmission");
}
