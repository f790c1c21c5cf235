//! RTP packets against bytes we did not write (aiortc's and pion's test suites): the
//! fixed header, CSRCs, padding, RFC 8285 one-byte and two-byte header extensions and the
//! typed extension values; in-place rewriting of what an SFU changes per subscriber;
//! the writer reproducing the captured bytes; malformed packets refused with typed
//! errors; and seeded random bytes and mutations that never panic.

mod mutate;

use bytes::{Bytes, BytesMut};
use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};
use shoal_components::rtp::ext::{parse_mid, parse_rid, parse_transport_cc};
use shoal_components::rtp::*;

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

fn with_payload(header_hex: &str, payload: &[u8]) -> Vec<u8> {
    let mut v = hex(header_hex);
    v.extend_from_slice(payload);
    v
}

// aiortc's tests/rtp.bin: PCMU, 160 bytes of 0xff.
fn aiortc_plain() -> Vec<u8> {
    with_payload("80003d7f eaaa63f4 f01b40e9", &[0xff; 160])
}

// aiortc's tests/rtp_with_csrc.bin: two CSRCs.
fn aiortc_csrc() -> Vec<u8> {
    with_payload("82003ed2 00000090 5fbd169e abcdef01 deadbeef", &[0xff; 160])
}

// aiortc's tests/rtp_with_sdes_mid.bin: a one-byte extension with MID "0" as ID 9.
const AIORTC_MID: &str = "90ef374c4f1ba1adf3753f70bede00019030000078800a6dc705f7a2a43c1800066e\
                          ab3c78aeb1524d8baaebaa791e80fbabad9ef92bcce3e2a1105f56337eac43fedb785b\
                          f417f29455";

// aiortc's tests/rtp_only_padding_with_header_extensions.bin: abs-send-time as ID 2 and
// 224 bytes of padding, no payload.
fn aiortc_padding_with_ext() -> Vec<u8> {
    let mut v = hex("b062567a bd029f83 597eaf6d bede0001 22f1cc8c");
    v.extend_from_slice(&[0; 223]);
    v.push(224);
    v
}

// aiortc's tests/rtp_dtmf.bin: M set, telephone-event.
const AIORTC_DTMF: &str = "80e55e58efb0f6bca6a144f2018a03c0";

// pion/rtp's packet_test.go TestRFC8285TwoByteExtension.
fn pion_two_byte() -> Vec<u8> {
    let mut v = hex("90e0698f d9c293da 1c642782 10000007 0518");
    v.extend_from_slice(&[0xAA; 24]);
    v.extend_from_slice(&hex("0000 98 36 be 88 9e"));
    v
}

// pion/rtp's TestRFC8285TwoByteMultipleExtensionsWithPadding: IDs 1 (empty), 2, a
// padding octet, 3.
const PION_TWO_BYTE_PADDED: &str =
    "90e0698fd9c293da1c642782 10000003 0100 0201bb 00 0304cccccccc 9836be889e";

#[test]
fn plain_packet_fields_and_payload() {
    let raw = aiortc_plain();
    let p = RtpPacket::parse(&raw).unwrap();
    let h = p.header();
    assert!(!h.marker);
    assert_eq!(h.payload_type, 0);
    assert_eq!(h.sequence_number, 15743);
    assert_eq!(h.timestamp, 3_937_035_252);
    assert_eq!(h.ssrc, 0xf01b_40e9);
    assert_eq!(h.header_len(), 12);
    assert_eq!(p.payload().len(), 160);
    assert_eq!(p.csrcs().count(), 0);
    assert_eq!(p.extensions().count(), 0);
    assert_eq!(h.extension_form(), None);

    let dtmf = hex(AIORTC_DTMF);
    let p = RtpPacket::parse(&dtmf).unwrap();
    assert!(p.header().marker);
    assert_eq!(p.header().payload_type, 101);
    assert_eq!(p.payload(), &hex("018a03c0")[..]);
}

#[test]
fn csrc_list() {
    let raw = aiortc_csrc();
    let p = RtpPacket::parse(&raw).unwrap();
    assert_eq!(p.header().csrc_count(), 2);
    assert_eq!(
        p.csrcs().collect::<Vec<_>>(),
        [2_882_400_001, 3_735_928_559]
    );
    assert_eq!(p.header().header_len(), 20);
    assert_eq!(p.payload().len(), 160);
    // Every cut inside the CSRC list is refused as such.
    for len in 12..20 {
        assert_eq!(
            RtpHeader::parse(&raw[..len]),
            Err(RtpError::CsrcOverrun { count: 2 })
        );
    }
}

