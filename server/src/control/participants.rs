//! Participants as signalling sees them: which shard holds each one (placement by
//! room affinity, then least load), the WHIP/WHEP sessions, the `/signal` and
//! `SignalService` connections to tell about room events, and the one path by which
//! every participant leaves, whatever the cause (DELETE, a closed stream,
//! RemoveParticipant, DeleteRoom, or the shard reporting the peer gone).
//!
//! Shared by the HTTP and gRPC front ends, so WHIP, WHEP, the WebSocket and the gRPC
//! stream admit, negotiate and remove participants with the same code.
//!
//! A signalling connection hears through its [`Outbox`], bounded in bytes: a room
//! event is built once and shared by every listener's queue, and a listener that
//! falls behind past the bound is removed (SIGNAL_SLOW_READER), never left with a
//! gap in what it heard. A join's response carries the first page of the room's
//! other participants; the rest follow in pages that the connection's writer makes
//! one at a time as it drains ([`super::join_pages`]), so a join into a large room
//! holds one page, not the room.
//!
//! Locks: the room directory, then [`Members`], always in that order, each held for a
//! few map operations and never across an `.await`.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use ring::rand::SecureRandom;
use shoal_components::dtls::DtlsRole;
use shoal_components::media::TrackId;
use shoal_components::peer::{IceCredentials, IceRole, PeerId};
use shoal_components::room::RoomId;
use shoal_components::sctp::dcep::{ChannelType, Reliability};
use shoal_components::sdp::{
    self, AnswerParams, MediaKind, Negotiation, SessionDescription, Setup,
};
use shoal_components::tick::{RemoveReason, ShardEvent};
use shoal_proto::v1::{self, DisconnectReason, participant_event, signal_response};
use shoal_systems::{CommandError, PeerDtls, PeerSpec};
use tokio::sync::oneshot;
use tonic::Status;

use super::auth::Permissions;
use super::grpc::ControlState;
use super::join_pages::JoinCursor;
use super::media::{LocalTransport, MemberMedia, RoomTrack, track_name};
use super::metrics::JoinKind;
use super::outbox::{Outbox, Outgoing};
use super::pending::{Pending, PendingLimits};
use super::presence::{Presence, PresenceUpdate};
use super::rooms::{
    NameKind, Participant, ParticipantSpec, ParticipantState, Room, RoomError, RoomSpec,
    validate_name,
};
use super::selection::Selection;
use super::shards::ShardError;
use super::speakers::{Speaker, Speakers};
use crate::driver::{DriverError, ShardCommand};

/// ufrag length: 8 ice-chars carry 48 random bits (RFC 8445 §5.3 asks for at least
/// 24; RFC 8839 §5.4 allows 4 to 256 characters).
pub(super) const UFRAG_CHARS: usize = 8;
/// Password length: 24 ice-chars carry 144 random bits (RFC 8445 §5.3: at least
/// 128; RFC 8839 §5.4: 22 to 256 characters).
pub(super) const PWD_CHARS: usize = 24;

/// A live signalling connection's way back to its client.
#[derive(Debug)]
pub struct SignalLink {
    /// Messages for the client (room events, its own join response).
    pub outbox: Arc<Outbox>,
    /// Fired when the participant is removed by anything but its own connection.
    pub ended: oneshot::Sender<v1::LeaveEvent>,
}

/// What a WHIP/WHEP session was created as; it is reached (DELETE, PATCH) only
/// through a path of the same kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionKind {
    /// A publisher, `/whip/…`.
    Whip,
    /// A subscriber, `/whep/…`.
    Whep,
}

/// Who asks to join, and how it will hear back.
#[derive(Debug)]
pub struct Admission {
    /// The room.
    pub room: String,
    /// The identity asked for; empty takes a generated one.
    pub identity: String,
    /// A display name; may be empty.
    pub name: String,
    /// Opaque application data.
    pub metadata: String,
    /// A WHIP or WHEP session (a `Location` to DELETE) rather than a connection.
    pub http_session: Option<SessionKind>,
    /// The signalling connection to tell about room events, if any.
    pub signal: Option<SignalLink>,
    /// What its token lets it do (everything in open mode).
    pub permissions: Permissions,
    /// The client's address, for the cap on its sessions that have not connected
    /// ([`super::pending`]); `None` when the transport does not say.
    pub from: Option<IpAddr>,
    /// Whether it receives every track of the room unless it unsubscribes (else
    /// only those it subscribes to).
    pub auto_subscribe: bool,
}

impl Admission {
    /// Whether it is the hidden participant of a link between cluster nodes: no
    /// client session, a link's identity.
    pub fn is_link(&self) -> bool {
        self.signal.is_none()
            && self.http_session.is_none()
            && self
                .identity
                .starts_with(super::cluster::cascade::LINK_IDENTITY)
    }
}

/// A participant admitted into a room and placed on a shard.
#[derive(Clone, Debug)]
pub struct Admitted {
    /// Its room.
    pub room: String,
    /// Its room's id in the shards.
    pub room_id: RoomId,
    /// Its identity.
    pub identity: String,
    /// The shard that holds its connection.
    pub shard: usize,
    /// Its peer id (unique on the node).
    pub peer: PeerId,
    /// Its WHIP/WHEP session id, for the `Location` header.
    pub session: Option<String>,
}

