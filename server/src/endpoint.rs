//! One shard on the calling thread over a real UDP socket, with the application in
//! the same loop: how benchmarks and tests run shoal client stacks over real sockets,
//! one thread each.
//!
//! [`run`] is the driver's shard loop (`driver/shard_loop.rs`) cut down to one shard
//! and no command channel, plus an application callback. Every iteration of the loop
//! does, in order:
//!
//! 1. wait on a mio `Poll` for the socket, at most until the shard's
//!    [`Shard::poll_timeout`] (and at most [`MAX_POLL_WAIT`]); the wait is skipped
//!    while the socket may still hold datagrams (readiness is edge-triggered);
//! 2. read about [`BATCH`] datagrams into one reused batch with batched system calls
//!    ([`crate::udp`]: `recvmmsg` and GRO, received in place into a large buffer and
//!    split off as `Bytes`), and run one tick over them with [`Shard::handle_datagrams`] (which also fires due
//!    timers), or, with nothing read, [`Shard::handle_timeout`] if a deadline passed;
//! 3. send what the tick produced ([`Shard::poll_transmit`]; runs of equal-sized
//!    datagrams to one destination as one GSO `sendmsg`);
//! 4. hand the events the tick raised ([`Shard::poll_event`]) to the application, with
//!    the shard itself and the iteration's time; the application reads the events,
//!    queues messages ([`Shard::sctp_send`]), looks at buffered amounts, and says
//!    whether to go on;
//! 5. send anything the application's calls produced directly.
//!
//! A message the application queues goes out in the next tick: `sctp_send` arms the
//! peer's send timer at the current time, so `poll_timeout` is "now" and the next
//! iteration does not wait; it ticks at once, together with whatever arrived meanwhile.
//! So one batch in gives one tick, one flush and one application turn, and the
//! application's work and the connection's stay on one thread, with no wake-ups or
//! channel hops between them (LESSONS.md: per-message wake-ups were webrtc-rs's cost).
//!
//! The application is called once per iteration, so at least every
//! [`MAX_POLL_WAIT`] even when nothing happens: it can watch a wall-clock deadline or a
//! flag another thread sets, and return [`Control::Stop`].
//!
//! [`pair_specs`] is the signalling for two such endpoints: it sets up one peer on each
//! side, as an SDP offer and answer would, so that two shards in one process (or two
//! processes) can connect to each other over loopback. To join a shoal node instead,
//! an endpoint sends a [`data_offer`] over the node's signalling and adds the peer
//! [`DataOffer::accept`] makes of the answer.
//!
//! ```no_run
//! use std::net::UdpSocket;
//! use shoal_server::endpoint::{self, Control};
//! use shoal_server::sim::{PeerId, Shard, ShardConfig, Time};
//!
//! let a_sock = UdpSocket::bind("127.0.0.1:0")?;
//! let b_sock = UdpSocket::bind("127.0.0.1:0")?;
//! let mut a = Shard::new(ShardConfig::new(a_sock.local_addr()?, 1));
//! let mut b = Shard::new(ShardConfig::new(b_sock.local_addr()?, 2));
//! let mut rng = endpoint::os_rng()?;
//! let (lite, controlling) = endpoint::pair_specs(
//!     PeerId(1), a.local_addr(), a.fingerprint(), b.fingerprint(), &mut rng);
//! a.command(Time::ZERO, shoal_server::sim::Command::AddPeer(lite)).unwrap();
//! b.command(Time::ZERO, shoal_server::sim::Command::AddPeer(controlling)).unwrap();
//! let t = std::thread::spawn(move || endpoint::run(b_sock, b, |shard, _now, _events| {
//!     if shard.sctp_established(PeerId(1)) { Control::Stop } else { Control::Continue }
//! }));
//! endpoint::run(a_sock, a, |shard, _now, _events| {
//!     if shard.sctp_established(PeerId(1)) { Control::Stop } else { Control::Continue }
//! })?;
//! t.join().unwrap()?;
//! # Ok::<(), std::io::Error>(())
//! ```

