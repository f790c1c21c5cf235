//! HTTP on the control thread (axum over hyper, on the same runtime as gRPC):
//!
//! | route | what |
//! |---|---|
//! | `GET /healthz` | 200 `ok` while serving; 503 `draining` once the node drains ([`super::drain`]), so a load balancer sends no one new |
//! | `GET /metrics` | the node's metrics in the Prometheus text format ([`super::metrics`]); 503 if a shard does not answer |
//! | `GET /` | the demo page: join a room, see who is there, chat on a data channel |
//! | `POST /whip/{room}`, `POST /whep/{room}` | an SDP offer in (`?identity=`, `?name=` form-encoded), 201 with the answer, a `Location` (RFC 9725 §4.2) and a `Link` per configured STUN/TURN server (§4.6) |
//! | `DELETE /whip/{room}/{session}` (and `/whep/…`) | ends the session (RFC 9725 §4.2); a WHIP session is not found under `/whep/` nor the other way round |
//! | `PATCH /whip/{room}/{session}` (and `/whep/…`, each for its own kind) | an `application/trickle-ice-sdpfrag`: new ICE credentials restart ICE (200), candidates alone are trickle (204) (RFC 9725 §4.3) |
//! | `OPTIONS /whip/{room}` (and `/whep/…`) | 200 with `Accept-Post: application/sdp` and the CORS preflight headers (RFC 9725 §4.2) |
//! | `OPTIONS /whip/{room}/{session}` (and `/whep/…`) | 200 with the CORS preflight headers |
//! | `GET /signal` | the signalling WebSocket: `SignalService` messages as JSON ([`super::signal`]) |
//!
//! WHEP (a subscriber) takes the same steps as WHIP for now: data channels only, media
//! arrives with a later issue. Errors are plain text saying what is wrong, with the
//! status of their cause: 400 bad SDP (a mid used twice too), a bad name, or a query
//! that is not UTF-8 once percent-decoded; 404 unknown room or session (a WHIP
//! session under `/whep/` too, and the other way round); 409 identity in use; 413 body
//! over [`MAX_BODY_BYTES`]; 415 not `application/sdp`; 503 full. `/signal` checks
//! the upgrade here and runs the socket in [`super::websocket`].
//!
//! CORS: RFC 9725 §4.2 says WHIP endpoints "MUST support OPTIONS requests for
//! Cross-Origin Resource Sharing (CORS) as defined in [FETCH]", so that a page on
//! another origin can publish. Every WHIP/WHEP response says
//! `Access-Control-Allow-Origin: *` (nothing is behind cookies) or, with
//! `--allowed-origins`, names the request's origin when it is allowed (and nothing
//! otherwise, with `Vary: Origin`), and exposes
//! `Location` and `Link`, which Fetch does not let a script read otherwise and which
//! the client needs to end its session and to reach its TURN servers; an OPTIONS answers a preflight for the methods the
//! resource allows and the `Content-Type` and `Authorization` request headers (a
//! client with a bearer token sends it, RFC 9725 §4.7.1). A `/signal` upgrade from
//! a browser page of an origin not allowed gets 403 ([`super::origin`]).
//!
//! PATCH (RFC 9725 §4.3): ICE restarts and trickle ICE with an
//! `application/trickle-ice-sdpfrag` (RFC 8840); see `patch`. The 201 of a POST
//! carries the ICE session's entity-tag (`ETag`, shoal's ufrag, new with each
//! restart) for the `If-Match` of a PATCH.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::ConnectInfo;
use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{DefaultBodyLimit, Path, Query, RawQuery, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use shoal_components::peer::PeerId;
use shoal_components::sdp;
use shoal_proto::v1::DisconnectReason;
use tokio::sync::Semaphore;
use tonic::{Code, Status};

use super::auth::{Act, AuthError, Refusal, bearer};
use super::cluster::Place;
use super::connections::Limit;
use super::grpc::ControlState;
use super::ice_restart::Precondition;
use super::origin::AllowedOrigins;
use super::participants::{Admission, SessionKind as Kind, check_offer};
use super::pending::{RETRY_PUSHBACK_KEY, retry_secs};
use super::sdpfrag::IceFragment;
use super::websocket;
use crate::ice_servers::link_headers;

/// Largest request body accepted (an offer; RFC 8866 has no limit, shoal's SDP
/// parser stops at the same size).
pub const MAX_BODY_BYTES: usize = sdp::MAX_SDP_LEN;
/// Largest WebSocket message (and frame) accepted on `/signal`.
pub const MAX_SIGNAL_MESSAGE_BYTES: usize = 64 * 1024;
/// What a `/signal` socket reads at once; a larger message takes several reads.
pub const SIGNAL_READ_BUFFER_BYTES: usize = 8 * 1024;
/// Default `--max-signal-connections`: signalling connections (`/signal` sockets and
/// `SignalService` streams) open at once; more are refused.
pub const DEFAULT_MAX_SIGNAL_CONNECTIONS: usize = 4096;
/// Default `--max-unauthenticated-signal`: `/signal` connections that came without
/// a token to a node with API keys and may still send `auth`; more get 401 at once.
pub const DEFAULT_MAX_UNAUTHENTICATED_SIGNAL: usize = 64;

/// The demo page, self-contained (inline HTML, CSS and JavaScript).
const DEMO_PAGE: &str = include_str!("demo.html");

/// What the HTTP handlers share.
#[derive(Clone)]
struct Http {
    state: Arc<ControlState>,
    unauthenticated: Arc<Semaphore>,
}

/// The first path segment of a session of `kind`.
fn prefix(kind: Kind) -> &'static str {
    match kind {
        Kind::Whip => "whip",
        Kind::Whep => "whep",
    }
}

