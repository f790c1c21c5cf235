//! Rooms that span nodes (a cascade): each participant connects to one node, and
//! every pair of nodes that hosts the room is joined by one link.
//!
//! - **When.** A joiner that reaches a node in another region than the room's
//!   owner ([`Cluster::cascades_from`]), or a joiner of a room past its owner's
//!   share ([`super::share`]), is served there: the node *spans* the room.
//!   It writes `PREFIX/spans/NODE/ROOM`, bound to its lease, and opens the room
//!   itself. Every node's view follows these keys, so each knows which nodes host
//!   each room: its owner and the nodes spanning it.
//! - **Links.** Every [`TICK`] each node looks at the rooms it has open. For each
//!   other live node hosting one, the node with the lower id opens the link: it
//!   admits a hidden participant for it (identity `cascade:NODE`) and asks the other
//!   node over gRPC (`NodeService.OpenLink`, with a token it signs with the keys the
//!   nodes share) to do the same; the other side's peer is ICE-lite and DTLS server,
//!   the caller's ICE-controlling and DTLS client, each expecting the other node's
//!   certificate fingerprint. Both peers are links of the room in their shards
//!   (`PeerSpec::link`): what one node's members send crosses to the other node's
//!   members once and goes out on no other link there. Tracks cross the same
//!   links: [`super::link_tracks`].
//! - **Failing.** A link that carried messages and goes without a clean SCTP
//!   SHUTDOWN while its other node still hosts the room may have lost messages in
//!   flight, either way: the reliable channels of the room's members here are
//!   closed (`cascade_link_lost`), before the room is linked to that node again,
//!   so that no channel skips a message. A link whose association ended while its
//!   peer stayed (an ABORT, retransmissions given up, a restart) is removed
//!   (`cascade_link_ended`) and goes the same way.
//! - **Ending.** A link whose other node no longer hosts the room is closed. A node
//!   that spans a room in which only links are left (once it has been open
//!   5 s: its joiner may not be in yet), or whose key its live owner deleted,
//!   closes it there and deletes its span key. A node that loses its lease
//!   closes the rooms it spans with those it owns.
//! - **Inheritance.** A room whose owner died (its key went with the owner's
//!   lease) is claimed by a node that spans it (unless it drains), which goes on
//!   serving it as its owner; the others that span it go on spanning it for that
//!   node. A node spanning a room that another node placed on it (a join that
//!   came while the key was gone) takes it up the same way.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::PutOptions;
use shoal_components::dtls::DtlsRole;
use shoal_components::peer::{IceCredentials, IceRole, PeerId};
use shoal_components::sctp::assoc::AssocEnd;
use shoal_proto::v1;
use shoal_proto::v1::node_service_client::NodeServiceClient;
use shoal_systems::{PeerDtls, PeerSpec};
use tonic::{Request, Status};

use super::{Cluster, NodeRecord, fenced};
use crate::control::auth::Permissions;
use crate::control::grpc::ControlState;
use crate::control::participants::{Admission, Admitted, PWD_CHARS, UFRAG_CHARS};
use shoal_proto::v1::DisconnectReason;

/// How often each node looks at its cascaded rooms' links.
pub const TICK: Duration = Duration::from_millis(250);
/// How long the token of an OpenLink call is valid.
const LINK_TOKEN_TTL: Duration = Duration::from_secs(60);
/// How long an OpenLink call may take.
const OPEN_LINK_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a link stays although its other node does not seem to host the room.
const LINK_GRACE: Duration = Duration::from_secs(5);
/// The identity of a link's hidden participant is this, then the other node's id.
pub const LINK_IDENTITY: &str = "cascade:";

/// What a link's participant may do: send on data channels (what the other node's
/// members sent), unseen by the room. It negotiates nothing: its tracks, both ways,
/// are set up by [`super::link_tracks`], not by offers.
const LINK_PERMISSIONS: Permissions = Permissions {
    publish: false,
    subscribe: false,
    publish_data: true,
    hidden: true,
};

impl Cluster {
    /// Whether a joiner reaching this node for a room `owner` owns is served here,
    /// the room spanning both nodes: when both have regions and they differ.
    pub fn cascades_from(&self, owner: &NodeRecord) -> bool {
        !self.settings.region.is_empty()
            && !owner.region.is_empty()
            && owner.region != self.settings.region
            && owner.id != self.settings.node_id
    }

