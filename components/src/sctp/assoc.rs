//! One SCTP association's state, a component of its peer, and the rules the `sctp`
//! pass applies to what arrives (RFC 9260 §5 setup, §6 data, §8.5 verification tags,
//! §9 shutdown). Nothing here sends: arriving chunks leave work behind (control
//! chunks queued, a SACK owed, delivered messages) for `sack_batch` and `sctp_tx`.

use std::time::Duration;

use crate::sctp::chunk::{
    Abort, Chunk, CookieAck, CookieEcho, Data, EDMID_DTLS, ErrorCause, HeartbeatAck, Init, InitAck,
    InitParam, OperationError, ReConfig, ReconfigParam, ReconfigResult, ShutdownAck,
    ShutdownComplete, UnknownAction, WriteChunk, chunk_type, unknown_chunk_action,
};
use crate::sctp::packet::{Packet, PacketWriter};
use crate::sctp::rx::{
    AckUrgency, DataIn, DataOutcome, Message, Receiver, ResetProgress, RxLimits,
};
use crate::sctp::tx::{
    CongestionConfig, CongestionControl, DEFAULT_SCTP_MTU, MessageId, RetransmissionQueue,
    RetransmissionQueueConfig, RtoConfig, RtoEstimator, SackError, SendQueue, SendQueueConfig,
};
use crate::sctp::{Ssn, StreamId, Tsn};
use crate::time::Time;
use bytes::{Bytes, BytesMut};

use super::cookie::{CookieContents, CookieError, CookieKey, VALID_COOKIE_LIFE};

/// The SCTP port WebRTC uses unless SDP says otherwise (RFC 8841 §5).
pub const DEFAULT_SCTP_PORT: u16 = 5000;
/// Streams offered each way: the most RFC 8831 §6.2 lets a channel id take.
pub const STREAMS: u16 = 1024;
/// RFC 9260 §16: Max.Init.Retransmits.
pub const MAX_INIT_RETRANSMITS: u32 = 8;
/// RFC 9260 §16: Association.Max.Retrans.
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
    /// The peer sent ABORT.
    AbortedByPeer,
    /// INIT or COOKIE ECHO went unanswered (RFC 9260 §5.1.6).
    SetupFailed,
    /// Retransmissions ran out (RFC 9260 §8.2).
    PeerUnreachable,
    /// The peer broke the protocol; we sent ABORT.
    ProtocolViolation,
    /// SHUTDOWN completed.
    Shutdown,
}

/// RFC 9260 §16's Max.Burst: packets of new DATA a SACK lets the sender add to what
/// it acknowledged (`TxSide::ack_credit`).
pub const MAX_BURST: usize = 4;

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
    /// Send one packet of retransmissions now, ignoring cwnd (RFC 9260 §7.2.4 rule 3).
    pub fast_retransmit_now: bool,
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
                RetransmissionQueueConfig::default(),
                initial_tsn,
                peer_a_rwnd,
            ),
            cc: CongestionControl::new(&CongestionConfig::default()),
            rto: RtoEstimator::new(&RtoConfig {
                max: limits.max_timer_backoff,
                ..RtoConfig::default()
            }),
            forward_tsn_due: false,
            fast_retransmit_now: false,
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
    /// Announce RFC 9653 zero checksums with the DTLS method in INIT and INIT ACK,
    /// accept them, and send them to a peer that announced the same. Every shoal
    /// association runs over DTLS, whose record protection already rejects any
    /// corrupted byte, so the CRC32c would cost two passes over each packet (one per
    /// side) for nothing; off only to test a peer's checksum path.
    pub zero_checksum: bool,
}

impl Default for SctpLimits {
    fn default() -> Self {
        SctpLimits {
            max_message_size: 256 * 1024,
            send_buffer: 4 * 1024 * 1024,
            receive_window: 4 * 1024 * 1024,
            mtu: DEFAULT_SCTP_MTU,
            max_timer_backoff: Duration::from_secs(3),
            zero_checksum: true,
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
    /// Messages reassembled this tick, for the datachannel pass.
    pub delivered: Vec<Message>,
    /// How it ended, once it has.
    pub ended: Option<AssocEnd>,
    /// Consecutive T3-rtx expiries without progress.
    pub error_count: u32,
    /// Stream reset (RFC 6525) state.
    pub reset: StreamReset,
    /// The peer announced zero checksums with the DTLS method and so do we (RFC 9653
    /// §5.2): packets other than INIT and COOKIE ECHO go with checksum zero.
    pub zero_checksum_tx: bool,
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
            delivered: Vec::new(),
            ended: None,
            error_count: 0,
            reset: StreamReset::default(),
            zero_checksum_tx: false,
        }
    }

    /// Starts the association from this side: RFC 9260 §5.1 A, INIT with our tag.
    pub fn start(&mut self, vtag: u32, initial_tsn: Tsn, limits: &SctpLimits) {
        self.my_vtag = vtag;
        self.my_initial_tsn = initial_tsn;
        self.state = AssocState::CookieWait;
        self.init_transmissions = 1;
        self.queue_init(limits);
    }

    /// Queues our INIT again (first send or a T1-init retransmission).
    pub fn queue_init(&mut self, limits: &SctpLimits) {
        let params = our_init_params(None, limits);
        let init = Init {
            initiate_tag: self.my_vtag,
            a_rwnd: limits.receive_window as u32,
            outbound_streams: STREAMS,
            inbound_streams: STREAMS,
            initial_tsn: self.my_initial_tsn,
            params: params.as_slice(),
        };
        // RFC 9260 §8.5.1 A: an INIT carries verification tag 0.
        self.solo
            .push(solo_packet(self.local_port, self.remote_port, 0, &init));
    }

