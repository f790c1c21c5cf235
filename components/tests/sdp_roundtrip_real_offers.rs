//! Acceptance test for the SDP model against offers written by peers we did not write.
//!
//! The fixtures in `tests/fixtures/sdp/` are the exact bytes that headless Chromium
//! 156.0.8078.114 and aiortc 1.16.0 put in `localDescription.sdp` after gathering, captured
//! by `scripts/capture-sdp/` (its README says how to capture them again; the facts asserted
//! below were read off these captures, so a new capture needs them updated).
//!
//! For every fixture: it parses; the model holds what the text says; serializing gives the
//! input back byte for byte (all five captures end lines in CRLF, and the output is
//! byte-identical, not only equal modulo line endings); the same text with bare LF endings
//! parses to the same model; and attributes the model does not type survive the trip.

use shoal_components::sdp::{
    Attribute, CandidateType, Direction, HashFunction, MediaDescription, MediaKind,
    PROTO_DTLS_SCTP, PROTO_RTP_SAVPF, RidDirection, SessionDescription, Setup, TcpType,
};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/sdp");

fn fixture(name: &str) -> String {
    let path = format!("{FIXTURES}/{name}");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {path}: {e}"))
}

/// Parses `text`, checks the round trip, and returns the model.
fn round_trip(name: &str, text: &str) -> SessionDescription {
    let sdp = SessionDescription::parse(text).unwrap_or_else(|e| panic!("{name}: {e}"));
    let out = sdp.to_sdp_string();
    // Line by line first, so a failure names the line.
    let mut expected = text.lines();
    for (number, got) in out.lines().enumerate() {
        assert_eq!(Some(got), expected.next(), "{name}: line {}", number + 1);
    }
    assert_eq!(expected.next(), None, "{name}: output is short");
    // Then byte for byte: these captures use CRLF, as the serializer does.
    assert!(text.ends_with("\r\n"), "{name}: capture should end in CRLF");
    assert_eq!(out, text, "{name}: not byte-identical");
    let again = SessionDescription::parse(&out).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(again, sdp, "{name}: reparse differs");
    // RFC 8866 §5: a bare LF ends a line as well.
    let lf = text.replace("\r\n", "\n");
    let from_lf = SessionDescription::parse(&lf).unwrap_or_else(|e| panic!("{name} (LF): {e}"));
    assert_eq!(from_lf, sdp, "{name}: LF-only text parses differently");
    sdp
}

fn hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect::<Vec<_>>()
        .join(":")
}

fn mids(sdp: &SessionDescription) -> Vec<&str> {
    sdp.media.iter().map(|m| m.mid().unwrap_or("?")).collect()
}

fn encoding(m: &MediaDescription, pt: u8) -> String {
    let r = m.rtpmap(pt).unwrap_or_else(|| panic!("no rtpmap {pt}"));
    match r.encoding_params {
        Some(p) => format!("{}/{}/{p}", r.encoding_name, r.clock_rate_hz),
        None => format!("{}/{}", r.encoding_name, r.clock_rate_hz),
    }
}

fn feedback(m: &MediaDescription, pt: u8) -> Vec<String> {
    m.rtcp_fbs_for(pt)
        .map(|f| match &f.param {
            Some(p) => format!("{} {p}", f.feedback),
            None => f.feedback.clone(),
        })
        .collect()
}

fn extmaps(m: &MediaDescription) -> Vec<(u16, &str)> {
    m.extmaps().map(|e| (e.id, e.uri.as_str())).collect()
}

fn other_values<'a>(m: &'a MediaDescription, name: &str) -> Vec<Option<&'a str>> {
    m.attributes
        .iter()
        .filter_map(|a| match a {
            Attribute::Other { name: n, value } if n == name => Some(value.as_deref()),
            _ => None,
        })
        .collect()
}

