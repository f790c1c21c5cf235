//! webrtc-rs side of shoal's data-channel flow benchmark.
//!
//! Reproduces the well-known data-channels-flow-control harness (Pion's example, and
//! webrtc-rs's `data-channels-flow-control[-multi]`) on webrtc-rs 0.21, so that
//! `shoal-bench flow` can be compared with it on the same machine by
//! `scripts/flow-compare`.
//!
//! For each of `FLOW_PAIRS` pairs, two peer connections in this process talk over real
//! UDP on 127.0.0.1 (host candidates only, no STUN/TURN, no mDNS); signalling is an
//! in-process offer/answer exchange after ICE gathering completes. The offerer opens one
//! data channel and, once every pair's channel is open, sends 1 KiB messages as fast as
//! it may: it pauses while more than 1 MiB is buffered (see `FLOW_PAUSE`) and resumes
//! when the buffer drains to the 512 KiB low-water mark (`OnBufferedAmountLow`, set by
//! `set_buffered_amount_low_threshold`). The answerer counts bytes; once it
//! has received `FLOW_WARMUP_MB` MiB it starts the clock and measures until a further
//! `FLOW_STOP_MB` MiB have arrived, printing one line per ~1 s interval, then stops its
//! pair's sender.
//!
//! Environment:
//! - `FLOW_PAIRS` (10): connection pairs, run concurrently.
//! - `FLOW_WARMUP_MB` (64): MiB per pair received before measuring.
//! - `FLOW_STOP_MB` (128): MiB per pair in the measured window.
//! - `FLOW_ORDERED` (0): `1` = ordered and reliable; anything else = unordered with
//!   max-retransmits 0.
//! - `FLOW_MSG_BYTES` (1024): message size.
//! - `FLOW_PAUSE` (`sync`): `sync` checks the channel's outstanding bytes before every
//!   send, as Pion's harness checks `BufferedAmount()`; `event` pauses only on the
//!   asynchronous `OnBufferedAmountHigh`, as webrtc-rs's own example does (and
//!   overshoots the 1 MiB mark by several MiB).
//! - `FLOW_DEDICATED_REACTOR` (0): `1` runs each connection's driver on webrtc-rs's
//!   dedicated reactor pool (one thread) instead of the tokio workers.
//! - `FLOW_TIMEOUT_S` (600): give up (exit 1) if the pairs have not all finished.
//!
//! Output: per-interval and per-pair lines, then exactly
//! `FINAL <Mbps> aggregate over <N> pairs (ordered=<bool>) in <secs>s`, where `Mbps` is
//! the sum over pairs of each pair's steady-state rate (bits / 2^20 / s over its own
//! measured window) and `secs` the wall time from the first pair's window opening to the
//! last pair's closing. Exit status 0 on success.

use std::error::Error;
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use rtc::ice::mdns::MulticastDnsMode;
use rtc::ice::network_type::NetworkType;
use tokio::sync::{Barrier, Notify, mpsc};
use webrtc::data_channel::{DataChannel, DataChannelEvent, RTCDataChannelInit};
use webrtc::peer_connection::{
    MediaEngine, PeerConnection, PeerConnectionBuilder, PeerConnectionEventHandler,
    RTCConfigurationBuilder, RTCIceGatheringState, RTCPeerConnectionState, RTCSessionDescription,
    Registry, SettingEngineBuilder, register_default_interceptors,
};
use webrtc::runtime::Runtime;

type BoxError = Box<dyn Error + Send + Sync>;

/// Pause sending at this bufferedAmount (bytes).
const BUFFERED_HIGH: u32 = 1024 * 1024;
/// Resume sending once bufferedAmount drains to this (bytes).
const BUFFERED_LOW: u32 = 512 * 1024;
/// MiB, the unit of the `FLOW_*_MB` variables.
const MIB: u64 = 1024 * 1024;
/// While paused (Sync mode), re-check the outstanding bytes this often in case the
/// low-water event does not come.
const RECHECK: Duration = Duration::from_millis(10);
/// Receiver progress lines are printed about this often during the measured window.
const INTERVAL: Duration = Duration::from_secs(1);

#[derive(Clone, Debug)]
struct Config {
    pairs: usize,
    warmup_bytes: u64,
    stop_bytes: u64,
    ordered: bool,
    msg_bytes: usize,
    dedicated_reactor: bool,
    pause: PauseMode,
    timeout: Duration,
}

