//! One participant's signalling session, written once for both transports: the gRPC
//! `SignalService.Connect` stream and the browsers' `/signal` WebSocket (JSON).
//!
//! The session reads [`Inbound`] messages and writes `signal_response::Message`s:
//! - the first message must be `join` (within [`JOIN_TIMEOUT`]); the answer is
//!   `join` with the room and the participants already there;
//! - `offer` → `answer` (the participant's peer is added to its shard with the first);
//!   later offers renegotiate (publish or unpublish tracks, RFC 8829 §5.3.2), and one
//!   with new ICE credentials restarts ICE (see `ice_restart`);
//! - `offer` from shoal whenever the room's tracks change for the participant, to
//!   be answered with `answer`. shoal is the polite side of glare: an offer of the
//!   participant's while one of shoal's is out drops shoal's, which comes again after
//!   the answer; so a client ignores shoal's offers while its own is out. shoal's
//!   offers carry an `id` that the answer echoes: an answer naming an offer that is
//!   no longer out (timed out, dropped on glare) is stale and ignored, not applied
//!   to the offer out now (see `media`); shoal's answers echo the id of the client's
//!   offer;
//! - `trickle` is accepted and ignored: shoal is ICE-lite (RFC 8445 §2.5), it never
//!   checks toward the client, so the client's candidates are of no use to it;
//! - `leave`, or the end of the stream, removes the participant;
//! - room events (participant joined, left) arrive as `participant` messages.
//!
//! What goes to the client waits in the connection's [`Outbox`], bounded in bytes
//! (`--signal-queue-bytes`); a join into a large room sends the other participants
//! in pages (`others` messages after `join`), each made when the one before it has
//! been written. A client that owes more than the bound, or whose writer makes no
//! progress for `--signal-write-timeout`, is removed with SIGNAL_SLOW_READER
//! (counted: `NodeInfo.slow_signal_readers`): `leave` is queued as its last message,
//! and on the WebSocket the writer gives up on a write after the same timeout, so a
//! socket that is never read is closed, not held. On gRPC the transport stops
//! asking for messages while the client's flow-control window is shut, and nothing
//! ends the stream from inside: once the session has ended, what it left queued must
//! move within every [`WRITER_GRACE`] and be taken within `--signal-write-timeout`
//! and one grace more; else it is dropped and the stream given up on, which closes
//! its connection (at once, or after GOAWAY once the connection's other calls are
//! done; see `super::listen::ConnectionCut`).
//!
//! A message the session cannot act on gets an `error` message and the session goes
//! on; [`MAX_INVALID_MESSAGES`] of them, or more than [`MAX_MESSAGES_PER_SECOND`],
//! end it. What ends a session with an error (no `join` first, a join refused, abuse)
//! comes back as the `Status` the transport reports: the gRPC status, or an `error`
//! message and a close frame on the WebSocket. What the transport could not read
//! ends the session the same way: a message over its size limit with
//! RESOURCE_EXHAUSTED, and on gRPC any other stream error with its own status.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{Stream, StreamExt};
use shoal_proto::v1::signal_service_server::SignalService;
use shoal_proto::v1::{self, DisconnectReason, signal_request, signal_response};
use tokio::sync::oneshot;
use tokio::time::Instant;
use tonic::{Code, Request, Response, Status, Streaming};

use super::auth::{Act, Refusal};
use super::grpc::{ControlApi, ControlState};
use super::ice_restart::Precondition;
use super::listen::ConnectionCut;
use super::outbox::{Outbox, Outgoing};
use super::participants::{Admission, Admitted, SignalLink, check_offer};
use super::websocket::WRITER_GRACE;
use shoal_components::sdp::SessionDescription;

