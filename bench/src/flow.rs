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
//! - `FLOW_MODE` (`p2p`): `sfu` relays each pair through a room of a shoal node run
//!   in the same process (below).
//! - `FLOW_SFU_SHARDS` (1): the node's shards in `sfu` mode.
//! - `FLOW_RECEIVERS` (1): in `sfu` mode, receivers per room: one sender fans out to
//!   this many (each a client stack on its own thread).
//! - `FLOW_TIMEOUT_S` (600): give up (exit 1) if the pairs have not all finished.
//!
//! In `sfu` mode the process also runs a node (`Server` and `ControlPlane`, gRPC on
//! 127.0.0.1, `FLOW_SFU_SHARDS` shards on their own UDP sockets), and each pair (a
//! sender and its `FLOW_RECEIVERS` receivers) has a room of its own. Every endpoint is
//! a client stack that joins it as an application would ([`endpoint::data_offer`] over
//! `SignalService`, so each is an ICE-controlling DTLS client against the node); the
//! sender opens a data channel `flow` (ordered and reliable, or unordered with
//! max-retransmits 0) and sends on it with the same watermarks, and the room relay
//! carries it to each receiver on the channel shoal opens there. The node paces a
//! reliable sender to its slowest receiver (it leaves the sender's messages in its
//! SCTP receive buffer while a receiver's queue is over the relay's high watermark,
//! docs/architecture.md), so the sender needs nothing but its own buffered amount; an
//! unreliable one is never slowed, and what the node drops for a receiver is not
//! delivered. Each message carries its number in its first 8 bytes (big endian): a
//! receiver of the ordered, reliable channel checks that it gets 0, 1, 2, … with no
//! gap or repeat (and fails the run otherwise), one of the unreliable channel counts
//! what it missed below the highest number it got. The CPU of the whole process then
//! covers the sender, the node and every receiver. The node's relay counters are
//! printed at the end.
//!
//! A receiver keeps reading after its window closed until every receiver of its
//! pair has measured (a receiver that stopped reading would hold a reliable sender
//! back, and with it the others); then the sender and the receivers stop.
//!
//! Output: per-interval (~1 s) and per-receiver lines, then exactly
//! `FINAL <Mbps> aggregate over <N> pairs (ordered=<bool>) in <secs>s`, where `Mbps` is
//! the sum over receivers of each one's steady-state rate (bits / 2^20 / s over its own
//! measured window) and `secs` the wall time from the first pair's window opening to the
//! last pair's closing. Exit status 0 on success.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::num::NonZeroUsize;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use shoal_components::datachannel::ChannelError;
use shoal_components::peer::PeerId;
use shoal_components::sctp::dcep::{self, ChannelType};
use shoal_components::sctp::tx::{Reliability, SendError};
use shoal_components::time::Time;
use shoal_server::config::{Config, Listen};
use shoal_server::control::{ControlPlane, ControlSettings};
use shoal_server::driver::Server;
use shoal_server::endpoint::{self, Control, data_offer, signal::Signaller};
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
/// The data channel's label in `sfu` mode.
const SFU_LABEL: &str = "flow";
/// In `sfu` mode, each message's first bytes: its number, big endian.
const SEQ_BYTES: usize = 8;

/// How the two endpoints of a pair meet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Directly: the receiver is ICE-lite and DTLS server, messages go on a stream.
    P2p,
    /// Through a room of a node in this process, on a data channel.
    Sfu,
}