/// The router of every HTTP route over `state`.
pub fn router(state: Arc<ControlState>) -> Router {
    let limits = state.signal_limits();
    let body_bytes = state.max_body_bytes();
    let http = Http {
        state,
        unauthenticated: Arc::new(Semaphore::new(limits.unauthenticated)),
    };
    let whip_whep = Router::new()
        .route(
            "/whip/{room}",
            post(|s, p, q, r| create(Kind::Whip, s, p, q, r)).options(endpoint_options),
        )
        .route(
            "/whep/{room}",
            post(|s, p, q, r| create(Kind::Whep, s, p, q, r)).options(endpoint_options),
        )
        .route(
            "/whip/{room}/{session}",
            axum::routing::delete(|s, p, h| end(Kind::Whip, s, p, h))
                .patch(|s, p, r| patch(Kind::Whip, s, p, r))
                .options(session_options),
        )
        .route(
            "/whep/{room}/{session}",
            axum::routing::delete(|s, p, h| end(Kind::Whep, s, p, h))
                .patch(|s, p, r| patch(Kind::Whep, s, p, r))
                .options(session_options),
        )
        .layer(axum::middleware::from_fn_with_state(
            http.state.allowed_origins().clone(),
            cors,
        ));
    Router::new()
        .route("/", get(|| async { Html(DEMO_PAGE) }))
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .merge(whip_whep)
        .route("/signal", get(signal))
        .layer(DefaultBodyLimit::max(body_bytes))
        .route_layer(axum::middleware::from_fn_with_state(
            http.state.clone(),
            super::metrics::count_http,
        ))
        .fallback(not_found)
        .with_state(http)
}

/// Any other path: 404, counted under the route `unmatched`.
async fn not_found(State(http): State<Http>, request: Request) -> StatusCode {
    http.state
        .metrics()
        .http_unmatched(request.method(), StatusCode::NOT_FOUND.as_u16());
    StatusCode::NOT_FOUND
}

/// `GET /metrics`: the node's metrics in the Prometheus text format; 503 if a shard
/// does not answer.
async fn metrics(State(http): State<Http>) -> Response {
    match http.state.metrics_text().await {
        Ok(text) => ([(header::CONTENT_TYPE, super::metrics::CONTENT_TYPE)], text).into_response(),
        Err(status) => error_response(&status),
    }
}

/// 200 `ok` while serving, 503 `draining` once the node drains.
async fn healthz(State(http): State<Http>) -> Response {
    if http.state.drain().is_requested() {
        text(StatusCode::SERVICE_UNAVAILABLE, "draining")
    } else {
        text(StatusCode::OK, "ok")
    }
}