use std::io;
use std::net::{SocketAddr, UdpSocket as StdUdpSocket};
use std::time::{Duration, Instant};

use mio::net::UdpSocket;

pub mod media;
mod offer;
pub mod signal;

pub use media::{MediaOffer, MediaSession, OfferShape, media_offer};
pub use offer::{AnswerError, DataOffer, data_offer};

use crate::udp::UdpIo;
use mio::{Events, Interest, Poll, Token};
use rand_chacha::ChaCha12Rng;
use rand_core::{RngCore, SeedableRng};
use shoal_components::dtls::DtlsRole;
use shoal_components::net::Datagram;
use shoal_components::peer::{IceCredentials, IceRole, PeerId};
use shoal_components::time::Time;
use shoal_systems::{PeerDtls, PeerSpec, Shard, ShardEvent};

/// Datagrams read into one batch, and so into one tick (the driver's default); a
/// GRO burst that arrives last is taken whole, so a batch may hold a little more.
pub const BATCH: usize = 64;
/// The longest the loop sleeps between two application turns.
pub const MAX_POLL_WAIT: Duration = Duration::from_millis(100);

/// The token of the endpoint's socket.
const SOCKET: Token = Token(0);

/// Ufrag length: 8 ice-chars carry 48 random bits (RFC 8445 §5.3 asks for 24 or more).
const UFRAG_LEN: usize = 8;
/// Password length: 24 ice-chars carry 144 random bits (RFC 8445 §5.3 asks for 128).
const PWD_LEN: usize = 24;
/// The ICE character set, RFC 8839 §5.4: `ice-char = ALPHA / DIGIT / "+" / "/"`.
pub(crate) const ICE_CHARS: &[u8; 64] =
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// What the application wants after its turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Control {
    /// Keep running the loop.
    Continue,
    /// Send what is pending and return the shard.
    Stop,
}

