//! Which bursts the path to a peer drains at once: the evidence that sizes the
//! pacer's bursts ([`super::pacer::Pacer::refill`]).
//!
//! Packets the pacer sends in one egress pass (one send time) leave together; the
//! narrowest link on the path spreads them by the time it takes to serve them, and
//! the peer's feedback shows that spread in their arrival times. A burst whose
//! packets all arrived within a quarter of the delay detector's `burst_time`
//! (draft-ietf-rmcat-gcc-02 §5.2) crossed the path without queueing for long; the
//! next burst may be four times its size, which a link serving at the rate it served
//! that one drains within `burst_time`, and so never reads as a delay gradient the
//! detector would take for over-use. A path that spreads every pair of packets by
//! more than that (a link of under 7.7 Mbit/s for 1 200-byte packets) never earns
//! more than the pacer's shortest burst.
//!
//! Whole bursts, not pairs of packets, are the measure: a pair crosses a token-bucket
//! shaper or a time-slotted radio at its line rate whatever the rate it sustains
//! (packet-pair dispersion measures capacity, not what a train gets: Dovrolis,
//! Ramanathan and Moore, "What do packet dispersion techniques measure?", INFOCOM
//! 2001). And one burst that drained is no proof: random delay can bunch a burst's
//! packets on a narrow link as well as spread them. So a burst that did not drain
//! (spread out, or lost a packet) vetoes every allowance of its size or more: the
//! allowance is [`GROWTH`] times the largest burst that drained, among those whose
//! multiple is below the smallest that did not, and only once [`MIN_DRAINED`] bursts
//! drained. A burst larger than a shaper's bucket fails, so bursts stay under four
//! times what the bucket passes. Evidence lasts [`EVIDENCE_WINDOW_US`]: after a silence or a change
//! of path, bursts start over from the shortest. An over-use the estimator detects
//! clears it too ([`super::gcc::Estimator`]).

use std::collections::VecDeque;

use crate::rtcp::twcc::DELTA_TICK_US;

/// Packets whose send times lie at most this far from their burst's first went in
/// the same burst: shoal stamps every packet of one egress pass with the pass's time.
pub const SAME_BURST_US: i64 = 100;
/// How much larger than a drained burst the next may be. Bursts arrive at the node
/// as the publishers send them, a frame's packets over a few passes, so the bursts
/// a subscriber is sent are mostly two or three packets: at twice those, the
/// allowance stayed under 40 ms of the pacing rate for two thirds of a `shoal-bench
/// sfu-load` run on loopback, and P99.99 through the node was 4.5–16 ms over 8
/// runs; at four times, 3.6–7.6 ms over 4 (bench/README.md).
pub const GROWTH: i64 = 4;
/// A burst drained when its packets arrived at most this far apart: `burst_time`
/// (draft-ietf-rmcat-gcc-02 §5.2, [`super::gcc::BURST_TIME_US`]) over [`GROWTH`], so
/// that the allowance it earns drains within `burst_time` at the same rate. Feedback
/// times arrivals in 250 µs ticks (draft-holmer-rmcat-transport-wide-cc-extensions-01
/// §3.1.5): five of them.
pub const DRAINED_WITHIN_US: i64 = super::gcc::BURST_TIME_US / GROWTH;
/// How long a burst counts as evidence, after it was sent: long enough to span the
/// gaps between the largest bursts a subscriber is sent (a keyframe's). After a
/// change of path the first burst past what the new one takes spreads and vetoes
/// its size.
pub const EVIDENCE_WINDOW_US: i64 = 10_000_000;
/// Bursts that must have drained over the window before any allowance.
pub const MIN_DRAINED: usize = 4;
/// Bursts of each kind kept at most: past it, a burst that would be kept is not.
pub const MAX_EVIDENCE: usize = 64;

const _: () = assert!(DRAINED_WITHIN_US >= 2 * DELTA_TICK_US);

/// The burst being read from feedback.
#[derive(Clone, Copy, Debug)]
struct Reading {
    last_seq: u64,
    first_send_us: i64,
    bytes: i64,
    packets: u32,
    first_arrival_us: i64,
    last_arrival_us: i64,
}

