//! The generator: every participant's client stacks (one shard and one UDP socket
//! per peer connection) driven by one thread over one mio `Poll`.
//!
//! Each loop iteration waits until a socket is readable, the signalling thread sends
//! work (through a mio `Waker`), a shard's timer falls due or a media frame is due;
//! then reads every readable socket in batches (one tick per batch), sends the due
//! frames (`Shard::send_rtp_batch`, one tick per frame, then one flush), and fires due
//! timers. Timers and frames wait in two heaps keyed by time; a shard's timer is
//! pushed again only when it moves earlier or the one pushed has fired.
//!
//! Media: a publishing connection starts sending once DTLS is up: Opus-sized audio
//! every 20 ms (one packet with an audio level) and VP8 frames at the set frame rate,
//! sized so the stream averages the set bit rate with a keyframe (five times a delta
//! frame) every keyframe interval and whenever a keyframe is asked for; a frame goes
//! out as packets of at most [`MAX_PAYLOAD`] bytes, each with a real VP8 payload
//! descriptor (RFC 7741 §4.2: S on the frame's first packet, a 15-bit PictureID) and
//! on the first the VP8 payload header with the key/inter flag (RFC 6386 §9.1).
//! With simulcast, every frame goes out as three streams (signalled as an SSRC
//! `SIM` group), at 1/16, 1/4 and all of the bit rate and a quarter, half and all of
//! 640×360, as a camera's three resolutions would; a keyframe request for any of
//! them makes the next frame a keyframe on all three.
//! Every packet carries abs-capture-time with the send time (NTP, from one clock the
//! receiving side reads too), so each received packet gives an end-to-end latency.
//!
//! The node's own share: each payload ends in a [`TAG`] naming its publishing
//! connection, source and sequence number (the node forwards payloads untouched, while
//! it rewrites SSRCs and sequence numbers). When a publisher's datagrams leave its
//! socket, the clear SRTP header (RFC 3711 §3.1) gives each packet's SSRC and sequence
//! number, and its wire time is kept; a subscriber reading the tag finds it, so
//! receipt − wire time is the packet's time through the node (loopback and both
//! sockets included, the publisher's pacer and encoder schedule not).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use mio::net::UdpSocket;
use mio::{Events, Interest, Poll, Token};
use shoal_components::dtls::DtlsCertificate;
use shoal_components::media::{TrackId, TrackKind, TrackSpec};
use shoal_components::net::Datagram;
use shoal_components::rtp::{AbsCaptureTime, RtpFields, RtpPacket, RtpWriter};
use shoal_server::endpoint::media::{AUDIO_SOURCE, SIMULCAST_LAYERS, VIDEO_LAYER_SOURCES};
use shoal_server::endpoint::{BATCH, MediaSession};
use shoal_server::sim::{Command, PeerId, Shard, ShardConfig, ShardEvent, Time};
use shoal_server::udp::{self, UdpIo};

/// The token of the signalling thread's waker.
pub(super) const WAKER: Token = Token(usize::MAX);
/// The largest VP8 payload in one packet (descriptor included), as browsers keep
/// packets under a 1200-byte MTU.
pub(super) const MAX_PAYLOAD: usize = 1100;
/// The bytes that end every payload: publishing connection (u32), source (u8),
/// sequence number (u16) and [`TAG_MARK`].
const TAG: usize = 8;
const TAG_MARK: u8 = 0xa5;
/// The sources a tag names: audio, then the video streams (lowest first).
const AUDIO: u8 = 0;
const VIDEO: u8 = 1;
/// A simulcast stream's share of the video bit rate, lowest first (each a quarter
/// of the pixels of the next).
const SIMULCAST_DIVISORS: [u64; SIMULCAST_LAYERS] = [16, 4, 1];
/// Wire times kept per source: a power of two, indexed by sequence number; 2 048
/// packets are seconds of video even at keyframes.
const WIRE_TIMES: usize = 2048;
/// Opus at about 32 kbit/s: 80 bytes every 20 ms.
const AUDIO_PAYLOAD: usize = 80;
const AUDIO_INTERVAL: Duration = Duration::from_millis(20);
/// A keyframe is this many times the size of a delta frame.
const KEYFRAME_FACTOR: usize = 5;
/// Batches read from one socket before the loop turns to others.
const READS_PER_TURN: usize = 4;
/// The longest the loop sleeps.
const MAX_WAIT: Duration = Duration::from_millis(10);

/// What the signalling thread asks of the generator.
pub(super) enum ToGen {
    /// A negotiated connection: make its shard and socket and start it.
    Add(Box<Join>),
    /// Tracks a connection now receives (the node's later offer, answered).
    Receive { conn: usize, tracks: Vec<TrackSpec> },
    /// The steady window begins: counters are taken from here.
    Steady,
    /// The run is over: stop and report.
    Stop,
}

