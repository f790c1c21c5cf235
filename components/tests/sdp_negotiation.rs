//! Media negotiation over a session (`sdp::Negotiation`) on the offers headless
//! Chromium 156 and aiortc 1.16 really wrote (`tests/fixtures/sdp/`): publishing from
//! an offer, placing room tracks in a participant's receiving sections, shoal's own
//! offers adding, stopping and recycling sections, glare, and what is refused; and as
//! sessions change: a section the participant stops is not offered back, an answer
//! that stops sending unpublishes, a refused answer does not wedge later offers,
//! shoal's new sections do not reuse the participant's payload types for other
//! formats (RFC 8843 §9.1), a narrower answer does not re-make a subscription, and a
//! session whose DTLS came up without SRTP keys gets no audio or video.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use shoal_components::sdp::{
    AnswerParams, Answered, Attribute, Change, Codec, CodecName, Direction, EXT_AUDIO_LEVEL,
    EXT_MID, EXT_TRANSPORT_CC, Fingerprint, HashFunction, MediaDescription, MediaKind, Negotiation,
    NegotiationError, SectionState, SessionDescription, Setup, TrackSource,
};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/sdp");
const UFRAG: &str = "sHoAlUfRaG012345";
const PWD: &str = "sHoAlPaSsWoRd+/0123456789abcd";

fn fixture(name: &str) -> SessionDescription {
    let path = format!("{FIXTURES}/{name}");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    SessionDescription::parse(&text).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The one host candidate of these answers.
const LOOPBACK: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 7100);

fn params() -> AnswerParams<'static> {
    AnswerParams {
        candidates: &[LOOPBACK],
        tcp_candidates: &[],
        ice_ufrag: UFRAG,
        ice_pwd: PWD,
        fingerprint_sha256: [0xA5; 32],
        session_id: 1_234_567,
    }
}

/// SSRCs from a counter, so runs are repeatable.
fn ssrcs() -> impl FnMut() -> u32 {
    let mut next = 1000;
    move || {
        next += 1;
        next
    }
}

/// `n`'s answer to fixture `name` in a room with `tracks`, SSRCs from a fresh counter.
fn answer_fixture(
    n: &mut Negotiation,
    name: &str,
    tracks: &[TrackSource],
) -> Result<Answered, NegotiationError> {
    n.answer(&fixture(name), &params(), tracks, &mut ssrcs())
}

/// A negotiation (session `id`) that answered Chromium's data-only offer with no
/// tracks in the room, and its SSRC counter.
fn data_only_session(id: u64) -> (Negotiation, impl FnMut() -> u32) {
    let mut n = Negotiation::new(id);
    let mut new_ssrc = ssrcs();
    n.answer(
        &fixture("chromium156_data_offer.sdp"),
        &params(),
        &[],
        &mut new_ssrc,
    )
    .unwrap();
    (n, new_ssrc)
}

/// What shoal writes, its own parser reads back to the same model.
fn reparsed(sdp: &SessionDescription) -> SessionDescription {
    let text = sdp.to_sdp_string();
    let back = SessionDescription::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(&back, sdp, "does not parse back the same:\n{text}");
    back
}

fn published(changes: &[Change]) -> Vec<(String, shoal_components::sdp::Published)> {
    changes
        .iter()
        .filter_map(|c| match c {
            Change::Published { mid, track } => Some((mid.clone(), track.clone())),
            _ => None,
        })
        .collect()
}

fn subscribed(changes: &[Change]) -> Vec<(String, shoal_components::sdp::Subscribed)> {
    changes
        .iter()
        .filter_map(|c| match c {
            Change::Subscribed { mid, track } => Some((mid.clone(), track.clone())),
            _ => None,
        })
        .collect()
}

fn track(id: &str, p: &shoal_components::sdp::Published) -> TrackSource {
    TrackSource {
        id: id.to_owned(),
        kind: p.kind.clone(),
        stream_id: format!("stream-{id}"),
        codec: p.codec.clone(),
    }
}

/// The room's tracks, published by a Chromium page.
fn chromium_tracks() -> Vec<TrackSource> {
    let mut n = Negotiation::new(1);
    let a = answer_fixture(&mut n, "chromium156_av_data_offer.sdp", &[]).unwrap();
    published(&a.changes)
        .iter()
        .map(|(mid, p)| track(&format!("T{mid}"), p))
        .collect()
}

