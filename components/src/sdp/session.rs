//! The session level of a description (RFC 8866 §5.1–§5.13): origin, name, connection,
//! bandwidth, timing and session attributes, and the media sections that follow.

use std::fmt;

use super::attribute::Attribute;
use super::dtls::{Fingerprint, Setup};
use super::grouping::{Group, MsidSemantic};
use super::media::MediaDescription;
use super::text::{digits, is_non_ws, is_token};
use super::{SdpError, parse};

/// `o=` (RFC 8866 §5.2): `username sess-id sess-version nettype addrtype unicast-address`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Origin {
    /// `-` in JSEP (RFC 8829 §5.2.1).
    pub username: String,
    /// The session id; JSEP keeps it below 2^62.
    pub session_id: u64,
    /// Incremented on each change of the description.
    pub session_version: u64,
    /// `IN`.
    pub net_type: String,
    /// `IP4` or `IP6`.
    pub addr_type: String,
    /// A non-meaningful address in JSEP, such as `0.0.0.0` or `127.0.0.1`.
    pub unicast_address: String,
}

impl Origin {
    /// The origin JSEP recommends (RFC 8829 §5.2.1): user `-` and the non-meaningful
    /// address `IN IP4 0.0.0.0`.
    pub fn new(session_id: u64, session_version: u64) -> Self {
        Self {
            username: "-".to_owned(),
            session_id,
            session_version,
            net_type: "IN".to_owned(),
            addr_type: "IP4".to_owned(),
            unicast_address: "0.0.0.0".to_owned(),
        }
    }

    pub(crate) fn parse(value: &str) -> Option<Self> {
        let words: Vec<&str> = value.split_ascii_whitespace().collect();
        let [username, id, version, net_type, addr_type, address] = words.as_slice() else {
            return None;
        };
        let ok =
            is_non_ws(username) && is_token(net_type) && is_token(addr_type) && is_non_ws(address);
        if !ok {
            return None;
        }
        Some(Self {
            username: (*username).to_owned(),
            session_id: digits(id)?,
            session_version: digits(version)?,
            net_type: (*net_type).to_owned(),
            addr_type: (*addr_type).to_owned(),
            unicast_address: (*address).to_owned(),
        })
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} {} {} {} {}",
            self.username,
            self.session_id,
            self.session_version,
            self.net_type,
            self.addr_type,
            self.unicast_address
        )
    }
}

/// `c=` (RFC 8866 §5.7), also the tail of `a=rtcp`: `nettype addrtype connection-address`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Connection {
    /// `IN`.
    pub net_type: String,
    /// `IP4` or `IP6`.
    pub addr_type: String,
    /// The address as written (a multicast one may carry `/ttl/count`).
    pub address: String,
}

impl Connection {
    /// `IN IP4 <addr>` or `IN IP6 <addr>`.
    pub fn new(address: std::net::IpAddr) -> Self {
        let addr_type = if address.is_ipv4() { "IP4" } else { "IP6" };
        Self {
            net_type: "IN".to_owned(),
            addr_type: addr_type.to_owned(),
            address: address.to_string(),
        }
    }

    pub(crate) fn parse(value: &str) -> Option<Self> {
        let words: Vec<&str> = value.split_ascii_whitespace().collect();
        let [net_type, addr_type, address] = words.as_slice() else {
            return None;
        };
        let ok = is_token(net_type) && is_token(addr_type) && is_non_ws(address);
        ok.then(|| Self {
            net_type: (*net_type).to_owned(),
            addr_type: (*addr_type).to_owned(),
            address: (*address).to_owned(),
        })
    }
}

impl fmt::Display for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} {}", self.net_type, self.addr_type, self.address)
    }
}

/// `b=` (RFC 8866 §5.8): `bwtype ":" bandwidth`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Bandwidth {
    /// `AS` (kbit/s), `TIAS` (bit/s, RFC 3890), `CT`, ...
    pub bwtype: String,
    /// The number, in the unit `bwtype` implies.
    pub bandwidth: u64,
}

