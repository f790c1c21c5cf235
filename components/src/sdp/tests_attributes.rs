//! Each typed attribute: parses, serializes back to the same text, and refuses values off
//! its grammar with [`SdpError::InvalidAttribute`].

use super::*;

/// Parses `text` (after `a=`), checks it serializes back unchanged, returns the value.
fn rt(text: &str) -> Attribute {
    let attr = Attribute::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
    assert_eq!(attr.to_string(), text, "serialize {attr:?}");
    attr
}

/// Checks that `text` is refused as a malformed `name` attribute.
fn bad(text: &str, name: &'static str) {
    assert_eq!(
        Attribute::parse(text),
        Err(SdpError::InvalidAttribute { line: 1, name }),
        "{text}"
    );
}

#[test]
fn flags() {
    assert_eq!(rt("ice-lite"), Attribute::IceLite);
    assert_eq!(rt("extmap-allow-mixed"), Attribute::ExtmapAllowMixed);
    assert_eq!(rt("bundle-only"), Attribute::BundleOnly);
    assert_eq!(rt("end-of-candidates"), Attribute::EndOfCandidates);
    assert_eq!(rt("rtcp-mux"), Attribute::RtcpMux);
    assert_eq!(rt("rtcp-mux-only"), Attribute::RtcpMuxOnly);
    assert_eq!(rt("rtcp-rsize"), Attribute::RtcpRsize);
    for (text, d) in [
        ("sendrecv", Direction::SendRecv),
        ("sendonly", Direction::SendOnly),
        ("recvonly", Direction::RecvOnly),
        ("inactive", Direction::Inactive),
    ] {
        assert_eq!(rt(text), Attribute::Direction(d));
    }
    assert_eq!(Direction::SendOnly.reversed(), Direction::RecvOnly);
    assert_eq!(Direction::Inactive.reversed(), Direction::Inactive);
    // A flag written with a value is not the flag its RFC defines: kept verbatim.
    assert_eq!(
        rt("rtcp-mux:yes"),
        Attribute::other("rtcp-mux", Some("yes"))
    );
    // Likewise a valued attribute written without a value.
    assert_eq!(rt("mid"), Attribute::other("mid", None));
}

#[test]
fn unknown_attributes_are_kept_verbatim() {
    assert_eq!(rt("x-foo"), Attribute::other("x-foo", None));
    assert_eq!(rt("x-foo:"), Attribute::other("x-foo", Some("")));
    assert_eq!(
        rt("rtcp-xr:rcvr-rtt=all"),
        Attribute::other("rtcp-xr", Some("rcvr-rtt=all"))
    );
    // Only the first colon splits; spaces in the value are kept as written.
    assert_eq!(
        rt("x-shoal-unknown: a:b  c "),
        Attribute::other("x-shoal-unknown", Some(" a:b  c "))
    );
    assert_eq!(rt("x-foo:1").name(), "x-foo");
    // The name must be a token (RFC 8866 §9).
    assert_eq!(
        Attribute::parse("x foo"),
        Err(SdpError::Malformed { line: 1 })
    );
    assert_eq!(Attribute::parse(":x"), Err(SdpError::Malformed { line: 1 }));
}

#[test]
fn group() {
    let Attribute::Group(g) = rt("group:BUNDLE 0 1 2") else {
        panic!("not a group")
    };
    assert!(g.is_bundle());
    assert_eq!(g.mids, ["0", "1", "2"]);
    assert_eq!(
        rt("group:BUNDLE"),
        Attribute::Group(Group::new("BUNDLE", &[]))
    );
    assert_eq!(
        rt("group:LS a b"),
        Attribute::Group(Group::new("LS", &["a", "b"]))
    );
    bad("group:", "group");
    bad("group:BUNDLE 0 a,b", "group");
}

