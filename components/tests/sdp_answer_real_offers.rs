//! shoal's first answer (RFC 8829 §5.3.1, `sdp::Negotiation`) to the offers that
//! headless Chromium 156 and aiortc 1.16 really wrote (`tests/fixtures/sdp/`, see
//! `sdp_roundtrip_real_offers.rs`): every transport attribute the answer must carry,
//! the data section, the sections it takes or rejects, the errors, and that the answer
//! parses back to the same model. What the media sections carry is
//! `sdp_negotiation.rs`'s subject.

use std::net::SocketAddr;

use shoal_components::sdp::{
    AnswerParams, Answered, Attribute, CandidateType, DEFAULT_REMOTE_MAX_MESSAGE_SIZE, Direction,
    HOST_PRIORITY, HashFunction, MediaDescription, MediaKind, Negotiation, NegotiationError,
    PROTO_DTLS_SCTP, SessionDescription, Setup,
};
use shoal_components::sdp::{
    Change, EXT_ABS_SEND_TIME, EXT_REPAIRED_RID, EXT_RID, EXT_TRANSPORT_CC, RidDirection,
};

/// A new session's answer to `offer`, with no room tracks to place.
fn answer(
    offer: &SessionDescription,
    params: &AnswerParams<'_>,
) -> Result<Answered, NegotiationError> {
    Negotiation::new(params.session_id).answer(offer, params, &[], &mut || 1)
}

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/sdp");
const UFRAG: &str = "sHoAlUfRaG012345";
const PWD: &str = "sHoAlPaSsWoRd+/0123456789abcd";
const FINGERPRINT: [u8; 32] = [0xA5; 32];

fn fixture(name: &str) -> SessionDescription {
    let path = format!("{FIXTURES}/{name}");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    SessionDescription::parse(&text).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn params(candidates: &[SocketAddr]) -> AnswerParams<'_> {
    AnswerParams {
        candidates,
        tcp_candidates: &[],
        ice_ufrag: UFRAG,
        ice_pwd: PWD,
        fingerprint_sha256: FINGERPRINT,
        session_id: 4_611_686_018_427_387_903,
    }
}

fn answer_to(name: &str) -> (SessionDescription, Answered) {
    let offer = fixture(name);
    let addr: SocketAddr = "127.0.0.1:7100".parse().unwrap();
    let a = answer(&offer, &params(&[addr])).unwrap_or_else(|e| panic!("{name}: {e}"));
    // What shoal writes, its own parser reads back to the same model.
    let text = a.sdp.to_sdp_string();
    let back = SessionDescription::parse(&text).unwrap_or_else(|e| panic!("{name}: {e}\n{text}"));
    assert_eq!(back, a.sdp, "{name}: answer does not parse back the same");
    (offer, a)
}

/// Checks the transport attributes of an accepted section.
fn assert_transport(name: &str, m: &MediaDescription, offer: &MediaDescription) {
    assert_eq!(m.port, 7100, "{name}: port");
    assert_eq!(m.proto, offer.proto, "{name}: proto must match the offer's");
    assert_eq!(m.mid(), offer.mid(), "{name}: mid");
    assert_eq!(m.ice_ufrag(), Some(UFRAG), "{name}");
    assert_eq!(m.ice_pwd(), Some(PWD), "{name}");
    let fps: Vec<_> = m.fingerprints().collect();
    assert_eq!(fps.len(), 1, "{name}: one fingerprint");
    assert_eq!(fps[0].hash, HashFunction::Sha256, "{name}");
    assert_eq!(fps[0].bytes, FINGERPRINT, "{name}");
    assert_eq!(
        m.setup(),
        Some(Setup::Passive),
        "{name}: actpass is answered passive"
    );
    let candidates: Vec<_> = m.candidates().collect();
    assert_eq!(candidates.len(), 1, "{name}: one host candidate");
    let c = candidates[0];
    assert_eq!(
        (c.typ.clone(), c.component, c.address.as_str(), c.port),
        (CandidateType::Host, 1, "127.0.0.1", 7100),
        "{name}"
    );
    assert!(c.is_udp(), "{name}");
    assert_eq!(c.priority, HOST_PRIORITY, "{name}");
    assert_eq!(HOST_PRIORITY, 2_130_706_431);
    assert!(m.end_of_candidates(), "{name}: end-of-candidates");
    assert_eq!(
        m.rtcp_mux(),
        offer.rtcp_mux(),
        "{name}: rtcp-mux iff offered"
    );
    assert!(!m.bundle_only(), "{name}: no bundle-only in answers");
    assert_eq!(m.connections.len(), 1, "{name}: c= line");
    assert_eq!(m.connections[0].address, "127.0.0.1", "{name}");
}

