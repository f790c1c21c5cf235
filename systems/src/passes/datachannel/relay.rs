//! The room relay: a message a member sends on a data channel labelled L goes to
//! every other member of its room whose association is established, on that
//! member's channel L; a member without one gets it opened by shoal (DCEP, RFC 8832
//! §6) with the sender's channel type, reliability parameter, priority and
//! protocol, and the message queued right behind the OPEN.
//!
//! Each receiver gets the sender's `Bytes` (a reference count, never a copy) with
//! the PPID it came with, so the string/binary kinds and their empty forms (RFC 8831
//! §6.6) pass through untouched, and the sender channel's ordering and reliability,
//! so order and loss behave per receiver as the sender asked.
//!
//! # Back-pressure
//!
//! A receiver's queue is its association's send queue (its buffered amount); the
//! relay keeps it near [`RelayLimits::high_watermark`] and never lets memory grow
//! for a receiver that cannot keep up.
//! - *Reliable channels* (ordered or not): a reliable message is delivered exactly
//!   once, in order, or the channel reports an error. So the relay does not drop
//!   one; it slows its sender instead. Before it takes a sender's next reliable
//!   message out of the sender's receive buffer, it checks that every receiver in
//!   the room on this shard can queue it without passing the high watermark; if one
//!   cannot, the message and all behind it stay in the receive buffer
//!   (`DataChannels::relay_held`, counted in `ShardStats::relay_holds`), which
//!   closes the sender's SCTP window (RFC 9260 §6.2: a_rwnd is the buffer less what
//!   it holds), and the sender's own stack queues what its application sends (its
//!   `bufferedAmount` rises). Once every receiver is down to
//!   [`RelayLimits::low_watermark`] the sender goes on, and the window update SACK
//!   tells it so. So the slowest reliable receiver paces the room's senders, but
//!   only for so long: a receiver that has held a sender back for
//!   [`RelayLimits::hold_limit`] without getting down to the low watermark is
//!   disconnected at the end of the tick: a DTLS close_notify, then removal
//!   (`RemoveReason::SlowReceiver`, counted in `ShardStats::relay_slow_receivers`;
//!   the control plane tells its signalling session
//!   `DISCONNECT_REASON_SLOW_RECEIVER`), and the room goes on without it. Losing
//!   its connection is the error its application sees, never a silent gap. A
//!   message its full send buffer refuses (possible only for messages that did not
//!   come through this shard's relay: another shard's, or the owner's) disconnects
//!   it the same way.
//! - *Unreliable channels* (a max-retransmits or max-lifetime policy, ordered or
//!   not) never slow a sender: a message for a receiver over the high watermark (or
//!   whose send buffer refuses it) is dropped for that receiver alone and counted,
//!   per receiver (`DataChannels::relay_dropped`) and per shard
//!   (`ShardStats::relay_dropped`); losing it is within what the channel promises.
//!
//! - *Members that leave* (a DTLS close_notify, the owner's `Command::LetGo`,
//!   consent expired, a slow receiver cut off; not the owner's
//!   `Command::RemovePeer`, nor a node-to-node link but one that left cleanly)
//!   are retired, not despawned, while their receive
//!   buffer holds
//!   messages (`RelayClosing`, `Shard::sweep_closing`): what SCTP acknowledged to
//!   them is relayed under this same policy, to receivers that go on without them;
//!   a retired member receives nothing.
//!
//! Receivers on other shards of the node (below) do not hold a sender back: for
//! them the send buffer is the whole queue. Only the way there can make a sender
//! wait: a tick's limit of forwards, or a sibling's full queue (below).
//!
//! Messages from the owner (`Shard::send_data`) follow the same policy on reliable
//! ordered channels, without holding anyone back (there is no sender to slow).
//!
//! # Rooms across shards
//!
//! When the room has members on other shards ([`RoomPresence`]), each message also
//! becomes one [`Forwarded`] record in the shard's [`RelayOutbox`], in the order the
//! relay handled the messages; the owner drains it after the tick
//! (`Shard::poll_forward`) and hands each record to those shards, which deliver it
//! to their own members under the same policy (`Shard::deliver_forwarded`) and never
//! forward it again: one hop. A record shares the payload and the channel's label
//! and protocol; nothing is copied.
//!
//! Reliable messages are not lost on the way, as they are not lost to a receiver
//! here. At most [`RelayLimits::max_forwards_per_tick`] records leave a tick: once a
//! tick has put out that many, a sender's next reliable message waits in its
//! receive buffer ([`wait_for_forwards`]: its window closes as a held sender's
//! does, but nobody is held to account) and is looked at again in the next tick,
//! which its timer brings at once. A sibling whose queue is full gives a batch back;
//! the node's `Links` keeps its reliable records to hand over again, first, every
//! [`FORWARD_RETRY`], and while any wait for a sibling (`ForwardsWaiting`) no
//! reliable message of a room with members there leaves its sender's receive
//! buffer, so they cannot pile up; the senders' SCTP windows close as for a slow
//! receiver. There is no time limit on that wait: a sibling that never takes from
//! its queue again is a shard thread that hangs. Unreliable messages are dropped
//! and counted instead (`ShardStats::relay_forwards_dropped`), within what their
//! channels promise. A member that left with messages its buffer could not pass on
//! for twice the hold limit goes with them (`Shard::sweep_closing`): the shard then
//! puts a gap record ([`Forwarded::gap`]) behind what it forwarded before, and each
//! shard that takes it closes the room's reliable channels, as the shard did its
//! own, and tells the room's links it holds (below).
//!
//! # Rooms across nodes
//!
//! A room cascaded over several nodes has, on each node, one link peer per other
//! node (`PeerSpec::link`, [`RoomMember::link`]): to the relay a member like any
//! other, whose messages are those of the other node's members. What a member of
//! this node sends goes out on every link; what comes in on a link goes to this
//! node's members (on this shard, and on its siblings: the [`Forwarded`] record says
//! `from_link`), never out on another link. So with every pair of nodes linked,
//! each message crosses one link to each other node, once. A link is a receiver
//! like the others for back-pressure: the other node's slow members close its
//! window, which holds this node's senders back, and it is cut off as a slow
//! receiver past the hold limit.
//!
//! A gap on this node (a leaving member let go with messages it held) is told
//! over each link of the room as a gap marker: a one-byte message with PPID
//! `LINK_GAP_PPID`, ordered and reliable, on the link's channel of each label of
//! the member's reliable channels, behind what went out there before. The datachannel pass of the
//! node at the other end stops taking the link's messages at the marker (what came
//! before goes out in this tick, the rest in the next) and lists the room in
//! `RelayGaps`; after the passes the shard closes the room's reliable channels and
//! puts a gap record for its siblings, marked `from_link`, so it goes no further.

