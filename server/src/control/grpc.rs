//! The `shoal.v1` gRPC services: `RoomService` over the room directory and
//! `NodeService` over the shards' reports, each request checked first against its
//! `authorization` metadata ([`super::auth`]). Handlers hold the directory's lock only
//! for a few map operations and never across an `.await`; whatever waits on a shard
//! runs on tokio's blocking pool behind a semaphore.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use ring::rand::SystemRandom;
use shoal_components::peer::PeerId;
use shoal_components::room::RoomId;
use shoal_components::time::Time;
use shoal_proto::v1;
use shoal_proto::v1::DisconnectReason;
use shoal_proto::v1::node_service_server::NodeService;
use shoal_proto::v1::room_service_client::RoomServiceClient;
use shoal_proto::v1::room_service_server::RoomService;
use tokio::sync::Semaphore;
use tonic::{Request, Response, Status};

use super::auth::{Act, Auth};
use super::cluster::{self, Cluster, NodeRecord, Place, Route};
use super::connections::{AddressTable, Limit, LimitCounters, Slot};
use super::drain::Drain;
use super::metrics::ControlMetrics;
use super::origin::AllowedOrigins;
use super::participants::Members;
use super::pending::{Pending, PendingLimits};
use super::rooms::{
    self, NameKind, ParticipantState, RoomDirectory, RoomError, RoomSpec, validate_name,
};
use super::shards::{self, SHARD_REPLY_TIMEOUT, ShardError};
use super::signal::SignalLimits;
use crate::driver::{SendData, ShardReport, ShardSender};
use crate::ice_servers::IceServers;
use shoal_systems::{CongestionReport, PeerSpec};

/// Bytes a SendData payload holds at most: a message every WebRTC stack accepts
/// (RFC 8831 §6.6 leaves the limit to SDP's max-message-size; browsers take 64 KiB+).
pub const MAX_SEND_DATA_BYTES: usize = 65_536;
/// Blocking shard round trips in flight at once; more requests wait their turn.
const MAX_SHARD_QUERIES: usize = 4;
/// `/metrics` asks the shards at most this often; scrapes in between get the same
/// shard numbers (the control plane's own are always current).
pub const METRICS_MIN_INTERVAL: Duration = Duration::from_secs(1);

/// Wall-clock and monotonic time of the control plane. The directory runs on the
/// monotonic [`Time`] (since the control plane started); replies show Unix times
/// derived from one wall-clock reading at start, so a clock step never reorders them.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    epoch: Instant,
    epoch_unix_ms: u64,
}

impl Clock {
    /// A clock whose epoch is now.
    pub fn start() -> Clock {
        let unix = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        Clock {
            epoch: Instant::now(),
            epoch_unix_ms: u64::try_from(unix.as_millis()).unwrap_or(u64::MAX),
        }
    }

    /// The time since the epoch.
    pub fn now(&self) -> Time {
        Time::from_micros(u64::try_from(self.epoch.elapsed().as_micros()).unwrap_or(u64::MAX))
    }

    /// `t` as milliseconds since the Unix epoch.
    pub fn unix_ms(&self, t: Time) -> u64 {
        self.epoch_unix_ms.saturating_add(t.as_micros() / 1000)
    }
}

/// The first peer id signalling hands out; smaller ones are left to the test-only
/// `--static-peer` flag.
const FIRST_PEER_ID: u64 = 1 << 32;

/// What every handler shares.
#[derive(Debug)]
pub struct ControlState {
    rooms: Mutex<RoomDirectory>,
    members: Mutex<Members>,
    shards: Vec<ShardSender>,
    candidates: Vec<Arc<[SocketAddr]>>,
    tcp_candidates: Vec<Arc<[SocketAddr]>>,
    fingerprint_sha256: [u8; 32],
    ice_servers: IceServers,
    clock: Clock,
    max_peers_per_shard: usize,
    shard_queries: Semaphore,
    auth: Auth,
    auto_create_rooms: bool,
    signal_limits: SignalLimits,
    /// Signalling connections open (`/signal` and `SignalService` together), by
    /// client address.
    signal_slots: Arc<AddressTable>,
    max_body_bytes: usize,
    body_timeout: Duration,
    allowed_origins: AllowedOrigins,
    limit_counters: Arc<LimitCounters>,
    /// Signalling connections ended for not reading (SIGNAL_SLOW_READER).
    slow_signal_readers: AtomicU64,
    /// Stale answers ignored: answers to shoal offers no longer out.
    stale_answers: AtomicU64,
    /// Joins, leaves, requests ([`super::metrics`]).
    metrics: Arc<ControlMetrics>,
    /// The shard reports the last scrape fetched, and when. Held across the fetch,
    /// so scrapes go one at a time, apart from joins' shard queries.
    scraped: tokio::sync::Mutex<Option<(Instant, Vec<ShardReport>)>>,
    /// Whether the node drains ([`super::drain`]).
    drain: Arc<Drain>,
    pub(super) next_peer: AtomicU64,
    /// The next track id (node-wide).
    pub(super) next_track: AtomicU64,
    pub(super) rng: SystemRandom,
    /// The cluster this node belongs to; `None`: it runs alone.
    cluster: Option<Arc<Cluster>>,
    /// The links of the rooms cascaded over this node and others.
    links: Mutex<cluster::cascade::Links>,
    /// Media commands waiting for a shard's queue ([`super::media_backlog`]).
    media_backlog: Mutex<super::media_backlog::MediaBacklog>,
}

impl ControlState {
    /// The state over `directory` and the shards' command handles, by shard index.
    pub fn new(
        directory: RoomDirectory,
        shards: Vec<ShardSender>,
        max_peers_per_shard: usize,
    ) -> ControlState {
        ControlState {
            rooms: Mutex::new(directory),
            members: Mutex::new(Members::new(shards.len())),
            shards,
            candidates: Vec::new(),
            tcp_candidates: Vec::new(),
            fingerprint_sha256: [0; 32],
            ice_servers: IceServers::default(),
            clock: Clock::start(),
            max_peers_per_shard,
            shard_queries: Semaphore::new(MAX_SHARD_QUERIES),
            auth: Auth::default(),
            auto_create_rooms: true,
            signal_limits: SignalLimits::default(),
            signal_slots: AddressTable::new(
                SignalLimits::default().per_address,
                SignalLimits::default().connections,
            ),
            max_body_bytes: super::http::MAX_BODY_BYTES,
            body_timeout: Duration::from_secs(super::connections::DEFAULT_HEADER_TIMEOUT_SECS),
            allowed_origins: AllowedOrigins::default(),
            limit_counters: Arc::default(),
            slow_signal_readers: AtomicU64::new(0),
            stale_answers: AtomicU64::new(0),
            metrics: Arc::new(ControlMetrics::new()),
            scraped: tokio::sync::Mutex::new(None),
            drain: Arc::default(),
            next_peer: AtomicU64::new(FIRST_PEER_ID),
            next_track: AtomicU64::new(1),
            rng: SystemRandom::new(),
            cluster: None,
            links: Mutex::default(),
            media_backlog: Mutex::default(),
        }
    }

