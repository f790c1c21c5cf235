//! The ICE rules a shard enforces, one scenario each: who may own a path, what a
//! replay or a late check can and cannot do, nomination and renomination, bounded
//! valid lists, 420 responses, and the controlling side's retransmission schedule.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use shoal_components::net::{Datagram, FiveTuple};
use shoal_components::peer::{IceCredentials, IceRole, IceState, MAX_VALID_REMOTES, PeerId};
use shoal_components::stun::{self, Class, StunMessage, StunWriter, TransactionId};
use shoal_components::tick::{RemoveReason, ShardEvent};
use shoal_components::time::Time;
use shoal_systems::{Command, CommandError, PeerSpec, Shard, ShardConfig};

const SRV: &str = "10.0.0.1:7100";
const PA: &str = "passwordAAAAAAAAAAAAAAAA";
const PB: &str = "passwordBBBBBBBBBBBBBBBB";
const CLIENT_PWD: &str = "clientpassword0123456789";

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn server() -> Shard {
    Shard::new(ShardConfig::new(addr(SRV), 1))
}

fn lite(id: u64, ufrag: &str, pwd: &str) -> Command {
    Command::AddPeer(PeerSpec {
        id: PeerId(id),
        role: IceRole::Lite,
        credentials: IceCredentials {
            local_ufrag: ufrag.into(),
            local_pwd: pwd.into(),
            remote_ufrag: "cliX".into(),
            remote_pwd: CLIENT_PWD.into(),
        },
        remote_candidates: vec![],
        dtls: None,
        room: None,
        may_send_data: true,
        link: false,
    })
}

fn check_with(tid: u8, ufrag: &str, pwd: &str, nominate: bool, extra: Option<u16>) -> Bytes {
    let mut buf = BytesMut::new();
    let mut w = StunWriter::new(
        &mut buf,
        Class::Request,
        stun::BINDING,
        TransactionId([tid; 12]),
    );
    w.username(format!("{ufrag}:cliX").as_bytes())
        .priority(0x6e00_01ff)
        .ice_controlling(1);
    if nominate {
        w.use_candidate();
    }
    if let Some(t) = extra {
        w.raw_attribute(t, &[1, 2, 3, 4]);
    }
    w.message_integrity(pwd.as_bytes()).fingerprint();
    w.finish();
    buf.freeze()
}

fn check(tid: u8, ufrag: &str, pwd: &str, nominate: bool) -> Bytes {
    check_with(tid, ufrag, pwd, nominate, None)
}

fn from(remote: &str, payload: Bytes) -> Datagram {
    Datagram {
        local: addr(SRV),
        remote: addr(remote),
        payload,
    }
}

fn path(remote: &str) -> FiveTuple {
    FiveTuple {
        local: addr(SRV),
        remote: addr(remote),
    }
}

fn sent(s: &mut Shard) -> Vec<Datagram> {
    let mut out = Vec::new();
    s.poll_transmit(&mut out);
    out
}

fn events(s: &mut Shard) -> Vec<ShardEvent> {
    std::iter::from_fn(|| s.poll_event()).collect()
}

/// Steps `s` by 100 ms until `until`, returning when the peer was removed, if it was.
fn run_until_removed(s: &mut Shard, mut t: Time, until: Time) -> Option<(Time, RemoveReason)> {
    while t < until {
        t = t + Duration::from_millis(100);
        s.handle_timeout(t);
        for e in events(s) {
            if let ShardEvent::PeerRemoved { reason, .. } = e {
                return Some((t, reason));
            }
        }
    }
    None
}

