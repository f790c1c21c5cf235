//! Which TSNs have arrived, and whether a SACK is owed: the cumulative TSN, the gap ack
//! blocks above it, the duplicates since the last SACK (RFC 9260 §6.2, §6.7, §3.3.4),
//! and FORWARD TSN's move of the cumulative point (RFC 3758 §3.6).
//!
//! The received TSNs above the cumulative point are kept as a short sorted ring of
//! disjoint, non-adjacent ranges, at most [`TrackerLimits::max_gap_blocks`] of them.
//! In-order arrival, extending the highest range and filling the lowest gap are O(1);
//! a TSN that lands between two ranges costs a binary search and a shift within that
//! bounded ring. Memory is fixed by the limits, whatever the peer sends.

use std::collections::VecDeque;
use std::time::Duration;

use crate::sctp::chunk::GapAckBlock;
use crate::sctp::num::Tsn;

/// How far the tracker looks ahead and how much it reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TrackerLimits {
    /// A TSN more than this far past the cumulative TSN is dropped unacknowledged.
    /// At most 65 535, so every gap ack block offset fits its 16-bit field (§3.3.4).
    pub max_tsn_ahead: u32,
    /// Received ranges tracked above the cumulative TSN, which is also the most gap ack
    /// blocks a SACK reports. A TSN that would start one more range is dropped.
    pub max_gap_blocks: usize,
    /// Duplicate TSNs remembered for the next SACK; further ones are not listed.
    pub max_duplicates: usize,
    /// The delayed-ack time the association arms its timer with when a SACK is owed
    /// later rather than now: 200 ms by default, never above 500 ms (RFC 9260 §6.2).
    pub sack_delay: Duration,
}

impl TrackerLimits {
    /// RFC 9260 §6.2: "An implementation MUST NOT allow the maximum delay (protocol
    /// parameter 'SACK.Delay') to be configured to be more than 500 ms."
    pub const MAX_SACK_DELAY: Duration = Duration::from_millis(500);

    /// The limits with every field brought into its allowed range.
    pub fn clamped(self) -> TrackerLimits {
        TrackerLimits {
            max_tsn_ahead: self.max_tsn_ahead.clamp(1, u32::from(u16::MAX)),
            max_gap_blocks: self.max_gap_blocks.max(1),
            max_duplicates: self.max_duplicates,
            sack_delay: self.sack_delay.min(Self::MAX_SACK_DELAY),
        }
    }
}

impl Default for TrackerLimits {
    fn default() -> Self {
        TrackerLimits {
            max_tsn_ahead: u32::from(u16::MAX),
            max_gap_blocks: 64,
            max_duplicates: 32,
            // RFC 9260 §6.2: a SACK "SHOULD be generated within 200 ms of the arrival
            // of any unacknowledged DATA chunk".
            sack_delay: Duration::from_millis(200),
        }
    }
}

/// What [`DataTracker::observe`] made of a DATA chunk's TSN.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Observed {
    /// First arrival: now acknowledged; hand the chunk to reassembly.
    New,
    /// Received before (or at or behind the cumulative TSN): listed as a duplicate in
    /// the next SACK, and the chunk is dropped.
    Duplicate,
    /// More than [`TrackerLimits::max_tsn_ahead`] past the cumulative TSN: dropped and
    /// not acknowledged, so the peer sends it again later.
    TooFarAhead,
    /// Would start a range past [`TrackerLimits::max_gap_blocks`]: dropped and not
    /// acknowledged. The TSN right after the cumulative TSN is never refused this way.
    TooManyGaps,
}

/// What a FORWARD TSN did to the cumulative TSN.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ForwardTsnOutcome {
    /// The cumulative TSN moved to the new value, or past it over TSNs already held.
    Advanced,
    /// The new cumulative TSN was at or behind ours: ignored, and a SACK is owed
    /// (RFC 3758 §3.6).
    Stale,
}

/// How soon the owed SACK must leave.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AckUrgency {
    /// In this tick's `sack_batch`.
    Immediate,
    /// When the delayed-ack timer ([`TrackerLimits::sack_delay`] after it is armed)
    /// fires, or earlier with DATA going the other way or the next packet's arrival.
    Delayed,
}

