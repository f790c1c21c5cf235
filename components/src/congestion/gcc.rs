//! A send-side bandwidth estimate for one peer, after draft-ietf-rmcat-gcc-02: the
//! delay-based controller of §5 (pre-filtering into groups, the arrival-time filter,
//! the over-use detector with its adaptive threshold, and AIMD rate control) and the
//! loss-based controller of §6, fed with what the peer's transport-wide feedback says
//! of the packets shoal sent it ([`super::history`]). Sans-I/O: time comes in as
//! arguments, the estimate goes out as a number.
//!
//! Where the draft leaves a choice, the choice and its reason are at the constant.

use std::collections::VecDeque;

use super::bursts::Bursts;
use super::history::PacketResult;
use crate::time::Time;

/// §5.2, §5.6 `burst_time`: packets sent within it of a group's first form one group.
pub const BURST_TIME_US: i64 = 5_000;
/// A gap in arrivals after which the delay detector starts over.
pub const STREAM_TIMEOUT_US: i64 = 2_000_000;
/// §5.3 `q`, the state noise variance.
const Q: f64 = 1e-3;
/// §5.6 `e(0)`, the initial error covariance.
const E0: f64 = 0.1;
/// §5.3 `chi`, "typically chosen as a number in the interval [0.1, 0.001]".
const CHI: f64 = 0.01;
/// The measurement noise variance to start from, ms² (§5.3 gives only its floor, 1).
const VAR_V0: f64 = 50.0;
/// §5.3's K: the groups over which `f_max`, the highest group rate, is taken.
const K_GROUPS: usize = 60;
/// §5.6 `del_var_th(0)`, ms.
const THRESHOLD0_MS: f64 = 12.5;
/// §5.4: "RECOMMENDED to clamp del_var_th(i) to the range [6, 600]".
const THRESHOLD_RANGE_MS: (f64, f64) = (6.0, 600.0);
/// §5.4: the threshold is not updated when |m(i)| − del_var_th(i) exceeds this.
const THRESHOLD_JUMP_MS: f64 = 15.0;
/// §5.6 `K_u` and `K_d`.
const K_U: f64 = 0.01;
const K_D: f64 = 0.00018;
/// The longest step the threshold adapts over at once, ms: after a pause in
/// feedback the threshold must not leap (the draft's t(i) − t(i−1) is unbounded).
const MAX_THRESHOLD_STEP_MS: f64 = 100.0;
/// §5.6 `overuse_time_th`.
const OVERUSE_TIME_US: i64 = 10_000;
/// The filter's m(i) is an offset per group; what the detector compares with
/// `del_var_th` is m(i) times the number of groups seen, at most this many. Compared
/// bare, m(i) of a sender 20 % over a link's rate in 5 ms groups is a fraction of a
/// millisecond and never crosses 12.5 ms: the draft's threshold values come from
/// libwebrtc's detector, which scales the offset so (`min(num_of_deltas, 60)`).
const MAX_DELTA_SCALE: f64 = 60.0;
/// §5.5 `beta`.
const BETA: f64 = 0.85;
/// §5.5 T, the window R_hat is measured over (0.5 to 1 s recommended).
const RATE_WINDOW_US: i64 = 500_000;
/// §5.5: the multiplicative increase, at most 8 % per second.
const MULTIPLICATIVE: f64 = 1.08;
/// §5.5: an estimate stays below this times R_hat while it increases.
const MAX_OVER_INCOMING: f64 = 1.5;
/// §5.5: the average and variance of R_hat at decreases are exponential moving
/// averages with smoothing factor 0.95.
const SMOOTHING: f64 = 0.95;
/// The standard deviation of R_hat at decreases is taken as at least this share of
/// their average: after one decrease the variance is zero, and "three standard
/// deviations" would call only an exact match converged.
const MIN_DEVIATION: f64 = 0.05;
/// §6: loss ratios the loss-based controller reacts to.
const LOSS_LOW: f64 = 0.02;
const LOSS_HIGH: f64 = 0.10;
/// §6 runs "every time feedback from the receiver is received", written for RTCP
/// receiver reports about once a second; with transport-wide feedback 10 to 20 times
/// a second, 1.05 per message would multiply the estimate by 2.6 a second. The
/// loss-based controller runs once per this, over the packets reported since.
const LOSS_INTERVAL_US: i64 = 1_000_000;
/// A cut for heavy loss (over [`LOSS_HIGH`]) is not held to that second: it is made
/// on the feedback that shows it, over at least this many packets reported, and at
/// most once per [`LOSS_CUT_SPACING_US`] plus a round trip (libwebrtc's spacing of
/// loss-based decreases), so one burst of loss is cut for once, and a link that
/// narrowed is left within a fraction of a second rather than one cut a second.
const LOSS_MIN_PACKETS: u32 = 20;
/// See [`LOSS_MIN_PACKETS`].
const LOSS_CUT_SPACING_US: i64 = 300_000;
/// Bounds on the estimate.
pub const MIN_ESTIMATE_BPS: f64 = 30_000.0;
/// See [`MIN_ESTIMATE_BPS`].
pub const MAX_ESTIMATE_BPS: f64 = 100_000_000.0;