/// A connection the signalling thread negotiated.
pub(super) struct Join {
    /// Its index, given by the signalling thread.
    pub conn: usize,
    /// The room it is in.
    pub room: usize,
    /// It publishes (else it only plays).
    pub publishes: bool,
    /// The negotiated session.
    pub session: MediaSession,
    /// When its offer went out.
    pub offered_at: Instant,
}

/// The media the generator sends.
#[derive(Clone, Copy, Debug)]
pub(super) struct MediaShape {
    /// Video bit rate.
    pub video_bps: u64,
    /// Video frames per second.
    pub fps: u32,
    /// A keyframe at least this often.
    pub keyframe_interval: Duration,
    /// Publish video as three simulcast streams.
    pub simulcast: bool,
}

/// Counters the progress display reads while the generator runs.
#[derive(Debug, Default)]
pub(super) struct Live {
    /// Connections whose DTLS is up.
    pub connected: AtomicUsize,
    /// Connections that failed (the shard removed the peer).
    pub failed: AtomicUsize,
    /// RTP packets handed to the shards.
    pub sent: AtomicU64,
    /// RTP packets received.
    pub received: AtomicU64,
    /// Publishing connections whose DTLS is up, per room.
    pub rooms: Vec<AtomicUsize>,
}

impl Live {
    pub(super) fn new(rooms: usize) -> Live {
        Live {
            rooms: (0..rooms).map(|_| AtomicUsize::new(0)).collect(),
            ..Live::default()
        }
    }

    /// How many of `room`'s publishers are sending.
    pub(super) fn publishing(&self, room: usize) -> usize {
        self.rooms
            .get(room)
            .map_or(0, |n| n.load(Ordering::Relaxed))
    }
}

/// What one run measured (the steady window only, unless said).
#[derive(Debug, Default)]
pub(super) struct Measured {
    /// End-to-end latency of every packet received, µs.
    pub latency_us: Vec<u32>,
    /// The same, of audio packets only.
    pub audio_latency_us: Vec<u32>,
    /// Time through the node (publisher's socket to subscriber's) of every packet
    /// received, µs.
    pub node_latency_us: Vec<u32>,
    /// Received packets whose wire time was not found (no tag, or overwritten).
    pub without_wire_time: u64,
    /// Packets received, and expected from the sequence numbers.
    pub received: u64,
    pub expected: u64,
    /// Packets sent by publishers.
    pub sent: u64,
    /// NACKs and keyframe requests the receivers sent.
    pub nacks: u64,
    pub plis: u64,
    /// Retransmissions received.
    pub rtx_received: u64,
    /// Packets the publishers' pacers dropped.
    pub pacer_dropped: u64,
    /// Join times (offer sent → first media packet), ms, whole run.
    pub join_ms: Vec<f64>,
    /// When each connection received its first media packet, whole run.
    pub first_media: HashMap<usize, Instant>,
    /// Connections up and failed, whole run.
    pub connected: usize,
    pub failed: usize,
    /// How late media frames went out against their schedule, µs: the generator's
    /// own lag (a saturated generator shows here).
    pub send_lag_us: Vec<u32>,
    /// Received packets without a readable capture time.
    pub without_capture_time: u64,
    /// Congestion control feedback the receivers sent (transport-wide and REMB).
    pub feedback_sent: u64,
}

/// One received track.
struct Received {
    id: TrackId,
    audio: bool,
    capture_id: Option<u8>,
    max_seq: Option<u64>,
    first_seq: u64,
    count: u64,
    /// (count, max_seq − first_seq + 1) when the steady window began.
    base: (u64, u64),
}

impl Received {
    fn span(&self) -> u64 {
        self.max_seq.map_or(0, |m| m - self.first_seq + 1)
    }
}

/// A publishing connection's sources.
struct Publishing {
    /// Its connection, named in every payload's tag.
    conn: usize,
    audio_seq: u16,
    audio_ts: u32,
    audio_ssrc: u32,
    audio_pt: u8,
    audio_level_id: Option<u8>,
    audio_capture_id: Option<u8>,
    /// One stream, or the simulcast streams lowest first.
    video: Vec<VideoStream>,
    frame: u64,
    started: Time,
    last_keyframe: Option<Time>,
    keyframe_wanted: bool,
}

/// One published video stream.
struct VideoStream {
    source: TrackId,
    /// The source number its packets' tags name.
    tag: u8,
    ssrc: u32,
    pt: u8,
    capture_id: Option<u8>,
    seq: u16,
    ts: u32,
    picture_id: u16,
    /// Its share of the video bit rate: the rate divided by this.
    divisor: u64,
}

