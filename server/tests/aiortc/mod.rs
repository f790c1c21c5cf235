//! The aiortc interop clients: the Python that has aiortc, the scripts in
//! `scripts/interop/`, and their processes, killed if a test ends before they do.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Child, Command};

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
