//! The bounds on the control plane's connections and the count of what they
//! refused: the caps on connections per client address and in all
//! ([`AddressTable`], whose [`Slot`] a connection holds while its socket lives), the
//! timeouts [`super::listen`] enforces ([`ConnectionLimits`]), and the counters by
//! [`Limit`] that GetNodeInfo reports as `connections_refused`.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv6Addr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::oneshot;

/// Default `--http-header-timeout`, seconds.
pub const DEFAULT_HEADER_TIMEOUT_SECS: u64 = 10;
/// Default `--idle-timeout`, seconds.
pub const DEFAULT_IDLE_TIMEOUT_SECS: u64 = 60;
/// Default `--tls-handshake-timeout`, seconds.
pub const DEFAULT_TLS_HANDSHAKE_TIMEOUT_SECS: u64 = 10;
/// Default `--max-connections-per-address`: a NAT'd office holds a WebSocket per
/// participant behind one address.
pub const DEFAULT_MAX_CONNECTIONS_PER_ADDRESS: usize = 512;
/// Default `--max-connections`.
pub const DEFAULT_MAX_CONNECTIONS: usize = 16_384;
/// Default `--max-tls-handshakes`: a handshake takes a round trip or two and some
/// public-key work, so this many at once is a burst of thousands a second.
pub const DEFAULT_MAX_TLS_HANDSHAKES: usize = 256;
/// Default `--max-tls-handshakes-per-address`: a browser opens a handful of
/// connections at once, so a NAT'd office starting a meeting together stays under
/// it, while one address cannot churn the node's handshakes (see [`Handshakes`]).
pub const DEFAULT_MAX_TLS_HANDSHAKES_PER_ADDRESS: usize = 64;

/// The bounds on the listeners' connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Connections one client address holds at once, both listeners together.
    pub per_address: usize,
    /// Connections held at once in all.
    pub total: usize,
    /// How long a request head (HTTP/1.1) or a first request (HTTP/2) may take.
    pub header_timeout: Duration,
    /// How long a connection may stay without a request in flight (HTTP/1.1) or a
    /// stream open (HTTP/2); also the `/signal` WebSocket's silence limit.
    pub idle_timeout: Duration,
    /// How long a TLS handshake may take.
    pub tls_handshake_timeout: Duration,
    /// TLS handshakes under way at once, both listeners together.
    pub tls_handshakes: usize,
    /// TLS handshakes under way at once from one client address.
    pub tls_handshakes_per_address: usize,
    /// Bytes of an HTTP/1.1 request head (its read buffer) or an HTTP/2 header list.
    pub head_bytes: usize,
}

/// Default of `--max-request-head-bytes`: browsers' request heads take a few KiB.
/// It is also the most an HTTP/1.1 connection buffers (hyper's own default is about
/// 400 KB, which 16 384 slow clients would turn into gigabytes).
pub const DEFAULT_MAX_REQUEST_HEAD_BYTES: usize = 64 * 1024;

impl Default for ConnectionLimits {
    fn default() -> ConnectionLimits {
        ConnectionLimits {
            per_address: DEFAULT_MAX_CONNECTIONS_PER_ADDRESS,
            total: DEFAULT_MAX_CONNECTIONS,
            header_timeout: Duration::from_secs(DEFAULT_HEADER_TIMEOUT_SECS),
            idle_timeout: Duration::from_secs(DEFAULT_IDLE_TIMEOUT_SECS),
            tls_handshake_timeout: Duration::from_secs(DEFAULT_TLS_HANDSHAKE_TIMEOUT_SECS),
            tls_handshakes: DEFAULT_MAX_TLS_HANDSHAKES,
            tls_handshakes_per_address: DEFAULT_MAX_TLS_HANDSHAKES_PER_ADDRESS,
            head_bytes: DEFAULT_MAX_REQUEST_HEAD_BYTES,
        }
    }
}

