//! Where a signalling joiner of a room is served in a cluster, and rooms larger
//! than a node's share (`--room-share N`): a node serves up to N of a room's
//! participants (hidden ones included, links to other nodes not), and the room's
//! further signalling joiners go to other nodes, which span the room
//! ([`super::cascade`]).
//!
//! - **A host past its share** (the owner, or a node spanning the room, that serves
//!   N of its participants) asks the other hosts what they serve
//!   (`NodeService.GetRoomShare`, all at once) and sends a joiner to the one that
//!   serves the fewest of the room's participants, fewer than N (not draining,
//!   taking peers, its own region first); failing that, to the least-loaded live
//!   node that does not host the room, has a share and takes peers; failing
//!   that, it serves
//!   the joiner itself. The share spreads a room, `max_participants` bounds it, and
//!   joiners admitted at the same moment can take a host past it.
//! - **A node that does not host the room** asks the owner
//!   (`NodeService.GetRoomShare`). When the owner's share is taken, the joiner goes
//!   to the other host the owner names as one with room to spare (asking the
//!   hosts as above), or, when it names none, the node spans the room and serves
//!   the joiner. Otherwise (the owner has room, does not answer, or this node
//!   drains or is full) the joiner goes to the owner.
//!
//! When the nodes' views are current and no one else joins meanwhile, a joiner is
//! redirected at most twice: to the owner by a node that does not span the room,
//! then on by the owner. Set the same share on every node. WHIP and WHEP sessions
//! still go to the owner.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use shoal_proto::v1;
use tonic::Status;

use super::{Cluster, ClusterSettings, Inner, NodeRecord, Place, least_loaded};
use crate::control::grpc::ControlState;
use crate::control::rooms::{NameKind, validate_name};

/// How long a node a joiner reached waits for another host's GetRoomShare answer:
/// without it, an owner's share counts as free and another host's as taken.
const ASK_TIMEOUT: Duration = Duration::from_secs(2);

impl Inner {
    /// The nodes hosting `room`, as the watch saw them: its owner and the nodes
    /// spanning it.
    pub(super) fn hosts_of(&self, room: &str) -> BTreeSet<&str> {
        let owner = self.owners.get(room).map(|o| o.owner.as_str());
        let spanning = self.spans.get(room).into_iter().flatten();
        owner
            .into_iter()
            .chain(spanning.map(String::as_str))
            .collect()
    }
}

/// The other host of `room` that serves the fewest of its participants, fewer
/// than this node's share, by `served` (what each host answered just now; one that
/// did not answer is left out), not draining and taking peers; one of this
/// node's region first.
fn host_with_room(
    inner: &Inner,
    settings: &ClusterSettings,
    room: &str,
    served: &HashMap<String, u32>,
) -> Option<NodeRecord> {
    let me = settings.node_id.as_str();
    let elsewhere = |n: &NodeRecord| n.region != settings.region;
    inner
        .hosts_of(room)
        .into_iter()
        .filter(|id| *id != me)
        .filter_map(|id| Some((*served.get(id)?, inner.nodes.get(id)?)))
        .filter(|(count, n)| *count < settings.room_share && !n.draining && n.peers < n.max_peers)
        .min_by(|a, b| (elsewhere(a.1), a.0, &a.1.id).cmp(&(elsewhere(b.1), b.0, &b.1.id)))
        .map(|(_, n)| n.clone())
}

/// Where a joiner of `room` goes from this node, a host of it past its share (see
/// the module's doc); `None`: it is served here. `served`: the participants each
/// other host serves, as its link said; `rooms`: the rooms each node owns.
fn share_target(
    inner: &Inner,
    settings: &ClusterSettings,
    room: &str,
    served: &HashMap<String, u32>,
    rooms: &HashMap<String, usize>,
) -> Option<NodeRecord> {
    let me = settings.node_id.as_str();
    if let Some(host) = host_with_room(inner, settings, room, served) {
        return Some(host);
    }
    let hosts = inner.hosts_of(room);
    let fresh = inner.nodes.values().filter(|n| {
        let id = n.id.as_str();
        id != me && !hosts.contains(id) && n.room_share > 0 && n.peers < n.max_peers
    });
    let region = Some(settings.region.as_str()).filter(|r| !r.is_empty());
    least_loaded(fresh, rooms, region).cloned()
}

