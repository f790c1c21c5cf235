//! A peer whose SCTP is written by hand: it does ICE and DTLS as a browser would (with
//! shoal's own DTLS client), and then every SCTP packet it sends is one the test built
//! chunk by chunk. The server is one shard on a virtual clock; the wire between them
//! has a fixed latency and never loses or reorders.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use shoal_components::dtls::{DtlsCertificate, DtlsConfig, DtlsConn, DtlsEvent, DtlsRole};
use shoal_components::net::Datagram;
use shoal_components::peer::{IceCredentials, IceRole, PeerId};
use shoal_components::sctp::chunk::{
    Chunk, CookieEcho, DataHeader, GapAckBlock, Init, InitParam, Sack, WriteChunk, chunk_type,
};
use shoal_components::sctp::packet::{Packet, PacketWriter};
use shoal_components::sctp::{Ppid, Ssn, StreamId, Tsn};
use shoal_components::stun::{self, BINDING, Class, StunMessage, StunWriter, TransactionId};
use shoal_components::tick::ShardEvent;
use shoal_components::time::Time;
use shoal_server::sim::SimRng;
use shoal_systems::{Command, PeerDtls, PeerSpec, Shard, ShardConfig};

/// The shard's address.
pub const SRV: &str = "10.0.0.1:7100";
/// The hand-written peer's address.
pub const RAW: &str = "10.0.0.2:50000";
/// The peer, on the shard.
pub const ID: PeerId = PeerId(1);
/// SCTP port on both sides (RFC 8841 §5: 5000 unless the SDP says otherwise).
pub const PORT: u16 = 5000;
/// One-way latency of the wire.
pub const LATENCY: Duration = Duration::from_millis(10);
/// The window the hand-written peer announces when it is open.
pub const OPEN_WINDOW: u32 = 128 * 1024;
/// How often the hand-written peer sends an ICE check of its own (browsers: a few
/// seconds; consent lapses after 30 s without one).
const CHECK_EVERY: Duration = Duration::from_secs(5);

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// A chunk written to bytes.
pub fn chunk<C: WriteChunk + ?Sized>(c: &C) -> Bytes {
    let mut b = BytesMut::new();
    c.write_to(&mut b);
    b.freeze()
}

/// A whole, unfragmented, ordered DATA chunk.
pub fn data(tsn: Tsn, stream: u16, ssn: u16, ppid: u32, payload: &[u8]) -> Bytes {
    let h = DataHeader {
        tsn,
        stream_id: StreamId(stream),
        ssn: Ssn(ssn),
        ppid: Ppid(ppid),
        immediate: true,
        unordered: false,
        beginning: true,
        end: true,
    };
    let mut b = BytesMut::new();
    h.write_to(&mut b, payload.len());
    b.put_slice(payload);
    while !b.len().is_multiple_of(4) {
        b.put_u8(0);
    }
    b.freeze()
}

/// A SACK without gap blocks.
pub fn sack(cum: Tsn, a_rwnd: u32) -> Bytes {
    chunk(&Sack {
        cumulative_tsn_ack: cum,
        a_rwnd,
        gap_ack_blocks: &[] as &[GapAckBlock],
        duplicate_tsns: &[] as &[Tsn],
    })
}

/// What the hand-written peer's association knows.
#[derive(Debug, Clone, Copy)]
pub struct Assoc {
    /// Its Initiate Tag: the tag on every packet shoal sends it.
    pub my_tag: u32,
    /// Shoal's Initiate Tag: the tag on every packet it sends.
    pub peer_tag: u32,
    /// The TSN of its next DATA chunk.
    pub next_tsn: Tsn,
    /// Its own initial TSN.
    pub initial_tsn: Tsn,
    /// Shoal's initial TSN.
    pub peer_initial_tsn: Tsn,
}

/// One DATA chunk shoal sent, as the hand-written peer read it.
#[derive(Debug, Clone)]
pub struct Got {
    pub tsn: Tsn,
    pub stream: u16,
    pub ssn: u16,
    pub ppid: u32,
    pub payload: Bytes,
}

/// The chunks of a packet shoal sent.
pub fn chunks(p: &Packet) -> Vec<Chunk> {
    p.chunks()
        .map(|c| c.expect("shoal sends well-formed chunks"))
        .collect()
}

