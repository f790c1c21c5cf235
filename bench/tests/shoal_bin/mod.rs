//! The `shoal` binary the bench tests run against.

use std::path::{Path, PathBuf};

/// The `shoal` binary built beside `shoal-bench` (`cargo test --workspace` builds
/// both), or `SHOAL_BIN`.
pub fn shoal_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("SHOAL_BIN") {
        return PathBuf::from(p);
    }
    let bench = Path::new(env!("CARGO_BIN_EXE_shoal-bench"));
    let shoal = bench.with_file_name("shoal");
    assert!(
        shoal.exists(),
        "{} is missing: build it first (cargo test --workspace, or cargo build -p shoal-server), or set SHOAL_BIN",
        shoal.display()
    );
    shoal
}
