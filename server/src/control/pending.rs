//! Sessions admitted but not connected yet: a WHIP/WHEP POST answered, or a
//! `/signal`/`SignalService` join, whose peer has not completed ICE and DTLS. Each
//! holds a room slot, a participant entry and (once it offered) a peer on a shard,
//! for the price of one request; so they are capped per node and per client
//! address, and each has [`PendingLimits::setup_timeout`] to connect before it is
//! removed (DISCONNECT_REASON_CONNECTION_TIMEOUT) and counted.
//!
//! A client address is the IPv4 address, or the IPv6 /64 prefix: one IPv6 host
//! commonly holds a whole /64 (RFC 7934 §4 recommends handing hosts a /64), so a cap
//! per IPv6 address would cap nothing. A request whose address is unknown counts
//! against the node's cap only.
//!
//! A refusal carries the time until a slot of its scope frees at the latest (the
//! oldest pending session's deadline): HTTP answers 503 with `Retry-After` (RFC 9110
//! §10.2.3), gRPC UNAVAILABLE with `grpc-retry-pushback-ms` (gRPC's retry design A6).

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;
use std::time::Duration;

use shoal_components::peer::PeerId;
use shoal_components::time::Time;
use tonic::Status;

/// Default of `--session-setup-timeout`, in seconds.
pub const DEFAULT_SETUP_TIMEOUT_SECS: u64 = 30;
/// Default of `--max-pending-sessions`.
pub const DEFAULT_MAX_PENDING: usize = 1024;
/// Default of `--max-pending-sessions-per-address`.
pub const DEFAULT_MAX_PENDING_PER_ADDRESS: usize = 32;
/// The trailing metadata key that tells a gRPC client when to try again (gRPC
/// design A6, "Server pushback"), which HTTP turns into `Retry-After`.
pub const RETRY_PUSHBACK_KEY: &str = "grpc-retry-pushback-ms";

/// The bounds on sessions that have not connected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PendingLimits {
    /// Pending sessions on the node at once.
    pub per_node: usize,
    /// Pending sessions from one client address (IPv4 address or IPv6 /64) at once.
    pub per_address: usize,
    /// How long a session has from its admission to DTLS connected.
    pub setup_timeout: Duration,
}

impl Default for PendingLimits {
    fn default() -> PendingLimits {
        PendingLimits {
            per_node: DEFAULT_MAX_PENDING,
            per_address: DEFAULT_MAX_PENDING_PER_ADDRESS,
            setup_timeout: Duration::from_secs(DEFAULT_SETUP_TIMEOUT_SECS),
        }
    }
}

/// A client address as the caps count it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AddressKey {
    /// An IPv4 address (an IPv4-mapped IPv6 address counts as its IPv4 address).
    V4(u32),
    /// The first 64 bits of an IPv6 address.
    V6(u64),
}

impl AddressKey {
    /// The key of `ip`.
    pub fn of(ip: IpAddr) -> AddressKey {
        match ip {
            IpAddr::V4(v4) => AddressKey::V4(u32::from(v4)),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => AddressKey::V4(u32::from(v4)),
                None => AddressKey::V6((u128::from(v6) >> 64) as u64),
            },
        }
    }
}

/// Which cap refused a session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// `--max-pending-sessions`.
    Node,
    /// `--max-pending-sessions-per-address`.
    Address,
}

/// A session refused for want of a pending slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Busy {
    /// The cap that was reached.
    pub scope: Scope,
    /// How long until a slot of that scope frees at the latest.
    pub retry_after: Duration,
}

impl From<Busy> for Status {
    fn from(busy: Busy) -> Status {
        let what = match busy.scope {
            Scope::Node => {
                "this node holds as many sessions that have not connected yet as \
                            --max-pending-sessions allows"
            }
            Scope::Address => {
                "your address holds as many sessions that have not connected \
                               yet as --max-pending-sessions-per-address allows"
            }
        };
        let mut status = Status::unavailable(format!(
            "{what}; try again in {} s",
            retry_secs(busy.retry_after)
        ));
        let ms = u64::try_from(busy.retry_after.as_millis()).unwrap_or(u64::MAX);
        if let Ok(value) = ms.to_string().parse() {
            status.metadata_mut().insert(RETRY_PUSHBACK_KEY, value);
        }
        status
    }
}

/// How long after `now` a session due at `deadline` is gone: expired sessions are
/// removed every [`super::EXPIRY_INTERVAL`], so up to that much after it.
fn freed_by(deadline: Option<Time>, now: Time) -> Duration {
    deadline.map_or(Duration::ZERO, |t| t.saturating_since(now)) + super::EXPIRY_INTERVAL
}

