//! The `shoal` binary: reads its configuration (flags, `SHOAL_*` variables, a TOML
//! file), starts one shard thread per core and the control plane (gRPC and HTTP), and
//! runs until SIGINT or SIGTERM. The first of those drains the node
//! (`shoal_server::control::drain`: no new joins, everyone told to leave) and waits
//! up to `--drain-timeout` for its participants to be gone; a second one stops at
//! once. Then the control plane and every shard shut down cleanly. SIGHUP reloads
//! the TLS certificate. `shoal token …` mints an access token instead.

use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use crossbeam_channel::RecvTimeoutError;
use shoal_server::config::{Config, ConfigError};
use shoal_server::control::auth::ApiKey;
use shoal_server::control::{ControlError, ControlPlane, ControlSettings};
use shoal_server::driver::{DriverError, Server};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

/// How often the main thread checks that no shard or control thread died on its own.
const HEALTH_CHECK_INTERVAL: Duration = Duration::from_secs(1);
/// How often a draining node looks whether its participants are gone.
const DRAIN_CHECK_INTERVAL: Duration = Duration::from_millis(50);

/// Why the process exits with a failure.
#[derive(Debug, thiserror::Error)]
enum MainError {
    #[error("cannot install the signal handlers: {0}")]
    Signal(std::io::Error),
    #[error(transparent)]
    Driver(#[from] DriverError),
    #[error(transparent)]
    Control(#[from] ControlError),
    #[error("cannot write to stdout: {0}")]
    Stdout(#[from] std::io::Error),
    #[error("shard {0} stopped unexpectedly")]
    ShardStopped(usize),
    #[error("the control plane stopped unexpectedly")]
    ControlStopped,
}

fn main() -> ExitCode {
    // `shoal token …` mints an access token and exits.
    if std::env::args_os().nth(1).is_some_and(|a| a == "token") {
        return shoal_server::token::main(std::env::args_os().skip(1));
    }
    let config = match Config::load() {
        Ok(config) => config,
        // clap prints help and version itself, and its own errors with usage.
        Err(ConfigError::Invalid(e)) => e.exit(),
        Err(e) => {
            eprintln!("shoal: {e}");
            return ExitCode::FAILURE;
        }
    };
    shoal_server::logging::init(config.log_level.as_ref(), config.log_format);
    // Read once: the keys file's keys join --api-key's; no key and a listener
    // others can reach is refused here, before anything starts.
    let keys = match config
        .api_keys()
        .and_then(|keys| config.check_exposure(&keys).map(|()| keys))
    {
        Ok(keys) => keys,
        Err(e) => {
            tracing::error!(event = "config_refused", "{e}");
            return ExitCode::FAILURE;
        }
    };
    log_config(&config, &keys);
    match run(&config, keys) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(event = "stopped", "{e}");
            ExitCode::FAILURE
        }
    }
}

/// One event with the configuration that matters to an operator reading the log
/// later. Never a secret: API keys by name, TLS by its files' paths.
fn log_config(config: &Config, keys: &[ApiKey]) {
    let list = |items: &mut dyn Iterator<Item = String>| items.collect::<Vec<_>>().join(",");
    tracing::info!(
        event = "config",
        version = env!("CARGO_PKG_VERSION"),
        shards = config.shards.get(),
        udp_port_base = config.udp_port_base,
        bind = list(&mut config.bind.iter().map(ToString::to_string)),
        announce = list(&mut config.announce.iter().map(ToString::to_string)),
        grpc = %config.grpc_addr,
        http = %config.http_addr,
        tls = config.tls_cert.is_some(),
        api_keys = list(&mut keys.iter().map(|k| k.key.clone())),
        max_peers_per_shard = config.max_peers_per_shard,
        max_rooms = config.max_rooms,
        auto_create_rooms = config.auto_create_rooms,
        ice_servers = list(&mut config.ice_servers.iter().map(|u| u.as_str().to_owned())),
        log_format = %config.log_format,
        "shoal starting"
    );
}

/// The name of a signal that stops or drains the node, for its log event.
fn signal_name(signal: i32) -> &'static str {
    match signal {
        SIGTERM => "SIGTERM",
        SIGINT => "SIGINT",
        _ => "signal",
    }
}

