//! Simulcast (RFC 8853; rids, RFC 8851): shoal sends each subscriber the layer its
//! downlink carries, and a better one when the downlink grows. A Chromium in
//! `client-a` publishes its fake camera at 1280 × 720 over WHIP as three simulcast
//! streams of one track, `q` (320 wide, up to 150 kbit/s), `h` (640, 500 kbit/s) and
//! `f` (1280, 1.5 Mbit/s), in one codec only. Two Chromiums play the room over WHEP:
//! one in `client-b`, whose downlink a token bucket holds to 400 kbit/s (`tc tbf` on
//! the router's end of its link, `to-b`, a bucket of two packets), and one in
//! `client-c`, a third spoke of the router, unrestricted (a namespace of its own, so
//! neither player shares a link with the publisher). The offer sends `q;h;f` and
//! shoal's answer receives all three. After [`SETTLE`], over 6 s sampled every
//! 500 ms, both players decode without a stall, the restricted one on a stream its
//! link carries (in two samples of three at least: shoal tries a climb now and then,
//! and a sample may catch one or the decoder's last frame of it) and the other at
//! `f`'s in every sample, and shoal's own report (ListParticipants) names the same
//! streams; once the limit is lifted, the restricted player gets a wider stream
//! within [`RISE_TIMEOUT`]. It runs twice, each time in a lab of its own: with VP8,
//! then with H.264 (packetization mode 1, Constrained Baseline 3.1 `42e01f` first).
//!
//! The cheapest stream is `q` for libvpx, and the test holds the restricted VP8
//! player to it. Chromium 156's OpenH264 runs `q` far over its 150 kbit/s target at
//! times (about 600 kbit/s averaged over a run, against 240 kbit/s for `h` and
//! 480 kbit/s for `f`), so the restricted H.264 player is rightly sent `h` while `q`
//! does not fit the 400 kbit/s link, and `q` when it does: either passes.
//!
//! Given an answer that receives the three, Chromium 156 on two cores sends them at
//! 320, 640 and 1280 wide with libvpx and with OpenH264, at its fake camera's 20
//! frames a second, its quality limited by neither CPU nor bandwidth.
//!
//! Needs root, iproute2, nftables, tc and `/usr/bin/chromium` (`scripts/test-all`
//! installs them); see `lab` for how it skips elsewhere.

mod chromium;
mod grpc_node;
mod lab;
mod lab_node;
mod whip_page;

use std::time::{Duration, Instant};

use chromium::launch_in;
use lab::Spoke;
use lab_node::{Page, Star, page_url, participants_in, secure_origin_flag, star, start_sfu};
use serde_json::Value;
use whip_page::{play_script, publish_simulcast_script};

const ROOM: &str = "layers";
/// The simulcast streams the publisher offers, lowest first.
const RIDS: [&str; 3] = ["q", "h", "f"];
/// The restricted player's downlink (tc's units).
const LIMIT: &str = "400kbit";
/// The restricted player's link on the router.
const LIMITED_LINK: &str = "to-b";
/// The width of `q`, a quarter of the camera's.
const LOW_WIDTH: u64 = 320;
/// The width of `f`, the camera's.
const HIGH_WIDTH: u64 = 1280;
/// How long shoal and the players have to settle once both play.
const SETTLE: Duration = Duration::from_secs(20);
/// How often the players are sampled over the window after [`SETTLE`].
const SAMPLE_EVERY: Duration = Duration::from_millis(500);
/// Samples over the window: 6 s.
const SAMPLES: usize = 12;
/// How long the restricted player may take to get more than `q` once its limit is
/// lifted.
const RISE_TIMEOUT: Duration = Duration::from_secs(25);
/// A bound on one case, should a step's own timeout not fire.
const CASE_TIMEOUT: Duration = Duration::from_secs(240);

