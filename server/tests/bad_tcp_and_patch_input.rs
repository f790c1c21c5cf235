//! Acceptance: what a stranger can send to the ICE-TCP port and to WHIP/WHEP PATCH
//! is refused or dropped, with a clear status and a count, and a real session on
//! the same shard is unaffected.
//!
//! TCP (RFC 6544, RFC 4571 framing): a connection that opens with an HTTP request
//! (read as a frame far over the limit), one whose first frame is not STUN, one
//! that sends an oversized frame after a STUN one, ones that never send anything
//! (closed after `--tcp-auth-timeout`, on a shard with no peer too), one past the
//! per-address bound and one past `--max-tcp-connections` (closed at once) are each
//! closed and counted; meanwhile a connection carrying a valid check for a WHIP
//! session is answered and stays open past the timeout.
//!
//! PATCH (RFC 9725 §4.3): no If-Match 428, a stale entity-tag 412, a malformed
//! sdpfrag 400 (naming what is wrong), half a credential pair 400, another
//! content type 415, an unknown session 404; a restart 200 with a new ETag and the
//! candidates, and a trickle with the current one 204; the restarted credentials
//! answer over TCP.

mod grpc_node;
mod http_client;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::num::NonZeroUsize;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use http_client::{Reply, fixture_offer, post_offer, request_with_headers};
use shoal_components::stun::{self, Class, StunMessage, StunWriter, TransactionId};
use shoal_server::config::Config;

const SDPFRAG: &str = "application/trickle-ice-sdpfrag";
/// `--tcp-auth-timeout` here.
const AUTH_TIMEOUT: Duration = Duration::from_secs(1);
/// `--max-tcp-connections` here.
const MAX_CONNECTIONS: usize = 20;
/// Unvalidated connections one address may hold (the driver's bound).
const PER_IP: usize = 16;

/// The value of the first `a=NAME:` line of `sdp`.
fn attribute<'a>(sdp: &'a str, name: &str) -> &'a str {
    let prefix = format!("a={name}:");
    sdp.lines()
        .find_map(|l| l.trim_end().strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no a={name} in\n{sdp}"))
}

/// `packet` with its RFC 4571 length.
fn framed(packet: &[u8]) -> Vec<u8> {
    let mut f = u16::try_from(packet.len())
        .expect("a frame")
        .to_be_bytes()
        .to_vec();
    f.extend_from_slice(packet);
    f
}

/// A Binding request of a controlling client for `shoal_ufrag:client_ufrag`,
/// signed with shoal's password.
fn check(tid: u8, shoal_ufrag: &str, client_ufrag: &str, shoal_pwd: &str) -> Bytes {
    let mut buf = BytesMut::new();
    let mut w = StunWriter::new(
        &mut buf,
        Class::Request,
        stun::BINDING,
        TransactionId([tid; 12]),
    );
    w.username(format!("{shoal_ufrag}:{client_ufrag}").as_bytes())
        .priority(0x6e00_01ff)
        .ice_controlling(7);
    w.message_integrity(shoal_pwd.as_bytes()).fingerprint();
    w.finish();
    buf.freeze()
}

/// Reads one framed packet from `stream`, or `None` if it closes or times out.
fn read_frame(stream: &mut TcpStream) -> Option<Vec<u8>> {
    let mut len = [0u8; 2];
    stream.read_exact(&mut len).ok()?;
    let mut packet = vec![0u8; usize::from(u16::from_be_bytes(len))];
    stream.read_exact(&mut packet).ok()?;
    Some(packet)
}

/// Whether shoal closes `stream` within `within` (a read returns end of stream or
/// a reset).
fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
    stream
        .set_read_timeout(Some(within))
        .expect("a read timeout");
    let mut buf = [0u8; 64];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut =>
            {
                return false;
            }
            Err(_) => return true,
        }
    }
}

fn patch(http: SocketAddr, path: &str, if_match: Option<&str>, body: &str) -> Reply {
    let mut headers = vec![("Content-Type", SDPFRAG)];
    if let Some(tag) = if_match {
        headers.push(("If-Match", tag));
    }
    request_with_headers(http, "PATCH", path, &headers, body.as_bytes())
}

#[track_caller]
fn assert_status(reply: &Reply, status: u16, mention: &str) {
    assert_eq!(reply.status, status, "{reply:?}");
    assert!(reply.body.contains(mention), "{mention:?} not in {reply:?}");
}

