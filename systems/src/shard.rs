//! The `Shard`: one World and one Schedule behind a sans-I/O surface.
//!
//! Input: [`Shard::handle_datagrams`] (a batch and the time), [`Shard::handle_timeout`]
//! and [`Shard::command`]. Output: [`Shard::poll_transmit`], [`Shard::poll_timeout`] and
//! [`Shard::poll_event`]. A shard never reads a clock or a socket, so the mio driver and
//! the simulator drive it identically, and the same inputs give the same outputs.

mod rooms;
mod tracks;

pub use tracks::{MAX_SUBSCRIPTIONS_PER_PEER, MAX_TRACKS_PER_PEER};

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bevy_ecs::prelude::*;
use bevy_ecs::schedule::{ScheduleLabel, SingleThreadedExecutor};
use rand_chacha::ChaCha12Rng;
use rand_core::{RngCore, SeedableRng};
use shoal_components::media::{SubscriptionSpec, TrackId, TrackIndex, TrackSpec};
use shoal_components::net::{Datagram, FiveTuple};
use shoal_components::peer::{
    Ice, IceControlling, IceCredentials, IceRole, IceState, Peer, PeerId, PeerIndex,
};
use shoal_components::room::{RoomId, RoomIndex, RoomPresence};
use shoal_components::stats::ShardStats;
use shoal_components::tick::{
    DtlsInbox, DtlsStart, DueTimers, Events, Inbox, LocalAddr, Now, Outbox, RemoveReason,
    SctpInbox, SctpStart, SctpWork, ShardEvent, StunInbox, Transmits, WriteBuffer,
};
use shoal_components::time::Time;
use shoal_components::timer::{TimerHeap, TimerKind, Timers};

use crate::datachannel::{self, ChannelError, ChannelParams, DataChannels};
use crate::dtls::pass::{self as dtls_pass, DtlsSession, ShardDtls};
use shoal_components::dtls::{CipherSuite, DtlsCertificate, DtlsConfig, DtlsRole, SrtpKeys};
use crate::pass::Pass;
use crate::relay::{RelayOutbox, RelayScratch};
use shoal_components::sctp::assoc::{AssocState, DEFAULT_SCTP_PORT, Sctp, SctpLimits};
use shoal_components::sctp::cookie::CookieKey;
use crate::sctp::pass::{self as sctp_pass, SctpScratch, SctpShared};
use crate::{egress, ice, ingest, media, timers};
use bytes::Bytes;
use shoal_components::sctp::dcep::ChannelType;
use shoal_components::sctp::tx::{OutgoingMessage, Reliability, SendError};
use shoal_components::sctp::{Ppid, StreamId};

/// The schedule label of a shard tick.
#[derive(ScheduleLabel, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Tick;

/// How a shard is set up.
#[derive(Clone, Debug)]
pub struct ShardConfig {
    /// The address of the shard's UDP socket: the source of everything it sends.
    pub local_addr: SocketAddr,
    /// Seed of the shard's random generator (transaction ids, tie-breakers). The
    /// simulator passes a fixed seed; the server a random one.
    pub seed: u64,
    /// Datagrams accepted per tick; the rest are dropped and counted. At least 1
    /// (0 is taken as 1).
    pub max_datagrams_per_tick: usize,
    /// Peers this shard will hold at once.
    pub max_peers: usize,
    /// Consent lapses after this long without a valid check (RFC 7675 §5.1: 30 s).
    pub consent_timeout: Duration,
    /// A peer that nominates no path within this long of being added, or of its last
    /// valid check, is removed (60 s: as long as a controlling client keeps trying).
    pub connect_timeout: Duration,
    /// SCTP buffer, window and packet sizes of every association of the shard.
    pub sctp: SctpLimits,
    /// DTLS handshake parameters shared by every peer of the shard.
    pub dtls: Arc<DtlsConfig>,
    /// The certificate the shard presents in DTLS; its SHA-256 fingerprint goes into
    /// the SDP it hands out. Share one between shards so a node has one fingerprint.
    pub certificate: Arc<DtlsCertificate>,
}

impl ShardConfig {
    /// Defaults for a shard whose socket is `local_addr`, with a new certificate.
    ///
    /// # Panics
    /// If the system random generator cannot produce a key pair for the
    /// certificate: nothing can be secured on such a machine. Use
    /// [`ShardConfig::with_certificate`] to handle that case or to share one.
    pub fn new(local_addr: SocketAddr, seed: u64) -> ShardConfig {
        let certificate = match DtlsCertificate::generate() {
            Ok(c) => Arc::new(c),
            Err(e) => panic!("cannot generate the DTLS certificate: {e}"),
        };
        ShardConfig::with_certificate(local_addr, seed, certificate)
    }

