//! Attribute values that describe RTP: codecs (`rtpmap`, `fmtp`, `rtcp-fb`), header
//! extensions (`extmap`), sources (`ssrc`, `ssrc-group`), `rtcp`, and the direction.

use std::fmt;

use super::session::Connection;
use super::text::{digits, is_non_ws, is_rid_id, is_token};

/// RFC 8866 §6.6: an RTP payload type is a 7-bit field, 0 to 127.
const MAX_PAYLOAD_TYPE: u8 = 127;

/// Parses a payload type: `1*3DIGIT` no greater than 127.
fn payload_type(s: &str) -> Option<u8> {
    digits::<u8>(s).filter(|pt| *pt <= MAX_PAYLOAD_TYPE)
}

/// Which way media flows (RFC 8866 §6.7: `sendrecv`, `sendonly`, `recvonly`, `inactive`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    /// `sendrecv`, the default when a section has none (RFC 3264 §5.1).
    SendRecv,
    /// `sendonly`.
    SendOnly,
    /// `recvonly`.
    RecvOnly,
    /// `inactive`.
    Inactive,
}

impl Direction {
    /// Parses the attribute name or `extmap` direction token.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "sendrecv" => Self::SendRecv,
            "sendonly" => Self::SendOnly,
            "recvonly" => Self::RecvOnly,
            "inactive" => Self::Inactive,
            _ => return None,
        })
    }

    /// The token as written.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::SendRecv => "sendrecv",
            Self::SendOnly => "sendonly",
            Self::RecvOnly => "recvonly",
            Self::Inactive => "inactive",
        }
    }

    /// The direction the other side answers with (RFC 3264 §6.1): send becomes receive.
    pub fn reversed(self) -> Self {
        match self {
            Self::SendOnly => Self::RecvOnly,
            Self::RecvOnly => Self::SendOnly,
            other => other,
        }
    }
}

impl fmt::Display for Direction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `a=rtpmap` (RFC 8866 §6.6):
/// `payload-type SP encoding-name "/" clock-rate [ "/" encoding-params ]`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RtpMap {
    /// The RTP payload type, 0 to 127.
    pub payload_type: u8,
    /// The encoding name as written (`opus`, `VP8`, `H264`, `rtx`, ...).
    pub encoding_name: String,
    /// The RTP clock rate in Hz.
    pub clock_rate_hz: u32,
    /// The encoding parameters: for audio, the number of channels.
    pub encoding_params: Option<u16>,
}

impl RtpMap {
    /// A mapping for `payload_type`.
    pub fn new(payload_type: u8, encoding_name: &str, clock_rate_hz: u32) -> Self {
        Self {
            payload_type,
            encoding_name: encoding_name.to_owned(),
            clock_rate_hz,
            encoding_params: None,
        }
    }

    pub(crate) fn parse(value: &str) -> Option<Self> {
        let (pt, encoding) = value.split_once(' ')?;
        let mut parts = encoding.split('/');
        let encoding_name = parts.next()?;
        if !is_token(encoding_name) {
            return None;
        }
        let clock_rate_hz = digits(parts.next()?)?;
        let encoding_params = match parts.next() {
            Some(p) => Some(digits(p)?),
            None => None,
        };
        if parts.next().is_some() {
            return None;
        }
        Some(Self {
            payload_type: payload_type(pt)?,
            encoding_name: encoding_name.to_owned(),
            clock_rate_hz,
            encoding_params,
        })
    }

    /// True when the encoding name matches `name` in any case (names are
    /// case-insensitive media subtypes).
    pub fn is(&self, name: &str) -> bool {
        self.encoding_name.eq_ignore_ascii_case(name)
    }
}

impl fmt::Display for RtpMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}/{}",
            self.payload_type, self.encoding_name, self.clock_rate_hz
        )?;
        if let Some(p) = self.encoding_params {
            write!(f, "/{p}")?;
        }
        Ok(())
    }
}

