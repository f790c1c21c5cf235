//! VP8 temporal layers for one subscription: which frames of a stream it is sent, and
//! how its sequence numbers and PictureIDs close over the frames it is not.
//!
//! RFC 7741 §4.2 gives each frame a temporal layer index (TID, the base layer 0) and a
//! layer sync bit (Y: the frame "depends only on the base layer (TID = 0) frame with
//! TL0PICIDX equal to that of the current frame"); §8 lets a media-aware network
//! element discard frames no other frame needs. Chromium sends each VP8 simulcast
//! stream as three temporal layers (L1T3: TIDs 0, 2, 1, 2 over and over, Y set once
//! per eight frames on a TL2 and the TL1 after it), and layer 2 is referenced by
//! nothing, layer 1 only by layers 1 and 2.
//!
//! A frame is decided at the first of its packets seen (every packet carries the
//! descriptor), and all its packets follow, late or recovered ones too, so no frame
//! is ever cut:
//! - `current` comes down to `target` at a frame boundary (the next frame decided);
//! - it goes up to `target` at a key frame, and to a frame's TID at a frame with Y set
//!   whose TID is above `current` and at most `target` (mediasoup's rule; a frame
//!   without Y may refer to one of its layer that was not sent);
//! - a frame is sent when its TID is at most `current`, else dropped.
//!
//! A dropped frame takes its sequence numbers and its PictureID out of the
//! subscriber's numbering: a packet sent carries the publisher's numbers less the
//! dropped ones before it, which stays exact when packets come out of order, since
//! the drops are kept in order. Neither may show a gap: libwebrtc's receiver holds a
//! non-sync frame back while a PictureID between it and its references is missing
//! (`RtpVp8RefFinder`), and counts a missing sequence number as loss and asks for it.
//! TL0PICIDX needs nothing: a base layer frame is never dropped.
//!
//! Only a drop that comes after everything numbered so far can leave the numbering: a
//! late packet of a dropped frame (the publisher's retransmission) leaves a gap
//! instead, and a late frame that was never decided (all its packets lost, then
//! recovered) is sent whatever its layer, since its PictureID is in the numbering.
//! Missing packets between two of a dropped frame, or between a dropped frame's end
//! and the next frame, are the dropped frame's and leave with it.

use std::collections::VecDeque;

use crate::rtp::payload::Vp8Descriptor;

/// Dropped sequence numbers (and PictureIDs) a subscription remembers; older ones are
/// folded into a count, and a packet from before them is not sent.
pub const MAX_DROPS: usize = 1024;
/// Missing packets at most taken out with a dropped frame.
pub const MAX_GAP_FILL: u64 = 64;
/// A TID bound that sends every layer.
pub const ALL_LAYERS: u8 = u8::MAX;

/// How much a forwarded packet's numbers come down by: the dropped packets and frames
/// before it (modulo 2^16; the PictureID is written modulo its width).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Shift {
    /// Dropped sequence numbers before the packet's.
    pub seq: u16,
    /// Dropped PictureIDs before the packet's.
    pub picture: u16,
}

/// Numbers taken out of a numbering, in order: the newest [`MAX_DROPS`] of them, and
/// how many came before those.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Dropped {
    /// Drops no longer listed, all at or below `floor`.
    folded: u64,
    /// The newest drop folded: nothing at or below it can be numbered any more.
    floor: u64,
    list: VecDeque<u64>,
}

impl Dropped {
    /// Takes `x` out; `x` is above every number taken out before.
    fn push(&mut self, x: u64) {
        if self.list.back().is_some_and(|b| *b >= x) {
            return;
        }
        if self.list.len() >= MAX_DROPS
            && let Some(f) = self.list.pop_front()
        {
            self.folded += 1;
            self.floor = f;
        }
        self.list.push_back(x);
    }

    /// How many numbers below `x` were taken out.
    fn below(&self, x: u64) -> u64 {
        self.folded + self.list.partition_point(|d| *d < x) as u64
    }

    fn contains(&self, x: u64) -> bool {
        self.list.binary_search(&x).is_ok()
    }