#[test]
fn one_byte_extension_mid() {
    let raw = hex(AIORTC_MID);
    let p = RtpPacket::parse(&raw).unwrap();
    assert_eq!(p.header().extension_form(), Some(ExtensionForm::OneByte));
    let exts: Vec<_> = p.extensions().collect();
    assert_eq!(exts, [Extension { id: 9, value: b"0" }]);
    assert_eq!(p.mid(9), Ok(Some("0")));
    assert_eq!(p.mid(4), Ok(None));
    assert_eq!(p.header().header_len(), 20);
    assert_eq!(p.payload(), &raw[20..]);
}

#[test]
fn padding_and_abs_send_time() {
    let raw = aiortc_padding_with_ext();
    let p = RtpPacket::parse(&raw).unwrap();
    assert_eq!(p.header().padding_len(), 224);
    assert!(p.payload().is_empty());
    assert_eq!(p.padding().len(), 224);
    let t = p.abs_send_time(2).unwrap().unwrap();
    assert_eq!(t, AbsSendTime(0xf1cc8c));
    assert_eq!(t.to_bytes(), [0xf1, 0xcc, 0x8c]);
    // 0xf1cc8c / 2^18 s = 60.4497 s.
    assert_eq!(t.as_micros() / 10_000, 6044);
    // A header cut of the padding, with a count that reaches into the header.
    let mut short = raw[..20].to_vec();
    short.push(2);
    assert_eq!(
        RtpHeader::parse(&short),
        Err(RtpError::BadPadding { count: 2 })
    );
    short.pop();
    short.push(0);
    assert_eq!(
        RtpHeader::parse(&short),
        Err(RtpError::BadPadding { count: 0 })
    );
}

#[test]
fn two_byte_extensions() {
    let raw = pion_two_byte();
    let p = RtpPacket::parse(&raw).unwrap();
    assert_eq!(
        p.header().extension_form(),
        Some(ExtensionForm::TwoByte { appbits: 0 })
    );
    let exts: Vec<_> = p.extensions().collect();
    assert_eq!(exts.len(), 1);
    assert_eq!(exts[0].id, 5);
    assert_eq!(exts[0].value, &[0xAA; 24][..]);
    assert_eq!(p.payload(), &hex("98 36 be 88 9e")[..]);

    let raw = hex(PION_TWO_BYTE_PADDED);
    let p = RtpPacket::parse(&raw).unwrap();
    let exts: Vec<(u8, Vec<u8>)> = p.extensions().map(|e| (e.id, e.value.to_vec())).collect();
    assert_eq!(exts, [(1, vec![]), (2, vec![0xbb]), (3, vec![0xcc; 4])]);
    assert_eq!(p.extension(1), Some(&[][..]));
    assert_eq!(p.extension(3), Some(&[0xcc; 4][..]));
    assert_eq!(p.extension(4), None);
}

#[test]
fn one_byte_id_15_ends_the_walk() {
    // RFC 8285 §4.2: elements after ID 15 are not considered.
    let raw = hex("90000001 00000002 00000003 bede0002 10aa f0 20bb 000000 c0");
    let p = RtpPacket::parse(&raw).unwrap();
    let ids: Vec<u8> = p.extensions().map(|e| e.id).collect();
    assert_eq!(ids, [1]);
    assert_eq!(p.extension(2), None);
}

#[test]
fn other_profiles_are_opaque() {
    // pion/rtp TestBasic: profile 1, one word.
    let raw = hex("90e0698fd9c293da1c642782 00010001 ffffffff 9836be889e");
    let p = RtpPacket::parse(&raw).unwrap();
    assert_eq!(
        p.header().extension_form(),
        Some(ExtensionForm::Other { profile: 1 })
    );
    assert_eq!(p.extensions().count(), 0);
    assert_eq!(p.extension_data(), Some(&[0xff; 4][..]));
    assert_eq!(p.payload(), &hex("9836be889e")[..]);
}

