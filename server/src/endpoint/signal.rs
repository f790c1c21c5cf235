//! Joining a room of a shoal node over its gRPC `SignalService` (proto/shoal/v1/
//! signal.proto), as a client endpoint: the stream's `join`, then the endpoint's
//! [`super::DataOffer`], then the node's answer. The stream stays open for the
//! session: closing it leaves the room.
//!
//! [`join`] is the async step; [`Signaller`] runs it (and opens rooms) for callers
//! without a runtime,
//! on a thread of its own that keeps every session's stream served (the node pings
//! idle HTTP/2 connections and drops those that do not answer) until it is dropped.
//!
//! A node that serves gRPC over TLS (`--tls-cert`) is reached with a [`Tls`]
//! configuration ([`join_over`], [`Signaller::start_tls`]): its certificate is
//! verified for the address or host of the URL.

use std::net::SocketAddr;
use std::time::Duration;

use shoal_proto::v1::room_service_client::RoomServiceClient;
use shoal_proto::v1::signal_service_client::SignalServiceClient;
use shoal_proto::v1::{
    CreateRoomRequest, JoinRequest, SessionDescription, SignalRequest, SignalResponse,
    signal_request, signal_response,
};
use tokio::sync::{mpsc, oneshot};
use tonic::Status;
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};

/// How a client verifies nodes that serve gRPC over TLS: tonic's client
/// configuration, with the CA certificates to trust.
pub type Tls = ClientTlsConfig;

/// How long connecting and each step of the join may take.
pub const JOIN_TIMEOUT: Duration = Duration::from_secs(10);

/// A joined session: the node's answer, and the open signalling stream. Dropping it
/// closes the stream, and the node then takes the participant out of the room.
#[derive(Debug)]
pub struct Session {
    /// The node's SDP answer to the offer.
    pub answer: String,
    /// The request half, kept open for the session.
    _requests: mpsc::Sender<SignalRequest>,
    /// Reads (and drops) what the node says after the answer, so that its stream
    /// never backs up.
    reader: tokio::task::JoinHandle<()>,
}