    /// Queues the COOKIE ECHO again (T1-cookie retransmission).
    pub fn queue_cookie_echo(&mut self) {
        if let Some(cookie) = &self.cookie {
            CookieEcho {
                cookie: cookie.as_ref(),
            }
            .write_to(&mut self.control.scratch);
            self.control.commit();
        }
    }

    /// Queues a SHUTDOWN ACK (first send, or again on T2-shutdown or a repeated
    /// SHUTDOWN or INIT).
    pub fn queue_shutdown_ack(&mut self) {
        ShutdownAck.write_to(&mut self.control.scratch);
        self.control.commit();
    }

    /// RFC 9260 §9.2: in SHUTDOWN-RECEIVED, once no DATA is queued or outstanding,
    /// "the SHUTDOWN chunk receiver MUST send a SHUTDOWN ACK chunk and start a
    /// T2-shutdown timer of its own, entering the SHUTDOWN-ACK-SENT state". True when
    /// it just did (the caller arms T2).
    pub fn ack_shutdown_when_drained(&mut self) -> bool {
        if self.state != AssocState::ShutdownReceived {
            return false;
        }
        // Every TSN we assigned is covered by the peer's cumulative ack: a chunk
        // gap-acked or abandoned but still above it (a FORWARD TSN owed) is not done.
        let drained = self
            .tx
            .as_ref()
            .is_none_or(|tx| !tx.queue.has_data() && tx.outstanding.is_empty());
        if drained {
            self.queue_shutdown_ack();
            self.state = AssocState::ShutdownAckSent;
        }
        drained
    }

    fn establish(&mut self, c: &CookieContents, limits: &SctpLimits) {
        self.peer_vtag = c.peer_vtag;
        self.my_vtag = c.my_vtag;
        self.my_initial_tsn = c.my_initial_tsn;
        self.rx = Some(Receiver::new(
            c.peer_initial_tsn,
            rx_limits(limits, c.inbound_streams),
        ));
        self.tx = Some(TxSide::new(
            c.my_initial_tsn,
            c.peer_a_rwnd,
            c.outbound_streams,
            limits,
        ));
        self.state = AssocState::Established;
        self.cookie = None;
        self.zero_checksum_tx = limits.zero_checksum && c.peer_zero_checksum;
        self.reset.next_request_seq = c.my_initial_tsn.0;
        self.reset.peer_next_seq = c.peer_initial_tsn.0;
    }

    fn abort(&mut self, end: AssocEnd) {
        let causes: &[crate::sctp::chunk::ErrorCause] = &[];
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

    /// Marks the association over.
    pub fn end(&mut self, end: AssocEnd) {
        self.state = AssocState::Closed;
        self.ended.get_or_insert(end);
    }
}

/// Receive limits; `inbound_streams` is what the handshake negotiated (RFC 9260
/// §6.5: DATA on a higher stream is acknowledged and discarded).
fn rx_limits(limits: &SctpLimits, inbound_streams: u16) -> RxLimits {
    let mut rx = RxLimits::default();
    rx.reassembly.inbound_streams = u32::from(inbound_streams);
    rx.reassembly.receive_window_bytes = u32::try_from(limits.receive_window).unwrap_or(u32::MAX);
    rx.reassembly.max_message_bytes = u32::try_from(limits.max_message_size).unwrap_or(u32::MAX);
    rx
}

/// INIT and INIT ACK parameters: FORWARD TSN (RFC 3758 §3.1) and RE-CONFIG (RFC 6525
/// §5) announced as supported extensions (RFC 5061 §4.2.7), zero checksums over DTLS
/// (RFC 9653 §5.1) when configured, plus the cookie.
fn our_init_params(cookie: Option<Bytes>, limits: &SctpLimits) -> Vec<InitParam> {
    let mut params = vec![
        InitParam::SupportedExtensions(Bytes::from_static(&[
            chunk_type::FORWARD_TSN,
            chunk_type::RE_CONFIG,
        ])),
        InitParam::ForwardTsnSupported,
    ];
    if limits.zero_checksum {
        params.push(InitParam::ZeroChecksumAcceptable(EDMID_DTLS));
    }
    if let Some(c) = cookie {
        params.push(InitParam::StateCookie(c));
    }
    params
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
    /// A fresh random tag and initial TSN, should this packet need them.
    pub fresh: (u32, Tsn),
}

/// What handling a packet asks of the pass.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Effects {
    /// The association became established.
    pub established: bool,
    /// A SACK arrived (the T3-rtx timer needs attention).
    pub sack_processed: bool,
    /// Something arrived the packet was not valid for; counted by the caller.
    pub dropped: bool,
    /// A SHUTDOWN ACK was queued: (re)start T2-shutdown.
    pub shutdown_acked: bool,
}

