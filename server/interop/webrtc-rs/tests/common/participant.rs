//! A webrtc-rs 0.21 participant of a shoal room: the Rust twin of
//! `scripts/interop/aiortc_room_client.py`, with the same channels, messages, order of
//! steps, checks and report (see [`run_participant`]).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::BytesMut;
use rtc::ice::mdns::MulticastDnsMode;
use rtc::ice::network_type::NetworkType;
use tokio::sync::watch;
use tokio::time::Instant;
use webrtc::data_channel::{DataChannel, DataChannelEvent, RTCDataChannelInit};
use webrtc::peer_connection::{
    PeerConnection, PeerConnectionBuilder, PeerConnectionEventHandler, RTCConfigurationBuilder,
    RTCIceGatheringState, RTCPeerConnectionState, RTCSessionDescription, SettingEngineBuilder,
};

use super::protocol::{Message, ORDERED, Report, Signal, Tally, UNORDERED, payload};
use super::whip;

/// How long each phase may take (open, hearing the peer, receiving everything, the
/// peer's `done`), as the Python client's `--timeout` (default 60 s).
pub const PHASE_TIMEOUT: Duration = Duration::from_secs(60);
/// How long ICE gathering may take before the offer is sent.
const GATHER_TIMEOUT: Duration = Duration::from_secs(10);
/// `ready:` is repeated this often until the other participant is heard.
const READY_INTERVAL: Duration = Duration::from_millis(100);
/// Sending pauses while more than this many bytes on `ordered` are unacknowledged.
const BUFFERED_HIGH: usize = 512 * 1024;
/// How often a paused sender looks again.
const BUFFERED_RECHECK: Duration = Duration::from_millis(5);
/// How long closing the connection may take.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// One boolean that tasks wait on; set once, never cleared.
#[derive(Clone)]
struct Flag(Arc<watch::Sender<bool>>);

impl Flag {
    fn new() -> Self {
        Flag(Arc::new(watch::channel(false).0))
    }
    fn set(&self) {
        self.0.send_replace(true);
    }
    fn is_set(&self) -> bool {
        *self.0.borrow()
    }
    /// Waits until set, for at most `timeout`; whether it was set.
    async fn wait(&self, timeout: Duration) -> bool {
        let mut rx = self.0.subscribe();
        tokio::time::timeout(timeout, rx.wait_for(|set| *set))
            .await
            .is_ok_and(|r| r.is_ok())
    }
}

/// What the event handlers and the receiving tasks share with the sending side.
#[derive(Clone)]
struct Shared {
    tally: Arc<Mutex<Tally>>,
    gathered: Flag,
    failed: Flag,
    ordered_open: Flag,
    unordered_open: Flag,
    peer_heard: Flag,
    all_received: Flag,
    peer_done: Flag,
}

impl Shared {
    fn new(me: &str, count: u64) -> Self {
        Shared {
            tally: Arc::new(Mutex::new(Tally::new(me, count))),
            gathered: Flag::new(),
            failed: Flag::new(),
            ordered_open: Flag::new(),
            unordered_open: Flag::new(),
            peer_heard: Flag::new(),
            all_received: Flag::new(),
            peer_done: Flag::new(),
        }
    }

    fn tally(&self) -> std::sync::MutexGuard<'_, Tally> {
        self.tally.lock().expect("tally lock")
    }

    fn error(&self, what: String) {
        self.tally().report.ordered_errors.push(what);
    }
}

struct Handler(Shared);

#[async_trait::async_trait]
impl PeerConnectionEventHandler for Handler {
    async fn on_ice_gathering_state_change(&self, state: RTCIceGatheringState) {
        if state == RTCIceGatheringState::Complete {
            self.0.gathered.set();
        }
    }
    async fn on_connection_state_change(&self, state: RTCPeerConnectionState) {
        if state == RTCPeerConnectionState::Failed {
            self.0.failed.set();
        }
    }
}

