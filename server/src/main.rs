//! The `shoal` binary: parses the command line, starts one shard thread per core and
//! runs until SIGINT (Ctrl-C), then shuts every shard down cleanly.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use crossbeam_channel::RecvTimeoutError;
use shoal_server::config::Config;
use shoal_server::driver::{DriverError, Server};

/// How often the main thread checks that no shard thread died on its own.
const HEALTH_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// Why the process exits with a failure.
#[derive(Debug, thiserror::Error)]
enum MainError {
    #[error("cannot install the signal handler: {0}")]
    Signal(#[from] ctrlc::Error),
    #[error(transparent)]
    Driver(#[from] DriverError),
    #[error("cannot write to stdout: {0}")]
    Stdout(#[from] std::io::Error),
    #[error("shard {0} stopped unexpectedly")]
    ShardStopped(usize),
}

fn main() -> ExitCode {
    let config = Config::parse();
    match run(&config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("shoal: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(config: &Config) -> Result<(), MainError> {
    // Installed before the shards start, so an early Ctrl-C is a clean stop too.
    let (stop_tx, stop_rx) = crossbeam_channel::bounded(1);
    ctrlc::set_handler(move || {
        let _ = stop_tx.try_send(());
    })?;

    let server = Server::start(config)?;
    // Tests and scripts read the bound addresses from here (port base 0 is ephemeral).
    let mut stdout = std::io::stdout().lock();
    for (index, addr) in server.local_addrs().enumerate() {
        writeln!(stdout, "shoal: shard {index} udp {addr}")?;
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
    stdout.flush()?;
    drop(stdout);

    loop {
        match stop_rx.recv_timeout(HEALTH_CHECK_INTERVAL) {
            Ok(()) | Err(RecvTimeoutError::Disconnected) => break,
            Err(RecvTimeoutError::Timeout) => {
                if let Some(index) = server.stopped_shard() {
                    // Shutting down reports the shard's own error, if it had one.
                    server.shutdown()?;
                    return Err(MainError::ShardStopped(index));
                }
            }
        }
    }

    for r in server.shutdown()? {
        eprintln!(
            "shoal: shard {} udp {}: {} datagrams in, {} out, {} checks answered, {} peers",
            r.index,
            r.local_addr,
            r.driver.datagrams_received,
            r.driver.datagrams_sent,
            r.shard.ice_checks_answered,
            r.peers,
        );
    }
    println!("shoal: stopped");
    Ok(())
}
