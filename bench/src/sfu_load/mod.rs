//! `shoal-bench sfu-load`: an SFU under the load of many rooms, over real UDP, with
//! shoal's own client stack as every participant (no browser, no decoding).
//!
//! N rooms of P participants: each publishes synthetic VP8 video (one stream, or
//! with `--simulcast` three) and Opus-sized audio and receives every other
//! participant's (see `load.rs` for the media); with `--publishers K` only a room's
//! first K participants publish and the rest only receive (a webinar's shape; such
//! a participant offers a data channel alone, as a browser that sends nothing does,
//! and takes the node's offers like the others); rooms
//! arrive `--room-gap-ms` apart and a room's joins spread over `--join-window-ms`.
//! Signalling is the node's `/signal` WebSocket or WHIP + WHEP (`signal.rs`, which
//! also says what WHIP + WHEP can and cannot express). After every join and a
//! warm-up, a steady window of `--duration` seconds measures:
//! - every received packet's time through the node (its publisher's datagram
//!   leaving the socket to the subscriber taking it in, from a tag at the end of each
//!   payload) and its end-to-end latency (abs-capture-time stamped when the frame is
//!   made, read at receipt, one clock), P50 to max;
//! - loss (from each received stream's sequence numbers), NACKs and PLIs sent,
//!   retransmissions received;
//! - join time, offer sent → first media packet received, for participants that
//!   joined a room where someone was already sending (WHEP: its own offer);
//! - the server's CPU per thread (from /proc) and RSS, and the generator's own CPU
//!   and how late its frames went out, so a saturated generator is never taken for
//!   a slow server.
//!
//! `--shoal BIN` starts the server itself (one shard, ephemeral ports, and any
//! `--server-arg`s) pinned to `--server-cpu`, and the generator pins itself to
//! `--generator-cpu`; `--http ADDR` (and `--server-pid PID` for its CPU) loads a
//! server already running. `--find-max` raises the room count (×1.5 a step) until
//! P99.99 through the node exceeds `--p9999-bound-ms`, loss exceeds `--loss-bound`, a
//! join fails or the generator saturates, and reports the largest passing load per
//! server core. Progress prints each second; `report.md` and PNG plots go to `--out`.
//! `--soak` samples the server's memory and what the node holds through the window
//! and reports the memory's slope (`soak.rs`). `--nodes N --etcd URL` starts N nodes
//! of a cluster instead of one and spreads each room's participants over them, so
//! every room is cascaded across all of them. `--kill-after S` then kills one of
//! them with SIGKILL `S` seconds into the steady window and measures how long until
//! the participants it cut off are served again (`failover.rs`).

mod failover;
mod load;
mod report;
mod signal;
mod soak;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use mio::{Poll, Waker};

use failover::{Failover, Kill, Target, Victim};
use load::{Generator, Live, Measured, MediaShape, ToGen, WAKER};
use report::{Cpu, Outcome, Step};
use shoal_server::control::cluster::DEFAULT_LEASE_TTL_SECS;
use signal::{Mode, Plan, SignalOutcome, ToGenerator};

/// The options.
#[derive(Clone, Debug)]
struct Options {
    shoal: Option<PathBuf>,
    http: Option<SocketAddr>,
    server_pid: Option<u32>,
    mode: Mode,
    rooms: usize,
    participants: usize,
    /// The first this many participants of a room publish; the rest only receive.
    publishers: usize,
    duration: Duration,
    warmup: Duration,
    room_gap: Duration,
    join_window: Duration,
    media: MediaShape,
    find_max: bool,
    p9999_bound: Duration,
    loss_bound: f64,
    max_rooms: usize,
    server_cpu: Option<usize>,
    generator_cpu: Option<usize>,
    /// Further arguments for the node it starts (`--server-arg`, repeatable).
    server_args: Vec<String>,
    /// Sample memory and the node's counts through the steady window (`soak.rs`).
    soak: Option<Duration>,
    /// Nodes of a cluster to start (`--nodes`, with `--shoal` and `--etcd`): each
    /// room's participants join through them in turn, so every room spans them all.
    nodes: usize,
    /// The etcd the cluster's nodes meet in.
    etcd: Option<String>,
    /// The nodes' lease TTL (`--cluster-lease-ttl`), if set.
    lease_ttl: Option<u32>,
    /// Kill a node this far into the steady window (`--kill-after`, `--kill-node`).
    kill: Option<(Duration, Target)>,
    out: PathBuf,
}