use bevy_ecs::entity::EntityHashSet;
use bevy_ecs::prelude::*;
use bevy_ecs::system::SystemParam;
use bytes::Bytes;
use shoal_components::datachannel::{
    self, ChannelError, ChannelParams, DataChannels, queue_user_message,
};
use shoal_components::peer::{Ice, IceState};
use shoal_components::relay::{Forwarded, RelayHeld, RelayLimits, RelayOutbox};
#[cfg(doc)]
use shoal_components::room::RoomMember;
use shoal_components::room::{RoomId, RoomIndex, RoomPresence};
use shoal_components::sctp::Ppid;
use shoal_components::sctp::assoc::{AssocState, Sctp};
use shoal_components::sctp::dcep::Reliability;
use shoal_components::stats::ShardStats;
use shoal_components::tick::{DueTimers, SctpWork, SlowReceivers};
use shoal_components::time::Time;
use shoal_components::timer::{TimerHeap, TimerKind, Timers};

use super::ChannelsQuery;

/// One message to relay: what a member sent on `stream`, in its wire form.
#[derive(Debug)]
pub struct RelayJob {
    /// The sender's stream (its channel names the label and parameters).
    pub stream: u16,
    /// The PPID it came with.
    pub ppid: Ppid,
    /// The payload it came with (one zero byte for the empty PPIDs).
    pub payload: Bytes,
}

/// The relay's per-tick lists, the datachannel pass's own, reused tick after tick.
#[derive(Debug, Default)]
pub struct RelayScratch {
    /// Messages of the sender being handled.
    pub jobs: Vec<RelayJob>,
    /// Receivers already on this tick's work list.
    pub woken: EntityHashSet,
}

/// Which peers are leaving, as the datachannel pass sees them.
#[derive(SystemParam)]
pub struct Leave<'w, 's> {
    ice: Query<'w, 's, &'static Ice>,
}

