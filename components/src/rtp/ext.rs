//! RTP header extensions: RFC 8285's one-byte and two-byte forms (walking, finding by
//! ID, writing), and the values of the extensions an SFU reads or rewrites, each found
//! by the ID that SDP negotiated for its URI (`a=extmap`, RFC 8285 §5).

use bytes::{BufMut, BytesMut};

use super::error::RtpError;

/// RFC 8285 §4.2: the "defined by profile" value of the one-byte header form.
pub const ONE_BYTE_PROFILE: u16 = 0xBEDE;
/// RFC 8285 §4.3: the two-byte form's profile value is 0x100 followed by four
/// application bits, so its top 12 bits are this.
pub const TWO_BYTE_PROFILE: u16 = 0x1000;
/// RFC 8285 §4.2: ID 15 is reserved in the one-byte form; meeting it ends the walk.
const ONE_BYTE_STOP_ID: u8 = 15;

/// The extension URIs whose values this module reads (`a=extmap` in SDP).
pub mod uri {
    /// RFC 8843 §15: the media section's MID, as in `a=mid`.
    pub const MID: &str = "urn:ietf:params:rtp-hdrext:sdes:mid";
    /// RFC 8852: RtpStreamId, the RID of a simulcast layer.
    pub const RID: &str = "urn:ietf:params:rtp-hdrext:sdes:rtp-stream-id";
    /// RFC 8852: RepairedRtpStreamId, the RID that an RTX or FEC stream repairs.
    pub const REPAIRED_RID: &str = "urn:ietf:params:rtp-hdrext:sdes:repaired-rtp-stream-id";
    /// webrtc's abs-send-time: a 24-bit 6.18 fixed-point send time in seconds.
    pub const ABS_SEND_TIME: &str = "http://www.webrtc.org/experiments/rtp-hdrext/abs-send-time";
    /// draft-holmer-rmcat-transport-wide-cc-extensions-01 §2: a 16-bit sequence
    /// number shared by every stream of the transport.
    pub const TRANSPORT_CC: &str =
        "http://www.ietf.org/id/draft-holmer-rmcat-transport-wide-cc-extensions-01";
    /// webrtc's abs-capture-time: the NTP capture time, and optionally the estimated
    /// offset of the capturer's clock.
    pub const ABS_CAPTURE_TIME: &str =
        "http://www.webrtc.org/experiments/rtp-hdrext/abs-capture-time";
    /// RFC 6464: the client-to-mixer audio level.
    pub const AUDIO_LEVEL: &str = "urn:ietf:params:rtp-hdrext:ssrc-audio-level";
}

/// How the header extension block is laid out, by its "defined by profile" field
/// (RFC 3550 §5.3.1; RFC 8285 §4.2, §4.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExtensionForm {
    /// 0xBEDE: one-byte element headers, IDs 1-14, 1-16 bytes of value (RFC 8285 §4.2).
    OneByte,
    /// 0x100 and four application bits: two-byte element headers, IDs 1-255, 0-255 bytes
    /// of value (RFC 8285 §4.3).
    TwoByte {
        /// The four "appbits", opaque to RFC 8285.
        appbits: u8,
    },
    /// Any other profile value: an extension RFC 8285 does not describe, kept opaque.
    Other {
        /// The "defined by profile" field.
        profile: u16,
    },
}

impl ExtensionForm {
    /// The form that the "defined by profile" field names.
    pub const fn from_profile(profile: u16) -> ExtensionForm {
        if profile == ONE_BYTE_PROFILE {
            ExtensionForm::OneByte
        } else if profile & 0xFFF0 == TWO_BYTE_PROFILE {
            ExtensionForm::TwoByte {
                appbits: (profile & 0x000F) as u8,
            }
        } else {
            ExtensionForm::Other { profile }
        }
    }

    /// The "defined by profile" field for this form.
    pub const fn profile(self) -> u16 {
        match self {
            ExtensionForm::OneByte => ONE_BYTE_PROFILE,
            ExtensionForm::TwoByte { appbits } => TWO_BYTE_PROFILE | (appbits & 0x0F) as u16,
            ExtensionForm::Other { profile } => profile,
        }
    }

