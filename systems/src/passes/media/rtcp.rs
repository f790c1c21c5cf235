//! The RTCP half of the media pass. RTCP stays on its hop, never forwarded: a
//! publisher's SR sets the LSR/DLSR of shoal's receiver reports and the clock of the
//! SRs shoal sends that track's subscribers; a subscriber's NACK is answered from the
//! track's cache as RTX (RFC 4585 §6.2.1, RFC 4588), its PLI or FIR (RFC 4585
//! §6.3.1, RFC 5104 §4.3.1) becomes one throttled PLI to the publisher. Per-track
//! and per-subscription timers send receiver reports with any feedback due to
//! publishers, and sender reports to subscribers (RFC 3550 §6.4), so each side sees
//! the loss and jitter of its own hop. Every compound shoal sends carries an SDES
//! CNAME after its report (RFC 3550 §6.1): a subscription's SR the name the
//! subscriber's SDP gave its SSRC, everything else shoal's name for the session.

use bevy_ecs::prelude::*;
use bytes::{Bytes, BytesMut};
use shoal_components::congestion::{ArrivalLog, MAX_FEEDBACKS_PER_INTERVAL};
use shoal_components::media::temporal::Shift;
use shoal_components::media::{PeerMedia, ReceiveStats, Subscription, Track, extend_seq};
use shoal_components::rtcp::{
    Compound, Nack, Pli, ReceiverReport, Remb, ReportBlock, RtcpBody, Sdes, SdesChunk, SdesItem,
    SenderReport, WriteRtcp, lost_to_nack_entries, sdes_type,
};
use shoal_components::tick::{Outgoing, SharedRtp};
use shoal_components::time::Time;
use shoal_components::timer::{TimerKind, Timers};
use shoal_components::transport::{PeerSrtp, RtcpSender};

use super::{
    KEYFRAME_REQUEST_INTERVAL, MAX_NACKS_PER_PACKET, MAX_RETRANSMITS_PER_NACK, MediaCtx,
    NACK_RETRY, RECENT_RESENDS, REPORT_INTERVAL, TransportQuery, keyframe_allowed,
    request_keyframe,
};

/// One RTCP compound to the publisher: a receiver report, then what feedback is due:
/// a PLI if a keyframe is wanted and allowed, a NACK for missing packets due again.
pub(super) fn send_feedback(
    ctx: &mut MediaCtx,
    now: Time,
    publisher: Entity,
    track: &mut Track,
    sender: RtcpSender,
) {
    let Some(media_ssrc) = track.ssrc else {
        return;
    };
    ctx.scratch.reserve(1500);
    let mut blocks = std::mem::take(&mut ctx.scratch.blocks);
    blocks.clear();
    // RFC 3550 §6.4: a report block only for a source heard from since the last
    // report (an RR with none still heads the feedback that follows).
    let heard = track.stats.received > track.stats.received_prior;
    if heard {
        blocks.push(report_block(&mut track.stats, media_ssrc, now));
    }
    let start = ctx.scratch.buf.len();
    ReceiverReport {
        ssrc: sender.ssrc,
        reports: blocks.as_slice(),
        extension: Bytes::new(),
    }
    .write_to(&mut ctx.scratch.buf);
    ctx.scratch.blocks = blocks;
    write_cname(&mut ctx.scratch.buf, sender.ssrc, &sender.cname);
    let mut feedback = false;
    // keyframe_wanted is only set for a track that takes PLI (request_keyframe).
    if track.keyframe_wanted && keyframe_allowed(track, now) {
        Pli {
            sender_ssrc: sender.ssrc,
            media_ssrc,
        }
        .write_to(&mut ctx.scratch.buf);
        track.keyframe_wanted = false;
        track.last_keyframe_request = Some(now);
        ctx.stats.keyframe_requests_sent += 1;
        feedback = true;
    }
    let mut lost = std::mem::take(&mut ctx.scratch.lost);
    lost.clear();
    for (seq, at, count) in &mut track.missing {
        let due = at.is_none_or(|t| now.saturating_since(t) >= NACK_RETRY);
        if due && *count < MAX_NACKS_PER_PACKET {
            lost.push((*seq & 0xffff) as u16);
            *at = Some(now);
            *count += 1;
        }
    }
    track
        .missing
        .retain(|(_, _, count)| *count < MAX_NACKS_PER_PACKET);
    if !lost.is_empty() {
        let mut entries = std::mem::take(&mut ctx.scratch.nack);
        entries.clear();
        entries.extend(lost_to_nack_entries(lost.iter().copied()));
        Nack {
            sender_ssrc: sender.ssrc,
            media_ssrc,
            entries: entries.as_slice(),
        }
        .write_to(&mut ctx.scratch.buf);
        ctx.scratch.nack = entries;
        ctx.stats.nacks_sent += 1;
        feedback = true;
    }
    ctx.scratch.lost = lost;
    // Nothing to report and no feedback: nothing to send.
    if !heard && !feedback {
        ctx.scratch.buf.truncate(start);
        return;
    }
    let packet = ctx.scratch.buf.split().freeze();
    ctx.out.0.push(Outgoing::Rtcp {
        peer: publisher,
        packet,
    });
}

