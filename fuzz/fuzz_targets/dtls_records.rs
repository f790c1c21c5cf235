//! `cargo fuzz run dtls_records`: see [`shoal_fuzz::dtls_records`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| shoal_fuzz::dtls_records(data));
