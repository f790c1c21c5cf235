//! The `sctp_tx` pass: for each association on this tick's work list, the packets it
//! may send now ([`packetizer`]: control chunks, the SACK, a FORWARD TSN,
//! retransmissions, then new data under cwnd and the peer's window, RFC 9260 §6),
//! each written straight into the peer's DTLS connection and sealed there; then its
//! timers (T3-rtx, stream reset, the next send) and the buffered-amount-low events.

mod packetizer;

use bevy_ecs::prelude::*;
use bevy_ecs::system::SystemParam;
use bytes::BytesMut;
use shoal_components::peer::{Ice, Peer};
use shoal_components::sctp::StreamId;
use shoal_components::sctp::assoc::{AssocState, RTO_INITIAL, Sctp, maybe_request_reset};
use shoal_components::shared::SctpShared;
use shoal_components::stats::ShardStats;
use shoal_components::tick::{Events, Now, Outbox, SctpWork, ShardEvent};
use shoal_components::timer::{TimerHeap, TimerKind, Timers};
use shoal_components::transport::DtlsSession;

pub use packetizer::MAX_PACKETS_PER_TICK;
use packetizer::{FillScratch, Sink, build_packets};

/// The pass's own buffers, reused tick after tick.
#[derive(Default)]
pub struct TxScratch {
    fill: FillScratch,
    buf: BytesMut,
    low: Vec<StreamId>,
}

/// What sctp_tx touches besides the associations.
#[derive(SystemParam)]
pub struct TxCtx<'w, 's> {
    scratch: Local<'s, TxScratch>,
    now: Res<'w, Now>,
    shared: Res<'w, SctpShared>,
    heap: ResMut<'w, TimerHeap>,
    out: ResMut<'w, Outbox>,
    stats: ResMut<'w, ShardStats>,
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
        let path = session.path(ice.selected);
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
        // Once an association has ended (or before it has started), only whole
        // packets go: an ABORT, a SHUTDOWN COMPLETE, an answer out of the blue.
        if a.state == AssocState::Closed {
            sink.flush();
            timers.cancel(TimerKind::SctpSend);
            continue;
        }
        let mut probe_at = build_packets(a, now, mtu, &mut scratch.fill, &mut sink, &mut ctx.stats);
        // Streams to reset whose queued data has just gone: ask now (RFC 6525 §5.1.2).
        if maybe_request_reset(a) {
            let rto = a.tx.as_ref().map_or(RTO_INITIAL, |tx| tx.rto.rto());
            ctx.heap
                .arm(&mut timers, entity, TimerKind::SctpReconfig, now + rto);
            probe_at = build_packets(a, now, mtu, &mut scratch.fill, &mut sink, &mut ctx.stats);
        }
        // Messages abandoned while the packets were built: the peer hears of them now.
        if a.tx.as_mut().is_some_and(|tx| tx.forward_tsn_news()) {
            probe_at = build_packets(a, now, mtu, &mut scratch.fill, &mut sink, &mut ctx.stats);
        }
        sink.flush();
        let restart =
            a.tx.as_mut()
                .is_some_and(|tx| std::mem::take(&mut tx.t3_restart_due));
        if a.tx.as_ref().is_some_and(|tx| {
            tx.outstanding.has_outstanding_data() || tx.outstanding.forward_tsn_owed()
        }) && (restart || timers.get(TimerKind::SctpT3).is_none())
            && let Some(tx) = a.tx.as_ref()
        {
            // RFC 9260 §6.3.2 R1, and §7.2.4 rule 4 for a fast retransmission of the
            // earliest outstanding TSN; RFC 3758 §3.5 C5 while a FORWARD TSN is
            // unacknowledged.
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
