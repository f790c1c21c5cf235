//! Reassembly: fragments, ordering, FORWARD TSN, limits, resets.

use bytes::Bytes;

use super::chunk;
use crate::sctp::num::{Ppid, Ssn, StreamId, Tsn};
use crate::sctp::rx::{Message, Reassembly, ReassemblyError, ReassemblyLimits, ResetProgress};

fn reassembly() -> Reassembly {
    Reassembly::new(ReassemblyLimits::default())
}

fn drain(r: &mut Reassembly) -> Vec<Message> {
    std::iter::from_fn(|| r.pop_message()).collect()
}

fn payloads(messages: &[Message]) -> Vec<&[u8]> {
    messages.iter().map(|m| &m.payload[..]).collect()
}

#[test]
fn a_message_in_one_chunk_is_delivered_without_a_copy() {
    let mut r = reassembly();
    let mut c = chunk(1, 3, 0, "BE", b"hello");
    c.ppid = Ppid::STRING;
    let data = c.payload.clone();
    r.add(c).unwrap();
    assert_eq!(r.buffered_bytes(), 5);
    let m = r.pop_message().unwrap();
    assert_eq!(m.payload.as_ptr(), data.as_ptr());
    assert_eq!(
        (m.stream, m.ppid, m.unordered),
        (StreamId(3), Ppid::STRING, false)
    );
    assert_eq!((r.buffered_bytes(), r.buffered_chunks()), (0, 0));
}

#[test]
fn fragments_join_in_any_arrival_order() {
    let parts: [&[u8]; 4] = [b"ab", b"cde", b"f", b"ghij"];
    let flags = ["B", "", "", "E"];
    for order in [[0, 1, 2, 3], [3, 2, 1, 0], [1, 3, 0, 2], [2, 0, 3, 1]] {
        let mut r = reassembly();
        for (n, &i) in order.iter().enumerate() {
            let mut c = chunk(10 + i as u32, 1, 0, flags[i], parts[i]);
            c.ppid = Ppid(1000 + i as u32);
            r.add(c).unwrap();
            if n < 3 {
                assert!(r.pop_message().is_none(), "order {order:?}");
            }
        }
        assert_eq!(r.buffered_chunks(), 1);
        let m = r.pop_message().unwrap();
        assert_eq!(&m.payload[..], b"abcdefghij", "order {order:?}");
        assert_eq!(m.ppid, Ppid(1000), "the PPID of the B fragment");
        assert_eq!((r.buffered_bytes(), r.buffered_chunks()), (0, 0));
    }
}

#[test]
fn ordered_messages_come_out_in_ssn_order_per_stream() {
    let mut r = reassembly();
    r.add(chunk(3, 1, 2, "BE", b"s1-2")).unwrap();
    r.add(chunk(2, 1, 1, "BE", b"s1-1")).unwrap();
    r.add(chunk(4, 2, 0, "BE", b"s2-0")).unwrap();
    assert_eq!(payloads(&drain(&mut r)), [b"s2-0"]);
    r.add(chunk(1, 1, 0, "BE", b"s1-0")).unwrap();
    assert_eq!(payloads(&drain(&mut r)), [b"s1-0", b"s1-1", b"s1-2"]);
}

#[test]
fn ssns_wrap_around_u16_max() {
    let mut r = reassembly();
    // Skip stream 4 up to SSN 65532 (as FORWARD TSNs would), so 65533 is next. Each
    // skip moves less than half the SSN space, or it would read as behind.
    for ssn in [20_000, 40_000, 60_000, 65_532] {
        r.handle_forward_tsn(Tsn(0), &[(StreamId(4), Ssn(ssn))]);
    }
    r.add(chunk(3, 4, 65_535, "BE", b"c")).unwrap();
    r.add(chunk(4, 4, 0, "BE", b"d")).unwrap();
    r.add(chunk(2, 4, 65_534, "BE", b"b")).unwrap();
    assert!(r.pop_message().is_none());
    r.add(chunk(1, 4, 65_533, "BE", b"a")).unwrap();
    assert_eq!(payloads(&drain(&mut r)), [b"a", b"b", b"c", b"d"]);
    r.add(chunk(5, 4, 1, "BE", b"e")).unwrap();
    assert_eq!(payloads(&drain(&mut r)), [b"e"]);
}

