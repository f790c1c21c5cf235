//! A deterministic simulated network that drives [`Shard`]s in virtual time.
//!
//! This is how shoal tests itself, and how an embedding application can test shoal
//! inside its own simulations. Like the shards it drives, the simulator is sans-I/O:
//! no sockets, no threads, no wall clock. Everything random — link loss, jitter,
//! duplication, reordering, the seeds of the shards it creates, generated ICE
//! credentials — comes from one ChaCha8 generator seeded by [`Sim::new`], and events
//! are ordered by (time, insertion sequence) only. The same seed therefore replays
//! the same run bit for bit, and [`Sim::trace_hash`] proves it: a failing seed is a
//! test case.
//!
//! One exception: DTLS draws its ECDHE keys and ECDSA signature nonces from the
//! operating system, because `ring` accepts no seeded generator, and certificates
//! are generated fresh. Runs with DTLS ([`Sim::connect_dtls`]) therefore repeat
//! every link decision and the order of events, but not the bytes of handshake
//! records (nor, by a byte or two, their sizes), so their trace hashes differ from
//! run to run.
//!
//! # Model
//!
//! - **Nodes** are shards, each addressed by its socket address
//!   ([`Sim::add_shard`]). A datagram a shard sends from `local` to `remote` travels
//!   the link `(local, remote)` and, if it survives, is handed to the node at
//!   `remote`; a datagram for an address no node has is dropped and counted.
//!   Several shards can form one shoal node ([`Sim::add_node`]): a
//!   [`shoal_systems::Node`], whose shards hand each other what crosses between
//!   them (room messages, mirrored media, keyframe requests) after each tick, to be
//!   taken before the sibling's next tick at the same virtual instant, exactly as
//!   the shard threads of a running node do over their channels. [`Sim::stall`]
//!   stops one shard for a while, as a thread stuck in a long tick.
//! - **Links** are one-way and configured per direction ([`Sim::set_link`],
//!   [`Sim::set_link_both`]) or by default ([`Sim::set_default_link`]); see
//!   [`LinkConfig`] for latency, jitter, loss, duplication, reordering, bandwidth and
//!   queue. A link keeps sending order unless it reorders on purpose.
//! - **Time** jumps from event to event. [`Sim::step`] advances to the next event (a
//!   delivery or a shard's [`Shard::poll_timeout`]), hands every datagram due then to
//!   its node as one batch ([`Shard::handle_datagrams`]) — or fires its timers
//!   ([`Shard::handle_timeout`]) — and puts what the touched shards transmit onto
//!   their links. [`Sim::run_until`] and [`Sim::run_for`] step with a bound on both
//!   virtual time and step count, so a bug cannot spin forever.
//! - **Events** the shards report come out of [`Sim::poll_event`] tagged with the
//!   node's address.
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//! use shoal_server::sim::{IceState, LinkConfig, PeerId, Sim};
//!
//! let mut sim = Sim::new(42);
//! let server = "10.0.0.1:3478".parse().unwrap();
//! let client = "10.0.0.2:50000".parse().unwrap();
//! sim.add_shard(server);
//! sim.add_shard(client);
//! sim.set_link_both(server, client, LinkConfig::lossy(Duration::from_millis(30), 0.1));
//!
//! // An ICE-lite peer on the server and a controlling peer on the client, with
//! // fresh credentials from the simulation's generator.
//! let peer = PeerId(1);
//! sim.connect_ice(server, client, peer).unwrap();
//! sim.run_until(
//!     |sim| {
//!         sim.shard(server).ice_state(peer) == Some(IceState::Connected)
//!             && sim.shard(client).ice_state(peer) == Some(IceState::Connected)
//!     },
//!     Duration::from_secs(30),
//! )
//! .unwrap();
//! assert_eq!(sim.shard(server).selected_remote(peer), Some(client));
//! println!("connected at {:?}, trace {:016x}", sim.now(), sim.trace_hash());
//! ```

mod ice;
mod link;
mod rng;
mod trace;