/// One participant known to signalling.
#[derive(Debug)]
pub(super) struct Member {
    pub(super) room: String,
    pub(super) room_id: RoomId,
    pub(super) identity: String,
    /// The MediaStream id its tracks carry in subscribers' `a=msid` and the CNAME
    /// shoal sends them under: random, not its identity, which may hold characters
    /// an msid-id cannot (RFC 8830 §2: `1*64token-char`).
    pub(super) stream_id: String,
    pub(super) shard: usize,
    pub(super) session: Option<String>,
    pub(super) signal: Option<SignalLink>,
    /// What it may do; a hidden member is not announced to the room.
    pub(super) permissions: Permissions,
    /// Its media negotiation, from its first offer on.
    pub(super) media: Option<MemberMedia>,
    /// A link's member only: the tracks of the other node's participants that come
    /// over the link, published here on the link's peer.
    pub(super) relayed: Vec<RoomTrack>,
    /// A link's member only: the other node's participants in the room, as it
    /// lists them (sorted by identity).
    pub(super) remote: Vec<v1::LinkParticipant>,
    /// Which of the room's tracks it receives.
    pub(super) selection: Selection,
}

impl Member {
    /// The tracks it publishes to the room: its own, or those its link brings.
    pub(super) fn tracks(&self) -> impl Iterator<Item = &RoomTrack> {
        self.media
            .iter()
            .flat_map(|m| &m.tracks)
            .chain(&self.relayed)
    }
}

/// Signalling's own tables, beside the room directory.
#[derive(Debug)]
pub struct Members {
    pub(super) by_peer: HashMap<PeerId, Member>,
    /// WHIP/WHEP session id → peer, and what the session was created as.
    sessions: HashMap<String, (PeerId, SessionKind)>,
    /// Room → peers with a signalling connection, to tell about room events.
    listeners: HashMap<String, Vec<PeerId>>,
    /// Participants placed on each shard.
    load: Vec<usize>,
    /// Which shards hold members of each room, for the shards' relays.
    presence: Presence,
    /// Tracks mirrored on shards other than their publisher's, and where.
    pub(super) mirrors: HashMap<shoal_components::media::TrackId, Vec<usize>>,
    /// Members whose connection is not up yet.
    pub(super) pending: Pending,
    /// Each room's active speakers.
    pub(super) speakers: Speakers,
}

impl Members {
    /// Empty tables for `shards` shards.
    pub fn new(shards: usize) -> Members {
        Members {
            by_peer: HashMap::new(),
            sessions: HashMap::new(),
            listeners: HashMap::new(),
            load: vec![0; shards],
            presence: Presence::default(),
            mirrors: HashMap::new(),
            pending: Pending::new(PendingLimits::default()),
            speakers: Speakers::default(),
        }
    }

    /// Participants placed on each shard.
    pub fn load(&self) -> &[usize] {
        &self.load
    }

    /// Whether `peer` is a hidden participant (not announced to its room).
    pub(super) fn is_hidden(&self, peer: PeerId) -> bool {
        self.by_peer
            .get(&peer)
            .is_some_and(|m| m.permissions.hidden)
    }

    /// The participant of this node that `room`'s clients know as `identity`, if
    /// any. A participant of another node under the same identity is shadowed by
    /// it: the clients hear nothing of that one while this one is here (see
    /// [`super::cluster::link_tracks`]).
    pub(super) fn shown_here<'r>(&self, room: &'r Room, identity: &str) -> Option<&'r Participant> {
        room.participant(identity)
            .filter(|p| !self.is_hidden(p.peer))
    }

    /// Sends `event` about `except` to every other signalling connection in `room`
    /// (none when `except` is hidden), one copy shared by all.
    pub(super) fn broadcast(&self, room: &str, except: PeerId, event: signal_response::Message) {
        if self.is_hidden(except) {
            return;
        }
        self.tell_listeners(room, Some(except), event);
    }

    /// Sends `event` to the participant of `peer` on its signalling connection, if
    /// it has one (past its bound, the connection fails and its session removes it).
    pub(super) fn tell(&self, peer: PeerId, event: signal_response::Message) {
        if let Some(link) = self.by_peer.get(&peer).and_then(|m| m.signal.as_ref()) {
            let _ = link.outbox.push(&Outgoing::new(event));
        }
    }

    /// Sends `event` to every signalling connection in `room` but `except`'s.
    pub(super) fn tell_listeners(
        &self,
        room: &str,
        except: Option<PeerId>,
        event: signal_response::Message,
    ) {
        let event = Outgoing::new(event);
        for peer in self.listeners.get(room).into_iter().flatten() {
            if Some(*peer) == except {
                continue;
            }
            if let Some(link) = self.by_peer.get(peer).and_then(|m| m.signal.as_ref()) {
                // A connection this push takes past its bound fails, and its session
                // removes the participant: it never goes on with a gap.
                let _ = link.outbox.push(&event);
            }
        }
    }

    /// Takes `peer` out of every table; its listener slot and session go too.
    fn remove(&mut self, peer: PeerId) -> Option<Member> {
        let member = self.by_peer.remove(&peer)?;
        self.pending.remove(peer);
        if let Some(load) = self.load.get_mut(member.shard) {
            *load = load.saturating_sub(1);
        }
        if let Some(session) = &member.session {
            self.sessions.remove(session);
        }
        if let Some(list) = self.listeners.get_mut(&member.room) {
            list.retain(|p| *p != peer);
            if list.is_empty() {
                self.listeners.remove(&member.room);
            }
        }
        let ranking = self
            .speakers
            .forget(&member.room, &member.identity, Instant::now());
        if let Some(ranking) = ranking {
            self.tell_listeners(&member.room, None, speakers_event(ranking));
        }
        Some(member)
    }

    /// Announces what the rooms' rankings became without a report (see
    /// [`Speakers::sweep`]).
    pub(super) fn sweep_speakers(&mut self) {
        for (room, ranking) in self.speakers.sweep(Instant::now()) {
            self.tell_listeners(&room, None, speakers_event(ranking));
        }
    }

    /// Takes a shard's report of `peer`'s audio level on `track`, and tells the room
    /// when its ranking of speakers changes. Hidden participants are not ranked.
    pub(super) fn audio_level(&mut self, peer: PeerId, track: TrackId, level: u8) {
        let Some(m) = self.by_peer.get(&peer).filter(|m| !m.permissions.hidden) else {
            return;
        };
        let (room, identity) = (m.room.clone(), m.identity.clone());
        let ranking = self
            .speakers
            .report(&room, &identity, track, level, Instant::now());
        if let Some(ranking) = ranking {
            self.tell_listeners(&room, None, speakers_event(ranking));
        }
    }
}

