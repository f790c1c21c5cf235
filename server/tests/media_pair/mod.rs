//! Two participants of one room as shoal's own client stacks over real UDP, each
//! on a socket and a thread of its own, signalled over the node's `/signal`: a
//! publisher (Opus and VP8, and a data channel on which it sends numbered reliable
//! messages) and a subscriber (a data channel; it receives the publisher's tracks
//! and checks every message arrives once, in order). Used where a test needs live
//! media and reliable data through a node while it does something else.

#![allow(dead_code)]

use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use shoal_components::media::TrackSpec;
use shoal_components::peer::PeerId;
use shoal_components::rtp::{RtpFields, RtpWriter};
use shoal_components::sctp::dcep::ChannelType;
use shoal_server::endpoint::media::AUDIO_SOURCE;
use shoal_server::endpoint::{self, Control, MediaOffer, OfferShape, media_offer};
use shoal_systems::{Command, Shard, ShardConfig, ShardEvent};
use tokio::sync::oneshot;
use tokio_tungstenite::tungstenite::Message;

/// The client stacks' one peer: the node.
pub const NODE: PeerId = PeerId(1);
/// Audio packets and messages the publisher sends in one turn of its loop, at most.
const PER_TURN: usize = 8;

/// What a participant's signalling hands its shard thread.
pub enum Signalled {
    /// The node's answer, read: the peer, the sources, the first tracks to receive.
    Session(Box<endpoint::MediaSession>),
    /// Tracks a later offer of the node added.
    Receive(Vec<TrackSpec>),
    /// What the node said of the room: the join response, a page of others, a
    /// participant or track event.
    Room(Value),
}

/// What the two participants share.
#[derive(Default)]
pub struct Shared {
    /// The room both join.
    pub room: String,
    /// Reliable messages the publisher sends on its channel.
    pub messages: u64,
    /// Audio packets the publisher sends.
    pub audio_packets: u64,
    /// How long each participant may run.
    pub deadline: Duration,
    /// The subscriber's association is up, and it receives the publisher's tracks.
    pub subscriber_ready: AtomicBool,
    /// Audio packets the publisher handed its shard.
    pub audio_sent: AtomicU64,
    /// Messages the publisher queued.
    pub messages_sent: AtomicU64,
    /// Audio packets the subscriber received.
    pub audio_received: AtomicU64,
    /// Messages the subscriber received on the publisher's channel, in order.
    pub messages_received: AtomicU64,
    /// Set when the test has read what it needs: the participants stop.
    pub stop: AtomicBool,
}

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

/// What a participant does each turn of its loop once connected.
pub type Behaviour = fn(&mut Shard, &mut Turn<'_>) -> Result<(), String>;

/// A participant's view of one turn.
pub struct Turn<'a> {
    events: &'a mut Vec<ShardEvent>,
    shared: &'a Shared,
    now: shoal_components::time::Time,
    state: &'a mut HashMap<&'static str, u64>,
    packet: &'a mut BytesMut,
}

/// Starts a participant: its shard on a socket of its own, its signalling on a
/// thread of its own. Returns the shard thread and the signalling's stop handle.
pub fn participant(
    http: SocketAddr,
    identity: &'static str,
    shape: OfferShape,
    shared: &Arc<Shared>,
    behaviour: Behaviour,
) -> (
    std::thread::JoinHandle<Result<(), String>>,
    oneshot::Sender<()>,
) {
    let socket = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let local = socket.local_addr().expect("an address");
    let shard = Shard::new(ShardConfig::new(local, u64::from(local.port())));
    let mut rng = endpoint::os_rng().expect("a random generator");
    let offer = media_offer(NODE, shard.fingerprint(), shape, &mut rng);
    let (to_shard, inbox) = mpsc::channel();
    let (stop, stopped) = oneshot::channel();
    let room = shared.room.clone();
    std::thread::spawn(move || {
        runtime().block_on(signal(
            http,
            &room,
            identity,
            offer,
            (to_shard, no_reply),
            stopped,
        ));
    });
    let shared = shared.clone();
    let thread = std::thread::spawn(move || run(socket, shard, inbox, &shared, behaviour));
    (thread, stop)
}

