//! Which web origins may use the node from a browser (`--allowed-origins`).
//!
//! A browser says which page a request comes from in its `Origin` header (RFC 6454
//! §7), and only a browser does: a request without one is not a page's and is not
//! affected. `/signal` is a WebSocket, which CORS does not guard, so RFC 6455 §10.2
//! leaves the check to the server: an upgrade from an origin that is not allowed
//! gets 403 (§4.2.2: "If the server does not wish to accept this connection, it MUST
//! return an appropriate HTTP error code (e.g., 403 Forbidden) and abort the
//! WebSocket handshake"). WHIP and WHEP responses name only an allowed origin in
//! `Access-Control-Allow-Origin`, so a page of another origin cannot read them, and
//! since an SDP offer's content type is not CORS-safelisted, its browser does not
//! send the POST at all. An empty list allows every origin, as a node without the
//! setting always did.

use std::fmt;
use std::str::FromStr;

/// One allowed origin: a scheme, a host and a port, in RFC 6454 §6.2's ASCII
/// serialization (lower case, the scheme's default port left out), as browsers send
/// it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct AllowedOrigin(String);

/// Why an `--allowed-origins` entry is not an origin.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum OriginError {
    /// No `scheme://`.
    #[error("{0:?} is not an origin: expected SCHEME://HOST[:PORT], e.g. https://app.example")]
    Shape(String),
    /// A path, query, fragment or user name after the host.
    #[error(
        "{0:?} is not an origin: an origin is SCHEME://HOST[:PORT] without a path, query or \
         user name"
    )]
    Extra(String),
    /// The port is not a number from 0 to 65535.
    #[error("{0:?} has a bad port")]
    Port(String),
}

impl AllowedOrigin {
    /// The origin as browsers serialize it.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for AllowedOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for AllowedOrigin {
    type Err = OriginError;

    /// Parses `scheme://host[:port]` (a trailing `/` is forgiven); the scheme and
    /// host are compared without regard to case and a default port (80 for http and
    /// ws, 443 for https and wss) is dropped, as a browser's serialization drops it.
    fn from_str(s: &str) -> Result<AllowedOrigin, OriginError> {
        let text = s.trim();
        let (scheme, rest) = text
            .split_once("://")
            .ok_or_else(|| OriginError::Shape(s.to_owned()))?;
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        let scheme_ok = scheme
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic())
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
        if !scheme_ok || rest.is_empty() {
            return Err(OriginError::Shape(s.to_owned()));
        }
        if rest.contains(['/', '?', '#', '@', ' ', '*']) {
            return Err(OriginError::Extra(s.to_owned()));
        }
        let scheme = scheme.to_ascii_lowercase();
        // An IPv6 host keeps its brackets; the port follows the last ':' after them.
        let host_end = rest.rfind(']').map_or(0, |i| i + 1);
        let (host, port) = match rest[host_end..].rfind(':') {
            Some(i) => {
                let at = host_end + i;
                let port: u16 = rest[at + 1..]
                    .parse()
                    .map_err(|_| OriginError::Port(s.to_owned()))?;
                (&rest[..at], Some(port))
            }
            None => (rest, None),
        };
        if host.is_empty() {
            return Err(OriginError::Shape(s.to_owned()));
        }
        let default = match scheme.as_str() {
            "http" | "ws" => Some(80),
            "https" | "wss" => Some(443),
            _ => None,
        };
        let host = host.to_ascii_lowercase();
        Ok(AllowedOrigin(match port {
            Some(p) if Some(p) != default => format!("{scheme}://{host}:{p}"),
            _ => format!("{scheme}://{host}"),
        }))
    }
}

/// The allowed origins; empty: any.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AllowedOrigins(Vec<AllowedOrigin>);

impl AllowedOrigins {
    /// Allows exactly `origins`; none: any origin.
    pub fn new(origins: Vec<AllowedOrigin>) -> AllowedOrigins {
        AllowedOrigins(origins)
    }

    /// Whether every origin is allowed.
    pub fn is_any(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether a request whose `Origin` header is `origin` may go on: always without
    /// the header (not a browser's request) or without a list; otherwise when the
    /// header names an allowed origin. `null` (an opaque origin, RFC 6454 §7.3) is
    /// never on the list.
    pub fn allows(&self, origin: Option<&[u8]>) -> bool {
        let Some(origin) = origin else {
            return true;
        };
        self.is_any() || self.find(origin).is_some()
    }

    /// The allowed origin `origin` names, if any (not when any origin is allowed).
    pub fn find(&self, origin: &[u8]) -> Option<&AllowedOrigin> {
        let origin = std::str::from_utf8(origin).ok()?;
        let parsed: AllowedOrigin = origin.parse().ok()?;
        self.0.iter().find(|o| **o == parsed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origin(s: &str) -> AllowedOrigin {
        s.parse().unwrap()
    }

    #[test]
    fn origins_are_serialized_as_browsers_send_them() {
        assert_eq!(
            origin("https://App.Example").as_str(),
            "https://app.example"
        );
        assert_eq!(
            origin("HTTPS://a.example:443/").as_str(),
            "https://a.example"
        );
        assert_eq!(
            origin("http://a.example:8080").as_str(),
            "http://a.example:8080"
        );
        assert_eq!(origin("http://[::1]:7070").as_str(), "http://[::1]:7070");
        assert_eq!(origin("http://[::1]").as_str(), "http://[::1]");
        for bad in [
            "a.example",
            "https://",
            "https://a.example/path",
            "https://a.example?x",
            "https://user@a.example",
            "https://*.example",
            "https://a.example:99999",
            "https://a.example:",
            "1http://a.example",
            "null",
        ] {
            assert!(bad.parse::<AllowedOrigin>().is_err(), "{bad}");
        }
    }

    #[test]
    fn only_listed_origins_pass_and_requests_without_one_always_do() {
        let any = AllowedOrigins::default();
        assert!(any.allows(Some(b"https://evil.example")));
        assert!(any.find(b"https://evil.example").is_none());
        let list = AllowedOrigins::new(vec![origin("https://a.example")]);
        assert!(list.allows(None));
        assert!(list.allows(Some(b"https://a.example")));
        assert!(list.allows(Some(b"https://A.example:443")));
        assert!(!list.allows(Some(b"http://a.example")));
        assert!(!list.allows(Some(b"https://a.example:8443")));
        assert!(!list.allows(Some(b"null")));
        assert!(!list.allows(Some(b"\xff")));
    }
}
