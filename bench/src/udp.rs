//! `shoal-bench udp`: the loopback UDP ceiling. One thread sends datagrams of the flow
//! benchmark's size through the same batched I/O as shoal (`shoal_server::udp`: GSO
//! runs out, `recvmmsg` with GRO in) to a second thread, which only counts them: no
//! DTLS, no SCTP, no copies beyond the kernel's. It is the floor under `flow`: the
//! CPU the kernel alone spends per GiB carried this way on this machine.
//!
//! `--receivers N` (default 1) spreads the datagrams round robin over N receiving
//! sockets, as an SFU sends one packet to each of many subscribers: no two
//! consecutive datagrams share a destination, so none goes out in a GSO run, and the
//! figure is the cost of sending datagrams alone (one `sendmmsg` per flush from a
//! socket bound to one address).
//!
//! The sender keeps at most `--window-kib` (default 1 024) unreceived, below the
//! socket's receive buffer, so the figure is loss-free throughput, not the rate of
//! an overrun queue; it spins on a counter while the window is full (user time, no
//! system calls), and the receiver blocks in `recvmmsg`. Run it under
//! `/usr/bin/time -v`: the system seconds are the kernel's cost.

use std::net::UdpSocket as StdUdpSocket;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use shoal_components::net::Datagram;
use shoal_server::udp::UdpIo;

use crate::opt;

pub fn run(args: &[String]) -> ExitCode {
    match try_run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("shoal-bench udp: {e}");
            ExitCode::FAILURE
        }
    }
}

fn try_run(args: &[String]) -> Result<(), String> {
    let size = opt(args, "--size", 1089)? as usize;
    let mib = opt(args, "--mib", 2048)?;
    let window = opt(args, "--window-kib", 1024)? * 1024;
    let receivers = opt(args, "--receivers", 1)? as usize;
    if !(1..=65_000).contains(&size) {
        return Err("--size must be 1..=65000".into());
    }
    if !(1..=1024).contains(&receivers) {
        return Err("--receivers must be 1..=1024".into());
    }
    let err = |e: std::io::Error| e.to_string();
    let tx_sock = StdUdpSocket::bind("127.0.0.1:0").map_err(err)?;
    let tx_addr = tx_sock.local_addr().map_err(err)?;
    let mut tx_io = UdpIo::new(&tx_sock).map_err(err)?;
    // The sender blocks when its buffer is full; the receiver waits in epoll when
    // its queues are empty, as the driver does (spinning on a non-blocking receive
    // would bill failed system calls to the kernel's side of the figure).
    tx_sock.set_nonblocking(false).map_err(err)?;
    let poll = mio::Poll::new().map_err(err)?;
    let mut rx = Vec::with_capacity(receivers);
    for i in 0..receivers {
        let sock = StdUdpSocket::bind("127.0.0.1:0").map_err(err)?;
        let addr = sock.local_addr().map_err(err)?;
        let io = UdpIo::new(&sock).map_err(err)?;
        let mut sock = mio::net::UdpSocket::from_std(sock);
        poll.registry()
            .register(&mut sock, mio::Token(i), mio::Interest::READABLE)
            .map_err(err)?;
        rx.push((sock, addr, io));
    }
    let rx_addrs: Vec<_> = rx.iter().map(|(_, addr, _)| *addr).collect();
    let gro = rx[0].2.gro();
    let total = mib << 20;
    let received = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let receiver = {
        let (received, done) = (received.clone(), done.clone());
        let mut poll = poll;
        std::thread::spawn(move || {
            let mut batch = Vec::with_capacity(512);
            let mut events = mio::Events::with_capacity(64);
            while !done.load(Ordering::Relaxed) {
                let mut idle = true;
                for (sock, addr, io) in &mut rx {
                    match io.recv(sock, *addr, &mut batch) {
                        Ok(_) => {
                            idle = false;
                            let bytes: usize = batch.drain(..).map(|d| d.payload.len()).sum();
                            received.fetch_add(bytes as u64, Ordering::Relaxed);
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                        Err(_) => {}
                    }
                }
                if idle {
                    let _ = poll.poll(&mut events, Some(Duration::from_millis(10)));
                }
            }
        })
    };
    let payload = Bytes::from(vec![0x5a; size]);
    let per_flush = (64 * 1024 / size).max(1);
    let mut sent = 0u64;
    let (mut datagrams, mut calls) = (0u64, 0u64);
    let mut next_receiver = 0;
    let mut tx = Vec::with_capacity(per_flush);
    let deadline = start + Duration::from_secs(600);
    while received.load(Ordering::Relaxed) < total {
        if Instant::now() > deadline {
            done.store(true, Ordering::Relaxed);
            return Err("timed out (datagrams lost?)".into());
        }
        if sent < total && sent.saturating_sub(received.load(Ordering::Relaxed)) < window {
            tx.extend((0..per_flush).map(|_| {
                next_receiver = (next_receiver + 1) % rx_addrs.len();
                Datagram {
                    local: tx_addr,
                    remote: rx_addrs[next_receiver],
                    payload: payload.clone(),
                }
            }));
            let o = tx_io.send(&tx_sock, &mut tx);
            sent += o.sent * size as u64;
            datagrams += o.sent;
            calls += o.calls;
        } else {
            std::hint::spin_loop();
        }
    }
    let secs = start.elapsed().as_secs_f64();
    done.store(true, Ordering::Relaxed);
    let _ = receiver.join();
    let got = received.load(Ordering::Relaxed);
    println!(
        "UDP {:.0} Mbps ({} MiB of {size}-byte datagrams to {receivers} receivers in {secs:.3}s, {:.2} datagrams per send call, GSO {} segments, GRO {})",
        got as f64 * 8.0 / f64::from(1u32 << 20) / secs,
        got >> 20,
        datagrams as f64 / calls.max(1) as f64,
        tx_io.max_gso_segments(),
        if gro { "on" } else { "off" },
    );
    Ok(())
}
