//! Acceptance: active speakers from RFC 6464 audio levels. Two aiortc 1.16
//! publishers (`scripts/interop/aiortc_video.py publish`) send a tone into a room
//! over WHIP, one loud (peak 8 000, about −15 dBov) and one quiet (peak 250, about
//! −45 dBov), on a node of two shards; aiortc writes the level
//! of every audio packet it sends. A participant that joined over `/signal` hears
//! `speakers` messages: the loud one ranked first, both ranked; at a set moment the
//! publishers swap amplitudes, and a message ranking the other first arrives
//! within 1 s of the swap.
//!
//! The Python interpreter is `SHOAL_INTEROP_PYTHON`, else the venv
//! `target/interop-venv` that `scripts/test-all` creates with aiortc.

mod aiortc;
mod grpc_node;
mod signal_ws;

use std::num::NonZeroUsize;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use aiortc::{CLIENT_TIMEOUT, MARGIN, VideoClient as Client};
use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use shoal_server::config::Config;
use signal_ws::{Ws, next_json};
use tokio_tungstenite::tungstenite::Message;

const ROOM: &str = "speakers";
const LOUD: &str = "8000";
const QUIET: &str = "250";
/// When the publishers swap, from their start: time to connect, then time for the
/// ranking to settle.
const SWAP_AFTER: Duration = Duration::from_secs(14);
/// The bar: a new ranking within this of the swap.
const WITHIN: Duration = Duration::from_secs(1);

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs_f64()
}

/// The identities of a `speakers` message, loudest first; `None` for any other.
fn ranking(message: &Value) -> Option<Vec<String>> {
    let speakers = message.get("speakers")?;
    Some(
        speakers["speakers"]
            .as_array()
            .map(|list| {
                list.iter()
                    .filter_map(|s| s["identity"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default(),
    )
}

/// Reads `/signal` messages until a `speakers` ranking satisfies `wanted` or
/// `deadline` passes; returns it with the Unix time it arrived.
async fn ranking_where(
    ws: &mut Ws,
    deadline: Instant,
    seen: &mut Vec<Vec<String>>,
    wanted: impl Fn(&[String]) -> bool,
) -> Option<(Vec<String>, f64)> {
    loop {
        let wait = deadline.saturating_duration_since(Instant::now());
        let Ok(Some(Ok(frame))) = tokio::time::timeout(wait, ws.next()).await else {
            return None;
        };
        let Message::Text(text) = frame else {
            continue;
        };
        let at = unix_now();
        let message: Value = serde_json::from_str(&text).expect("JSON");
        if let Some(r) = ranking(&message) {
            seen.push(r.clone());
            if wanted(&r) {
                return Some((r, at));
            }
        }
    }
}

#[test]
fn active_speaker_events() {
    // Two shards of two participants: the listener and one publisher on one, the
    // other publisher on the other, whose levels meet in the control plane.
    let node = grpc_node::node_with_room_in(
        ROOM,
        Config {
            shards: NonZeroUsize::new(2).expect("non-zero"),
            max_peers_per_shard: 2,
            ..Config::default()
        },
    );
    let http = node.http;
    node.runtime.block_on(async {
        let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{http}/signal"))
            .await
            .expect("the signalling socket");
        let join = serde_json::json!({"join": {"room": ROOM, "identity": "listener"}});
        ws.send(Message::text(join.to_string())).await.unwrap();
        let joined = next_json(&mut ws).await.expect("joined");
        assert!(joined.get("join").is_some(), "{joined}");

        let whip = |who: &str| format!("http://{http}/whip/{ROOM}?identity={who}");
        let start = |who: &str, from: &str, to: &str, swap_at: f64| {
            Client::start(
                "publish",
                &whip(who),
                &[
                    "--tone-amplitude",
                    from,
                    "--swap-at",
                    &format!("{swap_at:.3}"),
                    "--swap-amplitude",
                    to,
                ],
            )
        };
        // The swap is set before they start, past the time both need to connect.
        let swap_at = unix_now() + SWAP_AFTER.as_secs_f64();
        let mut ann = start("ann", LOUD, QUIET, swap_at);
        let mut bob = start("bob", QUIET, LOUD, swap_at);
        for (who, client) in [("ann", &ann), ("bob", &bob)] {
            let up = client.next_report(Instant::now() + CLIENT_TIMEOUT + MARGIN, who);
            assert_eq!(up["event"], "connected", "{who}: {up}");
        }
        assert!(
            unix_now() < swap_at,
            "the publishers took too long to connect"
        );

        // Before the swap: ann (loud) first, bob ranked too.
        let mut seen = Vec::new();
        let before_swap = Instant::now() + Duration::from_secs_f64((swap_at - unix_now()).max(0.0));
        let first = ranking_where(&mut ws, before_swap, &mut seen, |r| {
            r == ["ann".to_owned(), "bob".to_owned()]
        })
        .await;
        assert!(
            first.is_some(),
            "no [ann, bob] ranking before the swap: {seen:?}"
        );

        // After it: bob first, within WITHIN of the swap.
        let deadline = before_swap + WITHIN + Duration::from_secs(3);
        let after = ranking_where(&mut ws, deadline, &mut seen, |r| {
            r.first().is_some_and(|f| f == "bob")
        })
        .await;
        let (order, at) = after.unwrap_or_else(|| panic!("bob never ranked first: {seen:?}"));
        // When the publishers actually switched (each reports it).
        let mut switched = Vec::new();
        for (who, client) in [("ann", &ann), ("bob", &bob)] {
            let deadline = Instant::now() + MARGIN;
            let report = loop {
                let report = client.next_report(deadline, who);
                if report["event"] == "amplitude" {
                    break report;
                }
                assert_eq!(report["event"], "receiver_reports", "{who}: {report}");
            };
            switched.push(report["at"].as_f64().expect("a time"));
        }
        let swapped = switched.iter().copied().fold(f64::MIN, f64::max);
        let took = at - swapped;
        assert!(
            took <= WITHIN.as_secs_f64(),
            "bob ranked first {took:.3} s after the swap ({order:?}); rankings: {seen:?}"
        );
        eprintln!("ranking changed {took:.3} s after the swap: {order:?}");
        ann.stop_publishing();
        bob.stop_publishing();
    });
}
