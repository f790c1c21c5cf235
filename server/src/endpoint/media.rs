//! The client side of a media session with a JSEP answerer, a shoal node first of all:
//! a client endpoint that publishes synthetic audio and video and receives what the
//! node sends, as a browser's `RTCPeerConnection` would negotiate it (RFC 8829), so
//! that load generators and tests exercise the node's real signalling paths.
//!
//! [`media_offer`] writes the first offer: one `sendonly` Opus section and one
//! `sendonly` VP8 section (with RTX, RFC 4588) when the endpoint publishes (WHIP, or a
//! `/signal` participant), and any number of `recvonly` audio and video sections (a
//! WHEP player's). A simulcast publisher's VP8 section sends [`SIMULCAST_LAYERS`]
//! streams, each with its RTX stream, signalled as libwebrtc's legacy simulcast does
//! (`a=ssrc-group:SIM` over the streams, lowest resolution first, and an
//! `a=ssrc-group:FID` per stream, RFC 5576 §4.2), which a node relates by SSRC from
//! the first packet, with no RtpStreamId extension to write. Every section offers the same header extensions under the same ids
//! (RFC 8285 §6: one id space per BUNDLE group): the mid (RFC 8843 §15.2), the audio
//! level (RFC 6464), the transport-wide sequence number
//! (draft-holmer-rmcat-transport-wide-cc-extensions-01) and webrtc's abs-capture-time,
//! which a load generator stamps with the send time to measure latency end to end.
//! Transport is as in [`super::DataOffer`]: no candidates, ICE-controlling, `actpass`.
//!
//! [`MediaOffer::accept`] reads the answer into a [`MediaSession`]: the peer to add,
//! the local sources to add (`Command::AddSource`: what the endpoint sends, with the
//! extensions and feedback the answer kept) and the tracks to receive
//! (`Command::Receive`: the answerer's SSRCs, codec and RTX). [`MediaSession::answer`]
//! answers the answerer's own later offers (RFC 8829 §5.3): a node that adds a room's
//! new tracks to the session as `sendonly` sections gets `recvonly` in return, and the
//! endpoint learns the tracks to receive; sections it no longer sends are answered
//! with port 0.

use rand_core::RngCore;
use shoal_components::dtls::DtlsRole;
use shoal_components::media::{SubscriptionSpec, TrackId, TrackSpec};
use shoal_components::peer::PeerId;
use shoal_components::sdp::{
    Codec, Direction, EXT_ABS_CAPTURE_TIME, EXT_AUDIO_LEVEL, EXT_MID, EXT_TRANSPORT_CC,
    FORMAT_DATACHANNEL, MAX_MESSAGE_SIZE, MediaDescription, MediaKind, PROTO_DTLS_SCTP, SCTP_PORT,
    SessionDescription, remote_max_message_size,
};
use shoal_systems::PeerSpec;

use super::offer::transport_of;
use super::{AnswerError, PWD_LEN, UFRAG_LEN, ice_chars};
use crate::control::media::{extension_ids, feedback, payload_format, track_kind};

/// The endpoint's payload types: Opus, VP8 and VP8's RTX.
pub const OPUS_PT: u8 = 111;
/// VP8's payload type in the endpoint's offers.
pub const VP8_PT: u8 = 96;
/// VP8 retransmission's payload type (RFC 4588 §8.1: `apt=96`).
pub const VP8_RTX_PT: u8 = 97;
/// The endpoint's header extension ids, one space over the BUNDLE group.
pub const MID_ID: u8 = 1;
/// RFC 6464 audio level.
pub const AUDIO_LEVEL_ID: u8 = 2;
/// The transport-wide sequence number.
pub const TRANSPORT_CC_ID: u8 = 3;
/// webrtc's abs-capture-time.
pub const ABS_CAPTURE_TIME_ID: u8 = 4;
/// The mids of the sections the endpoint publishes in.
pub const AUDIO_MID: &str = "a";
/// The mid of the data channel section ([`OfferShape::data`]).
pub const DATA_MID: &str = "d";
/// The video section's mid.
pub const VIDEO_MID: &str = "v";
/// Streams a simulcast publisher sends.
pub const SIMULCAST_LAYERS: usize = 3;

/// What the endpoint's first offer holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OfferShape {
    /// Publish one Opus and one VP8 stream.
    pub publish: bool,
    /// `recvonly` audio sections.
    pub receive_audio: usize,
    /// `recvonly` video sections.
    pub receive_video: usize,
    /// The published video is [`SIMULCAST_LAYERS`] simulcast streams.
    pub simulcast: bool,
    /// A data channel section ([`DATA_MID`]) after the media, in the same BUNDLE
    /// group (RFC 8843): the endpoint's SCTP association rides the media's
    /// transport, as a browser's does when it has both.
    pub data: bool,
}

