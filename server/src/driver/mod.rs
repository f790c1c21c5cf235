//! The mio driver: the only place where shards meet sockets and clocks.
//!
//! Thread-per-core: each shard runs on its own thread (`shoal-shard-{i}`) and owns
//! everything it touches there: a mio `Poll`, its non-blocking UDP sockets on a port
//! of its own (so signalling pins a connection to a shard by the candidates it hands
//! out), one per `--bind` address and so one per family ([`crate::addresses`] says
//! which addresses they announce), and one more for each link to another node it
//! dials (up to `--max-link-sockets`, each on a port the system picks, so that every
//! link has a path of its own), a `Waker`, the receiving end of its command channel
//! and the sans-I/O [`Shard`] itself. Nothing is shared between shards, so there are no locks on the packet path
//! and a shard's tables stay in its core's cache. Everything else talks to a shard by
//! message: a [`ShardCommand`] over a crossbeam channel, followed by a wake-up.
//!
//! The loop of a shard thread (see `shard_loop`): wait for a socket, a command or
//! the shard's next deadline; read about `max_datagrams_per_tick` datagrams into one
//! batch with batched system calls ([`crate::udp`]: `recvmmsg` and GRO) and run one
//! tick over it; fire due timers; apply commands; send what the shard produced (GSO
//! runs) and log its events.
//!
//! Shards of a node meet over the same channels: when a room's members sit on
//! several shards, the control plane tells each of them which others hold members
//! ([`ShardCommand::RoomPresence`]), and after each tick a shard thread's
//! [`Links`](shoal_systems::Links) gather what its passes put out for its siblings
//! (room messages, media of mirrored tracks, keyframe requests) into one
//! [`ShardCommand::Sibling`] batch per sibling (one hop; the sibling delivers and
//! forwards nothing). A sibling whose queue is full gives the batch back: its
//! reliable room messages wait in `Links` to go again, first, within
//! `FORWARD_RETRY`, the rest is dropped and counted in the sender's
//! `ShardStats::relay_forwards_dropped` and `media_relay_dropped`; one that is gone
//! misses the batch. A shard thread never blocks on another.
//!
//! [`Shard`]: shoal_systems::Shard

mod shard_loop;

/// `--max-link-sockets` at most: the sockets a shard can tell apart.
pub const MAX_LINK_SOCKETS: usize = shard_loop::MAX_PEER_SOCKETS;

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use bytes::Bytes;
use crossbeam_channel::{Receiver, Sender, TrySendError};
use mio::net::UdpSocket;
use mio::{Interest, Poll, Waker};
use ring::rand::SystemRandom;
use shoal_components::dtls::DtlsCertificate;
use shoal_components::peer::{IceCredentials, PeerId};
use shoal_components::room::RoomId;
use shoal_components::stats::ShardStats;
use shoal_components::tick::ShardEvent;
use shoal_systems::{
    Census, Command, CommandError, CongestionReport, PeerSpec, Refused, Shard, ShardConfig,
    SiblingBatch,
};

use crate::addresses::{self, AddressError};
use crate::config::Config;
use shard_loop::ShardSocket;

/// Commands queued for one shard before senders block (the control plane's back-pressure).
pub const COMMAND_QUEUE_LEN: usize = 1024;

/// Where shard threads report what their peers did that the control plane must know
/// (a DTLS handshake done, a peer removed on its own: consent lost, DTLS closed or
/// failed, a data channel opened or closed, an audio track's level), tagged with the
/// shard's index. Unbounded: a shard reports a few events per peer over its life and
/// five audio levels a second per published audio track, which the control plane
/// reads as they come (each is a few map look-ups under the members lock).
pub type ShardEventSender = tokio::sync::mpsc::UnboundedSender<(usize, ShardEvent)>;
/// The control plane's end of [`ShardEventSender`].
pub type ShardEventReceiver = tokio::sync::mpsc::UnboundedReceiver<(usize, ShardEvent)>;

/// What the control plane needs from the running shards: their command handles and
/// candidates (by shard index), the node's DTLS fingerprint, and their events.
#[derive(Debug)]
pub struct ShardHandles {
    /// A command handle per shard.
    pub senders: Vec<ShardSender>,
    /// Each shard's host candidates, in priority order: what signalling hands out.
    pub candidates: Vec<Arc<[SocketAddr]>>,
    /// Each shard's passive TCP candidates (ICE-TCP), in priority order.
    pub tcp_candidates: Vec<Arc<[SocketAddr]>>,
    /// SHA-256 of the certificate every shard presents.
    pub fingerprint_sha256: [u8; 32],
    /// The shards' lifecycle events; `None` once taken.
    pub events: Option<ShardEventReceiver>,
}