/// How long a new session may take to send `join`.
pub const JOIN_TIMEOUT: Duration = Duration::from_secs(10);
/// Default `--signal-auth-timeout`: seconds a `/signal` connection that came without
/// a token, to a node with API keys, may take to send `auth` and `join`.
pub const DEFAULT_AUTH_TIMEOUT_SECS: u64 = 3;
/// Default `--signal-queue-bytes`: what one signalling connection may owe its
/// client, in encoded bytes. 1 MiB is 128 participant events with the largest
/// metadata (8 KiB), or thousands of typical ones: a burst in a busy room that a
/// reading client drains in well under a second; and 16 times the largest single
/// message (an SDP of 64 KiB), so no one message fails a connection. Events shared
/// by a room are held once, so the node holds far less than this per connection.
pub const DEFAULT_QUEUE_BYTES: usize = 1024 * 1024;
/// The least `--signal-queue-bytes`: a join response (a page, the participant
/// itself and its room) must fit in an empty queue.
pub const MIN_QUEUE_BYTES: usize = 64 * 1024;
/// Default `--signal-write-timeout`: seconds one write to a signalling connection
/// may take. A client that reads at all takes one message in far less; one that
/// does not read for this long has stopped.
pub const DEFAULT_WRITE_TIMEOUT_SECS: u64 = 10;

/// Bounds on signalling connections: `/signal` (`--max-unauthenticated-signal`,
/// `--signal-auth-timeout`, `--idle-timeout`), and both `/signal` and
/// `SignalService` (`--max-signal-connections`, `--signal-queue-bytes`,
/// `--signal-write-timeout`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SignalLimits {
    /// Signalling connections open at once: `/signal` WebSockets and
    /// `SignalService` streams together.
    pub connections: usize,
    /// Of those, from one client address (`--max-connections-per-address`: one
    /// HTTP/2 connection carries many streams, so streams count, not connections).
    pub per_address: usize,
    /// Tokenless WebSockets waiting to authenticate at once.
    pub unauthenticated: usize,
    /// How long those may take to send `auth` and `join`.
    pub auth_timeout: Duration,
    /// How long a WebSocket may go without a frame from its client (pinged at half
    /// of it) before it is closed.
    pub idle_timeout: Duration,
    /// What one connection may owe its client, in encoded bytes.
    pub queue_bytes: usize,
    /// How long one write to a connection may take.
    pub write_timeout: Duration,
    /// Bytes one `/signal` message from the client may have
    /// (`--max-signal-message-bytes`).
    pub message_bytes: usize,
}

impl Default for SignalLimits {
    fn default() -> SignalLimits {
        SignalLimits {
            connections: super::http::DEFAULT_MAX_SIGNAL_CONNECTIONS,
            per_address: super::connections::DEFAULT_MAX_CONNECTIONS_PER_ADDRESS,
            unauthenticated: super::http::DEFAULT_MAX_UNAUTHENTICATED_SIGNAL,
            auth_timeout: Duration::from_secs(DEFAULT_AUTH_TIMEOUT_SECS),
            idle_timeout: Duration::from_secs(super::connections::DEFAULT_IDLE_TIMEOUT_SECS),
            queue_bytes: DEFAULT_QUEUE_BYTES,
            write_timeout: Duration::from_secs(DEFAULT_WRITE_TIMEOUT_SECS),
            message_bytes: super::http::MAX_SIGNAL_MESSAGE_BYTES,
        }
    }
}
/// Messages the session could not act on before it ends.
pub const MAX_INVALID_MESSAGES: u32 = 8;
/// Messages a client may send per second.
pub const MAX_MESSAGES_PER_SECOND: u32 = 50;

/// A client message as the transport decoded it.
#[derive(Debug)]
pub enum Inbound {
    /// A well-formed message.
    Message(signal_request::Message),
    /// Something that is not one (bad JSON, an unknown message, an empty oneof).
    Invalid(Status),
    /// The transport could not deliver a message (one over its size limit, say): the
    /// session ends with this status.
    Failed(Status),
}

