//! The two directions of one peer's SRTP: [`SrtpInbound`] unprotects what the peer sent,
//! [`SrtpOutbound`] protects what shoal sends it. Each holds one master key's transforms
//! for SRTP and SRTCP, shared by all SSRCs, and a bounded table of per-SSRC state
//! (rollover counter, highest index, replay list; SRTCP index), as RFC 3711 §3.2.1 and
//! §3.2.3 ask: "separate replay lists and packet counters for each stream (SSRC) MUST
//! still be maintained".

use crate::hash::FastMap;
use bytes::BytesMut;

use super::SrtpError;
use super::cipher::{GCM_TAG_LEN, Transform};
use super::header::{RTCP_CLEAR_LEN, rtcp_ssrc, rtp_header_len, rtp_seq_ssrc};
use super::kdf::SessionKeys;
use super::profile::SRTCP_INDEX_LEN;
use super::replay::{ReplayWindow, estimate_index};
use crate::dtls::SrtpProfile;

/// Packets the SRTP replay list remembers below the highest index (RFC 3711 §3.3.2: at
/// least 64). Video sends bursts of dozens of packets per frame and paths reorder them,
/// so the window is wide: 1024 packets is about a second of 8 Mbit/s video.
pub const SRTP_REPLAY_WINDOW: u64 = RtpWindow::SIZE;

/// Packets the SRTCP replay list remembers: RTCP is a few packets a second, so 128.
pub const SRTCP_REPLAY_WINDOW: u64 = RtcpWindow::SIZE;

type RtpWindow = ReplayWindow<16>;
type RtcpWindow = ReplayWindow<2>;

/// The largest SRTCP index (31 bits, RFC 3711 §3.4).
const SRTCP_INDEX_MAX: u32 = 0x7FFF_FFFF;

/// The E flag of the SRTCP index word: the packet is encrypted (RFC 3711 §3.4).
const E_FLAG: u32 = 0x8000_0000;

/// Bounds and policy of one context.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SrtpConfig {
    /// SSRCs a context tracks, counted separately for SRTP and SRTCP. A packet of one
    /// more SSRC fails with [`SrtpError::TooManySsrcs`]; [`SrtpInbound::forget_ssrc`]
    /// and [`SrtpOutbound::forget_ssrc`] make room. Each SRTP SSRC costs about 150
    /// bytes (its 1024-bit replay list), each SRTCP one under 40.
    pub max_ssrcs: usize,
    /// Let the sender protect an SRTP index it already protected (a retransmission of
    /// the identical packet without RTX). Off by default: under AES-GCM a repeated index
    /// with different contents reuses a nonce, which breaks confidentiality and
    /// authentication for the whole key.
    pub allow_repeated_tx: bool,
}

impl Default for SrtpConfig {
    fn default() -> Self {
        SrtpConfig {
            max_ssrcs: 128,
            allow_repeated_tx: false,
        }
    }
}

/// An unprotected SRTP packet: its plaintext is the first `len` bytes of the buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnprotectedRtp {
    /// Length of the RTP packet (header and payload; the tag is cut off).
    pub len: usize,
    /// Length of the RTP header, CSRCs and extension included: the payload starts here.
    pub header_len: usize,
    /// The packet's SSRC.
    pub ssrc: u32,
    /// The 48-bit packet index, `2^16 * ROC + SEQ` (RFC 3711 §3.3.1).
    pub index: u64,
}

impl UnprotectedRtp {
    /// The rollover counter the packet was sent under.
    pub fn roc(&self) -> u32 {
        (self.index >> 16) as u32
    }
}

/// An unprotected SRTCP packet: its plaintext is the first `len` bytes of the buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnprotectedRtcp {
    /// Length of the RTCP (compound) packet; the index word and tag are cut off.
    pub len: usize,
    /// The sender's SSRC (the first packet's, RFC 3711 §3.4).
    pub ssrc: u32,
    /// The 31-bit SRTCP index.
    pub index: u32,
    /// The E flag: whether the payload was encrypted (it may be sent authenticated only,
    /// RFC 3711 §3.4, RFC 7714 §9.3).
    pub encrypted: bool,
}