fn env_u64(key: &str, default: u64) -> Result<u64, BoxError> {
    match std::env::var(key) {
        Ok(v) if !v.trim().is_empty() => v
            .trim()
            .parse()
            .map_err(|e| format!("{key}={v:?}: {e}").into()),
        _ => Ok(default),
    }
}

fn env_flag(key: &str) -> bool {
    std::env::var(key).map(|v| v.trim() == "1").unwrap_or(false)
}

impl Config {
    fn from_env() -> Result<Self, BoxError> {
        let pairs = env_u64("FLOW_PAIRS", 10)? as usize;
        let msg_bytes = env_u64("FLOW_MSG_BYTES", 1024)? as usize;
        if pairs == 0 {
            return Err("FLOW_PAIRS must be at least 1".into());
        }
        if msg_bytes == 0 || msg_bytes > 65536 {
            return Err("FLOW_MSG_BYTES must be in 1..=65536".into());
        }
        let stop_bytes = env_u64("FLOW_STOP_MB", 128)? * MIB;
        if stop_bytes == 0 {
            return Err("FLOW_STOP_MB must be at least 1".into());
        }
        Ok(Self {
            pairs,
            warmup_bytes: env_u64("FLOW_WARMUP_MB", 64)? * MIB,
            stop_bytes,
            ordered: env_flag("FLOW_ORDERED"),
            msg_bytes,
            dedicated_reactor: env_flag("FLOW_DEDICATED_REACTOR"),
            pause: match std::env::var("FLOW_PAUSE").as_deref().map(str::trim) {
                Err(_) | Ok("") | Ok("sync") => PauseMode::Sync,
                Ok("event") => PauseMode::Event,
                Ok(other) => return Err(format!("FLOW_PAUSE={other:?}: sync or event").into()),
            },
            timeout: Duration::from_secs(env_u64("FLOW_TIMEOUT_S", 600)?),
        })
    }
}

/// What one pair's receiver reports when its measured window is complete.
#[derive(Debug)]
struct PairResult {
    pair: usize,
    /// Bytes received inside the measured window.
    bytes: u64,
    start: Instant,
    end: Instant,
}

impl PairResult {
    fn secs(&self) -> f64 {
        self.end.duration_since(self.start).as_secs_f64()
    }
    /// Steady-state rate in 2^20 bit/s, the unit of the FINAL line.
    fn mbps(&self) -> f64 {
        (self.bytes * 8) as f64 / MIB as f64 / self.secs()
    }
}

/// Per-pair stop signal from the receiver to the sender.
#[derive(Default)]
struct Stop {
    flag: AtomicBool,
    notify: Notify,
}

impl Stop {
    fn fire(&self) {
        self.flag.store(true, Ordering::Release);
        // notify_one stores a permit, so a sender that is not yet waiting still sees it.
        self.notify.notify_one();
    }
    fn is_set(&self) -> bool {
        self.flag.load(Ordering::Acquire)
    }
}

/// Event handler of the offering (sending) peer.
struct OffererHandler {
    pair: usize,
    gathered: mpsc::Sender<()>,
}

#[async_trait::async_trait]
impl PeerConnectionEventHandler for OffererHandler {
    async fn on_ice_gathering_state_change(&self, state: RTCIceGatheringState) {
        if state == RTCIceGatheringState::Complete {
            let _ = self.gathered.try_send(());
        }
    }
    async fn on_connection_state_change(&self, state: RTCPeerConnectionState) {
        if state == RTCPeerConnectionState::Failed {
            eprintln!("pair {}: offerer connection failed", self.pair);
        }
    }
}

/// Event handler of the answering (receiving) peer.
struct AnswererHandler {
    pair: usize,
    gathered: mpsc::Sender<()>,
    config: Config,
    stop: Arc<Stop>,
    results: mpsc::UnboundedSender<PairResult>,
}

#[async_trait::async_trait]
impl PeerConnectionEventHandler for AnswererHandler {
    async fn on_ice_gathering_state_change(&self, state: RTCIceGatheringState) {
        if state == RTCIceGatheringState::Complete {
            let _ = self.gathered.try_send(());
        }
    }
    async fn on_connection_state_change(&self, state: RTCPeerConnectionState) {
        if state == RTCPeerConnectionState::Failed {
            eprintln!("pair {}: answerer connection failed", self.pair);
        }
    }
    async fn on_data_channel(&self, dc: Arc<dyn DataChannel>) {
        // This callback runs on the connection's driver: hand the channel to a task of
        // its own and return at once.
        tokio::spawn(receive_loop(
            self.pair,
            dc,
            self.config.clone(),
            self.stop.clone(),
            self.results.clone(),
        ));
    }
}

