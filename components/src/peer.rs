//! The peer entity's components: identity, ICE credentials and agent state, and the
//! shard's index from 5-tuple, ufrag and id to entity.

use std::net::SocketAddr;

use bevy_ecs::prelude::{Component, Entity, Resource};

use crate::hash::FastMap;
use crate::net::FiveTuple;
use crate::time::Time;

/// The caller's name for a peer, unique within a shard.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PeerId(pub u64);

/// Marks an entity as a peer and carries its id.
#[derive(Component, Clone, Copy, Debug)]
pub struct Peer {
    /// The caller's name for this peer.
    pub id: PeerId,
}

/// ICE credentials of both ends (RFC 8445 §5.3), from signalling.
#[derive(Component, Clone, Debug, PartialEq, Eq)]
pub struct IceCredentials {
    /// Our ufrag: the part before the colon of USERNAME in checks we receive.
    pub local_ufrag: String,
    /// Our password: the key of MESSAGE-INTEGRITY in checks we receive and answers we send.
    pub local_pwd: String,
    /// The peer's ufrag.
    pub remote_ufrag: String,
    /// The peer's password: the key for checks we send.
    pub remote_pwd: String,
}

/// Our credentials of the ICE session a restart replaced (RFC 8445 §9). Checks
/// with them are still answered (and keep consent on the old path fresh, RFC 7675),
/// so media flows on while the new session comes up; once the peer nominates a pair
/// with the new credentials they are forgotten.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetiringCredentials {
    /// The old local ufrag.
    pub ufrag: String,
    /// The old local password.
    pub pwd: String,
}

/// Which side of ICE this agent plays.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IceRole {
    /// The SFU side: an ICE-lite agent (RFC 8445 §2.5), always controlled; it answers
    /// checks and never sends them.
    Lite,
    /// The client side of simulated and benchmark peers: a full agent in the
    /// controlling role that sends checks and nominates.
    Controlling,
}

/// Where the agent is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IceState {
    /// No valid check yet.
    Checking,
    /// A pair is nominated and consent is fresh.
    Connected,
    /// Consent expired or checks ran out; the peer is being removed.
    Failed,
}

/// Transaction ids of recent accepted checks remembered per peer, to tell a
/// retransmission or a replay from a fresh check.
pub const RECENT_TRANSACTIONS: usize = 8;

/// At most this many paths are remembered as validated per peer: as many as a shard
/// can announce addresses (a client may check, and use, a pair with each).
pub const MAX_VALID_REMOTES: usize = 16;

/// ICE agent state shared by both roles.
#[derive(Component, Clone, Debug)]
pub struct Ice {
    /// Lite (SFU side) or controlling (client side).
    pub role: IceRole,
    /// Where the agent is.
    pub state: IceState,
    /// Our tie-breaker for role conflicts (RFC 8445 §7.1.3).
    pub tie_breaker: u64,
    /// The nominated path, once there is one.
    pub selected: Option<FiveTuple>,
    /// Paths that passed a check, oldest first (bounded by [`MAX_VALID_REMOTES`]).
    pub valid: Vec<FiveTuple>,
    /// When consent was last refreshed (RFC 7675 §5.1).
    pub consent_at: Time,
    /// The latest accepted checks (a ring; see [`RECENT_TRANSACTIONS`]).
    pub recent_transactions: [Option<SeenTransaction>; RECENT_TRANSACTIONS],
    /// Where the next one goes in `recent_transactions`.
    pub recent_next: u8,
    /// The peer has a DTLS session that has not connected yet. Until it has, consent
    /// waits the connect timeout, not RFC 7675's 30 s: no media flows yet, and the
    /// controlling side may still be retrying its nomination (one STUN transaction
    /// retransmits for 39.5 s, RFC 8489 §6.2.1), which would otherwise outlive the
    /// lite side's consent and leave the two sides disagreeing about the session.
    pub awaiting_session: bool,
    /// The credentials of the session an ICE restart replaced, while the new one
    /// has no nominated pair.
    pub retiring: Option<RetiringCredentials>,
}

