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

mod media_sim;

use std::collections::BTreeMap;
use std::time::Duration;

use media_sim::{PACKETS, SRV, addr, cli, cli_index, intact, media_sim, publish_packet};
use shoal_components::rtp::RtpPacket;
use shoal_components::tick::ShardEvent;
use shoal_server::sim::{LinkConfig, Sim};

fn run(seed: u64) {
    let link = LinkConfig::lossy(Duration::from_millis(20), 0.05);
    let mut sim = media_sim(seed, &link, 3);

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
        publish_packet(&mut sim, i);
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

#[test]
fn sim_media_fanout_nack_recovers() {
    for seed in 0..8 {
        run(seed);
    }
}

/// A subscription made before its subscriber can receive (a WHEP answer, a newcomer's
/// own answer) asks the publisher for its keyframe once the subscriber's DTLS-SRTP is
/// up, not before: a keyframe sent earlier would reach no one.
#[test]
fn a_subscriber_that_connects_later_gets_its_keyframe_request_then() {
    use shoal_components::dtls::DtlsRole;
    use shoal_components::peer::PeerId;
    use shoal_systems::Command;

    let link = LinkConfig::lossy(Duration::from_millis(20), 0.0);
    let mut sim = media_sim(3, &link, 0);
    sim.add_shard(cli(2));
    sim.set_link_both(addr(SRV), cli(2), link);
    sim.connect_dtls(addr(SRV), cli(2), PeerId(2), DtlsRole::Server)
        .unwrap();
    let (ssrc, rtx) = media_sim::subscriber_ssrcs(2);
    sim.command(
        addr(SRV),
        Command::Subscribe {
            peer: PeerId(2),
            subscription: media_sim::subscription(media_sim::TRACK, ssrc, rtx),
        },
    )
    .unwrap();
    let mut requests = Vec::new();
    for i in 0..200u16 {
        publish_packet(&mut sim, i);
        let connected = sim.shard(addr(SRV)).dtls_connected(PeerId(2));
        for (_, event) in sim.drain_events() {
            if let ShardEvent::KeyframeRequested { .. } = event {
                requests.push(connected);
            }
        }
    }
    assert!(!requests.is_empty(), "no keyframe was requested");
    assert!(
        requests.iter().all(|connected| *connected),
        "a keyframe was requested before the subscriber could receive it: {requests:?}"
    );
}

/// webrtc's abs-capture-time: a publisher's capture timestamp reaches every subscriber
/// that negotiated the extension, under that subscriber's own id, in the 8-byte form;
/// a subscriber that did not negotiate it gets no such element.
#[test]
fn the_capture_time_is_carried_over_to_subscribers() {
    use bytes::BytesMut;
    use shoal_components::media::ExtensionIds;
    use shoal_components::peer::PeerId;
    use shoal_components::rtp::{RtpFields, RtpWriter};
    use shoal_systems::Command;

    const PUBLISHER_ID: u8 = 3;
    const SUBSCRIBER_ID: u8 = 9;
    let capture = |i: u16| 0x1234_5678_0000_0000u64 + u64::from(i) * 0x0100_0000;
    let with_capture = |id| ExtensionIds {
        abs_capture_time: Some(id),
        ..ExtensionIds::default()
    };
    let link = LinkConfig::lossy(Duration::from_millis(5), 0.0);
    let mut sim = media_sim::connected_sim(11, &link, 2);
    let mut source = media_sim::track_spec(media_sim::SOURCE, 0xABCD, 0xABCE);
    source.extensions = with_capture(PUBLISHER_ID);
    let mut outbound =
        media_sim::subscription(media_sim::SOURCE, media_sim::PUB_SSRC, media_sim::PUB_RTX);
    outbound.extensions = with_capture(PUBLISHER_ID);
    sim.command(
        cli(1),
        Command::AddSource {
            peer: PeerId(1),
            track: source,
            subscription: outbound,
        },
    )
    .unwrap();
    let mut published =
        media_sim::track_spec(media_sim::TRACK, media_sim::PUB_SSRC, media_sim::PUB_RTX);
    published.extensions = with_capture(PUBLISHER_ID);
    sim.command(
        addr(SRV),
        Command::Publish {
            peer: PeerId(1),
            track: published,
        },
    )
    .unwrap();
    for i in 2..=3u64 {
        let (ssrc, rtx) = media_sim::subscriber_ssrcs(i);
        let mut sub = media_sim::subscription(media_sim::TRACK, ssrc, rtx);
        if i == 2 {
            sub.extensions = with_capture(SUBSCRIBER_ID);
        }
        sim.command(
            addr(SRV),
            Command::Subscribe {
                peer: PeerId(i),
                subscription: sub,
            },
        )
        .unwrap();
        sim.command(
            cli(i),
            Command::Receive {
                peer: PeerId(i),
                track: media_sim::track_spec(media_sim::RECEIVED, ssrc, rtx),
            },
        )
        .unwrap();
    }
    for i in 0..50u16 {
        let plain = media_sim::packet(i);
        let p = RtpPacket::parse(&plain).unwrap();
        let mut out = BytesMut::new();
        let fields = RtpFields {
            marker: p.header().marker,
            payload_type: p.header().payload_type,
            sequence_number: p.header().sequence_number,
            timestamp: p.header().timestamp,
            ssrc: p.header().ssrc,
        };
        let mut w = RtpWriter::new(&mut out, &fields, &[]);
        w.extension(PUBLISHER_ID, &capture(i).to_be_bytes())
            .unwrap();
        w.payload(p.payload());
        w.finish(0);
        let now = sim.now();
        sim.shard_mut(cli(1))
            .send_rtp(now, media_sim::SOURCE, out.freeze())
            .unwrap();
        let _ = sim.run_for(media_sim::INTERVAL);
    }
    let _ = sim.run_for(Duration::from_millis(200));
    let mut seen = BTreeMap::<u64, Vec<(u16, Option<Vec<u8>>)>>::new();
    for (at, event) in sim.drain_events() {
        if let ShardEvent::RtpReceived { packet, .. } = event {
            let p = RtpPacket::parse(&packet).unwrap();
            let n = intact(&p).expect("intact");
            let element = p.extension(SUBSCRIBER_ID).map(<[u8]>::to_vec);
            seen.entry(cli_index(at)).or_default().push((n, element));
        }
    }
    assert_eq!(seen.get(&2).map(Vec::len), Some(50), "{seen:?}");
    assert_eq!(seen.get(&3).map(Vec::len), Some(50), "{seen:?}");
    for (n, element) in &seen[&2] {
        assert_eq!(element.as_deref(), Some(&capture(*n).to_be_bytes()[..]));
    }
    assert!(seen[&3].iter().all(|(_, e)| e.is_none()), "{:?}", seen[&3]);
}

/// A publisher hands a whole frame's packets in at once (`Shard::send_rtp_batch`):
/// they go out in one tick, and every subscriber gets every packet intact, once, in
/// sequence, as with one call per packet. A packet the shard refuses stops the
/// batch there, after those before it went out.
#[test]
fn a_frame_handed_in_at_once_reaches_every_subscriber() {
    const FRAMES: u16 = 40;
    const PER_FRAME: u16 = 5;
    let link = LinkConfig::lossy(Duration::from_millis(20), 0.0);
    let mut sim = media_sim(11, &link, 3);
    let mut got: BTreeMap<u64, Vec<(u16, u64)>> = BTreeMap::new();
    let collect = |sim: &mut Sim, got: &mut BTreeMap<u64, Vec<(u16, u64)>>| {
        for (at, event) in sim.drain_events() {
            if let ShardEvent::RtpReceived { packet, seq, .. } = event {
                let n = RtpPacket::parse(&packet)
                    .ok()
                    .as_ref()
                    .and_then(intact)
                    .expect("intact");
                got.entry(cli_index(at)).or_default().push((n, seq));
            }
        }
    };
    for f in 0..FRAMES {
        let now = sim.now();
        let out_before = sim.shard(cli(1)).stats().datagrams_out;
        let packets = (0..PER_FRAME).map(|k| media_sim::packet(f * PER_FRAME + k));
        let taken = sim
            .shard_mut(cli(1))
            .send_rtp_batch(now, media_sim::SOURCE, packets)
            .expect("the frame is taken");
        assert_eq!(taken, usize::from(PER_FRAME));
        // Written out in the call's one tick, not one tick per packet later.
        let out = sim.shard(cli(1)).stats().datagrams_out - out_before;
        assert!(
            out >= u64::from(PER_FRAME),
            "frame {f}: {out} datagrams out of the call"
        );
        let _ = sim.run_for(media_sim::INTERVAL * 3);
        collect(&mut sim, &mut got);
    }
    let _ = sim.run_for(Duration::from_millis(500));
    collect(&mut sim, &mut got);
    for i in 2..=4u64 {
        let seen = &got[&i];
        let indices: Vec<u16> = seen.iter().map(|(n, _)| *n).collect();
        assert_eq!(
            indices,
            (0..FRAMES * PER_FRAME).collect::<Vec<_>>(),
            "subscriber {i}: every packet once, in order"
        );
        assert!(
            seen.windows(2).all(|w| w[1].1 == w[0].1 + 1),
            "subscriber {i}: sequence numbers run on"
        );
    }
    // A malformed packet in the middle: the one before it goes, the rest do not.
    let now = sim.now();
    let n = FRAMES * PER_FRAME;
    let refused = sim.shard_mut(cli(1)).send_rtp_batch(
        now,
        media_sim::SOURCE,
        [
            media_sim::packet(n),
            bytes::Bytes::from_static(b"no"),
            media_sim::packet(n + 1),
        ],
    );
    assert!(refused.is_err(), "{refused:?}");
    let _ = sim.run_for(Duration::from_millis(200));
    collect(&mut sim, &mut got);
    for i in 2..=4u64 {
        let last: Vec<u16> = got[&i]
            .iter()
            .map(|(n, _)| *n)
            .skip(usize::from(n))
            .collect();
        assert_eq!(
            last,
            vec![n],
            "subscriber {i}: only the packet before the refused one"
        );
    }
}