    pub(super) fn span_key(&self, node: &str, room: &str) -> String {
        format!("{}/spans/{node}/{room}", self.settings.prefix)
    }

    /// Spans `room` (normalised) from this node: its span key, bound to this node's
    /// lease, so that the room may be opened here. UNAVAILABLE without a lease or
    /// when etcd does not answer.
    pub async fn span(&self, room: &str) -> Result<(), Status> {
        let lease = {
            let inner = self.inner();
            if inner.serves(room) {
                return Ok(());
            }
            inner.lease.ok_or_else(fenced)?
        };
        let mut client = self.client.clone();
        let put = client.put(
            self.span_key(&self.settings.node_id, room),
            self.settings.node_id.clone(),
            Some(PutOptions::new().with_lease(lease)),
        );
        self.etcd(put).await?;
        let mut inner = self.inner();
        if inner.lease != Some(lease) {
            return Err(fenced());
        }
        inner.spanning.insert(room.to_owned(), lease);
        inner.unspan.remove(room);
        tracing::info!(
            event = "room_spanned",
            room,
            node = self.settings.node_id.as_str(),
            "the room spans this node"
        );
        Ok(())
    }

    /// Whether this node spans `room` for its owner (rather than owning it).
    pub fn spans(&self, room: &str) -> bool {
        let inner = self.inner();
        inner.spanning.contains_key(room) && inner.serves(room)
    }

    /// The other live nodes that host `room`: its owner and the nodes spanning it.
    pub fn hosts(&self, room: &str) -> Vec<NodeRecord> {
        let inner = self.inner();
        let me = self.settings.node_id.as_str();
        let owner = inner.owners.get(room).map(|r| r.owner.as_str());
        let spanning = inner
            .spans
            .get(room)
            .into_iter()
            .flatten()
            .map(String::as_str);
        let mut ids: Vec<&str> = owner.into_iter().chain(spanning).collect();
        ids.sort_unstable();
        ids.dedup();
        ids.into_iter()
            .filter(|id| *id != me)
            .filter_map(|id| inner.nodes.get(id).cloned())
            .collect()
    }

    /// Whether `room`, which this node spans, lost its key with its owner: etcd
    /// deleted the key in the revision that deleted the owner's registration (its
    /// lease expired or was revoked). A key its live owner deleted (the room closed
    /// there, or DeleteRoom) is not.
    fn owner_died(&self, room: &str) -> bool {
        let inner = self.inner();
        !inner.owners.contains_key(room) && inner.departed.contains_key(room)
    }

    /// Claims `room`, which this node spans and whose owner died, as its owner (a
    /// placement, bound to this node's lease like any): whether this node owns it
    /// now. Another spanning node may have claimed it first; this one then goes on
    /// spanning it for that node.
    async fn inherit(&self, room: &str) -> Result<bool, Status> {
        let inherited = matches!(self.claim(room, None).await?, super::Route::Local);
        // Else the view forgets it when the new owner's key comes.
        if inherited {
            self.inner().departed.remove(room);
        }
        Ok(inherited)
    }

    /// `room`'s key as the view has it, when it was made anew naming this node,
    /// which only spans the room, after it went with the owner's lease (a join that
    /// reached another host placed the room here). A key a draining owner hands
    /// over is not: the heir takes that up when HandOverRoom comes.
    fn placed_here(&self, room: &str) -> Option<super::RoomRecord> {
        let inner = self.inner();
        inner
            .owners
            .get(room)
            .filter(|r| r.owner == self.settings.node_id)
            .filter(|_| inner.placed_anew.contains(room) && !inner.owned.contains_key(room))
            .cloned()
    }

    /// Whether `room`'s owner is a live node.
    fn owner_live(&self, room: &str) -> bool {
        let inner = self.inner();
        inner
            .owners
            .get(room)
            .is_some_and(|r| inner.nodes.contains_key(&r.owner))
    }

    /// Deletes the span keys of rooms this node no longer spans (best effort: the
    /// lease takes them with it otherwise).
    async fn delete_unspanned(&self) {
        let rooms: Vec<String> = self.inner().unspan.iter().cloned().collect();
        for room in rooms {
            let mut client = self.client.clone();
            let key = self.span_key(&self.settings.node_id, &room);
            if self.etcd(client.delete(key, None)).await.is_ok() {
                let mut inner = self.inner();
                if !inner.spanning.contains_key(&room) {
                    inner.unspan.remove(&room);
                }
            }
        }
    }
}

