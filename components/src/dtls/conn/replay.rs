//! The anti-replay sliding window of RFC 6347 §4.1.2.6 (after RFC 4303 §3.4.3), 64
//! records wide as that section prefers.

/// Window width: "a window size of 64 is preferred and SHOULD be employed as the
/// default".
pub const REPLAY_WINDOW: u64 = 64;

/// Received sequence numbers of one epoch: the highest validated one (the "right" edge)
/// and a bitmap of the 64 below and including it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReplayWindow {
    /// The highest sequence number validated so far, `None` before the first.
    top: Option<u64>,
    /// Bit `i` set: `top - i` was received.
    bitmap: u64,
}

impl ReplayWindow {
    /// True when `seq` is new and inside or to the right of the window; such a record
    /// then proceeds to AEAD verification.
    pub fn check(&self, seq: u64) -> bool {
        match self.top {
            None => true,
            Some(top) if seq > top => true,
            Some(top) => {
                let back = top - seq;
                back < REPLAY_WINDOW && self.bitmap & (1 << back) == 0
            }
        }
    }

    /// Records `seq` as received. §4.1.2.6: "The receive window is updated only if the
    /// MAC verification succeeds", so call this after the record opened.
    pub fn update(&mut self, seq: u64) {
        match self.top {
            None => {
                self.top = Some(seq);
                self.bitmap = 1;
            }
            Some(top) if seq > top => {
                let shift = seq - top;
                self.bitmap = if shift >= REPLAY_WINDOW {
                    0
                } else {
                    self.bitmap << shift
                };
                self.bitmap |= 1;
                self.top = Some(seq);
            }
            Some(top) => {
                let back = top - seq;
                if back < REPLAY_WINDOW {
                    self.bitmap |= 1 << back;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_rejects_duplicates_and_old() {
        let mut w = ReplayWindow::default();
        assert!(w.check(5));
        w.update(5);
        assert!(!w.check(5));
        assert!(w.check(4));
        assert!(w.check(100));
        w.update(100);
        assert!(!w.check(5), "left of the window");
        assert!(w.check(37));
        w.update(37);
        assert!(!w.check(37));
        assert!(!w.check(100));
        assert!(w.check(99));
        w.update(100 + 64);
        assert!(!w.check(100));
        assert!(w.check(101));
        w.update(u64::MAX >> 16);
        assert!(!w.check(u64::MAX >> 16));
    }
}
