//! Acceptance: a node without API keys runs open only while its HTTP and gRPC
//! listeners are on loopback addresses. With a listener on 0.0.0.0 it refuses to
//! start (non-zero exit, a message that names the fix); it starts with
//! `--insecure-open`, and with a key given as a flag, in `SHOAL_API_KEY`, in a keys
//! file or in the TOML file. A bad key is refused without its secret in the message.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const SHOAL: &str = env!("CARGO_BIN_EXE_shoal");
const START_TIMEOUT: Duration = Duration::from_secs(10);
const SECRET: &str = "a-secret-of-thirty-two-or-more-characters";

/// Kills the child if the test ends (or panics) before it exited.
struct ChildGuard(Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// `shoal` on ephemeral ports, HTTP on every interface, with no `SHOAL_*`
/// variables from the environment.
fn shoal(extra: &[&str]) -> Command {
    let mut cmd = Command::new(SHOAL);
    for (var, _) in std::env::vars() {
        if var.starts_with("SHOAL_") {
            cmd.env_remove(var);
        }
    }
    cmd.args([
        "--shards",
        "1",
        "--udp-port-base",
        "0",
        "--tcp-port-base",
        "off",
    ]);
    // Unless `extra` says otherwise: gRPC on loopback, HTTP on every interface.
    for (flag, addr) in [("--grpc-addr", "127.0.0.1:0"), ("--http-addr", "0.0.0.0:0")] {
        if !extra.contains(&flag) {
            cmd.args([flag, addr]);
        }
    }
    cmd.args(extra);
    cmd
}

/// Runs `cmd` to its end (it must end by itself, in time).
fn refused(mut cmd: Command) -> Output {
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn shoal");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    rx.recv_timeout(START_TIMEOUT)
        .expect("shoal exits by itself")
        .expect("its output")
}

/// Starts `cmd` and waits until it prints its HTTP address; returns the auth line
/// it printed.
fn starts(mut cmd: Command) -> String {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn shoal");
    let stdout = child.stdout.take().expect("piped stdout");
    let guard = ChildGuard(child);
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + START_TIMEOUT;
    let mut auth = None;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = lines.recv_timeout(left).expect("shoal starts");
        if line.starts_with("shoal: auth ") {
            auth = Some(line.clone());
        }
        if line.starts_with("shoal: http http://") {
            break;
        }
    }
    drop(guard);
    auth.expect("an auth line")
}

#[test]
fn open_mode_only_on_loopback() {
    // No key, a listener others can reach: refused, saying why and how.
    let out = refused(shoal(&[]));
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    for needle in ["0.0.0.0", "not a loopback", "--api-key", "--insecure-open"] {
        assert!(stderr.contains(needle), "{needle:?} in {stderr}");
    }
    assert!(out.stdout.is_empty(), "nothing started: {:?}", out.stdout);

    // The same with gRPC on every interface.
    let out = refused(shoal(&[
        "--http-addr",
        "127.0.0.1:0",
        "--grpc-addr",
        "0.0.0.0:0",
    ]));
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("gRPC listens on 0.0.0.0"), "{stderr}");

    // Asked for explicitly, it runs open.
    assert_eq!(
        starts(shoal(&["--insecure-open"])),
        "shoal: auth open (no API key)"
    );
    // On loopback only, open is the default.
    let loopback = starts(shoal(&["--http-addr", "127.0.0.1:0"]));
    assert_eq!(loopback, "shoal: auth open (no API key)");

    // A key: as a flag, from the environment, from a keys file, from the TOML file.
    let key = format!("devkey:{SECRET}");
    let line = starts(shoal(&["--api-key", &key]));
    assert_eq!(line, "shoal: auth access tokens of API keys devkey");
    assert!(!line.contains(SECRET));
    let mut cmd = shoal(&[]);
    cmd.env("SHOAL_API_KEY", &key);
    assert_eq!(starts(cmd), "shoal: auth access tokens of API keys devkey");
    let dir = std::env::temp_dir().join(format!("shoal-open-mode-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let keys = dir.join("keys.yaml");
    std::fs::write(&keys, format!("# keys\nfilekey: {SECRET}\n")).unwrap();
    let keys_arg = keys.to_str().unwrap();
    assert_eq!(
        starts(shoal(&["--api-keys-file", keys_arg])),
        "shoal: auth access tokens of API keys filekey"
    );
    let toml = dir.join("shoal.toml");
    std::fs::write(&toml, format!("api-key = [\"tomlkey:{SECRET}\"]\n")).unwrap();
    assert_eq!(
        starts(shoal(&["--config", toml.to_str().unwrap()])),
        "shoal: auth access tokens of API keys tomlkey"
    );
    let toml_open = dir.join("open.toml");
    std::fs::write(&toml_open, "insecure-open = true\n").unwrap();
    assert_eq!(
        starts(shoal(&["--config", toml_open.to_str().unwrap()])),
        "shoal: auth open (no API key)"
    );

    // A short secret, and a keys file with a bad line: refused, the secret unshown.
    let out = refused(shoal(&["--api-key", "devkey:tooshort-secret"]));
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("32"), "{stderr}");
    assert!(!stderr.contains("tooshort-secret"), "{stderr}");
    std::fs::write(&keys, "fine: tooshort-secret\n").unwrap();
    let out = refused(shoal(&["--api-keys-file", keys_arg]));
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(":1:"), "{stderr}");
    assert!(!stderr.contains("tooshort-secret"), "{stderr}");
    std::fs::remove_dir_all(&dir).unwrap();
}
