//! The SCTP passes.

pub mod pass;
