//! Seeded randomized test: the whole send side, wired as an association's pass would
//! wire it, against a model receiver over links that lose, delay and reorder packets.
//! A failing seed is a reproducible case.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use bytes::Bytes;
use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};

use super::*;
use crate::sctp::num::Tsn;

const MTU: usize = DEFAULT_SCTP_MTU;
const INITIAL_TSN: u32 = u32::MAX - 200;

/// What travels between the endpoints.
#[derive(Debug)]
enum Packet {
    Data {
        forward_tsn: Option<(Tsn, Vec<(StreamId, Ssn)>)>,
        chunks: Vec<(Tsn, DataToSend)>,
    },
    Sack {
        cum: Tsn,
        blocks: Vec<(u16, u16)>,
        a_rwnd: u32,
    },
}

/// The send side, wired in the order `tx`'s module documentation gives.
struct Sender {
    sq: SendQueue,
    rq: RetransmissionQueue,
    cc: CongestionControl,
    rto: RtoEstimator,
    t3: Option<Time>,
    forward_tsn_due: bool,
    fast_retransmit_now: bool,
    payload_acked: usize,
    discards: Vec<(StreamId, MessageId)>,
    max_rq_len: usize,
}

impl Sender {
    fn new(receiver_window: usize) -> Sender {
        Sender {
            sq: SendQueue::new(SendQueueConfig {
                outbound_streams: 8,
                max_message_size: 8 * 1024,
                max_buffered_total: 64 * 1024,
                max_buffered_per_stream: 32 * 1024,
                ..SendQueueConfig::default()
            }),
            rq: RetransmissionQueue::new(
                RetransmissionQueueConfig {
                    max_outstanding_chunks: 512,
                    ..RetransmissionQueueConfig::default()
                },
                Tsn(INITIAL_TSN),
                receiver_window as u32,
            ),
            cc: CongestionControl::new(&CongestionConfig::default()),
            rto: RtoEstimator::new(&RtoConfig {
                initial: Duration::from_millis(200),
                min: Duration::from_millis(100),
                ..RtoConfig::default()
            }),
            t3: None,
            forward_tsn_due: false,
            fast_retransmit_now: false,
            payload_acked: 0,
            discards: Vec::new(),
            max_rq_len: 0,
        }
    }

    fn apply_discards(&mut self) {
        self.rq.take_discards(&mut self.discards);
        for (stream, id) in self.discards.drain(..) {
            self.sq.discard_message(stream, id);
        }
    }

    fn on_sack(&mut self, now: Time, cum: Tsn, blocks: &[(u16, u16)], a_rwnd: u32) {
        let in_fr = self.cc.in_fast_recovery();
        let Ok(out) = self
            .rq
            .handle_sack(now, cum, blocks.iter().copied(), a_rwnd, in_fr)
        else {
            return; // reordered: out of date
        };
        self.payload_acked += out.payload_bytes_acked;
        if self.cc.on_sack(&out) {
            self.fast_retransmit_now = true;
        }
        if let Some(rtt) = out.rtt_sample {
            self.rto.on_rtt_sample(rtt);
        }
        self.apply_discards();
        // RFC 9260 §6.3.2 R2, R3, R4; RFC 3758 §3.5 C5 (a T3-rtx runs while a FORWARD-TSN
        // is owed, so a lost one is sent again).
        let mut scratch = Vec::new();
        let forward_owed = self.rq.forward_tsn(&mut scratch).is_some();
        if out.all_acked && !forward_owed {
            self.t3 = None;
        } else if out.newly_acked_cumulative || self.t3.is_none() {
            self.t3 = Some(now + self.rto.rto());
        }
        self.forward_tsn_due = forward_owed;
    }

    fn on_t3(&mut self, now: Time) {
        self.rto.on_t3_expiry();
        self.cc.on_t3_expiry();
        self.rq.handle_t3_expiry(now);
        self.apply_discards();
        self.t3 = None;
        let mut scratch = Vec::new();
        self.forward_tsn_due = self.rq.forward_tsn(&mut scratch).is_some();
        if self.forward_tsn_due {
            self.t3 = Some(now + self.rto.rto());
        }
    }

