//! What every pass of a shard may read besides the tables: the shard's random
//! generator, its limits, the DTLS and SCTP set-up its peers share, and the per-peer
//! caps of media. Set once when the shard is made (the generator moves on as it is
//! drawn from); no pass owns them.

use std::sync::Arc;
use std::time::Duration;

use bevy_ecs::prelude::Resource;
use rand_chacha::ChaCha12Rng;
use rand_core::RngCore;

use crate::dtls::{DtlsCertificate, DtlsConfig};
use crate::sctp::Tsn;
use crate::sctp::assoc::SctpLimits;
use crate::sctp::cookie::CookieKey;

/// Tracks one peer may publish (RFC 8843 BUNDLE puts them on one transport; a
/// browser publishes a handful): what negotiation accepts.
pub const MAX_TRACKS_PER_PEER: usize = crate::sdp::MAX_PUBLISHED;
/// Tracks one peer may be sent.
pub const MAX_SUBSCRIPTIONS_PER_PEER: usize = 128;
/// SSRCs of ended subscriptions one peer's SRTP session remembers, so none is sent
/// with again under the same keys. A subscription ends with two (its stream and its
/// RTX), so this allows about 2 000 subscriptions over a session; then no new one
/// is made until the peer connects again (a new DTLS session, new keys), rather
/// than the list growing with churn or an SSRC being reused.
pub const MAX_RETIRED_SSRCS: usize = 4096;
/// Tracks a node-to-node link's peer may publish and be sent: every track of the
/// other node's participants in a cascaded room, and every track of this node's
/// (the most one LinkTracks list may hold).
pub const MAX_LINK_TRACKS: usize = 1024;
/// [`MAX_RETIRED_SSRCS`] for a link's peer, which lives as long as its room spans
/// both nodes: about 32 000 subscriptions over the link's session (a simulcast
/// track's three streams are three), as participants come and go, before it needs
/// new keys (the link is opened again).
pub const MAX_LINK_RETIRED_SSRCS: usize = 65_536;

/// What one peer's media may hold: a participant's, or a link's (larger: a link
/// carries a whole node's share of a cascaded room).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerMediaLimits {
    /// Tracks it may publish.
    pub tracks: usize,
    /// Tracks it may be sent at once.
    pub subscriptions: usize,
    /// SSRCs of ended subscriptions its SRTP session remembers.
    pub retired_ssrcs: usize,
}

impl PeerMediaLimits {
    /// A participant's limits, or a node-to-node link's when `link`.
    pub const fn for_peer(link: bool) -> PeerMediaLimits {
        if link {
            PeerMediaLimits {
                tracks: MAX_LINK_TRACKS,
                // Each stream of a simulcast track is a subscription of its own.
                subscriptions: MAX_LINK_TRACKS * crate::media::MAX_LAYERS,
                retired_ssrcs: MAX_LINK_RETIRED_SSRCS,
            }
        } else {
            PeerMediaLimits {
                tracks: MAX_TRACKS_PER_PEER,
                subscriptions: MAX_SUBSCRIPTIONS_PER_PEER,
                retired_ssrcs: MAX_RETIRED_SSRCS,
            }
        }
    }

    /// SSRCs its SRTP session keeps contexts for at once: each subscription and
    /// its RTX, each published track and its RTX, and shoal's own.
    pub const fn srtp_ssrcs(&self) -> usize {
        2 * self.subscriptions + 2 * self.tracks + 8
    }
}

/// The shard's random generator: ChaCha, so ids are unpredictable off the wire yet
/// reproducible from a seed in simulation.
#[derive(Resource)]
pub struct ShardRng(pub ChaCha12Rng);

impl ShardRng {
    /// 12 random bytes for a STUN transaction id.
    pub fn transaction_id(&mut self) -> [u8; 12] {
        let mut id = [0u8; 12];
        self.0.fill_bytes(&mut id);
        id
    }

    /// A fresh SCTP verification tag (RFC 9260 §5.3.1: random, never 0) and initial
    /// TSN.
    pub fn sctp_tag_and_tsn(&mut self) -> (u32, Tsn) {
        let vtag = loop {
            let v = self.0.next_u32();
            if v != 0 {
                break v;
            }
        };
        (vtag, Tsn(self.0.next_u32()))
    }
}

/// The ICE timeouts the passes read (from the shard's configuration).
#[derive(Resource, Clone, Debug)]
pub struct ShardLimits {
    /// Consent lapses after this long without a valid check (RFC 7675 §5.1: 30 s).
    pub consent_timeout: Duration,
    /// A peer that nominates no path within this long of being added, or of its last
    /// valid check, is removed.
    pub connect_timeout: Duration,
}

/// The DTLS setup every connection of a shard shares.
#[derive(Resource, Clone)]
pub struct ShardDtls {
    /// Handshake parameters.
    pub config: Arc<DtlsConfig>,
    /// The shard's certificate, whose fingerprint signalling hands to peers.
    pub certificate: Arc<DtlsCertificate>,
}

/// What every association of the shard shares.
#[derive(Resource)]
pub struct SctpShared {
    /// The State Cookie secret.
    pub cookie_key: CookieKey,
    /// Buffer and window sizes.
    pub limits: SctpLimits,
}
