//! Media on the control plane: each participant's negotiation (`sdp::Negotiation`),
//! the room's published tracks, and the shard commands and signalling that follow
//! from every change.
//!
//! - A participant's offer is answered with the room's tracks. Its published sections
//!   become tracks of the room (`Command::Publish`, a `track` PUBLISHED event). A
//!   track sent to a participant on another shard than its publisher's is mirrored
//!   there once (`Command::MirrorTrack` on that shard, `Command::RelayTrack` on the
//!   publisher's): one crossbeam hop per packet batch, then the same fan-out.
//! - Whenever a room's tracks change, every other participant with a signalling
//!   connection gets an offer from shoal that adds or stops sections; its answer
//!   makes the subscriptions (`Command::Subscribe`). WHIP and WHEP sessions have no
//!   way to renegotiate (RFC 9725 §4.3 leaves it out): a WHEP session gets the tracks
//!   present when it starts.
//! - A participant that leaves takes its tracks along: the shard removes them with
//!   its peer, the room hears UNPUBLISHED, and the others get offers without them.
//! - shoal's offers to a participant are numbered (`SessionDescription.id`, from 1,
//!   each higher than the last) and one is out at a time. An answer that names
//!   another offer than the one out now answers one that timed out or that glare
//!   dropped, however alike their sections: it is stale, counted
//!   (`shoal_stale_answers_total`, a `stale_answer` log event) and ignored, and the
//!   offer out now still waits for its own answer. An answer without an id (0)
//!   answers whatever offer is out, as it did before offers were numbered.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use shoal_components::media::{
    ExtensionIds, FeedbackKinds, PayloadFormat, SubscriptionSpec, TrackId, TrackKind, TrackSpec,
};
use shoal_components::peer::PeerId;
use shoal_components::sdp::{
    self, AnswerParams, Change, Codec, Extmap, MediaKind, Negotiation, Published,
    SessionDescription, Subscribed, TrackSource,
};
use shoal_proto::v1::{self, signal_response, track_event};
use shoal_systems::Command;
use tonic::Status;

use super::grpc::ControlState;
use super::outbox::Outgoing;
use super::participants::{Members, negotiation_error};
use super::rooms::RoomDirectory;

/// What shoal put in its own side of a participant's session.
#[derive(Clone, Debug)]
pub struct LocalTransport {
    /// The shard's host candidates, in priority order.
    pub candidates: Arc<[SocketAddr]>,
    /// The shard's passive TCP candidates (ICE-TCP), in priority order.
    pub tcp_candidates: Arc<[SocketAddr]>,
    /// shoal's ICE ufrag for this participant.
    pub ufrag: String,
    /// shoal's ICE password for this participant.
    pub pwd: String,
    /// The `o=` session id.
    pub session_id: u64,
}

impl LocalTransport {
    pub(super) fn params(&self, fingerprint_sha256: [u8; 32]) -> AnswerParams<'_> {
        AnswerParams {
            candidates: &self.candidates,
            tcp_candidates: &self.tcp_candidates,
            ice_ufrag: &self.ufrag,
            ice_pwd: &self.pwd,
            fingerprint_sha256,
            session_id: self.session_id,
        }
    }
}

/// A track a participant publishes.
#[derive(Clone, Debug)]
pub struct RoomTrack {
    /// The node's id for it.
    pub id: TrackId,
    /// The shard that holds its publisher.
    pub shard: usize,
    /// What that shard was told (what a mirror elsewhere is told too).
    pub spec: TrackSpec,
    /// The publisher's section.
    pub mid: String,
    /// What subscribers are offered.
    pub source: TrackSource,
    /// Its publisher muted it: it is not forwarded.
    pub muted: bool,
    /// A track of another node's participant that came over a link: that
    /// participant's identity, and the other node's name for the track.
    pub remote: Option<RemoteTrack>,
}

/// Where a track that came over a link comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteTrack {
    /// The identity of its publisher, a participant of the other node.
    pub identity: String,
    /// The other node's name for it.
    pub origin: String,
}

impl RoomTrack {
    /// Its publisher's identity: the other node's participant's for a track that
    /// came over a link, else that of `member`, the member holding it.
    pub(super) fn publisher<'a>(&'a self, member: &'a str) -> &'a str {
        self.remote.as_ref().map_or(member, |r| r.identity.as_str())
    }