/// The links of this node's cascaded rooms, by room and other node.
#[derive(Debug, Default)]
pub struct Links {
    /// The links open now, by room and other node.
    pub(super) open: HashMap<(String, String), Link>,
    /// Links that went while they may have had messages in flight, to be reported
    /// once it is clear whether their other node still hosts the room.
    lost: Vec<LostLink>,
}

/// One link of a room to another node.
#[derive(Debug)]
pub struct Link {
    /// Its peer here.
    pub(super) peer: PeerId,
    /// When it was opened or accepted.
    since: Instant,
    /// Its peer is on its shard: tracks may be published on it.
    pub(super) placed: bool,
    /// Its association came up: it carries messages.
    pub(super) up: bool,
    /// Its association ended with a completed SHUTDOWN (RFC 9260 §9.2): whatever
    /// either side had queued was delivered, so its end lost nothing.
    shut_down: bool,
    /// Its association ended, however: it carries no message any more, though its
    /// peer (ICE, DTLS) may stay.
    ended: bool,
    /// This node's tracks it carries, and how they go (see [`super::link_tracks`]).
    pub(super) sent: super::link_tracks::Sent,
    /// The parts so far of lists the other node sends in parts.
    pub(super) gathered: Option<super::link_tracks::Gathered>,
}

impl Link {
    /// Whether messages in flight on it may be lost now that it went: it carried
    /// some, and its association did not shut down cleanly.
    fn may_have_lost(&self) -> bool {
        self.up && !self.shut_down
    }
}

/// A link whose association ended while its peer stayed.
#[derive(Debug, PartialEq, Eq)]
struct Ended {
    room: String,
    node: String,
    peer: PeerId,
    /// With a completed SHUTDOWN.
    clean: bool,
}

/// Which end of a link this node is.
#[derive(Clone, Copy, Debug)]
enum Side {
    /// It called OpenLink.
    Opened,
    /// It answered OpenLink.
    Accepted,
}

impl Links {
    /// Notes `room`'s link to `node`, whose peer here is `peer`, as up from now
    /// (replacing one before), and logs it; `placed`: its peer is on its shard.
    fn add(&mut self, room: &str, node: &str, peer: PeerId, side: Side, placed: bool) {
        let link = Link {
            peer,
            since: Instant::now(),
            placed,
            up: false,
            shut_down: false,
            ended: false,
            sent: super::link_tracks::Sent::default(),
            gathered: None,
        };
        self.open.insert((room.to_owned(), node.to_owned()), link);
        match side {
            Side::Opened => tracing::info!(
                event = "cascade_link_opened",
                room,
                node,
                "opened the room's link to the node"
            ),
            Side::Accepted => tracing::info!(
                event = "cascade_link_accepted",
                room,
                node,
                "accepted the room's link from the node"
            ),
        }
    }

    /// The peers here of `room`'s links.
    pub fn peers_in(&self, room: &str) -> Vec<PeerId> {
        self.open
            .iter()
            .filter(|((r, _), _)| r == room)
            .map(|(_, link)| link.peer)
            .collect()
    }

    /// Notes that the association of the link whose peer here is `peer` came up;
    /// the link's room and other node. Not for a link whose association ended (a
    /// restart's new association comes up at once): that link goes.
    pub fn mark_up(&mut self, peer: PeerId) -> Option<(String, String)> {
        let ((room, node), link) = self
            .open
            .iter_mut()
            .find(|(_, l)| l.peer == peer && !l.ended)?;
        link.up = true;
        Some((room.clone(), node.clone()))
    }

    /// Notes that `link`, `room`'s to `node`, went: lost, if it carried messages and
    /// its association did not shut down cleanly.
    fn note_gone(&mut self, room: &str, node: &str, link: &Link) {
        if link.may_have_lost() {
            self.lost.push(LostLink {
                room: room.to_owned(),
                node: node.to_owned(),
                at: Instant::now(),
            });
        }
    }

    /// Takes `room`'s link to `node` out, open or lost: whether it may have lost
    /// messages (it carried some and did not shut down cleanly).
    fn take_pair(&mut self, room: &str, node: &str) -> bool {
        let open = self.open.remove(&(room.to_owned(), node.to_owned()));
        let was_open_and_lost = open.is_some_and(|l| l.may_have_lost());
        let before = self.lost.len();
        self.lost.retain(|l| l.room != room || l.node != node);
        was_open_and_lost || self.lost.len() < before
    }

