//! Batched UDP I/O for the driver and the endpoint runner: many datagrams per system
//! call in both directions.
//!
//! One datagram per `recvfrom`/`sendto` made the kernel most of shoal's CPU on a busy
//! path (bench/README.md: about 60 % at 1 KiB messages). This module uses, through
//! `quinn-udp` (the system calls and control messages are its `unsafe`, not ours):
//!
//! - **receive**: `recvmmsg` into up to [`RECV_SLOTS`] buffers per call, with UDP GRO
//!   on where the kernel has it (Linux ≥ 5.0), so that a burst from one sender can
//!   arrive as one buffer of equal-sized datagrams, split here at the reported stride;
//! - **send**: UDP GSO (Linux ≥ 4.18): a run of datagrams to one destination, all the
//!   same size but the last, goes out as one `sendmsg` that the kernel (or the NIC)
//!   segments. Elsewhere each datagram is sent alone, and a run the kernel refuses
//!   to segment (EIO/EINVAL from a device without the offload) goes again datagram by
//!   datagram.
//!
//! An SFU's sends are mostly the other case: one packet to each of many subscribers,
//! every datagram alone. Those, from a socket bound to one address, go out up to
//! [`SEND_SLOTS`] at a time in one `sendmmsg` (through `rustix`, whose `unsafe` it is),
//! which the kernel treats as that many `sendmsg` calls without the system call's
//! entry, exit and file lookup each time. A wildcard socket's datagrams name their
//! source in a control message that `rustix` cannot build, so they go one `sendmsg`
//! each through `quinn-udp`, as GSO runs do.
//!
//! `quinn-udp` also sets the socket up its way: don't-fragment on (IPv4
//! `IP_PMTUDISC_PROBE`, IPv6 `IPV6_DONTFRAG`), so a datagram larger than the path MTU
//! is lost rather than fragmented (shoal's 1 200-byte datagrams fit any real path),
//! and `IP_PKTINFO` / `IPV6_RECVPKTINFO`, TOS and receive timestamps
//! (`SO_TIMESTAMPNS`, which [`UdpIo::recv_stamped`] hands on) on; a socket that
//! refuses packet info fails [`UdpIo::new`], and the shard with it.
//!
//! Received payloads stay zero-copy where that is cheap: the first buffer of every
//! call lies inside the current receive chunk, a large buffer that many datagrams are
//! split off as `Bytes` before it is replaced, so a GRO burst or a lone datagram is split off as `Bytes` without a copy. The other
//! buffers are a fixed scratch area (each must hold a whole GRO burst, 64 KiB, or the
//! kernel truncates it), copied into the chunk after the call: a copy of what arrived,
//! never of the empty room around it. A chunk is reused once every datagram split from
//! it is dropped; a consumer that keeps a payload for long (a packet cache) pins its
//! chunk and should copy what it keeps.

use std::io::{self, IoSliceMut};
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use std::os::fd::AsFd;

use quinn_udp::{RecvMeta, Transmit, UdpSocketState};
use shoal_components::net::Datagram;
use shoal_components::time::Time;

/// Buffers offered to one `recvmmsg`.
pub const RECV_SLOTS: usize = 4;
/// Datagrams one `sendmmsg` carries at most (the kernel takes up to 1 024,
/// `UIO_MAXIOV`; an egress pass rarely has more to send alone than this).
pub const SEND_SLOTS: usize = 64;
/// One receive buffer: the largest UDP payload, or a whole GRO burst (the kernel
/// coalesces at most 64 KiB).
const SLOT_LEN: usize = 1 << 16;
/// One receive chunk, of which many datagrams are split before it is replaced. A
/// chunk that datagrams of the last ticks still hold is replaced by a new one, so a
/// socket can have two or three alive: 512 KiB rather than 1 MiB took 3.5 MB off the
/// flow benchmark's peak with 2 pairs (4 sockets), for the same CPU.
const RECV_CHUNK_LEN: usize = 1 << 19;
/// The largest UDP payload over IPv4 (65 535 − 20 − 8), and so the most one GSO
/// `sendmsg` may carry.
const MAX_GSO_BYTES: usize = 65_507;
/// Socket buffer sizes asked for, best effort (the kernel caps them at
/// `net.core.rmem_max` / `wmem_max`): a GSO sender delivers 64 KiB at a time, and the
/// default ~208 KiB queue holds only three such bursts.
const SOCKET_BUFFER_BYTES: usize = 4 << 20;