/// The description a JSEP peer would send back for `offer`: every section with its
/// direction reversed, formats and extensions kept. With `as_offer`, it is the peer's
/// next offer instead: its own ICE credentials and fingerprint (from `first`) and
/// `a=setup:actpass`.
fn participant_reply(
    offer: &SessionDescription,
    first: &SessionDescription,
    as_offer: bool,
) -> SessionDescription {
    let own = |pick: fn(&Attribute) -> bool| {
        first.media[0]
            .attributes
            .iter()
            .chain(&first.attributes)
            .find(|a| pick(a))
            .cloned()
            .unwrap()
    };
    let ufrag = own(|a| matches!(a, Attribute::IceUfrag(_)));
    let pwd = own(|a| matches!(a, Attribute::IcePwd(_)));
    let fp = if as_offer {
        own(|a| matches!(a, Attribute::Fingerprint(_)))
    } else {
        Attribute::Fingerprint(Fingerprint::new(HashFunction::Sha256, &[1; 32]))
    };
    let mut sdp = SessionDescription::new(shoal_components::sdp::Origin::new(99, 2));
    for g in offer.groups() {
        sdp.push_attribute(Attribute::Group(g.clone()));
    }
    for o in &offer.media {
        let formats: Vec<&str> = o.formats.iter().map(String::as_str).collect();
        let mut m = MediaDescription::new(o.kind.clone(), o.port, &o.proto, &formats);
        m.connections = o.connections.clone();
        for a in &o.attributes {
            let keep = match a {
                Attribute::Mid(_)
                | Attribute::RtpMap(_)
                | Attribute::Fmtp(_)
                | Attribute::RtcpFb(_)
                | Attribute::Extmap(_)
                | Attribute::RtcpMux
                | Attribute::SctpPort(_) => Some(a.clone()),
                Attribute::Direction(d) => Some(Attribute::Direction(d.reversed())),
                Attribute::Setup(_) => Some(Attribute::Setup(if as_offer {
                    Setup::ActPass
                } else {
                    Setup::Active
                })),
                Attribute::IceUfrag(_) => Some(ufrag.clone()),
                Attribute::IcePwd(_) => Some(pwd.clone()),
                Attribute::Fingerprint(_) => Some(fp.clone()),
                _ => None,
            };
            if let Some(a) = keep.filter(|_| o.port != 0 || matches!(a, Attribute::Mid(_))) {
                m.push_attribute(a);
            }
        }
        sdp.push_media(m);
    }
    sdp
}

fn set_direction(m: &mut MediaDescription, d: Direction) {
    for a in &mut m.attributes {
        if let Attribute::Direction(x) = a {
            *x = d;
        }
    }
}

/// `Negotiation::declined` says tracks are "declined (by answering or re-offering a
/// section of theirs as not receiving); not offered again", and an answer with port 0
/// does decline. But when the participant itself stops the transceiver (RFC 3264 §8.2,
/// JSEP §5.2.2: its next offer has the section with port 0), `answer` closes the
/// section without declining the track, and shoal's very next `offer` puts the same
/// track back in a recycled section. A page that stops unwanted transceivers and shoal
/// then renegotiate forever.
/// What a participant whose first offer was Chromium's answers to `offer`.
fn answer_as_participant(offer: &SessionDescription) -> SessionDescription {
    participant_reply(offer, &fixture("chromium156_av_data_offer.sdp"), false)
}

#[test]
fn chromium_offer_publishes_audio_and_video_with_one_codec_each() {
    let offer = fixture("chromium156_av_data_offer.sdp");
    let mut n = Negotiation::new(7);
    let a = n.answer(&offer, &params(), &[], &mut ssrcs()).unwrap();
    let sdp = reparsed(&a.sdp);
    assert_eq!(a.transport.setup, Setup::Passive);
    assert_eq!(a.data_mid.as_deref(), Some("2"));
    assert_eq!(sdp.bundle_mids().unwrap(), ["0", "1", "2"]);
    assert!(sdp.ice_lite());

    let p = published(&a.changes);
    assert_eq!(p.len(), 2, "{:?}", a.changes);
    let (mid, audio) = &p[0];
    assert_eq!(mid, "0");
    assert_eq!(audio.codec.name, CodecName::Opus);
    assert_eq!(audio.codec.payload_type, 111);
    assert_eq!(
        audio.codec.fmtp.as_deref(),
        Some("minptime=10;useinbandfec=1")
    );
    assert_eq!(audio.ssrc, Some(2_003_127_882));
    assert_eq!(audio.rtx_ssrc, None);
    let msid = audio.msid.as_ref().unwrap();
    assert_eq!(msid.stream_id, "ca7de747-d657-44e8-a129-c22b4cdc121e");
    let uris: Vec<&str> = audio.extensions.iter().map(|e| e.uri.as_str()).collect();
    assert_eq!(uris, [EXT_AUDIO_LEVEL, EXT_TRANSPORT_CC, EXT_MID]);
    // Transport-wide feedback is answered, so the publisher's estimator runs on it.
    assert!(audio.codec.feedback.transport_cc);

    let (mid, video) = &p[1];
    assert_eq!(mid, "1");
    assert_eq!(video.codec.name, CodecName::Vp8, "the offer's first choice");
    assert_eq!(video.codec.payload_type, 96);
    assert_eq!(video.codec.rtx_payload_type, Some(97));
    assert!(video.codec.feedback.nack && video.codec.feedback.pli && video.codec.feedback.fir);
    let offered_video = &offer.media[1];
    let fid = offered_video.ssrc_groups().next().unwrap();
    assert_eq!(video.ssrc, Some(fid.ssrcs[0]));
    assert_eq!(video.rtx_ssrc, Some(fid.ssrcs[1]));

    // The answer: recvonly, one codec (and its RTX), the offer's payload types and
    // extension ids, transport-cc (shoal sends the feedback) and no goog-remb.
    let audio_m = &sdp.media[0];
    assert_eq!(audio_m.direction(), Some(Direction::RecvOnly));
    assert_eq!(audio_m.formats, ["111"]);
    assert_eq!(audio_m.extmap_id(EXT_AUDIO_LEVEL), Some(1));
    assert_eq!(audio_m.extmap_id(EXT_MID), Some(4));
    assert_eq!(audio_m.extmap_id(EXT_TRANSPORT_CC), Some(3));
    let fbs: Vec<String> = audio_m.rtcp_fbs().map(|f| f.to_string()).collect();
    assert_eq!(fbs, ["111 transport-cc"]);
    assert!(audio_m.rtcp_mux() && audio_m.rtcp_rsize());
    let video_m = &sdp.media[1];
    assert_eq!(video_m.direction(), Some(Direction::RecvOnly));
    assert_eq!(video_m.formats, ["96", "97"]);
    let fbs: Vec<String> = video_m.rtcp_fbs().map(|f| f.to_string()).collect();
    assert_eq!(
        fbs,
        ["96 nack", "96 nack pli", "96 ccm fir", "96 transport-cc"]
    );
    assert_eq!(video_m.extmap_id(EXT_TRANSPORT_CC), Some(3));
    assert_eq!(video_m.fmtp(97).unwrap().params, "apt=96");
    assert!(video_m.msids().next().is_none(), "shoal sends nothing here");
    assert_eq!(sdp.media[2].sctp_port(), Some(5000));
}

