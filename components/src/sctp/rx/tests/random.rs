//! A seeded sender and a lossy, reordering, duplicating network against one
//! [`Receiver`]: every message must come out exactly once, byte for byte, ordered
//! messages in SSN order per stream, with and without PR-SCTP abandonment.
//!
//! The sender is a model, not shoal's send side: each round it sends every chunk of
//! its flight that no SACK has acknowledged, learns from the SACK, and (when asked to)
//! abandons whole messages and sends FORWARD TSN as RFC 3758 §3.5 has it.

use crate::sctp::chunk::GapAckBlock;
use std::collections::BTreeMap;

use bytes::Bytes;
use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};

use crate::sctp::num::{Ppid, Ssn, StreamId, Tsn};
use crate::sctp::rx::{
    DataIn, DataOutcome, Message, ReassemblyLimits, Receiver, RxLimits, TrackerLimits,
};

const STREAMS: u16 = 5;
const FRAGMENT: usize = 400;
const FLIGHT: u32 = 160;

struct Sent {
    stream: StreamId,
    ordered: bool,
    ssn: Ssn,
    payload: Bytes,
    /// Offsets (from the initial TSN) of its first and last chunk.
    first: u32,
    last: u32,
    abandoned: bool,
}

fn below(rng: &mut ChaCha8Rng, n: u32) -> u32 {
    (rng.next_u64() % u64::from(n.max(1))) as u32
}

fn chance(rng: &mut ChaCha8Rng, percent: u32) -> bool {
    below(rng, 100) < percent
}

fn shuffle<T>(rng: &mut ChaCha8Rng, items: &mut [T]) {
    for i in (1..items.len()).rev() {
        items.swap(i, below(rng, i as u32 + 1) as usize);
    }
}

/// Cuts `count` messages into chunks; the PPID of each carries its index.
fn make_messages(rng: &mut ChaCha8Rng, initial: Tsn, count: u32) -> (Vec<Sent>, Vec<DataIn>) {
    let mut next_ssn = [0u16; STREAMS as usize];
    let (mut messages, mut chunks) = (Vec::new(), Vec::new());
    for id in 0..count {
        let stream = below(rng, u32::from(STREAMS)) as u16;
        let ordered = stream != 0 && chance(rng, 80);
        let ssn = Ssn(next_ssn[usize::from(stream)]);
        if ordered {
            next_ssn[usize::from(stream)] = ssn.0.wrapping_add(1);
        }
        let largest = if chance(rng, 30) { 3000 } else { 300 };
        let size = 1 + below(rng, largest) as usize;
        let mut payload = vec![0u8; size];
        rng.fill_bytes(&mut payload);
        let pieces: Vec<&[u8]> = payload.chunks(FRAGMENT).collect();
        let first = chunks.len() as u32;
        for (i, piece) in pieces.iter().enumerate() {
            chunks.push(DataIn {
                tsn: initial.add(chunks.len() as u32),
                stream: StreamId(stream),
                ssn,
                ppid: Ppid(id),
                unordered: !ordered,
                begin: i == 0,
                end: i + 1 == pieces.len(),
                immediate_ack: false,
                payload: Bytes::copy_from_slice(piece),
            });
        }
        messages.push(Sent {
            stream: StreamId(stream),
            ordered,
            ssn,
            payload: Bytes::from(payload),
            first,
            last: chunks.len() as u32 - 1,
            abandoned: false,
        });
    }
    (messages, chunks)
}

struct Run {
    delivered: Vec<Message>,
    rounds: u32,
}

