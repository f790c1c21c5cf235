//! The run's fingerprint: every datagram's fate and every shard event, folded into a
//! stable 64-bit FNV-1a hash, and optionally a bounded text log for debugging.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::net::SocketAddr;

use shoal_components::net::PacketClass;
use shoal_components::time::Time;
use shoal_systems::ShardEvent;

/// What happened to a datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Fate {
    /// Put on a link (the payload is hashed here, once).
    Sent = 1,
    /// Dropped at the tail of a full link queue.
    QueueDropped = 2,
    /// Lost on the wire.
    Lost = 3,
    /// Held back so later datagrams may overtake it.
    Reordered = 4,
    /// An extra copy was made.
    Duplicated = 5,
    /// Handed to the receiving node.
    Delivered = 6,
    /// No node has the destination address.
    Undeliverable = 7,
}

impl Fate {
    fn name(self) -> &'static str {
        match self {
            Fate::Sent => "sent",
            Fate::QueueDropped => "queue-drop",
            Fate::Lost => "lost",
            Fate::Reordered => "reordered",
            Fate::Duplicated => "duplicated",
            Fate::Delivered => "delivered",
            Fate::Undeliverable => "undeliverable",
        }
    }
}

/// Tag of an event record, distinct from every [`Fate`].
const EVENT_TAG: u8 = 0x80;

/// 64-bit FNV-1a: tiny, and fixed by its definition, unlike std's `DefaultHasher`.
#[derive(Clone, Copy, Debug)]
struct Fnv64(u64);

impl Fnv64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;

    fn bytes(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(Fnv64::PRIME);
        }
    }

    fn u64(&mut self, v: u64) {
        self.bytes(&v.to_le_bytes());
    }

    fn addr(&mut self, a: SocketAddr) {
        match a {
            SocketAddr::V4(v4) => {
                self.bytes(&[4]);
                self.bytes(&v4.ip().octets());
            }
            SocketAddr::V6(v6) => {
                self.bytes(&[6]);
                self.bytes(&v6.ip().octets());
                self.bytes(&v6.scope_id().to_le_bytes());
            }
        }
        self.bytes(&a.port().to_le_bytes());
    }
}

/// The hash and the optional log.
#[derive(Debug)]
pub(crate) struct Trace {
    hash: Fnv64,
    log: Option<TraceLog>,
    /// Scratch for formatting events, reused.
    scratch: String,
}

/// The newest `max_lines` lines of the run.
#[derive(Debug)]
struct TraceLog {
    max_lines: usize,
    lines: VecDeque<String>,
    forgotten: u64,
}

impl Default for Trace {
    fn default() -> Trace {
        Trace {
            hash: Fnv64(Fnv64::OFFSET),
            log: None,
            scratch: String::new(),
        }
    }
}

impl Trace {
    /// The hash of everything recorded so far.
    pub(crate) fn hash(&self) -> u64 {
        self.hash.0
    }

    /// Starts (or restarts, empty) the text log, keeping the newest `max_lines` lines.
    pub(crate) fn enable_log(&mut self, max_lines: usize) {
        self.log = Some(TraceLog {
            max_lines,
            lines: VecDeque::new(),
            forgotten: 0,
        });
    }

    /// The logged lines, oldest first, preceded by a note if older ones were forgotten.
    pub(crate) fn log_text(&self) -> String {
        let Some(log) = &self.log else {
            return String::new();
        };
        let mut text = String::new();
        if log.forgotten > 0 {
            let _ = writeln!(text, "... {} earlier lines forgotten", log.forgotten);
        }
        for line in &log.lines {
            text.push_str(line);
            text.push('\n');
        }
        text
    }

    /// Records a datagram's fate. The payload is hashed only for [`Fate::Sent`]: the
    /// later records of the same datagram are identified by time, addresses and length.
    pub(crate) fn datagram(
        &mut self,
        fate: Fate,
        at: Time,
        from: SocketAddr,
        to: SocketAddr,
        payload: &[u8],
    ) {
        let h = &mut self.hash;
        h.bytes(&[fate as u8]);
        h.u64(at.as_micros());
        h.addr(from);
        h.addr(to);
        h.u64(payload.len() as u64);
        if fate == Fate::Sent {
            h.bytes(payload);
        }
        if let Some(log) = &mut self.log {
            let class = PacketClass::of(payload);
            log.push(format!(
                "{} {:<13} {from} -> {to} {} B {class:?}",
                fmt_time(at),
                fate.name(),
                payload.len()
            ));
        }
    }

    /// Records an event a node reported. Events are hashed by their `Debug` text, which
    /// is fixed for a given build and keeps working as event kinds are added.
    pub(crate) fn event(&mut self, at: Time, node: SocketAddr, event: &ShardEvent) {
        self.scratch.clear();
        let _ = write!(self.scratch, "{event:?}");
        let h = &mut self.hash;
        h.bytes(&[EVENT_TAG]);
        h.u64(at.as_micros());
        h.addr(node);
        h.bytes(self.scratch.as_bytes());
        if let Some(log) = &mut self.log {
            log.push(format!(
                "{} {:<13} {node} {}",
                fmt_time(at),
                "event",
                self.scratch
            ));
        }
    }
}

impl TraceLog {
    fn push(&mut self, line: String) {
        if self.max_lines == 0 {
            self.forgotten += 1;
            return;
        }
        if self.lines.len() == self.max_lines {
            self.lines.pop_front();
            self.forgotten += 1;
        }
        self.lines.push_back(line);
    }
}

/// Seconds with microseconds, right-aligned so a log reads as columns.
fn fmt_time(t: Time) -> String {
    let us = t.as_micros();
    format!("{:>6}.{:06}s", us / 1_000_000, us % 1_000_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_matches_reference_vectors() {
        // From the FNV reference test suite (64-bit FNV-1a).
        let mut h = Fnv64(Fnv64::OFFSET);
        assert_eq!(h.0, 0xcbf2_9ce4_8422_2325);
        h.bytes(b"a");
        assert_eq!(h.0, 0xaf63_dc4c_8601_ec8c);
        let mut h = Fnv64(Fnv64::OFFSET);
        h.bytes(b"foobar");
        assert_eq!(h.0, 0x8594_4171_f739_67e8);
    }

    #[test]
    fn log_keeps_the_newest_lines() {
        let a: SocketAddr = "10.0.0.1:1".parse().unwrap();
        let mut t = Trace::default();
        t.enable_log(2);
        for i in 0..5 {
            t.datagram(Fate::Sent, Time::from_micros(i), a, a, &[0, 1]);
        }
        let text = t.log_text();
        assert!(
            text.starts_with("... 3 earlier lines forgotten\n"),
            "{text}"
        );
        assert_eq!(text.lines().count(), 3);
        assert!(text.contains("0.000004s sent"), "{text}");
    }
}
