//! The `shoal` binary as a child process, for tests that need the real process:
//! its signals, its exit status, its log. Started on ephemeral loopback ports with
//! one shard; stdout is read until the HTTP address is printed, stderr (the log) is
//! collected whole. Dropping the node kills it if it is still running.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

const SHOAL: &str = env!("CARGO_BIN_EXE_shoal");
/// How long the node has to start, and to hand over its log once it exited.
const TIMEOUT: Duration = Duration::from_secs(20);

/// A running `shoal` process.
pub struct Node {
    child: Child,
    /// The HTTP listener's address.
    pub http: SocketAddr,
    /// What it printed on stdout up to its HTTP address (bound addresses).
    pub banner: Vec<String>,
    /// The log so far, and a message once the whole of it is in.
    log: (Arc<Mutex<String>>, mpsc::Receiver<()>),
}

impl Node {
    /// Starts `shoal` with one shard, ephemeral UDP ports, no ICE-TCP (unless
    /// `extra` sets `--tcp-port-base`), gRPC and HTTP on ephemeral loopback ports,
    /// an empty environment, and `extra` flags.
    pub fn start(extra: &[&str]) -> Node {
        Node::start_on(None, "127.0.0.1", extra)
    }

    /// [`Node::start`] inside network namespace `ns` (of the test's network lab),
    /// its sockets bound to `ip` there.
    pub fn start_in(ns: &str, ip: &str, extra: &[&str]) -> Node {
        Node::start_on(Some(ns), ip, extra)
    }

    fn start_on(ns: Option<&str>, ip: &str, extra: &[&str]) -> Node {
        let tcp: &[&str] = if extra.contains(&"--tcp-port-base") {
            &[]
        } else {
            &["--tcp-port-base", "off"]
        };
        let listen = format!("{ip}:0");
        let mut command = match ns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, SHOAL, "--bind", ip]);
                c
            }
            None => Command::new(SHOAL),
        };
        let mut child = command
            .env_clear()
            .args([
                "--shards",
                "1",
                "--udp-port-base",
                "0",
                "--grpc-addr",
                &listen,
                "--http-addr",
                &listen,
            ])
            .args(tcp)
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn shoal");
        let stdout = child.stdout.take().expect("stdout");
        let stderr = child.stderr.take().expect("stderr");
        let (log_tx, log_done) = mpsc::channel();
        let so_far = Arc::new(Mutex::new(String::new()));
        let buffer = so_far.clone();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stderr);
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 0) {
                buffer.lock().expect("the log").push_str(&line);
                line.clear();
            }
            let _ = log_tx.send(());
        });
        let log = (so_far, log_done);
        let (http, banner) = http_addr(stdout);
        Node {
            child,
            http,
            banner,
            log,
        }
    }

    /// The first address after `prefix` in a banner line (`shoal: shard 0 udp `).
    pub fn banner_addr(&self, prefix: &str) -> SocketAddr {
        self.banner
            .iter()
            .find_map(|l| l.strip_prefix(prefix))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("no {prefix:?} in {:?}", self.banner))
    }

    /// Sends the process `signal`.
    pub fn signal(&self, signal: nix::sys::signal::Signal) {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(self.child.id()).expect("a pid"));
        nix::sys::signal::kill(pid, signal).expect("signal shoal");
    }

    /// The exit status if the process has exited.
    pub fn try_status(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().expect("poll shoal")
    }

    /// Waits for the process to exit, at most `limit`.
    pub fn wait(&mut self, limit: Duration) -> ExitStatus {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().expect("poll shoal") {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "shoal still runs after {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The whole log (stderr), once the process has exited.
    pub fn log(&self) -> String {
        // A second call finds the reader gone, and the log whole.
        if let Err(mpsc::RecvTimeoutError::Timeout) = self.log.1.recv_timeout(TIMEOUT) {
            panic!("the process still logs after {TIMEOUT:?}");
        }
        self.log_so_far()
    }

    /// What the process has logged (stderr) so far, whole lines only.
    pub fn log_so_far(&self) -> String {
        self.log.0.lock().expect("the log").clone()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Reads the node's stdout until it prints its HTTP address (HTTP or HTTPS); that
/// and the lines before it.
fn http_addr(stdout: std::process::ChildStdout) -> (SocketAddr, Vec<String>) {
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + TIMEOUT;
    let mut banner = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = lines.recv_timeout(left).expect("shoal starts");
        if let Some(addr) = line
            .strip_prefix("shoal: http http://")
            .or_else(|| line.strip_prefix("shoal: http https://"))
        {
            return (addr.trim().parse().expect("an address"), banner);
        }
        banner.push(line);
    }
}