impl Leave<'_, '_> {
    /// Whether the peer is on its way out this tick (or has no ICE state at all).
    fn is_leaving(&self, entity: Entity) -> bool {
        !self
            .ice
            .get(entity)
            .is_ok_and(|ice| ice.state != IceState::Failed)
    }
}

/// The datachannel pass's resources, lent to the relay.
pub(crate) struct RelayCtx<'a, 'w, 's> {
    pub now: Time,
    pub work: &'a mut SctpWork,
    pub stats: &'a mut ShardStats,
    pub rooms: &'a RoomIndex,
    pub presence: &'a RoomPresence,
    pub outbox: &'a mut RelayOutbox,
    pub relay: &'a mut RelayScratch,
    pub slow: &'a mut SlowReceivers,
    pub leave: &'a mut Leave<'w, 's>,
    pub limits: RelayLimits,
    pub held: &'a mut RelayHeld,
    pub due: &'a DueTimers,
    pub heap: &'a mut TimerHeap,
    pub timers: &'a mut Query<'w, 's, &'static mut Timers>,
}

/// Messages a receiver may have queued before the relay holds senders back for it
/// (and drops unreliable messages for it), whatever their bytes: half of what its
/// send queue takes (`SendQueueConfig::max_queued_messages`, 16 384), so small
/// messages meet this, not the queue's refusal.
pub const HIGH_WATERMARK_MESSAGES: usize = 8 * 1024;
/// Messages a receiver's queue must fall to for the senders it held to go on.
pub const LOW_WATERMARK_MESSAGES: usize = 4 * 1024;

/// Whether a receiver's queue is over the high watermark, in bytes or messages.
fn over_high(a: &Sctp, limits: &RelayLimits) -> bool {
    a.buffered_amount() > limits.high_watermark || a.queued_messages() > HIGH_WATERMARK_MESSAGES
}

/// Whether a receiver's queue is down to the low watermark, in bytes and messages.
fn down_to_low(a: &Sctp, limits: &RelayLimits) -> bool {
    a.buffered_amount() <= limits.low_watermark && a.queued_messages() <= LOW_WATERMARK_MESSAGES
}

/// What a sender's messages may still add, this tick, to the queues of the
/// receivers in its room on this shard.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Budget {
    /// Bytes before the fullest receiver passes the high watermark.
    left: usize,
    /// Messages before the fullest receiver passes the high watermark in messages.
    left_messages: usize,
    /// The next message goes whatever its size: no receiver has anything queued,
    /// or the sender was let go this tick (one larger than the room between the
    /// watermarks would otherwise wait for ever).
    first: bool,
}

impl Budget {
    /// Whether a reliable message of `len` bytes may go now.
    pub(crate) fn admits(&self, len: usize) -> bool {
        self.first || (len <= self.left && self.left_messages > 0)
    }

    /// A message of `len` bytes went.
    pub(crate) fn take(&mut self, len: usize) {
        self.left = self.left.saturating_sub(len);
        self.left_messages = self.left_messages.saturating_sub(1);
        self.first = false;
    }
}

/// Whether `e` is a node-to-node link of its room.
fn is_link(q: &Query<ChannelsQuery>, e: Entity) -> bool {
    q.get(e).is_ok_and(|(_, _, _, m)| m.is_some_and(|m| m.link))
}

/// Whether `to` is a receiver the relay delivers to now (and so waits for): what
/// came in on a link (`from_link`) goes out on no other link.
fn receiving(
    slow: &SlowReceivers,
    leave: &Leave,
    q: &Query<ChannelsQuery>,
    from: Entity,
    from_link: bool,
    to: Entity,
) -> bool {
    to != from
        && !leave.is_leaving(to)
        && !slow.0.contains(&to)
        && q.get(to).is_ok_and(|(_, a, _, m)| {
            a.state == AssocState::Established && !(from_link && m.is_some_and(|m| m.link))
        })
}

