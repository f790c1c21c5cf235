//! The lexical layer: splitting a description into bounded `<type>=<value>` lines, and the
//! small token checks of RFC 8866 §9 that every grammar above uses.

use super::{MAX_LINE_LEN, MAX_SDP_LEN, SdpError};

/// One `<type>=<value>` line (RFC 8866 §5) with its 1-based line number.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Line<'a> {
    /// 1-based line number.
    pub number: usize,
    /// The type letter.
    pub letter: char,
    /// Everything after `=`, without the line terminator.
    pub value: &'a str,
}

/// Splits `input` into lines. RFC 8866 §5 ends lines with CRLF but asks parsers to accept
/// a bare LF as well; both are taken here. Trailing empty lines are ignored; an empty line
/// between two others is malformed.
pub(crate) fn lines(input: &str) -> Result<Vec<Line<'_>>, SdpError> {
    if input.len() > MAX_SDP_LEN {
        return Err(SdpError::TooLarge { len: input.len() });
    }
    let body = input.trim_end_matches(['\r', '\n']);
    if body.is_empty() {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for (index, raw) in body.split('\n').enumerate() {
        let number = index + 1;
        let text = raw.strip_suffix('\r').unwrap_or(raw);
        if text.len() > MAX_LINE_LEN {
            return Err(SdpError::LineTooLong { line: number });
        }
        out.push(split_line(number, text)?);
    }
    Ok(out)
}

/// Checks one line's shape: an ASCII letter, `=`, then a value without NUL or CR
/// (RFC 8866 §9 `byte-string`; a value may be empty only where its grammar says so).
fn split_line(number: usize, text: &str) -> Result<Line<'_>, SdpError> {
    let malformed = SdpError::Malformed { line: number };
    let bytes = text.as_bytes();
    let (Some(&letter), Some(&b'=')) = (bytes.first(), bytes.get(1)) else {
        return Err(malformed);
    };
    if !letter.is_ascii_alphabetic() {
        return Err(malformed);
    }
    // Both leading bytes are ASCII, so byte 2 is a char boundary.
    let value = text.get(2..).ok_or(malformed.clone())?;
    if value.contains(['\0', '\r']) {
        return Err(malformed);
    }
    Ok(Line {
        number,
        letter: char::from(letter),
        value,
    })
}

/// RFC 8866 §9 `token-char`.
pub(crate) fn is_token_char(c: char) -> bool {
    c.is_ascii_alphanumeric()
        || matches!(
            c,
            '!' | '#'
                | '$'
                | '%'
                | '&'
                | '\''
                | '*'
                | '+'
                | '-'
                | '.'
                | '^'
                | '_'
                | '`'
                | '{'
                | '|'
                | '}'
                | '~'
        )
}

/// RFC 8866 §9 `token`: one or more token characters.
pub(crate) fn is_token(s: &str) -> bool {
    !s.is_empty() && s.chars().all(is_token_char)
}

/// RFC 8839 §5.1 `ice-char`: `ALPHA / DIGIT / "+" / "/"`.
pub(crate) fn is_ice_chars(s: &str) -> bool {
    s.chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '+' || c == '/')
}

/// RFC 8866 §9 `non-ws-string`: visible characters (or any non-ASCII byte), at least one.
pub(crate) fn is_non_ws(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| !c.is_ascii() || c.is_ascii_graphic())
}

/// An unsigned decimal of only ASCII digits (`1*DIGIT`): no sign, no spaces, and no more
/// digits than the type can hold, so a long digit string cannot make this slow.
pub(crate) fn digits<T: std::str::FromStr>(s: &str) -> Option<T> {
    if s.is_empty() || s.len() > 20 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// RFC 8851's `rid-id` (also `sc-id` in RFC 8853): `1*(alpha-numeric / "-" / "_")`.
pub(crate) fn is_rid_id(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}
