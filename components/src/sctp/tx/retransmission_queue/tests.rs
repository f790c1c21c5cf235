use super::*;
use crate::sctp::num::Ppid;
use crate::sctp::tx::{OutgoingMessage, SendQueue, SendQueueConfig};

const T0: Time = Time::ZERO;
/// A DATA chunk with 100 bytes of user data takes 116 bytes.
const CHUNK: usize = 116;

fn ms(n: u64) -> Time {
    Time::from_millis(n)
}

fn fragment(stream: u16, ssn: u16, mid: u64, begin: bool, end: bool) -> DataToSend {
    DataToSend {
        stream: StreamId(stream),
        ssn: Ssn(ssn),
        ppid: Ppid::BINARY,
        unordered: false,
        begin,
        end,
        payload: Bytes::from(vec![mid as u8; 100]),
        message_id: MessageId(mid),
        policy: Reliability::Reliable,
        expires_at: None,
    }
}

/// A one-chunk reliable message on stream 0.
fn single(mid: u64) -> DataToSend {
    fragment(0, mid as u16, mid, true, true)
}

fn with_policy(mut d: DataToSend, policy: Reliability, now: Time) -> DataToSend {
    d.policy = policy;
    if let Reliability::MaxLifetime(lifetime) = policy {
        d.expires_at = Some(now + lifetime);
    }
    d
}

fn queue(initial_tsn: u32) -> RetransmissionQueue {
    RetransmissionQueue::new(
        RetransmissionQueueConfig::default(),
        Tsn(initial_tsn),
        100_000,
    )
}

fn add_n(q: &mut RetransmissionQueue, n: u64) {
    for mid in 0..n {
        q.add(T0, single(mid)).unwrap();
    }
}

fn sack(q: &mut RetransmissionQueue, cum: u32, blocks: &[(u16, u16)]) -> SackOutcome {
    q.handle_sack(T0, Tsn(cum), blocks.iter().copied(), 100_000, false)
        .unwrap()
}

/// (TSN, state, miss indications) of every chunk held.
fn states(q: &RetransmissionQueue) -> Vec<(u32, ChunkState, u8)> {
    q.items
        .iter()
        .enumerate()
        .map(|(i, it)| ((q.cum_ack + 1 + i as u64) as u32, it.state, it.misses))
        .collect()
}

fn state(q: &RetransmissionQueue, tsn: u32) -> (ChunkState, u8) {
    let (_, s, m) = states(q).into_iter().find(|&(t, _, _)| t == tsn).unwrap();
    (s, m)
}

#[test]
fn assigns_consecutive_tsns_and_releases_acked_chunks() {
    // RFC 9260 §6.2.1: chunks up to the Cumulative TSN Ack leave the queue; their
    // payloads are dropped with them.
    let mut q = queue(10);
    let payload = Bytes::from(vec![7u8; 100]);
    let mut first = single(0);
    first.payload = payload.clone();
    assert_eq!(q.add(T0, first).map(|(t, _)| t), Some(Tsn(10)));
    assert_eq!(q.add(T0, single(1)).map(|(t, _)| t), Some(Tsn(11)));
    assert_eq!(q.add(T0, single(2)).map(|(t, _)| t), Some(Tsn(12)));
    assert_eq!(q.bytes_in_flight(), 3 * CHUNK);
    assert_eq!(q.payload_bytes_in_flight(), 300);
    assert!(!payload.is_unique());
    let out = sack(&mut q, 11, &[]);
    assert!(out.newly_acked_cumulative);
    assert_eq!((out.bytes_acked, out.payload_bytes_acked), (2 * CHUNK, 200));
    assert_eq!(out.bytes_in_flight_before, 3 * CHUNK);
    assert_eq!(q.len(), 1);
    assert_eq!(q.bytes_in_flight(), CHUNK);
    assert_eq!(q.cumulative_tsn_ack(), Tsn(11));
    assert!(
        payload.is_unique(),
        "the acked chunk's payload was released"
    );
    let out = sack(&mut q, 12, &[]);
    assert!(out.all_acked);
    assert!(q.is_empty());
    assert_eq!(q.next_tsn(), Tsn(13));
}