/// A check the agent accepted: its transaction id, the path it came on, and when.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SeenTransaction {
    /// The STUN transaction id.
    pub tid: [u8; 12],
    /// The path of its first copy.
    pub path: FiveTuple,
    /// When its first copy arrived.
    pub at: Time,
}

/// What a check's transaction id says about it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Freshness {
    /// Not seen before.
    New,
    /// A retransmission: same path, within a transaction's lifetime of the first copy.
    Retransmission,
    /// Seen before on another path, or longer ago than a transaction lives: a replay.
    Replay,
}

impl Ice {
    /// When the peer's consent lapses: the consent timeout after the last valid
    /// check once a pair is nominated and the session is up (RFC 7675 §5.1); before
    /// that, the longer connect timeout, so a client on a lossy path has as long to
    /// get through as its checks keep trying.
    pub fn consent_deadline(&self, limits: &crate::shared::ShardLimits) -> Time {
        match self.state {
            IceState::Connected if !self.awaiting_session => {
                self.consent_at + limits.consent_timeout
            }
            IceState::Failed => self.consent_at + limits.consent_timeout,
            IceState::Checking | IceState::Connected => self.consent_at + limits.connect_timeout,
        }
    }

    /// Classifies a check with `tid` arriving on `path` at `now`, remembering it when
    /// new. `lifetime` is how long a STUN transaction can keep retransmitting.
    pub fn note_transaction(
        &mut self,
        tid: [u8; 12],
        path: FiveTuple,
        now: Time,
        lifetime: std::time::Duration,
    ) -> Freshness {
        if let Some(seen) = self
            .recent_transactions
            .iter()
            .flatten()
            .find(|s| s.tid == tid)
        {
            return if seen.path == path && now < seen.at + lifetime {
                Freshness::Retransmission
            } else {
                Freshness::Replay
            };
        }
        let slot = usize::from(self.recent_next) % RECENT_TRANSACTIONS;
        self.recent_transactions[slot] = Some(SeenTransaction { tid, path, at: now });
        self.recent_next = ((slot + 1) % RECENT_TRANSACTIONS) as u8;
        Freshness::New
    }
}

/// Consent checks that stay matchable at once (4 of them span 16–24 s of round trip).
pub const CONSENT_IN_FLIGHT: usize = 4;

/// A connectivity check in flight, sent by a controlling agent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PendingCheck {
    /// The STUN transaction id.
    pub tid: [u8; 12],
    /// Where it goes.
    pub path: FiveTuple,
    /// Whether it carries USE-CANDIDATE.
    pub nominate: bool,
    /// How many times it has been sent.
    pub transmissions: u32,
    /// When it was last sent.
    pub sent_at: Time,
}

/// The controlling side's own state: what to check, and the check in flight.
#[derive(Component, Clone, Debug)]
pub struct IceControlling {
    /// The shard socket the checks leave from.
    pub local: SocketAddr,
    /// The remote candidates from signalling, in priority order.
    pub remote_candidates: Vec<SocketAddr>,
    /// Index into `remote_candidates` of the candidate being checked.
    pub next_candidate: usize,
    /// When checking started, for the connect budget.
    pub started_at: Time,
    /// The check in flight, if any.
    pub pending: Option<PendingCheck>,
    /// The newest consent checks sent on the selected path, newest last. A response
    /// may answer an earlier request than the latest (RFC 7675 §5.1), so a few stay
    /// matchable.
    pub consent_tids: [Option<[u8; 12]>; CONSENT_IN_FLIGHT],
    /// Our candidate's PRIORITY (RFC 8445 §5.1.2), sent in every check.
    pub priority: u32,
}

/// Lookups from what a datagram carries to the peer that owns it: O(1), never a scan.
#[derive(Resource, Debug, Default)]
pub struct PeerIndex {
    /// Validated paths to their peer.
    pub by_path: FastMap<FiveTuple, Entity>,
    /// Local ufrag (the first half of an incoming check's USERNAME) to peer.
    pub by_ufrag: FastMap<String, Entity>,
    /// The caller's id to peer.
    pub by_id: FastMap<PeerId, Entity>,
    /// Transaction ids of checks we sent, to the peer that sent them.
    pub by_transaction: FastMap<[u8; 12], Entity>,
}