/// Transport-wide feedback to a publisher
/// (draft-holmer-rmcat-transport-wide-cc-extensions-01 §3.1): what arrived since the
/// last, each message headed by an RR without report blocks and shoal's CNAME, so it
/// is a valid full compound whether or not reduced-size RTCP was negotiated (RFC 3550
/// §6.1, RFC 5506 §3.1). At most [`MAX_FEEDBACKS_PER_INTERVAL`] messages; a run longer than they
/// describe goes out next interval.
pub(super) fn send_transport_feedback(
    ctx: &mut MediaCtx,
    publisher: Entity,
    log: &mut ArrivalLog,
    sender: RtcpSender,
) {
    let mut arrivals = std::mem::take(&mut ctx.scratch.arrivals);
    for _ in 0..MAX_FEEDBACKS_PER_INTERVAL {
        let base = log.next_run(&mut arrivals);
        if arrivals.is_empty() {
            break;
        }
        let encoded = ctx.scratch.encoder.encode(&arrivals);
        if encoded.status_count == 0 {
            // Not reachable (the first arrival sets the reference time, so its delta
            // fits); never loop on it.
            log.reported(1);
            continue;
        }
        start_compound(ctx, sender);
        let scratch = &mut *ctx.scratch;
        scratch
            .encoder
            .feedback(sender.ssrc, log.media_ssrc, base, log.sent as u8, encoded)
            .write_to(&mut scratch.buf);
        log.reported(encoded.status_count);
        ctx.stats.transport_feedback_sent += 1;
        let packet = ctx.scratch.buf.split().freeze();
        ctx.out.0.push(Outgoing::Rtcp {
            peer: publisher,
            packet,
        });
    }
    ctx.scratch.arrivals = arrivals;
}

/// Sends `publisher` a REMB (draft-alvestrand-rmcat-remb-03 §2.2) of `bitrate_bps`
/// for the media SSRCs it sent, behind an empty RR and shoal's CNAME.
pub(super) fn send_remb(
    ctx: &mut MediaCtx,
    publisher: Entity,
    ssrcs: &[u32],
    bitrate_bps: u64,
    sender: RtcpSender,
) {
    let (exponent, mantissa) = Remb::<&[u32]>::encode_bitrate(bitrate_bps);
    start_compound(ctx, sender);
    Remb {
        sender_ssrc: sender.ssrc,
        // §2.2: "The SSRC of the media source is not used and SHALL be set to 0."
        media_ssrc: 0,
        exponent,
        mantissa,
        ssrcs,
    }
    .write_to(&mut ctx.scratch.buf);
    ctx.stats.remb_sent += 1;
    let packet = ctx.scratch.buf.split().freeze();
    ctx.out.0.push(Outgoing::Rtcp {
        peer: publisher,
        packet,
    });
}

/// Starts a feedback compound in the scratch buffer with an empty RR and our CNAME
/// (RFC 3550 §6.1: a compound starts with a report, and "An SDES packet containing
/// a CNAME item MUST be included in each compound RTCP packet").
fn start_compound(ctx: &mut MediaCtx, sender: RtcpSender) {
    ctx.scratch.reserve(1500);
    ReceiverReport {
        ssrc: sender.ssrc,
        reports: &[] as &[ReportBlock],
        extension: Bytes::new(),
    }
    .write_to(&mut ctx.scratch.buf);
    write_cname(&mut ctx.scratch.buf, sender.ssrc, &sender.cname);
}

