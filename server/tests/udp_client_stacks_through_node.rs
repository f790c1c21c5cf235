//! Two shoal client stacks join a room of a running node (real shards on real UDP
//! sockets, the control plane on gRPC) the way an application would: each sends a
//! `DataOffer` over `SignalService`, adds the peer its answer describes, and connects
//! with ICE (controlling, against the node's ICE-lite), DTLS (client) and SCTP. Each
//! then opens a reliable ordered channel of its own label and sends a few MiB on it;
//! the room relay carries each stream to the other member on a channel shoal opens
//! with that label. Every message must arrive once, in order and intact (each carries
//! its sequence number and a body derived from it). A wall-clock deadline makes a
//! stall fail rather than hang; nothing sleeps.
//!
//! The room relays to the members connected at the time, so each member starts
//! sending once both are connected. The node does not slow a sender for its room: a
//! receiver whose reliable backlog outgrows its send buffer is disconnected
//! (docs/architecture.md, room relay). So, as an application moving this much through
//! a room would, each sender keeps at most [`AHEAD`] messages beyond what the other
//! member has received (the other thread's count standing in for an application-level
//! acknowledgement).

mod grpc_node;

use std::collections::HashMap;
use std::net::UdpSocket;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use shoal_components::peer::PeerId;
use shoal_components::sctp::dcep::ChannelType;
use shoal_components::time::Time;
use shoal_server::endpoint::{self, Control, data_offer, signal};
use shoal_systems::{Command, Shard, ShardConfig, ShardEvent};

const ROOM: &str = "stacks";
/// Messages each member sends.
const MESSAGES: u32 = 3_000;
const DEADLINE: Duration = Duration::from_secs(60);
/// The client stacks' one peer: the node.
const NODE: PeerId = PeerId(1);
/// Pause sending above this many buffered bytes.
const HIGH_WATERMARK: usize = 512 * 1024;
/// Messages a sender may be ahead of the other member's receiving (at ~20 KiB each,
/// well inside the node's send buffer for the receiver).
const AHEAD: u32 = 64;

/// Message `seq` of `label`: its sequence number, then bytes derived from both; sizes
/// from 4 bytes to ~40 KiB.
fn message(label: &str, seq: u32) -> Vec<u8> {
    let salt = label
        .bytes()
        .fold(0u32, |h, b| h.rotate_left(5) ^ u32::from(b));
    let len = 4 + (seq.wrapping_mul(2_654_435_761) ^ salt) as usize % 40_000;
    let mut m = seq.to_be_bytes().to_vec();
    m.extend((4..len).map(|i| (i as u32 ^ seq ^ salt) as u8));
    m
}

