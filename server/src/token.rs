//! `shoal token`: mints an access token (see [`crate::control::auth`]) with an API
//! key and its secret, for a room and an identity, granting only what its flags
//! say; with `--url`, also prints the demo page's address carrying the token.
//!
//! ```text
//! SHOAL_TOKEN_API_SECRET=S shoal token --api-key K --room lobby --identity alice \
//!     --publish --subscribe --data --valid-for 6h --url https://sfu.example:7070
//! ```
//!
//! The secret is best given in `SHOAL_TOKEN_API_SECRET`: a command line is visible to
//! every user of the machine (`/proc/PID/cmdline`).

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use clap::Parser;

use crate::control::auth::{self, Claims, VideoGrant};
use crate::ice_servers::Secret;

/// The longest validity a token may be minted with.
pub const MAX_VALID_FOR: Duration = Duration::from_secs(30 * 86_400);

/// shoal token: mints an access token (a JWT, HS256, LiveKit's claims) that
/// shoal nodes configured with the same API key accept.
#[derive(Parser, Debug)]
#[command(name = "shoal token")]
pub struct TokenArgs {
    /// The API key (the token's `iss`); `KEY:SECRET` also works without
    /// --api-secret.
    #[arg(
        long,
        env = "SHOAL_TOKEN_API_KEY",
        value_name = "KEY",
        hide_env_values = true
    )]
    pub api_key: String,

    /// The API key's secret.
    #[arg(
        long,
        env = "SHOAL_TOKEN_API_SECRET",
        value_name = "SECRET",
        hide_env_values = true
    )]
    pub api_secret: Option<String>,

    /// The room the token joins (roomJoin), or administers with --admin.
    #[arg(long, value_name = "ROOM")]
    pub room: Option<String>,

    /// The participant's identity (the token's `sub`).
    #[arg(long, value_name = "IDENTITY", default_value = "")]
    pub identity: String,

    /// The participant's display name.
    #[arg(long, value_name = "NAME", default_value = "")]
    pub name: String,

    /// The participant's metadata.
    #[arg(long, value_name = "TEXT", default_value = "")]
    pub metadata: String,

    /// May publish tracks (canPublish).
    #[arg(long)]
    pub publish: bool,

    /// May receive tracks (canSubscribe).
    #[arg(long)]
    pub subscribe: bool,

    /// May send on data channels (canPublishData).
    #[arg(long)]
    pub data: bool,

    /// May set its own name and metadata (canUpdateOwnMetadata).
    #[arg(long)]
    pub update_own_metadata: bool,

    /// Is not announced to the room (hidden).
    #[arg(long)]
    pub hidden: bool,

    /// Administers --room (roomAdmin): delete it, list, remove and message its
    /// participants.
    #[arg(long)]
    pub admin: bool,

    /// May create rooms (roomCreate).
    #[arg(long)]
    pub create: bool,

    /// May list rooms and read node information (roomList).
    #[arg(long)]
    pub list: bool,

    /// How long the token is valid: seconds, or a number with s, m, h or d (at
    /// most 30 days).
    #[arg(long, value_name = "DURATION", default_value = "6h", value_parser = parse_duration)]
    pub valid_for: Duration,

    /// The node's HTTP(S) address: also prints the demo page's URL with the token.
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
}

/// Why a token could not be minted.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// No secret given.
    #[error("give --api-secret (or --api-key KEY:SECRET)")]
    NoSecret,
    /// The secret is not one a node accepts.
    #[error(
        "the secret must be {} to {} printable ASCII characters",
        auth::MIN_SECRET_BYTES,
        auth::MAX_SECRET_BYTES
    )]
    BadSecret,
    /// Joining needs a room and an identity.
    #[error("--publish, --subscribe and --data need --room and --identity")]
    JoinWithout,
    /// --admin needs a room.
    #[error("--admin needs --room")]
    AdminWithout,
    /// Signing failed.
    #[error("cannot sign: {0}")]
    Sign(#[from] jsonwebtoken::errors::Error),
}