/// What [`UdpIo::send`] did with a flush's datagrams.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SendOutcome {
    /// Datagrams handed to the kernel.
    pub sent: u64,
    /// Datagrams dropped because the socket's send buffer was full (congestion).
    pub would_block: u64,
    /// Datagrams dropped on any other error.
    pub errors: u64,
    /// System calls made.
    pub calls: u64,
}

impl SendOutcome {
    /// Counts `n` datagrams a send failed with `e` on.
    fn failed(&mut self, e: &io::Error, n: u64) {
        if e.kind() == io::ErrorKind::WouldBlock {
            self.would_block += n;
        } else {
            self.errors += n;
        }
    }
}

/// The batched I/O state of one socket: its offload capabilities, the receive chunk
/// and scratch buffers, and the send-side concatenation buffer. One per socket, owned
/// by the thread that drives it.
pub struct UdpIo {
    state: UdpSocketState,
    /// The socket is bound to 0.0.0.0 or `::`: received datagrams take their local
    /// address from the packet info, and sends name their source address.
    wildcard: bool,
    /// For a wildcard socket, the host's addresses a datagram may be addressed to
    /// (empty: any; see [`destination_allowed`]). One sent to another (a broadcast or
    /// multicast address, one the host no longer has) is dropped: a reply could not
    /// name it as its source.
    destinations: Vec<IpAddr>,
    /// Datagrams dropped for their destination (see `destinations`).
    misaddressed: u64,
    chunk: BytesMut,
    scratch: Vec<u8>,
    meta: [RecvMeta; RECV_SLOTS],
    gso: Vec<u8>,
    /// Where [`UdpIo::recv`] puts the receive times no caller asked for.
    unused_stamps: Vec<Option<Duration>>,
}

/// The oldest a datagram's kernel receive time is taken as: older (a wall clock
/// step, a stalled thread) counts as this old.
pub const MAX_RECEIVE_AGE: Duration = Duration::from_secs(1);

/// Maps the kernel receive stamps of [`UdpIo::recv_stamped`] (wall time) onto a
/// clock that reads `now` at this moment: each arrival is as long before `now` as
/// the datagram waited to be read, at most [`MAX_RECEIVE_AGE`]; no stamp, `now`.
pub fn arrival_clock(now: Time) -> impl Fn(Option<Duration>) -> Time {
    let wall = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO);
    move |stamp| {
        let age = stamp.map_or(Duration::ZERO, |at| wall.saturating_sub(at));
        now - age.min(MAX_RECEIVE_AGE)
    }
}

impl UdpIo {
    /// Sets `socket` up for batched I/O (GRO on where supported, larger socket
    /// buffers where allowed, non-blocking) and returns its state. Any UDP socket
    /// will do: mio's, or std's (set it blocking again afterwards to block in
    /// [`UdpIo::recv`]).
    ///
    /// # Errors
    /// If the socket's options cannot be read or set as `quinn-udp` requires.
    pub fn new(socket: &impl AsFd) -> io::Result<UdpIo> {
        let state = UdpSocketState::new(socket.into())?;
        let wildcard = socket2::SockRef::from(socket)
            .local_addr()?
            .as_socket()
            .is_some_and(|a| a.ip().is_unspecified());
        // Best effort: a smaller buffer only means drops under bursts, which the
        // protocols above recover from.
        let _ = state.set_recv_buffer_size(socket.into(), SOCKET_BUFFER_BYTES);
        let _ = state.set_send_buffer_size(socket.into(), SOCKET_BUFFER_BYTES);
        Ok(UdpIo {
            state,
            wildcard,
            destinations: Vec::new(),
            misaddressed: 0,
            chunk: BytesMut::new(),
            // Zeroed pages are mapped lazily: only what the kernel writes is resident.
            scratch: vec![0; (RECV_SLOTS - 1) * SLOT_LEN],
            meta: [RecvMeta::default(); RECV_SLOTS],
            gso: Vec::new(),
            unused_stamps: Vec::new(),
        })
    }

    /// Limits what a wildcard socket accepts to datagrams addressed to one of
    /// `addresses` (the host's interface addresses), as [`destination_allowed`] says.
    /// No effect on a socket bound to one address, which the kernel filters.
    pub fn accept_destinations(&mut self, addresses: &[IpAddr]) {
        if self.wildcard {
            self.destinations = addresses.iter().map(|a| a.to_canonical()).collect();
        }
    }

