//! RTP (RFC 3550 §5): packets parsed in place, their RFC 8285 header extensions, the
//! extension values an SFU reads and rewrites, a writer, and the RFC 5761 §4 rule that
//! tells RTP from RTCP on a shared port.
//!
//! [`RtpHeader::parse`] checks a packet and records where its parts sit, allocating
//! nothing; [`RtpPacket`] reads through a shared borrow of the bytes, [`RtpPacketMut`]
//! rewrites the SSRC, sequence number, timestamp, marker, payload type and extension
//! values in place, which is all a forwarding SFU changes per subscriber. [`RtpWriter`]
//! appends a new packet to a caller-owned buffer.

mod error;
pub mod ext;
mod header;
pub mod payload;
mod writer;

pub use error::RtpError;
pub use ext::{
    AbsCaptureTime, AbsSendTime, AudioLevel, Extension, ExtensionForm, ExtensionWriter, Extensions,
};
pub use header::{FIXED_HEADER_LEN, RTP_VERSION, RtpHeader, RtpPacket, RtpPacketMut};
pub use writer::{RtpFields, RtpWriter};

use crate::net::PacketClass;

/// What a datagram in RFC 7983's RTP/RTCP range (first byte 128-191) carries when RTP
/// and RTCP share one port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RtpOrRtcp {
    /// An RTP packet.
    Rtp,
    /// An RTCP packet (compound or reduced-size).
    Rtcp,
}

impl RtpOrRtcp {
    /// RFC 5761 §4: with RTP and RTCP multiplexed, the second octet tells them apart.
    /// RTCP packet types 192-223 fall where an RTP header has M set and a payload type of
    /// 64-95, which RFC 5761 §4 forbids RTP to use; so those values mean RTCP, anything
    /// else RTP. The first byte must be in RFC 7983 §7's RTP/RTCP range
    /// ([`PacketClass::Rtp`]); `None` for other datagrams and for those shorter than
    /// two bytes.
    pub fn of(datagram: &[u8]) -> Option<RtpOrRtcp> {
        if PacketClass::of(datagram) != PacketClass::Rtp {
            return None;
        }
        match datagram.get(1)? {
            192..=223 => Some(RtpOrRtcp::Rtcp),
            _ => Some(RtpOrRtcp::Rtp),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc5761_second_byte() {
        assert_eq!(RtpOrRtcp::of(&[]), None);
        assert_eq!(RtpOrRtcp::of(&[0x80]), None);
        assert_eq!(RtpOrRtcp::of(&[0x00, 200]), None, "STUN range");
        assert_eq!(RtpOrRtcp::of(&[0x80, 0x60]), Some(RtpOrRtcp::Rtp));
        assert_eq!(
            RtpOrRtcp::of(&[0x80, 0xE0]),
            Some(RtpOrRtcp::Rtp),
            "M=1 PT=96"
        );
        assert_eq!(RtpOrRtcp::of(&[0x80, 191]), Some(RtpOrRtcp::Rtp));
        assert_eq!(RtpOrRtcp::of(&[0x81, 192]), Some(RtpOrRtcp::Rtcp));
        assert_eq!(RtpOrRtcp::of(&[0x81, 200]), Some(RtpOrRtcp::Rtcp), "SR");
        assert_eq!(RtpOrRtcp::of(&[0x8F, 205]), Some(RtpOrRtcp::Rtcp), "RTPFB");
        assert_eq!(RtpOrRtcp::of(&[0x80, 223]), Some(RtpOrRtcp::Rtcp));
        assert_eq!(RtpOrRtcp::of(&[0x80, 224]), Some(RtpOrRtcp::Rtp));
    }
}