    /// Defaults for a shard whose socket is `local_addr`, presenting `certificate`.
    pub fn with_certificate(
        local_addr: SocketAddr,
        seed: u64,
        certificate: Arc<DtlsCertificate>,
    ) -> ShardConfig {
        ShardConfig {
            local_addr,
            seed,
            max_datagrams_per_tick: 1024,
            max_peers: 10_000,
            consent_timeout: ice::CONSENT_TIMEOUT,
            connect_timeout: ice::ICE_CONNECT_BUDGET,
            sctp: SctpLimits::default(),
            dtls: Arc::new(DtlsConfig::default()),
            certificate,
        }
    }
}

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
}

/// What the owner of a shard can ask of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// Create a peer entity.
    AddPeer(PeerSpec),
    /// Remove a peer and everything it had.
    RemovePeer(PeerId),
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

/// Why [`Shard::sctp_send`] refused a message.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SctpSendError {
    /// No such peer, or its association is not established.
    #[error("no established SCTP association")]
    NotEstablished,
    /// The send queue refused it (over the send buffer: back-pressure; too large).
    #[error("send queue: {0:?}")]
    Queue(SendError),
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
    /// No such peer.
    #[error("no peer {0:?}")]
    UnknownPeer(PeerId),
    /// The shard holds `max_peers` already.
    #[error("shard is full ({0} peers)")]
    Full(usize),
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
    /// The SSRC is in use by another of the peer's streams.
    #[error("SSRC {0} is in use")]
    SsrcInUse(u32),
    /// The SSRC belonged to one of the peer's ended subscriptions: sending with it again
    /// would repeat SRTP indices under the same keys.
    #[error("SSRC {0} was used by an ended subscription")]
    SsrcRetired(u32),
    /// `send_rtp` was given bytes that are not an RTP packet.
    #[error("not an RTP packet")]
    MalformedRtp,
    /// `send_rtp` on a track that is received, not a local source.
    #[error("track {0:?} is not a local source")]
    NotLocal(TrackId),
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
}

/// Configuration the passes read.
#[derive(Resource, Clone, Debug)]
pub struct ShardLimits {
    /// See [`ShardConfig::consent_timeout`].
    pub consent_timeout: Duration,
    /// See [`ShardConfig::connect_timeout`].
    pub connect_timeout: Duration,
}

/// One shard: a World of peers and a Schedule of passes.
pub struct Shard {
    world: World,
    schedule: Schedule,
    config: ShardConfig,
    events: VecDeque<ShardEvent>,
    /// Scratch for `send_data`'s receivers, reused.
    room_targets: Vec<Entity>,
}

