//! Transport-wide congestion control feedback
//! (draft-holmer-rmcat-transport-wide-cc-extensions-01 §3.1) against bytes shoal did
//! not write, and against arithmetic done by hand:
//!
//! - `twcc_feedback_roundtrip`: feedback messages Chromium 156 sent shoal while it
//!   subscribed to a room (captured decrypted from SRTCP in
//!   `interop_chromium_two_party_video`: run-length and two-bit status chunks, small
//!   and large deltas, with and without the P bit) parse, describe as many packets
//!   as they count, and write back byte for byte.
//! - `feedback_from_known_arrivals_matches_hand_computed_deltas`: a publisher's
//!   arrivals, recorded out of order across a sequence number wrap, come out of
//!   shoal's arrival log and encoder as exactly the packet worked out below.

use bytes::{Bytes, BytesMut};
use shoal_components::congestion::ArrivalLog;
use shoal_components::rtcp::twcc::{FeedbackEncoder, RecvDelta, Symbol};
use shoal_components::rtcp::{Compound, RtcpBody, RtcpPacket, WriteRtcp};
use shoal_components::time::Time;

fn hex(s: &str) -> Bytes {
    let s: String = s.split_whitespace().collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect::<Vec<u8>>()
        .into()
}

/// Chromium 156's feedback, one distinct shape each (length, P bit, chunk kinds).
const CHROMIUM: &[&str] = &[
    // Two packets, one run length chunk of small deltas.
    "8fcd0005 df6e40c2 4748f2cf 00000002 086bc700 20021d50",
    // One packet, padded with the P bit.
    "afcd0005 8db11db5 2db3dd39 00000001 086bc700 2001ad01",
    "afcd0006 df6e40c2 4748f2cf 00020005 086bc701 2005bd50 002e2801",
    "8fcd0006 8db11db5 2db3dd39 001f0006 086bce08 2006904f 29000128",
    "afcd0007 8db11db5 2db3dd39 002a0007 086bd00a 20076f2a 26505500 00000003",
    // Two-bit status vectors with a large delta first.
    "afcd0006 8db11db5 2db3dd39 009a0004 086be520 e5400100 4f262a01",
    "8fcd0006 8db11db5 2db3dd39 00b30005 086bea25 e5500100 20003051",
];

fn parse(raw: &Bytes) -> Vec<RtcpPacket> {
    Compound::new(raw.clone())
        .collect::<Result<Vec<_>, _>>()
        .expect("parses")
}

#[test]
fn twcc_feedback_roundtrip() {
    for (i, text) in CHROMIUM.iter().enumerate() {
        let raw = hex(text);
        let packets = parse(&raw);
        assert_eq!(packets.len(), 1, "packet {i}");
        let RtcpBody::TransportCc(t) = &packets[0].body else {
            panic!("packet {i}: not transport-cc");
        };
        // As many statuses as the count says, one delta per received one.
        let statuses: Vec<_> = t.packets().collect();
        assert_eq!(statuses.len(), usize::from(t.status_count), "packet {i}");
        for s in &statuses {
            let has_delta = matches!(s.symbol, Symbol::SmallDelta | Symbol::LargeDelta);
            assert_eq!(s.delta.is_some(), has_delta, "packet {i}: {s:?}");
        }
        assert_eq!(statuses[0].seq, t.base_seq);
        let mut out = BytesMut::new();
        packets[0].write_to(&mut out);
        assert_eq!(out.freeze(), raw, "packet {i} writes back byte for byte");
    }

    // One decoded by hand: base 0x001f, 6 packets in a run length chunk of small
    // deltas (0x2006), deltas 0x90 0x4f 0x29 0x00 0x01 0x28 in 250 µs, the 2-byte
    // tail zero padding inside the packet (no P bit).
    let packets = parse(&hex(CHROMIUM[3]));
    let RtcpBody::TransportCc(t) = &packets[0].body else {
        panic!("not transport-cc");
    };
    assert_eq!(
        (t.base_seq, t.status_count, t.fb_pkt_count),
        (0x1f, 6, 0x08)
    );
    assert_eq!(t.reference_time, 0x08_6bce);
    let micros: Vec<i64> = t
        .packets()
        .map(|p| p.delta.map_or(-1, RecvDelta::micros))
        .collect();
    assert_eq!(
        micros,
        [0x90 * 250, 0x4f * 250, 0x29 * 250, 0, 250, 0x28 * 250]
    );

    // A large delta first in a two-bit vector (0xe540: 10 01 01 01 00 00 00).
    let packets = parse(&hex(CHROMIUM[5]));
    let RtcpBody::TransportCc(t) = &packets[0].body else {
        panic!("not transport-cc");
    };
    let symbols: Vec<Symbol> = t.packets().map(|p| p.symbol).collect();
    use Symbol::*;
    assert_eq!(symbols, [LargeDelta, SmallDelta, SmallDelta, SmallDelta]);
    let first = t.packets().next().and_then(|p| p.delta);
    assert_eq!(first, Some(RecvDelta::Large(0x0100)));
}