    fn total(&self) -> u64 {
        self.folded + self.list.len() as u64
    }

    /// Folds every listed drop into the count: nothing at or below the newest, nor
    /// at or below `through`, can be numbered any more.
    fn fold_all(&mut self, through: u64) {
        self.folded += self.list.len() as u64;
        let newest = self.list.back().copied().unwrap_or(0);
        self.floor = self.floor.max(newest).max(through);
        self.list.clear();
    }

    /// The number kept whose place in the numbering, once the drops are taken out, is
    /// `y`: the inverse of `x − below(x)`.
    fn inverse(&self, y: u64) -> u64 {
        let mut x = y + self.folded;
        for d in &self.list {
            if *d <= x {
                x += 1;
            } else {
                break;
            }
        }
        x
    }
}

/// The extended number closest to `max` whose low `bits` bits are `v`.
fn extend(max: u64, v: u16, bits: u32) -> u64 {
    let m = 1u64 << bits;
    let candidate = (max & !(m - 1)) | u64::from(v);
    if candidate > max && candidate - max > m / 2 && candidate >= m {
        candidate - m
    } else if candidate < max && max - candidate > m / 2 {
        candidate + m
    } else {
        candidate
    }
}

/// The smallest extended number above `max` whose low `bits` bits are `v`: a
/// picture after a pause, however far the PictureID moved meanwhile.
fn extend_forward(max: u64, v: u16, bits: u32) -> u64 {
    let m = 1u64 << bits;
    let candidate = (max & !(m - 1)) | u64::from(v);
    if candidate > max {
        candidate
    } else {
        candidate + m
    }
}

/// One subscription's temporal layer state for the stream it is sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TemporalFilter {
    /// The highest TID the subscriber prefers ([`ALL_LAYERS`] for any).
    pub preferred: u8,
    /// The highest TID chosen for it (by its bandwidth; at most `preferred`).
    pub target: u8,
    /// The highest TID it is sent now.
    pub current: u8,
    /// Frames dropped, in all.
    pub frames_dropped: u64,
    started: bool,
    /// The PictureID width of the stream (15 or 7 bits).
    wide: bool,
    max_seq: u64,
    /// The frame and marker bit of the packet at `max_seq`.
    max_seq_picture: u64,
    max_seq_marker: bool,
    max_picture: u64,
    seqs: Dropped,
    pictures: Dropped,
    /// The subscription was paused and resumed: the next picture is newer than all
    /// before it.
    resumed: bool,
}

impl Default for TemporalFilter {
    fn default() -> Self {
        Self {
            preferred: ALL_LAYERS,
            target: ALL_LAYERS,
            current: ALL_LAYERS,
            frames_dropped: 0,
            started: false,
            wide: true,
            max_seq: 0,
            max_seq_picture: 0,
            max_seq_marker: false,
            max_picture: 0,
            seqs: Dropped::default(),
            pictures: Dropped::default(),
            resumed: false,
        }
    }
}

impl TemporalFilter {
    /// Starts over on another stream (a simulcast switch, at a key frame): nothing
    /// dropped yet, every layer up to the target.
    pub fn restart(&mut self) {
        *self = Self {
            preferred: self.preferred,
            target: self.target,
            current: self.target,
            frames_dropped: self.frames_dropped,
            ..Self::default()
        };
    }

    /// The subscription goes on after a pause, in which its packets went unseen:
    /// what was dropped stays taken out of its numbering, and the next picture is
    /// taken as newer than every one before it, however far the PictureID moved
    /// (a 7-bit one wraps in about four seconds).
    pub fn resume(&mut self) {
        self.resumed = self.started;
    }

    /// Whether anything was dropped on the stream since it started.
    pub fn dropping(&self) -> bool {
        self.seqs.total() > 0 || self.pictures.total() > 0
    }

