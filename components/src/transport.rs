//! A peer's secured transport as components: its DTLS session (role, pinned
//! fingerprint, the connection once started, what it exported) and the SRTP contexts
//! keyed from it. The dtls pass starts and drives the session; `sctp_tx` and closing a
//! peer seal records through it; `srtp_in` and `egress` use the SRTP contexts.

use bevy_ecs::prelude::Component;

use crate::dtls::{CipherSuite, DtlsConn, DtlsRole, SrtpKeys};
use crate::net::FiveTuple;
use crate::shared::PeerMediaLimits;
use crate::srtp::{SrtpConfig, SrtpSession};
use crate::tick::Outbox;

/// A peer's DTLS: its role and expected fingerprint from signalling, the connection
/// once started, and the SRTP keys once it is authenticated.
#[derive(Component)]
pub struct DtlsSession {
    /// Which side of the handshake shoal plays for this peer.
    pub role: DtlsRole,
    /// SHA-256 of the certificate the peer must present (its SDP `a=fingerprint`).
    pub remote_fingerprint: [u8; 32],
    /// The connection, boxed: it is large and most of a peer's rows are touched
    /// without it.
    pub conn: Option<Box<DtlsConn>>,
    /// Where records go while no path is selected.
    pub reply_path: Option<FiveTuple>,
    /// Keys exported for SRTP (RFC 5764 §4.2), once connected.
    pub srtp: Option<SrtpKeys>,
    /// The negotiated cipher suite, once connected.
    pub suite: Option<CipherSuite>,
    /// The handshake must agree an SRTP profile (the peer's SDP has media).
    pub srtp_required: bool,
    /// What the peer's media may hold once its SRTP is keyed.
    pub media_limits: PeerMediaLimits,
}

impl DtlsSession {
    /// A session that has not started.
    pub fn new(role: DtlsRole, remote_fingerprint: [u8; 32]) -> DtlsSession {
        DtlsSession {
            role,
            remote_fingerprint,
            conn: None,
            reply_path: None,
            srtp: None,
            suite: None,
            srtp_required: false,
            media_limits: PeerMediaLimits::for_peer(false),
        }
    }

    /// Where the session's records go: the selected path, or before there is one,
    /// the path the peer's DTLS last came from.
    pub fn path(&self, selected: Option<FiveTuple>) -> Option<FiveTuple> {
        selected.or(self.reply_path)
    }

    /// Whether the handshake has completed and authenticated the peer.
    pub fn is_connected(&self) -> bool {
        self.conn.as_deref().is_some_and(DtlsConn::is_connected)
    }
}

/// Moves every datagram a connection sealed into the outbox, on `path`; without a
/// path there is nowhere to send them.
pub fn flush_sealed(conn: &mut DtlsConn, path: Option<FiveTuple>, out: &mut Outbox) {
    while let Some(payload) = conn.poll_transmit() {
        out.push_on(path, payload);
    }
}

/// Who shoal's own RTCP in one peer's session comes from: the SSRC of its reports and
/// feedback, and the CNAME its SDES gives that SSRC (RFC 3550 §6.1: "An SDES packet
/// containing a CNAME item MUST be included in each compound RTCP packet").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RtcpSender {
    /// The sender SSRC.
    pub ssrc: u32,
    /// The CNAME: 32 lower-case hex digits of 128 random bits drawn for the session
    /// (RFC 7022 §4.1 lets an endpoint choose a name per session, and §5 makes one
    /// from a random number; nothing of shoal's is synchronised with it).
    pub cname: [u8; 32],
}

impl RtcpSender {
    /// For a peer without SRTP keys, whose RTCP cannot go out anyway.
    pub const UNKEYED: RtcpSender = RtcpSender {
        ssrc: 1,
        cname: [b'0'; 32],
    };

    /// SSRC `ssrc` (0 is taken as 1) named by the hex digits of `name`.
    pub fn new(ssrc: u32, name: u128) -> RtcpSender {
        let mut cname = [0u8; 32];
        for (i, c) in cname.iter_mut().enumerate() {
            let nibble = (name >> (124 - 4 * i)) & 0xf;
            *c = b"0123456789abcdef"[nibble as usize];
        }
        RtcpSender {
            ssrc: ssrc.max(1),
            cname,
        }
    }
}

/// A peer's SRTP contexts (from its DTLS-SRTP export) and who shoal's own RTCP on
/// that session comes from.
#[derive(Component)]
pub struct PeerSrtp {
    /// Both directions.
    pub session: SrtpSession,
    /// shoal's RTCP sender in this session.
    pub rtcp: RtcpSender,
}

impl PeerSrtp {
    /// Contexts keyed from `keys` for shoal's DTLS `role`. Retransmissions go as RTX
    /// (new indices), so the sender never protects an index twice.
    pub fn new(
        keys: &SrtpKeys,
        role: DtlsRole,
        rtcp: RtcpSender,
        limits: PeerMediaLimits,
    ) -> Option<PeerSrtp> {
        // Room for every SSRC a peer may be sent at once (a subscription and its
        // RTX) and its own, with the ones of ended subscriptions forgotten.
        let config = SrtpConfig {
            max_ssrcs: limits.srtp_ssrcs(),
            ..SrtpConfig::default()
        };
        let session = SrtpSession::new(keys, role, config).ok()?;
        Some(PeerSrtp { session, rtcp })
    }
}
