//! The body of a shard thread: mio readiness in, one tick per batch, datagrams out.

use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, TryRecvError};
use mio::net::UdpSocket;

use mio::{Events, Poll, Token};
use shoal_components::net::Datagram;
use shoal_components::tick::ShardEvent;
use shoal_components::time::Time;
use shoal_systems::{Command, Links, Shard};

use crate::udp::UdpIo;

use super::{DriverError, DriverStats, ShardCommand, ShardEventSender, ShardReport, ShardSender};

/// The token of the shard's waker (commands are waiting).
pub(super) const WAKER: Token = Token(0);

/// The token of the shard's `index`-th UDP socket.
pub(super) fn socket_token(index: usize) -> Token {
    Token(1 + index)
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
    tx: Vec<Datagram>,
    stats: DriverStats,
    events: ShardEventSender,
    /// Every shard's command handle, by index (this shard's own is never used):
    /// where the batches for siblings go.
    siblings: Vec<ShardSender>,
    /// This shard's side of the queues between the node's shards.
    links: Links,
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
            tx: Vec::new(),
            stats: DriverStats::default(),
            events,
            siblings: Vec::new(),
            links: Links::new(index, 0),
        }
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
            let sockets_pending = self.sockets.iter().any(|s| s.pending);
            let wait = if sockets_pending || commands_pending {
                Some(Duration::ZERO)
            } else {
                self.poll_wait()
            };
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
                let index = event.token().0.wrapping_sub(1);
                if let Some(socket) = self.sockets.get_mut(index) {
                    socket.pending = true;
                }
            }
            for index in 0..self.sockets.len() {
                if self.sockets[index].pending {
                    self.sockets[index].pending = self.read_socket(index);
                }
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

    /// How long to sleep: until the shard's next deadline, at most [`MAX_POLL_WAIT`].
    fn poll_wait(&self) -> Option<Duration> {
        let deadline = self.shard.poll_timeout()?;
        Some(deadline.saturating_since(self.now()).min(MAX_POLL_WAIT))
    }

    /// The driver's clock in the shard's units: time since the server started.
    fn now(&self) -> Time {
        let us = u64::try_from(self.epoch.elapsed().as_micros()).unwrap_or(u64::MAX);
        Time::from_micros(us)
    }

    /// Reads batches from socket `index` and runs a tick over each; true if the
    /// socket may still hold data.
    fn read_socket(&mut self, index: usize) -> bool {
        for _ in 0..MAX_BATCHES_PER_WAKE {
            let drained = self.read_batch(index);
            // A GRO burst can take the batch past what one tick accepts.
            while !self.batch.is_empty() {
                let now = self.now();
                let n = self.batch.len().min(self.batch_limit);
                self.stats.batches += 1;
                self.shard.handle_datagrams(now, self.batch.drain(..n));
                self.flush();
            }
            if drained {
                return false;
            }
        }
        true
    }

    /// Fills the batch from socket `index` with about `batch_limit` datagrams (a GRO
    /// burst is taken whole); true once the socket reported WouldBlock.
    fn read_batch(&mut self, index: usize) -> bool {
        let Some(s) = self.sockets.get_mut(index) else {
            return true;
        };
        // Bounded in calls too, so that a socket failing every call cannot hold the loop.
        for _ in 0..self.batch_limit {
            if self.batch.len() >= self.batch_limit {
                return false;
            }
            match s.udp.recv(&s.socket, s.bound, &mut self.batch) {
                Ok(n) => {
                    self.stats.datagrams_received += n as u64;
                    self.stats.recv_calls += 1;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // E.g. an ICMP error queued on the socket: it is consumed by this call.
                Err(_) => self.stats.recv_errors += 1,
            }
        }
        false
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
                    let _ = reply.send(self.shard.command(now, Command::AddPeer(spec)));
                }
                ShardCommand::RemovePeer(id, reply) => {
                    let _ = reply.send(self.shard.command(now, Command::RemovePeer(id)));
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
                ShardCommand::RoomPresence { room, siblings } => {
                    self.shard.set_room_siblings(room, &siblings);
                }
                ShardCommand::Sibling(batch) => {
                    self.shard.deliver_from_sibling(now, batch);
                }
                ShardCommand::Media(command) => {
                    if let Err(e) = self.shard.command(now, command) {
                        eprintln!("shoal: shard {} refused a media command: {e}", self.index);
                    }
                }
                ShardCommand::Shutdown => return Flow::Stop,
            }
        }
        Flow::MoreQueued
    }

    /// Hands what the shard put out for its siblings to each, one batch per sibling,
    /// without blocking; a batch a sibling cannot take now is dropped and counted.
    fn forward(&mut self) {
        let siblings = &self.siblings;
        self.links
            .collect(&mut self.shard, |to, batch| match siblings.get(to) {
                Some(sibling) => sibling.try_send_sibling(batch),
                None => Err(batch),
            });
    }

    /// Sends what the shard produced, logs its events and reports the lifecycle ones
    /// to the control plane.
    fn flush(&mut self) {
        self.forward();
        self.shard.poll_transmit(&mut self.tx);
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
                if s.tx.is_empty() {
                    continue;
                }
                let sent = s.udp.send(&s.socket, &mut s.tx);
                self.stats.datagrams_sent += sent.sent;
                self.stats.send_calls += sent.calls;
                // UDP may drop; a full send buffer is congestion, not a failure.
                self.stats.send_would_block += sent.would_block;
                self.stats.send_errors += sent.errors;
            }
        }
        while let Some(event) = self.shard.poll_event() {
            match event {
                // One per message: too many to log.
                ShardEvent::SctpMessage { .. }
                | ShardEvent::ChannelMessage { .. }
                | ShardEvent::BufferedAmountLow { .. } => {}
                ShardEvent::DtlsConnected { .. }
                | ShardEvent::PeerRemoved { .. }
                | ShardEvent::ChannelOpen { .. }
                | ShardEvent::ChannelClosed { .. } => {
                    eprintln!("shoal: shard {} {event:?}", self.index);
                    // Nobody listening (no control plane) is fine: nothing to update.
                    let _ = self.events.send((self.index, event));
                }
                _ => eprintln!("shoal: shard {} {event:?}", self.index),
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
            shard: self.shard.stats().clone(),
            driver: DriverStats {
                datagrams_misaddressed: self.sockets.iter().map(|s| s.udp.misaddressed()).sum(),
                ..self.stats.clone()
            },
        }
    }
}
