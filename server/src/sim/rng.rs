//! The simulation's one random generator: every random choice of a run comes from it.

use std::time::Duration;

use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};

/// A seeded ChaCha8 generator: the same seed gives the same stream on every platform.
#[derive(Clone, Debug)]
pub struct SimRng(ChaCha8Rng);

impl SimRng {
    /// A generator whose stream is fixed by `seed`.
    pub fn new(seed: u64) -> SimRng {
        SimRng(ChaCha8Rng::seed_from_u64(seed))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// A uniform number in `[0, 1)` with 53 bits of precision.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// True with probability `p`. `p <= 0` and `p >= 1` draw nothing, so a link
    /// without loss does not disturb the stream other links see.
    pub fn chance(&mut self, p: f64) -> bool {
        if p <= 0.0 {
            false
        } else if p >= 1.0 {
            true
        } else {
            self.next_f64() < p
        }
    }

    /// A number in `[0, n)`; 0 when `n` is 0. Lemire's multiply-shift: no loop, and a
    /// bias of at most `n / 2^64`, far below anything a simulation can observe.
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// A duration uniform in `[0, max]` at microsecond resolution; draws nothing when
    /// `max` is zero.
    pub fn duration_up_to(&mut self, max: Duration) -> Duration {
        let max_us = u64::try_from(max.as_micros()).unwrap_or(u64::MAX);
        if max_us == 0 {
            return Duration::ZERO;
        }
        Duration::from_micros(self.below(max_us.saturating_add(1)))
    }

    /// `len` random ice-chars: material for ICE ufrags and passwords (6 bits each).
    pub fn ice_chars(&mut self, len: usize) -> String {
        crate::endpoint::ice_chars(len, &mut || self.next_u64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream() {
        let mut a = SimRng::new(7);
        let mut b = SimRng::new(7);
        let mut c = SimRng::new(8);
        let xs: Vec<u64> = (0..8).map(|_| a.next_u64()).collect();
        let ys: Vec<u64> = (0..8).map(|_| b.next_u64()).collect();
        let zs: Vec<u64> = (0..8).map(|_| c.next_u64()).collect();
        assert_eq!(xs, ys);
        assert_ne!(xs, zs);
    }

    #[test]
    fn ranges_hold() {
        let mut r = SimRng::new(1);
        for _ in 0..10_000 {
            let f = r.next_f64();
            assert!((0.0..1.0).contains(&f));
            assert!(r.below(10) < 10);
            assert!(r.duration_up_to(Duration::from_micros(3)) <= Duration::from_micros(3));
        }
        assert_eq!(r.below(0), 0);
        assert!(!r.chance(0.0));
        assert!(r.chance(1.0));
        let s = r.ice_chars(24);
        assert_eq!(s.len(), 24);
        assert!(s.bytes().all(|b| crate::endpoint::ICE_CHARS.contains(&b)));
    }
}