/// Runs one session until the client leaves, its stream ends, or it is removed.
/// `out` carries every message for the client, and is closed when the session
/// ends; the result says how it ended. `token` is what came with the connection;
/// `unauthenticated`, a slot of the few connections allowed to wait for an `auth`
/// message, held until the join is decided (such a session has
/// [`SignalLimits::auth_timeout`] rather than [`JOIN_TIMEOUT`]).
pub async fn run_session<S>(
    state: Arc<ControlState>,
    inbound: S,
    out: Arc<Outbox>,
    token: Option<String>,
    unauthenticated: Option<tokio::sync::OwnedSemaphorePermit>,
    from: Option<std::net::IpAddr>,
) -> Result<(), Status>
where
    S: Stream<Item = Inbound> + Unpin,
{
    let ended = session(state, inbound, &out, token, unauthenticated, from).await;
    out.close();
    ended
}

/// [`run_session`] but for closing `out`.
async fn session<S>(
    state: Arc<ControlState>,
    mut inbound: S,
    out: &Arc<Outbox>,
    mut token: Option<String>,
    unauthenticated: Option<tokio::sync::OwnedSemaphorePermit>,
    from: Option<std::net::IpAddr>,
) -> Result<(), Status>
where
    S: Stream<Item = Inbound> + Unpin,
{
    let mut limits = Limits::new();
    let wait = if unauthenticated.is_some() {
        state.signal_limits().auth_timeout
    } else {
        JOIN_TIMEOUT
    };
    let deadline = Instant::now() + wait;
    let join = loop {
        let first = match tokio::time::timeout_at(deadline, inbound.next()).await {
            Err(_) => {
                return Err(Status::deadline_exceeded(format!(
                    "no join within {} s",
                    wait.as_secs()
                )));
            }
            Ok(None) => return Ok(()),
            Ok(Some(first)) => first,
        };
        match first {
            Inbound::Message(signal_request::Message::Join(join)) => break join,
            // The token, for a client that could not send it with the connection.
            Inbound::Message(signal_request::Message::Auth(auth)) if token.is_none() => {
                token = Some(auth.token);
            }
            Inbound::Message(signal_request::Message::Auth(_)) => {
                return Err(Status::failed_precondition(
                    "the session has its token already",
                ));
            }
            Inbound::Invalid(status) | Inbound::Failed(status) => return Err(status),
            Inbound::Message(_) => {
                return Err(Status::failed_precondition(
                    "the first message must be join (or auth, then join)",
                ));
            }
        }
    };
    let auth = state.auth();
    let caller = auth.check(token.as_deref(), Act::Authenticated)?;
    let room = caller.room_for(join.room);
    auth.permit(&caller, Act::Join { room: &room })?;
    let identity = auth.counted(caller.identity_for(join.identity))?;
    let permissions = caller.permissions();
    // In a cluster, the room's owner serves the session: the client goes there,
    // unless the room spans this node or comes to (regions, shares).
    if let Some(node) = state.signal_route(&room).await? {
        out.push_last(signal_response::Message::Redirect(v1::Redirect {
            signal_url: node.signal_url(),
            grpc_url: node.grpc_url,
            node_id: node.id,
        }));
        return Ok(());
    }
    drop(unauthenticated);
    let (ended_tx, mut ended) = oneshot::channel();
    let admitted = state
        .admit(Admission {
            room,
            identity,
            name: caller.name(join.name),
            metadata: caller.metadata(join.metadata),
            http_session: None,
            signal: Some(SignalLink {
                outbox: out.clone(),
                ended: ended_tx,
            }),
            permissions,
            from,
            auto_subscribe: join.auto_subscribe.unwrap_or(true),
        })
        .await?;
    let write_timeout = state.signal_limits().write_timeout;
    let mut session = Session {
        state: &state,
        admitted: &admitted,
        out,
        negotiated: false,
        may_publish: permissions.publish,
    };
    let result = loop {
        let message = tokio::select! {
            leave = &mut ended => {
                // Removed by someone else: say why, and stop.
                if let Ok(leave) = leave {
                    out.push_last(signal_response::Message::Leave(leave));
                }
                return Ok(());
            }
            failure = out.failed(write_timeout) => {
                // The client does not read: it leaves rather than miss events.
                let reason = DisconnectReason::SignalSlowReader;
                if state.leave(admitted.peer, reason).await {
                    state.count_slow_signal_reader();
                }
                out.push_last(signal_response::Message::Leave(v1::LeaveEvent {
                    reason: reason.into(),
                    message: failure.to_string(),
                }));
                return Ok(());
            }
            message = inbound.next() => message,
        };
        let Some(message) = message else {
            break Ok(());
        };
        if let Err(status) = limits.count() {
            break Err(status);
        }
        let error = match message {
            Inbound::Invalid(status) => Some(status),
            Inbound::Failed(status) => break Err(status),
            Inbound::Message(signal_request::Message::Leave(_)) => break Ok(()),
            Inbound::Message(m) => session.handle(m).await.err(),
        };
        if let Some(status) = error {
            if let Err(fatal) = limits.invalid() {
                break Err(fatal);
            }
            let _ = out.push(&Outgoing::new(error_message(&status)));
        }
    };
    state
        .left(admitted.peer, DisconnectReason::ClientLeft)
        .await;
    result
}

