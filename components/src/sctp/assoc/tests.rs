//! The association's rules, exercised packet by packet between two associations.

use super::reset::encode_reconfig;
use super::*;
use crate::sctp::Ppid;
use crate::sctp::chunk::{GapAckBlock, Heartbeat, InitParam, Sack, Shutdown, cause_code};
use crate::sctp::packet::{COMMON_HEADER_LEN, PacketWriter};
use crate::sctp::tx::{OutgoingMessage, Reliability as TxReliability};

use crate::sctp::chunk::{RawChunk, ReconfigParam, ReconfigResult, ShutdownAck, chunk_type};
use crate::sctp::cookie::VALID_COOKIE_LIFE;

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
        nonce: u64::from(tag) << 32 | 0x7e,
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

/// The one chunk of `p` and the packet's tag.
fn sole_chunk(p: &Bytes) -> (u32, Chunk) {
    let parsed = Packet::parse(p).unwrap();
    let mut chunks = parsed.chunks();
    let chunk = chunks.next().unwrap().unwrap();
    assert!(chunks.next().is_none(), "one chunk");
    (parsed.verification_tag, chunk)
}

fn sack_chunk(cum: Tsn) -> BytesMut {
    let mut sack = BytesMut::new();
    Sack {
        cumulative_tsn_ack: cum,
        a_rwnd: 65_536,
        gap_ack_blocks: &[] as &[GapAckBlock],
        duplicate_tsns: &[] as &[Tsn],
    }
    .write_to(&mut sack);
    sack
}

#[test]
fn packets_for_no_association_get_the_out_of_the_blue_answers() {
    let key = CookieKey::new(&[3; 32]);
    let limits = SctpLimits::default();
    let t = Time::from_millis(5);
    // Never set up here (a peer that lost its state, seen from the other side).
    let mut z = Sctp::new(false, PORT, PORT);
    let sack = sack_chunk(Tsn(7));
    // §8.4 rule 8: ABORT, the packet's own tag, the T bit set.
    let fx = handle_packet(
        &mut z,
        &packet(0xabcd, &[&sack]),
        &inputs(t, &key, &limits, 1),
    );
    assert!(fx.dropped);
    let (tag, chunk) = sole_chunk(&z.solo.pop().expect("an ABORT"));
    assert_eq!(tag, 0xabcd);
    assert!(matches!(chunk, Chunk::Abort(a) if a.t_bit));
    // One per instant, however many packets come.
    handle_packet(
        &mut z,
        &packet(0xabcd, &[&sack]),
        &inputs(t, &key, &limits, 1),
    );
    assert!(z.solo.is_empty());
    // Rule 2: a packet carrying an ABORT gets nothing.
    let mut abort = BytesMut::new();
    Abort {
        t_bit: false,
        causes: &[] as &[ErrorCause],
    }
    .write_to(&mut abort);
    let later = t + Duration::from_millis(1);
    handle_packet(
        &mut z,
        &packet(0xabcd, &[&sack, &abort]),
        &inputs(later, &key, &limits, 1),
    );
    assert!(z.solo.is_empty());
    // Rule 5: a SHUTDOWN ACK gets SHUTDOWN COMPLETE with its tag and the T bit.
    let mut ack = BytesMut::new();
    ShutdownAck.write_to(&mut ack);
    handle_packet(
        &mut z,
        &packet(0x77, &[&ack]),
        &inputs(later, &key, &limits, 1),
    );
    let (tag, chunk) = sole_chunk(&z.solo.pop().expect("a SHUTDOWN COMPLETE"));
    assert_eq!(tag, 0x77);
    assert!(matches!(chunk, Chunk::ShutdownComplete(c) if c.t_bit));
    assert_eq!((z.state, z.ended), (AssocState::Closed, None));
}

