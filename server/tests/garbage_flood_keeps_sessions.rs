//! `garbage_flood_keeps_sessions`: while a publisher and a subscriber (shoal's own
//! client stacks over real UDP, signalled over `/signal`) exchange audio and
//! numbered reliable data-channel messages through a real `shoal` process, another
//! socket sends 200 000 random and truncated datagrams at the shard's UDP port,
//! shaped as STUN (headers with random attributes, and well-formed ICE binding
//! requests naming a ufrag no session has), DTLS records (handshake and application data,
//! epochs 0 and 1), RTP and RTCP, raw SCTP and pure noise, and other connections
//! send garbage at the ICE-TCP port (bad RFC 4571 frames, oversized lengths,
//! noise) and at the HTTP port. The process stays up and healthy, the subscriber
//! gets every message once and in order, and every garbage datagram the shard read
//! is counted as a drop by its reason.

mod media_pair;
mod node_process;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use media_pair::{Shared, participant, publish, subscribe};
use node_process::Node;
use rand_chacha::ChaCha12Rng;
use rand_core::{RngCore, SeedableRng};
use shoal_components::stun::{BINDING, Class, StunWriter, TransactionId};
use shoal_server::endpoint::OfferShape;

const ROOM: &str = "flooded";
/// Reliable messages the publisher sends during the flood.
const MESSAGES: u64 = 300;
/// Audio packets it sends.
const AUDIO_PACKETS: u64 = 600;
/// Garbage datagrams at the shard's UDP port.
const FLOOD: usize = 200_000;
/// Garbage connections to each TCP port.
const TCP_GARBAGE: usize = 40;
const DEADLINE: Duration = Duration::from_secs(60);

/// The drop counters a datagram from an unknown address can land in, by reason.
const DROPS: [&str; 10] = [
    "shoal_shard_dropped_unknown_class_total",
    "shoal_shard_dropped_over_batch_limit_total",
    "shoal_shard_stun_malformed_total",
    "shoal_shard_stun_bad_fingerprint_total",
    "shoal_shard_stun_unknown_ufrag_total",
    "shoal_shard_stun_bad_integrity_total",
    "shoal_shard_dropped_unknown_source_total",
    "shoal_shard_dtls_unknown_source_total",
    "shoal_shard_stun_response_unknown_attributes_total",
    "shoal_shard_stun_missing_attributes_total",
];

/// `/metrics`, summed over labels, by metric name.
fn scrape(http: SocketAddr) -> std::collections::HashMap<String, f64> {
    let mut s = TcpStream::connect(http).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("a timeout");
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: {http}\r\nConnection: close\r\n\r\n"
    )
    .expect("send");
    let mut text = String::new();
    s.read_to_string(&mut text).expect("read");
    let (head, body) = text.split_once("\r\n\r\n").expect("a response");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let lines = body.lines().map(|l| Ok(l.to_owned()));
    let scrape = prometheus_parse::Scrape::parse(lines).expect("Prometheus text");
    let mut sums = std::collections::HashMap::new();
    for sample in scrape.samples {
        if let prometheus_parse::Value::Counter(v)
        | prometheus_parse::Value::Gauge(v)
        | prometheus_parse::Value::Untyped(v) = sample.value
        {
            *sums.entry(sample.metric).or_default() += v;
        }
    }
    sums
}

/// The reasons the node closes an ice-tcp connection that sent it garbage: refused
/// as it is accepted (too many unvalidated connections from one address), or
/// closed for what it sent.
const TCP_REFUSALS: [&str; 4] = [
    "shoal_io_tcp_refused_total",
    "shoal_io_tcp_closed_oversized_total",
    "shoal_io_tcp_closed_garbage_total",
    "shoal_io_tcp_closed_unauthenticated_total",
];

fn delta(
    before: &std::collections::HashMap<String, f64>,
    after: &std::collections::HashMap<String, f64>,
    name: &str,
) -> u64 {
    let get = |m: &std::collections::HashMap<String, f64>| m.get(name).copied().unwrap_or(0.0);
    (get(after) - get(before)) as u64
}