impl Cluster {
    /// See [`share_target`].
    fn share_target(&self, room: &str, served: &HashMap<String, u32>) -> Option<NodeRecord> {
        let rooms = self.rooms_by_node();
        share_target(&self.inner(), &self.settings, room, served, &rooms)
    }

    /// See [`host_with_room`], from this node.
    fn host_with_room(&self, room: &str, served: &HashMap<String, u32>) -> Option<NodeRecord> {
        host_with_room(&self.inner(), &self.settings, room, served)
    }

    /// The live node `id`, as the watch saw it.
    fn live(&self, id: &str) -> Option<NodeRecord> {
        self.inner().nodes.get(id).cloned()
    }
}

impl ControlState {
    /// Where a signalling joiner of `room` is served: `None` here, else the node
    /// the client is redirected to. The room's owner serves it, unless the room
    /// spans this node or comes to (regions differ, [`Cluster::cascades_from`], or
    /// the owner's share is taken), or a host past its share sends the joiner on
    /// (see the module's doc).
    pub async fn signal_route(&self, room: &str) -> Result<Option<NodeRecord>, Status> {
        let owner = self
            .room_owner(room, Place::on_join(self.auto_create_rooms()), 0)
            .await?;
        let Some(cluster) = self.cluster() else {
            return Ok(owner);
        };
        let room = validate_name(room, NameKind::Room)?;
        match owner {
            // A draining node that handed the room over serves no one new.
            Some(owner) if self.drain().is_requested() => Ok(Some(owner)),
            Some(owner) if !cluster.spans(&room) => self.span_or_send(cluster, &room, owner).await,
            _ => Ok(self.past_share(cluster, &room).await),
        }
    }

    /// For a joiner of `room` (normalised) that reached this node, which does not
    /// host it: `None` when this node spans the room now and serves the joiner
    /// (the span written and the room opened as the owner holds it), else the node
    /// the joiner goes to: `owner`, or a host the owner names.
    async fn span_or_send(
        &self,
        cluster: &Cluster,
        room: &str,
        owner: NodeRecord,
    ) -> Result<Option<NodeRecord>, Status> {
        let by_region = cluster.cascades_from(&owner);
        if !by_region && cluster.settings().room_share == 0 {
            return Ok(Some(owner));
        }
        // A node that would refuse the joiner does not span the room for it.
        if self.drain().is_requested() || self.at_capacity() {
            return Ok(Some(owner));
        }
        let held = self.ask_node(room, &owner, false).await;
        if !by_region {
            let Some(held) = held.as_ref().filter(|h| h.share_taken) else {
                return Ok(Some(owner));
            };
            if let Some(host) = cluster
                .live(&held.host_with_room)
                .filter(|n| n.id != cluster.node_id())
            {
                return Ok(Some(host));
            }
        }
        cluster.span(room).await?;
        if let Some(held) = held.and_then(|h| h.room) {
            self.open_spanned(room, &owner, held);
        }
        Ok(None)
    }

    /// Whether this node holds as many peers as its shards take.
    fn at_capacity(&self) -> bool {
        let capacity = self
            .max_peers_per_shard()
            .saturating_mul(self.shards().len());
        self.rooms().participant_count() >= capacity
    }

    /// The participants of `room` (normalised) this node serves itself: what its
    /// share counts (0 when the room is not open here).
    fn served_here(&self, room: &str) -> u32 {
        let served = self.rooms().get(room).map_or(0, |r| r.own_count());
        u32::try_from(served).unwrap_or(u32::MAX)
    }

    /// Whether `served` participants of a room take this node's share
    /// (`--room-share`; never without one).
    fn takes_share(cluster: &Cluster, served: u32) -> bool {
        let share = cluster.settings().room_share;
        share > 0 && served >= share
    }

