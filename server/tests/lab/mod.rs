//! A network lab for tests: network namespaces joined by veth pairs with private
//! addresses, nftables rules in them (a router doing 1:1 NAT, a client that drops
//! UDP), `tc tbf` rate limits on links, and programs run inside them (`ip netns
//! exec`, or a thread that entered the namespace: [`netns::run_in`]).
//!
//! Every namespace is named `shoal-lab-{pid}-{tag}-{name}`, so labs of parallel tests
//! and processes never meet, and only addresses inside them are used. A [`Lab`]
//! deletes what it made when dropped, a failing test included (the panic unwinds
//! through it); namespaces left by a process that was killed outright are deleted by
//! the next lab that starts.
//!
//! Needs root, `ip` (iproute2) and `nft` (nftables); `scripts/test-all` installs
//! them. Where they are missing the lab says why and the test is skipped, unless
//! `SHOAL_LAB_REQUIRED=1` (set by `scripts/test-all`), which makes that a failure.

#![allow(dead_code)]

pub mod netns;

use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Output, Stdio};

/// The prefix of every lab namespace.
const PREFIX: &str = "shoal-lab-";

/// A namespace on a [`Lab::star`] router.
#[derive(Clone, Copy)]
pub struct Spoke<'a> {
    /// The namespace.
    pub ns: &'a str,
    /// Its link's name on the router.
    pub side: &'a str,
    /// Its address (with prefix length) on `eth0`.
    pub inside: &'a str,
    /// The router's address (with prefix length) on `side`.
    pub outside: &'a str,
    /// The router's address, the spoke's default route.
    pub gateway: &'a str,
}

/// One test's namespaces, deleted when dropped.
pub struct Lab {
    tag: String,
    namespaces: Vec<String>,
    /// Programs started inside the lab, killed before the namespaces go.
    children: Vec<Child>,
}

/// Why the lab cannot run here.
fn missing() -> Option<String> {
    if !nix::unistd::geteuid().is_root() {
        return Some("not root".into());
    }
    for tool in ["ip", "nft", "tc"] {
        let found = Command::new(tool)
            .arg("-V")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok();
        if !found {
            return Some(format!("`{tool}` is not installed"));
        }
    }
    None
}

impl Lab {
    /// A lab for the test `tag` (a few letters), or `None` with a message when this
    /// machine cannot run one (a failure instead under `SHOAL_LAB_REQUIRED=1`).
    pub fn new(tag: &str) -> Option<Lab> {
        if let Some(why) = missing() {
            let required = std::env::var("SHOAL_LAB_REQUIRED").is_ok_and(|v| v == "1");
            assert!(!required, "the network lab cannot run: {why}");
            eprintln!("skipped: the network lab cannot run here: {why}");
            return None;
        }
        remove_stale_namespaces();
        Some(Lab {
            tag: tag.to_owned(),
            namespaces: Vec::new(),
            children: Vec::new(),
        })
    }

    /// Makes namespace `name` (loopback up) and returns its full name.
    pub fn namespace(&mut self, name: &str) -> String {
        let full = format!("{PREFIX}{}-{}-{name}", std::process::id(), self.tag);
        run(Command::new("ip").args(["netns", "add", &full]));
        self.namespaces.push(full.clone());
        self.ip(&full, &["link", "set", "lo", "up"]);
        full
    }

    /// Joins namespaces `a` and `b` with a veth pair, `a_if` in `a` and `b_if` in `b`,
    /// gives each end its addresses (CIDR, IPv4 or IPv6; IPv6 without duplicate
    /// address detection, so they are usable at once) and brings both up.
    pub fn link(
        &self,
        a: &str,
        a_if: &str,
        a_addrs: &[&str],
        b: &str,
        b_if: &str,
        b_addrs: &[&str],
    ) {
        run(Command::new("ip").args([
            "link", "add", "name", a_if, "netns", a, "type", "veth", "peer", "name", b_if, "netns",
            b,
        ]));
        for (ns, dev, addrs) in [(a, a_if, a_addrs), (b, b_if, b_addrs)] {
            for addr in addrs {
                let mut args = vec!["addr", "add", addr, "dev", dev];
                if addr.contains(':') {
                    args.push("nodad");
                }
                self.ip(ns, &args);
            }
            self.ip(ns, &["link", "set", dev, "up"]);
        }
    }

    /// A TCP connection to `addr` from inside namespace `ns`.
    pub fn connect(&self, ns: &str, addr: SocketAddr) -> TcpStream {
        netns::run_in(ns, move || {
            TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect to {addr}: {e}"))
        })
    }

    /// Runs `ip ARGS` in namespace `ns`.
    pub fn ip(&self, ns: &str, args: &[&str]) {
        run(Command::new("ip").args(["-n", ns]).args(args));
    }

    /// Runs a command in namespace `ns` and returns its output; fails the test if it
    /// fails.
    pub fn exec(&self, ns: &str, args: &[&str]) -> Output {
        run(Command::new("ip").args(["netns", "exec", ns]).args(args))
    }

