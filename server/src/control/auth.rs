//! Who may do what: the node's API keys and the access tokens signed with them.
//!
//! An access token is a JWT (RFC 7519) signed with HS256 (RFC 7518 §3.2) by one of
//! the node's API secrets, with the claims LiveKit's server SDKs write, so a token
//! minted by any of them (PyPI's `livekit-api`, `livekit-server-sdk`…) with the same
//! key and secret works unchanged:
//!
//! | claim | what |
//! |---|---|
//! | `iss` | the API key whose secret signed it |
//! | `sub` | the participant's identity |
//! | `nbf`, `exp` | when it is valid (seconds since the Unix epoch), within a bounded clock skew |
//! | `name`, `metadata` | the participant's display name and metadata |
//! | `video` | the grants: `room`, `roomJoin`, `roomCreate`, `roomList`, `roomAdmin`, `canPublish`, `canSubscribe`, `canPublishData`, `canUpdateOwnMetadata`, `hidden` |
//!
//! Unknown claims and grants are ignored. The algorithm is pinned: a token whose
//! header names anything but HS256 (`none`, RS256 with the secret as a "public key")
//! is refused before any key is looked at. The signature is checked by ring's
//! constant-time HMAC comparison, so its timing says nothing about the secret.
//!
//! With no API key configured the node runs open: every request acts, tokens are not
//! read. [`crate::config::Config::check_exposure`] lets that happen only while every
//! listener is on a loopback address.
//!
//! Every refusal is counted by reason ([`Refusal`]); `NodeService.GetNodeInfo`
//! reports the counts.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use tonic::Status;

use super::rooms::{NameKind, validate_name};
use crate::ice_servers::Secret;

/// Bytes an access token holds at most; a longer one is refused unread.
pub const MAX_TOKEN_BYTES: usize = 8 * 1024;
/// The longest API secret accepted.
pub const MAX_SECRET_BYTES: usize = crate::ice_servers::MAX_USERNAME_BYTES;
/// The default clock skew allowed on `nbf` and `exp`.
pub const DEFAULT_CLOCK_SKEW: Duration = Duration::from_secs(10);
/// The longest clock skew that may be configured.
pub const MAX_CLOCK_SKEW: Duration = Duration::from_secs(300);
/// The shortest API secret accepted: HS256 wants a key of at least the hash's size
/// (RFC 7518 §3.2: "A key of the same size as the hash output (for instance, 256
/// bits for "HS256") or larger MUST be used"), 32 bytes.
pub const MIN_SECRET_BYTES: usize = 32;

/// The `video` grant of a token, as LiveKit defines it. `canPublish`,
/// `canSubscribe` and `canPublishData` default to true when absent (as LiveKit's
/// server reads them); every other grant to false.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct VideoGrant {
    /// The room the grant is for (`roomJoin`, `roomAdmin`).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub room: String,
    /// May join `room`.
    #[serde(skip_serializing_if = "is_false")]
    pub room_join: bool,
    /// May create rooms.
    #[serde(skip_serializing_if = "is_false")]
    pub room_create: bool,
    /// May list rooms and read any room's settings.
    #[serde(skip_serializing_if = "is_false")]
    pub room_list: bool,
    /// May administer `room`: delete it, list, remove and message its participants,
    /// end their sessions.
    #[serde(skip_serializing_if = "is_false")]
    pub room_admin: bool,
    /// May publish tracks (absent: true).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub can_publish: Option<bool>,
    /// May subscribe to tracks (absent: true).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub can_subscribe: Option<bool>,
    /// May send on data channels (absent: true).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub can_publish_data: Option<bool>,
    /// May set its own name and metadata instead of the token's.
    #[serde(skip_serializing_if = "is_false")]
    pub can_update_own_metadata: bool,
    /// Is not announced to the room's other participants.
    #[serde(skip_serializing_if = "is_false")]
    pub hidden: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl VideoGrant {
    /// Whether the holder may publish tracks.
    pub fn can_publish(&self) -> bool {
        self.can_publish.unwrap_or(true)
    }

    /// Whether the holder may subscribe to tracks.
    pub fn can_subscribe(&self) -> bool {
        self.can_subscribe.unwrap_or(true)
    }

    /// Whether the holder may send on data channels.
    pub fn can_publish_data(&self) -> bool {
        self.can_publish_data.unwrap_or(true)
    }
}

/// The claims of a token (RFC 7519 §4.1 and LiveKit's).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Claims {
    /// The API key.
    pub iss: String,
    /// The identity.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub sub: String,
    /// Not valid before (seconds since the Unix epoch).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nbf: Option<u64>,
    /// Expires at (seconds since the Unix epoch); required.
    pub exp: u64,
    /// The display name.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// The participant's metadata.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub metadata: String,
    /// The grants.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub video: Option<VideoGrant>,
}

