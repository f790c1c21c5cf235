//! `cargo fuzz run tcp_framing`: see [`shoal_fuzz::tcp_framing`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| shoal_fuzz::tcp_framing(data));
