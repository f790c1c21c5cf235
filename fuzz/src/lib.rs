//! The bodies of shoal's fuzz targets, one per parser and state machine that takes
//! bytes from the network: each must return, whatever `data` is, without a panic, a
//! hang or unbounded memory. `fuzz_targets/*.rs` hand them to libFuzzer
//! (`cargo fuzz run -s none <target>`); a crash found is fixed in the crate that
//! panicked and kept as a regression test there.
//!
//! The state machines are driven past their first gate so the fuzzer spends its time
//! where the rules are: `sctp_association` sets up an association first and wraps the
//! fuzzer's chunks in packets with the right tag and checksum; `dtls_server` feeds a
//! server connection the datagrams `data` is split into; `jwt` signs its input as
//! claims, as only a signed token's claims are read.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use shoal_components::dtls::{DtlsCertificate, DtlsConfig, DtlsConn, DtlsRole};
use shoal_components::rtcp::{Compound, RtcpBody};
use shoal_components::rtp::RtpPacket;
use shoal_components::rtp::payload::Vp8Descriptor;
use shoal_components::sctp::Tsn;
use shoal_components::sctp::assoc::{AssocState, Inputs, Sctp, SctpLimits, handle_packet};
use shoal_components::sctp::chunk::RawChunk;
use shoal_components::sctp::cookie::CookieKey;
use shoal_components::sctp::dcep::DcepMessage;
use shoal_components::sctp::packet::{Packet, PacketWriter, checksum};
use shoal_components::sdp::{AnswerParams, Negotiation};
use shoal_components::stun::StunMessage;
use shoal_components::time::Time;
use shoal_server::control::auth::{Act, ApiKey, Auth};
use shoal_server::tcp::Framing;

/// Splits `data` into pieces, each behind a two-byte big-endian length (the last
/// one short when the length runs past the end): how targets that take several
/// datagrams, packets or reads get them from one input.
fn pieces(mut data: &[u8]) -> impl Iterator<Item = &[u8]> {
    std::iter::from_fn(move || {
        let (len, rest) = data.split_first_chunk::<2>()?;
        let n = usize::from(u16::from_be_bytes(*len)).min(rest.len());
        let (piece, tail) = rest.split_at(n);
        data = tail;
        Some(piece)
    })
}

/// STUN (RFC 8489): a message parsed, every accessor read, integrity checked with
/// both hashes.
pub fn stun(data: &[u8]) {
    let Ok(m) = StunMessage::parse(Bytes::copy_from_slice(data)) else {
        return;
    };
    let _ = (m.class(), m.method(), m.transaction_id(), m.raw().len());
    for (typ, value) in m.attributes() {
        let _ = (typ, value.len());
    }
    let _ = (m.username(), m.priority(), m.use_candidate());
    let _ = (
        m.ice_controlling(),
        m.ice_controlled(),
        m.xor_mapped_address(),
    );
    let _ = m.error_code();
    let _ = m.unknown_attributes().count();
    let _ = (m.has_fingerprint(), m.has_message_integrity());
    let _ = m.verify_integrity(b"fuzzpassword");
    let _ = m.verify_integrity_sha256(b"fuzzpassword");
    let _ = m.unknown_comprehension_required();
}

/// DTLS (RFC 6347): the records of a datagram, and of each handshake record its
/// fragments and the message each whole fragment holds.
pub fn dtls_records(data: &[u8]) {
    use shoal_components::dtls::{
        Alert, ClientHello, ContentType, HandshakeFragments, HandshakeType, HelloVerifyRequest,
        ServerHello, messages,
    };
    for record in shoal_components::dtls::Records::new(data) {
        let Ok(record) = record else { break };
        let _ = record.header.epoch_and_sequence();
        match record.header.content_type {
            ContentType::Alert => {
                let _ = Alert::parse(record.fragment);
            }
            ContentType::Handshake => {
                for fragment in HandshakeFragments::new(record.fragment) {
                    let Ok(f) = fragment else { break };
                    let body = f.body;
                    let _ = match f.header.msg_type {
                        HandshakeType::ClientHello => ClientHello::parse(body).map(|_| ()),
                        HandshakeType::ServerHello => ServerHello::parse(body).map(|_| ()),
                        HandshakeType::HelloVerifyRequest => {
                            HelloVerifyRequest::parse(body).map(|_| ())
                        }
                        HandshakeType::Certificate => {
                            messages::Certificate::parse(body).map(|_| ())
                        }
                        HandshakeType::ServerKeyExchange => {
                            messages::ServerKeyExchange::parse(body).map(|_| ())
                        }
                        HandshakeType::CertificateRequest => {
                            messages::CertificateRequest::parse(body).map(|_| ())
                        }
                        HandshakeType::ServerHelloDone => messages::parse_server_hello_done(body),
                        HandshakeType::ClientKeyExchange => {
                            messages::ClientKeyExchange::parse(body).map(|_| ())
                        }
                        HandshakeType::CertificateVerify => {
                            messages::CertificateVerify::parse(body).map(|_| ())
                        }
                        HandshakeType::Finished => messages::parse_finished(body).map(|_| ()),
                        _ => Ok(()),
                    };
                }
            }
            _ => {}
        }
    }
}