const USAGE: &str = "usage: shoal-bench sfu-load (--shoal BIN | --http ADDR [--server-pid PID]) [options]\n\
  --signal signal|whip     signalling: the node's /signal, or WHIP + WHEP (signal)\n\
  --rooms N                rooms (2)\n\
  --participants P         participants per room (4)\n\
  --publishers K           of them, the first K publish, the rest only receive (all;\n\
                           --signal signal only)\n\
  --duration S             steady window, seconds (10)\n\
  --warmup S               after the last join, before the window (5)\n\
  --room-gap-ms MS         between two rooms' arrivals (100)\n\
  --join-window-ms MS      a room's joins spread over this (500)\n\
  --video-kbps K           video bit rate (400)\n\
  --fps F                  video frames per second (30)\n\
  --keyframe-interval-s S  a keyframe at least this often (2)\n\
  --simulcast              video as three simulcast streams: 1/16, 1/4 and all of the rate\n\
  --find-max               raise the rooms until a bound is passed\n\
  --p9999-bound-ms MS      find-max bound on P99.99 through the node (5)\n\
  --loss-bound PERCENT     find-max loss bound (0.1)\n\
  --max-rooms N            find-max stops here (2000)\n\
  --server-cpu C           pin the server it starts (0); --generator-cpu C (1); --no-pin\n\
  --server-arg ARG         one more argument for the server it starts (repeatable:\n\
                           --server-arg --pacer-burst-ms --server-arg 40)\n\
  --out DIR                report and plots (sfu-load-report)\n\
  --soak                   a soak: sample RSS and the node's counts through the window\n\
                           (every --soak-sample-s S, 10), slope and soak.png in the report\n\
  --nodes N --etcd URL     start N nodes of a cluster on the etcd at URL (with --shoal and\n\
                           /signal), each in a region of its own and pinned like one node;\n\
                           participant p of a room joins through node p mod N, so each\n\
                           room spans every node, cascaded over links (1)\n\
  --lease-ttl S            the nodes' lease TTL (the node's default, 10)\n\
  --kill-after S           kill node --kill-node K|owner (owner: of the first room; owner)\n\
                           with SIGKILL S seconds into the steady window; the participants\n\
                           it cuts off join again through the others, and the report says\n\
                           when each was served again (the window should last past\n\
                           S + TTL + 5)";

pub(crate) fn value<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
}

