//! The aiortc interop clients: the Python that has aiortc, the scripts in
//! `scripts/interop/`, and their processes, killed if a test ends before they do.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

/// How long a video client has to connect, and a subscriber to get its frames
/// (each script enforces its own; a test allows a margin over it).
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(20);
/// What a test allows over a script's own timeout: interpreter start-up and the
/// report.
pub const MARGIN: Duration = Duration::from_secs(15);

/// The Python with aiortc 1.16: `SHOAL_INTEROP_PYTHON`, else the venv
/// `scripts/test-all` makes.
pub fn python() -> PathBuf {
    let path = std::env::var_os("SHOAL_INTEROP_PYTHON").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/interop-venv/bin/python"),
        PathBuf::from,
    );
    assert!(
        path.exists(),
        "no Python with aiortc at {}: run scripts/test-all, or set SHOAL_INTEROP_PYTHON",
        path.display()
    );
    path
}

/// A command running `scripts/interop/<name>` with [`python`].
pub fn script(name: &str) -> Command {
    let mut command = Command::new(python());
    command.arg(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../scripts/interop")
            .join(name),
    );
    command
}

/// A client process, killed if the test ends before it did.
pub struct Process(pub Child);

impl Drop for Process {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// An `aiortc_video.py` client (publisher or subscriber), killed if the test ends
/// before it did, and the JSON lines it prints.
pub struct VideoClient {
    child: Process,
    lines: mpsc::Receiver<String>,
}

impl VideoClient {
    /// Starts `role` (`publish` or `subscribe`) toward `url` with `args`.
    pub fn start(role: &str, url: &str, args: &[&str]) -> VideoClient {
        let mut child = script("aiortc_video.py")
            .args([role, url])
            .args(["--timeout", &CLIENT_TIMEOUT.as_secs().to_string()])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the aiortc client");
        let stdout = child.stdout.take().expect("its stdout is piped");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        VideoClient {
            child: Process(child),
            lines,
        }
    }

    /// The next JSON line it prints, by `deadline`.
    pub fn next_report(&self, deadline: Instant, what: &str) -> Value {
        let wait = deadline.saturating_duration_since(Instant::now());
        let line = self
            .lines
            .recv_timeout(wait)
            .unwrap_or_else(|e| panic!("{what}: no report ({e})"));
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{what}: not JSON ({e}): {line}"))
    }

    /// The next JSON line it prints by `deadline`, if any.
    pub fn try_report(&self, deadline: Instant) -> Option<Value> {
        let wait = deadline.saturating_duration_since(Instant::now());
        let line = self.lines.recv_timeout(wait).ok()?;
        serde_json::from_str(&line).ok()
    }

    /// Waits for it to exit by `deadline`; true if it succeeded.
    pub fn exit_ok(&mut self, deadline: Instant, what: &str) -> bool {
        loop {
            if let Some(status) = self.child.0.try_wait().expect("poll the client") {
                return status.success();
            }
            assert!(Instant::now() < deadline, "{what} did not exit");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops a publisher: closes its stdin and reads its reports up to `done`
    /// (skipping `receiver_reports` and `amplitude`), which it returns once the
    /// process exited 0.
    pub fn stop_publishing(&mut self) -> Value {
        self.close_stdin();
        let deadline = Instant::now() + MARGIN;
        loop {
            let report = self.next_report(deadline, "publisher");
            if report["event"] == "done" {
                assert!(self.exit_ok(deadline, "the publisher"), "{report}");
                return report;
            }
            assert!(
                report["event"] == "receiver_reports" || report["event"] == "amplitude",
                "publisher: {report}"
            );
        }
    }

    /// Closes its stdin: the publisher's signal to stop.
    pub fn close_stdin(&mut self) {
        self.child.0.stdin = None;
    }
}
