//! One direction of a simulated link: queueing at a bandwidth, loss, latency, jitter,
//! duplication and reordering, each decided per datagram from the simulation's RNG.

use std::collections::VecDeque;
use std::time::Duration;

use shoal_components::time::Time;

use super::rng::SimRng;

/// How one direction of a link treats datagrams.
///
/// A datagram first waits in the sender's queue and is serialised at `bandwidth_bps`
/// (drop-tail past `queue_limit_bytes`), then is lost with probability `loss` (it used
/// the bandwidth all the same), then arrives `latency` plus a uniform `[0, jitter]`
/// later. Arrivals keep sending order unless the datagram is picked for reordering
/// (probability `reorder`): it is then held back a further uniform `(0, latency +
/// jitter]` and later datagrams may overtake it. With probability `duplicate` a second
/// copy arrives as well, with its own jitter.
///
/// A `tcp_like` link is what an ICE-TCP connection looks like from the shard: the
/// driver frames datagrams onto a TCP stream (RFC 4571), so nothing is lost,
/// duplicated or reordered, and a loss on the wire becomes a retransmission one RTO
/// later that holds back everything behind it (head-of-line blocking); `loss` is the
/// wire's, `duplicate` and `reorder` do not apply.
#[derive(Clone, Debug, PartialEq)]
pub struct LinkConfig {
    /// One-way propagation delay.
    pub latency: Duration,
    /// Extra delay, uniform in `[0, jitter]` per datagram; never reorders by itself.
    pub jitter: Duration,
    /// Probability in `[0, 1]` that a datagram is lost.
    pub loss: f64,
    /// Probability in `[0, 1]` that a datagram arrives twice.
    pub duplicate: f64,
    /// Probability in `[0, 1]` that a datagram is held back and may be overtaken.
    pub reorder: f64,
    /// Serialisation rate in bits per second; `None` for an infinitely fast link.
    pub bandwidth_bps: Option<u64>,
    /// Bytes that may wait for (or be in) serialisation; more are dropped at the tail.
    /// Only meaningful with `bandwidth_bps`.
    pub queue_limit_bytes: usize,
    /// Reliable and in order, as over an ICE-TCP connection (see above).
    pub tcp_like: bool,
}

impl Default for LinkConfig {
    /// A clean 10 ms link: no jitter, loss, duplication or reordering, no rate limit,
    /// and a 256 KiB queue should a rate be set.
    fn default() -> LinkConfig {
        LinkConfig {
            latency: Duration::from_millis(10),
            jitter: Duration::ZERO,
            loss: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            bandwidth_bps: None,
            queue_limit_bytes: 256 * 1024,
            tcp_like: false,
        }
    }
}

impl LinkConfig {
    /// The default link with `latency` and `loss` set.
    pub fn lossy(latency: Duration, loss: f64) -> LinkConfig {
        LinkConfig {
            latency,
            loss,
            ..LinkConfig::default()
        }
    }

    /// A TCP-like link (an ICE-TCP path) with `latency`, whose wire loses `loss` of
    /// the segments, each then retransmitted after [`TCP_RTO`] (at least twice the
    /// latency).
    pub fn tcp_like(latency: Duration, loss: f64) -> LinkConfig {
        LinkConfig {
            latency,
            loss,
            tcp_like: true,
            ..LinkConfig::default()
        }
    }

    /// Panics on a configuration no run could mean: a probability outside `[0, 1]`
    /// (or NaN) or a zero bandwidth.
    pub(crate) fn assert_valid(&self) {
        for (name, p) in [
            ("loss", self.loss),
            ("duplicate", self.duplicate),
            ("reorder", self.reorder),
        ] {
            assert!(
                (0.0..=1.0).contains(&p),
                "link {name} probability {p} is outside [0, 1]"
            );
        }
        assert!(
            self.bandwidth_bps != Some(0),
            "link bandwidth must be positive"
        );
    }
}

