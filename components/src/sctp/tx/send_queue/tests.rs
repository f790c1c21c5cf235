use std::time::Duration;

use super::*;

const T0: Time = Time::ZERO;

fn msg(len: usize) -> OutgoingMessage {
    OutgoingMessage {
        ppid: Ppid::BINARY,
        payload: Bytes::from((0..len).map(|i| i as u8).collect::<Vec<u8>>()),
        unordered: false,
        policy: Reliability::Reliable,
    }
}

fn unordered(len: usize) -> OutgoingMessage {
    OutgoingMessage {
        unordered: true,
        ..msg(len)
    }
}

fn queue() -> SendQueue {
    SendQueue::new(SendQueueConfig {
        outbound_streams: 16,
        max_message_size: 1000,
        max_buffered_total: 3000,
        max_buffered_per_stream: 2000,
        max_queued_messages: 8,
        default_low_watermark: 0,
        total_low_watermark: 0,
    })
}

#[test]
fn fragments_into_begin_middle_end_zero_copy() {
    // RFC 9260 §6.9: B/E bits 10, 00, 01, all fragments with the same SSN.
    let mut q = queue();
    let m = msg(250);
    let original = m.payload.clone();
    q.send(T0, StreamId(1), m).unwrap();
    let a = q.produce(T0, 100).unwrap();
    let b = q.produce(T0, 100).unwrap();
    let c = q.produce(T0, 100).unwrap();
    assert!(q.produce(T0, 100).is_none());
    assert_eq!((a.begin, a.end), (true, false));
    assert_eq!((b.begin, b.end), (false, false));
    assert_eq!((c.begin, c.end), (false, true));
    assert_eq!(
        (a.payload.len(), b.payload.len(), c.payload.len()),
        (100, 100, 50)
    );
    assert_eq!(a.ssn, b.ssn);
    assert_eq!(b.ssn, c.ssn);
    assert_eq!(a.message_id, c.message_id);
    // Zero-copy: each payload points into the original message.
    assert_eq!(a.payload.as_ptr(), original.as_ptr());
    assert_eq!(b.payload.as_ptr(), original[100..].as_ptr());
    assert_eq!(c.payload.as_ptr(), original[200..].as_ptr());
    assert_eq!(
        [&a.payload[..], &b.payload[..], &c.payload[..]].concat(),
        original
    );
}

#[test]
fn ssn_taken_by_ordered_messages_only() {
    // RFC 9260 §6.6/§6.9: ordered messages take consecutive SSNs at their first
    // fragment; unordered ones take none.
    let mut q = queue();
    q.send(T0, StreamId(0), msg(10)).unwrap();
    q.send(T0, StreamId(0), unordered(10)).unwrap();
    q.send(T0, StreamId(0), msg(10)).unwrap();
    let a = q.produce(T0, 100).unwrap();
    let b = q.produce(T0, 100).unwrap();
    let c = q.produce(T0, 100).unwrap();
    assert_eq!((a.ssn, a.unordered), (Ssn(0), false));
    assert!(b.unordered);
    assert_eq!(c.ssn, Ssn(1));
    assert_eq!(q.next_ssn(StreamId(0)), Ssn(2));
}

#[test]
fn round_robin_between_streams_message_by_message() {
    // Fairness: each stream with data gets a turn of one message, in rotation.
    let mut q = queue();
    for _ in 0..2 {
        for s in [3u16, 1, 2] {
            q.send(T0, StreamId(s), msg(10)).unwrap();
        }
    }
    let order: Vec<u16> = std::iter::from_fn(|| q.produce(T0, 100))
        .map(|c| c.stream.0)
        .collect();
    assert_eq!(order, [3, 1, 2, 3, 1, 2]);
}

#[test]
fn stream_keeps_turn_until_its_message_ends() {
    // RFC 9260 §6.9: fragments of a message take consecutive TSNs, so no other stream's
    // chunk may come between them.
    let mut q = queue();
    q.send(T0, StreamId(1), msg(30)).unwrap();
    q.send(T0, StreamId(2), msg(30)).unwrap();
    let streams: Vec<(u16, bool)> = std::iter::from_fn(|| q.produce(T0, 12))
        .map(|c| (c.stream.0, c.end))
        .collect();
    assert_eq!(
        streams,
        [
            (1, false),
            (1, false),
            (1, true),
            (2, false),
            (2, false),
            (2, true)
        ]
    );
}