/// A plain-text error response for `status`.
fn error_response(status: &Status) -> Response {
    let code = match status.code() {
        Code::InvalidArgument | Code::OutOfRange => StatusCode::BAD_REQUEST,
        Code::NotFound => StatusCode::NOT_FOUND,
        Code::AlreadyExists | Code::FailedPrecondition | Code::Aborted => StatusCode::CONFLICT,
        Code::ResourceExhausted | Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        Code::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
        Code::PermissionDenied => StatusCode::FORBIDDEN,
        Code::Unauthenticated => StatusCode::UNAUTHORIZED,
        Code::Unimplemented => StatusCode::NOT_IMPLEMENTED,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    let mut response = text(code, status.message());
    // A refusal that says when to come back (a pending-session cap, see
    // `super::pending`): 503 with Retry-After in seconds (RFC 9110 §10.2.3).
    if code == StatusCode::SERVICE_UNAVAILABLE
        && let Some(ms) = status
            .metadata()
            .get(RETRY_PUSHBACK_KEY)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
        && let Ok(value) = HeaderValue::from_str(&retry_secs(Duration::from_millis(ms)).to_string())
    {
        response.headers_mut().insert(header::RETRY_AFTER, value);
    }
    response
}

/// The client's IP address, from the connection the request came on.
fn client_ip(request: &axum::http::Extensions) -> Option<IpAddr> {
    request
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(addr)| addr.ip())
}

fn text(code: StatusCode, message: &str) -> Response {
    (
        code,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        format!("{message}\n"),
    )
        .into_response()
}

/// The `?identity=`, `?name=` and `?access_token=` of a WHIP/WHEP POST.
#[derive(Debug, Default, PartialEq, Eq)]
struct JoinQuery {
    identity: String,
    name: String,
    /// A token in the URL: what a cluster node's redirect carries, since clients
    /// drop `Authorization` when they follow it. The header wins when both are
    /// given.
    access_token: String,
}

impl JoinQuery {
    /// Parses a query as `application/x-www-form-urlencoded` (`&`-separated
    /// `name=value`, `+` for a space, percent-escapes). axum's `Query` decodes an
    /// escape that is not UTF-8 into U+FFFD, so `%ff` and `%fe` would be one identity;
    /// here it is refused, as the path's own escapes are. Other parameters are
    /// ignored; `identity` or `name` given twice is refused.
    fn parse(query: &str) -> Result<JoinQuery, String> {
        let mut identity = None;
        let mut name = None;
        let mut access_token = None;
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let key = form_decode(key)
                .ok_or("a query parameter's name is not UTF-8 once percent-decoded")?;
            let slot = match key.as_str() {
                "identity" => &mut identity,
                "name" => &mut name,
                "access_token" => &mut access_token,
                _ => continue,
            };
            if slot.is_some() {
                return Err(format!("?{key}= is given more than once"));
            }
            let value = form_decode(value)
                .ok_or_else(|| format!("?{key}= is not UTF-8 once percent-decoded"))?;
            *slot = Some(value);
        }
        Ok(JoinQuery {
            identity: identity.unwrap_or_default(),
            name: name.unwrap_or_default(),
            access_token: access_token.unwrap_or_default(),
        })
    }
}

/// One form-encoded name or value: `+` is a space, `%XX` a byte; `None` when the
/// bytes are not UTF-8. A `%` without two hex digits stays as it is (WHATWG URL §1.3).
fn form_decode(text: &str) -> Option<String> {
    let spaced = text.replace('+', " ");
    let bytes: Vec<u8> = percent_encoding::percent_decode_str(&spaced).collect();
    String::from_utf8(bytes).ok()
}

/// Whether the request says its body is `application/sdp` (parameters allowed).
fn is_sdp(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/sdp"))
}

/// Reads a body of at most `limit` bytes (`--max-http-body-bytes`) that arrives
/// whole within `time` (`--http-header-timeout`); a slower one gets 408 (RFC 9110
/// §15.5.9).
async fn read_body(body: Body, limit: usize, time: Duration) -> Result<Bytes, Response> {
    let Ok(read) = tokio::time::timeout(time, axum::body::to_bytes(body, limit)).await else {
        return Err(text(
            StatusCode::REQUEST_TIMEOUT,
            &format!("the body did not arrive within {} s", time.as_secs()),
        ));
    };
    read.map_err(|_| {
        text(
            StatusCode::PAYLOAD_TOO_LARGE,
            &format!("the body is larger than {limit} bytes, or was cut off"),
        )
    })
}

