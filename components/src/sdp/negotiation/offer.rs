//! shoal's own offers when the room's tracks change (RFC 8829 §5.2.2), and their
//! answers.

use super::*;

impl Negotiation {
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
        let tracks = if self.media_refused { &[] } else { tracks };
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
        // Place what is new, while the session has SSRCs to spare: every stream
        // placed retires its SSRCs when it ends, and none is used twice.
        for track in tracks {
            if self.declined.contains(&track.id) || placed_in(&sections, &track.id) {
                continue;
            }
            if !self.ssrcs_to_spare(&sections) {
                break;
            }
            let used = self.used_ssrcs(&sections);
            // An open section of the participant's that receives this kind and codec.
            let open = sections.iter().position(|s| match &s.state {
                SectionState::Media(m) => {
                    s.kind == track.kind
                        && m.subscribe.is_none()
                        && m.receives
                        && m.receivable.iter().any(|c| c.receives(&track.codec))
                }
                _ => false,
            });
            let (index, codec) = match open {
                Some(i) => {
                    let SectionState::Media(m) = &sections[i].state else {
                        continue;
                    };
                    let Some(c) = m.receivable.iter().find(|c| c.receives(&track.codec)) else {
                        continue;
                    };
                    let mut c = c.clone();
                    c.fmtp = track.codec.fmtp.clone().or(c.fmtp);
                    (i, c.with_level_asymmetry())
                }
                None => {
                    let codec = self
                        .session_codec(&sections, &track.codec)
                        .with_level_asymmetry();
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
            connection: Connection::new(params.default_destination().ip()),
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
                    m.push_attribute(Attribute::SctpPort(crate::sdp::SCTP_PORT))
                        .push_attribute(Attribute::MaxMessageSize(crate::sdp::MAX_MESSAGE_SIZE));
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
    pub(super) fn session_codec(&self, sections: &[Section], codec: &Codec) -> Codec {
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
        // shoal sends on it: REMB is for what a publisher sends shoal.
        out.feedback.goog_remb = false;
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
    pub(super) fn new_mid(&mut self, sections: &[Section]) -> String {
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

    /// The session's id for `uri`, allocating the lowest free one-byte id.
    pub(super) fn extension_id(&mut self, uri: &str) -> Option<u16> {
        if let Some((_, id)) = self.extension_ids.iter().find(|(u, _)| u == uri) {
            return Some(*id);
        }
        let id =
            (1..=MAX_ONE_BYTE_ID).find(|id| !self.extension_ids.iter().any(|(_, i)| i == id))?;
        self.extension_ids.push((uri.to_owned(), id));
        Some(id)
    }

    /// Applies the participant's answer to shoal's outstanding offer. An answer shoal
    /// cannot take ends the offer too (rolled back): the session stays as it was agreed,
    /// and the next change offers again.
    pub fn accept(&mut self, answer: &SessionDescription) -> Result<Vec<Change>, NegotiationError> {
        let result = self.accept_pending(answer);
        self.pending = None;
        result
    }

    pub(super) fn accept_pending(
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
                        let has_codec = a.payload_types().any(|pt| pt == x.codec.payload_type)
                            && answer_takes(a, &x.codec);
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

    /// Drops shoal's outstanding offer (the participant rejected it, or it was lost).
    pub fn rollback(&mut self) {
        self.pending = None;
    }
}

pub(super) fn placed_in(sections: &[Section], track: &str) -> bool {
    sections.iter().any(|s| match &s.state {
        SectionState::Media(m) => m.subscribe.as_ref().is_some_and(|x| x.track == track),
        _ => false,
    })
}

/// Whether answer section `a` takes `sent` on its payload type. An answer that
/// describes the format again must keep it (RFC 6184 §8.2.2: the answerer "MUST either
/// maintain all configuration parameters or remove the media format") at a level that
/// takes the stream: a lower one is a format the participant cannot receive.
pub(super) fn answer_takes(a: &MediaDescription, sent: &Codec) -> bool {
    a.rtpmap(sent.payload_type).is_none()
        || Codec::read(a, sent.payload_type).is_some_and(|c| c.receives(sent))
}

/// A format for a disabled section's `m=` line (RFC 8866 §5.14 needs one).
pub(super) fn closed_format(s: &Section) -> &'static str {
    if s.kind == MediaKind::Application {
        FORMAT_DATACHANNEL
    } else {
        "0"
    }
}