#[test]
fn writer_reproduces_captured_packets() {
    // aiortc's MID packet: one-byte form, padded to 32 bits.
    let raw = hex(AIORTC_MID);
    let p = RtpPacket::parse(&raw).unwrap();
    let h = *p.header();
    let fields = RtpFields {
        marker: h.marker,
        payload_type: h.payload_type,
        sequence_number: h.sequence_number,
        timestamp: h.timestamp,
        ssrc: h.ssrc,
    };
    let mut out = BytesMut::new();
    let mut w = RtpWriter::new(&mut out, &fields, &[]);
    w.extension(9, b"0").unwrap().payload(p.payload());
    assert_eq!(w.finish(0), raw.len());
    assert_eq!(&out[..], &raw[..]);

    // pion's two-byte packet.
    let raw = pion_two_byte();
    let p = RtpPacket::parse(&raw).unwrap();
    let mut out = BytesMut::new();
    let mut w = RtpWriter::new(&mut out, &fields_of(p.header()), &[]);
    let form = ExtensionForm::fitting(p.extensions().map(|e| (e.id, e.value.len())));
    assert_eq!(form, ExtensionForm::TwoByte { appbits: 0 });
    w.extension_form(form);
    for e in p.extensions() {
        w.extension(e.id, e.value).unwrap();
    }
    w.payload(p.payload());
    w.finish(0);
    assert_eq!(&out[..], &raw[..]);

    // aiortc's CSRC packet, and its padded packet (whose padding we zero).
    for raw in [aiortc_csrc(), aiortc_padding_with_ext()] {
        let p = RtpPacket::parse(&raw).unwrap();
        let csrcs: Vec<u32> = p.csrcs().collect();
        let mut out = BytesMut::new();
        let mut w = RtpWriter::new(&mut out, &fields_of(p.header()), &csrcs);
        for e in p.extensions() {
            w.extension(e.id, e.value).unwrap();
        }
        w.payload(p.payload());
        w.finish(p.header().padding_len());
        assert_eq!(&out[..], &raw[..]);
    }
}

fn fields_of(h: &RtpHeader) -> RtpFields {
    RtpFields {
        marker: h.marker,
        payload_type: h.payload_type,
        sequence_number: h.sequence_number,
        timestamp: h.timestamp,
        ssrc: h.ssrc,
    }
}

#[test]
fn writer_builds_csrc_extensions_and_padding_that_parse_back() {
    let fields = RtpFields {
        marker: true,
        payload_type: 96,
        sequence_number: 65535,
        timestamp: 90_000,
        ssrc: 0x1234_5678,
    };
    let capture = AbsCaptureTime {
        capture_ntp: 0xe000_0000_8000_0000,
        clock_offset: Some(-(1 << 31)),
    };
    let mut cap = BytesMut::new();
    capture.write_to(&mut cap);
    let mut out = BytesMut::new();
    let mut w = RtpWriter::new(&mut out, &fields, &[7, 8, 9]);
    w.extension(1, b"video").unwrap();
    w.extension(2, b"h").unwrap();
    w.extension(3, &AbsSendTime::from_micros(1_500_000).to_bytes())
        .unwrap();
    w.extension(4, &0xBEEFu16.to_be_bytes()).unwrap();
    w.extension(5, &cap).unwrap();
    w.extension(
        6,
        &[AudioLevel {
            voice: true,
            level_neg_dbov: 30,
        }
        .to_byte()],
    )
    .unwrap();
    assert_eq!(
        w.extension(15, b"x").err(),
        Some(RtpError::ElementNotEncodable { id: 15, len: 1 })
    );
    assert_eq!(
        w.extension(7, &[0; 17]).err(),
        Some(RtpError::ElementNotEncodable { id: 7, len: 17 })
    );
    w.payload(b"frame");
    let len = w.finish(3);
    assert_eq!(len, out.len());

    let p = RtpPacket::parse(&out).unwrap();
    let h = p.header();
    assert_eq!(fields_of(h), fields);
    assert_eq!(p.csrcs().collect::<Vec<_>>(), [7, 8, 9]);
    assert_eq!(p.mid(1), Ok(Some("video")));
    assert_eq!(p.rid(2), Ok(Some("h")));
    assert_eq!(p.repaired_rid(2), Ok(Some("h")));
    assert_eq!(p.abs_send_time(3).unwrap().unwrap().as_micros(), 1_500_000);
    assert_eq!(p.transport_cc_seq(4), Ok(Some(0xBEEF)));
    assert_eq!(p.abs_capture_time(5), Ok(Some(capture)));
    assert_eq!(
        p.audio_level(6),
        Ok(Some(AudioLevel {
            voice: true,
            level_neg_dbov: 30
        }))
    );
    assert_eq!(p.payload(), b"frame");
    assert_eq!(p.padding(), &[0, 0, 3]);
    // A malformed value of the right ID is an error, not an absence.
    assert_eq!(p.rid(1), Ok(Some("video")));
    assert_eq!(
        p.transport_cc_seq(1),
        Err(RtpError::BadExtensionValue { id: 1 })
    );
    assert_eq!(
        p.abs_send_time(1),
        Err(RtpError::BadExtensionValue { id: 1 })
    );
    assert_eq!(
        p.abs_capture_time(1),
        Err(RtpError::BadExtensionValue { id: 1 })
    );
}

