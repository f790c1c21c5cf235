//! The retransmission timeout (RFC 9260 §6.3.1) and its back-off on T3-rtx expiry
//! (§6.3.3 E2), in integer microseconds so that runs are bit-for-bit reproducible.
//!
//! Defaults: RTO.Initial 1 s and RTO.Max 60 s as RFC 9260 §16 recommends. RTO.Min is
//! 400 ms, not §16's 1 s: a WebRTC data channel waits a full RTO for every loss the SACKs
//! cannot reveal (the last packet of a burst, a lone message), and 1 s is a long stall for
//! interactive data. It stays above 200 ms because the peer may delay its SACK by up to
//! 200 ms (§6.2, SACK.Delay in §16): an RTO at or below RTT + 200 ms retransmits data
//! that is merely waiting to be acknowledged. dcSCTP, the stack in Chromium, also uses
//! 400 ms.

use std::time::Duration;

/// RTO protocol parameters (RFC 9260 §16).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RtoConfig {
    /// RTO.Initial: the RTO until the first measurement (C1).
    pub initial: Duration,
    /// RTO.Min (C6).
    pub min: Duration,
    /// RTO.Max (C7, and the cap of the E2 back-off).
    pub max: Duration,
    /// Clock granularity G: RTTVAR never falls to 0 (G1).
    pub granularity: Duration,
    /// Samples above this are discarded as broken rather than allowed to wreck the
    /// estimate for many round trips.
    pub max_rtt: Duration,
}

impl Default for RtoConfig {
    fn default() -> Self {
        RtoConfig {
            initial: Duration::from_secs(1),
            min: Duration::from_millis(400),
            max: Duration::from_secs(60),
            granularity: Duration::from_millis(1),
            max_rtt: Duration::from_secs(60),
        }
    }
}

/// SRTT, RTTVAR and RTO for one path.
#[derive(Clone, Debug)]
pub struct RtoEstimator {
    min_us: u64,
    max_us: u64,
    granularity_us: u64,
    max_rtt_us: u64,
    /// `None` until the first measurement.
    srtt_us: Option<u64>,
    rttvar_us: u64,
    rto_us: u64,
}

impl RtoEstimator {
    /// RTO = RTO.Initial (C1).
    pub fn new(config: &RtoConfig) -> RtoEstimator {
        let min_us = micros(config.min);
        let max_us = micros(config.max).max(min_us);
        RtoEstimator {
            min_us,
            max_us,
            granularity_us: micros(config.granularity).max(1),
            max_rtt_us: micros(config.max_rtt),
            srtt_us: None,
            rttvar_us: 0,
            rto_us: micros(config.initial).clamp(min_us, max_us),
        }
    }

    /// The current RTO: the T3-rtx duration.
    pub fn rto(&self) -> Duration {
        Duration::from_micros(self.rto_us)
    }

    /// SRTT, once measured.
    pub fn srtt(&self) -> Option<Duration> {
        self.srtt_us.map(Duration::from_micros)
    }

    /// RTTVAR.
    pub fn rttvar(&self) -> Duration {
        Duration::from_micros(self.rttvar_us)
    }

    /// Takes an RTT measurement (C2, C3 with RTO.Alpha = 1/8, RTO.Beta = 1/4; G1; C6; C7).
    /// Karn's rule (C5) is the caller's: only samples from chunks sent once come here.
    pub fn on_rtt_sample(&mut self, rtt: Duration) {
        let r = micros(rtt);
        if r > self.max_rtt_us {
            return;
        }
        let (srtt, rttvar) = match self.srtt_us {
            // C2: SRTT = R, RTTVAR = R/2.
            None => (r, r / 2),
            // C3: RTTVAR = (1 - 1/4) RTTVAR + 1/4 |SRTT - R'|, with the old SRTT;
            //     SRTT = (1 - 1/8) SRTT + 1/8 R'.
            Some(srtt) => (
                (7 * srtt + r) / 8,
                (3 * self.rttvar_us + srtt.abs_diff(r)) / 4,
            ),
        };
        self.srtt_us = Some(srtt);
        // G1: "Whenever RTTVAR is computed, if RTTVAR == 0, then adjust RTTVAR = G."
        self.rttvar_us = if rttvar == 0 {
            self.granularity_us
        } else {
            rttvar
        };
        // RTO = SRTT + 4 RTTVAR, then C6 (at least RTO.Min) and C7 (at most RTO.Max).
        self.rto_us = srtt
            .saturating_add(4 * self.rttvar_us)
            .clamp(self.min_us, self.max_us);
    }

