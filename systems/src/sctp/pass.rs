//! The SCTP passes: `sctp` takes in what DTLS decrypted and what timers fired,
//! `sack_batch` writes at most one SACK per association per tick, and `sctp_tx`
//! fills packets up to the MTU (control chunks, the SACK, a FORWARD TSN,
//! retransmissions, then new data under cwnd and the peer's window) and hands them
//! to the peer's DTLS connection.
//!
//! Each pass visits only the associations that have work this tick: those that got a
//! packet or a timer, or that the owner gave data to send (`SctpWork`).

use bevy_ecs::entity::EntityHashSet;
use bevy_ecs::prelude::*;
use bevy_ecs::system::SystemParam;
use bytes::BytesMut;
use rand_core::RngCore;
use shoal_components::net::FiveTuple;
use shoal_components::peer::{Ice, Peer};
use shoal_components::sctp::chunk::{
    DATA_HEADER_LEN, DataHeader, ForwardTsn, GapAckBlock, RawChunk, Sack, SkippedStream, WriteChunk,
};
use shoal_components::sctp::packet::{COMMON_HEADER_LEN, PacketWriter};
use shoal_components::sctp::rx::{AckUrgency, GapAckBlock as RxGap};
use shoal_components::sctp::{Ssn, StreamId, Tsn};
use shoal_components::stats::ShardStats;
use shoal_components::tick::{
    DueTimers, Events, Now, Outbox, SctpInbox, SctpStart, SctpWork, ShardEvent,
};
use shoal_components::timer::{TimerHeap, TimerKind, Timers};

use shoal_components::sctp::assoc::{
    AssocState, Inputs, MAX_ASSOCIATION_RETRANSMITS, MAX_INIT_RETRANSMITS, Sctp, SctpLimits,
    handle_packet, maybe_request_reset, resend_reset, sack_delay,
};
use shoal_components::sctp::cookie::CookieKey;
use crate::dtls::pass::{DtlsSession, flush, push_datagram};
use shoal_components::dtls::{DtlsConn, DtlsError};
use crate::shard::ShardRng;

/// Packets one association sends in one pass of `build_packets` at most: its share
/// of a tick (a tick that also asks the peer to reset streams builds twice).
pub const MAX_PACKETS_PER_TICK: usize = 64;

/// What every association of the shard shares.
#[derive(Resource)]
pub struct SctpShared {
    /// The State Cookie secret.
    pub cookie_key: CookieKey,
    /// Buffer and window sizes.
    pub limits: SctpLimits,
}

/// Scratch buffers reused tick after tick.
#[derive(Resource, Default)]
pub struct SctpScratch {
    rx_gaps: Vec<RxGap>,
    gaps: Vec<GapAckBlock>,
    dups: Vec<Tsn>,
    fill: FillScratch,
    buf: BytesMut,
    low: Vec<StreamId>,
    seen: EntityHashSet,
}

/// Scratch for filling one packet.
#[derive(Default)]
pub struct FillScratch {
    fwd: Vec<(StreamId, Ssn)>,
    skipped: Vec<SkippedStream>,
}

/// What the sctp pass touches besides the associations.
#[derive(SystemParam)]
pub struct SctpCtx<'w> {
    now: Res<'w, Now>,
    shared: Res<'w, SctpShared>,
    heap: ResMut<'w, TimerHeap>,
    events: ResMut<'w, Events>,
    stats: ResMut<'w, ShardStats>,
    rng: ResMut<'w, ShardRng>,
    work: ResMut<'w, SctpWork>,
}

