//! The codecs shoal forwards, read from and written into media sections: a primary
//! format (`rtpmap`, `fmtp`), the RTCP feedback shoal takes part in (`rtcp-fb`), and its
//! RTP retransmission format (RFC 4588 §8.1: `rtx` with `apt=`).
//!
//! An SFU does not decode, so what matters is that publisher and subscriber agree on
//! the format: the same encoding name, clock rate and channels (RFC 3264 §6.1), and for
//! H.264 the same packetization mode and profile (RFC 6184 §8.1: `profile-level-id`
//! and `packetization-mode` describe the stream). [`Codec::same_format`] compares the
//! profile by `profile_idc` and `profile-iop`, less the bit that is part of the level
//! (RFC 6184 §8.2.2: "The level part of profile-level-id is changeable"), and so
//! leaves levels out: a format is one format at any level.
//!
//! Levels decide where a stream may go ([`Codec::receives`]). A publisher's track has
//! the level of its offer: shoal answers it with the offer's `profile-level-id` and
//! `level-asymmetry-allowed` unchanged, and a receiver can take any level, so the
//! publisher may send up to the level it offered and no higher. A subscriber must
//! receive at least that level, whoever offers: the level in its answer to shoal's
//! offer (which carries `level-asymmetry-allowed=1`, [`Codec::with_level_asymmetry`])
//! is the highest it can receive when both sides allow asymmetry, and otherwise the
//! level of both directions, which may only be lower than or equal to the offer's
//! (RFC 6184 §8.2.2: "an answer to an offer may indicate a level equal to or lower
//! than the level indicated in the offer"; a higher one, outside that rule, still names
//! a decoder that takes the stream); the level in its own offer is the one shoal's
//! answer may not exceed. A lower level is a format the subscriber cannot take, as a
//! different profile is. Mandatory-to-implement codecs are Opus (RFC 7874 §3) and VP8
//! and H.264 Constrained Baseline (RFC 7742 §5).

use super::h264::{H264Level, ProfileLevelId, ProfileLevelIdError};
use super::{Attribute, MediaDescription, RtcpFb, RtpMap};

/// The `fmtp` parameter that lets H.264 levels differ by direction (RFC 6184 §8.1).
const LEVEL_ASYMMETRY_ALLOWED: &str = "level-asymmetry-allowed";

/// The codecs shoal forwards.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CodecName {
    /// Opus (RFC 7587), 48 kHz, two channels in SDP.
    Opus,
    /// VP8 (RFC 7741), 90 kHz.
    Vp8,
    /// H.264 (RFC 6184), 90 kHz, packetization mode 1 only.
    H264,
}

impl CodecName {
    /// The encoding name as `rtpmap` writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Opus => "opus",
            Self::Vp8 => "VP8",
            Self::H264 => "H264",
        }
    }

    fn from_rtpmap(r: &RtpMap) -> Option<Self> {
        [Self::Opus, Self::Vp8, Self::H264]
            .into_iter()
            .find(|c| r.is(c.as_str()))
    }

    /// Whether the codec carries video.
    pub fn is_video(self) -> bool {
        !matches!(self, Self::Opus)
    }

    /// The only clock rate each is defined with (RFC 7587 §7, RFC 7741 §6.1, RFC 6184 §8.1).
    pub fn clock_rate(self) -> u32 {
        match self {
            Self::Opus => 48_000,
            Self::Vp8 | Self::H264 => 90_000,
        }
    }
}

