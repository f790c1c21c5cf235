//! What the owner asks of a shard: [`Command`], and adding a peer (its components,
//! first timer and index entries).

use std::net::SocketAddr;

use bevy_ecs::prelude::*;
use bytes::Bytes;
use rand_core::RngCore;
use shoal_components::datachannel::DataChannels;
use shoal_components::dtls::DtlsRole;
use shoal_components::media::{SubscriptionSpec, TrackId, TrackSettings, TrackSpec};
use shoal_components::peer::{
    Ice, IceControlling, IceCredentials, IceRole, IceState, Peer, PeerId, PeerIndex,
    RetiringCredentials,
};
use shoal_components::relay::RelayClosing;
use shoal_components::room::RoomId;
use shoal_components::sctp::assoc::{DEFAULT_SCTP_PORT, Sctp};
use shoal_components::shared::{PeerMediaLimits, ShardRng};
use shoal_components::stats::ShardStats;
use shoal_components::tick::Now;
use shoal_components::time::Time;
use shoal_components::timer::{TimerHeap, TimerKind, Timers};
use shoal_components::transport::DtlsSession;

use super::Shard;
use crate::passes::ice;
use crate::peer;

/// A peer to add: its id, role and the ICE credentials of both ends from signalling.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerSpec {
    /// The caller's name for the peer, unique in the shard.
    pub id: PeerId,
    /// Lite for the SFU side, controlling for a client endpoint.
    pub role: IceRole,
    /// Both ends' ufrags and passwords.
    pub credentials: IceCredentials,
    /// Controlling role only: where to send checks, in priority order.
    pub remote_candidates: Vec<SocketAddr>,
    /// DTLS for this peer, if it runs any: shoal's role (from `a=setup`) and the
    /// peer's certificate fingerprint (from `a=fingerprint`).
    pub dtls: Option<PeerDtls>,
    /// The room the peer joins, if any: its data-channel messages are relayed to
    /// the room's other members instead of being reported to the owner.
    pub room: Option<RoomId>,
    /// Whether the peer's data-channel messages are taken. False (a participant
    /// without the canPublishData grant): its channels open and receive, and what it
    /// sends on them is dropped and counted (`ShardStats::data_messages_refused`).
    pub may_send_data: bool,
    /// The peer is a node-to-node link of `room` (a cascade): what the other node's
    /// members send arrives on it and goes to this shard's members and siblings,
    /// never out on another link, and what this node's members send goes out on it.
    /// So a room message crosses at most one link between nodes. Ignored without
    /// `room`.
    pub link: bool,
}

/// The DTLS half of a peer's signalling.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerDtls {
    /// Client or server: shoal answers a browser's `actpass` as `passive` (server).
    pub role: DtlsRole,
    /// SHA-256 of the certificate the peer must present.
    pub remote_fingerprint: [u8; 32],
    /// The largest message the peer takes, from its `a=max-message-size` (RFC 8841;
    /// RFC 8829 §5.8.2 asks the value be stored and respected); `None`: the shard's
    /// own `SctpLimits::max_message_size`.
    pub max_message_size: Option<usize>,
    /// The peer's SDP has audio or video sections: the handshake must agree an SRTP
    /// protection profile, else it fails with a handshake_failure alert
    /// (`DtlsConn::require_srtp`). False for a data-only session, which may go on
    /// DTLS alone (RFC 5764 §4.1.1).
    pub srtp_required: bool,
}

