//! Packet indices: the receiver's estimate of an SRTP packet's index from its 16-bit
//! sequence number (RFC 3711 §3.3.1, Appendix A), and the sliding-window replay list
//! (§3.3.2).

use super::SrtpError;

/// Guesses the rollover counter `v` a packet with sequence number `seq` was sent under,
/// from the context's ROC and highest sequence number `s_l` (RFC 3711 Appendix A):
/// the one of ROC - 1, ROC, ROC + 1 (mod 2^32) whose index `2^16 * v + SEQ` is closest
/// to `2^16 * ROC + s_l`.
pub(crate) fn estimate_roc(roc: u32, s_l: u16, seq: u16) -> u32 {
    let (seq, s_l) = (i32::from(seq), i32::from(s_l));
    if s_l < 32_768 {
        if seq - s_l > 32_768 {
            roc.wrapping_sub(1)
        } else {
            roc
        }
    } else if s_l - 32_768 > seq {
        roc.wrapping_add(1)
    } else {
        roc
    }
}

/// The 48-bit SRTP packet index `i = 2^16 * ROC + SEQ` of a packet with sequence number
/// `seq`, given the highest index a stream has seen, or an error when the estimate
/// falls before the stream's first rollover (ROC 0 and a guess of ROC - 1: such a
/// packet was sent before the stream began, which RFC 3711 §3.3.1's "the ROC MUST be
/// set to zero" at setup rules out).
pub(crate) fn estimate_index(highest: u64, seq: u16) -> Result<u64, SrtpError> {
    let roc = (highest >> 16) as u32;
    let v = estimate_roc(roc, highest as u16, seq);
    if roc == 0 && v == u32::MAX {
        return Err(SrtpError::TooOld {
            index: u64::from(seq),
        });
    }
    Ok(u64::from(v) << 16 | u64::from(seq))
}

/// A replay list over the last `64 * WORDS` indices below the highest one received
/// (RFC 3711 §3.3.2: "a bitmap ... as described in [RFC2401]", SRTP-WINDOW-SIZE "MUST
/// be at least 64"). Bit `i mod (64 * WORDS)` says whether index `i` was received; the
/// bits between the old and the new highest index are cleared as the window slides,
/// at most one window's worth, so every operation is bounded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ReplayWindow<const WORDS: usize> {
    /// The highest index accepted.
    top: u64,
    bits: [u64; WORDS],
}

impl<const WORDS: usize> ReplayWindow<WORDS> {
    /// Indices the window remembers, the highest included.
    pub(crate) const SIZE: u64 = 64 * WORDS as u64;

    /// A window whose first accepted index is `first`.
    pub(crate) fn new(first: u64) -> Self {
        let mut w = ReplayWindow {
            top: first,
            bits: [0; WORDS],
        };
        w.set(first);
        w
    }

    /// The highest index accepted.
    pub(crate) fn top(&self) -> u64 {
        self.top
    }

    /// Whether `index` may be accepted: ahead of the window, or inside it and not yet
    /// received (§3.3.2: "Only packets with index ahead of the window, or, inside the
    /// window but not already received, SHALL be accepted").
    pub(crate) fn check(&self, index: u64) -> Result<(), SrtpError> {
        if index > self.top {
            return Ok(());
        }
        if self.top - index >= Self::SIZE {
            return Err(SrtpError::TooOld { index });
        }
        if self.get(index) {
            return Err(SrtpError::Replayed { index });
        }
        Ok(())
    }

    /// Records `index` as received, sliding the window forward when it is ahead. Call
    /// only after `check` passed and the packet authenticated (§3.3.2: "After the packet
    /// has been authenticated ... the replay list SHALL be updated").
    pub(crate) fn accept(&mut self, index: u64) {
        if index + Self::SIZE <= self.top {
            // Behind the window: its bit now stands for a newer index.
            return;
        }
        if index > self.top {
            let advance = index - self.top;
            if advance >= Self::SIZE {
                self.bits = [0; WORDS];
            } else {
                self.clear_range(self.top + 1, index);
            }
            self.top = index;
        }
        self.set(index);
    }

    fn position(index: u64) -> (usize, u64) {
        let bit = index % Self::SIZE;
        ((bit / 64) as usize, 1 << (bit % 64))
    }

    fn get(&self, index: u64) -> bool {
        let (word, mask) = Self::position(index);
        self.bits.get(word).is_some_and(|w| w & mask != 0)
    }

