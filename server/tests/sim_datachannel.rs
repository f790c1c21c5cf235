//! Data channels over whole shards in the simulated network: DCEP open and
//! acknowledge in both directions, stream ids by DTLS role, the WebRTC PPIDs with
//! their empty forms, and the max-message-size limit.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use shoal_components::datachannel::ChannelError;
use shoal_components::dtls::DtlsRole;
use shoal_components::peer::PeerId;
use shoal_components::sctp::dcep::{ChannelType, Reliability};
use shoal_components::tick::ShardEvent;
use shoal_server::sim::{LinkConfig, Sim};

const SRV: &str = "10.0.0.1:7100";
const CLI: &str = "10.0.0.2:50000";

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn established(seed: u64, loss: f64) -> Sim {
    let mut sim = Sim::new(seed);
    sim.add_shard(addr(SRV));
    sim.add_shard(addr(CLI));
    sim.set_link_both(
        addr(SRV),
        addr(CLI),
        LinkConfig::lossy(Duration::from_millis(20), loss),
    );
    // The server shard is the DTLS server, as with a browser's actpass offer.
    sim.connect_dtls(addr(SRV), addr(CLI), PeerId(1), DtlsRole::Server)
        .unwrap();
    sim.run_until(
        |s| {
            s.shard(addr(SRV)).sctp_established(PeerId(1))
                && s.shard(addr(CLI)).sctp_established(PeerId(1))
        },
        Duration::from_secs(60),
    )
    .unwrap();
    sim.drain_events().count();
    sim
}

#[test]
fn channels_open_both_ways_and_carry_every_ppid() {
    for seed in 0..20 {
        let mut sim = established(seed, 0.05);
        let id = PeerId(1);
        let reliable = ChannelType {
            ordered: true,
            reliability: Reliability::Reliable,
        };
        let lossy = ChannelType {
            ordered: false,
            reliability: Reliability::MaxRetransmits(3),
        };
        // RFC 8831 §6.5: the DTLS client (the client shard here) takes even ids, the
        // server odd ones.
        let c0 = sim
            .shard_mut(addr(CLI))
            .open_channel(id, "chat", "json", reliable)
            .unwrap();
        let c2 = sim
            .shard_mut(addr(CLI))
            .open_channel(id, "game", "", lossy)
            .unwrap();
        let s1 = sim
            .shard_mut(addr(SRV))
            .open_channel(id, "from-sfu", "x", reliable)
            .unwrap();
        assert_eq!((c0, c2, s1), (0, 2, 1));
        // Data may follow the OPEN at once, in every PPID form (RFC 8831 §6.6).
        let cli = sim.shard_mut(addr(CLI));
        cli.channel_send(id, c0, false, Bytes::from_static(b"hello"))
            .unwrap();
        cli.channel_send(id, c0, false, Bytes::new()).unwrap();
        cli.channel_send(id, c0, true, Bytes::from_static(&[1, 2, 3]))
            .unwrap();
        cli.channel_send(id, c0, true, Bytes::new()).unwrap();
        let mut opened_at_srv = Vec::new();
        let mut opened_at_cli = Vec::new();
        let mut msgs = Vec::new();
        sim.run_until(
            |s| {
                for (node, e) in s.drain_events() {
                    match e {
                        ShardEvent::ChannelOpen {
                            channel,
                            label,
                            protocol,
                            ..
                        } => {
                            if node == addr(SRV) {
                                opened_at_srv.push((channel, label, protocol));
                            } else {
                                opened_at_cli.push((channel, label, protocol));
                            }
                        }
                        ShardEvent::ChannelMessage {
                            channel,
                            binary,
                            payload,
                            ..
                        } if node == addr(SRV) => {
                            msgs.push((channel, binary, payload));
                        }
                        _ => {}
                    }
                }
                opened_at_srv.len() == 3 && opened_at_cli.len() == 3 && msgs.len() == 4
            },
            Duration::from_secs(60),
        )
        .unwrap_or_else(|e| {
            panic!("seed {seed}: {e:?} {opened_at_srv:?} {opened_at_cli:?} {msgs:?}")
        });
        opened_at_srv.sort();
        opened_at_cli.sort();
        let expect = vec![
            (0, "chat".to_string(), "json".to_string()),
            (1, "from-sfu".to_string(), "x".to_string()),
            (2, "game".to_string(), String::new()),
        ];
        // The opener hears of its channel from the ACK, the other side from the OPEN.
        assert_eq!(opened_at_srv, expect, "seed {seed}");
        assert_eq!(opened_at_cli, expect, "seed {seed}");
        assert_eq!(
            msgs,
            vec![
                (0, false, Bytes::from_static(b"hello")),
                (0, false, Bytes::new()),
                (0, true, Bytes::from_static(&[1, 2, 3])),
                (0, true, Bytes::new()),
            ],
            "seed {seed}"
        );
    }
}

#[test]
fn a_message_over_max_message_size_is_refused_clearly() {
    let mut sim = established(1, 0.0);
    let id = PeerId(1);
    let kind = ChannelType {
        ordered: true,
        reliability: Reliability::Reliable,
    };
    let c = sim
        .shard_mut(addr(CLI))
        .open_channel(id, "big", "", kind)
        .unwrap();
    let max = 256 * 1024;
    let err = sim
        .shard_mut(addr(CLI))
        .channel_send(id, c, true, Bytes::from(vec![0u8; max + 1]))
        .unwrap_err();
    assert_eq!(err, ChannelError::TooLarge { size: max + 1, max });
    // Exactly the limit goes through.
    sim.shard_mut(addr(CLI))
        .channel_send(id, c, true, Bytes::from(vec![7u8; max]))
        .unwrap();
    let mut got = None;
    sim.run_until(
        |s| {
            for (_, e) in s.drain_events() {
                if let ShardEvent::ChannelMessage { payload, .. } = e {
                    got = Some(payload);
                }
            }
            got.is_some()
        },
        Duration::from_secs(30),
    )
    .unwrap();
    assert_eq!(got.unwrap().len(), max);
}