    /// Notes that the association of the link whose peer here is `peer` ended, and
    /// why.
    pub fn mark_ended(&mut self, peer: PeerId, end: AssocEnd) {
        if let Some(link) = self.open.values_mut().find(|l| l.peer == peer) {
            link.shut_down = end == AssocEnd::Shutdown;
            link.ended = true;
        }
    }

    /// Takes out the links whose peer is `gone`, and those whose association ended
    /// while their peer stayed, noting each as gone (lost when it may have lost
    /// messages): the latter, whose peers are to be removed.
    fn take_gone(&mut self, gone: &[PeerId]) -> Vec<Ended> {
        let went: Vec<((String, String), Link)> = self
            .open
            .extract_if(|_, l| gone.contains(&l.peer) || l.ended)
            .collect();
        let mut ended = Vec::new();
        for ((room, node), link) in went {
            self.note_gone(&room, &node, &link);
            if !gone.contains(&link.peer) {
                ended.push(Ended {
                    room,
                    node,
                    peer: link.peer,
                    clean: link.shut_down,
                });
            }
        }
        ended
    }

    /// Whether `room`'s link to `node` carries messages.
    pub fn is_up(&self, room: &str, node: &str) -> bool {
        self.open
            .get(&(room.to_owned(), node.to_owned()))
            .is_some_and(|l| l.up && !l.ended)
    }
}

/// Keeps this node's cascaded rooms linked until the control plane stops.
pub async fn run(state: Arc<ControlState>, cluster: Arc<Cluster>) {
    loop {
        tokio::time::sleep(TICK).await;
        cluster.delete_unspanned().await;
        reconcile(&state, &cluster).await;
    }
}

/// How long after a link carrying messages went (its association did not shut down
/// cleanly) this node waits to see whether the other node still hosts the room. A
/// node that closes the room closes its links at once, but its span key goes on
/// its next tick and reaches this node's view a moment later.
const LOST_LINK_SETTLE: Duration = LINK_GRACE;

/// Taken while a lost link is taken off the list and its room's channels closed, so
/// that a relink of the pair waits for a close already under way
/// ([`report_lost_links`]) rather than finding nothing on the list and placing the
/// new link's peer ahead of it.
static LOST_LINK_TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A link that carried messages and went without a clean SHUTDOWN: messages in
/// flight on it, either way, may be lost.
#[derive(Debug)]
struct LostLink {
    room: String,
    node: String,
    at: Instant,
}

/// Links lost a while ago ([`LOST_LINK_SETTLE`]) to nodes that still host their
/// room: the room's members here may have missed messages from the other node's,
/// so their reliable channels are closed, which is the error a reliable channel
/// owes its application for a message it will never deliver
/// ([`ControlState::close_reliable_channels`]). A node that no longer hosts the
/// room closed it, and its members left with it.
async fn report_lost_links(state: &Arc<ControlState>, cluster: &Cluster) {
    // Every tick: nothing to wait a turn for when no link was lost.
    if state.links().lost.is_empty() {
        return;
    }
    loop {
        // One at a time, each taken off the list only under the turn: a relink of
        // its pair waits until its channels are closed.
        let _turn = LOST_LINK_TURN.lock().await;
        // The links' lock is let go before the rooms' is taken (by the closing).
        let due = {
            let mut links = state.links();
            let at = links
                .lost
                .iter()
                .position(|l| l.at.elapsed() >= LOST_LINK_SETTLE);
            at.map(|i| links.lost.remove(i))
        };
        let Some(l) = due else {
            return;
        };
        if cluster.hosts(&l.room).iter().any(|h| h.id == l.node) {
            report_lost(state, &l.room, &l.node).await;
        }
    }
}

