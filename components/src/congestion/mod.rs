//! A peer's transport-wide congestion control state
//! (draft-holmer-rmcat-transport-wide-cc-extensions-01), one component per peer since
//! the sequence number counts every RTP packet on the transport, whichever stream
//! (§2: "a transport-wide sequence number", one space over the BUNDLE group).
//!
//! - As a **receiver** of what a publisher sends, shoal keeps each packet's arrival
//!   time by transport-wide sequence number ([`ArrivalLog`]) and reports them back
//!   in transport-cc feedback (§3.1) at a bounded rate, so the publisher's own
//!   send-side estimator (libwebrtc's GCC in a browser) paces its upload to what
//!   reaches shoal.
//! - As a receiver of a publisher without transport-wide feedback, shoal estimates
//!   the path itself from the abs-send-time extension and tells the publisher in
//!   REMB ([`remb`]).
//! - As a **sender** to a subscriber, shoal numbers every RTP packet it sends there
//!   ([`SendSide`], [`history`]) and estimates from the subscriber's feedback on
//!   them how much the path to it carries ([`gcc`]).

pub mod bursts;
pub mod gcc;
pub mod history;
pub mod pacer;
pub mod probe;
pub mod remb;

use std::time::Duration;

use bevy_ecs::prelude::Component;

use crate::media::extend_seq;
use crate::rtcp::TransportCc;
use crate::time::Time;
use gcc::Estimator;
use history::{PacketResult, SendHistory};
use probe::Prober;

/// Arrivals a peer's log holds: the packets one feedback may describe, and the
/// reordering it can still take back. A power of two, so a sequence number indexes
/// it. At one feedback per [`FEEDBACK_INTERVAL`] it covers 10 000 packets a second.
pub const ARRIVAL_WINDOW: usize = 512;

/// How often feedback goes to a publisher while its packets arrive. draft-ietf-rmcat-
/// gcc-02 §3: "The RECOMMENDED feedback interval is once per received video frame or
/// at least once every 30 ms if audio-only or multi-stream. If the feedback overhead
/// needs to be limited this interval can be increased to 100 ms." An SFU receives
/// from many publishers at once, so shoal takes the middle: 50 ms, the interval
/// libwebrtc's own receiver uses, 20 small packets a second per publisher whatever
/// its rate.
pub const FEEDBACK_INTERVAL: Duration = Duration::from_millis(50);

/// Packets one feedback message describes at most: with two-byte deltas and two-bit
/// status vectors that is 2 × 400 + 2 × 58 + 20 bytes, inside any path's MTU with the
/// SRTCP trailer and the IP and UDP headers.
pub const MAX_PACKETS_PER_FEEDBACK: usize = 400;

/// Feedback messages one interval sends at most: a log that has more unreported
/// packets than these describe reports the rest next time (the window bounds them).
pub const MAX_FEEDBACKS_PER_INTERVAL: usize = 2;

/// What a publisher's packets measured on arrival, by transport-wide sequence number,
/// until feedback reports them.
#[derive(Clone, Debug, Default)]
pub struct ArrivalLog {
    /// The header extension id the publisher stamps the number under, when both the
    /// extension and `transport-cc` feedback were negotiated.
    pub ext_id: Option<u8>,
    /// Ring by sequence number modulo [`ARRIVAL_WINDOW`]; empty until the first
    /// packet.
    slots: Vec<Arrival>,
    /// The highest extended sequence number that arrived.
    max: Option<u64>,
    /// The first sequence number the next feedback reports.
    next: u64,
    /// Packets in a row that fell behind the window: a publisher whose numbering
    /// jumped (one packet far ahead) starts over once this reaches [`RESYNC_AFTER`],
    /// rather than going unreported for up to 32 767 packets.
    late_streak: u32,
    /// The SSRC of the last packet recorded: the feedback's media source (the draft
    /// leaves which one open; receivers read none).
    pub media_ssrc: u32,
    /// Feedback messages sent (the message's 8-bit count wraps, §3.1).
    pub sent: u64,
    /// Packets that arrived after the window had passed them: not reported.
    pub too_late: u64,
}

/// One packet's arrival.
#[derive(Clone, Copy, Debug)]
struct Arrival {
    /// Extended sequence number; `u64::MAX` for a free slot.
    seq: u64,
    /// µs on the shard's clock.
    at: i64,
    /// Whether a feedback message reported it received.
    reported: bool,
}

const NO_ARRIVAL: Arrival = Arrival {
    seq: u64::MAX,
    at: 0,
    reported: false,
};

/// Packets in a row behind the window after which the log starts over.
pub const RESYNC_AFTER: u32 = 32;

