//! The `/signal` WebSocket once upgraded: text frames of JSON in and out, one
//! `SignalService` session ([`run_session`]) per socket.
//!
//! A message over `--max-signal-message-bytes` gets an `error` and close code 1009
//! (RFC 6455 §7.4.1). A socket from which no frame (a pong included) comes for
//! `--idle-timeout` is closed with 1001, "going away"; shoal pings it after half
//! that silence (§5.5.2), which a live client answers by itself, so only a dead or
//! silent one goes. Its read buffer starts at [`SIGNAL_READ_BUFFER_BYTES`] and grows
//! only for a large message: an idle socket costs about 20 KiB where tungstenite's
//! preallocated 128 KiB made it about 145 KiB.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade, close_code};
use axum::response::Response;
use futures_util::{SinkExt, StreamExt};
use shoal_proto::v1::{signal_request, signal_response};
use tokio::sync::{OwnedSemaphorePermit, oneshot};
use tokio::time::Instant;
use tonic::Status;

use super::connections::{Limit, Slot};
use super::grpc::ControlState;
use super::outbox::{Failure, Outbox};
use super::signal::{Inbound, error_message, run_session};

/// How long a `/signal` socket closed for a message over the limit stays open after
/// its close frame, so the client reads the frame before the socket goes (a lingering
/// close: the unread rest of the message turns the socket's close into a reset).
pub const CLOSE_LINGER: Duration = Duration::from_secs(2);
/// How long a `/signal` socket's writer may take, once the session ended, to send
/// what is left and the close frame to a client that does not read; then the
/// socket is dropped.
pub const WRITER_GRACE: Duration = Duration::from_secs(5);
/// The read buffer a `/signal` socket starts with (tungstenite preallocates 128 KiB
/// by default); signalling messages are small, and a large one grows it.
pub const SIGNAL_READ_BUFFER_BYTES: usize = 4 * 1024;

/// Completes the upgrade of an admitted `/signal` request and serves the socket;
/// `slot`, its place among the node's signalling connections, is held until the
/// socket ends.
pub(super) fn accept(
    upgrade: WebSocketUpgrade,
    state: Arc<ControlState>,
    token: Option<String>,
    unauthenticated: Option<OwnedSemaphorePermit>,
    slot: Slot,
    from: Option<IpAddr>,
) -> Response {
    let limits = state.signal_limits();
    upgrade
        .read_buffer_size(SIGNAL_READ_BUFFER_BYTES)
        .max_message_size(limits.message_bytes)
        .max_frame_size(limits.message_bytes)
        // Each message goes to the socket as it is sent (the writer flushes every
        // one), and the library's buffer never holds more than one: a message's
        // JSON is at most ~6 times its encoded size (a string of control
        // characters, each escaped as \u00XX), and no message is larger than the
        // queue's bound. Without a cap the buffer would be unbounded.
        .write_buffer_size(0)
        .max_write_buffer_size(limits.queue_bytes.saturating_mul(8))
        .on_upgrade(move |socket| async move {
            serve_socket(state, socket, token, unauthenticated, from).await;
            drop(slot);
        })
}