fn assert_data_section(name: &str, m: &MediaDescription, offer: &MediaDescription) {
    assert_transport(name, m, offer);
    assert_eq!(m.kind, MediaKind::Application);
    assert_eq!(m.proto, PROTO_DTLS_SCTP);
    assert_eq!(m.formats, ["webrtc-datachannel"]);
    assert_eq!(m.sctp_port(), Some(5000), "{name}");
    assert_eq!(m.max_message_size(), Some(262_144), "{name}");
}

fn assert_session(name: &str, a: &Answered, offer: &SessionDescription, bundle: &[&str]) {
    assert!(a.sdp.ice_lite(), "{name}: a=ice-lite at session level");
    assert_eq!(
        a.sdp.media.len(),
        offer.media.len(),
        "{name}: one section per offered one"
    );
    let group = a.sdp.bundle_mids().expect("a BUNDLE group");
    assert_eq!(group, bundle, "{name}: BUNDLE");
    assert_eq!(a.transport.setup, Setup::Passive);
    assert_eq!(a.sdp.origin.username, "-");
    // The remote side's facts, as the shard needs them.
    let first = &offer.media[0];
    let (ufrag, pwd) = offer.ice_credentials_for(first).unwrap();
    assert_eq!(
        (a.transport.ufrag.as_str(), a.transport.pwd.as_str()),
        (ufrag, pwd)
    );
    let fp = offer
        .fingerprints_for(first)
        .find(|f| f.hash == HashFunction::Sha256)
        .unwrap();
    assert_eq!(
        a.transport.fingerprint_sha256.as_slice(),
        fp.bytes.as_slice()
    );
}

#[test]
fn data_only_offers_are_accepted() {
    for name in ["chromium156_data_offer.sdp", "aiortc116_data_offer.sdp"] {
        let (offer, a) = answer_to(name);
        assert_session(name, &a, &offer, &["0"]);
        assert_data_section(name, &a.sdp.media[0], &offer.media[0]);
        assert_eq!(a.data_mid.as_deref(), Some("0"));
    }
}

#[test]
fn media_sections_are_taken_with_the_transport() {
    for name in [
        "chromium156_av_data_offer.sdp",
        "aiortc116_av_data_offer.sdp",
    ] {
        let (offer, a) = answer_to(name);
        assert_session(name, &a, &offer, &["0", "1", "2"]);
        for (i, kind) in [(0, MediaKind::Audio), (1, MediaKind::Video)] {
            let m = &a.sdp.media[i];
            assert_eq!(m.kind, kind);
            assert_transport(name, m, &offer.media[i]);
            // Sent by the offerer, received by shoal; codecs from the offer.
            assert_eq!(m.direction(), Some(Direction::RecvOnly), "{name}");
            for pt in m.payload_types() {
                assert!(offer.media[i].payload_types().any(|p| p == pt), "{name}");
            }
        }
        assert_data_section(name, &a.sdp.media[2], &offer.media[2]);
        assert_eq!(a.data_mid.as_deref(), Some("2"));
    }
}

