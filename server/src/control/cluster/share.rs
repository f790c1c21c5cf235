//! Rooms larger than a node's share (`--room-share N`): a node serves up to N of a
//! room's participants, and the room's further signalling joiners go to other
//! nodes, which span the room ([`super::cascade`]). Links to other nodes are not
//! participants here.
//!
//! - **A host past its share** (the owner, or a node spanning the room, that serves
//!   N of its participants) sends a joiner to the least-loaded live node that does
//!   not host the room and could start spanning it; failing that, to the other
//!   host that lists the fewest participants over its link, when fewer than N;
//!   failing that, it serves the joiner itself. The share spreads a room; its
//!   `max_participants` bounds it.
//! - **A node that does not host the room** asks its owner
//!   (`NodeService.GetSpannedRoom`): when the owner's share is taken, the node
//!   spans the room and serves the joiner; otherwise the joiner goes to the owner.
//!
//! So a host past its share sends joiners only to nodes that take them or host the
//! room already, and a node that does not host the room sends them only to an owner
//! with room to spare: when the nodes' views agree, a joiner is redirected at most
//! twice. WHIP and WHEP sessions still go to the owner.

use std::collections::{BTreeSet, HashMap};

use tonic::Status;

use super::{Cluster, ClusterSettings, Inner, NodeRecord, Place, least_loaded};
use crate::control::grpc::ControlState;
use crate::control::rooms::{NameKind, validate_name};

impl Inner {
    /// The nodes hosting `room`, as the watch saw them: its owner and the nodes
    /// spanning it.
    fn hosts_of(&self, room: &str) -> BTreeSet<&str> {
        let owner = self.owners.get(room).map(|o| o.owner.as_str());
        let spanning = self.spans.get(room).into_iter().flatten();
        owner
            .into_iter()
            .chain(spanning.map(String::as_str))
            .collect()
    }

    /// Whether another node, `node`, could start spanning `room`, as this view
    /// shows it: [`Cluster::may_span`] seen from that node.
    fn may_span_on(&self, node: &str, room: &str) -> bool {
        let others = |r: &str| {
            let mut hosts = self.hosts_of(r);
            hosts.remove(node);
            hosts
        };
        let wanted = others(room);
        let owned = self
            .owners
            .iter()
            .filter(|(_, o)| o.owner == node)
            .map(|(r, _)| r);
        let spanned = self
            .spans
            .iter()
            .filter(|(_, s)| s.contains(node))
            .map(|(r, _)| r);
        owned
            .chain(spanned)
            .filter(|r| r.as_str() != room)
            .all(|r| others(r).is_disjoint(&wanted))
    }
}

/// Where a joiner of `room` goes from this node, a host of it past its share (see
/// the module's doc); `None`: it is served here. `listed`: the participants each
/// other host lists over its link of the room, by node id; `rooms`: the rooms
/// each node owns.
fn share_target(
    inner: &Inner,
    settings: &ClusterSettings,
    room: &str,
    listed: &HashMap<String, usize>,
    rooms: &HashMap<String, usize>,
) -> Option<NodeRecord> {
    let me = settings.node_id.as_str();
    let hosts = inner.hosts_of(room);
    let fresh = inner.nodes.values().filter(|n| {
        n.id != me
            && !hosts.contains(n.id.as_str())
            && n.peers < n.max_peers
            && inner.may_span_on(&n.id, room)
    });
    let region = Some(settings.region.as_str()).filter(|r| !r.is_empty());
    if let Some(node) = least_loaded(fresh, rooms, region) {
        return Some(node.clone());
    }
    let share = usize::try_from(settings.room_share).unwrap_or(usize::MAX);
    hosts
        .iter()
        .filter(|id| **id != me)
        .filter_map(|id| inner.nodes.get(*id))
        .filter(|n| !n.draining)
        .map(|n| (listed.get(&n.id).copied().unwrap_or(0), n))
        .filter(|(count, _)| *count < share)
        .min_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.id.cmp(&b.1.id)))
        .map(|(_, n)| n.clone())
}

impl Cluster {
    /// See [`share_target`].
    fn share_target(&self, room: &str, listed: &HashMap<String, usize>) -> Option<NodeRecord> {
        let rooms = self.rooms_by_node();
        share_target(&self.inner(), &self.settings, room, listed, &rooms)
    }
}