#[test]
fn unordered_messages_pass_a_blocked_ordered_stream() {
    let mut r = reassembly();
    r.add(chunk(2, 1, 1, "BE", b"ordered-1")).unwrap();
    r.add(chunk(3, 1, 9, "UBE", b"u-single")).unwrap();
    r.add(chunk(5, 1, 0, "UE", b"-tail")).unwrap();
    r.add(chunk(4, 1, 0, "UB", b"u-head")).unwrap();
    let out = drain(&mut r);
    assert_eq!(payloads(&out), [&b"u-single"[..], b"u-head-tail"]);
    assert!(out.iter().all(|m| m.unordered));
    r.add(chunk(1, 1, 0, "BE", b"ordered-0")).unwrap();
    assert_eq!(payloads(&drain(&mut r)), [b"ordered-0", b"ordered-1"]);
}

#[test]
fn fragmented_messages_of_several_streams_arrive_interleaved() {
    // Stream 1: SSN 0 at TSNs 1-3, SSN 1 at 7-8. Stream 2: SSN 0 at 4-6.
    // Unordered on stream 3 at 9-10.
    let chunks = [
        chunk(6, 2, 0, "E", b"22"),
        chunk(9, 3, 0, "UB", b"u1"),
        chunk(2, 1, 0, "", b"1b"),
        chunk(8, 1, 1, "E", b"1e"),
        chunk(4, 2, 0, "B", b"20"),
        chunk(7, 1, 1, "B", b"1d"),
        chunk(10, 3, 0, "UE", b"u2"),
        chunk(5, 2, 0, "", b"21"),
        chunk(3, 1, 0, "E", b"1c"),
        chunk(1, 1, 0, "B", b"1a"),
    ];
    let mut r = reassembly();
    let mut out = Vec::new();
    for c in chunks {
        r.add(c).unwrap();
        out.extend(drain(&mut r));
    }
    let got: Vec<(u16, &[u8])> = out.iter().map(|m| (m.stream.0, &m.payload[..])).collect();
    assert_eq!(
        got,
        [
            (3, &b"u1u2"[..]),
            (2, b"202122"),
            (1, b"1a1b1c"),
            (1, b"1d1e"),
        ]
    );
    assert_eq!((r.buffered_bytes(), r.buffered_chunks()), (0, 0));
}

#[test]
fn forward_tsn_drops_a_partial_message_and_releases_what_waited() {
    let mut r = reassembly();
    // SSN 0 at TSNs 1-3 (3 lost, then abandoned); SSN 1 at TSN 4 waits for it.
    r.add(chunk(1, 7, 0, "B", b"xx")).unwrap();
    r.add(chunk(2, 7, 0, "", b"yy")).unwrap();
    r.add(chunk(4, 7, 1, "BE", b"next")).unwrap();
    // An unordered partial message too, and one above the new point that stays.
    r.add(chunk(5, 7, 0, "UB", b"u")).unwrap();
    r.add(chunk(8, 7, 2, "B", b"later")).unwrap();
    assert!(r.pop_message().is_none());
    assert_eq!(r.buffered_bytes(), 2 + 2 + 4 + 1 + 5);
    r.handle_forward_tsn(Tsn(6), &[(StreamId(7), Ssn(0))]);
    assert_eq!(payloads(&drain(&mut r)), [b"next"]);
    assert_eq!(r.buffered_bytes(), 5);
    assert_eq!(r.discarded_bytes(), 5);
    r.add(chunk(9, 7, 2, "E", b"!")).unwrap();
    assert_eq!(payloads(&drain(&mut r)), [b"later!"]);
    assert_eq!(
        r.add(chunk(6, 7, 0, "BE", b"late")),
        Err(ReassemblyError::BehindCumulative { tsn: Tsn(6) })
    );
}

