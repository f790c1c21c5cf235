//! The node's log: `tracing` events to stderr, as text for people or one JSON object
//! per line for collectors (`--log-format`), filtered by `--log-level` (or `RUST_LOG`
//! when the flag is not given; `info` when neither is).
//!
//! What is logged, at `info`: the configuration at start-up (never a secret: API
//! keys by name only), every join (`event="join"`), refused join
//! (`event="join_refused"`), leave with its reason (`event="leave"`), refused token
//! (`event="auth_refused"`, the reason, never the token), session failure
//! (`event="session_failure"`: consent lost, ICE or DTLS failed) and shutdown. Per
//! packet and per message nothing is logged at any level above `trace`.

use std::fmt;
use std::str::FromStr;

use tracing_subscriber::EnvFilter;

/// How log lines look.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One line per event for people: time, level, message, fields.
    #[default]
    Text,
    /// One JSON object per line: `timestamp`, `level`, `target`, `fields` (the
    /// message and every field of the event), for log collectors.
    Json,
}

impl fmt::Display for LogFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        })
    }
}

/// A `--log-level` that parses as a filter: a level (`error` … `trace`) or
/// directives in `RUST_LOG`'s syntax (`info,shoal_server::control=debug`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogLevel(String);

impl FromStr for LogLevel {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        EnvFilter::try_new(s).map_err(|e| format!("not a log filter: {e}"))?;
        Ok(LogLevel(s.to_owned()))
    }
}

impl fmt::Display for LogLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Installs the process's subscriber: `level` if given, else `RUST_LOG` if set and
/// valid, else `info`; lines go to stderr in `format`. A second call does nothing.
pub fn init(level: Option<&LogLevel>, format: LogFormat) {
    let filter = match level {
        Some(level) => EnvFilter::try_new(&level.0).ok(),
        None => EnvFilter::try_from_default_env().ok(),
    }
    .unwrap_or_else(|| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(true);
    let _ = match format {
        LogFormat::Text => builder.with_ansi(false).try_init(),
        LogFormat::Json => builder
            .json()
            .with_current_span(false)
            .with_span_list(false)
            .try_init(),
    };
}