#[test]
fn typed_values_check_their_syntax() {
    assert_eq!(parse_rid(b"q-1_f"), Some("q-1_f"));
    assert_eq!(parse_rid(b""), None);
    assert_eq!(parse_rid(b"a b"), None);
    assert_eq!(parse_rid(&[0xff]), None);
    assert_eq!(parse_mid(b""), None);
    assert_eq!(parse_mid(&[0xc3, 0x28]), None);
    assert_eq!(parse_transport_cc(&[1, 2, 0x80, 1]), Some(0x0102));
    assert_eq!(parse_transport_cc(&[1, 2, 3]), None);
    assert_eq!(AbsCaptureTime::parse(&[0; 12]), None);
    assert_eq!(AudioLevel::parse(&[]), None);
    assert_eq!(AbsSendTime::from_micros(64_000_000), AbsSendTime(0));
    assert_eq!(AbsSendTime::from_micros(63_999_999).0, 0xFF_FFFF);
}

#[test]
fn in_place_rewrite_changes_only_what_it_names() {
    let fields = RtpFields {
        marker: false,
        payload_type: 96,
        sequence_number: 100,
        timestamp: 3000,
        ssrc: 1,
    };
    let mut out = BytesMut::new();
    let mut w = RtpWriter::new(&mut out, &fields, &[]);
    w.extension(3, &[0x12, 0x34, 0x56]).unwrap();
    w.extension(5, &[0x00, 0x07]).unwrap();
    w.extension(9, b"m").unwrap();
    w.payload(b"payload bytes");
    w.finish(4);
    let before = out.to_vec();
    let capacity = out.capacity();

    let mut p = RtpPacketMut::parse(&mut out[..]).unwrap();
    p.set_ssrc(0xdead_beef);
    p.set_sequence_number(7);
    p.set_timestamp(0xffff_fff0);
    p.set_marker(true);
    p.set_payload_type(0xff);
    p.set_transport_cc_seq(5, 0x0102).unwrap();
    p.set_abs_send_time(3, AbsSendTime(0xabcdef)).unwrap();
    assert_eq!(
        p.set_extension(9, b"mm"),
        Err(RtpError::ExtensionLength { id: 9, len: 1 })
    );
    assert_eq!(
        p.set_extension(4, b"x"),
        Err(RtpError::ExtensionNotFound { id: 4 })
    );
    assert_eq!(
        p.set_transport_cc_seq(9, 1),
        Err(RtpError::ExtensionLength { id: 9, len: 1 })
    );
    p.set_extension(9, b"n").unwrap();
    let h = *p.header();
    assert_eq!(h.payload_type, 0x7f);
    assert_eq!(RtpHeader::parse(&out).unwrap(), h);
    assert_eq!(out.capacity(), capacity);

    let q = RtpPacket::parse(&out).unwrap();
    assert_eq!(q.header().ssrc, 0xdead_beef);
    assert_eq!(q.header().sequence_number, 7);
    assert_eq!(q.header().timestamp, 0xffff_fff0);
    assert!(q.header().marker);
    assert_eq!(q.transport_cc_seq(5), Ok(Some(0x0102)));
    assert_eq!(q.abs_send_time(3), Ok(Some(AbsSendTime(0xabcdef))));
    assert_eq!(q.mid(9), Ok(Some("n")));
    assert_eq!(q.payload(), b"payload bytes");
    // Only the bytes those fields occupy changed.
    let changed: Vec<usize> = (0..before.len()).filter(|&i| before[i] != out[i]).collect();
    // Fixed header 0..12, extension header 12..16, then ID 3's value at 17..20, ID 5's
    // at 21..23, ID 9's at 24.
    let allowed = |i: usize| i < 12 || (17..20).contains(&i) || (21..23).contains(&i) || i == 24;
    assert!(changed.iter().all(|&i| allowed(i)), "{changed:?}");
}

