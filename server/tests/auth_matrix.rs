//! Acceptance: with an API key configured, every path that acts (WHIP, WHEP, a
//! session's DELETE and PATCH, `/signal`, `SignalService`, each `RoomService`
//! method) answers each kind of token as it must, one row per case:
//!
//! | case | HTTP | gRPC / signalling |
//! |---|---|---|
//! | no token, bad signature, `alg: none`, expired, not yet valid | 401 + `WWW-Authenticate: Bearer` | UNAUTHENTICATED |
//! | a valid token for another room, one without the grant | 403 | PERMISSION_DENIED |
//! | a valid token with the grant | 2xx | OK |
//!
//! and only the valid case acts: the room keeps its participants, sessions, rooms
//! and ICE credentials through every refused row. The node counts every refusal
//! by reason (GetNodeInfo).

mod grpc_node;
mod http_client;
mod signal_ws;
mod tokens;

use signal_ws::{WAIT, next_json};
use std::net::SocketAddr;

use futures_util::{SinkExt, StreamExt};
use http_client::{Reply, fixture_offer, request_with_headers};
use shoal_proto::v1::node_service_client::NodeServiceClient;
use shoal_proto::v1::room_service_client::RoomServiceClient;
use shoal_proto::v1::signal_service_client::SignalServiceClient;
use shoal_proto::v1::{
    CreateRoomRequest, DeleteRoomRequest, GetNodeInfoRequest, GetRoomRequest, JoinRequest,
    ListParticipantsRequest, ListRoomsRequest, MutePublishedTrackRequest, RemoveParticipantRequest,
    SendDataRequest, SignalRequest, UpdateSubscriptionsRequest, signal_request, signal_response,
};
use shoal_server::config::Config;
use shoal_server::control::auth::{Claims, VideoGrant};
use tokio_tungstenite::tungstenite::Message;
use tonic::Code;
use tonic::transport::Channel;

/// The room the paths act on.
const ROOM: &str = "lobby";

/// One row's token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Case {
    NoToken,
    BadSignature,
    AlgNone,
    Expired,
    NotYetValid,
    OtherRoom,
    GrantMissing,
    Valid,
}

const CASES: [Case; 8] = [
    Case::NoToken,
    Case::BadSignature,
    Case::AlgNone,
    Case::Expired,
    Case::NotYetValid,
    Case::OtherRoom,
    Case::GrantMissing,
    Case::Valid,
];

/// What a row must get.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Unauthenticated,
    Forbidden,
    Acted,
}

impl Case {
    fn expected(self) -> Outcome {
        match self {
            Case::OtherRoom | Case::GrantMissing => Outcome::Forbidden,
            Case::Valid => Outcome::Acted,
            _ => Outcome::Unauthenticated,
        }
    }

    /// The token of this case for an act whose valid grant is `grant` for
    /// `identity`. "Other room": the same grant for another room (for the global
    /// grants, roomCreate and roomList, a room-bound grant of another room); "grant
    /// missing": the path's room with no grant.
    fn token(self, identity: &str, grant: &VideoGrant) -> Option<String> {
        let valid = tokens::claims(identity, grant.clone());
        let other = VideoGrant {
            room: "elsewhere".into(),
            room_create: false,
            room_list: false,
            room_join: grant.room_join || grant.room_create || grant.room_list,
            room_admin: grant.room_admin || grant.room_create || grant.room_list,
            ..grant.clone()
        };
        let bare = VideoGrant {
            room: ROOM.into(),
            ..VideoGrant::default()
        };
        Some(match self {
            Case::NoToken => return None,
            Case::BadSignature => tokens::forged(&valid),
            Case::AlgNone => tokens::unsigned(&valid),
            Case::Expired => tokens::expired(valid),
            Case::NotYetValid => tokens::premature(valid),
            Case::OtherRoom => tokens::sign(&tokens::claims(identity, other)),
            Case::GrantMissing => tokens::sign(&Claims {
                video: Some(bare),
                ..valid
            }),
            Case::Valid => tokens::sign(&valid),
        })
    }
}

