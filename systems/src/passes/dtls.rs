//! The `dtls` pass: runs each peer's [`DtlsConn`] over the DTLS datagrams of the tick
//! and its due timer, and turns what the connection reports into shard state.
//!
//! A connection starts when ICE nominates a path (`DtlsStart`), or, for a peer
//! whose DTLS server shoal is, at the first DTLS datagram from one of the peer's
//! validated paths: a browser may send its ClientHello as soon as one check has
//! succeeded, before it nominates. Datagrams from paths the peer has not validated
//! never reach a connection. Records go back on the selected path, or before there is
//! one, on the path the peer's DTLS last came from.
//!
//! Nothing from a peer reaches later passes before its handshake is authenticated
//! (the certificate's SHA-256 equals the fingerprint from its SDP); a failed
//! handshake or connection removes the peer and every component it had. A
//! connection the peer closes (close_notify) retires it: it is removed at the end of
//! the tick, or, a room member with messages still in its receive buffer, once the
//! relay has taken them (`peer::retire_in_pass`).

use bevy_ecs::prelude::*;
use bevy_ecs::system::SystemParam;
use rand_core::RngCore;
use shoal_components::dtls::{DtlsConn, DtlsEvent, DtlsRole};
use shoal_components::peer::{Ice, IceControlling, IceCredentials, IceState, Peer, PeerIndex};
use shoal_components::relay::RelayClosing;
use shoal_components::shared::{ShardDtls, ShardLimits, ShardRng};
use shoal_components::stats::ShardStats;
use shoal_components::tick::{
    DtlsInbox, DtlsStart, DueTimers, Events, MediaStart, Now, Outbox, RemoveReason, SctpInbox,
    SctpStart, ShardEvent,
};
use shoal_components::timer::{TimerHeap, TimerKind, Timers};
use shoal_components::transport::{DtlsSession, PeerSrtp, RtcpSender, flush_sealed};

use crate::peer::{remove_in_pass, retire_in_pass};

/// Everything the dtls pass touches besides the peer tables.
#[derive(SystemParam)]
pub struct DtlsCtx<'w> {
    now: Res<'w, Now>,
    setup: Res<'w, ShardDtls>,
    limits: Res<'w, ShardLimits>,
    index: ResMut<'w, PeerIndex>,
    heap: ResMut<'w, TimerHeap>,
    out: ResMut<'w, Outbox>,
    stats: ResMut<'w, ShardStats>,
    events: ResMut<'w, Events>,
    rng: ResMut<'w, ShardRng>,
    sctp_in: ResMut<'w, SctpInbox>,
    sctp_start: ResMut<'w, SctpStart>,
    media_start: ResMut<'w, MediaStart>,
    closing: ResMut<'w, RelayClosing>,
}

type DtlsQuery<'w, 's> = Query<
    'w,
    's,
    (
        &'static Peer,
        &'static IceCredentials,
        &'static mut Ice,
        &'static mut Timers,
        Option<&'static IceControlling>,
        &'static mut DtlsSession,
    ),
>;

/// The dtls pass.
pub fn dtls(
    mut ctx: DtlsCtx,
    mut inbox: ResMut<DtlsInbox>,
    mut start: ResMut<DtlsStart>,
    due: Res<DueTimers>,
    mut peers: DtlsQuery,
    mut commands: Commands,
) {
    for entity in start.0.drain(..) {
        if let Ok(mut row) = peers.get_mut(entity) {
            let (_, _, ice, _, _, session) = &mut row;
            if ice.state != IceState::Failed && session.conn.is_none() {
                start_conn(&mut ctx, session);
            }
            drive(&mut ctx, &mut commands, entity, row);
        }
    }
    for d in inbox.0.drain(..) {
        let path = d.five_tuple();
        let Some(&entity) = ctx.index.by_path.get(&path) else {
            ctx.stats.dtls_unknown_source += 1;
            continue;
        };
        let Ok(mut row) = peers.get_mut(entity) else {
            ctx.stats.dtls_not_started += 1;
            continue;
        };
        let (_, _, ice, _, _, session) = &mut row;
        if ice.state == IceState::Failed {
            continue;
        }
        if session.conn.is_none() {
            if session.role != DtlsRole::Server {
                ctx.stats.dtls_not_started += 1;
                continue;
            }
            start_conn(&mut ctx, session);
        }
        session.reply_path = Some(path);
        if let Some(conn) = session.conn.as_deref_mut() {
            let before = conn.stats();
            // An error here is also queued as a Failed event, handled in `drive`.
            let _ = conn.handle_datagram(ctx.now.0, &d.payload);
            let after = conn.stats();
            ctx.stats.dtls_records_dropped += (after.records_bad_tag - before.records_bad_tag)
                + (after.records_replayed - before.records_replayed)
                + (after.records_malformed - before.records_malformed);
        }
        drive(&mut ctx, &mut commands, entity, row);
    }
    for &(entity, kind) in &due.0 {
        if kind != TimerKind::Dtls {
            continue;
        }
        if let Ok(mut row) = peers.get_mut(entity) {
            let (_, _, _, _, _, session) = &mut row;
            if let Some(conn) = session.conn.as_deref_mut() {
                conn.handle_timeout(ctx.now.0);
            }
            drive(&mut ctx, &mut commands, entity, row);
        }
    }
}

