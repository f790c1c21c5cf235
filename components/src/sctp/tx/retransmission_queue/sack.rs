//! Processing a SACK: the cumulative ack, the gap blocks, miss indications and reneging
//! (RFC 9260 §6.2.1, §7.2.4), each step bounded by the TSNs it covers.

use std::cmp::Ordering;
use std::time::Duration;

use super::{ChunkState, Outstanding, RetransmissionQueue, wrap};
use crate::sctp::num::Tsn;
use crate::time::Time;

/// A SACK that [`RetransmissionQueue::handle_sack`] dropped; nothing was changed.
#[derive(Debug, thiserror::Error, Clone, Copy, PartialEq, Eq)]
pub enum SackError {
    /// The Cumulative TSN Ack is behind the Cumulative TSN Ack Point: an out-of-order SACK,
    /// which RFC 9260 §6.2.1 D i says to drop.
    #[error("SACK cumulative TSN ack {cumulative_tsn_ack:?} is behind the ack point {ack_point:?}")]
    OutOfOrder {
        /// The SACK's Cumulative TSN Ack.
        cumulative_tsn_ack: Tsn,
        /// The Cumulative TSN Ack Point.
        ack_point: Tsn,
    },
    /// The Cumulative TSN Ack covers TSNs that were never sent: a broken or hostile peer.
    #[error(
        "SACK cumulative TSN ack {cumulative_tsn_ack:?} is past the last TSN sent {highest_sent:?}"
    )]
    AcksUnsentTsn {
        /// The SACK's Cumulative TSN Ack.
        cumulative_tsn_ack: Tsn,
        /// The highest TSN assigned so far.
        highest_sent: Tsn,
    },
}

/// What a SACK did, for congestion control, the RTO estimator and the T3-rtx timer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SackOutcome {
    /// The SACK's Cumulative TSN Ack.
    pub cumulative_tsn_ack: Tsn,
    /// The Cumulative TSN Ack Point advanced, so the earliest outstanding TSN was acked:
    /// restart T3-rtx if data is still outstanding (RFC 9260 §6.3.2 R3).
    pub newly_acked_cumulative: bool,
    /// Chunk bytes (header and padding included, RFC 9260 §7.2) newly acknowledged by the
    /// cumulative ack or gap blocks, abandoned chunks not credited (RFC 3758 §3.5 A2).
    pub bytes_acked: usize,
    /// The user data bytes among `bytes_acked`.
    pub payload_bytes_acked: usize,
    /// Flightsize before the SACK (RFC 9260 §7.2.2's condition).
    pub bytes_in_flight_before: usize,
    /// An RTT measurement, only from a chunk sent exactly once (Karn, RFC 9260 §6.3.1 C5),
    /// at most one per round trip (C4).
    pub rtt_sample: Option<Duration>,
    /// Some chunk got its third miss indication (RFC 9260 §7.2.4), whether it was marked
    /// for fast retransmission or abandoned instead (RFC 3758 §3.5 F5).
    pub fast_retransmit_triggered: bool,
    /// A TSN acked by an earlier gap block is missing again (RFC 9260 §6.2.1 D iii): start
    /// T3-rtx if it is not running (§6.3.2 R4).
    pub reneged: bool,
    /// Nothing is outstanding or waiting for retransmission: stop T3-rtx (§6.3.2 R2) and
    /// reset partial_bytes_acked (§7.2.2). Gap-acked chunks count as acknowledged here.
    /// While a FORWARD-TSN is owed, keep a T3-rtx running anyway (RFC 3758 §3.5 C5), so
    /// that its expiry sends the FORWARD-TSN again (A5).
    pub all_acked: bool,
    /// The highest TSN assigned so far, the Fast Recovery exit point if one starts (§7.2.4).
    pub highest_sent_tsn: Tsn,
}

impl RetransmissionQueue {
    /// Processes a SACK (RFC 9260 §6.2.1, §7.2.4; RFC 3758 §3.5 A4). `gap_blocks` are the
    /// (Start, End) offsets as received; `in_fast_recovery` is the congestion controller's
    /// state before this SACK. A dropped SACK changes nothing, not even the peer's rwnd.
    pub fn handle_sack(
        &mut self,
        now: Time,
        cumulative_tsn_ack: Tsn,
        gap_blocks: impl IntoIterator<Item = (u16, u16)>,
        a_rwnd: u32,
        in_fast_recovery: bool,
    ) -> Result<SackOutcome, SackError> {
        self.acknowledge(
            now,
            cumulative_tsn_ack,
            Some((gap_blocks, a_rwnd)),
            in_fast_recovery,
        )
    }

