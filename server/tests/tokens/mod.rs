//! Access tokens for tests: minted with shoal's own signer for a node started with
//! [`API_KEY`], plus the malformed and forged ones an attacker would send.

#![allow(dead_code)]

use std::time::SystemTime;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use shoal_server::control::auth::{self, ApiKey, Claims, VideoGrant};

/// The node's API key.
pub const KEY: &str = "APItestkey";
/// Its secret.
pub const SECRET: &str = "test-secret-of-at-least-thirty-two-characters";

/// The key as `--api-key` takes it.
pub fn api_key() -> ApiKey {
    format!("{KEY}:{SECRET}").parse().expect("a valid key")
}

/// Seconds since the Unix epoch.
pub fn now() -> u64 {
    auth::unix_secs(SystemTime::now())
}

/// Claims for `identity` with `grant`, valid from a second ago for ten minutes.
pub fn claims(identity: &str, grant: VideoGrant) -> Claims {
    Claims {
        iss: KEY.into(),
        sub: identity.into(),
        nbf: Some(now() - 1),
        exp: now() + 600,
        video: Some(grant),
        ..Claims::default()
    }
}

/// `claims` signed with the node's secret.
pub fn sign(claims: &Claims) -> String {
    auth::mint(claims, &SECRET.parse().expect("a valid secret")).expect("signed")
}

/// A token for `identity` with `grant`.
pub fn token(identity: &str, grant: VideoGrant) -> String {
    sign(&claims(identity, grant))
}

/// A grant to join `room` with every permission.
pub fn join(room: &str) -> VideoGrant {
    VideoGrant {
        room: room.into(),
        room_join: true,
        ..VideoGrant::default()
    }
}

/// A grant of everything an operator does: create and list rooms, administer
/// `room`.
pub fn operator(room: &str) -> VideoGrant {
    VideoGrant {
        room: room.into(),
        room_create: true,
        room_list: true,
        room_admin: true,
        ..VideoGrant::default()
    }
}

/// `claims` signed with another secret.
pub fn forged(claims: &Claims) -> String {
    auth::mint(
        claims,
        &"not-the-node-secret-not-the-node-secret"
            .parse()
            .expect("a valid secret"),
    )
    .expect("signed")
}

/// `claims` under `"alg": "none"`, without a signature (RFC 7519 §6.1).
pub fn unsigned(claims: &Claims) -> String {
    let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"none","typ":"JWT"}"#);
    let payload = URL_SAFE_NO_PAD.encode(serde_json::to_vec(claims).expect("json"));
    format!("{header}.{payload}.")
}

/// `claims` expired a minute ago (beyond the default skew).
pub fn expired(mut claims: Claims) -> String {
    claims.nbf = Some(now() - 3600);
    claims.exp = now() - 60;
    sign(&claims)
}

/// `claims` valid from a minute on.
pub fn premature(mut claims: Claims) -> String {
    claims.nbf = Some(now() + 60);
    sign(&claims)
}
