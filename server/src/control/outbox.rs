//! A signalling connection's outgoing queue, one mechanism for the `/signal`
//! WebSocket and the `SignalService` stream: bounded in bytes
//! (`--signal-queue-bytes`), watched for a writer that stops making progress
//! (`--signal-write-timeout`), and holding a join's later pages as a cursor that
//! becomes a page only when the writer reaches it.
//!
//! Producers (room events under the [`super::participants::Members`] lock, the
//! session's own replies) push without waiting. A push that would take the queue past
//! its bound fails it instead: what it held is dropped at once, and the session,
//! woken by [`Outbox::failed`], removes its participant (leave reason
//! SIGNAL_SLOW_READER), queues the `leave` as the last message and closes. A client
//! that misses room events would have a wrong view of the room, so nothing is ever
//! dropped from a connection that goes on.
//!
//! A room event is built once and queued for every listener as the same
//! [`Outgoing`] (an `Arc`); each listener's bound counts its encoded size. What a
//! connection owes is bounded, and what the node holds for a room's events does not
//! grow with the number of listeners.
//!
//! Locks: the queue's own, taken after the room directory and `Members` and held
//! for a few `VecDeque` operations; nothing is taken while it is held.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use shoal_proto::v1::signal_response;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::join_pages::JoinCursor;

/// A message for clients, shared by every connection it goes to, with its encoded
/// size (what it counts against each connection's bound).
#[derive(Clone, Debug)]
pub struct Outgoing {
    message: Arc<signal_response::Message>,
    bytes: usize,
}

impl Outgoing {
    /// `message`, measured once.
    pub fn new(message: signal_response::Message) -> Outgoing {
        Outgoing {
            bytes: message.encoded_len(),
            message: Arc::new(message),
        }
    }

    /// Its protobuf encoding's length.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The message (shared).
    pub fn message(&self) -> &Arc<signal_response::Message> {
        &self.message
    }

    /// The message, to take it (a clone only while it is shared).
    pub fn into_message(self) -> signal_response::Message {
        Arc::unwrap_or_clone(self.message)
    }
}

/// Why a connection's queue gave up on its client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// A push would have taken what the connection owes past the bound.
    Overflow {
        /// What it would have owed, in bytes.
        owed_bytes: usize,
    },
    /// One write did not complete within the write timeout.
    Stalled,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Overflow { owed_bytes } => write!(
                f,
                "the client did not read its signalling connection: {owed_bytes} bytes \
                 were owed to it"
            ),
            Failure::Stalled => f.write_str(
                "the client did not read its signalling connection: a write did not \
                 complete in time",
            ),
        }
    }
}

/// Why a push was not queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// This push failed the queue (see [`Failure::Overflow`]).
    #[error("the signalling queue is over its bound")]
    Overflow,
    /// The queue failed before, or the connection is ending.
    #[error("the signalling connection is ending")]
    Ended,
}

/// What the writer takes next.
#[derive(Debug)]
pub enum Next {
    /// A message to write.
    Message(Outgoing),
    /// Participants still owed to a join: the writer makes the next page (see
    /// [`super::join_pages`]) and gives the rest back with
    /// [`Outbox::resume_pages`].
    Pages(JoinCursor),
}

#[derive(Debug)]
enum Item {
    Message(Outgoing),
    Pages(JoinCursor),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Taking messages.
    Open,
    /// Given up on the client: empty, waiting for the session's last message.
    Failed(Failure),
    /// No more messages; the writer ends once it has written what is queued.
    Closed,
}

#[derive(Debug)]
struct State {
    items: VecDeque<Item>,
    /// The encoded size of the messages in `items`.
    bytes: usize,
    /// Since when the writer has owed progress: it has taken something to write,
    /// or something waits for it. `None` while it waits for something to write.
    busy_since: Option<Instant>,
    phase: Phase,
    /// Items the writer has taken, ever.
    taken: u64,
}

/// One connection's outgoing queue (see the module's doc).
#[derive(Debug)]
pub struct Outbox {
    state: Mutex<State>,
    /// Wakes the writer: something to write, or the end.
    to_writer: Notify,
    /// Wakes the session: the queue failed, or the writer has become busy.
    to_session: Notify,
    limit_bytes: usize,
}

