//! The `Shard`: one World and one Schedule behind a sans-I/O surface.
//!
//! Input: [`Shard::handle_datagrams`] (a batch and the time), [`Shard::handle_timeout`]
//! and [`Shard::command`]. Output: [`Shard::poll_transmit`], [`Shard::poll_timeout`] and
//! [`Shard::poll_event`]. A shard never reads a clock or a socket, so the mio driver and
//! the simulator drive it identically, and the same inputs give the same outputs.
//!
//! The surface is split by what it serves: this file the tick and its outputs;
//! `commands` what the owner asks of the shard ([`Command`]) and adding peers;
//! `peers` what the owner reads of a peer and closing one; `channels` SCTP and data
//! channels; `rooms` rooms and room messages, across shards too; `tracks` media.

mod channels;
mod commands;
mod peers;
mod rooms;
mod tracks;

pub use channels::SctpSendError;
pub use commands::{Command, CommandError, PeerDtls, PeerSpec};
pub use peers::{Census, CongestionReport, LayerReport};

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bevy_ecs::prelude::*;
use rand_chacha::ChaCha12Rng;
use rand_core::{RngCore, SeedableRng};
use shoal_components::congestion::pacer;
use shoal_components::dtls::{DtlsCertificate, DtlsConfig};
use shoal_components::media::{RetiredSsrcs, TrackIndex};
use shoal_components::net::{Datagram, FiveTuple};
use shoal_components::peer::PeerIndex;
use shoal_components::relay::{
    ForwardsWaiting, MediaRelayOut, RelayClosing, RelayGaps, RelayHeld, RelayLimits, RelayOutbox,
};
use shoal_components::room::{RoomId, RoomIndex, RoomPresence};
use shoal_components::sctp::assoc::SctpLimits;
use shoal_components::sctp::cookie::CookieKey;
use shoal_components::shared::{SctpShared, ShardDtls, ShardLimits, ShardRng};
use shoal_components::stats::ShardStats;
use shoal_components::tick::{
    DtlsInbox, DtlsStart, DueTimers, Events, Inbox, LocalAddr, MediaInbox, MediaOut, MediaPlain,
    MediaStart, Now, Outbox, RemoveReason, SctpInbox, SctpStart, SctpWork, ShardEvent,
    SlowReceivers, StunInbox, Transmits, WriteBuffer,
};
use shoal_components::time::Time;
use shoal_components::timer::TimerHeap;

use crate::passes::{self, ice};

/// How a shard is set up.
#[derive(Clone, Debug)]
pub struct ShardConfig {
    /// The address of the shard's UDP socket: the source of everything it sends,
    /// but for a peer added with `Command::AddPeerFrom`, which sends from its own.
    pub local_addr: SocketAddr,
    /// Seed of the shard's random generator (transaction ids, tie-breakers). The
    /// simulator passes a fixed seed; the server a random one.
    pub seed: u64,
    /// Datagrams accepted per tick; the rest are dropped and counted. At least 1
    /// (0 is taken as 1).
    pub max_datagrams_per_tick: usize,
    /// Peers this shard will hold at once, counting members that left and still
    /// relay what they sent (`RelayClosing`).
    pub max_peers: usize,
    /// Consent lapses after this long without a valid check (RFC 7675 §5.1: 30 s).
    pub consent_timeout: Duration,
    /// A peer that nominates no path within this long of being added, or of its last
    /// valid check, is removed (60 s: as long as a controlling client keeps trying).
    pub connect_timeout: Duration,
    /// SCTP buffer, window and packet sizes of every association of the shard.
    pub sctp: SctpLimits,
    /// How the room relay bounds each receiver's queue (watermarks, hold limit).
    pub relay: RelayLimits,
    /// How much unused pacing budget carries over for each peer, as time at its
    /// pacing rate: the longest burst sent at once ([`pacer::DEFAULT_BURST`], which
    /// says what a longer one costs).
    pub pacer_burst: Duration,
    /// DTLS handshake parameters shared by every peer of the shard.
    pub dtls: Arc<DtlsConfig>,
    /// The certificate the shard presents in DTLS; its SHA-256 fingerprint goes into
    /// the SDP it hands out. Share one between shards so a node has one fingerprint.
    pub certificate: Arc<DtlsCertificate>,
}

impl ShardConfig {
    /// Defaults for a shard whose socket is `local_addr`, with a new certificate.
    ///
    /// # Panics
    /// If the system random generator cannot produce a key pair for the
    /// certificate: nothing can be secured on such a machine. Use
    /// [`ShardConfig::with_certificate`] to handle that case or to share one.
    pub fn new(local_addr: SocketAddr, seed: u64) -> ShardConfig {
        let certificate = match DtlsCertificate::generate() {
            Ok(c) => Arc::new(c),
            Err(e) => panic!("cannot generate the DTLS certificate: {e}"),
        };
        ShardConfig::with_certificate(local_addr, seed, certificate)
    }

