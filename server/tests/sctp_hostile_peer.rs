//! SCTP against a peer that breaks the rules or pushes them to their edges: each test
//! is a hand-written peer over a real ICE and DTLS connection to a shard (see
//! `raw_sctp_peer`), sending packets built chunk by chunk, and checks that shoal
//! answers as the RFC says, never drops an association that is alive and never
//! keeps one that is dead.
//!
//! - A window closed for 60 s (RFC 9260 §6.1 A): zero window probes, one DATA chunk
//!   each, go on while the peer SACKs them, every message arrives once the window
//!   opens, and a peer that then stops answering is given up.
//! - A stale cookie (§5.1.5 step 4): an ERROR with the Stale Cookie cause and its
//!   staleness, no association, and a fresh setup afterwards works.
//! - SHUTDOWN with data queued (§9.2), from the peer and from shoal: the queued
//!   messages all go first, and the association ends by SHUTDOWN on both sides.
//! - A reset request listing no streams (RFC 6525 §5.2.2 E3) resets every stream:
//!   the channels on them close, and sequence numbers start again at 0.
//! - A SACK acknowledging a TSN never sent (RFC 9260 §11.4): ABORT with a Protocol
//!   Violation cause, and the association is gone.
//! - A DATA chunk without user data (RFC 9260 §6.2): ABORT with a No User Data cause
//!   naming its TSN, and the association is gone; under a wrong tag it is dropped.

mod raw_sctp_peer;

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use raw_sctp_peer::{Assoc, Got, ID, Lab, OPEN_WINDOW, chunk, chunks, data, data_of, has, sack};
use shoal_components::sctp::assoc::AssocEnd;
use shoal_components::sctp::chunk::{
    Chunk, DataHeader, HeartbeatAck, ReConfig, ReconfigParam, ReconfigResult, Shutdown,
    ShutdownAck, ShutdownComplete, cause_code, chunk_type,
};
use shoal_components::sctp::cookie::VALID_COOKIE_LIFE;
use shoal_components::sctp::dcep::{ChannelType, DataChannelOpen};
use shoal_components::sctp::packet::Packet;
use shoal_components::sctp::tx::Reliability;
use shoal_components::sctp::{Ppid, Ssn, StreamId, Tsn};
use shoal_components::tick::{RemoveReason, ShardEvent};
use shoal_systems::SctpSendError;

/// WebRTC String and Binary PPIDs and DCEP's (RFC 8831 §8).
const PPID_DCEP: u32 = 50;
const PPID_BINARY: u32 = 53;
/// Shoal's stream for the raw messages it sends (the DTLS server's streams are odd,
/// RFC 8832 §6).
const SHOAL_STREAM: u16 = 1;

/// Message `i`: its index and then a pattern, `len` bytes in all.
fn message(i: u32, len: usize) -> Bytes {
    let mut v = i.to_be_bytes().to_vec();
    v.extend((4..len).map(|k| (k as u32 * 7 + i) as u8));
    v.into()
}

fn index_of(m: &[u8]) -> u32 {
    let i = u32::from_be_bytes(m[..4].try_into().unwrap());
    assert_eq!(m, &message(i, m.len())[..], "message {i} arrived intact");
    i
}

/// Queues `n` messages of `len` bytes on shoal's side, numbered from `first`.
fn queue(lab: &mut Lab, first: u32, n: u32, len: usize) {
    for i in first..first + n {
        lab.srv
            .sctp_send(
                ID,
                SHOAL_STREAM,
                PPID_BINARY,
                message(i, len),
                false,
                Reliability::Reliable,
            )
            .expect("queued");
    }
}

/// The hand-written peer's receive side: takes DATA in TSN order (a chunk past a
/// hole is dropped; the wire never reorders, so only a dropped chunk leaves one),
/// ignores duplicates, and keeps what arrived.
struct Receiver {
    /// Cumulative TSN: every TSN up to it taken.
    cum: Tsn,
    got: Vec<Got>,
    duplicates: usize,
}

impl Receiver {
    fn new(a: &Assoc) -> Receiver {
        Receiver {
            cum: a.peer_initial_tsn.prev(),
            got: Vec::new(),
            duplicates: 0,
        }
    }

