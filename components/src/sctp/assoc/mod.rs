//! One SCTP association's state, a component of its peer, and the rules the `sctp`
//! pass applies to what arrives: this file the state and the dispatch of a packet's
//! chunks (§6 data and SACKs, §8.5 verification tags); `setup` RFC 9260 §5 (INIT to
//! COOKIE ACK, and a peer's restart), `shutdown` §9.2, `reset` RFC 6525 stream resets,
//! `heartbeat` §8.3 path heartbeats, `ootb` §8.4 packets for no association. Nothing here sends: arriving chunks leave work
//! behind (control chunks queued, a SACK owed) for `sack_batch` and `sctp_tx`, and whole
//! messages in the receive buffer until the datachannel pass takes them
//! ([`Sctp::pop_message`]): what it leaves there keeps the window closed, which is how
//! a sender is slowed.
//!
//! # Never half-open
//!
//! An association must not stay up on one side while the other has none. WebRTC
//! runs it over an ICE-checked, DTLS-authenticated path, so shoal, like libwebrtc's
//! dcsctp transport, Firefox and str0m, sets up without a retransmission limit by
//! default: the handshake goes on while the peer's DTLS lives
//! ([`SctpLimits::max_init_retransmits`]). An established association heartbeats when
//! idle (§8.3), answers a packet for an association it does not have with ABORT
//! (§8.4, out of the blue), and takes a peer's restart (§5.2.2, §5.2.4 A); when it
//! gives up (retransmissions or heartbeats unanswered past Association.Max.Retrans,
//! §8.1, or a configured setup limit) it sends ABORT. So whichever side loses its
//! state, the other learns within a heartbeat interval, and every end is reported
//! with its [`AssocEnd`].

mod heartbeat;
mod ootb;
mod reset;
mod setup;
mod shutdown;
#[cfg(test)]
mod tests;

pub use heartbeat::{HeartbeatSent, next_after_answer, on_heartbeat_timer};
use ootb::{init_alone_or_absent, out_of_the_blue, starts_setup};
use reset::on_reconfig;
pub use reset::{maybe_request_reset, resend_reset};
pub use setup::MAX_STALE_COOKIES;
use setup::{on_cookie_echo, on_init, on_init_ack, on_stale_cookie};
use shutdown::on_shutdown;

use std::time::Duration;

use crate::sctp::chunk::{
    Abort, Chunk, Data, ErrorCause, HeartbeatAck, OperationError, ShutdownComplete, UnknownAction,
    WriteChunk, chunk_type, unknown_chunk_action,
};
use crate::sctp::cookie::CookieKey;
use crate::sctp::error::SctpError;
use crate::sctp::packet::{COMMON_HEADER_LEN, Packet, PacketWriter};
use crate::sctp::rx::{AckUrgency, DataIn, DataOutcome, Message, Receiver};
use crate::sctp::tx::{
    CongestionConfig, CongestionControl, DEFAULT_SCTP_MTU, MessageId, RetransmissionQueue,
    RetransmissionQueueConfig, RtoConfig, RtoEstimator, SackError, SendQueue, SendQueueConfig,
};
use crate::sctp::{Ssn, StreamId, Tsn};
use crate::time::Time;
use bytes::{Bytes, BytesMut};

/// The SCTP port WebRTC uses unless SDP says otherwise (RFC 8841 §5).
pub const DEFAULT_SCTP_PORT: u16 = 5000;
/// Streams offered each way: the most RFC 8831 §6.2 lets a channel id take.
pub const STREAMS: u16 = 1024;
/// RFC 9260 §16: Association.Max.Retrans: consecutive unanswered retransmissions
/// and heartbeats (§8.1) before the peer is unreachable.
pub const MAX_ASSOCIATION_RETRANSMITS: u32 = 10;
/// RFC 9260 §16: RTO.Initial, which T1-init starts from (§5.1 A) before there is an
/// RTT to measure.
pub const RTO_INITIAL: Duration = Duration::from_secs(1);

/// Where the association is (RFC 9260 §4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AssocState {
    /// Not started, or over.
    Closed,
    /// INIT sent, waiting for INIT ACK.
    CookieWait,
    /// COOKIE ECHO sent, waiting for COOKIE ACK.
    CookieEchoed,
    /// Data flows.
    Established,
    /// Our side closes (RFC 9260 §9.2): no new user messages; what is queued and
    /// outstanding still goes, and the SHUTDOWN waits until all of it is acknowledged.
    ShutdownPending,
    /// SHUTDOWN sent (our side closing).
    ShutdownSent,
    /// SHUTDOWN received (the peer closes): no new user messages, but what is queued
    /// and outstanding still goes (RFC 9260 §9.2).
    ShutdownReceived,
    /// SHUTDOWN ACK sent (the peer closed).
    ShutdownAckSent,
}