/// Runs one exchange. With `respect_rwnd` the sender keeps what it has outstanding
/// within the last a_rwnd (RFC 9260 §6.2.1); without, it floods its whole flight.
fn exchange(
    seed: u64,
    initial: Tsn,
    count: u32,
    abandon: bool,
    respect_rwnd: bool,
) -> (Vec<Sent>, Run) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let (mut messages, chunks) = make_messages(&mut rng, initial, count);
    let owner: Vec<usize> = messages
        .iter()
        .enumerate()
        .flat_map(|(i, m)| (m.first..=m.last).map(move |_| i))
        .collect();
    let limits = RxLimits {
        tracker: TrackerLimits {
            max_tsn_ahead: FLIGHT - 20,
            max_gap_blocks: 24,
            max_duplicates: 8,
            ..TrackerLimits::default()
        },
        reassembly: ReassemblyLimits {
            receive_window_bytes: 12_000,
            max_message_bytes: 3_000,
            max_buffered_chunks: 150,
            inbound_streams: u32::from(STREAMS),
        },
    };
    let mut rx = Receiver::new(initial, limits);
    let total = chunks.len() as u32;
    let mut acked = vec![false; chunks.len()];
    // Every chunk below this offset is acknowledged or abandoned-and-forwarded.
    let mut cum = 0u32;
    let mut late: Vec<DataIn> = Vec::new();
    let mut last_forward: Option<(Tsn, Vec<(StreamId, Ssn)>)> = None;
    let mut delivered = Vec::new();
    let (mut gaps, mut dups) = (Vec::<GapAckBlock>::new(), Vec::new());
    let mut rounds = 0;
    let mut rwnd = limits.reassembly.receive_window_bytes;
    while cum < total {
        rounds += 1;
        assert!(
            rounds < 5_000,
            "seed {seed}: no progress, stuck at offset {cum}"
        );
        if abandon && chance(&mut rng, 15) {
            let end = (cum + FLIGHT).min(total);
            let pick = owner[(cum + below(&mut rng, end - cum)) as usize];
            if !(messages[pick].first..=messages[pick].last).all(|o| acked[o as usize]) {
                // RFC 3758 §3.5 A3: all chunks of the message at once.
                messages[pick].abandoned = true;
            }
        }
        // The flight: what no SACK acknowledged, in a random order, some lost, some
        // twice, some held back for a later round; plus a few old ones again.
        let mut budget = rwnd as usize;
        let mut batch: Vec<DataIn> = Vec::new();
        for o in cum..(cum + FLIGHT).min(total) {
            let c = &chunks[o as usize];
            if acked[o as usize] || messages[owner[o as usize]].abandoned {
                continue;
            }
            // One chunk may always be in flight (RFC 9260 §6.1 rule A).
            if respect_rwnd && !batch.is_empty() && c.payload.len() > budget {
                break;
            }
            budget = budget.saturating_sub(c.payload.len());
            batch.push(c.clone());
        }
        for _ in 0..below(&mut rng, 4) {
            if cum > 0 {
                batch.push(chunks[below(&mut rng, cum) as usize].clone());
            }
        }
        let dup: Vec<DataIn> = batch
            .iter()
            .filter(|_| chance(&mut rng, 8))
            .cloned()
            .collect();
        batch.extend(dup);
        batch.append(&mut late);
        shuffle(&mut rng, &mut batch);
        let mut i = 0;
        while i < batch.len() {
            let n = 1 + below(&mut rng, 4) as usize;
            for c in batch[i..(i + n).min(batch.len())].iter().cloned() {
                match below(&mut rng, 100) {
                    0..15 => {}
                    15..20 => late.push(c),
                    _ => {
                        let outcome = rx.handle_data(c);
                        assert!(
                            !matches!(outcome, Err(_) | Ok(DataOutcome::InvalidStream)),
                            "seed {seed}: {outcome:?}"
                        );
                    }
                }
            }
            rx.end_of_packet();
            i += n;
        }
        // FORWARD TSN over the abandoned chunks just above what is acknowledged (C2:
        // "as long as the chunk next in the out-queue space is marked as 'abandoned'"),
        // naming the highest abandoned SSN of each ordered stream (RFC 3758 §3.5 C4).
        let mut forward = cum;
        while forward < total && messages[owner[forward as usize]].abandoned {
            forward += 1;
        }
        if forward > cum && chance(&mut rng, 80) {
            let mut skipped = BTreeMap::new();
            for m in messages.iter().filter(|m| m.abandoned && m.ordered) {
                if m.last >= cum && m.first < forward {
                    skipped.insert(m.stream, m.ssn);
                }
            }
            let skipped: Vec<(StreamId, Ssn)> = skipped.into_iter().collect();
            rx.handle_forward_tsn(initial.add(forward - 1), &skipped);
            rx.end_of_packet();
            last_forward = Some((initial.add(forward - 1), skipped));
        } else if let Some((tsn, skipped)) = &last_forward
            && chance(&mut rng, 20)
        {
            // An old FORWARD TSN again, delayed or retransmitted: stale by now.
            rx.handle_forward_tsn(*tsn, skipped);
            rx.end_of_packet();
        }
        delivered.extend(std::iter::from_fn(|| rx.pop_message()));
        // The SACK: now if owed at once, else when the delayed-ack timer fires.
        if rx.ack_urgency().is_none() {
            continue;
        }
        rx.delayed_ack_expired();
        let fields = rx.build_sack(&mut gaps, &mut dups);
        rwnd = fields.a_rwnd;
        let sack_cum = fields.cumulative_tsn_ack.add(1).distance_from(initial);
        assert!(sack_cum <= total, "seed {seed}: acked past the end");
        for o in cum..sack_cum {
            acked[o as usize] = true;
        }
        cum = cum.max(sack_cum);
        for g in &gaps {
            for o in (sack_cum + u32::from(g.start) - 1)..(sack_cum + u32::from(g.end)) {
                acked[o as usize] = true;
            }
        }
    }
    // The last messages may still be in the queue; then the receiver holds nothing.
    delivered.extend(std::iter::from_fn(|| rx.pop_message()));
    assert_eq!(rx.reassembly().buffered_bytes(), 0, "seed {seed}");
    assert_eq!(rx.reassembly().buffered_chunks(), 0, "seed {seed}");
    (messages, Run { delivered, rounds })
}