impl ArrivalLog {
    /// Records that packet `seq` (the extension's 16 bits) of `ssrc` arrived `at`.
    /// A packet reordered behind what feedback already reported is reported again
    /// from there, with the ones after it, as libwebrtc's receiver does (those
    /// reported received before go as "not received": §3.1.1's note); a duplicate
    /// keeps its first arrival. Returns whether there is something to report.
    pub fn record(&mut self, seq: u16, ssrc: u32, at: Time) -> bool {
        if self.slots.is_empty() {
            self.slots = vec![NO_ARRIVAL; ARRIVAL_WINDOW];
        }
        let ext = match self.max {
            Some(max) => extend_seq(max, seq),
            // The first number starts a cycle up, so one reordered behind it still
            // extends to a number of its own.
            None => u64::from(seq) + (1 << 16),
        };
        let max = self.max.map_or(ext, |m| m.max(ext));
        let oldest = max.saturating_sub(ARRIVAL_WINDOW as u64 - 1);
        if ext < oldest {
            self.too_late += 1;
            self.late_streak += 1;
            if self.late_streak >= RESYNC_AFTER {
                self.slots.fill(NO_ARRIVAL);
                self.max = None;
                self.late_streak = 0;
                return self.record(seq, ssrc, at);
            }
            return self.pending();
        }
        self.late_streak = 0;
        if self.max.is_none() {
            self.next = ext;
        }
        self.max = Some(max);
        self.next = self.next.clamp(oldest, max).min(ext);
        let slot = (ext % ARRIVAL_WINDOW as u64) as usize;
        if let Some(s) = self.slots.get_mut(slot)
            && s.seq != ext
        {
            *s = Arrival {
                seq: ext,
                at: at.as_micros() as i64,
                reported: false,
            };
        }
        self.media_ssrc = ssrc;
        true
    }

    /// Whether packets arrived that no feedback reported yet.
    pub fn pending(&self) -> bool {
        self.max.is_some_and(|max| max >= self.next)
    }

    /// The arrival of `seq` not yet reported, if it arrived.
    fn unreported(&self, seq: u64) -> Option<i64> {
        let slot = (seq % ARRIVAL_WINDOW as u64) as usize;
        self.slots
            .get(slot)
            .and_then(|a| (a.seq == seq && !a.reported).then_some(a.at))
    }

    /// The next run to report: its first sequence number (16 bits, as on the wire)
    /// and into `out` each packet's arrival in µs, `None` for one that has not
    /// arrived (or was reported received already), at most
    /// [`MAX_PACKETS_PER_FEEDBACK`], ending at an arrival. Empty when nothing is
    /// left to report; a stretch with no arrival at all is passed over, never sent
    /// as a message without a reference time.
    pub fn next_run(&mut self, out: &mut Vec<Option<i64>>) -> u16 {
        out.clear();
        while let Some(max) = self.max.filter(|&m| m >= self.next) {
            let end = max.min(self.next + MAX_PACKETS_PER_FEEDBACK as u64 - 1);
            out.extend((self.next..=end).map(|seq| self.unreported(seq)));
            while out.last() == Some(&None) {
                out.pop();
            }
            if !out.is_empty() {
                return self.next as u16;
            }
            self.next = end + 1;
        }
        0
    }

    /// Marks the first `count` packets of the run as reported.
    pub fn reported(&mut self, count: u16) {
        for seq in self.next..self.next + u64::from(count) {
            let slot = (seq % ARRIVAL_WINDOW as u64) as usize;
            if let Some(a) = self.slots.get_mut(slot)
                && a.seq == seq
            {
                a.reported = true;
            }
        }
        self.next += u64::from(count);
        self.sent += 1;
    }
}

/// The estimate a peer's send side starts from: enough for a 360p layer and audio,
/// well under what a 720p layer needs, so a subscriber starts low and climbs.
pub const INITIAL_ESTIMATE_BPS: f64 = 1_000_000.0;

/// What shoal sends a peer: the transport-wide numbers it stamps, when it sent each,
/// and the bandwidth estimate the peer's feedback on them gives.
#[derive(Clone, Debug, Default)]
pub struct SendSide {
    /// Packets stamped and not yet reported on.
    pub history: SendHistory,
    /// The estimate, from the first feedback on.
    pub estimator: Option<Box<Estimator>>,
    /// Feedback messages the peer sent on them.
    pub feedback_received: u64,
    /// Clusters sent to find more than the estimate says.
    pub prober: Prober,
    /// When its simulcast streams were last chosen from its feedback.
    pub chosen_at: Option<Time>,
    results: Vec<PacketResult>,
}

impl SendSide {
    /// Takes one transport-cc feedback message from the peer, received `now`.
    pub fn on_feedback(&mut self, now: Time, fb: &TransportCc) {
        self.feedback_received += 1;
        self.results.clear();
        self.history.on_feedback(fb, &mut self.results);
        if self.results.is_empty() {
            return;
        }
        let estimator = self
            .estimator
            .get_or_insert_with(|| Box::new(Estimator::new(INITIAL_ESTIMATE_BPS)));
        estimator.on_feedback(now, &self.results);
        if let Some(rate) = self.prober.on_results(now, &self.results) {
            estimator.on_probe(rate);
        }
    }