impl OfferShape {
    /// A publisher's: one Opus and one VP8 stream sent, nothing received (WHIP, or a
    /// `/signal` participant, which receives what the node offers later).
    pub const PUBLISH: OfferShape = OfferShape {
        publish: true,
        receive_audio: 0,
        receive_video: 0,
        simulcast: false,
        data: false,
    };

    /// A data channel alone: an endpoint that sends no media, as a browser's first
    /// offer when it only receives (the node's offers bring the room's tracks).
    pub const DATA_ONLY: OfferShape = OfferShape {
        publish: false,
        receive_audio: 0,
        receive_video: 0,
        simulcast: false,
        data: true,
    };

    /// [`OfferShape::PUBLISH`] with simulcast video.
    pub const PUBLISH_SIMULCAST: OfferShape = OfferShape {
        simulcast: true,
        ..OfferShape::PUBLISH
    };
}

/// A client endpoint's first media offer, and what it needs to read the answer.
#[derive(Clone, Debug)]
pub struct MediaOffer {
    id: PeerId,
    ufrag: String,
    pwd: String,
    fingerprint: [u8; 32],
    cname: String,
    /// Primary and RTX SSRCs of the published audio and video (one pair per
    /// simulcast stream, lowest first).
    audio_ssrc: u32,
    video_ssrcs: Vec<(u32, u32)>,
    shape: OfferShape,
    sdp: String,
}

/// A negotiated media session: what to add to the endpoint's shard, and the state to
/// answer the answerer's later offers with.
#[derive(Clone, Debug)]
pub struct MediaSession {
    /// The peer (`Command::AddPeer`).
    pub peer: PeerSpec,
    /// Local sources to add (`Command::AddSource`): the track as the application
    /// writes it and how it goes out.
    pub sources: Vec<(TrackSpec, SubscriptionSpec)>,
    /// Tracks to receive (`Command::Receive`).
    pub receives: Vec<TrackSpec>,
    offer: MediaOffer,
    /// Mids already received on, with the track id given.
    received_mids: Vec<(String, TrackId)>,
    /// The next track id for a received track.
    next_track: u64,
    role: DtlsRole,
}

/// Track ids of the endpoint's own sources.
pub const AUDIO_SOURCE: TrackId = TrackId(1);
/// The video source (a simulcast publisher's lowest stream).
pub const VIDEO_SOURCE: TrackId = TrackId(2);
/// A simulcast publisher's video sources, lowest first.
pub const VIDEO_LAYER_SOURCES: [TrackId; SIMULCAST_LAYERS] = [VIDEO_SOURCE, TrackId(3), TrackId(4)];
/// Received tracks are numbered from here.
const FIRST_RECEIVED: u64 = 100;

/// A fresh offer for peer `id` of a shard whose certificate has SHA-256
/// `fingerprint`, of `shape`, with new ICE credentials and SSRCs from `rng`.
pub fn media_offer<R: RngCore + ?Sized>(
    id: PeerId,
    fingerprint: [u8; 32],
    shape: OfferShape,
    rng: &mut R,
) -> MediaOffer {
    let mut next = || rng.next_u64();
    let ufrag = ice_chars(UFRAG_LEN, &mut next);
    let pwd = ice_chars(PWD_LEN, &mut next);
    // Also the msid's stream id, so only token characters (RFC 8830 §2).
    let cname = format!("{:016x}", next());
    let session_id = (next() >> 2).min((1 << 62) - 2);
    let ssrc = |next: &mut dyn FnMut() -> u64| (next() as u32).max(1);
    let audio_ssrc = ssrc(&mut next);
    let streams = if shape.simulcast { SIMULCAST_LAYERS } else { 1 };
    let video_ssrcs = (0..streams)
        .map(|_| (ssrc(&mut next), ssrc(&mut next)))
        .collect();
    let mut offer = MediaOffer {
        id,
        ufrag,
        pwd,
        fingerprint,
        cname,
        audio_ssrc,
        video_ssrcs,
        shape,
        sdp: String::new(),
    };
    let mut sections = Vec::new();
    if shape.publish {
        sections.push(offer.section(MediaKind::Audio, AUDIO_MID, Direction::SendOnly));
        sections.push(offer.section(MediaKind::Video, VIDEO_MID, Direction::SendOnly));
    }
    for i in 0..shape.receive_audio {
        sections.push(offer.section(MediaKind::Audio, &format!("ra{i}"), Direction::RecvOnly));
    }
    for i in 0..shape.receive_video {
        sections.push(offer.section(MediaKind::Video, &format!("rv{i}"), Direction::RecvOnly));
    }
    if shape.data {
        sections.push(offer.data_section("actpass"));
    }
    offer.sdp = session(session_id, 1, &sections);
    offer
}