/// Why a request was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Refusal {
    /// No token came with it.
    Missing,
    /// The token is not a JWT, is too long, or its claims have the wrong shape.
    Malformed,
    /// Its header names another algorithm than HS256.
    Algorithm,
    /// Its `iss` names no API key of the node.
    UnknownKey,
    /// The signature does not verify with the key's secret.
    BadSignature,
    /// `exp` has passed (beyond the allowed skew).
    Expired,
    /// `nbf` has not come yet (beyond the allowed skew).
    NotYetValid,
    /// The token is valid but its grants do not cover the act.
    Forbidden,
}

impl Refusal {
    /// Every reason, in counting order.
    pub const ALL: [Refusal; 8] = [
        Refusal::Missing,
        Refusal::Malformed,
        Refusal::Algorithm,
        Refusal::UnknownKey,
        Refusal::BadSignature,
        Refusal::Expired,
        Refusal::NotYetValid,
        Refusal::Forbidden,
    ];

    /// The reason's name in counts and logs.
    pub fn name(self) -> &'static str {
        match self {
            Refusal::Missing => "missing",
            Refusal::Malformed => "malformed",
            Refusal::Algorithm => "algorithm",
            Refusal::UnknownKey => "unknown_key",
            Refusal::BadSignature => "bad_signature",
            Refusal::Expired => "expired",
            Refusal::NotYetValid => "not_yet_valid",
            Refusal::Forbidden => "forbidden",
        }
    }
}

/// A refused request: why, and what to tell the caller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthError {
    /// Why.
    pub refusal: Refusal,
    /// For the caller (never the token or a secret).
    pub message: String,
}

impl AuthError {
    fn new(refusal: Refusal, message: impl Into<String>) -> AuthError {
        AuthError {
            refusal,
            message: message.into(),
        }
    }

    /// Whether the caller is authenticated but not allowed (HTTP 403,
    /// PERMISSION_DENIED) rather than not authenticated (401, UNAUTHENTICATED).
    pub fn is_forbidden(&self) -> bool {
        self.refusal == Refusal::Forbidden
    }
}

impl fmt::Display for AuthError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<AuthError> for Status {
    fn from(e: AuthError) -> Status {
        if e.is_forbidden() {
            Status::permission_denied(e.message)
        } else {
            Status::unauthenticated(e.message)
        }
    }
}

/// An API key and its secret (`--api-key KEY:SECRET`).
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey {
    /// The key: the `iss` of the tokens its secret signs.
    pub key: String,
    /// The secret (never printed).
    pub secret: Secret,
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ApiKey({:?}, ..)", self.key)
    }
}

/// Why an API key was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ApiKeyError {
    /// Not `KEY:SECRET`.
    #[error("expected KEY:SECRET (the secret is not shown)")]
    Shape,
    /// The key is empty, too long, or not printable ASCII.
    #[error("the key must be 1 to 128 printable ASCII characters without ':' or spaces")]
    Key,
    /// The secret is too short or not printable ASCII.
    #[error(
        "the secret must be {MIN_SECRET_BYTES} to {MAX_SECRET_BYTES} printable ASCII \
         characters (HS256 needs a key at least as long as its hash; the secret is not \
         shown)"
    )]
    Secret,
    /// The key is given twice.
    #[error("API key {0:?} is given more than once")]
    Duplicate(String),
}

impl std::str::FromStr for ApiKey {
    type Err = ApiKeyError;

    fn from_str(s: &str) -> Result<ApiKey, ApiKeyError> {
        let (key, secret) = s.split_once(':').ok_or(ApiKeyError::Shape)?;
        let key_ok = !key.is_empty()
            && key.len() <= 128
            && key.bytes().all(|b| b.is_ascii_graphic() && b != b':');
        if !key_ok {
            return Err(ApiKeyError::Key);
        }
        if secret.len() < MIN_SECRET_BYTES {
            return Err(ApiKeyError::Secret);
        }
        let secret: Secret = secret.parse().map_err(|_| ApiKeyError::Secret)?;
        Ok(ApiKey {
            key: key.to_owned(),
            secret,
        })
    }
}

/// Who is asking, once a request passed [`Auth::check`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Caller {
    /// The node runs open (no API keys): anyone may do anything.
    Open,
    /// The holder of a valid token.
    Token(Box<Claims>),
}

