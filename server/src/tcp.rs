//! ICE over TCP, passive side (RFC 6544), for clients whose network blocks UDP.
//!
//! Each shard listens on a TCP port of its own (`--tcp-port-base` + its index) and
//! answers with a `tcptype passive` candidate per announced address, ranked below
//! every UDP one (RFC 6544 §4.2). A client's active candidate connects; the stream
//! carries RFC 4571 frames (a 16-bit length, then one packet), each of which the
//! driver hands the shard as a datagram of the path (connection's local address,
//! client's address). STUN, DTLS, SRTP/SRTCP and SCTP then flow through the same
//! passes as over UDP: the connection becomes the path of the peer whose ufrag its
//! checks name, and the shard's replies on that path are framed back onto it.
//!
//! Bounded, as everything a stranger can open: at most `--max-tcp-connections` per
//! shard (more are closed at once); at most `--tcp-buffer-bytes` queued per
//! connection (what does not fit is dropped, as UDP would); a frame longer than
//! [`MAX_FRAME`] closes the connection; the first frame must be a STUN message (the
//! client's connectivity check), and a connection whose path no peer has validated
//! within `--tcp-auth-timeout` is closed. Each closure is counted by reason.

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use mio::net::TcpStream;

/// Default `--max-tcp-connections` (per shard).
pub const DEFAULT_MAX_CONNECTIONS: usize = 1_000;
/// Default `--tcp-buffer-bytes` (per connection).
pub const DEFAULT_BUFFER_BYTES: usize = 256 * 1024;
/// Default `--tcp-auth-timeout`, in seconds.
pub const DEFAULT_AUTH_TIMEOUT_SECS: u64 = 10;
/// The longest frame shoal takes: more than any packet it would take over UDP
/// (a jumbo-frame datagram) and far less than RFC 4571's 65 535.
pub const MAX_FRAME: usize = 9_000;
/// Bytes read from a connection per call.
const READ_CHUNK: usize = 16 * 1024;

/// The TCP settings of a shard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpSettings {
    /// Connections a shard holds at most.
    pub max_connections: usize,
    /// Bytes queued for sending per connection at most.
    pub max_buffered: usize,
    /// How long a connection may go without a validated path.
    pub auth_timeout: Duration,
}

impl Default for TcpSettings {
    fn default() -> TcpSettings {
        TcpSettings {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_buffered: DEFAULT_BUFFER_BYTES,
            auth_timeout: Duration::from_secs(DEFAULT_AUTH_TIMEOUT_SECS),
        }
    }
}

/// Why a connection was closed by shoal, or refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Closed {
    /// The client closed it, or it failed.
    ByPeer,
    /// A frame over [`MAX_FRAME`].
    Oversized,
    /// The first frame was not STUN.
    Garbage,
    /// No path validated within the auth timeout.
    Unauthenticated,
    /// Its path is no longer any peer's (the peer left).
    PeerGone,
}

/// Why framing failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameError {
    /// A frame longer than [`MAX_FRAME`].
    Oversized,
    /// A first frame that is not STUN.
    Garbage,
}

/// Whether `frame` looks like a STUN message (RFC 8489 §5: the two top bits zero,
/// the magic cookie at bytes 4..8, a length that is a multiple of 4 and fits).
fn is_stun(frame: &[u8]) -> bool {
    frame.len() >= 20
        && frame[0] & 0xC0 == 0
        && frame[4..8] == [0x21, 0x12, 0xA4, 0x42]
        && usize::from(u16::from_be_bytes([frame[2], frame[3]])) + 20 == frame.len()
}

/// RFC 4571 framing of one direction of a connection.
#[derive(Debug, Default)]
pub struct Framing {
    buf: Vec<u8>,
    frames: u64,
}

impl Framing {
    /// Takes `bytes` read from the stream and appends each complete frame to `out`;
    /// a partial frame stays buffered (at most [`MAX_FRAME`] + 2 bytes).
    pub fn push(&mut self, bytes: &[u8], out: &mut Vec<Bytes>) -> Result<(), FrameError> {
        self.buf.extend_from_slice(bytes);
        let mut at = 0;
        while self.buf.len() - at >= 2 {
            let len = usize::from(u16::from_be_bytes([self.buf[at], self.buf[at + 1]]));
            if len > MAX_FRAME {
                return Err(FrameError::Oversized);
            }
            if self.buf.len() - at < 2 + len {
                break;
            }
            let frame = &self.buf[at + 2..at + 2 + len];
            if self.frames == 0 && !is_stun(frame) {
                return Err(FrameError::Garbage);
            }
            self.frames += 1;
            out.push(Bytes::copy_from_slice(frame));
            at += 2 + len;
        }
        self.buf.drain(..at);
        Ok(())
    }

    /// Frames taken so far.
    pub fn frames(&self) -> u64 {
        self.frames
    }
}

/// One accepted connection.
#[derive(Debug)]
pub struct Connection {
    /// The stream.
    pub stream: TcpStream,
    /// Its local address (concrete even under a wildcard listener).
    pub local: SocketAddr,
    /// The client's address.
    pub remote: SocketAddr,
    /// When it was accepted.
    pub opened: Instant,
    /// Whether a peer has validated its path.
    pub authenticated: bool,
    rx: Framing,
    tx: Vec<u8>,
    tx_sent: usize,
}