    /// Takes the packet's DATA in order; how many chunks were new.
    fn take(&mut self, p: &Packet) -> usize {
        let mut fresh = 0;
        for d in data_of(p) {
            if d.tsn == self.cum.next() {
                self.cum = d.tsn;
                self.got.push(d);
                fresh += 1;
            } else if !d.tsn.is_after(self.cum) {
                self.duplicates += 1;
            }
        }
        fresh
    }

    /// The indices of the messages on shoal's raw stream, in arrival order. Each
    /// went with its PPID, and as the stream's n-th message with SSN n.
    fn indices(&self) -> Vec<u32> {
        self.got
            .iter()
            .filter(|g| g.stream == SHOAL_STREAM)
            .enumerate()
            .map(|(n, g)| {
                assert_eq!((g.ppid, usize::from(g.ssn)), (PPID_BINARY, n));
                index_of(&g.payload)
            })
            .collect()
    }
}

/// Answers shoal's HEARTBEATs in this packet, as any live peer does.
fn answer_heartbeats(lab: &mut Lab, a: &Assoc, p: &Packet) {
    for c in chunks(p) {
        if let Chunk::Heartbeat(h) = c {
            let ack = chunk(&HeartbeatAck { info: h.info });
            lab.send(a.peer_tag, &[ack]);
        }
    }
}

// ---------------------------------------------------------------------------------

#[test]
fn a_window_closed_for_60_s_is_probed_and_a_silent_peer_given_up() {
    let mut lab = Lab::connect(1);
    let mut a = lab.associate(0x0a0a_0001, Tsn(1_000));
    a.next_tsn = a.initial_tsn;
    // Messages small enough that a packet carries several, and more of them than
    // the first flight (the initial cwnd) takes.
    const MESSAGES: u32 = 40;
    queue(&mut lab, 0, MESSAGES, 200);
    let mut rx = Receiver::new(&a);

    // The peer takes the first flight (nothing acknowledges it meanwhile, so shoal
    // sends no more) and closes its window with nothing of shoal's in flight.
    let first = lab.recv(Duration::from_secs(1)).expect("DATA");
    assert!(rx.take(&first) > 1, "several messages to a packet");
    while let Some(p) = lab.recv(Duration::from_millis(50)) {
        rx.take(&p);
    }
    assert!(
        rx.indices().len() < MESSAGES as usize,
        "data left to probe with"
    );
    lab.send(a.peer_tag, &[sack(rx.cum, 0)]);
    let closed_at = lab.now;
    let open_at = closed_at + Duration::from_secs(60);
    // For 60 s every DATA is dropped for want of room and answered with a SACK that
    // acknowledges nothing new and keeps the window at 0 (RFC 9260 §6.2: the
    // receiver "MUST drop any new incoming DATA chunk" while its a_rwnd is 0).
    let mut arrivals = Vec::new();
    while lab.now < open_at {
        let Some(p) = lab.recv(open_at.saturating_since(lab.now)) else {
            break;
        };
        answer_heartbeats(&mut lab, &a, &p);
        let tsns: Vec<Tsn> = data_of(&p).iter().map(|d| d.tsn).collect();
        if !tsns.is_empty() {
            // §6.1 A: "A zero window probe is a DATA chunk", sent "when all
            // outstanding DATA chunks have been cumulatively acknowledged": one to a
            // packet, the next TSN, again and again (T3-rtx retransmits it).
            assert_eq!(tsns, vec![rx.cum.next()], "a probe packet's DATA");
            arrivals.push(lab.now.saturating_since(closed_at));
            lab.send(a.peer_tag, &[sack(rx.cum, 0)]);
        }
    }
    // §6.1 A: "The sender SHOULD send the first zero window probe after 1 RTO" (at
    // least RTO.Min, 400 ms here, and at most the 3 s back-off cap), not when
    // something else happens to be sent.
    let first = arrivals.first().copied().expect("a zero window probe");
    assert!(
        first >= Duration::from_millis(400) && first < Duration::from_secs(3),
        "first probe {first:?} after the window closed"
    );
    // Probing is not failure while SACKs come; the association lives on, and the
    // probes went on through the whole minute.
    assert!(lab.sctp_closed().is_empty(), "{:?}", lab.sctp_closed());
    assert!(lab.srv.sctp_established(ID));
    let late = arrivals
        .iter()
        .filter(|t| **t > Duration::from_secs(30))
        .count();
    assert!(
        late >= 1,
        "probes after 30 s of a closed window: {arrivals:?}"
    );
    println!("DATA while the window was closed, s after it closed: {arrivals:.1?}");

    // The window opens: every message arrives, once, in order.
    lab.send(a.peer_tag, &[sack(rx.cum, OPEN_WINDOW)]);
    let deadline = lab.now + Duration::from_secs(30);
    while rx.indices().len() < MESSAGES as usize {
        let p = lab
            .recv(deadline.saturating_since(lab.now))
            .unwrap_or_else(|| panic!("all {MESSAGES} messages; got {:?}", rx.indices()));
        answer_heartbeats(&mut lab, &a, &p);
        if rx.take(&p) > 0 || !data_of(&p).is_empty() {
            lab.send(a.peer_tag, &[sack(rx.cum, OPEN_WINDOW)]);
        }
    }
    assert_eq!(rx.indices(), (0..MESSAGES).collect::<Vec<_>>());

    // More is queued; the peer closes its window again and then falls silent at the
    // SCTP layer (ICE and DTLS still answer). Expiries without SACKs are errors:
    // after Association.Max.Retrans of them the association is given up with ABORT.
    queue(&mut lab, MESSAGES, 5, 1_000);
    let p = lab.recv(Duration::from_secs(1)).expect("DATA");
    rx.take(&p);
    lab.send(a.peer_tag, &[sack(rx.cum, 0)]);
    let silent_at = lab.now;
    let bound = silent_at + Duration::from_secs(20 * 60);
    let mut abort = None;
    while abort.is_none() && lab.now < bound {
        let Some(p) = lab.recv(bound.saturating_since(lab.now)) else {
            break;
        };
        if has(&p, chunk_type::ABORT) {
            abort = Some(p);
        }
    }
    let abort = abort.expect("an ABORT for the silent peer");
    assert_eq!(abort.verification_tag, a.my_tag);
    assert_eq!(lab.sctp_closed(), vec![AssocEnd::PeerUnreachable]);
    assert!(!lab.srv.sctp_established(ID));
    println!(
        "silent peer given up after {:.0?}",
        lab.now.saturating_since(silent_at)
    );
}