#[test]
fn ice() {
    assert_eq!(rt("ice-ufrag:TDAc"), Attribute::IceUfrag("TDAc".to_owned()));
    assert_eq!(
        rt("ice-pwd:c+J6geSSAAVm30+mCIPgT9oL"),
        Attribute::IcePwd("c+J6geSSAAVm30+mCIPgT9oL".to_owned())
    );
    assert_eq!(
        rt("ice-options:trickle renomination"),
        Attribute::IceOptions(vec!["trickle".to_owned(), "renomination".to_owned()])
    );
    // RFC 8839 §5.4: ufrag 4..=256 ice-chars, password 22..=256.
    bad("ice-ufrag:abc", "ice-ufrag");
    bad("ice-ufrag:ab-d", "ice-ufrag");
    bad(&format!("ice-ufrag:{}", "a".repeat(257)), "ice-ufrag");
    bad("ice-pwd:tooshorttooshorttoosh", "ice-pwd");
    bad("ice-pwd:c+J6geSSAAVm30+mCIPgT9o=", "ice-pwd");
    bad("ice-options:", "ice-options");
    bad("ice-options:tri-ckle", "ice-options");
}

#[test]
fn fingerprint() {
    let text = "fingerprint:sha-256 D1:13:88:90:D8:41:46:69:CC:91:F8:81:74:AD:85:30:1A:9B:05:B7:1E:45:CE:0B:E0:A1:AF:E5:C6:BC:D5:96";
    let Attribute::Fingerprint(fp) = rt(text) else {
        panic!("not a fingerprint")
    };
    assert_eq!(fp.hash, HashFunction::Sha256);
    assert_eq!(fp.bytes.len(), 32);
    assert_eq!(fp.bytes.first(), Some(&0xD1));
    assert_eq!(fp.bytes.last(), Some(&0x96));
    assert_eq!(Fingerprint::new(HashFunction::Sha256, &fp.bytes), fp);
    // sha-1 is 20 bytes; an unknown hash keeps any (bounded) length.
    let sha1 = format!("fingerprint:sha-1 {}", ["AB"; 20].join(":"));
    assert_eq!(rt(&sha1).name(), "fingerprint");
    let Attribute::Fingerprint(other) = rt("fingerprint:blake3 01:02") else {
        panic!("not a fingerprint")
    };
    assert_eq!(other.hash, HashFunction::Other("blake3".to_owned()));
    assert_eq!(other.hash.digest_len(), None);
    // Lower case is read, and written back in upper case (RFC 8122 §5 UHEX).
    let lower = Attribute::parse(
        "fingerprint:SHA-1 ab:cd:ef:01:23:45:67:89:ab:cd:ef:01:23:45:67:89:ab:cd:ef:01",
    )
    .expect("lower-case fingerprint");
    assert_eq!(
        lower.to_string(),
        "fingerprint:sha-1 AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89:AB:CD:EF:01"
    );
    bad("fingerprint:sha-256 D1:13", "fingerprint");
    bad("fingerprint:sha-256", "fingerprint");
    bad("fingerprint:sha-1 ABC:DE", "fingerprint");
    bad("fingerprint:sha-1 +1:02", "fingerprint");
    bad("fingerprint:sha-1 GG:02", "fingerprint");
    bad("fingerprint:sha-1 AB::CD", "fingerprint");
    bad(
        &format!("fingerprint:x {}", ["00"; 129].join(":")),
        "fingerprint",
    );
}

#[test]
fn setup() {
    for (text, s) in [
        ("setup:actpass", Setup::ActPass),
        ("setup:active", Setup::Active),
        ("setup:passive", Setup::Passive),
        ("setup:holdconn", Setup::HoldConn),
    ] {
        assert_eq!(rt(text), Attribute::Setup(s));
    }
    bad("setup:ACTIVE", "setup");
    bad("setup:", "setup");
}

#[test]
fn msid_and_msid_semantic() {
    assert_eq!(
        rt("msid-semantic: WMS a b"),
        Attribute::MsidSemantic(MsidSemantic::wms(&["a", "b"]))
    );
    let Attribute::MsidSemantic(m) = rt("msid-semantic:WMS *") else {
        panic!("not msid-semantic")
    };
    assert!(!m.space_after_colon);
    assert_eq!(m.ids, ["*"]);
    assert_eq!(
        rt("msid-semantic: WMS"),
        Attribute::MsidSemantic(MsidSemantic::wms(&[]))
    );
    bad("msid-semantic:", "msid-semantic");
    assert_eq!(rt("msid:s t"), Attribute::Msid(Msid::new("s", "t")));
    let Attribute::Msid(m) = rt("msid:-") else {
        panic!("not msid")
    };
    assert_eq!((m.stream_id.as_str(), m.track_id), ("-", None));
    bad(&format!("msid:{}", "a".repeat(65)), "msid");
    bad("msid:a b c", "msid");
    bad("msid:", "msid");
}

