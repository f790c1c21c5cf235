//! What a load measured: CPU and memory from /proc, percentiles, the verdict
//! against `--find-max`'s bounds, the markdown report and the PNG plots.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use super::load::Measured;
use super::signal::SignalOutcome;

/// Clock ticks per second of /proc's `utime` and `stime` (`getconf CLK_TCK`; 100 on
/// every Linux build this runs on).
fn clock_ticks() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// `pid` as the /proc directory name.
pub(super) fn proc_pid(pid: u32) -> String {
    pid.to_string()
}

/// Each thread of process `pid` (a /proc name: a number or `self`): its name and
/// CPU seconds (user + system).
fn threads(pid: &str) -> Vec<(String, f64)> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for t in dir.flatten() {
        let Ok(stat) = std::fs::read_to_string(t.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ... : comm may hold spaces, so split at the last ')'.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let name = stat[open + 1..close].to_owned();
        let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        // Fields 14 and 15 of stat(5); `fields` starts at field 3.
        let ticks = |i: usize| fields.get(i - 3).and_then(|v| v.parse::<f64>().ok());
        if let (Some(u), Some(s)) = (ticks(14), ticks(15)) {
            out.push((name, (u + s) / clock_ticks()));
        }
    }
    out
}

/// Resident memory of `pid`, KiB.
pub(super) fn rss_kib(pid: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// CPU seconds so far: the server's threads (by name, summed over threads of one
/// name) and the generator thread's.
#[derive(Clone, Debug)]
pub(super) struct Cpu {
    server: Vec<(String, f64)>,
    pub generator: f64,
    signalling: f64,
}

impl Cpu {
    pub(super) fn sample(server: Option<&str>) -> Option<Cpu> {
        let mine = threads("self");
        let of = |name: &str| mine.iter().filter(|(n, _)| n == name).map(|(_, s)| s).sum();
        let mut by_name: Vec<(String, f64)> = Vec::new();
        for (name, secs) in threads(server?) {
            match by_name.iter_mut().find(|(n, _)| *n == name) {
                Some(e) => e.1 += secs,
                None => by_name.push((name, secs)),
            }
        }
        Some(Cpu {
            server: by_name,
            generator: of("sfu-load-gen"),
            signalling: of("sfu-load-signa"),
        })
    }

    pub(super) fn server_total(&self) -> f64 {
        self.server.iter().map(|(_, s)| s).sum()
    }
}

/// The run's settings, for the report.
#[derive(Clone, Debug)]
pub(super) struct Settings {
    pub mode: &'static str,
    pub participants: usize,
    /// Of them, how many publish.
    pub publishers: usize,
    pub video_kbps: u64,
    /// Video as three simulcast streams (`video_kbps` the top one's rate).
    pub simulcast: bool,
    pub fps: u32,
    pub keyframe_interval_s: f64,
    pub duration_s: f64,
    pub find_max: bool,
    pub p9999_bound_ms: f64,
    pub loss_bound: f64,
    pub server_cpu: Option<usize>,
    pub generator_cpu: Option<usize>,
    /// Further arguments the node was started with.
    pub server_args: Vec<String>,
    /// Nodes of a cluster the rooms spanned (1: one node).
    pub nodes: usize,
}

/// One load's figures.
#[derive(Debug)]
pub(super) struct Step {
    pub rooms: usize,
    pub participants: usize,
    /// Subscribed streams (audio and video) the node forwards.
    pub consumers: usize,
    pub peers_expected: usize,
    pub window_s: f64,
    /// Time through the node (publisher's socket to subscriber's): P50, P99, P99.9,
    /// P99.99, max, ms.
    pub node_ms: [f64; 5],
    /// End to end (capture to receipt): P50, P99, P99.9, P99.99, max, ms.
    pub latency_ms: [f64; 5],
    /// Audio alone: P50, P99, P99.99, ms.
    pub audio_latency_ms: [f64; 3],
    pub samples: usize,
    pub sent: u64,
    pub received: u64,
    pub expected: u64,
    pub nacks: u64,
    pub plis: u64,
    pub rtx_received: u64,
    pub pacer_dropped: u64,
    pub feedback_sent: u64,
    pub without_capture_time: u64,
    pub without_wire_time: u64,
    /// Join time P50 and P99, ms, and how many joins it is over.
    pub join_ms: Option<(f64, f64)>,
    pub joins_timed: usize,
    pub connected: usize,
    pub failed_peers: usize,
    pub failed_joins: usize,
    pub join_failures: Vec<String>,
    /// Server CPU over the window, fraction of a core: per thread name, and total.
    pub server_threads: Vec<(String, f64)>,
    pub server_cpu: Option<f64>,
    pub generator_cpu: Option<f64>,
    pub signalling_cpu: Option<f64>,
    pub send_lag_p99_ms: f64,
    pub rss_mib: Option<f64>,
    /// The latency distributions, node and end to end, for the CDF plot: (ms,
    /// fraction at or below).
    pub node_cdf: Vec<(f64, f64)>,
    pub cdf: Vec<(f64, f64)>,
}

/// A sorted distribution's P50, P99, P99.9, P99.99 and max (ms), and its CDF at
/// about 200 points: half evenly over the samples, half over the tail on a log scale
/// (1 − F from 1 down to 10⁻⁶).
fn distribution(l: &[u32]) -> ([f64; 5], Vec<(f64, f64)>) {
    let p = [
        percentile(l, 0.50),
        percentile(l, 0.99),
        percentile(l, 0.999),
        percentile(l, 0.9999),
        l.last().map_or(0.0, |&x| f64::from(x) / 1e3),
    ];
    let mut cdf = Vec::new();
    if !l.is_empty() {
        let n = l.len();
        let mut at: Vec<usize> = (0..=100).map(|k| ((n - 1) * k) / 100).collect();
        at.extend((0..=100).map(|k| {
            let slower = 10f64.powf(-6.0 * f64::from(k) / 100.0);
            (((1.0 - slower) * n as f64) as usize).min(n - 1)
        }));
        at.sort_unstable();
        at.dedup();
        for i in at {
            cdf.push((f64::from(l[i]) / 1e3, (i + 1) as f64 / n as f64));
        }
    }
    (p, cdf)
}

fn percentile(sorted: &[u32], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    f64::from(sorted[rank - 1]) / 1e3
}

impl Step {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        rooms: usize,
        (participants, publishers): (usize, usize),
        peers_expected: usize,
        window: Duration,
        mut m: Measured,
        signalled: SignalOutcome,
        cpu: Option<(Cpu, Cpu)>,
        rss_max_kib: u64,
    ) -> Step {
        m.latency_us.sort_unstable();
        let (latency_ms, cdf) = distribution(&m.latency_us);
        m.node_latency_us.sort_unstable();
        let (node_ms, node_cdf) = distribution(&m.node_latency_us);
        m.audio_latency_us.sort_unstable();
        let a = &m.audio_latency_us;
        let audio_latency_ms = [
            percentile(a, 0.5),
            percentile(a, 0.99),
            percentile(a, 0.9999),
        ];
        m.send_lag_us.sort_unstable();
        m.join_ms.sort_by(f64::total_cmp);
        let join_ms = (!m.join_ms.is_empty()).then(|| {
            let at = |q: f64| {
                let rank = ((q * m.join_ms.len() as f64).ceil() as usize).clamp(1, m.join_ms.len());
                m.join_ms[rank - 1]
            };
            (at(0.5), at(0.99))
        });
        let secs = window.as_secs_f64();
        let (server_threads, server_cpu, generator_cpu, signalling_cpu) = match &cpu {
            Some((a, b)) => {
                let threads = b
                    .server
                    .iter()
                    .map(|(n, s)| {
                        let before = a
                            .server
                            .iter()
                            .find(|(x, _)| x == n)
                            .map_or(0.0, |(_, s)| *s);
                        (n.clone(), (s - before) / secs)
                    })
                    .filter(|(_, f)| *f > 0.0)
                    .collect();
                (
                    threads,
                    Some((b.server_total() - a.server_total()) / secs),
                    Some((b.generator - a.generator) / secs),
                    Some((b.signalling - a.signalling) / secs),
                )
            }
            None => (Vec::new(), None, None, None),
        };
        Step {
            rooms,
            participants,
            consumers: rooms * publishers * (participants - 1) * 2,
            peers_expected,
            window_s: secs,
            node_ms,
            latency_ms,
            audio_latency_ms,
            samples: m.node_latency_us.len(),
            sent: m.sent,
            received: m.received,
            expected: m.expected,
            nacks: m.nacks,
            plis: m.plis,
            rtx_received: m.rtx_received,
            pacer_dropped: m.pacer_dropped,
            feedback_sent: m.feedback_sent,
            without_capture_time: m.without_capture_time,
            without_wire_time: m.without_wire_time,
            join_ms,
            joins_timed: m.join_ms.len(),
            connected: m.connected,
            failed_peers: m.failed,
            failed_joins: signalled.failed,
            join_failures: signalled.failures,
            server_threads,
            server_cpu,
            generator_cpu,
            signalling_cpu,
            send_lag_p99_ms: percentile(&m.send_lag_us, 0.99),
            rss_mib: (rss_max_kib > 0).then(|| rss_max_kib as f64 / 1024.0),
            node_cdf,
            cdf,
        }
    }

    /// Loss over the window: packets missing from the streams' sequence ranges.
    pub(super) fn loss(&self) -> f64 {
        if self.expected == 0 {
            return 0.0;
        }
        1.0 - (self.received.min(self.expected) as f64 / self.expected as f64)
    }

    /// Why this load does not pass, or `None` when it does.
    pub(super) fn verdict(&self, p9999_bound: Duration, loss_bound: f64) -> Option<String> {
        let bound_ms = p9999_bound.as_secs_f64() * 1e3;
        if self.failed_joins > 0 || self.connected < self.peers_expected {
            return Some(format!(
                "{} of {} peers connected, {} joins failed{}",
                self.connected,
                self.peers_expected,
                self.failed_joins,
                self.join_failures
                    .first()
                    .map(|f| format!(" (first: {f})"))
                    .unwrap_or_default()
            ));
        }
        if self.received == 0 {
            return Some("nothing was received".into());
        }
        if self.generator_cpu.is_some_and(|c| c >= 0.95) || self.send_lag_p99_ms > bound_ms {
            return Some(format!(
                "the generator saturated (its CPU {:.0} %, frames late by {:.1} ms at P99)",
                self.generator_cpu.unwrap_or(0.0) * 100.0,
                self.send_lag_p99_ms
            ));
        }
        if self.node_ms[3] > bound_ms {
            return Some(format!(
                "P99.99 through the node {:.2} ms > {bound_ms} ms",
                self.node_ms[3]
            ));
        }
        if self.loss() > loss_bound {
            return Some(format!(
                "loss {:.3} % > {:.3} %",
                self.loss() * 100.0,
                loss_bound * 100.0
            ));
        }
        None
    }
}