pub(crate) fn number<T: std::str::FromStr>(
    args: &[String],
    name: &str,
    default: T,
) -> Result<T, String> {
    match value(args, name) {
        None if args.iter().any(|a| a == name) => Err(format!("{name} needs a value")),
        None => Ok(default),
        Some(v) => v.parse().map_err(|_| format!("{name}: not a number: {v}")),
    }
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mode = match value(args, "--signal").unwrap_or("signal") {
        "signal" => Mode::Signal,
        "whip" | "whip-whep" => Mode::WhipWhep,
        other => return Err(format!("--signal: signal or whip, not {other}")),
    };
    let pin = !args.iter().any(|a| a == "--no-pin");
    let mut o = Options {
        shoal: value(args, "--shoal").map(PathBuf::from),
        http: value(args, "--http")
            .map(|v| {
                v.parse()
                    .map_err(|_| format!("--http: not an address: {v}"))
            })
            .transpose()?,
        server_pid: value(args, "--server-pid")
            .map(|v| v.parse().map_err(|_| format!("--server-pid: {v}")))
            .transpose()?,
        mode,
        rooms: number(args, "--rooms", 2)?,
        participants: number(args, "--participants", 4)?,
        publishers: number(args, "--publishers", usize::MAX)?,
        duration: Duration::from_secs_f64(number(args, "--duration", 10.0)?),
        warmup: Duration::from_secs_f64(number(args, "--warmup", 5.0)?),
        room_gap: Duration::from_millis(number(args, "--room-gap-ms", 100)?),
        join_window: Duration::from_millis(number(args, "--join-window-ms", 500)?),
        media: MediaShape {
            video_bps: number::<u64>(args, "--video-kbps", 400)? * 1000,
            fps: number(args, "--fps", 30)?,
            keyframe_interval: Duration::from_secs_f64(number(args, "--keyframe-interval-s", 2.0)?),
            simulcast: args.iter().any(|a| a == "--simulcast"),
        },
        find_max: args.iter().any(|a| a == "--find-max"),
        p9999_bound: Duration::from_secs_f64(number::<f64>(args, "--p9999-bound-ms", 5.0)? / 1e3),
        loss_bound: number::<f64>(args, "--loss-bound", 0.1)? / 100.0,
        max_rooms: number(args, "--max-rooms", 2000)?,
        server_cpu: pin.then(|| number(args, "--server-cpu", 0)).transpose()?,
        generator_cpu: pin
            .then(|| number(args, "--generator-cpu", 1))
            .transpose()?,
        server_args: args
            .windows(2)
            .filter(|w| w[0] == "--server-arg")
            .map(|w| w[1].clone())
            .collect(),
        out: PathBuf::from(value(args, "--out").unwrap_or("sfu-load-report")),
        soak: args
            .iter()
            .any(|a| a == "--soak")
            .then(|| number(args, "--soak-sample-s", 10.0).map(Duration::from_secs_f64))
            .transpose()?,
        nodes: number(args, "--nodes", 1)?,
        etcd: value(args, "--etcd").map(str::to_owned),
        lease_ttl: value(args, "--lease-ttl")
            .map(|v| v.parse().map_err(|_| format!("--lease-ttl: {v}")))
            .transpose()?,
        kill: value(args, "--kill-after")
            .map(|_| -> Result<_, String> {
                let target = match value(args, "--kill-node").unwrap_or("owner") {
                    "owner" => Target::Owner,
                    k => Target::Node(k.parse().map_err(|_| format!("--kill-node: {k}"))?),
                };
                Ok((
                    Duration::from_secs_f64(number(args, "--kill-after", 0.0)?),
                    target,
                ))
            })
            .transpose()?,
    };
    if let Some((_, target)) = o.kill
        && (o.nodes < 2 || matches!(target, Target::Node(k) if k >= o.nodes) || o.find_max)
    {
        return Err(
            "--kill-after needs --nodes of 2 or more, --kill-node below it, and no --find-max"
                .into(),
        );
    }
    if o.nodes > 1 && (o.shoal.is_none() || o.etcd.is_none() || o.mode != Mode::Signal) {
        return Err("--nodes above 1 needs --shoal, --etcd and /signal".into());
    }
    if o.shoal.is_none() == o.http.is_none() {
        return Err("one of --shoal BIN or --http ADDR".into());
    }
    if o.rooms == 0 || o.participants < 2 || o.media.fps == 0 || o.duration.is_zero() {
        return Err("at least one room of two participants, a frame rate and a duration".into());
    }
    o.publishers = o.publishers.min(o.participants);
    if o.publishers == 0 || (o.publishers < o.participants && o.mode != Mode::Signal) {
        return Err(
            "--publishers: at least one, and fewer than all only with --signal signal".into(),
        );
    }
    Ok(o)
}

pub(crate) fn run(args: &[String]) -> ExitCode {
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let options = match parse(args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("sfu-load: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match drive(&options) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sfu-load: {e}");
            ExitCode::FAILURE
        }
    }
}

