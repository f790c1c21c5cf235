//! Which addresses a shard's sockets bind, and which its candidates announce.
//!
//! A shard binds one UDP socket per `--bind` address (at most one per family, all on
//! the shard's port) and hands clients a host candidate per address it announces
//! ([`candidates`]):
//!
//! - `--announce` given: exactly those addresses, each on the port of the shard's
//!   socket of its family (1:1 NAT, a container's published port, a cloud VM's
//!   public address);
//! - else a socket bound to a specific address announces that address;
//! - else (bound to `0.0.0.0` or `::`) it announces every usable address of its
//!   family on this host's interfaces ([`usable_interface_addresses`]), listed once
//!   at start-up: interfaces that are up and running; no link-local, multicast,
//!   unspecified, IPv6 site-local (fec0::/10) or IPv4-compatible (::/96) address
//!   (RFC 8445 §5.1.1.1 excludes the last two); loopback only where the host has no
//!   other address at all. Every one of them goes to every client, a container
//!   bridge's or a VPN's included: bind or announce specific addresses where that is
//!   not wanted.
//!
//! The order is the candidates' priority order, RFC 8421 §4's for dual-stack hosts:
//! "Implementations should prioritize IPv6 candidates by putting some of them first
//! in the intermingled checklist", a head start of `Hi = (N_4 + N_6) / N_4` of them,
//! after which the families alternate, so that a client whose path of one family is
//! broken still reaches the other early. `--prefer-family ipv4` gives IPv4 the head
//! start instead (RFC 8445 §5.2: "Dual-stack hosts SHOULD allow configuration whether
//! IPv4 or IPv6 is used for the default candidate"; the first candidate is the
//! default one). The answer gives each candidate a unique local preference in that
//! order (`shoal_components::sdp::host_priority`; RFC 8445 §5.1.2.1 makes them
//! unique, and refers dual-stack hosts to RFC 8421).
//!
//! Where shoal departs from a recommendation, on purpose:
//! - RFC 8445 §5.2 says a lite agent's host candidates should be at most one per
//!   family ("including more than one candidate from a particular IP address family
//!   is NOT RECOMMENDED"). A wildcard bind on a host with several interfaces
//!   announces each, because which of them a client can reach is what only its
//!   checks find out; bind or announce one address per family to keep to one.
//! - §5.2 also suggests RFC 6724's precedence as a dual-stack lite agent's local
//!   preference. Those values repeat within a family (every global IPv6 address is
//!   40), which §5.1.2.1's uniqueness rule forbids for several candidates, so the
//!   order above decides instead. It puts IPv6 first, as RFC 6724's table does for
//!   global IPv6 (40) over IPv4 (35), though the table ranks unique local IPv6
//!   (fc00::/7, 3) below IPv4; `--prefer-family ipv4` is the remedy there.
//! - §5.1.1.1 excludes loopback addresses from candidates; a wildcard bind on a host
//!   with no other address announces loopback all the same, so that clients on the
//!   host itself still reach it.

use std::io;
use std::net::{IpAddr, SocketAddr};

/// The most candidates a shard announces; beyond it, start-up fails and asks for
/// `--announce` (every address is a candidate in every answer and a pair a client
/// checks).
pub const MAX_ANNOUNCED: usize = 16;

/// An address family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Family {
    /// IPv4.
    Ipv4,
    /// IPv6.
    Ipv6,
}

impl Family {
    /// The family of `ip`.
    pub fn of(ip: IpAddr) -> Family {
        match ip {
            IpAddr::V4(_) => Family::Ipv4,
            IpAddr::V6(_) => Family::Ipv6,
        }
    }
}

impl std::fmt::Display for Family {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Family::Ipv4 => "ipv4",
            Family::Ipv6 => "ipv6",
        })
    }
}

/// Why the configured addresses cannot work.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AddressError {
    /// `--bind` names no address.
    #[error("--bind names no address")]
    NoBind,
    /// `--bind` names two addresses of one family.
    #[error("--bind {0} and {1}: at most one address per family (one socket each)")]
    TwoOfOneFamily(IpAddr, IpAddr),
    /// A bind address no socket can be bound to for clients.
    #[error("--bind {0}: not a unicast address")]
    BadBind(IpAddr),
    /// An announced address no client can send to.
    #[error("--announce {0}: not a unicast address a client can reach")]
    BadAnnounce(IpAddr),
    /// An address announced twice (RFC 8445 §5.2: zero or one candidate per
    /// address).
    #[error("--announce {0} is given twice")]
    Repeated(IpAddr),
    /// An announced address of a family no socket is bound for.
    #[error("--announce {0}: no --bind address of its family ({1}) to receive on")]
    NoSocketFor(IpAddr, Family),
    /// Nothing to announce.
    #[error(
        "no address to announce: the host has no usable interface address of a bound \
         family; give one with --announce"
    )]
    NothingToAnnounce,
    /// Too much to announce.
    #[error(
        "{0} addresses to announce, more than {MAX_ANNOUNCED}: choose them with --announce \
         or bind specific addresses"
    )]
    TooMany(usize),
}

