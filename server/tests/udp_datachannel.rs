//! Data over real UDP: two shoal client stacks, each an endpoint
//! (`shoal_server::endpoint`) on its own thread with its own loopback socket, connect
//! with ICE, DTLS and SCTP and exchange 64 MiB, 32 MiB each way at once: ordered and
//! reliable from the ICE-lite side on stream 1, unordered and reliable from the
//! controlling side on stream 2. Every byte is checked: each message carries its sequence number and a
//! body derived from it, sizes range from 4 bytes to ~250 KiB (fragmented and
//! reassembled), the ordered stream must arrive in order with the sender's running
//! hash of the concatenated payloads, the unordered one exactly once each (a seen-set
//! and an order-independent multiset hash). A wall-clock deadline makes a stall fail
//! rather than hang; nothing sleeps.

use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use shoal_components::peer::PeerId;
use shoal_components::sctp::tx::{Reliability, SendError};
use shoal_components::time::Time;
use shoal_server::endpoint::{self, Control};
use shoal_systems::{Command, SctpSendError, Shard, ShardConfig, ShardEvent};

/// Bytes each direction carries (the last message may take it a little over).
const TOTAL: u64 = 32 * 1024 * 1024;
const DEADLINE: Duration = Duration::from_secs(120);
const PEER: PeerId = PeerId(7);
const PPID_BINARY: u32 = 53;
const ORDERED_STREAM: u16 = 1;
const UNORDERED_STREAM: u16 = 2;
/// The sender's flow control: pause above the high watermark, resume at the low one.
const HIGH_WATERMARK: usize = 1024 * 1024;
const LOW_WATERMARK: usize = 512 * 1024;
/// Every message starts with its sequence number.
const HEADER: usize = 4;

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The size of message `seq` on `stream`: mostly 1 KiB, some tiny, some a few
/// packets, a few up to ~250 KiB (under the 256 KiB maximum message size).
fn size(stream: u16, seq: u32) -> usize {
    let r = splitmix(u64::from(stream) << 32 | u64::from(seq));
    let k = (r >> 40) as usize;
    match r % 100 {
        0..=59 => 1024,
        60..=79 => HEADER + k % 1200,
        80..=94 => 1200 + k % 8000,
        95..=98 => 16 * 1024 + k % (48 * 1024),
        _ => 64 * 1024 + k % (186 * 1024),
    }
}

/// Message `seq` of `stream`: its sequence number, then bytes derived from both.
fn message(stream: u16, seq: u32) -> Vec<u8> {
    let len = size(stream, seq);
    let mut m = Vec::with_capacity(len);
    m.extend_from_slice(&seq.to_be_bytes());
    let mut state = u64::from(stream) << 48 ^ u64::from(seq) << 8 ^ 0x5eed;
    while m.len() < len {
        state = splitmix(state);
        let take = (len - m.len()).min(8);
        m.extend_from_slice(&state.to_le_bytes()[..take]);
    }
    m
}

/// How many messages make up [`TOTAL`] bytes on `stream`.
fn message_count(stream: u16) -> u32 {
    let mut bytes = 0u64;
    let mut n = 0u32;
    while bytes < TOTAL {
        bytes += size(stream, n) as u64;
        n += 1;
    }
    n
}

/// FNV-1a over a byte stream, continued from `h`.
fn fnv(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

const FNV_START: u64 = 0xcbf2_9ce4_8422_2325;

/// The checksums of one direction: a running hash of the concatenated payloads (for
/// the ordered stream) and an order-independent multiset hash of per-message hashes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Digest {
    messages: u32,
    bytes: u64,
    running: u64,
    xor: u64,
    sum: u64,
}

impl Digest {
    fn new() -> Digest {
        Digest {
            running: FNV_START,
            ..Digest::default()
        }
    }

    fn add(&mut self, payload: &[u8]) {
        self.messages += 1;
        self.bytes += payload.len() as u64;
        self.running = fnv(self.running, payload);
        let h = splitmix(fnv(FNV_START, payload));
        self.xor ^= h;
        self.sum = self.sum.wrapping_add(h);
    }
}

/// One direction's sending half.
struct Sending {
    stream: u16,
    unordered: bool,
    next: u32,
    count: u32,
    paused: bool,
    digest: Digest,
}

