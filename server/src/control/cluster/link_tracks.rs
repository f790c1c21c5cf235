//! Tracks and participants across a cascaded room's links: each node sends its own
//! participants' tracks to every other node hosting the room, over their link,
//! once, and tells it who its participants are.
//!
//! - **Sending.** Every [`super::cascade::TICK`], for each link, the node compares
//!   the tracks its participants publish in the room with those the link carries.
//!   A new one is subscribed by the link's peer (`Command::Subscribe`, mirrored to
//!   the link's shard first if published on another), under SSRCs drawn for the
//!   link; one gone leaves with its publisher. When the list or the node's
//!   participants changed, or the other node has not yet taken them all, both
//!   lists go to the other node (`NodeService.LinkTracks`), again every tick until
//!   they are taken, and every [`LINK_TRACKS_REFRESH`] besides.
//! - **Receiving.** A LinkTracks call makes the listed tracks the link peer's
//!   publications here (`Command::Publish` with the announced SSRCs, at most
//!   [`MAX_NEW_LINK_TRACKS`] new ones a call) and unpublishes those no longer
//!   listed. The room sees the listed participants among its own (join pages,
//!   JOINED, UPDATED and LEFT) and hears PUBLISHED, UNPUBLISHED, MUTED and UNMUTED
//!   under the other node's participant's identity; its participants get offers
//!   for the tracks as for any. Keyframe requests and NACKs from this node's
//!   subscribers go back over the link as a subscriber's would to a publisher.
//! - **One hop.** Only tracks of a node's own participants go out: a track that came
//!   over a link never leaves on another. With every pair of hosts linked, each
//!   track crosses each link to another node once (`rtp_received_from_links`
//!   counts what arrives).
//! - **The link's RTP.** Payload types [`LINK_PAYLOAD_TYPE`] and
//!   [`LINK_RTX_PAYLOAD_TYPE`] for every track, the publisher's format parameters;
//!   no header extension but the audio level (RFC 6464) of audio, as id
//!   [`LINK_AUDIO_LEVEL_ID`]; NACK and PLI. Each stream of a simulcast track
//!   crosses under SSRCs of its own (the link's peer takes each as a subscription
//!   of its own, `SubscriptionSpec::stream`), and the other node publishes the
//!   track with those streams: each of its subscribers is sent the stream chosen
//!   for it there, as for a publisher of its own.
//!
//! Lock order: the room directory, then the members, then the links.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use shoal_components::media::{
    ExtensionIds, FeedbackKinds, LayerSpec, MAX_LAYERS, SubscriptionSpec, TrackId, TrackKind,
    TrackSpec,
};
use shoal_components::peer::PeerId;
use shoal_components::sdp::{self, Codec, MediaKind, SessionDescription, TrackSource};
use shoal_proto::v1::{self, participant_event, signal_response, track_event};
use shoal_systems::Command;
use tonic::{Code, Status};

use super::{Cluster, NodeRecord};
use crate::control::grpc::ControlState;
use crate::control::media::{
    RemoteTrack, RoomTrack, mime_type, payload_format, track_kind, track_name,
};
use crate::control::participants::Members;
use crate::control::rooms::{NameKind, validate_metadata, validate_name};

/// The audio level extension's id on a link (RFC 6464; RFC 8285 §4.2 one-byte
/// ids are 1 to 14).
pub const LINK_AUDIO_LEVEL_ID: u8 = 1;
/// Tracks one LinkTracks call may list: as many as a link's peer may publish.
pub const MAX_LINK_TRACKS: usize = shoal_components::shared::MAX_LINK_TRACKS;
/// Participants one LinkTracks call may list.
pub const MAX_LINK_PARTICIPANTS: usize = 4096;
/// New tracks one LinkTracks call publishes at most, and new tracks a link's peer
/// takes on per tick: each is a few shard commands, and a shard's queue holds
/// [`crate::driver::COMMAND_QUEUE_LEN`].
pub const MAX_NEW_LINK_TRACKS: usize = 64;
/// The payload type every track has on a link: each track is told apart by its
/// SSRC, and the link's subscription rewrites the publisher's own.
pub const LINK_PAYLOAD_TYPE: u8 = 96;
/// The payload type of every track's RTX on a link (RFC 4588).
pub const LINK_RTX_PAYLOAD_TYPE: u8 = 97;
/// How often the lists go to the other node though nothing changed, so that a node
/// that lost them (a link replaced on its side) has them again.
const LINK_TRACKS_REFRESH: Duration = Duration::from_secs(10);
/// SSRCs drawn for one track before giving up until the next tick.
const SSRC_DRAWS: usize = 16;
/// The longest `fmtp` a link track may carry.
const MAX_FMTP: usize = 1024;
/// How long a LinkTracks call may take.
const LINK_TRACKS_TIMEOUT: Duration = Duration::from_secs(5);

/// The feedback each side of a link does for its tracks.
const LINK_FEEDBACK: FeedbackKinds = FeedbackKinds {
    nack: true,
    pli: true,
    fir: false,
    transport_cc: false,
    remb: false,
};

/// What a link carries of this node's tracks and participants.
#[derive(Debug, Default)]
pub struct Sent {
    /// Each track, as the other node is told of it.
    tracks: BTreeMap<TrackId, v1::LinkTrack>,
    /// The participants, as the other node is told of them.
    participants: Vec<v1::LinkParticipant>,
    /// Tracks the other node could not take (logged once): not sent.
    refused: HashSet<TrackId>,
    /// When the other node took the lists as they are now.
    told: Option<Instant>,
}

/// The lists one LinkTracks call carries.
#[derive(Clone, Debug, PartialEq)]
struct Lists {
    tracks: Vec<v1::LinkTrack>,
    participants: Vec<v1::LinkParticipant>,
}

/// The header extensions a link's packets of a `kind` track carry.
fn link_extensions(kind: TrackKind) -> ExtensionIds {
    ExtensionIds {
        audio_level: (kind == TrackKind::Audio).then_some(LINK_AUDIO_LEVEL_ID),
        ..ExtensionIds::default()
    }
}

