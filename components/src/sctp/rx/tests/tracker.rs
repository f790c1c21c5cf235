//! The data tracker: cumulative TSN, gap ack blocks, duplicates, SACK urgency.

use crate::sctp::chunk::GapAckBlock;
use crate::sctp::num::Tsn;
use crate::sctp::rx::{AckUrgency, DataTracker, ForwardTsnOutcome, Observed, TrackerLimits};

fn tracker(initial: u32) -> DataTracker {
    let mut t = DataTracker::new(Tsn(initial), TrackerLimits::default());
    // Get past the first-DATA rule (RFC 9260 §5.1) so tests see the steady state.
    assert_eq!(t.observe(Tsn(initial)), Observed::New);
    t.end_of_packet();
    t.on_sack_sent();
    t
}

fn blocks(t: &DataTracker) -> Vec<(u16, u16)> {
    let mut out = Vec::new();
    t.gap_ack_blocks(&mut out);
    out.iter().map(|b| (b.start, b.end)).collect()
}

#[test]
fn starts_one_before_the_initial_tsn_and_acks_the_first_data_at_once() {
    let mut t = DataTracker::new(Tsn(1000), TrackerLimits::default());
    assert_eq!(t.cumulative_tsn(), Tsn(999));
    assert_eq!(t.ack_urgency(), None);
    assert_eq!(t.observe(Tsn(1000)), Observed::New);
    t.end_of_packet();
    assert_eq!(t.ack_urgency(), Some(AckUrgency::Immediate));
    assert_eq!(t.cumulative_tsn(), Tsn(1000));
}

#[test]
fn in_order_data_moves_the_cumulative_tsn_and_acks_every_second_packet() {
    let mut t = tracker(10);
    assert_eq!(t.observe(Tsn(11)), Observed::New);
    t.end_of_packet();
    // One packet: the delayed-ack timer may wait (RFC 9260 §6.2).
    assert_eq!(t.ack_urgency(), Some(AckUrgency::Delayed));
    assert_eq!(t.observe(Tsn(12)), Observed::New);
    assert_eq!(t.observe(Tsn(13)), Observed::New);
    assert_eq!(t.ack_urgency(), Some(AckUrgency::Delayed)); // chunks, not packets
    t.end_of_packet();
    assert_eq!(t.ack_urgency(), Some(AckUrgency::Immediate));
    assert_eq!(t.cumulative_tsn(), Tsn(13));
    assert!(!t.has_gaps());
    t.on_sack_sent();
    assert_eq!(t.ack_urgency(), None);
    // A packet with no DATA counts for nothing.
    t.end_of_packet();
    assert_eq!(t.ack_urgency(), None);
}

#[test]
fn the_delayed_ack_timer_makes_the_sack_due() {
    let mut t = tracker(10);
    t.observe(Tsn(11));
    t.end_of_packet();
    assert_eq!(t.ack_urgency(), Some(AckUrgency::Delayed));
    t.delayed_ack_expired();
    assert_eq!(t.ack_urgency(), Some(AckUrgency::Immediate));
    assert_eq!(t.limits().sack_delay, std::time::Duration::from_millis(200));
}

#[test]
fn many_packets_in_one_tick_owe_one_sack_covering_them_all() {
    let mut t = tracker(0);
    for tsn in 1..=40 {
        assert_eq!(t.observe(Tsn(tsn)), Observed::New);
        t.end_of_packet();
    }
    assert_eq!(t.ack_urgency(), Some(AckUrgency::Immediate));
    assert_eq!(t.cumulative_tsn(), Tsn(40));
    t.on_sack_sent();
    assert_eq!(t.ack_urgency(), None);
}

#[test]
fn gaps_are_reported_as_in_the_rfc_example_and_owe_a_sack_at_once() {
    // RFC 9260 §3.3.4: TSNs 10, 11, 12, 14, 15, 17 give cumulative 12, blocks 2-3, 5-5.
    let mut t = tracker(10);
    for tsn in [11, 12, 14, 15, 17] {
        assert_eq!(t.observe(Tsn(tsn)), Observed::New);
    }
    t.end_of_packet();
    assert_eq!(t.cumulative_tsn(), Tsn(12));
    assert_eq!(blocks(&t), vec![(2, 3), (5, 5)]);
    assert_eq!(t.ack_urgency(), Some(AckUrgency::Immediate));
}

