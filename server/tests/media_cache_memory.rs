//! Adversarial review of issue #6: `srtp_in` decrypts every datagram into 64 KiB
//! chunks of one `BytesMut` and hands out `split().freeze()` views of them; a track's
//! `PacketCache` keeps up to 512 of those views, and each view keeps its whole chunk
//! alive. A low-rate track (a muted microphone's DTX, a stopped camera, or a
//! publisher that sends one packet now and then on purpose) therefore pins one 64 KiB
//! chunk of *everyone's* traffic per cached packet, for as long as the track lives.
//!
//! This test counts live heap bytes with a global allocator: the same heavy stream
//! is forwarded with and without a light track beside it that sends one ~300-byte
//! packet per 50 heavy ones; 300 light packets should cost ~100 kB, not ~19 MB.

#![allow(unsafe_code)] // a counting global allocator, test-only

mod media_sim;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Duration;

use media_sim::{SOURCE, SRV, addr, cli, media_sim, packet, subscription, track_spec};
use shoal_components::media::TrackId;
use shoal_components::peer::PeerId;
use shoal_server::sim::{LinkConfig, Sim};
use shoal_systems::Command;

struct Counting;
static LIVE: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        LIVE.fetch_add(new as isize - l.size() as isize, Ordering::Relaxed);
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static A: Counting = Counting;

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
    let before = LIVE.load(Ordering::Relaxed);
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
    let after = LIVE.load(Ordering::Relaxed);
    eprintln!("{:?}", sim.shard(addr(SRV)).stats());
    drop(sim);
    after - before
}

#[test]
fn review_a_light_track_does_not_pin_the_shards_traffic() {
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
