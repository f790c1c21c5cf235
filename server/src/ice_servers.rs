//! The STUN and TURN servers shoal hands its clients.
//!
//! shoal needs no TURN server itself: it is the publicly reachable side, and as an
//! ICE-lite agent (RFC 8445 §2.5) it gathers nothing. A client on a network that
//! lets no direct path to shoal through (UDP blocked, only its TURN provider
//! allowed) needs one (`turn:…?transport=tcp` or `turns:` where UDP is blocked),
//! and the operator who runs it tells shoal with `--ice-server`; shoal passes the
//! servers on with credentials for each client:
//! - in the `201 Created` of a WHIP/WHEP `POST`, one `Link` header per server URI
//!   with `rel="ice-server"` and the credentials as target attributes (RFC 9725
//!   §4.6, [`link_headers`]);
//! - in the `join` response of `/signal` and `SignalService` (`iceServers`, shaped
//!   as W3C's RTCIceServer).
//!
//! URIs are checked at start-up against RFC 7064 §3.1 (`stun:`, `stuns:`) and RFC
//! 7065 §3.1 (`turn:`, `turns:` with an optional `?transport=udp|tcp`; shoal refuses
//! a transport-ext, which no browser speaks).
//!
//! Credentials for the TURN URIs are either static (`--turn-username`,
//! `--turn-password`) or minted per client from a secret shared with the TURN server
//! (`--turn-secret`), the "TURN REST API" of draft-uberti-behave-turn-rest-00 §2.2
//! that coturn's `use-auth-secret` checks: the username is `EXPIRY:ID` (EXPIRY the
//! Unix time the credentials stop working, `--turn-ttl` from now; ID the client's
//! peer id on the node, opaque as §6 recommends, since a USERNAME crosses the
//! network in the clear) and the password is `base64(HMAC-SHA1(secret,
//! username))`. The TURN server checks the expiry when a client allocates (§4.2;
//! coturn keeps the allocation's key after that), so the TTL bounds when minted
//! credentials can open a relay, not how long one lasts. Secrets and passwords never
//! appear in `Debug` output or in refusals of bad values.
//!
//! Departure: RFC 9725 §4.6 lets an endpoint also put the servers in its answer to
//! a non-preflight `OPTIONS` and calls that NOT RECOMMENDED; shoal does not.

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use ring::hmac;
use shoal_proto::v1::IceServer;

/// Default `--turn-ttl`: a day, as coturn's own test client mints them.
pub const DEFAULT_TURN_TTL_SECS: u32 = 86_400;
/// `--ice-server` URIs shoal accepts at most.
pub const MAX_ICE_SERVERS: usize = 8;
/// Bytes of one URI at most.
pub const MAX_URI_BYTES: usize = 256;
/// Bytes of a static TURN username, password or secret at most (RFC 8489 §14.3: a
/// USERNAME is fewer than 509 bytes).
pub const MAX_USERNAME_BYTES: usize = 500;
/// Bytes of a client identity a minted username carries at most.
pub const MAX_ID_IN_USERNAME: usize = 128;

/// A `stun:`, `stuns:`, `turn:` or `turns:` URI (RFC 7064 §3.1, RFC 7065 §3.1),
/// its scheme and query in lower case (ABNF literals are case-insensitive, RFC 5234
/// §2.3, and some clients compare them exactly).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IceServerUri {
    text: String,
    turn: bool,
}

impl IceServerUri {
    /// Whether it names a TURN server (`turn:`, `turns:`), which needs credentials.
    pub fn is_turn(&self) -> bool {
        self.turn
    }

