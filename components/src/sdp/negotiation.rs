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
//! `answer` module for what they are); the JSEP endpoints shoal serves read them
//! there whichever section BUNDLE tags.

use super::answer::{
    TransportAttributes, is_data_section, offerer_tagged, rejected_section, remote_max_message_size,
};
use super::codec::Codec;
use super::{
    AnswerParams, Attribute, BUNDLE, Connection, Direction, Extmap, FORMAT_DATACHANNEL, Group,
    HashFunction, MAX_MEDIA, MediaDescription, MediaKind, Msid, Origin, PROTO_RTP_SAVPF,
    SessionDescription, Setup, Ssrc, SsrcGroup,
};

/// RFC 8843 §15.2: the mid header extension.
pub const EXT_MID: &str = "urn:ietf:params:rtp-hdrext:sdes:mid";
/// RFC 6464 §4: the client-to-mixer audio level header extension.
pub const EXT_AUDIO_LEVEL: &str = "urn:ietf:params:rtp-hdrext:ssrc-audio-level";
/// RFC 8852 §3.1: the RtpStreamId header extension.
pub const EXT_RID: &str = "urn:ietf:params:rtp-hdrext:sdes:rtp-stream-id";
/// RFC 8852 §3.2: the RepairedRtpStreamId header extension.
pub const EXT_REPAIRED_RID: &str = "urn:ietf:params:rtp-hdrext:sdes:repaired-rtp-stream-id";

/// Tracks one participant may publish: the shard's limit per peer.
pub const MAX_PUBLISHED: usize = 32;
/// RFC 8285 §4.2: one-byte header extension ids are 1 to 14.
const MAX_ONE_BYTE_ID: u16 = 14;
/// Dynamic RTP payload types (RFC 3551 §3) shoal picks from for its own sections.
const DYNAMIC_PAYLOAD_TYPES: std::ops::RangeInclusive<u8> = 96..=127;
/// The first mids shoal generates: `s0`, `s1`, … (RFC 8829 §5.2.1: 3 bytes or less
/// for a while, and no user information).
const MID_PREFIX: &str = "s";

/// The extensions shoal accepts from a publisher of `kind`: the mid (RFC 8843 §9.2
/// demultiplexing), the audio level it forwards, and the stream ids (RFC 8852).
fn receivable(kind: &MediaKind, uri: &str) -> bool {
    match uri {
        EXT_MID => true,
        EXT_AUDIO_LEVEL => *kind == MediaKind::Audio,
        EXT_RID | EXT_REPAIRED_RID => *kind == MediaKind::Video,
        _ => false,
    }
}

/// The extensions shoal writes on what it sends to a subscriber of `kind`.
fn sendable(kind: &MediaKind) -> &'static [&'static str] {
    match kind {
        MediaKind::Audio => &[EXT_MID, EXT_AUDIO_LEVEL],
        _ => &[EXT_MID],
    }
}

/// A room track a participant may be sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrackSource {
    /// The room's id for the track.
    pub id: String,
    /// Audio or video.
    pub kind: MediaKind,
    /// The MediaStream id subscribers see in `a=msid` (RFC 8830 §2) and use as CNAME,
    /// so one publisher's audio and video are synchronized together (RFC 3550 §6.5.1).
    pub stream_id: String,
    /// The format the publisher sends (its payload types are the publisher's).
    pub codec: Codec,
}

/// What a participant publishes in one section.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Published {
    /// Audio or video.
    pub kind: MediaKind,
    /// The one codec shoal accepted for it, with the participant's payload types.
    pub codec: Codec,
    /// Its SSRC, when the offer announced one (`a=ssrc`, RFC 5576); otherwise shoal
    /// learns it from the mid header extension (RFC 8843 §9.2).
    pub ssrc: Option<u32>,
    /// Its retransmission SSRC (`a=ssrc-group:FID`, RFC 5576 §4.2 and RFC 4588 §8.1).
    pub rtx_ssrc: Option<u32>,
    /// Its `a=msid` (RFC 8830 §2), if any.
    pub msid: Option<Msid>,
    /// The header extensions agreed for it (the participant's ids).
    pub extensions: Vec<Extmap>,
}

/// A room track shoal sends to the participant in one section.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Subscribed {
    /// The room's id for the track.
    pub track: String,
    /// The MediaStream id (and CNAME).
    pub stream_id: String,
    /// The codec with the payload types of this participant's session.
    pub codec: Codec,
    /// The SSRC shoal sends it with.
    pub ssrc: u32,
    /// The SSRC of its retransmissions, when RTX is negotiated.
    pub rtx_ssrc: Option<u32>,
    /// The header extensions agreed for it (this session's ids).
    pub extensions: Vec<Extmap>,
}

