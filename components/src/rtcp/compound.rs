//! One RTCP datagram: packets back to back (RFC 3550 §6.1), each with the common header
//! of §6.4.1, walked by [`Compound`] into [`RtcpPacket`]s.

use bytes::{Bytes, BytesMut};

use super::error::RtcpError;
use super::feedback::REMB_ID;
use super::{
    App, Bye, Fir, HEADER_LEN, MAX_PACKETS_PER_COMPOUND, Nack, Pli, RTCP_VERSION, ReceiverReport,
    Remb, Sdes, SenderReport, TransportCc, WriteRtcp, be16, fmt, packet_type, write_packet,
};

/// The parsed body of one RTCP packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RtcpBody {
    /// SR (RFC 3550 §6.4.1).
    SenderReport(SenderReport),
    /// RR (RFC 3550 §6.4.2).
    ReceiverReport(ReceiverReport),
    /// SDES (RFC 3550 §6.5).
    Sdes(Sdes),
    /// BYE (RFC 3550 §6.6).
    Bye(Bye),
    /// APP (RFC 3550 §6.7).
    App(App),
    /// RTPFB generic NACK (RFC 4585 §6.2.1).
    Nack(Nack),
    /// RTPFB transport-wide congestion control feedback (transport-cc draft §3.1).
    TransportCc(TransportCc),
    /// PSFB picture loss indication (RFC 4585 §6.3.1).
    Pli(Pli),
    /// PSFB full intra request (RFC 5104 §4.3.1).
    Fir(Fir),
    /// PSFB application layer feedback carrying REMB (draft-alvestrand-rmcat-remb-03).
    Remb(Remb),
    /// Any other packet type or feedback message type (XR of RFC 3611 among them),
    /// kept opaque.
    Other {
        /// The packet type.
        pt: u8,
        /// The 5-bit field after P (count, FMT or subtype).
        count: u8,
        /// Everything after the 4-byte header, without RTCP padding.
        body: Bytes,
    },
}

impl RtcpBody {
    /// Parses a body by its packet type and 5-bit count/FMT field.
    fn parse(pt: u8, count: u8, body: Bytes) -> Result<RtcpBody, RtcpError> {
        use packet_type as t;
        Ok(match (pt, count) {
            (t::SR, rc) => RtcpBody::SenderReport(SenderReport::parse(rc, body)?),
            (t::RR, rc) => RtcpBody::ReceiverReport(ReceiverReport::parse(rc, body)?),
            (t::SDES, sc) => RtcpBody::Sdes(Sdes::parse(sc, body)?),
            (t::BYE, sc) => RtcpBody::Bye(Bye::parse(sc, body)?),
            (t::APP, subtype) => RtcpBody::App(App::parse(subtype, body)?),
            (t::RTPFB, fmt::NACK) => RtcpBody::Nack(Nack::parse(body)?),
            (t::RTPFB, fmt::TRANSPORT_CC) => RtcpBody::TransportCc(TransportCc::parse(body)?),
            (t::PSFB, fmt::PLI) => RtcpBody::Pli(Pli::parse(body)?),
            (t::PSFB, fmt::FIR) => RtcpBody::Fir(Fir::parse(body)?),
            // Application layer feedback (RFC 4585 §6.4) is REMB when its FCI starts
            // with the identifier 'REMB' (REMB §2.2); other AFB stays opaque.
            (t::PSFB, fmt::AFB) if body.get(8..12) == Some(&REMB_ID[..]) => {
                RtcpBody::Remb(Remb::parse(body)?)
            }
            _ => RtcpBody::Other { pt, count, body },
        })
    }

    /// The body as a writer; `None` for [`RtcpBody::Other`], which writes itself.
    fn as_write(&self) -> Option<&dyn WriteRtcp> {
        Some(match self {
            RtcpBody::SenderReport(p) => p,
            RtcpBody::ReceiverReport(p) => p,
            RtcpBody::Sdes(p) => p,
            RtcpBody::Bye(p) => p,
            RtcpBody::App(p) => p,
            RtcpBody::Nack(p) => p,
            RtcpBody::TransportCc(p) => p,
            RtcpBody::Pli(p) => p,
            RtcpBody::Fir(p) => p,
            RtcpBody::Remb(p) => p,
            RtcpBody::Other { .. } => return None,
        })
    }
}

