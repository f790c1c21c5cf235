//! `shoal-bench media`: what one server shard spends forwarding a publisher's video to
//! N subscribers. Client endpoints and the server shard are connected in the
//! simulator (ICE, DTLS, SRTP keys as a browser would get them); the publisher's
//! SRTP datagrams are then made ahead of time and fed straight to the server shard in
//! driver-sized batches, and only that is timed: srtp_in's one decrypt per packet,
//! the media pass's fan-out, and egress's per-subscriber header and encrypt. What the
//! shard sends is taken and dropped, so no client work is counted.
//!
//! Options: `--subscribers N` (10), `--packets N` (20 000), `--size B` (1 100: an RTP
//! payload as a browser packs video), `--batch N` (64), `--twcc 1` (0): the
//! transport-wide congestion control extension on both hops, so the server logs
//! each publisher packet's arrival for its feedback and stamps, and keeps for its
//! estimate, every copy it sends; `--paced 1` (0): every subscriber's estimate seeded
//! at 100 Mbit/s and the clock moving 10 ms a batch, so each copy goes through its
//! pacer, some waiting for the next batch or a timer (what pacing costs when the
//! estimate keeps up with the stream); `--temporal 1` (0): the stream in three VP8
//! temporal layers (L1T3), so each copy is decided by its subscription's temporal
//! filter (every layer sent). Payloads carry a VP8 payload descriptor either way.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use shoal_components::dtls::DtlsRole;
use shoal_components::media::{
    ExtensionIds, FeedbackKinds, PayloadFormat, SubscriptionSpec, TrackId, TrackKind, TrackSpec,
};
use shoal_components::net::Datagram;
use shoal_components::peer::PeerId;
use shoal_components::rtp::{RtpFields, RtpWriter};
use shoal_server::sim::Sim;
use shoal_systems::Command;

use crate::opt;

const SERVER: &str = "10.0.0.1:7100";
const PT: u8 = 96;

fn client(i: u64) -> SocketAddr {
    SocketAddr::from(([10, 0, (i / 250) as u8 + 1, (i % 250) as u8 + 1], 50_000))
}

/// The transport-wide extension's id on every session, with `--twcc 1`.
const TWCC_ID: u8 = 5;

fn track(id: u64, ssrc: u32, twcc: bool) -> TrackSpec {
    TrackSpec {
        id: TrackId(id),
        kind: TrackKind::Video,
        mid: "0".into(),
        ssrc: Some(ssrc),
        rtx_ssrc: None,
        payload_type: PT,
        rtx_payload_type: None,
        clock_rate: 90_000,
        extensions: ExtensionIds {
            transport_cc: twcc.then_some(TWCC_ID),
            ..ExtensionIds::default()
        },
        feedback: FeedbackKinds {
            transport_cc: twcc,
            ..FeedbackKinds::default()
        },
        format: PayloadFormat::Vp8,
        layers: Vec::new(),
    }
}

fn subscription(id: u64, ssrc: u32, twcc: bool) -> SubscriptionSpec {
    SubscriptionSpec {
        track: TrackId(id),
        mid: "1".into(),
        ssrc,
        rtx_ssrc: None,
        payload_type: PT,
        rtx_payload_type: None,
        extensions: ExtensionIds {
            mid: Some(4),
            transport_cc: twcc.then_some(TWCC_ID),
            ..ExtensionIds::default()
        },
        feedback: FeedbackKinds {
            transport_cc: twcc,
            ..FeedbackKinds::default()
        },
        cname: "publisher".into(),
        stream: None,
    }
}

fn packet(i: u32, size: usize, temporal: bool) -> Bytes {
    let mut out = BytesMut::with_capacity(size + 12);
    let fields = RtpFields {
        marker: i % 8 == 7,
        payload_type: PT,
        sequence_number: i as u16,
        timestamp: (i / 8) * 3000,
        ssrc: 0x1234,
    };
    // Eight packets a frame behind a VP8 payload descriptor as Chromium writes it
    // (RFC 7741 §4.2: X, S on a frame's first packet; I with a 15-bit PictureID;
    // with `temporal`, L and T too: TL0PICIDX, and TID and Y in the L1T3 pattern),
    // then the payload header (§4.3: a key frame first) and filler.
    let frame = i / 8;
    let mut payload = BytesMut::with_capacity(size.max(16));
    payload.put_u8(if i.is_multiple_of(8) { 0x90 } else { 0x80 });
    payload.put_u8(if temporal { 0xe0 } else { 0x80 });
    payload.put_u16(0x8000 | (frame & 0x7fff) as u16);
    if temporal {
        let (tid, sync) = match frame % 8 {
            0 | 4 => (0, false),
            1 => (2, true),
            2 => (1, true),
            6 => (1, false),
            _ => (2, false),
        };
        payload.put_u8((frame / 4) as u8);
        payload.put_u8(tid << 6 | if sync { 0x20 } else { 0 });
    }
    payload.put_u8(if i == 0 { 0x00 } else { 0x01 });
    let filler = size.saturating_sub(payload.len());
    payload.put_bytes((i & 0xff) as u8, filler);
    let mut w = RtpWriter::new(&mut out, &fields, &[]);
    w.payload(&payload);
    w.finish(0);
    out.freeze()
}

pub(crate) fn run(args: &[String]) -> ExitCode {
    match bench(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("shoal-bench media: {e}");
            ExitCode::FAILURE
        }
    }
}