/// One media section of the session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Section {
    /// Its mid (RFC 5888 §4), when it has one.
    pub mid: Option<String>,
    /// Audio, video or application.
    pub kind: MediaKind,
    /// The transport protocol of its `m=` line.
    pub proto: String,
    /// What it carries.
    pub state: SectionState,
}

/// What a section carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SectionState {
    /// The data channel association (RFC 8841).
    Data,
    /// RTP, in either or both directions, or none (`inactive`).
    Media(Box<Media>),
    /// Rejected or disabled: port 0. Its index may be recycled.
    Closed,
}

/// A media section's two directions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Media {
    /// What the participant sends in it.
    pub publish: Option<Published>,
    /// What shoal sends in it.
    pub subscribe: Option<Subscribed>,
    /// The codecs the participant can receive in it (for placing a track later).
    pub receivable: Vec<Codec>,
    /// Whether the participant last agreed to receive in it.
    pub receives: bool,
    /// Whether the section multiplexes RTCP (RFC 5761).
    pub rtcp_mux: bool,
    /// Whether reduced-size RTCP was agreed (RFC 5506 §5).
    pub rtcp_rsize: bool,
}

impl Media {
    /// The direction shoal states for it.
    fn direction(&self) -> Direction {
        match (self.subscribe.is_some(), self.publish.is_some()) {
            (true, true) => Direction::SendRecv,
            (true, false) => Direction::SendOnly,
            (false, true) => Direction::RecvOnly,
            (false, false) => Direction::Inactive,
        }
    }
}

/// A change to what flows, for the shard.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// The participant publishes a track in section `mid`.
    Published {
        /// The section's mid (or its index as text when it has none).
        mid: String,
        /// What it publishes.
        track: Published,
    },
    /// The participant no longer publishes in section `mid`.
    Unpublished {
        /// The section's mid.
        mid: String,
    },
    /// shoal sends a room track to the participant in section `mid`.
    Subscribed {
        /// The section's mid.
        mid: String,
        /// What shoal sends.
        track: Subscribed,
    },
    /// shoal no longer sends the room track `track` in section `mid`.
    Unsubscribed {
        /// The section's mid.
        mid: String,
        /// The room's id for the track.
        track: String,
    },
}

/// The offerer's transport, fixed by the first offer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteTransport {
    /// The participant's ICE ufrag.
    pub ufrag: String,
    /// The participant's ICE password.
    pub pwd: String,
    /// SHA-256 of the certificate it must present in DTLS.
    pub fingerprint_sha256: [u8; 32],
    /// shoal's DTLS role: `Passive` (DTLS server) or `Active` (DTLS client).
    pub setup: Setup,
}

/// An answer shoal made, and what it changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answered {
    /// The answer to send back.
    pub sdp: SessionDescription,
    /// The participant's transport.
    pub transport: RemoteTransport,
    /// What changed.
    pub changes: Vec<Change>,
    /// The mid of the data channel section, if there is one.
    pub data_mid: Option<String>,
    /// The largest message the participant accepts, which shoal must not exceed when
    /// it sends: the data section's `a=max-message-size` (RFC 8829 §5.8.2 parses and
    /// stores it), [`super::DEFAULT_REMOTE_MAX_MESSAGE_SIZE`] when absent, and
    /// `usize::MAX` for 0, which RFC 8841 §6 gives as "no limit".
    pub remote_max_message_size: usize,
}

