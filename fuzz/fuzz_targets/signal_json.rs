//! `cargo fuzz run signal_json`: see [`shoal_fuzz::signal_json`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| shoal_fuzz::signal_json(data));
