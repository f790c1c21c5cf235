//! The network lab's own checks, no browser involved: a veth pair carries UDP and
//! TCP between two namespaces; `drop_udp` stops UDP both ways while TCP still
//! connects; `rate_limit` puts a token bucket on a link; and dropping the lab deletes
//! its namespaces.
//!
//! Needs root, iproute2 and nftables (`scripts/test-all` installs them); see `lab`
//! for how it skips elsewhere.

mod lab;

use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::process::Command;
use std::time::Duration;

use lab::netns::run_in;

/// Whether a datagram from namespace `from` reaches a socket in `to` at `addr`.
fn udp_gets_through(from: &str, to: &str, addr: SocketAddr) -> bool {
    let receiver = run_in(to, move || UdpSocket::bind(addr).expect("bind in the lab"));
    receiver
        .set_read_timeout(Some(Duration::from_millis(300)))
        .expect("a timeout");
    run_in(from, move || {
        let sender = UdpSocket::bind("0.0.0.0:0").expect("bind");
        // Refused by a local drop rule (EPERM), or sent.
        let _ = sender.send_to(b"probe", addr);
    });
    let mut buf = [0u8; 16];
    receiver.recv_from(&mut buf).is_ok()
}

#[test]
fn netns_lab_filters_udp_and_limits_rate() {
    let names;
    {
        let Some(mut lab) = lab::Lab::new("lab") else {
            return;
        };
        let a = lab.namespace("a");
        let b = lab.namespace("b");
        names = [a.clone(), b.clone()];
        lab.link(&a, "eth0", &["10.9.0.1/24"], &b, "eth0", &["10.9.0.2/24"]);
        let target: SocketAddr = "10.9.0.2:4000".parse().expect("an address");
        assert!(udp_gets_through(&a, &b, target), "UDP over the veth pair");

        lab.drop_udp(&b);
        let target: SocketAddr = "10.9.0.2:4001".parse().expect("an address");
        assert!(!udp_gets_through(&a, &b, target), "UDP into b is dropped");
        let back: SocketAddr = "10.9.0.1:4002".parse().expect("an address");
        assert!(!udp_gets_through(&b, &a, back), "UDP out of b is dropped");
        let listener = run_in(&b, || TcpListener::bind("10.9.0.2:4003").expect("listen"));
        let stream = lab.connect(&a, "10.9.0.2:4003".parse().expect("an address"));
        drop((stream, listener));

        lab.rate_limit(&a, "eth0", "2mbit");
        let qdisc = lab.exec(&a, &["tc", "qdisc", "show", "dev", "eth0"]);
        let qdisc = String::from_utf8_lossy(&qdisc.stdout).into_owned();
        assert!(
            qdisc.contains("tbf") && qdisc.contains("rate 2Mbit"),
            "{qdisc}"
        );
    }
    let list = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("ip netns list");
    let list = String::from_utf8_lossy(&list.stdout);
    for name in &names {
        assert!(!list.contains(name.as_str()), "{name} is left: {list}");
    }
}
