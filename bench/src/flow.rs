//! `shoal-bench flow`: data-channel throughput with send-side flow control, the
//! data-channels-flow-control harness (Pion's example, webrtc-rs's
//! `data-channels-flow-control[-multi]`) over shoal's own client stacks. Its definitions
//! match `bench/webrtc-rs-flow`, so `scripts/flow-compare` can run both alike.
//!
//! For each pair two endpoints ([`shoal_server::endpoint`]), each a shard on its own
//! thread with its own UDP socket on 127.0.0.1, connect with ICE, DTLS and SCTP (the
//! receiver plays the SFU's side: ICE-lite, DTLS server). The sender queues messages
//! (PPID 53, binary) on one stream while the association's buffered amount is at most
//! 1 MiB, pauses above it, and resumes once it has fallen to 512 KiB; it looks at the
//! buffered amount on every turn of its loop (once per batch of datagrams or timer
//! tick), so there is no event to wait for and no wake-up between threads. The
//! receiver counts bytes: once `FLOW_WARMUP_MB` MiB have arrived it opens its
//! measured window, closes it when `FLOW_STOP_MB` more have arrived, and tells its
//! sender to stop (an atomic flag the sender reads on its next turn).
//!
//! Environment:
//! - `FLOW_PAIRS` (10): connection pairs, run concurrently (two threads each).
//! - `FLOW_WARMUP_MB` (64): MiB per pair received before measuring.
//! - `FLOW_STOP_MB` (128): MiB per pair in the measured window.
//! - `FLOW_ORDERED` (0): `1` = ordered and reliable; anything else = unordered, sent
//!   once (`MaxRetransmits(0)`).
//! - `FLOW_MSG_BYTES` (1024): message size.
//! - `FLOW_MODE` (`p2p`): `sfu` would relay each pair through a shoal room; it needs the
//!   room relay and exits 2 for now.
//! - `FLOW_TIMEOUT_S` (600): give up (exit 1) if the pairs have not all finished.
//!
//! Output: per-interval (~1 s) and per-pair lines, then exactly
//! `FINAL <Mbps> aggregate over <N> pairs (ordered=<bool>) in <secs>s`, where `Mbps` is
//! the sum over pairs of each pair's steady-state rate (bits / 2^20 / s over its own
//! measured window) and `secs` the wall time from the first pair's window opening to the
//! last pair's closing. Exit status 0 on success.

use std::net::{SocketAddr, UdpSocket};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
use shoal_components::peer::PeerId;
use shoal_components::sctp::tx::{Reliability, SendError};
use shoal_components::time::Time;
use shoal_server::endpoint::{self, Control};
use shoal_systems::{Command, SctpSendError, Shard, ShardConfig, ShardEvent};

/// WebRTC Binary (RFC 8831 §8).
const PPID_BINARY: u32 = 53;
/// The one stream used (a data channel's id).
const STREAM: u16 = 1;
/// Above this buffered amount the sender pauses (the harness's `maxBufferedAmount`).
const HIGH_WATERMARK: usize = 1024 * 1024;
/// At or below this the sender resumes (`bufferedAmountLowThreshold`).
const LOW_WATERMARK: usize = 512 * 1024;
/// The association's send buffer: room above the high watermark for one more turn.
const SEND_BUFFER: usize = 2 * 1024 * 1024;
/// MiB, the unit of the `FLOW_*_MB` variables.
const MIB: u64 = 1024 * 1024;
/// Receiver progress lines are printed about this often during the measured window.
const INTERVAL: Duration = Duration::from_secs(1);
/// The one peer id each endpoint holds.
const PEER: PeerId = PeerId(1);

struct Params {
    pairs: usize,
    warmup: u64,
    window: u64,
    ordered: bool,
    msg_bytes: usize,
    timeout: Duration,
}

/// What a receiver measured.
struct Measured {
    /// Bytes received in the window.
    bytes: u64,
    start: Instant,
    end: Instant,
}