/// The session: RFC 8829 §5.2.1's session-level lines and BUNDLE over every section
/// that is not rejected.
fn session(session_id: u64, version: u64, sections: &[Section]) -> String {
    let mut s = format!(
        "v=0\r\no=- {session_id} {version} IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\na=ice-options:ice2\r\n"
    );
    let bundled: Vec<&str> = sections
        .iter()
        .filter(|x| !x.rejected)
        .map(|x| x.mid.as_str())
        .collect();
    if !bundled.is_empty() {
        s.push_str(&format!("a=group:BUNDLE {}\r\n", bundled.join(" ")));
    }
    s.push_str("a=msid-semantic: WMS *\r\n");
    for x in sections {
        s.push_str(&x.text);
    }
    s
}

/// One `m=` section's text.
struct Section {
    mid: String,
    rejected: bool,
    text: String,
}

impl MediaOffer {
    /// The offer's text.
    pub fn sdp(&self) -> &str {
        &self.sdp
    }

    /// The peer id it was made for.
    pub fn peer(&self) -> PeerId {
        self.id
    }

    /// The data channel section (RFC 8841 §5.1: `UDP/DTLS/SCTP webrtc-datachannel`,
    /// the SCTP port and the largest message the endpoint takes), offered or
    /// answered with `setup`.
    fn data_section(&self, setup: &str) -> Section {
        let hex: Vec<String> = self
            .fingerprint
            .iter()
            .map(|b| format!("{b:02X}"))
            .collect();
        Section {
            mid: DATA_MID.to_owned(),
            rejected: false,
            text: format!(
                "m=application 9 {PROTO_DTLS_SCTP} {FORMAT_DATACHANNEL}\r\nc=IN IP4 0.0.0.0\r\n\
                 a=mid:{DATA_MID}\r\na=ice-ufrag:{}\r\na=ice-pwd:{}\r\n\
                 a=fingerprint:sha-256 {}\r\na=setup:{setup}\r\n\
                 a=sctp-port:{SCTP_PORT}\r\na=max-message-size:{MAX_MESSAGE_SIZE}\r\n",
                self.ufrag,
                self.pwd,
                hex.join(":")
            ),
        }
    }

    /// A section the endpoint offers (or answers, with `setup`) of `kind`.
    fn section(&self, kind: MediaKind, mid: &str, direction: Direction) -> Section {
        self.section_with(kind, mid, direction, "actpass", None)
    }

