//! The SRTP parameters of each protection profile: tag lengths, session key lengths, the
//! bytes protection adds. The profile itself (`SrtpProfile`) is negotiated by DTLS
//! (`dtls::crypto`); this is what SRTP needs to know about it.

use super::SrtpError;
use crate::dtls::SrtpProfile;

/// Bytes of the SRTCP trailer word that holds the E flag and the SRTCP index (RFC 3711
/// §3.4; RFC 7714 §9.2 calls it the ESRTCP word).
pub const SRTCP_INDEX_LEN: usize = 4;

/// The HMAC-SHA1 tag of SRTP_AES128_CM_HMAC_SHA1_80: 80 bits for SRTP and SRTCP alike
/// (RFC 5764 §4.1.2; RFC 3711 §5.2 "n_tag ... 80").
const HMAC_SHA1_80_TAG_LEN: usize = 10;

/// The AES-GCM tag: RFC 7714 §14.2 profiles use the full 16 octets.
const GCM_TAG_LEN: usize = 16;

/// HMAC-SHA1's session authentication key: n_a = 160 bits (RFC 3711 §8.2, RFC 5764 §4.1.2).
pub(crate) const HMAC_SHA1_KEY_LEN: usize = 20;

impl SrtpProfile {
    /// Whether the profile is an AEAD one (RFC 7714): one AES-GCM pass encrypts and
    /// authenticates, and there is no separate authentication key.
    pub fn is_aead(self) -> bool {
        !matches!(self, Self::Aes128CmHmacSha1_80)
    }

    /// Bytes of authentication tag on an SRTP packet (and, for the profiles shoal
    /// speaks, on an SRTCP packet too).
    pub fn tag_len(self) -> usize {
        if self.is_aead() {
            GCM_TAG_LEN
        } else {
            HMAC_SHA1_80_TAG_LEN
        }
    }

    /// Bytes protection adds to an RTP packet: the tag. There is no MKI: shoal's DTLS
    /// offers and accepts only an empty srtp_mki (RFC 5764 §4.1.3).
    pub fn rtp_overhead(self) -> usize {
        self.tag_len()
    }

    /// Bytes protection adds to an RTCP packet: the E flag and SRTCP index word and the
    /// tag (RFC 3711 §3.4, RFC 7714 §9.2).
    pub fn rtcp_overhead(self) -> usize {
        SRTCP_INDEX_LEN + self.tag_len()
    }

    /// The session encryption key length: the master key length for every profile here
    /// (RFC 3711 §8.2 n_e = 128; RFC 7714 §12).
    pub fn session_key_len(self) -> usize {
        self.key_len()
    }

    /// The session salt length: 112 bits for AES-CM (RFC 3711 §8.2 n_s), 96 for AES-GCM
    /// (RFC 7714 §12).
    pub fn session_salt_len(self) -> usize {
        self.salt_len()
    }

    /// The session authentication key length: 160 bits for HMAC-SHA1, none for AEAD.
    pub fn session_auth_key_len(self) -> usize {
        if self.is_aead() { 0 } else { HMAC_SHA1_KEY_LEN }
    }
}

impl TryFrom<u16> for SrtpProfile {
    type Error = SrtpError;

    /// The profile with this use_srtp wire value (RFC 5764 §4.1.2, RFC 7714 §14.2).
    fn try_from(v: u16) -> Result<Self, SrtpError> {
        SrtpProfile::from_u16(v).ok_or(SrtpError::UnknownProfile(v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overheads() {
        let cm = SrtpProfile::Aes128CmHmacSha1_80;
        assert_eq!((cm.rtp_overhead(), cm.rtcp_overhead()), (10, 14));
        for p in [SrtpProfile::AeadAes128Gcm, SrtpProfile::AeadAes256Gcm] {
            assert_eq!((p.rtp_overhead(), p.rtcp_overhead()), (16, 20));
            assert_eq!(p.session_auth_key_len(), 0);
        }
        assert_eq!(
            SrtpProfile::try_from(0x0002),
            Err(SrtpError::UnknownProfile(2))
        );
        assert_eq!(
            SrtpProfile::try_from(0x0008),
            Ok(SrtpProfile::AeadAes256Gcm)
        );
    }
}