/// The sctp pass.
pub fn sctp(
    mut ctx: SctpCtx,
    mut start: ResMut<SctpStart>,
    mut inbox: ResMut<SctpInbox>,
    due: Res<DueTimers>,
    mut q: Query<(&Peer, &mut Sctp, &mut Timers)>,
) {
    let now = ctx.now.0;
    for entity in start.0.drain(..) {
        let Ok((_, mut a, mut timers)) = q.get_mut(entity) else {
            continue;
        };
        if a.initiator && a.state == AssocState::Closed {
            let (vtag, tsn) = fresh(&mut ctx.rng);
            let limits = ctx.shared.limits;
            a.start(vtag, tsn, &limits);
            // RFC 9260 §5.1 A: T1-init, from RTO.Initial (1 s).
            ctx.heap
                .arm(&mut timers, entity, TimerKind::SctpT1, now + rto_initial());
            ctx.work.0.push(entity);
        }
    }
    for (entity, bytes) in inbox.0.drain(..) {
        let Ok((peer, mut a, mut timers)) = q.get_mut(entity) else {
            continue;
        };
        let fresh = fresh(&mut ctx.rng);
        let shared = &*ctx.shared;
        let inp = Inputs {
            now,
            cookie_key: &shared.cookie_key,
            limits: &shared.limits,
            fresh,
        };
        let was = a.state;
        let fx = handle_packet(&mut a, &bytes, &inp);
        if fx.dropped {
            ctx.stats.sctp_packets_dropped += 1;
        }
        if fx.established || (was != AssocState::Established && a.state == AssocState::Established)
        {
            timers.cancel(TimerKind::SctpT1);
            if a.zero_checksum_tx {
                ctx.stats.sctp_zero_checksum_associations += 1;
            }
            ctx.events
                .0
                .push(ShardEvent::SctpEstablished { peer: peer.id });
        }
        if fx.sack_processed {
            rearm_t3(&mut ctx.heap, entity, &mut a, &mut timers, now);
        }
        if fx.shutdown_acked {
            arm_t2(&mut ctx.heap, entity, &a, &mut timers, now);
        }
        after_input(&mut ctx, entity, peer, &mut a, &mut timers);
    }
    for &(entity, kind) in &due.0 {
        let Ok((peer, mut a, mut timers)) = q.get_mut(entity) else {
            continue;
        };
        match kind {
            TimerKind::SctpT1 => on_t1(&mut ctx, entity, &mut a, &mut timers),
            TimerKind::SctpT3 => on_t3(&mut ctx, entity, &mut a, &mut timers),
            TimerKind::SctpT2 => on_t2(&mut ctx, entity, &mut a, &mut timers),
            TimerKind::SctpDelayedAck => {
                if let Some(rx) = a.rx.as_mut() {
                    rx.delayed_ack_expired();
                    a.sack_now = true;
                }
            }
            TimerKind::SctpSend => {}
            TimerKind::SctpReconfig => {
                // RFC 6525 §5.1.1: the request is retransmitted until answered.
                if resend_reset(&mut a) {
                    let rto = a.tx.as_ref().map_or(rto_initial(), |tx| tx.rto.rto());
                    ctx.heap
                        .arm(&mut timers, entity, TimerKind::SctpReconfig, now + rto);
                }
            }
            _ => continue,
        }
        after_input(&mut ctx, entity, peer, &mut a, &mut timers);
    }
}

fn after_input(ctx: &mut SctpCtx, entity: Entity, peer: &Peer, a: &mut Sctp, timers: &mut Timers) {
    if a.reset.in_flight.is_none() {
        timers.cancel(TimerKind::SctpReconfig);
    }
    if a.ended.is_some() && !a.closed_reported {
        a.closed_reported = true;
        for k in [
            TimerKind::SctpT1,
            TimerKind::SctpT2,
            TimerKind::SctpT3,
            TimerKind::SctpDelayedAck,
        ] {
            timers.cancel(k);
        }
        ctx.events.0.push(ShardEvent::SctpClosed { peer: peer.id });
    }
    // RFC 9260 §9.2: the last of our data acknowledged after a SHUTDOWN.
    if a.ack_shutdown_when_drained() {
        arm_t2(&mut ctx.heap, entity, a, timers, ctx.now.0);
    }
    // A delayed SACK gets its timer (RFC 9260 §6.2); an immediate one goes this tick.
    if let Some(rx) = a.rx.as_ref()
        && rx.ack_urgency() == Some(AckUrgency::Delayed)
        && timers.get(TimerKind::SctpDelayedAck).is_none()
    {
        let at = ctx.now.0 + sack_delay();
        ctx.heap.arm(timers, entity, TimerKind::SctpDelayedAck, at);
    }
    ctx.work.0.push(entity);
}