    /// Numbers the next packet, sent `now`, in the probe cluster that is out if any;
    /// returns the 16 bits that go on the wire.
    pub fn stamp(&mut self, now: Time) -> u16 {
        let probe = self.prober.tag();
        self.history.stamp_in(now, probe)
    }

    /// The packet stamped last did not go out (see [`SendHistory::unstamp_last`]).
    pub fn unstamp_last(&mut self) {
        let probe = self.history.unstamp_last();
        if probe != 0 {
            self.prober.untag(probe);
        }
    }

    /// The estimate, bit/s, once feedback came.
    pub fn estimate_bps(&self) -> Option<u64> {
        self.estimator.as_ref().map(|e| e.bps())
    }

    /// The largest burst to send the peer at `now`, bytes, by what its feedback
    /// showed drained ([`bursts`]).
    pub fn allowed_burst(&self, now: Time) -> Option<i64> {
        self.estimator.as_ref().and_then(|e| e.allowed_burst(now))
    }
}

/// A peer's transport-wide congestion control state: what it sends shoal, what
/// shoal sends it.
#[derive(Component, Clone, Debug, Default)]
pub struct TransportWide {
    /// Arrivals of the peer's packets, for the feedback shoal sends it.
    pub receive: ArrivalLog,
    /// shoal's own estimate of the peer's path to it, for a peer without
    /// transport-wide feedback.
    pub remb: remb::ReceiveSide,
    /// shoal's numbering of the packets it sends the peer, and its estimate.
    pub send: SendSide,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Time {
        Time::ZERO + Duration::from_millis(ms)
    }

    fn run(log: &mut ArrivalLog) -> (u16, Vec<Option<i64>>) {
        let mut out = Vec::new();
        let base = log.next_run(&mut out);
        (base, out)
    }

    #[test]
    fn a_run_covers_what_arrived_with_gaps_as_not_received() {
        let mut log = ArrivalLog::default();
        assert!(!log.pending());
        log.record(65_534, 1, at(10));
        log.record(0, 1, at(12));
        let (base, arrivals) = run(&mut log);
        assert_eq!(base, 65_534);
        assert_eq!(arrivals, [Some(10_000), None, Some(12_000)]);
        log.reported(3);
        assert!(!log.pending());
        log.record(1, 1, at(13));
        assert_eq!(run(&mut log), (1, vec![Some(13_000)]));
    }

    #[test]
    fn a_reordered_packet_is_reported_again_from_where_it_belongs() {
        let mut log = ArrivalLog::default();
        for (seq, ms) in [(100, 1), (102, 2)] {
            log.record(seq, 1, at(ms));
        }
        assert_eq!(run(&mut log), (100, vec![Some(1_000), None, Some(2_000)]));
        log.reported(3);
        log.record(101, 1, at(3));
        // 102 was reported received: now "not received" (§3.1.1's note), and a run
        // ends at an arrival.
        assert_eq!(run(&mut log), (101, vec![Some(3_000)]));
    }

    #[test]
    fn the_window_bounds_what_is_kept_and_reported() {
        let mut log = ArrivalLog::default();
        log.record(0, 1, at(0));
        log.record(ARRIVAL_WINDOW as u16 + 10, 1, at(1));
        // 0 fell out of the window; 11 to 410 hold no arrival and are passed over.
        let (base, arrivals) = run(&mut log);
        assert_eq!(usize::from(base), 11 + MAX_PACKETS_PER_FEEDBACK);
        assert_eq!(arrivals.len(), ARRIVAL_WINDOW - MAX_PACKETS_PER_FEEDBACK);
        assert_eq!(arrivals.last(), Some(&Some(1_000)));
        assert!(arrivals[..arrivals.len() - 1].iter().all(Option::is_none));
        log.record(0, 1, at(2));
        assert_eq!(log.too_late, 1);
        log.reported(arrivals.len() as u16);
        assert!(!log.pending());
        assert_eq!(run(&mut log).1, []);
    }

    #[test]
    fn a_jump_ahead_is_left_behind_after_enough_packets() {
        let mut log = ArrivalLog::default();
        log.record(100, 1, at(0));
        log.record(30_000, 1, at(1));
        let _ = run(&mut log);
        log.reported(1);
        for i in 0..RESYNC_AFTER {
            log.record(101 + i as u16, 1, at(2 + u64::from(i)));
        }
        assert_eq!(log.too_late, u64::from(RESYNC_AFTER));
        let (base, arrivals) = run(&mut log);
        assert_eq!(usize::from(base), 100 + RESYNC_AFTER as usize);
        assert_eq!(arrivals.len(), 1);
    }
}