    /// Defaults for a shard whose socket is `local_addr`, presenting `certificate`.
    pub fn with_certificate(
        local_addr: SocketAddr,
        seed: u64,
        certificate: Arc<DtlsCertificate>,
    ) -> ShardConfig {
        ShardConfig {
            local_addr,
            seed,
            max_datagrams_per_tick: 1024,
            max_peers: 10_000,
            consent_timeout: ice::CONSENT_TIMEOUT,
            connect_timeout: ice::ICE_CONNECT_BUDGET,
            sctp: SctpLimits::default(),
            relay: RelayLimits::default(),
            pacer_burst: pacer::DEFAULT_BURST,
            dtls: Arc::new(DtlsConfig::default()),
            certificate,
        }
    }
}

/// One shard: a World of peers and a Schedule of passes.
pub struct Shard {
    world: World,
    schedule: Schedule,
    config: ShardConfig,
    events: VecDeque<ShardEvent>,
    /// Scratch for `send_data`'s receivers, reused.
    room_targets: Vec<Entity>,
    /// Set by [`Shard::drain`]: the peers whose SCTP associations are shutting
    /// down, each closed once its association has ended.
    draining: Option<Vec<Entity>>,
    /// Rooms whose set of other shards shrank while a closing member of theirs was
    /// here (`RelayClosing`): what the owner last set, applied once no closing
    /// member of the room is left. Meanwhile the shards it had stay, so what the
    /// member sent still reaches the room there.
    presence_after_closing: Vec<(RoomId, Vec<usize>)>,
}

impl Shard {
    /// A shard with no peers.
    ///
    /// # Panics
    /// If the pass schedule does not build: a programming error, not an input one.
    pub fn new(config: ShardConfig) -> Shard {
        let mut world = World::new();
        world.insert_resource(Now(Time::ZERO));
        world.insert_resource(LocalAddr(config.local_addr));
        world.insert_resource(ShardRng(ChaCha12Rng::seed_from_u64(config.seed)));
        world.insert_resource(ShardLimits {
            consent_timeout: config.consent_timeout,
            connect_timeout: config.connect_timeout,
        });
        world.init_resource::<ShardStats>();
        world.init_resource::<PeerIndex>();
        world.init_resource::<TimerHeap>();
        world.init_resource::<Inbox>();
        world.init_resource::<StunInbox>();
        world.init_resource::<DtlsInbox>();
        world.init_resource::<DtlsStart>();
        world.init_resource::<SctpInbox>();
        world.init_resource::<SctpStart>();
        world.init_resource::<SctpWork>();
        world.init_resource::<RoomIndex>();
        world.init_resource::<TrackIndex>();
        world.init_resource::<RetiredSsrcs>();
        world.init_resource::<MediaInbox>();
        world.init_resource::<MediaStart>();
        world.init_resource::<MediaRelayOut>();
        world.init_resource::<MediaPlain>();
        world.init_resource::<MediaOut>();
        world.init_resource::<RoomPresence>();
        world.init_resource::<SlowReceivers>();
        world.init_resource::<RelayOutbox>();
        world.init_resource::<ForwardsWaiting>();
        world.insert_resource(config.relay.clamped(&config.sctp));
        world.init_resource::<RelayHeld>();
        world.init_resource::<RelayClosing>();
        world.init_resource::<RelayGaps>();
        let mut secret = [0u8; 32];
        world.resource_mut::<ShardRng>().0.fill_bytes(&mut secret);
        world.insert_resource(SctpShared {
            cookie_key: CookieKey::new(&secret),
            limits: config.sctp,
        });
        world.insert_resource(ShardDtls {
            config: config.dtls.clone(),
            certificate: config.certificate.clone(),
        });
        world.init_resource::<DueTimers>();
        world.init_resource::<Outbox>();
        world.init_resource::<Transmits>();
        world.init_resource::<WriteBuffer>();
        world.init_resource::<Events>();

        let mut schedule = passes::build_schedule();
        // Build the schedule now rather than in the first tick, so what that adds to
        // the World (bevy keeps some of its own state as entities) is there from
        // the start and `entity_count` has one baseline.
        if let Err(e) = schedule.initialize(&mut world) {
            panic!("the shard schedule does not build: {e}");
        }
        Shard {
            world,
            schedule,
            config,
            events: VecDeque::new(),
            room_targets: Vec::new(),
            draining: None,
            presence_after_closing: Vec::new(),
        }
    }

