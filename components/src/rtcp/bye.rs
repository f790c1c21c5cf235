//! Goodbye (RFC 3550 §6.6): the sources leaving, and optionally why.

use bytes::{BufMut, Bytes, BytesMut};

use super::error::RtcpError;
use super::{ItemList, Ssrcs, WireList, WriteRtcp, count5, packet_type};

/// A BYE packet. `S` is the SSRC/CSRC list: [`Ssrcs`] as parsed, `&[u32]` to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bye<S = Ssrcs> {
    /// The sources leaving, at most 31.
    pub sources: S,
    /// The reason for leaving, at most 255 bytes (UTF-8, not checked here).
    pub reason: Option<Bytes>,
}

impl Bye {
    /// RFC 3550 §6.6: SC sources, then optionally "an 8-bit octet count followed by that
    /// many octets of text", padded with null octets to the next 32-bit boundary.
    pub(crate) fn parse(sc: u8, body: Bytes) -> Result<Bye, RtcpError> {
        let list_len = 4 * usize::from(sc);
        if list_len > body.len() {
            return Err(RtcpError::CountMismatch {
                pt: packet_type::BYE,
                count: sc,
            });
        }
        let sources = WireList::new(body.slice(..list_len));
        let rest = &body[list_len..];
        let reason = match rest.split_first() {
            None => None,
            Some((&len, after)) => {
                let len = usize::from(len);
                let pad = after.get(len..).ok_or(RtcpError::BadBye)?;
                if pad.len() > 3 || pad.iter().any(|&b| b != 0) {
                    return Err(RtcpError::BadBye);
                }
                Some(body.slice(list_len + 1..list_len + 1 + len))
            }
        };
        Ok(Bye { sources, reason })
    }
}

impl<S: ItemList> WriteRtcp for Bye<S> {
    fn packet_type(&self) -> u8 {
        packet_type::BYE
    }

    fn count(&self) -> u8 {
        count5(self.sources.count())
    }

    fn body_len(&self) -> usize {
        let reason = self
            .reason
            .as_ref()
            .map_or(0, |r| (1 + r.len()).next_multiple_of(4));
        self.sources.byte_len() + reason
    }

    /// # Panics
    ///
    /// Only on a programmer error: a reason over 255 bytes.
    fn write_body(&self, out: &mut BytesMut) {
        self.sources.write_to(out);
        if let Some(reason) = &self.reason {
            let len = u8::try_from(reason.len()).expect("BYE reason over 255 bytes");
            out.put_u8(len);
            out.put_slice(reason);
            let written = 1 + reason.len();
            out.put_bytes(0, written.next_multiple_of(4) - written);
        }
    }
}