/// The node's certificate, made once (generating one per input would be all the
/// fuzzer measured).
fn certificate() -> Arc<DtlsCertificate> {
    static CERT: OnceLock<Arc<DtlsCertificate>> = OnceLock::new();
    CERT.get_or_init(|| Arc::new(DtlsCertificate::generate().expect("a certificate")))
        .clone()
}

/// A DTLS server connection (shoal's role with browsers) fed the datagrams `data`
/// splits into, a millisecond apart, with its timers fired and its output drained
/// between them.
pub fn dtls_server(data: &[u8]) {
    let config = Arc::new(DtlsConfig {
        // The fuzzer sends no cookie exchange first: let its hellos through.
        hello_verify: false,
        ..DtlsConfig::default()
    });
    let mut now = Time::ZERO;
    let mut conn = DtlsConn::new(
        DtlsRole::Server,
        config,
        certificate(),
        [7; 32],
        [3; 32],
        now,
    );
    for datagram in pieces(data) {
        now = now + Duration::from_millis(1);
        let _ = conn.handle_datagram(now, datagram);
        conn.handle_timeout(now);
        while conn.poll_transmit().is_some() {}
        while conn.poll_event().is_some() {}
        let _ = conn.send_application_data(b"x");
    }
}

/// SCTP (RFC 9260): a packet parsed (with and without its checksum required), every
/// chunk parsed, and a DCEP message read from each DATA chunk's payload.
pub fn sctp_packet(data: &[u8]) {
    let bytes = Bytes::copy_from_slice(data);
    let _ = Packet::parse(&bytes);
    let Ok(packet) = Packet::parse_with(&bytes, true) else {
        return;
    };
    for chunk in packet.chunks() {
        let Ok(chunk) = chunk else { break };
        if let shoal_components::sctp::chunk::Chunk::Data(d) = &chunk {
            let _ = DcepMessage::parse(&d.payload);
        }
    }
}

/// DCEP (RFC 8832): one message.
pub fn dcep(data: &[u8]) {
    let _ = DcepMessage::parse(data);
}

/// Two associations set up with each other (shoal's side answered the INIT), then the
/// fuzzer's chunks, a packet per piece of `data`, sent to shoal's side under its tag
/// with a valid checksum: every chunk reaches the association's rules.
pub fn sctp_association(data: &[u8]) {
    const PORT: u16 = 5000;
    let key = CookieKey::new(&[9; 32]);
    let limits = SctpLimits::default();
    let inputs = |now: Time, tag: u32| Inputs {
        now,
        cookie_key: &key,
        limits: &limits,
        fresh: (tag, Tsn(tag ^ 0x5555)),
        nonce: u64::from(tag) << 32 | 0x7e,
    };
    let mut client = Sctp::new(true, PORT, PORT);
    let mut server = Sctp::new(false, PORT, PORT);
    client.start(0x1111_1111, Tsn(100), &limits);
    let Some(init) = client.solo.pop() else {
        return;
    };
    handle_packet(&mut server, &init, &inputs(Time::ZERO, 0x2222_2222));
    let Some(init_ack) = server.solo.pop() else {
        return;
    };
    handle_packet(&mut client, &init_ack, &inputs(Time::ZERO, 0x3333_3333));
    let Some(echo) = client.control.pop_fitting(usize::MAX, true) else {
        return;
    };
    let packet = |vtag: u32, chunk: &[u8]| {
        let mut buf = BytesMut::new();
        let mut w = PacketWriter::new(&mut buf, PORT, PORT, vtag);
        w.push(&RawChunk(chunk));
        w.finish()
    };
    handle_packet(
        &mut server,
        &packet(client.peer_vtag, &echo),
        &inputs(Time::ZERO, 1),
    );
    if server.state != AssocState::Established {
        return;
    }
    let vtag = server.my_vtag;
    let mut now = Time::ZERO;
    for chunks in pieces(data) {
        now = now + Duration::from_millis(1);
        // The common header, then the fuzzer's bytes as they are, then the checksum.
        let mut raw = Vec::with_capacity(12 + chunks.len());
        raw.extend_from_slice(&PORT.to_be_bytes());
        raw.extend_from_slice(&PORT.to_be_bytes());
        raw.extend_from_slice(&vtag.to_be_bytes());
        raw.extend_from_slice(&[0; 4]);
        raw.extend_from_slice(chunks);
        let crc = checksum(&raw);
        raw[8..12].copy_from_slice(&crc.to_le_bytes());
        handle_packet(&mut server, &Bytes::from(raw), &inputs(now, 5));
        while server.pop_message().is_some() {}
        while server.control.pop_fitting(usize::MAX, true).is_some() {}
        server.solo.clear();
        let _ = server.ack_shutdown_when_drained();
    }
}

