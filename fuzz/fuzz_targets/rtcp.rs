//! `cargo fuzz run rtcp`: see [`shoal_fuzz::rtcp`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| shoal_fuzz::rtcp(data));