use std::cmp::{Ordering, Reverse};
use std::collections::{BTreeMap, BinaryHeap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use shoal_components::net::Datagram;

pub use ice::IcePair;
pub use link::{LinkConfig, NetStats};
pub use rng::SimRng;
use shoal_components::dtls::DtlsCertificate;
pub use shoal_components::peer::{IceCredentials, IceRole, IceState, PeerId};
pub use shoal_components::room::RoomId;
pub use shoal_components::time::Time;
pub use shoal_systems::{
    Command, CommandError, Node, PeerSpec, RemoveReason, Shard, ShardConfig, ShardEvent,
};

use link::{LinkState, Outcome};
use trace::{Fate, Trace};

/// Picks datagrams for [`Sim::set_drop_filter`] to drop: given the virtual time and
/// the payload, true to drop.
pub type DropFilter = Box<dyn FnMut(Time, &[u8]) -> bool>;

/// Steps one [`Sim::run_until`] or [`Sim::run_for`] call may take unless
/// [`Sim::set_step_limit`] says otherwise.
pub const DEFAULT_STEP_LIMIT: u64 = 10_000_000;

/// Why a run stopped short.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SimError {
    /// The condition did not hold by the virtual-time limit; the clock stands there.
    #[error("condition not met by the time limit {0:?}")]
    TimeLimit(Time),
    /// The run took its whole step budget (a livelock, or a limit set too low).
    #[error("step limit of {0} reached at {1:?}")]
    StepLimit(u64, Time),
    /// Nothing is scheduled any more, so the condition can never come true.
    #[error("nothing left to happen at {0:?}")]
    Idle(Time),
}

/// A deterministic network of shards in virtual time. See the [module docs](self).
pub struct Sim {
    now: Time,
    rng: SimRng,
    /// Every node, each of one shard or several, with its shards' addresses in
    /// address order.
    nodes: Vec<(Node, Vec<SocketAddr>)>,
    /// Each shard's address: its node, its index there, its wake-up.
    slots: BTreeMap<SocketAddr, Slot>,
    default_link: LinkConfig,
    link_configs: HashMap<(SocketAddr, SocketAddr), LinkConfig>,
    links: HashMap<(SocketAddr, SocketAddr), LinkState>,
    drop_filters: HashMap<(SocketAddr, SocketAddr), DropFilter>,
    queue: BinaryHeap<Reverse<Scheduled>>,
    next_seq: u64,
    events: VecDeque<(SocketAddr, ShardEvent)>,
    trace: Trace,
    stats: NetStats,
    /// Nodes handed out by `&mut` since their output was last collected.
    dirty: Vec<SocketAddr>,
    step_limit: u64,
    steps_total: u64,
    // Buffers reused step after step.
    due: Vec<Arrival>,
    woken: Vec<SocketAddr>,
    transmits: Vec<Datagram>,
    batch: Vec<Datagram>,
}

/// Where a shard is, and the wake-up the event queue holds for it.
struct Slot {
    /// Its node, in `Sim::nodes`.
    node: usize,
    /// Its index in the node.
    shard: usize,
    /// The time of this shard's live wake-up entry in the queue, if any. Entries whose
    /// time differs are stale and skipped.
    wake_at: Option<Time>,
    /// Until when the shard does not run ([`Sim::stall`]).
    stalled_until: Option<Time>,
    /// What reached it while it stood, for its first tick after.
    held: Vec<Datagram>,
}

/// A datagram reaching its destination this step.
struct Arrival {
    to: SocketAddr,
    from: SocketAddr,
    payload: Bytes,
}

impl Arrival {
    /// The datagram as its shard takes it, the payload moved out.
    fn take(&mut self) -> Datagram {
        Datagram {
            local: self.to,
            remote: self.from,
            payload: std::mem::take(&mut self.payload),
        }
    }
}

/// An entry of the event queue, ordered by time and then insertion: never by
/// anything that could differ between two runs of one seed.
struct Scheduled {
    at: Time,
    seq: u64,
    what: What,
}

enum What {
    Deliver {
        from: SocketAddr,
        to: SocketAddr,
        payload: Bytes,
    },
    Wake(SocketAddr),
}