/// A message to a shard thread. Replies travel back on the sender each command carries.
#[derive(Debug)]
pub enum ShardCommand {
    /// Adds a peer; the shard's verdict is sent back.
    AddPeer(PeerSpec, Sender<Result<(), CommandError>>),
    /// Removes a peer; the shard's verdict is sent back.
    RemovePeer(PeerId, Sender<Result<(), CommandError>>),
    /// Lets a peer go whose session ended on the client's side (`Command::LetGo`:
    /// what its receive buffer holds still reaches its room); the shard's verdict
    /// is sent back.
    LetGo(PeerId, Sender<Result<(), CommandError>>),
    /// Restarts a peer's ICE with new credentials (`Command::RestartIce`); the
    /// shard's verdict is sent back.
    RestartIce(PeerId, IceCredentials, Sender<Result<(), CommandError>>),
    /// Sends a message to a room's members on the shard, or to one of them
    /// (`Shard::send_data`); the reply is how many members it was queued for.
    SendData(SendData, Sender<Result<usize, CommandError>>),
    /// Closes the reliable data channels of a room's members on the shard
    /// (`Shard::close_reliable_channels`); the reply is how many it closed. Sent
    /// like `AddPeer`, on the shard's queue itself, so that it is taken before
    /// anything queued after it.
    CloseReliableChannels(RoomId, Sender<usize>),
    /// Asks for the shard's counters.
    Stats(Sender<ShardReport>),
    /// The congestion control state of these peers (those still on the shard).
    Congestion(Vec<PeerId>, Sender<Vec<(PeerId, CongestionReport)>>),
    /// The other shards that hold members of `room` now (empty: none). Sent by the
    /// control plane whenever the room's set of shards changes; no reply.
    RoomPresence {
        /// The room.
        room: RoomId,
        /// The other shards' indices.
        siblings: Vec<usize>,
    },
    /// What a sibling shard's passes put out for this one in one tick, in their
    /// order: room messages for this shard's members (delivered here, never
    /// forwarded), packets of tracks mirrored here, keyframe requests for tracks
    /// published here.
    Sibling(SiblingBatch),
    /// A track published or unpublished, a subscription made or ended
    /// (`Command::Publish`, `Unpublish`, `Subscribe`, `Unsubscribe`), in the order the
    /// control plane negotiated them; no reply (a refusal is logged). The control
    /// plane keeps one a full queue refused until the shard takes it
    /// (`control::media_backlog`).
    Media(Command),
    /// Starts draining the shard (`Shard::drain`): SCTP associations shut down, then
    /// every peer is closed with close_notify; no new peer is taken.
    Drain,
    /// Stops the shard thread after the current tick.
    Shutdown,
}

/// A message from the control plane to a room's members on one shard.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SendData {
    /// The room.
    pub room: RoomId,
    /// One member only; every member on the shard when `None`.
    pub to: Option<PeerId>,
    /// The channel label (opened reliable and ordered where a member has none).
    pub label: String,
    /// Binary (else a UTF-8 string).
    pub binary: bool,
    /// The message.
    pub payload: Bytes,
}

shoal_components::counters! {
/// What the driver itself counted for one shard (the shard counts the rest).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DriverStats {
    /// Datagrams read from the socket.
    pub datagrams_received: u64,
    /// Datagrams the socket accepted for sending.
    pub datagrams_sent: u64,
    /// Datagrams dropped because the socket's send buffer was full.
    pub send_would_block: u64,
    /// Datagrams dropped because sending failed otherwise.
    pub send_errors: u64,
    /// Receive calls that failed with something other than "would block".
    pub recv_errors: u64,
    /// Datagrams a wildcard socket dropped because they were addressed to none of
    /// the host's interface addresses (a broadcast or multicast address, say).
    pub datagrams_misaddressed: u64,
    /// Receive system calls that returned datagrams (each `recvmmsg` can return
    /// several buffers, each GRO buffer several datagrams).
    pub recv_calls: u64,
    /// Send system calls made (a GSO send carries several datagrams).
    pub send_calls: u64,
    /// Ticks run over a batch of datagrams.
    pub batches: u64,
    /// ICE-TCP connections accepted.
    pub tcp_accepted: u64,
    /// ICE-TCP connections closed at once: the shard held `--max-tcp-connections`,
    /// or their address already had `MAX_UNVALIDATED_PER_IP` unvalidated ones.
    pub tcp_refused: u64,
    /// Accepts that failed for want of a resource (descriptors, memory); the
    /// listener is tried again shortly.
    pub tcp_accept_errors: u64,
    /// ICE-TCP connections the client closed (or that failed).
    pub tcp_closed_by_peer: u64,
    /// ICE-TCP connections closed for a frame over `tcp::MAX_FRAME`.
    pub tcp_closed_oversized: u64,
    /// ICE-TCP connections closed because their first frame was not STUN.
    pub tcp_closed_garbage: u64,
    /// ICE-TCP connections closed because no peer validated them in time.
    pub tcp_closed_unauthenticated: u64,
    /// ICE-TCP connections closed because their peer left.
    pub tcp_closed_peer_gone: u64,
    /// RFC 4571 frames received over ICE-TCP.
    pub tcp_frames_in: u64,
    /// Frames queued for sending over ICE-TCP.
    pub tcp_frames_out: u64,
    /// Packets for an ICE-TCP connection dropped: its send queue was full.
    pub tcp_send_dropped: u64,
    /// Links dialled from this shard that could not get a socket of their own
    /// (binding one failed, or `MAX_PEER_SOCKETS` were open): each went from the
    /// shard's socket, where it meets any other link to the same shard on one path.
    pub peer_socket_errors: u64,
    /// Sockets bound for a link this shard dialled, one each.
    pub peer_sockets_opened: u64,
    /// Those closed again, with their link's peer: opened minus closed are open.
    pub peer_sockets_closed: u64,
}
}

