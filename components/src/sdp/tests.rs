//! Whole descriptions: the line layer, the RFC 8866 §5 order, every error path and limit,
//! building an answer, and a seeded mutation run that must never panic.

use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};

use super::*;

/// A small JSEP-shaped offer, one section of each kind shoal cares about.
const OFFER: &str = "v=0\r\n\
o=- 4611731400430051336 2 IN IP4 127.0.0.1\r\n\
s=-\r\n\
t=0 0\r\n\
a=group:BUNDLE 0 1\r\n\
a=msid-semantic: WMS\r\n\
m=audio 9 UDP/TLS/RTP/SAVPF 111\r\n\
c=IN IP4 0.0.0.0\r\n\
a=ice-ufrag:EsAw\r\n\
a=ice-pwd:bP+XJMM09aR8AiX1jdukzR6Y\r\n\
a=setup:actpass\r\n\
a=mid:0\r\n\
a=sendonly\r\n\
a=rtcp-mux\r\n\
a=rtpmap:111 opus/48000/2\r\n\
m=application 9 UDP/DTLS/SCTP webrtc-datachannel\r\n\
c=IN IP4 0.0.0.0\r\n\
a=mid:1\r\n\
a=sctp-port:5000\r\n";

fn parse(text: &str) -> Result<SessionDescription, SdpError> {
    SessionDescription::parse(text)
}

/// Replaces the first occurrence of `from` in [`OFFER`].
fn offer_with(from: &str, to: &str) -> String {
    assert!(OFFER.contains(from), "{from:?} not in OFFER");
    OFFER.replacen(from, to, 1)
}

#[test]
fn parses_and_round_trips() {
    let sdp = parse(OFFER).expect("offer");
    assert_eq!(sdp.to_sdp_string(), OFFER);
    assert_eq!(sdp.media.len(), 2);
    assert_eq!(sdp.media[0].direction(), Some(Direction::SendOnly));
    assert_eq!(
        sdp.media_by_mid("1").map(|m| &m.kind),
        Some(&MediaKind::Application)
    );
    assert_eq!(sdp.media_by_mid("9"), None);
    assert_eq!(sdp.setup_for(&sdp.media[0]), Some(Setup::ActPass));
    assert_eq!(sdp.setup_for(&sdp.media[1]), None);
    assert_eq!(sdp.ice_credentials_for(&sdp.media[1]), None);
}

#[test]
fn line_endings() {
    let lf = OFFER.replace("\r\n", "\n");
    let expected = parse(OFFER).expect("offer");
    assert_eq!(parse(&lf), Ok(expected.clone()));
    // No terminator on the last line, and extra trailing newlines, are both fine.
    assert_eq!(parse(OFFER.trim_end()), Ok(expected.clone()));
    assert_eq!(parse(&format!("{OFFER}\r\n\n")), Ok(expected.clone()));
    // Mixed endings are still lines.
    assert_eq!(parse(&OFFER.replacen("\r\n", "\n", 3)), Ok(expected));
}

#[test]
fn session_level_attributes_and_fallbacks() {
    let text = offer_with(
        "a=group:BUNDLE 0 1\r\n",
        "a=group:BUNDLE 0 1\r\na=ice-lite\r\na=ice-ufrag:sEsS\r\na=ice-pwd:0123456789012345678901\r\n\
a=ice-options:ice2\r\na=fingerprint:sha-256 00:01:02:03:04:05:06:07:08:09:0A:0B:0C:0D:0E:0F:10:11:12:13:14:15:16:17:18:19:1A:1B:1C:1D:1E:1F\r\n\
a=setup:passive\r\na=extmap-allow-mixed\r\n",
    );
    let sdp = parse(&text).expect("offer");
    assert_eq!(sdp.to_sdp_string(), text);
    assert!(sdp.ice_lite());
    assert!(sdp.extmap_allow_mixed());
    assert_eq!(sdp.ice_options(), Some(&["ice2".to_owned()][..]));
    assert_eq!(sdp.fingerprint().map(|f| f.bytes.len()), Some(32));
    assert_eq!(sdp.attributes_named("ice-ufrag").count(), 1);
    // Media 0 has its own credentials and setup; media 1 falls back to the session's.
    let (audio, data) = (&sdp.media[0], &sdp.media[1]);
    assert_eq!(
        sdp.ice_credentials_for(audio),
        Some(("EsAw", "bP+XJMM09aR8AiX1jdukzR6Y"))
    );
    assert_eq!(
        sdp.ice_credentials_for(data),
        Some(("sEsS", "0123456789012345678901"))
    );
    assert_eq!(sdp.setup_for(audio), Some(Setup::ActPass));
    assert_eq!(sdp.setup_for(data), Some(Setup::Passive));
    assert_eq!(sdp.fingerprints_for(data).count(), 1);
    assert_eq!(sdp.fingerprints_for(audio).count(), 1);
}

