//! The ICE `candidate` attribute of RFC 8839 §5.1, with the TCP candidate type of RFC 6544.
//!
//! ```text
//! candidate-attribute   = "candidate" ":" foundation SP component-id SP
//!                         transport SP priority SP
//!                         connection-address SP port
//!                         SP cand-type [SP rel-addr] [SP rel-port]
//!                         *(SP cand-extension)
//! foundation            = 1*32ice-char
//! component-id          = 1*3DIGIT
//! priority              = 1*10DIGIT
//! cand-type             = "typ" SP candidate-types
//! candidate-types       = "host" / "srflx" / "prflx" / "relay" / token
//! rel-addr              = "raddr" SP connection-address
//! rel-port              = "rport" SP port
//! cand-extension        = extension-att-name SP extension-att-value
//! ```

use std::fmt;
use std::net::IpAddr;

use super::SdpError;
use super::text::{digits, is_ice_chars, is_non_ws, is_token};

/// RFC 8839 §5.1: a foundation is at most 32 `ice-char`s.
const MAX_FOUNDATION_LEN: usize = 32;
/// RFC 8839 §5.1: `component-id` is a positive integer up to 256.
const MAX_COMPONENT: u16 = 256;

/// The kind of candidate (RFC 8839 §5.1 `candidate-types`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum CandidateType {
    /// `host`: an address on the agent's own interface.
    Host,
    /// `srflx`: server reflexive, learned from a STUN server.
    ServerReflexive,
    /// `prflx`: peer reflexive, learned from a connectivity check.
    PeerReflexive,
    /// `relay`: allocated on a TURN server.
    Relay,
    /// Any other token, kept as written.
    Other(String),
}

impl CandidateType {
    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "host" => Self::Host,
            "srflx" => Self::ServerReflexive,
            "prflx" => Self::PeerReflexive,
            "relay" => Self::Relay,
            other if is_token(other) => Self::Other(other.to_owned()),
            _ => return None,
        })
    }

    /// The token as it appears after `typ`.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Host => "host",
            Self::ServerReflexive => "srflx",
            Self::PeerReflexive => "prflx",
            Self::Relay => "relay",
            Self::Other(s) => s,
        }
    }
}