    pub(super) fn info(&self) -> v1::TrackInfo {
        let kind = match self.source.kind {
            MediaKind::Audio => v1::TrackKind::Audio,
            _ => v1::TrackKind::Video,
        };
        v1::TrackInfo {
            id: self.source.id.clone(),
            kind: kind.into(),
            mid: self.mid.clone(),
            stream_id: self.source.stream_id.clone(),
            muted: self.muted,
            mime_type: mime_type(self.source.codec.name).to_owned(),
        }
    }
}

/// How long the participant has to answer shoal's offer before it is rolled back
/// (and made again at the next change).
pub const OFFER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// A participant's media state.
#[derive(Debug)]
pub struct MemberMedia {
    /// Its negotiation.
    pub negotiation: Negotiation,
    /// shoal's side of its session.
    pub local: LocalTransport,
    /// What it publishes.
    pub tracks: Vec<RoomTrack>,
    /// An answer of shoal's is on its way to the participant: no offer may overtake
    /// it on the signalling connection.
    pub answering: bool,
    /// When shoal's outstanding offer went out.
    pub offered_at: Option<std::time::Instant>,
    /// The id of shoal's latest offer (`SessionDescription.id`); 0 before the first.
    pub offer_id: u32,
    /// An ICE restart is on its way to the shard: another waits (one at a time, so
    /// the records and the shard agree on the current credentials).
    pub restarting: bool,
}

impl MemberMedia {
    /// The id for shoal's next offer: one more than the last, never 0 (0 is "no
    /// id"; after `u32::MAX` offers the count starts again at 1).
    fn next_offer_id(&self) -> u32 {
        self.offer_id.checked_add(1).unwrap_or(1)
    }

    /// Whether shoal's outstanding offer has waited [`OFFER_TIMEOUT`] for its answer
    /// at `now`, and is to be rolled back.
    pub(super) fn offer_expired(&self, now: std::time::Instant) -> bool {
        self.negotiation.offer_outstanding()
            && self
                .offered_at
                .is_some_and(|at| now.saturating_duration_since(at) >= OFFER_TIMEOUT)
    }

    /// shoal's next offer at `now` and its id, the outstanding one rolled back first
    /// if it has waited [`OFFER_TIMEOUT`]; `None` while one is out, or when the
    /// session has nothing to change.
    fn next_offer(
        &mut self,
        now: std::time::Instant,
        fingerprint_sha256: [u8; 32],
        tracks: &[TrackSource],
        new_ssrc: &mut dyn FnMut() -> u32,
    ) -> Option<(u32, SessionDescription)> {
        if self.offer_expired(now) {
            self.negotiation.rollback();
        }
        let params = self.local.params(fingerprint_sha256);
        let offer = self.negotiation.offer(&params, tracks, new_ssrc)?;
        // Numbered even if it never leaves: an id names one offer only.
        self.offer_id = self.next_offer_id();
        self.offered_at = Some(now);
        Some((self.offer_id, offer))
    }

    /// Whether an answer numbered `id` answers shoal's offer out now: any answer
    /// without an id does (older clients); one with an id must name that offer.
    pub(super) fn answers_outstanding(&self, id: u32) -> bool {
        id == 0 || (self.negotiation.offer_outstanding() && id == self.offer_id)
    }

    /// The outstanding offer's id, or 0 if none is out.
    fn outstanding_id(&self) -> u32 {
        if self.negotiation.offer_outstanding() {
            self.offer_id
        } else {
            0
        }
    }
}

/// The text form of a track id in SDP (`a=msid`) and signalling.
pub(super) fn track_name(id: TrackId) -> String {
    format!("TR{}", id.0)
}

/// The extension ids of `extensions` that the shard reads or writes.
pub(crate) fn extension_ids(extensions: &[Extmap]) -> ExtensionIds {
    let id = |uri: &str| {
        extensions
            .iter()
            .find(|e| e.uri == uri)
            .and_then(|e| u8::try_from(e.id).ok())
    };
    ExtensionIds {
        mid: id(sdp::EXT_MID),
        audio_level: id(sdp::EXT_AUDIO_LEVEL),
        rid: id(sdp::EXT_RID),
        repaired_rid: id(sdp::EXT_REPAIRED_RID),
        transport_cc: id(sdp::EXT_TRANSPORT_CC),
        abs_send_time: id(sdp::EXT_ABS_SEND_TIME),
        abs_capture_time: id(sdp::EXT_ABS_CAPTURE_TIME),
    }
}

