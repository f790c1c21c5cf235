//! The control plane's TCP listeners: HTTP/1.1 for axum (WHIP, WHEP, `/signal` and
//! its WebSocket upgrades, the demo page) and HTTP/2 for tonic's gRPC services,
//! each connection served by hyper under bounds a stranger cannot stretch:
//!
//! - at accept, the caps ([`super::connections`]): connections from one client
//!   address (an IPv6 address counts by its /64, which one host can hold whole) and
//!   in all, over both listeners together. A connection past either is accepted and closed
//!   at once. A slot is held as long as the socket lives, a WebSocket's included;
//! - a TLS handshake completes within its timeout; at most
//!   `--max-tls-handshakes-per-address` are under way from one client address (a
//!   connection past it is closed before its handshake) and `--max-tls-handshakes`
//!   in all, both listeners together (past it, the oldest handshake under way is
//!   let go: see [`Handshakes`]);
//! - HTTP/1.1: a request head must be complete within the header timeout of the
//!   connection's start or of the head's first byte, so a client that drips a
//!   header (slowloris) is cut off; a keep-alive connection with no request for the
//!   idle timeout is closed (RFC 9112 §9.5: "Servers will usually have some timeout
//!   value beyond which they will no longer maintain an inactive connection"; no
//!   request is in flight, so closing it is the graceful close the section asks for);
//! - HTTP/2: a first request must start within the header timeout, so a client that
//!   sends nothing, or drips the connection preface (RFC 9113 §3.4), is cut off, and
//!   one that sent its preface but no request gets GOAWAY first; a connection with
//!   no stream open for the idle timeout gets GOAWAY and is closed (RFC 9113 §9.1:
//!   servers "are permitted to terminate idle connections", and an endpoint closing
//!   a connection "SHOULD first send a GOAWAY frame"). A `SignalService` stream
//!   keeps its connection while it lasts; keep-alive PINGs find a dead peer under
//!   it, and a stream its client stopped reading after its session ended has its
//!   connection closed once the connection's other calls are done
//!   ([`ConnectionCut`]).
//!
//! Each connection's state ([`Activity`]) is a small phase machine fed by the
//! socket wrapper (bytes read) and by the service (a request starts; its response
//! body is dropped); the connection's task sleeps until the phase's deadline. Every
//! connection refused or cut for a limit is counted ([`LimitCounters`]).
//!
//! An HTTP/1.1 connection cut for a header timeout is closed without a response: no
//! request on it was taken, so there is nothing to tell, and RFC 9112 §9.5 lets a
//! server "close the transport connection at any time"; nor does an HTTP/2 client
//! that never finished its preface get a GOAWAY, which it would not read as one.
//! Handlers see the client's address as axum's `ConnectInfo<SocketAddr>` (HTTP) and
//! tonic's `TcpConnectInfo` (gRPC), over TLS too.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::{Pin, pin};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::http;
use hyper::body::Incoming;
use hyper::server::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use rustls::ServerConfig;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, Semaphore, mpsc, watch};
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tonic::transport::server::TcpConnectInfo;
use tower::ServiceExt;

use super::connections::{AddressTable, ConnectionLimits, Handshakes, Limit, LimitCounters, Slot};
use super::metrics::ControlMetrics;

/// Bytes one HTTP/2 stream buffers for sending at most.
pub const H2_SEND_BUFFER_BYTES: usize = 64 * 1024;
/// How long a connection closed for idleness may take to finish closing (a GOAWAY's
/// PING answered, RFC 9113 §6.8) before it is cut.
const CLOSE_GRACE: Duration = Duration::from_secs(5);
/// The HTTP/2 client connection preface's length: `PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n`
/// (RFC 9113 §3.4).
const PREFACE_BYTES: usize = 24;
/// How long accepting pauses after the OS refused (out of descriptors, say).
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

/// What both listeners share: the limits, the table and the counters.
#[derive(Clone, Debug)]
pub struct Listening {
    /// The bounds.
    pub limits: ConnectionLimits,
    /// The connections held.
    pub table: Arc<AddressTable>,
    /// The TLS handshakes under way.
    pub handshakes: Arc<Handshakes>,
    /// What was refused or cut off.
    pub counters: Arc<LimitCounters>,
    /// Where gRPC requests are counted.
    pub metrics: Arc<ControlMetrics>,
}

