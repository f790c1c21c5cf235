//! The node's lease: granted, registered under, kept alive, and its loss acted on.
//!
//! Two tasks. [`run`] talks to etcd: every [`TICK`] it (1) registers when the node
//! has no lease (grant, then create its [`NodeRecord`] under it); (2) every quarter
//! of the TTL sends a keep-alive and, when etcd acknowledges it, moves the serving
//! deadline to that keep-alive's sending plus the TTL etcd returned, less
//! [`FENCE_MARGIN`]; (3) republishes its record when its load changed; (4) deletes
//! the keys of rooms it closed, and of rooms placed here that never opened.
//!
//! [`fence`] talks to nobody: it closes every room the node owns once the serving
//! deadline has passed. It runs apart so that no etcd request, however slow, can
//! hold it past the deadline.
//!
//! etcd answering that it does not know the lease (it expired while the node could
//! not reach it) fences every room at once; the node then registers anew, and the
//! rooms it owned are free to be placed again.

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Compare, CompareOp, LeaseKeepAliveStream, LeaseKeeper, PutOptions, Txn, TxnOp};
use tokio::time::Instant;
use tonic::Status;

use super::{Cluster, FENCE_MARGIN, NodeRecord, RoomRecord};
use crate::control::grpc::ControlState;

/// How often the etcd loop runs.
pub const TICK: Duration = Duration::from_millis(200);
/// How often the fence checks the serving deadline.
pub const FENCE_TICK: Duration = Duration::from_millis(50);
/// How often the node's load is republished (when it changed).
const PUBLISH_EVERY: Duration = Duration::from_secs(2);
/// How long a room placed on this node may wait for its first request, and a room
/// this node owns may stay owned without being open.
const UNSERVED_GRACE: Duration = Duration::from_secs(30);
/// How often a node that cannot register says why (it tries every [`TICK`]).
const REGISTER_WARN_EVERY: Duration = Duration::from_secs(10);

/// Keeps the node a member until the control plane stops.
pub async fn run(cluster: Arc<Cluster>, state: Arc<ControlState>) {
    let ttl = cluster.settings.lease_ttl;
    let beat = ttl / 4;
    let mut keeper: Option<(LeaseKeeper, LeaseKeepAliveStream)> = None;
    let mut next_beat = Instant::now();
    let mut next_publish = Instant::now();
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut warned: Option<Instant> = None;
    loop {
        tick.tick().await;
        let lease = cluster.inner().lease;
        let Some(lease) = lease else {
            match register(&cluster, &state).await {
                Ok(true) => {
                    next_beat = Instant::now() + beat;
                    next_publish = Instant::now() + PUBLISH_EVERY;
                    warned = None;
                }
                Ok(false) => {}
                Err(status) => {
                    if warned.is_none_or(|at| at.elapsed() >= REGISTER_WARN_EVERY) {
                        warned = Some(Instant::now());
                        tracing::warn!(
                            event = "cluster_register_failed",
                            node = cluster.node_id(),
                            error = status.message(),
                            "cannot register in the cluster; trying again"
                        );
                    }
                }
            }
            continue;
        };
        let now = Instant::now();
        if now >= next_beat {
            next_beat = now + beat;
            // A node etcd no longer takes the credentials of lets its lease lapse
            // rather than stay a member that can place, release and publish
            // nothing: its fence closes its rooms, and etcd then frees them.
            // It authenticates again (after its back-off) at each beat, and keeps
            // its lease alive again once etcd takes it.
            let beat = if cluster.auth_refused() && cluster.authenticate_in_time().await.is_err() {
                KeepAlive::Failed
            } else {
                keep_alive(&cluster, lease, &mut keeper).await
            };
            match beat {
                KeepAlive::Renewed { sent, ttl } => {
                    let mut inner = cluster.inner();
                    inner.etcd_ok = true;
                    if inner.lease == Some(lease) {
                        inner.serve_until = Some(deadline(sent, ttl));
                    }
                }
                KeepAlive::Failed => {
                    keeper = None;
                    cluster.inner().etcd_ok = false;
                }
                KeepAlive::Expired => {
                    keeper = None;
                    lease_lost(&cluster, &state, lease).await;
                    continue;
                }
            }
        }
        if now >= next_publish {
            next_publish = now + PUBLISH_EVERY;
            if publish(&cluster, &state, lease).await == Published::LeaseGone {
                keeper = None;
                lease_lost(&cluster, &state, lease).await;
                continue;
            }
            sweep_unserved(&cluster, &state);
        }
        release_closed(&cluster).await;
    }
}

/// The serving deadline for a lease acknowledged for `ttl` by a keep-alive sent at
/// `sent`. The TTL is etcd's answer; more than the configured one is not believed.
fn deadline(sent: Instant, ttl: Duration) -> Instant {
    let ttl = ttl.min(Duration::from_secs(300));
    sent.checked_add(ttl.saturating_sub(FENCE_MARGIN))
        .unwrap_or(sent)
}