    /// The address of the shard's socket.
    pub fn local_addr(&self) -> SocketAddr {
        self.config.local_addr
    }

    /// Whether `path` is one a peer has validated (a check with its credentials
    /// came on it): the driver keeps an ICE-TCP connection open only while its path
    /// is one.
    pub fn path_is_valid(&self, path: FiveTuple) -> bool {
        self.world
            .resource::<PeerIndex>()
            .by_path
            .contains_key(&path)
    }

    /// The most datagrams one tick takes ([`ShardConfig::max_datagrams_per_tick`]).
    pub fn max_datagrams_per_tick(&self) -> usize {
        self.config.max_datagrams_per_tick.max(1)
    }

    /// Feeds a batch of datagrams that arrived by `now` and runs one tick over them.
    /// Past `max_datagrams_per_tick` datagrams are dropped and counted.
    pub fn handle_datagrams(&mut self, now: Time, datagrams: impl IntoIterator<Item = Datagram>) {
        self.handle_received(now, datagrams.into_iter().map(|d| (d, now)));
    }

    /// [`Shard::handle_datagrams`] with when each datagram arrived (the kernel's
    /// receive time, at or before `now`): a thread that read a backlog late still
    /// reports to each publisher when its packets reached the host
    /// (transport-wide feedback), while the tick runs at `now`.
    pub fn handle_received(
        &mut self,
        now: Time,
        datagrams: impl IntoIterator<Item = (Datagram, Time)>,
    ) {
        let limit = self.max_datagrams_per_tick();
        let mut over = 0u64;
        let mut fed = 0u64;
        {
            let mut inbox = self.world.resource_mut::<Inbox>();
            for d in datagrams {
                if inbox.0.len() < limit {
                    inbox.0.push(d);
                    fed += 1;
                } else {
                    over += 1;
                }
            }
        }
        let mut stats = self.world.resource_mut::<ShardStats>();
        stats.datagrams_in += fed;
        stats.dropped_over_batch_limit += over;
        self.tick(now);
    }

    /// Runs one tick with no new datagrams: timers due by `now` fire.
    pub fn handle_timeout(&mut self, now: Time) {
        self.tick(now);
    }

    fn tick(&mut self, now: Time) {
        // Time never runs backwards inside a shard, whatever the caller's clock does.
        let mut cur = self.world.resource_mut::<Now>();
        if now > cur.0 {
            cur.0 = now;
        }
        // Before the passes: what members that are gone now put out in their last
        // tick has been handed to the siblings they had.
        self.settle_presence();
        self.schedule.run(&mut self.world);
        // Receivers the relay found too slow for a reliable channel: cut off, but
        // what they sent and SCTP acknowledged still goes to their rooms.
        // (Rare: the list is empty, and allocates nothing, on almost every tick.)
        let slow = std::mem::take(&mut self.world.resource_mut::<SlowReceivers>().0);
        for entity in slow {
            if self.world.get_entity(entity).is_ok() {
                self.retire_entity(entity, RemoveReason::SlowReceiver);
            }
        }
        // Rooms whose links brought a gap marker: what came before it went out in
        // the passes; now the room's reliable channels close, here and, behind what
        // this shard forwarded, on its siblings (not on to its own links).
        let gaps = std::mem::take(&mut self.world.resource_mut::<RelayGaps>().0);
        for (room, _) in gaps {
            self.close_reliable_channels(room);
            self.pass_gap_on(room, None, true);
        }
        self.sweep_closing();
        self.close_drained();
        self.collect_events();
        // bevy_ecs writes a message for every component removed or despawned, for
        // `RemovedComponents` readers (shoal has none); a World run outside bevy's App
        // keeps them until `clear_trackers` swaps their buffers. Without this they
        // piled up with every peer, track and subscription that ever went: a few
        // hundred bytes a session, for as long as the process ran.
        self.world.clear_trackers();
    }

    /// Removal messages bevy_ecs holds (see the end of `tick`).
    #[cfg(test)]
    pub(crate) fn removal_messages(&self) -> usize {
        self.world
            .removed_components()
            .iter()
            .map(|(_, m)| m.len())
            .sum()
    }

    fn collect_events(&mut self) {
        let mut ev = self.world.resource_mut::<Events>();
        self.events.extend(ev.0.drain(..));
    }

    /// Moves every datagram ready to send into `out` (appending; the caller owns and
    /// reuses the batch).
    pub fn poll_transmit(&mut self, out: &mut Vec<Datagram>) {
        let mut tx = self.world.resource_mut::<Transmits>();
        out.append(&mut tx.0);
    }