    /// Processes the Cumulative TSN Ack of a SHUTDOWN chunk (RFC 9260 §9.2: its receiver
    /// checks by it "that all its outstanding DATA chunks have been received"). It
    /// acknowledges like a SACK's, but SHUTDOWN carries no gap blocks and no window, so
    /// their absence neither reneges on gap-acked chunks nor counts miss indications, and
    /// the peer's window stays as its last SACK set it.
    pub fn handle_shutdown_cum_ack(
        &mut self,
        now: Time,
        cumulative_tsn_ack: Tsn,
    ) -> Result<SackOutcome, SackError> {
        self.acknowledge(
            now,
            cumulative_tsn_ack,
            None::<(std::iter::Empty<(u16, u16)>, u32)>,
            false,
        )
    }

    /// [`Self::handle_sack`] with its gap blocks and a_rwnd (`sack`), or a SHUTDOWN's
    /// bare cumulative ack (`None`).
    fn acknowledge(
        &mut self,
        now: Time,
        cumulative_tsn_ack: Tsn,
        sack: Option<(impl IntoIterator<Item = (u16, u16)>, u32)>,
        in_fast_recovery: bool,
    ) -> Result<SackOutcome, SackError> {
        let ack_point = wrap(self.cum_ack);
        match cumulative_tsn_ack.serial_cmp(ack_point) {
            Some(Ordering::Greater | Ordering::Equal) => {}
            _ => {
                self.stats.out_of_order_sacks += 1;
                return Err(SackError::OutOfOrder {
                    cumulative_tsn_ack,
                    ack_point,
                });
            }
        }
        let advance = u64::from(cumulative_tsn_ack.distance_from(ack_point));
        if advance > self.items.len() as u64 {
            self.stats.invalid_sacks += 1;
            return Err(SackError::AcksUnsentTsn {
                cumulative_tsn_ack,
                highest_sent: wrap(self.highest_unwrapped()),
            });
        }

        let mut out = SackOutcome {
            cumulative_tsn_ack,
            newly_acked_cumulative: advance > 0,
            bytes_in_flight_before: self.bytes_in_flight,
            ..SackOutcome::default()
        };
        let gap_blocks = sack.map(|(gap_blocks, a_rwnd)| {
            self.peer_a_rwnd = a_rwnd;
            gap_blocks
        });
        let mut htna = None;
        for _ in 0..advance {
            let Some(item) = self.items.pop_front() else {
                break;
            };
            self.cum_ack += 1;
            let tsn = self.cum_ack;
            match item.state {
                ChunkState::InFlight => {
                    self.leave_flight(item.chunk_len(), item.payload_len);
                }
                ChunkState::Marked => self.marked -= 1,
                ChunkState::GapAcked | ChunkState::Abandoned => continue,
            }
            if !item.acked_before {
                self.credit(now, tsn, &item, &mut out, &mut htna);
            }
        }

        let Some(gap_blocks) = gap_blocks else {
            return Ok(self.finish_ack(advance, out));
        };
        self.ack_gap_blocks(now, gap_blocks, &mut out, &mut htna);
        // §7.2.4: miss indications go to missing TSNs below the HTNA; in Fast Recovery, a
        // SACK that advances the Cumulative TSN Ack Point gives one to every TSN it reports
        // missing, i.e. every hole below its highest gap block.
        let highest_block_end = self.merged.last().map(|&(_, end)| end);
        let miss_below = if in_fast_recovery && advance > 0 {
            highest_block_end.unwrap_or(self.cum_ack)
        } else {
            htna.unwrap_or(self.cum_ack)
        };
        self.walk_holes(now, miss_below, &mut out);
        self.detect_reneging(now, &mut out);
        Ok(self.finish_ack(advance, out))
    }

