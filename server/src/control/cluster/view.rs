//! The node's view of its cluster: every live node and every room's owner, read
//! from etcd once and then kept current by a watch on the cluster's prefix.
//!
//! The read gives a revision; the watch starts right after it, so no change falls
//! between the two. Its first response confirms the watch was created (events
//! follow only after). When the watch breaks (etcd stopped, a partition, a
//! compaction past its revision) the view is read again and a new watch started.
//! Meanwhile the view stays as it was: stale, not empty.

use std::collections::{BTreeMap, BTreeSet, HashMap};
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
        let mut view = View::default();
        for kv in response.kvs() {
            view.apply(cluster, kv.key(), Some(kv.value()));
        }
        let mut inner = cluster.inner();
        inner.nodes = view.nodes;
        inner.owners = view.owners;
        inner.spans = view.spans;
        // What was deleted before this read is not known.
        inner.departed.clear();
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
            nodes: std::mem::take(&mut inner.nodes),
            owners: std::mem::take(&mut inner.owners),
            spans: std::mem::take(&mut inner.spans),
            departed: std::mem::take(&mut inner.departed),
        };
        for event in response.events() {
            let Some(kv) = event.kv() else { continue };
            let value = match event.event_type() {
                EventType::Put => Some(kv.value()),
                EventType::Delete => None,
            };
            view.apply(cluster, kv.key(), value);
        }
        inner.nodes = view.nodes;
        inner.owners = view.owners;
        inner.spans = view.spans;
        // Only the rooms this node spans need their last owner remembered.
        let spanning = &inner.spanning;
        view.departed.retain(|room, _| spanning.contains_key(room));
        inner.departed = view.departed;
    }
}

/// What the watch keeps: live nodes, room owners, the nodes each room spans, and
/// the owner each room had when its key was deleted.
#[derive(Default)]
struct View {
    nodes: BTreeMap<String, NodeRecord>,
    owners: HashMap<String, RoomRecord>,
    spans: HashMap<String, BTreeSet<String>>,
    departed: HashMap<String, String>,
}

impl View {
    /// Applies one key's new value (`None`: deleted). Keys and values that are not
    /// the cluster's are ignored.
    fn apply(&mut self, cluster: &Cluster, key: &[u8], value: Option<&[u8]>) {
        let Ok(key) = std::str::from_utf8(key) else {
            return;
        };
        let Some(rest) = key.strip_prefix(cluster.settings.prefix.as_str()) else {
            return;
        };
        if let Some(id) = rest.strip_prefix("/nodes/") {
            match value.and_then(|v| serde_json::from_slice::<NodeRecord>(v).ok()) {
                Some(record) if record.id == id => {
                    self.nodes.insert(id.to_owned(), record);
                }
                _ => {
                    self.nodes.remove(id);
                }
            }
        } else if let Some(room) = rest.strip_prefix("/rooms/") {
            match value.and_then(|v| serde_json::from_slice::<RoomRecord>(v).ok()) {
                Some(record) => {
                    self.departed.remove(room);
                    self.owners.insert(room.to_owned(), record);
                }
                None => {
                    if let Some(gone) = self.owners.remove(room) {
                        self.departed.insert(room.to_owned(), gone.owner);
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