    /// Loads an nftables ruleset into namespace `ns`.
    pub fn nft(&self, ns: &str, ruleset: &str) {
        let mut child = Command::new("ip")
            .args(["netns", "exec", ns, "nft", "-f", "-"])
            .stdin(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start nft");
        {
            use std::io::Write;
            let mut stdin = child.stdin.take().expect("nft's stdin");
            stdin
                .write_all(ruleset.as_bytes())
                .expect("write the ruleset");
        }
        let out = child.wait_with_output().expect("nft ran");
        assert!(
            out.status.success(),
            "nft in {ns}: {}\n{ruleset}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// A router namespace's 1:1 NAT: what arrives for `public` goes to `private`, and
    /// what `private` sends leaves as `public` (IPv4), with forwarding on.
    pub fn one_to_one_nat(&self, router: &str, public: &str, private: &str) {
        self.exec(router, &["sysctl", "-qw", "net.ipv4.ip_forward=1"]);
        self.nft(
            router,
            &format!(
                "table ip shoal_nat {{\n\
                 \tchain pre {{ type nat hook prerouting priority dstnat; ip daddr {public} dnat to {private}; }}\n\
                 \tchain post {{ type nat hook postrouting priority srcnat; ip saddr {private} snat to {public}; }}\n\
                 }}\n"
            ),
        );
    }

    /// Makes namespace `ns` drop every UDP datagram, in and out, both families (a
    /// network that allows only TCP).
    pub fn drop_udp(&self, ns: &str) {
        self.nft(
            ns,
            "table inet shoal_no_udp {\n\
             \tchain input { type filter hook input priority filter; meta l4proto udp drop; }\n\
             \tchain output { type filter hook output priority filter; meta l4proto udp drop; }\n\
             }\n",
        );
    }

    /// Limits what leaves `dev` in namespace `ns` to `rate` (tc's units, e.g.
    /// `2mbit`) with a token bucket (`tc tbf`; this kernel has no netem: delay and
    /// loss come from the simulator).
    pub fn rate_limit(&self, ns: &str, dev: &str, rate: &str) {
        self.shape(ns, dev, rate, "32kbit");
    }

    /// [`Lab::rate_limit`] with a bucket of `burst` (tc's units): what may leave at
    /// the line's own rate after an idle moment. A bucket larger than a congestion
    /// controller's probe lets the probe through unshaped, and the controller reads
    /// the line's rate for the link's.
    pub fn shape(&self, ns: &str, dev: &str, rate: &str, burst: &str) {
        self.ip(ns, &["link", "show", dev]);
        run(Command::new("ip").args([
            "netns", "exec", ns, "tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate", rate,
            "burst", burst, "latency", "50ms",
        ]));
    }

    /// Joins each spoke namespace to `router` by a veth pair (`side` on the router
    /// with `outside`, `eth0` in the spoke with `inside`), routes each spoke's
    /// default through `gateway`, and turns forwarding on in the router.
    pub fn star(&mut self, router: &str, spokes: &[Spoke<'_>]) {
        for s in spokes {
            self.link(router, s.side, &[s.outside], s.ns, "eth0", &[s.inside]);
            self.ip(s.ns, &["route", "add", "default", "via", s.gateway]);
        }
        self.forward(router);
    }

    /// Turns forwarding on in `ns` for both families.
    pub fn forward(&self, ns: &str) {
        self.exec(ns, &["sysctl", "-qw", "net.ipv4.ip_forward=1"]);
        self.exec(ns, &["sysctl", "-qw", "net.ipv6.conf.all.forwarding=1"]);
    }

    /// Starts `program` with `args` in namespace `ns`, its stdout piped to the test;
    /// it is killed when the lab is dropped, before the namespaces go.
    pub fn spawn(&mut self, ns: &str, program: &str, args: &[&str]) -> &mut Child {
        let child = Command::new("ip")
            .args(["netns", "exec", ns, program])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("start {program} in {ns}: {e}"));
        self.children.push(child);
        self.children.last_mut().expect("just pushed")
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        for ns in self.namespaces.iter().rev() {
            delete_namespace(ns);
        }
    }
}

/// Runs `command`, failing the test with its output if it fails.
fn run(command: &mut Command) -> Output {
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("{command:?}: {e}"));
    assert!(
        out.status.success(),
        "{command:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Deletes namespace `ns` and everything in it (its veth ends, and so their peers),
/// killing what still runs there first.
fn delete_namespace(ns: &str) {
    if let Ok(out) = Command::new("ip").args(["netns", "pids", ns]).output() {
        for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
            let _ = Command::new("kill").args(["-9", pid]).status();
        }
    }
    let _ = Command::new("ip").args(["netns", "del", ns]).status();
}

/// Deletes the namespaces of labs whose process is gone (killed before it could
/// clean up).
fn remove_stale_namespaces() {
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else {
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Some(name) = line.split_whitespace().next() else {
            continue;
        };
        let Some(rest) = name.strip_prefix(PREFIX) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            delete_namespace(name);
        }
    }
}
