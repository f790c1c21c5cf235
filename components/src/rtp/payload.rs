//! What an SFU reads in a video payload to switch simulcast layers: whether a packet
//! starts a keyframe, and for VP8 the picture numbers it renumbers so that a
//! subscriber sees one continuous stream across layers.
//!
//! - VP8 (RFC 7741 §4.2): the payload descriptor's PictureID (7 or 15 bits) and
//!   TL0PICIDX, found where they sit so they can be rewritten in a copy; §4.3: the
//!   payload header's P bit (0 for a key frame) in the first packet of a frame (S set,
//!   partition index 0).
//! - H.264 (RFC 6184): a packet starts a keyframe when it carries a sequence
//!   parameter set (type 7) or the first fragment of an IDR slice (type 5), alone
//!   (§5.6), in a STAP-A (§5.7.1) or as an FU-A start (§5.8).
//!
//! Nothing here panics on a short or malformed payload: it is read as "not a
//! keyframe" and "no descriptor".

/// Where a VP8 payload descriptor's renumbered fields sit, and their values.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Vp8Descriptor {
    /// The PictureID, its offset in the payload and whether it is 15 bits wide (M set).
    pub picture_id: Option<(u16, usize, bool)>,
    /// TL0PICIDX and its offset in the payload.
    pub tl0_pic_idx: Option<(u8, usize)>,
    /// The temporal layer index (TID), when the descriptor has one.
    pub temporal_id: Option<u8>,
    /// Y, the layer sync bit: the frame depends only on its base layer frame (set
    /// only with a TID).
    pub layer_sync: bool,
    /// The first packet of a frame: S set, partition index 0 (§4.5.1 step 3).
    pub frame_start: bool,
    /// The first packet of a key frame: S set, partition index 0, P clear.
    pub keyframe_start: bool,
    /// Bytes of descriptor before the VP8 payload.
    pub len: usize,
}

impl Vp8Descriptor {
    /// Reads the descriptor at the start of `payload` (RFC 7741 §4.2), `None` if it is
    /// cut short.
    pub fn parse(payload: &[u8]) -> Option<Vp8Descriptor> {
        let first = *payload.first()?;
        let mut d = Vp8Descriptor::default();
        let mut at = 1;
        if first & 0x80 != 0 {
            let x = *payload.get(at)?;
            at += 1;
            if x & 0x80 != 0 {
                let b = *payload.get(at)?;
                if b & 0x80 != 0 {
                    let lo = *payload.get(at + 1)?;
                    d.picture_id = Some((u16::from(b & 0x7f) << 8 | u16::from(lo), at, true));
                    at += 2;
                } else {
                    d.picture_id = Some((u16::from(b), at, false));
                    at += 1;
                }
            }
            if x & 0x40 != 0 {
                d.tl0_pic_idx = Some((*payload.get(at)?, at));
                at += 1;
            }
            if x & 0x30 != 0 {
                let t = *payload.get(at)?;
                if x & 0x20 != 0 {
                    d.temporal_id = Some(t >> 6);
                    d.layer_sync = t & 0x20 != 0;
                }
                at += 1;
            }
        }
        d.len = at;
        let start = first & 0x10 != 0 && first & 0x07 == 0;
        d.frame_start = start;
        // §4.3: P, the inverse key frame flag, is the low bit of the payload header's
        // first octet.
        d.keyframe_start = start && payload.get(at).is_some_and(|h| h & 0x01 == 0);
        Some(d)
    }

    /// Writes `picture_id` and `tl0_pic_idx` into `prefix` (the descriptor's bytes, as
    /// read), in the widths the descriptor has.
    pub fn rewrite(&self, prefix: &mut [u8], picture_id: u16, tl0_pic_idx: u8) {
        if let Some((_, at, wide)) = self.picture_id {
            if wide {
                if let Some(b) = prefix.get_mut(at..at + 2) {
                    b[0] = 0x80 | ((picture_id >> 8) as u8 & 0x7f);
                    b[1] = picture_id as u8;
                }
            } else if let Some(b) = prefix.get_mut(at) {
                *b = picture_id as u8 & 0x7f;
            }
        }
        if let Some((_, at)) = self.tl0_pic_idx
            && let Some(b) = prefix.get_mut(at)
        {
            *b = tl0_pic_idx;
        }
    }
}