/// How long a TCP-like link takes to retransmit a lost segment: Linux's minimum
/// RTO (RFC 6298 §2.4 allows a lower minimum than its 1 s), or two latencies if
/// that is longer.
pub const TCP_RTO: Duration = Duration::from_millis(200);

/// What a link counted. Per direction from [`super::Sim::link_stats`], and summed over
/// all links from [`super::Sim::stats`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NetStats {
    /// Datagrams handed to the link.
    pub sent: u64,
    /// Datagrams (and duplicates) handed to the receiving node.
    pub delivered: u64,
    /// Datagrams lost on the wire.
    pub lost: u64,
    /// Datagrams dropped at the tail of a full queue.
    pub queue_dropped: u64,
    /// Extra copies the link made.
    pub duplicated: u64,
    /// Datagrams held back so that later ones may overtake them.
    pub reordered: u64,
    /// Segments a TCP-like link lost and sent again.
    pub retransmitted: u64,
    /// Datagrams that reached an address no node has.
    pub undeliverable: u64,
    /// When a datagram was last handed to the receiving node.
    pub last_delivered_at: Option<Time>,
}

/// What became of one datagram put on a link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The queue was full.
    QueueDropped,
    /// Lost on the wire.
    Lost,
    /// It arrives at `at`, and a duplicate at `duplicate_at` if one was made.
    Arrives {
        /// Arrival of the datagram.
        at: Time,
        /// Whether it was held back for reordering.
        reordered: bool,
        /// Arrival of the extra copy.
        duplicate_at: Option<Time>,
    },
}

/// The moving parts of one link direction.
#[derive(Debug, Default)]
pub(crate) struct LinkState {
    /// The latest in-order arrival so far: FIFO arrivals never precede it.
    last_arrival: Time,
    /// When the serialiser is free again.
    busy_until: Time,
    /// Datagrams not yet fully serialised: (finish time, bytes), oldest first.
    in_queue: VecDeque<(Time, usize)>,
    /// The sum of `in_queue`'s bytes.
    queued_bytes: usize,
    /// Counters.
    pub(crate) stats: NetStats,
}

impl LinkState {
    /// Decides the fate of a `len`-byte datagram sent at `now`. The RNG is drawn in a
    /// fixed order (loss, jitter, reorder, duplicate, duplicate's jitter) so a seed
    /// replays exactly.
    pub(crate) fn transmit(
        &mut self,
        cfg: &LinkConfig,
        now: Time,
        len: usize,
        rng: &mut SimRng,
    ) -> Outcome {
        self.stats.sent += 1;
        let departs = match cfg.bandwidth_bps {
            Some(bps) => match self.enqueue(now, len, bps, cfg.queue_limit_bytes) {
                Some(t) => t,
                None => {
                    self.stats.queue_dropped += 1;
                    return Outcome::QueueDropped;
                }
            },
            None => now,
        };
        if cfg.tcp_like {
            // Each loss costs a retransmission; the stream delivers in order, so
            // everything sent later waits behind it.
            let rto = TCP_RTO.max(cfg.latency * 2);
            let mut at = departs + cfg.latency;
            // At most 15 tries, as Linux's tcp_retries2 (a lossless wire after that).
            for _ in 0..15 {
                if !rng.chance(cfg.loss) {
                    break;
                }
                self.stats.retransmitted += 1;
                at = at + rto;
            }
            return Outcome::Arrives {
                at: self.fifo(at),
                reordered: false,
                duplicate_at: None,
            };
        }
        if rng.chance(cfg.loss) {
            self.stats.lost += 1;
            return Outcome::Lost;
        }
        let mut at = departs + cfg.latency + rng.duration_up_to(cfg.jitter);
        let reordered = rng.chance(cfg.reorder);
        if reordered {
            // Held back past where FIFO would put it, and not a floor for later
            // datagrams: they may overtake it.
            let span = (cfg.latency + cfg.jitter).max(Duration::from_micros(1));
            at = at.max(self.last_arrival) + Duration::from_micros(1) + rng.duration_up_to(span);
            self.stats.reordered += 1;
        } else {
            at = self.fifo(at);
        }
        let duplicate_at = if rng.chance(cfg.duplicate) {
            self.stats.duplicated += 1;
            let dup = departs + cfg.latency + rng.duration_up_to(cfg.jitter);
            Some(self.fifo(dup))
        } else {
            None
        };
        Outcome::Arrives {
            at,
            reordered,
            duplicate_at,
        }
    }