#[test]
fn a_validated_path_belongs_to_its_peer() {
    let mut s = server();
    s.command(Time::ZERO, lite(1, "ufA1", PA)).unwrap();
    s.command(Time::ZERO, lite(2, "ufB2", PB)).unwrap();
    s.handle_datagrams(
        Time::from_millis(1),
        [from("192.0.2.1:5000", check(1, "ufA1", PA, true))],
    );
    assert_eq!(sent(&mut s).len(), 1);
    // B, with valid credentials, checks from A's path: no answer, no claim.
    s.handle_datagrams(
        Time::from_millis(2),
        [from("192.0.2.1:5000", check(2, "ufB2", PB, true))],
    );
    assert!(sent(&mut s).is_empty());
    assert_eq!(s.stats().stun_path_conflict, 1);
    assert_eq!(s.path_owner(path("192.0.2.1:5000")), Some(PeerId(1)));
    assert_eq!(s.ice_state(PeerId(2)), Some(IceState::Checking));
    // From its own path B connects.
    s.handle_datagrams(
        Time::from_millis(3),
        [from("192.0.2.2:5000", check(3, "ufB2", PB, true))],
    );
    assert_eq!(sent(&mut s).len(), 1);
    assert_eq!(s.selected_remote(PeerId(2)), Some(addr("192.0.2.2:5000")));
    // Removing A frees its path and nothing of B's.
    s.command(Time::from_millis(4), Command::RemovePeer(PeerId(1)))
        .unwrap();
    assert_eq!(s.path_owner(path("192.0.2.1:5000")), None);
    assert_eq!(s.path_owner(path("192.0.2.2:5000")), Some(PeerId(2)));
}

#[test]
fn two_claims_of_one_path_in_one_batch_give_it_to_the_first() {
    let mut s = server();
    s.command(Time::ZERO, lite(1, "ufA1", PA)).unwrap();
    s.command(Time::ZERO, lite(2, "ufB2", PB)).unwrap();
    s.handle_datagrams(
        Time::from_millis(1),
        [
            from("192.0.2.1:5000", check(1, "ufA1", PA, true)),
            from("192.0.2.1:5000", check(2, "ufB2", PB, true)),
        ],
    );
    assert_eq!(sent(&mut s).len(), 1);
    assert_eq!(s.path_owner(path("192.0.2.1:5000")), Some(PeerId(1)));
    assert_eq!(s.selected_remote(PeerId(2)), None);
    // Once A is gone, B may take the path, and the index follows.
    s.command(Time::from_millis(2), Command::RemovePeer(PeerId(1)))
        .unwrap();
    s.handle_datagrams(
        Time::from_millis(3),
        [from("192.0.2.1:5000", check(3, "ufB2", PB, true))],
    );
    assert_eq!(s.path_owner(path("192.0.2.1:5000")), Some(PeerId(2)));
    s.command(Time::from_millis(4), Command::RemovePeer(PeerId(2)))
        .unwrap();
    assert_eq!(s.path_owner(path("192.0.2.1:5000")), None);
    assert_eq!(s.peer_count(), 0);
}

#[test]
fn a_replayed_check_moves_nothing_and_keeps_nothing_alive() {
    let mut s = server();
    s.command(Time::ZERO, lite(1, "ufA1", PA)).unwrap();
    let captured = check(1, "ufA1", PA, true);
    s.handle_datagrams(
        Time::from_millis(10),
        [from("192.0.2.10:5000", captured.clone())],
    );
    assert_eq!(s.selected_remote(PeerId(1)), Some(addr("192.0.2.10:5000")));
    // The same bytes from a spoofed source are answered (a retransmission looks the
    // same) but do not redirect the peer's media.
    s.handle_datagrams(
        Time::from_millis(20),
        [from("203.0.113.66:80", captured.clone())],
    );
    assert_eq!(sent(&mut s).len(), 2);
    assert_eq!(s.selected_remote(PeerId(1)), Some(addr("192.0.2.10:5000")));
    assert_eq!(s.stats().stun_repeated_transaction, 1);
    // Replays from the original path look like retransmissions only while a STUN
    // transaction could still be retransmitting (39.5 s): they cannot keep the peer
    // alive past that. The last refresh is the copy at 30.02 s, so consent lapses
    // at 60.02 s.
    let mut t = Time::from_millis(20);
    let mut removed = None;
    for _ in 0..12 {
        s.handle_datagrams(t, [from("192.0.2.10:5000", captured.clone())]);
        if let Some(r) = run_until_removed(&mut s, t, t + Duration::from_secs(10)) {
            removed = Some(r);
            break;
        }
        t = t + Duration::from_secs(10);
    }
    let (at, reason) = removed.expect("replays must not keep consent alive");
    assert_eq!(reason, RemoveReason::ConsentExpired);
    assert!(
        at >= Time::from_millis(60_020) && at <= Time::from_millis(60_200),
        "{at:?}"
    );
    assert_eq!(s.stats().stun_retransmitted_checks, 4);
}