#[test]
fn aiortc_offer_publishes_and_rejects_nothing_it_can_use() {
    let mut n = Negotiation::new(7);
    let a = answer_fixture(&mut n, "aiortc116_av_data_offer.sdp", &[]).unwrap();
    reparsed(&a.sdp);
    let p = published(&a.changes);
    assert_eq!(p.len(), 2);
    assert_eq!(p[0].1.codec.name, CodecName::Opus);
    assert_eq!(p[0].1.ssrc, Some(1_989_306_819));
    assert_eq!(p[1].1.codec.name, CodecName::Vp8);
    assert_eq!(p[1].1.codec.payload_type, 97);
    assert_eq!(p[1].1.codec.rtx_payload_type, Some(98));
    assert_eq!(p[1].1.ssrc, Some(4_132_121_875));
    assert_eq!(p[1].1.rtx_ssrc, Some(1_613_963_570));
}

#[test]
fn a_second_participants_sendrecv_sections_carry_the_room_tracks() {
    let tracks = chromium_tracks();
    let mut n = Negotiation::new(8);
    let a = answer_fixture(&mut n, "chromium156_av_data_offer.sdp", &tracks).unwrap();
    let sdp = reparsed(&a.sdp);
    let s = subscribed(&a.changes);
    assert_eq!(s.len(), 2, "{:?}", a.changes);
    assert_eq!(s[0].0, "0");
    assert_eq!(s[0].1.track, "T0");
    assert_eq!(s[0].1.codec.payload_type, 111);
    assert_eq!(s[1].1.track, "T1");
    assert_eq!(s[1].1.codec.name, CodecName::Vp8);
    assert_ne!(s[0].1.ssrc, s[1].1.ssrc);
    assert!(s[1].1.rtx_ssrc.is_some());
    // Both directions now: sendrecv, with shoal's msid and SSRCs.
    let video = &sdp.media[1];
    assert_eq!(video.direction(), Some(Direction::SendRecv));
    let msid = video.msids().next().unwrap();
    assert_eq!(msid.stream_id, "stream-T1");
    assert_eq!(msid.track_id.as_deref(), Some("T1"));
    let group = video.ssrc_groups().next().unwrap();
    assert_eq!(group.semantics, "FID");
    assert_eq!(group.ssrcs, [s[1].1.ssrc, s[1].1.rtx_ssrc.unwrap()]);
    assert!(video.ssrcs().any(|x| x.attribute == "cname"));
    // Shoal sends only the extensions it writes.
    let uris: Vec<&str> = s[0].1.extensions.iter().map(|e| e.uri.as_str()).collect();
    assert_eq!(uris, [EXT_AUDIO_LEVEL, EXT_TRANSPORT_CC, EXT_MID]);

    // The same offer again (a renegotiation that changes nothing) changes nothing.
    let again = answer_fixture(&mut n, "chromium156_av_data_offer.sdp", &tracks).unwrap();
    assert!(again.changes.is_empty(), "{:?}", again.changes);
    assert!(again.sdp.origin.session_version > a.sdp.origin.session_version);
}