    /// The URI as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl fmt::Display for IceServerUri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// Why an `--ice-server` URI was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UriError {
    /// Longer than [`MAX_URI_BYTES`].
    #[error("longer than {MAX_URI_BYTES} bytes")]
    TooLong,
    /// Not `stun:`, `stuns:`, `turn:` or `turns:`.
    #[error("the scheme must be stun, stuns, turn or turns (RFC 7064, RFC 7065)")]
    Scheme,
    /// The host is empty or not an IP literal, IPv4 address or host name.
    #[error("the host must be an IP address (IPv6 in brackets) or a host name")]
    Host,
    /// The port is not a number from 1 to 65535.
    #[error("the port must be a number from 1 to 65535")]
    Port,
    /// A query other than `?transport=udp` or `?transport=tcp` on a TURN URI, or any
    /// query on a STUN URI.
    #[error("the only query is ?transport=udp or ?transport=tcp, and only on turn: and turns:")]
    Query,
}

impl FromStr for IceServerUri {
    type Err = UriError;

    fn from_str(s: &str) -> Result<IceServerUri, UriError> {
        if s.len() > MAX_URI_BYTES {
            return Err(UriError::TooLong);
        }
        let (scheme, rest) = s.split_once(':').ok_or(UriError::Scheme)?;
        let turn = match scheme.to_ascii_lowercase().as_str() {
            "stun" | "stuns" => false,
            "turn" | "turns" => true,
            _ => return Err(UriError::Scheme),
        };
        let (authority, query) = match rest.split_once('?') {
            Some((a, q)) => (a, Some(q.to_ascii_lowercase())),
            None => (rest, None),
        };
        match query.as_deref() {
            None => {}
            Some("transport=udp" | "transport=tcp") if turn => {}
            Some(_) => return Err(UriError::Query),
        }
        // host [ ":" port ], the host an IP-literal ("[" IPv6 "]"), an IPv4 address
        // or a reg-name (RFC 3986 §3.2.2).
        let (host, port) = if let Some(bracketed) = authority.strip_prefix('[') {
            let (v6, after) = bracketed.split_once(']').ok_or(UriError::Host)?;
            v6.parse::<std::net::Ipv6Addr>()
                .map_err(|_| UriError::Host)?;
            let port = match after {
                "" => None,
                p => Some(p.strip_prefix(':').ok_or(UriError::Port)?),
            };
            (None, port)
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (Some(h), Some(p)),
                None => (Some(authority), None),
            }
        };
        if let Some(host) = host {
            // A reg-name limited to what DNS names and IPv4 addresses use.
            let ok = !host.is_empty()
                && host
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
            if !ok {
                return Err(UriError::Host);
            }
        }
        if let Some(port) = port {
            let ok = !port.is_empty()
                && port.bytes().all(|b| b.is_ascii_digit())
                && port.parse::<u16>().is_ok_and(|p| p != 0);
            if !ok {
                return Err(UriError::Port);
            }
        }
        let mut text = format!("{}:{authority}", scheme.to_ascii_lowercase());
        if let Some(query) = query {
            text.push('?');
            text.push_str(&query);
        }
        Ok(IceServerUri { text, turn })
    }
}

/// A secret: its `Debug` output never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// The secret itself.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(..)")
    }
}

/// Why a secret, username or password was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("must be 1 to {MAX_USERNAME_BYTES} printable ASCII characters")]
pub struct TextError;

/// Checks a TURN username, password or secret: printable ASCII, so it fits an HTTP
/// header's quoted-string and a STUN USERNAME unchanged.
fn printable(s: &str) -> Result<String, TextError> {
    let ok = !s.is_empty()
        && s.len() <= MAX_USERNAME_BYTES
        && s.bytes().all(|b| (0x20..0x7f).contains(&b));
    if ok { Ok(s.to_owned()) } else { Err(TextError) }
}

impl FromStr for Secret {
    type Err = TextError;

    fn from_str(s: &str) -> Result<Secret, TextError> {
        printable(s).map(Secret)
    }
}

/// A static TURN username (`--turn-username`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Username(pub String);

impl FromStr for Username {
    type Err = TextError;

    fn from_str(s: &str) -> Result<Username, TextError> {
        printable(s).map(Username)
    }
}