impl Outbox {
    /// An empty, open queue that holds at most `limit_bytes` of encoded messages.
    pub fn new(limit_bytes: usize) -> Arc<Outbox> {
        Arc::new(Outbox {
            state: Mutex::new(State {
                items: VecDeque::new(),
                bytes: 0,
                busy_since: None,
                phase: Phase::Open,
                taken: 0,
            }),
            to_writer: Notify::new(),
            to_session: Notify::new(),
            limit_bytes,
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `message`; one that would take the queue past its bound fails the
    /// queue instead (and wakes the session).
    pub fn push(&self, message: &Outgoing) -> Result<(), Refused> {
        let mut state = self.state();
        if state.phase != Phase::Open {
            return Err(Refused::Ended);
        }
        let owed_bytes = state.bytes.saturating_add(message.bytes);
        if owed_bytes > self.limit_bytes {
            self.fail_locked(&mut state, Failure::Overflow { owed_bytes });
            return Err(Refused::Overflow);
        }
        state.bytes = owed_bytes;
        state.items.push_back(Item::Message(message.clone()));
        self.became_busy(&mut state);
        drop(state);
        self.to_writer.notify_one();
        Ok(())
    }

    /// Queues a join's remaining participants, made into pages as the writer gets
    /// to them. Not counted against the bound: a cursor holds no participant.
    pub fn push_pages(&self, cursor: JoinCursor) {
        self.queue_pages(cursor, false);
    }

    /// Gives back what is left of a join's participants after a page, ahead of
    /// everything queued since: the pages come before any room event.
    pub fn resume_pages(&self, cursor: JoinCursor) {
        self.queue_pages(cursor, true);
    }

    /// Queues a join's pages at the back, or at the `front`, of an open queue.
    fn queue_pages(&self, cursor: JoinCursor, front: bool) {
        let mut state = self.state();
        if state.phase != Phase::Open {
            return;
        }
        if front {
            state.items.push_front(Item::Pages(cursor));
        } else {
            state.items.push_back(Item::Pages(cursor));
        }
        self.became_busy(&mut state);
        drop(state);
        self.to_writer.notify_one();
    }

    /// Queues the session's last message whatever the bound (on a failed queue, the
    /// only message), and closes the queue.
    pub fn push_last(&self, message: signal_response::Message) {
        let mut state = self.state();
        if state.phase != Phase::Closed {
            let message = Outgoing::new(message);
            state.bytes = state.bytes.saturating_add(message.bytes);
            state.items.push_back(Item::Message(message));
            self.became_busy(&mut state);
            state.phase = Phase::Closed;
        }
        drop(state);
        self.to_writer.notify_one();
    }

    /// No more messages: the writer ends after what is queued.
    pub fn close(&self) {
        self.state().phase = Phase::Closed;
        self.to_writer.notify_one();
    }

    /// Gives up on the client (the writer's write timed out): drops what is queued
    /// and wakes the session.
    pub fn fail(&self, failure: Failure) {
        let mut state = self.state();
        if state.phase == Phase::Open {
            self.fail_locked(&mut state, failure);
        }
    }

    /// The writer is gone (its socket failed): nothing more is queued, and what is
    /// is dropped. The session ends when its client's stream does.
    pub fn abandon(&self) {
        let mut state = self.state();
        state.phase = Phase::Closed;
        state.items = VecDeque::new();
        state.bytes = 0;
        state.busy_since = None;
    }

    fn fail_locked(&self, state: &mut State, failure: Failure) {
        state.phase = Phase::Failed(failure);
        // Freed now, not when the connection is gone.
        state.items = VecDeque::new();
        state.bytes = 0;
        state.busy_since = None;
        self.to_session.notify_one();
    }

    fn became_busy(&self, state: &mut State) {
        if state.busy_since.is_none() {
            state.busy_since = Some(Instant::now());
            self.to_session.notify_one();
        }
    }

    /// The writer's next item; `None` once the queue is closed and written. Taking
    /// an item is the writer's progress: the write timeout runs from here until it
    /// asks again.
    pub async fn next(&self) -> Option<Next> {
        loop {
            let notified = self.to_writer.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut state = self.state();
                if let Some(item) = state.items.pop_front() {
                    state.busy_since = Some(Instant::now());
                    state.taken += 1;
                    return Some(match item {
                        Item::Message(m) => {
                            state.bytes = state.bytes.saturating_sub(m.bytes);
                            Next::Message(m)
                        }
                        Item::Pages(cursor) => Next::Pages(cursor),
                    });
                }
                state.busy_since = None;
                if state.phase == Phase::Closed {
                    return None;
                }
            }
            notified.await;
        }
    }

    /// Resolves when the queue has given up on its client: it went past its bound,
    /// the writer said its write timed out, or the writer has owed progress for
    /// `write_timeout` (a gRPC stream that the transport stops polling says nothing
    /// itself). Never resolves on a queue that closed normally.
    pub async fn failed(&self, write_timeout: Duration) -> Failure {
        loop {
            let notified = self.to_session.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let deadline = {
                let mut state = self.state();
                match state.phase {
                    Phase::Failed(failure) => return failure,
                    Phase::Closed => None,
                    Phase::Open => match state.busy_since {
                        Some(since) if since.elapsed() >= write_timeout => {
                            self.fail_locked(&mut state, Failure::Stalled);
                            return Failure::Stalled;
                        }
                        Some(since) => Some(since + write_timeout),
                        None => None,
                    },
                }
            };
            match deadline {
                Some(deadline) => {
                    tokio::select! {
                        () = &mut notified => {}
                        () = tokio::time::sleep_until(deadline) => {}
                    }
                }
                None => notified.await,
            }
        }
    }

    /// How many items the writer has taken since the queue was made: it made
    /// progress between two readings that differ.
    pub fn taken(&self) -> u64 {
        self.state().taken
    }

    /// Encoded bytes queued now.
    pub fn queued_bytes(&self) -> usize {
        self.state().bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_proto::v1;

    fn error(len: usize) -> Outgoing {
        Outgoing::new(signal_response::Message::Error(v1::SignalError {
            code: String::new(),
            message: "x".repeat(len),
        }))
    }

    #[tokio::test]
    async fn a_push_past_the_bound_fails_the_queue_and_frees_it() {
        let outbox = Outbox::new(1000);
        let m = error(400);
        assert!(m.bytes() > 400);
        assert_eq!(outbox.push(&m), Ok(()));
        assert_eq!(outbox.push(&m), Ok(()));
        assert_eq!(outbox.queued_bytes(), 2 * m.bytes());
        assert_eq!(outbox.push(&m), Err(Refused::Overflow));
        assert_eq!(outbox.queued_bytes(), 0, "dropped at once");
        assert_eq!(outbox.push(&m), Err(Refused::Ended));
        let failure = outbox.failed(Duration::from_secs(60)).await;
        assert_eq!(
            failure,
            Failure::Overflow {
                owed_bytes: 3 * m.bytes()
            }
        );
        // The session's last message goes out whatever the bound, then the end.
        outbox.push_last(error(2000).message().as_ref().clone());
        assert!(matches!(outbox.next().await, Some(Next::Message(_))));
        assert!(outbox.next().await.is_none());
    }

    #[tokio::test]
    async fn a_writer_that_takes_messages_keeps_the_queue_open() {
        let outbox = Outbox::new(1000);
        let m = error(100);
        for _ in 0..50 {
            assert_eq!(outbox.push(&m), Ok(()));
            assert!(matches!(outbox.next().await, Some(Next::Message(_))));
        }
        assert_eq!(outbox.queued_bytes(), 0);
        outbox.close();
        assert!(outbox.next().await.is_none());
        // A closed queue never reports a failure.
        let waited =
            tokio::time::timeout(Duration::from_millis(50), outbox.failed(Duration::ZERO)).await;
        assert!(waited.is_err());
    }

    #[tokio::test]
    async fn a_writer_that_stops_taking_is_stalled_after_the_timeout() {
        let outbox = Outbox::new(1_000_000);
        let timeout = Duration::from_millis(100);
        // Idle: no timer runs.
        let idle = tokio::time::timeout(timeout * 3, outbox.failed(timeout)).await;
        assert!(idle.is_err());
        let waiting = Instant::now();
        assert_eq!(outbox.push(&error(10)), Ok(()));
        assert_eq!(outbox.failed(timeout).await, Failure::Stalled);
        assert!(waiting.elapsed() >= timeout);
        assert_eq!(outbox.push(&error(10)), Err(Refused::Ended));
    }
}