fn on_t1(ctx: &mut SctpCtx, entity: Entity, a: &mut Sctp, timers: &mut Timers) {
    if !matches!(a.state, AssocState::CookieWait | AssocState::CookieEchoed) {
        return;
    }
    if a.init_transmissions > MAX_INIT_RETRANSMITS {
        a.end(shoal_components::sctp::assoc::AssocEnd::SetupFailed);
        return;
    }
    a.init_transmissions += 1;
    let limits = ctx.shared.limits;
    match a.state {
        AssocState::CookieWait => a.queue_init(&limits),
        _ => a.queue_cookie_echo(),
    }
    // RFC 9260 §6.3.3 applies to T1 too (§5.1 C): the timeout doubles.
    let backoff = rto_initial().saturating_mul(1 << a.init_transmissions.min(6));
    let cap = limits.max_timer_backoff;
    ctx.heap.arm(
        timers,
        entity,
        TimerKind::SctpT1,
        ctx.now.0 + backoff.min(cap),
    );
}

fn on_t3(ctx: &mut SctpCtx, entity: Entity, a: &mut Sctp, timers: &mut Timers) {
    let now = ctx.now.0;
    let Some(tx) = a.tx.as_mut() else { return };
    let data = tx.outstanding.has_outstanding_data();
    // RFC 3758 §3.5 A5, C5: an unacknowledged FORWARD TSN goes again, even when no
    // DATA is outstanding any more (else a lost one stalls the peer's ordered streams).
    if !data && !tx.outstanding.forward_tsn_owed() {
        return;
    }
    // RFC 9260 §6.3.3 E1-E3 and §7.2.3.
    tx.rto.on_t3_expiry();
    if data {
        tx.cc.on_t3_expiry();
        tx.outstanding.handle_t3_expiry(now);
        tx.apply_discards();
    }
    tx.forward_tsn_due = tx.outstanding.forward_tsn_owed();
    let rto = tx.rto.rto();
    // RFC 9260 §6.1 A: unanswered zero window probes are not errors while SACKs come.
    if tx.t3_expiry_is_error() {
        a.error_count += 1;
    }
    // RFC 9260 §8.1: too many consecutive retransmissions: the peer is unreachable.
    if a.error_count > MAX_ASSOCIATION_RETRANSMITS {
        a.end(shoal_components::sctp::assoc::AssocEnd::PeerUnreachable);
        return;
    }
    ctx.heap.arm(timers, entity, TimerKind::SctpT3, now + rto);
}

/// RFC 9260 §9.2: T2-shutdown runs one RTO ("The rules in Section 6.3 MUST be
/// followed to determine the proper timer value for T2-shutdown").
fn arm_t2(
    heap: &mut TimerHeap,
    entity: Entity,
    a: &Sctp,
    timers: &mut Timers,
    now: shoal_components::time::Time,
) {
    let rto = a.tx.as_ref().map_or_else(rto_initial, |tx| tx.rto.rto());
    heap.arm(timers, entity, TimerKind::SctpT2, now + rto);
}

/// T2-shutdown expired in SHUTDOWN-ACK-SENT: "If the timer expires, the endpoint MUST
/// resend the SHUTDOWN ACK chunk", at most Association.Max.Retrans times, after which
/// the peer is unreachable (RFC 9260 §9.2); the RTO backs off as for T3-rtx (§6.3.3).
fn on_t2(ctx: &mut SctpCtx, entity: Entity, a: &mut Sctp, timers: &mut Timers) {
    if a.state != AssocState::ShutdownAckSent {
        return;
    }
    a.error_count += 1;
    if a.error_count > MAX_ASSOCIATION_RETRANSMITS {
        a.end(shoal_components::sctp::assoc::AssocEnd::PeerUnreachable);
        return;
    }
    if let Some(tx) = a.tx.as_mut() {
        tx.rto.on_t3_expiry();
    }
    a.queue_shutdown_ack();
    arm_t2(&mut ctx.heap, entity, a, timers, ctx.now.0);
}

/// RFC 9260 §6.3.2 R2-R4: stop T3 when nothing is outstanding, restart it when the
/// cumulative ack advanced (here: whenever a SACK leaves data outstanding).
fn rearm_t3(
    heap: &mut TimerHeap,
    entity: Entity,
    a: &mut Sctp,
    timers: &mut Timers,
    now: shoal_components::time::Time,
) {
    let Some(tx) = a.tx.as_mut() else { return };
    let forward_owed = tx.outstanding.forward_tsn_owed();
    tx.forward_tsn_due = forward_owed;
    if tx.outstanding.has_outstanding_data() || forward_owed {
        heap.arm(timers, entity, TimerKind::SctpT3, now + tx.rto.rto());
    } else {
        timers.cancel(TimerKind::SctpT3);
    }
}

