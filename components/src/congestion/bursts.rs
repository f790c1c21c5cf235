//! Which bursts the path to a peer drains at once: the evidence that sizes the
//! pacer's bursts ([`super::pacer::Pacer::refill`]).
//!
//! Packets the pacer sends in one egress pass (one send time) leave together; the
//! narrowest link on the path spreads them by the time it takes to serve them, and
//! the peer's feedback shows that spread in their arrival times. What crossed after
//! a burst's first arrival (its largest packet counted out), over its spread plus
//! the 250 µs feedback's ticks can hide, is at least the rate the path served it
//! at; a burst that took longer than half the delay detector's `burst_time`
//! (draft-ietf-rmcat-gcc-02 §5.2) to cross, or lost a packet, did not drain. One
//! that drained earns the burst that rate carries within that half, tick aside,
//! which so drains again and never reads as a delay gradient the detector would
//! take for over-use; but no more than [`GROWTH`] times what crossed, so that
//! bursts grow only from what the path was seen to take.
//!
//! Whole bursts, not pairs of packets, are the evidence: a pair crosses a
//! token-bucket shaper or a time-slotted radio at its line rate whatever rate it
//! sustains (packet-pair dispersion measures capacity, not what a train gets:
//! Dovrolis, Ramanathan and Moore, "What do packet dispersion techniques measure?",
//! INFOCOM 2001). A burst past a shaper's bucket spreads; and one that did not drain
//! vetoes every allowance of half its size or more (the least it can have been sent
//! on), as an over-use vetoes the allowance in force ([`Bursts::over_use`]), for
//! [`EVIDENCE_WINDOW_US`]. The veto also keeps
//! bursts that random delay happened to bunch on a narrow link from counting, since
//! their like spread more often. The allowance is the most a burst that drained
//! earned among what nothing vetoes, once [`MIN_DRAINED`] drained. Whatever it says,
//! the pacer sends at most `--pacer-burst-ms` of its rate at once (40 ms, as
//! libwebrtc's pacer always may).

use std::collections::VecDeque;

use crate::rtcp::twcc::DELTA_TICK_US;

/// Packets whose send times lie at most this far from their burst's first went in
/// the same burst: shoal stamps every packet of one egress pass with the pass's time.
pub const SAME_BURST_US: i64 = 100;
/// A burst drained when its packets arrived at most this far apart, the tick
/// feedback can hide included: half of `burst_time` (draft-ietf-rmcat-gcc-02 §5.2,
/// [`super::gcc::BURST_TIME_US`]). Two 1 200-byte packets drain on a link of
/// 4.2 Mbit/s or more.
pub const DRAINED_WITHIN_US: i64 = super::gcc::BURST_TIME_US / 2;
/// How much larger than what crossed after its first packet the burst a drained
/// one earns may be. Bursts arrive at the node as the publishers send them, a
/// frame's packets over a few passes, so the bursts a subscriber is sent are mostly
/// two or three packets: the allowance must grow from those to let a keyframe go at
/// once (bench/README.md, "Bursts as the path drains them").
pub const GROWTH: i64 = 8;
/// How long a burst counts as evidence, after it was sent: long enough to span the
/// gaps between the largest bursts a subscriber is sent (a keyframe's).
pub const EVIDENCE_WINDOW_US: i64 = 10_000_000;
/// Bursts that must have drained over the window before any allowance.
pub const MIN_DRAINED: usize = 4;
/// Bursts of each kind kept at most.
pub const MAX_EVIDENCE: usize = 64;
/// How far back the bursts sent lately reach, for the veto an over-use sets: a
/// round trip and a feedback interval or two.
pub const IN_FORCE_US: i64 = 1_000_000;

const _: () = assert!(DRAINED_WITHIN_US >= 2 * DELTA_TICK_US);

/// The burst being read from feedback.
#[derive(Clone, Copy, Debug)]
struct Reading {
    last_seq: u64,
    first_send_us: i64,
    bytes: i64,
    largest: i64,
    packets: u32,
    /// The earliest and latest arrival, once a packet of it arrived.
    arrivals: Option<(i64, i64)>,
    /// A packet of it was reported lost.
    lost: bool,
}

