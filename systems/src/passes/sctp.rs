//! The `sctp` pass: runs each association (`shoal_components::sctp::assoc`) over
//! what DTLS decrypted this tick (SCTP packets), what started (associations whose
//! DTLS just connected) and the SCTP timers that fell due (T1, T2, T3-rtx, delayed
//! SACK, stream reset, heartbeat). It never sends: arriving chunks leave control chunks queued
//! and a SACK owed for `sack_batch` and `sctp_tx`, which visit only the associations
//! this pass (or the owner's sends) put on the work list (`SctpWork`).

use bevy_ecs::prelude::*;
use bevy_ecs::system::SystemParam;
use rand_core::RngCore;
use shoal_components::datachannel::DataChannels;
use shoal_components::peer::Peer;
use shoal_components::sctp::Tsn;
use shoal_components::sctp::assoc::{
    AssocEnd, AssocState, Inputs, MAX_ASSOCIATION_RETRANSMITS, RTO_INITIAL, Sctp, handle_packet,
    next_after_answer, on_heartbeat_timer, resend_reset, wants_fresh_values,
};
use shoal_components::sctp::rx::AckUrgency;
use shoal_components::shared::{SctpShared, ShardRng};
use shoal_components::stats::ShardStats;
use shoal_components::tick::{DueTimers, Events, Now, SctpInbox, SctpStart, SctpWork, ShardEvent};
use shoal_components::time::Time;
use shoal_components::timer::{TimerHeap, TimerKind, Timers};

/// The timers of an association's setup and data transfer, which end with it.
const SETUP_AND_DATA_TIMERS: [TimerKind; 5] = [
    TimerKind::SctpT1,
    TimerKind::SctpT2,
    TimerKind::SctpT3,
    TimerKind::SctpDelayedAck,
    TimerKind::SctpReconfig,
];

/// What the sctp pass touches besides the associations.
#[derive(SystemParam)]
pub struct SctpCtx<'w> {
    now: Res<'w, Now>,
    shared: Res<'w, SctpShared>,
    heap: ResMut<'w, TimerHeap>,
    events: ResMut<'w, Events>,
    stats: ResMut<'w, ShardStats>,
    rng: ResMut<'w, ShardRng>,
    work: ResMut<'w, SctpWork>,
}