struct Params {
    mode: Mode,
    sfu_shards: NonZeroUsize,
    pairs: usize,
    receivers: usize,
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
    /// `sfu` mode: messages received in all, and (unreliable) missing below the
    /// highest number received.
    messages: u64,
    missing: u64,
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
        Ok(p) => p,
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

fn params() -> Result<Params, String> {
    let mode = match std::env::var("FLOW_MODE").as_deref().map(str::trim) {
        Err(_) | Ok("p2p") => Mode::P2p,
        Ok("sfu") => Mode::Sfu,
        Ok(other) => return Err(format!("FLOW_MODE={other:?}: expected p2p or sfu")),
    };
    let sfu_shards = usize::try_from(env_u64("FLOW_SFU_SHARDS", 1)?)
        .ok()
        .and_then(NonZeroUsize::new)
        .filter(|n| n.get() <= 64)
        .ok_or("FLOW_SFU_SHARDS must be 1 to 64")?;
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
    let receivers = env_u64("FLOW_RECEIVERS", 1)?;
    if !(1..=100).contains(&receivers) || (mode == Mode::P2p && receivers != 1) {
        return Err("FLOW_RECEIVERS must be 1 (p2p) or 1 to 100 (sfu)".into());
    }
    if mode == Mode::Sfu && msg_bytes < SEQ_BYTES as u64 {
        return Err(format!(
            "FLOW_MSG_BYTES must be at least {SEQ_BYTES} in sfu mode"
        ));
    }
    Ok(Params {
        mode,
        sfu_shards,
        pairs: pairs as usize,
        receivers: receivers as usize,
        warmup: env_u64("FLOW_WARMUP_MB", 64)?.saturating_mul(MIB),
        window: window.saturating_mul(MIB),
        ordered: std::env::var("FLOW_ORDERED").is_ok_and(|v| v.trim() == "1"),
        msg_bytes: msg_bytes as usize,
        timeout: Duration::from_secs(env_u64("FLOW_TIMEOUT_S", 600)?),
    })
}

/// Sets up every pair, runs them all at once and prints the figures.
fn flow(p: &Params) -> Result<(), String> {
    println!(
        "shoal-bench flow: {} pair(s) of 1 sender and {} receiver(s), mode={:?}, ordered={}, \
         {} B messages, warm-up {} MiB, measure {} MiB per receiver",
        p.pairs,
        p.receivers,
        p.mode,
        p.ordered,
        p.msg_bytes,
        p.warmup / MIB,
        p.window / MIB
    );
    let deadline = Instant::now() + p.timeout;
    let node = match p.mode {
        Mode::Sfu => Some(Node::start(p.sfu_shards)?),
        Mode::P2p => None,
    };
    let mut pairs = Vec::with_capacity(p.pairs);
    for i in 0..p.pairs {
        pairs.push(start_pair(p, i, deadline, node.as_ref()).map_err(|e| format!("set-up: {e}"))?);
    }
    let mut results = Vec::with_capacity(p.pairs * p.receivers);
    let mut failures = Vec::new();
    for (i, (sender, receivers)) in pairs.into_iter().enumerate() {
        let mut measured = Vec::with_capacity(receivers.len());
        for r in receivers {
            measured.push(r.join().map_err(|_| "a receiver panicked")?);
        }
        let sent = sender.join().map_err(|_| "a sender panicked")?;
        let sent = match sent {
            Ok(sent) => sent,
            Err(e) => {
                failures.push(format!("pair {i}: {e}"));
                continue;
            }
        };
        for (r, m) in measured.into_iter().enumerate() {
            match m {
                Ok(m) => {
                    let who = who(i, r, p.receivers);
                    let counted = match p.mode {
                        Mode::Sfu => format!(", {} messages, {} missing", m.messages, m.missing),
                        Mode::P2p => String::new(),
                    };
                    println!(
                        "{who}: {:.1} Mbps steady-state, {:.1} MiB in {:.3}s ({:.1} MiB \
                         queued in all{counted})",
                        m.mbps(),
                        m.bytes as f64 / MIB as f64,
                        m.secs(),
                        sent as f64 / MIB as f64,
                    );
                    results.push(m);
                }
                Err(e) => failures.push(format!("pair {i} receiver {r}: {e}")),
            }
        }
    }
    if let Some(node) = node {
        node.stop()?;
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

/// How a receiver is named in the output: by its pair alone when the pair has one.
fn who(pair: usize, receiver: usize, receivers: usize) -> String {
    if receivers == 1 {
        format!("pair {pair}")
    } else {
        format!("pair {pair} receiver {receiver}")
    }
}

type Sender = JoinHandle<Result<u64, String>>;
type Receiver = JoinHandle<Result<Measured, String>>;

/// What the endpoints of a pair share.
struct Shared {
    /// Every receiver has measured: everyone stops.
    done: AtomicBool,
    /// Receivers whose association is up (`sfu`: the room relays to them from now
    /// on); the sender opens its channel once all are.
    receivers_ready: AtomicUsize,
    /// Receivers that have measured their window.
    measured: AtomicUsize,
    /// The pair's receivers.
    receivers: usize,
}

/// Binds the sockets, sets up the peers and starts every endpoint's thread.
fn start_pair(
    p: &Params,
    index: usize,
    deadline: Instant,
    node: Option<&Node>,
) -> Result<(Sender, Vec<Receiver>), String> {
    let local = |s: &UdpSocket| s.local_addr().map_err(|e| e.to_string());
    let bind = || UdpSocket::bind("127.0.0.1:0").map_err(|e| e.to_string());
    // Shard seeds only pick transaction ids and tie-breakers; credentials are random.
    let seed = 1000 * index as u64;
    let tx_sock = bind()?;
    let mut tx_shard = Shard::new(config(local(&tx_sock)?, seed));
    let mut rx_ends = Vec::with_capacity(p.receivers);
    for r in 0..p.receivers {
        let sock = bind()?;
        let shard = Shard::new(config(local(&sock)?, seed + 1 + r as u64));
        rx_ends.push((sock, shard));
    }
    if let Some(node) = node {
        let room = format!("flow-{index}");
        node.open_room(&room)?;
        for (r, (_, shard)) in rx_ends.iter_mut().enumerate() {
            node.join(&room, &format!("receiver-{r}"), shard)?;
        }
        node.join(&room, "sender", &mut tx_shard)?;
    } else {
        let mut rng = endpoint::os_rng().map_err(|e| e.to_string())?;
        let rx_shard = &mut rx_ends[0].1;
        let (lite, controlling) = endpoint::pair_specs(
            PEER,
            rx_shard.local_addr(),
            rx_shard.fingerprint(),
            tx_shard.fingerprint(),
            &mut rng,
        );
        rx_shard
            .command(Time::ZERO, Command::AddPeer(lite))
            .map_err(|e| e.to_string())?;
        tx_shard
            .command(Time::ZERO, Command::AddPeer(controlling))
            .map_err(|e| e.to_string())?;
    }

    let shared = Arc::new(Shared {
        done: AtomicBool::new(false),
        receivers_ready: AtomicUsize::new(0),
        measured: AtomicUsize::new(0),
        receivers: p.receivers,
    });
    let mut receivers = Vec::with_capacity(p.receivers);
    for (r, (sock, shard)) in rx_ends.into_iter().enumerate() {
        let how = Receiving {
            pair: index,
            receiver: r,
            receivers: p.receivers,
            warmup: p.warmup,
            window: p.window,
            deadline,
            mode: p.mode,
            ordered: p.ordered,
        };
        let shared = shared.clone();
        receivers.push(
            std::thread::Builder::new()
                .name(format!("flow-rx-{index}-{r}"))
                .spawn(move || receive(sock, shard, how, &shared))
                .map_err(|e| e.to_string())?,
        );
    }
    let how = Sending {
        mode: p.mode,
        msg_bytes: p.msg_bytes,
        ordered: p.ordered,
    };
    let sender = std::thread::Builder::new()
        .name(format!("flow-tx-{index}"))
        .spawn(move || send(tx_sock, tx_shard, how, deadline, &shared))
        .map_err(|e| e.to_string())?;
    Ok((sender, receivers))
}

/// The node of `sfu` mode: shards, control plane and the client side of signalling.
struct Node {
    server: Server,
    control: ControlPlane,
    grpc: SocketAddr,
    signaller: Signaller,
}

impl Node {
    fn start(shards: NonZeroUsize) -> Result<Node, String> {
        let config = Config {
            shards,
            udp_port_base: 0,
            bind: vec![IpAddr::V4(Ipv4Addr::LOCALHOST)],
            grpc_addr: Listen::Addr(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0)),
            http_addr: Listen::Off,
            ..Config::default()
        };
        let mut server = Server::start(&config).map_err(|e| format!("node: {e}"))?;
        let settings = ControlSettings::from_config(&config).ok_or("node: gRPC is off")?;
        let control = ControlPlane::start(settings, server.control_handles())
            .map_err(|e| format!("node: {e}"))?;
        let grpc = control.grpc_addr().ok_or("node: gRPC is off")?;
        let signaller = Signaller::start().map_err(|e| format!("signalling: {e}"))?;
        Ok(Node {
            server,
            control,
            grpc,
            signaller,
        })
    }

    fn open_room(&self, room: &str) -> Result<(), String> {
        self.signaller
            .create_room(self.grpc, room)
            .map_err(|e| format!("room {room}: {e}"))
    }

    /// Joins `room` as `identity` with `shard`'s one peer.
    fn join(&self, room: &str, identity: &str, shard: &mut Shard) -> Result<(), String> {
        let mut rng = endpoint::os_rng().map_err(|e| e.to_string())?;
        let offer = data_offer(PEER, shard.fingerprint(), &mut rng);
        let answer = self
            .signaller
            .join(self.grpc, room, identity, offer.sdp())
            .map_err(|e| format!("{identity} joining {room}: {e}"))?;
        let peer = offer
            .accept(&answer)
            .map_err(|e| format!("{identity}: {e}"))?;
        shard
            .command(Time::ZERO, Command::AddPeer(peer))
            .map_err(|e| format!("{identity}: {e}"))
    }

    /// Prints what the node's relay counted and stops it.
    fn stop(self) -> Result<(), String> {
        let Node {
            server,
            control,
            signaller,
            ..
        } = self;
        drop(signaller);
        let reports = server.shutdown().map_err(|e| format!("node: {e}"))?;
        for r in &reports {
            let s = &r.shard;
            println!(
                "node shard {}: {} messages relayed, {} dropped (unreliable, receiver over \
                 the high watermark), {} holds of a sender, {} slow receivers, {} datagrams \
                 in, {} out",
                r.index,
                s.relay_messages,
                s.relay_dropped,
                s.relay_holds,
                s.relay_slow_receivers,
                s.datagrams_in,
                s.datagrams_out
            );
        }
        control.shutdown().map_err(|e| format!("node: {e}"))
    }
}

fn config(addr: SocketAddr, seed: u64) -> ShardConfig {
    let mut config = ShardConfig::new(addr, seed);
    config.sctp.send_buffer = SEND_BUFFER;
    config
}

/// What one receiver is and measures.
#[derive(Clone, Copy)]
struct Receiving {
    pair: usize,
    receiver: usize,
    receivers: usize,
    warmup: u64,
    window: u64,
    deadline: Instant,
    mode: Mode,
    ordered: bool,
}

/// The receiving endpoint: counts message bytes and times its window; in `sfu` mode
/// it also checks the messages' numbers.
fn receive(
    socket: UdpSocket,
    shard: Shard,
    how: Receiving,
    shared: &Shared,
) -> Result<Measured, String> {
    let mut total = 0u64;
    // sfu: messages received, the next number expected (ordered) or the highest seen.
    let mut messages = 0u64;
    let mut next = 0u64;
    // (window start, bytes received before it)
    let mut opened: Option<(Instant, u64)> = None;
    let mut tick = (Instant::now(), 0u64);
    let mut interval_no = 0u32;
    let mut result: Option<Measured> = None;
    let mut failure: Option<String> = None;
    let who = who(how.pair, how.receiver, how.receivers);
    endpoint::run(socket, shard, |_shard, _now, events| {
        for event in events.drain(..) {
            match event {
                // p2p: the stream.
                ShardEvent::SctpMessage { payload, .. } => total += payload.len() as u64,
                // sfu: the channel the relay opened (the only one).
                ShardEvent::ChannelMessage { payload, .. } => {
                    total += payload.len() as u64;
                    messages += 1;
                    let Some(number) = payload
                        .get(..SEQ_BYTES)
                        .and_then(|b| <[u8; SEQ_BYTES]>::try_from(b).ok())
                        .map(u64::from_be_bytes)
                    else {
                        failure = Some("a message without its number".into());
                        return Control::Stop;
                    };
                    if how.ordered {
                        if number != next {
                            failure = Some(format!(
                                "message {number} arrived where {next} was due: a gap or a repeat"
                            ));
                            return Control::Stop;
                        }
                        next += 1;
                    } else {
                        next = next.max(number + 1);
                    }
                }
                ShardEvent::SctpEstablished { .. } => {
                    shared.receivers_ready.fetch_add(1, Ordering::AcqRel);
                }
                ShardEvent::SctpClosed { .. } | ShardEvent::PeerRemoved { .. } => {
                    failure = Some(format!("connection lost: {event:?}"));
                    return Control::Stop;
                }
                _ => {}
            }
        }
        if shared.done.load(Ordering::Relaxed) {
            return Control::Stop;
        }
        let now = Instant::now();
        match opened {
            _ if result.is_some() => {}
            None if total >= how.warmup => {
                opened = Some((now, total));
                tick = (now, total);
            }
            None => {}
            Some((start, base)) => {
                if total - base >= how.window {
                    result = Some(Measured {
                        bytes: total - base,
                        start,
                        end: now,
                        messages: 0,
                        missing: 0,
                    });
                    // Go on reading until every receiver of the pair has measured.
                    let measured = shared.measured.fetch_add(1, Ordering::AcqRel) + 1;
                    if measured == shared.receivers {
                        shared.done.store(true, Ordering::Relaxed);
                        return Control::Stop;
                    }
                    return Control::Continue;
                }
                let dt = now.duration_since(tick.0);
                if dt >= INTERVAL {
                    interval_no += 1;
                    let mbps = ((total - tick.1) * 8) as f64 / MIB as f64 / dt.as_secs_f64();
                    println!(
                        "{who}: interval {interval_no}: {mbps:.1} Mbps ({:.0} MiB measured)",
                        (total - base) as f64 / MIB as f64
                    );
                    tick = (now, total);
                }
            }
        }
        if now > how.deadline {
            failure = Some(format!(
                "timed out with {:.1} MiB received",
                total as f64 / MIB as f64
            ));
            return Control::Stop;
        }
        Control::Continue
    })
    .map_err(|e| e.to_string())?;
    // Tell the others to stop, whatever happened here.
    shared.done.store(true, Ordering::Relaxed);
    match (failure, result) {
        (Some(e), _) => Err(e),
        (None, Some(m)) => Ok(Measured {
            messages,
            missing: if how.mode == Mode::Sfu && !how.ordered {
                next - messages.min(next)
            } else {
                0
            },
            ..m
        }),
        (None, None) => Err("nothing measured".into()),
    }
}

/// How a sender sends.
#[derive(Clone, Copy)]
struct Sending {
    mode: Mode,
    msg_bytes: usize,
    /// Ordered and reliable, else unordered and sent once (max-retransmits 0).
    ordered: bool,
}

impl Sending {
    /// The SCTP sending policy of a raw stream (`p2p`).
    fn policy(self) -> Reliability {
        if self.ordered {
            Reliability::Reliable
        } else {
            Reliability::MaxRetransmits(0)
        }
    }

    /// The same as a data channel's type (`sfu`).
    fn channel_type(self) -> ChannelType {
        ChannelType {
            ordered: self.ordered,
            reliability: if self.ordered {
                dcep::Reliability::Reliable
            } else {
                dcep::Reliability::MaxRetransmits(0)
            },
        }
    }
}

/// The sending endpoint: keeps the buffered amount between the watermarks until the
/// receivers are done. Returns the bytes it queued.
fn send(
    socket: UdpSocket,
    shard: Shard,
    how: Sending,
    deadline: Instant,
    shared: &Shared,
) -> Result<u64, String> {
    // p2p: one message, shared by every send (the shard slices it, never copies it);
    // sfu: each message is numbered, so each is its own.
    let message = Bytes::from(vec![0x5a; how.msg_bytes]);
    let mut numbered = BytesMut::new();
    let mut number = 0u64;
    let mut established = false;
    // sfu: the data channel, once opened.
    let mut channel: Option<u16> = None;
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
        if shared.done.load(Ordering::Relaxed) {
            return Control::Stop;
        }
        if Instant::now() > deadline {
            failure = Some("timed out".into());
            return Control::Stop;
        }
        if !established {
            return Control::Continue;
        }
        if how.mode == Mode::Sfu && channel.is_none() {
            // The room relays to members connected at the time: wait for the receivers.
            if shared.receivers_ready.load(Ordering::Acquire) < shared.receivers {
                return Control::Continue;
            }
            match shard.open_channel(PEER, SFU_LABEL, "", how.channel_type()) {
                Ok(id) => channel = Some(id),
                Err(e) => {
                    failure = Some(format!("opening the channel: {e}"));
                    return Control::Stop;
                }
            }
        }
        let mut buffered = match channel {
            Some(id) => shard.channel_buffered_amount(PEER, id),
            None => shard.sctp_buffered_amount(PEER),
        };
        if paused {
            if buffered > LOW_WATERMARK {
                return Control::Continue;
            }
            paused = false;
        }
        while buffered <= HIGH_WATERMARK {
            let queued = match channel {
                Some(id) => {
                    // Messages are cut from 1 MiB buffers: one allocation for many.
                    if numbered.capacity() < how.msg_bytes {
                        numbered.reserve(how.msg_bytes.max(MIB as usize));
                    }
                    numbered.extend_from_slice(&number.to_be_bytes());
                    numbered.resize(how.msg_bytes, 0x5a);
                    match shard.channel_send(PEER, id, true, numbered.split().freeze()) {
                        Ok(()) => true,
                        Err(ChannelError::WouldBlock) => false,
                        Err(e) => {
                            failure = Some(format!("send: {e}"));
                            return Control::Stop;
                        }
                    }
                }
                None => match shard.sctp_send(
                    PEER,
                    STREAM,
                    PPID_BINARY,
                    message.clone(),
                    !how.ordered,
                    how.policy(),
                ) {
                    Ok(()) => true,
                    Err(SctpSendError::Queue(SendError::WouldBlock)) => false,
                    Err(e) => {
                        failure = Some(format!("send: {e}"));
                        return Control::Stop;
                    }
                },
            };
            if !queued {
                break;
            }
            number += 1;
            buffered += how.msg_bytes;
            sent += how.msg_bytes as u64;
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
