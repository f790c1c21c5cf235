use std::time::Duration;

use super::*;

/// PMDCS 100 bytes: the arithmetic stays readable.
fn cc() -> CongestionControl {
    CongestionControl::new(&CongestionConfig {
        mtu: 112,
        ipv6: false,
        slow_start_l: 1,
    })
}

fn sack(bytes_acked: usize, flight_before: usize, cum: u32) -> SackOutcome {
    SackOutcome {
        cumulative_tsn_ack: Tsn(cum),
        newly_acked_cumulative: bytes_acked > 0,
        bytes_acked,
        bytes_in_flight_before: flight_before,
        highest_sent_tsn: Tsn(cum.wrapping_add(10)),
        ..SackOutcome::default()
    }
}

/// Brings `c` to congestion avoidance with cwnd 500, ssthresh 400.
fn in_congestion_avoidance() -> CongestionControl {
    let mut c = cc();
    c.on_t3_expiry();
    for _ in 0..4 {
        let cwnd = c.cwnd();
        c.on_sack(&sack(100, cwnd, 1));
    }
    assert_eq!((c.cwnd(), c.ssthresh()), (500, 400));
    c
}

#[test]
fn initial_cwnd_follows_the_formula() {
    // RFC 9260 §7.2.1: min(4 * PMDCS, max(2 * PMDCS, 4404)) for IPv4, 4344 for IPv6.
    let v4 = |mtu| {
        CongestionControl::new(&CongestionConfig {
            mtu,
            ..CongestionConfig::default()
        })
    };
    assert_eq!(v4(1200).pmdcs(), 1188);
    assert_eq!(v4(1200).cwnd(), 4404);
    assert_eq!(v4(500).cwnd(), 4 * 488);
    assert_eq!(v4(3000).cwnd(), 2 * 2988);
    let v6 = CongestionControl::new(&CongestionConfig {
        mtu: 1200,
        ipv6: true,
        ..CongestionConfig::default()
    });
    assert_eq!(v6.cwnd(), 4344);
    // "The initial value of ssthresh SHOULD be arbitrarily high."
    assert_eq!(v6.ssthresh(), u32::MAX as usize);
}

#[test]
fn slow_start_grows_only_when_cwnd_is_fully_utilized() {
    // RFC 9260 §7.2.1: increase by at most min(bytes acked, L * PMDCS), only if the
    // window is fully utilized and not in Fast Recovery.
    let mut c = cc();
    assert_eq!(c.cwnd(), 400);
    c.on_sack(&sack(300, 400, 1));
    assert_eq!(c.cwnd(), 500, "grows by PMDCS, not by the 300 bytes acked");
    c.on_sack(&sack(40, 500, 2));
    assert_eq!(c.cwnd(), 540, "grows by the bytes acked when fewer");
    c.on_sack(&sack(100, 300, 3));
    assert_eq!(c.cwnd(), 540, "application-limited: no growth");
    c.on_sack(&sack(0, 540, 3));
    assert_eq!(c.cwnd(), 540, "nothing acked: no growth");
}

#[test]
fn no_slow_start_growth_in_fast_recovery() {
    // RFC 9260 §7.2.1: "... and the data sender is not in Fast Recovery".
    let mut c = cc();
    let mut s = sack(0, 400, 1);
    s.fast_retransmit_triggered = true;
    assert!(c.on_sack(&s));
    let cwnd = c.cwnd();
    assert!(cwnd <= c.ssthresh());
    c.on_sack(&sack(100, cwnd, 2));
    assert_eq!(c.cwnd(), cwnd);
}

#[test]
fn congestion_avoidance_uses_partial_bytes_acked() {
    // RFC 9260 §7.2.2: pba accumulates; cwnd += PMDCS when pba >= cwnd and flightsize
    // had reached cwnd; pba is capped at cwnd otherwise; reset when all is acked.
    let mut c = in_congestion_avoidance();
    c.on_sack(&sack(200, 500, 2));
    assert_eq!((c.cwnd(), c.partial_bytes_acked()), (500, 200));
    c.on_sack(&sack(350, 500, 3));
    assert_eq!((c.cwnd(), c.partial_bytes_acked()), (600, 50));
    c.on_sack(&sack(700, 300, 4));
    assert_eq!((c.cwnd(), c.partial_bytes_acked()), (600, 600));
    let mut done = sack(100, 300, 5);
    done.all_acked = true;
    c.on_sack(&done);
    assert_eq!(c.partial_bytes_acked(), 0);
}

