//! Data channels over an association (RFC 8831) with in-band setup by DCEP (RFC
//! 8832): a peer's channels as a component, and the operations that open, use and
//! close them on its association. The `datachannel` pass (in `shoal-systems`)
//! turns reassembled SCTP messages into channel events with these.
//!
//! A channel is one SCTP stream. Whoever opens it picks the stream by DTLS role
//! (RFC 8831 §6.5: the DTLS client even ids, the server odd ones), sends
//! DATA_CHANNEL_OPEN on it with PPID 50, and may send data at once; the other side
//! answers DATA_CHANNEL_ACK. User messages carry the WebRTC PPIDs (RFC 8831 §6.6):
//! an empty message travels as one zero byte with an "empty" PPID.

use std::collections::HashMap;
use std::sync::Arc;

use bevy_ecs::prelude::Component;
use bytes::{Bytes, BytesMut};

use crate::hash::FastMap;
use crate::peer::PeerId;
use crate::sctp::assoc::Sctp;
use crate::sctp::dcep::{ChannelType, DataChannelOpen, DcepMessage, Reliability};
use crate::sctp::tx::{OutgoingMessage, Reliability as TxReliability};
use crate::sctp::{Ppid, StreamId};
use crate::tick::{Events, ShardEvent};
use crate::time::Time;

/// Where a channel is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChannelState {
    /// We sent DATA_CHANNEL_OPEN and wait for the ACK (data may flow already).
    Opening,
    /// Open both ways.
    Open,
    /// Being closed: stream resets under way (RFC 8831 §6.7).
    Closing,
}

/// One data channel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Channel {
    /// Its label (RFC 8832 §5.1); shared, so a message relayed to another shard
    /// carries it without a copy.
    pub label: Arc<str>,
    /// Its sub-protocol, shared likewise.
    pub protocol: Arc<str>,
    /// Ordering and reliability, as DATA_CHANNEL_OPEN announced them.
    pub kind: ChannelType,
    /// Its priority, as DATA_CHANNEL_OPEN announced it (RFC 8832 §5.1).
    pub priority: u16,
    /// Where it is.
    pub state: ChannelState,
    /// The peer reset its outgoing stream (our incoming one).
    pub incoming_reset: bool,
    /// The peer confirmed the reset of our outgoing stream.
    pub outgoing_reset: bool,
}

/// A peer's data channels, by stream id and by label.
#[derive(Component, Debug, Default)]
pub struct DataChannels {
    /// Open and opening channels.
    pub channels: HashMap<u16, Channel>,
    /// Label to stream, for the room relay. Labels need not be unique (RFC 8832
    /// §5.1 does not ask it): a label maps to the oldest of its channels that is
    /// still here, opening or open or closing, except that a channel the peer
    /// opened takes its label over from one shoal opened: when a member opens
    /// "chat" just as another member's first "chat" message arrives, shoal opens a
    /// "chat" of its own for it, and the member's own channel, the one its
    /// application reads, must get the rest.
    labels: FastMap<String, u16>,
    /// Our parity: 0 for the DTLS client's even ids, 1 for the server's odd ones.
    pub next_id: u16,
    /// The largest message the peer takes (its SDP `a=max-message-size`, RFC 8841):
    /// the relay delivers nothing larger to it.
    pub remote_max_message_size: usize,
    /// The peer may not send: what it sends on its channels is dropped (they open
    /// and receive as any other).
    pub receive_only: bool,
    /// As a room's sender: its next reliable message waits in its receive buffer
    /// until every receiver it goes to is down to the relay's low watermark.
    pub relay_held: bool,
    /// As a room's receiver: since when it has held a sender back without getting
    /// down to the low watermark.
    pub relay_behind_since: Option<Time>,
    /// As a room's receiver: messages on unreliable channels dropped for it because
    /// its queue was over the high watermark or its send buffer full.
    pub relay_dropped: u64,
    /// As a room's sender: times its messages were held back for a receiver.
    pub relay_holds: u64,
}