struct Conn {
    socket: UdpSocket,
    udp: UdpIo,
    shard: Shard,
    room: usize,
    connected: bool,
    removed: bool,
    publishing: Option<Publishing>,
    received: Vec<Received>,
    offered_at: Instant,
    /// Counts toward join time: a publisher in its room was sending when its offer
    /// went out.
    join_eligible: bool,
    joined: bool,
    /// The timer pushed on the heap, if it has not fired.
    armed: Option<Time>,
    readable: bool,
}

/// The generator's loop state.
pub(super) struct Generator {
    poll: Poll,
    inbox: Receiver<ToGen>,
    certificate: Arc<DtlsCertificate>,
    media: MediaShape,
    live: Arc<Live>,
    conns: Vec<Option<Conn>>,
    /// Connections whose sockets may hold datagrams.
    readable: Vec<usize>,
    timers: BinaryHeap<Reverse<(Time, usize)>>,
    /// (due, conn, 0 audio / 1 video).
    frames: BinaryHeap<Reverse<(Time, usize, u8)>>,
    /// When each room's first publisher started sending.
    room_sending: Vec<Option<Instant>>,
    start: Instant,
    /// NTP time at `start`, UQ32.32.
    ntp_start: u64,
    steady: bool,
    out: Measured,
    /// Shard counters when the steady window began: nacks, plis, rtx, pacer drops.
    stats_base: [u64; 5],
    sent_base: u64,
    batch: Vec<Datagram>,
    /// When the kernel received each datagram of `batch`.
    stamps: Vec<Option<Duration>>,
    tx: Vec<Datagram>,
    scratch: BytesMut,
    payload: Vec<u8>,
    /// Per connection, when its published packets left its socket.
    wire: Vec<Option<Box<WireTimes>>>,
}

/// When a publisher's packets left its socket, by source and sequence number.
///
/// The client shard renumbers what it sends (RFC 3550 §5.1: a random first number)
/// by a fixed offset per source, so the first packet on the wire, which is the first
/// one handed in, gives the offset between the numbers in the tags and those on the
/// wire.
struct WireTimes {
    /// By tag number.
    sources: Vec<SourceTimes>,
}

/// One source's wire times.
struct SourceTimes {
    ssrc: u32,
    /// The first sequence number handed in.
    first: u16,
    /// Wire number − number handed in, once known.
    offset: Option<u16>,
    /// By wire sequence number, modulo [`WIRE_TIMES`].
    at: Box<[(u16, Option<Time>)]>,
}

impl WireTimes {
    /// For a publisher's sources, as (SSRC, first sequence number) by tag number.
    fn new(sources: &[(u32, u16)]) -> WireTimes {
        let sources = sources
            .iter()
            .map(|&(ssrc, first)| SourceTimes {
                ssrc,
                first,
                offset: None,
                at: vec![(0, None); WIRE_TIMES].into_boxed_slice(),
            })
            .collect();
        WireTimes { sources }
    }

    /// Notes the RTP packets among `tx` (RFC 7983 §7: first byte 128–191; RFC 5761
    /// §4: second byte 192–223 is RTCP) as sent at `now`; retransmissions (other
    /// SSRCs) are not noted.
    fn sent(&mut self, tx: &[Datagram], now: Time) {
        for d in tx {
            let b = &d.payload[..];
            if b.len() < 12 || !(128..192).contains(&b[0]) || (192..224).contains(&b[1]) {
                continue;
            }
            let seq = u16::from_be_bytes([b[2], b[3]]);
            let ssrc = u32::from_be_bytes([b[8], b[9], b[10], b[11]]);
            if let Some(s) = self.sources.iter_mut().find(|s| s.ssrc == ssrc) {
                s.offset.get_or_insert(seq.wrapping_sub(s.first));
                s.at[usize::from(seq) % WIRE_TIMES] = (seq, Some(now));
            }
        }
    }

    /// When the packet handed in as `seq` of `source` left the socket.
    fn find(&self, source: u8, seq: u16) -> Option<Time> {
        let s = self.sources.get(usize::from(source))?;
        let seq = seq.wrapping_add(s.offset?);
        let (wire, at) = *s.at.get(usize::from(seq) % WIRE_TIMES)?;
        if wire == seq { at } else { None }
    }
}

/// The tag that ends a payload.
fn tag(conn: usize, source: u8, seq: u16) -> [u8; TAG] {
    let c = (conn as u32).to_be_bytes();
    let s = seq.to_be_bytes();
    [c[0], c[1], c[2], c[3], source, s[0], s[1], TAG_MARK]
}

/// The (connection, source, sequence number) a payload's tag names.
fn read_tag(payload: &[u8]) -> Option<(usize, u8, u16)> {
    let t = payload.get(payload.len().checked_sub(TAG)?..)?;
    (t[7] == TAG_MARK).then(|| {
        (
            u32::from_be_bytes([t[0], t[1], t[2], t[3]]) as usize,
            t[4],
            u16::from_be_bytes([t[5], t[6]]),
        )
    })
}