/// One burst read: when it was sent (µs, shard clock) and its bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Burst {
    send_us: i64,
    bytes: i64,
}

/// The bursts a peer's feedback told of, recent ones only, and what they allow.
///
/// Only what can still decide an allowance is kept: of the bursts that drained,
/// none older and no larger than a newer one (sizes fall from oldest to newest); of
/// those that did not, none older and no smaller than a newer one (sizes rise).
#[derive(Clone, Debug, Default)]
pub struct Bursts {
    reading: Option<Reading>,
    drained: VecDeque<Burst>,
    spread: VecDeque<Burst>,
    /// When the last [`MIN_DRAINED`] bursts that drained were sent.
    recent_drained: VecDeque<i64>,
}

impl Bursts {
    /// One packet the feedback told of, in sequence order: its extended transport-wide
    /// sequence number `seq`, its send time, its arrival (`None`: lost) and size.
    pub fn packet(&mut self, seq: u64, send_us: i64, arrival_us: Option<i64>, size: u16) {
        let Some(arrival_us) = arrival_us else {
            // A burst that lost a packet did not drain; the next starts afresh.
            if let Some(r) = self.reading.take() {
                self.push(
                    r.first_send_us,
                    r.bytes.saturating_add(i64::from(size)),
                    false,
                );
            }
            return;
        };
        if let Some(r) = self.reading.as_mut()
            && seq == r.last_seq.wrapping_add(1)
            && (0..=SAME_BURST_US).contains(&send_us.saturating_sub(r.first_send_us))
        {
            r.last_seq = seq;
            r.bytes += i64::from(size);
            r.packets += 1;
            r.first_arrival_us = r.first_arrival_us.min(arrival_us);
            r.last_arrival_us = r.last_arrival_us.max(arrival_us);
            return;
        }
        if let Some(r) = self.reading.take() {
            self.close(r);
        }
        self.reading = Some(Reading {
            last_seq: seq,
            first_send_us: send_us,
            bytes: i64::from(size),
            packets: 1,
            first_arrival_us: arrival_us,
            last_arrival_us: arrival_us,
        });
    }

    /// A burst read to its end.
    fn close(&mut self, r: Reading) {
        if r.packets < 2 {
            return;
        }
        let spread = r.last_arrival_us.saturating_sub(r.first_arrival_us);
        self.push(r.first_send_us, r.bytes, spread <= DRAINED_WITHIN_US);
    }

    /// Records a burst.
    fn push(&mut self, send_us: i64, bytes: i64, drained: bool) {
        let burst = Burst { send_us, bytes };
        let old = |b: &Burst| send_us.saturating_sub(b.send_us) > EVIDENCE_WINDOW_US;
        for list in [&mut self.drained, &mut self.spread] {
            while list.front().is_some_and(old) {
                list.pop_front();
            }
        }
        if drained {
            while self.drained.back().is_some_and(|b| b.bytes <= bytes) {
                self.drained.pop_back();
            }
            if self.drained.len() < MAX_EVIDENCE {
                self.drained.push_back(burst);
            }
            if self.recent_drained.len() == MIN_DRAINED {
                self.recent_drained.pop_front();
            }
            self.recent_drained.push_back(send_us);
        } else {
            while self.spread.back().is_some_and(|b| b.bytes >= bytes) {
                self.spread.pop_back();
            }
            if self.spread.len() < MAX_EVIDENCE {
                self.spread.push_back(burst);
            }
        }
    }

    /// Forgets every burst (an over-use: the path is not what it was).
    pub fn clear(&mut self) {
        self.drained.clear();
        self.spread.clear();
        self.recent_drained.clear();
    }

    /// The bursts of `list` sent within [`EVIDENCE_WINDOW_US`] before `now_us`.
    fn recent(list: &VecDeque<Burst>, now_us: i64) -> impl Iterator<Item = &Burst> {
        list.iter()
            .filter(move |b| now_us.saturating_sub(b.send_us) <= EVIDENCE_WINDOW_US)
    }

