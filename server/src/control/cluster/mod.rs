//! A cluster of nodes coordinated through etcd (`--etcd`): membership, one owner per
//! room, and where a request for a room goes.
//!
//! - **Membership.** The node registers `PREFIX/nodes/ID` (a [`NodeRecord`]: its
//!   URLs, region, shards and load) bound to a lease of `--cluster-lease-ttl`
//!   seconds that it keeps alive ([`membership`]). A node whose lease expires is gone
//!   for everyone: etcd deletes its keys with the lease.
//! - **Ownership.** A room's key `PREFIX/rooms/NAME` names its owner and is bound to
//!   the owner's lease. A node claims a room with one transaction: create the key if
//!   it does not exist (its create revision is 0), else read it. So two nodes never
//!   both own a room; a room whose owner died is free again once its lease expired.
//! - **Routing.** Every node watches the prefix ([`view`]) and so knows the live
//!   nodes and who owns which room. A request for a room the node does not own goes
//!   to the owner: gRPC calls are forwarded, WHIP/WHEP answer 307, signalling says
//!   `redirect`, unless the room spans or comes to span the node a signalling
//!   joiner reached ([`cascade`], [`share`]). A room nobody owns is placed on the
//!   least-loaded live node, in the joiner's region when that is known and has a
//!   node that takes rooms.
//! - **Fencing.** The node only serves rooms while its lease is surely alive: until
//!   the moment of its last acknowledged keep-alive's sending plus the lease's TTL,
//!   less [`FENCE_MARGIN`]. Past that (etcd unreachable for that long) it closes
//!   every room it owns; it could no longer know it still owns them, and another node
//!   may claim them once etcd expires the lease. Without etcd it places nothing.
//!
//! - **TLS.** etcd is reached over TLS at `https://` URLs (`--etcd-ca`, and a
//!   client certificate with `--etcd-cert`). A node with `--tls-cert` registers
//!   `https://` URLs, and the others call it verifying its certificate against
//!   `--cluster-ca` ([`Cluster::channel`]); a node serving TLS leaves nodes that
//!   do not out of its view ([`view`]), and calls none.
//!
//! Without `--etcd` none of this runs, and the node serves every room itself.

pub mod cascade;
pub mod handover;
pub mod link_tracks;
pub mod membership;
pub mod share;
pub mod view;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use etcd_client::{Compare, CompareOp, ConnectOptions, PutOptions, Txn, TxnOp, TxnOpResponse};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;
use tonic::Status;
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};

use super::tls::{ClientTlsFiles, TlsError};

/// Default of `--cluster-lease-ttl`, in seconds.
pub const DEFAULT_LEASE_TTL_SECS: u32 = 10;
/// Default of `--cluster-prefix`.
pub const DEFAULT_PREFIX: &str = "/shoal";
/// How long before its lease could expire a node stops serving its rooms: room
/// closing takes a shard round trip, and the fencing check runs every
/// [`membership::FENCE_TICK`].
pub const FENCE_MARGIN: Duration = Duration::from_secs(1);
/// How long one etcd request may take before the node counts etcd unreachable.
pub const ETCD_TIMEOUT: Duration = Duration::from_secs(2);
/// The largest `--etcd-password-file` read, in bytes.
pub const MAX_PASSWORD_FILE_BYTES: u64 = 4096;
/// How long a node waits before authenticating again after etcd refused it or did
/// not answer, at first; each failure in a row doubles it, up to
/// [`AUTH_BACKOFF_MAX`]. etcd checks a password with bcrypt, which costs it far
/// more than a request: a node with a wrong password must not ask every tick.
const AUTH_BACKOFF_MIN: Duration = Duration::from_secs(1);
/// The longest wait between authentications that failed.
const AUTH_BACKOFF_MAX: Duration = Duration::from_secs(30);
/// What etcd answers a request whose JWT token was minted before a change to its
/// users, roles or permissions (etcd's `ErrAuthOldRevision`). etcd-client replaces
/// only expired or unknown tokens by itself.
const AUTH_OLD_REVISION: &str = "revision of auth store is old";
/// What etcd answers credentials it refuses (etcd's `ErrAuthFailed`).
const AUTH_FAILED: &str = "authentication failed";
/// What etcd answers a request without a token once authentication is on (etcd's
/// `ErrUserEmpty`): it was turned on after the node found it off.
const AUTH_USER_EMPTY: &str = "user name is empty";
/// What etcd answers an authentication while authentication is off (etcd's
/// `ErrAuthNotEnabled`): the node goes on without a token.
const AUTH_NOT_ENABLED: &str = "authentication is not enabled";
/// What a request etcd did not answer in [`ETCD_TIMEOUT`] is refused with.
fn etcd_silent() -> Status {
    Status::unavailable("the cluster store (etcd) did not answer; no room can be placed now")
}

/// How many times a gRPC request may be passed from node to node: to the owner the
/// forwarding node sees (1), and once more if the room changed hands meanwhile (2).
pub const MAX_HOPS: u32 = 2;
/// The gRPC metadata key that counts how often a request was forwarded. Redirects
/// carry no count: a room is placed by a transaction naming its owner, so a
/// redirect always leads to the node etcd names.
pub const HOPS: &str = "shoal-hops";