/// `POST /whip/{room}` and `POST /whep/{room}` (RFC 9725 §4.2).
async fn create(
    kind: Kind,
    State(http): State<Http>,
    Path(room): Path<String>,
    RawQuery(query): RawQuery,
    request: Request,
) -> Response {
    // RFC 9725 §4.2: another content type MUST get a 4xx.
    if !is_sdp(request.headers()) {
        return text(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "the offer must be sent with Content-Type: application/sdp",
        );
    }
    let raw_query = query.unwrap_or_default();
    let query = match JoinQuery::parse(&raw_query) {
        Ok(query) => query,
        Err(message) => return text(StatusCode::BAD_REQUEST, &message),
    };
    let state = &http.state;
    let from = client_ip(request.extensions());
    let path = request.uri().path().to_owned();
    // RFC 9725 §4.5: the bearer token decides who joins, before the offer is read.
    let token = authorization(request.headers())
        .or(Some(query.access_token.as_str()).filter(|t| !t.is_empty()));
    let caller = match state.auth().check(token, Act::Join { room: &room }) {
        Ok(caller) => caller,
        Err(e) => return auth_refusal(&e),
    };
    let (may, grant) = match kind {
        Kind::Whip => (caller.permissions().publish, "canPublish"),
        Kind::Whep => (caller.permissions().subscribe, "canSubscribe"),
    };
    if !may {
        let e = state.auth().refuse(
            Refusal::Forbidden,
            format!("the token does not grant {grant}"),
        );
        return auth_refusal(&e);
    }
    let identity = match state.auth().counted(caller.identity_for(query.identity)) {
        Ok(identity) => identity,
        Err(e) => return auth_refusal(&e),
    };
    let body = match read_body(
        request.into_body(),
        state.max_body_bytes(),
        state.body_timeout(),
    )
    .await
    {
        Ok(body) => body,
        Err(response) => return response,
    };
    // In a cluster, the room's owner serves the session (RFC 9725 §4.5: the
    // endpoint may redirect with 307; the client repeats the POST there).
    match state
        .room_owner(&room, Place::on_join(state.auto_create_rooms()), 0)
        .await
    {
        Ok(None) => {}
        Ok(Some(node)) => {
            let token = state.auth().reissue(&caller, REDIRECT_TOKEN_TTL);
            return redirect(&node.http_url, &path, &redirect_query(&raw_query, token));
        }
        Err(status) => return error_response(&status),
    }
    if !state.auto_create_rooms()
        && let Err(e) = state.rooms().get(&room)
    {
        return error_response(&e.into());
    }
    let offer = match check_offer(&body) {
        Ok(offer) => offer,
        Err(status) => return error_response(&status),
    };
    // Admission and negotiation run as a task of their own: a client that gives up
    // on the request (dropping this future) must not leave a participant admitted
    // but never negotiated. The task finishes either way; a peer whose answer was
    // never read times out on its shard and is forgotten then.
    let task_state = state.clone();
    let joined = tokio::spawn(async move {
        let admitted = task_state
            .admit(Admission {
                room,
                identity,
                name: caller.name(query.name),
                metadata: caller.metadata(String::new()),
                http_session: Some(kind),
                signal: None,
                permissions: caller.permissions(),
                from,
                // WHEP plays what the room has; a WHIP publisher is sent nothing.
                auto_subscribe: true,
            })
            .await?;
        match task_state.negotiate(&admitted, &offer).await {
            Ok(answer) => Ok((admitted, answer)),
            Err(status) => {
                task_state.forget(admitted.peer, DisconnectReason::ConnectionLost);
                Err(status)
            }
        }
    })
    .await;
    let (admitted, answer) = match joined {
        Ok(Ok(joined)) => joined,
        Ok(Err(status)) => return error_response(&status),
        Err(_) => return error_response(&tonic::Status::internal("joining failed")),
    };
    let location = format!(
        "/{}/{}/{}",
        prefix(kind),
        percent_encode(&admitted.room),
        admitted.session.as_deref().unwrap_or_default()
    );
    let mut response = (StatusCode::CREATED, answer).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/sdp"),
    );
    if let Ok(location) = HeaderValue::from_str(&location) {
        headers.insert(header::LOCATION, location);
    }
    // RFC 9725 §4.3.1: the entity-tag of the ICE session, for PATCH's If-Match.
    if let Some(tag) = state
        .ice_etag(admitted.peer)
        .and_then(|t| HeaderValue::from_str(&t).ok())
    {
        headers.insert(header::ETAG, tag);
    }
    // RFC 9725 §4.6: the STUN/TURN servers, one Link each. Their texts are printable
    // ASCII (checked at start-up, minted ones by construction), so each is a valid
    // header value.
    for link in link_headers(&state.ice_servers_for(admitted.peer)) {
        if let Ok(link) = HeaderValue::from_str(&link) {
            headers.append(header::LINK, link);
        }
    }
    response
}