/// What the owner of a shard can ask of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// Create a peer entity.
    AddPeer(PeerSpec),
    /// Create a controlling peer whose checks, and so the path it nominates and
    /// everything on it, leave from `local` instead of the shard's socket: an
    /// address the owner bound for this peer alone. Two peers that check the same
    /// remote address from one socket would meet on one 5-tuple, which a shoal shard
    /// on the far side keeps for the first (`stun_path_conflict`); from sockets of
    /// their own they get a path each, as the links between two nodes for different
    /// rooms do. For a lite peer, `local` means nothing and is refused.
    AddPeerFrom {
        /// The peer.
        spec: PeerSpec,
        /// The address its datagrams leave from and arrive at.
        local: SocketAddr,
    },
    /// Remove a peer and everything it had.
    RemovePeer(PeerId),
    /// Let a peer go whose session ended on the client's side ([`Shard::let_go`]):
    /// removed as by `RemovePeer`, but what its receive buffer holds still reaches
    /// its room.
    LetGo(PeerId),
    /// Restart a peer's ICE (RFC 8445 §9, RFC 8839 §4.4.2.1): new credentials for
    /// both ends. Checks with the old local ones are still answered until the peer
    /// nominates a pair with the new ones; DTLS, SRTP and SCTP carry on unchanged.
    /// ICE-lite peers only.
    RestartIce {
        /// The peer.
        peer: PeerId,
        /// Its new credentials.
        credentials: IceCredentials,
    },
    /// Send a message to a room's members on this shard, or to one of them
    /// ([`Shard::send_data`]).
    SendData {
        /// The room.
        room: RoomId,
        /// One member only; every member when `None`.
        to: Option<PeerId>,
        /// The label of the channel it goes on (opened reliable and ordered where a
        /// member has none).
        label: String,
        /// Binary (else a UTF-8 string).
        binary: bool,
        /// The message (shared between the receivers, never copied).
        payload: Bytes,
    },
    /// Close the reliable data channels of a room's members on this shard
    /// ([`Shard::close_reliable_channels`]): messages may have been lost on their
    /// way to them (a node-to-node link of the room failed).
    CloseReliableChannels {
        /// The room.
        room: RoomId,
    },
    /// The peer publishes a track.
    Publish {
        /// The publisher.
        peer: PeerId,
        /// What negotiation agreed for it.
        track: TrackSpec,
    },
    /// The peer no longer publishes a track; its subscriptions end.
    Unpublish {
        /// The publisher.
        peer: PeerId,
        /// The track.
        track: TrackId,
    },
    /// The peer is sent a track published on this shard.
    Subscribe {
        /// The subscriber.
        peer: PeerId,
        /// What negotiation agreed for its copy.
        subscription: SubscriptionSpec,
    },
    /// The peer is no longer sent a track.
    Unsubscribe {
        /// The subscriber.
        peer: PeerId,
        /// The track.
        track: TrackId,
    },
    /// How `peer` receives `track`: paused (nothing sent) or not, and for a
    /// simulcast track the highest stream it may be sent.
    SetTrackSettings {
        /// The subscriber.
        peer: PeerId,
        /// The track it subscribes to.
        track: TrackId,
        /// The settings.
        settings: TrackSettings,
    },
    /// A published track is muted (nothing of it forwarded) or unmuted (forwarding
    /// resumes at the next keyframe, which is asked of its publisher at once).
    SetMuted {
        /// The track, published on this shard.
        track: TrackId,
        /// Muted or not.
        muted: bool,
    },
    /// A client endpoint receives a track from the peer (an SFU) and reports each
    /// packet (`ShardEvent::RtpReceived`), NACKing what goes missing.
    Receive {
        /// The peer it comes from.
        peer: PeerId,
        /// The stream as negotiated (the sender's SSRCs and payload types).
        track: TrackSpec,
    },
    /// A copy of a track published on shard `origin`, for subscribers here; fed by
    /// that shard's relay.
    MirrorTrack {
        /// The track as published.
        track: TrackSpec,
        /// The shard that holds its publisher.
        origin: usize,
    },
    /// Each packet of a track published here goes to shard `to` as well.
    RelayTrack {
        /// The track.
        track: TrackId,
        /// The shard that mirrors it.
        to: usize,
    },
    /// A mirrored track goes, with its subscriptions.
    DropMirror {
        /// The track.
        track: TrackId,
    },
    /// A client endpoint sends a local source to the peer; packets are handed in with
    /// [`Shard::send_rtp`].
    AddSource {
        /// The peer it goes to.
        peer: PeerId,
        /// The source (its id, kind, clock rate and the payload type of the packets
        /// the owner hands in).
        track: TrackSpec,
        /// How it goes on the wire (SSRC, payload types, extension ids).
        subscription: SubscriptionSpec,
    },
}

