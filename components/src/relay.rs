//! What one shard hands the other shards of its node for rooms that span them: room
//! messages ([`Forwarded`]) and media of tracks mirrored elsewhere ([`MediaRelay`]).
//! Both are filled by a pass and drained after the tick by the node (`shoal-systems`'
//! `node`), which batches them per sibling; every item shares its payload, never
//! copies it.

use std::sync::Arc;

use bevy_ecs::prelude::Resource;
use bytes::Bytes;

use crate::datachannel::ChannelParams;
use crate::media::TrackId;
use crate::room::RoomId;
use crate::sctp::Ppid;
use crate::sctp::dcep::ChannelType;

/// A room message on its way to the room's members on another shard, owned and cheap
/// to clone (reference counts only).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Forwarded {
    /// The room.
    pub room: RoomId,
    /// The sender channel's label: receivers get it on their channel of this label.
    pub label: Arc<str>,
    /// The sender channel's sub-protocol.
    pub protocol: Arc<str>,
    /// The sender channel's ordering and reliability.
    pub kind: ChannelType,
    /// The sender channel's priority.
    pub priority: u16,
    /// The PPID the message came with.
    pub ppid: Ppid,
    /// The payload it came with (shared, never copied).
    pub payload: Bytes,
}

impl Forwarded {
    /// The channel parameters a receiver's channel is opened with if it has none.
    pub fn params(&self) -> ChannelParams<'_> {
        ChannelParams {
            label: &self.label,
            protocol: &self.protocol,
            kind: self.kind,
            priority: self.priority,
        }
    }
}

/// This tick's room messages for other shards, in the order the relay produced them.
#[derive(Resource, Debug, Default)]
pub struct RelayOutbox(pub Vec<Forwarded>);

/// What one shard hands a sibling for tracks that cross shards.
#[derive(Clone, Debug)]
pub enum MediaRelay {
    /// A packet of a track the sibling mirrors.
    Packet {
        /// The sibling.
        to: usize,
        /// The track.
        track: TrackId,
        /// Its simulcast stream (0 for a single stream).
        layer: u8,
        /// Its extended sequence number at the origin.
        seq: u64,
        /// The plaintext packet.
        packet: Bytes,
    },
    /// A subscriber on this shard wants a keyframe of a track published on `to`.
    Keyframe {
        /// The origin shard.
        to: usize,
        /// The track.
        track: TrackId,
        /// Its simulcast stream (0 for a single stream).
        layer: u8,
    },
}

impl MediaRelay {
    /// The shard it goes to.
    pub fn to(&self) -> usize {
        match self {
            MediaRelay::Packet { to, .. } | MediaRelay::Keyframe { to, .. } => *to,
        }
    }

    /// The simulcast stream it is about.
    pub fn layer(&self) -> u8 {
        match self {
            MediaRelay::Packet { layer, .. } | MediaRelay::Keyframe { layer, .. } => *layer,
        }
    }

    /// The track it is about.
    pub fn track(&self) -> TrackId {
        match self {
            MediaRelay::Packet { track, .. } | MediaRelay::Keyframe { track, .. } => *track,
        }
    }
}

/// What the media pass put out for sibling shards this tick.
#[derive(Resource, Debug, Default)]
pub struct MediaRelayOut(pub Vec<MediaRelay>);
