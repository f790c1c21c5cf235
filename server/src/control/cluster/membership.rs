//! The node's lease: granted, registered under, kept alive, and its loss acted on.
//!
//! Every [`TICK`] the loop (1) fences: past the moment its lease could have expired
//! it closes every room it owns; (2) registers when it has no lease (grant, then put
//! its [`NodeRecord`] under it); (3) every quarter of the TTL sends a keep-alive and,
//! when etcd acknowledges it, moves the serving deadline to that keep-alive's
//! sending plus the TTL etcd returned, less [`FENCE_MARGIN`]; (4) republishes its
//! record when its load changed; (5) deletes the keys of rooms it closed.
//!
//! A keep-alive answered with TTL 0 means the lease is gone (etcd expired it while
//! the node could not reach it): every room is fenced at once and the node
//! registers anew; the rooms it owned are free and may be claimed again.

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Compare, CompareOp, LeaseKeepAliveStream, LeaseKeeper, PutOptions, Txn, TxnOp};
use tokio::time::Instant;

use super::{Cluster, FENCE_MARGIN, NodeRecord, RoomRecord};
use crate::control::grpc::ControlState;

/// How often the loop runs.
pub const TICK: Duration = Duration::from_millis(200);
/// How often the node's load is republished (when it changed).
const PUBLISH_EVERY: Duration = Duration::from_secs(2);
/// How long a room placed on this node by another may wait for its first request.
const UNSERVED_GRACE: Duration = Duration::from_secs(30);

/// Keeps the node a member until the control plane stops.
pub async fn run(cluster: Arc<Cluster>, state: Arc<ControlState>) {
    let ttl = cluster.settings.lease_ttl;
    let beat = ttl / 4;
    let mut keeper: Option<(LeaseKeeper, LeaseKeepAliveStream)> = None;
    let mut next_beat = Instant::now();
    let mut next_publish = Instant::now();
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        fence_if_due(&cluster, &state).await;
        let lease = cluster.inner().lease;
        let Some(lease) = lease else {
            if register(&cluster, &state).await {
                next_beat = Instant::now() + beat;
                next_publish = Instant::now() + PUBLISH_EVERY;
            }
            continue;
        };
        let now = Instant::now();
        if now >= next_beat {
            next_beat = now + beat;
            match keep_alive(&cluster, lease, &mut keeper).await {
                KeepAlive::Renewed { sent, ttl } => {
                    let mut inner = cluster.inner();
                    inner.etcd_ok = true;
                    inner.serve_until = Some(sent + ttl.saturating_sub(FENCE_MARGIN));
                }
                KeepAlive::Failed => {
                    keeper = None;
                    cluster.inner().etcd_ok = false;
                }
                KeepAlive::Expired => {
                    keeper = None;
                    tracing::warn!(
                        event = "cluster_lease_lost",
                        node = cluster.node_id(),
                        lease,
                        "the membership lease expired: every room of this node is closed"
                    );
                    {
                        let mut inner = cluster.inner();
                        inner.lease = None;
                        inner.serve_until = None;
                        inner.record = None;
                    }
                    fence_all(&cluster, &state).await;
                    continue;
                }
            }
        }
        if now >= next_publish {
            next_publish = now + PUBLISH_EVERY;
            publish(&cluster, &state, lease).await;
            sweep_unserved(&cluster);
        }
        release_closed(&cluster).await;
    }
}

/// What a keep-alive came to.
enum KeepAlive {
    /// etcd renewed the lease: it lives `ttl` from `sent` at least.
    Renewed { sent: Instant, ttl: Duration },
    /// No answer, or an error: the lease may still be alive.
    Failed,
    /// etcd does not know the lease any more.
    Expired,
}

/// Sends one keep-alive on the lease's stream (opening it if need be) and reads the
/// answer.
async fn keep_alive(
    cluster: &Cluster,
    lease: i64,
    keeper: &mut Option<(LeaseKeeper, LeaseKeepAliveStream)>,
) -> KeepAlive {
    let sent = Instant::now();
    let attempt = async {
        if keeper.is_none() {
            let mut client = cluster.client.clone();
            *keeper = Some(client.lease_keep_alive(lease).await?);
        }
        let Some((k, stream)) = keeper.as_mut() else {
            return Ok(None);
        };
        k.keep_alive().await?;
        stream.message().await
    };
    match tokio::time::timeout(super::ETCD_TIMEOUT, attempt).await {
        Ok(Ok(Some(response))) if response.ttl() > 0 => KeepAlive::Renewed {
            sent,
            ttl: Duration::from_secs(response.ttl().unsigned_abs()),
        },
        Ok(Ok(Some(_))) => KeepAlive::Expired,
        _ => KeepAlive::Failed,
    }
}

