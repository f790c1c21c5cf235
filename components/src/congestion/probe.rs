//! Probing a path for more than it is sent (draft-ietf-rmcat-gcc-02 §5.5 lets the
//! estimate grow only from what arrives: "A_hat(i) < 1.5 * R_hat(i)"). A subscriber
//! held on a low simulcast stream receives little, so its estimate could never reach
//! a higher stream's rate. When the stream choice wants more than the estimate
//! gives, shoal sends a short cluster of packets (retransmissions of what the
//! subscriber already has, which it discards) paced at a target rate above the
//! estimate; the feedback on the cluster tells how fast it arrived. The rate a
//! cluster measures is the smaller of the rate it was sent at and the rate it
//! arrived at: a path that carries the target delivers the cluster at the rate it was
//! sent, a narrower one spreads it out.
//!
//! Every packet stamped while a cluster is out counts for it (forwarded media too:
//! it shares the path). A cluster whose packets did not mostly arrive measures
//! nothing. Clusters are spaced [`PROBE_INTERVAL`] apart, twice that after one that
//! found less than it looked for, up to [`MAX_PROBE_INTERVAL`].

use std::time::Duration;

use super::history::PacketResult;
use crate::time::Time;

/// The shortest time between two clusters.
pub const PROBE_INTERVAL: Duration = Duration::from_secs(1);
/// The longest, after clusters that kept finding less than wanted.
pub const MAX_PROBE_INTERVAL: Duration = Duration::from_secs(4);
/// How long a cluster lasts at its target rate (libwebrtc's probe clusters last
/// 15 ms and more; more packets measure a rate more steadily through jitter).
pub const CLUSTER_DURATION: Duration = Duration::from_millis(50);
/// Packets a cluster sends at least, and at most.
pub const MIN_CLUSTER_PACKETS: u32 = 5;
/// See [`MIN_CLUSTER_PACKETS`].
pub const MAX_CLUSTER_PACKETS: u32 = 40;
/// The share of a cluster's packets that must be reported received for it to
/// measure anything.
pub const MIN_RECEIVED_SHARE: f64 = 0.8;
/// The share of what a cluster measured that it raises the estimate to (libwebrtc's
/// probe estimator takes 95 % of a saturated path's rate).
pub const PROBE_UTILIZATION: f64 = 0.9;
/// How long feedback on a cluster is waited for.
pub const CLUSTER_TIMEOUT: Duration = Duration::from_secs(2);

/// A cluster being sent.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sending {
    /// Its id, tagged on every packet stamped while it is out.
    pub id: u16,
    /// Its rate, bit/s.
    pub target_bps: u64,
    /// Probe packets still to send.
    pub left: u32,
}

/// What the feedback told of a cluster so far.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Measured {
    id: u16,
    target_bps: u64,
    /// Packets stamped in it.
    stamped: u32,
    /// When it closed (no more packets tagged), µs.
    closed_us: Option<i64>,
    received: u32,
    lost: u32,
    bytes_sent: u64,
    first_send: Option<(i64, u16)>,
    last_send: Option<(i64, u16)>,
    bytes_received: u64,
    first_arrival: Option<(i64, u16)>,
    last_arrival: Option<(i64, u16)>,
}

impl Measured {
    fn add(&mut self, r: &PacketResult) {
        let size = r.size;
        self.bytes_sent += u64::from(size);
        if self.first_send.is_none_or(|(t, _)| r.send_us < t) {
            self.first_send = Some((r.send_us, size));
        }
        if self.last_send.is_none_or(|(t, _)| r.send_us >= t) {
            self.last_send = Some((r.send_us, size));
        }
        match r.arrival_us {
            Some(at) => {
                self.received += 1;
                self.bytes_received += u64::from(size);
                if self.first_arrival.is_none_or(|(t, _)| at < t) {
                    self.first_arrival = Some((at, size));
                }
                if self.last_arrival.is_none_or(|(t, _)| at >= t) {
                    self.last_arrival = Some((at, size));
                }
            }
            None => self.lost += 1,
        }
    }

