//! Bounds on what the media pass sends, in the simulated network: RTCP is not sent per
//! packet for a track without PLI, one NACK cannot make shoal retransmit more than a
//! small budget, a subscriber's SRTP context does not run out of SSRCs as
//! subscriptions come and go, and a subscription re-made on the same SSRC keeps
//! forwarding.

mod media_sim;

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use media_sim::{
    PUB_RTX, PUB_SSRC, SRV, TRACK, addr, cli, media_sim, nack_feedback, publish_packet,
    subscriber_ssrcs, subscription, track_spec,
};
use shoal_components::dtls::DtlsRole;
use shoal_components::media::{FeedbackKinds, TrackId};
use shoal_components::net::Datagram;
use shoal_components::peer::PeerId;
use shoal_components::rtcp::{Nack, NackEntry, ReceiverReport, ReportBlock, WriteRtcp};
use shoal_components::srtp::{SrtpConfig, SrtpSession};
use shoal_components::tick::ShardEvent;
use shoal_server::sim::{LinkConfig, Sim};
use shoal_systems::Command;

/// Like `media_sim`, but the server's track is published with `feedback` (what the
/// publisher's negotiation agreed), e.g. an Opus track: Chromium offers no
/// `nack pli` for audio.
fn sim_with_publisher_feedback(seed: u64, subscribers: u64, feedback: FeedbackKinds) -> Sim {
    let link = LinkConfig::lossy(Duration::from_millis(10), 0.0);
    let mut sim = media_sim(seed, &link, subscribers);
    // Re-publish the server's track with the given feedback.
    sim.command(
        addr(SRV),
        Command::Unpublish {
            peer: PeerId(1),
            track: TRACK,
        },
    )
    .unwrap();
    let mut spec = track_spec(TRACK, PUB_SSRC, PUB_RTX);
    spec.feedback = feedback;
    sim.command(
        addr(SRV),
        Command::Publish {
            peer: PeerId(1),
            track: spec,
        },
    )
    .unwrap();
    // The old subscriptions went with the track; their SSRCs are retired.
    for i in 2..=1 + subscribers {
        let (ssrc, rtx) = subscriber_ssrcs(i);
        sim.command(
            addr(SRV),
            Command::Subscribe {
                peer: PeerId(i),
                subscription: subscription(TRACK, ssrc + 100, rtx + 100),
            },
        )
        .unwrap();
    }
    sim
}

/// RTCP compounds the server sent, and RTP packets it received, over 5 s of a
/// 100-packet/s publisher whose track has `feedback`.
fn rtcp_over_five_seconds(feedback: FeedbackKinds) -> (u64, u64) {
    let mut sim = sim_with_publisher_feedback(3, 2, feedback);
    let before = sim.shard(addr(SRV)).stats().clone();
    for i in 0..500u16 {
        publish_packet(&mut sim, i);
        sim.drain_events().count();
    }
    let after = sim.shard(addr(SRV)).stats().clone();
    (
        after.rtcp_sent - before.rtcp_sent,
        after.rtp_received - before.rtp_received,
    )
}

/// A track whose publisher did not negotiate `nack pli` (every Opus track Chromium
/// publishes) gets no keyframe requests, and so its reports stay timed: about one RR
/// a second to the publisher and one SR a second per subscriber (RFC 3550 §6.2, RFC
/// 4585 §3.4), not one compound per packet.
#[test]
fn no_rtcp_per_packet_for_tracks_without_pli() {
    let (rtcp, received) = rtcp_over_five_seconds(FeedbackKinds {
        nack: true,
        pli: false,
        fir: false,
        transport_cc: false,
        remb: false,
    });
    assert!(
        rtcp <= 5 * 3 * 2,
        "{rtcp} RTCP compounds sent for {received} RTP packets received in 5 s"
    );
}

/// The same with `nack pli` negotiated: the subscriptions' keyframe requests add a
/// PLI or two, nothing per packet.
#[test]
fn rtcp_rate_with_pli() {
    let (rtcp, _) = rtcp_over_five_seconds(nack_feedback());
    assert!(rtcp <= 5 * 3 * 2, "{rtcp} RTCP compounds");
}

