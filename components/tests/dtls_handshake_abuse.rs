//! What a peer, or anyone who can put datagrams on the path, cannot do to a handshake
//! with forged or replayed handshake fragments: make shoal resend its flight more than
//! a bounded number of times (RFC 6347 §4.2.4), block the protected Finished with an
//! unprotected fragment, break a client's handshake with a HelloRequest (RFC 5246
//! §7.4.1.1), exhaust the server's record sequence numbers through the ClientHello's
//! (§4.2.1), or pass a version that is not DTLS (§4.1).

mod dtls_util;

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use dtls_util::raw::{ClientSpoil, RawClient, alert_in, record};
use dtls_util::{Link, Side, app_data, certs, pair};
use shoal_components::dtls::{
    ContentType, HandshakeHeader, HandshakeType, Records, write_handshake,
};
use shoal_components::dtls::{DtlsConfig, DtlsConn, DtlsError, DtlsEvent, DtlsRole, DtlsStats};
use shoal_components::time::Time;

const PROTOCOL_VERSION: u8 = 70;

fn server(cfg: DtlsConfig) -> DtlsConn {
    let (ccert, scert) = certs();
    DtlsConn::new(
        DtlsRole::Server,
        Arc::new(cfg),
        scert,
        ccert.fingerprint_sha256(),
        [3; 32],
        Time::ZERO,
    )
}

fn drain(c: &mut DtlsConn) -> Vec<Bytes> {
    std::iter::from_fn(|| c.poll_transmit()).collect()
}

fn events(c: &mut DtlsConn) -> Vec<DtlsEvent> {
    std::iter::from_fn(|| c.poll_event()).collect()
}

fn bytes(datagrams: &[Bytes]) -> usize {
    datagrams.iter().map(|d| d.len()).sum()
}

/// An empty fragment of a 100-byte ClientHello numbered 0: 25 bytes.
fn empty_fragment_of_client_hello() -> BytesMut {
    let mut h = BytesMut::new();
    HandshakeHeader {
        msg_type: HandshakeType::ClientHello,
        length: 100,
        message_seq: 0,
        fragment_offset: 0,
        fragment_length: 0,
    }
    .write(&mut h);
    let mut d = BytesMut::new();
    record(&mut d, ContentType::Handshake, 0, 1, &h);
    d
}

/// A server that sent flight 4 and gets `poke` every 250 ms for a minute, as the
/// client never answers: its stats and the bytes it sent (flight 4 included).
fn poked_for_a_minute(poke: &[u8]) -> (DtlsStats, usize, usize) {
    let cfg = DtlsConfig::default();
    let mut s = server(cfg);
    let mut raw = RawClient::new([9; 32]);
    s.handle_datagram(Time::ZERO, &raw.client_hello(0)).unwrap();
    let flight4 = bytes(&drain(&mut s));
    let mut sent = flight4;
    let mut t = Time::ZERO;
    while !s.is_closed() {
        t = t + Duration::from_millis(250);
        s.handle_timeout(t);
        s.handle_datagram(t, poke).unwrap();
        sent += bytes(&drain(&mut s));
    }
    assert_eq!(events(&mut s), [DtlsEvent::Failed(DtlsError::Timeout)]);
    (s.stats(), flight4, sent)
}

/// The reviewer's probe: 25-byte fragments used to make the server resend its ~600-byte
/// flight 4 every 250 ms (24× amplification). Now only the peer's whole last flight
/// counts, at most `max_retransmits` times per flight, and the timer keeps its own
/// schedule.
#[test]
fn peer_prompted_retransmissions_are_bounded() {
    let max = DtlsConfig::default().max_retransmits;

    // Stray fragments prompt nothing: only the timer retransmits.
    let (stats, flight4, sent) = poked_for_a_minute(&empty_fragment_of_client_hello());
    assert_eq!(stats.retransmits_peer, 0);
    assert_eq!(stats.datagrams_sent, 1 + stats.retransmits_timer);
    assert!(stats.retransmits_timer <= u64::from(max));
    assert_eq!(sent, flight4 * (1 + stats.retransmits_timer as usize));
    let timer_only = stats.retransmits_timer;

    // The whole ClientHello, replayed: at most `max_retransmits` answers, and the timer
    // retransmits exactly as often as when nothing prompted it (it was not pushed back).
    let hello = RawClient::new([9; 32]).client_hello(0);
    let (stats, flight4, sent) = poked_for_a_minute(&hello);
    assert_eq!(stats.retransmits_peer, u64::from(max));
    assert_eq!(stats.retransmits_timer, timer_only);
    let flights = 1 + stats.retransmits_timer + stats.retransmits_peer;
    assert_eq!(stats.datagrams_sent, flights);
    assert_eq!(sent, flight4 * flights as usize);
}