/// `DELETE /whip/{room}/{session}`: the session ends, its peer leaves its shard. A
/// session is found only under the kind it was created as; with API keys, the token
/// of the session's identity or roomAdmin of its room.
async fn end(
    kind: Kind,
    State(http): State<Http>,
    Path((room, session)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    let peer = match authorized_session(&http.state, &headers, &room, kind, &session) {
        Ok(peer) => peer,
        Err(response) => return *response,
    };
    http.state.left(peer, DisconnectReason::ClientLeft).await;
    text(StatusCode::OK, "session ended")
}

/// `PATCH /whip/{room}/{session}` (RFC 9725 §4.3): an
/// `application/trickle-ice-sdpfrag` (RFC 8840). New ICE credentials restart ICE:
/// `If-Match: "*"` (or the current entity-tag), 200 with shoal's new credentials,
/// its candidates and the new ETag; a restart while another of the session's is
/// under way, 409. Anything else is trickle: `If-Match` with the current
/// entity-tag (or `*`, RFC 9110 §13.1.1), 204; the candidates are of no use to an
/// ICE-lite agent and are dropped. No `If-Match`: 428 (RFC 6585 §3); a stale one:
/// 412 (RFC 9110 §13.1.1).
async fn patch(
    kind: Kind,
    State(http): State<Http>,
    Path((room, session)): Path<(String, String)>,
    request: Request,
) -> Response {
    let state = &http.state;
    let peer = match authorized_session(state, request.headers(), &room, kind, &session) {
        Ok(peer) => peer,
        Err(response) => return *response,
    };
    let is_fragment = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|t| t.trim().eq_ignore_ascii_case(SDPFRAG));
    if !is_fragment {
        return text(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "a PATCH must be sent with Content-Type: application/trickle-ice-sdpfrag",
        );
    }
    // RFC 9110 §5.3: repeated field lines combine into one list.
    let if_match: Vec<String> = request
        .headers()
        .get_all(header::IF_MATCH)
        .iter()
        .map(|v| String::from_utf8_lossy(v.as_bytes()).trim().to_owned())
        .collect();
    let if_match = (!if_match.is_empty()).then(|| if_match.join(", "));
    let body = match read_body(
        request.into_body(),
        state.max_body_bytes(),
        state.body_timeout(),
    )
    .await
    {
        Ok(body) => body,
        Err(response) => return response,
    };
    let fragment = match IceFragment::parse(&body) {
        Ok(f) => f,
        Err(e) => return text(StatusCode::BAD_REQUEST, &format!("bad sdpfrag: {e}")),
    };
    let Some(etag) = state.ice_etag(peer) else {
        return text(StatusCode::NOT_FOUND, "no such session");
    };
    let Some(if_match) = if_match else {
        return text(
            StatusCode::PRECONDITION_REQUIRED,
            "a PATCH needs If-Match: the session's ETag, or \"*\" for an ICE restart \
             (RFC 9725 §4.3)",
        );
    };
    let matches = if_match == "*" || if_match.split(',').any(|t| t.trim() == etag);
    if !matches {
        return text(
            StatusCode::PRECONDITION_FAILED,
            "If-Match names another ICE session than the current one",
        );
    }
    let restart = fragment.credentials.as_ref().filter(|(u, p)| {
        state
            .remote_ice(peer)
            .is_some_and(|(ru, rp)| *u != ru || *p != rp)
    });
    let Some((ufrag, pwd)) = restart else {
        // Trickle: candidates an ICE-lite agent does not use (RFC 8445 §2.5).
        return StatusCode::NO_CONTENT.into_response();
    };
    // Checked again under the session's lock, where the restart is claimed.
    let precondition = if if_match == "*" {
        Precondition::None
    } else {
        Precondition::Etag(&if_match)
    };
    match state.restart_ice(peer, ufrag, pwd, precondition).await {
        Ok((local_ufrag, local_pwd)) => {
            // RFC 9725 §4.3: the new credentials and the set of candidates, which
            // a client puts in place of the old set.
            let mut body =
                format!("a=ice-lite\r\na=ice-ufrag:{local_ufrag}\r\na=ice-pwd:{local_pwd}\r\n");
            if let Some((mid, lines)) = state.candidate_lines(peer) {
                body.push_str(&format!("m=audio 9 UDP/TLS/RTP/SAVPF 0\r\na=mid:{mid}\r\n"));
                for line in lines {
                    body.push_str(&line);
                    body.push_str("\r\n");
                }
                body.push_str("a=end-of-candidates\r\n");
            }
            let mut response = (StatusCode::OK, body).into_response();
            let headers = response.headers_mut();
            headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(SDPFRAG));
            if let Ok(tag) = HeaderValue::from_str(&format!("\"{local_ufrag}\"")) {
                headers.insert(header::ETAG, tag);
            }
            response
        }
        // RFC 9725 §4.3: a restart that cannot be done keeps the existing session.
        Err(status)
            if status.code() == tonic::Code::FailedPrecondition
                && status.message().starts_with("If-Match") =>
        {
            text(StatusCode::PRECONDITION_FAILED, status.message())
        }
        Err(status) => error_response(&status),
    }
}

