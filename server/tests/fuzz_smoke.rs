//! Every fuzz target of `fuzz/` (cargo-fuzz, libFuzzer) built without a sanitizer
//! (`cargo fuzz build -s none`, which stable Rust can do) and run for
//! `SHOAL_FUZZ_RUNS` executions (10 000 unless set) from a seed corpus: the fixtures
//! the tests captured from real peers (Chromium's and openssl's DTLS, SCTP packets,
//! browser and aiortc offers) and messages shoal's own writers make (STUN checks,
//! RTP with header extensions, RTCP feedback, signalling JSON, tokens, RFC 4571
//! frames). A target that crashes, hangs past 10 s on one input or runs out of its
//! memory limit fails the test, which names the input libFuzzer saved.
//!
//! `scripts/fuzz` runs the same with `SHOAL_FUZZ_RUNS=10000000` and prints each
//! target's count and rate; `SHOAL_FUZZ_MAX_SECONDS` caps each target's time (it
//! then reports how far it got). Needs `cargo-fuzz` (`scripts/test-all` installs it).

use std::path::{Path, PathBuf};
use std::process::Command;

use bytes::BytesMut;
use shoal_components::rtp::{RtpFields, RtpWriter};
use shoal_components::stun::{BINDING, Class, StunWriter, TransactionId};

/// Every target in `fuzz/Cargo.toml`.
const TARGETS: [&str; 12] = [
    "stun",
    "dtls_records",
    "dtls_server",
    "sctp_packet",
    "sctp_association",
    "dcep",
    "rtp",
    "rtcp",
    "sdp",
    "signal_json",
    "tcp_framing",
    "jwt",
];
/// Executions per target unless `SHOAL_FUZZ_RUNS` says otherwise.
const DEFAULT_RUNS: u64 = 10_000;
/// Runs up to which the targets are built unoptimised (quicker to build than to run).
const QUICK_RUNS: u64 = 100_000;
/// Targets run at once.
const PARALLEL: usize = 2;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the repository")
        .to_owned()
}

