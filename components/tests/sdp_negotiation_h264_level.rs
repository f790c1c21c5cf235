//! H.264 levels in media negotiation (RFC 6184 §8.1 and §8.2.2), on offers written as
//! Chromium writes its H.264 formats (`level-asymmetry-allowed=1;packetization-mode=1;
//! profile-level-id=42e01f`, and 4d001f, 640c1f): a publisher is answered at the level
//! it offered, and a subscriber that can receive only a lower level than the
//! publisher's stream is not sent it, whether it answers shoal's offer or offers itself;
//! an equal or higher level is fine, Level 1b sits between 1 and 1.1, and a malformed
//! `profile-level-id` matches nothing.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use shoal_components::sdp::{
    AnswerParams, Change, CodecName, H264Level, Negotiation, Published, SessionDescription,
    Subscribed, TrackSource,
};

const UFRAG: &str = "sHoAlUfRaG012345";
const PWD: &str = "sHoAlPaSsWoRd+/0123456789abcd";
const LOOPBACK: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 7100);

/// Chromium's Constrained Baseline format at Level 3.1, as it offers it.
const CB_31: &str = "level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f";

fn params() -> AnswerParams<'static> {
    AnswerParams {
        candidates: &[LOOPBACK],
        tcp_candidates: &[],
        ice_ufrag: UFRAG,
        ice_pwd: PWD,
        fingerprint_sha256: [0xA5; 32],
        session_id: 7_654_321,
    }
}

fn ssrcs() -> impl FnMut() -> u32 {
    let mut next = 5000;
    move || {
        next += 1;
        next
    }
}

