//! `cargo fuzz run stun`: see [`shoal_fuzz::stun`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| shoal_fuzz::stun(data));