/// Why an association ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AssocEnd {
    /// The peer sent ABORT: it gave up, or had no association for what we sent
    /// (RFC 9260 §8.4 rule 8).
    AbortedByPeer,
    /// INIT or COOKIE ECHO went unanswered [`SctpLimits::max_init_retransmits`] times
    /// (RFC 9260 §4 notes 2 and 3); we sent ABORT.
    SetupFailed,
    /// Retransmissions or heartbeats went unanswered more than
    /// [`MAX_ASSOCIATION_RETRANSMITS`] times in a row (RFC 9260 §8.1); we sent ABORT.
    PeerUnreachable,
    /// The peer restarted the association (RFC 9260 §5.2.4 A): this one is gone with
    /// what it carried, and a new one took its place.
    PeerRestarted,
    /// The peer broke the protocol; we sent ABORT.
    ProtocolViolation,
    /// SHUTDOWN completed.
    Shutdown,
}

/// RFC 9260 §16's Max.Burst: packets of new DATA a SACK lets the sender add to what
/// it acknowledged (`TxSide::ack_credit`).
pub const MAX_BURST: usize = 4;

/// The longest a FORWARD TSN repeating the last one waits for a round trip to pass
/// (RFC 3758 §3.5 F3: a delay "SHOULD NOT exceed 200ms").
pub const FORWARD_TSN_REPEAT_MAX: Duration = Duration::from_millis(200);

/// The send side, once the association has its peer's parameters.
#[derive(Debug)]
pub struct TxSide {
    /// User messages not yet in flight.
    pub queue: SendQueue,
    /// DATA chunks in flight.
    pub outstanding: RetransmissionQueue,
    /// cwnd and friends (RFC 9260 §7).
    pub cc: CongestionControl,
    /// RTO (RFC 9260 §6.3.1).
    pub rto: RtoEstimator,
    /// A FORWARD TSN is owed (RFC 3758 §3.5).
    pub forward_tsn_due: bool,
    /// The New Cumulative TSN of the last FORWARD TSN sent, and when: the same one
    /// goes again only a round trip later (see [`TxSide::holds_forward_tsn`]).
    pub forward_tsn_sent: Option<(Tsn, Time)>,
    /// Send one packet of retransmissions now, ignoring cwnd (RFC 9260 §7.2.4 rule 3).
    pub fast_retransmit_now: bool,
    /// That packet carried the earliest outstanding TSN: T3-rtx restarts as it goes
    /// (RFC 9260 §7.2.4 rule 4).
    pub t3_restart_due: bool,
    /// Scratch for discarded messages.
    pub discards: Vec<(StreamId, MessageId)>,
    /// A SACK arrived since the last T3-rtx expiry: the peer is alive, which makes
    /// expiries while its window is closed zero window probing, not errors (RFC 9260
    /// §6.1 A).
    pub sacks_since_t3: bool,
    /// While the peer's window is closed and nothing is in flight: when the zero
    /// window probe may go (RFC 9260 §6.1 A: "after 1 RTO").
    pub probe_not_before: Option<Time>,
    /// Packets' worth of DATA the peer's SACKs acknowledged since sending last ran out
    /// of window or data, plus [`MAX_BURST`] per SACK, less the DATA packets sent
    /// since: how far sctp_tx may go on at once when a tick's share
    /// (`MAX_PACKETS_PER_TICK`) cuts it short. The sender stays clocked by the peer's
    /// acknowledgements: a tick goes on only to replace what was acknowledged, and
    /// Max.Burst packets more (RFC 9260 §6.1 D), never in a burst of its own.
    pub ack_credit: usize,
}

impl TxSide {
    fn new(
        initial_tsn: Tsn,
        peer_a_rwnd: u32,
        outbound_streams: u16,
        limits: &SctpLimits,
    ) -> TxSide {
        TxSide {
            queue: SendQueue::new(SendQueueConfig {
                outbound_streams,
                max_message_size: limits.max_message_size,
                max_buffered_total: limits.send_buffer,
                max_buffered_per_stream: limits.send_buffer,
                ..SendQueueConfig::default()
            }),
            outstanding: RetransmissionQueue::new(
                RetransmissionQueueConfig {
                    max_outstanding_chunks: limits.max_outstanding_tsns.max(1),
                    ..RetransmissionQueueConfig::default()
                },
                initial_tsn,
                peer_a_rwnd,
            ),
            cc: CongestionControl::new(&CongestionConfig::default()),
            rto: RtoEstimator::new(&RtoConfig {
                max: limits.max_timer_backoff,
                ..RtoConfig::default()
            }),
            forward_tsn_due: false,
            forward_tsn_sent: None,
            fast_retransmit_now: false,
            t3_restart_due: false,
            discards: Vec::new(),
            sacks_since_t3: false,
            probe_not_before: None,
            ack_credit: 0,
        }
    }

    /// Whether a T3-rtx expiry counts against the association's error counter, and
    /// starts the next period. RFC 9260 §6.1 A: "If the sender continues to receive
    /// SACK chunks from the peer while doing zero window probing, the unacknowledged
    /// window probes SHOULD NOT increment the error counter". A peer that keeps its
    /// window shut but answers is alive; one that stops answering still runs the
    /// counter out.
    pub fn t3_expiry_is_error(&mut self) -> bool {
        let probing = self.outstanding.peer_advertised_rwnd() == 0 && self.sacks_since_t3;
        self.sacks_since_t3 = false;
        !probing
    }

