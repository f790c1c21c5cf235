//! Interop: a real headless Chromium joins a room over WHIP and its data channel
//! opens, so ICE (shoal is ICE-lite), DTLS (shoal is the DTLS 1.2 server), SCTP and
//! DCEP all work against a stack we did not write, end to end over 127.0.0.1.
//!
//! The page is shoal's own `/` (so `fetch` to `/whip/…` is same-origin); the test
//! drives it over the DevTools protocol (`chromium` module) and runs JavaScript
//! there. When the page closes its RTCPeerConnection, Chromium sends a
//! DTLS close_notify, the shard removes the peer and reports it, and the participant
//! leaves the room directory: checked over gRPC. Before that, the open and idle
//! association heartbeats (RFC 9260 §8.3, every second here) and Chromium's SCTP
//! (dcsctp) answers each.
//!
//! Needs `/usr/bin/chromium` (`scripts/test-all` installs it).

mod chromium;
mod grpc_node;

use std::time::{Duration, Instant};

use chromium::{attach, devtools, launch};

/// How long the page may take to open its data channel.
const OPEN_TIMEOUT_MS: u64 = 20_000;

/// The page's side: an RTCPeerConnection with no ICE servers and a data channel,
/// its offer POSTed to WHIP, the answer applied; resolves when the channel opens.
fn whip_script(room: &str) -> String {
    format!(
        r#"(async () => {{
  const pc = new RTCPeerConnection({{ iceServers: [] }});
  const dc = pc.createDataChannel("chat");
  const opened = new Promise((resolve, reject) => {{
    dc.onopen = () => resolve("open");
    setTimeout(() => reject(new Error("no open after {OPEN_TIMEOUT_MS} ms: connection "
      + pc.connectionState + ", ice " + pc.iceConnectionState + ", channel " + dc.readyState)),
      {OPEN_TIMEOUT_MS});
  }});
  await pc.setLocalDescription(await pc.createOffer());
  const response = await fetch("/whip/{room}?identity=chromium", {{
    method: "POST", headers: {{ "Content-Type": "application/sdp" }}, body: pc.localDescription.sdp,
  }});
  const body = await response.text();
  if (response.status !== 201) throw new Error("POST " + response.status + ": " + body);
  await pc.setRemoteDescription({{ type: "answer", sdp: body }});
  const state = await opened;
  window.shoalTest = {{ pc, dc }};
  return state + " " + response.headers.get("Location");
}})()"#
    )
}

#[test]
fn interop_chromium_whip_datachannel_opens() {
    let grpc_node::RoomNode {
        server,
        http,
        runtime,
        mut rooms,
        control: _control,
    } = grpc_node::node_with_room_in(
        "interop",
        shoal_server::config::Config {
            shards: std::num::NonZeroUsize::new(1).expect("non-zero"),
            sctp_heartbeat_interval: 1,
            ..shoal_server::config::Config::default()
        },
    );
    let page = format!("http://{http}/");
    let browser = launch(&page);
    runtime.block_on(async {
        let mut cdp = devtools(&browser).await;
        let session = attach(&mut cdp, &page).await;
        let opened = cdp.evaluate(&session, &whip_script("interop")).await;
        let opened = opened.as_str().unwrap_or_default().to_owned();
        let report = server.command_sender(0).and_then(|s| s.stats().ok());
        assert!(
            opened.starts_with("open /whip/interop/"),
            "the data channel did not open: {opened:?}; shard counters: {:?}",
            report.as_ref().map(|r| &r.shard)
        );
        // Whichever checksum the two ends settled on (Chromium 156 does not announce
        // RFC 9653 zero checksums, so CRC32c), no packet of Chromium's was refused.
        let report = report.expect("the shard reports");
        assert_eq!(report.shard.sctp_packets_dropped, 0, "{:?}", report.shard);
        assert_eq!(grpc_node::participants(&mut rooms, "interop").await, 1);

        // Idle, the association heartbeats and Chromium answers: three answered,
        // at most the one in flight not yet.
        let deadline = Instant::now() + Duration::from_secs(20);
        let shard = loop {
            let s = server.command_sender(0).and_then(|s| s.stats().ok());
            let s = s.expect("the shard reports").shard;
            if s.sctp_heartbeats_acked >= 3 {
                break s;
            }
            assert!(Instant::now() < deadline, "heartbeats unanswered: {s:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert!(
            shard.sctp_heartbeats_sent <= shard.sctp_heartbeats_acked + 1,
            "{shard:?}"
        );
        assert_eq!(shard.sctp_restarts, 0, "{shard:?}");

        // Closing the connection sends close_notify: the participant leaves.
        cdp.evaluate(&session, "window.shoalTest.pc.close(); 'closed'")
            .await;
        let deadline = Instant::now() + Duration::from_secs(10);
        while grpc_node::participants(&mut rooms, "interop").await != 0 {
            assert!(
                Instant::now() < deadline,
                "the participant should leave once Chromium closes DTLS"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    drop(browser);
}
