//! Which tracks a participant receives, and publishers' mute.
//!
//! A participant joins with `auto_subscribe` (true when absent): it receives every
//! track of its room but those it unsubscribes from; without it, only those it
//! subscribes to. A change is carried out by negotiation: shoal offers the
//! participant a section for a track it now receives and disables the section of one
//! it no longer does ([`super::media`]'s offers do both), and the shard's
//! subscription follows the answer.
//!
//! A publisher's mute stops its track on the shard (nothing forwarded, to anyone,
//! nor kept for a retransmission) and tells the room and the publisher
//! (`TrackEvent` KIND_MUTED); unmute resumes it with a keyframe asked of the
//! publisher, and tells them KIND_UNMUTED.

use std::collections::{BTreeMap, BTreeSet};

use shoal_components::media::{TrackId, TrackSettings};
use shoal_components::peer::PeerId;
use shoal_proto::v1::{self, signal_response, track_event};
use shoal_systems::Command;
use tonic::Status;

use super::grpc::ControlState;
use crate::driver::ShardCommand;

/// Track ids one update may name. A selection holds only ids of tracks still in
/// the room (the rest are dropped at each update), so it is bounded by the room.
pub const MAX_TRACKS_PER_UPDATE: usize = 256;

/// A participant's choice of the room's tracks.
#[derive(Clone, Debug, Default)]
pub struct Selection {
    /// Every track unless unsubscribed (else only those subscribed to).
    auto: bool,
    /// Tracks it subscribed to.
    wanted: BTreeSet<String>,
    /// Tracks it unsubscribed from.
    unwanted: BTreeSet<String>,
    /// How it wants tracks it receives, by track: kept across renegotiations and
    /// resubscriptions, and applied to each new subscription.
    settings: BTreeMap<String, TrackSettings>,
}

impl Selection {
    /// A participant's selection at its join.
    pub fn new(auto: bool) -> Selection {
        Selection {
            auto,
            ..Selection::default()
        }
    }

    /// Whether it receives `track`.
    pub fn wants(&self, track: &str) -> bool {
        self.wanted.contains(track) || (self.auto && !self.unwanted.contains(track))
    }

    /// Subscribes to or unsubscribes from `track`.
    fn set(&mut self, track: &str, subscribe: bool) {
        if subscribe {
            self.unwanted.remove(track);
            self.wanted.insert(track.to_owned());
        } else {
            self.wanted.remove(track);
            self.unwanted.insert(track.to_owned());
        }
    }

    /// Keeps only ids for which `exists` holds: tracks still in the room.
    fn retain(&mut self, exists: impl Fn(&str) -> bool) {
        self.wanted.retain(|t| exists(t));
        self.unwanted.retain(|t| exists(t));
        self.settings.retain(|t, _| exists(t));
    }

    /// The settings asked for `track`, if any.
    pub fn settings(&self, track: &str) -> Option<TrackSettings> {
        self.settings.get(track).copied()
    }
}

/// The shard's form of a signalled `TrackSettings` (quality as a rank: low the
/// lowest stream, medium the second).
pub fn track_settings(s: &v1::TrackSettings) -> TrackSettings {
    let max_rank = match s.quality() {
        v1::VideoQuality::Low => Some(0),
        v1::VideoQuality::Medium => Some(1),
        v1::VideoQuality::High | v1::VideoQuality::Unspecified => None,
    };
    let side = |v: u32| u16::try_from(v).unwrap_or(u16::MAX);
    let max_size =
        (s.max_width != 0 || s.max_height != 0).then(|| (side(s.max_width), side(s.max_height)));
    TrackSettings {
        paused: s.paused,
        max_rank,
        max_size,
        max_temporal: s
            .max_temporal_layer
            .map(|t| u8::try_from(t).unwrap_or(u8::MAX)),
    }
}