impl PartialEq for Scheduled {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Scheduled {}
impl PartialOrd for Scheduled {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Scheduled {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

impl Sim {
    /// An empty network at time zero whose every random choice follows `seed`.
    pub fn new(seed: u64) -> Sim {
        Sim {
            now: Time::ZERO,
            rng: SimRng::new(seed),
            nodes: Vec::new(),
            slots: BTreeMap::new(),
            default_link: LinkConfig::default(),
            link_configs: HashMap::new(),
            links: HashMap::new(),
            drop_filters: HashMap::new(),
            queue: BinaryHeap::new(),
            next_seq: 0,
            events: VecDeque::new(),
            trace: Trace::default(),
            stats: NetStats::default(),
            dirty: Vec::new(),
            step_limit: DEFAULT_STEP_LIMIT,
            steps_total: 0,
            due: Vec::new(),
            woken: Vec::new(),
            transmits: Vec::new(),
            batch: Vec::new(),
        }
    }

    /// The virtual clock.
    pub fn now(&self) -> Time {
        self.now
    }

    /// The simulation's generator, for tests that need their own random choices
    /// to follow the seed too.
    pub fn rng(&mut self) -> &mut SimRng {
        &mut self.rng
    }

    /// Adds a shard listening on `local_addr` with default configuration and a seed
    /// drawn from the simulation's generator.
    ///
    /// # Panics
    /// If a node already has `local_addr`.
    pub fn add_shard(&mut self, local_addr: SocketAddr) -> &mut Shard {
        let seed = self.rng.next_u64();
        self.add_shard_with(ShardConfig::new(local_addr, seed))
    }

    /// Adds a shard built from `config`, addressed by `config.local_addr`: a node of
    /// one shard.
    ///
    /// # Panics
    /// If a node already has that address.
    pub fn add_shard_with(&mut self, config: ShardConfig) -> &mut Shard {
        let addr = config.local_addr;
        self.add_node_with(vec![config]);
        self.shard_mut(addr)
    }

    /// Adds one shoal node of a shard per address, in that order (shard `i` of the
    /// node is `addrs[i]`, as room presence and mirrors name it), sharing one DTLS
    /// certificate as a node's shards do, each seeded from the simulation's
    /// generator.
    ///
    /// # Panics
    /// If an address is taken, or the system cannot make a certificate.
    pub fn add_node(&mut self, addrs: &[SocketAddr]) {
        let certificate = match DtlsCertificate::generate() {
            Ok(c) => std::sync::Arc::new(c),
            Err(e) => panic!("cannot generate the DTLS certificate: {e}"),
        };
        let configs = addrs
            .iter()
            .map(|&a| ShardConfig::with_certificate(a, self.rng.next_u64(), certificate.clone()))
            .collect();
        self.add_node_with(configs);
    }

    /// Adds one shoal node of a shard per configuration, in that order, each
    /// addressed by its `local_addr`.
    ///
    /// # Panics
    /// If an address is taken twice.
    pub fn add_node_with(&mut self, configs: Vec<ShardConfig>) {
        let node = self.nodes.len();
        for (shard, c) in configs.iter().enumerate() {
            let addr = c.local_addr;
            assert!(
                !self.slots.contains_key(&addr),
                "a node already has address {addr}"
            );
            self.slots.insert(
                addr,
                Slot {
                    node,
                    shard,
                    wake_at: None,
                    stalled_until: None,
                    held: Vec::new(),
                },
            );
        }
        let mut addrs: Vec<SocketAddr> = configs.iter().map(|c| c.local_addr).collect();
        addrs.sort_unstable();
        self.nodes.push((Node::new(configs), addrs));
    }

    /// Bounds the queue of batches each shard of the node holding `addr` takes from
    /// its siblings at `len` (`Node::set_sibling_queue_len`): a short queue shows
    /// what a node does when a shard falls behind its siblings.
    ///
    /// # Panics
    /// If no node has `addr`.
    pub fn set_sibling_queue_len(&mut self, addr: SocketAddr, len: usize) {
        let Some(node) = self
            .slots
            .get(&addr)
            .and_then(|s| self.nodes.get_mut(s.node))
        else {
            panic!("no node has address {addr}");
        };
        node.0.set_sibling_queue_len(len);
    }

    /// Stops the shard at `addr` for `duration` of virtual time, as a shard thread
    /// stuck in a long tick would be: neither its timers nor the datagrams reaching
    /// it run until then (they are held for its first tick after), and the batches
    /// its siblings put out for it wait in its queue, which fills.
    ///
    /// # Panics
    /// If no shard has `addr`.
    pub fn stall(&mut self, addr: SocketAddr, duration: Duration) {
        self.flush_dirty();
        let until = self.now + duration;
        let Some(slot) = self.slots.get_mut(&addr) else {
            panic!("no shard has address {addr}");
        };
        slot.stalled_until = Some(until);
        slot.wake_at = Some(until);
        self.schedule(until, What::Wake(addr));
    }