    /// The same, as a node of `cluster` (or alone).
    pub fn with_cluster(mut self, cluster: Option<Arc<Cluster>>) -> ControlState {
        self.cluster = cluster;
        self
    }

    /// The cluster this node belongs to; `None` when it runs alone.
    pub fn cluster(&self) -> Option<&Arc<Cluster>> {
        self.cluster.as_ref()
    }

    /// The links of the rooms cascaded over this node and others.
    pub fn links(&self) -> MutexGuard<'_, cluster::cascade::Links> {
        self.links.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Where a request for `room` is served: `None` here, else the node it goes to.
    /// `place`: whether a request that opens the room places it when nobody owns
    /// it, and where. `hops`: how often the request was passed on already.
    pub async fn room_owner(
        &self,
        room: &str,
        place: Place<'_>,
        hops: u32,
    ) -> Result<Option<NodeRecord>, Status> {
        let Some(cluster) = &self.cluster else {
            return Ok(None);
        };
        let room = validate_name(room, NameKind::Room)?;
        let route = match place {
            Place::Yes { region } => cluster.place(&room, region).await?,
            Place::No => cluster.route(&room).await?,
        };
        match route {
            Route::Local => Ok(None),
            Route::Remote(_) if hops >= cluster::MAX_HOPS => Err(Status::unavailable(format!(
                "the request for room {room:?} was passed between nodes {hops} times; try again"
            ))),
            Route::Remote(node) => Ok(Some(node)),
        }
    }

    /// Opens `room` (normalised), which this node now spans, as its owner holds it
    /// (`held`: settings and metadata), unless it is open here already. A join
    /// opens it otherwise, with this node's defaults.
    pub(crate) fn open_spanned(&self, room: &str, owner: &NodeRecord, held: v1::Room) {
        if self.rooms().get(room).is_ok() {
            return;
        }
        let spec = room_spec(room, held);
        let now = self.clock.now();
        let mut rooms = self.rooms();
        if rooms.get(room).is_err()
            && self.may_open(room).is_ok()
            && let Err(e) = rooms.create(spec, now)
        {
            tracing::warn!(
                event = "spanned_room_unknown",
                room,
                owner = owner.id.as_str(),
                error = %e,
                "the owner's settings of the room do not fit this node; opened as a new one"
            );
        }
    }

    /// Closes `rooms` here, disconnecting their participants with NODE_FENCED: the
    /// node may no longer own them. Rooms not open are skipped.
    pub async fn close_rooms(self: &Arc<Self>, rooms: &[String]) {
        let closed: Vec<rooms::Room> = {
            let mut directory = self.rooms();
            rooms
                .iter()
                .filter_map(|r| directory.delete(r).ok())
                .collect()
        };
        let peers: Vec<(usize, PeerId)> = closed
            .iter()
            .flat_map(|room| room.participants().map(|p| (p.shard, p.peer)))
            .collect();
        for (_, peer) in &peers {
            self.forget(*peer, DisconnectReason::NodeFenced);
        }
        let _ = self.disconnect(peers).await;
    }

    /// Whether this node may open `room` (normalised) now: always when it runs
    /// alone; in a cluster, while it owns the room under a lease surely alive.
    /// Checked under the directory's lock, which closing a room also holds.
    pub fn may_open(&self, room: &str) -> Result<(), Status> {
        match &self.cluster {
            Some(cluster) if !cluster.serves(room) => Err(Status::unavailable(format!(
                "room {room:?} is not served by this node now (it moved, or this node lost \
                 the cluster store); try again"
            ))),
            _ => Ok(()),
        }
    }

    /// The same, with what answers need: each shard's UDP and TCP host candidates
    /// (in priority order) and the node's certificate fingerprint.
    pub fn with_transport(
        mut self,
        candidates: Vec<Arc<[SocketAddr]>>,
        tcp_candidates: Vec<Arc<[SocketAddr]>>,
        fingerprint_sha256: [u8; 32],
    ) -> ControlState {
        self.candidates = candidates;
        self.tcp_candidates = tcp_candidates;
        self.fingerprint_sha256 = fingerprint_sha256;
        self
    }

    /// The same, handing clients `ice_servers`.
    pub fn with_ice_servers(mut self, ice_servers: IceServers) -> ControlState {
        self.ice_servers = ice_servers;
        self
    }

    /// The same, checking requests with `auth`; `auto_create_rooms`: whether a join
    /// opens a room that is not open.
    pub fn with_auth(mut self, auth: Auth, auto_create_rooms: bool) -> ControlState {
        self.auth = auth;
        self.auto_create_rooms = auto_create_rooms;
        self
    }

    /// The same, with `limits` on `/signal` connections.
    pub fn with_signal_limits(mut self, limits: SignalLimits) -> ControlState {
        self.signal_limits = limits;
        self.signal_slots = AddressTable::new(limits.per_address, limits.connections);
        self
    }