/// A growable byte buffer a packet can be protected at the end of, growing in place by
/// the SRTP trailer: `Vec<u8>` and `BytesMut`. Reserve capacity ahead (a datagram
/// buffer per tick) and protecting never allocates.
pub trait PacketBuf {
    /// Bytes in the buffer.
    fn len(&self) -> usize;
    /// Whether the buffer is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Grows (zero-filled) or shrinks the buffer to `len` bytes.
    fn resize_to(&mut self, len: usize);
    /// The buffer's bytes.
    fn bytes_mut(&mut self) -> &mut [u8];
}

impl PacketBuf for Vec<u8> {
    fn len(&self) -> usize {
        Vec::len(self)
    }
    fn resize_to(&mut self, len: usize) {
        self.resize(len, 0);
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        self
    }
}

impl PacketBuf for BytesMut {
    fn len(&self) -> usize {
        BytesMut::len(self)
    }
    fn resize_to(&mut self, len: usize) {
        self.resize(len, 0);
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        self
    }
}

/// One direction's keyed transforms.
struct Keyed {
    profile: SrtpProfile,
    rtp: Transform,
    rtcp: Transform,
}

impl Keyed {
    fn from_master(
        profile: SrtpProfile,
        master_key: &[u8],
        master_salt: &[u8],
    ) -> Result<Keyed, SrtpError> {
        Keyed::from_session(
            &SessionKeys::derive(profile, master_key, master_salt, false)?,
            &SessionKeys::derive(profile, master_key, master_salt, true)?,
        )
    }

    fn from_session(rtp: &SessionKeys, rtcp: &SessionKeys) -> Result<Keyed, SrtpError> {
        assert_eq!(
            rtp.profile, rtcp.profile,
            "SRTP and SRTCP session keys of one context share a profile"
        );
        Ok(Keyed {
            profile: rtp.profile,
            rtp: Transform::new(rtp)?,
            rtcp: Transform::new(rtcp)?,
        })
    }
}

/// The receiving direction: authenticates, replay-checks and decrypts in place what one
/// peer sent (RFC 3711 §3.3 receiver steps, §3.4).
pub struct SrtpInbound {
    keyed: Keyed,
    config: SrtpConfig,
    /// Per SSRC: the replay list, whose top is the highest index, so ROC and s_l too.
    rtp: FastMap<u32, RtpWindow>,
    /// Per sender SSRC: the SRTCP replay list.
    rtcp: FastMap<u32, RtcpWindow>,
}

impl SrtpInbound {
    /// A context for the peer's master key and salt (its write key of RFC 5764 §4.2).
    pub fn new(
        profile: SrtpProfile,
        master_key: &[u8],
        master_salt: &[u8],
        config: SrtpConfig,
    ) -> Result<SrtpInbound, SrtpError> {
        Ok(SrtpInbound::with_keyed(
            Keyed::from_master(profile, master_key, master_salt)?,
            config,
        ))
    }

    /// A context keyed with session keys directly, skipping key derivation (for test
    /// vectors that state session keys, such as RFC 7714 §16-17). `rtp` and `rtcp` must
    /// be of one profile.
    pub fn from_session_keys(
        rtp: &SessionKeys,
        rtcp: &SessionKeys,
        config: SrtpConfig,
    ) -> Result<SrtpInbound, SrtpError> {
        Ok(SrtpInbound::with_keyed(
            Keyed::from_session(rtp, rtcp)?,
            config,
        ))
    }

    fn with_keyed(keyed: Keyed, config: SrtpConfig) -> SrtpInbound {
        SrtpInbound {
            keyed,
            config,
            rtp: FastMap::default(),
            rtcp: FastMap::default(),
        }
    }