fn rto_initial() -> std::time::Duration {
    std::time::Duration::from_secs(1)
}

fn fresh(rng: &mut ShardRng) -> (u32, Tsn) {
    // RFC 9260 §5.3.1: the tag is random and never 0.
    let vtag = loop {
        let v = rng.0.next_u32();
        if v != 0 {
            break v;
        }
    };
    (vtag, Tsn(rng.0.next_u32()))
}

/// The sack_batch pass: one SACK per association that owes one, written where
/// `sctp_tx` will put it at the front of the next packet, after control chunks.
pub fn sack_batch(
    mut work: ResMut<SctpWork>,
    mut scratch: ResMut<SctpScratch>,
    mut q: Query<(&mut Sctp, &mut Timers)>,
) {
    let scratch = &mut *scratch;
    // The passes before push an association once per packet or send: visit each
    // once, here and in sctp_tx (whose every visit builds packets), in the order
    // they first came (no association is always last in the tick's output).
    scratch.seen.clear();
    work.0.retain(|e| scratch.seen.insert(*e));
    for &entity in &work.0 {
        let Ok((mut a, mut timers)) = q.get_mut(entity) else {
            continue;
        };
        let a = &mut *a;
        let Some(rx) = a.rx.as_mut() else { continue };
        let data_going_out =
            a.tx.as_ref()
                .is_some_and(|tx| tx.queue.has_data() || tx.outstanding.has_retransmissions());
        // A delayed SACK rides along when DATA goes out anyway (RFC 9260 §6.2).
        let due = a.sack_now || (data_going_out && rx.ack_urgency().is_some());
        if !due {
            continue;
        }
        a.sack_now = false;
        let fields = rx.build_sack(&mut scratch.rx_gaps, &mut scratch.dups);
        scratch.gaps.clear();
        scratch
            .gaps
            .extend(scratch.rx_gaps.iter().map(|g| GapAckBlock {
                start: g.start,
                end: g.end,
            }));
        let sack = Sack {
            cumulative_tsn_ack: fields.cumulative_tsn_ack,
            a_rwnd: fields.a_rwnd,
            gap_ack_blocks: scratch.gaps.as_slice(),
            duplicate_tsns: scratch.dups.as_slice(),
        };
        a.pending_sack.clear();
        sack.write_to(&mut a.pending_sack);
        timers.cancel(TimerKind::SctpDelayedAck);
    }
}

/// What sctp_tx touches besides the associations.
#[derive(SystemParam)]
pub struct TxCtx<'w> {
    now: Res<'w, Now>,
    shared: Res<'w, SctpShared>,
    heap: ResMut<'w, TimerHeap>,
    out: ResMut<'w, Outbox>,
    stats: ResMut<'w, ShardStats>,
    scratch: ResMut<'w, SctpScratch>,
    events: ResMut<'w, Events>,
}

