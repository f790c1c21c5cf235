//! Media negotiation with one participant over its whole session: the answers shoal
//! gives to the participant's offers and the offers shoal makes when the room's tracks
//! change, as a pure state machine (no I/O, no clocks).
//!
//! One peer connection carries everything (RFC 8843 BUNDLE, one transport): the
//! participant publishes in the sections it sends on, and shoal sends each track of the
//! room it subscribes to in a section of its own. Both sides may offer:
//! - [`Negotiation::answer`] answers the participant's offer (RFC 8829 §5.3): a section
//!   the participant sends on (`sendonly`/`sendrecv`) becomes a published track, answered
//!   with one codec shoal forwards so the publisher's format is fixed; a section it
//!   receives on (`recvonly`/`sendrecv`) is given a room track that waits for one, if a
//!   codec matches (a WHEP session's sections, or transceivers the page added). A
//!   section that can do neither stays open and `inactive` when shoal forwards one of
//!   its codecs, else it is rejected with port 0 (RFC 3264 §6).
//! - [`Negotiation::offer`] makes a subsequent offer (RFC 8829 §5.2.2) that adds a
//!   `sendonly` section per track still to place (recycling a section with port 0 at its
//!   index and with a new mid, else appending one) and disables the sections of tracks
//!   that are gone (port 0, no `a=msid`: RFC 8829 §5.2.2, RFC 8843 §7.5.3), so a long
//!   session does not grow dead sections. [`Negotiation::accept`] applies the answer.
//! - Glare: shoal is the polite side. An offer from the participant while shoal's is
//!   outstanding drops shoal's (a rollback, RFC 8829 §4.1.10.2) and is answered; shoal
//!   offers again afterwards. A participant therefore ignores shoal's offers while it
//!   has one of its own outstanding.
//! - A session whose DTLS connected without SRTP keys ([`Negotiation::refuse_media`])
//!   can carry no RTP: its later audio and video sections are rejected (port 0) and
//!   shoal offers it no tracks.
//!
//! Every call reports what changed as [`Change`]s, from the old agreed state to the
//! new, for the control plane to carry to the shard. Sections are matched by index (JSEP
//! never reorders them; a different mid at the same index is a recycled section).
//!
//! Payload types and header extension ids are per session: shoal keeps one map of
//! extension URI to id over the whole session (the same id must not name two
//! extensions within one BUNDLE group, RFC 8285 §6 and RFC 8843 §9.1), reuses the
//! participant's own ids and payload types wherever it offered the same thing, and
//! otherwise picks unused ones.
//!
//! Transport attributes are written into every non-rejected section (see the
//! `sdp::answer` module for what they are); the JSEP endpoints shoal serves read them
//! there whichever section BUNDLE tags.
//!
//! Split by direction: `types` holds what negotiation agrees and reports, `answer`
//! answers the participant's offers, `offer` makes shoal's offers and takes their
//! answers; this file the state and what both directions share.

mod answer;
mod offer;
mod types;

pub use types::*;

use crate::media::{LayerSpec, MAX_LAYERS};
use crate::shared::MAX_RETIRED_SSRCS;

use super::answer::{
    TransportAttributes, is_data_section, offerer_tagged, rejected_section, remote_max_message_size,
};
use super::codec::Codec;
use super::{
    AnswerParams, Attribute, BUNDLE, Connection, Direction, Extmap, FORMAT_DATACHANNEL, Group,
    HashFunction, MAX_MEDIA, MediaDescription, MediaKind, Msid, Origin, PROTO_RTP_SAVPF, Rid,
    RidDirection, SessionDescription, Setup, Simulcast, SimulcastStreams, Ssrc, SsrcGroup,
};

