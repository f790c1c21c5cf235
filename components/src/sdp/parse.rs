//! The parser: walks the lines of a description through the fixed order of RFC 8866 §5,
//! counting every section against the limits in [`super`].
//!
//! RFC 8866 §5 gives the order of the session level as
//! `v o s i u e p c b (t r z)+ k a`, then media sections `m i c b k a`; lines "must
//! appear in exactly the order given". Holding input to that order also means every
//! description that parses serializes back line for line.

use super::attribute::{self, Attribute};
use super::media::MediaDescription;
use super::session::{Bandwidth, Connection, Origin, SessionDescription, Timing};
use super::text::{self, Line};
use super::{MAX_ATTRIBUTES, MAX_FIELDS, MAX_MEDIA, SdpError};

/// Every type letter RFC 8866 §5 defines.
const KNOWN_LETTERS: &str = "vosiuepcbtrzkam";

/// A line's place in the session-level order (RFC 8866 §5); `None` for `m` and for
/// letters the session level does not take.
fn session_rank(letter: char) -> Option<u8> {
    let rank = "vosiuepcbtrzka".find(letter)?;
    u8::try_from(rank).ok()
}

/// A line's place in the media-level order (RFC 8866 §5).
fn media_rank(letter: char) -> Option<u8> {
    let rank = "micbka".find(letter)?;
    u8::try_from(rank).ok()
}

/// Whether a line of `rank` may follow one of `prev` at the session level: later in the
/// order, or a repeat of `e p b t r a`, or a new `t=` after the `r=`/`z=` of the last one.
fn session_in_order(prev: u8, letter: char, rank: u8) -> bool {
    let repeatable = matches!(letter, 'e' | 'p' | 'b' | 't' | 'r' | 'a');
    let after_repeats =
        letter == 't' && (Some(prev) == session_rank('r') || Some(prev) == session_rank('z'));
    rank > prev || (rank == prev && repeatable) || after_repeats
}

/// Whether a line of `rank` may follow one of `prev` in a media section: later, or a
/// repeat of `c b a`.
fn media_in_order(prev: u8, letter: char, rank: u8) -> bool {
    rank > prev || (rank == prev && matches!(letter, 'c' | 'b' | 'a'))
}

/// Counts one section's lines against [`MAX_ATTRIBUTES`] and [`MAX_FIELDS`].
#[derive(Default)]
struct Counts {
    attributes: usize,
    fields: usize,
}

impl Counts {
    fn count(&mut self, line: &Line<'_>) -> Result<(), SdpError> {
        if line.letter == 'a' {
            self.attributes += 1;
            if self.attributes > MAX_ATTRIBUTES {
                return Err(SdpError::TooManyAttributes { line: line.number });
            }
        } else {
            self.fields += 1;
            if self.fields > MAX_FIELDS {
                return Err(SdpError::TooManyFields { line: line.number });
            }
        }
        Ok(())
    }
}

/// Parses one `a=` line.
fn attribute(line: &Line<'_>) -> Result<Attribute, SdpError> {
    attribute::parse_text(line.value).map_err(|e| match e {
        None => SdpError::Malformed { line: line.number },
        Some(attribute::Invalid(name)) => SdpError::InvalidAttribute {
            line: line.number,
            name,
        },
    })
}

/// Parses a typed field, or reports the line as an [`SdpError::InvalidField`].
fn field<T>(line: &Line<'_>, parse: impl FnOnce(&str) -> Option<T>) -> Result<T, SdpError> {
    parse(line.value).ok_or(SdpError::InvalidField {
        line: line.number,
        letter: line.letter,
    })
}

/// The session-level lines seen so far; `o=` and `s=` stay `None` until they come.
#[derive(Default)]
struct SessionParts {
    origin: Option<Origin>,
    session_name: Option<String>,
    information: Option<String>,
    uri: Option<String>,
    emails: Vec<String>,
    phones: Vec<String>,
    connection: Option<Connection>,
    bandwidths: Vec<Bandwidth>,
    timings: Vec<Timing>,
    key: Option<String>,
    attributes: Vec<Attribute>,
}

impl SessionParts {
    /// Takes one session-level line already checked for order.
    fn take(&mut self, line: &Line<'_>) -> Result<(), SdpError> {
        let text = || line.value.to_owned();
        match line.letter {
            'v' if line.value != "0" => {
                return Err(SdpError::UnsupportedVersion { line: line.number });
            }
            'v' => {}
            'o' => self.origin = Some(field(line, Origin::parse)?),
            's' => self.session_name = Some(text()),
            'i' => self.information = Some(text()),
            'u' => self.uri = Some(text()),
            'e' => self.emails.push(text()),
            'p' => self.phones.push(text()),
            'c' => self.connection = Some(field(line, Connection::parse)?),
            'b' => self.bandwidths.push(field(line, Bandwidth::parse)?),
            't' => self.timings.push(field(line, Timing::parse)?),
            // The order check puts r= and z= only after a t=.
            'r' => {
                if let Some(t) = self.timings.last_mut() {
                    t.repeats.push(text());
                }
            }
            'z' => {
                if let Some(t) = self.timings.last_mut() {
                    t.zone = Some(text());
                }
            }
            'k' => self.key = Some(text()),
            _ => self.attributes.push(attribute(line)?),
        }
        Ok(())
    }

