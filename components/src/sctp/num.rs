//! Newtypes for SCTP's numbers, so a TSN can never be mixed up with an SSN or a
//! stream id. TSNs and SSNs wrap: they compare with serial number arithmetic
//! (RFC 1982, as RFC 9260 §1.6 prescribes), never with `<` on the raw integer.

use std::cmp::Ordering;

/// Transmission Sequence Number (RFC 9260 §3.3.1), 32 bits, wrapping.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Tsn(pub u32);

/// Stream Sequence Number (RFC 9260 §3.3.1), 16 bits, wrapping, per stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Ssn(pub u16);

/// Stream identifier (RFC 9260 §3.3.1); a data channel is one stream (RFC 8831 §6.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct StreamId(pub u16);

/// Payload Protocol Identifier (RFC 9260 §3.3.1), values for WebRTC in RFC 8831 §8.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Ppid(pub u32);

impl Ppid {
    /// WebRTC DCEP (RFC 8832 §8.1).
    pub const DCEP: Ppid = Ppid(50);
    /// WebRTC String (RFC 8831 §8).
    pub const STRING: Ppid = Ppid(51);
    /// WebRTC Binary.
    pub const BINARY: Ppid = Ppid(53);
    /// WebRTC String Empty: a zero-length string message, sent with one 0 byte.
    pub const STRING_EMPTY: Ppid = Ppid(56);
    /// WebRTC Binary Empty: a zero-length binary message, sent with one 0 byte.
    pub const BINARY_EMPTY: Ppid = Ppid(57);
}

impl Tsn {
    /// The next TSN, wrapping.
    pub fn next(self) -> Tsn {
        Tsn(self.0.wrapping_add(1))
    }

    /// The previous TSN, wrapping.
    pub fn prev(self) -> Tsn {
        Tsn(self.0.wrapping_sub(1))
    }

    /// `self + n`, wrapping. (Not `ops::Add`: TSN arithmetic wraps, and a method
    /// name says so at the call site less surprisingly than `+` would.)
    #[allow(clippy::should_implement_trait)]
    pub fn add(self, n: u32) -> Tsn {
        Tsn(self.0.wrapping_add(n))
    }

    /// How far `self` is ahead of `base` (`self - base`, wrapping).
    pub fn distance_from(self, base: Tsn) -> u32 {
        self.0.wrapping_sub(base.0)
    }

    /// Serial-number comparison (RFC 1982 §3.2); `None` for the undefined case of
    /// numbers exactly 2^31 apart.
    pub fn serial_cmp(self, other: Tsn) -> Option<Ordering> {
        serial_cmp_u32(self.0, other.0)
    }

    /// `self` is after `other` in serial order.
    pub fn is_after(self, other: Tsn) -> bool {
        self.serial_cmp(other) == Some(Ordering::Greater)
    }

    /// `self` is `other` or after it.
    pub fn is_at_or_after(self, other: Tsn) -> bool {
        self == other || self.is_after(other)
    }
}

impl Ssn {
    /// The next SSN, wrapping.
    pub fn next(self) -> Ssn {
        Ssn(self.0.wrapping_add(1))
    }

    /// Serial-number comparison (RFC 1982 §3.2) over 16 bits.
    pub fn serial_cmp(self, other: Ssn) -> Option<Ordering> {
        let (a, b) = (self.0, other.0);
        if a == b {
            return Some(Ordering::Equal);
        }
        let d = b.wrapping_sub(a);
        match d.cmp(&0x8000) {
            Ordering::Less => Some(Ordering::Less),
            Ordering::Greater => Some(Ordering::Greater),
            Ordering::Equal => None,
        }
    }

    /// `self` is after `other` in serial order.
    pub fn is_after(self, other: Ssn) -> bool {
        self.serial_cmp(other) == Some(Ordering::Greater)
    }
}

fn serial_cmp_u32(a: u32, b: u32) -> Option<Ordering> {
    if a == b {
        return Some(Ordering::Equal);
    }
    let d = b.wrapping_sub(a);
    match d.cmp(&0x8000_0000) {
        Ordering::Less => Some(Ordering::Less),
        Ordering::Greater => Some(Ordering::Greater),
        Ordering::Equal => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serial_order_wraps() {
        assert!(Tsn(1).is_after(Tsn(0)));
        assert!(Tsn(0).is_after(Tsn(u32::MAX)));
        assert!(!Tsn(u32::MAX).is_after(Tsn(0)));
        assert_eq!(Tsn(0).serial_cmp(Tsn(0x8000_0000)), None);
        assert_eq!(Tsn(5).distance_from(Tsn(u32::MAX)), 6);
        assert!(Ssn(0).is_after(Ssn(u16::MAX)));
        assert!(Ssn(0x7fff).is_after(Ssn(0)));
        assert_eq!(Ssn(0).serial_cmp(Ssn(0x8000)), None);
        assert_eq!(Tsn(u32::MAX).next(), Tsn(0));
        assert_eq!(Tsn(0).prev(), Tsn(u32::MAX));
    }
}