/// The SACK state machine (RFC 9260 §6.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AckState {
    /// Everything received has been acknowledged.
    Idle,
    /// DATA arrived in one packet since the last SACK, with nothing urgent about it.
    Delayed,
    /// A SACK must go out in this tick.
    Immediate,
}

/// A run of received TSNs above the cumulative TSN, both ends included.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct TsnRange {
    first: Tsn,
    last: Tsn,
}

/// The receive-side TSN bookkeeping of one association.
#[derive(Clone, Debug)]
pub struct DataTracker {
    limits: TrackerLimits,
    /// Every TSN up to and including this one has arrived (or was skipped by FORWARD TSN).
    cumulative: Tsn,
    /// Received TSNs above `cumulative`, lowest first, disjoint, never adjacent to each
    /// other nor to `cumulative`. Their distances from `cumulative` are at most
    /// `max_tsn_ahead`, so serial order is plain order of those distances.
    ranges: VecDeque<TsnRange>,
    /// Duplicate TSNs since the last SACK (RFC 9260 §3.3.4), at most `max_duplicates`.
    duplicates: Vec<Tsn>,
    ack: AckState,
    /// The current packet carried DATA or FORWARD TSN.
    data_in_packet: bool,
    /// Packets with DATA or FORWARD TSN since the last SACK.
    packets_since_sack: u8,
    /// No DATA chunk has arrived yet in this association.
    awaiting_first_data: bool,
}

impl DataTracker {
    /// A tracker for a peer whose INIT or INIT ACK announced `initial_peer_tsn`:
    /// RFC 9260 §5.1 starts the cumulative TSN at that value minus one.
    pub fn new(initial_peer_tsn: Tsn, limits: TrackerLimits) -> DataTracker {
        let limits = limits.clamped();
        DataTracker {
            limits,
            cumulative: initial_peer_tsn.prev(),
            ranges: VecDeque::with_capacity(limits.max_gap_blocks.min(16)),
            duplicates: Vec::new(),
            ack: AckState::Idle,
            data_in_packet: false,
            packets_since_sack: 0,
            awaiting_first_data: true,
        }
    }

    /// The limits in force (after clamping).
    pub fn limits(&self) -> &TrackerLimits {
        &self.limits
    }

    /// The Cumulative TSN Ack: the last TSN before the first missing one.
    pub fn cumulative_tsn(&self) -> Tsn {
        self.cumulative
    }

    /// Whether any TSN above the cumulative TSN is held, i.e. a gap exists.
    pub fn has_gaps(&self) -> bool {
        !self.ranges.is_empty()
    }

    /// What [`DataTracker::observe`] would say about `tsn`, without changing anything.
    pub fn classify(&self, tsn: Tsn) -> Observed {
        let d = tsn.distance_from(self.cumulative);
        if d == 0 || d > 0x8000_0000 {
            // At or behind the cumulative TSN in serial order (RFC 9260 §1.6).
            return Observed::Duplicate;
        }
        if d > self.limits.max_tsn_ahead {
            return Observed::TooFarAhead;
        }
        if d == 1 {
            return Observed::New;
        }
        let idx = self.range_index(d);
        if let Some(r) = self.ranges.get(idx)
            && r.first.distance_from(self.cumulative) <= d
        {
            return Observed::Duplicate;
        }
        let joins_prev = idx > 0 && self.ranges[idx - 1].last.next() == tsn;
        let joins_next = self.ranges.get(idx).is_some_and(|r| r.first == tsn.next());
        if !joins_prev && !joins_next && self.ranges.len() >= self.limits.max_gap_blocks {
            return Observed::TooManyGaps;
        }
        Observed::New
    }

    /// Whether `tsn` is the one that would move the cumulative TSN.
    pub fn advances_cumulative(&self, tsn: Tsn) -> bool {
        tsn == self.cumulative.next()
    }

    /// Records a DATA chunk's TSN and says what to do with the chunk. Only a chunk
    /// reported [`Observed::New`] is acknowledged and must go on to reassembly.
    pub fn observe(&mut self, tsn: Tsn) -> Observed {
        self.data_in_packet = true;
        let seen = self.classify(tsn);
        match seen {
            Observed::New => self.insert(tsn),
            Observed::Duplicate => {
                if self.duplicates.len() < self.limits.max_duplicates {
                    self.duplicates.push(tsn);
                }
                // RFC 9260 §6.2: a packet with duplicates and no new DATA "MUST"
                // be SACKed at once; with new DATA it "MAY". Always at once is simpler.
                self.ack = AckState::Immediate;
            }
            Observed::TooFarAhead | Observed::TooManyGaps => self.note_dropped(),
        }
        seen
    }