fn parse(text: &str) -> SessionDescription {
    SessionDescription::parse(text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

/// A Chromium-style offer of one video section (mid 0) in `direction` whose H.264
/// formats are `formats` (payload type and fmtp), each followed by its RTX format on
/// the next payload type. A sending section announces its SSRCs as Chromium does.
fn chromium_video_offer(direction: &str, formats: &[(u8, &str)]) -> SessionDescription {
    let pts: Vec<String> = formats
        .iter()
        .flat_map(|(pt, _)| [pt.to_string(), (pt + 1).to_string()])
        .collect();
    let mut t = format!(
        "v=0\r\no=- 4611731400430051336 2 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\n\
         a=group:BUNDLE 0\r\na=extmap-allow-mixed\r\na=msid-semantic: WMS stream\r\n\
         m=video 9 UDP/TLS/RTP/SAVPF {}\r\nc=IN IP4 0.0.0.0\r\na=rtcp:9 IN IP4 0.0.0.0\r\n\
         a=ice-ufrag:oOzF\r\na=ice-pwd:wc78Owv42F/WrR65oxDIHJTd\r\na=ice-options:trickle\r\n\
         a=fingerprint:sha-256 7E:7E:74:50:25:CD:5C:6C:D7:38:7B:B2:16:D8:45:B0:E8:12:AB:CC:17:15:B9:AB:99:49:95:BC:F4:3F:34:9A\r\n\
         a=setup:actpass\r\na=mid:0\r\n\
         a=extmap:3 http://www.ietf.org/id/draft-holmer-rmcat-transport-wide-cc-extensions-01\r\n\
         a=extmap:4 urn:ietf:params:rtp-hdrext:sdes:mid\r\na={direction}\r\n",
        pts.join(" ")
    );
    if direction != "recvonly" {
        t.push_str("a=msid:stream video-track\r\n");
    }
    t.push_str("a=rtcp-mux\r\na=rtcp-rsize\r\n");
    for (pt, fmtp) in formats {
        let rtx = pt + 1;
        t.push_str(&format!(
            "a=rtpmap:{pt} H264/90000\r\na=rtcp-fb:{pt} goog-remb\r\n\
             a=rtcp-fb:{pt} transport-cc\r\na=rtcp-fb:{pt} ccm fir\r\na=rtcp-fb:{pt} nack\r\n\
             a=rtcp-fb:{pt} nack pli\r\na=fmtp:{pt} {fmtp}\r\n\
             a=rtpmap:{rtx} rtx/90000\r\na=fmtp:{rtx} apt={pt}\r\n"
        ));
    }
    if direction != "recvonly" {
        t.push_str(
            "a=ssrc-group:FID 1111 2222\r\na=ssrc:1111 cname:pub\r\n\
             a=ssrc:1111 msid:stream video-track\r\na=ssrc:2222 cname:pub\r\n\
             a=ssrc:2222 msid:stream video-track\r\n",
        );
    }
    parse(&t)
}

fn published(changes: &[Change]) -> Vec<Published> {
    changes
        .iter()
        .filter_map(|c| match c {
            Change::Published { track, .. } => Some(track.clone()),
            _ => None,
        })
        .collect()
}

fn subscribed(changes: &[Change]) -> Vec<Subscribed> {
    changes
        .iter()
        .filter_map(|c| match c {
            Change::Subscribed { track, .. } => Some(track.clone()),
            _ => None,
        })
        .collect()
}

/// The room track a Chromium page publishes with the H.264 format `fmtp`.
fn publisher_track(fmtp: &str) -> TrackSource {
    let mut n = Negotiation::new(1);
    let offer = chromium_video_offer("sendonly", &[(108, fmtp)]);
    let a = n.answer(&offer, &params(), &[], &mut ssrcs()).unwrap();
    let p = published(&a.changes).pop().expect("the publisher's track");
    TrackSource {
        id: "T".to_owned(),
        kind: p.kind.clone(),
        stream_id: "stream-T".to_owned(),
        codec: p.codec,
    }
}

/// The `fmtp` params of payload type `pt` in the first video section of `sdp`.
fn fmtp_of(sdp: &SessionDescription, pt: u8) -> String {
    let m = sdp.media.iter().find(|m| m.rtpmap(pt).is_some()).unwrap();
    m.fmtp(pt).map(|f| f.params.clone()).unwrap_or_default()
}

/// What a subscriber whose first offer had only a data channel answers to shoal's
/// offer of `track`, its H.264 format answered with `fmtp`; the changes `accept`
/// reports and the negotiation.
fn subscriber_answers(track: &TrackSource, fmtp: &str) -> (Vec<Change>, Negotiation) {
    let mut n = Negotiation::new(2);
    let mut new_ssrc = ssrcs();
    let data = parse(concat!(
        "v=0\r\no=- 2853011768905221358 2 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\n",
        "a=group:BUNDLE 0\r\na=msid-semantic: WMS\r\n",
        "m=application 9 UDP/DTLS/SCTP webrtc-datachannel\r\nc=IN IP4 0.0.0.0\r\n",
        "a=ice-ufrag:BWPD\r\na=ice-pwd:ASakUDz96CrEQ0Vcyy6hT3pU\r\na=ice-options:trickle\r\n",
        "a=fingerprint:sha-256 D5:93:2F:A6:CF:90:BA:80:8E:49:E0:75:38:35:BF:5C:EE:3B:FE:18:BC:0E:39:2C:94:4E:C6:13:4C:64:65:89\r\n",
        "a=setup:actpass\r\na=mid:0\r\na=sctp-port:5000\r\na=max-message-size:262144\r\n",
    ));
    n.answer(&data, &params(), &[], &mut new_ssrc).unwrap();
    let offer = n
        .offer(&params(), std::slice::from_ref(track), &mut new_ssrc)
        .expect("an offer placing the track");
    let video = &offer.media[1];
    let h264 = video.rtpmaps().find(|r| r.is("H264")).unwrap().payload_type;
    let rtx = video.rtpmaps().find(|r| r.is("rtx")).unwrap().payload_type;
    // shoal offers the publisher's level and lets the answer say the subscriber's.
    let offered = fmtp_of(&offer, h264);
    assert!(
        offered.contains("level-asymmetry-allowed=1") && offered.contains("packetization-mode=1"),
        "{offered}"
    );
    if let Some(id) = track_profile_level_id(track) {
        assert!(
            offered.contains(&format!("profile-level-id={id}")),
            "{offered}"
        );
    }
    let mid = video.mid().unwrap();
    let answer = parse(&format!(
        "v=0\r\no=- 2853011768905221358 3 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\n\
         a=group:BUNDLE 0 {mid}\r\na=msid-semantic: WMS\r\n\
         m=application 9 UDP/DTLS/SCTP webrtc-datachannel\r\nc=IN IP4 0.0.0.0\r\n\
         a=ice-ufrag:BWPD\r\na=ice-pwd:ASakUDz96CrEQ0Vcyy6hT3pU\r\na=setup:active\r\n\
         a=mid:0\r\na=sctp-port:5000\r\na=max-message-size:262144\r\n\
         m=video 9 UDP/TLS/RTP/SAVPF {h264} {rtx}\r\nc=IN IP4 0.0.0.0\r\n\
         a=ice-ufrag:BWPD\r\na=ice-pwd:ASakUDz96CrEQ0Vcyy6hT3pU\r\na=setup:active\r\n\
         a=mid:{mid}\r\n\
         a=extmap:3 http://www.ietf.org/id/draft-holmer-rmcat-transport-wide-cc-extensions-01\r\n\
         a=recvonly\r\na=rtcp-mux\r\na=rtcp-rsize\r\n\
         a=rtpmap:{h264} H264/90000\r\na=rtcp-fb:{h264} transport-cc\r\n\
         a=rtcp-fb:{h264} ccm fir\r\na=rtcp-fb:{h264} nack\r\na=rtcp-fb:{h264} nack pli\r\n\
         a=fmtp:{h264} {fmtp}\r\na=rtpmap:{rtx} rtx/90000\r\na=fmtp:{rtx} apt={h264}\r\n"
    ));
    let changes = n.accept(&answer).expect("an answer shoal takes");
    (changes, n)
}

fn track_profile_level_id(t: &TrackSource) -> Option<String> {
    let fmtp = t.codec.fmtp.clone().unwrap_or_default();
    fmtp.split(';')
        .find_map(|kv| kv.trim().strip_prefix("profile-level-id="))
        .map(str::to_owned)
}

/// Whether the subscriber answering shoal's offer of `track` with `fmtp` is sent it.
fn sent_when_answered(track: &TrackSource, fmtp: &str) -> bool {
    let (changes, n) = subscriber_answers(track, fmtp);
    let sent = subscribed(&changes).iter().any(|s| s.track == track.id);
    // Refused like a format it cannot take: declined, and not offered again.
    assert_eq!(n.declined().contains(&track.id), !sent, "{fmtp}");
    sent
}

/// Whether a subscriber offering to receive with `formats` is given `track`.
fn sent_when_offered(track: &TrackSource, formats: &[(u8, &str)]) -> bool {
    let mut n = Negotiation::new(3);
    let offer = chromium_video_offer("recvonly", formats);
    let a = n
        .answer(&offer, &params(), std::slice::from_ref(track), &mut ssrcs())
        .unwrap();
    let sent = subscribed(&a.changes);
    if let Some(s) = sent.first() {
        // Answered with the publisher's format on the subscriber's payload type.
        assert_eq!(
            fmtp_of(&a.sdp, s.codec.payload_type),
            track.codec.fmtp.clone().unwrap()
        );
    }
    !sent.is_empty()
}

fn with_level(profile_level_id: &str) -> String {
    format!("level-asymmetry-allowed=1;packetization-mode=1;profile-level-id={profile_level_id}")
}

#[test]
fn a_publisher_is_answered_at_the_level_it_offered() {
    for fmtp in [
        CB_31,
        "level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=640c28",
        "packetization-mode=1;profile-level-id=4d0032",
    ] {
        let mut n = Negotiation::new(1);
        let offer = chromium_video_offer("sendonly", &[(108, fmtp), (116, CB_31)]);
        let a = n.answer(&offer, &params(), &[], &mut ssrcs()).unwrap();
        let p = published(&a.changes).pop().expect("published");
        assert_eq!(p.codec.name, CodecName::H264);
        assert_eq!(p.codec.payload_type, 108);
        // The answer keeps the offer's profile-level-id, so the publisher may send up
        // to the level it offered, and level-asymmetry-allowed only when offered.
        assert_eq!(fmtp_of(&a.sdp, 108), fmtp);
        assert_eq!(
            p.codec.h264_level_asymmetry_allowed(),
            fmtp.contains("level-asymmetry-allowed=1")
        );
    }
    let p = publisher_track(CB_31);
    assert_eq!(
        p.codec.h264_level(),
        Some(Ok(H264Level::from_level_idc(31)))
    );
}

#[test]
fn a_subscriber_answering_shoals_offer_receives_at_least_the_publishers_level() {
    let track = publisher_track(CB_31);
    // 3.1 answered: the same level.
    assert!(sent_when_answered(&track, CB_31));
    // 3.0 with asymmetry: the most it can receive is below the stream's level.
    assert!(!sent_when_answered(&track, &with_level("42e01e")));
    // 4.0 and 5.2: more than enough.
    assert!(sent_when_answered(&track, &with_level("42e028")));
    assert!(sent_when_answered(&track, &with_level("42e034")));
}

#[test]
fn without_level_asymmetry_the_answers_level_must_not_be_lower() {
    // The publisher offered no asymmetry; shoal still offers it to subscribers.
    let track = publisher_track("packetization-mode=1;profile-level-id=42e01f");
    assert!(sent_when_answered(&track, CB_31));
    // An answer without it states the level of both directions: lower is refused,
    // the same level is fine.
    assert!(!sent_when_answered(
        &track,
        "packetization-mode=1;profile-level-id=42e01e"
    ));
    assert!(sent_when_answered(
        &track,
        "packetization-mode=1;profile-level-id=42e01f"
    ));
    assert!(!sent_when_answered(
        &track,
        "level-asymmetry-allowed=0;packetization-mode=1;profile-level-id=42e016"
    ));
    // One without profile-level-id is Baseline at Level 1 (RFC 6184 §8.1): below a
    // Baseline 3.1 stream, equal to a stream that has none either.
    let baseline_31 = publisher_track(&with_level("42001f"));
    assert!(!sent_when_answered(&baseline_31, "packetization-mode=1"));
    let baseline_1 = publisher_track("level-asymmetry-allowed=1;packetization-mode=1");
    assert!(sent_when_answered(&baseline_1, "packetization-mode=1"));
}

#[test]
fn a_subscriber_offering_to_receive_gets_the_track_only_at_a_level_it_takes() {
    let track = publisher_track(CB_31);
    assert!(sent_when_offered(&track, &[(108, CB_31)]));
    assert!(!sent_when_offered(&track, &[(108, &with_level("42e01e"))]));
    assert!(sent_when_offered(&track, &[(108, &with_level("42e028"))]));
    // Without asymmetry in the subscriber's offer, shoal's answer of the stream's
    // level may only be lower than or equal to the offer's.
    assert!(sent_when_offered(
        &track,
        &[(108, "packetization-mode=1;profile-level-id=42e020")]
    ));
    assert!(!sent_when_offered(
        &track,
        &[(108, "packetization-mode=1;profile-level-id=42e01e")]
    ));
    // Chromium's whole list of H.264 formats at 3.1 takes a High 4.0 stream nowhere,
    // and a High 3.1 one in its High format.
    let chromium = [
        (
            102,
            "level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42001f",
        ),
        (108, CB_31),
        (
            116,
            "level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=4d001f",
        ),
        (
            123,
            "level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=640c1f",
        ),
    ];
    let high_40 = publisher_track(&with_level("640c28"));
    assert!(!sent_when_offered(&high_40, &chromium));
    let high_31 = publisher_track(&with_level("640c1f"));
    assert!(sent_when_offered(&high_31, &chromium));
}

#[test]
fn level_1b_is_above_1_and_below_1_1() {
    // Constrained Baseline at Level 1b: level_idc 11 with constraint_set3_flag.
    let track = publisher_track(&with_level("42f00b"));
    assert!(
        !sent_when_answered(&track, &with_level("42e00a")),
        "Level 1"
    );
    assert!(
        sent_when_answered(&track, &with_level("42f00b")),
        "Level 1b"
    );
    assert!(
        sent_when_answered(&track, &with_level("42e00b")),
        "Level 1.1"
    );
    // A Level 1.1 stream is more than a 1b subscriber takes.
    let one_one = publisher_track(&with_level("42e00b"));
    assert!(!sent_when_answered(&one_one, &with_level("42f00b")));
    // High: Level 1b is level_idc 9.
    let high_1b = publisher_track(&with_level("640c09"));
    assert!(!sent_when_offered(
        &high_1b,
        &[(108, &with_level("640c0a"))]
    ));
    assert!(sent_when_offered(&high_1b, &[(108, &with_level("640c09"))]));
    assert!(sent_when_offered(&high_1b, &[(108, &with_level("640c0b"))]));
}

#[test]
fn a_malformed_profile_level_id_matches_nothing() {
    let track = publisher_track(CB_31);
    for bad in ["42e01", "42e01f00", "42e0zz", "", "0x42e0", "42e01\u{fffd}"] {
        let fmtp = with_level(bad);
        assert!(!sent_when_answered(&track, &fmtp), "{bad:?}");
        assert!(!sent_when_offered(&track, &[(108, &fmtp)]), "{bad:?}");
    }
    // A publisher's malformed format is not forwarded at all.
    let mut n = Negotiation::new(1);
    let offer = chromium_video_offer("sendonly", &[(108, &with_level("42e0zz"))]);
    let a = n.answer(&offer, &params(), &[], &mut ssrcs()).unwrap();
    assert!(published(&a.changes).is_empty());
}

#[test]
fn a_subscriber_that_offers_a_lower_level_later_stops_receiving() {
    let track = publisher_track(CB_31);
    let mut n = Negotiation::new(4);
    let tracks = std::slice::from_ref(&track);
    let first = chromium_video_offer("recvonly", &[(108, CB_31)]);
    let a = n.answer(&first, &params(), tracks, &mut ssrcs()).unwrap();
    assert_eq!(subscribed(&a.changes).len(), 1);
    // The same page offers again, now able to receive only 3.0.
    let again = chromium_video_offer("recvonly", &[(108, &with_level("42e01e"))]);
    let a = n.answer(&again, &params(), tracks, &mut ssrcs()).unwrap();
    assert!(
        a.changes
            .iter()
            .any(|c| matches!(c, Change::Unsubscribed { track: t, .. } if *t == track.id)),
        "{:?}",
        a.changes
    );
}