/// The picture size a VP8 key frame's first packet gives (after its payload
/// descriptor): RFC 6386 §9.1, the 3-byte frame tag, the start code `9d 01 2a`, then
/// the width and height as 14-bit little-endian values (their top two bits scale).
pub fn vp8_keyframe_size(payload: &[u8], descriptor_len: usize) -> Option<(u16, u16)> {
    let frame = payload.get(descriptor_len..)?;
    // The frame tag's low bit: 0 for a key frame.
    if frame.first()? & 0x01 != 0 || frame.get(3..6)? != [0x9d, 0x01, 0x2a] {
        return None;
    }
    let b = frame.get(6..10)?;
    let width = u16::from_le_bytes([b[0], b[1]]) & 0x3fff;
    let height = u16::from_le_bytes([b[2], b[3]]) & 0x3fff;
    (width > 0 && height > 0).then_some((width, height))
}

/// The picture size an H.264 packet's sequence parameter set gives, alone or in a
/// STAP-A: `(pic_width_in_mbs_minus1 + 1) × 16` by `(2 − frame_mbs_only_flag) ×
/// (pic_height_in_map_units_minus1 + 1) × 16` (H.264 §7.3.2.1.1, §7.4.2.1.1), before
/// cropping. `None` for a packet without one, or an SPS this reader does not follow
/// (scaling matrices).
pub fn h264_sps_size(payload: &[u8]) -> Option<(u16, u16)> {
    let first = *payload.first()?;
    match first & 0x1f {
        NAL_SPS => sps_size(payload.get(1..)?),
        NAL_STAP_A => {
            let mut rest = &payload[1..];
            while rest.len() > 2 {
                let size = usize::from(u16::from_be_bytes([rest[0], rest[1]]));
                let nal = rest.get(2..2 + size)?;
                if nal.first().is_some_and(|h| h & 0x1f == NAL_SPS) {
                    return sps_size(nal.get(1..)?);
                }
                rest = &rest[2 + size..];
            }
            None
        }
        _ => None,
    }
}

/// Reads an SPS's RBSP (its emulation prevention bytes removed as read) up to the
/// picture size.
fn sps_size(sps: &[u8]) -> Option<(u16, u16)> {
    let mut r = BitReader::new(sps);
    let profile = r.bits(8)?;
    r.bits(16)?; // constraint flags, level
    r.ue()?; // seq_parameter_set_id
    if matches!(
        profile,
        100 | 110 | 122 | 244 | 44 | 83 | 86 | 118 | 128 | 138 | 139 | 134 | 135
    ) {
        if r.ue()? == 3 {
            r.bits(1)?; // separate_colour_plane_flag
        }
        r.ue()?; // bit_depth_luma_minus8
        r.ue()?; // bit_depth_chroma_minus8
        r.bits(1)?; // qpprime_y_zero_transform_bypass_flag
        if r.bits(1)? != 0 {
            return None; // seq_scaling_matrix_present_flag: lists not followed
        }
    }
    r.ue()?; // log2_max_frame_num_minus4
    match r.ue()? {
        0 => {
            r.ue()?; // log2_max_pic_order_cnt_lsb_minus4
        }
        1 => {
            r.bits(1)?; // delta_pic_order_always_zero_flag
            r.se()?; // offset_for_non_ref_pic
            r.se()?; // offset_for_top_to_bottom_field
            let cycle = r.ue()?;
            if cycle > 255 {
                return None;
            }
            for _ in 0..cycle {
                r.se()?;
            }
        }
        _ => {}
    }
    r.ue()?; // max_num_ref_frames
    r.bits(1)?; // gaps_in_frame_num_value_allowed_flag
    let width_mbs = r.ue()? + 1;
    let height_units = r.ue()? + 1;
    let frame_mbs_only = r.bits(1)?;
    let width = width_mbs.checked_mul(16)?;
    let height = height_units.checked_mul(16 * (2 - frame_mbs_only))?;
    Some((u16::try_from(width).ok()?, u16::try_from(height).ok()?))
}