/// Sends this node's tracks of `room` over its link to `node`, if there is one:
/// the link's peer takes new ones, and the other node hears the list when it
/// changed. Failures are logged and tried again next tick.
pub async fn send(state: &Arc<ControlState>, cluster: &Cluster, room: &str, node: &NodeRecord) {
    let Some(lists) = state.link_lists(room, &node.id) else {
        return;
    };
    // Every node is configured alike: the other takes calls of this size.
    let limit = cluster.settings().max_message_bytes;
    let list_id = (u64::from(state.random_ssrc()) << 32) | u64::from(state.random_ssrc());
    let Some(calls) = calls(room, cluster.node_id(), &lists, limit, list_id) else {
        tracing::warn!(
            event = "cascade_lists_too_large",
            room,
            node = node.id.as_str(),
            "a track or participant of the room exceeds --max-grpc-message-bytes; \
             the lists are not sent"
        );
        return;
    };
    let mut outcome = Err(Status::internal("no call"));
    for body in calls {
        outcome = super::cascade::call_node(
            state,
            cluster,
            room,
            node,
            body,
            LINK_TRACKS_TIMEOUT,
            |mut c, r| async move { c.link_tracks(r).await },
        )
        .await;
        if outcome.is_err() {
            // The next tick sends the lists again, from their first part.
            break;
        }
    }
    match outcome {
        // All of it published there (a call publishes a bounded number of new
        // tracks; the rest go with the next).
        Ok(r) if r.tracks as usize == lists.tracks.len() => {
            if let Some(link) = state
                .links()
                .open
                .get_mut(&(room.to_owned(), node.id.clone()))
                && link.sent.lists() == lists
            {
                link.sent.told = Some(Instant::now());
            }
        }
        Ok(_) => {}
        // The other side's link is not in its tables yet (it is being opened).
        Err(e) if e.code() == Code::FailedPrecondition => tracing::debug!(
            room,
            node = node.id.as_str(),
            error = e.message(),
            "the node does not take the link's tracks yet"
        ),
        Err(e) => tracing::warn!(
            event = "cascade_tracks_failed",
            room,
            node = node.id.as_str(),
            error = e.message(),
            "could not tell the node of the room's tracks; trying again"
        ),
    }
}

/// The LinkTracks calls that carry `lists` of `room` from node `from`, each at most
/// `limit` bytes encoded: one call when the lists fit, else the parts of list
/// `list_id`. `None` when one track or participant alone would not fit.
fn calls(
    room: &str,
    from: &str,
    lists: &Lists,
    limit: usize,
    list_id: u64,
) -> Option<Vec<v1::LinkTracksRequest>> {
    // An item's bytes in a repeated field: its tag, length and body.
    let framed = |len: usize| 1 + prost::encoding::encoded_len_varint(len as u64) + len;
    let tracks = lists
        .tracks
        .iter()
        .map(|t| framed(prost::Message::encoded_len(t)));
    let people = lists
        .participants
        .iter()
        .map(|p| framed(prost::Message::encoded_len(p)));
    let sizes: Vec<usize> = tracks.chain(people).collect();
    let head = v1::LinkTracksRequest {
        room: room.to_owned(),
        node_id: from.to_owned(),
        ..v1::LinkTracksRequest::default()
    };
    if prost::Message::encoded_len(&head) + sizes.iter().sum::<usize>() <= limit {
        return Some(vec![v1::LinkTracksRequest {
            tracks: lists.tracks.clone(),
            participants: lists.participants.clone(),
            ..head
        }]);
    }
    let empty = v1::LinkTracksRequest {
        list_id,
        part: 0,
        more: true,
        ..head
    };
    // What a part holds besides its items, with the largest part number.
    let base = prost::Message::encoded_len(&v1::LinkTracksRequest {
        part: u32::MAX,
        ..empty.clone()
    });
    // The tracks, then the participants, each in the part being filled while it
    // fits there.
    let tracks = lists.tracks.iter().map(|t| (Some(t), None));
    let people = lists.participants.iter().map(|p| (None, Some(p)));
    let mut parts = vec![empty.clone()];
    let mut bytes = base;
    for ((track, person), len) in tracks.chain(people).zip(sizes) {
        if base + len > limit {
            return None;
        }
        if bytes + len > limit {
            parts.push(empty.clone());
            bytes = base;
        }
        bytes += len;
        let part = parts.last_mut()?;
        part.tracks.extend(track.cloned());
        part.participants.extend(person.cloned());
    }
    let count = parts.len();
    for (i, part) in parts.iter_mut().enumerate() {
        part.part = u32::try_from(i).ok()?;
        part.more = i + 1 < count;
    }
    Some(parts)
}

/// A list the other node sends in parts, gathered until its last part.
#[derive(Debug, Default)]
pub struct Gathered {
    list_id: u64,
    /// The part that is to come next.
    next: u32,
    tracks: Vec<v1::LinkTrack>,
    participants: Vec<v1::LinkParticipant>,
}

/// Takes one LinkTracks call's lists into `slot`: the whole lists when the call
/// brings a list in one or its last part, `None` while more parts are to come.
/// A part that does not follow the one before drops what was gathered; parts past
/// the lists' bounds, or a part but the last with nothing in it, are refused.
fn gather(
    slot: &mut Option<Gathered>,
    request: v1::LinkTracksRequest,
) -> Result<Option<(Vec<v1::LinkTrack>, Vec<v1::LinkParticipant>)>, Status> {
    if request.part == 0 && !request.more {
        *slot = None;
        return Ok(Some((request.tracks, request.participants)));
    }
    let follows = slot
        .as_ref()
        .is_some_and(|g| g.list_id == request.list_id && g.next == request.part);
    if !follows {
        *slot = None;
        if request.part != 0 {
            return Err(Status::failed_precondition(format!(
                "part {} of list {} does not follow the parts taken",
                request.part, request.list_id
            )));
        }
    }
    if request.more && request.tracks.is_empty() && request.participants.is_empty() {
        *slot = None;
        return Err(Status::invalid_argument("a part but the last is empty"));
    }
    // Each item checked as it comes, so that what is gathered is bounded in bytes
    // as a list is (the lists are checked whole again with the last part).
    let checked = request
        .tracks
        .iter()
        .try_for_each(|t| check_link_track(t).map(drop))
        .and_then(|()| {
            request
                .participants
                .iter()
                .try_for_each(check_link_participant)
        });
    if let Err(e) = checked {
        *slot = None;
        return Err(e);
    }
    let g = slot.get_or_insert_with(|| Gathered {
        list_id: request.list_id,
        ..Gathered::default()
    });
    g.tracks.extend(request.tracks);
    g.participants.extend(request.participants);
    g.next = g.next.saturating_add(1);
    if g.tracks.len() > MAX_LINK_TRACKS || g.participants.len() > MAX_LINK_PARTICIPANTS {
        *slot = None;
        return Err(Status::invalid_argument(format!(
            "a list in parts has more than {MAX_LINK_TRACKS} tracks or \
             {MAX_LINK_PARTICIPANTS} participants"
        )));
    }
    if request.more {
        return Ok(None);
    }
    Ok(slot.take().map(|g| (g.tracks, g.participants)))
}

impl Sent {
    /// The lists as the other node is to be told them.
    fn lists(&self) -> Lists {
        Lists {
            tracks: self.tracks.values().cloned().collect(),
            participants: self.participants.clone(),
        }
    }
}