/// The budget of `from`'s messages this tick, from the fullest receiver's queue in
/// `room`; a held sender stays held (budget 0) until every receiver is down to the
/// low watermark, and each receiver over it meanwhile is behind ([`mark_behind`]).
/// Receivers found down to it are no longer behind. O(members), one pass.
pub(crate) fn budget(
    ctx: &mut RelayCtx,
    q: &mut Query<ChannelsQuery>,
    from: Entity,
    room: RoomId,
) -> Budget {
    let limits = ctx.limits;
    let from_link = is_link(q, from);
    let was_held = q.get(from).is_ok_and(|(_, _, dc, _)| dc.relay_held);
    let (mut fullest, mut most_messages, mut all_low) = (0, 0, true);
    for &to in ctx.rooms.members(room) {
        if !receiving(ctx.slow, ctx.leave, q, from, from_link, to) {
            continue;
        }
        let Ok((_, a, mut dc, _)) = q.get_mut(to) else {
            continue;
        };
        if down_to_low(&a, &limits) {
            dc.relay_behind_since = None;
        } else {
            all_low = false;
            if was_held {
                mark_behind(ctx, to, &mut dc);
            }
        }
        fullest = fullest.max(a.buffered_amount());
        most_messages = most_messages.max(a.queued_messages());
    }
    if was_held && !all_low {
        return Budget {
            left: 0,
            left_messages: 0,
            first: false,
        };
    }
    if let Ok((_, _, mut dc, _)) = q.get_mut(from) {
        dc.relay_held = false;
    }
    Budget {
        left: limits.high_watermark.saturating_sub(fullest),
        left_messages: HIGH_WATERMARK_MESSAGES.saturating_sub(most_messages),
        first: was_held || (fullest == 0 && most_messages == 0),
    }
}

/// Receiver `to` holds a sender back: behind from now if it was not already, with
/// its hold limit's timer armed.
fn mark_behind(ctx: &mut RelayCtx, to: Entity, dc: &mut DataChannels) {
    if dc.relay_behind_since.is_some() {
        return;
    }
    let now = ctx.now;
    dc.relay_behind_since = Some(now);
    if let Ok(mut timers) = ctx.timers.get_mut(to) {
        ctx.heap.arm(
            &mut timers,
            to,
            TimerKind::RelayHold,
            now + ctx.limits.hold_limit,
        );
    }
}

/// `from`'s next reliable message waits. A sender not held yet is held from now, and
/// each receiver over the low watermark (each one it now waits for) is behind; one
/// held already had its receivers looked at by [`budget`].
pub(crate) fn hold(ctx: &mut RelayCtx, q: &mut Query<ChannelsQuery>, from: Entity, room: RoomId) {
    let Ok((_, _, mut dc, _)) = q.get_mut(from) else {
        return;
    };
    if dc.relay_held {
        return;
    }
    dc.relay_held = true;
    dc.relay_holds += 1;
    ctx.stats.relay_holds += 1;
    if !ctx.held.0.contains(&from) {
        ctx.held.0.push(from);
    }
    let limits = ctx.limits;
    let from_link = is_link(q, from);
    for &to in ctx.rooms.members(room) {
        if !receiving(ctx.slow, ctx.leave, q, from, from_link, to) {
            continue;
        }
        let Ok((_, a, mut dc, _)) = q.get_mut(to) else {
            continue;
        };
        if !down_to_low(&a, &limits) {
            mark_behind(ctx, to, &mut dc);
        }
    }
}

/// How soon a shard tries again to hand a sibling the reliable forwarded messages
/// its full queue refused, and looks again at the senders waiting for them.
pub const FORWARD_RETRY: std::time::Duration = std::time::Duration::from_millis(1);

/// `from`'s next reliable message waits for room among the messages forwarded to
/// the room's other shards. It stays in the receive buffer, which keeps the
/// sender's window closed as a hold does, but the sender is not held: no receiver
/// is behind for it. Its timer brings it back on the work list at `at`.
pub(crate) fn wait_for_forwards(ctx: &mut RelayCtx, from: Entity, at: Time) {
    ctx.stats.relay_forward_waits += 1;
    if let Ok(mut timers) = ctx.timers.get_mut(from) {
        ctx.heap.arm(&mut timers, from, TimerKind::RelayForward, at);
    }
}