/// One WebSocket: text frames of JSON in, JSON out, through [`run_session`].
///
/// A message over `--max-signal-message-bytes` ends the session: an `error` message
/// says what was refused, then the close frame says 1009, "message too big" (RFC
/// 6455 §7.4.1), and the socket lingers for [`CLOSE_LINGER`]. No frame for the idle
/// timeout ends it with 1001, "going away" (§7.4.1); a ping goes out after half of
/// it (§5.5.2), and any frame, its pong included, starts the wait anew. Any other
/// read error ends the session as a closed socket does. The writer has
/// [`WRITER_GRACE`] to finish once the session has ended.
///
/// The writer drains the connection's [`Outbox`]; a write that does not complete
/// within `--signal-write-timeout` ends the session (SIGNAL_SLOW_READER) and the
/// writer gives up on the socket. A session the node ends (a `leave` the client
/// reads first, a slow reader among them) closes with 1000: RFC 6455 §7.4.1's 1008
/// is for a message received, 1011 for an unexpected condition, and the `leave`
/// says why.
async fn serve_socket(
    state: Arc<ControlState>,
    socket: WebSocket,
    token: Option<String>,
    unauthenticated: Option<OwnedSemaphorePermit>,
    from: Option<IpAddr>,
) {
    let idle = state.signal_limits().idle_timeout;
    let counters = state.limit_counters().clone();
    let (mut sink, stream) = socket.split();
    let too_big = Arc::new(AtomicBool::new(false));
    let saw_too_big = too_big.clone();
    let went_idle = Arc::new(AtomicBool::new(false));
    let saw_idle = went_idle.clone();
    let heard = Heard::new();
    let heard_by_reader = heard.clone();
    // Each frame, or `None` when none came within `idle`.
    let frames = futures_util::stream::unfold(stream, move |mut stream| {
        let heard = heard_by_reader.clone();
        async move {
            match tokio::time::timeout(idle, stream.next()).await {
                Ok(Some(frame)) => {
                    heard.now();
                    Some((Some(frame), stream))
                }
                Ok(None) => None,
                Err(_) => Some((None, stream)),
            }
        }
    });
    // Ends at a close frame, an error or silence; pings are answered by the library.
    let inbound = frames
        .scan(false, move |ended, frame| {
            let next = match frame {
                _ if *ended => None,
                None => {
                    *ended = true;
                    saw_idle.store(true, Ordering::Relaxed);
                    counters.count(Limit::SignalIdle);
                    Some(Some(Inbound::Failed(Status::deadline_exceeded(format!(
                        "no frame from the client for {} s",
                        idle.as_secs()
                    )))))
                }
                Some(Ok(Message::Close(_))) => None,
                Some(Ok(frame)) => Some(decode(frame)),
                Some(Err(e)) => {
                    *ended = true;
                    too_large(&e).map(|status| {
                        saw_too_big.store(true, Ordering::Relaxed);
                        Some(Inbound::Failed(status))
                    })
                }
            };
            std::future::ready(next)
        })
        .filter_map(std::future::ready);
    let write_timeout = state.signal_limits().write_timeout;
    let out = Outbox::new(state.signal_limits().queue_bytes);
    let (done, result) = oneshot::channel::<Option<Status>>();
    let (writer_state, writer_out) = (state.clone(), out.clone());
    let mut writer = tokio::spawn(async move {
        // The silence a ping was sent for; one ping per silence.
        let mut pinged_for = None;
        loop {
            let (last, at) = heard.last();
            let ping_at = (pinged_for != Some(last)).then_some(at + idle / 2);
            // `next_outgoing` takes nothing from the queue until it returns, so the
            // ping's branch winning loses no message.
            tokio::select! {
                message = writer_state.next_outgoing(&writer_out) => match message {
                    Some(message) => {
                        let Ok(json) = serde_json::to_string(message.message().as_ref()) else {
                            continue;
                        };
                        // Only the JSON is held while the write waits.
                        drop(message);
                        let sent =
                            send_within(&mut sink, Message::Text(json.into()), write_timeout).await;
                        if !written(sent, &writer_out) {
                            return;
                        }
                    }
                    None => break,
                },
                () = super::listen::sleep_until(ping_at) => {
                    let sent = send_within(&mut sink, Message::Ping(Bytes::new()), write_timeout).await;
                    if !written(sent, &writer_out) {
                        return;
                    }
                    pinged_for = Some(last);
                }
            }
        }
        let close = match result.await {
            Ok(Some(status)) if too_big.load(Ordering::Relaxed) => {
                let _ = send_json(&mut sink, &error_message(&status)).await;
                CloseFrame {
                    code: close_code::SIZE,
                    reason: "message too big".into(),
                }
            }
            Ok(Some(status)) if went_idle.load(Ordering::Relaxed) => {
                let _ = send_json(&mut sink, &error_message(&status)).await;
                CloseFrame {
                    code: close_code::AWAY,
                    reason: "idle".into(),
                }
            }
            Ok(Some(status)) => {
                let _ = send_json(&mut sink, &error_message(&status)).await;
                CloseFrame {
                    code: close_code::POLICY,
                    reason: super::signal::code_name(status.code()).into(),
                }
            }
            _ => CloseFrame {
                code: close_code::NORMAL,
                reason: "".into(),
            },
        };
        let lingers = close.code == close_code::SIZE;
        let _ = sink.send(Message::Close(Some(close))).await;
        if lingers {
            // The rest of the refused message is unread: closing now would reset the
            // connection, and the client's kernel may drop our close frame with it.
            tokio::time::sleep(CLOSE_LINGER).await;
        }
    });
    let ended = run_session(state, Box::pin(inbound), out, token, unauthenticated, from).await;
    let _ = done.send(ended.err());
    // A client that does not read would hold the writer, and the socket, forever.
    if tokio::time::timeout(WRITER_GRACE, &mut writer)
        .await
        .is_err()
    {
        writer.abort();
    }
}