#[test]
fn mid() {
    assert_eq!(rt("mid:0"), Attribute::Mid("0".to_owned()));
    assert_eq!(rt("mid:audio"), Attribute::Mid("audio".to_owned()));
    bad("mid:", "mid");
    bad("mid:a b", "mid");
}

#[test]
fn rtpmap() {
    let Attribute::RtpMap(r) = rt("rtpmap:111 opus/48000/2") else {
        panic!("not rtpmap")
    };
    assert_eq!(
        (r.payload_type, r.clock_rate_hz, r.encoding_params),
        (111, 48000, Some(2))
    );
    assert!(r.is("OPUS"));
    assert_eq!(
        rt("rtpmap:96 VP8/90000"),
        Attribute::RtpMap(RtpMap::new(96, "VP8", 90000))
    );
    bad("rtpmap:128 VP8/90000", "rtpmap");
    bad("rtpmap:96 VP8", "rtpmap");
    bad("rtpmap:96 VP8/x", "rtpmap");
    bad("rtpmap:96 VP8/90000/2/1", "rtpmap");
    bad("rtpmap:96", "rtpmap");
}

#[test]
fn fmtp() {
    let Attribute::Fmtp(f) =
        rt("fmtp:102 level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42001f")
    else {
        panic!("not fmtp")
    };
    assert_eq!(f.payload_type(), Some(102));
    assert_eq!(f.param("packetization-mode"), Some("1"));
    assert_eq!(f.param("nope"), None);
    // Non key=value parameters are kept as written (RED's payload list).
    let Attribute::Fmtp(red) = rt("fmtp:63 111/111") else {
        panic!("not fmtp")
    };
    assert_eq!(red.params, "111/111");
    let Attribute::Fmtp(named) = rt("fmtp:webrtc-datachannel max-message-size=100000") else {
        panic!("not fmtp")
    };
    assert_eq!(named.payload_type(), None);
    bad("fmtp:96", "fmtp");
    bad("fmtp:96 ", "fmtp");
}

#[test]
fn rtcp_fb() {
    assert_eq!(
        rt("rtcp-fb:96 nack pli"),
        Attribute::RtcpFb(RtcpFb::new(96, "nack", Some("pli")))
    );
    assert_eq!(
        rt("rtcp-fb:111 transport-cc"),
        Attribute::RtcpFb(RtcpFb::new(111, "transport-cc", None))
    );
    let Attribute::RtcpFb(all) = rt("rtcp-fb:* trr-int 100") else {
        panic!("not rtcp-fb")
    };
    assert_eq!(all.payload_type, None);
    bad("rtcp-fb:96", "rtcp-fb");
    bad("rtcp-fb:x nack", "rtcp-fb");
    bad("rtcp-fb:96 na:ck", "rtcp-fb");
    bad("rtcp-fb:96 nack ", "rtcp-fb");
}

#[test]
fn extmap() {
    assert_eq!(
        rt("extmap:4 urn:ietf:params:rtp-hdrext:sdes:mid"),
        Attribute::Extmap(Extmap::new(4, "urn:ietf:params:rtp-hdrext:sdes:mid"))
    );
    let Attribute::Extmap(e) = rt("extmap:2/sendonly urn:x attr1 attr2") else {
        panic!("not extmap")
    };
    assert_eq!(e.direction, Some(Direction::SendOnly));
    assert_eq!(e.attributes.as_deref(), Some("attr1 attr2"));
    bad("extmap:1/up urn:x", "extmap");
    bad("extmap:123456 urn:x", "extmap");
    bad("extmap:70000 urn:x", "extmap");
    bad("extmap:1", "extmap");
    bad("extmap:x urn:x", "extmap");
}