    /// The caller dropped a DATA chunk that [`DataTracker::classify`] called new (no
    /// room to buffer it). RFC 9260 §6.2: "if such a DATA chunk is dropped, the
    /// receiver MUST immediately send back a SACK chunk".
    pub fn note_dropped(&mut self) {
        self.data_in_packet = true;
        self.ack = AckState::Immediate;
    }

    fn insert(&mut self, tsn: Tsn) {
        let d = tsn.distance_from(self.cumulative);
        if d == 1 {
            self.cumulative = tsn;
            if self.ranges.front().is_some_and(|r| r.first == tsn.next()) {
                if let Some(r) = self.ranges.pop_front() {
                    self.cumulative = r.last;
                }
                // RFC 9260 §6.2 follows RFC 5681 §4.2: "the receiver SHOULD send an
                // immediate ACK when it receives a data segment that fills in all or
                // part of a gap in the sequence space."
                self.ack = AckState::Immediate;
            }
        } else if self.ranges.back().is_some_and(|r| r.last.next() == tsn) {
            // The usual case while a gap is open: new DATA extends the highest range.
            if let Some(r) = self.ranges.back_mut() {
                r.last = tsn;
            }
        } else {
            self.insert_between(tsn, d);
        }
        if self.awaiting_first_data {
            // RFC 9260 §5.1: "After the reception of the first DATA chunk in an
            // association, the endpoint MUST immediately respond with a SACK chunk".
            self.awaiting_first_data = false;
            self.ack = AckState::Immediate;
        }
        if !self.ranges.is_empty() {
            // RFC 9260 §6.7: on a gap the endpoint "SHOULD send a SACK chunk with Gap
            // Ack Blocks immediately", and again after each packet that does not fill it.
            self.ack = AckState::Immediate;
        }
        if self.ack == AckState::Idle {
            self.ack = AckState::Delayed;
        }
    }

    /// Inserts `tsn` (distance `d` > 1 from the cumulative TSN, known new and allowed)
    /// between or below the ranges.
    fn insert_between(&mut self, tsn: Tsn, d: u32) {
        let idx = self.range_index(d);
        let joins_prev = idx > 0 && self.ranges[idx - 1].last.next() == tsn;
        let joins_next = self.ranges.get(idx).is_some_and(|r| r.first == tsn.next());
        match (joins_prev, joins_next) {
            (true, true) => {
                if let Some(next) = self.ranges.remove(idx) {
                    self.ranges[idx - 1].last = next.last;
                }
            }
            (true, false) => self.ranges[idx - 1].last = tsn,
            (false, true) => self.ranges[idx].first = tsn,
            (false, false) => self.ranges.insert(
                idx,
                TsnRange {
                    first: tsn,
                    last: tsn,
                },
            ),
        }
    }

    /// Index of the first range whose last TSN is at distance `d` or beyond.
    fn range_index(&self, d: u32) -> usize {
        let cumulative = self.cumulative;
        self.ranges
            .partition_point(|r| r.last.distance_from(cumulative) < d)
    }

