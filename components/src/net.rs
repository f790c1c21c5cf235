//! Datagrams and transport addresses: what crosses the sans-I/O boundary.

use std::net::SocketAddr;

use bytes::Bytes;

/// One UDP datagram seen from a shard: `local` is the shard's socket address, `remote`
/// the peer's. Incoming datagrams came from `remote` to `local`; outgoing ones go from
/// `local` to `remote`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Datagram {
    /// The shard-side address.
    pub local: SocketAddr,
    /// The far-side address.
    pub remote: SocketAddr,
    /// The UDP payload, shared rather than copied.
    pub payload: Bytes,
}

/// The UDP 5-tuple of a path between a shard socket and a peer (the protocol is always UDP).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FiveTuple {
    /// The shard-side address.
    pub local: SocketAddr,
    /// The far-side address.
    pub remote: SocketAddr,
}

impl FiveTuple {
    /// Whether a response that arrived on `arrived` answers a request sent on `self`
    /// with symmetric addresses (RFC 8445 §7.2.5.2.1). A request sent from a wildcard
    /// socket (`self.local` unspecified) names no source address, so the kernel chose
    /// one; the response's destination is that choice, and only its port is known
    /// in advance.
    pub fn answered_on(&self, arrived: &FiveTuple) -> bool {
        self.remote == arrived.remote
            && (self.local == arrived.local
                || (self.local.ip().is_unspecified() && self.local.port() == arrived.local.port()))
    }
}

impl Datagram {
    /// The 5-tuple this datagram travels on.
    pub fn five_tuple(&self) -> FiveTuple {
        FiveTuple {
            local: self.local,
            remote: self.remote,
        }
    }
}

/// The kind of a datagram by its first byte, RFC 7983 §7 (updating RFC 5764 §5.1.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PacketClass {
    /// 0..=3: STUN.
    Stun,
    /// 16..=19: ZRTP (never used by WebRTC; dropped).
    Zrtp,
    /// 20..=63: DTLS.
    Dtls,
    /// 64..=79: TURN channel data (shoal is not a TURN server; dropped).
    TurnChannel,
    /// 128..=191: RTP or RTCP.
    Rtp,
    /// Anything else, and the empty datagram: dropped.
    Unknown,
}

impl PacketClass {
    /// Classifies a datagram by its first byte (RFC 7983 §7).
    pub fn of(payload: &[u8]) -> PacketClass {
        match payload.first() {
            Some(0..=3) => PacketClass::Stun,
            Some(16..=19) => PacketClass::Zrtp,
            Some(20..=63) => PacketClass::Dtls,
            Some(64..=79) => PacketClass::TurnChannel,
            Some(128..=191) => PacketClass::Rtp,
            _ => PacketClass::Unknown,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc7983_ranges() {
        assert_eq!(PacketClass::of(&[]), PacketClass::Unknown);
        assert_eq!(PacketClass::of(&[0]), PacketClass::Stun);
        assert_eq!(PacketClass::of(&[3]), PacketClass::Stun);
        assert_eq!(PacketClass::of(&[4]), PacketClass::Unknown);
        assert_eq!(PacketClass::of(&[19]), PacketClass::Zrtp);
        assert_eq!(PacketClass::of(&[20]), PacketClass::Dtls);
        assert_eq!(PacketClass::of(&[63]), PacketClass::Dtls);
        assert_eq!(PacketClass::of(&[64]), PacketClass::TurnChannel);
        assert_eq!(PacketClass::of(&[80]), PacketClass::Unknown);
        assert_eq!(PacketClass::of(&[128]), PacketClass::Rtp);
        assert_eq!(PacketClass::of(&[191]), PacketClass::Rtp);
        assert_eq!(PacketClass::of(&[192]), PacketClass::Unknown);
    }
}