    /// The smallest RFC 8285 form that carries every `(id, value length)` given: the
    /// one-byte form when every ID is 1-14 and every value 1-16 bytes (RFC 8285 §4.2),
    /// else the two-byte form (§4.3).
    pub fn fitting(elements: impl IntoIterator<Item = (u8, usize)>) -> ExtensionForm {
        let one_byte = elements
            .into_iter()
            .all(|(id, len)| (1..=14).contains(&id) && (1..=16).contains(&len));
        if one_byte {
            ExtensionForm::OneByte
        } else {
            ExtensionForm::TwoByte { appbits: 0 }
        }
    }

    /// True when this form can carry an element with this ID and value length.
    pub fn can_encode(self, id: u8, len: usize) -> bool {
        match self {
            ExtensionForm::OneByte => (1..=14).contains(&id) && (1..=16).contains(&len),
            ExtensionForm::TwoByte { .. } => id >= 1 && len <= 255,
            ExtensionForm::Other { .. } => false,
        }
    }
}

/// One element of an RFC 8285 header extension, borrowed from the packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extension<'a> {
    /// The local identifier that SDP mapped to a URI.
    pub id: u8,
    /// The element's data.
    pub value: &'a [u8],
}

/// Where one element sits in its extension block.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ElementRef {
    pub(crate) id: u8,
    /// Offset of the value from the start of the block's element data.
    pub(crate) at: usize,
    pub(crate) len: usize,
}

/// Walks the elements of an RFC 8285 extension block: `data` is the block after its
/// 4-byte header. Padding octets (0) before, between and after elements are skipped
/// (RFC 8285 §4.1.2);
/// in the one-byte form ID 15 ends the walk (§4.2). Bounded by `data.len()` steps.
#[derive(Clone, Debug)]
pub(crate) struct ElementWalk<'a> {
    data: &'a [u8],
    at: usize,
    two_byte: bool,
    done: bool,
}

impl<'a> ElementWalk<'a> {
    /// A walk over `data` in the given form; `Other` forms have no elements.
    pub(crate) fn new(data: &'a [u8], form: ExtensionForm) -> ElementWalk<'a> {
        ElementWalk {
            data,
            at: 0,
            two_byte: matches!(form, ExtensionForm::TwoByte { .. }),
            done: matches!(form, ExtensionForm::Other { .. }),
        }
    }

    fn step(&mut self) -> Option<Result<ElementRef, RtpError>> {
        // Padding octets may sit before, between and after elements.
        while self.data.get(self.at) == Some(&0) {
            self.at += 1;
        }
        let &first = self.data.get(self.at)?;
        let (id, len, value_at) = if self.two_byte {
            let Some(&len) = self.data.get(self.at + 1) else {
                return Some(Err(RtpError::ElementOverrun { id: first }));
            };
            (first, usize::from(len), self.at + 2)
        } else {
            let id = first >> 4;
            if id == ONE_BYTE_STOP_ID {
                return None;
            }
            // The 4-bit length is the number of data bytes minus one.
            (id, usize::from(first & 0x0F) + 1, self.at + 1)
        };
        let end = value_at + len;
        if end > self.data.len() {
            return Some(Err(RtpError::ElementOverrun { id }));
        }
        self.at = end;
        Some(Ok(ElementRef {
            id,
            at: value_at,
            len,
        }))
    }
}

impl Iterator for ElementWalk<'_> {
    type Item = Result<ElementRef, RtpError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let item = self.step();
        self.done = !matches!(item, Some(Ok(_)));
        item
    }
}

/// The elements of a parsed packet's header extension, in packet order. The block was
/// checked when the packet was parsed, so this yields no errors.
#[derive(Clone, Debug)]
pub struct Extensions<'a> {
    walk: ElementWalk<'a>,
}

impl<'a> Extensions<'a> {
    pub(crate) fn new(data: &'a [u8], form: ExtensionForm) -> Extensions<'a> {
        Extensions {
            walk: ElementWalk::new(data, form),
        }
    }
}

impl<'a> Iterator for Extensions<'a> {
    type Item = Extension<'a>;

    fn next(&mut self) -> Option<Extension<'a>> {
        let e = self.walk.next()?.ok()?;
        let value = self.walk.data.get(e.at..e.at + e.len)?;
        Some(Extension { id: e.id, value })
    }
}