impl Bandwidth {
    pub(crate) fn parse(value: &str) -> Option<Self> {
        let (bwtype, bandwidth) = value.split_once(':')?;
        if !is_token(bwtype) {
            return None;
        }
        Some(Self {
            bwtype: bwtype.to_owned(),
            bandwidth: digits(bandwidth)?,
        })
    }
}

impl fmt::Display for Bandwidth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.bwtype, self.bandwidth)
    }
}

/// One time description (RFC 8866 §5.9–§5.11): `t=` with its `r=` and `z=` lines, which
/// are kept as written.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Timing {
    /// Start, in NTP seconds; 0 in JSEP.
    pub start: u64,
    /// Stop, in NTP seconds; 0 in JSEP.
    pub stop: u64,
    /// The `r=` lines that follow.
    pub repeats: Vec<String>,
    /// The `z=` line that follows, if any.
    pub zone: Option<String>,
}

impl Timing {
    /// `t=0 0`: an unbounded session, what JSEP writes (RFC 8829 §5.2.1).
    pub fn unbounded() -> Self {
        Self {
            start: 0,
            stop: 0,
            repeats: Vec::new(),
            zone: None,
        }
    }

    pub(crate) fn parse(value: &str) -> Option<Self> {
        let (start, stop) = value.split_once(' ')?;
        Some(Self {
            start: digits(start)?,
            stop: digits(stop)?,
            repeats: Vec::new(),
            zone: None,
        })
    }
}

/// A whole session description (RFC 8866 §5): the session level, then the media sections.
///
/// `v=0` is implied (the only version there is). Fields for lines JSEP does not use
/// (`i=`, `u=`, `e=`, `p=`, `k=`, `r=`, `z=`) keep their text so nothing is lost.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SessionDescription {
    /// `o=`.
    pub origin: Origin,
    /// `s=`; `-` in JSEP.
    pub session_name: String,
    /// `i=`.
    pub information: Option<String>,
    /// `u=`.
    pub uri: Option<String>,
    /// `e=` lines.
    pub emails: Vec<String>,
    /// `p=` lines.
    pub phones: Vec<String>,
    /// Session-level `c=`.
    pub connection: Option<Connection>,
    /// Session-level `b=` lines.
    pub bandwidths: Vec<Bandwidth>,
    /// The time descriptions; at least one.
    pub timings: Vec<Timing>,
    /// `k=` (obsolete, RFC 8866 §5.12).
    pub key: Option<String>,
    /// Session attributes, in order.
    pub attributes: Vec<Attribute>,
    /// Media sections, in order.
    pub media: Vec<MediaDescription>,
}

impl SessionDescription {
    /// An empty description in the JSEP shape: `s=-`, `t=0 0`, no attributes or media.
    pub fn new(origin: Origin) -> Self {
        Self {
            origin,
            session_name: "-".to_owned(),
            information: None,
            uri: None,
            emails: Vec::new(),
            phones: Vec::new(),
            connection: None,
            bandwidths: Vec::new(),
            timings: vec![Timing::unbounded()],
            key: None,
            attributes: Vec::new(),
            media: Vec::new(),
        }
    }

    /// Parses a description. Lines may end in CRLF or LF. Never panics; anything over a
    /// limit or off the grammar is an [`SdpError`].
    pub fn parse(input: &str) -> Result<Self, SdpError> {
        parse::parse(input)
    }

    /// Parses a description from bytes, which must be UTF-8.
    pub fn parse_bytes(input: &[u8]) -> Result<Self, SdpError> {
        if input.len() > super::MAX_SDP_LEN {
            return Err(SdpError::TooLarge { len: input.len() });
        }
        let text = std::str::from_utf8(input).map_err(|_| SdpError::NotUtf8)?;
        Self::parse(text)
    }

    /// The description as text, every line ending in CRLF.
    pub fn to_sdp_string(&self) -> String {
        self.to_string()
    }

    /// Appends a session attribute.
    pub fn push_attribute(&mut self, attribute: Attribute) -> &mut Self {
        self.attributes.push(attribute);
        self
    }

    /// Appends a media section.
    pub fn push_media(&mut self, media: MediaDescription) -> &mut Self {
        self.media.push(media);
        self
    }