impl ControlState {
    /// Brings what `room`'s link to `node` carries in line with this node's
    /// participants there and the tracks they publish; the lists to tell the other
    /// node, when it has not taken them yet (or not lately). `None` without such a
    /// link, or when it has.
    fn link_lists(&self, room: &str, node: &str) -> Option<Lists> {
        let rooms = self.rooms();
        let mut members = self.members();
        let mut links = self.links();
        let link = links
            .open
            .get_mut(&(room.to_owned(), node.to_owned()))
            .filter(|l| l.placed)?;
        let shard = members.by_peer.get(&link.peer)?.shard;
        let r = rooms.get(room).ok()?;
        // Its own participants and their tracks: never what came over a link (a
        // link's member is hidden and publishes nothing of its own).
        let mut people = Vec::new();
        let mut own: Vec<(RoomTrack, String)> = Vec::new();
        for p in r.participants() {
            let Some(m) = members.by_peer.get(&p.peer) else {
                continue;
            };
            if !m.permissions.hidden {
                let shown = self.participant_message(p);
                people.push(v1::LinkParticipant {
                    identity: shown.identity,
                    name: shown.name,
                    metadata: shown.metadata,
                    joined_at_unix_ms: shown.joined_at_unix_ms,
                });
            }
            for t in m.media.iter().flat_map(|media| &media.tracks) {
                own.push((t.clone(), m.identity.clone()));
            }
        }
        people.sort_by(|a, b| a.identity.cmp(&b.identity));
        people.truncate(MAX_LINK_PARTICIPANTS);
        let sent = &mut link.sent;
        let before = sent.tracks.len();
        sent.tracks
            .retain(|id, _| own.iter().any(|(t, _)| t.id == *id));
        sent.refused
            .retain(|id| own.iter().any(|(t, _)| t.id == *id));
        let mut changed = sent.tracks.len() != before || sent.participants != people;
        sent.participants = people;
        let mut commands = Vec::new();
        let mut added = 0;
        for (t, identity) in &own {
            if let Some(told) = sent.tracks.get_mut(&t.id) {
                changed |= told.muted != t.muted;
                told.muted = t.muted;
                continue;
            }
            // A list the other node would refuse whole is never sent: past
            // MAX_LINK_TRACKS, tracks wait until others leave.
            if sent.refused.contains(&t.id)
                || added == MAX_NEW_LINK_TRACKS
                || sent.tracks.len() >= MAX_LINK_TRACKS
            {
                continue;
            }
            let mut used: HashSet<u32> = sent.tracks.values().flat_map(link_ssrcs).collect();
            let rtx = t.source.codec.rtx_payload_type.is_some();
            // Each stream of a simulcast track crosses under SSRCs of its own.
            let streams = t.spec.layers.len().max(1);
            let drawn: Option<Vec<(u32, Option<u32>)>> = (0..streams)
                .map(|_| {
                    let (ssrc, rtx_ssrc) = self.link_ssrcs(&used, rtx)?;
                    used.extend(std::iter::once(ssrc).chain(rtx_ssrc));
                    Some((ssrc, rtx_ssrc))
                })
                .collect();
            // Tried again next tick.
            let Some(drawn) = drawn else { continue };
            let [(ssrc, rtx_ssrc), ref further @ ..] = drawn[..] else {
                continue;
            };
            let listed = v1::LinkTrack {
                id: t.source.id.clone(),
                participant_identity: identity.clone(),
                stream_id: t.source.stream_id.clone(),
                mime_type: mime_type(t.source.codec.name).to_owned(),
                payload_type: u32::from(LINK_PAYLOAD_TYPE),
                rtx_payload_type: if rtx {
                    u32::from(LINK_RTX_PAYLOAD_TYPE)
                } else {
                    0
                },
                fmtp: t.source.codec.fmtp.clone().unwrap_or_default(),
                ssrc,
                rtx_ssrc: rtx_ssrc.unwrap_or(0),
                muted: t.muted,
                streams: further
                    .iter()
                    .map(|&(ssrc, rtx_ssrc)| v1::LinkStream {
                        ssrc,
                        rtx_ssrc: rtx_ssrc.unwrap_or(0),
                    })
                    .collect(),
            };
            // What the other node would refuse (and with it the whole list) is
            // not sent: its participants do without that track.
            if let Err(e) = check_link_track(&listed) {
                tracing::warn!(
                    event = "cascade_track_not_sent",
                    room,
                    node,
                    track = t.source.id.as_str(),
                    error = e.message(),
                    "a track cannot cross the link"
                );
                sent.refused.insert(t.id);
                continue;
            }
            members.mirror(t, shard, &mut commands);
            for (i, &(ssrc, rtx_ssrc)) in drawn.iter().enumerate() {
                commands.push((
                    shard,
                    Command::Subscribe {
                        peer: link.peer,
                        subscription: SubscriptionSpec {
                            track: t.id,
                            mid: t.source.id.clone(),
                            ssrc,
                            rtx_ssrc,
                            payload_type: LINK_PAYLOAD_TYPE,
                            rtx_payload_type: rtx.then_some(LINK_RTX_PAYLOAD_TYPE),
                            extensions: link_extensions(t.spec.kind),
                            feedback: LINK_FEEDBACK,
                            cname: t.source.stream_id.clone(),
                            // The other node chooses among the streams for each
                            // of its subscribers.
                            stream: (streams > 1).then_some(i as u8),
                        },
                    },
                ));
            }
            sent.tracks.insert(t.id, listed);
            added += 1;
            changed = true;
        }
        if changed
            || sent
                .told
                .is_some_and(|at| at.elapsed() >= LINK_TRACKS_REFRESH)
        {
            sent.told = None;
        }
        let lists = sent.told.is_none().then(|| sent.lists());
        drop(links);
        self.send_media_commands(commands);
        lists
    }

    /// A new SSRC for a track on a link, and one for its RTX when `rtx`, none in
    /// `used` or 0; `None` if the generator keeps giving such.
    fn link_ssrcs(&self, used: &HashSet<u32>, rtx: bool) -> Option<(u32, Option<u32>)> {
        let draw = |not: u32| {
            (0..SSRC_DRAWS)
                .map(|_| self.random_ssrc())
                .find(|s| *s != 0 && *s != not && !used.contains(s))
        };
        let ssrc = draw(0)?;
        let rtx_ssrc = if rtx { Some(draw(ssrc)?) } else { None };
        Some((ssrc, rtx_ssrc))
    }

