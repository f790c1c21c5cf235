//! Fills an association's packets up to the MTU (RFC 9260 §6.10: control chunks
//! first, then the SACK, a FORWARD TSN, retransmissions, new DATA) and writes each
//! into a [`Sink`]: the peer's DTLS connection, sealed in place as the plaintext of
//! one record (no per-packet buffer or copy), or nowhere when the connection closed.

use bytes::BytesMut;
use shoal_components::dtls::{DtlsConn, DtlsError};
use shoal_components::net::FiveTuple;
use shoal_components::sctp::assoc::{AssocState, Sctp};
use shoal_components::sctp::chunk::{
    DATA_HEADER_LEN, DataHeader, ForwardTsn, RawChunk, SkippedStream, WriteChunk,
};
use shoal_components::sctp::packet::{COMMON_HEADER_LEN, PacketWriter};
use shoal_components::sctp::tx::DataToSend;
use shoal_components::sctp::{Ssn, StreamId, Tsn};
use shoal_components::stats::ShardStats;
use shoal_components::tick::Outbox;
use shoal_components::time::Time;
use shoal_components::transport::flush_sealed;

/// Packets one association sends in one pass of `build_packets` at most: its share
/// of a tick (a tick that also asks the peer to reset streams, or tells it of a
/// message abandoned as the packets were built, builds again).
pub const MAX_PACKETS_PER_TICK: usize = 64;
/// Scratch for filling one packet.
#[derive(Default)]
pub struct FillScratch {
    fwd: Vec<(StreamId, Ssn)>,
    skipped: Vec<SkippedStream>,
}

/// Why a connection refused a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Refused {
    /// Its send buffer is full: try again once it drains.
    Full,
    /// It is not open.
    Closed,
}

/// Where sctp_tx writes packets.
pub(super) enum Sink<'a> {
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
                    out.push_on(*path, payload);
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
    pub(super) fn solo(&mut self, packet: &[u8], stats: &mut ShardStats) {
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
    pub(super) fn flush(&mut self) {
        if let Sink::Dtls { conn, path, out } = self {
            flush_sealed(conn, *path, out);
        }
    }
}

/// Bundles control chunks, the SACK, a FORWARD TSN, retransmissions and new DATA
/// into packets of at most `mtu` bytes (RFC 9260 §6.10: control chunks first), and
/// counts the SACKs and FORWARD TSNs it bundles. Returns when to try again if new
/// data waits: for a zero window probe's time, for the connection's buffer, or
/// at once when [`MAX_PACKETS_PER_TICK`] cut the tick short while the peer's SACKs
/// acknowledged more than was sent since (`TxSide::ack_credit`).
pub(super) fn build_packets(
    a: &mut Sctp,
    now: Time,
    mtu: usize,
    s: &mut FillScratch,
    sink: &mut Sink<'_>,
    stats: &mut ShardStats,
) -> Option<Time> {
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
            // Nothing to send now; new data held for a zero window probe's time still
            // needs its wake-up, or it would wait for whatever sends next.
            Ok(false) => return filled.wake_at,
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
        // A FORWARD TSN that control chunks left no room for goes in the next.
        if !filled.sent_data
            && !filled.deferred
            && a.control.is_empty()
            && a.pending_sack.is_empty()
            && !a.tx.as_ref().is_some_and(|tx| tx.forward_tsn_due)
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
    now: Time,
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
    // §9.2: after a SHUTDOWN (ours asked for, or the peer's), queued and
    // outstanding data still goes.
    let sending = matches!(
        a.state,
        AssocState::Established | AssocState::ShutdownPending | AssocState::ShutdownReceived
    );
    if sending && let Some(tx) = a.tx.as_mut() {
        tx.cc.on_idle(now, tx.rto.rto());
        if tx.forward_tsn_due {
            // `forward_tsn` appends, and the scratch is the whole shard's.
            s.fwd.clear();
            if tx.holds_forward_tsn(now) {
                // The same went less than a round trip ago; the next SACK after it,
                // or T3-rtx, brings this one back if it is still owed. Decided
                // before its stream list is built: held is the common case in a
                // flood of SACKs.
                tx.forward_tsn_due = false;
                stats.sctp_forward_tsn_held += 1;
            } else if let Some(new_cum) = tx.outstanding.forward_tsn(&mut s.fwd) {
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
                    tx.forward_tsn_sent = Some((new_cum, now));
                    stats.sctp_forward_tsn_sent += 1;
                }
            } else {
                tx.forward_tsn_due = false;
            }
        }
        let bypass = std::mem::take(&mut tx.fast_retransmit_now);
        let earliest = tx.outstanding.cumulative_tsn_ack().next();
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
            // §7.2.4 rule 4: a fast retransmission of the earliest outstanding TSN
            // restarts T3-rtx, which the SACKs that triggered it (gap blocks only)
            // did not.
            tx.t3_restart_due |= bypass && tsn == earliest;
            push_data(w, tsn, d);
            stats.sctp_retransmissions += 1;
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
    wake_at: Option<Time>,
    /// The packet carries a COOKIE ECHO: RFC 9653 §5.2 wants a CRC32c.
    crc_required: bool,
}

/// The user data an otherwise empty packet of `mtu` bytes carries in one DATA chunk.
fn whole_packet_payload(mtu: usize) -> usize {
    mtu.saturating_sub(COMMON_HEADER_LEN + DATA_HEADER_LEN) & !3
}