#[test]
fn a_retransmitted_nomination_keeps_consent_when_answers_are_lost() {
    let mut s = server();
    s.command(Time::ZERO, lite(1, "ufA1", PA)).unwrap();
    let nominate = check(1, "ufA1", PA, true);
    // The client's answers are all lost, so it retransmits (RFC 8489 §6.2.1).
    for ms in [0u64, 500, 1500, 3500, 7500, 15500, 31500] {
        s.handle_datagrams(
            Time::from_millis(ms),
            [from("192.0.2.10:5000", nominate.clone())],
        );
        assert_eq!(sent(&mut s).len(), 1, "every retransmission is answered");
    }
    assert_eq!(s.selected_remote(PeerId(1)), Some(addr("192.0.2.10:5000")));
    // Consent runs from the last retransmission, not the first copy.
    let removed = run_until_removed(&mut s, Time::from_millis(31_500), Time::from_millis(70_000));
    let (at, _) = removed.expect("consent lapses in the end");
    assert!(at >= Time::from_millis(61_500), "{at:?}");
}

#[test]
fn bad_integrity_does_not_refresh_consent() {
    let mut s = server();
    s.command(Time::ZERO, lite(1, "ufA1", PA)).unwrap();
    s.handle_datagrams(
        Time::ZERO,
        [from("192.0.2.10:5000", check(1, "ufA1", PA, true))],
    );
    let mut t = Time::ZERO;
    let mut removed = None;
    for i in 0..10u8 {
        t = t + Duration::from_secs(5);
        s.handle_datagrams(
            t,
            [from("192.0.2.10:5000", check(10 + i, "ufA1", PB, false))],
        );
        if let Some(r) = run_until_removed(&mut s, t, t + Duration::from_millis(4900)) {
            removed = Some(r);
            break;
        }
    }
    let (at, _) = removed.expect("forged checks must not keep consent alive");
    assert!(
        at >= Time::from_secs_for_test(30) && at <= Time::from_millis(30_100),
        "{at:?}"
    );
    assert!(s.stats().stun_bad_integrity >= 5);
}

#[test]
fn a_check_after_consent_expiry_does_not_revive_the_peer() {
    let mut s = server();
    s.command(Time::ZERO, lite(1, "ufA1", PA)).unwrap();
    s.handle_datagrams(
        Time::ZERO,
        [from("192.0.2.10:5000", check(1, "ufA1", PA, true))],
    );
    sent(&mut s);
    // The driver was late: the next tick carries a valid check 30.005 s on.
    s.handle_datagrams(
        Time::from_millis(30_005),
        [from("192.0.2.10:5000", check(2, "ufA1", PA, false))],
    );
    assert!(sent(&mut s).is_empty());
    assert_eq!(s.ice_state(PeerId(1)), None);
    assert_eq!(s.stats().stun_after_consent_expiry, 1);
    assert!(events(&mut s).contains(&ShardEvent::PeerRemoved {
        peer: PeerId(1),
        reason: RemoveReason::ConsentExpired
    }));
}