/// One look at every open room: links opened and closed as the hosts changed, and
/// spanned rooms that nobody needs here any more closed.
async fn reconcile(state: &Arc<ControlState>, cluster: &Cluster) {
    // Links whose participant left (its connection failed, or it was replaced). The
    // members' lock is never taken under the links' (see `link_tracks`).
    let peers: Vec<PeerId> = state.links().open.values().map(|l| l.peer).collect();
    let gone: Vec<PeerId> = peers
        .into_iter()
        .filter(|p| state.member_identity(*p).is_none())
        .collect();
    // And links whose association ended while their peer stayed (an ABORT, or
    // retransmissions given up, with ICE and DTLS still up): the room relays
    // nothing over them any more, so they go, and the pair is linked anew.
    let ended = state.links().take_gone(&gone);
    for Ended {
        room,
        node,
        peer,
        clean,
    } in ended
    {
        tracing::info!(
            event = "cascade_link_ended",
            room = room.as_str(),
            node = node.as_str(),
            clean,
            "the link's association ended: the link goes, to be opened again"
        );
        if clean {
            // What the link's receive buffer still holds reaches the room first.
            state.left(peer, DisconnectReason::ConnectionLost).await;
        } else {
            state.leave(peer, DisconnectReason::ConnectionLost).await;
        }
    }
    report_lost_links(state, cluster).await;
    let now = state.clock().now();
    let open: Vec<(String, Vec<PeerId>, bool)> = {
        let directory = state.rooms();
        directory
            .names()
            .into_iter()
            .filter_map(|name| {
                let room = directory.get(&name).ok()?;
                let peers = room.participants().map(|p| p.peer).collect();
                let fresh = now.saturating_since(room.created_at) < LINK_GRACE;
                Some((name, peers, fresh))
            })
            .collect()
    };
    for (room, peers, fresh) in open {
        let hosts = cluster.hosts(&room);
        let linked: Vec<(String, PeerId, Instant)> = state
            .links()
            .open
            .iter()
            .filter(|((r, _), _)| *r == room)
            .map(|((_, node), l)| (node.clone(), l.peer, l.since))
            .collect();
        let spanned = cluster.spans(&room);
        let others = peers
            .iter()
            .filter(|p| !linked.iter().any(|(_, l, _)| l == *p))
            .count();
        // A room spanned a moment ago may not have its joiner yet.
        if spanned && others == 0 && !fresh {
            close_spanned(state, cluster, &room).await;
            continue;
        }
        // A join that reached another host while the owner's key was gone placed
        // the room here: this node owns it from now on.
        if spanned
            && !state.drain().is_requested()
            && let Some(record) = cluster.placed_here(&room)
            && matches!(
                cluster.route_to(&room, &record).await,
                Ok(super::Route::Local)
            )
        {
            tracing::info!(
                event = "room_inherited",
                room = room.as_str(),
                node = cluster.node_id(),
                "the room was placed on this node, which spans it: it owns it now"
            );
        }
        if spanned && !cluster.owner_live(&room) {
            // Deleted by its owner, or its owner unknown here; and a draining
            // node, which admits no one, takes on no room.
            if !cluster.owner_died(&room) || state.drain().is_requested() {
                close_spanned(state, cluster, &room).await;
                continue;
            }
            match cluster.inherit(&room).await {
                Ok(true) => tracing::info!(
                    event = "room_inherited",
                    room = room.as_str(),
                    node = cluster.node_id(),
                    "the room's owner died: this node, which spans it, owns it now"
                ),
                // Another node that spans it claimed it: the view follows.
                Ok(false) => continue,
                Err(e) => {
                    tracing::warn!(
                        event = "room_not_inherited",
                        room = room.as_str(),
                        error = e.message(),
                        "the room's owner died and this node could not claim the room"
                    );
                    close_spanned(state, cluster, &room).await;
                    continue;
                }
            }
        }
        for (node, peer, since) in &linked {
            // A link the other node opened a moment ago may come before its span
            // key reaches this node's view.
            if !hosts.iter().any(|h| &h.id == node) && since.elapsed() >= LINK_GRACE {
                // Only the link seen above: an OpenLink may have replaced it since.
                {
                    let key = (room.clone(), node.clone());
                    let mut links = state.links();
                    if links.open.get(&key).is_some_and(|l| l.peer == *peer) {
                        links.open.remove(&key);
                    }
                }
                state.leave(*peer, DisconnectReason::RoomDeleted).await;
            }
        }
        for node in &hosts {
            if linked.iter().any(|(n, _, _)| *n == node.id) || cluster.node_id() >= node.id.as_str()
            {
                continue;
            }
            if let Err(e) = dial(state, cluster, &room, node).await {
                tracing::warn!(
                    event = "cascade_link_failed",
                    room = room.as_str(),
                    node = node.id.as_str(),
                    error = e.message(),
                    "could not open the room's link to the node; trying again"
                );
            }
        }
        for node in &hosts {
            super::link_tracks::send(state, cluster, &room, node).await;
        }
    }
}