/// A histogram a shard thread keeps without atomics: counts of observations at or
/// below each bound (not cumulative; above the last bound is `count` minus their
/// sum), their number and their sum, in the unit of the bounds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Histogram {
    /// Upper bounds, ascending.
    pub bounds: &'static [u64],
    /// Observations per bound: `counts[i]` were above `bounds[i - 1]` and at most
    /// `bounds[i]`.
    pub counts: Vec<u64>,
    /// Observations in all.
    pub count: u64,
    /// Their sum.
    pub sum: u64,
}

impl Histogram {
    /// An empty histogram over `bounds` (ascending).
    pub fn new(bounds: &'static [u64]) -> Histogram {
        Histogram {
            bounds,
            counts: vec![0; bounds.len()],
            count: 0,
            sum: 0,
        }
    }

    /// Counts one observation of `value`.
    pub fn observe(&mut self, value: u64) {
        let i = self.bounds.partition_point(|&b| b < value);
        if let Some(c) = self.counts.get_mut(i) {
            *c += 1;
        }
        self.count += 1;
        self.sum = self.sum.saturating_add(value);
    }
}

/// Bounds of [`ShardReport::tick_nanos`]: 5 µs to 100 ms.
pub const TICK_NANOS_BOUNDS: &[u64] = &[
    5_000,
    10_000,
    25_000,
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    100_000_000,
];
/// Bounds of [`ShardReport::batch_sizes`], datagrams.
pub const BATCH_SIZE_BOUNDS: &[u64] = &[1, 2, 4, 8, 16, 32, 64, 128, 256];

/// A snapshot of one shard's counters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardReport {
    /// The shard's index.
    pub index: usize,
    /// The shard's first socket address (of the first `--bind` address).
    pub local_addr: SocketAddr,
    /// Every address the shard's sockets are bound to, in `--bind` order.
    pub bound: Vec<SocketAddr>,
    /// Peers the shard holds.
    pub peers: usize,
    /// Entities in the shard's World (every peer is one; what departed peers had
    /// must not stay behind).
    pub entities: usize,
    /// Rooms whose members this shard shares with other shards (its relay
    /// forwards their messages there).
    pub shared_rooms: usize,
    /// What the shard holds now, by kind.
    pub census: Census,
    /// What the shard counted.
    pub shard: ShardStats,
    /// What the driver counted.
    pub driver: DriverStats,
    /// How long the shard took over each batch of datagrams, ns
    /// ([`Shard::handle_received`](shoal_systems::Shard::handle_received)).
    pub tick_nanos: Histogram,
    /// Datagrams per batch.
    pub batch_sizes: Histogram,
}

/// Why the driver could not start, or a shard could not be reached.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// `udp_port_base + i` passes 65535 for some shard.
    #[error("{shards} shards from UDP port {base} pass port 65535")]
    PortRange {
        /// The configured first port.
        base: u16,
        /// The configured shard count.
        shards: usize,
    },
    /// The shards' TCP ports (ICE-TCP) overlap their UDP ports: a path's local
    /// port must say which of the two it is.
    #[error(
        "the TCP ports from {tcp} and the UDP ports from {udp} overlap for {shards} shards: \
         set --tcp-port-base apart"
    )]
    TcpPortsOverlap {
        /// The first UDP port.
        udp: u16,
        /// The first TCP port.
        tcp: u16,
        /// The shard count.
        shards: usize,
    },
    /// `--bind` and `--announce` do not fit together, or leave nothing to announce.
    #[error(transparent)]
    Addresses(#[from] AddressError),
    /// The host's interface addresses could not be listed (for a wildcard bind).
    #[error("cannot list the interface addresses: {0}")]
    Interfaces(io::Error),
    /// The system random generator failed to give a shard seed.
    #[error("the system random generator failed")]
    Seed,
    /// The node's DTLS certificate could not be generated.
    #[error("cannot generate the DTLS certificate")]
    Certificate,
    /// A shard's UDP socket could not be bound.
    #[error("shard {shard}: cannot bind UDP {addr}: {source}")]
    Bind {
        /// The shard's index.
        shard: usize,
        /// The address it tried.
        addr: SocketAddr,
        /// What the OS said.
        source: io::Error,
    },
    /// Another I/O call failed (poll, registration, wake-up, thread spawn).
    #[error("shard {shard}: {what}: {source}")]
    Io {
        /// The shard's index.
        shard: usize,
        /// The call that failed.
        what: &'static str,
        /// What the OS said.
        source: io::Error,
    },
    /// The shard refused a command.
    #[error("shard {shard}: {source}")]
    Command {
        /// The shard's index.
        shard: usize,
        /// The shard's reason.
        source: CommandError,
    },
    /// The shard's command queue is full ([`ShardSender::try_send`]).
    #[error("shard {shard}'s command queue is full")]
    QueueFull {
        /// The shard's index.
        shard: usize,
    },
    /// The shard thread is gone (it stopped or failed) and cannot take commands.
    #[error("shard {shard} is not running")]
    Disconnected {
        /// The shard's index.
        shard: usize,
    },
    /// The shard thread panicked.
    #[error("shard {shard} panicked")]
    Panicked {
        /// The shard's index.
        shard: usize,
    },
}

/// A cloneable handle that sends commands to one shard and wakes it.
#[derive(Clone, Debug)]
pub struct ShardSender {
    index: usize,
    commands: Sender<ShardCommand>,
    waker: Arc<Waker>,
}

impl ShardSender {
    /// The shard's index.
    pub fn index(&self) -> usize {
        self.index
    }