/// A `speakers` message of `ranking`.
fn speakers_event(ranking: Vec<Speaker>) -> signal_response::Message {
    signal_response::Message::Speakers(v1::SpeakersChanged {
        speakers: ranking
            .into_iter()
            .map(|s| v1::ActiveSpeaker {
                identity: s.identity,
                track_id: track_name(s.track),
                level: s.level,
            })
            .collect(),
    })
}

/// Parses an offer and checks that shoal can answer it, before anything changes.
pub fn check_offer(bytes: &[u8]) -> Result<SessionDescription, Status> {
    let offer = SessionDescription::parse_bytes(bytes)
        .map_err(|e| Status::invalid_argument(format!("invalid SDP offer: {e}")))?;
    let probe = AnswerParams {
        candidates: &[std::net::SocketAddr::from(([127, 0, 0, 1], 9))],
        tcp_candidates: &[],
        ice_ufrag: "probe",
        ice_pwd: "probeprobeprobeprobeprobe",
        fingerprint_sha256: [0; 32],
        session_id: 0,
    };
    Negotiation::new(0)
        .answer(&offer, &probe, &[], &mut || 1)
        .map_err(|e| negotiation_error(&e))?;
    Ok(offer)
}

/// A description shoal cannot take, as INVALID_ARGUMENT.
pub(super) fn negotiation_error(e: &sdp::NegotiationError) -> Status {
    Status::invalid_argument(format!("cannot answer the offer: {e}"))
}

/// The shard for a new participant of `room`: the shard that holds most of the
/// room's participants, if it has room (fewer hops for the room relay); else the
/// least loaded shard with room; `None` when every shard is full.
pub fn place(room_shards: &[usize], load: &[usize], max_per_shard: usize) -> Option<usize> {
    let has_room = |s: usize| load.get(s).is_some_and(|n| *n < max_per_shard);
    let mut counts: HashMap<usize, usize> = HashMap::new();
    for s in room_shards {
        *counts.entry(*s).or_default() += 1;
    }
    let affine = counts
        .into_iter()
        .filter(|(s, _)| has_room(*s))
        .max_by_key(|(s, n)| (*n, std::cmp::Reverse(*s)))
        .map(|(s, _)| s);
    affine.or_else(|| {
        (0..load.len())
            .filter(|s| has_room(*s))
            .min_by_key(|s| (load[*s], *s))
    })
}

/// A pending slot taken for a session being admitted, under its peer id: given back
/// if the admission fails or is dropped half-way, kept once the participant is in.
struct Reserved {
    state: Arc<ControlState>,
    peer: PeerId,
    kept: bool,
}

impl Reserved {
    /// The participant holds the slot now.
    fn keep(mut self) {
        self.kept = true;
    }
}

impl Drop for Reserved {
    fn drop(&mut self) {
        if !self.kept {
            self.state.members().pending.remove(self.peer);
        }
    }
}

impl ControlState {
    /// Admits a participant: opens its room if it is not open (unless rooms open
    /// only by CreateRoom), replaces a participant of the same identity (which
    /// leaves with DUPLICATE_IDENTITY, as LiveKit's rule and the proto say), places
    /// it on a shard, joins it to the room directory, tells the room, and (for a
    /// signalling connection) queues its join response ahead of any room event.
    pub async fn admit(self: &Arc<Self>, admission: Admission) -> Result<Admitted, Status> {
        let kind = match admission.http_session {
            Some(SessionKind::Whip) => JoinKind::Whip,
            Some(SessionKind::Whep) => JoinKind::Whep,
            None => JoinKind::Signal,
        };
        let (room, identity) = (admission.room.clone(), admission.identity.clone());
        match self.admit_counted(admission).await {
            Ok(admitted) => {
                self.metrics().joined(kind);
                tracing::info!(
                    event = "join",
                    room = admitted.room.as_str(),
                    identity = admitted.identity.as_str(),
                    peer = admitted.peer.0,
                    shard = admitted.shard,
                    kind = kind.name(),
                    "participant joined"
                );
                Ok(admitted)
            }
            Err(status) => {
                self.metrics().join_refused(kind, status.code());
                tracing::info!(
                    event = "join_refused",
                    // As strings: the text format quotes and escapes them (they are
                    // not validated yet; a newline must not forge a log line).
                    room = room.as_str(),
                    identity = identity.as_str(),
                    kind = kind.name(),
                    code = super::signal::code_name(status.code()),
                    reason = status.message(),
                    "join refused"
                );
                Err(status)
            }
        }
    }

