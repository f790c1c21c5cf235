//! The receive-side estimate of a publisher's path, for publishers without
//! transport-wide feedback (aiortc, older libwebrtc). draft-ietf-rmcat-gcc-02 §3's
//! second version: "a delay-based controller at the receive-side, monitoring and
//! processing the arrival time and size of incoming packets. The sender SHOULD use
//! the abs-send-time RTP header extension [abs-send-time] to enable the receiver to
//! compute the inter-group delay variation. The output from the delay-based
//! controller will be a bitrate, which will be sent back to the sender using the
//! REMB feedback message [I-D.alvestrand-rmcat-remb]. [...] It is RECOMMENDED to
//! send the REMB message as soon as congestion is detected, and otherwise at least
//! once every second."
//!
//! The delay-based controller is [`super::gcc::Estimator`]'s, fed each packet's
//! abs-send-time (the publisher's clock, unwrapped) and its arrival (the shard's).
//! Loss stays with the publisher, which reads it from receiver reports (§3). The
//! first REMB waits for a measured incoming rate and says at most
//! [`MAX_OVER_INCOMING`] times it (§5.5's bound on growth, so the first value is
//! not a guess); after it one goes out when the estimate fell by more than
//! [`DECREASE_SIGNIFICANT`] since the last one (congestion detected), else once
//! every [`REMB_INTERVAL`].
//!
//! A send time that steps away from the arrivals by more than [`MAX_CLOCK_STEP`]
//! (the publisher's clock was set; aiortc stamps its wall clock) starts the send
//! times over from the arrivals, rather than read as reordering or a queue.

use std::collections::VecDeque;
use std::time::Duration;

use super::gcc::Estimator;
use super::history::PacketResult;
use crate::rtp::AbsSendTime;
use crate::time::Time;

/// How often a REMB goes out while the estimate holds or grows (§3: "at least once
/// every second").
pub const REMB_INTERVAL: Duration = Duration::from_secs(1);
/// A fall of the estimate past this share of the last REMB's value is congestion: a
/// REMB goes out at once (libwebrtc's receiver uses the same 3 %).
pub const DECREASE_SIGNIFICANT: f64 = 0.03;
/// Where the estimate starts before the first REMB bounds it by what arrives.
pub const INITIAL_BPS: f64 = 1_000_000.0;
/// The first REMB says at most this many times the incoming rate.
pub const MAX_OVER_INCOMING: f64 = 1.5;
/// Arrivals buffered between two runs of the controller at most (one run per
/// transport feedback interval); past it the oldest are dropped unseen.
const MAX_PENDING: usize = 1024;
/// A step of the send times this far from the arrivals' is the sender's clock
/// being set, not the path (libwebrtc's receiver takes 3 s too).
pub const MAX_CLOCK_STEP: Duration = Duration::from_secs(3);
/// abs-send-time's unit: 2^-18 s.
const TICKS_PER_SECOND: i64 = 1 << 18;
/// SSRCs one REMB names at most: the publisher's media streams.
pub const MAX_REMB_SSRCS: usize = 16;

/// One publisher's receive-side estimate.
#[derive(Clone, Debug, Default)]
pub struct ReceiveSide {
    /// The abs-send-time extension id, when the extension and `goog-remb` were
    /// negotiated and transport-wide feedback was not.
    pub ext_id: Option<u8>,
    estimator: Option<Estimator>,
    /// Arrivals since the controller last ran.
    pending: VecDeque<PacketResult>,
    /// The newest abs-send-time, its unwrapped value in ticks, and its arrival (µs).
    last_send: Option<(u32, i64, i64)>,
    /// The last REMB: when, and its value.
    last_remb: Option<(Time, u64)>,
}