impl Caller {
    /// The token's identity; `None` in open mode.
    pub fn identity(&self) -> Option<&str> {
        match self {
            Caller::Open => None,
            Caller::Token(c) => Some(&c.sub),
        }
    }

    /// The token's grants; `None` in open mode.
    pub fn grant(&self) -> Option<&VideoGrant> {
        match self {
            Caller::Open => None,
            Caller::Token(c) => Some(c.video.as_ref().unwrap_or(&NO_GRANT)),
        }
    }

    /// The display name a joiner goes by: the one it asks for in open mode or with
    /// canUpdateOwnMetadata, else the token's.
    pub fn name(&self, asked: String) -> String {
        self.own_or_token(asked, |c| &c.name)
    }

    /// The metadata a joiner carries, chosen as [`Caller::name`] is.
    pub fn metadata(&self, asked: String) -> String {
        self.own_or_token(asked, |c| &c.metadata)
    }

    /// `asked`, unless a token decides (it does not grant canUpdateOwnMetadata, or
    /// nothing was asked): then the token's `field`.
    fn own_or_token(&self, asked: String, field: impl Fn(&Claims) -> &String) -> String {
        match self {
            Caller::Token(c)
                if asked.is_empty() || !self.grant().is_some_and(|g| g.can_update_own_metadata) =>
            {
                field(c).clone()
            }
            _ => asked,
        }
    }

    /// The identity a joiner goes by: the token's `sub` (one that asks for another
    /// is refused), or the one it asks for in open mode.
    pub fn identity_for(&self, asked: String) -> Result<String, AuthError> {
        match self.identity() {
            None => Ok(asked),
            Some(sub) if asked.is_empty() || same_name(&asked, sub, NameKind::Identity) => {
                Ok(sub.to_owned())
            }
            Some(sub) => Err(AuthError::new(
                Refusal::Forbidden,
                format!(
                    "the token is for identity {:?}, not {:?}",
                    truncate(sub),
                    truncate(&asked)
                ),
            )),
        }
    }

    /// The room a joiner asks for, or (asking for none) its token's.
    pub fn room_for(&self, asked: String) -> String {
        match self.grant() {
            Some(g) if asked.is_empty() => g.room.clone(),
            _ => asked,
        }
    }

    /// What the caller may do once joined (all of it in open mode).
    pub fn permissions(&self) -> Permissions {
        match self.grant() {
            None => Permissions::ALL,
            // A hidden participant (a recorder, an observer) does not publish: its
            // tracks would name it to the room.
            Some(g) => Permissions {
                publish: g.can_publish() && !g.hidden,
                subscribe: g.can_subscribe(),
                publish_data: g.can_publish_data(),
                hidden: g.hidden,
            },
        }
    }
}

static NO_GRANT: VideoGrant = VideoGrant {
    room: String::new(),
    room_join: false,
    room_create: false,
    room_list: false,
    room_admin: false,
    can_publish: None,
    can_subscribe: None,
    can_publish_data: None,
    can_update_own_metadata: false,
    hidden: false,
};

/// What a participant may do in its room.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Permissions {
    /// Publish tracks.
    pub publish: bool,
    /// Receive others' tracks.
    pub subscribe: bool,
    /// Send on data channels.
    pub publish_data: bool,
    /// Stay out of the room's participant lists and events.
    pub hidden: bool,
}

impl Permissions {
    /// Everything, not hidden.
    pub const ALL: Permissions = Permissions {
        publish: true,
        subscribe: true,
        publish_data: true,
        hidden: false,
    };
}

/// What a request does, for [`Auth::check`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Act<'a> {
    /// Nothing yet: a valid token is enough (its grants are checked once the act
    /// is known, with [`Auth::permit`]).
    Authenticated,
    /// Join `room` (WHIP, WHEP, signalling): `roomJoin` for that room.
    Join {
        /// The room.
        room: &'a str,
    },
    /// End or change the session of `identity` in `room` (WHIP/WHEP DELETE and
    /// PATCH): a token of that identity for that room, or `roomAdmin` of it.
    Session {
        /// The room.
        room: &'a str,
        /// The session's participant.
        identity: &'a str,
    },
    /// CreateRoom: `roomCreate`.
    CreateRoom,
    /// ListRooms, GetRoom: `roomList`.
    ListRooms,
    /// NodeService.Drain: `roomCreate` and `roomList` (a token that manages the
    /// node's rooms).
    Drain,
    /// DeleteRoom, ListParticipants, RemoveParticipant, SendData on `room`:
    /// `roomAdmin` for that room.
    Admin {
        /// The room.
        room: &'a str,
    },
}

