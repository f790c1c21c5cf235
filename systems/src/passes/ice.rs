//! The `ice` pass: ICE over STUN for both roles.
//!
//! The SFU side is an ICE-lite agent (RFC 8445 §2.5): it answers valid Binding
//! requests, learns the peer's address from them, takes the pair a USE-CANDIDATE
//! check arrives on as nominated and selected (§7.3.2, §8.2), and drops the peer when
//! no valid check has refreshed consent for the consent timeout (RFC 7675 §5.1): it
//! sends nothing more to it (its connection is dropped), but what SCTP acknowledged
//! to it still reaches its room (the peer is retired, as one that left cleanly is:
//! `crate::peer::retire_in_pass`).
//!
//! The client side (simulated and benchmark endpoints) is a controlling agent: it
//! checks each remote candidate in turn with STUN retransmission (RFC 8489 §6.2.1,
//! RTO no smaller than 500 ms per RFC 8445 §14.3), nominates the first pair that
//! succeeds by repeating the check with USE-CANDIDATE (§8.1.1), then keeps consent
//! fresh with a check every 4–6 s (RFC 7675 §5.1).
//!
//! Checks that fail authentication (unknown ufrag, bad MESSAGE-INTEGRITY) or carry a
//! bad FINGERPRINT get no answer: they are counted and dropped, so an off-path sender
//! learns nothing and cannot use the shard as a reflector.

use std::time::Duration;

use bevy_ecs::prelude::*;
use bevy_ecs::system::SystemParam;
use bytes::{Bytes, BytesMut};
use rand_core::RngCore;
use shoal_components::net::{Datagram, FiveTuple};
use shoal_components::peer::{
    Freshness, Ice, IceControlling, IceCredentials, IceRole, IceState, Peer, PeerIndex,
    PendingCheck,
};
use shoal_components::relay::RelayClosing;
use shoal_components::stats::ShardStats;
use shoal_components::stun::{self, Class, StunError, StunMessage, StunWriter, TransactionId};
use shoal_components::tick::{
    DtlsStart, DueTimers, Events, Now, Outbox, RemoveReason, ShardEvent, StunInbox, WriteBuffer,
};
use shoal_components::timer::{TimerHeap, TimerKind, Timers};
use shoal_components::transport::DtlsSession;

use shoal_components::shared::{ShardLimits, ShardRng};

use crate::peer::{remember_valid, remove_in_pass, retire_in_pass};

/// RFC 7675 §5.1: consent expires 30 s after the last successful check.
pub const CONSENT_TIMEOUT: Duration = Duration::from_secs(30);
/// RFC 7675 §5.1: consent checks go out every 5 s on average, randomised over
/// 0.8–1.2 of that.
pub const CONSENT_INTERVAL_MIN: Duration = Duration::from_millis(4000);
/// Upper end of the randomised consent interval.
pub const CONSENT_INTERVAL_MAX: Duration = Duration::from_millis(6000);
/// How often a controlling agent checks while consent responses are overdue.
pub const CONSENT_RECHECK: Duration = Duration::from_secs(1);
/// RFC 8445 §14.3: agents MUST NOT use an RTO smaller than 500 ms for checks.
pub const CHECK_RTO_INITIAL: Duration = Duration::from_millis(500);
/// RFC 8489 §6.2.1: Rc, the number of transmissions of one request (default 7).
pub const CHECK_MAX_TRANSMISSIONS: u32 = 7;
/// RFC 8489 §6.2.1: after the last transmission the client waits Rm times the RTO
/// (default 16) before the transaction fails.
pub const CHECK_FINAL_WAIT_RTOS: u32 = 16;
/// How long one STUN request can be retransmitted (RFC 8489 §6.2.1 with the
/// defaults: 7 sends over 31.5 s, then 16 RTOs), i.e. how long a repeated
/// transaction id may still be a retransmission rather than a replay.
pub const STUN_TRANSACTION_LIFETIME: Duration = Duration::from_millis(39_500);
/// A controlling agent keeps cycling through its candidates until this long after
/// it started; the first transaction to fail after that fails the agent.
pub const ICE_CONNECT_BUDGET: Duration = Duration::from_secs(60);
/// The PRIORITY sent in checks: RFC 8445 §7.1.1 wants the formula of §5.1.2 with
/// the type preference of peer-reflexive candidates (110); local preference 65535,
/// component 1.
pub const PRFLX_PRIORITY: u32 = (110 << 24) | (65535 << 8) | (256 - 1);
/// The SOFTWARE attribute of our responses (RFC 8489 §14.14).
const SOFTWARE: &str = "shoal";

