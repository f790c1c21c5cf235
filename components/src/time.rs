//! Time as data: a monotonic instant in microseconds since an epoch the caller picks.
//!
//! Shards never read a clock. The mio driver converts `std::time::Instant` to [`Time`]
//! against the moment it started; the simulator's virtual clock starts at zero.

use std::ops::{Add, Sub};
use std::time::Duration;

/// A monotonic point in time, in microseconds since the caller's epoch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Time(u64);

impl Time {
    /// The epoch itself.
    pub const ZERO: Time = Time(0);
    /// A time later than any real deadline.
    pub const MAX: Time = Time(u64::MAX);

    /// A time `us` microseconds after the epoch.
    pub const fn from_micros(us: u64) -> Time {
        Time(us)
    }

    /// A time `ms` milliseconds after the epoch.
    pub const fn from_millis(ms: u64) -> Time {
        Time(ms.saturating_mul(1000))
    }

    /// Microseconds since the epoch.
    pub const fn as_micros(self) -> u64 {
        self.0
    }

    /// The time elapsed from `earlier` to `self`, zero if `earlier` is later.
    pub fn saturating_since(self, earlier: Time) -> Duration {
        Duration::from_micros(self.0.saturating_sub(earlier.0))
    }
}

impl Add<Duration> for Time {
    type Output = Time;
    fn add(self, d: Duration) -> Time {
        let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        Time(self.0.saturating_add(us))
    }
}

impl Sub<Duration> for Time {
    type Output = Time;
    fn sub(self, d: Duration) -> Time {
        let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        Time(self.0.saturating_sub(us))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates() {
        let t = Time::from_millis(5);
        assert_eq!((t + Duration::from_millis(1)).as_micros(), 6000);
        assert_eq!(Time::MAX + Duration::from_secs(1), Time::MAX);
        assert_eq!(Time::ZERO - Duration::from_secs(1), Time::ZERO);
        assert_eq!(t.saturating_since(Time::from_millis(7)), Duration::ZERO);
        assert_eq!(
            t.saturating_since(Time::from_millis(2)),
            Duration::from_millis(3)
        );
    }
}