/// The sctp_tx pass.
pub fn sctp_tx(
    mut ctx: TxCtx,
    mut work: ResMut<SctpWork>,
    mut q: Query<(&Peer, &mut Sctp, &mut Timers, &mut DtlsSession, &Ice)>,
) {
    let now = ctx.now.0;
    let mtu = ctx.shared.limits.mtu;
    for entity in work.0.drain(..) {
        let Ok((peer, mut a, mut timers, mut session, ice)) = q.get_mut(entity) else {
            continue;
        };
        let a = &mut *a;
        let scratch = &mut *ctx.scratch;
        let path = ice.selected.or(session.reply_path);
        // Packets are written straight into the DTLS connection's outgoing buffer and
        // sealed there; with no connection (it closed) they are built and dropped, as
        // a lost packet would be, so that the association's state moves on alike.
        let mut mtu = mtu;
        let mut sink = match session.conn.as_deref_mut() {
            Some(conn) => {
                // A packet is one record: never more than a record carries.
                mtu = mtu.min(conn.max_application_plaintext());
                Sink::Dtls {
                    conn,
                    path,
                    out: &mut ctx.out,
                }
            }
            None => Sink::Discard(&mut scratch.buf),
        };
        for p in a.solo.drain(..) {
            sink.solo(&p, &mut ctx.stats);
        }
        let mut probe_at = build_packets(a, now, mtu, &mut scratch.fill, &mut sink, &mut ctx.stats);
        // Streams to reset whose queued data has just gone: ask now (RFC 6525 §5.1.2).
        if maybe_request_reset(a) {
            let rto = a.tx.as_ref().map_or(rto_initial(), |tx| tx.rto.rto());
            ctx.heap
                .arm(&mut timers, entity, TimerKind::SctpReconfig, now + rto);
            probe_at = build_packets(a, now, mtu, &mut scratch.fill, &mut sink, &mut ctx.stats);
        }
        sink.flush();
        if a.tx
            .as_ref()
            .is_some_and(|tx| tx.outstanding.has_outstanding_data())
            && timers.get(TimerKind::SctpT3).is_none()
            && let Some(tx) = a.tx.as_ref()
        {
            // RFC 9260 §6.3.2 R1.
            ctx.heap
                .arm(&mut timers, entity, TimerKind::SctpT3, now + tx.rto.rto());
        }
        timers.cancel(TimerKind::SctpSend);
        if let Some(at) = probe_at {
            ctx.heap.arm(&mut timers, entity, TimerKind::SctpSend, at);
        }
        // Streams whose buffered amount fell to their low watermark: the owner may
        // send again (a data channel's bufferedamountlow).
        if let Some(tx) = a.tx.as_mut() {
            tx.queue.take_low_watermark_events(&mut scratch.low);
            for s in scratch.low.drain(..) {
                ctx.events.0.push(ShardEvent::BufferedAmountLow {
                    peer: peer.id,
                    stream: s.0,
                });
            }
        }
    }
}

/// Why a connection refused a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Refused {
    /// Its send buffer is full: try again once it drains.
    Full,
    /// It is not open.
    Closed,
}

/// Where sctp_tx writes packets.
enum Sink<'a> {
    /// Into the peer's DTLS connection, each packet one record sealed in place;
    /// finished datagrams move to the outbox as they fill, so the connection's buffer
    /// holds at most the open one.
    Dtls {
        conn: &'a mut DtlsConn,
        path: Option<FiveTuple>,
        out: &'a mut Outbox,
    },
    /// Nowhere: a scratch buffer, cleared after each packet.
    Discard(&'a mut BytesMut),
}

impl Sink<'_> {
    /// Writes one packet, which `write` appends to the buffer it is given (at most
    /// `mtu` bytes, which the caller keeps within one record) or, returning false,
    /// leaves unwritten. `Err` when the connection refused the record: its buffer is
    /// full or it is not open, and then `write` never ran.
    fn packet(
        &mut self,
        mtu: usize,
        write: impl FnOnce(&mut BytesMut) -> bool,
    ) -> Result<bool, Refused> {
        match self {
            Sink::Dtls { conn, path, out } => {
                let written = conn
                    .send_application_with(mtu, write)
                    .map_err(|e| match e {
                        DtlsError::SendBufferFull => Refused::Full,
                        _ => Refused::Closed,
                    })?;
                while let Some(payload) = conn.poll_transmit_finished() {
                    push_datagram(out, *path, payload);
                }
                Ok(written)
            }
            Sink::Discard(buf) => {
                buf.clear();
                Ok(write(buf))
            }
        }
    }

    /// Whether packets go anywhere (for the counters).
    fn sends(&self) -> bool {
        matches!(self, Sink::Dtls { .. })
    }

    /// A packet built earlier (INIT, COOKIE ECHO and the like), copied in whole.
    fn solo(&mut self, packet: &[u8], stats: &mut ShardStats) {
        if let Sink::Dtls { conn, .. } = self {
            if conn.send_application_data(packet).is_err() {
                stats.sctp_packets_unsent += 1;
            } else {
                stats.sctp_packets_sent += 1;
            }
        }
    }

    /// Moves every datagram still in the connection, the open one included, to the
    /// outbox.
    fn flush(&mut self) {
        if let Sink::Dtls { conn, path, out } = self {
            flush(conn, *path, out);
        }
    }
}

