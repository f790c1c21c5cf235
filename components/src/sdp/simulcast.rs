//! RTP stream identifiers (`a=rid`, RFC 8851) and simulcast (`a=simulcast`, RFC 8853).
//!
//! ```text
//! rid-syntax        = %s"a=rid:" rid-id SP rid-dir
//!                     [ rid-pt-param-list / rid-param-list ]
//! rid-id            = 1*(alpha-numeric / "-" / "_")
//! rid-dir           = %s"send" / %s"recv"
//! rid-pt-param-list = SP rid-fmt-list *(";" rid-param)
//! rid-param-list    = SP rid-param *(";" rid-param)
//! rid-fmt-list      = %s"pt=" fmt *( "," fmt )
//!
//! sc-value     = ( sc-send [SP sc-recv] ) / ( sc-recv [SP sc-send] )
//! sc-send      = %s"send" SP sc-str-list
//! sc-recv      = %s"recv" SP sc-str-list
//! sc-str-list  = sc-alt-list *( ";" sc-alt-list )
//! sc-alt-list  = sc-id *( "," sc-id )
//! sc-id-paused = "~"
//! sc-id        = [sc-id-paused] rid-id
//! ```

use std::fmt;

use super::text::{is_non_ws, is_rid_id, is_token};

/// Which way a rid or a simulcast list points (RFC 8851 `rid-dir`, RFC 8853).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RidDirection {
    /// `send`: streams the writer of the description sends.
    Send,
    /// `recv`: streams it receives.
    Recv,
}

impl RidDirection {
    fn parse(s: &str) -> Option<Self> {
        match s {
            "send" => Some(Self::Send),
            "recv" => Some(Self::Recv),
            _ => None,
        }
    }

    /// The token as written.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Send => "send",
            Self::Recv => "recv",
        }
    }

    /// The other direction, as an answer names it.
    pub fn reversed(self) -> Self {
        match self {
            Self::Send => Self::Recv,
            Self::Recv => Self::Send,
        }
    }
}

impl fmt::Display for RidDirection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One restriction of a rid (`max-width=1280`, `max-fps=30`, ...), as written.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RidRestriction {
    /// The parameter name.
    pub name: String,
    /// Its value after `=`, when it has one.
    pub value: Option<String>,
}

/// `a=rid` (RFC 8851): one RTP stream identifier with its direction and restrictions.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Rid {
    /// The rid, as carried in the RtpStreamId header extension.
    pub id: String,
    /// Send or receive.
    pub direction: RidDirection,
    /// The `pt=` list, empty when absent.
    pub formats: Vec<String>,
    /// The restrictions after the `pt=` list, in order.
    pub restrictions: Vec<RidRestriction>,
}

impl Rid {
    /// A rid with no format list or restrictions.
    pub fn new(id: &str, direction: RidDirection) -> Self {
        Self {
            id: id.to_owned(),
            direction,
            formats: Vec::new(),
            restrictions: Vec::new(),
        }
    }

    pub(crate) fn parse(value: &str) -> Option<Self> {
        let mut words = value.splitn(3, ' ');
        let id = words.next()?;
        let direction = RidDirection::parse(words.next()?)?;
        if !is_rid_id(id) {
            return None;
        }
        let mut rid = Self::new(id, direction);
        let Some(params) = words.next() else {
            return Some(rid);
        };
        for (i, param) in params.split(';').enumerate() {
            let (name, value) = match param.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (param, None),
            };
            if i == 0 && name == "pt" {
                let list = value?;
                rid.formats = list
                    .split(',')
                    .map(|f| is_token(f).then(|| f.to_owned()))
                    .collect::<Option<Vec<_>>>()?;
                continue;
            }
            // Only the first parameter may be the pt= list.
            if name == "pt" || !is_token(name) || !value.is_none_or(is_non_ws) {
                return None;
            }
            rid.restrictions.push(RidRestriction {
                name: name.to_owned(),
                value: value.map(str::to_owned),
            });
        }
        Some(rid)
    }

    /// The value of one restriction, such as `max-width`.
    pub fn restriction(&self, name: &str) -> Option<&str> {
        self.restrictions
            .iter()
            .find(|r| r.name == name)
            .and_then(|r| r.value.as_deref())
    }
}

