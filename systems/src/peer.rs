//! A peer's life in the shard's tables: its index entries made when it is added and
//! when ICE validates a path, and its removal, from inside a pass (the entity goes
//! when the pass's commands apply) or from the shard's surface (at once, after a DTLS
//! close_notify). Every way a peer leaves goes through here, so no index keeps an
//! entry for an entity that is gone.

use bevy_ecs::prelude::*;
use shoal_components::media::PeerMedia;
use shoal_components::net::{Datagram, FiveTuple};
use shoal_components::peer::{
    Ice, IceControlling, IceCredentials, IceState, MAX_VALID_REMOTES, Peer, PeerId, PeerIndex,
};
use shoal_components::relay::{ClosingMember, RelayClosing};
use shoal_components::stats::ShardStats;
use shoal_components::tick::{Events, RemoveReason, ShardEvent, Transmits};
use shoal_components::timer::{TimerKind, Timers};
use shoal_components::transport::DtlsSession;

/// Indexes a new peer by its id and local ufrag.
pub(crate) fn index_new(world: &mut World, entity: Entity, id: PeerId, ufrag: String) {
    let mut index = world.resource_mut::<PeerIndex>();
    index.by_id.insert(id, entity);
    index.by_ufrag.insert(ufrag, entity);
}

/// Adds `path` to the peer's validated paths (bounded; the oldest unselected one
/// makes room) and to the shard's path index.
pub(crate) fn remember_valid(
    ice: &mut Ice,
    index: &mut PeerIndex,
    entity: Entity,
    path: FiveTuple,
) {
    if !ice.valid.contains(&path) {
        if ice.valid.len() >= MAX_VALID_REMOTES {
            let selected = ice.selected;
            if let Some(pos) = ice.valid.iter().position(|p| Some(*p) != selected) {
                let old = ice.valid.remove(pos);
                unindex_path(index, old, entity);
            }
        }
        ice.valid.push(path);
    }
    index.by_path.entry(path).or_insert(entity);
}

/// Removes `path` from the index if, and only if, it maps to `entity`.
fn unindex_path(index: &mut PeerIndex, path: FiveTuple, entity: Entity) {
    if index.by_path.get(&path) == Some(&entity) {
        index.by_path.remove(&path);
    }
}

/// Marks the peer Failed and takes it out of every index; false if it was Failed
/// already (on its way out).
fn fail_and_unindex(
    index: &mut PeerIndex,
    entity: Entity,
    peer: &Peer,
    creds: &IceCredentials,
    ice: &mut Ice,
    ctl: Option<&IceControlling>,
) -> bool {
    if ice.state == IceState::Failed {
        return false;
    }
    ice.state = IceState::Failed;
    unindex(index, entity, peer, ice, ctl);
    index.by_ufrag.remove(&creds.local_ufrag);
    true
}

/// Removes a peer from inside any pass: its index entries now, the entity (and
/// every component it had) when the pass's commands apply. Marks the peer Failed
/// first, so later work in the same tick leaves it alone.
pub(crate) fn remove_in_pass(
    index: &mut PeerIndex,
    events: &mut Events,
    commands: &mut Commands,
    entity: Entity,
    peer: &Peer,
    creds: &IceCredentials,
    ice: &mut Ice,
    ctl: Option<&IceControlling>,
    reason: RemoveReason,
) {
    if !fail_and_unindex(index, entity, peer, creds, ice, ctl) {
        return;
    }
    commands.entity(entity).despawn();
    events.0.push(ShardEvent::PeerRemoved {
        peer: peer.id,
        reason,
    });
}