/// etcd no longer knows `lease`: every room is closed, and the node registers anew.
async fn lease_lost(cluster: &Cluster, state: &Arc<ControlState>, lease: i64) {
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
        // The keys went with the lease.
        inner.release.clear();
        inner.unserved.clear();
    }
    fence_all(cluster, state).await;
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

/// Whether an etcd error says the lease is unknown.
fn lease_not_found(e: &etcd_client::Error) -> bool {
    e.to_string().contains("lease not found")
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
            // Opening the stream sends a keep-alive and reads its answer (TTL 0, an
            // unknown lease, is an error).
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
        Ok(Err(e)) if lease_not_found(&e) => KeepAlive::Expired,
        _ => KeepAlive::Failed,
    }
}

/// Grants a lease and registers the node under it, unless another live node has its
/// id; true once registered, false while another node has the id, and etcd's
/// error when the lease could not be granted or the registration not written. A
/// lease whose registration failed is revoked.
async fn register(cluster: &Cluster, state: &ControlState) -> Result<bool, Status> {
    let ttl = i64::try_from(cluster.settings.lease_ttl.as_secs()).unwrap_or(i64::MAX);
    let sent = Instant::now();
    let mut client = cluster.client.clone();
    let granted = cluster.etcd(client.lease_grant(ttl, None)).await?;
    let lease = granted.id();
    let record = record(cluster, state, lease);
    let registered = match serde_json::to_vec(&record) {
        Ok(value) => {
            let key = cluster.node_key(&cluster.settings.node_id);
            let txn = Txn::new()
                .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
                .and_then([TxnOp::put(
                    key,
                    value,
                    Some(PutOptions::new().with_lease(lease)),
                )]);
            match cluster.etcd(client.txn(txn)).await {
                Ok(response) if response.succeeded() => Ok(true),
                Ok(_) => {
                    tracing::warn!(
                        event = "cluster_node_id_taken",
                        node = cluster.node_id(),
                        "another live node is registered under this node's id; waiting for \
                         it to go"
                    );
                    Ok(false)
                }
                Err(status) => Err(status),
            }
        }
        Err(e) => Err(Status::internal(format!(
            "the registration does not encode: {e}"
        ))),
    };
    if !matches!(registered, Ok(true)) {
        let _ = cluster.etcd(client.lease_revoke(lease)).await;
        return registered;
    }
    let granted_ttl = Duration::from_secs(granted.ttl().unsigned_abs());
    {
        let mut inner = cluster.inner();
        inner.lease = Some(lease);
        inner.serve_until = Some(deadline(sent, granted_ttl));
        inner.record = Some(record);
    }
    tracing::info!(
        event = "cluster_joined",
        node = cluster.node_id(),
        lease,
        ttl_secs = granted.ttl(),
        "registered in the cluster"
    );
    Ok(true)
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
        room_share: cluster.settings.room_share,
        lease,
        fingerprint_sha256: super::hex(&state.fingerprint_sha256()),
    }
}

/// What republishing the registration came to.
#[derive(PartialEq, Eq)]
enum Published {
    /// Written, unchanged, or etcd unreachable (tried again later).
    Done,
    /// etcd does not know the lease.
    LeaseGone,
}

/// Writes the node's registration again if its load changed.
async fn publish(cluster: &Cluster, state: &ControlState, lease: i64) -> Published {
    let record = record(cluster, state, lease);
    if cluster.inner().record.as_ref() == Some(&record) {
        return Published::Done;
    }
    let Ok(value) = serde_json::to_vec(&record) else {
        return Published::Done;
    };
    let mut client = cluster.client.clone();
    let key = cluster.node_key(&cluster.settings.node_id);
    let put = client.put(key, value, Some(PutOptions::new().with_lease(lease)));
    match tokio::time::timeout(super::ETCD_TIMEOUT, put).await {
        Ok(Ok(_)) => {
            cluster.inner().record = Some(record);
            Published::Done
        }
        Ok(Err(e)) if lease_not_found(&e) => Published::LeaseGone,
        Ok(Err(e)) => {
            cluster.auth_error(&e).await;
            Published::Done
        }
        Err(_) => Published::Done,
    }
}

/// Deletes the keys of rooms this node closed, each only if it names this node
/// under its current lease and was not rewritten since it was read: a room opened
/// here again meanwhile ([`Cluster::take_up`] rewrites its key) keeps it.
async fn release_closed(cluster: &Cluster) {
    let (rooms, lease) = {
        let inner = cluster.inner();
        (
            inner.release.iter().cloned().collect::<Vec<String>>(),
            inner.lease,
        )
    };
    let Some(lease) = lease else { return };
    for room in rooms {
        if cluster.delete_own_key(&room, lease).await.is_err() {
            return;
        }
    }
}

