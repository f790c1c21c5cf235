//! SDP (RFC 8866) as a typed model, parsed and serialized as JSEP (RFC 8829) uses it.
//!
//! [`SessionDescription::parse`] reads an offer or answer into a session level and a list
//! of [`MediaDescription`]s. Each level keeps its attributes in one ordered
//! `Vec<`[`Attribute`]`>`: the attributes WebRTC uses are typed (ICE, DTLS, BUNDLE, codecs,
//! header extensions, sources, rid/simulcast, SCTP), and every other one is kept verbatim
//! as [`Attribute::Other`], so a description serializes back line for line.
//! [`SessionDescription`]'s `Display` (and [`SessionDescription::to_sdp_string`]) writes
//! CRLF-terminated lines in RFC 8866 §5 order; the same types with their `new`
//! constructors and `push_attribute` build the answers shoal writes ([`answer`]).
//!
//! Input is untrusted: it is bounded ([`MAX_SDP_LEN`], [`MAX_LINE_LEN`], [`MAX_MEDIA`],
//! [`MAX_ATTRIBUTES`], [`MAX_FIELDS`]) and every rule it breaks is an [`SdpError`];
//! nothing here panics on input. Lines may end in CRLF or a bare LF (RFC 8866 §5).

mod answer;
mod attribute;
mod candidate;
mod codec;
mod dtls;
mod error;
mod grouping;
mod h264;
mod media;
mod negotiation;
mod parse;
mod rtp;
mod session;
mod simulcast;
mod text;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_attributes;

pub use answer::{
    AnswerParams, DEFAULT_REMOTE_MAX_MESSAGE_SIZE, HOST_PRIORITY, MAX_MESSAGE_SIZE, SCTP_PORT,
    host_priority, remote_max_message_size,
};
pub use attribute::Attribute;
pub use candidate::{Candidate, CandidateType, TcpType};
pub use codec::{Codec, CodecName, Feedback};
pub use dtls::{Fingerprint, HashFunction, Setup};
pub use error::SdpError;
pub use grouping::{BUNDLE, Group, Msid, MsidSemantic};
pub use h264::{H264Level, ProfileLevelId, ProfileLevelIdError};
pub use media::{
    FORMAT_DATACHANNEL, MediaDescription, MediaKind, PROTO_DTLS_SCTP, PROTO_RTP_SAVPF,
};
pub use negotiation::{
    Answered, Change, EXT_ABS_CAPTURE_TIME, EXT_ABS_SEND_TIME, EXT_AUDIO_LEVEL, EXT_MID,
    EXT_REPAIRED_RID, EXT_RID, EXT_TRANSPORT_CC, MAX_PUBLISHED, Media, Negotiation,
    NegotiationError, Published, RemoteTransport, Section, SectionState, Subscribed, TrackSource,
};
pub use rtp::{Direction, Extmap, Fmtp, Rtcp, RtcpFb, RtpMap, Ssrc, SsrcGroup};
pub use session::{Bandwidth, Connection, Origin, SessionDescription, Timing};
pub use simulcast::{Rid, RidDirection, RidRestriction, Simulcast, SimulcastRid, SimulcastStreams};

/// Largest description accepted, in bytes. A Chromium offer with audio, video and a data
/// channel is about 8 KiB; this leaves room for many sections and candidates.
pub const MAX_SDP_LEN: usize = 64 * 1024;
/// Longest line accepted, in bytes, without its terminator. Bounds every list on a line
/// (formats, group mids, candidate extensions, simulcast streams).
pub const MAX_LINE_LEN: usize = 4096;
/// Most media sections in one description.
pub const MAX_MEDIA: usize = 64;
/// Most `a=` lines in one section (session level or one media section).
pub const MAX_ATTRIBUTES: usize = 512;
/// Most other lines (`v o s i u e p c b t r z k m`) in one section.
pub const MAX_FIELDS: usize = 32;