/// A peer whose connection ended other than by the owner's removal or a failed
/// DTLS handshake (it closed its DTLS connection, the owner let it go, its consent
/// expired, or it was cut off as a slow receiver): its index entries go now, as [`remove_in_pass`]'s do, but the entity stays until
/// the end of the tick, when the shard looks at it (`Shard::sweep_closing`): a room
/// member whose receive buffer still holds messages stays until the relay has taken
/// them (`RelayClosing`), anything else goes then. Either way `PeerRemoved` comes at
/// the end of this tick: the participant is gone at once. From now on the peer is
/// Failed (so nothing is relayed to it and no later pass works for it), nothing
/// finds it by id, path or ufrag, its connection is dropped (what SCTP still puts
/// out for it goes nowhere), and its tracks and subscriptions end.
#[allow(clippy::too_many_arguments)]
pub(crate) fn retire_in_pass(
    index: &mut PeerIndex,
    closing: &mut RelayClosing,
    commands: &mut Commands,
    entity: Entity,
    peer: &Peer,
    creds: &IceCredentials,
    ice: &mut Ice,
    ctl: Option<&IceControlling>,
    session: Option<&mut DtlsSession>,
    timers: &mut Timers,
    reason: RemoveReason,
) {
    if retire(
        index, closing, entity, peer, creds, ice, ctl, session, timers, reason,
    ) {
        commands.entity(entity).remove::<PeerMedia>();
    }
}

/// What [`retire_in_pass`] and [`retire_now`] both do but ending its media (a
/// command in a pass, at once outside): false if the peer was on its way out
/// already.
#[allow(clippy::too_many_arguments)]
fn retire(
    index: &mut PeerIndex,
    closing: &mut RelayClosing,
    entity: Entity,
    peer: &Peer,
    creds: &IceCredentials,
    ice: &mut Ice,
    ctl: Option<&IceControlling>,
    session: Option<&mut DtlsSession>,
    timers: &mut Timers,
    reason: RemoveReason,
) -> bool {
    if !fail_and_unindex(index, entity, peer, creds, ice, ctl) {
        return false;
    }
    if let Some(session) = session {
        session.conn = None;
    }
    cancel_all_but_relaying(timers);
    closing.0.push(ClosingMember {
        entity,
        deadline: None,
        buffered: 0,
        reason,
    });
    true
}

/// [`retire_in_pass`] from the shard's surface (a command), for a peer the owner
/// lets go: close_notify first, so the peer learns at once that it is gone (RFC
/// 7675 §5.2), as [`close_now`] does.
pub(crate) fn retire_now(world: &mut World, entity: Entity, reason: RemoveReason) {
    send_close_notify(world, entity);
    let ctl = world.get::<IceControlling>(entity).cloned();
    let retired = world.resource_scope(|world, mut index: Mut<PeerIndex>| {
        world.resource_scope(|world, mut closing: Mut<RelayClosing>| {
            let mut e = world.entity_mut(entity);
            let Ok((peer, creds, mut ice, mut session, mut timers)) = e.get_components_mut::<(
                &Peer,
                &IceCredentials,
                &mut Ice,
                &mut DtlsSession,
                &mut Timers,
            )>() else {
                return None;
            };
            Some(retire(
                &mut index,
                &mut closing,
                entity,
                peer,
                creds,
                &mut ice,
                ctl.as_ref(),
                Some(&mut session),
                &mut timers,
                reason,
            ))
        })
    });
    match retired {
        Some(true) => {
            world.entity_mut(entity).remove::<PeerMedia>();
        }
        Some(false) => {}
        // Not a peer with a transport: nothing to relay from, it just goes.
        None => remove_now(world, entity, reason),
    }
}

/// A retired peer's timers: only what relaying its receive buffer needs stays armed
/// (its wait for room among the forwards, its deadline). No ICE, DTLS or media work
/// is left for it, and it holds no sender back (a receiver's hold limit of its would
/// cut it off as a slow receiver). Its association is left as it was: it still goes
/// through the SCTP passes on the ticks the relay takes from its buffer, and what
/// it sends goes nowhere, so data of ours still outstanding to it may run T3-rtx
/// to its end (`SctpClosed` after its `PeerRemoved`, which the owner ignores).
fn cancel_all_but_relaying(timers: &mut Timers) {
    for kind in TimerKind::ALL {
        if !matches!(kind, TimerKind::RelayForward | TimerKind::RelayClosing) {
            timers.cancel(kind);
        }
    }
}