impl Measured {
    fn secs(&self) -> f64 {
        self.end.duration_since(self.start).as_secs_f64()
    }

    /// Steady-state rate in 2^20 bit/s, the unit of the FINAL line.
    fn mbps(&self) -> f64 {
        self.bytes as f64 * 8.0 / MIB as f64 / self.secs()
    }
}

pub(crate) fn run(args: &[String]) -> ExitCode {
    if !args.is_empty() {
        eprintln!("shoal-bench flow: takes no options, only FLOW_* environment variables");
        return ExitCode::from(2);
    }
    let params = match params() {
        Ok(Some(p)) => p,
        Ok(None) => {
            println!("sfu mode needs the room relay (not yet)");
            return ExitCode::from(2);
        }
        Err(e) => {
            eprintln!("shoal-bench flow: {e}");
            return ExitCode::from(2);
        }
    };
    match flow(&params) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("shoal-bench flow: {e}");
            ExitCode::FAILURE
        }
    }
}

fn env_u64(name: &str, default: u64) -> Result<u64, String> {
    match std::env::var(name) {
        Err(_) => Ok(default),
        Ok(v) => v
            .trim()
            .parse()
            .map_err(|_| format!("{name}={v:?} is not a number")),
    }
}

/// The parameters, or `None` for SFU mode.
fn params() -> Result<Option<Params>, String> {
    match std::env::var("FLOW_MODE").as_deref().map(str::trim) {
        Err(_) | Ok("p2p") => {}
        Ok("sfu") => return Ok(None),
        Ok(other) => return Err(format!("FLOW_MODE={other:?}: expected p2p or sfu")),
    }
    let pairs = env_u64("FLOW_PAIRS", 10)?;
    if !(1..=1000).contains(&pairs) {
        return Err("FLOW_PAIRS must be 1 to 1000".into());
    }
    let window = env_u64("FLOW_STOP_MB", 128)?;
    if window == 0 {
        return Err("FLOW_STOP_MB must be at least 1".into());
    }
    let msg_bytes = env_u64("FLOW_MSG_BYTES", 1024)?;
    if !(1..=65_536).contains(&msg_bytes) {
        return Err("FLOW_MSG_BYTES must be in 1..=65536".into());
    }
    Ok(Some(Params {
        pairs: pairs as usize,
        warmup: env_u64("FLOW_WARMUP_MB", 64)?.saturating_mul(MIB),
        window: window.saturating_mul(MIB),
        ordered: std::env::var("FLOW_ORDERED").is_ok_and(|v| v.trim() == "1"),
        msg_bytes: msg_bytes as usize,
        timeout: Duration::from_secs(env_u64("FLOW_TIMEOUT_S", 600)?),
    }))
}

/// Sets up every pair, runs them all at once and prints the figures.
fn flow(p: &Params) -> Result<(), String> {
    println!(
        "shoal-bench flow: {} pair(s), ordered={}, {} B messages, warm-up {} MiB, \
         measure {} MiB per pair",
        p.pairs,
        p.ordered,
        p.msg_bytes,
        p.warmup / MIB,
        p.window / MIB
    );
    let deadline = Instant::now() + p.timeout;
    let mut pairs = Vec::with_capacity(p.pairs);
    for i in 0..p.pairs {
        pairs.push(start_pair(p, i, deadline).map_err(|e| format!("set-up: {e}"))?);
    }
    let mut results = Vec::with_capacity(p.pairs);
    let mut failures = Vec::new();
    for (i, (sender, receiver)) in pairs.into_iter().enumerate() {
        let measured = receiver.join().map_err(|_| "a receiver panicked")?;
        let sent = sender.join().map_err(|_| "a sender panicked")?;
        match (measured, sent) {
            (Ok(m), Ok(sent)) => {
                println!(
                    "pair {i}: {:.1} Mbps steady-state, {:.1} MiB in {:.3}s ({:.1} MiB queued \
                     in all)",
                    m.mbps(),
                    m.bytes as f64 / MIB as f64,
                    m.secs(),
                    sent as f64 / MIB as f64,
                );
                results.push(m);
            }
            (Err(e), _) | (_, Err(e)) => failures.push(format!("pair {i}: {e}")),
        }
    }
    if !failures.is_empty() {
        return Err(format!(
            "{} of {} pairs failed: {}",
            failures.len(),
            p.pairs,
            failures.join("; ")
        ));
    }
    let aggregate: f64 = results.iter().map(Measured::mbps).sum();
    let first = results.iter().map(|m| m.start).min();
    let last = results.iter().map(|m| m.end).max();
    let secs = match (first, last) {
        (Some(first), Some(last)) => last.duration_since(first).as_secs_f64(),
        _ => 0.0,
    };
    println!(
        "FINAL {aggregate:.3} aggregate over {} pairs (ordered={}) in {secs:.3}s",
        p.pairs, p.ordered
    );
    Ok(())
}