    /// Whether the FORWARD TSN owed (to the Advanced.Peer.Ack.Point) waits at
    /// `now`: one saying the same went less than a round trip ago. RFC 3758 §3.5 C3 sends
    /// one for every SACK that leaves the Advanced.Peer.Ack.Point ahead of its
    /// cumulative ack, and its implementation note lets "an implementation ... limit
    /// the number of duplicate FORWARD TSN chunks it sends by ... waiting a full RTT
    /// before sending a duplicate FORWARD TSN", a delay that F3 says "SHOULD NOT
    /// exceed 200ms". Without it a peer that acknowledges every FORWARD TSN, even a
    /// duplicate (aiortc does), and falls behind keeps a loop going: each of its
    /// queued SACKs draws one more duplicate, each duplicate one more SACK, so its
    /// queue never drains and every hole the FORWARD TSNs close costs a trip
    /// through it, hundreds of milliseconds each. A lost FORWARD TSN is still sent
    /// again: by the next SACK a round trip on, or at T3-rtx (C5).
    pub fn holds_forward_tsn(&self, now: Time) -> bool {
        let round_trip = self
            .rto
            .srtt()
            .unwrap_or(FORWARD_TSN_REPEAT_MAX)
            .min(FORWARD_TSN_REPEAT_MAX);
        self.last_forward_tsn_owed()
            .is_some_and(|at| now < at + round_trip)
    }

    /// When the last FORWARD TSN went, if it said what is owed now (the
    /// Advanced.Peer.Ack.Point, past the cumulative ack).
    fn last_forward_tsn_owed(&self) -> Option<Time> {
        if !self.outstanding.forward_tsn_owed() {
            return None;
        }
        let point = self.outstanding.advanced_peer_ack_point();
        self.forward_tsn_sent
            .and_then(|(sent, at)| (sent == point).then_some(at))
    }

    /// Marks the FORWARD TSN due when the Advanced.Peer.Ack.Point has moved past what
    /// the last one sent said, and says whether it did. A message can be abandoned
    /// as it is sent (its lifetime ran out while a fragment or a retransmission
    /// waited, RFC 3758 §4.1 TR4), where no SACK is processed; with nothing else in
    /// flight none would come to draw the FORWARD TSN (§3.5 C3), and the peer would
    /// keep what it holds of the message, its stream blocked, until the application
    /// sent again.
    pub fn forward_tsn_news(&mut self) -> bool {
        if self.forward_tsn_due
            || !self.outstanding.forward_tsn_owed()
            || self.last_forward_tsn_owed().is_some()
        {
            return false;
        }
        self.forward_tsn_due = true;
        true
    }

    /// Drops from the queue every message the outstanding queue abandoned (RFC 3758
    /// §3.5 A3: all fragments of a message go together).
    pub fn apply_discards(&mut self) {
        self.outstanding.take_discards(&mut self.discards);
        for (stream, id) in self.discards.drain(..) {
            self.queue.discard_message(stream, id);
        }
    }
}

/// Control chunks waiting for a packet, each whole, bounded in total: a peer that
/// provokes answers faster than they can leave (a HEARTBEAT flood) loses answers,
/// never memory.
#[derive(Debug, Default)]
pub struct ControlQueue {
    chunks: std::collections::VecDeque<Bytes>,
    bytes: usize,
    /// Where a chunk is written before [`ControlQueue::commit`].
    pub scratch: BytesMut,
}

impl ControlQueue {
    /// Bytes of control chunks held at most.
    pub const MAX_BYTES: usize = 16 * 1024;

    /// Queues what was written into `scratch` as one chunk.
    pub fn commit(&mut self) {
        let chunk = self.scratch.split().freeze();
        self.push(chunk);
    }

    /// Queues an encoded chunk, unless the queue is full.
    pub fn push(&mut self, chunk: Bytes) {
        if chunk.is_empty() || self.bytes + chunk.len() > Self::MAX_BYTES {
            return;
        }
        self.bytes += chunk.len();
        self.chunks.push_back(chunk);
    }

    /// The next chunk if it fits in `room` bytes. A chunk that could not fit even an
    /// empty packet (`packet_empty`) is dropped: RFC 9260 §8.3 lets a HEARTBEAT go
    /// unanswered, and nothing else we queue is that large.
    pub fn pop_fitting(&mut self, room: usize, packet_empty: bool) -> Option<Bytes> {
        loop {
            let len = self.chunks.front()?.len();
            if len <= room {
                self.bytes -= len;
                return self.chunks.pop_front();
            }
            if !packet_empty {
                return None;
            }
            self.bytes -= len;
            self.chunks.pop_front();
        }
    }

    /// Nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }
}

