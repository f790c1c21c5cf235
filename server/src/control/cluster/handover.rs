//! A draining node hands the rooms it owns over to other nodes, so that a room
//! outlives its owner's drain: its settings and metadata stay, the nodes spanning
//! it keep their participants, and new joins go to the room's new owner.
//!
//! For each room it owns, the draining node picks an *heir*: a node already
//! hosting the room (linked to every other host), else the least-loaded node;
//! never one that drains or is full, and one of the node's own region first. Then, in one etcd transaction that
//! holds only while the room's key still names this node under its lease, the
//! key names the heir, bound to the heir's lease, and this node's span key of the
//! room is written: from that revision on the heir owns the room and this node
//! spans it, like any node spanning a room for its owner. This node then hands the
//! room as it holds it to the heir (`NodeService.HandOverRoom`), which opens it
//! with those settings, or adopts them if it had the room open. This node's
//! participants of the room stay, linked to the heir, until that link is up (at
//! most [`HANDOVER_WAIT`]); then the drain tells them to leave (SERVER_SHUTDOWN),
//! and they rejoin through any node, which sends them to the heir. A room spanned
//! only here closes once they are gone, and its span key goes with it.
//!
//! An heir that does not take the room up (a draining heir refuses) gives it back:
//! a transaction names this node again and deletes its span key, if the key's
//! modification revision is still the hand-over's (an heir that took the room up
//! rewrote it, and keeps it). The room is then offered to a second heir. When etcd
//! does not say whether a hand-over happened, this node stops counting the room
//! its own. A room without an heir, or not handed over within [`HANDOVER_BUDGET`],
//! closes with this node: its key goes with the lease, and a node still spanning it
//! inherits it then (see `cascade`). While the rooms are handed
//! over the draining node still admits links (`Drain::check_admission`).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp};
use shoal_proto::v1;
use tonic::Status;

use super::{Cluster, Inner, NodeRecord, RoomRecord, Route, fenced, least_loaded};
use crate::control::grpc::ControlState;
use crate::control::rooms::RoomSpec;

/// How long a draining node keeps the participants of a room it handed over,
/// waiting for the room's link to the heir, before it tells them to leave.
pub const HANDOVER_WAIT: Duration = Duration::from_secs(5);
/// How long a draining node spends handing its rooms over (all at once); a room
/// not handed over by then closes with the node.
pub const HANDOVER_BUDGET: Duration = Duration::from_secs(10);
/// How long a HandOverRoom call may take.
const HANDOVER_TIMEOUT: Duration = Duration::from_secs(3);
/// How many heirs a room is offered to, one after the other.
const HEIR_TRIES: usize = 2;
/// How often the drain looks whether the handed-over rooms' links are up.
const LINK_POLL: Duration = Duration::from_millis(50);

/// Who takes over `room` from this node (see the module's doc), other than the
/// nodes in `tried`; `rooms`: the rooms each node owns, which spreads a drain's
/// rooms over the heirs.
fn heir(
    inner: &Inner,
    me: &str,
    region: &str,
    room: &str,
    rooms: &HashMap<String, usize>,
    tried: &[NodeRecord],
) -> Option<NodeRecord> {
    let takes = |n: &&NodeRecord| {
        n.id != me && !n.draining && n.peers < n.max_peers && !tried.iter().any(|t| t.id == n.id)
    };
    let region = Some(region).filter(|r| !r.is_empty());
    let hosts = inner.hosts_of(room);
    let hosting = inner
        .nodes
        .values()
        .filter(takes)
        .filter(|n| hosts.contains(n.id.as_str()));
    if let Some(node) = least_loaded(hosting, rooms, region) {
        return Some(node.clone());
    }
    least_loaded(inner.nodes.values().filter(takes), rooms, region).cloned()
}

impl Cluster {
    /// The rooms this node owns under its current lease.
    fn owned_rooms(&self) -> Vec<String> {
        let inner = self.inner();
        let mut rooms: Vec<String> = inner
            .owned
            .iter()
            .filter(|(_, lease)| Some(**lease) == inner.lease)
            .map(|(room, _)| room.clone())
            .collect();
        rooms.sort_unstable();
        rooms
    }

    /// Up to `n` heirs of `room`, in the order they are offered it (see [`heir`]).
    fn heirs(&self, room: &str, rooms: &HashMap<String, usize>, n: usize) -> Vec<NodeRecord> {
        let inner = self.inner();
        let (me, region) = (&self.settings.node_id, &self.settings.region);
        let mut heirs = Vec::new();
        while heirs.len() < n {
            let Some(next) = heir(&inner, me, region, room, rooms, &heirs) else {
                break;
            };
            heirs.push(next);
        }
        heirs
    }

    /// The record naming this node the owner under `lease`.
    fn own_record(&self, lease: i64) -> RoomRecord {
        RoomRecord {
            owner: self.settings.node_id.clone(),
            lease,
        }
    }