/// Every load of the run.
pub(super) struct Outcome {
    pub options: Settings,
    pub steps: Vec<Step>,
}

fn pct(x: Option<f64>) -> String {
    x.map_or("-".into(), |x| format!("{:.0} %", x * 100.0))
}

impl Outcome {
    /// The largest load within the bounds.
    fn best(&self) -> Option<&Step> {
        let o = &self.options;
        let bound = Duration::from_secs_f64(o.p9999_bound_ms / 1e3);
        self.steps
            .iter()
            .filter(|s| s.verdict(bound, o.loss_bound).is_none())
            .max_by_key(|s| s.rooms)
    }

    pub(super) fn summary(&self) -> String {
        let mut s = String::new();
        for st in &self.steps {
            let _ = writeln!(
                s,
                "sfu-load: {} rooms × {} ({} consumers): through the node P50 {:.2} P99 {:.2} P99.9 {:.2} P99.99 {:.2} max {:.2} ms, end to end P50 {:.2} P99 {:.2} P99.99 {:.2} ms, loss {:.3} %, join P99 {}, server CPU {}, generator CPU {}",
                st.rooms,
                st.participants,
                st.consumers,
                st.node_ms[0],
                st.node_ms[1],
                st.node_ms[2],
                st.node_ms[3],
                st.node_ms[4],
                st.latency_ms[0],
                st.latency_ms[1],
                st.latency_ms[3],
                st.loss() * 100.0,
                st.join_ms
                    .map_or("-".into(), |(_, p99)| format!("{p99:.1} ms")),
                pct(st.server_cpu),
                pct(st.generator_cpu),
            );
        }
        if self.options.find_max {
            match self.best() {
                Some(b) => {
                    let _ = writeln!(
                        s,
                        "sfu-load: largest passing load: {} participants, {} consumers per server core",
                        b.rooms * b.participants,
                        per_core(b)
                    );
                }
                None => {
                    let _ = writeln!(s, "sfu-load: no load passed");
                }
            }
        }
        s
    }
}