    /// [`ControlState::admit`] before it is counted and logged.
    async fn admit_counted(self: &Arc<Self>, admission: Admission) -> Result<Admitted, Status> {
        // A draining node takes no one but links while it hands its rooms over
        // (checked again under the directory's lock).
        self.drain().check_admission(admission.is_link())?;
        // A client (over signalling, WHIP or WHEP) taking a link's identity would
        // replace the link as a duplicate.
        let client = admission.signal.is_some() || admission.http_session.is_some();
        if client
            && admission
                .identity
                .starts_with(super::cluster::cascade::LINK_IDENTITY)
        {
            return Err(Status::invalid_argument(format!(
                "identities starting with {:?} are kept for links between cluster nodes",
                super::cluster::cascade::LINK_IDENTITY
            )));
        }
        // The pending slot first: a session refused for want of one neither opens a
        // room nor replaces anyone, and the slot taken here is the one it holds.
        let reserved = self.reserve_pending(admission.from)?;
        let existing = {
            let rooms = self.rooms();
            rooms
                .participant(&admission.room, &admission.identity)
                .ok()
                .map(|p| p.peer)
        };
        let existing = existing.filter(|_| !admission.identity.is_empty());
        if let Some(old) = existing
            && let Some(placed) = self.forget(old, DisconnectReason::DuplicateIdentity)
        {
            self.disconnect(vec![placed]).await?;
        }
        self.admit_now(admission, reserved)
    }

    /// A pending slot for a session from `from`, under the peer id it will have.
    fn reserve_pending(self: &Arc<Self>, from: Option<IpAddr>) -> Result<Reserved, Status> {
        let now = self.clock().now();
        let mut members = self.members();
        members.pending.check(from, now)?;
        let peer = PeerId(self.next_peer.fetch_add(1, Ordering::Relaxed));
        members.pending.add(peer, from, now);
        Ok(Reserved {
            state: self.clone(),
            peer,
            kept: false,
        })
    }

    /// [`ControlState::admit`] once the identity is free.
    fn admit_now(&self, mut admission: Admission, reserved: Reserved) -> Result<Admitted, Status> {
        let now = self.clock().now();
        let mut rooms = self.rooms();
        // Under the lock the drain's sweep takes: a participant admitted before the
        // drain started is in the directory when the sweep tells everyone to leave.
        self.drain().check_admission(admission.is_link())?;
        // In a cluster: the room's name as the cluster keys it.
        let clustered = match self.cluster() {
            Some(c) => {
                let name = validate_name(&admission.room, NameKind::Room)?.into_owned();
                Some((c.spans(&name), name))
            }
            None => None,
        };
        // A room this node spans is open at its owner: it opens here too.
        let spans = clustered.as_ref().is_some_and(|(spans, _)| *spans);
        if (self.auto_create_rooms() || spans)
            && matches!(rooms.get(&admission.room), Err(RoomError::RoomNotFound(_)))
        {
            // In a cluster, only the room's owner, or a node spanning it, opens it.
            if let Some((_, name)) = &clustered {
                self.may_open(name)?;
            }
            let spec = RoomSpec {
                name: admission.room.clone(),
                ..RoomSpec::default()
            };
            rooms.create(spec, now)?;
        }
        let room = rooms.get(&admission.room)?;
        let room_id = room.id;
        // The directory's form of the name (NFC), which signalling's tables use too.
        admission.room = room.name.clone();
        if admission.identity.is_empty() {
            admission.identity = format!("guest-{}", self.random_token(6)?);
        }
        let room_shards: Vec<usize> = room.participants().map(|p| p.shard).collect();
        let mut members = self.members();
        let shard = place(&room_shards, members.load(), self.max_peers_per_shard())
            .ok_or_else(|| Status::resource_exhausted("every shard is full"))?;
        let peer = reserved.peer;
        let spec = ParticipantSpec {
            identity: admission.identity.clone(),
            name: admission.name,
            metadata: admission.metadata,
            shard,
            peer,
        };
        let participant = rooms.join(&admission.room, spec, now)?;
        admission.identity = participant.identity.clone();
        let me = self.participant_message(participant);
        let room = rooms.get(&admission.room)?;
        if let Some(link) = &admission.signal {
            // Hidden participants are not counted either: a count above what the
            // pages show would tell that someone unseen is there.
            let others_count = room
                .participants()
                .filter(|p| p.peer != peer && !members.is_hidden(p.peer))
                .count()
                + super::join_pages::remote_participants(&members, room, None, Some(peer)).len();
            let page = self.others_page(&members, room, None, peer);
            let visible = v1::Room {
                num_participants: u32::try_from(others_count)
                    .unwrap_or(u32::MAX)
                    .saturating_add(u32::from(!admission.permissions.hidden)),
                ..self.room_message(room)
            };
            let joined = Outgoing::new(signal_response::Message::Join(v1::JoinResponse {
                room: Some(visible),
                participant: Some(me.clone()),
                others: page.others,
                ice_servers: self.ice_servers_for(peer),
                more: page.more,
            }));
            // The queue is new and empty, and its least bound is above a page, a
            // participant and a room: this cannot fail it.
            let _ = link.outbox.push(&joined);
            if page.more {
                link.outbox.push_pages(JoinCursor::new(
                    admission.room.clone(),
                    room_id,
                    peer,
                    page.last,
                ));
            }
        }
        let stream_id = self.random_stream_id()?;
        let session = match admission.http_session {
            Some(kind) => {
                let id = self.random_token(16)?;
                members.sessions.insert(id.clone(), (peer, kind));
                Some(id)
            }
            None => None,
        };
        if admission.signal.is_some() {
            members
                .listeners
                .entry(admission.room.clone())
                .or_default()
                .push(peer);
        }
        if let Some(load) = members.load.get_mut(shard) {
            *load += 1;
        }
        let updates = members.presence.join(room_id, shard);
        self.tell_shards(&mut members, updates);
        // Held since the reservation; taken again should the sweep have taken it
        // while a replaced participant was being let go.
        members.pending.add(peer, admission.from, now);
        reserved.keep();
        members.by_peer.insert(
            peer,
            Member {
                room: admission.room.clone(),
                room_id,
                identity: admission.identity.clone(),
                stream_id,
                shard,
                session: session.clone(),
                signal: admission.signal,
                permissions: admission.permissions,
                media: None,
                relayed: Vec::new(),
                remote: Vec::new(),
                selection: Selection::new(admission.auto_subscribe),
            },
        );
        let event = participant_event(participant_event::Kind::Joined, me, None);
        members.broadcast(&admission.room, peer, event);
        Ok(Admitted {
            room: admission.room,
            room_id,
            identity: admission.identity,
            shard,
            peer,
            session,
        })
    }