#[test]
fn untyped_line_types_are_kept() {
    let text = "v=0\r\no=jdoe 3724394400 3724394405 IN IP4 198.51.100.1\r\ns=Call to John Smith\r\n\
i=SDP Offer #1\r\nu=http://www.jdoe.example.com/home.html\r\ne=Jane Doe <jane@jdoe.example.com>\r\n\
e=second@example.com\r\np=+1 617 555-6011\r\nc=IN IP4 198.51.100.1\r\nb=AS:2000\r\nt=2873397496 2873404696\r\n\
r=604800 3600 0 90000\r\nr=7d 1h 0 25h\r\nz=2882844526 -1h 2898848070 0\r\nt=0 0\r\nk=prompt\r\n\
a=recvonly\r\nm=audio 49170/2 RTP/AVP 0\r\ni=audio title\r\nc=IN IP6 2001:db8::2\r\nc=IN IP6 2001:db8::3\r\n\
b=TIAS:64000\r\nk=clear:secret\r\na=rtpmap:0 PCMU/8000\r\nm=text 0 RTP/AVP 98\r\n";
    let sdp = parse(text).expect("RFC 8866-style description");
    assert_eq!(sdp.to_sdp_string(), text);
    assert_eq!(sdp.information.as_deref(), Some("SDP Offer #1"));
    assert_eq!(sdp.emails.len(), 2);
    assert_eq!(sdp.phones, ["+1 617 555-6011"]);
    assert_eq!(
        sdp.bandwidths[0],
        Bandwidth {
            bwtype: "AS".to_owned(),
            bandwidth: 2000
        }
    );
    assert_eq!(sdp.timings.len(), 2);
    assert_eq!(sdp.timings[0].repeats.len(), 2);
    assert!(sdp.timings[0].zone.is_some());
    assert_eq!(sdp.key.as_deref(), Some("prompt"));
    let m = &sdp.media[0];
    assert_eq!((m.port, m.port_count), (49170, Some(2)));
    assert_eq!(m.connections.len(), 2);
    assert_eq!(m.title.as_deref(), Some("audio title"));
    assert_eq!(sdp.media[1].kind, MediaKind::Other("text".to_owned()));
    assert_eq!(sdp.media[1].port, 0);
}

#[test]
fn builds_an_answer() {
    let mut answer = SessionDescription::new(Origin::new(1234, 1));
    answer
        .push_attribute(Attribute::Group(Group::new(BUNDLE, &["0"])))
        .push_attribute(Attribute::IceLite)
        .push_attribute(Attribute::MsidSemantic(MsidSemantic::wms(&[])));
    let mut data = MediaDescription::new(
        MediaKind::Application,
        9,
        PROTO_DTLS_SCTP,
        &[FORMAT_DATACHANNEL],
    )
    .with_attribute(Attribute::Mid("0".to_owned()));
    data.connections
        .push(Connection::new(std::net::IpAddr::from([0, 0, 0, 0])));
    data.push_attribute(Attribute::IceUfrag("shoA".to_owned()))
        .push_attribute(Attribute::IcePwd("abcdefghijklmnopqrstuv".to_owned()))
        .push_attribute(Attribute::Fingerprint(Fingerprint::new(
            HashFunction::Sha256,
            &[0xAB; 32],
        )))
        .push_attribute(Attribute::Setup(Setup::Passive))
        .push_attribute(Attribute::Candidate(Candidate::host_udp(
            "1",
            2130706431,
            std::net::IpAddr::from([127, 0, 0, 1]),
            40000,
        )))
        .push_attribute(Attribute::EndOfCandidates)
        .push_attribute(Attribute::SctpPort(5000))
        .push_attribute(Attribute::MaxMessageSize(262144));
    answer.push_media(data);
    let text = answer.to_sdp_string();
    let fp = ["AB"; 32].join(":");
    let expected = format!(
        "v=0\r\no=- 1234 1 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\na=group:BUNDLE 0\r\na=ice-lite\r\n\
a=msid-semantic: WMS\r\nm=application 9 UDP/DTLS/SCTP webrtc-datachannel\r\nc=IN IP4 0.0.0.0\r\n\
a=mid:0\r\na=ice-ufrag:shoA\r\na=ice-pwd:abcdefghijklmnopqrstuv\r\na=fingerprint:sha-256 {fp}\r\n\
a=setup:passive\r\na=candidate:1 1 udp 2130706431 127.0.0.1 40000 typ host\r\na=end-of-candidates\r\n\
a=sctp-port:5000\r\na=max-message-size:262144\r\n"
    );
    assert_eq!(text, expected);
    assert_eq!(parse(&text), Ok(answer));
}

