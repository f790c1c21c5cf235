//! DTLS 1.2 (RFC 6347 over RFC 5246) with DTLS-SRTP keying (RFC 5764), both roles, as a
//! sans-I/O state machine: [`DtlsConn`] takes datagrams and the time, and hands out
//! datagrams, events and its next deadline. It never reads a clock or a socket.
//!
//! What it speaks is what WebRTC needs: ECDHE_ECDSA with AES-GCM (0xC02B, 0xC02C) over
//! X25519 or P-256, ECDSA certificates pinned by their SHA-256 fingerprint, mutual
//! authentication (the server always sends CertificateRequest), the extended master
//! secret (required: a peer without it is refused with handshake_failure), use_srtp,
//! and the EXTRACTOR-dtls_srtp exporter. Handshake messages are fragmented to the MTU
//! and reassembled with bounded buffers; flights are retransmitted with exponential
//! back-off (§4.2.4) and when the peer retransmits its whole last flight (within a
//! budget of `max_retransmits` per flight, which also bounds the server's answers after
//! the handshake; those stop at the peer's first application data); protected records
//! pass a 64-record anti-replay window (§4.1.2.6); records that fail authentication are
//! dropped silently and counted (§4.1.2.7). No renegotiation, no resumption.
//!
//! `crypto` holds the arithmetic (PRF, AEAD records, ECDHE, ECDSA); the wire formats are
//! the parent module, [`crate::dtls`].
//!
//! # Driving a connection
//!
//! - Feed every DTLS datagram (RFC 7983 first byte 20..63) to
//!   [`DtlsConn::handle_datagram`], call [`DtlsConn::handle_timeout`] when
//!   [`DtlsConn::poll_timeout`] falls due (only while handshaking), then drain
//!   [`DtlsConn::poll_transmit`] and [`DtlsConn::poll_event`].
//! - Errors: a record that is malformed, fails authentication, is replayed or comes at
//!   the wrong time is dropped and counted ([`DtlsConn::stats`]); `handle_datagram`
//!   still returns `Ok`. It returns `Err` only when that datagram made the handshake
//!   fail; the same error is then queued as [`DtlsEvent::Failed`] and the fatal alert is
//!   queued for sending. A peer's close_notify or fatal alert gives
//!   [`DtlsEvent::Closed`]. After either, [`DtlsConn::is_closed`] is true and the
//!   connection ignores input.
//! - Allocation: records are sealed in place into one send buffer and opened in place in
//!   one receive buffer; each datagram or application-data payload handed out is a
//!   `Bytes` slice of those buffers, which grow by 16 KiB chunks and are reclaimed when
//!   the slices are dropped. So there is no allocation per record in steady state, only
//!   per chunk (and none when the caller drops the `Bytes` before the chunk is used
//!   up). The handshake allocates freely; its state is dropped when it completes.
//! - The handshake timeout runs from [`DtlsConn::new`], for the server too: create the
//!   server side when ICE has selected a path.
//!
//! # Memory per peer
//!
//! What a peer can make one connection hold, at most, while handshaking:
//!
//! - partial handshake messages: [`MAX_BUFFERED_BYTES`], 64 KiB of bodies, with at
//!   most 8 × 32 received ranges (4 KiB);
//! - the peer's last flight, to recognise its retransmission: at most 8 messages ×
//!   32 ranges (4 KiB);
//! - the handshake log that signatures and Finished cover: 64 KiB (`MAX_LOG_BYTES`).
//!   As client, the server's flight can fill it; as server, the client's messages
//!   (each at most [`MAX_MESSAGE_LEN`]) come to about 35 KiB;
//! - epoch-1 records that came early: 8 records, 16 KiB;
//! - the receive buffer: one 16 KiB chunk (more only while the caller keeps
//!   `ApplicationData` slices);
//! - our flight, kept for retransmission (about 2 KiB), and its datagrams in one
//!   16 KiB send chunk.
//!
//! That is about 64 + 8 + 64 + 16 + 16 + 16 ≈ 184 KiB, and the handshake's share (all
//! but the two buffer chunks, about 150 KiB) is freed when it completes. After the
//! handshake the two chunks remain, plus what the caller lets queue: up to
//! [`MAX_QUEUED_BYTES`] (256 KiB) of unsent application data if it does not drain
//! [`DtlsConn::poll_transmit`], and its undrained events.

mod client;
mod connection;
pub mod crypto;
mod error;
mod handshake;

mod reassembly;
mod replay;
mod send;
mod server;

use std::time::Duration;

use bytes::Bytes;

pub use connection::DtlsConn;
pub use crypto::{CipherSuite, DtlsCertificate, NamedGroup, SrtpKeys, SrtpProfile};
pub use error::DtlsError;
pub use reassembly::{MAX_BUFFERED_BYTES, MAX_FUTURE_MESSAGES, MAX_MESSAGE_LEN};
pub use replay::{REPLAY_WINDOW, ReplayWindow};
pub use send::MAX_QUEUED_BYTES;

/// Which end of the handshake this connection is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DtlsRole {
    /// Sends ClientHello (SDP `a=setup:active`).
    Client,
    /// Answers it (SDP `a=setup:passive`).
    Server,
}