impl Cluster {
    /// Deletes the key of `room`, closed here ([`Cluster::release`]), now rather
    /// than on the next tick. DeleteRoom answers only after this, so a node that
    /// spans the room cannot inherit it (see `cascade`) if this node dies right
    /// after; if etcd fails, the tick tries again.
    pub async fn release_now(&self, room: &str) {
        let lease = self.inner().lease;
        if let Some(lease) = lease {
            let _ = self.delete_own_key(room, lease).await;
        }
    }

    /// Deletes `room`'s key if it still names this node under `lease`, and stops
    /// counting it as one to release unless it was opened here again meanwhile.
    async fn delete_own_key(&self, room: &str, lease: i64) -> Result<(), Status> {
        let key = self.room_key(room);
        let mut client = self.client.clone();
        let read = self.etcd(client.get(key.clone(), None)).await?;
        let current = read.kvs().first().and_then(|kv| {
            let record: RoomRecord = serde_json::from_slice(kv.value()).ok()?;
            Some((record, kv.mod_revision()))
        });
        // Still closed here: a room opened again meanwhile (its key taken up anew,
        // which moved its revision past the one read) keeps its key.
        let closed = {
            let inner = self.inner();
            inner.release.contains(room) && !inner.owned.contains_key(room)
        };
        if closed
            && let Some((record, revision)) = current
            && record.owner == self.settings.node_id
            && record.lease == lease
        {
            let txn = Txn::new()
                .when([Compare::mod_revision(
                    key.clone(),
                    CompareOp::Equal,
                    revision,
                )])
                .and_then([TxnOp::delete(key, None)]);
            self.etcd(client.txn(txn)).await?;
        }
        let mut inner = self.inner();
        if !inner.owned.contains_key(room) {
            inner.release.remove(room);
        }
        Ok(())
    }
}

/// Rooms whose keys name this node under its lease but that are not open here for
/// [`UNSERVED_GRACE`]: placed here by another node for a request that never came,
/// or claimed for a request that then failed. Their keys are deleted, so they do
/// not count as this node's rooms for ever.
fn sweep_unserved(cluster: &Cluster, state: &ControlState) {
    // The directory first, as everywhere: then the cluster's state.
    let rooms = state.rooms();
    let mut inner = cluster.inner();
    let Some(lease) = inner.lease else { return };
    let now = Instant::now();
    let me = cluster.settings.node_id.as_str();
    let mut idle: Vec<String> = inner
        .owners
        .iter()
        .filter(|(room, r)| r.owner == me && r.lease == lease && !inner.owned.contains_key(*room))
        .map(|(room, _)| room.clone())
        .collect();
    idle.extend(
        inner
            .owned
            .keys()
            .filter(|room| rooms.get(room).is_err())
            .cloned(),
    );
    inner.unserved.retain(|room, _| idle.contains(room));
    for room in idle {
        let since = *inner.unserved.entry(room.clone()).or_insert(now);
        if now.duration_since(since) >= UNSERVED_GRACE {
            inner.owned.remove(&room);
            inner.unserved.remove(&room);
            inner.release.insert(room);
        }
    }
}

/// Closes every room this node owns or spans once the serving deadline has passed,
/// until the control plane stops.
pub async fn fence(cluster: Arc<Cluster>, state: Arc<ControlState>) {
    let mut tick = tokio::time::interval(FENCE_TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let due = {
            let inner = cluster.inner();
            // Rooms it spans count too: a node that only spans rooms fences them.
            !(inner.owned.is_empty() && inner.spanning.is_empty())
                && inner.serve_until.is_none_or(|t| Instant::now() >= t)
        };
        if due {
            tracing::warn!(
                event = "cluster_fenced",
                node = cluster.node_id(),
                "etcd unreachable until the membership lease could have expired: every \
                 room of this node is closed"
            );
            fence_all(&cluster, &state).await;
        }
    }
}

/// Closes every room this node owns; their keys are deleted once etcd answers (if
/// the lease still holds them).
async fn fence_all(cluster: &Cluster, state: &Arc<ControlState>) {
    let rooms: Vec<String> = {
        // The directory's lock first: no room opens between the two.
        let _rooms = state.rooms();
        let mut inner = cluster.inner();
        let rooms: Vec<String> = inner.owned.drain().map(|(room, _)| room).collect();
        if inner.lease.is_some() {
            inner.release.extend(rooms.iter().cloned());
        }
        // The rooms it spans for their owners close too: no lease binds their keys.
        let spanned: Vec<String> = inner.spanning.drain().map(|(room, _)| room).collect();
        inner.unspan.extend(spanned.iter().cloned());
        rooms.into_iter().chain(spanned).collect::<Vec<_>>()
    };
    state.close_rooms(&rooms).await;
    // Logged once closed: its participants are off their shards.
    for room in &rooms {
        tracing::info!(
            event = "room_fenced",
            room = room.as_str(),
            node = cluster.node_id(),
            "room closed: this node may no longer own it"
        );
    }
}
