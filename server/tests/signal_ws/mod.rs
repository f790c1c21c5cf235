//! A `/signal` WebSocket client for tests: the socket type and its JSON messages.

#![allow(dead_code)]

use std::time::Duration;

use futures_util::StreamExt;
use serde_json::Value;
use tokio_tungstenite::tungstenite::Message;

/// How long a test waits for one message.
pub const WAIT: Duration = Duration::from_secs(10);

/// A client's `/signal` socket.
pub type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// The next JSON text message, or `None` once the socket closes; fails after
/// [`WAIT`] without one.
pub async fn next_json(ws: &mut Ws) -> Option<Value> {
    loop {
        let frame = tokio::time::timeout(WAIT, ws.next())
            .await
            .expect("a message in time");
        match frame {
            Some(Ok(Message::Text(t))) => return Some(serde_json::from_str(&t).expect("JSON")),
            Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return None,
            Some(Ok(_)) => {}
        }
    }
}