    /// The protection profile.
    pub fn profile(&self) -> SrtpProfile {
        self.keyed.profile
    }

    /// Unprotects the SRTP packet that fills `packet`, in place: on success the RTP
    /// packet is `packet[..len]` of the result.
    ///
    /// RFC 3711 §3.3: estimate the index (§3.3.1), refuse a replay (§3.3.2), verify the
    /// tag, decrypt, then update ROC, s_l and the replay list. A new SSRC's state is
    /// created only once its first packet has authenticated, so forged packets cannot
    /// fill the table; its first packet sets s_l and ROC 0 (§3.3.1).
    pub fn unprotect_rtp(&mut self, packet: &mut [u8]) -> Result<UnprotectedRtp, SrtpError> {
        let len = packet.len();
        let tag_len = self.keyed.profile.tag_len();
        let header_len = rtp_header_len(packet)?;
        let body_len = len
            .checked_sub(tag_len)
            .filter(|&b| b >= header_len)
            .ok_or(SrtpError::TooShort {
                len,
                needed: header_len + tag_len,
            })?;
        let (seq, ssrc) = seq_ssrc(packet)?;
        let index = match self.rtp.get(&ssrc) {
            Some(window) => {
                let index = estimate_index(window.top(), seq)?;
                window.check(index)?;
                index
            }
            None if self.rtp.len() >= self.config.max_ssrcs => {
                return Err(SrtpError::TooManySsrcs {
                    limit: self.config.max_ssrcs,
                });
            }
            None => u64::from(seq),
        };
        let roc = (index >> 16) as u32;
        match &self.keyed.rtp {
            Transform::CmHmac(t) => {
                let (body, tag) = split(packet, body_len)?;
                // RFC 3711 §4.2: the tag covers the Authenticated Portion || ROC.
                t.verify(body, &roc.to_be_bytes(), tag)?;
                let (_, payload) = split(body, header_len)?;
                t.apply_keystream(ssrc, index, payload);
            }
            Transform::Gcm(t) => {
                // RFC 7714 §8.2: the RTP header (CSRCs and extension too) is the AAD.
                let (header, sealed) = split(packet, header_len)?;
                t.open(t.rtp_nonce(ssrc, roc, seq), header, sealed)?;
            }
        }
        match self.rtp.get_mut(&ssrc) {
            Some(window) => window.accept(index),
            None => {
                self.rtp.insert(ssrc, RtpWindow::new(index));
            }
        }
        Ok(UnprotectedRtp {
            len: body_len,
            header_len,
            ssrc,
            index,
        })
    }