impl fmt::Display for CandidateType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a TCP candidate connects (RFC 6544 §4.5 `tcp-type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TcpType {
    /// `active`: opens outgoing connections only.
    Active,
    /// `passive`: accepts incoming connections only.
    Passive,
    /// `so`: simultaneous open.
    SimultaneousOpen,
}

impl TcpType {
    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "active" => Self::Active,
            "passive" => Self::Passive,
            "so" => Self::SimultaneousOpen,
            _ => return None,
        })
    }

    /// The token as it appears after `tcptype`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Active => "active",
            Self::Passive => "passive",
            Self::SimultaneousOpen => "so",
        }
    }
}

/// One ICE candidate (RFC 8839 §5.1).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Candidate {
    /// Up to 32 `ice-char`s; equal for candidates of one type, base and server.
    pub foundation: String,
    /// 1 for RTP (and everything under rtcp-mux), 2 for RTCP.
    pub component: u16,
    /// The transport token as written (`udp`, `UDP`, `tcp`, ...); case is kept so the
    /// line serializes back the same.
    pub transport: String,
    /// RFC 8445 §5.1.2 priority.
    pub priority: u32,
    /// IPv4 or IPv6 literal, or a name (an mDNS `.local` name from a browser).
    pub address: String,
    /// The candidate's port.
    pub port: u16,
    /// The candidate type.
    pub typ: CandidateType,
    /// `raddr`: the related address, for reflexive and relayed candidates.
    pub related_address: Option<String>,
    /// `rport`: the related port.
    pub related_port: Option<u16>,
    /// `tcptype` (RFC 6544), written right after `rport` as browsers do.
    pub tcp_type: Option<TcpType>,
    /// The other name/value pairs, in order (`generation`, `ufrag`, `network-id`,
    /// `network-cost`, ...). RFC 8839 §5.1 says to ignore the ones not understood; they
    /// are kept so the line round-trips.
    pub extensions: Vec<(String, String)>,
}

impl Candidate {
    /// A UDP host candidate with no extensions.
    pub fn host_udp(foundation: &str, priority: u32, address: IpAddr, port: u16) -> Self {
        Self {
            foundation: foundation.to_owned(),
            component: 1,
            transport: "udp".to_owned(),
            priority,
            address: address.to_string(),
            port,
            typ: CandidateType::Host,
            related_address: None,
            related_port: None,
            tcp_type: None,
            extensions: Vec::new(),
        }
    }

    /// A passive TCP host candidate (RFC 6544 §4.5: the port is the listening one)
    /// with no extensions.
    pub fn host_tcp_passive(foundation: &str, priority: u32, address: IpAddr, port: u16) -> Self {
        Self {
            transport: "tcp".to_owned(),
            tcp_type: Some(TcpType::Passive),
            ..Self::host_udp(foundation, priority, address, port)
        }
    }

    /// Parses a candidate as JSEP hands it around: the attribute value, optionally
    /// preceded by `candidate:` or `a=candidate:` (a foundation holds no `:`, so the
    /// prefixes cannot be confused with it).
    pub fn parse(text: &str) -> Result<Self, SdpError> {
        let value = text.strip_prefix("a=").unwrap_or(text);
        let value = value.strip_prefix("candidate:").unwrap_or(value);
        Self::parse_value(value).ok_or(SdpError::InvalidAttribute {
            line: 1,
            name: "candidate",
        })
    }

    /// Parses the attribute value (after `candidate:`).
    pub(crate) fn parse_value(value: &str) -> Option<Self> {
        let mut words = value.split_ascii_whitespace();
        let foundation = words.next()?;
        if foundation.len() > MAX_FOUNDATION_LEN
            || foundation.is_empty()
            || !is_ice_chars(foundation)
        {
            return None;
        }
        let component: u16 = digits(words.next()?)?;
        if component == 0 || component > MAX_COMPONENT {
            return None;
        }
        let transport = words.next()?;
        if !is_token(transport) {
            return None;
        }
        let priority = digits(words.next()?)?;
        let address = words.next()?;
        if !is_non_ws(address) {
            return None;
        }
        let port = digits(words.next()?)?;
        if words.next()? != "typ" {
            return None;
        }
        let typ = CandidateType::parse(words.next()?)?;
        let mut candidate = Self {
            foundation: foundation.to_owned(),
            component,
            transport: transport.to_owned(),
            priority,
            address: address.to_owned(),
            port,
            typ,
            related_address: None,
            related_port: None,
            tcp_type: None,
            extensions: Vec::new(),
        };
        // Name/value pairs follow; raddr, rport and tcptype are typed, the rest kept.
        while let Some(name) = words.next() {
            let value = words.next()?;
            match name {
                "raddr" if candidate.related_address.is_none() && is_non_ws(value) => {
                    candidate.related_address = Some(value.to_owned());
                }
                "rport" if candidate.related_port.is_none() => {
                    candidate.related_port = Some(digits(value)?);
                }
                "tcptype" if candidate.tcp_type.is_none() => {
                    candidate.tcp_type = Some(TcpType::parse(value)?);
                }
                "raddr" | "rport" | "tcptype" => return None,
                _ if is_token(name) && is_non_ws(value) => {
                    candidate
                        .extensions
                        .push((name.to_owned(), value.to_owned()));
                }
                _ => return None,
            }
        }
        Some(candidate)
    }

    /// The address as an IP literal, or `None` for a name (such as an mDNS `.local` name),
    /// which RFC 8839 §5.1 says an agent that cannot resolve it must ignore.
    pub fn ip(&self) -> Option<IpAddr> {
        self.address.parse().ok()
    }

    /// True when the transport is UDP (any case).
    pub fn is_udp(&self) -> bool {
        self.transport.eq_ignore_ascii_case("udp")
    }

    /// True when the transport is TCP (any case), RFC 6544.
    pub fn is_tcp(&self) -> bool {
        self.transport.eq_ignore_ascii_case("tcp")
    }

    /// The value of an extension pair, such as `ufrag` or `generation`.
    pub fn extension(&self, name: &str) -> Option<&str> {
        self.extensions
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Writes the attribute value (what follows `candidate:`).
impl fmt::Display for Candidate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} {} {} {} {} typ {}",
            self.foundation,
            self.component,
            self.transport,
            self.priority,
            self.address,
            self.port,
            self.typ
        )?;
        if let Some(raddr) = &self.related_address {
            write!(f, " raddr {raddr}")?;
        }
        if let Some(rport) = self.related_port {
            write!(f, " rport {rport}")?;
        }
        if let Some(tcp_type) = self.tcp_type {
            write!(f, " tcptype {}", tcp_type.as_str())?;
        }
        for (name, value) in &self.extensions {
            write!(f, " {name} {value}")?;
        }
        Ok(())
    }
}