    /// Answers an offer for an admitted participant and adds its peer to its shard
    /// (ICE-lite, fresh credentials, the DTLS role and fingerprint from the offer).
    /// Errors: a bad offer is INVALID_ARGUMENT, a full shard RESOURCE_EXHAUSTED, a
    /// shard that does not answer UNAVAILABLE.
    pub async fn negotiate(
        self: &Arc<Self>,
        who: &Admitted,
        offer: &SessionDescription,
    ) -> Result<String, Status> {
        let candidates = self
            .candidates(who.shard)
            .ok_or_else(|| Status::internal(format!("shard {} has no address", who.shard)))?;
        let ufrag = self.random_ice_chars(UFRAG_CHARS)?;
        let pwd = self.random_ice_chars(PWD_CHARS)?;
        let session_id = u64::from_be_bytes(self.random_bytes::<8>()?) >> 2;
        let local = LocalTransport {
            candidates,
            tcp_candidates: self.tcp_candidates(who.shard),
            ufrag: ufrag.clone(),
            pwd: pwd.clone(),
            session_id,
        };
        let (answer, changes) = self.first_answer(who.peer, local, offer)?;
        // Without the canPublishData grant, its data channels only receive.
        let may_send_data = self
            .members()
            .by_peer
            .get(&who.peer)
            .is_some_and(|m| m.permissions.publish_data);
        let role = match answer.transport.setup {
            Setup::Active => DtlsRole::Client,
            _ => DtlsRole::Server,
        };
        // Audio or video accepted: its DTLS must key SRTP, or the media could never
        // flow (RFC 5764 §4.1.1); a data-only session may go on DTLS alone.
        let srtp_required = answer
            .sdp
            .media
            .iter()
            .any(|m| matches!(m.kind, MediaKind::Audio | MediaKind::Video) && m.port != 0);
        let spec = PeerSpec {
            id: who.peer,
            role: IceRole::Lite,
            credentials: IceCredentials {
                local_ufrag: ufrag,
                local_pwd: pwd,
                remote_ufrag: answer.transport.ufrag.clone(),
                remote_pwd: answer.transport.pwd.clone(),
            },
            remote_candidates: Vec::new(),
            dtls: Some(PeerDtls {
                role,
                remote_fingerprint: answer.transport.fingerprint_sha256,
                max_message_size: Some(answer.remote_max_message_size),
                srtp_required,
            }),
            room: Some(who.room_id),
            may_send_data,
            link: false,
        };
        self.place_peer(who, spec).await?;
        self.apply_media_changes(who.peer, changes);
        Ok(answer.sdp.to_sdp_string())
    }

    /// Adds the peer of the admitted participant `who` to its shard. Errors: a full
    /// shard is RESOURCE_EXHAUSTED, a draining or silent one UNAVAILABLE, and a
    /// participant removed meanwhile NOT_FOUND (its peer taken off again).
    pub(super) async fn place_peer(
        self: &Arc<Self>,
        who: &Admitted,
        spec: PeerSpec,
    ) -> Result<(), Status> {
        self.add_peer(who.shard, spec).await.map_err(|e| match e {
            ShardError::Refused {
                source: CommandError::Full(_),
                ..
            } => Status::resource_exhausted(e.to_string()),
            ShardError::Refused {
                source: CommandError::Draining,
                ..
            } => Status::unavailable(super::drain::DRAINING),
            ShardError::Refused { .. } => Status::invalid_argument(e.to_string()),
            _ => Status::unavailable(e.to_string()),
        })?;
        // Removed (RemoveParticipant, DeleteRoom) while its peer was on the way to
        // the shard: the removal found no peer there, so take it off now, or it would
        // sit in the room's index unseen by the directory.
        if !self.members().by_peer.contains_key(&who.peer) {
            self.disconnect(vec![(who.shard, who.peer)]).await?;
            return Err(Status::not_found(
                "the participant was removed while joining",
            ));
        }
        Ok(())
    }

