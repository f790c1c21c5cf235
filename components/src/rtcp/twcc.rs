//! Transport-wide congestion control feedback
//! (draft-holmer-rmcat-transport-wide-cc-extensions-01 §3.1): RTPFB FMT 15, reporting
//! for a run of transport-wide sequence numbers whether each packet arrived and, for
//! those that did, the receive time as a delta from the previous one.

use bytes::{BufMut, Bytes, BytesMut};

use super::error::RtcpError;
use super::feedback::split_fb;
use super::{MAX_TWCC_STATUS_COUNT, WriteRtcp, be16, fmt, packet_type};

/// Base sequence number, status count, reference time and feedback packet count.
const FIXED_LEN: usize = 8;
/// A receive delta is counted in 250 µs (§3.1.5).
pub const DELTA_TICK_US: i64 = 250;
/// The reference time is counted in 64 ms (§3.1).
pub const REFERENCE_TICK_US: i64 = 64_000;

/// A packet status symbol (§3.1.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Symbol {
    /// 00: packet not received.
    NotReceived,
    /// 01: received, with a one-byte unsigned delta.
    SmallDelta,
    /// 10: received, with a two-byte signed delta.
    LargeDelta,
    /// 11: reserved by §3.1.1. The draft's own run length example 2 (§3.1.3) reads it
    /// as "packet received, w/o recv delta"; so does this parser: received, no delta.
    Reserved,
}

impl Symbol {
    /// The symbol of two bits.
    pub const fn from_bits(bits: u16) -> Symbol {
        match bits & 0b11 {
            0 => Symbol::NotReceived,
            1 => Symbol::SmallDelta,
            2 => Symbol::LargeDelta,
            _ => Symbol::Reserved,
        }
    }

    /// The two bits of the symbol.
    pub const fn bits(self) -> u16 {
        match self {
            Symbol::NotReceived => 0,
            Symbol::SmallDelta => 1,
            Symbol::LargeDelta => 2,
            Symbol::Reserved => 3,
        }
    }

    /// Bytes of receive delta this symbol adds (§3.1.5).
    pub const fn delta_len(self) -> usize {
        match self {
            Symbol::SmallDelta => 1,
            Symbol::LargeDelta => 2,
            Symbol::NotReceived | Symbol::Reserved => 0,
        }
    }
}

/// One packet status chunk (§3.1.2), 16 bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StatusChunk {
    /// §3.1.3: `run_length` (13 bits) packets with the same symbol.
    RunLength {
        /// The repeated symbol.
        symbol: Symbol,
        /// How many packets, at most 8191.
        run_length: u16,
    },
    /// §3.1.4 with symbol size 0: 14 one-bit symbols, first packet in the top bit. A set
    /// bit is a packet received with a small delta, a clear one a packet not received
    /// (as in the draft's example 1 of §3.1.4, and as libwebrtc reads them).
    OneBit {
        /// The 14 bits.
        bits: u16,
    },
    /// §3.1.4 with symbol size 1: 7 two-bit symbols, first packet in the top bits.
    TwoBit {
        /// The 14 bits.
        bits: u16,
    },
}

impl StatusChunk {
    /// The chunk of 16 bits on the wire.
    pub const fn from_u16(raw: u16) -> StatusChunk {
        if raw & 0x8000 == 0 {
            StatusChunk::RunLength {
                symbol: Symbol::from_bits(raw >> 13),
                run_length: raw & 0x1FFF,
            }
        } else if raw & 0x4000 == 0 {
            StatusChunk::OneBit { bits: raw & 0x3FFF }
        } else {
            StatusChunk::TwoBit { bits: raw & 0x3FFF }
        }
    }

    /// The 16 bits on the wire.
    pub const fn to_u16(self) -> u16 {
        match self {
            StatusChunk::RunLength { symbol, run_length } => {
                symbol.bits() << 13 | (run_length & 0x1FFF)
            }
            StatusChunk::OneBit { bits } => 0x8000 | (bits & 0x3FFF),
            StatusChunk::TwoBit { bits } => 0xC000 | (bits & 0x3FFF),
        }
    }

    /// How many packets the chunk describes.
    pub const fn len(self) -> usize {
        match self {
            StatusChunk::RunLength { run_length, .. } => run_length as usize,
            StatusChunk::OneBit { .. } => 14,
            StatusChunk::TwoBit { .. } => 7,
        }
    }

    /// True for a run of length 0.
    pub const fn is_empty(self) -> bool {
        self.len() == 0
    }

