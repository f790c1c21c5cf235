//! The receive side of one association: the [`DataTracker`] and the [`Reassembly`]
//! driven together, in the order RFC 9260 needs, so the association's pass makes one
//! call per chunk and one per SACK.
//!
//! A chunk is acknowledged only once it is held: it is classified first, checked for
//! room, given to reassembly, and only then recorded as received. So a chunk dropped
//! for lack of room never shows in a SACK (RFC 9260 §6.2: "The dropped DATA chunk(s)
//! MUST NOT be included in the SACK chunk, as they were not accepted").

use crate::sctp::chunk::GapAckBlock;
use crate::sctp::num::{Ssn, StreamId, Tsn};

use super::data_tracker::{AckUrgency, DataTracker, ForwardTsnOutcome, Observed, TrackerLimits};
use super::reassembly::{Reassembly, ReassemblyError, ReassemblyLimits, ResetProgress};
use super::{DataIn, Message};

/// RFC 1122 §4.2.3.3's Eff.snd.MSS for the window update rule: the user data of one
/// packet at shoal's SCTP packet size.
const WINDOW_UPDATE_STEP: u32 = crate::sctp::tx::DEFAULT_SCTP_MTU as u32;

/// The limits of both halves.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RxLimits {
    /// TSN window, gap blocks, duplicates, SACK delay.
    pub tracker: TrackerLimits,
    /// Receive buffer, message size, chunk count, inbound streams.
    pub reassembly: ReassemblyLimits,
}

/// What became of a DATA chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataOutcome {
    /// New, held or delivered, and acknowledged.
    Accepted,
    /// Seen before: dropped, and listed in the next SACK.
    Duplicate,
    /// Not acknowledged, so the peer sends it again; a SACK is owed now (RFC 9260
    /// §6.2).
    Dropped(DropReason),
    /// On a stream that was not negotiated: acknowledged and dropped. RFC 9260 §6.5:
    /// the endpoint "SHOULD acknowledge the reception of the DATA chunk following the
    /// normal procedure, immediately send an ERROR chunk with cause set to 'Invalid
    /// Stream Identifier' ... and discard the DATA chunk".
    InvalidStream,
}

/// Why a new DATA chunk was dropped unacknowledged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DropReason {
    /// Past [`TrackerLimits::max_tsn_ahead`].
    TooFarAhead,
    /// It would start a gap block past [`TrackerLimits::max_gap_blocks`].
    TooManyGaps,
    /// The receive buffer has no room for it (see [`Reassembly::has_room`]).
    NoRoom,
}

/// The fixed fields of a SACK chunk (RFC 9260 §3.3.4); its lists go to the caller's
/// buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SackFields {
    /// Cumulative TSN Ack.
    pub cumulative_tsn_ack: Tsn,
    /// Advertised Receiver Window Credit.
    pub a_rwnd: u32,
}

/// One association's receive side.
#[derive(Debug)]
pub struct Receiver {
    tracker: DataTracker,
    reassembly: Reassembly,
    /// The a_rwnd of the last SACK (the INIT's at first).
    advertised_rwnd: u32,
}

impl Receiver {
    /// The receive side for a peer whose INIT or INIT ACK gave `initial_peer_tsn`. The
    /// association announces `limits.reassembly.receive_window_bytes` as its a_rwnd.
    pub fn new(initial_peer_tsn: Tsn, limits: RxLimits) -> Receiver {
        let reassembly = Reassembly::new(limits.reassembly);
        let advertised_rwnd = reassembly.limits().receive_window_bytes;
        Receiver {
            tracker: DataTracker::new(initial_peer_tsn, limits.tracker),
            reassembly,
            advertised_rwnd,
        }
    }

    /// The TSN bookkeeping.
    pub fn tracker(&self) -> &DataTracker {
        &self.tracker
    }

    /// The reassembly queue.
    pub fn reassembly(&self) -> &Reassembly {
        &self.reassembly
    }

    /// Handles one DATA chunk. An error is the peer breaking the protocol (an empty
    /// chunk, an oversize message, inconsistent fragments, a reused SSN): the
    /// association aborts, as RFC 9260 §6.2 asks for "No User Data".
    pub fn handle_data(&mut self, chunk: DataIn) -> Result<DataOutcome, ReassemblyError> {
        let tsn = chunk.tsn;
        if chunk.payload.is_empty() {
            return Err(ReassemblyError::NoUserData { tsn });
        }
        if chunk.immediate_ack {
            // RFC 9260 §6.2: on the I bit "the receiver SHOULD NOT delay the sending
            // of the corresponding SACK chunk".
            self.tracker.request_sack_now();
        }
        match self.tracker.classify(tsn) {
            Observed::New => {}
            Observed::Duplicate => {
                self.tracker.observe(tsn);
                return Ok(DataOutcome::Duplicate);
            }
            Observed::TooFarAhead => {
                self.tracker.observe(tsn);
                return Ok(DataOutcome::Dropped(DropReason::TooFarAhead));
            }
            Observed::TooManyGaps => {
                self.tracker.observe(tsn);
                return Ok(DataOutcome::Dropped(DropReason::TooManyGaps));
            }
        }
        if !self.reassembly.accepts_stream(chunk.stream) {
            self.tracker.observe(tsn);
            return Ok(DataOutcome::InvalidStream);
        }
        let advances = self.tracker.advances_cumulative(tsn);
        if !self.reassembly.has_room(chunk.payload.len(), advances) {
            self.tracker.note_dropped();
            return Ok(DataOutcome::Dropped(DropReason::NoRoom));
        }
        self.reassembly.add(chunk)?;
        self.tracker.observe(tsn);
        if self.reassembly.has_deferred_reset() {
            self.reassembly
                .on_cumulative_tsn(self.tracker.cumulative_tsn());
        }
        Ok(DataOutcome::Accepted)
    }