/// How clients authenticate to the TURN servers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TurnAuth {
    /// No TURN server is configured.
    None,
    /// The same username and password for every client.
    Static {
        /// The username.
        username: String,
        /// The password.
        password: Secret,
    },
    /// Credentials minted per client (draft-uberti-behave-turn-rest-00 §2.2).
    Rest {
        /// The secret the TURN server shares.
        secret: Secret,
        /// How long minted credentials work.
        ttl: Duration,
    },
}

/// Why the ICE server settings do not fit together.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IceServersError {
    /// More URIs than [`MAX_ICE_SERVERS`].
    #[error("at most {MAX_ICE_SERVERS} --ice-server URIs")]
    TooMany,
    /// A `turn:` URI without `--turn-secret` or `--turn-username` and `--turn-password`.
    #[error(
        "a turn: or turns: --ice-server needs credentials: --turn-secret (TURN REST, as \
         coturn's use-auth-secret), or --turn-username and --turn-password"
    )]
    NoCredentials,
    /// Both kinds of credentials.
    #[error("--turn-secret and --turn-username/--turn-password exclude each other")]
    BothCredentials,
    /// A username without a password or the other way round.
    #[error("--turn-username and --turn-password go together")]
    HalfStatic,
    /// Credentials but no TURN URI to use them with.
    #[error("TURN credentials are set but no turn: or turns: --ice-server")]
    UnusedCredentials,
    /// `--turn-ttl 0`.
    #[error("--turn-ttl must be at least 1 second")]
    ZeroTtl,
}

/// The ICE servers of a node, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IceServers {
    uris: Vec<IceServerUri>,
    auth: TurnAuth,
}

impl Default for IceServers {
    fn default() -> IceServers {
        IceServers {
            uris: Vec::new(),
            auth: TurnAuth::None,
        }
    }
}

impl IceServers {
    /// The servers and credentials, if they fit together: each TURN URI has
    /// credentials, and credentials have a TURN URI.
    pub fn new(
        uris: Vec<IceServerUri>,
        username: Option<Username>,
        password: Option<Secret>,
        secret: Option<Secret>,
        ttl_secs: u32,
    ) -> Result<IceServers, IceServersError> {
        if uris.len() > MAX_ICE_SERVERS {
            return Err(IceServersError::TooMany);
        }
        let auth = match (username, password, secret) {
            (None, None, None) => TurnAuth::None,
            (Some(_), _, Some(_)) | (_, Some(_), Some(_)) => {
                return Err(IceServersError::BothCredentials);
            }
            (Some(Username(username)), Some(password), None) => {
                TurnAuth::Static { username, password }
            }
            (Some(_), None, None) | (None, Some(_), None) => {
                return Err(IceServersError::HalfStatic);
            }
            (None, None, Some(secret)) => {
                if ttl_secs == 0 {
                    return Err(IceServersError::ZeroTtl);
                }
                TurnAuth::Rest {
                    secret,
                    ttl: Duration::from_secs(u64::from(ttl_secs)),
                }
            }
        };
        let any_turn = uris.iter().any(IceServerUri::is_turn);
        match (&auth, any_turn) {
            (TurnAuth::None, true) => return Err(IceServersError::NoCredentials),
            (TurnAuth::Static { .. } | TurnAuth::Rest { .. }, false) => {
                return Err(IceServersError::UnusedCredentials);
            }
            _ => {}
        }
        Ok(IceServers { uris, auth })
    }

    /// Whether no server is configured.
    pub fn is_empty(&self) -> bool {
        self.uris.is_empty()
    }

    /// The URIs, as configured.
    pub fn uris(&self) -> &[IceServerUri] {
        &self.uris
    }

