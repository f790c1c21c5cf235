//! `cargo fuzz run sctp_association`: see [`shoal_fuzz::sctp_association`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| shoal_fuzz::sctp_association(data));