impl Shard {
    /// A shard with no peers.
    ///
    /// # Panics
    /// If the pass schedule does not build: a programming error, not an input one.
    pub fn new(config: ShardConfig) -> Shard {
        let mut world = World::new();
        world.insert_resource(Now(Time::ZERO));
        world.insert_resource(LocalAddr(config.local_addr));
        world.insert_resource(ShardRng(ChaCha12Rng::seed_from_u64(config.seed)));
        world.insert_resource(ShardLimits {
            consent_timeout: config.consent_timeout,
            connect_timeout: config.connect_timeout,
        });
        world.init_resource::<ShardStats>();
        world.init_resource::<PeerIndex>();
        world.init_resource::<TimerHeap>();
        world.init_resource::<Inbox>();
        world.init_resource::<StunInbox>();
        world.init_resource::<DtlsInbox>();
        world.init_resource::<DtlsStart>();
        world.init_resource::<SctpInbox>();
        world.init_resource::<SctpStart>();
        world.init_resource::<SctpWork>();
        world.init_resource::<SctpScratch>();
        world.init_resource::<RoomIndex>();
        world.init_resource::<TrackIndex>();
        world.init_resource::<shoal_components::media::RetiredSsrcs>();
        world.init_resource::<media::MediaInbox>();
        world.init_resource::<media::MediaStart>();
        world.init_resource::<media::MediaRelayOut>();
        world.init_resource::<media::MediaPlain>();
        world.init_resource::<media::MediaOut>();
        world.init_resource::<media::MediaScratch>();
        world.init_resource::<RoomPresence>();
        world.init_resource::<RelayScratch>();
        world.init_resource::<RelayOutbox>();
        let mut secret = [0u8; 32];
        world.resource_mut::<ShardRng>().0.fill_bytes(&mut secret);
        world.insert_resource(SctpShared {
            cookie_key: CookieKey::new(&secret),
            limits: config.sctp,
        });
        world.insert_resource(ShardDtls {
            config: config.dtls.clone(),
            certificate: config.certificate.clone(),
        });
        world.init_resource::<DueTimers>();
        world.init_resource::<Outbox>();
        world.init_resource::<Transmits>();
        world.init_resource::<WriteBuffer>();
        world.init_resource::<Events>();

        let mut schedule = Schedule::new(Tick);
        schedule.set_executor(SingleThreadedExecutor::new());
        schedule.configure_sets(
            (
                Pass::Ingest,
                Pass::Ice,
                Pass::Dtls,
                Pass::SrtpIn,
                Pass::Sctp,
                Pass::DataChannel,
                Pass::Media,
                Pass::SackBatch,
                Pass::SctpTx,
                Pass::Egress,
                Pass::Timers,
            )
                .chain(),
        );
        schedule.add_systems((
            ingest::ingest.in_set(Pass::Ingest),
            ice::ice.in_set(Pass::Ice),
            dtls_pass::dtls.in_set(Pass::Dtls),
            media::srtp_in.in_set(Pass::SrtpIn),
            sctp_pass::sctp.in_set(Pass::Sctp),
            datachannel::datachannel.in_set(Pass::DataChannel),
            media::media.in_set(Pass::Media),
            sctp_pass::sack_batch.in_set(Pass::SackBatch),
            sctp_pass::sctp_tx.in_set(Pass::SctpTx),
            egress::egress.in_set(Pass::Egress),
            timers::timers.in_set(Pass::Timers),
        ));
        // Build the schedule now rather than in the first tick, so what that adds to
        // the World (bevy keeps some of its own state as entities) is there from
        // the start and `entity_count` has one baseline.
        if let Err(e) = schedule.initialize(&mut world) {
            panic!("the shard schedule does not build: {e}");
        }
        Shard {
            world,
            schedule,
            config,
            events: VecDeque::new(),
            room_targets: Vec::new(),
        }
    }

    /// The address of the shard's socket.
    pub fn local_addr(&self) -> SocketAddr {
        self.config.local_addr
    }

    /// The most datagrams one tick takes ([`ShardConfig::max_datagrams_per_tick`]).
    pub fn max_datagrams_per_tick(&self) -> usize {
        self.config.max_datagrams_per_tick.max(1)
    }

    /// Feeds a batch of datagrams that arrived by `now` and runs one tick over them.
    /// Past `max_datagrams_per_tick` datagrams are dropped and counted.
    pub fn handle_datagrams(&mut self, now: Time, datagrams: impl IntoIterator<Item = Datagram>) {
        let limit = self.max_datagrams_per_tick();
        let mut over = 0u64;
        let mut fed = 0u64;
        {
            let mut inbox = self.world.resource_mut::<Inbox>();
            for d in datagrams {
                if inbox.0.len() < limit {
                    inbox.0.push(d);
                    fed += 1;
                } else {
                    over += 1;
                }
            }
        }
        let mut stats = self.world.resource_mut::<ShardStats>();
        stats.datagrams_in += fed;
        stats.dropped_over_batch_limit += over;
        self.tick(now);
    }

    /// Runs one tick with no new datagrams: timers due by `now` fire.
    pub fn handle_timeout(&mut self, now: Time) {
        self.tick(now);
    }

    fn tick(&mut self, now: Time) {
        // Time never runs backwards inside a shard, whatever the caller's clock does.
        let mut cur = self.world.resource_mut::<Now>();
        if now > cur.0 {
            cur.0 = now;
        }
        self.schedule.run(&mut self.world);
        // Receivers the relay found too slow for a reliable channel.
        // (Rare: the list is empty, and allocates nothing, on almost every tick.)
        let slow = std::mem::take(&mut self.world.resource_mut::<RelayScratch>().slow);
        for entity in slow {
            if self.world.get_entity(entity).is_ok() {
                self.close_entity(entity, RemoveReason::SlowReceiver);
            }
        }
        self.collect_events();
    }

    fn collect_events(&mut self) {
        let mut ev = self.world.resource_mut::<Events>();
        self.events.extend(ev.0.drain(..));
    }