/// Checks `--bind` and `--announce` against each other, before any socket exists.
///
/// # Errors
/// No bind address, two of one family, a multicast bind address, an announced
/// address that is unspecified, multicast or of a family with no bind address.
pub fn check(bind: &[IpAddr], announce: &[IpAddr]) -> Result<(), AddressError> {
    if bind.is_empty() {
        return Err(AddressError::NoBind);
    }
    for (i, &a) in bind.iter().enumerate() {
        if a.is_multicast() || a.to_canonical() != a {
            return Err(AddressError::BadBind(a));
        }
        if let Some(&b) = bind[..i].iter().find(|b| Family::of(**b) == Family::of(a)) {
            return Err(AddressError::TwoOfOneFamily(b, a));
        }
    }
    for (i, &a) in announce.iter().enumerate() {
        if a.is_unspecified() || a.is_multicast() || a.to_canonical() != a {
            return Err(AddressError::BadAnnounce(a));
        }
        if announce[..i].contains(&a) {
            return Err(AddressError::Repeated(a));
        }
        if !bind.iter().any(|b| Family::of(*b) == Family::of(a)) {
            return Err(AddressError::NoSocketFor(a, Family::of(a)));
        }
    }
    Ok(())
}

/// Whether `ip` is valid on one link only: 169.254.0.0/16 or fe80::/10.
fn is_link_local(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_link_local(),
        IpAddr::V6(v6) => v6.segments()[0] & 0xffc0 == 0xfe80,
    }
}

/// Whether `ip` is an IPv6 address RFC 8445 §5.1.1.1 keeps out of candidates:
/// site-local (fec0::/10, deprecated) or IPv4-compatible (::/96).
fn is_obsolete_ipv6(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(_) => false,
        IpAddr::V6(v6) => {
            let s = v6.segments();
            s[0] & 0xffc0 == 0xfec0
                || (s[..6] == [0; 6] && !v6.is_loopback() && !v6.is_unspecified())
        }
    }
}

/// The addresses of this host's interfaces that are up and running, in the order
/// the OS lists them.
///
/// # Errors
/// If the interfaces cannot be listed.
pub fn interface_addresses() -> io::Result<Vec<IpAddr>> {
    Ok(if_addrs::get_if_addrs()?
        .into_iter()
        .filter(if_addrs::Interface::is_oper_up)
        .map(|i| i.ip())
        .collect())
}

/// Of `addrs` (a host's interface addresses), those a client can be handed: no
/// unspecified, multicast, link-local (169.254.0.0/16, fe80::/10: valid on one link
/// only, and ambiguous without a zone), IPv4-mapped, IPv6 site-local or
/// IPv4-compatible address, each once, and loopback only when nothing else is left.
pub fn usable_interface_addresses(addrs: &[IpAddr]) -> Vec<IpAddr> {
    let mut usable: Vec<IpAddr> = Vec::new();
    for &a in addrs {
        let bad = a.is_unspecified()
            || a.is_multicast()
            || is_link_local(a)
            || is_obsolete_ipv6(a)
            || a.to_canonical() != a
            || usable.contains(&a);
        if !bad {
            usable.push(a);
        }
    }
    if usable.iter().any(|a| !a.is_loopback()) {
        usable.retain(|a| !a.is_loopback());
    }
    usable
}