/// The RTCP feedback the shard does for `codec`.
pub(crate) fn feedback(codec: &Codec) -> FeedbackKinds {
    FeedbackKinds {
        nack: codec.feedback.nack,
        pli: codec.feedback.pli,
        fir: codec.feedback.fir,
        transport_cc: codec.feedback.transport_cc,
        remb: codec.feedback.goog_remb,
    }
}

/// The MIME type of codec `name`, as `TrackInfo` and `LinkTrack` give it.
pub(crate) fn mime_type(name: sdp::CodecName) -> &'static str {
    match name {
        sdp::CodecName::Opus => "audio/opus",
        sdp::CodecName::Vp8 => "video/VP8",
        sdp::CodecName::H264 => "video/H264",
    }
}

/// The payload format the shard reads for codec `name`.
pub(crate) fn payload_format(name: sdp::CodecName) -> PayloadFormat {
    match name {
        sdp::CodecName::Opus => PayloadFormat::Opus,
        sdp::CodecName::Vp8 => PayloadFormat::Vp8,
        sdp::CodecName::H264 => PayloadFormat::H264,
    }
}

pub(crate) fn track_kind(kind: &MediaKind) -> TrackKind {
    match kind {
        MediaKind::Audio => TrackKind::Audio,
        _ => TrackKind::Video,
    }
}

fn track_spec(id: TrackId, mid: &str, p: &Published) -> TrackSpec {
    TrackSpec {
        id,
        kind: track_kind(&p.kind),
        mid: mid.to_owned(),
        ssrc: p.ssrc,
        rtx_ssrc: p.rtx_ssrc,
        payload_type: p.codec.payload_type,
        rtx_payload_type: p.codec.rtx_payload_type,
        clock_rate: if p.kind == MediaKind::Audio {
            48_000
        } else {
            90_000
        },
        extensions: extension_ids(&p.extensions),
        feedback: feedback(&p.codec),
        format: payload_format(p.codec.name),
        layers: p.layers.clone(),
    }
}

fn subscription_spec(id: TrackId, mid: &str, s: &Subscribed) -> SubscriptionSpec {
    SubscriptionSpec {
        track: id,
        mid: mid.to_owned(),
        ssrc: s.ssrc,
        rtx_ssrc: s.rtx_ssrc,
        payload_type: s.codec.payload_type,
        rtx_payload_type: s.codec.rtx_payload_type,
        extensions: extension_ids(&s.extensions),
        feedback: feedback(&s.codec),
        cname: s.stream_id.clone(),
        stream: None,
    }
}

/// What applying changes asks for once the locks are released.
#[derive(Default)]
struct Effects {
    /// Rooms whose other participants need an offer.
    renegotiate: Vec<String>,
}

impl Members {
    /// Mirrors track `t` on `shard` first if it is published on another and not
    /// mirrored there yet (`Command::MirrorTrack` there, `Command::RelayTrack` on its
    /// own shard), so that a subscription on `shard` can take it.
    pub(super) fn mirror(
        &mut self,
        t: &RoomTrack,
        shard: usize,
        commands: &mut Vec<(usize, Command)>,
    ) {
        if t.shard == shard {
            return;
        }
        let at = self.mirrors.entry(t.id).or_default();
        if at.contains(&shard) {
            return;
        }
        at.push(shard);
        commands.push((
            shard,
            Command::MirrorTrack {
                track: t.spec.clone(),
                origin: t.shard,
            },
        ));
        commands.push((
            t.shard,
            Command::RelayTrack {
                track: t.id,
                to: shard,
            },
        ));
    }

    /// What `peer` publishes, as the API describes tracks.
    pub(super) fn track_infos(&self, peer: PeerId) -> Vec<v1::TrackInfo> {
        self.by_peer
            .get(&peer)
            .map(|m| m.tracks().map(RoomTrack::info).collect())
            .unwrap_or_default()
    }
}

