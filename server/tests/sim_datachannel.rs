//! Data channels over whole shards in the simulated network: DCEP open and
//! acknowledge in both directions, stream ids by DTLS role, the WebRTC PPIDs with
//! their empty forms, and the max-message-size limit.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use shoal_components::peer::PeerId;
use shoal_components::sctp::dcep::{ChannelType, Reliability};
use shoal_components::tick::ShardEvent;
use shoal_server::sim::{LinkConfig, Sim};
use shoal_systems::datachannel::ChannelError;
use shoal_systems::dtls::DtlsRole;

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