    fn finish(self, media: Vec<MediaDescription>) -> Result<SessionDescription, SdpError> {
        let origin = self.origin.ok_or(SdpError::Missing { letter: 'o' })?;
        let session_name = self.session_name.ok_or(SdpError::Missing { letter: 's' })?;
        if self.timings.is_empty() {
            return Err(SdpError::Missing { letter: 't' });
        }
        Ok(SessionDescription {
            origin,
            session_name,
            information: self.information,
            uri: self.uri,
            emails: self.emails,
            phones: self.phones,
            connection: self.connection,
            bandwidths: self.bandwidths,
            timings: self.timings,
            key: self.key,
            attributes: self.attributes,
            media,
        })
    }
}

/// Takes one line of a media section already checked for order.
fn take_media_line(media: &mut MediaDescription, line: &Line<'_>) -> Result<(), SdpError> {
    match line.letter {
        'i' => media.title = Some(line.value.to_owned()),
        'c' => media.connections.push(field(line, Connection::parse)?),
        'b' => media.bandwidths.push(field(line, Bandwidth::parse)?),
        'k' => media.key = Some(line.value.to_owned()),
        _ => media.attributes.push(attribute(line)?),
    }
    Ok(())
}

/// After `line` went into the last section: if it was that section's `a=mid`, no
/// earlier section may carry the same mid: RFC 5888 §4 makes an identification-tag
/// unique within a session description (BUNDLE and JSEP look sections up by it).
/// Costs O(sections) per `a=mid` line, at most [`MAX_MEDIA`].
fn check_mid_unique(media: &[MediaDescription], line: &Line<'_>) -> Result<(), SdpError> {
    let Some((section, earlier)) = media.split_last() else {
        return Ok(());
    };
    let Some(Attribute::Mid(mid)) = section.attributes.last().filter(|_| line.letter == 'a') else {
        return Ok(());
    };
    if earlier.iter().any(|m| m.mid() == Some(mid.as_str())) {
        return Err(SdpError::DuplicateMid {
            line: line.number,
            mid: mid.clone(),
        });
    }
    Ok(())
}

/// Parses a whole description (see [`SessionDescription::parse`]).
pub(crate) fn parse(input: &str) -> Result<SessionDescription, SdpError> {
    let lines = text::lines(input)?;
    let mut session = SessionParts::default();
    let mut media: Vec<MediaDescription> = Vec::new();
    let mut counts = Counts::default();
    // The rank of the last line taken in the current section; None before v=.
    let mut prev: Option<u8> = None;

    for line in &lines {
        if !KNOWN_LETTERS.contains(line.letter) {
            return Err(SdpError::UnknownLineType {
                line: line.number,
                letter: line.letter,
            });
        }
        let out_of_order = SdpError::OutOfOrder {
            line: line.number,
            letter: line.letter,
        };
        if line.letter == 'm' {
            if prev.is_none() {
                return Err(SdpError::Missing { letter: 'v' });
            }
            if media.len() >= MAX_MEDIA {
                return Err(SdpError::TooManyMedia { line: line.number });
            }
            media.push(field(line, MediaDescription::parse_media_line)?);
            counts = Counts::default();
            counts.count(line)?;
            prev = media_rank('m');
            continue;
        }
        counts.count(line)?;
        match media.last_mut() {
            None => {
                let rank = session_rank(line.letter).ok_or(out_of_order.clone())?;
                match prev {
                    None if line.letter != 'v' => return Err(SdpError::Missing { letter: 'v' }),
                    None => {}
                    Some(p) if !session_in_order(p, line.letter, rank) => return Err(out_of_order),
                    Some(_) => {}
                }
                session.take(line)?;
                prev = Some(rank);
            }
            Some(section) => {
                let rank = media_rank(line.letter).ok_or(out_of_order.clone())?;
                if prev.is_some_and(|p| !media_in_order(p, line.letter, rank)) {
                    return Err(out_of_order);
                }
                take_media_line(section, line)?;
                check_mid_unique(&media, line)?;
                prev = Some(rank);
            }
        }
    }
    if prev.is_none() {
        return Err(SdpError::Missing { letter: 'v' });
    }
    session.finish(media)
}