    /// The answering side of LinkTracks: `request` (authorised already) from node
    /// `request.node_id` for `room` (normalised). The number of tracks the link
    /// publishes here now, and the participants here that a later join of their
    /// identity on the other node replaces (for the caller to let leave with
    /// DUPLICATE_IDENTITY).
    pub(crate) fn take_link_tracks(
        &self,
        room: &str,
        request: v1::LinkTracksRequest,
    ) -> Result<(usize, Vec<PeerId>), Status> {
        let node = request.node_id.clone();
        // A list in parts is taken when its last part comes.
        let gathered = match self
            .links()
            .open
            .get_mut(&(room.to_owned(), node.clone()))
            .filter(|l| l.placed)
        {
            Some(link) => gather(&mut link.gathered, request)?,
            None => {
                return Err(Status::failed_precondition(format!(
                    "no link of room {room:?} to node {node:?} here (yet)"
                )));
            }
        };
        let Some((tracks, participants)) = gathered else {
            return Ok((0, Vec::new()));
        };
        let listed = check_link_tracks(tracks)?;
        let people = check_link_participants(participants)?;
        let outcome = {
            let rooms = self.rooms();
            let mut members = self.members();
            let Some(peer) = self
                .links()
                .open
                .get(&(room.to_owned(), node.clone()))
                .filter(|l| l.placed)
                .map(|l| l.peer)
            else {
                return Err(Status::failed_precondition(format!(
                    "no link of room {room:?} to node {node:?} here (yet)"
                )));
            };
            // This node's participants under identities the other node lists, or
            // listed before: each shadows the other node's of its identity, and of
            // two joins of one identity the later stays (by join time, then node id;
            // the other node decides the same from the same figures).
            let here: HashMap<String, (PeerId, u64)> = {
                let before = members.by_peer.get(&peer).map(|m| m.remote.as_slice());
                let listed = people.iter().chain(before.unwrap_or_default());
                match rooms.get(room) {
                    Ok(r) => listed
                        .filter_map(|p| {
                            let l = members.shown_here(r, &p.identity)?;
                            let at = self.clock().unix_ms(l.joined_at);
                            Some((p.identity.clone(), (l.peer, at)))
                        })
                        .collect(),
                    Err(_) => HashMap::new(),
                }
            };
            let me = self.cluster().map(|c| c.node_id().to_owned());
            let replaced: Vec<PeerId> = people
                .iter()
                .filter_map(|p| {
                    let &(local, at) = here.get(&p.identity)?;
                    let later = (p.joined_at_unix_ms, node.as_str()) > (at, me.as_deref()?);
                    later.then_some(local)
                })
                .collect();
            let shown = |identity: &str| !here.contains_key(identity);
            let member = members
                .by_peer
                .get_mut(&peer)
                .ok_or_else(|| Status::failed_precondition("the link's participant has left"))?;
            let shard = member.shard;
            let mut commands = Vec::new();
            let mut events = Vec::new();
            let mut gone = Vec::new();
            let before = std::mem::replace(&mut member.remote, people);
            let diff = diff_participants(&before, &member.remote);
            // Nothing is told of those shadowed here (see `here`). One that joined
            // again there (a new join time) is another session: it leaves first,
            // its old tracks go, and it joins again before its new tracks come.
            for p in diff.rejoined.iter().filter(|p| shown(&p.identity)) {
                events.push(remote_event(participant_event::Kind::Left, p, &[]));
            }
            // Gone, or changed in what the shard was told: unpublished (a changed
            // one is published again below).
            member.relayed.retain(|t| {
                let keep = listed.iter().any(|(l, _)| same_stream(t, l));
                if !keep {
                    gone.push(t.clone());
                }
                keep
            });
            for t in &gone {
                commands.push((shard, Command::Unpublish { peer, track: t.id }));
                if shown(t.publisher("")) {
                    events.push(track_message(track_event::Kind::Unpublished, t));
                }
            }
            // Who came: announced before their tracks.
            let came = diff.joined.iter().chain(&diff.rejoined);
            for p in came.filter(|p| shown(&p.identity)) {
                events.push(remote_event(participant_event::Kind::Joined, p, &[]));
            }
            let mut added = 0;
            for (l, codec) in listed {
                if let Some(t) = member
                    .relayed
                    .iter_mut()
                    .find(|t| t.remote.as_ref().is_some_and(|r| r.origin == l.id))
                {
                    if t.muted != l.muted {
                        t.muted = l.muted;
                        // The state and the event only: the shard forwards what
                        // arrives, and the other node's publisher decides what that
                        // is (a track muted here would drop audio after an unmute
                        // until this node heard of it).
                        let kind = if l.muted {
                            track_event::Kind::Muted
                        } else {
                            track_event::Kind::Unmuted
                        };
                        if shown(&l.participant_identity) {
                            events.push(track_message(kind, t));
                        }
                    }
                    continue;
                }
                // The rest with the next call.
                if added == MAX_NEW_LINK_TRACKS {
                    continue;
                }
                added += 1;
                let id = TrackId(self.next_track.fetch_add(1, Ordering::Relaxed));
                let kind = if codec.name.is_video() {
                    MediaKind::Video
                } else {
                    MediaKind::Audio
                };
                let spec = TrackSpec {
                    id,
                    kind: track_kind(&kind),
                    mid: l.id.clone(),
                    ssrc: Some(l.ssrc),
                    rtx_ssrc: (l.rtx_ssrc != 0).then_some(l.rtx_ssrc),
                    payload_type: codec.payload_type,
                    rtx_payload_type: codec.rtx_payload_type,
                    clock_rate: codec.name.clock_rate(),
                    extensions: link_extensions(track_kind(&kind)),
                    feedback: LINK_FEEDBACK,
                    format: payload_format(codec.name),
                    layers: link_layers(&l),
                };
                commands.push((
                    shard,
                    Command::Publish {
                        peer,
                        track: spec.clone(),
                    },
                ));
                let t = RoomTrack {
                    id,
                    shard,
                    spec,
                    mid: l.id.clone(),
                    source: TrackSource {
                        id: track_name(id),
                        kind,
                        stream_id: l.stream_id.clone(),
                        codec,
                    },
                    muted: l.muted,
                    remote: Some(RemoteTrack {
                        identity: l.participant_identity.clone(),
                        origin: l.id.clone(),
                    }),
                };
                if shown(&l.participant_identity) {
                    events.push(track_message(track_event::Kind::Published, &t));
                }
                member.relayed.push(t);
            }
            for p in diff.updated.iter().filter(|p| shown(&p.identity)) {
                events.push(remote_event(
                    participant_event::Kind::Updated,
                    p,
                    &member.relayed,
                ));
            }
            let mut gone_people = Vec::new();
            for p in diff.left.iter().filter(|p| shown(&p.identity)) {
                events.push(remote_event(participant_event::Kind::Left, p, &[]));
                gone_people.push(p.identity.clone());
            }
            let count = member.relayed.len();
            let tracks_changed = added > 0 || !gone.is_empty();
            for t in &gone {
                for at in members.mirrors.remove(&t.id).unwrap_or_default() {
                    commands.push((at, Command::DropMirror { track: t.id }));
                }
            }
            self.send_media_commands(commands);
            // The link's member is hidden: the room hears of the other node's
            // participants and tracks as of their own, from nobody here.
            for event in events {
                members.tell_listeners(room, None, event);
            }
            // One of a third node under the identity of one gone stays.
            for identity in &gone_people {
                if let Some(event) = self.remote_joined(&members, room, identity) {
                    members.tell_listeners(room, None, event);
                }
            }
            drop(rooms);
            (count, tracks_changed, replaced)
        };
        let (count, tracks_changed, replaced) = outcome;
        if tracks_changed {
            self.offer_to_room(room, None);
        }
        Ok((count, replaced))
    }

