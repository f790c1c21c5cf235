//! Feedback messages (RFC 4585 §6.1: sender SSRC, media SSRC, FCI) that an SFU reads
//! and writes: generic NACK (§6.2.1), PLI (§6.3.1), FIR (RFC 5104 §4.3.1) and REMB
//! (draft-alvestrand-rmcat-remb-03 §2.2).

use bytes::{BufMut, Bytes, BytesMut};

use super::error::RtcpError;
use super::{
    ItemList, MAX_FCI_ENTRIES, Ssrcs, WireItem, WireList, WriteRtcp, be16, be32, fmt, packet_type,
};

/// Sender SSRC and media SSRC: 8 bytes (RFC 4585 §6.1).
pub(crate) const FB_FIXED_LEN: usize = 8;
/// A NACK FCI entry is 4 bytes (RFC 4585 §6.2.1).
const NACK_ENTRY_LEN: usize = 4;
/// A FIR FCI entry is 8 bytes (RFC 5104 §4.3.1.1).
const FIR_ENTRY_LEN: usize = 8;
/// REMB's FCI before its SSRC list: 'REMB', Num SSRC, BR Exp, BR Mantissa.
const REMB_FIXED_LEN: usize = 8;
/// REMB's unique identifier (draft-alvestrand-rmcat-remb-03 §2.2).
pub(crate) const REMB_ID: [u8; 4] = *b"REMB";

/// The two SSRCs of a feedback message, and its FCI.
pub(crate) fn split_fb(pt: u8, body: &Bytes) -> Result<(u32, u32, Bytes), RtcpError> {
    let fixed = body.get(..FB_FIXED_LEN).ok_or(RtcpError::TooShort { pt })?;
    Ok((be32(fixed, 0), be32(fixed, 4), body.slice(FB_FIXED_LEN..)))
}

/// A picture loss indication (RFC 4585 §6.3.1): no FCI.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Pli {
    /// SSRC of the packet's sender.
    pub sender_ssrc: u32,
    /// SSRC of the media source whose picture was lost.
    pub media_ssrc: u32,
}

impl Pli {
    /// RFC 4585 §6.3.1: "the length field MUST be 2, and there MUST NOT be any Feedback
    /// Control Information".
    pub(crate) fn parse(body: Bytes) -> Result<Pli, RtcpError> {
        let pt = packet_type::PSFB;
        let (sender_ssrc, media_ssrc, fci) = split_fb(pt, &body)?;
        if !fci.is_empty() {
            return Err(RtcpError::BadFci { pt, fmt: fmt::PLI });
        }
        Ok(Pli {
            sender_ssrc,
            media_ssrc,
        })
    }
}

impl WriteRtcp for Pli {
    fn packet_type(&self) -> u8 {
        packet_type::PSFB
    }

    fn count(&self) -> u8 {
        fmt::PLI
    }

    fn body_len(&self) -> usize {
        FB_FIXED_LEN
    }

    fn write_body(&self, out: &mut BytesMut) {
        out.put_u32(self.sender_ssrc);
        out.put_u32(self.media_ssrc);
    }
}

/// Checks that an FCI holds at least one and at most [`MAX_FCI_ENTRIES`] whole entries.
fn check_entries(pt: u8, fmt: u8, fci: &[u8], entry_len: usize) -> Result<(), RtcpError> {
    if fci.is_empty() || !fci.len().is_multiple_of(entry_len) {
        return Err(RtcpError::BadFci { pt, fmt });
    }
    if fci.len() / entry_len > MAX_FCI_ENTRIES {
        return Err(RtcpError::TooManyEntries { pt, fmt });
    }
    Ok(())
}

/// One generic NACK entry (RFC 4585 §6.2.1): packet `pid` is lost, and so is `pid + i +
/// 1` for every bit `i` set in `blp` (bit 0 the least significant).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct NackEntry {
    /// PID: the sequence number of a lost packet.
    pub pid: u16,
    /// BLP: bitmask of the following 16 packets that are lost too.
    pub blp: u16,
}

impl NackEntry {
    /// The lost sequence numbers this entry names, lowest first (wrapping at 2^16).
    pub fn lost(self) -> impl Iterator<Item = u16> {
        let rest = (0..16u16)
            .filter(move |i| self.blp & (1 << i) != 0)
            .map(move |i| self.pid.wrapping_add(i + 1));
        std::iter::once(self.pid).chain(rest)
    }
}