    fn transmit(&mut self, now: Time, out: &mut Vec<Packet>) {
        self.cc.on_idle(now, self.rto.rto());
        for _ in 0..64 {
            let mut room = MTU - COMMON_HEADER_LEN;
            let mut forward_tsn = None;
            if self.forward_tsn_due {
                let mut streams = Vec::new();
                if let Some(new_cum) = self.rq.forward_tsn(&mut streams) {
                    room -= 8 + 4 * streams.len();
                    forward_tsn = Some((new_cum, streams));
                }
                self.forward_tsn_due = false;
            }
            let mut chunks = Vec::new();
            let bypass = std::mem::take(&mut self.fast_retransmit_now);
            // §6.1 C: retransmissions first, limited by cwnd (§7.2.4 rule 3: not the first
            // fast retransmit packet).
            while room > DATA_CHUNK_HEADER_LEN
                && (bypass || self.cc.can_send(self.rq.bytes_in_flight(), usize::MAX, 0))
            {
                let Some((tsn, data)) = self
                    .rq
                    .next_retransmission(now, room - DATA_CHUNK_HEADER_LEN)
                else {
                    break;
                };
                room -= data.chunk_len();
                chunks.push((tsn, data.clone()));
            }
            self.apply_discards();
            // §6.1 E: new data as rules A and B allow.
            while !self.rq.has_retransmissions()
                && room > DATA_CHUNK_HEADER_LEN
                && self.rq.can_add()
                && self.sq.has_data()
            {
                let max = (room - DATA_CHUNK_HEADER_LEN) & !3;
                let rwnd = self.rq.peer_rwnd();
                let in_flight = self.rq.bytes_in_flight();
                // A zero window probe may be a full chunk (§6.1 A).
                let limit = if rwnd >= max || in_flight == 0 {
                    max
                } else {
                    rwnd & !3
                };
                if limit == 0 || !self.cc.can_send(in_flight, rwnd, limit) {
                    break;
                }
                let Some(chunk) = self.sq.produce(now, limit) else {
                    break;
                };
                if let Some((tsn, stored)) = self.rq.add(now, chunk) {
                    room -= stored.chunk_len();
                    chunks.push((tsn, stored.clone()));
                }
                self.apply_discards();
            }
            self.max_rq_len = self.max_rq_len.max(self.rq.len());
            if chunks.is_empty() && forward_tsn.is_none() {
                break;
            }
            if !chunks.is_empty() {
                self.cc.on_transmit(now);
                if self.t3.is_none() {
                    self.t3 = Some(now + self.rto.rto()); // §6.3.2 R1
                }
            }
            out.push(Packet::Data {
                forward_tsn,
                chunks,
            });
        }
    }
}

/// A receiver that acknowledges every packet and reassembles messages by TSN runs.
struct Receiver {
    /// Receive buffer size; a_rwnd is what incomplete messages leave of it.
    window: usize,
    /// Unwrapped cumulative TSN.
    cum: u64,
    received_above: BTreeSet<u64>,
    held: BTreeMap<u64, DataToSend>,
    delivered: Vec<(u64, DataToSend, Bytes)>,
    duplicates: usize,
}

impl Receiver {
    fn new(window: usize) -> Receiver {
        Receiver {
            window,
            cum: (1u64 << 32) + u64::from(INITIAL_TSN) - 1,
            received_above: BTreeSet::new(),
            held: BTreeMap::new(),
            delivered: Vec::new(),
            duplicates: 0,
        }
    }

    fn unwrap(&self, tsn: Tsn) -> u64 {
        let base = Tsn(self.cum as u32);
        if tsn.is_after(base) {
            self.cum + u64::from(tsn.distance_from(base))
        } else {
            self.cum - u64::from(base.distance_from(tsn))
        }
    }

    fn on_data(
        &mut self,
        forward_tsn: Option<(Tsn, Vec<(StreamId, Ssn)>)>,
        chunks: Vec<(Tsn, DataToSend)>,
    ) -> Packet {
        if let Some((new_cum, _)) = forward_tsn {
            // RFC 3758 §3.6: treat everything up to New Cumulative TSN as received.
            let new_cum = self.unwrap(new_cum);
            if new_cum > self.cum {
                self.cum = new_cum;
            }
        }
        for (tsn, data) in chunks {
            let t = self.unwrap(tsn);
            if t <= self.cum || !self.received_above.insert(t) {
                self.duplicates += 1;
                continue;
            }
            self.held.insert(t, data);
        }
        while self.received_above.remove(&(self.cum + 1)) {
            self.cum += 1;
        }
        let cum = self.cum;
        self.received_above.retain(|&t| t > cum);
        self.reassemble();
        let held_bytes: usize = self.held.values().map(|d| d.payload.len()).sum();
        Packet::Sack {
            cum: Tsn(self.cum as u32),
            blocks: self.gap_blocks(),
            a_rwnd: self.window.saturating_sub(held_bytes) as u32,
        }
    }

