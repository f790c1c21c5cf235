"""One aiortc participant of a shoal room, for shoal's interop tests.

Joins a room through WHIP, opens two data channels (labels `ordered`: reliable and
ordered; `unordered`: unordered, sent once), waits until the room's other participant
is heard on `ordered`, then sends COUNT numbered messages on each channel and checks
what arrives from the other participant: every ordered message exactly once and in
order, with its type (string or binary) and contents intact; unordered messages
intact and never twice. It leaves with a WHIP DELETE and prints one JSON line with
what it saw; the exit status is 0 when every check passed.

Usage: python aiortc_room_client.py WHIP_URL IDENTITY [--count N] [--timeout S]

The machine has no outside network: iceServers is empty (no public STUN server), and
aioice's host-address lookup, which skips 127.0.0.1 on purpose, is wrapped to offer
127.0.0.1 first so the client reaches shoal on loopback.
"""

import argparse
import asyncio
import json
import sys
import urllib.parse
import urllib.request

import loopback  # noqa: F401  (127.0.0.1 first, before any gathering)
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription



def payload(sender: str, i: int):
    """Message i of `sender`: a string for even i, bytes for odd i; sizes 0..~3 KB."""
    size = (i * 37) % 3000
    if i % 2 == 0:
        return f"{sender}:{i}:" + "x" * size
    return f"{sender}:{i}:".encode() + bytes((i + k) % 251 for k in range(size))


def parse_index(message, me: str):
    """(sender, index) of a well-formed message from someone other than `me`, else None.
    The sender is read from the message itself, so an unordered message that overtakes
    its sender's first `ready` is still checked."""
    raw = message.encode() if isinstance(message, str) else message
    parts = raw.split(b":", 2)
    if len(parts) < 3:
        return None
    try:
        sender, i = parts[0].decode(), int(parts[1])
    except (UnicodeDecodeError, ValueError):
        return None
    if sender == me or payload(sender, i) != message:
        return None
    return sender, i


def check_in_order(message, me: str, peer, expected: int, errors: list) -> int:
    """Checks a message that should be `peer`'s number `expected`, noting what is
    wrong in `errors`; returns the number expected next."""
    parsed = parse_index(message, me)
    i = parsed[1] if parsed and parsed[0] == peer else None
    if i is None:
        errors.append(f"malformed: {str(message)[:40]!r}")
        return expected
    if i != expected:
        errors.append(f"expected {expected}, got {i}")
    return i + 1


def http(method: str, url: str, body: bytes | None = None, ctype: str | None = None):
    req = urllib.request.Request(url, data=body, method=method)
    if ctype:
        req.add_header("Content-Type", ctype)
    with urllib.request.urlopen(req, timeout=10) as resp:
        return resp.status, resp.headers, resp.read()


async def join(pc: RTCPeerConnection, whip: str) -> str:
    """Offers `pc` over WHIP and applies the answer; returns the session's URL."""
    await pc.setLocalDescription(await pc.createOffer())
    status, headers, answer = http(
        "POST", whip, pc.localDescription.sdp.encode(), "application/sdp"
    )
    if status != 201:
        raise RuntimeError(f"WHIP POST answered {status}")
    location = urllib.parse.urljoin(whip, headers.get("Location", ""))
    await pc.setRemoteDescription(RTCSessionDescription(answer.decode(), "answer"))
    return location


def end_session(location: str, errors: list) -> None:
    """Leaves with a WHIP DELETE; a failure goes into `errors` (the test decides)."""
    try:
        http("DELETE", location)
    except Exception as e:
        errors.append(f"WHIP DELETE failed: {e}")


async def announce(channel, me: str, peer_heard: asyncio.Event) -> None:
    """Until the other participant is heard (messages sent before it joined reach no
    one), says who we are every 100 ms; then once more, so it hears us too."""
    while not peer_heard.is_set():
        channel.send(f"ready:{me}")
        await asyncio.sleep(0.1)
    channel.send(f"ready:{me}")


async def send_with_flow_control(channels, me: str, count: int, report: dict) -> None:
    """Sends our messages 0..count on each of `channels`, keeping the first one's
    bufferedAmount under 512 KiB."""
    for i in range(count):
        for channel in channels:
            channel.send(payload(me, i))
        report["sent"] += 1
        while channels[0].bufferedAmount > 512 * 1024:
            await asyncio.sleep(0.005)


async def all_acknowledged(pc: RTCPeerConnection) -> None:
    """Returns once nothing of ours waits in the data channels or in SCTP, sent or
    not (aiortc exposes no API for it; these are its send queues)."""
    sctp = pc.sctp
    while (
        sctp._data_channel_queue or sctp._outbound_queue or sctp._sent_queue
    ):
        await asyncio.sleep(0.01)