    /// Reliable room messages shard `addr` keeps for a sibling whose queue refused
    /// them, to hand over again ([`shoal_systems::Links`]).
    ///
    /// # Panics
    /// If no shard has `addr`.
    pub fn forwards_waiting(&self, addr: SocketAddr) -> usize {
        let Some((node, slot)) = self
            .slots
            .get(&addr)
            .and_then(|s| Some((self.nodes.get(s.node)?, s)))
        else {
            panic!("no shard has address {addr}");
        };
        node.0.forwards_waiting(slot.shard)
    }

    /// The addresses of all shards, in address order.
    pub fn nodes(&self) -> impl Iterator<Item = SocketAddr> + '_ {
        self.slots.keys().copied()
    }

    /// Whether a shard has `addr`.
    pub fn has_node(&self, addr: SocketAddr) -> bool {
        self.slots.contains_key(&addr)
    }

    /// The shard at `addr`.
    ///
    /// # Panics
    /// If no shard has `addr`.
    pub fn shard(&self, addr: SocketAddr) -> &Shard {
        let shard = self
            .slots
            .get(&addr)
            .and_then(|s| self.nodes.get(s.node)?.0.shard(s.shard));
        match shard {
            Some(shard) => shard,
            None => panic!("no node has address {addr}"),
        }
    }

    /// The shard at `addr`, to drive directly. Whatever it transmits, reports,
    /// schedules or puts out for its node's other shards meanwhile is collected
    /// before the next step, at the current time.
    ///
    /// # Panics
    /// If no shard has `addr`.
    pub fn shard_mut(&mut self, addr: SocketAddr) -> &mut Shard {
        let now = self.now;
        let Some(&Slot { node, shard, .. }) = self.slots.get(&addr) else {
            panic!("no node has address {addr}");
        };
        if !self.dirty.contains(&addr) {
            self.dirty.push(addr);
        }
        match self.nodes.get_mut(node).and_then(|n| n.0.shard_mut(shard)) {
            Some(shard) => {
                // What the caller does now happens at the virtual time, not at the
                // shard's last tick (a message's lifetime starts when it is sent).
                shard.advance_clock(now);
                shard
            }
            None => panic!("no node has address {addr}"),
        }
    }

    /// Applies `command` to the shard at `addr` at the current virtual time.
    ///
    /// # Panics
    /// If no node has `addr`.
    pub fn command(&mut self, addr: SocketAddr, command: Command) -> Result<(), CommandError> {
        let now = self.now;
        let result = self.shard_mut(addr).command(now, command);
        self.flush_dirty();
        result
    }

    /// Puts a datagram on the link from `datagram.local` to `datagram.remote` as if a
    /// node at `local` had sent it (which need not exist): for spoofed, malformed or
    /// off-path traffic.
    pub fn inject(&mut self, datagram: Datagram) {
        self.send(datagram);
    }

    /// The link configuration used where no per-direction one is set.
    ///
    /// # Panics
    /// On a probability outside `[0, 1]` or a zero bandwidth.
    pub fn set_default_link(&mut self, config: LinkConfig) {
        config.assert_valid();
        self.default_link = config;
    }

    /// Configures the direction `from -> to`. Datagrams already in flight keep the
    /// fate they were given; the link's queue and ordering carry over.
    ///
    /// # Panics
    /// On a probability outside `[0, 1]` or a zero bandwidth.
    pub fn set_link(&mut self, from: SocketAddr, to: SocketAddr, config: LinkConfig) {
        config.assert_valid();
        self.link_configs.insert((from, to), config);
    }

    /// Configures both directions between `a` and `b` alike.
    ///
    /// # Panics
    /// On a probability outside `[0, 1]` or a zero bandwidth.
    pub fn set_link_both(&mut self, a: SocketAddr, b: SocketAddr, config: LinkConfig) {
        self.set_link(a, b, config.clone());
        self.set_link(b, a, config);
    }

