//! `shoal-bench sfu-load --kill-after` against three real `shoal` nodes on a real
//! etcd: the owner of a room spread over all three is killed with SIGKILL. The
//! participants on the killed node are cut off, and each joins again through a
//! node still alive and receives media there; those on the other nodes are not cut
//! off at all (a node spanning the room inherits it). The recovery figures belong
//! in bench/README.md, not here; this checks that the benchmark measures a
//! recovery for everyone it cut off, and whom it cut off.

mod shoal_bin;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use shoal_bin::shoal_bin;

/// A single-member etcd on loopback ports, in a directory of its own; killed and
/// deleted when dropped.
struct Etcd {
    child: Child,
    dir: PathBuf,
    client: u16,
}

impl Etcd {
    fn start(dir: PathBuf) -> Etcd {
        let port = || {
            TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("a free port")
                .port()
        };
        let (client, peer) = (port(), port());
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("etcd's directory");
        let (client_url, peer_url) = (
            format!("http://127.0.0.1:{client}"),
            format!("http://127.0.0.1:{peer}"),
        );
        let child = Command::new("etcd")
            .env_clear()
            .arg("--data-dir")
            .arg(dir.join("data"))
            .args(["--listen-client-urls", &client_url])
            .args(["--advertise-client-urls", &client_url])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &format!("default={peer_url}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("etcd starts (Debian package etcd-server)");
        let etcd = Etcd { child, dir, client };
        let by = Instant::now() + Duration::from_secs(30);
        while !etcd.healthy() {
            assert!(Instant::now() < by, "etcd is not healthy in time");
            std::thread::sleep(Duration::from_millis(50));
        }
        etcd
    }

    /// Whether its `GET /health` says so.
    fn healthy(&self) -> bool {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.client)) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        let mut body = String::new();
        s.write_all(b"GET /health HTTP/1.0\r\n\r\n").is_ok()
            && s.read_to_string(&mut body).is_ok()
            && body.contains("\"health\":\"true\"")
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn sfu_load_failover() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("sfu-load-failover");
    let etcd = Etcd::start(dir.join("etcd"));
    let out = dir.join("report");
    let _ = std::fs::remove_dir_all(&out);
    let ttl = 3;
    let output = Command::new(env!("CARGO_BIN_EXE_shoal-bench"))
        .arg("sfu-load")
        .arg("--shoal")
        .arg(shoal_bin())
        .args(["--rooms", "1", "--participants", "4", "--nodes", "3"])
        .args(["--etcd", &format!("http://127.0.0.1:{}", etcd.client)])
        .args(["--lease-ttl", &ttl.to_string(), "--kill-after", "1"])
        .args(["--duration", "12", "--warmup", "2", "--no-pin"])
        .arg("--out")
        .arg(&out)
        .output()
        .expect("shoal-bench runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "sfu-load failed: {}\n{stdout}\n{stderr}",
        output.status
    );
    let report = std::fs::read_to_string(out.join("report.md")).expect("report.md written");
    let failover = report
        .split_once("## Failover")
        .map(|(_, f)| f)
        .unwrap_or_else(|| panic!("no failover section:\n{report}"));
    // Participant p joined through node p mod 3; the killed node's were cut off
    // with it (one row each), the others kept their sessions.
    let killed: usize = failover
        .split_once("Node ")
        .and_then(|(_, rest)| rest.split_once(' '))
        .and_then(|(n, _)| n.parse().ok())
        .unwrap_or_else(|| panic!("which node was killed: {failover}"));
    let rows: Vec<Vec<&str>> = failover
        .lines()
        .filter(|l| l.starts_with("| 0 |"))
        .map(|l| l.trim_matches('|').split('|').map(str::trim).collect())
        .collect();
    let mut participants: Vec<usize> = rows.iter().filter_map(|r| r[1].parse().ok()).collect();
    participants.sort();
    let on_killed: Vec<usize> = (0..4).filter(|p| p % 3 == killed).collect();
    assert_eq!(participants, on_killed, "{failover}");
    assert!(rows.iter().all(|r| r[2] == "its node"), "{failover}");
    for r in &rows {
        let served: f64 = r[4]
            .strip_suffix(" s")
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("participant {} not served again: {failover}", r[1]));
        // Those on other nodes lose the room only when the owner's lease expires.
        assert!(
            served <= f64::from(ttl + 5),
            "participant {} served again after {served} s: {failover}",
            r[1]
        );
    }
    assert!(
        failover.contains(&format!("Bound (TTL + 5 s): {} s, met.", ttl + 5)),
        "{failover}"
    );
}
