//! shoal and Chromium inside the network lab: a node started in a namespace (its
//! sockets, listeners and threads live there), a room made over its gRPC from
//! inside, and DevTools connections to browsers that run in other namespaces.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use shoal_server::config::Config;
use shoal_server::control::{ControlPlane, ControlSettings};
use shoal_server::driver::Server;

use crate::chromium::{Browser, Cdp, attach, devtools_over, devtools_port};
use crate::grpc_node;
use crate::lab::{Lab, Spoke, netns};
use crate::whip_page::STATS;
use shoal_proto::v1::room_service_client::RoomServiceClient;

/// Starts a node in namespace `ns` from `args` (flags as on the command line) and
/// creates `room` on it.
pub fn start_in(ns: &str, args: &[&str], room: &str) -> (Server, ControlPlane) {
    let (server, control) = start_node_in(ns, args);
    create_room_in(ns, control.grpc_addr().expect("gRPC is on"), room);
    (server, control)
}

/// Starts a node in namespace `ns` from `args` (flags as on the command line).
pub fn start_node_in(ns: &str, args: &[&str]) -> (Server, ControlPlane) {
    let args: Vec<String> = std::iter::once("shoal")
        .chain(args.iter().copied())
        .map(str::to_owned)
        .collect();
    netns::run_in(ns, move || {
        let config = Config::load_from(args).expect("the flags parse");
        let mut server = Server::start(&config).expect("shards start");
        let settings = ControlSettings::from_config(&config).expect("gRPC is on");
        let control =
            ControlPlane::start(settings, server.control_handles()).expect("control starts");
        (server, control)
    })
}

/// Runs `call` on a RoomService client of the gRPC at `grpc`, reached from inside
/// namespace `ns`.
fn rooms_in<T: Send + 'static, F>(
    ns: &str,
    grpc: SocketAddr,
    call: impl FnOnce(RoomServiceClient<tonic::transport::Channel>) -> F + Send + 'static,
) -> T
where
    F: std::future::Future<Output = T>,
{
    netns::run_in(ns, move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        runtime
            .block_on(async { call(RoomServiceClient::new(grpc_node::connect(grpc).await)).await })
    })
}

/// Creates `room` over the gRPC at `grpc`, reached from inside namespace `ns`.
pub fn create_room_in(ns: &str, grpc: SocketAddr, room: &str) {
    let room = room.to_owned();
    rooms_in(ns, grpc, |mut rooms| async move {
        rooms
            .create_room(shoal_proto::v1::CreateRoomRequest {
                name: room,
                ..Default::default()
            })
            .await
            .expect("room created");
    })
}

/// The participants of `room` as ListParticipants gives them, over the gRPC at
/// `grpc`, reached from inside namespace `ns`.
pub fn participants_in(
    ns: &str,
    grpc: SocketAddr,
    room: &str,
) -> Vec<shoal_proto::v1::Participant> {
    let room = room.to_owned();
    rooms_in(ns, grpc, |mut rooms| async move {
        rooms
            .list_participants(shoal_proto::v1::ListParticipantsRequest {
                room,
                ..Default::default()
            })
            .await
            .expect("participants listed")
            .into_inner()
            .participants
    })
}

/// A DevTools connection to `browser`, which runs in namespace `ns`.
pub async fn devtools_in(lab: &Lab, ns: &str, browser: &Browser) -> Cdp {
    let (port, _) = devtools_port(&browser.profile);
    let stream = lab.connect(ns, SocketAddr::from(([127, 0, 0, 1], port)));
    devtools_over(browser, stream).await
}

/// A page of a browser in the lab: its DevTools connection and session.
pub struct Page {
    pub cdp: Cdp,
    pub session: String,
}

impl Page {
    /// Attaches to the page at `url` of `browser`, which runs in namespace `ns`.
    pub async fn open(lab: &Lab, ns: &str, browser: &Browser, url: &str) -> Page {
        let mut cdp = devtools_in(lab, ns, browser).await;
        let session = attach(&mut cdp, url).await;
        Page { cdp, session }
    }