/// RFC 9260 §5.1: an INIT ACK without its mandatory State Cookie (§3.3.3) ends the
/// setup with ABORT naming the missing parameter (§3.3.10.2), under the INIT ACK's
/// Initiate Tag with the T bit clear.
#[test]
fn an_init_ack_without_a_cookie_is_aborted_under_its_initiate_tag() {
    let key = CookieKey::new(&[5; 32]);
    let limits = SctpLimits::default();
    let mut client = Sctp::new(true, PORT, PORT);
    client.start(0x1111_1111, Tsn(100), &limits);
    client.solo.clear();
    let params = [InitParam::ForwardTsnSupported];
    let mut ack = BytesMut::new();
    crate::sctp::chunk::InitAck {
        initiate_tag: 0x4444_4444,
        a_rwnd: 65_536,
        outbound_streams: 16,
        inbound_streams: 16,
        initial_tsn: Tsn(9),
        params: params.as_slice(),
    }
    .write_to(&mut ack);
    let ack = packet(client.my_vtag, &[&ack]);
    handle_packet(&mut client, &ack, &inputs(Time::ZERO, &key, &limits, 1));
    assert_eq!(client.ended, Some(AssocEnd::ProtocolViolation));
    let (tag, chunk) = sole_chunk(&client.solo.pop().expect("an ABORT"));
    assert_eq!(tag, 0x4444_4444);
    let Chunk::Abort(abort) = chunk else {
        panic!("an ABORT, not {chunk:?}")
    };
    assert!(!abort.t_bit);
    let causes: Vec<_> = abort.causes.iter().collect();
    assert_eq!(causes.len(), 1);
    let missing: Vec<u16> = causes[0].missing_mandatory_params().unwrap().collect();
    assert_eq!(missing, vec![crate::sctp::chunk::param_type::STATE_COOKIE]);
    assert!(client.solo.is_empty() && client.control.is_empty());
}

#[test]
fn an_ended_association_refuses_a_new_init_with_abort() {
    let key = CookieKey::new(&[4; 32]);
    let limits = SctpLimits::default();
    let (_, mut server) = established(&key, &limits);
    server.end(AssocEnd::AbortedByPeer);
    let mut again = Sctp::new(true, PORT, PORT);
    again.start(0x5151_5151, Tsn(9), &limits);
    let init = again.solo.pop().unwrap();
    let t = Time::from_millis(1);
    handle_packet(&mut server, &init, &inputs(t, &key, &limits, 2));
    // §8.4 rule 3: the INIT's Initiate Tag, the T bit clear; no new association.
    let (tag, chunk) = sole_chunk(&server.solo.pop().expect("an ABORT"));
    assert_eq!(tag, 0x5151_5151);
    assert!(matches!(chunk, Chunk::Abort(a) if !a.t_bit));
    assert_eq!(server.ended, Some(AssocEnd::AbortedByPeer));
    // The ABORT ends the new side's setup.
    let abort = packet(
        0x5151_5151,
        &[&{
            let mut b = BytesMut::new();
            Abort {
                t_bit: false,
                causes: &[] as &[ErrorCause],
            }
            .write_to(&mut b);
            b
        }],
    );
    handle_packet(&mut again, &abort, &inputs(t, &key, &limits, 3));
    assert_eq!(again.ended, Some(AssocEnd::AbortedByPeer));
}