/// §5.4's detector output.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Signal {
    /// Neither.
    #[default]
    Normal,
    /// Delay grows: the path's queue fills.
    Overuse,
    /// Delay shrinks: a queue drains.
    Underuse,
}

/// §5.5's rate control state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum RateState {
    /// No congestion: the estimate grows.
    #[default]
    Increase,
    /// Over-use: the estimate was cut.
    Decrease,
    /// Waiting for queues to drain.
    Hold,
}

/// A group of packets (§5.2): the send time of its first and last packet, the
/// arrival of its last.
#[derive(Clone, Copy, Debug)]
struct Group {
    first_send: i64,
    last_send: i64,
    last_arrival: i64,
}

/// §5.1 to §5.4: groups, the arrival-time filter and the over-use detector.
#[derive(Clone, Debug)]
struct DelayDetector {
    current: Option<Group>,
    previous: Option<Group>,
    /// m_hat, ms.
    m_hat: f64,
    /// e, the error covariance.
    e: f64,
    /// var_v_hat, ms².
    var_v: f64,
    /// The last K inter-departure times, ms.
    periods: VecDeque<f64>,
    /// Groups seen (for the detector's scale).
    deltas: u32,
    threshold: f64,
    /// When the threshold was last updated (receiver clock, µs).
    threshold_at: Option<i64>,
    /// Since when the scaled offset has stayed above the threshold.
    overuse_since: Option<i64>,
    prev_offset: f64,
    signal: Signal,
}

impl Default for DelayDetector {
    fn default() -> Self {
        Self {
            current: None,
            previous: None,
            m_hat: 0.0,
            e: E0,
            var_v: VAR_V0,
            periods: VecDeque::with_capacity(K_GROUPS),
            deltas: 0,
            threshold: THRESHOLD0_MS,
            threshold_at: None,
            overuse_since: None,
            prev_offset: 0.0,
            signal: Signal::Normal,
        }
    }
}

impl DelayDetector {
    /// One packet that arrived, in send order.
    fn packet(&mut self, send: i64, arrival: i64) {
        // Nothing for a while (a paused stream, a silent path): the groups before
        // the gap say nothing of the path now, and their gap is no delay gradient.
        // The detector starts over, as libwebrtc's does after 2 s without packets.
        if self
            .current
            .is_some_and(|c| arrival - c.last_arrival > STREAM_TIMEOUT_US)
        {
            *self = DelayDetector::default();
        }
        let Some(cur) = self.current.as_mut() else {
            self.current = Some(Group {
                first_send: send,
                last_send: send,
                last_arrival: arrival,
            });
            return;
        };
        // §5.1: "Any packets received out of order are ignored".
        if send < cur.last_send {
            return;
        }
        let inter_arrival = arrival - cur.last_arrival;
        let inter_departure = send - cur.last_send;
        // §5.2's two rules: sent within burst_time of the group's first, or arrived
        // within burst_time with a negative delay variation (a burst after an outage).
        if send - cur.first_send <= BURST_TIME_US
            || (inter_arrival < BURST_TIME_US && inter_arrival - inter_departure < 0)
        {
            cur.last_send = send;
            cur.last_arrival = cur.last_arrival.max(arrival);
            return;
        }
        let done = *cur;
        self.current = Some(Group {
            first_send: send,
            last_send: send,
            last_arrival: arrival,
        });
        if let Some(prev) = self.previous.replace(done) {
            let t = (done.last_arrival - prev.last_arrival) as f64 / 1000.0;
            let big_t = (done.last_send - prev.last_send) as f64 / 1000.0;
            self.update(t - big_t, big_t, done.last_arrival);
        }
    }