/// Joins the room behind `whip_url` (a shoal WHIP endpoint, `?identity=` included) as
/// `me`, and runs the aiortc client's exchange with the room's other participant:
///
/// 1. channels `ordered` (reliable) and `unordered` (`ordered=false`,
///    `max_retransmits=0`); offer after ICE gathering completes, `POST`, apply the
///    answer;
/// 2. once `ordered` is open, `ready:<me>` on it every 100 ms until the peer's `ready:`
///    arrives, then once more;
/// 3. messages `0..count` (see [`payload`]) on both channels, pausing while more than
///    512 KiB are unacknowledged on `ordered`;
/// 4. once `count` data messages have arrived on `ordered`, `done:<me>`; then wait for
///    the peer's `done:`, and until shoal has acknowledged all we sent on `ordered`;
/// 5. WHIP `DELETE` and close.
///
/// Every received message is checked as the Python client checks it, into the
/// returned [`Report`]; a phase that times out, or a failed `DELETE`, is recorded in
/// `ordered_errors` as there. An error is returned only when the participant could not
/// join at all (or a send failed); the session is still deleted when it had been
/// created. Two calls with different identities can share a room.
pub async fn run_participant(whip_url: &str, me: &str, count: u64) -> Result<Report, String> {
    let shared = Shared::new(me, count);
    let pc = build_peer(&shared)
        .await
        .map_err(|e| format!("{me}: cannot build the peer connection: {e}"))?;
    let result = join_and_exchange(&pc, &shared, whip_url, me, count).await;
    let _ = tokio::time::timeout(CLOSE_TIMEOUT, pc.close()).await;
    result?;
    let report = shared.tally().report.clone();
    Ok(report)
}

async fn join_and_exchange(
    pc: &Arc<dyn PeerConnection>,
    shared: &Shared,
    whip_url: &str,
    me: &str,
    count: u64,
) -> Result<(), String> {
    let ordered = pc
        .create_data_channel(ORDERED, None)
        .await
        .map_err(|e| format!("{me}: create {ORDERED:?}: {e}"))?;
    let unordered = pc
        .create_data_channel(
            UNORDERED,
            Some(RTCDataChannelInit {
                ordered: false,
                max_retransmits: Some(0),
                ..Default::default()
            }),
        )
        .await
        .map_err(|e| format!("{me}: create {UNORDERED:?}: {e}"))?;
    tokio::spawn(receive(ordered.clone(), shared.clone(), true));
    tokio::spawn(receive(unordered.clone(), shared.clone(), false));

    let offer = pc
        .create_offer(None)
        .await
        .map_err(|e| format!("{me}: create offer: {e}"))?;
    pc.set_local_description(offer)
        .await
        .map_err(|e| format!("{me}: set local description: {e}"))?;
    if !shared.gathered.wait(GATHER_TIMEOUT).await {
        return Err(format!(
            "{me}: ICE gathering did not complete within {GATHER_TIMEOUT:?}"
        ));
    }
    let offer = pc
        .local_description()
        .await
        .ok_or_else(|| format!("{me}: no local description after gathering"))?;

    let session = whip::post_offer(whip_url, &offer.sdp).await?;
    let exchanged = async {
        let answer = RTCSessionDescription::answer(session.answer.clone())
            .map_err(|e| format!("{me}: the WHIP answer does not parse: {e}"))?;
        pc.set_remote_description(answer)
            .await
            .map_err(|e| format!("{me}: set remote description: {e}"))?;
        exchange(&*ordered, &*unordered, shared, me, count).await
    }
    .await;
    // Leave in every case, as the Python client's `finally` does.
    if let Err(e) = whip::delete(&session.resource).await {
        shared.error(format!("WHIP DELETE failed: {e}"));
    }
    exchanged
}