/// Before this node's peer of `room`'s new link to `node` is placed (the other node
/// having agreed to the link: it hosts the room): a link before it that may have
/// lost messages is reported now, not after [`LOST_LINK_SETTLE`], so that the
/// members' channels are closed before the new link carries a message to them. The
/// close is on each shard's queue before the new link's peer is placed, and so
/// before anything the link forwards to another shard.
async fn relink(state: &Arc<ControlState>, room: &str, node: &str) {
    let (state, room, node) = (state.clone(), room.to_owned(), node.to_owned());
    // A task of its own: a caller dropped meanwhile (an OpenLink whose caller gave
    // up) does not leave a link taken off the list with its channels still open.
    let close = tokio::spawn(async move {
        let _turn = LOST_LINK_TURN.lock().await;
        let lost = state.links().take_pair(&room, &node);
        if lost {
            report_lost(&state, &room, &node).await;
        }
    });
    // A task that panicked closed nothing: the link is placed all the same, as
    // it would be with nothing to report.
    let _ = close.await;
}

/// Closes the reliable channels of `room`'s members here, and says why.
async fn report_lost(state: &Arc<ControlState>, room: &str, node: &str) {
    match state.close_reliable_channels(room).await {
        Ok(Some((shards, channels))) if channels > 0 => tracing::warn!(
            event = "cascade_link_lost",
            room,
            node,
            shards,
            channels,
            "the room's link to the node failed with messages maybe in flight: \
             the reliable data channels of the room's members here are closed"
        ),
        // No reliable channel to close: no member here, or none with one; or the
        // room closed here meanwhile, its members with it.
        Ok(_) => {}
        Err(e) => tracing::warn!(
            event = "close_channels_failed",
            room,
            error = e.message(),
            "could not close the room's reliable data channels"
        ),
    }
}

/// Closes a room this node spans: its participants (links and all) leave, and its
/// span key goes.
async fn close_spanned(state: &Arc<ControlState>, cluster: &Cluster, room: &str) {
    // Released first: an OpenLink that comes while the room closes is refused, so
    // no new link is taken up and torn down again (which its other node would take
    // for a lost one).
    cluster.release(room);
    state.close_rooms(&[room.to_owned()]).await;
    {
        let mut links = state.links();
        links.open.retain(|(r, _), _| r != room);
        // Its members left with it: a link of it lost a moment ago lost nothing
        // for members who join it later.
        links.lost.retain(|l| l.room != room);
    }
    tracing::info!(
        event = "room_unspanned",
        room,
        node = cluster.node_id(),
        "the room no longer spans this node"
    );
}

/// Admits the hidden participant of `room`'s link to `node`.
async fn admit_link(state: &Arc<ControlState>, room: &str, node: &str) -> Result<Admitted, Status> {
    state
        .admit(Admission {
            room: room.to_owned(),
            identity: format!("{LINK_IDENTITY}{node}"),
            name: String::new(),
            metadata: String::new(),
            http_session: None,
            signal: None,
            permissions: LINK_PERMISSIONS,
            from: None,
            auto_subscribe: false,
        })
        .await
}

/// A link's peer on this node: `role` for ICE (and with it DTLS: lite is server).
fn link_spec(
    who: &Admitted,
    role: IceRole,
    credentials: IceCredentials,
    remote_candidates: Vec<SocketAddr>,
    remote_fingerprint: [u8; 32],
) -> PeerSpec {
    PeerSpec {
        id: who.peer,
        role,
        credentials,
        remote_candidates,
        dtls: Some(PeerDtls {
            role: match role {
                IceRole::Lite => DtlsRole::Server,
                IceRole::Controlling => DtlsRole::Client,
            },
            remote_fingerprint,
            max_message_size: None,
            // Both sides are shoal: SRTP is always agreed, and tracks need it.
            srtp_required: true,
        }),
        room: Some(who.room_id),
        may_send_data: true,
        link: true,
    }
}

/// Opens `room`'s link to `node`: this node's side (controlling), and the other's
/// through its OpenLink.
async fn dial(
    state: &Arc<ControlState>,
    cluster: &Cluster,
    room: &str,
    node: &NodeRecord,
) -> Result<(), Status> {
    let who = admit_link(state, room, &node.id).await?;
    let result = dial_admitted(state, cluster, room, node, &who).await;
    let key = (room.to_owned(), node.id.clone());
    {
        let mut links = state.links();
        match (&result, links.open.get_mut(&key)) {
            (Ok(()), Some(link)) => link.placed = true,
            (Err(_), Some(link)) if link.peer == who.peer => {
                links.open.remove(&key);
            }
            _ => {}
        }
    }
    if result.is_err() {
        state
            .leave(who.peer, DisconnectReason::ConnectionLost)
            .await;
    }
    result
}