#[test]
fn heartbeats_go_when_idle_and_count_when_unanswered() {
    let key = CookieKey::new(&[5; 32]);
    let limits = SctpLimits::default();
    let (mut a, mut b) = established(&key, &limits);
    let t0 = Time::from_millis(40_000);
    let rto = a.tx.as_ref().unwrap().rto.rto();
    // §8.3: an idle association sends HEARTBEAT; its answer is due one RTO later.
    let due = on_heartbeat_timer(&mut a, t0, 42, &limits).unwrap();
    assert_eq!(due, t0 + rto);
    let hb = a.control.pop_fitting(usize::MAX, true).unwrap();
    assert_eq!(hb[0], chunk_type::HEARTBEAT);
    let hb = packet(b.my_vtag, &[&hb]);
    handle_packet(&mut b, &hb, &inputs(t0, &key, &limits, 1));
    let answer = b.control.pop_fitting(usize::MAX, true).unwrap();
    assert_eq!(answer[0], chunk_type::HEARTBEAT_ACK);
    a.error_count = 3;
    let answer = packet(a.my_vtag, &[&answer]);
    let fx = handle_packet(
        &mut a,
        &answer,
        &inputs(t0 + Duration::from_millis(30), &key, &limits, 1),
    );
    // The answer clears the error count and the one in flight.
    assert!(fx.heartbeat_acked);
    assert_eq!((a.error_count, a.heartbeat), (0, None));
    // An answer that echoes something else changes nothing.
    let sent = on_heartbeat_timer(&mut a, t0 + limits.heartbeat_interval, 7, &limits).unwrap();
    let fx = handle_packet(&mut a, &answer, &inputs(sent, &key, &limits, 1));
    assert!(!fx.heartbeat_acked && a.heartbeat.is_some());
    // Unanswered by the deadline: an error, and the next one a whole interval on.
    let next = on_heartbeat_timer(&mut a, sent, 7, &limits).unwrap();
    assert_eq!(a.error_count, 1);
    assert!(a.heartbeat.is_some_and(|h| h.overdue));
    assert!(next >= sent + limits.heartbeat_interval);
    // A late answer still counts: the path is slow, not gone.
    let hb = packet(
        b.my_vtag,
        &[&a.control.pop_fitting(usize::MAX, true).unwrap()],
    );
    handle_packet(&mut b, &hb, &inputs(sent, &key, &limits, 1));
    let late = packet(
        a.my_vtag,
        &[&b.control.pop_fitting(usize::MAX, true).unwrap()],
    );
    let fx = handle_packet(&mut a, &late, &inputs(next, &key, &limits, 1));
    assert!(fx.heartbeat_acked);
    assert_eq!((a.error_count, a.heartbeat), (0, None));
    // Past Association.Max.Retrans unanswered: unreachable, and the peer is told.
    let mut at = next;
    for _ in 0..2 * (MAX_ASSOCIATION_RETRANSMITS + 2) {
        a.control = ControlQueue::default();
        match on_heartbeat_timer(&mut a, at, 7, &limits) {
            Some(t) => at = t,
            None => break,
        }
    }
    assert_eq!(a.ended, Some(AssocEnd::PeerUnreachable));
    let (tag, chunk) = sole_chunk(&a.solo.pop().expect("an ABORT"));
    assert_eq!(tag, a.peer_vtag);
    assert!(matches!(chunk, Chunk::Abort(x) if !x.t_bit));
}

#[test]
fn an_init_bundled_with_anything_is_discarded() {
    let key = CookieKey::new(&[6; 32]);
    let limits = SctpLimits::default();
    let (_, mut server) = established(&key, &limits);
    let mut client = Sctp::new(true, PORT, PORT);
    client.start(0x0a0a_0a0a, Tsn(1), &limits);
    let init = client.solo.pop().unwrap();
    let init_chunk = &init[COMMON_HEADER_LEN..];
    let t = Time::from_millis(1);
    // RFC 9260 §5.1: an INIT alone; many in one packet get nothing at all.
    // (One raw push, so the writer does not refuse to bundle them.)
    let many = packet(0, &[&[init_chunk, init_chunk, init_chunk].concat()]);
    let fx = handle_packet(&mut server, &many, &inputs(t, &key, &limits, 7));
    assert!(fx.dropped);
    assert!(server.solo.is_empty());
    // §8.5.1 A: tag 0 carries an INIT alone, nothing else, nor with anything.
    let sack = sack_chunk(server.my_initial_tsn);
    let with_sack = packet(0, &[&[init_chunk, &sack[..]].concat()]);
    let fx = handle_packet(&mut server, &with_sack, &inputs(t, &key, &limits, 7));
    assert!(fx.dropped);
    let fx = handle_packet(
        &mut server,
        &packet(0, &[&sack]),
        &inputs(t, &key, &limits, 7),
    );
    assert!(fx.dropped);
    // One INIT while established: one INIT ACK (§5.2.2), the association unchanged.
    let (my_vtag, peer_vtag) = (server.my_vtag, server.peer_vtag);
    handle_packet(&mut server, &init, &inputs(t, &key, &limits, 7));
    assert_eq!(server.solo.len(), 1);
    assert_eq!((server.my_vtag, server.peer_vtag), (my_vtag, peer_vtag));
    assert_eq!(server.state, AssocState::Established);
}