    /// Makes `heir` the owner of `room` (normalised) and this node a host spanning
    /// it: one transaction, which holds only while the room's key names this node
    /// under its current lease. The revision the heir owns the room from; on an
    /// error, the room is still this node's if [`Inner::owned`] holds it (when etcd
    /// does not say whether the transaction took effect, it no longer does).
    async fn pass_on(&self, room: &str, heir: &NodeRecord) -> Result<i64, Status> {
        let lease = {
            let inner = self.inner();
            match inner.lease {
                Some(lease) if inner.owned.get(room) == Some(&lease) && inner.serves(room) => lease,
                _ => return Err(fenced()),
            }
        };
        let key = self.room_key(room);
        let mine = self.own_record(lease).encode()?;
        let theirs = RoomRecord {
            owner: heir.id.clone(),
            lease: heir.lease,
        }
        .encode()?;
        let txn = Txn::new()
            .when([Compare::value(key.clone(), CompareOp::Equal, mine)])
            .and_then([
                TxnOp::put(
                    key.clone(),
                    theirs.clone(),
                    Some(PutOptions::new().with_lease(heir.lease)),
                ),
                TxnOp::put(
                    self.span_key(&self.settings.node_id, room),
                    self.settings.node_id.clone(),
                    Some(PutOptions::new().with_lease(lease)),
                ),
            ]);
        let mut client = self.client.clone();
        let revision = match self.etcd(client.txn(txn)).await {
            Ok(r) if r.succeeded() => r.header().map_or(0, |h| h.revision()),
            Ok(_) => {
                return Err(Status::unavailable(format!(
                    "room {room:?} changed hands while being handed over"
                )));
            }
            // The transaction may have taken effect all the same: the key says. Its
            // revision is the span key's, written with it (the heir may have
            // rewritten the room's key since, taking the room up).
            Err(e) => match self.read_handed(&key, &theirs, room).await {
                Ok(Some(revision)) => revision,
                Ok(None) => return Err(e),
                Err(_) => {
                    // This node cannot know whether it owns the room: it does not
                    // any more. Its key is deleted if it still names this node.
                    let mut inner = self.inner();
                    if inner.owned.remove(room).is_some() {
                        inner.release.insert(room.to_owned());
                    }
                    return Err(e);
                }
            },
        };
        let mut inner = self.inner();
        inner.owned.remove(room);
        inner.release.remove(room);
        inner.unspan.remove(room);
        // The new owner and this node's span reach the view through the watch.
        inner.spanning.insert(room.to_owned(), lease);
        Ok(revision)
    }

    /// After a hand-over transaction whose outcome is unknown: the revision it
    /// took effect at, when the room's key names the heir (`theirs`), from this
    /// node's span key of `room`, written in the same transaction; `None` when
    /// the key does not name the heir.
    async fn read_handed(
        &self,
        key: &str,
        theirs: &[u8],
        room: &str,
    ) -> Result<Option<i64>, Status> {
        let span = self.span_key(&self.settings.node_id, room);
        let txn = Txn::new().and_then([TxnOp::get(key, None), TxnOp::get(span, None)]);
        let mut client = self.client.clone();
        let response = self.etcd(client.txn(txn)).await?;
        let mut read = response.op_responses().into_iter().map(|r| match r {
            etcd_client::TxnOpResponse::Get(get) => get
                .kvs()
                .first()
                .map(|kv| (kv.value().to_vec(), kv.mod_revision())),
            _ => None,
        });
        let (room_key, span_key) = (read.next().flatten(), read.next().flatten());
        Ok(match (room_key, span_key) {
            (Some((value, _)), Some((_, revision))) if value == theirs => Some(revision),
            // Named the heir without this node's span key: not by this hand-over's
            // transaction as it was written; taking it back would not hold.
            (Some((value, _)), None) if value == theirs => Some(0),
            _ => None,
        })
    }

    /// Takes `room` (normalised) back from the heir, which did not take it up: its
    /// key names this node again and its span key goes, if the key is as
    /// [`Cluster::pass_on`] left it at `revision` (an heir that took the room up
    /// rewrote it). Whether it was taken back.
    async fn take_back(&self, room: &str, revision: i64) -> Result<bool, Status> {
        let lease = self.inner().live_lease().ok_or_else(fenced)?;
        let key = self.room_key(room);
        let mine = self.own_record(lease).encode()?;
        let span = self.span_key(&self.settings.node_id, room);
        let txn = Txn::new()
            .when([Compare::mod_revision(
                key.clone(),
                CompareOp::Equal,
                revision,
            )])
            .and_then([
                TxnOp::put(key, mine, Some(PutOptions::new().with_lease(lease))),
                TxnOp::delete(span, None),
            ]);
        let mut client = self.client.clone();
        if !self.etcd(client.txn(txn)).await?.succeeded() {
            return Ok(false);
        }
        let mut inner = self.inner();
        inner.spanning.remove(room);
        inner.owned.insert(room.to_owned(), lease);
        Ok(true)
    }