/// RTCP feedback (RFC 4585 §4.2, RFC 5104 §7.1) that shoal answers or relays.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Feedback {
    /// `nack`: generic NACK (RFC 4585 §6.2.1).
    pub nack: bool,
    /// `nack pli`: Picture Loss Indication (RFC 4585 §6.3.1).
    pub pli: bool,
    /// `ccm fir`: Full Intra Request (RFC 5104 §4.3.1).
    pub fir: bool,
    /// `transport-cc`: transport-wide congestion control feedback
    /// (draft-holmer-rmcat-transport-wide-cc-extensions-01 §3.1), with the
    /// [`EXT_TRANSPORT_CC`](super::EXT_TRANSPORT_CC) header extension.
    pub transport_cc: bool,
    /// `goog-remb`: receiver estimated maximum bitrate (draft-alvestrand-rmcat-remb-03
    /// §5 registers the value), with the abs-send-time header extension. Not read
    /// with the rest: only a publisher's section agrees it, and only where the offer
    /// has no transport-cc anywhere (one estimate per transport, the sender's when
    /// it can), so the answer sets it itself.
    pub goog_remb: bool,
}

impl Feedback {
    /// Everything shoal does.
    pub const ALL: Self = Self {
        nack: true,
        pli: true,
        fir: true,
        transport_cc: true,
        goog_remb: true,
    };

    fn read(m: &MediaDescription, pt: u8) -> Self {
        let mut f = Self::default();
        // `rtcp-fb:*` applies to every format of the section (RFC 4585 §4.2).
        for fb in m
            .rtcp_fbs()
            .filter(|fb| fb.payload_type.is_none_or(|p| p == pt))
        {
            match (fb.feedback.as_str(), fb.param.as_deref()) {
                ("nack", None) => f.nack = true,
                ("nack", Some("pli")) => f.pli = true,
                ("ccm", Some("fir")) => f.fir = true,
                ("transport-cc", None) => f.transport_cc = true,
                _ => {}
            }
        }
        f
    }

    /// What both sides do.
    pub fn intersect(self, other: Self) -> Self {
        Self {
            nack: self.nack && other.nack,
            pli: self.pli && other.pli,
            fir: self.fir && other.fir,
            transport_cc: self.transport_cc && other.transport_cc,
            goog_remb: self.goog_remb && other.goog_remb,
        }
    }
}

/// One negotiated codec: a primary format and, if retransmission was negotiated for
/// it, its `rtx` payload type.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Codec {
    /// Which codec.
    pub name: CodecName,
    /// Its payload type in this session.
    pub payload_type: u8,
    /// Channels (`rtpmap` encoding parameters): 2 for Opus, none for video.
    pub channels: Option<u16>,
    /// Its format parameters as the publisher gave them, if any.
    pub fmtp: Option<String>,
    /// The RTCP feedback negotiated for it.
    pub feedback: Feedback,
    /// The payload type of its RTP retransmission format (RFC 4588), if negotiated.
    pub rtx_payload_type: Option<u8>,
}

impl Codec {
    /// The codec of payload type `pt` in `m`, if shoal forwards it; its RTX format too
    /// when `m` has one whose `apt` names `pt` (RFC 4588 §8.1). `None` for formats shoal
    /// does not forward, H.264 other than packetization mode 1 or with a malformed
    /// `profile-level-id` among them.
    pub fn read(m: &MediaDescription, pt: u8) -> Option<Self> {
        let rtpmap = m.rtpmap(pt)?;
        let name = CodecName::from_rtpmap(rtpmap)?;
        if rtpmap.clock_rate_hz != name.clock_rate() {
            return None;
        }
        let channels = rtpmap.encoding_params;
        // RFC 7587 §7: opus is always signalled as two channels.
        if name == CodecName::Opus && channels != Some(2) {
            return None;
        }
        if name.is_video() && channels.is_some_and(|c| c != 1) {
            return None;
        }
        let fmtp = m.fmtp(pt).map(|f| f.params.clone());
        let codec = Self {
            name,
            payload_type: pt,
            channels: if name.is_video() { None } else { channels },
            fmtp,
            feedback: Feedback::read(m, pt),
            rtx_payload_type: rtx_for(m, pt),
        };
        // A profile-level-id that is not one names no format (RFC 6184 §8.1).
        if name == CodecName::H264
            && (codec.h264_mode() != Some(1) || codec.h264_profile_level_id().is_err())
        {
            return None;
        }
        Some(codec)
    }

