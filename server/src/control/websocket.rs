//! The `/signal` WebSocket once upgraded: text frames of JSON in and out, one
//! `SignalService` session ([`run_session`]) per socket.
//!
//! A message over [`MAX_SIGNAL_MESSAGE_BYTES`] gets an `error` and close code 1009
//! (RFC 6455 §7.4.1).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade, close_code};
use axum::response::Response;
use futures_util::{SinkExt, StreamExt};
use shoal_proto::v1::{signal_request, signal_response};
use tokio::sync::{OwnedSemaphorePermit, mpsc, oneshot};
use tonic::Status;

use super::grpc::ControlState;
use super::http::MAX_SIGNAL_MESSAGE_BYTES;
use super::participants::SIGNAL_QUEUE_LEN;
use super::signal::{Inbound, error_message, run_session};

/// How long a `/signal` socket closed for a message over the limit stays open after
/// its close frame, so the client reads the frame before the socket goes (a lingering
/// close: the unread rest of the message turns the socket's close into a reset).
pub const CLOSE_LINGER: Duration = Duration::from_secs(2);

/// Completes the upgrade of an admitted `/signal` request and serves the socket;
/// `slot`, its place among the node's signalling connections, is held until the
/// socket ends.
pub(super) fn accept(
    upgrade: WebSocketUpgrade,
    state: Arc<ControlState>,
    token: Option<String>,
    unauthenticated: Option<OwnedSemaphorePermit>,
    slot: OwnedSemaphorePermit,
) -> Response {
    upgrade
        .max_message_size(MAX_SIGNAL_MESSAGE_BYTES)
        .max_frame_size(MAX_SIGNAL_MESSAGE_BYTES)
        .on_upgrade(move |socket| async move {
            serve_socket(state, socket, token, unauthenticated).await;
            drop(slot);
        })
}

/// One WebSocket: text frames of JSON in, JSON out, through [`run_session`].
///
/// A message over [`MAX_SIGNAL_MESSAGE_BYTES`] ends the session: an `error` message
/// says what was refused, then the close frame says 1009, "message too big" (RFC
/// 6455 §7.4.1), and the socket lingers for [`CLOSE_LINGER`]. Any other read error
/// ends the session as a closed socket does.
async fn serve_socket(
    state: Arc<ControlState>,
    socket: WebSocket,
    token: Option<String>,
    unauthenticated: Option<OwnedSemaphorePermit>,
) {
    let (mut sink, stream) = socket.split();
    let too_big = Arc::new(AtomicBool::new(false));
    let saw_too_big = too_big.clone();
    // Ends at a close frame or an error; pings are answered by the library.
    let inbound = stream
        .scan(false, move |ended, frame| {
            let next = match frame {
                _ if *ended => None,
                Ok(Message::Close(_)) => None,
                Ok(frame) => Some(decode(frame)),
                Err(e) => {
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
    let (out, mut messages) = mpsc::channel(SIGNAL_QUEUE_LEN);
    let (done, result) = oneshot::channel::<Option<Status>>();
    let writer = tokio::spawn(async move {
        while let Some(message) = messages.recv().await {
            if send_json(&mut sink, &message).await.is_err() {
                return;
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
    let ended = run_session(state, Box::pin(inbound), out, token, unauthenticated).await;
    let _ = done.send(ended.err());
    let _ = writer.await;
}

/// A read error that is a message over [`MAX_SIGNAL_MESSAGE_BYTES`], as the status
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