    /// Datagrams a wildcard socket dropped because they were addressed to none of
    /// the host's addresses ([`UdpIo::accept_destinations`]).
    pub fn misaddressed(&self) -> u64 {
        self.misaddressed
    }

    /// Datagrams the kernel may take in one `sendmsg` (1 without GSO).
    pub fn max_gso_segments(&self) -> usize {
        self.state.max_gso_segments()
    }

    /// Whether the kernel may coalesce received datagrams (GRO is on).
    pub fn gro(&self) -> bool {
        self.state.gro_segments() > 1
    }

    /// One `recvmmsg`: appends what arrived to `out`, one datagram per UDP datagram
    /// (GRO bursts split at their stride), and returns how many. Each is addressed to
    /// `bound`, the socket's address, or for a socket bound to 0.0.0.0 or `::` to the
    /// destination address the packet info reports (the interface address the client
    /// sent to) on `bound`'s port.
    ///
    /// # Errors
    /// `WouldBlock` when nothing was waiting; any other receive error (the socket's
    /// queued ICMP error, say, which the call consumes).
    pub fn recv(
        &mut self,
        socket: &impl AsFd,
        bound: SocketAddr,
        out: &mut Vec<Datagram>,
    ) -> io::Result<usize> {
        let mut stamps = std::mem::take(&mut self.unused_stamps);
        let result = self.recv_stamped(socket, bound, out, &mut stamps);
        stamps.clear();
        self.unused_stamps = stamps;
        result
    }

    /// [`UdpIo::recv`], and into `stamps` one entry per datagram appended: when the
    /// kernel received it (`SO_TIMESTAMPNS`, as time since the Unix epoch; `None`
    /// where the kernel gave none). A GRO burst's datagrams share their burst's.
    ///
    /// # Errors
    /// As [`UdpIo::recv`].
    pub fn recv_stamped(
        &mut self,
        socket: &impl AsFd,
        bound: SocketAddr,
        out: &mut Vec<Datagram>,
        stamps: &mut Vec<Option<Duration>>,
    ) -> io::Result<usize> {
        if self.chunk.len() < SLOT_LEN {
            refill(&mut self.chunk);
        }
        let count = {
            let mut slots = self.scratch.chunks_exact_mut(SLOT_LEN);
            let mut bufs: [IoSliceMut<'_>; RECV_SLOTS] =
                std::array::from_fn(|_| IoSliceMut::new(&mut []));
            bufs[0] = IoSliceMut::new(&mut self.chunk[..SLOT_LEN]);
            for buf in bufs.iter_mut().skip(1) {
                if let Some(slot) = slots.next() {
                    *buf = IoSliceMut::new(slot);
                }
            }
            self.state.recv(socket.into(), &mut bufs, &mut self.meta)?
        };
        let before = out.len();
        for (i, meta) in self.meta.iter().take(count).enumerate() {
            let len = meta.len.min(SLOT_LEN);
            let payload = if i == 0 {
                self.chunk.split_to(len).freeze()
            } else {
                if self.chunk.len() < len {
                    refill(&mut self.chunk);
                }
                let start = (i - 1) * SLOT_LEN;
                self.chunk[..len].copy_from_slice(&self.scratch[start..start + len]);
                self.chunk.split_to(len).freeze()
            };
            let local = match meta.dst_ip {
                Some(ip) if self.wildcard => {
                    let ip = ip.to_canonical();
                    if !destination_allowed(&self.destinations, ip) {
                        self.misaddressed += 1;
                        continue;
                    }
                    SocketAddr::new(ip, bound.port())
                }
                _ => bound,
            };
            let mut remote = meta.addr;
            // A dual-stack socket reports IPv4 peers as ::ffff:a.b.c.d; the shard sees
            // (and XOR-MAPPED-ADDRESS reports) their IPv4 form.
            remote.set_ip(remote.ip().to_canonical());
            split_stride(payload, meta.stride, |payload| {
                out.push(Datagram {
                    local,
                    remote,
                    payload,
                });
                stamps.push(meta.timestamp);
            });
        }
        Ok(out.len() - before)
    }

    /// Sends and drains `tx`: each run of datagrams from one local address to one
    /// destination whose sizes are equal but for a shorter last one goes out as one
    /// GSO `sendmsg`; the rest one call each. From a socket bound to 0.0.0.0 or `::`,
    /// each names its `local` address as its source (packet info), so a reply leaves
    /// from the address the client sent to. UDP may drop, so nothing is retried.
    pub fn send(&mut self, socket: &impl AsFd, tx: &mut Vec<Datagram>) -> SendOutcome {
        let mut outcome = SendOutcome::default();
        let mut i = 0;
        while i < tx.len() {
            // Read each time: a failed GSO send turns segmentation off for the socket.
            let max_segments = self.state.max_gso_segments().max(1);
            let run = gso_run(&tx[i..], max_segments);
            let first = &tx[i];
            let size = first.payload.len();
            let source = self.source(first.local);
            if run == 1 && source.is_none() {
                let alone = 1 + self.alone_run(&tx[i + 1..], max_segments);
                if alone > 1 {
                    outcome.calls += 1;
                    // The kernel stops at the first datagram it cannot take and
                    // reports what went before; the next call starts at that one, and
                    // fails on it alone.
                    i += match send_many(socket, &tx[i..i + alone]) {
                        Ok(sent) => {
                            outcome.sent += sent as u64;
                            sent.max(1)
                        }
                        Err(e) => {
                            outcome.failed(&e, 1);
                            1
                        }
                    };
                    continue;
                }
            }
            let result = if run == 1 {
                transmit(&self.state, socket, first, &first.payload, None, source)
            } else {
                self.gso.clear();
                for d in &tx[i..i + run] {
                    self.gso.extend_from_slice(&d.payload);
                }
                transmit(&self.state, socket, first, &self.gso, Some(size), source)
            };
            outcome.calls += 1;
            let n = run as u64;
            match result {
                Ok(()) => outcome.sent += n,
                // A path or device that refuses segmentation offload (EIO, EINVAL):
                // the run goes again one datagram at a time.
                Err(e) if run > 1 && e.kind() != io::ErrorKind::WouldBlock => {
                    for d in &tx[i..i + run] {
                        outcome.calls += 1;
                        match transmit(&self.state, socket, d, &d.payload, None, source) {
                            Ok(()) => outcome.sent += 1,
                            Err(e) => outcome.failed(&e, 1),
                        }
                    }
                }
                Err(e) => outcome.failed(&e, n),
            }
            i += run;
        }
        tx.clear();
        outcome
    }
}

impl UdpIo {
    /// The source address a send from `local` names: none from a socket bound to one
    /// address (the kernel uses it), `local`'s from a wildcard socket unless that is
    /// unspecified too (then the kernel picks by route).
    fn source(&self, local: SocketAddr) -> Option<IpAddr> {
        (self.wildcard && !local.ip().is_unspecified()).then_some(local.ip())
    }