#[test]
fn gaps_fill_in_any_order() {
    let orders: [&[u32]; 4] = [
        &[5, 3, 1, 4, 2],
        &[2, 4, 3, 5, 1],
        &[5, 4, 3, 2, 1],
        &[1, 5, 2, 4, 3],
    ];
    for order in orders {
        let mut t = tracker(0);
        for &tsn in order {
            t.on_sack_sent();
            assert_eq!(t.observe(Tsn(tsn)), Observed::New, "order {order:?}");
            t.end_of_packet();
            // Out of order or filling a gap: a SACK at once (RFC 9260 §6.7, RFC 5681
            // §4.2). Only TSN 1 arriving first with no gap may wait.
            if tsn != 1 || t.has_gaps() {
                assert_eq!(t.ack_urgency(), Some(AckUrgency::Immediate), "{order:?}");
            }
        }
        assert_eq!(t.cumulative_tsn(), Tsn(5), "order {order:?}");
        assert!(blocks(&t).is_empty());
    }
}

#[test]
fn duplicates_are_listed_once_each_bounded_and_drained() {
    let limits = TrackerLimits {
        max_duplicates: 3,
        ..TrackerLimits::default()
    };
    let mut t = DataTracker::new(Tsn(1), limits);
    for tsn in [1, 2, 4] {
        t.observe(Tsn(tsn));
    }
    t.on_sack_sent();
    // Behind the cumulative TSN, inside a gap block, and far behind (serially).
    assert_eq!(t.observe(Tsn(2)), Observed::Duplicate);
    assert_eq!(t.observe(Tsn(4)), Observed::Duplicate);
    assert_eq!(t.observe(Tsn(2)), Observed::Duplicate);
    assert_eq!(
        t.observe(Tsn(2u32.wrapping_sub(1 << 30))),
        Observed::Duplicate
    );
    t.end_of_packet();
    // RFC 9260 §6.2: duplicates only, so a SACK at once.
    assert_eq!(t.ack_urgency(), Some(AckUrgency::Immediate));
    let mut dups = vec![Tsn(99)];
    t.take_duplicates(&mut dups);
    assert_eq!(dups, vec![Tsn(2), Tsn(4), Tsn(2)]);
    t.take_duplicates(&mut dups);
    assert!(dups.is_empty());
}

#[test]
fn tsns_wrap_around_u32_max() {
    let mut t = tracker(u32::MAX - 2);
    for tsn in [u32::MAX, 1, 0, u32::MAX - 1, 3] {
        assert_eq!(t.observe(Tsn(tsn)), Observed::New, "tsn {tsn}");
    }
    assert_eq!(t.cumulative_tsn(), Tsn(1));
    assert_eq!(blocks(&t), vec![(2, 2)]);
    assert_eq!(t.observe(Tsn(u32::MAX)), Observed::Duplicate);
    assert_eq!(t.observe(Tsn(2)), Observed::New);
    assert_eq!(t.cumulative_tsn(), Tsn(3));
}

#[test]
fn tsns_beyond_the_window_are_refused() {
    let limits = TrackerLimits {
        max_tsn_ahead: 100,
        ..TrackerLimits::default()
    };
    let mut t = DataTracker::new(Tsn(u32::MAX - 10), limits);
    let cum = t.cumulative_tsn();
    assert_eq!(t.classify(cum.add(101)), Observed::TooFarAhead);
    assert_eq!(t.classify(cum.add(0x8000_0000)), Observed::TooFarAhead);
    assert_eq!(t.observe(cum.add(101)), Observed::TooFarAhead);
    assert_eq!(t.observe(cum.add(100)), Observed::New);
    assert_eq!(blocks(&t), vec![(100, 100)]);
    // Dropped chunks are not acknowledged but make a SACK due (RFC 9260 §6.2).
    assert_eq!(t.ack_urgency(), Some(AckUrgency::Immediate));
    // The window never exceeds what a 16-bit gap offset can say.
    let wide = TrackerLimits {
        max_tsn_ahead: u32::MAX,
        ..TrackerLimits::default()
    };
    assert_eq!(
        DataTracker::new(Tsn(0), wide).limits().max_tsn_ahead,
        65_535
    );
}

#[test]
fn gap_blocks_are_bounded_and_the_next_tsn_is_always_taken() {
    let limits = TrackerLimits {
        max_gap_blocks: 4,
        ..TrackerLimits::default()
    };
    let mut t = DataTracker::new(Tsn(1), limits);
    for tsn in [3, 5, 7, 9] {
        assert_eq!(t.observe(Tsn(tsn)), Observed::New);
    }
    assert_eq!(t.classify(Tsn(11)), Observed::TooManyGaps);
    assert_eq!(t.observe(Tsn(11)), Observed::TooManyGaps);
    // Extending or joining a block needs no new one.
    assert_eq!(t.observe(Tsn(10)), Observed::New);
    assert_eq!(t.observe(Tsn(4)), Observed::New);
    assert_eq!(blocks(&t), vec![(3, 5), (7, 7), (9, 10)]);
    assert_eq!(t.observe(Tsn(1)), Observed::New);
    assert_eq!(t.cumulative_tsn(), Tsn(1));
    assert_eq!(t.observe(Tsn(13)), Observed::New);
    assert_eq!(t.observe(Tsn(15)), Observed::TooManyGaps);
    // The TSN right after the cumulative one moves it, whatever the count.
    assert_eq!(t.observe(Tsn(2)), Observed::New);
    assert_eq!(t.cumulative_tsn(), Tsn(5));
    assert_eq!(blocks(&t), vec![(2, 2), (4, 5), (8, 8)]);
    assert_eq!(t.observe(Tsn(15)), Observed::New);
}