/// What a node needs to join its cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterSettings {
    /// etcd's client URLs.
    pub endpoints: Vec<String>,
    /// The key prefix under which this cluster's nodes and rooms live, without a
    /// trailing `/`.
    pub prefix: String,
    /// This node's id, unique in the cluster.
    pub node_id: String,
    /// This node's region label; may be empty.
    pub region: String,
    /// The membership lease's time to live.
    pub lease_ttl: Duration,
    /// The participants of one room this node serves before the room's further
    /// signalling joiners go to other nodes (`--room-share`); 0: no share.
    pub room_share: u32,
    /// The base URL other nodes reach this node's gRPC at.
    pub grpc_url: String,
    /// The base URL clients are redirected to for this node's HTTP.
    pub http_url: String,
    /// The largest gRPC message a node takes (`--max-grpc-message-bytes`, alike on
    /// every node): what a call to another node may carry.
    pub max_message_bytes: usize,
    /// TLS to etcd (`https://` URLs): what the node trusts and presents.
    pub etcd_tls: Option<ClientTlsFiles>,
    /// The CA certificates other nodes' gRPC certificates must chain to, when they
    /// serve it over TLS (`--cluster-ca`).
    pub cluster_ca: Option<PathBuf>,
    /// The etcd user the node authenticates as (`--etcd-user`), if etcd asks for one.
    pub etcd_credentials: Option<EtcdCredentials>,
}

/// An etcd user and the file holding its password (`--etcd-user`,
/// `--etcd-password-file`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdCredentials {
    /// The user's name.
    pub user: String,
    /// The file of its password; read at start and at each authentication.
    pub password_file: PathBuf,
}

impl EtcdCredentials {
    /// The user and its password, read from the file: its whole first line
    /// (spaces included), without the line ending. A file past
    /// [`MAX_PASSWORD_FILE_BYTES`], or without a password, is refused.
    fn load(&self) -> Result<(String, String), ClusterError> {
        let unreadable = |why: String| ClusterError::Password {
            path: self.password_file.clone(),
            why,
        };
        let text = crate::config::read_text_at_most(&self.password_file, MAX_PASSWORD_FILE_BYTES)
            .map_err(|e| unreadable(e.to_string()))?
            .ok_or_else(|| unreadable(format!("longer than {MAX_PASSWORD_FILE_BYTES} bytes")))?;
        let password = text.lines().next().unwrap_or_default();
        if password.is_empty() {
            return Err(unreadable("the file holds no password".to_owned()));
        }
        Ok((self.user.clone(), password.to_owned()))
    }
}

/// A node as it registers itself: the value of `PREFIX/nodes/ID`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRecord {
    /// Its `--node-id`.
    pub id: String,
    /// The base URL of its gRPC listener.
    pub grpc_url: String,
    /// The base URL of its HTTP listener.
    pub http_url: String,
    /// Its region label.
    pub region: String,
    /// Its shards.
    pub shards: u32,
    /// Peers it holds now.
    pub peers: u32,
    /// Peers it holds at most.
    pub max_peers: u32,
    /// Whether it drains: it takes no new rooms.
    pub draining: bool,
    /// Its `--room-share` (0: none; a node without one spans no room for a share).
    #[serde(default)]
    pub room_share: u32,
    /// Its membership lease, which its rooms' keys are bound to.
    pub lease: i64,
    /// The SHA-256 fingerprint of its DTLS certificate, in lowercase hex: the one
    /// its side of a cascade link must present (empty from a node that does not
    /// say, which no node links with).
    #[serde(default)]
    pub fingerprint_sha256: String,
}

impl NodeRecord {
    /// Whether its gRPC and HTTP listeners serve TLS (its URLs are `https://`).
    pub fn serves_tls(&self) -> bool {
        self.grpc_url.starts_with("https://") && self.http_url.starts_with("https://")
    }

    /// Whether `fingerprint` is the certificate fingerprint the node registered.
    pub fn presents(&self, fingerprint: &[u8; 32]) -> bool {
        !self.fingerprint_sha256.is_empty() && self.fingerprint_sha256 == hex(fingerprint)
    }

    /// Its `/signal` WebSocket URL.
    pub fn signal_url(&self) -> String {
        let ws = if let Some(rest) = self.http_url.strip_prefix("https://") {
            format!("wss://{rest}")
        } else if let Some(rest) = self.http_url.strip_prefix("http://") {
            format!("ws://{rest}")
        } else {
            self.http_url.clone()
        };
        format!("{ws}/signal")
    }
}

/// The value of `PREFIX/rooms/NAME`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoomRecord {
    /// The owner's node id.
    pub owner: String,
    /// The owner's lease, which the key is bound to.
    pub lease: i64,
}

impl RoomRecord {
    /// The record as its key holds it.
    fn encode(&self) -> Result<Vec<u8>, Status> {
        serde_json::to_vec(self).map_err(|_| Status::internal("room record"))
    }
}

/// Where a request for a room is served.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Route {
    /// Here: this node owns the room (or, for a request about a room, nobody does:
    /// it is served here, as not found).
    Local,
    /// By this other node.
    Remote(NodeRecord),
}

/// Whether a request may place the room it names when nobody owns it, and where.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place<'a> {
    /// No: it is about a room that exists.
    No,
    /// Yes, in the joiner's region: `region` when the request named one, else the
    /// region of the node it arrived at (see [`Cluster::place`]).
    Yes {
        /// The region the request named.
        region: Option<&'a str>,
    },
}

impl Place<'_> {
    /// A join's: it places the room when rooms open on join (`open`), in the region
    /// of the node it arrived at.
    pub fn on_join(open: bool) -> Place<'static> {
        if open {
            Place::Yes { region: None }
        } else {
            Place::No
        }
    }
}

/// A node name or region label: 1 to 64 of `A-Z a-z 0-9 . _ -`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Label(pub String);

impl FromStr for Label {
    type Err = String;
    fn from_str(s: &str) -> Result<Label, String> {
        let ok = (1..=64).contains(&s.len())
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if ok {
            Ok(Label(s.to_owned()))
        } else {
            Err("expected 1 to 64 of A-Z a-z 0-9 . _ -".to_owned())
        }
    }
}