/// [`SctpLimits::max_outstanding_tsns`] by default: the retransmission queue's own.
pub const DEFAULT_MAX_OUTSTANDING_TSNS: usize =
    crate::sctp::tx::retransmission_queue::DEFAULT_MAX_OUTSTANDING_CHUNKS;

/// Configuration every association of a shard shares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SctpLimits {
    /// Largest user message, either way (RFC 8841 `max-message-size`).
    pub max_message_size: usize,
    /// Bytes of user messages queued to send, per association.
    pub send_buffer: usize,
    /// Receive window, per association.
    pub receive_window: usize,
    /// SCTP packet size (the DTLS record adds its own overhead).
    pub mtu: usize,
    /// T1 and T3-rtx back-off stops here. RFC 9260 §16 lets RTO.Max be 60 s; on a
    /// path ICE has validated and consent keeps checking, a minute between tries
    /// only stalls a data channel (a dead path is found by consent), so shoal caps
    /// it at 3 s.
    pub max_timer_backoff: Duration,
    /// TSNs the sender may have outstanding past the peer's cumulative ack: new DATA
    /// waits while the highest TSN sent is this far ahead of it. RFC 9260 §6.1 bounds
    /// what is in flight by cwnd and by the peer's rwnd, and §6.2.1 takes chunks
    /// acknowledged by Gap Ack Blocks off what is outstanding; so while one TSN stays
    /// missing (a lost chunk, a FORWARD TSN still on its way) neither stops the
    /// sender, and the receiver tracks ever more TSNs above its cumulative TSN. Its
    /// cost per packet grows with them: Linux keeps a map of 4096 TSNs
    /// (`SCTP_TSN_MAP_SIZE`) and drops DATA past it; aiortc sorts every TSN it holds
    /// above the cumulative TSN for each DATA chunk and each SACK, and at 16 384 of
    /// them fell seconds behind, so that every T3-rtx expiry was spurious. Sending
    /// less is always allowed. The price: each message takes at least one TSN, so
    /// at most this many messages go per round trip (1024 full chunks are 1.1 MB),
    /// and once a hole has held the sender here, every stream of the association
    /// waits for its repair (a lost repair: until T3-rtx). `--sctp-max-outstanding-tsns`,
    /// 256 to 16 384; fewer would leave too few packets of small messages behind a
    /// loss for the three miss indications of fast retransmit (§7.2.4).
    pub max_outstanding_tsns: usize,
    /// Announce RFC 9653 zero checksums with the DTLS method in INIT and INIT ACK,
    /// accept them, and send them to a peer that announced the same. Every shoal
    /// association runs over DTLS, whose record protection already rejects any
    /// corrupted byte, so the CRC32c would cost two passes over each packet (one per
    /// side) for nothing; off only to test a peer's checksum path.
    pub zero_checksum: bool,
    /// INIT or COOKIE ECHO transmissions after the first before the setup gives up
    /// (RFC 9260 §16's Max.Init.Retransmits is 8). `None`, the default: no limit,
    /// setup goes on while the peer's DTLS lives, as in libwebrtc's dcsctp transport,
    /// Firefox and str0m: ICE consent and DTLS already watch the path, and a setup
    /// that gave up while the peer's COOKIE ACKs were lost would leave the peer up
    /// alone. A limited setup that gives up sends ABORT.
    pub max_init_retransmits: Option<u32>,
    /// An idle association sends HEARTBEAT this often, plus one RTO with ±50 %
    /// jitter (RFC 9260 §8.3, HB.interval: 30 s, as dcsctp), so a peer that lost
    /// its association is found (it answers ABORT, §8.4) and one that stopped
    /// answering counts towards [`MAX_ASSOCIATION_RETRANSMITS`]. Zero: none.
    pub heartbeat_interval: Duration,
}

impl Default for SctpLimits {
    fn default() -> Self {
        SctpLimits {
            max_message_size: 256 * 1024,
            send_buffer: 4 * 1024 * 1024,
            receive_window: 4 * 1024 * 1024,
            mtu: DEFAULT_SCTP_MTU,
            max_timer_backoff: Duration::from_secs(3),
            max_outstanding_tsns: DEFAULT_MAX_OUTSTANDING_TSNS,
            zero_checksum: true,
            max_init_retransmits: None,
            heartbeat_interval: Duration::from_secs(30),
        }
    }
}