#[test]
fn gap_blocks_as_in_the_rfc_example() {
    // RFC 9260 §3.3.4: TSNs 10-12, 14, 15 and 17 received: Cumulative TSN Ack 12,
    // blocks (2,3) and (5,5).
    let mut q = queue(10);
    add_n(&mut q, 8);
    let out = q
        .handle_sack(T0, Tsn(12), [(2, 3), (5, 5)], 4660, false)
        .unwrap();
    assert_eq!(out.bytes_acked, 6 * CHUNK);
    assert_eq!(q.bytes_in_flight(), 2 * CHUNK);
    // §6.2.1 D ii: rwnd = a_rwnd - bytes still outstanding.
    assert_eq!(q.peer_rwnd(), 4660 - 200);
    use ChunkState::*;
    assert_eq!(
        states(&q),
        [
            (13, InFlight, 1),
            (14, GapAcked, 0),
            (15, GapAcked, 0),
            (16, InFlight, 1),
            (17, GapAcked, 0)
        ]
    );
}

#[test]
fn out_of_order_sack_is_dropped() {
    // RFC 9260 §6.2.1 D i: a Cumulative TSN Ack below the ack point: drop the SACK,
    // a_rwnd included.
    let mut q = queue(10);
    add_n(&mut q, 4);
    sack(&mut q, 11, &[]);
    let rwnd = q.peer_rwnd();
    let err = q.handle_sack(T0, Tsn(10), [(2, 2)], 1, false).unwrap_err();
    assert_eq!(
        err,
        SackError::OutOfOrder {
            cumulative_tsn_ack: Tsn(10),
            ack_point: Tsn(11)
        }
    );
    assert_eq!(q.peer_rwnd(), rwnd);
    assert_eq!(q.stats().out_of_order_sacks, 1);
    assert_eq!(state(&q, 13), (ChunkState::InFlight, 0));
}

#[test]
fn duplicate_sack_acks_nothing_and_counts_no_miss() {
    // RFC 9260 §7.2.4: miss indications only below the Highest TSN Newly Acknowledged;
    // a repeated SACK acknowledges nothing new.
    let mut q = queue(1);
    add_n(&mut q, 4);
    let first = sack(&mut q, 0, &[(2, 2)]);
    assert_eq!(first.bytes_acked, CHUNK);
    let again = sack(&mut q, 0, &[(2, 2)]);
    assert_eq!(again.bytes_acked, 0);
    assert!(!again.newly_acked_cumulative);
    assert_eq!(state(&q, 1), (ChunkState::InFlight, 1));
}

#[test]
fn sacks_for_unsent_tsns_never_panic() {
    // Network input never panics (DESIGN.md). RFC 9260 §3.3.4: gap blocks are offsets
    // from the Cumulative TSN Ack, Start <= End; §6.1: nothing beyond the TSNs sent exists.
    let mut q = queue(100);
    add_n(&mut q, 3);
    // Cumulative ack past the last TSN sent (102): rejected, nothing changed.
    let err = q.handle_sack(T0, Tsn(103), [], 5, false).unwrap_err();
    assert!(matches!(err, SackError::AcksUnsentTsn { .. }));
    assert_eq!(q.bytes_in_flight(), 3 * CHUNK);
    // Half the sequence space away: undefined in serial arithmetic, dropped as well.
    assert!(
        q.handle_sack(T0, Tsn(99 + (1 << 31)), [], 5, false)
            .is_err()
    );
    // Gap blocks past the last TSN are clamped; bad blocks (Start 0, Start > End) skipped;
    // hundreds of overlapping blocks cost one visit per TSN.
    let blocks = [(0, 4), (9, 3)]
        .into_iter()
        .chain(std::iter::repeat_n((1, u16::MAX), 10_000));
    let out = q.handle_sack(T0, Tsn(99), blocks, 5, false).unwrap();
    assert_eq!(out.bytes_acked, 3 * CHUNK);
    assert_eq!(q.stats().bad_gap_blocks, 2);
    assert_eq!(q.bytes_in_flight(), 0);
}

