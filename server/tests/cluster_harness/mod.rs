//! A cluster for tests: one real `etcd` (Debian's etcd-server) on loopback ports in a
//! data directory of its own, and `shoal` processes that join it. Dropping the
//! harness kills what it started and deletes the directory.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use shoal_proto::v1::node_service_client::NodeServiceClient;
use shoal_proto::v1::room_service_client::RoomServiceClient;
use shoal_proto::v1::{GetNodeInfoRequest, NodeInfo};
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};

use crate::node_process::Node;

/// How long etcd and a cluster have to come up.
pub const START_TIMEOUT: Duration = Duration::from_secs(30);

/// A port of 127.0.0.1 free a moment ago, given to no other etcd of this process.
///
/// etcd binds it only later (etcd 3.4 cannot bind port 0 and say which port it got),
/// so it comes from below the kernel's ephemeral range: there neither `bind(0)` (the
/// shoal nodes' listeners) nor an outgoing connection's source port can take it in
/// between, and a counter keeps the cluster tests running side by side apart. The
/// process id spreads the start, for two test processes at once.
fn free_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    // Linux's default range starts at 32768; a lower start leaves a smaller span.
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32768);
    const LOWEST: u32 = 10_000;
    let span = ephemeral_low.saturating_sub(LOWEST).max(1_000);
    let start = std::process::id() % span;
    for _ in 0..span {
        let port = LOWEST + (start + NEXT.fetch_add(1, Ordering::Relaxed)) % span;
        let port = u16::try_from(port).expect("a port below 65536");
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in {LOWEST}..{}", LOWEST + span);
}

/// The password of etcd's root user once [`Etcd::add_users`] made it.
const ROOT_PASSWORD: &str = "root-secret";

/// A single-member etcd.
pub struct Etcd {
    child: Option<Child>,
    dir: PathBuf,
    /// The network namespace it runs in (of the test's lab); `None`: the host's.
    ns: Option<String>,
    host: String,
    client_port: u16,
    peer_port: u16,
    tls: Option<EtcdTls>,
    /// The root user's password once [`Etcd::enable_auth`] turned authentication
    /// on: the harness's own client is root.
    root_password: Option<String>,
    /// Further flags of etcd's.
    flags: Vec<String>,
}

/// TLS on etcd's client port, with client certificate authentication (etcd's
/// `--client-cert-auth`): only clients whose certificate `ca` issued get in.
#[derive(Clone, Debug)]
pub struct EtcdTls {
    /// etcd's certificate (`--cert-file`).
    pub cert: PathBuf,
    /// Its key (`--key-file`).
    pub key: PathBuf,
    /// The CA of etcd's certificate and of its clients' (`--trusted-ca-file`).
    pub ca: PathBuf,
    /// A client certificate `ca` issued, which the harness reaches etcd with.
    pub client_cert: PathBuf,
    /// Its key.
    pub client_key: PathBuf,
}

impl Etcd {
    /// Starts etcd on loopback and waits until it reports healthy.
    pub fn start() -> Etcd {
        Etcd::start_on(None, "127.0.0.1", None)
    }

    /// Starts etcd on loopback serving `https://` with `tls`, and waits until it
    /// reports healthy.
    pub fn start_tls(tls: EtcdTls) -> Etcd {
        Etcd::start_on(None, "127.0.0.1", Some(tls))
    }

    /// Starts etcd inside network namespace `ns`, listening on `ip` there.
    pub fn start_in(ns: &str, ip: &str) -> Etcd {
        Etcd::start_on(Some(ns), ip, None)
    }

