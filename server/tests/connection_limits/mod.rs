//! Anonymous load is bounded for connections: a node with short timeouts closes, each
//! within its timeout and not before, an HTTP client that drips its request head
//! (slowloris), one that drips its body (answered 408), an idle HTTP keep-alive
//! connection, gRPC connections that send nothing or only part of the HTTP/2
//! preface, one that sent its preface but no request (told with GOAWAY first), a
//! gRPC connection whose calls have ended (with GOAWAY) and a `/signal` WebSocket
//! that never sends (after a ping it does not answer); legitimate HTTP and gRPC
//! requests succeed meanwhile. A node with small caps closes connections past the
//! per-address and total caps at once while another address is served, and refuses
//! a `/signal` upgrade from an origin not in its `--allowed-origins` with 403, and
//! counts `SignalService` streams against the per-address cap however few
//! connections carry them. A gRPC client whose connections the node closed carries
//! on over new ones. A node
//! serving TLS closes connections past its per-address cap on handshakes under way
//! and, at its total cap, lets the oldest handshake go for a new one, while other
//! addresses complete their handshakes. A
//! `SignalService` client that never opens its flow-control window holds the
//! node's signalling slot only until its session ends and the writer's grace has
//! passed. Every refusal is counted in GetNodeInfo.

use crate::grpc_node;

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use prost::Message;
use shoal_proto::v1::node_service_client::NodeServiceClient;
use shoal_proto::v1::signal_service_client::SignalServiceClient;
use shoal_proto::v1::{GetNodeInfoRequest, JoinRequest, SignalRequest, signal_request};
use shoal_server::config::Config;
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint};

/// `--http-header-timeout` of the first node.
const HEADER: Duration = Duration::from_secs(1);
/// `--idle-timeout` of the first node.
const IDLE: Duration = Duration::from_secs(2);
/// How late a close may come on a loaded machine (two cores, builds beside).
const SLACK: Duration = Duration::from_secs(2);
/// How soon a connection refused at accept must be closed: well under any timeout
/// of the second node (10 s), so it cannot be one of those.
const AT_ONCE: Duration = Duration::from_secs(1);
/// A request head that never ends: no blank line follows.
const SLOW_HEAD: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: shoal\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
/// A WebSocket upgrade of `/signal` (RFC 6455 §4.1), without its last line break.
const UPGRADE: &str = "GET /signal HTTP/1.1\r\nHost: shoal\r\nUpgrade: websocket\r\n\
                       Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
                       Sec-WebSocket-Version: 13\r\n";

fn loopback(last: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, last))
}

/// A TCP connection to `to` from `from` (any 127.0.0.0/8 address is this host's).
fn connect_from(from: IpAddr, to: SocketAddr) -> TcpStream {
    let socket =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("a socket");
    socket
        .bind(&SocketAddr::new(from, 0).into())
        .expect("bind the client address");
    socket.connect(&to.into()).expect("connect");
    socket.into()
}

/// Whether a read error means the server closed (or reset) the connection.
fn is_closed(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted | ErrorKind::BrokenPipe
    )
}

/// Reads (and keeps) everything until the server closes the connection; returns
/// the time from `start` to the close and what was read. Fails if it stays open
/// `limit` after `start`.
fn read_until_closed(
    stream: &mut TcpStream,
    start: Instant,
    limit: Duration,
) -> (Duration, Vec<u8>) {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let left = (start + limit).saturating_duration_since(Instant::now());
        assert!(
            !left.is_zero(),
            "still open {limit:?} after the start; read {got:?}"
        );
        stream.set_read_timeout(Some(left)).expect("a read timeout");
        match stream.read(&mut buf) {
            Ok(0) => return (start.elapsed(), got),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if is_closed(&e) => return (start.elapsed(), got),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) => panic!("read: {e}"),
        }
    }
}

/// Asserts that `elapsed` lies in [`timeout`, `timeout` + SLACK].
fn assert_within(what: &str, elapsed: Duration, timeout: Duration) {
    eprintln!("{what}: closed after {elapsed:?}");
    assert!(
        elapsed >= timeout && elapsed <= timeout + SLACK,
        "{what}: closed after {elapsed:?}, expected {timeout:?} to {:?}",
        timeout + SLACK
    );
}