fn bench(args: &[String]) -> Result<(), String> {
    let subscribers = opt(args, "--subscribers", 10)?.clamp(1, 120);
    let packets = opt(args, "--packets", 20_000)?.clamp(1, 10_000_000) as u32;
    let size = opt(args, "--size", 1_100)?.clamp(1, 1_300) as usize;
    let batch = opt(args, "--batch", 64)?.clamp(1, 1024) as usize;
    let twcc = opt(args, "--twcc", 0)? != 0;
    let paced = opt(args, "--paced", 0)? != 0;
    let temporal = opt(args, "--temporal", 0)? != 0;

    let server: SocketAddr = SERVER.parse().map_err(|e| format!("{e}"))?;
    let mut sim = Sim::new(1);
    sim.add_shard(server);
    for i in 1..=subscribers + 1 {
        sim.add_shard(client(i));
        sim.connect_dtls(server, client(i), PeerId(i), DtlsRole::Server)
            .map_err(|e| e.to_string())?;
    }
    sim.run_until(
        |s| {
            (1..=subscribers + 1).all(|i| {
                s.shard(server).dtls_connected(PeerId(i))
                    && s.shard(client(i)).dtls_connected(PeerId(i))
            })
        },
        Duration::from_secs(60),
    )
    .map_err(|e| format!("connecting: {e}"))?;
    let command =
        |sim: &mut Sim, at: SocketAddr, c: Command| sim.command(at, c).map_err(|e| e.to_string());
    command(
        &mut sim,
        client(1),
        Command::AddSource {
            peer: PeerId(1),
            track: track(1, 0x1234, twcc),
            subscription: subscription(1, 0xAAAA, twcc),
        },
    )?;
    command(
        &mut sim,
        server,
        Command::Publish {
            peer: PeerId(1),
            track: track(7, 0xAAAA, twcc),
        },
    )?;
    for i in 2..=subscribers + 1 {
        command(
            &mut sim,
            server,
            Command::Subscribe {
                peer: PeerId(i),
                subscription: subscription(7, 0xB000 + i as u32, twcc),
            },
        )?;
    }
    // Pacing on: every subscriber's estimate at the most an estimate may be
    // (100 Mbit/s), above what it is sent over time.
    if paced {
        for i in 2..=subscribers + 1 {
            sim.shard_mut(server)
                .seed_estimate(PeerId(i), 100_000_000)
                .map_err(|e| e.to_string())?;
        }
    }
    // The publisher's SRTP datagrams, made ahead of time.
    let now = sim.now();
    let mut input: Vec<Datagram> = Vec::with_capacity(packets as usize);
    for i in 0..packets {
        let publisher = sim.shard_mut(client(1));
        publisher
            .send_rtp(now, TrackId(1), packet(i, size, temporal))
            .map_err(|e| e.to_string())?;
        publisher.poll_transmit(&mut input);
    }
    // As the server shard receives them: its own address local, the sender's remote.
    let input: Vec<Datagram> = input
        .into_iter()
        .filter(|d| d.remote == server)
        .map(|d| Datagram {
            local: server,
            remote: d.local,
            payload: d.payload,
        })
        .collect();
    let fed = input.len() as u64;

    let shard = sim.shard_mut(server);
    let mut out = Vec::new();
    let mut sent = 0u64;
    // Paced, the clock moves 10 ms a batch (the estimate refills each pacer by
    // 125 kB meanwhile, against the batch's 70 kB of 1100-byte packets), and what
    // still waits at the end is sent when its timers fire.
    let mut at = now;
    let start = Instant::now();
    for chunk in input.chunks(batch) {
        shard.handle_datagrams(at, chunk.iter().cloned());
        shard.poll_transmit(&mut out);
        sent += out.len() as u64;
        out.clear();
        if paced {
            at = at + Duration::from_millis(10);
        }
    }
    while paced && shard.stats().rtp_forwarded < shard.stats().rtp_received * subscribers {
        let Some(due) = shard.poll_timeout() else {
            break;
        };
        at = at.max(due);
        shard.handle_timeout(at);
        shard.poll_transmit(&mut out);
        sent += out.len() as u64;
        out.clear();
    }
    let elapsed = start.elapsed();
    let stats = shard.stats();
    let forwarded = stats.rtp_forwarded;
    // Reports go out about once a second per stream, not per packet.
    if stats.rtp_received != fed || forwarded != fed * subscribers || sent > forwarded + 64 {
        return Err(format!(
            "expected {fed} packets in and {} out, got {} in and {forwarded} out \
             ({sent} datagrams): {stats:?}",
            fed * subscribers,
            stats.rtp_received
        ));
    }
    // With the extension, every copy was stamped.
    let stamped = shard.congestion(PeerId(2)).map_or(0, |c| c.stamped);
    if twcc && stamped != fed {
        return Err(format!(
            "{stamped} of {fed} copies stamped to the first subscriber"
        ));
    }
    let ns = elapsed.as_nanos() as f64;
    println!(
        "media: {subscribers} subscribers{}, {fed} packets of {size} B in batches of {batch}: \
         {:.0} ns per packet in, {:.0} ns per copy out, {:.0} k copies/s ({sent} datagrams out)",
        match (twcc, paced) {
            (true, true) => " (transport-wide cc, paced)",
            (true, false) => " (transport-wide cc)",
            (false, true) => " (paced)",
            (false, false) => "",
        },
        ns / fed as f64,
        ns / forwarded as f64,
        forwarded as f64 / elapsed.as_secs_f64() / 1000.0,
    );
    Ok(())
}