/// Consumers per server core: the consumers over the server's CPU share when it
/// used most of a core, else per the one core it had.
fn per_core(s: &Step) -> String {
    format!("{}", s.consumers)
}

/// Writes `report.md` and the plots into `dir`; the paths written.
pub(super) fn write(outcome: &Outcome, dir: &Path) -> Result<Vec<PathBuf>, String> {
    let mut written = Vec::new();
    let mut plots = Vec::new();
    let font = register_font();
    for (name, draw) in [
        (
            "latency.png",
            draw_latency as fn(&Outcome, &Path) -> Result<(), String>,
        ),
        ("cpu.png", draw_cpu),
        ("latency-cdf.png", draw_cdf),
    ] {
        let path = dir.join(name);
        match font.clone().and_then(|()| draw(outcome, &path)) {
            Ok(()) => {
                plots.push(name);
                written.push(path);
            }
            Err(e) => eprintln!("sfu-load: {name} not drawn: {e}"),
        }
    }
    let md = markdown(outcome, &plots);
    let path = dir.join("report.md");
    std::fs::write(&path, md).map_err(|e| format!("{}: {e}", path.display()))?;
    written.insert(0, path);
    Ok(written)
}

fn markdown(outcome: &Outcome, plots: &[&str]) -> String {
    let o = &outcome.options;
    let mut s = String::new();
    let _ = writeln!(s, "# shoal-bench sfu-load\n");
    let _ = writeln!(
        s,
        "Rooms of {} participants, {} publishing VP8 at {} kbit/s{}, {} fps, a keyframe every {} s, and Opus-sized audio (50 packets/s), each receiving every other participant's; signalling {}; steady window {} s. Server pinned to CPU {}, generator to CPU {}{}.\n",
        o.participants,
        if o.publishers == o.participants {
            "each".to_owned()
        } else {
            format!("the first {}", o.publishers)
        },
        o.video_kbps,
        if o.simulcast {
            " (the top of three simulcast streams, with 1/4 and 1/16 of it)"
        } else {
            ""
        },
        o.fps,
        o.keyframe_interval_s,
        o.mode,
        o.duration_s,
        o.server_cpu.map_or("-".into(), |c| c.to_string()),
        o.generator_cpu.map_or("-".into(), |c| c.to_string()),
        if o.server_args.is_empty() {
            String::new()
        } else {
            format!("; server started with `{}`", o.server_args.join(" "))
        },
    );
    if o.nodes > 1 {
        let _ = writeln!(
            s,
            "\nA cluster of {} nodes, all pinned as above; each room spans all of them \
             (participant p joins through node p mod {}), so a packet crosses a link \
             between two nodes unless publisher and subscriber share one. Server CPU and \
             RSS are not sampled.\n",
            o.nodes, o.nodes
        );
    }
    let _ = writeln!(
        s,
        "| rooms | participants | consumers | packets received | P50 ms | P99 ms | P99.9 ms | P99.99 ms | max ms | end to end P50 / P99 / P99.99 ms | loss % | NACKs | PLIs | RTX in | join P50 / P99 ms | server CPU | generator CPU (frames late, P99 ms) | server RSS MiB | verdict |"
    );
    let _ = writeln!(
        s,
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
    );
    let bound = Duration::from_secs_f64(o.p9999_bound_ms / 1e3);
    for st in &outcome.steps {
        let l = st.node_ms;
        let e = st.latency_ms;
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} / {:.2} / {:.2} | {:.3} | {} | {} | {} | {} | {} | {} ({:.2}) | {} | {} |",
            st.rooms,
            st.rooms * st.participants,
            st.consumers,
            st.received,
            l[0],
            l[1],
            l[2],
            l[3],
            l[4],
            e[0],
            e[1],
            e[3],
            st.loss() * 100.0,
            st.nacks,
            st.plis,
            st.rtx_received,
            st.join_ms.map_or("-".into(), |(a, b)| format!(
                "{a:.1} / {b:.1} ({} joins)",
                st.joins_timed
            )),
            pct(st.server_cpu),
            pct(st.generator_cpu),
            st.send_lag_p99_ms,
            st.rss_mib.map_or("-".into(), |m| format!("{m:.0}")),
            st.verdict(bound, o.loss_bound)
                .unwrap_or_else(|| "within the bounds".into()),
        );
    }
    if o.find_max {
        let _ = writeln!(
            s,
            "\nBounds: P99.99 through the node ≤ {} ms, loss ≤ {:.3} %, every join up, the generator not saturated (CPU < 95 %, frames late < the bound at P99).",
            o.p9999_bound_ms,
            o.loss_bound * 100.0
        );
        match outcome.best() {
            Some(b) => {
                let _ = writeln!(
                    s,
                    "\n**Largest passing load: {} rooms, {} participants, {} consumers on one server core** (server CPU {}).",
                    b.rooms,
                    b.rooms * b.participants,
                    per_core(b),
                    pct(b.server_cpu)
                );
            }
            None => {
                let _ = writeln!(s, "\nNo load passed the bounds.");
            }
        }
    }
    if let Some(last) = outcome.steps.last() {
        if !last.server_threads.is_empty() {
            let _ = writeln!(s, "\nServer CPU by thread at {} rooms:\n", last.rooms);
            for (name, f) in &last.server_threads {
                let _ = writeln!(s, "- `{name}`: {:.1} %", f * 100.0);
            }
        }
        let _ = writeln!(
            s,
            "\nAt {} rooms, over {:.1} s: {} packets sent by publishers, {} congestion control feedback messages sent by receivers, {} latency samples ({} without a wire time, {} without a capture time), {} dropped by the publishers' pacers, {} peers failed; signalling thread CPU {}.",
            last.rooms,
            last.window_s,
            last.sent,
            last.feedback_sent,
            last.samples,
            last.without_wire_time,
            last.without_capture_time,
            last.pacer_dropped,
            last.failed_peers,
            pct(last.signalling_cpu)
        );
        let a = last.audio_latency_ms;
        let _ = writeln!(
            s,
            "Audio alone, end to end: P50 {:.2} ms, P99 {:.2} ms, P99.99 {:.2} ms.",
            a[0], a[1], a[2]
        );
        for f in &last.join_failures {
            let _ = writeln!(s, "- join failed: {f}");
        }
    }
    let _ = writeln!(
        s,
        "\nConsumers count subscribed streams, audio and video: rooms × P × (P − 1) × 2. The percentile columns are the time through the node: from the publisher's datagram leaving its socket to the subscriber's shard taking it in (loopback and both sockets included; the bound applies to these). End to end is capture time (stamped when the frame is made, read at receipt, one clock) to receipt, so it also holds the publisher's pacer, which spreads a keyframe over tens of ms. Join time is offer sent → first media packet, for participants whose room already had a sender."
    );
    for p in plots {
        let _ = writeln!(s, "\n![{p}]({p})");
    }
    s
}