    /// The rate it measured, once every packet was reported on: the smaller of its
    /// send and receive rates, each over the span between its first and last packet
    /// (the bytes of the packet that opens a span are not counted in it). A cluster
    /// that closed with fewer than [`MIN_CLUSTER_PACKETS`] (nothing to send it with)
    /// measures nothing: one or two packets of forwarded media tagged with it have
    /// no span, and would read as its target.
    fn rate(&self) -> Option<f64> {
        if self.stamped < MIN_CLUSTER_PACKETS
            || f64::from(self.received) < MIN_RECEIVED_SHARE * f64::from(self.stamped)
        {
            return None;
        }
        let (first_send, _) = self.first_send?;
        let (last_send, last_size) = self.last_send?;
        let (first_arrival, first_size) = self.first_arrival?;
        let (last_arrival, _) = self.last_arrival?;
        let send_span = (last_send - first_send) as f64 / 1e6;
        let recv_span = (last_arrival - first_arrival) as f64 / 1e6;
        let send = if send_span > 0.0 {
            (self.bytes_sent - u64::from(last_size)) as f64 * 8.0 / send_span
        } else {
            self.target_bps as f64
        };
        // Arrivals closer than the feedback's 250 µs resolution: as fast as sent.
        let received = if recv_span > 0.0 {
            (self.bytes_received - u64::from(first_size)) as f64 * 8.0 / recv_span
        } else {
            send
        };
        // Taken at PROBE_UTILIZATION of what it measured: a short cluster's arrivals
        // jitter by milliseconds, which can read a few percent above the path, and
        // the estimate is what the pacer sends at.
        Some(PROBE_UTILIZATION * send.min(received))
    }
}

/// One peer's probing.
#[derive(Clone, Debug, Default)]
pub struct Prober {
    next_id: u16,
    sending: Option<Sending>,
    measuring: Vec<Measured>,
    last_started: Option<Time>,
    /// The interval before the next cluster.
    interval: Duration,
    /// Clusters sent.
    pub clusters: u64,
    /// The last rate a cluster measured, bit/s.
    pub last_result_bps: Option<u64>,
}

impl Prober {
    /// Starts a cluster at `target_bps` if none is out or awaiting feedback and the
    /// interval has passed. Returns the cluster.
    pub fn start(&mut self, now: Time, target_bps: u64, packet_bytes: usize) -> Option<Sending> {
        if self.sending.is_some() || !self.measuring.is_empty() {
            return None;
        }
        if self.interval.is_zero() {
            self.interval = PROBE_INTERVAL;
        }
        if self
            .last_started
            .is_some_and(|at| now.saturating_since(at) < self.interval)
        {
            return None;
        }
        let bits = (target_bps as f64 * CLUSTER_DURATION.as_secs_f64()) as u64;
        let per_packet = (packet_bytes.max(100) * 8) as u64;
        let left =
            (bits.div_ceil(per_packet) as u32).clamp(MIN_CLUSTER_PACKETS, MAX_CLUSTER_PACKETS);
        self.next_id = self.next_id.wrapping_add(1).max(1);
        let cluster = Sending {
            id: self.next_id,
            target_bps,
            left,
        };
        self.sending = Some(cluster);
        self.last_started = Some(now);
        self.clusters += 1;
        self.measuring.push(Measured {
            id: cluster.id,
            target_bps,
            ..Measured::default()
        });
        Some(cluster)
    }

    /// The cluster being sent, if any.
    pub fn sending(&self) -> Option<Sending> {
        self.sending
    }

    /// One probe packet went out; returns whether more are to follow.
    pub fn sent_one(&mut self) -> bool {
        match self.sending.as_mut() {
            Some(s) => {
                s.left = s.left.saturating_sub(1);
                s.left > 0
            }
            None => false,
        }
    }

    /// The cluster being sent closes at `now`: later packets are not its.
    pub fn close(&mut self, now: Time) {
        if let Some(s) = self.sending.take()
            && let Some(m) = self.measuring.iter_mut().find(|m| m.id == s.id)
        {
            m.closed_us = Some(now.as_micros() as i64);
        }
    }

    /// The id to tag a packet stamped now with (0: none), counting it.
    pub fn tag(&mut self) -> u16 {
        let Some(s) = self.sending else {
            return 0;
        };
        if let Some(m) = self.measuring.iter_mut().find(|m| m.id == s.id) {
            m.stamped += 1;
        }
        s.id
    }

