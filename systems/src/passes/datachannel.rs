//! The `datachannel` pass: turns what SCTP reassembled into channel events (DCEP OPEN
//! and ACK, RFC 8832 §6; user messages with the WebRTC PPIDs, RFC 8831 §6.6;
//! channels closed by stream resets, §6.7). A message from a room member is relayed
//! to the other members ([`relay`]) instead of being reported; other peers' messages
//! become [`ShardEvent::ChannelMessage`] for the shard's owner.
//!
//! The pass takes whole messages out of each association's receive buffer itself,
//! one at a time: a room member's next reliable message stays there while a
//! receiver it goes to is over the relay's high watermark, and what stays there
//! keeps the member's SCTP window closed (RFC 9260 §6.2), which is how the relay
//! slows a sender to its slowest receiver ([`relay`]'s back-pressure).

pub mod relay;

use bevy_ecs::prelude::*;
use bevy_ecs::system::SystemParam;
use bytes::Bytes;
use shoal_components::datachannel::{Channel, ChannelState, DataChannels, apply_resets, send_dcep};
use shoal_components::peer::Peer;
use shoal_components::relay::{
    ForwardsWaiting, LINK_GAP_PPID, RelayClosing, RelayGaps, RelayHeld, RelayLimits, RelayOutbox,
};
use shoal_components::room::{RoomIndex, RoomMember, RoomPresence};
use shoal_components::sctp::Ppid;
use shoal_components::sctp::assoc::Sctp;
use shoal_components::sctp::dcep::{DcepMessage, Reliability};
use shoal_components::stats::ShardStats;
use shoal_components::tick::{DueTimers, Events, Now, SctpWork, ShardEvent, SlowReceivers};
use shoal_components::timer::{TimerHeap, TimerKind, Timers};

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
    forwards_waiting: Res<'w, ForwardsWaiting>,
    relay: Local<'s, RelayScratch>,
    slow: ResMut<'w, SlowReceivers>,
    leave: Leave<'w, 's>,
    limits: Res<'w, RelayLimits>,
    held: ResMut<'w, RelayHeld>,
    closing: Res<'w, RelayClosing>,
    due: Res<'w, DueTimers>,
    gaps: ResMut<'w, RelayGaps>,
    heap: ResMut<'w, TimerHeap>,
    timers: Query<'w, 's, &'static mut Timers>,
}