    /// Decides a packet (extended sequence number `seq`, its marker bit, its VP8
    /// descriptor, whether it starts a key frame): `Some` with what its numbers come
    /// down by when it is sent, `None` when it is not.
    pub fn admit(
        &mut self,
        seq: u64,
        marker: bool,
        d: &Vp8Descriptor,
        keyframe: bool,
    ) -> Option<Shift> {
        if self.started && seq <= self.seqs.floor {
            return None;
        }
        let Some((pid, _, wide)) = d.picture_id else {
            return self.admit_undescribed(seq, marker);
        };
        if self.started && wide != self.wide {
            // RFC 7741 §4.2: the width may change; the numbering starts over.
            self.restart();
        }
        let bits = if wide { 15 } else { 7 };
        let p = if std::mem::take(&mut self.resumed) {
            // Everything dropped before the pause is older than what comes now.
            self.seqs.fold_all(self.max_seq);
            self.pictures.fold_all(self.max_picture);
            extend_forward(self.max_picture, pid, bits)
        } else if self.started {
            extend(self.max_picture, pid, bits)
        } else {
            (1 << 16) + u64::from(pid)
        };
        if self.started && p <= self.pictures.floor {
            return None;
        }
        // A descriptor without T counts as the base layer.
        let tid = d.temporal_id.unwrap_or(0);
        let new_frame = !self.started || p > self.max_picture;
        let forward = if new_frame {
            self.current = self.current.min(self.target);
            let forward = if keyframe {
                self.current = self.target;
                true
            } else if tid <= self.current {
                true
            } else if tid <= self.target && d.layer_sync {
                self.current = tid;
                true
            } else {
                false
            };
            if !forward {
                self.pictures.push(p);
                self.frames_dropped += 1;
            }
            self.max_picture = p;
            forward
        } else {
            // A frame decided before; or, late and never seen, one whose PictureID is
            // in the numbering already: sent.
            !self.pictures.contains(p)
        };
        if !self.started {
            self.started = true;
            self.wide = wide;
            self.max_seq = seq;
            self.max_seq_picture = p;
            self.max_seq_marker = marker;
            if !forward {
                self.seqs.push(seq);
                return None;
            }
            return Some(Shift::default());
        }
        if seq > self.max_seq {
            let gap = seq - self.max_seq - 1;
            let previous = self.max_seq_picture;
            // Missing packets that belong to a dropped frame leave with it: those
            // between two of its packets, those between its end and the next frame's
            // start, and those of its own start after the last frame ended.
            let gap_dropped = gap > 0
                && gap <= MAX_GAP_FILL
                && if forward {
                    d.frame_start
                        && p == previous + 1
                        && !self.max_seq_marker
                        && self.pictures.contains(previous)
                } else {
                    previous == p || (self.max_seq_marker && p == previous + 1)
                };
            if gap_dropped {
                for s in self.max_seq + 1..seq {
                    self.seqs.push(s);
                }
            }
            if !forward {
                self.seqs.push(seq);
            }
            self.note_seq(seq, p, marker);
        }
        if !forward {
            return None;
        }
        if self.seqs.contains(seq) {
            return None;
        }
        Some(Shift {
            seq: self.seqs.below(seq) as u16,
            picture: self.pictures.below(p) as u16,
        })
    }

    /// Decides a packet with no frame to decide by (no VP8 descriptor, as padding
    /// has, or no PictureID): sent, in its place in the numbering, unless its number
    /// was already given up (a missing packet of a dropped frame, or older than the
    /// numbering remembers).
    pub fn admit_undescribed(&mut self, seq: u64, marker: bool) -> Option<Shift> {
        if self.started && (seq <= self.seqs.floor || self.seqs.contains(seq)) {
            return None;
        }
        self.note_seq(seq, self.max_picture, marker);
        Some(Shift {
            seq: self.seqs.below(seq) as u16,
            picture: 0,
        })
    }

    fn note_seq(&mut self, seq: u64, picture: u64, marker: bool) {
        if !self.started {
            self.started = true;
            self.max_seq = seq;
        }
        if seq >= self.max_seq {
            self.max_seq = seq;
            self.max_seq_picture = picture;
            self.max_seq_marker = marker;
        }
    }