#[test]
fn shoal_offers_new_tracks_then_stops_and_recycles_their_sections() {
    let tracks = chromium_tracks();
    let mut n = Negotiation::new(9);
    let mut new_ssrc = ssrcs();
    let first = n
        .answer(
            &fixture("chromium156_data_offer.sdp"),
            &params(),
            &tracks,
            &mut new_ssrc,
        )
        .unwrap();
    assert!(
        first.changes.is_empty(),
        "a data-only offer has nowhere to put tracks"
    );
    assert!(
        n.offer(&params(), &[], &mut new_ssrc).is_none(),
        "nothing to change"
    );

    // Tracks arrive: one sendonly section each, appended after the data section.
    let offer = n.offer(&params(), &tracks, &mut new_ssrc).unwrap();
    let offer = reparsed(&offer);
    assert!(n.offer_outstanding());
    assert!(
        n.offer(&params(), &tracks, &mut new_ssrc).is_none(),
        "one at a time"
    );
    assert_eq!(offer.media.len(), 3);
    let mids: Vec<&str> = offer.media.iter().filter_map(|m| m.mid()).collect();
    assert_eq!(mids, ["0", "s0", "s1"]);
    assert_eq!(offer.bundle_mids().unwrap(), ["0", "s0", "s1"]);
    for m in &offer.media[1..] {
        assert_eq!(m.direction(), Some(Direction::SendOnly));
        assert_eq!(m.setup(), Some(Setup::ActPass), "RFC 5763 §5");
        assert!(m.msids().next().is_some());
        assert_eq!(
            m.extmap_id(EXT_MID),
            Some(1),
            "the lowest free id, the same everywhere"
        );
    }
    assert_eq!(offer.media[1].kind, MediaKind::Audio);
    assert_eq!(offer.media[1].formats, ["111"]);
    assert_eq!(offer.media[1].extmap_id(EXT_AUDIO_LEVEL), Some(2));
    assert_eq!(offer.media[2].formats, ["96", "97"]);

    let changes = n.accept(&answer_as_participant(&offer)).unwrap();
    let s = subscribed(&changes);
    assert_eq!(s.len(), 2, "{changes:?}");
    assert_eq!((s[0].0.as_str(), s[0].1.track.as_str()), ("s0", "T0"));
    assert_eq!((s[1].0.as_str(), s[1].1.track.as_str()), ("s1", "T1"));
    assert!(matches!(
        n.accept(&offer),
        Err(NegotiationError::NoOfferOutstanding)
    ));

    // The audio track leaves: its section is disabled, port 0 and no msid.
    let offer = n.offer(&params(), &tracks[1..], &mut new_ssrc).unwrap();
    let offer = reparsed(&offer);
    assert_eq!(offer.media[1].port, 0);
    assert!(offer.media[1].msids().next().is_none());
    assert_eq!(offer.bundle_mids().unwrap(), ["0", "s1"]);
    let changes = n.accept(&answer_as_participant(&offer)).unwrap();
    assert_eq!(
        changes,
        [Change::Unsubscribed {
            mid: "s0".into(),
            track: "T0".into()
        }]
    );

    // A new audio track recycles that index with a new mid (RFC 8829 §5.2.2).
    let mut newer = tracks[0].clone();
    newer.id = "T9".into();
    let offer = n
        .offer(&params(), &[tracks[1].clone(), newer], &mut new_ssrc)
        .unwrap();
    let offer = reparsed(&offer);
    assert_eq!(offer.media.len(), 3, "no section added");
    assert_eq!(offer.media[1].mid(), Some("s2"));
    assert_eq!(offer.media[1].port, 7100);
    let changes = n.accept(&answer_as_participant(&offer)).unwrap();
    assert_eq!(subscribed(&changes)[0].1.track, "T9");
}

#[test]
fn a_section_answered_with_port_zero_declines_its_track() {
    let tracks = chromium_tracks();
    let (mut n, mut new_ssrc) = data_only_session(10);
    let offer = n.offer(&params(), &tracks, &mut new_ssrc).unwrap();
    let mut answer = answer_as_participant(&offer);
    answer.media[2].port = 0;
    let changes = n.accept(&answer).unwrap();
    assert_eq!(subscribed(&changes).len(), 1);
    assert_eq!(n.declined(), ["T1"]);
    assert!(
        n.offer(&params(), &tracks, &mut new_ssrc).is_none(),
        "not offered again"
    );
}

#[test]
fn glare_drops_shoals_offer_and_answers_the_participant() {
    let tracks = chromium_tracks();
    let mut n = Negotiation::new(11);
    let mut new_ssrc = ssrcs();
    let data_offer = fixture("chromium156_data_offer.sdp");
    n.answer(&data_offer, &params(), &[], &mut new_ssrc)
        .unwrap();
    let ours = n.offer(&params(), &tracks, &mut new_ssrc).unwrap();
    // The participant offers at the same time: shoal rolls back and answers.
    let a = n
        .answer(&data_offer, &params(), &tracks, &mut new_ssrc)
        .unwrap();
    assert!(a.changes.is_empty());
    assert!(!n.offer_outstanding());
    assert!(matches!(
        n.accept(&answer_as_participant(&ours)),
        Err(NegotiationError::NoOfferOutstanding)
    ));
    // And offers again afterwards.
    assert!(n.offer(&params(), &tracks, &mut new_ssrc).is_some());
}

#[test]
fn payload_types_in_use_for_another_format_are_not_reused() {
    // A track whose codec claims payload type 111 (in use for opus in this session)
    // for VP8 gets a free dynamic payload type instead.
    let tracks = chromium_tracks();
    let mut vp8 = tracks[1].clone();
    vp8.codec.payload_type = 111;
    vp8.codec.rtx_payload_type = Some(96);
    let mut n = Negotiation::new(12);
    let mut new_ssrc = ssrcs();
    // This participant publishes opus as 111 and VP8 as 96 (and RTX 97), sendonly, so
    // the track needs a section of its own.
    let mut offer = fixture("chromium156_av_data_offer.sdp");
    for m in &mut offer.media {
        for a in &mut m.attributes {
            if let Attribute::Direction(d) = a {
                *d = Direction::SendOnly;
            }
        }
    }
    n.answer(&offer, &params(), &[], &mut new_ssrc).unwrap();
    let offer = n.offer(&params(), &[vp8], &mut new_ssrc).unwrap();
    let added = offer.media.last().unwrap();
    assert_eq!(added.mid(), Some("s0"));
    let pt = added.formats[0].parse::<u8>().unwrap();
    let rtx = added.formats[1].parse::<u8>().unwrap();
    assert_eq!(added.rtpmap(pt).unwrap().encoding_name, "VP8");
    assert!(
        ![111, 96, 97].contains(&rtx) && ![111, 97].contains(&pt),
        "{pt} {rtx}"
    );
    // 96 is VP8 in this session already, so it may be used for VP8 again.
    assert_eq!(pt, 96);
    assert_eq!(added.fmtp(rtx).unwrap().params, "apt=96");
}