#[test]
fn a_sack_reports_the_lowest_blocks_when_there_are_too_many() {
    let limits = TrackerLimits {
        max_gap_blocks: 3,
        ..TrackerLimits::default()
    };
    let mut t = DataTracker::new(Tsn(0), limits);
    for tsn in [2, 4, 6] {
        t.observe(Tsn(tsn));
    }
    assert_eq!(blocks(&t), vec![(3, 3), (5, 5), (7, 7)]);
}

#[test]
fn gap_blocks_reuse_the_callers_buffer() {
    let mut t = tracker(0);
    for tsn in (2..200).step_by(2) {
        t.observe(Tsn(tsn));
    }
    let mut out: Vec<GapAckBlock> = Vec::with_capacity(64);
    let ptr = out.as_ptr();
    for _ in 0..3 {
        t.gap_ack_blocks(&mut out);
        assert_eq!(out.len(), 64);
        assert_eq!(out.as_ptr(), ptr);
    }
    assert_eq!(out[0], GapAckBlock { start: 2, end: 2 });
}

#[test]
fn forward_tsn_moves_past_gaps_and_further_over_what_is_held() {
    // RFC 3758 §3.6's example: 102 received, 103 missing, 104-105 received, 106
    // missing, 107 received; FORWARD TSN to 103 moves the point to 105.
    let mut t = tracker(102);
    for tsn in [104, 105, 107] {
        t.observe(Tsn(tsn));
    }
    t.on_sack_sent();
    assert_eq!(t.handle_forward_tsn(Tsn(103)), ForwardTsnOutcome::Advanced);
    assert_eq!(t.cumulative_tsn(), Tsn(105));
    assert_eq!(blocks(&t), vec![(2, 2)]);
    t.end_of_packet();
    assert_eq!(t.ack_urgency(), Some(AckUrgency::Immediate));
    // Past every block, cutting none.
    assert_eq!(t.handle_forward_tsn(Tsn(200)), ForwardTsnOutcome::Advanced);
    assert_eq!(t.cumulative_tsn(), Tsn(200));
    assert!(!t.has_gaps());
    // Into the middle of a block.
    for tsn in [203, 204, 205, 208] {
        t.observe(Tsn(tsn));
    }
    assert_eq!(t.handle_forward_tsn(Tsn(204)), ForwardTsnOutcome::Advanced);
    assert_eq!(t.cumulative_tsn(), Tsn(205));
    assert_eq!(blocks(&t), vec![(3, 3)]);
    assert_eq!(t.observe(Tsn(204)), Observed::Duplicate);
}

#[test]
fn a_stale_forward_tsn_changes_nothing_but_owes_a_sack() {
    let mut t = tracker(50);
    t.observe(Tsn(52));
    t.on_sack_sent();
    for stale in [Tsn(50), Tsn(49), Tsn(50u32.wrapping_sub(0x8000_0000))] {
        assert_eq!(t.handle_forward_tsn(stale), ForwardTsnOutcome::Stale);
        assert_eq!(t.cumulative_tsn(), Tsn(50));
        assert_eq!(blocks(&t), vec![(2, 2)]);
        assert_eq!(t.ack_urgency(), Some(AckUrgency::Immediate));
        t.on_sack_sent();
    }
}

#[test]
fn a_forward_tsn_without_gaps_follows_the_delayed_ack_rule() {
    let mut t = tracker(7);
    assert_eq!(t.handle_forward_tsn(Tsn(9)), ForwardTsnOutcome::Advanced);
    t.end_of_packet();
    assert_eq!(t.ack_urgency(), Some(AckUrgency::Delayed));
}

#[test]
fn classify_changes_nothing() {
    let mut t = tracker(0);
    t.observe(Tsn(3));
    let before = (t.cumulative_tsn(), blocks(&t), t.ack_urgency());
    for tsn in [0, 1, 2, 3, 4, 70_000] {
        t.classify(Tsn(tsn));
    }
    assert_eq!(before, (t.cumulative_tsn(), blocks(&t), t.ack_urgency()));
    assert!(t.advances_cumulative(Tsn(1)));
    assert!(!t.advances_cumulative(Tsn(2)));
    t.request_sack_now();
    assert_eq!(t.ack_urgency(), Some(AckUrgency::Immediate));
}