    /// A place among the node's signalling connections (`/signal` and
    /// `SignalService` together), held while the connection lives; or the flag whose
    /// cap is reached: `--max-connections-per-address` for `from`'s address, or
    /// `--max-signal-connections`. An unknown address counts as one address.
    pub fn signal_slot(&self, from: Option<IpAddr>) -> Result<Slot, &'static str> {
        let from = from.unwrap_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED));
        self.signal_slots.take(from).map_err(|limit| match limit {
            Limit::PerAddress => "--max-connections-per-address",
            _ => "--max-signal-connections",
        })
    }

    /// The same, with `limits` on sessions that have not connected.
    pub fn with_pending_limits(self, limits: PendingLimits) -> ControlState {
        self.members().pending = Pending::new(limits);
        self
    }

    /// The same, taking WHIP/WHEP request bodies of at most `bytes`, each to arrive
    /// whole within `time`.
    pub fn with_body_limits(mut self, bytes: usize, time: Duration) -> ControlState {
        self.max_body_bytes = bytes;
        self.body_timeout = time;
        self
    }

    /// Bytes a WHIP/WHEP request body may have.
    pub fn max_body_bytes(&self) -> usize {
        self.max_body_bytes
    }

    /// How long a WHIP/WHEP request body may take to arrive.
    pub fn body_timeout(&self) -> Duration {
        self.body_timeout
    }

    /// The bounds on signalling connections.
    pub fn signal_limits(&self) -> SignalLimits {
        self.signal_limits
    }

    /// The same, with `origins` allowed to open `/signal` from a browser.
    pub fn with_allowed_origins(mut self, origins: AllowedOrigins) -> ControlState {
        self.allowed_origins = origins;
        self
    }

    /// The web origins allowed to open `/signal` and read WHIP/WHEP responses.
    pub fn allowed_origins(&self) -> &AllowedOrigins {
        &self.allowed_origins
    }

    /// The connections (and `/signal` upgrades) refused or cut off, by limit.
    pub fn limit_counters(&self) -> &Arc<LimitCounters> {
        &self.limit_counters
    }

    /// Counts a signalling connection ended for not reading.
    pub fn count_slow_signal_reader(&self) {
        self.slow_signal_readers.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts an answer ignored for naming an offer that is no longer out.
    pub fn count_stale_answer(&self) {
        self.stale_answers.fetch_add(1, Ordering::Relaxed);
    }

    /// Answers ignored for naming an offer that is no longer out.
    pub fn stale_answers(&self) -> &AtomicU64 {
        &self.stale_answers
    }

    /// The control plane's metrics.
    pub fn metrics(&self) -> &Arc<ControlMetrics> {
        &self.metrics
    }

    /// Whether the node drains.
    pub fn drain(&self) -> &Arc<Drain> {
        &self.drain
    }

    /// Signalling connections ended for not reading (SIGNAL_SLOW_READER).
    pub fn slow_signal_readers(&self) -> &AtomicU64 {
        &self.slow_signal_readers
    }

    /// The text of `/metrics`: every shard's report and the depth of its command
    /// queue, with the control plane's own metrics. Scrapes take turns, outside the
    /// shard queries joins wait on, and the shards are asked at most once per
    /// [`METRICS_MIN_INTERVAL`]: a scrape flood can neither delay a join nor keep
    /// the shards counting.
    pub async fn metrics_text(self: &Arc<Self>) -> Result<String, Status> {
        let mut scraped = self.scraped.lock().await;
        let reports = match scraped.as_ref() {
            Some((at, reports)) if at.elapsed() < METRICS_MIN_INTERVAL => reports.clone(),
            _ => {
                let state = self.clone();
                let reports = tokio::task::spawn_blocking(move || {
                    shards::reports(&state.shards, SHARD_REPLY_TIMEOUT)
                })
                .await
                .map_err(|_| Status::internal("asking the shards failed"))?
                .map_err(|e| Status::unavailable(e.to_string()))?;
                *scraped = Some((Instant::now(), reports.clone()));
                reports
            }
        };
        drop(scraped);
        let queued = self.shards.iter().map(ShardSender::queued).collect();
        Ok(super::metrics::render(self, reports, queued))
    }

    /// Who may do what.
    pub fn auth(&self) -> &Auth {
        &self.auth
    }

    /// Whether a join opens a room that is not open.
    pub fn auto_create_rooms(&self) -> bool {
        self.auto_create_rooms
    }

    /// The STUN and TURN servers for the client of `peer`, with its credentials
    /// (see [`crate::ice_servers`]; the TURN username names the peer id, not the
    /// identity, which would cross the network in the clear).
    pub fn ice_servers_for(&self, peer: PeerId) -> Vec<v1::IceServer> {
        self.ice_servers
            .for_client(&peer.0.to_string(), SystemTime::now())
    }

    /// Signalling's tables (taken after [`ControlState::rooms`] when both are held).
    pub fn members(&self) -> MutexGuard<'_, Members> {
        self.members.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The media commands waiting for a shard's queue.
    pub(super) fn media_backlog(&self) -> MutexGuard<'_, super::media_backlog::MediaBacklog> {
        self.media_backlog
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Each shard's command handle, by index.
    pub(super) fn shards(&self) -> &[ShardSender] {
        &self.shards
    }

    /// Shard `index`'s host candidates, in priority order.
    pub fn candidates(&self, index: usize) -> Option<Arc<[SocketAddr]>> {
        self.candidates.get(index).cloned()
    }

    /// Shard `index`'s passive TCP candidates, in priority order (none without
    /// ICE-TCP).
    pub fn tcp_candidates(&self, index: usize) -> Arc<[SocketAddr]> {
        self.tcp_candidates
            .get(index)
            .cloned()
            .unwrap_or_else(|| Arc::from([]))
    }

    /// SHA-256 of the node's DTLS certificate.
    pub fn fingerprint_sha256(&self) -> [u8; 32] {
        self.fingerprint_sha256
    }

    /// Peers one shard holds at most.
    pub fn max_peers_per_shard(&self) -> usize {
        self.max_peers_per_shard
    }

    /// A room as the API shows it.
    pub fn room_message(&self, room: &rooms::Room) -> v1::Room {
        v1::Room {
            name: room.name.clone(),
            max_participants: room.max_participants,
            empty_timeout_secs: saturating_u32(room.empty_timeout.as_secs()),
            metadata: room.metadata.clone(),
            num_participants: saturating_u32(room.participant_count()),
            creation_time_unix_ms: self.clock.unix_ms(room.created_at),
            node_id: self
                .cluster
                .as_ref()
                .map(|c| c.node_id().to_owned())
                .unwrap_or_default(),
        }
    }

    /// A participant as the API shows it.
    pub fn participant_message(&self, p: &rooms::Participant) -> v1::Participant {
        let state = match p.state {
            ParticipantState::Joining => v1::ParticipantState::Joining,
            ParticipantState::Active => v1::ParticipantState::Active,
        };
        v1::Participant {
            identity: p.identity.clone(),
            name: p.name.clone(),
            metadata: p.metadata.clone(),
            state: state.into(),
            shard: saturating_u32(p.shard),
            peer_id: p.peer.0,
            joined_at_unix_ms: self.clock.unix_ms(p.joined_at),
            // What it publishes is the signalling's (`Members::track_infos`); its data
            // channels live in its shard.
            tracks: Vec::new(),
            data_channels: Vec::new(),
            // ListParticipants asks the shard for it.
            connection: None,
        }
    }

    /// Adds a peer to a shard, off the runtime's workers.
    pub async fn add_peer(
        self: &Arc<Self>,
        shard: usize,
        spec: PeerSpec,
    ) -> Result<(), ShardError> {
        let _turn = self
            .shard_queries
            .acquire()
            .await
            .map_err(|_| ShardError::Gone(shard))?;
        let state = self.clone();
        tokio::task::spawn_blocking(move || {
            shards::add_peer(&state.shards, shard, spec, SHARD_REPLY_TIMEOUT)
        })
        .await
        .map_err(|_| ShardError::Gone(shard))?
    }

    /// The room directory. A panic while it was held (a bug) does not take the whole
    /// control plane down with it.
    pub fn rooms(&self) -> MutexGuard<'_, RoomDirectory> {
        self.rooms.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The control plane's clock.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// Closes the rooms whose empty-timeout has run out by now.
    pub fn expire_rooms(&self) -> Vec<String> {
        let now = self.clock.now();
        let mut rooms = self.rooms();
        let closed = rooms.expire(now);
        // Under the directory's lock: a join that finds the room gone also finds it
        // no longer served.
        if let Some(cluster) = &self.cluster {
            for room in &closed {
                cluster.release(room);
            }
        }
        closed
    }

    /// Closes the reliable data channels of `room`'s members on every shard that
    /// holds some (`Shard::close_reliable_channels`), each request on its shard's
    /// queue ahead of what is sent to that shard after this returns. How many shards
    /// and channels; `None` if the room is not open here.
    pub(super) async fn close_reliable_channels(
        self: &Arc<Self>,
        room: &str,
    ) -> Result<Option<(usize, usize)>, Status> {
        let (id, indices): (RoomId, Vec<usize>) = {
            let rooms = self.rooms();
            let Ok(r) = rooms.get(room) else {
                return Ok(None);
            };
            let shards: BTreeSet<usize> = r.participants().map(|p| p.shard).collect();
            (r.id, shards.into_iter().collect())
        };
        let _turn = self.shard_turn().await?;
        let state = self.clone();
        let shards = indices.len();
        let (closed, errors) = tokio::task::spawn_blocking(move || {
            shards::close_reliable_channels(&state.shards, id, &indices, SHARD_REPLY_TIMEOUT)
        })
        .await
        .map_err(|_| Status::internal("closing data channels failed"))?;
        for e in errors {
            tracing::warn!(
                event = "close_channels_failed",
                room,
                "closing a room's reliable data channels: {e}"
            );
        }
        Ok(Some((shards, closed)))
    }

    /// Removes peers from their shards, off the runtime's workers, and logs failures.
    pub(super) async fn disconnect(
        self: &Arc<Self>,
        peers: Vec<(usize, PeerId)>,
    ) -> Result<(), Status> {
        if peers.is_empty() {
            return Ok(());
        }
        let _turn = self.shard_turn().await?;
        let state = self.clone();
        let errors = tokio::task::spawn_blocking(move || {
            shards::disconnect(&state.shards, &peers, SHARD_REPLY_TIMEOUT)
        })
        .await
        .map_err(|_| Status::internal("disconnecting participants failed"))?;
        // The directory has let them go already; a shard that cannot be reached is
        // failing as a whole, which the process notices on its own.
        for e in errors {
            tracing::warn!(
                event = "disconnect_failed",
                "disconnecting a participant: {e}"
            );
        }
        Ok(())
    }

    /// Queues server-to-participant messages on their shards; returns for how many
    /// participants. A shard that refuses or does not answer fails the call.
    async fn send_data(
        self: &Arc<Self>,
        messages: Vec<(usize, SendData)>,
    ) -> Result<usize, Status> {
        if messages.is_empty() {
            return Ok(0);
        }
        let _turn = self.shard_turn().await?;
        let state = self.clone();
        let (recipients, errors) = tokio::task::spawn_blocking(move || {
            shards::send_data(&state.shards, messages, SHARD_REPLY_TIMEOUT)
        })
        .await
        .map_err(|_| Status::internal("sending data failed"))?;
        match errors.into_iter().next() {
            None => Ok(recipients),
            Some(e @ ShardError::Refused { .. }) => Err(Status::invalid_argument(e.to_string())),
            Some(e) => Err(Status::unavailable(e.to_string())),
        }
    }

    /// Every shard's report, fetched off the runtime's workers.
    pub(super) async fn shard_reports(self: &Arc<Self>) -> Result<Vec<ShardReport>, Status> {
        let _turn = self.shard_turn().await?;
        let state = self.clone();
        tokio::task::spawn_blocking(move || shards::reports(&state.shards, SHARD_REPLY_TIMEOUT))
            .await
            .map_err(|_| Status::internal("asking the shards failed"))?
            .map_err(|e| Status::unavailable(e.to_string()))
    }

    /// The congestion control state of `peers` (by shard), fetched off the
    /// runtime's workers.
    async fn congestion_reports(
        self: &Arc<Self>,
        peers: Vec<(usize, Vec<PeerId>)>,
    ) -> Result<Vec<(PeerId, CongestionReport)>, Status> {
        if peers.is_empty() {
            return Ok(Vec::new());
        }
        let _turn = self.shard_turn().await?;
        let state = self.clone();
        tokio::task::spawn_blocking(move || {
            shards::congestion(&state.shards, peers, SHARD_REPLY_TIMEOUT)
        })
        .await
        .map_err(|_| Status::internal("asking the shards failed"))?
        .map_err(|e| Status::unavailable(e.to_string()))
    }

    async fn shard_turn(&self) -> Result<tokio::sync::SemaphorePermit<'_>, Status> {
        self.shard_queries
            .acquire()
            .await
            .map_err(|_| Status::unavailable("shutting down"))
    }
}