impl std::fmt::Display for Label {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// An etcd client URL: `http://HOST:PORT`, or `https://HOST:PORT` (TLS, `--etcd-ca`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdEndpoint(pub String);

impl EtcdEndpoint {
    /// Whether it is reached over TLS.
    pub fn is_https(&self) -> bool {
        self.0.starts_with("https://")
    }
}

impl FromStr for EtcdEndpoint {
    type Err = String;
    fn from_str(s: &str) -> Result<EtcdEndpoint, String> {
        const EXPECTED: &str = "expected http://HOST:PORT or https://HOST:PORT";
        let rest = s
            .strip_prefix("http://")
            .or_else(|| s.strip_prefix("https://"))
            .ok_or_else(|| EXPECTED.to_owned())?;
        let uri: axum::http::Uri = s.parse().map_err(|e| format!("{e}"))?;
        if rest.is_empty() || uri.host().is_none() || uri.port_u16().is_none() {
            return Err(EXPECTED.to_owned());
        }
        Ok(EtcdEndpoint(s.trim_end_matches('/').to_owned()))
    }
}

impl std::fmt::Display for EtcdEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// What the node knows of its cluster and of its own standing in it.
#[derive(Debug, Default)]
struct Inner {
    /// Live nodes, by id, as the watch last saw them (this one included once its
    /// registration was seen), less those this node does not reach.
    nodes: BTreeMap<String, NodeRecord>,
    /// Live nodes left out of `nodes`: they serve no TLS, and this node does.
    without_tls: BTreeSet<String>,
    /// Room owners by room name, as the watch last saw them.
    owners: HashMap<String, RoomRecord>,
    /// This node's lease, once granted; `None` before and after it was lost.
    lease: Option<i64>,
    /// Until when this node may serve the rooms it owns.
    serve_until: Option<Instant>,
    /// Whether the last etcd request succeeded.
    etcd_ok: bool,
    /// The rooms this node serves, each with the lease it owns it under: only those
    /// under the current lease count.
    owned: HashMap<String, i64>,
    /// Room keys of this node to delete from etcd (rooms closed or fenced here).
    release: HashSet<String>,
    /// This node's registration as last written.
    record: Option<NodeRecord>,
    /// Rooms placed on this node that it does not serve yet, since when.
    unserved: HashMap<String, Instant>,
    /// The nodes each room spans besides its owner, as the watch last saw them.
    spans: HashMap<String, BTreeSet<String>>,
    /// The rooms this node serves for their owners (it spans them), each with the
    /// lease its span key is bound to: only those under the current lease count.
    spanning: HashMap<String, i64>,
    /// Span keys of this node to delete from etcd (rooms it no longer spans).
    unspan: HashSet<String>,
    /// Rooms this node spans whose key went with its owner's lease, with that
    /// owner, as the watch saw it (see `view::View`); [`cascade`] inherits them.
    departed: HashMap<String, String>,
    /// Rooms among those whose key was then made anew naming this node (a join
    /// that reached another host placed it here); [`cascade`] takes them up.
    placed_anew: HashSet<String>,
    /// The revision the view has seen everything up to.
    seen: i64,
    /// Rooms this node placed that the view does not show yet: the owner it named
    /// and the revision of the placement. Placement counts them, so that a burst
    /// of placements through one node spreads as if the watch had no lag.
    placed: HashMap<String, (String, i64)>,
}

impl Inner {
    /// How many rooms each node owns, as the view shows them and with the
    /// placements this node made that it does not show yet.
    fn rooms_by_node(&self) -> HashMap<String, usize> {
        let mut counts = HashMap::new();
        let placed = self
            .placed
            .iter()
            .filter(|(room, _)| !self.owners.contains_key(*room))
            .map(|(_, (owner, _))| owner);
        for owner in self.owners.values().map(|r| &r.owner).chain(placed) {
            *counts.entry(owner.clone()).or_insert(0) += 1;
        }
        counts
    }

    /// Notes that the view shows everything up to `revision`: the placements made
    /// by then are in it (or already gone again).
    fn seen(&mut self, revision: i64) {
        self.seen = self.seen.max(revision);
        let seen = self.seen;
        self.placed.retain(|_, (_, placed)| *placed > seen);
    }

    /// Notes that this node placed `room` on `owner` in `revision`, unless the view
    /// shows that revision already.
    fn placed(&mut self, room: &str, owner: &str, revision: i64) {
        if revision > self.seen {
            self.placed
                .insert(room.to_owned(), (owner.to_owned(), revision));
        }
    }

    /// This node's lease while it is surely alive: the node may serve under it.
    fn live_lease(&self) -> Option<i64> {
        self.lease
            .filter(|_| self.serve_until.is_some_and(|t| Instant::now() < t))
    }

    /// See [`Cluster::serves`].
    fn serves(&self, room: &str) -> bool {
        let lease = self.live_lease();
        lease.is_some()
            && (self.owned.get(room).copied() == lease || self.spanning.get(room).copied() == lease)
    }