#[test]
fn a_stale_cookie_error_starts_the_setup_again_a_few_times() {
    let key = CookieKey::new(&[8; 32]);
    let limits = SctpLimits::default();
    let (mut client, mut server, echo) = up_to_cookie_echo(&key, &limits);
    let late = Time::ZERO + VALID_COOKIE_LIFE + Duration::from_millis(3);
    for round in 1..=MAX_STALE_COOKIES + 1 {
        // The server finds the cookie stale and says so (§5.1.5 step 4).
        handle_packet(&mut server, &echo, &inputs(late, &key, &limits, 1));
        let error = server.solo.pop().expect("a Stale Cookie error");
        handle_packet(&mut client, &error, &inputs(late, &key, &limits, 1));
        if round <= MAX_STALE_COOKIES {
            // §5.2.6, first alternative: a new INIT for a new cookie.
            assert_eq!(client.state, AssocState::CookieWait, "round {round}");
            let init = client.solo.pop().expect("a new INIT");
            assert_eq!(chunk_types(&init), [chunk_type::INIT]);
            client.state = AssocState::CookieEchoed;
        } else {
            // Then the second: the setup fails, reported.
            assert_eq!(client.ended, Some(AssocEnd::SetupFailed));
        }
    }
}

#[test]
fn a_late_cookie_from_a_collision_updates_the_peers_tag() {
    let key = CookieKey::new(&[2; 32]);
    let limits = SctpLimits::default();
    let (_, mut server) = established(&key, &limits);
    // A cookie of ours with our tag and another of the peer's (§5.2.4 B).
    let mut cookie = BytesMut::new();
    let contents = crate::sctp::cookie::CookieContents {
        created: Time::ZERO,
        lifespan: VALID_COOKIE_LIFE,
        src_port: PORT,
        dst_port: PORT,
        my_vtag: server.my_vtag,
        peer_vtag: 0x0bad_cafe,
        my_initial_tsn: server.my_initial_tsn,
        peer_initial_tsn: Tsn(5),
        peer_a_rwnd: 65_536,
        outbound_streams: 16,
        inbound_streams: 16,
        peer_forward_tsn: true,
        peer_reconfig: true,
        peer_zero_checksum: false,
        tie_tags: 0,
    };
    key.write(&contents, &mut cookie);
    let mut echo = BytesMut::new();
    crate::sctp::chunk::CookieEcho {
        cookie: cookie.as_ref(),
    }
    .write_to(&mut echo);
    let echo = packet(server.my_vtag, &[&echo]);
    let t = Time::from_millis(1);
    handle_packet(&mut server, &echo, &inputs(t, &key, &limits, 1));
    assert_eq!(server.peer_vtag, 0x0bad_cafe);
    assert_eq!(server.state, AssocState::Established);
    assert_eq!(
        server.control.pop_fitting(usize::MAX, true).unwrap()[0],
        chunk_type::COOKIE_ACK
    );
}

/// One unfragmented DATA chunk from the client on stream 1.
fn data_chunk(tsn: Tsn, ssn: u16) -> BytesMut {
    let mut chunk = BytesMut::new();
    crate::sctp::chunk::Data {
        header: crate::sctp::chunk::DataHeader {
            tsn,
            stream_id: StreamId(1),
            ssn: Ssn(ssn),
            ppid: Ppid(53),
            immediate: false,
            unordered: false,
            beginning: true,
            end: true,
        },
        payload: &b"late"[..],
    }
    .write_to(&mut chunk);
    chunk
}