/// RFC 8843 §15.2: the mid header extension.
pub const EXT_MID: &str = "urn:ietf:params:rtp-hdrext:sdes:mid";
/// RFC 6464 §4: the client-to-mixer audio level header extension.
pub const EXT_AUDIO_LEVEL: &str = "urn:ietf:params:rtp-hdrext:ssrc-audio-level";
/// RFC 8852 §3.1: the RtpStreamId header extension.
pub const EXT_RID: &str = "urn:ietf:params:rtp-hdrext:sdes:rtp-stream-id";
/// RFC 8852 §3.2: the RepairedRtpStreamId header extension.
pub const EXT_REPAIRED_RID: &str = "urn:ietf:params:rtp-hdrext:sdes:repaired-rtp-stream-id";

/// draft-holmer-rmcat-transport-wide-cc-extensions-01 §2: the transport-wide sequence
/// number header extension, whose URI is the draft's own address.
pub const EXT_TRANSPORT_CC: &str =
    "http://www.ietf.org/id/draft-holmer-rmcat-transport-wide-cc-extensions-01";

/// webrtc's abs-send-time header extension (the send time as 24-bit 6.18 fixed-point
/// seconds), which draft-ietf-rmcat-gcc-02 §3 has a receive-side estimate run on.
pub const EXT_ABS_SEND_TIME: &str = crate::rtp::ext::uri::ABS_SEND_TIME;

/// webrtc's abs-capture-time header extension: when the packet's first frame was
/// captured, on the capturer's NTP clock. It exists for audio/video sync through
/// RTCP-terminating middle boxes (webrtc.org/experiments/rtp-hdrext/abs-capture-time),
/// so shoal takes it from a publisher and carries the capture time over to every
/// subscriber that accepts it.
pub const EXT_ABS_CAPTURE_TIME: &str = crate::rtp::ext::uri::ABS_CAPTURE_TIME;

/// Tracks one participant may publish: the shard's limit per peer.
pub const MAX_PUBLISHED: usize = 32;
/// RFC 8285 §4.2: one-byte header extension ids are 1 to 14.
const MAX_ONE_BYTE_ID: u16 = 14;
/// Dynamic RTP payload types (RFC 3551 §3) shoal picks from for its own sections.
const DYNAMIC_PAYLOAD_TYPES: std::ops::RangeInclusive<u8> = 96..=127;
/// The first mids shoal generates: `s0`, `s1`, … (RFC 8829 §5.2.1: 3 bytes or less
/// for a while, and no user information).
const MID_PREFIX: &str = "s";
/// The extensions shoal writes on what it sends to a subscriber of `kind`.
fn sendable(kind: &MediaKind) -> &'static [&'static str] {
    match kind {
        MediaKind::Audio => &[
            EXT_MID,
            EXT_AUDIO_LEVEL,
            EXT_TRANSPORT_CC,
            EXT_ABS_CAPTURE_TIME,
        ],
        _ => &[EXT_MID, EXT_TRANSPORT_CC, EXT_ABS_CAPTURE_TIME],
    }
}

/// Negotiation with one participant.
#[derive(Clone, Debug)]
pub struct Negotiation {
    /// `o=` session id (RFC 8829 §5.2.1).
    session_id: u64,
    /// `o=` version of the last description shoal wrote.
    version: u64,
    /// Set by the first offer.
    transport: Option<RemoteTransport>,
    /// Whether the session bundles (the first offer had a BUNDLE group).
    bundle: bool,
    /// The agreed sections, in order.
    sections: Vec<Section>,
    /// shoal's offer awaiting its answer: the sections as offered.
    pending: Option<Vec<Section>>,
    /// Header extension URI → id, over the whole session.
    extension_ids: Vec<(String, u16)>,
    /// The next generated mid's number.
    next_mid: u32,
    /// Tracks the participant declined (by answering or re-offering a section of theirs
    /// as not receiving); not offered again.
    declined: Vec<String>,
    /// From the data section.
    remote_max_message_size: usize,
    /// SSRCs of ended subscriptions: never given out again in this session.
    retired_ssrcs: Vec<u32>,
    /// Every codec the participant offered, in any section, with its payload types.
    offered_codecs: Vec<Codec>,
    /// The mids of sections shoal added (the participant's own are never disabled
    /// when a track leaves them: it may reuse them).
    own_mids: Vec<String>,
    /// Payload types the participant uses for formats shoal does not forward (VP9,
    /// RED, telephone-event…): taken, for shoal's own sections (RFC 8843 §9.1).
    foreign_payload_types: Vec<u8>,
    /// Whether the participant may publish: when not, its sending sections are
    /// answered as shoal not receiving them (RFC 3264 §6.1: "If a stream is offered
    /// as sendonly, the corresponding stream MUST be marked as recvonly or inactive
    /// in the answer"; one offered sendrecv "MAY be marked as sendonly, recvonly,
    /// sendrecv, or inactive").
    may_publish: bool,
    /// Whether the session's DTLS came up without SRTP keys (RFC 5764 §4.1.1: no
    /// use_srtp agreed): RTP can never flow on it, so audio and video are neither
    /// offered nor accepted from then on (rejected with port 0, RFC 3264 §6).
    media_refused: bool,
}