#[test]
fn refused_offers() {
    let mut n = Negotiation::new(13);
    let mut new_ssrc = ssrcs();
    let offer = fixture("chromium156_av_data_offer.sdp");
    n.answer(&offer, &params(), &[], &mut new_ssrc).unwrap();

    // RFC 8839 §4.4.1.1.1: a restart changes both credentials; one alone is refused.
    let mut half = offer.clone();
    for m in &mut half.media {
        for a in &mut m.attributes {
            if let Attribute::IceUfrag(u) = a {
                *u = "newU".into();
            }
        }
    }
    assert!(!n.restarts_ice(&half));
    assert_eq!(
        n.answer(&half, &params(), &[], &mut new_ssrc).unwrap_err(),
        NegotiationError::PartialIceRestart
    );
    let mut fewer = offer.clone();
    fewer.media.pop();
    assert_eq!(
        n.answer(&fewer, &params(), &[], &mut new_ssrc).unwrap_err(),
        NegotiationError::SectionsRemoved
    );

    // Nothing usable at all.
    let mut none = offer.clone();
    for m in &mut none.media {
        m.port = 0;
    }
    assert_eq!(
        Negotiation::new(1)
            .answer(&none, &params(), &[], &mut new_ssrc)
            .unwrap_err(),
        NegotiationError::NoUsableSection
    );
}

#[test]
fn unpublishing_and_codecs_shoal_does_not_forward() {
    let offer = fixture("chromium156_av_data_offer.sdp");
    let mut n = Negotiation::new(14);
    let mut new_ssrc = ssrcs();
    n.answer(&offer, &params(), &[], &mut new_ssrc).unwrap();
    // The page stops sending video: recvonly now.
    let mut stop = offer.clone();
    for a in &mut stop.media[1].attributes {
        if let Attribute::Direction(d) = a {
            *d = Direction::RecvOnly;
        }
    }
    let a = n.answer(&stop, &params(), &[], &mut new_ssrc).unwrap();
    assert_eq!(a.changes, [Change::Unpublished { mid: "1".into() }]);
    assert_eq!(a.sdp.media[1].direction(), Some(Direction::Inactive));
    assert!(
        matches!(n.sections()[1].state, SectionState::Media(_)),
        "kept open"
    );

    // An audio section with only G.722 and PCMU: nothing shoal forwards, rejected.
    let mut g722 = fixture("chromium156_av_data_offer.sdp");
    let audio = &mut g722.media[0];
    audio.formats = vec!["9".into(), "0".into()];
    audio.attributes.retain(
        |a| !matches!(a, Attribute::RtpMap(r) if r.payload_type != 9 && r.payload_type != 0),
    );
    assert!(Codec::read_all(audio).is_empty());
    let a = Negotiation::new(15)
        .answer(&g722, &params(), &[], &mut new_ssrc)
        .unwrap();
    // It is the BUNDLE tag, so it is kept inactive rather than rejected (RFC 8843 §7.3.3).
    assert_eq!(a.sdp.media[0].direction(), Some(Direction::Inactive));
    assert_eq!(a.sdp.media[0].port, 7100);
    assert!(published(&a.changes).iter().all(|(mid, _)| mid != "0"));
}

#[test]
fn a_section_the_participant_stops_is_not_offered_back() {
    let tracks = chromium_tracks();
    let first = fixture("chromium156_data_offer.sdp");
    let mut n = Negotiation::new(21);
    let mut new_ssrc = ssrcs();
    n.answer(&first, &params(), &[], &mut new_ssrc).unwrap();
    let ours = n.offer(&params(), &tracks, &mut new_ssrc).unwrap();
    n.accept(&participant_reply(&ours, &first, false)).unwrap();

    // The participant stops the video transceiver (mid s1) and offers.
    let mut reoffer = participant_reply(&ours, &first, true);
    assert_eq!(reoffer.media[2].mid(), Some("s1"));
    reoffer.media[2].port = 0;
    let a = n
        .answer(&reoffer, &params(), &tracks, &mut new_ssrc)
        .unwrap();
    assert!(
        a.changes
            .iter()
            .any(|c| matches!(c, Change::Unsubscribed { track, .. } if track == "T1")),
        "{:?}",
        a.changes
    );
    let again = n.offer(&params(), &tracks, &mut new_ssrc);
    let readded = again
        .as_ref()
        .map(|o| o.to_sdp_string())
        .filter(|s| s.contains("a=msid:stream-T1 T1"));
    assert!(
        readded.is_none(),
        "shoal offers the stopped track right back:\n{}",
        readded.unwrap_or_default()
    );
}