/// The outcome of an HTTP reply, checking the challenge RFC 6750 §3 asks for.
#[track_caller]
fn http_outcome(reply: &Reply, acted: u16) -> Outcome {
    match reply.status {
        401 => {
            let challenge = reply.header("www-authenticate").unwrap_or_default();
            assert!(challenge.starts_with("Bearer"), "{reply:?}");
            Outcome::Unauthenticated
        }
        403 => Outcome::Forbidden,
        s if s == acted => Outcome::Acted,
        _ => panic!("unexpected reply {reply:?}"),
    }
}

/// The outcome of a gRPC result.
#[track_caller]
fn grpc_outcome<T: std::fmt::Debug>(result: &Result<T, tonic::Status>) -> Outcome {
    match result {
        Ok(_) => Outcome::Acted,
        Err(s) if s.code() == Code::Unauthenticated => Outcome::Unauthenticated,
        Err(s) if s.code() == Code::PermissionDenied => Outcome::Forbidden,
        Err(s) => panic!("unexpected status {s:?}"),
    }
}

/// `message` with `authorization: Bearer <token>` metadata, if any.
fn with_token<T>(message: T, token: Option<&str>) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    if let Some(t) = token {
        request.metadata_mut().insert(
            "authorization",
            format!("Bearer {t}").parse().expect("ASCII"),
        );
    }
    request
}

/// Posts an offer to `path` with `token`.
fn post(http: SocketAddr, path: &str, token: Option<&str>) -> Reply {
    let offer = fixture_offer("chromium156_data_offer.sdp");
    let bearer = token.map(|t| format!("Bearer {t}"));
    let mut headers = vec![("Content-Type", "application/sdp")];
    if let Some(b) = &bearer {
        headers.push(("Authorization", b.as_str()));
    }
    request_with_headers(http, "POST", path, &headers, offer.as_bytes())
}

/// An operator's RoomService client calls with this token.
fn operator() -> String {
    tokens::token("operator", tokens::operator(ROOM))
}

async fn identities(rooms: &mut RoomServiceClient<Channel>, room: &str) -> Vec<String> {
    rooms
        .list_participants(with_token(
            ListParticipantsRequest {
                room: room.into(),
                ..ListParticipantsRequest::default()
            },
            Some(&tokens::token("operator", tokens::operator(room))),
        ))
        .await
        .map(|r| {
            r.into_inner()
                .participants
                .into_iter()
                .map(|p| p.identity)
                .collect()
        })
        .unwrap_or_default()
}

async fn room_exists(rooms: &mut RoomServiceClient<Channel>, name: &str) -> bool {
    rooms
        .get_room(with_token(
            GetRoomRequest { name: name.into() },
            Some(&operator()),
        ))
        .await
        .is_ok()
}

/// Opens a WHIP session of `identity` in `room`; returns its Location and ETag.
fn session(http: SocketAddr, room: &str, identity: &str) -> (String, String) {
    let token = tokens::token(identity, tokens::join(room));
    let reply = post(http, &format!("/whip/{room}"), Some(&token));
    assert_eq!(reply.status, 201, "{reply:?}");
    (
        reply.header("location").expect("a Location").to_owned(),
        reply.header("etag").expect("an ETag").to_owned(),
    )
}

/// `/signal` with `token` in `?access_token=`, joining `room` as `identity`.
async fn signal_join(http: SocketAddr, token: Option<&str>, first_auth: bool) -> Outcome {
    let url = match token.filter(|_| !first_auth) {
        Some(t) => format!("ws://{http}/signal?access_token={t}"),
        None => format!("ws://{http}/signal"),
    };
    let mut ws = match tokio_tungstenite::connect_async(url).await {
        Ok((ws, _)) => ws,
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            assert_eq!(response.status(), 401, "{response:?}");
            assert!(response.headers().contains_key("www-authenticate"));
            return Outcome::Unauthenticated;
        }
        Err(e) => panic!("handshake: {e}"),
    };
    if first_auth && let Some(t) = token {
        let auth = serde_json::json!({"auth": {"token": t}});
        ws.send(Message::text(auth.to_string())).await.unwrap();
    }
    ws.send(Message::text(format!(
        r#"{{"join": {{"room": "{ROOM}"}}}}"#
    )))
    .await
    .unwrap();
    let reply = next_json(&mut ws).await.expect("a reply to join");
    let outcome = if reply.get("join").is_some() {
        Outcome::Acted
    } else {
        match reply["error"]["code"].as_str() {
            Some("unauthenticated") => Outcome::Unauthenticated,
            Some("permission_denied") => Outcome::Forbidden,
            _ => panic!("unexpected reply {reply}"),
        }
    };
    if outcome != Outcome::Acted {
        assert_eq!(next_json(&mut ws).await, None, "the socket closes");
    }
    outcome
}