#[test]
fn a_stale_cookie_gets_an_error_and_a_fresh_setup_works() {
    let mut lab = Lab::connect(2);
    let my_tag = 0x5a1e_0001;
    let (peer_tag, _, cookie) = lab.init(my_tag, Tsn(7_000));
    let made_at = lab.now - raw_sctp_peer::LATENCY;
    // The peer sits on the cookie past its life (ICE consent is kept meanwhile).
    lab.run_for(VALID_COOKIE_LIFE + Duration::from_secs(1));
    let answer = lab.echo(peer_tag, cookie);
    let echoed_at = lab.now - 2 * raw_sctp_peer::LATENCY;
    // RFC 9260 §5.1.5 step 4: the packet is discarded, and an ERROR with a Stale
    // Cookie cause goes back under the tag of the INIT that began the setup.
    assert_eq!(answer.verification_tag, my_tag);
    let cs = chunks(&answer);
    assert_eq!(cs.len(), 1, "{cs:?}");
    let Chunk::Error(e) = &cs[0] else {
        panic!("an ERROR, not {cs:?}")
    };
    let cause = e.causes.iter().next().expect("a cause");
    assert_eq!(cause.code, cause_code::STALE_COOKIE);
    // Measure of Staleness: how long past its life the cookie arrived, in µs.
    let staleness = u32::from_be_bytes(cause.info[..4].try_into().unwrap());
    let expected = echoed_at
        .saturating_since(made_at)
        .saturating_sub(VALID_COOKIE_LIFE)
        .as_micros() as u32;
    assert!(
        staleness.abs_diff(expected) <= 20_000,
        "staleness {staleness} µs, about {expected} µs expected"
    );
    assert!(!lab.srv.sctp_established(ID));
    assert_eq!(
        lab.count(|e| matches!(e, ShardEvent::SctpEstablished { .. })),
        0
    );
    // Nothing more comes for the stale setup.
    assert!(lab.recv(Duration::from_secs(3)).is_none());

    // §5.2.6: the peer starts again; a cookie echoed in time makes the association.
    let a = lab.associate(0x5a1e_0002, Tsn(9_000));
    lab.send(a.peer_tag, &[data(a.next_tsn, 0, 0, PPID_BINARY, b"fresh")]);
    let p = lab.recv(Duration::from_secs(1)).expect("a SACK");
    assert!(has(&p, chunk_type::SACK));
    let messages: Vec<_> = lab.sctp_messages();
    assert_eq!(messages, vec![Bytes::from_static(b"fresh")]);
    assert_eq!(
        lab.count(|e| matches!(e, ShardEvent::SctpEstablished { .. })),
        1
    );
}

