//! Checks per second through one shard's full tick.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use shoal_components::net::Datagram;
use shoal_components::peer::{IceCredentials, IceRole, PeerId};
use shoal_components::stun::{BINDING, Class, StunWriter, TransactionId};
use shoal_components::time::Time;
use shoal_systems::{Command, PeerSpec, Shard, ShardConfig};

use crate::opt;

pub(crate) fn run(args: &[String]) -> ExitCode {
    let parsed = (|| -> Result<(u64, u64, u64), String> {
        Ok((
            opt(args, "--peers", 10_000)?,
            opt(args, "--checks", 1_000_000)?,
            opt(args, "--batch", 64)?,
        ))
    })();
    let (peers, checks, batch) = match parsed {
        Ok(v) => v,
        Err(e) => {
            eprintln!("shoal-bench ice: {e}");
            return ExitCode::from(2);
        }
    };
    let peers = peers.clamp(1, 60_000) as usize;
    let batch = batch.clamp(1, 1024) as usize;

    let local: SocketAddr = "127.0.0.1:7100".parse().unwrap_or_else(|_| unreachable!());
    let mut config = ShardConfig::new(local, 1);
    config.max_peers = peers;
    config.consent_timeout = Duration::from_secs(3600);
    let mut shard = Shard::new(config);

    // One valid, nominating check per peer, each from its own address; the bench
    // replays them round-robin (a real browser repeats its consent checks too).
    let mut requests = Vec::with_capacity(peers);
    let mut buf = BytesMut::with_capacity(peers * 128);
    for i in 0..peers {
        let creds = IceCredentials {
            local_ufrag: format!("s{i:07}"),
            local_pwd: format!("serverpassword{i:010}"),
            remote_ufrag: format!("c{i:07}"),
            remote_pwd: format!("clientpassword{i:010}"),
        };
        let username = format!("{}:{}", creds.local_ufrag, creds.remote_ufrag);
        let mut tid = [0u8; 12];
        tid[..8].copy_from_slice(&(i as u64).to_be_bytes());
        let mut w = StunWriter::new(&mut buf, Class::Request, BINDING, TransactionId(tid));
        w.username(username.as_bytes())
            .priority(0x6e7f_1eff)
            .ice_controlling(42)
            .use_candidate()
            .message_integrity(creds.local_pwd.as_bytes())
            .fingerprint();
        w.finish();
        let payload = buf.split().freeze();
        let ip = IpAddr::V4(Ipv4Addr::from(0x0a00_0000u32 + i as u32 + 1));
        let remote = SocketAddr::new(ip, 40_000 + (i % 20_000) as u16);
        requests.push(Datagram {
            local,
            remote,
            payload,
        });
        let spec = PeerSpec {
            id: PeerId(i as u64),
            role: IceRole::Lite,
            credentials: creds,
            remote_candidates: Vec::new(),
            dtls: None,
            room: None,
            may_send_data: true,
            link: false,
        };
        if let Err(e) = shard.command(Time::ZERO, Command::AddPeer(spec)) {
            eprintln!("shoal-bench ice: adding peer {i}: {e}");
            return ExitCode::FAILURE;
        }
    }

    let mut out = Vec::with_capacity(batch);
    let mut now_us = 1_000u64;
    let mut fed = 0u64;
    let mut next = 0usize;
    let start = Instant::now();
    while fed < checks {
        let n = batch.min((checks - fed) as usize);
        let items = (0..n).map(|k| requests[(next + k) % peers].clone());
        shard.handle_datagrams(Time::from_micros(now_us), items);
        next = (next + n) % peers;
        fed += n as u64;
        now_us += 10;
        out.clear();
        shard.poll_transmit(&mut out);
    }
    let elapsed = start.elapsed();
    let answered = shard.stats().ice_checks_answered;
    if answered != checks {
        eprintln!("shoal-bench ice: {answered} of {checks} checks answered");
        return ExitCode::FAILURE;
    }
    let secs = elapsed.as_secs_f64();
    println!(
        "ice: {checks} checks over {peers} peers, batch {batch}: {:.0} checks/s, {:.0} ns/check, {:.2}s",
        checks as f64 / secs,
        elapsed.as_nanos() as f64 / checks as f64,
        secs
    );
    ExitCode::SUCCESS
}
