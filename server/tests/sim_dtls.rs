//! DTLS through whole shards in the simulated network: ICE first, then the
//! handshake on the nominated path, under loss and reordering, in every role
//! assignment, suite and curve.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use shoal_components::dtls::{CipherSuite, DtlsConfig, DtlsRole, NamedGroup, SrtpProfile};
use shoal_components::peer::{IceCredentials, IceRole, PeerId};
use shoal_components::tick::{RemoveReason, ShardEvent};
use shoal_server::sim::{LinkConfig, Sim};
use shoal_systems::{Command, PeerDtls, PeerSpec, ShardConfig};

const SRV: &str = "10.0.0.1:7100";
const CLI: &str = "10.0.0.2:50000";

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// Seeds to run: 1 000 by default (what CI runs); `SHOAL_SIM_SEEDS` for more (3 000
/// pass).
fn seeds() -> u64 {
    std::env::var("SHOAL_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1000)
}

fn lossy() -> LinkConfig {
    LinkConfig {
        latency: Duration::from_millis(30),
        jitter: Duration::from_millis(10),
        loss: 0.20,
        reorder: 0.10,
        ..LinkConfig::default()
    }
}

#[test]
fn sim_dtls_handshake_both_roles_under_loss() {
    let mut failures = Vec::new();
    let mut handshakes = 0;
    for seed in 0..seeds() {
        for server_role in [DtlsRole::Server, DtlsRole::Client] {
            for suite in [
                CipherSuite::EcdheEcdsaAes128GcmSha256,
                CipherSuite::EcdheEcdsaAes256GcmSha384,
            ] {
                for group in [NamedGroup::X25519, NamedGroup::Secp256r1] {
                    let mut sim = Sim::new(seed);
                    sim.add_shard(addr(SRV));
                    // The client endpoint offers (as client) or accepts (as server)
                    // only this suite and curve, so the handshake must use them.
                    let mut cfg = ShardConfig::new(addr(CLI), 0);
                    cfg.dtls = Arc::new(DtlsConfig {
                        cipher_suites: vec![suite],
                        groups: vec![group],
                        ..DtlsConfig::default()
                    });
                    sim.add_shard_with(cfg);
                    sim.set_link_both(addr(SRV), addr(CLI), lossy());
                    let id = PeerId(1);
                    sim.connect_dtls(addr(SRV), addr(CLI), id, server_role)
                        .unwrap();
                    let done = sim.run_until(
                        |s| {
                            s.shard(addr(SRV)).dtls_connected(id)
                                && s.shard(addr(CLI)).dtls_connected(id)
                        },
                        Duration::from_secs(90),
                    );
                    handshakes += 1;
                    let label = format!("seed {seed} {server_role:?} {suite:?} {group:?}");
                    if done.is_err() {
                        failures.push(format!("{label}: no handshake by {:?}", sim.now()));
                        continue;
                    }
                    let (srv, cli) = (sim.shard(addr(SRV)), sim.shard(addr(CLI)));
                    let (k1, k2) = (srv.srtp_keys(id), cli.srtp_keys(id));
                    if k1.is_none() || k1 != k2 {
                        failures.push(format!("{label}: SRTP keys differ or are missing"));
                    }
                    // shoal prefers an AEAD profile whichever side it plays.
                    if k1.as_ref().map(|k| k.profile) != Some(SrtpProfile::AeadAes128Gcm) {
                        failures.push(format!("{label}: profile {:?}", k1.map(|k| k.profile)));
                    }
                    if srv.dtls_cipher_suite(id) != Some(suite)
                        || cli.dtls_cipher_suite(id) != Some(suite)
                    {
                        failures.push(format!("{label}: suite {:?}", srv.dtls_cipher_suite(id)));
                    }
                    let connected = sim
                        .drain_events()
                        .filter(|(_, e)| matches!(e, ShardEvent::DtlsConnected { peer, srtp_profile: Some(7) } if *peer == id))
                        .count();
                    if connected != 2 {
                        failures.push(format!("{label}: {connected} DtlsConnected events"));
                    }
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {handshakes} failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert_eq!(handshakes, seeds() * 8);
}

fn spec(
    id: u64,
    role: IceRole,
    l: (&str, &str),
    r: (&str, &str),
    cand: Vec<SocketAddr>,
    dtls: PeerDtls,
) -> PeerSpec {
    PeerSpec {
        id: PeerId(id),
        role,
        credentials: IceCredentials {
            local_ufrag: l.0.into(),
            local_pwd: l.1.into(),
            remote_ufrag: r.0.into(),
            remote_pwd: r.1.into(),
        },
        remote_candidates: cand,
        dtls: Some(dtls),
        room: None,
        may_send_data: true,
        link: false,
    }
}

#[test]
fn a_peer_with_the_wrong_certificate_is_removed_and_others_are_served() {
    let mut sim = Sim::new(3);
    let cli2: SocketAddr = addr("10.0.0.3:50000");
    sim.add_shard(addr(SRV));
    sim.add_shard(addr(CLI));
    sim.add_shard(cli2);
    sim.set_default_link(LinkConfig::lossy(Duration::from_millis(20), 0.05));
    sim.set_link_both(
        addr(SRV),
        cli2,
        LinkConfig::lossy(Duration::from_millis(20), 0.0),
    );
    // Peer 1: an honest pair.
    sim.connect_dtls(addr(SRV), addr(CLI), PeerId(1), DtlsRole::Server)
        .unwrap();
    // Peer 2: signalling said the client's certificate has another fingerprint.
    let srv_fp = sim.shard(addr(SRV)).fingerprint();
    let mut wrong = sim.shard(cli2).fingerprint();
    wrong[0] ^= 0xff;
    let (s, c) = (
        ("srv2", "serverpassword2serverpw"),
        ("cli2", "clientpassword2clientpw"),
    );
    sim.command(
        addr(SRV),
        Command::AddPeer(spec(
            2,
            IceRole::Lite,
            s,
            c,
            vec![],
            PeerDtls {
                role: DtlsRole::Server,
                remote_fingerprint: wrong,
                max_message_size: None,
                srtp_required: false,
            },
        )),
    )
    .unwrap();
    sim.command(
        cli2,
        Command::AddPeer(spec(
            2,
            IceRole::Controlling,
            c,
            s,
            vec![addr(SRV)],
            PeerDtls {
                role: DtlsRole::Client,
                remote_fingerprint: srv_fp,
                max_message_size: None,
                srtp_required: false,
            },
        )),
    )
    .unwrap();
    let mut removed = None;
    let mut client_removed = None;
    sim.run_until(
        |s| {
            let now = s.now();
            for (node, e) in s.drain_events() {
                if let ShardEvent::PeerRemoved {
                    peer: PeerId(2),
                    reason,
                } = e
                {
                    if node == addr(SRV) {
                        removed = Some((reason, now));
                    } else if node == cli2 {
                        client_removed = Some((reason, now));
                    }
                }
            }
            removed.is_some()
                && client_removed.is_some()
                && s.shard(addr(SRV)).dtls_connected(PeerId(1))
        },
        Duration::from_secs(60),
    )
    .unwrap();
    let (reason, at) = removed.unwrap();
    assert_eq!(reason, RemoveReason::DtlsFailed);
    let srv = sim.shard(addr(SRV));
    assert!(srv.dtls_connected(PeerId(1)));
    assert_eq!(srv.ice_state(PeerId(2)), None);
    assert_eq!(srv.stats().dtls_failed, 1);
    assert!(srv.srtp_keys(PeerId(2)).is_none());
    // The failing side told the other with a fatal alert (the second client's link
    // is lossless): it closes at once, rather than when consent runs out.
    let (client_reason, client_at) = client_removed.unwrap();
    assert_eq!(client_reason, RemoveReason::DtlsClosed);
    assert!(
        client_at.saturating_since(at) < Duration::from_millis(100),
        "{client_at:?} vs {at:?}"
    );
}

/// A peer whose SDP has media (`srtp_required`) and whose DTLS client offers no SRTP
/// profile is refused during the handshake: the shard removes it as a DTLS failure
/// and the client hears a handshake_failure alert (RFC 5764 §4.1.1), rather than a
/// session that connects and can never carry media. A data-only peer from the same
/// client connects on DTLS alone.
#[test]
fn a_media_peer_without_srtp_is_refused_with_an_alert() {
    let mut sim = Sim::new(4);
    sim.add_shard(addr(SRV));
    // Two clients (one path each), neither offering use_srtp.
    let clients = [addr(CLI), addr("10.0.0.3:50000")];
    for (seed, at) in clients.iter().enumerate() {
        let mut cfg = ShardConfig::new(*at, seed as u64);
        cfg.dtls = Arc::new(DtlsConfig {
            srtp_profiles: Vec::new(),
            ..DtlsConfig::default()
        });
        sim.add_shard_with(cfg);
    }
    sim.set_default_link(LinkConfig::lossy(Duration::from_millis(20), 0.0));
    let srv_fp = sim.shard(addr(SRV)).fingerprint();
    for (id, required) in [(1u64, true), (2, false)] {
        let at = clients[id as usize - 1];
        let cli_fp = sim.shard(at).fingerprint();
        let s = (format!("srv{id}"), format!("serverpassword{id}serverpw"));
        let c = (format!("cli{id}"), format!("clientpassword{id}clientpw"));
        let server = spec(
            id,
            IceRole::Lite,
            (&s.0, &s.1),
            (&c.0, &c.1),
            vec![],
            PeerDtls {
                role: DtlsRole::Server,
                remote_fingerprint: cli_fp,
                max_message_size: None,
                srtp_required: required,
            },
        );
        let client = spec(
            id,
            IceRole::Controlling,
            (&c.0, &c.1),
            (&s.0, &s.1),
            vec![addr(SRV)],
            PeerDtls {
                role: DtlsRole::Client,
                remote_fingerprint: srv_fp,
                max_message_size: None,
                srtp_required: false,
            },
        );
        sim.command(addr(SRV), Command::AddPeer(server)).unwrap();
        sim.command(at, Command::AddPeer(client)).unwrap();
    }
    let mut removed = Vec::new();
    sim.run_until(
        |s| {
            for (node, e) in s.drain_events() {
                if let ShardEvent::PeerRemoved { peer, reason } = e {
                    removed.push((node, peer, reason));
                }
            }
            removed.len() == 2 && s.shard(addr(SRV)).dtls_connected(PeerId(2))
        },
        Duration::from_secs(30),
    )
    .unwrap_or_else(|e| {
        panic!(
            "{e:?}: removed {removed:?}, peer 2 connected {}",
            sim.shard(addr(SRV)).dtls_connected(PeerId(2))
        )
    });
    removed.sort_by_key(|r| r.0 != addr(SRV));
    assert_eq!(
        removed,
        vec![
            (addr(SRV), PeerId(1), RemoveReason::DtlsFailed),
            (addr(CLI), PeerId(1), RemoveReason::DtlsClosed),
        ]
    );
    let srv = sim.shard(addr(SRV));
    assert_eq!(srv.stats().dtls_failed, 1);
    assert!(srv.srtp_keys(PeerId(2)).is_none(), "data only: no keys");
}