/// One association: a component of its peer.
#[derive(bevy_ecs::prelude::Component)]
pub struct Sctp {
    /// Where it is.
    pub state: AssocState,
    /// This side sends INIT (the DTLS client does, RFC 8841 §... leaves either side
    /// free; shoal lets the DTLS client start and answers INITs in any state).
    pub initiator: bool,
    /// Our SCTP port.
    pub local_port: u16,
    /// The peer's SCTP port.
    pub remote_port: u16,
    /// Our verification tag: what the peer puts in every packet to us.
    pub my_vtag: u32,
    /// The peer's tag: what we put in every packet to it.
    pub peer_vtag: u32,
    /// The Initial TSN we announced.
    pub my_initial_tsn: Tsn,
    /// INIT or COOKIE ECHO transmissions so far.
    pub init_transmissions: u32,
    /// The cookie to echo while in COOKIE-ECHOED.
    pub cookie: Option<Bytes>,
    /// Receive side, once established.
    pub rx: Option<Receiver>,
    /// Send side, once the peer's parameters are known.
    pub tx: Option<TxSide>,
    /// Whole packets to send as they are (INIT, INIT ACK, ABORT, SHUTDOWN COMPLETE:
    /// chunks that travel alone, RFC 9260 §6.10).
    pub solo: Vec<Bytes>,
    /// Control chunks, encoded, for the front of the next packets.
    pub control: ControlQueue,
    /// A SACK must go out in this tick's `sack_batch`.
    pub sack_now: bool,
    /// The SACK `sack_batch` wrote, for the next packet.
    pub pending_sack: BytesMut,
    /// The end was reported to the owner.
    pub closed_reported: bool,
    /// How it ended, once it has.
    pub ended: Option<AssocEnd>,
    /// Consecutive T3-rtx expiries without progress.
    pub error_count: u32,
    /// Stream reset (RFC 6525) state.
    pub reset: StreamReset,
    /// The peer announced zero checksums with the DTLS method and so do we (RFC 9653
    /// §5.2): packets other than INIT and COOKIE ECHO go with checksum zero.
    pub zero_checksum_tx: bool,
    /// Consecutive T3-rtx expiries and unanswered heartbeats without progress
    /// (RFC 9260 §8.1) is `error_count`; this is the HEARTBEAT in flight, if any.
    pub heartbeat: Option<HeartbeatSent>,
    /// The Tie-Tags of this association (RFC 9260 §5.2.2: a random nonce, made when
    /// a restart's INIT first needs them); 0 until then.
    pub tie_tags: u64,
    /// When an ABORT last answered a packet out of the blue (§8.4): at most one per
    /// instant, so a flood of stale packets is not answered packet for packet.
    pub last_ootb_abort: Option<Time>,
    /// Stale Cookie errors this setup answered with a new INIT (§5.2.6).
    pub stale_cookies: u8,
}

/// Stream reconfiguration state (RFC 6525), used to close data channels (RFC 8831
/// §6.7): outgoing streams we want reset, our request in flight, and what the peer
/// reset.
#[derive(Debug, Default)]
pub struct StreamReset {
    /// Our next Re-configuration Request Sequence Number (§4.1: starts at our
    /// Initial TSN).
    pub next_request_seq: u32,
    /// The peer's next expected request sequence number.
    pub peer_next_seq: u32,
    /// Outgoing streams to reset once their queued data has gone.
    pub wanted: Vec<StreamId>,
    /// Our request in flight: its sequence number, streams and encoded chunk.
    pub in_flight: Option<(u32, Vec<StreamId>, Bytes)>,
    /// Incoming streams the peer reset, for the datachannel pass.
    pub incoming_done: Vec<StreamId>,
    /// Outgoing streams whose reset the peer confirmed, for the datachannel pass.
    pub outgoing_done: Vec<StreamId>,
    /// The last response we sent, re-sent if the peer repeats its request.
    pub last_response: Option<(u32, Bytes)>,
}

impl Sctp {
    /// A closed association; `initiator` sends the INIT when DTLS is up.
    pub fn new(initiator: bool, local_port: u16, remote_port: u16) -> Sctp {
        Sctp {
            state: AssocState::Closed,
            initiator,
            local_port,
            remote_port,
            my_vtag: 0,
            peer_vtag: 0,
            my_initial_tsn: Tsn(0),
            init_transmissions: 0,
            cookie: None,
            rx: None,
            tx: None,
            solo: Vec::new(),
            control: ControlQueue::default(),
            sack_now: false,
            pending_sack: BytesMut::new(),
            closed_reported: false,
            ended: None,
            error_count: 0,
            reset: StreamReset::default(),
            zero_checksum_tx: false,
            heartbeat: None,
            tie_tags: 0,
            last_ootb_abort: None,
            stale_cookies: 0,
        }
    }

    /// The next whole message the peer sent, in delivery order, left in the receive
    /// buffer (see [`Receiver::peek_message`]).
    pub fn peek_message(&self) -> Option<&Message> {
        self.rx.as_ref()?.peek_message()
    }

    /// Bytes of user messages queued to send and not yet sent (WebRTC's
    /// `bufferedAmount` over all streams).
    pub fn buffered_amount(&self) -> usize {
        self.tx
            .as_ref()
            .map_or(0, |tx| tx.queue.total_buffered_amount())
    }

    /// User messages queued to send and not yet sent.
    pub fn queued_messages(&self) -> usize {
        self.tx.as_ref().map_or(0, |tx| tx.queue.queued_messages())
    }

    /// Whether a whole message the peer sent on `stream` waits to be taken.
    pub fn has_message_on(&self, stream: StreamId) -> bool {
        self.rx.as_ref().is_some_and(|rx| rx.has_message_on(stream))
    }

