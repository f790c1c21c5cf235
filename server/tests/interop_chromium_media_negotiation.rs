//! Interop: headless Chromium 156 takes the descriptions shoal's media negotiation
//! (`sdp::Negotiation`) writes, over a whole session, and its own descriptions go back
//! through it: a publisher's answer, a second page whose sections carry room tracks
//! both ways, and shoal's offers that add tracks to a data-only page, stop one (port
//! 0) and recycle its section for another. The pages' RTCPeerConnections check each
//! step (setRemoteDescription succeeds, transceiver directions, `ontrack` with the
//! stream ids shoal announced); no media flows, the candidate is a dead port.
//!
//! Needs `/usr/bin/chromium` (`scripts/test-all` installs it).

mod chromium;
mod grpc_node;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use chromium::{attach, devtools, launch};
use serde_json::Value;
use shoal_components::sdp::{AnswerParams, Change, Negotiation, SessionDescription, TrackSource};

const UFRAG: &str = "sHoAlUfRaG012345";
const PWD: &str = "sHoAlPaSsWoRd+/0123456789abcd";

/// Port 9 (discard): nothing answers, which is all this test needs.
const DEAD_PORT: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 9);

fn params() -> AnswerParams<'static> {
    AnswerParams {
        candidates: &[DEAD_PORT],
        tcp_candidates: &[],
        ice_ufrag: UFRAG,
        ice_pwd: PWD,
        fingerprint_sha256: [0xA5; 32],
        session_id: 42,
    }
}

fn counter() -> impl FnMut() -> u32 {
    let mut n = 0x5000;
    move || {
        n += 7;
        n
    }
}

/// Page helpers: `pcs[name]` peer connections, the tracks each received, and
/// functions to make an offer, apply a remote description and answer.
const SETUP: &str = r#"(() => {
  window.pcs = {};
  window.received = {};
  window.newPc = async (name, media) => {
    const pc = new RTCPeerConnection({ iceServers: [] });
    pcs[name] = pc;
    received[name] = [];
    pc.ontrack = (e) => received[name].push(e.streams.map((s) => s.id).join(",") + "/" + e.track.kind);
    pc.createDataChannel("chat");
    if (media) {
      const stream = await navigator.mediaDevices.getUserMedia({ audio: true, video: true });
      for (const t of stream.getTracks()) pc.addTrack(t, stream);
    }
    await pc.setLocalDescription(await pc.createOffer());
    return pc.localDescription.sdp;
  };
  window.applyAnswer = async (name, sdp) => {
    await pcs[name].setRemoteDescription({ type: "answer", sdp });
    return pcs[name].getTransceivers().map((t) => t.mid + ":" + t.currentDirection).join(" ");
  };
  window.answerOffer = async (name, sdp) => {
    const pc = pcs[name];
    await pc.setRemoteDescription({ type: "offer", sdp });
    await pc.setLocalDescription(await pc.createAnswer());
    return pc.localDescription.sdp;
  };
  window.directions = (name) =>
    pcs[name].getTransceivers().map((t) => t.mid + ":" + t.currentDirection).join(" ");
  return "ready";
})()"#;

