//! A cluster for tests: one real `etcd` (Debian's etcd-server) on loopback ports in a
//! data directory of its own, and `shoal` processes that join it. Dropping the
//! harness kills what it started and deletes the directory.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use shoal_proto::v1::node_service_client::NodeServiceClient;
use shoal_proto::v1::room_service_client::RoomServiceClient;
use shoal_proto::v1::{GetNodeInfoRequest, NodeInfo};
use tonic::transport::{Channel, Endpoint};

use crate::node_process::Node;

/// How long etcd and a cluster have to come up.
pub const START_TIMEOUT: Duration = Duration::from_secs(30);

/// A port free on 127.0.0.1 a moment ago.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// A single-member etcd.
pub struct Etcd {
    child: Option<Child>,
    dir: PathBuf,
    /// The network namespace it runs in (of the test's lab); `None`: the host's.
    ns: Option<String>,
    host: String,
    client_port: u16,
    peer_port: u16,
}

impl Etcd {
    /// Starts etcd on loopback and waits until it reports healthy.
    pub fn start() -> Etcd {
        Etcd::start_on(None, "127.0.0.1")
    }

    /// Starts etcd inside network namespace `ns`, listening on `ip` there.
    pub fn start_in(ns: &str, ip: &str) -> Etcd {
        Etcd::start_on(Some(ns), ip)
    }

    fn start_on(ns: Option<&str>, host: &str) -> Etcd {
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "shoal-etcd-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("etcd's directory");
        // A namespace of the lab is the test's own: etcd's usual ports are free.
        let (client_port, peer_port) = match ns {
            Some(_) => (2379, 2380),
            None => (free_port(), free_port()),
        };
        let mut etcd = Etcd {
            child: None,
            dir,
            ns: ns.map(str::to_owned),
            host: host.to_owned(),
            client_port,
            peer_port,
        };
        etcd.resume();
        etcd
    }

    /// The client URL nodes are given (`--etcd`).
    pub fn url(&self) -> String {
        format!("http://{}:{}", self.host, self.client_port)
    }

    /// Stops etcd (SIGKILL): every request to it fails from now on.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts etcd again on the same ports and data, and waits until it is healthy.
    pub fn resume(&mut self) {
        assert!(self.child.is_none(), "etcd runs already");
        let peer = format!("http://{}:{}", self.host, self.peer_port);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("etcd.log"))
            .expect("etcd's log");
        let mut command = match &self.ns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, "etcd"]);
                c
            }
            None => Command::new("etcd"),
        };
        let child = command
            .env_clear()
            .args(["--name", "test"])
            .arg("--data-dir")
            .arg(self.dir.join("data"))
            .args(["--listen-client-urls", &self.url()])
            .args(["--advertise-client-urls", &self.url()])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("test={peer}")])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("etcd starts (Debian package etcd-server)");
        self.child = Some(child);
        let deadline = Instant::now() + START_TIMEOUT;
        while !self.healthy() {
            assert!(Instant::now() < deadline, "etcd is not healthy in time");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Whether `GET /health` says so.
    fn healthy(&self) -> bool {
        let addr = SocketAddr::new(self.host.parse().expect("an IP"), self.client_port);
        match &self.ns {
            Some(ns) => crate::lab::netns::run_in(ns, move || health(addr)),
            None => health(addr),
        }
    }

    /// A client of this etcd.
    pub async fn client(&self) -> etcd_client::Client {
        etcd_client::Client::connect([self.url()], None)
            .await
            .expect("an etcd client")
    }
}