    /// Every codec of `m` shoal forwards, in the section's order of preference.
    pub fn read_all(m: &MediaDescription) -> Vec<Self> {
        m.payload_types()
            .filter_map(|pt| Self::read(m, pt))
            .collect()
    }

    fn param(&self, name: &str) -> Option<&str> {
        self.fmtp.as_deref()?.split(';').find_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            (k.trim() == name).then_some(v.trim())
        })
    }

    /// H.264 `packetization-mode` (RFC 6184 §8.1: absent means 0).
    fn h264_mode(&self) -> Option<u8> {
        match self.param("packetization-mode") {
            None => Some(0),
            Some(v) => v.parse().ok(),
        }
    }

    /// H.264 `profile-level-id` ([`ProfileLevelId::DEFAULT`] when absent).
    fn h264_profile_level_id(&self) -> Result<ProfileLevelId, ProfileLevelIdError> {
        self.param("profile-level-id")
            .map_or(Ok(ProfileLevelId::DEFAULT), ProfileLevelId::parse)
    }

    /// The H.264 level of this format, or why its `profile-level-id` is not one; `None`
    /// for other codecs.
    pub fn h264_level(&self) -> Option<Result<H264Level, ProfileLevelIdError>> {
        (self.name == CodecName::H264).then(|| self.h264_profile_level_id().map(|p| p.level()))
    }

    /// Whether the `fmtp` says `level-asymmetry-allowed=1` (RFC 6184 §8.1).
    pub fn h264_level_asymmetry_allowed(&self) -> bool {
        self.param(LEVEL_ASYMMETRY_ALLOWED) == Some("1")
    }

    /// Whether a stream of this codec can be sent to a peer that offered `other`: the
    /// same format, whatever the payload types (RFC 3264 §6.1 compares encodings, not
    /// numbers) and, for H.264, whatever the levels (RFC 6184 §8.2.2). A malformed
    /// `profile-level-id` is no format.
    pub fn same_format(&self, other: &Self) -> bool {
        if self.name != other.name || self.channels != other.channels {
            return false;
        }
        match self.name {
            CodecName::H264 => {
                let profile = |c: &Self| c.h264_profile_level_id().map(ProfileLevelId::profile);
                self.h264_mode() == other.h264_mode()
                    && matches!((profile(self), profile(other)), (Ok(a), Ok(b)) if a == b)
            }
            CodecName::Opus | CodecName::Vp8 => true,
        }
    }

    /// Whether a peer that describes what it receives with this format (in its offer,
    /// or in its answer to shoal's) can take `stream`: the same format, and for H.264
    /// a level at least the stream's (see the module comment for RFC 6184 §8.2.2).
    pub fn receives(&self, stream: &Self) -> bool {
        if !self.same_format(stream) {
            return false;
        }
        match (self.h264_level(), stream.h264_level()) {
            (Some(Ok(receivable)), Some(Ok(sent))) => receivable >= sent,
            (None, None) => true,
            _ => false,
        }
    }

    /// This format as shoal offers it: for H.264 with `level-asymmetry-allowed=1` (RFC
    /// 6184 §8.1), so that the level of the answer is the highest the answerer can
    /// receive rather than one both directions share.
    pub fn with_level_asymmetry(mut self) -> Self {
        if self.name != CodecName::H264 || self.h264_level_asymmetry_allowed() {
            return self;
        }
        let others = self.fmtp.iter().flat_map(|f| f.split(';')).filter(|kv| {
            !kv.trim().is_empty()
                && kv
                    .split_once('=')
                    .is_none_or(|(k, _)| k.trim() != LEVEL_ASYMMETRY_ALLOWED)
        });
        let params: Vec<&str> = std::iter::once("level-asymmetry-allowed=1")
            .chain(others)
            .collect();
        self.fmtp = Some(params.join(";"));
        self
    }

    /// The payload types the codec uses: its own and its RTX one.
    pub fn payload_types(&self) -> impl Iterator<Item = u8> {
        std::iter::once(self.payload_type).chain(self.rtx_payload_type)
    }

    /// Its `m=` line formats.
    pub fn formats(&self) -> Vec<String> {
        self.payload_types().map(|pt| pt.to_string()).collect()
    }

    /// Writes its `rtpmap`, `rtcp-fb` and `fmtp` lines, then the RTX format's
    /// `rtpmap` and `fmtp` (RFC 4588 §8.1), into `m`.
    pub fn write(&self, m: &mut MediaDescription) {
        let pt = self.payload_type;
        let clock = self.name.clock_rate();
        let mut rtpmap = RtpMap::new(pt, self.name.as_str(), clock);
        rtpmap.encoding_params = self.channels;
        m.push_attribute(Attribute::RtpMap(rtpmap));
        let f = self.feedback;
        for (on, feedback, param) in [
            (f.nack, "nack", None),
            (f.pli, "nack", Some("pli")),
            (f.fir, "ccm", Some("fir")),
            (f.transport_cc, "transport-cc", None),
            (f.goog_remb, "goog-remb", None),
        ] {
            if on {
                m.push_attribute(Attribute::RtcpFb(RtcpFb::new(pt, feedback, param)));
            }
        }
        if let Some(params) = &self.fmtp {
            m.push_attribute(Attribute::Fmtp(super::Fmtp {
                format: pt.to_string(),
                params: params.clone(),
            }));
        }
        if let Some(rtx) = self.rtx_payload_type {
            m.push_attribute(Attribute::RtpMap(RtpMap::new(rtx, "rtx", clock)));
            m.push_attribute(Attribute::Fmtp(super::Fmtp {
                format: rtx.to_string(),
                params: format!("apt={pt}"),
            }));
        }
    }
}