impl ReceiveSide {
    /// Records a packet of `size` bytes, stamped `send` by the publisher, that
    /// arrived `at`, for the controller's next run.
    pub fn record(&mut self, send: AbsSendTime, size: usize, at: Time) {
        let raw = send.0 & 0x00FF_FFFF;
        let arrival_us = at.as_micros() as i64;
        let ticks = match self.last_send {
            None => i64::from(raw),
            Some((last_raw, last_ticks, last_arrival)) => {
                // The shortest way round the 24-bit circle: a packet sent before
                // the last one (reordered) steps back.
                let diff = (raw.wrapping_sub(last_raw) & 0x00FF_FFFF) as i32;
                let diff = if diff >= 1 << 23 {
                    diff - (1 << 24)
                } else {
                    diff
                };
                let sent_us = i64::from(diff) * 1_000_000 / TICKS_PER_SECOND;
                let step = (sent_us - (arrival_us - last_arrival)).unsigned_abs();
                if step > MAX_CLOCK_STEP.as_micros() as u64 {
                    // The publisher's clock was set: go on from the arrivals.
                    last_ticks + (arrival_us - last_arrival) * TICKS_PER_SECOND / 1_000_000
                } else {
                    last_ticks + i64::from(diff)
                }
            }
        };
        if self
            .last_send
            .is_none_or(|(_, last_ticks, _)| ticks > last_ticks)
        {
            self.last_send = Some((raw, ticks, arrival_us));
        }
        if self.pending.len() >= MAX_PENDING {
            self.pending.pop_front();
        }
        self.pending.push_back(PacketResult {
            // No transport-wide number here, and none needed: only the sender's
            // estimate sizes bursts by it.
            seq: 0,
            send_us: ticks * 1_000_000 / TICKS_PER_SECOND,
            arrival_us: Some(arrival_us),
            size: size.min(usize::from(u16::MAX)) as u16,
            probe: 0,
        });
    }