    /// A section of `kind` in `direction`; `codec` is the answerer's codec the endpoint
    /// answers with (its payload type, feedback and RTX as offered), else the
    /// endpoint's own.
    fn section_with(
        &self,
        kind: MediaKind,
        mid: &str,
        direction: Direction,
        setup: &str,
        answered: Option<(&Codec, &MediaDescription)>,
    ) -> Section {
        let audio = kind == MediaKind::Audio;
        let (pt, rtx) = match answered {
            Some((c, _)) => (c.payload_type, c.rtx_payload_type),
            None if audio => (OPUS_PT, None),
            None => (VP8_PT, Some(VP8_RTX_PT)),
        };
        let formats = match rtx {
            Some(r) => format!("{pt} {r}"),
            None => pt.to_string(),
        };
        let media = if audio { "audio" } else { "video" };
        let mut t = format!("m={media} 9 UDP/TLS/RTP/SAVPF {formats}\r\nc=IN IP4 0.0.0.0\r\n");
        t.push_str(&format!("a=mid:{mid}\r\n"));
        t.push_str(&format!(
            "a=ice-ufrag:{}\r\na=ice-pwd:{}\r\n",
            self.ufrag, self.pwd
        ));
        let hex: Vec<String> = self
            .fingerprint
            .iter()
            .map(|b| format!("{b:02X}"))
            .collect();
        t.push_str(&format!("a=fingerprint:sha-256 {}\r\n", hex.join(":")));
        t.push_str(&format!("a=setup:{setup}\r\n"));
        t.push_str(&format!("a={}\r\n", direction_name(direction)));
        t.push_str("a=rtcp-mux\r\na=rtcp-rsize\r\n");
        // The extensions: the endpoint's own, or in an answer those the offer has.
        let ours: &[(u8, &str)] = if audio {
            &[
                (MID_ID, EXT_MID),
                (AUDIO_LEVEL_ID, EXT_AUDIO_LEVEL),
                (TRANSPORT_CC_ID, EXT_TRANSPORT_CC),
                (ABS_CAPTURE_TIME_ID, EXT_ABS_CAPTURE_TIME),
            ]
        } else {
            &[
                (MID_ID, EXT_MID),
                (TRANSPORT_CC_ID, EXT_TRANSPORT_CC),
                (ABS_CAPTURE_TIME_ID, EXT_ABS_CAPTURE_TIME),
            ]
        };
        match answered {
            Some((_, offered)) => {
                for e in offered.extmaps() {
                    if ours.iter().any(|(_, uri)| *uri == e.uri) {
                        t.push_str(&format!("a=extmap:{} {}\r\n", e.id, e.uri));
                    }
                }
            }
            None => {
                for (id, uri) in ours {
                    t.push_str(&format!("a=extmap:{id} {uri}\r\n"));
                }
            }
        }
        match answered {
            Some((c, offered)) => {
                for r in [Some(c.payload_type), c.rtx_payload_type]
                    .into_iter()
                    .flatten()
                {
                    if let Some(m) = offered.rtpmap(r) {
                        let params = m
                            .encoding_params
                            .map(|p| format!("/{p}"))
                            .unwrap_or_default();
                        t.push_str(&format!(
                            "a=rtpmap:{r} {}/{}{params}\r\n",
                            m.encoding_name, m.clock_rate_hz
                        ));
                    }
                    if let Some(f) = offered.fmtp(r) {
                        t.push_str(&format!("a=fmtp:{r} {}\r\n", f.params));
                    }
                }
                for fb in offered.rtcp_fbs_for(c.payload_type) {
                    let param = fb
                        .param
                        .as_deref()
                        .map(|p| format!(" {p}"))
                        .unwrap_or_default();
                    t.push_str(&format!(
                        "a=rtcp-fb:{} {}{param}\r\n",
                        c.payload_type, fb.feedback
                    ));
                }
            }
            None if audio => {
                t.push_str(&format!(
                    "a=rtpmap:{OPUS_PT} opus/48000/2\r\na=fmtp:{OPUS_PT} minptime=10;useinbandfec=1\r\n\
                     a=rtcp-fb:{OPUS_PT} transport-cc\r\n"
                ));
            }
            None => {
                t.push_str(&format!(
                    "a=rtpmap:{VP8_PT} VP8/90000\r\na=rtcp-fb:{VP8_PT} nack\r\n\
                     a=rtcp-fb:{VP8_PT} nack pli\r\na=rtcp-fb:{VP8_PT} ccm fir\r\n\
                     a=rtcp-fb:{VP8_PT} transport-cc\r\n\
                     a=rtpmap:{VP8_RTX_PT} rtx/90000\r\na=fmtp:{VP8_RTX_PT} apt={VP8_PT}\r\n"
                ));
            }
        }
        if matches!(direction, Direction::SendOnly | Direction::SendRecv) {
            let stream = &self.cname;
            if audio {
                let s = self.audio_ssrc;
                t.push_str(&format!(
                    "a=msid:{stream} audio\r\na=ssrc:{s} cname:{}\r\n",
                    self.cname
                ));
            } else {
                t.push_str(&format!("a=msid:{stream} video\r\n"));
                if self.video_ssrcs.len() > 1 {
                    let sim: Vec<String> = self
                        .video_ssrcs
                        .iter()
                        .map(|(s, _)| s.to_string())
                        .collect();
                    t.push_str(&format!("a=ssrc-group:SIM {}\r\n", sim.join(" ")));
                }
                for (s, r) in &self.video_ssrcs {
                    t.push_str(&format!("a=ssrc-group:FID {s} {r}\r\n"));
                }
                for (s, r) in &self.video_ssrcs {
                    t.push_str(&format!(
                        "a=ssrc:{s} cname:{}\r\na=ssrc:{r} cname:{}\r\n",
                        self.cname, self.cname
                    ));
                }
            }
        }
        Section {
            mid: mid.to_owned(),
            rejected: false,
            text: t,
        }
    }

    /// The session for `answer`: the peer (as [`super::DataOffer::accept`] makes
    /// it), the sources the answer accepted and the tracks it sends.
    ///
    /// # Errors
    /// If the answer is not SDP, lacks what the transport needs, or rejects or
    /// misses a section the endpoint publishes in.
    pub fn accept(&self, answer: &str) -> Result<MediaSession, AnswerError> {
        let sdp = SessionDescription::parse(answer)?;
        let first = sdp
            .media
            .iter()
            .find(|m| m.port != 0)
            .ok_or(AnswerError::Rejected)?;
        let mut peer = transport_of(self.id, &self.ufrag, &self.pwd, &sdp, first)?;
        // The session sends media: no SRTP profile, no session.
        if let Some(dtls) = peer.dtls.as_mut() {
            dtls.srtp_required = true;
        }
        let role = peer.dtls.as_ref().map_or(DtlsRole::Client, |d| d.role);
        let mut session = MediaSession {
            peer,
            sources: Vec::new(),
            receives: Vec::new(),
            offer: self.clone(),
            received_mids: Vec::new(),
            next_track: FIRST_RECEIVED,
            role,
        };
        if self.shape.publish {
            let video = self.video_ssrcs.iter().zip(VIDEO_LAYER_SOURCES);
            let sources = std::iter::once((AUDIO_MID, AUDIO_SOURCE, (self.audio_ssrc, None)))
                .chain(video.map(|(&(s, r), id)| (VIDEO_MID, id, (s, Some(r)))));
            for (mid, id, ssrcs) in sources {
                let m = sdp
                    .media_by_mid(mid)
                    .ok_or_else(|| AnswerError::NoSection(mid.to_owned()))?;
                if m.port == 0 {
                    return Err(AnswerError::SectionRejected(mid.to_owned()));
                }
                session.sources.push(self.source(id, mid, m, ssrcs)?);
            }
        }
        if self.shape.data {
            let m = sdp
                .media_by_mid(DATA_MID)
                .ok_or_else(|| AnswerError::NoSection(DATA_MID.to_owned()))?;
            if m.port == 0 {
                return Err(AnswerError::SectionRejected(DATA_MID.to_owned()));
            }
            session.peer.may_send_data = true;
            if let Some(dtls) = session.peer.dtls.as_mut() {
                dtls.max_message_size = Some(remote_max_message_size(m));
            }
        }
        session.take_receives(&sdp);
        Ok(session)
    }

