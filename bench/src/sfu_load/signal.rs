//! The load's signalling, on a thread of its own (a single-threaded tokio runtime):
//! each participant joins its room over the node's `/signal` WebSocket, or publishes
//! over WHIP and plays over WHEP, and hands what it negotiated to the generator.
//!
//! `/signal`: `join`, then one offer that publishes (Opus and VP8); the node answers,
//! and as the room's other publishers arrive it offers their tracks, which the
//! participant answers (`recvonly`) after telling the generator what it will
//! receive.
//!
//! WHIP + WHEP (RFC 9725, any SFU that speaks them): each participant POSTs a
//! publishing offer to `/whip/{room}`; once every publisher of its room is sending,
//! it POSTs to `/whep/{room}` a player's offer of as many `recvonly` audio and video
//! sections as the room has other publishers. WHEP has no renegotiation, so what a
//! player receives is fixed by that one offer: the node fills its sections with the
//! room's tracks as it chooses (shoal: in the room's order, which may include the
//! player's own publisher), so the number of streams matches `/signal`'s but not
//! always who sends them. Sessions end with DELETE on their `Location`.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use mio::Waker;
use rand_chacha::ChaCha12Rng;
use rand_core::SeedableRng;
use serde_json::{Value, json};
use shoal_server::endpoint::{MediaOffer, OfferShape, media_offer};
use shoal_server::sim::PeerId;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio_tungstenite::tungstenite::Message;

use super::failover::{CutOff, Kill, RETRY};
use super::load::{Join, Live, ToGen};

/// How many redirects one join follows.
const MAX_REDIRECTS: u32 = 3;
/// How long one signalling step may take.
const STEP_TIMEOUT: Duration = Duration::from_secs(10);
/// How often a `/signal` participant sends a ping, so that its socket is never
/// silent for the node's idle timeout.
const KEEPALIVE: Duration = Duration::from_secs(20);

/// The signalling mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Mode {
    /// shoal's `/signal` WebSocket.
    Signal,
    /// WHIP to publish, WHEP to play.
    WhipWhep,
}

impl Mode {
    pub(super) fn name(self) -> &'static str {
        match self {
            Mode::Signal => "/signal",
            Mode::WhipWhep => "WHIP + WHEP",
        }
    }
}

/// What the signalling needs.
#[derive(Clone)]
pub(super) struct Plan {
    pub http: SocketAddr,
    /// The `/signal` addresses participants join through: participant `p` of a
    /// room through `joins_via[p % len]` (one node, or each node of a cluster).
    pub joins_via: Vec<SocketAddr>,
    pub mode: Mode,
    pub rooms: usize,
    pub participants: usize,
    /// The first this many participants of a room publish; the rest only receive.
    pub publishers: usize,
    /// Rooms start this far apart.
    pub room_gap: Duration,
    /// A room's participants join spread over this window.
    pub join_window: Duration,
    pub fingerprint: [u8; 32],
    /// A prefix for room names, so runs against one node never share rooms.
    pub run: String,
    /// Publishers send simulcast video.
    pub simulcast: bool,
    /// A node of the cluster to be killed (`failover.rs`): participants it cuts off
    /// join again through the others.
    pub kill: Option<Arc<Kill>>,
}

/// Signalling outcomes the run reports.
#[derive(Debug, Default)]
pub(super) struct SignalOutcome {
    /// Joins that failed, with why (the first few).
    pub failures: Vec<String>,
    pub failed: usize,
    /// Participants a killed node cut off.
    pub cut_off: Vec<CutOff>,
}

/// Links to the generator.
#[derive(Clone)]
pub(super) struct ToGenerator {
    pub tx: Sender<ToGen>,
    pub waker: Arc<Waker>,
    /// The next connection's index.
    pub next_conn: Arc<AtomicUsize>,
    /// The generator's counters (publishers sending, per room).
    pub live: Arc<Live>,
}

impl ToGenerator {
    fn send(&self, m: ToGen) {
        if self.tx.send(m).is_ok() {
            let _ = self.waker.wake();
        }
    }
}

