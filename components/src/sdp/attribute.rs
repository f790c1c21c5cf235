//! One `a=` line as a typed value (RFC 8866 §5.13, §6): the attributes JSEP uses, and
//! every other attribute kept verbatim so it serializes back as it came.

use std::fmt;

use super::SdpError;
use super::candidate::Candidate;
use super::dtls::{Fingerprint, Setup};
use super::grouping::{Group, Msid, MsidSemantic};
use super::rtp::{Direction, Extmap, Fmtp, Rtcp, RtcpFb, RtpMap, Ssrc, SsrcGroup};
use super::simulcast::{Rid, Simulcast};
use super::text::{digits, is_ice_chars, is_token};

/// RFC 8839 §5.4: `ufrag = 4*256ice-char`.
const UFRAG_LEN: std::ops::RangeInclusive<usize> = 4..=256;
/// RFC 8839 §5.4: `password = 22*256ice-char`.
const PWD_LEN: std::ops::RangeInclusive<usize> = 22..=256;
/// RFC 5888 §4 makes a mid a `token`; this bounds its length.
const MAX_MID_LEN: usize = 256;

/// One attribute (`a=<name>[:<value>]`, RFC 8866 §9 `attribute`).
///
/// Sections keep their attributes in one ordered `Vec<Attribute>`, so a description
/// serializes back in the order it was written.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Attribute {
    /// `group` (RFC 5888 §5), such as `group:BUNDLE 0 1 2` (RFC 8843).
    Group(Group),
    /// `ice-lite` (RFC 8839 §5.3): the agent is a lite implementation.
    IceLite,
    /// `ice-ufrag` (RFC 8839 §5.4).
    IceUfrag(String),
    /// `ice-pwd` (RFC 8839 §5.4).
    IcePwd(String),
    /// `ice-options` (RFC 8839 §5.6): option tags such as `trickle`.
    IceOptions(Vec<String>),
    /// `fingerprint` (RFC 8122 §5).
    Fingerprint(Fingerprint),
    /// `setup` (RFC 4145 §4).
    Setup(Setup),
    /// `msid-semantic` (pre-RFC 8830 drafts; libwebrtc still writes it).
    MsidSemantic(MsidSemantic),
    /// `extmap-allow-mixed` (RFC 8285 §6): one- and two-byte header extensions may mix.
    ExtmapAllowMixed,
    /// `mid` (RFC 5888 §4): the section's identification tag.
    Mid(String),
    /// `bundle-only` (RFC 8843): the section is only usable inside its BUNDLE group.
    BundleOnly,
    /// `rtpmap` (RFC 8866 §6.6).
    RtpMap(RtpMap),
    /// `fmtp` (RFC 8866 §6.15).
    Fmtp(Fmtp),
    /// `rtcp-fb` (RFC 4585 §4.2).
    RtcpFb(RtcpFb),
    /// `extmap` (RFC 8285 §8).
    Extmap(Extmap),
    /// `ssrc` (RFC 5576 §4.1).
    Ssrc(Ssrc),
    /// `ssrc-group` (RFC 5576 §4.2).
    SsrcGroup(SsrcGroup),
    /// `rid` (RFC 8851).
    Rid(Rid),
    /// `simulcast` (RFC 8853).
    Simulcast(Simulcast),
    /// `msid` (RFC 8830 §2).
    Msid(Msid),
    /// `sctp-port` (RFC 8841 §5): the SCTP port inside the DTLS association.
    SctpPort(u16),
    /// `max-message-size` (RFC 8841 §6): the largest SCTP user message accepted, in bytes.
    MaxMessageSize(u64),
    /// `candidate` (RFC 8839 §5.1).
    Candidate(Candidate),
    /// `end-of-candidates` (RFC 8840): no more candidates will follow.
    EndOfCandidates,
    /// `sendrecv`, `sendonly`, `recvonly` or `inactive` (RFC 8866 §6.7).
    Direction(Direction),
    /// `rtcp-mux` (RFC 5761 §5.1.1): RTP and RTCP share one port.
    RtcpMux,
    /// `rtcp-mux-only` (RFC 8858 §3): the offerer can only do rtcp-mux.
    RtcpMuxOnly,
    /// `rtcp-rsize` (RFC 5506 §5): reduced-size RTCP.
    RtcpRsize,
    /// `rtcp` (RFC 3605 §2.1).
    Rtcp(Rtcp),
    /// Any other attribute, kept verbatim: RFC 8866 §5 has a parser ignore attributes it
    /// does not understand, and keeping them lets the description round-trip.
    Other {
        /// The name before the first `:`.
        name: String,
        /// Everything after the first `:`, as written, if there was a `:`.
        value: Option<String>,
    },
}