#[test]
fn errors_on_size_limits() {
    let big = format!("{OFFER}{}", "a=x\r\n".repeat(MAX_SDP_LEN / 5));
    assert_eq!(parse(&big), Err(SdpError::TooLarge { len: big.len() }));
    assert_eq!(
        SessionDescription::parse_bytes(big.as_bytes()),
        Err(SdpError::TooLarge { len: big.len() })
    );
    let long = format!("{OFFER}a=x-long:{}\r\n", "z".repeat(MAX_LINE_LEN));
    let line = OFFER.lines().count() + 1;
    assert_eq!(parse(&long), Err(SdpError::LineTooLong { line }));
    // Exactly at the limit is fine.
    let at_limit = format!("{OFFER}a=x-long:{}\r\n", "z".repeat(MAX_LINE_LEN - 9));
    assert!(parse(&at_limit).is_ok());
}

#[test]
fn errors_on_count_limits() {
    let head = "v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\n";
    let media = "m=audio 0 RTP/AVP 0\r\n".repeat(MAX_MEDIA);
    assert!(parse(&format!("{head}{media}")).is_ok());
    let over = format!("{head}{media}m=audio 0 RTP/AVP 0\r\n");
    assert_eq!(
        parse(&over),
        Err(SdpError::TooManyMedia {
            line: 5 + MAX_MEDIA
        })
    );

    let attrs = "a=x\r\n".repeat(MAX_ATTRIBUTES);
    assert!(parse(&format!("{head}{attrs}m=audio 0 RTP/AVP 0\r\n{attrs}")).is_ok());
    let over = format!("{head}m=audio 0 RTP/AVP 0\r\n{attrs}a=x\r\n");
    assert_eq!(
        parse(&over),
        Err(SdpError::TooManyAttributes {
            line: 6 + MAX_ATTRIBUTES
        })
    );

    // v o s t are four fields of the session level; b= lines fill the rest.
    let bws = "b=AS:1\r\n".repeat(MAX_FIELDS - 4);
    let ok = format!("v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\ns=-\r\n{bws}t=0 0\r\n");
    assert!(parse(&ok).is_ok());
    let over = format!("v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\ns=-\r\n{bws}b=AS:1\r\nt=0 0\r\n");
    assert_eq!(
        parse(&over),
        Err(SdpError::TooManyFields {
            line: MAX_FIELDS + 1
        })
    );
}

#[test]
fn errors_on_malformed_lines() {
    assert_eq!(
        parse(&offer_with("s=-", "s-")),
        Err(SdpError::Malformed { line: 3 })
    );
    assert_eq!(
        parse(&offer_with("s=-", "=-")),
        Err(SdpError::Malformed { line: 3 })
    );
    assert_eq!(
        parse(&offer_with("s=-", "1=-")),
        Err(SdpError::Malformed { line: 3 })
    );
    assert_eq!(
        parse(&offer_with("s=-", "s")),
        Err(SdpError::Malformed { line: 3 })
    );
    assert_eq!(
        parse(&offer_with("s=-", "é=-")),
        Err(SdpError::Malformed { line: 3 })
    );
    assert_eq!(
        parse(&offer_with("s=-", "s=a\0b")),
        Err(SdpError::Malformed { line: 3 })
    );
    assert_eq!(
        parse(&offer_with("s=-", "s=a\rb")),
        Err(SdpError::Malformed { line: 3 })
    );
    assert_eq!(
        parse(&offer_with("s=-\r\n", "s=-\r\n\r\n")),
        Err(SdpError::Malformed { line: 4 })
    );
    assert_eq!(
        parse(&offer_with("a=rtcp-mux", "a=rtcp mux")),
        Err(SdpError::Malformed { line: 14 })
    );
    assert_eq!(
        SessionDescription::parse_bytes(b"v=0\r\ns=\xff\r\n"),
        Err(SdpError::NotUtf8)
    );
}