/// One burst read: when it was sent (µs, shard clock) and what it says, in bytes:
/// for one that drained, the burst it earns; for one that did not, its size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Burst {
    send_us: i64,
    bytes: i64,
}

/// The bursts a peer's feedback told of, recent ones only, and what they allow.
///
/// Of the bursts that drained, none is kept that is older than a newer one earning
/// as much (what they earn falls from oldest to newest); of those that did not,
/// none older than a newer one no larger (sizes rise). Dropping an older, smaller
/// earning errs toward less; dropping an older, larger veto loses nothing, since the
/// newer smaller one vetoes more for longer.
#[derive(Clone, Debug, Default)]
pub struct Bursts {
    reading: Option<Reading>,
    /// The highest sequence number read: a packet reported again (lost, then
    /// received) comes out of order and is no part of a burst.
    highest_seq: Option<u64>,
    drained: VecDeque<Burst>,
    spread: VecDeque<Burst>,
    /// When the last [`MIN_DRAINED`] bursts that drained were sent.
    recent_drained: VecDeque<i64>,
    /// The largest burst read lately: when it was sent, its bytes.
    largest_sent: Option<(i64, i64)>,
    /// When the last over-use was told of (shard clock).
    over_use_at: Option<i64>,
}

impl Bursts {
    /// One packet the feedback told of, in sequence order: its extended transport-wide
    /// sequence number `seq`, its send time, its arrival (`None`: lost) and size.
    pub fn packet(&mut self, seq: u64, send_us: i64, arrival_us: Option<i64>, size: u16) {
        if self.highest_seq.is_some_and(|h| seq <= h) {
            return;
        }
        self.highest_seq = Some(seq);
        let size = i64::from(size);
        if let Some(r) = self.reading.as_mut()
            && seq == r.last_seq.wrapping_add(1)
            && (0..=SAME_BURST_US).contains(&send_us.saturating_sub(r.first_send_us))
        {
            r.last_seq = seq;
            r.bytes = r.bytes.saturating_add(size);
            r.largest = r.largest.max(size);
            r.packets += 1;
            match arrival_us {
                Some(a) => {
                    r.arrivals = Some(r.arrivals.map_or((a, a), |(f, l)| (f.min(a), l.max(a))))
                }
                None => r.lost = true,
            }
            return;
        }
        if let Some(r) = self.reading.take() {
            self.close(r);
        }
        self.reading = Some(Reading {
            last_seq: seq,
            first_send_us: send_us,
            bytes: size,
            largest: size,
            packets: 1,
            arrivals: arrival_us.map(|a| (a, a)),
            lost: arrival_us.is_none(),
        });
    }

    /// A burst read to its end.
    fn close(&mut self, r: Reading) {
        if r.packets < 2 {
            return;
        }
        let spread = match r.arrivals {
            Some((first, last)) if !r.lost => last.saturating_sub(first),
            // It lost a packet: it did not drain.
            _ => i64::MAX,
        };
        self.remember_sent(r.first_send_us, r.bytes);
        // Feedback's ticks can hide up to one of spread.
        let spread = spread.saturating_add(DELTA_TICK_US);
        if spread > DRAINED_WITHIN_US {
            // The pacer sent it on an allowance of at least half its bytes (its
            // budget ran past zero by at most a packet, and it counts packets
            // before SRTP's tag): that allowance, and any larger, is vetoed.
            self.push_spread(r.first_send_us, r.bytes / 2);
            return;
        }
        // Bursts sent before an over-use the feedback already told of are no
        // evidence, though their own feedback comes after it.
        if self.over_use_at.is_some_and(|t| r.first_send_us <= t) {
            return;
        }
        // What crossed after the first packet to arrive, over the time it took: at
        // least the rate the path served it at (the largest packet counted out, as
        // reordering may have let any packet arrive first). The burst it earns
        // crosses within DRAINED_WITHIN_US at that rate, tick included, so that it
        // drains again rather than vetoing itself; and it is at most GROWTH times
        // what crossed.
        let crossed = r.bytes.saturating_sub(r.largest).max(0);
        let window = DRAINED_WITHIN_US - DELTA_TICK_US;
        let by_rate = (i128::from(crossed) * i128::from(window) / i128::from(spread))
            .min(i128::from(i64::MAX)) as i64;
        let earned = by_rate.min(crossed.saturating_mul(GROWTH));
        self.push_drained(r.first_send_us, earned);
    }