impl Drop for Session {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// How many `redirect`s [`join`] follows (a cluster redirects a join to the node
/// that serves the room; that one serves it).
pub const MAX_REDIRECTS: usize = 2;

/// Joins `room` as `identity` on the node whose gRPC listens at `grpc`, offering
/// `offer`, and returns once the answer came. In a cluster, a node that does not
/// serve the room says `redirect`: the join goes to the node named, at most
/// [`MAX_REDIRECTS`] times. Runs on the caller's tokio runtime, which must keep
/// running for the session to stay open.
///
/// # Errors
/// The node's status for a refused join or offer (`NOT_FOUND` for a room that is not
/// open, `INVALID_ARGUMENT` for an offer it cannot answer), `UNAVAILABLE` when it
/// cannot be reached, `DEADLINE_EXCEEDED` after [`JOIN_TIMEOUT`], `ABORTED` after
/// too many redirects.
pub async fn join(
    grpc: SocketAddr,
    room: &str,
    identity: &str,
    offer: &str,
) -> Result<Session, Status> {
    join_over(grpc, None, room, identity, offer).await
}

/// [`join`] with the node's gRPC over TLS when `tls` is given (`https://`, and so
/// every node a redirect names). Each node's certificate is verified for the host
/// of its URL: the address here, the node's advertised host after a redirect.
///
/// # Errors
/// As [`join`]'s; `UNAVAILABLE` too when a redirect names an `https://` node and
/// `tls` is `None`, or a plain `http://` one and `tls` is given.
pub async fn join_over(
    grpc: SocketAddr,
    tls: Option<&Tls>,
    room: &str,
    identity: &str,
    offer: &str,
) -> Result<Session, Status> {
    let mut url = base_url(grpc, tls);
    for _ in 0..=MAX_REDIRECTS {
        match join_at(&url, tls, room, identity, offer).await? {
            Joined::Session(session) => return Ok(session),
            Joined::Redirect(next) if tls.is_some() && !next.starts_with("https://") => {
                return Err(Status::unavailable(format!(
                    "redirected to {next}, which is not reached over TLS"
                )));
            }
            Joined::Redirect(next) => url = next,
        }
    }
    Err(Status::aborted("redirected too often"))
}

/// What one node said to a join.
enum Joined {
    /// It serves the room: the session.
    Session(Session),
    /// Another node does, at this gRPC URL.
    Redirect(String),
}

/// [`join`] on the node at `url`, without following a redirect.
async fn join_at(
    url: &str,
    tls: Option<&Tls>,
    room: &str,
    identity: &str,
    offer: &str,
) -> Result<Joined, Status> {
    let channel = connect_url(url, tls).await?;
    let (requests, queue) = mpsc::channel(4);
    for message in [
        signal_request::Message::Join(JoinRequest {
            room: room.to_owned(),
            identity: identity.to_owned(),
            ..JoinRequest::default()
        }),
        // The endpoint's one offer, numbered so that the answer names it.
        signal_request::Message::Offer(SessionDescription {
            sdp: offer.to_owned(),
            id: 1,
        }),
    ] {
        requests
            .send(SignalRequest {
                message: Some(message),
            })
            .await
            .map_err(|_| Status::internal("the request queue closed"))?;
    }
    let queue =
        futures_util::stream::unfold(queue, |mut q| async move { q.recv().await.map(|r| (r, q)) });
    let mut responses = tokio::time::timeout(
        JOIN_TIMEOUT,
        SignalServiceClient::new(channel).connect(queue),
    )
    .await
    .map_err(|_| Status::deadline_exceeded("no stream from the node"))??
    .into_inner();
    let answer_by = tokio::time::Instant::now() + JOIN_TIMEOUT;
    let answer = loop {
        let next = tokio::time::timeout_at(answer_by, responses.message())
            .await
            .map_err(|_| Status::deadline_exceeded("no answer from the node"))??;
        match next.and_then(|r: SignalResponse| r.message) {
            Some(signal_response::Message::Answer(a)) => break a.sdp,
            Some(signal_response::Message::Redirect(r)) => return Ok(Joined::Redirect(r.grpc_url)),
            Some(signal_response::Message::Error(e)) => {
                return Err(Status::failed_precondition(format!(
                    "{}: {}",
                    e.code, e.message
                )));
            }
            Some(_) => {}
            None => return Err(Status::aborted("the node ended the session")),
        }
    };
    let reader = tokio::spawn(async move { while let Ok(Some(_)) = responses.message().await {} });
    Ok(Joined::Session(Session {
        answer,
        _requests: requests,
        reader,
    }))
}

/// Work for the [`Signaller`]'s thread, and where its outcome goes.
enum Job {
    /// [`join`], keeping the session.
    Join {
        grpc: SocketAddr,
        room: String,
        identity: String,
        offer: String,
        reply: oneshot::Sender<Result<String, Status>>,
    },
    /// `RoomService.CreateRoom` with the node's defaults.
    CreateRoom {
        grpc: SocketAddr,
        room: String,
        reply: oneshot::Sender<Result<(), Status>>,
    },
}

/// Signalling for client endpoints on threads without a tokio runtime: [`join`]s run
/// on a thread of its own, whose runtime keeps every joined session open until the
/// `Signaller` is dropped (then each stream closes and the node lets the
/// participants go).
#[derive(Debug)]
pub struct Signaller {
    jobs: Option<mpsc::UnboundedSender<Job>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Signaller {
    /// Starts the signalling thread.
    ///
    /// # Errors
    /// If the runtime or the thread cannot be created.
    pub fn start() -> std::io::Result<Signaller> {
        Signaller::start_tls(None)
    }

    /// [`Signaller::start`] for nodes whose gRPC serves TLS, verified with `tls`
    /// (`None`: plain HTTP/2).
    ///
    /// # Errors
    /// If the runtime or the thread cannot be created.
    pub fn start_tls(tls: Option<Tls>) -> std::io::Result<Signaller> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let (jobs, mut queue) = mpsc::unbounded_channel::<Job>();
        let thread = std::thread::Builder::new()
            .name("shoal-signal".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let mut sessions = Vec::new();
                    while let Some(job) = queue.recv().await {
                        match job {
                            Job::Join {
                                grpc,
                                room,
                                identity,
                                offer,
                                reply,
                            } => {
                                let answer =
                                    join_over(grpc, tls.as_ref(), &room, &identity, &offer)
                                        .await
                                        .map(|session| {
                                            let answer = session.answer.clone();
                                            sessions.push(session);
                                            answer
                                        });
                                let _ = reply.send(answer);
                            }
                            Job::CreateRoom { grpc, room, reply } => {
                                let _ = reply.send(create_room(grpc, tls.as_ref(), &room).await);
                            }
                        }
                    }
                    drop(sessions);
                });
            })?;
        Ok(Signaller {
            jobs: Some(jobs),
            thread: Some(thread),
        })
    }

    /// Joins `room` as `identity` with `offer` (see [`join`]) and returns the node's
    /// answer; the session stays open while `self` lives.
    ///
    /// # Errors
    /// As [`join`]'s; `UNAVAILABLE` if the signalling thread has gone.
    pub fn join(
        &self,
        grpc: SocketAddr,
        room: &str,
        identity: &str,
        offer: &str,
    ) -> Result<String, Status> {
        let (reply, outcome) = oneshot::channel();
        self.run(Job::Join {
            grpc,
            room: room.to_owned(),
            identity: identity.to_owned(),
            offer: offer.to_owned(),
            reply,
        })?;
        outcome.blocking_recv().map_err(|_| gone())?
    }

    /// Opens `room` on the node (`RoomService.CreateRoom`, the node's defaults).
    ///
    /// # Errors
    /// The node's status (`ALREADY_EXISTS`, `INVALID_ARGUMENT` for a bad name, …);
    /// `UNAVAILABLE` if it cannot be reached or the signalling thread has gone.
    pub fn create_room(&self, grpc: SocketAddr, room: &str) -> Result<(), Status> {
        let (reply, outcome) = oneshot::channel();
        self.run(Job::CreateRoom {
            grpc,
            room: room.to_owned(),
            reply,
        })?;
        outcome.blocking_recv().map_err(|_| gone())?
    }

    fn run(&self, job: Job) -> Result<(), Status> {
        self.jobs
            .as_ref()
            .ok_or_else(gone)?
            .send(job)
            .map_err(|_| gone())
    }
}

