//! Pacing what shoal sends one peer (one queue per peer, drained by the egress pass
//! on the tick's clock): once the peer's feedback gives an estimate, its RTP goes out
//! at [`PACING_FACTOR`] times the estimate, so a burst (a keyframe, a switch to a
//! higher simulcast stream) is spread over time instead of landing at once in the
//! peer's bottleneck queue, where it would be lost or read as over-use. Audio goes
//! first, then retransmissions, then video; retransmissions and the whole queue are
//! bounded, and a queue that would take longer than [`MAX_QUEUE_TIME`] to drain at
//! the pacing rate is drained faster (libwebrtc's pacer does the same, over 2 s), so
//! pacing never adds more than that much delay.

use std::collections::VecDeque;
use std::time::Duration;

use bevy_ecs::prelude::{Component, Entity};

use crate::tick::SharedRtp;
use crate::time::Time;

/// The pacing rate as a multiple of the estimate: enough to keep up with an encoder
/// a little over its target, and to spread a keyframe over a few frame intervals.
pub const PACING_FACTOR: f64 = 1.0;
/// The lowest pacing rate, bit/s, whatever the estimate says.
pub const MIN_PACING_BPS: u64 = 100_000;
/// The longest burst by default, as time at the pacing rate: libwebrtc's pacer lets
/// its debt reach 40 ms (`PacingController::kDefaultBurstInterval`).
/// `ShardConfig::pacer_burst` sets it per shard.
///
/// A longer burst cuts the delay pacing adds (a keyframe that fits goes at once
/// instead of a packet at a time), but it lands in the path's narrowest queue at
/// once, and on a path near its capacity the estimator reads that queue as over-use:
/// with every burst 10 ms long or more, the simulcast subscriber of
/// `sim_bwe_tracks_bottleneck` is knocked off the top stream by the keyframe of its
/// own climb. So a burst is [`BURST_TIME`] of the pacing rate (or the setting, if
/// shorter), and grows toward the setting only as far as the path has shown it
/// drains bursts at once ([`super::bursts`]).
pub const DEFAULT_BURST: Duration = Duration::from_millis(40);
/// The burst every path takes, and the time within which the path's narrowest link
/// must drain a longer one: the delay detector's `burst_time`
/// (draft-ietf-rmcat-gcc-02 §5.2, [`super::gcc::BURST_TIME_US`]), the spread of
/// sends it takes as one group.
pub const BURST_TIME: Duration = Duration::from_micros(super::gcc::BURST_TIME_US as u64);
/// The largest burst in bytes, whatever the rate and setting: libwebrtc's
/// `kMaxBurstSize`, so that a burst does not overflow a socket's send buffer.
pub const MAX_BURST_BYTES: i64 = 63_000;
/// The longest a queue may take to drain: past it the pacing rate rises to drain it
/// in this time (libwebrtc's pacer allows 2 s). A forwarded stream does not follow
/// the estimate as an encoder would: while an estimate lags a stream (a new
/// subscriber's starts at 1 Mbit/s), pacing holds the stream back by at most this
/// much. Shorter limits (100 and 250 ms) drained a keyframe after a climb to a higher
/// simulcast stream faster than the path, which read as over-use
/// (`sim_subscriber_track_settings_bound_the_stream`).
pub const MAX_QUEUE_TIME: Duration = Duration::from_millis(500);
/// Packets a queue holds at most (a second of 10 Mbit/s in 1200-byte packets); past
/// it the oldest video packet is dropped.
pub const MAX_QUEUED: usize = 1024;
/// Retransmissions a queue holds at most; past it a new one is dropped (the peer
/// asks again).
pub const MAX_QUEUED_RETRANSMISSIONS: usize = 128;

/// The bytes `bps` carries in `time` (at most `i64::MAX`).
pub fn bytes_in(bps: u64, time: Duration) -> i64 {
    (u128::from(bps) * time.as_micros() / 8_000_000).min(i64::MAX as u128) as i64
}

/// One packet waiting: the subscription it goes out on, the packet, and whether it
/// is a retransmission.
#[derive(Clone, Debug)]
pub struct Paced {
    /// The subscription.
    pub subscription: Entity,
    /// The packet.
    pub packet: SharedRtp,
    /// A retransmission (RFC 4588).
    pub retransmission: bool,
}

impl Paced {
    fn bytes(&self) -> usize {
        self.packet.packet.len()
    }
}

/// A peer's pacing queue and budget.
#[derive(Component, Debug)]
pub struct Pacer {
    audio: VecDeque<Paced>,
    retransmissions: VecDeque<Paced>,
    video: VecDeque<Paced>,
    queued_bytes: usize,
    /// Bytes that may go now (negative: owed).
    budget: i64,
    /// When the budget was last filled.
    filled_at: Option<Time>,
    /// The rate in force, bit/s.
    pub rate_bps: u64,
    /// Packets dropped because the queue was full.
    pub dropped: u64,
    /// Packets that waited in the queue.
    pub paced: u64,
    /// How much unused budget carries over at most, as time at the pacing rate.
    burst: Duration,
    /// How much carries over now, bytes.
    pub burst_bytes: i64,
}