/// Why an offer or an answer from the participant cannot be taken.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NegotiationError {
    /// No section has a transport shoal can use.
    #[error("the offer has no section shoal can accept (audio, video or a data channel)")]
    NoUsableSection,
    /// The transport section has no ICE credentials.
    #[error("the offer has no a=ice-ufrag and a=ice-pwd")]
    MissingIceCredentials,
    /// The transport section has no `sha-256` fingerprint.
    #[error("the offer has no a=fingerprint:sha-256")]
    MissingSha256Fingerprint,
    /// `a=setup:holdconn`.
    #[error("the offer says a=setup:holdconn; shoal needs a DTLS connection")]
    HoldConn,
    /// New ICE credentials: an ICE restart, which shoal does not do.
    #[error("the offer restarts ICE (new ice-ufrag/ice-pwd); shoal does not support ICE restarts")]
    IceRestart,
    /// A new certificate fingerprint within the session.
    #[error("the offer changes the DTLS certificate fingerprint")]
    FingerprintChanged,
    /// An answer arrived with no offer of shoal's outstanding.
    #[error("an answer arrived but shoal has no offer outstanding")]
    NoOfferOutstanding,
    /// The answer does not match the offer (RFC 3264 §6: one section per offered one,
    /// same mids, a DTLS role consistent with the offer's).
    #[error("the answer does not match shoal's offer: {0}")]
    AnswerMismatch(&'static str),
    /// An offer with fewer sections than the session has (RFC 3264 §8: sections are
    /// never removed, only disabled).
    #[error("the offer has fewer m= sections than the session (RFC 3264 §8)")]
    SectionsRemoved,
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
        }
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

    /// Answers the participant's `offer` (RFC 8829 §5.3), giving its receiving sections
    /// tracks from `tracks` that are not yet placed. `new_ssrc` yields random SSRCs;
    /// shoal skips zero and any already in the session.
    pub fn answer(
        &mut self,
        offer: &SessionDescription,
        params: &AnswerParams<'_>,
        tracks: &[TrackSource],
        new_ssrc: &mut dyn FnMut() -> u32,
    ) -> Result<Answered, NegotiationError> {
        if offer.media.len() < self.sections.len() {
            return Err(NegotiationError::SectionsRemoved);
        }
        let bundle = offer.bundle_mids().unwrap_or_default();
        let tag = offerer_tagged(offer, bundle);
        let data = offer
            .media
            .iter()
            .position(|m| is_data_section(m, bundle, tag.is_some()));
        let usable = |m: &MediaDescription| {
            m.port != 0 && m.proto == PROTO_RTP_SAVPF && is_av(&m.kind) && !m.formats.is_empty()
        };
        let transport_index = tag
            .or(data.filter(|i| offer.media[*i].port != 0))
            .or_else(|| offer.media.iter().position(usable))
            .ok_or(NegotiationError::NoUsableSection)?;
        let transport = self.read_transport(offer, &offer.media[transport_index])?;
        // RFC 8829 §4.1.10.2: the polite side rolls its own offer back on glare.
        self.pending = None;
        for m in &offer.media {
            for e in m.extmaps() {
                self.note_extension(&e.uri, e.id);
            }
            let codecs = Codec::read_all(m);
            let forwarded: Vec<u8> = codecs.iter().flat_map(Codec::payload_types).collect();
            for c in codecs {
                if !self
                    .offered_codecs
                    .iter()
                    .any(|o| o.payload_type == c.payload_type)
                {
                    self.offered_codecs.push(c);
                }
            }
            for pt in m.payload_types() {
                if !forwarded.contains(&pt) && !self.foreign_payload_types.contains(&pt) {
                    self.foreign_payload_types.push(pt);
                }
            }
        }

        let old = self.sections.clone();
        let mut sections: Vec<Section> = Vec::with_capacity(offer.media.len());
        let mut placed: Vec<String> = Vec::new();
        for (index, offered) in offer.media.iter().enumerate() {
            let previous = old.get(index).filter(|s| s.mid.as_deref() == offered.mid());
            let bundled_only = tag.is_some()
                && offered.bundle_only()
                && offered
                    .mid()
                    .is_some_and(|mid| bundle.iter().any(|b| b == mid));
            let open = offered.port != 0 || bundled_only;
            let state = if Some(index) == data {
                SectionState::Data
            } else if !open || !is_av(&offered.kind) || offered.proto != PROTO_RTP_SAVPF {
                SectionState::Closed
            } else {
                self.answer_media(offered, previous, tracks, &sections, &mut placed, new_ssrc)
            };
            // RFC 8843 §7.3.3: the offerer-tagged section cannot be rejected; one shoal
            // has no use for is kept open and inactive.
            let state = match state {
                SectionState::Closed if Some(index) == tag => SectionState::Media(Box::default()),
                other => other,
            };
            sections.push(Section {
                mid: offered.mid().map(str::to_owned),
                kind: offered.kind.clone(),
                proto: offered.proto.clone(),
                state,
            });
        }
        self.bundle = tag.is_some();
        if let Some(d) = data {
            self.remote_max_message_size = remote_max_message_size(&offer.media[d]);
        }

        let attributes = TransportAttributes {
            params,
            setup: transport.setup,
            connection: Connection::new(params.candidate.ip()),
        };
        self.version += 1;
        let mut sdp = SessionDescription::new(Origin::new(self.session_id, self.version));
        sdp.push_attribute(Attribute::IceLite);
        let mut written = Vec::with_capacity(sections.len());
        for (section, offered) in sections.iter().zip(&offer.media) {
            let m = match &section.state {
                SectionState::Closed => rejected_section(offered),
                SectionState::Data => attributes.data_section(offered),
                SectionState::Media(media) if media_is_empty(media) => {
                    if Codec::read_all(offered).is_empty() {
                        attributes.inactive_section(offered)
                    } else {
                        self.media_section(&attributes, section, media)
                    }
                }
                SectionState::Media(media) => self.media_section(&attributes, section, media),
            };
            written.push(m);
        }
        // RFC 8829 §5.3.1 and RFC 8843 §7.3.1: a BUNDLE group only when one was
        // offered, the tagged section's mid first, then the other accepted mids.
        if let Some(t) = tag {
            let tag_mid = offer.media[t].mid();
            let mids: Vec<&str> = tag_mid
                .into_iter()
                .chain(bundle.iter().map(String::as_str).filter(|mid| {
                    Some(*mid) != tag_mid
                        && sections.iter().any(|s| {
                            s.mid.as_deref() == Some(*mid) && s.state != SectionState::Closed
                        })
                }))
                .collect();
            sdp.push_attribute(Attribute::Group(Group::new(BUNDLE, &mids)));
        }
        for m in written {
            sdp.push_media(m);
        }

        // A section the participant stopped (port 0) turns its track down (JSEP
        // §5.2.2: a stopped transceiver's section is not revived).
        for (index, section) in sections.iter().enumerate() {
            if section.state == SectionState::Closed
                && let Some(Section {
                    state: SectionState::Media(m),
                    ..
                }) = old.get(index)
                && let Some(x) = &m.subscribe
                && !self.declined.contains(&x.track)
            {
                self.declined.push(x.track.clone());
            }
        }
        let changes = diff(&old, &sections);
        self.retire(&sections);
        self.sections = sections;
        self.transport = Some(transport.clone());
        Ok(Answered {
            sdp,
            transport,
            changes,
            data_mid: data.and_then(|d| offer.media[d].mid().map(str::to_owned)),
            remote_max_message_size: self.remote_max_message_size,
        })
    }

    /// Reads and checks the offerer's transport from `m` (RFC 8839 §5.4, RFC 8122 §5,
    /// RFC 4145 §4). Later offers must keep it: shoal does no ICE restart and keeps one
    /// DTLS association.
    fn read_transport(
        &self,
        offer: &SessionDescription,
        m: &MediaDescription,
    ) -> Result<RemoteTransport, NegotiationError> {
        let (ufrag, pwd) = offer
            .ice_credentials_for(m)
            .ok_or(NegotiationError::MissingIceCredentials)?;
        let fingerprint_sha256 = offer
            .fingerprints_for(m)
            .find(|f| f.hash == HashFunction::Sha256)
            .and_then(|f| <[u8; 32]>::try_from(f.bytes.as_slice()).ok())
            .ok_or(NegotiationError::MissingSha256Fingerprint)?;
        let offered_setup = offer.setup_for(m).unwrap_or(Setup::Active);
        if offered_setup == Setup::HoldConn {
            return Err(NegotiationError::HoldConn);
        }
        if let Some(t) = &self.transport {
            if t.ufrag != ufrag || t.pwd != pwd {
                return Err(NegotiationError::IceRestart);
            }
            if t.fingerprint_sha256 != fingerprint_sha256 {
                return Err(NegotiationError::FingerprintChanged);
            }
            // RFC 8829 §5.3.2: the answer keeps the role of the existing association.
            return Ok(t.clone());
        }
        // RFC 4145 §4 (absent means active); shoal prefers to be the DTLS server.
        let setup = match offered_setup {
            Setup::ActPass | Setup::Active => Setup::Passive,
            Setup::Passive | Setup::HoldConn => Setup::Active,
        };
        Ok(RemoteTransport {
            ufrag: ufrag.to_owned(),
            pwd: pwd.to_owned(),
            fingerprint_sha256,
            setup,
        })
    }

    /// What an offered audio or video section becomes (RFC 3264 §6.1 directions).
    fn answer_media(
        &mut self,
        offered: &MediaDescription,
        previous: Option<&Section>,
        tracks: &[TrackSource],
        earlier: &[Section],
        placed: &mut Vec<String>,
        new_ssrc: &mut dyn FnMut() -> u32,
    ) -> SectionState {
        let direction = offered.direction().unwrap_or(Direction::SendRecv);
        let sends = matches!(direction, Direction::SendOnly | Direction::SendRecv);
        let receives = matches!(direction, Direction::RecvOnly | Direction::SendRecv);
        let codecs = Codec::read_all(offered);
        let previous = match previous.map(|s| &s.state) {
            Some(SectionState::Media(m)) => Some(m),
            _ => None,
        };
        let extensions: Vec<Extmap> = offered
            .extmaps()
            .filter(|e| receivable(&offered.kind, &e.uri))
            .map(|e| Extmap::new(e.id, &e.uri))
            .collect();

        // What the shard will take: at most MAX_PUBLISHED tracks, each with SSRCs no
        // earlier section of this offer claims.
        let published_before: Vec<&Published> = earlier
            .iter()
            .filter_map(|s| match &s.state {
                SectionState::Media(m) => m.publish.as_ref(),
                _ => None,
            })
            .collect();
        let publish = sends
            .then(|| {
                if published_before.len() >= MAX_PUBLISHED {
                    return None;
                }
                // Keep the codec already agreed while the offer still has it.
                let kept = previous
                    .and_then(|p| p.publish.as_ref())
                    .and_then(|p| codecs.iter().find(|c| c.same_format(&p.codec)));
                let mut codec = kept.or(codecs.first())?.clone();
                codec.feedback = codec.feedback.intersect(super::codec::Feedback::ALL);
                let (ssrc, rtx_ssrc) = offered_ssrcs(offered);
                let rtx_ssrc = rtx_ssrc.filter(|_| codec.rtx_payload_type.is_some());
                let claimed = |x: Option<u32>| {
                    x.is_some_and(|x| {
                        published_before
                            .iter()
                            .any(|p| p.ssrc == Some(x) || p.rtx_ssrc == Some(x))
                    })
                };
                if claimed(ssrc) || claimed(rtx_ssrc) {
                    return None;
                }
                Some(Published {
                    kind: offered.kind.clone(),
                    codec,
                    ssrc,
                    rtx_ssrc,
                    msid: offered.msids().next().cloned(),
                    extensions: extensions.clone(),
                })
            })
            .flatten();

        let subscribe = if receives {
            match previous.and_then(|p| p.subscribe.as_ref()) {
                Some(s) if tracks.iter().any(|t| t.id == s.track) => {
                    // The codec must still be offered with the payload type agreed.
                    codecs
                        .iter()
                        .find(|c| c.same_format(&s.codec) && c.payload_type == s.codec.payload_type)
                        .map(|_| s.clone())
                }
                _ => None,
            }
            .or_else(|| {
                let used: Vec<u32> = self.used_ssrcs(earlier);
                let track = tracks.iter().find(|t| {
                    t.kind == offered.kind
                        && !placed.contains(&t.id)
                        && !self.declined.contains(&t.id)
                        && !self.is_placed(&t.id)
                        && codecs.iter().any(|c| c.same_format(&t.codec))
                })?;
                let codec = codecs.iter().find(|c| c.same_format(&track.codec))?;
                let ssrc = fresh_ssrc(new_ssrc, &used);
                let rtx_ssrc = codec
                    .rtx_payload_type
                    .map(|_| fresh_ssrc(new_ssrc, &[used.as_slice(), &[ssrc]].concat()));
                let mut codec = codec.clone();
                codec.fmtp = track.codec.fmtp.clone().or(codec.fmtp);
                codec.feedback = codec.feedback.intersect(super::codec::Feedback::ALL);
                Some(Subscribed {
                    track: track.id.clone(),
                    stream_id: track.stream_id.clone(),
                    codec,
                    ssrc,
                    rtx_ssrc,
                    extensions: extensions
                        .iter()
                        .filter(|e| sendable(&offered.kind).contains(&e.uri.as_str()))
                        .cloned()
                        .collect(),
                })
            })
        } else {
            // A participant that stops receiving a track turns it down.
            if let Some(s) = previous.and_then(|p| p.subscribe.as_ref())
                && !self.declined.contains(&s.track)
            {
                self.declined.push(s.track.clone());
            }
            None
        };
        if let Some(s) = &subscribe {
            placed.push(s.track.clone());
        }
        if publish.is_none() && subscribe.is_none() && codecs.is_empty() {
            return SectionState::Closed;
        }
        SectionState::Media(Box::new(Media {
            publish,
            subscribe,
            receivable: if receives { codecs } else { Vec::new() },
            receives,
            rtcp_mux: offered.rtcp_mux(),
            rtcp_rsize: offered.rtcp_rsize(),
        }))
    }

    /// Whether a track is already sent somewhere in the agreed session.
    fn is_placed(&self, track: &str) -> bool {
        self.sections.iter().any(|s| match &s.state {
            SectionState::Media(m) => m.subscribe.as_ref().is_some_and(|x| x.track == track),
            _ => false,
        })
    }

    /// Every SSRC in `sections` and the agreed session.
    fn used_ssrcs(&self, sections: &[Section]) -> Vec<u32> {
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

    /// Remembers `uri` as `id` unless the session names it already.
    fn note_extension(&mut self, uri: &str, id: u16) {
        if !self.extension_ids.iter().any(|(u, _)| u == uri) {
            self.extension_ids.push((uri.to_owned(), id));
        }
    }

    /// The session's id for `uri`, allocating the lowest free one-byte id.
    fn extension_id(&mut self, uri: &str) -> Option<u16> {
        if let Some((_, id)) = self.extension_ids.iter().find(|(u, _)| u == uri) {
            return Some(*id);
        }
        let id =
            (1..=MAX_ONE_BYTE_ID).find(|id| !self.extension_ids.iter().any(|(_, i)| i == id))?;
        self.extension_ids.push((uri.to_owned(), id));
        Some(id)
    }

    /// Writes one audio or video section shoal answers or offers.
    fn media_section(
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

    /// Makes an offer (RFC 8829 §5.2.2) that sends the participant every track of
    /// `tracks` it is not yet sent (and has not turned down) and stops those no longer
    /// in `tracks`. `None` when nothing would change, before the participant's first
    /// offer, or while an offer of shoal's is outstanding.
    pub fn offer(
        &mut self,
        params: &AnswerParams<'_>,
        tracks: &[TrackSource],
        new_ssrc: &mut dyn FnMut() -> u32,
    ) -> Option<SessionDescription> {
        if self.transport.is_none() || self.pending.is_some() {
            return None;
        }
        let mut sections = self.sections.clone();
        let mut changed = false;
        // Stop what is gone.
        for s in &mut sections {
            if let SectionState::Media(m) = &mut s.state
                && m.subscribe
                    .as_ref()
                    .is_some_and(|x| !tracks.iter().any(|t| t.id == x.track))
            {
                m.subscribe = None;
                changed = true;
                // A section that carried only that track is disabled (RFC 8843 §7.5.3)
                // unless shoal's own section for it may be reused by the participant.
                if m.publish.is_none()
                    && s.mid
                        .as_deref()
                        .is_some_and(|mid| self.own_mids.iter().any(|o| o == mid))
                {
                    s.state = SectionState::Closed;
                }
            }
        }
        // Place what is new.
        for track in tracks {
            if self.declined.contains(&track.id) || placed_in(&sections, &track.id) {
                continue;
            }
            let used = self.used_ssrcs(&sections);
            // An open section of the participant's that receives this kind and codec.
            let open = sections.iter().position(|s| match &s.state {
                SectionState::Media(m) => {
                    s.kind == track.kind
                        && m.subscribe.is_none()
                        && m.receives
                        && m.receivable.iter().any(|c| c.same_format(&track.codec))
                }
                _ => false,
            });
            let (index, codec) = match open {
                Some(i) => {
                    let SectionState::Media(m) = &sections[i].state else {
                        continue;
                    };
                    let Some(c) = m.receivable.iter().find(|c| c.same_format(&track.codec)) else {
                        continue;
                    };
                    let mut c = c.clone();
                    c.fmtp = track.codec.fmtp.clone().or(c.fmtp);
                    (i, c)
                }
                None => {
                    let codec = self.session_codec(&sections, &track.codec);
                    let mid = self.new_mid(&sections);
                    let section = Section {
                        mid: Some(mid),
                        kind: track.kind.clone(),
                        proto: PROTO_RTP_SAVPF.to_owned(),
                        state: SectionState::Media(Box::new(Media {
                            receives: true,
                            rtcp_mux: true,
                            rtcp_rsize: true,
                            ..Media::default()
                        })),
                    };
                    // RFC 8829 §5.2.2: a section with port 0 is recycled in place.
                    match sections
                        .iter()
                        .position(|s| s.state == SectionState::Closed)
                    {
                        Some(i) => {
                            sections[i] = section;
                            (i, codec)
                        }
                        None if sections.len() < MAX_MEDIA => {
                            sections.push(section);
                            (sections.len() - 1, codec)
                        }
                        None => continue,
                    }
                }
            };
            let ssrc = fresh_ssrc(new_ssrc, &used);
            let rtx_ssrc = codec
                .rtx_payload_type
                .map(|_| fresh_ssrc(new_ssrc, &[used.as_slice(), &[ssrc]].concat()));
            let extensions = sendable(&track.kind)
                .iter()
                .filter_map(|uri| Some(Extmap::new(self.extension_id(uri)?, uri)))
                .collect();
            if let SectionState::Media(m) = &mut sections[index].state {
                m.subscribe = Some(Subscribed {
                    track: track.id.clone(),
                    stream_id: track.stream_id.clone(),
                    codec,
                    ssrc,
                    rtx_ssrc,
                    extensions,
                });
                changed = true;
            }
        }
        if !changed {
            return None;
        }

        // RFC 5763 §5: the offerer of a DTLS-SRTP session says actpass; the answer must
        // keep the existing roles (checked in `accept`).
        let attributes = TransportAttributes {
            params,
            setup: Setup::ActPass,
            connection: Connection::new(params.candidate.ip()),
        };
        self.version += 1;
        let mut sdp = SessionDescription::new(Origin::new(self.session_id, self.version));
        sdp.push_attribute(Attribute::IceLite);
        if self.bundle {
            let mids: Vec<&str> = sections
                .iter()
                .filter(|s| s.state != SectionState::Closed)
                .filter_map(|s| s.mid.as_deref())
                .collect();
            sdp.push_attribute(Attribute::Group(Group::new(BUNDLE, &mids)));
        }
        for s in &sections {
            let m = match &s.state {
                SectionState::Closed => {
                    let mut m =
                        MediaDescription::new(s.kind.clone(), 0, &s.proto, &[closed_format(s)]);
                    m.connections
                        .push(Connection::new(std::net::Ipv4Addr::UNSPECIFIED.into()));
                    if let Some(mid) = &s.mid {
                        m.push_attribute(Attribute::Mid(mid.clone()));
                    }
                    m
                }
                SectionState::Data => {
                    let mut m = attributes.section_for(
                        &s.kind,
                        &s.proto,
                        s.mid.as_deref(),
                        false,
                        &[FORMAT_DATACHANNEL],
                    );
                    m.push_attribute(Attribute::SctpPort(super::SCTP_PORT))
                        .push_attribute(Attribute::MaxMessageSize(super::MAX_MESSAGE_SIZE));
                    m
                }
                SectionState::Media(media) => self.media_section(&attributes, s, media),
            };
            sdp.push_media(m);
        }
        self.pending = Some(sections);
        Some(sdp)
    }

    /// A codec for a section shoal adds: the track's format with the publisher's payload
    /// types where this session does not use them for something else (RFC 8843 §9.1:
    /// one payload type, one format, across the BUNDLE group), else free ones.
    fn session_codec(&self, sections: &[Section], codec: &Codec) -> Codec {
        let in_use: Vec<(u8, Option<&Codec>)> = sections
            .iter()
            .filter_map(|s| match &s.state {
                SectionState::Media(m) => Some(m),
                _ => None,
            })
            .flat_map(|m| {
                m.publish
                    .iter()
                    .map(|p| &p.codec)
                    .chain(m.subscribe.iter().map(|s| &s.codec))
                    .chain(&m.receivable)
            })
            .chain(&self.offered_codecs)
            .flat_map(|c| {
                [(c.payload_type, Some(c))]
                    .into_iter()
                    .chain(c.rtx_payload_type.map(|r| (r, None)))
            })
            .collect();
        let free = |pt: u8, taken: &[u8], for_codec: Option<&Codec>| {
            !taken.contains(&pt)
                && !self.foreign_payload_types.contains(&pt)
                && in_use.iter().all(|(p, c)| {
                    *p != pt || matches!((c, for_codec), (Some(c), Some(f)) if c.same_format(f) && c.payload_type == pt)
                })
        };
        let mut taken = Vec::new();
        let mut out = codec.clone();
        out.payload_type = if free(codec.payload_type, &taken, Some(codec)) {
            codec.payload_type
        } else {
            DYNAMIC_PAYLOAD_TYPES
                .clone()
                .find(|pt| free(*pt, &taken, Some(codec)))
                .unwrap_or(codec.payload_type)
        };
        taken.push(out.payload_type);
        out.rtx_payload_type = codec.rtx_payload_type.map(|rtx| {
            if free(rtx, &taken, None) {
                rtx
            } else {
                DYNAMIC_PAYLOAD_TYPES
                    .clone()
                    .find(|pt| free(*pt, &taken, None))
                    .unwrap_or(rtx)
            }
        });
        out
    }

    /// A mid no section of the session has.
    fn new_mid(&mut self, sections: &[Section]) -> String {
        loop {
            let mid = format!("{MID_PREFIX}{}", self.next_mid);
            self.next_mid += 1;
            if !sections
                .iter()
                .chain(&self.sections)
                .any(|s| s.mid.as_deref() == Some(mid.as_str()))
            {
                self.own_mids.push(mid.clone());
                return mid;
            }
        }
    }

    /// Applies the participant's answer to shoal's outstanding offer. An answer shoal
    /// cannot take ends the offer too (rolled back): the session stays as it was agreed,
    /// and the next change offers again.
    pub fn accept(&mut self, answer: &SessionDescription) -> Result<Vec<Change>, NegotiationError> {
        let result = self.accept_pending(answer);
        self.pending = None;
        result
    }

    fn accept_pending(
        &mut self,
        answer: &SessionDescription,
    ) -> Result<Vec<Change>, NegotiationError> {
        let offered = self
            .pending
            .as_ref()
            .ok_or(NegotiationError::NoOfferOutstanding)?;
        if answer.media.len() != offered.len() {
            return Err(NegotiationError::AnswerMismatch(
                "a different number of m= sections",
            ));
        }
        let our_setup = self.transport.as_ref().map(|t| t.setup);
        let mut sections = Vec::with_capacity(offered.len());
        for (s, a) in offered.iter().zip(&answer.media) {
            if a.mid() != s.mid.as_deref() {
                return Err(NegotiationError::AnswerMismatch("a section's mid differs"));
            }
            if a.port != 0
                && s.state != SectionState::Closed
                && let (Some(ours), Some(theirs)) = (our_setup, answer.setup_for(a))
                && (theirs == ours || !matches!(theirs, Setup::Active | Setup::Passive))
            {
                return Err(NegotiationError::AnswerMismatch(
                    "a=setup does not keep the DTLS roles",
                ));
            }
            let state = match &s.state {
                _ if a.port == 0 => {
                    if let SectionState::Media(m) = &s.state
                        && let Some(x) = &m.subscribe
                        && !self.declined.contains(&x.track)
                    {
                        self.declined.push(x.track.clone());
                    }
                    SectionState::Closed
                }
                SectionState::Media(m) => {
                    let direction = a.direction().unwrap_or(Direction::SendRecv);
                    let receives = matches!(direction, Direction::RecvOnly | Direction::SendRecv);
                    let sends = matches!(direction, Direction::SendOnly | Direction::SendRecv);
                    let mut m = m.clone();
                    // RFC 3264 §6.1: an answer that does not send stops the publishing.
                    if !sends {
                        m.publish = None;
                    }
                    if let Some(x) = &m.subscribe {
                        let has_codec = a.payload_types().any(|pt| pt == x.codec.payload_type);
                        if !receives || !has_codec {
                            if !self.declined.contains(&x.track) {
                                self.declined.push(x.track.clone());
                            }
                            m.subscribe = None;
                        } else if let Some(x) = &mut m.subscribe {
                            // Only the extensions the answer kept (RFC 8285 §6).
                            x.extensions
                                .retain(|e| a.extmaps().any(|ae| ae.id == e.id && ae.uri == e.uri));
                            x.codec.rtx_payload_type = x
                                .codec
                                .rtx_payload_type
                                .filter(|rtx| a.payload_types().any(|pt| pt == *rtx));
                            if x.codec.rtx_payload_type.is_none() {
                                x.rtx_ssrc = None;
                            }
                        }
                    }
                    m.receives = receives;
                    if m.subscribe.is_none() && m.receivable.is_empty() {
                        m.receivable = Codec::read_all(a);
                    }
                    SectionState::Media(m)
                }
                other => other.clone(),
            };
            sections.push(Section {
                mid: s.mid.clone(),
                kind: s.kind.clone(),
                proto: s.proto.clone(),
                state,
            });
        }
        let changes = diff(&self.sections, &sections);
        self.retire(&sections);
        self.sections = sections;
        Ok(changes)
    }

    /// Remembers the SSRCs of subscriptions in the agreed sections that `new` no
    /// longer has: they are never given out again in this session (an SRTP index must
    /// not repeat under one key, and the receiver's context forgets them).
    fn retire(&mut self, new: &[Section]) {
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

    /// Drops shoal's outstanding offer (the participant rejected it, or it was lost).
    pub fn rollback(&mut self) {
        self.pending = None;
    }
}

fn is_av(kind: &MediaKind) -> bool {
    matches!(kind, MediaKind::Audio | MediaKind::Video)
}

fn media_is_empty(m: &Media) -> bool {
    m.publish.is_none() && m.subscribe.is_none()
}

fn placed_in(sections: &[Section], track: &str) -> bool {
    sections.iter().any(|s| match &s.state {
        SectionState::Media(m) => m.subscribe.as_ref().is_some_and(|x| x.track == track),
        _ => false,
    })
}

/// A format for a disabled section's `m=` line (RFC 8866 §5.14 needs one).
fn closed_format(s: &Section) -> &'static str {
    if s.kind == MediaKind::Application {
        FORMAT_DATACHANNEL
    } else {
        "0"
    }
}

/// The primary and RTX SSRCs an offered section announces: the first `FID` group
/// (RFC 5576 §4.2, RFC 4588 §8.1), else the first `a=ssrc`.
fn offered_ssrcs(m: &MediaDescription) -> (Option<u32>, Option<u32>) {
    if let Some(g) = m
        .ssrc_groups()
        .find(|g| g.semantics == "FID" && g.ssrcs.len() == 2)
    {
        return (g.ssrcs.first().copied(), g.ssrcs.get(1).copied());
    }
    (m.ssrcs().next().map(|s| s.ssrc), None)
}

/// A random SSRC that is neither zero nor in `used`.
fn fresh_ssrc(new_ssrc: &mut dyn FnMut() -> u32, used: &[u32]) -> u32 {
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
fn same_stream(a: &Subscribed, b: &Subscribed) -> bool {
    a.track == b.track && a.ssrc == b.ssrc
}

/// The changes from `old` to `new`, removals first.
fn diff(old: &[Section], new: &[Section]) -> Vec<Change> {
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