#[test]
fn remb_is_agreed_only_where_transport_cc_is_not() {
    // aiortc 1.16 offers goog-remb and abs-send-time, no transport-cc: shoal agrees
    // both and runs its own estimate (draft-ietf-rmcat-gcc-02 §3). Chromium offers
    // all three: transport-cc only, one estimate per path.
    for (name, remb) in [
        ("aiortc116_av_data_offer.sdp", true),
        ("chromium156_av_data_offer.sdp", false),
    ] {
        let (_, a) = answer_to(name);
        let video = &a.sdp.media[1];
        let feedback: Vec<&str> = video.rtcp_fbs().map(|f| f.feedback.as_str()).collect();
        assert_eq!(
            feedback.contains(&"goog-remb"),
            remb,
            "{name}: {feedback:?}"
        );
        assert_eq!(
            feedback.contains(&"transport-cc"),
            !remb,
            "{name}: {feedback:?}"
        );
        let uris: Vec<&str> = video.extmaps().map(|e| e.uri.as_str()).collect();
        assert_eq!(uris.contains(&EXT_ABS_SEND_TIME), remb, "{name}: {uris:?}");
        assert_eq!(uris.contains(&EXT_TRANSPORT_CC), !remb, "{name}: {uris:?}");
        let published = a.changes.iter().find_map(|c| match c {
            Change::Published { track, .. } if track.kind == MediaKind::Video => Some(track),
            _ => None,
        });
        let codec = &published.expect("the video published").codec;
        assert_eq!(codec.feedback.goog_remb, remb, "{name}");
    }
}

#[test]
fn media_only_offers_are_taken() {
    // Chromium 156 offers three simulcast streams (a=rid:q/h/f send, a=simulcast:send
    // q;h;f) with the rid extensions: shoal takes them all, each rid answered "recv"
    // (RFC 8851 §6.3) and the list reversed to "recv" (RFC 8853 §5.3.2).
    let (offer, a) = answer_to("chromium156_simulcast_offer.sdp");
    assert_eq!(a.data_mid, None);
    assert!(a.sdp.media.iter().all(|m| m.port == 7100));
    assert!(a.sdp.media[0].simulcast().is_none(), "audio");
    let video = &a.sdp.media[1];
    let simulcast = video.simulcast().expect("a=simulcast in the answer");
    assert!(simulcast.send().is_none());
    let recv: Vec<&str> = simulcast.recv().expect("recv").rids().collect();
    assert_eq!(recv, ["q", "h", "f"]);
    let rids: Vec<(&str, RidDirection)> =
        video.rids().map(|r| (r.id.as_str(), r.direction)).collect();
    assert_eq!(
        rids,
        [
            ("q", RidDirection::Recv),
            ("h", RidDirection::Recv),
            ("f", RidDirection::Recv)
        ]
    );
    assert!(video.extmaps().any(|e| e.uri == EXT_RID && e.id == 10));
    assert!(
        video
            .extmaps()
            .any(|e| e.uri == EXT_REPAIRED_RID && e.id == 11)
    );
    let layers = a.changes.iter().find_map(|c| match c {
        Change::Published { track, .. } if track.kind == MediaKind::Video => Some(&track.layers),
        _ => None,
    });
    let layers: Vec<Option<&str>> = layers
        .expect("the video published")
        .iter()
        .map(|l| l.rid.as_deref())
        .collect();
    assert_eq!(layers, [Some("q"), Some("h"), Some("f")]);
    // Without the rid extension the rids cannot be told apart on the wire (RFC 8853
    // §5.5): one stream, no simulcast in the answer.
    let mut bare = offer.clone();
    bare.media[1]
        .attributes
        .retain(|a| !matches!(a, Attribute::Extmap(e) if e.uri == EXT_RID));
    let addr: SocketAddr = "127.0.0.1:7100".parse().unwrap();
    let b = answer(&bare, &params(&[addr])).unwrap();
    assert!(b.sdp.media.iter().all(|m| m.simulcast().is_none()));
    // Every section disabled: nothing to answer.
    let mut none = offer.clone();
    for m in &mut none.media {
        m.port = 0;
    }
    assert_eq!(
        answer(&none, &params(&[addr])),
        Err(NegotiationError::NoUsableSection)
    );
}

#[test]
fn a_data_section_first_is_the_bundle_tag() {
    let mut offer = fixture("chromium156_av_data_offer.sdp");
    let data = offer.media.remove(2);
    offer.media.insert(0, data);
    for a in &mut offer.attributes {
        if let Attribute::Group(g) = a {
            g.mids = vec!["2".into(), "0".into(), "1".into()];
        }
    }
    let addr: SocketAddr = "[::1]:7101".parse().unwrap();
    let a = answer(&offer, &params(&[addr])).unwrap();
    assert_eq!(a.sdp.bundle_mids().unwrap(), ["2", "0", "1"]);
    assert_eq!(a.sdp.media[0].port, 7101);
    assert_eq!(a.sdp.media[0].connections[0].addr_type, "IP6");
    assert_eq!(a.sdp.media[0].kind, MediaKind::Application);
}