/// The limit a connection (or a `/signal` upgrade) was refused or cut off for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    /// Its address held `--max-connections-per-address` already (closed at accept).
    PerAddress,
    /// The listeners held `--max-connections` already (closed at accept).
    Total,
    /// Its TLS handshake failed or took longer than `--tls-handshake-timeout`.
    TlsHandshake,
    /// Its address had `--max-tls-handshakes-per-address` handshakes under way
    /// already (closed before its handshake).
    TlsHandshakesPerAddress,
    /// Its handshake was the oldest under way when `--max-tls-handshakes` were and
    /// another connection came: let go to make room.
    TlsHandshakeEvicted,
    /// A `SignalService` stream went on unread after its session ended: its
    /// connection was cut (see `super::signal`).
    StalledStream,
    /// HTTP/1.1: no complete request head within `--http-header-timeout`.
    HeaderTimeout,
    /// HTTP/2: no request within `--http-header-timeout`.
    NoRequest,
    /// No request (HTTP/1.1) or stream (HTTP/2) for `--idle-timeout`.
    Idle,
    /// A `/signal` WebSocket with no frame from the client for `--idle-timeout`.
    SignalIdle,
    /// A `/signal` upgrade from an origin not in `--allowed-origins` (403).
    Origin,
}

impl Limit {
    /// Every limit, in counting order.
    pub const ALL: [Limit; 11] = [
        Limit::PerAddress,
        Limit::Total,
        Limit::TlsHandshake,
        Limit::TlsHandshakesPerAddress,
        Limit::TlsHandshakeEvicted,
        Limit::StalledStream,
        Limit::HeaderTimeout,
        Limit::NoRequest,
        Limit::Idle,
        Limit::SignalIdle,
        Limit::Origin,
    ];

    /// The limit's name in counts.
    pub fn name(self) -> &'static str {
        match self {
            Limit::PerAddress => "per_address",
            Limit::Total => "total",
            Limit::TlsHandshake => "tls_handshake",
            Limit::TlsHandshakesPerAddress => "tls_handshakes_per_address",
            Limit::TlsHandshakeEvicted => "tls_handshake_evicted",
            Limit::StalledStream => "stalled_stream",
            Limit::HeaderTimeout => "header_timeout",
            Limit::NoRequest => "no_request",
            Limit::Idle => "idle",
            Limit::SignalIdle => "signal_idle",
            Limit::Origin => "origin",
        }
    }
}

/// How many connections each limit refused or cut off.
#[derive(Debug, Default)]
pub struct LimitCounters {
    counts: [AtomicU64; Limit::ALL.len()],
}

impl LimitCounters {
    /// Counts one for `limit`.
    pub fn count(&self, limit: Limit) {
        // The discriminants are the positions in `Limit::ALL`.
        self.counts[limit as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// How many connections `limit` refused or cut off so far.
    pub fn count_of(&self, limit: Limit) -> u64 {
        self.counts[limit as usize].load(Ordering::Relaxed)
    }

    /// The counts by limit name (limits never hit are left out).
    pub fn counts(&self) -> BTreeMap<String, u64> {
        Limit::ALL
            .iter()
            .zip(&self.counts)
            .map(|(l, n)| (l.name().to_owned(), n.load(Ordering::Relaxed)))
            .filter(|(_, n)| *n > 0)
            .collect()
    }
}

/// The address a client is counted under: an IPv4 address (an IPv4-mapped IPv6 one
/// too) as it is, an IPv6 address by its /64, the prefix one host or LAN is given
/// (RFC 4291 §2.5.1's interface identifiers are 64 bits).
pub fn address_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & !u128::from(u64::MAX))),
        },
    }
}

/// The connections held, by client address and in all, within their caps.
#[derive(Debug)]
pub struct AddressTable {
    per_address: usize,
    total: usize,
    held: Mutex<Held>,
}

#[derive(Debug, Default)]
struct Held {
    by_address: HashMap<IpAddr, usize>,
    total: usize,
}