    /// The identity of `peer`'s participant, while it is one.
    pub fn member_identity(&self, peer: PeerId) -> Option<String> {
        self.members()
            .by_peer
            .get(&peer)
            .map(|m| m.identity.clone())
    }

    /// The peer of a WHIP/WHEP session in `room`, if the session was created as
    /// `kind`: a WHIP session is not a WHEP resource, nor the other way round.
    pub fn session_peer(&self, room: &str, kind: SessionKind, session: &str) -> Option<PeerId> {
        // Members keep the directory's form of a room's name.
        let room = validate_name(room, NameKind::Room).ok()?;
        let members = self.members();
        let (peer, created_as) = *members.sessions.get(session)?;
        (created_as == kind && members.by_peer.get(&peer)?.room == room).then_some(peer)
    }

    /// Removes every member that has not connected within the session setup
    /// timeout (leave reason CONNECTION_TIMEOUT), from the directory and its shard.
    pub async fn expire_pending(self: &Arc<Self>) {
        let now = self.clock().now();
        let due = self.members().pending.expire(now);
        let placed: Vec<(usize, PeerId)> = due
            .into_iter()
            .filter_map(|peer| self.forget(peer, DisconnectReason::ConnectionTimeout))
            .collect();
        if let Err(e) = self.disconnect(placed).await {
            tracing::warn!(
                event = "disconnect_failed",
                "removing sessions that did not connect: {e}"
            );
        }
    }

    /// Takes a participant out of signalling and the directory (if it is still the
    /// directory's participant of that identity), tells its room, and ends its
    /// signalling connection with `reason` unless the connection itself is leaving.
    /// Returns where its peer was, for removal from the shard; `None` if signalling
    /// did not know it (it left already).
    pub fn forget(&self, peer: PeerId, reason: DisconnectReason) -> Option<(usize, PeerId)> {
        let now = self.clock().now();
        let mut rooms = self.rooms();
        let mut members = self.members();
        let member = members.remove(peer)?;
        self.metrics().left(reason);
        tracing::info!(
            event = "leave",
            room = member.room.as_str(),
            identity = member.identity.as_str(),
            peer = peer.0,
            shard = member.shard,
            reason = super::metrics::leave_reason(reason),
            "participant left"
        );
        let updates = members.presence.leave(member.room_id, member.shard);
        self.tell_shards(&mut members, updates);
        let still_there = rooms
            .participant(&member.room, &member.identity)
            .is_ok_and(|p| p.peer == peer);
        if still_there {
            let _ = rooms.remove_participant(&member.room, &member.identity, now);
        }
        if !member.permissions.hidden {
            // Who left and why, not its name and metadata (the room had them when
            // it joined): a LEFT costs every listener a few bytes, so a room's
            // departures cannot fill its listeners' queues.
            let left = v1::Participant {
                identity: member.identity.clone(),
                state: v1::ParticipantState::Disconnected.into(),
                shard: u32::try_from(member.shard).unwrap_or(u32::MAX),
                peer_id: peer.0,
                ..v1::Participant::default()
            };
            let event = participant_event(participant_event::Kind::Left, left, Some(reason));
            members.broadcast(&member.room, peer, event);
        }
        if let Some(link) = member.signal
            && reason != DisconnectReason::ClientLeft
        {
            let _ = link.ended.send(v1::LeaveEvent {
                reason: reason.into(),
                message: reason.as_str_name().to_owned(),
            });
        }
        drop(members);
        drop(rooms);
        if let Some(media) = member.media {
            self.tracks_gone(&member.room, &member.identity, peer, &media.tracks);
        }
        self.tracks_gone(&member.room, &member.identity, peer, &member.relayed);
        if !member.permissions.hidden {
            // A participant of another node under its identity was shadowed by it:
            // the room sees that one now, after this one's tracks went (unless
            // another of this node's took the identity over).
            let rooms = self.rooms();
            let members = self.members();
            let shadowed = rooms
                .get(&member.room)
                .is_ok_and(|r| members.shown_here(r, &member.identity).is_some());
            if !shadowed
                && let Some(event) = self.remote_joined(&members, &member.room, &member.identity)
            {
                members.tell_listeners(&member.room, Some(peer), event);
            }
        }
        if !member.remote.is_empty() {
            // A link gone: its node's participants are out of reach from here
            // (those this node's own shadowed, its clients never heard of). One
            // that another node lists under the same identity (it joined again
            // there) is shown in its place.
            let rooms = self.rooms();
            let members = self.members();
            let room = rooms.get(&member.room).ok();
            for p in &member.remote {
                if room.is_some_and(|r| members.shown_here(r, &p.identity).is_some()) {
                    continue;
                }
                let event = super::cluster::link_tracks::remote_event(
                    participant_event::Kind::Left,
                    p,
                    &[],
                );
                members.tell_listeners(&member.room, Some(peer), event);
                if let Some(event) = self.remote_joined(&members, &member.room, &p.identity) {
                    members.tell_listeners(&member.room, Some(peer), event);
                }
            }
        }
        Some((member.shard, peer))
    }