#[test]
fn errors_on_line_types_and_order() {
    assert_eq!(
        parse(&offer_with("t=0 0\r\n", "t=0 0\r\nx=1\r\n")),
        Err(SdpError::UnknownLineType {
            line: 5,
            letter: 'x'
        })
    );
    assert_eq!(
        parse(&offer_with("a=mid:0", "q=1")),
        Err(SdpError::UnknownLineType {
            line: 12,
            letter: 'q'
        })
    );
    let out_of_order = |text: &str, line, letter| {
        assert_eq!(
            parse(text),
            Err(SdpError::OutOfOrder { line, letter }),
            "{text}"
        );
    };
    // s= before o=.
    out_of_order("v=0\r\ns=-\r\no=- 1 1 IN IP4 0.0.0.0\r\nt=0 0\r\n", 3, 'o');
    // A second v= and a second o=.
    out_of_order(&offer_with("s=-\r\n", "s=-\r\nv=0\r\n"), 4, 'v');
    out_of_order(&offer_with("s=-\r\n", "s=-\r\ns=again\r\n"), 4, 's');
    // a= before t=.
    out_of_order(
        "v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\ns=-\r\na=x\r\nt=0 0\r\n",
        5,
        't',
    );
    // r= after z=, and z= twice.
    let head = "v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\n";
    out_of_order(&format!("{head}z=1 0\r\nr=1 1 0\r\n"), 6, 'r');
    out_of_order(&format!("{head}r=1 1 0\r\nz=1 0\r\nz=1 0\r\n"), 7, 'z');
    // r= and z= may be followed by another t=.
    assert!(parse(&format!("{head}r=1 1 0\r\nz=1 0\r\nt=0 0\r\nr=1 1 0\r\n")).is_ok());
    // c= after a=, and a session-only line inside a media section.
    out_of_order(
        &offer_with("a=mid:1\r\n", "a=mid:1\r\nc=IN IP4 0.0.0.0\r\n"),
        19,
        'c',
    );
    out_of_order(
        &offer_with("a=mid:1\r\n", "a=mid:1\r\nu=http://x\r\n"),
        19,
        'u',
    );
    out_of_order(&offer_with("a=mid:1\r\n", "a=mid:1\r\nt=0 0\r\n"), 19, 't');
    out_of_order(
        &offer_with("a=mid:1\r\n", "a=mid:1\r\ni=late title\r\n"),
        19,
        'i',
    );
}

#[test]
fn errors_on_missing_lines() {
    assert_eq!(parse(""), Err(SdpError::Missing { letter: 'v' }));
    assert_eq!(parse("\r\n"), Err(SdpError::Missing { letter: 'v' }));
    assert_eq!(
        parse(&OFFER.replacen("v=0\r\n", "", 1)),
        Err(SdpError::Missing { letter: 'v' })
    );
    assert_eq!(
        parse("m=audio 0 RTP/AVP 0\r\n"),
        Err(SdpError::Missing { letter: 'v' })
    );
    assert_eq!(
        parse("v=0\r\ns=-\r\nt=0 0\r\n"),
        Err(SdpError::Missing { letter: 'o' })
    );
    assert_eq!(
        parse("v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\nt=0 0\r\n"),
        Err(SdpError::Missing { letter: 's' })
    );
    assert_eq!(
        parse("v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\ns=-\r\n"),
        Err(SdpError::Missing { letter: 't' })
    );
    assert_eq!(parse("v=0\r\n"), Err(SdpError::Missing { letter: 'o' }));
}

#[test]
fn errors_on_fields() {
    assert_eq!(
        parse(&offer_with("v=0", "v=1")),
        Err(SdpError::UnsupportedVersion { line: 1 })
    );
    assert_eq!(
        parse(&offer_with("v=0", "v=")),
        Err(SdpError::UnsupportedVersion { line: 1 })
    );
    let field = |from: &str, to: &str, line, letter| {
        assert_eq!(
            parse(&offer_with(from, to)),
            Err(SdpError::InvalidField { line, letter }),
            "{to}"
        );
    };
    let o = "o=- 4611731400430051336 2 IN IP4 127.0.0.1";
    field(o, "o=- 1 2 IN IP4", 2, 'o');
    field(o, "o=- x 2 IN IP4 127.0.0.1", 2, 'o');
    field(o, "o=- 1 2 IN IP4 127.0.0.1 extra", 2, 'o');
    field(o, "o=- 99999999999999999999 2 IN IP4 127.0.0.1", 2, 'o');
    field("t=0 0", "t=0", 4, 't');
    field("t=0 0", "t=now 0", 4, 't');
    field("s=-\r\n", "s=-\r\nb=AS\r\n", 4, 'b');
    field("s=-\r\n", "s=-\r\nb=AS:x\r\n", 4, 'b');
    field("s=-\r\n", "s=-\r\nc=IN IP4\r\n", 4, 'c');
    field("c=IN IP4 0.0.0.0", "c=IN IP4 0.0.0.0 x", 8, 'c');
    let m = "m=audio 9 UDP/TLS/RTP/SAVPF 111";
    field(m, "m=audio 9 UDP/TLS/RTP/SAVPF", 7, 'm');
    field(m, "m=audio 70000 UDP/TLS/RTP/SAVPF 111", 7, 'm');
    field(m, "m=audio 9/0 UDP/TLS/RTP/SAVPF 111", 7, 'm');
    field(m, "m=audio x UDP/TLS/RTP/SAVPF 111", 7, 'm');
    field(m, "m=audio 9 UDP//SAVPF 111", 7, 'm');
    field(m, "m=audio", 7, 'm');
}