impl Negotiation {
    /// A session with no description yet; `session_id` below 2^62 (RFC 8829 §5.2.1).
    pub fn new(session_id: u64) -> Self {
        Self {
            session_id,
            version: 0,
            transport: None,
            bundle: false,
            sections: Vec::new(),
            pending: None,
            extension_ids: Vec::new(),
            next_mid: 0,
            declined: Vec::new(),
            remote_max_message_size: super::DEFAULT_REMOTE_MAX_MESSAGE_SIZE,
            retired_ssrcs: Vec::new(),
            foreign_payload_types: Vec::new(),
            own_mids: Vec::new(),
            offered_codecs: Vec::new(),
            may_publish: true,
            media_refused: false,
        }
    }

    /// Refuses audio and video from now on: the session's DTLS connected without
    /// SRTP keys. The participant's audio and video sections are rejected (port 0,
    /// RFC 3264 §6: "An offered stream MAY be rejected in the answer, for any
    /// reason"), save the offerer-tagged one, which stays open and inactive (RFC 8843
    /// §7.3.3), and shoal offers it no tracks.
    pub fn refuse_media(&mut self) {
        self.media_refused = true;
    }

    /// Whether audio and video are refused ([`Negotiation::refuse_media`]).
    pub fn media_refused(&self) -> bool {
        self.media_refused
    }

    /// Answers the participant's sending sections from now on as shoal not receiving
    /// them: it may not publish.
    pub fn refuse_publishing(&mut self) {
        self.may_publish = false;
    }

    /// Whether the participant may publish.
    pub fn may_publish(&self) -> bool {
        self.may_publish
    }

    /// The agreed sections.
    pub fn sections(&self) -> &[Section] {
        &self.sections
    }

    /// Whether an offer of shoal's awaits its answer.
    pub fn offer_outstanding(&self) -> bool {
        self.pending.is_some()
    }

    /// The participant's transport, once an offer set it.
    pub fn transport(&self) -> Option<&RemoteTransport> {
        self.transport.as_ref()
    }

    /// Room tracks the participant turned down.
    pub fn declined(&self) -> &[String] {
        &self.declined
    }

    /// Offers `track` again after all: the participant asked for it (a track it
    /// turned down is otherwise never offered again).
    pub fn undecline(&mut self, track: &str) {
        self.declined.retain(|t| t != track);
    }

    /// Every SSRC in `sections` and the agreed session.
    /// Whether one more stream (two SSRCs) may be placed: with every stream placed
    /// in `sections` retired too, the session's retired SSRCs stay within
    /// [`MAX_RETIRED_SSRCS`].
    pub(super) fn ssrcs_to_spare(&self, sections: &[Section]) -> bool {
        let live = sections
            .iter()
            .filter(|s| matches!(&s.state, SectionState::Media(m) if m.subscribe.is_some()))
            .count();
        self.retired_ssrcs.len() + 2 * (live + 1) <= MAX_RETIRED_SSRCS
    }

