//! `shoal-bench churn`: participants joining and leaving a node over real UDP, a
//! third of them abruptly, to show that nothing a session leaves behind stays.
//!
//! Each session is shoal's own client stack on a socket of its own: it publishes
//! Opus and VP8 with a data channel (`OfferShape::PUBLISH` with `data`), joins its
//! room (`--rooms` rooms, sessions spread over them in turn) over the node's
//! `/signal` WebSocket (even sessions: it answers the node's offers of the room's
//! other tracks, so subscriptions come and go too) or over WHIP (odd ones), waits
//! until its SCTP association is up, holds `--hold-ms`, and leaves:
//!
//! - gracefully: WHIP DELETE, or DTLS close_notify and then `leave` over `/signal`
//!   (its socket closed with a close frame);
//! - abruptly (`--abrupt` of them, evenly spread): nothing at all. Its UDP socket
//!   and (for `/signal`) its TCP connection are just dropped: no close_notify, no
//!   SCTP SHUTDOWN, no DELETE, no close frame, as a crashed or unplugged client. The
//!   node finds out from the closed TCP connection or, for WHIP, from ICE consent
//!   expiring (RFC 7675: 30 s, or the node's `--consent-timeout`).
//!
//! No session binds a UDP port an abrupt one used: the node keeps a validated path
//! its peer's until consent expires (another peer's checks from it are refused, as
//! a takeover would be), so a session from such a port could not connect before
//! then.
//!
//! `--concurrency` sessions run at once, each on two threads (its shard loop and its
//! signalling). Prints a summary, or one JSON object with `--json`; exits 1 if any
//! session failed to join or connect.

use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, mpsc};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use rand_chacha::ChaCha12Rng;
use rand_core::SeedableRng;
use serde_json::{Value, json};
use shoal_components::media::TrackSpec;
use shoal_components::peer::PeerId;
use shoal_server::endpoint::{self, Control, MediaOffer, MediaSession, OfferShape, media_offer};
use shoal_systems::{Command, Shard, ShardConfig, ShardEvent};
use tokio::sync::oneshot;
use tokio_tungstenite::tungstenite::Message;

use crate::sfu_load::{number, value};

/// The node as the client's shard knows it.
const NODE: PeerId = PeerId(1);
/// How long a session has to join and bring its association up.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(20);
/// How long one HTTP exchange may take.
const HTTP_TIMEOUT: Duration = Duration::from_secs(10);

const USAGE: &str = "usage: shoal-bench churn --http ADDR [options]\n\
  --sessions N       sessions, one after another per worker (500)\n\
  --rooms R          rooms the sessions spread over (20)\n\
  --concurrency C    sessions at once (16)\n\
  --abrupt F         fraction of sessions that just vanish (0.333)\n\
  --hold-ms H        how long a session stays once connected (200)\n\
  --prefix P         room name prefix (churn)\n\
  --json             print one JSON object";

/// The options.
#[derive(Clone, Debug)]
struct Options {
    http: SocketAddr,
    sessions: usize,
    rooms: usize,
    concurrency: usize,
    abrupt: f64,
    hold: Duration,
    prefix: String,
    json: bool,
}

fn parse(args: &[String]) -> Result<Options, String> {
    let http = value(args, "--http")
        .ok_or("--http is required")?
        .parse()
        .map_err(|_| "--http: not an address".to_owned())?;
    let abrupt: f64 = number(args, "--abrupt", 0.333)?;
    if !(0.0..=1.0).contains(&abrupt) {
        return Err("--abrupt: a fraction from 0 to 1".into());
    }
    Ok(Options {
        http,
        sessions: number(args, "--sessions", 500)?,
        rooms: number::<usize>(args, "--rooms", 20)?.max(1),
        concurrency: number::<usize>(args, "--concurrency", 16)?.max(1),
        abrupt,
        hold: Duration::from_millis(number(args, "--hold-ms", 200)?),
        prefix: value(args, "--prefix").unwrap_or("churn").to_owned(),
        json: args.iter().any(|a| a == "--json"),
    })
}