/// A participant that publishes in a sendrecv section and answers shoal's offer for
/// that section with `recvonly` (its sender has no track any more; RFC 3264 §6.1: it
/// will not send) still counts as publishing: `accept` keeps `m.publish` from the
/// offered state and reports no `Unpublished`, so the room keeps a dead track (and
/// every subscriber's section for it) until the participant happens to offer again.
#[test]
fn an_answer_that_stops_sending_unpublishes() {
    let tracks = chromium_tracks();
    let first = fixture("chromium156_av_data_offer.sdp");
    let mut n = Negotiation::new(22);
    let mut new_ssrc = ssrcs();
    n.answer(&first, &params(), &[], &mut new_ssrc).unwrap();
    // Another participant's tracks arrive: shoal sends them in this participant's own
    // sendrecv sections.
    let ours = n.offer(&params(), &tracks, &mut new_ssrc).unwrap();
    assert_eq!(ours.media[1].direction(), Some(Direction::SendRecv));
    let mut answer = participant_reply(&ours, &first, false);
    set_direction(&mut answer.media[1], Direction::RecvOnly);
    let changes = n.accept(&answer).unwrap();
    assert!(
        changes
            .iter()
            .any(|c| matches!(c, Change::Unpublished { mid } if mid == "1")),
        "the participant answered recvonly for its video section, yet: {changes:?}"
    );
}

/// An answer `accept` refuses leaves shoal's offer outstanding: no rollback, so
/// `offer` returns `None` from then on and the participant gets no further offers
/// from shoal until it offers itself (nothing in the control plane retries or times
/// the offer out either).
#[test]
fn a_refused_answer_does_not_wedge_shoals_offers() {
    let tracks = chromium_tracks();
    let first = fixture("chromium156_data_offer.sdp");
    let mut n = Negotiation::new(23);
    let mut new_ssrc = ssrcs();
    n.answer(&first, &params(), &[], &mut new_ssrc).unwrap();
    let ours = n.offer(&params(), &tracks[..1], &mut new_ssrc).unwrap();
    let mut bad = participant_reply(&ours, &first, false);
    bad.media.pop();
    assert!(n.accept(&bad).is_err());
    assert!(
        !n.offer_outstanding() || n.offer(&params(), &tracks, &mut new_ssrc).is_some(),
        "after a refused answer shoal can never offer again (offer_outstanding stays true)"
    );
}

/// RFC 8843 §9.1: "the same payload type value MUST NOT be used to describe
/// different formats within a BUNDLE group" (Chromium refuses such an offer with "A
/// BUNDLE group contains a codec collision"). `session_codec` only knows the payload
/// types of codecs shoal forwards (`Media::receivable` is `Codec::read_all`), so the
/// participant's VP9, AV1, RED, ulpfec, G.722, telephone-event… payload types look
/// free. A track published by aiortc (VP8 97, RTX 98) added to a Chromium
/// participant's session gets RTX payload type 98, which that session uses for VP9.
#[test]
fn shoals_new_sections_do_not_reuse_payload_types_of_other_formats() {
    let mut aiortc = Negotiation::new(2);
    let a = answer_fixture(&mut aiortc, "aiortc116_av_data_offer.sdp", &[]).unwrap();
    let vp8 = a
        .changes
        .iter()
        .find_map(|c| match c {
            Change::Published { track, .. } if track.codec.payload_type == 97 => {
                Some(TrackSource {
                    id: "A1".into(),
                    kind: track.kind.clone(),
                    stream_id: "aiortc".into(),
                    codec: track.codec.clone(),
                })
            }
            _ => None,
        })
        .expect("aiortc publishes VP8 as 97 with RTX 98");
    assert_eq!(vp8.codec.rtx_payload_type, Some(98));

    // A Chromium participant that only sends: the track needs a section of its own.
    let mut offer = fixture("chromium156_av_data_offer.sdp");
    for m in &mut offer.media {
        set_direction(m, Direction::SendOnly);
    }
    let mut n = Negotiation::new(24);
    let mut new_ssrc = ssrcs();
    n.answer(&offer, &params(), &[], &mut new_ssrc).unwrap();
    let ours = n.offer(&params(), &[vp8], &mut new_ssrc).unwrap();
    let added = ours.media.last().unwrap();
    for pt in added.formats.iter().map(|f| f.parse::<u8>().unwrap()) {
        let ours = added.rtpmap(pt).unwrap();
        for m in &offer.media {
            if let Some(theirs) = m.rtpmap(pt) {
                assert!(
                    theirs
                        .encoding_name
                        .eq_ignore_ascii_case(&ours.encoding_name)
                        && added.fmtp(pt).map(|f| f.params.clone())
                            == m.fmtp(pt).map(|f| f.params.clone()),
                    "payload type {pt}: shoal's new section says {} {:?}, the participant's \
                     section {:?} says {} {:?}",
                    ours.encoding_name,
                    added.fmtp(pt).map(|f| f.params.clone()),
                    m.mid(),
                    theirs.encoding_name,
                    m.fmtp(pt).map(|f| f.params.clone())
                );
            }
        }
    }
}