/// Everything the ice pass touches besides the peer tables.
#[derive(SystemParam)]
pub struct IceCtx<'w> {
    now: Res<'w, Now>,
    limits: Res<'w, ShardLimits>,
    index: ResMut<'w, PeerIndex>,
    heap: ResMut<'w, TimerHeap>,
    out: ResMut<'w, Outbox>,
    wbuf: ResMut<'w, WriteBuffer>,
    stats: ResMut<'w, ShardStats>,
    events: ResMut<'w, Events>,
    rng: ResMut<'w, ShardRng>,
    dtls_start: ResMut<'w, DtlsStart>,
    closing: ResMut<'w, RelayClosing>,
}

type PeerQuery<'w, 's> = Query<
    'w,
    's,
    (
        Entity,
        &'static Peer,
        &'static IceCredentials,
        &'static mut Ice,
        &'static mut Timers,
        Option<&'static mut IceControlling>,
        Option<&'static mut DtlsSession>,
    ),
>;

/// The ice pass: STUN in, timers due, STUN out.
pub fn ice(
    mut ctx: IceCtx,
    mut stun_in: ResMut<StunInbox>,
    due: Res<DueTimers>,
    mut peers: PeerQuery,
    mut commands: Commands,
) {
    for d in stun_in.0.drain(..) {
        handle_stun(&mut ctx, &mut peers, &mut commands, d);
    }
    for &(entity, kind) in &due.0 {
        if matches!(
            kind,
            TimerKind::IceCheck | TimerKind::ConsentCheck | TimerKind::ConsentExpiry
        ) {
            handle_timer(&mut ctx, &mut peers, &mut commands, entity, kind);
        }
    }
}

fn handle_stun(ctx: &mut IceCtx, peers: &mut PeerQuery, commands: &mut Commands, d: Datagram) {
    let msg = match StunMessage::parse(d.payload.clone()) {
        Ok(m) => m,
        Err(StunError::BadFingerprint) => {
            ctx.stats.stun_bad_fingerprint += 1;
            return;
        }
        Err(_) => {
            ctx.stats.stun_malformed += 1;
            return;
        }
    };
    if msg.method() != stun::BINDING {
        ctx.stats.stun_ignored += 1;
        return;
    }
    match msg.class() {
        Class::Request => handle_request(ctx, peers, &d, &msg),
        Class::SuccessResponse | Class::ErrorResponse => {
            handle_response(ctx, peers, commands, &d, &msg)
        }
        // RFC 7675 / RFC 8445 §11: Binding indications are keepalives; nothing to do.
        Class::Indication => ctx.stats.stun_ignored += 1,
    }
}