impl ControlState {
    /// Subscribes `peer` to the room's `tracks` or unsubscribes it, and offers it
    /// the change. NOT_FOUND for a track not in its room, INVALID_ARGUMENT for its
    /// own, FAILED_PRECONDITION for a participant without a signalling connection
    /// (WHIP, WHEP) or without canSubscribe.
    pub(super) fn update_subscriptions(
        &self,
        peer: PeerId,
        tracks: &[String],
        subscribe: bool,
    ) -> Result<(), Status> {
        check_update_size(tracks)?;
        let rooms = self.rooms();
        let mut members = self.members();
        let me = members
            .by_peer
            .get(&peer)
            .ok_or_else(|| Status::not_found("the participant has left"))?;
        if me.signal.is_none() {
            return Err(Status::failed_precondition(
                "the participant has no signalling connection to be offered the change on",
            ));
        }
        if !me.permissions.subscribe {
            return Err(Status::failed_precondition(
                "the participant may not subscribe (its token lacks canSubscribe)",
            ));
        }
        let room = me.room.clone();
        let in_room = others_tracks(&rooms, &members, &room, peer, tracks)?;
        let Some(me) = members.by_peer.get_mut(&peer) else {
            return Ok(());
        };
        me.selection.retain(|t| in_room.contains_key(t));
        for t in tracks {
            me.selection.set(t, subscribe);
            // Asked for: offered again even if the participant once turned it down.
            if let (true, Some(media)) = (subscribe, me.media.as_mut()) {
                media.negotiation.undecline(t);
            }
        }
        self.offer_locked(&rooms, &mut members, peer);
        Ok(())
    }

    /// Sets how `peer` receives the room's `tracks` (paused, quality, picture size):
    /// remembered for each, and sent at once to the shard of every one it is
    /// subscribed to now (later subscriptions take them when made). NOT_FOUND for a
    /// track not in its room, INVALID_ARGUMENT for its own or for too many ids.
    pub(super) fn set_track_settings(
        &self,
        peer: PeerId,
        tracks: &[String],
        settings: TrackSettings,
    ) -> Result<(), Status> {
        check_update_size(tracks)?;
        let rooms = self.rooms();
        let mut members = self.members();
        let me = members
            .by_peer
            .get(&peer)
            .ok_or_else(|| Status::not_found("the participant has left"))?;
        let (room, shard) = (me.room.clone(), me.shard);
        let in_room = others_tracks(&rooms, &members, &room, peer, tracks)?;
        let ids: Vec<(String, TrackId)> = tracks
            .iter()
            .filter_map(|t| Self::room_track(&rooms, &members, &room, t).map(|r| (t.clone(), r.id)))
            .collect();
        let Some(me) = members.by_peer.get_mut(&peer) else {
            return Ok(());
        };
        me.selection.retain(|t| in_room.contains_key(t));
        let mut commands = Vec::new();
        for (name, id) in ids {
            me.selection.settings.insert(name, settings);
            commands.push((
                shard,
                Command::SetTrackSettings {
                    peer,
                    track: id,
                    settings,
                },
            ));
        }
        self.send_media_commands(commands);
        Ok(())
    }

    /// Mutes or unmutes `peer`'s published track `track`; returns the track as it is
    /// now. NOT_FOUND unless `peer` publishes it; UNAVAILABLE if its shard's queue
    /// refused the change (nothing changed then). The shard is told under the
    /// members lock, so mutes and unmutes reach it in the order the room hears them;
    /// the room hears it (the publisher too: an administrator may have muted it).
    pub(super) fn mute_track(
        &self,
        peer: PeerId,
        track: &str,
        muted: bool,
    ) -> Result<v1::TrackInfo, Status> {
        let mut members = self.members();
        let member = members
            .by_peer
            .get_mut(&peer)
            .ok_or_else(|| Status::not_found("the participant has left"))?;
        let (room, identity) = (member.room.clone(), member.identity.clone());
        let t = member
            .media
            .as_mut()
            .and_then(|m| m.tracks.iter_mut().find(|t| t.source.id == track))
            .ok_or_else(|| {
                Status::not_found(format!("the participant publishes no track {track:?}"))
            })?;
        if t.muted == muted {
            return Ok(t.info());
        }
        let command = ShardCommand::Media(Command::SetMuted { track: t.id, muted });
        let sent = self
            .shards()
            .get(t.shard)
            .is_some_and(|s| s.try_send(command).is_ok());
        if !sent {
            return Err(Status::unavailable(
                "the track's shard is too busy to take the change; try again",
            ));
        }
        t.muted = muted;
        let info = t.info();
        let kind = if muted {
            track_event::Kind::Muted
        } else {
            track_event::Kind::Unmuted
        };
        let event = signal_response::Message::Track(v1::TrackEvent {
            kind: kind.into(),
            participant_identity: identity,
            track: Some(info.clone()),
        });
        members.broadcast(&room, peer, event.clone());
        members.tell(peer, event);
        Ok(info)
    }
}