    /// Commands (from the control plane and sibling shards) waiting in the shard's
    /// queue now, of at most [`COMMAND_QUEUE_LEN`].
    pub fn queued(&self) -> usize {
        self.commands.len()
    }

    /// Queues a command and wakes the shard; blocks while the queue is full.
    pub fn send(&self, command: ShardCommand) -> Result<(), DriverError> {
        let shard = self.index;
        self.commands
            .send(command)
            .map_err(|_| DriverError::Disconnected { shard })?;
        self.wake()
    }

    /// Queues a command and wakes the shard, or fails at once if the queue is full
    /// ([`DriverError::QueueFull`]) or the shard is gone: for senders that must not
    /// block, such as other shard threads.
    pub fn try_send(&self, command: ShardCommand) -> Result<(), DriverError> {
        let shard = self.index;
        self.commands.try_send(command).map_err(|e| match e {
            TrySendError::Full(_) => DriverError::QueueFull { shard },
            TrySendError::Disconnected(_) => DriverError::Disconnected { shard },
        })?;
        self.wake()
    }

    /// Queues a media command and wakes the shard without blocking, or gives the
    /// command back with why not: the queue is full (it may take it later) or the
    /// shard is gone.
    pub fn try_send_media(
        &self,
        command: Command,
    ) -> Result<(), crate::control::media_backlog::Refused> {
        use crate::control::media_backlog::Refusal;
        match self.commands.try_send(ShardCommand::Media(command)) {
            // Queued: a failed wake-up only delays it to the shard's next wake.
            Ok(()) => {
                let _ = self.wake();
                Ok(())
            }
            Err(e) => {
                let refusal = match e {
                    TrySendError::Full(_) => Refusal::Full,
                    TrySendError::Disconnected(_) => Refusal::Gone,
                };
                match e.into_inner() {
                    ShardCommand::Media(command) => Err((Box::new(command), refusal)),
                    _ => unreachable!("a media command was sent"),
                }
            }
        }
    }

    /// Queues a sibling's batch and wakes the shard without blocking, or gives the
    /// batch back, saying whether the queue is full or the shard is gone.
    pub fn try_send_sibling(&self, batch: SiblingBatch) -> Result<(), Refused> {
        match self.commands.try_send(ShardCommand::Sibling(batch)) {
            // Queued: a failed wake-up only delays it to the shard's next wake.
            Ok(()) => {
                let _ = self.wake();
                Ok(())
            }
            Err(e) => {
                let full = matches!(e, TrySendError::Full(_));
                let batch = match e.into_inner() {
                    ShardCommand::Sibling(batch) => batch,
                    _ => SiblingBatch::default(),
                };
                Err(if full {
                    Refused::Full(batch)
                } else {
                    Refused::Gone(batch)
                })
            }
        }
    }

    fn wake(&self) -> Result<(), DriverError> {
        self.waker.wake().map_err(|source| DriverError::Io {
            shard: self.index,
            what: "wake",
            source,
        })
    }

    /// Adds a peer and waits for the shard's verdict.
    pub fn add_peer(&self, spec: PeerSpec) -> Result<(), DriverError> {
        let (reply, verdict) = crossbeam_channel::bounded(1);
        self.send(ShardCommand::AddPeer(spec, reply))?;
        self.verdict(&verdict)
    }

    /// Removes a peer and waits for the shard's verdict.
    pub fn remove_peer(&self, id: PeerId) -> Result<(), DriverError> {
        let (reply, verdict) = crossbeam_channel::bounded(1);
        self.send(ShardCommand::RemovePeer(id, reply))?;
        self.verdict(&verdict)
    }

    /// Sends a message to a room's members on the shard (or to one of them) and
    /// waits for how many it was queued for.
    pub fn send_data(&self, data: SendData) -> Result<usize, DriverError> {
        let (reply, verdict) = crossbeam_channel::bounded(1);
        self.send(ShardCommand::SendData(data, reply))?;
        let shard = self.index;
        match verdict.recv() {
            Ok(Ok(n)) => Ok(n),
            Ok(Err(source)) => Err(DriverError::Command { shard, source }),
            Err(_) => Err(DriverError::Disconnected { shard }),
        }
    }

    /// The shard's counters, fetched from its thread.
    pub fn stats(&self) -> Result<ShardReport, DriverError> {
        let (reply, report) = crossbeam_channel::bounded(1);
        self.send(ShardCommand::Stats(reply))?;
        report
            .recv()
            .map_err(|_| DriverError::Disconnected { shard: self.index })
    }

    fn verdict(&self, verdict: &Receiver<Result<(), CommandError>>) -> Result<(), DriverError> {
        let shard = self.index;
        match verdict.recv() {
            Ok(Ok(())) => Ok(()),
            Ok(Err(source)) => Err(DriverError::Command { shard, source }),
            Err(_) => Err(DriverError::Disconnected { shard }),
        }
    }
}

/// One running shard as the owner sees it.
struct ShardHandle {
    /// Its sockets' addresses, in `--bind` order.
    bound: Vec<SocketAddr>,
    /// Its host candidates, in priority order.
    candidates: Arc<[SocketAddr]>,
    /// Its TCP listeners' addresses, in `--bind` order (none with ICE-TCP off).
    tcp_bound: Vec<SocketAddr>,
    /// Its passive TCP candidates, in priority order.
    tcp_candidates: Arc<[SocketAddr]>,
    sender: ShardSender,
    thread: Option<JoinHandle<Result<ShardReport, DriverError>>>,
}