/// RFC 8445 §7.3 (STUN server procedures), for either role.
fn handle_request(ctx: &mut IceCtx, peers: &mut PeerQuery, d: &Datagram, msg: &StunMessage) {
    // RFC 8445 §7.3: short-term credentials and FINGERPRINT are mandatory.
    let (Some(username), true, true) = (
        msg.username(),
        msg.has_message_integrity(),
        msg.has_fingerprint(),
    ) else {
        ctx.stats.stun_missing_attributes += 1;
        return;
    };
    // §7.3: the username is valid when the part before the colon is our ufrag.
    let Some(local_ufrag) = username
        .iter()
        .position(|&b| b == b':')
        .and_then(|colon| std::str::from_utf8(&username[..colon]).ok())
    else {
        ctx.stats.stun_unknown_ufrag += 1;
        return;
    };
    let Some(entity) = ctx.index.by_ufrag.get(local_ufrag).copied() else {
        ctx.stats.stun_unknown_ufrag += 1;
        return;
    };
    let Ok((_, peer, creds, mut ice, mut timers, _, _)) = peers.get_mut(entity) else {
        ctx.stats.stun_unknown_ufrag += 1;
        return;
    };
    if ice.state == IceState::Failed {
        return; // removed earlier in this tick
    }
    // The current credentials, or those an ICE restart is retiring (RFC 8445 §9:
    // the old session carries media until the new one has a nominated pair).
    let (key, current) = if local_ufrag == creds.local_ufrag {
        (creds.local_pwd.clone(), true)
    } else if let Some(old) = ice.retiring.as_ref().filter(|o| o.ufrag == local_ufrag) {
        (old.pwd.clone(), false)
    } else {
        ctx.stats.stun_unknown_ufrag += 1;
        return;
    };
    if msg.verify_integrity(key.as_bytes()).is_err() {
        ctx.stats.stun_bad_integrity += 1;
        return;
    }
    // A path validated by another peer stays theirs: a peer cannot take over (or
    // squat on) the path media of someone else flows on. Looked up now, not at
    // ingest, since an earlier check of this very batch may have claimed it.
    let path = d.five_tuple();
    if ctx.index.by_path.get(&path).is_some_and(|&o| o != entity) {
        ctx.stats.stun_path_conflict += 1;
        return;
    }
    let now = ctx.now.0;
    // RFC 7675 §5.1: once consent has lapsed it is not re-established; the expiry
    // timer, due in this tick at the latest, removes the peer.
    if now >= ice.consent_deadline(&ctx.limits) {
        ctx.stats.stun_after_consent_expiry += 1;
        return;
    }
    let tid = msg.transaction_id();

    // RFC 8489 §6.3.1.1: unknown comprehension-required attributes → 420 with
    // UNKNOWN-ATTRIBUTES, and the request is not otherwise processed.
    let unknown = msg.unknown_comprehension_required();
    if !unknown.is_empty() {
        let payload = write(&mut ctx.wbuf, Class::ErrorResponse, tid, |w| {
            w.error_code(420, "Unknown Attribute")
                .unknown_attributes(unknown);
            w.message_integrity(key.as_bytes()).fingerprint();
        });
        ctx.out.0.push(Datagram {
            local: d.local,
            remote: d.remote,
            payload,
        });
        ctx.stats.stun_error_responses += 1;
        return;
    }

    // §7.3.1.2: the mapped address is the request's source transport address.
    let payload = write(&mut ctx.wbuf, Class::SuccessResponse, tid, |w| {
        w.xor_mapped_address(d.remote).software(SOFTWARE);
        w.message_integrity(key.as_bytes()).fingerprint();
    });
    ctx.out.0.push(Datagram {
        local: d.local,
        remote: d.remote,
        payload,
    });
    ctx.stats.ice_checks_answered += 1;

    if ice.role != IceRole::Lite {
        // A controlling client answers its peer's checks but nominates by itself.
        return;
    }
    // A repeated transaction id is a retransmission (answered above, as RFC 8489
    // §6.3.1 asks) or a replay, possibly from a spoofed source: it changes nothing.
    // MESSAGE-INTEGRITY cannot cover the source address (RFC 8445 §19.2), and RFC
    // 7675 §5.1 gives every consent check a new transaction id.
    match ice.note_transaction(tid.0, path, now, STUN_TRANSACTION_LIFETIME) {
        Freshness::New => {}
        Freshness::Retransmission => {
            // The peer is alive on this path: its retransmission refreshes consent
            // (a nomination whose answers were lost keeps the peer), nothing more.
            ctx.stats.stun_retransmitted_checks += 1;
            ice.consent_at = now;
            return;
        }
        Freshness::Replay => {
            ctx.stats.stun_repeated_transaction += 1;
            return;
        }
    }
    ice.consent_at = now;
    remember_valid(&mut ice, &mut ctx.index, entity, path);
    // A nomination in the new session completes a restart: the old credentials
    // stop being answered.
    if current
        && msg.use_candidate()
        && let Some(old) = ice.retiring.take()
    {
        ctx.index.by_ufrag.remove(&old.ufrag);
        ctx.stats.ice_restarts_completed += 1;
    }
    // §7.3.2 / §8.2: a USE-CANDIDATE check makes its pair nominated and selected. A
    // later nomination on another path (renomination after a network change, or in
    // a restarted session) moves the selection there.
    if msg.use_candidate() && ice.selected != Some(path) {
        ice.selected = Some(path);
        let was = ice.state;
        ice.state = IceState::Connected;
        if was == IceState::Checking {
            // From here consent runs on the consent timeout (once the session is up).
            let at = ice.consent_deadline(&ctx.limits);
            ctx.heap
                .arm(&mut timers, entity, TimerKind::ConsentExpiry, at);
        }
        ctx.events.0.push(ShardEvent::IceConnected {
            peer: peer.id,
            remote: path.remote,
        });
        ctx.dtls_start.0.push(entity);
    }
    // Consent is re-armed lazily: the expiry timer, when it fires, looks at
    // `consent_at` and re-arms itself if consent was refreshed meanwhile.
    if timers.get(TimerKind::ConsentExpiry).is_none() {
        let at = ice.consent_deadline(&ctx.limits);
        ctx.heap
            .arm(&mut timers, entity, TimerKind::ConsentExpiry, at);
    }
}