#[test]
fn ssrc_and_ssrc_group() {
    let Attribute::Ssrc(s) = rt("ssrc:1491917798 msid:a b") else {
        panic!("not ssrc")
    };
    assert_eq!(
        (s.ssrc, s.attribute.as_str(), s.value.as_deref()),
        (1491917798, "msid", Some("a b"))
    );
    assert_eq!(
        rt("ssrc:1 cname:x"),
        Attribute::Ssrc(Ssrc::new(1, "cname", "x"))
    );
    let Attribute::Ssrc(flag) = rt("ssrc:7 foo") else {
        panic!("not ssrc")
    };
    assert_eq!(flag.value, None);
    bad("ssrc:4294967296 cname:x", "ssrc");
    bad("ssrc:1", "ssrc");
    bad("ssrc:-1 cname:x", "ssrc");
    let Attribute::SsrcGroup(g) = rt("ssrc-group:FID 527938104 3292983239") else {
        panic!("not ssrc-group")
    };
    assert_eq!(
        (g.semantics.as_str(), g.ssrcs.as_slice()),
        ("FID", &[527938104, 3292983239][..])
    );
    bad("ssrc-group:FID 1 x", "ssrc-group");
    bad("ssrc-group:", "ssrc-group");
}

#[test]
fn rid() {
    assert_eq!(
        rt("rid:q send"),
        Attribute::Rid(Rid::new("q", RidDirection::Send))
    );
    let Attribute::Rid(r) = rt("rid:1 recv pt=96,97;max-width=1280;max-height=720") else {
        panic!("not rid")
    };
    assert_eq!(r.direction, RidDirection::Recv);
    assert_eq!(r.formats, ["96", "97"]);
    assert_eq!(r.restriction("max-width"), Some("1280"));
    let Attribute::Rid(r) = rt("rid:f send max-fps=30;depend") else {
        panic!("not rid")
    };
    assert!(r.formats.is_empty());
    assert_eq!(r.restrictions.len(), 2);
    assert_eq!(r.restriction("depend"), None);
    bad("rid:q sideways", "rid");
    bad("rid:q.1 send", "rid");
    bad("rid:q", "rid");
    bad("rid:q send pt=", "rid");
    bad("rid:q send ", "rid");
    bad("rid:q send max-width=1;pt=96", "rid");
}

#[test]
fn simulcast() {
    let Attribute::Simulcast(s) = rt("simulcast:send q;h;f") else {
        panic!("not simulcast")
    };
    assert_eq!(
        s.send().map(|l| l.rids().collect::<Vec<_>>()),
        Some(vec!["q", "h", "f"])
    );
    assert!(s.recv().is_none());
    let Attribute::Simulcast(s) = rt("simulcast:recv 1,~4;2;3 send c") else {
        panic!("not simulcast")
    };
    let recv = s.recv().expect("recv");
    assert_eq!(recv.streams.len(), 3);
    assert_eq!(recv.streams[0].len(), 2);
    assert!(recv.streams[0][1].paused);
    assert_eq!(s.lists[0].direction, RidDirection::Recv);
    let built = Simulcast {
        lists: vec![SimulcastStreams::new(RidDirection::Send, &["q", "h"])],
    };
    assert_eq!(built.to_string(), "send q;h");
    bad("simulcast:send q recv", "simulcast");
    bad("simulcast:send q send h", "simulcast");
    bad("simulcast:up q", "simulcast");
    bad("simulcast:send q;;h", "simulcast");
    bad("simulcast:send ~", "simulcast");
    bad("simulcast:", "simulcast");
}

#[test]
fn sctp() {
    assert_eq!(rt("sctp-port:5000"), Attribute::SctpPort(5000));
    assert_eq!(
        rt("max-message-size:262144"),
        Attribute::MaxMessageSize(262144)
    );
    bad("sctp-port:65536", "sctp-port");
    bad("sctp-port:+5000", "sctp-port");
    bad("max-message-size:", "max-message-size");
    bad("max-message-size:1e6", "max-message-size");
}

#[test]
fn rtcp() {
    let Attribute::Rtcp(r) = rt("rtcp:9 IN IP4 0.0.0.0") else {
        panic!("not rtcp")
    };
    assert_eq!(r.port, 9);
    assert_eq!(r.connection.map(|c| c.address), Some("0.0.0.0".to_owned()));
    assert_eq!(
        rt("rtcp:53020"),
        Attribute::Rtcp(Rtcp {
            port: 53020,
            connection: None
        })
    );
    bad("rtcp:9 IN IP4", "rtcp");
    bad("rtcp:port", "rtcp");
}