/// One garbage datagram of shape `kind`, `rng`'s bytes, often cut short.
fn garbage(kind: usize, rng: &mut ChaCha12Rng, ufrag: &str) -> Vec<u8> {
    let noise = |rng: &mut ChaCha12Rng, n: usize| {
        let mut v = vec![0u8; n];
        rng.fill_bytes(&mut v);
        v
    };
    let mut d = match kind % 7 {
        // STUN: a header with the magic cookie, random attributes.
        0 => {
            let mut d = vec![0x00, 0x01, 0x00, 0x20, 0x21, 0x12, 0xa4, 0x42];
            d.extend(noise(rng, 12 + 32));
            d
        }
        // A well-formed ICE binding request (priority, ICE-CONTROLLING,
        // MESSAGE-INTEGRITY, FINGERPRINT) naming a ufrag no session has.
        1 => {
            let mut tid = [0u8; 12];
            rng.fill_bytes(&mut tid);
            let mut buf = BytesMut::new();
            let mut w = StunWriter::new(&mut buf, Class::Request, BINDING, TransactionId(tid));
            w.username(format!("{ufrag}:forged").as_bytes())
                .priority(1_853_817_087)
                .ice_controlling(rng.next_u64())
                .message_integrity(b"not the password")
                .fingerprint();
            w.finish();
            buf.to_vec()
        }
        // DTLS: handshake (22) or application data (23), epoch 0 or 1.
        2 => {
            let mut d = vec![
                22 + (noise(rng, 1)[0] & 1),
                0xfe,
                0xfd,
                0x00,
                noise(rng, 1)[0] & 1,
            ];
            d.extend(noise(rng, 6));
            d.extend(200u16.to_be_bytes());
            d.extend(noise(rng, 200));
            d
        }
        // RTP (V=2, PT below 64) or RTCP (PT 200-206).
        3 => {
            let mut d = noise(rng, 12 + 160);
            d[0] = 0x80;
            d[1] = if d[1] & 1 == 0 { 111 } else { 200 + d[2] % 7 };
            d
        }
        // Raw SCTP: ports 5000, a tag, a checksum, a DATA chunk.
        4 => {
            let mut d = vec![0x13, 0x88, 0x13, 0x88];
            d.extend(noise(rng, 8));
            d.extend([0, 0x03, 0x00, 0x20]);
            d.extend(noise(rng, 28));
            d
        }
        // TURN ChannelData-shaped, ZRTP-shaped, and anything at all.
        5 => {
            let mut d = noise(rng, 64);
            d[0] = 0x40 | (d[0] & 0x0f);
            d
        }
        _ => {
            let n = 1 + (rng.next_u32() % 1200) as usize;
            noise(rng, n)
        }
    };
    // Truncated half the time: anywhere from empty to one byte short.
    if rng.next_u32().is_multiple_of(2) && !d.is_empty() {
        let cut = (rng.next_u32() as usize) % d.len();
        d.truncate(cut);
    }
    d
}

/// Connects to `addr` and sends what `bytes` says, then reads until the node
/// closes or `limit` passes; whether the node closed the connection.
fn tcp_garbage(addr: SocketAddr, bytes: &[u8], limit: Duration) -> bool {
    let Ok(mut s) = TcpStream::connect_timeout(&addr, limit) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(limit));
    let _ = s.write_all(bytes);
    let mut sink = [0u8; 4096];
    loop {
        match s.read(&mut sink) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) => return e.kind() == std::io::ErrorKind::ConnectionReset,
        }
    }
}