/// An SDES packet of one chunk: `ssrc` and its CNAME item (RFC 3550 §6.5.1). An item
/// holds at most 255 bytes; a longer name (a stream id a publisher chose) is cut there.
fn write_cname(out: &mut BytesMut, ssrc: u32, cname: &[u8]) {
    let items = [SdesItem {
        kind: sdes_type::CNAME,
        text: &cname[..cname.len().min(255)],
    }];
    let chunks = [SdesChunk {
        ssrc,
        items: &items,
    }];
    Sdes {
        chunks: chunks.as_slice(),
    }
    .write_to(out);
}

/// RFC 3550 §6.4.1 and Appendix A.3: the report block for one received source.
fn report_block(s: &mut ReceiveStats, ssrc: u32, now: Time) -> ReportBlock {
    let expected = s.expected();
    let lost = expected as i64 - s.received as i64;
    let expected_interval = expected - s.expected_prior;
    let received_interval = s.received - s.received_prior;
    s.expected_prior = expected;
    s.received_prior = s.received;
    let lost_interval = expected_interval as i64 - received_interval as i64;
    let fraction_lost = if expected_interval == 0 || lost_interval <= 0 {
        0
    } else {
        ((lost_interval << 8) / expected_interval as i64).min(255) as u8
    };
    let dlsr = s.last_sr_at.map_or(0, |at| {
        let d = now.saturating_since(at);
        (d.as_micros() * 65_536 / 1_000_000).min(u128::from(u32::MAX)) as u32
    });
    ReportBlock {
        ssrc,
        fraction_lost,
        cumulative_lost: lost.clamp(-0x80_0000, 0x7f_ffff) as i32,
        // The extension started the cycle count at one (see `ReceiveStats::note`).
        extended_highest_seq: s.max_seq.saturating_sub(1 << 16) as u32,
        jitter: s.jitter_q4 >> 4,
        last_sr: s.last_sr,
        delay_since_last_sr: dlsr,
    }
}

pub(super) fn track_timer(
    ctx: &mut MediaCtx,
    now: Time,
    entity: Entity,
    track: &mut Track,
    timers: &mut Timers,
    sender: RtcpSender,
) {
    let Some(publisher) = track.publisher else {
        // A local source has no one to report to.
        return;
    };
    send_feedback(ctx, now, publisher, track, sender);
    let mut next = now + REPORT_INTERVAL;
    if !track.missing.is_empty() {
        next = next.min(now + NACK_RETRY);
    }
    if track.keyframe_wanted
        && let Some(at) = track.last_keyframe_request
    {
        next = next.min(at + KEYFRAME_REQUEST_INTERVAL);
    }
    ctx.heap.arm(timers, entity, TimerKind::MediaReport, next);
}

/// RFC 3550 §6.4.1: a sender report for what shoal sent the subscriber. Its NTP and
/// RTP times are the publisher's last SR moved on to now (the RTP time through the
/// subscription's timestamp offset), so the subscriber lines a publisher's audio and
/// video up by the publisher's own clock (§6.4.1: the pair is what "lip sync" needs).
/// Before the publisher's first SR, the shard's clock and the last timestamp sent.
/// Nothing once the stream stopped: an SR reports a sender.
pub(super) fn subscription_timer(
    ctx: &mut MediaCtx,
    now: Time,
    entity: Entity,
    sub: &mut Subscription,
    timers: &mut Timers,
    tracks: &Query<(&mut Track, &mut Timers), Without<Subscription>>,
) {
    ctx.heap.arm(
        timers,
        entity,
        TimerKind::MediaReport,
        now + REPORT_INTERVAL,
    );
    let Some((ts, at)) = sub.last_rtp_ts else {
        return;
    };
    // RFC 3550 §6.4: senders report; one silent for two intervals is not one.
    if now.saturating_since(at) > 2 * REPORT_INTERVAL {
        return;
    }
    // A simulcast subscription's offsets are those of the stream it last sent, which
    // may not yet be the one it switched to.
    let stream = match (
        sub.layers.and_then(|c| c.sent),
        tracks
            .get(sub.track)
            .ok()
            .and_then(|(t, _)| t.layering.as_ref()),
    ) {
        (Some(i), Some(l)) => l.siblings.get(usize::from(i)).copied().unwrap_or(sub.track),
        _ => sub.track,
    };
    let Ok((track, _)) = tracks.get(stream) else {
        return;
    };
    let clock = u128::from(track.spec.clock_rate);
    let units = |d: std::time::Duration| (d.as_micros() * clock / 1_000_000) as u32;
    let (ntp_time, rtp_time) = match track.sender_report {
        Some((sr_ntp, sr_rtp, sr_at)) => {
            let elapsed = now.saturating_since(sr_at);
            (
                sr_ntp.wrapping_add(ntp_duration(elapsed)),
                sr_rtp
                    .wrapping_add(sub.ts_offset)
                    .wrapping_add(units(elapsed)),
            )
        }
        None => (ntp(now), ts.wrapping_add(units(now.saturating_since(at)))),
    };
    ctx.scratch.reserve(64 + 8 + sub.spec.cname.len().min(255));
    SenderReport {
        ssrc: sub.spec.ssrc,
        ntp_time,
        rtp_time,
        packet_count: sub.packets_sent,
        octet_count: sub.octets_sent,
        reports: &[] as &[ReportBlock],
        extension: Bytes::new(),
    }
    .write_to(&mut ctx.scratch.buf);
    // The name the subscriber's SDP gave this SSRC (RFC 3550 §6.1, RFC 5576 §6.1).
    write_cname(
        &mut ctx.scratch.buf,
        sub.spec.ssrc,
        sub.spec.cname.as_bytes(),
    );
    let packet = ctx.scratch.buf.split().freeze();
    ctx.out.0.push(Outgoing::Rtcp {
        peer: sub.subscriber,
        packet,
    });
}