#[test]
fn feedback_from_known_arrivals_matches_hand_computed_deltas() {
    // Transport-wide numbers 65534, 65535, 0, 1, 2, 3 (a wrap), arrivals in µs on
    // shoal's clock; 65535 never arrives, 2 arrives before 1, 3 before 2 is recorded.
    let arrivals: [(u16, Option<u64>); 6] = [
        (65_534, Some(1_000_100)),
        (65_535, None),
        (0, Some(1_000_600)),
        (1, Some(1_100_500)),
        (2, Some(1_100_400)),
        (3, Some(1_164_000)),
    ];
    let mut log = ArrivalLog::default();
    for &i in &[0, 2, 5, 4, 3] {
        let (seq, at) = arrivals[i];
        log.record(seq, 0x2222_2222, Time::from_micros(at.expect("arrived")));
    }
    let mut run = Vec::new();
    let base = log.next_run(&mut run);
    assert_eq!(base, 65_534);
    let want: Vec<Option<i64>> = arrivals.iter().map(|(_, a)| a.map(|a| a as i64)).collect();
    assert_eq!(run, want);

    // By hand (§3.1, §3.1.5):
    // - reference time: the first arrival, 1 000 100 µs, in whole 64 ms: 15 (960 000);
    // - 65534: 1 000 100 − 960 000 = 40 100 µs = 160.4 ticks of 250 µs → 160 (0xa0),
    //   small; the clock now stands at 960 000 + 160 × 250 = 1 000 000;
    // - 65535: not received;
    // - 0: 600 µs → 2 ticks (0x02), small; clock 1 000 500;
    // - 1: 100 000 µs → 400 ticks (0x0190), large; clock 1 100 500;
    // - 2: −100 µs → −1 tick (floor, 0xffff), large; clock 1 100 250;
    // - 3: 63 750 µs → 255 ticks (0xff), small.
    // Symbols 01 00 01 10 10 01 + one unused 00: a two-bit status vector (a large
    // delta rules out one bit), 0b11_01000110100100 = 0xd1a4. Chunk and 7 delta bytes
    // leave the packet 3 bytes short of 32 bits: padded with the P bit.
    let expected = hex("afcd0007 11111111 22222222 fffe0006 00000f05 d1a4a002 0190ffff ff000003");
    let mut encoder = FeedbackEncoder::default();
    let encoded = encoder.encode(&run);
    assert_eq!(encoded.status_count, 6);
    let mut out = BytesMut::new();
    encoder
        .feedback(0x1111_1111, log.media_ssrc, base, 5, encoded)
        .write_to(&mut out);
    assert_eq!(out.freeze(), expected);

    // And what a sender reads back from it: each arrival to within one tick.
    log.reported(encoded.status_count);
    assert!(!log.pending());
    let packets = parse(&expected);
    let RtcpBody::TransportCc(t) = &packets[0].body else {
        panic!("not transport-cc");
    };
    let mut clock = t.reference_time_us();
    for (p, (seq, at)) in t.packets().zip(arrivals) {
        assert_eq!(p.seq, seq);
        match (p.delta, at) {
            (Some(d), Some(at)) => {
                clock += d.micros();
                assert!((0..250).contains(&(at as i64 - clock)), "{seq}: {clock}");
            }
            (None, None) => assert_eq!(p.symbol, Symbol::NotReceived),
            other => panic!("{seq}: {other:?}"),
        }
    }
}