#[test]
fn fuzz_smoke() {
    let runs: u64 = std::env::var("SHOAL_FUZZ_RUNS")
        .ok()
        .map_or(DEFAULT_RUNS, |v| {
            v.parse().expect("SHOAL_FUZZ_RUNS is a number")
        });
    // A cap on each target's time: it then stops short of `runs` without failing.
    let max_seconds: Option<u64> = std::env::var("SHOAL_FUZZ_MAX_SECONDS")
        .ok()
        .map(|v| v.parse().expect("SHOAL_FUZZ_MAX_SECONDS is a number"));
    let root = root();
    let manifest = std::fs::read_to_string(root.join("fuzz/Cargo.toml")).expect("fuzz/Cargo.toml");
    let declared = manifest.matches("[[bin]]").count();
    assert_eq!(
        declared,
        TARGETS.len(),
        "every target of fuzz/Cargo.toml is run here"
    );
    for t in TARGETS {
        assert!(
            manifest.contains(&format!("name = \"{t}\"")),
            "{t} in fuzz/Cargo.toml"
        );
    }

    // A short run builds quickly, unoptimised (debug assertions and overflow checks
    // on); a long one optimised, with debug assertions still on.
    let (profile, flags) = if runs > QUICK_RUNS {
        ("release", ["-O", "-a"])
    } else {
        ("debug", ["-D", "-a"])
    };
    let mut build = Command::new("cargo");
    // What `cargo test` sets for this test (its package's manifest directory, name
    // and version, ...) is not the build's: a build script that reads one (ring's
    // reads CARGO_MANIFEST_DIR) would take it for a change from the build
    // `scripts/test-all` ran beforehand, and build everything above it again.
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        if name.starts_with("CARGO_PKG_")
            || name.starts_with("CARGO_BIN_EXE_")
            || [
                "CARGO_MANIFEST_DIR",
                "CARGO_MANIFEST_PATH",
                "CARGO_MANIFEST_LINKS",
                "CARGO_CRATE_NAME",
                "CARGO_PRIMARY_PACKAGE",
                "CARGO_TARGET_TMPDIR",
                "OUT_DIR",
            ]
            .contains(&name.as_ref())
        {
            build.env_remove(name.as_ref());
        }
    }
    let built = build
        .current_dir(&root)
        .args(["fuzz", "build", "-s", "none"])
        .args(flags)
        .status()
        .expect("cargo fuzz (install it: cargo install cargo-fuzz)");
    assert!(built.success(), "cargo fuzz build: {built}");
    let bin_dir = root
        .join("fuzz/target/x86_64-unknown-linux-gnu")
        .join(profile);

    let work = std::env::temp_dir().join(format!("shoal-fuzz-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    // Two targets at a time: one per core of the machines CI runs on.
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..PARALLEL {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let Some(&target) = TARGETS.get(i) else { break };
                    let outcome = run_target(&root, &bin_dir, &work, target, runs, max_seconds);
                    results.lock().expect("the results").push((i, outcome));
                }
            });
        }
    });
    let _ = std::fs::remove_dir_all(&work);
    let mut results = results.into_inner().expect("the results");
    results.sort_by_key(|(i, _)| *i);
    let mut report = Vec::new();
    let mut failures = Vec::new();
    for (_, outcome) in results {
        match outcome {
            Ok(line) => report.push(line),
            Err(e) => failures.push(e),
        }
    }
    eprintln!("fuzz_smoke:\n  {}", report.join("\n  "));
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Runs `target` for `runs` executions from its seeds under `work`; its report line,
/// or why it failed.
fn run_target(
    root: &Path,
    bin_dir: &Path,
    work: &Path,
    target: &str,
    runs: u64,
    max_seconds: Option<u64>,
) -> Result<String, String> {
    let corpus = work.join("corpus").join(target);
    let artifacts = work.join("artifacts").join(target);
    std::fs::create_dir_all(&corpus).map_err(|e| e.to_string())?;
    std::fs::create_dir_all(&artifacts).map_err(|e| e.to_string())?;
    let seeds = seeds(root, target);
    if seeds.is_empty() {
        return Err(format!("{target} has no seeds"));
    }
    for (i, seed) in seeds.iter().enumerate() {
        std::fs::write(corpus.join(format!("seed-{i}")), seed).map_err(|e| e.to_string())?;
    }
    let out = Command::new(bin_dir.join(target))
        .arg(format!("-runs={runs}"))
        .args([
            "-seed=1",
            "-print_final_stats=1",
            "-max_len=4096",
            "-timeout=10",
            "-rss_limit_mb=2048",
            "-use_value_profile=1",
        ])
        .arg(format!("-artifact_prefix={}/", artifacts.display()))
        .arg(format!("-max_total_time={}", max_seconds.unwrap_or(0)))
        .arg(&corpus)
        .output()
        .map_err(|e| format!("{target}: cannot run: {e}"))?;
    let log = String::from_utf8_lossy(&out.stderr);
    let crashes: Vec<PathBuf> = std::fs::read_dir(&artifacts)
        .map_err(|e| e.to_string())?
        .flatten()
        .map(|e| e.path())
        .collect();
    if !out.status.success() || !crashes.is_empty() {
        // Keep what libFuzzer saved: the test's work directory goes.
        let kept: Vec<String> = crashes
            .iter()
            .map(|c| {
                let to = std::env::temp_dir().join(format!(
                    "shoal-fuzz-{target}-{}",
                    c.file_name().and_then(|n| n.to_str()).unwrap_or("input")
                ));
                let _ = std::fs::copy(c, &to);
                to.display().to_string()
            })
            .collect();
        return Err(format!(
            "{target} failed ({}), inputs kept: {kept:?}\n{}",
            out.status,
            tail(&log)
        ));
    }
    let executed = stat(&log, "stat::number_of_executed_units")
        .ok_or_else(|| format!("{target}: no final stats\n{}", tail(&log)))?;
    let per_second = stat(&log, "stat::average_exec_per_sec").unwrap_or(0);
    if executed < runs && max_seconds.is_none() {
        return Err(format!("{target}: {executed} of {runs} runs"));
    }
    Ok(format!(
        "{target}: {executed} executions, {per_second}/s, {} seeds",
        seeds.len()
    ))
}

/// A `stat::name: value` line of libFuzzer's final stats.
fn stat(log: &str, name: &str) -> Option<u64> {
    log.lines().find_map(|l| {
        l.strip_prefix(name)?
            .trim_start_matches(':')
            .trim()
            .parse()
            .ok()
    })
}

fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// The files of fixture directory `dir` whose names start with `prefix`.
fn fixtures(root: &Path, dir: &str, prefix: &str) -> Vec<Vec<u8>> {
    let mut files: Vec<PathBuf> =
        std::fs::read_dir(root.join("components/tests/fixtures").join(dir))
            .expect("the fixtures")
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(prefix) && !n.ends_with(".md"))
            })
            .collect();
    files.sort();
    files
        .iter()
        .map(|p| std::fs::read(p).expect("a fixture"))
        .collect()
}

/// `pieces` joined as the fuzz crate's targets split them: each behind a two-byte
/// big-endian length.
fn framed(pieces: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for p in pieces {
        let len = u16::try_from(p.len()).expect("a piece under 64 KiB");
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(p);
    }
    out
}

/// A connectivity check as a browser sends it.
fn stun_check() -> Vec<u8> {
    let mut buf = BytesMut::new();
    let mut w = StunWriter::new(&mut buf, Class::Request, BINDING, TransactionId([7; 12]));
    w.username(b"nodeufrag:clientufrag")
        .priority(1_853_817_087)
        .ice_controlling(0x0102_0304_0506_0708)
        .use_candidate()
        .message_integrity(b"fuzzpassword")
        .fingerprint();
    w.finish();
    buf.to_vec()
}