#[test]
fn tsns_wrap_around_u32_max() {
    // RFC 9260 §1.6: serial number arithmetic across 2^32.
    let mut q = queue(u32::MAX - 2);
    add_n(&mut q, 6);
    assert_eq!(q.highest_sent_tsn(), Tsn(2));
    // Cumulative ack 2^32 - 2, gap block (2,3) = TSNs 0 and 1.
    let out = sack(&mut q, u32::MAX - 1, &[(2, 3)]);
    assert_eq!(out.bytes_acked, 4 * CHUNK);
    assert_eq!(state(&q, u32::MAX), (ChunkState::InFlight, 1));
    assert_eq!(state(&q, 0), (ChunkState::GapAcked, 0));
    assert_eq!(state(&q, 2), (ChunkState::InFlight, 0));
    let out = sack(&mut q, 2, &[]);
    assert_eq!(out.bytes_acked, 2 * CHUNK);
    assert!(q.is_empty());
    assert_eq!(q.next_tsn(), Tsn(3));
}

#[test]
fn fast_retransmit_on_the_third_miss_indication() {
    // RFC 9260 §7.2.4: mark for retransmission on the third miss indication, the chunk
    // leaves flightsize (§6.2.1 C), and it goes out before anything else.
    let mut q = queue(1);
    add_n(&mut q, 5);
    sack(&mut q, 1, &[(2, 2)]);
    sack(&mut q, 1, &[(2, 3)]);
    sack(&mut q, 1, &[(2, 3)]); // nothing newly acked: no miss
    assert_eq!(state(&q, 2), (ChunkState::InFlight, 2));
    assert_eq!(q.peer_rwnd(), 100_000 - 200);
    let out = sack(&mut q, 1, &[(2, 4)]);
    assert!(out.fast_retransmit_triggered);
    assert_eq!(state(&q, 2), (ChunkState::Marked, 0));
    assert_eq!(q.bytes_in_flight(), 0);
    assert_eq!(q.peer_rwnd(), 100_000, "TSN 5 acked, TSN 2 marked");
    let (tsn, data) = q.next_retransmission(T0, 1000).unwrap();
    assert_eq!((tsn, data.message_id), (Tsn(2), MessageId(1)));
    assert!(q.next_retransmission(T0, 1000).is_none());
    assert_eq!(q.bytes_in_flight(), CHUNK);
}

#[test]
fn fast_retransmitted_chunk_is_not_fast_retransmitted_again() {
    // RFC 9260 §7.2.4 rule 5: ineligible for a subsequent fast retransmit (T3 covers it).
    let mut q = queue(1);
    add_n(&mut q, 9);
    for end in 2..=4 {
        sack(&mut q, 1, &[(2, end)]);
    }
    q.next_retransmission(T0, 1000).unwrap();
    for end in 5..=8 {
        let out = sack(&mut q, 1, &[(2, end)]);
        assert!(!out.fast_retransmit_triggered);
    }
    assert_eq!(state(&q, 2), (ChunkState::InFlight, 4));
}

#[test]
fn only_tsns_below_the_htna_get_miss_indications() {
    // RFC 9260 §7.2.4: "miss indications are incremented only for missing TSNs prior to
    // the HTNA in the SACK chunk".
    let mut q = queue(1);
    add_n(&mut q, 5);
    sack(&mut q, 0, &[(4, 4)]); // TSN 4: holes 1-3 get one each; 5 is not reported
    assert_eq!(state(&q, 3), (ChunkState::InFlight, 1));
    assert_eq!(state(&q, 5), (ChunkState::InFlight, 0));
    sack(&mut q, 0, &[(2, 2), (4, 4)]); // newly acked: TSN 2 only, so HTNA = 2
    assert_eq!(state(&q, 1), (ChunkState::InFlight, 2));
    assert_eq!(state(&q, 3), (ChunkState::InFlight, 1), "above the HTNA");
}