/// The DATA chunks of a packet.
pub fn data_of(p: &Packet) -> Vec<Got> {
    chunks(p)
        .into_iter()
        .filter_map(|c| match c {
            Chunk::Data(d) => Some(Got {
                tsn: d.header.tsn,
                stream: d.header.stream_id.0,
                ssn: d.header.ssn.0,
                ppid: d.header.ppid.0,
                payload: d.payload,
            }),
            _ => None,
        })
        .collect()
}

/// Whether a packet carries a chunk of this type.
pub fn has(p: &Packet, typ: u8) -> bool {
    chunks(p).iter().any(|c| c.chunk_type() == typ)
}

/// The shard and the hand-written peer on one clock.
pub struct Lab {
    pub now: Time,
    pub srv: Shard,
    /// Everything the shard reported.
    pub events: Vec<ShardEvent>,
    /// SCTP packets that reached the peer and were not taken yet.
    pub inbox: VecDeque<(Time, Packet)>,
    /// The peer's DTLS connection closed: the alert that closed it, if any.
    pub dtls_closed: Option<Option<u8>>,
    dtls: DtlsConn,
    dtls_up: bool,
    /// In flight: (arrival, towards the shard, payload).
    wire: VecDeque<(Time, bool, Bytes)>,
    rng: SimRng,
    /// The peer's ICE credentials and the shard's.
    ufrag: String,
    pwd: String,
    srv_ufrag: String,
    srv_pwd: String,
    next_check: Time,
}

impl Lab {
    /// The shard with the peer added, ICE nominated and DTLS connected (shoal the DTLS
    /// server, as it always is with browsers); no SCTP yet.
    pub fn connect(seed: u64) -> Lab {
        Lab::connect_with(seed, |_| {})
    }

    /// [`Lab::connect`] with the shard's configuration changed first.
    pub fn connect_with(seed: u64, configure: impl FnOnce(&mut ShardConfig)) -> Lab {
        let mut rng = SimRng::new(seed);
        let mut cfg = ShardConfig::new(addr(SRV), rng.next_u64());
        configure(&mut cfg);
        let srv = Shard::new(cfg);
        let cert = Arc::new(DtlsCertificate::generate().expect("a certificate"));
        let mut random = [0u8; 32];
        for b in random.iter_mut() {
            *b = rng.next_u64() as u8;
        }
        let dtls = DtlsConn::new(
            DtlsRole::Client,
            Arc::new(DtlsConfig::default()),
            cert.clone(),
            srv.fingerprint(),
            random,
            Time::ZERO,
        );
        let (ufrag, pwd) = (rng.ice_chars(8), rng.ice_chars(24));
        let (srv_ufrag, srv_pwd) = (rng.ice_chars(8), rng.ice_chars(24));
        let mut lab = Lab {
            now: Time::ZERO,
            srv,
            events: Vec::new(),
            inbox: VecDeque::new(),
            dtls_closed: None,
            dtls,
            dtls_up: false,
            wire: VecDeque::new(),
            rng,
            ufrag,
            pwd,
            srv_ufrag,
            srv_pwd,
            next_check: Time::ZERO,
        };
        let spec = PeerSpec {
            id: ID,
            role: IceRole::Lite,
            credentials: IceCredentials {
                local_ufrag: lab.srv_ufrag.clone(),
                local_pwd: lab.srv_pwd.clone(),
                remote_ufrag: lab.ufrag.clone(),
                remote_pwd: lab.pwd.clone(),
            },
            remote_candidates: Vec::new(),
            dtls: Some(PeerDtls {
                role: DtlsRole::Server,
                remote_fingerprint: cert.fingerprint_sha256(),
                max_message_size: Some(256 * 1024),
                srtp_required: false,
            }),
            room: None,
            may_send_data: true,
            link: false,
        };
        lab.srv.command(lab.now, Command::AddPeer(spec)).unwrap();
        // The nominating check goes before the ClientHello.
        lab.ice_check(true);
        lab.next_check = lab.now + CHECK_EVERY;
        lab.flush();
        let deadline = lab.now + Duration::from_secs(10);
        while !(lab.dtls_up && lab.srv.dtls_connected(ID)) {
            assert!(lab.now < deadline, "ICE and DTLS did not come up");
            lab.step(deadline);
        }
        lab
    }

