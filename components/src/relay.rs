//! What one shard hands the other shards of its node for rooms that span them: room
//! messages ([`Forwarded`]) and media of tracks mirrored elsewhere ([`MediaRelay`]).
//! Both are filled by a pass and drained after the tick by the node (`shoal-systems`'
//! `node`), which batches them per sibling; every item shares its payload, never
//! copies it.

use std::sync::Arc;
use std::time::Duration;

use bevy_ecs::prelude::Resource;
use bytes::Bytes;

use crate::datachannel::ChannelParams;
use crate::media::TrackId;
use crate::room::RoomId;
use crate::sctp::Ppid;
use crate::sctp::assoc::SctpLimits;
use crate::sctp::dcep::ChannelType;

/// How the room relay keeps a receiver's queue (its association's buffered amount)
/// bounded: by holding back the senders of reliable messages, by dropping unreliable
/// ones, and at last by cutting the receiver off. One per shard, from its config.
#[derive(Resource, Clone, Copy, Debug, PartialEq, Eq)]
pub struct RelayLimits {
    /// A receiver with more queued than this takes no more unreliable messages (they
    /// are dropped for it and counted), and a sender's next reliable message for it
    /// waits in the sender's receive buffer, which closes the sender's SCTP window
    /// (RFC 9260 §6.2) and so slows it.
    pub high_watermark: usize,
    /// A sender held back goes on once every receiver it waits for is down to this.
    pub low_watermark: usize,
    /// A receiver that has held a sender back this long without getting down to the
    /// low watermark is disconnected (`RemoveReason::SlowReceiver`), and the room
    /// goes on without it.
    pub hold_limit: Duration,
    /// Room messages one tick puts out for the room's other shards at most: past
    /// it, a tick's further reliable messages wait for the next tick in their
    /// senders' receive buffers, and its further unreliable ones reach only this
    /// shard's members (counted in `ShardStats::relay_forwards_dropped`).
    pub max_forwards_per_tick: usize,
}

impl RelayLimits {
    /// The limits for associations with `sctp`'s limits: the high watermark leaves
    /// room for one more message of the largest size in the send buffer (so a
    /// message the relay lets through is never refused); a high watermark lowered so
    /// lowers the low one in proportion, and the low one is at most the high one.
    pub fn clamped(self, sctp: &SctpLimits) -> RelayLimits {
        let asked = self.high_watermark.max(1);
        let high = asked
            .min(sctp.send_buffer.saturating_sub(sctp.max_message_size))
            .max(1);
        let low = (self.low_watermark as u128 * high as u128 / asked as u128) as usize;
        RelayLimits {
            high_watermark: high,
            low_watermark: low.min(high),
            max_forwards_per_tick: self.max_forwards_per_tick.max(1),
            ..self
        }
    }
}

impl Default for RelayLimits {
    fn default() -> Self {
        RelayLimits {
            high_watermark: 1 << 20,
            low_watermark: 512 << 10,
            hold_limit: Duration::from_secs(10),
            // With 1024 datagrams a tick, several small messages per datagram.
            max_forwards_per_tick: 4096,
        }
    }
}

/// A room message on its way to the room's members on another shard, owned and cheap
/// to clone (reference counts only); or a gap in the room's reliable messages
/// ([`Forwarded::gap`]).
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
    /// It came into the node on a node-to-node link: the receiving shard gives it to
    /// its members but to none of its links.
    pub from_link: bool,
    /// Not a message but a gap ([`Forwarded::gap`]): the sending shard lost reliable
    /// messages of the room that came after every record it sent before this one.
    pub gap: bool,
}