    /// T3-rtx expired: RTO = RTO × 2, at most RTO.Max (§6.3.3 E2). The next measurement
    /// recomputes RTO from SRTT and RTTVAR, collapsing the back-off.
    pub fn on_t3_expiry(&mut self) {
        self.rto_us = self.rto_us.saturating_mul(2).min(self.max_us);
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn estimator() -> RtoEstimator {
        RtoEstimator::new(&RtoConfig {
            initial: ms(1000),
            min: ms(100),
            max: ms(5000),
            granularity: ms(1),
            max_rtt: ms(60_000),
        })
    }

    #[test]
    fn initial_rto_until_measured() {
        // RFC 9260 §6.3.1 C1: RTO = RTO.Initial until an RTT measurement is made.
        let rto = estimator();
        assert_eq!(rto.rto(), ms(1000));
        assert_eq!(rto.srtt(), None);
        // §16 defaults, with shoal's RTO.Min of 400 ms (module docs).
        let default = RtoEstimator::new(&RtoConfig::default());
        assert_eq!(default.rto(), ms(1000));
    }

    #[test]
    fn first_and_later_measurements() {
        // RFC 9260 §6.3.1 C2: SRTT = R, RTTVAR = R/2, RTO = SRTT + 4 RTTVAR.
        let mut rto = estimator();
        rto.on_rtt_sample(ms(100));
        assert_eq!(rto.srtt(), Some(ms(100)));
        assert_eq!(rto.rttvar(), ms(50));
        assert_eq!(rto.rto(), ms(300));
        // C3: RTTVAR = 3/4·50 + 1/4·|100 - 200| = 62.5; SRTT = 7/8·100 + 1/8·200 = 112.5.
        rto.on_rtt_sample(ms(200));
        assert_eq!(rto.srtt(), Some(Duration::from_micros(112_500)));
        assert_eq!(rto.rttvar(), Duration::from_micros(62_500));
        assert_eq!(rto.rto(), Duration::from_micros(362_500));
    }

    #[test]
    fn rto_is_clamped_to_min_and_max() {
        // RFC 9260 §6.3.1 C6 (round up to RTO.Min) and C7 (RTO.Max); G1 keeps RTTVAR > 0.
        let mut rto = estimator();
        for _ in 0..200 {
            rto.on_rtt_sample(ms(1));
        }
        assert_eq!(rto.rto(), ms(100));
        assert!(rto.rttvar() > Duration::ZERO);
        let mut rto = estimator();
        rto.on_rtt_sample(ms(4000));
        assert_eq!(rto.rto(), ms(5000));
    }

    #[test]
    fn zero_rttvar_becomes_granularity() {
        // RFC 9260 §6.3.1 G1: "if RTTVAR == 0, then adjust RTTVAR = G".
        let mut rto = estimator();
        rto.on_rtt_sample(Duration::ZERO);
        assert_eq!(rto.rttvar(), ms(1));
        assert_eq!(rto.rto(), ms(100));
    }

    #[test]
    fn backoff_doubles_up_to_max_and_collapses_on_measurement() {
        // RFC 9260 §6.3.3 E2: RTO = RTO * 2, bounded by RTO.Max; a new measurement
        // recomputes RTO (the "collapse" after E2).
        let mut rto = estimator();
        rto.on_rtt_sample(ms(100));
        assert_eq!(rto.rto(), ms(300));
        rto.on_t3_expiry();
        assert_eq!(rto.rto(), ms(600));
        for _ in 0..10 {
            rto.on_t3_expiry();
        }
        assert_eq!(rto.rto(), ms(5000));
        rto.on_rtt_sample(ms(100));
        assert!(rto.rto() < ms(400), "{:?}", rto.rto());
    }

    #[test]
    fn absurd_samples_are_ignored() {
        let mut rto = estimator();
        rto.on_rtt_sample(Duration::from_secs(3600));
        assert_eq!(rto.srtt(), None);
        assert_eq!(rto.rto(), ms(1000));
    }
}