/// `t` as NTP UQ32.32 (RFC 5905 §6: seconds since 1900).
fn ntp_of(t: SystemTime) -> u64 {
    const UNIX_TO_NTP: u64 = 2_208_988_800;
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs() + UNIX_TO_NTP;
    let frac = (u64::from(d.subsec_nanos()) << 32) / 1_000_000_000;
    (secs << 32) | frac
}

/// `d` in UQ32.32 units.
fn ntp_units(d: Duration) -> u64 {
    (d.as_secs() << 32) + ((u64::from(d.subsec_nanos()) << 32) / 1_000_000_000)
}

impl Generator {
    pub(super) fn new(
        poll: Poll,
        inbox: Receiver<ToGen>,
        media: MediaShape,
        rooms: usize,
        live: Arc<Live>,
    ) -> io::Result<Generator> {
        let certificate = DtlsCertificate::generate()
            .map(Arc::new)
            .map_err(|e| io::Error::other(format!("certificate: {e}")))?;
        Ok(Generator {
            poll,
            inbox,
            certificate,
            media,
            live,
            conns: Vec::new(),
            readable: Vec::new(),
            timers: BinaryHeap::new(),
            frames: BinaryHeap::new(),
            room_sending: vec![None; rooms],
            start: Instant::now(),
            ntp_start: ntp_of(SystemTime::now()),
            steady: false,
            out: Measured::default(),
            stats_base: [0; 5],
            sent_base: 0,
            batch: Vec::with_capacity(BATCH * 2),
            stamps: Vec::with_capacity(BATCH * 2),
            tx: Vec::new(),
            scratch: BytesMut::with_capacity(1 << 16),
            payload: vec![0; MAX_PAYLOAD + TAG],
            wire: Vec::new(),
        })
    }

    /// The certificate every connection presents (its fingerprint goes in offers).
    pub(super) fn fingerprint(&self) -> [u8; 32] {
        self.certificate.fingerprint_sha256()
    }

    fn now(&self) -> Time {
        Time::ZERO + self.start.elapsed()
    }

    fn ntp(&self, now: Time) -> u64 {
        self.ntp_start
            .wrapping_add(ntp_units(now.saturating_since(Time::ZERO)))
    }