#[test]
fn sim_channel_open_close() {
    for seed in 0..30 {
        let mut sim = established(100 + seed, 0.05);
        let id = PeerId(1);
        let kind = ChannelType {
            ordered: true,
            reliability: Reliability::Reliable,
        };
        let c = sim
            .shard_mut(addr(CLI))
            .open_channel(id, "one", "p1", kind)
            .unwrap();
        let s = sim
            .shard_mut(addr(SRV))
            .open_channel(id, "two", "p2", kind)
            .unwrap();
        assert_eq!((c, s), (0, 1));
        for i in 0..5u8 {
            sim.shard_mut(addr(CLI))
                .channel_send(id, c, true, Bytes::from(vec![i; 300]))
                .unwrap();
        }
        // Close at once: what was queued still arrives first (RFC 6525 via RFC 8831
        // §6.7), then both sides see the channel closed. The server closes its own
        // channel as well, from the other side.
        sim.shard_mut(addr(CLI)).close_channel(id, c).unwrap();
        let mut delivered = Vec::new();
        let mut closed = Vec::new();
        let mut opened = 0;
        sim.run_until(
            |s_| {
                for (node, e) in s_.drain_events() {
                    match e {
                        ShardEvent::ChannelOpen { .. } => opened += 1,
                        ShardEvent::ChannelMessage {
                            channel, payload, ..
                        } if node == addr(SRV) => delivered.push((channel, payload[0])),
                        ShardEvent::ChannelClosed { channel, .. } => closed.push((node, channel)),
                        _ => {}
                    }
                }
                // Channel 0 may close before its ACK arrives: then its opener never
                // reports it open.
                closed.len() == 2 && opened >= 3
            },
            Duration::from_secs(60),
        )
        .unwrap_or_else(|e| panic!("seed {seed}: {e:?} closed {closed:?} delivered {delivered:?}"));
        assert_eq!(
            delivered,
            (0..5u8).map(|i| (0, i)).collect::<Vec<_>>(),
            "seed {seed}"
        );
        closed.sort();
        assert_eq!(closed, vec![(addr(SRV), 0), (addr(CLI), 0)], "seed {seed}");
        sim.shard_mut(addr(SRV)).close_channel(id, s).unwrap();
        let mut closed = Vec::new();
        sim.run_until(
            |s_| {
                for (node, e) in s_.drain_events() {
                    if let ShardEvent::ChannelClosed { channel, .. } = e {
                        closed.push((node, channel));
                    }
                }
                closed.len() == 2
            },
            Duration::from_secs(60),
        )
        .unwrap_or_else(|e| panic!("seed {seed}: {e:?} {closed:?}"));
        // Stream 0 is free again: a new channel takes it, and its messages arrive
        // in order from SSN 0 (a stream whose SSN was not reset would stall here).
        let again = sim
            .shard_mut(addr(CLI))
            .open_channel(id, "again", "", kind)
            .unwrap();
        assert_eq!(again, 0, "seed {seed}");
        for i in 0..3u8 {
            sim.shard_mut(addr(CLI))
                .channel_send(id, again, false, Bytes::from(vec![b'a' + i]))
                .unwrap();
        }
        let mut got = Vec::new();
        let mut label = None;
        sim.run_until(
            |s_| {
                for (node, e) in s_.drain_events() {
                    match e {
                        ShardEvent::ChannelOpen { label: l, .. } if node == addr(SRV) => {
                            label = Some(l)
                        }
                        ShardEvent::ChannelMessage {
                            channel: 0,
                            payload,
                            ..
                        } if node == addr(SRV) => got.push(payload[0]),
                        _ => {}
                    }
                }
                got.len() == 3
            },
            Duration::from_secs(60),
        )
        .unwrap_or_else(|e| panic!("seed {seed}: reuse {e:?} {got:?}"));
        assert_eq!(got, b"abc".to_vec(), "seed {seed}");
        assert_eq!(label.as_deref(), Some("again"), "seed {seed}");
    }
}

#[test]
fn buffered_amount_low_fires_when_the_queue_drains() {
    let mut sim = established(7, 0.02);
    let id = PeerId(1);
    let kind = ChannelType {
        ordered: true,
        reliability: Reliability::Reliable,
    };
    let c = sim
        .shard_mut(addr(CLI))
        .open_channel(id, "bulk", "", kind)
        .unwrap();
    let low = 16 * 1024;
    sim.shard_mut(addr(CLI))
        .set_buffered_amount_low_threshold(id, c, low);
    for _ in 0..64 {
        sim.shard_mut(addr(CLI))
            .channel_send(id, c, true, Bytes::from(vec![1u8; 4096]))
            .unwrap();
    }
    assert!(sim.shard(addr(CLI)).channel_buffered_amount(id, c) > low);
    let mut fired_at = None;
    sim.run_until(
        |s| {
            let fired = s.drain_events().any(|(node, e)| {
                node == addr(CLI)
                    && matches!(e, ShardEvent::BufferedAmountLow { stream, .. } if stream == c)
            });
            if fired {
                fired_at = Some(s.shard(addr(CLI)).channel_buffered_amount(id, c));
            }
            fired_at.is_some()
        },
        Duration::from_secs(30),
    )
    .unwrap();
    // It fires once the queue is at or below the threshold, not before.
    assert!(fired_at.unwrap() <= low, "{fired_at:?}");
}