#[test]
fn forward_tsn_delivers_stranded_messages_in_order() {
    let mut r = reassembly();
    // SSNs 0 and 3 lost and abandoned; 1, 2, 4 arrived.
    r.add(chunk(2, 1, 1, "BE", b"1")).unwrap();
    r.add(chunk(3, 1, 2, "BE", b"2")).unwrap();
    r.add(chunk(5, 1, 4, "BE", b"4")).unwrap();
    r.handle_forward_tsn(Tsn(4), &[(StreamId(1), Ssn(3))]);
    assert_eq!(payloads(&drain(&mut r)), [b"1", b"2", b"4"]);
    // A repeated FORWARD TSN does nothing more.
    r.handle_forward_tsn(Tsn(4), &[(StreamId(1), Ssn(3))]);
    assert!(r.pop_message().is_none());
    r.add(chunk(6, 1, 5, "BE", b"5")).unwrap();
    assert_eq!(payloads(&drain(&mut r)), [b"5"]);
}

#[test]
fn fragments_orphaned_by_a_forward_tsn_are_dropped() {
    let mut r = reassembly();
    // A message at TSNs 10-14; the sender abandons it, FORWARD TSN to 14 reaches us
    // before its fragments 12 and 13 (the network reordered them).
    r.add(chunk(10, 1, 0, "B", b"a")).unwrap();
    r.handle_forward_tsn(Tsn(11), &[]);
    assert_eq!(r.buffered_bytes(), 0);
    // 13 then 12: a run without its start, which lies behind the forward point.
    r.add(chunk(13, 1, 0, "", b"d")).unwrap();
    assert_eq!(r.buffered_bytes(), 1);
    r.add(chunk(12, 1, 0, "", b"c")).unwrap();
    assert_eq!((r.buffered_bytes(), r.buffered_chunks()), (0, 0));
    assert_eq!(r.discarded_bytes(), 3);
}

#[test]
fn forward_tsn_over_a_long_span_and_over_many_runs() {
    let mut r = reassembly();
    // Many partial runs, then a FORWARD TSN far ahead (scans the runs), then one
    // just ahead (probes TSNs).
    for i in 0..100u32 {
        r.add(chunk(10 + 3 * i, 1, i as u16, "B", b"x")).unwrap();
    }
    r.handle_forward_tsn(Tsn(150), &[]);
    assert_eq!(r.buffered_chunks(), 53);
    r.handle_forward_tsn(Tsn(1_000_000), &[]);
    assert_eq!(r.buffered_chunks(), 0);
    r.add(chunk(1_000_001, 1, 0, "UB", b"y")).unwrap();
    r.add(chunk(1_000_004, 1, 0, "UB", b"z")).unwrap();
    r.handle_forward_tsn(Tsn(1_000_002), &[]);
    assert_eq!(r.buffered_chunks(), 1);
}

#[test]
fn the_receive_window_bounds_what_is_held() {
    let limits = ReassemblyLimits {
        receive_window_bytes: 1000,
        max_message_bytes: 400,
        ..ReassemblyLimits::default()
    };
    let mut r = Reassembly::new(limits);
    let big = [7u8; 300];
    // Out-of-order data keeps the reserve (min(400, 500) bytes) free.
    assert!(r.has_room(300, false));
    r.add(chunk(2, 1, 1, "BE", &big)).unwrap();
    r.add(chunk(3, 1, 2, "BE", &big)).unwrap();
    assert!(!r.has_room(1, false));
    assert!(r.has_room(400, true));
    r.add(chunk(4, 1, 3, "BE", &big)).unwrap();
    assert_eq!(r.buffered_bytes(), 900);
    assert_eq!(
        r.add(chunk(5, 1, 4, "BE", &big)),
        Err(ReassemblyError::WindowFull { tsn: Tsn(5) })
    );
    assert_eq!(r.buffered_bytes(), 900);
    r.add(chunk(1, 1, 0, "BE", &big[..100])).unwrap();
    assert_eq!(r.buffered_bytes(), 1000);
    assert_eq!(drain(&mut r).len(), 4);
    assert_eq!(r.buffered_bytes(), 0);
    assert!(r.has_room(600, false));
}