/// A server this run started; killed when dropped.
struct Server {
    child: Child,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_server(
    bin: &PathBuf,
    cpu: Option<usize>,
    extra: &[String],
    log: PathBuf,
) -> Result<(Server, SocketAddr), String> {
    let args = [
        "--shards",
        "1",
        "--udp-port-base",
        "0",
        "--tcp-port-base",
        "off",
        "--grpc-addr",
        "127.0.0.1:0",
        "--http-addr",
        "127.0.0.1:0",
        "--max-connections-per-address",
        "1000000",
        "--max-connections",
        "1000000",
    ];
    let stderr = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
    let mut command = match cpu {
        Some(c) => {
            let mut t = Command::new("taskset");
            t.arg("-c").arg(c.to_string()).arg(bin);
            t
        }
        None => Command::new(bin),
    };
    let mut child = command
        .args(args)
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .map_err(|e| format!("starting {}: {e}", bin.display()))?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let server = Server { child };
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let by = Instant::now() + Duration::from_secs(30);
    loop {
        let line = rx
            .recv_timeout(by.saturating_duration_since(Instant::now()))
            .map_err(|_| format!("shoal printed no http address (see {})", log.display()))?;
        if let Some(a) = line.strip_prefix("shoal: http http://") {
            let addr = a
                .parse()
                .map_err(|_| format!("shoal's http address: {a}"))?;
            return Ok((server, addr));
        }
    }
}

/// Pins this process's threads (and those it starts later) to `cpu`.
fn pin_self(cpu: usize) -> Result<(), String> {
    let status = Command::new("taskset")
        .args([
            "-a",
            "-p",
            "-c",
            &cpu.to_string(),
            &std::process::id().to_string(),
        ])
        .stdout(Stdio::null())
        .status()
        .map_err(|e| format!("taskset: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("taskset -c {cpu} failed"))
    }
}

fn drive(o: &Options) -> Result<(), String> {
    std::fs::create_dir_all(&o.out).map_err(|e| format!("{}: {e}", o.out.display()))?;
    let mut cluster = Vec::new();
    let (server, http, pid) = match (&o.shoal, o.http) {
        (Some(bin), _) if o.nodes > 1 => {
            let etcd = o.etcd.as_deref().unwrap_or_default();
            let prefix = format!("/sfu-load-{}", std::process::id());
            for i in 0..o.nodes {
                let (id, region) = (format!("load-{i}"), format!("region-{i}"));
                let mut args: Vec<String> = [
                    "--etcd",
                    etcd,
                    "--cluster-prefix",
                    &prefix,
                    "--node-id",
                    &id,
                    "--region",
                    &region,
                ]
                .map(str::to_owned)
                .to_vec();
                if let Some(ttl) = o.lease_ttl {
                    args.extend(["--cluster-lease-ttl".to_owned(), ttl.to_string()]);
                }
                args.extend(o.server_args.iter().cloned());
                let log = o.out.join(format!("server-{i}.log"));
                cluster.push(start_server(bin, o.server_cpu, &args, log)?);
            }
            // The nodes' CPU is not sampled: no one process stands for the cluster.
            let http = cluster.first().map(|(_, h)| *h).ok_or("no node")?;
            (None, http, None)
        }
        (Some(bin), _) => {
            let (server, http) =
                start_server(bin, o.server_cpu, &o.server_args, o.out.join("server.log"))?;
            let pid = server.child.id();
            (Some(server), http, Some(pid))
        }
        (None, Some(http)) => (None, http, o.server_pid),
        (None, None) => unreachable!("checked in parse"),
    };
    let joins_via: Vec<SocketAddr> = if cluster.is_empty() {
        vec![http]
    } else {
        cluster.iter().map(|(_, h)| *h).collect()
    };
    if let Some(c) = o.generator_cpu {
        pin_self(c)?;
    }
    let pid = pid.map(report::proc_pid);
    println!(
        "sfu-load: {} at {}, rooms of {}, {} kbit/s video{} at {} fps, signalling {}",
        if !cluster.is_empty() {
            format!("a cluster of {} shoal nodes started", cluster.len())
        } else if server.is_some() {
            "shoal started".to_owned()
        } else {
            "server".to_owned()
        },
        joins_via
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", "),
        o.participants,
        o.media.video_bps / 1000,
        if o.media.simulcast {
            " (top of three simulcast streams)"
        } else {
            ""
        },
        o.media.fps,
        o.mode.name()
    );
    let mut steps: Vec<Step> = Vec::new();
    let mut soak = None;
    let mut failover = None;
    let mut rooms = o.rooms;
    let mut run = 0;
    loop {
        run += 1;
        let (step, soaked, failed_over) = one_run(
            o,
            (http, &joins_via, &mut cluster),
            pid.as_deref(),
            rooms,
            run,
        )?;
        if soaked.is_some() {
            soak = soaked;
        }
        if failed_over.is_some() {
            failover = failed_over;
        }
        let verdict = step.verdict(o.p9999_bound, o.loss_bound);
        println!(
            "sfu-load: {rooms} rooms: {}",
            verdict.as_deref().unwrap_or("within the bounds")
        );
        steps.push(step);
        if !o.find_max || verdict.is_some() || rooms >= o.max_rooms {
            break;
        }
        rooms = (rooms * 3).div_ceil(2).min(o.max_rooms);
        // Let the node forget the last step's participants.
        std::thread::sleep(Duration::from_secs(2));
    }
    let outcome = Outcome {
        options: report::Settings {
            mode: o.mode.name(),
            participants: o.participants,
            publishers: o.publishers,
            video_kbps: o.media.video_bps / 1000,
            simulcast: o.media.simulcast,
            fps: o.media.fps,
            keyframe_interval_s: o.media.keyframe_interval.as_secs_f64(),
            duration_s: o.duration.as_secs_f64(),
            find_max: o.find_max,
            p9999_bound_ms: o.p9999_bound.as_secs_f64() * 1e3,
            loss_bound: o.loss_bound,
            server_cpu: o.server_cpu,
            generator_cpu: o.generator_cpu,
            server_args: o.server_args.clone(),
            nodes: o.nodes,
        },
        steps,
    };
    let mut written = report::write(&outcome, &o.out)?;
    if let Some(soak) = &soak {
        append_to_report(&o.out, &soak::markdown(soak))?;
        written.extend(soak::write(soak, &o.out)?);
        println!(
            "sfu-load: soak:{}",
            soak::markdown(soak).lines().nth(3).unwrap_or_default()
        );
    }
    if let Some(f) = &failover {
        append_to_report(&o.out, &f.markdown())?;
    }
    println!("{}", outcome.summary());
    if let Some(f) = &failover {
        println!("{}", f.summary());
    }
    for w in written {
        println!("sfu-load: wrote {}", w.display());
    }
    drop(server);
    drop(cluster);
    Ok(())
}

/// Adds `section` to the end of `out`'s `report.md`.
fn append_to_report(out: &std::path::Path, section: &str) -> Result<(), String> {
    let md = out.join("report.md");
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&md)
        .map_err(|e| format!("{}: {e}", md.display()))?;
    std::io::Write::write_all(&mut file, section.as_bytes())
        .map_err(|e| format!("{}: {e}", md.display()))
}

