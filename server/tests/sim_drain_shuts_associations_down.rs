//! A draining shard (`Shard::drain`, what SIGTERM starts) closes each peer the way
//! RFC 9260 §9.2 and RFC 5246 §7.2.1 say, in the simulated network:
//!
//! - Over lossy links (40 seeds, 5–15 % loss): messages queued before the drain are
//!   all delivered, in order, before the SHUTDOWN; the association ends with
//!   SHUTDOWN on both sides (SHUTDOWN, SHUTDOWN ACK, SHUTDOWN COMPLETE); then the
//!   peer gets close_notify (its side reports DTLS closed; a lost alert leaves it to
//!   consent expiry) and the draining side removes it as drained. No message is sent after the drain starts, and no new
//!   peer is taken.
//! - With the peer gone silent: the peer is removed all the same, by T2-shutdown
//!   giving up after Association.Max.Retrans (consent out of the way) or by consent
//!   expiry (30 s), whichever comes first; a draining shard takes no new peer.
//! - With the peer restarting its association during the drain: the new one is
//!   shut down too.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use rand_chacha::ChaCha12Rng;
use rand_core::SeedableRng;
use shoal_components::dtls::DtlsRole;
use shoal_components::peer::PeerId;
use shoal_components::sctp::assoc::AssocEnd;
use shoal_components::sctp::tx::Reliability;
use shoal_components::tick::{RemoveReason, ShardEvent};
use shoal_server::endpoint::pair_specs;
use shoal_server::sim::{LinkConfig, Sim, Time};
use shoal_systems::{Command, CommandError, ShardConfig};

const SRV: &str = "10.0.0.1:7100";
const CLI: &str = "10.0.0.2:50000";
const ID: PeerId = PeerId(1);
/// Messages the draining side has queued when the drain starts.
const QUEUED: usize = 60;

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// What one side's shard reported about the peer.
#[derive(Debug, Default, Clone)]
struct Side {
    closed: Vec<AssocEnd>,
    removed: Option<RemoveReason>,
    got: Vec<Bytes>,
}

fn take(sim: &mut Sim, log: &mut [Side; 2]) {
    for (node, e) in sim.drain_events() {
        let side = &mut log[usize::from(node != addr(SRV))];
        match e {
            ShardEvent::SctpClosed { reason, .. } => side.closed.push(reason),
            ShardEvent::PeerRemoved { reason, .. } => side.removed = Some(reason),
            ShardEvent::SctpMessage {
                stream: 1, payload, ..
            } => side.got.push(payload),
            _ => {}
        }
    }
}

/// Two shards with an association up over `link`.
fn connected(seed: u64, link: LinkConfig) -> (Sim, [Side; 2]) {
    let mut sim = Sim::new(seed);
    sim.add_shard(addr(SRV));
    sim.add_shard(addr(CLI));
    sim.set_link_both(addr(SRV), addr(CLI), link);
    sim.connect_dtls(addr(SRV), addr(CLI), ID, DtlsRole::Server)
        .unwrap();
    let mut log: [Side; 2] = Default::default();
    sim.run_until(
        |s| {
            take(s, &mut log);
            [SRV, CLI]
                .iter()
                .all(|&a| s.shard(addr(a)).sctp_established(ID))
        },
        Duration::from_secs(120),
    )
    .unwrap_or_else(|e| panic!("seed {seed}: not up: {e}"));
    (sim, log)
}

fn message(k: usize) -> Bytes {
    Bytes::from(format!("queued {k} {}", "x".repeat(k * 37 % 900)))
}

/// One drain over `link`; true if the peer got the close_notify.
fn drain_over(seed: u64, link: LinkConfig) -> bool {
    let (mut sim, mut log) = connected(seed, link);
    let srv = addr(SRV);
    for k in 0..QUEUED {
        sim.shard_mut(srv)
            .sctp_send(ID, 1, 53, message(k), false, Reliability::Reliable)
            .unwrap();
    }
    sim.shard_mut(srv).drain();
    assert!(sim.shard(srv).is_draining());
    // SHUTDOWN-PENDING: no new user message.
    assert!(
        sim.shard_mut(srv)
            .sctp_send(
                ID,
                1,
                53,
                Bytes::from_static(b"late"),
                false,
                Reliability::Reliable
            )
            .is_err(),
        "seed {seed}: a message taken after the drain started"
    );
    sim.run_until(
        |s| {
            take(s, &mut log);
            log[0].removed.is_some() && log[1].removed.is_some()
        },
        Duration::from_secs(300),
    )
    .unwrap_or_else(|e| panic!("seed {seed}: not closed: {e}: {log:?}"));
    let want: Vec<Bytes> = (0..QUEUED).map(message).collect();
    assert_eq!(log[1].got, want, "seed {seed}: queued messages, in order");
    assert_eq!(log[0].closed, [AssocEnd::Shutdown], "seed {seed}: drainer");
    // The peer sent the SHUTDOWN ACK (the drainer ended by it, not by giving up);
    // its own SHUTDOWN COMPLETE and the close_notify right behind it may arrive in
    // one batch, in which case the close removes its peer before its association
    // reports the end.
    assert!(
        log[1].closed.is_empty() || log[1].closed == [AssocEnd::Shutdown],
        "seed {seed}: peer {:?}",
        log[1].closed
    );
    assert_eq!(log[0].removed, Some(RemoveReason::Drained), "seed {seed}");
    assert_eq!(sim.shard(srv).peer_count(), 0);
    // The peer learned by close_notify; a lost alert (it is sent once, DTLS does not
    // retransmit alerts) leaves it to consent expiry (RFC 7675 §5.1).
    let removed = log[1].removed;
    assert!(
        matches!(
            removed,
            Some(RemoveReason::DtlsClosed | RemoveReason::ConsentExpired)
        ),
        "seed {seed}: {removed:?}"
    );
    removed == Some(RemoveReason::DtlsClosed)
}