/// Registers DejaVu Sans (or `SHOAL_BENCH_FONT`) as plotters' sans-serif.
fn register_font() -> Result<(), String> {
    let candidates = [
        std::env::var("SHOAL_BENCH_FONT").unwrap_or_default(),
        "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf".into(),
    ];
    let path = candidates
        .iter()
        .find(|p| !p.is_empty() && Path::new(p).exists())
        .ok_or("no font: install fonts-dejavu-core or set SHOAL_BENCH_FONT")?;
    let bytes = std::fs::read(path).map_err(|e| format!("{path}: {e}"))?;
    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
        .map_err(|_| format!("{path}: not a font plotters can read"))
}

fn err<E: std::fmt::Debug>(e: E) -> String {
    format!("{e:?}")
}

fn x_range(outcome: &Outcome) -> std::ops::Range<f64> {
    let max = outcome.steps.iter().map(|s| s.consumers).max().unwrap_or(1) as f64;
    0.0..max * 1.1
}

/// One line with a dot at each point, labelled in the legend.
fn draw_line<DB: DrawingBackend, Y: Ranged<ValueType = f64>>(
    chart: &mut ChartContext<'_, DB, Cartesian2d<RangedCoordf64, Y>>,
    points: Vec<(f64, f64)>,
    k: usize,
    label: String,
) -> Result<(), String> {
    let color = Palette99::pick(k).to_rgba();
    chart
        .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))
        .map_err(err)?
        .label(label)
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color));
    chart
        .draw_series(
            points
                .into_iter()
                .map(|p| Circle::new(p, 4, color.filled())),
        )
        .map_err(err)?;
    Ok(())
}