/// A shard with several addresses (dual-stack, or several interfaces) answers with a
/// host candidate for each, in the order given: a foundation of its own each (RFC 8445
/// §5.1.1.3: different base addresses), priorities falling with the order (unique local
/// preferences, §5.1.2.1), the first on the `m=` and `c=` lines; and with no address
/// at all, the discard port of 0.0.0.0 and no candidate.
#[test]
fn several_addresses_give_a_candidate_each_in_order() {
    let offer = fixture("chromium156_av_data_offer.sdp");
    let addrs: [SocketAddr; 3] = [
        "[2001:db8::7]:7100".parse().unwrap(),
        "198.51.100.7:7100".parse().unwrap(),
        "[2001:db8:1::7]:7100".parse().unwrap(),
    ];
    let a = answer(&offer, &params(&addrs)).unwrap();
    let text = a.sdp.to_sdp_string();
    assert_eq!(SessionDescription::parse(&text).unwrap(), a.sdp);
    for m in a.sdp.media.iter().filter(|m| m.port != 0) {
        let found: Vec<(String, String, u16, u32)> = m
            .candidates()
            .map(|c| (c.foundation.clone(), c.address.clone(), c.port, c.priority))
            .collect();
        assert_eq!(
            found,
            [
                ("1".into(), "2001:db8::7".into(), 7100, HOST_PRIORITY),
                ("2".into(), "198.51.100.7".into(), 7100, HOST_PRIORITY - 256),
                (
                    "3".into(),
                    "2001:db8:1::7".into(),
                    7100,
                    HOST_PRIORITY - 512
                ),
            ],
            "{text}"
        );
        assert_eq!(
            (
                m.connections[0].addr_type.as_str(),
                m.connections[0].address.as_str()
            ),
            ("IP6", "2001:db8::7")
        );
        assert!(m.end_of_candidates());
    }
    let none = answer(&offer, &params(&[])).unwrap();
    for m in &none.sdp.media {
        assert_eq!(m.candidates().count(), 0);
        assert_eq!(m.port, 9);
        assert_eq!(m.connections[0].address, "0.0.0.0");
    }
}

fn edited(name: &str, keep: impl Fn(&Attribute) -> bool) -> SessionDescription {
    let mut offer = fixture(name);
    offer.attributes.retain(&keep);
    for m in &mut offer.media {
        m.attributes.retain(&keep);
    }
    offer
}

#[test]
fn offers_missing_what_shoal_needs_are_refused() {
    let addr: SocketAddr = "127.0.0.1:7100".parse().unwrap();
    for name in ["chromium156_data_offer.sdp", "aiortc116_av_data_offer.sdp"] {
        let no_sha256 = edited(
            name,
            |a| !matches!(a, Attribute::Fingerprint(f) if f.hash == HashFunction::Sha256),
        );
        assert_eq!(
            answer(&no_sha256, &params(&[addr])),
            Err(NegotiationError::MissingSha256Fingerprint),
            "{name}"
        );
        let no_pwd = edited(name, |a| !matches!(a, Attribute::IcePwd(_)));
        assert_eq!(
            answer(&no_pwd, &params(&[addr])),
            Err(NegotiationError::MissingIceCredentials),
            "{name}"
        );
        let hold = {
            let mut o = edited(name, |_| true);
            for m in &mut o.media {
                for a in &mut m.attributes {
                    if let Attribute::Setup(s) = a {
                        *s = Setup::HoldConn;
                    }
                }
            }
            o
        };
        assert_eq!(
            answer(&hold, &params(&[addr])),
            Err(NegotiationError::HoldConn)
        );
    }
    // The error says what is wrong in words a developer can act on.
    let message = NegotiationError::MissingSha256Fingerprint.to_string();
    assert!(message.contains("sha-256"), "{message}");
}

#[test]
fn a_passive_offer_makes_shoal_the_dtls_client() {
    let addr: SocketAddr = "127.0.0.1:7100".parse().unwrap();
    let mut offer = fixture("aiortc116_data_offer.sdp");
    for a in &mut offer.media[0].attributes {
        if let Attribute::Setup(s) = a {
            *s = Setup::Passive;
        }
    }
    let a = answer(&offer, &params(&[addr])).unwrap();
    assert_eq!(a.transport.setup, Setup::Active);
    assert_eq!(a.sdp.media[0].setup(), Some(Setup::Active));
}

