//! Writes one RTP packet into a caller-owned buffer: fixed header, CSRCs, an RFC 8285
//! header extension, payload and padding (RFC 3550 §5.1, §5.3.1).

use bytes::{BufMut, BytesMut};

use super::error::RtpError;
use super::ext::{self, ExtensionForm};
use super::header::{FIXED_HEADER_LEN, RTP_VERSION};

/// The fixed-header fields of a packet to write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct RtpFields {
    /// M.
    pub marker: bool,
    /// PT, 7 bits.
    pub payload_type: u8,
    /// The sequence number.
    pub sequence_number: u16,
    /// The RTP timestamp.
    pub timestamp: u32,
    /// The synchronization source.
    pub ssrc: u32,
}

/// Writes one RTP packet at the end of a caller-owned buffer, in order: the header
/// ([`RtpWriter::new`]), optionally extension elements ([`RtpWriter::extension`]), the
/// payload ([`RtpWriter::payload`]), then [`RtpWriter::finish`] with the padding.
/// Allocates only if `out` must grow.
pub struct RtpWriter<'a> {
    out: &'a mut BytesMut,
    start: usize,
    /// Where the open extension block starts, and its form.
    ext: Option<(usize, ExtensionForm)>,
}

impl<'a> RtpWriter<'a> {
    /// Writes the fixed header and the CSRC list.
    ///
    /// # Panics
    ///
    /// Only on a programmer error: more than 15 CSRCs (CC is 4 bits).
    pub fn new(out: &'a mut BytesMut, fields: &RtpFields, csrcs: &[u32]) -> RtpWriter<'a> {
        let cc = u8::try_from(csrcs.len())
            .ok()
            .filter(|&n| n <= 15)
            .expect("at most 15 CSRCs");
        let start = out.len();
        out.reserve(FIXED_HEADER_LEN + 4 * csrcs.len());
        out.put_u8(RTP_VERSION << 6 | cc);
        out.put_u8(u8::from(fields.marker) << 7 | (fields.payload_type & 0x7F));
        out.put_u16(fields.sequence_number);
        out.put_u32(fields.timestamp);
        out.put_u32(fields.ssrc);
        for &csrc in csrcs {
            out.put_u32(csrc);
        }
        RtpWriter {
            out,
            start,
            ext: None,
        }
    }

    /// Opens the header extension in `form` (sets X). Call before any
    /// [`RtpWriter::extension`]; without it the first element opens the one-byte form.
    ///
    /// # Panics
    ///
    /// Only on a programmer error: an extension already open, or a form that is not
    /// RFC 8285's.
    pub fn extension_form(&mut self, form: ExtensionForm) -> &mut Self {
        assert!(self.ext.is_none(), "one header extension per packet");
        self.out[self.start] |= 0x10;
        let at = ext::put_block_header(self.out, form);
        self.ext = Some((at, form));
        self
    }

    /// Appends one extension element. An ID or length the open form cannot carry is
    /// refused (RFC 8285 §4.2, §4.3); choose the form with [`ExtensionForm::fitting`].
    pub fn extension(&mut self, id: u8, value: &[u8]) -> Result<&mut Self, RtpError> {
        let form = match self.ext {
            Some((_, form)) => form,
            None => {
                self.extension_form(ExtensionForm::OneByte);
                ExtensionForm::OneByte
            }
        };
        ext::put_element(self.out, form, id, value)?;
        Ok(self)
    }

    /// Pads the open extension block to 32 bits and fills in its length.
    fn close_extension(&mut self) {
        if let Some((at, _)) = self.ext.take() {
            ext::close_block(self.out, at);
        }
    }

    /// Appends payload bytes (closing the header extension first).
    #[inline]
    pub fn payload(&mut self, payload: &[u8]) -> &mut Self {
        self.close_extension();
        self.out.put_slice(payload);
        self
    }

    /// Ends the packet with `padding_len` octets of padding (RFC 3550 §5.1: zeros, the
    /// last one the count, and P set); 0 for none. Returns the packet's length.
    pub fn finish(mut self, padding_len: u8) -> usize {
        self.close_extension();
        if padding_len > 0 {
            self.out[self.start] |= 0x20;
            self.out.put_bytes(0, usize::from(padding_len) - 1);
            self.out.put_u8(padding_len);
        }
        self.out.len() - self.start
    }
}