/// An ICE restart (RFC 8445 §9): the old credentials are answered until the peer
/// nominates with the new ones (media keeps its path meanwhile), then only the new
/// ones; the peer moves to the new session's path without leaving.
#[test]
fn an_ice_restart_answers_both_sessions_until_the_new_one_nominates() {
    let mut s = server();
    s.command(Time::ZERO, lite(1, "ufA1", PA)).unwrap();
    s.handle_datagrams(
        Time::from_millis(1),
        [from("192.0.2.1:5000", check(1, "ufA1", PA, true))],
    );
    assert_eq!(s.selected_remote(PeerId(1)), Some(addr("192.0.2.1:5000")));
    sent(&mut s);
    const NEW_PWD: &str = "newpassword01234567890123";
    let restart = |ufrag: &str| Command::RestartIce {
        peer: PeerId(1),
        credentials: IceCredentials {
            local_ufrag: ufrag.into(),
            local_pwd: NEW_PWD.into(),
            remote_ufrag: "cliY".into(),
            remote_pwd: CLIENT_PWD.into(),
        },
    };
    // Another peer's ufrag, and a malformed one, are refused; nothing changes.
    s.command(Time::ZERO, lite(2, "ufB2", PB)).unwrap();
    assert!(s.command(Time::from_millis(2), restart("ufB2")).is_err());
    assert!(s.command(Time::from_millis(2), restart("u:")).is_err());
    s.command(Time::from_millis(2), restart("ufN1")).unwrap();
    assert_eq!(s.stats().ice_restarts, 1);

    // The old session still answers (its consent keeps the old path).
    s.handle_datagrams(
        Time::from_millis(3),
        [from("192.0.2.1:5000", check(2, "ufA1", PA, false))],
    );
    assert_eq!(
        sent(&mut s).len(),
        1,
        "the old credentials are still answered"
    );
    // The new one answers, from a new address; no nomination yet: the path stays.
    s.handle_datagrams(
        Time::from_millis(4),
        [from("192.0.2.7:7000", check(3, "ufN1", NEW_PWD, false))],
    );
    assert_eq!(sent(&mut s).len(), 1);
    assert_eq!(s.selected_remote(PeerId(1)), Some(addr("192.0.2.1:5000")));
    // The old password does not pass for the new ufrag, nor the new for the old.
    let bad_before = s.stats().stun_bad_integrity;
    s.handle_datagrams(
        Time::from_millis(5),
        [
            from("192.0.2.7:7000", check(4, "ufN1", PA, false)),
            from("192.0.2.1:5000", check(5, "ufA1", NEW_PWD, false)),
        ],
    );
    assert!(sent(&mut s).is_empty());
    assert_eq!(s.stats().stun_bad_integrity, bad_before + 2);
    // The new session nominates: the path moves, the restart is complete.
    s.handle_datagrams(
        Time::from_millis(6),
        [from("192.0.2.7:7000", check(6, "ufN1", NEW_PWD, true))],
    );
    assert_eq!(sent(&mut s).len(), 1);
    assert_eq!(s.selected_remote(PeerId(1)), Some(addr("192.0.2.7:7000")));
    assert_eq!(s.stats().ice_restarts_completed, 1);
    // The old credentials are no longer answered.
    let unknown_before = s.stats().stun_unknown_ufrag;
    s.handle_datagrams(
        Time::from_millis(7),
        [from("192.0.2.1:5000", check(7, "ufA1", PA, false))],
    );
    assert!(sent(&mut s).is_empty());
    assert_eq!(s.stats().stun_unknown_ufrag, unknown_before + 1);
    // And the peer never left.
    assert!(
        !events(&mut s)
            .iter()
            .any(|e| matches!(e, ShardEvent::PeerRemoved { .. }))
    );
    // A restart abandoned before it completes: a second one replaces its unused
    // credentials, and the ones in use keep being answered.
    s.command(Time::from_millis(8), restart("ufX1")).unwrap();
    s.command(Time::from_millis(8), restart("ufY1")).unwrap();
    s.handle_datagrams(
        Time::from_millis(8),
        [
            from("192.0.2.7:7000", check(8, "ufN1", NEW_PWD, false)),
            from("192.0.2.7:7000", check(9, "ufX1", NEW_PWD, false)),
            from("192.0.2.7:7000", check(10, "ufY1", NEW_PWD, true)),
        ],
    );
    assert_eq!(
        sent(&mut s).len(),
        2,
        "ufN1 (in use) and ufY1 answered, ufX1 gone"
    );
    assert_eq!(s.stats().ice_restarts_completed, 2);
    // A removed peer takes both of its ufrags out of the index: a new peer may use them.
    s.command(Time::from_millis(8), restart("ufM1")).unwrap();
    s.command(Time::from_millis(9), Command::RemovePeer(PeerId(1)))
        .unwrap();
    s.command(Time::from_millis(10), lite(3, "ufY1", PA))
        .unwrap();
    s.command(Time::from_millis(10), lite(4, "ufM1", PA))
        .unwrap();
}

