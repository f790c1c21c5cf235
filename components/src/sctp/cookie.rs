//! The SCTP State Cookie (RFC 9260 §5.1.3, §5.1.5): everything needed to establish
//! an association, carried by the peer from our INIT ACK back to us in its COOKIE
//! ECHO, so that nothing is allocated for an INIT until its sender proves it can
//! receive. Integrity comes from an HMAC-SHA256 under a per-shard random key.
//!
//! Layout (big-endian), then a 32-byte HMAC over all of it:
//! `version(1) created_us(8) lifespan_ms(4) src_port(2) dst_port(2) my_vtag(4)
//!  peer_vtag(4) my_initial_tsn(4) peer_initial_tsn(4) peer_a_rwnd(4)
//!  outbound_streams(2) inbound_streams(2) flags(1) tie_tags(8)`.

use std::time::Duration;

use crate::sctp::Tsn;
use crate::time::Time;
use bytes::{BufMut, BytesMut};
use ring::hmac;

const VERSION: u8 = 2;
const BODY_LEN: usize = 1 + 8 + 4 + 2 + 2 + 4 + 4 + 4 + 4 + 4 + 2 + 2 + 1 + 8;
const MAC_LEN: usize = 32;
/// The length of every cookie shoal makes.
pub const COOKIE_LEN: usize = BODY_LEN + MAC_LEN;
/// RFC 9260 §16: Valid.Cookie.Life is 60 s.
pub const VALID_COOKIE_LIFE: Duration = Duration::from_secs(60);

const FLAG_FORWARD_TSN: u8 = 1;
const FLAG_RECONFIG: u8 = 2;
/// Cookie flag: the peer accepts zero checksums with the DTLS method.
const FLAG_ZERO_CHECKSUM: u8 = 4;

/// What a cookie carries: the association as the INIT and our INIT ACK set it up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CookieContents {
    /// When the cookie was made (the shard's clock).
    pub created: Time,
    /// How long it stays valid.
    pub lifespan: Duration,
    /// Our SCTP port.
    pub src_port: u16,
    /// The peer's SCTP port.
    pub dst_port: u16,
    /// Our verification tag: the Initiate Tag of our INIT ACK.
    pub my_vtag: u32,
    /// The peer's verification tag: the Initiate Tag of its INIT.
    pub peer_vtag: u32,
    /// The Initial TSN of our INIT ACK.
    pub my_initial_tsn: Tsn,
    /// The Initial TSN of the peer's INIT.
    pub peer_initial_tsn: Tsn,
    /// The peer's advertised receiver window.
    pub peer_a_rwnd: u32,
    /// Streams we may send on (min of our wish and the peer's inbound).
    pub outbound_streams: u16,
    /// Streams the peer may send on.
    pub inbound_streams: u16,
    /// The peer supports FORWARD TSN (RFC 3758).
    pub peer_forward_tsn: bool,
    /// The peer supports RE-CONFIG (RFC 6525).
    pub peer_reconfig: bool,
    /// The peer accepts zero checksums with the DTLS method (RFC 9653).
    pub peer_zero_checksum: bool,
    /// The Tie-Tags of the association that existed when the INIT came (RFC 9260
    /// §5.2.2: a 64-bit random nonce, the Local-Tie-Tag and the Peer's-Tie-Tag); 0
    /// when none did. A COOKIE ECHO carrying the existing association's Tie-Tags
    /// but other Verification Tags is the peer restarting (§5.2.4 A).
    pub tie_tags: u64,
}

/// Why a COOKIE ECHO was not accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CookieError {
    /// Wrong length or version: not a cookie of ours. Discard silently (§5.1.5).
    #[error("not a state cookie of ours")]
    Malformed,
    /// The MAC does not verify. Discard silently, with any DATA (§5.1.5 step 2).
    #[error("state cookie MAC does not verify")]
    BadMac,
    /// Authentic but older than its lifespan: answer with a Stale Cookie error
    /// (§5.1.5 step 4) giving the measure of staleness in microseconds, unless the
    /// tags match the existing association (§5.2.4 case E). The contents are
    /// authentic, so the caller can check ports and tags (step 3) and address the
    /// error.
    #[error("state cookie is stale by {staleness_us} µs")]
    Stale {
        /// How long past its lifespan, in microseconds.
        staleness_us: u64,
        /// What the cookie carries.
        contents: CookieContents,
    },
}

/// The shard's secret for cookie MACs.
pub struct CookieKey(hmac::Key);

impl CookieKey {
    /// A key from 32 secret bytes (the shard draws them from its generator).
    pub fn new(secret: &[u8; 32]) -> CookieKey {
        CookieKey(hmac::Key::new(hmac::HMAC_SHA256, secret))
    }

    /// Appends the cookie for `c` to `out` (exactly [`COOKIE_LEN`] bytes).
    pub fn write(&self, c: &CookieContents, out: &mut BytesMut) {
        let start = out.len();
        out.reserve(COOKIE_LEN);
        out.put_u8(VERSION);
        out.put_u64(c.created.as_micros());
        out.put_u32(u32::try_from(c.lifespan.as_millis()).unwrap_or(u32::MAX));
        out.put_u16(c.src_port);
        out.put_u16(c.dst_port);
        out.put_u32(c.my_vtag);
        out.put_u32(c.peer_vtag);
        out.put_u32(c.my_initial_tsn.0);
        out.put_u32(c.peer_initial_tsn.0);
        out.put_u32(c.peer_a_rwnd);
        out.put_u16(c.outbound_streams);
        out.put_u16(c.inbound_streams);
        let mut flags = 0;
        if c.peer_forward_tsn {
            flags |= FLAG_FORWARD_TSN;
        }
        if c.peer_reconfig {
            flags |= FLAG_RECONFIG;
        }
        if c.peer_zero_checksum {
            flags |= FLAG_ZERO_CHECKSUM;
        }
        out.put_u8(flags);
        out.put_u64(c.tie_tags);
        let tag = hmac::sign(&self.0, &out[start..]);
        out.put_slice(tag.as_ref());
    }

