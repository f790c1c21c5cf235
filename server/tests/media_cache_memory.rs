//! A track's retransmission cache holds what its own packets cost, nothing more: a
//! low-rate track (a muted microphone's DTX, a stopped camera, or a publisher that
//! sends one packet now and then on purpose) beside a heavy one must not keep the heavy
//! one's buffers alive through the packets it caches.
//!
//! This test counts live heap bytes with a global allocator: the same heavy stream
//! is forwarded with and without a light track beside it that sends one ~300-byte
//! packet per 50 heavy ones; 300 light packets should cost ~100 kB, not ~19 MB.

mod media_sim;

use std::alloc::System;
use std::time::Duration;

use media_sim::{SOURCE, SRV, addr, cli, media_sim, packet, subscription, track_spec};
use shoal_components::media::TrackId;
use shoal_components::peer::PeerId;
use shoal_server::sim::{LinkConfig, Sim};
use shoal_systems::Command;
use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Bytes allocated and not yet freed, process-wide.
fn live() -> isize {
    let s = GLOBAL.stats();
    s.bytes_allocated as isize - s.bytes_deallocated as isize + s.bytes_reallocated
}

const LIGHT: TrackId = TrackId(30);
const LIGHT_SERVER: TrackId = TrackId(31);

fn run(light: bool) -> isize {
    let link = LinkConfig::lossy(Duration::from_millis(5), 0.0);
    let mut sim: Sim = media_sim(9, &link, 1);
    let mut l = subscription(LIGHT, 0x3000, 0x3001);
    l.rtx_ssrc = None;
    l.rtx_payload_type = None;
    sim.command(
        cli(1),
        Command::AddSource {
            peer: PeerId(1),
            track: track_spec(LIGHT, 0x7777, 0x7778),
            subscription: l,
        },
    )
    .unwrap();
    let mut spec = track_spec(LIGHT_SERVER, 0x3000, 0x3001);
    spec.rtx_ssrc = None;
    spec.rtx_payload_type = None;
    sim.command(
        addr(SRV),
        Command::Publish {
            peer: PeerId(1),
            track: spec,
        },
    )
    .unwrap();
    let heavy = |sim: &mut Sim, i: u32, light_too: bool| {
        let now = sim.now();
        // ~1.1 kB heavy packets.
        sim.shard_mut(cli(1))
            .send_rtp(now, SOURCE, packet(i as u16))
            .unwrap();
        if light_too {
            sim.shard_mut(cli(1))
                .send_rtp(now, LIGHT, packet((i / 50) as u16 + 1000))
                .unwrap();
        }
        let _ = sim.run_for(Duration::from_millis(2));
        sim.drain_events().count();
    };
    // Warm up: every buffer and cache at its steady size.
    for i in 0..2000 {
        heavy(&mut sim, i, false);
    }
    let mut light_n = 0u32;
    let before = live();
    for i in 2000..17_000u32 {
        let l = light && i % 50 == 0;
        light_n += u32::from(l);
        heavy(&mut sim, i, l);
    }
    // Heavy traffic only, long enough to cycle the heavy track's cache many times.
    for i in 17_000..20_000 {
        heavy(&mut sim, i, false);
    }
    let _ = light_n;
    let after = live();
    eprintln!("{:?}", sim.shard(addr(SRV)).stats());
    drop(sim);
    after - before
}

#[test]
fn a_light_track_does_not_pin_the_shards_traffic() {
    let without = run(false);
    let with = run(true);
    let extra = with - without;
    eprintln!("with {with} without {without}");
    assert!(
        extra < 2 << 20,
        "300 cached packets of a light track cost {} KiB of live heap ({} KiB vs {} KiB)",
        extra / 1024,
        with / 1024,
        without / 1024
    );
}
