//! One media section (RFC 8866 §5.14): the `m=` line, its `i=`, `c=`, `b=`, `k=` lines and
//! its attributes, with the accessors an SFU reads an offer through.

use std::fmt;

use super::attribute::Attribute;
use super::candidate::Candidate;
use super::grouping::Msid;
use super::rtp::{Direction, Extmap, Fmtp, Rtcp, RtcpFb, RtpMap, Ssrc, SsrcGroup};
use super::session::{Bandwidth, Connection};
use super::simulcast::{Rid, Simulcast};
use super::text::{digits, is_token};

/// The proto of an RTP section under DTLS-SRTP with feedback (RFC 5764 §8).
pub const PROTO_RTP_SAVPF: &str = "UDP/TLS/RTP/SAVPF";
/// The proto of a data channel section over UDP (RFC 8841).
pub const PROTO_DTLS_SCTP: &str = "UDP/DTLS/SCTP";
/// The single format of a data channel section (RFC 8841).
pub const FORMAT_DATACHANNEL: &str = "webrtc-datachannel";

/// The `<media>` of an `m=` line (RFC 8866 §5.14).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum MediaKind {
    /// `audio`.
    Audio,
    /// `video`.
    Video,
    /// `application`: data channels in JSEP.
    Application,
    /// Any other token (`text`, `image`, `message`, ...).
    Other(String),
}

impl MediaKind {
    fn parse(s: &str) -> Self {
        match s {
            "audio" => Self::Audio,
            "video" => Self::Video,
            "application" => Self::Application,
            other => Self::Other(other.to_owned()),
        }
    }

    /// The token as written.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Audio => "audio",
            Self::Video => "video",
            Self::Application => "application",
            Self::Other(s) => s,
        }
    }
}

impl fmt::Display for MediaKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One media section: `m=` and what follows it up to the next `m=`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct MediaDescription {
    /// `<media>`.
    pub kind: MediaKind,
    /// `<port>`; 0 rejects or disables the section (RFC 3264 §6), 9 is the JSEP
    /// placeholder when candidates carry the real ports.
    pub port: u16,
    /// The `/<number of ports>` suffix, if written.
    pub port_count: Option<u16>,
    /// `<proto>`, such as [`PROTO_RTP_SAVPF`] or [`PROTO_DTLS_SCTP`].
    pub proto: String,
    /// `<fmt>` list: payload types for RTP, `webrtc-datachannel` for data.
    pub formats: Vec<String>,
    /// `i=` (the media title).
    pub title: Option<String>,
    /// `c=` lines.
    pub connections: Vec<Connection>,
    /// `b=` lines.
    pub bandwidths: Vec<Bandwidth>,
    /// `k=` (obsolete).
    pub key: Option<String>,
    /// Media attributes, in order.
    pub attributes: Vec<Attribute>,
}

impl MediaDescription {
    /// A section with only its `m=` line.
    pub fn new(kind: MediaKind, port: u16, proto: &str, formats: &[&str]) -> Self {
        Self {
            kind,
            port,
            port_count: None,
            proto: proto.to_owned(),
            formats: formats.iter().map(|f| (*f).to_owned()).collect(),
            title: None,
            connections: Vec::new(),
            bandwidths: Vec::new(),
            key: None,
            attributes: Vec::new(),
        }
    }

    /// Parses the value of an `m=` line (RFC 8866 §9):
    /// `media SP port ["/" integer] SP proto 1*(SP fmt)`.
    pub(crate) fn parse_media_line(value: &str) -> Option<Self> {
        let mut words = value.split_ascii_whitespace();
        let kind = words.next().filter(|k| is_token(k))?;
        let port_word = words.next()?;
        let (port, port_count) = match port_word.split_once('/') {
            Some((p, n)) => (p, Some(digits::<u16>(n).filter(|n| *n > 0)?)),
            None => (port_word, None),
        };
        let proto = words.next()?;
        let proto_ok = proto.split('/').all(is_token);
        let formats = words
            .map(|f| is_token(f).then(|| f.to_owned()))
            .collect::<Option<Vec<_>>>()?;
        if !proto_ok || formats.is_empty() {
            return None;
        }
        Some(Self {
            kind: MediaKind::parse(kind),
            port: digits(port)?,
            port_count,
            proto: proto.to_owned(),
            formats,
            title: None,
            connections: Vec::new(),
            bandwidths: Vec::new(),
            key: None,
            attributes: Vec::new(),
        })
    }