    /// The servers for the client `id` (opaque: its peer id) at `now`, as
    /// RTCIceServer entries: the STUN URIs in one without credentials, the TURN URIs
    /// in one with the client's credentials.
    pub fn for_client(&self, identity: &str, now: SystemTime) -> Vec<IceServer> {
        let (turn, stun): (Vec<&IceServerUri>, Vec<&IceServerUri>) =
            self.uris.iter().partition(|u| u.is_turn());
        let mut servers = Vec::with_capacity(2);
        if !stun.is_empty() {
            servers.push(IceServer {
                urls: stun.iter().map(|u| u.text.clone()).collect(),
                username: String::new(),
                credential: String::new(),
            });
        }
        if !turn.is_empty() {
            let (username, credential) = match &self.auth {
                TurnAuth::None => (String::new(), String::new()),
                TurnAuth::Static { username, password } => {
                    (username.clone(), password.expose().to_owned())
                }
                TurnAuth::Rest { secret, ttl } => {
                    let expiry = now
                        .checked_add(*ttl)
                        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                        .map_or(0, |d| d.as_secs());
                    rest_credentials(secret, expiry, identity)
                }
            };
            servers.push(IceServer {
                urls: turn.iter().map(|u| u.text.clone()).collect(),
                username,
                credential,
            });
        }
        servers
    }
}

/// TURN REST credentials (draft-uberti-behave-turn-rest-00 §2.2): the username
/// `EXPIRY:ID` and the password `base64(HMAC-SHA1(secret, username))`. ID is
/// `identity` with every character but ASCII letters, digits and `-._~@+` replaced
/// by `_` (so it fits a header's quoted-string and cannot move coturn's separator),
/// cut to [`MAX_ID_IN_USERNAME`] bytes; with none left the username is EXPIRY.
pub fn rest_credentials(secret: &Secret, expiry: u64, identity: &str) -> (String, String) {
    let id: String = identity
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-._~@+".contains(c) {
                c
            } else {
                '_'
            }
        })
        .take(MAX_ID_IN_USERNAME)
        .collect();
    let username = if id.is_empty() {
        expiry.to_string()
    } else {
        format!("{expiry}:{id}")
    };
    let key = hmac::Key::new(
        hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY,
        secret.expose().as_bytes(),
    );
    let tag = hmac::sign(&key, username.as_bytes());
    let password = base64::engine::general_purpose::STANDARD.encode(tag.as_ref());
    (username, password)
}

/// One `Link` header value per URI of `servers` (RFC 9725 §4.6): the URI as the
/// target, `rel="ice-server"`, and for TURN `username`, `credential` and
/// `credential-type="password"` as quoted-strings (RFC 8288 §3, RFC 9110 §5.6.4).
pub fn link_headers(servers: &[IceServer]) -> Vec<String> {
    let mut links = Vec::new();
    for server in servers {
        for url in &server.urls {
            let mut link = format!("<{url}>; rel=\"ice-server\"");
            if !server.username.is_empty() {
                link.push_str(&format!(
                    "; username={}; credential={}; credential-type=\"password\"",
                    quoted(&server.username),
                    quoted(&server.credential)
                ));
            }
            links.push(link);
        }
    }
    links
}

