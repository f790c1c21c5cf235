//! The node's view of its cluster: every live node and every room's owner, read
//! from etcd once and then kept current by a watch on the cluster's prefix.
//!
//! The read gives a revision; the watch starts right after it, so no change falls
//! between the two. Its first response confirms the watch was created (events
//! follow only after). When the watch breaks (etcd stopped, a partition, a
//! compaction past its revision) the view is read again and a new watch started.
//! Meanwhile the view stays as it was: stale, not empty.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{EventType, GetOptions, WatchOptions};

use super::{Cluster, NodeRecord, RoomRecord};

/// How long to wait before reading again after the watch broke.
const RETRY: Duration = Duration::from_millis(500);

/// Keeps the view current until the control plane stops.
pub async fn run(cluster: Arc<Cluster>) {
    loop {
        if let Err(e) = follow(&cluster).await {
            tracing::debug!(event = "cluster_watch_broken", error = %e, "watching etcd again");
        }
        tokio::time::sleep(RETRY).await;
    }
}

/// One read of the prefix and the watch after it, until the watch ends.
async fn follow(cluster: &Cluster) -> Result<(), String> {
    let prefix = format!("{}/", cluster.settings.prefix);
    let mut client = cluster.client.clone();
    let read = client.get(prefix.clone(), Some(GetOptions::new().with_prefix()));
    let response = cluster
        .etcd(read)
        .await
        .map_err(|s| s.message().to_owned())?;
    let revision = response.header().map_or(0, |h| h.revision());
    {
        let mut view = View {
            tls: cluster.serves_tls(),
            ..View::default()
        };
        for kv in response.kvs() {
            view.apply(
                cluster.names(),
                kv.key(),
                Some(kv.value()),
                kv.mod_revision(),
            );
        }
        let mut inner = cluster.inner();
        inner.nodes = view.nodes;
        inner.without_tls = view.without_tls;
        inner.owners = view.owners;
        inner.spans = view.spans;
        // What was deleted before this read is not known.
        inner.departed.clear();
        inner.placed_anew.clear();
        // A view read anew starts its count of revisions anew.
        inner.seen = 0;
        inner.seen(revision);
    }
    let options = WatchOptions::new()
        .with_prefix()
        .with_start_revision(revision.saturating_add(1));
    let mut stream = client
        .watch(prefix, Some(options))
        .await
        .map_err(|e| e.to_string())?;
    loop {
        let Some(response) = stream.message().await.map_err(|e| e.to_string())? else {
            return Ok(());
        };
        if response.canceled() {
            return Err(format!("watch cancelled: {}", response.cancel_reason()));
        }
        let mut inner = cluster.inner();
        let inner = &mut *inner;
        let mut view = View {
            tls: cluster.serves_tls(),
            nodes: std::mem::take(&mut inner.nodes),
            without_tls: std::mem::take(&mut inner.without_tls),
            owners: std::mem::take(&mut inner.owners),
            spans: std::mem::take(&mut inner.spans),
            departed: std::mem::take(&mut inner.departed),
            placed_anew: std::mem::take(&mut inner.placed_anew),
            ..View::default()
        };
        for event in response.events() {
            let Some(kv) = event.kv() else { continue };
            let value = match event.event_type() {
                EventType::Put => Some(kv.value()),
                EventType::Delete => None,
            };
            // A deletion's revision is its own (the key's tombstone).
            view.apply(cluster.names(), kv.key(), value, kv.mod_revision());
        }
        view.settle();
        inner.nodes = view.nodes;
        inner.without_tls = view.without_tls;
        inner.owners = view.owners;
        inner.spans = view.spans;
        // Only the rooms this node spans need this.
        let spanning = &inner.spanning;
        view.departed.retain(|room, _| spanning.contains_key(room));
        view.placed_anew.retain(|room| spanning.contains_key(room));
        inner.departed = view.departed;
        inner.placed_anew = view.placed_anew;
        // The events come in revision order: the view holds everything up to the
        // last one (a response's header may name a later revision whose events
        // come in the next responses).
        if let Some(last) = response.events().iter().filter_map(|e| e.kv()).next_back() {
            inner.seen(last.mod_revision());
        }
    }
}