#[test]
fn sim_drain_shuts_associations_down() {
    // Without loss the close_notify always arrives.
    assert!(drain_over(
        599,
        LinkConfig::lossy(Duration::from_millis(30), 0.0)
    ));
    let mut notified = 0;
    for seed in 0..40u64 {
        let latency = Duration::from_millis(10 + (seed % 5) * 20);
        let link = LinkConfig {
            latency,
            jitter: latency / 4,
            loss: 0.05 + (seed % 3) as f64 * 0.05,
            reorder: 0.05,
            ..LinkConfig::default()
        };
        notified += usize::from(drain_over(600 + seed, link));
    }
    // At most 15 % loss, most alerts arrive.
    assert!(notified >= 28, "close_notify reached {notified} of 40");
    silent_peer();
    restarted_during_the_drain();
}

/// The peer restarts its association (RFC 9260 §5.2.4 A) while the drain waits on
/// it: the new association is shut down too, and the peer is closed.
fn restarted_during_the_drain() {
    let (mut sim, mut log) = connected(11, LinkConfig::lossy(Duration::from_millis(20), 0.0));
    let srv = addr(SRV);
    sim.shard_mut(srv).drain();
    sim.shard_mut(addr(CLI)).forget_sctp(ID, true).unwrap();
    sim.run_until(
        |s| {
            take(s, &mut log);
            log[0].removed.is_some()
        },
        Duration::from_secs(120),
    )
    .unwrap_or_else(|e| panic!("restarted: never closed: {e}: {log:?}"));
    assert_eq!(log[0].removed, Some(RemoveReason::Drained), "{log:?}");
    assert!(
        sim.now() < Time::ZERO + Duration::from_secs(60),
        "{:?}",
        sim.now()
    );
}

/// The peer vanishes as the drain starts. With consent out of the way (its
/// timeout an hour here), T2-shutdown expires Association.Max.Retrans + 1 times,
/// the association is given up, and the peer is removed as drained; with the
/// default 30 s consent timeout, consent expiry gets there first. A draining shard
/// takes no new peer.
fn silent_peer() {
    for consent in [
        Duration::from_secs(3600),
        ShardConfig::new(addr(SRV), 0).consent_timeout,
    ] {
        let mut sim = Sim::new(9);
        let mut config = ShardConfig::new(addr(SRV), 9);
        config.consent_timeout = consent;
        sim.add_shard_with(config);
        sim.add_shard(addr(CLI));
        sim.set_link_both(
            addr(SRV),
            addr(CLI),
            LinkConfig::lossy(Duration::from_millis(20), 0.0),
        );
        sim.connect_dtls(addr(SRV), addr(CLI), ID, DtlsRole::Server)
            .unwrap();
        let mut log: [Side; 2] = Default::default();
        sim.run_until(
            |s| {
                take(s, &mut log);
                s.shard(addr(SRV)).sctp_established(ID)
            },
            Duration::from_secs(60),
        )
        .unwrap();
        let srv = addr(SRV);
        sim.set_link_both(
            srv,
            addr(CLI),
            LinkConfig::lossy(Duration::from_millis(20), 1.0),
        );
        let started = sim.now();
        sim.shard_mut(srv).drain();
        // No new peer on a draining shard.
        let (spec, _) = pair_specs(
            PeerId(2),
            srv,
            [1; 32],
            [2; 32],
            &mut ChaCha12Rng::seed_from_u64(2),
        );
        let now = sim.now();
        assert_eq!(
            sim.shard_mut(srv).command(now, Command::AddPeer(spec)),
            Err(CommandError::Draining)
        );
        sim.run_until(
            |s| {
                take(s, &mut log);
                log[0].removed.is_some()
            },
            Duration::from_secs(3600),
        )
        .unwrap_or_else(|e| panic!("silent peer: never removed: {e}: {log:?}"));
        let took = sim.now().saturating_since(started);
        if consent > Duration::from_secs(600) {
            assert_eq!(log[0].closed, [AssocEnd::PeerUnreachable], "{log:?}");
            assert_eq!(log[0].removed, Some(RemoveReason::Drained));
            // Eleven T2 expiries, backing off, within a bound.
            assert!(took < Duration::from_secs(300), "{took:?}");
            assert_eq!(sim.shard(srv).stats().sctp_t3_expiries, 0);
        } else {
            assert_eq!(
                log[0].removed,
                Some(RemoveReason::ConsentExpired),
                "{log:?}"
            );
            assert!(took <= consent + Duration::from_secs(1), "{took:?}");
        }
        assert_eq!(sim.shard(srv).peer_count(), 0);
    }
}