/// Packs lost sequence numbers into generic NACK entries (RFC 4585 §6.2.1): a number
/// within 16 after the current entry's PID sets a BLP bit, any other starts a new
/// entry. Fed in ascending order (modulo 2^16), as a receiver's loss list is, this gives
/// the fewest entries; any order still names every number given. Lazy: nothing is
/// allocated.
pub fn lost_to_nack_entries<I: IntoIterator<Item = u16>>(
    lost: I,
) -> impl Iterator<Item = NackEntry> {
    let mut lost = lost.into_iter().peekable();
    std::iter::from_fn(move || {
        let pid = lost.next()?;
        let mut blp = 0u16;
        while let Some(&seq) = lost.peek() {
            let offset = seq.wrapping_sub(pid);
            match offset {
                0 => {}
                1..=16 => blp |= 1 << (offset - 1),
                _ => break,
            }
            lost.next();
        }
        Some(NackEntry { pid, blp })
    })
}

impl WireItem for NackEntry {
    const LEN: usize = NACK_ENTRY_LEN;

    fn read(w: &[u8]) -> Self {
        NackEntry {
            pid: be16(w, 0),
            blp: be16(w, 2),
        }
    }

    fn write(&self, out: &mut BytesMut) {
        out.put_u16(self.pid);
        out.put_u16(self.blp);
    }
}

/// The entries of a received NACK.
pub type NackEntries = WireList<NackEntry>;

impl WireList<NackEntry> {
    /// Every lost sequence number the entries name, entry by entry. At most 17 per
    /// entry, so at most 17 × [`MAX_FCI_ENTRIES`].
    pub fn lost(&self) -> impl Iterator<Item = u16> + '_ {
        self.iter().flat_map(NackEntry::lost)
    }
}

/// A generic NACK (RFC 4585 §6.2.1). `E` is the entries: [`NackEntries`] as parsed,
/// `&[NackEntry]` to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Nack<E = NackEntries> {
    /// SSRC of the packet's sender.
    pub sender_ssrc: u32,
    /// SSRC of the media source whose packets were lost.
    pub media_ssrc: u32,
    /// The entries, at least one.
    pub entries: E,
}

impl Nack {
    /// RFC 4585 §6.2.1: "The FCI field MUST contain at least one and MAY contain more
    /// than one Generic NACK."
    pub(crate) fn parse(body: Bytes) -> Result<Nack, RtcpError> {
        let pt = packet_type::RTPFB;
        let (sender_ssrc, media_ssrc, fci) = split_fb(pt, &body)?;
        check_entries(pt, fmt::NACK, &fci, NACK_ENTRY_LEN)?;
        Ok(Nack {
            sender_ssrc,
            media_ssrc,
            entries: WireList::new(fci),
        })
    }
}

impl<E: ItemList> WriteRtcp for Nack<E> {
    fn packet_type(&self) -> u8 {
        packet_type::RTPFB
    }

    fn count(&self) -> u8 {
        fmt::NACK
    }

    fn body_len(&self) -> usize {
        FB_FIXED_LEN + self.entries.byte_len()
    }

    fn write_body(&self, out: &mut BytesMut) {
        out.put_u32(self.sender_ssrc);
        out.put_u32(self.media_ssrc);
        self.entries.write_to(out);
    }
}

/// One FIR entry (RFC 5104 §4.3.1.1): the SSRC asked for a decoder refresh point and
/// the command sequence number. The three reserved octets are written as 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FirEntry {
    /// SSRC of the media sender that is to send a decoder refresh point.
    pub ssrc: u32,
    /// Command sequence number, incremented per new request.
    pub seq_nr: u8,
}

impl WireItem for FirEntry {
    const LEN: usize = FIR_ENTRY_LEN;

    fn read(w: &[u8]) -> Self {
        FirEntry {
            ssrc: be32(w, 0),
            seq_nr: w[4],
        }
    }

    fn write(&self, out: &mut BytesMut) {
        out.put_u32(self.ssrc);
        out.put_u8(self.seq_nr);
        out.put_bytes(0, 3);
    }
}

/// The entries of a received FIR.
pub type FirEntries = WireList<FirEntry>;

/// A full intra request (RFC 5104 §4.3.1). `E` is the entries: [`FirEntries`] as
/// parsed, `&[FirEntry]` to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fir<E = FirEntries> {
    /// SSRC of the packet's sender.
    pub sender_ssrc: u32,
    /// Media source SSRC; FIR names its targets in the entries, so this is kept as
    /// received.
    pub media_ssrc: u32,
    /// The entries, at least one.
    pub entries: E,
}