fn check(seed: u64, messages: &[Sent], run: &Run) {
    let mut seen = vec![false; messages.len()];
    let mut last_ordered: BTreeMap<StreamId, usize> = BTreeMap::new();
    for m in &run.delivered {
        let id = m.ppid.0 as usize;
        let sent = &messages[id];
        assert!(!seen[id], "seed {seed}: message {id} delivered twice");
        seen[id] = true;
        assert_eq!(m.payload, sent.payload, "seed {seed}: message {id} bytes");
        assert_eq!((m.stream, m.unordered), (sent.stream, !sent.ordered));
        if sent.ordered {
            let previous = last_ordered.insert(m.stream, id);
            assert!(
                previous.is_none_or(|p| p < id),
                "seed {seed}: message {id} after {previous:?} on {:?}",
                m.stream
            );
        }
    }
    for (id, sent) in messages.iter().enumerate() {
        assert!(seen[id] || sent.abandoned, "seed {seed}: message {id} lost");
    }
}

#[test]
fn every_message_arrives_once_in_order_byte_for_byte() {
    for seed in 0..12 {
        let initial = if seed % 3 == 0 {
            Tsn(u32::MAX - 700) // the TSNs wrap during the run
        } else {
            Tsn(seed as u32 * 7919)
        };
        let (messages, run) = exchange(seed, initial, 600, false, seed % 2 == 0);
        check(seed, &messages, &run);
        assert_eq!(run.delivered.len(), messages.len(), "seed {seed}");
        assert!(run.rounds > 1);
    }
}

#[test]
fn abandoned_messages_never_block_the_rest() {
    for seed in 100..112 {
        let initial = if seed % 2 == 0 {
            Tsn(u32::MAX - 300)
        } else {
            Tsn(1)
        };
        let (messages, run) = exchange(seed, initial, 600, true, seed % 4 < 2);
        check(seed, &messages, &run);
        let abandoned = messages.iter().filter(|m| m.abandoned).count();
        assert!(abandoned > 0, "seed {seed}: the run abandoned nothing");
    }
}

#[test]
fn hostile_input_never_panics_and_stays_bounded() {
    let limits = RxLimits {
        tracker: TrackerLimits {
            max_tsn_ahead: 300,
            max_gap_blocks: 16,
            max_duplicates: 8,
            ..TrackerLimits::default()
        },
        reassembly: ReassemblyLimits {
            receive_window_bytes: 8_000,
            max_message_bytes: 2_000,
            max_buffered_chunks: 64,
            inbound_streams: 6,
        },
    };
    let (mut gaps, mut dups) = (Vec::<GapAckBlock>::new(), Vec::new());
    for seed in 0..20u64 {
        let mut rng = ChaCha8Rng::seed_from_u64(0xbad_5eed + seed);
        let initial = Tsn(rng.next_u32());
        let mut rx = Receiver::new(initial, limits);
        for _ in 0..20_000 {
            // Mostly near the cumulative TSN, sometimes anywhere.
            let near = rx.tracker().cumulative_tsn().add(below(&mut rng, 400));
            let tsn = if chance(&mut rng, 5) {
                Tsn(rng.next_u32())
            } else {
                near
            };
            match below(&mut rng, 100) {
                0..3 => {
                    let skipped: Vec<(StreamId, Ssn)> = (0..below(&mut rng, 4))
                        .map(|_| {
                            (
                                StreamId(below(&mut rng, 8) as u16),
                                Ssn(rng.next_u32() as u16),
                            )
                        })
                        .collect();
                    rx.handle_forward_tsn(tsn, &skipped);
                }
                3 => {
                    let streams = [StreamId(below(&mut rng, 8) as u16)];
                    let list: &[StreamId] = if chance(&mut rng, 50) { &streams } else { &[] };
                    let _ = rx.reset_streams(list, tsn);
                }
                _ => {
                    let flags = rng.next_u32();
                    let largest = if chance(&mut rng, 5) { 3_000 } else { 200 };
                    let len = below(&mut rng, largest);
                    let _ = rx.handle_data(DataIn {
                        tsn,
                        stream: StreamId(below(&mut rng, 8) as u16),
                        ssn: Ssn(below(&mut rng, 6) as u16),
                        ppid: Ppid(flags),
                        unordered: flags & 1 != 0,
                        begin: flags & 2 != 0,
                        end: flags & 4 != 0,
                        immediate_ack: flags & 8 != 0,
                        payload: Bytes::from(vec![0u8; len as usize]),
                    });
                }
            }
            if chance(&mut rng, 30) {
                rx.end_of_packet();
            }
            if chance(&mut rng, 20) {
                std::iter::from_fn(|| rx.pop_message()).for_each(drop);
            }
            if chance(&mut rng, 10) {
                rx.build_sack(&mut gaps, &mut dups);
                assert!(gaps.len() <= 16 && dups.len() <= 8, "seed {seed}");
            }
            let r = rx.reassembly();
            assert!(r.buffered_bytes() <= 8_000, "seed {seed}");
            assert!(r.buffered_chunks() <= 64, "seed {seed}");
            let window = r.limits().receive_window_bytes as usize;
            assert_eq!(rx.a_rwnd() as usize, window - r.buffered_bytes());
        }
    }
}