/// Runs the plan's joins, keeps the sessions until `stop` turns true, then ends
/// them.
pub(super) async fn run(
    plan: Plan,
    to_gen: ToGenerator,
    stop: watch::Receiver<bool>,
) -> SignalOutcome {
    let mut tasks = Vec::new();
    let start = tokio::time::Instant::now();
    for room in 0..plan.rooms {
        for p in 0..plan.participants {
            let at = start
                + plan.room_gap * room as u32
                + plan.join_window * p as u32 / plan.participants.max(1) as u32;
            let (plan, to_gen, stop) = (plan.clone(), to_gen.clone(), stop.clone());
            tasks.push(tokio::spawn(async move {
                tokio::time::sleep_until(at).await;
                let result = match plan.mode {
                    Mode::Signal => signal_until_stop(&plan, &to_gen, room, p, stop).await,
                    Mode::WhipWhep => {
                        let seed = (room * 10_000 + p) as u64;
                        participant_whip(&plan, &to_gen, room, p, seed, stop)
                            .await
                            .map(|()| None)
                    }
                };
                if result.is_err() {
                    to_gen.live.failed.fetch_add(1, Ordering::Relaxed);
                }
                result
            }));
        }
    }
    let mut outcome = SignalOutcome::default();
    for t in tasks {
        match t.await.unwrap_or_else(|e| Err(format!("task: {e}"))) {
            Ok(cut) => outcome.cut_off.extend(cut),
            Err(e) => {
                outcome.failed += 1;
                if outcome.failures.len() < 5 {
                    outcome.failures.push(e);
                }
            }
        }
    }
    outcome
}

/// One `/signal` participant until stop: once a node has been killed, a session
/// that breaks is a cut (`failover.rs`), and it joins again through a node still
/// alive until a session lasts. An error before any kill is the participant's
/// failure.
async fn signal_until_stop(
    plan: &Plan,
    to_gen: &ToGenerator,
    room: usize,
    p: usize,
    mut stop: watch::Receiver<bool>,
) -> Result<Option<CutOff>, String> {
    let nodes = plan.joins_via.len();
    let mut cut: Option<CutOff> = None;
    let mut attempt = 0u32;
    loop {
        let via = match &plan.kill {
            Some(k) => k.via(nodes, p, attempt),
            None => p % nodes.max(1),
        };
        let via = plan.joins_via.get(via).copied().unwrap_or(plan.http);
        let mut url = format!("ws://{via}/signal");
        // A fresh offer each try: a new connection, as a client that rejoins makes.
        let seed = (room * 10_000 + p) as u64 + u64::from(attempt) * 100_000_000;
        let mut hops = 0;
        let result = loop {
            match participant_signal(plan, to_gen, (room, p, &url), seed, stop.clone()).await {
                // A node that does not serve the room names the one that does.
                Err(Ended::Redirect(next)) if hops < MAX_REDIRECTS => {
                    hops += 1;
                    url = next;
                }
                Err(Ended::Redirect(next)) => break Err(format!("redirected again, to {next}")),
                Err(Ended::Failed(e)) => break Err(e),
                Ok(conn) => break Ok(conn),
            }
        };
        let killed = plan.kill.as_ref().is_some_and(|k| k.victim.get().is_some());
        match result {
            Ok(conn) => {
                if let Some(c) = cut.as_mut() {
                    c.conn = conn;
                }
                return Ok(cut);
            }
            Err(e) if killed && !*stop.borrow() => {
                let c = cut.get_or_insert_with(|| CutOff {
                    room,
                    participant: p,
                    with_node: plan.kill.as_ref().is_some_and(|k| k.on_victim(&url)),
                    attempts: 0,
                    conn: None,
                    last_error: String::new(),
                });
                c.attempts += 1;
                c.conn = None;
                c.last_error = e;
                attempt += 1;
                tokio::select! {
                    _ = tokio::time::sleep(RETRY) => {}
                    _ = stop.wait_for(|s| *s) => return Ok(cut),
                }
            }
            Err(e) => return Err(e),
        }
    }
}

fn room_name(plan: &Plan, room: usize) -> String {
    format!("{}-{room}", plan.run)
}

fn identity(room: usize, p: usize) -> String {
    format!("r{room}p{p}")
}

impl Plan {
    /// What a publisher offers.
    fn publish_shape(&self) -> OfferShape {
        if self.simulcast {
            OfferShape::PUBLISH_SIMULCAST
        } else {
            OfferShape::PUBLISH
        }
    }
}