    /// Applies a command at `now`. Work it starts (a client's first check) happens in
    /// the next tick, which [`Shard::poll_timeout`] asks for.
    pub fn command(&mut self, now: Time, command: Command) -> Result<(), CommandError> {
        let mut cur = self.world.resource_mut::<Now>();
        if now > cur.0 {
            cur.0 = now;
        }
        let now = cur.0;
        match command {
            Command::AddPeer(spec) => self.add_peer(now, spec),
            // The peer is told: close_notify before it goes (RFC 7675 §5.2).
            Command::RemovePeer(id) => self.close_peer(id),
            Command::SendData {
                room,
                to,
                label,
                binary,
                payload,
            } => self
                .send_data(room, to, &label, binary, payload)
                .map(|_| ()),
            Command::Publish { peer, track } => self.publish(peer, track),
            Command::Unpublish { peer, track } => self.unpublish(peer, track),
            Command::Subscribe { peer, subscription } => self.subscribe(peer, subscription),
            Command::Unsubscribe { peer, track } => self.unsubscribe(peer, track),
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
    fn peer_entity(&self, id: PeerId) -> Result<Entity, CommandError> {
        self.world
            .resource::<PeerIndex>()
            .by_id
            .get(&id)
            .copied()
            .ok_or(CommandError::UnknownPeer(id))
    }

    fn add_peer(&mut self, now: Time, spec: PeerSpec) -> Result<(), CommandError> {
        validate_credentials(&spec.credentials)?;
        let index = self.world.resource::<PeerIndex>();
        if index.by_id.contains_key(&spec.id) {
            return Err(CommandError::DuplicatePeer(spec.id));
        }
        if index.by_ufrag.contains_key(&spec.credentials.local_ufrag) {
            return Err(CommandError::DuplicateUfrag(spec.credentials.local_ufrag));
        }
        if index.by_id.len() >= self.config.max_peers {
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
        };
        let ufrag = spec.credentials.local_ufrag.clone();
        let dtls = spec.dtls;
        let room = spec.room;
        let mut timers = Timers::default();
        let entity = match spec.role {
            IceRole::Lite => self
                .world
                .spawn((Peer { id: spec.id }, spec.credentials, ice, timers))
                .id(),
            IceRole::Controlling => {
                let ctl = IceControlling {
                    local: self.config.local_addr,
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
            self.world.entity_mut(entity).insert((
                DtlsSession::new(d.role, d.remote_fingerprint),
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
            self.join_room(entity, room);
        }
        let mut index = self.world.resource_mut::<PeerIndex>();
        index.by_id.insert(spec.id, entity);
        index.by_ufrag.insert(ufrag, entity);
        Ok(())
    }

    /// Moves every datagram ready to send into `out` (appending; the caller owns and
    /// reuses the batch).
    pub fn poll_transmit(&mut self, out: &mut Vec<Datagram>) {
        let mut tx = self.world.resource_mut::<Transmits>();
        out.append(&mut tx.0);
    }

    /// When the shard next wants [`Shard::handle_timeout`]; `None` when it has nothing
    /// scheduled. Waking early is harmless.
    pub fn poll_timeout(&self) -> Option<Time> {
        self.world.resource::<TimerHeap>().peek()
    }

    /// The next event for the owner, oldest first.
    pub fn poll_event(&mut self) -> Option<ShardEvent> {
        self.events.pop_front()
    }

    /// What the shard counted.
    pub fn stats(&self) -> &ShardStats {
        self.world.resource::<ShardStats>()
    }

    /// The ICE state of a peer, if it exists.
    pub fn ice_state(&self, id: PeerId) -> Option<IceState> {
        let entity = *self.world.resource::<PeerIndex>().by_id.get(&id)?;
        self.world.get::<Ice>(entity).map(|ice| ice.state)
    }

    /// The peer's address on its nominated path, if it has one.
    pub fn selected_remote(&self, id: PeerId) -> Option<SocketAddr> {
        let entity = *self.world.resource::<PeerIndex>().by_id.get(&id)?;
        self.world.get::<Ice>(entity)?.selected.map(|p| p.remote)
    }

    /// The peer that has validated `path`, if any.
    pub fn path_owner(&self, path: FiveTuple) -> Option<PeerId> {
        let entity = *self.world.resource::<PeerIndex>().by_path.get(&path)?;
        self.world.get::<Peer>(entity).map(|p| p.id)
    }

    /// SHA-256 of the shard's DTLS certificate, for `a=fingerprint`.
    pub fn fingerprint(&self) -> [u8; 32] {
        self.config.certificate.fingerprint_sha256()
    }

    /// Whether the peer's DTLS handshake has completed and authenticated it.
    pub fn dtls_connected(&self, id: PeerId) -> bool {
        let Some(&entity) = self.world.resource::<PeerIndex>().by_id.get(&id) else {
            return false;
        };
        self.world
            .get::<DtlsSession>(entity)
            .and_then(|s| s.conn.as_deref())
            .is_some_and(|c| c.is_connected())
    }

    /// The SRTP keys the peer's DTLS exported, once connected.
    pub fn srtp_keys(&self, id: PeerId) -> Option<SrtpKeys> {
        let entity = *self.world.resource::<PeerIndex>().by_id.get(&id)?;
        self.world.get::<DtlsSession>(entity)?.srtp.clone()
    }

    /// The cipher suite the peer's DTLS negotiated, once connected.
    pub fn dtls_cipher_suite(&self, id: PeerId) -> Option<CipherSuite> {
        let entity = *self.world.resource::<PeerIndex>().by_id.get(&id)?;
        self.world.get::<DtlsSession>(entity)?.suite
    }

    /// Queues a user message on one of the peer's SCTP streams. It goes out in the
    /// next tick, which [`Shard::poll_timeout`] asks for at once.
    pub fn sctp_send(
        &mut self,
        id: PeerId,
        stream: u16,
        ppid: u32,
        payload: Bytes,
        unordered: bool,
        policy: Reliability,
    ) -> Result<(), SctpSendError> {
        let entity = *self
            .world
            .resource::<PeerIndex>()
            .by_id
            .get(&id)
            .ok_or(SctpSendError::NotEstablished)?;
        let now = self.world.resource::<Now>().0;
        let mut e = self.world.entity_mut(entity);
        let mut a = e.get_mut::<Sctp>().ok_or(SctpSendError::NotEstablished)?;
        if a.state != AssocState::Established {
            return Err(SctpSendError::NotEstablished);
        }
        let tx = a.tx.as_mut().ok_or(SctpSendError::NotEstablished)?;
        let msg = OutgoingMessage {
            ppid: Ppid(ppid),
            payload,
            unordered,
            policy,
        };
        tx.queue
            .send(now, StreamId(stream), msg)
            .map_err(SctpSendError::Queue)?;
        self.wake_sctp(entity, now);
        Ok(())
    }

    /// Opens a data channel to the peer (DCEP, RFC 8832): returns its stream id at
    /// once; [`ShardEvent::ChannelOpen`] follows when the peer acknowledges. Data
    /// may be sent on it right away.
    pub fn open_channel(
        &mut self,
        id: PeerId,
        label: &str,
        protocol: &str,
        kind: ChannelType,
    ) -> Result<u16, ChannelError> {
        let params = ChannelParams {
            label,
            protocol,
            kind,
            priority: datachannel::PRIORITY_NORMAL,
        };
        self.with_channels(id, |a, dc, now| datachannel::open(a, dc, now, params))
    }

    /// Sends a message on a data channel with the channel's ordering and reliability.
    /// `ChannelError::WouldBlock` is back-pressure: wait for the buffered amount
    /// to fall. A message larger than the shard's limit or the peer's
    /// `a=max-message-size` (`PeerDtls::max_message_size`) is refused with
    /// `ChannelError::TooLarge`, as `RTCDataChannel.send` refuses one above the
    /// transport's `maxMessageSize` (W3C webrtc-pc, the smaller of the two).
    pub fn channel_send(
        &mut self,
        id: PeerId,
        channel: u16,
        binary: bool,
        payload: Bytes,
    ) -> Result<(), ChannelError> {
        let local = self.config.sctp.max_message_size;
        self.with_channels(id, |a, dc, now| {
            let max = local.min(dc.remote_max_message_size);
            datachannel::send(a, dc, now, channel, binary, payload, max)
        })
    }

    /// Closes a data channel: what is queued on it is still delivered, then both of
    /// its streams are reset (RFC 8831 §6.7) and [`ShardEvent::ChannelClosed`]
    /// follows on both sides.
    pub fn close_channel(&mut self, id: PeerId, channel: u16) -> Result<(), ChannelError> {
        self.with_channels(id, |a, dc, _| datachannel::close(a, dc, channel))
    }

    /// Runs `f` on the peer's established association and its data channels, and
    /// wakes the association if `f` succeeded (it queued something to send).
    fn with_channels<R>(
        &mut self,
        id: PeerId,
        f: impl FnOnce(&mut Sctp, &mut DataChannels, Time) -> Result<R, ChannelError>,
    ) -> Result<R, ChannelError> {
        let now = self.world.resource::<Now>().0;
        let entity = self
            .established_entity(id)
            .ok_or(ChannelError::NotEstablished)?;
        let mut e = self.world.entity_mut(entity);
        let Ok((mut a, mut dc)) = e.get_components_mut::<(&mut Sctp, &mut DataChannels)>() else {
            return Err(ChannelError::NotEstablished);
        };
        let r = f(&mut a, &mut dc, now);
        if r.is_ok() {
            self.wake_sctp(entity, now);
        }
        r
    }

    /// Sets the low watermark of a stream's buffered amount: when the bytes queued
    /// fall to it, [`ShardEvent::BufferedAmountLow`] follows (a data channel's
    /// `bufferedAmountLowThreshold`).
    pub fn set_buffered_amount_low_threshold(&mut self, id: PeerId, stream: u16, bytes: usize) {
        let Some(&entity) = self.world.resource::<PeerIndex>().by_id.get(&id) else {
            return;
        };
        if let Some(mut a) = self.world.get_mut::<Sctp>(entity)
            && let Some(tx) = a.tx.as_mut()
        {
            tx.queue.set_low_watermark(StreamId(stream), bytes);
        }
    }

    /// Bytes queued on a data channel and not yet sent (its `bufferedAmount`).
    pub fn channel_buffered_amount(&self, id: PeerId, channel: u16) -> usize {
        self.peer_sctp(id)
            .and_then(|a| a.tx.as_ref())
            .map_or(0, |tx| tx.queue.buffered_amount(StreamId(channel)))
    }

    fn established_entity(&self, id: PeerId) -> Option<Entity> {
        let entity = *self.world.resource::<PeerIndex>().by_id.get(&id)?;
        let a = self.world.get::<Sctp>(entity)?;
        (a.state == AssocState::Established).then_some(entity)
    }

    /// Asks for a tick at `now` so what was queued for the entity goes out.
    fn wake_sctp(&mut self, entity: Entity, now: Time) {
        let mut timers = self
            .world
            .get::<Timers>(entity)
            .copied()
            .unwrap_or_default();
        // A burst of sends between two ticks arms the send timer once (channel_send
        // and sctp_send alike): a deadline already due has its live heap entry.
        if timers.get(TimerKind::SctpSend).is_some_and(|at| at <= now) {
            return;
        }
        self.world
            .resource_mut::<TimerHeap>()
            .arm(&mut timers, entity, TimerKind::SctpSend, now);
        if let Some(mut t) = self.world.get_mut::<Timers>(entity) {
            *t = timers;
        }
    }

    /// Whether the peer's SCTP association is established.
    pub fn sctp_established(&self, id: PeerId) -> bool {
        self.peer_sctp(id)
            .is_some_and(|a| a.state == AssocState::Established)
    }

    /// Whether the peer's association sends zero checksums: both ends announced the
    /// DTLS error detection method (RFC 9653).
    pub fn sctp_zero_checksum(&self, id: PeerId) -> bool {
        self.peer_sctp(id).is_some_and(|a| a.zero_checksum_tx)
    }

    /// Bytes queued on the peer's association and not yet sent.
    pub fn sctp_buffered_amount(&self, id: PeerId) -> usize {
        self.peer_sctp(id)
            .and_then(|a| a.tx.as_ref())
            .map_or(0, |tx| tx.queue.total_buffered_amount())
    }

    fn peer_sctp(&self, id: PeerId) -> Option<&Sctp> {
        let entity = *self.world.resource::<PeerIndex>().by_id.get(&id)?;
        self.world.get::<Sctp>(entity)
    }

    /// How many peers the shard holds.
    pub fn peer_count(&self) -> usize {
        self.world.resource::<PeerIndex>().by_id.len()
    }

    /// Moves the shard's clock to `now` without running a tick, so that calls made
    /// between ticks ([`Shard::sctp_send`], [`Shard::channel_send`], …) happen at
    /// `now`: a message's lifetime, for one, starts there. Time never runs backwards.
    pub fn advance_clock(&mut self, now: Time) {
        let mut cur = self.world.resource_mut::<Now>();
        if now > cur.0 {
            cur.0 = now;
        }
    }

    /// The shard's current time (the latest it was given).
    pub fn now(&self) -> Time {
        self.world.resource::<Now>().0
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