    /// The source the endpoint sends in section `mid` with `ssrcs` (primary, and
    /// RTX when it has one), as the answer `m` agreed it.
    fn source(
        &self,
        id: TrackId,
        mid: &str,
        m: &MediaDescription,
        (ssrc, rtx): (u32, Option<u32>),
    ) -> Result<(TrackSpec, SubscriptionSpec), AnswerError> {
        let codec = Codec::read_all(m)
            .into_iter()
            .next()
            .ok_or_else(|| AnswerError::SectionRejected(mid.to_owned()))?;
        let rtx_ssrc = rtx.filter(|_| codec.rtx_payload_type.is_some());
        let track = track_spec(id, mid, m, &codec, ssrc, rtx_ssrc);
        let out = SubscriptionSpec {
            track: id,
            mid: mid.to_owned(),
            ssrc,
            rtx_ssrc,
            payload_type: codec.payload_type,
            rtx_payload_type: codec.rtx_payload_type,
            extensions: track.extensions,
            feedback: track.feedback,
            cname: self.cname.clone(),
            stream: None,
        };
        Ok((track, out))
    }
}

impl MediaSession {
    /// [`MediaSession::answer`] for an offer as shoal's signalling carries it: the
    /// answer echoes the offer's `id`, so the node can tell it from a late answer to
    /// an offer it has since dropped (timed out, or lost to glare).
    ///
    /// # Errors
    /// As [`MediaSession::answer`].
    pub fn answer_description(
        &mut self,
        offer: &shoal_proto::v1::SessionDescription,
    ) -> Result<(shoal_proto::v1::SessionDescription, Vec<TrackSpec>), AnswerError> {
        let (sdp, tracks) = self.answer(&offer.sdp)?;
        let answer = shoal_proto::v1::SessionDescription { sdp, id: offer.id };
        Ok((answer, tracks))
    }

    /// Answers the answerer's later offer (RFC 8829 §5.3.1): the endpoint's own
    /// sections `sendonly` again, a `sendonly` section of the offerer's `recvonly`
    /// with its first codec, a rejected section rejected, anything else `inactive`.
    /// Returns the answer and the tracks newly to receive (also appended to
    /// [`MediaSession::receives`]).
    ///
    /// # Errors
    /// If the offer is not SDP.
    pub fn answer(&mut self, offer: &str) -> Result<(String, Vec<TrackSpec>), AnswerError> {
        let sdp = SessionDescription::parse(offer)?;
        let setup = match self.role {
            DtlsRole::Client => "active",
            DtlsRole::Server => "passive",
        };
        let mut sections = Vec::new();
        for m in &sdp.media {
            let mid = m.mid().unwrap_or_default().to_owned();
            if self.offer.shape.data && mid == DATA_MID && m.port != 0 {
                sections.push(self.offer.data_section(setup));
                continue;
            }
            let codec = Codec::read_all(m).into_iter().next();
            let media = match m.kind {
                MediaKind::Audio => "audio",
                MediaKind::Video => "video",
                _ => "application",
            };
            let reject = |mid: &str| Section {
                mid: mid.to_owned(),
                rejected: true,
                text: format!(
                    "m={media} 0 {} {}\r\nc=IN IP4 0.0.0.0\r\na=mid:{mid}\r\n",
                    m.proto,
                    m.formats.first().map_or("0", String::as_str)
                ),
            };
            let Some(codec) = codec.filter(|_| m.port != 0) else {
                sections.push(reject(&mid));
                continue;
            };
            let ours = self.offer.shape.publish && (mid == AUDIO_MID || mid == VIDEO_MID);
            let direction = if ours {
                Direction::SendOnly
            } else {
                match m.direction().unwrap_or(Direction::SendRecv) {
                    Direction::SendOnly | Direction::SendRecv => Direction::RecvOnly,
                    _ => Direction::Inactive,
                }
            };
            sections.push(self.offer.section_with(
                m.kind.clone(),
                &mid,
                direction,
                setup,
                Some((&codec, m)),
            ));
        }
        let before = self.receives.len();
        self.take_receives(&sdp);
        let new = self.receives[before..].to_vec();
        let version = sdp.origin.session_version;
        Ok((session(sdp.origin.session_id, version, &sections), new))
    }