/// A slowloris client: one byte of a head that never ends every 100 ms, until the
/// server closes the connection; the time that took.
fn slowloris(http: SocketAddr) -> Duration {
    let mut stream = connect_from(loopback(1), http);
    let start = Instant::now();
    stream
        .set_read_timeout(Some(Duration::from_millis(100)))
        .expect("a read timeout");
    let mut buf = [0u8; 256];
    for byte in SLOW_HEAD.iter().cycle() {
        assert!(
            start.elapsed() < HEADER + SLACK,
            "a dripped head still open after {:?}",
            start.elapsed()
        );
        if stream.write_all(std::slice::from_ref(byte)).is_err() {
            return start.elapsed();
        }
        match stream.read(&mut buf) {
            Ok(0) => return start.elapsed(),
            Ok(n) => panic!("an answer to a head that never ended: {:?}", &buf[..n]),
            Err(e) if is_closed(&e) => return start.elapsed(),
            Err(_) => {}
        }
    }
    unreachable!("the cycle never ends")
}

/// A WHIP POST whose head is whole but whose body drips, a byte every 100 ms: the
/// node answers 408 once the body has taken the header timeout. The time that took.
fn slow_body(http: SocketAddr) -> Duration {
    let mut stream = connect_from(loopback(1), http);
    let head = "POST /whip/slow HTTP/1.1\r\nHost: shoal\r\n\
                Content-Type: application/sdp\r\nContent-Length: 4000\r\n\r\n";
    stream.write_all(head.as_bytes()).expect("the head");
    let start = Instant::now();
    stream
        .set_read_timeout(Some(Duration::from_millis(100)))
        .expect("a read timeout");
    let mut answer = Vec::new();
    let mut buf = [0u8; 512];
    loop {
        assert!(
            start.elapsed() < HEADER + SLACK,
            "a dripped body still read after {:?}",
            start.elapsed()
        );
        let _ = stream.write_all(b"v");
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                answer.extend_from_slice(&buf[..n]);
                if answer.windows(4).any(|w| w == b"\r\n\r\n") {
                    break;
                }
            }
            Err(e) if is_closed(&e) => break,
            Err(_) => {}
        }
    }
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        answer.starts_with("HTTP/1.1 408"),
        "a body too slow gets 408: {answer:?}"
    );
    start.elapsed()
}

/// One request on a keep-alive connection, answered; then nothing until the server
/// closes it. The time from the request to the close.
fn idle_keep_alive(http: SocketAddr) -> Duration {
    let mut stream = connect_from(loopback(1), http);
    let start = Instant::now();
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: shoal\r\n\r\n")
        .expect("send a request");
    let (elapsed, got) = read_until_closed(&mut stream, start, IDLE + SLACK);
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.ends_with("ok\n"), "{text}");
    assert!(
        !text.to_ascii_lowercase().contains("connection: close"),
        "{text}"
    );
    elapsed
}

/// A connection to gRPC that sends `bytes` and then nothing; the time to its close.
fn silent_grpc(grpc: SocketAddr, bytes: &[u8]) -> Duration {
    let mut stream = connect_from(loopback(1), grpc);
    let start = Instant::now();
    stream.write_all(bytes).expect("send");
    let (elapsed, _) = read_until_closed(&mut stream, start, HEADER + SLACK);
    elapsed
}

/// A connection to gRPC that sends its preface and SETTINGS, answers PINGs (as
/// every HTTP/2 client does, RFC 9113 §6.7) and makes no request: the time to its
/// close, and whether a GOAWAY came before it.
fn preface_without_request(grpc: SocketAddr) -> (Duration, bool) {
    let mut stream = connect_from(loopback(1), grpc);
    let start = Instant::now();
    stream.write_all(PREFACE_AND_SETTINGS).expect("send");
    let mut got: Vec<u8> = Vec::new();
    let mut goaway = false;
    let mut buf = [0u8; 4096];
    loop {
        let left = (start + HEADER + SLACK).saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "still open; read {got:?}");
        stream.set_read_timeout(Some(left)).expect("a read timeout");
        match stream.read(&mut buf) {
            Ok(0) => return (start.elapsed(), goaway),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if is_closed(&e) => return (start.elapsed(), goaway),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) => panic!("read: {e}"),
        }
        // Whole frames: a PING is answered with its payload and the ACK flag.
        while got.len() >= 9 {
            let len = usize::from(got[0]) << 16 | usize::from(got[1]) << 8 | usize::from(got[2]);
            let Some(frame) = got.get(..9 + len) else {
                break;
            };
            goaway |= frame[3] == GOAWAY;
            if frame[3] == PING && frame[4] & 1 == 0 {
                let mut ack = frame.to_vec();
                ack[4] = 1;
                let _ = stream.write_all(&ack);
            }
            got.drain(..9 + len);
        }
    }
}