/// The session `session` of `room` if the request may act on it: 401 without a
/// valid token (before anything about the session is told), 404 when there is no
/// such session, 403 when the token is neither the session's own identity's for
/// its room nor roomAdmin of it.
fn authorized_session(
    state: &ControlState,
    headers: &HeaderMap,
    room: &str,
    kind: Kind,
    session: &str,
) -> Result<PeerId, Box<Response>> {
    let caller = state
        .auth()
        .check(authorization(headers), Act::Authenticated)
        .map_err(|e| Box::new(auth_refusal(&e)))?;
    let not_found = || Box::new(text(StatusCode::NOT_FOUND, "no such session"));
    let peer = state
        .session_peer(room, kind, session)
        .ok_or_else(not_found)?;
    let identity = state.member_identity(peer).ok_or_else(not_found)?;
    state
        .auth()
        .permit(
            &caller,
            Act::Session {
                room,
                identity: &identity,
            },
        )
        .map_err(|e| Box::new(auth_refusal(&e)))?;
    Ok(peer)
}

/// The bearer token of a request's `Authorization` header (RFC 6750 §2.1).
fn authorization(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer)
}

/// The response to a refused request (RFC 6750 §3): 401 with a `Bearer`
/// challenge when the token is missing (no error code, §3) or invalid
/// (`invalid_token`, §3.1), 403 with `insufficient_scope` when its grants do not
/// cover the request.
fn auth_refusal(e: &AuthError) -> Response {
    let (status, challenge) = match e.refusal {
        Refusal::Missing => (StatusCode::UNAUTHORIZED, "Bearer realm=\"shoal\""),
        Refusal::Forbidden => (
            StatusCode::FORBIDDEN,
            "Bearer realm=\"shoal\", error=\"insufficient_scope\"",
        ),
        _ => (
            StatusCode::UNAUTHORIZED,
            "Bearer realm=\"shoal\", error=\"invalid_token\"",
        ),
    };
    let mut response = text(status, &e.message);
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static(challenge),
    );
    response
}

/// The media type of a PATCH body (RFC 8840 §9).
const SDPFRAG: &str = "application/trickle-ice-sdpfrag";

/// The methods of a WHIP/WHEP endpoint (`/whip/{room}`).
const ENDPOINT_METHODS: &str = "POST, OPTIONS";
/// The methods of a WHIP/WHEP session (`/whip/{room}/{session}`).
const SESSION_METHODS: &str = "DELETE, OPTIONS, PATCH";
/// The request headers a cross-origin WHIP/WHEP client may send: the offer's type
/// and a bearer token (RFC 9725 §4.7.1).
const ALLOWED_REQUEST_HEADERS: &str = "Content-Type, Authorization, If-Match";
/// How long a browser may cache a preflight's answer, in seconds.
const PREFLIGHT_MAX_AGE: &str = "86400";