/// An SRTCP datagram from subscriber `i` (the DTLS client), sealed with its real keys
/// under a sender SSRC of our own, carrying `body`.
fn forged_rtcp(sim: &Sim, i: u64, sender_ssrc: u32, body: &mut BytesMut) -> Datagram {
    let keys = sim.shard(cli(i)).srtp_keys(PeerId(i)).expect("keys");
    let mut session = SrtpSession::new(&keys, DtlsRole::Client, SrtpConfig::default()).unwrap();
    let _ = sender_ssrc;
    session.outbound.protect_rtcp_tail(body, 0).unwrap();
    Datagram {
        local: cli(i),
        remote: addr(SRV),
        payload: Bytes::from(body.to_vec()),
    }
}

/// One ~1.2 kB SRTCP packet from an authenticated subscriber: a NACK whose 290 FCI
/// entries all name the same 17 packets. `on_rtcp` neither deduplicates nor bounds
/// what it queues, so shoal encrypts and sends one RTX packet per named sequence
/// number: about 4900 packets (several megabytes) for one small datagram. RFC 4585
/// §3.2/§6.2.1 feedback is a hint; a sender may and should rate-limit what it repairs.
#[test]
fn one_nack_packet_does_not_trigger_thousands_of_retransmissions() {
    let link = LinkConfig::lossy(Duration::from_millis(10), 0.0);
    let mut sim = media_sim(5, &link, 1);
    let mut last_seq = None;
    for i in 0..200u16 {
        publish_packet(&mut sim, i);
        for (_, e) in sim.drain_events() {
            if let ShardEvent::RtpReceived { seq, .. } = e {
                last_seq = Some(seq);
            }
        }
    }
    let last = last_seq.expect("the subscriber got media") as u16;
    let (sub_ssrc, _) = subscriber_ssrcs(2);
    let entries: Vec<NackEntry> = (0..290)
        .map(|_| NackEntry {
            pid: last.wrapping_sub(40),
            blp: 0xffff,
        })
        .collect();
    let mut body = BytesMut::new();
    ReceiverReport {
        ssrc: 0x4242_4242,
        reports: &[] as &[ReportBlock],
        extension: Bytes::new(),
    }
    .write_to(&mut body);
    Nack {
        sender_ssrc: 0x4242_4242,
        media_ssrc: sub_ssrc,
        entries: entries.as_slice(),
    }
    .write_to(&mut body);
    let wire = forged_rtcp(&sim, 2, 0x4242_4242, &mut body);
    let wire_len = wire.payload.len();
    let before = sim.shard(addr(SRV)).stats().clone();
    sim.inject(wire);
    let _ = sim.run_for(Duration::from_millis(50));
    let after = sim.shard(addr(SRV)).stats().clone();
    let resent = after.rtp_retransmitted - before.rtp_retransmitted;
    assert!(
        resent <= 17,
        "one {wire_len}-byte NACK made shoal retransmit {resent} packets"
    );
}