    /// Unprotects the SRTCP packet that fills `packet`, in place: on success the RTCP
    /// packet is `packet[..len]` of the result.
    ///
    /// RFC 3711 §3.4: the index comes from the packet, so there is no estimate; the
    /// replay list is per sender SSRC. With the E flag clear the packet is only
    /// authenticated (RFC 7714 §9.3 for AEAD).
    pub fn unprotect_rtcp(&mut self, packet: &mut [u8]) -> Result<UnprotectedRtcp, SrtpError> {
        let ssrc = rtcp_ssrc(packet)?;
        let len = packet.len();
        let tag_len = self.keyed.profile.tag_len();
        let needed = RTCP_CLEAR_LEN + SRTCP_INDEX_LEN + tag_len;
        if len < needed {
            return Err(SrtpError::TooShort { len, needed });
        }
        let plain_len = len - SRTCP_INDEX_LEN - tag_len;
        // The index word precedes the tag in RFC 3711 §3.4; AEAD puts the whole cipher
        // (tag included) first and the word last (RFC 7714 §9.2, §17).
        let word_at = if self.keyed.profile.is_aead() {
            len - SRTCP_INDEX_LEN
        } else {
            plain_len
        };
        let word = packet
            .get(word_at..word_at + SRTCP_INDEX_LEN)
            .and_then(|w| <[u8; 4]>::try_from(w).ok())
            .ok_or(SrtpError::TooShort { len, needed })?;
        let word_value = u32::from_be_bytes(word);
        let encrypted = word_value & E_FLAG != 0;
        let index = word_value & SRTCP_INDEX_MAX;
        match self.rtcp.get(&ssrc) {
            Some(window) => window.check(u64::from(index))?,
            None if self.rtcp.len() >= self.config.max_ssrcs => {
                return Err(SrtpError::TooManySsrcs {
                    limit: self.config.max_ssrcs,
                });
            }
            None => {}
        }
        match &self.keyed.rtcp {
            Transform::CmHmac(t) => {
                // RFC 3711 §3.4: the Authenticated Portion is the RTCP packet, the E
                // flag and the index; the tag follows them.
                let (authenticated, tag) = split(packet, len - tag_len)?;
                t.verify(authenticated, &[], tag)?;
                if encrypted {
                    let payload = authenticated
                        .get_mut(RTCP_CLEAR_LEN..plain_len)
                        .ok_or(SrtpError::TooShort { len, needed })?;
                    t.apply_keystream(ssrc, u64::from(index), payload);
                }
            }
            Transform::Gcm(t) => {
                let nonce = t.rtcp_nonce(ssrc, index);
                if encrypted {
                    // RFC 7714 §9.2: AAD = the first 8 octets || the ESRTCP word.
                    let mut aad = [0u8; RTCP_CLEAR_LEN + SRTCP_INDEX_LEN];
                    let (clear, rest) = split(packet, RTCP_CLEAR_LEN)?;
                    aad[..RTCP_CLEAR_LEN].copy_from_slice(clear);
                    aad[RTCP_CLEAR_LEN..].copy_from_slice(&word);
                    let (sealed, _) = split(rest, len - RTCP_CLEAR_LEN - SRTCP_INDEX_LEN)?;
                    t.open(nonce, &aad, sealed)?;
                } else {
                    // RFC 7714 §9.3: AAD = the whole RTCP packet || the ESRTCP word and
                    // the cipher is the tag alone. Moving the word in front of the tag
                    // makes the AAD one contiguous slice.
                    let (_, trailer) = split(packet, plain_len)?;
                    trailer.rotate_left(GCM_TAG_LEN);
                    let (aad, tag) = split(packet, plain_len + SRTCP_INDEX_LEN)?;
                    t.open(nonce, aad, tag)?;
                }
            }
        }
        match self.rtcp.get_mut(&ssrc) {
            Some(window) => window.accept(u64::from(index)),
            None => {
                self.rtcp.insert(ssrc, RtcpWindow::new(u64::from(index)));
            }
        }
        Ok(UnprotectedRtcp {
            len: plain_len,
            ssrc,
            index,
            encrypted,
        })
    }

    /// The rollover counter of an SSRC's SRTP stream, once one of its packets has
    /// authenticated.
    pub fn rollover_counter(&self, ssrc: u32) -> Option<u32> {
        self.rtp.get(&ssrc).map(|w| (w.top() >> 16) as u32)
    }

    /// SSRCs with SRTP state.
    pub fn ssrc_count(&self) -> usize {
        self.rtp.len()
    }

    /// Drops an SSRC's SRTP and SRTCP state (its stream ended), making room for another.
    /// A later packet of it starts afresh at ROC 0, and its replay lists go too: old
    /// packets of it would be accepted once more, so forget only SSRCs whose stream has
    /// ended (an RTCP BYE, a removed track).
    pub fn forget_ssrc(&mut self, ssrc: u32) {
        self.rtp.remove(&ssrc);
        self.rtcp.remove(&ssrc);
    }
}