    /// [`ControlState::forget`], then the peer off its shard.
    pub async fn leave(self: &Arc<Self>, peer: PeerId, reason: DisconnectReason) -> bool {
        match self.forget(peer, reason) {
            Some(placed) => {
                // Failures are logged; the directory has let the participant go.
                let _ = self.disconnect(vec![placed]).await;
                true
            }
            None => false,
        }
    }

    /// [`ControlState::leave`] for a participant whose session ended (its signalling
    /// session closed, its WHIP/WHEP session was deleted, or its link shut down
    /// cleanly): its shard lets its peer go (`ShardCommand::LetGo`), which relays
    /// what the peer's receive buffer still holds to the room before the peer goes,
    /// and it is gone from the directory at once. What SCTP acknowledged to a
    /// member is not lost because it left.
    ///
    /// The LetGo is queued, not awaited, before [`ControlState::forget`] tells the
    /// shards of the room's presence: it comes first on the shard's queue, so a
    /// shard whose last member of the room this was still forwards what the member
    /// sent to the room's other shards (`Shard::set_room_siblings`). A shard whose
    /// queue is full (or that is gone) gets the plain removal of
    /// [`ControlState::leave`].
    pub async fn left(self: &Arc<Self>, peer: PeerId, reason: DisconnectReason) -> bool {
        let Some(shard) = self.members().by_peer.get(&peer).map(|m| m.shard) else {
            return false;
        };
        // The verdict is not awaited: an unknown peer left already.
        let (reply, _) = crossbeam_channel::bounded(1);
        let queued = self
            .shards()
            .get(shard)
            .is_some_and(|s| s.try_send(ShardCommand::LetGo(peer, reply)).is_ok());
        if !queued {
            return self.leave(peer, reason).await;
        }
        self.forget(peer, reason).is_some()
    }

    /// Applies what a shard reported: a peer authenticated (its participant is
    /// active), or a peer gone on its own (its participant leaves).
    pub fn shard_event(&self, event: &ShardEvent) {
        match event {
            ShardEvent::SctpEstablished { peer } => {
                if let Some((room, node)) = self.links().mark_up(*peer) {
                    tracing::info!(
                        event = "cascade_link_up",
                        room = room.as_str(),
                        node = node.as_str(),
                        "the room's link to the node carries messages"
                    );
                }
            }
            ShardEvent::SctpClosed { peer, reason } => self.links().mark_ended(*peer, *reason),
            ShardEvent::DtlsConnected { peer, srtp_profile } => {
                // The directory, then the members, as `forget` takes them: the
                // participant cannot leave (or be replaced) between the look-up and
                // the UPDATED, which would announce it after its LEFT.
                let mut rooms = self.rooms();
                let mut members = self.members();
                // Connected: it no longer holds a pending slot.
                if let Some(admitted) = members.pending.remove(*peer) {
                    let took = self.clock().now().saturating_since(admitted);
                    self.metrics().connected_after(took);
                }
                if srtp_profile.is_none() {
                    // A data-only session whose DTLS agreed no use_srtp (RFC 5764
                    // §4.1.1): audio or video it adds later could never be keyed, so
                    // its renegotiations refuse them rather than accept media the
                    // shard would drop. Tracks placed before this are offered away.
                    if let Some(media) =
                        members.by_peer.get_mut(peer).and_then(|m| m.media.as_mut())
                    {
                        media.negotiation.refuse_media();
                    }
                    self.offer_locked(&rooms, &mut members, *peer);
                }
                let Some(member) = members.by_peer.get(peer) else {
                    return;
                };
                let room = member.room.clone();
                let identity = member.identity.clone();
                if rooms
                    .participant(&room, &identity)
                    .is_ok_and(|p| p.peer == *peer)
                {
                    // Its connection is up: the room hears it is active (UPDATED).
                    let _ = rooms.set_state(&room, &identity, ParticipantState::Active);
                    if let Ok(p) = rooms.participant(&room, &identity) {
                        // As it is now, tracks included: a client replaces what it
                        // knew of the participant with this.
                        let me = v1::Participant {
                            tracks: members.track_infos(*peer),
                            ..self.participant_message(p)
                        };
                        let event = participant_event(participant_event::Kind::Updated, me, None);
                        members.broadcast(&room, *peer, event);
                    }
                }
            }
            ShardEvent::ChannelOpen {
                peer,
                channel,
                label,
                protocol,
                kind,
            } => {
                let info = data_channel_info(*channel, label, protocol, *kind);
                self.tell_participant(
                    *peer,
                    data_channel_event(v1::data_channel_event::Kind::Opened, info),
                );
            }
            ShardEvent::ChannelClosed { peer, channel } => {
                let info = v1::DataChannelInfo {
                    stream_id: u32::from(*channel),
                    ..v1::DataChannelInfo::default()
                };
                self.tell_participant(
                    *peer,
                    data_channel_event(v1::data_channel_event::Kind::Closed, info),
                );
            }
            ShardEvent::AudioLevel {
                peer, track, level, ..
            } => self.members().audio_level(*peer, *track, *level),
            ShardEvent::PeerRemoved { peer, reason } => {
                let reason = match reason {
                    RemoveReason::Command => DisconnectReason::Removed,
                    RemoveReason::DtlsClosed | RemoveReason::Left => DisconnectReason::ClientLeft,
                    RemoveReason::SlowReceiver => DisconnectReason::SlowReceiver,
                    RemoveReason::Drained => DisconnectReason::ServerShutdown,
                    _ => DisconnectReason::ConnectionLost,
                };
                self.forget(*peer, reason);
            }
            _ => {}
        }
    }