/// A subscriber's outbound SRTP context keeps state for every SSRC it ever sent
/// (`SrtpConfig::default().max_ssrcs` = 128) and nothing calls `forget_ssrc` when a
/// subscription ends; negotiation gives every new subscription fresh SSRCs. So after
/// ~128 subscriptions over a session's life (people joining and leaving a room), every
/// new subscription of that participant silently fails to send
/// (`media_send_failed`). `MAX_SUBSCRIPTIONS_PER_PEER` is 128 concurrent, and a video
/// subscription with RTX uses two SSRCs, so even 65 concurrent ones break.
#[test]
fn subscription_churn_does_not_exhaust_the_srtp_context() {
    let link = LinkConfig::lossy(Duration::from_millis(5), 0.0);
    let mut sim = media_sim(6, &link, 1);
    let mut n = 0u16;
    let mut send = |sim: &mut Sim, k: u16| {
        for _ in 0..k {
            publish_packet(sim, n);
            n = n.wrapping_add(1);
            sim.drain_events().count();
        }
    };
    send(&mut sim, 3);
    // The participant's session: 140 subscriptions one after the other, as a room
    // with churn would give it, each with the fresh SSRCs negotiation picks.
    for k in 0..140u32 {
        sim.command(
            addr(SRV),
            Command::Unsubscribe {
                peer: PeerId(2),
                track: TRACK,
            },
        )
        .unwrap();
        let mut s = subscription(TRACK, 0x9000_0000 + 2 * k, 0x9000_0001 + 2 * k);
        s.rtx_ssrc = None;
        s.rtx_payload_type = None;
        sim.command(
            addr(SRV),
            Command::Subscribe {
                peer: PeerId(2),
                subscription: s,
            },
        )
        .unwrap();
        send(&mut sim, 2);
    }
    let before = sim.shard(addr(SRV)).stats().clone();
    send(&mut sim, 20);
    let after = sim.shard(addr(SRV)).stats().clone();
    let forwarded = after.rtp_forwarded - before.rtp_forwarded;
    let failed = after.media_send_failed - before.media_send_failed;
    assert_eq!(
        (forwarded, failed),
        (20, 0),
        "the 140th subscription: forwarded {forwarded}, failed {failed}"
    );
    let _ = TrackId(0);
}

/// An ended subscription's SSRC is not sent with again: `Subscribe` on it is refused
/// (its SRTP indices would start over under the same keys, repeating keystream or GCM
/// nonces), and a subscription on a fresh SSRC forwards at once.
#[test]
fn a_retired_ssrc_is_not_reused() {
    let link = LinkConfig::lossy(Duration::from_millis(5), 0.0);
    let mut sim = media_sim(7, &link, 1);
    let (ssrc, rtx) = subscriber_ssrcs(2);
    sim.command(
        addr(SRV),
        Command::Unsubscribe {
            peer: PeerId(2),
            track: TRACK,
        },
    )
    .unwrap();
    assert_eq!(
        sim.command(
            addr(SRV),
            Command::Subscribe {
                peer: PeerId(2),
                subscription: subscription(TRACK, ssrc, rtx),
            },
        ),
        Err(shoal_systems::CommandError::SsrcRetired(ssrc))
    );
    sim.command(
        addr(SRV),
        Command::Subscribe {
            peer: PeerId(2),
            subscription: subscription(TRACK, ssrc + 100, rtx + 100),
        },
    )
    .unwrap();
    let before = sim.shard(addr(SRV)).stats().clone();
    for n in 0..20 {
        publish_packet(&mut sim, n);
        sim.drain_events().count();
    }
    let after = sim.shard(addr(SRV)).stats().clone();
    assert_eq!(after.rtp_forwarded - before.rtp_forwarded, 20);
    assert_eq!(after.media_send_failed, before.media_send_failed);
}

/// Reports stop with the stream (RFC 3550 §6.4: report blocks cover sources heard
/// from since the last report; an SR reports a sender): once the publisher falls
/// silent, shoal soon sends neither RR nor SR for it.
#[test]
fn reports_stop_when_the_stream_does() {
    let link = LinkConfig::lossy(Duration::from_millis(10), 0.0);
    let mut sim = media_sim(5, &link, 2);
    for i in 0..200u16 {
        publish_packet(&mut sim, i);
    }
    let sent = sim.shard(addr(SRV)).stats().rtcp_sent;
    assert!(sent > 0, "reports while the stream flowed");
    // Two report intervals for the last reports to go, then quiet.
    let _ = sim.run_for(Duration::from_secs(3));
    let settled = sim.shard(addr(SRV)).stats().rtcp_sent;
    let _ = sim.run_for(Duration::from_secs(5));
    assert_eq!(
        sim.shard(addr(SRV)).stats().rtcp_sent,
        settled,
        "RTCP kept going for a silent stream"
    );
}

