//! Attribute values that tie sections and tracks together: `group` (RFC 5888 §5, with
//! BUNDLE from RFC 8843), `msid` (RFC 8830 §2) and the legacy `msid-semantic`.

use std::fmt;

use super::text::{is_non_ws, is_token};

/// The `group` semantics of RFC 8843: one transport for every listed section.
pub const BUNDLE: &str = "BUNDLE";

/// `a=group` (RFC 5888 §5): `semantics *(SP identification-tag)`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Group {
    /// `BUNDLE`, `LS`, `FID`, ...
    pub semantics: String,
    /// The `mid`s in the group, in order; for BUNDLE the first is the tagged section.
    pub mids: Vec<String>,
}

impl Group {
    /// A group of `mids` under `semantics`.
    pub fn new(semantics: &str, mids: &[&str]) -> Self {
        Self {
            semantics: semantics.to_owned(),
            mids: mids.iter().map(|m| (*m).to_owned()).collect(),
        }
    }

    pub(crate) fn parse(value: &str) -> Option<Self> {
        let mut words = value.split_ascii_whitespace();
        let semantics = words.next()?;
        if !is_token(semantics) {
            return None;
        }
        let mids = words
            .map(|m| is_token(m).then(|| m.to_owned()))
            .collect::<Option<Vec<_>>>()?;
        Some(Self {
            semantics: semantics.to_owned(),
            mids,
        })
    }

    /// True for a BUNDLE group.
    pub fn is_bundle(&self) -> bool {
        self.semantics == BUNDLE
    }
}

impl fmt::Display for Group {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.semantics)?;
        for mid in &self.mids {
            write!(f, " {mid}")?;
        }
        Ok(())
    }
}

/// `a=msid` (RFC 8830 §2): `msid-id [SP msid-appdata]`, the MediaStream id and, in
/// JSEP, the MediaStreamTrack id.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Msid {
    /// The MediaStream id; `-` means no stream (RFC 8830 §3).
    pub stream_id: String,
    /// The track id (`msid-appdata`), when given.
    pub track_id: Option<String>,
}

/// RFC 8830 §2: `msid-id` and `msid-appdata` are each `1*64token-char`.
const MAX_MSID_LEN: usize = 64;

fn is_msid_part(s: &str) -> bool {
    s.len() <= MAX_MSID_LEN && is_token(s)
}

impl Msid {
    /// A stream id with a track id.
    pub fn new(stream_id: &str, track_id: &str) -> Self {
        Self {
            stream_id: stream_id.to_owned(),
            track_id: Some(track_id.to_owned()),
        }
    }

    pub(crate) fn parse(value: &str) -> Option<Self> {
        let (stream_id, track_id) = match value.split_once(' ') {
            Some((s, t)) => (s, Some(t)),
            None => (value, None),
        };
        if !is_msid_part(stream_id) || !track_id.is_none_or(is_msid_part) {
            return None;
        }
        Some(Self {
            stream_id: stream_id.to_owned(),
            track_id: track_id.map(str::to_owned),
        })
    }
}

impl fmt::Display for Msid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.stream_id)?;
        if let Some(t) = &self.track_id {
            write!(f, " {t}")?;
        }
        Ok(())
    }
}

/// `a=msid-semantic`: a session attribute from drafts before RFC 8830 that libwebrtc
/// still writes (`a=msid-semantic: WMS <stream ids>`). Its grammar there was
/// `msid-semantic msid-list`, with `msid-list = *(" " msid-id) / " *"`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct MsidSemantic {
    /// `WMS` in practice.
    pub semantic: String,
    /// The stream ids, or `["*"]` for all.
    pub ids: Vec<String>,
    /// Chromium writes a space after the colon (`msid-semantic: WMS`), aiortc does not;
    /// kept so both forms serialize back as they came.
    pub space_after_colon: bool,
}

impl MsidSemantic {
    /// `WMS` over the given stream ids, in Chromium's spelling.
    pub fn wms(ids: &[&str]) -> Self {
        Self {
            semantic: "WMS".to_owned(),
            ids: ids.iter().map(|s| (*s).to_owned()).collect(),
            space_after_colon: true,
        }
    }

    pub(crate) fn parse(value: &str) -> Option<Self> {
        let space_after_colon = value.starts_with(' ');
        let mut words = value.split_ascii_whitespace();
        let semantic = words.next()?;
        if !is_token(semantic) {
            return None;
        }
        let ids = words
            .map(|id| is_non_ws(id).then(|| id.to_owned()))
            .collect::<Option<Vec<_>>>()?;
        Some(Self {
            semantic: semantic.to_owned(),
            ids,
            space_after_colon,
        })
    }
}

impl fmt::Display for MsidSemantic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.space_after_colon {
            f.write_str(" ")?;
        }
        f.write_str(&self.semantic)?;
        for id in &self.ids {
            write!(f, " {id}")?;
        }
        Ok(())
    }
}