type Sender = JoinHandle<Result<u64, String>>;
type Receiver = JoinHandle<Result<Measured, String>>;

/// Binds two sockets, sets up the peers and starts both endpoint threads.
fn start_pair(p: &Params, index: usize, deadline: Instant) -> std::io::Result<(Sender, Receiver)> {
    let rx_sock = UdpSocket::bind("127.0.0.1:0")?;
    let tx_sock = UdpSocket::bind("127.0.0.1:0")?;
    // Shard seeds only pick transaction ids and tie-breakers; credentials are random.
    let seed = 2 * index as u64;
    let mut rx_shard = Shard::new(config(rx_sock.local_addr()?, seed));
    let mut tx_shard = Shard::new(config(tx_sock.local_addr()?, seed + 1));
    let (lite, controlling) = endpoint::pair_specs(
        PEER,
        rx_shard.local_addr(),
        rx_shard.fingerprint(),
        tx_shard.fingerprint(),
        &mut endpoint::os_rng()?,
    );
    rx_shard
        .command(Time::ZERO, Command::AddPeer(lite))
        .map_err(std::io::Error::other)?;
    tx_shard
        .command(Time::ZERO, Command::AddPeer(controlling))
        .map_err(std::io::Error::other)?;

    let done = Arc::new(AtomicBool::new(false));
    let rx_done = done.clone();
    let (warmup, window) = (p.warmup, p.window);
    let receiver = std::thread::Builder::new()
        .name(format!("flow-rx-{index}"))
        .spawn(move || receive(index, rx_sock, rx_shard, warmup, window, deadline, &rx_done))?;
    let policy = if p.ordered {
        Reliability::Reliable
    } else {
        Reliability::MaxRetransmits(0)
    };
    let (unordered, msg_bytes) = (!p.ordered, p.msg_bytes);
    let sender = std::thread::Builder::new()
        .name(format!("flow-tx-{index}"))
        .spawn(move || {
            send(
                tx_sock, tx_shard, msg_bytes, unordered, policy, deadline, &done,
            )
        })?;
    Ok((sender, receiver))
}

fn config(addr: SocketAddr, seed: u64) -> ShardConfig {
    let mut config = ShardConfig::new(addr, seed);
    config.sctp.send_buffer = SEND_BUFFER;
    config
}