    fn set(&mut self, index: u64) {
        let (word, mask) = Self::position(index);
        if let Some(w) = self.bits.get_mut(word) {
            *w |= mask;
        }
    }

    /// Clears the bits of indices `from..to`, fewer than `SIZE` of them, a word at a
    /// time (`SIZE` is a multiple of 64, so index `i` is bit `i % 64` of its word).
    fn clear_range(&mut self, from: u64, to: u64) {
        let mut i = from;
        while i < to {
            let (word, _) = Self::position(i);
            let bit = i % 64;
            let n = (64 - bit).min(to - i);
            let mask = if n == 64 {
                u64::MAX
            } else {
                ((1u64 << n) - 1) << bit
            };
            if let Some(w) = self.bits.get_mut(word) {
                *w &= !mask;
            }
            i += n;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appendix_a_estimates() {
        // No wrap in sight.
        assert_eq!(estimate_roc(5, 1000, 1001), 5);
        assert_eq!(estimate_roc(5, 1000, 900), 5);
        // s_l near the top, SEQ wrapped: the next ROC.
        assert_eq!(estimate_roc(5, 65_530, 3), 6);
        // s_l just wrapped, a late packet from before the wrap: the previous ROC.
        assert_eq!(estimate_roc(6, 2, 65_534), 5);
        // Modulo 2^32 both ways.
        assert_eq!(estimate_roc(u32::MAX, 65_530, 3), 0);
        assert_eq!(estimate_roc(0, 2, 65_534), u32::MAX);
    }

    #[test]
    fn index_before_the_stream_is_too_old() {
        assert_eq!(
            estimate_index(10, 65_000),
            Err(SrtpError::TooOld { index: 65_000 })
        );
        assert_eq!(estimate_index(1 << 16 | 10, 65_000), Ok(65_000));
        assert_eq!(estimate_index(65_535, 0), Ok(1 << 16));
    }

    #[test]
    fn window_accepts_new_and_late_rejects_repeats_and_old() {
        let mut w = ReplayWindow::<2>::new(1000);
        assert_eq!(w.check(1000), Err(SrtpError::Replayed { index: 1000 }));
        assert_eq!(w.check(999), Ok(()));
        w.accept(1005);
        for i in 1001..1005 {
            assert_eq!(w.check(i), Ok(()), "{i}");
        }
        w.accept(1003);
        assert_eq!(w.check(1003), Err(SrtpError::Replayed { index: 1003 }));
        assert_eq!(w.check(1005 - 127), Ok(()));
        assert_eq!(w.check(1005 - 128), Err(SrtpError::TooOld { index: 877 }));
        // A jump of more than the window forgets everything before it.
        w.accept(5000);
        assert_eq!(w.check(4999), Ok(()));
        assert_eq!(w.check(5000), Err(SrtpError::Replayed { index: 5000 }));
        assert_eq!(w.top(), 5000);
    }

    #[test]
    fn sliding_clears_the_bits_of_the_indices_passed_over() {
        let mut w = ReplayWindow::<1>::new(0);
        for i in 0..64 {
            w.accept(i);
        }
        // Index 64 reuses bit 0, 100 reuses bit 36: both must read as not received.
        w.accept(100);
        for i in 64..100 {
            assert_eq!(w.check(i), Ok(()), "{i}");
        }
        assert_eq!(w.check(37), Err(SrtpError::Replayed { index: 37 }));
        assert_eq!(w.check(36), Err(SrtpError::TooOld { index: 36 }));
    }

    /// Against a set of every index accepted, over a long random walk.
    #[test]
    fn matches_a_model() {
        use rand_chacha::ChaCha8Rng;
        use rand_core::{RngCore, SeedableRng};
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let mut w = ReplayWindow::<2>::new(500);
        let mut seen = std::collections::BTreeSet::from([500u64]);
        let mut top = 500u64;
        for _ in 0..20_000 {
            let r = rng.next_u32();
            let index = if r % 4 == 0 {
                top + u64::from(r >> 24) % 200
            } else {
                top.saturating_sub(u64::from(r >> 16) % 160)
            };
            let model = if index > top {
                Ok(())
            } else if top - index >= 128 {
                Err(SrtpError::TooOld { index })
            } else if seen.contains(&index) {
                Err(SrtpError::Replayed { index })
            } else {
                Ok(())
            };
            assert_eq!(w.check(index), model, "index {index} top {top}");
            if model.is_ok() {
                w.accept(index);
                seen.insert(index);
                top = top.max(index);
            }
        }
    }
}