    /// Keeps the largest burst sent within [`IN_FORCE_US`] of the newest.
    fn remember_sent(&mut self, send_us: i64, bytes: i64) {
        let keep = self
            .largest_sent
            .filter(|&(t, b)| send_us.saturating_sub(t) <= IN_FORCE_US && b > bytes);
        self.largest_sent = keep.or(Some((send_us, bytes)));
    }

    /// Drops what is older than the window before `send_us`.
    fn expire(&mut self, send_us: i64) {
        let old = |b: &Burst| send_us.saturating_sub(b.send_us) > EVIDENCE_WINDOW_US;
        for list in [&mut self.drained, &mut self.spread] {
            while list.front().is_some_and(old) {
                list.pop_front();
            }
        }
    }

    /// Records a burst that drained and earned `earned` bytes.
    fn push_drained(&mut self, send_us: i64, earned: i64) {
        self.expire(send_us);
        while self.drained.back().is_some_and(|b| b.bytes <= earned) {
            self.drained.pop_back();
        }
        if self.drained.len() < MAX_EVIDENCE {
            self.drained.push_back(Burst {
                send_us,
                bytes: earned,
            });
        }
        if self.recent_drained.len() == MIN_DRAINED {
            self.recent_drained.pop_front();
        }
        self.recent_drained.push_back(send_us);
    }

    /// Records a burst of `bytes` that did not drain: a veto on allowances as large.
    fn push_spread(&mut self, send_us: i64, bytes: i64) {
        self.expire(send_us);
        while self.spread.back().is_some_and(|b| b.bytes >= bytes) {
            self.spread.pop_back();
        }
        if self.spread.len() < MAX_EVIDENCE {
            self.spread.push_back(Burst { send_us, bytes });
        } else if let Some(back) = self.spread.back_mut() {
            // Full: the smaller veto lasts as long as this one would.
            back.send_us = send_us;
        }
    }

    /// An over-use at `now_us` (shard clock): what drained before is no evidence
    /// now, nor what was sent before it; and the allowance in force, which may
    /// have caused it, is vetoed at the least it can have been: the allowance, or
    /// half the largest burst lately sent on it, if less (the pacer may have held
    /// bursts below the allowance).
    pub fn over_use(&mut self, now_us: i64) {
        let sent = self
            .largest_sent
            .filter(|&(t, _)| now_us.saturating_sub(t) <= IN_FORCE_US)
            .map(|(_, b)| b / 2);
        if let Some(v) = [self.allowed(now_us), sent].into_iter().flatten().min() {
            self.push_spread(now_us, v);
        }
        self.drained.clear();
        self.recent_drained.clear();
        self.over_use_at = Some(now_us);
    }

    /// The bursts of `list` sent within [`EVIDENCE_WINDOW_US`] before `now_us`.
    fn recent(list: &VecDeque<Burst>, now_us: i64) -> impl Iterator<Item = &Burst> {
        list.iter()
            .filter(move |b| now_us.saturating_sub(b.send_us) <= EVIDENCE_WINDOW_US)
    }

    /// The largest burst the path has earned lately, bytes, vetoes aside.
    pub fn earned(&self, now_us: i64) -> Option<i64> {
        Self::recent(&self.drained, now_us).next().map(|b| b.bytes)
    }

