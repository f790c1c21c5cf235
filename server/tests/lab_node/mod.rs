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
use crate::lab::{Lab, netns};
use crate::whip_page::STATS;

/// Starts a node in namespace `ns` from `args` (flags as on the command line) and
/// creates `room` on it.
pub fn start_in(ns: &str, args: &[&str], room: &str) -> (Server, ControlPlane) {
    let args: Vec<String> = std::iter::once("shoal")
        .chain(args.iter().copied())
        .map(str::to_owned)
        .collect();
    let (server, control) = netns::run_in(ns, move || {
        let config = Config::load_from(args).expect("the flags parse");
        let mut server = Server::start(&config).expect("shards start");
        let settings = ControlSettings::from_config(&config).expect("gRPC is on");
        let control =
            ControlPlane::start(settings, server.control_handles()).expect("control starts");
        (server, control)
    });
    create_room_in(ns, control.grpc_addr().expect("gRPC is on"), room);
    (server, control)
}

/// Creates `room` over the gRPC at `grpc`, reached from inside namespace `ns`.
pub fn create_room_in(ns: &str, grpc: SocketAddr, room: &str) {
    let room = room.to_owned();
    netns::run_in(ns, move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        runtime.block_on(async {
            let mut rooms = shoal_proto::v1::room_service_client::RoomServiceClient::new(
                grpc_node::connect(grpc).await,
            );
            rooms
                .create_room(shoal_proto::v1::CreateRoomRequest {
                    name: room,
                    ..Default::default()
                })
                .await
                .expect("room created");
        });
    });
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