#[test]
fn garbage_flood_keeps_sessions() {
    let mut node = Node::start(&["--tcp-port-base", "auto"]);
    let http = node.http;
    let udp = node.banner_addr("shoal: shard 0 udp ");
    let ice_tcp = node.banner_addr("shoal: shard 0 ice-tcp ");

    let shared = Arc::new(Shared {
        room: ROOM.into(),
        messages: MESSAGES,
        audio_packets: AUDIO_PACKETS,
        deadline: DEADLINE * 2,
        ..Shared::default()
    });
    let publish_shape = OfferShape {
        data: true,
        ..OfferShape::PUBLISH
    };
    let subscribe_shape = OfferShape {
        data: true,
        ..OfferShape::default()
    };
    // The subscriber first: the publisher starts sending once it is ready.
    let (subscriber, subscriber_signal) =
        participant(http, "subscriber", subscribe_shape, &shared, subscribe);
    let (publisher, publisher_signal) =
        participant(http, "publisher", publish_shape, &shared, publish);
    let deadline = Instant::now() + DEADLINE;
    while !shared.subscriber_ready.load(Ordering::SeqCst) {
        assert!(Instant::now() < deadline, "the subscriber never got ready");
        std::thread::sleep(Duration::from_millis(10));
    }
    let before = scrape(http);

    // The flood, paced in bursts so that the kernel's socket buffer (not the
    // node) is not what drops most of it.
    let flood = std::thread::spawn(move || {
        let socket = UdpSocket::bind("127.0.0.1:0").expect("bind");
        let mut rng = ChaCha12Rng::seed_from_u64(0x6a7b);
        let mut sent = 0usize;
        while sent < FLOOD {
            for _ in 0..500 {
                let d = garbage(sent, &mut rng, "serverufrag");
                if socket.send_to(&d, udp).is_ok() {
                    sent += 1;
                }
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        sent
    });
    // Garbage at the TCP ports meanwhile, every connection at once: the node must
    // close each one.
    let tcp: Vec<_> = (0..TCP_GARBAGE)
        .map(|i| {
            std::thread::spawn(move || {
                let mut rng = ChaCha12Rng::seed_from_u64(0x7c + i as u64);
                let limit = Duration::from_secs(20);
                let mut noise = vec![0u8; 64 + i * 37 % 2000];
                rng.fill_bytes(&mut noise);
                let ice_bytes = match i % 4 {
                    // A frame of garbage (RFC 4571 length, then noise).
                    0 => [&(noise.len() as u16).to_be_bytes()[..], &noise].concat(),
                    // A length far past any datagram, then nothing.
                    1 => vec![0xff, 0xff, 1, 2, 3],
                    // A DTLS-looking frame before any STUN check.
                    2 => [&[0x00, 0x10, 22, 0xfe, 0xfd][..], &noise[..13]].concat(),
                    _ => noise.clone(),
                };
                let started = Instant::now();
                let ice = tcp_garbage(ice_tcp, &ice_bytes, limit);
                let ice_took = started.elapsed();
                let mut http_bytes = noise;
                http_bytes.extend(b"\r\n\r\n");
                let started = Instant::now();
                let web = tcp_garbage(http, &http_bytes, limit);
                (ice, web, ice_took.max(started.elapsed()))
            })
        })
        .collect();
    let flooded = flood.join().expect("the flood thread");
    let mut closed = [0usize; 2];
    let mut slowest = Duration::ZERO;
    for t in tcp {
        let (ice, web, took) = t.join().expect("a TCP garbage thread");
        closed[0] += usize::from(ice);
        closed[1] += usize::from(web);
        slowest = slowest.max(took);
    }

    // The session carried on: every message, once, in order (the subscriber
    // checks each), and the audio.
    let deadline = Instant::now() + DEADLINE;
    while !(shared.messages_received.load(Ordering::SeqCst) == MESSAGES
        && shared.audio_sent.load(Ordering::SeqCst) == AUDIO_PACKETS
        && shared.audio_received.load(Ordering::SeqCst) > 0)
    {
        assert!(
            Instant::now() < deadline,
            "the session stalled: {} of {MESSAGES} messages, {} audio packets sent, {} received",
            shared.messages_received.load(Ordering::SeqCst),
            shared.audio_sent.load(Ordering::SeqCst),
            shared.audio_received.load(Ordering::SeqCst),
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(node.try_status().is_none(), "shoal exited");
    // A scrape's shard figures are the shard's last snapshot, taken about once a
    // second and later on a loaded machine: scrape until they count every ice-tcp
    // close the garbage connections saw (a shard counts a close as it closes) and
    // the flood's drops (the assertions below say how many).
    let closes = |m: &std::collections::HashMap<String, f64>| {
        TCP_REFUSALS
            .iter()
            .map(|n| delta(&before, m, n))
            .sum::<u64>()
    };
    let drops = |m: &std::collections::HashMap<String, f64>| {
        DROPS.iter().map(|n| delta(&before, m, n)).sum::<u64>()
    };
    let deadline = Instant::now() + DEADLINE;
    let after = loop {
        let after = scrape(http);
        let counted = closes(&after) >= closed[0] as u64 && drops(&after) >= FLOOD as u64 * 9 / 10;
        if counted || Instant::now() >= deadline {
            break after;
        }
        std::thread::sleep(Duration::from_millis(100));
    };

    assert_eq!(flooded, FLOOD);
    let read = delta(&before, &after, "shoal_shard_datagrams_in_total");
    let dropped = drops(&after);
    let by_reason: Vec<(&str, u64)> = DROPS
        .iter()
        .map(|n| (*n, delta(&before, &after, n)))
        .filter(|(_, v)| *v > 0)
        .collect();
    eprintln!(
        "flood: {flooded} sent, {read} datagrams read by the shard, {dropped} dropped: \
         {by_reason:?}; TCP connections closed by the node: ice-tcp {}, http {} of \
         {TCP_GARBAGE}, the slowest after {slowest:?}",
        closed[0], closed[1]
    );
    // Nearly all of the flood reached the shard over loopback, and everything it
    // read beyond the session's own traffic (a few hundred datagrams of audio,
    // messages, SACKs, feedback and consent) was dropped and counted by reason.
    assert!(read >= FLOOD as u64 * 9 / 10, "read {read} of {FLOOD}");
    assert!(
        dropped <= read && dropped <= FLOOD as u64,
        "{dropped} of {read}"
    );
    let session = read - dropped;
    assert!(
        session < 5_000,
        "{session} datagrams read and not counted as dropped: {by_reason:?}"
    );
    for reason in [
        "shoal_shard_dropped_unknown_class_total",
        "shoal_shard_stun_malformed_total",
        "shoal_shard_dropped_unknown_source_total",
        "shoal_shard_dtls_unknown_source_total",
        "shoal_shard_stun_unknown_ufrag_total",
    ] {
        assert!(
            delta(&before, &after, reason) > 0,
            "{reason}: {by_reason:?}"
        );
    }
    // No garbage got into the session's state.
    assert_eq!(
        delta(&before, &after, "shoal_shard_srtp_unprotect_failed_total"),
        0
    );
    assert_eq!(delta(&before, &after, "shoal_shard_relay_dropped_total"), 0);
    // Every garbage TCP connection was closed by the node.
    assert_eq!(closed, [TCP_GARBAGE; 2]);
    // Each was refused and counted: at accept, once too many from one address
    // waited unvalidated (how many depends on how the connections overlapped), or
    // for what it sent; and some got as far as sending.
    let by_content = delta(&before, &after, "shoal_io_tcp_closed_garbage_total")
        + delta(&before, &after, "shoal_io_tcp_closed_oversized_total")
        + delta(&before, &after, "shoal_io_tcp_closed_unauthenticated_total");
    assert_eq!(
        closes(&after),
        TCP_GARBAGE as u64,
        "ice-tcp refusals counted ({by_content} for what they sent)"
    );
    assert!(
        by_content > 0,
        "no ice-tcp connection closed for what it sent"
    );

    // Healthy still, and it stops cleanly.
    shared.stop.store(true, Ordering::SeqCst);
    for (name, t) in [("publisher", publisher), ("subscriber", subscriber)] {
        t.join()
            .expect("the participant thread")
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    drop(publisher_signal);
    drop(subscriber_signal);
    node.signal(nix::sys::signal::Signal::SIGTERM);
    let status = node.wait(Duration::from_secs(30));
    assert!(status.success(), "{status}");
}