/// Why a command was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CommandError {
    /// A peer with this id exists already.
    #[error("peer {0:?} exists already")]
    DuplicatePeer(PeerId),
    /// Another peer already answers to this local ufrag.
    #[error("local ufrag {0:?} is in use")]
    DuplicateUfrag(String),
    /// `RestartIce` for a peer that is not ICE-lite.
    #[error("peer {0:?} is not an ICE-lite peer")]
    NotLite(PeerId),
    /// No such peer.
    #[error("no peer {0:?}")]
    UnknownPeer(PeerId),
    /// The shard holds `max_peers` already.
    #[error("shard is full ({0} peers)")]
    Full(usize),
    /// The shard is draining ([`Shard::drain`]): it takes no new peer.
    #[error("shard is draining")]
    Draining,
    /// A ufrag or password breaks RFC 8839 §5.4's length rules.
    #[error("invalid ICE credential: {0}")]
    InvalidCredential(&'static str),
    /// A controlling peer needs at least one remote candidate.
    #[error("a controlling peer needs a remote candidate")]
    NoCandidate,
    /// The peer is not a member of the room (on this shard).
    #[error("peer {peer:?} is not a member of room {room:?}")]
    NotMember {
        /// The peer.
        peer: PeerId,
        /// The room.
        room: RoomId,
    },
    /// A message over the shard's max-message-size (RFC 8841).
    #[error("message of {size} bytes is over the {max}-byte limit")]
    TooLarge {
        /// The message's size.
        size: usize,
        /// The limit.
        max: usize,
    },
    /// A channel label over 65535 bytes (RFC 8832 §5.1's length field).
    #[error("channel label too long")]
    LabelTooLong,
    /// A track with this id exists already (or the peer is sent it already).
    #[error("track {0:?} exists already")]
    DuplicateTrack(TrackId),
    /// No such track on this shard (or the peer does not publish or receive it).
    #[error("no track {0:?}")]
    UnknownTrack(TrackId),
    /// A peer cannot be sent its own track.
    #[error("track {0:?} is the peer's own")]
    OwnTrack(TrackId),
    /// The peer has as many tracks or subscriptions as allowed.
    #[error("at most {0} tracks")]
    TooManyTracks(usize),
    /// A track with more simulcast streams than the shard takes.
    #[error("more than {0} simulcast streams")]
    TooManyLayers(usize),
    /// A subscription to one stream of a track that has no stream of that index.
    #[error("track {0:?} has no simulcast stream {1}")]
    UnknownStream(TrackId, u8),
    /// The SSRC is in use by another of the peer's streams.
    #[error("SSRC {0} is in use")]
    SsrcInUse(u32),
    /// The SSRC belonged to one of the peer's ended subscriptions: sending with it again
    /// would repeat SRTP indices under the same keys.
    #[error("SSRC {0} was used by an ended subscription")]
    SsrcRetired(u32),
    /// The peer's session has ended as many subscriptions as its SSRCs allow
    /// (`MAX_RETIRED_SSRCS`): a new one needs a new session.
    #[error("the session's SSRCs are used up ({0} retired)")]
    SsrcsUsedUp(usize),
    /// `AddPeerFrom` for a lite peer, whose paths are the ones its checks arrive on.
    #[error("a lite peer has no address of its own to send from")]
    LocalForLite,
    /// `send_rtp` was given bytes that are not an RTP packet.
    #[error("not an RTP packet")]
    MalformedRtp,
    /// `send_rtp` on a track that is received, not a local source.
    #[error("track {0:?} is not a local source")]
    NotLocal(TrackId),
}

impl Shard {
    /// Applies a command at `now`. Work it starts (a client's first check) happens in
    /// the next tick, which [`Shard::poll_timeout`] asks for.
    pub fn command(&mut self, now: Time, command: Command) -> Result<(), CommandError> {
        let mut cur = self.world.resource_mut::<Now>();
        if now > cur.0 {
            cur.0 = now;
        }
        let now = cur.0;
        match command {
            Command::AddPeer(spec) => {
                let local = self.config.local_addr;
                self.add_peer(now, spec, local)
            }
            Command::AddPeerFrom { spec, local } => {
                if spec.role != IceRole::Controlling {
                    return Err(CommandError::LocalForLite);
                }
                self.add_peer(now, spec, local)
            }
            // The peer is told: close_notify before it goes (RFC 7675 §5.2).
            Command::RemovePeer(id) => self.close_peer(id),
            Command::LetGo(id) => self.let_go(id),
            Command::RestartIce { peer, credentials } => self.restart_ice(peer, credentials),
            Command::SendData {
                room,
                to,
                label,
                binary,
                payload,
            } => self
                .send_data(room, to, &label, binary, payload)
                .map(|_| ()),
            Command::CloseReliableChannels { room } => {
                self.close_reliable_channels(room);
                Ok(())
            }
            Command::Publish { peer, track } => self.publish(peer, track),
            Command::Unpublish { peer, track } => self.unpublish(peer, track),
            Command::Subscribe { peer, subscription } => self.subscribe(peer, subscription),
            Command::Unsubscribe { peer, track } => self.unsubscribe(peer, track),
            Command::SetMuted { track, muted } => self.set_muted(track, muted),
            Command::SetTrackSettings {
                peer,
                track,
                settings,
            } => self.set_track_settings(peer, track, settings),
            Command::Receive { peer, track } => self.receive_track(peer, track, true),
            Command::AddSource {
                peer,
                track,
                subscription,
            } => self.add_source(peer, track, subscription),
            Command::MirrorTrack { track, origin } => self.mirror_track(track, origin),
            Command::RelayTrack { track, to } => self.relay_track(track, to),
            Command::DropMirror { track } => self.drop_mirror(track),
        }
    }