/// An answer to a later offer of shoal's that keeps less of an existing subscription
/// (here: no RTX format any more, which RFC 3264 §6.1 lets the answerer do) makes
/// `accept` report `Unsubscribed` + `Subscribed` for the same section and the *same
/// SSRC*. The control plane turns that into `Unsubscribe` + `Subscribe`, and the
/// shard's new `Subscription` starts a fresh random sequence number on an SSRC whose
/// SRTP state (and the subscriber's) remembers the old highest index: see
/// `resubscribing_the_same_ssrc_keeps_forwarding` in server/tests.
#[test]
fn a_narrower_answer_does_not_resubscribe_the_same_ssrc() {
    let tracks = chromium_tracks();
    let first = fixture("chromium156_data_offer.sdp");
    let mut n = Negotiation::new(25);
    let mut new_ssrc = ssrcs();
    n.answer(&first, &params(), &[], &mut new_ssrc).unwrap();
    let video = &tracks[1..];
    let ours = n.offer(&params(), video, &mut new_ssrc).unwrap();
    n.accept(&participant_reply(&ours, &first, false)).unwrap();

    // The audio track arrives too; the participant's answer drops RTX for the video.
    let ours = n.offer(&params(), &tracks, &mut new_ssrc).unwrap();
    let mut answer = participant_reply(&ours, &first, false);
    let v = &mut answer.media[1];
    assert_eq!(v.mid(), Some("s0"));
    v.formats.retain(|f| f == "96");
    v.attributes.retain(|a| match a {
        Attribute::RtpMap(r) => r.payload_type == 96,
        Attribute::Fmtp(f) => f.format == "96",
        _ => true,
    });
    let changes = n.accept(&answer).unwrap();
    let unsub = changes
        .iter()
        .any(|c| matches!(c, Change::Unsubscribed { track, .. } if track == "T1"));
    let resub_ssrc = changes.iter().find_map(|c| match c {
        Change::Subscribed { track, .. } if track.track == "T1" => Some(track.ssrc),
        _ => None,
    });
    let old_ssrc = ours.media[1].ssrcs().next().map(|s| s.ssrc);
    assert!(
        !(unsub && resub_ssrc.is_some() && resub_ssrc == old_ssrc),
        "T1 is unsubscribed and subscribed again with the same SSRC {old_ssrc:?}: {changes:?}"
    );
}

#[test]
fn a_session_places_streams_only_while_it_has_ssrcs_to_retire() {
    use shoal_components::shared::MAX_RETIRED_SSRCS;
    let tracks = chromium_tracks();
    let video = &tracks[1..];
    let (mut n, mut new_ssrc) = data_only_session(9);
    // A video track comes and goes, again and again, each time under a new id:
    // each stream retires its SSRC and its RTX SSRC when it goes.
    let mut placed = 0usize;
    for round in 0..MAX_RETIRED_SSRCS {
        let mut t = video[0].clone();
        t.id = format!("V{round}");
        let Some(offer) = n.offer(&params(), std::slice::from_ref(&t), &mut new_ssrc) else {
            break;
        };
        let changes = n.accept(&answer_as_participant(&offer)).unwrap();
        if subscribed(&changes).is_empty() {
            break;
        }
        placed += 1;
        let offer = n.offer(&params(), &[], &mut new_ssrc).unwrap();
        n.accept(&answer_as_participant(&offer)).unwrap();
    }
    assert_eq!(
        placed,
        MAX_RETIRED_SSRCS / 2,
        "the bound holds, and only it"
    );
    // Past it nothing new is offered: the track waits for a new session.
    let mut t = video[0].clone();
    t.id = "late".into();
    assert!(n.offer(&params(), &[t], &mut new_ssrc).is_none());
}

/// An offer with a new ice-ufrag and ice-pwd restarts ICE (RFC 8839 §4.4.1.1.1):
/// answered with the new credentials the caller passes (§4.4.2.1), the same DTLS
/// role and fingerprint, the same sections; a restart over PATCH changes the
/// remote credentials alone.
#[test]
fn an_offer_with_new_ice_credentials_restarts_ice() {
    let mut n = Negotiation::new(13);
    let mut new_ssrc = ssrcs();
    let offer = fixture("chromium156_av_data_offer.sdp");
    let first = n.answer(&offer, &params(), &[], &mut new_ssrc).unwrap();
    let mut restart = offer.clone();
    for m in &mut restart.media {
        for a in &mut m.attributes {
            match a {
                Attribute::IceUfrag(u) => *u = "newU".into(),
                Attribute::IcePwd(p) => *p = "newpasswordnewpassword00".into(),
                _ => {}
            }
        }
    }
    assert!(n.restarts_ice(&restart));
    assert!(!n.restarts_ice(&offer));
    let fresh = AnswerParams {
        ice_ufrag: "shoalNEW",
        ice_pwd: "shoalnewpasswordshoalnew",
        ..params()
    };
    let again = n.answer(&restart, &fresh, &[], &mut new_ssrc).unwrap();
    assert_eq!(again.transport.ufrag, "newU");
    assert_eq!(again.transport.pwd, "newpasswordnewpassword00");
    assert_eq!(again.transport.setup, first.transport.setup);
    assert_eq!(
        again.transport.fingerprint_sha256,
        first.transport.fingerprint_sha256
    );
    let text = again.sdp.to_sdp_string();
    assert!(text.contains("a=ice-ufrag:shoalNEW\r\n"), "{text}");
    assert!(
        !text.contains(&format!("a=ice-ufrag:{UFRAG}\r\n")),
        "{text}"
    );
    assert_eq!(again.sdp.media.len(), first.sdp.media.len());
    assert!(again.changes.is_empty(), "{:?}", again.changes);
    // The same offer again is no restart.
    assert!(!n.restarts_ice(&restart));
    // Over PATCH: both change, or the restart is refused and nothing changes.
    assert_eq!(
        n.restart_remote_ice("newU", "otherpasswordotherpass00"),
        Err(NegotiationError::PartialIceRestart)
    );
    n.restart_remote_ice("thirdU", "thirdpasswordthirdpass00")
        .unwrap();
    assert_eq!(n.transport().map(|t| t.ufrag.as_str()), Some("thirdU"));
    assert_eq!(
        Negotiation::new(1).restart_remote_ice("a", "b"),
        Err(NegotiationError::NoSession)
    );
}