/// The gRPC handlers of `RoomService` and `NodeService`.
#[derive(Clone, Debug)]
pub struct ControlApi {
    state: Arc<ControlState>,
}

impl ControlApi {
    /// Handlers over `state`.
    pub fn new(state: Arc<ControlState>) -> ControlApi {
        ControlApi { state }
    }

    /// The state the handlers share.
    pub fn state(&self) -> &Arc<ControlState> {
        &self.state
    }
}

impl ControlApi {
    /// For a node's call about `room`'s link (OpenLink, LinkTracks): the room's
    /// name as the directory keeps it, and the cluster, once the token is a node's
    /// own for such calls ([`Auth::node_token`]), for the room, naming the calling
    /// node `node`.
    fn link_call<T>(
        &self,
        request: &Request<T>,
        room: &str,
        node: &str,
    ) -> Result<(String, Arc<Cluster>), Status> {
        let room = validate_name(room, NameKind::Room)?.into_owned();
        // Only a node's own token for such calls, naming that node.
        self.state
            .auth
            .check_node_call(bearer_of(request), &room, node)?;
        let cluster = self
            .state
            .cluster()
            .cloned()
            .ok_or_else(|| Status::failed_precondition("this node is not in a cluster"))?;
        Ok((room, cluster))
    }

    /// The node a request for `room` goes to, when not this one (see
    /// [`ControlState::room_owner`]).
    async fn elsewhere<T>(
        &self,
        request: &Request<T>,
        room: &str,
        place: Place<'_>,
    ) -> Result<Option<NodeRecord>, Status> {
        let hops = cluster::hops_of(request.metadata());
        self.state.room_owner(room, place, hops).await
    }

