//! The Alert protocol (RFC 5246 §7.2): a level and a description, two bytes.

use bytes::{BufMut, BytesMut};

use super::DtlsWireError;
use super::codec::Reader;

/// AlertLevel (RFC 5246 §7.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum AlertLevel {
    /// warning(1).
    Warning = 1,
    /// fatal(2).
    Fatal = 2,
}

/// AlertDescription (RFC 5246 §7.2): a newtype so that values shoal does not name are
/// still carried.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AlertDescription(pub u8);

impl AlertDescription {
    /// close_notify(0).
    pub const CLOSE_NOTIFY: Self = Self(0);
    /// unexpected_message(10).
    pub const UNEXPECTED_MESSAGE: Self = Self(10);
    /// bad_record_mac(20).
    pub const BAD_RECORD_MAC: Self = Self(20);
    /// record_overflow(22).
    pub const RECORD_OVERFLOW: Self = Self(22);
    /// handshake_failure(40).
    pub const HANDSHAKE_FAILURE: Self = Self(40);
    /// bad_certificate(42).
    pub const BAD_CERTIFICATE: Self = Self(42);
    /// unsupported_certificate(43).
    pub const UNSUPPORTED_CERTIFICATE: Self = Self(43);
    /// illegal_parameter(47).
    pub const ILLEGAL_PARAMETER: Self = Self(47);
    /// decode_error(50).
    pub const DECODE_ERROR: Self = Self(50);
    /// decrypt_error(51).
    pub const DECRYPT_ERROR: Self = Self(51);
    /// protocol_version(70).
    pub const PROTOCOL_VERSION: Self = Self(70);
    /// insufficient_security(71).
    pub const INSUFFICIENT_SECURITY: Self = Self(71);
    /// internal_error(80).
    pub const INTERNAL_ERROR: Self = Self(80);
    /// no_renegotiation(100).
    pub const NO_RENEGOTIATION: Self = Self(100);
    /// unsupported_extension(110).
    pub const UNSUPPORTED_EXTENSION: Self = Self(110);
}

/// One alert message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Alert {
    /// Its level.
    pub level: AlertLevel,
    /// Its description.
    pub description: AlertDescription,
}

impl Alert {
    /// Parses an alert record's plaintext, which must be exactly one alert.
    pub fn parse(body: &[u8]) -> Result<Alert, DtlsWireError> {
        let mut r = Reader::new(body);
        let level = match r.u8("alert level")? {
            1 => AlertLevel::Warning,
            2 => AlertLevel::Fatal,
            v => {
                return Err(DtlsWireError::BadValue {
                    field: "alert level",
                    value: u32::from(v),
                });
            }
        };
        let description = AlertDescription(r.u8("alert description")?);
        r.finish("alert")?;
        Ok(Alert { level, description })
    }

    /// Appends the two bytes.
    pub fn write(&self, out: &mut BytesMut) {
        out.put_u8(self.level as u8);
        out.put_u8(self.description.0);
    }
}
