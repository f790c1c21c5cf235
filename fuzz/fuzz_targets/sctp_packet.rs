//! `cargo fuzz run sctp_packet`: see [`shoal_fuzz::sctp_packet`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| shoal_fuzz::sctp_packet(data));