#[test]
fn the_chunk_count_is_bounded_too() {
    let limits = ReassemblyLimits {
        max_buffered_chunks: 8,
        ..ReassemblyLimits::default()
    };
    let mut r = Reassembly::new(limits);
    for tsn in 1..=8 {
        r.add(chunk(tsn, 1, 0, "UB", b"1")).unwrap();
    }
    assert!(!r.has_room(1, true));
    assert_eq!(
        r.add(chunk(9, 1, 0, "UB", b"1")),
        Err(ReassemblyError::WindowFull { tsn: Tsn(9) })
    );
}

#[test]
fn an_oversize_message_is_an_error_naming_its_stream() {
    let limits = ReassemblyLimits {
        max_message_bytes: 10,
        ..ReassemblyLimits::default()
    };
    let mut r = Reassembly::new(limits);
    assert_eq!(
        r.add(chunk(1, 5, 0, "BE", &[0; 11])),
        Err(ReassemblyError::MessageTooLarge {
            stream: StreamId(5),
            bytes: 11
        })
    );
    r.add(chunk(2, 6, 0, "B", &[0; 4])).unwrap();
    r.add(chunk(4, 6, 0, "", &[0; 4])).unwrap();
    assert_eq!(
        r.add(chunk(3, 6, 0, "", &[0; 3])),
        Err(ReassemblyError::MessageTooLarge {
            stream: StreamId(6),
            bytes: 11
        })
    );
    assert_eq!(
        r.buffered_bytes(),
        8,
        "a refused chunk leaves nothing behind"
    );
}

#[test]
fn malformed_chunks_are_typed_errors() {
    let mut r = reassembly();
    assert_eq!(
        r.add(chunk(1, 1, 0, "BE", b"")),
        Err(ReassemblyError::NoUserData { tsn: Tsn(1) })
    );
    let few = ReassemblyLimits {
        inbound_streams: 4,
        ..ReassemblyLimits::default()
    };
    assert_eq!(
        Reassembly::new(few).add(chunk(1, 4, 0, "BE", b"x")),
        Err(ReassemblyError::InvalidStream {
            stream: StreamId(4)
        })
    );
    // The middle fragment of a stream-1 message claims stream 2.
    r.add(chunk(1, 1, 0, "B", b"a")).unwrap();
    r.add(chunk(3, 1, 0, "E", b"c")).unwrap();
    assert_eq!(
        r.add(chunk(2, 2, 0, "", b"b")),
        Err(ReassemblyError::InconsistentFragments { tsn: Tsn(2) })
    );
    assert_eq!(
        r.add(chunk(2, 1, 1, "", b"b")),
        Err(ReassemblyError::InconsistentFragments { tsn: Tsn(2) })
    );
    assert_eq!(
        r.add(chunk(2, 1, 0, "U", b"b")),
        Err(ReassemblyError::InconsistentFragments { tsn: Tsn(2) })
    );
    assert_eq!(
        r.add(chunk(1, 1, 0, "B", b"a")),
        Err(ReassemblyError::AlreadyBuffered { tsn: Tsn(1) })
    );
    r.add(chunk(2, 1, 0, "", b"b")).unwrap();
    assert_eq!(payloads(&drain(&mut r)), [b"abc"]);
    // Two messages with one SSN.
    r.add(chunk(10, 1, 5, "BE", b"first")).unwrap();
    assert_eq!(
        r.add(chunk(11, 1, 5, "BE", b"second")),
        Err(ReassemblyError::DuplicateSsn {
            stream: StreamId(1),
            ssn: Ssn(5)
        })
    );
    assert_eq!(r.buffered_bytes(), 5);
}

#[test]
fn a_message_for_an_ssn_already_passed_is_dropped() {
    let mut r = reassembly();
    r.add(chunk(1, 1, 0, "BE", b"zero")).unwrap();
    r.add(chunk(2, 1, 0, "BE", b"again")).unwrap();
    assert_eq!(payloads(&drain(&mut r)), [b"zero"]);
    assert_eq!((r.buffered_bytes(), r.discarded_bytes()), (0, 5));
}