/// REMB is shoal's estimate of what a publisher sends it: agreed with an aiortc
/// publisher (goog-remb and abs-send-time, no transport-cc), never on what shoal
/// sends a subscriber, and never on a transport that has transport-cc on any section.
#[test]
fn remb_is_for_publishers_without_transport_cc_on_the_transport() {
    let mut n = Negotiation::new(1);
    let a = answer_fixture(&mut n, "aiortc116_av_data_offer.sdp", &[]).unwrap();
    let tracks: Vec<TrackSource> = published(&a.changes)
        .iter()
        .map(|(mid, p)| track(&format!("A{mid}"), p))
        .collect();
    let video = tracks.iter().find(|t| t.kind == MediaKind::Video).unwrap();
    assert!(video.codec.feedback.goog_remb, "{:?}", video.codec);

    // The aiortc publisher's tracks, offered to a Chromium subscriber in sections
    // shoal adds: no goog-remb on them.
    let mut s = Negotiation::new(2);
    let mut new_ssrc = ssrcs();
    s.answer(
        &fixture("chromium156_data_offer.sdp"),
        &params(),
        &[],
        &mut new_ssrc,
    )
    .unwrap();
    let offer = reparsed(&s.offer(&params(), &tracks, &mut new_ssrc).unwrap());
    let added = &offer.media[1..];
    assert!(!added.is_empty());
    for m in added {
        assert_eq!(m.direction(), Some(Direction::SendOnly));
        assert!(
            !m.rtcp_fbs().any(|f| f.feedback == "goog-remb"),
            "{:?}",
            m.rtcp_fbs().collect::<Vec<_>>()
        );
    }

    // The same aiortc offer with transport-cc's extension on its audio section only:
    // the transport has transport-cc, so its video gets no REMB either.
    let mut bundled = fixture("aiortc116_av_data_offer.sdp");
    bundled.media[0]
        .attributes
        .push(Attribute::Extmap(shoal_components::sdp::Extmap::new(
            9,
            EXT_TRANSPORT_CC,
        )));
    let b = Negotiation::new(3)
        .answer(&bundled, &params(), &[], &mut ssrcs())
        .unwrap();
    let video = &b.sdp.media[1];
    assert!(!video.rtcp_fbs().any(|f| f.feedback == "goog-remb"));
    assert!(
        !video
            .extmaps()
            .any(|e| e.uri.ends_with("rtp-hdrext/abs-send-time"))
    );
}

/// A data-only session whose DTLS connected without SRTP keys (`refuse_media`) can
/// carry no RTP: shoal offers it none of the room's tracks, and when it adds audio and
/// video by renegotiation they are rejected with port 0 (RFC 3264 §6), where a keyed
/// session publishes them.
#[test]
fn a_session_without_srtp_keys_is_neither_offered_nor_given_media() {
    let tracks = chromium_tracks();
    let (mut unkeyed, mut new_ssrc) = data_only_session(30);
    let mut keyed = unkeyed.clone();
    unkeyed.refuse_media();
    assert!(unkeyed.media_refused() && !keyed.media_refused());
    assert!(
        keyed
            .clone()
            .offer(&params(), &tracks, &mut ssrcs())
            .is_some(),
        "a keyed session is offered the tracks"
    );
    assert_eq!(unkeyed.offer(&params(), &tracks, &mut new_ssrc), None);

    // The participant adds Chromium's audio and video sections after its data one.
    let mut reoffer = fixture("chromium156_data_offer.sdp");
    let av = fixture("chromium156_av_data_offer.sdp");
    for (i, m) in av
        .media
        .iter()
        .filter(|m| m.kind != MediaKind::Application)
        .enumerate()
    {
        let mut m = m.clone();
        for a in &mut m.attributes {
            if let Attribute::Mid(mid) = a {
                *mid = format!("m{i}");
            }
        }
        reoffer.push_media(m);
    }
    let a = keyed
        .answer(&reoffer, &params(), &tracks, &mut ssrcs())
        .unwrap();
    assert_eq!(published(&a.changes).len(), 2, "{:?}", a.changes);

    let a = unkeyed
        .answer(&reoffer, &params(), &tracks, &mut new_ssrc)
        .unwrap();
    assert!(a.changes.is_empty(), "nothing flows: {:?}", a.changes);
    let sdp = reparsed(&a.sdp);
    assert_eq!(sdp.media.len(), 3);
    assert_eq!(sdp.media[0].kind, MediaKind::Application);
    assert_ne!(sdp.media[0].port, 0, "the data section stays");
    for m in &sdp.media[1..] {
        assert_eq!(m.port, 0, "{:?} rejected:\n{}", m.kind, sdp.to_sdp_string());
    }
    assert!(
        unkeyed
            .sections()
            .iter()
            .skip(1)
            .all(|s| s.state == SectionState::Closed)
    );
}