    /// The publisher's extended sequence number of what the subscriber numbers
    /// `numbered` (its own number less the stream's offset), or `None` before
    /// anything was decided.
    pub fn source_seq(&self, numbered: u16) -> Option<u64> {
        if !self.started {
            return None;
        }
        let numbered_max = self.max_seq.checked_sub(self.seqs.total())?;
        let y = crate::media::extend_seq(numbered_max, numbered);
        Some(self.seqs.inverse(y))
    }

    /// What a retransmission of the packet `seq` (descriptor `d`, if it has one)
    /// comes down by, or `None` if it was not sent (its frame was dropped, or it is
    /// older than the numbering remembers).
    pub fn resend(&self, seq: u64, d: Option<&Vp8Descriptor>) -> Option<Shift> {
        if !self.started {
            return Some(Shift::default());
        }
        if seq <= self.seqs.floor || self.seqs.contains(seq) {
            return None;
        }
        let picture = match d.and_then(|d| d.picture_id) {
            Some((pid, _, wide)) => {
                let p = extend(self.max_picture, pid, if wide { 15 } else { 7 });
                if p <= self.pictures.floor || self.pictures.contains(p) {
                    return None;
                }
                self.pictures.below(p) as u16
            }
            None => 0,
        };
        Some(Shift {
            seq: self.seqs.below(seq) as u16,
            picture,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Chromium's L1T3 pattern (libwebrtc's `DefaultTemporalLayers`): TID and Y of
    /// frame `i` of a run that starts with a key frame.
    fn pattern(i: u64) -> (u8, bool) {
        match i % 8 {
            0 | 4 => (0, false),
            1 => (2, true),
            2 => (1, true),
            6 => (1, false),
            _ => (2, false),
        }
    }

    /// A packet of frame `i` (`k` of `n`), its sequence number and descriptor.
    fn packet(seq: u64, i: u64, k: usize, n: usize) -> (u64, bool, Vp8Descriptor, bool) {
        let (tid, y) = pattern(i);
        let d = Vp8Descriptor {
            picture_id: Some((((100 + i) & 0x7fff) as u16, 2, true)),
            tl0_pic_idx: Some(((i / 4) as u8, 4)),
            temporal_id: Some(tid),
            layer_sync: y,
            frame_start: k == 0,
            keyframe_start: k == 0 && i == 0,
            len: 6,
        };
        (seq, k + 1 == n, d, i == 0 && k == 0)
    }

    /// Frames `0..frames` of three packets each, in order.
    fn stream(frames: u64) -> Vec<(u64, bool, Vp8Descriptor, bool)> {
        let mut out = Vec::new();
        let mut seq = 1000;
        for i in 0..frames {
            for k in 0..3 {
                out.push(packet(seq, i, k, 3));
                seq += 1;
            }
        }
        out
    }

    /// Runs `packets` through a filter bound to `target`; returns what was sent:
    /// (source seq, sent seq, sent PictureID, TID).
    fn run(
        f: &mut TemporalFilter,
        packets: &[(u64, bool, Vp8Descriptor, bool)],
    ) -> Vec<(u64, u64, u64, u8)> {
        packets
            .iter()
            .filter_map(|(seq, marker, d, key)| {
                let s = f.admit(*seq, *marker, d, *key)?;
                let pid = u64::from(d.picture_id.unwrap().0);
                Some((
                    *seq,
                    (*seq as u16).wrapping_sub(s.seq) as u64,
                    (pid as u16).wrapping_sub(s.picture) as u64 & 0x7fff,
                    d.temporal_id.unwrap(),
                ))
            })
            .collect()
    }

    fn contiguous(sent: &[(u64, u64, u64, u8)]) {
        for w in sent.windows(2) {
            assert_eq!(w[1].1, w[0].1 + 1, "sequence numbers: {w:?}");
            assert!(
                w[1].2 == w[0].2 || w[1].2 == w[0].2 + 1,
                "PictureIDs: {w:?}"
            );
        }
    }

    #[test]
    fn each_bound_sends_its_layers_without_gaps() {
        for (target, share) in [(0u8, 2usize), (1, 4), (2, 8)] {
            let mut f = TemporalFilter {
                target,
                ..TemporalFilter::default()
            };
            let sent = run(&mut f, &stream(64));
            assert!(sent.iter().all(|s| s.3 <= target), "{target}: {sent:?}");
            // 64 frames of three packets: a quarter, a half, all of them.
            assert_eq!(sent.len(), 64 * 3 * share / 8, "{target}");
            contiguous(&sent);
        }
    }

    #[test]
    fn up_waits_for_a_sync_frame_and_down_for_a_frame_boundary() {
        let mut f = TemporalFilter {
            target: 0,
            ..TemporalFilter::default()
        };
        let packets = stream(40);
        // Frames 0..10 at TL0 only, then the bound rises to 2 in frame 10's middle.
        let mut sent = run(&mut f, &packets[..31]);
        f.target = 2;
        sent.extend(run(&mut f, &packets[31..60]));
        // Frames 11 to 16: 11 is TL2 without Y, 12 TL0, 13..15 not sync; 17 is the
        // first TL2 sync frame after the rise.
        let frames: Vec<u64> = sent.iter().map(|s| s.0 - 1000).map(|s| s / 3).collect();
        assert!(!frames.contains(&11) && !frames.contains(&13), "{frames:?}");
        assert!(frames.contains(&12) && frames.contains(&16));
        assert!(frames.contains(&17) && frames.contains(&18) && frames.contains(&19));
        // Down mid-frame 20: its last two packets still go, frame 21 (TL2) does not.
        let mut rest = run(&mut f, &packets[60..61]);
        f.target = 0;
        rest.extend(run(&mut f, &packets[61..]));
        let frames: Vec<u64> = rest.iter().map(|s| (s.0 - 1000) / 3).collect();
        assert_eq!(&frames[..4], &[20, 20, 20, 24], "{frames:?}");
        sent.extend(rest);
        contiguous(&sent);
    }

    #[test]
    fn reordered_and_lost_packets_keep_their_numbers() {
        let packets = stream(48);
        let mut in_order = TemporalFilter {
            target: 1,
            ..TemporalFilter::default()
        };
        let expected = run(&mut in_order, &packets);
        // Swap neighbours throughout: each sent packet gets the number it gets in
        // order.
        let mut shuffled = packets.clone();
        for pair in shuffled.chunks_mut(2) {
            pair.reverse();
        }
        let mut f = TemporalFilter {
            target: 1,
            ..TemporalFilter::default()
        };
        let mut got = run(&mut f, &shuffled);
        got.sort();
        let mut want = expected.clone();
        want.sort();
        assert_eq!(got, want);
        // A dropped frame's middle and tail lost upstream, then recovered late: the
        // missing numbers leave with the frame, and the late packets are not sent.
        let mut f = TemporalFilter {
            target: 1,
            ..TemporalFilter::default()
        };
        // Frame 5 (TL2) is 1015..=1017: 1016 and 1017 come after frame 6.
        let mut lossy: Vec<_> = packets
            .iter()
            .filter(|p| p.0 != 1016 && p.0 != 1017)
            .cloned()
            .collect();
        let at = lossy.iter().position(|p| p.0 == 1021).unwrap();
        lossy.insert(at, packets[17]);
        lossy.insert(at, packets[16]);
        let got = run(&mut f, &lossy);
        assert_eq!(got, expected);
        contiguous(&got);
    }

    #[test]
    fn a_retransmission_finds_its_source_and_numbers() {
        let mut f = TemporalFilter {
            target: 1,
            ..TemporalFilter::default()
        };
        let packets = stream(40);
        let sent = run(&mut f, &packets);
        for (source, numbered, picture, _) in &sent {
            let back = f.source_seq(*numbered as u16).unwrap();
            assert_eq!(back, *source);
            let d = &packets[(back - 1000) as usize].2;
            let s = f.resend(back, Some(d)).unwrap();
            assert_eq!((back as u16).wrapping_sub(s.seq) as u64, *numbered);
            let pid = d.picture_id.unwrap().0;
            assert_eq!(pid.wrapping_sub(s.picture) as u64 & 0x7fff, *picture);
        }
        // A dropped frame's packet is never resent.
        let dropped = &packets[3];
        assert_eq!(dropped.2.temporal_id, Some(2));
        assert_eq!(f.resend(dropped.0, Some(&dropped.2)), None);
    }

    #[test]
    fn a_resumed_subscription_decides_frames_by_layer_after_a_long_pause() {
        // 7-bit PictureIDs; frames 0–15 seen, 16–115 not (paused), then 116 on.
        let seven = |(seq, marker, mut d, key): (u64, bool, Vp8Descriptor, bool), i: u64| {
            d.picture_id = Some(((i & 0x7f) as u16, 1, false));
            (seq, marker, d, key)
        };
        let mut f = TemporalFilter {
            target: 0,
            ..TemporalFilter::default()
        };
        let mut sent = Vec::new();
        let mut feed = |f: &mut TemporalFilter, frames: std::ops::Range<u64>| {
            for i in frames {
                let (seq, marker, d, key) = seven(packet(1000 + i, i, 0, 1), i);
                if let Some(s) = f.admit(seq, marker, &d, key) {
                    let pid = d.picture_id.unwrap().0;
                    sent.push((
                        i,
                        (seq as u16).wrapping_sub(s.seq),
                        pid.wrapping_sub(s.picture) & 0x7f,
                    ));
                }
            }
        };
        feed(&mut f, 0..16);
        f.resume();
        feed(&mut f, 116..148);
        // Only TL0 frames (every fourth), before and after the pause.
        let frames: Vec<u64> = sent.iter().map(|s| s.0).collect();
        let want: Vec<u64> = (0..16).chain(116..148).filter(|i| i % 4 == 0).collect();
        assert_eq!(frames, want);
        // Numbers go on: consecutive on either side, and across the pause both jump
        // by the frames it skipped (13 to 116, less the three dropped before it).
        let at = sent.iter().position(|s| s.0 >= 116).unwrap();
        for (k, w) in sent.windows(2).enumerate() {
            let step = if k + 1 == at { 101 } else { 1 };
            assert_eq!(w[1].1, w[0].1.wrapping_add(step), "{sent:?}");
            assert_eq!(w[1].2, (w[0].2 + step) & 0x7f, "{sent:?}");
        }
    }

    #[test]
    fn a_packet_without_a_descriptor_keeps_its_place_in_the_numbering() {
        let mut f = TemporalFilter {
            target: 0,
            ..TemporalFilter::default()
        };
        // Frames 0–3, one packet each: 1, 2 and 3 are dropped.
        for i in 0..4 {
            let (seq, marker, d, key) = packet(1000 + i, i, 0, 1);
            f.admit(seq, marker, &d, key);
        }
        // Padding after them goes right after frame 0's number.
        let pad = f.admit_undescribed(1004, false).unwrap();
        assert_eq!(1004u16.wrapping_sub(pad.seq), 1001);
        // Frame 4 (TL0) follows it.
        let (seq, marker, d, key) = packet(1005, 4, 0, 1);
        let s = f.admit(seq, marker, &d, key).unwrap();
        assert_eq!(1005u16.wrapping_sub(s.seq), 1002);
        // A number given up with a dropped frame is not taken by padding.
        assert_eq!(f.admit_undescribed(1002, false), None);
        assert_eq!(f.resend(1002, None), None);
        assert_eq!(f.resend(1004, None), Some(pad));
    }

    #[test]
    fn picture_ids_wrap() {
        let mut f = TemporalFilter {
            target: 0,
            ..TemporalFilter::default()
        };
        let mut sent = Vec::new();
        for i in 0..40u64 {
            let (seq, marker, mut d, key) = packet(5000 + i, i, 0, 1);
            d.picture_id = Some((((0x7ff0 + i) & 0x7fff) as u16, 2, true));
            if let Some(s) = f.admit(seq, marker, &d, key) {
                sent.push(((0x7ff0 + i) as u16 & 0x7fff).wrapping_sub(s.picture) & 0x7fff);
            }
        }
        assert_eq!(sent.len(), 10);
        for w in sent.windows(2) {
            assert_eq!(w[1], (w[0] + 1) & 0x7fff, "{sent:?}");
        }
    }
}