    /// The tracks the answerer sends in `sdp` (its answer or its offer) that are not
    /// received yet: every open section with an SSRC that is not the endpoint's own.
    fn take_receives(&mut self, sdp: &SessionDescription) {
        for m in &sdp.media {
            let Some(mid) = m.mid() else { continue };
            if m.port == 0
                || (self.offer.shape.publish && (mid == AUDIO_MID || mid == VIDEO_MID))
                || self.received_mids.iter().any(|(x, _)| x == mid)
            {
                continue;
            }
            if !matches!(
                m.direction().unwrap_or(Direction::SendRecv),
                Direction::SendOnly | Direction::SendRecv
            ) {
                continue;
            }
            let Some(codec) = Codec::read_all(m).into_iter().next() else {
                continue;
            };
            let (ssrc, rtx_ssrc) = announced_ssrcs(m);
            let Some(ssrc) = ssrc else { continue };
            let id = TrackId(self.next_track);
            self.next_track += 1;
            self.received_mids.push((mid.to_owned(), id));
            let rtx_ssrc = rtx_ssrc.filter(|_| codec.rtx_payload_type.is_some());
            self.receives
                .push(track_spec(id, mid, m, &codec, ssrc, rtx_ssrc));
        }
    }
}

/// The primary and RTX SSRCs a section announces: its `FID` group (RFC 5576 §4.2,
/// RFC 4588 §8.1), else its first `a=ssrc`.
fn announced_ssrcs(m: &MediaDescription) -> (Option<u32>, Option<u32>) {
    if let Some(g) = m
        .ssrc_groups()
        .find(|g| g.semantics == "FID" && g.ssrcs.len() == 2)
    {
        return (g.ssrcs.first().copied(), g.ssrcs.get(1).copied());
    }
    (m.ssrcs().next().map(|s| s.ssrc), None)
}

fn direction_name(d: Direction) -> &'static str {
    match d {
        Direction::SendOnly => "sendonly",
        Direction::RecvOnly => "recvonly",
        Direction::SendRecv => "sendrecv",
        Direction::Inactive => "inactive",
    }
}