#[test]
fn back_pressure_and_limits() {
    // No RFC sets these: DESIGN.md bounds every association's memory by configuration.
    // Empty messages: RFC 9260 §6.2 "An endpoint SHOULD NOT send a DATA chunk with no user
    // data part"; stream ids at or above the outbound stream count are not open (§5.1.1).
    let mut q = queue();
    assert_eq!(q.send(T0, StreamId(0), msg(0)), Err(SendError::Empty));
    assert_eq!(q.send(T0, StreamId(0), msg(1001)), Err(SendError::TooLarge));
    assert_eq!(
        q.send(T0, StreamId(16), msg(1)),
        Err(SendError::StreamClosed)
    );
    // Per-stream high watermark (2000).
    q.send(T0, StreamId(0), msg(1000)).unwrap();
    q.send(T0, StreamId(0), msg(1000)).unwrap();
    assert_eq!(q.send(T0, StreamId(0), msg(1)), Err(SendError::WouldBlock));
    // Total limit (3000).
    q.send(T0, StreamId(1), msg(1000)).unwrap();
    assert_eq!(q.send(T0, StreamId(2), msg(1)), Err(SendError::WouldBlock));
    assert_eq!(q.total_buffered_amount(), 3000);
    // Sending frees room.
    q.produce(T0, 1000).unwrap();
    q.send(T0, StreamId(2), msg(1000)).unwrap();
    // Message count limit (8) holds even for tiny messages.
    let mut q = queue();
    for _ in 0..8 {
        q.send(T0, StreamId(3), msg(1)).unwrap();
    }
    assert_eq!(q.send(T0, StreamId(4), msg(1)), Err(SendError::WouldBlock));
    assert_eq!(q.queued_messages(), 8);
}

#[test]
fn buffered_amount_and_low_watermark_events() {
    // WebRTC's bufferedamountlow (RFC 8831 leaves the API to W3C): raised when the amount
    // falls from above the threshold to at or below it, never while filling.
    let mut q = queue();
    let mut events = Vec::new();
    q.set_low_watermark(StreamId(5), 50);
    q.send(T0, StreamId(5), msg(100)).unwrap();
    q.send(T0, StreamId(6), msg(10)).unwrap();
    assert_eq!(q.buffered_amount(StreamId(5)), 100);
    q.take_low_watermark_events(&mut events);
    assert!(events.is_empty(), "filling up raises no event");
    // Stream 5 has the turn: 40 bytes out leaves 60, still above 50.
    q.produce(T0, 40).unwrap();
    q.take_low_watermark_events(&mut events);
    assert!(events.is_empty());
    // 60 -> 20: crosses 50 once.
    q.produce(T0, 40).unwrap();
    q.produce(T0, 40).unwrap();
    assert_eq!(q.buffered_amount(StreamId(5)), 0);
    // Stream 6 (threshold 0) crosses when it empties.
    q.produce(T0, 40).unwrap();
    q.take_low_watermark_events(&mut events);
    assert_eq!(events, [StreamId(5), StreamId(6)]);
    assert!(q.take_total_low_watermark_event());
    assert!(!q.take_total_low_watermark_event());
    // Refilling and draining again raises it again.
    events.clear();
    q.send(T0, StreamId(6), msg(10)).unwrap();
    q.produce(T0, 40).unwrap();
    q.take_low_watermark_events(&mut events);
    assert_eq!(events, [StreamId(6)]);
}

#[test]
fn lifetime_expired_before_first_byte_is_discarded_and_counted() {
    // RFC 3758 §4.1 TR3: an expired message gets no TSN; the next one goes instead.
    let mut q = queue();
    let mut m = msg(10);
    m.policy = Reliability::MaxLifetime(Duration::from_millis(100));
    q.send(T0, StreamId(1), m).unwrap();
    q.send(T0, StreamId(1), msg(20)).unwrap();
    let later = Time::from_millis(100);
    let c = q.produce(later, 100).unwrap();
    assert_eq!(c.payload.len(), 20);
    assert_eq!(c.ssn, Ssn(0), "the expired message took no SSN");
    assert_eq!(q.stats().expired_unsent, 1);
    assert_eq!(q.total_buffered_amount(), 0);
    // A message already started is handed out even when it expires meanwhile: its
    // fragments hold TSNs, so the retransmission queue abandons it (TR4).
    let mut m = msg(20);
    m.policy = Reliability::MaxLifetime(Duration::from_millis(100));
    q.send(later, StreamId(1), m).unwrap();
    let first = q.produce(later, 12).unwrap();
    let rest = q.produce(Time::from_millis(500), 12).unwrap();
    assert!(first.begin && rest.end);
    assert!(rest.is_expired(Time::from_millis(500)));
}