    /// Drops every datagram on `from -> to` that `filter` picks (it sees the
    /// virtual time and the payload), before the link's own fate: targeted loss, such
    /// as every small DTLS record for a while, where random loss would take many seeds
    /// to hit. Dropped datagrams count and trace as lost. `None` removes the filter.
    pub fn set_drop_filter(
        &mut self,
        from: SocketAddr,
        to: SocketAddr,
        filter: Option<DropFilter>,
    ) {
        match filter {
            Some(f) => {
                self.drop_filters.insert((from, to), f);
            }
            None => {
                self.drop_filters.remove(&(from, to));
            }
        }
    }

    /// The configuration in force for `from -> to`.
    pub fn link(&self, from: SocketAddr, to: SocketAddr) -> &LinkConfig {
        self.link_configs
            .get(&(from, to))
            .unwrap_or(&self.default_link)
    }

    /// What the link `from -> to` counted; all zero if it never carried anything.
    pub fn link_stats(&self, from: SocketAddr, to: SocketAddr) -> NetStats {
        self.links
            .get(&(from, to))
            .map(|l| l.stats.clone())
            .unwrap_or_default()
    }

    /// What all links counted together (`last_delivered_at` is the latest delivery).
    pub fn stats(&self) -> &NetStats {
        &self.stats
    }

    /// Steps taken since the simulation began.
    pub fn steps(&self) -> u64 {
        self.steps_total
    }

    /// Bounds the steps of each [`Sim::run_until`] and [`Sim::run_for`] call.
    pub fn set_step_limit(&mut self, steps: u64) {
        self.step_limit = steps;
    }

    /// A stable 64-bit hash of everything that happened so far: every datagram's fate
    /// (sent with its payload, queue-dropped, lost, reordered, duplicated, delivered,
    /// undeliverable) with its time and addresses, and every event the shards
    /// reported. Equal for two runs of one seed with the same build and scenario.
    pub fn trace_hash(&self) -> u64 {
        self.trace.hash()
    }

    /// Starts keeping a text log of the newest `max_lines` trace records, for reading
    /// when a seed fails ([`Sim::trace_log`]). The hash does not depend on it.
    pub fn enable_trace_log(&mut self, max_lines: usize) {
        self.trace.enable_log(max_lines);
    }

    /// The text log, oldest line first; empty unless [`Sim::enable_trace_log`] was called.
    pub fn trace_log(&self) -> String {
        self.trace.log_text()
    }

    /// The oldest event not yet taken, with the address of the node that reported it.
    pub fn poll_event(&mut self) -> Option<(SocketAddr, ShardEvent)> {
        self.flush_dirty();
        self.events.pop_front()
    }

    /// Takes every event reported so far, oldest first.
    pub fn drain_events(&mut self) -> impl Iterator<Item = (SocketAddr, ShardEvent)> + '_ {
        self.flush_dirty();
        self.events.drain(..)
    }

    /// The time of the next scheduled event, if any (possibly a wake-up that turns out
    /// to have nothing to do: stepping to it is harmless).
    pub fn next_event_at(&mut self) -> Option<Time> {
        self.flush_dirty();
        self.queue.peek().map(|Reverse(s)| s.at)
    }

    /// Advances to the next event time and processes everything due then: returns
    /// false, doing nothing, when nothing is scheduled.
    pub fn step(&mut self) -> bool {
        self.flush_dirty();
        let Some(Reverse(first)) = self.queue.peek() else {
            return false;
        };
        let at = first.at;
        debug_assert!(at >= self.now, "the event queue went back in time");
        self.now = self.now.max(at);
        self.steps_total += 1;

        let mut due = std::mem::take(&mut self.due);
        let mut woken = std::mem::take(&mut self.woken);
        while self.queue.peek().is_some_and(|Reverse(s)| s.at == at) {
            let Some(Reverse(s)) = self.queue.pop() else {
                break;
            };
            match s.what {
                What::Deliver { from, to, payload } => self.arrive(at, from, to, payload, &mut due),
                What::Wake(addr) => {
                    if let Some(slot) = self.slots.get_mut(&addr)
                        && slot.wake_at == Some(at)
                    {
                        slot.wake_at = None;
                        woken.push(addr);
                    }
                }
            }
        }
        // One batch per node, nodes in address order, each batch in arrival order. A
        // node's live wake-up is unique (it is cleared when taken), so `woken` has no
        // duplicates.
        due.sort_by_key(|a| a.to);
        woken.sort_unstable();
        let (mut next_due, mut next_woken) = (0, 0);
        loop {
            let addr = match (
                due.get(next_due).map(|a| a.to),
                woken.get(next_woken).copied(),
            ) {
                (None, None) => break,
                (Some(d), None) => d,
                (None, Some(w)) => w,
                (Some(d), Some(w)) => d.min(w),
            };
            if woken.get(next_woken) == Some(&addr) {
                next_woken += 1;
            }
            let end = next_due + due[next_due..].iter().take_while(|a| a.to == addr).count();
            self.tick_node(addr, &mut due[next_due..end]);
            next_due = end;
        }
        woken.clear();
        due.clear();
        self.due = due;
        self.woken = woken;
        true
    }