/// The datachannel pass: DCEP and user messages from what SCTP reassembled; room
/// members' messages are relayed to the other members of their room.
pub fn datachannel(mut ctx: DataChannelCtx, mut q: Query<ChannelsQuery>) {
    relay::on_hold_limits(&mut ctx.relay_ctx(), &mut q);
    // Held senders are looked at every tick, whether or not they sent anything: a
    // receiver's acknowledgements may have let them go on.
    let mut held = std::mem::take(&mut ctx.held.0);
    held.retain(|&e| q.get(e).is_ok_and(|(_, _, dc, _)| dc.relay_held));
    ctx.work.0.extend_from_slice(&held);
    ctx.held.0 = held;
    // And members that closed with messages still in their receive buffers.
    let closing = ctx.closing.0.iter().map(|m| m.entity);
    ctx.work.0.extend(closing);
    // So are senders whose messages waited for room among the forwards.
    for &(e, kind) in &ctx.due.0 {
        if kind == TimerKind::RelayForward {
            ctx.work.0.push(e);
        }
    }
    // Receivers the relay wakes are appended to the work list (for sack_batch and
    // sctp_tx); they got nothing this tick, so this loop need not visit them.
    let senders = ctx.work.0.len();
    for i in 0..senders {
        let Some(&entity) = ctx.work.0.get(i) else {
            break;
        };
        let Ok((_, a, mut dc, member)) = q.get_mut(entity) else {
            continue;
        };
        let room = member.map(|m| m.room);
        let link = member.is_some_and(|m| m.link);
        // A link that brought a gap marker earlier in this tick: what came after it
        // waits until its room's channels have closed (the list is almost always
        // empty).
        if link && ctx.gaps.0.iter().any(|&(_, e)| e == entity) {
            continue;
        }
        let waiting = a.peek_message().is_some();
        if !waiting {
            // A held sender with nothing waiting: its association started over (or
            // was dropped) under it.
            dc.relay_held = false;
        }
        // What this member's reliable messages may add to its receivers' queues
        // (looked at only when it has something: most entities here brought SACKs).
        let mut budget = match room {
            Some(room) if waiting => {
                Some(relay::budget(&mut ctx.relay_ctx(), &mut q, entity, room))
            }
            _ => None,
        };
        // A room with members on other shards: each message is also forwarded.
        let siblings = room.map_or(&[][..], |r| ctx.presence.siblings(r));
        let shared = !siblings.is_empty();
        // Messages forwarded earlier wait for one of those shards' full queue.
        let siblings_full = ctx.forwards_waiting.for_any(siblings);
        let Ok((peer, mut a, mut dc, _)) = q.get_mut(entity) else {
            continue;
        };
        let (mut waits, mut waits_for_forwards, mut gap) = (false, false, false);
        // Messages first: what was sent before a stream's reset arrived before it.
        while let Some(next) = a.peek_message() {
            // The node at the link's other end lost messages of the room that came
            // before this marker (`LINK_GAP_PPID`). What came before it goes out in
            // this tick; the room's reliable channels close after (`RelayGaps`);
            // what comes after it waits for the next tick (and is not delivered to
            // a member whose channel of its label is still closing then, as for
            // any message relayed while a channel resets).
            if link && next.ppid == LINK_GAP_PPID {
                a.pop_message();
                ctx.stats.relay_gap_markers_taken += 1;
                if let Some(room) = room {
                    ctx.gaps.0.push((room, entity));
                }
                gap = true;
                break;
            }
            if let Some(budget) = budget.as_mut()
                && is_user(next.ppid)
                && !dc.receive_only
                && let Some(ch) = dc.channels.get(&next.stream.0)
            {
                // Every relayed message counts against the budget; a reliable one
                // that does not fit waits. So does one that could not be forwarded
                // to the other shards now: this tick's forwards are at their
                // limit, or earlier ones wait for a full queue.
                let len = next.payload.len();
                if ch.kind.reliability == Reliability::Reliable {
                    if shared
                        && (siblings_full
                            || ctx.outbox.0.len() + ctx.relay.jobs.len()
                                >= ctx.limits.max_forwards_per_tick)
                    {
                        (waits, waits_for_forwards) = (true, true);
                        break;
                    }
                    if !budget.admits(len) {
                        waits = true;
                        break;
                    }
                }
                budget.take(len);
            }
            let Some(m) = a.pop_message() else {
                break;
            };
            let stream = m.stream.0;
            match m.ppid {
                Ppid::DCEP => on_dcep(&mut ctx, peer, &mut a, &mut dc, stream, &m.payload),
                ppid if is_user(ppid) && dc.channels.contains_key(&stream) => {
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
        // A SACK may be owed for the window taking messages reopened: sack_batch
        // sees to it for the entities on the work list, which this one is.
        // Relayed before the resets apply, so a channel closed in this tick still
        // names the label its last messages go out on.
        if gap
            && a.peek_message().is_some()
            && let Ok(mut timers) = ctx.timers.get_mut(entity)
        {
            ctx.heap
                .arm(&mut timers, entity, TimerKind::RelayForward, ctx.now.0);
        }
        if let Some(room) = room {
            if !ctx.relay.jobs.is_empty() {
                relay::fan_out(&mut ctx.relay_ctx(), &mut q, entity, room);
            }
            if waits_for_forwards {
                // Looked at again once this tick's forwards are out, or at the
                // next try of those waiting for a full queue.
                let at = if siblings_full {
                    ctx.now.0 + relay::FORWARD_RETRY
                } else {
                    ctx.now.0
                };
                relay::wait_for_forwards(&mut ctx.relay_ctx(), entity, at);
            } else if waits {
                relay::hold(&mut ctx.relay_ctx(), &mut q, entity, room);
            }
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

/// Whether `ppid` is one of a data channel's user message kinds (RFC 8831 §8).
fn is_user(ppid: Ppid) -> bool {
    matches!(
        ppid,
        Ppid::STRING | Ppid::BINARY | Ppid::STRING_EMPTY | Ppid::BINARY_EMPTY
    )
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
            limits: *self.limits,
            held: &mut self.held,
            due: &self.due,
            heap: &mut self.heap,
            timers: &mut self.timers,
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
