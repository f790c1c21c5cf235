//! The `application/trickle-ice-sdpfrag` bodies of WHIP/WHEP `PATCH` requests
//! (RFC 8840 §9, RFC 9725 §4.3): ICE credentials, candidates and
//! end-of-candidates, with `m=` and `a=mid` lines saying which section they are
//! for. shoal reads the credentials (an ICE restart when both are new) and counts
//! the candidates, which an ICE-lite agent has no use for (RFC 8445 §2.5).

/// Lines a fragment may have at most.
pub const MAX_LINES: usize = 256;

/// What a fragment says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IceFragment {
    /// `a=ice-ufrag` and `a=ice-pwd`, when the fragment has them.
    pub credentials: Option<(String, String)>,
    /// `a=candidate` lines.
    pub candidates: usize,
    /// Whether it ends the candidates (`a=end-of-candidates`).
    pub end_of_candidates: bool,
}

/// Why a fragment was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FragmentError {
    /// Not UTF-8.
    #[error("the fragment is not UTF-8")]
    NotText,
    /// More than [`MAX_LINES`] lines.
    #[error("more than {MAX_LINES} lines")]
    TooLong,
    /// A line that is not `TYPE=VALUE` with a one-letter type.
    #[error("line {0} is not an SDP line (x=value)")]
    NotSdp(usize),
    /// A line of another kind than `a=` or `m=` (RFC 8840 §9 allows no other).
    #[error("line {0}: a fragment has only a= and m= lines (RFC 8840 §9)")]
    Unexpected(usize),
    /// `a=ice-ufrag` without `a=ice-pwd`, or the other way round.
    #[error("a=ice-ufrag and a=ice-pwd go together")]
    HalfCredentials,
    /// Two sections with different credentials.
    #[error("the sections carry different ICE credentials")]
    MixedCredentials,
    /// Credentials that are not ice-chars of RFC 8839 §5.4's lengths.
    #[error("ice-ufrag must be 4-256 and ice-pwd 22-256 ice-chars (RFC 8839 §5.4)")]
    BadCredentials,
}

impl IceFragment {
    /// Reads a fragment.
    pub fn parse(body: &[u8]) -> Result<IceFragment, FragmentError> {
        let text = std::str::from_utf8(body).map_err(|_| FragmentError::NotText)?;
        let mut fragment = IceFragment::default();
        let (mut ufrag, mut pwd): (Option<&str>, Option<&str>) = (None, None);
        let mut seen: Option<(&str, &str)> = None;
        for (n, line) in text.lines().enumerate() {
            if n >= MAX_LINES {
                return Err(FragmentError::TooLong);
            }
            let line = line.trim_end_matches('\r');
            if line.is_empty() {
                continue;
            }
            let (kind, value) = line.split_once('=').ok_or(FragmentError::NotSdp(n + 1))?;
            match kind {
                "m" => close_section(&mut seen, ufrag.take(), pwd.take())?,
                "a" => {
                    let (name, value) = value.split_once(':').unwrap_or((value, ""));
                    match name {
                        "ice-ufrag" => ufrag = Some(value),
                        "ice-pwd" => pwd = Some(value),
                        "candidate" => fragment.candidates += 1,
                        "end-of-candidates" => fragment.end_of_candidates = true,
                        // mid, ice-options, ice-lite, group and the like: nothing to do.
                        _ => {}
                    }
                }
                k if k.len() == 1 => return Err(FragmentError::Unexpected(n + 1)),
                _ => return Err(FragmentError::NotSdp(n + 1)),
            }
        }
        close_section(&mut seen, ufrag.take(), pwd.take())?;
        if let Some((u, p)) = seen {
            let ice_chars = |s: &str| {
                s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/')
            };
            let ok = (4..=256).contains(&u.len())
                && (22..=256).contains(&p.len())
                && ice_chars(u)
                && ice_chars(p);
            if !ok {
                return Err(FragmentError::BadCredentials);
            }
            fragment.credentials = Some((u.to_owned(), p.to_owned()));
        }
        Ok(fragment)
    }
}