impl DataChannels {
    /// Channels for a peer whose DTLS role is client (`true`) or server.
    pub fn new(dtls_client: bool) -> DataChannels {
        DataChannels {
            channels: HashMap::new(),
            labels: FastMap::default(),
            next_id: if dtls_client { 0 } else { 1 },
            remote_max_message_size: usize::MAX,
            receive_only: false,
            relay_held: false,
            relay_behind_since: None,
            relay_dropped: 0,
            relay_holds: 0,
        }
    }

    /// Closes every channel at once, lowest id first, each with
    /// [`ShardEvent::ChannelClosed`]: the association under them is gone (the peer
    /// restarted it, RFC 9260 §5.2.4 A, or its state was dropped) and a new one
    /// starts with no streams open.
    pub fn close_all(&mut self, peer: PeerId, events: &mut Events) {
        let mut ids: Vec<u16> = self.channels.keys().copied().collect();
        ids.sort_unstable();
        for channel in ids {
            events.0.push(ShardEvent::ChannelClosed { peer, channel });
        }
        self.channels.clear();
        self.labels.clear();
    }

    /// The stream of the channel labelled `label`, if the peer has one.
    pub fn by_label(&self, label: &str) -> Option<u16> {
        self.labels.get(label).copied()
    }

    /// Adds a channel; its label maps to it unless an older channel holds the label
    /// (see [`DataChannels`]).
    pub fn insert(&mut self, id: u16, channel: Channel) {
        let ours = |stream: u16| stream % 2 == self.next_id % 2;
        match self.labels.get(&*channel.label) {
            None => {
                self.labels.insert(channel.label.to_string(), id);
            }
            Some(&held) if ours(held) && !ours(id) => {
                self.labels.insert(channel.label.to_string(), id);
            }
            Some(_) => {}
        }
        self.channels.insert(id, channel);
    }

    fn allocate(&self) -> Option<u16> {
        // RFC 8831 §6.5 keeps our parity; the lowest free id is taken, so a stream
        // freed by a reset (RFC 8831 §6.7) is used again.
        (self.next_id % 2..crate::sctp::assoc::STREAMS)
            .step_by(2)
            .find(|id| !self.channels.contains_key(id))
    }
}

/// Why a channel operation was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ChannelError {
    /// No such peer, or its association is not established.
    #[error("no established SCTP association")]
    NotEstablished,
    /// Every stream id of our parity is taken.
    #[error("no free stream id")]
    NoStream,
    /// No such channel.
    #[error("no channel {0}")]
    UnknownChannel(u16),
    /// Label or protocol over 65535 bytes.
    #[error("label or protocol too long")]
    TooLong,
    /// Over the peer's max-message-size (RFC 8841).
    #[error("message of {size} bytes is over the {max}-byte limit")]
    TooLarge {
        /// The message's size.
        size: usize,
        /// The limit.
        max: usize,
    },
    /// The send buffer is full: wait for the buffered amount to fall.
    #[error("send buffer full")]
    WouldBlock,
    /// The channel is closing (RFC 8831 §6.7): nothing more may be sent on it.
    #[error("channel {0} is closing")]
    Closing(u16),
    /// The association refused it for another reason.
    #[error("send refused: {0}")]
    Refused(String),
}

/// The PPID and wire payload of a user message (RFC 8831 §6.6).
pub fn encode(binary: bool, payload: Bytes) -> (Ppid, Bytes) {
    match (binary, payload.is_empty()) {
        (true, false) => (Ppid::BINARY, payload),
        (false, false) => (Ppid::STRING, payload),
        (true, true) => (Ppid::BINARY_EMPTY, Bytes::from_static(&[0])),
        (false, true) => (Ppid::STRING_EMPTY, Bytes::from_static(&[0])),
    }
}

/// The send queue's reliability for a channel of `kind` (RFC 8832 §5.1).
pub fn tx_policy(kind: &ChannelType) -> TxReliability {
    match kind.reliability {
        Reliability::Reliable => TxReliability::Reliable,
        Reliability::MaxRetransmits(n) => {
            TxReliability::MaxRetransmits(u16::try_from(n).unwrap_or(u16::MAX))
        }
        Reliability::MaxLifetimeMs(ms) => {
            TxReliability::MaxLifetime(std::time::Duration::from_millis(u64::from(ms)))
        }
    }
}