/// The running shards of one node. Dropping it shuts them down.
pub struct Server {
    shards: Vec<ShardHandle>,
    certificate: Arc<DtlsCertificate>,
    events: Option<ShardEventReceiver>,
}

impl Server {
    /// Binds every shard's socket, starts its thread and registers the config's static
    /// peers on every shard. On error, the shards started so far are shut down.
    pub fn start(config: &Config) -> Result<Server, DriverError> {
        addresses::check(&config.bind, &config.announce)?;
        // Listed once: what a wildcard socket accepts datagrams for, and (without
        // --announce) what it announces.
        let host = if config.bind.iter().any(IpAddr::is_unspecified) {
            addresses::interface_addresses().map_err(DriverError::Interfaces)?
        } else {
            Vec::new()
        };
        let usable = addresses::usable_interface_addresses(&host);
        let interfaces = Interfaces {
            host: &host,
            usable: &usable,
        };
        let count = config.shards.get();
        let epoch = Instant::now();
        let rng = SystemRandom::new();
        let base = config.udp_port_base;
        if shard_port(base, count - 1).is_none() {
            return Err(DriverError::PortRange {
                base,
                shards: count,
            });
        }
        if let Some(tcp) = config.tcp_port_base.resolve(base)
            && tcp != 0
            && base != 0
            && usize::from(tcp.abs_diff(base)) < count
        {
            return Err(DriverError::TcpPortsOverlap {
                udp: base,
                tcp,
                shards: count,
            });
        }
        // One certificate for the node: signalling hands out one fingerprint
        // whichever shard a participant lands on.
        let certificate =
            Arc::new(DtlsCertificate::generate().map_err(|_| DriverError::Certificate)?);
        let (events_tx, events) = tokio::sync::mpsc::unbounded_channel();
        let mut server = Server {
            shards: Vec::with_capacity(count),
            certificate: certificate.clone(),
            events: Some(events),
        };
        // Every shard is set up before any starts, so each thread starts with the
        // command handles of all its siblings (the room relay's one hop).
        let mut prepared = Vec::with_capacity(count);
        for index in 0..count {
            let port = shard_port(base, index).ok_or(DriverError::PortRange {
                base,
                shards: count,
            })?;
            let seed = ring::rand::generate::<[u8; 8]>(&rng)
                .map_err(|_| DriverError::Seed)?
                .expose();
            prepared.push(prepare_shard(
                config,
                index,
                port,
                interfaces,
                u64::from_le_bytes(seed),
                certificate.clone(),
                epoch,
                events_tx.clone(),
            )?);
        }
        let senders: Vec<ShardSender> = prepared.iter().map(|p| p.sender.clone()).collect();
        for p in prepared {
            server.shards.push(p.spawn(senders.clone())?);
        }
        for handle in &server.shards {
            for spec in config.static_peer_specs() {
                handle.sender.add_peer(spec)?;
            }
        }
        Ok(server)
    }

    /// SHA-256 of the node's DTLS certificate, which every shard presents.
    pub fn fingerprint(&self) -> [u8; 32] {
        self.certificate.fingerprint_sha256()
    }

    /// How many shards run.
    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// Shard `index`'s first bound socket address (of the first `--bind` address).
    pub fn local_addr(&self, index: usize) -> Option<SocketAddr> {
        self.shards
            .get(index)
            .and_then(|s| s.bound.first().copied())
    }

    /// Every shard's first bound socket address, by index.
    pub fn local_addrs(&self) -> impl Iterator<Item = SocketAddr> + '_ {
        self.shards.iter().filter_map(|s| s.bound.first().copied())
    }

    /// Shard `index`'s bound socket addresses, in `--bind` order.
    pub fn bound_addrs(&self, index: usize) -> Option<&[SocketAddr]> {
        self.shards.get(index).map(|s| &s.bound[..])
    }

    /// Shard `index`'s host candidates, in priority order.
    pub fn candidates(&self, index: usize) -> Option<&[SocketAddr]> {
        self.shards.get(index).map(|s| &s.candidates[..])
    }

    /// Shard `index`'s TCP listeners' addresses, in `--bind` order (empty with
    /// ICE-TCP off).
    pub fn tcp_bound_addrs(&self, index: usize) -> Option<&[SocketAddr]> {
        self.shards.get(index).map(|s| &s.tcp_bound[..])
    }

    /// Shard `index`'s passive TCP candidates, in priority order.
    pub fn tcp_candidates(&self, index: usize) -> Option<&[SocketAddr]> {
        self.shards.get(index).map(|s| &s.tcp_candidates[..])
    }

    /// A handle that sends commands to shard `index`.
    pub fn command_sender(&self, index: usize) -> Option<ShardSender> {
        self.shards.get(index).map(|s| s.sender.clone())
    }

    /// A command handle for every shard, by index.
    pub fn command_senders(&self) -> Vec<ShardSender> {
        self.shards.iter().map(|s| s.sender.clone()).collect()
    }

    /// Everything the control plane takes: command handles, addresses, the
    /// fingerprint and, the first time it is called, the shards' event stream (until
    /// taken, events wait in it; dropping it makes shards stop reporting).
    pub fn control_handles(&mut self) -> ShardHandles {
        ShardHandles {
            senders: self.command_senders(),
            candidates: self.shards.iter().map(|s| s.candidates.clone()).collect(),
            tcp_candidates: self
                .shards
                .iter()
                .map(|s| s.tcp_candidates.clone())
                .collect(),
            fingerprint_sha256: self.fingerprint(),
            events: self.events.take(),
        }
    }

    /// The index of a shard whose thread ended without being asked to (a fatal I/O
    /// error or a panic); [`Server::shutdown`] reports why.
    pub fn stopped_shard(&self) -> Option<usize> {
        self.shards
            .iter()
            .position(|s| s.thread.as_ref().is_none_or(|t| t.is_finished()))
    }

    /// Stops every shard, joins its thread and returns its final counters; the first
    /// shard failure, if any, is the error.
    pub fn shutdown(mut self) -> Result<Vec<ShardReport>, DriverError> {
        self.stop_all().into_iter().collect()
    }

    fn stop_all(&mut self) -> Vec<Result<ShardReport, DriverError>> {
        // Ask all first, then join, so shards stop in parallel.
        for s in &self.shards {
            // A shard that is gone already reports why when joined.
            let _ = s.sender.send(ShardCommand::Shutdown);
        }
        let mut reports = Vec::with_capacity(self.shards.len());
        for (shard, s) in self.shards.iter_mut().enumerate() {
            if let Some(thread) = s.thread.take() {
                reports.push(
                    thread
                        .join()
                        .unwrap_or(Err(DriverError::Panicked { shard })),
                );
            }
        }
        reports
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop_all();
    }
}