    /// §5.3 and §5.4 for one inter-group delay variation `d` (ms), the groups'
    /// inter-departure time (ms), at `at` (the group's arrival, µs).
    fn update(&mut self, d: f64, inter_departure: f64, at: i64) {
        if self.periods.len() == K_GROUPS {
            self.periods.pop_front();
        }
        self.periods.push_back(inter_departure.max(0.001));
        let min_period = self.periods.iter().copied().fold(f64::INFINITY, f64::min);
        // alpha = (1 − chi)^(30 / (1000 · f_max)), f_max = 1 / min period (per ms).
        let alpha = (1.0 - CHI).powf(30.0 * min_period / 1000.0);
        let z = d - self.m_hat;
        let bound = 3.0 * self.var_v.sqrt();
        let z_var = z.clamp(-bound, bound);
        self.var_v = (alpha * self.var_v + (1.0 - alpha) * z_var * z_var).max(1.0);
        let k = (self.e + Q) / (self.var_v + self.e + Q);
        self.m_hat += z * k;
        self.e = (1.0 - k) * (self.e + Q);
        self.deltas = self.deltas.saturating_add(1);
        self.detect(at);
    }

    /// §5.4: the detector and its adaptive threshold.
    fn detect(&mut self, at: i64) {
        let offset = self.m_hat * f64::from(self.deltas).min(MAX_DELTA_SCALE);
        if offset > self.threshold {
            let since = *self.overuse_since.get_or_insert(at);
            if at - since >= OVERUSE_TIME_US && offset >= self.prev_offset {
                self.signal = Signal::Overuse;
            }
        } else if offset < -self.threshold {
            self.overuse_since = None;
            self.signal = Signal::Underuse;
        } else {
            self.overuse_since = None;
            self.signal = Signal::Normal;
        }
        self.prev_offset = offset;
        let step = self.threshold_at.map_or(0.0, |t| {
            ((at - t) as f64 / 1000.0).clamp(0.0, MAX_THRESHOLD_STEP_MS)
        });
        self.threshold_at = Some(at);
        if offset.abs() - self.threshold > THRESHOLD_JUMP_MS {
            return;
        }
        let k = if offset.abs() < self.threshold {
            K_D
        } else {
            K_U
        };
        self.threshold += step * k * (offset.abs() - self.threshold);
        self.threshold = self
            .threshold
            .clamp(THRESHOLD_RANGE_MS.0, THRESHOLD_RANGE_MS.1);
    }
}

/// §5.5's R_hat: what arrived over the last [`RATE_WINDOW_US`], by arrival time.
#[derive(Clone, Debug, Default)]
struct IncomingRate {
    /// (arrival µs, bytes), in the order reported (sequence order: arrivals may be
    /// a little out of order).
    packets: VecDeque<(i64, u32)>,
    bytes: u64,
    /// The first arrival seen: the rate is known once the window is covered.
    first: Option<i64>,
    /// The latest arrival seen: the window ends there.
    newest: i64,
}

impl IncomingRate {
    fn add(&mut self, arrival: i64, size: u16) {
        self.first.get_or_insert(arrival);
        self.newest = if self.packets.is_empty() {
            arrival
        } else {
            self.newest.max(arrival)
        };
        self.packets.push_back((arrival, u32::from(size)));
        self.bytes += u64::from(size);
        while let Some(&(at, size)) = self.packets.front() {
            if at >= self.newest - RATE_WINDOW_US {
                break;
            }
            self.packets.pop_front();
            self.bytes -= u64::from(size);
        }
    }

    /// Bits per second, once a whole window has been seen.
    fn bps(&self) -> Option<f64> {
        let first = self.first?;
        (!self.packets.is_empty() && self.newest - first >= RATE_WINDOW_US)
            .then(|| self.bytes as f64 * 8.0 * 1_000_000.0 / RATE_WINDOW_US as f64)
    }
}

