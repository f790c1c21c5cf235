//! A publisher's upload follows shoal's transport-wide feedback
//! (draft-holmer-rmcat-transport-wide-cc-extensions-01): a Chromium in `client-a`
//! publishes its microphone and a 640 × 480 canvas of random blocks (content its
//! encoder would spend up to 1.7 Mbit/s on, kept at that resolution by
//! `contentHint = "detail"`) over WHIP through an upload link that a token bucket
//! holds to 1 Mbit/s (`tc tbf` on the client's side of its veth, a bucket of two
//! packets); a Chromium in `client-b` plays the room over WHEP. shoal answers the
//! publisher with the transport-cc extension and feedback and reports every packet
//! that arrives; the publisher's own estimator (GCC) runs on it. Measured over the
//! last [`WINDOW`] of [`SETTLE`]: the publisher's `availableOutgoingBitrate` (the
//! lower median of one sample a second: a probe may overshoot for a moment) settles
//! under [`ESTIMATE_BOUND_BPS`], the most GCC reaches over this link with feedback
//! that reports it, what it sends below the link (and
//! above a third of it: the link is used, not starved), and the player loses under
//! 2 % of what it should have received. Without shoal's feedback (neither
//! extension nor feedback in the answer) a publisher of the fake camera at
//! 1280 × 720 over this link had an estimate of 1.97 Mbit/s, about twice the link:
//! only loss tells it anything then.
//!
//! Needs root, iproute2, nftables, tc and `/usr/bin/chromium` (`scripts/test-all`
//! installs them); see `lab` for how it skips elsewhere.

mod chromium;
mod grpc_node;
mod lab;
mod lab_node;
mod whip_page;

use std::time::Duration;

use chromium::launch_in;
use lab_node::{Page, Star, page_url, secure_origin_flag, star, start_sfu};
use whip_page::{play_script, publish_noise_script};

const ROOM: &str = "uplink";
/// The publisher's upload.
const LINK_BPS: f64 = 1_000_000.0;
/// How long the publisher's estimator has to settle once the player plays.
const SETTLE: Duration = Duration::from_secs(25);
/// The window the rates and loss are measured over, at the end of [`SETTLE`].
const WINDOW: Duration = Duration::from_secs(8);
/// The highest settled estimate that still follows the link. The encoder of noise
/// drops frames (3–9 a second) and sends 0.53–0.71 Mbit/s, under the link, so the
/// link's queue seldom builds and GCC sees no overuse; it then raises its estimate
/// up to its throughput-based limit, 1.5 × the acknowledged throughput + 10 kbit/s
/// (libwebrtc `AimdRateControl::ChangeBitrate`, "we limit the new bitrate based on
/// the throughput to avoid unlimited bitrate increases"), and what is acknowledged
/// cannot exceed the link. Measured medians here: 0.72–1.16 Mbit/s, and 1.35 Mbit/s
/// once (1.5 × 0.895 + 0.01: the limit itself); without shoal's feedback, 1.97 ×
/// the link.
const ESTIMATE_BOUND_BPS: f64 = 1.5 * LINK_BPS + 10_000.0;

/// The publisher's view: its estimate of the path (the selected pair's
/// `availableOutgoingBitrate`, its congestion controller's output) and the RTP bytes
/// and packets it has sent.
const PUBLISHER: &str = r#"(async () => {
  const stats = await window.shoal.pc.getStats();
  const r = { available: null, bytesSent: 0, packetsSent: 0, at: performance.now() };
  stats.forEach((s) => {
    if (s.type === "outbound-rtp") { r.bytesSent += s.bytesSent + (s.headerBytesSent || 0); r.packetsSent += s.packetsSent; }
    if (s.type === "outbound-rtp" && s.kind === "video") { r.target = s.targetBitrate; r.limit = s.qualityLimitationReason; r.fps = s.framesPerSecond; r.width = s.frameWidth; r.encoded = s.framesEncoded; }
    if (s.type === "transport" && s.selectedCandidatePairId) {
      const pair = stats.get(s.selectedCandidatePairId);
      if (pair) r.available = pair.availableOutgoingBitrate ?? null;
    }
  });
  return r;
})()"#;

