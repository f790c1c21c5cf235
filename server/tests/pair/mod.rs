//! A hand-driven wire between two shards, for tests that must do what the simulated
//! network does not let them: hold a shard's datagrams back and hand them to one tick,
//! or see how many user bytes are on the wire.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use shoal_components::dtls::DtlsRole;
use shoal_components::net::Datagram;
use shoal_components::peer::{IceCredentials, IceRole, PeerId};
use shoal_components::sctp::assoc::SctpLimits;
use shoal_components::tick::ShardEvent;
use shoal_components::time::Time;
use shoal_server::sim::SimRng;
use shoal_systems::{Command, PeerDtls, PeerSpec, Shard, ShardConfig};

/// The server shard's address.
pub const SRV: &str = "10.0.0.1:7100";
/// The client shard's address.
pub const CLI: &str = "10.0.0.2:50000";
/// The one peer, on both shards.
pub const PEER: PeerId = PeerId(1);

/// `s` as a socket address.
pub fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// A datagram on the wire, ordered by arrival and then by sending order.
struct OnWire {
    at: Time,
    seq: u64,
    d: Datagram,
    /// Upper bound of the user bytes it carries, client to server only.
    user_bytes: usize,
}

impl PartialEq for OnWire {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for OnWire {}
impl PartialOrd for OnWire {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for OnWire {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(o.at, o.seq))
    }
}

/// Two shards, a server and a client, joined by a wire with a fixed latency and seeded
/// loss that never reorders. Unlike `Sim`, it lets a test hold the client's datagrams
/// back (`hold`) and hand them to one server tick, and it measures the user bytes the
/// client has on the wire.
pub struct Pair {
    /// The virtual clock.
    pub now: Time,
    /// The server shard (ICE-lite, DTLS server).
    pub srv: Shard,
    /// The client shard (ICE controlling, DTLS client, so it sends the INIT).
    pub cli: Shard,
    rng: SimRng,
    latency: Duration,
    loss: f64,
    wire: BinaryHeap<Reverse<OnWire>>,
    seq: u64,
    /// When set, the client's datagrams land here instead of on the wire.
    pub hold: Option<Vec<Datagram>>,
    /// User bytes client to server on the wire now.
    c2s_bytes: usize,
    /// The most user bytes client to server there ever were on the wire at once.
    pub c2s_bytes_max: usize,
    /// The server's events not yet taken.
    pub srv_events: Vec<ShardEvent>,
    /// The client's events not yet taken.
    pub cli_events: Vec<ShardEvent>,
    out: Vec<Datagram>,
}

impl Pair {
    /// Both shards with `limits`, peer `PEER` on each, ICE and DTLS (the server shard
    /// as DTLS server), and runs until the association is up.
    pub fn connect(seed: u64, limits: SctpLimits, latency: Duration, loss: f64) -> Pair {
        Pair::connect_with(seed, limits, limits, latency, loss)
    }

    /// [`Pair::connect`] with different limits on each side.
    pub fn connect_with(
        seed: u64,
        srv_limits: SctpLimits,
        cli_limits: SctpLimits,
        latency: Duration,
        loss: f64,
    ) -> Pair {
        let mut rng = SimRng::new(seed);
        let mut srv_cfg = ShardConfig::new(addr(SRV), rng.next_u64());
        srv_cfg.sctp = srv_limits;
        let mut cli_cfg = ShardConfig::new(addr(CLI), rng.next_u64());
        cli_cfg.sctp = cli_limits;
        let mut p = Pair {
            now: Time::ZERO,
            srv: Shard::new(srv_cfg),
            cli: Shard::new(cli_cfg),
            rng,
            latency,
            loss,
            wire: BinaryHeap::new(),
            seq: 0,
            hold: None,
            c2s_bytes: 0,
            c2s_bytes_max: 0,
            srv_events: Vec::new(),
            cli_events: Vec::new(),
            out: Vec::new(),
        };
        let (s, c) = p.specs(srv_limits.max_message_size, cli_limits.max_message_size);
        p.srv.command(p.now, Command::AddPeer(s)).unwrap();
        p.cli.command(p.now, Command::AddPeer(c)).unwrap();
        p.run_until(
            |p| p.srv.sctp_established(PEER) && p.cli.sctp_established(PEER),
            Duration::from_secs(60),
        )
        .expect("association up");
        p.srv_events.clear();
        p.cli_events.clear();
        p
    }

    /// What signalling would hand each side (as `Sim::connect_dtls` builds them), each
    /// with the other's largest message as its SDP would announce it.
    fn specs(&mut self, srv_max: usize, cli_max: usize) -> (PeerSpec, PeerSpec) {
        let (su, sp) = (self.rng.ice_chars(8), self.rng.ice_chars(24));
        let (cu, cp) = (self.rng.ice_chars(8), self.rng.ice_chars(24));
        let server = PeerSpec {
            id: PEER,
            role: IceRole::Lite,
            credentials: IceCredentials {
                local_ufrag: su.clone(),
                local_pwd: sp.clone(),
                remote_ufrag: cu.clone(),
                remote_pwd: cp.clone(),
            },
            remote_candidates: Vec::new(),
            dtls: Some(PeerDtls {
                role: DtlsRole::Server,
                remote_fingerprint: self.cli.fingerprint(),
                max_message_size: Some(cli_max),
                srtp_required: false,
            }),
            room: None,
            may_send_data: true,
            link: false,
        };
        let client = PeerSpec {
            id: PEER,
            role: IceRole::Controlling,
            credentials: IceCredentials {
                local_ufrag: cu,
                local_pwd: cp,
                remote_ufrag: su,
                remote_pwd: sp,
            },
            remote_candidates: vec![addr(SRV)],
            dtls: Some(PeerDtls {
                role: DtlsRole::Client,
                remote_fingerprint: self.srv.fingerprint(),
                max_message_size: Some(srv_max),
                srtp_required: false,
            }),
            room: None,
            may_send_data: true,
            link: false,
        };
        (server, client)
    }