/// RTP (RFC 3550) with RFC 8285 header extensions: a packet parsed, every extension
/// read, each typed extension tried under every id, and a VP8 descriptor read from
/// the payload.
pub fn rtp(data: &[u8]) {
    let Ok(p) = RtpPacket::parse(data) else {
        return;
    };
    let _ = (
        p.header(),
        p.payload().len(),
        p.padding().len(),
        p.csrcs().count(),
    );
    for e in p.extensions() {
        let _ = e;
    }
    for id in 0..=15 {
        let _ = p.extension(id);
        let _ = p.mid(id);
        let _ = p.rid(id);
        let _ = p.repaired_rid(id);
        let _ = p.abs_send_time(id);
        let _ = p.transport_cc_seq(id);
        let _ = p.abs_capture_time(id);
        let _ = p.audio_level(id);
    }
    let _ = Vp8Descriptor::parse(p.payload());
}

/// RTCP (RFC 3550, RFC 4585, transport-cc): a compound validated and every packet
/// parsed, each NACK's lost packets and each transport-cc feedback's packets listed.
pub fn rtcp(data: &[u8]) {
    let datagram = Bytes::copy_from_slice(data);
    let _ = Compound::validate(&datagram);
    for item in Compound::new(datagram) {
        let Ok(p) = item else { break };
        match &p.body {
            RtcpBody::Nack(n) => {
                let _ = n.entries.lost().count();
            }
            RtcpBody::TransportCc(fb) => {
                let _ = fb.reference_time_us();
                let _ = fb.packets().count();
            }
            _ => {}
        }
    }
}

/// SDP (RFC 8866) as the node takes an offer: text checked, parsed, and answered
/// (JSEP, RFC 8829).
pub fn sdp(data: &[u8]) {
    let Ok(offer) = shoal_server::control::participants::check_offer(data) else {
        return;
    };
    let candidates: [SocketAddr; 1] = [SocketAddr::from(([127, 0, 0, 1], 7100))];
    let params = AnswerParams {
        candidates: &candidates,
        tcp_candidates: &[],
        ice_ufrag: "fuzzufrag",
        ice_pwd: "fuzzpasswordfuzzpassword",
        fingerprint_sha256: [0xab; 32],
        session_id: 7,
    };
    let mut ssrc = 1000u32;
    let _ = Negotiation::new(7).answer(&offer, &params, &[], &mut || {
        ssrc = ssrc.wrapping_add(1);
        ssrc
    });
}

/// The signalling JSON (`/signal`): a client's message, then encoded again.
pub fn signal_json(data: &[u8]) {
    use shoal_proto::v1::signal_request;
    if let Ok(m) = serde_json::from_slice::<signal_request::Message>(data) {
        let _ = serde_json::to_vec(&m);
    }
}

/// RFC 4571 framing (ICE-TCP): the reads `data` splits into, framed.
pub fn tcp_framing(data: &[u8]) {
    let mut framing = Framing::default();
    let mut out = Vec::new();
    for read in pieces(data) {
        if framing.push(read, &mut out).is_err() {
            return;
        }
        out.clear();
    }
}

/// Access tokens (JWT HS256): `data` as a token, and `data` as the claims of a token
/// signed with the node's secret (the signature is checked before the claims are
/// read, so only a signed token reaches the claims and grants), each checked for a
/// join.
pub fn jwt(data: &[u8]) {
    use base64::Engine;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    const SECRET: &str = "fuzz-secret-of-at-least-thirty-two-characters";
    static AUTH: OnceLock<Auth> = OnceLock::new();
    let auth = AUTH.get_or_init(|| {
        let key: ApiKey = format!("fuzzkey:{SECRET}").parse().expect("a valid key");
        Auth::new(&[key], Duration::from_secs(10))
    });
    if let Ok(token) = std::str::from_utf8(data) {
        let _ = auth.check(Some(token), Act::Join { room: "room" });
    }
    let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"HS256","typ":"JWT"}"#);
    let signed = format!("{header}.{}", URL_SAFE_NO_PAD.encode(data));
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, SECRET.as_bytes());
    let tag = ring::hmac::sign(&key, signed.as_bytes());
    let token = format!("{signed}.{}", URL_SAFE_NO_PAD.encode(tag.as_ref()));
    let _ = auth.check(Some(&token), Act::Join { room: "room" });
}