/// Every compound shoal sends carries an SDES CNAME right after its report (RFC 3550
/// §6.1): the RRs, NACKs and PLIs to the publisher name shoal's own SSRC for that
/// session with one 32-hex-digit name (128 random bits), and the SRs to a subscriber name the SSRC it
/// sends with by the CNAME its SDP announced (the publisher's stream id).
#[test]
fn every_rtcp_compound_carries_an_sdes_cname() {
    use std::cell::RefCell;
    use std::rc::Rc;

    use shoal_components::rtcp::{Compound, RtcpBody};

    // Loss on the publisher's link makes NACKs, and the start a PLI.
    let link = LinkConfig::lossy(Duration::from_millis(10), 0.05);
    let mut sim = media_sim(11, &link, 1);
    let captured: Rc<RefCell<Vec<(u64, Vec<u8>)>>> = Rc::default();
    for i in [1u64, 2] {
        let c = captured.clone();
        sim.set_drop_filter(
            addr(SRV),
            cli(i),
            Some(Box::new(move |_, payload: &[u8]| {
                // RTCP by its packet type (RFC 5761 §4): 192–223 in the second byte.
                if payload.len() > 1 && (192..=223).contains(&payload[1]) && payload[0] >> 6 == 2 {
                    c.borrow_mut().push((i, payload.to_vec()));
                }
                false
            })),
        );
    }
    for i in 0..300u16 {
        publish_packet(&mut sim, i);
        sim.drain_events().count();
    }
    let mut sessions: Vec<SrtpSession> = [1u64, 2]
        .iter()
        .map(|&i| {
            let keys = sim.shard(cli(i)).srtp_keys(PeerId(i)).expect("keys");
            SrtpSession::new(&keys, DtlsRole::Client, SrtpConfig::default()).unwrap()
        })
        .collect();
    let (sub_ssrc, _) = subscriber_ssrcs(2);
    let mut names_to_publisher = std::collections::HashSet::new();
    let (mut to_publisher, mut to_subscriber, mut with_feedback) = (0, 0, 0);
    for (i, mut wire) in captured.borrow().iter().cloned() {
        let plain = sessions[i as usize - 1]
            .inbound
            .unprotect_rtcp(&mut wire)
            .expect("shoal's SRTCP");
        let packets: Vec<_> = Compound::new(Bytes::copy_from_slice(&wire[..plain.len]))
            .map(|p| p.expect("a valid compound").body)
            .collect();
        let reporter = match &packets[0] {
            RtcpBody::ReceiverReport(rr) if i == 1 => rr.ssrc,
            RtcpBody::SenderReport(sr) if i == 2 => sr.ssrc,
            other => panic!("to client {i}, a compound starting with {other:?}"),
        };
        let RtcpBody::Sdes(sdes) = &packets[1] else {
            panic!("to client {i}, no SDES after the report: {packets:?}")
        };
        let chunk = sdes.chunks.iter().next().expect("one chunk");
        assert_eq!(chunk.ssrc, reporter, "the CNAME is the reporter's");
        let cname = chunk.cname().expect("a CNAME item").to_vec();
        if i == 1 {
            assert_eq!(cname.len(), 32);
            assert!(cname.iter().all(u8::is_ascii_hexdigit));
            names_to_publisher.insert(cname);
            to_publisher += 1;
            with_feedback += usize::from(packets.len() > 2);
        } else {
            assert_eq!(reporter, sub_ssrc);
            assert_eq!(cname, media_sim::PUBLISHER_CNAME.as_bytes());
            to_subscriber += 1;
        }
    }
    assert_eq!(names_to_publisher.len(), 1, "one name for the session");
    assert!(to_subscriber >= 2, "{to_subscriber} SRs to the subscriber");
    assert!(
        with_feedback >= 3 && to_publisher > with_feedback,
        "{to_publisher} compounds to the publisher, {with_feedback} with feedback"
    );
    println!(
        "{to_publisher} compounds to the publisher ({with_feedback} with NACK or PLI), {to_subscriber} SRs"
    );
}
