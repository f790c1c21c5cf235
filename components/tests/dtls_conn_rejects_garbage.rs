//! Over 100 000 random and mutated datagrams fed to `DtlsConn` in both roles and at
//! several points of the handshake: before any message, mid-handshake, and connected.
//! The inputs are mutations of a real handshake recorded between two connections
//! (same randoms and certificates, so unmutated flights are accepted and the mutants
//! reach deep into the state machine). Nothing panics, every failure is a typed
//! error, and no application data ever surfaces before the handshake completes.

mod dtls_util;

use std::sync::Arc;

use bytes::Bytes;
use dtls_util::certs;
use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};
use shoal_components::dtls::{DtlsConfig, DtlsConn, DtlsEvent, DtlsRole};
use shoal_components::time::Time;

const CLIENT_RANDOM: [u8; 32] = [0x11; 32];
const SERVER_RANDOM: [u8; 32] = [0x22; 32];

fn new_conn(role: DtlsRole) -> DtlsConn {
    let (ccert, scert) = certs();
    let cfg = Arc::new(DtlsConfig {
        mtu: 600, // fragmented flights
        ..DtlsConfig::default()
    });
    match role {
        DtlsRole::Client => DtlsConn::new(
            role,
            cfg,
            ccert,
            scert.fingerprint_sha256(),
            CLIENT_RANDOM,
            Time::ZERO,
        ),
        DtlsRole::Server => DtlsConn::new(
            role,
            cfg,
            scert,
            ccert.fingerprint_sha256(),
            SERVER_RANDOM,
            Time::ZERO,
        ),
    }
}

fn drain(c: &mut DtlsConn) -> Vec<Bytes> {
    std::iter::from_fn(|| c.poll_transmit()).collect()
}

/// A recorded handshake plus some application data: (client → server, server →
/// client) datagrams, in order.
fn record_handshake() -> (Vec<Bytes>, Vec<Bytes>) {
    let mut client = new_conn(DtlsRole::Client);
    let mut server = new_conn(DtlsRole::Server);
    let (mut to_server, mut to_client) = (Vec::new(), Vec::new());
    for _ in 0..10 {
        for d in drain(&mut client) {
            server.handle_datagram(Time::ZERO, &d).unwrap();
            to_server.push(d);
        }
        for d in drain(&mut server) {
            client.handle_datagram(Time::ZERO, &d).unwrap();
            to_client.push(d);
        }
    }
    assert!(client.is_connected() && server.is_connected());
    client
        .send_application_data(b"application data from the client")
        .unwrap();
    server
        .send_application_data(b"application data from the server")
        .unwrap();
    to_server.extend(drain(&mut client));
    to_client.extend(drain(&mut server));
    (to_server, to_client)
}

fn mutate(rng: &mut ChaCha8Rng, seed: &[u8]) -> Vec<u8> {
    let mut d = seed.to_vec();
    let pick = |rng: &mut ChaCha8Rng, n: usize| (rng.next_u32() as usize) % n.max(1);
    match rng.next_u32() % 6 {
        0 => {
            let n = pick(rng, 1500);
            (0..n).map(|_| rng.next_u32() as u8).collect()
        }
        1 => {
            for _ in 0..1 + pick(rng, 4) {
                let i = pick(rng, d.len());
                if let Some(b) = d.get_mut(i) {
                    *b ^= 1 << (rng.next_u32() % 8);
                }
            }
            d
        }
        2 => {
            let i = pick(rng, d.len());
            if let Some(b) = d.get_mut(i) {
                *b = [0, 1, 0x7f, 0x80, 0xfe, 0xff][pick(rng, 6)];
            }
            d
        }
        3 => {
            d.truncate(pick(rng, d.len() + 1));
            d
        }
        4 => {
            // Header fields: epoch, sequence number, lengths, handshake fields.
            for at in [3usize, 4, 10, 11, 12, 14, 16, 18, 21, 24] {
                if rng.next_u32().is_multiple_of(3)
                    && let Some(b) = d.get_mut(at)
                {
                    *b = rng.next_u32() as u8;
                }
            }
            d
        }
        _ => d, // unmutated: a plain duplicate or replay
    }
}