    fn ice_check(&mut self, nominate: bool) {
        let mut tid = [0u8; 12];
        for b in tid.iter_mut() {
            *b = self.rng.next_u64() as u8;
        }
        let mut buf = BytesMut::new();
        let mut w = StunWriter::new(&mut buf, Class::Request, BINDING, TransactionId(tid));
        w.username(format!("{}:{}", self.srv_ufrag, self.ufrag).as_bytes())
            .priority(1_853_817_087)
            .ice_controlling(self.rng.next_u64());
        if nominate {
            w.use_candidate();
        }
        w.message_integrity(self.srv_pwd.as_bytes()).fingerprint();
        w.finish();
        self.put(true, buf.freeze());
    }

    fn put(&mut self, to_srv: bool, payload: Bytes) {
        self.wire.push_back((self.now + LATENCY, to_srv, payload));
    }

    /// Moves the clock to the next arrival or timer, no further than `limit`, and
    /// runs what is due then.
    fn step(&mut self, limit: Time) {
        let next = [
            self.wire.front().map(|w| w.0),
            self.srv.poll_timeout(),
            self.dtls.poll_timeout(),
            Some(self.next_check),
        ]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(limit)
        .min(limit);
        self.now = self.now.max(next);
        let now = self.now;
        let mut to_srv = Vec::new();
        while self.wire.front().is_some_and(|w| w.0 <= now) {
            let Some((_, towards_srv, payload)) = self.wire.pop_front() else {
                break;
            };
            if towards_srv {
                to_srv.push(Datagram {
                    local: addr(SRV),
                    remote: addr(RAW),
                    payload,
                });
            } else {
                self.peer_receives(payload);
            }
        }
        if !to_srv.is_empty() {
            self.srv.handle_datagrams(now, to_srv);
        } else if self.srv.poll_timeout().is_some_and(|t| t <= now) {
            self.srv.handle_timeout(now);
        }
        if self.dtls.poll_timeout().is_some_and(|t| t <= now) {
            self.dtls.handle_timeout(now);
        }
        if self.next_check <= now && self.dtls_closed.is_none() {
            self.ice_check(false);
            self.next_check = now + CHECK_EVERY;
        } else if self.next_check <= now {
            self.next_check = Time::MAX;
        }
        self.flush();
    }

    /// The peer reads one datagram: STUN requests are answered (consent), the rest is
    /// DTLS.
    fn peer_receives(&mut self, payload: Bytes) {
        if stun::looks_like_stun(&payload) {
            let Ok(m) = StunMessage::parse(payload) else {
                return;
            };
            if m.class() == Class::Request && m.verify_integrity(self.pwd.as_bytes()).is_ok() {
                let mut buf = BytesMut::new();
                let mut w = StunWriter::new(
                    &mut buf,
                    Class::SuccessResponse,
                    BINDING,
                    m.transaction_id(),
                );
                w.xor_mapped_address(addr(SRV))
                    .message_integrity(self.pwd.as_bytes())
                    .fingerprint();
                w.finish();
                self.put(true, buf.freeze());
            }
            return;
        }
        // A record the connection refuses is its business (and the test's failure).
        let _ = self.dtls.handle_datagram(self.now, &payload);
    }

    /// Takes what both sides have to send onto the wire, and their events.
    fn flush(&mut self) {
        while let Some(e) = self.srv.poll_event() {
            self.events.push(e);
        }
        let mut out = Vec::new();
        self.srv.poll_transmit(&mut out);
        for d in out {
            self.put(false, d.payload);
        }
        while let Some(d) = self.dtls.poll_transmit() {
            self.put(true, d);
        }
        while let Some(e) = self.dtls.poll_event() {
            match e {
                DtlsEvent::Connected { .. } => self.dtls_up = true,
                DtlsEvent::ApplicationData(bytes) => {
                    let p = Packet::parse(&bytes).expect("shoal sends valid SCTP packets");
                    assert_eq!((p.src_port, p.dst_port), (PORT, PORT));
                    self.inbox.push_back((self.now, p));
                }
                DtlsEvent::Closed { alert } => self.dtls_closed = Some(alert),
                DtlsEvent::Failed(e) => panic!("the peer's DTLS failed: {e:?}"),
            }
        }
    }

