//! The body of a shard thread: mio readiness in, one tick per batch, datagrams out.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use crossbeam_channel::{Receiver, TryRecvError};
use mio::net::{TcpListener, UdpSocket};

use mio::{Events, Interest, Poll, Token};
use shoal_components::net::{Datagram, FiveTuple};
use shoal_components::peer::{IceRole, PeerId};
use shoal_components::tick::ShardEvent;
use shoal_components::time::Time;
use shoal_systems::node::FORWARD_RETRY;
use shoal_systems::{Command, CommandError, Links, PeerSpec, Refused, RemoveReason, Shard};

use crate::tcp::{Closed, Connection, TcpSettings};
use crate::udp::UdpIo;

use super::{
    BATCH_SIZE_BOUNDS, DriverError, DriverStats, Histogram, ShardCommand, ShardEventSender,
    ShardReport, ShardSender, TICK_NANOS_BOUNDS,
};

/// The token of the shard's waker (commands are waiting).
pub(super) const WAKER: Token = Token(0);

/// The token of the shard's `index`-th UDP socket.
pub(super) fn socket_token(index: usize) -> Token {
    Token(1 + index)
}

/// The first token of the sockets bound for one peer each: the links this shard
/// dials (see [`ShardLoop::add_peer`]).
const PEER_SOCKET_BASE: usize = 1 << 15;
/// Sockets bound for one peer each, at most at once, whatever `--max-link-sockets`
/// says: their tokens lie below the listeners'.
pub(super) const MAX_PEER_SOCKETS: usize = LISTENER_BASE - PEER_SOCKET_BASE;
/// The first token of the shard's TCP listeners (ICE-TCP), one per bound address.
const LISTENER_BASE: usize = 1 << 16;
/// The first token of accepted TCP connections.
const CONNECTION_BASE: usize = 1 << 17;

/// The token of the shard's `index`-th TCP listener.
pub(super) fn listener_token(index: usize) -> Token {
    Token(LISTENER_BASE + index)
}

/// How often connections are checked for their path's validity.
const TCP_SWEEP_INTERVAL: Duration = Duration::from_millis(200);
/// How soon a listener is tried again after accepting failed for want of a
/// resource (descriptors, memory): the pending connections stay queued.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);
/// Connections from one IP address that no peer has validated yet, at most; more
/// are closed at once (one address cannot take a shard's whole pool).
pub(super) const MAX_UNVALIDATED_PER_IP: usize = 16;

/// The shard's ICE-TCP side: its listeners and accepted connections.
struct TcpSide {
    settings: TcpSettings,
    /// Listeners, their addresses, and whether they may have connections waiting.
    listeners: Vec<(TcpListener, SocketAddr, bool)>,
    /// Connections by token number.
    connections: HashMap<usize, Connection>,
    /// Connections by the path the shard knows them as.
    paths: HashMap<FiveTuple, usize>,
    next: usize,
    /// Connections whose readiness came in this round.
    ready: Vec<usize>,
    frames: Vec<Bytes>,
    last_sweep: Instant,
}

/// One of a shard's UDP sockets (one per bound address, so one per family) and its
/// batched I/O.
pub(super) struct ShardSocket {
    socket: UdpSocket,
    /// The address it is bound to (0.0.0.0 or `::` receives on every interface).
    bound: SocketAddr,
    udp: UdpIo,
    /// Readable and not yet read until WouldBlock (readiness is edge-triggered).
    pending: bool,
    /// Datagrams to send from it, sorted out of the shard's output.
    tx: Vec<Datagram>,
}

impl ShardSocket {
    /// `socket`, bound to `bound`, set up for batched I/O; bound to a wildcard
    /// address, it accepts only datagrams addressed to one of `host` (the host's
    /// interface addresses).
    ///
    /// # Errors
    /// If the socket cannot be set up for batched I/O.
    pub(super) fn new(
        socket: UdpSocket,
        bound: SocketAddr,
        host: &[std::net::IpAddr],
    ) -> io::Result<ShardSocket> {
        let mut udp = UdpIo::new(&socket)?;
        udp.accept_destinations(host);
        Ok(ShardSocket {
            socket,
            bound,
            udp,
            pending: false,
            tx: Vec::new(),
        })
    }

    /// The socket, to register with a poll.
    pub(super) fn socket_mut(&mut self) -> &mut UdpSocket {
        &mut self.socket
    }

    /// Whether a datagram to `remote` leaves through this socket: the one of its
    /// family (a path's two ends are of one family; its local end may be a wildcard).
    fn sends_to(&self, remote: SocketAddr) -> bool {
        remote.is_ipv4() == self.bound.is_ipv4()
    }
}

/// A socket bound for one peer: the dialling end of a link between nodes.
struct PeerSocket {
    peer: PeerId,
    socket: ShardSocket,
}