/// Runs `shard` over `socket` on the calling thread until `app` returns
/// [`Control::Stop`], and returns the shard. See the [module docs](self) for the loop.
///
/// `socket` is made non-blocking; it should be bound to the shard's `local_addr`
/// (which every received datagram is stamped with). The loop's clock continues from
/// the shard's current time ([`Shard::now`]), so peers added before the call with any
/// time up to that are served at once.
///
/// `app` gets the shard, the iteration's time and the events raised since its last
/// turn, oldest first; it may drain the vector (what it leaves is cleared). It runs
/// once per iteration: after every batch of datagrams, every timer tick, and at least
/// every [`MAX_POLL_WAIT`].
///
/// # Errors
/// Only from setting up the socket (its `Poll`, its batched I/O) or waiting on it; datagrams that cannot be
/// received or sent are dropped, as UDP may.
pub fn run<F>(socket: StdUdpSocket, mut shard: Shard, mut app: F) -> io::Result<Shard>
where
    F: FnMut(&mut Shard, Time, &mut Vec<ShardEvent>) -> Control,
{
    socket.set_nonblocking(true)?;
    let mut socket = UdpSocket::from_std(socket);
    let mut poll = Poll::new()?;
    poll.registry()
        .register(&mut socket, SOCKET, Interest::READABLE)?;
    let clock = Clock {
        start: Instant::now(),
        base: shard.now(),
    };
    let local = shard.local_addr();
    let mut events = Events::with_capacity(8);
    let mut udp = UdpIo::new(&socket)?;
    let mut batch: Vec<Datagram> = Vec::with_capacity(BATCH);
    let mut tx: Vec<Datagram> = Vec::new();
    let mut app_events: Vec<ShardEvent> = Vec::new();
    // Something may have arrived before registration: look once without waiting.
    let mut socket_pending = true;
    loop {
        if !socket_pending {
            let wait = shard.poll_timeout().map_or(MAX_POLL_WAIT, |deadline| {
                deadline.saturating_since(clock.now()).min(MAX_POLL_WAIT)
            });
            match poll.poll(&mut events, Some(wait)) {
                Ok(()) => socket_pending = events.iter().any(|e| e.token() == SOCKET),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if socket_pending {
            socket_pending = read_batch(&socket, &mut udp, local, &mut batch);
        }
        let now = clock.now();
        if !batch.is_empty() {
            // A GRO burst can take the batch past what one tick accepts.
            while batch.len() > shard.max_datagrams_per_tick() {
                let n = shard.max_datagrams_per_tick();
                shard.handle_datagrams(now, batch.drain(..n));
                flush(&mut shard, &socket, &mut udp, &mut tx);
            }
            shard.handle_datagrams(now, batch.drain(..));
        } else if shard.poll_timeout().is_some_and(|deadline| deadline <= now) {
            shard.handle_timeout(now);
        }
        flush(&mut shard, &socket, &mut udp, &mut tx);
        while let Some(event) = shard.poll_event() {
            app_events.push(event);
        }
        shard.advance_clock(now);
        let control = app(&mut shard, now, &mut app_events);
        app_events.clear();
        flush(&mut shard, &socket, &mut udp, &mut tx);
        if control == Control::Stop {
            return Ok(shard);
        }
    }
}

/// The loop's clock in the shard's units, continuing from the shard's time at start.
struct Clock {
    start: Instant,
    base: Time,
}

impl Clock {
    fn now(&self) -> Time {
        self.base + self.start.elapsed()
    }
}

/// Fills `batch` with about [`BATCH`] datagrams; true if the socket may hold more
/// (the batch filled up before it reported WouldBlock).
fn read_batch(
    socket: &UdpSocket,
    udp: &mut UdpIo,
    local: SocketAddr,
    batch: &mut Vec<Datagram>,
) -> bool {
    // Bounded, so that a socket failing every call cannot hold the loop.
    for _ in 0..BATCH {
        if batch.len() >= BATCH {
            return true;
        }
        match udp.recv(socket, local, batch) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return false,
            // Interrupted, or an error queued on the socket (consumed by this call):
            // try again.
            Err(_) => {}
        }
    }
    true
}

/// Sends every datagram the shard has ready; UDP may drop, so failures are dropped.
fn flush(shard: &mut Shard, socket: &UdpSocket, udp: &mut UdpIo, tx: &mut Vec<Datagram>) {
    shard.poll_transmit(tx);
    udp.send(socket, tx);
}

/// The signalling of one connection between two endpoints, as an offer and answer
/// would set it up: peer `id` on both sides with fresh credentials from `rng`.
///
/// Returns `(lite, controlling)`: the spec to add on the shard whose socket is
/// `lite_addr` (ICE-lite, DTLS server, expecting `controlling_fingerprint`) and the
/// spec to add on the other shard (ICE-controlling with `lite_addr` as its only
/// candidate, DTLS client, expecting `lite_fingerprint`). The controlling side starts
/// checking when its shard first ticks; once DTLS is up, its side sends the SCTP INIT.
pub fn pair_specs<R: RngCore + ?Sized>(
    id: PeerId,
    lite_addr: SocketAddr,
    lite_fingerprint: [u8; 32],
    controlling_fingerprint: [u8; 32],
    rng: &mut R,
) -> (PeerSpec, PeerSpec) {
    let dtls = (
        PeerDtls {
            role: DtlsRole::Server,
            remote_fingerprint: controlling_fingerprint,
            max_message_size: None,
            srtp_required: false,
        },
        PeerDtls {
            role: DtlsRole::Client,
            remote_fingerprint: lite_fingerprint,
            max_message_size: None,
            srtp_required: false,
        },
    );
    specs_from(id, lite_addr, Some(dtls), &mut || rng.next_u64())
}

/// A generator for [`pair_specs`] seeded from the operating system: credentials for
/// real sockets should not be predictable.
///
/// # Errors
/// If the system random generator fails.
pub fn os_rng() -> io::Result<ChaCha12Rng> {
    let mut seed = [0u8; 32];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut seed)
        .map_err(|_| io::Error::other("the system random generator failed"))?;
    Ok(ChaCha12Rng::from_seed(seed))
}