    /// Serves `room` (normalised), handed over by a draining node: etcd must name
    /// this node its owner under its current lease.
    pub async fn take_handed(&self, room: &str) -> Result<(), Status> {
        match self.read_owner(room).await? {
            Some(owner) if owner.owner == self.settings.node_id => {
                match self.route_to(room, &owner).await? {
                    Route::Local => Ok(()),
                    Route::Remote(_) => Err(fenced()),
                }
            }
            _ => Err(Status::failed_precondition(format!(
                "the cluster store does not name this node the owner of room {room:?}"
            ))),
        }
    }
}

impl ControlState {
    /// Hands every room this node owns to an heir (see the module's doc), all at
    /// once within [`HANDOVER_BUDGET`], and waits, at most [`HANDOVER_WAIT`], until
    /// each one's link to its heir is up where this node has participants in it.
    /// Returns how many rooms it handed.
    pub async fn hand_rooms_over(self: &Arc<Self>, cluster: &Arc<Cluster>) -> usize {
        let deadline = tokio::time::Instant::now() + HANDOVER_BUDGET;
        let mut counts = cluster.rooms_by_node();
        let mut offered: BTreeSet<String> = BTreeSet::new();
        let mut handed: Vec<(String, String)> = Vec::new();
        // A room handed to this node as its drain began is handed on: a second round.
        loop {
            let rooms: Vec<String> = cluster
                .owned_rooms()
                .into_iter()
                .filter(|r| offered.insert(r.clone()))
                .collect();
            if rooms.is_empty() || tokio::time::Instant::now() >= deadline {
                break;
            }
            let offers: Vec<_> = rooms
                .into_iter()
                .map(|room| {
                    let heirs = cluster.heirs(&room, &counts, HEIR_TRIES);
                    if let Some(first) = heirs.first() {
                        *counts.entry(first.id.clone()).or_insert(0) += 1;
                    }
                    // Each offer runs to its end once begun (a transaction cut off
                    // halfway would leave the room's owner unknown here); the
                    // budget stops it between heirs.
                    self.hand_over(cluster, room, heirs, deadline)
                })
                .collect();
            handed.extend(
                futures_util::future::join_all(offers)
                    .await
                    .into_iter()
                    .flatten(),
            );
        }
        let wait_until = tokio::time::Instant::now() + HANDOVER_WAIT;
        while tokio::time::Instant::now() < wait_until && !self.linked_to_heirs(&handed) {
            tokio::time::sleep(LINK_POLL).await;
        }
        handed.len()
    }

    /// Offers `room` to `heirs`, one after the other, until one takes it; the
    /// room and the heir that took it.
    async fn hand_over(
        self: &Arc<Self>,
        cluster: &Arc<Cluster>,
        room: String,
        heirs: Vec<NodeRecord>,
        deadline: tokio::time::Instant,
    ) -> Option<(String, String)> {
        let held = {
            let rooms = self.rooms();
            rooms.get(&room).ok().map(|r| self.room_message(r))
        };
        // A room not open here is closing: its key goes.
        let held = held?;
        if heirs.is_empty() {
            tracing::warn!(
                event = "room_not_handed_over",
                room = room.as_str(),
                "no other node takes rooms: the room closes with this node"
            );
        }
        for heir in heirs {
            if tokio::time::Instant::now() >= deadline {
                tracing::warn!(
                    event = "room_not_handed_over",
                    room = room.as_str(),
                    "handing the rooms over took too long"
                );
                return None;
            }
            let revision = match cluster.pass_on(&room, &heir).await {
                Ok(revision) => revision,
                Err(e) => {
                    tracing::warn!(
                        event = "room_not_handed_over",
                        room = room.as_str(),
                        heir = heir.id.as_str(),
                        error = e.message(),
                        "could not hand the room over"
                    );
                    // No longer this node's to hand (the outcome unknown).
                    if !cluster.inner().owned.contains_key(&room) {
                        return None;
                    }
                    continue;
                }
            };
            let body = v1::HandOverRoomRequest {
                room: room.clone(),
                node_id: cluster.node_id().to_owned(),
                held: Some(held.clone()),
            };
            let call = super::cascade::call_node(
                self,
                cluster,
                &room,
                &heir,
                body,
                HANDOVER_TIMEOUT,
                |mut c, r| async move { c.hand_over_room(r).await },
            )
            .await;
            let refused = match call {
                Ok(_) => {
                    tracing::info!(
                        event = "room_handed_over",
                        room = room.as_str(),
                        heir = heir.id.as_str(),
                        "the room is the heir's now; this node spans it until its participants leave"
                    );
                    return Some((room, heir.id));
                }
                Err(e) => e,
            };
            match cluster.take_back(&room, revision).await {
                Ok(true) => tracing::warn!(
                    event = "room_not_handed_over",
                    room = room.as_str(),
                    heir = heir.id.as_str(),
                    error = refused.message(),
                    "the heir did not take the room up; taken back"
                ),
                Ok(false) => {
                    tracing::info!(
                        event = "room_handed_over",
                        room = room.as_str(),
                        heir = heir.id.as_str(),
                        "the heir took the room up (its answer was lost); this node spans it \
                         until its participants leave"
                    );
                    return Some((room, heir.id));
                }
                Err(e) => {
                    tracing::warn!(
                        event = "room_not_handed_over",
                        room = room.as_str(),
                        heir = heir.id.as_str(),
                        error = e.message(),
                        "the heir did not take the room up, and taking it back failed"
                    );
                    return None;
                }
            }
        }
        None
    }