impl ControlState {
    /// Where a signalling joiner of `room` is served: `None` here, else the node
    /// the client is redirected to. The room's owner serves it, unless the room
    /// spans this node or comes to (regions differ, [`Cluster::cascades_from`], or
    /// the owner's share is taken), or this node is a host past its share and
    /// another node takes the joiner (see the module's doc).
    pub async fn signal_route(&self, room: &str) -> Result<Option<NodeRecord>, Status> {
        let owner = self
            .room_owner(room, Place::on_join(self.auto_create_rooms()), 0)
            .await?;
        let Some(cluster) = self.cluster() else {
            return Ok(owner);
        };
        let room = validate_name(room, NameKind::Room)?;
        match owner {
            Some(owner) if !cluster.spans(&room) => {
                let here = self.cascade_here(&room, &owner).await?;
                Ok((!here).then_some(owner))
            }
            _ => Ok(self.past_share(cluster, &room)),
        }
    }

    /// Whether this node, the owner of `room` (normalised), serves its share of
    /// the room's participants (`--room-share`; false without one).
    pub fn share_taken(&self, cluster: &Cluster, room: &str) -> bool {
        let share = usize::try_from(cluster.settings().room_share).unwrap_or(usize::MAX);
        share > 0 && self.rooms().get(room).is_ok_and(|r| r.own_count() >= share)
    }

    /// When this node hosts `room` (normalised) and serves its share of it: the
    /// node a further joiner goes to; `None` to serve it here.
    fn past_share(&self, cluster: &Cluster, room: &str) -> Option<NodeRecord> {
        if !self.share_taken(cluster, room) {
            return None;
        }
        let listed: HashMap<String, usize> = {
            let rooms = self.rooms();
            let members = self.members();
            let Ok(open) = rooms.get(room) else {
                return None;
            };
            open.links()
                .filter_map(|(node, p)| {
                    let member = members.by_peer.get(&p.peer)?;
                    Some((node.to_owned(), member.remote.len()))
                })
                .collect()
        };
        let target = cluster.share_target(room, &listed);
        tracing::info!(
            event = "room_share_taken",
            room,
            to = target.as_ref().map_or("", |n| n.id.as_str()),
            "this node serves its share of the room: a joiner goes to another node \
             (none: served here)"
        );
        target
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
            lease: 1,
            fingerprint_sha256: String::new(),
        }
    }

    fn settings(me: &str, share: u32) -> ClusterSettings {
        ClusterSettings {
            endpoints: Vec::new(),
            prefix: "/t".to_owned(),
            node_id: me.to_owned(),
            region: String::new(),
            lease_ttl: Duration::from_secs(10),
            room_share: share,
            grpc_url: String::new(),
            http_url: String::new(),
            max_message_bytes: 1 << 20,
        }
    }

    /// A view of nodes `a`..`d` (loads 10, 30, 20, 40 peers) and room `big` owned by `a`.
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

    fn target(inner: &Inner, me: &str, listed: &[(&str, usize)]) -> Option<String> {
        let listed = listed.iter().map(|(n, c)| ((*n).to_owned(), *c)).collect();
        share_target(inner, &settings(me, 2), "big", &listed, &HashMap::new()).map(|n| n.id)
    }

    #[test]
    fn a_host_past_its_share_sends_joiners_to_the_least_loaded_new_node() {
        let mut inner = view();
        assert_eq!(target(&inner, "a", &[]).as_deref(), Some("c"));
        span(&mut inner, "big", "c");
        assert_eq!(target(&inner, "a", &[]).as_deref(), Some("b"));
        // A spanning node past its share sends them on alike, never to a host.
        assert_eq!(target(&inner, "c", &[]).as_deref(), Some("b"));
        // A full or draining node takes none.
        inner.nodes.get_mut("b").expect("b").peers = 100;
        inner.nodes.get_mut("d").expect("d").draining = true;
        assert_eq!(
            target(&inner, "a", &[("c", 2)]),
            None,
            "served here: c lists its share and no other node takes joiners"
        );
        assert_eq!(target(&inner, "a", &[("c", 1)]).as_deref(), Some("c"));
    }

    #[test]
    fn a_node_linked_to_a_host_for_another_room_is_not_sent_joiners() {
        let mut inner = view();
        // c and a host `other` together: a link of `big` between them could not
        // connect (one room per node pair).
        own(&mut inner, "other", "c");
        span(&mut inner, "other", "a");
        assert!(!inner.may_span_on("c", "big"));
        assert!(inner.may_span_on("b", "big"));
        assert_eq!(target(&inner, "a", &[]).as_deref(), Some("b"));
        // d hosts a room with b only: once b spans `big`, d may not.
        own(&mut inner, "third", "d");
        span(&mut inner, "third", "b");
        assert!(inner.may_span_on("d", "big"));
        span(&mut inner, "big", "b");
        assert!(!inner.may_span_on("d", "big"));
        assert_eq!(
            target(&inner, "a", &[("b", 0)]).as_deref(),
            Some("b"),
            "no new node may span: the host listing fewest participants"
        );
    }
}