/// Bits of an H.264 RBSP, most significant first, skipping emulation prevention
/// bytes (a `03` after `00 00`, H.264 §7.4.1).
struct BitReader<'a> {
    data: &'a [u8],
    byte: usize,
    bit: u8,
    zeros: u8,
}

impl<'a> BitReader<'a> {
    fn new(data: &'a [u8]) -> Self {
        Self {
            data,
            byte: 0,
            bit: 0,
            zeros: 0,
        }
    }

    fn bit(&mut self) -> Option<u32> {
        if self.bit == 0 {
            // Entering a new byte: drop it if it prevents emulation.
            let b = *self.data.get(self.byte)?;
            if self.zeros >= 2 && b == 0x03 {
                self.byte += 1;
                self.zeros = 0;
            }
            let b = *self.data.get(self.byte)?;
            self.zeros = if b == 0 { self.zeros + 1 } else { 0 };
        }
        let b = *self.data.get(self.byte)?;
        let v = (b >> (7 - self.bit)) & 1;
        self.bit += 1;
        if self.bit == 8 {
            self.bit = 0;
            self.byte += 1;
        }
        Some(u32::from(v))
    }

    fn bits(&mut self, n: u32) -> Option<u32> {
        (0..n).try_fold(0u32, |acc, _| Some(acc << 1 | self.bit()?))
    }

    /// Exp-Golomb ue(v) (H.264 §9.1), up to 31 leading zeros.
    fn ue(&mut self) -> Option<u32> {
        let mut zeros = 0;
        while self.bit()? == 0 {
            zeros += 1;
            if zeros > 31 {
                return None;
            }
        }
        Some((1u32 << zeros) - 1 + self.bits(zeros)?)
    }

    /// se(v) (H.264 §9.1.1).
    fn se(&mut self) -> Option<i32> {
        let k = self.ue()?;
        let magnitude = k.div_ceil(2) as i32;
        Some(if k % 2 == 1 { magnitude } else { -magnitude })
    }
}

/// The NAL unit types RFC 6184 §5.3 and §5.4 name that mark a keyframe's start or
/// carry other NAL units.
const NAL_IDR: u8 = 5;
const NAL_SPS: u8 = 7;
const NAL_STAP_A: u8 = 24;
const NAL_FU_A: u8 = 28;