    /// Delivers complete B..E runs; drops runs with a hole the cumulative TSN has passed.
    fn reassemble(&mut self) {
        let keys: Vec<u64> = self.held.keys().copied().collect();
        let mut i = 0;
        while i < keys.len() {
            let start = keys[i];
            let first = &self.held[&start];
            let mut j = i;
            let complete = if first.begin {
                while !self.held[&keys[j]].end && j + 1 < keys.len() && keys[j + 1] == keys[j] + 1 {
                    j += 1;
                    // A new message's B right after an unfinished one would be merged
                    // into it by a receiver that goes by TSN adjacency alone.
                    assert!(!self.held[&keys[j]].begin, "B fragment inside a message");
                }
                self.held[&keys[j]].end
            } else {
                false
            };
            if complete {
                let mut data = Vec::new();
                for k in &keys[i..=j] {
                    data.extend_from_slice(&self.held[k].payload);
                }
                let head = self.held[&start].clone();
                for k in &keys[i..=j] {
                    self.held.remove(k);
                }
                self.delivered.push((start, head, Bytes::from(data)));
            } else {
                // The run's next TSN (or, without a B, its previous one) will never come
                // if the cumulative TSN is past it.
                let hole = if first.begin { keys[j] + 1 } else { start - 1 };
                if hole <= self.cum && !self.received_above.contains(&hole) {
                    for k in &keys[i..=j] {
                        self.held.remove(k);
                    }
                }
            }
            i = j + 1;
        }
    }

    fn gap_blocks(&self) -> Vec<(u16, u16)> {
        let mut blocks: Vec<(u16, u16)> = Vec::new();
        for &t in &self.received_above {
            let Ok(off) = u16::try_from(t - self.cum) else {
                break;
            };
            if let Some(last) = blocks.last_mut()
                && last.1 + 1 == off
            {
                last.1 = off;
            } else if blocks.len() == 16 {
                break;
            } else {
                blocks.push((off, off));
            }
        }
        blocks
    }
}

struct Rng(ChaCha8Rng);

impl Rng {
    fn below(&mut self, n: u32) -> u32 {
        self.0.next_u32() % n
    }
    fn chance(&mut self, percent: u32) -> bool {
        self.below(100) < percent
    }
}

struct Run {
    delivered: Vec<(u64, DataToSend, Bytes)>,
    sent: HashMap<MessageId, (StreamId, Bytes, Reliability, bool)>,
    reliable_bytes: usize,
    all_reliable: bool,
    sender: Sender,
}

fn run(seed: u64, all_reliable: bool) -> Run {
    let mut rng = Rng(ChaCha8Rng::seed_from_u64(seed));
    let loss = rng.below(20);
    // Small windows make the sender rwnd-limited, down to zero window probes (§6.1 A).
    let window = 1024 * (2 + rng.below(63) as usize);
    let mut sender = Sender::new(window);
    let mut receiver = Receiver::new(window);
    // (deliver at, sequence, to receiver?, packet)
    let mut wire: Vec<(Time, u64, bool, Packet)> = Vec::new();
    let mut seq = 0u64;
    let mut pending: Vec<OutgoingMessage> = (0..300)
        .map(|i| {
            let max_len = if rng.chance(20) { 6000 } else { 400 };
            let len = 1 + rng.below(max_len) as usize;
            let policy = if all_reliable || rng.chance(60) {
                Reliability::Reliable
            } else if rng.chance(50) {
                Reliability::MaxRetransmits(rng.below(3) as u16)
            } else {
                Reliability::MaxLifetime(Duration::from_millis(u64::from(50 + rng.below(400))))
            };
            OutgoingMessage {
                ppid: Ppid::BINARY,
                payload: Bytes::from(vec![(i % 251) as u8; len]),
                unordered: rng.chance(30),
                policy,
            }
        })
        .collect();
    pending.reverse();
    let mut sent = HashMap::new();
    let mut reliable_bytes = 0;
    let mut now = Time::ZERO;
    let mut outgoing = Vec::new();
    for _step in 0..200_000 {
        // The application sends while the buffer takes it (back-pressure).
        while let Some(msg) = pending.last() {
            let stream = StreamId((pending.len() % 5) as u16);
            match sender.sq.send(now, stream, msg.clone()) {
                Ok(id) => {
                    let msg = pending.pop().unwrap();
                    if msg.policy == Reliability::Reliable {
                        reliable_bytes += msg.payload.len();
                    }
                    sent.insert(id, (stream, msg.payload, msg.policy, msg.unordered));
                }
                Err(SendError::WouldBlock) => break,
                Err(e) => panic!("send: {e}"),
            }
        }
        sender.transmit(now, &mut outgoing);
        for packet in outgoing.drain(..) {
            if !rng.chance(loss) {
                let delay = Duration::from_millis(u64::from(20 + rng.below(10)));
                wire.push((now + delay, seq, true, packet));
                seq += 1;
            }
        }
        let done = pending.is_empty() && !sender.sq.has_data() && sender.rq.is_empty();
        if done && wire.is_empty() {
            break;
        }
        // Jump to the next event: a delivery or the T3-rtx deadline.
        let next_wire = wire.iter().map(|w| (w.0, w.1)).min();
        let next = match (next_wire, sender.t3) {
            (Some((t, _)), Some(t3)) => t.min(t3),
            (Some((t, _)), None) => t,
            (None, Some(t3)) => t3,
            (None, None) => panic!("seed {seed}: stalled with nothing scheduled"),
        };
        now = next;
        if sender.t3.is_some_and(|t3| t3 <= now) {
            sender.on_t3(now);
        }
        while let Some(pos) = wire.iter().position(|w| w.0 <= now) {
            let (_, _, to_receiver, packet) = wire.swap_remove(pos);
            match packet {
                Packet::Data {
                    forward_tsn,
                    chunks,
                } => {
                    debug_assert!(to_receiver);
                    let sack = receiver.on_data(forward_tsn, chunks);
                    if !rng.chance(loss) {
                        let delay = Duration::from_millis(u64::from(20 + rng.below(10)));
                        wire.push((now + delay, seq, false, sack));
                        seq += 1;
                    }
                }
                Packet::Sack {
                    cum,
                    blocks,
                    a_rwnd,
                } => sender.on_sack(now, cum, &blocks, a_rwnd),
            }
        }
    }
    assert!(
        pending.is_empty() && !sender.sq.has_data() && sender.rq.is_empty(),
        "seed {seed}: did not finish (loss {loss} %)"
    );
    Run {
        delivered: receiver.delivered,
        sent,
        reliable_bytes,
        all_reliable,
        sender,
    }
}