    /// What every acknowledgement ends with, once the ack point moved by `advance`.
    fn finish_ack(&mut self, advance: u64, mut out: SackOutcome) -> SackOutcome {
        if advance > 0 {
            self.forward.acked_through(self.cum_ack);
        }
        self.advance_peer_ack_point();
        self.tidy_heap();
        out.all_acked = self.bytes_in_flight == 0 && self.marked == 0;
        out.highest_sent_tsn = wrap(self.highest_unwrapped());
        out
    }

    /// `item` (TSN `tsn`) is newly acknowledged: count it, track the HTNA, take an RTT
    /// sample if it is the chunk being timed and Karn's rule allows.
    fn credit(
        &mut self,
        now: Time,
        tsn: u64,
        item: &Outstanding,
        out: &mut SackOutcome,
        htna: &mut Option<u64>,
    ) {
        let values = (
            item.chunk_len(),
            item.payload_len,
            item.retransmissions,
            item.first_sent,
        );
        self.credit_values(now, tsn, values, out, htna);
    }

    /// `credit` for a chunk described by (chunk bytes, payload bytes, retransmissions,
    /// first sent).
    fn credit_values(
        &mut self,
        now: Time,
        tsn: u64,
        (chunk_len, payload_len, retransmissions, first_sent): (usize, usize, u16, Time),
        out: &mut SackOutcome,
        htna: &mut Option<u64>,
    ) {
        out.bytes_acked += chunk_len;
        out.payload_bytes_acked += payload_len;
        *htna = Some(htna.map_or(tsn, |h| h.max(tsn)));
        if self.rtt_probe == Some(tsn) {
            self.rtt_probe = None;
            if retransmissions == 0 && tsn > self.karn_fence {
                out.rtt_sample = Some(now.saturating_since(first_sent));
            }
        }
    }

    /// Reads the gap blocks: up to the configured count, checked (1 <= Start <= End),
    /// sorted, merged and clamped to the TSNs sent, into `self.merged`. Then acknowledges
    /// only what the previous SACK's blocks did not already cover: every TSN those blocks
    /// held is still gap-acked (or abandoned), so the work is the newly acked TSNs plus the
    /// number of blocks, not the blocks' span.
    fn ack_gap_blocks(
        &mut self,
        now: Time,
        gap_blocks: impl IntoIterator<Item = (u16, u16)>,
        out: &mut SackOutcome,
        htna: &mut Option<u64>,
    ) {
        self.gap_scratch.clear();
        for (start, end) in gap_blocks.into_iter().take(self.config.max_gap_blocks) {
            if start == 0 || start > end {
                self.stats.bad_gap_blocks += 1;
                continue;
            }
            self.gap_scratch.push((start, end));
        }
        self.gap_scratch.sort_unstable();
        let highest = self.highest_unwrapped();
        self.merged.clear();
        for &(start, end) in &self.gap_scratch {
            let start = self.cum_ack + u64::from(start);
            let end = (self.cum_ack + u64::from(end)).min(highest);
            if start > end {
                continue;
            }
            match self.merged.last_mut() {
                Some(last) if start <= last.1 + 1 => last.1 = last.1.max(end),
                _ => self.merged.push((start, end)),
            }
        }
        // The previous blocks, less what the cumulative ack has taken.
        let cum = self.cum_ack;
        self.prev_blocks.retain_mut(|block| {
            block.0 = block.0.max(cum + 1);
            block.0 <= block.1
        });
        let mut fresh = std::mem::take(&mut self.block_diff);
        uncovered(&self.merged, &self.prev_blocks, &mut fresh);
        for &(start, end) in &fresh {
            for tsn in start..=end {
                self.ack_by_gap(now, tsn, out, htna);
            }
        }
        self.block_diff = fresh;
    }

    fn ack_by_gap(&mut self, now: Time, tsn: u64, out: &mut SackOutcome, htna: &mut Option<u64>) {
        self.stats.sack_tsn_visits += 1;
        let idx = (tsn - self.cum_ack - 1) as usize;
        let item = &mut self.items[idx];
        match item.state {
            ChunkState::InFlight => {
                item.state = ChunkState::GapAcked;
                let (chunk_len, payload_len) = (item.chunk_len(), item.payload_len);
                self.leave_flight(chunk_len, payload_len);
            }
            ChunkState::Marked => {
                item.state = ChunkState::GapAcked;
                self.marked -= 1;
            }
            ChunkState::GapAcked | ChunkState::Abandoned => return,
        }
        if !std::mem::replace(&mut self.items[idx].acked_before, true) {
            let item = &self.items[idx];
            let values = (
                item.chunk_len(),
                item.payload_len,
                item.retransmissions,
                item.first_sent,
            );
            self.credit_values(now, tsn, values, out, htna);
        }
    }