/// The node's API keys and what it does with tokens.
#[derive(Debug, Default)]
pub struct Auth {
    /// Key → secret; empty: open mode.
    keys: BTreeMap<String, Secret>,
    /// Key → the secret that calls between the nodes of a cluster are signed with,
    /// derived from the key's secret ([`node_call_secret`]): a token an
    /// application mints, whatever its grants, is not one of them.
    node_keys: BTreeMap<String, Vec<u8>>,
    /// Allowed clock skew on `nbf` and `exp`, in seconds.
    skew_secs: u64,
    /// Refusals by reason, in [`Refusal::ALL`]'s order.
    refusals: [AtomicU64; 8],
}

impl Auth {
    /// Checks with `keys` (none: open mode), allowing `skew` on `nbf` and `exp`.
    pub fn new(keys: &[ApiKey], skew: Duration) -> Auth {
        Auth {
            keys: keys
                .iter()
                .map(|k| (k.key.clone(), k.secret.clone()))
                .collect(),
            node_keys: keys
                .iter()
                .map(|k| (k.key.clone(), node_call_secret(&k.secret)))
                .collect(),
            skew_secs: skew.as_secs(),
            refusals: Default::default(),
        }
    }

    /// The caller's token again, signed by this node with the same key, claims and
    /// grants but expiring within `ttl` (or when the original does, if sooner);
    /// `None` in open mode. A node redirecting a request carries it in the new URL,
    /// where clients drop the `Authorization` header on the way (Fetch drops it on
    /// a redirect to another origin).
    pub fn reissue(&self, caller: &Caller, ttl: Duration) -> Option<String> {
        let Caller::Token(claims) = caller else {
            return None;
        };
        let secret = self.keys.get(&claims.iss)?;
        let exp = unix_secs(SystemTime::now()).saturating_add(ttl.as_secs());
        let claims = Claims {
            exp: exp.min(claims.exp),
            ..(**claims).clone()
        };
        mint(&claims, secret).ok()
    }

    /// A token this node signs for a call to another node of its cluster about
    /// `room`: identity `node`, roomAdmin of the room, expiring within `ttl`,
    /// signed with the node-call secret of the first API key (the nodes of a
    /// cluster share their keys); `None` in open mode. Only
    /// [`Auth::check_node_call`] takes it.
    pub fn node_token(&self, node: &str, room: &str, ttl: Duration) -> Option<String> {
        let (key, secret) = self.node_keys.iter().next()?;
        let claims = Claims {
            iss: key.clone(),
            sub: node.to_owned(),
            nbf: None,
            exp: unix_secs(SystemTime::now()).saturating_add(ttl.as_secs()),
            name: String::new(),
            metadata: String::new(),
            video: Some(VideoGrant {
                room: room.to_owned(),
                room_admin: true,
                ..VideoGrant::default()
            }),
        };
        jsonwebtoken::encode(
            &Header::new(Algorithm::HS256),
            &claims,
            &EncodingKey::from_secret(secret),
        )
        .ok()
    }

    /// Checks a call from node `node` of the cluster about `room` (OpenLink,
    /// LinkTracks): a token from [`Auth::node_token`] of that node, for that room.
    /// Open mode takes any call. A refusal is counted.
    pub fn check_node_call(
        &self,
        token: Option<&str>,
        room: &str,
        node: &str,
    ) -> Result<(), AuthError> {
        if self.is_open() {
            return Ok(());
        }
        let result = self
            .verify_with(token, |iss| self.node_keys.get(iss).map(Vec::as_slice))
            .and_then(|claims| {
                allows(&claims, Act::Admin { room })?;
                if same_name(&claims.sub, node, NameKind::Identity) {
                    Ok(())
                } else {
                    Err(AuthError::new(
                        Refusal::Forbidden,
                        format!(
                            "the token is for node {:?}, not {:?}",
                            truncate(&claims.sub),
                            truncate(node)
                        ),
                    ))
                }
            });
        result.inspect_err(|e| self.count(e.refusal))
    }

    /// Whether the node runs open (no API keys).
    pub fn is_open(&self) -> bool {
        self.keys.is_empty()
    }

    /// Refusals so far, by reason name (reasons never seen are left out).
    pub fn refusal_counts(&self) -> BTreeMap<String, u64> {
        Refusal::ALL
            .iter()
            .zip(&self.refusals)
            .map(|(r, n)| (r.name().to_owned(), n.load(Ordering::Relaxed)))
            .filter(|(_, n)| *n > 0)
            .collect()
    }

    /// Refusals for `refusal` so far.
    pub fn refusal_count(&self, refusal: Refusal) -> u64 {
        self.refusals[refusal as usize].load(Ordering::Relaxed)
    }