/// An Opus packet with the mid, audio level and transport-wide sequence extensions.
fn rtp_packet() -> Vec<u8> {
    let mut buf = BytesMut::new();
    let fields = RtpFields {
        marker: true,
        payload_type: 96,
        sequence_number: 4711,
        timestamp: 90_000,
        ssrc: 0x1234_5678,
    };
    let mut w = RtpWriter::new(&mut buf, &fields, &[0xAABB_CCDD]);
    w.extension(1, b"a").expect("fits");
    w.extension(2, &[0x80 | 30]).expect("fits");
    w.extension(3, &[0x01, 0x02]).expect("fits");
    // A VP8 payload descriptor with a picture id, then a keyframe header.
    w.payload(&[0x90, 0x80, 0x12, 0x34, 0x10, 0x02, 0x00, 0x9d, 0x01, 0x2a]);
    w.finish(0);
    buf.to_vec()
}

/// RTCP as subscribers send it: a receiver report with PLI; with a NACK; with a
/// transport-cc feedback message (draft-holmer-rmcat-transport-wide-cc-extensions-01
/// §3.1: two packets received, one run-length chunk, two small deltas).
fn rtcp_compounds() -> Vec<Vec<u8>> {
    let rr = [0x80, 0xC9, 0x00, 0x01, 0, 0, 0, 1];
    let pli = [0x81, 0xCE, 0x00, 0x02, 0, 0, 0, 1, 0x12, 0x34, 0x56, 0x78];
    let nack = [
        0x81, 0xCD, 0x00, 0x03, 0, 0, 0, 1, 0x12, 0x34, 0x56, 0x78, 0x12, 0x67, 0x00, 0x05,
    ];
    let twcc = [
        0x8F, 0xCD, 0x00, 0x05, 0, 0, 0, 1, 0x12, 0x34, 0x56, 0x78, 0x00, 0x01, 0x00, 0x02, 0x00,
        0x00, 0x10, 0x00, 0x20, 0x02, 0x04, 0x08,
    ];
    [&pli[..], &nack[..], &twcc[..]]
        .iter()
        .map(|fb| [&rr[..], fb].concat())
        .collect()
}

/// The seed corpus of `target`.
fn seeds(root: &Path, target: &str) -> Vec<Vec<u8>> {
    match target {
        "stun" => vec![stun_check()],
        "dtls_records" => fixtures(root, "dtls", "chromium156_client_hello_")
            .into_iter()
            .chain(fixtures(root, "dtls/openssl", ""))
            .collect(),
        "dtls_server" => {
            // Chromium's two-datagram ClientHello (DTLS 1.3 and 1.2), as it sends it.
            let hellos = fixtures(root, "dtls", "chromium156_client_hello_");
            hellos.chunks(2).map(framed).collect()
        }
        "sctp_packet" => fixtures(root, "sctp", ""),
        "sctp_association" => {
            // The chunks of the captured packets (past the 12-byte common header),
            // one packet each, several to an input.
            let chunks: Vec<Vec<u8>> = fixtures(root, "sctp", "built_")
                .into_iter()
                .chain(fixtures(root, "sctp", "assoc_"))
                .filter(|p| p.len() > 12)
                .map(|p| p[12..].to_vec())
                .collect();
            chunks.chunks(3).map(framed).collect()
        }
        "dcep" => fixtures(root, "sctp", "dcep_"),
        "rtp" => vec![rtp_packet()],
        "rtcp" => rtcp_compounds(),
        "sdp" => fixtures(root, "sdp", ""),
        "signal_json" => [
            r#"{"join": {"room": "lobby", "identity": "alice", "name": "Alice"}}"#,
            r#"{"offer": {"sdp": "v=0\r\n"}}"#,
            r#"{"answer": {"sdp": "v=0\r\n"}}"#,
            r#"{"trickle": {"candidate": "candidate:1 1 udp 1 127.0.0.1 9 typ host", "sdpMid": "0"}}"#,
            r#"{"leave": {}}"#,
            r#"{"auth": {"token": "a.b.c"}}"#,
        ]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect(),
        "tcp_framing" => {
            let check = stun_check();
            let mut stream = (check.len() as u16).to_be_bytes().to_vec();
            stream.extend_from_slice(&check);
            stream.extend_from_slice(&[0, 3, 0x16, 0xfe, 0xfd]);
            vec![framed(&[stream[..30].to_vec(), stream[30..].to_vec()])]
        }
        "jwt" => vec![
            // Claims (the target also signs its input as claims), and a whole token
            // signed with another secret.
            br#"{"iss":"fuzzkey","sub":"alice","exp":4102444800,"video":{"roomJoin":true,"room":"room"}}"#.to_vec(),
            b"eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJpc3MiOiJmdXp6a2V5Iiwic3ViIjoiYWxpY2UiLCJleHAiOjQxMDI0NDQ4MDAsInZpZGVvIjp7InJvb21Kb2luIjp0cnVlLCJyb29tIjoicm9vbSJ9fQ.c2lnbmF0dXJl".to_vec(),
        ],
        other => panic!("no seeds for {other}"),
    }
}