/// The stages a target connection is driven to before it receives garbage.
#[derive(Clone, Copy, Debug)]
enum Stage {
    ServerFresh,
    ServerAfterHello,
    ClientFresh,
    ClientAfterServerFlight,
    ServerConnected,
    ClientConnected,
}

const STAGES: [Stage; 6] = [
    Stage::ServerFresh,
    Stage::ServerAfterHello,
    Stage::ClientFresh,
    Stage::ClientAfterServerFlight,
    Stage::ServerConnected,
    Stage::ClientConnected,
];

struct Target {
    stage: Stage,
    conn: DtlsConn,
    connected: bool,
}

fn build(stage: Stage, to_server: &[Bytes], to_client: &[Bytes]) -> DtlsConn {
    match stage {
        Stage::ServerFresh => new_conn(DtlsRole::Server),
        Stage::ClientFresh => new_conn(DtlsRole::Client),
        Stage::ServerAfterHello => {
            let mut s = new_conn(DtlsRole::Server);
            s.handle_datagram(Time::ZERO, &to_server[0]).unwrap();
            drain(&mut s);
            s
        }
        Stage::ClientAfterServerFlight => {
            // Same random and certificate: the recorded server flight verifies.
            let mut c = new_conn(DtlsRole::Client);
            drain(&mut c);
            for d in to_client.iter().take_while(|d| d[3..5] == [0, 0]) {
                let _ = c.handle_datagram(Time::ZERO, d);
            }
            drain(&mut c);
            c
        }
        Stage::ServerConnected | Stage::ClientConnected => {
            let mut client = new_conn(DtlsRole::Client);
            let mut server = new_conn(DtlsRole::Server);
            for _ in 0..10 {
                for d in drain(&mut client) {
                    server.handle_datagram(Time::ZERO, &d).unwrap();
                }
                for d in drain(&mut server) {
                    client.handle_datagram(Time::ZERO, &d).unwrap();
                }
            }
            assert!(client.is_connected() && server.is_connected());
            match stage {
                Stage::ServerConnected => server,
                _ => client,
            }
        }
    }
}

#[test]
fn dtls_conn_rejects_garbage() {
    let (to_server, to_client) = record_handshake();
    assert!(to_server.len() >= 3 && to_client.len() >= 3);
    let mut rng = ChaCha8Rng::seed_from_u64(0x5eed);
    let mut targets: Vec<Target> = STAGES
        .iter()
        .map(|&stage| Target {
            stage,
            conn: build(stage, &to_server, &to_client),
            connected: matches!(stage, Stage::ServerConnected | Stage::ClientConnected),
        })
        .collect();
    let mut now = Time::ZERO;
    let mut errors = 0u64;
    let mut rebuilt = 0u64;
    let rounds = 120_000;
    for i in 0..rounds {
        let t = &mut targets[i % STAGES.len()];
        let seeds = match t.conn.role() {
            DtlsRole::Server => &to_server,
            DtlsRole::Client => &to_client,
        };
        let seed = &seeds[(rng.next_u32() as usize) % seeds.len()];
        let input = mutate(&mut rng, seed);
        now = now + std::time::Duration::from_micros(100);
        if t.conn.handle_datagram(now, &input).is_err() {
            errors += 1;
        }
        if i % 64 == 0 {
            t.conn.handle_timeout(now);
        }
        drain(&mut t.conn);
        let mut dead = false;
        while let Some(e) = t.conn.poll_event() {
            match e {
                DtlsEvent::ApplicationData(_) => assert!(
                    t.connected || t.conn.is_connected(),
                    "{:?}: application data before the handshake completed",
                    t.stage
                ),
                DtlsEvent::Connected { .. } => t.connected = true,
                DtlsEvent::Closed { .. } | DtlsEvent::Failed(_) => dead = true,
            }
        }
        if dead {
            t.conn = build(t.stage, &to_server, &to_client);
            t.connected = matches!(t.stage, Stage::ServerConnected | Stage::ClientConnected);
            rebuilt += 1;
        }
    }
    let stats: Vec<_> = targets.iter().map(|t| t.conn.stats()).collect();
    eprintln!("{rounds} inputs, {errors} handshake failures, {rebuilt} rebuilt; {stats:?}");
    assert!(errors > 0, "mutants never reached a handshake check");
}