/// Responses to checks a controlling agent sent (RFC 8445 §7.2.5).
fn handle_response(
    ctx: &mut IceCtx,
    peers: &mut PeerQuery,
    commands: &mut Commands,
    d: &Datagram,
    msg: &StunMessage,
) {
    let tid = msg.transaction_id().0;
    let Some(entity) = ctx.index.by_transaction.get(&tid).copied() else {
        ctx.stats.stun_ignored += 1;
        return;
    };
    let Ok((_, peer, creds, mut ice, mut timers, Some(mut ctl), _)) = peers.get_mut(entity) else {
        ctx.stats.stun_ignored += 1;
        return;
    };
    // RFC 8445 §7.2.5.1 / RFC 8489 §9.1.4: the response is authenticated with the
    // password the request was signed with, the peer's.
    if !msg.has_message_integrity() || msg.verify_integrity(creds.remote_pwd.as_bytes()).is_err() {
        ctx.stats.stun_bad_integrity += 1;
        return;
    }
    if ice.state == IceState::Failed {
        return; // removed earlier in this tick
    }
    ctx.index.by_transaction.remove(&tid);
    let path = d.five_tuple();
    // RFC 8489 §6.3.3 / §6.3.4: a response with unknown comprehension-required
    // attributes is discarded and its transaction has failed.
    let failed =
        msg.class() == Class::ErrorResponse || !msg.unknown_comprehension_required().is_empty();
    if !msg.unknown_comprehension_required().is_empty() {
        ctx.stats.stun_response_unknown_attributes += 1;
    }

    if let Some(slot) = ctl.consent_tids.iter_mut().find(|t| **t == Some(tid)) {
        *slot = None;
        // RFC 7675 §5.1: consent responses after expiry do not re-establish consent.
        let lapsed = ctx.now.0 >= ice.consent_deadline(&ctx.limits);
        if !failed && !lapsed && ice.selected == Some(path) {
            ice.consent_at = ctx.now.0;
        }
        return;
    }
    let Some(pending) = ctl.pending.filter(|p| p.tid == tid) else {
        ctx.stats.stun_ignored += 1;
        return;
    };
    // §7.2.5.2.1: a response from another address than the request went to is a
    // failure (non-symmetric transport addresses). The path is the response's, whose
    // local address is a concrete one where the request's was a wildcard.
    if !pending.path.answered_on(&path) || failed {
        ctl.pending = None;
        next_candidate(
            ctx,
            commands,
            entity,
            peer,
            creds,
            &mut ice,
            &mut timers,
            &mut ctl,
        );
        return;
    }
    remember_valid(&mut ice, &mut ctx.index, entity, path);
    ice.consent_at = ctx.now.0;
    if !pending.nominate {
        // §8.1.1: nominate the valid pair by repeating its check with USE-CANDIDATE.
        let check = new_check(ctx, entity, path, true);
        send_check(ctx, creds, &ice, &ctl, &check);
        ctl.pending = Some(check);
        let at = ctx.now.0 + CHECK_RTO_INITIAL;
        ctx.heap.arm(&mut timers, entity, TimerKind::IceCheck, at);
        return;
    }
    ctl.pending = None;
    timers.cancel(TimerKind::IceCheck);
    if ice.selected != Some(path) {
        ice.selected = Some(path);
        ice.state = IceState::Connected;
        ctx.events.0.push(ShardEvent::IceConnected {
            peer: peer.id,
            remote: path.remote,
        });
        ctx.dtls_start.0.push(entity);
    }
    let next = ctx.now.0 + consent_interval(&mut ctx.rng);
    ctx.heap
        .arm(&mut timers, entity, TimerKind::ConsentCheck, next);
    let expiry = ice.consent_deadline(&ctx.limits);
    ctx.heap
        .arm(&mut timers, entity, TimerKind::ConsentExpiry, expiry);
}