    pub(super) fn used_ssrcs(&self, sections: &[Section]) -> Vec<u32> {
        sections
            .iter()
            .chain(&self.sections)
            .filter_map(|s| match &s.state {
                SectionState::Media(m) => Some(m),
                _ => None,
            })
            .flat_map(|m| {
                let p = m.publish.as_ref();
                let s = m.subscribe.as_ref();
                [
                    p.and_then(|p| p.ssrc),
                    p.and_then(|p| p.rtx_ssrc),
                    s.map(|s| s.ssrc),
                    s.and_then(|s| s.rtx_ssrc),
                ]
            })
            .flatten()
            .chain(self.retired_ssrcs.iter().copied())
            .collect()
    }

    /// Writes one audio or video section shoal answers or offers.
    pub(super) fn media_section(
        &self,
        attributes: &TransportAttributes<'_>,
        section: &Section,
        media: &Media,
    ) -> MediaDescription {
        let mut codecs: Vec<&Codec> = Vec::new();
        for c in media
            .publish
            .as_ref()
            .map(|p| &p.codec)
            .into_iter()
            .chain(media.subscribe.as_ref().map(|s| &s.codec))
        {
            if !codecs.iter().any(|k| k.payload_type == c.payload_type) {
                codecs.push(c);
            }
        }
        if codecs.is_empty() {
            codecs.extend(media.receivable.first());
        }
        let formats: Vec<String> = codecs.iter().flat_map(|c| c.formats()).collect();
        let formats: Vec<&str> = formats.iter().map(String::as_str).collect();
        let mut m = attributes.section_for(
            &section.kind,
            &section.proto,
            section.mid.as_deref(),
            media.rtcp_mux,
            &formats,
        );
        let mut extensions: Vec<&Extmap> = Vec::new();
        for e in media
            .publish
            .iter()
            .flat_map(|p| &p.extensions)
            .chain(media.subscribe.iter().flat_map(|s| &s.extensions))
        {
            if !extensions.iter().any(|x| x.id == e.id) {
                extensions.push(e);
            }
        }
        for e in extensions {
            m.push_attribute(Attribute::Extmap(e.clone()));
        }
        m.push_attribute(Attribute::Direction(media.direction()));
        if let Some(s) = &media.subscribe {
            // RFC 8830 §2 and RFC 8829 §5.2.1: the sending side's msid.
            m.push_attribute(Attribute::Msid(Msid::new(&s.stream_id, &s.track)));
        }
        if media.rtcp_rsize {
            m.push_attribute(Attribute::RtcpRsize);
        }
        for c in codecs {
            c.write(&mut m);
        }
        // RFC 8853 §5.3.2: the streams shoal takes, "send" reversed to "recv", with
        // their rids (RFC 8851 §6.3: direction reversed, rid-id kept, no restriction
        // added); an SSRC-signalled track's streams need no answer.
        if let Some(p) = &media.publish {
            let rids: Vec<&str> = p.layers.iter().filter_map(|l| l.rid.as_deref()).collect();
            if rids.len() >= 2 {
                for rid in &rids {
                    m.push_attribute(Attribute::Rid(Rid::new(rid, RidDirection::Recv)));
                }
                m.push_attribute(Attribute::Simulcast(Simulcast {
                    lists: vec![SimulcastStreams::new(RidDirection::Recv, &rids)],
                }));
            }
        }
        if let Some(s) = &media.subscribe {
            // RFC 5576 §4.1 and §4.2: the SSRCs shoal sends with, so the participant
            // can demultiplex them before the first packet.
            if let Some(rtx) = s.rtx_ssrc {
                m.push_attribute(Attribute::SsrcGroup(SsrcGroup {
                    semantics: "FID".to_owned(),
                    ssrcs: vec![s.ssrc, rtx],
                }));
            }
            for ssrc in std::iter::once(s.ssrc).chain(s.rtx_ssrc) {
                m.push_attribute(Attribute::Ssrc(Ssrc::new(ssrc, "cname", &s.stream_id)));
                m.push_attribute(Attribute::Ssrc(Ssrc::new(
                    ssrc,
                    "msid",
                    &format!("{} {}", s.stream_id, s.track),
                )));
            }
        }
        m
    }

