//! What shoal sent a peer, by transport-wide sequence number, until the peer's
//! feedback says when (and whether) each packet arrived: draft-ietf-rmcat-gcc-02 §3,
//! "The sender will map the received {sequence number, arrival time} pairs to the
//! send-time of each packet covered by the feedback report".

use crate::rtcp::TransportCc;
use crate::rtcp::twcc::Symbol;
use crate::time::Time;

/// Packets whose send time is kept: feedback every 100 ms covers 10 000 packets a
/// second. Feedback on anything older finds nothing and is ignored.
pub const SEND_WINDOW: usize = 1024;

/// One packet the feedback told about, for the first time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacketResult {
    /// Its extended transport-wide sequence number.
    pub seq: u64,
    /// When shoal sent it, in µs on the shard's clock.
    pub send_us: i64,
    /// When it arrived, in µs on the receiver's clock (whose origin is its own);
    /// `None` if the feedback reports it lost.
    pub arrival_us: Option<i64>,
    /// Its size in bytes, as sent (SRTP overhead included).
    pub size: u16,
    /// The probe cluster it was sent in, 0 for none.
    pub probe: u16,
}

/// A packet sent and not yet known to have arrived.
#[derive(Clone, Copy, Debug)]
struct Sent {
    /// Extended sequence number; `u64::MAX` for a free slot.
    seq: u64,
    send_us: i64,
    size: u16,
    /// Whether feedback reported it received (a later report of it lost, or of it
    /// received again, is not news).
    arrived: bool,
    /// Whether feedback reported it lost once already.
    reported_lost: bool,
    probe: u16,
}

const FREE: Sent = Sent {
    seq: u64::MAX,
    send_us: 0,
    size: 0,
    arrived: false,
    reported_lost: false,
    probe: 0,
};

/// The packets sent to one peer with shoal's transport-wide numbers.
#[derive(Clone, Debug, Default)]
pub struct SendHistory {
    /// Ring by extended sequence number modulo [`SEND_WINDOW`]; empty until the first
    /// packet.
    slots: Vec<Sent>,
    /// The next extended sequence number.
    next: u64,
    /// Feedback that named packets never sent, or too old to be kept.
    pub unknown: u64,
}

impl SendHistory {
    /// Numbers the next packet, sent `at`, and keeps it; returns the 16 bits that go
    /// on the wire. Its size follows with [`SendHistory::resize_last`] once known.
    pub fn stamp(&mut self, at: Time) -> u16 {
        self.stamp_in(at, 0)
    }

    /// [`SendHistory::stamp`] for a packet sent in probe cluster `probe` (0: none).
    pub fn stamp_in(&mut self, at: Time, probe: u16) -> u16 {
        if self.slots.is_empty() {
            self.slots = vec![FREE; SEND_WINDOW];
        }
        let seq = self.next;
        self.next += 1;
        if let Some(slot) = self.slots.get_mut((seq % SEND_WINDOW as u64) as usize) {
            *slot = Sent {
                seq,
                send_us: at.as_micros() as i64,
                size: 0,
                arrived: false,
                reported_lost: false,
                probe,
            };
        }
        seq as u16
    }

    /// Forgets the packet stamped last (it did not go out): its number is given out
    /// again, so the peer never sees a gap it would read as loss. Returns the probe
    /// cluster it was stamped in (0: none).
    pub fn unstamp_last(&mut self) -> u16 {
        let Some(last) = self.next.checked_sub(1) else {
            return 0;
        };
        let probe = self
            .slots
            .get((last % SEND_WINDOW as u64) as usize)
            .map_or(0, |s| s.probe);
        if let Some(slot) = self.slots.get_mut((last % SEND_WINDOW as u64) as usize) {
            *slot = FREE;
        }
        self.next = last;
        probe
    }

    /// Sets the size of the packet stamped last.
    pub fn resize_last(&mut self, size: usize) {
        let Some(last) = self.next.checked_sub(1) else {
            return;
        };
        if let Some(slot) = self.slots.get_mut((last % SEND_WINDOW as u64) as usize) {
            slot.size = u16::try_from(size).unwrap_or(u16::MAX);
        }
    }

    /// Packets stamped so far.
    pub fn stamped(&self) -> u64 {
        self.next
    }