/// Steps 2 to 4 of [`run_participant`]. A timeout is recorded in the report; a failed
/// send is an error.
async fn exchange(
    ordered: &dyn DataChannel,
    unordered: &dyn DataChannel,
    shared: &Shared,
    me: &str,
    count: u64,
) -> Result<(), String> {
    let timed_out = |phase: &str| {
        let got = shared.tally().report.ordered_received;
        format!(
            "timed out {phase}: heard={} got={got} connection_failed={}",
            shared.peer_heard.is_set(),
            shared.failed.is_set()
        )
    };
    let send_failed = |label: &str, e: BoxError| format!("{me}: send on {label:?}: {e}");

    if !shared.ordered_open.wait(PHASE_TIMEOUT).await
        || !shared.unordered_open.wait(PHASE_TIMEOUT).await
    {
        let what = timed_out("waiting for the channels to open");
        shared.error(what);
        return Ok(());
    }

    // Until the other participant is heard (messages sent before it joined reach no
    // one), say who we are every 100 ms; then once more, so it hears us too.
    let ready = format!("ready:{me}");
    let deadline = Instant::now() + PHASE_TIMEOUT;
    while !shared.peer_heard.is_set() {
        if Instant::now() >= deadline {
            let what = timed_out("waiting for the peer's ready");
            shared.error(what);
            return Ok(());
        }
        ordered
            .send_text(&ready)
            .await
            .map_err(|e| send_failed(ORDERED, e.into()))?;
        shared.peer_heard.wait(READY_INTERVAL).await;
    }
    ordered
        .send_text(&ready)
        .await
        .map_err(|e| send_failed(ORDERED, e.into()))?;

    for i in 0..count {
        let message = payload(me, i);
        send(ordered, &message)
            .await
            .map_err(|e| send_failed(ORDERED, e))?;
        send(unordered, &message)
            .await
            .map_err(|e| send_failed(UNORDERED, e))?;
        shared.tally().report.sent += 1;
        let deadline = Instant::now() + PHASE_TIMEOUT;
        while ordered
            .outstanding_bytes()
            .await
            .map_err(|e| send_failed(ORDERED, e.into()))?
            > BUFFERED_HIGH
        {
            if Instant::now() >= deadline {
                let what = timed_out("waiting for the send buffer to drain");
                shared.error(what);
                return Ok(());
            }
            tokio::time::sleep(BUFFERED_RECHECK).await;
        }
    }

    if !shared.all_received.wait(PHASE_TIMEOUT).await {
        let what = timed_out("waiting for every message");
        shared.error(what);
        return Ok(());
    }
    ordered
        .send_text(&format!("done:{me}"))
        .await
        .map_err(|e| send_failed(ORDERED, e.into()))?;
    if !shared.peer_done.wait(PHASE_TIMEOUT).await {
        let what = timed_out("waiting for the peer's done");
        shared.error(what);
        return Ok(());
    }
    // Leave only once shoal has acknowledged everything sent on `ordered`, our `done`
    // too: what shoal acknowledged it has relayed, so leaving loses nothing. Without
    // this the `done` can still be queued here when the DELETE removes us.
    let deadline = Instant::now() + PHASE_TIMEOUT;
    while ordered
        .outstanding_bytes()
        .await
        .map_err(|e| send_failed(ORDERED, e.into()))?
        > 0
    {
        if Instant::now() >= deadline {
            let what = timed_out("waiting for shoal to acknowledge what we sent");
            shared.error(what);
            return Ok(());
        }
        tokio::time::sleep(BUFFERED_RECHECK).await;
    }
    Ok(())
}

async fn send(channel: &dyn DataChannel, message: &Message) -> Result<(), BoxError> {
    match message {
        Message::Text(text) => channel.send_text(text).await?,
        Message::Binary(bytes) => channel.send(BytesMut::from(bytes.as_slice())).await?,
    }
    Ok(())
}

/// Takes every event of one channel until it closes: opening, and each message into
/// the tally (`ordered` says which channel this is).
async fn receive(channel: Arc<dyn DataChannel>, shared: Shared, ordered: bool) {
    while let Some(event) = channel.poll().await {
        match event {
            DataChannelEvent::OnOpen if ordered => shared.ordered_open.set(),
            DataChannelEvent::OnOpen => shared.unordered_open.set(),
            DataChannelEvent::OnMessage(m) => {
                let message = Message::received(m.is_string, &m.data);
                if !ordered {
                    shared.tally().on_unordered(&message);
                    continue;
                }
                let signal = shared.tally().on_ordered(&message);
                match signal {
                    Some(Signal::PeerHeard) => shared.peer_heard.set(),
                    Some(Signal::AllReceived) => shared.all_received.set(),
                    Some(Signal::PeerDone) => shared.peer_done.set(),
                    None => {}
                }
            }
            DataChannelEvent::OnClose => break,
            _ => {}
        }
    }
}