    /// `result`, its refusal counted.
    pub fn counted<T>(&self, result: Result<T, AuthError>) -> Result<T, AuthError> {
        result.inspect_err(|e| self.count(e.refusal))
    }

    /// Counts a refusal made elsewhere (a grant checked after the fact).
    pub fn count(&self, refusal: Refusal) {
        // The discriminants are the positions in `Refusal::ALL`.
        self.refusals[refusal as usize].fetch_add(1, Ordering::Relaxed);
        // The reason only: never the token, which may be valid for another act.
        tracing::info!(
            event = "auth_refused",
            reason = refusal.name(),
            "access token refused"
        );
    }

    /// A refusal for `refusal` saying `message`, counted.
    pub fn refuse(&self, refusal: Refusal, message: impl Into<String>) -> AuthError {
        self.count(refusal);
        AuthError::new(refusal, message)
    }

    /// Whether `token` allows `act` now: the caller, or why not (counted).
    pub fn check(&self, token: Option<&str>, act: Act<'_>) -> Result<Caller, AuthError> {
        if self.is_open() {
            return Ok(Caller::Open);
        }
        let result = self
            .verify(token)
            .and_then(|claims| allows(&claims, act).map(|()| claims));
        match result {
            Ok(claims) => Ok(Caller::Token(Box::new(claims))),
            Err(e) => {
                self.count(e.refusal);
                Err(e)
            }
        }
    }

    /// Whether `caller` (from [`Auth::check`]) may do `act`; a refusal is counted.
    pub fn permit(&self, caller: &Caller, act: Act<'_>) -> Result<(), AuthError> {
        let Caller::Token(claims) = caller else {
            return Ok(());
        };
        allows(claims, act).inspect_err(|e| self.count(e.refusal))
    }

    /// The claims of `token` if it is valid now (not counted).
    fn verify(&self, token: Option<&str>) -> Result<Claims, AuthError> {
        self.verify_with(token, |iss| {
            self.keys.get(iss).map(|s| s.expose().as_bytes())
        })
    }

    /// The claims of `token` if it is valid now and signed with the secret
    /// `secret_of` gives for its `iss` (not counted).
    fn verify_with<'s>(
        &'s self,
        token: Option<&str>,
        secret_of: impl Fn(&str) -> Option<&'s [u8]>,
    ) -> Result<Claims, AuthError> {
        let token = token.filter(|t| !t.is_empty()).ok_or_else(|| {
            AuthError::new(
                Refusal::Missing,
                "an access token is required (Authorization: Bearer <token>)",
            )
        })?;
        let malformed = |what: &str| AuthError::new(Refusal::Malformed, what.to_owned());
        if token.len() > MAX_TOKEN_BYTES {
            return Err(malformed("the access token is too long"));
        }
        let mut parts = token.split('.');
        let (Some(header), Some(payload), Some(_signature), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(malformed("the access token is not a JWT"));
        };
        // The algorithm first, from the header as sent: nothing but HS256 goes on.
        #[derive(Deserialize)]
        struct Alg {
            alg: String,
        }
        let alg: Alg = json_part(header).ok_or_else(|| malformed("the token's header"))?;
        if alg.alg != "HS256" {
            return Err(AuthError::new(
                Refusal::Algorithm,
                format!("tokens are signed with HS256, not {:?}", truncate(&alg.alg)),
            ));
        }
        #[derive(Deserialize)]
        struct Issuer {
            #[serde(default)]
            iss: String,
        }
        let issuer: Issuer = json_part(payload).ok_or_else(|| malformed("the token's claims"))?;
        let secret = secret_of(&issuer.iss).ok_or_else(|| {
            AuthError::new(
                Refusal::UnknownKey,
                "the token's iss names no API key of this node",
            )
        })?;
        let mut validation = Validation::new(Algorithm::HS256);
        validation.leeway = self.skew_secs;
        validation.validate_nbf = true;
        validation.set_required_spec_claims(&["exp", "iss"]);
        validation.set_issuer(&[&issuer.iss]);
        let key = DecodingKey::from_secret(secret);
        // jsonwebtoken checks exp and nbf against the system clock, within the skew.
        let claims = jsonwebtoken::decode::<Claims>(token, &key, &validation)
            .map_err(|e| token_error(e.kind()))?
            .claims;
        Ok(claims)
    }
}