/// `a=fmtp` (RFC 8866 §6.15): `fmt SP format-specific-params`. The parameters are the
/// codec's business and are kept as written.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Fmtp {
    /// The format (`fmt`), a payload type for RTP media.
    pub format: String,
    /// Everything after the first space, as written.
    pub params: String,
}

impl Fmtp {
    pub(crate) fn parse(value: &str) -> Option<Self> {
        let (format, params) = value.split_once(' ')?;
        if !is_token(format) || params.is_empty() {
            return None;
        }
        Some(Self {
            format: format.to_owned(),
            params: params.to_owned(),
        })
    }

    /// The format as an RTP payload type, when it is one.
    pub fn payload_type(&self) -> Option<u8> {
        payload_type(&self.format)
    }

    /// The value of one `name=value` parameter, splitting on `;` as most codecs do.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.params.split(';').find_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            (k.trim() == name).then_some(v.trim())
        })
    }
}

impl fmt::Display for Fmtp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.format, self.params)
    }
}

/// `a=rtcp-fb` (RFC 4585 §4.2): `rtcp-fb-pt SP rtcp-fb-val`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RtcpFb {
    /// The payload type, or `None` for the wildcard `*`.
    pub payload_type: Option<u8>,
    /// The feedback type: `nack`, `ccm`, `goog-remb`, `transport-cc`, ...
    pub feedback: String,
    /// What follows the type (`pli` after `nack`, `fir` after `ccm`), as written.
    pub param: Option<String>,
}

impl RtcpFb {
    /// Feedback for one payload type.
    pub fn new(payload_type: u8, feedback: &str, param: Option<&str>) -> Self {
        Self {
            payload_type: Some(payload_type),
            feedback: feedback.to_owned(),
            param: param.map(str::to_owned),
        }
    }

    pub(crate) fn parse(value: &str) -> Option<Self> {
        let (pt, val) = value.split_once(' ')?;
        let payload_type = match pt {
            "*" => None,
            _ => Some(payload_type(pt)?),
        };
        let (feedback, param) = match val.split_once(' ') {
            Some((f, p)) => (f, Some(p)),
            None => (val, None),
        };
        // rtcp-fb-id = 1*(alpha-numeric / "-" / "_"), the same alphabet as a rid.
        if !is_rid_id(feedback) || param.is_some_and(str::is_empty) {
            return None;
        }
        Some(Self {
            payload_type,
            feedback: feedback.to_owned(),
            param: param.map(str::to_owned),
        })
    }
}

impl fmt::Display for RtcpFb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.payload_type {
            Some(pt) => write!(f, "{pt} {}", self.feedback)?,
            None => write!(f, "* {}", self.feedback)?,
        }
        if let Some(p) = &self.param {
            write!(f, " {p}")?;
        }
        Ok(())
    }
}

/// `a=extmap` (RFC 8285 §8):
/// `1*5DIGIT ["/" direction] SP extensionname [SP extensionattributes]`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Extmap {
    /// The local identifier carried in the RTP header extension.
    pub id: u16,
    /// The direction, when one is given.
    pub direction: Option<Direction>,
    /// The extension's URI.
    pub uri: String,
    /// Extension attributes after the URI, as written.
    pub attributes: Option<String>,
}

impl Extmap {
    /// A mapping from `id` to `uri` with no direction or attributes.
    pub fn new(id: u16, uri: &str) -> Self {
        Self {
            id,
            direction: None,
            uri: uri.to_owned(),
            attributes: None,
        }
    }

    pub(crate) fn parse(value: &str) -> Option<Self> {
        let (entry, rest) = value.split_once(' ')?;
        let (id, direction) = match entry.split_once('/') {
            Some((id, dir)) => (id, Some(Direction::parse(dir)?)),
            None => (entry, None),
        };
        if id.len() > 5 {
            return None;
        }
        let (uri, attributes) = match rest.split_once(' ') {
            Some((u, a)) => (u, Some(a)),
            None => (rest, None),
        };
        if !is_non_ws(uri) || attributes.is_some_and(str::is_empty) {
            return None;
        }
        Some(Self {
            id: digits(id)?,
            direction,
            uri: uri.to_owned(),
            attributes: attributes.map(str::to_owned),
        })
    }
}