#[test]
fn malformed_packets_get_typed_errors() {
    use RtpError::*;
    assert_eq!(RtpHeader::parse(&[]), Err(TooShort { len: 0 }));
    assert_eq!(
        RtpHeader::parse(&hex("80003d7f eaaa63f4 f01b40")),
        Err(TooShort { len: 11 })
    );
    assert_eq!(
        RtpHeader::parse(&hex("40003d7f eaaa63f4 f01b40e9")),
        Err(BadVersion { version: 1 })
    );
    assert_eq!(
        RtpHeader::parse(&hex("8f003d7f eaaa63f4 f01b40e9 00000001")),
        Err(CsrcOverrun { count: 15 })
    );
    // X set but no room for the extension header, or a length past the end.
    assert_eq!(
        RtpHeader::parse(&hex("90003d7f eaaa63f4 f01b40e9 bede")),
        Err(ExtensionOverrun)
    );
    assert_eq!(
        RtpHeader::parse(&hex("90003d7f eaaa63f4 f01b40e9 bede0002 10aa0000")),
        Err(ExtensionOverrun)
    );
    // One-byte element of 16 bytes in a 4-byte block; two-byte element header cut.
    assert_eq!(
        RtpHeader::parse(&hex("90003d7f eaaa63f4 f01b40e9 bede0001 1faabbcc")),
        Err(ElementOverrun { id: 1 })
    );
    assert_eq!(
        RtpHeader::parse(&hex("90003d7f eaaa63f4 f01b40e9 10000001 000000 07")),
        Err(ElementOverrun { id: 7 })
    );
    assert_eq!(
        RtpHeader::parse(&hex("90003d7f eaaa63f4 f01b40e9 10000001 0705aabb")),
        Err(ElementOverrun { id: 7 })
    );
    // Padding count larger than the packet after the header.
    assert_eq!(
        RtpHeader::parse(&hex("a0003d7f eaaa63f4 f01b40e9 0102 03 05")),
        Err(BadPadding { count: 5 })
    );
}

fn seeds() -> Vec<Vec<u8>> {
    vec![
        aiortc_plain(),
        aiortc_csrc(),
        hex(AIORTC_MID),
        aiortc_padding_with_ext(),
        hex(AIORTC_DTMF),
        pion_two_byte(),
        hex(PION_TWO_BYTE_PADDED),
    ]
}

/// Parses and, when that works, reads everything and checks the parts add up.
fn check(raw: &[u8]) {
    let Ok(p) = RtpPacket::parse(raw) else { return };
    let h = p.header();
    assert_eq!(
        h.header_len() + p.payload().len() + p.padding().len(),
        raw.len()
    );
    assert_eq!(p.padding().len(), usize::from(h.padding_len()));
    let _ = p.csrcs().count();
    for e in p.extensions() {
        assert_eq!(p.extension(e.id).map(|_| ()), Some(()));
        let _ = (
            p.mid(e.id),
            p.rid(e.id),
            p.abs_send_time(e.id),
            p.transport_cc_seq(e.id),
        );
        let _ = (p.abs_capture_time(e.id), p.audio_level(e.id));
    }
    let mut copy = raw.to_vec();
    let mut m = RtpPacketMut::parse(&mut copy).expect("parses twice");
    m.set_ssrc(!h.ssrc);
    m.set_sequence_number(h.sequence_number.wrapping_add(1));
    for id in 0..=255 {
        let _ = m.set_transport_cc_seq(id, 9);
        let _ = m.set_abs_send_time(id, AbsSendTime(1));
    }
    assert_eq!(
        RtpHeader::parse(&copy).map(|h| h.payload_range()),
        Ok(h.payload_range())
    );
}

#[test]
fn random_bytes_and_mutations_never_panic() {
    let mut rng = ChaCha8Rng::seed_from_u64(0x0072_7470);
    let seeds = seeds();
    let boundary = [
        0x00, 0x01, 0x0f, 0x10, 0x1f, 0x80, 0x90, 0xa0, 0xb0, 0xbe, 0xde, 0xf0, 0xff,
    ];
    let mut parsed = 0;
    for i in 0..40_000 {
        let seed = seeds[mutate::pick(&mut rng, seeds.len())].clone();
        let op = rng.next_u32() % 7;
        let mut d = mutate::generic(&mut rng, seed, op, 64, &boundary);
        if i % 4 != 0
            && let Some(b) = d.first_mut()
        {
            *b = 0x80 | (*b & 0x3f);
        }
        check(&d);
        parsed += usize::from(RtpHeader::parse(&d).is_ok());
    }
    assert!(parsed > 5_000, "too few mutants parse: {parsed}");
    for seed in seeds {
        for cut in 0..=seed.len() {
            check(&seed[..cut]);
        }
    }
}

#[test]
fn bytes_views_stay_borrowed() {
    // The parsed view is a borrow of the caller's buffer: no copy of the payload.
    let raw = Bytes::from(aiortc_plain());
    let p = RtpPacket::parse(&raw).unwrap();
    assert!(std::ptr::eq(p.payload().as_ptr(), raw[12..].as_ptr()));
}