/// RFC 9260 §9.2, our side closing: SHUTDOWN-PENDING takes no new user message
/// and holds the SHUTDOWN until what is in flight is acknowledged; the SHUTDOWN
/// carries the last TSN received from the peer; the peer's SHUTDOWN ACK gets a
/// SHUTDOWN COMPLETE and ends the association on both sides.
#[test]
fn our_shutdown_waits_for_our_data_then_completes_on_both_sides() {
    let key = CookieKey::new(&[9; 32]);
    let limits = SctpLimits::default();
    let (mut client, mut server) = established(&key, &limits);
    let (ctag, stag) = (client.my_vtag, server.my_vtag);
    let inp = |t| inputs(t, &key, &limits, 1);
    let tsn = in_flight(&mut server, TxReliability::Reliable);
    assert!(server.shutdown());
    assert_eq!(server.state, AssocState::ShutdownPending);
    // A message in flight: no SHUTDOWN yet.
    assert!(!server.send_shutdown_when_drained());
    assert!(control_types(&mut server).is_empty());
    // The client's DATA still arrives in SHUTDOWN-PENDING.
    let client_tsn = in_flight(&mut client, TxReliability::Reliable);
    let data = data_chunk(client_tsn, 0);
    let fx = handle_packet(&mut server, &packet(stag, &[&data]), &inp(Time::ZERO));
    assert!(!fx.dropped && !fx.shutdown_sent);
    assert_eq!(server.pop_message().unwrap().payload.as_ref(), b"late");
    // The SACK covering our message: SHUTDOWN, SHUTDOWN-SENT.
    let sack = sack_chunk(tsn);
    let fx = handle_packet(&mut server, &packet(stag, &[&sack]), &inp(Time::ZERO));
    assert!(fx.sack_processed);
    assert!(server.send_shutdown_when_drained());
    assert_eq!(server.state, AssocState::ShutdownSent);
    let sent = server.control.pop_fitting(usize::MAX, true).unwrap();
    let Ok(Chunk::Shutdown(sh)) = packet_chunk(&sent) else {
        panic!("a SHUTDOWN")
    };
    assert_eq!(sh.cumulative_tsn_ack, client_tsn, "the client's last TSN");
    // Once only.
    assert!(!server.send_shutdown_when_drained());
    // The client (its message acknowledged by the SHUTDOWN) answers with SHUTDOWN
    // ACK.
    let fx = handle_packet(&mut client, &packet(ctag, &[&sent]), &inp(Time::ZERO));
    assert!(fx.shutdown_acked);
    assert_eq!(client.state, AssocState::ShutdownAckSent);
    let ack = client.control.pop_fitting(usize::MAX, true).unwrap();
    handle_packet(&mut server, &packet(stag, &[&ack]), &inp(Time::ZERO));
    assert_eq!(server.ended, Some(AssocEnd::Shutdown));
    let complete = server.solo.pop().expect("a SHUTDOWN COMPLETE");
    assert_eq!(chunk_types(&complete), vec![chunk_type::SHUTDOWN_COMPLETE]);
    handle_packet(&mut client, &complete, &inp(Time::ZERO));
    assert_eq!(client.ended, Some(AssocEnd::Shutdown));
}

/// RFC 9260 §9.2: in SHUTDOWN-SENT, each packet with DATA is answered with a
/// SHUTDOWN (T2 restarts), and with a SACK too when a gap exists.
#[test]
fn data_in_shutdown_sent_is_answered_with_shutdown_and_a_sack_for_gaps() {
    let key = CookieKey::new(&[9; 32]);
    let limits = SctpLimits::default();
    let (client, mut server) = established(&key, &limits);
    let inp = |t| inputs(t, &key, &limits, 1);
    assert!(server.shutdown());
    assert!(server.send_shutdown_when_drained());
    assert_eq!(control_types(&mut server), vec![chunk_type::SHUTDOWN]);
    let first = client.my_initial_tsn;
    let tag = server.my_vtag;
    let fx = handle_packet(
        &mut server,
        &packet(tag, &[&data_chunk(first, 0)]),
        &inp(Time::ZERO),
    );
    assert!(fx.shutdown_sent);
    let sent = server.control.pop_fitting(usize::MAX, true).unwrap();
    let Ok(Chunk::Shutdown(sh)) = packet_chunk(&sent) else {
        panic!("a SHUTDOWN")
    };
    assert_eq!(sh.cumulative_tsn_ack, first);
    // TSN first+2 with first+1 missing: a gap, so a SACK as well.
    server.sack_now = false;
    let third = Tsn(first.0.wrapping_add(2));
    let fx = handle_packet(
        &mut server,
        &packet(tag, &[&data_chunk(third, 2)]),
        &inp(Time::ZERO),
    );
    assert!(fx.shutdown_sent && server.sack_now);
    assert_eq!(server.state, AssocState::ShutdownSent);
}