    /// Applies a FORWARD TSN's New Cumulative TSN (RFC 3758 §3.6).
    pub fn handle_forward_tsn(&mut self, new_cumulative: Tsn) -> ForwardTsnOutcome {
        // RFC 3758 §3.6: "Any time a FORWARD TSN chunk arrives, for the purposes of
        // sending a SACK, the receiver MUST follow the same rules as if a DATA chunk
        // had been received".
        self.data_in_packet = true;
        let old = self.cumulative;
        let d = new_cumulative.distance_from(old);
        if d == 0 || d >= 0x8000_0000 {
            // RFC 3758 §3.6: "if the 'New Cumulative TSN' value ... is found to be behind
            // or at the current cumulative TSN point, the data receiver MUST treat this
            // FORWARD TSN as out-of-date and MUST NOT update its Cumulative TSN. The
            // receiver SHOULD send a SACK to its peer".
            self.ack = AckState::Immediate;
            return ForwardTsnOutcome::Stale;
        }
        let had_gaps = self.has_gaps();
        // RFC 3758 §3.6: "the data receiver MUST first update its cumulative TSN point
        // to the value carried in the FORWARD TSN chunk, and then MUST further advance
        // its cumulative TSN point locally if possible". Ranges wholly behind the new
        // point go; one straddling it is cut. Each range goes once: O(1) amortised.
        self.cumulative = new_cumulative;
        while let Some(front) = self.ranges.front_mut() {
            if front.last.distance_from(old) <= d {
                self.ranges.pop_front();
                continue;
            }
            if front.first.distance_from(old) <= d {
                front.first = new_cumulative.next();
            }
            break;
        }
        if self
            .ranges
            .front()
            .is_some_and(|r| r.first == new_cumulative.next())
            && let Some(r) = self.ranges.pop_front()
        {
            self.cumulative = r.last;
        }
        if had_gaps || self.has_gaps() {
            self.ack = AckState::Immediate;
        } else if self.ack == AckState::Idle {
            self.ack = AckState::Delayed;
        }
        ForwardTsnOutcome::Advanced
    }

    /// Call once after all chunks of an SCTP packet were handled. RFC 9260 §6.2: "an
    /// acknowledgement SHOULD be generated for at least every second packet (not every
    /// second DATA chunk) received". A packet without DATA or FORWARD TSN counts for
    /// nothing. All packets of one tick share the one SACK `sack_batch` then builds.
    pub fn end_of_packet(&mut self) {
        if !std::mem::take(&mut self.data_in_packet) {
            return;
        }
        self.packets_since_sack = self.packets_since_sack.saturating_add(1);
        if self.packets_since_sack >= 2 && self.ack == AckState::Delayed {
            self.ack = AckState::Immediate;
        }
    }

    /// Whether a SACK is owed, and how soon.
    pub fn ack_urgency(&self) -> Option<AckUrgency> {
        match self.ack {
            AckState::Idle => None,
            AckState::Delayed => Some(AckUrgency::Delayed),
            AckState::Immediate => Some(AckUrgency::Immediate),
        }
    }

    /// The delayed-ack timer fired: the owed SACK is due now.
    pub fn delayed_ack_expired(&mut self) {
        if self.ack == AckState::Delayed {
            self.ack = AckState::Immediate;
        }
    }

    /// Owe a SACK now, e.g. for a DATA chunk with the I bit (RFC 9260 §6.2: "the
    /// receiver SHOULD immediately respond") or to announce a reopened window.
    pub fn request_sack_now(&mut self) {
        self.ack = AckState::Immediate;
    }

    /// A SACK carrying the current state left (alone or bundled with DATA): nothing is
    /// owed until more arrives.
    pub fn on_sack_sent(&mut self) {
        self.ack = AckState::Idle;
        self.packets_since_sack = 0;
    }

    /// Writes the gap ack blocks into `out` (cleared first; its capacity is reused):
    /// lowest first, at most [`TrackerLimits::max_gap_blocks`], as RFC 9260 §6.7 asks
    /// ("report the Gap Ack Blocks from the lowest to highest TSNs").
    pub fn gap_ack_blocks(&self, out: &mut Vec<GapAckBlock>) {
        out.clear();
        for r in self.ranges.iter().take(self.limits.max_gap_blocks) {
            let start = u16::try_from(r.first.distance_from(self.cumulative));
            let end = u16::try_from(r.last.distance_from(self.cumulative));
            // Offsets fit by construction (max_tsn_ahead ≤ 65 535); stop rather than
            // report a wrong block should that ever not hold.
            let (Ok(start), Ok(end)) = (start, end) else {
                break;
            };
            out.push(GapAckBlock { start, end });
        }
    }

    /// Moves the duplicate TSNs received since the last SACK into `out` (cleared
    /// first). RFC 9260 §3.3.4: "The duplicate count is reinitialized to zero after
    /// sending each SACK chunk."
    pub fn take_duplicates(&mut self, out: &mut Vec<Tsn>) {
        out.clear();
        out.append(&mut self.duplicates);
    }
}