fn check(seed: u64, r: &Run) {
    // Nothing left in flight, nothing queued.
    assert_eq!(r.sender.rq.bytes_in_flight(), 0, "seed {seed}");
    assert_eq!(r.sender.rq.payload_bytes_in_flight(), 0, "seed {seed}");
    assert_eq!(r.sender.sq.total_buffered_amount(), 0, "seed {seed}");
    assert!(r.sender.max_rq_len <= 512, "seed {seed}");
    // Every delivered message is intact and delivered once.
    let mut seen = HashMap::new();
    for (_, head, bytes) in &r.delivered {
        let (stream, payload, _, _) = &r.sent[&head.message_id];
        assert_eq!(head.stream, *stream, "seed {seed}");
        assert_eq!(bytes, payload, "seed {seed}: message {:?}", head.message_id);
        assert!(
            seen.insert(head.message_id, ()).is_none(),
            "seed {seed}: delivered twice"
        );
    }
    // Every reliable message arrived.
    for (id, (_, _, policy, _)) in &r.sent {
        if *policy == Reliability::Reliable {
            assert!(seen.contains_key(id), "seed {seed}: reliable {id:?} lost");
        }
    }
    // Ordered messages arrive in SSN order per stream, TSN order being send order.
    let mut last_ssn: HashMap<StreamId, Ssn> = HashMap::new();
    let mut by_tsn: Vec<_> = r
        .delivered
        .iter()
        .filter(|(_, h, _)| !h.unordered)
        .collect();
    by_tsn.sort_by_key(|(tsn, _, _)| *tsn);
    for (_, head, _) in by_tsn {
        if let Some(prev) = last_ssn.insert(head.stream, head.ssn) {
            if r.all_reliable {
                assert_eq!(head.ssn, prev.next(), "seed {seed}");
            } else {
                assert!(head.ssn.is_after(prev), "seed {seed}");
            }
        }
    }
    if r.all_reliable {
        // Each byte was newly acked exactly once: the sums agree.
        assert_eq!(r.sender.payload_acked, r.reliable_bytes, "seed {seed}");
    } else {
        assert!(r.sender.payload_acked <= r.sent.values().map(|s| s.1.len()).sum());
    }
}

#[test]
fn reliable_messages_arrive_exactly_once_under_loss() {
    // RFC 9260 §6 end to end: retransmission (fast and T3), congestion control and the
    // RTO estimator together deliver every reliable byte once, and flightsize returns to 0.
    for seed in 0..64 {
        let r = run(seed, true);
        check(seed, &r);
    }
}

#[test]
fn partially_reliable_messages_are_abandoned_cleanly() {
    // RFC 3758 / RFC 8831: abandoned messages go with all their fragments, FORWARD-TSN
    // moves the peer on, reliable messages still all arrive, nothing leaks.
    let mut abandoned = 0;
    for seed in 100..164 {
        let r = run(seed, false);
        check(seed, &r);
        abandoned += r.sender.rq.stats().abandoned_messages + r.sender.sq.stats().expired_unsent;
    }
    assert!(abandoned > 0, "the scenarios exercised abandonment");
}