/// The session after `join`.
struct Session<'a> {
    state: &'a Arc<ControlState>,
    admitted: &'a Admitted,
    out: &'a Outbox,
    negotiated: bool,
    /// The token grants canPublish.
    may_publish: bool,
}

impl Session<'_> {
    async fn handle(&mut self, message: signal_request::Message) -> Result<(), Status> {
        match message {
            signal_request::Message::Offer(offer) => {
                let offer_id = offer.id;
                let offer = check_offer(offer.sdp.as_bytes())?;
                let sdp = if self.negotiated {
                    // New ice-ufrag and ice-pwd: an ICE restart (RFC 8839 §4.4.1.1.1),
                    // the shard's credentials changed before the answer carries them.
                    let peer = self.admitted.peer;
                    if let Some((ufrag, pwd)) = self.state.check_restart_offer(peer, &offer)? {
                        self.state
                            .restart_ice(peer, &ufrag, &pwd, Precondition::None)
                            .await?;
                    }
                    self.state.answer_again(peer, &offer)?
                } else {
                    let sdp = self.state.negotiate(self.admitted, &offer).await?;
                    self.negotiated = true;
                    sdp
                };
                // The client's id for its offer, if it numbers them, names the answer.
                let answer =
                    signal_response::Message::Answer(v1::SessionDescription { sdp, id: offer_id });
                let _ = self.out.push(&Outgoing::new(answer));
                if !self.may_publish && sends_media(&offer) {
                    self.state.auth().count(Refusal::Forbidden);
                    let refused = Status::permission_denied(
                        "the token does not grant canPublish: the offer's sending \
                         sections were answered without receiving them",
                    );
                    let _ = self.out.push(&Outgoing::new(error_message(&refused)));
                }
                // Shoal's offers wait until the answer is on the connection, so none
                // overtakes it; the room may have something for the participant now
                // (or, on glare, shoal dropped its own offer).
                self.state.answer_delivered(self.admitted.peer);
                Ok(())
            }
            signal_request::Message::Answer(answer) => {
                let id = answer.id;
                let answer = SessionDescription::parse(&answer.sdp)
                    .map_err(|e| Status::invalid_argument(format!("invalid SDP answer: {e}")))?;
                self.state.accept_answer(self.admitted.peer, &answer, id)
            }
            // RFC 8445 §2.5: a lite agent never checks toward the peer; its candidates
            // are not needed.
            signal_request::Message::Trickle(_) => Ok(()),
            signal_request::Message::Join(_) => Err(Status::failed_precondition(
                "this session has joined already",
            )),
            signal_request::Message::Leave(_) => Ok(()),
            signal_request::Message::Subscription(update) => self.state.update_subscriptions(
                self.admitted.peer,
                &update.track_ids,
                update.subscribe,
            ),
            signal_request::Message::TrackSettings(settings) => self.state.set_track_settings(
                self.admitted.peer,
                &settings.track_ids,
                super::selection::track_settings(&settings),
            ),
            signal_request::Message::Mute(mute) => self
                .state
                .mute_track(self.admitted.peer, &mute.track_id, mute.muted)
                .map(|_| ()),
            signal_request::Message::Auth(_) => {
                Err(Status::failed_precondition("auth comes before join"))
            }
        }
    }
}