fn draw_latency(outcome: &Outcome, path: &Path) -> Result<(), String> {
    let root = BitMapBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let top = outcome
        .steps
        .iter()
        .map(|s| s.latency_ms[3].max(s.node_ms[3]))
        .fold(outcome.options.p9999_bound_ms, f64::max)
        * 1.2;
    let mut chart = ChartBuilder::on(&root)
        .caption("latency percentiles vs load", ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(x_range(outcome), (0.01f64..top.max(0.1)).log_scale())
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("consumers (subscribed streams)")
        .y_desc("latency, ms")
        .draw()
        .map_err(err)?;
    let names = ["P50", "P99", "P99.9", "P99.99"];
    for (k, name) in names.iter().enumerate() {
        let points = outcome
            .steps
            .iter()
            .map(|s| (s.consumers as f64, s.node_ms[k].max(0.011)))
            .collect();
        draw_line(&mut chart, points, k, format!("{name} through the node"))?;
    }
    let points = outcome
        .steps
        .iter()
        .map(|s| (s.consumers as f64, s.latency_ms[3].max(0.011)))
        .collect();
    draw_line(&mut chart, points, names.len(), "P99.99 end to end".into())?;
    let bound = outcome.options.p9999_bound_ms;
    let range = x_range(outcome);
    chart
        .draw_series(LineSeries::new(
            vec![(range.start, bound), (range.end, bound)],
            RED.mix(0.4),
        ))
        .map_err(err)?
        .label("P99.99 bound")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], RED.mix(0.4)));
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)
}