/// `retry_after` in whole seconds, rounded up, at least 1 (`Retry-After` counts
/// seconds, RFC 9110 §10.2.3).
pub fn retry_secs(retry_after: Duration) -> u64 {
    (retry_after.as_secs() + u64::from(retry_after.subsec_nanos() > 0)).max(1)
}

/// What [`Pending`] has counted since the node started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PendingStats {
    /// Sessions refused at the node's cap.
    pub refused_node: u64,
    /// Sessions refused at an address's cap.
    pub refused_address: u64,
    /// Sessions removed for not connecting within the setup timeout.
    pub timed_out: u64,
}

/// The sessions that have not connected, by deadline and by address.
#[derive(Debug, Default)]
pub struct Pending {
    limits: PendingLimits,
    by_deadline: BTreeSet<(Time, PeerId)>,
    by_address: HashMap<AddressKey, Vec<PeerId>>,
    of_peer: HashMap<PeerId, (Time, Option<AddressKey>)>,
    stats: PendingStats,
}

impl Pending {
    /// No pending sessions, under `limits`.
    pub fn new(limits: PendingLimits) -> Pending {
        Pending {
            limits,
            ..Pending::default()
        }
    }

    /// The bounds in force.
    pub fn limits(&self) -> PendingLimits {
        self.limits
    }

    /// Sessions pending now.
    pub fn len(&self) -> usize {
        self.of_peer.len()
    }

    /// Whether none is pending.
    pub fn is_empty(&self) -> bool {
        self.of_peer.is_empty()
    }

    /// What was counted.
    pub fn stats(&self) -> PendingStats {
        self.stats
    }

    /// Whether a session from `from` may be admitted at `now`; a refusal is counted.
    pub fn check(&mut self, from: Option<IpAddr>, now: Time) -> Result<(), Busy> {
        if self.of_peer.len() >= self.limits.per_node {
            self.stats.refused_node += 1;
            let first = self.by_deadline.first().map(|(t, _)| *t);
            return Err(Busy {
                scope: Scope::Node,
                retry_after: freed_by(first, now),
            });
        }
        let Some(key) = from.map(AddressKey::of) else {
            return Ok(());
        };
        let peers = self.by_address.get(&key).map_or(&[][..], Vec::as_slice);
        if peers.len() >= self.limits.per_address {
            self.stats.refused_address += 1;
            let first = peers
                .iter()
                .filter_map(|p| self.of_peer.get(p).map(|(t, _)| *t))
                .min();
            return Err(Busy {
                scope: Scope::Address,
                retry_after: freed_by(first, now),
            });
        }
        Ok(())
    }

    /// Records `peer`, admitted at `now` from `from`, as pending (after a
    /// [`Pending::check`] that passed, under the same lock); a peer pending already
    /// keeps its deadline.
    pub fn add(&mut self, peer: PeerId, from: Option<IpAddr>, now: Time) {
        if self.of_peer.contains_key(&peer) {
            return;
        }
        let deadline = now + self.limits.setup_timeout;
        let key = from.map(AddressKey::of);
        self.of_peer.insert(peer, (deadline, key));
        self.by_deadline.insert((deadline, peer));
        if let Some(key) = key {
            self.by_address.entry(key).or_default().push(peer);
        }
    }

    /// `peer` connected or left: it no longer holds a pending slot. Returns when it
    /// was admitted, if it was pending.
    pub fn remove(&mut self, peer: PeerId) -> Option<Time> {
        let (deadline, key) = self.of_peer.remove(&peer)?;
        self.by_deadline.remove(&(deadline, peer));
        if let Some(key) = key
            && let Some(peers) = self.by_address.get_mut(&key)
        {
            peers.retain(|p| *p != peer);
            if peers.is_empty() {
                self.by_address.remove(&key);
            }
        }
        Some(deadline - self.limits.setup_timeout)
    }