    /// What the other hosts of `room` (normalised) that do not drain serve now,
    /// by node id, each asked (all at once, [`ASK_TIMEOUT`]); one that does not
    /// answer is left out.
    async fn ask_hosts(&self, cluster: &Cluster, room: &str) -> HashMap<String, u32> {
        let hosts: Vec<NodeRecord> = cluster
            .hosts(room)
            .into_iter()
            .filter(|h| !h.draining)
            .collect();
        let asked = hosts.iter().map(|h| self.ask_node(room, h, true));
        let answers = futures_util::future::join_all(asked).await;
        hosts
            .iter()
            .zip(answers)
            .filter_map(|(h, a)| Some((h.id.clone(), a?.served)))
            .collect()
    }

    /// This node's answer to GetRoomShare for `room` (normalised, open here): the
    /// participants it serves, whether its share is taken, and then (unless
    /// `count_only`) a host with room to spare, the other hosts asked now.
    pub async fn room_share(
        &self,
        cluster: &Cluster,
        room: &str,
        count_only: bool,
    ) -> (u32, bool, Option<NodeRecord>) {
        let served = self.served_here(room);
        if !Self::takes_share(cluster, served) {
            return (served, false, None);
        }
        if count_only {
            return (served, true, None);
        }
        let by_hosts = self.ask_hosts(cluster, room).await;
        (served, true, cluster.host_with_room(room, &by_hosts))
    }

    /// When this node hosts `room` (normalised) and serves its share of it: the
    /// node a further joiner goes to; `None` to serve it here. The other hosts
    /// are asked what they serve now.
    async fn past_share(&self, cluster: &Cluster, room: &str) -> Option<NodeRecord> {
        if !Self::takes_share(cluster, self.served_here(room)) {
            return None;
        }
        let served = self.ask_hosts(cluster, room).await;
        let target = cluster.share_target(room, &served);
        tracing::info!(
            event = "room_share_taken",
            room,
            to = target.as_ref().map_or("", |n| n.id.as_str()),
            "this node serves its share of the room: a joiner goes to another node \
             (none: served here)"
        );
        target
    }