/// Ends a section (or the session part): its credentials, if any, must be whole
/// and the same as every other section's.
fn close_section<'a>(
    seen: &mut Option<(&'a str, &'a str)>,
    ufrag: Option<&'a str>,
    pwd: Option<&'a str>,
) -> Result<(), FragmentError> {
    match (ufrag, pwd) {
        (None, None) => Ok(()),
        (Some(u), Some(p)) => match seen {
            Some(s) if *s != (u, p) => Err(FragmentError::MixedCredentials),
            _ => {
                *seen = Some((u, p));
                Ok(())
            }
        },
        _ => Err(FragmentError::HalfCredentials),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restart_and_trickle_fragments() {
        // RFC 9725 §4.3's examples.
        let restart =
            IceFragment::parse(b"a=ice-ufrag:ysXw\r\na=ice-pwd:vw5LmwG4y/e6dPP/zAP9Gp5k\r\n")
                .unwrap();
        assert_eq!(
            restart.credentials,
            Some(("ysXw".into(), "vw5LmwG4y/e6dPP/zAP9Gp5k".into()))
        );
        let trickle = IceFragment::parse(
            b"a=ice-ufrag:EsAw\r\na=ice-pwd:P2uYro0UCOQ4zxjKXaWCBui1\r\nm=audio 9 RTP/AVP 0\r\n\
              a=mid:0\r\na=candidate:1387637174 1 udp 2122260223 192.0.2.1 61764 typ host\r\n\
              a=candidate:3471623853 1 udp 2122194687 198.51.100.1 61765 typ host\r\n\
              a=end-of-candidates\r\n",
        )
        .unwrap();
        assert_eq!(trickle.candidates, 2);
        assert!(trickle.end_of_candidates);
        assert_eq!(trickle.credentials.map(|c| c.0), Some("EsAw".into()));
        // Credentials inside the m= section count too.
        let inside = IceFragment::parse(
            b"m=audio 9 RTP/AVP 0\na=ice-ufrag:abcd\na=ice-pwd:0123456789012345678901\n",
        )
        .unwrap();
        assert_eq!(inside.credentials.map(|c| c.0), Some("abcd".into()));
        assert_eq!(IceFragment::parse(b"").unwrap(), IceFragment::default());
    }

    #[test]
    fn malformed_fragments_are_refused() {
        for (body, why) in [
            (&b"\xff\xfe"[..], FragmentError::NotText),
            (b"a=ice-ufrag:abcd\r\n", FragmentError::HalfCredentials),
            (
                b"a=ice-pwd:0123456789012345678901\r\n",
                FragmentError::HalfCredentials,
            ),
            (
                b"a=ice-ufrag:ab\r\na=ice-pwd:0123456789012345678901\r\n",
                FragmentError::BadCredentials,
            ),
            (
                b"a=ice-ufrag:ab:d\r\na=ice-pwd:0123456789012345678901\r\n",
                FragmentError::BadCredentials,
            ),
            (
                b"a=ice-ufrag:abcd\r\na=ice-pwd:short\r\n",
                FragmentError::BadCredentials,
            ),
            (b"hello\r\n", FragmentError::NotSdp(1)),
            (b"v=0\r\n", FragmentError::Unexpected(1)),
            (b"xy=1\r\n", FragmentError::NotSdp(1)),
            (
                b"m=audio 9 RTP/AVP 0\na=ice-ufrag:abcd\na=ice-pwd:0123456789012345678901\n\
                  m=video 9 RTP/AVP 96\na=ice-ufrag:efgh\na=ice-pwd:0123456789012345678901\n",
                FragmentError::MixedCredentials,
            ),
        ] {
            assert_eq!(
                IceFragment::parse(body),
                Err(why),
                "{:?}",
                String::from_utf8_lossy(body)
            );
        }
        let long = "a=candidate:1 1 udp 1 192.0.2.1 1 typ host\n".repeat(MAX_LINES + 1);
        assert_eq!(
            IceFragment::parse(long.as_bytes()),
            Err(FragmentError::TooLong)
        );
    }
}