fn start_conn(ctx: &mut DtlsCtx, session: &mut DtlsSession) {
    let mut random = [0u8; 32];
    rand_core::RngCore::fill_bytes(&mut ctx.rng.0, &mut random);
    let mut conn = DtlsConn::new(
        session.role,
        ctx.setup.config.clone(),
        ctx.setup.certificate.clone(),
        session.remote_fingerprint,
        random,
        ctx.now.0,
    );
    if session.srtp_required {
        conn.require_srtp();
    }
    session.conn = Some(Box::new(conn));
}

/// Moves a connection's output to the outbox, its events into shard state, and its
/// deadline into the timer heap.
fn drive(
    ctx: &mut DtlsCtx,
    commands: &mut Commands,
    entity: Entity,
    row: (
        &Peer,
        &IceCredentials,
        Mut<Ice>,
        Mut<Timers>,
        Option<&IceControlling>,
        Mut<DtlsSession>,
    ),
) {
    let (peer, creds, mut ice, mut timers, ctl, mut session) = row;
    let session = &mut *session;
    let path = session.path(ice.selected);
    let Some(conn) = session.conn.as_deref_mut() else {
        return;
    };
    flush_sealed(conn, path, &mut ctx.out);
    let mut end = None;
    while let Some(event) = conn.poll_event() {
        match event {
            DtlsEvent::Connected { srtp, suite, .. } => {
                ctx.stats.dtls_connected += 1;
                session.suite = Some(suite);
                // The session is up: consent now runs on RFC 7675's timeout, from
                // the last valid check.
                ice.awaiting_session = false;
                let expiry = ice.consent_deadline(&ctx.limits);
                if timers
                    .get(TimerKind::ConsentExpiry)
                    .is_none_or(|at| at > expiry)
                {
                    ctx.heap
                        .arm(&mut timers, entity, TimerKind::ConsentExpiry, expiry);
                }
                let srtp_profile = srtp.as_ref().map(|k| k.profile as u16);
                // RFC 5764 §4.2: the exported keys key SRTP both ways from now on.
                if let Some(keys) = &srtp {
                    let ssrc = ctx.rng.0.next_u32();
                    let name =
                        u128::from(ctx.rng.0.next_u64()) << 64 | u128::from(ctx.rng.0.next_u64());
                    let rtcp = RtcpSender::new(ssrc, name);
                    match PeerSrtp::new(keys, session.role, rtcp, session.media_limits) {
                        Some(contexts) => {
                            commands.entity(entity).insert(contexts);
                            ctx.media_start.peers.push(entity);
                        }
                        None => ctx.stats.srtp_key_setup_failed += 1,
                    }
                }
                session.srtp = srtp;
                ctx.events.0.push(ShardEvent::DtlsConnected {
                    peer: peer.id,
                    srtp_profile,
                });
                ctx.sctp_start.0.push(entity);
            }
            DtlsEvent::ApplicationData(data) => ctx.sctp_in.0.push((entity, data)),
            DtlsEvent::Closed { .. } => end = Some(RemoveReason::DtlsClosed),
            DtlsEvent::Failed(_) => {
                ctx.stats.dtls_failed += 1;
                end = Some(RemoveReason::DtlsFailed);
            }
        }
    }
    if let Some(reason) = end {
        timers.cancel(TimerKind::Dtls);
        if reason == RemoveReason::DtlsClosed {
            // A clean close: what its receive buffer holds still goes to its room.
            retire_in_pass(
                &mut ctx.index,
                &mut ctx.closing,
                commands,
                entity,
                peer,
                creds,
                &mut ice,
                ctl,
                Some(session),
                &mut timers,
                reason,
            );
            return;
        }
        let (index, events) = (&mut *ctx.index, &mut *ctx.events);
        remove_in_pass(
            index, events, commands, entity, peer, creds, &mut ice, ctl, reason,
        );
        return;
    }
    match conn.poll_timeout() {
        Some(at) => ctx.heap.arm(&mut timers, entity, TimerKind::Dtls, at),
        None => timers.cancel(TimerKind::Dtls),
    }
}