/// One load: joins, warm-up, the steady window (with a node killed in it, if asked),
/// teardown.
fn one_run(
    o: &Options,
    (http, joins_via, cluster): (SocketAddr, &[SocketAddr], &mut [(Server, SocketAddr)]),
    pid: Option<&str>,
    rooms: usize,
    run: usize,
) -> Result<(Step, Option<soak::Soak>, Option<Failover>), String> {
    // A soak's baseline: what the node holds before the first join.
    let mut soaked = o.soak.map(|_| soak::Soak {
        baseline: soak::counts(http).ok(),
        ..soak::Soak::default()
    });
    let live = Arc::new(Live::new(rooms));
    let poll = Poll::new().map_err(|e| e.to_string())?;
    let waker = Arc::new(Waker::new(poll.registry(), WAKER).map_err(|e| e.to_string())?);
    let (tx, rx) = mpsc::channel();
    let generator = Generator::new(poll, rx, o.media, rooms, Arc::clone(&live))
        .map_err(|e| format!("generator: {e}"))?;
    let fingerprint = generator.fingerprint();
    let gen_thread = std::thread::Builder::new()
        .name("sfu-load-gen".into())
        .spawn(move || generator.run())
        .map_err(|e| e.to_string())?;
    let plan = Plan {
        http,
        joins_via: joins_via.to_vec(),
        mode: o.mode,
        rooms,
        participants: o.participants,
        publishers: o.publishers,
        room_gap: o.room_gap,
        join_window: o.join_window,
        fingerprint,
        run: format!("load{}-{run}", std::process::id()),
        simulcast: o.media.simulcast,
        kill: o.kill.map(|_| Arc::new(Kill::default())),
    };
    let kill = plan.kill.clone();
    let first_room = format!("{}-0", plan.run);
    let to_gen = ToGenerator {
        tx: tx.clone(),
        waker: Arc::clone(&waker),
        next_conn: Arc::new(AtomicUsize::new(0)),
        live: Arc::clone(&live),
    };
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let signal_thread = std::thread::Builder::new()
        .name("sfu-load-signal".into())
        .spawn(move || -> Result<SignalOutcome, String> {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            Ok(rt.block_on(signal::run(plan, to_gen, stop_rx)))
        })
        .map_err(|e| e.to_string())?;
    let peers_per_participant = match o.mode {
        Mode::Signal => 1,
        Mode::WhipWhep => 2,
    };
    let expected = rooms * o.participants * peers_per_participant;
    // Joins: every connection up (or the arrivals' span and a margin gone).
    let arrivals = o.room_gap * rooms as u32 + o.join_window;
    let join_by = Instant::now() + arrivals + Duration::from_secs(15);
    let mut progress = Progress::new(&live, pid);
    while live.connected.load(Ordering::Relaxed) + live.failed.load(Ordering::Relaxed) < expected
        && Instant::now() < join_by
    {
        std::thread::sleep(Duration::from_millis(50));
        progress.tick(&live, pid, "joining");
    }
    let warm_until = Instant::now() + o.warmup;
    while Instant::now() < warm_until {
        std::thread::sleep(Duration::from_millis(50));
        progress.tick(&live, pid, "warm-up");
    }
    let send = |m| {
        let _ = tx.send(m);
        let _ = waker.wake();
    };
    send(ToGen::Steady);
    let cpu_start = Cpu::sample(pid);
    let t0 = Instant::now();
    let mut rss_max_kib = 0;
    let mut next_sample = t0;
    while t0.elapsed() < o.duration {
        std::thread::sleep(Duration::from_millis(50));
        if let (Some(k), Some((after, target))) = (&kill, o.kill)
            && k.victim.get().is_none()
            && t0.elapsed() >= after
        {
            let node = match target {
                Target::Node(n) => n,
                Target::Owner => {
                    let logs: Vec<String> = (0..cluster.len())
                        .map(|i| {
                            std::fs::read_to_string(o.out.join(format!("server-{i}.log")))
                                .unwrap_or_default()
                        })
                        .collect();
                    failover::owner_of(&first_room, &logs)
                        .and_then(|id| id.strip_prefix("load-")?.parse().ok())
                        .ok_or_else(|| format!("no node logged placing {first_room}"))?
                }
            };
            let (server, http) = cluster
                .get_mut(node)
                .ok_or_else(|| format!("no node {node}"))?;
            // Set first: the participants see their sockets break at once.
            let _ = k.victim.set(Victim {
                node,
                http: http.to_string(),
                at: Instant::now(),
            });
            // `Child::kill` is SIGKILL: no drain, no lease revoked.
            server
                .child
                .kill()
                .map_err(|e| format!("kill node {node}: {e}"))?;
            println!("sfu-load: killed node {node} ({http}) with SIGKILL");
        }
        progress.tick(&live, pid, "steady");
        if let Some(p) = pid {
            rss_max_kib = rss_max_kib.max(report::rss_kib(p).unwrap_or(0));
        }
        if let (Some(s), Some(every)) = (soaked.as_mut(), o.soak)
            && Instant::now() >= next_sample
        {
            next_sample += every;
            s.samples.push(soak::Sample {
                at_s: t0.elapsed().as_secs_f64(),
                rss_kib: pid.and_then(report::rss_kib),
                counts: soak::counts(http).ok(),
            });
        }
    }
    let cpu_end = Cpu::sample(pid);
    let window = t0.elapsed();
    send(ToGen::Stop);
    let measured: Measured = gen_thread
        .join()
        .map_err(|_| "the generator panicked".to_owned())?
        .map_err(|e| format!("generator: {e}"))?;
    let _ = stop_tx.send(true);
    let signalled = signal_thread
        .join()
        .map_err(|_| "the signalling thread panicked".to_owned())??;
    // The load has left: a soak waits for the node to let everything go.
    if let Some(s) = soaked.as_mut() {
        soak::settle(s, http);
    }
    let failover = kill.as_ref().and_then(|k| {
        let ttl = Duration::from_secs(o.lease_ttl.unwrap_or(DEFAULT_LEASE_TTL_SECS).into());
        let after = o.kill.map_or(Duration::ZERO, |(a, _)| a);
        Failover::new(
            k,
            after,
            ttl,
            signalled.cut_off.clone(),
            &measured.first_media,
        )
    });
    let step = Step::new(
        rooms,
        (o.participants, o.publishers),
        expected,
        window,
        measured,
        signalled,
        cpu_start.zip(cpu_end),
        rss_max_kib,
    );
    Ok((step, soaked, failover))
}