/// One peer's estimate: §5's delay-based A_hat, §6's loss-based As_hat, and the
/// smaller of the two.
#[derive(Clone, Debug)]
pub struct Estimator {
    detector: DelayDetector,
    bursts: Bursts,
    incoming: IncomingRate,
    state: RateState,
    /// A_hat, bit/s.
    delay_based: f64,
    /// As_hat, bit/s.
    loss_based: f64,
    /// When the rate control last ran (shard clock, µs).
    updated_at: Option<i64>,
    /// When it last decreased.
    decreased_at: Option<i64>,
    /// Over-use or loss has lowered the estimate (a decrease that left it where it
    /// was does not count).
    cut: bool,
    /// The average and variance of R_hat at decreases (§5.5).
    max_avg: Option<f64>,
    max_var: f64,
    /// Packets reported and lost since the loss-based controller last ran.
    reported: u32,
    lost: u32,
    loss_at: Option<i64>,
    /// When loss last cut As_hat.
    loss_cut_at: Option<i64>,
    /// The loss ratio the loss-based controller last ran on, and when (µs).
    last_loss: Option<(f64, i64)>,
    /// Round-trip time, ms: smoothed from send to feedback.
    rtt_ms: f64,
    /// Decreases so far.
    pub decreases: u64,
}

impl Estimator {
    /// An estimate starting at `initial_bps`.
    pub fn new(initial_bps: f64) -> Estimator {
        let initial = initial_bps.clamp(MIN_ESTIMATE_BPS, MAX_ESTIMATE_BPS);
        Estimator {
            detector: DelayDetector::default(),
            bursts: Bursts::default(),
            incoming: IncomingRate::default(),
            state: RateState::Increase,
            delay_based: initial,
            // No loss seen: no bound from loss.
            loss_based: MAX_ESTIMATE_BPS,
            updated_at: None,
            decreased_at: None,
            cut: false,
            max_avg: None,
            max_var: 0.0,
            reported: 0,
            lost: 0,
            loss_at: None,
            loss_cut_at: None,
            last_loss: None,
            rtt_ms: 100.0,
            decreases: 0,
        }
    }

    /// The largest burst to send at `now`, bytes, by what the feedback showed
    /// drained lately ([`Bursts::allowed`]); none before enough did.
    pub fn allowed_burst(&self, now: Time) -> Option<i64> {
        self.bursts.allowed(now.as_micros() as i64)
    }

    /// The largest burst the path earned lately, bytes, vetoes aside
    /// ([`Bursts::earned`]).
    pub fn earned_burst(&self, now: Time) -> Option<i64> {
        self.bursts.earned(now.as_micros() as i64)
    }

    /// Whether over-use or loss has ever lowered the estimate.
    pub fn was_cut(&self) -> bool {
        self.cut
    }

    /// The estimate, bit/s: the smaller of the delay- and loss-based ones (§6).
    pub fn bps(&self) -> u64 {
        self.delay_based
            .min(self.loss_based)
            .clamp(MIN_ESTIMATE_BPS, MAX_ESTIMATE_BPS) as u64
    }

    /// The detector's last signal.
    pub fn signal(&self) -> Signal {
        self.detector.signal
    }

    /// The rate control's state.
    pub fn state(&self) -> RateState {
        self.state
    }

    /// What arrived over the last half second, bit/s, once known.
    pub fn incoming_bps(&self) -> Option<u64> {
        self.incoming.bps().map(|b| b as u64)
    }

    /// The share of packets lost over the loss-based controller's last interval, and
    /// when it ran.
    pub fn last_loss(&self) -> Option<(f64, Time)> {
        self.last_loss
            .map(|(p, at)| (p, Time::from_micros(at.max(0) as u64)))
    }

    /// The round-trip time as last measured, ms.
    pub fn rtt_ms(&self) -> f64 {
        self.rtt_ms
    }

