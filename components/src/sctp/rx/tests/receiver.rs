//! The tracker and reassembly driven together.

use super::chunk;
use crate::sctp::chunk::GapAckBlock;
use crate::sctp::num::{Ssn, StreamId, Tsn};
use crate::sctp::rx::{
    AckUrgency, DataOutcome, DropReason, ForwardTsnOutcome, ReassemblyError, ReassemblyLimits,
    Receiver, ResetProgress, RxLimits, SackFields,
};

fn receiver(initial: u32, window: u32) -> Receiver {
    let limits = RxLimits {
        reassembly: ReassemblyLimits {
            receive_window_bytes: window,
            max_message_bytes: window / 4,
            ..ReassemblyLimits::default()
        },
        ..RxLimits::default()
    };
    Receiver::new(Tsn(initial), limits)
}

fn sack(rx: &mut Receiver) -> (SackFields, Vec<(u16, u16)>, Vec<Tsn>) {
    let (mut gaps, mut dups) = (Vec::<GapAckBlock>::new(), Vec::new());
    let fields = rx.build_sack(&mut gaps, &mut dups);
    (
        fields,
        gaps.iter().map(|g| (g.start, g.end)).collect(),
        dups,
    )
}

#[test]
fn one_tick_of_packets_gives_one_sack_covering_them_all() {
    let mut rx = receiver(100, 10_000);
    for tsn in 100..110 {
        let outcome = rx.handle_data(chunk(tsn, 0, (tsn - 100) as u16, "BE", b"abcd"));
        assert_eq!(outcome, Ok(DataOutcome::Accepted));
        rx.end_of_packet();
    }
    assert_eq!(rx.ack_urgency(), Some(AckUrgency::Immediate));
    // The data channel pass drains before sack_batch builds the SACK.
    assert_eq!(std::iter::from_fn(|| rx.pop_message()).count(), 10);
    let (fields, gaps, dups) = sack(&mut rx);
    assert_eq!(fields.cumulative_tsn_ack, Tsn(109));
    assert_eq!(fields.a_rwnd, 10_000);
    assert!(gaps.is_empty() && dups.is_empty());
    assert_eq!(rx.ack_urgency(), None);
}

#[test]
fn a_sack_reports_gaps_duplicates_and_the_held_bytes() {
    let mut rx = receiver(1, 10_000);
    rx.handle_data(chunk(1, 0, 0, "BE", b"one")).unwrap();
    rx.handle_data(chunk(3, 0, 2, "BE", b"three")).unwrap();
    assert_eq!(
        rx.handle_data(chunk(1, 0, 0, "BE", b"one")),
        Ok(DataOutcome::Duplicate)
    );
    rx.end_of_packet();
    assert_eq!(rx.pop_message().unwrap().payload, &b"one"[..]);
    let (fields, gaps, dups) = sack(&mut rx);
    assert_eq!(
        fields,
        SackFields {
            cumulative_tsn_ack: Tsn(1),
            a_rwnd: 10_000 - 5
        }
    );
    assert_eq!((gaps, dups), (vec![(2, 2)], vec![Tsn(1)]));
}

#[test]
fn a_chunk_dropped_for_room_is_not_acknowledged_but_the_gap_filler_gets_in() {
    // Window 4000, largest message 1000: out-of-order data may use 3000 bytes.
    let mut rx = receiver(1, 4000);
    let kb = [1u8; 1000];
    for tsn in 2..=4 {
        assert_eq!(
            rx.handle_data(chunk(tsn, 0, tsn as u16 - 1, "BE", &kb)),
            Ok(DataOutcome::Accepted)
        );
    }
    rx.end_of_packet();
    sack(&mut rx);
    assert_eq!(
        rx.handle_data(chunk(5, 0, 4, "BE", &kb)),
        Ok(DataOutcome::Dropped(DropReason::NoRoom))
    );
    // RFC 9260 §6.2: a SACK at once, without the dropped chunk in it.
    assert_eq!(rx.ack_urgency(), Some(AckUrgency::Immediate));
    let (fields, gaps, _) = sack(&mut rx);
    assert_eq!((fields.cumulative_tsn_ack, gaps), (Tsn(0), vec![(2, 4)]));
    assert_eq!(fields.a_rwnd, 1000);
    // The retransmission that fills the gap uses the reserve.
    assert_eq!(
        rx.handle_data(chunk(1, 0, 0, "BE", &kb)),
        Ok(DataOutcome::Accepted)
    );
    assert_eq!(rx.a_rwnd(), 0);
    assert_eq!(std::iter::from_fn(|| rx.pop_message()).count(), 4);
    assert_eq!(rx.tracker().cumulative_tsn(), Tsn(4));
}