    /// The symbol of the `i`th packet of the chunk, `i < len()`.
    pub const fn symbol(self, i: usize) -> Symbol {
        match self {
            StatusChunk::RunLength { symbol, .. } => symbol,
            StatusChunk::OneBit { bits } => {
                if bits >> (13 - i) & 1 == 1 {
                    Symbol::SmallDelta
                } else {
                    Symbol::NotReceived
                }
            }
            StatusChunk::TwoBit { bits } => Symbol::from_bits(bits >> (12 - 2 * i)),
        }
    }
}

/// One receive delta (§3.1.5), in 250 µs ticks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RecvDelta {
    /// One unsigned byte: 0 to 63.75 ms.
    Small(u8),
    /// Two signed bytes: -8192 to 8191.75 ms.
    Large(i16),
}

impl RecvDelta {
    /// The delta in 250 µs ticks.
    pub fn ticks(self) -> i32 {
        match self {
            RecvDelta::Small(d) => i32::from(d),
            RecvDelta::Large(d) => i32::from(d),
        }
    }

    /// The delta in microseconds.
    pub fn micros(self) -> i64 {
        i64::from(self.ticks()) * DELTA_TICK_US
    }

    fn write_to(self, out: &mut BytesMut) {
        match self {
            RecvDelta::Small(d) => out.put_u8(d),
            RecvDelta::Large(d) => out.put_i16(d),
        }
    }
}

/// The feedback on one packet: its transport-wide sequence number, status symbol, and
/// receive delta when it has one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PacketFeedback {
    /// The transport-wide sequence number.
    pub seq: u16,
    /// The status symbol.
    pub symbol: Symbol,
    /// The receive delta, for [`Symbol::SmallDelta`] and [`Symbol::LargeDelta`].
    pub delta: Option<RecvDelta>,
}

/// The status chunks of a received feedback, checked when parsed.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct StatusChunks(Bytes);

impl StatusChunks {
    /// The chunks in packet order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = StatusChunk> + '_ {
        self.0
            .chunks_exact(2)
            .map(|w| StatusChunk::from_u16(be16(w, 0)))
    }
}

/// The receive deltas of a received feedback, raw; read them through
/// [`TransportCc::packets`], which knows each one's size.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct RecvDeltas(Bytes);

/// A list of status chunks: [`StatusChunks`] as parsed, `&[StatusChunk]` to send.
pub trait ChunkList {
    /// Their length in bytes.
    fn byte_len(&self) -> usize;
    /// Appends them.
    fn write_to(&self, out: &mut BytesMut);
}

/// A list of receive deltas: [`RecvDeltas`] as parsed, `&[RecvDelta]` to send.
pub trait DeltaList {
    /// Their length in bytes.
    fn byte_len(&self) -> usize;
    /// Appends them.
    fn write_to(&self, out: &mut BytesMut);
}

impl ChunkList for StatusChunks {
    fn byte_len(&self) -> usize {
        self.0.len()
    }

    fn write_to(&self, out: &mut BytesMut) {
        out.put_slice(&self.0);
    }
}

impl ChunkList for &[StatusChunk] {
    fn byte_len(&self) -> usize {
        2 * self.len()
    }

    fn write_to(&self, out: &mut BytesMut) {
        for c in self.iter() {
            out.put_u16(c.to_u16());
        }
    }
}

impl DeltaList for RecvDeltas {
    fn byte_len(&self) -> usize {
        self.0.len()
    }

    fn write_to(&self, out: &mut BytesMut) {
        out.put_slice(&self.0);
    }
}

impl DeltaList for &[RecvDelta] {
    fn byte_len(&self) -> usize {
        self.iter()
            .map(|d| match d {
                RecvDelta::Small(_) => 1,
                RecvDelta::Large(_) => 2,
            })
            .sum()
    }

    fn write_to(&self, out: &mut BytesMut) {
        for d in self.iter() {
            d.write_to(out);
        }
    }
}

/// A transport-wide congestion control feedback message (§3.1). `C` and `D` are the
/// status chunks and receive deltas: received views as parsed, `&[StatusChunk]` and
/// `&[RecvDelta]` to send. Written with the P bit when the deltas leave the body short
/// of 32 bits, as libwebrtc does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransportCc<C = StatusChunks, D = RecvDeltas> {
    /// SSRC of the packet's sender.
    pub sender_ssrc: u32,
    /// SSRC of a media source (the draft leaves which one open).
    pub media_ssrc: u32,
    /// The transport-wide sequence number of the first packet reported.
    pub base_seq: u16,
    /// How many packets are reported, from `base_seq` on.
    pub status_count: u16,
    /// Reference time, 24 bits signed, in 64 ms; see [`TransportCc::reference_time_us`].
    pub reference_time: u32,
    /// Feedback packet count, incremented per feedback sent.
    pub fb_pkt_count: u8,
    /// The status chunks.
    pub chunks: C,
    /// The receive deltas.
    pub deltas: D,
    /// Zero padding after the deltas inside the packet (the draft's figure shows it),
    /// at most 3 bytes; empty when the sender padded with the P bit instead.
    pub trailing: Bytes,
}