impl fmt::Display for Extmap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.id)?;
        if let Some(d) = self.direction {
            write!(f, "/{d}")?;
        }
        write!(f, " {}", self.uri)?;
        if let Some(a) = &self.attributes {
            write!(f, " {a}")?;
        }
        Ok(())
    }
}

/// `a=ssrc` (RFC 5576 §4.1, grammar in §10): `ssrc-id SP attribute`, a source-level
/// attribute such as `cname:...` or `msid:...`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Ssrc {
    /// The synchronization source.
    pub ssrc: u32,
    /// The source-level attribute's name (`cname`, `msid`, ...).
    pub attribute: String,
    /// Its value after `:`, as written, when it has one.
    pub value: Option<String>,
}

impl Ssrc {
    /// A source-level attribute with a value.
    pub fn new(ssrc: u32, attribute: &str, value: &str) -> Self {
        Self {
            ssrc,
            attribute: attribute.to_owned(),
            value: Some(value.to_owned()),
        }
    }

    pub(crate) fn parse(value: &str) -> Option<Self> {
        let (ssrc, attr) = value.split_once(' ')?;
        let (attribute, value) = match attr.split_once(':') {
            Some((n, v)) => (n, Some(v)),
            None => (attr, None),
        };
        if !is_token(attribute) {
            return None;
        }
        Some(Self {
            ssrc: digits(ssrc)?,
            attribute: attribute.to_owned(),
            value: value.map(str::to_owned),
        })
    }
}

impl fmt::Display for Ssrc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.ssrc, self.attribute)?;
        if let Some(v) = &self.value {
            write!(f, ":{v}")?;
        }
        Ok(())
    }
}

/// `a=ssrc-group` (RFC 5576 §4.2, grammar in §10): `semantics *(SP ssrc-id)`, such as
/// `FID` pairing a media SSRC with its RTX SSRC.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SsrcGroup {
    /// `FID`, `FEC`, `SIM`, ...
    pub semantics: String,
    /// The grouped sources, in order.
    pub ssrcs: Vec<u32>,
}

impl SsrcGroup {
    pub(crate) fn parse(value: &str) -> Option<Self> {
        let mut words = value.split_ascii_whitespace();
        let semantics = words.next()?;
        if !is_token(semantics) {
            return None;
        }
        let ssrcs = words.map(digits).collect::<Option<Vec<u32>>>()?;
        Some(Self {
            semantics: semantics.to_owned(),
            ssrcs,
        })
    }
}

impl fmt::Display for SsrcGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.semantics)?;
        for ssrc in &self.ssrcs {
            write!(f, " {ssrc}")?;
        }
        Ok(())
    }
}

/// `a=rtcp` (RFC 3605 §2.1): `port [nettype SP addrtype SP connection-address]`, the RTCP
/// address when it is not the RTP one. With rtcp-mux it is a placeholder.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Rtcp {
    /// The RTCP port.
    pub port: u16,
    /// The RTCP address, when given.
    pub connection: Option<Connection>,
}

impl Rtcp {
    pub(crate) fn parse(value: &str) -> Option<Self> {
        let (port, rest) = match value.split_once(' ') {
            Some((p, r)) => (p, Some(r)),
            None => (value, None),
        };
        let connection = match rest {
            Some(r) => Some(Connection::parse(r)?),
            None => None,
        };
        Some(Self {
            port: digits(port)?,
            connection,
        })
    }
}

impl fmt::Display for Rtcp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.port)?;
        if let Some(c) = &self.connection {
            write!(f, " {c}")?;
        }
        Ok(())
    }
}