    /// A JOINED for the participant of another node that `room`'s clients are to
    /// know as `identity` now that no participant here shadows it, if a link of
    /// the room lists one.
    pub(crate) fn remote_joined(
        &self,
        members: &Members,
        room: &str,
        identity: &str,
    ) -> Option<signal_response::Message> {
        let links = self.links().peers_in(room);
        links
            .iter()
            .filter_map(|peer| members.by_peer.get(peer))
            .find_map(|m| {
                let i = m
                    .remote
                    .binary_search_by(|p| p.identity.as_str().cmp(identity))
                    .ok()?;
                Some(remote_event(
                    participant_event::Kind::Joined,
                    &m.remote[i],
                    &m.relayed,
                ))
            })
    }
}

/// How a node's list of its participants changed.
#[derive(Debug, Default)]
struct PeopleDiff<'a> {
    /// Listed now, not before.
    joined: Vec<&'a v1::LinkParticipant>,
    /// Listed before and now, with another join time: another session.
    rejoined: Vec<&'a v1::LinkParticipant>,
    /// Listed before and now, with another name or metadata.
    updated: Vec<&'a v1::LinkParticipant>,
    /// Listed before, not now.
    left: Vec<&'a v1::LinkParticipant>,
}

/// How `after` differs from `before` (both sorted by identity); the participants
/// as `after` lists them, but those that left.
fn diff_participants<'a>(
    before: &'a [v1::LinkParticipant],
    after: &'a [v1::LinkParticipant],
) -> PeopleDiff<'a> {
    let find = |list: &'a [v1::LinkParticipant], identity: &str| {
        list.binary_search_by(|p| p.identity.as_str().cmp(identity))
            .ok()
            .map(|i| &list[i])
    };
    let mut diff = PeopleDiff::default();
    for p in after {
        match find(before, &p.identity) {
            None => diff.joined.push(p),
            Some(b) if b.joined_at_unix_ms != p.joined_at_unix_ms => diff.rejoined.push(p),
            Some(b) if b.name != p.name || b.metadata != p.metadata => diff.updated.push(p),
            Some(_) => {}
        }
    }
    diff.left = before
        .iter()
        .filter(|p| find(after, &p.identity).is_none())
        .collect();
    diff
}

/// A participant of another node as this node's clients see it: no shard or peer
/// here, and the tracks among `relayed` that it publishes.
pub(crate) fn remote_participant(
    p: &v1::LinkParticipant,
    relayed: &[RoomTrack],
) -> v1::Participant {
    v1::Participant {
        identity: p.identity.clone(),
        name: p.name.clone(),
        metadata: p.metadata.clone(),
        state: v1::ParticipantState::Active.into(),
        joined_at_unix_ms: p.joined_at_unix_ms,
        tracks: relayed
            .iter()
            .filter(|t| t.publisher("") == p.identity)
            .map(RoomTrack::info)
            .collect(),
        ..v1::Participant::default()
    }
}

/// A participant event about `p` of another node (its tracks from `relayed`); a
/// LEFT says only who, as for a participant of this node.
pub(crate) fn remote_event(
    kind: participant_event::Kind,
    p: &v1::LinkParticipant,
    relayed: &[RoomTrack],
) -> signal_response::Message {
    let participant = if kind == participant_event::Kind::Left {
        v1::Participant {
            identity: p.identity.clone(),
            state: v1::ParticipantState::Disconnected.into(),
            ..v1::Participant::default()
        }
    } else {
        remote_participant(p, relayed)
    };
    signal_response::Message::Participant(v1::ParticipantEvent {
        kind: kind.into(),
        participant: Some(participant),
        reason: v1::DisconnectReason::Unspecified.into(),
    })
}

/// A track event about `t`, under its publisher's identity.
fn track_message(kind: track_event::Kind, t: &RoomTrack) -> signal_response::Message {
    signal_response::Message::Track(v1::TrackEvent {
        kind: kind.into(),
        participant_identity: t.publisher("").to_owned(),
        track: Some(t.info()),
    })
}

/// Whether `t`, published here from a link, is the stream `l` announces, as the
/// shard was told it.
fn same_stream(t: &RoomTrack, l: &v1::LinkTrack) -> bool {
    t.remote.as_ref().is_some_and(|r| r.origin == l.id)
        && t.spec.ssrc == Some(l.ssrc)
        && t.spec.rtx_ssrc == (l.rtx_ssrc != 0).then_some(l.rtx_ssrc)
        && u32::from(t.spec.payload_type) == l.payload_type
        && t.spec.rtx_payload_type.map_or(0, u32::from) == l.rtx_payload_type
        && t.source.stream_id == l.stream_id
        && t.source.codec.fmtp.as_deref().unwrap_or("") == l.fmtp
        && mime_type(t.source.codec.name) == l.mime_type
        && t.remote
            .as_ref()
            .is_some_and(|r| r.identity == l.participant_identity)
        && t.spec.layers == link_layers(l)
}

/// Every SSRC link track `l` is sent with: each stream's and its RTX's (0 where
/// there is no RTX).
fn link_ssrcs(l: &v1::LinkTrack) -> impl Iterator<Item = u32> + '_ {
    [l.ssrc, l.rtx_ssrc]
        .into_iter()
        .chain(l.streams.iter().flat_map(|s| [s.ssrc, s.rtx_ssrc]))
}

/// The simulcast streams link track `l` is published with here: none for a track of
/// one stream, else each with its SSRCs, the first the track's. The link's packets
/// carry no rid: the streams are told apart by their SSRCs, as an
/// `a=ssrc-group:SIM` publisher's are.
fn link_layers(l: &v1::LinkTrack) -> Vec<LayerSpec> {
    if l.streams.is_empty() {
        return Vec::new();
    }
    let rtx = |r: u32| (r != 0).then_some(r);
    std::iter::once((l.ssrc, l.rtx_ssrc))
        .chain(l.streams.iter().map(|s| (s.ssrc, s.rtx_ssrc)))
        .map(|(ssrc, rtx_ssrc)| LayerSpec {
            rid: None,
            ssrc: Some(ssrc),
            rtx_ssrc: rtx(rtx_ssrc),
        })
        .collect()
}

/// INVALID_ARGUMENT for a malformed track `l`.
fn bad(l: &v1::LinkTrack, what: &str) -> Status {
    Status::invalid_argument(format!("link track {:?}: {what}", l.id))
}

/// Checks a LinkTracks list, as untrusted as any input: each track with the codec
/// it names, or INVALID_ARGUMENT for the first that cannot be published.
fn check_link_tracks(tracks: Vec<v1::LinkTrack>) -> Result<Vec<(v1::LinkTrack, Codec)>, Status> {
    if tracks.len() > MAX_LINK_TRACKS {
        return Err(Status::invalid_argument(format!(
            "{} link tracks, more than {MAX_LINK_TRACKS}",
            tracks.len()
        )));
    }
    let mut ids = HashSet::new();
    let mut ssrcs = HashSet::new();
    let mut out = Vec::with_capacity(tracks.len());
    for l in tracks {
        let codec = check_link_track(&l)?;
        if !ids.insert(l.id.clone()) {
            return Err(bad(&l, "the id is listed twice"));
        }
        if !link_ssrcs(&l).filter(|&s| s != 0).all(|s| ssrcs.insert(s)) {
            return Err(bad(&l, "an SSRC is in use on the link"));
        }
        out.push((l, codec));
    }
    Ok(out)
}

