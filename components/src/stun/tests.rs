//! Unit tests: writer → parser round trips and every refusal the parser can give.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6};

use bytes::{Bytes, BytesMut};

use super::*;

const TID: TransactionId = TransactionId([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
const PASSWORD: &[u8] = b"secret password";

/// Writes a message with `f` and returns its bytes.
fn build(class: Class, method: u16, f: impl FnOnce(&mut StunWriter<'_>)) -> Bytes {
    let mut buf = BytesMut::new();
    let mut w = StunWriter::new(&mut buf, class, method, TID);
    f(&mut w);
    let n = w.finish();
    assert_eq!(n, buf.len());
    buf.freeze()
}

fn parse(b: &Bytes) -> Result<StunMessage, StunError> {
    StunMessage::parse(b.clone())
}

/// Overwrites the header length field.
fn with_length(b: &Bytes, length: u16) -> Bytes {
    let mut v = b.to_vec();
    v[2..4].copy_from_slice(&length.to_be_bytes());
    Bytes::from(v)
}

#[test]
fn class_and_method_round_trip() {
    let classes = [
        Class::Request,
        Class::Indication,
        Class::SuccessResponse,
        Class::ErrorResponse,
    ];
    for class in classes {
        for method in [BINDING, 0x0003, 0x00A5, 0x0F0F, 0x0FFF] {
            let b = build(class, method, |_| {});
            let m = parse(&b).unwrap();
            assert_eq!((m.class(), m.method()), (class, method));
            assert_eq!(m.transaction_id(), TID);
            assert_eq!(m.attributes().count(), 0);
        }
    }
    // RFC 8489 §5: a Binding request is 0x0001, a success response 0x0101, an error
    // response 0x0111, an indication 0x0011.
    let b = build(Class::ErrorResponse, BINDING, |_| {});
    assert_eq!(&b[..2], &[0x01, 0x11]);
    let b = build(Class::Indication, BINDING, |_| {});
    assert_eq!(&b[..2], &[0x00, 0x11]);
}

#[test]
fn every_attribute_round_trips() {
    let v4 = SocketAddr::from((Ipv4Addr::new(192, 0, 2, 1), 32853));
    let b = build(Class::Request, BINDING, |w| {
        w.username(b"abcd:efg")
            .software("shoal")
            .priority(0x6E00_01FF)
            .use_candidate()
            .ice_controlling(0x932F_F9B1_5126_3B36)
            .ice_controlled(7)
            .xor_mapped_address(v4)
            .error_code(420, "Unknown Attribute")
            .unknown_attributes(&[0x0003, 0x7FF0, 0x0002])
            .raw_attribute(attr::REALM, b"example.org")
            .message_integrity(PASSWORD)
            .fingerprint();
    });
    assert_eq!(b.len() % 4, 0);
    let m = parse(&b).unwrap();
    assert_eq!(m.username(), Some(&b"abcd:efg"[..]));
    assert_eq!(m.attribute(attr::SOFTWARE), Some(&b"shoal"[..]));
    assert_eq!(m.priority(), Some(0x6E00_01FF));
    assert!(m.use_candidate());
    assert_eq!(m.ice_controlling(), Some(0x932F_F9B1_5126_3B36));
    assert_eq!(m.ice_controlled(), Some(7));
    assert_eq!(m.xor_mapped_address(), Some(v4));
    assert_eq!(m.error_code(), Some((420, "Unknown Attribute")));
    let unknown: Vec<u16> = m.unknown_attributes().collect();
    assert_eq!(unknown, [0x0003, 0x7FF0, 0x0002]);
    assert_eq!(m.attribute(attr::REALM), Some(&b"example.org"[..]));
    assert!(m.has_message_integrity() && m.has_fingerprint());
    assert_eq!(m.verify_integrity(PASSWORD), Ok(()));
    assert_eq!(m.verify_integrity(b"wrong"), Err(StunError::BadIntegrity));
    assert!(m.unknown_comprehension_required().is_empty());
    // Zero padding by default (RFC 8489 §14): "abcd:efg" needs none, "shoal" three bytes.
    let software_at = HEADER_LEN + 4 + 8;
    assert_eq!(&b[software_at + 4 + 5..software_at + 4 + 8], &[0, 0, 0]);
}

#[test]
fn absent_attributes_are_none() {
    let b = build(Class::Request, BINDING, |_| {});
    let m = parse(&b).unwrap();
    assert_eq!(m.username(), None);
    assert_eq!(m.priority(), None);
    assert!(!m.use_candidate());
    assert_eq!(m.ice_controlling(), None);
    assert_eq!(m.ice_controlled(), None);
    assert_eq!(m.xor_mapped_address(), None);
    assert_eq!(m.error_code(), None);
    assert_eq!(m.unknown_attributes().count(), 0);
    assert!(!m.has_fingerprint() && !m.has_message_integrity());
    assert_eq!(
        m.verify_integrity(PASSWORD),
        Err(StunError::IntegrityMissing)
    );
    assert_eq!(
        m.verify_integrity_sha256(PASSWORD),
        Err(StunError::IntegrityMissing)
    );
}

#[test]
fn xor_mapped_address_v4_and_v6() {
    let addrs = [
        SocketAddr::from((Ipv4Addr::new(192, 0, 2, 1), 32853)),
        SocketAddr::from((Ipv4Addr::new(255, 255, 255, 255), 0)),
        SocketAddr::from((
            Ipv6Addr::new(0x2001, 0xdb8, 0x1234, 0x5678, 0x11, 0x2233, 0x4455, 0x6677),
            32853,
        )),
        SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::LOCALHOST, 65535, 0, 0)),
    ];
    for addr in addrs {
        let b = build(Class::SuccessResponse, BINDING, |w| {
            w.xor_mapped_address(addr);
        });
        let value_len = if addr.is_ipv4() { 8 } else { 20 };
        assert_eq!(b.len(), HEADER_LEN + 4 + value_len);
        assert_eq!(parse(&b).unwrap().xor_mapped_address(), Some(addr));
    }
    // X-Port is the port XOR 0x2112 (RFC 8489 §14.2): 32853 = 0x8055 -> 0xA147.
    let b = build(Class::SuccessResponse, BINDING, |w| {
        w.xor_mapped_address(addrs[0]);
    });
    assert_eq!(
        &b[24..32],
        &[0x00, 0x01, 0xA1, 0x47, 0xE1, 0x12, 0xA6, 0x43]
    );
}

#[test]
fn xor_mapped_address_with_bad_family_or_length_is_refused() {
    for value in [
        &[0, 3, 0, 0, 0, 0, 0, 0][..],
        &[0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0][..],
        &[0, 2, 0, 0, 0, 0, 0, 0][..],
        &[0, 1][..],
    ] {
        let b = build(Class::SuccessResponse, BINDING, |w| {
            w.raw_attribute(attr::XOR_MAPPED_ADDRESS, value);
        });
        let typ = attr::XOR_MAPPED_ADDRESS;
        assert_eq!(parse(&b).unwrap_err(), StunError::BadAttribute { typ });
    }
}

#[test]
fn error_code_class_and_number_ranges() {
    for code in [300, 400, 401, 420, 487, 500, 699] {
        let b = build(Class::ErrorResponse, BINDING, |w| {
            w.error_code(code, "reason");
        });
        assert_eq!(parse(&b).unwrap().error_code(), Some((code, "reason")));
    }
    // RFC 8489 §14.8: class 3-6, number 0-99; the reserved bits are ignored.
    let typ = attr::ERROR_CODE;
    for (value, ok) in [
        (&[0, 0, 2, 99][..], false),
        (&[0, 0, 7, 0][..], false),
        (&[0, 0, 4, 100][..], false),
        (&[0, 0, 4][..], false),
        (&[0, 0, 4, 1, 0xFF][..], false),
        (&[0xFF, 0xFF, 0xFC, 20][..], true),
        (&[0, 0, 6, 99][..], true),
    ] {
        let b = build(Class::ErrorResponse, BINDING, |w| {
            w.raw_attribute(typ, value);
        });
        match parse(&b) {
            Ok(m) => assert!(ok && m.error_code().is_some(), "{value:?}"),
            Err(e) => assert!(!ok && e == StunError::BadAttribute { typ }, "{value:?}"),
        }
    }
}

#[test]
#[should_panic(expected = "300-699")]
fn writer_refuses_error_code_below_300() {
    build(Class::ErrorResponse, BINDING, |w| {
        w.error_code(299, "x");
    });
}

#[test]
#[should_panic(expected = "300-699")]
fn writer_refuses_error_code_above_699() {
    build(Class::ErrorResponse, BINDING, |w| {
        w.error_code(700, "x");
    });
}

#[test]
fn fixed_size_attributes_with_wrong_length_are_refused() {
    for (typ, len) in [
        (attr::PRIORITY, 3),
        (attr::USE_CANDIDATE, 4),
        (attr::ICE_CONTROLLING, 4),
        (attr::ICE_CONTROLLED, 12),
        (attr::MESSAGE_INTEGRITY, 16),
        (attr::MESSAGE_INTEGRITY_SHA256, 12),
        (attr::MESSAGE_INTEGRITY_SHA256, 18),
        (attr::FINGERPRINT, 8),
        (attr::UNKNOWN_ATTRIBUTES, 3),
        (attr::USERNAME, 509),
    ] {
        let value = [0u8; 512];
        let b = build(Class::Request, BINDING, |w| {
            w.raw_attribute(typ, &value[..len]);
        });
        assert_eq!(parse(&b).unwrap_err(), StunError::BadAttribute { typ });
    }
}

#[test]
fn truncated_input_is_refused() {
    let b = build(Class::Request, BINDING, |w| {
        w.username(b"user").priority(1).fingerprint();
    });
    for n in 0..b.len() {
        let e = StunMessage::parse(b.slice(..n)).unwrap_err();
        assert_eq!(e, StunError::Truncated, "prefix of {n} bytes");
    }
    assert!(StunMessage::parse(b).is_ok());
}

#[test]
fn header_checks() {
    let b = build(Class::Request, BINDING, |w| {
        w.priority(1);
    });
    let mut v = b.to_vec();
    v[0] |= 0x40;
    assert_eq!(parse(&Bytes::from(v)).unwrap_err(), StunError::NotStun);
    let mut v = b.to_vec();
    v[7] ^= 1;
    assert_eq!(parse(&Bytes::from(v)).unwrap_err(), StunError::NotStun);
    let e = parse(&with_length(&b, 6)).unwrap_err();
    assert_eq!(e, StunError::BadLength { length: 6 });
    // A datagram longer than its message is not one STUN message.
    let mut v = b.to_vec();
    v.extend_from_slice(&[0; 4]);
    assert_eq!(
        parse(&Bytes::from(v)).unwrap_err(),
        StunError::BadLength { length: 8 }
    );
}

#[test]
fn attribute_running_past_the_end_is_refused() {
    let b = build(Class::Request, BINDING, |w| {
        w.priority(1).username(b"abcd");
    });
    // USERNAME claims 9 bytes: its padded end (12) passes the message end (8).
    let mut v = b.to_vec();
    v[HEADER_LEN + 8 + 3] = 9;
    let typ = attr::USERNAME;
    assert_eq!(
        parse(&Bytes::from(v)).unwrap_err(),
        StunError::AttributeOverrun { typ }
    );
    // The value itself runs past the end.
    let mut v = b.to_vec();
    v[HEADER_LEN + 8 + 2] = 1;
    assert_eq!(
        parse(&Bytes::from(v)).unwrap_err(),
        StunError::AttributeOverrun { typ }
    );
    // The header length cuts the last attribute.
    let e = StunMessage::parse(with_length(&b, 12).slice(..HEADER_LEN + 12)).unwrap_err();
    assert_eq!(e, StunError::AttributeOverrun { typ });
}

#[test]
fn fingerprint_must_be_last() {
    let b = build(Class::Request, BINDING, |w| {
        w.raw_attribute(attr::FINGERPRINT, &[0; 4]).priority(1);
    });
    // The zero CRC is wrong, so make it right for the message up to it first: the
    // mismatch would otherwise be reported before the order is checked.
    let mut v = b.to_vec();
    let crc = crc32fast::hash(&v[..HEADER_LEN]) ^ 0x5354_554E;
    v[HEADER_LEN + 4..HEADER_LEN + 8].copy_from_slice(&crc.to_be_bytes());
    assert_eq!(
        parse(&Bytes::from(v)).unwrap_err(),
        StunError::FingerprintNotLast
    );
}

#[test]
fn bad_fingerprint_is_refused() {
    let b = build(Class::Request, BINDING, |w| {
        w.username(b"user").fingerprint();
    });
    assert!(parse(&b).unwrap().has_fingerprint());
    // Type, transaction ID, a value byte, the CRC itself.
    for i in [0, 1, 9, HEADER_LEN + 5, b.len() - 1] {
        let mut v = b.to_vec();
        v[i] ^= 0x01;
        let e = parse(&Bytes::from(v)).unwrap_err();
        assert_eq!(e, StunError::BadFingerprint, "byte {i}");
    }
}

#[test]
fn attributes_after_message_integrity_are_ignored() {
    // RFC 8489 §14.5: after MESSAGE-INTEGRITY only MESSAGE-INTEGRITY-SHA256 and
    // FINGERPRINT are processed; an unknown comprehension-required type there is not
    // reported either.
    let b = build(Class::Request, BINDING, |w| {
        w.username(b"user")
            .message_integrity(PASSWORD)
            .priority(5)
            .raw_attribute(0x0003, &[1, 2, 3])
            .raw_attribute(attr::PRIORITY, &[1])
            .fingerprint();
    });
    let m = parse(&b).unwrap();
    assert_eq!(m.priority(), None);
    assert!(m.unknown_comprehension_required().is_empty());
    let kept: Vec<u16> = m.attributes().map(|(t, _)| t).collect();
    assert_eq!(
        kept,
        [attr::USERNAME, attr::MESSAGE_INTEGRITY, attr::FINGERPRINT]
    );
    // The HMAC covers only what precedes it, so it still verifies.
    assert_eq!(m.verify_integrity(PASSWORD), Ok(()));
}

#[test]
fn both_integrity_attributes_then_fingerprint() {
    let b = build(Class::Request, BINDING, |w| {
        w.username(b"user")
            .message_integrity(PASSWORD)
            .message_integrity_sha256(PASSWORD)
            .raw_attribute(attr::PRIORITY, &[9; 4])
            .fingerprint();
    });
    let m = parse(&b).unwrap();
    assert_eq!(m.verify_integrity(PASSWORD), Ok(()));
    assert_eq!(m.verify_integrity_sha256(PASSWORD), Ok(()));
    assert_eq!(
        m.verify_integrity_sha256(b"x"),
        Err(StunError::BadIntegrity)
    );
    // RFC 8489 §14.6: after MESSAGE-INTEGRITY-SHA256 only FINGERPRINT is processed.
    assert_eq!(m.priority(), None);
}

#[test]
fn truncated_sha256_integrity_verifies() {
    let b = build(Class::Request, BINDING, |w| {
        w.username(b"user").message_integrity_sha256(PASSWORD);
    });
    // Rewrite the 32-byte tag as a 16-byte one: recompute by hand over the adjusted header.
    let at = b.len() - 36;
    let mut v = b[..at].to_vec();
    v[2..4].copy_from_slice(&((at + 4 + 16 - HEADER_LEN) as u16).to_be_bytes());
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, PASSWORD);
    let tag = ring::hmac::sign(&key, &v);
    v.extend_from_slice(&[0x00, 0x1C, 0x00, 0x10]);
    v.extend_from_slice(&tag.as_ref()[..16]);
    let m = StunMessage::parse(Bytes::from(v)).unwrap();
    assert_eq!(m.verify_integrity_sha256(PASSWORD), Ok(()));
    assert_eq!(
        m.verify_integrity_sha256(b"no"),
        Err(StunError::BadIntegrity)
    );
}