    /// Takes the next whole message the peer sent, in delivery order, reopening the
    /// window by its size; once the window has grown enough past the one last
    /// advertised, the window update SACK goes in this tick ([`Receiver::pop_message`]).
    pub fn pop_message(&mut self) -> Option<Message> {
        let rx = self.rx.as_mut()?;
        let message = rx.pop_message()?;
        if rx.ack_urgency() == Some(AckUrgency::Immediate) {
            self.sack_now = true;
        }
        Some(message)
    }

    fn abort(&mut self, end: AssocEnd) {
        self.abort_with(end, &[]);
    }

    /// Ends the association for the peer's breach of the protocol, with an ABORT
    /// carrying a Protocol Violation cause that says what it was (RFC 9260
    /// §3.3.10.13: "MAY be included in ABORT chunks that are sent because an SCTP
    /// endpoint detects a protocol violation of the peer").
    fn violation(&mut self, what: &'static str) {
        let cause =
            crate::sctp::chunk::ErrorCause::protocol_violation(Bytes::from_static(what.as_bytes()));
        self.abort_with(AssocEnd::ProtocolViolation, &[cause]);
    }

    fn abort_with(&mut self, end: AssocEnd, causes: &[crate::sctp::chunk::ErrorCause]) {
        let abort = Abort {
            t_bit: false,
            causes,
        };
        self.solo.push(solo_packet(
            self.local_port,
            self.remote_port,
            self.peer_vtag,
            &abort,
        ));
        self.end(end);
    }

    /// Gives up on the association for `end`, telling the peer with ABORT when its
    /// tag is known (RFC 9260 §8.1 stops data; an ABORT is not data, and without it
    /// a peer that still thinks the association is up learns only from our answers
    /// to its packets, §8.4).
    pub fn give_up(&mut self, end: AssocEnd) {
        if self.peer_vtag != 0 {
            self.abort(end);
        } else {
            self.end(end);
        }
    }

    /// Marks the association over. Nothing queued for it goes out any more but the
    /// whole packets already made (an ABORT, a SHUTDOWN COMPLETE).
    pub fn end(&mut self, end: AssocEnd) {
        self.state = AssocState::Closed;
        self.ended.get_or_insert(end);
        self.control = ControlQueue::default();
        self.pending_sack.clear();
        self.sack_now = false;
        self.heartbeat = None;
    }
}

fn solo_packet(src: u16, dst: u16, vtag: u32, chunk: &impl WriteChunk) -> Bytes {
    let mut buf = BytesMut::with_capacity(chunk.padded_len() + 12);
    let mut w = PacketWriter::new(&mut buf, src, dst, vtag);
    w.push(chunk);
    w.finish()
}

/// What the pass needs besides the association to handle a packet.
pub struct Inputs<'a> {
    /// The current time.
    pub now: Time,
    /// The shard's cookie secret.
    pub cookie_key: &'a CookieKey,
    /// Limits for new associations.
    pub limits: &'a SctpLimits,
    /// A fresh random tag and initial TSN for an INIT's answer (drawn only for a
    /// packet that [`wants_fresh_values`]).
    pub fresh: (u32, Tsn),
    /// A fresh random 64-bit nonce for Tie-Tags, likewise.
    pub nonce: u64,
}

/// What handling a packet asks of the pass.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Effects {
    /// The association became established.
    pub established: bool,
    /// A SACK arrived (the T3-rtx timer needs attention).
    pub sack_processed: bool,
    /// It acknowledged the earliest outstanding TSN: T3-rtx restarts (RFC 9260
    /// §6.3.2 R3). Any other SACK leaves a running T3-rtx as it is, or a lost chunk
    /// would wait for as long as later ones keep being acknowledged.
    pub cumulative_advanced: bool,
    /// Something arrived the packet was not valid for; counted by the caller.
    pub dropped: bool,
    /// A SHUTDOWN ACK was queued: (re)start T2-shutdown.
    pub shutdown_acked: bool,
    /// Our SHUTDOWN was queued again, answering DATA in SHUTDOWN-SENT (RFC 9260
    /// §9.2): restart T2-shutdown.
    pub shutdown_sent: bool,
    /// The peer restarted (§5.2.4 A): the old association ended and a new one is
    /// established in its place.
    pub restarted: bool,
    /// Our HEARTBEAT was answered: the next one waits a whole interval.
    pub heartbeat_acked: bool,
}