#[test]
fn reopening_the_window_by_a_packet_owes_a_window_update() {
    let mut rx = receiver(1, 4000);
    for tsn in 1..=3 {
        rx.handle_data(chunk(tsn, 0, tsn as u16 - 1, "BE", &[0; 600]))
            .unwrap();
    }
    rx.end_of_packet();
    let (fields, _, _) = sack(&mut rx);
    assert_eq!(fields.a_rwnd, 2200);
    rx.pop_message();
    assert_eq!(rx.ack_urgency(), None, "600 bytes is less than a packet");
    rx.pop_message();
    assert_eq!(rx.ack_urgency(), Some(AckUrgency::Immediate));
}

#[test]
fn the_i_bit_asks_for_the_sack_at_once() {
    let mut rx = receiver(1, 4000);
    rx.handle_data(chunk(1, 0, 0, "BE", b"x")).unwrap();
    rx.end_of_packet();
    sack(&mut rx);
    let mut c = chunk(2, 0, 1, "BE", b"y");
    c.immediate_ack = true;
    rx.handle_data(c).unwrap();
    assert_eq!(rx.ack_urgency(), Some(AckUrgency::Immediate));
}

#[test]
fn data_on_an_unknown_stream_is_acknowledged_and_dropped() {
    let limits = RxLimits {
        reassembly: ReassemblyLimits {
            inbound_streams: 2,
            ..ReassemblyLimits::default()
        },
        ..RxLimits::default()
    };
    let mut rx = Receiver::new(Tsn(1), limits);
    assert_eq!(
        rx.handle_data(chunk(1, 2, 0, "BE", b"x")),
        Ok(DataOutcome::InvalidStream)
    );
    assert_eq!(rx.tracker().cumulative_tsn(), Tsn(1));
    assert!(rx.pop_message().is_none());
}

#[test]
fn protocol_violations_are_errors_and_not_acknowledged() {
    let mut rx = receiver(1, 4000);
    assert_eq!(
        rx.handle_data(chunk(1, 0, 0, "BE", b"")),
        Err(ReassemblyError::NoUserData { tsn: Tsn(1) })
    );
    assert_eq!(
        rx.handle_data(chunk(1, 0, 0, "BE", &[0; 1001])),
        Err(ReassemblyError::MessageTooLarge {
            stream: StreamId(0),
            bytes: 1001
        })
    );
    assert_eq!(rx.tracker().cumulative_tsn(), Tsn(0));
}

#[test]
fn tsns_too_far_ahead_are_dropped() {
    let mut rx = receiver(1, 4000);
    assert_eq!(
        rx.handle_data(chunk(70_000, 0, 0, "BE", b"x")),
        Ok(DataOutcome::Dropped(DropReason::TooFarAhead))
    );
    assert_eq!(rx.ack_urgency(), Some(AckUrgency::Immediate));
    assert_eq!(rx.reassembly().buffered_bytes(), 0);
}

#[test]
fn forward_tsn_frees_what_waited_behind_an_abandoned_message() {
    let mut rx = receiver(1, 10_000);
    rx.handle_data(chunk(1, 3, 0, "B", b"lost-")).unwrap();
    rx.handle_data(chunk(3, 3, 1, "BE", b"next")).unwrap();
    assert_eq!(
        rx.handle_forward_tsn(Tsn(2), &[(StreamId(3), Ssn(0))]),
        ForwardTsnOutcome::Advanced
    );
    assert_eq!(rx.tracker().cumulative_tsn(), Tsn(3));
    assert_eq!(rx.pop_message().unwrap().payload, &b"next"[..]);
    assert_eq!(rx.reassembly().buffered_bytes(), 0);
    assert_eq!(
        rx.handle_forward_tsn(Tsn(2), &[(StreamId(3), Ssn(0))]),
        ForwardTsnOutcome::Stale
    );
}

#[test]
fn a_deferred_reset_is_performed_when_the_cumulative_tsn_gets_there() {
    let mut rx = receiver(1, 10_000);
    rx.handle_data(chunk(1, 1, 0, "BE", b"a")).unwrap();
    assert_eq!(
        rx.reset_streams(&[StreamId(1)], Tsn(2)),
        Ok(ResetProgress::Deferred)
    );
    rx.handle_data(chunk(3, 1, 0, "BE", b"c")).unwrap();
    assert!(!rx.take_reset_performed());
    rx.handle_data(chunk(2, 1, 1, "BE", b"b")).unwrap();
    assert!(rx.take_reset_performed());
    let got: Vec<_> = std::iter::from_fn(|| rx.pop_message())
        .map(|m| m.payload)
        .collect();
    assert_eq!(got, [&b"a"[..], b"b", b"c"]);
}