/// What every Chromium 156 section of one capture shares: one ufrag, pwd and
/// fingerprint (BUNDLE), `setup:actpass`, trickle, and eight host candidates (UDP and
/// TCP-active over 127.0.0.1, 192.0.2.2, ::1 and fd00::2) whose UDP ports match `m=`.
fn check_chromium_transport(m: &MediaDescription, ufrag: &str, pwd: &str, fingerprint: &str) {
    assert_eq!(m.ice_ufrag(), Some(ufrag));
    assert_eq!(m.ice_pwd(), Some(pwd));
    assert_eq!(m.ice_options(), Some(&["trickle".to_owned()][..]));
    let fp = m.fingerprint().expect("fingerprint");
    assert_eq!(fp.hash, HashFunction::Sha256);
    assert_eq!(fp.bytes.len(), 32);
    assert_eq!(hex(&fp.bytes), fingerprint);
    assert_eq!(m.setup(), Some(Setup::ActPass));
    assert_eq!(m.connections.len(), 1);
    assert_eq!(m.connections[0].to_string(), "IN IP4 127.0.0.1");
    assert!(!m.end_of_candidates());

    let candidates: Vec<_> = m.candidates().collect();
    assert_eq!(candidates.len(), 8);
    let addresses: Vec<&str> = candidates.iter().map(|c| c.address.as_str()).collect();
    assert_eq!(
        addresses,
        ["127.0.0.1", "192.0.2.2", "::1", "fd00::2"].repeat(2)
    );
    for c in &candidates {
        assert_eq!(c.component, 1);
        assert_eq!(c.typ, CandidateType::Host);
        assert!(c.ip().is_some(), "{c}");
        assert_eq!(c.extension("generation"), Some("0"));
        assert!(c.extension("network-id").is_some());
    }
    let (udp, tcp) = candidates.split_at(4);
    assert!(udp.iter().all(|c| c.is_udp() && c.tcp_type.is_none()));
    assert!(tcp.iter().all(|c| c.is_tcp() && c.port == 9));
    assert!(tcp.iter().all(|c| c.tcp_type == Some(TcpType::Active)));
    // The loopback UDP candidate carries the port the m= line advertises.
    assert_eq!(udp[0].address, "127.0.0.1");
    assert_eq!(udp[0].port, m.port);
    assert_eq!(udp[0].priority, 2122194687);
    assert_eq!(udp[0].extension("network-cost"), Some("50"));
}