    /// Starts etcd on loopback handing out JWT tokens (`--auth-token jwt`, signed
    /// RS256 with a key openssl makes in etcd's directory) once authentication is
    /// on, instead of its in-memory simple tokens.
    pub fn start_jwt() -> Etcd {
        // Its keys are made before it starts: stopping and starting it again
        // would free its ports for a moment, for another test's etcd to take.
        let mut etcd = Etcd::unstarted(None, "127.0.0.1", None);
        let key = etcd.dir.join("jwt.key");
        let public = etcd.dir.join("jwt.pub");
        let openssl = |args: &[&std::ffi::OsStr]| {
            let status = Command::new("openssl")
                .args(args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .expect("openssl runs");
            assert!(status.success(), "openssl {args:?}");
        };
        openssl(&[
            "genrsa".as_ref(),
            "-out".as_ref(),
            key.as_os_str(),
            "2048".as_ref(),
        ]);
        openssl(&[
            "rsa".as_ref(),
            "-in".as_ref(),
            key.as_os_str(),
            "-pubout".as_ref(),
            "-out".as_ref(),
            public.as_os_str(),
        ]);
        etcd.flags = vec![
            "--auth-token".to_owned(),
            format!(
                "jwt,pub-key={},priv-key={},sign-method=RS256,ttl=10m",
                public.display(),
                key.display()
            ),
        ];
        etcd.resume();
        etcd
    }

    fn start_on(ns: Option<&str>, host: &str, tls: Option<EtcdTls>) -> Etcd {
        let mut etcd = Etcd::unstarted(ns, host, tls);
        etcd.resume();
        etcd
    }

    /// An etcd with its directory and ports, not started yet.
    fn unstarted(ns: Option<&str>, host: &str, tls: Option<EtcdTls>) -> Etcd {
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
        Etcd {
            child: None,
            dir,
            ns: ns.map(str::to_owned),
            host: host.to_owned(),
            client_port,
            peer_port,
            tls,
            root_password: None,
            flags: Vec::new(),
        }
    }

    /// The client URL nodes are given (`--etcd`).
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{}:{}", self.host, self.client_port)
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
        if let Some(tls) = &self.tls {
            command
                .arg("--cert-file")
                .arg(&tls.cert)
                .arg("--key-file")
                .arg(&tls.key)
                .arg("--client-cert-auth")
                .arg("--trusted-ca-file")
                .arg(&tls.ca);
        }
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
            .args(&self.flags)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("etcd starts (Debian package etcd-server)");
        self.child = Some(child);
        let deadline = Instant::now() + START_TIMEOUT;
        while !self.healthy() {
            if Instant::now() >= deadline {
                let log = std::fs::read_to_string(self.dir.join("etcd.log")).unwrap_or_default();
                let lines: Vec<&str> = log.lines().collect();
                panic!(
                    "etcd on {} is not healthy in time; its log ends:\n{}",
                    self.url(),
                    lines[lines.len().saturating_sub(20)..].join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Whether `GET /health` says so.
    fn healthy(&self) -> bool {
        let addr = SocketAddr::new(self.host.parse().expect("an IP"), self.client_port);
        match (&self.ns, &self.tls) {
            (Some(ns), _) => crate::lab::netns::run_in(ns, move || health(addr)),
            (None, Some(tls)) => health_tls(addr, tls),
            (None, None) => health(addr),
        }
    }

    /// A client of this etcd (over TLS with the harness's client certificate when
    /// etcd serves it; as root once authentication is on).
    pub async fn client(&self) -> etcd_client::Client {
        let mut options = etcd_client::ConnectOptions::new();
        if let Some(tls) = &self.tls {
            let read = |p: &PathBuf| std::fs::read(p).expect("a PEM file");
            options = options.with_tls(
                etcd_client::TlsOptions::new()
                    .ca_certificate(etcd_client::Certificate::from_pem(read(&tls.ca)))
                    .identity(etcd_client::Identity::from_pem(
                        read(&tls.client_cert),
                        read(&tls.client_key),
                    )),
            );
        }
        if let Some(password) = &self.root_password {
            options = options.with_user("root", password);
        }
        etcd_client::Client::connect([self.url()], Some(options))
            .await
            .expect("an etcd client")
    }

    /// Turns etcd's authentication on (`etcdctl auth enable`), with the users of
    /// [`Etcd::add_users`].
    pub async fn enable_auth(&mut self, prefix: &str, user: &str, password: &str) {
        self.add_users(prefix, user, password).await;
        self.turn_auth_on().await;
    }

    /// Turns etcd's authentication on, with the users [`Etcd::add_users`] added;
    /// the harness's client is root from now on.
    pub async fn turn_auth_on(&mut self) {
        let mut client = self.client().await;
        client.auth_enable().await.expect("authentication on");
        self.root_password = Some(ROOT_PASSWORD.to_owned());
    }

    /// Adds a root user (for [`Etcd::turn_auth_on`]) and `user`, whose role may
    /// read and write under `prefix/` and nowhere else; authentication stays as it
    /// was.
    pub async fn add_users(&mut self, prefix: &str, user: &str, password: &str) {
        let mut client = self.client().await;
        client
            .user_add("root", ROOT_PASSWORD, None)
            .await
            .expect("root added");
        client
            .user_grant_role("root", "root")
            .await
            .expect("root is root");
        let role = format!("{user}-role");
        client.role_add(role.as_str()).await.expect("a role");
        client
            .role_grant_permission(
                role.as_str(),
                etcd_client::Permission::read_write(format!("{prefix}/")).with_prefix(),
            )
            .await
            .expect("the prefix granted");
        client
            .user_add(user, password, None)
            .await
            .expect("the user added");
        client
            .user_grant_role(user, role.as_str())
            .await
            .expect("the role granted");
    }
}

/// The request that asks etcd whether it is healthy.
const HEALTH_REQUEST: &str = "GET /health HTTP/1.1\r\nHost: etcd\r\nConnection: close\r\n\r\n";

/// Whether etcd at `addr` answers `GET /health` with healthy.
fn health(addr: SocketAddr) -> bool {
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
    if stream.write_all(HEALTH_REQUEST.as_bytes()).is_err() {
        return false;
    }
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    response.contains("\"health\":\"true\"")
}

/// [`health`] over TLS: etcd's certificate verified against `tls.ca`, the client
/// certificate presented.
fn health_tls(addr: SocketAddr, tls: &EtcdTls) -> bool {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
    let mut roots = rustls::RootCertStore::empty();
    for ca in CertificateDer::pem_file_iter(&tls.ca).expect("the CA file") {
        roots
            .add(ca.expect("a CA certificate"))
            .expect("a trust anchor");
    }
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&tls.client_cert)
        .expect("the client certificate")
        .collect::<Result<_, _>>()
        .expect("PEM certificates");
    let key = PrivateKeyDer::from_pem_file(&tls.client_key).expect("the client key");
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("TLS versions")
    .with_root_certificates(roots)
    .with_client_auth_cert(chain, key)
    .expect("a client certificate");
    let connection = rustls::ClientConnection::new(Arc::new(config), ServerName::from(addr.ip()))
        .expect("a TLS client");
    let Ok(socket) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else {
        return false;
    };
    let _ = socket.set_read_timeout(Some(Duration::from_secs(1)));
    let mut stream = rustls::StreamOwned::new(connection, socket);
    if stream.write_all(HEALTH_REQUEST.as_bytes()).is_err() {
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
    /// How its gRPC's certificate is verified, when it serves TLS.
    pub tls: Option<ClientTlsConfig>,
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
            tls: None,
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
        let scheme = if args.contains(&"--tls-cert") {
            "https"
        } else {
            "http"
        };
        let grpc = process.banner_addr(&format!("shoal: grpc {scheme}://"));
        ClusterNode {
            process,
            api: NodeApi {
                id: id.to_owned(),
                grpc,
                token: None,
                tls: None,
            },
        }
    }
}

impl NodeApi {
    /// A channel to its gRPC.
    pub async fn channel(&self) -> Channel {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let mut endpoint =
            Endpoint::from_shared(format!("{scheme}://{}", self.grpc)).expect("a URI");
        if let Some(tls) = &self.tls {
            let host = self.grpc.ip().to_string();
            endpoint = endpoint
                .tls_config(tls.clone().domain_name(host))
                .expect("a TLS configuration");
        }
        endpoint
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