    /// [`Members::tell`], under the members lock.
    fn tell_participant(&self, peer: PeerId, event: signal_response::Message) {
        self.members().tell(peer, event);
    }

    /// Tells shards which other shards hold members of a room (fire and forget, in
    /// the order the changes happened, since the caller holds [`Members`]). An
    /// update a full queue refuses is owed and sent again by
    /// [`ControlState::retry_presence`]; a shard that is gone needs none.
    fn tell_shards(&self, members: &mut Members, updates: Vec<PresenceUpdate>) {
        for update in updates {
            let Some(shard) = self.shards().get(update.shard) else {
                continue;
            };
            let command = ShardCommand::RoomPresence {
                room: update.room,
                siblings: update.siblings.clone(),
            };
            if let Err(DriverError::QueueFull { .. } | DriverError::Io { .. }) =
                shard.try_send(command)
            {
                members.presence.owe(&update);
            }
        }
    }

    /// Sends again what [`ControlState::tell_shards`] could not deliver, as each
    /// room's current view.
    pub fn retry_presence(&self) {
        let mut members = self.members();
        let updates = members.presence.retries();
        self.tell_shards(&mut members, updates);
    }

    fn random_bytes<const N: usize>(&self) -> Result<[u8; N], Status> {
        let mut bytes = [0u8; N];
        self.rng
            .fill(&mut bytes)
            .map_err(|_| Status::internal("the system random generator failed"))?;
        Ok(bytes)
    }

    /// `len` random ICE characters from the system CSPRNG.
    pub(super) fn random_ice_chars(&self, len: usize) -> Result<String, Status> {
        let bytes = self.random_bytes::<32>()?;
        Ok(bytes
            .iter()
            .take(len)
            // RFC 8839 §5.4 ice-chars: 64 of them, so a random byte modulo 64 is uniform.
            .map(|b| char::from(crate::endpoint::ICE_CHARS[usize::from(b % 64)]))
            .collect())
    }

    /// A participant's MediaStream id, which is also the CNAME its tracks reach
    /// subscribers under: 128 random bits as 32 hex digits. Hex digits are
    /// token-chars and 32 are within an msid-id's 64 (RFC 8830 §2). As a CNAME it
    /// is short-term persistent and shared by the streams to be synchronised, a
    /// publisher's audio and video (RFC 7022 §4.1); RFC 8834 §4.9 lets a
    /// middlebox send streams under more than one CNAME.
    fn random_stream_id(&self) -> Result<String, Status> {
        self.random_token(16)
    }

    /// `bytes` random bytes in hex, for session ids and generated identities.
    fn random_token(&self, bytes: usize) -> Result<String, Status> {
        let random = self.random_bytes::<32>()?;
        Ok(random
            .iter()
            .take(bytes)
            .map(|b| format!("{b:02x}"))
            .collect())
    }
}

/// A participant event as a signalling message.
fn data_channel_event(
    kind: v1::data_channel_event::Kind,
    channel: v1::DataChannelInfo,
) -> signal_response::Message {
    signal_response::Message::DataChannel(v1::DataChannelEvent {
        kind: kind.into(),
        channel: Some(channel),
    })
}

/// A channel as DATA_CHANNEL_OPEN described it (RFC 8832 §5.1).
fn data_channel_info(
    stream: u16,
    label: &str,
    protocol: &str,
    kind: ChannelType,
) -> v1::DataChannelInfo {
    let (max_retransmits, max_packet_life_time_ms) = match kind.reliability {
        Reliability::Reliable => (None, None),
        Reliability::MaxRetransmits(n) => (Some(n), None),
        Reliability::MaxLifetimeMs(ms) => (None, Some(ms)),
    };
    v1::DataChannelInfo {
        stream_id: u32::from(stream),
        label: label.to_owned(),
        protocol: protocol.to_owned(),
        ordered: kind.ordered,
        max_retransmits,
        max_packet_life_time_ms,
    }
}

fn participant_event(
    kind: participant_event::Kind,
    participant: v1::Participant,
    reason: Option<DisconnectReason>,
) -> signal_response::Message {
    signal_response::Message::Participant(v1::ParticipantEvent {
        kind: kind.into(),
        participant: Some(participant),
        reason: reason.unwrap_or(DisconnectReason::Unspecified).into(),
    })
}

#[cfg(test)]
mod tests {
    use super::place;

    #[test]
    fn placement_prefers_the_room_then_the_least_loaded() {
        // Nobody in the room: the least loaded shard, lowest index on ties.
        assert_eq!(place(&[], &[3, 1, 1], 10), Some(1));
        // The room's shard, even when another is emptier.
        assert_eq!(place(&[2, 2, 0], &[0, 5, 5], 10), Some(2));
        // The room's shard is full: the least loaded of the rest.
        assert_eq!(place(&[2], &[4, 5, 10], 10), Some(0));
        // Everything full.
        assert_eq!(place(&[0], &[10, 10], 10), None);
        assert_eq!(place(&[], &[], 10), None);
    }
}