/// The participant's shard loop: takes what signalling learnt, then its behaviour.
fn run(
    socket: UdpSocket,
    shard: Shard,
    inbox: mpsc::Receiver<Signalled>,
    shared: &Shared,
    behaviour: Behaviour,
) -> Result<(), String> {
    let deadline = Instant::now() + shared.deadline;
    let mut failure = None;
    let mut state = HashMap::new();
    let mut packet = BytesMut::new();
    endpoint::run(socket, shard, |shard, now, events| {
        while let Ok(s) = inbox.try_recv() {
            let outcome = match s {
                Signalled::Session(session) => {
                    let peer = session.peer.id;
                    let mut r = shard.command(now, Command::AddPeer(session.peer.clone()));
                    for (track, subscription) in session.sources.iter().cloned() {
                        r = r.and_then(|()| {
                            shard.command(
                                now,
                                Command::AddSource {
                                    peer,
                                    track,
                                    subscription,
                                },
                            )
                        });
                    }
                    for track in session.receives.iter().cloned() {
                        r = r.and_then(|()| shard.command(now, Command::Receive { peer, track }));
                    }
                    state.insert("session", 1);
                    r
                }
                Signalled::Receive(tracks) => {
                    *state.entry("receiving").or_default() += tracks.len() as u64;
                    tracks.into_iter().try_for_each(|track| {
                        shard.command(now, Command::Receive { peer: NODE, track })
                    })
                }
                Signalled::Room(_) => Ok(()),
            };
            if let Err(e) = outcome {
                failure = Some(format!("a command failed: {e:?}"));
            }
        }
        let mut turn = Turn {
            events,
            shared,
            now,
            state: &mut state,
            packet: &mut packet,
        };
        if let Err(e) = behaviour(shard, &mut turn) {
            failure = Some(e);
        }
        if failure.is_some() || shared.stop.load(Ordering::SeqCst) {
            return Control::Stop;
        }
        if Instant::now() > deadline {
            failure = Some("deadline".into());
            return Control::Stop;
        }
        Control::Continue
    })
    .map_err(|e| e.to_string())?;
    failure.map_or(Ok(()), Err)
}

/// The publisher: once the subscriber is ready, opens its channel and sends every
/// message and audio packet.
pub fn publish(shard: &mut Shard, turn: &mut Turn<'_>) -> Result<(), String> {
    for event in turn.events.drain(..) {
        if let ShardEvent::PeerRemoved { .. } | ShardEvent::SctpClosed { .. } = event {
            return Err(format!("publisher: connection lost: {event:?}"));
        }
    }
    if !turn.shared.subscriber_ready.load(Ordering::SeqCst) || !shard.sctp_established(NODE) {
        return Ok(());
    }
    let channel = match turn.state.get("channel") {
        Some(&c) => c as u16,
        None => {
            let c = shard
                .open_channel(NODE, "news", "", ChannelType::default())
                .map_err(|e| format!("open: {e:?}"))?;
            turn.state.insert("channel", u64::from(c));
            c
        }
    };
    // A few of each a turn: the loop turns at least every MAX_POLL_WAIT.
    for _ in 0..PER_TURN {
        let sent = turn.shared.messages_sent.load(Ordering::SeqCst);
        if sent < turn.shared.messages {
            let message = Bytes::from(format!("message {sent}"));
            if shard.channel_send(NODE, channel, false, message).is_ok() {
                turn.shared.messages_sent.fetch_add(1, Ordering::SeqCst);
            }
        }
        let audio = turn.shared.audio_sent.load(Ordering::SeqCst);
        if audio >= turn.shared.audio_packets {
            continue;
        }
        let fields = RtpFields {
            marker: false,
            payload_type: endpoint::media::OPUS_PT,
            sequence_number: audio as u16,
            timestamp: (audio as u32).wrapping_mul(960),
            ssrc: 0,
        };
        let mut w = RtpWriter::new(turn.packet, &fields, &[]);
        w.payload(&[0x78; 80]);
        w.finish(0);
        let packet = turn.packet.split().freeze();
        shard
            .send_rtp(turn.now, AUDIO_SOURCE, packet)
            .map_err(|e| format!("send_rtp: {e:?}"))?;
        turn.shared.audio_sent.fetch_add(1, Ordering::SeqCst);
    }
    Ok(())
}