def sctp_state(pc: RTCPeerConnection) -> dict:
    """What aiortc's SCTP association holds, for a report after a timeout: where
    its cumulative TSN stands, what it holds above it, what waits in reassembly,
    and what it still has to send (aiortc exposes no API for it; these are its
    internals, read defensively)."""
    s = pc.sctp
    try:
        misordered = sorted(s._sack_misordered)
        streams = {
            sid: {
                "next_ssn": st.sequence_number,
                "held": len(st.reassembly),
                "first": [
                    (c.tsn, c.stream_seq, c.flags) for c in st.reassembly[:3]
                ],
            }
            for sid, st in s._inbound_streams.items()
        }
        return {
            "state": str(s._association_state),
            "cum_tsn": s._last_received_tsn,
            "misordered": len(misordered),
            "misordered_first": misordered[:5],
            "rwnd": s._advertised_rwnd,
            "streams": streams,
            "sent_queue": len(s._sent_queue),
            "outbound_queue": len(s._outbound_queue),
            "cwnd": s._cwnd,
            "rto": s._rto,
        }
    except Exception as e:  # internals moved: say so rather than fail the report
        return {"error": repr(e)}


async def run(whip: str, me: str, count: int, timeout: float) -> dict:
    pc = RTCPeerConnection(configuration=RTCConfiguration(iceServers=[]))
    ordered = pc.createDataChannel("ordered")
    unordered = pc.createDataChannel("unordered", ordered=False, maxRetransmits=0)
    report = {
        "identity": me,
        "peer": None,
        "ordered_received": 0,
        "ordered_errors": [],
        "unordered_received": 0,
        "unordered_errors": [],
        "sent": 0,
    }
    peer_heard = asyncio.Event()
    peer_done = asyncio.Event()
    all_received = asyncio.Event()
    # Both channels: aiortc opens each on its own DCEP acknowledgement, and a send
    # on one not open yet raises InvalidStateError.
    ordered_open = asyncio.Event()
    unordered_open = asyncio.Event()
    next_ordered = {"i": 0}
    seen_unordered: set[int] = set()

    @ordered.on("open")
    def _on_open():
        ordered_open.set()

    @unordered.on("open")
    def _on_unordered_open():
        unordered_open.set()

    @ordered.on("message")
    def _on_ordered(message):
        if isinstance(message, str) and message.startswith("ready:"):
            peer = message[len("ready:") :]
            if peer != me:
                report["peer"] = peer
                peer_heard.set()
            return
        if isinstance(message, str) and message.startswith("done:"):
            peer_done.set()
            return
        next_ordered["i"] = check_in_order(
            message, me, report["peer"], next_ordered["i"], report["ordered_errors"]
        )
        report["ordered_received"] += 1
        if report["ordered_received"] == count:
            all_received.set()

    @unordered.on("message")
    def _on_unordered(message):
        parsed = parse_index(message, me)
        i = parsed[1] if parsed else None
        if i is None:
            report["unordered_errors"].append(f"malformed: {str(message)[:40]!r}")
        elif i in seen_unordered:
            report["unordered_errors"].append(f"duplicate {i}")
        else:
            seen_unordered.add(i)
        report["unordered_received"] += 1

    location = await join(pc, whip)
    step = "open"
    try:
        await asyncio.wait_for(
            asyncio.gather(ordered_open.wait(), unordered_open.wait()), timeout
        )
        step = "announce"
        await asyncio.wait_for(announce(ordered, me, peer_heard), timeout)
        step = "send"
        await send_with_flow_control([ordered, unordered], me, count, report)
        step = "receive"
        await asyncio.wait_for(all_received.wait(), timeout)
        ordered.send(f"done:{me}")
        step = "peer done"
        await asyncio.wait_for(peer_done.wait(), timeout)
        # Leave only once shoal has acknowledged everything we sent, our `done` too:
        # what shoal acknowledged it has relayed, so leaving loses nothing.
        step = "acknowledged"
        await asyncio.wait_for(all_acknowledged(pc), timeout)
    except asyncio.TimeoutError:
        report["ordered_errors"].append(
            f"timed out waiting for {step}: heard={peer_heard.is_set()} "
            f"got={report['ordered_received']}"
        )
        report["sctp"] = sctp_state(pc)
    finally:
        end_session(location, report["ordered_errors"])
        await pc.close()
    return report


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("whip")
    ap.add_argument("identity")
    ap.add_argument("--count", type=int, default=1000)
    ap.add_argument("--timeout", type=float, default=60.0)
    args = ap.parse_args()
    report = asyncio.run(run(args.whip, args.identity, args.count, args.timeout))
    print(json.dumps(report), flush=True)
    ok = (
        report["ordered_received"] == args.count
        and not report["ordered_errors"]
        and not report["unordered_errors"]
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