/// What the watch keeps: live nodes, room owners, the nodes each room spans, and
/// the rooms whose owner died.
#[derive(Default)]
struct View {
    /// Whether this node serves TLS: then a node that does not is left out of
    /// `nodes` (nothing is placed on, routed or redirected to it; see
    /// docs/cluster.md) and kept in `without_tls`.
    tls: bool,
    nodes: BTreeMap<String, NodeRecord>,
    /// Live nodes left out of `nodes` because they serve no TLS and this one does.
    without_tls: BTreeSet<String>,
    owners: HashMap<String, RoomRecord>,
    spans: HashMap<String, BTreeSet<String>>,
    /// Rooms whose key was deleted in the revision that deleted the registration of
    /// the owner it named, with that owner: the key went with the owner's lease.
    /// (etcd deletes every key of an expired or revoked lease in one transaction:
    /// `Revoke` in its server/lease/lessor.go. A watch response holds the whole
    /// of each revision it carries.) A key its live owner deleted is not here.
    departed: HashMap<String, String>,
    /// Rooms in `departed` whose key was then made anew naming this node.
    placed_anew: HashSet<String>,
    /// The room keys this response deleted: room, the owner named, revision.
    deleted_rooms: Vec<(String, String, i64)>,
    /// The registrations this response deleted, with their revision.
    deleted_nodes: HashMap<String, i64>,
}

impl View {
    /// After a response's events: the room keys it deleted together with their
    /// owner's registration went with the owner's lease.
    fn settle(&mut self) {
        for (room, owner, revision) in self.deleted_rooms.drain(..) {
            if self.deleted_nodes.get(&owner) == Some(&revision) {
                self.departed.insert(room, owner);
            }
        }
        self.deleted_nodes.clear();
    }