fn chromium_av_data() {
    let name = "chromium156_av_data_offer.sdp";
    let sdp = round_trip(name, &fixture(name));
    assert_eq!(sdp.origin.session_id, 6567734007845039002);
    assert_eq!(sdp.origin.session_version, 2);
    assert_eq!(sdp.origin.unicast_address, "127.0.0.1");
    assert_eq!(sdp.session_name, "-");
    assert_eq!((sdp.timings[0].start, sdp.timings[0].stop), (0, 0));
    assert_eq!(
        sdp.bundle_mids(),
        Some(&["0", "1", "2"].map(String::from)[..])
    );
    assert!(sdp.extmap_allow_mixed());
    let semantic = sdp.msid_semantic().expect("msid-semantic");
    assert_eq!(semantic.semantic, "WMS");
    assert_eq!(semantic.ids, ["ca7de747-d657-44e8-a129-c22b4cdc121e"]);
    assert!(semantic.space_after_colon);
    assert!(!sdp.ice_lite());
    assert_eq!(sdp.ice_ufrag(), None, "Chromium puts ICE at media level");

    let kinds: Vec<_> = sdp.media.iter().map(|m| m.kind.clone()).collect();
    assert_eq!(
        kinds,
        [MediaKind::Audio, MediaKind::Video, MediaKind::Application]
    );
    assert_eq!(mids(&sdp), ["0", "1", "2"]);
    let fp = "7E:7E:74:50:25:CD:5C:6C:D7:38:7B:B2:16:D8:45:B0:E8:12:AB:CC:17:15:B9:AB:99:49:95:BC:F4:3F:34:9A";
    for m in &sdp.media {
        check_chromium_transport(m, "oOzF", "wc78Owv42F/WrR65oxDIHJTd", fp);
        assert_eq!(
            sdp.ice_credentials_for(m),
            Some(("oOzF", "wc78Owv42F/WrR65oxDIHJTd"))
        );
    }

    let audio = &sdp.media[0];
    assert_eq!(audio.port, 60744);
    assert_eq!(audio.proto, PROTO_RTP_SAVPF);
    assert_eq!(
        audio.payload_types().collect::<Vec<_>>(),
        [111, 63, 9, 0, 8, 13, 110, 126]
    );
    assert_eq!(encoding(audio, 111), "opus/48000/2");
    assert_eq!(encoding(audio, 63), "red/48000/2");
    assert_eq!(encoding(audio, 0), "PCMU/8000");
    assert_eq!(encoding(audio, 126), "telephone-event/8000");
    let opus_fmtp = audio.fmtp(111).expect("fmtp 111");
    assert_eq!(opus_fmtp.params, "minptime=10;useinbandfec=1");
    assert_eq!(opus_fmtp.param("useinbandfec"), Some("1"));
    assert_eq!(feedback(audio, 111), ["transport-cc"]);
    assert_eq!(
        extmaps(audio),
        [
            (1, "urn:ietf:params:rtp-hdrext:ssrc-audio-level"),
            (
                2,
                "http://www.webrtc.org/experiments/rtp-hdrext/abs-send-time"
            ),
            (
                3,
                "http://www.ietf.org/id/draft-holmer-rmcat-transport-wide-cc-extensions-01"
            ),
            (4, "urn:ietf:params:rtp-hdrext:sdes:mid"),
        ]
    );
    assert_eq!(audio.direction(), Some(Direction::SendRecv));
    assert!(audio.rtcp_mux() && audio.rtcp_rsize() && !audio.rtcp_mux_only());
    let rtcp = audio.rtcp().expect("a=rtcp");
    assert_eq!(rtcp.port, 9);
    assert_eq!(
        rtcp.connection.as_ref().map(|c| c.address.as_str()),
        Some("0.0.0.0")
    );
    let msid = audio.msids().next().expect("msid");
    assert_eq!(msid.stream_id, "ca7de747-d657-44e8-a129-c22b4cdc121e");
    assert_eq!(
        msid.track_id.as_deref(),
        Some("f1ceb3ef-15d9-4c4c-a79f-b7fd7b21d7e5")
    );
    let ssrcs: Vec<_> = audio.ssrcs().collect();
    assert_eq!(ssrcs.len(), 2);
    assert_eq!(ssrcs[0].ssrc, 2003127882);
    assert_eq!(ssrcs[0].attribute, "cname");
    assert_eq!(ssrcs[0].value.as_deref(), Some("dQ4kV/X5le6aE7Ja"));
    assert_eq!(ssrcs[1].attribute, "msid");
    // a=rtcp-xr is not typed: it stays an Other, in place.
    assert_eq!(other_values(audio, "rtcp-xr"), [Some("rcvr-rtt=all")]);

    let video = &sdp.media[1];
    assert_eq!(video.port, 53348);
    assert_eq!(video.formats.len(), 23);
    assert_eq!(encoding(video, 96), "VP8/90000");
    assert_eq!(
        feedback(video, 96),
        ["goog-remb", "transport-cc", "ccm fir", "nack", "nack pli"]
    );
    assert_eq!(encoding(video, 97), "rtx/90000");
    assert_eq!(video.fmtp(97).and_then(|f| f.param("apt")), Some("96"));
    assert_eq!(encoding(video, 102), "H264/90000");
    let h264 = video.fmtp(102).expect("fmtp 102");
    assert_eq!(h264.param("profile-level-id"), Some("42001f"));
    assert_eq!(h264.param("packetization-mode"), Some("1"));
    assert_eq!(feedback(video, 102), feedback(video, 96));
    assert_eq!(encoding(video, 45), "AV1/90000");
    assert_eq!(encoding(video, 98), "VP9/90000");
    assert_eq!(
        video.fmtp(98).map(|f| f.params.as_str()),
        Some("profile-id=0")
    );
    assert_eq!(encoding(video, 120), "ulpfec/90000");
    let video_extmaps = extmaps(video);
    assert_eq!(video_extmaps.len(), 11);
    assert_eq!(video_extmaps[0], (14, "urn:ietf:params:rtp-hdrext:toffset"));
    assert_eq!(
        video.extmap_id("urn:ietf:params:rtp-hdrext:sdes:rtp-stream-id"),
        Some(10)
    );
    assert_eq!(video.direction(), Some(Direction::SendRecv));
    let group = video.ssrc_groups().next().expect("ssrc-group");
    assert_eq!(group.semantics, "FID");
    assert_eq!(group.ssrcs, [2188633780, 1520618598]);
    assert_eq!(video.ssrcs().count(), 4);
    assert_eq!(video.rids().count(), 0);
    assert!(video.simulcast().is_none());

    let data = &sdp.media[2];
    assert_eq!(data.port, 48290);
    assert_eq!(data.proto, PROTO_DTLS_SCTP);
    assert_eq!(data.formats, ["webrtc-datachannel"]);
    assert_eq!(data.sctp_port(), Some(5000));
    assert_eq!(data.max_message_size(), Some(262144));
    assert_eq!(data.direction(), None);
    assert_eq!(data.rtpmaps().count(), 0);
}