/// Shard `index`'s port: `base + index`, or 0 (ephemeral) for every shard when `base` is 0.
fn shard_port(base: u16, index: usize) -> Option<u16> {
    if base == 0 {
        return Some(0);
    }
    base.checked_add(u16::try_from(index).ok()?)
}

/// A shard set up on the starting thread, not yet running.
struct Prepared {
    index: usize,
    bound: Vec<SocketAddr>,
    candidates: Arc<[SocketAddr]>,
    tcp_bound: Vec<SocketAddr>,
    tcp_candidates: Arc<[SocketAddr]>,
    sender: ShardSender,
    shard_loop: shard_loop::ShardLoop,
}

impl Prepared {
    /// Starts the shard's thread; `shards` are every shard's handles, by index.
    fn spawn(mut self, shards: Vec<ShardSender>) -> Result<ShardHandle, DriverError> {
        let index = self.index;
        self.shard_loop.set_siblings(shards);
        let shard_loop = self.shard_loop;
        let thread = std::thread::Builder::new()
            .name(format!("shoal-shard-{index}"))
            .spawn(move || shard_loop.run())
            .map_err(|source| DriverError::Io {
                shard: index,
                what: "spawn",
                source,
            })?;
        Ok(ShardHandle {
            bound: self.bound,
            candidates: self.candidates,
            tcp_bound: self.tcp_bound,
            tcp_candidates: self.tcp_candidates,
            sender: self.sender,
            thread: Some(thread),
        })
    }
}

/// The host's interface addresses, as a wildcard socket needs them.
#[derive(Clone, Copy)]
struct Interfaces<'a> {
    /// Every address of an interface that is up: what it accepts datagrams for.
    host: &'a [IpAddr],
    /// Those a client can be handed: what it announces without `--announce`.
    usable: &'a [IpAddr],
}