fn gone() -> Status {
    Status::unavailable("the signalling thread has gone")
}

/// `RoomService.CreateRoom` for `room` with the node's defaults.
async fn create_room(grpc: SocketAddr, tls: Option<&Tls>, room: &str) -> Result<(), Status> {
    let channel = connect_url(&base_url(grpc, tls), tls).await?;
    let request = CreateRoomRequest {
        name: room.to_owned(),
        ..CreateRoomRequest::default()
    };
    tokio::time::timeout(
        JOIN_TIMEOUT,
        RoomServiceClient::new(channel).create_room(request),
    )
    .await
    .map_err(|_| Status::deadline_exceeded("no reply from the node"))?
    .map(|_| ())
}

/// The URL of the node's gRPC at `grpc`: `https://` when reached over TLS.
fn base_url(grpc: SocketAddr, tls: Option<&Tls>) -> String {
    let scheme = if tls.is_some() { "https" } else { "http" };
    format!("{scheme}://{grpc}")
}

/// A channel to the gRPC server at `url` (`http://HOST:PORT`, or `https://` over TLS
/// with `tls`, the certificate verified for HOST), with no per-call deadline: a
/// session's stream lasts as long as the session.
async fn connect_url(url: &str, tls: Option<&Tls>) -> Result<Channel, Status> {
    let mut endpoint = Endpoint::from_shared(url.to_owned())
        .map_err(|e| Status::invalid_argument(e.to_string()))?
        .connect_timeout(JOIN_TIMEOUT);
    if url.starts_with("https://") {
        let tls = tls.ok_or_else(|| {
            Status::unavailable(format!(
                "{url} serves TLS, and no TLS configuration was given"
            ))
        })?;
        endpoint = crate::control::tls::verified_endpoint(endpoint, tls)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
    }
    endpoint
        .connect()
        .await
        .map_err(|e| Status::unavailable(e.to_string()))
}

impl Drop for Signaller {
    fn drop(&mut self) {
        // Closing the queue ends the thread's loop, and with it every session.
        self.jobs = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