    /// The `group` attributes.
    pub fn groups(&self) -> impl Iterator<Item = &Group> {
        self.attributes.iter().filter_map(|a| match a {
            Attribute::Group(g) => Some(g),
            _ => None,
        })
    }

    /// The mids of the first BUNDLE group (RFC 8843), if there is one.
    pub fn bundle_mids(&self) -> Option<&[String]> {
        self.groups()
            .find(|g| g.is_bundle())
            .map(|g| g.mids.as_slice())
    }

    /// True when `a=ice-lite` is present (RFC 8839 §5.3).
    pub fn ice_lite(&self) -> bool {
        self.attributes.contains(&Attribute::IceLite)
    }

    /// `a=msid-semantic`, if present.
    pub fn msid_semantic(&self) -> Option<&MsidSemantic> {
        self.attributes.iter().find_map(|a| match a {
            Attribute::MsidSemantic(m) => Some(m),
            _ => None,
        })
    }

    /// True when `a=extmap-allow-mixed` is present at session level (RFC 8285 §6).
    pub fn extmap_allow_mixed(&self) -> bool {
        self.attributes.contains(&Attribute::ExtmapAllowMixed)
    }

    /// The media section whose `a=mid` is `mid`.
    pub fn media_by_mid(&self, mid: &str) -> Option<&MediaDescription> {
        self.media.iter().find(|m| m.mid() == Some(mid))
    }

    /// The ICE ufrag and password that apply to `media`: its own, else the session's
    /// (RFC 8839 §5.4: the media-level value wins).
    pub fn ice_credentials_for<'a>(
        &'a self,
        media: &'a MediaDescription,
    ) -> Option<(&'a str, &'a str)> {
        let ufrag = media.ice_ufrag().or_else(|| self.ice_ufrag())?;
        let pwd = media.ice_pwd().or_else(|| self.ice_pwd())?;
        Some((ufrag, pwd))
    }

    /// The fingerprints that apply to `media`: its own if it has any, else the session's
    /// (RFC 8122 §5).
    pub fn fingerprints_for<'a>(
        &'a self,
        media: &'a MediaDescription,
    ) -> impl Iterator<Item = &'a Fingerprint> {
        let own = media.fingerprints().next().is_some();
        let attrs = if own {
            &media.attributes
        } else {
            &self.attributes
        };
        attrs.iter().filter_map(|a| match a {
            Attribute::Fingerprint(f) => Some(f),
            _ => None,
        })
    }

    /// The `setup` role that applies to `media`: its own, else the session's (RFC 4145 §4).
    pub fn setup_for(&self, media: &MediaDescription) -> Option<Setup> {
        media.setup().or_else(|| self.setup())
    }
}

super::attribute::common_accessors!(SessionDescription);

/// Writes the description, every line ending in CRLF (RFC 8866 §5), in the order §5 fixes.
impl fmt::Display for SessionDescription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v=0\r\no={}\r\ns={}\r\n", self.origin, self.session_name)?;
        if let Some(i) = &self.information {
            write!(f, "i={i}\r\n")?;
        }
        if let Some(u) = &self.uri {
            write!(f, "u={u}\r\n")?;
        }
        for e in &self.emails {
            write!(f, "e={e}\r\n")?;
        }
        for p in &self.phones {
            write!(f, "p={p}\r\n")?;
        }
        if let Some(c) = &self.connection {
            write!(f, "c={c}\r\n")?;
        }
        for b in &self.bandwidths {
            write!(f, "b={b}\r\n")?;
        }
        for t in &self.timings {
            write!(f, "t={} {}\r\n", t.start, t.stop)?;
            for r in &t.repeats {
                write!(f, "r={r}\r\n")?;
            }
            if let Some(z) = &t.zone {
                write!(f, "z={z}\r\n")?;
            }
        }
        if let Some(k) = &self.key {
            write!(f, "k={k}\r\n")?;
        }
        for a in &self.attributes {
            write!(f, "a={a}\r\n")?;
        }
        for m in &self.media {
            write!(f, "{m}")?;
        }
        Ok(())
    }
}
