//! A shoal node for the interop tests: the `shoal` binary as a child process on
//! ephemeral ports, its addresses read from the lines it prints, and rooms created
//! over its gRPC `RoomService`.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use shoal_proto::v1::room_service_client::RoomServiceClient;
use shoal_proto::v1::{CreateRoomRequest, ListParticipantsRequest};
use tonic::Code;
use tonic::transport::{Channel, Endpoint};

/// How long shoal may take to print its addresses.
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a gRPC connection, and each call, may take.
pub const GRPC_TIMEOUT: Duration = Duration::from_secs(5);
/// Lines of shoal's stderr kept for failure messages.
const STDERR_TAIL: usize = 60;

/// The path in environment variable `var`, which must name an existing file; panics
/// with a message saying what to set otherwise.
pub fn required_file(var: &str, what: &str) -> PathBuf {
    let value = std::env::var_os(var).unwrap_or_else(|| {
        panic!("{var} is not set: point it at {what} (see server/interop/webrtc-rs/README.md)")
    });
    let path = PathBuf::from(value);
    assert!(
        path.is_file(),
        "{var}={} does not exist or is not a file: point it at {what}",
        path.display()
    );
    path
}

/// One address line shoal prints at startup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Listen {
    /// `shoal: grpc http://<addr>`
    Grpc(String),
    /// `shoal: http http://<addr>` (the WHIP endpoint's server)
    Http(String),
}

/// The address a startup line announces, if it is one of the two the tests need.
pub fn parse_listen_line(line: &str) -> Option<Listen> {
    let rest = line.trim_end().strip_prefix("shoal: ")?;
    let (kind, url) = rest.split_once(' ')?;
    if !url.starts_with("http://") || url.contains(char::is_whitespace) {
        return None;
    }
    let url = url.trim_end_matches('/').to_owned();
    match kind {
        "grpc" => Some(Listen::Grpc(url)),
        "http" => Some(Listen::Http(url)),
        _ => None,
    }
}

/// A running `shoal`, killed when dropped.
pub struct ShoalNode {
    child: Child,
    /// `http://<addr>` of the gRPC control plane.
    pub grpc_url: String,
    /// `http://<addr>` of the HTTP server (WHIP).
    pub http_url: String,
    stderr_tail: Arc<Mutex<VecDeque<String>>>,
}

impl ShoalNode {
    /// Starts `bin` on ephemeral UDP, gRPC and HTTP ports of 127.0.0.1 with one shard,
    /// and waits until it has printed its gRPC and HTTP addresses.
    pub fn start(bin: &Path) -> Result<ShoalNode, String> {
        let mut child = Command::new(bin)
            .args([
                "--udp-port-base",
                "0",
                "--grpc-addr",
                "127.0.0.1:0",
                "--http-addr",
                "127.0.0.1:0",
                "--shards",
                "1",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;

        // Both pipes are drained for the whole run, so shoal never blocks on a write.
        let (lines_tx, lines) = mpsc::channel();
        let stdout = child.stdout.take().expect("stdout is piped");
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                eprintln!("[shoal stdout] {line}");
                // The receiver is gone once startup is over; keep draining.
                let _ = lines_tx.send(line);
            }
        });
        let stderr_tail = Arc::new(Mutex::new(VecDeque::new()));
        let stderr = child.stderr.take().expect("stderr is piped");
        let tail = stderr_tail.clone();
        thread::spawn(move || drain_stderr(stderr, &tail));