/// Counts received bytes; measures from the end of the warm-up until `stop_bytes` more
/// have arrived, then reports and tells the sender to stop.
async fn receive_loop(
    pair: usize,
    dc: Arc<dyn DataChannel>,
    config: Config,
    stop: Arc<Stop>,
    results: mpsc::UnboundedSender<PairResult>,
) {
    let mut total: u64 = 0;
    // (window start, bytes already received at that moment)
    let mut window: Option<(Instant, u64)> = None;
    let mut tick = (Instant::now(), 0u64);
    let mut interval_no = 0u32;
    while let Some(event) = dc.poll().await {
        match event {
            DataChannelEvent::OnMessage(msg) => {
                total += msg.data.len() as u64;
                let Some((start, base)) = window else {
                    if total >= config.warmup_bytes {
                        let now = Instant::now();
                        window = Some((now, total));
                        tick = (now, total);
                    }
                    continue;
                };
                let now = Instant::now();
                let measured = total - base;
                if measured >= config.stop_bytes {
                    stop.fire();
                    let _ = results.send(PairResult {
                        pair,
                        bytes: measured,
                        start,
                        end: now,
                    });
                    return;
                }
                let dt = now.duration_since(tick.0);
                if dt >= INTERVAL {
                    interval_no += 1;
                    let mbps = ((total - tick.1) * 8) as f64 / MIB as f64 / dt.as_secs_f64();
                    println!(
                        "pair {pair}: interval {interval_no}: {mbps:.1} Mbps ({:.0} MiB measured)",
                        measured as f64 / MIB as f64
                    );
                    tick = (now, total);
                }
            }
            DataChannelEvent::OnClose | DataChannelEvent::OnError => {
                eprintln!("pair {pair}: receiving channel closed or failed after {total} bytes");
                return;
            }
            _ => {}
        }
    }
}

/// How the sender decides to pause.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PauseMode {
    /// Pion's harness: before every send, pause if the channel's buffered bytes exceed
    /// the high-water mark. webrtc-rs 0.21 has no synchronous `buffered_amount()`; its
    /// `outstanding_bytes()` counts every byte handed to `send` and not yet acknowledged
    /// or abandoned (bufferedAmount plus what still waits to be packetised), so the cap
    /// holds even when the driver lags.
    Sync,
    /// webrtc-rs's own example: pause only on the asynchronous `OnBufferedAmountHigh`
    /// event, which the driver raises when it packetises, so the sender can overshoot
    /// the 1 MiB mark by several MiB before it sees the event.
    Event,
}

/// Counters a sender reports when it ends.
#[derive(Debug, Default)]
struct SendStats {
    messages: u64,
    pauses: u64,
    /// Resumptions by the paused-state re-check rather than by `OnBufferedAmountLow`.
    recheck_resumes: u64,
}