fn handle_timer(
    ctx: &mut IceCtx,
    peers: &mut PeerQuery,
    commands: &mut Commands,
    entity: Entity,
    kind: TimerKind,
) {
    let Ok((_, peer, creds, mut ice, mut timers, ctl, mut session)) = peers.get_mut(entity) else {
        return;
    };
    if ice.state == IceState::Failed {
        return; // removed earlier in this tick: no more checks, no index entries
    }
    match kind {
        TimerKind::ConsentExpiry => {
            let expires = ice.consent_deadline(&ctx.limits);
            if ctx.now.0 >= expires {
                ctx.stats.consent_expired += 1;
                // RFC 7675 §5.1: "the endpoint MUST cease transmission on that
                // 5-tuple"; its connection goes, but what it sent and SCTP
                // acknowledged still reaches its room.
                retire_in_pass(
                    &mut ctx.index,
                    &mut ctx.closing,
                    commands,
                    entity,
                    peer,
                    creds,
                    &mut ice,
                    ctl.as_deref(),
                    session.as_deref_mut(),
                    &mut timers,
                    RemoveReason::ConsentExpired,
                );
            } else {
                ctx.heap
                    .arm(&mut timers, entity, TimerKind::ConsentExpiry, expires);
            }
        }
        TimerKind::IceCheck => {
            let Some(mut ctl) = ctl else { return };
            match ctl.pending {
                None => {
                    let Some(&remote) = ctl.remote_candidates.get(ctl.next_candidate) else {
                        return;
                    };
                    let path = FiveTuple {
                        local: ctl.local,
                        remote,
                    };
                    let check = new_check(ctx, entity, path, false);
                    send_check(ctx, creds, &ice, &ctl, &check);
                    ctl.pending = Some(check);
                    let at = ctx.now.0 + CHECK_RTO_INITIAL;
                    ctx.heap.arm(&mut timers, entity, TimerKind::IceCheck, at);
                }
                Some(mut check) if check.transmissions < CHECK_MAX_TRANSMISSIONS => {
                    // RFC 8489 §6.2.1: retransmit with the RTO doubled each time.
                    check.transmissions += 1;
                    check.sent_at = ctx.now.0;
                    send_check(ctx, creds, &ice, &ctl, &check);
                    ctl.pending = Some(check);
                    let at = ctx.now.0 + retransmit_wait(check.transmissions);
                    ctx.heap.arm(&mut timers, entity, TimerKind::IceCheck, at);
                }
                Some(check) => {
                    ctx.index.by_transaction.remove(&check.tid);
                    ctl.pending = None;
                    next_candidate(
                        ctx,
                        commands,
                        entity,
                        peer,
                        creds,
                        &mut ice,
                        &mut timers,
                        &mut ctl,
                    );
                }
            }
        }
        TimerKind::Dtls
        | TimerKind::SctpT1
        | TimerKind::SctpT3
        | TimerKind::SctpDelayedAck
        | TimerKind::SctpSend
        | TimerKind::SctpReconfig
        | TimerKind::SctpT2
        | TimerKind::SctpHeartbeat
        | TimerKind::MediaReport
        | TimerKind::TransportFeedback
        | TimerKind::AudioLevel
        | TimerKind::Probe
        | TimerKind::Pace
        | TimerKind::RelayHold
        | TimerKind::RelayForward
        | TimerKind::RelayClosing => {}
        TimerKind::ConsentCheck => {
            let (Some(mut ctl), Some(path)) = (ctl, ice.selected) else {
                return;
            };
            // The oldest unanswered consent check stops being matchable.
            if let Some(old) = ctl.consent_tids[0] {
                ctx.index.by_transaction.remove(&old);
            }
            ctl.consent_tids.rotate_left(1);
            let check = new_check(ctx, entity, path, false);
            send_check(ctx, creds, &ice, &ctl, &check);
            if let Some(last) = ctl.consent_tids.last_mut() {
                *last = Some(check.tid);
            }
            // While answers are overdue, check every second. RFC 7675 §5.1 keeps
            // consent checks 4-6 s apart, but the same section permits connectivity checks
            // paced as ICE paces them, and any valid response refreshes consent: on
            // a lossy path this keeps six lost round trips in a row from ending a
            // healthy session (browsers ping a weak pair far more often too).
            let overdue = ctx.now.0.saturating_since(ice.consent_at) > CONSENT_INTERVAL_MAX;
            let interval = if overdue {
                CONSENT_RECHECK
            } else {
                consent_interval(&mut ctx.rng)
            };
            let next = ctx.now.0 + interval;
            ctx.heap
                .arm(&mut timers, entity, TimerKind::ConsentCheck, next);
        }
    }
}