#[test]
fn a_peer_shutdown_with_data_queued_gets_the_data_first() {
    let mut lab = Lab::connect(3);
    let a = lab.associate(0x5d00_0001, Tsn(20_000));
    queue(&mut lab, 0, 40, 1_100);
    let mut rx = Receiver::new(&a);
    let first = lab.recv(Duration::from_secs(1)).expect("DATA");
    rx.take(&first);
    let sent_at_shutdown = rx.indices().len();
    assert!(sent_at_shutdown < 40, "data still queued");
    // The peer asks to shut down. RFC 9260 §9.2: shoal stops taking user data, goes
    // on sending what is queued, and answers with SHUTDOWN ACK only once all of it
    // is acknowledged. The peer, in SHUTDOWN-SENT, answers each packet of DATA with
    // a SHUTDOWN (no gaps on this wire, so no SACK with it).
    lab.send(
        a.peer_tag,
        &[chunk(&Shutdown {
            cumulative_tsn_ack: rx.cum,
        })],
    );
    // Once it has arrived, a new message is refused.
    lab.run_for(raw_sctp_peer::LATENCY + Duration::from_millis(1));
    assert!(matches!(
        lab.srv.sctp_send(
            ID,
            SHOAL_STREAM,
            PPID_BINARY,
            message(99, 10),
            false,
            Reliability::Reliable
        ),
        Err(SctpSendError::NotEstablished)
    ));
    let deadline = lab.now + Duration::from_secs(30);
    loop {
        let p = lab
            .recv(deadline.saturating_since(lab.now))
            .unwrap_or_else(|| panic!("SHUTDOWN ACK; got {} messages", rx.indices().len()));
        answer_heartbeats(&mut lab, &a, &p);
        if !data_of(&p).is_empty() {
            rx.take(&p);
            lab.send(
                a.peer_tag,
                &[chunk(&Shutdown {
                    cumulative_tsn_ack: rx.cum,
                })],
            );
        }
        if has(&p, chunk_type::SHUTDOWN_ACK) {
            assert_eq!(
                rx.indices(),
                (0..40).collect::<Vec<_>>(),
                "SHUTDOWN ACK only after every queued message"
            );
            assert_eq!(p.verification_tag, a.my_tag);
            break;
        }
        assert!(lab.sctp_closed().is_empty(), "{:?}", lab.sctp_closed());
    }
    assert_eq!(rx.duplicates, 0);
    // §9.2: SHUTDOWN COMPLETE ends it on both sides.
    lab.send(a.peer_tag, &[chunk(&ShutdownComplete { t_bit: false })]);
    lab.run_for(Duration::from_millis(100));
    assert_eq!(lab.sctp_closed(), vec![AssocEnd::Shutdown]);
    assert!(!lab.srv.sctp_established(ID));
}

