//! The aiortc participant: `scripts/interop/aiortc_room_client.py` as a child process.

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::process::Command;

use super::protocol::Report;

/// The Python client, from this crate's place in the repository.
pub fn client_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../scripts/interop/aiortc_room_client.py")
}

/// How one run of the Python client ended.
#[derive(Debug)]
pub struct AiortcRun {
    /// Its exit status: success when every one of its checks passed.
    pub status: ExitStatus,
    /// Its report, if it printed one.
    pub report: Result<Report, String>,
    /// Its stderr, for failure messages.
    pub stderr: String,
}

/// Runs the client with `python` as participant `identity` of the room behind
/// `whip_url`, exchanging `count` messages; killed if it has not finished within
/// `timeout`.
pub async fn run_aiortc(
    python: &Path,
    whip_url: &str,
    identity: &str,
    count: u64,
    timeout: Duration,
) -> Result<AiortcRun, String> {
    let script = client_script();
    let child = Command::new(python)
        .arg(&script)
        .arg(whip_url)
        .arg(identity)
        .args(["--count", &count.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| {
            format!(
                "cannot start {} {}: {e}",
                python.display(),
                script.display()
            )
        })?;
    // On timeout the future, and with it the child, is dropped: kill_on_drop ends it.
    let output = tokio::time::timeout(timeout, child.wait_with_output())
        .await
        .map_err(|_| format!("the aiortc client ({identity}) did not finish within {timeout:?}"))?
        .map_err(|e| format!("waiting for the aiortc client ({identity}): {e}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    Ok(AiortcRun {
        status: output.status,
        report: Report::from_json_output(&stdout),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    })
}