impl fmt::Display for Rid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.id, self.direction)?;
        let mut sep = " ";
        if !self.formats.is_empty() {
            write!(f, " pt={}", self.formats.join(","))?;
            sep = ";";
        }
        for r in &self.restrictions {
            write!(f, "{sep}{}", r.name)?;
            if let Some(v) = &r.value {
                write!(f, "={v}")?;
            }
            sep = ";";
        }
        Ok(())
    }
}

/// One rid in a simulcast list (RFC 8853 `sc-id`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SimulcastRid {
    /// The rid.
    pub rid: String,
    /// Written with a leading `~`: offered but paused.
    pub paused: bool,
}

/// The streams of one direction (RFC 8853 `sc-send` or `sc-recv`): each entry is one
/// simulcast stream, given as one or more alternative rids.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SimulcastStreams {
    /// Send or receive.
    pub direction: RidDirection,
    /// The streams in order (RFC 8853: first is preferred), each a list of alternatives.
    pub streams: Vec<Vec<SimulcastRid>>,
}

impl SimulcastStreams {
    /// One stream per rid, none paused, no alternatives.
    pub fn new(direction: RidDirection, rids: &[&str]) -> Self {
        let streams = rids
            .iter()
            .map(|r| {
                vec![SimulcastRid {
                    rid: (*r).to_owned(),
                    paused: false,
                }]
            })
            .collect();
        Self { direction, streams }
    }

    fn parse(direction: &str, list: &str) -> Option<Self> {
        let direction = RidDirection::parse(direction)?;
        let streams = list
            .split(';')
            .map(|alternatives| {
                alternatives
                    .split(',')
                    .map(|id| {
                        let (rid, paused) = match id.strip_prefix('~') {
                            Some(rid) => (rid, true),
                            None => (id, false),
                        };
                        is_rid_id(rid).then(|| SimulcastRid {
                            rid: rid.to_owned(),
                            paused,
                        })
                    })
                    .collect::<Option<Vec<_>>>()
            })
            .collect::<Option<Vec<_>>>()?;
        Some(Self { direction, streams })
    }

    /// The first alternative of each stream, in order.
    pub fn rids(&self) -> impl Iterator<Item = &str> {
        self.streams
            .iter()
            .filter_map(|alts| alts.first())
            .map(|r| r.rid.as_str())
    }
}

impl fmt::Display for SimulcastStreams {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ", self.direction)?;
        for (i, alternatives) in self.streams.iter().enumerate() {
            if i > 0 {
                f.write_str(";")?;
            }
            for (j, r) in alternatives.iter().enumerate() {
                if j > 0 {
                    f.write_str(",")?;
                }
                if r.paused {
                    f.write_str("~")?;
                }
                f.write_str(&r.rid)?;
            }
        }
        Ok(())
    }
}

/// `a=simulcast` (RFC 8853): one or two stream lists, at most one per direction, in the
/// order written.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Simulcast {
    /// One or two lists of distinct directions.
    pub lists: Vec<SimulcastStreams>,
}

impl Simulcast {
    pub(crate) fn parse(value: &str) -> Option<Self> {
        let words: Vec<&str> = value.split_ascii_whitespace().collect();
        let lists = match words.as_slice() {
            [d, l] => vec![SimulcastStreams::parse(d, l)?],
            [d1, l1, d2, l2] => {
                let a = SimulcastStreams::parse(d1, l1)?;
                let b = SimulcastStreams::parse(d2, l2)?;
                if a.direction == b.direction {
                    return None;
                }
                vec![a, b]
            }
            _ => return None,
        };
        Some(Self { lists })
    }

    /// The `send` list, if any.
    pub fn send(&self) -> Option<&SimulcastStreams> {
        self.lists
            .iter()
            .find(|l| l.direction == RidDirection::Send)
    }

    /// The `recv` list, if any.
    pub fn recv(&self) -> Option<&SimulcastStreams> {
        self.lists
            .iter()
            .find(|l| l.direction == RidDirection::Recv)
    }
}

impl fmt::Display for Simulcast {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, list) in self.lists.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{list}")?;
        }
        Ok(())
    }
}