/// Bundles control chunks, the SACK, a FORWARD TSN, retransmissions and new DATA
/// into packets of at most `mtu` bytes (RFC 9260 §6.10: control chunks first), and
/// counts the SACKs and FORWARD TSNs it bundles. Returns when to try again if new
/// data waits: for a zero window probe's time, for the connection's buffer, or
/// at once when [`MAX_PACKETS_PER_TICK`] cut the tick short while the peer's SACKs
/// acknowledged more than was sent since (`TxSide::ack_credit`).
fn build_packets(
    a: &mut Sctp,
    now: shoal_components::time::Time,
    mtu: usize,
    s: &mut FillScratch,
    sink: &mut Sink<'_>,
    stats: &mut ShardStats,
) -> Option<shoal_components::time::Time> {
    if a.peer_vtag == 0 {
        return None; // nothing but solo packets until the peer's tag is known
    }
    for _ in 0..MAX_PACKETS_PER_TICK {
        let mut filled = Filled::default();
        let written = sink.packet(mtu, |buf| {
            // A packet that stays empty must leave nothing behind in the buffer.
            let start = buf.len();
            let mut w = PacketWriter::new(buf, a.local_port, a.remote_port, a.peer_vtag);
            filled = fill_packet(&mut w, a, now, mtu, s, stats);
            if w.is_empty() {
                buf.truncate(start);
                false
            } else if a.zero_checksum_tx && !filled.crc_required {
                // RFC 9653 §5.2: of the packets built here only one carrying a COOKIE
                // ECHO must have a CRC32c (INITs go solo), whatever the state: after
                // an INIT collision ours can still be queued once established.
                w.finish_in_place_zero_checksum();
                true
            } else {
                w.finish_in_place();
                true
            }
        });
        if let (Ok(_), Some(tx)) = (&written, a.tx.as_mut()) {
            if filled.sent_data {
                tx.ack_credit = tx.ack_credit.saturating_sub(1);
            } else if !filled.deferred {
                // Out of window or of data: the next SACK clocks the sender again.
                tx.ack_credit = 0;
            }
        }
        match written {
            Ok(true) => {
                if sink.sends() {
                    stats.sctp_packets_sent += 1;
                }
            }
            Ok(false) => return None,
            // `write` did not run: nothing was taken from the queues. A full buffer
            // drains once the driver sends this tick's datagrams: look again at the
            // next tick.
            Err(refused) => {
                stats.sctp_packets_unsent += 1;
                return (refused == Refused::Full).then_some(now);
            }
        }
        if filled.wake_at.is_some() {
            return filled.wake_at;
        }
        if !filled.sent_data
            && !filled.deferred
            && a.control.is_empty()
            && a.pending_sack.is_empty()
        {
            return None;
        }
    }
    // This tick's share is used up with more perhaps waiting. While the peer's SACKs
    // have acknowledged more than was sent since, go on at the next tick (after the
    // driver has sent these and read what came in) rather than a round trip later
    // with the peer's next SACK; otherwise that SACK is the clock.
    a.tx.as_ref()
        .is_some_and(|tx| tx.ack_credit > 0)
        .then_some(now)
}

