//! The `datachannel` pass: turns what SCTP reassembled this tick into channel
//! events (DCEP OPEN and ACK, RFC 8832 §6; user messages with the WebRTC PPIDs, RFC
//! 8831 §6.6; channels closed by stream resets, §6.7). A message from a room member
//! is relayed to the other members ([`relay`]) instead of being reported; other
//! peers' messages become [`ShardEvent::ChannelMessage`] for the shard's owner.

pub mod relay;

use bevy_ecs::prelude::*;
use bevy_ecs::system::SystemParam;
use bytes::Bytes;
use shoal_components::datachannel::{Channel, ChannelState, DataChannels, apply_resets, send_dcep};
use shoal_components::peer::Peer;
use shoal_components::relay::RelayOutbox;
use shoal_components::room::{RoomIndex, RoomMember, RoomPresence};
use shoal_components::sctp::Ppid;
use shoal_components::sctp::assoc::Sctp;
use shoal_components::sctp::dcep::DcepMessage;
use shoal_components::stats::ShardStats;
use shoal_components::tick::{Events, Now, SctpWork, ShardEvent, SlowReceivers};

use relay::{Leave, RelayJob, RelayScratch};

/// The channels of a peer as the datachannel pass sees them.
pub(crate) type ChannelsQuery = (
    &'static Peer,
    &'static mut Sctp,
    &'static mut DataChannels,
    Option<&'static RoomMember>,
);

/// What the datachannel pass touches besides the channels.
#[derive(SystemParam)]
pub struct DataChannelCtx<'w, 's> {
    now: Res<'w, Now>,
    work: ResMut<'w, SctpWork>,
    events: ResMut<'w, Events>,
    stats: ResMut<'w, ShardStats>,
    rooms: Res<'w, RoomIndex>,
    presence: Res<'w, RoomPresence>,
    outbox: ResMut<'w, RelayOutbox>,
    relay: Local<'s, RelayScratch>,
    slow: ResMut<'w, SlowReceivers>,
    leave: Leave<'w, 's>,
}

/// The datachannel pass: DCEP and user messages from what SCTP delivered this tick;
/// room members' messages are relayed to the other members of their room.
pub fn datachannel(mut ctx: DataChannelCtx, mut q: Query<ChannelsQuery>) {
    // Receivers the relay wakes are appended to the work list (for sack_batch and
    // sctp_tx); they got nothing this tick, so this loop need not visit them.
    let senders = ctx.work.0.len();
    for i in 0..senders {
        let Some(&entity) = ctx.work.0.get(i) else {
            break;
        };
        let Ok((peer, mut a, mut dc, member)) = q.get_mut(entity) else {
            continue;
        };
        let room = member.map(|m| m.room);
        // Messages first: what was sent before a stream's reset arrived before it.
        // The list is taken out while `a` is lent to DCEP and put back empty, so its
        // capacity serves the next tick.
        let mut delivered = std::mem::take(&mut a.delivered);
        for m in delivered.drain(..) {
            let stream = m.stream.0;
            match m.ppid {
                Ppid::DCEP => on_dcep(&mut ctx, peer, &mut a, &mut dc, stream, &m.payload),
                Ppid::STRING | Ppid::BINARY | Ppid::STRING_EMPTY | Ppid::BINARY_EMPTY
                    if dc.channels.contains_key(&stream) =>
                {
                    if dc.receive_only {
                        ctx.stats.data_messages_refused += 1;
                        continue;
                    }
                    if room.is_some() {
                        // Relayed in its wire form: PPID and payload as they came.
                        ctx.relay.jobs.push(RelayJob {
                            stream,
                            ppid: m.ppid,
                            payload: m.payload,
                        });
                        continue;
                    }
                    let binary = m.ppid == Ppid::BINARY || m.ppid == Ppid::BINARY_EMPTY;
                    // RFC 8831 §6.6: an "empty" PPID's one byte is ignored.
                    let payload = if m.ppid == Ppid::STRING_EMPTY || m.ppid == Ppid::BINARY_EMPTY {
                        Bytes::new()
                    } else {
                        m.payload
                    };
                    ctx.events.0.push(ShardEvent::ChannelMessage {
                        peer: peer.id,
                        channel: stream,
                        binary,
                        payload,
                    });
                }
                // Not a data channel's: the raw SCTP user gets it.
                ppid => ctx.events.0.push(ShardEvent::SctpMessage {
                    peer: peer.id,
                    stream,
                    ppid: ppid.0,
                    payload: m.payload,
                }),
            }
        }
        a.delivered = delivered;
        // Relayed before the resets apply, so a channel closed in this tick still
        // names the label its last messages go out on.
        if let Some(room) = room
            && !ctx.relay.jobs.is_empty()
        {
            relay::fan_out(&mut ctx.relay_ctx(), &mut q, entity, room);
        }
        let Ok((peer, mut a, mut dc, _)) = q.get_mut(entity) else {
            continue;
        };
        if !a.reset.incoming_done.is_empty() || !a.reset.outgoing_done.is_empty() {
            apply_resets(&mut a, &mut dc, peer.id, &mut ctx.events);
        }
    }
    ctx.relay.woken.clear();
}

impl<'w, 's> DataChannelCtx<'w, 's> {
    fn relay_ctx(&mut self) -> relay::RelayCtx<'_, 'w, 's> {
        relay::RelayCtx {
            now: self.now.0,
            work: &mut self.work,
            stats: &mut self.stats,
            rooms: &self.rooms,
            presence: &self.presence,
            outbox: &mut self.outbox,
            relay: &mut self.relay,
            slow: &mut self.slow,
            leave: &mut self.leave,
        }
    }
}

/// A DCEP message on `stream` (RFC 8832 §5, §6).
fn on_dcep(
    ctx: &mut DataChannelCtx,
    peer: &Peer,
    a: &mut Sctp,
    dc: &mut DataChannels,
    stream: u16,
    payload: &[u8],
) {
    match DcepMessage::parse(payload) {
        Ok(DcepMessage::Open(open)) => {
            // RFC 8832 §6: create the channel and acknowledge it. An OPEN on a stream
            // of our own parity (RFC 8831 §6.5) or on one in use is refused: no
            // channel and no ACK.
            let ours = stream % 2 == dc.next_id % 2;
            if ours || dc.channels.contains_key(&stream) {
                ctx.stats.dcep_refused += 1;
                return;
            }
            dc.insert(
                stream,
                Channel {
                    label: open.label().into(),
                    protocol: open.protocol().into(),
                    kind: open.channel_type,
                    priority: open.priority,
                    state: ChannelState::Open,
                    incoming_reset: false,
                    outgoing_reset: false,
                },
            );
            ctx.events.0.push(ShardEvent::ChannelOpen {
                peer: peer.id,
                channel: stream,
                label: open.label().to_owned(),
                protocol: open.protocol().to_owned(),
                kind: open.channel_type,
            });
            send_dcep(a, ctx.now.0, stream, &DcepMessage::Ack);
        }
        Ok(DcepMessage::Ack) => {
            if let Some(ch) = dc.channels.get_mut(&stream)
                && ch.state == ChannelState::Opening
            {
                ch.state = ChannelState::Open;
                ctx.events.0.push(ShardEvent::ChannelOpen {
                    peer: peer.id,
                    channel: stream,
                    label: ch.label.to_string(),
                    protocol: ch.protocol.to_string(),
                    kind: ch.kind,
                });
            }
        }
        Err(_) => ctx.stats.dcep_malformed += 1,
    }
}