#[test]
fn in_fast_recovery_every_reported_hole_gets_a_miss() {
    // RFC 9260 §7.2.4: "If an endpoint is in Fast Recovery and a SACK chunks arrives that
    // advances the Cumulative TSN Ack Point, the miss indications are incremented for all
    // TSNs reported missing in the SACK chunk."
    for in_fr in [false, true] {
        let mut q = queue(1);
        add_n(&mut q, 8);
        sack(&mut q, 0, &[(6, 6)]);
        // Advances to 1; TSN 6 again in block (5,5); HTNA is 1.
        q.handle_sack(T0, Tsn(1), [(5, 5)], 100_000, in_fr).unwrap();
        let expected = if in_fr { 2 } else { 1 };
        for tsn in 2..=5 {
            assert_eq!(state(&q, tsn), (ChunkState::InFlight, expected), "{in_fr}");
        }
        assert_eq!(state(&q, 7).1, 0);
    }
}

#[test]
fn reneged_gap_ack_counts_a_miss_and_returns_to_flight() {
    // RFC 9260 §6.2.1 D iii: a TSN acked by a gap block and missing from a later SACK
    // counts one miss indication; T3-rtx must run (R4).
    let mut q = queue(1);
    add_n(&mut q, 4);
    sack(&mut q, 0, &[(2, 3)]);
    assert_eq!(q.bytes_in_flight(), 2 * CHUNK);
    let out = sack(&mut q, 0, &[(3, 3)]);
    assert!(out.reneged);
    assert_eq!(state(&q, 2), (ChunkState::InFlight, 1));
    assert_eq!(q.bytes_in_flight(), 3 * CHUNK);
    assert!(!out.all_acked);
}

#[test]
fn karn_rtt_samples_only_from_chunks_sent_once() {
    // RFC 9260 §6.3.1 C5: no RTT from a retransmitted chunk, nor from TSN r if a TSN <= r
    // was retransmitted since r was first sent; C4: one sample per round trip.
    let mut q = queue(1);
    q.add(ms(0), single(0)).unwrap();
    let out = q.handle_sack(ms(10), Tsn(1), [], 100_000, false).unwrap();
    assert_eq!(out.rtt_sample, Some(std::time::Duration::from_millis(10)));
    // TSN 2 is timed; 3, 4, 5 are not (one sample per round trip).
    for mid in 1..5 {
        q.add(ms(20), single(mid)).unwrap();
    }
    for end in 1..=3 {
        q.handle_sack(ms(25), Tsn(1), [(2, end + 1)], 100_000, false)
            .unwrap();
    }
    // TSN 2 was marked: it is no longer timed. TSN 6 is.
    q.add(ms(30), single(5)).unwrap();
    q.next_retransmission(ms(40), 1000).unwrap();
    // TSN 6 was sent before TSN 2 was retransmitted: no sample from it either.
    let out = q.handle_sack(ms(50), Tsn(6), [], 100_000, false).unwrap();
    assert_eq!(out.rtt_sample, None);
    q.add(ms(60), single(6)).unwrap();
    let out = q.handle_sack(ms(75), Tsn(7), [], 100_000, false).unwrap();
    assert_eq!(out.rtt_sample, Some(std::time::Duration::from_millis(15)));
}

#[test]
fn retransmitted_chunk_gives_no_rtt_sample() {
    // RFC 9260 §6.3.1 C5 (Karn): the ack may be for either transmission.
    let mut q = queue(1);
    q.add(ms(0), single(0)).unwrap();
    assert_eq!(q.handle_t3_expiry(ms(1000)), 1);
    q.next_retransmission(ms(1000), 1000).unwrap();
    let out = q.handle_sack(ms(1010), Tsn(1), [], 100_000, false).unwrap();
    assert_eq!(out.rtt_sample, None);
    assert!(out.all_acked);
}