fn unindex(
    index: &mut PeerIndex,
    entity: Entity,
    peer: &Peer,
    ice: &Ice,
    ctl: Option<&IceControlling>,
) {
    index.by_id.remove(&peer.id);
    unindex_transport(index, entity, ice, ctl);
}

/// Everything by which a datagram or a STUN transaction finds the peer, but its id
/// and current ufrag.
fn unindex_transport(
    index: &mut PeerIndex,
    entity: Entity,
    ice: &Ice,
    ctl: Option<&IceControlling>,
) {
    if let Some(old) = &ice.retiring {
        index.by_ufrag.remove(&old.ufrag);
    }
    for p in &ice.valid {
        unindex_path(index, *p, entity);
    }
    if let Some(ctl) = ctl {
        if let Some(p) = ctl.pending {
            index.by_transaction.remove(&p.tid);
        }
        for t in ctl.consent_tids.iter().flatten() {
            index.by_transaction.remove(t);
        }
    }
}

/// Removes a peer outside the schedule (a command), at once. A retired peer
/// ([`retire_in_pass`]) goes with what its receive buffer still holds, reported
/// removed only if it was not already.
pub(crate) fn remove_now(world: &mut World, entity: Entity, reason: RemoveReason) {
    let Some(peer) = world.get::<Peer>(entity).copied() else {
        return;
    };
    let mut closing = world.resource_mut::<RelayClosing>();
    if let Some(pos) = closing.0.iter().position(|m| m.entity == entity) {
        let reported = closing.0.swap_remove(pos).deadline.is_some();
        world.despawn(entity);
        if !reported {
            world
                .resource_mut::<Events>()
                .0
                .push(ShardEvent::PeerRemoved {
                    peer: peer.id,
                    reason,
                });
        }
        return;
    }
    let ice = world.get::<Ice>(entity).cloned();
    let ctl = world.get::<IceControlling>(entity).cloned();
    let ufrag = world
        .get::<IceCredentials>(entity)
        .map(|c| c.local_ufrag.clone());
    {
        let mut index = world.resource_mut::<PeerIndex>();
        if let Some(ice) = &ice {
            unindex(&mut index, entity, &peer, ice, ctl.as_ref());
        } else {
            index.by_id.remove(&peer.id);
        }
        if let Some(u) = ufrag {
            index.by_ufrag.remove(&u);
        }
    }
    world.despawn(entity);
    world
        .resource_mut::<Events>()
        .0
        .push(ShardEvent::PeerRemoved {
            peer: peer.id,
            reason,
        });
}

/// Ends the peer's DTLS connection with close_notify (RFC 5246 §7.2.1: either side
/// may close this way), queues the alert on its path, and removes the peer at once
/// for `reason`. RFC 7675 §5.2 and RFC 9725 (a server ending a session revokes
/// consent at once, e.g. by an authenticated closing alert): the peer learns it is
/// gone now, not when its consent checks go unanswered.
pub(crate) fn close_now(world: &mut World, entity: Entity, reason: RemoveReason) {
    send_close_notify(world, entity);
    remove_now(world, entity, reason);
}

/// Ends the peer's DTLS connection with close_notify and queues the alert on its
/// path (nothing for a peer without a connection).
fn send_close_notify(world: &mut World, entity: Entity) {
    let selected = world.get::<Ice>(entity).and_then(|i| i.selected);
    let mut sealed = Vec::new();
    let mut path = None;
    if let Some(mut session) = world.get_mut::<DtlsSession>(entity) {
        path = session.path(selected);
        if let Some(conn) = session.conn.as_deref_mut() {
            conn.close();
            while let Some(payload) = conn.poll_transmit() {
                sealed.push(payload);
            }
        }
    }
    if let Some(p) = path {
        let count = sealed.len() as u64;
        world
            .resource_mut::<Transmits>()
            .0
            .extend(sealed.into_iter().map(|payload| Datagram {
                local: p.local,
                remote: p.remote,
                payload,
            }));
        world.resource_mut::<ShardStats>().datagrams_out += count;
    }
}