#[test]
fn renomination_moves_the_selected_path() {
    let mut s = server();
    s.command(Time::ZERO, lite(1, "ufA1", PA)).unwrap();
    s.handle_datagrams(
        Time::from_millis(1),
        [from("192.0.2.1:5000", check(1, "ufA1", PA, true))],
    );
    s.handle_datagrams(
        Time::from_millis(2),
        [from("192.0.2.9:6000", check(2, "ufA1", PA, false))],
    );
    assert_eq!(s.selected_remote(PeerId(1)), Some(addr("192.0.2.1:5000")));
    s.handle_datagrams(
        Time::from_millis(3),
        [from("192.0.2.9:6000", check(3, "ufA1", PA, true))],
    );
    assert_eq!(s.selected_remote(PeerId(1)), Some(addr("192.0.2.9:6000")));
    let connected: Vec<_> = events(&mut s)
        .into_iter()
        .filter_map(|e| match e {
            ShardEvent::IceConnected { remote, .. } => Some(remote),
            _ => None,
        })
        .collect();
    assert_eq!(
        connected,
        vec![addr("192.0.2.1:5000"), addr("192.0.2.9:6000")]
    );
}

#[test]
fn the_valid_list_is_bounded_and_keeps_the_selected_path() {
    let mut s = server();
    s.command(Time::ZERO, lite(1, "ufA1", PA)).unwrap();
    s.handle_datagrams(
        Time::from_millis(1),
        [from("192.0.2.1:5000", check(1, "ufA1", PA, true))],
    );
    let n = MAX_VALID_REMOTES + 3;
    for i in 0..n {
        let remote = format!("198.51.100.{}:7000", i + 1);
        s.handle_datagrams(
            Time::from_millis(2 + i as u64),
            [from(&remote, check(2 + i as u8, "ufA1", PA, false))],
        );
    }
    let owned = (0..n)
        .filter(|i| {
            s.path_owner(path(&format!("198.51.100.{}:7000", i + 1)))
                .is_some()
        })
        .count();
    assert_eq!(owned, MAX_VALID_REMOTES - 1);
    assert_eq!(s.path_owner(path("192.0.2.1:5000")), Some(PeerId(1)));
    // The newest path is among the kept ones; the oldest is not.
    assert!(
        s.path_owner(path(&format!("198.51.100.{n}:7000")))
            .is_some()
    );
    assert!(s.path_owner(path("198.51.100.1:7000")).is_none());
}

#[test]
fn unknown_comprehension_required_attribute_gets_420() {
    let mut s = server();
    s.command(Time::ZERO, lite(1, "ufA1", PA)).unwrap();
    let req = check_with(1, "ufA1", PA, true, Some(0x7f01));
    s.handle_datagrams(Time::from_millis(1), [from("192.0.2.1:5000", req)]);
    let out = sent(&mut s);
    assert_eq!(out.len(), 1);
    let resp = StunMessage::parse(out[0].payload.clone()).unwrap();
    assert_eq!(resp.class(), Class::ErrorResponse);
    assert_eq!(resp.error_code().map(|(c, _)| c), Some(420));
    assert_eq!(resp.unknown_attributes().collect::<Vec<_>>(), vec![0x7f01]);
    assert!(resp.verify_integrity(PA.as_bytes()).is_ok());
    // RFC 8489 §6.3.1.1: the request is not otherwise processed.
    assert_eq!(s.selected_remote(PeerId(1)), None);
    // An unknown comprehension-optional attribute is ignored.
    let req = check_with(2, "ufA1", PA, true, Some(0x8f01));
    s.handle_datagrams(Time::from_millis(2), [from("192.0.2.1:5000", req)]);
    assert_eq!(s.selected_remote(PeerId(1)), Some(addr("192.0.2.1:5000")));
}