/// The `rtx` payload type in `m` whose `apt` is `pt` (RFC 4588 §8.1).
fn rtx_for(m: &MediaDescription, pt: u8) -> Option<u8> {
    m.rtpmaps()
        .filter(|r| r.is("rtx"))
        .map(|r| r.payload_type)
        .find(|rtx| {
            m.fmtp(*rtx)
                .and_then(|f| f.param("apt"))
                .and_then(|apt| apt.parse::<u8>().ok())
                == Some(pt)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h264(fmtp: &str) -> Codec {
        Codec {
            name: CodecName::H264,
            payload_type: 108,
            channels: None,
            fmtp: Some(fmtp.to_owned()),
            feedback: Feedback::default(),
            rtx_payload_type: None,
        }
    }

    #[test]
    fn shoals_offers_allow_level_asymmetry_and_keep_the_rest() {
        let offered = |fmtp: &str| h264(fmtp).with_level_asymmetry().fmtp.unwrap();
        assert_eq!(
            offered("packetization-mode=1;profile-level-id=42e01f"),
            "level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f"
        );
        assert_eq!(
            offered("packetization-mode=1; level-asymmetry-allowed=0;profile-level-id=640c1f"),
            "level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=640c1f"
        );
        let chromium = "level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f";
        assert_eq!(offered(chromium), chromium);
        let mut vp8 = h264("");
        vp8.name = CodecName::Vp8;
        vp8.fmtp = None;
        assert_eq!(vp8.clone().with_level_asymmetry(), vp8);
    }

    #[test]
    fn a_receiver_takes_a_stream_at_its_level_or_below_in_the_same_profile() {
        let at = |id: &str| h264(&format!("packetization-mode=1;profile-level-id={id}"));
        assert!(at("42e01f").receives(&at("42e01f")));
        assert!(at("42e028").receives(&at("42e01f")));
        assert!(!at("42e01e").receives(&at("42e01f")));
        assert!(
            at("42e01e").same_format(&at("42e01f")),
            "one format at any level"
        );
        assert!(!at("4d0028").receives(&at("42e01f")), "another profile");
        assert!(!at("42e0").receives(&at("42e01f")) && !at("42e01f").receives(&at("42e0")));
        assert!(
            !at("42e0").same_format(&at("42e0")),
            "malformed is no format"
        );
    }
}