    /// Appends an attribute.
    pub fn push_attribute(&mut self, attribute: Attribute) -> &mut Self {
        self.attributes.push(attribute);
        self
    }

    /// Appends an attribute, by value, for building a section in one expression.
    pub fn with_attribute(mut self, attribute: Attribute) -> Self {
        self.attributes.push(attribute);
        self
    }

    /// The formats that are RTP payload types, in `m=` order.
    pub fn payload_types(&self) -> impl Iterator<Item = u8> {
        self.formats
            .iter()
            .filter_map(|f| digits::<u8>(f).filter(|pt| *pt <= 127))
    }

    /// `a=mid`, if present.
    pub fn mid(&self) -> Option<&str> {
        self.attributes.iter().find_map(|a| match a {
            Attribute::Mid(m) => Some(m.as_str()),
            _ => None,
        })
    }

    /// The direction attribute, if present (absent means `sendrecv`, RFC 3264 §5.1).
    pub fn direction(&self) -> Option<Direction> {
        self.attributes.iter().find_map(|a| match a {
            Attribute::Direction(d) => Some(*d),
            _ => None,
        })
    }

    /// The ICE candidates, in order.
    pub fn candidates(&self) -> impl Iterator<Item = &Candidate> {
        self.attributes.iter().filter_map(|a| match a {
            Attribute::Candidate(c) => Some(c),
            _ => None,
        })
    }

    /// True when `a=end-of-candidates` is present (RFC 8840).
    pub fn end_of_candidates(&self) -> bool {
        self.attributes.contains(&Attribute::EndOfCandidates)
    }

    /// The `a=rtpmap` lines, in order.
    pub fn rtpmaps(&self) -> impl Iterator<Item = &RtpMap> {
        self.attributes.iter().filter_map(|a| match a {
            Attribute::RtpMap(r) => Some(r),
            _ => None,
        })
    }

    /// The `a=rtpmap` for one payload type.
    pub fn rtpmap(&self, payload_type: u8) -> Option<&RtpMap> {
        self.rtpmaps().find(|r| r.payload_type == payload_type)
    }

    /// The `a=fmtp` lines, in order.
    pub fn fmtps(&self) -> impl Iterator<Item = &Fmtp> {
        self.attributes.iter().filter_map(|a| match a {
            Attribute::Fmtp(f) => Some(f),
            _ => None,
        })
    }

    /// The `a=fmtp` for one payload type.
    pub fn fmtp(&self, payload_type: u8) -> Option<&Fmtp> {
        self.fmtps()
            .find(|f| f.payload_type() == Some(payload_type))
    }

    /// The `a=rtcp-fb` lines, in order.
    pub fn rtcp_fbs(&self) -> impl Iterator<Item = &RtcpFb> {
        self.attributes.iter().filter_map(|a| match a {
            Attribute::RtcpFb(r) => Some(r),
            _ => None,
        })
    }

    /// The `a=rtcp-fb` lines that apply to one payload type, wildcard ones included.
    pub fn rtcp_fbs_for(&self, payload_type: u8) -> impl Iterator<Item = &RtcpFb> {
        self.rtcp_fbs()
            .filter(move |r| r.payload_type.is_none_or(|pt| pt == payload_type))
    }

    /// The `a=extmap` lines, in order.
    pub fn extmaps(&self) -> impl Iterator<Item = &Extmap> {
        self.attributes.iter().filter_map(|a| match a {
            Attribute::Extmap(e) => Some(e),
            _ => None,
        })
    }