/// A peer connection for a loopback-only machine: no ICE servers (no STUN or TURN),
/// host candidates on IPv4 UDP, loopback allowed, no mDNS.
async fn build_peer(shared: &Shared) -> Result<Arc<dyn PeerConnection>, BoxError> {
    // In webrtc-rs 0.21 the host candidates are the sockets bound from
    // `with_udp_addrs`, so binding 127.0.0.1 is what puts the candidate on loopback;
    // `with_include_loopback_candidate` keeps it from being filtered out, and mDNS
    // would otherwise replace the address with a .local name shoal cannot resolve.
    let settings = SettingEngineBuilder::new()
        .with_network_types(vec![NetworkType::Udp4])
        .with_include_loopback_candidate(true)
        .with_multicast_dns_mode(MulticastDnsMode::Disabled)
        .build();
    let runtime = webrtc::runtime::default_runtime().ok_or("no webrtc runtime compiled in")?;
    let pc = PeerConnectionBuilder::new()
        .with_configuration(RTCConfigurationBuilder::new().build())
        .with_setting_engine(settings)
        .with_handler(Arc::new(Handler(shared.clone())))
        .with_runtime(runtime)
        .with_udp_addrs(vec!["127.0.0.1:0".to_string()])
        .build()
        .await?;
    Ok(Arc::new(pc))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::run_participant;

    /// Reads one HTTP/1.1 request with a Content-Length body; its body.
    async fn read_request(stream: &mut tokio::net::TcpStream) -> String {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            let n = stream.read(&mut chunk).await.expect("read the request");
            assert!(n > 0, "the request ended early: {buf:?}");
            buf.extend_from_slice(&chunk[..n]);
            let text = String::from_utf8_lossy(&buf).into_owned();
            if let Some(end) = text.find("\r\n\r\n") {
                let length: usize = text[..end]
                    .lines()
                    .find_map(|l| {
                        let (name, value) = l.split_once(':')?;
                        name.eq_ignore_ascii_case("content-length")
                            .then(|| value.trim().parse().expect("a length"))
                    })
                    .unwrap_or(0);
                if buf.len() >= end + 4 + length {
                    return text[end + 4..end + 4 + length].to_owned();
                }
            }
        }
    }

    /// Without shoal: the offer that a WHIP endpoint would get is data-only and has a
    /// host candidate on 127.0.0.1 (not an mDNS name), and a refused POST is an error.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_offer_has_a_loopback_host_candidate() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("an address");
        let endpoint = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.expect("accept");
            let offer = read_request(&mut stream).await;
            stream
                .write_all(b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                .await
                .expect("respond");
            offer
        });
        let joined = tokio::time::timeout(
            Duration::from_secs(30),
            run_participant(&format!("http://{addr}/whip/r?identity=t"), "t", 1),
        )
        .await
        .expect("the participant gives up within 30 s");
        let error = joined.expect_err("a 503 is not a join");
        assert!(error.contains("503"), "{error}");
        let offer = endpoint.await.expect("the endpoint task");
        assert!(offer.contains("m=application"), "{offer}");
        assert!(offer.contains("webrtc-datachannel"), "{offer}");
        assert!(
            !offer.contains("m=audio") && !offer.contains("m=video"),
            "{offer}"
        );
        let candidates: Vec<&str> = offer
            .lines()
            .filter(|l| l.starts_with("a=candidate:"))
            .collect();
        assert!(
            candidates
                .iter()
                .any(|c| c.contains(" 127.0.0.1 ") && c.contains("typ host")),
            "{candidates:?}"
        );
        assert!(
            !candidates.iter().any(|c| c.contains(".local")),
            "{candidates:?}"
        );
    }
}