fn run(config: &Config, api_keys: Vec<ApiKey>) -> Result<(), MainError> {
    // Installed before the shards start, so an early Ctrl-C is a clean stop too:
    // SIGINT and SIGTERM stop the node, SIGHUP reloads its TLS certificate.
    let (signal_tx, signals_rx) = crossbeam_channel::bounded(4);
    let mut signals = Signals::new([SIGINT, SIGTERM, SIGHUP]).map_err(MainError::Signal)?;
    std::thread::Builder::new()
        .name("shoal-signals".into())
        .spawn(move || {
            for signal in signals.forever() {
                if signal_tx.send(signal).is_err() {
                    return;
                }
            }
        })
        .map_err(MainError::Signal)?;

    let mut server = Server::start(config)?;
    // The control plane talks to the shards only through their command channels.
    // Dropping `server` on an error below shuts the shards down.
    let key_names: Vec<String> = api_keys.iter().map(|k| k.key.clone()).collect();
    let control = match ControlSettings::from_config(config) {
        Some(settings) => {
            let settings = ControlSettings {
                api_keys,
                ..settings
            };
            Some(ControlPlane::start(settings, server.control_handles())?)
        }
        None => None,
    };
    // Tests and scripts read the bound addresses from here (port base 0 is
    // ephemeral), operators what clients are told to reach.
    let mut stdout = std::io::stdout().lock();
    let list = |addrs: Option<&[std::net::SocketAddr]>| {
        let addrs: Vec<String> = addrs
            .unwrap_or_default()
            .iter()
            .map(ToString::to_string)
            .collect();
        addrs.join(" ")
    };
    for index in 0..server.shard_count() {
        let bound = list(server.bound_addrs(index));
        writeln!(stdout, "shoal: shard {index} udp {bound}")?;
    }
    for index in 0..server.shard_count() {
        let announced = list(server.candidates(index));
        writeln!(stdout, "shoal: shard {index} announces {announced}")?;
    }
    for index in 0..server.shard_count() {
        let tcp = server.tcp_bound_addrs(index).unwrap_or_default();
        if !tcp.is_empty() {
            let bound = list(Some(tcp));
            let announced = list(server.tcp_candidates(index));
            writeln!(
                stdout,
                "shoal: shard {index} ice-tcp {bound} announces {announced}"
            )?;
        }
    }
    // The URIs only: the credentials are minted per client and never printed.
    let ice_servers: Vec<&str> = config.ice_servers.iter().map(|u| u.as_str()).collect();
    if !ice_servers.is_empty() {
        writeln!(
            stdout,
            "shoal: ice servers for clients {}",
            ice_servers.join(" ")
        )?;
    }
    let fingerprint: Vec<String> = server
        .fingerprint()
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect();
    writeln!(
        stdout,
        "shoal: dtls fingerprint sha-256 {}",
        fingerprint.join(":")
    )?;
    // The keys' names only; their secrets are never printed.
    if key_names.is_empty() {
        writeln!(stdout, "shoal: auth open (no API key)")?;
    } else {
        writeln!(
            stdout,
            "shoal: auth access tokens of API keys {}",
            key_names.join(" ")
        )?;
    }
    let tls = control.as_ref().is_some_and(ControlPlane::is_tls);
    let (grpc_scheme, http_scheme) = if tls {
        ("https", "https")
    } else {
        ("http", "http")
    };
    match control.as_ref().and_then(ControlPlane::grpc_addr) {
        Some(addr) => writeln!(stdout, "shoal: grpc {grpc_scheme}://{addr}")?,
        None => writeln!(stdout, "shoal: grpc off")?,
    }
    match control.as_ref().and_then(ControlPlane::cluster_node) {
        Some((id, prefix)) => writeln!(stdout, "shoal: cluster node {id} prefix {prefix}")?,
        None => writeln!(stdout, "shoal: cluster off (no --etcd)")?,
    }
    match control.as_ref().and_then(ControlPlane::http_addr) {
        Some(addr) => writeln!(stdout, "shoal: http {http_scheme}://{addr}")?,
        None => writeln!(stdout, "shoal: http off")?,
    }
    stdout.flush()?;
    drop(stdout);

    // Once the node drains: whether it does, and when the wait for participants
    // ends (none: a NodeService.Drain with `--drain-timeout 0` waits until they
    // are gone, which consent expiry bounds).
    let mut draining = false;
    let mut drain_deadline: Option<Instant> = None;
    // SIGTERMs and SIGINTs so far: the first drains, the second stops at once.
    let mut stop_signals = 0u32;
    loop {
        let wait = if draining {
            DRAIN_CHECK_INTERVAL
        } else {
            HEALTH_CHECK_INTERVAL
        };
        if let Some(c) = control.as_ref()
            && !draining
            && c.is_draining()
        {
            // Asked for over gRPC (NodeService.Drain).
            draining = true;
            drain_deadline = (config.drain_timeout > 0)
                .then(|| Instant::now() + Duration::from_secs(config.drain_timeout));
        }
        if draining {
            if control.as_ref().is_none_or(ControlPlane::is_drained) {
                tracing::info!(event = "drain_done", "every participant is gone");
                break;
            }
            if drain_deadline.is_some_and(|d| Instant::now() >= d) {
                tracing::warn!(
                    event = "drain_timeout",
                    seconds = config.drain_timeout,
                    "participants still connected after the drain timeout"
                );
                break;
            }
        }
        match signals_rx.recv_timeout(wait) {
            Ok(SIGHUP) => match control.as_ref().and_then(ControlPlane::reload_tls) {
                Some(Ok(())) => tracing::info!(event = "tls_reloaded", "TLS certificate reloaded"),
                Some(Err(e)) => {
                    tracing::warn!(event = "tls_reload_failed", "TLS certificate kept: {e}")
                }
                None => tracing::warn!(
                    event = "tls_reload_failed",
                    "SIGHUP: no TLS certificate to reload"
                ),
            },
            // The first SIGTERM or SIGINT drains (or lets a drain asked for over
            // gRPC go on); a second one, or any with `--drain-timeout 0` or no
            // control plane (no one to tell), stops at once.
            Ok(signal @ (SIGTERM | SIGINT)) => {
                stop_signals += 1;
                let Some(c) = control.as_ref() else { break };
                if stop_signals > 1 || config.drain_timeout == 0 {
                    break;
                }
                tracing::info!(
                    event = "drain_requested",
                    by = signal_name(signal),
                    timeout_seconds = config.drain_timeout,
                    "draining; a second signal stops at once"
                );
                c.drain();
                draining = true;
                drain_deadline = Some(Instant::now() + Duration::from_secs(config.drain_timeout));
            }
            Ok(_) | Err(RecvTimeoutError::Disconnected) => break,
            Err(RecvTimeoutError::Timeout) => {
                if let Some(index) = server.stopped_shard() {
                    // Shutting down reports the shard's own error, if it had one.
                    if let Some(c) = control {
                        c.shutdown()?;
                    }
                    server.shutdown()?;
                    return Err(MainError::ShardStopped(index));
                }
                if control.as_ref().is_some_and(ControlPlane::is_finished) {
                    if let Some(c) = control {
                        c.shutdown()?;
                    }
                    server.shutdown()?;
                    return Err(MainError::ControlStopped);
                }
            }
        }
    }

    // The control plane first: it may be waiting on a shard.
    if let Some(c) = control {
        c.shutdown()?;
    }

    for r in server.shutdown()? {
        tracing::info!(
            event = "shard_stopped",
            shard = r.index,
            udp = %r.local_addr,
            datagrams_in = r.driver.datagrams_received,
            datagrams_out = r.driver.datagrams_sent,
            checks_answered = r.shard.ice_checks_answered,
            peers = r.peers,
            "shard stopped"
        );
    }
    tracing::info!(event = "stopped", "shoal stopped");
    println!("shoal: stopped");
    Ok(())
}