/// What a connection offers and how patient it is. Shared by every connection of a
/// shard behind an `Arc`.
#[derive(Clone, Debug)]
pub struct DtlsConfig {
    /// The largest datagram sent; handshake messages are fragmented to fit (RFC 6347
    /// §4.1.1.1). At least 256.
    pub mtu: usize,
    /// Cipher suites in preference order (the server picks its first that the client
    /// offers).
    pub cipher_suites: Vec<CipherSuite>,
    /// ECDHE groups in preference order.
    pub groups: Vec<NamedGroup>,
    /// SRTP protection profiles in preference order; the server picks its first that
    /// the client offers. Empty: use_srtp is neither offered nor accepted.
    pub srtp_profiles: Vec<SrtpProfile>,
    /// Server: answer a ClientHello without a valid cookie with HelloVerifyRequest
    /// (RFC 6347 §4.2.1). WebRTC paths are already validated by ICE, so off by default.
    pub hello_verify: bool,
    /// The first retransmission timeout (RFC 6347 §4.2.4.1: 1 s).
    pub retransmit_initial: Duration,
    /// The retransmission timeout stops doubling here. RFC 6347 §4.2.4.1 says it
    /// SHOULD grow to no less than 60 s; shoal's default stops at 8 s, because its
    /// paths are ICE-validated and consent-checked (a dead path is detected there),
    /// and a 60 s back-off leaves a handshake over a lossy link only five or six
    /// tries within any bound a user waits for. Doubling from 1 s is kept.
    pub retransmit_max: Duration,
    /// Retransmissions of one flight before the handshake fails.
    pub max_retransmits: u32,
    /// The whole handshake must complete within this much time from `new`.
    pub handshake_timeout: Duration,
}

impl Default for DtlsConfig {
    fn default() -> Self {
        DtlsConfig {
            mtu: 1200,
            cipher_suites: vec![
                CipherSuite::EcdheEcdsaAes128GcmSha256,
                CipherSuite::EcdheEcdsaAes256GcmSha384,
            ],
            groups: vec![NamedGroup::X25519, NamedGroup::Secp256r1],
            srtp_profiles: vec![
                SrtpProfile::AeadAes128Gcm,
                SrtpProfile::AeadAes256Gcm,
                SrtpProfile::Aes128CmHmacSha1_80,
            ],
            hello_verify: false,
            retransmit_initial: Duration::from_secs(1),
            retransmit_max: Duration::from_secs(8),
            max_retransmits: 12,
            handshake_timeout: Duration::from_secs(60),
        }
    }
}

/// What a connection tells its owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DtlsEvent {
    /// The handshake completed and the peer is authenticated.
    Connected {
        /// The negotiated cipher suite.
        suite: CipherSuite,
        /// The SRTP keys (RFC 5764 §4.2), when use_srtp was negotiated.
        srtp: Option<SrtpKeys>,
        /// The SHA-256 fingerprint of the peer's certificate (equal to the one the
        /// connection was given).
        peer_fingerprint: [u8; 32],
    },
    /// One decrypted application_data record.
    ApplicationData(Bytes),
    /// The connection is closed: by the peer's close_notify or fatal alert (its
    /// description here), or by [`DtlsConn::close`] (`None`).
    Closed {
        /// The description of the peer's alert that closed the connection.
        alert: Option<u8>,
    },
    /// The handshake or the connection failed on our side; the fatal alert, if the
    /// failure has one, was sent.
    Failed(DtlsError),
}

/// Counters of what a connection received, dropped and sent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DtlsStats {
    /// Records received (well-framed).
    pub records_received: u64,
    /// Datagrams whose framing broke; the rest of such a datagram is dropped.
    pub records_malformed: u64,
    /// Protected records that failed authentication, dropped (RFC 6347 §4.1.2.7).
    pub records_bad_tag: u64,
    /// Protected records refused by the anti-replay window.
    pub records_replayed: u64,
    /// Records of an unknown epoch or of a type not acceptable at that moment.
    pub records_unexpected: u64,
    /// Epoch-1 records kept until their keys or the Finished message arrived.
    pub records_early_buffered: u64,
    /// Epoch-1 records dropped because the early buffer was full.
    pub records_early_dropped: u64,
    /// Handshake fragments that did not parse, that a reassembly bound refused, that
    /// are old but not of the peer's last flight, or that are ignored (a HelloRequest
    /// at a client while handshaking, a ClientHello numbered near the end of the
    /// record sequence space).
    pub handshake_fragments_dropped: u64,
    /// Flights retransmitted because the timer fired.
    pub retransmits_timer: u64,
    /// Flights retransmitted because the peer retransmitted its whole last flight.
    pub retransmits_peer: u64,
    /// HelloVerifyRequests sent (server) or answered (client).
    pub hello_verify_requests: u64,
    /// Handshake fragments received that were not a whole message (RFC 6347 §4.2.3).
    pub handshake_partial_fragments: u64,
    /// Alerts sent.
    pub alerts_sent: u64,
    /// Datagrams handed to the caller.
    pub datagrams_sent: u64,
}
