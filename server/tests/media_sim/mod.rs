//! Media in the simulated network: a server shard, client endpoints connected to it
//! over SRTP, what negotiation would set up (a publisher's local source, the server's
//! track and subscriptions, subscribers receiving), and the publisher's packets.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use shoal_components::dtls::DtlsRole;
use shoal_components::media::{
    ExtensionIds, FeedbackKinds, PayloadFormat, SubscriptionSpec, TrackId, TrackKind, TrackSpec,
};
use shoal_components::peer::PeerId;
use shoal_components::rtp::payload::Vp8Descriptor;
use shoal_components::rtp::{RtpFields, RtpPacket, RtpWriter};
use shoal_server::sim::{LinkConfig, Sim};
use shoal_systems::Command;

pub const SRV: &str = "10.0.0.1:7100";
/// Payload types as negotiated: VP8 and its RTX (RFC 4588).
pub const PT: u8 = 96;
pub const RTX_PT: u8 = 97;
/// The publisher's SSRCs on the wire.
pub const PUB_SSRC: u32 = 0x1000;
pub const PUB_RTX: u32 = 0x1001;
/// The server's track id and the clients' ids for their streams.
pub const TRACK: TrackId = TrackId(7);
/// The CNAME shoal announces for its streams of the track to subscribers.
pub const PUBLISHER_CNAME: &str = "publisher-stream";
pub const SOURCE: TrackId = TrackId(1);
pub const RECEIVED: TrackId = TrackId(2);
/// Packets the publisher sends: 100 a second for 10 s.
pub const PACKETS: u16 = 1000;
pub const INTERVAL: Duration = Duration::from_millis(10);

pub fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

pub fn cli(i: u64) -> SocketAddr {
    SocketAddr::from(([10, 0, 1, i as u8], 50_000))
}

pub fn nack_feedback() -> FeedbackKinds {
    FeedbackKinds {
        nack: true,
        pli: true,
        fir: false,
        transport_cc: false,
        remb: false,
    }
}

/// A video stream as the publisher's negotiation describes it.
pub fn track_spec(id: TrackId, ssrc: u32, rtx: u32) -> TrackSpec {
    TrackSpec {
        id,
        kind: TrackKind::Video,
        mid: "0".into(),
        ssrc: Some(ssrc),
        rtx_ssrc: Some(rtx),
        payload_type: PT,
        rtx_payload_type: Some(RTX_PT),
        clock_rate: 90_000,
        extensions: ExtensionIds::default(),
        feedback: nack_feedback(),
        format: Default::default(),
        layers: Vec::new(),
    }
}

/// A stream as the receiving side's negotiation describes it.
pub fn subscription(track: TrackId, ssrc: u32, rtx: u32) -> SubscriptionSpec {
    SubscriptionSpec {
        track,
        mid: "0".into(),
        ssrc,
        rtx_ssrc: Some(rtx),
        payload_type: PT,
        rtx_payload_type: Some(RTX_PT),
        extensions: ExtensionIds::default(),
        feedback: nack_feedback(),
        cname: PUBLISHER_CNAME.into(),
        stream: None,
    }
}

/// Packet `i` of the publisher: its index and a pattern in the payload.
pub fn packet(i: u16) -> Bytes {
    let mut payload = BytesMut::new();
    payload.put_u16(i);
    for k in 0..(200 + usize::from(i % 700)) {
        payload.put_u8((usize::from(i) + k) as u8);
    }
    let mut out = BytesMut::new();
    let fields = RtpFields {
        marker: i % 5 == 4,
        payload_type: PT,
        sequence_number: i.wrapping_add(40_000),
        timestamp: u32::from(i / 5) * 3000,
        ssrc: 0xABCD,
    };
    let mut w = RtpWriter::new(&mut out, &fields, &[]);
    w.payload(&payload);
    w.finish(0);
    out.freeze()
}

/// The publisher (`cli(1)`) sends packet `i` of [`SOURCE`] now, and the sim runs one
/// [`INTERVAL`]: a 100-packet/s stream, one packet per call.
pub fn publish_packet(sim: &mut Sim, i: u16) {
    let now = sim.now();
    sim.shard_mut(cli(1))
        .send_rtp(now, SOURCE, packet(i))
        .unwrap();
    let _ = sim.run_for(INTERVAL);
}

/// Whether `p`'s payload is packet `i`'s, intact.
pub fn intact(p: &RtpPacket<'_>) -> Option<u16> {
    let payload = p.payload();
    let i = u16::from_be_bytes([*payload.first()?, *payload.get(1)?]);
    let want = packet(i);
    let want = RtpPacket::parse(&want).ok()?;
    (want.payload() == payload && p.header().payload_type == PT).then_some(i)
}

/// The server's SSRC and RTX SSRC for subscriber `i`.
pub fn subscriber_ssrcs(i: u64) -> (u32, u32) {
    (0x2000 + i as u32 * 2, 0x2001 + i as u32 * 2)
}

/// A server shard at SRV and client shards 1 (the publisher) to `1 + subscribers`,
/// every link `link` both ways, DTLS (and so SRTP) up everywhere, and the publisher's
/// video forwarded to every subscriber as negotiation would set it up.
pub fn media_sim(seed: u64, link: &LinkConfig, subscribers: u64) -> Sim {
    let mut sim = connected_sim(seed, link, subscribers);
    let last = 1 + subscribers;
    publish_source(&mut sim, cli(1), addr(SRV), TRACK);
    for i in 2..=last {
        subscribe_and_receive(
            &mut sim,
            addr(SRV),
            cli(i),
            PeerId(i),
            TRACK,
            subscriber_ssrcs(i),
        );
    }
    sim.drain_events().count();
    sim
}

