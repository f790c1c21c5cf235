//! The node's Prometheus metrics (`GET /metrics`, text format 0.0.4, encoded by
//! `prometheus-client`).
//!
//! Shards keep plain counters in their own thread ([`ShardStats`], [`DriverStats`],
//! the tick and batch histograms) and never share them: a scrape asks every shard
//! for a snapshot over its command channel, as `NodeService.GetNodeInfo` does, so
//! the packet path takes no lock and touches no atomic for metrics. The control
//! plane's own counters are atomics it already keeps (auth refusals, connection
//! limits, pending sessions) and the families here: joins, join refusals, leaves,
//! join latency, gRPC and HTTP requests.
//!
//! Every label's values are bounded: gRPC methods are the ones the node serves (from
//! their descriptors; anything else is `other`), HTTP routes are the router's
//! templates (`/whip/{room}`, never a room's name; `unmatched` otherwise), reasons
//! and kinds are fixed names. docs/operations.md lists the metrics.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::extract::{MatchedPath, Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use prost::Message;
use shoal_proto::v1::DisconnectReason;
use tonic::Code;

use super::auth::Refusal;
use super::connections::Limit;
use super::grpc::ControlState;
use super::signal::code_name;
use crate::driver::{Histogram as ShardHistogram, ShardReport};

/// The `Content-Type` of `/metrics`.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// Bounds of `shoal_join_seconds`: admission to the participant's DTLS handshake done.
const JOIN_SECONDS_BOUNDS: [f64; 12] = [
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];
/// Bounds of `shoal_shard_estimated_bandwidth_bps`.
/// (The estimator's ceiling is 100 Mbit/s.)
const ESTIMATE_BOUNDS: [u64; 7] = [
    100_000,
    300_000,
    1_000_000,
    3_000_000,
    10_000_000,
    30_000_000,
    100_000_000,
];

/// How a participant came in: a signalling connection, a WHIP or a WHEP session.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum JoinKind {
    /// `/signal` or `SignalService`.
    Signal,
    /// `POST /whip/{room}`.
    Whip,
    /// `POST /whep/{room}`.
    Whep,
}