#[test]
fn shoals_own_shutdown_with_data_queued_sends_the_data_first() {
    let mut lab = Lab::connect(4);
    let mut a = lab.associate(0x5d00_0002, Tsn(30_000));
    queue(&mut lab, 0, 40, 1_100);
    let mut rx = Receiver::new(&a);
    // The node drains: each association gets the SHUTDOWN primitive (§9.2,
    // SHUTDOWN-PENDING). The peer still sends three messages after it.
    lab.srv.drain();
    for k in 0..3u16 {
        sent(
            &mut lab,
            &mut a,
            0,
            k,
            PPID_BINARY,
            format!("late {k}").as_bytes(),
        );
    }
    let deadline = lab.now + Duration::from_secs(30);
    let shutdown = loop {
        let p = lab
            .recv(deadline.saturating_since(lab.now))
            .unwrap_or_else(|| panic!("SHUTDOWN; got {} messages", rx.indices().len()));
        answer_heartbeats(&mut lab, &a, &p);
        if !data_of(&p).is_empty() {
            rx.take(&p);
            lab.send(a.peer_tag, &[sack(rx.cum, OPEN_WINDOW)]);
        }
        let found = chunks(&p).into_iter().find_map(|c| match c {
            Chunk::Shutdown(s) => Some(s),
            _ => None,
        });
        if let Some(s) = found {
            break s;
        }
    };
    // Only once every queued message went and was acknowledged, and acknowledging
    // everything the peer sent, the three late messages included.
    assert_eq!(rx.indices(), (0..40).collect::<Vec<_>>());
    assert_eq!(shutdown.cumulative_tsn_ack, a.next_tsn.prev());
    let late: Vec<_> = lab.sctp_messages();
    assert_eq!(
        late,
        (0..3)
            .map(|k| Bytes::from(format!("late {k}")))
            .collect::<Vec<_>>()
    );
    // The peer acknowledges; shoal completes, then closes DTLS with close_notify.
    lab.send(a.peer_tag, &[chunk(&ShutdownAck)]);
    let complete = lab.recv(Duration::from_secs(1)).expect("SHUTDOWN COMPLETE");
    assert!(has(&complete, chunk_type::SHUTDOWN_COMPLETE));
    assert_eq!(complete.verification_tag, a.my_tag);
    lab.run_for(Duration::from_millis(200));
    assert_eq!(lab.dtls_closed, Some(Some(0)), "close_notify");
    assert_eq!(lab.sctp_closed(), vec![AssocEnd::Shutdown]);
    assert_eq!(
        lab.count(|e| matches!(
            e,
            ShardEvent::PeerRemoved {
                reason: RemoveReason::Drained,
                ..
            }
        )),
        1
    );
}

/// The peer sends one whole message as a DATA chunk of its own.
fn sent(lab: &mut Lab, a: &mut Assoc, stream: u16, ssn: u16, ppid: u32, payload: &[u8]) {
    let d = data(a.next_tsn, stream, ssn, ppid, payload);
    a.next_tsn = a.next_tsn.next();
    lab.send(a.peer_tag, &[d]);
}

/// A DCEP DATA_CHANNEL_OPEN for a reliable ordered channel.
fn open_message(label: &str) -> Bytes {
    let open = DataChannelOpen::new(ChannelType::default(), 0, label, "").unwrap();
    let mut b = BytesMut::new();
    open.write_to(&mut b);
    b.freeze()
}

fn reconfig(param: ReconfigParam<&[StreamId]>) -> Bytes {
    let params = [param];
    chunk(&ReConfig {
        params: params.as_slice(),
    })
}

/// Runs until `done`, taking shoal's DATA (SACKing it), answering heartbeats and
/// shoal's reset requests, and returning the reset responses it sent.
fn converse(
    lab: &mut Lab,
    a: &Assoc,
    rx: &mut Receiver,
    responses: &mut Vec<(u32, ReconfigResult)>,
    done: impl Fn(&Lab, &[(u32, ReconfigResult)]) -> bool,
) {
    let deadline = lab.now + Duration::from_secs(10);
    while !done(lab, responses) {
        // Shoal may have nothing more to send once the last answer went: wait for
        // its events then.
        let Some(p) = lab.recv(Duration::from_millis(100)) else {
            assert!(lab.now < deadline, "timed out; events {:?}", lab.events);
            continue;
        };
        answer_heartbeats(lab, a, &p);
        if !data_of(&p).is_empty() {
            rx.take(&p);
            lab.send(a.peer_tag, &[sack(rx.cum, OPEN_WINDOW)]);
        }
        for c in chunks(&p) {
            let Chunk::ReConfig(rc) = c else { continue };
            for param in rc.params.iter() {
                match param {
                    ReconfigParam::Response {
                        response_seq,
                        result,
                        ..
                    } => responses.push((response_seq, result)),
                    // Shoal resets its outgoing streams: done at once, as every
                    // TSN it sent has been taken.
                    ReconfigParam::OutgoingSsnReset {
                        request_seq,
                        last_tsn,
                        ..
                    } => {
                        assert!(!last_tsn.is_after(rx.cum));
                        let answer = reconfig(ReconfigParam::Response {
                            response_seq: request_seq,
                            result: ReconfigResult::SUCCESS_PERFORMED,
                            next_tsns: None,
                        });
                        lab.send(a.peer_tag, &[answer]);
                    }
                    other => panic!("unexpected {other:?}"),
                }
            }
        }
    }
}

