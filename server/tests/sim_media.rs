//! Media through shoal in the simulated network, end to end over SRTP: client
//! endpoints built from the same passes publish a local source and receive tracks,
//! and the server shard forwards between them.
//!
//! `sim_media_fanout_nack_recovers`: one publisher and three subscribers, every link
//! losing 5 % of its datagrams both ways (so NACKs, retransmissions and reports are
//! lost too) with 20 ms of latency. shoal NACKs the publisher for what it misses and
//! answers the subscribers' NACKs from its cache as RTX; each subscriber must end with
//! at least 99.5 % of the packets sent, every one intact, and sequence numbers that
//! follow the publisher's one for one (a constant offset: RFC 3550 §5.1 continuity).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use shoal_components::media::{
    ExtensionIds, FeedbackKinds, SubscriptionSpec, TrackId, TrackKind, TrackSpec,
};
use shoal_components::peer::PeerId;
use shoal_components::rtp::{RtpFields, RtpPacket, RtpWriter};
use shoal_components::tick::ShardEvent;
use shoal_server::sim::{LinkConfig, Sim};
use shoal_systems::Command;
use shoal_systems::dtls::DtlsRole;

const SRV: &str = "10.0.0.1:7100";
/// Payload types as negotiated: VP8 and its RTX (RFC 4588).
const PT: u8 = 96;
const RTX_PT: u8 = 97;
/// The publisher's SSRCs on the wire.
const PUB_SSRC: u32 = 0x1000;
const PUB_RTX: u32 = 0x1001;
/// The server's track id and the clients' ids for their streams.
const TRACK: TrackId = TrackId(7);
const SOURCE: TrackId = TrackId(1);
const RECEIVED: TrackId = TrackId(2);
/// Packets the publisher sends: 100 a second for 10 s.
const PACKETS: u16 = 1000;
const INTERVAL: Duration = Duration::from_millis(10);

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn cli(i: u64) -> SocketAddr {
    SocketAddr::from(([10, 0, 1, i as u8], 50_000))
}

fn nack_feedback() -> FeedbackKinds {
    FeedbackKinds {
        nack: true,
        pli: true,
        fir: false,
    }
}

/// A video stream as the publisher's negotiation describes it.
fn track_spec(id: TrackId, ssrc: u32, rtx: u32) -> TrackSpec {
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
    }
}

/// A stream as the receiving side's negotiation describes it.
fn subscription(track: TrackId, ssrc: u32, rtx: u32) -> SubscriptionSpec {
    SubscriptionSpec {
        track,
        mid: "0".into(),
        ssrc,
        rtx_ssrc: Some(rtx),
        payload_type: PT,
        rtx_payload_type: Some(RTX_PT),
        extensions: ExtensionIds::default(),
        feedback: nack_feedback(),
    }
}

