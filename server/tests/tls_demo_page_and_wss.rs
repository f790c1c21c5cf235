//! Acceptance: HTTPS, WSS and gRPC over TLS from a machine that is not the node's.
//! shoal runs in namespace `sfu` (203.0.113.2) with a certificate generated here
//! (`--tls-cert`, `--tls-key`) and an API key; two headless Chromiums in client
//! namespaces trust that certificate by its key (`--ignore-certificate-errors-spki-list`,
//! no flag that makes an insecure origin secure), load the demo page over HTTPS
//! with `?token=`, join over WSS with their cameras, and each plays the other's
//! video. gRPC on the same node answers server reflection over TLS (ALPN h2), and
//! a SIGHUP-style reload swaps in a new certificate for new connections.
//!
//! Needs root, iproute2, nftables and `/usr/bin/chromium` (`scripts/test-all`
//! installs them); see `lab` for how it skips elsewhere.

mod chromium;
mod grpc_node;
mod lab;
mod lab_node;
mod tls_cert;
mod tokens;
mod whip_page;

use std::net::IpAddr;
use std::time::{Duration, Instant};

use chromium::launch_in;
use lab_node::{HTTP_PORT, Page, SFU, Star, star, start_node_in};
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint};
use tonic_reflection::pb::v1;

const ROOM: &str = "secure";
const TIMEOUT: Duration = Duration::from_secs(30);
const GRPC: &str = "127.0.0.1:7071";

/// How many videos the demo page plays (with a decoded frame), with their captions.
const PLAYING: &str = r##"(() => {
  const playing = [...document.querySelectorAll("#videos figure")].filter((f) => {
    const v = f.querySelector("video");
    return v.readyState >= 2 && v.videoWidth > 0;
  });
  const p = playing.map((f) => f.querySelector("figcaption").textContent).sort().join(",");
  return playing.length === 2 ? p : null;
})()"##;

/// The services the gRPC server lists over TLS, trusting only `ca` (the call
/// succeeding is the check that the server presents that certificate).
async fn list_services(ca: &str) -> Vec<String> {
    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(ca))
        .domain_name("127.0.0.1");
    let channel = Endpoint::from_shared(format!("https://{GRPC}"))
        .expect("a URI")
        .tls_config(tls)
        .expect("TLS config")
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
        .expect("connect over TLS");
    let mut client = v1::server_reflection_client::ServerReflectionClient::new(channel);
    let request = v1::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(v1::server_reflection_request::MessageRequest::ListServices(
            String::new(),
        )),
    };
    let mut responses = client
        .server_reflection_info(tokio_stream::once(request))
        .await
        .expect("reflection over TLS")
        .into_inner();
    let response = responses
        .message()
        .await
        .expect("a response")
        .expect("a message");
    match response.message_response {
        Some(v1::server_reflection_response::MessageResponse::ListServicesResponse(list)) => {
            list.service.into_iter().map(|s| s.name).collect()
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn tls_demo_page_and_wss() {
    let Some(mut lab) = lab::Lab::new("tls") else {
        return;
    };
    let Star {
        sfu,
        client_a,
        client_b,
        ..
    } = star(&mut lab, &[]);
    let dir = std::env::temp_dir().join(format!("shoal-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a directory");
    // For the node's address in its namespace and for loopback there.
    let addresses: [IpAddr; 2] = [SFU.parse().expect("an address"), [127, 0, 0, 1].into()];
    let first = tls_cert::certificate(&dir, "first", &addresses);
    let (cert, key, cert_pem, pin) = (first.cert_path, first.key_path, first.pem, first.spki_pin);
    let api_key = format!("--api-key={}:{}", tokens::KEY, tokens::SECRET);
    let (_server, control) = start_node_in(
        &sfu,
        &[
            "--shards=1",
            &format!("--bind={SFU}"),
            "--udp-port-base=7100",
            &format!("--http-addr={SFU}:{HTTP_PORT}"),
            &format!("--grpc-addr={GRPC}"),
            &format!("--tls-cert={}", cert.display()),
            &format!("--tls-key={}", key.display()),
            &api_key,
        ],
    );
    assert!(control.is_tls());

    // gRPC over TLS, from inside the node's namespace: reflection answers.
    let services = lab::netns::run_in(&sfu, {
        let cert_pem = cert_pem.clone();
        move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            runtime.block_on(list_services(&cert_pem))
        }
    });
    assert!(
        services.iter().any(|s| s == "shoal.v1.RoomService"),
        "{services:?}"
    );

    // Two browsers elsewhere: HTTPS page, WSS signalling, each plays the other.
    let url = |who: &str| {
        let token = tokens::token(who, tokens::join(ROOM));
        format!("https://{SFU}:{HTTP_PORT}/?token={token}")
    };
    let (page_a, page_b) = (url("a"), url("b"));
    let trust = format!("--ignore-certificate-errors-spki-list={pin}");
    let browser_a = launch_in(Some(&client_a), &page_a, &[&trust]);
    let browser_b = launch_in(Some(&client_b), &page_b, &[&trust]);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let mut a = Page::open(&lab, &client_a, &browser_a, &page_a).await;
        let mut b = Page::open(&lab, &client_b, &browser_b, &page_b).await;
        // The page is a secure context: getUserMedia is there.
        assert_eq!(a.eval("window.isSecureContext").await, true);
        let submit = "document.getElementById('join').requestSubmit(); 'submitted'";
        assert_eq!(a.eval(submit).await, "submitted");
        assert_eq!(b.eval(submit).await, "submitted");
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let (pa, pb) = (a.eval(PLAYING).await, b.eval(PLAYING).await);
            if pa == "b,you" && pb == "a,you" {
                break;
            }
            let log = a.eval("document.getElementById('log').textContent").await;
            assert!(Instant::now() < deadline, "a: {pa} b: {pb} log: {log}");
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        // The signalling went over WSS: the page's socket URL.
        let scheme = a.eval("location.protocol").await;
        assert_eq!(scheme, "https:");
    });
    drop(browser_a);
    drop(browser_b);

    // A new certificate in the same files, reloaded: new connections get it (the old
    // one no longer verifies them), and a broken file keeps it.
    let second = tls_cert::certificate(&dir, "second", &addresses);
    let (new_cert, new_key, new_pem) = (second.cert_path, second.key_path, second.pem);
    std::fs::copy(&new_cert, &cert).expect("copy");
    std::fs::copy(&new_key, &key).expect("copy");
    control
        .reload_tls()
        .expect("TLS is on")
        .expect("the new pair loads");
    std::fs::write(&key, "not a key").expect("write");
    assert!(control.reload_tls().expect("TLS is on").is_err());
    let services = lab::netns::run_in(&sfu, move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        runtime.block_on(list_services(&new_pem))
    });
    assert!(!services.is_empty());
    drop(control);
    std::fs::remove_dir_all(&dir).expect("cleaned up");
}