    /// Evaluates `expression` (awaiting a promise) in the page.
    pub async fn eval(&mut self, expression: &str) -> serde_json::Value {
        self.cdp.evaluate(&self.session, expression).await
    }

    /// Polls the page's `whip_page::STATS` until at least `frames` video frames
    /// are decoded (and, with `audio`, some audio received) or `timeout` passes;
    /// the last stats either way.
    pub async fn media(
        &mut self,
        frames: u64,
        audio: bool,
        timeout: Duration,
    ) -> serde_json::Value {
        let deadline = Instant::now() + timeout;
        loop {
            let got = self.eval(STATS).await;
            let decoded = got["framesDecoded"].as_u64().unwrap_or(0);
            let heard = got["audioPackets"].as_u64().unwrap_or(0);
            if (decoded >= frames && (!audio || heard > 0)) || Instant::now() > deadline {
                return got;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

/// shoal's address in a [`star`] lab.
pub const SFU: &str = "203.0.113.2";
/// shoal's UDP port base there.
pub const UDP_PORT: u16 = 7100;
/// shoal's HTTP port there.
pub const HTTP_PORT: u16 = 8080;

/// The namespaces of a [`star`] lab.
pub struct Star {
    /// shoal's, at [`SFU`].
    pub sfu: String,
    /// The router between all of them.
    pub router: String,
    /// A client at 198.51.100.2.
    pub client_a: String,
    /// A client at 198.51.100.66.
    pub client_b: String,
}

/// shoal's namespace and two clients' on one router, and `extra` spokes (of
/// namespaces the caller made) on it too.
pub fn star(lab: &mut Lab, extra: &[Spoke<'_>]) -> Star {
    let sfu = lab.namespace("sfu");
    let router = lab.namespace("router");
    let client_a = lab.namespace("client-a");
    let client_b = lab.namespace("client-b");
    let mut spokes = vec![
        Spoke {
            ns: &sfu,
            side: "to-sfu",
            inside: "203.0.113.2/24",
            outside: "203.0.113.1/24",
            gateway: "203.0.113.1",
        },
        Spoke {
            ns: &client_a,
            side: "to-a",
            inside: "198.51.100.2/26",
            outside: "198.51.100.1/26",
            gateway: "198.51.100.1",
        },
        Spoke {
            ns: &client_b,
            side: "to-b",
            inside: "198.51.100.66/26",
            outside: "198.51.100.65/26",
            gateway: "198.51.100.65",
        },
    ];
    spokes.extend_from_slice(extra);
    lab.star(&router, &spokes);
    Star {
        sfu,
        router,
        client_a,
        client_b,
    }
}

/// Starts shoal in `ns` bound to [`SFU`] (one shard, UDP base [`UDP_PORT`], HTTP
/// on [`HTTP_PORT`], gRPC on the namespace's loopback) with `extra` flags, and
/// creates `room`.
pub fn start_sfu(ns: &str, room: &str, extra: &[&str]) -> (Server, ControlPlane) {
    let bind = format!("--bind={SFU}");
    let udp = format!("--udp-port-base={UDP_PORT}");
    let http = format!("--http-addr={SFU}:{HTTP_PORT}");
    let mut args = vec![
        "--shards=1",
        bind.as_str(),
        udp.as_str(),
        http.as_str(),
        "--grpc-addr=127.0.0.1:7071",
    ];
    args.extend_from_slice(extra);
    start_in(ns, &args, room)
}

/// The demo page's URL on the lab's shoal.
pub fn page_url() -> String {
    format!("http://{SFU}:{HTTP_PORT}/")
}

/// The Chromium flag that lets the plain-HTTP page use the camera.
pub fn secure_origin_flag() -> String {
    format!("--unsafely-treat-insecure-origin-as-secure=http://{SFU}:{HTTP_PORT}")
}
