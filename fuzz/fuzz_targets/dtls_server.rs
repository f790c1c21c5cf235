//! `cargo fuzz run dtls_server`: see [`shoal_fuzz::dtls_server`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| shoal_fuzz::dtls_server(data));