/// A shard's candidates, in priority order: for each of its bound sockets
/// (`bound`, one per family), the addresses it announces (see the module docs), on
/// that socket's port; [`intermingle`]d with the `prefer` family ahead.
///
/// `interfaces` is [`usable_interface_addresses`]' answer, used for sockets bound to
/// an unspecified address when `announce` is empty.
///
/// # Errors
/// Nothing to announce, or more than [`MAX_ANNOUNCED`].
pub fn candidates(
    bound: &[SocketAddr],
    announce: &[IpAddr],
    interfaces: &[IpAddr],
    prefer: Family,
) -> Result<Vec<SocketAddr>, AddressError> {
    let mut preferred = Vec::new();
    let mut other = Vec::new();
    for socket in bound {
        let family = Family::of(socket.ip());
        let ips: Vec<IpAddr> = if !announce.is_empty() {
            announce
                .iter()
                .copied()
                .filter(|a| Family::of(*a) == family)
                .collect()
        } else if socket.ip().is_unspecified() {
            interfaces
                .iter()
                .copied()
                .filter(|a| Family::of(*a) == family)
                .collect()
        } else {
            vec![socket.ip()]
        };
        let list = if family == prefer {
            &mut preferred
        } else {
            &mut other
        };
        list.extend(ips.into_iter().map(|ip| SocketAddr::new(ip, socket.port())));
    }
    let total = preferred.len() + other.len();
    if total == 0 {
        return Err(AddressError::NothingToAnnounce);
    }
    if total > MAX_ANNOUNCED {
        return Err(AddressError::TooMany(total));
    }
    Ok(intermingle(preferred, other))
}

