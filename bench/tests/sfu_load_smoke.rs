//! `shoal-bench sfu-load` against a real `shoal`, in both signalling modes and with
//! simulcast publishers: two rooms of four for five seconds complete, every peer
//! connects, and the report and plots are written with packets and latency
//! percentiles (through the node and end to end) in them. The figures belong in the benchmark report (bench/README.md), not
//! here.

mod shoal_bin;

use shoal_bin::shoal_bin;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The cells of the report's first table row.
fn first_row(report: &str) -> Vec<String> {
    let row = report
        .lines()
        .skip_while(|l| !l.starts_with("|---"))
        .nth(1)
        .unwrap_or_else(|| panic!("no table row in the report:\n{report}"));
    row.trim_matches('|')
        .split('|')
        .map(|c| c.trim().to_owned())
        .collect()
}

fn number(cell: &str) -> f64 {
    cell.split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("not a number: {cell:?}"))
}

fn run(mode: &str, extra: &[&str], out: &Path) {
    let _ = std::fs::remove_dir_all(out);
    let output = Command::new(env!("CARGO_BIN_EXE_shoal-bench"))
        .arg("sfu-load")
        .arg("--shoal")
        .arg(shoal_bin())
        .args(["--signal", mode, "--rooms", "2", "--participants", "4"])
        .args(["--duration", "5", "--warmup", "2"])
        .args(extra)
        .arg("--out")
        .arg(out)
        .output()
        .expect("shoal-bench runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{mode}: sfu-load failed: {}\n{stdout}\n{stderr}",
        output.status
    );
    let report = std::fs::read_to_string(out.join("report.md")).expect("report.md written");
    // Every peer connected and no join failed (both would name themselves here).
    assert!(
        report.contains(" 0 peers failed") && !report.contains("join failed"),
        "{mode}: joins failed:\n{report}"
    );
    let row = first_row(&report);
    assert_eq!(row[0], "2", "{mode}: rooms");
    assert_eq!(row[1], "8", "{mode}: participants");
    let received = number(&row[3]);
    assert!(received > 0.0, "{mode}: no packets received:\n{report}");
    // Through the node (P50 … max), then end to end (P50 / P99 / P99.99).
    let percentiles: Vec<f64> = row[4..9].iter().map(|c| number(c)).collect();
    assert!(
        percentiles.iter().all(|&p| p > 0.0) && percentiles.windows(2).all(|w| w[0] <= w[1]),
        "{mode}: latency percentiles {percentiles:?}:\n{report}"
    );
    let end_to_end: Vec<f64> = row[9].split('/').map(number).collect();
    assert!(
        end_to_end.len() == 3
            && end_to_end.iter().all(|&p| p > 0.0)
            && end_to_end.windows(2).all(|w| w[0] <= w[1]),
        "{mode}: end-to-end percentiles {end_to_end:?}:\n{report}"
    );
    // Every received packet was matched to when its publisher sent it.
    assert!(
        report.contains("(0 without a wire time,"),
        "{mode}: packets without a wire time:\n{report}"
    );
    for plot in ["latency.png", "cpu.png", "latency-cdf.png"] {
        let bytes = std::fs::read(out.join(plot)).unwrap_or_else(|e| panic!("{mode}: {plot}: {e}"));
        assert!(
            bytes.starts_with(b"\x89PNG\r\n\x1a\n") && bytes.len() > 1000,
            "{mode}: {plot} is not a plot"
        );
        assert!(
            report.contains(&format!("]({plot})")),
            "{mode}: {plot} not in the report"
        );
    }
}

#[test]
fn sfu_load_smoke() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("sfu-load-smoke");
    run("signal", &[], &dir.join("signal"));
    run("whip", &[], &dir.join("whip"));
    // Every packet of every simulcast stream the node forwarded is matched to its
    // publisher's send (the wire-time check in `run`), and the report says so.
    let simulcast = dir.join("simulcast");
    run("signal", &["--simulcast"], &simulcast);
    let report = std::fs::read_to_string(simulcast.join("report.md")).expect("report.md");
    assert!(report.contains("three simulcast streams"), "{report}");
}
