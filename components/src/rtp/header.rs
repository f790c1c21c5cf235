//! The RTP fixed header, CSRC list, header extension and padding (RFC 3550 §5.1,
//! §5.3.1): [`RtpHeader`] holds the fields and where each part sits, [`RtpPacket`]
//! borrows the bytes to read them, and [`RtpPacketMut`] rewrites in place what an SFU
//! changes per subscriber.

use std::ops::Range;

use super::error::RtpError;
use super::ext::{self, AbsCaptureTime, AbsSendTime, AudioLevel, ExtensionForm, Extensions};

/// The fixed header is 12 bytes (RFC 3550 §5.1).
pub const FIXED_HEADER_LEN: usize = 12;
/// RFC 3550 §5.1: "The version defined by this specification is two (2)."
pub const RTP_VERSION: u8 = 2;

/// Where the header extension block sits, and its form.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ExtBlock {
    form: ExtensionForm,
    /// Offset of the element data, after the 4-byte block header.
    data_at: usize,
    /// Length of the element data in bytes (the length field times 4).
    data_len: usize,
}

/// The parsed header of one RTP packet: its fields, and the offsets of the CSRC list,
/// the header extension, the payload and the padding. Plain data (`Copy`); the bytes
/// stay with the caller, see [`RtpPacket`] and [`RtpPacketMut`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RtpHeader {
    /// M: the marker bit, whose meaning the payload format defines.
    pub marker: bool,
    /// PT: the payload type, 7 bits.
    pub payload_type: u8,
    /// The sequence number.
    pub sequence_number: u16,
    /// The RTP timestamp.
    pub timestamp: u32,
    /// The synchronization source.
    pub ssrc: u32,
    csrc_count: u8,
    ext: Option<ExtBlock>,
    payload: (usize, usize),
    padding_len: u8,
}

impl RtpHeader {
    /// RFC 3550 §5.1 and the validity checks of Appendix A.1 that need no session state:
    /// version 2, the CSRC list and the header extension (§5.3.1) inside the packet,
    /// every RFC 8285 element inside its block, and a padding count (the last octet,
    /// when P is set) of at least 1 that reaches no further back than the end of the
    /// header. Allocates nothing.
    pub fn parse(buf: &[u8]) -> Result<RtpHeader, RtpError> {
        let len = buf.len();
        let fixed = buf
            .get(..FIXED_HEADER_LEN)
            .ok_or(RtpError::TooShort { len })?;
        let version = fixed[0] >> 6;
        if version != RTP_VERSION {
            return Err(RtpError::BadVersion { version });
        }
        let has_padding = fixed[0] & 0x20 != 0;
        let has_ext = fixed[0] & 0x10 != 0;
        let csrc_count = fixed[0] & 0x0F;
        let mut at = FIXED_HEADER_LEN + 4 * usize::from(csrc_count);
        if at > len {
            return Err(RtpError::CsrcOverrun { count: csrc_count });
        }
        let ext = if has_ext {
            let head = buf.get(at..at + 4).ok_or(RtpError::ExtensionOverrun)?;
            let form = ExtensionForm::from_profile(u16::from_be_bytes([head[0], head[1]]));
            let data_len = 4 * usize::from(u16::from_be_bytes([head[2], head[3]]));
            let data_at = at + 4;
            let data = buf
                .get(data_at..data_at + data_len)
                .ok_or(RtpError::ExtensionOverrun)?;
            ext::validate(data, form)?;
            at = data_at + data_len;
            Some(ExtBlock {
                form,
                data_at,
                data_len,
            })
        } else {
            None
        };
        let padding_len = if has_padding {
            // RFC 3550 §5.1: "The last octet of the padding contains a count of how many
            // padding octets should be ignored, including itself."
            let count = buf[len - 1];
            if count == 0 || usize::from(count) > len - at {
                return Err(RtpError::BadPadding { count });
            }
            count
        } else {
            0
        };
        Ok(RtpHeader {
            marker: fixed[1] & 0x80 != 0,
            payload_type: fixed[1] & 0x7F,
            sequence_number: u16::from_be_bytes([fixed[2], fixed[3]]),
            timestamp: u32::from_be_bytes([fixed[4], fixed[5], fixed[6], fixed[7]]),
            ssrc: u32::from_be_bytes([fixed[8], fixed[9], fixed[10], fixed[11]]),
            csrc_count,
            ext,
            payload: (at, len - usize::from(padding_len)),
            padding_len,
        })
    }

    /// The number of CSRCs (CC), 0 to 15.
    pub fn csrc_count(&self) -> u8 {
        self.csrc_count
    }