/// The HTTP/2 frame types of GOAWAY and PING (RFC 9113 §6.8, §6.7); a frame is a
/// 9-byte header (24-bit length, type, flags, stream) and its payload (§4.1).
const GOAWAY: u8 = 0x7;
const PING: u8 = 0x6;
/// The client connection preface and an empty SETTINGS frame (RFC 9113 §3.4).
const PREFACE_AND_SETTINGS: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0";

/// A `/signal` WebSocket that never sends a frame, not even a pong: the time from
/// the upgrade request to the close, and the close code.
fn silent_websocket(http: SocketAddr) -> (Duration, u16) {
    let mut stream = connect_from(loopback(1), http);
    let start = Instant::now();
    stream
        .write_all(format!("{UPGRADE}\r\n").as_bytes())
        .expect("send the upgrade");
    let (elapsed, got) = read_until_closed(&mut stream, start, IDLE + SLACK);
    let head_end = got
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a response head");
    let head = String::from_utf8_lossy(&got[..head_end]);
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    // The frames the server sent (RFC 6455 §5.2): unmasked, payloads under 64 KiB.
    let mut frames = &got[head_end + 4..];
    let (mut ping, mut close) = (false, None);
    while let [first, len, rest @ ..] = frames {
        let (len, rest) = match len & 0x7f {
            126 => (
                usize::from(u16::from_be_bytes([rest[0], rest[1]])),
                &rest[2..],
            ),
            n => (usize::from(n), rest),
        };
        assert!(rest.len() >= len, "a cut frame: {frames:?}");
        match first & 0x0f {
            0x9 => ping = true,
            0x8 => close = Some(u16::from_be_bytes([rest[0], rest[1]])),
            _ => {}
        }
        frames = &rest[len..];
    }
    assert!(ping, "the server pings a silent socket first");
    (elapsed, close.expect("a close frame"))
}

/// One gRPC call on a raw HTTP/2 connection, then the connection left idle: the time
/// from the call to the end of the connection, and how it ended.
fn idle_grpc(grpc: SocketAddr) -> (Duration, Result<(), h2::Error>) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let tcp = tokio::net::TcpStream::from_std({
            let s = connect_from(loopback(1), grpc);
            s.set_nonblocking(true).expect("non-blocking");
            s
        })
        .expect("a tokio socket");
        let (client, connection) = h2::client::handshake(tcp).await.expect("HTTP/2");
        let mut connection = tokio::spawn(connection);
        let mut client = client.ready().await.expect("ready");
        let start = Instant::now();
        let request = axum::http::Request::post("http://shoal/grpc.health.v1.Health/Check")
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(())
            .expect("a request");
        let (response, mut body) = client.send_request(request, false).expect("send");
        // An empty HealthCheckRequest: no compression, length 0.
        body.send_data(bytes::Bytes::from_static(&[0, 0, 0, 0, 0]), true)
            .expect("send the message");
        let response = response.await.expect("a response");
        assert_eq!(response.status(), 200);
        let mut body = response.into_body();
        while let Some(chunk) = body.data().await {
            let chunk = chunk.expect("data");
            let _ = body.flow_control().release_capacity(chunk.len());
        }
        let trailers = body.trailers().await.expect("trailers").expect("some");
        assert_eq!(
            trailers.get("grpc-status").map(|v| v.as_bytes()),
            Some(&b"0"[..])
        );
        let ended = tokio::time::timeout(IDLE + SLACK, &mut connection)
            .await
            .expect("the idle connection ends")
            .expect("the connection task");
        (start.elapsed(), ended)
    })
}

/// A gRPC client that connects and waits past the header timeout (its connection
/// is cut: no request), calls, then waits past the idle timeout (GOAWAY) and calls
/// again: both calls succeed, on connections the channel makes anew.
fn patient_grpc_client(grpc: SocketAddr) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let mut nodes = NodeServiceClient::new(grpc_node::connect(grpc).await);
        // Waits past the server's deadlines on purpose: no race is involved.
        tokio::time::sleep(HEADER + Duration::from_millis(500)).await;
        nodes
            .get_node_info(GetNodeInfoRequest {})
            .await
            .expect("a call after the connection was cut");
        tokio::time::sleep(IDLE + Duration::from_millis(500)).await;
        nodes
            .get_node_info(GetNodeInfoRequest {})
            .await
            .expect("a call after the idle connection got GOAWAY");
    });
}