/// `OPTIONS /whip/{room}` (RFC 9725 §4.2: Accept-Post, and the CORS preflight).
async fn endpoint_options() -> Response {
    let mut response = preflight(ENDPOINT_METHODS);
    response
        .headers_mut()
        .insert("accept-post", HeaderValue::from_static("application/sdp"));
    response
}

/// `OPTIONS /whip/{room}/{session}`: the CORS preflight of a DELETE.
async fn session_options() -> Response {
    preflight(SESSION_METHODS)
}

/// A 200 answering a CORS preflight (Fetch's "CORS-preflight request") for `methods`.
fn preflight(methods: &'static str) -> Response {
    let mut response = StatusCode::OK.into_response();
    let headers = response.headers_mut();
    headers.insert(header::ALLOW, HeaderValue::from_static(methods));
    headers.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static(methods),
    );
    headers.insert(
        header::ACCESS_CONTROL_ALLOW_HEADERS,
        HeaderValue::from_static(ALLOWED_REQUEST_HEADERS),
    );
    headers.insert(
        header::ACCESS_CONTROL_MAX_AGE,
        HeaderValue::from_static(PREFLIGHT_MAX_AGE),
    );
    response
}

/// Adds to every WHIP/WHEP response (errors too, so a page can read them) what lets a
/// cross-origin page read it: its origin (any, or the request's when it is allowed),
/// and the `Location` and `Link` headers of a new session.
async fn cors(
    State(origins): State<AllowedOrigins>,
    request: Request,
    next: axum::middleware::Next,
) -> Response {
    let allowed = if origins.is_any() {
        Some(HeaderValue::from_static("*"))
    } else {
        request
            .headers()
            .get(header::ORIGIN)
            .and_then(|o| origins.find(o.as_bytes()))
            .and_then(|o| HeaderValue::from_str(o.as_str()).ok())
    };
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    if !origins.is_any() {
        // The answer depends on the request's Origin: caches must keep them apart.
        headers.append(header::VARY, HeaderValue::from_static("Origin"));
    }
    if let Some(origin) = allowed {
        headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
    }
    headers.insert(
        header::ACCESS_CONTROL_EXPOSE_HEADERS,
        HeaderValue::from_static("Location, Link, ETag, WWW-Authenticate"),
    );
    response
}

/// `?access_token=` of `GET /signal`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct SignalQuery {
    access_token: Option<String>,
}

/// `GET /signal`: upgrades to the signalling WebSocket. A browser page's origin
/// must be allowed (403 otherwise, RFC 6455 §4.2.2, before anything else is
/// looked at). A token in
/// `?access_token=` (a browser's WebSocket cannot send headers) is checked here: an
/// invalid one gets 401 before the upgrade; its grants are checked at `join`.
/// Without one, the session's first message may be `auth`.
async fn signal(
    State(http): State<Http>,
    Query(query): Query<SignalQuery>,
    headers: HeaderMap,
    extensions: axum::http::Extensions,
    upgrade: WebSocketUpgrade,
) -> Response {
    let origin = headers.get(header::ORIGIN);
    if !http
        .state
        .allowed_origins()
        .allows(origin.map(HeaderValue::as_bytes))
    {
        http.state.limit_counters().count(Limit::Origin);
        let shown = origin.and_then(|o| o.to_str().ok()).unwrap_or("?");
        return text(
            StatusCode::FORBIDDEN,
            &format!(
                "pages of the origin {shown:?} may not open /signal: it is not in the \
                 node's --allowed-origins"
            ),
        );
    }
    let from = client_ip(&extensions);
    let token = query
        .access_token
        .or_else(|| authorization(&headers).map(str::to_owned));
    if token.is_some()
        && let Err(e) = http
            .state
            .auth()
            .check(token.as_deref(), Act::Authenticated)
    {
        return auth_refusal(&e);
    }
    // Without a token, one may come as the first message: a few such connections
    // wait at once, briefly, so strangers cannot hold the slots.
    let unauthenticated = if token.is_none() && !http.state.auth().is_open() {
        match http.unauthenticated.clone().try_acquire_owned() {
            Ok(permit) => Some(permit),
            Err(_) => {
                let e = http.state.auth().refuse(
                    Refusal::Missing,
                    "an access token is required (?access_token=)",
                );
                return auth_refusal(&e);
            }
        }
    } else {
        None
    };
    let slot = match http.state.signal_slot(from) {
        Ok(slot) => slot,
        Err(limit) => {
            return text(
                StatusCode::SERVICE_UNAVAILABLE,
                &format!("too many signalling connections ({limit})"),
            );
        }
    };
    websocket::accept(upgrade, http.state, token, unauthenticated, slot, from)
}

