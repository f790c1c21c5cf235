//! Sender and receiver reports (RFC 3550 §6.4.1, §6.4.2) and their report blocks.

use bytes::{BufMut, Bytes, BytesMut};

use super::error::RtcpError;
use super::{ItemList, WireItem, WireList, WriteRtcp, be32, count5, packet_type};

/// A report block is 24 bytes (RFC 3550 §6.4.1).
pub const REPORT_BLOCK_LEN: usize = 24;
/// SR's sender SSRC and sender info: 4 + 20 bytes.
const SR_FIXED_LEN: usize = 24;
/// RR's sender SSRC.
const RR_FIXED_LEN: usize = 4;

/// One reception report block (RFC 3550 §6.4.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct ReportBlock {
    /// SSRC_n, the source this block reports on.
    pub ssrc: u32,
    /// Fraction lost since the last report, in 1/256.
    pub fraction_lost: u8,
    /// Cumulative number of packets lost, a 24-bit signed value (duplicates can make it
    /// negative). The writer clamps it to 24 bits.
    pub cumulative_lost: i32,
    /// Extended highest sequence number received (cycles in the top 16 bits).
    pub extended_highest_seq: u32,
    /// Interarrival jitter, in RTP timestamp units.
    pub jitter: u32,
    /// LSR: the middle 32 bits of the last SR's NTP timestamp, 0 if none.
    pub last_sr: u32,
    /// DLSR: delay since that SR, in 1/65536 s.
    pub delay_since_last_sr: u32,
}

impl WireItem for ReportBlock {
    const LEN: usize = REPORT_BLOCK_LEN;

    /// Reads a block from 24 bytes; the caller has checked the length.
    fn read(b: &[u8]) -> ReportBlock {
        // Sign-extend the 24-bit cumulative count.
        let lost = i32::from_be_bytes([b[5], b[6], b[7], 0]) >> 8;
        ReportBlock {
            ssrc: be32(b, 0),
            fraction_lost: b[4],
            cumulative_lost: lost,
            extended_highest_seq: be32(b, 8),
            jitter: be32(b, 12),
            last_sr: be32(b, 16),
            delay_since_last_sr: be32(b, 20),
        }
    }

    /// Appends the 24 bytes.
    fn write(&self, out: &mut BytesMut) {
        let lost = self.cumulative_lost.clamp(-0x80_0000, 0x7F_FFFF);
        let [_, a, b, c] = lost.to_be_bytes();
        out.put_u32(self.ssrc);
        out.put_slice(&[self.fraction_lost, a, b, c]);
        out.put_u32(self.extended_highest_seq);
        out.put_u32(self.jitter);
        out.put_u32(self.last_sr);
        out.put_u32(self.delay_since_last_sr);
    }
}

/// The report blocks of a received SR or RR.
pub type ReportBlocks = WireList<ReportBlock>;

/// Splits RC report blocks off the front of `rest`; what follows is the profile-specific
/// extension. RC is 5 bits, so at most 31 blocks (RFC 3550 §6.4.1).
fn split_blocks(pt: u8, rc: u8, rest: Bytes) -> Result<(ReportBlocks, Bytes), RtcpError> {
    let len = REPORT_BLOCK_LEN * usize::from(rc);
    if len > rest.len() {
        return Err(RtcpError::CountMismatch { pt, count: rc });
    }
    let mut blocks = rest;
    let extension = blocks.split_off(len);
    Ok((WireList::new(blocks), extension))
}

/// A sender report (RFC 3550 §6.4.1). `B` is the report blocks: [`ReportBlocks`] as
/// parsed, `&[ReportBlock]` to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SenderReport<B = ReportBlocks> {
    /// SSRC of the sender.
    pub ssrc: u32,
    /// NTP timestamp of this report, 32.32 fixed point seconds since 1900.
    pub ntp_time: u64,
    /// The RTP timestamp of the same instant.
    pub rtp_time: u32,
    /// Packets sent since the start of transmission.
    pub packet_count: u32,
    /// Payload octets sent since the start of transmission.
    pub octet_count: u32,
    /// Report blocks, at most 31.
    pub reports: B,
    /// Profile-specific extension after the report blocks, kept opaque; usually empty.
    pub extension: Bytes,
}

impl SenderReport {
    /// RFC 3550 §6.4.1: sender info, RC report blocks, then any profile extension.
    pub(crate) fn parse(rc: u8, body: Bytes) -> Result<SenderReport, RtcpError> {
        let pt = packet_type::SR;
        let fixed = body.get(..SR_FIXED_LEN).ok_or(RtcpError::TooShort { pt })?;
        let ntp_time = u64::from(be32(fixed, 4)) << 32 | u64::from(be32(fixed, 8));
        let (ssrc, rtp_time) = (be32(fixed, 0), be32(fixed, 12));
        let (packet_count, octet_count) = (be32(fixed, 16), be32(fixed, 20));
        let (reports, extension) = split_blocks(pt, rc, body.slice(SR_FIXED_LEN..))?;
        Ok(SenderReport {
            ssrc,
            ntp_time,
            rtp_time,
            packet_count,
            octet_count,
            reports,
            extension,
        })
    }
}

impl<B: ItemList> WriteRtcp for SenderReport<B> {
    fn packet_type(&self) -> u8 {
        packet_type::SR
    }

    fn count(&self) -> u8 {
        count5(self.reports.count())
    }

    fn body_len(&self) -> usize {
        SR_FIXED_LEN + self.reports.byte_len() + self.extension.len()
    }

    fn write_body(&self, out: &mut BytesMut) {
        out.put_u32(self.ssrc);
        out.put_u64(self.ntp_time);
        out.put_u32(self.rtp_time);
        out.put_u32(self.packet_count);
        out.put_u32(self.octet_count);
        self.reports.write_to(out);
        out.put_slice(&self.extension);
    }
}

/// A receiver report (RFC 3550 §6.4.2). `B` is the report blocks: [`ReportBlocks`] as
/// parsed, `&[ReportBlock]` to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReceiverReport<B = ReportBlocks> {
    /// SSRC of the packet's sender.
    pub ssrc: u32,
    /// Report blocks, at most 31.
    pub reports: B,
    /// Profile-specific extension after the report blocks, kept opaque; usually empty.
    pub extension: Bytes,
}

impl ReceiverReport {
    /// RFC 3550 §6.4.2: the sender's SSRC, RC report blocks, then any profile extension.
    pub(crate) fn parse(rc: u8, body: Bytes) -> Result<ReceiverReport, RtcpError> {
        let pt = packet_type::RR;
        let fixed = body.get(..RR_FIXED_LEN).ok_or(RtcpError::TooShort { pt })?;
        let ssrc = be32(fixed, 0);
        let (reports, extension) = split_blocks(pt, rc, body.slice(RR_FIXED_LEN..))?;
        Ok(ReceiverReport {
            ssrc,
            reports,
            extension,
        })
    }
}

impl<B: ItemList> WriteRtcp for ReceiverReport<B> {
    fn packet_type(&self) -> u8 {
        packet_type::RR
    }

    fn count(&self) -> u8 {
        count5(self.reports.count())
    }

    fn body_len(&self) -> usize {
        RR_FIXED_LEN + self.reports.byte_len() + self.extension.len()
    }

    fn write_body(&self, out: &mut BytesMut) {
        out.put_u32(self.ssrc);
        self.reports.write_to(out);
        out.put_slice(&self.extension);
    }
}