/// Checks every element of a block, so later lookups cannot fail.
pub(crate) fn validate(data: &[u8], form: ExtensionForm) -> Result<(), RtpError> {
    ElementWalk::new(data, form).try_for_each(|e| e.map(|_| ()))
}

/// The first element with this ID; should an ID repeat, the first one wins.
pub(crate) fn find(data: &[u8], form: ExtensionForm, id: u8) -> Option<ElementRef> {
    ElementWalk::new(data, form)
        .map_while(Result::ok)
        .find(|e| e.id == id)
}

/// Appends one header extension block (RFC 3550 §5.3.1) in an RFC 8285 form: the
/// 4-byte header, then elements, then zero padding to a 32-bit boundary with the length
/// filled in by [`ExtensionWriter::finish`].
pub struct ExtensionWriter<'a> {
    out: &'a mut BytesMut,
    start: usize,
    form: ExtensionForm,
}

impl<'a> ExtensionWriter<'a> {
    /// Starts a block at the end of `out`.
    ///
    /// # Panics
    ///
    /// Only on a programmer error: `form` is [`ExtensionForm::Other`].
    pub fn new(out: &'a mut BytesMut, form: ExtensionForm) -> ExtensionWriter<'a> {
        let start = put_block_header(out, form);
        ExtensionWriter { out, start, form }
    }

    /// Appends one element. An ID or length the form cannot carry is refused.
    pub fn push(&mut self, id: u8, value: &[u8]) -> Result<&mut Self, RtpError> {
        put_element(self.out, self.form, id, value)?;
        Ok(self)
    }

    /// Pads the block with zeros to a 32-bit boundary and fills in its length in words.
    /// Returns the block's length in bytes, header included.
    ///
    /// # Panics
    ///
    /// Only on a programmer error: a block over 65535 words.
    pub fn finish(self) -> usize {
        close_block(self.out, self.start)
    }
}

/// Writes a block header with a zero length; returns where the block starts.
pub(crate) fn put_block_header(out: &mut BytesMut, form: ExtensionForm) -> usize {
    assert!(
        !matches!(form, ExtensionForm::Other { .. }),
        "only RFC 8285 forms are written"
    );
    let start = out.len();
    out.put_u16(form.profile());
    out.put_u16(0);
    start
}

/// Appends one element in `form`, or refuses an ID or length it cannot carry.
pub(crate) fn put_element(
    out: &mut BytesMut,
    form: ExtensionForm,
    id: u8,
    value: &[u8],
) -> Result<(), RtpError> {
    if !form.can_encode(id, value.len()) {
        return Err(RtpError::ElementNotEncodable {
            id,
            len: value.len(),
        });
    }
    match form {
        // The 4-bit length is the number of data bytes minus one (RFC 8285 §4.2).
        ExtensionForm::OneByte => out.put_u8(id << 4 | (value.len() - 1) as u8),
        _ => {
            out.put_u8(id);
            out.put_u8(value.len() as u8);
        }
    }
    out.put_slice(value);
    Ok(())
}

/// Pads the block that starts at `start` to 32 bits and fills in its length in words;
/// returns its length in bytes, header included.
pub(crate) fn close_block(out: &mut BytesMut, start: usize) -> usize {
    let data_len = out.len() - start - 4;
    let padded = data_len.next_multiple_of(4);
    out.put_bytes(0, padded - data_len);
    let words = u16::try_from(padded / 4).expect("RTP header extension over 65535 words");
    out[start + 2..start + 4].copy_from_slice(&words.to_be_bytes());
    4 + padded
}

/// An RFC 8843 §15 MID value: the media section's identification-tag as in `a=mid`.
/// `None` when empty or not UTF-8.
pub fn parse_mid(value: &[u8]) -> Option<&str> {
    std::str::from_utf8(value).ok().filter(|s| !s.is_empty())
}

/// An RFC 8852 RtpStreamId or RepairedRtpStreamId value. RFC 8852 carries the RID of
/// RFC 8851, whose grammar is `rid-id = 1*(alpha-numeric / "-" / "_")`; anything else
/// gives `None`.
pub fn parse_rid(value: &[u8]) -> Option<&str> {
    let ok = !value.is_empty()
        && value
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'_');
    // Every byte is ASCII, so this cannot fail.
    ok.then(|| std::str::from_utf8(value).ok()).flatten()
}