/// The receiving endpoint: counts message bytes and times its window.
fn receive(
    pair: usize,
    socket: UdpSocket,
    shard: Shard,
    warmup: u64,
    window: u64,
    deadline: Instant,
    done: &AtomicBool,
) -> Result<Measured, String> {
    let mut total = 0u64;
    // (window start, bytes received before it)
    let mut opened: Option<(Instant, u64)> = None;
    let mut tick = (Instant::now(), 0u64);
    let mut interval_no = 0u32;
    let mut result: Option<Measured> = None;
    let mut failure: Option<String> = None;
    endpoint::run(socket, shard, |_shard, _now, events| {
        for event in events.drain(..) {
            match event {
                ShardEvent::SctpMessage { payload, .. } => total += payload.len() as u64,
                ShardEvent::SctpClosed { .. } | ShardEvent::PeerRemoved { .. } => {
                    failure = Some(format!("connection lost: {event:?}"));
                    return Control::Stop;
                }
                _ => {}
            }
        }
        let now = Instant::now();
        match opened {
            None if total >= warmup => {
                opened = Some((now, total));
                tick = (now, total);
            }
            None => {}
            Some((start, base)) => {
                if total - base >= window {
                    result = Some(Measured {
                        bytes: total - base,
                        start,
                        end: now,
                    });
                    return Control::Stop;
                }
                let dt = now.duration_since(tick.0);
                if dt >= INTERVAL {
                    interval_no += 1;
                    let mbps = ((total - tick.1) * 8) as f64 / MIB as f64 / dt.as_secs_f64();
                    println!(
                        "pair {pair}: interval {interval_no}: {mbps:.1} Mbps ({:.0} MiB measured)",
                        (total - base) as f64 / MIB as f64
                    );
                    tick = (now, total);
                }
            }
        }
        if now > deadline {
            failure = Some(format!(
                "timed out with {:.1} MiB received",
                total as f64 / MIB as f64
            ));
            return Control::Stop;
        }
        Control::Continue
    })
    .map_err(|e| e.to_string())?;
    // Tell the sender to stop, whatever happened here.
    done.store(true, Ordering::Relaxed);
    match (failure, result) {
        (Some(e), _) => Err(e),
        (None, Some(m)) => Ok(m),
        (None, None) => Err("nothing measured".into()),
    }
}

/// The sending endpoint: keeps the buffered amount between the watermarks until the
/// receiver is done. Returns the bytes it queued.
fn send(
    socket: UdpSocket,
    shard: Shard,
    msg_bytes: usize,
    unordered: bool,
    policy: Reliability,
    deadline: Instant,
    done: &AtomicBool,
) -> Result<u64, String> {
    // One message, shared by every send: the shard slices it, never copies it.
    let message = Bytes::from(vec![0x5a; msg_bytes]);
    let mut established = false;
    let mut paused = false;
    let mut sent = 0u64;
    let mut failure: Option<String> = None;
    endpoint::run(socket, shard, |shard, _now, events| {
        for event in events.drain(..) {
            match event {
                ShardEvent::SctpEstablished { .. } => established = true,
                ShardEvent::SctpClosed { .. } | ShardEvent::PeerRemoved { .. } => {
                    failure = Some(format!("connection lost: {event:?}"));
                    return Control::Stop;
                }
                _ => {}
            }
        }
        if done.load(Ordering::Relaxed) {
            return Control::Stop;
        }
        if Instant::now() > deadline {
            failure = Some("timed out".into());
            return Control::Stop;
        }
        if !established {
            return Control::Continue;
        }
        let mut buffered = shard.sctp_buffered_amount(PEER);
        if paused {
            if buffered > LOW_WATERMARK {
                return Control::Continue;
            }
            paused = false;
        }
        while buffered <= HIGH_WATERMARK {
            match shard.sctp_send(
                PEER,
                STREAM,
                PPID_BINARY,
                message.clone(),
                unordered,
                policy,
            ) {
                Ok(()) => {
                    buffered += msg_bytes;
                    sent += msg_bytes as u64;
                }
                Err(SctpSendError::Queue(SendError::WouldBlock)) => break,
                Err(e) => {
                    failure = Some(format!("send: {e}"));
                    return Control::Stop;
                }
            }
        }
        paused = true;
        Control::Continue
    })
    .map_err(|e| e.to_string())?;
    match failure {
        Some(e) => Err(e),
        None => Ok(sent),
    }
}
