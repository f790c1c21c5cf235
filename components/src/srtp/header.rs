//! Just enough of the RTP and RTCP headers to find what SRTP encrypts. The full wire
//! formats live in `shoal_components`; this stays private so SRTP depends on nothing but
//! the bytes it is handed.

use super::SrtpError;

/// The fixed RTP header (RFC 3550 §5.1): V, P, X, CC, M, PT, sequence number, timestamp,
/// SSRC.
pub(crate) const RTP_FIXED_HEADER_LEN: usize = 12;

/// What SRTCP leaves in the clear (RFC 3711 §3.4): the first RTCP header word and the
/// sender's SSRC.
pub(crate) const RTCP_CLEAR_LEN: usize = 8;

/// The version both RTP and RTCP carry in their first two bits (RFC 3550 §5.1, §6.4.1).
const VERSION: u8 = 2;

/// The RTP header's length, CSRC list and header extension included: SRTP encrypts what
/// follows it (RFC 3711 §3.1: the Encrypted Portion is the RTP payload, padding
/// included). Fails when the packet is not version 2 or ends inside its own header.
pub(crate) fn rtp_header_len(packet: &[u8]) -> Result<usize, SrtpError> {
    let Some(&first) = packet.first() else {
        return Err(SrtpError::TooShort {
            len: 0,
            needed: RTP_FIXED_HEADER_LEN,
        });
    };
    check_version(first)?;
    // RFC 3550 §5.1: CC, the number of 32-bit CSRC identifiers after the fixed header.
    let mut len = RTP_FIXED_HEADER_LEN + 4 * usize::from(first & 0x0F);
    // RFC 3550 §5.1 X bit, §5.3.1: the extension is a 16-bit profile field, a 16-bit
    // count of 32-bit words, and those words.
    if first & 0x10 != 0 {
        let words = packet
            .get(len + 2..len + 4)
            .map(|b| usize::from(u16::from_be_bytes([b[0], b[1]])))
            .ok_or(SrtpError::TooShort {
                len: packet.len(),
                needed: len + 4,
            })?;
        len += 4 + 4 * words;
    }
    if len > packet.len() {
        return Err(SrtpError::TooShort {
            len: packet.len(),
            needed: len,
        });
    }
    Ok(len)
}

/// Checks the RTCP version and that the clear part is present (RFC 3550 §6.4.1), and
/// returns the sender's SSRC, which keys the SRTCP context (RFC 3711 §3.2.3).
pub(crate) fn rtcp_ssrc(packet: &[u8]) -> Result<u32, SrtpError> {
    let clear = packet.get(..RTCP_CLEAR_LEN).ok_or(SrtpError::TooShort {
        len: packet.len(),
        needed: RTCP_CLEAR_LEN,
    })?;
    check_version(clear[0])?;
    Ok(u32::from_be_bytes([clear[4], clear[5], clear[6], clear[7]]))
}

/// The RTP sequence number and SSRC of a packet whose header length was checked.
pub(crate) fn rtp_seq_ssrc(header: &[u8; RTP_FIXED_HEADER_LEN]) -> (u16, u32) {
    (
        u16::from_be_bytes([header[2], header[3]]),
        u32::from_be_bytes([header[8], header[9], header[10], header[11]]),
    )
}

fn check_version(first: u8) -> Result<(), SrtpError> {
    match first >> 6 {
        VERSION => Ok(()),
        other => Err(SrtpError::BadVersion(other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_header_only() {
        let mut p = [0u8; 20];
        p[0] = 0x80;
        assert_eq!(rtp_header_len(&p), Ok(12));
    }

    #[test]
    fn csrcs_and_extension_are_header() {
        // CC = 2, X = 1, extension of 3 words.
        let mut p = vec![0u8; 12 + 8 + 4 + 12 + 5];
        p[0] = 0x80 | 0x10 | 2;
        p[20..24].copy_from_slice(&[0xBE, 0xDE, 0, 3]);
        assert_eq!(rtp_header_len(&p), Ok(12 + 8 + 4 + 12));
        // The same header with nothing after it is still a header.
        assert_eq!(rtp_header_len(&p[..36]), Ok(36));
    }

    #[test]
    fn header_running_past_the_packet_is_refused() {
        let mut p = [0u8; 16];
        p[0] = 0x80 | 3; // three CSRCs need 24 bytes
        assert_eq!(
            rtp_header_len(&p),
            Err(SrtpError::TooShort {
                len: 16,
                needed: 24
            })
        );
        let mut p = [0u8; 14];
        p[0] = 0x90; // extension header cut short
        assert_eq!(
            rtp_header_len(&p),
            Err(SrtpError::TooShort {
                len: 14,
                needed: 16
            })
        );
        let mut p = [0u8; 16];
        p[0] = 0x90;
        p[14..16].copy_from_slice(&[0xFF, 0xFF]); // 65535 words claimed
        assert!(matches!(
            rtp_header_len(&p),
            Err(SrtpError::TooShort { .. })
        ));
        assert_eq!(
            rtp_header_len(&[]),
            Err(SrtpError::TooShort { len: 0, needed: 12 })
        );
        assert_eq!(
            rtp_header_len(&[0x80; 11]),
            Err(SrtpError::TooShort {
                len: 11,
                needed: 12
            })
        );
    }

    #[test]
    fn version_must_be_two() {
        assert_eq!(rtp_header_len(&[0x40; 12]), Err(SrtpError::BadVersion(1)));
        assert_eq!(rtcp_ssrc(&[0xC0; 8]), Err(SrtpError::BadVersion(3)));
        assert_eq!(rtcp_ssrc(&[0x81, 200, 0, 1, 1, 2, 3, 4]), Ok(0x0102_0304));
        assert!(matches!(
            rtcp_ssrc(&[0x81; 7]),
            Err(SrtpError::TooShort { .. })
        ));
    }
}