/// A duration in 64-bit NTP units (32.32 fixed point seconds).
fn ntp_duration(d: std::time::Duration) -> u64 {
    (d.as_secs() << 32) | ((u64::from(d.subsec_nanos()) << 32) / 1_000_000_000)
}

/// The shard's time as a 64-bit NTP timestamp (RFC 3550 §4): seconds and fraction.
fn ntp(now: Time) -> u64 {
    let us = now.as_micros();
    let secs = us / 1_000_000;
    let frac = ((us % 1_000_000) << 32) / 1_000_000;
    (secs << 32) | frac
}

pub(super) fn on_rtcp(
    ctx: &mut MediaCtx,
    now: Time,
    peer: Entity,
    packet: &Bytes,
    peers: &mut Query<(&mut PeerMedia, Option<&PeerSrtp>)>,
    tracks: &mut Query<(&mut Track, &mut Timers), Without<Subscription>>,
    subs: &mut Query<(&mut Subscription, &mut Timers), Without<Track>>,
    transport: &mut TransportQuery,
) {
    let Ok((media, _)) = peers.get(peer) else {
        return;
    };
    // RTCP stays on its hop: each packet acts on this peer's own tracks or
    // subscriptions, found by SSRC, and is never forwarded.
    for item in Compound::new(packet.clone()) {
        let Ok(p) = item else {
            ctx.stats.media_malformed += 1;
            break;
        };
        match p.body {
            RtcpBody::SenderReport(sr) => {
                if let Some(&track) = media.tracks_by_ssrc.get(&sr.ssrc)
                    && let Ok((mut t, _)) = tracks.get_mut(track)
                {
                    // RFC 3550 §6.4.1 LSR: the middle 32 bits of the NTP timestamp.
                    t.stats.last_sr = (sr.ntp_time >> 16) as u32;
                    t.stats.last_sr_at = Some(now);
                    t.sender_report = Some((sr.ntp_time, sr.rtp_time, now));
                }
            }
            RtcpBody::Nack(n) => {
                ctx.stats.nacks_received += 1;
                if let Some(&sub) = media.subscriptions_by_ssrc.get(&n.media_ssrc) {
                    let mut lost = std::mem::take(&mut ctx.scratch.lost);
                    lost.clear();
                    lost.extend(n.entries.lost());
                    answer_nack(ctx, now, sub, &mut lost, tracks, subs);
                    ctx.scratch.lost = lost;
                }
            }
            RtcpBody::Pli(p) => {
                ctx.stats.keyframe_requests_received += 1;
                if let Some(&sub) = media.subscriptions_by_ssrc.get(&p.media_ssrc)
                    && let Ok((s, _)) = subs.get(sub)
                {
                    request_keyframe(ctx, now, s.track, tracks, peers);
                }
            }
            RtcpBody::Fir(f) => {
                for e in f.entries.iter() {
                    ctx.stats.keyframe_requests_received += 1;
                    if let Some(&sub) = media.subscriptions_by_ssrc.get(&e.ssrc)
                        && let Ok((s, _)) = subs.get(sub)
                    {
                        request_keyframe(ctx, now, s.track, tracks, peers);
                    }
                }
            }
            RtcpBody::TransportCc(fb) => {
                let (mut estimate, mut loss) = (None, None);
                if let Ok((mut tw, _)) = transport.get_mut(peer) {
                    tw.send.on_feedback(now, &fb);
                    estimate = tw.send.estimate_bps();
                    loss = tw.send.estimator.as_ref().and_then(|e| e.last_loss());
                }
                ctx.stats.transport_feedback_received += 1;
                // The choice is made again at most every CHOICE_INTERVAL however
                // often feedback comes.
                let due = transport.get_mut(peer).is_ok_and(|(mut tw, _)| {
                    let due = tw.send.chosen_at.is_none_or(|at| {
                        now.saturating_since(at) >= super::layers::CHOICE_INTERVAL
                    });
                    if due {
                        tw.send.chosen_at = Some(now);
                    }
                    due
                });
                // Every subscriber: one without a choice may still be sent more
                // than its estimate, which a probe looks into.
                if due && estimate.is_some() && !media.subscriptions.is_empty() {
                    let shortfall =
                        super::layers::choose(ctx, now, peer, estimate, loss, peers, tracks, subs);
                    if let Some(shortfall) = shortfall {
                        super::start_probe(ctx, now, peer, shortfall, transport);
                    }
                }
            }
            _ => {}
        }
    }
}