/// How long the token a redirect carries is valid: long enough to follow it.
const REDIRECT_TOKEN_TTL: Duration = Duration::from_secs(60);

/// The query of a redirect: the request's own, without its `access_token`, and
/// `token` as `access_token` when there is one.
fn redirect_query(query: &str, token: Option<String>) -> String {
    let mut pairs: Vec<String> = query
        .split('&')
        .filter(|p| !p.is_empty())
        .filter(|p| p.split('=').next() != Some("access_token"))
        .map(str::to_owned)
        .collect();
    if let Some(token) = token {
        // A JWT is base64url and dots: nothing to escape.
        pairs.push(format!("access_token={token}"));
    }
    pairs.join("&")
}

/// 307 Temporary Redirect to `path` with `query` on the node at `base`: the client
/// repeats the same request there (RFC 9110 §15.4.8: the method and body stay).
fn redirect(base: &str, path: &str, query: &str) -> Response {
    let location = if query.is_empty() {
        format!("{base}{path}")
    } else {
        format!("{base}{path}?{query}")
    };
    let mut response = text(
        StatusCode::TEMPORARY_REDIRECT,
        &format!("the room is served by {base}"),
    );
    match HeaderValue::from_str(&location) {
        Ok(location) => {
            response.headers_mut().insert(header::LOCATION, location);
            response
        }
        Err(_) => text(StatusCode::INTERNAL_SERVER_ERROR, "no redirect location"),
    }
}

/// `s` with everything but RFC 3986 unreserved characters percent-encoded, for a path
/// segment.
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn room_names_are_encoded_for_the_location() {
        assert_eq!(percent_encode("lobby"), "lobby");
        assert_eq!(percent_encode("a b/é"), "a%20b%2F%C3%A9");
    }

    #[test]
    fn a_redirect_query_swaps_the_token() {
        assert_eq!(redirect_query("", None), "");
        assert_eq!(
            redirect_query("name=A&access_token=old&identity=x", Some("new".into())),
            "name=A&identity=x&access_token=new"
        );
        assert_eq!(redirect_query("access_token=old", None), "");
    }

    #[test]
    fn join_queries_are_decoded_strictly() {
        let parsed = |q: &str| JoinQuery::parse(q);
        assert_eq!(parsed(""), Ok(JoinQuery::default()));
        assert_eq!(
            parsed("identity=al%C3%A9+x&name=A%20B&other=%ff&flag"),
            Ok(JoinQuery {
                identity: "alé x".into(),
                name: "A B".into(),
                access_token: String::new(),
            })
        );
        assert_eq!(
            parsed("access_token=a.b.c").map(|q| q.access_token),
            Ok("a.b.c".into())
        );
        // Not UTF-8 once decoded: refused, not turned into U+FFFD.
        let refused = parsed("identity=%ff").expect_err("invalid UTF-8");
        assert!(refused.contains("?identity="), "{refused}");
        assert!(parsed("name=%C3").is_err());
        assert!(parsed("%ff=x").is_err());
        assert!(parsed("identity=a&identity=b").is_err());
        // A stray % is kept, as form decoding does.
        assert_eq!(
            parsed("identity=100%").map(|q| q.identity),
            Ok("100%".into())
        );
    }

    #[test]
    fn content_types_with_parameters_are_sdp() {
        let mut h = HeaderMap::new();
        assert!(!is_sdp(&h));
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/SDP; charset=utf-8"),
        );
        assert!(is_sdp(&h));
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        assert!(!is_sdp(&h));
    }
}