/// The sctp pass.
pub fn sctp(
    mut ctx: SctpCtx,
    mut start: ResMut<SctpStart>,
    mut inbox: ResMut<SctpInbox>,
    due: Res<DueTimers>,
    mut q: Query<(&Peer, &mut Sctp, &mut Timers)>,
    mut channels: Query<&mut DataChannels>,
) {
    let now = ctx.now.0;
    for entity in start.0.drain(..) {
        let Ok((_, mut a, mut timers)) = q.get_mut(entity) else {
            continue;
        };
        if a.initiator && a.state == AssocState::Closed {
            let (vtag, tsn) = ctx.rng.sctp_tag_and_tsn();
            let limits = ctx.shared.limits;
            a.start(vtag, tsn, &limits);
            // RFC 9260 §5.1 A: T1-init, from RTO.Initial (1 s).
            ctx.heap
                .arm(&mut timers, entity, TimerKind::SctpT1, now + RTO_INITIAL);
            ctx.work.0.push(entity);
        }
    }
    for (entity, bytes) in inbox.0.drain(..) {
        let Ok((peer, mut a, mut timers)) = q.get_mut(entity) else {
            continue;
        };
        // Only an INIT's answer needs fresh random values.
        let (fresh, nonce) = if wants_fresh_values(&bytes) {
            (ctx.rng.sctp_tag_and_tsn(), ctx.rng.0.next_u64())
        } else {
            ((0, Tsn(0)), 0)
        };
        let shared = &*ctx.shared;
        let inp = Inputs {
            now,
            cookie_key: &shared.cookie_key,
            limits: &shared.limits,
            fresh,
            nonce,
        };
        let was = a.state;
        let fx = handle_packet(&mut a, &bytes, &inp);
        if fx.dropped {
            ctx.stats.sctp_packets_dropped += 1;
        }
        if fx.restarted {
            // RFC 9260 §5.2.4 A: the old association is over (its timers with it) and
            // a new one is up in its place.
            ctx.stats.sctp_restarts += 1;
            for k in SETUP_AND_DATA_TIMERS {
                timers.cancel(k);
            }
            ctx.events.0.push(ShardEvent::SctpClosed {
                peer: peer.id,
                reason: AssocEnd::PeerRestarted,
            });
            // Its channels go with it, now: no room message of this tick may be
            // queued on a stream of the old association.
            if let Ok(mut dc) = channels.get_mut(entity) {
                dc.close_all(peer.id, &mut ctx.events);
            }
        }
        let up = fx.established
            || fx.restarted
            || (was != AssocState::Established && a.state == AssocState::Established);
        if up {
            timers.cancel(TimerKind::SctpT1);
            if a.zero_checksum_tx {
                ctx.stats.sctp_zero_checksum_associations += 1;
            }
            ctx.events
                .0
                .push(ShardEvent::SctpEstablished { peer: peer.id });
        }
        if fx.heartbeat_acked {
            ctx.stats.sctp_heartbeats_acked += 1;
        }
        if up || fx.heartbeat_acked {
            // RFC 9260 §8.3: the next HEARTBEAT a whole interval from now.
            let random = ctx.rng.0.next_u64();
            match next_after_answer(&a, now, random, &ctx.shared.limits) {
                Some(at) => ctx
                    .heap
                    .arm(&mut timers, entity, TimerKind::SctpHeartbeat, at),
                None => timers.cancel(TimerKind::SctpHeartbeat),
            }
        }
        if fx.sack_processed {
            let restart = fx.cumulative_advanced;
            rearm_t3(&mut ctx.heap, entity, &mut a, &mut timers, now, restart);
        }
        if fx.shutdown_acked || fx.shutdown_sent {
            arm_t2(&mut ctx.heap, entity, &a, &mut timers, now);
        }
        after_input(&mut ctx, entity, peer, &mut a, &mut timers);
    }
    for &(entity, kind) in &due.0 {
        let Ok((peer, mut a, mut timers)) = q.get_mut(entity) else {
            continue;
        };
        // An association that ended (maybe by a packet of this very tick, after
        // ingest took its timers) has nothing left to time.
        if a.ended.is_some() {
            continue;
        }
        match kind {
            TimerKind::SctpT1 => on_t1(&mut ctx, entity, &mut a, &mut timers),
            TimerKind::SctpT3 => on_t3(&mut ctx, entity, &mut a, &mut timers),
            TimerKind::SctpT2 => on_t2(&mut ctx, entity, &mut a, &mut timers),
            TimerKind::SctpDelayedAck => {
                if let Some(rx) = a.rx.as_mut() {
                    rx.delayed_ack_expired();
                    a.sack_now = true;
                }
            }
            TimerKind::SctpSend => {}
            TimerKind::SctpHeartbeat => {
                let random = ctx.rng.0.next_u64();
                let next = on_heartbeat_timer(&mut a, now, random, &ctx.shared.limits);
                if a.heartbeat.is_some_and(|h| h.sent_at == now) {
                    ctx.stats.sctp_heartbeats_sent += 1;
                }
                match next {
                    Some(at) => ctx
                        .heap
                        .arm(&mut timers, entity, TimerKind::SctpHeartbeat, at),
                    None => timers.cancel(TimerKind::SctpHeartbeat),
                }
            }
            TimerKind::SctpReconfig => {
                // RFC 6525 §5.1.1: the request is retransmitted until answered.
                if resend_reset(&mut a) {
                    let rto = a.tx.as_ref().map_or(RTO_INITIAL, |tx| tx.rto.rto());
                    ctx.heap
                        .arm(&mut timers, entity, TimerKind::SctpReconfig, now + rto);
                }
            }
            _ => continue,
        }
        after_input(&mut ctx, entity, peer, &mut a, &mut timers);
    }
}

fn after_input(ctx: &mut SctpCtx, entity: Entity, peer: &Peer, a: &mut Sctp, timers: &mut Timers) {
    if a.reset.in_flight.is_none() {
        timers.cancel(TimerKind::SctpReconfig);
    }
    if let Some(reason) = a.ended
        && !a.closed_reported
    {
        a.closed_reported = true;
        for k in SETUP_AND_DATA_TIMERS {
            timers.cancel(k);
        }
        timers.cancel(TimerKind::SctpHeartbeat);
        ctx.events.0.push(ShardEvent::SctpClosed {
            peer: peer.id,
            reason,
        });
    }
    // RFC 9260 §9.2: the last of our data acknowledged after the peer's SHUTDOWN,
    // or after ours was asked for (SHUTDOWN-PENDING).
    if a.ack_shutdown_when_drained() || a.send_shutdown_when_drained() {
        arm_t2(&mut ctx.heap, entity, a, timers, ctx.now.0);
    }
    // A delayed SACK gets its timer (RFC 9260 §6.2); an immediate one goes this tick.
    if let Some(rx) = a.rx.as_ref()
        && rx.ack_urgency() == Some(AckUrgency::Delayed)
        && timers.get(TimerKind::SctpDelayedAck).is_none()
    {
        let at = ctx.now.0 + rx.tracker().limits().sack_delay;
        ctx.heap.arm(timers, entity, TimerKind::SctpDelayedAck, at);
    }
    ctx.work.0.push(entity);
}

fn on_t1(ctx: &mut SctpCtx, entity: Entity, a: &mut Sctp, timers: &mut Timers) {
    if !matches!(a.state, AssocState::CookieWait | AssocState::CookieEchoed) {
        return;
    }
    // RFC 9260 §4 notes 2 and 3: past Max.Init.Retransmits the setup gives up, here
    // only when configured (`SctpLimits::max_init_retransmits`); telling the peer,
    // which may have established from an earlier COOKIE ECHO.
    if ctx
        .shared
        .limits
        .max_init_retransmits
        .is_some_and(|max| a.init_transmissions > max)
    {
        a.give_up(AssocEnd::SetupFailed);
        return;
    }
    a.init_transmissions += 1;
    let limits = ctx.shared.limits;
    match a.state {
        AssocState::CookieWait => a.queue_init(&limits),
        _ => a.queue_cookie_echo(),
    }
    // RFC 9260 §6.3.3 applies to T1 too (§5.1 C): the timeout doubles.
    let backoff = RTO_INITIAL.saturating_mul(1 << a.init_transmissions.min(6));
    let cap = limits.max_timer_backoff;
    ctx.heap.arm(
        timers,
        entity,
        TimerKind::SctpT1,
        ctx.now.0 + backoff.min(cap),
    );
}