impl ControlState {
    /// A random SSRC from the system generator.
    pub(super) fn random_ssrc(&self) -> u32 {
        let mut b = [0u8; 4];
        // A failing system generator is caught elsewhere; a fixed value is still
        // made unique by the negotiation's collision check.
        let _ = ring::rand::SecureRandom::fill(&self.rng, &mut b);
        u32::from_be_bytes(b)
    }

    /// The tracks `peer` may be sent: its room's, published by others, that its
    /// selection takes (none without the canSubscribe grant).
    pub(super) fn tracks_for(
        rooms: &RoomDirectory,
        members: &Members,
        peer: PeerId,
    ) -> Vec<TrackSource> {
        let Some(me) = members.by_peer.get(&peer) else {
            return Vec::new();
        };
        if !me.permissions.subscribe {
            return Vec::new();
        }
        let Ok(room) = rooms.get(&me.room) else {
            return Vec::new();
        };
        room.participants()
            .filter(|p| p.peer != peer)
            .filter_map(|p| members.by_peer.get(&p.peer))
            .flat_map(|m| m.tracks().map(|t| t.source.clone()))
            .filter(|t| me.selection.wants(&t.id))
            .collect()
    }

    /// Answers a participant's first offer: its negotiation starts here. Returns the
    /// answer and what it changed, to be applied once its peer is on its shard.
    pub(super) fn first_answer(
        &self,
        peer: PeerId,
        local: LocalTransport,
        offer: &SessionDescription,
    ) -> Result<(sdp::Answered, Vec<Change>), Status> {
        let rooms = self.rooms();
        let mut members = self.members();
        let tracks = Self::tracks_for(&rooms, &members, peer);
        let member = members
            .by_peer
            .get_mut(&peer)
            .ok_or_else(|| Status::not_found("the participant was removed while joining"))?;
        let mut negotiation = Negotiation::new(local.session_id);
        if !member.permissions.publish {
            negotiation.refuse_publishing();
        }
        let fingerprint = self.fingerprint_sha256();
        let answered = negotiation
            .answer(offer, &local.params(fingerprint), &tracks, &mut || {
                self.random_ssrc()
            })
            .map_err(|e| negotiation_error(&e))?;
        let changes = answered.changes.clone();
        member.media = Some(MemberMedia {
            negotiation,
            local,
            tracks: Vec::new(),
            answering: true,
            offered_at: None,
            offer_id: 0,
            restarting: false,
        });
        Ok((answered, changes))
    }

    /// Applies what a negotiation of `peer` changed: shard commands, track events,
    /// and offers to the rest of the room when its tracks changed.
    pub(super) fn apply_media_changes(&self, peer: PeerId, changes: Vec<Change>) {
        let effects = {
            let rooms = self.rooms();
            let mut members = self.members();
            self.apply_locked(&rooms, &mut members, peer, changes)
        };
        for room in effects.renegotiate {
            self.offer_to_room(&room, Some(peer));
        }
    }