impl<C, D> TransportCc<C, D> {
    /// The reference time in microseconds: the 24-bit field read as signed, times 64 ms.
    pub fn reference_time_us(&self) -> i64 {
        let signed = ((self.reference_time << 8) as i32) >> 8;
        i64::from(signed) * REFERENCE_TICK_US
    }
}

impl TransportCc {
    /// §3.1: the fixed fields, status chunks until they cover the packet status count
    /// (the last chunk may describe more packets; the rest are not reported), one
    /// receive delta per received symbol, and at most 3 bytes of zero padding.
    pub(crate) fn parse(body: Bytes) -> Result<TransportCc, RtcpError> {
        let pt = packet_type::RTPFB;
        let (sender_ssrc, media_ssrc, fci) = split_fb(pt, &body)?;
        let fixed = fci.get(..FIXED_LEN).ok_or(RtcpError::TooShort { pt })?;
        let status_count = be16(fixed, 2);
        if status_count > MAX_TWCC_STATUS_COUNT {
            return Err(RtcpError::TwccTooManyStatuses {
                count: status_count,
            });
        }
        let bad = RtcpError::TwccInconsistent {
            count: status_count,
        };
        let (mut at, mut covered, mut delta_len) = (FIXED_LEN, 0usize, 0usize);
        while covered < usize::from(status_count) {
            let raw = fci.get(at..at + 2).ok_or(bad)?;
            let chunk = StatusChunk::from_u16(be16(raw, 0));
            let n = chunk.len().min(usize::from(status_count) - covered);
            delta_len += match chunk {
                StatusChunk::RunLength { symbol, .. } => n * symbol.delta_len(),
                _ => (0..n).map(|i| chunk.symbol(i).delta_len()).sum(),
            };
            covered += n;
            at += 2;
        }
        let deltas_end = at + delta_len;
        if deltas_end > fci.len() || fci.len() - deltas_end > 3 {
            return Err(bad);
        }
        Ok(TransportCc {
            sender_ssrc,
            media_ssrc,
            base_seq: be16(fixed, 0),
            status_count,
            reference_time: u32::from_be_bytes([0, fixed[4], fixed[5], fixed[6]]),
            fb_pkt_count: fixed[7],
            chunks: StatusChunks(fci.slice(FIXED_LEN..at)),
            deltas: RecvDeltas(fci.slice(at..deltas_end)),
            trailing: fci.slice(deltas_end..),
        })
    }

    /// The feedback on each of the `status_count` packets, in sequence order.
    pub fn packets(&self) -> impl Iterator<Item = PacketFeedback> + '_ {
        let symbols = self
            .chunks
            .iter()
            .flat_map(|c| (0..c.len()).map(move |i| c.symbol(i)))
            .take(usize::from(self.status_count));
        let deltas = &self.deltas.0[..];
        let mut at = 0;
        symbols.enumerate().map(move |(i, symbol)| {
            let delta = match symbol {
                Symbol::SmallDelta => deltas.get(at).map(|&d| RecvDelta::Small(d)),
                Symbol::LargeDelta => deltas
                    .get(at..at + 2)
                    .map(|w| RecvDelta::Large(i16::from_be_bytes([w[0], w[1]]))),
                Symbol::NotReceived | Symbol::Reserved => None,
            };
            at += symbol.delta_len();
            PacketFeedback {
                seq: self.base_seq.wrapping_add(i as u16),
                symbol,
                delta,
            }
        })
    }
}

impl<C: ChunkList, D: DeltaList> WriteRtcp for TransportCc<C, D> {
    fn packet_type(&self) -> u8 {
        packet_type::RTPFB
    }

    fn count(&self) -> u8 {
        fmt::TRANSPORT_CC
    }

    fn body_len(&self) -> usize {
        8 + FIXED_LEN + self.chunks.byte_len() + self.deltas.byte_len() + self.trailing.len()
    }

    fn write_body(&self, out: &mut BytesMut) {
        let [_, r0, r1, r2] = self.reference_time.to_be_bytes();
        out.put_u32(self.sender_ssrc);
        out.put_u32(self.media_ssrc);
        out.put_u16(self.base_seq);
        out.put_u16(self.status_count);
        out.put_slice(&[r0, r1, r2, self.fb_pkt_count]);
        self.chunks.write_to(out);
        self.deltas.write_to(out);
        out.put_slice(&self.trailing);
    }
}

/// What [`FeedbackEncoder::encode`] encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Encoded {
    /// The reference time field to send (24 bits, in 64 ms).
    pub reference_time: u32,
    /// How many packets, from the first, the chunks and deltas describe. Fewer than
    /// given when a delta did not fit 16 bits (§3.1.5: "a new feedback message must be
    /// used"), or past [`MAX_TWCC_STATUS_COUNT`]; the next feedback starts there.
    pub status_count: u16,
}