impl Forwarded {
    /// A gap in `room`'s reliable messages, after every record the shard sent
    /// before it: a member that left had messages for the room in its receive
    /// buffer, and the buffer stood still until the shard let it go with them
    /// (`relay_closing_expired`); or a node-to-node link told of such a gap at the
    /// other node (`from_link`, [`LINK_GAP_PPID`]). The receiving shard closes the
    /// room's reliable channels once it has delivered what came before (as the
    /// sending shard did its own): its members learn that their channels may have
    /// missed messages. One not `from_link` is also told on the receiving shard's
    /// links of the room, on their channel labelled as `channel` (a label of the
    /// reliable channels of the member that left; empty for none). Reliable, so it waits for a
    /// sibling whose queue is full as they do.
    pub fn gap(room: RoomId, channel: Option<ChannelParams<'_>>, from_link: bool) -> Forwarded {
        let (label, protocol, priority) =
            channel.map_or(("", "", 0), |c| (c.label, c.protocol, c.priority));
        Forwarded {
            room,
            label: Arc::from(label),
            protocol: Arc::from(protocol),
            // Ordered and reliable whatever the member's channel was: on a link it
            // goes behind what was queued on its stream before, and is not lost.
            kind: ChannelType {
                ordered: true,
                reliability: crate::sctp::dcep::Reliability::Reliable,
            },
            priority,
            ppid: LINK_GAP_PPID,
            payload: Bytes::new(),
            from_link,
            gap: true,
        }
    }

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

/// The PPID of a gap marker on a node-to-node link: the node at the other end lost
/// reliable messages of the link's room that came before it on that stream (a
/// member that left went with messages it still held, `Forwarded::gap`), and the
/// node taking it closes the room's reliable channels as it would for a gap of its
/// own. Not a data channel's PPID (RFC 8831 §8 uses 50 to 57), so the relay never
/// takes one from a member; only a link's is read as a gap, and a node of an
/// earlier version hands it to its owner as any other SCTP message.
pub const LINK_GAP_PPID: Ppid = Ppid(0x5348_4f4c);

/// Rooms for which a link brought a gap marker ([`LINK_GAP_PPID`]) this tick, in
/// order, with the link: the shard closes their reliable channels once the passes
/// are done and tells its siblings. Until then the datachannel pass takes nothing
/// more from that link (an entity may be on its work list more than once a tick).
#[derive(Resource, Debug, Default)]
pub struct RelayGaps(pub Vec<(RoomId, bevy_ecs::entity::Entity)>);

/// Room members whose messages wait in their receive buffers for a receiver over the
/// high watermark (`DataChannels::relay_held`): the datachannel pass looks at each
/// every tick, whether or not it sent anything, to let it go on.
#[derive(Resource, Debug, Default)]
pub struct RelayHeld(pub Vec<bevy_ecs::entity::Entity>);

/// Peers whose connection ended other than by the owner's removal or a failed
/// DTLS handshake: they closed
/// their DTLS connection (close_notify, RFC 5246 §7.2.1), the owner let them go
/// (`Command::LetGo`), their consent expired (RFC 7675 §5.1), or the relay cut them
/// off as slow receivers. A room member whose
/// receive buffer still holds messages stays until the relay has taken them: what
/// SCTP acknowledged to it reaches its room. A closing member receives nothing and
/// sends nothing more (its connection is gone, its paths and ids are no longer its
/// own); the datachannel pass keeps taking its messages under the relay's usual
/// back-pressure, and the shard despawns it once its buffer is empty, or once the
/// buffer has not shrunk for twice [`RelayLimits::hold_limit`].
#[derive(Resource, Debug, Default)]
pub struct RelayClosing(pub Vec<ClosingMember>);

/// One member of [`RelayClosing`].
#[derive(Clone, Copy, Debug)]
pub struct ClosingMember {
    /// The peer.
    pub entity: bevy_ecs::entity::Entity,
    /// When it goes if its buffer has not shrunk by then; `None` until the end of
    /// the tick that closed it.
    pub deadline: Option<crate::time::Time>,
    /// The bytes its receive buffer held when the deadline was last set.
    pub buffered: usize,
    /// Why it goes (`PeerRemoved` says so at the end of the tick it closed in).
    pub reason: crate::tick::RemoveReason,
}

/// This tick's room messages for other shards, in the order the relay produced them.
#[derive(Resource, Debug, Default)]
pub struct RelayOutbox(pub Vec<Forwarded>);

/// The sibling shards (by index) for which reliable room messages this shard
/// forwarded wait to go again, their queues having been full (the node's `Links`
/// keeps them): while any wait for a sibling, no further reliable message of a
/// room with members there leaves its sender's receive buffer, so they cannot pile
/// up. Rooms not on those siblings go on.
#[derive(Resource, Debug, Default)]
pub struct ForwardsWaiting(pub Vec<usize>);

impl ForwardsWaiting {
    /// Whether messages wait for any of `siblings`.
    pub fn for_any(&self, siblings: &[usize]) -> bool {
        !self.0.is_empty() && siblings.iter().any(|s| self.0.contains(s))
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watermarks_fit_the_send_buffer() {
        let sctp = SctpLimits::default();
        // The defaults fit the default 4 MiB send buffer as they are.
        assert_eq!(
            RelayLimits::default().clamped(&sctp),
            RelayLimits::default()
        );
        // A 1 MiB send buffer with 256 KiB messages leaves 768 KiB: the low watermark
        // goes down in proportion (512 KiB of 1 MiB → 384 KiB of 768 KiB).
        let small = SctpLimits {
            send_buffer: 1 << 20,
            ..sctp
        };
        let r = RelayLimits::default().clamped(&small);
        assert_eq!((r.high_watermark, r.low_watermark), (768 << 10, 384 << 10));
        // A low watermark over the high one is taken as it.
        let odd = RelayLimits {
            high_watermark: 64 << 10,
            low_watermark: 128 << 10,
            ..RelayLimits::default()
        };
        let r = odd.clamped(&sctp);
        assert_eq!((r.high_watermark, r.low_watermark), (64 << 10, 64 << 10));
    }
}