    /// Takes one feedback message's news (in sequence order, as
    /// [`super::history::SendHistory::on_feedback`] gives it) at `now`.
    pub fn on_feedback(&mut self, now: Time, results: &[PacketResult]) {
        let now_us = now.as_micros() as i64;
        let mut newest_send = None;
        for r in results {
            self.reported += 1;
            self.bursts.packet(r.seq, r.send_us, r.arrival_us, r.size);
            match r.arrival_us {
                Some(arrival) => {
                    self.detector.packet(r.send_us, arrival);
                    self.incoming.add(arrival, r.size);
                    newest_send = Some(newest_send.map_or(r.send_us, |s: i64| s.max(r.send_us)));
                }
                None => self.lost += 1,
            }
        }
        // From the newest packet's sending to its feedback: a round trip plus the
        // receiver's wait before it reports (at most its feedback interval).
        if let Some(sent) = newest_send {
            let sample = ((now_us - sent) as f64 / 1000.0).clamp(1.0, 10_000.0);
            self.rtt_ms = 0.875 * self.rtt_ms + 0.125 * sample;
        }
        self.rate_control(now_us);
        self.loss_control(now_us);
    }

    /// Takes arrivals measured at the receiving end (draft-ietf-rmcat-gcc-02 §3's
    /// receive-side controller): each packet's send time on the sender's clock and
    /// its arrival on this one, in arrival order. Only the delay-based controller
    /// runs; loss is the sender's to act on, and the round-trip time keeps its
    /// default, since a send time from another clock does not measure one.
    pub fn on_arrivals(&mut self, now: Time, results: &[PacketResult]) {
        for r in results {
            if let Some(arrival) = r.arrival_us {
                self.detector.packet(r.send_us, arrival);
                self.incoming.add(arrival, r.size);
            }
        }
        self.rate_control(now.as_micros() as i64);
    }

    /// Brings the delay-based estimate down to `bps` if it is above.
    pub fn limit_to(&mut self, bps: f64) {
        self.delay_based = self.delay_based.min(bps).max(MIN_ESTIMATE_BPS);
    }

    /// A probe cluster measured `bps` through the path: an estimate below it is
    /// raised to it, the loss-based one too (what arrived at that rate was not lost
    /// enough to count, or the cluster would not have measured it), and the
    /// convergence memory of §5.5 is dropped, since the path is not what it was.
    pub fn on_probe(&mut self, bps: f64) {
        let bps = bps.clamp(MIN_ESTIMATE_BPS, MAX_ESTIMATE_BPS);
        if bps <= self.bps() as f64 {
            return;
        }
        self.delay_based = self.delay_based.max(bps);
        self.loss_based = self.loss_based.max(bps);
        self.max_avg = None;
        self.max_var = 0.0;
    }