/// draft-holmer-rmcat-transport-wide-cc-extensions-01 §2.2: the transport-wide sequence
/// number, 16 bits. webrtc's transport-wide-cc-02 may add two bytes (a feedback request)
/// after it, so a 4-byte value is read too.
pub fn parse_transport_cc(value: &[u8]) -> Option<u16> {
    match value {
        [a, b] | [a, b, _, _] => Some(u16::from_be_bytes([*a, *b])),
        _ => None,
    }
}

/// webrtc's abs-send-time: the send time in seconds as 24-bit 6.18 fixed point, so it
/// wraps every 64 s and counts in steps of 1/262144 s (about 3.8 µs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AbsSendTime(pub u32);

impl AbsSendTime {
    /// Fraction bits of the 6.18 format.
    const FRACTION_BITS: u32 = 18;
    /// The value wraps at 2^24.
    const MASK: u32 = 0x00FF_FFFF;

    /// The 3-byte value; `None` for any other length.
    pub fn parse(value: &[u8]) -> Option<AbsSendTime> {
        match value {
            [a, b, c] => Some(AbsSendTime(u32::from_be_bytes([0, *a, *b, *c]))),
            _ => None,
        }
    }

    /// The send time of a clock in microseconds, wrapped to 64 s.
    pub fn from_micros(time_us: u64) -> AbsSendTime {
        let wrapped_us = time_us % 64_000_000;
        AbsSendTime(((wrapped_us << Self::FRACTION_BITS) / 1_000_000) as u32 & Self::MASK)
    }

    /// Microseconds since the last 64 s wrap, rounded down.
    pub fn as_micros(self) -> u64 {
        (u64::from(self.0 & Self::MASK) * 1_000_000) >> Self::FRACTION_BITS
    }

    /// The 3 bytes on the wire.
    pub fn to_bytes(self) -> [u8; 3] {
        let [_, a, b, c] = self.0.to_be_bytes();
        [a, b, c]
    }
}

/// webrtc's abs-capture-time: when the frame was captured, by the capturer's NTP clock,
/// and optionally how far that clock is estimated to be from the sender's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AbsCaptureTime {
    /// The capture time, NTP format as unsigned 32.32 fixed point seconds.
    pub capture_ntp: u64,
    /// The estimated capture clock offset, signed 32.32 fixed point seconds; `None` in
    /// the 8-byte form.
    pub clock_offset: Option<i64>,
}

impl AbsCaptureTime {
    /// The 8- or 16-byte value; `None` for any other length.
    pub fn parse(value: &[u8]) -> Option<AbsCaptureTime> {
        let word = |at: usize| -> Option<[u8; 8]> { value.get(at..at + 8)?.try_into().ok() };
        match value.len() {
            8 => Some(AbsCaptureTime {
                capture_ntp: u64::from_be_bytes(word(0)?),
                clock_offset: None,
            }),
            16 => Some(AbsCaptureTime {
                capture_ntp: u64::from_be_bytes(word(0)?),
                clock_offset: Some(i64::from_be_bytes(word(8)?)),
            }),
            _ => None,
        }
    }

    /// Appends the 8- or 16-byte value.
    pub fn write_to(&self, out: &mut BytesMut) {
        out.put_u64(self.capture_ntp);
        if let Some(offset) = self.clock_offset {
            out.put_i64(offset);
        }
    }
}

/// RFC 6464 §3: the audio level of the packet's payload, with the voice activity flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AudioLevel {
    /// The V bit: the sender judged that the packet holds voice.
    pub voice: bool,
    /// The level in -dBov, 0 (loudest) to 127 (silence).
    pub level_neg_dbov: u8,
}

impl AudioLevel {
    /// The level byte; RFC 6464 §3 shows one byte of data in both header forms, and a
    /// longer value is read by its first byte.
    pub fn parse(value: &[u8]) -> Option<AudioLevel> {
        let &b = value.first()?;
        Some(AudioLevel {
            voice: b & 0x80 != 0,
            level_neg_dbov: b & 0x7F,
        })
    }

    /// The byte on the wire.
    pub fn to_byte(self) -> u8 {
        u8::from(self.voice) << 7 | (self.level_neg_dbov & 0x7F)
    }
}