/// Encodes transport-cc feedback as a receiver sends it (§3.1), in buffers it keeps
/// and reuses: one encoder per shard serves every feedback it sends.
#[derive(Clone, Debug, Default)]
pub struct FeedbackEncoder {
    symbols: Vec<Symbol>,
    chunks: Vec<StatusChunk>,
    deltas: Vec<RecvDelta>,
}

impl FeedbackEncoder {
    /// Encodes a run of consecutive transport-wide sequence numbers: `arrivals_us[i]` is
    /// when packet `base_seq + i` arrived on the receiver's clock, `None` if it has not.
    /// The reference time is the first arrival rounded down to 64 ms; each delta counts
    /// from the previous arrival as encoded (whole 250 µs ticks), so rounding never
    /// accumulates. Runs of 7 or more equal symbols become run length chunks (§3.1.3),
    /// the rest status vectors (§3.1.4), one-bit when no large delta is among them.
    pub fn encode(&mut self, arrivals_us: &[Option<i64>]) -> Encoded {
        self.symbols.clear();
        self.chunks.clear();
        self.deltas.clear();
        let first = arrivals_us.iter().flatten().next().copied().unwrap_or(0);
        let reference = first.div_euclid(REFERENCE_TICK_US);
        let mut prev_us = reference * REFERENCE_TICK_US;
        let limit = arrivals_us.len().min(usize::from(MAX_TWCC_STATUS_COUNT));
        for arrival in &arrivals_us[..limit] {
            let symbol = match arrival {
                None => Symbol::NotReceived,
                Some(t) => {
                    let ticks = (t - prev_us).div_euclid(DELTA_TICK_US);
                    let (delta, symbol) = match (u8::try_from(ticks), i16::try_from(ticks)) {
                        (Ok(small), _) => (RecvDelta::Small(small), Symbol::SmallDelta),
                        (_, Ok(large)) => (RecvDelta::Large(large), Symbol::LargeDelta),
                        _ => break,
                    };
                    prev_us += ticks * DELTA_TICK_US;
                    self.deltas.push(delta);
                    symbol
                }
            };
            self.symbols.push(symbol);
        }
        chunk_symbols(&self.symbols, &mut self.chunks);
        Encoded {
            reference_time: (reference as u32) & 0x00FF_FFFF,
            status_count: self.symbols.len() as u16,
        }
    }

    /// The feedback message for what [`FeedbackEncoder::encode`] last encoded.
    pub fn feedback(
        &self,
        sender_ssrc: u32,
        media_ssrc: u32,
        base_seq: u16,
        fb_pkt_count: u8,
        encoded: Encoded,
    ) -> TransportCc<&[StatusChunk], &[RecvDelta]> {
        TransportCc {
            sender_ssrc,
            media_ssrc,
            base_seq,
            status_count: encoded.status_count,
            reference_time: encoded.reference_time,
            fb_pkt_count,
            chunks: &self.chunks,
            deltas: &self.deltas,
            trailing: Bytes::new(),
        }
    }
}

/// Packs symbols into chunks: a run of 7 or more becomes one run length chunk (up to
/// 8191), anything else the next 14 symbols as a one-bit vector when none is a large
/// delta, else the next 7 as a two-bit vector. A vector's unused tail is "not
/// received", beyond the status count.
fn chunk_symbols(symbols: &[Symbol], chunks: &mut Vec<StatusChunk>) {
    let mut at = 0;
    while at < symbols.len() {
        let first = symbols[at];
        let run = symbols[at..]
            .iter()
            .take(0x1FFF)
            .take_while(|&&s| s == first)
            .count();
        if run >= 7 {
            chunks.push(StatusChunk::RunLength {
                symbol: first,
                run_length: run as u16,
            });
            at += run;
            continue;
        }
        let next14 = &symbols[at..symbols.len().min(at + 14)];
        if next14
            .iter()
            .all(|s| matches!(s, Symbol::NotReceived | Symbol::SmallDelta))
        {
            let bits = next14.iter().enumerate().fold(0u16, |b, (i, s)| {
                b | u16::from(*s == Symbol::SmallDelta) << (13 - i)
            });
            chunks.push(StatusChunk::OneBit { bits });
            at += next14.len();
        } else {
            let next7 = &symbols[at..symbols.len().min(at + 7)];
            let bits = next7
                .iter()
                .enumerate()
                .fold(0u16, |b, (i, s)| b | s.bits() << (12 - 2 * i));
            chunks.push(StatusChunk::TwoBit { bits });
            at += next7.len();
        }
    }
}