#[test]
fn candidate() {
    let text = "candidate:4088398096 1 udp 2122194687 127.0.0.1 40574 typ host generation 0 network-id 3 network-cost 50";
    let Attribute::Candidate(c) = rt(text) else {
        panic!("not a candidate")
    };
    assert_eq!(c.foundation, "4088398096");
    assert_eq!((c.component, c.priority, c.port), (1, 2122194687, 40574));
    assert!(c.is_udp() && !c.is_tcp());
    assert_eq!(c.ip(), Some(std::net::IpAddr::from([127, 0, 0, 1])));
    assert_eq!(c.typ, CandidateType::Host);
    assert_eq!(c.extension("network-cost"), Some("50"));
    // The JSEP forms with prefixes parse to the same candidate.
    assert_eq!(Candidate::parse(&format!("a={text}")), Ok(c.clone()));
    assert_eq!(Candidate::parse(text), Ok(c.clone()));
    assert_eq!(
        Candidate::parse(text.trim_start_matches("candidate:")),
        Ok(c)
    );

    let Attribute::Candidate(tcp) =
        rt("candidate:219862404 1 tcp 1518214911 127.0.0.1 9 typ host tcptype active generation 0")
    else {
        panic!("not a candidate")
    };
    assert_eq!(tcp.tcp_type, Some(TcpType::Active));
    let Attribute::Candidate(srflx) =
        rt("candidate:2 1 UDP 1694498815 192.0.2.3 45664 typ srflx raddr 203.0.113.141 rport 8998")
    else {
        panic!("not a candidate")
    };
    assert_eq!(srflx.typ, CandidateType::ServerReflexive);
    assert_eq!(srflx.related_address.as_deref(), Some("203.0.113.141"));
    assert_eq!(srflx.related_port, Some(8998));
    let Attribute::Candidate(mdns) =
        rt("candidate:1 1 udp 1 a1b2c3d4-0000-1111-2222-333344445555.local 5000 typ host")
    else {
        panic!("not a candidate")
    };
    assert_eq!(mdns.ip(), None);
    let Attribute::Candidate(relay) =
        rt("candidate:3 2 udp 5 192.0.2.9 3478 typ relay raddr 0.0.0.0 rport 9 tcptype so")
    else {
        panic!("not a candidate")
    };
    assert_eq!(relay.typ, CandidateType::Relay);
    assert_eq!(relay.tcp_type, Some(TcpType::SimultaneousOpen));
    let Attribute::Candidate(odd) = rt("candidate:x 1 udp 1 ::1 1 typ newtype") else {
        panic!("not a candidate")
    };
    assert_eq!(odd.typ.as_str(), "newtype");
    let host = Candidate::host_udp(
        "1",
        2130706431,
        std::net::IpAddr::from([127, 0, 0, 1]),
        5000,
    );
    assert_eq!(
        host.to_string(),
        "1 1 udp 2130706431 127.0.0.1 5000 typ host"
    );

    for text in [
        "candidate:1 1 udp 1 127.0.0.1 5000",
        "candidate:1 1 udp 1 127.0.0.1 5000 typ",
        "candidate:1 1 udp 1 127.0.0.1 5000 type host",
        "candidate:1 0 udp 1 127.0.0.1 5000 typ host",
        "candidate:1 257 udp 1 127.0.0.1 5000 typ host",
        "candidate:1 1 udp 4294967296 127.0.0.1 5000 typ host",
        "candidate:1 1 udp 1 127.0.0.1 65536 typ host",
        "candidate:a-b 1 udp 1 127.0.0.1 5000 typ host",
        "candidate:1 1 udp 1 127.0.0.1 5000 typ host generation",
        "candidate:1 1 udp 1 127.0.0.1 5000 typ host rport x",
        "candidate:1 1 udp 1 127.0.0.1 5000 typ host tcptype sideways",
        "candidate:1 1 udp 1 127.0.0.1 5000 typ host raddr a raddr b",
        "candidate:1 1 u:dp 1 127.0.0.1 5000 typ host",
    ] {
        bad(text, "candidate");
    }
    bad(
        &format!("candidate:{} 1 udp 1 ::1 1 typ host", "a".repeat(33)),
        "candidate",
    );
    assert_eq!(
        Candidate::parse("candidate:1"),
        Err(SdpError::InvalidAttribute {
            line: 1,
            name: "candidate"
        })
    );
}