/// Packet `i` of the publisher: its index and a pattern in the payload.
fn packet(i: u16) -> Bytes {
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

/// Whether `p`'s payload is packet `i`'s, intact.
fn intact(p: &RtpPacket<'_>) -> Option<u16> {
    let payload = p.payload();
    let i = u16::from_be_bytes([*payload.first()?, *payload.get(1)?]);
    let want = packet(i);
    let want = RtpPacket::parse(&want).ok()?;
    (want.payload() == payload && p.header().payload_type == PT).then_some(i)
}

fn run(seed: u64) {
    let mut sim = Sim::new(seed);
    sim.add_shard(addr(SRV));
    let link = LinkConfig::lossy(Duration::from_millis(20), 0.05);
    for i in 1..=4 {
        sim.add_shard(cli(i));
        sim.set_link_both(addr(SRV), cli(i), link.clone());
        sim.connect_dtls(addr(SRV), cli(i), PeerId(i), DtlsRole::Server)
            .unwrap();
    }
    sim.run_until(
        |s| {
            (1..=4).all(|i| {
                s.shard(cli(i)).dtls_connected(PeerId(i))
                    && s.shard(addr(SRV)).dtls_connected(PeerId(i))
            })
        },
        Duration::from_secs(60),
    )
    .unwrap_or_else(|e| panic!("seed {seed}: DTLS not up: {e}"));

    // What negotiation would have set up: the publisher's source goes to the server
    // as PUB_SSRC; the server sends each subscriber its own SSRCs.
    sim.command(
        cli(1),
        Command::AddSource {
            peer: PeerId(1),
            track: track_spec(SOURCE, 0xABCD, 0xABCE),
            subscription: subscription(SOURCE, PUB_SSRC, PUB_RTX),
        },
    )
    .unwrap();
    sim.command(
        addr(SRV),
        Command::Publish {
            peer: PeerId(1),
            track: track_spec(TRACK, PUB_SSRC, PUB_RTX),
        },
    )
    .unwrap();
    for i in 2..=4u64 {
        let (ssrc, rtx) = (0x2000 + i as u32 * 2, 0x2001 + i as u32 * 2);
        sim.command(
            addr(SRV),
            Command::Subscribe {
                peer: PeerId(i),
                subscription: subscription(TRACK, ssrc, rtx),
            },
        )
        .unwrap();
        sim.command(
            cli(i),
            Command::Receive {
                peer: PeerId(i),
                track: track_spec(RECEIVED, ssrc, rtx),
            },
        )
        .unwrap();
    }
    sim.drain_events().count();

    // subscriber → (publisher index → the sequence number it arrived with)
    let mut got: BTreeMap<u64, BTreeMap<u16, u64>> = BTreeMap::new();
    let mut corrupt = 0;
    let mut keyframe_requests = 0;
    let mut collect = |sim: &mut Sim, got: &mut BTreeMap<u64, BTreeMap<u16, u64>>| {
        for (at, event) in sim.drain_events() {
            match event {
                ShardEvent::RtpReceived { packet, seq, .. } => {
                    let i = cli_index(at);
                    match RtpPacket::parse(&packet).ok().as_ref().and_then(intact) {
                        Some(n) => {
                            let previous = got.entry(i).or_default().insert(n, seq);
                            assert!(previous.is_none(), "seed {seed}: {i} got {n} twice");
                        }
                        None => corrupt += 1,
                    }
                }
                ShardEvent::KeyframeRequested { .. } => keyframe_requests += 1,
                _ => {}
            }
        }
    };
    for i in 0..PACKETS {
        let now = sim.now();
        sim.shard_mut(cli(1))
            .send_rtp(now, SOURCE, packet(i))
            .unwrap();
        let _ = sim.run_for(INTERVAL);
        collect(&mut sim, &mut got);
    }
    // Time for the last retransmissions.
    let _ = sim.run_for(Duration::from_secs(2));
    collect(&mut sim, &mut got);

    assert_eq!(corrupt, 0, "seed {seed}: packets arrived damaged");
    for i in 2..=4u64 {
        let received = got.get(&i).map_or(0, BTreeMap::len);
        assert!(
            received * 1000 >= usize::from(PACKETS) * 995,
            "seed {seed}: subscriber {i} got {received} of {PACKETS}; server {:?}",
            sim.shard(addr(SRV)).stats()
        );
        // Continuity: the subscriber's (extended) sequence number is the publisher's
        // index plus one constant.
        let offsets: std::collections::BTreeSet<i64> = got[&i]
            .iter()
            .map(|(n, seq)| *seq as i64 - i64::from(*n))
            .collect();
        assert_eq!(
            offsets.len(),
            1,
            "seed {seed}: subscriber {i}'s sequence jumps: {offsets:?}"
        );
    }
    let stats = sim.shard(addr(SRV)).stats().clone();
    assert!(
        stats.nacks_sent > 0,
        "seed {seed}: loss on the publisher's link was NACKed"
    );
    assert!(
        stats.rtp_retransmitted > 0,
        "seed {seed}: subscribers' NACKs answered"
    );
    assert_eq!(stats.srtp_unprotect_failed, 0, "seed {seed}: {stats:?}");
    // Each subscription asked the publisher for a keyframe once it started.
    assert!(
        keyframe_requests >= 1,
        "seed {seed}: no keyframe request reached the publisher"
    );
}

fn cli_index(at: SocketAddr) -> u64 {
    match at.ip() {
        std::net::IpAddr::V4(v4) => u64::from(v4.octets()[3]),
        std::net::IpAddr::V6(_) => 0,
    }
}

#[test]
fn sim_media_fanout_nack_recovers() {
    for seed in 0..8 {
        run(seed);
    }
}