/// Whether `offer` has an open audio or video section that the client sends on.
fn sends_media(offer: &SessionDescription) -> bool {
    use shoal_components::sdp::{Direction, MediaKind};
    offer.media.iter().any(|m| {
        m.port != 0
            && matches!(m.kind, MediaKind::Audio | MediaKind::Video)
            && matches!(
                m.direction().unwrap_or(Direction::SendRecv),
                Direction::SendOnly | Direction::SendRecv
            )
    })
}

/// Bounds on what one client may send.
struct Limits {
    invalid: u32,
    window_start: Instant,
    in_window: u32,
}

impl Limits {
    fn new() -> Limits {
        Limits {
            invalid: 0,
            window_start: Instant::now(),
            in_window: 0,
        }
    }

    /// Counts a message; too many in one second end the session.
    fn count(&mut self) -> Result<(), Status> {
        let now = Instant::now();
        if now.duration_since(self.window_start) >= Duration::from_secs(1) {
            self.window_start = now;
            self.in_window = 0;
        }
        self.in_window += 1;
        if self.in_window > MAX_MESSAGES_PER_SECOND {
            return Err(Status::resource_exhausted(format!(
                "more than {MAX_MESSAGES_PER_SECOND} messages in a second"
            )));
        }
        Ok(())
    }

    /// Counts a message that could not be acted on; too many end the session.
    fn invalid(&mut self) -> Result<(), Status> {
        self.invalid += 1;
        if self.invalid >= MAX_INVALID_MESSAGES {
            return Err(Status::invalid_argument(format!(
                "{MAX_INVALID_MESSAGES} messages could not be acted on; closing"
            )));
        }
        Ok(())
    }
}

/// `status` as an `error` message.
pub fn error_message(status: &Status) -> signal_response::Message {
    signal_response::Message::Error(v1::SignalError {
        code: code_name(status.code()).to_owned(),
        message: status.message().to_owned(),
    })
}

/// A status code's name in lower case, as `SignalError.code` carries it.
pub fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "ok",
        Code::Cancelled => "cancelled",
        Code::InvalidArgument => "invalid_argument",
        Code::DeadlineExceeded => "deadline_exceeded",
        Code::NotFound => "not_found",
        Code::AlreadyExists => "already_exists",
        Code::PermissionDenied => "permission_denied",
        Code::ResourceExhausted => "resource_exhausted",
        Code::FailedPrecondition => "failed_precondition",
        Code::Aborted => "aborted",
        Code::OutOfRange => "out_of_range",
        Code::Unimplemented => "unimplemented",
        Code::Unavailable => "unavailable",
        Code::Unauthenticated => "unauthenticated",
        Code::Unknown | Code::Internal | Code::DataLoss => "internal",
    }
}

/// A `SignalService` stream's transport error as the session's status. tonic
/// reports a message over the decoding limit as OUT_OF_RANGE; gRPC's own
/// implementations say RESOURCE_EXHAUSTED for a message larger than the limit, and so
/// does shoal.
fn transport_error(status: Status) -> Status {
    match status.code() {
        Code::OutOfRange => {
            Status::resource_exhausted(format!("a SignalRequest was refused: {}", status.message()))
        }
        _ => status,
    }
}

/// The response stream of `SignalService.Connect`.
pub type SignalStream = Pin<Box<dyn Stream<Item = Result<v1::SignalResponse, Status>> + Send>>;