    /// For a request about `room` that needs `roomAdmin` of it: checks the grant,
    /// then says which node serves the room when it is not this one.
    async fn admin_elsewhere<T>(
        &self,
        request: &Request<T>,
        room: &str,
    ) -> Result<Option<NodeRecord>, Status> {
        self.state
            .auth
            .check(bearer_of(request), Act::Admin { room })?;
        self.elsewhere(request, room, Place::No).await
    }

    /// ListRooms over the whole cluster: this node's rooms and every other live
    /// node's (each asked for its own), merged by name into one page.
    async fn list_cluster_rooms(
        &self,
        cluster: &Arc<Cluster>,
        request: Request<v1::ListRoomsRequest>,
    ) -> Result<Response<v1::ListRoomsResponse>, Status> {
        let req = request.get_ref().clone();
        let size = rooms::page_len(page_size(req.page_size));
        // Whether some node has rooms beyond the page it gave.
        let mut more = false;
        let mut all: Vec<v1::Room> = {
            let rooms = self.state.rooms();
            let page = rooms.list(&req.page_token, size)?;
            more |= page.next_page_token.is_some();
            page.items
                .iter()
                .map(|r| self.state.room_message(r))
                .collect()
        };
        let others: Vec<NodeRecord> = cluster
            .nodes()
            .into_iter()
            .filter(|n| n.id != cluster.node_id())
            .collect();
        let authorization = request.metadata().get("authorization").cloned();
        let asks = others.iter().map(|node| {
            let mut ask = Request::new(req.clone());
            if let Some(a) = &authorization {
                ask.metadata_mut().insert("authorization", a.clone());
            }
            let ask = forward(&self.state, node, ask, |mut c, r| async move {
                c.list_rooms(r).await
            });
            async move {
                tokio::time::timeout(LIST_TIMEOUT, ask)
                    .await
                    .unwrap_or_else(|_| Err(Status::unavailable("no answer in time")))
            }
        });
        for (node, answer) in others
            .iter()
            .zip(futures_util::future::join_all(asks).await)
        {
            match answer {
                Ok(page) => {
                    let page = page.into_inner();
                    more |= !page.next_page_token.is_empty();
                    all.extend(page.rooms);
                }
                // A node that cannot answer (it died, and its lease has not expired
                // yet) is left out rather than failing the listing.
                Err(status) => tracing::warn!(
                    event = "list_rooms_node_skipped",
                    node = node.id.as_str(),
                    code = super::signal::code_name(status.code()),
                    "a node did not answer ListRooms"
                ),
            }
        }
        all.sort_by(|a, b| a.name.cmp(&b.name));
        // A room that moved while the nodes were asked shows once.
        all.dedup_by(|a, b| a.name == b.name);
        more |= all.len() > size;
        all.truncate(size);
        let next_page_token = match (more, all.last()) {
            (true, Some(last)) => last.name.clone(),
            _ => String::new(),
        };
        Ok(Response::new(v1::ListRoomsResponse {
            rooms: all,
            next_page_token,
        }))
    }
}

/// Passes `request` on to `node` with its `authorization` and one more hop, and
/// returns what `node` answered.
async fn forward<Req, Resp, F, Fut>(
    state: &ControlState,
    node: &NodeRecord,
    request: Request<Req>,
    call: F,
) -> Result<Response<Resp>, Status>
where
    F: FnOnce(RoomServiceClient<tonic::transport::Channel>, Request<Req>) -> Fut,
    Fut: Future<Output = Result<Response<Resp>, Status>>,
{
    let cluster = state
        .cluster()
        .ok_or_else(|| Status::internal("forwarding without a cluster"))?;
    let hops = cluster::hops_of(request.metadata()) + 1;
    let authorization = request.metadata().get("authorization").cloned();
    let mut out = Request::new(request.into_inner());
    if let Some(authorization) = authorization {
        out.metadata_mut().insert("authorization", authorization);
    }
    out.metadata_mut().insert(cluster::HOPS, hops.into());
    out.set_timeout(REQUEST_FORWARD_TIMEOUT);
    let channel = cluster.channel(node)?;
    match tokio::time::timeout(
        REQUEST_FORWARD_TIMEOUT,
        call(RoomServiceClient::new(channel), out),
    )
    .await
    {
        Ok(result) => result,
        Err(_) => Err(Status::unavailable(format!(
            "node {} did not answer in time",
            node.id
        ))),
    }
}

/// CreateRoom's `region`: `None` when empty, else a region label (as `--region`
/// takes it) or INVALID_ARGUMENT.
fn region_hint(region: &str) -> Result<Option<&str>, Status> {
    if region.is_empty() {
        return Ok(None);
    }
    region
        .parse::<cluster::Label>()
        .map_err(|e| Status::invalid_argument(format!("region: {e}")))?;
    Ok(Some(region))
}

/// How long ListRooms waits for each other node's rooms.
const LIST_TIMEOUT: Duration = Duration::from_secs(3);
/// How long a request passed on to another node may take there.
const REQUEST_FORWARD_TIMEOUT: Duration = Duration::from_secs(10);

#[tonic::async_trait]
impl RoomService for ControlApi {
    async fn create_room(
        &self,
        request: Request<v1::CreateRoomRequest>,
    ) -> Result<Response<v1::Room>, Status> {
        self.state
            .auth
            .check(bearer_of(&request), Act::CreateRoom)?;
        self.state.drain().check_open()?;
        let region = region_hint(&request.get_ref().region)?;
        if let Some(node) = self
            .elsewhere(&request, &request.get_ref().name, Place::Yes { region })
            .await?
        {
            return forward(&self.state, &node, request, |mut c, r| async move {
                c.create_room(r).await
            })
            .await;
        }
        let req = request.into_inner();
        let spec = RoomSpec {
            name: req.name,
            max_participants: req.max_participants,
            empty_timeout: Duration::from_secs(req.empty_timeout_secs.into()),
            metadata: req.metadata,
        };
        let now = self.state.clock.now();
        let mut rooms = self.state.rooms();
        if self.state.cluster().is_some() {
            self.state
                .may_open(&validate_name(&spec.name, NameKind::Room)?)?;
        }
        let room = rooms.create(spec, now)?;
        Ok(Response::new(self.state.room_message(room)))
    }

