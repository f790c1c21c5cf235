//! Shared by the interop tests of this crate: a shoal node as a child process
//! ([`node`]), the room protocol of `scripts/interop/aiortc_room_client.py`
//! ([`protocol`]), a WHIP client ([`whip`]), the webrtc-rs participant
//! ([`participant`]) and the aiortc one ([`aiortc`]).

// Each test binary uses only part of this module.
#![allow(dead_code)]

pub mod aiortc;
pub mod node;
pub mod participant;
pub mod protocol;
pub mod whip;