/// Fills one packet: control chunks, the SACK, a FORWARD TSN, retransmissions, then
/// new data.
fn fill_packet(
    w: &mut PacketWriter<'_>,
    a: &mut Sctp,
    now: shoal_components::time::Time,
    mtu: usize,
    s: &mut FillScratch,
    stats: &mut ShardStats,
) -> Filled {
    let mut crc_required = false;
    while let Some(chunk) = a.control.pop_fitting(w.remaining(mtu), w.is_empty()) {
        crc_required |= chunk[0] == shoal_components::sctp::chunk::chunk_type::COOKIE_ECHO;
        w.push(&RawChunk(&chunk));
    }
    let mut sack_in_packet = false;
    if !a.pending_sack.is_empty() && w.remaining(mtu) >= a.pending_sack.len() {
        w.push(&RawChunk(&a.pending_sack));
        a.pending_sack.clear();
        sack_in_packet = true;
        stats.sctp_sacks_sent += 1;
    }
    let mut sent_data = false;
    let mut deferred = false;
    let mut wake_at = None;
    // §9.2: after a SHUTDOWN, queued and outstanding data still goes.
    let sending = matches!(
        a.state,
        AssocState::Established | AssocState::ShutdownReceived
    );
    if sending && let Some(tx) = a.tx.as_mut() {
        tx.cc.on_idle(now, tx.rto.rto());
        if tx.forward_tsn_due {
            // `forward_tsn` appends, and the scratch is the whole shard's.
            s.fwd.clear();
            if let Some(new_cum) = tx.outstanding.forward_tsn(&mut s.fwd) {
                s.skipped.clear();
                s.skipped.extend(
                    s.fwd
                        .iter()
                        .map(|&(stream_id, ssn)| SkippedStream { stream_id, ssn }),
                );
                let f = ForwardTsn {
                    new_cumulative_tsn: new_cum,
                    skipped: s.skipped.as_slice(),
                };
                if f.padded_len() <= w.remaining(mtu) {
                    w.push(&f);
                    tx.forward_tsn_due = false;
                    stats.sctp_forward_tsn_sent += 1;
                }
            } else {
                tx.forward_tsn_due = false;
            }
        }
        let bypass = std::mem::take(&mut tx.fast_retransmit_now);
        // §6.1 C: retransmissions first, within cwnd (bar the first fast one).
        while w.remaining(mtu) > DATA_HEADER_LEN
            && (bypass
                || tx
                    .cc
                    .can_send(tx.outstanding.bytes_in_flight(), usize::MAX, 0))
        {
            let room = (w.remaining(mtu) - DATA_HEADER_LEN) & !3;
            let Some((tsn, d)) = tx.outstanding.next_retransmission(now, room) else {
                break;
            };
            push_data(w, tsn, d);
            sent_data = true;
        }
        tx.apply_discards();
        // §6.1 E: new data under cwnd and the peer's window.
        while !tx.outstanding.has_retransmissions()
            && w.remaining(mtu) > DATA_HEADER_LEN
            && tx.outstanding.can_add()
            && tx.queue.has_data()
        {
            let max = (w.remaining(mtu) - DATA_HEADER_LEN) & !3;
            let rwnd = tx.outstanding.peer_rwnd();
            let in_flight = tx.outstanding.bytes_in_flight();
            // RFC 9260 §6.1 A: with the window closed and nothing in flight, the next
            // chunk is a zero window probe, which "SHOULD" go "after 1 RTO"; once out,
            // T3-rtx retransmits it with the exponential back-off §6.1 A asks for.
            let next = tx.queue.peek_remaining().unwrap_or(0);
            if in_flight == 0 && rwnd < next.min(max) {
                let not_before = *tx.probe_not_before.get_or_insert(now + tx.rto.rto());
                if now < not_before {
                    wake_at = Some(not_before);
                    break;
                }
            } else {
                tx.probe_not_before = None;
            }
            let limit = if rwnd >= max || in_flight == 0 {
                max
            } else {
                rwnd & !3
            };
            if limit == 0 || !tx.cc.can_send(in_flight, rwnd, limit) {
                break;
            }
            // A message that an empty packet would carry whole is not split to top
            // up this one when the room left is under a quarter of a packet: it goes
            // whole in the next packet. Splitting it would cost the receiver a
            // reassembly and both sides a second chunk for a few bytes of room; with
            // more room left, packing wins (fewer packets for mid-sized messages).
            // RFC 9260 §6.9 fragments messages that do not fit, without saying how
            // full a packet must be.
            if !w.is_empty() && next > limit && next <= whole_packet_payload(mtu) && limit < mtu / 4
            {
                deferred = true;
                break;
            }
            let Some(chunk) = tx.queue.produce(now, limit) else {
                break;
            };
            if let Some((tsn, d)) = tx.outstanding.add(now, chunk) {
                push_data(w, tsn, d);
                sent_data = true;
            }
            tx.apply_discards();
        }
        if sent_data {
            tx.cc.on_transmit(now);
        }
    }
    if sack_in_packet && sent_data {
        stats.sctp_sacks_bundled_with_data += 1;
    }
    Filled {
        sent_data,
        deferred,
        wake_at,
        crc_required,
    }
}