fn chromium_data() {
    let name = "chromium156_data_offer.sdp";
    let sdp = round_trip(name, &fixture(name));
    assert_eq!(sdp.origin.session_id, 2853011768905221358);
    assert_eq!(sdp.bundle_mids(), Some(&["0".to_owned()][..]));
    assert!(sdp.extmap_allow_mixed());
    let semantic = sdp.msid_semantic().expect("msid-semantic");
    assert_eq!(semantic.semantic, "WMS");
    assert!(semantic.ids.is_empty(), "no streams in a data-only offer");
    assert_eq!(sdp.media.len(), 1);
    let data = &sdp.media[0];
    assert_eq!(data.kind, MediaKind::Application);
    assert_eq!(data.mid(), Some("0"));
    assert_eq!(data.port, 60557);
    check_chromium_transport(
        data,
        "BWPD",
        "ASakUDz96CrEQ0Vcyy6hT3pU",
        "D5:93:2F:A6:CF:90:BA:80:8E:49:E0:75:38:35:BF:5C:EE:3B:FE:18:BC:0E:39:2C:94:4E:C6:13:4C:64:65:89",
    );
    assert_eq!(data.sctp_port(), Some(5000));
    assert_eq!(data.max_message_size(), Some(262144));
}

fn chromium_simulcast() {
    let name = "chromium156_simulcast_offer.sdp";
    let sdp = round_trip(name, &fixture(name));
    assert_eq!(sdp.origin.session_id, 5867858967610527697);
    assert_eq!(sdp.bundle_mids(), Some(&["0", "1"].map(String::from)[..]));
    let kinds: Vec<_> = sdp.media.iter().map(|m| m.kind.clone()).collect();
    assert_eq!(kinds, [MediaKind::Audio, MediaKind::Video]);
    assert_eq!(mids(&sdp), ["0", "1"]);
    for m in &sdp.media {
        assert_eq!(m.ice_ufrag(), Some("3O/S"));
        assert_eq!(m.fingerprint().map(|f| f.bytes.len()), Some(32));
        assert_eq!(m.setup(), Some(Setup::ActPass));
        assert_eq!(m.candidates().count(), 8);
    }
    assert_eq!(sdp.media[0].direction(), Some(Direction::SendRecv));

    let video = &sdp.media[1];
    assert_eq!(video.direction(), Some(Direction::SendOnly));
    let rids: Vec<_> = video.rids().collect();
    assert_eq!(
        rids.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
        ["q", "h", "f"]
    );
    for r in &rids {
        assert_eq!(r.direction, RidDirection::Send);
        assert!(r.formats.is_empty() && r.restrictions.is_empty());
    }
    let simulcast = video.simulcast().expect("a=simulcast");
    let send = simulcast.send().expect("send list");
    assert_eq!(send.rids().collect::<Vec<_>>(), ["q", "h", "f"]);
    assert!(
        send.streams
            .iter()
            .all(|alts| alts.len() == 1 && !alts[0].paused)
    );
    assert!(simulcast.recv().is_none());
    assert_eq!(
        video.extmap_id("urn:ietf:params:rtp-hdrext:sdes:rtp-stream-id"),
        Some(10)
    );
    assert_eq!(
        video.extmap_id("urn:ietf:params:rtp-hdrext:sdes:repaired-rtp-stream-id"),
        Some(11)
    );
    // With rids, Chromium 156 signals no SSRCs for the simulcast video.
    assert_eq!(video.ssrcs().count(), 0);
    assert_eq!(encoding(video, 96), "VP8/90000");
    assert_eq!(
        video.msids().next().map(|m| m.stream_id.as_str()),
        Some("2376aa31-aabe-457b-9bc6-60bf5a93c188")
    );
}