/// After the handshake the server answers a retransmitted flight 5 with flight 6
/// (§4.2.4), at most `max_retransmits` times; only the whole flight counts, whose
/// Finished is protected; and the client's first application data ends it.
#[test]
fn flight6_answers_are_bounded_and_end_with_application_data() {
    let max = DtlsConfig::default().max_retransmits;
    let connect = || {
        let mut s = server(DtlsConfig::default());
        let mut raw = RawClient::new([9; 32]);
        s.handle_datagram(Time::ZERO, &raw.client_hello(0)).unwrap();
        let flight4 = drain(&mut s);
        let f5 = raw.flight5(&flight4, ClientSpoil::Nothing);
        s.handle_datagram(Time::ZERO, &raw.write(&f5)).unwrap();
        assert!(s.is_connected());
        drain(&mut s);
        events(&mut s);
        (s, raw, f5)
    };

    // The whole flight 5 again and again, 300 ms apart.
    let (mut s, mut raw, f5) = connect();
    let mut answers = 0;
    for i in 1..=3 * max {
        let t = Time::from_millis(300 * u64::from(i));
        s.handle_datagram(t, &raw.write(&f5)).unwrap();
        answers += drain(&mut s).len();
    }
    assert_eq!(answers, max as usize);
    assert_eq!(s.stats().retransmits_peer, u64::from(max));
    assert!(s.is_connected());

    // Its plaintext part alone, without the protected Finished: nothing.
    let (mut s, mut raw, f5) = connect();
    let whole = raw.write(&f5);
    let plaintext: Vec<u8> = Records::new(&whole)
        .map(|r| r.unwrap())
        .filter(|r| r.header.epoch == 0)
        .flat_map(|r| r.raw.to_vec())
        .collect();
    s.handle_datagram(Time::from_millis(300), &plaintext)
        .unwrap();
    assert!(drain(&mut s).is_empty());
    s.handle_datagram(Time::from_millis(600), &raw.write(&f5))
        .unwrap();
    assert_eq!(drain(&mut s).len(), 1, "the whole flight is answered");

    // Application data from the client proves it has our Finished: no more answers.
    s.handle_datagram(Time::from_millis(900), &raw.app_data(b"hi"))
        .unwrap();
    assert_eq!(&app_data(&events(&mut s))[0][..], b"hi");
    s.handle_datagram(Time::from_millis(1200), &raw.write(&f5))
        .unwrap();
    assert!(drain(&mut s).is_empty());
    assert_eq!(s.stats().retransmits_peer, 1);
    assert!(s.is_connected());
}

/// An unprotected fragment claiming the Finished's message_seq (4) used to hold that
/// number in reassembly, so the real, protected Finished was never taken.
#[test]
fn plaintext_fragment_cannot_block_the_protected_finished() {
    let mut s = server(DtlsConfig::default());
    let mut raw = RawClient::new([9; 32]);
    s.handle_datagram(Time::ZERO, &raw.client_hello(0)).unwrap();
    let flight4 = drain(&mut s);
    let mut h = BytesMut::new();
    HandshakeHeader {
        msg_type: HandshakeType::Finished,
        length: 12,
        message_seq: 4,
        fragment_offset: 0,
        fragment_length: 1,
    }
    .write(&mut h);
    h.extend_from_slice(&[0]);
    let mut forged = BytesMut::new();
    record(&mut forged, ContentType::Handshake, 0, 50, &h);
    s.handle_datagram(Time::ZERO, &forged).unwrap();
    let f5 = raw.flight5(&flight4, ClientSpoil::Nothing);
    s.handle_datagram(Time::ZERO, &raw.write(&f5)).unwrap();
    assert!(s.is_connected());
}

