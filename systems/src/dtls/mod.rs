//! The dtls pass.

pub mod pass;