/// Queues a DCEP message on `stream`: ordered and reliable (RFC 8832 §6).
pub fn send_dcep(a: &mut Sctp, now: Time, stream: u16, msg: &DcepMessage) -> bool {
    let Some(tx) = a.tx.as_mut() else {
        return false;
    };
    let mut buf = BytesMut::with_capacity(msg.encoded_len());
    msg.write_to(&mut buf);
    let m = OutgoingMessage {
        ppid: Ppid::DCEP,
        payload: buf.freeze(),
        unordered: false,
        policy: TxReliability::Reliable,
    };
    tx.queue.send(now, StreamId(stream), m).is_ok()
}

/// The "normal" priority (RFC 8831 §6.4: WebRTC uses 128, 256, 512 or 1024).
pub const PRIORITY_NORMAL: u16 = 256;

/// What opening a channel announces (RFC 8832 §5.1), borrowed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChannelParams<'a> {
    /// The label.
    pub label: &'a str,
    /// The sub-protocol.
    pub protocol: &'a str,
    /// Ordering and reliability.
    pub kind: ChannelType,
    /// The priority.
    pub priority: u16,
}

impl Channel {
    /// The parameters this channel was opened with.
    pub fn params(&self) -> ChannelParams<'_> {
        ChannelParams {
            label: &self.label,
            protocol: &self.protocol,
            kind: self.kind,
            priority: self.priority,
        }
    }
}

/// Opens a channel from this side: picks a stream, queues DATA_CHANNEL_OPEN.
pub fn open(
    a: &mut Sctp,
    dc: &mut DataChannels,
    now: Time,
    params: ChannelParams<'_>,
) -> Result<u16, ChannelError> {
    let open = DataChannelOpen::new(params.kind, params.priority, params.label, params.protocol)
        .map_err(|_| ChannelError::TooLong)?;
    let id = dc.allocate().ok_or(ChannelError::NoStream)?;
    if !send_dcep(a, now, id, &DcepMessage::Open(open)) {
        return Err(ChannelError::WouldBlock);
    }
    dc.insert(
        id,
        Channel {
            label: params.label.into(),
            protocol: params.protocol.into(),
            kind: params.kind,
            priority: params.priority,
            state: ChannelState::Opening,
            incoming_reset: false,
            outgoing_reset: false,
        },
    );
    Ok(id)
}

/// Queues a user message on a channel with the channel's ordering and reliability.
pub fn send(
    a: &mut Sctp,
    dc: &DataChannels,
    now: Time,
    channel: u16,
    binary: bool,
    payload: Bytes,
    max_message_size: usize,
) -> Result<(), ChannelError> {
    let ch = dc
        .channels
        .get(&channel)
        .ok_or(ChannelError::UnknownChannel(channel))?;
    if payload.len() > max_message_size {
        return Err(ChannelError::TooLarge {
            size: payload.len(),
            max: max_message_size,
        });
    }
    let (ppid, payload) = encode(binary, payload);
    queue_user_message(a, now, channel, ch.state, ch.kind, ppid, payload)
}

/// Queues a user message in its wire form (PPID and payload, RFC 8831 §6.6) on
/// `stream`, whose channel is in `state`, with the ordering and reliability of
/// `kind`.
pub fn queue_user_message(
    a: &mut Sctp,
    now: Time,
    stream: u16,
    state: ChannelState,
    kind: ChannelType,
    ppid: Ppid,
    payload: Bytes,
) -> Result<(), ChannelError> {
    if state == ChannelState::Closing {
        return Err(ChannelError::Closing(stream));
    }
    let tx = a.tx.as_mut().ok_or(ChannelError::NotEstablished)?;
    let m = OutgoingMessage {
        ppid,
        payload,
        // RFC 8832 §6: before the DATA_CHANNEL_ACK (or any other message) has been
        // received on a channel, all its user messages MUST be sent ordered, whether
        // the channel is ordered or not; so the peer has the OPEN before any of them.
        unordered: !kind.ordered && state == ChannelState::Open,
        policy: tx_policy(&kind),
    };
    tx.queue
        .send(now, StreamId(stream), m)
        .map_err(|e| match e {
            crate::sctp::tx::SendError::WouldBlock => ChannelError::WouldBlock,
            other => ChannelError::Refused(format!("{other:?}")),
        })?;
    Ok(())
}