/// Flow-controlled sender: one message per iteration while the channel is open and
/// not paused; resumes on `OnBufferedAmountLow`. Events (open, high, low, close) are
/// checked first on every iteration, through one long-lived `poll` future.
async fn send_loop(
    pair: usize,
    dc: Arc<dyn DataChannel>,
    msg_bytes: usize,
    mode: PauseMode,
    start: Arc<Barrier>,
    stop: Arc<Stop>,
) -> SendStats {
    let msg = BytesMut::from(vec![0u8; msg_bytes].as_slice());
    let mut stats = SendStats::default();
    let mut open = false;
    let mut paused = false;
    let mut next_event = dc.poll();
    loop {
        if stop.is_set() {
            return stats;
        }
        let event = if open && !paused {
            if mode == PauseMode::Sync
                && dc.outstanding_bytes().await.unwrap_or(0) > BUFFERED_HIGH as usize
            {
                paused = true;
                stats.pauses += 1;
                continue;
            }
            tokio::select! {
                biased;
                event = &mut next_event => event,
                sent = dc.send(msg.clone()) => {
                    if let Err(e) = sent {
                        eprintln!("pair {pair}: send failed: {e}");
                        return stats;
                    }
                    stats.messages += 1;
                    continue;
                }
            }
        } else {
            tokio::select! {
                biased;
                _ = stop.notify.notified() => return stats,
                event = &mut next_event => event,
                // Safety net for Sync mode: OnBufferedAmountLow is edge-triggered on the
                // SCTP stream's buffered amount, which can sit below the low mark while
                // bytes not yet packetised keep outstanding_bytes above the high one.
                _ = tokio::time::sleep(RECHECK), if paused && mode == PauseMode::Sync => {
                    if dc.outstanding_bytes().await.unwrap_or(0) <= BUFFERED_LOW as usize {
                        paused = false;
                        stats.recheck_resumes += 1;
                    }
                    continue;
                }
            }
        };
        next_event = dc.poll();
        match event {
            Some(DataChannelEvent::OnOpen) => {
                // Every pair's channel is open before any pair sends, so the pairs'
                // transfers (and measured windows) run concurrently.
                start.wait().await;
                open = true;
            }
            Some(DataChannelEvent::OnBufferedAmountHigh) => {
                if !paused {
                    paused = true;
                    stats.pauses += 1;
                }
            }
            Some(DataChannelEvent::OnBufferedAmountLow) => paused = false,
            Some(DataChannelEvent::OnClose) | None => return stats,
            Some(_) => {}
        }
    }
}

async fn build_peer(
    runtime: &Arc<dyn Runtime>,
    config: &Config,
    handler: Arc<dyn PeerConnectionEventHandler>,
) -> Result<Arc<dyn PeerConnection>, BoxError> {
    let mut media = MediaEngine::default();
    media.register_default_codecs()?;
    let registry = register_default_interceptors(Registry::new(), &mut media)?;
    // Host candidates on IPv4 UDP only; loopback allowed; no mDNS. In webrtc-rs 0.21 the
    // host candidates are the sockets bound from `with_udp_addrs`, so binding 127.0.0.1
    // is what puts the candidate on loopback (0.21 has no interface filter: its setter is
    // still commented out in rtc 0.21.1). No ICE servers: no STUN, no TURN.
    let settings = SettingEngineBuilder::new()
        .with_network_types(vec![NetworkType::Udp4])
        .with_include_loopback_candidate(true)
        .with_multicast_dns_mode(MulticastDnsMode::Disabled)
        .build();
    let pc = PeerConnectionBuilder::new()
        .with_configuration(RTCConfigurationBuilder::new().build())
        .with_media_engine(media)
        .with_setting_engine(settings)
        .with_interceptor_registry(registry)
        .with_handler(handler)
        .with_runtime(runtime.clone())
        .with_udp_addrs(vec!["127.0.0.1:0".to_string()])
        .with_dedicated_reactor_pool_size(usize::from(config.dedicated_reactor))
        .build()
        .await?;
    Ok(Arc::new(pc))
}

async fn local_description_after_gathering(
    pc: &Arc<dyn PeerConnection>,
    gathered: &mut mpsc::Receiver<()>,
    who: &str,
) -> Result<RTCSessionDescription, BoxError> {
    tokio::time::timeout(Duration::from_secs(10), gathered.recv())
        .await
        .map_err(|_| format!("{who}: ICE gathering did not complete within 10 s"))?;
    pc.local_description()
        .await
        .ok_or_else(|| format!("{who}: no local description").into())
}