/// The player's view: RTP packets received and lost, and video frames decoded.
const PLAYER: &str = r#"(async () => {
  const stats = await window.shoal.pc.getStats();
  const r = { received: 0, lost: 0, framesDecoded: 0 };
  stats.forEach((s) => {
    if (s.type === "inbound-rtp") {
      r.received += s.packetsReceived || 0;
      r.lost += s.packetsLost || 0;
      if (s.kind === "video") r.framesDecoded += s.framesDecoded || 0;
    }
  });
  return r;
})()"#;

fn num(v: &serde_json::Value, key: &str) -> f64 {
    v[key].as_f64().unwrap_or(0.0)
}

#[test]
fn netns_publisher_upload_follows_feedback() {
    let Some(mut lab) = lab::Lab::new("upl") else {
        return;
    };
    let Star {
        sfu,
        client_a,
        client_b,
        ..
    } = star(&mut lab, &[]);
    // A bucket of two full-size packets: a probe cluster (libwebrtc sends 15 ms
    // of them at twice its estimate) meets the link's rate, not the veth's.
    lab.shape(&client_a, "eth0", "1mbit", "3000b");

    let (server, control) = start_sfu(&sfu, ROOM, &[]);
    let shard = || {
        server
            .command_sender(0)
            .and_then(|s| s.stats().ok())
            .expect("the shard reports")
            .shard
    };
    let page = page_url();
    let secure = secure_origin_flag();
    let camera = launch_in(Some(&client_a), &page, &[&secure]);
    let viewer = launch_in(Some(&client_b), &page, &[&secure]);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let mut a = Page::open(&lab, &client_a, &camera, &page).await;
        let mut b = Page::open(&lab, &client_b, &viewer, &page).await;
        let answer = a
            .eval(&publish_noise_script(ROOM, "camera", 640, 480))
            .await;
        let answer = answer.as_str().unwrap_or_default().to_owned();
        // The publisher was answered with both halves of transport-wide feedback.
        assert!(
            answer.contains("transport-wide-cc-extensions-01") && answer.contains(" transport-cc"),
            "{answer}"
        );
        b.eval(&play_script(ROOM, "viewer")).await;

        tokio::time::sleep(SETTLE - WINDOW).await;
        let (p0, v0, fb0) = (a.eval(PUBLISHER).await, b.eval(PLAYER).await, shard());
        // The estimate once a second over the window: its lower median is what it
        // settled at (a sample may catch a probe's overshoot).
        let mut estimates = Vec::new();
        for _ in 0..WINDOW.as_secs() {
            tokio::time::sleep(Duration::from_secs(1)).await;
            estimates.push(num(&a.eval(PUBLISHER).await, "available"));
        }
        let (p1, v1, fb1) = (a.eval(PUBLISHER).await, b.eval(PLAYER).await, shard());
        estimates.sort_by(f64::total_cmp);

        let seconds = (num(&p1, "at") - num(&p0, "at")) / 1000.0;
        let sent_bps = (num(&p1, "bytesSent") - num(&p0, "bytesSent")) * 8.0 / seconds;
        let available = estimates[(estimates.len() - 1) / 2];
        let received = num(&v1, "received") - num(&v0, "received");
        let lost = num(&v1, "lost") - num(&v0, "lost");
        let loss = lost / (received + lost).max(1.0);
        let feedback = fb1.transport_feedback_sent - fb0.transport_feedback_sent;
        let report = format!(
            "sent {sent_bps:.0} bit/s, available {available:.0} bit/s (median of {estimates:?}) \
             over {seconds:.1} s; \
             player received {received} lost {lost} ({:.2} %), decoded {}; \
             shoal sent {feedback} feedback messages\npublisher {p1}\nplayer {v1}",
            loss * 100.0,
            v1["framesDecoded"]
        );
        eprintln!("{report}");
        // shoal's feedback flows the whole time: 20 a second (one per 50 ms).
        assert!(feedback as f64 >= 10.0 * WINDOW.as_secs_f64(), "{report}");
        assert!(
            available > 0.0 && available <= ESTIMATE_BOUND_BPS,
            "the estimate follows the link: {report}"
        );
        assert!(
            sent_bps < LINK_BPS && sent_bps > LINK_BPS / 3.0,
            "the upload follows the estimate: {report}"
        );
        assert!(loss < 0.02, "{report}");
        assert!(
            num(&v1, "framesDecoded") > num(&v0, "framesDecoded"),
            "{report}"
        );
    });
    drop(camera);
    drop(viewer);
    drop(control);
    drop(server);
}