    /// The largest burst the feedback showed drained lately, bytes.
    pub fn largest_drained(&self, now_us: i64) -> Option<i64> {
        Self::recent(&self.drained, now_us).next().map(|b| b.bytes)
    }

    /// The largest burst to send at `now_us`, bytes: [`GROWTH`] times the largest
    /// that drained, among those whose double no burst that did not drain vetoes,
    /// once [`MIN_DRAINED`] did.
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
            .map(|b| b.bytes.saturating_mul(GROWTH))
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
    fn a_fast_path_earns_four_times_what_it_drained() {
        let mut b = Bursts::default();
        let mut path = Path::new(1e9, None, 0);
        let t = frames(&mut path, &mut b, 0, 10);
        assert_eq!(b.allowed(t), Some(GROWTH * 10 * 1200));
        // The evidence lasts EVIDENCE_WINDOW_US from its sending, while
        // MIN_DRAINED bursts are in it. (The newest burst counts once a later
        // packet ends it: the last but one here.)
        let fourth_last = t - (1 + MIN_DRAINED as i64) * 33_000;
        assert_eq!(b.allowed(fourth_last + EVIDENCE_WINDOW_US), Some(48_000));
        assert_eq!(b.allowed(fourth_last + EVIDENCE_WINDOW_US + 1), None);
    }

    #[test]
    fn a_shaper_bounds_bursts_to_four_times_its_bucket() {
        // A 3 Mbit/s plan on a 1 Gbit/s line, with a 6 000-byte bucket: bursts of
        // 4 packets (4 800 bytes) cross at line rate, bursts of 8 wait for tokens.
        let mut b = Bursts::default();
        let mut path = Path::new(1e9, Some((6_000.0, 3_000_000.0)), 0);
        let mut t = frames(&mut path, &mut b, 0, 4);
        assert_eq!(b.allowed(t), Some(19_200));
        // The pacer sends what it is allowed, 8 packets: they do not drain, and
        // veto 9 600 bytes and more while they are recent, even beside bursts of 4
        // that do.
        t = frames(&mut path, &mut b, t, 8);
        assert_eq!(b.allowed(t), None);
        t = frames(&mut path, &mut b, t, 4);
        assert_eq!(b.allowed(t), None);
        // Once they are old, the bursts of 4 earn 19 200 again: never four times
        // the bucket.
        t = frames(&mut path, &mut b, t + EVIDENCE_WINDOW_US, 4);
        assert_eq!(b.allowed(t), Some(19_200));
    }

    #[test]
    fn jitter_on_a_narrow_link_earns_nothing() {
        let mut b = Bursts::default();
        let mut path = Path::new(3_000_000.0, None, 3_000);
        let mut t = 0;
        for _ in 0..10 {
            t = frames(&mut path, &mut b, t, 3);
            assert_eq!(b.allowed(t), None);
        }
    }

    #[test]
    fn a_loss_a_gap_or_an_over_use_take_evidence_back() {
        let mut b = Bursts::default();
        let mut path = Path::new(1e9, None, 0);
        let t = frames(&mut path, &mut b, 0, 5);
        assert_eq!(b.allowed(t), Some(24_000));
        // A burst of 5 that lost its last packet failed: nothing as large stands.
        for i in 0..4 {
            b.packet(1000 + i, t, Some(t + 10_000), 1200);
        }
        b.packet(1004, t, None, 1200);
        assert_eq!(b.allowed(t), None);
        // Packets of one send time but not consecutive numbers are two bursts.
        let mut b = Bursts::default();
        for i in 0..20u64 {
            let at = i as i64 * 33_000;
            b.packet(4 * i, at, Some(at + 10_000), 1200);
            b.packet(4 * i + 2, at, Some(at + 10_000), 1200);
        }
        assert_eq!(b.allowed(700_000), None);
        let mut b = Bursts::default();
        let t = frames(&mut Path::new(1e9, None, 0), &mut b, 0, 5);
        b.clear();
        assert_eq!(b.allowed(t), None);
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