impl AddressTable {
    /// A table allowing `per_address` connections per address and `total` in all.
    pub fn new(per_address: usize, total: usize) -> Arc<AddressTable> {
        Arc::new(AddressTable {
            per_address,
            total,
            held: Mutex::new(Held::default()),
        })
    }

    /// A slot for a connection from `ip`, or the cap it would break.
    pub fn take(self: &Arc<Self>, ip: IpAddr) -> Result<Slot, Limit> {
        let key = address_key(ip);
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        if held.total >= self.total {
            return Err(Limit::Total);
        }
        let n = held.by_address.entry(key).or_insert(0);
        if *n >= self.per_address {
            return Err(Limit::PerAddress);
        }
        *n += 1;
        held.total += 1;
        Ok(Slot {
            table: self.clone(),
            key,
        })
    }

    /// Connections held now: from `ip`'s address, and in all.
    pub fn held(&self, ip: IpAddr) -> (usize, usize) {
        let held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let n = held.by_address.get(&address_key(ip)).copied();
        (n.unwrap_or(0), held.total)
    }
}

/// The TLS handshakes under way, by client address and in all. An address past its
/// cap is refused; at the node's cap the oldest handshake under way is let go to
/// make room. A client's handshake takes a round trip or two and a stranger's held
/// open takes the whole timeout, so the oldest is almost always a stranger's, and
/// holding the pool takes a stranger a new connection per handshake time rather
/// than one per timeout.
#[derive(Debug)]
pub struct Handshakes {
    per_address: usize,
    total: usize,
    state: Mutex<HandshakeState>,
}

#[derive(Debug, Default)]
struct HandshakeState {
    by_address: HashMap<IpAddr, usize>,
    /// By start order: the address and what lets the handshake go.
    under_way: BTreeMap<u64, (IpAddr, oneshot::Sender<()>)>,
    next: u64,
}

impl Handshakes {
    /// At most `per_address` handshakes under way per address and `total` in all.
    pub fn new(per_address: usize, total: usize) -> Arc<Handshakes> {
        Arc::new(Handshakes {
            per_address,
            total,
            state: Mutex::new(HandshakeState::default()),
        })
    }

    /// A handshake from `ip` starts (letting the oldest go if all are taken), or
    /// [`Limit::TlsHandshakesPerAddress`].
    pub fn start(self: &Arc<Self>, ip: IpAddr) -> Result<Handshake, Limit> {
        let key = address_key(ip);
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.by_address.get(&key).copied().unwrap_or(0) >= self.per_address {
            return Err(Limit::TlsHandshakesPerAddress);
        }
        if state.under_way.len() >= self.total
            && let Some((_, (oldest, let_go))) = state.under_way.pop_first()
        {
            state.release(oldest);
            // Its task may have ended already; then there is nothing to tell.
            let _ = let_go.send(());
        }
        let (let_go, evicted) = oneshot::channel();
        let id = state.next;
        state.next += 1;
        state.under_way.insert(id, (key, let_go));
        *state.by_address.entry(key).or_insert(0) += 1;
        Ok(Handshake {
            table: self.clone(),
            id,
            evicted,
        })
    }

    /// Handshakes under way now: from `ip`'s address, and in all.
    pub fn under_way(&self, ip: IpAddr) -> (usize, usize) {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let n = state.by_address.get(&address_key(ip)).copied();
        (n.unwrap_or(0), state.under_way.len())
    }
}

impl HandshakeState {
    fn release(&mut self, key: IpAddr) {
        count_down(&mut self.by_address, key);
    }
}

/// One less held by `key`'s address; an address that holds none is forgotten.
fn count_down(by_address: &mut HashMap<IpAddr, usize>, key: IpAddr) {
    if let Some(n) = by_address.get_mut(&key) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            by_address.remove(&key);
        }
    }
}