#[test]
fn a_reset_listing_no_streams_resets_every_stream() {
    let mut lab = Lab::connect(5);
    let mut a = lab.associate(0x7e5e_0001, Tsn(40_000));
    let mut rx = Receiver::new(&a);
    let mut responses = Vec::new();
    // Two channels (the DTLS client's streams are even, RFC 8832 §6), three
    // messages on each, and three raw messages on stream 4.
    for stream in [0u16, 2] {
        sent(
            &mut lab,
            &mut a,
            stream,
            0,
            PPID_DCEP,
            &open_message(&format!("c{stream}")),
        );
        for ssn in 1..=3 {
            sent(&mut lab, &mut a, stream, ssn, PPID_BINARY, b"before");
        }
    }
    for ssn in 0..3 {
        sent(&mut lab, &mut a, 4, ssn, PPID_BINARY, b"raw before");
    }
    converse(&mut lab, &a, &mut rx, &mut responses, |lab, _| {
        lab.count(|e| matches!(e, ShardEvent::ChannelMessage { .. })) == 6
            && lab.count(|e| matches!(e, ShardEvent::SctpMessage { .. })) == 3
    });
    assert_eq!(
        lab.count(|e| matches!(e, ShardEvent::ChannelOpen { .. })),
        2
    );

    // The peer resets its outgoing streams with an empty list: all of them
    // (RFC 6525 §4.1, §5.2.2 E3). Its first request takes the sequence number of
    // its initial TSN (§4.1), and names the last request it heard, none, as shoal's
    // initial TSN less one.
    let request = reconfig(ReconfigParam::OutgoingSsnReset {
        request_seq: a.initial_tsn.0,
        response_seq: a.peer_initial_tsn.0.wrapping_sub(1),
        last_tsn: a.next_tsn.prev(),
        streams: &[],
    });
    lab.send(a.peer_tag, &[request]);
    // Performed; both channels close (RFC 8831 §6.7: shoal resets its side too).
    converse(&mut lab, &a, &mut rx, &mut responses, |lab, r| {
        !r.is_empty() && lab.count(|e| matches!(e, ShardEvent::ChannelClosed { .. })) == 2
    });
    assert_eq!(
        responses,
        vec![(a.initial_tsn.0, ReconfigResult::SUCCESS_PERFORMED)]
    );
    let mut closed: Vec<u16> = lab
        .events
        .iter()
        .filter_map(|e| match e {
            ShardEvent::ChannelClosed { channel, .. } => Some(*channel),
            _ => None,
        })
        .collect();
    closed.sort();
    assert_eq!(closed, vec![0, 2]);

    // Every stream starts again at SSN 0: a new channel on stream 0 and a raw
    // message on stream 4 are delivered (without the reset, SSN 0 would be old news
    // on both, and the raw one would wait for SSN 3 for ever).
    sent(&mut lab, &mut a, 0, 0, PPID_DCEP, &open_message("again"));
    sent(&mut lab, &mut a, 4, 0, PPID_BINARY, b"raw after");
    converse(&mut lab, &a, &mut rx, &mut responses, |lab, _| {
        lab.count(|e| matches!(e, ShardEvent::ChannelOpen { .. })) == 3
            && lab.count(|e| matches!(e, ShardEvent::SctpMessage { .. })) == 4
    });
    let last_raw = lab.events.iter().rev().find_map(|e| match e {
        ShardEvent::SctpMessage {
            stream, payload, ..
        } => Some((*stream, payload.clone())),
        _ => None,
    });
    assert_eq!(last_raw, Some((4, Bytes::from_static(b"raw after"))));
    assert!(lab.sctp_closed().is_empty());
}

