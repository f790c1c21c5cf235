//! A minimal HTTP/1.1 client over a plain TCP socket, so tests can send exactly the
//! bytes they mean (wrong content types, oversized bodies), and the offers captured
//! from real browsers.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::Duration;

/// How long one request may take.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// A response: status, headers (names in lower case) and body.
#[derive(Debug)]
pub struct Reply {
    /// The status code.
    pub status: u16,
    /// `(name, value)`, names lower-cased.
    pub headers: Vec<(String, String)>,
    /// The body as text.
    pub body: String,
}

impl Reply {
    /// The first header of that (lower-case) name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Sends one request (`Connection: close`) and reads the whole response.
pub fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    content_type: Option<&str>,
    body: &[u8],
) -> Reply {
    let headers: Vec<(&str, &str)> = content_type
        .map(|t| ("Content-Type", t))
        .into_iter()
        .collect();
    request_with_headers(addr, method, path, &headers, body)
}

/// [`request`] with any request `headers` (`If-Match`, say).
pub fn request_with_headers(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Reply {
    let stream = TcpStream::connect_timeout(&addr, REQUEST_TIMEOUT).expect("connect");
    exchange(stream, addr, method, path, headers, body)
}

/// [`request_with_headers`] from the local address `source` (a loopback address
/// other than 127.0.0.1 stands for another client).
pub fn request_from(
    source: IpAddr,
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Reply {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        None,
    )
    .expect("a socket");
    socket
        .bind(&SocketAddr::new(source, 0).into())
        .expect("bind the source address");
    socket
        .connect_timeout(&addr.into(), REQUEST_TIMEOUT)
        .expect("connect");
    exchange(socket.into(), addr, method, path, headers, body)
}

fn exchange(
    mut stream: TcpStream,
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Reply {
    stream.set_read_timeout(Some(REQUEST_TIMEOUT)).unwrap();
    stream.set_write_timeout(Some(REQUEST_TIMEOUT)).unwrap();
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).expect("write head");
    // The server may answer (413) and close before reading a large body.
    let _ = stream.write_all(body);
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    parse(&raw)
}

fn parse(raw: &[u8]) -> Reply {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n").expect("a response head");
    let mut lines = head.split("\r\n");
    let status_line = lines.next().expect("a status line");
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let chunked = headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.contains("chunked"));
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_owned()
    };
    Reply {
        status,
        headers,
        body,
    }
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// A real offer captured from a browser (`components/tests/fixtures/sdp/`).
pub fn fixture_offer(name: &str) -> String {
    let path = format!(
        "{}/../components/tests/fixtures/sdp/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {path}: {e}"))
}

/// POSTs `offer` as `application/sdp` to `path`.
pub fn post_offer(addr: SocketAddr, path: &str, offer: &str) -> Reply {
    request(
        addr,
        "POST",
        path,
        Some("application/sdp"),
        offer.as_bytes(),
    )
}

/// [`post_offer`] from the local address `source` (see [`request_from`]).
pub fn post_offer_from(source: IpAddr, addr: SocketAddr, path: &str, offer: &str) -> Reply {
    request_from(
        source,
        addr,
        "POST",
        path,
        &[("Content-Type", "application/sdp")],
        offer.as_bytes(),
    )
}