/// Whether an H.264 payload starts a keyframe: an SPS or an IDR slice's start, alone,
/// aggregated or fragmented.
pub fn h264_keyframe_start(payload: &[u8]) -> bool {
    let Some(&first) = payload.first() else {
        return false;
    };
    match first & 0x1f {
        NAL_IDR | NAL_SPS => true,
        NAL_STAP_A => {
            // §5.7.1: 16-bit sizes, each followed by a NAL unit.
            let mut rest = &payload[1..];
            while rest.len() > 2 {
                let size = usize::from(u16::from_be_bytes([rest[0], rest[1]]));
                let Some(nal) = rest.get(2..2 + size) else {
                    return false;
                };
                if nal
                    .first()
                    .is_some_and(|h| matches!(h & 0x1f, NAL_IDR | NAL_SPS))
                {
                    return true;
                }
                rest = &rest[2 + size..];
            }
            false
        }
        // §5.8: the FU header's S bit and the fragmented unit's type.
        NAL_FU_A => payload
            .get(1)
            .is_some_and(|fu| fu & 0x80 != 0 && fu & 0x1f == NAL_IDR),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vp8_descriptors_read_and_rewrite() {
        // X, S, PID 0; I L T; 15-bit PictureID 0x1234; TL0PICIDX 9; TID 2; then a key
        // frame's payload header (P clear).
        let mut p = [0x90, 0xe0, 0x92, 0x34, 9, 0x80, 0x10, 0, 0];
        let d = Vp8Descriptor::parse(&p).unwrap();
        assert_eq!(d.picture_id, Some((0x1234, 2, true)));
        assert_eq!(d.tl0_pic_idx, Some((9, 4)));
        assert_eq!(d.temporal_id, Some(2));
        assert_eq!(d.len, 6);
        assert!(d.keyframe_start);
        d.rewrite(&mut p, 0x7fff, 200);
        assert_eq!(&p[..6], &[0x90, 0xe0, 0xff, 0xff, 200, 0x80]);
        // An interframe (P set), a 7-bit PictureID, not a partition start.
        let p = [0x90, 0x80, 0x05, 0x01];
        let d = Vp8Descriptor::parse(&p).unwrap();
        assert_eq!(d.picture_id, Some((5, 2, false)));
        assert!(!d.keyframe_start);
        let p = [0x80, 0x80, 0x05, 0x00];
        assert!(!Vp8Descriptor::parse(&p).unwrap().keyframe_start, "S clear");
        // Cut short anywhere: no descriptor.
        for n in 0..4 {
            assert!(Vp8Descriptor::parse(&[0x90, 0xe0, 0x92, 0x34][..n]).is_none());
        }
    }

    #[test]
    fn picture_sizes_from_key_frames_and_sequence_parameter_sets() {
        // A VP8 key frame of 320 × 180 after a 4-byte descriptor.
        let mut p = vec![0x90, 0x80, 0x05, 0x00];
        p.extend_from_slice(&[0x50, 0x42, 0x00, 0x9d, 0x01, 0x2a, 0x40, 0x01, 0xb4, 0x00]);
        assert_eq!(vp8_keyframe_size(&p, 4), Some((320, 180)));
        p[4] |= 1;
        assert_eq!(vp8_keyframe_size(&p, 4), None, "an interframe");
        assert_eq!(vp8_keyframe_size(&p[..8], 4), None, "cut short");
        // Constrained Baseline SPS for 320 × 192 (20 × 12 macroblocks), as libwebrtc's
        // OpenH264 writes for 320 × 180 (cropped to 180): profile 66, level 3.1.
        let sps = [0x67, 0x42, 0xc0, 0x1f, 0xda, 0x05, 0x06, 0x64];
        assert_eq!(h264_sps_size(&sps), Some((320, 192)));
        // In a STAP-A, after nothing else.
        let mut stap = vec![0x78, 0x00, sps.len() as u8];
        stap.extend_from_slice(&sps);
        assert_eq!(h264_sps_size(&stap), Some((320, 192)));
        assert_eq!(h264_sps_size(&[0x65, 0x88]), None, "an IDR slice");
        assert_eq!(h264_sps_size(&sps[..5]), None, "cut short");
    }

    #[test]
    fn h264_keyframes_alone_aggregated_and_fragmented() {
        assert!(h264_keyframe_start(&[0x67, 1, 2]), "SPS");
        assert!(h264_keyframe_start(&[0x65, 1]), "IDR");
        assert!(!h264_keyframe_start(&[0x41, 1]), "non-IDR slice");
        // STAP-A with an SPS then a PPS.
        assert!(h264_keyframe_start(&[0x78, 0, 2, 0x67, 1, 0, 2, 0x68, 1]));
        assert!(!h264_keyframe_start(&[0x78, 0, 2, 0x68, 1]));
        assert!(!h264_keyframe_start(&[0x78, 0, 9, 0x67]), "cut short");
        // FU-A: the start of an IDR, its middle, a non-IDR start.
        assert!(h264_keyframe_start(&[0x7c, 0x85, 1]));
        assert!(!h264_keyframe_start(&[0x7c, 0x05, 1]));
        assert!(!h264_keyframe_start(&[0x7c, 0x81, 1]));
        assert!(!h264_keyframe_start(&[]));
    }
}