#[tonic::async_trait]
impl SignalService for ControlApi {
    type ConnectStream = SignalStream;

    async fn connect(
        &self,
        request: Request<Streaming<v1::SignalRequest>>,
    ) -> Result<Response<SignalStream>, Status> {
        let token = super::grpc::bearer_of(&request).map(str::to_owned);
        let from = request.remote_addr().map(|a| a.ip());
        // gRPC clients send their token as metadata: a stream without a valid one
        // is refused before it holds anything (the `auth` message is for browsers).
        if !self.state().auth().is_open() {
            self.state()
                .auth()
                .check(token.as_deref(), Act::Authenticated)?;
        }
        let slot = self.state().signal_slot(from).map_err(|limit| {
            Status::unavailable(format!("too many signalling connections ({limit})"))
        })?;
        let cut = request.extensions().get::<ConnectionCut>().cloned();
        // A transport error (a message over the size limit, a reset) is the last item
        // and ends the session with its status; an empty oneof is invalid.
        let inbound = request.into_inner().scan(false, |failed, item| {
            let next = match item {
                _ if *failed => None,
                Ok(v1::SignalRequest { message: Some(m) }) => Some(Inbound::Message(m)),
                Ok(v1::SignalRequest { message: None }) => Some(Inbound::Invalid(
                    Status::invalid_argument("SignalRequest carries no message"),
                )),
                Err(status) => {
                    *failed = true;
                    Some(Inbound::Failed(transport_error(status)))
                }
            };
            std::future::ready(next)
        });
        let out = Outbox::new(self.state().signal_limits().queue_bytes);
        let (done, result) = oneshot::channel();
        // Dropped with the response stream's state: when its last message was taken,
        // or when hyper let the stream go.
        let (stream_alive, stream_gone) = oneshot::channel::<()>();
        let state = self.state().clone();
        let session_out = out.clone();
        let out_left = out.clone();
        let write_timeout = self.state().signal_limits().write_timeout;
        tokio::spawn(async move {
            let ended = run_session(state, Box::pin(inbound), session_out, token, None, from).await;
            let _ = done.send(ended.err());
            // What the session left in the queue is taken while the client reads:
            // moving within every writer's grace, and all within the write timeout
            // and one grace more. A client whose window stays shut (it answers
            // PINGs, so keep-alive thinks it well) would hold the stream, its queue
            // and its connection for ever: the queue is dropped and the stream given
            // up on (see `ConnectionCut`); the slot is held until the stream is gone.
            let deadline = Instant::now() + write_timeout + WRITER_GRACE;
            let mut taken = out_left.taken();
            let mut stream_gone = std::pin::pin!(stream_gone);
            loop {
                let wait = (Instant::now() + WRITER_GRACE).min(deadline);
                if tokio::time::timeout_at(wait, &mut stream_gone)
                    .await
                    .is_ok()
                {
                    break;
                }
                let now = out_left.taken();
                if now == taken || Instant::now() >= deadline {
                    out_left.abandon();
                    if let Some(cut) = &cut {
                        cut.give_up();
                        let _ = stream_gone.await;
                    }
                    break;
                }
                taken = now;
            }
            drop(slot);
        });
        // The transport takes the next message when its flow control lets it: the
        // queue's write timeout runs while it does not.
        let state = self.state().clone();
        let messages = futures_util::stream::unfold(
            (out, state, stream_alive),
            |(out, state, alive)| async move {
                let message = state.next_outgoing(&out).await?.into_message();
                Some((
                    Ok(v1::SignalResponse {
                        message: Some(message),
                    }),
                    (out, state, alive),
                ))
            },
        );
        // After the last message, the session's failure (if any) is the status.
        let tail = futures_util::stream::once(result).filter_map(|r| {
            std::future::ready(match r {
                Ok(Some(status)) => Some(Err(status)),
                _ => None,
            })
        });
        Ok(Response::new(Box::pin(messages.chain(tail))))
    }
}