/// Every real offer's data section says `a=max-message-size:262144`.
const DATA_OFFERS: [&str; 4] = [
    "chromium156_data_offer.sdp",
    "aiortc116_data_offer.sdp",
    "chromium156_av_data_offer.sdp",
    "aiortc116_av_data_offer.sdp",
];

/// Sets (or with `None` removes) the data section's `a=max-message-size`.
fn with_max_message_size(name: &str, size: Option<u64>) -> SessionDescription {
    let mut offer = edited(name, |a| !matches!(a, Attribute::MaxMessageSize(_)));
    let data = offer
        .media
        .iter_mut()
        .find(|m| m.kind == MediaKind::Application)
        .expect("a data section");
    if let Some(size) = size {
        data.push_attribute(Attribute::MaxMessageSize(size));
    }
    offer
}

#[test]
fn the_offers_max_message_size_is_stored() {
    // RFC 8829 §5.8.2: the offerer's a=max-message-size is parsed and stored.
    for name in DATA_OFFERS {
        let (_, a) = answer_to(name);
        assert_eq!(a.remote_max_message_size, 262_144, "{name}");
    }
}

#[test]
fn an_absent_max_message_size_means_64k_and_zero_means_no_limit() {
    let addr: SocketAddr = "127.0.0.1:7100".parse().unwrap();
    assert_eq!(DEFAULT_REMOTE_MAX_MESSAGE_SIZE, 65_536);
    for name in DATA_OFFERS {
        let cases = [
            (None, 65_536),
            (Some(0), usize::MAX),
            (Some(1_024), 1_024),
            (Some(u64::MAX), usize::MAX),
        ];
        for (size, expected) in cases {
            let offer = with_max_message_size(name, size);
            let a = answer(&offer, &params(&[addr])).unwrap();
            assert_eq!(a.remote_max_message_size, expected, "{name}: {size:?}");
        }
    }
}

/// The Chromium audio/video/data offer with the sections of `mids` disabled (port 0).
fn with_disabled(mids: &[&str]) -> SessionDescription {
    let mut offer = fixture("chromium156_av_data_offer.sdp");
    for m in &mut offer.media {
        if m.mid().is_some_and(|mid| mids.contains(&mid)) {
            m.port = 0;
        }
    }
    offer
}

#[test]
fn a_disabled_first_bundle_mid_is_answered_with_port_0_and_not_tagged() {
    let addr: SocketAddr = "127.0.0.1:7100".parse().unwrap();
    // Audio (the first mid) disabled: RFC 3264 §8.2 answers it with port 0, and RFC
    // 8843 §7.3.1 passes over it to video, which becomes the tag.
    let offer = with_disabled(&["0"]);
    let a = answer(&offer, &params(&[addr])).unwrap();
    assert_eq!(a.sdp.bundle_mids().unwrap(), ["1", "2"]);
    let audio = &a.sdp.media[0];
    assert_eq!(
        audio.port, 0,
        "disabled in the offer, disabled in the answer"
    );
    assert_eq!(audio.attributes, [Attribute::Mid("0".into())]);
    let video = &a.sdp.media[1];
    assert_eq!(video.kind, MediaKind::Video);
    assert_transport("video tag", video, &offer.media[1]);
    assert_eq!(video.direction(), Some(Direction::RecvOnly));
    assert_data_section("data", &a.sdp.media[2], &offer.media[2]);
    // The offerer's facts come from the tagged (video) section.
    let (ufrag, _) = offer.ice_credentials_for(&offer.media[1]).unwrap();
    assert_eq!(a.transport.ufrag, ufrag);

    // Audio and video both disabled: the data section is the tag, alone in the group.
    let offer = with_disabled(&["0", "1"]);
    let a = answer(&offer, &params(&[addr])).unwrap();
    assert_eq!(a.sdp.bundle_mids().unwrap(), ["2"]);
    assert_eq!((a.sdp.media[0].port, a.sdp.media[1].port), (0, 0));
    assert_data_section("data", &a.sdp.media[2], &offer.media[2]);
}