    async fn get_room(
        &self,
        request: Request<v1::GetRoomRequest>,
    ) -> Result<Response<v1::Room>, Status> {
        self.state.auth.check(bearer_of(&request), Act::ListRooms)?;
        if let Some(node) = self
            .elsewhere(&request, &request.get_ref().name, Place::No)
            .await?
        {
            return forward(&self.state, &node, request, |mut c, r| async move {
                c.get_room(r).await
            })
            .await;
        }
        let rooms = self.state.rooms();
        let room = rooms.get(&request.get_ref().name)?;
        Ok(Response::new(self.state.room_message(room)))
    }

    async fn list_rooms(
        &self,
        request: Request<v1::ListRoomsRequest>,
    ) -> Result<Response<v1::ListRoomsResponse>, Status> {
        self.state.auth.check(bearer_of(&request), Act::ListRooms)?;
        if let Some(cluster) = self.state.cluster()
            && cluster::hops_of(request.metadata()) == 0
        {
            return self.list_cluster_rooms(cluster, request).await;
        }
        let req = request.get_ref();
        let rooms = self.state.rooms();
        let page = rooms.list(&req.page_token, page_size(req.page_size))?;
        Ok(Response::new(v1::ListRoomsResponse {
            rooms: page
                .items
                .iter()
                .map(|r| self.state.room_message(r))
                .collect(),
            next_page_token: page.next_page_token.unwrap_or_default(),
        }))
    }

    async fn delete_room(
        &self,
        request: Request<v1::DeleteRoomRequest>,
    ) -> Result<Response<v1::DeleteRoomResponse>, Status> {
        let room = &request.get_ref().name;
        if let Some(node) = self.admin_elsewhere(&request, room).await? {
            return forward(&self.state, &node, request, |mut c, r| async move {
                c.delete_room(r).await
            })
            .await;
        }
        let room = {
            let mut rooms = self.state.rooms();
            let room = rooms.delete(&request.get_ref().name)?;
            if let Some(cluster) = self.state.cluster() {
                cluster.release(&room.name);
            }
            room
        };
        let peers: Vec<(usize, PeerId)> = room.participants().map(|p| (p.shard, p.peer)).collect();
        let participants_removed = saturating_u32(peers.len());
        for (_, peer) in &peers {
            self.state.forget(*peer, DisconnectReason::RoomDeleted);
        }
        self.state.disconnect(peers).await?;
        if let Some(cluster) = self.state.cluster() {
            cluster.release_now(&room.name).await;
        }
        Ok(Response::new(v1::DeleteRoomResponse {
            participants_removed,
        }))
    }

    async fn list_participants(
        &self,
        request: Request<v1::ListParticipantsRequest>,
    ) -> Result<Response<v1::ListParticipantsResponse>, Status> {
        let req = request.get_ref();
        if let Some(node) = self.admin_elsewhere(&request, &req.room).await? {
            return forward(&self.state, &node, request, |mut c, r| async move {
                c.list_participants(r).await
            })
            .await;
        }
        let req = request.get_ref();
        // This node's participants and, in a cascaded room, the other nodes'
        // (without a connection here), merged by identity.
        let (mut participants, next_page_token) = {
            let rooms = self.state.rooms();
            let members = self.state.members();
            let room = rooms.get(&req.room)?;
            let after = rooms::page_after(&req.page_token)?;
            let size = rooms::page_len(page_size(req.page_size));
            let mut roster = self
                .state
                .roster(&members, room, after.as_deref(), None, true)
                .peekable();
            let participants: Vec<v1::Participant> = roster.by_ref().take(size).collect();
            let next = match (roster.peek(), participants.last()) {
                (Some(_), Some(last)) => Some(last.identity.clone()),
                _ => None,
            };
            (participants, next)
        };
        let mut by_shard: BTreeMap<usize, Vec<PeerId>> = BTreeMap::new();
        for p in participants.iter().filter(|p| p.peer_id != 0) {
            let shard = usize::try_from(p.shard).unwrap_or(usize::MAX);
            by_shard.entry(shard).or_default().push(PeerId(p.peer_id));
        }
        // Each participant's connection, from its shard (the locks are let go first).
        let reports = self
            .state
            .congestion_reports(by_shard.into_iter().collect())
            .await?;
        for p in &mut participants {
            let peer = PeerId(p.peer_id);
            if let Some((_, r)) = reports.iter().find(|(id, _)| *id == peer) {
                p.connection = Some(connection_stats(r));
            }
        }
        Ok(Response::new(v1::ListParticipantsResponse {
            participants,
            next_page_token: next_page_token.unwrap_or_default(),
        }))
    }

    async fn remove_participant(
        &self,
        request: Request<v1::RemoveParticipantRequest>,
    ) -> Result<Response<v1::RemoveParticipantResponse>, Status> {
        let req = request.get_ref();
        if let Some(node) = self.admin_elsewhere(&request, &req.room).await? {
            return forward(&self.state, &node, request, |mut c, r| async move {
                c.remove_participant(r).await
            })
            .await;
        }
        let req = request.get_ref();
        let now = self.state.clock.now();
        let gone = self
            .state
            .rooms()
            .remove_participant(&req.room, &req.identity, now)?;
        self.state.forget(gone.peer, DisconnectReason::Removed);
        self.state.disconnect(vec![(gone.shard, gone.peer)]).await?;
        Ok(Response::new(v1::RemoveParticipantResponse {}))
    }

    async fn update_subscriptions(
        &self,
        request: Request<v1::UpdateSubscriptionsRequest>,
    ) -> Result<Response<v1::UpdateSubscriptionsResponse>, Status> {
        let req = request.get_ref();
        if let Some(node) = self.admin_elsewhere(&request, &req.room).await? {
            return forward(&self.state, &node, request, |mut c, r| async move {
                c.update_subscriptions(r).await
            })
            .await;
        }
        let req = request.get_ref();
        let peer = self
            .state
            .rooms()
            .participant(&req.room, &req.identity)?
            .peer;
        self.state
            .update_subscriptions(peer, &req.track_ids, req.subscribe)?;
        Ok(Response::new(v1::UpdateSubscriptionsResponse {}))
    }