/// GetNodeInfo over a new channel from `from`.
async fn node_info(grpc: SocketAddr, from: IpAddr) -> shoal_proto::v1::NodeInfo {
    let endpoint = Endpoint::from_shared(format!("http://{grpc}"))
        .expect("a URI")
        .local_address(Some(from));
    node_info_over(endpoint).await
}

/// GetNodeInfo over TLS, trusting only the certificate `ca` (PEM).
async fn node_info_over_tls(grpc: SocketAddr, ca: &str) -> shoal_proto::v1::NodeInfo {
    let endpoint = Endpoint::from_shared(format!("https://{grpc}"))
        .expect("a URI")
        .tls_config(ClientTlsConfig::new().ca_certificate(Certificate::from_pem(ca)))
        .expect("a TLS configuration");
    node_info_over(endpoint).await
}

/// GetNodeInfo over a new channel to `endpoint`.
async fn node_info_over(endpoint: Endpoint) -> shoal_proto::v1::NodeInfo {
    let channel = endpoint
        .connect_timeout(grpc_node::CONNECT_TIMEOUT)
        .timeout(grpc_node::CONNECT_TIMEOUT)
        .connect()
        .await
        .expect("connect");
    NodeServiceClient::new(channel)
        .get_node_info(GetNodeInfoRequest {})
        .await
        .expect("GetNodeInfo")
        .into_inner()
}

/// A `GET path` from `from` with `Connection: close`: the status and the response.
fn get_from(from: IpAddr, http: SocketAddr, path: &str, headers: &str) -> (u16, String) {
    let mut stream = connect_from(from, http);
    let start = Instant::now();
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: shoal\r\nConnection: close\r\n{headers}\r\n")
                .as_bytes(),
        )
        .expect("send");
    let (_, got) = read_until_closed(&mut stream, start, Duration::from_secs(5));
    let text = String::from_utf8_lossy(&got).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, text)
}