    /// Remembers the SSRCs of subscriptions in the agreed sections that `new` no
    /// longer has: they are never given out again in this session (an SRTP index must
    /// not repeat under one key, and the receiver's context forgets them).
    pub(super) fn retire(&mut self, new: &[Section]) {
        let kept = |s: &Subscribed| {
            new.iter().any(|n| match &n.state {
                SectionState::Media(m) => m.subscribe.as_ref().is_some_and(|x| x.ssrc == s.ssrc),
                _ => false,
            })
        };
        let gone: Vec<u32> = self
            .sections
            .iter()
            .filter_map(|s| match &s.state {
                SectionState::Media(m) => m.subscribe.as_ref(),
                _ => None,
            })
            .filter(|s| !kept(s))
            .flat_map(|s| std::iter::once(s.ssrc).chain(s.rtx_ssrc))
            .collect();
        for ssrc in gone {
            if !self.retired_ssrcs.contains(&ssrc) {
                self.retired_ssrcs.push(ssrc);
            }
        }
    }
}

pub(super) fn is_av(kind: &MediaKind) -> bool {
    matches!(kind, MediaKind::Audio | MediaKind::Video)
}

/// A random SSRC that is neither zero nor in `used`.
pub(super) fn fresh_ssrc(new_ssrc: &mut dyn FnMut() -> u32, used: &[u32]) -> u32 {
    loop {
        let s = new_ssrc();
        if s != 0 && !used.contains(&s) {
            return s;
        }
    }
}

/// Whether two subscriptions are one stream: the same track on the same SSRC. An
/// answer that narrows one (drops its RTX or an extension) does not re-make it: the
/// shard keeps its sequence numbering and SRTP state, and what the answer dropped is
/// at worst sent and ignored.
pub(super) fn same_stream(a: &Subscribed, b: &Subscribed) -> bool {
    a.track == b.track && a.ssrc == b.ssrc
}

/// The changes from `old` to `new`, removals first.
pub(super) fn diff(old: &[Section], new: &[Section]) -> Vec<Change> {
    let media = |s: &Section| match &s.state {
        SectionState::Media(m) => Some((s.mid.clone().unwrap_or_default(), (**m).clone())),
        _ => None,
    };
    let old: Vec<(String, Media)> = old.iter().filter_map(media).collect();
    let new: Vec<(String, Media)> = new.iter().filter_map(media).collect();
    let mut changes = Vec::new();
    for (mid, m) in &old {
        let now = new.iter().find(|(n, _)| n == mid).map(|(_, m)| m);
        if let Some(p) = &m.publish
            && now.and_then(|n| n.publish.as_ref()) != Some(p)
        {
            changes.push(Change::Unpublished { mid: mid.clone() });
        }
        if let Some(s) = &m.subscribe
            && !now
                .and_then(|n| n.subscribe.as_ref())
                .is_some_and(|n| same_stream(n, s))
        {
            changes.push(Change::Unsubscribed {
                mid: mid.clone(),
                track: s.track.clone(),
            });
        }
    }
    for (mid, m) in &new {
        let before = old.iter().find(|(o, _)| o == mid).map(|(_, m)| m);
        if let Some(p) = &m.publish
            && before.and_then(|b| b.publish.as_ref()) != Some(p)
        {
            changes.push(Change::Published {
                mid: mid.clone(),
                track: p.clone(),
            });
        }
        if let Some(s) = &m.subscribe
            && !before
                .and_then(|b| b.subscribe.as_ref())
                .is_some_and(|b| same_stream(b, s))
        {
            changes.push(Change::Subscribed {
                mid: mid.clone(),
                track: s.clone(),
            });
        }
    }
    changes
}