    /// Runs until `done` holds (checked before the first step and after each), and
    /// returns the time it first held. Fails if `limit` of virtual time passes first
    /// (the clock is then left at the limit), if nothing is left to happen, or if the
    /// step limit is reached.
    pub fn run_until(
        &mut self,
        mut done: impl FnMut(&mut Sim) -> bool,
        limit: Duration,
    ) -> Result<Time, SimError> {
        let deadline = self.now + limit;
        let mut steps = 0u64;
        loop {
            if done(self) {
                return Ok(self.now);
            }
            match self.next_event_at() {
                None => return Err(SimError::Idle(self.now)),
                Some(at) if at > deadline => {
                    self.now = deadline;
                    return Err(SimError::TimeLimit(deadline));
                }
                Some(_) => {}
            }
            if steps >= self.step_limit {
                return Err(SimError::StepLimit(steps, self.now));
            }
            self.step();
            steps += 1;
        }
    }

    /// Runs every event of the next `duration` and leaves the clock at its end.
    pub fn run_for(&mut self, duration: Duration) -> Result<Time, SimError> {
        let end = self.now + duration;
        let mut steps = 0u64;
        while let Some(at) = self.next_event_at()
            && at <= end
        {
            if steps >= self.step_limit {
                return Err(SimError::StepLimit(steps, self.now));
            }
            self.step();
            steps += 1;
        }
        self.now = self.now.max(end);
        Ok(self.now)
    }

    /// A scheduled datagram reached `to`: queue it for the node's batch, or drop it.
    fn arrive(
        &mut self,
        at: Time,
        from: SocketAddr,
        to: SocketAddr,
        payload: Bytes,
        due: &mut Vec<Arrival>,
    ) {
        let link = self.links.entry((from, to)).or_default();
        if self.slots.contains_key(&to) {
            self.trace.datagram(Fate::Delivered, at, from, to, &payload);
            link.stats.delivered += 1;
            link.stats.last_delivered_at = Some(at);
            self.stats.delivered += 1;
            self.stats.last_delivered_at = Some(at);
            due.push(Arrival { to, from, payload });
        } else {
            self.trace
                .datagram(Fate::Undeliverable, at, from, to, &payload);
            link.stats.undeliverable += 1;
            self.stats.undeliverable += 1;
        }
    }

    /// Runs one tick of the shard at `addr` over `arrivals` (or its timers if none),
    /// then collects the output of every shard of its node (what it put out for its
    /// siblings wakes them at this instant).
    fn tick_node(&mut self, addr: SocketAddr, arrivals: &mut [Arrival]) {
        let now = self.now;
        let Some(slot) = self.slots.get_mut(&addr) else {
            return;
        };
        let (node, shard) = (slot.node, slot.shard);
        match slot.stalled_until {
            Some(until) if until > now => {
                // Stalled: what arrives waits for the wake-up `stall` scheduled.
                slot.held.extend(arrivals.iter_mut().map(Arrival::take));
                return;
            }
            Some(_) => slot.stalled_until = None,
            None => {}
        }
        self.batch.append(&mut slot.held);
        let Some((n, _)) = self.nodes.get_mut(node) else {
            return;
        };
        if arrivals.is_empty() && self.batch.is_empty() {
            n.handle_timeout(shard, now);
        } else {
            self.batch.extend(arrivals.iter_mut().map(Arrival::take));
            n.handle_datagrams(shard, now, self.batch.drain(..));
        }
        self.collect_node(node);
    }