fn js_string(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

fn text(v: Value) -> String {
    v.as_str()
        .unwrap_or_else(|| panic!("expected a string from the page, got {v}"))
        .to_owned()
}

#[test]
fn interop_chromium_media_negotiation() {
    let grpc_node::RoomNode {
        server: _server,
        http,
        runtime,
        rooms: _rooms,
        control: _control,
    } = grpc_node::node_with_room("negotiation");
    let page = format!("http://{http}/");
    let browser = launch(&page);
    runtime.block_on(async {
        let mut cdp = devtools(&browser).await;
        let s = attach(&mut cdp, &page).await;
        assert_eq!(text(cdp.evaluate(&s, SETUP).await), "ready");
        let mut ssrc = counter();

        // A publishes audio and video: shoal answers recvonly, so A's transceivers send.
        let offer = text(cdp.evaluate(&s, "newPc('a', true)").await);
        let mut a = Negotiation::new(1);
        let answered = a
            .answer(&SessionDescription::parse(&offer).unwrap(), &params(), &[], &mut ssrc)
            .unwrap();
        let script = format!("applyAnswer('a', {})", js_string(&answered.sdp.to_sdp_string()));
        assert_eq!(text(cdp.evaluate(&s, &script).await), "0:sendonly 1:sendonly");
        let tracks: Vec<TrackSource> = answered
            .changes
            .iter()
            .filter_map(|c| match c {
                Change::Published { mid, track } => Some(TrackSource {
                    id: format!("a{mid}"),
                    kind: track.kind.clone(),
                    stream_id: "alice".to_owned(),
                    codec: track.codec.clone(),
                }),
                _ => None,
            })
            .collect();
        assert_eq!(tracks.len(), 2, "{:?}", answered.changes);

        // B publishes too and gets A's tracks in the same sections: sendrecv, and
        // Chromium raises ontrack with the stream id shoal announced.
        let offer = text(cdp.evaluate(&s, "newPc('b', true)").await);
        let mut b = Negotiation::new(2);
        let answered = b
            .answer(&SessionDescription::parse(&offer).unwrap(), &params(), &tracks, &mut ssrc)
            .unwrap();
        let script = format!("applyAnswer('b', {})", js_string(&answered.sdp.to_sdp_string()));
        assert_eq!(text(cdp.evaluate(&s, &script).await), "0:sendrecv 1:sendrecv");
        let got = cdp.evaluate(&s, "received.b.slice().sort().join(' ')").await;
        assert_eq!(text(got), "alice/audio alice/video");

        // C only has a data channel; shoal offers it A's tracks in new sections.
        let offer = text(cdp.evaluate(&s, "newPc('c', false)").await);
        let mut c = Negotiation::new(3);
        let answered = c
            .answer(&SessionDescription::parse(&offer).unwrap(), &params(), &tracks, &mut ssrc)
            .unwrap();
        let script = format!("applyAnswer('c', {})", js_string(&answered.sdp.to_sdp_string()));
        cdp.evaluate(&s, &script).await;
        let ours = c.offer(&params(), &tracks, &mut ssrc).expect("an offer");
        let script = format!("answerOffer('c', {})", js_string(&ours.to_sdp_string()));
        let reply = text(cdp.evaluate(&s, &script).await);
        let changes = c.accept(&SessionDescription::parse(&reply).unwrap()).unwrap();
        let subscribed: Vec<&str> = changes
            .iter()
            .filter_map(|ch| match ch {
                Change::Subscribed { mid, .. } => Some(mid.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(subscribed, ["s0", "s1"], "{changes:?}");
        assert_eq!(text(cdp.evaluate(&s, "directions('c')").await), "s0:recvonly s1:recvonly");
        let got = cdp.evaluate(&s, "received.c.slice().sort().join(' ')").await;
        assert_eq!(text(got), "alice/audio alice/video");

        // A stops publishing audio: shoal's offer disables that section (port 0) and
        // Chromium stops the transceiver and drops it.
        let ours = c.offer(&params(), &tracks[1..], &mut ssrc).expect("an offer");
        let script = format!("answerOffer('c', {})", js_string(&ours.to_sdp_string()));
        let reply = text(cdp.evaluate(&s, &script).await);
        let changes = c.accept(&SessionDescription::parse(&reply).unwrap()).unwrap();
        assert_eq!(
            changes,
            [Change::Unsubscribed {
                mid: "s0".into(),
                track: "a0".into()
            }]
        );
        assert_eq!(text(cdp.evaluate(&s, "directions('c')").await), "s1:recvonly");

        // A new audio track recycles that section under a new mid: no growth.
        let mut newer = tracks[0].clone();
        newer.id = "a9".into();
        newer.stream_id = "alice2".into();
        let ours = c
            .offer(&params(), &[tracks[1].clone(), newer], &mut ssrc)
            .expect("an offer");
        let script = format!("answerOffer('c', {})", js_string(&ours.to_sdp_string()));
        let reply = text(cdp.evaluate(&s, &script).await);
        let reply = SessionDescription::parse(&reply).unwrap();
        assert_eq!(reply.media.len(), 3, "the section was recycled, not added");
        let changes = c.accept(&reply).unwrap();
        assert!(
            matches!(&changes[..], [Change::Subscribed { mid, track }] if mid == "s2" && track.track == "a9"),
            "{changes:?}"
        );
        let directions = text(cdp.evaluate(&s, "directions('c')").await);
        assert!(directions.contains("s2:recvonly"), "{directions}");
        let got = cdp.evaluate(&s, "received.c.slice().sort().join(' ')").await;
        assert_eq!(text(got), "alice/audio alice/video alice2/audio");
    });
    drop(browser);
}