/// Sets up shard `index`'s sockets (one per `--bind` address, all on `port`, or all
/// on the port the first one got when `port` is 0), poll and channel on this thread,
/// so set-up errors surface here; [`Prepared::spawn`] then moves them onto the
/// shard's own thread.
fn prepare_shard(
    config: &Config,
    index: usize,
    port: u16,
    interfaces: Interfaces<'_>,
    seed: u64,
    certificate: Arc<DtlsCertificate>,
    epoch: Instant,
    events: ShardEventSender,
) -> Result<Prepared, DriverError> {
    let io_err = |what| {
        move |source| DriverError::Io {
            shard: index,
            what,
            source,
        }
    };
    let poll = Poll::new().map_err(io_err("poll"))?;
    let mut sockets = Vec::with_capacity(config.bind.len());
    let mut bound = Vec::with_capacity(config.bind.len());
    let mut port = port;
    for (i, &ip) in config.bind.iter().enumerate() {
        let addr = SocketAddr::new(ip, port);
        let socket = bind_udp(addr).map_err(|source| DriverError::Bind {
            shard: index,
            addr,
            source,
        })?;
        let local = socket.local_addr().map_err(io_err("local_addr"))?;
        port = local.port();
        let mut socket = ShardSocket::new(socket, local, interfaces.host)
            .map_err(io_err("batched socket I/O"))?;
        poll.registry()
            .register(
                socket.socket_mut(),
                shard_loop::socket_token(i),
                Interest::READABLE,
            )
            .map_err(io_err("register socket"))?;
        sockets.push(socket);
        bound.push(local);
    }
    let candidates: Arc<[SocketAddr]> = addresses::candidates(
        &bound,
        &config.announce,
        interfaces.usable,
        config.prefer_family,
    )?
    .into();
    // ICE-TCP: a listener per --bind address on the shard's TCP port.
    let mut listeners = Vec::new();
    let mut tcp_bound = Vec::new();
    let tcp_base = match config.tcp_port_base {
        crate::config::TcpPortBase::Off => None,
        // `auto` past the last port is an error, not ICE-TCP quietly off.
        on => Some(
            on.resolve(config.udp_port_base)
                .ok_or(DriverError::PortRange {
                    base: config.udp_port_base,
                    shards: config.shards.get(),
                })?,
        ),
    };
    if let Some(base) = tcp_base {
        let mut tcp_port = shard_port(base, index).ok_or(DriverError::PortRange {
            base,
            shards: config.shards.get(),
        })?;
        for (i, &ip) in config.bind.iter().enumerate() {
            let addr = SocketAddr::new(ip, tcp_port);
            let bind_err = |source| DriverError::Bind {
                shard: index,
                addr,
                source,
            };
            let mut listener = bind_tcp(addr).map_err(bind_err)?;
            // An ephemeral port must not be one of the UDP ones either.
            for _ in 0..8 {
                let port = listener.local_addr().map_err(io_err("local_addr"))?.port();
                if tcp_port != 0 || !bound.iter().any(|b| b.port() == port) {
                    break;
                }
                listener = bind_tcp(addr).map_err(bind_err)?;
            }
            let local = listener.local_addr().map_err(io_err("local_addr"))?;
            tcp_port = local.port();
            poll.registry()
                .register(
                    &mut listener,
                    shard_loop::listener_token(i),
                    Interest::READABLE,
                )
                .map_err(io_err("register listener"))?;
            listeners.push((listener, local));
            tcp_bound.push(local);
        }
    }
    let tcp_candidates: Arc<[SocketAddr]> = if tcp_bound.is_empty() {
        Arc::from([])
    } else {
        addresses::candidates(
            &tcp_bound,
            &config.announce,
            interfaces.usable,
            config.prefer_family,
        )?
        .into()
    };
    let tcp = crate::tcp::TcpSettings {
        max_connections: config.max_tcp_connections,
        max_buffered: config.tcp_buffer_bytes,
        auth_timeout: std::time::Duration::from_secs(config.tcp_auth_timeout),
    };
    let local_addr = *bound.first().ok_or(AddressError::NoBind)?;
    let waker = Waker::new(poll.registry(), shard_loop::WAKER).map_err(io_err("waker"))?;
    let (commands, inbox) = crossbeam_channel::bounded(COMMAND_QUEUE_LEN);

    let mut shard_config = ShardConfig::with_certificate(local_addr, seed, certificate);
    shard_config.max_datagrams_per_tick = config.max_datagrams_per_tick;
    shard_config.max_peers = config.max_peers_per_shard;
    shard_config.consent_timeout = std::time::Duration::from_secs(config.consent_timeout.into());
    shard_config.sctp.heartbeat_interval =
        std::time::Duration::from_secs(config.sctp_heartbeat_interval.into());
    shard_config.sctp.max_init_retransmits = config.sctp_max_init_retransmits;
    shard_config.sctp.max_outstanding_tsns = config.sctp_max_outstanding_tsns;
    shard_config.relay = shoal_systems::RelayLimits {
        high_watermark: config.relay_high_watermark,
        low_watermark: config.relay_low_watermark,
        hold_limit: std::time::Duration::from_secs(config.relay_hold_limit),
        ..shoal_systems::RelayLimits::default()
    };
    shard_config.pacer_burst = std::time::Duration::from_millis(config.pacer_burst_ms);
    let shard_loop = shard_loop::ShardLoop::new(
        index,
        Shard::new(shard_config),
        poll,
        sockets,
        inbox,
        epoch,
        config.max_datagrams_per_tick,
        events,
    )
    .with_tcp(listeners, tcp)
    .with_link_sockets(config.max_link_sockets);
    Ok(Prepared {
        index,
        bound,
        candidates,
        tcp_bound,
        tcp_candidates,
        sender: ShardSender {
            index,
            commands,
            waker: Arc::new(waker),
        },
        shard_loop,
    })
}

/// A non-blocking UDP socket bound to `addr`; an IPv6 one is IPv6-only, so that a
/// shard's IPv4 socket can share its port (IPv4 clients reach the IPv4 socket).
pub(super) fn bind_udp(addr: SocketAddr) -> io::Result<UdpSocket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    Ok(UdpSocket::from_std(socket.into()))
}

/// A non-blocking TCP listener on `addr` (IPv6-only for an IPv6 address, as the
/// UDP sockets), for ICE-TCP.
fn bind_tcp(addr: SocketAddr) -> io::Result<mio::net::TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    Ok(mio::net::TcpListener::from_std(socket.into()))
}