/// Requests that must succeed while the checks run: `/healthz`, the demo page and
/// GetNodeInfo, every 100 ms until `done`; how many of each round succeeded.
fn legitimate(http: SocketAddr, grpc: SocketAddr, done: Arc<AtomicBool>) -> u32 {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let rounds = AtomicU32::new(0);
    runtime.block_on(async {
        let channel = Endpoint::from_shared(format!("http://{grpc}"))
            .expect("a URI")
            .connect_timeout(grpc_node::CONNECT_TIMEOUT)
            .timeout(grpc_node::CONNECT_TIMEOUT)
            .connect()
            .await
            .expect("connect");
        let mut nodes = NodeServiceClient::new(channel);
        while !done.load(Ordering::Relaxed) {
            let (status, text) = get_from(loopback(4), http, "/healthz", "");
            assert_eq!((status, text.ends_with("ok\n")), (200, true), "{text}");
            let (status, text) = get_from(loopback(4), http, "/", "");
            assert_eq!(status, 200, "{text}");
            assert!(text.contains("<html"), "the demo page");
            nodes
                .get_node_info(GetNodeInfoRequest {})
                .await
                .expect("GetNodeInfo meanwhile");
            rounds.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    rounds.into_inner()
}

/// `idle_and_slow_connections_time_out`'s cases, one node each.
pub fn run() {
    timeouts_close_slow_and_idle_connections();
    caps_and_origins_refuse_at_once();
    tls_handshakes_are_capped();
    unread_signal_streams_are_cut();
}

fn timeouts_close_slow_and_idle_connections() {
    let (_server, control) = grpc_node::start_node(Config {
        shards: std::num::NonZeroUsize::MIN,
        http_header_timeout: HEADER.as_secs(),
        idle_timeout: IDLE.as_secs(),
        ..Config::default()
    });
    let http = control.http_addr().expect("HTTP is on");
    let grpc = control.grpc_addr().expect("gRPC is on");

    let done = Arc::new(AtomicBool::new(false));
    let poller = {
        let done = done.clone();
        std::thread::spawn(move || legitimate(http, grpc, done))
    };
    let slow = std::thread::spawn(move || slowloris(http));
    let body = std::thread::spawn(move || slow_body(http));
    let keep_alive = std::thread::spawn(move || idle_keep_alive(http));
    let nothing = std::thread::spawn(move || silent_grpc(grpc, b""));
    // 16 of the preface's 24 bytes (RFC 9113 §3.4).
    let preface = std::thread::spawn(move || silent_grpc(grpc, &PREFACE_AND_SETTINGS[..16]));
    let no_request = std::thread::spawn(move || preface_without_request(grpc));
    let websocket = std::thread::spawn(move || silent_websocket(http));
    let grpc_idle = std::thread::spawn(move || idle_grpc(grpc));
    let patient = std::thread::spawn(move || patient_grpc_client(grpc));

    assert_within("a dripped request head", slow.join().unwrap(), HEADER);
    assert_within("a dripped request body", body.join().unwrap(), HEADER);
    assert_within(
        "an idle keep-alive connection",
        keep_alive.join().unwrap(),
        IDLE,
    );
    assert_within("a silent gRPC connection", nothing.join().unwrap(), HEADER);
    assert_within(
        "a gRPC connection with part of the preface",
        preface.join().unwrap(),
        HEADER,
    );
    let (closed, goaway) = no_request.join().unwrap();
    assert_within("a gRPC connection without a request", closed, HEADER);
    assert!(
        goaway,
        "a client past its preface is told with GOAWAY (RFC 9113 §9.1)"
    );
    let (closed, code) = websocket.join().unwrap();
    assert_within("a silent /signal WebSocket", closed, IDLE);
    assert_eq!(code, 1001, "going away (RFC 6455 §7.4.1)");
    let (ended, how) = grpc_idle.join().unwrap();
    assert_within("a gRPC connection without calls", ended, IDLE);
    assert!(how.is_ok(), "closed gracefully, with GOAWAY: {how:?}");
    patient
        .join()
        .expect("a client whose connections were closed carries on");

    done.store(true, Ordering::Relaxed);
    let rounds = poller.join().expect("every legitimate request succeeded");
    assert!(
        rounds >= 10,
        "legitimate requests ran throughout: {rounds} rounds"
    );

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let counts = runtime
        .block_on(node_info(grpc, loopback(1)))
        .connections_refused;
    for (limit, at_least) in [
        ("header_timeout", 1),
        ("no_request", 3),
        ("idle", 2),
        ("signal_idle", 1),
    ] {
        let n = counts.get(limit).copied().unwrap_or(0);
        assert!(n >= at_least, "{limit}: {n} counted, {counts:?}");
    }
}

fn caps_and_origins_refuse_at_once() {
    let (_server, control) = grpc_node::start_node(Config {
        shards: std::num::NonZeroUsize::MIN,
        max_connections_per_address: 4,
        max_connections: 6,
        allowed_origins: vec!["https://good.example".parse().expect("an origin")],
        ..Config::default()
    });
    let http = control.http_addr().expect("HTTP is on");
    let grpc = control.grpc_addr().expect("gRPC is on");
    let refused_at_once = |from: IpAddr, to: SocketAddr| {
        let mut stream = connect_from(from, to);
        let (elapsed, got) = read_until_closed(&mut stream, Instant::now(), AT_ONCE);
        assert!(got.is_empty(), "nothing is sent to a refused connection");
        elapsed
    };

    // 127.0.0.3 fills its cap with connections that send nothing (the header
    // timeout is 10 s); its next ones, to either port, are closed at once.
    let held: Vec<TcpStream> = (0..4).map(|_| connect_from(loopback(3), http)).collect();
    refused_at_once(loopback(3), http);
    refused_at_once(loopback(3), grpc);
    // Another address is served meanwhile.
    let (status, text) = get_from(loopback(2), http, "/healthz", "");
    assert_eq!(status, 200, "{text}");

    // Filling the total: connections from 127.0.0.5 are held until one is closed at
    // once, which the total cap (6) does before the per-address cap (4) could.
    let mut more = Vec::new();
    loop {
        let mut stream = connect_from(loopback(5), http);
        stream
            .set_read_timeout(Some(Duration::from_millis(200)))
            .expect("a read timeout");
        match stream.read(&mut [0u8; 16]) {
            Ok(0) => break,
            Err(e) if is_closed(&e) => break,
            Ok(_) => panic!("a connection that sent nothing got an answer"),
            Err(_) => more.push(stream),
        }
        assert!(more.len() < 4, "the total cap never closed one");
    }
    assert!(
        !more.is_empty(),
        "the total was not full before 127.0.0.5 came"
    );
    drop((held, more));

    // Every slot comes back once the held connections close.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut stream = connect_from(loopback(3), http);
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: shoal\r\nConnection: close\r\n\r\n")
            .expect("send");
        let (_, got) = read_until_closed(&mut stream, Instant::now(), Duration::from_secs(5));
        if got.starts_with(b"HTTP/1.1 200") {
            break;
        }
        assert!(Instant::now() < deadline, "127.0.0.3 never got a slot back");
        std::thread::sleep(Duration::from_millis(20));
    }

    // Origins: a page of another origin may not open /signal; the allowed one and a
    // client that is no browser (no Origin) may.
    let (status, text) = get_upgrade(http, Some("https://evil.example"));
    assert_eq!(status, 403, "{text}");
    assert!(text.contains("--allowed-origins"), "{text}");
    assert_eq!(get_upgrade(http, Some("https://good.example")).0, 101);
    assert_eq!(get_upgrade(http, Some("HTTPS://GOOD.example:443")).0, 101);
    assert_eq!(get_upgrade(http, None).0, 101);
    // WHIP's CORS names the allowed origin only.
    let preflight = |origin: &str| {
        let mut stream = connect_from(loopback(2), http);
        stream
            .write_all(
                format!(
                    "OPTIONS /whip/lobby HTTP/1.1\r\nHost: shoal\r\nConnection: close\r\n\
                     Origin: {origin}\r\nAccess-Control-Request-Method: POST\r\n\r\n"
                )
                .as_bytes(),
            )
            .expect("send");
        let (_, got) = read_until_closed(&mut stream, Instant::now(), Duration::from_secs(5));
        String::from_utf8_lossy(&got).to_ascii_lowercase()
    };
    let good = preflight("https://good.example");
    assert!(
        good.contains("access-control-allow-origin: https://good.example"),
        "{good}"
    );
    assert!(good.contains("vary: origin"), "{good}");
    let evil = preflight("https://evil.example");
    assert!(evil.starts_with("http/1.1 200"), "{evil}");
    assert!(!evil.contains("access-control-allow-origin"), "{evil}");

    // Signalling streams count per address as sockets do, however few connections
    // carry them: 127.0.0.8 opens four over one connection, and a fifth is refused.
    runtime.block_on(async {
        let channel = Endpoint::from_shared(format!("http://{grpc}"))
            .expect("a URI")
            .local_address(Some(loopback(8)))
            .connect()
            .await
            .expect("connect");
        let open = || {
            let (requests, rx) = tokio::sync::mpsc::channel::<SignalRequest>(1);
            let outbound = futures_util::stream::unfold(rx, |mut rx| async move {
                rx.recv().await.map(|r| (r, rx))
            });
            let mut client = SignalServiceClient::new(channel.clone());
            async move { (requests, client.connect(outbound).await) }
        };
        let mut held = Vec::new();
        for _ in 0..4 {
            let (requests, opened) = open().await;
            held.push((requests, opened.expect("a signalling stream")));
        }
        let (_requests, refused) = open().await;
        let refused = refused.expect_err("a fifth stream from the address");
        assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");
        assert!(
            refused.message().contains("--max-connections-per-address"),
            "{refused:?}"
        );
    });

    let counts = runtime
        .block_on(node_info(grpc, loopback(7)))
        .connections_refused;
    for (limit, at_least) in [("per_address", 2), ("total", 1), ("origin", 1)] {
        let n = counts.get(limit).copied().unwrap_or(0);
        assert!(n >= at_least, "{limit}: {n} counted, {counts:?}");
    }
}

/// A `/signal` upgrade from 127.0.0.2 with `origin`: the status and the response
/// (head, and body when one is announced).
fn get_upgrade(http: SocketAddr, origin: Option<&str>) -> (u16, String) {
    let mut stream = connect_from(loopback(2), http);
    let origin = origin
        .map(|o| format!("Origin: {o}\r\n"))
        .unwrap_or_default();
    stream
        .write_all(format!("{UPGRADE}{origin}\r\n").as_bytes())
        .expect("send the upgrade");
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    let deadline = Instant::now() + Duration::from_secs(5);
    stream
        .set_read_timeout(Some(Duration::from_millis(100)))
        .expect("a read timeout");
    loop {
        let text = String::from_utf8_lossy(&got).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length: usize = head
                .lines()
                .filter_map(|l| l.split_once(':'))
                .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
                .and_then(|(_, v)| v.trim().parse().ok())
                .unwrap_or(0);
            if body.len() >= length {
                let status = head
                    .split(' ')
                    .nth(1)
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(0);
                return (status, text);
            }
        }
        assert!(Instant::now() < deadline, "no complete answer: {text}");
        match stream.read(&mut buf) {
            Ok(0) => panic!("closed before a complete answer: {text}"),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) => panic!("read: {e}"),
        }
    }
}