        let mut node = ShoalNode {
            child,
            grpc_url: String::new(),
            http_url: String::new(),
            stderr_tail,
        };
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        let (mut grpc, mut http) = (None, None);
        while grpc.is_none() || http.is_none() {
            let left = deadline.saturating_duration_since(Instant::now());
            match lines.recv_timeout(left) {
                Ok(line) => match parse_listen_line(&line) {
                    Some(Listen::Grpc(url)) => grpc = Some(url),
                    Some(Listen::Http(url)) => http = Some(url),
                    None => {}
                },
                Err(RecvTimeoutError::Timeout) => {
                    return Err(node.failure(&format!(
                        "shoal printed no `shoal: grpc http://…` and `shoal: http http://…` lines \
                         within {STARTUP_TIMEOUT:?} (grpc: {grpc:?}, http: {http:?}); \
                         does this build serve WHIP (--http-addr)?"
                    )));
                }
                Err(RecvTimeoutError::Disconnected) => {
                    // stdout closed: shoal has exited or is exiting.
                    let status = wait_for_exit(&mut node.child, Duration::from_secs(5));
                    return Err(node.failure(&format!(
                        "shoal exited ({status}) before printing both addresses \
                         (grpc: {grpc:?}, http: {http:?}); does this build take --http-addr?"
                    )));
                }
            }
        }
        node.grpc_url = grpc.expect("loop ends with both");
        node.http_url = http.expect("loop ends with both");
        Ok(node)
    }

    /// The WHIP endpoint of `room` for participant `identity`.
    pub fn whip_url(&self, room: &str, identity: &str) -> String {
        format!("{}/whip/{room}?identity={identity}", self.http_url)
    }

    /// A gRPC `RoomService` client.
    pub async fn rooms(&self) -> Result<RoomServiceClient<Channel>, String> {
        let channel = Endpoint::from_shared(self.grpc_url.clone())
            .map_err(|e| format!("gRPC URL {}: {e}", self.grpc_url))?
            .connect_timeout(GRPC_TIMEOUT)
            .timeout(GRPC_TIMEOUT)
            .connect()
            .await
            .map_err(|e| format!("connect to gRPC at {}: {e}", self.grpc_url))?;
        Ok(RoomServiceClient::new(channel))
    }

    /// Creates room `name` with the node's default settings.
    pub async fn create_room(&self, name: &str) -> Result<(), String> {
        self.rooms()
            .await?
            .create_room(CreateRoomRequest {
                name: name.to_owned(),
                ..CreateRoomRequest::default()
            })
            .await
            .map_err(|e| format!("CreateRoom {name:?}: {e}"))?;
        Ok(())
    }

    /// Waits until room `name` has no participants (or is gone), polling every 100 ms
    /// for at most `timeout`; the identities still in it otherwise.
    pub async fn wait_room_empty(&self, name: &str, timeout: Duration) -> Result<(), String> {
        let mut rooms = self.rooms().await?;
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let request = ListParticipantsRequest {
                room: name.to_owned(),
                ..ListParticipantsRequest::default()
            };
            let left = match rooms.list_participants(request).await {
                Ok(response) => response
                    .into_inner()
                    .participants
                    .into_iter()
                    .map(|p| p.identity)
                    .collect::<Vec<_>>(),
                Err(status) if status.code() == Code::NotFound => Vec::new(),
                Err(status) => return Err(format!("ListParticipants {name:?}: {status}")),
            };
            if left.is_empty() {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(format!(
                    "room {name:?} still has {left:?} {timeout:?} after every participant left"
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// `what`, with the end of shoal's stderr.
    pub fn failure(&self, what: &str) -> String {
        let tail = self.stderr_tail.lock().expect("stderr tail lock");
        let lines: Vec<&str> = tail.iter().map(String::as_str).collect();
        format!(
            "{what}\n--- last lines of shoal's stderr ---\n{}",
            lines.join("\n")
        )
    }
}

impl Drop for ShoalNode {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = wait_for_exit(&mut self.child, Duration::from_secs(5));
    }
}

fn drain_stderr(stderr: impl Read, tail: &Mutex<VecDeque<String>>) {
    for line in BufReader::new(stderr).lines() {
        let Ok(line) = line else { break };
        eprintln!("[shoal stderr] {line}");
        let mut tail = tail.lock().expect("stderr tail lock");
        if tail.len() == STDERR_TAIL {
            tail.pop_front();
        }
        tail.push_back(line);
    }
}

/// The child's exit status once it has exited, polled for at most `timeout`.
fn wait_for_exit(child: &mut Child, timeout: Duration) -> String {
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return status.to_string(),
            Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(20)),
            Ok(None) => return format!("still running after {timeout:?}"),
            Err(e) => return format!("status unknown: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Listen, parse_listen_line};

    #[test]
    fn startup_lines_name_the_addresses() {
        assert_eq!(
            parse_listen_line("shoal: grpc http://127.0.0.1:40411\n"),
            Some(Listen::Grpc("http://127.0.0.1:40411".into()))
        );
        assert_eq!(
            parse_listen_line("shoal: http http://127.0.0.1:8080/"),
            Some(Listen::Http("http://127.0.0.1:8080".into()))
        );
        assert_eq!(parse_listen_line("shoal: grpc off"), None);
        assert_eq!(parse_listen_line("shoal: shard 0 udp 127.0.0.1:7100"), None);
        assert_eq!(
            parse_listen_line("shoal: dtls fingerprint sha-256 AB:CD"),
            None
        );
    }
}