#[test]
fn attribute_count_is_bounded() {
    let b = build(Class::Request, BINDING, |w| {
        for _ in 0..MAX_ATTRIBUTES {
            w.raw_attribute(attr::SOFTWARE, b"x");
        }
    });
    assert_eq!(parse(&b).unwrap().attributes().count(), MAX_ATTRIBUTES);
    let b = build(Class::Request, BINDING, |w| {
        for _ in 0..=MAX_ATTRIBUTES {
            w.use_candidate();
        }
    });
    assert_eq!(parse(&b).unwrap_err(), StunError::TooManyAttributes);
}

#[test]
fn unknown_comprehension_required_types() {
    let b = build(Class::Request, BINDING, |w| {
        w.raw_attribute(0x0003, &[0; 4])
            .raw_attribute(0xC057, &[0; 4]) // comprehension-optional: not reported
            .username(b"u")
            .raw_attribute(0x7FFF, &[])
            .raw_attribute(0x0003, &[]); // reported once
    });
    let m = parse(&b).unwrap();
    assert_eq!(m.unknown_comprehension_required(), &[0x0003, 0x7FFF]);
    // At most MAX_UNKNOWN are kept.
    let b = build(Class::Request, BINDING, |w| {
        for t in 0x0100..0x0100 + 20 {
            w.raw_attribute(t, &[]);
        }
    });
    let m = parse(&b).unwrap();
    let want: Vec<u16> = (0x0100..0x0100 + MAX_UNKNOWN as u16).collect();
    assert_eq!(m.unknown_comprehension_required(), &want[..]);
}