/// Runs `shoal-bench churn`.
pub fn run(args: &[String]) -> ExitCode {
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let options = match parse(args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let outcome = churn(&options);
    if options.json {
        println!("{}", outcome.json());
    } else {
        println!("{}", outcome.text());
    }
    if outcome.failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// How a session ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Leave {
    Graceful,
    Abrupt,
}

/// What a run did.
#[derive(Debug, Default)]
struct Outcome {
    /// Sessions that joined, connected and left, by how they left and signalled.
    left: HashMap<(&'static str, &'static str), usize>,
    failed: usize,
    /// The first few failures, with why.
    failures: Vec<String>,
    /// Offer sent to SCTP up, per session, milliseconds.
    connect_ms: Vec<u64>,
    elapsed: Duration,
}

impl Outcome {
    fn count(&self, leave: &str) -> usize {
        self.left
            .iter()
            .filter(|((l, _), _)| *l == leave)
            .map(|(_, n)| n)
            .sum()
    }

    fn json(&self) -> Value {
        let mut connect = self.connect_ms.clone();
        connect.sort_unstable();
        let at = |q: f64| {
            connect
                .get(((connect.len() as f64 - 1.0) * q).round() as usize)
                .copied()
        };
        json!({
            "graceful": self.count("graceful"),
            "abrupt": self.count("abrupt"),
            "by_kind": self.left.iter().map(|((l, k), n)| (format!("{l}/{k}"), *n)).collect::<HashMap<_, _>>(),
            "failed": self.failed,
            "failures": self.failures,
            "connect_ms_p50": at(0.5),
            "connect_ms_p99": at(0.99),
            "seconds": self.elapsed.as_secs_f64(),
        })
    }

    fn text(&self) -> String {
        let sessions = self.count("graceful") + self.count("abrupt");
        format!(
            "churn: {sessions} sessions in {:.1} s ({:.1}/s): {} graceful, {} abrupt, {} failed{}\n{}",
            self.elapsed.as_secs_f64(),
            sessions as f64 / self.elapsed.as_secs_f64().max(1e-9),
            self.count("graceful"),
            self.count("abrupt"),
            self.failed,
            self.failures
                .iter()
                .map(|f| format!("\n  {f}"))
                .collect::<String>(),
            self.json()
        )
    }
}

/// Whether session `i` of a run with fraction `f` abrupt vanishes: floor(n·f) of
/// the first n, evenly spread.
fn abrupt(i: usize, f: f64) -> bool {
    ((i + 1) as f64 * f).floor() > (i as f64 * f).floor()
}

fn churn(o: &Options) -> Outcome {
    let next = AtomicUsize::new(0);
    let vanished = Mutex::new(HashSet::new());
    let outcome = Mutex::new(Outcome::default());
    let started = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..o.concurrency.min(o.sessions.max(1)) {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= o.sessions {
                        return;
                    }
                    let leave = if abrupt(i, o.abrupt) {
                        Leave::Abrupt
                    } else {
                        Leave::Graceful
                    };
                    let via_signal = i.is_multiple_of(2);
                    let result = session(o, i, via_signal, leave, &vanished);
                    let mut out = outcome.lock().unwrap_or_else(|e| e.into_inner());
                    match result {
                        Ok(connect) => {
                            let l = match leave {
                                Leave::Graceful => "graceful",
                                Leave::Abrupt => "abrupt",
                            };
                            let k = if via_signal { "signal" } else { "whip" };
                            *out.left.entry((l, k)).or_default() += 1;
                            out.connect_ms
                                .push(u64::try_from(connect.as_millis()).unwrap_or(u64::MAX));
                        }
                        Err(e) => {
                            out.failed += 1;
                            if out.failures.len() < 5 {
                                out.failures.push(format!("session {i}: {e}"));
                            }
                        }
                    }
                }
            });
        }
    });
    let mut outcome = outcome.into_inner().unwrap_or_else(|e| e.into_inner());
    outcome.elapsed = started.elapsed();
    outcome
}

/// What signalling hands the session's shard loop.
enum Signalled {
    Session(Box<MediaSession>),
    Receive(Vec<TrackSpec>),
    Failed(String),
}

/// A UDP socket on a loopback port no abrupt session of the run used (`vanished`).
fn fresh_socket(vanished: &Mutex<HashSet<u16>>) -> Result<UdpSocket, String> {
    // Sockets on ports to avoid stay bound until a good one is found, so the
    // kernel hands out another.
    let mut avoided = Vec::new();
    loop {
        let socket = UdpSocket::bind("127.0.0.1:0").map_err(|e| format!("bind: {e}"))?;
        let port = socket.local_addr().map_err(|e| e.to_string())?.port();
        let used = vanished
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&port);
        if !used {
            return Ok(socket);
        }
        if avoided.len() > 64 {
            return Err("no fresh UDP port".into());
        }
        avoided.push(socket);
    }
}