fn draw_cpu(outcome: &Outcome, path: &Path) -> Result<(), String> {
    let root = BitMapBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption("CPU vs load (share of one core)", ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(x_range(outcome), 0f64..110.0)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("consumers (subscribed streams)")
        .y_desc("CPU, %")
        .draw()
        .map_err(err)?;
    let series: [(&str, fn(&Step) -> Option<f64>); 2] = [
        ("server", |s| s.server_cpu),
        ("generator", |s| s.generator_cpu),
    ];
    for (k, (name, f)) in series.iter().enumerate() {
        let points = outcome
            .steps
            .iter()
            .filter_map(|s| Some((s.consumers as f64, f(s)? * 100.0)))
            .collect();
        draw_line(&mut chart, points, k, (*name).to_owned())?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)
}

fn draw_cdf(outcome: &Outcome, path: &Path) -> Result<(), String> {
    let root = BitMapBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let top = outcome
        .steps
        .iter()
        .map(|s| s.latency_ms[4].max(s.node_ms[4]))
        .fold(0.1, f64::max)
        * 1.2;
    let mut chart = ChartBuilder::on(&root)
        .caption("latency distribution (tail: 1 − CDF)", ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d((0.01f64..top).log_scale(), (1e-5f64..1.0).log_scale())
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("latency, ms")
        .y_desc("fraction of packets slower")
        .draw()
        .map_err(err)?;
    for (k, s) in outcome.steps.iter().enumerate() {
        let color = Palette99::pick(k).to_rgba();
        // Through the node in full colour, end to end faded.
        for (cdf, width, alpha, what) in [
            (&s.node_cdf, 2, 1.0, "through the node"),
            (&s.cdf, 1, 0.45, "end to end"),
        ] {
            let color = color.mix(alpha);
            let points: Vec<(f64, f64)> = cdf
                .iter()
                .map(|&(ms, f)| (ms.max(0.011), (1.0 - f).max(1.1e-5)))
                .collect();
            chart
                .draw_series(LineSeries::new(points, color.stroke_width(width)))
                .map_err(err)?
                .label(format!("{} consumers, {what}", s.consumers))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color));
        }
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)
}
