//! Two shards wired back to back with no loss: a controlling client connects to an
//! ICE-lite server, and the server answers nothing that fails authentication.

use std::net::SocketAddr;
use std::time::Duration;

use shoal_components::net::Datagram;
use shoal_components::peer::{IceCredentials, IceRole, IceState, PeerId};
use shoal_components::tick::ShardEvent;
use shoal_components::time::Time;
use shoal_systems::{Command, PeerSpec, Shard, ShardConfig};

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn creds(flip: bool) -> IceCredentials {
    let (a, b) = (
        ("srvA", "serverpassword0123456789"),
        ("cliB", "clientpassword0123456789"),
    );
    let (l, r) = if flip { (b, a) } else { (a, b) };
    IceCredentials {
        local_ufrag: l.0.into(),
        local_pwd: l.1.into(),
        remote_ufrag: r.0.into(),
        remote_pwd: r.1.into(),
    }
}

/// A peer without DTLS or a room.
fn peer_spec(
    id: PeerId,
    role: IceRole,
    credentials: IceCredentials,
    remote_candidates: Vec<SocketAddr>,
    link: bool,
) -> PeerSpec {
    PeerSpec {
        id,
        role,
        credentials,
        remote_candidates,
        dtls: None,
        room: None,
        may_send_data: true,
        link,
    }
}

/// Moves every datagram between the two shards until both are idle or `until`.
fn pump(server: &mut Shard, client: &mut Shard, mut now: Time, until: Time) -> Time {
    let mut buf = Vec::new();
    let step = Duration::from_millis(10);
    while now < until {
        now = now + step;
        client.handle_timeout(now);
        server.handle_timeout(now);
        for _ in 0..4 {
            buf.clear();
            client.poll_transmit(&mut buf);
            let to_server: Vec<_> = buf
                .drain(..)
                .map(|d| Datagram {
                    local: d.remote,
                    remote: d.local,
                    payload: d.payload,
                })
                .collect();
            server.handle_datagrams(now, to_server);
            server.poll_transmit(&mut buf);
            let to_client: Vec<_> = buf
                .drain(..)
                .map(|d| Datagram {
                    local: d.remote,
                    remote: d.local,
                    payload: d.payload,
                })
                .collect();
            client.handle_datagrams(now, to_client);
        }
    }
    now
}

#[test]
fn controlling_client_connects_to_lite_server() {
    let s_addr = addr("10.0.0.1:7100");
    let c_addr = addr("10.0.0.2:50000");
    let mut server = Shard::new(ShardConfig::new(s_addr, 1));
    let mut client = Shard::new(ShardConfig::new(c_addr, 2));
    let id = PeerId(7);
    server
        .command(
            Time::ZERO,
            Command::AddPeer(peer_spec(id, IceRole::Lite, creds(false), vec![], false)),
        )
        .unwrap();
    client
        .command(
            Time::ZERO,
            Command::AddPeer(peer_spec(
                id,
                IceRole::Controlling,
                creds(true),
                vec![s_addr],
                false,
            )),
        )
        .unwrap();
    let now = pump(&mut server, &mut client, Time::ZERO, Time::from_millis(200));
    assert_eq!(server.ice_state(id), Some(IceState::Connected));
    assert_eq!(client.ice_state(id), Some(IceState::Connected));
    assert_eq!(server.selected_remote(id), Some(c_addr));
    assert_eq!(client.selected_remote(id), Some(s_addr));
    assert_eq!(
        server.poll_event(),
        Some(ShardEvent::IceConnected {
            peer: id,
            remote: c_addr
        })
    );
    // Consent checks keep both sides alive well past the 30 s timeout.
    let now = pump(&mut server, &mut client, now, now + Duration::from_secs(65));
    assert_eq!(server.ice_state(id), Some(IceState::Connected));
    assert!(server.stats().ice_checks_answered >= 2 + 10);
    // Silence: the server drops the peer once 30 s pass without a check.
    let mut t = now;
    let mut removed_at = None;
    while t < now + Duration::from_secs(40) {
        t = t + Duration::from_millis(100);
        server.handle_timeout(t);
        if let Some(ShardEvent::PeerRemoved { .. }) = server.poll_event() {
            removed_at = Some(t);
            break;
        }
    }
    let removed_at = removed_at.expect("consent expiry removes the peer");
    assert!(removed_at.saturating_since(now) >= Duration::from_secs(24));
    assert_eq!(server.ice_state(id), None);
    assert_eq!(server.peer_count(), 0);
    assert_eq!(server.stats().consent_expired, 1);
}

/// Two controlling peers of one shard checking the same lite shard, as the links of
/// two rooms between the same two nodes do: from the shard's one address they meet
/// on one path, which the lite side keeps for one of them; each from an address of
/// its own (`AddPeerFrom`), both connect, each on its own path.
#[test]
fn peers_checking_one_address_connect_from_addresses_of_their_own() {
    let s_addr = addr("10.0.0.1:7100");
    let c_addr = addr("10.0.0.2:50000");
    let own = [addr("10.0.0.2:50001"), addr("10.0.0.2:50002")];
    for from_own in [false, true] {
        let mut server = Shard::new(ShardConfig::new(s_addr, 1));
        let mut client = Shard::new(ShardConfig::new(c_addr, 2));
        for (i, local) in own.iter().enumerate() {
            let id = PeerId(i as u64 + 1);
            // Each pair its own credentials.
            let mut server_creds = creds(false);
            server_creds.local_ufrag = format!("srv{i}");
            server_creds.remote_ufrag = format!("cli{i}");
            let client_creds = IceCredentials {
                local_ufrag: server_creds.remote_ufrag.clone(),
                local_pwd: server_creds.remote_pwd.clone(),
                remote_ufrag: server_creds.local_ufrag.clone(),
                remote_pwd: server_creds.local_pwd.clone(),
            };
            let spec = |role, credentials, remote_candidates| {
                peer_spec(id, role, credentials, remote_candidates, true)
            };
            let lite = Command::AddPeer(spec(IceRole::Lite, server_creds, vec![]));
            server.command(Time::ZERO, lite).unwrap();
            let controlling = spec(IceRole::Controlling, client_creds, vec![s_addr]);
            let command = if from_own {
                Command::AddPeerFrom {
                    spec: controlling,
                    local: *local,
                }
            } else {
                Command::AddPeer(controlling)
            };
            client.command(Time::ZERO, command).unwrap();
        }
        pump(&mut server, &mut client, Time::ZERO, Time::from_millis(500));
        let (first, second) = (PeerId(1), PeerId(2));
        let connected = [first, second]
            .into_iter()
            .filter(|&p| server.ice_state(p) == Some(IceState::Connected))
            .count();
        if from_own {
            assert_eq!(connected, 2);
            assert_eq!(server.selected_remote(first), Some(own[0]));
            assert_eq!(server.selected_remote(second), Some(own[1]));
            assert_eq!(server.stats().stun_path_conflict, 0);
        } else {
            assert_eq!(connected, 1, "one path, one peer");
            assert!(server.stats().stun_path_conflict > 0);
        }
    }
    // A lite peer's paths are the ones its checks arrive on: it has none to name.
    let mut shard = Shard::new(ShardConfig::new(s_addr, 1));
    let lite = peer_spec(PeerId(1), IceRole::Lite, creds(false), vec![], false);
    let refused = shard.command(
        Time::ZERO,
        Command::AddPeerFrom {
            spec: lite,
            local: own[0],
        },
    );
    assert_eq!(refused, Err(shoal_systems::CommandError::LocalForLite));
}