    /// The header's length: fixed header, CSRCs and header extension; where the payload
    /// starts.
    pub fn header_len(&self) -> usize {
        self.payload.0
    }

    /// Where the payload sits in the packet: after the header, before the padding.
    pub fn payload_range(&self) -> Range<usize> {
        self.payload.0..self.payload.1
    }

    /// The number of padding octets at the end, the count octet included; 0 without P.
    pub fn padding_len(&self) -> u8 {
        self.padding_len
    }

    /// The form of the header extension, if the packet has one (X set).
    pub fn extension_form(&self) -> Option<ExtensionForm> {
        self.ext.map(|e| e.form)
    }

    /// Where the header extension's data sits (after its 4-byte header), if any.
    pub fn extension_data_range(&self) -> Option<Range<usize>> {
        self.ext.map(|e| e.data_at..e.data_at + e.data_len)
    }

    /// The absolute position and length of the value of the first element with `id`.
    fn element(&self, buf: &[u8], id: u8) -> Option<Range<usize>> {
        let block = self.ext?;
        let data = buf.get(block.data_at..block.data_at + block.data_len)?;
        let e = ext::find(data, block.form, id)?;
        let at = block.data_at + e.at;
        Some(at..at + e.len)
    }
}

/// An RTP packet parsed in place: the header and the bytes it describes.
#[derive(Clone, Copy, Debug)]
pub struct RtpPacket<'a> {
    buf: &'a [u8],
    header: RtpHeader,
}

impl<'a> RtpPacket<'a> {
    /// Parses `buf` (see [`RtpHeader::parse`]) and keeps a borrow of it.
    pub fn parse(buf: &'a [u8]) -> Result<RtpPacket<'a>, RtpError> {
        Ok(RtpPacket {
            buf,
            header: RtpHeader::parse(buf)?,
        })
    }

    /// The parsed header.
    pub fn header(&self) -> &RtpHeader {
        &self.header
    }

    /// The whole packet.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.buf
    }

    /// The payload, without header and padding.
    pub fn payload(&self) -> &'a [u8] {
        &self.buf[self.header.payload_range()]
    }

    /// The padding octets, the count octet last; empty without P.
    pub fn padding(&self) -> &'a [u8] {
        &self.buf[self.header.payload.1..]
    }

    /// The CSRC list in packet order.
    pub fn csrcs(&self) -> impl ExactSizeIterator<Item = u32> + 'a {
        let end = FIXED_HEADER_LEN + 4 * usize::from(self.header.csrc_count);
        self.buf[FIXED_HEADER_LEN..end]
            .chunks_exact(4)
            .map(|w| u32::from_be_bytes([w[0], w[1], w[2], w[3]]))
    }

    /// The RFC 8285 elements in packet order; none when the packet has no extension or
    /// one of another profile.
    pub fn extensions(&self) -> Extensions<'a> {
        match self.header.ext {
            Some(b) => Extensions::new(&self.buf[b.data_at..b.data_at + b.data_len], b.form),
            None => Extensions::new(&[], ExtensionForm::Other { profile: 0 }),
        }
    }

    /// The whole header extension data (after its 4-byte header), whatever its profile.
    pub fn extension_data(&self) -> Option<&'a [u8]> {
        self.header.extension_data_range().map(|r| &self.buf[r])
    }

    /// The value of the first element with this ID.
    pub fn extension(&self, id: u8) -> Option<&'a [u8]> {
        self.header.element(self.buf, id).map(|r| &self.buf[r])
    }

    /// Reads element `id` with `parse`: `Ok(None)` when absent, an error when present but
    /// malformed.
    fn typed<T>(
        &self,
        id: u8,
        parse: impl FnOnce(&'a [u8]) -> Option<T>,
    ) -> Result<Option<T>, RtpError> {
        match self.extension(id) {
            None => Ok(None),
            Some(v) => parse(v).map(Some).ok_or(RtpError::BadExtensionValue { id }),
        }
    }

    /// The MID (RFC 8843 §15) in element `id`.
    pub fn mid(&self, id: u8) -> Result<Option<&'a str>, RtpError> {
        self.typed(id, ext::parse_mid)
    }

    /// The RID (RFC 8852 RtpStreamId) in element `id`.
    pub fn rid(&self, id: u8) -> Result<Option<&'a str>, RtpError> {
        self.typed(id, ext::parse_rid)
    }

    /// The repaired RID (RFC 8852 RepairedRtpStreamId) in element `id`.
    pub fn repaired_rid(&self, id: u8) -> Result<Option<&'a str>, RtpError> {
        self.typed(id, ext::parse_rid)
    }

    /// The abs-send-time in element `id`.
    pub fn abs_send_time(&self, id: u8) -> Result<Option<AbsSendTime>, RtpError> {
        self.typed(id, AbsSendTime::parse)
    }

    /// The transport-wide sequence number in element `id`.
    pub fn transport_cc_seq(&self, id: u8) -> Result<Option<u16>, RtpError> {
        self.typed(id, ext::parse_transport_cc)
    }

    /// The abs-capture-time in element `id`.
    pub fn abs_capture_time(&self, id: u8) -> Result<Option<AbsCaptureTime>, RtpError> {
        self.typed(id, AbsCaptureTime::parse)
    }

    /// The audio level (RFC 6464) in element `id`.
    pub fn audio_level(&self, id: u8) -> Result<Option<AudioLevel>, RtpError> {
        self.typed(id, AudioLevel::parse)
    }
}