/// An ICE-lite peer with fixed credentials and no DTLS, for tests that only need a
/// shard to hold peers.
#[cfg(test)]
pub(crate) fn lite_peer(id: u64, ufrag: &str) -> PeerSpec {
    use shoal_components::peer::{IceCredentials, IceRole};
    PeerSpec {
        id: PeerId(id),
        role: IceRole::Lite,
        credentials: IceCredentials {
            local_ufrag: ufrag.into(),
            local_pwd: "abcdefghijklmnopqrstuvwxyz".into(),
            remote_ufrag: "them".into(),
            remote_pwd: "ABCDEFGHIJKLMNOPQRSTUVWXYZ".into(),
        },
        remote_candidates: Vec::new(),
        dtls: None,
        room: None,
        may_send_data: true,
        link: false,
    }
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroUsize;

    use super::*;

    #[test]
    fn ports_follow_the_base() {
        assert_eq!(shard_port(7100, 0), Some(7100));
        assert_eq!(shard_port(7100, 3), Some(7103));
        assert_eq!(shard_port(0, 3), Some(0));
        assert_eq!(shard_port(65535, 0), Some(65535));
        assert_eq!(shard_port(65535, 1), None);
        assert_eq!(shard_port(1, 1 << 20), None);
    }

    #[test]
    fn commands_reach_each_shard_and_shutdown_joins() {
        let config = Config {
            shards: NonZeroUsize::new(2).unwrap(),
            udp_port_base: 0,
            ..Config::default()
        };
        let server = Server::start(&config).unwrap();
        assert_eq!(server.shard_count(), 2);
        let addrs: Vec<_> = server.local_addrs().collect();
        assert!(addrs.iter().all(|a| a.ip().is_loopback() && a.port() != 0));
        assert_ne!(addrs[0], addrs[1]);
        assert!(server.command_sender(2).is_none());

        let s0 = server.command_sender(0).unwrap();
        s0.add_peer(lite_peer(7, "userA")).unwrap();
        let dup = s0.add_peer(lite_peer(7, "userB"));
        assert!(matches!(
            dup,
            Err(DriverError::Command {
                shard: 0,
                source: CommandError::DuplicatePeer(PeerId(7))
            })
        ));
        // Shards share nothing: the same id and ufrag are free on shard 1.
        let s1 = server.command_sender(1).unwrap();
        s1.add_peer(lite_peer(7, "userA")).unwrap();
        s1.remove_peer(PeerId(7)).unwrap();
        assert!(s1.remove_peer(PeerId(7)).is_err());
        assert_eq!(s0.stats().unwrap().peers, 1);
        assert_eq!(server.stopped_shard(), None);

        let reports = server.shutdown().unwrap();
        assert_eq!(reports.len(), 2);
        assert_eq!((reports[0].index, reports[0].peers), (0, 1));
        assert_eq!((reports[1].local_addr, reports[1].peers), (addrs[1], 0));
        assert!(matches!(
            s0.stats(),
            Err(DriverError::Disconnected { shard: 0 })
        ));
    }

    /// A link this shard dials checks from a socket of its own, another for each
    /// link up to `--max-link-sockets`, and the socket closes with the link's peer.
    #[test]
    fn a_dialled_link_checks_from_a_socket_of_its_own_that_goes_with_it() {
        use shoal_components::peer::IceRole;
        let config = Config {
            udp_port_base: 0,
            max_link_sockets: 2,
            ..Config::default()
        };
        let server = Server::start(&config).unwrap();
        let shard_addr = server.local_addr(0).unwrap();
        let shard = server.command_sender(0).unwrap();
        let far = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        far.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        // Where peer `id`'s first check came from (others' retransmissions may
        // come between).
        let first_check = |id: u64| {
            let username = format!("them:peer{id}");
            let mut buf = [0u8; 1500];
            loop {
                let (n, addr) = far.recv_from(&mut buf).unwrap();
                if buf[..n]
                    .windows(username.len())
                    .any(|w| w == username.as_bytes())
                {
                    return addr;
                }
            }
        };
        let controlling = |id: u64, link: bool| {
            let mut spec = lite_peer(id, &format!("peer{id}"));
            spec.role = IceRole::Controlling;
            spec.remote_candidates = vec![far.local_addr().unwrap()];
            spec.link = link;
            spec
        };
        let mut from = Vec::new();
        for id in [1, 2, 3] {
            shard.add_peer(controlling(id, true)).unwrap();
            from.push(first_check(id));
        }
        assert_eq!(from[0].ip(), shard_addr.ip());
        assert_eq!(from[1].ip(), shard_addr.ip());
        assert!(!from[..2].contains(&shard_addr), "{from:?} {shard_addr}");
        assert_ne!(from[0], from[1]);
        // Past the limit, a link goes from the shard's socket.
        assert_eq!(from[2], shard_addr);
        // A peer that is no link keeps to the shard's socket.
        shard.add_peer(controlling(4, false)).unwrap();
        assert_eq!(first_check(4), shard_addr);
        let driver = shard.stats().unwrap().driver;
        assert_eq!(
            (driver.peer_sockets_opened, driver.peer_sockets_closed),
            (2, 0)
        );
        assert_eq!(driver.peer_socket_errors, 1);
        for id in 1..=4 {
            shard.remove_peer(PeerId(id)).unwrap();
        }
        // Closed once the loop has taken the removals' events, after their last
        // datagrams went out.
        let deadline = Instant::now() + std::time::Duration::from_secs(5);
        let mut driver = shard.stats().unwrap().driver;
        while driver.peer_sockets_closed < 2 && Instant::now() < deadline {
            std::thread::yield_now();
            driver = shard.stats().unwrap().driver;
        }
        assert_eq!(
            (driver.peer_sockets_opened, driver.peer_sockets_closed),
            (2, 2)
        );
        // A slot freed is taken again.
        shard.add_peer(controlling(5, true)).unwrap();
        assert_ne!(first_check(5), shard_addr);
        server.shutdown().unwrap();
    }

    #[test]
    fn a_refused_static_peer_fails_start() {
        let mut config = Config {
            udp_port_base: 0,
            ..Config::default()
        };
        config
            .static_peers
            .push("ab:short:cd:short".parse().unwrap());
        let err = Server::start(&config).err().unwrap();
        assert!(
            matches!(err, DriverError::Command { shard: 0, .. }),
            "{err}"
        );
    }
}