#[test]
fn t3_expiry_marks_all_in_flight_and_resends_lowest_first() {
    // RFC 9260 §6.3.3 E3: the earliest outstanding chunks go first; gap-acked ones are not
    // outstanding; marked chunks leave flightsize (§6.2.1 C).
    let mut q = queue(1);
    add_n(&mut q, 4);
    sack(&mut q, 0, &[(3, 3)]);
    assert_eq!(q.handle_t3_expiry(T0), 3);
    assert_eq!(q.bytes_in_flight(), 0);
    assert_eq!(q.peer_rwnd(), 100_000);
    assert!(q.has_retransmissions());
    assert!(q.next_retransmission(T0, 99).is_none(), "does not fit");
    let tsns: Vec<u32> =
        std::iter::from_fn(|| q.next_retransmission(T0, 100).map(|(tsn, _)| tsn.0)).collect();
    assert_eq!(tsns, [1, 2, 4]);
    assert_eq!(q.bytes_in_flight(), 3 * CHUNK);
    assert_eq!(q.stats().retransmissions, 3);
    assert!(!q.has_retransmissions());
}

#[test]
fn abandon_by_max_retransmits_takes_every_fragment() {
    // RFC 7496 §3.1 (limit 0: abandoned when it would be retransmitted the first time),
    // RFC 3758 §3.5 A3 (all fragments at once, those still queued included), A2 (not
    // outstanding), C2 (Advanced.Peer.Ack.Point moves over them).
    let mut sq = SendQueue::new(SendQueueConfig::default());
    let mut q = queue(1);
    let message = OutgoingMessage {
        ppid: Ppid::BINARY,
        payload: Bytes::from(vec![1u8; 300]),
        unordered: false,
        policy: Reliability::MaxRetransmits(0),
    };
    sq.send(T0, StreamId(4), message).unwrap();
    for _ in 0..2 {
        let chunk = sq.produce(T0, 100).unwrap();
        q.add(T0, chunk).unwrap();
    }
    assert_eq!(q.handle_t3_expiry(T0), 0);
    assert_eq!(q.bytes_in_flight(), 0);
    assert!(!q.has_retransmissions());
    // TSN 3 is the end marker that closes the message (never sent).
    assert_eq!(q.next_tsn(), Tsn(4));
    assert_eq!(q.advanced_peer_ack_point(), Tsn(3));
    let mut discards = Vec::new();
    q.take_discards(&mut discards);
    assert_eq!(discards.len(), 1);
    for (stream, id) in discards {
        assert!(sq.discard_message(stream, id));
    }
    assert!(!sq.has_data());
    let mut skipped = Vec::new();
    assert_eq!(q.forward_tsn(&mut skipped), Some(Tsn(3)));
    assert_eq!(skipped, [(StreamId(4), Ssn(0))]);
    let stats = q.stats();
    assert_eq!((stats.abandoned_messages, stats.abandoned_chunks), (1, 2));
}

#[test]
fn abandon_by_lifetime_before_retransmission() {
    // RFC 3758 §4.1 TR4: before retransmitting, check the lifetime; abandon if expired.
    let mut q = queue(1);
    let life = std::time::Duration::from_millis(100);
    q.add(
        T0,
        with_policy(single(0), Reliability::MaxLifetime(life), T0),
    )
    .unwrap();
    q.add(T0, single(1)).unwrap();
    q.handle_t3_expiry(ms(50));
    assert!(q.has_retransmissions());
    let (tsn, _) = q.next_retransmission(ms(150), 1000).unwrap();
    assert_eq!(tsn, Tsn(2), "TSN 1 expired on the way and was abandoned");
    let mut skipped = Vec::new();
    assert_eq!(q.forward_tsn(&mut skipped), Some(Tsn(1)));
}