/// Handles one SCTP packet that arrived on the association (decrypted from DTLS).
pub fn handle_packet(a: &mut Sctp, bytes: &Bytes, inp: &Inputs) -> Effects {
    let mut fx = Effects::default();
    // An association that ended stays ended: nothing revives it on this DTLS
    // session, and no DATA is delivered after an ABORT.
    if a.ended.is_some() {
        fx.dropped = true;
        return fx;
    }
    // RFC 9653 §5.3: having announced the DTLS method in our INIT or INIT ACK (every
    // INIT or INIT ACK we send carries it when configured), zero checksums are accepted.
    let Ok(packet) = Packet::parse_with(bytes, inp.limits.zero_checksum) else {
        fx.dropped = true;
        return fx;
    };
    let vtag = packet.verification_tag;
    let mut has_data = false;
    for chunk in packet.chunks() {
        let Ok(chunk) = chunk else {
            fx.dropped = true;
            break;
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
                        a.abort(AssocEnd::ProtocolViolation);
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
                    drain_messages(a);
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
            Chunk::HeartbeatAck(_) => {}
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
            Chunk::Error(_) => {}
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
    fx
}

/// A SHUTDOWN chunk (RFC 9260 §9.2). False: the association was aborted.
fn on_shutdown(a: &mut Sctp, cum_ack: Tsn, now: Time, fx: &mut Effects) -> bool {
    match a.state {
        AssocState::Established | AssocState::ShutdownReceived => {
            // "verify, by checking the Cumulative TSN Ack field of the chunk, that all
            // its outstanding DATA chunks have been received by the SHUTDOWN chunk
            // sender": it acknowledges what it covers.
            if let Some(tx) = a.tx.as_mut() {
                match tx.outstanding.handle_shutdown_cum_ack(now, cum_ack) {
                    Ok(out) => {
                        tx.cc.on_sack(&out);
                        tx.apply_discards();
                        // §6.3.2 R3: T3 restarts only when the earliest outstanding
                        // TSN is acknowledged, not on every repeated SHUTDOWN.
                        if out.newly_acked_cumulative {
                            a.error_count = 0;
                            fx.sack_processed = true;
                        }
                    }
                    Err(SackError::AcksUnsentTsn { .. }) => {
                        // §11.4, as for a SACK acknowledging a TSN never sent.
                        a.abort(AssocEnd::ProtocolViolation);
                        return false;
                    }
                    Err(SackError::OutOfOrder { .. }) => {}
                }
            }
            // "enter the SHUTDOWN-RECEIVED state, stop accepting new data from its SCTP
            // user"; the SHUTDOWN ACK waits until our data is acknowledged.
            a.state = AssocState::ShutdownReceived;
            fx.shutdown_acked = a.ack_shutdown_when_drained();
        }
        // "If an endpoint is in the SHUTDOWN-SENT state and receives a SHUTDOWN chunk
        // from its peer, the endpoint SHOULD respond immediately with a SHUTDOWN ACK
        // chunk"; in SHUTDOWN-ACK-SENT it "MUST continue responding to SHUTDOWN
        // chunks".
        AssocState::ShutdownSent | AssocState::ShutdownAckSent => {
            a.queue_shutdown_ack();
            a.state = AssocState::ShutdownAckSent;
            fx.shutdown_acked = true;
        }
        // "If a SHUTDOWN chunk is received in the COOKIE-WAIT or COOKIE ECHOED state,
        // the SHUTDOWN chunk SHOULD be silently discarded."
        AssocState::Closed | AssocState::CookieWait | AssocState::CookieEchoed => {
            fx.dropped = true;
        }
    }
    true
}

fn on_init(a: &mut Sctp, init: &Init, inp: &Inputs) {
    if init.validate().is_err() {
        return;
    }
    // RFC 9260 §5.2.1: in COOKIE-WAIT or COOKIE-ECHOED answer with our own tag and
    // TSN unchanged; when closed, choose new ones (§5.1 B). An established
    // association does not restart (§5.2.2 is not supported): the INIT is dropped.
    let (my_vtag, my_tsn) = match a.state {
        AssocState::Closed => inp.fresh,
        AssocState::CookieWait | AssocState::CookieEchoed => (a.my_vtag, a.my_initial_tsn),
        // RFC 9260 §9.2: in SHUTDOWN-ACK-SENT an INIT (our SHUTDOWN COMPLETE may be
        // lost) is discarded and the SHUTDOWN ACK sent again.
        AssocState::ShutdownAckSent => {
            a.queue_shutdown_ack();
            return;
        }
        _ => return,
    };
    if a.state == AssocState::Closed {
        a.my_vtag = my_vtag;
        a.my_initial_tsn = my_tsn;
    }
    let contents = CookieContents {
        created: inp.now,
        lifespan: VALID_COOKIE_LIFE,
        src_port: a.local_port,
        dst_port: a.remote_port,
        my_vtag,
        peer_vtag: init.initiate_tag,
        my_initial_tsn: my_tsn,
        peer_initial_tsn: init.initial_tsn,
        peer_a_rwnd: init.a_rwnd,
        outbound_streams: STREAMS.min(init.inbound_streams),
        inbound_streams: STREAMS.min(init.outbound_streams),
        peer_forward_tsn: init.forward_tsn_supported(),
        peer_reconfig: init.supports_chunk(chunk_type::RE_CONFIG),
        peer_zero_checksum: init.zero_checksum_method() == Some(EDMID_DTLS),
    };
    let mut cookie = BytesMut::new();
    inp.cookie_key.write(&contents, &mut cookie);
    let params = our_init_params(Some(cookie.freeze()), inp.limits);
    let ack = InitAck {
        initiate_tag: my_vtag,
        a_rwnd: inp.limits.receive_window as u32,
        outbound_streams: STREAMS,
        inbound_streams: STREAMS,
        initial_tsn: my_tsn,
        params: params.as_slice(),
    };
    // §8.5.1: the INIT ACK carries the INIT's Initiate Tag.
    a.solo.push(solo_packet(
        a.local_port,
        a.remote_port,
        init.initiate_tag,
        &ack,
    ));
}

fn on_init_ack(a: &mut Sctp, ack: &InitAck, inp: &Inputs) {
    if a.state != AssocState::CookieWait || ack.validate().is_err() {
        return; // §5.2.3: an INIT ACK anywhere else is discarded
    }
    let Some(cookie) = ack.state_cookie() else {
        a.abort(AssocEnd::ProtocolViolation);
        return;
    };
    a.peer_vtag = ack.initiate_tag;
    a.rx = Some(Receiver::new(
        ack.initial_tsn,
        rx_limits(inp.limits, STREAMS.min(ack.outbound_streams)),
    ));
    a.tx = Some(TxSide::new(
        a.my_initial_tsn,
        ack.a_rwnd,
        STREAMS.min(ack.inbound_streams),
        inp.limits,
    ));
    a.cookie = Some(cookie);
    // RFC 9653 §5.2: zero checksums go only to a peer that announced a method we use.
    a.zero_checksum_tx = inp.limits.zero_checksum && ack.zero_checksum_method() == Some(EDMID_DTLS);
    a.reset.next_request_seq = a.my_initial_tsn.0;
    a.reset.peer_next_seq = ack.initial_tsn.0;
    a.queue_cookie_echo();
    a.state = AssocState::CookieEchoed;
    a.init_transmissions = 1;
}

/// RFC 9260 §5.1.5 and the §5.2.4 cases shoal supports. False: drop the packet.
fn on_cookie_echo(a: &mut Sctp, vtag: u32, cookie: &Bytes, inp: &Inputs, fx: &mut Effects) -> bool {
    let (c, stale) = match inp.cookie_key.read(cookie, inp.now) {
        Ok(c) => (c, None),
        Err(CookieError::Stale {
            staleness_us,
            contents,
        }) => (contents, Some(staleness_us)),
        Err(CookieError::BadMac) | Err(CookieError::Malformed) => {
            fx.dropped = true;
            return false;
        }
    };
    // §5.1.5 step 3: ports and the packet's tag must match the cookie.
    if c.my_vtag != vtag || c.src_port != a.local_port || c.dst_port != a.remote_port {
        fx.dropped = true;
        return false;
    }
    if let Some(staleness_us) = stale {
        // §5.2.4 step 3: a stale cookie whose tags both match the association is
        // case E, valid all the same.
        let case_e = a.state == AssocState::Established
            && c.my_vtag == a.my_vtag
            && c.peer_vtag == a.peer_vtag;
        if !case_e {
            // §5.1.5 step 4 (and §5.2.4 step 3 for cases C and D): discard the
            // packet, DATA included, and "MUST transmit an ERROR chunk with a Stale
            // Cookie error cause", in a packet carrying the peer's tag from the
            // cookie (§8.5).
            let causes = [ErrorCause::stale_cookie(staleness_us)];
            let error = OperationError {
                causes: causes.as_slice(),
            };
            a.solo.push(solo_packet(
                a.local_port,
                a.remote_port,
                c.peer_vtag,
                &error,
            ));
            fx.dropped = true;
            return false;
        }
    }
    match a.state {
        AssocState::Closed | AssocState::CookieWait | AssocState::CookieEchoed => {
            a.establish(&c, inp.limits);
            fx.established = true;
        }
        // §5.2.4 case D: tags match the existing association: just acknowledge.
        AssocState::Established if c.my_vtag == a.my_vtag && c.peer_vtag == a.peer_vtag => {}
        _ => return false,
    }
    CookieAck.write_to(&mut a.control.scratch);
    a.control.commit();
    true
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
        Ok(DataOutcome::Accepted) => drain_messages(a),
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
        Err(_) => a.abort(AssocEnd::ProtocolViolation),
    }
}

/// RFC 6525 §5.2: a request to reset the peer's outgoing (our incoming) streams, or
/// the response to ours.
fn on_reconfig(a: &mut Sctp, rc: &ReConfig) {
    if a.state != AssocState::Established {
        return;
    }
    for param in rc.params.iter() {
        match param {
            ReconfigParam::OutgoingSsnReset {
                request_seq,
                last_tsn,
                streams,
                ..
            } => {
                let streams: Vec<StreamId> = streams.iter().collect();
                on_reset_request(a, request_seq, last_tsn, &streams);
            }
            ReconfigParam::Response {
                response_seq,
                result,
                ..
            } => {
                on_reset_response(a, response_seq, result);
            }
            // Incoming-stream, SSN/TSN and add-stream requests are not supported.
            ReconfigParam::IncomingSsnReset { request_seq, .. }
            | ReconfigParam::SsnTsnReset { request_seq }
            | ReconfigParam::AddOutgoingStreams { request_seq, .. }
            | ReconfigParam::AddIncomingStreams { request_seq, .. } => {
                if !repeat_or_bad_seq(a, request_seq) {
                    // A final answer: the next request is expected after it.
                    a.reset.peer_next_seq = request_seq.wrapping_add(1);
                    respond(a, request_seq, ReconfigResult::DENIED);
                }
            }
            ReconfigParam::Unknown { .. } => {}
        }
    }
}

fn on_reset_request(a: &mut Sctp, seq: u32, last_tsn: Tsn, streams: &[StreamId]) {
    if repeat_or_bad_seq(a, seq) {
        return;
    }
    let Some(rx) = a.rx.as_mut() else { return };
    // §5.2.2: performed once everything up to the sender's last TSN has arrived;
    // until then "in progress", and the sender asks again.
    let result = match rx.reset_streams(streams, last_tsn) {
        Ok(ResetProgress::Performed) => {
            // A reset done here leaves no "performed" flag for a later request.
            rx.take_reset_performed();
            a.reset.peer_next_seq = seq.wrapping_add(1);
            note_incoming_reset(&mut a.reset.incoming_done, streams);
            ReconfigResult::SUCCESS_PERFORMED
        }
        // A repeat of a deferred request: done if the receive side has caught up.
        Err(_) if rx.take_reset_performed() => {
            a.reset.peer_next_seq = seq.wrapping_add(1);
            note_incoming_reset(&mut a.reset.incoming_done, streams);
            ReconfigResult::SUCCESS_PERFORMED
        }
        Ok(ResetProgress::Deferred) | Err(_) => ReconfigResult::IN_PROGRESS,
    };
    respond(a, seq, result);
}

/// Tells the datachannel pass which incoming streams a performed reset covered.
/// RFC 6525 §5.2.2 E3: "If no stream numbers are listed in the parameter, then all
/// incoming streams MUST be reset", so an empty list names every stream we offered
/// (rare, and bounded by [`STREAMS`]).
fn note_incoming_reset(done: &mut Vec<StreamId>, streams: &[StreamId]) {
    if streams.is_empty() {
        done.extend((0..STREAMS).map(StreamId));
    } else {
        done.extend_from_slice(streams);
    }
}

/// RFC 6525 §5.2.1: a repeat of the last request gets the same answer again, and a
/// request that is neither the expected one nor that repeat gets "bad sequence
/// number" (not remembered as the last answer). True when the request was handled.
fn repeat_or_bad_seq(a: &mut Sctp, seq: u32) -> bool {
    if seq == a.reset.peer_next_seq {
        return false;
    }
    match &a.reset.last_response {
        Some((last_seq, bytes)) if *last_seq == seq => {
            let bytes = bytes.clone();
            a.control.push(bytes);
        }
        _ => {
            let last = a.reset.last_response.take();
            respond(a, seq, ReconfigResult::ERROR_BAD_SEQUENCE_NUMBER);
            a.reset.last_response = last;
        }
    }
    true
}

fn respond(a: &mut Sctp, seq: u32, result: ReconfigResult) {
    let param: ReconfigParam<&[StreamId]> = ReconfigParam::Response {
        response_seq: seq,
        result,
        next_tsns: None,
    };
    let bytes = encode_reconfig(param);
    a.control.push(bytes.clone());
    a.reset.last_response = Some((seq, bytes));
}

fn on_reset_response(a: &mut Sctp, seq: u32, result: ReconfigResult) {
    let Some((ours, streams, _)) = &a.reset.in_flight else {
        return;
    };
    if *ours != seq {
        return;
    }
    match result {
        ReconfigResult::IN_PROGRESS => {} // the reconfig timer asks again
        r => {
            let streams = streams.clone();
            if let Some(tx) = a.tx.as_mut() {
                if r == ReconfigResult::SUCCESS_PERFORMED
                    || r == ReconfigResult::SUCCESS_NOTHING_TO_DO
                {
                    tx.queue.commit_reset(&streams);
                } else {
                    tx.queue.rollback_reset(&streams);
                }
            }
            // Whatever the answer, the channel is gone from our side.
            a.reset.outgoing_done.extend_from_slice(&streams);
            a.reset.in_flight = None;
        }
    }
}

/// Sends our reset request for the wanted streams whose queued data has gone
/// (RFC 6525 §5.1.2), if none is in flight. True when a request went out.
pub fn maybe_request_reset(a: &mut Sctp) -> bool {
    if a.reset.in_flight.is_some()
        || a.reset.wanted.is_empty()
        || a.state != AssocState::Established
    {
        return false;
    }
    let Some(tx) = a.tx.as_mut() else {
        return false;
    };
    let mut ready = Vec::new();
    tx.queue.take_streams_ready_to_reset(&mut ready);
    if ready.is_empty() {
        return false;
    }
    a.reset.wanted.retain(|s| !ready.contains(s));
    let last_tsn = tx.outstanding.next_tsn().prev();
    tx.outstanding.begin_stream_reset();
    let seq = a.reset.next_request_seq;
    a.reset.next_request_seq = seq.wrapping_add(1);
    let param = ReconfigParam::OutgoingSsnReset {
        request_seq: seq,
        response_seq: a.reset.peer_next_seq.wrapping_sub(1),
        last_tsn,
        streams: ready.as_slice(),
    };
    let bytes = encode_reconfig(param);
    a.control.push(bytes.clone());
    a.reset.in_flight = Some((seq, ready, bytes));
    true
}

/// Re-sends our reset request (the reconfig timer fired, or the answer was "in
/// progress").
pub fn resend_reset(a: &mut Sctp) -> bool {
    match &a.reset.in_flight {
        Some((_, _, bytes)) => {
            a.control.push(bytes.clone());
            true
        }
        None => false,
    }
}

/// One RE-CONFIG chunk carrying `param` (RFC 6525 §3.1), encoded.
fn encode_reconfig(param: ReconfigParam<&[StreamId]>) -> Bytes {
    let params = [param];
    let chunk = ReConfig {
        params: params.as_slice(),
    };
    let mut buf = BytesMut::with_capacity(chunk.padded_len());
    chunk.write_to(&mut buf);
    buf.freeze()
}

fn drain_messages(a: &mut Sctp) {
    if let Some(rx) = a.rx.as_mut() {
        while let Some(m) = rx.pop_message() {
            a.delivered.push(m);
        }
    }
}

/// The delay of the delayed-ack timer.
pub fn sack_delay() -> Duration {
    Duration::from_millis(200)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sctp::Ppid;
    use crate::sctp::chunk::{GapAckBlock, Heartbeat, Sack, Shutdown, cause_code};
    use crate::sctp::packet::PacketWriter;
    use crate::sctp::tx::{OutgoingMessage, Reliability as TxReliability};

    use crate::sctp::chunk::RawChunk;

    const PORT: u16 = 5000;

    fn packet(vtag: u32, chunks: &[&[u8]]) -> Bytes {
        let mut buf = BytesMut::new();
        let mut w = PacketWriter::new(&mut buf, PORT, PORT, vtag);
        for c in chunks {
            w.push(&RawChunk(c));
        }
        w.finish()
    }

    /// The chunks of one packet, by type.
    fn chunk_types(p: &Bytes) -> Vec<u8> {
        Packet::parse(p)
            .unwrap()
            .chunks()
            .map(|c| c.unwrap().chunk_type())
            .collect()
    }

    fn inputs<'a>(now: Time, key: &'a CookieKey, limits: &'a SctpLimits, tag: u32) -> Inputs<'a> {
        Inputs {
            now,
            cookie_key: key,
            limits,
            fresh: (tag, Tsn(tag ^ 0x5555)),
        }
    }

    /// Runs INIT and INIT ACK between a fresh client and server; returns both and the
    /// COOKIE ECHO packet the client would send next.
    fn up_to_cookie_echo(key: &CookieKey, limits: &SctpLimits) -> (Sctp, Sctp, Bytes) {
        let mut client = Sctp::new(true, PORT, PORT);
        let mut server = Sctp::new(false, PORT, PORT);
        client.start(0x1111_1111, Tsn(100), limits);
        let init = client.solo.pop().unwrap();
        handle_packet(
            &mut server,
            &init,
            &inputs(Time::ZERO, key, limits, 0x2222_2222),
        );
        let init_ack = server.solo.pop().unwrap();
        handle_packet(
            &mut client,
            &init_ack,
            &inputs(Time::ZERO, key, limits, 0x3333_3333),
        );
        assert_eq!(client.state, AssocState::CookieEchoed);
        let echo = client.control.pop_fitting(usize::MAX, true).unwrap();
        let echo = packet(client.peer_vtag, &[&echo]);
        (client, server, echo)
    }

    #[test]
    fn a_stale_cookie_gets_a_stale_cookie_error_and_no_association() {
        let key = CookieKey::new(&[9; 32]);
        let limits = SctpLimits::default();
        let (client, mut server, echo) = up_to_cookie_echo(&key, &limits);
        // §5.1.5 step 4: past its lifespan the packet is discarded and an ERROR with
        // a Stale Cookie cause goes back, under the client's tag.
        let late = Time::ZERO + VALID_COOKIE_LIFE + Duration::from_millis(3);
        let fx = handle_packet(&mut server, &echo, &inputs(late, &key, &limits, 1));
        assert!(fx.dropped && !fx.established);
        assert_eq!(server.state, AssocState::Closed);
        let error = server.solo.pop().expect("an ERROR packet");
        let p = Packet::parse(&error).unwrap();
        assert_eq!(p.verification_tag, client.my_vtag);
        let chunk = p.chunks().next().unwrap().unwrap();
        assert_eq!(chunk.chunk_type(), chunk_type::ERROR);
        let Chunk::Error(e) = chunk else {
            panic!("{chunk:?}")
        };
        let cause = e.causes.iter().next().unwrap();
        assert_eq!(cause.code, cause_code::STALE_COOKIE);
        // Staleness in microseconds: 3 ms past the lifespan.
        assert_eq!(cause.info.as_ref(), 3_000u32.to_be_bytes());
        assert!(server.control.is_empty(), "no COOKIE ACK");
        // The same cookie in time establishes.
        let fx = handle_packet(&mut server, &echo, &inputs(Time::ZERO, &key, &limits, 1));
        assert!(fx.established);
        assert_eq!(server.state, AssocState::Established);
    }

    #[test]
    fn a_sack_for_a_tsn_never_sent_aborts() {
        let key = CookieKey::new(&[9; 32]);
        let limits = SctpLimits::default();
        let (mut client, mut server, echo) = up_to_cookie_echo(&key, &limits);
        handle_packet(&mut server, &echo, &inputs(Time::ZERO, &key, &limits, 1));
        let ack = server.control.pop_fitting(usize::MAX, true).unwrap();
        let ack = packet(client.my_vtag, &[&ack]);
        handle_packet(&mut client, &ack, &inputs(Time::ZERO, &key, &limits, 1));
        assert_eq!(client.state, AssocState::Established);
        // Nothing was sent, yet the SACK acks 10 TSNs past the initial one.
        let mut sack = BytesMut::new();
        Sack {
            cumulative_tsn_ack: Tsn(client.my_initial_tsn.0.wrapping_add(9)),
            a_rwnd: 65_536,
            gap_ack_blocks: &[] as &[GapAckBlock],
            duplicate_tsns: &[] as &[Tsn],
        }
        .write_to(&mut sack);
        let sack = packet(client.my_vtag, &[&sack]);
        handle_packet(&mut client, &sack, &inputs(Time::ZERO, &key, &limits, 1));
        // RFC 9260 §11.4: abort.
        assert_eq!(client.ended, Some(AssocEnd::ProtocolViolation));
        let abort = client.solo.pop().expect("an ABORT packet");
        assert_eq!(chunk_types(&abort), vec![chunk_type::ABORT]);
    }

    /// Client and server with the association established.
    fn established(key: &CookieKey, limits: &SctpLimits) -> (Sctp, Sctp) {
        let (mut client, mut server, echo) = up_to_cookie_echo(key, limits);
        handle_packet(&mut server, &echo, &inputs(Time::ZERO, key, limits, 1));
        let ack = server.control.pop_fitting(usize::MAX, true).unwrap();
        let ack = packet(client.my_vtag, &[&ack]);
        handle_packet(&mut client, &ack, &inputs(Time::ZERO, key, limits, 1));
        assert_eq!(client.state, AssocState::Established);
        assert_eq!(server.state, AssocState::Established);
        (client, server)
    }

    fn shutdown(vtag: u32, cum: Tsn) -> Bytes {
        let mut chunk = BytesMut::new();
        Shutdown {
            cumulative_tsn_ack: cum,
        }
        .write_to(&mut chunk);
        packet(vtag, &[&chunk])
    }

    fn control_types(a: &mut Sctp) -> Vec<u8> {
        std::iter::from_fn(|| a.control.pop_fitting(usize::MAX, true))
            .map(|c| c[0])
            .collect()
    }

    /// Queues one small message on stream 1 and puts it in flight, as `sctp_tx`
    /// would; returns its TSN.
    fn in_flight(a: &mut Sctp, policy: TxReliability) -> Tsn {
        let tx = a.tx.as_mut().unwrap();
        let msg = OutgoingMessage {
            ppid: Ppid(53),
            payload: Bytes::from_static(b"last words"),
            unordered: false,
            policy,
        };
        tx.queue.send(Time::ZERO, StreamId(1), msg).unwrap();
        let d = tx.queue.produce(Time::ZERO, 1000).unwrap();
        tx.outstanding.add(Time::ZERO, d).unwrap().0
    }

    #[test]
    fn a_shutdown_is_acked_only_once_our_data_is_acknowledged() {
        let key = CookieKey::new(&[9; 32]);
        let limits = SctpLimits::default();
        let (client, mut server) = established(&key, &limits);
        let inp = |t| inputs(t, &key, &limits, 1);
        let tag = server.my_vtag;
        // One message in flight from the server.
        let tsn = in_flight(&mut server, TxReliability::Reliable);
        // §9.2: a SHUTDOWN that does not cover it: SHUTDOWN-RECEIVED, no SHUTDOWN ACK.
        let before = Tsn(tsn.0.wrapping_sub(1));
        let fx = handle_packet(&mut server, &shutdown(tag, before), &inp(Time::ZERO));
        assert!(!fx.dropped && !fx.shutdown_acked);
        assert_eq!(server.state, AssocState::ShutdownReceived);
        assert!(control_types(&mut server).is_empty());
        // Its cumulative ack covering the message: SHUTDOWN ACK, SHUTDOWN-ACK-SENT.
        let fx = handle_packet(&mut server, &shutdown(tag, tsn), &inp(Time::ZERO));
        assert!(fx.sack_processed && fx.shutdown_acked);
        assert_eq!(server.state, AssocState::ShutdownAckSent);
        assert!(
            !server
                .tx
                .as_ref()
                .unwrap()
                .outstanding
                .has_outstanding_data()
        );
        assert_eq!(control_types(&mut server), vec![chunk_type::SHUTDOWN_ACK]);
        // A repeated SHUTDOWN, or an INIT (our SHUTDOWN COMPLETE lost), gets it again.
        handle_packet(&mut server, &shutdown(tag, tsn), &inp(Time::ZERO));
        assert_eq!(control_types(&mut server), vec![chunk_type::SHUTDOWN_ACK]);
        let mut restart = Sctp::new(true, PORT, PORT);
        restart.start(client.my_vtag, Tsn(5), &limits);
        let init = restart.solo.pop().unwrap();
        handle_packet(&mut server, &init, &inp(Time::ZERO));
        assert!(server.solo.is_empty(), "no INIT ACK");
        assert_eq!(control_types(&mut server), vec![chunk_type::SHUTDOWN_ACK]);
        // SHUTDOWN COMPLETE ends it.
        let complete = solo_packet(PORT, PORT, tag, &ShutdownComplete { t_bit: false });
        handle_packet(&mut server, &complete, &inp(Time::ZERO));
        assert_eq!(server.ended, Some(AssocEnd::Shutdown));
    }

    #[test]
    fn shutdown_chunks_during_setup_are_discarded_or_completed() {
        let key = CookieKey::new(&[9; 32]);
        let limits = SctpLimits::default();
        let (mut client, _server, _echo) = up_to_cookie_echo(&key, &limits);
        let inp = inputs(Time::ZERO, &key, &limits, 1);
        let tag = client.my_vtag;
        // §9.2: SHUTDOWN in COOKIE-ECHOED is silently discarded.
        let fx = handle_packet(&mut client, &shutdown(tag, Tsn(0)), &inp);
        assert!(fx.dropped);
        assert_eq!(client.state, AssocState::CookieEchoed);
        // A SHUTDOWN ACK gets a stand-alone SHUTDOWN COMPLETE with the T bit and the
        // packet's tag; the client stays in COOKIE-ECHOED.
        let mut chunk = BytesMut::new();
        ShutdownAck.write_to(&mut chunk);
        handle_packet(&mut client, &packet(tag, &[&chunk]), &inp);
        assert_eq!(client.state, AssocState::CookieEchoed);
        assert!(client.ended.is_none());
        let complete = client.solo.pop().expect("a SHUTDOWN COMPLETE");
        let p = Packet::parse(&complete).unwrap();
        assert_eq!(p.verification_tag, tag);
        let Some(Ok(Chunk::ShutdownComplete(sc))) = p.chunks().next() else {
            panic!("SHUTDOWN COMPLETE expected")
        };
        assert!(sc.t_bit);
    }

    #[test]
    fn a_reset_request_listing_no_streams_resets_them_all() {
        let key = CookieKey::new(&[9; 32]);
        let limits = SctpLimits::default();
        let (mut client, server) = established(&key, &limits);
        let tag = client.my_vtag;
        // RFC 6525 §4.1/§5.2.2 E3: no stream numbers means every incoming stream.
        let request = encode_reconfig(ReconfigParam::OutgoingSsnReset {
            request_seq: client.reset.peer_next_seq,
            response_seq: 0,
            last_tsn: Tsn(server.my_initial_tsn.0.wrapping_sub(1)),
            streams: &[],
        });
        handle_packet(
            &mut client,
            &packet(tag, &[&request]),
            &inputs(Time::ZERO, &key, &limits, 1),
        );
        let done = std::mem::take(&mut client.reset.incoming_done);
        assert_eq!(done.len(), usize::from(STREAMS));
        assert!(done.iter().enumerate().all(|(i, s)| usize::from(s.0) == i));
        let response = client.control.pop_fitting(usize::MAX, true).unwrap();
        let Ok(Chunk::ReConfig(rc)) = packet_chunk(&response) else {
            panic!("a RE-CONFIG response")
        };
        let Some(ReconfigParam::Response { result, .. }) = rc.params.iter().next() else {
            panic!("{rc:?}")
        };
        assert_eq!(result, ReconfigResult::SUCCESS_PERFORMED);
    }

    /// §9.2: SHUTDOWN ACK waits until the SHUTDOWN's cumulative TSN covers everything
    /// we sent. With an abandoned (PR-SCTP) chunk below a gap-acked one, nothing is in
    /// flight, yet the peer still needs a FORWARD TSN.
    #[test]
    fn a_shutdown_ack_waits_for_the_forward_tsn_it_owes() {
        let key = CookieKey::new(&[9; 32]);
        let limits = SctpLimits::default();
        let (_client, mut server) = established(&key, &limits);
        let inp = |t| inputs(t, &key, &limits, 1);
        let tag = server.my_vtag;
        let tsn1 = in_flight(&mut server, TxReliability::MaxRetransmits(0));
        in_flight(&mut server, TxReliability::MaxRetransmits(0));
        // SACK: TSN 2 gap-acked, TSN 1 missing.
        let mut sack = BytesMut::new();
        Sack {
            cumulative_tsn_ack: Tsn(tsn1.0.wrapping_sub(1)),
            a_rwnd: 65_536,
            gap_ack_blocks: &[GapAckBlock { start: 2, end: 2 }][..],
            duplicate_tsns: &[] as &[Tsn],
        }
        .write_to(&mut sack);
        handle_packet(&mut server, &packet(tag, &[&sack]), &inp(Time::ZERO));
        // T3 expiry: TSN 1 (MaxRetransmits 0) is abandoned.
        let tx = server.tx.as_mut().unwrap();
        tx.outstanding.handle_t3_expiry(Time::ZERO);
        tx.apply_discards();
        assert!(tx.outstanding.forward_tsn_owed());
        // The peer's SHUTDOWN still stops below TSN 1.
        let fx = handle_packet(
            &mut server,
            &shutdown(tag, Tsn(tsn1.0.wrapping_sub(1))),
            &inp(Time::ZERO),
        );
        assert!(
            !fx.shutdown_acked && server.state == AssocState::ShutdownReceived,
            "SHUTDOWN ACK sent while the peer's cumulative TSN is short of what we sent \
             (FORWARD TSN owed); state {:?}",
            server.state
        );
    }

    /// RFC 9653 §5.3: zero checksums are accepted only by an end that announced the
    /// method; any other end drops them as corrupt.
    #[test]
    fn zero_checksums_are_accepted_only_when_announced() {
        let key = CookieKey::new(&[9; 32]);
        for announced in [true, false] {
            let limits = SctpLimits {
                zero_checksum: announced,
                ..SctpLimits::default()
            };
            let (_client, mut server) = established(&key, &limits);
            let mut hb = BytesMut::new();
            Heartbeat {
                info: Bytes::from_static(b"ping"),
            }
            .write_to(&mut hb);
            let mut p = packet(server.my_vtag, &[&hb]).to_vec();
            p[8..12].fill(0);
            let fx = handle_packet(
                &mut server,
                &Bytes::from(p),
                &inputs(Time::ZERO, &key, &limits, 1),
            );
            assert_eq!(fx.dropped, !announced, "announced: {announced}");
        }
    }

    /// The one chunk of an encoded chunk, parsed.
    fn packet_chunk(chunk: &Bytes) -> Result<Chunk, crate::sctp::error::SctpError> {
        let p = Packet::parse(&packet(1, &[chunk])).unwrap();
        p.chunks().next().unwrap()
    }

    #[test]
    fn zero_window_probes_are_not_errors_while_sacks_arrive() {
        let limits = SctpLimits::default();
        let mut tx = TxSide::new(Tsn(1), 0, 16, &limits);
        // Window closed from the start (a_rwnd 0), SACKs arriving between expiries:
        // probing, not failure.
        tx.sacks_since_t3 = true;
        assert!(!tx.t3_expiry_is_error());
        // No SACK since the last expiry: the peer may be gone; it counts.
        assert!(tx.t3_expiry_is_error());
        // An open window: every expiry counts, SACKs or not.
        let mut open = TxSide::new(Tsn(1), 65_536, 16, &limits);
        open.sacks_since_t3 = true;
        assert!(open.t3_expiry_is_error());
    }

    #[test]
    fn control_queue_is_bounded_and_drops_what_cannot_fit_a_packet() {
        let mut q = ControlQueue::default();
        // A HEARTBEAT ACK too large for any packet is dropped, not left to block the
        // chunks behind it.
        q.push(Bytes::from(vec![0u8; 1208]));
        q.push(Bytes::from(vec![1u8; 16]));
        assert_eq!(q.pop_fitting(1123, true).map(|c| c.len()), Some(16));
        assert!(q.is_empty());
        // Chunks leave whole: one that does not fit a partly filled packet waits.
        q.push(Bytes::from(vec![2u8; 100]));
        assert_eq!(q.pop_fitting(50, false), None);
        assert_eq!(q.pop_fitting(100, false).map(|c| c.len()), Some(100));
        // A flood is bounded.
        for _ in 0..10_000 {
            q.push(Bytes::from(vec![3u8; 16]));
        }
        let mut held = 0;
        while let Some(c) = q.pop_fitting(usize::MAX, true) {
            held += c.len();
        }
        assert!(held <= ControlQueue::MAX_BYTES, "{held}");
    }
}