    /// Runs the clock for `d`.
    pub fn run_for(&mut self, d: Duration) {
        let end = self.now + d;
        while self.now < end {
            self.step(end);
        }
    }

    /// The next SCTP packet shoal sends the peer, if one arrives within `within`.
    pub fn recv(&mut self, within: Duration) -> Option<Packet> {
        let end = self.now + within;
        loop {
            if let Some((_, p)) = self.inbox.pop_front() {
                return Some(p);
            }
            if self.now >= end {
                return None;
            }
            self.step(end);
        }
    }

    /// Sends one SCTP packet of these chunks under verification tag `tag`.
    pub fn send(&mut self, tag: u32, chunks: &[Bytes]) {
        let mut buf = BytesMut::new();
        let mut w = PacketWriter::new(&mut buf, PORT, PORT, tag);
        for c in chunks {
            w.push(&shoal_components::sctp::chunk::RawChunk(c));
        }
        let p = w.finish();
        self.dtls
            .send_application_data(&p)
            .expect("the peer's DTLS connection takes application data");
        self.flush();
    }

    /// Sends INIT and returns what INIT ACK said: (shoal's tag, its initial TSN, the
    /// cookie). Packets other than the INIT ACK that arrive meanwhile are dropped.
    pub fn init(&mut self, my_tag: u32, initial_tsn: Tsn) -> (u32, Tsn, Bytes) {
        let params = [
            InitParam::ForwardTsnSupported,
            InitParam::SupportedExtensions(Bytes::from_static(&[
                chunk_type::RE_CONFIG,
                chunk_type::FORWARD_TSN,
            ])),
        ];
        let init = chunk(&Init {
            initiate_tag: my_tag,
            a_rwnd: OPEN_WINDOW,
            outbound_streams: 1024,
            inbound_streams: 1024,
            initial_tsn,
            params: params.as_slice(),
        });
        self.send(0, &[init]);
        loop {
            let p = self.recv(Duration::from_secs(5)).expect("an INIT ACK");
            assert_eq!(p.verification_tag, my_tag, "INIT ACK carries our tag");
            for c in chunks(&p) {
                if let Chunk::InitAck(ack) = c {
                    let cookie = ack.state_cookie().expect("a State Cookie");
                    return (ack.initiate_tag, ack.initial_tsn, cookie);
                }
            }
        }
    }

    /// COOKIE ECHO; the packet that answers it.
    pub fn echo(&mut self, peer_tag: u32, cookie: Bytes) -> Packet {
        let echo = chunk(&CookieEcho { cookie });
        self.send(peer_tag, &[echo]);
        self.recv(Duration::from_secs(5))
            .expect("an answer to COOKIE ECHO")
    }

    /// A whole setup: INIT, INIT ACK, COOKIE ECHO, COOKIE ACK.
    pub fn associate(&mut self, my_tag: u32, initial_tsn: Tsn) -> Assoc {
        let (peer_tag, peer_initial_tsn, cookie) = self.init(my_tag, initial_tsn);
        let answer = self.echo(peer_tag, cookie);
        assert!(
            has(&answer, chunk_type::COOKIE_ACK),
            "COOKIE ACK: {:?}",
            chunks(&answer)
        );
        assert!(self.srv.sctp_established(ID));
        Assoc {
            my_tag,
            peer_tag,
            next_tsn: initial_tsn,
            initial_tsn,
            peer_initial_tsn,
        }
    }

    /// How many events match.
    pub fn count(&self, f: impl Fn(&ShardEvent) -> bool) -> usize {
        self.events.iter().filter(|e| f(e)).count()
    }

    /// The payloads of every raw SCTP message the shard delivered so far.
    pub fn sctp_messages(&self) -> Vec<Bytes> {
        self.events
            .iter()
            .filter_map(|e| match e {
                ShardEvent::SctpMessage { payload, .. } => Some(payload.clone()),
                _ => None,
            })
            .collect()
    }

    /// The reasons of every `SctpClosed` so far.
    pub fn sctp_closed(&self) -> Vec<shoal_components::sctp::assoc::AssocEnd> {
        self.events
            .iter()
            .filter_map(|e| match e {
                ShardEvent::SctpClosed { reason, .. } => Some(*reason),
                _ => None,
            })
            .collect()
    }
}
