//! Draining the node before it stops (SIGTERM, or `NodeService.Drain`).
//!
//! Once asked, the node takes no new session or room: joins and CreateRoom are
//! refused with UNAVAILABLE (HTTP 503), `/healthz` answers 503 `draining` and gRPC
//! health turns NOT_SERVING, so a load balancer sends no one here. Everyone
//! connected is told: a signalling participant gets `leave` with SERVER_SHUTDOWN,
//! and every shard shuts its peers' SCTP associations down (RFC 9260 §9.2: what is
//! queued and in flight is delivered first; SHUTDOWN, SHUTDOWN ACK, SHUTDOWN
//! COMPLETE) and then closes their DTLS with close_notify. In a cluster, the rooms
//! the node owns are handed over to other nodes first, and its participants stay
//! linked to their rooms' new owners until those links are up (at most 5 s), so
//! that each room outlives the drain ([`super::cluster::handover`]). The drain is
//! over when
//! no shard holds a peer; the process waits for that at most `--drain-timeout`
//! (see `main.rs`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use shoal_proto::v1::DisconnectReason;
use tokio::sync::Notify;
use tonic::Status;
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;

use super::grpc::ControlState;
use crate::driver::ShardCommand;

/// What a refused join or CreateRoom says while the node drains.
pub const DRAINING: &str = "the node is draining; join through another node";
/// How often a drain asks the shards whether their peers are gone.
const POLL_INTERVAL: Duration = Duration::from_millis(100);

/// Whether the node drains, and whether the drain is over. Shared by the control
/// thread and the process's main thread.
#[derive(Debug, Default)]
pub struct Drain {
    requested: AtomicBool,
    /// The node hands its rooms over: links between nodes are still admitted.
    handing_over: AtomicBool,
    finished: AtomicBool,
    wake: Notify,
}

impl Drain {
    /// Asks for the drain; true if this call started it.
    pub fn request(&self) -> bool {
        // Links stay admitted from the first moment until the rooms are handed over.
        if !self.is_requested() {
            self.handing_over.store(true, Ordering::SeqCst);
        }
        let first = !self.requested.swap(true, Ordering::SeqCst);
        if first {
            self.wake.notify_one();
        }
        first
    }

    /// Whether a drain was asked for.
    pub fn is_requested(&self) -> bool {
        self.requested.load(Ordering::SeqCst)
    }

    /// Whether the drain is over: every participant told, no peer left on any shard.
    pub fn is_finished(&self) -> bool {
        self.finished.load(Ordering::SeqCst)
    }

    /// The refusal for joins and CreateRoom while draining; `Ok` otherwise.
    pub fn check_open(&self) -> Result<(), Status> {
        if self.is_requested() {
            Err(Status::unavailable(DRAINING))
        } else {
            Ok(())
        }
    }

    /// [`Drain::check_open`] for an admission, `link` saying whether it is a link
    /// between cluster nodes: those are admitted while the draining node hands its
    /// rooms over, so that its participants stay linked to the rooms' new owners.
    pub fn check_admission(&self, link: bool) -> Result<(), Status> {
        if link && self.handing_over.load(Ordering::SeqCst) {
            return Ok(());
        }
        self.check_open()
    }
}

/// Waits for a drain to be asked for, then runs it: gRPC health NOT_SERVING, every
/// participant told to leave, every shard draining, until no shard holds a peer.
pub async fn run(state: Arc<ControlState>, health: HealthReporter) {
    let drain = state.drain().clone();
    while !drain.is_requested() {
        drain.wake.notified().await;
    }
    let started = Instant::now();
    for name in super::HEALTH_NAMES {
        health
            .set_service_status(name, ServingStatus::NotServing)
            .await;
    }
    let handed = match state.cluster().cloned() {
        Some(cluster) => state.hand_rooms_over(&cluster).await,
        None => 0,
    };
    drain.handing_over.store(false, Ordering::SeqCst);
    // Links admitted until now are in the directory (the lock below), and told.
    let told = tell_everyone(&state);
    tracing::info!(
        event = "drain_started",
        participants = told,
        rooms_handed_over = handed,
        "draining: joins refused, participants told to leave"
    );
    let shards = state.clone();
    let sent = tokio::task::spawn_blocking(move || {
        for shard in shards.shards() {
            if let Err(e) = shard.send(ShardCommand::Drain) {
                tracing::warn!(event = "drain_failed", "a shard cannot drain: {e}");
            }
        }
    })
    .await;
    if sent.is_err() {
        tracing::warn!(event = "drain_failed", "asking the shards to drain failed");
    }
    loop {
        tokio::time::sleep(POLL_INTERVAL).await;
        // A shard that cannot answer is failing as a whole; the main thread's
        // deadline ends the wait.
        if let Ok(reports) = state.shard_reports().await
            && reports.iter().all(|r| r.peers == 0)
        {
            break;
        }
    }
    drain.finished.store(true, Ordering::SeqCst);
    tracing::info!(
        event = "drained",
        millis = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        "drained: no peer left"
    );
}

/// Takes every participant out of the directory with SERVER_SHUTDOWN: a
/// signalling participant gets its `leave`. Their peers stay on their shards, which
/// close them once their associations are shut down. Returns how many there were.
fn tell_everyone(state: &ControlState) -> usize {
    // An admission holds the directory from its drain check until its member is in
    // (`admit_now`): once the lock is free, every admission that passed the check is
    // in the members, and every later one sees the drain.
    drop(state.rooms());
    let peers: Vec<_> = state.members().by_peer.keys().copied().collect();
    peers
        .into_iter()
        .filter(|&peer| {
            state
                .forget(peer, DisconnectReason::ServerShutdown)
                .is_some()
        })
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drain_starts_once_and_refuses_joins_from_then_on() {
        let drain = Drain::default();
        assert!(drain.check_open().is_ok());
        assert!(drain.request());
        assert!(!drain.request(), "a second request starts nothing");
        let refused = drain.check_open().unwrap_err();
        assert_eq!(refused.code(), tonic::Code::Unavailable);
        assert_eq!(refused.message(), DRAINING);
        assert!(!drain.is_finished());
    }
}