/// INVALID_ARGUMENT for an update naming more than [`MAX_TRACKS_PER_UPDATE`] tracks.
fn check_update_size(tracks: &[String]) -> Result<(), Status> {
    if tracks.len() > MAX_TRACKS_PER_UPDATE {
        return Err(Status::invalid_argument(format!(
            "{} tracks in one update, more than {MAX_TRACKS_PER_UPDATE}",
            tracks.len()
        )));
    }
    Ok(())
}

/// The tracks of `room` by whether `peer` publishes them, once `tracks` are checked to
/// be others' tracks of the room: NOT_FOUND for one not in it, INVALID_ARGUMENT for
/// one of `peer`'s own. O(tracks in the room).
fn others_tracks(
    rooms: &super::rooms::RoomDirectory,
    members: &super::participants::Members,
    room: &str,
    peer: PeerId,
    tracks: &[String],
) -> Result<BTreeMap<String, bool>, Status> {
    let in_room: BTreeMap<String, bool> = rooms
        .get(room)
        .map(|r| {
            r.participants()
                .filter_map(|p| Some((p.peer, members.by_peer.get(&p.peer)?)))
                .flat_map(|(p, m)| m.tracks().map(move |t| (t.source.id.clone(), p == peer)))
                .collect()
        })
        .unwrap_or_default();
    for t in tracks {
        match in_room.get(t) {
            None => {
                return Err(Status::not_found(format!(
                    "no track {t:?} in room {room:?}"
                )));
            }
            Some(true) => {
                return Err(Status::invalid_argument(format!(
                    "track {t:?} is the participant's own"
                )));
            }
            Some(false) => {}
        }
    }
    Ok(in_room)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_selection_follows_subscribes_and_unsubscribes() {
        let mut auto = Selection::new(true);
        assert!(auto.wants("TR1"));
        auto.set("TR1", false);
        assert!(!auto.wants("TR1") && auto.wants("TR2"));
        auto.set("TR1", true);
        assert!(auto.wants("TR1"));

        let mut chosen = Selection::new(false);
        assert!(!chosen.wants("TR1"));
        chosen.set("TR1", true);
        assert!(chosen.wants("TR1") && !chosen.wants("TR2"));
        chosen.retain(|t| t != "TR1");
        assert!(!chosen.wants("TR1"), "a track that left is forgotten");
    }

    #[test]
    fn signalled_settings_map_to_ranks_and_sizes() {
        let signalled = |quality: v1::VideoQuality, w: u32, h: u32, paused: bool| {
            track_settings(&v1::TrackSettings {
                track_ids: Vec::new(),
                paused,
                quality: quality.into(),
                max_width: w,
                max_height: h,
                max_temporal_layer: None,
            })
        };
        let low = signalled(v1::VideoQuality::Low, 0, 0, false);
        assert_eq!(
            (low.max_rank, low.max_size, low.paused),
            (Some(0), None, false)
        );
        assert_eq!(
            signalled(v1::VideoQuality::Medium, 0, 0, false).max_rank,
            Some(1)
        );
        let base = track_settings(&v1::TrackSettings {
            max_temporal_layer: Some(0),
            ..Default::default()
        });
        assert_eq!(base.max_temporal, Some(0));
        assert_eq!(low.max_temporal, None, "unset: any layer");
        let any = signalled(v1::VideoQuality::Unspecified, 640, 0, true);
        assert_eq!(
            (any.max_rank, any.max_size, any.paused),
            (None, Some((640, 0)), true)
        );
        // A side past what RTP video sizes carry is no bound short of it.
        let huge = signalled(v1::VideoQuality::High, 100_000, 360, false);
        assert_eq!(huge.max_size, Some((u16::MAX, 360)));
    }
}