impl TokenArgs {
    /// The token, minted at `now`.
    pub fn mint(&self, now: SystemTime) -> Result<String, TokenError> {
        let (key, secret) = match (&self.api_secret, self.api_key.split_once(':')) {
            (Some(secret), _) => (self.api_key.as_str(), secret.as_str()),
            (None, Some((key, secret))) => (key, secret),
            (None, None) => return Err(TokenError::NoSecret),
        };
        if secret.len() < auth::MIN_SECRET_BYTES {
            return Err(TokenError::BadSecret);
        }
        let secret: Secret = secret.parse().map_err(|_| TokenError::BadSecret)?;
        let room = self.room.clone().unwrap_or_default();
        let joins = self.room.is_some() && !self.identity.is_empty();
        if (self.publish || self.subscribe || self.data) && !joins {
            return Err(TokenError::JoinWithout);
        }
        if self.admin && room.is_empty() {
            return Err(TokenError::AdminWithout);
        }
        let now = auth::unix_secs(now);
        let claims = Claims {
            iss: key.to_owned(),
            sub: self.identity.clone(),
            nbf: Some(now),
            exp: now.saturating_add(self.valid_for.as_secs()),
            name: self.name.clone(),
            metadata: self.metadata.clone(),
            video: Some(VideoGrant {
                room,
                room_join: joins,
                room_create: self.create,
                room_list: self.list,
                room_admin: self.admin,
                can_publish: Some(self.publish),
                can_subscribe: Some(self.subscribe),
                can_publish_data: Some(self.data),
                can_update_own_metadata: self.update_own_metadata,
                hidden: self.hidden,
            }),
        };
        Ok(auth::mint(&claims, &secret)?)
    }
}

/// A duration: seconds, or a number with s, m, h or d.
fn parse_duration(s: &str) -> Result<Duration, String> {
    let (number, unit) = match s.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let n: u64 = number
        .parse()
        .map_err(|_| format!("{s:?}: expected a number of s, m, h or d"))?;
    let secs = match unit {
        "s" => Some(n),
        "m" => n.checked_mul(60),
        "h" => n.checked_mul(3600),
        "d" => n.checked_mul(86_400),
        _ => None,
    }
    .ok_or_else(|| format!("{s:?}: expected a number of s, m, h or d"))?;
    let d = Duration::from_secs(secs);
    if d.is_zero() || d > MAX_VALID_FOR {
        return Err(format!("{s:?}: between 1 s and 30 days"));
    }
    Ok(d)
}

/// The demo page's URL at `base` with `token`.
pub fn demo_url(base: &str, token: &str) -> String {
    format!("{}/?token={token}", base.trim_end_matches('/'))
}

/// `shoal token …`; `args` starts at `token`.
pub fn main(args: impl IntoIterator<Item = OsString>) -> ExitCode {
    let args = match TokenArgs::try_parse_from(args) {
        Ok(args) => args,
        Err(e) => e.exit(),
    };
    match args.mint(SystemTime::now()) {
        Ok(token) => {
            println!("{token}");
            if let Some(url) = &args.url {
                println!("{}", demo_url(url, &token));
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("shoal token: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::auth::{Act, ApiKey, Auth, DEFAULT_CLOCK_SKEW};

    const SECRET: &str = "a-secret-of-thirty-two-or-more-characters";

    #[test]
    fn a_minted_token_is_accepted_for_what_its_flags_grant() {
        let args = TokenArgs::try_parse_from([
            "token",
            "--api-key",
            "devkey",
            "--api-secret",
            SECRET,
            "--room",
            "lobby",
            "--identity",
            "alice",
            "--subscribe",
            "--valid-for",
            "10m",
        ])
        .unwrap();
        let token = args.mint(SystemTime::now()).unwrap();
        let key: ApiKey = format!("devkey:{SECRET}").parse().unwrap();
        let auth = Auth::new(&[key], DEFAULT_CLOCK_SKEW);
        let caller = auth
            .check(Some(&token), Act::Join { room: "lobby" })
            .unwrap();
        let p = caller.permissions();
        assert!(p.subscribe && !p.publish && !p.publish_data);
        assert!(auth.check(Some(&token), Act::CreateRoom).is_err());
    }

    #[test]
    fn bad_arguments_are_refused() {
        let mint = |extra: &[&str]| {
            let mut args = vec!["token", "--api-key", "k"];
            args.extend_from_slice(extra);
            TokenArgs::try_parse_from(args)
                .map_err(|e| e.to_string())
                .and_then(|a| a.mint(SystemTime::now()).map_err(|e| e.to_string()))
        };
        assert!(mint(&[]).is_err(), "no secret");
        assert!(mint(&["--api-secret", "short"]).is_err());
        assert!(mint(&["--api-secret", SECRET, "--publish"]).is_err());
        assert!(mint(&["--api-secret", SECRET, "--admin"]).is_err());
        assert!(mint(&["--api-secret", SECRET, "--valid-for", "31d"]).is_err());
        assert!(mint(&["--api-secret", SECRET, "--valid-for", "0"]).is_err());
        assert!(mint(&["--api-secret", SECRET, "--create"]).is_ok());
        assert_eq!(parse_duration("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(demo_url("http://h:1/", "t"), "http://h:1/?token=t");
    }
}