#[test]
fn a_sack_for_a_tsn_never_sent_aborts() {
    let mut lab = Lab::connect(6);
    let a = lab.associate(0x5ac0_0001, Tsn(50_000));
    queue(&mut lab, 0, 3, 200);
    let mut rx = Receiver::new(&a);
    let p = lab.recv(Duration::from_secs(1)).expect("DATA");
    rx.take(&p);
    assert_eq!(rx.indices(), vec![0, 1, 2]);
    // Ten TSNs past the last one sent.
    lab.send(a.peer_tag, &[sack(rx.cum.add(10), OPEN_WINDOW)]);
    let abort = lab.recv(Duration::from_secs(1)).expect("ABORT");
    // RFC 9260 §11.4: "MUST abort"; the cause says why (§3.3.10.13).
    assert_eq!(abort.verification_tag, a.my_tag);
    let cs = chunks(&abort);
    let Some(Chunk::Abort(ab)) = cs.first() else {
        panic!("an ABORT, not {cs:?}")
    };
    assert!(!ab.t_bit);
    assert_eq!(
        ab.causes.iter().next().map(|c| c.code),
        Some(cause_code::PROTOCOL_VIOLATION)
    );
    lab.run_for(Duration::from_millis(50));
    assert_eq!(lab.sctp_closed(), vec![AssocEnd::ProtocolViolation]);
    assert!(!lab.srv.sctp_established(ID));
    assert!(matches!(
        lab.srv.sctp_send(
            ID,
            SHOAL_STREAM,
            PPID_BINARY,
            message(9, 10),
            false,
            Reliability::Reliable
        ),
        Err(SctpSendError::NotEstablished)
    ));
    // Nothing of the dead association goes on: no retransmission, no heartbeat.
    lab.run_for(Duration::from_secs(120));
    let mut late = Vec::new();
    while let Some((_, p)) = lab.inbox.pop_front() {
        late.push(chunks(&p));
    }
    assert!(late.is_empty(), "after the ABORT: {late:?}");
}

#[test]
fn a_data_chunk_without_user_data_aborts_with_no_user_data() {
    let mut lab = Lab::connect(7);
    let mut a = lab.associate(0x0e0d_0001, Tsn(60_000));
    sent(&mut lab, &mut a, 0, 0, PPID_BINARY, b"first");
    let p = lab.recv(Duration::from_secs(1)).expect("a SACK");
    assert!(has(&p, chunk_type::SACK));
    // The next DATA chunk is its 16-byte header alone: Length 16, no user data.
    let empty_tsn = a.next_tsn;
    let mut empty = BytesMut::new();
    DataHeader {
        tsn: empty_tsn,
        stream_id: StreamId(0),
        ssn: Ssn(1),
        ppid: Ppid(PPID_BINARY),
        immediate: true,
        unordered: false,
        beginning: true,
        end: true,
    }
    .write_to(&mut empty, 0);
    let empty = empty.freeze();
    assert_eq!(empty.len(), 16);
    // Under a tag not shoal's it is not the peer's (RFC 9260 §8.5): dropped, and the
    // association lives on.
    lab.send(a.peer_tag ^ 1, std::slice::from_ref(&empty));
    assert!(lab.recv(Duration::from_secs(1)).is_none());
    assert!(lab.srv.sctp_established(ID));
    // From the peer: RFC 9260 §6.2, ABORT with a No User Data cause, which carries
    // the empty chunk's TSN (§3.3.10.9), under the peer's tag, T bit clear (§8.5.1).
    lab.send(a.peer_tag, &[empty]);
    let abort = lab.recv(Duration::from_secs(1)).expect("ABORT");
    assert_eq!(abort.verification_tag, a.my_tag);
    let cs = chunks(&abort);
    assert_eq!(cs.len(), 1, "{cs:?}");
    let Chunk::Abort(ab) = &cs[0] else {
        panic!("an ABORT, not {cs:?}")
    };
    assert!(!ab.t_bit);
    let causes: Vec<_> = ab.causes.iter().collect();
    assert_eq!(causes.len(), 1, "{causes:?}");
    assert_eq!(causes[0].code, cause_code::NO_USER_DATA);
    assert_eq!(causes[0].no_user_data_tsn(), Some(empty_tsn));
    lab.run_for(Duration::from_millis(50));
    assert_eq!(lab.sctp_closed(), vec![AssocEnd::ProtocolViolation]);
    assert!(!lab.srv.sctp_established(ID));
    assert_eq!(lab.sctp_messages(), vec![Bytes::from_static(b"first")]);
    // Nothing of the dead association goes on.
    lab.run_for(Duration::from_secs(60));
    assert!(lab.inbox.is_empty(), "after the ABORT: {:?}", lab.inbox);
}