#[test]
fn adding_an_expired_fragment_abandons_its_message() {
    // RFC 3758 §4.1 TR4 for a message whose first fragment already holds a TSN.
    let mut q = queue(1);
    let life = Reliability::MaxLifetime(std::time::Duration::from_millis(100));
    let first = with_policy(fragment(2, 0, 9, true, false), life, T0);
    let mut second = fragment(2, 0, 9, false, false);
    second.policy = life;
    second.expires_at = first.expires_at;
    assert_eq!(q.add(T0, first).map(|(t, _)| t), Some(Tsn(1)));
    assert!(q.add(ms(150), second).is_none());
    assert_eq!(q.bytes_in_flight(), 0);
    let mut discards = Vec::new();
    q.take_discards(&mut discards);
    assert_eq!(discards, [(StreamId(2), MessageId(9))]);
    assert_eq!(q.advanced_peer_ack_point(), Tsn(3), "past the end marker");
}

#[test]
fn forward_tsn_reports_ordered_streams_only_with_their_highest_ssn() {
    // RFC 3758 §3.2: the Stream Sequence field "MUST NOT report TSN's corresponding to
    // DATA chunks that are marked as unordered"; C4: each stream once, its highest SSN.
    let mut q = queue(1);
    let drop_it = Reliability::MaxRetransmits(0);
    q.add(T0, with_policy(fragment(1, 0, 0, true, true), drop_it, T0));
    let mut unordered = with_policy(fragment(2, 0, 1, true, true), drop_it, T0);
    unordered.unordered = true;
    q.add(T0, unordered);
    q.add(T0, with_policy(fragment(1, 1, 2, true, true), drop_it, T0));
    q.add(T0, fragment(3, 0, 3, true, true));
    q.handle_t3_expiry(T0);
    let mut skipped = Vec::new();
    assert_eq!(q.forward_tsn(&mut skipped), Some(Tsn(3)));
    assert_eq!(skipped, [(StreamId(1), Ssn(1))]);
}

#[test]
fn forward_tsn_never_skips_past_a_live_chunk() {
    // RFC 3758 §3.5 C2: the Advanced.Peer.Ack.Point moves only over abandoned chunks, so
    // a reliable SSN 0 is never skipped by reporting SSN 1 of the same stream.
    let mut q = queue(1);
    q.add(T0, fragment(1, 0, 0, true, true));
    let drop_it = Reliability::MaxRetransmits(0);
    q.add(T0, with_policy(fragment(1, 1, 1, true, true), drop_it, T0));
    q.handle_t3_expiry(T0);
    let mut skipped = Vec::new();
    assert_eq!(q.forward_tsn(&mut skipped), None);
    q.next_retransmission(T0, 1000).unwrap();
    sack(&mut q, 1, &[]);
    assert_eq!(q.forward_tsn(&mut skipped), Some(Tsn(2)));
    assert_eq!(skipped, [(StreamId(1), Ssn(1))]);
    // The peer moved its cumulative TSN past it: nothing more to say, entry forgotten.
    let out = sack(&mut q, 2, &[]);
    assert_eq!(out.bytes_acked, 0, "abandoned chunks are not credited (A2)");
    skipped.clear();
    assert_eq!(q.forward_tsn(&mut skipped), None);
    assert_eq!(q.forward_streams(), 0);
}

#[test]
fn forward_tsn_stream_list_is_bounded() {
    // RFC 3758 §3.5 C4: if the FORWARD-TSN would not fit, hold the Advanced.Peer.Ack.Point
    // at the last TSN that fits.
    let config = RetransmissionQueueConfig {
        max_forward_tsn_streams: 2,
        ..RetransmissionQueueConfig::default()
    };
    let mut q = RetransmissionQueue::new(config, Tsn(1), 100_000);
    let drop_it = Reliability::MaxRetransmits(0);
    for s in 0..4 {
        q.add(
            T0,
            with_policy(fragment(s, 0, s as u64, true, true), drop_it, T0),
        );
    }
    q.handle_t3_expiry(T0);
    let mut skipped = Vec::new();
    assert_eq!(q.forward_tsn(&mut skipped), Some(Tsn(2)));
    assert_eq!(skipped.len(), 2);
    // Once the peer acknowledges that far, the rest follows.
    sack(&mut q, 2, &[]);
    skipped.clear();
    assert_eq!(q.forward_tsn(&mut skipped), Some(Tsn(4)));
    assert_eq!(skipped, [(StreamId(2), Ssn(0)), (StreamId(3), Ssn(0))]);
}

