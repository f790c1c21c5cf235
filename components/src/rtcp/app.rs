//! Application-defined packets (RFC 3550 §6.7), kept opaque.

use bytes::{BufMut, Bytes, BytesMut};

use super::error::RtcpError;
use super::{WriteRtcp, be32, packet_type};

/// SSRC and name: 8 bytes.
const FIXED_LEN: usize = 8;

/// An APP packet: shoal reads none, but keeps and writes them whole.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct App {
    /// The 5-bit subtype.
    pub subtype: u8,
    /// SSRC/CSRC of the sender.
    pub ssrc: u32,
    /// The four ASCII characters naming the application.
    pub name: [u8; 4],
    /// Application-dependent data.
    pub data: Bytes,
}

impl App {
    /// RFC 3550 §6.7: SSRC, name, then data.
    pub(crate) fn parse(subtype: u8, body: Bytes) -> Result<App, RtcpError> {
        let fixed = body.get(..FIXED_LEN).ok_or(RtcpError::TooShort {
            pt: packet_type::APP,
        })?;
        Ok(App {
            subtype,
            ssrc: be32(fixed, 0),
            name: [fixed[4], fixed[5], fixed[6], fixed[7]],
            data: body.slice(FIXED_LEN..),
        })
    }
}

impl WriteRtcp for App {
    fn packet_type(&self) -> u8 {
        packet_type::APP
    }

    fn count(&self) -> u8 {
        self.subtype & 0x1F
    }

    fn body_len(&self) -> usize {
        FIXED_LEN + self.data.len()
    }

    fn write_body(&self, out: &mut BytesMut) {
        out.put_u32(self.ssrc);
        out.put_slice(&self.name);
        out.put_slice(&self.data);
    }
}
