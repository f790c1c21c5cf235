//! Timers as data: a small fixed table per entity, and one shard-wide deadline heap.
//!
//! Arming a timer writes the table slot and pushes `(deadline, entity, kind)` onto the
//! heap. An entry is live only while the slot still holds its deadline, so re-arming or
//! cancelling never searches the heap: stale entries are discarded when they surface.
//! Finding the next wake-up and the timers due is O(log n) per entry, never a scan.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use bevy_ecs::prelude::{Component, Entity, Resource};

use crate::time::Time;

/// The kinds of timer an entity can hold; the index of its slot in [`Timers`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum TimerKind {
    /// Controlling agent: (re)send the connectivity check in flight (RFC 8445 §14.3).
    IceCheck = 0,
    /// Controlling agent: send the next consent check (RFC 7675 §5.1).
    ConsentCheck = 1,
    /// Consent lapses unless refreshed by then (RFC 7675 §5.1).
    ConsentExpiry = 2,
    /// The DTLS connection's next retransmission or handshake deadline.
    Dtls = 3,
    /// SCTP T1-init / T1-cookie (RFC 9260 §5.1 C, E).
    SctpT1 = 4,
    /// SCTP T3-rtx (RFC 9260 §6.3.2).
    SctpT3 = 5,
    /// SCTP delayed SACK (RFC 9260 §6.2).
    SctpDelayedAck = 6,
    /// The shard has SCTP data to send for this entity (set by an API call between
    /// ticks, so the next tick comes at once).
    SctpSend = 7,
    /// SCTP stream reset request retransmission (RFC 6525 §5.1.1).
    SctpReconfig = 8,
    /// SCTP T2-shutdown: the SHUTDOWN ACK goes again (RFC 9260 §9.2).
    SctpT2 = 9,
    /// A track's or a subscription's RTCP: reports (RFC 3550 §6.4), NACKs due again
    /// and throttled keyframe requests.
    MediaReport = 10,
    /// SCTP path heartbeat (RFC 9260 §8.3): the next HEARTBEAT, or the answer to the
    /// one in flight is overdue.
    SctpHeartbeat = 11,
    /// A peer's transport-wide congestion control feedback is due
    /// (draft-holmer-rmcat-transport-wide-cc-extensions-01 §3).
    TransportFeedback = 12,
    /// A published audio track's level report is due.
    AudioLevel = 13,
    /// A peer's next probe packet is due (`congestion::probe`).
    Probe = 14,
    /// A peer's pacing queue may send again (`congestion::pacer`).
    Pace = 15,
    /// A room receiver that holds a sender back reaches the relay's hold limit
    /// (`RelayLimits::hold_limit`).
    RelayHold = 16,
    /// A room member's reliable messages wait for room among the messages its shard
    /// forwards to the room's other shards: the next tick looks at it again.
    RelayForward = 17,
    /// A closing room member's buffer must have shrunk by now
    /// (`relay::RelayClosing`), or it goes with what is left.
    RelayClosing = 18,
}

impl TimerKind {
    /// Every kind, in slot order.
    pub const ALL: [TimerKind; 19] = [
        TimerKind::IceCheck,
        TimerKind::ConsentCheck,
        TimerKind::ConsentExpiry,
        TimerKind::Dtls,
        TimerKind::SctpT1,
        TimerKind::SctpT3,
        TimerKind::SctpDelayedAck,
        TimerKind::SctpSend,
        TimerKind::SctpReconfig,
        TimerKind::SctpT2,
        TimerKind::MediaReport,
        TimerKind::SctpHeartbeat,
        TimerKind::TransportFeedback,
        TimerKind::AudioLevel,
        TimerKind::Probe,
        TimerKind::Pace,
        TimerKind::RelayHold,
        TimerKind::RelayForward,
        TimerKind::RelayClosing,
    ];
    /// How many kinds there are: the size of the table.
    pub const COUNT: usize = TimerKind::ALL.len();