impl Sending {
    fn new(stream: u16, unordered: bool) -> Sending {
        Sending {
            stream,
            unordered,
            next: 0,
            count: message_count(stream),
            paused: false,
            digest: Digest::new(),
        }
    }

    /// Queues messages while the buffered amount allows.
    fn pump(&mut self, shard: &mut Shard) -> Result<(), String> {
        let mut buffered = shard.sctp_buffered_amount(PEER);
        if self.paused {
            if buffered > LOW_WATERMARK {
                return Ok(());
            }
            self.paused = false;
        }
        while self.next < self.count {
            if buffered > HIGH_WATERMARK {
                self.paused = true;
                return Ok(());
            }
            let m = message(self.stream, self.next);
            let len = m.len();
            let payload = Bytes::from(m);
            match shard.sctp_send(
                PEER,
                self.stream,
                PPID_BINARY,
                payload.clone(),
                self.unordered,
                Reliability::Reliable,
            ) {
                Ok(()) => {
                    self.digest.add(&payload);
                    self.next += 1;
                    buffered += len;
                }
                Err(SctpSendError::Queue(SendError::WouldBlock)) => {
                    self.paused = true;
                    return Ok(());
                }
                Err(e) => return Err(format!("send of message {}: {e}", self.next)),
            }
        }
        Ok(())
    }
}

/// One direction's receiving half.
struct Receiving {
    stream: u16,
    ordered: bool,
    count: u32,
    next: u32,
    seen: Vec<bool>,
    digest: Digest,
}

impl Receiving {
    fn new(stream: u16, ordered: bool) -> Receiving {
        let count = message_count(stream);
        Receiving {
            stream,
            ordered,
            count,
            next: 0,
            seen: vec![false; count as usize],
            digest: Digest::new(),
        }
    }

    fn done(&self) -> bool {
        self.digest.messages == self.count
    }

    fn accept(&mut self, stream: u16, ppid: u32, payload: &[u8]) -> Result<(), String> {
        if stream != self.stream || ppid != PPID_BINARY {
            return Err(format!("message on stream {stream} with PPID {ppid}"));
        }
        let Some(seq) = payload
            .get(..HEADER)
            .map(|h| u32::from_be_bytes([h[0], h[1], h[2], h[3]]))
        else {
            return Err(format!("{}-byte message", payload.len()));
        };
        if seq >= self.count {
            return Err(format!(
                "stream {stream}: sequence number {seq} out of range"
            ));
        }
        if self.ordered && seq != self.next {
            return Err(format!(
                "stream {stream}: message {seq} arrived when {} was due",
                self.next
            ));
        }
        let seen = &mut self.seen[seq as usize];
        if *seen {
            return Err(format!("stream {stream}: message {seq} delivered twice"));
        }
        *seen = true;
        if payload != message(stream, seq).as_slice() {
            return Err(format!(
                "stream {stream}: message {seq} corrupted ({} bytes)",
                payload.len()
            ));
        }
        self.next += 1;
        self.digest.add(payload);
        Ok(())
    }
}

/// What one endpoint ends with.
struct Outcome {
    sent: Digest,
    received: Digest,
    error: Option<String>,
}

/// Flags the two endpoint threads share.
struct Shared {
    /// Each side has received everything it expects.
    done: [AtomicBool; 2],
    /// One side failed: both stop.
    abort: AtomicBool,
}