/// A max-bundle offer as Firefox writes one (RFC 8829 §4.1.1): only the first section
/// has a port and transport attributes; the data section has port 0 and bundle-only.
const MAX_BUNDLE_OFFER: &str = "v=0\r\n\
o=mozilla...THIS_IS_SDPARTA-99.0 1 0 IN IP4 0.0.0.0\r\n\
s=-\r\n\
t=0 0\r\n\
a=fingerprint:sha-256 AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB\r\n\
a=group:BUNDLE a0 d1\r\n\
a=ice-options:trickle\r\n\
a=msid-semantic:WMS *\r\n\
m=audio 9 UDP/TLS/RTP/SAVPF 109 0\r\n\
c=IN IP4 0.0.0.0\r\n\
a=sendrecv\r\n\
a=ice-pwd:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\
a=ice-ufrag:ffffffff\r\n\
a=mid:a0\r\n\
a=rtcp-mux\r\n\
a=rtpmap:109 opus/48000/2\r\n\
a=rtpmap:0 PCMU/8000\r\n\
a=setup:actpass\r\n\
m=application 0 UDP/DTLS/SCTP webrtc-datachannel\r\n\
c=IN IP4 0.0.0.0\r\n\
a=bundle-only\r\n\
a=mid:d1\r\n\
a=sctp-port:5000\r\n\
a=max-message-size:1073741823\r\n";

#[test]
fn a_bundle_only_data_section_is_accepted_with_a_real_port() {
    let offer = SessionDescription::parse(MAX_BUNDLE_OFFER).unwrap();
    assert!(offer.media[1].bundle_only() && offer.media[1].port == 0);
    let addr: SocketAddr = "127.0.0.1:7100".parse().unwrap();
    let a = answer(&offer, &params(&[addr])).unwrap();
    // The audio section is the tag (and published); the data section rides on it.
    assert_eq!(a.sdp.bundle_mids().unwrap(), ["a0", "d1"]);
    assert_eq!(a.sdp.media[0].port, 7100);
    assert_eq!(a.sdp.media[0].direction(), Some(Direction::RecvOnly));
    assert_eq!(a.sdp.media[0].formats, ["109"]);
    assert_data_section("max-bundle", &a.sdp.media[1], &offer.media[1]);
    assert_eq!(a.data_mid.as_deref(), Some("d1"));
    // The transport is the tagged section's (and the session's fingerprint).
    assert_eq!(
        (a.transport.ufrag.as_str(), a.transport.pwd.as_str()),
        ("ffffffff", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")
    );
    assert_eq!(a.transport.fingerprint_sha256, [0xAB; 32]);
    assert_eq!(a.remote_max_message_size, 1_073_741_823);
}

#[test]
fn a_port_0_data_section_is_rejected_unless_bundle_only_with_a_tag() {
    let addr: SocketAddr = "127.0.0.1:7100".parse().unwrap();
    // Port 0 without bundle-only disables the section (RFC 8843 §7.3, RFC 3264 §8.2):
    // the audio is answered, the data section rejected.
    let disabled = MAX_BUNDLE_OFFER.replace("a=bundle-only\r\n", "");
    let offer = SessionDescription::parse(&disabled).unwrap();
    let a = answer(&offer, &params(&[addr])).unwrap();
    assert_eq!(a.data_mid, None);
    assert_eq!(a.sdp.media[1].port, 0);
    assert_eq!(a.sdp.bundle_mids().unwrap(), ["a0"]);
    // Bundle-only, but no section of the group has a port: nothing to ride on.
    let no_tag = MAX_BUNDLE_OFFER.replace("m=audio 9 ", "m=audio 0 ");
    let offer = SessionDescription::parse(&no_tag).unwrap();
    assert_eq!(
        answer(&offer, &params(&[addr])),
        Err(NegotiationError::NoUsableSection)
    );
    // Bundle-only, but out of the BUNDLE group: rejected.
    let unbundled = MAX_BUNDLE_OFFER.replace("a=group:BUNDLE a0 d1", "a=group:BUNDLE a0");
    let offer = SessionDescription::parse(&unbundled).unwrap();
    let a = answer(&offer, &params(&[addr])).unwrap();
    assert_eq!(a.data_mid, None);
    assert_eq!(a.sdp.media[1].port, 0);
}