fn offer_for(plan: &Plan, shape: OfferShape, seed: u64) -> MediaOffer {
    media_offer(
        PeerId(1),
        plan.fingerprint,
        shape,
        &mut ChaCha12Rng::seed_from_u64(seed),
    )
}

/// How a `/signal` session ended before stop.
enum Ended {
    /// The node does not serve the room: it named the `/signal` URL that does.
    Redirect(String),
    Failed(String),
}

impl From<String> for Ended {
    fn from(e: String) -> Ended {
        Ended::Failed(e)
    }
}

/// One `/signal` session at `url`: join, publish, answer the node's offers, until
/// stop; its connection, once the node answered.
async fn participant_signal(
    plan: &Plan,
    to_gen: &ToGenerator,
    (room, p, url): (usize, usize, &str),
    seed: u64,
    mut stop: watch::Receiver<bool>,
) -> Result<Option<usize>, Ended> {
    let (mut ws, _) = tokio::time::timeout(STEP_TIMEOUT, tokio_tungstenite::connect_async(url))
        .await
        .map_err(|_| "connect timed out".to_owned())?
        .map_err(|e| format!("connect: {e}"))?;
    let send = |v: Value| Message::Text(v.to_string().into());
    ws.send(send(
        json!({"join": {"room": room_name(plan, room), "identity": identity(room, p)}}),
    ))
    .await
    .map_err(|e| format!("send join: {e}"))?;
    // One who only receives offers a data channel alone, as a browser that sends
    // nothing does; the node's offers bring the room's tracks either way.
    let publishes = p < plan.publishers;
    let shape = if publishes {
        plan.publish_shape()
    } else {
        OfferShape::DATA_ONLY
    };
    let offer = offer_for(plan, shape, seed);
    let offered_at = Instant::now();
    ws.send(send(json!({"offer": {"sdp": offer.sdp()}})))
        .await
        .map_err(|e| format!("send offer: {e}"))?;
    let conn = to_gen.next_conn.fetch_add(1, Ordering::Relaxed);
    let mut session = None;
    // A frame now and then: the node closes a `/signal` socket silent for its
    // `--idle-timeout` (60 s), and a soak runs for longer.
    let mut keepalive = tokio::time::interval(KEEPALIVE);
    keepalive.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let message = tokio::select! {
            m = ws.next() => Some(m),
            _ = stop.wait_for(|s| *s) => break,
            _ = keepalive.tick() => None,
        };
        let Some(message) = message else {
            ws.send(Message::Ping(Default::default()))
                .await
                .map_err(|e| format!("send ping: {e}"))?;
            continue;
        };
        let text = match message {
            Some(Ok(Message::Text(t))) => t,
            Some(Ok(Message::Close(_))) | None => {
                return Err(Ended::Failed("the node closed /signal".into()));
            }
            Some(Ok(_)) => continue,
            Some(Err(e)) => return Err(Ended::Failed(format!("/signal: {e}"))),
        };
        let v: Value = serde_json::from_str(text.as_str()).map_err(|e| format!("json: {e}"))?;
        if let Some(sdp) = v.pointer("/answer/sdp").and_then(Value::as_str) {
            let s = offer.accept(sdp).map_err(|e| format!("answer: {e:?}"))?;
            to_gen.send(ToGen::Add(Box::new(Join {
                conn,
                room,
                publishes,
                session: s.clone(),
                offered_at,
            })));
            session = Some(s);
        } else if let Some(sdp) = v.pointer("/offer/sdp").and_then(Value::as_str) {
            let Some(s) = session.as_mut() else {
                return Err(Ended::Failed("an offer before the answer".into()));
            };
            let (answer, tracks) = s.answer(sdp).map_err(|e| format!("node offer: {e:?}"))?;
            if !tracks.is_empty() {
                to_gen.send(ToGen::Receive { conn, tracks });
            }
            // The answer echoes the offer's id (absent: 0, as the node reads it).
            let id = v.pointer("/offer/id").and_then(Value::as_u64).unwrap_or(0);
            ws.send(send(json!({"answer": {"sdp": answer, "id": id}})))
                .await
                .map_err(|e| format!("send answer: {e}"))?;
        } else if let Some(next) = v.pointer("/redirect/signalUrl").and_then(Value::as_str) {
            return Err(Ended::Redirect(next.to_owned()));
        } else if let Some(e) = v.get("error") {
            return Err(Ended::Failed(format!("node error: {e}")));
        }
    }
    let _ = ws.close(None).await;
    Ok(session.is_some().then_some(conn))
}