    /// Authenticates a cookie from a COOKIE ECHO and checks its age against `now`
    /// (RFC 9260 §5.1.5 steps 1, 2 and 4; the caller compares ports and tag, step 3).
    pub fn read(&self, cookie: &[u8], now: Time) -> Result<CookieContents, CookieError> {
        if cookie.len() != COOKIE_LEN {
            return Err(CookieError::Malformed);
        }
        let (body, mac) = cookie.split_at(BODY_LEN);
        hmac::verify(&self.0, body, mac).map_err(|_| CookieError::BadMac)?;
        let mut r = Reader(body);
        if r.u8() != VERSION {
            return Err(CookieError::Malformed);
        }
        let created = Time::from_micros(r.u64());
        let lifespan = Duration::from_millis(u64::from(r.u32()));
        let c = CookieContents {
            created,
            lifespan,
            src_port: r.u16(),
            dst_port: r.u16(),
            my_vtag: r.u32(),
            peer_vtag: r.u32(),
            my_initial_tsn: Tsn(r.u32()),
            peer_initial_tsn: Tsn(r.u32()),
            peer_a_rwnd: r.u32(),
            outbound_streams: r.u16(),
            inbound_streams: r.u16(),
            peer_forward_tsn: false,
            peer_reconfig: false,
            peer_zero_checksum: false,
            tie_tags: 0,
        };
        let flags = r.u8();
        let c = CookieContents {
            peer_forward_tsn: flags & FLAG_FORWARD_TSN != 0,
            peer_reconfig: flags & FLAG_RECONFIG != 0,
            peer_zero_checksum: flags & FLAG_ZERO_CHECKSUM != 0,
            tie_tags: r.u64(),
            ..c
        };
        let expires = created + lifespan;
        if now > expires {
            return Err(CookieError::Stale {
                staleness_us: u64::try_from(now.saturating_since(expires).as_micros())
                    .unwrap_or(u64::MAX),
                contents: c,
            });
        }
        Ok(c)
    }
}

/// Reads big-endian fields from a slice whose length was checked beforehand.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        if let Some((head, rest)) = self.0.split_at_checked(N) {
            out.copy_from_slice(head);
            self.0 = rest;
        }
        out
    }
    fn u8(&mut self) -> u8 {
        self.take::<1>()[0]
    }
    fn u16(&mut self) -> u16 {
        u16::from_be_bytes(self.take())
    }
    fn u32(&mut self) -> u32 {
        u32::from_be_bytes(self.take())
    }
    fn u64(&mut self) -> u64 {
        u64::from_be_bytes(self.take())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn contents() -> CookieContents {
        CookieContents {
            created: Time::from_millis(1_000),
            lifespan: VALID_COOKIE_LIFE,
            src_port: 5000,
            dst_port: 5000,
            my_vtag: 0xdead_beef,
            peer_vtag: 0x0102_0304,
            my_initial_tsn: Tsn(u32::MAX - 3),
            peer_initial_tsn: Tsn(7),
            peer_a_rwnd: 1 << 20,
            outbound_streams: 1024,
            inbound_streams: 65535,
            peer_forward_tsn: true,
            peer_reconfig: false,
            peer_zero_checksum: true,
            tie_tags: 0x0a0b_0c0d_1122_3344,
        }
    }

    #[test]
    fn round_trip_and_age() {
        let key = CookieKey::new(&[7; 32]);
        let mut buf = BytesMut::new();
        key.write(&contents(), &mut buf);
        assert_eq!(buf.len(), COOKIE_LEN);
        assert_eq!(key.read(&buf, Time::from_millis(2_000)), Ok(contents()));
        // §5.1.5 step 4: past its lifespan it is stale, by how much is reported.
        let late = Time::from_millis(1_000 + 60_000 + 5);
        assert_eq!(
            key.read(&buf, late),
            Err(CookieError::Stale {
                staleness_us: 5_000,
                contents: contents()
            })
        );
    }

    #[test]
    fn tampering_and_other_keys_are_refused() {
        let key = CookieKey::new(&[7; 32]);
        let mut buf = BytesMut::new();
        key.write(&contents(), &mut buf);
        for i in 0..buf.len() {
            let mut bad = buf.clone();
            bad[i] ^= 0x40;
            assert_eq!(
                key.read(&bad, Time::from_millis(2_000)),
                Err(CookieError::BadMac),
                "byte {i}"
            );
        }
        let other = CookieKey::new(&[8; 32]);
        assert_eq!(
            other.read(&buf, Time::from_millis(2_000)),
            Err(CookieError::BadMac)
        );
        assert_eq!(
            key.read(&buf[..COOKIE_LEN - 1], Time::ZERO),
            Err(CookieError::Malformed)
        );
        assert_eq!(key.read(&[], Time::ZERO), Err(CookieError::Malformed));
    }
}
