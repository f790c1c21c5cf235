//! The receive buffer the driver and the endpoint runner share.

use std::io;
use std::net::SocketAddr;

use bytes::{Bytes, BytesMut};
use mio::net::UdpSocket;

/// The largest UDP payload.
const MAX_DATAGRAM_LEN: usize = 65_535;
/// One receive chunk: many datagrams are split off it before it is replaced.
const RECV_CHUNK_LEN: usize = 1 << 20;

/// Receives datagrams in place into a large zeroed chunk and splits each off as its
/// own `Bytes`: no allocation or copy per datagram. A chunk is reused once every
/// datagram split from it is dropped; a consumer that keeps a payload for long (a
/// packet cache) pins its chunk and should copy what it keeps.
#[derive(Default)]
pub(crate) struct RecvBuffer {
    chunk: BytesMut,
}

impl RecvBuffer {
    /// Receives one datagram from `socket`.
    pub(crate) fn recv_from(&mut self, socket: &UdpSocket) -> io::Result<(Bytes, SocketAddr)> {
        if self.chunk.len() < MAX_DATAGRAM_LEN {
            // `reserve` takes the whole old allocation back when nothing else holds a
            // part of it, else allocates; `resize` initialises it, as `recv_from` needs.
            self.chunk.clear();
            self.chunk.reserve(RECV_CHUNK_LEN);
            self.chunk.resize(RECV_CHUNK_LEN, 0);
        }
        let (len, from) = socket.recv_from(&mut self.chunk)?;
        Ok((self.chunk.split_to(len).freeze(), from))
    }
}