/// One WHIP publisher, then its WHEP player once its room is sending.
async fn participant_whip(
    plan: &Plan,
    to_gen: &ToGenerator,
    room: usize,
    p: usize,
    seed: u64,
    mut stop: watch::Receiver<bool>,
) -> Result<(), String> {
    let name = room_name(plan, room);
    let mut locations = Vec::new();
    let publish = plan.publish_shape();
    let whip = format!("/whip/{name}?identity={}", identity(room, p));
    locations.extend(negotiate_http(plan, to_gen, room, &whip, publish, seed).await?);
    // The player: once every publisher of the room sends.
    let others = plan.participants.saturating_sub(1);
    let ready_by = Instant::now() + STEP_TIMEOUT * 3;
    while to_gen.live.publishing(room) < plan.participants {
        if Instant::now() > ready_by {
            return Err(format!("room {name}: its publishers did not all connect"));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    if others > 0 {
        let play = OfferShape {
            publish: false,
            receive_audio: others,
            receive_video: others,
            simulcast: false,
            data: false,
        };
        let whep = format!("/whep/{name}?identity={}-view", identity(room, p));
        let seed = seed ^ 0x5555_5555;
        locations.extend(negotiate_http(plan, to_gen, room, &whep, play, seed).await?);
    }
    let _ = stop.wait_for(|s| *s).await;
    for l in locations {
        let _ = request(plan.http, "DELETE", &l, None).await;
    }
    Ok(())
}

/// One WHIP or WHEP session: POSTs an offer of `shape` to `path`, hands the
/// negotiated connection to the generator, and returns the session's `Location`.
async fn negotiate_http(
    plan: &Plan,
    to_gen: &ToGenerator,
    room: usize,
    path: &str,
    shape: OfferShape,
    seed: u64,
) -> Result<Option<String>, String> {
    let offer = offer_for(plan, shape, seed);
    let offered_at = Instant::now();
    let (answer, location) = post(plan.http, path, offer.sdp()).await?;
    let session = offer
        .accept(&answer)
        .map_err(|e| format!("{path}: the answer: {e:?}"))?;
    to_gen.send(ToGen::Add(Box::new(Join {
        conn: to_gen.next_conn.fetch_add(1, Ordering::Relaxed),
        room,
        publishes: shape.publish,
        session,
        offered_at,
    })));
    Ok(location)
}

/// POSTs an SDP offer; the answer and the session's `Location`.
async fn post(http: SocketAddr, path: &str, sdp: &str) -> Result<(String, Option<String>), String> {
    let (status, headers, body) = request(http, "POST", path, Some(sdp)).await?;
    if status != 201 {
        return Err(format!("POST {path}: {status} {}", body.trim()));
    }
    Ok((body, headers.get("location").cloned()))
}

/// One HTTP/1.1 request on a connection of its own (`Connection: close`): status,
/// headers (lower-cased names) and body.
async fn request(
    http: SocketAddr,
    method: &str,
    path: &str,
    sdp: Option<&str>,
) -> Result<(u16, HashMap<String, String>, String), String> {
    let exchange = async {
        let mut s = TcpStream::connect(http).await.map_err(|e| e.to_string())?;
        let body = sdp.unwrap_or_default();
        let content_type = if sdp.is_some() {
            "Content-Type: application/sdp\r\n"
        } else {
            ""
        };
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {http}\r\n{content_type}Content-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        s.write_all(head.as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        s.write_all(body.as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).await.map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&raw).into_owned();
        let (head, body) = text
            .split_once("\r\n\r\n")
            .ok_or_else(|| "a response without a header".to_owned())?;
        let mut lines = head.split("\r\n");
        let status = lines
            .next()
            .and_then(|l| l.split(' ').nth(1))
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| "no status line".to_owned())?;
        let headers = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        Ok::<_, String>((status, headers, body.to_owned()))
    };
    tokio::time::timeout(STEP_TIMEOUT, exchange)
        .await
        .map_err(|_| format!("{method} {path}: timed out"))?
}