/// `SignalService.Connect` with `token` metadata, joining `ROOM`.
async fn signal_service_join(grpc: Channel, token: Option<&str>) -> Outcome {
    let mut client = SignalServiceClient::new(grpc);
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tx.send(SignalRequest {
        message: Some(signal_request::Message::Join(JoinRequest {
            room: ROOM.into(),
            ..JoinRequest::default()
        })),
    })
    .await
    .unwrap();
    let outbound = tokio_stream::wrappers::ReceiverStream::new(rx);
    let mut stream = match client.connect(with_token(outbound, token)).await {
        Ok(r) => r.into_inner(),
        Err(s) => return grpc_outcome::<()>(&Err(s)),
    };
    let first = tokio::time::timeout(WAIT, stream.next())
        .await
        .expect("a reply in time")
        .expect("a reply");
    let outcome = match &first {
        Ok(r) => {
            assert!(
                matches!(r.message, Some(signal_response::Message::Join(_))),
                "{r:?}"
            );
            Outcome::Acted
        }
        Err(_) => grpc_outcome(&first),
    };
    drop(tx);
    outcome
}

#[test]
fn auth_matrix() {
    let (_server, control) = grpc_node::start_node(Config {
        api_keys: vec![tokens::api_key()],
        ..Config::default()
    });
    let http = control.http_addr().expect("HTTP is on");
    let grpc_addr = control.grpc_addr().expect("gRPC is on");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let grpc = runtime.block_on(grpc_node::connect(grpc_addr));
    let mut rooms = RoomServiceClient::new(grpc.clone());
    let mut checked = 0;

    // WHIP and WHEP: roomJoin of the URL's room. A refused row adds nobody.
    for (path, identity) in [("whip", "publisher"), ("whep", "player")] {
        for case in CASES {
            let before = runtime.block_on(identities(&mut rooms, ROOM));
            let token = case.token(identity, &tokens::join(ROOM));
            let reply = post(http, &format!("/{path}/{ROOM}"), token.as_deref());
            let outcome = http_outcome(&reply, 201);
            assert_eq!(outcome, case.expected(), "{path} {case:?}: {reply:?}");
            let after = runtime.block_on(identities(&mut rooms, ROOM));
            if case == Case::Valid {
                assert!(after.contains(&identity.to_owned()), "{path}: {after:?}");
            } else {
                assert_eq!(before, after, "{path} {case:?} must not act");
            }
            checked += 1;
        }
    }

    // A session's DELETE and PATCH: its own identity's token (roomJoin of its room).
    let (location, etag) = session(http, ROOM, "alice");
    let restart = "a=ice-ufrag:Zq9x\r\na=ice-pwd:newpasswordnewpassword12\r\n";
    for case in CASES {
        let token = case.token("alice", &tokens::join(ROOM));
        let bearer = token.as_ref().map(|t| format!("Bearer {t}"));
        let mut headers = vec![
            ("Content-Type", "application/trickle-ice-sdpfrag"),
            ("If-Match", etag.as_str()),
        ];
        if let Some(b) = &bearer {
            headers.push(("Authorization", b.as_str()));
        }
        let reply = request_with_headers(http, "PATCH", &location, &headers, restart.as_bytes());
        let outcome = http_outcome(&reply, 200);
        assert_eq!(outcome, case.expected(), "PATCH {case:?}: {reply:?}");
        if case != Case::Valid {
            // The ICE session is the same: the entity-tag still matches.
            let valid = tokens::token("alice", tokens::join(ROOM));
            let bearer = format!("Bearer {valid}");
            let trickle = request_with_headers(
                http,
                "PATCH",
                &location,
                &[
                    ("Content-Type", "application/trickle-ice-sdpfrag"),
                    ("If-Match", etag.as_str()),
                    ("Authorization", bearer.as_str()),
                ],
                b"a=end-of-candidates\r\n",
            );
            assert_eq!(
                trickle.status, 204,
                "PATCH {case:?} must not act: {trickle:?}"
            );
        } else {
            assert_ne!(reply.header("etag"), Some(etag.as_str()), "{reply:?}");
        }
        checked += 1;
    }
    for case in CASES {
        let token = case.token("alice", &tokens::join(ROOM));
        let bearer = token.as_ref().map(|t| format!("Bearer {t}"));
        let headers: Vec<(&str, &str)> = bearer
            .iter()
            .map(|b| ("Authorization", b.as_str()))
            .collect();
        let reply = request_with_headers(http, "DELETE", &location, &headers, b"");
        let outcome = http_outcome(&reply, 200);
        assert_eq!(outcome, case.expected(), "DELETE {case:?}: {reply:?}");
        let present = runtime
            .block_on(identities(&mut rooms, ROOM))
            .contains(&"alice".to_owned());
        assert_eq!(present, case != Case::Valid, "DELETE {case:?}");
        checked += 1;
    }
    // Another participant's token may not end alice's session; roomAdmin may.
    let (location, _) = session(http, ROOM, "alice");
    let bob = format!("Bearer {}", tokens::token("bob", tokens::join(ROOM)));
    let reply = request_with_headers(http, "DELETE", &location, &[("Authorization", &bob)], b"");
    assert_eq!(reply.status, 403, "{reply:?}");
    let admin = format!("Bearer {}", operator());
    let reply = request_with_headers(http, "DELETE", &location, &[("Authorization", &admin)], b"");
    assert_eq!(reply.status, 200, "{reply:?}");

    // /signal: ?access_token= (checked at the upgrade), or a first `auth` message.
    for first_auth in [false, true] {
        for case in CASES {
            let identity = format!("ws-{first_auth}-{case:?}");
            let token = case.token(&identity, &tokens::join(ROOM));
            let outcome = runtime.block_on(signal_join(http, token.as_deref(), first_auth));
            // An `auth` message is read after the upgrade: a bad token is refused at join.
            assert_eq!(
                outcome,
                case.expected(),
                "/signal {case:?} auth={first_auth}"
            );
            checked += 1;
        }
    }

    // SignalService: `authorization` metadata.
    for case in CASES {
        let identity = format!("grpc-{case:?}");
        let token = case.token(&identity, &tokens::join(ROOM));
        let outcome = runtime.block_on(signal_service_join(grpc.clone(), token.as_deref()));
        assert_eq!(outcome, case.expected(), "SignalService {case:?}");
        checked += 1;
    }

    // RoomService, method by method.
    let create = VideoGrant {
        room_create: true,
        ..VideoGrant::default()
    };
    let list = VideoGrant {
        room_list: true,
        ..VideoGrant::default()
    };
    let admin = |room: &str| VideoGrant {
        room: room.into(),
        room_admin: true,
        ..VideoGrant::default()
    };
    runtime.block_on(async {
        for case in CASES {
            let name = format!("made-{case:?}").to_lowercase();
            let t = case.token("op", &create);
            let r = rooms
                .create_room(with_token(
                    CreateRoomRequest {
                        name: name.clone(),
                        ..CreateRoomRequest::default()
                    },
                    t.as_deref(),
                ))
                .await;
            assert_eq!(grpc_outcome(&r), case.expected(), "CreateRoom {case:?}");
            assert_eq!(room_exists(&mut rooms, &name).await, case == Case::Valid);

            let t = case.token("op", &list);
            let r = rooms
                .get_room(with_token(
                    GetRoomRequest { name: ROOM.into() },
                    t.as_deref(),
                ))
                .await;
            assert_eq!(grpc_outcome(&r), case.expected(), "GetRoom {case:?}");
            let r = rooms
                .list_rooms(with_token(ListRoomsRequest::default(), t.as_deref()))
                .await;
            assert_eq!(grpc_outcome(&r), case.expected(), "ListRooms {case:?}");

            let t = case.token("op", &admin(ROOM));
            let r = rooms
                .list_participants(with_token(
                    ListParticipantsRequest {
                        room: ROOM.into(),
                        ..ListParticipantsRequest::default()
                    },
                    t.as_deref(),
                ))
                .await;
            assert_eq!(
                grpc_outcome(&r),
                case.expected(),
                "ListParticipants {case:?}"
            );
            let r = rooms
                .send_data(with_token(
                    SendDataRequest {
                        room: ROOM.into(),
                        channel: "chat".into(),
                        payload: b"hello".to_vec(),
                        ..SendDataRequest::default()
                    },
                    t.as_deref(),
                ))
                .await;
            assert_eq!(grpc_outcome(&r), case.expected(), "SendData {case:?}");

            let victim = format!("victim-{case:?}").to_lowercase();
            session(http, ROOM, &victim);
            let r = rooms
                .update_subscriptions(with_token(
                    UpdateSubscriptionsRequest {
                        room: ROOM.into(),
                        identity: victim.clone(),
                        track_ids: Vec::new(),
                        subscribe: false,
                    },
                    t.as_deref(),
                ))
                .await;
            // The victim came over WHIP, with no signalling connection to be offered
            // the change on: a caller the checks let through gets FAILED_PRECONDITION.
            let outcome = match &r {
                Err(s) if s.code() == Code::FailedPrecondition => Outcome::Acted,
                _ => grpc_outcome(&r),
            };
            assert_eq!(outcome, case.expected(), "UpdateSubscriptions {case:?}");
            let r = rooms
                .mute_published_track(with_token(
                    MutePublishedTrackRequest {
                        room: ROOM.into(),
                        identity: victim.clone(),
                        track_id: "TR0".into(),
                        muted: true,
                    },
                    t.as_deref(),
                ))
                .await;
            // The victim publishes no TR0: a caller the checks let through reaches
            // the look-up, NOT_FOUND.
            let outcome = match &r {
                Err(s) if s.code() == Code::NotFound => Outcome::Acted,
                _ => grpc_outcome(&r),
            };
            assert_eq!(outcome, case.expected(), "MutePublishedTrack {case:?}");
            let r = rooms
                .remove_participant(with_token(
                    RemoveParticipantRequest {
                        room: ROOM.into(),
                        identity: victim.clone(),
                    },
                    t.as_deref(),
                ))
                .await;
            assert_eq!(
                grpc_outcome(&r),
                case.expected(),
                "RemoveParticipant {case:?}"
            );
            let present = identities(&mut rooms, ROOM).await.contains(&victim);
            assert_eq!(present, case != Case::Valid, "RemoveParticipant {case:?}");

            let doomed = format!("doomed-{case:?}").to_lowercase();
            rooms
                .create_room(with_token(
                    CreateRoomRequest {
                        name: doomed.clone(),
                        ..CreateRoomRequest::default()
                    },
                    Some(&operator()),
                ))
                .await
                .expect("created");
            let t = case.token("op", &admin(&doomed));
            let r = rooms
                .delete_room(with_token(
                    DeleteRoomRequest {
                        name: doomed.clone(),
                    },
                    t.as_deref(),
                ))
                .await;
            assert_eq!(grpc_outcome(&r), case.expected(), "DeleteRoom {case:?}");
            assert_eq!(room_exists(&mut rooms, &doomed).await, case != Case::Valid);
            checked += 7;
        }

        // Every refusal was counted, by reason.
        let info = NodeServiceClient::new(grpc.clone())
            .get_node_info(with_token(GetNodeInfoRequest {}, Some(&operator())))
            .await
            .expect("node info")
            .into_inner();
        for reason in [
            "missing",
            "bad_signature",
            "algorithm",
            "expired",
            "not_yet_valid",
            "forbidden",
        ] {
            assert!(
                info.auth_refusals.get(reason).copied().unwrap_or(0) >= 10,
                "{reason}: {:?}",
                info.auth_refusals
            );
        }
        // Without a token, not even the node's information.
        let r = NodeServiceClient::new(grpc.clone())
            .get_node_info(GetNodeInfoRequest {})
            .await;
        assert_eq!(grpc_outcome(&r), Outcome::Unauthenticated);
    });
    assert_eq!(checked, 13 * CASES.len() + 8, "every row ran");
}