    /// Applies one key's new value (`None`: deleted). Keys and values that are not
    /// the cluster's are ignored.
    /// `(prefix, me)`: the cluster's prefix and this node's id.
    fn apply(
        &mut self,
        (prefix, me): (&str, &str),
        key: &[u8],
        value: Option<&[u8]>,
        revision: i64,
    ) {
        let Ok(key) = std::str::from_utf8(key) else {
            return;
        };
        let Some(rest) = key.strip_prefix(prefix) else {
            return;
        };
        if let Some(id) = rest.strip_prefix("/nodes/") {
            match value.and_then(|v| serde_json::from_slice::<NodeRecord>(v).ok()) {
                Some(record) if record.id == id && self.tls && !record.serves_tls() => {
                    self.nodes.remove(id);
                    if self.without_tls.insert(id.to_owned()) {
                        tracing::warn!(
                            event = "cluster_node_without_tls",
                            node = id,
                            "a node without TLS registered; this node, which serves TLS, \
                             leaves it out: it places no room on it, calls it for nothing \
                             and sends no client to it"
                        );
                    }
                }
                Some(record) if record.id == id => {
                    self.without_tls.remove(id);
                    self.nodes.insert(id.to_owned(), record);
                }
                _ => {
                    self.without_tls.remove(id);
                    self.nodes.remove(id);
                    if value.is_none() {
                        self.deleted_nodes.insert(id.to_owned(), revision);
                    }
                }
            }
        } else if let Some(room) = rest.strip_prefix("/rooms/") {
            match value.and_then(|v| serde_json::from_slice::<RoomRecord>(v).ok()) {
                Some(record) => {
                    let anew = self.departed.remove(room).is_some();
                    if anew && record.owner == me {
                        self.placed_anew.insert(room.to_owned());
                    } else {
                        self.placed_anew.remove(room);
                    }
                    self.owners.insert(room.to_owned(), record);
                }
                None => {
                    self.departed.remove(room);
                    self.placed_anew.remove(room);
                    if let Some(gone) = self.owners.remove(room) {
                        self.deleted_rooms
                            .push((room.to_owned(), gone.owner, revision));
                    }
                }
            }
        } else if let Some((node, room)) =
            rest.strip_prefix("/spans/").and_then(|r| r.split_once('/'))
        {
            // A node id holds no '/' (`Label`): the room is all that follows.
            if value.is_some() {
                self.spans
                    .entry(room.to_owned())
                    .or_default()
                    .insert(node.to_owned());
            } else if let Some(nodes) = self.spans.get_mut(room) {
                nodes.remove(node);
                if nodes.is_empty() {
                    self.spans.remove(room);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::cluster::tests::node;

    const HERE: (&str, &str) = ("/c", "b");

    fn put(v: &mut View, key: &str, value: &[u8], revision: i64) {
        v.apply(HERE, key.as_bytes(), Some(value), revision);
    }

    fn delete(v: &mut View, key: &str, revision: i64) {
        v.apply(HERE, key.as_bytes(), None, revision);
    }

    fn room(owner: &str) -> Vec<u8> {
        RoomRecord {
            owner: owner.to_owned(),
            lease: 1,
        }
        .encode()
        .expect("a record")
    }

    fn registration(id: &str) -> Vec<u8> {
        serde_json::to_vec(&node(id, "", 0)).expect("a record")
    }

    #[test]
    fn a_node_serving_tls_leaves_nodes_without_it_out() {
        let with_tls = |id: &str| {
            let mut record = node(id, "", 0);
            record.grpc_url = format!("https://{id}:1");
            record.http_url = format!("https://{id}:2");
            serde_json::to_vec(&record).expect("a record")
        };
        let mut v = View {
            tls: true,
            ..View::default()
        };
        put(&mut v, "/c/nodes/a", &with_tls("a"), 1);
        put(&mut v, "/c/nodes/p", &registration("p"), 2);
        let ids = |v: &View| v.nodes.keys().cloned().collect::<Vec<_>>();
        assert_eq!(ids(&v), ["a"]);
        assert!(v.without_tls.contains("p"));
        // It restarts with TLS: in; it stops: forgotten.
        put(&mut v, "/c/nodes/p", &with_tls("p"), 3);
        assert_eq!(ids(&v), ["a", "p"]);
        assert!(v.without_tls.is_empty());
        put(&mut v, "/c/nodes/p", &registration("p"), 4);
        delete(&mut v, "/c/nodes/p", 5);
        assert_eq!(ids(&v), ["a"]);
        assert!(v.without_tls.is_empty());
        // A node without TLS sees every node.
        let mut plain = View::default();
        put(&mut plain, "/c/nodes/a", &with_tls("a"), 1);
        put(&mut plain, "/c/nodes/p", &registration("p"), 2);
        assert_eq!(ids(&plain), ["a", "p"]);
    }

    #[test]
    fn a_room_key_deleted_with_its_owners_registration_went_with_the_lease() {
        let mut v = View::default();
        put(&mut v, "/c/nodes/a", &registration("a"), 1);
        put(&mut v, "/c/rooms/dead", &room("a"), 2);
        put(&mut v, "/c/rooms/deleted", &room("a"), 3);
        v.settle();
        // DeleteRoom on the live owner: a revision of its own.
        delete(&mut v, "/c/rooms/deleted", 4);
        v.settle();
        assert!(v.departed.is_empty());
        // The lease expires: its keys go in one revision, in one response.
        delete(&mut v, "/c/rooms/dead", 5);
        delete(&mut v, "/c/nodes/a", 5);
        v.settle();
        assert_eq!(v.departed.get("dead").map(String::as_str), Some("a"));
        assert_eq!(v.departed.len(), 1);
        // Made anew naming this node (b): placed here in the gap.
        put(&mut v, "/c/rooms/dead", &room("b"), 6);
        v.settle();
        assert!(v.departed.is_empty());
        assert!(v.placed_anew.contains("dead"));
    }

    #[test]
    fn a_key_deleted_before_its_owner_stopped_or_handed_over_is_not_the_owners_death() {
        let mut v = View::default();
        put(&mut v, "/c/nodes/a", &registration("a"), 1);
        put(&mut v, "/c/rooms/r", &room("a"), 2);
        put(&mut v, "/c/rooms/h", &room("a"), 3);
        v.settle();
        // DeleteRoom, then the owner stops: two revisions, seen in one response.
        delete(&mut v, "/c/rooms/r", 4);
        delete(&mut v, "/c/nodes/a", 5);
        v.settle();
        assert!(v.departed.is_empty());
        // A draining owner hands a room to this node: its key is never deleted.
        put(&mut v, "/c/rooms/h", &room("b"), 6);
        v.settle();
        assert!(v.placed_anew.is_empty());
    }
}