    async fn mute_published_track(
        &self,
        request: Request<v1::MutePublishedTrackRequest>,
    ) -> Result<Response<v1::MutePublishedTrackResponse>, Status> {
        let req = request.get_ref();
        if let Some(node) = self.admin_elsewhere(&request, &req.room).await? {
            return forward(&self.state, &node, request, |mut c, r| async move {
                c.mute_published_track(r).await
            })
            .await;
        }
        let req = request.get_ref();
        let peer = self
            .state
            .rooms()
            .participant(&req.room, &req.identity)?
            .peer;
        let track = self.state.mute_track(peer, &req.track_id, req.muted)?;
        Ok(Response::new(v1::MutePublishedTrackResponse {
            track: Some(track),
        }))
    }

    async fn send_data(
        &self,
        request: Request<v1::SendDataRequest>,
    ) -> Result<Response<v1::SendDataResponse>, Status> {
        let req = request.get_ref();
        self.state
            .auth
            .check(bearer_of(&request), Act::Admin { room: &req.room })?;
        validate_name(&req.channel, NameKind::Channel)?;
        if req.payload.len() > MAX_SEND_DATA_BYTES {
            return Err(Status::invalid_argument(format!(
                "payload is {} bytes long, more than {MAX_SEND_DATA_BYTES}",
                req.payload.len()
            )));
        }
        if let Some(node) = self.elsewhere(&request, &req.room, Place::No).await? {
            return forward(&self.state, &node, request, |mut c, r| async move {
                c.send_data(r).await
            })
            .await;
        }
        let req = request.get_ref();
        // One message per shard that holds a recipient: every member there, or the
        // one participant named.
        let messages: Vec<(usize, SendData)> = {
            let rooms = self.state.rooms();
            let room = rooms.get(&req.room)?;
            // Copied once; every shard's message shares it.
            let payload = Bytes::copy_from_slice(&req.payload);
            let data = |to| SendData {
                room: room.id,
                to,
                label: req.channel.clone(),
                binary: true,
                payload: payload.clone(),
            };
            if req.identity.is_empty() {
                let shards: BTreeSet<usize> = room.participants().map(|p| p.shard).collect();
                shards.into_iter().map(|s| (s, data(None))).collect()
            } else {
                let p = rooms.participant(&req.room, &req.identity)?;
                vec![(p.shard, data(Some(p.peer)))]
            }
        };
        let recipients = self.state.send_data(messages).await?;
        Ok(Response::new(v1::SendDataResponse {
            recipients: u32::try_from(recipients).unwrap_or(u32::MAX),
        }))
    }
}

#[tonic::async_trait]
impl NodeService for ControlApi {
    async fn drain(
        &self,
        request: Request<v1::DrainRequest>,
    ) -> Result<Response<v1::DrainResponse>, Status> {
        self.state.auth.check(bearer_of(&request), Act::Drain)?;
        let started = self.state.drain().request();
        if started {
            tracing::info!(event = "drain_requested", by = "grpc", "drain asked for");
        }
        Ok(Response::new(v1::DrainResponse { started }))
    }

    async fn open_link(
        &self,
        request: Request<v1::OpenLinkRequest>,
    ) -> Result<Response<v1::OpenLinkResponse>, Status> {
        let state = &self.state;
        let (room, cluster) = self.link_call(
            &request,
            &request.get_ref().room,
            &request.get_ref().node_id,
        )?;
        // The link's room is here: owned or spanned. It is not placed: the caller
        // saw this node host it.
        if !cluster.spans(&room) && state.room_owner(&room, Place::No, 0).await?.is_some() {
            return Err(Status::failed_precondition(format!(
                "room {room:?} is neither owned nor spanned by this node"
            )));
        }
        let answer = cluster::cascade::accept(state, &cluster, &room, request.into_inner()).await?;
        Ok(Response::new(answer))
    }

    async fn get_spanned_room(
        &self,
        request: Request<v1::GetSpannedRoomRequest>,
    ) -> Result<Response<v1::Room>, Status> {
        let (room, _) = self.link_call(
            &request,
            &request.get_ref().room,
            &request.get_ref().node_id,
        )?;
        let rooms = self.state.rooms();
        let room = rooms.get(&room)?;
        Ok(Response::new(self.state.room_message(room)))
    }

    async fn get_room_share(
        &self,
        request: Request<v1::GetSpannedRoomRequest>,
    ) -> Result<Response<v1::RoomShare>, Status> {
        let (room, cluster) = self.link_call(
            &request,
            &request.get_ref().room,
            &request.get_ref().node_id,
        )?;
        let held = {
            let rooms = self.state.rooms();
            self.state.room_message(rooms.get(&room)?)
        };
        let count_only = request.get_ref().count_only;
        let (served, share_taken, host) = self.state.room_share(&cluster, &room, count_only).await;
        Ok(Response::new(v1::RoomShare {
            room: Some(held),
            share_taken,
            host_with_room: host.map(|n| n.id).unwrap_or_default(),
            served,
        }))
    }

    async fn hand_over_room(
        &self,
        request: Request<v1::HandOverRoomRequest>,
    ) -> Result<Response<v1::HandOverRoomResponse>, Status> {
        let (room, cluster) = self.link_call(
            &request,
            &request.get_ref().room,
            &request.get_ref().node_id,
        )?;
        // A draining node hands its own rooms over: it takes none (the caller tries
        // another node).
        self.state.drain().check_open()?;
        let request = request.into_inner();
        let held = request
            .held
            .ok_or_else(|| Status::invalid_argument("held: the room's settings are missing"))?;
        // A room this node could not open is refused before it is taken up: the
        // draining node takes it back and offers it to another.
        let spec = room_spec(&room, held);
        self.state.rooms().check_fits(&spec)?;
        cluster.take_handed(&room).await?;
        self.state.open_handed(&request.node_id, spec)?;
        Ok(Response::new(v1::HandOverRoomResponse {}))
    }

    async fn link_tracks(
        &self,
        request: Request<v1::LinkTracksRequest>,
    ) -> Result<Response<v1::LinkTracksResponse>, Status> {
        let (room, _) = self.link_call(
            &request,
            &request.get_ref().room,
            &request.get_ref().node_id,
        )?;
        let (tracks, replaced) = self.state.take_link_tracks(&room, request.into_inner())?;
        // A later join of the identity on the other node replaces the participant
        // here, as one on this node would (its clients then hear of the other).
        for peer in replaced {
            self.state
                .leave(peer, DisconnectReason::DuplicateIdentity)
                .await;
        }
        Ok(Response::new(v1::LinkTracksResponse {
            tracks: u32::try_from(tracks).unwrap_or(u32::MAX),
        }))
    }