/// The sending direction: protects in place what shoal sends one peer (RFC 3711 §3.3
/// sender steps, §3.4).
pub struct SrtpOutbound {
    keyed: Keyed,
    config: SrtpConfig,
    /// Per SSRC: the indices already protected; the top is the highest, so ROC and s_l.
    rtp: FastMap<u32, RtpWindow>,
    /// Per sender SSRC: the next SRTCP index.
    rtcp: FastMap<u32, u32>,
}

impl SrtpOutbound {
    /// A context for shoal's master key and salt towards this peer (shoal's write key of
    /// RFC 5764 §4.2).
    pub fn new(
        profile: SrtpProfile,
        master_key: &[u8],
        master_salt: &[u8],
        config: SrtpConfig,
    ) -> Result<SrtpOutbound, SrtpError> {
        Ok(SrtpOutbound::with_keyed(
            Keyed::from_master(profile, master_key, master_salt)?,
            config,
        ))
    }

    /// A context keyed with session keys directly, skipping key derivation (for test
    /// vectors). `rtp` and `rtcp` must be of one profile.
    pub fn from_session_keys(
        rtp: &SessionKeys,
        rtcp: &SessionKeys,
        config: SrtpConfig,
    ) -> Result<SrtpOutbound, SrtpError> {
        Ok(SrtpOutbound::with_keyed(
            Keyed::from_session(rtp, rtcp)?,
            config,
        ))
    }

    fn with_keyed(keyed: Keyed, config: SrtpConfig) -> SrtpOutbound {
        SrtpOutbound {
            keyed,
            config,
            rtp: FastMap::default(),
            rtcp: FastMap::default(),
        }
    }

    /// The protection profile.
    pub fn profile(&self) -> SrtpProfile {
        self.keyed.profile
    }

    /// Protects the RTP packet `buf[..len]` in place and appends its tag; returns the
    /// SRTP packet's length. `buf` must have [`SrtpProfile::rtp_overhead`] bytes of room
    /// after the packet, so the egress can build the packet straight into its outgoing
    /// datagram buffer.
    ///
    /// The index comes from the stream's ROC and highest sequence number by the same
    /// estimate a receiver makes (RFC 3711 §3.3.1), so packets forwarded slightly out of
    /// order keep the index the receiver will compute; the ROC increments when the
    /// sequence number wraps.
    pub fn protect_rtp(&mut self, buf: &mut [u8], len: usize) -> Result<usize, SrtpError> {
        let capacity = buf.len();
        let packet = buf.get(..len).ok_or(SrtpError::BufferTooSmall {
            needed: len,
            capacity,
        })?;
        let header_len = rtp_header_len(packet)?;
        let (seq, ssrc) = seq_ssrc(packet)?;
        let tag_len = self.keyed.profile.tag_len();
        let out = buf
            .get_mut(..len + tag_len)
            .ok_or(SrtpError::BufferTooSmall {
                needed: len + tag_len,
                capacity,
            })?;
        let index = match self.rtp.get(&ssrc) {
            Some(window) => {
                let index = estimate_index(window.top(), seq)?;
                if let Err(e) = window.check(index)
                    && !self.config.allow_repeated_tx
                {
                    return Err(match e {
                        SrtpError::Replayed { index } => SrtpError::RepeatedIndex { index },
                        other => other,
                    });
                }
                index
            }
            None if self.rtp.len() >= self.config.max_ssrcs => {
                return Err(SrtpError::TooManySsrcs {
                    limit: self.config.max_ssrcs,
                });
            }
            None => u64::from(seq),
        };
        let roc = (index >> 16) as u32;
        match &self.keyed.rtp {
            Transform::CmHmac(t) => {
                let (body, tag) = out.split_at_mut(len);
                t.apply_keystream(ssrc, index, &mut body[header_len..]);
                tag.copy_from_slice(&t.tag(body, &roc.to_be_bytes()));
            }
            Transform::Gcm(t) => {
                let (header, rest) = out.split_at_mut(header_len);
                let (plaintext, tag) = rest.split_at_mut(len - header_len);
                let sealed = t.seal(t.rtp_nonce(ssrc, roc, seq), header, plaintext)?;
                tag.copy_from_slice(sealed.as_ref());
            }
        }
        match self.rtp.get_mut(&ssrc) {
            Some(window) => window.accept(index),
            None => {
                self.rtp.insert(ssrc, RtpWindow::new(index));
            }
        }
        Ok(len + tag_len)
    }