    /// Runs until [`ToGen::Stop`] (or the signalling side hangs up).
    pub(super) fn run(mut self) -> io::Result<Measured> {
        let mut events = Events::with_capacity(1024);
        loop {
            let now = self.now();
            let next = [
                self.timers.peek().map(|Reverse((t, _))| *t),
                self.frames.peek().map(|Reverse((t, _, _))| *t),
            ]
            .into_iter()
            .flatten()
            .min();
            let wait = if !self.readable.is_empty() {
                Duration::ZERO
            } else {
                next.map_or(MAX_WAIT, |t| t.saturating_since(now).min(MAX_WAIT))
            };
            match self.poll.poll(&mut events, Some(wait)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
            let mut inbox = false;
            for e in &events {
                if e.token() == WAKER {
                    inbox = true;
                } else if let Some(Some(c)) = self.conns.get_mut(e.token().0)
                    && !c.readable
                {
                    c.readable = true;
                    self.readable.push(e.token().0);
                }
            }
            if inbox && self.take_inbox()? {
                return Ok(self.finish());
            }
            // Each readable socket once; those that still hold datagrams go again
            // next turn.
            let turn = std::mem::take(&mut self.readable);
            for &i in &turn {
                self.read(i);
                if self.conns[i].as_ref().is_some_and(|c| c.readable) {
                    self.readable.push(i);
                }
            }
            self.send_due_frames();
            self.fire_timers();
        }
    }

    /// Takes what the signalling thread sent; true on `Stop`.
    fn take_inbox(&mut self) -> io::Result<bool> {
        loop {
            match self.inbox.try_recv() {
                Ok(ToGen::Add(join)) => self.add(*join)?,
                Ok(ToGen::Receive { conn, tracks }) => {
                    let now = self.now();
                    if let Some(Some(c)) = self.conns.get_mut(conn) {
                        for t in tracks {
                            c.received.push(received(&t));
                            let _ = c.shard.command(
                                now,
                                Command::Receive {
                                    peer: PeerId(1),
                                    track: t,
                                },
                            );
                        }
                    }
                    self.after(conn);
                }
                Ok(ToGen::Steady) => self.begin_steady(),
                Ok(ToGen::Stop) | Err(TryRecvError::Disconnected) => return Ok(true),
                Err(TryRecvError::Empty) => return Ok(false),
            }
        }
    }

    fn add(&mut self, join: Join) -> io::Result<()> {
        let std = std::net::UdpSocket::bind("127.0.0.1:0")?;
        std.set_nonblocking(true)?;
        let local: SocketAddr = std.local_addr()?;
        let mut socket = UdpSocket::from_std(std);
        let udp = UdpIo::new(&socket)?;
        self.poll
            .registry()
            .register(&mut socket, Token(join.conn), Interest::READABLE)?;
        let seed = join.conn as u64 + 1;
        let mut shard = Shard::new(ShardConfig::with_certificate(
            local,
            seed,
            Arc::clone(&self.certificate),
        ));
        let now = self.now();
        shard.advance_clock(now);
        let session = join.session;
        let peer = session.peer.id;
        let to_io = |e| io::Error::other(format!("{e:?}"));
        shard
            .command(now, Command::AddPeer(session.peer.clone()))
            .map_err(to_io)?;
        let mut publishing = None;
        if join.publishes {
            for (track, subscription) in session.sources.iter().cloned() {
                shard
                    .command(
                        now,
                        Command::AddSource {
                            peer,
                            track,
                            subscription,
                        },
                    )
                    .map_err(to_io)?;
            }
            publishing = publishing_of(&session, seed, join.conn);
        }
        let mut rx = Vec::new();
        for t in &session.receives {
            rx.push(received(t));
            shard
                .command(
                    now,
                    Command::Receive {
                        peer,
                        track: t.clone(),
                    },
                )
                .map_err(to_io)?;
        }
        let join_eligible = self
            .room_sending
            .get(join.room)
            .copied()
            .flatten()
            .is_some_and(|t| t <= join.offered_at);
        if self.conns.len() <= join.conn {
            self.conns.resize_with(join.conn + 1, || None);
            self.wire.resize_with(join.conn + 1, || None);
        }
        self.wire[join.conn] = publishing.as_ref().map(|p| {
            let video = p.video.iter().map(|v| (v.ssrc, v.seq));
            let sources: Vec<(u32, u16)> = std::iter::once((p.audio_ssrc, p.audio_seq))
                .chain(video)
                .collect();
            Box::new(WireTimes::new(&sources))
        });
        self.conns[join.conn] = Some(Conn {
            socket,
            udp,
            shard,
            room: join.room,
            connected: false,
            removed: false,
            publishing,
            received: rx,
            offered_at: join.offered_at,
            join_eligible,
            joined: false,
            armed: None,
            readable: true,
        });
        self.readable.push(join.conn);
        self.after(join.conn);
        Ok(())
    }

    /// After anything touched connection `i`: send what it has, take its events,
    /// and keep its timer on the heap.
    fn after(&mut self, i: usize) {
        let now = self.now();
        let Some(c) = self.conns.get_mut(i).and_then(Option::as_mut) else {
            return;
        };
        c.shard.poll_transmit(&mut self.tx);
        if !self.tx.is_empty() {
            if let Some(Some(w)) = self.wire.get_mut(i) {
                w.sent(&self.tx, now);
            }
            c.udp.send(&c.socket, &mut self.tx);
            self.tx.clear();
        }
        let mut start_media = false;
        while let Some(event) = c.shard.poll_event() {
            match event {
                ShardEvent::DtlsConnected { .. } => {
                    c.connected = true;
                    self.live.connected.fetch_add(1, Ordering::Relaxed);
                    start_media = c.publishing.is_some();
                }
                ShardEvent::KeyframeRequested { track } if VIDEO_LAYER_SOURCES.contains(&track) => {
                    if let Some(p) = c.publishing.as_mut() {
                        p.keyframe_wanted = true;
                    }
                }
                ShardEvent::RtpReceived {
                    track, seq, packet, ..
                } => {
                    self.live.received.fetch_add(1, Ordering::Relaxed);
                    if !c.joined {
                        c.joined = true;
                        self.out.first_media.insert(i, Instant::now());
                        if c.join_eligible {
                            self.out
                                .join_ms
                                .push(c.offered_at.elapsed().as_secs_f64() * 1e3);
                        }
                    }
                    let Some(r) = c.received.iter_mut().find(|r| r.id == track) else {
                        continue;
                    };
                    match r.max_seq {
                        None => {
                            r.first_seq = seq;
                            r.max_seq = Some(seq);
                        }
                        Some(m) if seq > m => r.max_seq = Some(seq),
                        Some(_) => {}
                    }
                    r.count += 1;
                    if self.steady {
                        let parsed = RtpPacket::parse(&packet).ok();
                        let wire = parsed
                            .as_ref()
                            .and_then(|p| read_tag(p.payload()))
                            .and_then(|(conn, source, seq)| {
                                self.wire.get(conn)?.as_ref()?.find(source, seq)
                            });
                        match wire {
                            Some(t) => self.out.node_latency_us.push(
                                u32::try_from(now.saturating_since(t).as_micros())
                                    .unwrap_or(u32::MAX),
                            ),
                            None => self.out.without_wire_time += 1,
                        }
                        let capture = r
                            .capture_id
                            .and_then(|id| AbsCaptureTime::parse(parsed.as_ref()?.extension(id)?));
                        match capture {
                            Some(c) => {
                                let ntp_now = self
                                    .ntp_start
                                    .wrapping_add(ntp_units(now.saturating_since(Time::ZERO)));
                                let d = ntp_now.wrapping_sub(c.capture_ntp) as i64;
                                let us = (d.max(0) as u128 * 1_000_000) >> 32;
                                let us = u32::try_from(us).unwrap_or(u32::MAX);
                                self.out.latency_us.push(us);
                                if r.audio {
                                    self.out.audio_latency_us.push(us);
                                }
                            }
                            None => self.out.without_capture_time += 1,
                        }
                    }
                }
                ShardEvent::PeerRemoved { .. } => {
                    c.removed = true;
                    self.live.failed.fetch_add(1, Ordering::Relaxed);
                }
                _ => {}
            }
        }
        if start_media && !c.removed {
            if let Some(p) = c.publishing.as_mut() {
                p.started = now;
            }
            let room = c.room;
            if let Some(n) = self.live.rooms.get(room) {
                n.fetch_add(1, Ordering::Relaxed);
            }
            if let Some(slot) = self.room_sending.get_mut(room)
                && slot.is_none()
            {
                *slot = Some(Instant::now());
            }
            self.frames.push(Reverse((now, i, 0)));
            self.frames.push(Reverse((now, i, 1)));
        }
        let Some(c) = self.conns.get_mut(i).and_then(Option::as_mut) else {
            return;
        };
        if let Some(t) = c.shard.poll_timeout()
            && c.armed.is_none_or(|a| t < a)
        {
            c.armed = Some(t);
            self.timers.push(Reverse((t, i)));
        }
    }

    /// Reads connection `i`'s socket: up to [`READS_PER_TURN`] batches, a tick each.
    fn read(&mut self, i: usize) {
        for _ in 0..READS_PER_TURN {
            let Some(c) = self.conns.get_mut(i).and_then(Option::as_mut) else {
                return;
            };
            let local = c.shard.local_addr();
            let mut more = true;
            while self.batch.len() < BATCH {
                match c
                    .udp
                    .recv_stamped(&c.socket, local, &mut self.batch, &mut self.stamps)
                {
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        more = false;
                        break;
                    }
                    Err(_) => {}
                }
            }
            c.readable = more;
            if self.batch.is_empty() {
                return;
            }
            // Each datagram arrived when the kernel took it in, not when this loop
            // got to it (as the node stamps them): a receiver's transport-wide
            // feedback built from read times would report this loop's own delays
            // to the node's estimate as the path's.
            let now = Time::ZERO + self.start.elapsed();
            self.stamps.resize(self.batch.len(), None);
            let arrival = udp::arrival_clock(now);
            c.shard.handle_received(
                now,
                self.batch.drain(..).zip(self.stamps.drain(..).map(arrival)),
            );
            self.after(i);
            if !more {
                return;
            }
        }
    }