impl Listening {
    /// Shared state for listeners bounded by `limits`, counting refusals into
    /// `counters` and gRPC requests into `metrics`.
    pub fn new(
        limits: ConnectionLimits,
        counters: Arc<LimitCounters>,
        metrics: Arc<ControlMetrics>,
    ) -> Listening {
        Listening {
            limits,
            table: AddressTable::new(limits.per_address, limits.total),
            handshakes: Handshakes::new(limits.tls_handshakes_per_address, limits.tls_handshakes),
            counters,
            metrics,
        }
    }
}

/// The HTTP/2 settings of the gRPC listener.
#[derive(Clone, Copy, Debug)]
pub struct Http2Settings {
    /// How long one handler may take to answer.
    pub request_timeout: Duration,
    /// Requests one connection runs at once; more wait.
    pub concurrency_per_connection: usize,
    /// Streams one connection may open at once (SETTINGS_MAX_CONCURRENT_STREAMS).
    pub max_concurrent_streams: u32,
    /// The largest header block accepted (SETTINGS_MAX_HEADER_LIST_SIZE).
    pub max_header_list_bytes: u32,
    /// How often a PING goes out, and how long its answer may take.
    pub keepalive: (Duration, Duration),
}

/// A connection's socket: plain TCP or TLS over it.
enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Plain(s) => s.is_write_vectored(),
            Stream::Tls(s) => s.is_write_vectored(),
        }
    }
}

/// Which protocol a listener speaks, for the phases its connections go through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Protocol {
    /// HTTP/1.1: a byte after an idle spell starts a request head.
    Http1,
    /// HTTP/2: bytes come and go (PINGs, SETTINGS); only requests count.
    Http2,
}

/// Where a connection stands.
#[derive(Clone, Copy, Debug)]
enum Phase {
    /// Waiting for a request head (HTTP/1.1) or a first request (HTTP/2) since then.
    Waiting(Instant),
    /// This many requests in flight (their responses not yet sent).
    Busy(usize),
    /// No request in flight since then.
    Idle(Instant),
}

/// A connection's phase, shared by its socket, its service and its task.
struct Activity {
    protocol: Protocol,
    state: Mutex<State>,
    /// HTTP/2: bytes read, counted up to the client's connection preface.
    preface_bytes: AtomicUsize,
    changed: Notify,
}