/// A player's view of its video: frames decoded, the width of the stream that
/// received last, RTP packets received and lost, and the codec.
const PLAYER: &str = r#"(async () => {
  const stats = await window.shoal.pc.getStats();
  const r = { framesDecoded: 0, width: 0, received: 0, lost: 0, codec: null };
  let last = -1;
  stats.forEach((s) => {
    if (s.type !== "inbound-rtp" || s.kind !== "video") return;
    r.framesDecoded += s.framesDecoded || 0;
    r.received += s.packetsReceived || 0;
    r.lost += s.packetsLost || 0;
    if ((s.lastPacketReceivedTimestamp || 0) > last) {
      last = s.lastPacketReceivedTimestamp || 0;
      r.width = s.frameWidth || 0;
      const codec = stats.get(s.codecId);
      r.codec = codec ? codec.mimeType : null;
    }
  });
  return r;
})()"#;

/// The publisher's view: the camera's size and frame rate, and each simulcast stream
/// it sends.
const PUBLISHER: &str = r#"(async () => {
  const pc = window.shoal.pc;
  const stats = await pc.getStats();
  const layers = [];
  stats.forEach((s) => {
    if (s.type !== "outbound-rtp" || s.kind !== "video") return;
    const codec = stats.get(s.codecId);
    layers.push({ rid: s.rid || null, width: s.frameWidth || 0, encoded: s.framesEncoded || 0,
      fps: s.framesPerSecond || 0, bytes: s.bytesSent || 0, limit: s.qualityLimitationReason,
      encoder: s.encoderImplementation, codec: codec ? codec.mimeType : null,
      keyframes: s.keyFramesEncoded || 0, plis: s.pliCount || 0, target: s.targetBitrate || 0,
      retransmitted: s.retransmittedBytesSent || 0, scalability: s.scalabilityMode || null });
  });
  layers.sort((a, b) => ["q", "h", "f"].indexOf(a.rid) - ["q", "h", "f"].indexOf(b.rid));
  const track = pc.getSenders()[0] && pc.getSenders()[0].track;
  const settings = track ? track.getSettings() : {};
  return { camera: settings.width + "x" + settings.height + " at " + settings.frameRate, layers };
})()"#;

fn int(v: &Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or(0)
}

/// The width a player's samples show most often.
fn settled_width<'a>(samples: impl Iterator<Item = &'a Value>) -> u64 {
    let widths: Vec<u64> = samples.map(|v| int(v, "width")).collect();
    widths
        .iter()
        .copied()
        .max_by_key(|w| widths.iter().filter(|x| *x == w).count())
        .unwrap_or(0)
}

#[test]
fn netns_chromium_simulcast_layers() {
    for (codec, tag) in [("VP8", "scv"), ("H264", "sch")] {
        layers_follow_downlinks(codec, tag);
    }
}

