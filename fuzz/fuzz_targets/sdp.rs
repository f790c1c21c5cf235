//! `cargo fuzz run sdp`: see [`shoal_fuzz::sdp`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| shoal_fuzz::sdp(data));