/// `s` as an HTTP quoted-string (RFC 9110 §5.6.4): `"` and `\` escaped.
fn quoted(s: &str) -> String {
    let mut q = String::with_capacity(s.len() + 2);
    q.push('"');
    for c in s.chars() {
        if c == '"' || c == '\\' {
            q.push('\\');
        }
        q.push(c);
    }
    q.push('"');
    q
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uri(s: &str) -> IceServerUri {
        s.parse().expect("a valid URI")
    }

    #[test]
    fn uris_follow_rfc_7064_and_7065() {
        for ok in [
            "stun:stun.example.org",
            "stun:192.0.2.1:3478",
            "stuns:[2001:db8::1]:5349",
            "turn:turn.example.org:3478?transport=udp",
            "turn:[2001:db8::2]?transport=tcp",
            "turns:turn.example.org:443?transport=tcp",
        ] {
            let parsed: IceServerUri = ok.parse().expect(ok);
            assert_eq!(parsed.as_str(), ok);
            assert_eq!(
                parsed.is_turn(),
                ok.to_ascii_lowercase().starts_with("turn")
            );
        }
        for (bad, why) in [
            ("http://turn.example.org", UriError::Scheme),
            ("turn.example.org:3478", UriError::Scheme),
            ("turn:", UriError::Host),
            ("turn:user@turn.example.org", UriError::Host),
            ("turn:[2001:db8::1", UriError::Host),
            ("turn:[not-v6]:3478", UriError::Host),
            ("turn:turn.example.org:0", UriError::Port),
            ("turn:turn.example.org:65536", UriError::Port),
            ("turn:turn.example.org:", UriError::Port),
            ("turn:[2001:db8::1]3478", UriError::Port),
            ("turn:turn.example.org?transport=sctp", UriError::Query),
            ("stun:stun.example.org?transport=udp", UriError::Query),
            ("turn:a\"b", UriError::Host),
        ] {
            assert_eq!(bad.parse::<IceServerUri>(), Err(why), "{bad}");
        }
        let upper: IceServerUri = "TURN:turn.example.org?Transport=TCP"
            .parse()
            .expect("valid");
        assert_eq!(upper.as_str(), "turn:turn.example.org?transport=tcp");
        assert!(upper.is_turn());
        let long = format!("turn:{}", "a".repeat(MAX_URI_BYTES));
        assert_eq!(long.parse::<IceServerUri>(), Err(UriError::TooLong));
    }

    #[test]
    fn turn_needs_credentials_and_credentials_need_turn() {
        let turn = vec![uri("turn:192.0.2.1:3478")];
        let stun = vec![uri("stun:192.0.2.1")];
        let secret = || Some("s3cret".parse::<Secret>().expect("printable"));
        let user = || Some(Username("u".into()));
        let pass = || Some("p".parse::<Secret>().expect("printable"));
        assert_eq!(
            IceServers::new(turn.clone(), None, None, None, 60),
            Err(IceServersError::NoCredentials)
        );
        assert_eq!(
            IceServers::new(stun.clone(), None, None, secret(), 60),
            Err(IceServersError::UnusedCredentials)
        );
        assert_eq!(
            IceServers::new(turn.clone(), user(), pass(), secret(), 60),
            Err(IceServersError::BothCredentials)
        );
        assert_eq!(
            IceServers::new(turn.clone(), user(), None, None, 60),
            Err(IceServersError::HalfStatic)
        );
        assert_eq!(
            IceServers::new(turn.clone(), None, None, secret(), 0),
            Err(IceServersError::ZeroTtl)
        );
        let many = vec![uri("stun:192.0.2.1"); MAX_ICE_SERVERS + 1];
        assert_eq!(
            IceServers::new(many, None, None, None, 60),
            Err(IceServersError::TooMany)
        );
        assert!(IceServers::new(stun, None, None, None, 60).is_ok());
        assert!(IceServers::new(turn.clone(), user(), pass(), None, 60).is_ok());
        assert!(IceServers::new(turn, None, None, secret(), 60).is_ok());
    }

    /// The secret never shows in the settings' `Debug` output.
    #[test]
    fn secrets_stay_out_of_debug_output() {
        let servers = IceServers::new(
            vec![uri("turn:192.0.2.1")],
            None,
            None,
            Some("hunter2-secret".parse().expect("printable")),
            60,
        )
        .expect("valid");
        let shown = format!("{servers:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
    }

    /// The TURN REST username is `EXPIRY:ID` and the password the base64 of
    /// HMAC-SHA1 over it; the HMAC itself is checked on RFC 2202 §3's test case 2.
    #[test]
    fn rest_credentials_are_expiry_id_and_hmac_sha1() {
        let secret: Secret = "Jefe".parse().expect("printable");
        let (username, password) = rest_credentials(&secret, 1_700_000_000, "alice");
        assert_eq!(username, "1700000000:alice");
        let digest = base64::engine::general_purpose::STANDARD
            .decode(&password)
            .expect("base64");
        let key = hmac::Key::new(hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, b"Jefe");
        hmac::verify(&key, b"1700000000:alice", &digest).expect("HMAC-SHA1 of the username");
        // RFC 2202 test case 2 through the same key type: a known digest.
        assert_eq!(
            hmac::sign(&key, b"what do ya want for nothing?").as_ref(),
            [
                0xef, 0xfc, 0xdf, 0x6a, 0xe5, 0xeb, 0x2f, 0xa2, 0xd2, 0x74, 0x16, 0xd5, 0xf1, 0x84,
                0xdf, 0x9c, 0x25, 0x9a, 0x7c, 0x79
            ]
        );
        // Identities that could break the header or move coturn's separator.
        let (username, _) = rest_credentials(&secret, 5, "bob:\"x\\y\" z");
        assert_eq!(username, "5:bob__x_y__z");
        let (username, _) = rest_credentials(&secret, 5, "");
        assert_eq!(username, "5");
        let (username, _) = rest_credentials(&secret, 5, &"é".repeat(400));
        assert_eq!(username.len(), 2 + MAX_ID_IN_USERNAME);
    }

    #[test]
    fn clients_get_stun_plain_and_turn_with_credentials() {
        let servers = IceServers::new(
            vec![
                uri("stun:192.0.2.1:3478"),
                uri("turn:192.0.2.1:3478?transport=udp"),
                uri("turn:192.0.2.1:3478?transport=tcp"),
            ],
            None,
            None,
            Some("s".parse().expect("printable")),
            600,
        )
        .expect("valid");
        let now = UNIX_EPOCH + Duration::from_secs(1_000);
        let given = servers.for_client("carol", now);
        assert_eq!(given.len(), 2);
        assert_eq!(given[0].urls, ["stun:192.0.2.1:3478"]);
        assert!(given[0].username.is_empty() && given[0].credential.is_empty());
        assert_eq!(given[1].urls.len(), 2);
        assert_eq!(given[1].username, "1600:carol");
        assert_eq!(
            (given[1].username.clone(), given[1].credential.clone()),
            rest_credentials(&"s".parse().expect("printable"), 1_600, "carol")
        );
        let links = link_headers(&given);
        assert_eq!(links[0], "<stun:192.0.2.1:3478>; rel=\"ice-server\"");
        assert_eq!(
            links[1],
            format!(
                "<turn:192.0.2.1:3478?transport=udp>; rel=\"ice-server\"; username=\"1600:carol\"; \
                 credential=\"{}\"; credential-type=\"password\"",
                given[1].credential
            )
        );
        assert_eq!(links.len(), 3);
        // Static credentials are quoted, escapes and all.
        let fixed = IceServers::new(
            vec![uri("turn:192.0.2.1")],
            Some(Username("u\"1".into())),
            Some("p\\2".parse().expect("printable")),
            None,
            600,
        )
        .expect("valid");
        let links = link_headers(&fixed.for_client("anyone", now));
        assert_eq!(
            links,
            [
                "<turn:192.0.2.1>; rel=\"ice-server\"; username=\"u\\\"1\"; credential=\"p\\\\2\"; \
              credential-type=\"password\""
            ]
        );
    }

    #[test]
    fn texts_are_printable_ascii() {
        assert!("".parse::<Secret>().is_err());
        assert!("tab\there".parse::<Secret>().is_err());
        assert!("ünïcode".parse::<Username>().is_err());
        assert!(
            "x".repeat(MAX_USERNAME_BYTES + 1)
                .parse::<Username>()
                .is_err()
        );
        assert!("a b!".parse::<Username>().is_ok());
    }
}