/// A subscriber's NACK (RFC 4585 §6.2.1) for the sequence numbers in `lost` (its own
/// numbering): each answered once from the track's cache as RTX, at most
/// MAX_RETRANSMITS_PER_NACK of them, none from before the subscription started or
/// resent within a round trip.
fn answer_nack(
    ctx: &mut MediaCtx,
    now: Time,
    sub: Entity,
    lost: &mut Vec<u16>,
    tracks: &Query<(&mut Track, &mut Timers), Without<Subscription>>,
    subs: &mut Query<(&mut Subscription, &mut Timers), Without<Track>>,
) {
    let Ok((mut s, _)) = subs.get_mut(sub) else {
        return;
    };
    if !s.started {
        return;
    }
    let (offset, track, first) = (s.seq_offset, s.track, s.first_seq);
    let rtx = s.spec.rtx_ssrc.is_some() && s.spec.rtx_payload_type.is_some();
    // Nothing of a muted track is sent, retransmissions included.
    let Some((t, _)) = tracks.get(track).ok().filter(|(t, _)| !t.muted) else {
        return;
    };
    // One NACK's entries may repeat a number.
    lost.sort_unstable();
    lost.dedup();
    // Temporal layers dropped: the numbers map back through what was dropped, for
    // the stream being sent (not while a switch waits in the pacing queue).
    let dropping = s.temporal.dropping();
    if dropping && s.layers.is_some_and(|c| c.current != c.sent) {
        ctx.stats.nack_unanswered += lost.len() as u64;
        return;
    }
    let mut budget = MAX_RETRANSMITS_PER_NACK;
    for &seq in lost.iter() {
        // The subscriber's number back to the publisher's, extended.
        let original = seq.wrapping_sub(offset);
        let ext = match s.temporal.source_seq(original) {
            Some(ext) if dropping => ext,
            _ => extend_seq(t.stats.max_seq, original),
        };
        let recent = s
            .recent_resends
            .iter()
            .any(|(r, at)| *r == ext && now.saturating_since(*at) < NACK_RETRY);
        if ext < first || recent || budget == 0 {
            ctx.stats.nack_unanswered += 1;
            continue;
        }
        let packet = t.cache.get(ext).and_then(|p| SharedRtp::of(t, p, ext));
        // A packet of a frame dropped was never sent: not resent either.
        let shift = match &packet {
            Some(p) if dropping => s.temporal.resend(ext, p.vp8.as_ref()),
            _ => Some(Shift::default()),
        };
        match (packet, shift) {
            (Some(packet), Some(shift)) if rtx => {
                budget -= 1;
                if s.recent_resends.len() >= RECENT_RESENDS {
                    s.recent_resends.pop_front();
                }
                s.recent_resends.push_back((ext, now));
                ctx.out.0.push(Outgoing::Rtp {
                    subscription: sub,
                    packet: SharedRtp {
                        audio_level: None,
                        shift,
                        ..packet
                    },
                    retransmission: true,
                    probe: false,
                });
            }
            _ => ctx.stats.nack_unanswered += 1,
        }
    }
}