fn on_t3(ctx: &mut SctpCtx, entity: Entity, a: &mut Sctp, timers: &mut Timers) {
    let now = ctx.now.0;
    let Some(tx) = a.tx.as_mut() else { return };
    let data = tx.outstanding.has_outstanding_data();
    // RFC 3758 §3.5 A5, C5: an unacknowledged FORWARD TSN goes again, even when no
    // DATA is outstanding any more (else a lost one stalls the peer's ordered streams).
    if !data && !tx.outstanding.forward_tsn_owed() {
        return;
    }
    // RFC 9260 §6.3.3 E1-E3 and §7.2.3.
    tx.rto.on_t3_expiry();
    if data {
        ctx.stats.sctp_t3_expiries += 1;
        tx.cc.on_t3_expiry();
        tx.outstanding.handle_t3_expiry(now);
        tx.apply_discards();
    }
    tx.forward_tsn_due = tx.outstanding.forward_tsn_owed();
    let rto = tx.rto.rto();
    // RFC 9260 §6.1 A: unanswered zero window probes are not errors while SACKs come.
    if tx.t3_expiry_is_error() {
        a.error_count += 1;
    }
    // RFC 9260 §8.1: too many consecutive retransmissions: the peer is unreachable.
    if a.error_count > MAX_ASSOCIATION_RETRANSMITS {
        a.give_up(AssocEnd::PeerUnreachable);
        return;
    }
    ctx.heap.arm(timers, entity, TimerKind::SctpT3, now + rto);
}

/// RFC 9260 §9.2: T2-shutdown runs one RTO ("The rules in Section 6.3 MUST be
/// followed to determine the proper timer value for T2-shutdown").
fn arm_t2(heap: &mut TimerHeap, entity: Entity, a: &Sctp, timers: &mut Timers, now: Time) {
    let rto = a.tx.as_ref().map_or(RTO_INITIAL, |tx| tx.rto.rto());
    heap.arm(timers, entity, TimerKind::SctpT2, now + rto);
}

/// T2-shutdown expired (RFC 9260 §9.2). In SHUTDOWN-SENT: "If the timer expires, the
/// endpoint MUST resend the SHUTDOWN chunk with the updated last sequential TSN
/// received from its peer"; in SHUTDOWN-ACK-SENT: "If the timer expires, the
/// endpoint MUST resend the SHUTDOWN ACK chunk". Either at most
/// Association.Max.Retrans times ("An endpoint SHOULD limit the number of
/// retransmissions of the SHUTDOWN chunk to the protocol parameter
/// 'Association.Max.Retrans'"), after which the peer is unreachable; the RTO backs
/// off as for T3-rtx (§6.3.3).
fn on_t2(ctx: &mut SctpCtx, entity: Entity, a: &mut Sctp, timers: &mut Timers) {
    if !matches!(
        a.state,
        AssocState::ShutdownSent | AssocState::ShutdownAckSent
    ) {
        return;
    }
    a.error_count += 1;
    if a.error_count > MAX_ASSOCIATION_RETRANSMITS {
        a.give_up(AssocEnd::PeerUnreachable);
        return;
    }
    if let Some(tx) = a.tx.as_mut() {
        tx.rto.on_t3_expiry();
    }
    if a.state == AssocState::ShutdownSent {
        a.queue_shutdown();
    } else {
        a.queue_shutdown_ack();
    }
    arm_t2(&mut ctx.heap, entity, a, timers, ctx.now.0);
}

/// After a SACK, RFC 9260 §6.3.2: stop T3-rtx when nothing is outstanding (R2);
/// restart it when the SACK acknowledged the earliest outstanding TSN (R3,
/// `restart`); otherwise start it only if it is not running (R4, and RFC 3758
/// §3.5 C5 while a FORWARD TSN is owed). A SACK that only adds gap blocks must not
/// push back the expiry: the lost chunk at the head would wait for as long as the
/// chunks after it keep being acknowledged.
fn rearm_t3(
    heap: &mut TimerHeap,
    entity: Entity,
    a: &mut Sctp,
    timers: &mut Timers,
    now: Time,
    restart: bool,
) {
    let Some(tx) = a.tx.as_mut() else { return };
    let forward_owed = tx.outstanding.forward_tsn_owed();
    tx.forward_tsn_due = forward_owed;
    if tx.outstanding.has_outstanding_data() || forward_owed {
        if restart || timers.get(TimerKind::SctpT3).is_none() {
            heap.arm(timers, entity, TimerKind::SctpT3, now + tx.rto.rto());
        }
    } else {
        timers.cancel(TimerKind::SctpT3);
    }
}