/// What negotiation sets up for a publisher: `client` (peer 1) sends its local
/// source [`SOURCE`] on [`PUB_SSRC`] and [`PUB_RTX`], and `server` publishes it as
/// `track`.
pub fn publish_source(sim: &mut Sim, client: SocketAddr, server: SocketAddr, track: TrackId) {
    sim.command(
        client,
        Command::AddSource {
            peer: PeerId(1),
            track: track_spec(SOURCE, 0xABCD, 0xABCE),
            subscription: subscription(SOURCE, PUB_SSRC, PUB_RTX),
        },
    )
    .unwrap();
    sim.command(
        server,
        Command::Publish {
            peer: PeerId(1),
            track: track_spec(track, PUB_SSRC, PUB_RTX),
        },
    )
    .unwrap();
}

/// What negotiation sets up for one subscriber: the server shard `server` sends
/// `track` to `peer` on `ssrcs` (primary, RTX), and the peer's client shard `client`
/// receives it as [`RECEIVED`], reporting each packet.
pub fn subscribe_and_receive(
    sim: &mut Sim,
    server: SocketAddr,
    client: SocketAddr,
    peer: PeerId,
    track: TrackId,
    ssrcs: (u32, u32),
) {
    let (ssrc, rtx) = ssrcs;
    sim.command(
        server,
        Command::Subscribe {
            peer,
            subscription: subscription(track, ssrc, rtx),
        },
    )
    .unwrap();
    sim.command(
        client,
        Command::Receive {
            peer,
            track: track_spec(RECEIVED, ssrc, rtx),
        },
    )
    .unwrap();
}

/// The client index of a client shard's address.
pub fn cli_index(at: SocketAddr) -> u64 {
    match at.ip() {
        std::net::IpAddr::V4(v4) => u64::from(v4.octets()[3]),
        std::net::IpAddr::V6(_) => 0,
    }
}

/// A server shard at SRV and client shards 1 to `1 + subscribers`, every link
/// `link` both ways, and DTLS (and so SRTP) up everywhere.
pub fn connected_sim(seed: u64, link: &LinkConfig, subscribers: u64) -> Sim {
    let mut sim = Sim::new(seed);
    sim.add_shard(addr(SRV));
    let last = 1 + subscribers;
    for i in 1..=last {
        sim.add_shard(cli(i));
        sim.set_link_both(addr(SRV), cli(i), link.clone());
        sim.connect_dtls(addr(SRV), cli(i), PeerId(i), DtlsRole::Server)
            .unwrap();
    }
    sim.run_until(
        |s| {
            (1..=last).all(|i| {
                s.shard(cli(i)).dtls_connected(PeerId(i))
                    && s.shard(addr(SRV)).dtls_connected(PeerId(i))
            })
        },
        Duration::from_secs(60),
    )
    .unwrap_or_else(|e| panic!("seed {seed}: DTLS not up: {e}"));
    sim
}

/// A VP8 video track `id` on `ssrc` (and `rtx`), with NACK and PLI.
pub fn vp8_video(id: TrackId, ssrc: Option<u32>, rtx: Option<u32>) -> TrackSpec {
    TrackSpec {
        id,
        kind: TrackKind::Video,
        mid: "0".into(),
        ssrc,
        rtx_ssrc: rtx,
        payload_type: PT,
        rtx_payload_type: Some(RTX_PT),
        clock_rate: 90_000,
        extensions: ExtensionIds::default(),
        feedback: nack_feedback(),
        format: PayloadFormat::Vp8,
        layers: Vec::new(),
    }
}

/// A subscriber's downlink at `bps` for `seed`: 100 ms of queue, a one-way delay of
/// 10 to 50 ms, up to 3 ms of jitter, and random loss `loss` besides the queue's.
pub fn bottleneck(seed: u64, bps: u64, loss: f64) -> LinkConfig {
    LinkConfig {
        bandwidth_bps: Some(bps),
        queue_limit_bytes: (bps / 80) as usize,
        latency: Duration::from_millis(10 + seed * 7 % 41),
        jitter: Duration::from_millis(3),
        loss,
        ..LinkConfig::default()
    }
}

/// Sequence numbers a subscriber reported are one sequence: none twice, and more
/// than `share` of their span there; `report` words a failure.
pub fn assert_one_sequence(
    seqs: impl Iterator<Item = u64>,
    share: f64,
    report: impl Fn(&str) -> String,
) {
    let mut seqs: Vec<u64> = seqs.collect();
    seqs.sort_unstable();
    let reported = seqs.len();
    seqs.dedup();
    assert_eq!(
        seqs.len(),
        reported,
        "{}",
        report("a sequence number twice")
    );
    let span = seqs.last().unwrap() - seqs.first().unwrap() + 1;
    assert!(
        seqs.len() as f64 > share * span as f64,
        "{}",
        report(&format!("{} packets over {span} numbers", seqs.len()))
    );
}

/// A VP8 packet's payload descriptor (RFC 7741 §4.2) and what follows it and, on a
/// frame's first packet, its payload header (RFC 6386 §9.1: 10 bytes on a key
/// frame, 3 on another).
pub fn vp8_body(payload: &[u8]) -> (Vp8Descriptor, &[u8]) {
    let d = Vp8Descriptor::parse(payload).expect("a VP8 descriptor");
    let header = match (payload[0] & 0x10 != 0, payload.get(d.len)) {
        (true, Some(tag)) if tag & 1 == 0 => 10,
        (true, _) => 3,
        _ => 0,
    };
    (d, &payload[d.len + header..])
}