/// Receivers whose hold limit fell due this tick: one still behind (over the low
/// watermark all along since it first held a sender back) is disconnected as a slow
/// receiver; the senders it held go on in this tick's pass.
pub(crate) fn on_hold_limits(ctx: &mut RelayCtx, q: &mut Query<ChannelsQuery>) {
    for &(to, kind) in &ctx.due.0 {
        if kind != TimerKind::RelayHold {
            continue;
        }
        // A member that left this tick (and relays what it sent) receives nothing.
        if ctx.leave.is_leaving(to) {
            continue;
        }
        let Ok((_, a, mut dc, _)) = q.get_mut(to) else {
            continue;
        };
        let Some(since) = dc.relay_behind_since else {
            continue;
        };
        // Down to the low watermark, gone from the association, or holding no one
        // back any more (no sender on the shard is held): not behind.
        if down_to_low(&a, &ctx.limits)
            || a.state != AssocState::Established
            || ctx.held.0.is_empty()
        {
            dc.relay_behind_since = None;
            continue;
        }
        if ctx.now < since + ctx.limits.hold_limit {
            // Behind again since a later time: its own timer is armed.
            continue;
        }
        dc.relay_behind_since = None;
        if !ctx.slow.0.contains(&to) {
            ctx.stats.relay_slow_receivers += 1;
            ctx.slow.0.push(to);
        }
    }
}

/// Relays the jobs `from` produced to the other members of `room`, and puts them
/// out for the room's other shards. O(members) per message: members come from the
/// room index, each looked up by entity.
pub(crate) fn fan_out(
    ctx: &mut RelayCtx,
    q: &mut Query<ChannelsQuery>,
    from: Entity,
    room: RoomId,
) {
    let RelayCtx {
        now,
        work,
        stats,
        rooms,
        presence,
        outbox,
        relay,
        slow,
        leave,
        limits,
        ..
    } = ctx;
    let members = rooms.members(room);
    let shared = !presence.siblings(room).is_empty();
    let from_link = is_link(q, from);
    let max_forwards = limits.max_forwards_per_tick;
    for job in relay.jobs.drain(..) {
        if shared {
            forward(
                outbox,
                stats,
                q,
                (from, from_link),
                room,
                &job,
                max_forwards,
            );
        }
        for &to in members {
            if to == from
                || leave.is_leaving(to)
                || slow.0.contains(&to)
                || (from_link && is_link(q, to))
            {
                continue;
            }
            let Ok([(_, _, sender, _), (_, mut a, mut dc, _)]) = q.get_many_mut([from, to]) else {
                continue;
            };
            let Some(channel) = sender.channels.get(&job.stream) else {
                break;
            };
            let payload = job.payload.clone();
            match deliver(
                &mut a,
                &mut dc,
                stats,
                limits,
                *now,
                channel.params(),
                job.ppid,
                payload,
            ) {
                Delivery::Queued => {
                    if relay.woken.insert(to) {
                        work.0.push(to);
                    }
                }
                Delivery::Skipped => {}
                Delivery::SlowReceiver => slow.0.push(to),
            }
        }
    }
}

/// Puts one message of `from` out for the room's other shards, unless this tick has
/// put out its limit already.
fn forward(
    outbox: &mut RelayOutbox,
    stats: &mut ShardStats,
    q: &Query<ChannelsQuery>,
    (from, from_link): (Entity, bool),
    room: RoomId,
    job: &RelayJob,
    max_forwards: usize,
) {
    let Ok((_, _, sender, _)) = q.get(from) else {
        return;
    };
    let Some(channel) = sender.channels.get(&job.stream) else {
        return;
    };
    if outbox.0.len() >= max_forwards {
        stats.relay_forwards_dropped += 1;
        return;
    }
    stats.relay_forwards_out += 1;
    outbox.0.push(Forwarded {
        room,
        label: channel.label.clone(),
        protocol: channel.protocol.clone(),
        kind: channel.kind,
        priority: channel.priority,
        ppid: job.ppid,
        payload: job.payload.clone(),
        from_link,
        gap: false,
    });
}

/// The longest label, and the longest protocol, for which shoal opens a channel on
/// a receiver. DCEP allows 64 KiB each (RFC 8832 §5.1); a member sending on channels
/// with huge labels would otherwise fill every other member's send buffer with
/// DATA_CHANNEL_OPENs and have them disconnected as slow.
pub const MAX_RELAYED_NAME: usize = 256;
/// The most channels a receiver may have for shoal to open another on it (stream
/// ids allow 1024 per side): a member cycling through new labels cannot make every
/// other member hold hundreds of channels.
pub const MAX_CHANNELS_FOR_RELAY: usize = 128;