    /// Advances to the next arrival or wake-up and runs the shards due then (each
    /// gets all of its arrivals in one tick). False when nothing is scheduled.
    fn step(&mut self) -> bool {
        let next = [
            self.wire.peek().map(|Reverse(w)| w.at),
            self.srv.poll_timeout(),
            self.cli.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min();
        let Some(next) = next else { return false };
        self.now = self.now.max(next);
        let (mut to_srv, mut to_cli) = (Vec::new(), Vec::new());
        while self.wire.peek().is_some_and(|Reverse(w)| w.at <= self.now) {
            let Some(Reverse(w)) = self.wire.pop() else {
                break;
            };
            // The receiver sees it from the sender's address.
            let d = Datagram {
                local: w.d.remote,
                remote: w.d.local,
                payload: w.d.payload,
            };
            if d.local == addr(SRV) {
                self.c2s_bytes -= w.user_bytes;
                to_srv.push(d);
            } else {
                to_cli.push(d);
            }
        }
        let now = self.now;
        for (shard, batch) in [(&mut self.srv, to_srv), (&mut self.cli, to_cli)] {
            if !batch.is_empty() {
                shard.handle_datagrams(now, batch);
            } else if shard.poll_timeout().is_some_and(|t| t <= now) {
                shard.handle_timeout(now);
            }
        }
        self.flush();
        true
    }

    /// Takes both shards' datagrams onto the wire (or into `hold`) and their events.
    pub fn flush(&mut self) {
        while let Some(e) = self.srv.poll_event() {
            self.srv_events.push(e);
        }
        while let Some(e) = self.cli.poll_event() {
            self.cli_events.push(e);
        }
        let mut out = std::mem::take(&mut self.out);
        self.srv.poll_transmit(&mut out);
        for d in out.drain(..) {
            self.put_on_wire(d, 0);
        }
        self.cli.poll_transmit(&mut out);
        for d in out.drain(..) {
            if let Some(held) = self.hold.as_mut() {
                held.push(d);
            } else {
                let user = user_bytes_upper_bound(&d.payload);
                self.put_on_wire(d, user);
            }
        }
        self.out = out;
    }

    fn put_on_wire(&mut self, d: Datagram, user_bytes: usize) {
        if self.rng.chance(self.loss) {
            return;
        }
        self.c2s_bytes += user_bytes;
        self.c2s_bytes_max = self.c2s_bytes_max.max(self.c2s_bytes);
        self.seq += 1;
        self.wire.push(Reverse(OnWire {
            at: self.now + self.latency,
            seq: self.seq,
            d,
            user_bytes,
        }));
    }

    /// Steps until `done` holds, for at most `limit` of virtual time.
    pub fn run_until(
        &mut self,
        mut done: impl FnMut(&mut Pair) -> bool,
        limit: Duration,
    ) -> Result<(), String> {
        let deadline = self.now + limit;
        for _ in 0..10_000_000u32 {
            if done(self) {
                return Ok(());
            }
            if self.now > deadline || !self.step() {
                break;
            }
        }
        Err(format!("not done by {:?}", self.now))
    }

    /// Runs every step of the next `d`.
    pub fn run_for(&mut self, d: Duration) {
        let end = self.now + d;
        let _ = self.run_until(|p| p.next_at().is_none_or(|t| t > end), d + d);
        self.now = self.now.max(end);
    }

    fn next_at(&self) -> Option<Time> {
        [
            self.wire.peek().map(|Reverse(w)| w.at),
            self.srv.poll_timeout(),
            self.cli.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Payloads of the messages the server received on `on` so far, taking them.
    pub fn server_messages(&mut self, on: u16) -> Vec<Bytes> {
        let mut got = Vec::new();
        self.srv_events.retain(|e| match e {
            ShardEvent::SctpMessage {
                stream, payload, ..
            } if *stream == on => {
                got.push(payload.clone());
                false
            }
            _ => true,
        });
        got
    }

    /// Payloads of the messages the client received on `on` so far, taking them.
    pub fn client_messages(&mut self, on: u16) -> Vec<Bytes> {
        let mut got = Vec::new();
        self.cli_events.retain(|e| match e {
            ShardEvent::SctpMessage {
                stream, payload, ..
            } if *stream == on => {
                got.push(payload.clone());
                false
            }
            _ => true,
        });
        got
    }
}

/// An upper bound of the user bytes a client datagram carries: each DTLS 1.2
/// application_data record (RFC 6347 §4.1: 13-byte header; AES-GCM adds an 8-byte
/// explicit nonce and a 16-byte tag) holds one SCTP packet, whose user data is at
/// most its length less the common header and one DATA chunk header (RFC 9260 §3).
fn user_bytes_upper_bound(datagram: &[u8]) -> usize {
    const APPLICATION_DATA: u8 = 23;
    let mut rest = datagram;
    let mut total = 0;
    while rest.len() >= 13 {
        let len = usize::from(u16::from_be_bytes([rest[11], rest[12]]));
        if rest[0] == APPLICATION_DATA {
            total += len.saturating_sub(8 + 16 + 12 + 16);
        }
        rest = rest.get(13 + len..).unwrap_or(&[]);
    }
    total
}