/// What every aiortc 1.16 section of one capture shares: ICE credentials, three
/// fingerprints (sha-256, -384, -512), actpass, three UDP host candidates (127.0.0.1 put
/// first by the capture script, then 192.0.2.2 and fd00::2), and end-of-candidates.
fn check_aiortc_transport(m: &MediaDescription, ufrag: &str, pwd: &str) {
    assert_eq!(m.ice_ufrag(), Some(ufrag));
    assert_eq!(m.ice_pwd(), Some(pwd));
    assert_eq!(m.ice_options(), None);
    let fps: Vec<_> = m.fingerprints().collect();
    assert_eq!(
        fps.iter()
            .map(|f| (f.hash.clone(), f.bytes.len()))
            .collect::<Vec<_>>(),
        [
            (HashFunction::Sha256, 32),
            (HashFunction::Sha384, 48),
            (HashFunction::Sha512, 64)
        ]
    );
    assert_eq!(m.setup(), Some(Setup::ActPass));
    let candidates: Vec<_> = m.candidates().collect();
    assert_eq!(
        candidates
            .iter()
            .map(|c| c.address.as_str())
            .collect::<Vec<_>>(),
        ["127.0.0.1", "192.0.2.2", "fd00::2"]
    );
    for c in &candidates {
        assert!(c.is_udp());
        assert_eq!(c.typ, CandidateType::Host);
        assert_eq!(c.priority, 2130706431);
        assert_eq!(c.foundation.len(), 32);
        assert!(c.extensions.is_empty());
    }
    assert_eq!(candidates[0].port, m.port);
    assert!(m.end_of_candidates());
}

fn aiortc_av_data() {
    let name = "aiortc116_av_data_offer.sdp";
    let sdp = round_trip(name, &fixture(name));
    assert_eq!(sdp.origin.session_id, 4005021638);
    assert_eq!(sdp.origin.session_version, 4005021638);
    assert_eq!(sdp.origin.unicast_address, "0.0.0.0");
    assert_eq!(
        sdp.bundle_mids(),
        Some(&["0", "1", "2"].map(String::from)[..])
    );
    assert!(!sdp.extmap_allow_mixed());
    let semantic = sdp.msid_semantic().expect("msid-semantic");
    assert_eq!(
        (semantic.semantic.as_str(), semantic.ids.as_slice()),
        ("WMS", &["*".to_owned()][..])
    );
    assert!(!semantic.space_after_colon);
    let kinds: Vec<_> = sdp.media.iter().map(|m| m.kind.clone()).collect();
    assert_eq!(
        kinds,
        [MediaKind::Audio, MediaKind::Video, MediaKind::Application]
    );
    assert_eq!(mids(&sdp), ["0", "1", "2"]);
    let fp256 = "3A:47:CD:0B:A1:8D:49:4D:AF:F0:FF:63:FF:00:C2:A7:19:48:DE:B3:DB:61:96:65:D1:90:92:C9:4B:92:48:6B";
    for m in &sdp.media {
        check_aiortc_transport(m, "M1MH", "gEjkZ6KK6P0BbVr3ZHXWN9");
        assert_eq!(
            m.fingerprint().map(|f| hex(&f.bytes)).as_deref(),
            Some(fp256)
        );
    }

    let audio = &sdp.media[0];
    assert_eq!(audio.payload_types().collect::<Vec<_>>(), [96, 9, 0, 8]);
    assert_eq!(encoding(audio, 96), "opus/48000/2");
    assert_eq!(encoding(audio, 9), "G722/8000");
    assert_eq!(audio.direction(), Some(Direction::SendRecv));
    assert_eq!(
        extmaps(audio),
        [
            (1, "urn:ietf:params:rtp-hdrext:sdes:mid"),
            (2, "urn:ietf:params:rtp-hdrext:ssrc-audio-level")
        ]
    );
    assert!(audio.rtcp_mux() && !audio.rtcp_rsize());
    let ssrc = audio.ssrcs().next().expect("ssrc");
    assert_eq!(ssrc.ssrc, 1989306819);
    assert_eq!(
        ssrc.value.as_deref(),
        Some("db5cb4d7-f1fb-4448-9d94-0eaf564ffc2c")
    );
    assert_eq!(
        audio.msids().next().and_then(|m| m.track_id.as_deref()),
        Some("2142714b-0875-4562-bfb7-132a9a1d0afb")
    );

    let video = &sdp.media[1];
    assert_eq!(
        video.payload_types().collect::<Vec<_>>(),
        [97, 98, 99, 100, 101, 102]
    );
    assert_eq!(encoding(video, 97), "VP8/90000");
    assert_eq!(feedback(video, 97), ["nack", "nack pli", "goog-remb"]);
    assert_eq!(encoding(video, 99), "H264/90000");
    assert_eq!(
        video.fmtp(99).and_then(|f| f.param("profile-level-id")),
        Some("42001f")
    );
    assert_eq!(video.fmtp(98).and_then(|f| f.param("apt")), Some("97"));
    let group = video.ssrc_groups().next().expect("ssrc-group");
    assert_eq!(group.semantics, "FID");
    assert_eq!(group.ssrcs, [4132121875, 1613963570]);
    assert_eq!(
        extmaps(video),
        [
            (1, "urn:ietf:params:rtp-hdrext:sdes:mid"),
            (
                3,
                "http://www.webrtc.org/experiments/rtp-hdrext/abs-send-time"
            )
        ]
    );

    let data = &sdp.media[2];
    assert_eq!(data.proto, PROTO_DTLS_SCTP);
    assert_eq!(data.sctp_port(), Some(5000));
    assert_eq!(data.max_message_size(), Some(262144));
}

