//! `cargo fuzz run jwt`: see [`shoal_fuzz::jwt`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| shoal_fuzz::jwt(data));