    /// Notes that this node serves `room` under `lease`, if that is still its lease
    /// and the lease is surely alive; whether it does.
    fn take(&mut self, room: &str, lease: i64) -> bool {
        if self.live_lease() != Some(lease) {
            return false;
        }
        self.owned.insert(room.to_owned(), lease);
        self.release.remove(room);
        self.unserved.remove(room);
        // A node spanning the room that comes to own it (a draining owner handed
        // it over) hosts it as its owner from now on.
        if self.spanning.remove(room).is_some() {
            self.unspan.insert(room.to_owned());
        }
        true
    }
}

/// A node's membership of its cluster, shared by the control plane's tasks.
pub struct Cluster {
    settings: ClusterSettings,
    client: etcd_client::Client,
    inner: Mutex<Inner>,
    /// gRPC channels to other nodes, by their gRPC URL.
    channels: Mutex<HashMap<String, Channel>>,
    /// How this node verifies other nodes that serve gRPC over TLS
    /// (`--cluster-ca`); `None`: it calls none of them.
    node_tls: Option<ClientTlsConfig>,
    /// Whether etcd took the credentials once: from then on the client holds a
    /// token, and gets a new one whenever etcd refuses it as expired or unknown
    /// (etcd restarted: its simple tokens live in its memory only), or as minted
    /// before a change to etcd's users and roles ([`AUTH_OLD_REVISION`]).
    authenticated: AtomicBool,
    /// Whether etcd refused the credentials at the last authentication: the node
    /// then stops keeping its lease alive (etcd renews leases without checking
    /// credentials), so that it does not stay a member that can place, release
    /// and publish nothing.
    refused: AtomicBool,
    /// One authentication at a time, and when the next may be tried after
    /// failures.
    auth: tokio::sync::Mutex<AuthRetry>,
}

/// When a node that could not authenticate tries again.
#[derive(Debug, Default)]
struct AuthRetry {
    /// Not before this; `None`: at once.
    not_before: Option<Instant>,
    /// The wait after the next failure.
    backoff: Duration,
    /// Why the last attempt failed.
    error: String,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// Why the cluster client could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The etcd client refused its settings.
    #[error("etcd: {0}")]
    Etcd(#[from] etcd_client::Error),
    /// A CA, certificate or key file of `--etcd-ca`, `--etcd-cert` or
    /// `--cluster-ca` could not be loaded.
    #[error("TLS: {0}")]
    Tls(#[from] TlsError),
    /// The `--etcd-password-file` could not be read, or holds no password.
    #[error("--etcd-password-file {}: {why}", path.display())]
    Password {
        /// The file.
        path: PathBuf,
        /// Why.
        why: String,
    },
}

impl Cluster {
    /// A cluster client for `settings`. Connects lazily: etcd need not be up yet,
    /// and a node with `--etcd-user` authenticates before its first request
    /// ([`Cluster::etcd`]).
    pub async fn new(settings: ClusterSettings) -> Result<Arc<Cluster>, ClusterError> {
        // A missing or empty password file stops the start, rather than every
        // request later. The file is read again at each authentication, so a
        // password changed in the file and then in etcd is taken without a restart.
        if let Some(c) = &settings.etcd_credentials {
            c.load()?;
        }
        let options = ConnectOptions::new()
            // An expired or unknown token is replaced, and the request sent again.
            .with_auto_token_refresh(true)
            .with_connect_timeout(ETCD_TIMEOUT)
            // Dead connections (etcd stopped, a partition) break watches and
            // keep-alive streams within a few seconds.
            .with_keep_alive(Duration::from_secs(1), ETCD_TIMEOUT)
            .with_keep_alive_while_idle(true)
            // A member cut off from its leader refuses rather than answer stale.
            .with_require_leader(true);
        let options = match &settings.etcd_tls {
            Some(files) => options.with_tls(files.load()?),
            None => options,
        };
        let node_tls = settings
            .cluster_ca
            .as_ref()
            .map(|ca| {
                ClientTlsFiles {
                    ca: ca.clone(),
                    identity: None,
                }
                .load()
            })
            .transpose()?;
        let client = etcd_client::Client::connect(&settings.endpoints, Some(options)).await?;
        Ok(Arc::new(Cluster {
            settings,
            client,
            inner: Mutex::new(Inner::default()),
            channels: Mutex::new(HashMap::new()),
            node_tls,
            authenticated: AtomicBool::new(false),
            refused: AtomicBool::new(false),
            auth: tokio::sync::Mutex::new(AuthRetry::default()),
        }))
    }

    /// The settings it runs with.
    pub fn settings(&self) -> &ClusterSettings {
        &self.settings
    }

    /// Whether this node serves TLS on its listeners (its URLs are `https://`).
    pub fn serves_tls(&self) -> bool {
        self.settings.grpc_url.starts_with("https://")
    }

    /// This node's id.
    pub fn node_id(&self) -> &str {
        &self.settings.node_id
    }

    fn inner(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn node_key(&self, id: &str) -> String {
        format!("{}/nodes/{id}", self.settings.prefix)
    }

    /// The cluster's prefix and this node's id, as the view reads keys with them.
    fn names(&self) -> (&str, &str) {
        (&self.settings.prefix, &self.settings.node_id)
    }

    fn room_key(&self, room: &str) -> String {
        format!("{}/rooms/{room}", self.settings.prefix)
    }

    /// Whether this node holds a lease it may serve under now.
    pub fn is_member(&self) -> bool {
        self.inner().live_lease().is_some()
    }

    /// Whether etcd answered the last request.
    pub fn etcd_reachable(&self) -> bool {
        self.inner().etcd_ok
    }

    /// Every live node as the watch saw them, by id.
    pub fn nodes(&self) -> Vec<NodeRecord> {
        self.inner().nodes.values().cloned().collect()
    }

    /// Rooms each live node owns, by node id.
    pub fn rooms_by_node(&self) -> HashMap<String, usize> {
        self.inner().rooms_by_node()
    }

    /// Whether this node may serve `room` now: it owns it under its current lease,
    /// and that lease is surely alive. A room opens only when this holds (under the
    /// room directory's lock, which closing a room also takes).
    pub fn serves(&self, room: &str) -> bool {
        self.inner().serves(room)
    }

    /// Where a request about the existing room `room` (normalised) goes: to its
    /// owner, or here when this node owns it or nobody does (then the room is not
    /// open here either, and the request finds it so). It never opens a room.
    pub async fn route(&self, room: &str) -> Result<Route, Status> {
        if let Some(route) = self.known_route(room)? {
            return Ok(route);
        }
        // The watch may lag a claim made a moment ago: ask etcd.
        match self.read_owner(room).await? {
            Some(owner) if owner.owner != self.settings.node_id => self.remote(room, &owner.owner),
            _ => Ok(Route::Local),
        }
    }

    /// Where a request that opens `room` (normalised) goes: [`Cluster::route`],
    /// except that a room nobody owns is placed first, by [`least_loaded`] in the
    /// joiner's region (this node when it sees no node at all). The joiner's region
    /// is `hint` when the request named one, else this node's `--region`; when
    /// neither is set, the region plays no part.
    pub async fn place(&self, room: &str, hint: Option<&str>) -> Result<Route, Status> {
        if let Some(route) = self.known_route(room)? {
            return Ok(route);
        }
        let region = hint.or(Some(self.settings.region.as_str()).filter(|r| !r.is_empty()));
        let target = {
            let rooms = self.rooms_by_node();
            least_loaded(self.inner().nodes.values(), &rooms, region).cloned()
        };
        self.claim(room, target).await
    }

    /// The route the watch's view gives, when it gives one for sure.
    fn known_route(&self, room: &str) -> Result<Option<Route>, Status> {
        let inner = self.inner();
        if inner.owned.contains_key(room) {
            return if inner.serves(room) {
                Ok(Some(Route::Local))
            } else {
                Err(fenced())
            };
        }
        Ok(match inner.owners.get(room) {
            Some(r) if r.owner != self.settings.node_id => {
                inner.nodes.get(&r.owner).cloned().map(Route::Remote)
            }
            _ => None,
        })
    }

    /// The route to `owner` of `room`: here if it names this node under its current
    /// lease (another node placed the room here, or this node closed it a moment
    /// ago, or owned it before it fenced itself and the key outlived the outage),
    /// else the owner's node.
    async fn route_to(&self, room: &str, owner: &RoomRecord) -> Result<Route, Status> {
        if owner.owner == self.settings.node_id {
            if self.inner().live_lease() != Some(owner.lease) {
                return Err(fenced());
            }
            return self.take_up(room, owner).await;
        }
        self.remote(room, &owner.owner)
    }

    /// The route to node `owner`, which this node must see live.
    fn remote(&self, room: &str, owner: &str) -> Result<Route, Status> {
        match self.inner().nodes.get(owner) {
            Some(node) => Ok(Route::Remote(node.clone())),
            None => Err(Status::unavailable(format!(
                "room {room:?} belongs to node {owner:?}, which this node does not see live; \
                 try again"
            ))),
        }
    }

    /// Claims `room` for `target` (this node when `None` or named so): one
    /// transaction creates its key bound to the target's lease unless it exists; if
    /// it does, the owner it names decides.
    async fn claim(&self, room: &str, target: Option<NodeRecord>) -> Result<Route, Status> {
        let (lease, target) = {
            let inner = self.inner();
            match target {
                Some(node) if node.id != self.settings.node_id => (node.lease, Some(node)),
                _ => (inner.live_lease().ok_or_else(fenced)?, None),
            }
        };
        let owner = target
            .as_ref()
            .map_or_else(|| self.settings.node_id.clone(), |n| n.id.clone());
        let key = self.room_key(room);
        let value = RoomRecord {
            owner: owner.clone(),
            lease,
        }
        .encode()?;
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(
                key.clone(),
                value,
                Some(PutOptions::new().with_lease(lease)),
            )])
            .or_else([TxnOp::get(key, None)]);
        let mut client = self.client.clone();
        let response = self.etcd(client.txn(txn)).await?;
        if response.succeeded() {
            if let Some(header) = response.header() {
                self.inner().placed(room, &owner, header.revision());
            }
            tracing::info!(
                event = "room_placed",
                room,
                owner = owner.as_str(),
                lease,
                "room placed"
            );
            if let Some(node) = target {
                return Ok(Route::Remote(node));
            }
            // The lease may have been lost while the transaction ran.
            return if self.inner().take(room, lease) {
                Ok(Route::Local)
            } else {
                Err(fenced())
            };
        }
        let owner = response.op_responses().into_iter().find_map(|r| match r {
            TxnOpResponse::Get(get) => get.kvs().first().and_then(|kv| decode(kv.value())),
            _ => None,
        });
        match owner {
            Some(owner) => self.route_to(room, &owner).await,
            // Deleted between the compare and the read: the caller may try again.
            None => Err(Status::unavailable(format!(
                "room {room:?} changed hands while being placed; try again"
            ))),
        }
    }

    /// Starts serving `room`, whose key names this node: rewrites the key if it still
    /// holds `owner`, which moves its modification revision so that a deletion of
    /// the key decided before (the room had closed here) no longer applies.
    async fn take_up(&self, room: &str, owner: &RoomRecord) -> Result<Route, Status> {
        let key = self.room_key(room);
        let value = owner.encode()?;
        let txn = Txn::new()
            .when([Compare::value(key.clone(), CompareOp::Equal, value.clone())])
            .and_then([TxnOp::put(
                key,
                value,
                Some(PutOptions::new().with_lease(owner.lease)),
            )]);
        let mut client = self.client.clone();
        if !self.etcd(client.txn(txn)).await?.succeeded() {
            return Err(Status::unavailable(format!(
                "room {room:?} changed hands while being opened; try again"
            )));
        }
        if self.inner().take(room, owner.lease) {
            Ok(Route::Local)
        } else {
            Err(fenced())
        }
    }

    /// The owner etcd names for `room` now.
    async fn read_owner(&self, room: &str) -> Result<Option<RoomRecord>, Status> {
        let mut client = self.client.clone();
        let response = self.etcd(client.get(self.room_key(room), None)).await?;
        Ok(response.kvs().first().and_then(|kv| decode(kv.value())))
    }

    /// Runs an etcd request within [`ETCD_TIMEOUT`], noting whether etcd answered;
    /// its failure is UNAVAILABLE.
    async fn etcd<T>(
        &self,
        request: impl Future<Output = Result<T, etcd_client::Error>>,
    ) -> Result<T, Status> {
        self.authenticate_in_time().await?;
        let outcome = tokio::time::timeout(ETCD_TIMEOUT, request).await;
        let ok = matches!(outcome, Ok(Ok(_)));
        self.inner().etcd_ok = ok;
        match outcome {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => {
                self.auth_error(&e).await;
                Err(Status::unavailable(format!(
                    "the cluster store (etcd) failed: {e}; no room can be placed now"
                )))
            }
            Err(_) => Err(etcd_silent()),
        }
    }

    /// [`Cluster::authenticate`] within [`ETCD_TIMEOUT`], waiting for another
    /// task's authentication included.
    pub(super) async fn authenticate_in_time(&self) -> Result<(), Status> {
        match tokio::time::timeout(ETCD_TIMEOUT, self.authenticate()).await {
            Ok(authenticated) => authenticated,
            Err(_) => {
                self.inner().etcd_ok = false;
                Err(etcd_silent())
            }
        }
    }

    /// Authenticates as `--etcd-user` unless etcd took its credentials already
    /// (a request that was not sent yet then carries the token). The client keeps
    /// the credentials and renews the token by itself after that. One attempt at a
    /// time; after a failure, none for [`AUTH_BACKOFF_MIN`] doubling to
    /// [`AUTH_BACKOFF_MAX`], in which the last failure is the answer.
    async fn authenticate(&self) -> Result<(), Status> {
        let Some(credentials) = &self.settings.etcd_credentials else {
            return Ok(());
        };
        if self.authenticated.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut retry = self.auth.lock().await;
        if self.authenticated.load(Ordering::Acquire) {
            return Ok(());
        }
        if retry.not_before.is_some_and(|t| Instant::now() < t) {
            return Err(Status::unavailable(retry.error.clone()));
        }
        let user = match credentials.load() {
            Ok(user) => user,
            Err(e) => {
                let error = format!("{e}; no room can be placed now");
                retry.error = error.clone();
                return Err(Status::unavailable(error));
            }
        };
        let mut client = self.client.clone();
        let outcome = tokio::time::timeout(ETCD_TIMEOUT, client.update_user(Some(user))).await;
        let refused = match outcome {
            Ok(Ok(())) => return self.taken(&mut retry),
            // Authentication is off in etcd: the node goes on without a token,
            // and authenticates once etcd asks for one (`AUTH_USER_EMPTY`). So
            // nodes can be given their user before authentication is turned on.
            Ok(Err(etcd_client::Error::GRpcStatus(status)))
                if status.message().contains(AUTH_NOT_ENABLED) =>
            {
                return self.taken(&mut retry);
            }
            // etcd answered, and said no: a wrong user or password
            // ("authentication failed").
            Ok(Err(etcd_client::Error::GRpcStatus(status)))
                if matches!(
                    status.code(),
                    tonic::Code::InvalidArgument | tonic::Code::FailedPrecondition
                ) =>
            {
                format!(
                    "the cluster store (etcd) refused user {:?} (--etcd-user): {}; no room \
                     can be placed now",
                    credentials.user,
                    status.message()
                )
            }
            // Not reached, or no answer: tried again at the next request.
            Ok(Err(e)) => {
                self.inner().etcd_ok = false;
                return Err(Status::unavailable(format!(
                    "the cluster store (etcd) failed while authenticating: {e}; no room can \
                     be placed now"
                )));
            }
            Err(_) => {
                self.inner().etcd_ok = false;
                return Err(etcd_silent());
            }
        };
        self.refused.store(true, Ordering::Release);
        tracing::warn!(
            event = "cluster_auth_refused",
            node = self.node_id(),
            error = refused.as_str(),
            "etcd refused this node's user; it keeps no lease until etcd takes it"
        );
        retry.backoff = retry.backoff.clamp(AUTH_BACKOFF_MIN, AUTH_BACKOFF_MAX);
        retry.not_before = Some(Instant::now() + retry.backoff);
        retry.backoff = (retry.backoff * 2).min(AUTH_BACKOFF_MAX);
        retry.error = refused.clone();
        Err(Status::unavailable(refused))
    }

    /// Notes that etcd took the node's credentials (or asks for none).
    fn taken(&self, retry: &mut AuthRetry) -> Result<(), Status> {
        self.authenticated.store(true, Ordering::Release);
        self.refused.store(false, Ordering::Release);
        *retry = AuthRetry::default();
        Ok(())
    }

    /// What an etcd error says of the node's authentication, acted on: a JWT token
    /// minted before a change to etcd's users and roles is renewed (the request is
    /// tried again at its caller's next turn); credentials etcd refuses on renewal
    /// (the password changed), or a request without a token once authentication
    /// was turned on, send the node back to [`Cluster::authenticate`].
    pub(super) async fn auth_error(&self, e: &etcd_client::Error) {
        if self.settings.etcd_credentials.is_none() {
            return;
        }
        let text = e.to_string();
        if text.contains(AUTH_OLD_REVISION) {
            let client = self.client.clone();
            match tokio::time::timeout(ETCD_TIMEOUT, client.refresh_token()).await {
                // The password changed with them.
                Ok(Err(e)) if e.to_string().contains(AUTH_FAILED) => {
                    self.forget_credentials().await;
                }
                Ok(Err(e)) => {
                    tracing::debug!(event = "cluster_token_refresh_failed", error = %e);
                }
                _ => {}
            }
        } else if text.contains(AUTH_FAILED) || text.contains(AUTH_USER_EMPTY) {
            // The client's own renewal was refused, or it holds no token: it
            // forgets the credentials, so that requests stop asking etcd to check
            // them, and the next request authenticates, reading the file anew,
            // with the back-off.
            self.forget_credentials().await;
        }
    }

    /// Whether etcd refused this node's credentials at its last authentication.
    pub(super) fn auth_refused(&self) -> bool {
        self.refused.load(Ordering::Acquire)
    }

    /// Takes the credentials and token out of the client; the next request
    /// authenticates first.
    async fn forget_credentials(&self) {
        let _retry = self.auth.lock().await;
        if self.authenticated.swap(false, Ordering::AcqRel) {
            let mut client = self.client.clone();
            // Without credentials this only drops the token: no request is sent.
            let _ = client.update_user(None).await;
        }
    }

    /// Notes that this node no longer serves `room` (it closed), so its key is
    /// deleted from etcd. Called under the room directory's lock, with the room's
    /// removal from it.
    pub fn release(&self, room: &str) {
        let mut inner = self.inner();
        if inner.owned.remove(room).is_some() {
            inner.release.insert(room.to_owned());
        }
        if inner.spanning.remove(room).is_some() {
            inner.unspan.insert(room.to_owned());
        }
    }

    /// Leaves the cluster at shutdown: revokes the lease, so that etcd deletes this
    /// node's registration and room keys at once rather than after the TTL, and the
    /// rooms can be placed elsewhere straight away.
    pub async fn leave(&self) {
        let lease = {
            let mut inner = self.inner();
            inner.owned.clear();
            inner.spanning.clear();
            inner.serve_until = None;
            inner.lease.take()
        };
        if let Some(lease) = lease {
            let mut client = self.client.clone();
            if self.etcd(client.lease_revoke(lease)).await.is_ok() {
                tracing::info!(
                    event = "cluster_left",
                    node = self.settings.node_id.as_str(),
                    lease,
                    "left the cluster"
                );
            }
        }
    }

    /// Whether this node may call `node`: a node that serves TLS (its URLs are
    /// `https://`) calls only nodes that serve TLS too, so that forwarded tokens and
    /// link fingerprints never leave it in plain text. Its view leaves other nodes
    /// out ([`view`]), so nothing routes or redirects to them; this guards the
    /// call itself. A plain node reaches any (an `https://` one through
    /// `--cluster-ca`).
    fn reaches(&self, node: &NodeRecord) -> Result<(), Status> {
        if self.serves_tls() && !node.serves_tls() {
            return Err(Status::unavailable(format!(
                "node {} serves without TLS, and this node, which serves TLS, neither calls \
                 it nor sends clients to it",
                node.id
            )));
        }
        Ok(())
    }

    /// A gRPC channel to `node` (made once, connected on first use): over TLS when
    /// its URL is `https://`, its certificate verified against `--cluster-ca` for
    /// the URL's host.
    pub fn channel(&self, node: &NodeRecord) -> Result<Channel, Status> {
        self.reaches(node)?;
        let mut channels = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = channels.get(&node.grpc_url) {
            return Ok(c.clone());
        }
        let bad_url = || Status::internal(format!("node {} has a bad gRPC URL", node.id));
        let mut endpoint = Endpoint::from_shared(node.grpc_url.clone())
            .map_err(|_| bad_url())?
            .connect_timeout(ETCD_TIMEOUT);
        if node.grpc_url.starts_with("https://") {
            let Some(tls) = &self.node_tls else {
                return Err(Status::unavailable(format!(
                    "node {} serves gRPC over TLS, and this node has no --cluster-ca to \
                     verify it by",
                    node.id
                )));
            };
            endpoint = super::tls::verified_endpoint(endpoint, tls).map_err(|e| {
                Status::internal(format!("TLS to node {} cannot be set up: {e}", node.id))
            })?;
        }
        let channel = endpoint.connect_lazy();
        channels.insert(node.grpc_url.clone(), channel.clone());
        Ok(channel)
    }
}

/// Where a room nobody owns goes: the least-loaded of `nodes` in `region` that
/// takes it (is neither draining nor full), else, when there is none or `region` is
/// `None`, the least-loaded of all that are not draining. Least loaded: fewest peers
/// for its capacity, then fewest rooms (`rooms`, by node id), then the lowest id.
pub fn least_loaded<'a>(
    nodes: impl Iterator<Item = &'a NodeRecord> + Clone,
    rooms: &HashMap<String, usize>,
    region: Option<&str>,
) -> Option<&'a NodeRecord> {
    let order = |a: &&NodeRecord, b: &&NodeRecord| {
        let load = |n: &NodeRecord| f64::from(n.peers) / f64::from(n.max_peers.max(1));
        let count = |n: &NodeRecord| rooms.get(&n.id).copied().unwrap_or(0);
        load(a)
            .total_cmp(&load(b))
            .then_with(|| count(a).cmp(&count(b)))
            .then_with(|| a.id.cmp(&b.id))
    };
    let open = nodes.filter(|n| !n.draining);
    region
        .and_then(|region| {
            open.clone()
                .filter(|n| n.region == region && n.peers < n.max_peers)
                .min_by(order)
        })
        .or_else(|| open.min_by(order))
}