    /// A packet tagged `id` did not go out after all.
    pub fn untag(&mut self, id: u16) {
        if let Some(m) = self.measuring.iter_mut().find(|m| m.id == id) {
            m.stamped = m.stamped.saturating_sub(1);
        }
    }

    /// Takes one feedback message's news; returns the rate a cluster measured, once
    /// every packet of a closed cluster was reported on.
    pub fn on_results(&mut self, now: Time, results: &[PacketResult]) -> Option<f64> {
        for r in results.iter().filter(|r| r.probe != 0) {
            if let Some(m) = self.measuring.iter_mut().find(|m| m.id == r.probe) {
                m.add(r);
            }
        }
        let now_us = now.as_micros() as i64;
        let timeout = CLUSTER_TIMEOUT.as_micros() as i64;
        let mut found = None;
        self.measuring.retain(|m| {
            let Some(closed) = m.closed_us else {
                return true;
            };
            if m.received + m.lost >= m.stamped {
                found = Some((m.rate(), m.target_bps));
                return false;
            }
            now_us - closed < timeout
        });
        let (rate, target) = found?;
        // Found what it looked for: probe again soon; else (less, or nothing)
        // less often.
        self.interval = match rate {
            Some(r) if r >= 0.9 * target as f64 => PROBE_INTERVAL,
            _ => (self.interval * 2).min(MAX_PROBE_INTERVAL),
        };
        let rate = rate?;
        self.last_result_bps = Some(rate as u64);
        Some(rate)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(probe: u16, send_us: i64, arrival_us: Option<i64>) -> PacketResult {
        PacketResult {
            seq: 0,
            send_us,
            arrival_us,
            size: 1200,
            probe,
        }
    }

    #[test]
    fn a_cluster_measures_the_narrower_of_its_send_and_arrival_rates() {
        let mut p = Prober::default();
        let now = Time::from_millis(1000);
        let c = p.start(now, 3_200_000, 1200).unwrap();
        assert_eq!(c.left, 17, "50 ms at 3.2 Mbit/s in 1200-byte packets");
        assert!(p.start(now, 3_200_000, 1200).is_none(), "one at a time");
        // Ten packets stamped 3 ms apart (3.2 Mbit/s), arriving 16 ms apart: a
        // 600 kbit/s path.
        let mut results = Vec::new();
        for i in 0..10 {
            assert_eq!(p.tag(), c.id);
            results.push(result(
                c.id,
                1_000_000 + 3_000 * i,
                Some(50_000 + 16_000 * i),
            ));
        }
        p.close(now + Duration::from_millis(30));
        assert_eq!(p.tag(), 0, "closed");
        // Reported in two messages: the rate comes with the last.
        assert_eq!(p.on_results(now, &results[..6]), None);
        let rate = p.on_results(now, &results[6..]).unwrap();
        assert!((rate - PROBE_UTILIZATION * 600_000.0).abs() < 1.0, "{rate}");
        // It found less than it looked for: the next waits twice as long.
        assert!(p.start(now + PROBE_INTERVAL, 3_200_000, 1200).is_none());
        assert!(p.start(now + 2 * PROBE_INTERVAL, 3_200_000, 1200).is_some());
    }

    #[test]
    fn a_cluster_mostly_lost_measures_nothing() {
        let mut p = Prober::default();
        let now = Time::from_millis(1000);
        let c = p.start(now, 1_000_000, 1200).unwrap();
        let results: Vec<PacketResult> = (0..c.left as i64)
            .map(|i| {
                p.tag();
                result(c.id, 10_000 * i, (i < 2).then_some(5_000 * i))
            })
            .collect();
        p.close(now);
        assert_eq!(p.on_results(now, &results), None);
        // And a cluster never reported on is given up.
        let mut p = Prober::default();
        p.start(now, 1_000_000, 1200).unwrap();
        p.tag();
        p.close(now);
        assert_eq!(p.on_results(now + CLUSTER_TIMEOUT, &[]), None);
        assert!(p.start(now + CLUSTER_TIMEOUT, 1_000_000, 1200).is_some());
    }
}