/// A line on the terminal each second.
struct Progress {
    last: Instant,
    sent: u64,
    received: u64,
    cpu: Option<Cpu>,
}

impl Progress {
    fn new(live: &Live, pid: Option<&str>) -> Progress {
        Progress {
            last: Instant::now(),
            sent: live.sent.load(Ordering::Relaxed),
            received: live.received.load(Ordering::Relaxed),
            cpu: Cpu::sample(pid),
        }
    }

    fn tick(&mut self, live: &Live, pid: Option<&str>, phase: &str) {
        let dt = self.last.elapsed();
        if dt < Duration::from_secs(1) {
            return;
        }
        let sent = live.sent.load(Ordering::Relaxed);
        let received = live.received.load(Ordering::Relaxed);
        let cpu = Cpu::sample(pid);
        let share = |f: fn(&Cpu) -> f64| match (&self.cpu, &cpu) {
            (Some(a), Some(b)) => format!("{:.0} %", (f(b) - f(a)) / dt.as_secs_f64() * 100.0),
            _ => "-".into(),
        };
        println!(
            "  {phase:8} peers up {:5} failed {:3}  sent {:7.0} pkt/s  received {:7.0} pkt/s  server cpu {}  generator cpu {}",
            live.connected.load(Ordering::Relaxed),
            live.failed.load(Ordering::Relaxed),
            (sent - self.sent) as f64 / dt.as_secs_f64(),
            (received - self.received) as f64 / dt.as_secs_f64(),
            share(|c| c.server_total()),
            share(|c| c.generator),
        );
        *self = Progress {
            last: Instant::now(),
            sent,
            received,
            cpu,
        };
    }
}