async fn dial_admitted(
    state: &Arc<ControlState>,
    cluster: &Cluster,
    room: &str,
    node: &NodeRecord,
    who: &Admitted,
) -> Result<(), Status> {
    let ufrag = state.random_ice_chars(UFRAG_CHARS)?;
    let pwd = state.random_ice_chars(PWD_CHARS)?;
    let body = v1::OpenLinkRequest {
        room: room.to_owned(),
        node_id: cluster.node_id().to_owned(),
        ice_ufrag: ufrag.clone(),
        ice_pwd: pwd.clone(),
        fingerprint_sha256: state.fingerprint_sha256().to_vec(),
    };
    let answer = call_node(
        state,
        cluster,
        room,
        node,
        body,
        OPEN_LINK_TIMEOUT,
        |mut c, r| async move { c.open_link(r).await },
    )
    .await?;
    let fingerprint: [u8; 32] = answer
        .fingerprint_sha256
        .as_slice()
        .try_into()
        .map_err(|_| Status::internal(format!("node {} sent a bad fingerprint", node.id)))?;
    if !node.presents(&fingerprint) {
        return Err(Status::permission_denied(format!(
            "node {} answered with a fingerprint other than the one it registered",
            node.id
        )));
    }
    let candidates: Vec<SocketAddr> = answer
        .candidates
        .iter()
        .filter_map(|c| c.parse().ok())
        .collect();
    if candidates.is_empty() {
        return Err(Status::internal(format!(
            "node {} named no address for the link",
            node.id
        )));
    }
    let credentials = IceCredentials {
        local_ufrag: ufrag,
        local_pwd: pwd,
        remote_ufrag: answer.ice_ufrag,
        remote_pwd: answer.ice_pwd,
    };
    let spec = link_spec(
        who,
        IceRole::Controlling,
        credentials,
        candidates,
        fingerprint,
    );
    relink(state, room, &node.id).await;
    // Noted before the peer goes to its shard: its association may come up before
    // `place_peer` returns, and `cascade_link_up` looks the link up.
    state
        .links()
        .add(room, &node.id, who.peer, Side::Opened, false);
    state.place_peer(who, spec).await
}

/// Puts on `request`, a call of this node's about `room`'s link, the token it signs
/// for such calls (none when the node runs without keys: open mode).
/// One node-to-node call about `room` to `node`: `body` under this node's token for
/// the room ([`authorize`]), bounded by `timeout` (UNAVAILABLE past it).
pub(crate) async fn call_node<Req, Resp, F, Fut>(
    state: &ControlState,
    cluster: &Cluster,
    room: &str,
    node: &NodeRecord,
    body: Req,
    timeout: Duration,
    call: F,
) -> Result<Resp, Status>
where
    F: FnOnce(NodeServiceClient<tonic::transport::Channel>, Request<Req>) -> Fut,
    Fut: std::future::Future<Output = Result<tonic::Response<Resp>, Status>>,
{
    let mut request = Request::new(body);
    authorize(state, cluster, room, &mut request)?;
    request.set_timeout(timeout);
    let client = NodeServiceClient::new(cluster.channel(node)?);
    tokio::time::timeout(timeout, call(client, request))
        .await
        .map_err(|_| Status::unavailable(format!("node {} did not answer in time", node.id)))?
        .map(tonic::Response::into_inner)
}

pub(crate) fn authorize<T>(
    state: &ControlState,
    cluster: &Cluster,
    room: &str,
    request: &mut Request<T>,
) -> Result<(), Status> {
    if let Some(token) = state
        .auth()
        .node_token(cluster.node_id(), room, LINK_TOKEN_TTL)
    {
        let value = format!("Bearer {token}")
            .parse()
            .map_err(|_| Status::internal("a token that is no header value"))?;
        request.metadata_mut().insert("authorization", value);
    }
    Ok(())
}