/// A TLS handshake under way, given back when dropped.
#[derive(Debug)]
pub struct Handshake {
    table: Arc<Handshakes>,
    id: u64,
    /// Resolves when the handshake was let go to make room for a newer one.
    pub evicted: oneshot::Receiver<()>,
}

impl Drop for Handshake {
    fn drop(&mut self) {
        let mut state = self
            .table
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // Gone already if it was let go.
        if let Some((key, _)) = state.under_way.remove(&self.id) {
            state.release(key);
        }
    }
}

/// One connection's place in an [`AddressTable`], given back when dropped.
#[derive(Debug)]
pub struct Slot {
    table: Arc<AddressTable>,
    key: IpAddr,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut held = self
            .table
            .held
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        held.total = held.total.saturating_sub(1);
        count_down(&mut held.by_address, self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_capped_per_address_and_in_all_and_given_back() {
        let table = AddressTable::new(2, 3);
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "192.0.2.2".parse().unwrap();
        let a1 = table.take(a).unwrap();
        let _a2 = table.take(a).unwrap();
        assert_eq!(table.take(a).unwrap_err(), Limit::PerAddress);
        let _b1 = table.take(b).unwrap();
        assert_eq!(table.take(b).unwrap_err(), Limit::Total);
        assert_eq!(table.held(a), (2, 3));
        drop(a1);
        assert_eq!(table.held(a), (1, 2));
        let _b2 = table.take(b).unwrap();
        assert_eq!(
            table.take("192.0.2.3".parse().unwrap()).unwrap_err(),
            Limit::Total
        );
    }

    #[test]
    fn handshakes_are_capped_per_address_and_the_oldest_makes_room() {
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "192.0.2.2".parse().unwrap();
        let table = Handshakes::new(2, 3);
        let mut first = table.start(a).unwrap();
        let second = table.start(a).unwrap();
        assert_eq!(table.start(a).unwrap_err(), Limit::TlsHandshakesPerAddress);
        let third = table.start(b).unwrap();
        assert_eq!(table.under_way(a), (2, 3));
        // Full: the next lets the oldest go, and `a` may start one again.
        let fourth = table.start(b).unwrap();
        assert!(first.evicted.try_recv().is_ok(), "the oldest was let go");
        assert_eq!(table.under_way(a), (1, 3));
        assert_eq!(table.under_way(b), (2, 3));
        drop(first);
        assert_eq!(table.under_way(a), (1, 3), "let go once, given back once");
        drop((second, third, fourth));
        assert_eq!(table.under_way(a), (0, 0));
        assert_eq!(table.under_way(b), (0, 0));
    }

    #[test]
    fn ipv6_addresses_count_by_their_64_and_mapped_ipv4_as_ipv4() {
        let key = |s: &str| address_key(s.parse().unwrap());
        assert_eq!(key("2001:db8:1:2:aaaa::1"), key("2001:db8:1:2:bbbb::2"));
        assert_ne!(key("2001:db8:1:2::1"), key("2001:db8:1:3::1"));
        assert_eq!(key("::ffff:192.0.2.7"), key("192.0.2.7"));
        assert_eq!(key("192.0.2.7").to_string(), "192.0.2.7");
        let table = AddressTable::new(1, 10);
        let _one = table.take("2001:db8::1".parse().unwrap()).unwrap();
        assert_eq!(
            table.take("2001:db8::2".parse().unwrap()).unwrap_err(),
            Limit::PerAddress
        );
    }

    #[test]
    fn counts_are_named_and_only_those_hit_are_listed() {
        let counters = LimitCounters::default();
        counters.count(Limit::Idle);
        counters.count(Limit::Idle);
        counters.count(Limit::Total);
        let counts = counters.counts();
        assert_eq!(counts.len(), 2);
        assert_eq!(counts["idle"], 2);
        assert_eq!(counts["total"], 1);
        for (i, limit) in Limit::ALL.iter().enumerate() {
            assert_eq!(*limit as usize, i);
        }
    }
}