/// Whether `claims`' grants cover `act`.
fn allows(claims: &Claims, act: Act<'_>) -> Result<(), AuthError> {
    let grant = claims.video.as_ref().unwrap_or(&NO_GRANT);
    let forbidden = |what: String| Err(AuthError::new(Refusal::Forbidden, what));
    let admin_of = |room: &str| grant.room_admin && same_room(&grant.room, room);
    match act {
        Act::Authenticated => Ok(()),
        Act::Join { room } => {
            if !grant.room_join {
                return forbidden("the token does not grant roomJoin".into());
            }
            if !same_room(&grant.room, room) {
                return forbidden(format!(
                    "the token grants joining room {:?}, not {:?}",
                    truncate(&grant.room),
                    truncate(room)
                ));
            }
            if claims.sub.is_empty() {
                return forbidden("the token names no identity (sub)".into());
            }
            Ok(())
        }
        Act::Session { room, identity } => {
            let own = grant.room_join
                && same_room(&grant.room, room)
                && same_name(&claims.sub, identity, NameKind::Identity);
            if own || admin_of(room) {
                Ok(())
            } else {
                forbidden(
                    "the session belongs to another participant (its own token, or \
                     roomAdmin of its room, may end it)"
                        .into(),
                )
            }
        }
        Act::CreateRoom if grant.room_create => Ok(()),
        Act::CreateRoom => forbidden("the token does not grant roomCreate".into()),
        Act::ListRooms if grant.room_list => Ok(()),
        Act::ListRooms => forbidden("the token does not grant roomList".into()),
        Act::Drain if grant.room_create && grant.room_list => Ok(()),
        Act::Drain => forbidden("draining needs a token granting roomCreate and roomList".into()),
        Act::Admin { room } if admin_of(room) => Ok(()),
        Act::Admin { room } => forbidden(format!(
            "the token does not grant roomAdmin of room {:?}",
            truncate(room)
        )),
    }
}

/// Whether two names are the same once in the directory's form (NFC): a token for
/// "é" precomposed covers the room "e" + U+0301.
fn same_name(a: &str, b: &str, kind: NameKind) -> bool {
    a == b
        || matches!(
            (validate_name(a, kind), validate_name(b, kind)),
            (Ok(x), Ok(y)) if x == y
        )
}

fn same_room(a: &str, b: &str) -> bool {
    same_name(a, b, NameKind::Room)
}

/// What a jsonwebtoken error means for the caller.
fn token_error(kind: &ErrorKind) -> AuthError {
    let (refusal, message) = match kind {
        ErrorKind::InvalidSignature => (
            Refusal::BadSignature,
            "the token's signature does not verify",
        ),
        ErrorKind::ExpiredSignature => (Refusal::Expired, "the token has expired"),
        ErrorKind::ImmatureSignature => (Refusal::NotYetValid, "the token is not valid yet"),
        ErrorKind::InvalidAlgorithm | ErrorKind::InvalidAlgorithmName => {
            (Refusal::Algorithm, "tokens are signed with HS256")
        }
        ErrorKind::MissingRequiredClaim(_) => (Refusal::Malformed, "the token lacks exp or iss"),
        _ => (Refusal::Malformed, "the access token is malformed"),
    };
    AuthError::new(refusal, message)
}

/// A base64url JWT part as JSON of `T`.
fn json_part<T: serde::de::DeserializeOwned>(part: &str) -> Option<T> {
    let bytes = URL_SAFE_NO_PAD.decode(part).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// At most 64 characters of `s`, for messages.
fn truncate(s: &str) -> &str {
    match s.char_indices().nth(64) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// `t` in seconds since the Unix epoch.
pub fn unix_secs(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs()
}

/// A token for `claims` signed with `secret` (HS256), as `shoal token` and tests
/// mint them. `nbf` and `exp` are the caller's.
pub fn mint(claims: &Claims, secret: &Secret) -> Result<String, jsonwebtoken::errors::Error> {
    jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        claims,
        &EncodingKey::from_secret(secret.expose().as_bytes()),
    )
}

/// The secret calls between the nodes of a cluster are signed with, for an API key
/// whose secret is `secret`: HMAC-SHA256 (RFC 2104) of a fixed label under it, so
/// that every node holding the key derives it, and no token signed with the key
/// itself passes for a node's.
fn node_call_secret(secret: &Secret) -> Vec<u8> {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret.expose().as_bytes());
    ring::hmac::sign(&key, b"shoal cluster node-to-node calls")
        .as_ref()
        .to_vec()
}