    fn fire_timers(&mut self) {
        let now = self.now();
        while let Some(&Reverse((t, i))) = self.timers.peek() {
            if t > now {
                break;
            }
            self.timers.pop();
            let Some(c) = self.conns.get_mut(i).and_then(Option::as_mut) else {
                continue;
            };
            if c.armed != Some(t) {
                continue;
            }
            c.armed = None;
            if c.shard.poll_timeout().is_some_and(|d| d <= now) {
                c.shard.handle_timeout(now);
            }
            self.after(i);
        }
    }

    fn send_due_frames(&mut self) {
        let now = self.now();
        while let Some(&Reverse((due, i, kind))) = self.frames.peek() {
            if due > now {
                break;
            }
            self.frames.pop();
            let lag = now.saturating_since(due);
            if self.steady {
                self.out
                    .send_lag_us
                    .push(u32::try_from(lag.as_micros()).unwrap_or(u32::MAX));
            }
            let ntp = self.ntp(now);
            let Some(c) = self.conns.get_mut(i).and_then(Option::as_mut) else {
                continue;
            };
            if c.removed {
                continue;
            }
            let Some(p) = c.publishing.as_mut() else {
                continue;
            };
            let sent = if kind == 0 {
                send_audio(&mut c.shard, p, now, ntp, &mut self.scratch)
            } else {
                send_video(
                    &mut c.shard,
                    p,
                    &self.media,
                    now,
                    ntp,
                    &mut self.scratch,
                    &mut self.payload,
                )
            };
            self.live.sent.fetch_add(sent, Ordering::Relaxed);
            // The next one, on the source's own schedule (so lag never accumulates).
            let next = if kind == 0 {
                due + AUDIO_INTERVAL
            } else {
                let frame_us = 1_000_000 / u64::from(self.media.fps.max(1));
                p.started + Duration::from_micros(frame_us * p.frame)
            };
            self.frames.push(Reverse((next.max(due), i, kind)));
            self.after(i);
        }
    }