/// When a `/signal` socket last heard from its client: milliseconds since the
/// socket opened, shared by its reader and its writer.
#[derive(Clone)]
struct Heard {
    opened: Instant,
    ms: Arc<AtomicU64>,
}

impl Heard {
    fn new() -> Heard {
        Heard {
            opened: Instant::now(),
            ms: Arc::new(AtomicU64::new(0)),
        }
    }

    /// A frame came now.
    fn now(&self) {
        let ms = u64::try_from(self.opened.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.ms.store(ms, Ordering::Relaxed);
    }

    /// The last frame's time, as stored and as an instant.
    fn last(&self) -> (u64, Instant) {
        let ms = self.ms.load(Ordering::Relaxed);
        (ms, self.opened + Duration::from_millis(ms))
    }
}

/// A read error that is a message over `--max-signal-message-bytes`, as the status
/// that ends the session; `None` for any other error.
fn too_large(e: &axum::Error) -> Option<Status> {
    let source = std::error::Error::source(e)?;
    match source.downcast_ref::<tungstenite::Error>()? {
        tungstenite::Error::Capacity(tungstenite::error::CapacityError::MessageTooLong {
            size,
            max_size,
        }) => Some(Status::resource_exhausted(format!(
            "a message of {size} bytes was refused: /signal takes messages of at most \
             {max_size} bytes"
        ))),
        _ => None,
    }
}

/// A frame as a session message: JSON text of one `signal_request::Message`.
fn decode(frame: Message) -> Option<Inbound> {
    match frame {
        Message::Text(text) => Some(
            match serde_json::from_str::<signal_request::Message>(text.as_str()) {
                Ok(message) => Inbound::Message(message),
                Err(e) if e.is_data() => Inbound::Invalid(Status::invalid_argument(format!(
                    "not a signalling message ({e}); expected one of join, offer, answer, \
                     trickle, leave, e.g. {{\"join\": {{\"room\": \"lobby\"}}}}"
                ))),
                Err(e) => Inbound::Invalid(Status::invalid_argument(format!("invalid JSON: {e}"))),
            },
        ),
        Message::Binary(_) => Some(Inbound::Invalid(Status::invalid_argument(
            "binary frames are not accepted: send JSON in text frames",
        ))),
        _ => None,
    }
}

async fn send_json<S>(sink: &mut S, message: &signal_response::Message) -> Result<(), ()>
where
    S: futures_util::Sink<Message> + Unpin,
{
    let json = serde_json::to_string(message).map_err(|_| ())?;
    sink.send(Message::Text(json.into())).await.map_err(|_| ())
}

/// Sends `message` (and flushes it), giving up after `limit`.
async fn send_within(
    sink: &mut futures_util::stream::SplitSink<WebSocket, Message>,
    message: Message,
    limit: Duration,
) -> Result<Result<(), axum::Error>, tokio::time::error::Elapsed> {
    tokio::time::timeout(limit, sink.send(message)).await
}

/// Whether a write went through; if not, tells `out` why the writer stops: a
/// socket that failed ends the session through its reading half, a write that was
/// not read in time ends it as a slow reader (the participant is removed, then the
/// socket goes).
fn written(
    sent: Result<Result<(), axum::Error>, tokio::time::error::Elapsed>,
    out: &Outbox,
) -> bool {
    match sent {
        Ok(Ok(())) => true,
        Ok(Err(_)) => {
            out.abandon();
            false
        }
        Err(_) => {
            out.fail(Failure::Stalled);
            false
        }
    }
}