/// The answering side of OpenLink: `request` (authorised already) from node
/// `request.node_id`, for `room` (normalised), which this node owns or spans.
pub async fn accept(
    state: &Arc<ControlState>,
    cluster: &Cluster,
    room: &str,
    request: v1::OpenLinkRequest,
) -> Result<v1::OpenLinkResponse, Status> {
    let caller = cluster.inner().nodes.get(&request.node_id).cloned();
    let Some(caller) = caller.filter(|_| request.node_id != cluster.node_id()) else {
        return Err(Status::failed_precondition(format!(
            "node {:?} is not a live node of this cluster",
            request.node_id
        )));
    };
    // Only a node that hosts the room links to it (one whose span key this node has
    // not seen yet is refused, and calls again on its next tick).
    if !cluster.hosts(room).iter().any(|h| h.id == request.node_id) {
        return Err(Status::failed_precondition(format!(
            "node {:?} does not host room {room:?}",
            request.node_id
        )));
    }
    let fingerprint: [u8; 32] = request
        .fingerprint_sha256
        .as_slice()
        .try_into()
        .map_err(|_| Status::invalid_argument("fingerprint_sha256 must be 32 bytes"))?;
    // The link's DTLS is the registered node's own, whoever signed the call.
    if !caller.presents(&fingerprint) {
        return Err(Status::permission_denied(format!(
            "the fingerprint is not the one node {:?} registered in the cluster",
            request.node_id
        )));
    }
    // The caller's ICE credentials are checked where every peer's are: the shard
    // refuses ones that break RFC 8839 §5.4 (INVALID_ARGUMENT).
    let who = admit_link(state, room, &request.node_id).await?;
    let candidates = state
        .candidates(who.shard)
        .ok_or_else(|| Status::internal(format!("shard {} has no address", who.shard)))?;
    let credentials = IceCredentials {
        local_ufrag: state.random_ice_chars(UFRAG_CHARS)?,
        local_pwd: state.random_ice_chars(PWD_CHARS)?,
        remote_ufrag: request.ice_ufrag,
        remote_pwd: request.ice_pwd,
    };
    let (ice_ufrag, ice_pwd) = (
        credentials.local_ufrag.clone(),
        credentials.local_pwd.clone(),
    );
    let spec = link_spec(&who, IceRole::Lite, credentials, Vec::new(), fingerprint);
    relink(state, room, &request.node_id).await;
    if let Err(e) = state.place_peer(&who, spec).await {
        state
            .leave(who.peer, DisconnectReason::ConnectionLost)
            .await;
        return Err(e);
    }
    // This side waits for the caller's checks, which come after this answer.
    state
        .links()
        .add(room, &request.node_id, who.peer, Side::Accepted, true);
    Ok(v1::OpenLinkResponse {
        ice_ufrag,
        ice_pwd,
        fingerprint_sha256: state.fingerprint_sha256().to_vec(),
        candidates: candidates.iter().map(ToString::to_string).collect(),
        node_id: cluster.node_id().to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_whose_association_ended_goes_lost_unless_shut_down() {
        let mut links = Links::default();
        for (room, peer) in [("aborted", 1), ("shut", 2), ("quiet", 3), ("left", 4)] {
            links.add(room, "node-1", PeerId(peer), Side::Opened, true);
            links.mark_up(PeerId(peer));
        }
        links.mark_ended(PeerId(1), AssocEnd::AbortedByPeer);
        links.mark_ended(PeerId(2), AssocEnd::Shutdown);
        links.mark_ended(PeerId(4), AssocEnd::AbortedByPeer);
        // A restart's new association coming up does not revive the link.
        assert_eq!(links.mark_up(PeerId(1)), None);
        assert!(!links.is_up("aborted", "node-1") && links.is_up("quiet", "node-1"));
        // Peer 4 left on its own: gone, not to be removed.
        let ended = links.take_gone(&[PeerId(4)]);
        let mut removed: Vec<(&str, bool)> =
            ended.iter().map(|e| (e.room.as_str(), e.clean)).collect();
        removed.sort_unstable();
        assert_eq!(removed, [("aborted", false), ("shut", true)]);
        let lost: Vec<&str> = links.lost.iter().map(|l| l.room.as_str()).collect();
        assert_eq!(lost.len(), 2);
        assert!(
            lost.contains(&"aborted") && lost.contains(&"left"),
            "{lost:?}"
        );
        // The one whose association goes on stays.
        assert_eq!(links.peers_in("quiet"), [PeerId(3)]);
        assert!(links.take_gone(&[]).is_empty());
    }
}
