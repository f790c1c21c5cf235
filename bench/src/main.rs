//! shoal benchmarks.
fn main() {}