#[test]
fn expired_messages_do_not_cost_their_stream_its_turn() {
    // Round-robin gives each stream one message per turn; a message dropped unsent
    // (RFC 3758 §4.1 TR3) is not a message sent, so the stream goes on to its next.
    let mut q = queue();
    for _ in 0..3 {
        let mut m = msg(10);
        m.policy = Reliability::MaxLifetime(Duration::from_millis(100));
        q.send(T0, StreamId(1), m).unwrap();
    }
    let later = Time::from_millis(100);
    q.send(later, StreamId(1), msg(20)).unwrap();
    q.send(later, StreamId(2), msg(30)).unwrap();
    let first = q.produce(later, 100).unwrap();
    assert_eq!((first.stream, first.payload.len()), (StreamId(1), 20));
    let second = q.produce(later, 100).unwrap();
    assert_eq!((second.stream, second.payload.len()), (StreamId(2), 30));
    assert_eq!(q.stats().expired_unsent, 3);
    assert!(!q.has_data());
}

#[test]
fn discard_message_drops_the_rest_of_a_started_message() {
    // RFC 3758 §3.5 A3: when a message is abandoned in flight, its unsent fragments go too.
    let mut q = queue();
    q.send(T0, StreamId(1), msg(30)).unwrap();
    q.send(T0, StreamId(1), msg(5)).unwrap();
    q.send(T0, StreamId(2), msg(5)).unwrap();
    let first = q.produce(T0, 10).unwrap();
    assert!(q.discard_message(StreamId(1), first.message_id));
    assert!(!q.discard_message(StreamId(1), first.message_id));
    assert_eq!(q.buffered_amount(StreamId(1)), 5);
    assert_eq!(q.stats().discarded, 1);
    // The turn passed on: stream 2, then stream 1's next message (SSN 1).
    let next = q.produce(T0, 10).unwrap();
    assert_eq!(next.stream, StreamId(2));
    let last = q.produce(T0, 10).unwrap();
    assert_eq!(
        (last.stream, last.ssn, last.begin),
        (StreamId(1), Ssn(1), true)
    );
    assert!(q.produce(T0, 10).is_none());
    assert!(!q.has_data());
}

#[test]
fn stream_reset_drains_then_resets_ssn() {
    // RFC 6525 §5.1.2 A1: no new data on a stream being reset; its SSN starts at 0
    // again once the peer performed the reset.
    let mut q = queue();
    let mut ready = Vec::new();
    q.send(T0, StreamId(1), msg(10)).unwrap();
    q.produce(T0, 100).unwrap();
    q.send(T0, StreamId(1), msg(10)).unwrap();
    q.prepare_reset(&[StreamId(1), StreamId(2), StreamId(99)]);
    assert_eq!(q.send(T0, StreamId(1), msg(1)), Err(SendError::Resetting));
    assert_eq!(q.send(T0, StreamId(2), msg(1)), Err(SendError::Resetting));
    q.take_streams_ready_to_reset(&mut ready);
    assert_eq!(ready, [StreamId(2)], "stream 1 still has queued data");
    // The queued message still goes out, with SSN 1.
    assert_eq!(q.produce(T0, 100).unwrap().ssn, Ssn(1));
    ready.clear();
    q.take_streams_ready_to_reset(&mut ready);
    assert_eq!(ready, [StreamId(1)]);
    assert_eq!(q.send(T0, StreamId(1), msg(1)), Err(SendError::Resetting));
    q.commit_reset(&[StreamId(1)]);
    q.rollback_reset(&[StreamId(2)]);
    q.send(T0, StreamId(1), msg(1)).unwrap();
    assert_eq!(q.produce(T0, 100).unwrap().ssn, Ssn(0));
    q.send(T0, StreamId(2), msg(1)).unwrap();
    assert_eq!(q.produce(T0, 100).unwrap().ssn, Ssn(0));
}

#[test]
fn zero_room_produces_nothing() {
    // RFC 9260 §6.2: no DATA chunk without user data, so no room means no chunk.
    let mut q = queue();
    q.send(T0, StreamId(0), msg(10)).unwrap();
    assert!(q.produce(T0, 0).is_none());
    assert!(q.produce(T0, 3).is_none(), "not one whole padded word");
    assert_eq!(q.buffered_amount(StreamId(0)), 10);
    // §3.2 padding: 10 bytes padded are 12, which does not fit 10; 8 do.
    assert_eq!(q.produce(T0, 10).unwrap().payload.len(), 8);
    assert!(q.produce(T0, 2).is_none());
    assert_eq!(q.produce(T0, 4).unwrap().payload.len(), 2);
}

#[test]
#[should_panic(expected = "invalid SendQueueConfig")]
fn config_must_fit_a_message_in_the_buffers() {
    // A configuration error (TigerBeetle style: assert programmer errors).
    SendQueue::new(SendQueueConfig {
        max_message_size: 10,
        max_buffered_per_stream: 5,
        ..SendQueueConfig::default()
    });
}