#[test]
fn a_reset_stream_starts_again_at_ssn_zero() {
    let mut r = reassembly();
    r.add(chunk(1, 1, 0, "BE", b"a")).unwrap();
    r.add(chunk(2, 2, 0, "BE", b"b")).unwrap();
    drain(&mut r);
    assert_eq!(
        r.reset_streams(&[StreamId(1)], Tsn(2), Tsn(2)),
        Ok(ResetProgress::Performed)
    );
    r.add(chunk(3, 1, 0, "BE", b"new-0")).unwrap();
    r.add(chunk(4, 2, 0, "BE", b"stale")).unwrap();
    assert_eq!(payloads(&drain(&mut r)), [b"new-0"]);
    // Streams that were not negotiated are ignored, not taken for "all".
    let few = ReassemblyLimits {
        inbound_streams: 4,
        ..ReassemblyLimits::default()
    };
    let mut r = Reassembly::new(few);
    r.add(chunk(1, 1, 0, "BE", b"a")).unwrap();
    drain(&mut r);
    assert_eq!(
        r.reset_streams(&[StreamId(9)], Tsn(1), Tsn(1)),
        Ok(ResetProgress::Performed)
    );
    r.add(chunk(2, 1, 0, "BE", b"stale")).unwrap();
    assert!(r.pop_message().is_none());
}

#[test]
fn a_reset_waits_for_the_senders_last_tsn() {
    let mut r = reassembly();
    // Stream 1 had SSNs 0 (TSN 1, delivered) and 1 (TSN 2, delayed in the network);
    // the peer reset it after TSN 2, then sent SSN 0 again at TSN 3.
    r.add(chunk(1, 1, 0, "BE", b"old-0")).unwrap();
    drain(&mut r);
    assert_eq!(
        r.reset_streams(&[StreamId(1)], Tsn(2), Tsn(1)),
        Ok(ResetProgress::Deferred)
    );
    assert_eq!(
        r.reset_streams(&[StreamId(2)], Tsn(2), Tsn(1)),
        Err(ReassemblyError::ResetInProgress)
    );
    r.add(chunk(3, 1, 0, "BE", b"new-0")).unwrap();
    r.add(chunk(4, 2, 0, "BE", b"other")).unwrap();
    assert_eq!(payloads(&drain(&mut r)), [b"other"]);
    assert!(!r.on_cumulative_tsn(Tsn(1)));
    r.add(chunk(2, 1, 1, "BE", b"old-1")).unwrap();
    assert_eq!(payloads(&drain(&mut r)), [b"old-1"]);
    assert!(r.on_cumulative_tsn(Tsn(4)));
    assert!(r.take_reset_performed());
    assert!(!r.take_reset_performed());
    assert_eq!(payloads(&drain(&mut r)), [b"new-0"]);
    assert_eq!(r.buffered_bytes(), 0);
}

#[test]
fn a_reset_of_all_streams_covers_streams_first_seen_later() {
    let mut r = reassembly();
    r.add(chunk(1, 1, 0, "BE", b"a")).unwrap();
    drain(&mut r);
    assert_eq!(
        r.reset_streams(&[], Tsn(3), Tsn(1)),
        Ok(ResetProgress::Deferred)
    );
    // Stream 5's old SSN 0 at TSN 2, and its new SSN 0 at TSN 4, arrive reversed.
    r.add(chunk(4, 5, 0, "BE", b"5-new")).unwrap();
    r.add(chunk(5, 1, 0, "BE", b"1-new")).unwrap();
    r.add(chunk(2, 5, 0, "BE", b"5-old")).unwrap();
    assert_eq!(payloads(&drain(&mut r)), [b"5-old"]);
    r.handle_forward_tsn(Tsn(3), &[]);
    assert!(r.take_reset_performed());
    assert_eq!(payloads(&drain(&mut r)), [b"1-new", b"5-new"]);
}

#[test]
fn payload_bytes_are_kept_exactly() {
    let mut r = reassembly();
    let data: Vec<u8> = (0..=255u8).cycle().take(5000).collect();
    let pieces: Vec<&[u8]> = data.chunks(1200).collect();
    let n = pieces.len();
    for (i, piece) in pieces.iter().enumerate().rev() {
        let flags = match (i == 0, i + 1 == n) {
            (true, _) => "B",
            (_, true) => "E",
            _ => "",
        };
        r.add(chunk(100 + i as u32, 0, 0, flags, piece)).unwrap();
    }
    let m = r.pop_message().unwrap();
    assert_eq!(m.payload, Bytes::from(data));
}