    /// Collects the output of every shard handed out by `&mut`, after moving what it
    /// put out for its siblings.
    fn flush_dirty(&mut self) {
        while let Some(addr) = self.dirty.pop() {
            let Some(&Slot { node, shard, .. }) = self.slots.get(&addr) else {
                continue;
            };
            if let Some((n, _)) = self.nodes.get_mut(node) {
                n.route(shard);
            }
            self.collect_node(node);
        }
    }

    /// Collects every shard of node `node`, in address order.
    fn collect_node(&mut self, node: usize) {
        let Some((_, addrs)) = self.nodes.get_mut(node) else {
            return;
        };
        let addrs = std::mem::take(addrs);
        for &addr in &addrs {
            self.collect(addr);
        }
        if let Some((_, slot)) = self.nodes.get_mut(node) {
            *slot = addrs;
        }
    }

    /// Takes a shard's transmits onto the links, its events into the queue, and its
    /// next wake-up into the schedule.
    fn collect(&mut self, addr: SocketAddr) {
        let now = self.now;
        let Some(slot) = self.slots.get_mut(&addr) else {
            return;
        };
        let Some((node, _)) = self.nodes.get_mut(slot.node) else {
            return;
        };
        let index = slot.shard;
        let Some(shard) = node.shard_mut(index) else {
            return;
        };
        let mut out = std::mem::take(&mut self.transmits);
        shard.poll_transmit(&mut out);
        while let Some(event) = shard.poll_event() {
            self.trace.event(now, addr, &event);
            self.events.push_back((addr, event));
        }
        // A deadline already past (or a stale heap top) wakes the shard at once; so
        // do batches its siblings left for it. A stalled shard wakes when its stall
        // ends, to take what was held for it.
        let wake = match slot.stalled_until {
            Some(until) if until > now => Some(until),
            _ => node.poll_timeout(index).map(|t| t.max(now)),
        };
        if wake != slot.wake_at {
            slot.wake_at = wake;
            if let Some(at) = wake {
                self.schedule(at, What::Wake(addr));
            }
        }
        for d in out.drain(..) {
            self.send(d);
        }
        self.transmits = out;
    }

    /// Puts a datagram on its link and schedules what the link decided.
    fn send(&mut self, d: Datagram) {
        let (from, to, now) = (d.local, d.remote, self.now);
        let cfg = self
            .link_configs
            .get(&(from, to))
            .unwrap_or(&self.default_link);
        let link = self.links.entry((from, to)).or_default();
        self.trace.datagram(Fate::Sent, now, from, to, &d.payload);
        self.stats.sent += 1;
        if let Some(filter) = self.drop_filters.get_mut(&(from, to))
            && filter(now, &d.payload)
        {
            self.stats.lost += 1;
            self.trace.datagram(Fate::Lost, now, from, to, &d.payload);
            return;
        }
        let retransmitted = link.stats.retransmitted;
        let outcome = link.transmit(cfg, now, d.payload.len(), &mut self.rng);
        self.stats.retransmitted += link.stats.retransmitted - retransmitted;
        match outcome {
            Outcome::QueueDropped => {
                self.stats.queue_dropped += 1;
                self.trace
                    .datagram(Fate::QueueDropped, now, from, to, &d.payload);
            }
            Outcome::Lost => {
                self.stats.lost += 1;
                self.trace.datagram(Fate::Lost, now, from, to, &d.payload);
            }
            Outcome::Arrives {
                at,
                reordered,
                duplicate_at,
            } => {
                if reordered {
                    self.stats.reordered += 1;
                    self.trace
                        .datagram(Fate::Reordered, at, from, to, &d.payload);
                }
                let copy = duplicate_at.map(|dup| (dup, d.payload.clone()));
                self.schedule(
                    at,
                    What::Deliver {
                        from,
                        to,
                        payload: d.payload,
                    },
                );
                if let Some((dup, payload)) = copy {
                    self.stats.duplicated += 1;
                    self.trace
                        .datagram(Fate::Duplicated, dup, from, to, &payload);
                    self.schedule(dup, What::Deliver { from, to, payload });
                }
            }
        }
    }

    fn schedule(&mut self, at: Time, what: What) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.queue.push(Reverse(Scheduled { at, seq, what }));
    }
}

#[cfg(test)]
mod tests;