    /// The kind's slot in [`Timers`]. The match has no wildcard: a kind added later
    /// does not compile until it is named here, beside [`TimerKind::ALL`], which the
    /// check below holds to one slot per kind.
    const fn slot(self) -> usize {
        match self {
            TimerKind::IceCheck
            | TimerKind::ConsentCheck
            | TimerKind::ConsentExpiry
            | TimerKind::Dtls
            | TimerKind::SctpT1
            | TimerKind::SctpT3
            | TimerKind::SctpDelayedAck
            | TimerKind::SctpSend
            | TimerKind::SctpReconfig
            | TimerKind::SctpT2
            | TimerKind::MediaReport
            | TimerKind::SctpHeartbeat
            | TimerKind::TransportFeedback
            | TimerKind::AudioLevel
            | TimerKind::Probe
            | TimerKind::Pace
            | TimerKind::RelayHold
            | TimerKind::RelayForward
            | TimerKind::RelayClosing => self as usize,
        }
    }
}

// The table fits the enum, at compile time: the kinds of `ALL` take the slots 0 to
// COUNT - 1, each its own.
const _: () = {
    let mut i = 0;
    while i < TimerKind::COUNT {
        assert!(TimerKind::ALL[i].slot() == i);
        i += 1;
    }
};

/// One entity's timer table.
#[derive(Component, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Timers {
    deadlines: [Option<Time>; TimerKind::COUNT],
}

impl Timers {
    /// The deadline of `kind`, if armed.
    pub fn get(&self, kind: TimerKind) -> Option<Time> {
        self.deadlines[kind.slot()]
    }

    /// Disarms `kind`.
    pub fn cancel(&mut self, kind: TimerKind) {
        self.deadlines[kind.slot()] = None;
    }

    /// The earliest armed deadline.
    pub fn earliest(&self) -> Option<Time> {
        self.deadlines.iter().flatten().min().copied()
    }
}

/// The shard's deadline heap.
#[derive(Resource, Debug, Default)]
pub struct TimerHeap {
    heap: BinaryHeap<Reverse<(Time, Entity, TimerKind)>>,
}

impl TimerHeap {
    /// Arms `kind` of `entity` (whose table is `timers`) to fire at `at`.
    pub fn arm(&mut self, timers: &mut Timers, entity: Entity, kind: TimerKind, at: Time) {
        let slot = &mut timers.deadlines[kind.slot()];
        if *slot == Some(at) {
            return;
        }
        *slot = Some(at);
        self.heap.push(Reverse((at, entity, kind)));
    }

    /// Pops the next entry due at or before `now`, live or stale; the caller checks
    /// liveness with [`TimerHeap::take_if_live`].
    pub fn pop_due(&mut self, now: Time) -> Option<(Time, Entity, TimerKind)> {
        match self.heap.peek() {
            Some(Reverse((at, _, _))) if *at <= now => self.heap.pop().map(|Reverse(e)| e),
            _ => None,
        }
    }

    /// True, and the slot disarmed, when `timers` still holds deadline `at` for `kind`.
    pub fn take_if_live(timers: &mut Timers, kind: TimerKind, at: Time) -> bool {
        let slot = &mut timers.deadlines[kind.slot()];
        if *slot == Some(at) {
            *slot = None;
            true
        } else {
            false
        }
    }

    /// The earliest entry's deadline (possibly stale: an early wake-up is harmless).
    pub fn peek(&self) -> Option<Time> {
        self.heap.peek().map(|Reverse((at, _, _))| *at)
    }

    /// Drops stale entries from the top, given a way to read an entity's current table.
    pub fn prune(&mut self, mut live: impl FnMut(Entity, TimerKind, Time) -> bool) {
        while let Some(Reverse((at, e, k))) = self.heap.peek() {
            if live(*e, *k, *at) {
                break;
            }
            self.heap.pop();
        }
    }

    /// Entries in the heap, stale ones included.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// True when no entry is queued.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}