/// Why [`parse_value`] refused a value: the attribute's name, for [`SdpError`].
pub(crate) struct Invalid(pub &'static str);

impl Attribute {
    /// Parses one attribute from the text after `a=`. Errors report line 1.
    pub fn parse(text: &str) -> Result<Self, SdpError> {
        parse_text(text).map_err(|e| match e {
            None => SdpError::Malformed { line: 1 },
            Some(Invalid(name)) => SdpError::InvalidAttribute { line: 1, name },
        })
    }

    /// An attribute this model has no type for.
    pub fn other(name: &str, value: Option<&str>) -> Self {
        Self::Other {
            name: name.to_owned(),
            value: value.map(str::to_owned),
        }
    }

    /// The attribute name as written before `:`.
    pub fn name(&self) -> &str {
        match self {
            Self::Group(_) => "group",
            Self::IceLite => "ice-lite",
            Self::IceUfrag(_) => "ice-ufrag",
            Self::IcePwd(_) => "ice-pwd",
            Self::IceOptions(_) => "ice-options",
            Self::Fingerprint(_) => "fingerprint",
            Self::Setup(_) => "setup",
            Self::MsidSemantic(_) => "msid-semantic",
            Self::ExtmapAllowMixed => "extmap-allow-mixed",
            Self::Mid(_) => "mid",
            Self::BundleOnly => "bundle-only",
            Self::RtpMap(_) => "rtpmap",
            Self::Fmtp(_) => "fmtp",
            Self::RtcpFb(_) => "rtcp-fb",
            Self::Extmap(_) => "extmap",
            Self::Ssrc(_) => "ssrc",
            Self::SsrcGroup(_) => "ssrc-group",
            Self::Rid(_) => "rid",
            Self::Simulcast(_) => "simulcast",
            Self::Msid(_) => "msid",
            Self::SctpPort(_) => "sctp-port",
            Self::MaxMessageSize(_) => "max-message-size",
            Self::Candidate(_) => "candidate",
            Self::EndOfCandidates => "end-of-candidates",
            Self::Direction(d) => d.as_str(),
            Self::RtcpMux => "rtcp-mux",
            Self::RtcpMuxOnly => "rtcp-mux-only",
            Self::RtcpRsize => "rtcp-rsize",
            Self::Rtcp(_) => "rtcp",
            Self::Other { name, .. } => name,
        }
    }
}

/// Parses the text after `a=`: `None` for a line that is not `attribute-name [":" value]`
/// at all, `Some(Invalid)` for a known attribute with a bad value.
pub(crate) fn parse_text(text: &str) -> Result<Attribute, Option<Invalid>> {
    let (name, value) = match text.split_once(':') {
        Some((n, v)) => (n, Some(v)),
        None => (text, None),
    };
    if !is_token(name) {
        return Err(None);
    }
    match value {
        None => Ok(parse_flag(name)),
        Some(value) => parse_value(name, value).map_err(Some),
    }
}

/// An attribute written without a value (`a=rtcp-mux`).
fn parse_flag(name: &str) -> Attribute {
    match name {
        "ice-lite" => Attribute::IceLite,
        "extmap-allow-mixed" => Attribute::ExtmapAllowMixed,
        "bundle-only" => Attribute::BundleOnly,
        "end-of-candidates" => Attribute::EndOfCandidates,
        "rtcp-mux" => Attribute::RtcpMux,
        "rtcp-mux-only" => Attribute::RtcpMuxOnly,
        "rtcp-rsize" => Attribute::RtcpRsize,
        _ => match Direction::parse(name) {
            Some(d) => Attribute::Direction(d),
            None => Attribute::other(name, None),
        },
    }
}

/// An attribute written with a value (`a=mid:0`). A flag name with a value, or a
/// valued name without one, is kept as [`Attribute::Other`]: it is not the attribute
/// its RFC defines.
fn parse_value(name: &str, value: &str) -> Result<Attribute, Invalid> {
    use Attribute as A;
    let (known, attr): (&'static str, Option<Attribute>) = match name {
        "group" => ("group", Group::parse(value).map(A::Group)),
        "ice-ufrag" => ("ice-ufrag", ice_string(value, UFRAG_LEN).map(A::IceUfrag)),
        "ice-pwd" => ("ice-pwd", ice_string(value, PWD_LEN).map(A::IcePwd)),
        "ice-options" => ("ice-options", ice_options(value).map(A::IceOptions)),
        "fingerprint" => ("fingerprint", Fingerprint::parse(value).map(A::Fingerprint)),
        "setup" => ("setup", Setup::parse(value).map(A::Setup)),
        "msid-semantic" => (
            "msid-semantic",
            MsidSemantic::parse(value).map(A::MsidSemantic),
        ),
        "mid" => ("mid", mid(value).map(A::Mid)),
        "rtpmap" => ("rtpmap", RtpMap::parse(value).map(A::RtpMap)),
        "fmtp" => ("fmtp", Fmtp::parse(value).map(A::Fmtp)),
        "rtcp-fb" => ("rtcp-fb", RtcpFb::parse(value).map(A::RtcpFb)),
        "extmap" => ("extmap", Extmap::parse(value).map(A::Extmap)),
        "ssrc" => ("ssrc", Ssrc::parse(value).map(A::Ssrc)),
        "ssrc-group" => ("ssrc-group", SsrcGroup::parse(value).map(A::SsrcGroup)),
        "rid" => ("rid", Rid::parse(value).map(A::Rid)),
        "simulcast" => ("simulcast", Simulcast::parse(value).map(A::Simulcast)),
        "msid" => ("msid", Msid::parse(value).map(A::Msid)),
        "sctp-port" => ("sctp-port", digits(value).map(A::SctpPort)),
        "max-message-size" => ("max-message-size", digits(value).map(A::MaxMessageSize)),
        "candidate" => ("candidate", Candidate::parse_value(value).map(A::Candidate)),
        "rtcp" => ("rtcp", Rtcp::parse(value).map(A::Rtcp)),
        _ => return Ok(A::other(name, Some(value))),
    };
    attr.ok_or(Invalid(known))
}

/// RFC 5888 §4: a mid is a `token`.
fn mid(value: &str) -> Option<String> {
    (is_token(value) && value.len() <= MAX_MID_LEN).then(|| value.to_owned())
}

/// `ice-ufrag` / `ice-pwd` values: `ice-char`s within the RFC 8839 §5.4 lengths.
fn ice_string(value: &str, len: std::ops::RangeInclusive<usize>) -> Option<String> {
    (len.contains(&value.len()) && is_ice_chars(value)).then(|| value.to_owned())
}

/// RFC 8839 §5.6: `ice-option-tag *(SP ice-option-tag)`, `ice-option-tag = 1*ice-char`.
fn ice_options(value: &str) -> Option<Vec<String>> {
    value
        .split_ascii_whitespace()
        .map(|t| is_ice_chars(t).then(|| t.to_owned()))
        .collect::<Option<Vec<_>>>()
        .filter(|tags| !tags.is_empty())
}

/// Writes the text after `a=`: `name[:value]`.
impl fmt::Display for Attribute {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = self.name();
        match self {
            Self::Group(v) => write!(f, "{name}:{v}"),
            Self::IceUfrag(v) | Self::IcePwd(v) | Self::Mid(v) => write!(f, "{name}:{v}"),
            Self::IceOptions(tags) => write!(f, "{name}:{}", tags.join(" ")),
            Self::Fingerprint(v) => write!(f, "{name}:{v}"),
            Self::Setup(v) => write!(f, "{name}:{v}"),
            Self::MsidSemantic(v) => write!(f, "{name}:{v}"),
            Self::RtpMap(v) => write!(f, "{name}:{v}"),
            Self::Fmtp(v) => write!(f, "{name}:{v}"),
            Self::RtcpFb(v) => write!(f, "{name}:{v}"),
            Self::Extmap(v) => write!(f, "{name}:{v}"),
            Self::Ssrc(v) => write!(f, "{name}:{v}"),
            Self::SsrcGroup(v) => write!(f, "{name}:{v}"),
            Self::Rid(v) => write!(f, "{name}:{v}"),
            Self::Simulcast(v) => write!(f, "{name}:{v}"),
            Self::Msid(v) => write!(f, "{name}:{v}"),
            Self::SctpPort(v) => write!(f, "{name}:{v}"),
            Self::MaxMessageSize(v) => write!(f, "{name}:{v}"),
            Self::Candidate(v) => write!(f, "{name}:{v}"),
            Self::Rtcp(v) => write!(f, "{name}:{v}"),
            Self::Other {
                value: Some(value), ..
            } => write!(f, "{name}:{value}"),
            Self::IceLite
            | Self::ExtmapAllowMixed
            | Self::BundleOnly
            | Self::EndOfCandidates
            | Self::Direction(_)
            | Self::RtcpMux
            | Self::RtcpMuxOnly
            | Self::RtcpRsize
            | Self::Other { value: None, .. } => f.write_str(name),
        }
    }
}