#[test]
fn fast_recovery_reduces_once_and_exits_at_the_exit_point() {
    // RFC 9260 §7.2.4 rules 2 and 6 with §7.2.3: ssthresh = max(cwnd/2, 4 * PMDCS),
    // cwnd = ssthresh, one reduction per recovery; §6.2.1 D iv: exit when the cumulative
    // TSN ack reaches the exit point.
    let mut c = in_congestion_avoidance();
    c.on_sack(&sack(350, 500, 2));
    c.on_sack(&sack(350, 500, 2));
    assert_eq!(c.cwnd(), 600);
    let mut loss = sack(0, 600, 5);
    loss.fast_retransmit_triggered = true;
    loss.highest_sent_tsn = Tsn(50);
    assert!(
        c.on_sack(&loss),
        "entering Fast Recovery: retransmit at once"
    );
    assert!(c.in_fast_recovery());
    assert_eq!(
        (c.ssthresh(), c.cwnd(), c.partial_bytes_acked()),
        (400, 400, 0)
    );
    // A second loss in the same recovery changes nothing.
    loss.highest_sent_tsn = Tsn(60);
    assert!(!c.on_sack(&loss));
    assert_eq!((c.ssthresh(), c.cwnd()), (400, 400));
    c.on_sack(&sack(100, 400, 49));
    assert!(c.in_fast_recovery());
    c.on_sack(&sack(100, 400, 50));
    assert!(!c.in_fast_recovery());
    // A new loss after the recovery reduces again.
    loss.cumulative_tsn_ack = Tsn(51);
    assert!(c.on_sack(&loss));
}

#[test]
fn fast_recovery_exit_point_wraps() {
    // Serial arithmetic (RFC 9260 §1.6): TSN 0 is after TSN 2^32 - 1.
    let mut c = cc();
    let mut loss = sack(0, 400, u32::MAX - 5);
    loss.fast_retransmit_triggered = true;
    loss.highest_sent_tsn = Tsn(u32::MAX);
    c.on_sack(&loss);
    c.on_sack(&sack(100, 400, u32::MAX - 1));
    assert!(c.in_fast_recovery());
    c.on_sack(&sack(100, 400, 0));
    assert!(!c.in_fast_recovery());
}

#[test]
fn t3_expiry_restarts_slow_start_from_one_packet() {
    // RFC 9260 §7.2.3 / §6.3.3 E1: ssthresh = max(cwnd/2, 4 * PMDCS), cwnd = PMDCS.
    let mut c = in_congestion_avoidance();
    let mut loss = sack(0, 500, 2);
    loss.fast_retransmit_triggered = true;
    c.on_sack(&loss);
    c.on_t3_expiry();
    assert_eq!(
        (c.ssthresh(), c.cwnd(), c.partial_bytes_acked()),
        (400, 100, 0)
    );
    assert!(!c.in_fast_recovery());
    // One packet may be in flight until an ack (rule B with cwnd = PMDCS).
    assert!(c.can_send(0, 10_000, 88));
    assert!(!c.can_send(100, 10_000, 88));
}

#[test]
fn idle_decay_once_per_rto() {
    // RFC 9260 §7.2.1: while idle, cwnd = max(cwnd/2, 4 * PMDCS) once per RTO, ssthresh
    // set to cwnd before the first adjustment.
    let mut c = cc();
    for _ in 0..6 {
        let cwnd = c.cwnd();
        c.on_sack(&sack(100, cwnd, 1));
    }
    assert_eq!(c.cwnd(), 1000);
    let rto = Duration::from_secs(1);
    c.on_idle(Time::from_millis(5000), rto);
    assert_eq!(c.cwnd(), 1000, "never sent: nothing to decay");
    c.on_transmit(Time::ZERO);
    c.on_idle(Time::from_millis(999), rto);
    assert_eq!(c.cwnd(), 1000);
    c.on_idle(Time::from_millis(1000), rto);
    assert_eq!((c.cwnd(), c.ssthresh()), (500, 1000));
    c.on_idle(Time::from_millis(1500), rto);
    assert_eq!(c.cwnd(), 500, "one adjustment per RTO");
    c.on_idle(Time::from_millis(3000), rto);
    assert_eq!((c.cwnd(), c.ssthresh()), (400, 1000));
    // After a T3 expiry cwnd is below 4 * PMDCS: the decay does not raise it.
    c.on_t3_expiry();
    c.on_transmit(Time::from_millis(3000));
    c.on_idle(Time::from_millis(9000), rto);
    assert_eq!(c.cwnd(), 100);
}

#[test]
fn can_send_applies_rules_a_and_b() {
    // RFC 9260 §6.1 B: no new data once flightsize reaches cwnd; below it one packet may
    // overshoot by up to PMDCS - 1.
    let c = cc();
    assert!(c.can_send(399, 10_000, 88));
    assert!(!c.can_send(400, 10_000, 88));
    // §6.1 A: not when rwnd is smaller than the chunk, except a zero window probe with
    // nothing in flight.
    assert!(!c.can_send(50, 99, 100));
    assert!(c.can_send(50, 100, 100));
    assert!(c.can_send(0, 0, 100));
}

#[test]
fn reset_restores_initial_values() {
    // RFC 9260 §7.2.5: reinitialize congestion control.
    let mut c = in_congestion_avoidance();
    c.reset();
    assert_eq!((c.cwnd(), c.ssthresh()), (400, u32::MAX as usize));
}