/// What [`fill_packet`] put in a packet.
#[derive(Default)]
struct Filled {
    /// The packet carries DATA.
    sent_data: bool,
    /// A message was left for the next packet, which would carry it whole.
    deferred: bool,
    /// New data waits for a zero window probe's time.
    wake_at: Option<shoal_components::time::Time>,
    /// The packet carries a COOKIE ECHO: RFC 9653 §5.2 wants a CRC32c.
    crc_required: bool,
}

/// The user data an otherwise empty packet of `mtu` bytes carries in one DATA chunk.
fn whole_packet_payload(mtu: usize) -> usize {
    mtu.saturating_sub(COMMON_HEADER_LEN + DATA_HEADER_LEN) & !3
}

fn push_data(w: &mut PacketWriter<'_>, tsn: Tsn, d: &shoal_components::sctp::tx::DataToSend) {
    let header = DataHeader {
        tsn,
        stream_id: d.stream,
        ssn: d.ssn,
        ppid: d.ppid,
        immediate: false,
        unordered: d.unordered,
        beginning: d.begin,
        end: d.end,
    };
    w.push_data(&header, &d.payload);
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_components::sctp::assoc::{Inputs, handle_packet};
    use bytes::Bytes;
    use shoal_components::sctp::packet::Packet;
    use shoal_components::time::Time;

    const PORT: u16 = 5000;

    fn wrap(vtag: u32, chunk: &[u8]) -> Bytes {
        let mut buf = BytesMut::new();
        let mut w = PacketWriter::new(&mut buf, PORT, PORT, vtag);
        w.push(&RawChunk(chunk));
        w.finish()
    }

    /// An INIT collision (RFC 9260 §5.2.1) where the peer's INIT ACK and its COOKIE
    /// ECHO are handled in the same tick: our COOKIE ECHO is still queued when the
    /// association becomes ESTABLISHED, and must still leave with its CRC32c (RFC 9653
    /// §5.2).
    #[test]
    fn a_cookie_echo_after_an_init_collision_keeps_its_crc() {
        let key = CookieKey::new(&[7; 32]);
        let limits = SctpLimits::default();
        let inp = |tag| Inputs {
            now: Time::ZERO,
            cookie_key: &key,
            limits: &limits,
            fresh: (tag, Tsn(tag ^ 0x5555)),
        };
        let mut a = Sctp::new(true, PORT, PORT);
        let mut b = Sctp::new(true, PORT, PORT);
        a.start(0x1111_1111, Tsn(100), &limits);
        b.start(0x2222_2222, Tsn(200), &limits);
        let a_init = a.solo.pop().unwrap();
        let b_init = b.solo.pop().unwrap();
        handle_packet(&mut b, &a_init, &inp(9));
        let b_init_ack = b.solo.pop().unwrap();
        handle_packet(&mut a, &b_init, &inp(9));
        let a_init_ack = a.solo.pop().unwrap();
        handle_packet(&mut b, &a_init_ack, &inp(9));
        assert_eq!(b.state, AssocState::CookieEchoed);
        let b_echo = b.control.pop_fitting(usize::MAX, true).unwrap();
        let b_echo = wrap(b.peer_vtag, &b_echo);
        // Same tick at A: B's INIT ACK, then B's COOKIE ECHO.
        handle_packet(&mut a, &b_init_ack, &inp(9));
        assert_eq!(a.state, AssocState::CookieEchoed);
        let fx = handle_packet(&mut a, &b_echo, &inp(9));
        assert!(fx.established);
        assert_eq!(a.state, AssocState::Established);
        assert!(a.zero_checksum_tx);
        // sctp_tx.
        let mut buf = BytesMut::new();
        let mut stats = ShardStats::default();
        let mut fill = FillScratch::default();
        let mut sink = Sink::Discard(&mut buf);
        build_packets(&mut a, Time::ZERO, 1200, &mut fill, &mut sink, &mut stats);
        let out = Bytes::from(buf.to_vec());
        assert_eq!(
            out[12],
            shoal_components::sctp::chunk::chunk_type::COOKIE_ECHO
        );
        assert!(
            Packet::parse_with(&out, true).is_ok(),
            "COOKIE ECHO packet sent with a zero checksum: {:02x?}",
            &out[8..12]
        );
    }
}
