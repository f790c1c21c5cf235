//! Rooms in the simulated network: server shards whose peers are room members, one
//! client shard per participant, and a log of what each participant's client
//! received, by channel label.

#![allow(dead_code)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use shoal_components::dtls::DtlsRole;
use shoal_components::peer::PeerId;
use shoal_components::room::RoomId;
use shoal_components::sctp::assoc::SctpLimits;
use shoal_components::sctp::dcep::ChannelType;
use shoal_components::tick::{RemoveReason, ShardEvent};
use shoal_server::sim::{LinkConfig, Sim};
use shoal_systems::{RelayLimits, ShardConfig};

/// The first server shard's address.
pub const SRV: &str = "10.0.0.1:7100";

/// `s` as a socket address.
pub fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// Participant `i`'s client shard (its peer is `PeerId(i)` on both ends).
pub fn cli(i: u64) -> SocketAddr {
    SocketAddr::from(([10, 0, (i / 250 + 1) as u8, (i % 250 + 1) as u8], 50_000))
}

/// Adds a server shard at `at` with `limits`.
pub fn add_server(sim: &mut Sim, at: SocketAddr, limits: SctpLimits) {
    add_server_with(sim, at, limits, RelayLimits::default());
}

/// Adds a server shard at `at` with SCTP `limits` and the relay's `relay`.
pub fn add_server_with(sim: &mut Sim, at: SocketAddr, limits: SctpLimits, relay: RelayLimits) {
    let seed = sim.rng().next_u64();
    let mut config = ShardConfig::new(at, seed);
    config.sctp = limits;
    config.relay = relay;
    sim.add_shard_with(config);
}

/// Adds participant `i`'s client shard, links it to `server` both ways, and joins
/// `room` there (the server shard plays DTLS server, as with a browser's offer).
pub fn join(sim: &mut Sim, server: SocketAddr, i: u64, room: RoomId, link: &LinkConfig) {
    sim.add_shard(cli(i));
    sim.set_link_both(server, cli(i), link.clone());
    sim.connect_dtls_in_room(server, cli(i), PeerId(i), DtlsRole::Server, room)
        .unwrap();
}

/// A server shard at `SRV` with `limits` and participants `members` (id, room),
/// run until every association is up; events so far are dropped.
pub fn room_sim(
    seed: u64,
    link: &LinkConfig,
    limits: SctpLimits,
    members: &[(u64, RoomId)],
) -> Sim {
    room_sim_with(seed, link, limits, RelayLimits::default(), members)
}

/// [`room_sim`] with the relay's limits `relay`.
pub fn room_sim_with(
    seed: u64,
    link: &LinkConfig,
    limits: SctpLimits,
    relay: RelayLimits,
    members: &[(u64, RoomId)],
) -> Sim {
    let mut sim = Sim::new(seed);
    add_server_with(&mut sim, addr(SRV), limits, relay);
    for &(i, room) in members {
        join(&mut sim, addr(SRV), i, room, link);
    }
    let ids: Vec<u64> = members.iter().map(|m| m.0).collect();
    sim.run_until(
        |s| {
            ids.iter().all(|&i| {
                s.shard(addr(SRV)).sctp_established(PeerId(i))
                    && s.shard(cli(i)).sctp_established(PeerId(i))
            })
        },
        Duration::from_secs(60),
    )
    .unwrap_or_else(|e| panic!("seed {seed}: associations not up: {e}"));
    sim.drain_events().count();
    sim
}

/// One message as a client got it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Got {
    /// Binary (else string).
    pub binary: bool,
    /// The payload.
    pub payload: Bytes,
}

/// What the clients and the server reported.
#[derive(Debug, Default)]
pub struct Log {
    /// Per client: its channels' labels, protocols and ids as opened.
    pub opened: HashMap<u64, Vec<(u16, String, String)>>,
    /// Per client and label: messages in arrival order.
    pub messages: HashMap<(u64, String), Vec<Got>>,
    /// Peers the server shards removed, and why.
    pub removed: Vec<(SocketAddr, PeerId, RemoveReason)>,
    /// Messages the server shards reported (peers without a room).
    pub server_messages: usize,
    /// Per client: the RTP packets it received (`Command::Receive`), by extended
    /// sequence number, in arrival order.
    pub rtp: HashMap<u64, Vec<(u64, Bytes)>>,
}

impl Log {
    /// Takes the simulation's events into the log. A client's event is on its own
    /// shard (`cli(i)`), where its peer is `PeerId(i)`.
    pub fn take(&mut self, sim: &mut Sim) {
        for (node, e) in sim.drain_events() {
            self.take_one(node, e);
        }
    }

    /// Takes one event that `node` reported into the log.
    pub fn take_one(&mut self, node: SocketAddr, e: ShardEvent) {
        let servers_are_not_clients = |node: SocketAddr| node.port() != 50_000;
        {
            match e {
                ShardEvent::PeerRemoved { peer, reason } if servers_are_not_clients(node) => {
                    self.removed.push((node, peer, reason));
                }
                ShardEvent::ChannelMessage { .. } if servers_are_not_clients(node) => {
                    self.server_messages += 1;
                }
                ShardEvent::RtpReceived {
                    peer, seq, packet, ..
                } if !servers_are_not_clients(node) => {
                    self.rtp.entry(peer.0).or_default().push((seq, packet));
                }
                ShardEvent::ChannelOpen {
                    peer,
                    channel,
                    label,
                    protocol,
                    ..
                } if !servers_are_not_clients(node) => {
                    let list = self.opened.entry(peer.0).or_default();
                    if !list.iter().any(|(c, ..)| *c == channel) {
                        list.push((channel, label, protocol));
                    }
                }
                ShardEvent::ChannelMessage {
                    peer,
                    channel,
                    binary,
                    payload,
                } if !servers_are_not_clients(node) => {
                    let label = self.label(peer.0, channel).unwrap_or_else(|| {
                        panic!(
                            "client {} got a message on {channel} before its open",
                            peer.0
                        )
                    });
                    self.messages
                        .entry((peer.0, label))
                        .or_default()
                        .push(Got { binary, payload });
                }
                _ => {}
            }
        }
    }

