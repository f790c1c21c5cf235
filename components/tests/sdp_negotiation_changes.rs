//! `sdp::Negotiation` as sessions change: a section the participant stops is not
//! offered back, an answer that stops sending unpublishes, a refused answer does not
//! wedge later offers, shoal's new sections do not reuse the participant's payload
//! types for other formats (RFC 8843 §9.1), and a narrower answer does not re-make a
//! subscription on the same SSRC.

use std::net::SocketAddr;

use shoal_components::sdp::{
    AnswerParams, Attribute, Change, Direction, Fingerprint, HashFunction, MediaDescription,
    Negotiation, SessionDescription, Setup, TrackSource,
};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/sdp");

fn fixture(name: &str) -> SessionDescription {
    let text = std::fs::read_to_string(format!("{FIXTURES}/{name}")).unwrap();
    SessionDescription::parse(&text).unwrap()
}

fn params() -> AnswerParams<'static> {
    AnswerParams {
        candidate: "127.0.0.1:7100".parse::<SocketAddr>().unwrap(),
        ice_ufrag: "sHoAlUfRaG012345",
        ice_pwd: "sHoAlPaSsWoRd+/0123456789abcd",
        fingerprint_sha256: [0xA5; 32],
        session_id: 1_234_567,
    }
}

fn ssrcs() -> impl FnMut() -> u32 {
    let mut next = 1000;
    move || {
        next += 1;
        next
    }
}

/// The room's tracks, published by a Chromium page: T0 (opus) and T1 (VP8).
fn chromium_tracks() -> Vec<TrackSource> {
    let mut n = Negotiation::new(1);
    let a = n
        .answer(
            &fixture("chromium156_av_data_offer.sdp"),
            &params(),
            &[],
            &mut ssrcs(),
        )
        .unwrap();
    a.changes
        .iter()
        .filter_map(|c| match c {
            Change::Published { mid, track } => Some(TrackSource {
                id: format!("T{mid}"),
                kind: track.kind.clone(),
                stream_id: format!("stream-T{mid}"),
                codec: track.codec.clone(),
            }),
            _ => None,
        })
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
    let a = aiortc
        .answer(
            &fixture("aiortc116_av_data_offer.sdp"),
            &params(),
            &[],
            &mut ssrcs(),
        )
        .unwrap();
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