#[test]
fn outstanding_chunks_are_bounded() {
    // RFC 9260 §6.1 limits the window to 2^31 - 1 TSNs and 2^16 - 1 ordered messages per
    // stream; shoal's configured bound is far below both.
    let config = RetransmissionQueueConfig {
        max_outstanding_chunks: 3,
        ..RetransmissionQueueConfig::default()
    };
    let mut q = RetransmissionQueue::new(config, Tsn(1), 100_000);
    add_n(&mut q, 3);
    assert!(!q.can_add());
    sack(&mut q, 1, &[]);
    assert!(q.can_add());
}

#[test]
fn forward_tsn_does_not_cross_a_stream_reset_point() {
    // RFC 6525 §5.1.2 A3 / §5.2.2: the peer resets a stream once its cumulative TSN
    // reaches the Sender's Last Assigned TSN; a FORWARD-TSN crossing that point could
    // name a pre-reset SSN together with post-reset TSNs.
    let mut q = queue(1);
    let drop_it = Reliability::MaxRetransmits(0);
    q.add(T0, with_policy(fragment(1, 7, 0, true, true), drop_it, T0));
    assert_eq!(q.begin_stream_reset(), Tsn(1));
    q.add(T0, with_policy(fragment(2, 0, 1, true, true), drop_it, T0));
    q.handle_t3_expiry(T0);
    let mut skipped = Vec::new();
    assert_eq!(q.forward_tsn(&mut skipped), Some(Tsn(1)));
    assert_eq!(skipped, [(StreamId(1), Ssn(7))]);
    sack(&mut q, 1, &[]);
    skipped.clear();
    assert_eq!(q.forward_tsn(&mut skipped), Some(Tsn(2)));
    assert_eq!(
        skipped,
        [(StreamId(2), Ssn(0))],
        "stream 1's old SSN is not repeated"
    );
}

/// Recomputes the counters from the chunks and compares.
fn assert_consistent(q: &RetransmissionQueue) {
    let in_flight: Vec<&Outstanding> = q
        .items
        .iter()
        .filter(|i| i.state == ChunkState::InFlight)
        .collect();
    assert_eq!(
        q.bytes_in_flight,
        in_flight.iter().map(|i| i.chunk_len()).sum::<usize>()
    );
    assert_eq!(
        q.payload_in_flight,
        in_flight.iter().map(|i| i.payload_len).sum::<usize>()
    );
    let marked = q.items.iter().filter(|i| i.state == ChunkState::Marked);
    assert_eq!(q.marked, marked.count());
    assert!(q.adv_peer_ack >= q.cum_ack);
    let skipped = (q.adv_peer_ack - q.cum_ack) as usize;
    assert!(
        q.items
            .iter()
            .take(skipped)
            .all(|i| i.state == ChunkState::Abandoned)
    );
    assert!(q.items.len() <= q.config.max_outstanding_chunks + 1);
    // Gap-acked chunks are exactly those the last SACK's blocks cover (less abandoned).
    for (i, item) in q.items.iter().enumerate() {
        let tsn = q.cum_ack + 1 + i as u64;
        let in_blocks = q.prev_blocks.iter().any(|&(s, e)| s <= tsn && tsn <= e);
        match item.state {
            ChunkState::GapAcked => assert!(in_blocks, "TSN {tsn}"),
            ChunkState::Abandoned => {}
            _ => assert!(!in_blocks, "TSN {tsn} {:?}", item.state),
        }
    }
}