    /// The label of client `i`'s channel `channel`.
    pub fn label(&self, i: u64, channel: u16) -> Option<String> {
        self.opened
            .get(&i)?
            .iter()
            .find(|(c, ..)| *c == channel)
            .map(|(_, l, _)| l.clone())
    }

    /// Client `i`'s messages on `label`.
    pub fn on(&self, i: u64, label: &str) -> &[Got] {
        self.messages
            .get(&(i, label.to_owned()))
            .map_or(&[], Vec::as_slice)
    }

    /// Messages all clients received, on any label.
    pub fn total(&self) -> usize {
        self.messages.values().map(Vec::len).sum()
    }
}

/// Opens `label` from client `i` and runs until the server acknowledged it.
pub fn open_from_client(
    sim: &mut Sim,
    log: &mut Log,
    i: u64,
    label: &str,
    protocol: &str,
    kind: ChannelType,
) -> u16 {
    let id = sim
        .shard_mut(cli(i))
        .open_channel(PeerId(i), label, protocol, kind)
        .unwrap();
    sim.run_until(
        |s| {
            log.take(s);
            log.label(i, id).is_some()
        },
        Duration::from_secs(30),
    )
    .unwrap_or_else(|e| panic!("{label} from client {i} not acknowledged: {e}"));
    id
}

/// Message `k` of sender `s`: a header `s:k:` and filler derived from both (so a
/// corrupted or misattributed message cannot pass for another), 70 KiB every 50th,
/// binary every third. With `empties`, every fifth is empty instead (binary or not).
pub fn message(s: u64, k: u32, empties: bool) -> Got {
    if empties && k % 5 == 2 {
        return Got {
            binary: k.is_multiple_of(2),
            payload: Bytes::new(),
        };
    }
    let len = if k % 50 == 7 {
        70 * 1024
    } else {
        (k % 300) as usize
    };
    let mut p = format!("{s}:{k}:").into_bytes();
    p.extend((0..len).map(|j| b'a' + ((s as usize * 31 + k as usize * 7 + j) % 26) as u8));
    Got {
        binary: k.is_multiple_of(3),
        payload: Bytes::from(p),
    }
}

/// The sender and number in a message's header.
pub fn header(payload: &[u8]) -> Option<(u64, u32)> {
    let text = std::str::from_utf8(payload.get(..payload.len().min(24))?).ok()?;
    let mut parts = text.splitn(3, ':');
    let s = parts.next()?.parse().ok()?;
    let k = parts.next()?.parse().ok()?;
    Some((s, k))
}

/// Sends messages `range` of sender `i` on its channel `channel`.
pub fn send_range(sim: &mut Sim, i: u64, channel: u16, range: std::ops::Range<u32>, empties: bool) {
    for k in range {
        let m = message(i, k, empties);
        sim.shard_mut(cli(i))
            .channel_send(PeerId(i), channel, m.binary, m.payload)
            .unwrap_or_else(|e| panic!("client {i} message {k}: {e}"));
    }
}

/// Like [`send_range`], `batch` messages every `gap` of virtual time: a sender at a
/// steady rate rather than one burst.
pub fn send_paced(
    sim: &mut Sim,
    i: u64,
    channel: u16,
    range: std::ops::Range<u32>,
    batch: u32,
    gap: Duration,
) {
    let mut k = range.start;
    while k < range.end {
        let end = (k + batch).min(range.end);
        send_range(sim, i, channel, k..end, false);
        sim.run_for(gap).ok();
        k = end;
    }
}

/// Runs until each of `members` got, on `label`, the `n` messages of every other
/// member (at most `limit` of virtual time), then 3 s more for anything repeated or
/// late, and asserts each came once and in order ([`assert_heard_once_in_order`]).
pub fn run_until_heard_once_in_order(
    sim: &mut Sim,
    log: &mut Log,
    (members, label, n): (&[u64], &str, u32),
    limit: Duration,
    seed: u64,
) {
    let expected = (members.len() - 1) * n as usize;
    sim.run_until(
        |s| {
            log.take(s);
            members.iter().all(|&r| log.on(r, label).len() >= expected)
        },
        limit,
    )
    .unwrap_or_else(|e| panic!("seed {seed}: messages: {e}"));
    // Retransmissions, and anything duplicated or late, land now.
    sim.run_for(Duration::from_secs(3)).unwrap();
    log.take(sim);
    assert_heard_once_in_order(log, members, label, n, seed);
}

/// Asserts that each of `members` got, on `label`, the `n` messages of every other
/// member (`message(s, 0..n, false)`) once and in that member's order, and nothing
/// else.
pub fn assert_heard_once_in_order(log: &Log, members: &[u64], label: &str, n: u32, seed: u64) {
    for &r in members {
        let got = log.on(r, label);
        let others = members.iter().filter(|&&s| s != r);
        assert_eq!(
            got.len(),
            others.clone().count() * n as usize,
            "seed {seed}: receiver {r}"
        );
        for &s in others {
            let want: Vec<Got> = (0..n).map(|k| message(s, k, false)).collect();
            let from_s: Vec<Got> = got
                .iter()
                .filter(|g| header(&g.payload).is_some_and(|(f, _)| f == s))
                .cloned()
                .collect();
            assert!(
                from_s == want,
                "seed {seed}: receiver {r} did not get sender {s}'s messages once and in order"
            );
        }
    }
}
