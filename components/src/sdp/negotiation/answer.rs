//! Answering the participant's offers (RFC 8829 §5.3).

use super::*;

impl Negotiation {
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
        let tracks = if self.media_refused { &[] } else { tracks };
        let bundle = offer.bundle_mids().unwrap_or_default();
        let (tag, data, transport_index) = Self::layout(offer);
        let transport_index = transport_index.ok_or(NegotiationError::NoUsableSection)?;
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
        // One transport (BUNDLE): transport-cc offered on any section rules REMB out
        // on all of them.
        let transport_cc_offered = offer.media.iter().any(|m| {
            m.extmaps().any(|e| e.uri == EXT_TRANSPORT_CC)
                || m.rtcp_fbs().any(|f| f.feedback == "transport-cc")
        });
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
            } else if !open
                || !is_av(&offered.kind)
                || offered.proto != PROTO_RTP_SAVPF
                || self.media_refused
            {
                SectionState::Closed
            } else {
                self.answer_media(
                    offered,
                    previous,
                    tracks,
                    &sections,
                    &mut placed,
                    new_ssrc,
                    transport_cc_offered,
                )
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
            connection: Connection::new(params.default_destination().ip()),
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

    /// Where things are in `offer`: the offerer-tagged section of its BUNDLE group,
    /// its data section, and the section that carries the session's transport (the
    /// tag, else the data section, else the first usable audio or video section).
    fn layout(offer: &SessionDescription) -> (Option<usize>, Option<usize>, Option<usize>) {
        let bundle = offer.bundle_mids().unwrap_or_default();
        let tag = offerer_tagged(offer, bundle);
        let data = offer
            .media
            .iter()
            .position(|m| is_data_section(m, bundle, tag.is_some()));
        let usable = |m: &MediaDescription| {
            m.port != 0 && m.proto == PROTO_RTP_SAVPF && is_av(&m.kind) && !m.formats.is_empty()
        };
        let transport = tag
            .or(data.filter(|i| offer.media[*i].port != 0))
            .or_else(|| offer.media.iter().position(usable));
        (tag, data, transport)
    }

    /// The ICE ufrag and password of `offer`'s transport section.
    pub fn offered_ice_credentials(offer: &SessionDescription) -> Option<(&str, &str)> {
        Self::layout(offer)
            .2
            .and_then(|i| offer.ice_credentials_for(&offer.media[i]))
    }

    /// Whether `offer` restarts ICE: it changes both the ice-ufrag and the ice-pwd of
    /// the session (RFC 8839 §4.4.1.1.1). The answer to it must carry new
    /// credentials of shoal's (§4.4.2.1); its caller passes them in the params.
    pub fn restarts_ice(&self, offer: &SessionDescription) -> bool {
        let Some(t) = &self.transport else {
            return false;
        };
        Self::offered_ice_credentials(offer).is_some_and(|(u, p)| u != t.ufrag && p != t.pwd)
    }

    /// The participant's new ICE credentials from an ICE restart signalled outside
    /// SDP (a WHIP/WHEP PATCH, RFC 9725 §4.3): the rest of the transport stays.
    pub fn restart_remote_ice(&mut self, ufrag: &str, pwd: &str) -> Result<(), NegotiationError> {
        let t = self.transport.as_mut().ok_or(NegotiationError::NoSession)?;
        if ufrag == t.ufrag || pwd == t.pwd {
            return Err(NegotiationError::PartialIceRestart);
        }
        t.ufrag = ufrag.to_owned();
        t.pwd = pwd.to_owned();
        Ok(())
    }

    /// Reads and checks the offerer's transport from `m` (RFC 8839 §5.4, RFC 8122 §5,
    /// RFC 4145 §4). Later offers keep the DTLS association (fingerprint and role)
    /// and either keep the ICE credentials or change both, an ICE restart (RFC 8839
    /// §4.4.1.1.1).
    pub(super) fn read_transport(
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
            if (t.ufrag != ufrag) != (t.pwd != pwd) {
                return Err(NegotiationError::PartialIceRestart);
            }
            if t.fingerprint_sha256 != fingerprint_sha256 {
                return Err(NegotiationError::FingerprintChanged);
            }
            // RFC 8829 §5.3.2: the answer keeps the role of the existing association;
            // an ICE restart changes only the credentials (RFC 8445 §9).
            return Ok(RemoteTransport {
                ufrag: ufrag.to_owned(),
                pwd: pwd.to_owned(),
                ..t.clone()
            });
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
    pub(super) fn answer_media(
        &mut self,
        offered: &MediaDescription,
        previous: Option<&Section>,
        tracks: &[TrackSource],
        earlier: &[Section],
        placed: &mut Vec<String>,
        new_ssrc: &mut dyn FnMut() -> u32,
        transport_cc_offered: bool,
    ) -> SectionState {
        let direction = offered.direction().unwrap_or(Direction::SendRecv);
        let sends =
            self.may_publish && matches!(direction, Direction::SendOnly | Direction::SendRecv);
        let receives = matches!(direction, Direction::RecvOnly | Direction::SendRecv);
        let codecs = Codec::read_all(offered);
        let previous = match previous.map(|s| &s.state) {
            Some(SectionState::Media(m)) => Some(m),
            _ => None,
        };
        // REMB (shoal's own estimate of the publisher's path, draft-ietf-rmcat-gcc-02
        // §3) where the publisher offers it with the abs-send-time it runs on and no
        // transport-cc: for the formats the offer lists goog-remb for.
        let remb_for = |pt: u8| {
            sends
                && !transport_cc_offered
                && offered.extmaps().any(|e| e.uri == EXT_ABS_SEND_TIME)
                && offered
                    .rtcp_fbs()
                    .any(|f| f.feedback == "goog-remb" && f.payload_type.is_none_or(|p| p == pt))
        };
        let remb_offered = codecs.iter().any(|c| remb_for(c.payload_type));
        let extensions: Vec<Extmap> = offered
            .extmaps()
            .filter(|e| receivable(&offered.kind, &e.uri, remb_offered))
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
                codec.feedback = codec.feedback.intersect(crate::sdp::codec::Feedback::ALL);
                codec.feedback.goog_remb = remb_for(codec.payload_type);
                let layers = offered_layers(offered, &codec, &extensions);
                // A simulcast track's SSRCs are its streams' (an SSRC-signalled
                // one's first FID group is its first stream's).
                let (ssrc, rtx_ssrc) = match layers.is_empty() {
                    true => offered_ssrcs(offered),
                    false => (None, None),
                };
                let rtx_ssrc = rtx_ssrc.filter(|_| codec.rtx_payload_type.is_some());
                let claimed = |x: Option<u32>| {
                    x.is_some_and(|x| {
                        published_before.iter().any(|p| {
                            p.ssrc == Some(x)
                                || p.rtx_ssrc == Some(x)
                                || p.layers
                                    .iter()
                                    .any(|l| l.ssrc == Some(x) || l.rtx_ssrc == Some(x))
                        })
                    })
                };
                let mine = std::iter::once((ssrc, rtx_ssrc))
                    .chain(layers.iter().map(|l| (l.ssrc, l.rtx_ssrc)));
                if mine.into_iter().any(|(a, b)| claimed(a) || claimed(b)) {
                    return None;
                }
                Some(Published {
                    kind: offered.kind.clone(),
                    codec,
                    ssrc,
                    rtx_ssrc,
                    msid: offered.msids().next().cloned(),
                    extensions: extensions.clone(),
                    layers,
                })
            })
            .flatten();

        let subscribe = if receives {
            match previous.and_then(|p| p.subscribe.as_ref()) {
                Some(s) if tracks.iter().any(|t| t.id == s.track) => {
                    // The codec must still be offered with the payload type agreed, at a
                    // level that takes the track.
                    codecs
                        .iter()
                        .find(|c| c.receives(&s.codec) && c.payload_type == s.codec.payload_type)
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
                        && codecs.iter().any(|c| c.receives(&t.codec))
                })?;
                // A format the participant receives at a lower level than the track's is
                // one it cannot take (RFC 6184 §8.2.2; see the `codec` module).
                let codec = codecs.iter().find(|c| c.receives(&track.codec))?;
                let ssrc = fresh_ssrc(new_ssrc, &used);
                let rtx_ssrc = codec
                    .rtx_payload_type
                    .map(|_| fresh_ssrc(new_ssrc, &[used.as_slice(), &[ssrc]].concat()));
                let mut codec = codec.clone();
                codec.fmtp = track.codec.fmtp.clone().or(codec.fmtp);
                codec.feedback = codec.feedback.intersect(crate::sdp::codec::Feedback::ALL);
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
    pub(super) fn is_placed(&self, track: &str) -> bool {
        self.sections.iter().any(|s| match &s.state {
            SectionState::Media(m) => m.subscribe.as_ref().is_some_and(|x| x.track == track),
            _ => false,
        })
    }

    /// Remembers `uri` as `id` unless the session names it already.
    pub(super) fn note_extension(&mut self, uri: &str, id: u16) {
        if !self.extension_ids.iter().any(|(u, _)| u == uri) {
            self.extension_ids.push((uri.to_owned(), id));
        }
    }
}

/// The extensions shoal accepts from a publisher of `kind`: the mid (RFC 8843 §9.2
/// demultiplexing), the audio level it forwards, the stream ids (RFC 8852), the
/// transport-wide sequence number it sends feedback on, the capture time it carries
/// over to subscribers, and where REMB is agreed instead (`remb`) the abs-send-time
/// its own estimate runs on.
pub(super) fn receivable(kind: &MediaKind, uri: &str, remb: bool) -> bool {
    match uri {
        EXT_MID | EXT_TRANSPORT_CC | EXT_ABS_CAPTURE_TIME => true,
        EXT_ABS_SEND_TIME => remb,
        EXT_AUDIO_LEVEL => *kind == MediaKind::Audio,
        EXT_RID | EXT_REPAIRED_RID => *kind == MediaKind::Video,
        _ => false,
    }
}

pub(super) fn media_is_empty(m: &Media) -> bool {
    m.publish.is_none() && m.subscribe.is_none()
}

/// The primary and RTX SSRCs an offered section announces: the first `FID` group
/// (RFC 5576 §4.2, RFC 4588 §8.1), else the first `a=ssrc`.
pub(super) fn offered_ssrcs(m: &MediaDescription) -> (Option<u32>, Option<u32>) {
    if let Some(g) = m
        .ssrc_groups()
        .find(|g| g.semantics == "FID" && g.ssrcs.len() == 2)
    {
        return (g.ssrcs.first().copied(), g.ssrcs.get(1).copied());
    }
    (m.ssrcs().next().map(|s| s.ssrc), None)
}

/// The simulcast streams an offered section sends, at most [`MAX_LAYERS`]:
///
/// - RFC 8853 §5.2: the `send` list of `a=simulcast`, each stream by the first of its
///   alternatives that has an `a=rid` line in the send direction (rids without one
///   "MUST NOT be used") whose `pt=` list, if any, holds the codec shoal took, and
///   only when the RtpStreamId extension that carries the rid (RFC 8852 §3.1) was
///   agreed (§5.5: streams "MUST be related on the RTP level through RtpStreamId");
/// - else the SSRCs of an `a=ssrc-group:SIM` with their `FID` retransmission SSRCs,
///   in the group's order (libwebrtc's legacy signalling, lowest resolution first).
///
/// Fewer than two streams is no simulcast: an empty list.
pub(super) fn offered_layers(
    m: &MediaDescription,
    codec: &Codec,
    extensions: &[Extmap],
) -> Vec<LayerSpec> {
    let pt = codec.payload_type.to_string();
    let has_rid_ext = extensions.iter().any(|e| e.uri == EXT_RID);
    let mut layers: Vec<LayerSpec> = Vec::new();
    if let (true, Some(send)) = (has_rid_ext, m.simulcast().and_then(|s| s.send())) {
        for alternatives in &send.streams {
            let usable = alternatives.iter().find(|a| {
                m.rids().any(|r| {
                    r.id == a.rid
                        && r.direction == RidDirection::Send
                        && (r.formats.is_empty() || r.formats.contains(&pt))
                })
            });
            if let Some(a) = usable
                && !layers
                    .iter()
                    .any(|l| l.rid.as_deref() == Some(a.rid.as_str()))
                && layers.len() < MAX_LAYERS
            {
                layers.push(LayerSpec {
                    rid: Some(a.rid.clone()),
                    ssrc: None,
                    rtx_ssrc: None,
                });
            }
        }
    } else if let Some(sim) = m
        .ssrc_groups()
        .find(|g| g.semantics == "SIM" && g.ssrcs.len() >= 2)
    {
        for &ssrc in sim.ssrcs.iter().take(MAX_LAYERS) {
            let rtx_ssrc = m
                .ssrc_groups()
                .find(|g| g.semantics == "FID" && g.ssrcs.first() == Some(&ssrc))
                .and_then(|g| g.ssrcs.get(1).copied())
                .filter(|_| codec.rtx_payload_type.is_some());
            if !layers.iter().any(|l| l.ssrc == Some(ssrc)) {
                layers.push(LayerSpec {
                    rid: None,
                    ssrc: Some(ssrc),
                    rtx_ssrc,
                });
            }
        }
    }
    if layers.len() < 2 {
        layers.clear();
    }
    layers
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The video section of an offer whose section-level lines are `lines`.
    fn video(lines: &str) -> MediaDescription {
        let text = format!(
            "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\n\
             m=video 9 UDP/TLS/RTP/SAVPF 96 97\r\nc=IN IP4 0.0.0.0\r\na=mid:0\r\na=sendonly\r\n\
             a=rtpmap:96 VP8/90000\r\na=rtpmap:97 rtx/90000\r\na=fmtp:97 apt=96\r\n{lines}"
        );
        SessionDescription::parse(&text).unwrap().media.remove(0)
    }

    fn layers(lines: &str) -> Vec<LayerSpec> {
        let m = video(lines);
        let codec = Codec::read_all(&m).remove(0);
        let extensions: Vec<Extmap> = m.extmaps().cloned().collect();
        offered_layers(&m, &codec, &extensions)
    }

    const RID_EXT: &str = "a=extmap:10 urn:ietf:params:rtp-hdrext:sdes:rtp-stream-id\r\n";

    #[test]
    fn rid_streams_are_taken_by_the_rules_of_rfc_8853() {
        let rids =
            |l: &[LayerSpec]| -> Vec<String> { l.iter().filter_map(|l| l.rid.clone()).collect() };
        // Alternatives: the first with an a=rid line; a paused stream kept (it carries
        // nothing until resumed); a rid whose pt= list lacks the codec passed over.
        let l = layers(&format!(
            "{RID_EXT}a=rid:a send\r\na=rid:b send pt=97\r\na=rid:c send pt=96\r\n\
             a=rid:d send\r\na=simulcast:send x,a;~d;b,c\r\n"
        ));
        assert_eq!(rids(&l), ["a", "d", "c"]);
        // Without the rid extension, or with one stream left: no simulcast.
        assert!(layers("a=rid:a send\r\na=rid:b send\r\na=simulcast:send a;b\r\n").is_empty());
        assert!(
            layers(&format!(
                "{RID_EXT}a=rid:a send\r\na=simulcast:send a;z\r\n"
            ))
            .is_empty()
        );
        // A rid the other way, or a duplicate, is no stream of this list.
        let l = layers(&format!(
            "{RID_EXT}a=rid:a send\r\na=rid:b recv\r\na=rid:c send\r\na=simulcast:send a;b;a;c\r\n"
        ));
        assert_eq!(rids(&l), ["a", "c"]);
        // At most MAX_LAYERS.
        let l = layers(&format!(
            "{RID_EXT}a=rid:a send\r\na=rid:b send\r\na=rid:c send\r\na=rid:d send\r\n\
             a=simulcast:send a;b;c;d\r\n"
        ));
        assert_eq!(rids(&l), ["a", "b", "c"]);
    }

    #[test]
    fn ssrc_signalled_streams_pair_with_their_retransmissions() {
        let l = layers(
            "a=ssrc-group:SIM 10 20 30\r\na=ssrc-group:FID 10 11\r\na=ssrc-group:FID 30 31\r\n\
             a=ssrc:10 cname:x\r\na=ssrc:11 cname:x\r\na=ssrc:20 cname:x\r\n\
             a=ssrc:30 cname:x\r\na=ssrc:31 cname:x\r\n",
        );
        let got: Vec<(Option<u32>, Option<u32>)> = l.iter().map(|l| (l.ssrc, l.rtx_ssrc)).collect();
        assert_eq!(
            got,
            [(Some(10), Some(11)), (Some(20), None), (Some(30), Some(31))]
        );
        assert!(layers("a=ssrc-group:SIM 10\r\na=ssrc:10 cname:x\r\n").is_empty());
    }
}
