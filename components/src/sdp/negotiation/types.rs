//! What a negotiation agrees (sections, the tracks published and subscribed in
//! them) and what it reports (changes, the remote transport, errors).

use crate::media::LayerSpec;
use crate::sdp::codec::Codec;
use crate::sdp::{Direction, Extmap, MediaKind, Msid, SessionDescription, Setup};

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
    /// Its simulcast streams, when it sends more than one (RFC 8853 with rids, or an
    /// `a=ssrc-group:SIM`), in the offer's order; empty otherwise.
    pub layers: Vec<LayerSpec>,
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
    pub(super) fn direction(&self) -> Direction {
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
    /// A new ice-ufrag with the old ice-pwd, or the other way round: an ICE restart
    /// changes both (RFC 8839 §4.4.1.1.1), anything else keeps both.
    #[error(
        "the offer changes only one of ice-ufrag and ice-pwd; an ICE restart changes both \
         (RFC 8839 §4.4.1.1.1)"
    )]
    PartialIceRestart,
    /// ICE credentials for a session that has none yet.
    #[error("no session: nothing to restart")]
    NoSession,
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