/// Handles one SCTP packet that arrived on the association (decrypted from DTLS).
pub fn handle_packet(a: &mut Sctp, bytes: &Bytes, inp: &Inputs) -> Effects {
    let mut fx = Effects::default();
    // RFC 9653 §5.3: having announced the DTLS method in our INIT or INIT ACK (every
    // INIT or INIT ACK we send carries it when configured), zero checksums are accepted.
    let Ok(packet) = Packet::parse_with(bytes, inp.limits.zero_checksum) else {
        fx.dropped = true;
        return fx;
    };
    // RFC 9260 §5.1: "An INIT or INIT ACK chunk MUST NOT be bundled with any other
    // chunk"; §8.5.1 A: a packet with tag 0 that is not an INIT alone "MUST" be
    // discarded. (So a packet of many INITs costs one answer at most.)
    if !init_alone_or_absent(&packet) {
        fx.dropped = true;
        return fx;
    }
    // No association here: the packet is out of the blue (§8.4), bar the INIT or
    // COOKIE ECHO that sets one up. An association that ended stays ended: nothing
    // revives it on this DTLS session, and no DATA is delivered after an ABORT.
    if a.state == AssocState::Closed && (a.ended.is_some() || !starts_setup(&packet)) {
        out_of_the_blue(a, &packet, inp.now);
        fx.dropped = true;
        return fx;
    }
    let vtag = packet.verification_tag;
    let mut has_data = false;
    for (i, chunk) in packet.chunks().enumerate() {
        let chunk = match chunk {
            Ok(chunk) => chunk,
            // RFC 9260 §6.2: "If an endpoint receives a DATA chunk with no user data
            // (i.e., the Length field is set to 16), it SHOULD send an ABORT chunk
            // with a "No User Data" error cause", which carries the chunk's TSN
            // (§3.3.10.9). Only from the peer (§8.5), to an association taking DATA.
            Err(SctpError::NoUserData { tsn }) if vtag == a.my_vtag && a.rx.is_some() => {
                a.abort_with(
                    AssocEnd::ProtocolViolation,
                    &[ErrorCause::no_user_data(tsn)],
                );
                return fx;
            }
            Err(_) => {
                fx.dropped = true;
                break;
            }
        };

        // RFC 9260 §8.5: every packet but one carrying INIT must carry our tag;
        // §8.5.1 B: ABORT with the T bit carries the peer's.
        let tag_ok = match &chunk {
            Chunk::Init(_) => vtag == 0,
            Chunk::Abort(ab) if ab.t_bit => vtag == a.peer_vtag,
            Chunk::CookieEcho(_) => true, // checked against the cookie below (§5.1.5)
            Chunk::ShutdownComplete(sc) if sc.t_bit => vtag == a.peer_vtag,
            _ => vtag == a.my_vtag && a.my_vtag != 0,
        };
        if !tag_ok {
            fx.dropped = true;
            return fx;
        }
        match chunk {
            // §5.1: an INIT or INIT ACK travels alone; one behind other chunks ends
            // the packet's handling.
            Chunk::Init(_) | Chunk::InitAck(_) if i > 0 => {
                fx.dropped = true;
                break;
            }
            Chunk::Init(init) => on_init(a, &init, inp),
            Chunk::InitAck(ack) => on_init_ack(a, &ack, inp),
            Chunk::CookieEcho(echo) => {
                if !on_cookie_echo(a, vtag, &echo.cookie, inp, &mut fx) {
                    return fx; // §5.1.5: the whole packet is discarded
                }
            }
            Chunk::CookieAck(_) => {
                if a.state == AssocState::CookieEchoed {
                    a.state = AssocState::Established;
                    a.cookie = None;
                    fx.established = true;
                }
            }
            Chunk::Data(d) => {
                has_data = true;
                on_data(a, d, &mut fx);
            }
            Chunk::Sack(sack) => {
                if let Some(tx) = a.tx.as_mut().filter(|_| a.state != AssocState::Closed) {
                    let in_fr = tx.cc.in_fast_recovery();
                    let blocks = sack.gap_ack_blocks.iter().map(|b| (b.start, b.end));
                    let handled = tx.outstanding.handle_sack(
                        inp.now,
                        sack.cumulative_tsn_ack,
                        blocks,
                        sack.a_rwnd,
                        in_fr,
                    );
                    if let Err(SackError::AcksUnsentTsn { .. }) = handled {
                        // RFC 9260 §11.4: "An SCTP implementation MUST abort the
                        // association if it receives a SACK chunk acknowledging a TSN
                        // that has not been sent."
                        a.violation("SACK acknowledges a TSN never sent");
                        return fx;
                    }
                    if handled.is_ok() {
                        tx.sacks_since_t3 = true;
                    }
                    if let Ok(out) = handled {
                        if tx.cc.on_sack(&out) {
                            tx.fast_retransmit_now = true;
                        }
                        // What this SACK acknowledged may be replaced, and Max.Burst
                        // more packets (RFC 9260 §6.1 D, §16: 4) on top.
                        tx.ack_credit = tx
                            .ack_credit
                            .saturating_add(out.bytes_acked.div_ceil(tx.cc.pmdcs()))
                            .saturating_add(MAX_BURST);
                        if let Some(rtt) = out.rtt_sample {
                            tx.rto.on_rtt_sample(rtt);
                        }
                        if out.newly_acked_cumulative {
                            a.error_count = 0;
                            fx.cumulative_advanced = true;
                        }
                        tx.apply_discards();
                        fx.sack_processed = true;
                    }
                }
            }
            Chunk::ForwardTsn(f) => {
                if let Some(rx) = a.rx.as_mut() {
                    let skipped: Vec<(StreamId, Ssn)> =
                        f.skipped.iter().map(|s| (s.stream_id, s.ssn)).collect();
                    rx.handle_forward_tsn(f.new_cumulative_tsn, &skipped);
                    has_data = true;
                }
            }
            Chunk::Heartbeat(hb) => {
                // RFC 9260 §8.3: echo the Heartbeat Information back.
                HeartbeatAck {
                    info: hb.info.as_ref(),
                }
                .write_to(&mut a.control.scratch);
                a.control.commit();
            }
            Chunk::HeartbeatAck(ack) => {
                if heartbeat::on_ack(a, &ack.info, inp.now) {
                    fx.heartbeat_acked = true;
                }
            }
            Chunk::Abort(_) => {
                a.end(AssocEnd::AbortedByPeer);
                return fx;
            }
            Chunk::Shutdown(sh) => {
                if !on_shutdown(a, sh.cumulative_tsn_ack, inp.now, &mut fx) {
                    return fx;
                }
            }
            Chunk::ShutdownAck(_) => match a.state {
                // §9.2: "MUST stop the T2-shutdown timer, send a SHUTDOWN COMPLETE
                // chunk to its peer, and remove all record of the association."
                AssocState::ShutdownSent | AssocState::ShutdownAckSent => {
                    let sc = ShutdownComplete { t_bit: false };
                    a.solo
                        .push(solo_packet(a.local_port, a.remote_port, a.peer_vtag, &sc));
                    a.end(AssocEnd::Shutdown);
                }
                // §9.2: the sender of INIT or COOKIE ECHO answers with a stand-alone
                // SHUTDOWN COMPLETE carrying the packet's tag (T bit set, §8.4 5) and
                // stays where it is.
                AssocState::CookieWait | AssocState::CookieEchoed => {
                    let sc = ShutdownComplete { t_bit: true };
                    a.solo
                        .push(solo_packet(a.local_port, a.remote_port, vtag, &sc));
                }
                _ => fx.dropped = true,
            },
            Chunk::ShutdownComplete(_) => {
                if a.state == AssocState::ShutdownAckSent {
                    a.end(AssocEnd::Shutdown);
                }
            }
            Chunk::ReConfig(rc) => on_reconfig(a, &rc),
            Chunk::Error(e) => {
                let stale = e
                    .causes
                    .iter()
                    .any(|c| c.code == crate::sctp::chunk::cause_code::STALE_COOKIE);
                if stale {
                    on_stale_cookie(a, inp.limits);
                }
            }
            Chunk::Unknown { typ, .. } => match unknown_chunk_action(typ) {
                UnknownAction::Stop | UnknownAction::StopAndReport => break,
                UnknownAction::Skip | UnknownAction::SkipAndReport => {}
            },
        }
    }
    if has_data && let Some(rx) = a.rx.as_mut() {
        rx.end_of_packet();
        if rx.ack_urgency() == Some(AckUrgency::Immediate) {
            a.sack_now = true;
        }
    }
    if has_data && a.state == AssocState::ShutdownSent {
        shutdown::answer_data_while_shutting_down(a, &mut fx);
    }
    fx
}