/// A GET of `/healthz` over TLS from `from`, trusting only `cert`: the status line,
/// or why the exchange failed.
fn healthz_over_tls(from: IpAddr, http: SocketAddr, cert: &[u8]) -> std::io::Result<String> {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls_pki_types::CertificateDer::from(cert.to_vec()))
        .expect("the certificate is a root");
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("TLS versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    let name = rustls_pki_types::ServerName::from(http.ip());
    let client = rustls::ClientConnection::new(Arc::new(config), name).expect("a client");
    let tcp = connect_from(from, http);
    tcp.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("a read timeout");
    let mut tls = rustls::StreamOwned::new(client, tcp);
    tls.write_all(b"GET /healthz HTTP/1.1\r\nHost: shoal\r\nConnection: close\r\n\r\n")?;
    let mut got = Vec::new();
    // The server may close without close_notify after the response.
    let _ = tls.read_to_end(&mut got);
    let text = String::from_utf8_lossy(&got);
    Ok(text.lines().next().unwrap_or_default().to_owned())
}

/// TLS handshakes that are never finished hold only their address's share
/// (`--max-tls-handshakes-per-address`; past it a connection is closed before its
/// handshake) and cannot fill the node's (`--max-tls-handshakes`; past it the
/// oldest handshake under way is let go): clients on other addresses complete
/// their handshakes meanwhile.
fn tls_handshakes_are_capped() {
    let dir = std::env::temp_dir().join(format!("shoal-tls-caps-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a directory");
    let cert = crate::tls_cert::certificate(&dir, "node", &[loopback(1)]);
    let (_server, control) = grpc_node::start_node(Config {
        shards: std::num::NonZeroUsize::MIN,
        tls_cert: Some(cert.cert_path.clone()),
        tls_key: Some(cert.key_path.clone()),
        max_tls_handshakes_per_address: 2,
        max_tls_handshakes: 3,
        ..Config::default()
    });
    let http = control.http_addr().expect("HTTP is on");
    let grpc = control.grpc_addr().expect("gRPC is on");
    let refused_at_once = |from: IpAddr, to: SocketAddr| {
        let mut stream = connect_from(from, to);
        let (_, got) = read_until_closed(&mut stream, Instant::now(), AT_ONCE);
        assert!(got.is_empty(), "nothing is sent to a refused connection");
    };

    // 127.0.0.3 opens two handshakes and never sends a ClientHello: its third
    // connection, to either port, is closed at once; 127.0.0.2 is served.
    let held: Vec<TcpStream> = (0..2).map(|_| connect_from(loopback(3), http)).collect();
    refused_at_once(loopback(3), http);
    refused_at_once(loopback(3), grpc);
    assert_eq!(
        healthz_over_tls(loopback(2), http, &cert.der).expect("served over TLS"),
        "HTTP/1.1 200 OK"
    );
    // 127.0.0.4 takes the node's last handshake: one from 127.0.0.5 lets the oldest
    // (127.0.0.3's first) go and is served.
    let last = connect_from(loopback(4), http);
    assert_eq!(
        healthz_over_tls(loopback(5), http, &cert.der).expect("served over TLS"),
        "HTTP/1.1 200 OK"
    );
    let mut held = held;
    let (_, got) = read_until_closed(&mut held[0], Instant::now(), AT_ONCE);
    assert!(got.is_empty(), "the handshake let go was told nothing");
    // Once they are gone, everyone is served again.
    drop((held, last));
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        // Refused (reset) until the node has seen the held connections close.
        let status = healthz_over_tls(loopback(3), http, &cert.der);
        if status.as_ref().is_ok_and(|s| s == "HTTP/1.1 200 OK") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "127.0.0.3 never got a handshake back: {status:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let counts = runtime
        .block_on(node_info_over_tls(grpc, &cert.pem))
        .connections_refused;
    for (limit, at_least) in [
        ("tls_handshakes_per_address", 2),
        ("tls_handshake_evicted", 1),
    ] {
        let n = counts.get(limit).copied().unwrap_or(0);
        assert!(n >= at_least, "{limit}: {n} counted, {counts:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--signal-write-timeout` of the node in [`unread_signal_streams_are_cut`].
const WRITE_TIMEOUT: Duration = Duration::from_secs(1);
/// How long a session's unread messages may stay after it ended (the server's
/// writer grace).
const WRITER_GRACE: Duration = Duration::from_secs(5);

/// A `SignalService` client that joins but never opens its stream's flow-control
/// window, while its connection answers the server's PINGs: once the room changes,
/// its session ends for not reading (SIGNAL_SLOW_READER) after the write timeout
/// (the transport took the join response, then stopped asking), and the connection is
/// cut after the writer's grace, where before the stream (its queue and its
/// connection) was held for ever. It held the node's one signalling slot
/// (`--max-signal-connections` counts `SignalService` streams as it counts
/// `/signal` sockets): a `/signal` upgrade got 503 meanwhile, and 101 after.
fn unread_signal_streams_are_cut() {
    let (_server, control) = grpc_node::start_node(Config {
        shards: std::num::NonZeroUsize::MIN,
        max_signal_connections: 1,
        signal_write_timeout: WRITE_TIMEOUT.as_secs(),
        ..Config::default()
    });
    let http = control.http_addr().expect("HTTP is on");
    let grpc = control.grpc_addr().expect("gRPC is on");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let (elapsed, during) = runtime.block_on(async {
        let tcp = tokio::net::TcpStream::from_std({
            let s = connect_from(loopback(6), grpc);
            s.set_nonblocking(true).expect("non-blocking");
            s
        })
        .expect("a tokio socket");
        // Every stream's window shut: the server may send headers, never data.
        let (client, connection) = h2::client::Builder::new()
            .initial_window_size(0)
            .handshake::<_, bytes::Bytes>(tcp)
            .await
            .expect("HTTP/2");
        // The connection task answers the server's PINGs throughout.
        let mut connection = tokio::spawn(connection);
        let mut client = client.ready().await.expect("ready");
        let request = axum::http::Request::post("http://shoal/shoal.v1.SignalService/Connect")
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(())
            .expect("a request");
        let (response, mut body) = client.send_request(request, false).expect("send");
        let join = SignalRequest {
            message: Some(signal_request::Message::Join(JoinRequest {
                room: "lobby".into(),
                identity: "stuck".into(),
                ..JoinRequest::default()
            })),
        }
        .encode_to_vec();
        let mut framed = vec![0u8];
        framed.extend_from_slice(&u32::try_from(join.len()).expect("small").to_be_bytes());
        framed.extend_from_slice(&join);
        body.send_data(bytes::Bytes::from(framed), false)
            .expect("send the join");
        let start = Instant::now();
        let response = response.await.expect("response headers");
        assert_eq!(response.status(), 200);
        // The stream holds the only signalling slot. A publisher joins the room:
        // news the unread stream owes its client.
        let during = tokio::task::spawn_blocking(move || {
            let during = get_upgrade(http, None).0;
            let offer = crate::http_client::fixture_offer("chromium156_av_data_offer.sdp");
            let reply =
                crate::http_client::post_offer_from(loopback(2), http, "/whip/lobby", &offer);
            assert_eq!(reply.status, 201, "{}", reply.body);
            during
        })
        .await
        .expect("the upgrade and the publisher");
        let limit = WRITE_TIMEOUT + WRITER_GRACE + SLACK + SLACK;
        let ended = tokio::time::timeout(limit, &mut connection).await;
        if ended.is_err() {
            let info = node_info(grpc, loopback(1)).await;
            panic!("the connection of an unread stream was still open after {limit:?}: {info:?}");
        }
        (start.elapsed(), during)
    });
    eprintln!("an unread SignalService stream: cut after {elapsed:?}");
    assert_eq!(
        during, 503,
        "a /signal upgrade while the stream held the slot"
    );
    assert!(
        elapsed >= WRITE_TIMEOUT + WRITER_GRACE,
        "cut after {elapsed:?}, before the write timeout and the grace"
    );
    // The slot came back with the stream.
    let deadline = Instant::now() + Duration::from_secs(5);
    while get_upgrade(http, None).0 != 101 {
        assert!(
            Instant::now() < deadline,
            "the signalling slot never came back"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let info = runtime.block_on(node_info(grpc, loopback(1)));
    assert!(info.slow_signal_readers >= 1, "{info:?}");
    let cut = info
        .connections_refused
        .get("stalled_stream")
        .copied()
        .unwrap_or(0);
    assert_eq!(cut, 1, "{:?}", info.connections_refused);
}