    /// Protects the RTP packet `buf[start..]`, growing `buf` by the tag in place. On
    /// error `buf` is as it was, except that a failed cipher may leave the packet's
    /// bytes changed.
    pub fn protect_rtp_tail(
        &mut self,
        buf: &mut impl PacketBuf,
        start: usize,
    ) -> Result<(), SrtpError> {
        let overhead = self.keyed.profile.rtp_overhead();
        protect_tail(buf, start, overhead, |buf, len| self.protect_rtp(buf, len))
    }

    /// Protects the RTCP (compound) packet `buf[..len]` in place, appending the E flag
    /// and SRTCP index and the tag; returns the SRTCP packet's length. `buf` must have
    /// [`SrtpProfile::rtcp_overhead`] bytes of room after the packet. Every packet is
    /// encrypted (E = 1). Each sender SSRC's index starts at zero and counts up by one
    /// (RFC 3711 §3.4); after 2^31 packets the key is spent
    /// ([`SrtpError::SrtcpIndexExhausted`]).
    pub fn protect_rtcp(&mut self, buf: &mut [u8], len: usize) -> Result<usize, SrtpError> {
        let capacity = buf.len();
        let packet = buf.get(..len).ok_or(SrtpError::BufferTooSmall {
            needed: len,
            capacity,
        })?;
        let ssrc = rtcp_ssrc(packet)?;
        let tag_len = self.keyed.profile.tag_len();
        let out_len = len + SRTCP_INDEX_LEN + tag_len;
        let out = buf.get_mut(..out_len).ok_or(SrtpError::BufferTooSmall {
            needed: out_len,
            capacity,
        })?;
        let index = match self.rtcp.get(&ssrc) {
            Some(&next) => next,
            None if self.rtcp.len() >= self.config.max_ssrcs => {
                return Err(SrtpError::TooManySsrcs {
                    limit: self.config.max_ssrcs,
                });
            }
            None => 0,
        };
        if index > SRTCP_INDEX_MAX {
            return Err(SrtpError::SrtcpIndexExhausted);
        }
        let word = (E_FLAG | index).to_be_bytes();
        match &self.keyed.rtcp {
            Transform::CmHmac(t) => {
                let (authenticated, tag) = out.split_at_mut(len + SRTCP_INDEX_LEN);
                let (packet, word_out) = authenticated.split_at_mut(len);
                t.apply_keystream(ssrc, u64::from(index), &mut packet[RTCP_CLEAR_LEN..]);
                word_out.copy_from_slice(&word);
                tag.copy_from_slice(&t.tag(authenticated, &[]));
            }
            Transform::Gcm(t) => {
                // RFC 7714 §9.2: header (8) || cipher and tag || ESRTCP word, with
                // AAD = header || ESRTCP word.
                let mut aad = [0u8; RTCP_CLEAR_LEN + SRTCP_INDEX_LEN];
                aad[..RTCP_CLEAR_LEN].copy_from_slice(&out[..RTCP_CLEAR_LEN]);
                aad[RTCP_CLEAR_LEN..].copy_from_slice(&word);
                let (plaintext, trailer) = out[RTCP_CLEAR_LEN..].split_at_mut(len - RTCP_CLEAR_LEN);
                let sealed = t.seal(t.rtcp_nonce(ssrc, index), &aad, plaintext)?;
                let (tag, word_out) = trailer.split_at_mut(GCM_TAG_LEN);
                tag.copy_from_slice(sealed.as_ref());
                word_out.copy_from_slice(&word);
            }
        }
        self.rtcp.insert(ssrc, index + 1);
        Ok(out_len)
    }