    /// Handles a FORWARD TSN (RFC 3758 §3.6). `skipped` lists (stream, largest skipped
    /// SSN) pairs for ordered streams, as the chunk carries them.
    pub fn handle_forward_tsn(
        &mut self,
        new_cumulative: Tsn,
        skipped: &[(StreamId, Ssn)],
    ) -> ForwardTsnOutcome {
        let outcome = self.tracker.handle_forward_tsn(new_cumulative);
        if outcome == ForwardTsnOutcome::Stale {
            // Everything up to it has arrived since, so its skipped SSNs were
            // received and are delivered or waiting in order: nothing to do.
            return outcome;
        }
        // Reassembly sees only New Cumulative TSNs the tracker took, so its floor never
        // passes the cumulative TSN, whatever the peer sends.
        self.reassembly.handle_forward_tsn(new_cumulative, skipped);
        if self.reassembly.has_deferred_reset() {
            self.reassembly
                .on_cumulative_tsn(self.tracker.cumulative_tsn());
        }
        outcome
    }

    /// Call after each SCTP packet's chunks were handled (see
    /// [`DataTracker::end_of_packet`]).
    pub fn end_of_packet(&mut self) {
        self.tracker.end_of_packet();
    }

    /// The next whole message, in delivery order, left in the buffer: an
    /// application that cannot take it yet leaves it there, and the window it holds
    /// stays closed to the peer (RFC 9260 §6.2).
    pub fn peek_message(&self) -> Option<&Message> {
        self.reassembly.peek_message()
    }

    /// The next whole message, in delivery order. Once the application has taken
    /// enough to open the window past the last one advertised by min(half the
    /// buffer, one packet), a SACK is owed at once to say so: RFC 9260 §6.2 asks for
    /// receiver silly window syndrome avoidance "similar to the one described in
    /// Section 4.2.3.3 of [RFC1122]", which advances the window once it can grow by
    /// "min( Fr * RCV.BUFF, Eff.snd.MSS )" with Fr = 1/2. A sender the application
    /// held back (its window closed) thus learns at once that it may go on, instead
    /// of at its next zero window probe.
    pub fn pop_message(&mut self) -> Option<Message> {
        let message = self.reassembly.pop_message()?;
        let half = self.reassembly.limits().receive_window_bytes / 2;
        let step = half.clamp(1, WINDOW_UPDATE_STEP);
        if self.a_rwnd() >= self.advertised_rwnd.saturating_add(step) {
            self.tracker.request_sack_now();
        }
        Some(message)
    }

    /// The receive window to advertise: the buffer less what it holds (RFC 9260 §6.2).
    ///
    /// With every entry taken ([`ReassemblyLimits::max_buffered_chunks`]: many small
    /// messages the application has not taken) nothing more fits whatever the bytes
    /// say, so the window is 0: the sender stops, rather than send into drops.
    pub fn a_rwnd(&self) -> u32 {
        if !self.reassembly.has_room(0, true) {
            return 0;
        }
        let window = self.reassembly.limits().receive_window_bytes;
        let held = u32::try_from(self.reassembly.buffered_bytes()).unwrap_or(u32::MAX);
        window.saturating_sub(held)
    }

    /// Whether a whole message on `stream` waits to be taken.
    pub fn has_message_on(&self, stream: StreamId) -> bool {
        self.reassembly.has_message_on(stream)
    }

    /// Whether a SACK is owed, and how soon.
    pub fn ack_urgency(&self) -> Option<AckUrgency> {
        self.tracker.ack_urgency()
    }

    /// The delayed-ack timer fired.
    pub fn delayed_ack_expired(&mut self) {
        self.tracker.delayed_ack_expired();
    }

    /// Builds the SACK that acknowledges everything received so far: gap ack blocks and
    /// duplicate TSNs go into the caller's buffers (cleared first, capacity reused),
    /// and nothing is owed afterwards. The caller must send it.
    pub fn build_sack(
        &mut self,
        gaps: &mut Vec<GapAckBlock>,
        duplicates: &mut Vec<Tsn>,
    ) -> SackFields {
        self.tracker.gap_ack_blocks(gaps);
        self.tracker.take_duplicates(duplicates);
        self.tracker.on_sack_sent();
        let a_rwnd = self.a_rwnd();
        self.advertised_rwnd = a_rwnd;
        SackFields {
            cumulative_tsn_ack: self.tracker.cumulative_tsn(),
            a_rwnd,
        }
    }

    /// An Outgoing SSN Reset Request from the peer (RFC 6525 §5.2.2) for `streams`
    /// (all when empty), whose Sender's Last Assigned TSN is `sender_last_tsn`.
    pub fn reset_streams(
        &mut self,
        streams: &[StreamId],
        sender_last_tsn: Tsn,
    ) -> Result<ResetProgress, ReassemblyError> {
        let cumulative = self.tracker.cumulative_tsn();
        self.reassembly
            .reset_streams(streams, sender_last_tsn, cumulative)
    }

    /// Whether a deferred reset was performed since the last call.
    pub fn take_reset_performed(&mut self) -> bool {
        self.reassembly.take_reset_performed()
    }
}