    async fn get_node_info(
        &self,
        request: Request<v1::GetNodeInfoRequest>,
    ) -> Result<Response<v1::NodeInfo>, Status> {
        // An operator's read, as listing rooms is.
        self.state.auth.check(bearer_of(&request), Act::ListRooms)?;
        let reports = self.state.shard_reports().await?;
        let max_peers = self.state.max_peers_per_shard;
        let shards: Vec<v1::ShardInfo> = reports
            .iter()
            .map(|r| v1::ShardInfo {
                index: saturating_u32(r.index),
                udp_addr: r.local_addr.to_string(),
                peers: saturating_u32(r.peers),
                max_peers: saturating_u32(max_peers),
                load: load(r.peers, max_peers),
                datagrams_received: r.driver.datagrams_received,
                datagrams_sent: r.driver.datagrams_sent,
                bound_addrs: r.bound.iter().map(ToString::to_string).collect(),
                announced_addrs: self
                    .state
                    .candidates(r.index)
                    .iter()
                    .flat_map(|c| c.iter())
                    .map(ToString::to_string)
                    .collect(),
            })
            .collect();
        let peers: usize = reports.iter().map(|r| r.peers).sum();
        let (rooms, participants, max_rooms) = {
            let d = self.state.rooms();
            (d.room_count(), d.participant_count(), d.limits().max_rooms)
        };
        let (pending, pending_stats) = {
            let m = self.state.members();
            (m.pending.len(), m.pending.stats())
        };
        Ok(Response::new(v1::NodeInfo {
            version: env!("CARGO_PKG_VERSION").to_owned(),
            shards,
            rooms: saturating_u32(rooms),
            participants: saturating_u32(participants),
            max_rooms: saturating_u32(max_rooms),
            load: load(peers, max_peers.saturating_mul(reports.len())),
            uptime_ms: self.state.clock.now().as_micros() / 1000,
            auth_refusals: self.state.auth.refusal_counts().into_iter().collect(),
            pending_sessions: saturating_u32(pending),
            pending_refusals: [
                ("node".to_owned(), pending_stats.refused_node),
                ("address".to_owned(), pending_stats.refused_address),
            ]
            .into_iter()
            .collect(),
            session_setup_timeouts: pending_stats.timed_out,
            connections_refused: self.state.limit_counters.counts().into_iter().collect(),
            slow_signal_readers: self.state.slow_signal_readers.load(Ordering::Relaxed),
            node_id: self
                .state
                .cluster()
                .map(|c| c.node_id().to_owned())
                .unwrap_or_default(),
            cluster: self.state.cluster().map(|c| cluster_info(c)),
        }))
    }
}

/// The cluster as `cluster`'s node sees it.
fn cluster_info(cluster: &Cluster) -> v1::ClusterInfo {
    let rooms = cluster.rooms_by_node();
    v1::ClusterInfo {
        member: cluster.is_member(),
        etcd_reachable: cluster.etcd_reachable(),
        nodes: cluster
            .nodes()
            .into_iter()
            .map(|n| v1::ClusterNode {
                rooms: saturating_u32(rooms.get(&n.id).copied().unwrap_or(0)),
                id: n.id,
                grpc_url: n.grpc_url,
                http_url: n.http_url,
                region: n.region,
                shards: n.shards,
                peers: n.peers,
                max_peers: n.max_peers,
                draining: n.draining,
            })
            .collect(),
    }
}

/// A shard's congestion report as the API gives it.
fn connection_stats(r: &CongestionReport) -> v1::ConnectionStats {
    v1::ConnectionStats {
        estimated_bps: r.estimate_bps.unwrap_or(0),
        incoming_bps: r.incoming_bps.unwrap_or(0),
        rtt_ms: r.rtt_ms.unwrap_or(0.0),
        estimate_decreases: r.decreases,
        packets_stamped: r.stamped,
        feedback_received: r.feedback_received,
        feedback_sent: r.feedback_sent,
        layers: r
            .layers
            .iter()
            .map(|l| v1::LayerStats {
                track_id: super::media::track_name(l.track),
                rid: l.rid.clone().unwrap_or_default(),
                current: l.current.map_or(-1, i32::from),
                target: i32::from(l.target),
                switches: l.switches,
                temporal_current: l.temporal_current.map_or(-1, i32::from),
                temporal_target: l.temporal_target.map_or(-1, i32::from),
                frames_dropped: l.frames_dropped,
            })
            .collect(),
        probe_clusters: r.probe_clusters,
        last_probe_bps: r.last_probe_bps.unwrap_or(0),
        earned_burst_bytes: r.earned_burst_bytes.unwrap_or(0).max(0) as u64,
        pacer_burst_bytes: r.pacer_burst_bytes.max(0) as u64,
        data_queued_bytes: r.data_queued as u64,
        data_relay_dropped: r.relay_dropped,
        data_relay_holds: r.relay_holds,
        data_relay_held: r.relay_held,
    }
}

/// The room `room` (normalised) as another node of the cluster holds it (`held`,
/// its [`ControlState::room_message`]): its settings and metadata.
pub(crate) fn room_spec(room: &str, held: v1::Room) -> RoomSpec {
    RoomSpec {
        name: room.to_owned(),
        max_participants: held.max_participants,
        empty_timeout: Duration::from_secs(held.empty_timeout_secs.into()),
        metadata: held.metadata,
    }
}

impl From<RoomError> for Status {
    fn from(e: RoomError) -> Status {
        let message = e.to_string();
        match e {
            RoomError::InvalidName { .. }
            | RoomError::MetadataTooLong(_)
            | RoomError::TooManyParticipantsAsked { .. }
            | RoomError::EmptyTimeoutTooLong(_) => Status::invalid_argument(message),
            RoomError::TooManyRooms(_) | RoomError::RoomFull { .. } => {
                Status::resource_exhausted(message)
            }
            RoomError::RoomExists(_) | RoomError::ParticipantExists { .. } => {
                Status::already_exists(message)
            }
            RoomError::RoomNotFound(_) | RoomError::ParticipantNotFound { .. } => {
                Status::not_found(message)
            }
        }
    }
}

/// The bearer token of a request's `authorization` metadata.
pub(super) fn bearer_of<T>(request: &Request<T>) -> Option<&str> {
    request
        .metadata()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(super::auth::bearer)
}

/// A page size from the wire: the directory clamps it.
fn page_size(n: u32) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

/// `used / capacity`, 1.0 when there is no capacity.
fn load(used: usize, capacity: usize) -> f32 {
    if capacity == 0 {
        return 1.0;
    }
    (used as f64 / capacity as f64) as f32
}

fn saturating_u32(n: impl TryInto<u32>) -> u32 {
    n.try_into().unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests;