#[test]
fn first_occurrence_wins() {
    let b = build(Class::Request, BINDING, |w| {
        w.priority(1).priority(2);
    });
    assert_eq!(parse(&b).unwrap().priority(), Some(1));
}

#[test]
fn writer_appends_after_existing_bytes() {
    let mut buf = BytesMut::from(&b"prefix"[..]);
    let mut w = StunWriter::new(&mut buf, Class::Request, BINDING, TID);
    w.username(b"abc").message_integrity(PASSWORD).fingerprint();
    let n = w.finish();
    assert_eq!(buf.len(), 6 + n);
    let m = StunMessage::parse(buf.freeze().slice(6..)).unwrap();
    assert_eq!(m.username(), Some(&b"abc"[..]));
    assert_eq!(m.verify_integrity(PASSWORD), Ok(()));
}

#[test]
#[should_panic(expected = "FINGERPRINT must be the last")]
fn writer_refuses_attribute_after_fingerprint() {
    build(Class::Request, BINDING, |w| {
        w.fingerprint().priority(1);
    });
}

#[test]
fn padding_byte_is_used_for_padding() {
    let b = build(Class::Request, BINDING, |w| {
        w.padding_byte(0x20).username(b"abcde");
    });
    assert_eq!(&b[HEADER_LEN + 4..], b"abcde   ");
    assert_eq!(parse(&b).unwrap().username(), Some(&b"abcde"[..]));
}