#[test]
fn bad_tcp_and_patch_input() {
    let grpc_node::RoomNode {
        server,
        http,
        control,
        ..
    } = grpc_node::node_with_room_in(
        "lobby",
        Config {
            shards: NonZeroUsize::MIN,
            max_tcp_connections: MAX_CONNECTIONS,
            tcp_auth_timeout: AUTH_TIMEOUT.as_secs(),
            ..Config::default()
        },
    );
    let tcp = server.tcp_candidates(0).expect("shard 0")[0];

    let report = || grpc_node::shard_report(&server, 0).driver;

    // On a shard with no peer yet (no timers of its own): the limits hold.
    // One address may hold MAX_UNVALIDATED_PER_IP unvalidated connections; the
    // next from it is closed at once, and so is any past the shard's limit.
    let from = |ip: [u8; 4]| {
        let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
            .expect("a socket");
        socket
            .bind(&SocketAddr::from((ip, 0)).into())
            .expect("bind a loopback address");
        socket.connect(&tcp.into()).expect("connect");
        TcpStream::from(socket)
    };
    let mut held: Vec<TcpStream> = (0..PER_IP).map(|_| from([127, 0, 0, 1])).collect();
    std::thread::sleep(Duration::from_millis(100));
    let mut one_more = from([127, 0, 0, 1]);
    assert!(
        closed_within(&mut one_more, Duration::from_millis(900)),
        "past the per-address limit"
    );
    held.extend((PER_IP..MAX_CONNECTIONS).map(|_| from([127, 0, 0, 2])));
    std::thread::sleep(Duration::from_millis(100));
    let mut extra = from([127, 0, 0, 3]);
    assert!(
        closed_within(&mut extra, Duration::from_millis(900)),
        "past the shard's limit"
    );
    assert_eq!(report().tcp_refused, 2, "{:?}", report());
    // Those that never authenticate are closed after the timeout.
    let opened = Instant::now();
    for conn in &mut held {
        assert!(closed_within(conn, AUTH_TIMEOUT * 4), "never authenticated");
    }
    assert!(
        opened.elapsed() >= AUTH_TIMEOUT / 2,
        "{:?}",
        opened.elapsed()
    );
    assert_eq!(
        report().tcp_closed_unauthenticated,
        MAX_CONNECTIONS as u64,
        "{:?}",
        report()
    );

    // A WHIP session whose checks will come over TCP.
    let offer = fixture_offer("chromium156_data_offer.sdp");
    let created = post_offer(http, "/whip/lobby?identity=alice", &offer);
    assert_eq!(created.status, 201, "{created:?}");
    assert!(
        created.body.contains(" tcp ") && created.body.contains("tcptype passive"),
        "a passive TCP candidate in\n{}",
        created.body
    );
    let location = created.header("location").expect("a Location").to_owned();
    let etag = created.header("etag").expect("an ETag").to_owned();
    let client_ufrag = attribute(&offer, "ice-ufrag").to_owned();
    let shoal_ufrag = attribute(&created.body, "ice-ufrag").to_owned();
    let shoal_pwd = attribute(&created.body, "ice-pwd").to_owned();

    // A valid check over TCP is answered, and its connection stays.
    let mut good = TcpStream::connect(tcp).expect("connect");
    good.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    good.write_all(&framed(&check(1, &shoal_ufrag, &client_ufrag, &shoal_pwd)))
        .unwrap();
    let answer = read_frame(&mut good).expect("an answer over TCP");
    let answer = StunMessage::parse(Bytes::from(answer)).expect("STUN");
    assert_eq!(answer.class(), Class::SuccessResponse);
    assert_eq!(answer.xor_mapped_address(), good.local_addr().ok());

    // Garbage: an HTTP request (a length far over the limit), a first frame that is
    // not STUN, an oversized frame after a STUN one (for an unknown ufrag: ignored).
    let mut http_talk = TcpStream::connect(tcp).expect("connect");
    http_talk
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    assert!(closed_within(&mut http_talk, Duration::from_secs(2)));
    let mut dtls_first = TcpStream::connect(tcp).expect("connect");
    dtls_first
        .write_all(&framed(&[
            0x16, 0xfe, 0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        ]))
        .unwrap();
    assert!(closed_within(&mut dtls_first, Duration::from_secs(2)));
    let mut oversized = TcpStream::connect(tcp).expect("connect");
    oversized
        .write_all(&framed(&check(2, "nobody", &client_ufrag, &shoal_pwd)))
        .unwrap();
    oversized.write_all(&[0xff, 0xff, 1, 2, 3]).unwrap();
    assert!(closed_within(&mut oversized, Duration::from_secs(2)));
    let r = report();
    assert_eq!(r.tcp_closed_oversized, 2, "{r:?}");
    assert_eq!(r.tcp_closed_garbage, 1, "{r:?}");

    // PATCH: each mistake its status; the session is untouched by them.
    let restart_body = "a=ice-ufrag:newU\r\na=ice-pwd:newpasswordnewpassword00\r\n".to_owned();
    assert_status(
        &patch(http, &location, None, &restart_body),
        428,
        "If-Match",
    );
    assert_status(
        &patch(http, &location, Some("\"stale\""), &restart_body),
        412,
        "another ICE session",
    );
    for (body, mention) in [
        ("a=ice-ufrag:newU\r\n", "go together"),
        ("a=ice-ufrag:newU\r\na=ice-pwd:short\r\n", "ice-pwd"),
        ("v=0\r\n", "a= and m= lines"),
        ("not sdp at all", "not an SDP line"),
    ] {
        assert_status(&patch(http, &location, Some(&etag), body), 400, mention);
    }
    let wrong_type = request_with_headers(
        http,
        "PATCH",
        &location,
        &[("Content-Type", "application/sdp"), ("If-Match", &etag)],
        restart_body.as_bytes(),
    );
    assert_status(&wrong_type, 415, SDPFRAG);
    assert_status(
        &patch(http, "/whip/lobby/nosuchsession", Some("*"), &restart_body),
        404,
        "no such session",
    );
    // Trickle with the current tag: 204, nothing else changes.
    let trickle = "m=application 9 UDP/DTLS/SCTP webrtc-datachannel\r\na=mid:0\r\n\
                   a=candidate:1 1 udp 2122260223 192.0.2.1 61764 typ host\r\n";
    let trickled = patch(http, &location, Some(&etag), trickle);
    assert_eq!(trickled.status, 204, "{trickled:?}");
    // The session still answers over TCP with its credentials.
    good.write_all(&framed(&check(3, &shoal_ufrag, &client_ufrag, &shoal_pwd)))
        .unwrap();
    assert!(
        read_frame(&mut good).is_some(),
        "answered after the garbage"
    );

    // A restart: 200 with new credentials and a new tag; the old tag is stale now.
    let restarted = patch(http, &location, Some("*"), &restart_body);
    assert_eq!(restarted.status, 200, "{restarted:?}");
    assert_eq!(restarted.header("content-type"), Some(SDPFRAG));
    let new_tag = restarted.header("etag").expect("a new ETag").to_owned();
    assert_ne!(new_tag, etag);
    let new_ufrag = attribute(&restarted.body, "ice-ufrag").to_owned();
    // With the candidates, which a WHIP client puts in place of the old ones.
    let tcp_line = format!("{} {} typ host tcptype passive", tcp.ip(), tcp.port());
    assert!(restarted.body.contains(&tcp_line), "{}", restarted.body);
    assert!(restarted.body.contains(" udp "), "{}", restarted.body);
    assert!(
        restarted.body.ends_with("a=end-of-candidates\r\n"),
        "{}",
        restarted.body
    );
    let new_pwd = attribute(&restarted.body, "ice-pwd").to_owned();
    assert_status(
        &patch(http, &location, Some(&etag), trickle),
        412,
        "another ICE session",
    );
    assert_eq!(patch(http, &location, Some(&new_tag), trickle).status, 204);
    // The new credentials answer over the same connection.
    good.write_all(&framed(&check(4, &new_ufrag, "newU", &new_pwd)))
        .unwrap();
    let answer = read_frame(&mut good).expect("answered with the new credentials");
    assert_eq!(
        StunMessage::parse(Bytes::from(answer))
            .expect("STUN")
            .class(),
        Class::SuccessResponse
    );
    // Past the auth timeout the validated connection is still open.
    std::thread::sleep(AUTH_TIMEOUT * 2);
    good.write_all(&framed(&check(5, &new_ufrag, "newU", &new_pwd)))
        .unwrap();
    assert!(
        read_frame(&mut good).is_some(),
        "a validated connection stays"
    );
    let r = report();
    assert_eq!(
        r.tcp_closed_unauthenticated, MAX_CONNECTIONS as u64,
        "{r:?}"
    );
    assert!(r.tcp_frames_in >= 5 && r.tcp_frames_out >= 4, "{r:?}");
    drop(control);
}