    /// How `node`, a host of `room` (normalised), holds it, for this node that a
    /// joiner of it reached (`count_only`: this node hosts the room too); `None`
    /// when the room is not open there or the node does not answer within
    /// [`ASK_TIMEOUT`] (logged). A node of an earlier version, without
    /// GetRoomShare, is asked GetSpannedRoom: its room, its share free.
    async fn ask_node(
        &self,
        room: &str,
        node: &NodeRecord,
        count_only: bool,
    ) -> Option<v1::RoomShare> {
        let cluster = self.cluster()?;
        let body = v1::GetSpannedRoomRequest {
            room: room.to_owned(),
            node_id: cluster.node_id().to_owned(),
            count_only,
        };
        let call = |body| {
            super::cascade::call_node(self, cluster, room, node, body, ASK_TIMEOUT, {
                |mut c, r| async move { c.get_room_share(r).await }
            })
        };
        let held = match call(body.clone()).await {
            Err(e) if e.code() == tonic::Code::Unimplemented => {
                super::cascade::call_node(self, cluster, room, node, body, ASK_TIMEOUT, {
                    |mut c, r| async move { c.get_spanned_room(r).await }
                })
                .await
                .map(|r| v1::RoomShare {
                    room: Some(r),
                    ..v1::RoomShare::default()
                })
            }
            other => other,
        };
        match held {
            Ok(held) => Some(held),
            Err(e) => {
                if e.code() != tonic::Code::NotFound {
                    tracing::warn!(
                        event = "spanned_room_unknown",
                        room,
                        node = node.id.as_str(),
                        error = e.message(),
                        "could not ask a node hosting the room how it holds it"
                    );
                }
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::control::cluster::RoomRecord;

    fn node(id: &str, peers: u32) -> NodeRecord {
        NodeRecord {
            id: id.to_owned(),
            grpc_url: format!("http://{id}:1"),
            http_url: format!("http://{id}:2"),
            region: String::new(),
            shards: 1,
            peers,
            max_peers: 100,
            draining: false,
            room_share: 2,
            lease: 1,
            fingerprint_sha256: String::new(),
        }
    }

    fn settings(me: &str) -> ClusterSettings {
        ClusterSettings {
            endpoints: Vec::new(),
            prefix: "/t".to_owned(),
            node_id: me.to_owned(),
            region: String::new(),
            lease_ttl: Duration::from_secs(10),
            room_share: 2,
            grpc_url: String::new(),
            http_url: String::new(),
            max_message_bytes: 1 << 20,
            etcd_tls: None,
            etcd_credentials: None,
            cluster_ca: None,
        }
    }

    /// A view of nodes `a`..`d` (loads 10, 30, 20, 40 peers) and room `big` owned
    /// by `a`.
    fn view() -> Inner {
        let mut inner = Inner::default();
        for (id, peers) in [("a", 10), ("b", 30), ("c", 20), ("d", 40)] {
            inner.nodes.insert(id.to_owned(), node(id, peers));
        }
        own(&mut inner, "big", "a");
        inner
    }

    fn own(inner: &mut Inner, room: &str, owner: &str) {
        inner.owners.insert(
            room.to_owned(),
            RoomRecord {
                owner: owner.to_owned(),
                lease: 1,
            },
        );
    }

    fn span(inner: &mut Inner, room: &str, node: &str) {
        inner
            .spans
            .entry(room.to_owned())
            .or_default()
            .insert(node.to_owned());
    }

    fn target(inner: &Inner, me: &str, served: &[(&str, u32)]) -> Option<String> {
        let served = served.iter().map(|(n, c)| ((*n).to_owned(), *c)).collect();
        share_target(inner, &settings(me), "big", &served, &HashMap::new()).map(|n| n.id)
    }

    #[test]
    fn a_host_past_its_share_fills_other_hosts_then_the_least_loaded_new_node() {
        let mut inner = view();
        assert_eq!(target(&inner, "a", &[]).as_deref(), Some("c"));
        span(&mut inner, "big", "c");
        // c did not answer: a new node.
        assert_eq!(target(&inner, "a", &[]).as_deref(), Some("b"));
        // c serves one of two: it takes the next joiner.
        assert_eq!(target(&inner, "a", &[("c", 1)]).as_deref(), Some("c"));
        assert_eq!(target(&inner, "a", &[("c", 2)]).as_deref(), Some("b"));
        // A spanning node past its share sends joiners on alike.
        assert_eq!(target(&inner, "c", &[("a", 1)]).as_deref(), Some("a"));
        assert_eq!(target(&inner, "c", &[("a", 2)]).as_deref(), Some("b"));
        // A full or draining node, or one without a share, takes none.
        inner.nodes.get_mut("b").expect("b").peers = 100;
        inner.nodes.get_mut("d").expect("d").draining = true;
        assert_eq!(target(&inner, "a", &[("c", 2)]), None, "served here");
        inner.nodes.get_mut("b").expect("b").peers = 0;
        inner.nodes.get_mut("b").expect("b").room_share = 0;
        assert_eq!(target(&inner, "a", &[("c", 2)]), None, "served here");
        // A host with room to spare that takes no peers gets none either.
        inner.nodes.get_mut("c").expect("c").peers = 100;
        assert_eq!(target(&inner, "a", &[("c", 0)]), None, "c is full");
        inner.nodes.get_mut("c").expect("c").peers = 0;
        assert_eq!(target(&inner, "a", &[("c", 0)]).as_deref(), Some("c"));
        inner.nodes.get_mut("c").expect("c").draining = true;
        assert_eq!(target(&inner, "a", &[("c", 0)]), None, "c drains");
    }

    #[test]
    fn a_node_hosting_another_room_with_a_host_is_sent_joiners_alike() {
        let mut inner = view();
        // c and a host `other` together: `big`'s link between them runs on a path
        // of its own, so c is picked as if it did not.
        own(&mut inner, "other", "c");
        span(&mut inner, "other", "a");
        assert_eq!(target(&inner, "a", &[]).as_deref(), Some("c"));
        span(&mut inner, "big", "c");
        assert_eq!(target(&inner, "a", &[("c", 1)]).as_deref(), Some("c"));
    }
}