    /// Clamps an in-order arrival behind the previous one (equal times keep sending
    /// order: the event queue breaks ties by insertion).
    fn fifo(&mut self, at: Time) -> Time {
        let at = at.max(self.last_arrival);
        self.last_arrival = at;
        at
    }

    /// Queues `len` bytes behind what is still being serialised; returns when the last
    /// bit leaves, or `None` when the queue would pass `limit` bytes (drop-tail).
    fn enqueue(&mut self, now: Time, len: usize, bps: u64, limit: usize) -> Option<Time> {
        while let Some(&(done, bytes)) = self.in_queue.front() {
            if done > now {
                break;
            }
            self.in_queue.pop_front();
            self.queued_bytes -= bytes;
        }
        if self.queued_bytes + len > limit {
            return None;
        }
        let done = self.busy_until.max(now) + serialization_time(len, bps);
        self.busy_until = done;
        self.in_queue.push_back((done, len));
        self.queued_bytes += len;
        Some(done)
    }

    /// Bytes waiting for or in serialisation (as of the last send).
    #[cfg(test)]
    pub(crate) fn queued_bytes(&self) -> usize {
        self.queued_bytes
    }
}

/// The time `len` bytes take to serialise at `bps`, rounded up to the microsecond.
pub(crate) fn serialization_time(len: usize, bps: u64) -> Duration {
    let bits = (len as u128) * 8 * 1_000_000;
    let us = bits.div_ceil(u128::from(bps.max(1)));
    Duration::from_micros(u64::try_from(us).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn arrival(o: Outcome) -> Time {
        match o {
            Outcome::Arrives { at, .. } => at,
            other => panic!("expected an arrival, got {other:?}"),
        }
    }

    #[test]
    fn jitter_without_reorder_keeps_fifo() {
        let cfg = LinkConfig {
            latency: ms(30),
            jitter: ms(50),
            ..LinkConfig::default()
        };
        let mut link = LinkState::default();
        let mut rng = SimRng::new(3);
        let mut last = Time::ZERO;
        let mut spread = false;
        for i in 0..5_000u64 {
            let now = Time::from_micros(i * 100); // one every 0.1 ms, far below the jitter
            let at = arrival(link.transmit(&cfg, now, 100, &mut rng));
            assert!(at >= last, "datagram {i} overtook its predecessor");
            assert!(at >= now + ms(30));
            spread |= at > now + ms(31);
            last = at;
        }
        assert!(spread, "jitter should have delayed some datagrams");
    }

    #[test]
    fn reorder_lets_later_datagrams_overtake() {
        let cfg = LinkConfig {
            latency: ms(20),
            reorder: 0.2,
            ..LinkConfig::default()
        };
        let mut link = LinkState::default();
        let mut rng = SimRng::new(4);
        let arrivals: Vec<Time> = (0..1_000u64)
            .map(|i| arrival(link.transmit(&cfg, Time::from_micros(i * 1000), 100, &mut rng)))
            .collect();
        let overtaken = arrivals.windows(2).filter(|w| w[1] < w[0]).count();
        assert!(overtaken > 50, "only {overtaken} inversions");
        let held = link.stats.reordered;
        assert!(
            (120..=280).contains(&held),
            "{held} of 1000 held back at p = 0.2"
        );
    }

    #[test]
    fn loss_rate_is_roughly_as_configured() {
        let n = 100_000;
        for loss in [0.01, 0.1, 0.5] {
            let cfg = LinkConfig::lossy(ms(10), loss);
            let mut link = LinkState::default();
            let mut rng = SimRng::new(5);
            let lost = (0..n)
                .filter(|_| link.transmit(&cfg, Time::ZERO, 100, &mut rng) == Outcome::Lost)
                .count();
            let rate = lost as f64 / n as f64;
            // Binomial standard deviation is at most 0.0016 here; allow ~5 of them.
            assert!((rate - loss).abs() < 0.008, "loss {loss}: measured {rate}");
            assert_eq!(link.stats.lost, lost as u64);
        }
    }

    #[test]
    fn duplicates_follow_their_original() {
        let cfg = LinkConfig {
            duplicate: 1.0,
            ..LinkConfig::default()
        };
        let mut link = LinkState::default();
        let mut rng = SimRng::new(6);
        match link.transmit(&cfg, Time::ZERO, 100, &mut rng) {
            Outcome::Arrives {
                at,
                duplicate_at: Some(dup),
                reordered: false,
            } => {
                assert_eq!(at, Time::ZERO + ms(10));
                assert_eq!(dup, at);
            }
            other => panic!("unexpected {other:?}"),
        }
        assert_eq!(link.stats.duplicated, 1);
    }

    #[test]
    fn bandwidth_serialises_back_to_back_datagrams() {
        // 1250 bytes = 10 000 bits = 10 ms at 1 Mbit/s.
        assert_eq!(serialization_time(1250, 1_000_000), ms(10));
        assert_eq!(serialization_time(1, 3), Duration::from_micros(2_666_667)); // rounded up
        let cfg = LinkConfig {
            latency: ms(5),
            bandwidth_bps: Some(1_000_000),
            queue_limit_bytes: 1 << 20,
            ..LinkConfig::default()
        };
        let mut link = LinkState::default();
        let mut rng = SimRng::new(7);
        let t0 = Time::ZERO;
        assert_eq!(
            arrival(link.transmit(&cfg, t0, 1250, &mut rng)),
            t0 + ms(15)
        );
        assert_eq!(
            arrival(link.transmit(&cfg, t0, 1250, &mut rng)),
            t0 + ms(25)
        );
        // Sent after the serialiser went idle: no queueing delay.
        let t1 = Time::ZERO + ms(100);
        assert_eq!(
            arrival(link.transmit(&cfg, t1, 125, &mut rng)),
            t1 + ms(1) + ms(5)
        );
    }

    #[test]
    fn full_queue_drops_at_the_tail() {
        // 1000 bytes take 8 ms at 1 Mbit/s; the queue holds 3000 bytes.
        let cfg = LinkConfig {
            latency: ms(1),
            bandwidth_bps: Some(1_000_000),
            queue_limit_bytes: 3000,
            ..LinkConfig::default()
        };
        let mut link = LinkState::default();
        let mut rng = SimRng::new(8);
        let outcomes: Vec<Outcome> = (0..5)
            .map(|_| link.transmit(&cfg, Time::ZERO, 1000, &mut rng))
            .collect();
        assert!(matches!(outcomes[2], Outcome::Arrives { .. }));
        assert_eq!(outcomes[3], Outcome::QueueDropped);
        assert_eq!(outcomes[4], Outcome::QueueDropped);
        assert_eq!(link.stats.queue_dropped, 2);
        assert_eq!(link.queued_bytes(), 3000);
        // Once the first datagram has left (8 ms), there is room for one more, which
        // queues behind the other two (done at 24 ms) and leaves at 32 ms.
        let t = Time::ZERO + ms(8);
        assert_eq!(
            arrival(link.transmit(&cfg, t, 1000, &mut rng)),
            Time::ZERO + ms(33)
        );
        assert_eq!(link.transmit(&cfg, t, 1, &mut rng), Outcome::QueueDropped);
    }
}