#[test]
fn credentials_that_cannot_fit_a_username_are_refused() {
    let mut s = server();
    let long = "u".repeat(256);
    let err = s
        .command(
            Time::ZERO,
            Command::AddPeer(PeerSpec {
                id: PeerId(1),
                role: IceRole::Lite,
                credentials: IceCredentials {
                    local_ufrag: long.clone(),
                    local_pwd: PA.into(),
                    remote_ufrag: long,
                    remote_pwd: PB.into(),
                },
                remote_candidates: vec![],
                dtls: None,
                room: None,
                may_send_data: true,
                link: false,
            }),
        )
        .unwrap_err();
    assert!(matches!(err, CommandError::InvalidCredential(_)));
}

fn client(candidates: Vec<SocketAddr>) -> Shard {
    let mut c = Shard::new(ShardConfig::new(addr("10.0.0.2:50000"), 2));
    c.command(
        Time::ZERO,
        Command::AddPeer(PeerSpec {
            id: PeerId(9),
            role: IceRole::Controlling,
            credentials: IceCredentials {
                local_ufrag: "cliX".into(),
                local_pwd: CLIENT_PWD.into(),
                remote_ufrag: "ufA1".into(),
                remote_pwd: PA.into(),
            },
            remote_candidates: candidates,
            dtls: None,
            room: None,
            may_send_data: true,
            link: false,
        }),
    )
    .unwrap();
    c
}

#[test]
fn client_retransmits_as_rfc8489_says_then_fails() {
    let mut c = client(vec![addr(SRV)]);
    let mut sends = Vec::new();
    let mut t = Time::ZERO;
    let mut failed_at = None;
    c.handle_timeout(t);
    while t < Time::from_millis(120_000) && failed_at.is_none() {
        for d in sent(&mut c) {
            let m = StunMessage::parse(d.payload).unwrap();
            // RFC 8445 §7.1.1: PRIORITY with the peer-reflexive type preference.
            assert_eq!(m.priority().map(|p| p >> 24), Some(110));
            sends.push(t.as_micros() / 1000);
        }
        for e in events(&mut c) {
            if let ShardEvent::PeerRemoved { reason, .. } = e {
                assert_eq!(reason, RemoveReason::IceFailed);
                failed_at = Some(t.as_micros() / 1000);
            }
        }
        t = c.poll_timeout().unwrap_or(t + Duration::from_millis(50));
        c.handle_timeout(t);
    }
    // 500 ms doubling, 7 transmissions, then 16 × 500 ms; the transaction fails at
    // 39.5 s, inside the 60 s connect budget, so a second one starts, and its failure
    // (after the budget) fails the agent.
    let one = [0, 500, 1500, 3500, 7500, 15500, 31500];
    let again: Vec<u64> = one.iter().map(|t| t + 39_500).collect();
    assert_eq!(sends, [one.to_vec(), again].concat());
    assert_eq!(failed_at, Some(79_000));
}

#[test]
fn a_response_with_unknown_required_attributes_fails_the_check() {
    let mut c = client(vec![addr(SRV)]);
    c.handle_timeout(Time::ZERO);
    let req = sent(&mut c).pop().unwrap();
    let m = StunMessage::parse(req.payload).unwrap();
    let mut buf = BytesMut::new();
    let mut w = StunWriter::new(
        &mut buf,
        Class::SuccessResponse,
        stun::BINDING,
        m.transaction_id(),
    );
    w.xor_mapped_address(req.local)
        .raw_attribute(0x7f01, &[0; 4]);
    w.message_integrity(PA.as_bytes()).fingerprint();
    w.finish();
    c.handle_datagrams(
        Time::from_millis(10),
        [Datagram {
            local: req.local,
            remote: req.remote,
            payload: buf.freeze(),
        }],
    );
    assert_eq!(c.stats().stun_response_unknown_attributes, 1);
    assert_eq!(
        c.ice_state(PeerId(9)),
        Some(IceState::Checking),
        "not connected"
    );
    // The failed transaction is over: the next tick starts a new one at once.
    c.handle_timeout(Time::from_millis(10));
    let retry = sent(&mut c);
    assert_eq!(retry.len(), 1);
    let again = StunMessage::parse(retry[0].payload.clone()).unwrap();
    assert_ne!(again.transaction_id(), m.transaction_id());
}