/// One session, from its offer to its leave; how long it took to connect.
fn session(
    o: &Options,
    i: usize,
    via_signal: bool,
    leave: Leave,
    vanished: &Mutex<HashSet<u16>>,
) -> Result<Duration, String> {
    let room = format!("{}-{}", o.prefix, i % o.rooms);
    let identity = format!("c{i}");
    let socket = fresh_socket(vanished)?;
    let local = socket.local_addr().map_err(|e| e.to_string())?;
    if leave == Leave::Abrupt {
        vanished
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(local.port());
    }
    let shard = Shard::new(ShardConfig::new(local, i as u64));
    let shape = OfferShape {
        data: true,
        ..OfferShape::PUBLISH
    };
    let offer = media_offer(
        NODE,
        shard.fingerprint(),
        shape,
        &mut ChaCha12Rng::seed_from_u64(0x00c4_0000 + i as u64),
    );
    let offered_at = Instant::now();
    let (to_shard, inbox) = mpsc::channel();
    let (stop, stopped) = oneshot::channel::<Leave>();
    let mut location = None;
    let signaller = if via_signal {
        let (http, room, identity) = (o.http, room.clone(), identity.clone());
        Some(std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build();
            match runtime {
                Ok(rt) => rt.block_on(signal(http, room, identity, offer, to_shard, stopped)),
                Err(e) => {
                    let _ = to_shard.send(Signalled::Failed(format!("runtime: {e}")));
                }
            }
        }))
    } else {
        let path = format!("/whip/{room}?identity={identity}");
        let (status, headers, body) = http(o.http, "POST", &path, Some(offer.sdp()))?;
        if status != 201 {
            return Err(format!("POST {path}: {status} {}", body.trim()));
        }
        location = headers.get("location").cloned();
        let s = offer
            .accept(&body)
            .map_err(|e| format!("the answer: {e:?}"))?;
        let _ = to_shard.send(Signalled::Session(Box::new(s)));
        None
    };
    let deadline = offered_at + CONNECT_TIMEOUT;
    let mut connected: Option<(Instant, Duration)> = None;
    let mut failure = None;
    let result = endpoint::run(socket, shard, |shard, now, events| {
        while let Ok(s) = inbox.try_recv() {
            let outcome = match s {
                Signalled::Session(session) => {
                    let mut r = shard.command(now, Command::AddPeer(session.peer.clone()));
                    for (track, subscription) in session.sources.iter().cloned() {
                        r = r.and_then(|()| {
                            shard.command(
                                now,
                                Command::AddSource {
                                    peer: NODE,
                                    track,
                                    subscription,
                                },
                            )
                        });
                    }
                    r.map_err(|e| format!("{e:?}"))
                }
                Signalled::Receive(tracks) => tracks.into_iter().try_for_each(|track| {
                    shard
                        .command(now, Command::Receive { peer: NODE, track })
                        .map_err(|e| format!("{e:?}"))
                }),
                Signalled::Failed(e) => Err(e),
            };
            if let Err(e) = outcome {
                failure = Some(e);
                return Control::Stop;
            }
        }
        for event in events.drain(..) {
            match event {
                ShardEvent::SctpEstablished { .. } if connected.is_none() => {
                    connected = Some((Instant::now(), offered_at.elapsed()));
                }
                ShardEvent::PeerRemoved { reason, .. } => {
                    failure = Some(format!("the node's side went: {reason:?}"));
                    return Control::Stop;
                }
                _ => {}
            }
        }
        match connected {
            Some((at, _)) if at.elapsed() >= o.hold => {
                if leave == Leave::Graceful {
                    // WHIP: DELETE first, as a WHIP client ends its session (RFC
                    // 9725 §4.2); the node then closes its side.
                    if let Some(location) = location.as_deref() {
                        match http(o.http, "DELETE", location, None) {
                            Ok((200, _, _)) => {}
                            Ok((status, _, body)) => {
                                failure =
                                    Some(format!("DELETE {location}: {status} {}", body.trim()));
                            }
                            Err(e) => failure = Some(e),
                        }
                    }
                    // close_notify goes with the loop's last flush.
                    let _ = shard.close_peer(NODE);
                }
                Control::Stop
            }
            None if Instant::now() > deadline => {
                failure = Some("not connected in time".into());
                Control::Stop
            }
            _ => Control::Continue,
        }
    });
    // The socket is gone with the shard from here on, whichever way it left.
    drop(result.map_err(|e| format!("socket: {e}"))?);
    if let Some(thread) = signaller {
        let _ = stop.send(leave);
        let _ = thread.join();
    }
    match (failure, connected) {
        (Some(e), _) => Err(e),
        (None, Some((_, took))) => Ok(took),
        (None, None) => Err("never connected".into()),
    }
}

