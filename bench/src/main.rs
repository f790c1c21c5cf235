//! shoal's benchmarks, one subcommand each.
//!
//! `shoal-bench ice`: connectivity checks answered per second by one shard holding
//! many ICE-lite peers, fed in driver-sized batches. It measures the whole tick
//! (ingest demux, ufrag lookup, MESSAGE-INTEGRITY verification, response with
//! integrity and fingerprint, egress), and shows whether the per-check cost stays flat
//! as the number of peers grows (lookups are by hash, never by scan).
//!
//! `shoal-bench flow`: data-channel throughput between pairs of shoal endpoints over
//! loopback UDP, with send-side flow control (see `flow.rs` and bench/README.md).
//!
//! `shoal-bench udp`: the loopback UDP ceiling under `flow`: the same batched socket
//! I/O carrying the same datagrams with nothing above it.
//!
//! `shoal-bench srtp`: SRTP and SRTCP protect and unprotect per packet and profile, and
//! the crypto backends beneath them.
//!
//! `shoal-bench media`: one server shard forwarding a publisher's video to N
//! subscribers, SRTP in and out (see `media.rs`).
//!
//! `shoal-bench churn`: sessions joining and leaving a node at a rate, a third of
//! them vanishing without a word, so that what they leave behind shows (see
//! `churn.rs`).
//!
//! `shoal-bench sfu-load`: a node under many rooms of publishing and subscribing
//! participants over real UDP, signalled over `/signal` or WHIP + WHEP: latency
//! percentiles, loss, join time, the node's CPU and memory (see `sfu_load/mod.rs`).

mod churn;
mod dtls;
mod flow;
mod ice;
mod media;
mod sfu_load;
mod srtp;
mod udp;

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("churn") => churn::run(&args[1..]),
        Some("dtls") => dtls::run(&args[1..]),
        Some("flow") => flow::run(&args[1..]),
        Some("ice") => ice::run(&args[1..]),
        Some("media") => media::run(&args[1..]),
        Some("sfu-load") => sfu_load::run(&args[1..]),
        Some("srtp") => srtp::run(&args[1..]),
        Some("udp") => udp::run(&args[1..]),
        Some("--help" | "-h" | "help") => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        _ => {
            eprintln!("{USAGE}");
            ExitCode::from(2)
        }
    }
}

const USAGE: &str = "usage: shoal-bench <benchmark> [options]\n\n\
     benchmarks:\n  \
     churn --http ADDR [...]                     sessions joining and leaving a node, a third abruptly (--help)\n  \
     dtls [--records N]                          DTLS record seal/open throughput, both suites\n  \
     flow                                        data-channel throughput over loopback UDP (FLOW_* env)\n  \
     ice [--peers N] [--checks N] [--batch N]   STUN checks answered per second by one shard\n  \
     media [--subscribers N] [--packets N]       one shard forwarding video to N subscribers\n  \
     sfu-load (--shoal BIN | --http ADDR) [...]  rooms of publishers and subscribers against a node (--help)\n  \
     srtp [--packets N]                          SRTP/SRTCP protect and unprotect per packet, all profiles\n  \
     udp [--size B] [--mib N] [--window-kib K] [--receivers N]
                                                  loopback UDP ceiling with shoal's batched I/O";

/// Reads `--name value` from `args`, or `default`.
pub(crate) fn opt(args: &[String], name: &str, default: u64) -> Result<u64, String> {
    match args.iter().position(|a| a == name) {
        None => Ok(default),
        Some(i) => args
            .get(i + 1)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("{name} needs a number")),
    }
}