/// A peer's SHUTDOWN while ours waits in SHUTDOWN-PENDING: the peer's sequence
/// runs (SHUTDOWN-RECEIVED), ours is not sent.
#[test]
fn a_peer_shutdown_during_shutdown_pending_takes_over() {
    let key = CookieKey::new(&[9; 32]);
    let limits = SctpLimits::default();
    let (_client, mut server) = established(&key, &limits);
    let stag = server.my_vtag;
    let inp = |t| inputs(t, &key, &limits, 1);
    let tsn = in_flight(&mut server, TxReliability::Reliable);
    assert!(server.shutdown());
    let fx = handle_packet(&mut server, &shutdown(stag, tsn), &inp(Time::ZERO));
    assert!(fx.shutdown_acked);
    assert_eq!(server.state, AssocState::ShutdownAckSent);
    assert!(!server.send_shutdown_when_drained());
    assert_eq!(control_types(&mut server), vec![chunk_type::SHUTDOWN_ACK]);
}

/// `SctpLimits::max_outstanding_tsns`: while the first chunk stays missing, new DATA
/// stops that many TSNs past the cumulative ack, though the peer acknowledged all
/// the others by Gap Ack Blocks and cwnd and rwnd would let more go; it goes on
/// once the hole is filled.
#[test]
fn new_data_waits_within_max_outstanding_tsns_of_the_cumulative_ack() {
    let limits = SctpLimits {
        max_outstanding_tsns: 16,
        ..SctpLimits::default()
    };
    let mut tx = TxSide::new(Tsn(1), 1 << 20, 16, &limits);
    let message = || OutgoingMessage {
        ppid: Ppid(53),
        payload: Bytes::from_static(&[7; 100]),
        unordered: false,
        policy: TxReliability::Reliable,
    };
    for _ in 0..40 {
        tx.queue.send(Time::ZERO, StreamId(1), message()).unwrap();
    }
    let put_in_flight = |tx: &mut TxSide| {
        let mut sent = 0;
        while tx.outstanding.can_add() && tx.queue.has_data() {
            let d = tx.queue.produce(Time::ZERO, 1000).unwrap();
            tx.outstanding.add(Time::ZERO, d).unwrap();
            sent += 1;
        }
        sent
    };
    assert_eq!(put_in_flight(&mut tx), 16);
    assert_eq!(tx.outstanding.highest_sent_tsn(), Tsn(16));
    // TSN 1 lost, 2..=16 acknowledged out of order: one chunk in flight, the
    // window wide open, and still nothing new goes.
    let blocks = [(1u16, 15u16)];
    tx.outstanding
        .handle_sack(Time::ZERO, Tsn(0), blocks, 1 << 20, false)
        .unwrap();
    assert_eq!(
        tx.outstanding.bytes_in_flight(),
        crate::sctp::tx::data_chunk_len(100)
    );
    assert_eq!(put_in_flight(&mut tx), 0);
    // TSN 1 arrives: the next 16 go.
    tx.outstanding
        .handle_sack(Time::ZERO, Tsn(16), [], 1 << 20, false)
        .unwrap();
    assert_eq!(put_in_flight(&mut tx), 16);
    assert_eq!(tx.outstanding.highest_sent_tsn(), Tsn(32));
}