    /// How many datagrams from the start of `tx` go out alone (no GSO run, no source
    /// address to name), so that one `sendmmsg` may carry them after one that does:
    /// at most [`SEND_SLOTS`] − 1.
    fn alone_run(&self, tx: &[Datagram], max_segments: usize) -> usize {
        let mut n = 0;
        while n < tx.len().min(SEND_SLOTS - 1)
            && self.source(tx[n].local).is_none()
            && gso_run(&tx[n..], max_segments) == 1
        {
            n += 1;
        }
        n
    }
}

/// One `sendmmsg` of `tx`, each datagram to its own destination: how many the kernel
/// took (at least one), or the error of the first. Retried when interrupted.
fn send_many(socket: &impl AsFd, tx: &[Datagram]) -> io::Result<usize> {
    use rustix::net::addr::SocketAddrArg;
    use rustix::net::{MMsgHdr, SendAncillaryBuffer, SendFlags, SocketAddrAny};
    let addresses: Vec<SocketAddrAny> = tx.iter().map(|d| d.remote.as_any()).collect();
    let payloads: Vec<[io::IoSlice<'_>; 1]> =
        tx.iter().map(|d| [io::IoSlice::new(&d.payload)]).collect();
    let mut controls: Vec<SendAncillaryBuffer<'_, '_, '_>> =
        tx.iter().map(|_| SendAncillaryBuffer::default()).collect();
    let mut messages: Vec<MMsgHdr<'_>> = addresses
        .iter()
        .zip(&payloads)
        .zip(controls.iter_mut())
        .map(|((address, payload), control)| MMsgHdr::new_with_addr(address, payload, control))
        .collect();
    loop {
        match rustix::net::sendmmsg(socket, &mut messages, SendFlags::empty()) {
            Ok(sent) => return Ok(sent),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// One `sendmsg`: `contents` to `datagram`'s destination, as GSO segments of
/// `segment_size` when given, from `source` when given.
fn transmit(
    state: &UdpSocketState,
    socket: &impl AsFd,
    datagram: &Datagram,
    contents: &[u8],
    segment_size: Option<usize>,
    source: Option<IpAddr>,
) -> io::Result<()> {
    let transmit = Transmit {
        destination: datagram.remote,
        ecn: None,
        contents,
        segment_size,
        src_ip: source,
    };
    state.try_send(socket.into(), &transmit)
}

/// Whether a wildcard socket takes a datagram addressed to `ip`, given the host's
/// addresses `host`: any when `host` is empty; else one of them, or any loopback
/// address of a family whose loopback `host` holds (Linux delivers all of 127.0.0.0/8
/// locally, to the one address lo carries). Never a multicast or broadcast address,
/// which no reply can come from.
pub fn destination_allowed(host: &[IpAddr], ip: IpAddr) -> bool {
    if ip.is_multicast() || ip == IpAddr::from([255, 255, 255, 255]) {
        return false;
    }
    host.is_empty()
        || host.contains(&ip)
        || (ip.is_loopback()
            && host
                .iter()
                .any(|h| h.is_loopback() && h.is_ipv4() == ip.is_ipv4()))
}

/// Replaces the receive chunk: `reserve` takes the old allocation back when every
/// datagram split from it is gone, else allocates; `resize` initialises it, as a
/// receive buffer must be.
fn refill(chunk: &mut BytesMut) {
    chunk.clear();
    chunk.reserve(RECV_CHUNK_LEN);
    chunk.resize(RECV_CHUNK_LEN, 0);
}

/// Calls `each` with every datagram of a received buffer: the whole of it, or, for a
/// GRO burst (`stride` shorter than the buffer), consecutive `stride`-byte pieces, the
/// last possibly shorter.
fn split_stride(mut payload: Bytes, stride: usize, mut each: impl FnMut(Bytes)) {
    if stride == 0 || stride >= payload.len() {
        each(payload);
        return;
    }
    while payload.len() > stride {
        each(payload.split_to(stride));
    }
    each(payload);
}

/// How many datagrams from the start of `tx` one GSO send may carry: same source
/// and destination, the same size as the first (a shorter one ends the run), at most
/// `max_segments` and [`MAX_GSO_BYTES`] in all. Empty datagrams go alone.
fn gso_run(tx: &[Datagram], max_segments: usize) -> usize {
    let Some(first) = tx.first() else {
        return 0;
    };
    let size = first.payload.len();
    if size == 0 || max_segments <= 1 {
        return 1;
    }
    let mut run = 1;
    let mut total = size;
    for d in &tx[1..] {
        let len = d.payload.len();
        if run == max_segments
            || d.remote != first.remote
            || d.local != first.local
            || len == 0
            || len > size
            || total + len > MAX_GSO_BYTES
        {
            break;
        }
        run += 1;
        total += len;
        if len < size {
            break;
        }
    }
    run
}

#[cfg(test)]
mod tests {
    use super::*;
    use mio::net::UdpSocket;
    use std::net::UdpSocket as StdUdpSocket;
    use std::time::{Duration, Instant};

    fn datagram(remote: SocketAddr, len: usize, fill: u8) -> Datagram {
        Datagram {
            local: "127.0.0.1:1".parse().unwrap(),
            remote,
            payload: Bytes::from(vec![fill; len]),
        }
    }

    /// One datagram of `len` bytes to each of `plan`, in order, each filled with
    /// its index.
    fn numbered(plan: &[SocketAddr], len: usize) -> Vec<Datagram> {
        plan.iter()
            .enumerate()
            .map(|(i, &to)| datagram(to, len, i as u8))
            .collect()
    }

    #[test]
    fn gso_runs_follow_the_kernel_rules() {
        let a: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        let b: SocketAddr = "127.0.0.1:5001".parse().unwrap();
        let tx = vec![
            datagram(a, 1000, 0),
            datagram(a, 1000, 1),
            datagram(a, 900, 2), // shorter: ends the run, included
            datagram(a, 1000, 3),
            datagram(b, 1000, 4), // other destination
            datagram(b, 1200, 5), // longer than the first of its run
            datagram(b, 0, 6),
        ];
        assert_eq!(gso_run(&tx, 64), 3);
        assert_eq!(gso_run(&tx[3..], 64), 1);
        assert_eq!(gso_run(&tx[4..], 64), 1);
        assert_eq!(gso_run(&tx[5..], 64), 1);
        assert_eq!(gso_run(&tx[6..], 64), 1);
        assert_eq!(gso_run(&tx, 1), 1);
        assert_eq!(gso_run(&tx, 2), 2);
        let big: Vec<Datagram> = (0..100).map(|i| datagram(a, 1200, i)).collect();
        // 54 × 1200 = 64 800 fits in 65 507; 55 would not.
        assert_eq!(gso_run(&big, 64), 54);
        assert_eq!(gso_run(&[], 64), 0);
    }

    #[test]
    fn stride_splits_bursts() {
        let mut seen = Vec::new();
        split_stride(Bytes::from(vec![7u8; 2500]), 1000, |b| seen.push(b.len()));
        assert_eq!(seen, vec![1000, 1000, 500]);
        seen.clear();
        split_stride(Bytes::from(vec![7u8; 2000]), 1000, |b| seen.push(b.len()));
        assert_eq!(seen, vec![1000, 1000]);
        seen.clear();
        split_stride(Bytes::from(vec![7u8; 300]), 0, |b| seen.push(b.len()));
        assert_eq!(seen, vec![300]);
        seen.clear();
        split_stride(Bytes::new(), 1000, |b| seen.push(b.len()));
        assert_eq!(seen, vec![0]);
    }

    /// Datagrams to two destinations, interleaved: runs break at each change of
    /// destination, and each receiver gets its own datagrams in order.
    #[test]
    fn interleaved_destinations_keep_their_order() {
        let a = UdpSocket::from_std(StdUdpSocket::bind("127.0.0.1:0").unwrap());
        let mut to = receivers(2).into_iter();
        let ((b, b_addr), (c, c_addr)) = (to.next().unwrap(), to.next().unwrap());
        let mut a_io = UdpIo::new(&a).unwrap();
        let plan = [
            b_addr, b_addr, c_addr, b_addr, b_addr, b_addr, c_addr, c_addr,
        ];
        let mut tx = numbered(&plan, 900);
        let o = a_io.send(&a, &mut tx);
        assert_eq!(o.sent, plan.len() as u64);
        assert!(tx.is_empty());
        for (sock, addr) in [(&b, b_addr), (&c, c_addr)] {
            let want: Vec<u8> = (0..plan.len() as u8)
                .filter(|&i| plan[usize::from(i)] == addr)
                .collect();
            assert_eq!(fills(sock, addr, want.len()), want);
        }
    }

    /// Binds `n` non-blocking receivers on loopback.
    fn receivers(n: usize) -> Vec<(UdpSocket, SocketAddr)> {
        (0..n)
            .map(|_| {
                let s = StdUdpSocket::bind("127.0.0.1:0").unwrap();
                s.set_nonblocking(true).unwrap();
                let addr = s.local_addr().unwrap();
                (UdpSocket::from_std(s), addr)
            })
            .collect()
    }

    /// Reads what `sock` received until `want` datagrams are in, and returns their
    /// first bytes in arrival order.
    fn fills(sock: &UdpSocket, addr: SocketAddr, want: usize) -> Vec<u8> {
        let mut io = UdpIo::new(sock).unwrap();
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(5);
        while got.len() < want {
            assert!(
                Instant::now() < deadline,
                "{} of {want} at {addr}",
                got.len()
            );
            let _ = io.recv(sock, addr, &mut got);
        }
        got.iter().map(|d| d.payload[0]).collect()
    }

    /// One packet to each of many subscribers, a GSO run to one of them, one packet
    /// to each again: two `sendmmsg` calls around one GSO `sendmsg`, and everyone gets
    /// theirs in order; more than [`SEND_SLOTS`] alone take another call.
    #[test]
    fn one_call_carries_datagrams_to_many_destinations() {
        let a = UdpSocket::from_std(StdUdpSocket::bind("127.0.0.1:0").unwrap());
        let mut a_io = UdpIo::new(&a).unwrap();
        let to = receivers(10);
        let mut plan: Vec<usize> = (0..10).collect();
        plan.extend([3, 3, 3]);
        plan.extend(0..10);
        let addresses: Vec<SocketAddr> = plan.iter().map(|&r| to[r].1).collect();
        let mut tx = numbered(&addresses, 1000);
        let o = a_io.send(&a, &mut tx);
        assert_eq!((o.sent, o.errors, o.would_block), (plan.len() as u64, 0, 0));
        let gso = a_io.max_gso_segments() > 1;
        assert_eq!(o.calls, if gso { 3 } else { 2 + 3 }, "{o:?}");
        for (r, (sock, addr)) in to.iter().enumerate() {
            let want: Vec<u8> = (0..plan.len())
                .filter(|&i| plan[i] == r)
                .map(|i| i as u8)
                .collect();
            assert_eq!(fills(sock, *addr, want.len()), want);
        }

        let mut tx: Vec<Datagram> = (0..SEND_SLOTS + 6)
            .map(|i| datagram(to[i % 10].1, 100, i as u8))
            .collect();
        let o = a_io.send(&a, &mut tx);
        assert_eq!((o.sent, o.calls), ((SEND_SLOTS + 6) as u64, 2));
    }

    /// A datagram the kernel refuses in the middle of a `sendmmsg` (an IPv6
    /// destination from an IPv4 socket) is counted as an error alone: what came
    /// before and after it is sent.
    #[test]
    fn a_refused_datagram_among_many_costs_only_itself() {
        let a = UdpSocket::from_std(StdUdpSocket::bind("127.0.0.1:0").unwrap());
        let mut a_io = UdpIo::new(&a).unwrap();
        let to = receivers(2);
        let nowhere: SocketAddr = "[::1]:9".parse().unwrap();
        let plan = [to[0].1, to[1].1, nowhere, to[0].1, to[1].1];
        let mut tx = numbered(&plan, 100);
        let o = a_io.send(&a, &mut tx);
        assert_eq!((o.sent, o.errors, o.calls), (4, 1, 3), "{o:?}");
        assert_eq!(fills(&to[0].0, to[0].1, 2), [0, 3]);
        assert_eq!(fills(&to[1].0, to[1].1, 2), [1, 4]);
    }

    /// A socket bound to 0.0.0.0 (and one to `::`) addresses what it receives to the
    /// address the client sent to, and its replies name that address as their source.
    #[test]
    fn a_wildcard_socket_learns_and_answers_from_the_destination() {
        // 127.0.0.2 from 127.0.0.1: by route the kernel would answer from 127.0.0.1,
        // so the reply's source shows the packet info at work.
        for (wildcard, client, to) in [
            ("0.0.0.0:0", "127.0.0.1:0", "127.0.0.2"),
            ("[::]:0", "[::1]:0", "::1"),
        ] {
            let Ok(server) = StdUdpSocket::bind(wildcard) else {
                continue; // no IPv6 here
            };
            let Ok(client) = StdUdpSocket::bind(client) else {
                continue;
            };
            server.set_nonblocking(true).unwrap();
            let bound = server.local_addr().unwrap();
            let server = UdpSocket::from_std(server);
            let mut io = UdpIo::new(&server).unwrap();
            let to: std::net::IpAddr = to.parse().unwrap();
            client.send_to(b"ping", (to, bound.port())).unwrap();
            let mut got = Vec::new();
            let deadline = Instant::now() + Duration::from_secs(5);
            while got.is_empty() {
                assert!(Instant::now() < deadline, "nothing arrived on {bound}");
                let _ = io.recv(&server, bound, &mut got);
            }
            assert_eq!(
                got[0].local,
                SocketAddr::new(to, bound.port()),
                "{wildcard}"
            );
            assert_eq!(got[0].remote, client.local_addr().unwrap());
            let mut tx = vec![Datagram {
                local: got[0].local,
                remote: got[0].remote,
                payload: Bytes::from_static(b"pong"),
            }];
            assert_eq!(io.send(&server, &mut tx).sent, 1);
            let mut buf = [0u8; 16];
            client
                .set_read_timeout(Some(Duration::from_secs(5)))
                .unwrap();
            let (n, from) = client.recv_from(&mut buf).unwrap();
            assert_eq!((&buf[..n], from), (&b"pong"[..], got[0].local));
        }
    }

    /// What a wildcard socket takes: the host's addresses, loopback where the host
    /// has it, anything when it was told nothing; never a broadcast or multicast
    /// destination, nor an address the host does not have.
    #[test]
    fn wildcard_destinations() {
        let ip = |s: &str| -> IpAddr { s.parse().unwrap() };
        let host = [ip("127.0.0.1"), ip("10.1.0.1"), ip("fd00:a::1")];
        for (to, allowed) in [
            ("10.1.0.1", true),
            ("fd00:a::1", true),
            ("127.0.0.1", true),
            ("127.0.0.2", true),
            ("10.1.0.2", false),
            ("10.1.0.255", false),
            ("255.255.255.255", false),
            ("224.0.0.1", false),
            ("ff02::1", false),
            ("::1", false),
            ("fd00:a::2", false),
        ] {
            assert_eq!(destination_allowed(&host, ip(to)), allowed, "{to}");
        }
        assert!(destination_allowed(&[], ip("10.9.9.9")));
        assert!(!destination_allowed(&[], ip("224.0.0.251")));
    }

    /// A wildcard socket drops, and counts, what it is not to take.
    #[test]
    fn a_wildcard_socket_drops_datagrams_to_other_addresses() {
        let server = StdUdpSocket::bind("[::]:0").unwrap();
        server.set_nonblocking(true).unwrap();
        let bound = server.local_addr().unwrap();
        let server = UdpSocket::from_std(server);
        let mut io = UdpIo::new(&server).unwrap();
        // A host list without IPv6 loopback: ::1 is not the host's here.
        io.accept_destinations(&["fd00:a::1".parse().unwrap()]);
        let client = StdUdpSocket::bind("[::1]:0").unwrap();
        client.send_to(b"stray", ("::1", bound.port())).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while io.misaddressed() == 0 {
            assert!(Instant::now() < deadline, "nothing arrived");
            let mut got = Vec::new();
            let _ = io.recv(&server, bound, &mut got);
            assert!(got.is_empty(), "{got:?}");
        }
        // Told the host has it, the socket takes it.
        io.accept_destinations(&["::1".parse().unwrap()]);
        client.send_to(b"ok", ("::1", bound.port())).unwrap();
        let mut got = Vec::new();
        while got.is_empty() {
            assert!(Instant::now() < deadline, "nothing arrived");
            let _ = io.recv(&server, bound, &mut got);
        }
        assert_eq!(&got[0].payload[..], b"ok");
        assert_eq!(io.misaddressed(), 1);
    }

    /// Every datagram sent in mixed runs (GSO bursts, odd sizes, empty ones) arrives
    /// once, intact and in order, over a real loopback socket pair.
    #[test]
    fn batched_io_delivers_every_datagram_intact() {
        let a = StdUdpSocket::bind("127.0.0.1:0").unwrap();
        let b = StdUdpSocket::bind("127.0.0.1:0").unwrap();
        a.set_nonblocking(true).unwrap();
        b.set_nonblocking(true).unwrap();
        let (a_addr, b_addr) = (a.local_addr().unwrap(), b.local_addr().unwrap());
        let a = UdpSocket::from_std(a);
        let b = UdpSocket::from_std(b);
        let mut a_io = UdpIo::new(&a).unwrap();
        let mut b_io = UdpIo::new(&b).unwrap();
        // Sizes: runs of equal sizes with a short tail, singles, empties.
        let mut sizes = Vec::new();
        for round in 0..20usize {
            sizes.extend(std::iter::repeat_n(1100, 30 + round));
            sizes.push(333);
            sizes.push(0);
            sizes.push(1 + round * 50);
        }
        let mut tx: Vec<Datagram> = sizes
            .iter()
            .enumerate()
            .map(|(i, &len)| {
                let mut payload = vec![0u8; len];
                for (k, byte) in payload.iter_mut().enumerate() {
                    *byte = (i * 31 + k) as u8;
                }
                Datagram {
                    local: a_addr,
                    remote: b_addr,
                    payload: Bytes::from(payload),
                }
            })
            .collect();
        let expected: Vec<Bytes> = tx.iter().map(|d| d.payload.clone()).collect();
        // Send in slices small enough for the default socket buffers.
        let mut outcome = SendOutcome::default();
        let mut received = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !tx.is_empty() || received.len() < expected.len() {
            assert!(
                Instant::now() < deadline,
                "{} of {} arrived",
                received.len(),
                expected.len()
            );
            let mut part: Vec<Datagram> = tx.drain(..tx.len().min(100)).collect();
            let o = a_io.send(&a, &mut part);
            outcome.sent += o.sent;
            outcome.calls += o.calls;
            assert_eq!(o.would_block + o.errors, 0);
            loop {
                match b_io.recv(&b, b_addr, &mut received) {
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) => panic!("{e}"),
                }
            }
        }
        assert_eq!(outcome.sent, expected.len() as u64);
        if a_io.max_gso_segments() > 1 {
            assert!(outcome.calls < outcome.sent / 4, "{outcome:?}");
        }
        assert_eq!(received.len(), expected.len());
        for (got, want) in received.iter().zip(&expected) {
            assert_eq!(got.remote, a_addr);
            assert_eq!(got.local, b_addr);
            assert_eq!(got.payload, *want);
        }
    }
}