    /// The `a=extmap` id for a header extension URI.
    pub fn extmap_id(&self, uri: &str) -> Option<u16> {
        self.extmaps().find(|e| e.uri == uri).map(|e| e.id)
    }

    /// The `a=ssrc` lines, in order.
    pub fn ssrcs(&self) -> impl Iterator<Item = &Ssrc> {
        self.attributes.iter().filter_map(|a| match a {
            Attribute::Ssrc(s) => Some(s),
            _ => None,
        })
    }

    /// The `a=ssrc-group` lines, in order.
    pub fn ssrc_groups(&self) -> impl Iterator<Item = &SsrcGroup> {
        self.attributes.iter().filter_map(|a| match a {
            Attribute::SsrcGroup(g) => Some(g),
            _ => None,
        })
    }

    /// The `a=rid` lines, in order.
    pub fn rids(&self) -> impl Iterator<Item = &Rid> {
        self.attributes.iter().filter_map(|a| match a {
            Attribute::Rid(r) => Some(r),
            _ => None,
        })
    }

    /// `a=simulcast`, if present.
    pub fn simulcast(&self) -> Option<&Simulcast> {
        self.attributes.iter().find_map(|a| match a {
            Attribute::Simulcast(s) => Some(s),
            _ => None,
        })
    }

    /// The `a=msid` lines, in order.
    pub fn msids(&self) -> impl Iterator<Item = &Msid> {
        self.attributes.iter().filter_map(|a| match a {
            Attribute::Msid(m) => Some(m),
            _ => None,
        })
    }

    /// `a=sctp-port`, if present (RFC 8841 §5).
    pub fn sctp_port(&self) -> Option<u16> {
        self.attributes.iter().find_map(|a| match a {
            Attribute::SctpPort(p) => Some(*p),
            _ => None,
        })
    }

    /// `a=max-message-size` in bytes, if present (RFC 8841 §6).
    pub fn max_message_size(&self) -> Option<u64> {
        self.attributes.iter().find_map(|a| match a {
            Attribute::MaxMessageSize(s) => Some(*s),
            _ => None,
        })
    }

    /// `a=rtcp`, if present.
    pub fn rtcp(&self) -> Option<&Rtcp> {
        self.attributes.iter().find_map(|a| match a {
            Attribute::Rtcp(r) => Some(r),
            _ => None,
        })
    }

    /// True when `a=rtcp-mux` is present (RFC 5761 §5.1.1).
    pub fn rtcp_mux(&self) -> bool {
        self.attributes.contains(&Attribute::RtcpMux)
    }

    /// True when `a=rtcp-mux-only` is present (RFC 8858 §3).
    pub fn rtcp_mux_only(&self) -> bool {
        self.attributes.contains(&Attribute::RtcpMuxOnly)
    }

    /// True when `a=rtcp-rsize` is present (RFC 5506 §5).
    pub fn rtcp_rsize(&self) -> bool {
        self.attributes.contains(&Attribute::RtcpRsize)
    }

    /// True when `a=bundle-only` is present (RFC 8843).
    pub fn bundle_only(&self) -> bool {
        self.attributes.contains(&Attribute::BundleOnly)
    }
}

super::attribute::common_accessors!(MediaDescription);

/// Writes the section, every line ending in CRLF, in the order RFC 8866 §5 fixes.
impl fmt::Display for MediaDescription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "m={} {}", self.kind, self.port)?;
        if let Some(n) = self.port_count {
            write!(f, "/{n}")?;
        }
        write!(f, " {}", self.proto)?;
        for fmt in &self.formats {
            write!(f, " {fmt}")?;
        }
        f.write_str("\r\n")?;
        if let Some(i) = &self.title {
            write!(f, "i={i}\r\n")?;
        }
        for c in &self.connections {
            write!(f, "c={c}\r\n")?;
        }
        for b in &self.bandwidths {
            write!(f, "b={b}\r\n")?;
        }
        if let Some(k) = &self.key {
            write!(f, "k={k}\r\n")?;
        }
        for a in &self.attributes {
            write!(f, "a={a}\r\n")?;
        }
        Ok(())
    }
}