/// Queues a message in its wire form on the receiver's channel labelled
/// `params.label`, opening one with `params` if it has none. The message keeps
/// the ordering and reliability of `params.kind`, the sender's.
pub(crate) fn relay_to(
    a: &mut Sctp,
    dc: &mut DataChannels,
    now: Time,
    params: ChannelParams<'_>,
    ppid: Ppid,
    payload: Bytes,
) -> Result<(), ChannelError> {
    // RFC 8829 §5.8.2: the peer's max-message-size is respected. The empty forms'
    // one zero byte stands for nothing, so a 0-byte message always fits.
    if payload.len() > dc.remote_max_message_size {
        return Err(ChannelError::TooLarge {
            size: payload.len(),
            max: dc.remote_max_message_size,
        });
    }
    let stream = match dc.by_label(params.label) {
        Some(stream) => stream,
        None if params.label.len() > MAX_RELAYED_NAME
            || params.protocol.len() > MAX_RELAYED_NAME =>
        {
            return Err(ChannelError::TooLong);
        }
        None if dc.channels.len() >= MAX_CHANNELS_FOR_RELAY => {
            return Err(ChannelError::NoStream);
        }
        // RFC 8832 §6: the opener may send user data right after the OPEN, without
        // waiting for the ACK (ordered until then, which queue_user_message sees to).
        None => datachannel::open(a, dc, now, params)?,
    };
    let state = dc
        .channels
        .get(&stream)
        .map(|ch| ch.state)
        .ok_or(ChannelError::UnknownChannel(stream))?;
    queue_user_message(a, now, stream, state, params.kind, ppid, payload)
}

/// What [`deliver`] did for one receiver.
pub(crate) enum Delivery {
    /// Queued: the receiver's association has something to send.
    Queued,
    /// Not delivered to this receiver (not established yet, or dropped); the
    /// counters say why.
    Skipped,
    /// Remove the receiver: it cannot keep up with a reliable channel.
    SlowReceiver,
}

/// Delivers one message to one receiver under the back-pressure policy of the
/// module documentation, and counts what happened.
#[allow(clippy::too_many_arguments)]
pub(crate) fn deliver(
    a: &mut Sctp,
    dc: &mut DataChannels,
    stats: &mut ShardStats,
    limits: &RelayLimits,
    now: Time,
    params: ChannelParams<'_>,
    ppid: Ppid,
    payload: Bytes,
) -> Delivery {
    if a.state != AssocState::Established {
        return Delivery::Skipped;
    }
    let reliable = params.kind.reliability == Reliability::Reliable;
    if !reliable && over_high(a, limits) {
        stats.relay_dropped += 1;
        dc.relay_dropped += 1;
        return Delivery::Skipped;
    }
    match relay_to(a, dc, now, params, ppid, payload) {
        Ok(()) => {
            stats.relay_messages += 1;
            Delivery::Queued
        }
        Err(ChannelError::WouldBlock) if reliable => {
            stats.relay_slow_receivers += 1;
            Delivery::SlowReceiver
        }
        Err(ChannelError::WouldBlock) => {
            stats.relay_dropped += 1;
            dc.relay_dropped += 1;
            Delivery::Skipped
        }
        Err(_) => {
            stats.relay_undeliverable += 1;
            Delivery::Skipped
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_components::sctp::dcep::ChannelType;

    #[test]
    fn nothing_over_the_receivers_max_message_size_is_relayed() {
        // The receiver announced a=max-message-size:1024 (RFC 8841).
        let mut a = Sctp::new(false, 5000, 5000);
        let mut dc = DataChannels::new(false);
        dc.remote_max_message_size = 1024;
        let params = ChannelParams {
            label: "chat",
            protocol: "",
            kind: ChannelType::default(),
            priority: 256,
        };
        let mut relay = |len: usize| {
            relay_to(
                &mut a,
                &mut dc,
                Time::ZERO,
                params,
                Ppid(53),
                Bytes::from(vec![0; len]),
            )
        };
        assert_eq!(
            relay(1025),
            Err(ChannelError::TooLarge {
                size: 1025,
                max: 1024
            })
        );
        // At the limit it passes the check (and meets the next: this association is
        // not established, so the channel cannot be opened).
        assert!(!matches!(relay(1024), Err(ChannelError::TooLarge { .. })));
    }
}