    /// §5.5: the state machine of Table 1's transitions and the estimate's update.
    fn rate_control(&mut self, now: i64) {
        let signal = self.detector.signal;
        let incoming = self.incoming.bps();
        self.state = match (signal, self.state) {
            (Signal::Overuse, _) => RateState::Decrease,
            (Signal::Normal, RateState::Hold) => RateState::Increase,
            (Signal::Normal, RateState::Decrease) => RateState::Hold,
            (Signal::Normal, RateState::Increase) => RateState::Increase,
            (Signal::Underuse, _) => RateState::Hold,
        };
        let elapsed_ms = self
            .updated_at
            .map_or(0.0, |t| (now - t).max(0) as f64 / 1000.0);
        self.updated_at = Some(now);
        let response_ms = 100.0 + self.rtt_ms;
        match self.state {
            RateState::Increase => {
                if let (Some(r), Some(avg)) = (incoming, self.max_avg) {
                    let deviation = self.max_var.sqrt().max(MIN_DEVIATION * avg);
                    if r > avg + 3.0 * deviation {
                        // The congestion level changed: far from convergence again.
                        self.max_avg = None;
                        self.max_var = 0.0;
                    }
                }
                let near = match (incoming, self.max_avg) {
                    (Some(r), Some(avg)) => {
                        let deviation = self.max_var.sqrt().max(MIN_DEVIATION * avg);
                        (r - avg).abs() <= 3.0 * deviation
                    }
                    _ => false,
                };
                let before = self.delay_based;
                let mut next = if near {
                    let bits_per_frame = before / 30.0;
                    let packets_per_frame = (bits_per_frame / (1200.0 * 8.0)).ceil().max(1.0);
                    let packet_bits = bits_per_frame / packets_per_frame;
                    let alpha = 0.5 * (elapsed_ms / response_ms).min(1.0);
                    before + (alpha * packet_bits).max(1000.0)
                } else {
                    before * MULTIPLICATIVE.powf((elapsed_ms / 1000.0).min(1.0))
                };
                // "A_hat(i) < 1.5 * R_hat(i)": never raised past it (an estimate
                // already above, from before little was sent, is not cut for it).
                if let Some(r) = incoming {
                    next = next.min(before.max(MAX_OVER_INCOMING * r));
                }
                self.delay_based = next;
            }
            RateState::Decrease => {
                // Once per response time while over-use lasts.
                let due = self
                    .decreased_at
                    .is_none_or(|t| (now - t) as f64 / 1000.0 >= response_ms);
                if due {
                    let r = incoming.unwrap_or(self.delay_based);
                    self.cut |= BETA * r < self.delay_based;
                    self.delay_based = (BETA * r).min(self.delay_based);
                    self.decreased_at = Some(now);
                    self.decreases += 1;
                    // Queues grow: what drained before is no evidence now, and
                    // the burst allowed may be why.
                    self.bursts.over_use(now);
                    match self.max_avg {
                        None => self.max_avg = Some(r),
                        Some(avg) => {
                            let next = SMOOTHING * avg + (1.0 - SMOOTHING) * r;
                            self.max_var = SMOOTHING * self.max_var
                                + (1.0 - SMOOTHING) * (r - next) * (r - next);
                            self.max_avg = Some(next);
                        }
                    }
                }
            }
            RateState::Hold => {}
        }
        self.delay_based = self.delay_based.clamp(MIN_ESTIMATE_BPS, MAX_ESTIMATE_BPS);
    }

    /// §6, once per [`LOSS_INTERVAL_US`] over what was reported since, and sooner
    /// for heavy loss (see [`LOSS_MIN_PACKETS`]).
    fn loss_control(&mut self, now: i64) {
        let since = *self.loss_at.get_or_insert(now);
        let p = f64::from(self.lost) / f64::from(self.reported.max(1));
        let rtt_us = (self.rtt_ms * 1000.0) as i64;
        let cut_now = self.reported >= LOSS_MIN_PACKETS
            && p > LOSS_HIGH
            && self
                .loss_cut_at
                .is_none_or(|t| now - t >= LOSS_CUT_SPACING_US + rtt_us);
        if !cut_now && (now - since < LOSS_INTERVAL_US || self.reported == 0) {
            return;
        }
        if p > LOSS_HIGH {
            self.loss_cut_at = Some(now);
            self.cut = true;
        }
        if p > LOSS_HIGH {
            // From the rate in force: As_hat may stand far above it (see below).
            self.loss_based = self.loss_based.min(self.bps() as f64) * (1.0 - 0.5 * p);
            // §6: "If the queues are very short, over-use will only be visible
            // through packet losses". A_hat, which saw none of it, is brought down
            // to the cut too: left above, it would hand the rate back as soon as
            // As_hat climbed past it, into the same losses. From here A_hat grows
            // as §5.5 lets it, with what arrives.
            self.delay_based = self.delay_based.min(self.loss_based.max(MIN_ESTIMATE_BPS));
        } else if p < LOSS_LOW {
            self.loss_based *= 1.05;
        }
        // Once it has climbed back past the delay-based estimate it bounds nothing
        // until loss cuts it again (and it starts so: no loss seen, no bound).
        self.loss_based = if self.loss_based >= self.delay_based {
            MAX_ESTIMATE_BPS
        } else {
            self.loss_based.max(MIN_ESTIMATE_BPS)
        };
        self.loss_at = Some(now);
        self.last_loss = Some((p, now));
        self.reported = 0;
        self.lost = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sender at `rate_bps` in 1 200-byte packets through a link of `link_bps`
    /// with a FIFO queue (drop-tail at `queue_ms` of the link's rate) and 20 ms
    /// one-way delay, reported every 50 ms; returns the estimate after `secs`.
    fn through_link(
        est: &mut Estimator,
        start_us: i64,
        secs: f64,
        link_bps: f64,
        sender_bps: impl Fn(&Estimator) -> f64,
    ) -> i64 {
        through(est, start_us, secs, link_bps, 200_000, 0, sender_bps)
    }

    /// [`through_link`] with a queue of `queue_us` and up to `jitter_us` of random
    /// extra delay per packet (seeded).
    fn through(
        est: &mut Estimator,
        start_us: i64,
        secs: f64,
        link_bps: f64,
        queue_us: i64,
        jitter_us: i64,
        sender_bps: impl Fn(&Estimator) -> f64,
    ) -> i64 {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut jitter = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            if jitter_us == 0 {
                0
            } else {
                (seed % jitter_us as u64) as i64
            }
        };
        let size = 1200u16;
        let tx_us = |bps: f64| (f64::from(size) * 8.0 * 1e6 / bps) as i64;
        let mut now = start_us;
        let end = start_us + (secs * 1e6) as i64;
        let mut link_free = now;
        let mut batch = Vec::new();
        let mut sent = 0u64;
        let mut next_feedback = now + 50_000;
        while now < end {
            let rate = sender_bps(est).max(50_000.0);
            let arrival = if link_free - now > queue_us {
                None
            } else {
                link_free = link_free.max(now) + tx_us(link_bps);
                Some(link_free + 20_000 + jitter())
            };
            batch.push(PacketResult {
                seq: sent,
                send_us: now,
                arrival_us: arrival,
                size,
                probe: 0,
            });
            sent += 1;
            now += tx_us(rate);
            if now >= next_feedback {
                est.on_feedback(Time::from_micros((now + 20_000) as u64), &batch);
                batch.clear();
                next_feedback += 50_000;
            }
        }
        now
    }