/// A HelloRequest numbered 0 put before the server's flight 4 used to take message_seq
/// 0 from the real ServerHello. RFC 5246 §7.4.1.1: it "will be ignored by the client
/// if the client is currently negotiating a session" — dropped before reassembly. Here
/// one goes in front of every datagram the server sends.
#[test]
fn hello_request_is_ignored_while_handshaking() {
    let mut p = pair(
        DtlsConfig::default(),
        DtlsConfig::default(),
        7,
        Link::clean(),
    );
    p.mitm = Some(Box::new(|from, d| {
        if from == Side::Client {
            return Some(d);
        }
        let mut m = BytesMut::new();
        write_handshake(&mut m, HandshakeType::HelloRequest, 0, &[]);
        let mut out = BytesMut::new();
        record(&mut out, ContentType::Handshake, 0, 999, &m);
        out.extend_from_slice(&d);
        Some(out.freeze())
    }));
    assert!(p.handshake(2000), "{:?}", p.client_events);
    assert!(p.client.stats().handshake_fragments_dropped >= 2);
}

/// The server numbers its answer from the ClientHello's record sequence number
/// (§4.2.1). A ClientHello numbered near 2^48 used to fail the handshake with
/// internal_error after part of flight 4; it is now dropped (counted) before anything
/// is sent, and a proper ClientHello is answered afterwards, with and without cookies.
#[test]
fn client_hello_near_the_end_of_the_sequence_space_is_dropped() {
    for hello_verify in [false, true] {
        let cfg = DtlsConfig {
            hello_verify,
            ..DtlsConfig::default()
        };
        for seq in [
            (1u64 << 48) - 1,
            (1 << 48) - 2,
            (1 << 48) - 5,
            (1 << 32) + 1,
        ] {
            let mut s = server(cfg.clone());
            let mut raw = RawClient::new([9; 32]);
            raw.set_record_seq(seq);
            s.handle_datagram(Time::ZERO, &raw.client_hello(0)).unwrap();
            assert!(drain(&mut s).is_empty(), "{seq:#x}: nothing sent");
            assert!(events(&mut s).is_empty());
            assert_eq!(s.stats().handshake_fragments_dropped, 1);
            assert!(!s.is_closed());
            raw.set_record_seq(1 << 32);
            s.handle_datagram(Time::ZERO, &raw.client_hello(0)).unwrap();
            let answer = drain(&mut s);
            let first = Records::new(&answer[0]).next().unwrap().unwrap();
            assert_eq!(first.header.sequence_number, 1 << 32);
            assert!(events(&mut s).is_empty());
        }
    }
}

/// DTLS versions are 1's complement under the high byte 254 (RFC 6347 §4.1): a TLS
/// 0x0303 or a zero is no newer DTLS but no DTLS at all, refused with protocol_version;
/// 1.0 (0xfeff) too; 1.3 (0xfefc) gets 1.2.
#[test]
fn client_version_must_be_dtls() {
    for version in [0x0303, 0x0000, 0x00fd, 0xfdfd, 0xfeff, 0xfefe] {
        let mut s = server(DtlsConfig::default());
        let mut raw = RawClient::new([9; 32]);
        raw.version = version;
        assert_eq!(
            s.handle_datagram(Time::ZERO, &raw.client_hello(0)),
            Err(DtlsError::ProtocolVersion(version)),
            "{version:#06x}"
        );
        let out = drain(&mut s);
        assert_eq!(out.len(), 1);
        assert_eq!(alert_in(&out[0], None), Some((2, PROTOCOL_VERSION)));
    }
    let mut s = server(DtlsConfig::default());
    let mut raw = RawClient::new([9; 32]);
    raw.version = 0xfefc;
    s.handle_datagram(Time::ZERO, &raw.client_hello(0)).unwrap();
    let flight4 = drain(&mut s);
    let f5 = raw.flight5(&flight4, ClientSpoil::Nothing);
    s.handle_datagram(Time::ZERO, &raw.write(&f5)).unwrap();
    assert!(s.is_connected());
}