/// One member: sends `MESSAGES` on a channel labelled `mine` and receives the other
/// member's on the channel shoal opens labelled `theirs`; returns what arrived there.
fn member(
    socket: UdpSocket,
    shard: Shard,
    mine: &'static str,
    theirs: &'static str,
    received: [&AtomicU32; 2],
    connected: &AtomicUsize,
    done: &AtomicUsize,
) -> Result<Vec<Bytes>, String> {
    // [what this member received, what the other member received]
    let [mine_received, theirs_received] = received;
    let deadline = Instant::now() + DEADLINE;
    let mut channel: Option<u16> = None;
    let mut sent = 0u32;
    let mut labels: HashMap<u16, String> = HashMap::new();
    let mut got: Vec<Bytes> = Vec::new();
    let mut finished = false;
    let mut failure = None;
    endpoint::run(socket, shard, |shard, _now, events| {
        for event in events.drain(..) {
            match event {
                ShardEvent::SctpEstablished { .. } => {
                    connected.fetch_add(1, Ordering::SeqCst);
                    match shard.open_channel(NODE, mine, "", ChannelType::default()) {
                        Ok(id) => channel = Some(id),
                        Err(e) => failure = Some(format!("{mine}: open: {e:?}")),
                    }
                }
                ShardEvent::ChannelOpen { channel, label, .. } => {
                    labels.insert(channel, label);
                }
                ShardEvent::ChannelMessage {
                    channel, payload, ..
                } if labels.get(&channel).is_some_and(|l| l == theirs) => got.push(payload),
                ShardEvent::SctpClosed { .. } | ShardEvent::PeerRemoved { .. } => {
                    failure = Some(format!("{mine}: connection lost: {event:?}"));
                }
                _ => {}
            }
        }
        if failure.is_some() {
            return Control::Stop;
        }
        if let Some(id) = channel.filter(|_| connected.load(Ordering::SeqCst) == 2) {
            while sent < MESSAGES
                && sent < theirs_received.load(Ordering::SeqCst) + AHEAD
                && shard.channel_buffered_amount(NODE, id) < HIGH_WATERMARK
            {
                if shard
                    .channel_send(NODE, id, true, Bytes::from(message(mine, sent)))
                    .is_err()
                {
                    break; // back-pressure: the next turn tries again
                }
                sent += 1;
            }
        }
        mine_received.store(got.len() as u32, Ordering::SeqCst);
        if !finished && got.len() == MESSAGES as usize {
            finished = true;
            done.fetch_add(1, Ordering::SeqCst);
        }
        // Both members stay until both have everything: the node relays only
        // between members that are still connected.
        if done.load(Ordering::SeqCst) == 2 {
            return Control::Stop;
        }
        if Instant::now() > deadline {
            let st = shard.stats();
            failure = Some(format!(
                "{mine}: deadline with {sent} sent and {} of {theirs} received; buffered {} (channel {:?}), packets sent {} dropped {} unsent {}, sacks {}, in {} out {}",
                got.len(),
                shard.sctp_buffered_amount(NODE),
                channel.map(|c| shard.channel_buffered_amount(NODE, c)),
                st.sctp_packets_sent, st.sctp_packets_dropped, st.sctp_packets_unsent, st.sctp_sacks_sent,
                st.datagrams_in, st.datagrams_out,
            ));
            return Control::Stop;
        }
        Control::Continue
    })
    .map_err(|e| e.to_string())?;
    failure.map_or(Ok(got), Err)
}

#[test]
fn client_stacks_exchange_data_through_a_room() {
    let node = grpc_node::node_with_room(ROOM);
    let grpc = node.control.grpc_addr().expect("gRPC is on");
    let mut rng = endpoint::os_rng().expect("randomness");
    let done = Arc::new(AtomicUsize::new(0));
    let connected = Arc::new(AtomicUsize::new(0));
    let received = Arc::new([AtomicU32::new(0), AtomicU32::new(0)]);
    let signaller = signal::Signaller::start().expect("signalling");
    let mut threads = Vec::new();
    for (i, (mine, theirs)) in [("alice", "bob"), ("bob", "alice")].into_iter().enumerate() {
        let socket = UdpSocket::bind("127.0.0.1:0").expect("a socket");
        let mut shard = Shard::new(ShardConfig::new(
            socket.local_addr().expect("bound"),
            i as u64,
        ));
        let offer = data_offer(NODE, shard.fingerprint(), &mut rng);
        let answer = signaller
            .join(grpc, ROOM, mine, offer.sdp())
            .expect("joined");
        let peer = offer.accept(&answer).expect("a usable answer");
        shard
            .command(Time::ZERO, Command::AddPeer(peer))
            .expect("peer added");
        let (done, received, connected) = (done.clone(), received.clone(), connected.clone());
        threads.push(
            std::thread::Builder::new()
                .name(mine.into())
                .spawn(move || {
                    let counts = [&received[i], &received[1 - i]];
                    member(socket, shard, mine, theirs, counts, &connected, &done)
                })
                .expect("a thread"),
        );
    }
    let results: Vec<_> = threads
        .into_iter()
        .map(|t| t.join().expect("no panic"))
        .collect();
    if let Some(e) = results.iter().find_map(|r| r.as_ref().err()) {
        let all: Vec<String> = results
            .iter()
            .map(|r| {
                r.as_ref()
                    .map_or_else(Clone::clone, |g| format!("{} received", g.len()))
            })
            .collect();
        panic!("{e} ({all:?})");
    }
    for (got, sender) in results.into_iter().flatten().zip(["bob", "alice"]) {
        assert_eq!(got.len(), MESSAGES as usize, "messages from {sender}");
        for (seq, m) in got.iter().enumerate() {
            assert!(
                m[..] == message(sender, seq as u32)[..],
                "message {seq} from {sender}: wrong, out of order or damaged"
            );
        }
    }
    drop(signaller);
}
