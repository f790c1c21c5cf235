//! Issue #5, lifecycle: 50 participants join rooms on two server shards, talk, and
//! leave in every way a participant can: removed by the owner, closing DTLS, or
//! vanishing until consent expires. Afterwards each shard holds exactly what it
//! held before anyone joined: no entity, no room index entry.

mod room;

use std::net::SocketAddr;
use std::time::Duration;

use room::{Log, add_server, cli, join, open_from_client, send_range};
use shoal_components::peer::PeerId;
use shoal_components::room::RoomId;
use shoal_components::sctp::assoc::SctpLimits;
use shoal_components::sctp::dcep::ChannelType;
use shoal_components::tick::RemoveReason;
use shoal_server::sim::{LinkConfig, Sim};
use shoal_systems::Command;

const PARTICIPANTS: u64 = 50;
const WAVE: u64 = 10;

fn servers() -> [SocketAddr; 2] {
    [
        "10.0.0.1:7100".parse().unwrap(),
        "10.0.0.1:7101".parse().unwrap(),
    ]
}

/// Which shard and room participant `i` lands on: rooms span both shards.
fn placement(i: u64) -> (SocketAddr, RoomId) {
    (servers()[(i % 2) as usize], RoomId(i % 4))
}

#[test]
fn room_cleanup_frees_entities() {
    let mut sim = Sim::new(5);
    for s in servers() {
        add_server(&mut sim, s, SctpLimits::default());
    }
    let baseline: Vec<(usize, usize)> = servers()
        .iter()
        .map(|&s| (sim.shard(s).entity_count(), sim.shard(s).room_count()))
        .collect();
    let link = LinkConfig::lossy(Duration::from_millis(15), 0.01);
    let mut log = Log::default();
    let mut expect_removed = Vec::new();
    for wave in 0..PARTICIPANTS / WAVE {
        let ids: Vec<u64> = (1 + wave * WAVE..=(wave + 1) * WAVE).collect();
        for &i in &ids {
            let (server, room) = placement(i);
            join(&mut sim, server, i, room, &link);
        }
        sim.run_until(
            |s| {
                ids.iter().all(|&i| {
                    s.shard(placement(i).0).sctp_established(PeerId(i))
                        && s.shard(cli(i)).sctp_established(PeerId(i))
                })
            },
            Duration::from_secs(60),
        )
        .unwrap_or_else(|e| panic!("wave {wave}: {e}"));
        // Everyone talks, so channels exist on both sides of the relay.
        for &i in &ids {
            let chat = open_from_client(&mut sim, &mut log, i, "chat", "", ChannelType::default());
            send_range(&mut sim, i, chat, 0..5, false);
        }
        sim.run_for(Duration::from_secs(2)).unwrap();
        log.take(&mut sim);
        let in_rooms: usize = servers()
            .iter()
            .map(|&s| sim.shard(s).room_members_total())
            .sum();
        assert_eq!(in_rooms, ids.len(), "wave {wave}: the index misses members");
        // Leave three ways.
        for &i in &ids {
            let (server, _) = placement(i);
            match i % 3 {
                0 => {
                    sim.command(server, Command::RemovePeer(PeerId(i))).unwrap();
                    sim.command(cli(i), Command::RemovePeer(PeerId(i))).unwrap();
                    expect_removed.push((server, PeerId(i), RemoveReason::Command));
                }
                1 => {
                    // The client closes DTLS (close_notify, sent once: its path is
                    // made lossless so the one alert arrives) and is gone.
                    let clean = LinkConfig::lossy(Duration::from_millis(15), 0.0);
                    sim.set_link(cli(i), server, clean);
                    sim.shard_mut(cli(i)).close_peer(PeerId(i)).unwrap();
                    expect_removed.push((server, PeerId(i), RemoveReason::DtlsClosed));
                }
                _ => {
                    // The client vanishes without a word (its path goes dead first,
                    // so not even its close_notify arrives): consent lapses (RFC 7675).
                    let dead = LinkConfig::lossy(Duration::from_millis(15), 1.0);
                    sim.set_link(cli(i), server, dead);
                    sim.command(cli(i), Command::RemovePeer(PeerId(i))).unwrap();
                    expect_removed.push((server, PeerId(i), RemoveReason::ConsentExpired));
                }
            }
        }
        // Consent lapses 30 s after the last check.
        sim.run_until(
            |s| servers().iter().all(|&srv| s.shard(srv).peer_count() == 0),
            Duration::from_secs(45),
        )
        .unwrap_or_else(|e| panic!("wave {wave}: peers stay: {e}"));
        log.take(&mut sim);
    }
    // Every message was relayed to the others of its room present then.
    assert!(log.total() > 0, "nobody heard anything");
    let mut removed = log.removed.clone();
    removed.sort_by_key(|r| r.1);
    expect_removed.sort_by_key(|r| r.1);
    assert_eq!(removed, expect_removed, "who left, and how");
    for (k, &s) in servers().iter().enumerate() {
        let shard = sim.shard(s);
        assert_eq!(shard.peer_count(), 0);
        assert_eq!(
            (shard.entity_count(), shard.room_count()),
            baseline[k],
            "shard {s} kept something"
        );
        assert_eq!(shard.room_members_total(), 0);
    }
}