    #[test]
    fn a_sender_at_its_estimate_finds_the_link() {
        for link in [600_000.0, 3_000_000.0] {
            let mut est = Estimator::new(1_000_000.0);
            // The sender follows the estimate, a little above it (a probe's worth).
            through_link(&mut est, 0, 30.0, link, |e| e.bps() as f64 * 1.1);
            let got = est.bps() as f64;
            assert!(
                (got - link).abs() <= 0.2 * link,
                "link {link}: estimate {got} ({:?}, {:?}, {} decreases)",
                est.state(),
                est.signal(),
                est.decreases
            );
        }
    }

    #[test]
    fn a_drop_in_the_link_brings_the_estimate_down_within_two_seconds() {
        let mut est = Estimator::new(1_000_000.0);
        let now = through_link(&mut est, 0, 25.0, 3_000_000.0, |e| e.bps() as f64 * 1.1);
        assert!(est.bps() > 2_000_000, "{}", est.bps());
        through_link(&mut est, now, 2.0, 600_000.0, |e| e.bps() as f64 * 1.1);
        assert!(est.bps() < 800_000, "{}", est.bps());
    }

    #[test]
    fn a_link_that_only_drops_is_found_by_loss() {
        // A queue of 5 ms: over-use shows as loss before it shows as delay (§6).
        let mut est = Estimator::new(2_000_000.0);
        through(&mut est, 0, 10.0, 500_000.0, 5_000, 0, |e| e.bps() as f64);
        assert!(est.bps() < 1_000_000, "{}", est.bps());
    }

    #[test]
    fn jitter_alone_is_not_congestion() {
        // Up to 10 ms of random delay per packet on a link with room to spare.
        let mut est = Estimator::new(500_000.0);
        through(&mut est, 0, 15.0, 20_000_000.0, 200_000, 10_000, |e| {
            e.bps() as f64
        });
        assert!(
            est.bps() > 1_000_000,
            "{} after {} decreases",
            est.bps(),
            est.decreases
        );
    }

    #[test]
    fn the_estimate_stays_near_what_is_sent() {
        let mut est = Estimator::new(300_000.0);
        through_link(&mut est, 0, 20.0, 10_000_000.0, |_| 500_000.0);
        assert!(est.bps() <= 800_000, "{}", est.bps());
        assert!(est.bps() >= 500_000, "{}", est.bps());
    }
}