impl Fir {
    /// RFC 5104 §4.3.1: one or more 8-byte FCI entries.
    pub(crate) fn parse(body: Bytes) -> Result<Fir, RtcpError> {
        let pt = packet_type::PSFB;
        let (sender_ssrc, media_ssrc, fci) = split_fb(pt, &body)?;
        check_entries(pt, fmt::FIR, &fci, FIR_ENTRY_LEN)?;
        Ok(Fir {
            sender_ssrc,
            media_ssrc,
            entries: WireList::new(fci),
        })
    }
}

impl<E: ItemList> WriteRtcp for Fir<E> {
    fn packet_type(&self) -> u8 {
        packet_type::PSFB
    }

    fn count(&self) -> u8 {
        fmt::FIR
    }

    fn body_len(&self) -> usize {
        FB_FIXED_LEN + self.entries.byte_len()
    }

    fn write_body(&self, out: &mut BytesMut) {
        out.put_u32(self.sender_ssrc);
        out.put_u32(self.media_ssrc);
        self.entries.write_to(out);
    }
}

/// A receiver estimated maximum bitrate message (draft-alvestrand-rmcat-remb-03 §2.2),
/// an application layer feedback message (PSFB, FMT 15). The bitrate is
/// `mantissa << exponent` bits per second. `S` is the SSRC list: [`Ssrcs`] as parsed,
/// `&[u32]` to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Remb<S = Ssrcs> {
    /// SSRC of the packet's sender.
    pub sender_ssrc: u32,
    /// Media source SSRC; REMB names its SSRCs in the list, so this is kept as received.
    pub media_ssrc: u32,
    /// BR Exp, 6 bits.
    pub exponent: u8,
    /// BR Mantissa, 18 bits.
    pub mantissa: u32,
    /// The SSRCs the estimate applies to, at most 255.
    pub ssrcs: S,
}

impl<S> Remb<S> {
    /// The estimate in bits per second (saturating at `u64::MAX`).
    pub fn bitrate_bps(&self) -> u64 {
        let m = u64::from(self.mantissa & 0x3_FFFF);
        m.checked_shl(u32::from(self.exponent & 0x3F))
            .filter(|v| v >> (self.exponent & 0x3F) == m)
            .unwrap_or(u64::MAX)
    }

    /// The exponent and mantissa for `bitrate_bps`, rounded down to what 18 bits of
    /// mantissa hold.
    pub fn encode_bitrate(bitrate_bps: u64) -> (u8, u32) {
        let exponent = (64 - bitrate_bps.leading_zeros()).saturating_sub(18);
        (exponent as u8, (bitrate_bps >> exponent) as u32)
    }
}

impl Remb {
    /// REMB §2.2: 'REMB', Num SSRC, BR Exp and Mantissa, then exactly Num SSRC SSRCs.
    /// The caller has checked the identifier.
    pub(crate) fn parse(body: Bytes) -> Result<Remb, RtcpError> {
        let pt = packet_type::PSFB;
        let bad = RtcpError::BadFci { pt, fmt: fmt::AFB };
        let (sender_ssrc, media_ssrc, fci) = split_fb(pt, &body)?;
        let fixed = fci.get(..REMB_FIXED_LEN).ok_or(bad)?;
        let num_ssrc = usize::from(fixed[4]);
        if fci.len() != REMB_FIXED_LEN + 4 * num_ssrc {
            return Err(bad);
        }
        Ok(Remb {
            sender_ssrc,
            media_ssrc,
            exponent: fixed[5] >> 2,
            mantissa: u32::from_be_bytes([0, fixed[5] & 0x03, fixed[6], fixed[7]]),
            ssrcs: WireList::new(fci.slice(REMB_FIXED_LEN..)),
        })
    }
}

impl<S: ItemList> WriteRtcp for Remb<S> {
    fn packet_type(&self) -> u8 {
        packet_type::PSFB
    }

    fn count(&self) -> u8 {
        fmt::AFB
    }

    fn body_len(&self) -> usize {
        FB_FIXED_LEN + REMB_FIXED_LEN + self.ssrcs.byte_len()
    }

    /// # Panics
    ///
    /// Only on a programmer error: more than 255 SSRCs.
    fn write_body(&self, out: &mut BytesMut) {
        let num = u8::try_from(self.ssrcs.count()).expect("at most 255 REMB SSRCs");
        let m = self.mantissa & 0x3_FFFF;
        out.put_u32(self.sender_ssrc);
        out.put_u32(self.media_ssrc);
        out.put_slice(&REMB_ID);
        out.put_u8(num);
        out.put_u8((self.exponent & 0x3F) << 2 | (m >> 16) as u8);
        out.put_u16(m as u16);
        self.ssrcs.write_to(out);
    }
}