/// Starts closing a channel: its outgoing stream is reset once its queued data has
/// gone (RFC 8831 §6.7); the peer then resets its own, and the channel is closed.
pub fn close(a: &mut Sctp, dc: &mut DataChannels, channel: u16) -> Result<(), ChannelError> {
    let ch = dc
        .channels
        .get_mut(&channel)
        .ok_or(ChannelError::UnknownChannel(channel))?;
    if ch.state == ChannelState::Closing {
        return Ok(());
    }
    ch.state = ChannelState::Closing;
    start_outgoing_reset(a, channel);
    Ok(())
}

fn start_outgoing_reset(a: &mut Sctp, channel: u16) {
    if let Some(tx) = a.tx.as_mut() {
        tx.queue.prepare_reset(&[StreamId(channel)]);
        a.reset.wanted.push(StreamId(channel));
    }
}

/// Applies finished stream resets to the channels: a channel closes when both of
/// its directions are reset; an incoming reset of an open channel makes us reset
/// ours (RFC 8831 §6.7). An incoming reset waits while messages the peer sent on
/// the stream before it are still in the receive buffer (the room relay may leave
/// them there, `Sctp::peek_message`): they go out on the channel first.
pub fn apply_resets(a: &mut Sctp, dc: &mut DataChannels, peer: PeerId, events: &mut Events) {
    let incoming = std::mem::take(&mut a.reset.incoming_done);
    let outgoing = std::mem::take(&mut a.reset.outgoing_done);
    for s in incoming {
        if a.has_message_on(s) {
            a.reset.incoming_done.push(s);
            continue;
        }
        let Some(ch) = dc.channels.get_mut(&s.0) else {
            continue;
        };
        ch.incoming_reset = true;
        if ch.state != ChannelState::Closing {
            ch.state = ChannelState::Closing;
            start_outgoing_reset(a, s.0);
        }
    }
    for s in outgoing {
        if let Some(ch) = dc.channels.get_mut(&s.0) {
            ch.outgoing_reset = true;
        }
    }
    let DataChannels {
        channels, labels, ..
    } = dc;
    let mut orphaned: Vec<String> = Vec::new();
    channels.retain(|&id, ch| {
        let done = ch.incoming_reset && ch.outgoing_reset;
        if done {
            events
                .0
                .push(ShardEvent::ChannelClosed { peer, channel: id });
            if labels.get(&*ch.label) == Some(&id)
                && let Some((label, _)) = labels.remove_entry(&*ch.label)
            {
                orphaned.push(label);
            }
        }
        !done
    });
    // Another channel with the same label, if any, takes the label over (the lowest
    // id, so the choice does not depend on hash order).
    for label in orphaned {
        let next = channels
            .iter()
            .filter(|(_, ch)| *ch.label == *label)
            .map(|(&id, _)| id)
            .min();
        if let Some(id) = next {
            labels.insert(label, id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chat() -> Channel {
        Channel {
            label: "chat".into(),
            protocol: "".into(),
            kind: ChannelType::default(),
            priority: 256,
            state: ChannelState::Open,
            incoming_reset: false,
            outgoing_reset: false,
        }
    }

    #[test]
    fn a_channel_the_peer_opens_takes_its_label_over_from_ours() {
        // shoal is the DTLS server here: its channels have odd ids.
        let mut dc = DataChannels::new(false);
        dc.insert(1, chat());
        assert_eq!(dc.by_label("chat"), Some(1));
        // The peer opens its own "chat": the relay uses that one from now on.
        dc.insert(0, chat());
        assert_eq!(dc.by_label("chat"), Some(0));
        // A second one of the peer's, or another of ours, does not move it again.
        dc.insert(2, chat());
        dc.insert(3, chat());
        assert_eq!(dc.by_label("chat"), Some(0));
    }
}