fn run_side(
    side: usize,
    socket: UdpSocket,
    shard: Shard,
    mut sending: Sending,
    mut receiving: Receiving,
    shared: &Shared,
    deadline: Instant,
) -> Outcome {
    let mut established = false;
    let mut error: Option<String> = None;
    let fail = |e: String, error: &mut Option<String>| {
        *error = Some(format!("side {side}: {e}"));
        shared.abort.store(true, Ordering::Relaxed);
        Control::Stop
    };
    let result = endpoint::run(socket, shard, |shard, _now, events| {
        for event in events.drain(..) {
            match event {
                ShardEvent::SctpEstablished { .. } => established = true,
                ShardEvent::SctpMessage {
                    stream,
                    ppid,
                    payload,
                    ..
                } => {
                    if let Err(e) = receiving.accept(stream, ppid, &payload) {
                        return fail(e, &mut error);
                    }
                }
                ShardEvent::SctpClosed { .. } | ShardEvent::PeerRemoved { .. } => {
                    return fail(format!("connection lost: {event:?}"), &mut error);
                }
                _ => {}
            }
        }
        if receiving.done() {
            shared.done[side].store(true, Ordering::Relaxed);
        }
        if shared.abort.load(Ordering::Relaxed)
            || shared.done.iter().all(|d| d.load(Ordering::Relaxed))
        {
            return Control::Stop;
        }
        if Instant::now() > deadline {
            let e = format!(
                "deadline passed: sent {} of {} messages, received {} of {}",
                sending.next, sending.count, receiving.digest.messages, receiving.count
            );
            return fail(e, &mut error);
        }
        if established && let Err(e) = sending.pump(shard) {
            return fail(e, &mut error);
        }
        Control::Continue
    });
    if let Err(e) = result {
        error.get_or_insert(format!("side {side}: endpoint: {e}"));
        shared.abort.store(true, Ordering::Relaxed);
    }
    Outcome {
        sent: sending.digest,
        received: receiving.digest,
        error,
    }
}

#[test]
fn udp_datachannel_real_socket() {
    let deadline = Instant::now() + DEADLINE;
    let a_sock = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let b_sock = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let mut a = Shard::new(ShardConfig::new(a_sock.local_addr().unwrap(), 1));
    let mut b = Shard::new(ShardConfig::new(b_sock.local_addr().unwrap(), 2));
    let mut rng = endpoint::os_rng().expect("random generator");
    let (lite, controlling) = endpoint::pair_specs(
        PEER,
        a.local_addr(),
        a.fingerprint(),
        b.fingerprint(),
        &mut rng,
    );
    a.command(Time::ZERO, Command::AddPeer(lite)).unwrap();
    b.command(Time::ZERO, Command::AddPeer(controlling))
        .unwrap();

    let shared = Shared {
        done: [AtomicBool::new(false), AtomicBool::new(false)],
        abort: AtomicBool::new(false),
    };
    let started = Instant::now();
    let (oa, ob) = std::thread::scope(|s| {
        let shared = &shared;
        // A (ICE-lite, DTLS server) sends ordered on stream 1 and receives unordered
        // on stream 2; B the other way round.
        let ta = s.spawn(move || {
            run_side(
                0,
                a_sock,
                a,
                Sending::new(ORDERED_STREAM, false),
                Receiving::new(UNORDERED_STREAM, false),
                shared,
                deadline,
            )
        });
        let tb = s.spawn(move || {
            run_side(
                1,
                b_sock,
                b,
                Sending::new(UNORDERED_STREAM, true),
                Receiving::new(ORDERED_STREAM, true),
                shared,
                deadline,
            )
        });
        (ta.join().expect("side 0"), tb.join().expect("side 1"))
    });
    let elapsed = started.elapsed();
    let errors: Vec<&String> = [&oa.error, &ob.error].into_iter().flatten().collect();
    assert!(errors.is_empty(), "failed after {elapsed:?}: {errors:?}");
    // Ordered A -> B: same messages, same bytes, same concatenation.
    assert_eq!(oa.sent, ob.received, "ordered stream A -> B");
    // Unordered B -> A: the same multiset of messages (the running hash depends on
    // arrival order, so it is not compared).
    assert_eq!(
        (ob.sent.messages, ob.sent.bytes, ob.sent.xor, ob.sent.sum),
        (
            oa.received.messages,
            oa.received.bytes,
            oa.received.xor,
            oa.received.sum
        ),
        "unordered stream B -> A"
    );
    assert!(oa.sent.bytes >= TOTAL && ob.sent.bytes >= TOTAL);
    let mib = (oa.sent.bytes + ob.sent.bytes) as f64 / (1024.0 * 1024.0);
    eprintln!(
        "udp_datachannel_real_socket: {mib:.1} MiB in {elapsed:.2?} ({} + {} messages), \
         {:.0} Mbit/s both ways",
        oa.sent.messages,
        ob.sent.messages,
        mib * 8.0 / elapsed.as_secs_f64()
    );
}