    /// Takes out every session whose deadline is at or before `now`, counting each
    /// as timed out; returns them, earliest first.
    pub fn expire(&mut self, now: Time) -> Vec<PeerId> {
        let mut due = Vec::new();
        while let Some(&(deadline, peer)) = self.by_deadline.first() {
            if deadline > now {
                break;
            }
            // Taken off the front first: each turn shortens the set.
            self.by_deadline.pop_first();
            self.remove(peer);
            self.stats.timed_out += 1;
            due.push(peer);
        }
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn limits(per_node: usize, per_address: usize) -> PendingLimits {
        PendingLimits {
            per_node,
            per_address,
            setup_timeout: Duration::from_secs(30),
        }
    }

    fn at(secs: u64) -> Time {
        Time::ZERO + Duration::from_secs(secs)
    }

    const A: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1));
    const B: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 2));

    #[test]
    fn the_address_cap_refuses_one_address_and_not_another() {
        let mut p = Pending::new(limits(10, 2));
        for (i, t) in [(1, 0), (2, 5)] {
            p.check(Some(A), at(t)).expect("under the cap");
            p.add(PeerId(i), Some(A), at(t));
        }
        let busy = p.check(Some(A), at(10)).expect_err("A is at its cap");
        assert_eq!(busy.scope, Scope::Address);
        // The first of A's sessions times out at 30 s, and is removed within the
        // second after.
        assert_eq!(
            busy.retry_after,
            Duration::from_secs(20) + super::super::EXPIRY_INTERVAL
        );
        p.check(Some(B), at(10)).expect("B is not");
        p.check(None, at(10))
            .expect("an unknown address counts for the node only");
        p.remove(PeerId(1));
        p.check(Some(A), at(10))
            .expect("a connected session frees its slot");
        assert_eq!(p.stats().refused_address, 1);
    }

    #[test]
    fn the_node_cap_counts_every_address_and_the_unknown() {
        let mut p = Pending::new(limits(3, 2));
        p.add(PeerId(1), Some(A), at(0));
        p.add(PeerId(2), Some(B), at(1));
        p.add(PeerId(3), None, at(2));
        let busy = p.check(Some(B), at(2)).expect_err("the node is at its cap");
        assert_eq!(busy.scope, Scope::Node);
        assert_eq!(
            busy.retry_after,
            Duration::from_secs(28) + super::super::EXPIRY_INTERVAL
        );
        assert_eq!(p.stats().refused_node, 1);
    }

    #[test]
    fn a_peer_added_again_keeps_its_deadline_and_expires_once() {
        let mut pending = Pending::new(limits(8, 8));
        pending.add(PeerId(1), Some(A), at(0));
        pending.add(PeerId(1), Some(A), at(5));
        assert_eq!(pending.len(), 1);
        let timeout = pending.limits().setup_timeout.as_secs();
        assert!(pending.expire(at(timeout - 1)).is_empty());
        assert_eq!(pending.expire(at(timeout + 10)), [PeerId(1)]);
        assert!(pending.is_empty());
        assert!(pending.expire(at(timeout + 20)).is_empty());
        assert_eq!(pending.stats().timed_out, 1);
    }

    #[test]
    fn sessions_expire_in_deadline_order_and_only_when_due() {
        let mut p = Pending::new(limits(10, 10));
        p.add(PeerId(1), Some(A), at(0));
        p.add(PeerId(2), Some(A), at(10));
        p.add(PeerId(3), Some(B), at(5));
        assert!(p.expire(at(29)).is_empty());
        assert_eq!(p.expire(at(35)), vec![PeerId(1), PeerId(3)]);
        assert_eq!(p.len(), 1);
        assert_eq!(p.stats().timed_out, 2);
        p.remove(PeerId(2));
        assert!(p.is_empty());
        assert!(p.by_address.is_empty(), "{:?}", p.by_address);
        assert!(p.by_deadline.is_empty());
    }

    #[test]
    fn an_ipv6_host_is_its_slash_64() {
        let one = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 1, 2, 0, 0, 0, 1));
        let other = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 1, 2, 0xffff, 1, 2, 3));
        let next = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 1, 3, 0, 0, 0, 1));
        assert_eq!(AddressKey::of(one), AddressKey::of(other));
        assert_ne!(AddressKey::of(one), AddressKey::of(next));
        let mapped = IpAddr::V6(Ipv4Addr::new(192, 0, 2, 1).to_ipv6_mapped());
        assert_eq!(AddressKey::of(mapped), AddressKey::of(A));
    }

    #[test]
    fn retry_after_is_whole_seconds_rounded_up() {
        assert_eq!(retry_secs(Duration::ZERO), 1);
        assert_eq!(retry_secs(Duration::from_millis(1)), 1);
        assert_eq!(retry_secs(Duration::from_secs(2)), 2);
        assert_eq!(retry_secs(Duration::from_millis(2001)), 3);
    }

    #[test]
    fn a_refusal_says_when_to_retry_in_its_metadata() {
        let status = Status::from(Busy {
            scope: Scope::Address,
            retry_after: Duration::from_millis(1500),
        });
        assert_eq!(status.code(), tonic::Code::Unavailable);
        assert_eq!(
            status
                .metadata()
                .get(RETRY_PUSHBACK_KEY)
                .map(|v| v.to_str().ok()),
            Some(Some("1500"))
        );
        assert!(
            status.message().contains("try again in 2 s"),
            "{}",
            status.message()
        );
    }
}