impl Activity {
    fn new(protocol: Protocol) -> Arc<Activity> {
        Arc::new(Activity {
            protocol,
            state: Mutex::new(State {
                phase: Phase::Waiting(Instant::now()),
                stalled: 0,
            }),
            preface_bytes: AtomicUsize::new(0),
            changed: Notify::new(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn update(&self, f: impl FnOnce(&mut State)) {
        let mut state = self.lock();
        f(&mut state);
        drop(state);
        // A stored permit: the task sees the change even if it was not waiting yet.
        self.changed.notify_one();
    }

    /// `n` bytes arrived: on an idle HTTP/1.1 connection, a request head has begun.
    fn read(&self, n: usize) {
        if self.protocol != Protocol::Http1 {
            if self.preface_bytes.load(Ordering::Relaxed) < PREFACE_BYTES {
                self.preface_bytes.fetch_add(n, Ordering::Relaxed);
            }
            return;
        }
        let idle = matches!(self.lock().phase, Phase::Idle(_));
        if idle {
            self.update(|state| {
                if let Phase::Idle(_) = state.phase {
                    state.phase = Phase::Waiting(Instant::now());
                }
            });
        }
    }

    /// A request reached the service; in flight until the guard drops.
    fn start(self: &Arc<Self>) -> InFlight {
        self.update(|state| {
            state.phase = match state.phase {
                Phase::Busy(n) => Phase::Busy(n + 1),
                _ => Phase::Busy(1),
            };
        });
        InFlight {
            activity: self.clone(),
            request: Arc::new(Mutex::new(Request::InFlight)),
        }
    }

    /// Whether some request was given up on, and whether every request in flight
    /// was.
    fn stalled(&self) -> (bool, bool) {
        let state = self.lock();
        let in_flight = match state.phase {
            Phase::Busy(n) => n,
            _ => 0,
        };
        (
            state.stalled > 0,
            state.stalled > 0 && in_flight <= state.stalled,
        )
    }

    /// HTTP/2: whether the client's connection preface has come (RFC 9113 §3.4), so
    /// that the client reads frames and a GOAWAY can tell it something.
    fn preface_read(&self) -> bool {
        self.preface_bytes.load(Ordering::Relaxed) >= PREFACE_BYTES
    }

    /// When the connection is due to be cut or closed, and for which limit.
    fn due(&self, limits: &ConnectionLimits) -> Option<(Instant, Limit)> {
        match self.lock().phase {
            Phase::Waiting(since) => Some((
                since + limits.header_timeout,
                match self.protocol {
                    Protocol::Http1 => Limit::HeaderTimeout,
                    Protocol::Http2 => Limit::NoRequest,
                },
            )),
            Phase::Busy(_) => None,
            Phase::Idle(since) => Some((since + limits.idle_timeout, Limit::Idle)),
        }
    }
}

/// What [`Activity`] keeps under its lock.
#[derive(Clone, Copy, Debug)]
struct State {
    phase: Phase,
    /// Requests in flight that were given up on ([`ConnectionCut`]).
    stalled: usize,
}

/// Where one request stands, changed under its connection's [`Activity`] lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Request {
    InFlight,
    GivenUp,
    Ended,
}

/// What a gRPC handler finds in its request's extensions to give up on its stream:
/// for a stream whose client never takes what it is sent (its HTTP/2 flow-control
/// window stays shut while it answers PINGs), hyper never polls the response again,
/// so neither its end nor an error can reach the client, and only closing the
/// connection frees what the stream holds. A connection whose every request in
/// flight was given up on is cut at once. One with other calls gets GOAWAY (the
/// client takes new calls elsewhere) and is cut once they are done, or after the
/// idle timeout: what the stalled stream holds is not kept for ever by a call
/// beside it.
#[derive(Clone)]
pub struct ConnectionCut {
    activity: Arc<Activity>,
    request: Arc<Mutex<Request>>,
}

impl ConnectionCut {
    /// This request's stream will never finish; counted as [`Limit::StalledStream`]
    /// when the connection is cut for it. Nothing if it ended already.
    pub fn give_up(&self) {
        let mut state = self.activity.lock();
        let mut request = self.request.lock().unwrap_or_else(PoisonError::into_inner);
        if *request == Request::InFlight {
            *request = Request::GivenUp;
            state.stalled += 1;
        }
        drop(request);
        drop(state);
        self.activity.changed.notify_one();
    }
}

/// A request in flight: from the service's call until its response body is dropped
/// (sent, or the connection gone).
struct InFlight {
    activity: Arc<Activity>,
    request: Arc<Mutex<Request>>,
}

impl InFlight {
    /// The handle that gives up on this request.
    fn cut(&self) -> ConnectionCut {
        ConnectionCut {
            activity: self.activity.clone(),
            request: self.request.clone(),
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let request = self.request.clone();
        self.activity.update(|state| {
            let mut request = request.lock().unwrap_or_else(PoisonError::into_inner);
            if *request == Request::GivenUp {
                state.stalled = state.stalled.saturating_sub(1);
            }
            *request = Request::Ended;
            state.phase = match state.phase {
                Phase::Busy(n) if n > 1 => Phase::Busy(n - 1),
                _ => Phase::Idle(Instant::now()),
            };
        });
    }
}

/// A response body that keeps its request in flight while it lives.
struct Tracked<B> {
    body: B,
    _in_flight: InFlight,
}

impl<B: http_body::Body + Unpin> http_body::Body for Tracked<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<B::Data>, B::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// A connection's socket with its slot (held while the socket lives, through a
/// WebSocket upgrade too) and its activity (told of every read).
struct Conn {
    stream: Stream,
    activity: Arc<Activity>,
    _slot: Slot,
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let read = Pin::new(&mut this.stream).poll_read(cx, buf);
        let n = buf.filled().len() - before;
        if matches!(read, Poll::Ready(Ok(()))) && n > 0 {
            this.activity.read(n);
        }
        read
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

/// An accepted connection, ready to serve.
struct Accepted {
    conn: Conn,
    activity: Arc<Activity>,
    local: SocketAddr,
    peer: SocketAddr,
}

/// Serves HTTP/1.1 (with upgrades) on `listener` through `router` until `stop`
/// turns true; then stops accepting and returns once every connection has ended
/// (WebSockets already upgraded live on in their own tasks).
pub async fn serve_http(
    listener: TcpListener,
    tls: Option<Arc<ServerConfig>>,
    router: axum::Router,
    listening: Listening,
    stop: watch::Receiver<bool>,
) {
    let limits = listening.limits;
    let counters = listening.counters.clone();
    accept_loop(
        listener,
        tls,
        Protocol::Http1,
        listening,
        stop,
        move |accepted, stop| serve_http1(accepted, router.clone(), limits, counters.clone(), stop),
    )
    .await;
}

/// Serves gRPC over HTTP/2 on `listener` through `routes`, as [`serve_http`] does.
pub async fn serve_grpc(
    listener: TcpListener,
    tls: Option<Arc<ServerConfig>>,
    routes: tonic::service::Routes,
    settings: Http2Settings,
    listening: Listening,
    stop: watch::Receiver<bool>,
) {
    let limits = listening.limits;
    let counters = listening.counters.clone();
    let metrics = listening.metrics.clone();
    accept_loop(
        listener,
        tls,
        Protocol::Http2,
        listening,
        stop,
        move |accepted, stop| {
            serve_http2(
                accepted,
                routes.clone(),
                settings,
                limits,
                (counters.clone(), metrics.clone()),
                stop,
            )
        },
    )
    .await;
}

/// Accepts connections within the caps, runs each one's TLS handshake (if any) and
/// `serve` as a task of its own; after `stop`, waits for them all to end.
async fn accept_loop<F, Fut>(
    listener: TcpListener,
    tls: Option<Arc<ServerConfig>>,
    protocol: Protocol,
    listening: Listening,
    mut stop: watch::Receiver<bool>,
    serve: F,
) where
    F: Fn(Accepted, watch::Receiver<bool>) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let acceptor = tls.map(TlsAcceptor::from);
    // Every connection task holds a sender; the receiver ends when all are gone.
    let (alive, mut all_ended) = mpsc::channel::<()>(1);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = stop.wait_for(|stop| *stop) => break,
        };
        let (tcp, peer) = match accepted {
            Ok(accepted) => accepted,
            // Out of descriptors, say: try again shortly rather than spin.
            Err(_) => {
                tokio::time::sleep(ACCEPT_RETRY).await;
                continue;
            }
        };
        let slot = match listening.table.take(peer.ip()) {
            Ok(slot) => slot,
            Err(limit) => {
                // Closed at once: dropping the socket sends FIN.
                listening.counters.count(limit);
                continue;
            }
        };
        // A handshake's place is taken here, in accept order, and held until it ends.
        let handshake = match &acceptor {
            None => None,
            Some(_) => match listening.handshakes.start(peer.ip()) {
                Ok(handshake) => Some(handshake),
                Err(limit) => {
                    listening.counters.count(limit);
                    continue;
                }
            },
        };
        let _ = tcp.set_nodelay(true);
        let local = tcp.local_addr().unwrap_or(peer);
        let acceptor = acceptor.clone();
        let limits = listening.limits;
        let counters = listening.counters.clone();
        let serve = serve.clone();
        let stop = stop.clone();
        let alive = alive.clone();
        tokio::spawn(async move {
            let _alive = alive;
            let stream = match acceptor {
                None => Stream::Plain(tcp),
                Some(acceptor) => {
                    let Some(mut handshake) = handshake else {
                        return;
                    };
                    let accept = acceptor.accept(tcp);
                    let done = tokio::select! {
                        done = tokio::time::timeout(limits.tls_handshake_timeout, accept) => done,
                        _ = &mut handshake.evicted => {
                            counters.count(Limit::TlsHandshakeEvicted);
                            return;
                        }
                    };
                    drop(handshake);
                    match done {
                        Ok(Ok(stream)) => Stream::Tls(Box::new(stream)),
                        _ => {
                            counters.count(Limit::TlsHandshake);
                            return;
                        }
                    }
                }
            };
            // The header timeout runs from here, after the handshake.
            let activity = Activity::new(protocol);
            let conn = Conn {
                stream,
                activity: activity.clone(),
                _slot: slot,
            };
            let accepted = Accepted {
                conn,
                activity,
                local,
                peer,
            };
            serve(accepted, stop).await;
        });
    }
    drop(listener);
    drop(alive);
    let _ = all_ended.recv().await;
}

/// One HTTP/1.1 connection: each request goes to `router` with the client's
/// address as `ConnectInfo`; upgrades (WebSockets) are handed off.
async fn serve_http1(
    accepted: Accepted,
    router: axum::Router,
    limits: ConnectionLimits,
    counters: Arc<LimitCounters>,
    stop: watch::Receiver<bool>,
) {
    let Accepted {
        conn,
        activity,
        peer,
        ..
    } = accepted;
    let in_service = activity.clone();
    let service = hyper::service::service_fn(move |mut request: http::Request<Incoming>| {
        let in_flight = in_service.start();
        request.extensions_mut().insert(ConnectInfo(peer));
        let router = router.clone();
        async move {
            let response = match router.oneshot(request).await {
                Ok(response) => response,
                Err(never) => match never {},
            };
            Ok::<_, Infallible>(response.map(|body| Tracked {
                body,
                _in_flight: in_flight,
            }))
        }
    });
    let connection = http1::Builder::new()
        .keep_alive(true)
        .max_buf_size(limits.head_bytes)
        .serve_connection(TokioIo::new(conn), service)
        .with_upgrades();
    drive(
        pin!(connection),
        |c| c.graceful_shutdown(),
        &activity,
        &limits,
        &counters,
        stop,
    )
    .await;
}

/// One HTTP/2 connection of gRPC: each request goes to `routes` with the client's
/// address as `TcpConnectInfo` (what `tonic::Request::remote_addr` reads), within
/// the request timeout and the connection's concurrency. Each request is counted by
/// method and the status its response starts with (a refusal's trailers-only
/// `grpc-status`, else OK: a unary success, or a stream that began).
async fn serve_http2(
    accepted: Accepted,
    routes: tonic::service::Routes,
    settings: Http2Settings,
    limits: ConnectionLimits,
    (counters, metrics): (Arc<LimitCounters>, Arc<ControlMetrics>),
    stop: watch::Receiver<bool>,
) {
    let Accepted {
        conn,
        activity,
        local,
        peer,
    } = accepted;
    let in_service = activity.clone();
    let concurrency = Arc::new(Semaphore::new(settings.concurrency_per_connection));
    let service = hyper::service::service_fn(move |request: http::Request<Incoming>| {
        let in_flight = in_service.start();
        let mut request = request.map(tonic::body::Body::new);
        request.extensions_mut().insert(TcpConnectInfo {
            local_addr: Some(local),
            remote_addr: Some(peer),
        });
        request.extensions_mut().insert(in_flight.cut());
        let routes = routes.clone();
        let concurrency = concurrency.clone();
        let timeout = settings.request_timeout;
        let metrics = metrics.clone();
        async move {
            let path = request.uri().path().to_owned();
            // The semaphore is never closed; the permit is held until the answer.
            let _permit = concurrency.acquire_owned().await;
            let response = match tokio::time::timeout(timeout, routes.oneshot(request)).await {
                Ok(Ok(response)) => response,
                Ok(Err(never)) => match never {},
                Err(_) => tonic::Status::deadline_exceeded(format!(
                    "the request took longer than {} s",
                    timeout.as_secs()
                ))
                .into_http(),
            };
            let code = response
                .headers()
                .get("grpc-status")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<i32>().ok())
                .map_or(tonic::Code::Ok, tonic::Code::from_i32);
            metrics.grpc_request(&path, code);
            Ok::<_, Infallible>(response.map(|body| Tracked {
                body,
                _in_flight: in_flight,
            }))
        }
    });
    let mut builder = http2::Builder::new(TokioExecutor::new());
    builder
        .timer(TokioTimer::new())
        .max_concurrent_streams(settings.max_concurrent_streams)
        .max_header_list_size(settings.max_header_list_bytes)
        // What one stream may have buffered for a client that does not read (hyper's
        // default is 400 KiB): signalling's own queue is bounded in bytes, and this
        // keeps what sits beneath it small too.
        .max_send_buf_size(H2_SEND_BUFFER_BYTES)
        .keep_alive_interval(settings.keepalive.0)
        .keep_alive_timeout(settings.keepalive.1);
    let connection = builder.serve_connection(TokioIo::new(conn), service);
    drive(
        pin!(connection),
        |c| c.graceful_shutdown(),
        &activity,
        &limits,
        &counters,
        stop,
    )
    .await;
}

/// Runs `connection` to its end, closing it gracefully (`close`) when it has been
/// idle for the idle timeout or when `stop` turns true, and cutting it (dropping
/// it) when its request head or first request is late or a graceful close takes
/// longer than [`CLOSE_GRACE`].
async fn drive<C>(
    mut connection: Pin<&mut C>,
    close: impl Fn(Pin<&mut C>),
    activity: &Activity,
    limits: &ConnectionLimits,
    counters: &LimitCounters,
    mut stop: watch::Receiver<bool>,
) where
    C: Future<Output = Result<(), hyper::Error>>,
{
    let mut cut_at: Option<Instant> = None;
    let mut stopping = false;
    // Set when a request was given up on while others were in flight.
    let mut stalled_cut_at: Option<Instant> = None;
    loop {
        let due = if cut_at.is_some() {
            None
        } else {
            activity.due(limits)
        };
        let wake = [cut_at, due.map(|(at, _)| at), stalled_cut_at]
            .into_iter()
            .flatten()
            .min();
        tokio::select! {
            // An error (a reset, a protocol error) ends the connection as an end does.
            _ = connection.as_mut() => return,
            () = activity.changed.notified() => {
                let (some, all) = activity.stalled();
                if all {
                    counters.count(Limit::StalledStream);
                    return;
                }
                if some && stalled_cut_at.is_none() {
                    // No new calls here; those under way have the idle timeout.
                    close(connection.as_mut());
                    stalled_cut_at = Some(Instant::now() + limits.idle_timeout);
                }
            }
            () = sleep_until(wake) => {
                if let Some(at) = stalled_cut_at
                    && Instant::now() >= at
                {
                    if activity.stalled().0 {
                        counters.count(Limit::StalledStream);
                        return;
                    }
                    // The stalled stream ended after all; GOAWAY was sent, and the
                    // other calls finish.
                    stalled_cut_at = None;
                    continue;
                }
                if cut_at.is_some() {
                    // A request that crossed the idle close's GOAWAY was taken: it
                    // finishes (the graceful close waits for it, the request timeout
                    // bounds it) rather than being cut off without a status.
                    if activity.due(limits).is_none() && !stopping {
                        cut_at = None;
                        continue;
                    }
                    return;
                }
                // Due still: the phase may have moved on since the sleep began.
                let Some((at, limit)) = activity.due(limits) else { continue };
                if Instant::now() < at {
                    continue;
                }
                counters.count(limit);
                // RFC 9113 §9.1: an endpoint closing a connection "SHOULD first
                // send a GOAWAY frame", which needs a client past its preface.
                let graceful = limit == Limit::Idle
                    || (limit == Limit::NoRequest && activity.preface_read());
                if !graceful {
                    return;
                }
                close(connection.as_mut());
                cut_at = Some(Instant::now() + CLOSE_GRACE);
            }
            _ = stop.wait_for(|stop| *stop), if !stopping => {
                // Requests in flight finish; the caller bounds how long that takes.
                stopping = true;
                close(connection.as_mut());
            }
        }
    }
}

/// Sleeps until `at`, or forever.
pub(super) async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handlers_see_the_clients_address() {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let router = axum::Router::new().route(
            "/peer",
            axum::routing::get(|ConnectInfo(peer): ConnectInfo<SocketAddr>| async move {
                peer.ip().to_string()
            }),
        );
        let listening = Listening::new(
            ConnectionLimits::default(),
            Arc::default(),
            Arc::new(ControlMetrics::new()),
        );
        let (stop_tx, stop) = watch::channel(false);
        let server = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let listener = TcpListener::from_std(listener).unwrap();
                serve_http(listener, None, router, listening, stop).await;
            });
        });
        // Any 127.0.0.0/8 address is this host's.
        let client =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        client
            .bind(&SocketAddr::from(([127, 0, 0, 2], 0)).into())
            .unwrap();
        client.connect(&addr.into()).unwrap();
        let mut client: std::net::TcpStream = client.into();
        client
            .write_all(b"GET /peer HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut response = String::new();
        client.read_to_string(&mut response).unwrap();
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        assert!(response.ends_with("\r\n\r\n127.0.0.2"), "{response}");
        stop_tx.send(true).unwrap();
        server.join().unwrap();
    }

    /// Polls `future` once: whether it is done.
    async fn done(mut future: Pin<&mut impl Future>) -> bool {
        std::future::poll_fn(|cx| Poll::Ready(future.as_mut().poll(cx).is_ready())).await
    }

    #[tokio::test]
    async fn a_stalled_stream_closes_its_connection_once_other_calls_are_done() {
        let limits = ConnectionLimits::default();
        let counters = LimitCounters::default();
        let activity = Activity::new(Protocol::Http2);
        let stalled = activity.start();
        let other = activity.start();
        let closes = AtomicUsize::new(0);
        let (_stop, stop) = watch::channel(false);
        let connection = pin!(std::future::pending::<Result<(), hyper::Error>>());
        let drive = drive(
            connection,
            |_| {
                closes.fetch_add(1, Ordering::Relaxed);
            },
            &activity,
            &limits,
            &counters,
            stop,
        );
        let mut drive = pin!(drive);
        stalled.cut().give_up();
        assert!(!done(drive.as_mut()).await);
        assert_eq!(
            closes.load(Ordering::Relaxed),
            1,
            "GOAWAY while another call is in flight"
        );
        assert!(counters.counts().is_empty());
        drop(other);
        assert!(
            done(drive.as_mut()).await,
            "cut once the stalled stream is all that is left"
        );
        assert_eq!(closes.load(Ordering::Relaxed), 1);
        assert_eq!(counters.counts().get("stalled_stream"), Some(&1));
        drop(stalled);
    }

    #[tokio::test]
    async fn a_stalled_stream_that_ends_after_all_leaves_other_calls_alone() {
        let limits = ConnectionLimits::default();
        let counters = LimitCounters::default();
        let activity = Activity::new(Protocol::Http2);
        let stalled = activity.start();
        let (b, c) = (activity.start(), activity.start());
        let (_stop, stop) = watch::channel(false);
        let connection = pin!(std::future::pending::<Result<(), hyper::Error>>());
        let mut drive = pin!(drive(
            connection,
            |_| {},
            &activity,
            &limits,
            &counters,
            stop
        ));
        let cut = stalled.cut();
        cut.give_up();
        assert!(!done(drive.as_mut()).await);
        // The client resets the stalled stream: it is in flight no more.
        drop(stalled);
        cut.give_up();
        assert!(
            !done(drive.as_mut()).await,
            "giving up on an ended request does nothing"
        );
        drop(b);
        assert!(
            !done(drive.as_mut()).await,
            "C is a healthy call, not a stalled one"
        );
        assert!(counters.counts().is_empty());
        drop(c);
    }

    #[tokio::test]
    async fn a_call_beside_a_stalled_stream_has_the_idle_timeout() {
        let limits = ConnectionLimits {
            idle_timeout: Duration::from_millis(100),
            ..ConnectionLimits::default()
        };
        let counters = LimitCounters::default();
        let activity = Activity::new(Protocol::Http2);
        let stalled = activity.start();
        let other = activity.start();
        let (_stop, stop) = watch::channel(false);
        let connection = pin!(std::future::pending::<Result<(), hyper::Error>>());
        let drive = drive(connection, |_| {}, &activity, &limits, &counters, stop);
        stalled.cut().give_up();
        let started = Instant::now();
        drive.await;
        assert!(started.elapsed() >= limits.idle_timeout);
        assert_eq!(counters.counts().get("stalled_stream"), Some(&1));
        drop((stalled, other));
    }

    #[test]
    fn phases_give_the_deadline_of_their_limit() {
        let limits = ConnectionLimits {
            header_timeout: Duration::from_secs(1),
            idle_timeout: Duration::from_secs(5),
            ..ConnectionLimits::default()
        };
        let http = Activity::new(Protocol::Http1);
        let (_, limit) = http.due(&limits).unwrap();
        assert_eq!(limit, Limit::HeaderTimeout);
        let first = http.start();
        let second = http.start();
        assert!(http.due(&limits).is_none());
        drop(first);
        assert!(http.due(&limits).is_none(), "one request still in flight");
        drop(second);
        assert_eq!(http.due(&limits).unwrap().1, Limit::Idle);
        // A byte after the idle spell starts a head, with the header timeout.
        http.read(1);
        assert_eq!(http.due(&limits).unwrap().1, Limit::HeaderTimeout);

        let grpc = Activity::new(Protocol::Http2);
        assert_eq!(grpc.due(&limits).unwrap().1, Limit::NoRequest);
        grpc.read(16);
        assert!(!grpc.preface_read(), "16 of the preface's 24 bytes");
        grpc.read(8);
        assert!(grpc.preface_read());
        drop(grpc.start());
        grpc.read(17);
        assert_eq!(
            grpc.due(&limits).unwrap().1,
            Limit::Idle,
            "a PING is no request"
        );
    }
}