/// Moves a controlling agent to its next remote candidate, or fails it.
fn next_candidate(
    ctx: &mut IceCtx,
    commands: &mut Commands,
    entity: Entity,
    peer: &Peer,
    creds: &IceCredentials,
    ice: &mut Ice,
    timers: &mut Timers,
    ctl: &mut IceControlling,
) {
    if ice.state == IceState::Connected {
        return; // a late failure of a superseded check changes nothing
    }
    ctl.next_candidate += 1;
    let now = ctx.now.0;
    // Past the last candidate, start over while the connect budget lasts: one failed
    // transaction (7 sends) is not rare on a lossy path, and a client that gave up
    // after it would fail where a browser, which keeps checking, connects.
    if ctl.next_candidate >= ctl.remote_candidates.len()
        && now.saturating_since(ctl.started_at) < ICE_CONNECT_BUDGET
    {
        ctl.next_candidate = 0;
    }
    if ctl.next_candidate < ctl.remote_candidates.len() {
        ctx.heap.arm(timers, entity, TimerKind::IceCheck, now);
    } else {
        remove_in_pass(
            &mut ctx.index,
            &mut ctx.events,
            commands,
            entity,
            peer,
            creds,
            ice,
            Some(ctl),
            RemoveReason::IceFailed,
        );
    }
}

fn new_check(ctx: &mut IceCtx, entity: Entity, path: FiveTuple, nominate: bool) -> PendingCheck {
    let tid = ctx.rng.transaction_id();
    ctx.index.by_transaction.insert(tid, entity);
    PendingCheck {
        tid,
        path,
        nominate,
        transmissions: 1,
        sent_at: ctx.now.0,
    }
}

/// RFC 8445 §7.2.2: USERNAME is "remote-ufrag:local-ufrag", signed with the remote
/// password; PRIORITY, ICE-CONTROLLING and, when nominating, USE-CANDIDATE.
fn send_check(
    ctx: &mut IceCtx,
    creds: &IceCredentials,
    ice: &Ice,
    ctl: &IceControlling,
    check: &PendingCheck,
) {
    let mut username = [0u8; 513];
    let r = creds.remote_ufrag.as_bytes();
    let l = creds.local_ufrag.as_bytes();
    let len = r.len() + 1 + l.len();
    if len > username.len() {
        return; // credentials are validated at add time; unreachable in practice
    }
    username[..r.len()].copy_from_slice(r);
    username[r.len()] = b':';
    username[r.len() + 1..len].copy_from_slice(l);
    let payload = write(
        &mut ctx.wbuf,
        Class::Request,
        TransactionId(check.tid),
        |w| {
            w.username(&username[..len])
                .priority(ctl.priority)
                .ice_controlling(ice.tie_breaker);
            if check.nominate {
                w.use_candidate();
            }
            w.message_integrity(creds.remote_pwd.as_bytes())
                .fingerprint();
        },
    );
    ctx.out.0.push(Datagram {
        local: check.path.local,
        remote: check.path.remote,
        payload,
    });
}

/// How long to wait after the `transmissions`-th send of a check (RFC 8489 §6.2.1):
/// the RTO doubles after each retransmission, and after the last one the client
/// waits Rm × RTO before the transaction fails.
fn retransmit_wait(transmissions: u32) -> Duration {
    if transmissions >= CHECK_MAX_TRANSMISSIONS {
        return CHECK_RTO_INITIAL.saturating_mul(CHECK_FINAL_WAIT_RTOS);
    }
    let doublings = transmissions.saturating_sub(1).min(16);
    CHECK_RTO_INITIAL.saturating_mul(1 << doublings)
}

fn consent_interval(rng: &mut ShardRng) -> Duration {
    let span = (CONSENT_INTERVAL_MAX - CONSENT_INTERVAL_MIN).as_micros() as u64;
    let jitter = rng.0.next_u64() % span.max(1);
    CONSENT_INTERVAL_MIN + Duration::from_micros(jitter)
}

/// Writes one STUN message into the shared write buffer and splits it off.
fn write(
    wbuf: &mut WriteBuffer,
    class: Class,
    tid: TransactionId,
    f: impl FnOnce(&mut StunWriter<'_>),
) -> Bytes {
    const CHUNK: usize = 64 * 1024;
    if wbuf.0.capacity() < 1500 {
        wbuf.0.reserve(CHUNK);
    }
    let mut w = StunWriter::new(&mut wbuf.0, class, stun::BINDING, tid);
    f(&mut w);
    w.finish();
    split(&mut wbuf.0)
}

fn split(buf: &mut BytesMut) -> Bytes {
    buf.split().freeze()
}