/// An RTP packet parsed in a mutable buffer, to rewrite per subscriber what an SFU
/// changes (SSRC, sequence number, timestamp, marker, payload type, extension values)
/// in place: nothing moves and nothing is allocated.
#[derive(Debug)]
pub struct RtpPacketMut<'a> {
    buf: &'a mut [u8],
    header: RtpHeader,
}

impl<'a> RtpPacketMut<'a> {
    /// Parses `buf` (see [`RtpHeader::parse`]) and keeps a mutable borrow of it.
    pub fn parse(buf: &'a mut [u8]) -> Result<RtpPacketMut<'a>, RtpError> {
        let header = RtpHeader::parse(buf)?;
        Ok(RtpPacketMut { buf, header })
    }

    /// The header as it stands after the rewrites so far.
    pub fn header(&self) -> &RtpHeader {
        &self.header
    }

    /// A read-only view of the packet as it stands.
    pub fn as_packet(&self) -> RtpPacket<'_> {
        RtpPacket {
            buf: &*self.buf,
            header: self.header,
        }
    }

    /// Sets the marker bit.
    pub fn set_marker(&mut self, marker: bool) {
        self.buf[1] = (self.buf[1] & 0x7F) | u8::from(marker) << 7;
        self.header.marker = marker;
    }

    /// Sets the payload type; only its low 7 bits are kept.
    pub fn set_payload_type(&mut self, payload_type: u8) {
        let payload_type = payload_type & 0x7F;
        self.buf[1] = (self.buf[1] & 0x80) | payload_type;
        self.header.payload_type = payload_type;
    }

    /// Sets the sequence number.
    pub fn set_sequence_number(&mut self, sequence_number: u16) {
        self.buf[2..4].copy_from_slice(&sequence_number.to_be_bytes());
        self.header.sequence_number = sequence_number;
    }

    /// Sets the RTP timestamp.
    pub fn set_timestamp(&mut self, timestamp: u32) {
        self.buf[4..8].copy_from_slice(&timestamp.to_be_bytes());
        self.header.timestamp = timestamp;
    }

    /// Sets the SSRC.
    pub fn set_ssrc(&mut self, ssrc: u32) {
        self.buf[8..12].copy_from_slice(&ssrc.to_be_bytes());
        self.header.ssrc = ssrc;
    }

    /// The value of element `id`, to change in place.
    pub fn extension_mut(&mut self, id: u8) -> Option<&mut [u8]> {
        let r = self.header.element(self.buf, id)?;
        self.buf.get_mut(r)
    }

    /// Overwrites the value of element `id` with `value`, which must have the same
    /// length (an in-place rewrite cannot grow or shrink the header).
    pub fn set_extension(&mut self, id: u8, value: &[u8]) -> Result<(), RtpError> {
        let slot = self
            .extension_mut(id)
            .ok_or(RtpError::ExtensionNotFound { id })?;
        if slot.len() != value.len() {
            return Err(RtpError::ExtensionLength {
                id,
                len: slot.len(),
            });
        }
        slot.copy_from_slice(value);
        Ok(())
    }

    /// Rewrites the transport-wide sequence number in element `id` (2 bytes, or the
    /// first 2 of the 4-byte transport-wide-cc-02 form).
    pub fn set_transport_cc_seq(&mut self, id: u8, seq: u16) -> Result<(), RtpError> {
        let slot = self
            .extension_mut(id)
            .ok_or(RtpError::ExtensionNotFound { id })?;
        match slot.len() {
            2 | 4 => {
                slot[..2].copy_from_slice(&seq.to_be_bytes());
                Ok(())
            }
            len => Err(RtpError::ExtensionLength { id, len }),
        }
    }

    /// Rewrites the abs-send-time in element `id` (3 bytes).
    pub fn set_abs_send_time(&mut self, id: u8, time: AbsSendTime) -> Result<(), RtpError> {
        self.set_extension(id, &time.to_bytes())
    }
}