fn on_data(a: &mut Sctp, d: Data, fx: &mut Effects) {
    let Some(rx) = a.rx.as_mut() else {
        fx.dropped = true;
        return;
    };
    let h = d.header;
    let chunk = DataIn {
        tsn: h.tsn,
        stream: h.stream_id,
        ssn: h.ssn,
        ppid: h.ppid,
        unordered: h.unordered,
        begin: h.beginning,
        end: h.end,
        immediate_ack: h.immediate,
        payload: d.payload,
    };
    match rx.handle_data(chunk) {
        Ok(DataOutcome::Accepted) => {}
        Ok(DataOutcome::Duplicate | DataOutcome::Dropped(_)) => a.sack_now = true,
        Ok(DataOutcome::InvalidStream) => {
            // RFC 9260 §6.5: acknowledge it, report the stream with an ERROR chunk,
            // discard it.
            a.sack_now = true;
            let causes = [ErrorCause::invalid_stream_identifier(h.stream_id)];
            OperationError {
                causes: causes.as_slice(),
            }
            .write_to(&mut a.control.scratch);
            a.control.commit();
        }
        // RFC 9260 §6.9 / §6.2: an inconsistent or oversized message ends the
        // association; there is no way to skip it reliably.
        Err(_) => a.violation("DATA inconsistent with the message it continues"),
    }
}

/// Whether an SCTP packet would take fresh random values ([`Inputs::fresh`],
/// [`Inputs::nonce`]): it leads with an INIT (no other chunk may carry one), so the
/// caller draws them for that packet alone.
pub fn wants_fresh_values(packet: &[u8]) -> bool {
    packet.get(COMMON_HEADER_LEN) == Some(&chunk_type::INIT)
}