/// Checks one link track on its own: the codec it names, or INVALID_ARGUMENT.
fn check_link_track(l: &v1::LinkTrack) -> Result<Codec, Status> {
    // RFC 8830 §2: an msid-id is 1*64token-char (RFC 8866 §9). The id becomes the
    // track's name here, and its media section's mid (RFC 8843 §5: tokens too).
    let token = |s: &str| {
        !s.is_empty()
            && s.len() <= 64
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`{|}~".contains(c))
    };
    if !token(&l.id) {
        return Err(bad(l, "the id is not 1 to 64 token characters"));
    }
    validate_name(&l.participant_identity, NameKind::Identity)
        .map_err(|e| bad(l, &e.to_string()))?;
    if !token(&l.stream_id) {
        return Err(bad(l, "the stream id is not 1 to 64 token characters"));
    }
    if l.ssrc == 0 || l.rtx_ssrc == l.ssrc {
        return Err(bad(l, "an SSRC is 0, or the RTX SSRC is the track's"));
    }
    if l.streams.len() >= MAX_LAYERS {
        return Err(bad(l, &format!("more than {MAX_LAYERS} simulcast streams")));
    }
    for s in &l.streams {
        if s.ssrc == 0 || s.rtx_ssrc == s.ssrc || (s.rtx_ssrc == 0) != (l.rtx_ssrc == 0) {
            return Err(bad(
                l,
                "a stream's SSRC is 0, its RTX SSRC is its own, or it has RTX \
                 where the track has none (or none where it has)",
            ));
        }
    }
    let codec = link_codec(l).ok_or_else(|| bad(l, "not a codec shoal forwards"))?;
    if !l.streams.is_empty() && !codec.name.is_video() {
        return Err(bad(l, "simulcast streams of a track that is not video"));
    }
    Ok(codec)
}

/// Checks a LinkTracks call's participants, as untrusted as any input: sorted by
/// identity, or INVALID_ARGUMENT for the first that is not a valid participant.
fn check_link_participants(
    mut people: Vec<v1::LinkParticipant>,
) -> Result<Vec<v1::LinkParticipant>, Status> {
    if people.len() > MAX_LINK_PARTICIPANTS {
        return Err(Status::invalid_argument(format!(
            "{} link participants, more than {MAX_LINK_PARTICIPANTS}",
            people.len()
        )));
    }
    for p in &people {
        check_link_participant(p)?;
    }
    people.sort_by(|a, b| a.identity.cmp(&b.identity));
    if let Some(w) = people.windows(2).find(|w| w[0].identity == w[1].identity) {
        return Err(refuse_participant(&w[0], "listed twice".to_owned()));
    }
    Ok(people)
}

fn refuse_participant(p: &v1::LinkParticipant, what: String) -> Status {
    Status::invalid_argument(format!("link participant {:?}: {what}", p.identity))
}

/// Checks one listed participant as a joiner's identity, name and metadata.
fn check_link_participant(p: &v1::LinkParticipant) -> Result<(), Status> {
    // Kept as they were given: the other node checked and normalised them.
    let identity = validate_name(&p.identity, NameKind::Identity)
        .map_err(|e| refuse_participant(p, e.to_string()))?;
    if identity != p.identity.as_str() {
        return Err(refuse_participant(
            p,
            "the identity is not in NFC".to_owned(),
        ));
    }
    if !p.name.is_empty() {
        validate_name(&p.name, NameKind::DisplayName)
            .map_err(|e| refuse_participant(p, e.to_string()))?;
    }
    validate_metadata(&p.metadata).map_err(|e| refuse_participant(p, e.to_string()))
}

/// The codec `l` names, read as a publisher's SDP section would be
/// ([`Codec::read`]: the same checks of payload types, rates and H.264 profiles).
fn link_codec(l: &v1::LinkTrack) -> Option<Codec> {
    let (kind, encoding) = match l.mime_type.as_str() {
        "audio/opus" => ("audio", "opus/48000/2"),
        "video/VP8" => ("video", "VP8/90000"),
        "video/H264" => ("video", "H264/90000"),
        _ => return None,
    };
    // RFC 3551 §3: dynamic payload types are 96 to 127; RTX's too (RFC 4588 §8.1).
    let dynamic = |pt: u32| (96..=127).contains(&pt);
    if !dynamic(l.payload_type)
        || (l.rtx_payload_type != 0
            && (!dynamic(l.rtx_payload_type) || l.rtx_payload_type == l.payload_type))
    {
        return None;
    }
    // Printable ASCII only: the parameters go into SDP lines as they are.
    if l.fmtp.len() > MAX_FMTP || !l.fmtp.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return None;
    }
    let (pt, rtx) = (l.payload_type, l.rtx_payload_type);
    let clock = if kind == "audio" { 48_000 } else { 90_000 };
    let mut section = String::from("v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\n");
    let formats = if rtx != 0 {
        format!("{pt} {rtx}")
    } else {
        pt.to_string()
    };
    section.push_str(&format!("m={kind} 9 UDP/TLS/RTP/SAVPF {formats}\r\n"));
    section.push_str(&format!("a=rtpmap:{pt} {encoding}\r\n"));
    if !l.fmtp.is_empty() {
        section.push_str(&format!("a=fmtp:{pt} {}\r\n", l.fmtp));
    }
    if rtx != 0 {
        section.push_str(&format!(
            "a=rtpmap:{rtx} rtx/{clock}\r\na=fmtp:{rtx} apt={pt}\r\n"
        ));
    }
    let sdp = SessionDescription::parse(&section).ok()?;
    let m = sdp.media.first()?;
    let pt = u8::try_from(pt).ok()?;
    let mut codec = Codec::read(m, pt)?;
    if rtx != 0 && codec.rtx_payload_type.is_none() {
        return None;
    }
    // What this node does for its subscribers, whatever the link does.
    codec.feedback = sdp::Feedback {
        nack: true,
        pli: true,
        fir: false,
        transport_cc: true,
        goog_remb: false,
    };
    Some(codec)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn track(id: &str, mime: &str, pt: u32, rtx: u32, fmtp: &str, ssrc: u32) -> v1::LinkTrack {
        v1::LinkTrack {
            id: id.to_owned(),
            participant_identity: "ann".to_owned(),
            stream_id: "s0123".to_owned(),
            mime_type: mime.to_owned(),
            payload_type: pt,
            rtx_payload_type: rtx,
            fmtp: fmtp.to_owned(),
            ssrc,
            rtx_ssrc: if rtx != 0 { ssrc + 1 } else { 0 },
            muted: false,
            streams: Vec::new(),
        }
    }

    #[test]
    fn link_codecs_are_read_as_sdp_would_be() {
        let opus = link_codec(&track(
            "TR1",
            "audio/opus",
            111,
            0,
            "minptime=10;useinbandfec=1",
            5,
        ))
        .expect("opus");
        assert_eq!(opus.name, sdp::CodecName::Opus);
        assert_eq!(opus.channels, Some(2));
        assert_eq!(opus.fmtp.as_deref(), Some("minptime=10;useinbandfec=1"));
        let vp8 = link_codec(&track("TR2", "video/VP8", 96, 97, "", 7)).expect("vp8");
        assert_eq!((vp8.payload_type, vp8.rtx_payload_type), (96, Some(97)));
        let h264 = "level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f";
        assert!(link_codec(&track("TR3", "video/H264", 102, 103, h264, 9)).is_some());
        // Mode 0 H.264, unknown codecs, static or clashing payload types, and
        // parameters that would break out of their SDP line are refused.
        let mode0 = "packetization-mode=0;profile-level-id=42e01f";
        assert!(link_codec(&track("TR4", "video/H264", 102, 0, mode0, 9)).is_none());
        assert!(link_codec(&track("TR5", "video/AV1", 96, 0, "", 9)).is_none());
        assert!(link_codec(&track("TR6", "audio/opus", 0, 0, "", 9)).is_none());
        assert!(link_codec(&track("TR7", "video/VP8", 96, 96, "", 9)).is_none());
        assert!(link_codec(&track("TR8", "video/VP8", 96, 300, "", 9)).is_none());
        let injected = "x=1\r\na=rtpmap:97 rtx/90000";
        assert!(link_codec(&track("TR9", "video/VP8", 96, 0, injected, 9)).is_none());
    }

    fn person(identity: &str, name: &str) -> v1::LinkParticipant {
        v1::LinkParticipant {
            identity: identity.to_owned(),
            name: name.to_owned(),
            ..v1::LinkParticipant::default()
        }
    }

    #[test]
    fn link_participants_are_checked_and_sorted() {
        let people =
            check_link_participants(vec![person("bob", ""), person("ann", "Ann")]).expect("fine");
        let ids: Vec<&str> = people.iter().map(|p| p.identity.as_str()).collect();
        assert_eq!(ids, ["ann", "bob"]);
        let refused = |people: Vec<v1::LinkParticipant>| {
            check_link_participants(people).expect_err("refused").code()
        };
        assert_eq!(
            refused(vec![person("ann", ""), person("ann", "again")]),
            Code::InvalidArgument
        );
        assert_eq!(refused(vec![person("", "")]), Code::InvalidArgument);
        assert_eq!(refused(vec![person("a\nb", "")]), Code::InvalidArgument);
        // Not in NFC: the other node would have normalised it.
        assert_eq!(refused(vec![person("e\u{301}", "")]), Code::InvalidArgument);
        assert_eq!(refused(vec![person("ann", "\u{7}")]), Code::InvalidArgument);
        let mut heavy = person("ann", "");
        heavy.metadata = "m".repeat(crate::control::rooms::MAX_METADATA_BYTES + 1);
        assert_eq!(refused(vec![heavy]), Code::InvalidArgument);
        let many = (0..=MAX_LINK_PARTICIPANTS)
            .map(|i| person(&format!("p{i}"), ""))
            .collect();
        assert_eq!(refused(many), Code::InvalidArgument);
    }

    #[test]
    fn participant_lists_differ_by_who_came_changed_and_went() {
        let before = [
            person("ann", ""),
            person("bob", "Bob"),
            person("cid", ""),
            person("eve", "Eve"),
        ];
        let eve_again = v1::LinkParticipant {
            joined_at_unix_ms: 7,
            ..person("eve", "Eve")
        };
        let after = [
            person("ann", ""),
            person("bob", "Robert"),
            person("dee", ""),
            eve_again,
        ];
        let d = diff_participants(&before, &after);
        let ids = |l: &[&v1::LinkParticipant]| -> Vec<String> {
            l.iter().map(|p| p.identity.clone()).collect()
        };
        assert_eq!(ids(&d.joined), ["dee"]);
        assert_eq!(ids(&d.rejoined), ["eve"]);
        assert_eq!(ids(&d.updated), ["bob"]);
        assert_eq!(ids(&d.left), ["cid"]);
        let d = diff_participants(&after, &after);
        assert!(d.joined.is_empty() && d.rejoined.is_empty());
        assert!(d.updated.is_empty() && d.left.is_empty());
    }

    /// Lists of 300 tracks and 40 participants with 8 KiB of metadata each.
    fn large_lists() -> Lists {
        let tracks = (0..300)
            .map(|i| track(&format!("TR{i}"), "video/VP8", 96, 97, "", 2 * i + 10))
            .collect();
        let participants = (0..40)
            .map(|i| v1::LinkParticipant {
                metadata: "m".repeat(8192),
                joined_at_unix_ms: 1_700_000_000_000 + i,
                ..person(&format!("p{i:02}"), "")
            })
            .collect();
        Lists {
            tracks,
            participants,
        }
    }

    #[test]
    fn lists_over_the_message_limit_go_in_parts() {
        let lists = large_lists();
        let limit = 72 * 1024;
        let parts = calls("r", "node-0", &lists, limit, 77).expect("calls");
        assert!(parts.len() >= 5, "{} calls", parts.len());
        for (i, c) in parts.iter().enumerate() {
            assert!(prost::Message::encoded_len(c) <= limit, "call {i}");
            assert_eq!((c.room.as_str(), c.node_id.as_str()), ("r", "node-0"));
            assert_eq!(
                (c.list_id, c.part, c.more),
                (77, i as u32, i + 1 < parts.len())
            );
        }
        // Taken in order, the parts are the lists, applied with the last.
        let mut slot = None;
        let mut got = None;
        for c in parts.clone() {
            assert!(got.is_none(), "applied before the last part");
            got = gather(&mut slot, c).expect("taken");
        }
        let (tracks, participants) = got.expect("applied with the last part");
        assert_eq!(
            (tracks, participants),
            (lists.tracks.clone(), lists.participants.clone())
        );
        assert!(slot.is_none());
        // Lists that fit go in one call, which also drops parts gathered before.
        let small = Lists {
            tracks: lists.tracks[..2].to_vec(),
            participants: Vec::new(),
        };
        let one = calls("r", "node-0", &small, limit, 78).expect("a call");
        assert_eq!(one.len(), 1);
        assert_eq!((one[0].list_id, one[0].part, one[0].more), (0, 0, false));
        gather(&mut slot, parts[0].clone()).expect("a first part");
        assert!(slot.is_some());
        let (tracks, _) = gather(&mut slot, one[0].clone())
            .expect("taken")
            .expect("whole");
        assert_eq!(tracks.len(), 2);
        assert!(slot.is_none());
        // One participant alone over the limit: nothing can go.
        assert!(calls("r", "node-0", &lists, 8 * 1024, 79).is_none());
    }

    #[test]
    fn parts_out_of_order_or_past_the_bounds_are_refused() {
        let parts = calls("r", "node-0", &large_lists(), 72 * 1024, 5).expect("calls");
        let mut slot = None;
        // A part whose first never came.
        let e = gather(&mut slot, parts[1].clone()).expect_err("refused");
        assert_eq!(e.code(), Code::FailedPrecondition);
        // A part of another list drops what was gathered.
        gather(&mut slot, parts[0].clone()).expect("a first part");
        let other = v1::LinkTracksRequest {
            list_id: 6,
            ..parts[1].clone()
        };
        assert!(gather(&mut slot, other).is_err());
        assert!(slot.is_none());
        // A part repeated is out of order.
        gather(&mut slot, parts[0].clone()).expect("a first part");
        assert!(
            gather(&mut slot, parts[0].clone()).is_ok(),
            "a first part again starts anew"
        );
        assert!(gather(&mut slot, parts[2].clone()).is_err());
        // An empty part but the last.
        let empty = v1::LinkTracksRequest {
            tracks: Vec::new(),
            participants: Vec::new(),
            ..parts[0].clone()
        };
        assert_eq!(
            gather(&mut slot, empty).expect_err("refused").code(),
            Code::InvalidArgument
        );
        // A participant a list may not have, in a part but the last: refused as
        // it comes, so nothing larger than a list is ever held.
        gather(&mut slot, parts[0].clone()).expect("a first part");
        let mut bad = parts[1].clone();
        bad.participants = vec![v1::LinkParticipant {
            metadata: "m".repeat(64 * 1024),
            ..person("big", "")
        }];
        let e = gather(&mut slot, bad).expect_err("refused");
        assert_eq!(e.code(), Code::InvalidArgument);
        assert!(slot.is_none());
        // More participants than a list may have, a part at a time.
        let mut slot = None;
        let mut last = Ok(None);
        for part in 0..=(MAX_LINK_PARTICIPANTS as u32) {
            let c = v1::LinkTracksRequest {
                list_id: 9,
                part,
                more: true,
                participants: vec![person(&format!("p{part:05}"), "")],
                ..v1::LinkTracksRequest::default()
            };
            last = gather(&mut slot, c);
            if last.is_err() {
                break;
            }
        }
        assert_eq!(last.expect_err("refused").code(), Code::InvalidArgument);
        assert!(slot.is_none());
    }

    #[test]
    fn link_track_lists_are_checked_whole() {
        let ok = track("TR1", "audio/opus", 111, 0, "", 5);
        assert_eq!(check_link_tracks(vec![ok.clone()]).expect("fine").len(), 1);
        let refused =
            |tracks: Vec<v1::LinkTrack>| check_link_tracks(tracks).expect_err("refused").code();
        let twice = vec![ok.clone(), track("TR1", "audio/opus", 111, 0, "", 50)];
        assert_eq!(refused(twice), Code::InvalidArgument);
        let same_ssrc = vec![ok.clone(), track("TR2", "audio/opus", 111, 0, "", 5)];
        assert_eq!(refused(same_ssrc), Code::InvalidArgument);
        let mut zero = ok.clone();
        zero.ssrc = 0;
        assert_eq!(refused(vec![zero]), Code::InvalidArgument);
        let mut stream = ok.clone();
        stream.stream_id = "a b".to_owned();
        assert_eq!(refused(vec![stream]), Code::InvalidArgument);
        let mut id = ok.clone();
        id.id = "T R".to_owned();
        assert_eq!(refused(vec![id]), Code::InvalidArgument);
        let mut nobody = ok.clone();
        nobody.participant_identity = String::new();
        assert_eq!(refused(vec![nobody]), Code::InvalidArgument);
        let many = (0..=MAX_LINK_TRACKS as u32)
            .map(|i| track(&format!("TR{i}"), "audio/opus", 111, 0, "", 10 + i))
            .collect();
        assert_eq!(refused(many), Code::InvalidArgument);
    }

    /// A simulcast track's further streams: each with SSRCs of its own, RTX as the
    /// track has it, at most three streams in all, of video only; published here
    /// as one track's streams, told apart by their SSRCs.
    #[test]
    fn simulcast_link_tracks_are_checked_and_published_as_streams() {
        let stream = |ssrc: u32, rtx_ssrc: u32| v1::LinkStream { ssrc, rtx_ssrc };
        let mut ok = track("TR1", "video/VP8", 96, 97, "", 10);
        ok.streams = vec![stream(20, 21), stream(30, 31)];
        assert_eq!(check_link_tracks(vec![ok.clone()]).expect("fine").len(), 1);
        let layers = link_layers(&ok);
        let ssrcs: Vec<(Option<u32>, Option<u32>)> =
            layers.iter().map(|l| (l.ssrc, l.rtx_ssrc)).collect();
        assert_eq!(
            ssrcs,
            [
                (Some(10), Some(11)),
                (Some(20), Some(21)),
                (Some(30), Some(31))
            ]
        );
        assert!(layers.iter().all(|l| l.rid.is_none()));
        assert!(link_layers(&track("TR2", "video/VP8", 96, 97, "", 10)).is_empty());
        let refused =
            |tracks: Vec<v1::LinkTrack>| check_link_tracks(tracks).expect_err("refused").code();
        let with = |streams: Vec<v1::LinkStream>| v1::LinkTrack {
            streams,
            ..ok.clone()
        };
        let four = with(vec![stream(20, 21), stream(30, 31), stream(40, 41)]);
        assert_eq!(refused(vec![four]), Code::InvalidArgument);
        let zero = with(vec![stream(0, 21)]);
        assert_eq!(refused(vec![zero]), Code::InvalidArgument);
        let no_rtx = with(vec![stream(20, 0)]);
        assert_eq!(refused(vec![no_rtx]), Code::InvalidArgument);
        let own_rtx = with(vec![stream(20, 20)]);
        assert_eq!(refused(vec![own_rtx]), Code::InvalidArgument);
        let the_tracks = with(vec![stream(11, 21)]);
        assert_eq!(refused(vec![the_tracks]), Code::InvalidArgument);
        let mut other = track("TR2", "video/VP8", 96, 97, "", 50);
        other.streams = vec![stream(60, 31)];
        assert_eq!(refused(vec![ok.clone(), other]), Code::InvalidArgument);
        let mut audio = track("TR3", "audio/opus", 111, 0, "", 70);
        audio.streams = vec![stream(80, 0)];
        assert_eq!(refused(vec![audio]), Code::InvalidArgument);
        // RTX where the track has none.
        let mut plain = track("TR4", "video/VP8", 96, 0, "", 90);
        plain.streams = vec![stream(91, 92)];
        assert_eq!(refused(vec![plain]), Code::InvalidArgument);
    }
}