/// The specs of both sides of a lite/controlling pair, `dtls` being (lite side's,
/// controlling side's) DTLS half. Credentials come from `next_u64` in a fixed order
/// (lite ufrag, lite password, controlling ufrag, controlling password), one draw
/// per character, so a seeded simulation stays reproducible.
pub(crate) fn specs_from(
    id: PeerId,
    lite_addr: SocketAddr,
    dtls: Option<(PeerDtls, PeerDtls)>,
    next_u64: &mut dyn FnMut() -> u64,
) -> (PeerSpec, PeerSpec) {
    let lite_ufrag = ice_chars(UFRAG_LEN, next_u64);
    let lite_pwd = ice_chars(PWD_LEN, next_u64);
    let ctl_ufrag = ice_chars(UFRAG_LEN, next_u64);
    let ctl_pwd = ice_chars(PWD_LEN, next_u64);
    let lite = PeerSpec {
        id,
        role: IceRole::Lite,
        credentials: IceCredentials {
            local_ufrag: lite_ufrag.clone(),
            local_pwd: lite_pwd.clone(),
            remote_ufrag: ctl_ufrag.clone(),
            remote_pwd: ctl_pwd.clone(),
        },
        remote_candidates: Vec::new(),
        dtls: dtls.map(|d| d.0),
        room: None,
        may_send_data: true,
        link: false,
    };
    let controlling = PeerSpec {
        id,
        role: IceRole::Controlling,
        credentials: IceCredentials {
            local_ufrag: ctl_ufrag,
            local_pwd: ctl_pwd,
            remote_ufrag: lite_ufrag,
            remote_pwd: lite_pwd,
        },
        remote_candidates: vec![lite_addr],
        dtls: dtls.map(|d| d.1),
        room: None,
        may_send_data: true,
        link: false,
    };
    (lite, controlling)
}

/// `len` random ICE characters, one draw of `next_u64` each.
pub(crate) fn ice_chars(len: usize, next_u64: &mut dyn FnMut() -> u64) -> String {
    (0..len)
        .map(|_| char::from(ICE_CHARS[(next_u64() % 64) as usize]))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pair_specs_mirror_each_other() {
        let lite_addr: SocketAddr = "127.0.0.1:7100".parse().unwrap();
        let mut rng = ChaCha12Rng::seed_from_u64(1);
        let (lite, ctl) = pair_specs(PeerId(3), lite_addr, [1; 32], [2; 32], &mut rng);
        assert_eq!(lite.id, PeerId(3));
        assert_eq!(ctl.id, PeerId(3));
        assert_eq!(lite.role, IceRole::Lite);
        assert_eq!(ctl.role, IceRole::Controlling);
        assert_eq!(lite.credentials.local_ufrag, ctl.credentials.remote_ufrag);
        assert_eq!(lite.credentials.local_pwd, ctl.credentials.remote_pwd);
        assert_eq!(ctl.credentials.local_ufrag, lite.credentials.remote_ufrag);
        assert_eq!(ctl.credentials.local_pwd, lite.credentials.remote_pwd);
        assert_eq!(lite.credentials.local_ufrag.len(), UFRAG_LEN);
        assert_eq!(lite.credentials.local_pwd.len(), PWD_LEN);
        assert!(lite.remote_candidates.is_empty());
        assert_eq!(ctl.remote_candidates, vec![lite_addr]);
        let (ld, cd) = (lite.dtls.unwrap(), ctl.dtls.unwrap());
        assert_eq!(
            (ld.role, ld.remote_fingerprint),
            (DtlsRole::Server, [2; 32])
        );
        assert_eq!(
            (cd.role, cd.remote_fingerprint),
            (DtlsRole::Client, [1; 32])
        );
        // Fresh credentials each time.
        let (again, _) = pair_specs(PeerId(3), lite_addr, [1; 32], [2; 32], &mut rng);
        assert_ne!(again.credentials, lite.credentials);
    }
}