/// One case: a publisher of `codec`, a restricted and an unrestricted player, in a
/// lab of its own tagged `tag`.
fn layers_follow_downlinks(codec: &str, tag: &str) {
    let Some(mut lab) = lab::Lab::new(tag) else {
        return;
    };
    let client_c = lab.namespace("client-c");
    let Star {
        sfu,
        router,
        client_a,
        client_b,
    } = star(
        &mut lab,
        &[Spoke {
            ns: &client_c,
            side: "to-c",
            inside: "198.51.100.130/26",
            outside: "198.51.100.129/26",
            gateway: "198.51.100.129",
        }],
    );
    // What the router sends toward client-b: the restricted player's downlink. A
    // bucket of two full-size packets, so a probe meets the link's rate.
    lab.shape(&router, LIMITED_LINK, LIMIT, "3000b");

    let started = Instant::now();
    let (server, control) = start_sfu(&sfu, ROOM, &[]);
    let grpc = control.grpc_addr().expect("gRPC is on");
    let page = page_url();
    let secure = secure_origin_flag();
    let camera = launch_in(Some(&client_a), &page, &[&secure]);
    let slow = launch_in(Some(&client_b), &page, &[&secure]);
    let fast = launch_in(Some(&client_c), &page, &[&secure]);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let run = async {
            let mut a = Page::open(&lab, &client_a, &camera, &page).await;
            let mut b = Page::open(&lab, &client_b, &slow, &page).await;
            let mut c = Page::open(&lab, &client_c, &fast, &page).await;
            // The offer is checked whatever shoal answers, a refusal included.
            let published = a
                .eval(&format!(
                    "(async () => {{ try {{ return {{ answer: await {} }}; }} \
                     catch (e) {{ return {{ error: String(e) }}; }} }})()",
                    publish_simulcast_script(ROOM, "camera", codec)
                ))
                .await;
            let offer = a.eval("window.shoal && window.shoal.offer").await;
            check_offer(codec, offer.as_str().unwrap_or_default());
            let answer = published["answer"]
                .as_str()
                .unwrap_or_else(|| panic!("{codec}: WHIP failed: {}", published["error"]));
            check_answer(codec, answer);

            b.eval(&play_script(ROOM, "restricted")).await;
            c.eval(&play_script(ROOM, "unrestricted")).await;
            // shoal's choice for each player once a second while they settle.
            let mut settling = Vec::new();
            let settle_start = Instant::now();
            while settle_start.elapsed() < SETTLE {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let p = participants_in(&sfu, grpc, ROOM);
                let view = |who: &str| {
                    p.iter()
                        .find(|p| p.identity == who)
                        .and_then(|p| p.connection.as_ref())
                        .map(|c| {
                            let l = c.layers.first();
                            format!(
                                "{}→{} {}k probes {} last {}k",
                                l.map_or(-2, |l| l.current),
                                l.map_or(-2, |l| l.target),
                                c.estimated_bps / 1000,
                                c.probe_clusters,
                                c.last_probe_bps / 1000
                            )
                        })
                        .unwrap_or_default()
                };
                settling.push(format!("{} / {}", view("restricted"), view("unrestricted")));
            }

            let mut window = Vec::with_capacity(SAMPLES);
            let mut chosen = Vec::with_capacity(SAMPLES);
            for i in 0..SAMPLES {
                if i > 0 {
                    tokio::time::sleep(SAMPLE_EVERY).await;
                }
                window.push((b.eval(PLAYER).await, c.eval(PLAYER).await));
                chosen.push(shoal_view(&sfu, grpc));
            }
            let publisher = a.eval(PUBLISHER).await;

            // Lift the limit: the restricted player's width is read once a second.
            lab.exec(
                &router,
                &["tc", "qdisc", "del", "dev", LIMITED_LINK, "root"],
            );
            let lifted = Instant::now();
            let mut rise = Vec::new();
            let limited_width = settled_width(window.iter().map(|(b, _)| b));
            while lifted.elapsed() < RISE_TIMEOUT {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let v = b.eval(PLAYER).await;
                let width = int(&v, "width");
                rise.push((lifted.elapsed().as_secs(), width));
                if width > limited_width {
                    break;
                }
            }
            let after = (b.eval(PLAYER).await, c.eval(PLAYER).await);
            (window, chosen, publisher, rise, after, settling)
        };
        let (window, chosen, publisher, rise, after, settling) =
            tokio::time::timeout(CASE_TIMEOUT, run)
                .await
                .unwrap_or_else(|_| panic!("{codec}: the case took over {CASE_TIMEOUT:?}"));
        let shard = server
            .command_sender(0)
            .and_then(|s| s.stats().ok())
            .expect("the shard reports")
            .shard;

        let restricted: Vec<&Value> = window.iter().map(|(b, _)| b).collect();
        let unrestricted: Vec<&Value> = window.iter().map(|(_, c)| c).collect();
        let figures = |vs: &[&Value], key: &str| vs.iter().map(|v| int(v, key)).collect::<Vec<_>>();
        let report = format!(
            "{codec} after {:.0} s: restricted widths {:?} decoded {:?} lost {} codec {}; \
             unrestricted widths {:?} decoded {:?} lost {} codec {}; \
             restricted after the limit went (s, width) {rise:?}; \
             shoal rtp received {} forwarded {} unknown ssrc {} keyframe requests {} nacks {} \
             retransmitted {}\nshoal's choice (restricted, unrestricted) {chosen:?}\n\
             while settling (stream now→chosen, estimate; restricted / unrestricted) \
             {settling:?}\n\
             publisher {publisher}\nrestricted {}\nunrestricted {}",
            started.elapsed().as_secs_f64(),
            figures(&restricted, "width"),
            figures(&restricted, "framesDecoded"),
            after.0["lost"],
            after.0["codec"],
            figures(&unrestricted, "width"),
            figures(&unrestricted, "framesDecoded"),
            after.1["lost"],
            after.1["codec"],
            shard.rtp_received,
            shard.rtp_forwarded,
            shard.rtp_unknown_ssrc,
            shard.keyframe_requests_sent,
            shard.nacks_sent,
            shard.rtp_retransmitted,
            after.0,
            after.1,
        );
        eprintln!("{report}");
        let mime = format!("video/{codec}");
        for (who, samples) in [("restricted", &restricted), ("unrestricted", &unrestricted)] {
            let decoded = figures(samples, "framesDecoded");
            assert!(
                decoded.windows(2).all(|w| w[1] > w[0]),
                "the {who} player's video froze: {report}"
            );
            assert!(
                samples
                    .iter()
                    .all(|v| v["codec"].as_str() == Some(mime.as_str())),
                "the {who} player decodes {codec}: {report}"
            );
        }
        // libvpx holds q to its target: q is what it spends least on, and what the
        // restricted player is sent. OpenH264 can run q far over its target (see the
        // module's documentation), over h's rate and over the link's: the restricted
        // H.264 player is sent q or h, whichever fits.
        let width_of = |rid: &str| {
            publisher["layers"]
                .as_array()
                .and_then(|l| l.iter().find(|l| l["rid"].as_str() == Some(rid)))
                .map_or(0, |l| int(l, "width"))
        };
        if codec == "VP8" {
            let cheapest = publisher["layers"]
                .as_array()
                .and_then(|l| l.iter().min_by_key(|l| int(l, "bytes")))
                .and_then(|l| l["rid"].as_str());
            assert_eq!(cheapest, Some("q"), "libvpx's q is its cheapest: {report}");
        }
        let settled = settled_width(restricted.iter().copied());
        let allowed = if codec == "VP8" {
            vec![LOW_WIDTH]
        } else {
            vec![LOW_WIDTH, width_of("h")]
        };
        assert!(
            allowed.contains(&settled),
            "the restricted player gets a stream its link carries, one {allowed:?} wide: \
             {report}"
        );
        // shoal tries a climb when a probe finds room (on this link every 8 to 16 s:
        // a probe's 50 ms cluster passes the token bucket whole), undone within a
        // second or two when it loses; a window of SAMPLES may catch one.
        let on_settled = restricted
            .iter()
            .filter(|v| int(v, "width") == settled)
            .count();
        assert!(
            on_settled * 3 >= SAMPLES * 2,
            "the restricted player stays on one stream: {report}"
        );
        // shoal says so too: the restricted player is sent that, the other f. The
        // unrestricted player's estimate is still climbing here (about 1 Mbit/s in
        // that run, f alone under 0.8): one step down to h and back within the window, on a
        // machine busy with builds beside the tests, was seen once in CI; one
        // sample of it is allowed, as one of a climb is for the restricted player.
        let chosen_settled = chosen
            .iter()
            .filter(|(r, _)| r.as_deref().map(width_of) == Some(settled))
            .count();
        let chosen_top = chosen
            .iter()
            .filter(|(_, u)| u.as_deref() == Some("f"))
            .count();
        assert!(
            chosen_settled * 3 >= SAMPLES * 2 && chosen_top + 1 >= SAMPLES,
            "shoal's own choice: {report}"
        );
        let on_top = unrestricted
            .iter()
            .filter(|v| int(v, "width") == HIGH_WIDTH)
            .count();
        assert!(
            on_top + 1 >= SAMPLES,
            "the unrestricted player gets f: {report}"
        );
        assert!(
            rise.last().is_some_and(|&(_, width)| width > settled),
            "the restricted player gets a wider stream once its limit is lifted: {report}"
        );
    });
    drop(camera);
    drop(slow);
    drop(fast);
    drop(control);
    drop(server);
}