impl WriteRtcp for RtcpBody {
    fn packet_type(&self) -> u8 {
        match (self, self.as_write()) {
            (_, Some(p)) => p.packet_type(),
            (RtcpBody::Other { pt, .. }, None) => *pt,
            (_, None) => 0,
        }
    }

    fn count(&self) -> u8 {
        match (self, self.as_write()) {
            (_, Some(p)) => p.count(),
            (RtcpBody::Other { count, .. }, None) => *count,
            (_, None) => 0,
        }
    }

    fn body_len(&self) -> usize {
        match (self, self.as_write()) {
            (_, Some(p)) => p.body_len(),
            (RtcpBody::Other { body, .. }, None) => body.len(),
            (_, None) => 0,
        }
    }

    fn write_body(&self, out: &mut BytesMut) {
        match (self, self.as_write()) {
            (_, Some(p)) => p.write_body(out),
            (RtcpBody::Other { body, .. }, None) => out.extend_from_slice(body),
            (_, None) => {}
        }
    }
}

/// One packet of a compound: its parsed body and its RTCP padding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RtcpPacket {
    /// The packet, parsed by type.
    pub body: RtcpBody,
    /// The RTCP padding as received (P set; the count is its last octet), or empty.
    pub padding: Bytes,
}

impl RtcpPacket {
    /// The packet's length on the wire.
    pub fn encoded_len(&self) -> usize {
        if self.padding.is_empty() {
            self.body.encoded_len()
        } else {
            HEADER_LEN + self.body.body_len() + self.padding.len()
        }
    }

    /// Appends the packet as it was received: header, body, padding.
    pub fn write_to(&self, out: &mut BytesMut) {
        write_packet(&self.body, &self.padding, out);
    }
}

/// Walks the packets of one RTCP datagram (compound, or a lone reduced-size packet per
/// RFC 5506), yielding each parsed packet or the first error, after which it stops.
/// Allocates nothing: each packet keeps slices of the one [`Bytes`].
#[derive(Clone, Debug)]
pub struct Compound {
    raw: Bytes,
    at: usize,
    count: usize,
    done: bool,
}

impl Compound {
    /// Iterates the packets of `datagram`. An empty datagram yields one
    /// [`RtcpError::Truncated`].
    pub fn new(datagram: Bytes) -> Compound {
        Compound {
            raw: datagram,
            at: 0,
            count: 0,
            done: false,
        }
    }

    /// Parses every packet, or returns the first error: a compound is used whole or not
    /// at all (RFC 3550 Appendix A.2 checks the whole compound before use).
    pub fn validate(datagram: &Bytes) -> Result<usize, RtcpError> {
        Compound::new(datagram.clone()).try_fold(0, |n, p| p.map(|_| n + 1))
    }

    fn next_packet(&mut self) -> Result<RtcpPacket, RtcpError> {
        let rest = self.raw.len() - self.at;
        let head = self
            .raw
            .get(self.at..self.at + HEADER_LEN)
            .ok_or(RtcpError::Truncated { len: rest })?;
        let version = head[0] >> 6;
        if version != RTCP_VERSION {
            return Err(RtcpError::BadVersion { version });
        }
        let (has_padding, count, pt) = (head[0] & 0x20 != 0, head[0] & 0x1F, head[1]);
        let length_words = be16(head, 2);
        // RFC 3550 §6.4.1: the length is in 32-bit words minus one, header and padding
        // included.
        let end = self.at + 4 * (usize::from(length_words) + 1);
        if end > self.raw.len() {
            return Err(RtcpError::LengthPastEnd { pt, length_words });
        }
        self.count += 1;
        if self.count > MAX_PACKETS_PER_COMPOUND {
            return Err(RtcpError::TooManyPackets);
        }
        let mut body = self.raw.slice(self.at + HEADER_LEN..end);
        self.at = end;
        let padding = if has_padding {
            let count = body.last().copied().unwrap_or(0);
            if count == 0 || usize::from(count) > body.len() {
                return Err(RtcpError::BadPadding { pt, count });
            }
            body.split_off(body.len() - usize::from(count))
        } else {
            Bytes::new()
        };
        Ok(RtcpPacket {
            body: RtcpBody::parse(pt, count, body)?,
            padding,
        })
    }
}

impl Iterator for Compound {
    type Item = Result<RtcpPacket, RtcpError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done || (self.at >= self.raw.len() && self.at > 0) {
            return None;
        }
        let item = self.next_packet();
        self.done = item.is_err();
        Some(item)
    }
}