/// Builds and connects one pair and starts its sender; the receiver starts when the
/// answerer sees the data channel. Returns both connections to keep them alive.
async fn start_pair(
    pair: usize,
    runtime: &Arc<dyn Runtime>,
    config: &Config,
    start: Arc<Barrier>,
    results: mpsc::UnboundedSender<PairResult>,
) -> Result<[Arc<dyn PeerConnection>; 2], BoxError> {
    let stop = Arc::new(Stop::default());

    let (offer_gathered_tx, mut offer_gathered) = mpsc::channel(1);
    let offerer = build_peer(
        runtime,
        config,
        Arc::new(OffererHandler {
            pair,
            gathered: offer_gathered_tx,
        }),
    )
    .await?;
    let init = if config.ordered {
        RTCDataChannelInit {
            ordered: true,
            ..Default::default()
        }
    } else {
        RTCDataChannelInit {
            ordered: false,
            max_retransmits: Some(0),
            ..Default::default()
        }
    };
    let dc = offerer.create_data_channel("flow", Some(init)).await?;
    dc.set_buffered_amount_low_threshold(BUFFERED_LOW).await?;
    dc.set_buffered_amount_high_threshold(BUFFERED_HIGH).await?;
    let (msg_bytes, mode, sender_stop) = (config.msg_bytes, config.pause, stop.clone());
    tokio::spawn(async move {
        let stats = send_loop(pair, dc, msg_bytes, mode, start, sender_stop).await;
        println!(
            "pair {pair}: sender sent {} messages, paused {} times, {} resumed by re-check",
            stats.messages, stats.pauses, stats.recheck_resumes
        );
    });

    let offer = offerer.create_offer(None).await?;
    offerer.set_local_description(offer).await?;
    let offer = local_description_after_gathering(&offerer, &mut offer_gathered, "offerer").await?;

    let (answer_gathered_tx, mut answer_gathered) = mpsc::channel(1);
    let answerer = build_peer(
        runtime,
        config,
        Arc::new(AnswererHandler {
            pair,
            gathered: answer_gathered_tx,
            config: config.clone(),
            stop,
            results,
        }),
    )
    .await?;
    answerer.set_remote_description(offer).await?;
    let answer = answerer.create_answer(None).await?;
    answerer.set_local_description(answer).await?;
    let answer =
        local_description_after_gathering(&answerer, &mut answer_gathered, "answerer").await?;
    offerer.set_remote_description(answer).await?;

    Ok([offerer, answerer])
}

async fn run(config: Config) -> Result<(), BoxError> {
    println!(
        "webrtc-rs-flow: {} pair(s), ordered={}, {} B messages, warm-up {} MiB, measure {} MiB per pair, pause={:?}, dedicated reactor={}",
        config.pairs,
        config.ordered,
        config.msg_bytes,
        config.warmup_bytes / MIB,
        config.stop_bytes / MIB,
        config.pause,
        config.dedicated_reactor
    );
    let runtime = webrtc::runtime::default_runtime().ok_or("no webrtc runtime compiled in")?;
    let (results_tx, mut results_rx) = mpsc::unbounded_channel();

    // Pairs are connected one after another; all start sending once every channel is open.
    let start = Arc::new(Barrier::new(config.pairs));
    let mut peers = Vec::with_capacity(config.pairs * 2);
    for pair in 0..config.pairs {
        peers.extend(start_pair(pair, &runtime, &config, start.clone(), results_tx.clone()).await?);
    }
    drop(results_tx);

    let mut results = Vec::with_capacity(config.pairs);
    let deadline = tokio::time::sleep(config.timeout);
    tokio::pin!(deadline);
    while results.len() < config.pairs {
        tokio::select! {
            r = results_rx.recv() => match r {
                Some(r) => results.push(r),
                None => return Err(format!(
                    "only {} of {} pairs finished (a channel closed)", results.len(), config.pairs
                ).into()),
            },
            _ = &mut deadline => return Err(format!(
                "timed out after {:?}: {} of {} pairs finished",
                config.timeout, results.len(), config.pairs
            ).into()),
        }
    }

    results.sort_by_key(|r| r.pair);
    for r in &results {
        println!(
            "pair {}: {:.1} Mbps steady-state, {:.1} MiB in {:.3}s",
            r.pair,
            r.mbps(),
            r.bytes as f64 / MIB as f64,
            r.secs()
        );
    }
    let aggregate: f64 = results.iter().map(PairResult::mbps).sum();
    let first = results.iter().map(|r| r.start).min().expect("pairs >= 1");
    let last = results.iter().map(|r| r.end).max().expect("pairs >= 1");
    let secs = last.duration_since(first).as_secs_f64();
    println!(
        "FINAL {aggregate:.3} aggregate over {} pairs (ordered={}) in {secs:.3}s",
        config.pairs, config.ordered
    );

    // Best-effort teardown, bounded so a stuck close cannot hold the exit.
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        for pc in &peers {
            let _ = pc.close().await;
        }
    })
    .await;
    Ok(())
}

#[tokio::main]
async fn main() {
    let outcome = match Config::from_env() {
        Ok(config) => run(config).await,
        Err(e) => Err(e),
    };
    let code = match outcome {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("webrtc-rs-flow: error: {e}");
            1
        }
    };
    let _ = std::io::stdout().flush();
    // Exit now rather than wait for detached tasks and any reactor threads to wind down.
    std::process::exit(code);
}