    /// Whether every room of `handed` (room, heir) in which this node has
    /// participants of its own has its link to the heir up.
    fn linked_to_heirs(&self, handed: &[(String, String)]) -> bool {
        let waiting: Vec<&(String, String)> = {
            let rooms = self.rooms();
            handed
                .iter()
                .filter(|(room, _)| rooms.get(room).is_ok_and(|r| r.own_count() > 0))
                .collect()
        };
        let links = self.links();
        waiting.iter().all(|(room, heir)| links.is_up(room, heir))
    }

    /// Serves the room of `spec` (its settings and metadata as node `from`, which
    /// handed it over, held it): opens it, or gives the room open here those.
    pub(crate) fn open_handed(&self, from: &str, spec: RoomSpec) -> Result<(), Status> {
        let room = spec.name.clone();
        let now = self.clock().now();
        let mut rooms = self.rooms();
        self.may_open(&room)?;
        let opened = rooms.get(&room).is_err();
        if opened {
            rooms.create(spec, now)?;
        } else {
            rooms.adopt(spec)?;
        }
        tracing::info!(
            event = "room_taken_over",
            room = room.as_str(),
            from,
            opened,
            "the room is served here now, handed over by a draining node"
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::cluster::tests::node;

    fn owned(owner: &str) -> RoomRecord {
        RoomRecord {
            owner: owner.to_owned(),
            lease: 1,
        }
    }

    fn view(nodes: &[NodeRecord]) -> Inner {
        Inner {
            nodes: nodes.iter().map(|n| (n.id.clone(), n.clone())).collect(),
            ..Inner::default()
        }
    }

    #[test]
    fn a_host_of_the_room_inherits_it_before_any_other_node() {
        let mut inner = view(&[node("d", "", 0), node("a", "", 1), node("b", "", 8)]);
        inner.owners.insert("r".into(), owned("d"));
        let none = HashMap::new();
        let pick = |inner: &Inner| heir(inner, "d", "", "r", &none, &[]).map(|n| n.id);
        assert_eq!(pick(&inner).as_deref(), Some("a"), "least loaded");
        // b spans the room: linked to every host already, it takes it over.
        inner.spans.insert("r".into(), ["b".to_owned()].into());
        assert_eq!(pick(&inner).as_deref(), Some("b"));
        // One offered the room already is not offered it again.
        let b = inner.nodes["b"].clone();
        let next = heir(&inner, "d", "", "r", &none, &[b]).map(|n| n.id);
        assert_eq!(next.as_deref(), Some("a"));
        // Unless it drains or is full.
        inner.nodes.get_mut("b").unwrap().draining = true;
        assert_eq!(pick(&inner).as_deref(), Some("a"));
        inner.nodes.get_mut("b").unwrap().draining = false;
        inner.nodes.get_mut("b").unwrap().peers = 10;
        assert_eq!(pick(&inner).as_deref(), Some("a"));
        // The draining node itself never; nobody else: no heir.
        let alone = view(&[node("d", "", 0)]);
        assert_eq!(heir(&alone, "d", "", "r", &none, &[]), None);
    }

    #[test]
    fn a_drains_rooms_spread_over_the_heirs_and_stay_in_the_region() {
        let inner = view(&[
            node("d", "eu", 4),
            node("a", "eu", 2),
            node("b", "eu", 2),
            node("c", "us", 0),
        ]);
        let mut counts = HashMap::new();
        let mut picked = Vec::new();
        for room in ["r1", "r2", "r3", "r4"] {
            let h = heir(&inner, "d", "eu", room, &counts, &[]).expect("an heir");
            *counts.entry(h.id.clone()).or_insert(0) += 1;
            picked.push(h.id);
        }
        assert_eq!(picked, ["a", "b", "a", "b"]);
    }
}