fn aiortc_data() {
    let name = "aiortc116_data_offer.sdp";
    let sdp = round_trip(name, &fixture(name));
    assert_eq!(sdp.bundle_mids(), Some(&["0".to_owned()][..]));
    assert_eq!(sdp.media.len(), 1);
    let data = &sdp.media[0];
    assert_eq!(data.kind, MediaKind::Application);
    assert_eq!(data.port, 47674);
    check_aiortc_transport(data, "a3wY", "7RvjZP5B66J7HEh6HKmbiZ");
    assert_eq!(data.sctp_port(), Some(5000));
    assert_eq!(data.max_message_size(), Some(262144));
}

/// A made-up attribute, at session level and in a section, and an untyped line type
/// (`i=`), all come back where they were.
fn unknown_attributes_survive() {
    let text = fixture("chromium156_av_data_offer.sdp")
        .replace(
            "a=extmap-allow-mixed\r\n",
            "a=extmap-allow-mixed\r\na=x-shoal-session\r\n",
        )
        .replace(
            "a=mid:2\r\n",
            "a=mid:2\r\na=x-shoal-unknown:foo bar\r\na=x-shoal-empty:\r\n",
        )
        .replace(
            "m=application 48290 UDP/DTLS/SCTP webrtc-datachannel\r\n",
            "m=application 48290 UDP/DTLS/SCTP webrtc-datachannel\r\ni=data channels\r\n",
        );
    let sdp = round_trip("injected", &text);
    assert!(
        sdp.attributes
            .contains(&Attribute::other("x-shoal-session", None))
    );
    let data = &sdp.media[2];
    assert_eq!(data.title.as_deref(), Some("data channels"));
    let mid_at = data
        .attributes
        .iter()
        .position(|a| a == &Attribute::Mid("2".to_owned()))
        .expect("mid");
    assert_eq!(
        data.attributes[mid_at + 1],
        Attribute::other("x-shoal-unknown", Some("foo bar"))
    );
    assert_eq!(
        data.attributes[mid_at + 2],
        Attribute::other("x-shoal-empty", Some(""))
    );
    assert_eq!(other_values(data, "x-shoal-unknown"), [Some("foo bar")]);
}

#[test]
fn sdp_roundtrip_real_offers() {
    chromium_av_data();
    chromium_data();
    chromium_simulcast();
    aiortc_av_data();
    aiortc_data();
    unknown_attributes_survive();

    // Every capture in the folder, including any added later, round-trips.
    let mut seen = 0;
    for entry in std::fs::read_dir(FIXTURES).expect("fixtures folder") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "sdp") {
            let name = path.display().to_string();
            let text = std::fs::read_to_string(&path).expect("fixture");
            round_trip(&name, &text);
            seen += 1;
        }
    }
    assert!(seen >= 5, "expected the five captures, found {seen}");
}