    /// Runs the delay-based controller on what arrived since it last ran; returns the
    /// bitrate a REMB should carry now, if one is due.
    pub fn run(&mut self, now: Time) -> Option<u64> {
        if !self.pending.is_empty() {
            let estimator = self
                .estimator
                .get_or_insert_with(|| Estimator::new(INITIAL_BPS));
            // Arrival order is what the detector groups by.
            let pending = self.pending.make_contiguous();
            pending.sort_by_key(|r| r.arrival_us);
            estimator.on_arrivals(now, pending);
            self.pending.clear();
        }
        let estimator = self.estimator.as_mut()?;
        let incoming = estimator.incoming_bps()?;
        if self.last_remb.is_none() {
            estimator.limit_to(MAX_OVER_INCOMING * incoming as f64);
        }
        let bps = estimator.bps();
        let due = match self.last_remb {
            None => true,
            Some((at, last)) => {
                now.saturating_since(at) >= REMB_INTERVAL
                    || (bps as f64) < (last as f64) * (1.0 - DECREASE_SIGNIFICANT)
            }
        };
        due.then(|| {
            self.last_remb = Some((now, bps));
            bps
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A publisher sending 1200-byte packets at `send_bps` through a path of
    /// `path_bps` with a queue that never drops: (send time, arrival) in µs.
    fn through(send_bps: f64, path_bps: f64, from_us: i64, count: usize) -> Vec<(i64, i64)> {
        let gap = 1200.0 * 8.0 / send_bps * 1e6;
        let service = 1200.0 * 8.0 / path_bps * 1e6;
        let mut free = 0.0f64;
        (0..count)
            .map(|i| {
                let send = from_us as f64 + i as f64 * gap;
                let done = send.max(free) + service;
                free = done;
                (send as i64, done as i64 + 20_000)
            })
            .collect()
    }

    fn feed(side: &mut ReceiveSide, packets: &[(i64, i64)], rembs: &mut Vec<(i64, u64)>) {
        let mut next_run = packets.first().map_or(0, |p| p.1) + 50_000;
        for &(send, arrival) in packets {
            while arrival >= next_run {
                if let Some(bps) = side.run(Time::from_micros(next_run as u64)) {
                    rembs.push((next_run, bps));
                }
                next_run += 50_000;
            }
            side.record(
                AbsSendTime::from_micros(send as u64),
                1200,
                Time::from_micros(arrival as u64),
            );
        }
    }

    /// When the first REMB under 1 Mbit/s of `rembs` went, µs.
    fn first_under_1m(rembs: &[(i64, u64)]) -> i64 {
        rembs
            .iter()
            .find(|&&(_, bps)| bps < 1_000_000)
            .unwrap_or_else(|| panic!("no cut: {rembs:?}"))
            .0
    }

    #[test]
    fn a_publisher_over_its_path_is_told_less_at_once_and_an_idle_path_more() {
        let mut side = ReceiveSide::default();
        let mut rembs = Vec::new();
        // 2 Mbit/s through a 2.5 Mbit/s path for 10 s: the estimate is never cut.
        let ok = through(2_000_000.0, 2_500_000.0, 1_000_000, 2080);
        feed(&mut side, &ok, &mut rembs);
        assert!(
            rembs.iter().all(|&(_, bps)| bps as f64 >= INITIAL_BPS),
            "{rembs:?}"
        );
        assert!(
            side.estimator.as_ref().unwrap().bps() > 1_500_000,
            "{rembs:?}"
        );
        // About one a second while nothing congests.
        assert!((9..=12).contains(&rembs.len()), "{rembs:?}");
        // Then 2 Mbit/s into a 600 kbit/s path: the queue grows, the detector sees
        // over-use, and a REMB well under 2 Mbit/s goes within half a second.
        let from = ok.last().unwrap().0 + 4_800;
        let start = rembs.len();
        let congested = through(2_000_000.0, 600_000.0, from, 200);
        feed(&mut side, &congested, &mut rembs);
        let at = first_under_1m(&rembs[start..]);
        assert!(at - from < 500_000, "cut after {} ms", (at - from) / 1000);
    }

    #[test]
    fn the_first_remb_is_bounded_by_what_arrives() {
        let mut side = ReceiveSide::default();
        let mut rembs = Vec::new();
        let slow = through(300_000.0, 2_500_000.0, 1_000_000, 100);
        feed(&mut side, &slow, &mut rembs);
        let (at, first) = rembs[0];
        // Not before the incoming rate is measured (half a second), and not the
        // 1 Mbit/s it starts from.
        assert!(at - slow[0].1 >= 450_000, "{rembs:?}");
        assert!(
            (first as f64) <= MAX_OVER_INCOMING * 300_000.0 * 1.1,
            "{rembs:?}"
        );
    }

    #[test]
    fn a_publisher_clock_set_back_does_not_blind_the_detector() {
        let mut side = ReceiveSide::default();
        let mut rembs = Vec::new();
        let ok = through(2_000_000.0, 2_500_000.0, 20_000_000, 1000);
        feed(&mut side, &ok, &mut rembs);
        // The publisher's clock goes back 10 s; its packets then meet a 600 kbit/s
        // path: the REMB falls within half a second all the same.
        let last_arrival = ok.last().unwrap().1;
        let congested: Vec<(i64, i64)> = through(2_000_000.0, 600_000.0, 0, 200)
            .into_iter()
            .map(|(send, arrival)| (send + 10_000_000, arrival - 20_000 + last_arrival + 4_800))
            .collect();
        let start = rembs.len();
        feed(&mut side, &congested, &mut rembs);
        let at = first_under_1m(&rembs[start..]);
        assert!(
            at - congested[0].1 < 500_000,
            "cut after {} ms",
            (at - congested[0].1) / 1000
        );
    }

    #[test]
    fn abs_send_time_unwraps_across_its_64_second_wrap() {
        let mut side = ReceiveSide::default();
        let before = 63_990_000u64;
        side.record(AbsSendTime::from_micros(before), 100, Time::from_millis(1));
        side.record(
            AbsSendTime::from_micros(before + 20_000),
            100,
            Time::from_millis(21),
        );
        // And one reordered from before the wrap.
        side.record(
            AbsSendTime::from_micros(before + 5_000),
            100,
            Time::from_millis(22),
        );
        let sends: Vec<i64> = side.pending.iter().map(|r| r.send_us).collect();
        assert!((sends[1] - sends[0] - 20_000).abs() <= 4, "{sends:?}");
        assert!((sends[2] - sends[0] - 5_000).abs() <= 4, "{sends:?}");
    }
}