/// Accessors both levels share, since `ice-ufrag`, `ice-pwd`, `ice-options`,
/// `fingerprint` and `setup` may appear at either (RFC 8839 §5.4, §5.6; RFC 8122 §5;
/// RFC 4145 §4). `$ty` must have an `attributes: Vec<Attribute>` field.
macro_rules! common_accessors {
    ($ty:ty) => {
        impl $ty {
            /// `a=ice-ufrag` at this level, if present.
            pub fn ice_ufrag(&self) -> Option<&str> {
                self.attributes.iter().find_map(|a| match a {
                    $crate::sdp::Attribute::IceUfrag(u) => Some(u.as_str()),
                    _ => None,
                })
            }

            /// `a=ice-pwd` at this level, if present.
            pub fn ice_pwd(&self) -> Option<&str> {
                self.attributes.iter().find_map(|a| match a {
                    $crate::sdp::Attribute::IcePwd(p) => Some(p.as_str()),
                    _ => None,
                })
            }

            /// `a=ice-options` tags at this level, if present.
            pub fn ice_options(&self) -> Option<&[String]> {
                self.attributes.iter().find_map(|a| match a {
                    $crate::sdp::Attribute::IceOptions(o) => Some(o.as_slice()),
                    _ => None,
                })
            }

            /// Every `a=fingerprint` at this level, in order (RFC 8122 §5.1 allows several).
            pub fn fingerprints(&self) -> impl Iterator<Item = &$crate::sdp::Fingerprint> {
                self.attributes.iter().filter_map(|a| match a {
                    $crate::sdp::Attribute::Fingerprint(f) => Some(f),
                    _ => None,
                })
            }

            /// The first `a=fingerprint` at this level.
            pub fn fingerprint(&self) -> Option<&$crate::sdp::Fingerprint> {
                self.fingerprints().next()
            }

            /// `a=setup` at this level, if present.
            pub fn setup(&self) -> Option<$crate::sdp::Setup> {
                self.attributes.iter().find_map(|a| match a {
                    $crate::sdp::Attribute::Setup(s) => Some(*s),
                    _ => None,
                })
            }

            /// Every attribute at this level with this name, typed or not.
            pub fn attributes_named<'a>(
                &'a self,
                name: &'a str,
            ) -> impl Iterator<Item = &'a $crate::sdp::Attribute> {
                self.attributes.iter().filter(move |a| a.name() == name)
            }
        }
    };
}

pub(crate) use common_accessors;
