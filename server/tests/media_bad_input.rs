//! Bad input at the media port, in the simulated network, while a publisher's video
//! flows through shoal to two subscribers: random bytes with an RTP or RTCP first
//! byte, truncated packets, SRTP under keys shoal never agreed, RTP under the right
//! keys from an SSRC no track has, and datagrams from an address no peer owns. Each
//! is dropped and counted under its own counter, nothing panics, and every real
//! packet still reaches both subscribers intact.

mod media_sim;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use media_sim::{
    INTERVAL, PUB_RTX, SOURCE, SRV, addr, cli, cli_index, intact, media_sim, packet, subscription,
    track_spec,
};
use shoal_components::media::TrackId;
use shoal_components::net::Datagram;
use shoal_components::peer::PeerId;
use shoal_components::rtp::RtpPacket;
use shoal_components::srtp::{SrtpConfig, SrtpOutbound, SrtpProfile};
use shoal_components::tick::ShardEvent;
use shoal_server::sim::{LinkConfig, Sim};
use shoal_systems::Command;

/// Real packets the publisher sends.
const REAL: u16 = 300;
/// A local source on the publisher whose SSRC shoal knows nothing of.
const STRAY: TrackId = TrackId(9);
const STRAY_SSRC: u32 = 0x9999;

/// A datagram from `from` to the server shard.
fn to_server(from: SocketAddr, payload: Vec<u8>) -> Datagram {
    Datagram {
        local: from,
        remote: addr(SRV),
        payload: Bytes::from(payload),
    }
}

/// Kinds of bad input, each `(what, datagram)`.
fn bad_input(sim: &mut Sim, n: u64, forger: &mut SrtpOutbound) -> Vec<Datagram> {
    let mut random = |len: usize| -> Vec<u8> {
        (0..len)
            .map(|_| (sim.rng().next_u64() & 0xff) as u8)
            .collect()
    };
    let len = 1 + (n as usize * 131) % 1400;
    let mut rtp = random(len);
    rtp[0] = 0x80 | (rtp[0] & 0x3f);
    let mut rtcp = random(8 + len % 200);
    rtcp[0] = 0x81;
    rtcp[1] = 200 + (n % 8) as u8;
    let truncated = vec![0x80, 96, 0, 1, 0, 0];
    // A well-formed packet, sealed under keys of the right profile that shoal never
    // agreed on.
    let mut forged = BytesMut::from(&packet(n as u16)[..]);
    forger
        .protect_rtp_tail(&mut forged, 0)
        .expect("the forger's own context seals");
    let mut foreign = random(64);
    foreign[0] = 0x80;
    let publisher = cli(1);
    vec![
        to_server(publisher, rtp),
        to_server(publisher, rtcp),
        to_server(publisher, truncated),
        to_server(publisher, forged.to_vec()),
        // RTP-looking, from an address no peer owns.
        to_server("10.9.9.9:4000".parse().unwrap(), foreign),
    ]
}

#[test]
fn media_bad_input() {
    let link = LinkConfig::lossy(Duration::from_millis(10), 0.0);
    let mut sim = media_sim(11, &link, 2);
    // A second source on the publisher, under the session's real keys, with an SSRC
    // no track has.
    let mut stray_spec = track_spec(STRAY, 0x7777, 0x7778);
    stray_spec.ssrc = Some(0x7777);
    let mut stray_sub = subscription(STRAY, STRAY_SSRC, PUB_RTX + 100);
    stray_sub.rtx_ssrc = None;
    stray_sub.rtx_payload_type = None;
    sim.command(
        cli(1),
        Command::AddSource {
            peer: PeerId(1),
            track: stray_spec,
            subscription: stray_sub,
        },
    )
    .unwrap();
    let mut forger = SrtpOutbound::new(
        SrtpProfile::AeadAes128Gcm,
        &[0x42; 16],
        &[0x24; 12],
        SrtpConfig::default(),
    )
    .unwrap();

    let mut got: [BTreeSet<u16>; 2] = Default::default();
    let mut corrupt = 0;
    let mut injected_srtp = 0u64;
    let mut injected_foreign = 0u64;
    let mut stray_sent = 0u64;
    for i in 0..REAL {
        let now = sim.now();
        sim.shard_mut(cli(1))
            .send_rtp(now, SOURCE, packet(i))
            .unwrap();
        if i % 3 == 0 {
            for d in bad_input(&mut sim, u64::from(i), &mut forger) {
                if d.local == cli(1) {
                    injected_srtp += 1;
                } else {
                    injected_foreign += 1;
                }
                sim.inject(d);
            }
            sim.shard_mut(cli(1))
                .send_rtp(now, STRAY, packet(i))
                .unwrap();
            stray_sent += 1;
        }
        let _ = sim.run_for(INTERVAL);
        for (at, event) in sim.drain_events() {
            if let ShardEvent::RtpReceived { packet, .. } = event {
                match RtpPacket::parse(&packet).ok().as_ref().and_then(intact) {
                    Some(n) => {
                        got[(cli_index(at) - 2) as usize].insert(n);
                    }
                    None => corrupt += 1,
                }
            }
        }
    }
    let _ = sim.run_for(Duration::from_secs(1));
    for (at, event) in sim.drain_events() {
        if let ShardEvent::RtpReceived { packet, .. } = event
            && let Some(n) = RtpPacket::parse(&packet).ok().as_ref().and_then(intact)
        {
            got[(cli_index(at) - 2) as usize].insert(n);
        }
    }

    let stats = sim.shard(addr(SRV)).stats().clone();
    assert_eq!(corrupt, 0);
    for (k, g) in got.iter().enumerate() {
        assert_eq!(
            g.len(),
            usize::from(REAL),
            "subscriber {} lost real packets: {stats:?}",
            k + 2
        );
    }
    // Every bad SRTP/SRTCP datagram failed to authenticate (or, a lone byte, was too
    // short to tell RTP from RTCP): none was taken for media.
    assert_eq!(
        stats.srtp_unprotect_failed + stats.media_malformed,
        injected_srtp,
        "{stats:?}"
    );
    assert_eq!(stats.rtp_unknown_ssrc, stray_sent, "{stats:?}");
    assert_eq!(stats.dropped_unknown_source, injected_foreign, "{stats:?}");
    assert_eq!(stats.rtp_received, u64::from(REAL), "{stats:?}");
}