/// The subscriber: ready once its association is up and it receives both of the
/// publisher's tracks; counts the audio and the messages that arrive.
pub fn subscribe(shard: &mut Shard, turn: &mut Turn<'_>) -> Result<(), String> {
    for event in turn.events.drain(..) {
        match event {
            ShardEvent::RtpReceived { .. } => {
                turn.shared.audio_received.fetch_add(1, Ordering::SeqCst);
            }
            ShardEvent::ChannelOpen { channel, label, .. } if label == "news" => {
                turn.state.insert("news", u64::from(channel));
            }
            ShardEvent::ChannelMessage {
                channel, payload, ..
            } if turn.state.get("news") == Some(&u64::from(channel)) => {
                let n = turn.shared.messages_received.load(Ordering::SeqCst);
                if payload != format!("message {n}").as_bytes() {
                    return Err(format!("message {n} arrived as {payload:?}"));
                }
                turn.shared.messages_received.fetch_add(1, Ordering::SeqCst);
            }
            ShardEvent::PeerRemoved { .. } | ShardEvent::SctpClosed { .. } => {
                return Err(format!("subscriber: connection lost: {event:?}"));
            }
            _ => {}
        }
    }
    let receiving = turn.state.get("receiving").copied().unwrap_or(0);
    if receiving >= 2 && shard.sctp_established(NODE) {
        turn.shared.subscriber_ready.store(true, Ordering::SeqCst);
    }
    Ok(())
}

/// What a participant says back to what the node said of the room (a request to
/// send, if any): [`no_reply`] for most.
pub type Reply = fn(&Value) -> Option<Value>;

/// Says nothing back.
pub fn no_reply(_: &Value) -> Option<Value> {
    None
}

/// A participant's `/signal`: join, the first offer, the answer to the shard
/// thread; the node's later offers answered, and their tracks to the shard thread,
/// what it says of the room to the shard thread and to `reply`, until `stop` fires
/// or is dropped (the socket then closes: the participant leaves).
pub async fn signal(
    http: SocketAddr,
    room: &str,
    identity: &str,
    offer: MediaOffer,
    (to_shard, reply): (mpsc::Sender<Signalled>, Reply),
    mut stop: oneshot::Receiver<()>,
) {
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{http}/signal"))
        .await
        .expect("connect /signal");
    let send = |v: Value| Message::Text(v.to_string().into());
    ws.send(send(json!({"join": {"room": room, "identity": identity}})))
        .await
        .expect("send join");
    ws.send(send(json!({"offer": {"sdp": offer.sdp()}})))
        .await
        .expect("send offer");
    let mut session: Option<endpoint::MediaSession> = None;
    loop {
        let message = tokio::select! {
            m = ws.next() => m,
            _ = &mut stop => break,
        };
        let Some(Ok(Message::Text(text))) = message else {
            match message {
                Some(Ok(_)) => continue,
                _ => break,
            }
        };
        let v: Value = serde_json::from_str(text.as_str()).expect("JSON");
        if let Some(sdp) = v.pointer("/answer/sdp").and_then(Value::as_str) {
            let s = offer.accept(sdp).expect("the node's answer");
            let _ = to_shard.send(Signalled::Session(Box::new(s.clone())));
            session = Some(s);
        } else if let Some(offer) = v.get("offer") {
            let s = session.as_mut().expect("an offer after the answer");
            let offer: shoal_proto::v1::SessionDescription =
                serde_json::from_value(offer.clone()).expect("the node's offer");
            // The answer echoes the offer's id.
            let (answer, tracks) = s.answer_description(&offer).expect("the node's offer");
            let _ = to_shard.send(Signalled::Receive(tracks));
            ws.send(send(json!({ "answer": answer })))
                .await
                .expect("send answer");
        } else if let Some(e) = v.get("error") {
            panic!("{identity}: the node said {e}");
        } else if ["join", "others", "participant", "track"]
            .iter()
            .any(|k| v.get(k).is_some())
        {
            if let Some(request) = reply(&v) {
                ws.send(send(request)).await.expect("send a reply");
            }
            let _ = to_shard.send(Signalled::Room(v));
        }
    }
    let _ = ws.close(None).await;
}
