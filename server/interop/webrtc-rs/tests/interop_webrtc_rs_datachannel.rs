//! Acceptance (issue #5): a webrtc-rs 0.21 client joins a shoal room over WHIP and
//! exchanges data-channel messages through shoal with an aiortc client in the same
//! room.
//!
//! shoal (`SHOAL_BIN`) runs as a child on ephemeral ports; the room is created over
//! gRPC; the aiortc client (`scripts/interop/aiortc_room_client.py`, run by
//! `SHOAL_INTEROP_PYTHON`, a venv's Python with aiortc 1.16) and the webrtc-rs
//! participant of `common::participant` (in this process) then each send 300
//! numbered messages on `ordered` and on `unordered` and check what the other sent:
//! every ordered message exactly once, in order, with its type (string or binary) and
//! bytes intact; unordered messages intact and never twice. Both leave with a WHIP
//! DELETE, after which the room has no participants.

mod common;

use std::time::Duration;

use common::aiortc::run_aiortc;
use common::node::{ShoalNode, required_file};
use common::participant::{PHASE_TIMEOUT, run_participant};

const ROOM: &str = "interop-webrtc-rs";
const COUNT: u64 = 300;
const AIORTC: &str = "aiortc";
const WEBRTC_RS: &str = "webrtc-rs";
/// The aiortc client's own phase timeouts are 60 s each; this bounds the whole run.
const AIORTC_TIMEOUT: Duration = Duration::from_secs(240);
/// How long after both DELETEs the room may still list a participant.
const LEAVE_TIMEOUT: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interop_webrtc_rs_datachannel() {
    let shoal = required_file("SHOAL_BIN", "a built shoal binary (target/debug/shoal)");
    let python = required_file(
        "SHOAL_INTEROP_PYTHON",
        "the python of a venv with aiortc==1.16.0 (target/interop-venv/bin/python)",
    );

    // Startup reads shoal's stdout with a deadline, off the async workers.
    let node = tokio::task::spawn_blocking(move || ShoalNode::start(&shoal))
        .await
        .expect("the startup task")
        .unwrap_or_else(|e| panic!("{e}"));
    node.create_room(ROOM)
        .await
        .unwrap_or_else(|e| panic!("{}", node.failure(&e)));

    let (aiortc_whip, our_whip) = (node.whip_url(ROOM, AIORTC), node.whip_url(ROOM, WEBRTC_RS));
    let aiortc = run_aiortc(&python, &aiortc_whip, AIORTC, COUNT, AIORTC_TIMEOUT);
    let ours = tokio::time::timeout(
        PHASE_TIMEOUT * 6,
        run_participant(&our_whip, WEBRTC_RS, COUNT),
    );
    let (aiortc, ours) = tokio::join!(aiortc, ours);

    let ours = ours
        .map_err(|_| {
            format!(
                "the webrtc-rs participant did not finish within {:?}",
                PHASE_TIMEOUT * 6
            )
        })
        .and_then(|r| r)
        .unwrap_or_else(|e| panic!("{}", node.failure(&e)));
    let aiortc = aiortc.unwrap_or_else(|e| panic!("{}", node.failure(&e)));
    let aiortc_report = aiortc.report.as_ref().unwrap_or_else(|e| {
        panic!(
            "{}",
            node.failure(&format!(
                "the aiortc client ({}) printed no report: {e}\n--- its stderr ---\n{}",
                aiortc.status, aiortc.stderr
            ))
        )
    });

    let mut failures: Vec<String> = ours
        .failures(COUNT, AIORTC)
        .into_iter()
        .map(|f| format!("{WEBRTC_RS}: {f}"))
        .collect();
    failures.extend(
        aiortc_report
            .failures(COUNT, WEBRTC_RS)
            .into_iter()
            .map(|f| format!("{AIORTC}: {f}")),
    );
    if !aiortc.status.success() {
        failures.push(format!("{AIORTC}: exited {}", aiortc.status));
    }
    // Only when the exchange itself passed: a failed one says more without this.
    if failures.is_empty()
        && let Err(e) = node.wait_room_empty(ROOM, LEAVE_TIMEOUT).await
    {
        failures.push(e);
    }
    assert!(
        failures.is_empty(),
        "{}",
        node.failure(&format!(
            "{}\n--- webrtc-rs report ---\n{ours:?}\n--- aiortc report ---\n{aiortc_report:?}\n\
             --- aiortc stderr ---\n{}",
            failures.join("\n"),
            aiortc.stderr
        ))
    );
    eprintln!(
        "{WEBRTC_RS}: {} ordered, {} unordered received; {AIORTC}: {} ordered, {} unordered received",
        ours.ordered_received,
        ours.unordered_received,
        aiortc_report.ordered_received,
        aiortc_report.unordered_received
    );
}
