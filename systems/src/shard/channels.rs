//! SCTP and data channels on the shard's surface: raw SCTP messages, opening,
//! using and closing data channels, and their buffered amounts.

use bevy_ecs::prelude::*;
use bytes::Bytes;
use shoal_components::datachannel::{
    self, Channel, ChannelError, ChannelParams, ChannelState, DataChannels,
};
use shoal_components::peer::{Ice, IceState, PeerId, PeerIndex};
use shoal_components::room::{RoomId, RoomIndex, RoomMember};
use shoal_components::sctp::assoc::{AssocState, Sctp};
use shoal_components::sctp::dcep::{ChannelType, Reliability as DcepReliability};
use shoal_components::sctp::tx::{OutgoingMessage, Reliability, SendError};
use shoal_components::sctp::{Ppid, StreamId};
use shoal_components::stats::ShardStats;
use shoal_components::tick::{Events, Now, SctpStart};
use shoal_components::time::Time;
use shoal_components::timer::{TimerHeap, TimerKind, Timers};

use super::{CommandError, Shard};

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

impl Shard {
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

    /// Closes every reliable channel (ordered or not) of `room`'s members on this
    /// shard, node-to-node links aside, as [`Shard::close_channel`] does: what is
    /// queued on each is still delivered, then its streams are reset (RFC 8831
    /// §6.7) and [`ShardEvent::ChannelClosed`] follows. Returns how many it closed.
    ///
    /// A reliable message is delivered exactly once, in order, or its channel
    /// reports an error. When messages may have been lost on their way to the
    /// room's members (a link to another node that hosts the room failed with
    /// messages in flight, or a member that left went with messages it still held
    /// for the room), closing the channels is that error: a member learns that
    /// its channel may have missed messages. What the relay has for the member on
    /// that label while the streams reset is not delivered to it; once the channel
    /// is closed, the relay opens it a new one with the next message on that label.
    /// Unreliable channels promise no delivery and stay open.
    ///
    /// [`ShardEvent::ChannelClosed`]: shoal_components::tick::ShardEvent::ChannelClosed
    pub fn close_reliable_channels(&mut self, room: RoomId) -> usize {
        let now = self.world.resource::<Now>().0;
        let members = self.world.resource::<RoomIndex>().members(room).to_vec();
        let mut closed = 0;
        for entity in members {
            let mut e = self.world.entity_mut(entity);
            // Links, and members that left (still relaying what they sent), aside.
            if e.get::<RoomMember>().is_none_or(|m| m.link)
                || e.get::<Ice>().is_some_and(|i| i.state == IceState::Failed)
            {
                continue;
            }
            let Ok((mut a, mut dc)) = e.get_components_mut::<(&mut Sctp, &mut DataChannels)>()
            else {
                continue;
            };
            let reliable: Vec<u16> = dc
                .channels
                .iter()
                .filter(|(_, ch)| {
                    ch.kind.reliability == DcepReliability::Reliable
                        && ch.state != ChannelState::Closing
                })
                .map(|(&id, _)| id)
                .collect();
            let mut here = 0;
            for id in reliable {
                if datachannel::close(&mut a, &mut dc, id).is_ok() {
                    here += 1;
                }
            }
            if here > 0 {
                closed += here;
                self.wake_sctp(entity, now);
            }
        }
        self.world
            .resource_mut::<ShardStats>()
            .relay_gap_channels_closed += closed as u64;
        closed
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

    pub(super) fn established_entity(&self, id: PeerId) -> Option<Entity> {
        let entity = *self.world.resource::<PeerIndex>().by_id.get(&id)?;
        let a = self.world.get::<Sctp>(entity)?;
        (a.state == AssocState::Established).then_some(entity)
    }

    /// Asks for a tick at `now` so what was queued for the entity goes out.
    pub(super) fn wake_sctp(&mut self, entity: Entity, now: Time) {
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
        self.peer_sctp(id).map_or(0, Sctp::buffered_amount)
    }

    fn peer_sctp(&self, id: PeerId) -> Option<&Sctp> {
        let entity = *self.world.resource::<PeerIndex>().by_id.get(&id)?;
        self.world.get::<Sctp>(entity)
    }

    /// The peer's data channel `channel`: its label, protocol, type and state.
    pub fn channel(&self, id: PeerId, channel: u16) -> Option<&Channel> {
        let entity = *self.world.resource::<PeerIndex>().by_id.get(&id)?;
        self.world
            .get::<DataChannels>(entity)?
            .channels
            .get(&channel)
    }

    /// Drops the peer's SCTP association without a word to the peer, as a peer
    /// whose SCTP stack lost its state would: the association is closed and not
    /// started, its channels closed (each with `ChannelClosed`), its timers off.
    /// With `restart`, the DTLS client side starts a new association at once (the
    /// peer sees a restart, RFC 9260 §5.2.4 A); without, this side answers what the
    /// peer still sends with ABORT (§8.4), and the peer learns that way. For fault
    /// injection in tests and simulations: shoal never does this by itself.
    pub fn forget_sctp(&mut self, id: PeerId, restart: bool) -> Result<(), CommandError> {
        let entity = self.peer_entity(id)?;
        let now = self.world.resource::<Now>().0;
        let Some(mut a) = self.world.get_mut::<Sctp>(entity) else {
            return Ok(());
        };
        let initiator = a.initiator;
        *a = Sctp::new(initiator, a.local_port, a.remote_port);
        self.world.resource_scope(|world, mut events: Mut<Events>| {
            if let Some(mut dc) = world.get_mut::<DataChannels>(entity) {
                dc.close_all(id, &mut events);
            }
        });
        if let Some(mut timers) = self.world.get_mut::<Timers>(entity) {
            for kind in [
                TimerKind::SctpT1,
                TimerKind::SctpT2,
                TimerKind::SctpT3,
                TimerKind::SctpDelayedAck,
                TimerKind::SctpSend,
                TimerKind::SctpReconfig,
                TimerKind::SctpHeartbeat,
            ] {
                timers.cancel(kind);
            }
        }
        if restart && initiator && self.dtls_connected(id) {
            self.world.resource_mut::<SctpStart>().0.push(entity);
            self.wake_sctp(entity, now);
        }
        self.collect_events();
        Ok(())
    }
}