    fn shard_totals(&self) -> [u64; 5] {
        let mut t = [0; 5];
        for c in self.conns.iter().flatten() {
            let s = c.shard.stats();
            t[0] += s.nacks_sent;
            t[1] += s.keyframe_requests_sent;
            t[2] += s.rtp_retransmitted;
            t[3] += s.pacer_dropped;
            t[4] += s.transport_feedback_sent + s.remb_sent;
        }
        t
    }

    fn begin_steady(&mut self) {
        self.steady = true;
        self.stats_base = self.shard_totals();
        self.sent_base = self.live.sent.load(Ordering::Relaxed);
        for c in self.conns.iter_mut().flatten() {
            for r in &mut c.received {
                r.base = (r.count, r.span());
            }
        }
    }

    fn finish(mut self) -> Measured {
        let totals = self.shard_totals();
        let [nacks, plis, rtx, pacer, feedback] =
            std::array::from_fn(|k| totals[k].saturating_sub(self.stats_base[k]));
        self.out.nacks = nacks;
        self.out.plis = plis;
        self.out.rtx_received = rtx;
        self.out.pacer_dropped = pacer;
        self.out.feedback_sent = feedback;
        self.out.sent = self.live.sent.load(Ordering::Relaxed) - self.sent_base;
        for c in self.conns.iter().flatten() {
            if c.connected {
                self.out.connected += 1;
            }
            if c.removed {
                self.out.failed += 1;
            }
            for r in &c.received {
                self.out.received += r.count - r.base.0;
                self.out.expected += r.span() - r.base.1;
            }
        }
        self.out
    }
}

fn received(t: &TrackSpec) -> Received {
    Received {
        id: t.id,
        audio: t.kind == TrackKind::Audio,
        capture_id: t.extensions.abs_capture_time,
        max_seq: None,
        first_seq: 0,
        count: 0,
        base: (0, 0),
    }
}

fn publishing_of(session: &MediaSession, seed: u64, conn: usize) -> Option<Publishing> {
    let audio = session.sources.iter().find(|(t, _)| t.id == AUDIO_SOURCE)?;
    let streams: Vec<_> = VIDEO_LAYER_SOURCES
        .iter()
        .filter_map(|&id| session.sources.iter().find(|(t, _)| t.id == id))
        .collect();
    // Random-looking starting points (RFC 3550 §5.1), from the seed.
    let x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let simulcast = streams.len() > 1;
    let video = streams
        .iter()
        .enumerate()
        .map(|(l, (track, out))| {
            let y = x.rotate_left(8 * l as u32);
            VideoStream {
                source: track.id,
                tag: VIDEO + l as u8,
                ssrc: out.ssrc,
                pt: track.payload_type,
                capture_id: track.extensions.abs_capture_time,
                seq: (y >> 8) as u16,
                ts: (y >> 24) as u32,
                picture_id: (y >> 40) as u16 & 0x7fff,
                divisor: if simulcast { SIMULCAST_DIVISORS[l] } else { 1 },
            }
        })
        .collect::<Vec<_>>();
    if video.is_empty() {
        return None;
    }
    Some(Publishing {
        conn,
        audio_seq: x as u16,
        audio_ts: (x >> 16) as u32,
        audio_ssrc: audio.1.ssrc,
        audio_pt: audio.0.payload_type,
        audio_level_id: audio.0.extensions.audio_level,
        audio_capture_id: audio.0.extensions.abs_capture_time,
        video,
        frame: 0,
        started: Time::ZERO,
        last_keyframe: None,
        keyframe_wanted: true,
    })
}

/// One Opus-sized packet.
fn send_audio(
    shard: &mut Shard,
    p: &mut Publishing,
    now: Time,
    ntp: u64,
    out: &mut BytesMut,
) -> u64 {
    let fields = RtpFields {
        marker: false,
        payload_type: p.audio_pt,
        sequence_number: p.audio_seq,
        timestamp: p.audio_ts,
        ssrc: p.audio_ssrc,
    };
    let mut w = RtpWriter::new(out, &fields, &[]);
    if let Some(id) = p.audio_level_id {
        // Voice at −30 dBov (RFC 6464 §3: V flag and level).
        let _ = w.extension(id, &[0x80 | 30]);
    }
    if let Some(id) = p.audio_capture_id {
        let _ = w.extension(id, &ntp.to_be_bytes());
    }
    let mut payload = [0x78; AUDIO_PAYLOAD];
    payload[AUDIO_PAYLOAD - TAG..].copy_from_slice(&tag(p.conn, AUDIO, p.audio_seq));
    w.payload(&payload);
    w.finish(0);
    let packet = out.split().freeze();
    p.audio_seq = p.audio_seq.wrapping_add(1);
    p.audio_ts = p.audio_ts.wrapping_add(960);
    u64::from(shard.send_rtp(now, AUDIO_SOURCE, packet).is_ok())
}