    /// Protects the RTCP packet `buf[start..]`, growing `buf` by the trailer in place.
    pub fn protect_rtcp_tail(
        &mut self,
        buf: &mut impl PacketBuf,
        start: usize,
    ) -> Result<(), SrtpError> {
        let overhead = self.keyed.profile.rtcp_overhead();
        protect_tail(buf, start, overhead, |buf, len| self.protect_rtcp(buf, len))
    }

    /// The SRTCP index the next packet of `ssrc` will carry, once it has sent one or
    /// one was set.
    pub fn next_srtcp_index(&self, ssrc: u32) -> Option<u32> {
        self.rtcp.get(&ssrc).copied()
    }

    /// Sets the SRTCP index the next packet of `ssrc` carries: RFC 3711 §3.4 says that
    /// "after a re-key, the SRTCP index MUST NOT be reset to zero again", so a context
    /// replacing another continues its count.
    pub fn set_next_srtcp_index(&mut self, ssrc: u32, index: u32) -> Result<(), SrtpError> {
        if !self.rtcp.contains_key(&ssrc) && self.rtcp.len() >= self.config.max_ssrcs {
            return Err(SrtpError::TooManySsrcs {
                limit: self.config.max_ssrcs,
            });
        }
        self.rtcp.insert(ssrc, index);
        Ok(())
    }

    /// The rollover counter of an SSRC's SRTP stream, once it has sent a packet.
    pub fn rollover_counter(&self, ssrc: u32) -> Option<u32> {
        self.rtp.get(&ssrc).map(|w| (w.top() >> 16) as u32)
    }

    /// SSRCs with SRTP state.
    pub fn ssrc_count(&self) -> usize {
        self.rtp.len()
    }

    /// Drops an SSRC's SRTP and SRTCP state (its stream ended), making room for another.
    /// Sending more of it afterwards under the same key restarts its ROC and SRTCP
    /// index at zero, which reuses indices: only forget an SSRC that will not return.
    pub fn forget_ssrc(&mut self, ssrc: u32) {
        self.rtp.remove(&ssrc);
        self.rtcp.remove(&ssrc);
    }
}

/// The RTP sequence number and SSRC of a packet at least a fixed header long.
fn seq_ssrc(packet: &[u8]) -> Result<(u16, u32), SrtpError> {
    packet
        .first_chunk()
        .map(rtp_seq_ssrc)
        .ok_or(SrtpError::TooShort {
            len: packet.len(),
            needed: super::header::RTP_FIXED_HEADER_LEN,
        })
}

/// `split_at_mut` that reports a short packet instead of panicking.
fn split(bytes: &mut [u8], at: usize) -> Result<(&mut [u8], &mut [u8]), SrtpError> {
    let len = bytes.len();
    bytes
        .split_at_mut_checked(at)
        .ok_or(SrtpError::TooShort { len, needed: at })
}

/// Grows `buf` by `overhead`, protects `buf[start..]` with `protect`, and shrinks it
/// back on error.
fn protect_tail(
    buf: &mut impl PacketBuf,
    start: usize,
    overhead: usize,
    protect: impl FnOnce(&mut [u8], usize) -> Result<usize, SrtpError>,
) -> Result<(), SrtpError> {
    let end = buf.len();
    let len = end.checked_sub(start).ok_or(SrtpError::BufferTooSmall {
        needed: start,
        capacity: end,
    })?;
    buf.resize_to(end + overhead);
    let result = protect(&mut buf.bytes_mut()[start..], len);
    match result {
        Ok(n) => {
            debug_assert_eq!(n, len + overhead);
            Ok(())
        }
        Err(e) => {
            buf.resize_to(end);
            Err(e)
        }
    }
}
