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
//! - As a **sender** to a subscriber, shoal numbers every RTP packet it sends there
//!   ([`SendLog`]) and reads the subscriber's feedback on them.

use std::time::Duration;

use bevy_ecs::prelude::Component;

use crate::media::extend_seq;
use crate::time::Time;

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
    /// Ring of (extended sequence number, arrival in µs on the shard's clock), by
    /// sequence number modulo [`ARRIVAL_WINDOW`]; empty until the first packet.
    slots: Vec<(u64, i64)>,
    /// The highest extended sequence number that arrived.
    max: Option<u64>,
    /// The first sequence number the next feedback reports.
    next: u64,
    /// The SSRC of the last packet recorded: the feedback's media source (the draft
    /// leaves which one open; receivers read none).
    pub media_ssrc: u32,
    /// Feedback messages sent (the message's 8-bit count wraps, §3.1).
    pub sent: u64,
    /// Packets that arrived after the window had passed them: not reported.
    pub too_late: u64,
}

impl ArrivalLog {
    /// Records that packet `seq` (the extension's 16 bits) of `ssrc` arrived `at`.
    /// A packet reordered behind what feedback already reported is reported again
    /// from there, with the ones after it, as libwebrtc's receiver does; a duplicate
    /// keeps its first arrival. Returns whether there is something to report.
    pub fn record(&mut self, seq: u16, ssrc: u32, at: Time) -> bool {
        if self.slots.is_empty() {
            self.slots = vec![(u64::MAX, 0); ARRIVAL_WINDOW];
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
            return self.pending();
        }
        if self.max.is_none() {
            self.next = ext;
        }
        self.max = Some(max);
        self.next = self.next.clamp(oldest, max).min(ext);
        let slot = (ext % ARRIVAL_WINDOW as u64) as usize;
        if let Some(s) = self.slots.get_mut(slot)
            && s.0 != ext
        {
            *s = (ext, at.as_micros() as i64);
        }
        self.media_ssrc = ssrc;
        true
    }

    /// Whether packets arrived that no feedback reported yet.
    pub fn pending(&self) -> bool {
        self.max.is_some_and(|max| max >= self.next)
    }

    /// The next run to report: its first sequence number (16 bits, as on the wire)
    /// and into `out` each packet's arrival in µs, `None` for one that has not
    /// arrived, at most [`MAX_PACKETS_PER_FEEDBACK`]. Empty when nothing is pending.
    pub fn next_run(&self, out: &mut Vec<Option<i64>>) -> u16 {
        out.clear();
        let Some(max) = self.max.filter(|&m| m >= self.next) else {
            return 0;
        };
        let end = max.min(self.next + MAX_PACKETS_PER_FEEDBACK as u64 - 1);
        out.extend((self.next..=end).map(|seq| {
            let slot = (seq % ARRIVAL_WINDOW as u64) as usize;
            self.slots
                .get(slot)
                .and_then(|&(s, at)| (s == seq).then_some(at))
        }));
        self.next as u16
    }

    /// Marks the first `count` packets of the run as reported.
    pub fn reported(&mut self, count: u16) {
        self.next += u64::from(count);
        self.sent += 1;
    }
}

/// The transport-wide numbers shoal stamps on what it sends a subscriber.
#[derive(Clone, Debug, Default)]
pub struct SendLog {
    /// The next number to stamp.
    pub next: u16,
    /// Packets stamped.
    pub stamped: u64,
    /// Feedback messages the subscriber sent on them.
    pub feedback_received: u64,
}

impl SendLog {
    /// The number for the next packet sent.
    pub fn stamp(&mut self) -> u16 {
        let seq = self.next;
        self.next = seq.wrapping_add(1);
        self.stamped += 1;
        seq
    }
}

/// A peer's transport-wide congestion control state: what it sends shoal, what
/// shoal sends it.
#[derive(Component, Clone, Debug, Default)]
pub struct TransportWide {
    /// Arrivals of the peer's packets, for the feedback shoal sends it.
    pub receive: ArrivalLog,
    /// shoal's numbering of the packets it sends the peer.
    pub send: SendLog,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Time {
        Time::ZERO + Duration::from_millis(ms)
    }

    fn run(log: &ArrivalLog) -> (u16, Vec<Option<i64>>) {
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
        let (base, arrivals) = run(&log);
        assert_eq!(base, 65_534);
        assert_eq!(arrivals, [Some(10_000), None, Some(12_000)]);
        log.reported(3);
        assert!(!log.pending());
        log.record(1, 1, at(13));
        assert_eq!(run(&log), (1, vec![Some(13_000)]));
    }

    #[test]
    fn a_reordered_packet_is_reported_again_from_where_it_belongs() {
        let mut log = ArrivalLog::default();
        for (seq, ms) in [(100, 1), (102, 2)] {
            log.record(seq, 1, at(ms));
        }
        log.reported(3);
        log.record(101, 1, at(3));
        assert_eq!(run(&log), (101, vec![Some(3_000), Some(2_000)]));
    }

    #[test]
    fn the_window_bounds_what_is_kept_and_reported() {
        let mut log = ArrivalLog::default();
        log.record(0, 1, at(0));
        log.record(ARRIVAL_WINDOW as u16 + 10, 1, at(1));
        let (base, arrivals) = run(&log);
        assert_eq!(base, 11, "the oldest still in the window");
        assert_eq!(arrivals.len(), MAX_PACKETS_PER_FEEDBACK);
        log.record(0, 1, at(2));
        assert_eq!(log.too_late, 1);
        log.reported(MAX_PACKETS_PER_FEEDBACK as u16);
        let (base, arrivals) = run(&log);
        assert_eq!(usize::from(base), 11 + MAX_PACKETS_PER_FEEDBACK);
        assert_eq!(arrivals.last(), Some(&Some(1_000)));
    }
}