#[test]
fn hostile_sacks_never_break_the_books() {
    // Network input never panics and never corrupts state (DESIGN.md): random SACKs, some
    // stale, some acking unsent TSNs, with junk gap blocks, among sends, T3 expiries and
    // retransmissions, across the TSN wrap.
    use rand_chacha::ChaCha8Rng;
    use rand_core::{RngCore, SeedableRng};
    for seed in 0..20 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let config = RetransmissionQueueConfig {
            max_outstanding_chunks: 64,
            ..RetransmissionQueueConfig::default()
        };
        let mut q = RetransmissionQueue::new(config, Tsn(u32::MAX - 100), 50_000);
        let mut mid = 0u64;
        let mut open_message = false;
        let mut now = T0;
        for _ in 0..5_000 {
            now = now + std::time::Duration::from_millis(u64::from(rng.next_u32() % 20));
            match rng.next_u32() % 10 {
                0..=3 if q.can_add() => {
                    let policy = match rng.next_u32() % 3 {
                        0 => Reliability::Reliable,
                        1 => Reliability::MaxRetransmits((rng.next_u32() % 3) as u16),
                        _ => Reliability::MaxLifetime(std::time::Duration::from_millis(50)),
                    };
                    // Fragments of a message are consecutive, as `add` requires.
                    let begin = !open_message;
                    let end = rng.next_u32() % 2 == 0;
                    open_message = !end;
                    if begin {
                        mid += 1;
                    }
                    let mut d = with_policy(fragment(1, 0, mid, begin, end), policy, now);
                    d.unordered = rng.next_u32() % 2 == 0;
                    q.add(now, d);
                }
                4..=7 => {
                    let cum = q
                        .cumulative_tsn_ack()
                        .0
                        .wrapping_add(rng.next_u32() % 80)
                        .wrapping_sub(10);
                    let blocks: Vec<(u16, u16)> = (0..rng.next_u32() % 6)
                        .map(|_| ((rng.next_u32() % 70) as u16, (rng.next_u32() % 70) as u16))
                        .collect();
                    let in_fr = rng.next_u32() % 2 == 0;
                    let _ = q.handle_sack(now, Tsn(cum), blocks, rng.next_u32(), in_fr);
                }
                8 => {
                    q.handle_t3_expiry(now);
                }
                _ => while q.next_retransmission(now, 200).is_some() {},
            }
            let mut discards = Vec::new();
            q.take_discards(&mut discards);
            if discards.iter().any(|&(_, id)| id == MessageId(mid)) {
                open_message = false; // the send queue drops the rest
            }
            assert_consistent(&q);
            let mut skipped = Vec::new();
            if let Some(new_cum) = q.forward_tsn(&mut skipped) {
                assert!(new_cum.is_after(q.cumulative_tsn_ack()));
            }
        }
    }
}

#[test]
fn sack_work_follows_what_changed_not_the_window() {
    // LESSONS.md: O(work), not O(window). One hole at the front of a 2000-chunk window and
    // a SACK per arriving chunk, each with a block one TSN longer: the blocks' span grows
    // to 2000, the work per SACK stays constant.
    let config = RetransmissionQueueConfig {
        max_outstanding_chunks: 4096,
        ..RetransmissionQueueConfig::default()
    };
    let mut q = RetransmissionQueue::new(config, Tsn(1), 10_000_000);
    add_n(&mut q, 2000);
    for end in 2..=2000u16 {
        sack(&mut q, 0, &[(2, end)]);
    }
    let visits = q.stats().sack_tsn_visits;
    assert!(visits < 3 * 2000, "{visits} TSN visits for 1999 SACKs");
    // TSN 1 was fast retransmitted on its third miss, then left alone (rule 5).
    assert_eq!(state(&q, 1).0, ChunkState::Marked);
    let out = sack(&mut q, 2000, &[]);
    assert_eq!(out.bytes_acked, CHUNK);
    assert!(q.is_empty());
}