#[test]
fn a_peer_removed_by_consent_expiry_sends_nothing_more() {
    // A connected client whose server went silent: far in the future its consent
    // expiry and its next consent check fall due in one tick.
    let s_addr = addr(SRV);
    let mut srv = server();
    srv.command(Time::ZERO, lite(1, "ufA1", PA)).unwrap();
    let mut c = client(vec![s_addr]);
    let mut t = Time::ZERO;
    for _ in 0..50 {
        c.handle_timeout(t);
        let to_srv: Vec<_> = sent(&mut c)
            .into_iter()
            .map(|d| Datagram {
                local: d.remote,
                remote: d.local,
                payload: d.payload,
            })
            .collect();
        srv.handle_datagrams(t, to_srv);
        let to_c: Vec<_> = sent(&mut srv)
            .into_iter()
            .map(|d| Datagram {
                local: d.remote,
                remote: d.local,
                payload: d.payload,
            })
            .collect();
        c.handle_datagrams(t, to_c);
        t = t + Duration::from_millis(10);
    }
    assert_eq!(c.ice_state(PeerId(9)), Some(IceState::Connected));
    sent(&mut c);
    // One tick 100 s on: the consent check that fell due before the expiry may still
    // go out, then the peer is removed, and no timer of it sends anything after.
    let late = t + Duration::from_secs(100);
    c.handle_timeout(late);
    assert!(sent(&mut c).len() <= 1);
    assert_eq!(c.ice_state(PeerId(9)), None);
    for i in 1..100 {
        c.handle_timeout(late + Duration::from_secs(i));
    }
    assert!(sent(&mut c).is_empty());
    assert_eq!(c.poll_timeout(), None, "no live timer left behind");
}

trait SecsForTest {
    fn from_secs_for_test(s: u64) -> Time;
}
impl SecsForTest for Time {
    fn from_secs_for_test(s: u64) -> Time {
        Time::from_millis(s * 1000)
    }
}

#[test]
fn the_ice_pass_survives_mutated_checks() {
    use rand_chacha::ChaCha8Rng;
    use rand_core::{RngCore, SeedableRng};
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let mut s = server();
    s.command(Time::ZERO, lite(1, "ufA1", PA)).unwrap();
    let mut t = Time::ZERO;
    for i in 0..50_000u32 {
        let mut bytes = check((i % 251) as u8, "ufA1", PA, i % 2 == 0).to_vec();
        for _ in 0..1 + rng.next_u32() % 3 {
            let at = (rng.next_u32() as usize) % bytes.len().max(1);
            match rng.next_u32() % 3 {
                0 if !bytes.is_empty() => bytes[at] ^= 1 << (rng.next_u32() % 8),
                1 => bytes.truncate(at),
                0 => {}
                _ => bytes.insert(at, rng.next_u32() as u8),
            }
        }
        let port = 1024 + (rng.next_u32() % 64) as u16;
        let d = Datagram {
            local: addr(SRV),
            remote: SocketAddr::new(addr("192.0.2.1:1").ip(), port),
            payload: Bytes::from(bytes),
        };
        t = t + Duration::from_micros(100);
        s.handle_datagrams(t, [d]);
        sent(&mut s);
    }
    // Still serving: a fresh valid check from a new path is answered.
    s.handle_datagrams(t, [from("198.51.100.200:9", check(255, "ufA1", PA, true))]);
    assert_eq!(sent(&mut s).len(), 1);
}
