//! Tracks across a cascaded room's links: each node sends its own participants'
//! tracks to every other node hosting the room, over their link, once.
//!
//! - **Sending.** Every [`super::cascade::TICK`], for each link, the node compares
//!   the tracks its participants publish in the room with those the link carries.
//!   A new one is subscribed by the link's peer (`Command::Subscribe`, mirrored to
//!   the link's shard first if published on another), under SSRCs drawn for the
//!   link; one gone leaves with its publisher. When the list changed, or the other
//!   node has not yet taken it, the whole list goes to the other node
//!   (`NodeService.LinkTracks`), again every tick until it is taken.
//! - **Receiving.** A LinkTracks call makes the listed tracks the link peer's
//!   publications here (`Command::Publish` with the announced SSRCs) and
//!   unpublishes those no longer listed. The room hears PUBLISHED and UNPUBLISHED
//!   under the other node's participant's identity, and its participants get offers
//!   for them as for any track. Keyframe requests and NACKs from this node's
//!   subscribers go back over the link as a subscriber's would to a publisher.
//! - **One hop.** Only tracks of a node's own participants go out: a track that came
//!   over a link never leaves on another. With every pair of hosts linked, each
//!   track crosses each link to another node once (`rtp_received_from_links`
//!   counts what arrives).
//! - **The link's RTP.** The publisher's payload types and format parameters; no
//!   header extension but the audio level (RFC 6464) of audio, as id
//!   [`LINK_AUDIO_LEVEL_ID`]; NACK and PLI. A simulcast track crosses as the one
//!   layer the link's subscription gets.
//!
//! Lock order: the room directory, then the members, then the links.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use shoal_components::media::{
    ExtensionIds, FeedbackKinds, SubscriptionSpec, TrackId, TrackKind, TrackSpec,
};
use shoal_components::sdp::{self, Codec, MediaKind, SessionDescription, TrackSource};
use shoal_proto::v1::node_service_client::NodeServiceClient;
use shoal_proto::v1::{self, signal_response, track_event};
use shoal_systems::Command;
use tonic::{Code, Request, Status};

use super::{Cluster, NodeRecord};
use crate::control::grpc::ControlState;
use crate::control::media::{
    RemoteTrack, RoomTrack, mime_type, payload_format, track_kind, track_name,
};
use crate::control::rooms::{NameKind, validate_name};

/// The audio level extension's id on a link (RFC 6464; RFC 8285 §4.2 one-byte
/// ids are 1 to 14).
pub const LINK_AUDIO_LEVEL_ID: u8 = 1;
/// Tracks one LinkTracks call may list.
pub const MAX_LINK_TRACKS: usize = 1024;
/// The longest `fmtp` a link track may carry.
const MAX_FMTP: usize = 1024;
/// How long a LinkTracks call may take.
const LINK_TRACKS_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// The feedback each side of a link does for its tracks.
const LINK_FEEDBACK: FeedbackKinds = FeedbackKinds {
    nack: true,
    pli: true,
    fir: false,
    transport_cc: false,
    remb: false,
};