    fn apply_locked(
        &self,
        rooms: &RoomDirectory,
        members: &mut Members,
        peer: PeerId,
        changes: Vec<Change>,
    ) -> Effects {
        let mut effects = Effects::default();
        let Some(member) = members.by_peer.get(&peer) else {
            return effects;
        };
        let (shard, room, identity) = (member.shard, member.room.clone(), member.identity.clone());
        let stream_id = member.stream_id.clone();
        let mut commands = Vec::new();
        let mut events = Vec::new();
        for change in changes {
            match change {
                Change::Published { mid, track } => {
                    let id = TrackId(self.next_track.fetch_add(1, Ordering::Relaxed));
                    let spec = track_spec(id, &mid, &track);
                    let room_track = RoomTrack {
                        id,
                        shard,
                        spec: spec.clone(),
                        mid: mid.clone(),
                        source: TrackSource {
                            id: track_name(id),
                            kind: track.kind.clone(),
                            // One stream per publisher: its audio and video play in
                            // sync. Not its identity, which need not be a token.
                            stream_id: stream_id.clone(),
                            codec: track.codec.clone(),
                        },
                        muted: false,
                        remote: None,
                    };
                    events.push((track_event::Kind::Published, room_track.info()));
                    if let Some(media) = members
                        .by_peer
                        .get_mut(&peer)
                        .and_then(|m| m.media.as_mut())
                    {
                        media.tracks.push(room_track);
                    }
                    commands.push((shard, Command::Publish { peer, track: spec }));
                }
                Change::Unpublished { mid } => {
                    let removed = members
                        .by_peer
                        .get_mut(&peer)
                        .and_then(|m| m.media.as_mut())
                        .and_then(|media| {
                            let i = media.tracks.iter().position(|t| t.mid == mid)?;
                            Some(media.tracks.remove(i))
                        });
                    if let Some(t) = removed {
                        events.push((track_event::Kind::Unpublished, t.info()));
                        commands.push((shard, Command::Unpublish { peer, track: t.id }));
                        for at in members.mirrors.remove(&t.id).unwrap_or_default() {
                            commands.push((at, Command::DropMirror { track: t.id }));
                        }
                    }
                }
                Change::Subscribed { mid, track } => {
                    if let Some(t) = Self::room_track(rooms, members, &room, &track.track).cloned()
                    {
                        members.mirror(&t, shard, &mut commands);
                        commands.push((
                            shard,
                            Command::Subscribe {
                                peer,
                                subscription: subscription_spec(t.id, &mid, &track),
                            },
                        ));
                        // What the participant asked of the track before.
                        let asked = members
                            .by_peer
                            .get(&peer)
                            .and_then(|m| m.selection.settings(&track.track));
                        if let Some(settings) = asked {
                            commands.push((
                                shard,
                                Command::SetTrackSettings {
                                    peer,
                                    track: t.id,
                                    settings,
                                },
                            ));
                        }
                    }
                }
                Change::Unsubscribed { track, .. } => {
                    // A track already gone took its subscriptions along on the shard.
                    if let Some(t) = Self::room_track(rooms, members, &room, &track) {
                        commands.push((shard, Command::Unsubscribe { peer, track: t.id }));
                    }
                }
            }
        }
        self.send_media_commands(commands);
        if !events.is_empty() {
            for (kind, info) in events {
                let event = signal_response::Message::Track(v1::TrackEvent {
                    kind: kind.into(),
                    participant_identity: identity.clone(),
                    track: Some(info),
                });
                members.broadcast(&room, peer, event);
            }
            effects.renegotiate.push(room);
        }
        effects
    }