    /// The entity of peer `id`.
    pub(super) fn peer_entity(&self, id: PeerId) -> Result<Entity, CommandError> {
        self.world
            .resource::<PeerIndex>()
            .by_id
            .get(&id)
            .copied()
            .ok_or(CommandError::UnknownPeer(id))
    }

    /// [`Command::RestartIce`]: the new local ufrag joins the index beside the old
    /// one, which retires. A restart before the last one completed replaces that
    /// one's never-nominated credentials and keeps the retiring ones.
    fn restart_ice(&mut self, id: PeerId, credentials: IceCredentials) -> Result<(), CommandError> {
        validate_credentials(&credentials)?;
        let entity = self.peer_entity(id)?;
        if self
            .world
            .resource::<PeerIndex>()
            .by_ufrag
            .contains_key(&credentials.local_ufrag)
        {
            return Err(CommandError::DuplicateUfrag(credentials.local_ufrag));
        }
        let Some(ice) = self.world.get::<Ice>(entity) else {
            return Err(CommandError::UnknownPeer(id));
        };
        if ice.role != IceRole::Lite {
            return Err(CommandError::NotLite(id));
        }
        let mut entry = self.world.entity_mut(entity);
        let Some(mut creds) = entry.get_mut::<IceCredentials>() else {
            return Err(CommandError::UnknownPeer(id));
        };
        let old = std::mem::replace(&mut *creds, credentials);
        let new_ufrag = creds.local_ufrag.clone();
        let Some(mut ice) = entry.get_mut::<Ice>() else {
            return Err(CommandError::UnknownPeer(id));
        };
        // Credentials still retiring mean the replaced ones were never nominated
        // (an abandoned restart): those go, and the retiring ones, which the
        // peer's media may still use, stay until a new session nominates.
        let dropped = if ice.retiring.is_some() {
            old.local_ufrag
        } else {
            let dropped = ice.retiring.replace(RetiringCredentials {
                ufrag: old.local_ufrag,
                pwd: old.local_pwd,
            });
            debug_assert!(dropped.is_none());
            String::new()
        };
        let mut index = self.world.resource_mut::<PeerIndex>();
        if !dropped.is_empty() {
            index.by_ufrag.remove(&dropped);
        }
        index.by_ufrag.insert(new_ufrag, entity);
        self.world.resource_mut::<ShardStats>().ice_restarts += 1;
        Ok(())
    }

