//! Acceptance: the real `shoal` binary answers ICE connectivity checks on a real UDP
//! socket, ignores bad ones, keeps serving, and stops cleanly on SIGINT.

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use shoal_components::stun::{self, Class, StunMessage, StunWriter, TransactionId};

const SHOAL: &str = env!("CARGO_BIN_EXE_shoal");
/// The shard's (ICE-lite) credentials, and the client's.
const SERVER_UFRAG: &str = "srvA";
const SERVER_PWD: &str = "serverpassword0123456789";
const CLIENT_UFRAG: &str = "cliB";
const CLIENT_PWD: &str = "clientpassword0123456789";
/// How long a test waits before deciding no answer is coming.
const NO_ANSWER_WAIT: Duration = Duration::from_millis(300);
const START_TIMEOUT: Duration = Duration::from_secs(10);
const STOP_TIMEOUT: Duration = Duration::from_secs(5);

/// Kills the child if the test ends (or panics) before it exited.
struct ChildGuard(Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// A `shoal` command with no `SHOAL_*` variables leaking in from the environment.
fn shoal() -> Command {
    let mut cmd = Command::new(SHOAL);
    for var in [
        "SHOAL_SHARDS",
        "SHOAL_UDP_PORT_BASE",
        "SHOAL_BIND",
        "SHOAL_ANNOUNCE",
        "SHOAL_PREFER_FAMILY",
        "SHOAL_MAX_DATAGRAMS_PER_TICK",
        "SHOAL_MAX_PEERS_PER_SHARD",
        "SHOAL_GRPC_ADDR",
        "SHOAL_MAX_ROOMS",
        "SHOAL_MAX_PARTICIPANTS_PER_ROOM",
        "SHOAL_ROOM_EMPTY_TIMEOUT",
        "SHOAL_HTTP_ADDR",
        "SHOAL_CONFIG",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

/// Starts `shoal` with `args`, and returns it, its stdout lines as they come, and the
/// `shards` addresses it printed.
fn start(args: &[&str], shards: usize) -> (ChildGuard, mpsc::Receiver<String>, Vec<SocketAddr>) {
    let mut child = shoal()
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn shoal");
    let stdout = child.stdout.take().expect("piped stdout");
    let guard = ChildGuard(child);
    let (lines_tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + START_TIMEOUT;
    let mut addrs = Vec::new();
    while addrs.len() < shards {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = lines
            .recv_timeout(left)
            .expect("shoal printed its addresses");
        // "shoal: shard 0 udp 127.0.0.1:7100", one address per socket: the first.
        let prefix = format!("shoal: shard {} udp ", addrs.len());
        let addr = line
            .strip_prefix(&prefix)
            .and_then(|a| a.split_whitespace().next())
            .unwrap_or_else(|| panic!("unexpected line {line:?}"));
        addrs.push(addr.parse().expect("a socket address"));
    }
    (guard, lines, addrs)
}

/// An ICE connectivity check from the controlling client (RFC 8445 §7.1.2), signed
/// with `key`.
fn binding_request(tid: TransactionId, username: &str, key: &[u8]) -> Bytes {
    let mut buf = BytesMut::new();
    let mut w = StunWriter::new(&mut buf, Class::Request, stun::BINDING, tid);
    w.username(username.as_bytes())
        .priority(0x6E00_01FF)
        .ice_controlling(0x0123_4567_89AB_CDEF)
        .use_candidate()
        .message_integrity(key)
        .fingerprint();
    w.finish();
    buf.freeze()
}

fn client_username() -> String {
    format!("{SERVER_UFRAG}:{CLIENT_UFRAG}")
}

/// Sends `request` to `to` and waits up to [`NO_ANSWER_WAIT`] for one datagram.
fn exchange(socket: &UdpSocket, to: SocketAddr, request: &[u8]) -> Option<Bytes> {
    socket.send_to(request, to).expect("send");
    let mut buf = [0u8; 2048];
    match socket.recv_from(&mut buf) {
        Ok((len, from)) => {
            assert_eq!(from, to, "answers come from the shard's socket");
            Some(Bytes::copy_from_slice(&buf[..len]))
        }
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            None
        }
        Err(e) => panic!("recv: {e}"),
    }
}

/// Sends a valid check and asserts the success response RFC 8445 §7.3 asks for.
fn assert_answered(socket: &UdpSocket, shard: SocketAddr, tid: TransactionId) {
    let request = binding_request(tid, &client_username(), SERVER_PWD.as_bytes());
    let response = exchange(socket, shard, &request).expect("a valid check is answered");
    // `parse` verifies FINGERPRINT when present.
    let msg = StunMessage::parse(response).expect("a well-formed response");
    assert_eq!(msg.class(), Class::SuccessResponse);
    assert_eq!(msg.method(), stun::BINDING);
    assert_eq!(msg.transaction_id(), tid);
    assert_eq!(msg.xor_mapped_address(), Some(socket.local_addr().unwrap()));
    msg.verify_integrity(SERVER_PWD.as_bytes())
        .expect("signed with the shard's password");
    assert!(msg.has_fingerprint());
}

fn assert_unanswered(socket: &UdpSocket, shard: SocketAddr, datagram: &[u8], what: &str) {
    if let Some(answer) = exchange(socket, shard, datagram) {
        panic!("{what} was answered with {answer:?}");
    }
}

/// Sends SIGINT and waits for a clean exit.
fn interrupt_and_wait(child: &mut ChildGuard) -> std::process::ExitStatus {
    let status = Command::new("kill")
        .args(["-INT", &child.0.id().to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -INT failed");
    let deadline = Instant::now() + STOP_TIMEOUT;
    loop {
        if let Some(status) = child.0.try_wait().expect("try_wait") {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "shoal did not stop within {STOP_TIMEOUT:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn udp_stun_binding_real_socket() {
    let peer = format!("{SERVER_UFRAG}:{SERVER_PWD}:{CLIENT_UFRAG}:{CLIENT_PWD}");
    let args = [
        "--shards",
        "1",
        "--udp-port-base",
        "0",
        "--grpc-addr",
        "127.0.0.1:0",
        "--http-addr",
        "127.0.0.1:0",
        "--static-peer",
        &peer,
    ];
    let (mut child, lines, addrs) = start(&args, 1);
    let shard = addrs[0];
    assert!(shard.ip().is_loopback() && shard.port() != 0, "{shard}");

    // The control plane's URL follows the shards'; it accepts connections.
    let grpc = loop {
        let line = lines
            .recv_timeout(START_TIMEOUT)
            .expect("shoal printed its gRPC address");
        if let Some(url) = line.strip_prefix("shoal: grpc http://") {
            break url.parse::<SocketAddr>().expect("a socket address");
        }
    };
    assert!(grpc.ip().is_loopback() && grpc.port() != 0, "{grpc}");
    std::net::TcpStream::connect(grpc).expect("gRPC accepts connections");

    let socket = UdpSocket::bind("127.0.0.1:0").expect("bind client socket");
    socket.set_read_timeout(Some(NO_ANSWER_WAIT)).unwrap();

    // client -> Binding request (USE-CANDIDATE) -> shard; shard -> success -> client.
    assert_answered(&socket, shard, TransactionId([1; 12]));

    // Signed with the wrong key: MESSAGE-INTEGRITY fails, the check is dropped.
    let forged = binding_request(
        TransactionId([2; 12]),
        &client_username(),
        b"not-the-password-at-all",
    );
    assert_unanswered(&socket, shard, &forged, "a check with bad integrity");

    // A ufrag no peer of the shard has.
    let stranger = binding_request(
        TransactionId([3; 12]),
        &format!("nobody:{CLIENT_UFRAG}"),
        SERVER_PWD.as_bytes(),
    );
    assert_unanswered(&socket, shard, &stranger, "a check for an unknown ufrag");

    // Not STUN, and STUN-looking junk.
    assert_unanswered(&socket, shard, &[0xFF; 7], "garbage");
    assert_unanswered(
        &socket,
        shard,
        &[0x00, 0x01, 0x00, 0x50, 0x21, 0x12],
        "a truncated header",
    );
    assert_unanswered(&socket, shard, &[], "an empty datagram");

    // shoal keeps serving after all that.
    assert_answered(&socket, shard, TransactionId([4; 12]));

    let status = interrupt_and_wait(&mut child);
    assert!(status.success(), "shoal exited with {status}");
    // Everything it printed, up to its stdout's end (the reader thread may still be
    // forwarding the last lines when the process has exited).
    let rest: Vec<String> = lines.iter().collect();
    assert!(
        rest.iter().any(|l| l == "shoal: stopped"),
        "stdout after start: {rest:?}"
    );
}

/// Bound to 0.0.0.0 and `::`, a shard has a socket per family on one port, answers
/// checks on both, and answers each from the address it was sent to (127.0.0.2 is
/// local but not the address the kernel would pick for 127.0.0.1); it announces
/// neither wildcard.
#[test]
fn udp_stun_binding_on_both_families_of_a_wildcard_bind() {
    let peer = format!("{SERVER_UFRAG}:{SERVER_PWD}:{CLIENT_UFRAG}:{CLIENT_PWD}");
    let args = [
        "--shards",
        "1",
        "--bind",
        "0.0.0.0",
        "--bind",
        "::",
        "--udp-port-base",
        "0",
        "--grpc-addr",
        "off",
        "--http-addr",
        "off",
        "--static-peer",
        &peer,
    ];
    let (mut child, lines, addrs) = start(&args, 1);
    let port = addrs[0].port();
    assert!(addrs[0].ip().is_unspecified() && port != 0, "{}", addrs[0]);
    let announced = lines
        .recv_timeout(START_TIMEOUT)
        .expect("shoal printed what it announces");
    let list = announced
        .strip_prefix("shoal: shard 0 announces ")
        .unwrap_or_else(|| panic!("unexpected line {announced:?}"));
    let list: Vec<SocketAddr> = list
        .split_whitespace()
        .map(|a| a.parse().expect("a socket address"))
        .collect();
    assert!(!list.is_empty());
    for a in &list {
        assert!(!a.ip().is_unspecified() && a.port() == port, "{announced}");
    }

    for (n, (client, shard)) in [
        ("127.0.0.1:0", SocketAddr::from(([127, 0, 0, 2], port))),
        ("127.0.0.1:0", SocketAddr::from(([127, 0, 0, 1], port))),
        (
            "[::1]:0",
            SocketAddr::new("::1".parse().expect("::1"), port),
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let socket = UdpSocket::bind(client).expect("bind client socket");
        socket.set_read_timeout(Some(START_TIMEOUT)).unwrap();
        // `exchange` checks that the answer comes from `shard` itself.
        assert_answered(&socket, shard, TransactionId([5 + n as u8; 12]));
    }
    let status = interrupt_and_wait(&mut child);
    assert!(status.success(), "shoal exited with {status}");
}

#[test]
fn help_documents_every_flag() {
    let out = shoal().arg("--help").output().expect("run shoal --help");
    assert!(
        out.status.success(),
        "shoal --help exited with {}",
        out.status
    );
    let help = String::from_utf8(out.stdout).expect("utf-8 help");
    for flag in [
        "--shards",
        "--udp-port-base",
        "--bind",
        "--announce",
        "--prefer-family",
        "--max-datagrams-per-tick",
        "--max-peers-per-shard",
        "--static-peer",
        "--grpc-addr",
        "--max-rooms",
        "--max-participants-per-room",
        "--room-empty-timeout",
        "--tcp-port-base",
        "--max-tcp-connections",
        "--tcp-buffer-bytes",
        "--tcp-auth-timeout",
        "--ice-server",
        "--turn-secret",
        "--turn-ttl",
        "--turn-username",
        "--turn-password",
        "SHOAL_SHARDS",
        "SHOAL_UDP_PORT_BASE",
        "SHOAL_BIND",
        "SHOAL_ANNOUNCE",
        "SHOAL_GRPC_ADDR",
        "SHOAL_MAX_ROOMS",
        "SHOAL_ICE_SERVER",
        "SHOAL_TURN_SECRET",
    ] {
        assert!(
            help.contains(flag),
            "--help does not mention {flag}:\n{help}"
        );
    }
}