/// Grants a lease and registers the node under it; true once registered.
async fn register(cluster: &Cluster, state: &ControlState) -> bool {
    let ttl = i64::try_from(cluster.settings.lease_ttl.as_secs()).unwrap_or(i64::MAX);
    let sent = Instant::now();
    let mut client = cluster.client.clone();
    let Ok(granted) = cluster.etcd(client.lease_grant(ttl, None)).await else {
        return false;
    };
    let lease = granted.id();
    let record = record(cluster, state, lease);
    let Ok(value) = serde_json::to_vec(&record) else {
        return false;
    };
    let key = cluster.node_key(&cluster.settings.node_id);
    let put = client.put(key, value, Some(PutOptions::new().with_lease(lease)));
    if cluster.etcd(put).await.is_err() {
        return false;
    }
    let granted_ttl = Duration::from_secs(granted.ttl().unsigned_abs());
    {
        let mut inner = cluster.inner();
        inner.lease = Some(lease);
        inner.serve_until = Some(sent + granted_ttl.saturating_sub(FENCE_MARGIN));
        inner.record = Some(record);
    }
    tracing::info!(
        event = "cluster_joined",
        node = cluster.node_id(),
        lease,
        ttl_secs = granted.ttl(),
        "registered in the cluster"
    );
    true
}

/// This node's registration as of now.
fn record(cluster: &Cluster, state: &ControlState, lease: i64) -> NodeRecord {
    let shards = state.shards().len();
    let max_peers = state.max_peers_per_shard().saturating_mul(shards);
    let peers = state.rooms().participant_count();
    let sat = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    NodeRecord {
        id: cluster.settings.node_id.clone(),
        grpc_url: cluster.settings.grpc_url.clone(),
        http_url: cluster.settings.http_url.clone(),
        region: cluster.settings.region.clone(),
        shards: sat(shards),
        peers: sat(peers),
        max_peers: sat(max_peers),
        draining: state.drain().is_requested(),
        lease,
    }
}

/// Writes the node's registration again if its load changed.
async fn publish(cluster: &Cluster, state: &ControlState, lease: i64) {
    let record = record(cluster, state, lease);
    if cluster.inner().record.as_ref() == Some(&record) {
        return;
    }
    let Ok(value) = serde_json::to_vec(&record) else {
        return;
    };
    let mut client = cluster.client.clone();
    let key = cluster.node_key(&cluster.settings.node_id);
    let put = client.put(key, value, Some(PutOptions::new().with_lease(lease)));
    if cluster.etcd(put).await.is_ok() {
        cluster.inner().record = Some(record);
    }
}

/// Deletes the keys of rooms this node closed, each only if it names this node and
/// was not rewritten since it was read: a room opened here again meanwhile
/// ([`Cluster::take_up`] rewrites its key) keeps it.
async fn release_closed(cluster: &Cluster) {
    let rooms: Vec<String> = cluster.inner().release.iter().cloned().collect();
    for room in rooms {
        let key = cluster.room_key(&room);
        let mut client = cluster.client.clone();
        let Ok(read) = cluster.etcd(client.get(key.clone(), None)).await else {
            return;
        };
        let current = read.kvs().first().and_then(|kv| {
            let record: RoomRecord = serde_json::from_slice(kv.value()).ok()?;
            Some((record, kv.mod_revision()))
        });
        if let Some((record, revision)) = current
            && record.owner == cluster.settings.node_id
        {
            let txn = Txn::new()
                .when([Compare::mod_revision(
                    key.clone(),
                    CompareOp::Equal,
                    revision,
                )])
                .and_then([TxnOp::delete(key, None)]);
            if cluster.etcd(client.txn(txn)).await.is_err() {
                return;
            }
        }
        let mut inner = cluster.inner();
        // Opened here again meanwhile: it stays.
        if !inner.owned.contains(&room) {
            inner.release.remove(&room);
        }
    }
}

/// Rooms another node placed here (their keys name this node under its lease) that
/// no request opened within [`UNSERVED_GRACE`]: their keys are deleted, so they do
/// not count as this node's load for ever.
fn sweep_unserved(cluster: &Cluster) {
    let mut inner = cluster.inner();
    let Some(lease) = inner.lease else { return };
    let now = Instant::now();
    let me = cluster.settings.node_id.as_str();
    let unserved: Vec<String> = inner
        .owners
        .iter()
        .filter(|(room, r)| r.owner == me && r.lease == lease && !inner.owned.contains(*room))
        .map(|(room, _)| room.clone())
        .collect();
    inner.unserved.retain(|room, _| unserved.contains(room));
    for room in unserved {
        let since = *inner.unserved.entry(room.clone()).or_insert(now);
        if now.duration_since(since) >= UNSERVED_GRACE {
            inner.release.insert(room);
        }
    }
}

/// Closes every room this node owns once its serving deadline has passed.
async fn fence_if_due(cluster: &Cluster, state: &Arc<ControlState>) {
    let due = {
        let inner = cluster.inner();
        !inner.owned.is_empty() && inner.serve_until.is_none_or(|t| Instant::now() >= t)
    };
    if due {
        tracing::warn!(
            event = "cluster_fenced",
            node = cluster.node_id(),
            "etcd unreachable until the membership lease could have expired: every room of \
             this node is closed"
        );
        fence_all(cluster, state).await;
    }
}

/// Closes every room this node owns; their keys are deleted once etcd answers (if
/// the lease still holds them).
async fn fence_all(cluster: &Cluster, state: &Arc<ControlState>) {
    let rooms: Vec<String> = {
        let mut inner = cluster.inner();
        let rooms: Vec<String> = inner.owned.drain().collect();
        inner.release.extend(rooms.iter().cloned());
        rooms
    };
    for room in rooms {
        tracing::info!(
            event = "room_fenced",
            room = room.as_str(),
            node = cluster.node_id(),
            "room closed: this node may no longer own it"
        );
        state.close_room(&room).await;
    }
}
