//! The control plane's round trips to shards: a command over the shard's crossbeam
//! channel, a reply on a crossbeam channel of its own. Every receive is bounded by a
//! deadline, and these functions block, so async code runs them on tokio's blocking
//! pool (`spawn_blocking`), never on a runtime worker.

use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use shoal_components::peer::{IceCredentials, PeerId};
use shoal_components::room::RoomId;
use shoal_systems::{CommandError, CongestionReport, PeerSpec};

use crate::driver::{DriverError, SendData, ShardCommand, ShardReport, ShardSender};

/// How long the control plane waits for a shard's reply. A shard answers within one
/// loop turn (at most 16 batches of datagrams), so a shard this late is wedged.
pub const SHARD_REPLY_TIMEOUT: Duration = Duration::from_secs(2);

/// Why a shard did not do what the control plane asked.
#[derive(Debug, thiserror::Error)]
pub enum ShardError {
    /// The command could not be queued (the shard thread is gone, or waking it failed).
    #[error(transparent)]
    Driver(#[from] DriverError),
    /// No shard has this index.
    #[error("no shard {0}")]
    NoSuchShard(usize),
    /// The shard dropped the reply channel: its thread ended.
    #[error("shard {0} is not running")]
    Gone(usize),
    /// The shard did not answer in time.
    #[error("shard {shard} did not answer within {timeout:?}")]
    Timeout {
        /// The shard's index.
        shard: usize,
        /// How long the control plane waited.
        timeout: Duration,
    },
    /// The shard refused the command.
    #[error("shard {shard}: {source}")]
    Refused {
        /// The shard's index.
        shard: usize,
        /// Its reason.
        source: CommandError,
    },
}

/// Every shard's report, in shard order. All shards are asked before any reply is
/// awaited, so they answer in parallel and the whole call takes at most `timeout`.
pub fn reports(shards: &[ShardSender], timeout: Duration) -> Result<Vec<ShardReport>, ShardError> {
    let deadline = Instant::now() + timeout;
    let mut pending = Vec::with_capacity(shards.len());
    for shard in shards {
        let (reply, report) = crossbeam_channel::bounded(1);
        shard.send(ShardCommand::Stats(reply))?;
        pending.push((shard.index(), report));
    }
    pending
        .into_iter()
        .map(|(shard, report)| receive(shard, &report, deadline, timeout))
        .collect()
}

/// The congestion control state of `peers`, asked of their shards (`(shard,
/// peers)`) all at once, so the whole call takes at most `timeout`. Peers no longer
/// on their shard are left out.
pub fn congestion(
    shards: &[ShardSender],
    peers: Vec<(usize, Vec<PeerId>)>,
    timeout: Duration,
) -> Result<Vec<(PeerId, CongestionReport)>, ShardError> {
    let deadline = Instant::now() + timeout;
    let mut pending = Vec::with_capacity(peers.len());
    for (index, list) in peers {
        let shard = shards.get(index).ok_or(ShardError::NoSuchShard(index))?;
        let (reply, reports) = crossbeam_channel::bounded(1);
        shard.send(ShardCommand::Congestion(list, reply))?;
        pending.push((index, reports));
    }
    let mut out = Vec::new();
    for (index, reports) in pending {
        out.extend(receive(index, &reports, deadline, timeout)?);
    }
    Ok(out)
}

/// Adds a peer to shard `index` and waits for its verdict, at most `timeout`.
pub fn add_peer(
    shards: &[ShardSender],
    index: usize,
    spec: PeerSpec,
    timeout: Duration,
) -> Result<(), ShardError> {
    let deadline = Instant::now() + timeout;
    let shard = shards.get(index).ok_or(ShardError::NoSuchShard(index))?;
    let (reply, verdict) = crossbeam_channel::bounded(1);
    shard.send(ShardCommand::AddPeer(spec, reply))?;
    receive(index, &verdict, deadline, timeout)?.map_err(|source| ShardError::Refused {
        shard: index,
        source,
    })
}

/// Restarts `peer`'s ICE on shard `index` with `credentials` and waits for its
/// verdict, at most `timeout`.
pub fn restart_ice(
    shards: &[ShardSender],
    index: usize,
    peer: PeerId,
    credentials: IceCredentials,
    timeout: Duration,
) -> Result<(), ShardError> {
    let deadline = Instant::now() + timeout;
    let shard = shards.get(index).ok_or(ShardError::NoSuchShard(index))?;
    let (reply, verdict) = crossbeam_channel::bounded(1);
    shard.send(ShardCommand::RestartIce(peer, credentials, reply))?;
    receive(index, &verdict, deadline, timeout)?.map_err(|source| ShardError::Refused {
        shard: index,
        source,
    })
}

/// Has each shard of `indices` close the reliable data channels of `room`'s members
/// there (all asked before any reply is awaited); how many channels they closed in
/// all, with what went wrong. Each request goes on its shard's queue itself, behind
/// what is queued there and ahead of what comes after it.
pub fn close_reliable_channels(
    shards: &[ShardSender],
    room: RoomId,
    indices: &[usize],
    timeout: Duration,
) -> (usize, Vec<ShardError>) {
    let requests = indices.iter().map(|&index| (index, room));
    let (closed, errors) = ask_all(
        shards,
        requests,
        timeout,
        ShardCommand::CloseReliableChannels,
    );
    (closed.into_iter().map(|(_, n)| n).sum(), errors)
}

/// Removes each `(shard, peer)` from its shard and returns what went wrong, if
/// anything. A peer the shard no longer knows is not an error: it left on its own.
pub fn disconnect(
    shards: &[ShardSender],
    peers: &[(usize, PeerId)],
    timeout: Duration,
) -> Vec<ShardError> {
    let requests = peers.iter().copied();
    let (verdicts, mut errors) = ask_all(shards, requests, timeout, ShardCommand::RemovePeer);
    for (shard, verdict) in verdicts {
        match verdict {
            Ok(()) | Err(CommandError::UnknownPeer(_)) => {}
            Err(source) => errors.push(ShardError::Refused { shard, source }),
        }
    }
    errors
}

/// Hands each `(shard, message)` to its shard (all asked before any reply is
/// awaited) and returns how many participants it was queued for in all, with what
/// went wrong. A member that left meanwhile is not an error.
pub fn send_data(
    shards: &[ShardSender],
    messages: Vec<(usize, SendData)>,
    timeout: Duration,
) -> (usize, Vec<ShardError>) {
    let (verdicts, mut errors) = ask_all(shards, messages, timeout, ShardCommand::SendData);
    let mut recipients = 0;
    for (shard, verdict) in verdicts {
        match verdict {
            Ok(n) => recipients += n,
            Err(CommandError::UnknownPeer(_) | CommandError::NotMember { .. }) => {}
            Err(source) => errors.push(ShardError::Refused { shard, source }),
        }
    }
    (recipients, errors)
}

/// Sends each `(shard, request)`, made a command with its reply's sender by
/// `command`, to its shard, all before any reply is awaited, and waits for the
/// replies, `timeout` in all: each reply with its shard, and what went wrong in
/// sending or waiting.
fn ask_all<R, T>(
    shards: &[ShardSender],
    requests: impl IntoIterator<Item = (usize, R)>,
    timeout: Duration,
    command: impl Fn(R, Sender<T>) -> ShardCommand,
) -> (Vec<(usize, T)>, Vec<ShardError>) {
    let deadline = Instant::now() + timeout;
    let mut errors = Vec::new();
    let mut pending = Vec::new();
    for (index, request) in requests {
        let Some(shard) = shards.get(index) else {
            errors.push(ShardError::NoSuchShard(index));
            continue;
        };
        let (reply, answer) = crossbeam_channel::bounded(1);
        match shard.send(command(request, reply)) {
            Ok(()) => pending.push((index, answer)),
            Err(e) => errors.push(e.into()),
        }
    }
    let mut replies = Vec::with_capacity(pending.len());
    for (shard, answer) in pending {
        match receive(shard, &answer, deadline, timeout) {
            Ok(reply) => replies.push((shard, reply)),
            Err(e) => errors.push(e),
        }
    }
    (replies, errors)
}

fn receive<T>(
    shard: usize,
    reply: &Receiver<T>,
    deadline: Instant,
    timeout: Duration,
) -> Result<T, ShardError> {
    reply.recv_deadline(deadline).map_err(|e| match e {
        RecvTimeoutError::Timeout => ShardError::Timeout { shard, timeout },
        RecvTimeoutError::Disconnected => ShardError::Gone(shard),
    })
}