#[test]
fn errors_on_attributes_report_their_line() {
    assert_eq!(
        parse(&offer_with("a=setup:actpass", "a=setup:sideways")),
        Err(SdpError::InvalidAttribute {
            line: 11,
            name: "setup"
        })
    );
    assert_eq!(
        parse(&offer_with("a=group:BUNDLE 0 1", "a=group:")),
        Err(SdpError::InvalidAttribute {
            line: 5,
            name: "group"
        })
    );
    let error = parse(&offer_with("a=sctp-port:5000", "a=sctp-port:x")).expect_err("bad port");
    assert_eq!(
        error.to_string(),
        "SDP line 19: malformed a=sctp-port attribute"
    );
}

#[test]
fn errors_on_a_mid_used_twice() {
    // RFC 5888 §4: a mid names one section of the description.
    let twice = offer_with("a=mid:1", "a=mid:0");
    let error = parse(&twice).expect_err("two sections with mid 0");
    assert_eq!(
        error,
        SdpError::DuplicateMid {
            line: 18,
            mid: "0".to_owned()
        }
    );
    assert!(error.to_string().contains("a=mid:0"), "{error}");
    // Distinct mids, and sections without one, are fine.
    assert!(parse(OFFER).is_ok());
    assert!(parse(&offer_with("a=mid:1\r\n", "")).is_ok());
}

/// Mutates real-looking descriptions many ways with a fixed seed: parsing must never
/// panic, and whatever parses must serialize to text that parses to the same model.
#[test]
fn mutations_never_panic_and_parsed_input_round_trips() {
    const ROUNDS: usize = 4000;
    let base = parse(OFFER).expect("offer").to_sdp_string()
        + "a=x-extra:1\r\n"
        + "a=candidate:1 1 udp 2122194687 127.0.0.1 40574 typ host generation 0\r\n"
        + "a=fingerprint:sha-256 D1:13:88:90:D8:41:46:69:CC:91:F8:81:74:AD:85:30:1A:9B:05:B7:1E:45:CE:0B:E0:A1:AF:E5:C6:BC:D5:96\r\n"
        + "a=ssrc-group:FID 1 2\r\na=rid:q send pt=111;max-br=64000\r\na=simulcast:send q;~h\r\n"
        + "a=extmap:1/sendrecv urn:x y\r\na=rtcp-fb:* nack\r\na=fmtp:111 minptime=10\r\n";
    let mut rng = ChaCha8Rng::seed_from_u64(0x5d9_5eed);
    let alphabet = b" :;=/,~*-.0123456789aAzZ\r\n\t\x00\xff";
    let mut parsed = 0;
    for _ in 0..ROUNDS {
        let mut bytes = base.clone().into_bytes();
        for _ in 0..=(rng.next_u32() % 4) {
            let len = bytes.len();
            if len == 0 {
                break;
            }
            let at = usize::try_from(rng.next_u32()).unwrap_or(0) % len;
            let pick = usize::try_from(rng.next_u32()).unwrap_or(0);
            match rng.next_u32() % 4 {
                0 => bytes[at] = alphabet[pick % alphabet.len()],
                1 => {
                    bytes.remove(at);
                }
                2 => bytes.insert(at, alphabet[pick % alphabet.len()]),
                _ => bytes.truncate(at),
            }
        }
        if let Ok(sdp) = SessionDescription::parse_bytes(&bytes) {
            parsed += 1;
            let text = sdp.to_sdp_string();
            assert_eq!(parse(&text).as_ref(), Ok(&sdp), "{text}");
        }
    }
    // The run is useful only if some mutants still parse.
    assert!(parsed > ROUNDS / 20, "only {parsed} mutants parsed");
}