/// The lines of `sdp`'s first video section.
fn video_section(sdp: &str) -> Vec<&str> {
    sdp.lines()
        .skip_while(|l| !l.starts_with("m=video "))
        .enumerate()
        .take_while(|(i, l)| *i == 0 || !l.starts_with("m="))
        .map(|(_, l)| l)
        .collect()
}

/// The publisher offers to send the three rids as three simulcast streams, and
/// `codec` as its only video codec.
fn check_offer(codec: &str, offer: &str) {
    let video = video_section(offer);
    for rid in RIDS {
        let line = format!("a=rid:{rid} send");
        assert!(
            video
                .iter()
                .any(|l| *l == line || l.starts_with(&format!("{line} "))),
            "{codec}: the offer has no {line}:\n{offer}"
        );
    }
    assert!(
        video.contains(&"a=simulcast:send q;h;f"),
        "{codec}: the offer sends no simulcast q;h;f:\n{offer}"
    );
    // Every format of the section but the retransmission ones is `codec`, and the
    // first is `codec` (for H.264, in packetization mode 1).
    let rtpmap = |pt: &str| {
        let prefix = format!("a=rtpmap:{pt} ");
        video
            .iter()
            .find_map(|l| l.strip_prefix(prefix.as_str()))
            .and_then(|m| m.split('/').next())
            .unwrap_or_default()
            .to_owned()
    };
    let formats: Vec<&str> = video
        .first()
        .map(|m| m.split_whitespace().skip(3).collect())
        .unwrap_or_default();
    let names: Vec<String> = formats.iter().map(|pt| rtpmap(pt)).collect();
    assert!(
        names
            .iter()
            .all(|n| n.eq_ignore_ascii_case(codec) || n.eq_ignore_ascii_case("rtx"))
            && names.first().is_some_and(|n| n.eq_ignore_ascii_case(codec)),
        "{codec}: the offer's video formats are {names:?}:\n{offer}"
    );
    if codec == "H264" {
        let fmtp = format!("a=fmtp:{} ", formats[0]);
        assert!(
            video
                .iter()
                .any(|l| l.starts_with(&fmtp) && l.contains("packetization-mode=1")),
            "{codec}: the first format is not packetization mode 1:\n{offer}"
        );
    }
}