/// The sockets a shard bound for one peer each.
#[derive(Default)]
struct PeerSockets {
    /// At most this many open at once (`--max-link-sockets`).
    max: usize,
    /// By slot: token `PEER_SOCKET_BASE + slot`.
    slots: Vec<Option<PeerSocket>>,
    /// Slot by bound address: where a datagram leaving from that address goes.
    by_addr: HashMap<SocketAddr, usize>,
    /// The slots whose socket is readable and not yet read until WouldBlock: a
    /// wake-up reads these, not every slot.
    ready: Vec<usize>,
}

/// One of a shard's UDP sockets, to read from.
#[derive(Clone, Copy)]
enum SocketAt {
    /// The socket of a bound address, by index.
    Shard(usize),
    /// A socket bound for one peer, by slot.
    Peer(usize),
}

/// Reads about `limit` datagrams from `s` into `batch` (a GRO burst is taken
/// whole); true once the socket reported WouldBlock.
fn recv_into(
    s: &mut ShardSocket,
    limit: usize,
    batch: &mut Vec<Datagram>,
    stamps: &mut Vec<Option<Duration>>,
    stats: &mut DriverStats,
) -> bool {
    // Bounded in calls too, so that a socket failing every call cannot hold the loop.
    for _ in 0..limit {
        if batch.len() >= limit {
            return false;
        }
        match s.udp.recv_stamped(&s.socket, s.bound, batch, stamps) {
            Ok(n) => {
                stats.datagrams_received += n as u64;
                stats.recv_calls += 1;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            // E.g. an ICMP error queued on the socket: it is consumed by this call.
            Err(_) => stats.recv_errors += 1,
        }
    }
    false
}

/// Sends and drains what `s` has queued, counting into `stats`.
fn send_from(s: &mut ShardSocket, stats: &mut DriverStats) {
    if s.tx.is_empty() {
        return;
    }
    let sent = s.udp.send(&s.socket, &mut s.tx);
    stats.datagrams_sent += sent.sent;
    stats.send_calls += sent.calls;
    // UDP may drop; a full send buffer is congestion, not a failure.
    stats.send_would_block += sent.would_block;
    stats.send_errors += sent.errors;
}

/// Batches read per wake-up before timers and commands get a turn; the socket is
/// revisited at once (zero poll timeout) if it still had data.
const MAX_BATCHES_PER_WAKE: usize = 16;
/// Commands applied per wake-up before the socket gets a turn.
const MAX_COMMANDS_PER_WAKE: usize = 256;
/// The longest a shard sleeps even with nothing scheduled; a guard against a missed
/// wake-up, not a timer.
const MAX_POLL_WAIT: Duration = Duration::from_secs(1);

/// Everything one shard thread owns.
pub(super) struct ShardLoop {
    index: usize,
    shard: Shard,
    poll: Poll,
    sockets: Vec<ShardSocket>,
    commands: Receiver<ShardCommand>,
    epoch: Instant,
    batch_limit: usize,
    local_addr: SocketAddr,
    batch: Vec<Datagram>,
    /// When the kernel received each datagram of `batch` (Unix time; `None` for one
    /// it gave no time, or that came over TCP): see [`ShardLoop::run_batch`].
    stamps: Vec<Option<Duration>>,
    tx: Vec<Datagram>,
    stats: DriverStats,
    /// How long each batch's tick took, ns.
    tick_nanos: Histogram,
    /// Datagrams per batch.
    batch_sizes: Histogram,
    events: ShardEventSender,
    /// Every shard's command handle, by index (this shard's own is never used):
    /// where the batches for siblings go.
    siblings: Vec<ShardSender>,
    /// This shard's side of the queues between the node's shards.
    links: Links,
    /// ICE-TCP.
    tcp: TcpSide,
    /// Sockets bound for one peer each.
    peer_sockets: PeerSockets,
}

/// Whether the command queue asked the loop to stop.
#[derive(PartialEq, Eq)]
enum Flow {
    Continue,
    /// The per-wake command limit was reached; more may be queued.
    MoreQueued,
    Stop,
}

impl ShardLoop {
    /// A loop over `shard`, whose sockets are registered with `poll` under
    /// [`socket_token`] of their index.
    pub(super) fn new(
        index: usize,
        shard: Shard,
        poll: Poll,
        sockets: Vec<ShardSocket>,
        commands: Receiver<ShardCommand>,
        epoch: Instant,
        batch_limit: usize,
        events: ShardEventSender,
    ) -> ShardLoop {
        let local_addr = shard.local_addr();
        ShardLoop {
            index,
            shard,
            poll,
            sockets,
            commands,
            epoch,
            batch_limit,
            local_addr,
            batch: Vec::with_capacity(batch_limit),
            stamps: Vec::with_capacity(batch_limit),
            tx: Vec::new(),
            stats: DriverStats::default(),
            tick_nanos: Histogram::new(TICK_NANOS_BOUNDS),
            batch_sizes: Histogram::new(BATCH_SIZE_BOUNDS),
            events,
            siblings: Vec::new(),
            links: Links::new(index, 0),
            tcp: TcpSide {
                settings: TcpSettings::default(),
                listeners: Vec::new(),
                connections: HashMap::new(),
                paths: HashMap::new(),
                next: CONNECTION_BASE,
                ready: Vec::new(),
                frames: Vec::new(),
                last_sweep: Instant::now(),
            },
            peer_sockets: PeerSockets::default(),
        }
    }

    /// The same, giving at most `max` links this shard dials a socket of their own
    /// (capped at [`MAX_PEER_SOCKETS`]; 0: none does).
    pub(super) fn with_link_sockets(mut self, max: usize) -> ShardLoop {
        self.peer_sockets.max = max.min(MAX_PEER_SOCKETS);
        self
    }

    /// The same, with ICE-TCP `listeners` (registered under [`listener_token`] of
    /// their index) and their bounds.
    pub(super) fn with_tcp(
        mut self,
        listeners: Vec<(TcpListener, SocketAddr)>,
        settings: TcpSettings,
    ) -> ShardLoop {
        self.tcp.settings = settings;
        self.tcp.listeners = listeners.into_iter().map(|(l, a)| (l, a, true)).collect();
        self
    }

    /// Gives the loop every shard's command handle, by index, for the room relay's
    /// forwards. While these live, this shard's siblings keep its command channel
    /// open: shards stop on [`ShardCommand::Shutdown`].
    pub(super) fn set_siblings(&mut self, shards: Vec<ShardSender>) {
        self.links = Links::new(self.index, shards.len());
        self.siblings = shards;
    }

    /// Runs until a [`ShardCommand::Shutdown`] (or until every sender, the siblings'
    /// included, is gone) and returns the final counters; a failing `poll` ends the
    /// thread with its error.
    pub(super) fn run(mut self) -> Result<ShardReport, DriverError> {
        let mut events = Events::with_capacity(8);
        // Readiness is edge-triggered: once a socket is readable it must be read
        // until WouldBlock, or no new event comes. Its `pending` flag and this one
        // carry unfinished work into the next round, which then polls without waiting.
        let mut commands_pending = false;
        loop {
            let sockets_pending =
                self.sockets.iter().any(|s| s.pending) || !self.peer_sockets.ready.is_empty();
            let mut wait = if sockets_pending || commands_pending {
                Some(Duration::ZERO)
            } else {
                self.poll_wait()
            };
            // Connections waiting for validation are swept even on a shard with no
            // timers; a listener that could not accept is tried again soon.
            if !self.tcp.connections.is_empty() {
                wait = Some(wait.map_or(TCP_SWEEP_INTERVAL, |w| w.min(TCP_SWEEP_INTERVAL)));
            }
            if self.tcp.listeners.iter().any(|l| l.2) {
                wait = Some(wait.map_or(ACCEPT_RETRY, |w| w.min(ACCEPT_RETRY)));
            }
            if let Err(source) = self.poll.poll(&mut events, wait) {
                if source.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                let shard = self.index;
                return Err(DriverError::Io {
                    shard,
                    what: "poll",
                    source,
                });
            }
            for event in &events {
                let token = event.token().0;
                if token >= CONNECTION_BASE {
                    self.tcp.ready.push(token);
                } else if token >= LISTENER_BASE {
                    if let Some(l) = self.tcp.listeners.get_mut(token - LISTENER_BASE) {
                        l.2 = true;
                    }
                } else if token >= PEER_SOCKET_BASE {
                    let slot = token - PEER_SOCKET_BASE;
                    if let Some(Some(s)) = self.peer_sockets.slots.get_mut(slot)
                        && !s.socket.pending
                    {
                        s.socket.pending = true;
                        self.peer_sockets.ready.push(slot);
                    }
                } else if let Some(socket) = self.sockets.get_mut(token.wrapping_sub(1)) {
                    socket.pending = true;
                }
            }
            for index in 0..self.sockets.len() {
                if self.sockets[index].pending {
                    self.sockets[index].pending = self.read_socket(SocketAt::Shard(index));
                }
            }
            let ready = std::mem::take(&mut self.peer_sockets.ready);
            for slot in ready {
                let pending = self.read_socket(SocketAt::Peer(slot));
                // Its peer may have gone, and the socket with it, in a tick.
                if let Some(Some(s)) = self.peer_sockets.slots.get_mut(slot) {
                    s.socket.pending = pending;
                    if pending {
                        self.peer_sockets.ready.push(slot);
                    }
                }
            }
            if !self.tcp.listeners.is_empty() {
                self.accept_connections();
                self.serve_connections();
                self.sweep_connections();
            }
            self.fire_timers();
            let flow = self.apply_commands();
            self.flush();
            commands_pending = flow == Flow::MoreQueued;
            if flow == Flow::Stop {
                return Ok(self.report());
            }
        }
    }

    /// How long to sleep: until the shard's next deadline, at most [`MAX_POLL_WAIT`],
    /// and at most [`FORWARD_RETRY`] while messages wait for a sibling's full queue
    /// (every round ends in [`Self::flush`], which tries again).
    fn poll_wait(&self) -> Option<Duration> {
        let retry = self.links.has_waiting().then_some(FORWARD_RETRY);
        let Some(deadline) = self.shard.poll_timeout() else {
            return retry;
        };
        let wait = deadline.saturating_since(self.now()).min(MAX_POLL_WAIT);
        Some(retry.map_or(wait, |r| wait.min(r)))
    }

    /// The driver's clock in the shard's units: time since the server started.
    fn now(&self) -> Time {
        let us = u64::try_from(self.epoch.elapsed().as_micros()).unwrap_or(u64::MAX);
        Time::from_micros(us)
    }

    /// Reads batches from socket `index` and runs a tick over each; true if the
    /// socket may still hold data.
    fn read_socket(&mut self, at: SocketAt) -> bool {
        for _ in 0..MAX_BATCHES_PER_WAKE {
            let socket = match at {
                SocketAt::Shard(index) => self.sockets.get_mut(index),
                SocketAt::Peer(slot) => self
                    .peer_sockets
                    .slots
                    .get_mut(slot)
                    .and_then(Option::as_mut)
                    .map(|p| &mut p.socket),
            };
            let Some(socket) = socket else {
                return false;
            };
            let drained = recv_into(
                socket,
                self.batch_limit,
                &mut self.batch,
                &mut self.stamps,
                &mut self.stats,
            );
            // A GRO burst can take the batch past what one tick accepts.
            self.run_batch();
            if drained {
                return false;
            }
        }
        true
    }

    /// Adds a peer. A link this shard dials (a controlling peer of a room's link)
    /// gets a UDP socket of its own, on the address of the shard's socket of its
    /// far end's family and a port the system picks, and its checks leave from there
    /// ([`Command::AddPeerFrom`]). So every link between two nodes runs on a path
    /// of its own, whatever other links join the same two shards, while the far
    /// end, lite, answers each check on the path it came in on. The socket goes
    /// with its peer. Any other peer, and a link that gets no socket (counted in
    /// `peer_socket_errors`, logged), is added as it comes.
    ///
    /// A peer's id is not used again before its removal is reported (the control
    /// plane counts ids up): a socket is found by its peer's id when the peer goes.
    fn add_peer(&mut self, now: Time, spec: PeerSpec) -> Result<(), CommandError> {
        let dials_link = spec.link && spec.role == IceRole::Controlling;
        if !dials_link || self.peer_sockets.max == 0 || spec.remote_candidates.is_empty() {
            return self.shard.command(now, Command::AddPeer(spec));
        }
        let Some((slot, local)) = self.bind_peer_socket(&spec) else {
            self.stats.peer_socket_errors += 1;
            return self.shard.command(now, Command::AddPeer(spec));
        };
        let result = self
            .shard
            .command(now, Command::AddPeerFrom { spec, local });
        if result.is_err() {
            self.close_peer_socket(slot);
        }
        result
    }

    /// Binds and registers a socket for `spec`'s peer: its slot and address. `None`
    /// (logged) when the shard has no socket of the family of the peer's first
    /// candidate, `--max-link-sockets` are open, or binding or registering failed.
    fn bind_peer_socket(&mut self, spec: &PeerSpec) -> Option<(usize, SocketAddr)> {
        let failed = |index: usize, why: &dyn std::fmt::Display| {
            tracing::warn!(
                event = "peer_socket_failed",
                shard = index,
                peer = spec.id.0,
                "a link got no socket of its own, and goes from the shard's: {why}"
            );
            None
        };
        let remote = *spec.remote_candidates.first()?;
        let Some(shard) = self.sockets.iter().find(|s| s.sends_to(remote)) else {
            return failed(self.index, &"no socket of its family");
        };
        let shard = shard.bound;
        let sockets = &mut self.peer_sockets;
        if sockets.by_addr.len() >= sockets.max {
            return failed(self.index, &format_args!("{} open", sockets.max));
        }
        let slot = match sockets.slots.iter().position(Option::is_none) {
            Some(slot) => slot,
            None => {
                sockets.slots.push(None);
                sockets.slots.len() - 1
            }
        };
        let bound = || -> io::Result<(ShardSocket, SocketAddr)> {
            // A wildcard shard socket names each datagram's own address; this one is
            // bound to the address a datagram to the far end leaves from.
            let ip = if shard.ip().is_unspecified() {
                let probe = std::net::UdpSocket::bind(SocketAddr::new(shard.ip(), 0))?;
                probe.connect(remote)?;
                probe.local_addr()?.ip()
            } else {
                shard.ip()
            };
            let socket = super::bind_udp(SocketAddr::new(ip, 0))?;
            let local = socket.local_addr()?;
            let mut socket = ShardSocket::new(socket, local, &[])?;
            self.poll.registry().register(
                socket.socket_mut(),
                Token(PEER_SOCKET_BASE + slot),
                Interest::READABLE,
            )?;
            Ok((socket, local))
        };
        match bound() {
            Ok((socket, local)) => {
                self.stats.peer_sockets_opened += 1;
                let sockets = &mut self.peer_sockets;
                sockets.by_addr.insert(local, slot);
                sockets.slots[slot] = Some(PeerSocket {
                    peer: spec.id,
                    socket,
                });
                Some((slot, local))
            }
            Err(e) => failed(self.index, &e),
        }
    }

    /// Closes the socket bound for `peer`, if it has one.
    fn drop_peer_socket(&mut self, peer: PeerId) {
        let slot = self
            .peer_sockets
            .slots
            .iter()
            .position(|s| s.as_ref().is_some_and(|s| s.peer == peer));
        if let Some(slot) = slot {
            self.close_peer_socket(slot);
        }
    }

    /// Closes the socket in `slot`.
    fn close_peer_socket(&mut self, slot: usize) {
        let sockets = &mut self.peer_sockets;
        if let Some(mut s) = sockets.slots.get_mut(slot).and_then(Option::take) {
            sockets.by_addr.remove(&s.socket.bound);
            sockets.ready.retain(|&r| r != slot);
            self.stats.peer_sockets_closed += 1;
            // Dropping the socket closes it, which takes it off the poll too.
            let _ = self.poll.registry().deregister(s.socket.socket_mut());
        }
    }

    /// Accepts what the listeners have waiting; past `max_connections`, a
    /// connection is closed at once.
    fn accept_connections(&mut self) {
        for i in 0..self.tcp.listeners.len() {
            if !self.tcp.listeners[i].2 {
                continue;
            }
            loop {
                let accepted = self.tcp.listeners[i].0.accept();
                let (mut stream, remote) = match accepted {
                    Ok(c) => c,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        self.tcp.listeners[i].2 = false;
                        break;
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) if e.kind() == io::ErrorKind::ConnectionAborted => continue,
                    // Out of descriptors or memory: the connections stay queued and
                    // the listener is tried again after ACCEPT_RETRY, not in a spin.
                    Err(_) => {
                        self.stats.tcp_accept_errors += 1;
                        break;
                    }
                };
                let unvalidated_here = self
                    .tcp
                    .connections
                    .values()
                    .filter(|c| !c.authenticated && c.remote.ip() == remote.ip())
                    .count();
                if self.tcp.connections.len() >= self.tcp.settings.max_connections
                    || unvalidated_here >= MAX_UNVALIDATED_PER_IP
                {
                    self.stats.tcp_refused += 1;
                    continue; // dropped: closed
                }
                let Ok(local) = stream.local_addr() else {
                    self.stats.tcp_refused += 1;
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let token = self.tcp.next;
                self.tcp.next = self.tcp.next.checked_add(1).unwrap_or(CONNECTION_BASE);
                if self
                    .poll
                    .registry()
                    .register(
                        &mut stream,
                        Token(token),
                        Interest::READABLE | Interest::WRITABLE,
                    )
                    .is_err()
                {
                    self.stats.tcp_refused += 1;
                    continue;
                }
                self.stats.tcp_accepted += 1;
                self.tcp.paths.insert(FiveTuple { local, remote }, token);
                self.tcp.connections.insert(
                    token,
                    Connection::new(stream, local, remote, Instant::now()),
                );
                // Data may have arrived with the handshake: read it this round.
                self.tcp.ready.push(token);
            }
        }
    }

    /// Reads and writes the connections that were ready, running a tick over each
    /// batch of frames.
    fn serve_connections(&mut self) {
        let mut ready = std::mem::take(&mut self.tcp.ready);
        ready.sort_unstable();
        ready.dedup();
        for token in ready.drain(..) {
            let Some(conn) = self.tcp.connections.get_mut(&token) else {
                continue;
            };
            let (local, remote) = (conn.local, conn.remote);
            let mut frames = std::mem::take(&mut self.tcp.frames);
            let read = conn.read(&mut frames);
            let written = conn.write();
            self.stats.tcp_frames_in += frames.len() as u64;
            for payload in frames.drain(..) {
                self.batch.push(Datagram {
                    local,
                    remote,
                    payload,
                });
            }
            self.tcp.frames = frames;
            self.run_batch();
            if let Err(why) = read.and(written) {
                self.close_connection(token, why);
            }
        }
        self.tcp.ready = ready;
    }

    /// Closes connections no peer validated in time, and those whose peer left.
    fn sweep_connections(&mut self) {
        let now = Instant::now();
        if now.duration_since(self.tcp.last_sweep) < TCP_SWEEP_INTERVAL {
            return;
        }
        self.tcp.last_sweep = now;
        let mut closing = Vec::new();
        for (&token, conn) in &mut self.tcp.connections {
            let valid = self.shard.path_is_valid(FiveTuple {
                local: conn.local,
                remote: conn.remote,
            });
            if valid {
                conn.authenticated = true;
            } else if conn.authenticated {
                closing.push((token, Closed::PeerGone));
            } else if now.duration_since(conn.opened) >= self.tcp.settings.auth_timeout {
                closing.push((token, Closed::Unauthenticated));
            }
        }
        for (token, why) in closing {
            self.close_connection(token, why);
        }
    }

    /// Closes connection `token`, counting why.
    fn close_connection(&mut self, token: usize, why: Closed) {
        let Some(mut conn) = self.tcp.connections.remove(&token) else {
            return;
        };
        let _ = self.poll.registry().deregister(&mut conn.stream);
        self.tcp.paths.remove(&FiveTuple {
            local: conn.local,
            remote: conn.remote,
        });
        let counter = match why {
            Closed::ByPeer => &mut self.stats.tcp_closed_by_peer,
            Closed::Oversized => &mut self.stats.tcp_closed_oversized,
            Closed::Garbage => &mut self.stats.tcp_closed_garbage,
            Closed::Unauthenticated => &mut self.stats.tcp_closed_unauthenticated,
            Closed::PeerGone => &mut self.stats.tcp_closed_peer_gone,
        };
        *counter += 1;
    }

    /// Runs ticks over the batch until it is empty, each datagram with when the
    /// kernel received it (on the shard's clock): a shard thread that was not
    /// scheduled for a while reads many datagrams at once, and stamped all with the
    /// time they were read, a publisher's packets would look as if the link had
    /// delivered them back to back; the transport-wide feedback built from those
    /// times would tell its congestion controller of a link far faster than it is.
    fn run_batch(&mut self) {
        self.stamps.resize(self.batch.len(), None);
        while !self.batch.is_empty() {
            let now = self.now();
            let arrival = crate::udp::arrival_clock(now);
            let n = self.batch.len().min(self.batch_limit);
            self.stats.batches += 1;
            self.batch_sizes.observe(n as u64);
            let datagrams = self
                .batch
                .drain(..n)
                .zip(self.stamps.drain(..n).map(arrival));
            let started = Instant::now();
            self.shard.handle_received(now, datagrams);
            let took = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
            self.tick_nanos.observe(took);
            self.flush();
        }
    }

    /// Runs a tick if a shard deadline has passed.
    fn fire_timers(&mut self) {
        let now = self.now();
        if self
            .shard
            .poll_timeout()
            .is_some_and(|deadline| deadline <= now)
        {
            self.shard.handle_timeout(now);
        }
    }

    /// Applies queued commands, at most [`MAX_COMMANDS_PER_WAKE`].
    fn apply_commands(&mut self) -> Flow {
        for _ in 0..MAX_COMMANDS_PER_WAKE {
            let command = match self.commands.try_recv() {
                Ok(command) => command,
                Err(TryRecvError::Empty) => return Flow::Continue,
                // Every handle is gone: nobody can ever stop this shard otherwise.
                Err(TryRecvError::Disconnected) => return Flow::Stop,
            };
            let now = self.now();
            // A requester that stopped waiting has dropped its receiver; nothing to do.
            match command {
                ShardCommand::AddPeer(spec, reply) => {
                    let _ = reply.send(self.add_peer(now, spec));
                }
                ShardCommand::RemovePeer(id, reply) => {
                    let _ = reply.send(self.shard.command(now, Command::RemovePeer(id)));
                }
                ShardCommand::LetGo(id, reply) => {
                    let _ = reply.send(self.shard.command(now, Command::LetGo(id)));
                }
                ShardCommand::CloseReliableChannels(room, reply) => {
                    self.shard.advance_clock(now);
                    let _ = reply.send(self.shard.close_reliable_channels(room));
                }
                ShardCommand::RestartIce(peer, credentials, reply) => {
                    let restart = Command::RestartIce { peer, credentials };
                    let _ = reply.send(self.shard.command(now, restart));
                }
                ShardCommand::SendData(d, reply) => {
                    self.shard.advance_clock(now);
                    let sent = self
                        .shard
                        .send_data(d.room, d.to, &d.label, d.binary, d.payload);
                    let _ = reply.send(sent);
                }
                ShardCommand::Stats(reply) => {
                    let _ = reply.send(self.report());
                }
                ShardCommand::Congestion(peers, reply) => {
                    let reports = peers
                        .into_iter()
                        .filter_map(|p| Some((p, self.shard.congestion(p)?)))
                        .collect();
                    let _ = reply.send(reports);
                }
                ShardCommand::RoomPresence { room, siblings } => {
                    self.shard.set_room_siblings(room, &siblings);
                }
                ShardCommand::Sibling(batch) => {
                    self.shard.deliver_from_sibling(now, batch);
                }
                ShardCommand::Media(command) => {
                    if let Err(e) = self.shard.command(now, command) {
                        tracing::warn!(
                            event = "media_command_refused",
                            shard = self.index,
                            "a media command was refused: {e}"
                        );
                    }
                }
                ShardCommand::Drain => {
                    self.shard.advance_clock(now);
                    self.shard.drain();
                }
                ShardCommand::Shutdown => return Flow::Stop,
            }
        }
        Flow::MoreQueued
    }

    /// Hands what the shard put out for its siblings to each, one batch per sibling,
    /// without blocking; of a batch a sibling cannot take now the reliable room
    /// messages wait for the next try (`Links`), the rest is dropped and counted.
    fn forward(&mut self) {
        let siblings = &self.siblings;
        self.links
            .collect(&mut self.shard, |to, batch| match siblings.get(to) {
                Some(sibling) => sibling.try_send_sibling(batch),
                None => Err(Refused::Gone(batch)),
            });
    }

    /// Sends what the shard produced, logs its events and reports the lifecycle ones
    /// to the control plane.
    fn flush(&mut self) {
        self.forward();
        self.shard.poll_transmit(&mut self.tx);
        let peer_sockets = !self.peer_sockets.by_addr.is_empty();
        if peer_sockets && !self.tx.is_empty() {
            self.sort_onto_peer_sockets();
        }
        if !self.tcp.paths.is_empty() && !self.tx.is_empty() {
            self.frame_onto_connections();
        }
        if !self.tx.is_empty() {
            // Each datagram leaves through the socket of its family;
            // with one socket, the whole batch does.
            if let [only] = &mut self.sockets[..] {
                std::mem::swap(&mut only.tx, &mut self.tx);
            } else {
                for d in self.tx.drain(..) {
                    match self.sockets.iter_mut().find(|s| s.sends_to(d.remote)) {
                        Some(s) => s.tx.push(d),
                        None => self.stats.send_errors += 1,
                    }
                }
            }
            for s in &mut self.sockets {
                send_from(s, &mut self.stats);
            }
        }
        if peer_sockets {
            for s in self.peer_sockets.slots.iter_mut().flatten() {
                send_from(&mut s.socket, &mut self.stats);
            }
        }
        while let Some(event) = self.shard.poll_event() {
            match event {
                // One per message: too many to log.
                ShardEvent::SctpMessage { .. }
                | ShardEvent::ChannelMessage { .. }
                | ShardEvent::BufferedAmountLow { .. } => {}
                // Five a second per audio track: for the room's speakers, not the log.
                ShardEvent::AudioLevel { .. } => {
                    let _ = self.events.send((self.index, event));
                }
                ShardEvent::PeerRemoved { peer, .. } => {
                    // After its last datagrams (a close_notify) went out above.
                    if peer_sockets {
                        self.drop_peer_socket(peer);
                    }
                    log_event(self.index, &event);
                    let _ = self.events.send((self.index, event));
                }
                ShardEvent::DtlsConnected { .. }
                | ShardEvent::SctpEstablished { .. }
                | ShardEvent::SctpClosed { .. }
                | ShardEvent::ChannelOpen { .. }
                | ShardEvent::ChannelClosed { .. } => {
                    log_event(self.index, &event);
                    // Nobody listening (no control plane) is fine: nothing to update.
                    let _ = self.events.send((self.index, event));
                }
                _ => log_event(self.index, &event),
            }
        }
    }

    /// Takes the datagrams that leave from a peer's own socket out of the output,
    /// onto that socket's queue.
    fn sort_onto_peer_sockets(&mut self) {
        // The shard's sockets share one port, which no peer's socket has.
        let port = self.local_addr.port();
        let PeerSockets { slots, by_addr, .. } = &mut self.peer_sockets;
        // The slot the predicate found for the datagram it took out last.
        let found = std::cell::Cell::new(0);
        let taken = self.tx.extract_if(.., |d| {
            let slot = (d.local.port() != port)
                .then(|| by_addr.get(&d.local))
                .flatten();
            slot.inspect(|&&slot| found.set(slot)).is_some()
        });
        for d in taken {
            if let Some(Some(s)) = slots.get_mut(found.get()) {
                s.socket.tx.push(d);
            }
        }
    }

    /// Takes the datagrams of ICE-TCP paths out of the output, framed onto their
    /// connections, and writes those.
    fn frame_onto_connections(&mut self) {
        let max = self.tcp.settings.max_buffered;
        let mut touched = Vec::new();
        self.tx.retain(|d| {
            let path = FiveTuple {
                local: d.local,
                remote: d.remote,
            };
            let Some(&token) = self.tcp.paths.get(&path) else {
                // A TCP path (a listener's port: the driver keeps them apart from
                // the UDP ones) whose connection is gone: nothing to send it on.
                if self
                    .tcp
                    .listeners
                    .iter()
                    .any(|l| l.1.port() == d.local.port())
                {
                    self.stats.tcp_send_dropped += 1;
                    return false;
                }
                return true;
            };
            if let Some(conn) = self.tcp.connections.get_mut(&token) {
                if conn.queue(&d.payload, max) {
                    self.stats.tcp_frames_out += 1;
                    touched.push(token);
                } else {
                    self.stats.tcp_send_dropped += 1;
                }
            }
            false
        });
        touched.dedup();
        for token in touched {
            let failed = self
                .tcp
                .connections
                .get_mut(&token)
                .is_some_and(|c| c.write().is_err());
            if failed {
                self.close_connection(token, Closed::ByPeer);
            }
        }
    }

    fn report(&self) -> ShardReport {
        ShardReport {
            index: self.index,
            local_addr: self.local_addr,
            bound: self.sockets.iter().map(|s| s.bound).collect(),
            peers: self.shard.peer_count(),
            entities: self.shard.entity_count(),
            shared_rooms: self.shard.shared_room_count(),
            census: self.shard.census(),
            shard: self.shard.stats().clone(),
            driver: DriverStats {
                datagrams_misaddressed: self.sockets.iter().map(|s| s.udp.misaddressed()).sum(),
                ..self.stats.clone()
            },
            tick_nanos: self.tick_nanos.clone(),
            batch_sizes: self.batch_sizes.clone(),
        }
    }
}

/// Logs what a shard reported: a session's failure (consent lost, ICE or DTLS
/// failed) as a warning, its other milestones at `info` or `debug`, anything per
/// packet at `trace` only.
fn log_event(shard: usize, event: &ShardEvent) {
    match event {
        ShardEvent::PeerRemoved { peer, reason } => {
            let why = remove_reason(*reason);
            match reason {
                RemoveReason::ConsentExpired
                | RemoveReason::IceFailed
                | RemoveReason::DtlsFailed => {
                    tracing::warn!(
                        event = "session_failure",
                        shard,
                        peer = peer.0,
                        reason = why,
                        "session failed"
                    )
                }
                _ => tracing::info!(
                    event = "peer_removed",
                    shard,
                    peer = peer.0,
                    reason = why,
                    "peer removed"
                ),
            }
        }
        ShardEvent::DtlsConnected { peer, srtp_profile } => tracing::info!(
            event = "dtls_connected",
            shard,
            peer = peer.0,
            srtp_profile = srtp_profile.map(|p| format!("{p:#06x}")),
            "DTLS connected"
        ),
        ShardEvent::IceConnected { peer, remote } => {
            tracing::debug!(event = "ice_connected", shard, peer = peer.0, %remote, "ICE connected")
        }
        ShardEvent::SctpEstablished { peer } => {
            tracing::debug!(
                event = "sctp_established",
                shard,
                peer = peer.0,
                "SCTP established"
            )
        }
        ShardEvent::SctpClosed { peer, reason } => {
            tracing::info!(event = "sctp_closed", shard, peer = peer.0, reason = ?reason, "SCTP association ended")
        }
        ShardEvent::ChannelOpen {
            peer,
            channel,
            label,
            ..
        } => tracing::debug!(
            event = "channel_open",
            shard,
            peer = peer.0,
            channel,
            label = label.as_str(),
            "data channel open"
        ),
        ShardEvent::ChannelClosed { peer, channel } => {
            tracing::debug!(
                event = "channel_closed",
                shard,
                peer = peer.0,
                channel,
                "data channel closed"
            )
        }
        other => tracing::trace!(shard, ?other, "shard event"),
    }
}

/// A removal reason as a log field.
fn remove_reason(reason: RemoveReason) -> &'static str {
    match reason {
        RemoveReason::Command => "command",
        RemoveReason::ConsentExpired => "consent_expired",
        RemoveReason::IceFailed => "ice_failed",
        RemoveReason::DtlsFailed => "dtls_failed",
        RemoveReason::DtlsClosed => "dtls_closed",
        RemoveReason::SlowReceiver => "slow_receiver",
        RemoveReason::Drained => "drained",
        RemoveReason::Left => "left",
    }
}