fn push_data(w: &mut PacketWriter<'_>, tsn: Tsn, d: &DataToSend) {
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
    use bytes::Bytes;
    use shoal_components::sctp::assoc::{Inputs, SctpLimits, handle_packet};
    use shoal_components::sctp::cookie::CookieKey;
    use shoal_components::sctp::packet::Packet;

    const PORT: u16 = 5000;

    /// What `handle_packet` is given at time zero, with fresh values from `tag`.
    fn inputs<'a>(key: &'a CookieKey, limits: &'a SctpLimits, tag: u32) -> Inputs<'a> {
        Inputs {
            now: Time::ZERO,
            cookie_key: key,
            limits,
            fresh: (tag, Tsn(tag ^ 0x5555)),
            nonce: u64::from(tag) << 32 | 0x7e,
        }
    }

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
        let inp = |tag| inputs(&key, &limits, tag);
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

    /// RFC 3758 §3.5: a FORWARD TSN that says what the last one said waits a round
    /// trip (at most 200 ms, F3), however many SACKs ask for it meanwhile; one that
    /// moves the peer further goes at once.
    #[test]
    fn a_repeated_forward_tsn_waits_a_round_trip() {
        use shoal_components::sctp::Ppid;
        use shoal_components::sctp::assoc::FORWARD_TSN_REPEAT_MAX;
        use shoal_components::sctp::tx::{OutgoingMessage, Reliability};
        use std::time::Duration;

        let key = CookieKey::new(&[7; 32]);
        let limits = SctpLimits::default();
        let inp = |tag| inputs(&key, &limits, tag);
        let mut a = Sctp::new(true, PORT, PORT);
        let mut b = Sctp::new(false, PORT, PORT);
        a.start(0x1111_1111, Tsn(100), &limits);
        let a_init = a.solo.pop().unwrap();
        handle_packet(&mut b, &a_init, &inp(9));
        let b_init_ack = b.solo.pop().unwrap();
        handle_packet(&mut a, &b_init_ack, &inp(9));
        let echo = a.control.pop_fitting(usize::MAX, true).unwrap();
        handle_packet(&mut b, &wrap(a.peer_vtag, &echo), &inp(9));
        let ack = b.control.pop_fitting(usize::MAX, true).unwrap();
        handle_packet(&mut a, &wrap(b.peer_vtag, &ack), &inp(9));
        assert_eq!(a.state, AssocState::Established);

        let mut stats = ShardStats::default();
        let mut fill = FillScratch::default();
        // Sends one message given up on at the first loss, loses it, and abandons it
        // as T3-rtx would: the peer is owed a FORWARD TSN past it.
        let lose_one = |a: &mut Sctp, stats: &mut ShardStats, fill: &mut FillScratch| {
            let tx = a.tx.as_mut().unwrap();
            let message = OutgoingMessage {
                ppid: Ppid::BINARY,
                payload: Bytes::from_static(&[1; 100]),
                unordered: true,
                policy: Reliability::MaxRetransmits(0),
            };
            tx.queue.send(Time::ZERO, StreamId(1), message).unwrap();
            let mut buf = BytesMut::new();
            build_packets(
                a,
                Time::ZERO,
                1200,
                fill,
                &mut Sink::Discard(&mut buf),
                stats,
            );
            let tx = a.tx.as_mut().unwrap();
            tx.outstanding.handle_t3_expiry(Time::ZERO);
            tx.outstanding.advanced_peer_ack_point()
        };
        // What sctp_tx sends at `at` after a SACK that left the peer behind (the
        // sctp pass marks the FORWARD TSN due after every such SACK).
        let after_sack =
            |a: &mut Sctp, at: Time, stats: &mut ShardStats, fill: &mut FillScratch| {
                a.tx.as_mut().unwrap().forward_tsn_due = true;
                let before = stats.sctp_forward_tsn_sent;
                let mut buf = BytesMut::new();
                build_packets(a, at, 1200, fill, &mut Sink::Discard(&mut buf), stats);
                stats.sctp_forward_tsn_sent - before
            };
        let first = lose_one(&mut a, &mut stats, &mut fill);
        let ms = |n| Time::ZERO + Duration::from_millis(n);
        assert_eq!(after_sack(&mut a, ms(0), &mut stats, &mut fill), 1);
        // No RTT measured yet: the repeat waits the longest.
        for n in [1, 50, 199] {
            assert_eq!(
                after_sack(&mut a, ms(n), &mut stats, &mut fill),
                0,
                "at {n} ms"
            );
        }
        assert_eq!(stats.sctp_forward_tsn_held, 3);
        let repeat = FORWARD_TSN_REPEAT_MAX.as_millis() as u64;
        assert_eq!(after_sack(&mut a, ms(repeat), &mut stats, &mut fill), 1);
        // A second message lost: the FORWARD TSN past it is news, and goes at once.
        let second = lose_one(&mut a, &mut stats, &mut fill);
        assert!(second.is_after(first));
        assert_eq!(after_sack(&mut a, ms(repeat + 1), &mut stats, &mut fill), 1);
        assert_eq!(after_sack(&mut a, ms(repeat + 2), &mut stats, &mut fill), 0);
    }
}
