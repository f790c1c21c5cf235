//! SCTP through whole shards, part two: partial reliability and FORWARD TSN under
//! loss, one SACK per association per tick, and back-pressure with a bounded send
//! buffer and receive window.
//!
//! `sim_unordered_partial_reliability` runs in the simulated network, one server
//! shard sending to two client shards. The others drive two shards by hand over a
//! small wire of their own (`pair::Pair`), because they must hold datagrams back and
//! hand a whole burst to one tick, see what is on the wire, or set each end up
//! differently.

mod pair;

use std::collections::HashSet;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use shoal_components::dtls::DtlsRole;
use shoal_components::net::Datagram;
use shoal_components::peer::PeerId;
use shoal_components::sctp::assoc::SctpLimits;
use shoal_components::sctp::tx::{Reliability, SendError};
use shoal_components::stats::ShardStats;
use shoal_components::tick::ShardEvent;
use shoal_server::sim::{LinkConfig, Sim};
use shoal_systems::SctpSendError;

use pair::{CLI, PEER, Pair, SRV, addr};

fn seeds() -> u64 {
    std::env::var("SHOAL_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100)
}

/// A message that names its class and index and whose every byte can be checked:
/// `[class][index u32][len u32]` and then a pattern of both.
fn tagged(class: u8, index: u32, len: usize) -> Bytes {
    assert!(len >= 9);
    let mut v = Vec::with_capacity(len);
    v.push(class);
    v.extend_from_slice(&index.to_le_bytes());
    v.extend_from_slice(&(len as u32).to_le_bytes());
    v.extend((9..len).map(|k| pattern(class, index, k)));
    v.into()
}

fn pattern(class: u8, index: u32, k: usize) -> u8 {
    (index as usize * 31 + k * 7 + class as usize * 13) as u8
}

/// The class and index of an intact [`tagged`] message, or `None` if any byte is off.
fn untag(m: &[u8]) -> Option<(u8, u32)> {
    let class = *m.first()?;
    let index = u32::from_le_bytes(m.get(1..5)?.try_into().ok()?);
    let len = u32::from_le_bytes(m.get(5..9)?.try_into().ok()?) as usize;
    let intact = m.len() == len
        && m[9..]
            .iter()
            .enumerate()
            .all(|(k, &b)| b == pattern(class, index, k + 9));
    intact.then_some((class, index))
}

// ---------------------------------------------------------------------------------
// 1. Partial reliability
// ---------------------------------------------------------------------------------

/// The second client of the first test, and its peer on the server shard.
const CLI2: &str = "10.0.0.3:50000";
const PEER2: PeerId = PeerId(2);

/// One kind of message the first test sends: to whom, on which stream, with which
/// PPID, ordering and policy.
struct Class {
    peer: PeerId,
    stream: u16,
    ppid: u32,
    unordered: bool,
    policy: Reliability,
}

const LIFETIME: Reliability = Reliability::MaxLifetime(Duration::from_millis(200));

/// The server shard sends every class; the index into this table is the class byte
/// of the messages' payload.
const CLASSES: [Class; 6] = [
    // 0: to peer 1, sent once: abandoned as soon as it would be retransmitted.
    Class {
        peer: PEER,
        stream: 1,
        ppid: 51,
        unordered: true,
        policy: Reliability::MaxRetransmits(0),
    },
    // 1: to peer 1, timed reliability, ordered: an abandoned SSN must be skipped
    // (RFC 3758 §3.6) or the stream stalls.
    Class {
        peer: PEER,
        stream: 2,
        ppid: 52,
        unordered: false,
        policy: LIFETIME,
    },
    // 2: to peer 1, timed reliability, unordered.
    Class {
        peer: PEER,
        stream: 3,
        ppid: 53,
        unordered: true,
        policy: LIFETIME,
    },
    // 3: to peer 1, reliable, on a stream of its own, after the lossy phase.
    Class {
        peer: PEER,
        stream: 9,
        ppid: 59,
        unordered: false,
        policy: Reliability::Reliable,
    },
    // 4: to peer 2, reliable and ordered on the stream number peer 1's class 1 uses:
    // FORWARD TSNs for one association must not skip another's streams.
    Class {
        peer: PEER2,
        stream: 2,
        ppid: 54,
        unordered: false,
        policy: Reliability::Reliable,
    },
    // 5: to peer 2, sent once, unordered: gives peer 2 FORWARD TSNs of its own.
    Class {
        peer: PEER2,
        stream: 3,
        ppid: 55,
        unordered: true,
        policy: Reliability::MaxRetransmits(0),
    },
];
/// The classes sent once (`MaxRetransmits(0)`) and the reliable ones.
const ONCE: [u8; 2] = [0, 5];
const FINAL: u8 = 3;
const PEER2_RELIABLE: u8 = 4;
/// Messages per class in the lossy phase, one class after the other, one every `GAP`:
/// a load the link carries even at 30 % loss, so that they go out while it is lossy.
const ROUNDS: u32 = 30;
const GAP: Duration = Duration::from_millis(60);
/// Messages of every class sent on the clean link after the lossy phase.
const TAIL: u32 = 4;
/// Sizes cycle through these: one chunk, and several (so that messages are abandoned
/// with fragments still queued, RFC 3758 §3.5 A3).
const SIZES: [usize; 4] = [40, 700, 2_500, 5_000];

fn receiver_of(peer: PeerId) -> SocketAddr {
    if peer == PEER { addr(CLI) } else { addr(CLI2) }
}

/// What the clients of the first test have received, checked as it arrives.
#[derive(Default)]
struct Received {
    seen: HashSet<(u8, u32)>,
    last_ordered: [Option<u32>; 6],
    errors: Vec<String>,
}

impl Received {
    fn take(&mut self, sim: &mut Sim) {
        for (node, e) in sim.drain_events() {
            let ShardEvent::SctpMessage {
                stream,
                ppid,
                payload,
                ..
            } = e
            else {
                continue;
            };
            let Some((class, index)) = untag(&payload) else {
                self.errors.push(format!(
                    "{node}: corrupted message on stream {stream} ({} bytes)",
                    payload.len()
                ));
                continue;
            };
            let Some(c) = CLASSES.get(usize::from(class)) else {
                self.errors.push(format!("{node}: unknown class {class}"));
                continue;
            };
            if (receiver_of(c.peer), c.stream, c.ppid) != (node, stream, ppid) {
                self.errors.push(format!(
                    "class {class} #{index} arrived at {node} on stream {stream} ppid {ppid}"
                ));
            }
            if !self.seen.insert((class, index)) {
                self.errors
                    .push(format!("class {class} #{index} delivered twice"));
                continue;
            }
            if !c.unordered {
                // What an ordered stream delivers, it delivers in order.
                let last = &mut self.last_ordered[usize::from(class)];
                if last.is_some_and(|l| index <= l) {
                    self.errors
                        .push(format!("class {class}: #{index} delivered after #{last:?}"));
                }
                *last = Some(index);
            }
        }
    }

    fn has(&self, class: u8, index: u32) -> bool {
        self.seen.contains(&(class, index))
    }
}

/// The server shard sends message `index` of `class`.
fn send(sim: &mut Sim, class: u8, index: u32, len: usize) -> Result<(), SctpSendError> {
    let c = &CLASSES[usize::from(class)];
    // `Sim::shard_mut` moves the shard's clock to the virtual time, so a message's
    // lifetime starts now rather than at the shard's last tick.
    let shard = sim.shard_mut(addr(SRV));
    shard.sctp_send(
        c.peer,
        c.stream,
        c.ppid,
        tagged(class, index, len),
        c.unordered,
        c.policy,
    )
}

fn size(class: u8, index: u32) -> usize {
    SIZES[(index as usize + usize::from(class)) % SIZES.len()]
}

/// Index of the first message the directed part of the first test sends (A, then B).
const DIRECTED: u32 = ROUNDS + TAIL;

/// See its caller. Peer 1's link from the server drops everything while A, and later
/// the FORWARD TSN, would cross it.
fn lost_forward_tsn(sim: &mut Sim, rx: &mut Received, latency: Duration) -> Result<(), String> {
    let (srv, cli) = (addr(SRV), addr(CLI));
    let clean = LinkConfig {
        latency,
        ..LinkConfig::default()
    };
    let dead = LinkConfig {
        loss: 1.0,
        ..clean.clone()
    };
    let (a, b) = (DIRECTED, DIRECTED + 1);
    let forward_before = sim.shard(srv).stats().sctp_forward_tsn_sent;
    sim.set_link(srv, cli, dead.clone());
    send(sim, 1, a, 40).map_err(|e| format!("A refused: {e:?}"))?;
    sim.run_for(Duration::from_millis(1)).unwrap();
    sim.set_link(srv, cli, clean.clone());
    send(sim, 1, b, 40).map_err(|e| format!("B refused: {e:?}"))?;
    // B arrives, and the SACK reporting the gap before it comes back.
    sim.run_for(latency * 3).unwrap();
    rx.take(sim);
    if rx.has(1, b) {
        return Err("B was delivered before A's SSN was skipped".into());
    }
    // T3-rtx (at most 3 s away) abandons A; its FORWARD TSN is lost.
    sim.set_link(srv, cli, dead);
    sim.run_for(Duration::from_secs(4)).unwrap();
    sim.set_link(srv, cli, clean);
    let got = sim.run_until(
        |s| {
            rx.take(s);
            rx.has(1, b)
        },
        Duration::from_secs(8),
    );
    let forwards = sim.shard(srv).stats().sctp_forward_tsn_sent - forward_before;
    if got.is_err() {
        return Err(format!(
            "B held back for 8 s on a clean link: the lost FORWARD TSN was not sent \
             again ({forwards} sent since A)"
        ));
    }
    if rx.has(1, a) {
        return Err("A was delivered after its lifetime".into());
    }
    Ok(())
}

/// Messages that may be given up on are given up on under loss, and the peer is moved
/// past them by FORWARD TSN: nothing is delivered twice or damaged, ordered streams
/// stay in order, neither they nor the association stall afterwards, and a second
/// association of the same shard, on the same stream numbers, is not disturbed.
#[test]
fn sim_unordered_partial_reliability() {
    let mut failures = Vec::new();
    let (mut abandoned_total, mut forward_total, mut delivered_total) = (0u64, 0u64, 0u64);
    // Sent-once messages delivered, and the most that could be without any
    // retransmission (the sum of each one's chance that all its datagrams arrive).
    let (mut once_delivered, mut once_bound) = (0u64, 0.0f64);
    let (srv, cli, cli2) = (addr(SRV), addr(CLI), addr(CLI2));
    let established = |s: &Sim| {
        [(srv, PEER), (srv, PEER2), (cli, PEER), (cli2, PEER2)]
            .iter()
            .all(|&(node, p)| s.shard(node).sctp_established(p))
    };
    for seed in 0..seeds() {
        let mut sim = Sim::new(seed);
        for node in [srv, cli, cli2] {
            sim.add_shard(node);
        }
        let loss = 0.10 + (seed % 5) as f64 * 0.05; // 10-30 %
        let latency = Duration::from_millis(20 + (seed % 4) * 10);
        let link = |loss| LinkConfig {
            latency,
            jitter: latency / 4,
            loss,
            duplicate: 0.02,
            reorder: 0.05,
            ..LinkConfig::default()
        };
        let set_links = |sim: &mut Sim, cfg: LinkConfig| {
            sim.set_link_both(srv, cli, cfg.clone());
            sim.set_link_both(srv, cli2, cfg);
        };
        // Set-up is not what this test is about (and RFC 9260's Max.Init.Retransmits
        // gives up on it now and then at 25 % loss): connect over a mild link.
        set_links(&mut sim, link(0.02));
        let role = if seed % 2 == 0 {
            DtlsRole::Server
        } else {
            DtlsRole::Client
        };
        sim.connect_dtls(srv, cli, PEER, role).unwrap();
        sim.connect_dtls(srv, cli2, PEER2, role).unwrap();
        let label = format!("seed {seed} (loss {loss:.2}, {latency:?}, {role:?})");
        if sim
            .run_until(|s| established(s), Duration::from_secs(120))
            .is_err()
        {
            failures.push(format!("{label}: no associations by {:?}", sim.now()));
            continue;
        }
        sim.drain_events().count();
        set_links(&mut sim, link(loss));
        let mut rx = Received::default();

        // Lossy phase: peer 1's classes in turn, one message every GAP; with every
        // class-0 message one sent-once message to peer 2, and every other time a
        // reliable one, so that peer 2's stream 2 runs behind peer 1's stream 2.
        let mut send_failed = None;
        let mut bound = 0.0;
        for i in 0..ROUNDS {
            for class in 0..3u8 {
                let mut sends = vec![(class, i)];
                if class == 0 {
                    sends.push((5, i));
                    if i % 2 == 0 {
                        sends.push((PEER2_RELIABLE, i / 2));
                    }
                }
                for (c, index) in sends {
                    let len = size(c, index);
                    if let Err(e) = send(&mut sim, c, index, len) {
                        send_failed = Some(format!("class {c} #{index}: {e:?}"));
                    }
                    if ONCE.contains(&c) {
                        // A datagram carries at most 1135 bytes of user data; a message
                        // sent once arrives only if none of its datagrams is lost.
                        bound += (1.0 - loss).powi(len.div_ceil(1135) as i32);
                    }
                }
                sim.run_for(GAP).unwrap();
                rx.take(&mut sim);
            }
        }
        if let Some(e) = send_failed {
            failures.push(format!("{label}: send refused: {e}"));
            continue;
        }
        // Until all of it has gone out, and a while longer for retransmission and
        // abandonment, still under loss.
        let drained = sim.run_until(
            |s| {
                let srv = s.shard(srv);
                srv.sctp_buffered_amount(PEER) + srv.sctp_buffered_amount(PEER2) == 0
            },
            Duration::from_secs(60),
        );
        if drained.is_err() {
            failures.push(format!("{label}: data still queued at {:?}", sim.now()));
            continue;
        }
        sim.run_for(Duration::from_secs(3)).unwrap();
        rx.take(&mut sim);

        // A reliable message on another stream still arrives under the same loss, and
        // so does every reliable message to peer 2.
        if let Err(e) = send(&mut sim, FINAL, 0, 300) {
            failures.push(format!("{label}: final send refused: {e:?}"));
            continue;
        }
        let fin = sim.run_until(
            |s| {
                rx.take(s);
                rx.has(FINAL, 0) && (0..ROUNDS.div_ceil(2)).all(|i| rx.has(PEER2_RELIABLE, i))
            },
            Duration::from_secs(60),
        );
        if fin.is_err() {
            let missing: Vec<u32> = (0..ROUNDS.div_ceil(2))
                .filter(|&i| !rx.has(PEER2_RELIABLE, i))
                .collect();
            failures.push(format!(
                "{label}: by {:?} the final message {} and peer 2's reliable {missing:?} \
                 are missing",
                sim.now(),
                if rx.has(FINAL, 0) {
                    "arrived"
                } else {
                    "did not arrive"
                },
            ));
            continue;
        }

        // Then clean links: whatever FORWARD TSN is still owed gets through by itself
        // (RFC 3758 §3.5 A5, C5: T3-rtx runs while one is unacknowledged), so every
        // message of the lossy phase that will ever be delivered is delivered now.
        // And new messages of every class, the ordered streams' included, must all
        // arrive: an SSN left unskipped would hold an ordered stream back for ever.
        set_links(
            &mut sim,
            LinkConfig {
                latency,
                ..LinkConfig::default()
            },
        );
        sim.run_for(Duration::from_secs(5)).unwrap();
        rx.take(&mut sim);
        let settled = rx.seen.clone();
        let tail: Vec<(u8, u32)> = (ROUNDS..ROUNDS + TAIL)
            .flat_map(|i| [0, 1, 2, PEER2_RELIABLE, 5].map(|c| (c, i)))
            .collect();
        for &(c, i) in &tail {
            // Small, so that a cwnd decayed by the idle time sends them at once and
            // none outlives its 200 ms before its first transmission.
            if let Err(e) = send(&mut sim, c, i, 40) {
                failures.push(format!("{label}: tail send refused: {e:?}"));
            }
        }
        let done = sim.run_until(
            |s| {
                rx.take(s);
                tail.iter().all(|&(c, i)| rx.has(c, i))
            },
            Duration::from_secs(10),
        );
        if done.is_err() {
            let missing: Vec<&(u8, u32)> = tail.iter().filter(|&&(c, i)| !rx.has(c, i)).collect();
            failures.push(format!(
                "{label}: stalled: (class, index) {missing:?} not delivered on a clean link"
            ));
        }

        let mut held: Vec<&(u8, u32)> = rx
            .seen
            .difference(&settled)
            .filter(|&&(_, i)| i < ROUNDS)
            .collect();
        if !held.is_empty() {
            held.sort();
            failures.push(format!(
                "{label}: (class, index) {held:?} of the lossy phase were held back for 5 s \
                 on a clean link, until new data came"
            ));
        }

        // Quiet afterwards: no duplicate deliveries, and no endless retransmission
        // (only answers to consent checks, every 4-6 s, cross the links).
        let sent = |s: &Sim| s.link_stats(srv, cli).sent + s.link_stats(srv, cli2).sent;
        let before = sent(&sim);
        sim.run_for(Duration::from_secs(10)).unwrap();
        rx.take(&mut sim);
        let chatter = sent(&sim) - before;
        if chatter > 12 {
            failures.push(format!(
                "{label}: {chatter} datagrams from the server in 10 idle seconds"
            ));
        }

        // Directed: a lost FORWARD TSN is sent again (RFC 3758 §3.5 A5, C5) even when
        // no DATA is outstanding any more. A (ordered, 200 ms lifetime) is lost; B
        // behind it arrives and waits for A's SSN; A is abandoned at T3-rtx, and the
        // FORWARD TSN that skips it is lost too. B must still come out, and A never.
        if let Err(e) = lost_forward_tsn(&mut sim, &mut rx, latency) {
            failures.push(format!("{label}: {e}"));
        }

        let stats = sim.shard(srv).stats().clone();
        // A sent-once message that never arrived was abandoned in flight; only a
        // FORWARD TSN moves the peer's cumulative TSN past it.
        let lost_once = ONCE
            .iter()
            .flat_map(|&c| (0..ROUNDS).map(move |i| (c, i)))
            .filter(|&(c, i)| !rx.has(c, i))
            .count();
        if lost_once > 0 && stats.sctp_forward_tsn_sent == 0 {
            failures.push(format!(
                "{label}: {lost_once} sent-once messages lost, but no FORWARD TSN sent"
            ));
        }
        once_delivered += ONCE
            .iter()
            .flat_map(|&c| (0..ROUNDS).map(move |i| (c, i)))
            .filter(|&(c, i)| rx.has(c, i))
            .count() as u64;
        once_bound += bound;
        abandoned_total += [0u8, 1, 2, 5]
            .iter()
            .flat_map(|&c| (0..ROUNDS).map(move |i| (c, i)))
            .filter(|&(c, i)| !rx.has(c, i))
            .count() as u64;
        forward_total += stats.sctp_forward_tsn_sent;
        delivered_total += rx.seen.len() as u64;
        for e in rx.errors.drain(..) {
            failures.push(format!("{label}: {e}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    // The scenario must exercise what it claims to: messages were given up on and
    // FORWARD TSNs went out; yet most messages arrived.
    let n = seeds();
    assert!(
        n == 0 || abandoned_total > n,
        "only {abandoned_total} messages abandoned over {n} seeds"
    );
    assert!(
        n == 0 || forward_total > n,
        "only {forward_total} FORWARD TSNs over {n} seeds"
    );
    assert!(
        delivered_total > abandoned_total,
        "{delivered_total} delivered, {abandoned_total} abandoned"
    );
    // Sent once means sent once: had they been retransmitted, nearly all would have
    // arrived. The margin is some 4 standard deviations of the binomial count.
    let margin = 2.0 * (n as f64 * f64::from(ROUNDS) * 2.0).sqrt() + 10.0;
    assert!(
        (once_delivered as f64) <= once_bound + margin,
        "{once_delivered} sent-once messages delivered; without retransmission at most \
         about {once_bound:.0}"
    );
}

/// A message abandoned as its next fragment is about to go (its lifetime ran out
/// while the window held the fragment back, RFC 3758 §4.1 TR4), with nothing else
/// in flight, still moves the peer past it: the FORWARD TSN goes without waiting
/// for a SACK that nothing would draw, and T3-rtx runs while it is unacknowledged
/// (§3.5 C5: "If a FORWARD TSN is sent, the sender MUST assure that at least one
/// T3-rtx timer is running"), which sends it again when it is lost. Without either
/// the peer would hold the fragments it has for as long as the client stayed
/// quiet.
#[test]
fn a_message_abandoned_as_it_is_sent_moves_the_peer_on() {
    let mut p = Pair::connect(11, SctpLimits::default(), Duration::from_millis(10), 0.0);
    // Ten packets' worth, ordered, for 100 ms: the first window (about four
    // packets) goes at once and is held back on the way.
    p.hold = Some(Vec::new());
    let message = tagged(4, 0, 10 * FULL);
    p.cli
        .sctp_send(
            PEER,
            1,
            60,
            message,
            false,
            Reliability::MaxLifetime(Duration::from_millis(100)),
        )
        .unwrap();
    let now = p.now;
    p.cli.handle_timeout(now);
    p.flush();
    // They arrive after the lifetime: the server acknowledges them all, and the
    // client's next fragment finds its message expired.
    p.run_for(Duration::from_millis(150));
    let held = p.hold.take().unwrap_or_default();
    assert!(
        (2..10).contains(&held.len()),
        "{} packets in the first window",
        held.len()
    );
    deliver_held_to_server(&mut p, held);
    // The server's SACK reaches the client 10 ms later, and the FORWARD TSN goes in
    // that tick: well before T3-rtx (an RTO, 400 ms at least) would send it. It is
    // lost on the way.
    let forward_before = p.cli.stats().sctp_forward_tsn_sent;
    p.hold = Some(Vec::new());
    p.run_until(
        |p| p.cli.stats().sctp_forward_tsn_sent > forward_before,
        Duration::from_millis(50),
    )
    .expect("a FORWARD TSN past the abandoned message as it is abandoned");
    let lost = p.hold.take().unwrap_or_default();
    assert!(!lost.is_empty(), "the FORWARD TSN's packet held back");
    // Nothing else is in flight, yet T3-rtx runs while it is owed, and sends it
    // again.
    p.run_until(
        |p| p.cli.stats().sctp_forward_tsn_sent > forward_before + 1,
        Duration::from_secs(3),
    )
    .expect("the lost FORWARD TSN sent again at T3-rtx");
    assert!(
        p.server_messages(1).is_empty(),
        "the expired message was not delivered"
    );
    // The stream goes on: the next message on it is delivered, and nothing is left
    // for the client to send or wait for.
    p.cli
        .sctp_send(PEER, 1, 60, tagged(4, 1, 300), false, Reliability::Reliable)
        .unwrap();
    let mut got = Vec::new();
    p.run_until(
        |p| {
            got.extend(p.server_messages(1));
            !got.is_empty()
        },
        Duration::from_secs(2),
    )
    .unwrap();
    assert_eq!(
        got.iter().map(|m| untag(m)).collect::<Vec<_>>(),
        [Some((4, 1))]
    );
}

// ---------------------------------------------------------------------------------
// 2. One SACK per tick
// ---------------------------------------------------------------------------------

/// Hands the held client datagrams to the server in one tick, as if they had all
/// arrived together, and takes what the tick sends out onto the wire.
fn deliver_held_to_server(p: &mut Pair, held: Vec<Datagram>) {
    let batch: Vec<Datagram> = held
        .into_iter()
        .map(|d| Datagram {
            local: d.remote,
            remote: d.local,
            payload: d.payload,
        })
        .collect();
    let now = p.now;
    p.srv.handle_datagrams(now, batch);
    p.flush();
}

/// The server's counters that matter for SACKs, as (sacks, bundled, packets).
fn sack_counters(s: &ShardStats) -> (u64, u64, u64) {
    (
        s.sctp_sacks_sent,
        s.sctp_sacks_bundled_with_data,
        s.sctp_packets_sent,
    )
}

/// Exactly one packet of user data with the default MTU (1135 - 12 - 16).
const FULL: usize = 1104;

/// Queues one-packet messages `seqs` (class 2) on the client's `stream`, reliable and
/// ordered.
fn queue_full(p: &mut Pair, stream: u16, seqs: std::ops::Range<u32>) {
    for i in seqs {
        p.cli
            .sctp_send(
                PEER,
                stream,
                60,
                tagged(2, i, FULL),
                false,
                Reliability::Reliable,
            )
            .unwrap();
    }
}

/// Holds a burst of `n` one-packet messages the client sends in one tick and returns
/// its datagrams, after checking that they were `n` SCTP packets.
fn client_burst(p: &mut Pair, stream: u16, n: u32, first: u32) -> Vec<Datagram> {
    p.hold = Some(Vec::new());
    let before = p.cli.stats().sctp_packets_sent;
    queue_full(p, stream, first..first + n);
    let now = p.now;
    p.cli.handle_timeout(now);
    p.flush();
    let held = p.hold.take().unwrap_or_default();
    let packets = p.cli.stats().sctp_packets_sent - before;
    // Full packets: one DTLS record each, one datagram each.
    assert_eq!(held.len(), n as usize, "datagrams in the burst");
    assert_eq!(
        packets,
        u64::from(n),
        "the client sent {packets} SCTP packets in the burst tick, not {n} (cwnd too small?)"
    );
    held
}

/// A tick that takes in many DATA packets of one association writes one SACK for
/// them all, and puts it in the same packet as the DATA the tick sends back.
#[test]
fn sim_one_sack_per_tick() {
    let mut p = Pair::connect(7, SctpLimits::default(), Duration::from_millis(10), 0.0);

    // Warm-up: slow start opens the client's cwnd well past the bursts below.
    queue_full(&mut p, 1, 0..400);
    let mut warm = 0;
    p.run_until(
        |p| {
            warm += p.server_messages(1).len();
            warm == 400
        },
        Duration::from_secs(30),
    )
    .unwrap();
    // Let the last (delayed) SACK land, within an RTO so cwnd does not decay.
    p.run_for(Duration::from_millis(250));
    p.srv_events.clear();

    // A -> 16 x DATA, held, then handed to the server in one tick. Z -> one SACK.
    let n = 16;
    let held = client_burst(&mut p, 2, n, 0);
    let before = sack_counters(p.srv.stats());
    deliver_held_to_server(&mut p, held);
    let after = sack_counters(p.srv.stats());
    let got = p.server_messages(2);
    assert_eq!(
        got.len(),
        n as usize,
        "all of the burst delivered in its tick"
    );
    for (i, m) in got.iter().enumerate() {
        assert_eq!(untag(m), Some((2, i as u32)), "burst message {i}");
    }
    assert_eq!(
        (after.0 - before.0, after.1 - before.1, after.2 - before.2),
        (1, 0, 1),
        "(SACKs, SACKs with DATA, packets) the server wrote for {n} DATA packets in one tick"
    );
    p.run_for(Duration::from_millis(100));

    // A -> 12 x DATA again, and this time the server has a message of its own for
    // the client in the same tick: Z -> one packet, SACK + DATA.
    let n = 12;
    let held = client_burst(&mut p, 2, n, 100);
    p.srv
        .sctp_send(PEER, 5, 61, tagged(3, 0, 200), false, Reliability::Reliable)
        .unwrap();
    let before = sack_counters(p.srv.stats());
    deliver_held_to_server(&mut p, held);
    let after = sack_counters(p.srv.stats());
    assert_eq!(p.server_messages(2).len(), n as usize);
    assert_eq!(
        (after.0 - before.0, after.1 - before.1, after.2 - before.2),
        (1, 1, 1),
        "(SACKs, SACKs with DATA, packets) with one small message going back"
    );
    p.run_until(|p| !p.client_messages(5).is_empty(), Duration::from_secs(1))
        .unwrap();
    p.run_for(Duration::from_millis(100));

    // Several packets of DATA back in the tick: still exactly one SACK, in the first.
    let n = 10;
    let held = client_burst(&mut p, 2, n, 200);
    for i in 1..=3 {
        p.srv
            .sctp_send(
                PEER,
                5,
                61,
                tagged(3, i, 1000),
                false,
                Reliability::Reliable,
            )
            .unwrap();
    }
    let before = sack_counters(p.srv.stats());
    deliver_held_to_server(&mut p, held);
    let after = sack_counters(p.srv.stats());
    assert_eq!(p.server_messages(2).len(), n as usize);
    let (sacks, bundled, packets) = (after.0 - before.0, after.1 - before.1, after.2 - before.2);
    assert_eq!((sacks, bundled), (1, 1), "SACKs, SACKs with DATA");
    assert!(
        packets >= 3,
        "3000 bytes of DATA back took {packets} packets"
    );
    let mut back = Vec::new();
    p.run_until(
        |p| {
            back.extend(p.client_messages(5));
            back.len() == 3
        },
        Duration::from_secs(1),
    )
    .unwrap();
    for (i, m) in back.iter().enumerate() {
        assert_eq!(untag(m), Some((3, i as u32 + 1)));
    }
}

/// An association may send at most `MAX_PACKETS_PER_TICK` packets in one tick (its
/// share of the shard). When that cuts a tick short, the shard goes on at once only
/// as far as the peer's SACKs acknowledged since, plus Max.Burst (RFC 9260 §6.1 D):
/// the sender stays clocked by the acknowledgements, not by its window alone. So a
/// sender with a large window and much queued sends one share, and after a SACK for
/// n packets, n + 4 and at most one share more, then waits for the next SACK.
#[test]
fn a_tick_cut_short_goes_on_as_far_as_the_acks_allow() {
    use shoal_components::sctp::assoc::MAX_BURST;
    let share = shoal_systems::passes::sctp_tx::MAX_PACKETS_PER_TICK;
    let mut p = Pair::connect(11, SctpLimits::default(), Duration::from_millis(10), 0.0);
    // Warm-up: open the client's cwnd well past three shares. Each round trip here
    // is one tick at the server, so one SACK, and slow start adds one packet per SACK
    // (RFC 9260 §7.2.1, L = 1): a few hundred round trips.
    let warm = 40_000;
    let (mut queued, mut got) = (0, 0);
    p.run_until(
        |p| {
            // As much as the send buffer takes, then more as it drains.
            while queued < warm
                && p.cli
                    .sctp_send(
                        PEER,
                        1,
                        60,
                        tagged(2, queued, FULL),
                        false,
                        Reliability::Reliable,
                    )
                    .is_ok()
            {
                queued += 1;
            }
            got += p.server_messages(1).len();
            got == warm as usize
        },
        Duration::from_secs(120),
    )
    .unwrap();
    p.run_for(Duration::from_millis(250));

    // Much queued, nothing in flight, no SACK since: one share, then wait.
    let n = 8 * share;
    queue_full(&mut p, 2, 0..n as u32);
    p.hold = Some(Vec::new());
    let now = p.now;
    p.cli.handle_timeout(now);
    p.flush();
    let first = p.hold.take().unwrap_or_default();
    assert_eq!(first.len(), share, "packets in the first tick");
    assert!(
        p.cli.poll_timeout().is_none_or(|t| t > now),
        "with no SACK since, the sender waits for one, not {:?}",
        p.cli.poll_timeout()
    );

    // The server takes them in one tick and SACKs them at once; the client then sends
    // what that acknowledged and Max.Burst more, in ticks that follow at once.
    let mut sent = first.len();
    let mut flight = first;
    let mut delivered = 0;
    // Two rounds: 64 acknowledged, then what that let go (the warm-up's cwnd holds
    // both; a third round would meet cwnd, which bounds it anyway).
    for round in 0..2 {
        let acked = flight.len();
        deliver_held_to_server(&mut p, flight);
        delivered += p.server_messages(2).len();
        assert_eq!(delivered, sent, "round {round}: all delivered");
        p.hold = Some(Vec::new());
        // One latency: the SACK reaches the client, which ticks on at once as long as
        // it has credit.
        p.run_for(Duration::from_millis(10));
        flight = p.hold.take().unwrap_or_default();
        sent += flight.len();
        assert!(
            flight.len() >= acked + MAX_BURST && flight.len() <= acked + MAX_BURST + share,
            "round {round}: a SACK for {acked} packets let {} go",
            flight.len()
        );
        assert!(
            p.cli.poll_timeout().is_none_or(|t| t > p.now),
            "round {round}: the sender goes on without a SACK"
        );
    }
    assert!(sent < n, "the bound, not the queue, stopped each round");
}

// ---------------------------------------------------------------------------------
// 3. Back-pressure
// ---------------------------------------------------------------------------------

/// A sender that floods `sctp_send` is held to its send buffer by `WouldBlock`, the
/// receive window bounds what it has on the wire, and every message still arrives
/// exactly once and in order; once the receiver has drained it, sending works again.
#[test]
fn sim_backpressure_bounds_memory() {
    let limits = SctpLimits {
        max_message_size: 8 * 1024,
        send_buffer: 64 * 1024,
        receive_window: 24 * 1024,
        ..SctpLimits::default()
    };
    const MESSAGES: u32 = 240;
    let size = |i: u32| [1_000, 3_000, 8 * 1024, 100, 5_000][i as usize % 5];
    for (seed, loss) in [(1u64, 0.0), (2, 0.01), (3, 0.03)] {
        let label = format!("seed {seed}, loss {loss}");
        let mut p = Pair::connect(seed, limits, Duration::from_millis(40), loss);
        let (mut sent, mut would_block, mut resumed) = (0u32, 0u32, 0u32);
        let mut buffered_max = 0;
        let mut got: Vec<Bytes> = Vec::new();
        let done = p.run_until(
            |p| {
                // Flood: as much as the send buffer takes, every step.
                while sent < MESSAGES {
                    match p.cli.sctp_send(
                        PEER,
                        1,
                        70,
                        tagged(4, sent, size(sent)),
                        false,
                        Reliability::Reliable,
                    ) {
                        Ok(()) => {
                            // Every WouldBlock ends a step's flood: this is a later step.
                            if would_block > 0 {
                                resumed += 1;
                            }
                            sent += 1;
                        }
                        Err(SctpSendError::Queue(SendError::WouldBlock)) => {
                            would_block += 1;
                            break;
                        }
                        Err(e) => panic!("{label}: send {sent} refused: {e:?}"),
                    }
                    let b = p.cli.sctp_buffered_amount(PEER);
                    assert!(
                        b <= limits.send_buffer,
                        "{label}: {b} bytes buffered, over the send buffer"
                    );
                    buffered_max = buffered_max.max(b);
                }
                got.extend(p.server_messages(1));
                got.len() >= MESSAGES as usize
            },
            Duration::from_secs(120),
        );
        assert!(
            done.is_ok(),
            "{label}: {} of {MESSAGES} delivered, {sent} sent: {done:?}",
            got.len()
        );
        assert!(would_block > 0, "{label}: the flood never met WouldBlock");
        assert!(
            resumed > 0,
            "{label}: sending never resumed after WouldBlock"
        );
        assert!(
            buffered_max + limits.max_message_size > limits.send_buffer,
            "{label}: the buffer peaked at {buffered_max}, never near full"
        );
        // Every message exactly once and in order.
        assert_eq!(got.len(), MESSAGES as usize, "{label}: extra deliveries");
        for (i, m) in got.iter().enumerate() {
            assert_eq!(
                untag(m),
                Some((4, i as u32)),
                "{label}: delivery {i} is not message {i} intact"
            );
            assert_eq!(m.len(), size(i as u32));
        }
        // The receive window bounds the user bytes in flight (RFC 9260 §6.1 A, B);
        // the wire holds a subset of them. The slack covers the estimate's overcount
        // of chunk headers in packets with several chunks.
        let w = limits.receive_window;
        assert!(
            p.c2s_bytes_max <= w + 2048,
            "{label}: {} user bytes on the wire at once, window {w}",
            p.c2s_bytes_max
        );
        if loss == 0.0 {
            assert!(
                p.c2s_bytes_max >= w / 2,
                "{label}: the window was never used ({} bytes)",
                p.c2s_bytes_max
            );
        }
        // Drained: the buffer is empty and a new message goes through.
        p.run_for(Duration::from_secs(1));
        assert_eq!(p.cli.sctp_buffered_amount(PEER), 0, "{label}");
        p.cli
            .sctp_send(
                PEER,
                1,
                70,
                tagged(4, MESSAGES, 2_000),
                false,
                Reliability::Reliable,
            )
            .unwrap();
        let mut last = Vec::new();
        p.run_until(
            |p| {
                last.extend(p.server_messages(1));
                !last.is_empty()
            },
            Duration::from_secs(30),
        )
        .unwrap();
        assert_eq!(last.len(), 1, "{label}");
        assert_eq!(untag(&last[0]), Some((4, MESSAGES)), "{label}");
        assert_eq!(p.cli.stats().sctp_packets_unsent, 0, "{label}");
    }
}

/// How `sctp_tx` fills packets: a message an empty packet would carry whole is not
/// split for the last few bytes of a packet (each 1 000-byte message travels as one
/// chunk, one per packet), while mid-sized messages still share packets.
#[test]
fn sctp_packing_keeps_messages_whole_and_packs_mid_sized_ones() {
    // (message size, most client packets for 200 messages)
    // Bounds: 200 messages of 600 bytes need at least 109 full packets; one per
    // packet would be 200.
    for (size, most) in [(1000usize, 200u64), (600, 130), (300, 70)] {
        let mut p = Pair::connect(3, SctpLimits::default(), Duration::from_millis(10), 0.0);
        let before = p.cli.stats().sctp_packets_sent;
        for i in 0..200u32 {
            let msg = Bytes::from(vec![i as u8; size]);
            p.cli
                .sctp_send(PEER, 1, 53, msg, false, Reliability::Reliable)
                .unwrap();
        }
        p.run_for(Duration::from_secs(3));
        let got = p.server_messages(1);
        assert_eq!(got.len(), 200, "size {size}");
        for (i, m) in got.iter().enumerate() {
            assert_eq!(m.len(), size);
            assert!(m.iter().all(|&b| b == i as u8));
        }
        let packets = p.cli.stats().sctp_packets_sent - before;
        assert!(packets <= most, "size {size}: {packets} packets");
        if size == 1000 {
            // Whole: one message per packet, never a fragment pair.
            assert_eq!(packets, 200, "size {size}");
        }
    }
}

/// A data channel message is held to the peer's `a=max-message-size` as well as the
/// shard's own limit: above it `channel_send` refuses it with `TooLarge` naming the
/// peer's limit (it would otherwise be refused as a reassembly error at the peer);
/// at it, it goes and arrives whole.
#[test]
fn a_message_over_the_peers_max_message_size_is_refused() {
    let small = SctpLimits {
        max_message_size: 8 * 1024,
        ..SctpLimits::default()
    };
    let mut p = Pair::connect_with(
        13,
        small,
        SctpLimits::default(),
        Duration::from_millis(10),
        0.0,
    );
    let kind = shoal_components::sctp::dcep::ChannelType::default();
    let c = p.cli.open_channel(PEER, "big", "", kind).unwrap();
    let max = small.max_message_size;
    assert_eq!(
        p.cli
            .channel_send(PEER, c, true, Bytes::from(vec![1u8; max + 1])),
        Err(shoal_components::datachannel::ChannelError::TooLarge { size: max + 1, max })
    );
    p.cli
        .channel_send(PEER, c, true, Bytes::from(vec![2u8; max]))
        .unwrap();
    let mut got = None;
    p.run_until(
        |p| {
            for e in p.srv_events.drain(..) {
                if let ShardEvent::ChannelMessage { payload, .. } = e {
                    got = Some(payload);
                }
            }
            got.is_some()
        },
        Duration::from_secs(5),
    )
    .unwrap();
    assert_eq!(got, Some(Bytes::from(vec![2u8; max])));
    // The other way the server's own 8 KiB limit is the smaller one.
    let s = p.srv.open_channel(PEER, "back", "", kind).unwrap();
    assert!(
        p.srv
            .channel_send(PEER, s, true, Bytes::from(vec![3u8; max + 1]))
            .is_err()
    );
}

/// RFC 9653 over DTLS: zero checksums are used exactly when both ends announce the
/// DTLS method, and an end that did not announce it gets CRC32c, so every mix of
/// settings delivers everything under loss (a zero checksum sent to an end that did
/// not announce the method would be dropped there as corrupt, and nothing would
/// arrive).
#[test]
fn zero_checksum_is_used_only_when_both_ends_announce_it() {
    for (srv_zc, cli_zc) in [(true, true), (true, false), (false, true), (false, false)] {
        let limits = |zero_checksum| SctpLimits {
            zero_checksum,
            ..SctpLimits::default()
        };
        let mut p = Pair::connect_with(
            11,
            limits(srv_zc),
            limits(cli_zc),
            Duration::from_millis(10),
            0.05,
        );
        let both = srv_zc && cli_zc;
        assert_eq!(p.srv.sctp_zero_checksum(PEER), both, "{srv_zc} {cli_zc}");
        assert_eq!(p.cli.sctp_zero_checksum(PEER), both, "{srv_zc} {cli_zc}");
        for i in 0..100u32 {
            let msg = Bytes::from(vec![i as u8; 700]);
            p.cli
                .sctp_send(PEER, 1, 53, msg.clone(), false, Reliability::Reliable)
                .unwrap();
            p.srv
                .sctp_send(PEER, 2, 53, msg, false, Reliability::Reliable)
                .unwrap();
        }
        p.run_for(Duration::from_secs(10));
        for got in [p.server_messages(1), p.client_messages(2)] {
            assert_eq!(got.len(), 100, "{srv_zc} {cli_zc}");
            for (i, m) in got.iter().enumerate() {
                assert!(m.len() == 700 && m.iter().all(|&b| b == i as u8));
            }
        }
    }
}