/// Whether etcd at `addr` answers `GET /health` with healthy.
fn health(addr: SocketAddr) -> bool {
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
    let request = "GET /health HTTP/1.1\r\nHost: etcd\r\nConnection: close\r\n\r\n";
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    response.contains("\"health\":\"true\"")
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A node's gRPC API, as a client reaches it.
pub struct NodeApi {
    /// Its `--node-id`.
    pub id: String,
    /// Its gRPC listener.
    pub grpc: SocketAddr,
    /// The token its NodeInfo is asked with, for a node with API keys.
    pub token: Option<String>,
}

/// A node of a cluster: the process, and its API.
pub struct ClusterNode {
    /// The process.
    pub process: Node,
    /// Its API.
    pub api: NodeApi,
}

impl std::ops::Deref for ClusterNode {
    type Target = NodeApi;
    fn deref(&self) -> &NodeApi {
        &self.api
    }
}

impl std::ops::DerefMut for ClusterNode {
    fn deref_mut(&mut self) -> &mut NodeApi {
        &mut self.api
    }
}

impl AsRef<NodeApi> for ClusterNode {
    fn as_ref(&self) -> &NodeApi {
        &self.api
    }
}

impl AsRef<NodeApi> for NodeApi {
    fn as_ref(&self) -> &NodeApi {
        self
    }
}

impl NodeApi {
    /// The API of the node at `grpc`, whose id is not known here.
    pub fn at(grpc: SocketAddr) -> NodeApi {
        NodeApi {
            id: grpc.to_string(),
            grpc,
            token: None,
        }
    }
}

impl ClusterNode {
    /// Starts `shoal` as node `id` of the cluster on `etcd` under `prefix`, with a
    /// lease of `ttl_secs`, and `extra` flags.
    pub fn start(etcd: &str, prefix: &str, id: &str, ttl_secs: u32, extra: &[&str]) -> ClusterNode {
        ClusterNode::start_on(None, etcd, prefix, id, ttl_secs, extra)
    }

    /// [`ClusterNode::start`] inside network namespace `ns` of the lab, on `ip`.
    pub fn start_in(
        (ns, ip): (&str, &str),
        etcd: &str,
        prefix: &str,
        id: &str,
        ttl_secs: u32,
    ) -> ClusterNode {
        // Listening off loopback without API keys needs saying so; the lab is the
        // test's own.
        ClusterNode::start_on(
            Some((ns, ip)),
            etcd,
            prefix,
            id,
            ttl_secs,
            &["--insecure-open"],
        )
    }

    fn start_on(
        at: Option<(&str, &str)>,
        etcd: &str,
        prefix: &str,
        id: &str,
        ttl_secs: u32,
        extra: &[&str],
    ) -> ClusterNode {
        let ttl = ttl_secs.to_string();
        let mut args = vec![
            "--etcd",
            etcd,
            "--cluster-prefix",
            prefix,
            "--node-id",
            id,
            "--cluster-lease-ttl",
            &ttl,
            "--log-format",
            "json",
        ];
        args.extend_from_slice(extra);
        let process = match at {
            Some((ns, ip)) => Node::start_in(ns, ip, &args),
            None => Node::start(&args),
        };
        let grpc = process.banner_addr("shoal: grpc http://");
        ClusterNode {
            process,
            api: NodeApi {
                id: id.to_owned(),
                grpc,
                token: None,
            },
        }
    }
}

impl NodeApi {
    /// A channel to its gRPC.
    pub async fn channel(&self) -> Channel {
        Endpoint::from_shared(format!("http://{}", self.grpc))
            .expect("a URI")
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(15))
            .connect_lazy()
    }

    /// Its RoomService.
    pub async fn rooms(&self) -> RoomServiceClient<Channel> {
        RoomServiceClient::new(self.channel().await)
    }

    /// Its NodeInfo.
    pub async fn info(&self) -> NodeInfo {
        let mut request = tonic::Request::new(GetNodeInfoRequest {});
        if let Some(token) = &self.token {
            let value = format!("Bearer {token}").parse().expect("a metadata value");
            request.metadata_mut().insert("authorization", value);
        }
        NodeServiceClient::new(self.channel().await)
            .get_node_info(request)
            .await
            .expect("NodeInfo")
            .into_inner()
    }
}

/// Waits until every node of `nodes` sees all of them live.
pub async fn wait_formed<N: AsRef<NodeApi>>(nodes: &[N]) {
    let deadline = Instant::now() + START_TIMEOUT;
    for node in nodes.iter().map(AsRef::as_ref) {
        loop {
            let info = node.info().await;
            let seen = info.cluster.map_or(0, |c| c.nodes.len());
            if seen == nodes.len() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "node {} sees {seen} of {} nodes",
                node.id,
                nodes.len()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