impl JoinKind {
    /// The label value.
    pub fn name(self) -> &'static str {
        match self {
            JoinKind::Signal => "signal",
            JoinKind::Whip => "whip",
            JoinKind::Whep => "whep",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct KindLabel {
    kind: &'static str,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RefusalLabels {
    kind: &'static str,
    reason: &'static str,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct GrpcLabels {
    method: Arc<str>,
    code: &'static str,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct HttpLabels {
    route: Arc<str>,
    method: &'static str,
    status: u16,
}

/// The control plane's counters and histograms (atomics inside, shared by every
/// task that updates them).
#[derive(Debug)]
pub struct ControlMetrics {
    joins: Family<KindLabel, Counter>,
    join_refusals: Family<RefusalLabels, Counter>,
    leaves: Family<ReasonLabel, Counter>,
    join_seconds: Histogram,
    grpc: Family<GrpcLabels, Counter>,
    http: Family<HttpLabels, Counter>,
    /// `/package.Service/Method` of every RPC the node serves.
    grpc_methods: HashSet<Arc<str>>,
    other: Arc<str>,
    unmatched: Arc<str>,
}

impl Default for ControlMetrics {
    fn default() -> Self {
        ControlMetrics::new()
    }
}

impl ControlMetrics {
    /// Empty metrics, knowing the methods of every service the node serves.
    pub fn new() -> ControlMetrics {
        let sets: [&[u8]; 4] = [
            shoal_proto::v1::FILE_DESCRIPTOR_SET,
            tonic_health::pb::FILE_DESCRIPTOR_SET,
            tonic_reflection::pb::v1::FILE_DESCRIPTOR_SET,
            tonic_reflection::pb::v1alpha::FILE_DESCRIPTOR_SET,
        ];
        let mut grpc_methods = HashSet::new();
        for set in sets {
            // The node's own descriptors, built into the binary: they decode.
            let Ok(set) = prost_types::FileDescriptorSet::decode(set) else {
                continue;
            };
            for file in &set.file {
                for service in &file.service {
                    for method in &service.method {
                        grpc_methods.insert(Arc::from(format!(
                            "/{}.{}/{}",
                            file.package(),
                            service.name(),
                            method.name()
                        )));
                    }
                }
            }
        }
        ControlMetrics {
            joins: Family::default(),
            join_refusals: Family::default(),
            leaves: Family::default(),
            join_seconds: Histogram::new(JOIN_SECONDS_BOUNDS),
            grpc: Family::default(),
            http: Family::default(),
            grpc_methods,
            other: Arc::from("other"),
            unmatched: Arc::from("unmatched"),
        }
    }

    /// A participant admitted into a room.
    pub fn joined(&self, kind: JoinKind) {
        self.joins
            .get_or_create(&KindLabel { kind: kind.name() })
            .inc();
    }

    /// A join refused with `code` (auth refusals are counted by the auth checks).
    pub fn join_refused(&self, kind: JoinKind, code: Code) {
        let labels = RefusalLabels {
            kind: kind.name(),
            reason: code_name(code),
        };
        self.join_refusals.get_or_create(&labels).inc();
    }

    /// A participant gone for `reason`.
    pub fn left(&self, reason: DisconnectReason) {
        self.leaves
            .get_or_create(&ReasonLabel {
                reason: leave_reason(reason),
            })
            .inc();
    }

    /// A participant connected (DTLS done) `took` after it was admitted.
    pub fn connected_after(&self, took: Duration) {
        self.join_seconds.observe(took.as_secs_f64());
    }

    /// A gRPC request to `path` answered with `code` (a stream when it starts).
    pub fn grpc_request(&self, path: &str, code: Code) {
        let method = self
            .grpc_methods
            .get(path)
            .cloned()
            .unwrap_or_else(|| self.other.clone());
        let labels = GrpcLabels {
            method,
            code: code_name(code),
        };
        self.grpc.get_or_create(&labels).inc();
    }

    fn http_request(&self, route: Arc<str>, method: &Method, status: u16) {
        let labels = HttpLabels {
            route,
            method: method_name(method),
            status,
        };
        self.http.get_or_create(&labels).inc();
    }

    /// A request for a path no route matches, answered with `status`.
    pub fn http_unmatched(&self, method: &Method, status: u16) {
        self.http_request(self.unmatched.clone(), method, status);
    }
}

/// Axum middleware (on every route) counting each request by route template, method
/// and status.
pub async fn count_http(
    State(state): State<Arc<ControlState>>,
    request: Request,
    next: Next,
) -> Response {
    let metrics = state.metrics();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| metrics.unmatched.clone(), |p| Arc::from(p.as_str()));
    let method = request.method().clone();
    let response = next.run(request).await;
    metrics.http_request(route, &method, response.status().as_u16());
    response
}

/// The text of `/metrics`: the control plane's metrics, then every shard's from
/// `reports` (in shard order) with the depth of its command queue.
pub fn render(state: &ControlState, reports: Vec<ShardReport>, queued: Vec<usize>) -> String {
    let m = state.metrics();
    let mut registry = Registry::default();
    registry.register(
        "shoal_joins",
        "Participants admitted into a room, by how they came (signal, whip, whep)",
        m.joins.clone(),
    );
    registry.register(
        "shoal_join_refusals",
        "Joins admission refused, by how they came and the status they got (not_found: no \
         such room; resource_exhausted: every shard full; unavailable: too many sessions not \
         yet connected; ...)",
        m.join_refusals.clone(),
    );
    registry.register(
        "shoal_leaves",
        "Participants gone, by reason (the leave reason sent to them)",
        m.leaves.clone(),
    );
    registry.register(
        "shoal_join_seconds",
        "From a participant's admission to its DTLS handshake done",
        m.join_seconds.clone(),
    );
    registry.register(
        "shoal_grpc_requests",
        "gRPC requests by method and status code (a stream counted when it starts)",
        m.grpc.clone(),
    );
    registry.register(
        "shoal_http_requests",
        "HTTP requests by route template, method and status",
        m.http.clone(),
    );
    let (rooms, participants) = {
        let d = state.rooms();
        (d.room_count(), d.participant_count())
    };
    let (pending, pending_stats) = {
        let members = state.members();
        (members.pending.len(), members.pending.stats())
    };
    let media_commands = {
        let backlog = state.media_backlog();
        (backlog.waiting(), backlog.delayed(), backlog.dropped())
    };
    registry.register_collector(Box::new(Snapshot {
        rooms,
        participants,
        pending,
        draining: state.drain().is_requested(),
        refused_node: pending_stats.refused_node,
        refused_address: pending_stats.refused_address,
        timed_out: pending_stats.timed_out,
        auth: Refusal::ALL
            .iter()
            .map(|r| (r.name(), state.auth().refusal_count(*r)))
            .collect(),
        limits: Limit::ALL
            .iter()
            .map(|l| (l.name(), state.limit_counters().count_of(*l)))
            .collect(),
        slow_signal_readers: state.slow_signal_readers().load(Ordering::Relaxed),
        stale_answers: state.stale_answers().load(Ordering::Relaxed),
        media_commands,
        uptime: state.clock().now().as_micros() as f64 / 1e6,
        reports,
        queued,
    }));
    let mut text = String::new();
    // Writing to a String does not fail, and every name and label here is valid.
    let _ = prometheus_client::encoding::prometheus_text::encode(&mut text, &registry);
    text
}

/// What a scrape read once: the node's gauges and atomics, and the shards' reports.
#[derive(Debug)]
struct Snapshot {
    rooms: usize,
    participants: usize,
    pending: usize,
    draining: bool,
    refused_node: u64,
    refused_address: u64,
    timed_out: u64,
    auth: Vec<(&'static str, u64)>,
    limits: Vec<(&'static str, u64)>,
    slow_signal_readers: u64,
    stale_answers: u64,
    /// Media commands waiting for a shard's queue, delayed so, and dropped.
    media_commands: (usize, u64, u64),
    uptime: f64,
    reports: Vec<ShardReport>,
    queued: Vec<usize>,
}

impl Collector for Snapshot {
    fn encode(&self, mut e: DescriptorEncoder) -> fmt::Result {
        gauge(&mut e, "shoal_rooms", "Rooms open on the node", self.rooms)?;
        gauge(
            &mut e,
            "shoal_participants",
            "Participants in the node's rooms",
            self.participants,
        )?;
        gauge(
            &mut e,
            "shoal_pending_sessions",
            "Sessions admitted whose connection (ICE and DTLS) is not up yet",
            self.pending,
        )?;
        gauge(
            &mut e,
            "shoal_draining",
            "1 once the node drains (SIGTERM or NodeService.Drain): no new joins",
            usize::from(self.draining),
        )?;
        let mut m = e.encode_descriptor(
            "shoal_uptime_seconds",
            "Seconds since the node started",
            None,
            MetricType::Gauge,
        )?;
        ConstGauge::new(self.uptime).encode(m.encode_family(&[("version", VERSION)])?)?;
        counters(
            &mut e,
            "shoal_pending_refusals",
            "Sessions refused because too many had not connected yet: node \
             (--max-pending-sessions) or address (--max-pending-sessions-per-address)",
            [
                ([("limit", "node")], self.refused_node),
                ([("limit", "address")], self.refused_address),
            ],
        )?;
        counter(
            &mut e,
            "shoal_session_setup_timeouts",
            "Sessions removed for not connecting within --session-setup-timeout",
            self.timed_out,
        )?;
        counters(
            &mut e,
            "shoal_auth_refusals",
            "Requests refused for want of a valid access token or grant, by reason",
            self.auth.iter().map(|&(r, n)| ([("reason", r)], n)),
        )?;
        counters(
            &mut e,
            "shoal_connections_refused",
            "Connections the HTTP and gRPC listeners refused or cut off, by the limit \
             they hit",
            self.limits.iter().map(|&(l, n)| ([("limit", l)], n)),
        )?;
        counter(
            &mut e,
            "shoal_slow_signal_readers",
            "Signalling connections ended because their client did not read them fast \
             enough",
            self.slow_signal_readers,
        )?;
        counter(
            &mut e,
            "shoal_stale_answers",
            "Answers ignored because the offer they name is no longer out (it timed out \
             or glare dropped it)",
            self.stale_answers,
        )?;
        let (waiting, delayed, dropped) = self.media_commands;
        gauge(
            &mut e,
            "shoal_media_commands_waiting",
            "Media commands (publish, subscribe and their ends) waiting for a shard's full \
             queue",
            waiting,
        )?;
        counter(
            &mut e,
            "shoal_media_commands_delayed",
            "Media commands a shard's full queue refused at first, sent once it took them",
            delayed,
        )?;
        counter(
            &mut e,
            "shoal_media_commands_dropped",
            "Media commands dropped: the shard was gone, or had not taken the 65536 \
             waiting for it",
            dropped,
        )?;
        self.encode_shards(&mut e)
    }
}

impl Snapshot {
    fn encode_shards(&self, e: &mut DescriptorEncoder) -> fmt::Result {
        let shard_labels: Vec<[(&str, String); 1]> = self
            .reports
            .iter()
            .map(|r| [("shard", r.index.to_string())])
            .collect();
        let gauges: [(&str, &str, fn(&ShardReport) -> u64); 8] = [
            ("shoal_shard_peers", "Peers the shard holds", |r| {
                r.census.peers as u64
            }),
            (
                "shoal_shard_rooms",
                "Rooms with a member on the shard",
                |r| r.census.rooms as u64,
            ),
            (
                "shoal_shard_tracks",
                "Published tracks on the shard (mirrors of other shards' among them)",
                |r| r.census.tracks as u64,
            ),
            (
                "shoal_shard_subscriptions",
                "Subscriptions on the shard: one per subscriber and track",
                |r| r.census.subscriptions as u64,
            ),
            (
                "shoal_shard_associations",
                "SCTP associations on the shard",
                |r| r.census.associations as u64,
            ),
            (
                "shoal_shard_data_channels",
                "Data channels on the shard, open, opening or closing",
                |r| r.census.data_channels as u64,
            ),
            (
                "shoal_shard_entities",
                "Entities in the shard's World (peers, tracks, subscriptions and the \
                 shard's own)",
                |r| r.entities as u64,
            ),
            (
                "shoal_shard_shared_rooms",
                "Rooms whose members the shard shares with other shards",
                |r| r.shared_rooms as u64,
            ),
        ];
        for (name, help, value) in gauges {
            let mut m = e.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for (r, labels) in self.reports.iter().zip(&shard_labels) {
                ConstGauge::new(i64::try_from(value(r)).unwrap_or(i64::MAX))
                    .encode(m.encode_family(labels)?)?;
            }
        }
        let mut m = e.encode_descriptor(
            "shoal_shard_command_queue_depth",
            "Commands from the control plane and sibling shards waiting in the shard's \
             queue",
            None,
            MetricType::Gauge,
        )?;
        for (depth, labels) in self.queued.iter().zip(&shard_labels) {
            ConstGauge::new(i64::try_from(*depth).unwrap_or(i64::MAX))
                .encode(m.encode_family(labels)?)?;
        }
        // Every counter the shards and their drivers keep, named after its field
        // and described by its doc comment.
        let Some(first) = self.reports.first() else {
            return Ok(());
        };
        let mut names = Vec::new();
        first
            .shard
            .each(|name, help, _| names.push((format!("shoal_shard_{name}"), help)));
        first
            .driver
            .each(|name, help, _| names.push((format!("shoal_io_{name}"), help)));
        let values: Vec<Vec<u64>> = self
            .reports
            .iter()
            .map(|r| {
                let mut v = Vec::with_capacity(names.len());
                r.shard.each(|_, _, n| v.push(n));
                r.driver.each(|_, _, n| v.push(n));
                v
            })
            .collect();
        for (i, (name, help)) in names.iter().enumerate() {
            let mut m = e.encode_descriptor(name, help.trim(), None, MetricType::Counter)?;
            for (v, labels) in values.iter().zip(&shard_labels) {
                let value = v.get(i).copied().unwrap_or(0);
                ConstCounter::new(value).encode(m.encode_family(labels)?)?;
            }
        }
        let mut m = e.encode_descriptor(
            "shoal_shard_tick_seconds",
            "How long a shard took over each batch of datagrams",
            None,
            MetricType::Histogram,
        )?;
        for (r, labels) in self.reports.iter().zip(&shard_labels) {
            histogram(m.encode_family(labels)?, &r.tick_nanos, 1e-9)?;
        }
        let mut m = e.encode_descriptor(
            "shoal_shard_batch_datagrams",
            "Datagrams per batch a shard ticked over",
            None,
            MetricType::Histogram,
        )?;
        for (r, labels) in self.reports.iter().zip(&shard_labels) {
            histogram(m.encode_family(labels)?, &r.batch_sizes, 1.0)?;
        }
        let mut m = e.encode_descriptor(
            "shoal_shard_estimated_bandwidth_bps",
            "The shard's peers' send-side bandwidth estimates now, bit/s (peers whose \
             feedback has not come yet are left out)",
            None,
            MetricType::Histogram,
        )?;
        for (r, labels) in self.reports.iter().zip(&shard_labels) {
            let mut h = ShardHistogram::new(&ESTIMATE_BOUNDS);
            for &bps in &r.census.estimates_bps {
                h.observe(bps);
            }
            histogram(m.encode_family(labels)?, &h, 1.0)?;
        }
        Ok(())
    }
}

const VERSION: &str = env!("CARGO_PKG_VERSION");

fn gauge(e: &mut DescriptorEncoder, name: &str, help: &str, value: usize) -> fmt::Result {
    let m = e.encode_descriptor(name, help, None, MetricType::Gauge)?;
    ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX)).encode(m)
}

fn counter(e: &mut DescriptorEncoder, name: &str, help: &str, value: u64) -> fmt::Result {
    let m = e.encode_descriptor(name, help, None, MetricType::Counter)?;
    ConstCounter::new(value).encode(m)
}

fn counters<L: EncodeLabelSet>(
    e: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    rows: impl IntoIterator<Item = (L, u64)>,
) -> fmt::Result {
    let mut m = e.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (labels, value) in rows {
        ConstCounter::new(value).encode(m.encode_family(&labels)?)?;
    }
    Ok(())
}

/// A shard's histogram, its bounds and sum scaled by `unit` (ns to s: 1e-9).
fn histogram(mut m: MetricEncoder, h: &ShardHistogram, unit: f64) -> fmt::Result {
    let buckets: Vec<(f64, u64)> = h
        .bounds
        .iter()
        .zip(&h.counts)
        .map(|(&b, &n)| (b as f64 * unit, n))
        .collect();
    m.encode_histogram::<prometheus_client::encoding::NoLabelSet>(
        h.sum as f64 * unit,
        h.count,
        &buckets,
        None,
    )
}

/// A leave reason as a label value: its proto name without the prefix, in lower case.
pub fn leave_reason(reason: DisconnectReason) -> &'static str {
    match reason {
        DisconnectReason::Unspecified => "unspecified",
        DisconnectReason::ClientLeft => "client_left",
        DisconnectReason::Removed => "removed",
        DisconnectReason::RoomDeleted => "room_deleted",
        DisconnectReason::DuplicateIdentity => "duplicate_identity",
        DisconnectReason::ConnectionLost => "connection_lost",
        DisconnectReason::ServerShutdown => "server_shutdown",
        DisconnectReason::SlowReceiver => "slow_receiver",
        DisconnectReason::ConnectionTimeout => "connection_timeout",
        DisconnectReason::SignalSlowReader => "signal_slow_reader",
        DisconnectReason::NodeFenced => "node_fenced",
    }
}

fn method_name(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::PATCH => "PATCH",
        Method::OPTIONS => "OPTIONS",
        Method::HEAD => "HEAD",
        _ => "other",
    }
}
