"""One aiortc participant of a shoal room for the test of a sender that leaves while
the room relay still holds what it sent.

Two roles, in one room, on a reliable ordered channel labelled `ordered`:
- `receive`: once it hears the sender, says `stalling`, then blocks its event loop
  for STALL seconds (reading nothing, as an overloaded client does), so shoal's
  queue toward it fills and the relay holds the sender's messages back in the
  sender's receive buffer; then it reads on and checks that every one of the
  sender's COUNT messages arrives exactly once, in order, intact.
- `send`: once it hears `stalling`, sends COUNT messages (with flow control on its
  bufferedAmount), waits until shoal has acknowledged all of them, and leaves at
  once (WHIP DELETE, then close) while the receiver still stalls.

Prints one JSON line with what it saw; the exit status is 0 when every check passed.

Usage: python aiortc_leave_client.py WHIP_URL IDENTITY ROLE [--count N]
       [--stall S] [--timeout S]
"""

import argparse
import asyncio
import json
import sys
import time

import loopback  # noqa: F401  (127.0.0.1 first, before any gathering)
from aiortc import RTCConfiguration, RTCPeerConnection
from aiortc_room_client import (
    all_acknowledged,
    announce,
    check_in_order,
    end_session,
    join,
    sctp_state,
    send_with_flow_control,
)


async def run(whip: str, me: str, role: str, count: int, stall: float, timeout: float):
    pc = RTCPeerConnection(configuration=RTCConfiguration(iceServers=[]))
    ordered = pc.createDataChannel("ordered")
    report = {"identity": me, "role": role, "received": 0, "errors": [], "sent": 0}
    opened = asyncio.Event()
    peer_heard = asyncio.Event()
    stalling = asyncio.Event()
    all_received = asyncio.Event()
    state = {"peer": None, "next": 0}

    @ordered.on("open")
    def _on_open():
        opened.set()

    @ordered.on("message")
    def _on_message(message):
        if isinstance(message, str) and message.startswith("ready:"):
            if message[len("ready:") :] != me:
                state["peer"] = message[len("ready:") :]
                peer_heard.set()
            return
        if isinstance(message, str) and message.startswith("stalling:"):
            stalling.set()
            return
        state["next"] = check_in_order(
            message, me, state["peer"], state["next"], report["errors"]
        )
        report["received"] += 1
        if report["received"] == count:
            all_received.set()

    location = await join(pc, whip)
    step = "open"
    left = False
    try:
        await asyncio.wait_for(opened.wait(), timeout)
        step = "announce"
        await asyncio.wait_for(announce(ordered, me, peer_heard), timeout)
        if role == "receive":
            ordered.send(f"stalling:{me}")
            # Let `stalling` go out, then read nothing for `stall` seconds.
            await asyncio.sleep(0.05)
            time.sleep(stall)
            step = "receive"
            await asyncio.wait_for(all_received.wait(), timeout)
        else:
            step = "stalling"
            await asyncio.wait_for(stalling.wait(), timeout)
            started = time.monotonic()
            step = "send"
            await send_with_flow_control([ordered], me, count, report)
            # shoal acknowledged everything: the room must get it, though we go now.
            step = "acknowledged"
            await asyncio.wait_for(all_acknowledged(pc), timeout)
            report["left_after"] = round(time.monotonic() - started, 3)
            end_session(location, report["errors"])
            left = True
    except asyncio.TimeoutError:
        report["errors"].append(
            f"timed out waiting for {step}: heard={peer_heard.is_set()} "
            f"got={report['received']}"
        )
        report["sctp"] = sctp_state(pc)
    finally:
        if not left:
            end_session(location, report["errors"])
        await pc.close()
    return report


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("whip")
    ap.add_argument("identity")
    ap.add_argument("role", choices=["send", "receive"])
    ap.add_argument("--count", type=int, default=1000)
    ap.add_argument("--stall", type=float, default=4.0)
    ap.add_argument("--timeout", type=float, default=60.0)
    args = ap.parse_args()
    report = asyncio.run(
        run(args.whip, args.identity, args.role, args.count, args.stall, args.timeout)
    )
    print(json.dumps(report), flush=True)
    if args.role == "receive":
        ok = report["received"] == args.count and not report["errors"]
    else:
        ok = report["sent"] == args.count and not report["errors"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