#[test]
fn looks_like_stun_peeks_the_header() {
    let b = build(Class::Request, BINDING, |_| {});
    assert!(looks_like_stun(&b));
    assert!(!looks_like_stun(&b[..19]));
    assert!(!looks_like_stun(&[]));
    let mut v = b.to_vec();
    v[0] = 0x80; // RTP/RTCP (RFC 7983)
    assert!(!looks_like_stun(&v));
    let mut v = b.to_vec();
    v[5] = 0;
    assert!(!looks_like_stun(&v));
}

#[test]
fn every_single_byte_corruption_is_handled() {
    // Not a proof, but a cheap sweep: no corruption of any byte may panic, and any that
    // parses must still be internally consistent.
    let b = build(Class::Request, BINDING, |w| {
        w.username(b"abcd:efgh")
            .priority(7)
            .ice_controlling(9)
            .use_candidate()
            .message_integrity(PASSWORD)
            .fingerprint();
    });
    for i in 0..b.len() {
        for x in [0x01, 0x80, 0xFF] {
            let mut v = b.to_vec();
            v[i] ^= x;
            if let Ok(m) = StunMessage::parse(Bytes::from(v)) {
                let _ = m.verify_integrity(PASSWORD);
                let _ = (
                    m.username(),
                    m.priority(),
                    m.error_code(),
                    m.xor_mapped_address(),
                );
            }
        }
    }
}