/// What a link carries of this node's tracks.
#[derive(Debug, Default)]
pub struct Sent {
    /// Each track, as the other node is told of it.
    tracks: BTreeMap<TrackId, v1::LinkTrack>,
    /// The other node took the list as it is now.
    told: bool,
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
    let Some(tracks) = state.link_tracks(room, &node.id) else {
        return;
    };
    let mut request = Request::new(v1::LinkTracksRequest {
        room: room.to_owned(),
        node_id: cluster.node_id().to_owned(),
        tracks: tracks.clone(),
    });
    let outcome = async {
        super::cascade::authorize(state, cluster, room, &mut request)?;
        request.set_timeout(LINK_TRACKS_TIMEOUT);
        let mut client = NodeServiceClient::new(cluster.channel(node)?);
        tokio::time::timeout(LINK_TRACKS_TIMEOUT, client.link_tracks(request))
            .await
            .map_err(|_| Status::unavailable(format!("node {} did not answer in time", node.id)))?
    }
    .await;
    match outcome {
        Ok(_) => {
            if let Some(link) = state.links().0.get_mut(&(room.to_owned(), node.id.clone()))
                && link.sent.tracks.values().eq(tracks.iter())
            {
                link.sent.told = true;
            }
        }
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

impl ControlState {
    /// Brings what `room`'s link to `node` carries in line with the tracks this
    /// node's participants publish there; the list to tell the other node, when it
    /// has not taken it yet. `None` without such a link, or when it has.
    fn link_tracks(&self, room: &str, node: &str) -> Option<Vec<v1::LinkTrack>> {
        let rooms = self.rooms();
        let mut members = self.members();
        let mut links = self.links();
        let link = links
            .0
            .get_mut(&(room.to_owned(), node.to_owned()))
            .filter(|l| l.placed)?;
        let shard = members.by_peer.get(&link.peer)?.shard;
        let r = rooms.get(room).ok()?;
        // Its own participants' tracks: never one that came over a link.
        let own: Vec<(RoomTrack, String)> = r
            .participants()
            .filter_map(|p| members.by_peer.get(&p.peer))
            .flat_map(|m| {
                m.media
                    .iter()
                    .flat_map(|media| &media.tracks)
                    .map(|t| (t.clone(), m.identity.clone()))
            })
            .collect();
        let sent = &mut link.sent;
        let before = sent.tracks.len();
        sent.tracks
            .retain(|id, _| own.iter().any(|(t, _)| t.id == *id));
        let mut changed = sent.tracks.len() != before;
        let mut commands = Vec::new();
        for (t, identity) in &own {
            if let Some(told) = sent.tracks.get_mut(&t.id) {
                changed |= told.muted != t.muted;
                told.muted = t.muted;
                continue;
            }
            let used: HashSet<u32> = sent
                .tracks
                .values()
                .flat_map(|l| [l.ssrc, l.rtx_ssrc])
                .collect();
            let draw = || loop {
                let ssrc = self.random_ssrc();
                if ssrc != 0 && !used.contains(&ssrc) {
                    break ssrc;
                }
            };
            let ssrc = draw();
            let rtx_ssrc = t.source.codec.rtx_payload_type.map(|_| {
                loop {
                    let s = draw();
                    if s != ssrc {
                        break s;
                    }
                }
            });
            members.mirror(t, shard, &mut commands);
            commands.push((
                shard,
                Command::Subscribe {
                    peer: link.peer,
                    subscription: SubscriptionSpec {
                        track: t.id,
                        mid: t.source.id.clone(),
                        ssrc,
                        rtx_ssrc,
                        payload_type: t.source.codec.payload_type,
                        rtx_payload_type: t.source.codec.rtx_payload_type,
                        extensions: link_extensions(t.spec.kind),
                        feedback: LINK_FEEDBACK,
                        cname: t.source.stream_id.clone(),
                    },
                },
            ));
            sent.tracks.insert(
                t.id,
                v1::LinkTrack {
                    id: t.source.id.clone(),
                    participant_identity: identity.clone(),
                    stream_id: t.source.stream_id.clone(),
                    mime_type: mime_type(t.source.codec.name).to_owned(),
                    payload_type: u32::from(t.source.codec.payload_type),
                    rtx_payload_type: t.source.codec.rtx_payload_type.map_or(0, u32::from),
                    fmtp: t.source.codec.fmtp.clone().unwrap_or_default(),
                    ssrc,
                    rtx_ssrc: rtx_ssrc.unwrap_or(0),
                    muted: t.muted,
                },
            );
            changed = true;
        }
        if changed {
            sent.told = false;
        }
        let list = (!sent.told).then(|| sent.tracks.values().cloned().collect());
        drop(links);
        self.send_media_commands(commands);
        list
    }

    /// The answering side of LinkTracks: `request` (authorised already) from node
    /// `request.node_id` for `room` (normalised). The number of tracks the link
    /// publishes here now.
    pub(crate) fn take_link_tracks(
        &self,
        room: &str,
        request: v1::LinkTracksRequest,
    ) -> Result<usize, Status> {
        let node = request.node_id;
        let listed = check_link_tracks(request.tracks)?;
        let outcome = {
            let rooms = self.rooms();
            let mut members = self.members();
            let Some(peer) = self
                .links()
                .0
                .get(&(room.to_owned(), node.clone()))
                .filter(|l| l.placed)
                .map(|l| l.peer)
            else {
                return Err(Status::failed_precondition(format!(
                    "no link of room {room:?} to node {node:?} here (yet)"
                )));
            };
            let member = members
                .by_peer
                .get_mut(&peer)
                .ok_or_else(|| Status::failed_precondition("the link's participant has left"))?;
            let shard = member.shard;
            let mut commands = Vec::new();
            let mut events = Vec::new();
            let mut gone = Vec::new();
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
                events.push((track_event::Kind::Unpublished, t.clone()));
            }
            for (l, codec) in listed {
                if let Some(t) = member
                    .relayed
                    .iter_mut()
                    .find(|t| t.remote.as_ref().is_some_and(|r| r.origin == l.id))
                {
                    if t.muted != l.muted {
                        t.muted = l.muted;
                        commands.push((
                            shard,
                            Command::SetMuted {
                                track: t.id,
                                muted: l.muted,
                            },
                        ));
                        let kind = if l.muted {
                            track_event::Kind::Muted
                        } else {
                            track_event::Kind::Unmuted
                        };
                        events.push((kind, t.clone()));
                    }
                    continue;
                }
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
                    layers: Vec::new(),
                };
                commands.push((
                    shard,
                    Command::Publish {
                        peer,
                        track: spec.clone(),
                    },
                ));
                if l.muted {
                    commands.push((
                        shard,
                        Command::SetMuted {
                            track: id,
                            muted: true,
                        },
                    ));
                }
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
                events.push((track_event::Kind::Published, t.clone()));
                member.relayed.push(t);
            }
            let count = member.relayed.len();
            for t in &gone {
                for at in members.mirrors.remove(&t.id).unwrap_or_default() {
                    commands.push((at, Command::DropMirror { track: t.id }));
                }
            }
            self.send_media_commands(commands);
            let changed = !events.is_empty();
            for (kind, t) in events {
                let event = signal_response::Message::Track(v1::TrackEvent {
                    kind: kind.into(),
                    participant_identity: t.publisher("").to_owned(),
                    track: Some(t.info()),
                });
                members.broadcast(room, peer, event);
            }
            drop(rooms);
            (count, changed)
        };
        let (count, changed) = outcome;
        if changed {
            self.offer_to_room(room, None);
        }
        Ok(count)
    }
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
        if l.id.is_empty() || l.id.len() > 64 || !ids.insert(l.id.clone()) {
            return Err(bad(&l, "the id is empty, over 64 bytes or listed twice"));
        }
        validate_name(&l.participant_identity, NameKind::Identity)
            .map_err(|e| bad(&l, &e.to_string()))?;
        // RFC 8830 §2: an msid-id is 1*64token-char (RFC 8866 §9).
        let token_char = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`{|}~".contains(c);
        if l.stream_id.is_empty() || l.stream_id.len() > 64 || !l.stream_id.chars().all(token_char)
        {
            return Err(bad(&l, "the stream id is not 1 to 64 token characters"));
        }
        if l.ssrc == 0 || !ssrcs.insert(l.ssrc) || (l.rtx_ssrc != 0 && !ssrcs.insert(l.rtx_ssrc)) {
            return Err(bad(&l, "an SSRC is 0 or in use on the link"));
        }
        let codec = link_codec(&l).ok_or_else(|| bad(&l, "not a codec shoal forwards"))?;
        out.push((l, codec));
    }
    Ok(out)
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
        let mut nobody = ok.clone();
        nobody.participant_identity = String::new();
        assert_eq!(refused(vec![nobody]), Code::InvalidArgument);
        let many = (0..=MAX_LINK_TRACKS as u32)
            .map(|i| track(&format!("TR{i}"), "audio/opus", 111, 0, "", 10 + i))
            .collect();
        assert_eq!(refused(many), Code::InvalidArgument);
    }
}
