//! `cargo fuzz run dcep`: see [`shoal_fuzz::dcep`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| shoal_fuzz::dcep(data));