impl Default for Pacer {
    fn default() -> Pacer {
        Pacer::with_burst(DEFAULT_BURST)
    }
}

impl Pacer {
    /// A pacer whose unused budget carries over [`BURST_TIME`] at its rate (or
    /// `burst`, if shorter), more as far as the path has shown it drains more
    /// ([`Pacer::refill`]), never more than `burst` at its rate nor
    /// [`MAX_BURST_BYTES`].
    pub fn with_burst(burst: Duration) -> Pacer {
        Pacer {
            audio: VecDeque::new(),
            retransmissions: VecDeque::new(),
            video: VecDeque::new(),
            queued_bytes: 0,
            budget: 0,
            filled_at: None,
            rate_bps: 0,
            dropped: 0,
            paced: 0,
            burst,
            burst_bytes: 0,
        }
    }

    /// Packets waiting.
    pub fn len(&self) -> usize {
        self.audio.len() + self.retransmissions.len() + self.video.len()
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes waiting.
    pub fn queued_bytes(&self) -> usize {
        self.queued_bytes
    }

    /// Sets the rate from the peer's `estimate_bps` at `now` and the longest burst
    /// from `allowed_burst`, the bytes its path has shown it drains at once
    /// ([`super::bursts::Bursts::allowed`]), and fills the budget for the time since
    /// it was last filled.
    pub fn refill(&mut self, now: Time, estimate_bps: u64, allowed_burst: Option<i64>) {
        let mut rate = ((estimate_bps as f64 * PACING_FACTOR) as u64).max(MIN_PACING_BPS);
        // A queue that would take too long at this rate is drained in MAX_QUEUE_TIME.
        let drain = (self.queued_bytes as u64 * 8 * 1000) / MAX_QUEUE_TIME.as_millis() as u64;
        rate = rate.max(drain);
        self.rate_bps = rate;
        let shortest = bytes_in(rate, self.burst.min(BURST_TIME));
        let longest = bytes_in(rate, self.burst);
        let cap = allowed_burst
            .unwrap_or(shortest)
            .clamp(shortest, longest)
            .clamp(1500, MAX_BURST_BYTES);
        self.burst_bytes = cap;
        // It starts with a full burst's worth.
        let add = match self.filled_at {
            Some(at) => bytes_in(rate, now.saturating_since(at)),
            None => cap,
        };
        self.filled_at = Some(now);
        self.budget = (self.budget + add).min(cap);
    }

    /// Whether a packet may go now.
    pub fn may_send(&self) -> bool {
        self.budget > 0
    }

    /// Counts `bytes` sent.
    pub fn spend(&mut self, bytes: usize) {
        self.budget -= bytes as i64;
    }

    /// Queues `item`; false if it was dropped (the queue was full).
    pub fn push(&mut self, item: Paced) -> bool {
        let audio = item.packet.audio;
        if item.retransmission {
            if self.retransmissions.len() >= MAX_QUEUED_RETRANSMISSIONS {
                self.dropped += 1;
                return false;
            }
        } else if self.len() >= MAX_QUEUED {
            // The oldest video goes first: audio and repairs are worth more.
            match self.video.pop_front() {
                Some(old) => self.queued_bytes -= old.bytes(),
                None => {
                    self.dropped += 1;
                    return false;
                }
            }
            self.dropped += 1;
        }
        self.queued_bytes += item.bytes();
        self.paced += 1;
        match (audio, item.retransmission) {
            (true, _) => self.audio.push_back(item),
            (false, true) => self.retransmissions.push_back(item),
            (false, false) => self.video.push_back(item),
        }
        true
    }

    /// The next packet to send: audio first, then retransmissions, then video.
    pub fn pop(&mut self) -> Option<Paced> {
        let item = self
            .audio
            .pop_front()
            .or_else(|| self.retransmissions.pop_front())
            .or_else(|| self.video.pop_front())?;
        self.queued_bytes -= item.bytes();
        Some(item)
    }

    /// When the budget will allow the next packet, from `now`.
    pub fn next_send(&self, now: Time) -> Time {
        if self.budget > 0 || self.rate_bps == 0 {
            return now;
        }
        let owed = (1 - self.budget) as u128;
        let us = (owed * 8_000_000).div_ceil(u128::from(self.rate_bps));
        now + Duration::from_micros(us.min(1_000_000) as u64)
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::rtp::{RtpFields, RtpHeader, RtpWriter};

    fn packet(bytes: usize, retransmission: bool, audio: bool) -> Paced {
        let mut out = bytes::BytesMut::new();
        let fields = RtpFields {
            marker: false,
            payload_type: 96,
            sequence_number: 1,
            timestamp: 0,
            ssrc: 1,
        };
        let mut w = RtpWriter::new(&mut out, &fields, &[]);
        w.payload(&vec![0; bytes - 12]);
        w.finish(0);
        let packet: Bytes = out.freeze();
        Paced {
            subscription: Entity::PLACEHOLDER,
            packet: SharedRtp {
                header: RtpHeader::parse(&packet).unwrap(),
                packet,
                seq: 0,
                audio_level: None,
                capture_time: None,
                audio,
                vp8: None,
                shift: Default::default(),
                layer: None,
            },
            retransmission,
        }
    }

    #[test]
    fn a_burst_goes_out_at_the_pacing_rate() {
        let mut p = Pacer::default();
        let t0 = Time::from_millis(1000);
        // 1.5 Mbit/s pacing, 187.5 bytes a millisecond.
        let estimate = (1_500_000.0 / PACING_FACTOR) as u64;
        p.refill(t0, estimate, None);
        assert_eq!(p.rate_bps, 1_500_000);
        for _ in 0..10 {
            assert!(p.push(packet(1200, false, false)));
        }
        let mut sent = Vec::new();
        let mut now = t0;
        while !p.is_empty() {
            p.refill(now, estimate, None);
            while p.may_send() {
                let Some(item) = p.pop() else { break };
                p.spend(item.bytes());
                sent.push(now);
            }
            now = p.next_send(now);
        }
        // The first goes on the starting burst (1500 bytes, the smallest), the other
        // nine 1200-byte packets at 187.5 bytes a millisecond, less what that burst
        // left over: (10 800 − 1 500) / 187.5 = 49.6 ms from the first to the last.
        let span = sent.last().unwrap().saturating_since(sent[0]);
        assert!(
            (Duration::from_millis(48)..=Duration::from_millis(51)).contains(&span),
            "{span:?}"
        );
    }

    #[test]
    fn a_burst_is_as_long_as_the_path_has_shown_it_drains() {
        let t0 = Time::from_millis(1000);
        // 2 Mbit/s: 40 ms is 10 000 bytes, so a 9 600-byte keyframe goes at once on
        // a fresh budget where the path drained bursts half its size; 5 ms at the
        // pacing rate (1 250 bytes, raised to the 1 500-byte least) lets two through.
        let estimate = (2_000_000.0 / PACING_FACTOR) as u64;
        let at_once = |burst: Duration, allowed: Option<i64>| {
            let mut p = Pacer::with_burst(burst);
            p.refill(t0, estimate, allowed);
            for _ in 0..8 {
                p.push(packet(1200, false, false));
            }
            let mut n = 0;
            while p.may_send() {
                let Some(item) = p.pop() else { break };
                p.spend(item.bytes());
                n += 1;
            }
            n
        };
        let plenty = Some(i64::MAX);
        assert_eq!(at_once(DEFAULT_BURST, plenty), 8);
        // Nothing shown yet, or less than 5 ms of the rate: 5 ms.
        assert_eq!(at_once(DEFAULT_BURST, None), 2);
        assert_eq!(at_once(DEFAULT_BURST, Some(0)), 2);
        // 6 250 bytes shown: five packets and the one that takes the budget below
        // zero.
        assert_eq!(at_once(DEFAULT_BURST, Some(6_250)), 6);
        // The setting bounds it, even below burst_time.
        assert_eq!(at_once(BURST_TIME, plenty), 2);
        assert_eq!(at_once(Duration::from_millis(1), plenty), 2);
        // Whatever the setting and the path, at most MAX_BURST_BYTES.
        let mut p = Pacer::with_burst(Duration::from_secs(1));
        p.refill(t0, 100_000_000, plenty);
        let mut sent = 0;
        for _ in 0..100 {
            p.push(packet(1200, false, false));
        }
        while p.may_send() {
            let Some(item) = p.pop() else { break };
            p.spend(item.bytes());
            sent += item.bytes() as i64;
        }
        assert!(
            (MAX_BURST_BYTES..MAX_BURST_BYTES + 1200).contains(&sent),
            "{sent}"
        );
    }

    #[test]
    fn audio_then_repairs_then_video_and_bounds() {
        let mut p = Pacer::default();
        p.push(packet(100, false, false));
        p.push(packet(200, true, false));
        p.push(packet(300, false, true));
        let order: Vec<usize> = std::iter::from_fn(|| p.pop()).map(|x| x.bytes()).collect();
        assert_eq!(order, [300, 200, 100]);
        for _ in 0..MAX_QUEUED_RETRANSMISSIONS {
            assert!(p.push(packet(100, true, false)));
        }
        assert!(!p.push(packet(100, true, false)), "repairs bounded");
        for _ in 0..MAX_QUEUED {
            p.push(packet(100, false, false));
        }
        assert_eq!(p.len(), MAX_QUEUED);
        assert!(p.dropped > 1);
        // A long queue drains within MAX_QUEUE_TIME whatever the estimate.
        p.refill(Time::from_millis(5), 100_000, None);
        let drain = p.queued_bytes() as u64 * 8 * 1000 / MAX_QUEUE_TIME.as_millis() as u64;
        assert_eq!(p.rate_bps, drain);
    }
}