/// The bearer token of an `Authorization` header value (RFC 6750 §2.1: the scheme
/// is case-insensitive, RFC 9110 §11.1).
pub fn bearer(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "0123456789abcdef0123456789abcdef-secret";

    fn auth() -> Auth {
        Auth::new(
            &[format!("APIkey1:{SECRET}").parse().unwrap()],
            DEFAULT_CLOCK_SKEW,
        )
    }

    fn now() -> u64 {
        unix_secs(SystemTime::now())
    }

    fn claims(grant: VideoGrant) -> Claims {
        Claims {
            iss: "APIkey1".into(),
            sub: "alice".into(),
            nbf: Some(now() - 5),
            exp: now() + 600,
            video: Some(grant),
            ..Claims::default()
        }
    }

    fn join_grant(room: &str) -> VideoGrant {
        VideoGrant {
            room: room.into(),
            room_join: true,
            ..VideoGrant::default()
        }
    }

    fn token(c: &Claims) -> String {
        mint(c, &SECRET.parse().unwrap()).unwrap()
    }

    fn refusal(r: Result<Caller, AuthError>) -> Refusal {
        r.expect_err("refused").refusal
    }

    #[test]
    fn a_valid_token_joins_its_room_only() {
        let a = auth();
        let t = token(&claims(join_grant("lobby")));
        let caller = a.check(Some(&t), Act::Join { room: "lobby" }).unwrap();
        assert_eq!(caller.identity(), Some("alice"));
        assert_eq!(caller.permissions(), Permissions::ALL);
        assert_eq!(
            refusal(a.check(Some(&t), Act::Join { room: "other" })),
            Refusal::Forbidden
        );
        assert_eq!(
            refusal(a.check(Some(&t), Act::CreateRoom)),
            Refusal::Forbidden
        );
        assert_eq!(
            refusal(a.check(Some(&t), Act::Admin { room: "lobby" })),
            Refusal::Forbidden
        );
        assert_eq!(a.refusal_counts().get("forbidden"), Some(&3));
    }

    #[test]
    fn bad_tokens_are_refused_with_their_reason() {
        let a = auth();
        let join = Act::Join { room: "lobby" };
        assert_eq!(refusal(a.check(None, join)), Refusal::Missing);
        assert_eq!(refusal(a.check(Some("x.y"), join)), Refusal::Malformed);
        let good = token(&claims(join_grant("lobby")));
        // Another secret.
        let forged = mint(
            &claims(join_grant("lobby")),
            &"another-secret-another-secret-another".parse().unwrap(),
        )
        .unwrap();
        assert_eq!(refusal(a.check(Some(&forged), join)), Refusal::BadSignature);
        // alg none, the signature dropped.
        let parts: Vec<&str> = good.split('.').collect();
        let none = format!(
            "{}.{}.",
            URL_SAFE_NO_PAD.encode(br#"{"alg":"none","typ":"JWT"}"#),
            parts[1]
        );
        assert_eq!(refusal(a.check(Some(&none), join)), Refusal::Algorithm);
        // HS512 with the right secret: the algorithm is pinned.
        let hs512 = jsonwebtoken::encode(
            &Header::new(Algorithm::HS512),
            &claims(join_grant("lobby")),
            &EncodingKey::from_secret(SECRET.as_bytes()),
        )
        .unwrap();
        assert_eq!(refusal(a.check(Some(&hs512), join)), Refusal::Algorithm);
        let mut other_key = claims(join_grant("lobby"));
        other_key.iss = "nobody".into();
        assert_eq!(
            refusal(a.check(Some(&token(&other_key)), join)),
            Refusal::UnknownKey
        );
        let mut expired = claims(join_grant("lobby"));
        expired.exp = now() - 11;
        assert_eq!(
            refusal(a.check(Some(&token(&expired)), join)),
            Refusal::Expired
        );
        let mut early = claims(join_grant("lobby"));
        early.nbf = Some(now() + 60);
        assert_eq!(
            refusal(a.check(Some(&token(&early)), join)),
            Refusal::NotYetValid
        );
        // Within the skew, both ways.
        let mut skewed = claims(join_grant("lobby"));
        skewed.exp = now() - 5;
        skewed.nbf = Some(now() + 5);
        assert!(a.check(Some(&token(&skewed)), join).is_ok());
        // A signature changed by one character.
        let mut tampered = good.clone();
        let last = tampered.pop().unwrap();
        tampered.push(if last == 'A' { 'B' } else { 'A' });
        assert!(matches!(
            refusal(a.check(Some(&tampered), join)),
            Refusal::BadSignature | Refusal::Malformed
        ));
    }

    #[test]
    fn sessions_need_their_own_identity_or_room_admin() {
        let a = auth();
        let own = token(&claims(join_grant("lobby")));
        let act = Act::Session {
            room: "lobby",
            identity: "alice",
        };
        assert!(a.check(Some(&own), act).is_ok());
        let bob = Act::Session {
            room: "lobby",
            identity: "bob",
        };
        assert_eq!(refusal(a.check(Some(&own), bob)), Refusal::Forbidden);
        let admin = token(&claims(VideoGrant {
            room: "lobby".into(),
            room_admin: true,
            ..VideoGrant::default()
        }));
        assert!(a.check(Some(&admin), bob).is_ok());
        assert!(a.check(Some(&admin), Act::Admin { room: "lobby" }).is_ok());
        assert_eq!(
            refusal(a.check(Some(&admin), Act::Admin { room: "hall" })),
            Refusal::Forbidden
        );
    }

    #[test]
    fn unknown_claims_are_ignored_and_grants_default_as_livekit_reads_them() {
        // What livekit-api 1.x writes, with claims shoal does not know.
        let payload = format!(
            r#"{{"iss":"APIkey1","sub":"carol","nbf":{},"exp":{},"kind":"standard",
            "attributes":{{"a":"b"}},"name":"Carol","video":{{"roomJoin":true,
            "room":"lobby","canPublish":false,"recorder":true}}}}"#,
            now() - 1,
            now() + 60
        );
        let value: serde_json::Value = serde_json::from_str(&payload).unwrap();
        let t = jsonwebtoken::encode(
            &Header::new(Algorithm::HS256),
            &value,
            &EncodingKey::from_secret(SECRET.as_bytes()),
        )
        .unwrap();
        let caller = auth().check(Some(&t), Act::Join { room: "lobby" }).unwrap();
        let p = caller.permissions();
        assert!(!p.publish && p.subscribe && p.publish_data && !p.hidden);
    }

    #[test]
    fn names_compare_in_their_normal_form() {
        let a = auth();
        let t = token(&claims(join_grant("caf\u{e9}")));
        assert!(
            a.check(
                Some(&t),
                Act::Join {
                    room: "cafe\u{301}"
                }
            )
            .is_ok()
        );
        let caller = a.check(Some(&t), Act::Authenticated).unwrap();
        assert!(caller.identity_for("alice".into()).is_ok());
        assert!(caller.identity_for("Alice".into()).is_err());
    }

    #[test]
    fn node_calls_take_only_a_node_token_for_the_room_and_node() {
        let a = auth();
        let ttl = Duration::from_secs(60);
        let t = a.node_token("node-a", "lobby", ttl).expect("keys");
        a.check_node_call(Some(&t), "lobby", "node-a")
            .expect("its own call");
        let refused = |r: Result<(), AuthError>| r.expect_err("refused").refusal;
        // Another room, another node.
        assert_eq!(
            refused(a.check_node_call(Some(&t), "hall", "node-a")),
            Refusal::Forbidden
        );
        assert_eq!(
            refused(a.check_node_call(Some(&t), "lobby", "node-b")),
            Refusal::Forbidden
        );
        // An application's roomAdmin token naming the node, signed with the API
        // key itself, is no node's.
        let admin = Claims {
            sub: "node-a".into(),
            ..claims(VideoGrant {
                room: "lobby".into(),
                room_admin: true,
                ..VideoGrant::default()
            })
        };
        assert_eq!(
            refused(a.check_node_call(Some(&token(&admin)), "lobby", "node-a")),
            Refusal::BadSignature
        );
        // Nor does a node's token pass as an application's.
        assert_eq!(
            refusal(a.check(Some(&t), Act::Admin { room: "lobby" })),
            Refusal::BadSignature
        );
        assert_eq!(
            refused(a.check_node_call(None, "lobby", "node-a")),
            Refusal::Missing
        );
        // Open mode takes any call.
        let open = Auth::default();
        open.check_node_call(None, "lobby", "node-a").expect("open");
    }

    #[test]
    fn open_mode_reads_no_token() {
        let a = Auth::new(&[], DEFAULT_CLOCK_SKEW);
        assert_eq!(a.check(None, Act::CreateRoom), Ok(Caller::Open));
        assert_eq!(a.check(Some("junk"), Act::ListRooms), Ok(Caller::Open));
        assert!(a.refusal_counts().is_empty());
    }

    #[test]
    fn api_keys_parse_without_showing_the_secret() {
        assert!("k:short".parse::<ApiKey>().is_err());
        assert_eq!("nocolon".parse::<ApiKey>(), Err(ApiKeyError::Shape));
        let k: ApiKey = format!("k:{SECRET}").parse().unwrap();
        assert!(!format!("{k:?}").contains("secret"));
        assert_eq!(bearer("Bearer abc"), Some("abc"));
        assert_eq!(bearer("bearer  abc "), Some("abc"));
        assert_eq!(bearer("Basic abc"), None);
    }
}