/// shoal answers that it receives all three (an answer's simulcast and rids name the
/// answerer's direction: `recv` to an offer's `send`).
fn check_answer(codec: &str, answer: &str) {
    let video = video_section(answer);
    let simulcast = video
        .iter()
        .find_map(|l| l.strip_prefix("a=simulcast:recv "))
        .unwrap_or_else(|| panic!("{codec}: the answer receives no simulcast:\n{answer}"));
    let mut rids: Vec<&str> = simulcast
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .split([';', ','])
        .collect();
    rids.sort_unstable();
    assert_eq!(
        rids,
        ["f", "h", "q"],
        "{codec}: the answer receives {simulcast}:\n{answer}"
    );
    for rid in RIDS {
        let line = format!("a=rid:{rid} recv");
        assert!(
            video
                .iter()
                .any(|l| *l == line || l.starts_with(&format!("{line} "))),
            "{codec}: the answer has no {line}:\n{answer}"
        );
    }
}

/// The rid shoal sends each player, by ListParticipants: (restricted, unrestricted).
fn shoal_view(sfu: &str, grpc: std::net::SocketAddr) -> (Option<String>, Option<String>) {
    let participants = participants_in(sfu, grpc, ROOM);
    let rid = |who: &str| {
        participants
            .iter()
            .find(|p| p.identity == who)
            .and_then(|p| p.connection.as_ref())
            .and_then(|c| c.layers.first())
            .map(|l| l.rid.clone())
    };
    (rid("restricted"), rid("unrestricted"))
}