/// One VP8 frame on every video stream, as packets of at most [`MAX_PAYLOAD`] bytes.
fn send_video(
    shard: &mut Shard,
    p: &mut Publishing,
    media: &MediaShape,
    now: Time,
    ntp: u64,
    out: &mut BytesMut,
    payload: &mut [u8],
) -> u64 {
    let keyframe = p.keyframe_wanted
        || p.last_keyframe
            .is_none_or(|k| now.saturating_since(k) >= media.keyframe_interval);
    if keyframe {
        p.keyframe_wanted = false;
        p.last_keyframe = Some(now);
    }
    p.frame += 1;
    let streams = p.video.len();
    let mut sent = 0;
    for (l, v) in p.video.iter_mut().enumerate() {
        // Each lower stream a quarter of the pixels of the next.
        let shift = streams - 1 - l;
        let dimensions = (640u16 >> shift, 360u16 >> shift);
        sent += send_frame(
            shard, p.conn, v, media, keyframe, dimensions, now, ntp, out, payload,
        );
    }
    sent
}

/// One frame of video stream `v`, keyframe or not, as packets of at most
/// [`MAX_PAYLOAD`] bytes; a keyframe's header names `dimensions`.
fn send_frame(
    shard: &mut Shard,
    conn: usize,
    v: &mut VideoStream,
    media: &MediaShape,
    keyframe: bool,
    dimensions: (u16, u16),
    now: Time,
    ntp: u64,
    out: &mut BytesMut,
    payload: &mut [u8],
) -> u64 {
    // Frames per keyframe interval: one keyframe of KEYFRAME_FACTOR delta frames.
    let fps = u64::from(media.fps.max(1));
    let per_interval = (media.keyframe_interval.as_millis() as u64 * fps / 1000).max(1);
    let bytes_per_interval =
        media.video_bps / v.divisor / 8 * media.keyframe_interval.as_millis() as u64 / 1000;
    let delta = (bytes_per_interval / (per_interval - 1 + KEYFRAME_FACTOR as u64)).max(1) as usize;
    let mut size = if keyframe {
        delta * KEYFRAME_FACTOR
    } else {
        delta
    };
    v.picture_id = (v.picture_id + 1) & 0x7fff;
    // The descriptor: X, S on the first packet, PID 0; I with a 15-bit PictureID.
    const DESCRIPTOR: usize = 4;
    let per_packet = MAX_PAYLOAD - DESCRIPTOR;
    let packets = size.div_ceil(per_packet);
    let mut frame = Vec::with_capacity(packets);
    for k in 0..packets {
        // Room for a keyframe's header and the tag, even in a frame's last packet.
        let chunk = size.min(per_packet).max(10 + TAG);
        size = size.saturating_sub(chunk);
        let first = k == 0;
        payload[0] = if first { 0x90 } else { 0x80 };
        payload[1] = 0x80;
        payload[2] = 0x80 | (v.picture_id >> 8) as u8;
        payload[3] = v.picture_id as u8;
        let body = &mut payload[DESCRIPTOR..DESCRIPTOR + chunk];
        body.fill(0x5a);
        if first {
            // RFC 6386 §9.1: P (bit 0) clear for a keyframe, show_frame set; a
            // keyframe's start code, then width and height (14 bits each, little
            // endian, no scaling).
            body[0] = if keyframe { 0x10 } else { 0x11 };
            if keyframe {
                let (w, h) = (dimensions.0.to_le_bytes(), dimensions.1.to_le_bytes());
                body[3..10].copy_from_slice(&[0x9d, 0x01, 0x2a, w[0], w[1], h[0], h[1]]);
            }
        }
        body[chunk - TAG..].copy_from_slice(&tag(conn, v.tag, v.seq));
        let fields = RtpFields {
            marker: k + 1 == packets,
            payload_type: v.pt,
            sequence_number: v.seq,
            timestamp: v.ts,
            ssrc: v.ssrc,
        };
        let mut w = RtpWriter::new(out, &fields, &[]);
        if let Some(id) = v.capture_id {
            let _ = w.extension(id, &ntp.to_be_bytes());
        }
        w.payload(&payload[..DESCRIPTOR + chunk]);
        w.finish(0);
        let packet: Bytes = out.split().freeze();
        v.seq = v.seq.wrapping_add(1);
        frame.push(packet);
    }
    v.ts = v.ts.wrapping_add((90_000 / fps) as u32);
    // The whole frame in one tick, as an encoder hands a frame to its packetizer.
    shard
        .send_rtp_batch(now, v.source, frame)
        .map_or(0, |n| n as u64)
}