    /// When the shard next wants [`Shard::handle_timeout`]; `None` when it has nothing
    /// scheduled. Waking early is harmless. At once when a room's presence waits to
    /// be applied and no member of it is closing any more (`settle_presence`).
    pub fn poll_timeout(&self) -> Option<Time> {
        let timer = self.world.resource::<TimerHeap>().peek();
        if self.presence_to_settle() {
            let now = self.world.resource::<Now>().0;
            return Some(timer.map_or(now, |t| t.min(now)));
        }
        timer
    }

    /// The next event for the owner, oldest first.
    pub fn poll_event(&mut self) -> Option<ShardEvent> {
        self.events.pop_front()
    }

    /// What the shard counted.
    pub fn stats(&self) -> &ShardStats {
        self.world.resource::<ShardStats>()
    }

    /// SHA-256 of the shard's DTLS certificate, for `a=fingerprint`.
    pub fn fingerprint(&self) -> [u8; 32] {
        self.config.certificate.fingerprint_sha256()
    }

    /// Moves the shard's clock to `now` without running a tick, so that calls made
    /// between ticks ([`Shard::sctp_send`], [`Shard::channel_send`], …) happen at
    /// `now`: a message's lifetime, for one, starts there. Time never runs backwards.
    pub fn advance_clock(&mut self, now: Time) {
        let mut cur = self.world.resource_mut::<Now>();
        if now > cur.0 {
            cur.0 = now;
        }
    }

    /// The shard's current time (the latest it was given).
    pub fn now(&self) -> Time {
        self.world.resource::<Now>().0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Pass;

    /// The passes a tick ran, in order.
    #[derive(Resource, Default)]
    struct PassTrace(Vec<Pass>);

    #[test]
    fn pass_order_is_declared_once() {
        let mut shard = Shard::new(ShardConfig::new("127.0.0.1:7100".parse().unwrap(), 1));
        // The executor's order of the systems a shard built, each known by its
        // system: exactly one per pass, in Pass::ORDER (bevy's own sync points,
        // which apply a pass's commands, aside).
        let sync = std::any::TypeId::of::<bevy_ecs::schedule::ApplyDeferred>();
        let ran: Vec<Option<Pass>> = shard
            .schedule
            .systems()
            .unwrap()
            .filter(|(_, s)| s.system_type() != sync)
            .map(|(_, s)| {
                Pass::ORDER
                    .into_iter()
                    .find(|p| p.system().system_type() == s.system_type())
            })
            .collect();
        let want: Vec<Option<Pass>> = Pass::ORDER.into_iter().map(Some).collect();
        assert_eq!(ran, want);
        // A tick traced pass by pass runs the sets in that order.
        shard.world.init_resource::<PassTrace>();
        for pass in Pass::ORDER {
            shard
                .schedule
                .add_systems((move |mut t: ResMut<PassTrace>| t.0.push(pass)).in_set(pass));
        }
        shard.handle_timeout(Time::from_micros(1));
        assert_eq!(shard.world.resource::<PassTrace>().0, Pass::ORDER);
    }

    /// A room's presence set while records of it wait in the outbox, not yet
    /// routed by the owner (the driver applies commands between a tick and its
    /// routing), applies only from the next tick: the records go to the shards the
    /// room had when they were put out, a gap record as any.
    #[test]
    fn presence_waits_for_records_not_yet_routed() {
        use shoal_components::relay::Forwarded;
        let room = RoomId(4);
        let mut shard = Shard::new(ShardConfig::new("127.0.0.1:7100".parse().unwrap(), 1));
        shard.set_room_siblings(room, &[1, 2]);
        shard
            .world
            .resource_mut::<RelayOutbox>()
            .0
            .push(Forwarded::gap(room, None, false));
        shard.set_room_siblings(room, &[]);
        assert_eq!(shard.room_siblings(room), [1, 2]);
        assert!(shard.presence_to_settle());
        let mut links = crate::node::Links::new(0, 3);
        let mut sent = Vec::new();
        links.collect(&mut shard, |to, batch| {
            sent.push((to, batch.room.iter().filter(|f| f.gap).count()));
            Ok(())
        });
        assert_eq!(sent, [(1, 1), (2, 1)]);
        // With nothing left to route the owner's last word holds, from the next tick.
        shard.handle_timeout(Time::from_micros(1));
        assert!(shard.room_siblings(room).is_empty());
        shard.set_room_siblings(room, &[2]);
        assert_eq!(shard.room_siblings(room), [2]);
    }
}