/// `bytes` in lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// The error for a node that may no longer serve or place rooms.
fn fenced() -> Status {
    Status::unavailable(
        "this node has lost contact with the cluster store (etcd) for too long to know \
         it still owns its rooms; try another node",
    )
}

/// A room record, or `None` for a value that is not one.
fn decode(value: &[u8]) -> Option<RoomRecord> {
    serde_json::from_slice(value).ok()
}

/// The hop count a request carries (0 when none, or a bad value).
pub fn hops_of(metadata: &tonic::metadata::MetadataMap) -> u32 {
    metadata
        .get(HOPS)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_etcd_password_is_its_files_first_line() {
        let dir = std::env::temp_dir().join(format!("shoal-etcd-pw-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let credentials = |text: &str| {
            let file = dir.join("pw");
            std::fs::write(&file, text).unwrap();
            EtcdCredentials {
                user: "node".to_owned(),
                password_file: file,
            }
            .load()
        };
        let loaded = credentials("s3cret\r\n").unwrap();
        assert_eq!(loaded, ("node".to_owned(), "s3cret".to_owned()));
        assert_eq!(credentials("s3cret").unwrap().1, "s3cret");
        assert_eq!(credentials("a b\nignored\n").unwrap().1, "a b");
        for empty in ["", "\n", "\nsecond line\n"] {
            assert!(matches!(
                credentials(empty),
                Err(ClusterError::Password { .. })
            ));
        }
        let long = "x".repeat(MAX_PASSWORD_FILE_BYTES as usize + 1);
        assert!(matches!(
            credentials(&long),
            Err(ClusterError::Password { .. })
        ));
        let most = "x".repeat(MAX_PASSWORD_FILE_BYTES as usize);
        assert_eq!(credentials(&most).unwrap().1, most);
        assert_eq!(credentials(" spaced \n").unwrap().1, " spaced ");
        let missing = EtcdCredentials {
            user: "node".to_owned(),
            password_file: dir.join("missing"),
        };
        assert!(matches!(missing.load(), Err(ClusterError::Password { .. })));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_node_presents_only_the_fingerprint_it_registered() {
        let mine = [0xab; 32];
        let mut n = node("a", "", 0);
        assert!(!n.presents(&mine), "a record without one takes none");
        n.fingerprint_sha256 = hex(&mine);
        assert_eq!(n.fingerprint_sha256, "ab".repeat(32));
        assert!(n.presents(&mine));
        let mut other = mine;
        other[31] = 0xac;
        assert!(!n.presents(&other));
    }

    /// A node record for tests: capacity 10 peers, lease 1.
    pub(super) fn node(id: &str, region: &str, peers: u32) -> NodeRecord {
        NodeRecord {
            id: id.to_owned(),
            grpc_url: String::new(),
            http_url: String::new(),
            region: region.to_owned(),
            shards: 1,
            peers,
            max_peers: 10,
            draining: false,
            room_share: 0,
            lease: 1,
            fingerprint_sha256: String::new(),
        }
    }

    fn pick<'a>(nodes: &'a [NodeRecord], rooms: &[(&str, usize)], region: Option<&str>) -> &'a str {
        let rooms = rooms.iter().map(|(n, c)| ((*n).to_owned(), *c)).collect();
        least_loaded(nodes.iter(), &rooms, region).map_or("none", |n| n.id.as_str())
    }

    #[test]
    fn placements_count_before_the_view_shows_them() {
        let mut inner = Inner::default();
        let owned = |owner: &str| RoomRecord {
            owner: owner.to_owned(),
            lease: 1,
        };
        inner.owners.insert("old".into(), owned("a"));
        inner.seen(10);
        // Placed here in revisions the watch has not reached: counted at once.
        inner.placed("r1", "b", 11);
        inner.placed("r2", "b", 12);
        // One made in a revision the view has passed is in the view: not noted.
        inner.placed("r0", "a", 9);
        assert!(!inner.placed.contains_key("r0"));
        let counts = inner.rooms_by_node();
        assert_eq!((counts.get("a"), counts.get("b")), (Some(&1), Some(&2)));
        // The watch reaches revision 11: r1 is in the view from now on.
        inner.owners.insert("r1".into(), owned("b"));
        inner.seen(11);
        assert_eq!(inner.placed.len(), 1);
        assert_eq!(inner.rooms_by_node().get("b"), Some(&2));
        // r2 was deleted again before the watch saw it: its deletion's revision
        // takes it out.
        inner.seen(13);
        assert!(inner.placed.is_empty());
        assert_eq!(inner.rooms_by_node().get("b"), Some(&1));
    }

    #[test]
    fn least_loaded_goes_by_load_then_rooms_then_id() {
        let nodes = [node("a", "", 5), node("b", "", 2), node("c", "", 2)];
        assert_eq!(pick(&nodes, &[], None), "b");
        assert_eq!(pick(&nodes, &[("b", 3), ("c", 1)], None), "c");
        assert_eq!(pick(&[], &[], None), "none");
    }

    #[test]
    fn least_loaded_prefers_the_joiners_region() {
        let nodes = [node("a", "eu", 6), node("b", "eu", 4), node("c", "us", 0)];
        assert_eq!(pick(&nodes, &[], Some("eu")), "b");
        assert_eq!(pick(&nodes, &[], Some("us")), "c");
        // No node there: anywhere.
        assert_eq!(pick(&nodes, &[], Some("ap")), "c");
        assert_eq!(pick(&nodes, &[], None), "c");
    }

    #[test]
    fn least_loaded_leaves_a_region_whose_nodes_take_no_rooms() {
        let mut nodes = [node("a", "eu", 10), node("b", "eu", 1), node("c", "us", 3)];
        nodes[1].draining = true;
        // a is full, b drains: the least-loaded node anywhere that does not drain.
        assert_eq!(pick(&nodes, &[], Some("eu")), "c");
        nodes[2].draining = true;
        // Only a full node is left: it is still the answer (its joins are refused
        // there, as they would be anywhere).
        assert_eq!(pick(&nodes, &[], Some("eu")), "a");
        nodes[0].draining = true;
        assert_eq!(pick(&nodes, &[], Some("eu")), "none");
    }
}