/// The session's `/signal`: join, the offer, the answer to the shard loop; the
/// node's later offers answered (their tracks to the shard loop) until told how to
/// leave: gracefully (`leave`, then a close frame) or abruptly (the TCP connection
/// just dropped).
async fn signal(
    http: SocketAddr,
    room: String,
    identity: String,
    offer: MediaOffer,
    to_shard: mpsc::Sender<Signalled>,
    mut stop: oneshot::Receiver<Leave>,
) {
    let fail = |e: String| {
        let _ = to_shard.send(Signalled::Failed(e));
    };
    let connect = tokio_tungstenite::connect_async(format!("ws://{http}/signal"));
    let mut ws = match tokio::time::timeout(HTTP_TIMEOUT, connect).await {
        Ok(Ok((ws, _))) => ws,
        Ok(Err(e)) => return fail(format!("/signal: {e}")),
        Err(_) => return fail("/signal: connect timed out".into()),
    };
    let text = |v: Value| Message::Text(v.to_string().into());
    let join = json!({"join": {"room": room, "identity": identity}});
    let sent = async {
        ws.send(text(join)).await?;
        ws.send(text(json!({"offer": {"sdp": offer.sdp()}}))).await
    };
    if let Err(e) = sent.await {
        return fail(format!("/signal: {e}"));
    }
    let mut session: Option<MediaSession> = None;
    let leave = loop {
        let message = tokio::select! {
            m = ws.next() => m,
            l = &mut stop => break l.unwrap_or(Leave::Abrupt),
        };
        let body = match message {
            Some(Ok(Message::Text(t))) => t,
            Some(Ok(_)) => continue,
            _ => {
                fail("the node closed /signal".into());
                break stop.await.unwrap_or(Leave::Abrupt);
            }
        };
        let Ok(v) = serde_json::from_str::<Value>(body.as_str()) else {
            continue;
        };
        if let Some(sdp) = v.pointer("/answer/sdp").and_then(Value::as_str) {
            match offer.accept(sdp) {
                Ok(s) => {
                    let _ = to_shard.send(Signalled::Session(Box::new(s.clone())));
                    session = Some(s);
                }
                Err(e) => fail(format!("the answer: {e:?}")),
            }
        } else if let Some(sdp) = v.pointer("/offer/sdp").and_then(Value::as_str) {
            let Some(s) = session.as_mut() else {
                fail("an offer before the answer".into());
                continue;
            };
            // The answer echoes the offer's id (absent: 0, as the node reads it).
            let id = v.pointer("/offer/id").and_then(Value::as_u64).unwrap_or(0);
            match s.answer(sdp) {
                Ok((answer, tracks)) => {
                    let _ = to_shard.send(Signalled::Receive(tracks));
                    let answer = json!({"answer": {"sdp": answer, "id": id}});
                    let _ = ws.send(text(answer)).await;
                }
                Err(e) => fail(format!("the node's offer: {e:?}")),
            }
        } else if let Some(e) = v.get("error") {
            fail(format!("the node said {e}"));
        }
    };
    if leave == Leave::Graceful {
        let _ = ws.send(text(json!({"leave": {}}))).await;
        let _ = ws.close(None).await;
    }
    // Abrupt: dropped here, no close frame.
}

/// One HTTP/1.1 exchange on a connection of its own: status, headers (lower-cased
/// names) and body.
fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    sdp: Option<&str>,
) -> Result<(u16, HashMap<String, String>, String), String> {
    let err = |e: std::io::Error| format!("{method} {path}: {e}");
    let mut s = TcpStream::connect_timeout(&addr, HTTP_TIMEOUT).map_err(err)?;
    s.set_read_timeout(Some(HTTP_TIMEOUT)).map_err(err)?;
    let body = sdp.unwrap_or_default();
    let content_type = if sdp.is_some() {
        "Content-Type: application/sdp\r\n"
    } else {
        ""
    };
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{content_type}Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).map_err(err)?;
    s.write_all(body.as_bytes()).map_err(err)?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).map_err(err)?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("{method} {path}: a response without a header"))?;
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("{method} {path}: no status line"))?;
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Ok((status, headers, body.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::abrupt;

    #[test]
    fn a_third_abrupt_is_exactly_a_third_spread_evenly() {
        let n = (0..500).filter(|&i| abrupt(i, 1.0 / 3.0)).count();
        assert_eq!(n, 166);
        let first: Vec<usize> = (0..9).filter(|&i| abrupt(i, 1.0 / 3.0)).collect();
        assert_eq!(first, [2, 5, 8]);
        assert_eq!((0..10).filter(|&i| abrupt(i, 0.0)).count(), 0);
        assert_eq!((0..10).filter(|&i| abrupt(i, 1.0)).count(), 10);
    }
}