    /// Gives a miss indication to every chunk in flight in the holes below `miss_below`
    /// (§7.2.4). Walks the holes only, jumping over the blocks.
    fn walk_holes(&mut self, now: Time, miss_below: u64, out: &mut SackOutcome) {
        let last = miss_below.saturating_sub(1).min(self.highest_unwrapped());
        let merged = std::mem::take(&mut self.merged);
        let mut tsn = self.cum_ack + 1;
        let mut blocks = merged.iter().peekable();
        while tsn <= last {
            let hole_end = match blocks.peek() {
                Some(&&(start, end)) if tsn >= start => {
                    tsn = end + 1;
                    blocks.next();
                    continue;
                }
                Some(&&(start, _)) => (start - 1).min(last),
                None => last,
            };
            for missing in tsn..=hole_end {
                self.on_missing(now, missing, out);
            }
            tsn = hole_end + 1;
        }
        self.merged = merged;
    }

    /// §6.2.1 D iii: TSNs the previous SACK's blocks acknowledged and this one's do not
    /// have been reneged on: back in flight, one miss indication each. Then this SACK's
    /// blocks become the previous ones.
    fn detect_reneging(&mut self, now: Time, out: &mut SackOutcome) {
        let mut lost = std::mem::take(&mut self.block_diff);
        uncovered(&self.prev_blocks, &self.merged, &mut lost);
        for &(start, end) in &lost {
            for tsn in start..=end {
                self.stats.sack_tsn_visits += 1;
                let idx = (tsn - self.cum_ack - 1) as usize;
                let item = &mut self.items[idx];
                if item.state != ChunkState::GapAcked {
                    continue;
                }
                item.state = ChunkState::InFlight;
                let (chunk_len, payload_len) = (item.chunk_len(), item.payload_len);
                self.bytes_in_flight += chunk_len;
                self.payload_in_flight += payload_len;
                out.reneged = true;
                self.count_miss(now, tsn, out);
            }
        }
        self.block_diff = lost;
        std::mem::swap(&mut self.prev_blocks, &mut self.merged);
    }

    fn on_missing(&mut self, now: Time, tsn: u64, out: &mut SackOutcome) {
        self.stats.sack_tsn_visits += 1;
        let idx = (tsn - self.cum_ack - 1) as usize;
        if self.items[idx].state == ChunkState::InFlight {
            self.count_miss(now, tsn, out);
        }
    }

    /// One more miss indication for the in-flight chunk `tsn`; the third marks it for fast
    /// retransmission unless it was fast retransmitted before (§7.2.4 rules 1 and 5).
    fn count_miss(&mut self, now: Time, tsn: u64, out: &mut SackOutcome) {
        let idx = (tsn - self.cum_ack - 1) as usize;
        let item = &mut self.items[idx];
        item.misses = item.misses.saturating_add(1);
        if item.misses >= 3 && !item.fast_retransmitted {
            out.fast_retransmit_triggered = true;
            self.mark_or_abandon(now, tsn, true);
        }
    }
}

/// Appends to `out` (after clearing it) the maximal ranges of `a` that no range of `b`
/// covers. Both hold sorted, disjoint, inclusive ranges; O(|a| + |b|).
fn uncovered(a: &[(u64, u64)], b: &[(u64, u64)], out: &mut Vec<(u64, u64)>) {
    out.clear();
    let mut j = 0;
    for &(start, end) in a {
        let mut from = start;
        while from <= end {
            while j < b.len() && b[j].1 < from {
                j += 1;
            }
            match b.get(j) {
                Some(&(b_start, b_end)) if b_start <= end => {
                    if b_start > from {
                        out.push((from, b_start - 1));
                    }
                    from = b_end + 1;
                }
                _ => {
                    out.push((from, end));
                    break;
                }
            }
        }
    }
}