impl Connection {
    /// A connection just accepted.
    pub fn new(stream: TcpStream, local: SocketAddr, remote: SocketAddr, now: Instant) -> Self {
        Connection {
            stream,
            local,
            remote,
            opened: now,
            authenticated: false,
            rx: Framing::default(),
            tx: Vec::new(),
            tx_sent: 0,
        }
    }

    /// Reads what the stream has (until it would block) and appends its frames to
    /// `out`; `Err` when the connection must close.
    pub fn read(&mut self, out: &mut Vec<Bytes>) -> Result<(), Closed> {
        let mut chunk = [0u8; READ_CHUNK];
        loop {
            match self.stream.read(&mut chunk) {
                Ok(0) => return Err(Closed::ByPeer),
                Ok(n) => self.rx.push(&chunk[..n], out).map_err(|e| match e {
                    FrameError::Oversized => Closed::Oversized,
                    FrameError::Garbage => Closed::Garbage,
                })?,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Err(Closed::ByPeer),
            }
        }
    }

    /// Queues `packet` as a frame; false (and nothing queued) when it would take the
    /// queue past `max_buffered` or is too long for a frame.
    pub fn queue(&mut self, packet: &[u8], max_buffered: usize) -> bool {
        let Ok(len) = u16::try_from(packet.len()) else {
            return false;
        };
        if self.tx.len() - self.tx_sent + 2 + packet.len() > max_buffered {
            return false;
        }
        self.tx.extend_from_slice(&len.to_be_bytes());
        self.tx.extend_from_slice(packet);
        true
    }

    /// Writes what is queued until done or the stream would block; `Err` when the
    /// connection failed.
    pub fn write(&mut self) -> Result<(), Closed> {
        while self.tx_sent < self.tx.len() {
            match self.stream.write(&self.tx[self.tx_sent..]) {
                Ok(0) => return Err(Closed::ByPeer),
                Ok(n) => self.tx_sent += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Err(Closed::ByPeer),
            }
        }
        if self.tx_sent == self.tx.len() {
            self.tx.clear();
            self.tx_sent = 0;
        } else if self.tx_sent > self.tx.len() / 2 {
            self.tx.drain(..self.tx_sent);
            self.tx_sent = 0;
        }
        Ok(())
    }

    /// Whether bytes wait to be written.
    pub fn has_pending(&self) -> bool {
        self.tx_sent < self.tx.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A STUN Binding request header with `attrs` bytes of attributes.
    fn stun(attrs: usize) -> Vec<u8> {
        let mut m = vec![0x00, 0x01];
        m.extend_from_slice(&(attrs as u16).to_be_bytes());
        m.extend_from_slice(&[0x21, 0x12, 0xA4, 0x42]);
        m.extend_from_slice(&[7; 12]);
        m.extend(std::iter::repeat_n(0u8, attrs));
        m
    }

    fn framed(packet: &[u8]) -> Vec<u8> {
        let mut f = (packet.len() as u16).to_be_bytes().to_vec();
        f.extend_from_slice(packet);
        f
    }

    #[test]
    fn frames_split_and_joined_anywhere_come_out_whole() {
        let mut stream = framed(&stun(8));
        stream.extend(framed(b"\x16\xfe\xfd dtls record"));
        stream.extend(framed(&[0x80; 1200]));
        for cut in 0..stream.len() {
            let mut f = Framing::default();
            let mut out = Vec::new();
            f.push(&stream[..cut], &mut out).unwrap();
            f.push(&stream[cut..], &mut out).unwrap();
            assert_eq!(out.len(), 3, "cut at {cut}");
            assert_eq!(out[0].len(), 28);
            assert_eq!(&out[1][..], b"\x16\xfe\xfd dtls record");
            assert_eq!(out[2].len(), 1200);
            assert_eq!(f.frames(), 3);
        }
    }

    #[test]
    fn garbage_and_oversized_frames_are_refused() {
        let mut out = Vec::new();
        // An HTTP request reads as a length far over the limit.
        let http = b"GET / HTTP/1.1\r\n\r\n";
        assert_eq!(
            Framing::default().push(http, &mut out),
            Err(FrameError::Oversized)
        );
        // Not STUN first: a DTLS record, a STUN header with a bad length.
        let dtls = framed(b"\x16\xfe\xfd\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0");
        assert_eq!(
            Framing::default().push(&dtls, &mut out),
            Err(FrameError::Garbage)
        );
        let mut bad_len = stun(8);
        bad_len[3] = 12;
        assert_eq!(
            Framing::default().push(&framed(&bad_len), &mut out),
            Err(FrameError::Garbage)
        );
        let mut f = Framing::default();
        let len = (MAX_FRAME as u16 + 1).to_be_bytes();
        assert_eq!(f.push(&len, &mut out), Err(FrameError::Oversized));
        assert!(out.is_empty());
        // After a STUN first frame, anything goes.
        let mut f = Framing::default();
        f.push(&framed(&stun(0)), &mut out).unwrap();
        f.push(&framed(b"anything"), &mut out).unwrap();
        assert_eq!(out.len(), 2);
    }
}