    /// The room's track named `name`, if it is still published.
    pub(super) fn room_track<'m>(
        rooms: &RoomDirectory,
        members: &'m Members,
        room: &str,
        name: &str,
    ) -> Option<&'m RoomTrack> {
        let room = rooms.get(room).ok()?;
        room.participants()
            .filter_map(|p| members.by_peer.get(&p.peer))
            .flat_map(|m| m.tracks())
            .find(|t| t.source.id == name)
    }

    /// Sends each command to its shard, in order, without blocking: one a full
    /// queue refuses waits, with those after it for the same shard, until the shard
    /// takes them ([`super::media_backlog`]).
    pub(super) fn send_media_commands(&self, commands: Vec<(usize, Command)>) {
        let mut backlog = self.media_backlog();
        for (shard, command) in commands {
            backlog.send(shard, command, |s, c| self.send_media(s, c));
        }
    }

    /// Sends the media commands that wait for a shard's queue, as far as the shards
    /// take them now.
    pub fn retry_media_commands(&self) {
        self.media_backlog().flush(|s, c| self.send_media(s, c));
    }

    fn send_media(
        &self,
        shard: usize,
        command: Command,
    ) -> Result<(), super::media_backlog::Refused> {
        match self.shards().get(shard) {
            Some(sender) => sender.try_send_media(command),
            None => Err((Box::new(command), super::media_backlog::Refusal::Gone)),
        }
    }

    /// Offers every signalling participant of `room` (but `except`) the room's tracks
    /// as they are now, where that changes its session.
    pub(super) fn offer_to_room(&self, room: &str, except: Option<PeerId>) {
        let rooms = self.rooms();
        let mut members = self.members();
        let Ok(r) = rooms.get(room) else {
            return;
        };
        let peers: Vec<PeerId> = r
            .participants()
            .map(|p| p.peer)
            .filter(|p| Some(*p) != except)
            .collect();
        for peer in peers {
            self.offer_locked(&rooms, &mut members, peer);
        }
    }

    /// Sends `peer` an offer if its session should change and it can take one.
    pub(super) fn offer_locked(&self, rooms: &RoomDirectory, members: &mut Members, peer: PeerId) {
        let tracks = Self::tracks_for(rooms, members, peer);
        let fingerprint = self.fingerprint_sha256();
        let Some(member) = members.by_peer.get_mut(&peer) else {
            return;
        };
        let (Some(link), Some(media)) = (member.signal.as_ref(), member.media.as_mut()) else {
            return;
        };
        if media.answering {
            // Offered once the answer is out (`answer_delivered`).
            return;
        }
        let now = std::time::Instant::now();
        if let Some((id, offer)) =
            media.next_offer(now, fingerprint, &tracks, &mut || self.random_ssrc())
        {
            let message = signal_response::Message::Offer(v1::SessionDescription {
                sdp: offer.to_sdp_string(),
                id,
            });
            // A connection that is ending (or that this offer takes past its bound)
            // takes no offer; roll it back so that a later change offers again.
            if link.outbox.push(&Outgoing::new(message)).is_err() {
                media.negotiation.rollback();
            }
        }
    }

    /// Answers a later offer of `peer`'s (a renegotiation; on glare shoal's own offer
    /// is dropped, RFC 8829 §4.1.10.2), applies what changed, and offers again if the
    /// room still has something for it.
    pub(super) fn answer_again(
        self: &Arc<Self>,
        peer: PeerId,
        offer: &SessionDescription,
    ) -> Result<String, Status> {
        let (sdp, changes) = {
            let rooms = self.rooms();
            let mut members = self.members();
            let tracks = Self::tracks_for(&rooms, &members, peer);
            let fingerprint = self.fingerprint_sha256();
            let media = members
                .by_peer
                .get_mut(&peer)
                .and_then(|m| m.media.as_mut())
                .ok_or_else(|| Status::failed_precondition("no session to renegotiate"))?;
            let params = media.local.params(fingerprint);
            let answered = media
                .negotiation
                .answer(offer, &params, &tracks, &mut || self.random_ssrc())
                .map_err(|e| negotiation_error(&e))?;
            media.answering = true;
            (answered.sdp.to_sdp_string(), answered.changes)
        };
        self.apply_media_changes(peer, changes);
        Ok(sdp)
    }

    /// Sends `peer` an offer if the room has changed for it (after its own
    /// renegotiation, which may have dropped one of shoal's).
    pub(super) fn offer_if_needed(&self, peer: PeerId) {
        let rooms = self.rooms();
        let mut members = self.members();
        self.offer_locked(&rooms, &mut members, peer);
    }

    /// Shoal's answer to `peer` is on the signalling connection: offers may follow it
    /// now, and one goes at once if the room changed for it meanwhile (or on glare
    /// shoal dropped its own).
    pub(super) fn answer_delivered(&self, peer: PeerId) {
        if let Some(media) = self
            .members()
            .by_peer
            .get_mut(&peer)
            .and_then(|m| m.media.as_mut())
        {
            media.answering = false;
        }
        self.offer_if_needed(peer);
    }

    /// Applies `peer`'s answer to shoal's offer; `id` is the offer it says it answers
    /// (0: whichever is out). A stale answer, to an offer no longer out, is counted
    /// and ignored.
    pub(super) fn accept_answer(
        &self,
        peer: PeerId,
        answer: &SessionDescription,
        id: u32,
    ) -> Result<(), Status> {
        let changes =
            {
                let mut members = self.members();
                let member = members.by_peer.get_mut(&peer).ok_or_else(|| {
                    Status::failed_precondition("shoal has sent no offer to answer")
                })?;
                let (room, identity) = (member.room.as_str(), member.identity.as_str());
                let media = member.media.as_mut().ok_or_else(|| {
                    Status::failed_precondition("shoal has sent no offer to answer")
                })?;
                if !media.answers_outstanding(id) {
                    // A late answer to an offer that timed out or that glare dropped:
                    // applying it to the offer out now could agree to sections the
                    // client never saw. The offer out now waits for its own answer.
                    self.count_stale_answer();
                    tracing::info!(
                        event = "stale_answer",
                        room,
                        identity,
                        peer = peer.0,
                        answered = id,
                        outstanding = media.outstanding_id(),
                        "an answer to an offer that is no longer out was ignored"
                    );
                    return Ok(());
                }
                media.negotiation.accept(answer).map_err(|e| match e {
                    sdp::NegotiationError::NoOfferOutstanding => {
                        Status::failed_precondition("shoal has no offer outstanding")
                    }
                    e => negotiation_error(&e),
                })?
            };
        self.apply_media_changes(peer, changes);
        // Something may have changed while the offer was out.
        self.offer_if_needed(peer);
        Ok(())
    }

    /// A leaving participant's tracks: the room hears them unpublished (the shard
    /// drops them with the peer) and the others get offers without them. Called with
    /// the member already out of the tables.
    pub(super) fn tracks_gone(
        &self,
        room: &str,
        identity: &str,
        peer: PeerId,
        tracks: &[RoomTrack],
    ) {
        if tracks.is_empty() {
            return;
        }
        {
            let rooms = self.rooms();
            let mut members = self.members();
            let mut drops = Vec::new();
            for t in tracks {
                for at in members.mirrors.remove(&t.id).unwrap_or_default() {
                    drops.push((at, Command::DropMirror { track: t.id }));
                }
            }
            self.send_media_commands(drops);
            for t in tracks {
                let event = signal_response::Message::Track(v1::TrackEvent {
                    kind: track_event::Kind::Unpublished.into(),
                    participant_identity: t.publisher(identity).to_owned(),
                    track: Some(t.info()),
                });
                if t.remote.is_some() {
                    // Another node's participant's, whose link member is hidden;
                    // nothing of one shadowed by a participant here.
                    let shadowed = rooms
                        .get(room)
                        .is_ok_and(|r| members.shown_here(r, t.publisher(identity)).is_some());
                    if !shadowed {
                        members.tell_listeners(room, Some(peer), event);
                    }
                } else {
                    members.broadcast(room, peer, event);
                }
            }
        }
        self.offer_to_room(room, Some(peer));
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use shoal_components::sdp::{Codec, MediaKind, Negotiation, SessionDescription, TrackSource};

    use super::*;
    use crate::endpoint::{OfferShape, media_offer, os_rng};

    const FINGERPRINT: [u8; 32] = [0xcd; 32];

    /// A participant's media before shoal answered its first offer, that offer (one
    /// section of its own to receive audio in), and a publisher's audio for shoal
    /// to send it.
    fn participant() -> (MemberMedia, SessionDescription, TrackSource) {
        let mut rng = os_rng().expect("a random generator");
        let shape = OfferShape {
            receive_audio: 1,
            ..OfferShape::default()
        };
        let client = media_offer(PeerId(1), [0xab; 32], shape, &mut rng);
        let publisher = media_offer(PeerId(2), [0xab; 32], OfferShape::PUBLISH, &mut rng);
        let published = SessionDescription::parse(publisher.sdp()).expect("parses");
        let codec = published
            .media
            .iter()
            .flat_map(Codec::read_all)
            .next()
            .expect("the publisher's audio codec");
        let track = TrackSource {
            id: "TR1".to_owned(),
            kind: MediaKind::Audio,
            stream_id: "publisher".to_owned(),
            codec,
        };
        let candidates: Arc<[SocketAddr]> = Arc::from(["127.0.0.1:7100".parse().unwrap()]);
        let media = MemberMedia {
            negotiation: Negotiation::new(7),
            local: LocalTransport {
                candidates,
                tcp_candidates: Arc::from([]),
                ufrag: "nodeufrag".to_owned(),
                pwd: "nodepasswordnodepassword".to_owned(),
                session_id: 7,
            },
            tracks: Vec::new(),
            answering: false,
            offered_at: None,
            offer_id: 0,
            restarting: false,
        };
        let offer = SessionDescription::parse(client.sdp()).expect("parses");
        (media, offer, track)
    }

    /// A participant's media after shoal answered its first offer, with no track
    /// for it yet, and a publisher's audio for shoal to offer it.
    fn answered_participant() -> (MemberMedia, TrackSource) {
        let (mut media, offer, track) = participant();
        let params = media.local.params(FINGERPRINT);
        media
            .negotiation
            .answer(&offer, &params, &[], &mut || 5)
            .expect("shoal answers");
        (media, track)
    }

    /// The CNAME shoal's SRs give a subscription's SSRC (`SubscriptionSpec::cname`)
    /// is the one the subscriber's SDP named it by (RFC 5576 §4.1), so the
    /// subscriber ties the SRs to the stream.
    #[test]
    fn a_subscription_sends_reports_under_the_cname_of_its_sdp() {
        let (mut media, offer, mut track) = participant();
        track.stream_id = "0123456789abcdef0123456789abcdef".to_owned();
        let params = media.local.params(FINGERPRINT);
        let answered = media
            .negotiation
            .answer(&offer, &params, std::slice::from_ref(&track), &mut || 5)
            .expect("shoal answers");
        let (mid, subscribed) = answered
            .changes
            .iter()
            .find_map(|c| match c {
                Change::Subscribed { mid, track } => Some((mid, track)),
                _ => None,
            })
            .expect("the track goes to the participant's section");
        let spec = subscription_spec(TrackId(1), mid, subscribed);
        let section = answered
            .sdp
            .media
            .iter()
            .find(|m| m.mid() == Some(mid.as_str()))
            .expect("the section");
        let named: Vec<_> = section
            .ssrcs()
            .filter(|s| s.ssrc == spec.ssrc && s.attribute == "cname")
            .collect();
        assert_eq!(named.len(), 1, "{section:?}");
        assert_eq!(named[0].value.as_deref(), Some(spec.cname.as_str()));
        assert_eq!(spec.cname, track.stream_id);
    }

    #[test]
    fn a_timed_out_offer_is_numbered_again_and_its_answer_is_stale() {
        let (mut media, track) = answered_participant();
        let tracks = [track];
        let mut ssrcs = 1000..;
        let mut new_ssrc = || ssrcs.next().unwrap_or(1);
        let t0 = Instant::now();
        let (first, first_offer) = media
            .next_offer(t0, FINGERPRINT, &tracks, &mut new_ssrc)
            .expect("shoal offers the track");
        assert_eq!(first, 1, "offers are numbered from 1");
        assert!(media.answers_outstanding(first));
        assert!(media.answers_outstanding(0), "no id: whichever is out");
        assert!(!media.answers_outstanding(first + 1));
        // Unanswered, but not for long enough: it stays out, and no other goes.
        let almost = t0 + OFFER_TIMEOUT - Duration::from_millis(1);
        assert!(!media.offer_expired(almost));
        assert!(
            media
                .next_offer(almost, FINGERPRINT, &tracks, &mut new_ssrc)
                .is_none()
        );
        // Timed out: rolled back, and the same change offered again, numbered anew.
        let late = t0 + OFFER_TIMEOUT;
        assert!(media.offer_expired(late));
        let (second, second_offer) = media
            .next_offer(late, FINGERPRINT, &tracks, &mut new_ssrc)
            .expect("offered again");
        assert!(second > first, "{second} after {first}");
        let mids = |o: &SessionDescription| -> Vec<Option<String>> {
            o.media.iter().map(|m| m.mid().map(str::to_owned)).collect()
        };
        assert_eq!(mids(&first_offer), mids(&second_offer), "the same sections");
        // An answer to the first is stale; one to the second, or without an id, is
        // not.
        assert!(!media.answers_outstanding(first));
        assert!(media.answers_outstanding(second));
        assert!(media.answers_outstanding(0));
        assert_eq!(media.outstanding_id(), second);
        // Once nothing is out, only an answer without an id gets through (to be
        // refused for want of an offer, as before ids).
        media.negotiation.rollback();
        assert!(!media.answers_outstanding(second));
        assert!(media.answers_outstanding(0));
        assert_eq!(media.outstanding_id(), 0);
    }

    #[test]
    fn offer_ids_are_never_zero() {
        let (mut media, _) = answered_participant();
        media.offer_id = u32::MAX;
        assert_eq!(media.next_offer_id(), 1);
        media.offer_id = 41;
        assert_eq!(media.next_offer_id(), 42);
    }
}