    /// The largest burst to send at `now_us`, bytes: the most a burst that drained
    /// lately earned, among what no burst that did not drain vetoes, once
    /// [`MIN_DRAINED`] drained.
    pub fn allowed(&self, now_us: i64) -> Option<i64> {
        let enough = self.recent_drained.len() == MIN_DRAINED
            && self
                .recent_drained
                .front()
                .is_some_and(|&t| now_us.saturating_sub(t) <= EVIDENCE_WINDOW_US);
        if !enough {
            return None;
        }
        let vetoed_from = Self::recent(&self.spread, now_us)
            .next()
            .map_or(i64::MAX, |b| b.bytes);
        Self::recent(&self.drained, now_us)
            .map(|b| b.bytes)
            .find(|&a| a < vetoed_from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A path: a line of `line_bps`, a token bucket of `bucket` bytes filled at
    /// `rate_bps` (none: no shaper), 10 ms of delay after, and per-packet random
    /// delay up to `jitter_us` (order kept).
    struct Path {
        line_bps: f64,
        bucket: Option<(f64, f64)>,
        jitter_us: i64,
        tokens: f64,
        tokens_at: i64,
        line_free: i64,
        last_arrival: i64,
        seed: u64,
        seq: u64,
    }

    impl Path {
        fn new(line_bps: f64, bucket: Option<(f64, f64)>, jitter_us: i64) -> Path {
            Path {
                line_bps,
                bucket,
                jitter_us,
                tokens: bucket.map_or(0.0, |b| b.0),
                tokens_at: 0,
                line_free: 0,
                last_arrival: 0,
                seed: 0x9e37_79b9_7f4a_7c15,
                seq: 0,
            }
        }

        /// Sends a burst of `n` packets of `size` at `send`, into `bursts`.
        fn burst(&mut self, bursts: &mut Bursts, send: i64, n: usize, size: u16) {
            for _ in 0..n {
                let mut t = self.line_free.max(send);
                if let Some((depth, rate)) = self.bucket {
                    let filled = (t - self.tokens_at) as f64 * rate / 8e6;
                    self.tokens = (self.tokens + filled).min(depth);
                    self.tokens_at = t;
                    if self.tokens < f64::from(size) {
                        t += ((f64::from(size) - self.tokens) * 8e6 / rate) as i64;
                        self.tokens = f64::from(size);
                        self.tokens_at = t;
                    }
                    self.tokens -= f64::from(size);
                }
                self.line_free = t + (f64::from(size) * 8e6 / self.line_bps) as i64;
                self.seed ^= self.seed << 13;
                self.seed ^= self.seed >> 7;
                self.seed ^= self.seed << 17;
                let jitter = if self.jitter_us == 0 {
                    0
                } else {
                    (self.seed % self.jitter_us as u64) as i64
                };
                // Feedback's 250 µs ticks.
                let arrival = (self.line_free + 10_000 + jitter).max(self.last_arrival);
                self.last_arrival = arrival;
                let ticked = arrival / DELTA_TICK_US * DELTA_TICK_US;
                bursts.packet(self.seq, send, Some(ticked), size);
                self.seq += 1;
            }
        }
    }

    /// Bursts of `n` packets every 33 ms for a second; returns the time after.
    fn frames(path: &mut Path, bursts: &mut Bursts, from: i64, n: usize) -> i64 {
        let mut t = from;
        for _ in 0..30 {
            path.burst(bursts, t, n, 1200);
            t += 33_000;
        }
        t
    }

    #[test]
    fn lucky_bursts_among_spread_ones_earn_nothing() {
        let mut b = Bursts::default();
        for i in 0..10u64 {
            let at = i as i64 * 33_000;
            // Bursts of two, spread by 3 ms, but every other bunched by chance.
            let spread = if i % 2 == 1 { 0 } else { 3_000 };
            b.packet(2 * i, at, Some(at + 10_000), 1200);
            b.packet(2 * i + 1, at, Some(at + 10_000 + spread), 1200);
        }
        assert!(b.earned(400_000).is_some());
        assert_eq!(b.allowed(400_000), None);
    }

    #[test]
    fn a_narrow_link_earns_nothing() {
        // 3 Mbit/s spreads two packets by 3.2 ms.
        let mut b = Bursts::default();
        let mut path = Path::new(3_000_000.0, None, 0);
        let t = frames(&mut path, &mut b, 0, 2);
        frames(&mut path, &mut b, t, 4);
        assert_eq!(b.allowed(2_000_000), None);
    }

    #[test]
    fn a_medium_link_earns_what_it_drains_in_burst_time() {
        // 8 Mbit/s spreads two packets by 1.2 ms: they drain, and earn what the rate
        // they show carries in 2.25 ms (the tick aside), at most 2 250 bytes of
        // 8 Mbit/s, not 8 times 1 200.
        let mut b = Bursts::default();
        let mut path = Path::new(8_000_000.0, None, 0);
        let t = frames(&mut path, &mut b, 0, 2);
        let allowed = b.allowed(t).unwrap();
        assert!((1_500..=2_250).contains(&allowed), "{allowed}");
    }

    #[test]
    fn a_fast_path_earns_growth_times_what_crossed() {
        let mut b = Bursts::default();
        let mut path = Path::new(1e9, None, 0);
        let t = frames(&mut path, &mut b, 0, 10);
        assert_eq!(b.allowed(t), Some(GROWTH * 9 * 1200));
        // The evidence lasts EVIDENCE_WINDOW_US from its sending, while
        // MIN_DRAINED bursts are in it. (The newest burst counts once a later
        // packet ends it: the last but one here.)
        let fourth_last = t - (1 + MIN_DRAINED as i64) * 33_000;
        assert_eq!(
            b.allowed(fourth_last + EVIDENCE_WINDOW_US),
            Some(GROWTH * 9 * 1200)
        );
        assert_eq!(b.allowed(fourth_last + EVIDENCE_WINDOW_US + 1), None);
    }

    #[test]
    fn a_shaper_vetoes_bursts_past_its_bucket() {
        // A 3 Mbit/s plan on a 1 Gbit/s line, with a 6 000-byte bucket: bursts of
        // 4 packets (4 800 bytes) cross at line rate, bursts of 8 wait for tokens.
        let mut b = Bursts::default();
        let mut path = Path::new(1e9, Some((6_000.0, 3_000_000.0)), 0);
        let mut t = frames(&mut path, &mut b, 0, 4);
        assert_eq!(b.allowed(t), Some(GROWTH * 3 * 1200));
        // The pacer sends what it is allowed: 8 packets do not drain, and veto
        // 9 600 bytes and more while they are recent, beside bursts of 4 that do.
        t = frames(&mut path, &mut b, t, 8);
        assert_eq!(b.allowed(t), None);
        t = frames(&mut path, &mut b, t, 4);
        assert_eq!(b.allowed(t), None);
        // Once they are old, the bursts of 4 earn as before.
        t = frames(&mut path, &mut b, t + EVIDENCE_WINDOW_US, 4);
        let allowed = b.allowed(t).unwrap();
        assert_eq!(allowed, GROWTH * 3 * 1200);
        // What the pacer sends on it, the allowance and a packet past it, spreads
        // and vetoes the allowance itself.
        let n = (allowed / 1200 + 1) as usize;
        t = frames(&mut path, &mut b, t, n);
        assert!(
            b.allowed(t).is_none_or(|a| a < allowed),
            "{:?}",
            b.allowed(t)
        );
    }

    #[test]
    fn jitter_on_a_narrow_link_earns_nothing() {
        // Up to 8 ms of random delay per packet where the link spaces two by 3.2:
        // bursts bunch by chance as often as not, and those that spread veto what
        // they earn; nothing is left above the pacer's least burst (1 500 bytes).
        let mut b = Bursts::default();
        let mut path = Path::new(3_000_000.0, None, 8_000);
        let mut t = 0;
        for _ in 0..10 {
            t = frames(&mut path, &mut b, t, 2);
            assert!(b.allowed(t).is_none_or(|a| a < 1_500), "{:?}", b.allowed(t));
        }
        assert!(
            b.earned(t).is_some(),
            "no burst bunched: the test tests nothing"
        );
    }

    #[test]
    fn a_loss_a_gap_or_an_over_use_take_evidence_back() {
        let mut b = Bursts::default();
        let mut path = Path::new(1e9, None, 0);
        let t = frames(&mut path, &mut b, 0, 5);
        assert_eq!(b.allowed(t), Some(GROWTH * 4 * 1200));
        // A burst of 5 that lost its last packet failed: nothing as large stands.
        for i in 0..4 {
            b.packet(1000 + i, t, Some(t + 10_000), 1200);
        }
        b.packet(1004, t, None, 1200);
        b.packet(1005, t + 33_000, Some(t + 43_000), 1200);
        assert_eq!(b.allowed(t + 33_000), None);
        // A burst whose first packet was lost fails too, and the one before it
        // still counts.
        let mut b = Bursts::default();
        let t = frames(&mut Path::new(1e9, None, 0), &mut b, 0, 5);
        b.packet(2000, t, Some(t + 10_000), 1200);
        b.packet(2001, t, Some(t + 10_000), 1200);
        b.packet(2002, t + 33_000, None, 1200);
        b.packet(2003, t + 33_000, Some(t + 43_000), 1200);
        b.packet(2004, t + 66_000, Some(t + 76_000), 1200);
        assert_eq!(b.allowed(t + 66_000), None);
        assert_eq!(b.recent_drained.back(), Some(&t));
        // Packets of one send time but not consecutive numbers are two bursts.
        let mut b = Bursts::default();
        for i in 0..20u64 {
            let at = i as i64 * 33_000;
            b.packet(4 * i, at, Some(at + 10_000), 1200);
            b.packet(4 * i + 2, at, Some(at + 10_000), 1200);
        }
        assert_eq!(b.allowed(700_000), None);
        // An over-use forgets what drained and vetoes the allowance in force: the
        // same bursts again earn it back only once the veto is old.
        let mut b = Bursts::default();
        let mut path = Path::new(1e9, None, 0);
        let t = frames(&mut path, &mut b, 0, 5);
        b.over_use(t);
        assert_eq!(b.allowed(t), None);
        // Bursts sent before it, told of after it, are no evidence.
        for i in 0..10u64 {
            let at = t - 1_000 + i as i64;
            b.packet(5000 + 2 * i, at, Some(at + 10_000), 1200);
            b.packet(5001 + 2 * i, at, Some(at + 10_000), 1200);
        }
        assert!(b.recent_drained.is_empty());
        path.seq = 6_000;
        let t = frames(&mut path, &mut b, t, 5);
        assert_eq!(b.allowed(t), None);
        let t = frames(&mut path, &mut b, t + EVIDENCE_WINDOW_US, 5);
        assert_eq!(b.allowed(t), Some(GROWTH * 4 * 1200));
    }

    #[test]
    fn a_packet_reported_again_is_no_part_of_a_burst() {
        let mut b = Bursts::default();
        let t = frames(&mut Path::new(1e9, None, 0), &mut b, 0, 5);
        // The last burst's packets told of again, one as lost (a later feedback
        // covering them): not read as a burst that lost a packet.
        let sent = t - 33_000;
        b.packet(147, sent, None, 1200);
        b.packet(148, sent, Some(t + 50_000), 1200);
        b.packet(149, sent, Some(t + 50_000), 1200);
        b.packet(150, t, Some(t + 10_000), 1200);
        b.packet(151, t + 33_000, Some(t + 43_000), 1200);
        assert_eq!(b.allowed(t + 33_000), Some(GROWTH * 4 * 1200));
    }

    #[test]
    fn hostile_feedback_does_not_panic() {
        let mut b = Bursts::default();
        for i in 0..200u64 {
            let x = i as i64;
            b.packet(u64::MAX - i, i64::MIN + x, Some(i64::MAX - x), u16::MAX);
            b.packet(i, i64::MAX - x, Some(i64::MIN + x), 0);
            b.packet(i.wrapping_add(1), i64::MAX - x, Some(i64::MIN), 1);
        }
        for now in [i64::MIN, 0, i64::MAX] {
            assert!(b.allowed(now).is_none_or(|a| a >= 0));
        }
        assert!(b.drained.len() <= MAX_EVIDENCE && b.spread.len() <= MAX_EVIDENCE);
    }
}