/// RFC 8421 §4's order of `preferred` and `other` (each already in its own order):
/// a head start of `Hi = (N_p + N_o) / N_o` preferred addresses ("If a host has two
/// IPv4 addresses and six IPv6 addresses, it will insert an IPv4 address after four
/// IPv6 addresses"), then one of each in turn, and what is left of either at the end.
pub fn intermingle<T>(preferred: Vec<T>, other: Vec<T>) -> Vec<T> {
    let head_start = match other.len() {
        0 => preferred.len(),
        n => (preferred.len() + n) / n,
    };
    let mut ordered = Vec::with_capacity(preferred.len() + other.len());
    let mut p = preferred.into_iter();
    let mut o = other.into_iter();
    ordered.extend(p.by_ref().take(head_start));
    loop {
        match (o.next(), p.next()) {
            (None, None) => return ordered,
            (a, b) => ordered.extend(a.into_iter().chain(b)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ips(list: &[&str]) -> Vec<IpAddr> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    fn addrs(list: &[&str]) -> Vec<SocketAddr> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    #[test]
    fn binds_and_announcements_are_checked() {
        assert_eq!(check(&[], &[]), Err(AddressError::NoBind));
        assert_eq!(check(&ips(&["0.0.0.0", "::"]), &[]), Ok(()));
        assert_eq!(
            check(&ips(&["0.0.0.0", "10.0.0.1"]), &[]),
            Err(AddressError::TwoOfOneFamily(
                "0.0.0.0".parse().unwrap(),
                "10.0.0.1".parse().unwrap()
            ))
        );
        assert!(matches!(
            check(&ips(&["224.0.0.1"]), &[]),
            Err(AddressError::BadBind(_))
        ));
        assert!(matches!(
            check(&ips(&["::ffff:10.0.0.1"]), &[]),
            Err(AddressError::BadBind(_))
        ));
        assert_eq!(check(&ips(&["10.0.0.1"]), &ips(&["203.0.113.9"])), Ok(()));
        assert_eq!(
            check(&ips(&["10.0.0.1"]), &ips(&["203.0.113.9", "203.0.113.9"])),
            Err(AddressError::Repeated("203.0.113.9".parse().unwrap()))
        );
        for bad in ["0.0.0.0", "::", "ff02::1", "::ffff:203.0.113.9"] {
            let err = check(&ips(&["10.0.0.1", "::"]), &ips(&[bad])).unwrap_err();
            assert!(matches!(err, AddressError::BadAnnounce(_)), "{bad}: {err}");
        }
        assert_eq!(
            check(&ips(&["10.0.0.1"]), &ips(&["2001:db8::9"])),
            Err(AddressError::NoSocketFor(
                "2001:db8::9".parse().unwrap(),
                Family::Ipv6
            ))
        );
    }

    #[test]
    fn interface_addresses_a_client_can_use() {
        let host = ips(&[
            "127.0.0.1",
            "10.1.0.2",
            "169.254.3.4",
            "::1",
            "fe80::1",
            "2001:db8::2",
            "10.1.0.2",
            "0.0.0.0",
            "fec0::7",
            "::10.1.0.9",
            "fd00::5",
        ]);
        assert_eq!(
            usable_interface_addresses(&host),
            ips(&["10.1.0.2", "2001:db8::2", "fd00::5"])
        );
        // Loopback only when nothing else is there.
        assert_eq!(
            usable_interface_addresses(&ips(&["127.0.0.1", "::1", "fe80::1"])),
            ips(&["127.0.0.1", "::1"])
        );
        assert_eq!(usable_interface_addresses(&[]), Vec::<IpAddr>::new());
    }

    #[test]
    fn a_specific_bind_announces_itself() {
        let c = candidates(&addrs(&["10.0.0.1:7100"]), &[], &[], Family::Ipv6).unwrap();
        assert_eq!(c, addrs(&["10.0.0.1:7100"]));
    }

    #[test]
    fn announced_addresses_replace_the_bound_ones_on_their_ports() {
        let bound = addrs(&["10.0.0.1:7100", "[fd00::1]:7100"]);
        let c = candidates(
            &bound,
            &ips(&["203.0.113.9", "2001:db8::9"]),
            &ips(&["10.9.9.9"]),
            Family::Ipv6,
        )
        .unwrap();
        assert_eq!(c, addrs(&["[2001:db8::9]:7100", "203.0.113.9:7100"]));
        // A family with no announced address has no candidate.
        let c = candidates(&bound, &ips(&["203.0.113.9"]), &[], Family::Ipv6).unwrap();
        assert_eq!(c, addrs(&["203.0.113.9:7100"]));
    }

    /// RFC 8421 §4's example: two IPv4 and six IPv6 addresses put an IPv4 address
    /// after four IPv6 ones (Hi = (2 + 6) / 2 = 4); then the families alternate.
    #[test]
    fn the_preferred_family_gets_rfc_8421s_head_start() {
        let v6: Vec<String> = (1..=6).map(|i| format!("6-{i}")).collect();
        let v4: Vec<String> = (1..=2).map(|i| format!("4-{i}")).collect();
        assert_eq!(
            intermingle(v6.clone(), v4.clone()),
            ["6-1", "6-2", "6-3", "6-4", "4-1", "6-5", "4-2", "6-6"]
        );
        // One of each: IPv6 first (Hi = 2, but there is one).
        assert_eq!(intermingle(vec!["6"], vec!["4"]), ["6", "4"]);
        // More of the other family: a head start of one, then alternation.
        assert_eq!(
            intermingle(vec!["6"], vec!["4-1", "4-2", "4-3"]),
            ["6", "4-1", "4-2", "4-3"]
        );
        assert_eq!(
            intermingle(vec!["6-1", "6-2"], vec!["4-1", "4-2", "4-3"]),
            ["6-1", "4-1", "6-2", "4-2", "4-3"]
        );
        assert_eq!(intermingle(v4.clone(), Vec::new()), v4);
        assert_eq!(intermingle(Vec::new(), v6.clone()), v6);
    }

    #[test]
    fn unspecified_binds_announce_the_interfaces_intermingled() {
        let bound = addrs(&["0.0.0.0:7101", "[::]:7101"]);
        let interfaces = ips(&["10.1.0.2", "10.2.0.2", "10.3.0.2", "fd01::2", "fd02::2"]);
        // Hi = (2 + 3) / 3 = 1.
        let v6_first = candidates(&bound, &[], &interfaces, Family::Ipv6).unwrap();
        assert_eq!(
            v6_first,
            addrs(&[
                "[fd01::2]:7101",
                "10.1.0.2:7101",
                "[fd02::2]:7101",
                "10.2.0.2:7101",
                "10.3.0.2:7101",
            ])
        );
        // Hi = (3 + 2) / 2 = 2.
        let v4_first = candidates(&bound, &[], &interfaces, Family::Ipv4).unwrap();
        assert_eq!(
            v4_first,
            addrs(&[
                "10.1.0.2:7101",
                "10.2.0.2:7101",
                "[fd01::2]:7101",
                "10.3.0.2:7101",
                "[fd02::2]:7101",
            ])
        );
        // Only the bound families.
        let v4_only = candidates(&bound[..1], &[], &interfaces, Family::Ipv6).unwrap();
        assert_eq!(
            v4_only,
            addrs(&["10.1.0.2:7101", "10.2.0.2:7101", "10.3.0.2:7101"])
        );
    }

    #[test]
    fn nothing_or_too_much_to_announce_is_refused() {
        let bound = addrs(&["[::]:7100"]);
        assert_eq!(
            candidates(&bound, &[], &ips(&["10.0.0.1"]), Family::Ipv6),
            Err(AddressError::NothingToAnnounce)
        );
        let many: Vec<IpAddr> = (1..=17u16)
            .map(|i| IpAddr::V6(std::net::Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, i)))
            .collect();
        assert_eq!(
            candidates(&bound, &[], &many, Family::Ipv6),
            Err(AddressError::TooMany(17))
        );
        assert_eq!(
            candidates(&bound, &[], &many[..16], Family::Ipv6).map(|c| c.len()),
            Ok(16)
        );
    }
}