    /// Reads one feedback message (draft-holmer-rmcat-transport-wide-cc-extensions-01
    /// §3.1): into `out`, in sequence order, each packet it tells about for the first
    /// time (a packet reported received after being reported lost is news again;
    /// one reported twice is not), with its arrival on the receiver's clock: the
    /// reference time plus the running sum of the deltas. Returns how many packets the
    /// message reported lost for the first time.
    pub fn on_feedback(&mut self, fb: &TransportCc, out: &mut Vec<PacketResult>) -> usize {
        let mut lost = 0;
        if self.slots.is_empty() || self.next == 0 {
            self.unknown += 1;
            return lost;
        }
        let newest = self.next - 1;
        let mut arrival = fb.reference_time_us();
        for p in fb.packets() {
            if let Some(d) = p.delta {
                arrival += d.micros();
            }
            let seq = crate::media::extend_seq(newest, p.seq);
            let slot = (seq % SEND_WINDOW as u64) as usize;
            let Some(sent) = self.slots.get_mut(slot).filter(|s| s.seq == seq) else {
                self.unknown += 1;
                continue;
            };
            if sent.arrived {
                continue;
            }
            match p.symbol {
                Symbol::NotReceived => {
                    if !sent.reported_lost {
                        sent.reported_lost = true;
                        lost += 1;
                        out.push(PacketResult {
                            seq,
                            send_us: sent.send_us,
                            arrival_us: None,
                            size: sent.size,
                            probe: sent.probe,
                        });
                    }
                }
                Symbol::SmallDelta | Symbol::LargeDelta | Symbol::Reserved => {
                    sent.arrived = true;
                    out.push(PacketResult {
                        seq,
                        send_us: sent.send_us,
                        // Received without a delta (§3.1.3's reading of "11"): it
                        // arrived, when is not known.
                        arrival_us: p.delta.map(|_| arrival),
                        size: sent.size,
                        probe: sent.probe,
                    });
                }
            }
        }
        lost
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rtcp::twcc::FeedbackEncoder;
    use crate::rtcp::{Compound, RtcpBody, WriteRtcp};
    use bytes::BytesMut;

    fn feedback(base: u16, arrivals: &[Option<i64>]) -> TransportCc {
        let mut enc = FeedbackEncoder::default();
        let encoded = enc.encode(arrivals);
        let mut out = BytesMut::new();
        enc.feedback(1, 2, base, 0, encoded).write_to(&mut out);
        match Compound::new(out.freeze()).next() {
            Some(Ok(p)) => match p.body {
                RtcpBody::TransportCc(t) => t,
                other => panic!("{other:?}"),
            },
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn feedback_maps_to_send_times_once() {
        let mut h = SendHistory::default();
        for i in 0..4u64 {
            h.stamp(Time::from_millis(10 * i));
            h.resize_last(1000 + i as usize);
        }
        let mut out = Vec::new();
        let fb = feedback(0, &[Some(64_000), None, Some(84_000)]);
        assert_eq!(h.on_feedback(&fb, &mut out), 1);
        assert_eq!(
            out,
            [
                PacketResult {
                    seq: 0,
                    send_us: 0,
                    arrival_us: Some(64_000),
                    size: 1000,
                    probe: 0,
                },
                PacketResult {
                    seq: 1,
                    send_us: 10_000,
                    arrival_us: None,
                    size: 1001,
                    probe: 0,
                },
                PacketResult {
                    seq: 2,
                    send_us: 20_000,
                    arrival_us: Some(84_000),
                    size: 1002,
                    probe: 0,
                },
            ]
        );
        // The same again is no news; the lost one arriving after all is.
        out.clear();
        assert_eq!(h.on_feedback(&fb, &mut out), 0);
        assert!(out.is_empty());
        let late = feedback(1, &[Some(128_000)]);
        h.on_feedback(&late, &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].send_us, 10_000);
        // Never sent: ignored and counted.
        out.clear();
        h.on_feedback(&feedback(9, &[Some(0)]), &mut out);
        assert!(out.is_empty());
        assert_eq!(h.unknown, 1);
    }

    #[test]
    fn sequence_numbers_wrap() {
        let mut h = SendHistory::default();
        let mut last = 0;
        for i in 0..70_000u64 {
            last = h.stamp(Time::from_micros(i));
        }
        assert_eq!(last, (69_999u64 % 65_536) as u16);
        let mut out = Vec::new();
        h.on_feedback(
            &feedback(last.wrapping_sub(1), &[Some(0), Some(250)]),
            &mut out,
        );
        assert_eq!(out.len(), 2);
        assert_eq!(out[1].send_us, 69_999);
    }
}
