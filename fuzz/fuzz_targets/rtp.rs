//! `cargo fuzz run rtp`: see [`shoal_fuzz::rtp`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| shoal_fuzz::rtp(data));