/// The track section `mid` carries, as `m` and its first codec describe it.
fn track_spec(
    id: TrackId,
    mid: &str,
    m: &MediaDescription,
    codec: &Codec,
    ssrc: u32,
    rtx_ssrc: Option<u32>,
) -> TrackSpec {
    let audio = m.kind == MediaKind::Audio;
    let extmaps: Vec<_> = m.extmaps().cloned().collect();
    TrackSpec {
        id,
        kind: track_kind(&m.kind),
        mid: mid.to_owned(),
        ssrc: Some(ssrc),
        rtx_ssrc,
        payload_type: codec.payload_type,
        rtx_payload_type: codec.rtx_payload_type,
        clock_rate: if audio { 48_000 } else { 90_000 },
        extensions: extension_ids(&extmaps),
        feedback: feedback(codec),
        format: payload_format(codec.name),
        layers: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_chacha::ChaCha12Rng;
    use rand_core::SeedableRng;
    use shoal_components::media::TrackKind;
    use shoal_components::sdp::{AnswerParams, Change, Negotiation, TrackSource};
    use std::net::SocketAddr;

    const SHARD_FINGERPRINT: [u8; 32] = [0xab; 32];
    const NODE_FINGERPRINT: [u8; 32] = [0xcd; 32];

    fn params(node: &[SocketAddr]) -> AnswerParams<'_> {
        AnswerParams {
            candidates: node,
            tcp_candidates: &[],
            ice_ufrag: "nodeufrag",
            ice_pwd: "nodepasswordnodepassword",
            fingerprint_sha256: NODE_FINGERPRINT,
            session_id: 7,
        }
    }

    fn offer(shape: OfferShape, seed: u64) -> MediaOffer {
        media_offer(
            PeerId(3),
            SHARD_FINGERPRINT,
            shape,
            &mut ChaCha12Rng::seed_from_u64(seed),
        )
    }

    fn node() -> SocketAddr {
        "127.0.0.1:7100".parse().unwrap()
    }

    /// A room track as shoal's control plane gives it to a negotiation.
    fn room_track(id: &str, kind: MediaKind, codec: &Codec) -> TrackSource {
        TrackSource {
            id: id.to_owned(),
            kind,
            stream_id: "publisher".to_owned(),
            codec: codec.clone(),
        }
    }

    /// shoal's answer to `o`, from a node at `node`.
    fn answered_by_shoal(o: &MediaOffer, node: SocketAddr) -> shoal_components::sdp::Answered {
        let parsed = SessionDescription::parse(o.sdp()).expect("the offer parses");
        Negotiation::new(7)
            .answer(&parsed, &params(&[node]), &[], &mut || 5)
            .expect("shoal answers")
    }

    #[test]
    fn a_publisher_is_answered_with_both_sources_and_their_extensions() {
        let o = offer(OfferShape::PUBLISH, 1);
        let node = node();
        let answered = answered_by_shoal(&o, node);
        // shoal read both published streams with the announced SSRCs.
        let published: Vec<(String, Option<u32>, Option<u32>)> = answered
            .changes
            .iter()
            .filter_map(|c| match c {
                Change::Published { mid, track } => Some((mid.clone(), track.ssrc, track.rtx_ssrc)),
                _ => None,
            })
            .collect();
        assert_eq!(
            published,
            vec![
                (AUDIO_MID.to_owned(), Some(o.audio_ssrc), None),
                (
                    VIDEO_MID.to_owned(),
                    Some(o.video_ssrcs[0].0),
                    Some(o.video_ssrcs[0].1)
                ),
            ]
        );
        let session = o
            .accept(&answered.sdp.to_sdp_string())
            .expect("the endpoint takes shoal's answer");
        assert_eq!(session.peer.remote_candidates, vec![node]);
        assert!(session.receives.is_empty());
        let [(audio, audio_out), (video, video_out)] = &session.sources[..] else {
            panic!("two sources: {:?}", session.sources);
        };
        assert_eq!((audio.id, video.id), (AUDIO_SOURCE, VIDEO_SOURCE));
        assert_eq!(audio_out.ssrc, o.audio_ssrc);
        assert_eq!(
            (video_out.ssrc, video_out.rtx_ssrc),
            (o.video_ssrcs[0].0, Some(o.video_ssrcs[0].1))
        );
        assert_eq!(
            (video.payload_type, video.rtx_payload_type),
            (VP8_PT, Some(VP8_RTX_PT))
        );
        // shoal accepts abs-capture-time and the transport-wide sequence number.
        assert_eq!(
            audio_out.extensions.abs_capture_time,
            Some(ABS_CAPTURE_TIME_ID)
        );
        assert_eq!(
            video_out.extensions.abs_capture_time,
            Some(ABS_CAPTURE_TIME_ID)
        );
        assert_eq!(video_out.extensions.mid, Some(MID_ID));
        assert_eq!(audio_out.extensions.audio_level, Some(AUDIO_LEVEL_ID));
        assert!(video_out.feedback.nack && video_out.feedback.pli);
    }

    #[test]
    fn a_simulcast_publisher_is_read_as_three_streams() {
        let o = offer(OfferShape::PUBLISH_SIMULCAST, 5);
        let answered = answered_by_shoal(&o, node());
        let layers: Vec<(Option<u32>, Option<u32>)> = answered
            .changes
            .iter()
            .find_map(|c| match c {
                Change::Published { mid, track } if mid == VIDEO_MID => Some(&track.layers),
                _ => None,
            })
            .expect("the video is published")
            .iter()
            .map(|l| (l.ssrc, l.rtx_ssrc))
            .collect();
        let offered: Vec<(Option<u32>, Option<u32>)> = o
            .video_ssrcs
            .iter()
            .map(|&(s, r)| (Some(s), Some(r)))
            .collect();
        assert_eq!(offered.len(), SIMULCAST_LAYERS);
        assert_eq!(layers, offered, "shoal reads the SIM group, lowest first");
        let session = o
            .accept(&answered.sdp.to_sdp_string())
            .expect("the endpoint takes shoal's answer");
        let video: Vec<(TrackId, u32, Option<u32>)> = session
            .sources
            .iter()
            .filter(|(t, _)| t.mid == VIDEO_MID)
            .map(|(t, out)| (t.id, out.ssrc, out.rtx_ssrc))
            .collect();
        let want: Vec<(TrackId, u32, Option<u32>)> = VIDEO_LAYER_SOURCES
            .iter()
            .zip(&o.video_ssrcs)
            .map(|(&id, &(s, r))| (id, s, Some(r)))
            .collect();
        assert_eq!(video, want);
    }

    #[test]
    fn a_publisher_with_data_keeps_its_channel_through_later_offers() {
        let shape = OfferShape {
            data: true,
            ..OfferShape::PUBLISH
        };
        let o = offer(shape, 6);
        let parsed = SessionDescription::parse(o.sdp()).expect("parses");
        assert_eq!(parsed.bundle_mids().map(<[String]>::len), Some(3));
        let node = node();
        let mut shoal = Negotiation::new(7);
        let mut ssrcs = 2000..;
        let mut new_ssrc = || ssrcs.next().unwrap();
        let answered = shoal
            .answer(&parsed, &params(&[node]), &[], &mut new_ssrc)
            .expect("answered");
        assert_eq!(answered.data_mid.as_deref(), Some(DATA_MID));
        let mut session = o.accept(&answered.sdp.to_sdp_string()).expect("accepted");
        assert!(session.peer.may_send_data);
        let dtls = session.peer.dtls.as_ref().expect("DTLS");
        assert!(dtls.max_message_size.is_some());
        assert_eq!(session.sources.len(), 2, "audio and video still published");
        // shoal offers another publisher's audio: the data section stays open.
        let codecs: Vec<Codec> = parsed.media.iter().flat_map(Codec::read_all).collect();
        let tracks = [room_track("p-audio", MediaKind::Audio, &codecs[0])];
        let again = shoal
            .offer(&params(&[node]), &tracks, &mut new_ssrc)
            .expect("shoal offers");
        let (answer, new) = session.answer(&again.to_sdp_string()).expect("answers");
        assert_eq!(new.len(), 1);
        let answer = SessionDescription::parse(&answer).expect("parses");
        let data = answer.media_by_mid(DATA_MID).expect("the data section");
        assert_ne!(data.port, 0, "kept open");
        assert_eq!(data.sctp_port(), Some(SCTP_PORT));
        shoal.accept(&answer).expect("shoal takes the answer");
    }

    #[test]
    fn shoals_later_offer_is_answered_and_its_tracks_received() {
        let publisher = offer(OfferShape::PUBLISH, 2);
        let parsed = SessionDescription::parse(publisher.sdp()).expect("parses");
        let codecs: Vec<Codec> = parsed.media.iter().flat_map(Codec::read_all).collect();
        let tracks = [
            room_track("p-audio", MediaKind::Audio, &codecs[0]),
            room_track("p-video", MediaKind::Video, &codecs[1]),
        ];
        let o = offer(OfferShape::PUBLISH, 3);
        let node = node();
        let mut shoal = Negotiation::new(7);
        let mut ssrcs = 1000..;
        let mut new_ssrc = || ssrcs.next().unwrap();
        let answered = shoal
            .answer(
                &SessionDescription::parse(o.sdp()).unwrap(),
                &params(&[node]),
                &[],
                &mut new_ssrc,
            )
            .expect("answered");
        let mut session = o.accept(&answered.sdp.to_sdp_string()).expect("accepted");
        // The room gains a publisher: shoal offers its two tracks.
        let again = shoal
            .offer(&params(&[node]), &tracks, &mut new_ssrc)
            .expect("shoal offers the new tracks");
        // As the signalling carries it: the answer names the offer it answers.
        let numbered = shoal_proto::v1::SessionDescription {
            sdp: again.to_sdp_string(),
            id: 41,
        };
        let (answer, new) = session
            .answer_description(&numbered)
            .expect("the endpoint answers");
        assert_eq!(answer.id, 41, "the offer's id is echoed");
        let changes = shoal
            .accept(&SessionDescription::parse(&answer.sdp).expect("the answer parses"))
            .expect("shoal takes the answer");
        let subscribed: Vec<(String, u32)> = changes
            .iter()
            .filter_map(|c| match c {
                Change::Subscribed { mid, track } => Some((mid.clone(), track.ssrc)),
                _ => None,
            })
            .collect();
        assert_eq!(subscribed.len(), 2, "{changes:?}");
        // What the endpoint receives is what shoal said it sends, in the same sections.
        let received: Vec<(String, u32)> = new
            .iter()
            .map(|t| (t.mid.clone(), t.ssrc.expect("an announced SSRC")))
            .collect();
        assert_eq!(received, subscribed);
        assert_eq!(session.receives, new);
        assert!(new.iter().all(|t| t.id.0 >= FIRST_RECEIVED));
        assert_eq!(new[0].kind, TrackKind::Audio);
        assert_eq!(new[1].kind, TrackKind::Video);
        assert!(new[1].rtx_ssrc.is_some());
        assert_eq!(
            new[1].extensions.abs_capture_time,
            Some(ABS_CAPTURE_TIME_ID)
        );
        // The same offer again (a renegotiation that changes nothing) adds nothing.
        let (_, none) = session.answer(&again.to_sdp_string()).expect("answered");
        assert!(none.is_empty());
        // The publisher leaves: shoal stops the tracks, and the endpoint answers.
        let stop = shoal
            .offer(&params(&[node]), &[], &mut new_ssrc)
            .expect("shoal offers the removal");
        let (answer, none) = session.answer(&stop.to_sdp_string()).expect("answered");
        assert!(none.is_empty());
        let changes = shoal
            .accept(&SessionDescription::parse(&answer).unwrap())
            .expect("shoal takes the answer");
        assert!(
            changes
                .iter()
                .filter(|c| matches!(c, Change::Unsubscribed { .. }))
                .count()
                == 2,
            "{changes:?}"
        );
    }

    #[test]
    fn a_player_offers_only_receiving_sections() {
        let o = offer(
            OfferShape {
                publish: false,
                receive_audio: 2,
                receive_video: 3,
                simulcast: false,
                data: false,
            },
            4,
        );
        let sdp = SessionDescription::parse(o.sdp()).expect("parses");
        assert_eq!(sdp.media.len(), 5);
        assert!(
            sdp.media
                .iter()
                .all(|m| m.direction() == Some(Direction::RecvOnly) && m.ssrcs().next().is_none())
        );
        assert_eq!(
            sdp.bundle_mids().map(<[String]>::len),
            Some(5),
            "one BUNDLE group over every section"
        );
    }
}