    /// `local`: where a controlling peer's checks leave from.
    fn add_peer(
        &mut self,
        now: Time,
        spec: PeerSpec,
        local: SocketAddr,
    ) -> Result<(), CommandError> {
        if self.is_draining() {
            return Err(CommandError::Draining);
        }
        validate_credentials(&spec.credentials)?;
        let index = self.world.resource::<PeerIndex>();
        if index.by_id.contains_key(&spec.id) {
            return Err(CommandError::DuplicatePeer(spec.id));
        }
        if index.by_ufrag.contains_key(&spec.credentials.local_ufrag) {
            return Err(CommandError::DuplicateUfrag(spec.credentials.local_ufrag));
        }
        // Members that left and still relay what they sent hold memory as peers do.
        let closing = self.world.resource::<RelayClosing>().0.len();
        if index.by_id.len() + closing >= self.config.max_peers {
            return Err(CommandError::Full(self.config.max_peers));
        }
        if spec.role == IceRole::Controlling && spec.remote_candidates.is_empty() {
            return Err(CommandError::NoCandidate);
        }
        let tie_breaker = self.world.resource_mut::<ShardRng>().0.next_u64();
        let ice = Ice {
            role: spec.role,
            state: IceState::Checking,
            tie_breaker,
            selected: None,
            valid: Vec::new(),
            consent_at: now,
            recent_transactions: [None; shoal_components::peer::RECENT_TRANSACTIONS],
            recent_next: 0,
            awaiting_session: spec.dtls.is_some(),
            retiring: None,
        };
        let ufrag = spec.credentials.local_ufrag.clone();
        let dtls = spec.dtls;
        let room = spec.room;
        let may_send_data = spec.may_send_data;
        let link = spec.link;
        let mut timers = Timers::default();
        let entity = match spec.role {
            IceRole::Lite => self
                .world
                .spawn((Peer { id: spec.id }, spec.credentials, ice, timers))
                .id(),
            IceRole::Controlling => {
                let ctl = IceControlling {
                    local,
                    remote_candidates: spec.remote_candidates,
                    next_candidate: 0,
                    started_at: now,
                    pending: None,
                    consent_tids: [None; shoal_components::peer::CONSENT_IN_FLIGHT],
                    priority: ice::PRFLX_PRIORITY,
                };
                self.world
                    .spawn((Peer { id: spec.id }, spec.credentials, ice, timers, ctl))
                    .id()
            }
        };
        if let Some(d) = dtls {
            // WebRTC data channels run SCTP over every DTLS connection (RFC 8831 §5);
            // the DTLS client sends the INIT.
            let initiator = d.role == DtlsRole::Client;
            let mut channels = DataChannels::new(initiator);
            channels.remote_max_message_size = d
                .max_message_size
                .unwrap_or(self.config.sctp.max_message_size);
            channels.receive_only = !may_send_data;
            let mut session = DtlsSession::new(d.role, d.remote_fingerprint);
            session.srtp_required = d.srtp_required;
            session.media_limits = PeerMediaLimits::for_peer(link);
            self.world.entity_mut(entity).insert((
                session,
                Sctp::new(initiator, DEFAULT_SCTP_PORT, DEFAULT_SCTP_PORT),
                channels,
            ));
        }
        // A lite peer is lost if no valid check arrives within the consent timeout; a
        // controlling one starts checking at once and fails when its checks run out
        // (its consent starts when a pair is nominated).
        let mut heap = self.world.resource_mut::<TimerHeap>();
        match spec.role {
            IceRole::Lite => {
                let expiry = now + self.config.connect_timeout;
                heap.arm(&mut timers, entity, TimerKind::ConsentExpiry, expiry);
            }
            IceRole::Controlling => heap.arm(&mut timers, entity, TimerKind::IceCheck, now),
        }
        if let Some(mut t) = self.world.get_mut::<Timers>(entity) {
            *t = timers;
        }
        if let Some(room) = room {
            self.join_room(entity, room, link);
        }
        peer::index_new(&mut self.world, entity, spec.id, ufrag);
        Ok(())
    }
}

/// RFC 8839 §5.4: ice-ufrag is 4 to 256 ice-chars, ice-pwd 22 to 256.
fn validate_credentials(c: &IceCredentials) -> Result<(), CommandError> {
    fn ice_chars(s: &str) -> bool {
        // ice-char = ALPHA / DIGIT / "+" / "/"
        s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/')
    }
    for ufrag in [&c.local_ufrag, &c.remote_ufrag] {
        if !(4..=256).contains(&ufrag.len()) || !ice_chars(ufrag) {
            return Err(CommandError::InvalidCredential(
                "ufrag must be 4-256 ice-chars",
            ));
        }
    }
    // RFC 8489 §14.3: USERNAME ("ufrag:ufrag", RFC 8445 §7.2.2) is under 509 bytes.
    if c.local_ufrag.len() + 1 + c.remote_ufrag.len() > 508 {
        return Err(CommandError::InvalidCredential(
            "the two ufrags make a USERNAME over 508 bytes",
        ));
    }
    for pwd in [&c.local_pwd, &c.remote_pwd] {
        if !(22..=256).contains(&pwd.len()) || !ice_chars(pwd) {
            return Err(CommandError::InvalidCredential(
                "password must be 22-256 ice-chars",
            ));
        }
    }
    Ok(())
}
