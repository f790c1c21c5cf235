"""One aiortc participant that joins a shoal room over the `/signal` WebSocket, for
shoal's interop tests of a node that ends sessions itself (a drain).

Joins ROOM as IDENTITY (SignalService messages as JSON: `join`, `offer`, then the
`answer`), opens a data channel `chat`, prints `{"ready": true}` once it is open,
then waits for the node to end the session: the `leave` message, the channel
closing (SCTP SHUTDOWN) and the DTLS transport closing (close_notify). It prints one
JSON line with what it saw and exits 0 when all three came.

Usage: python aiortc_signal_client.py WS_URL ROOM IDENTITY [--timeout S]

aiohttp (which LiveKit's token SDK brings into the test venv) speaks the WebSocket.
The machine has no outside network: iceServers is empty, and `loopback` makes
aioice offer 127.0.0.1.
"""

import argparse
import asyncio
import json
import time

import aiohttp

import loopback  # noqa: F401  (127.0.0.1 first, before any gathering)
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription


async def run(url: str, room: str, me: str, timeout: float) -> dict:
    pc = RTCPeerConnection(configuration=RTCConfiguration(iceServers=[]))
    chat = pc.createDataChannel("chat")
    report = {
        "identity": me,
        "leave": None,
        "channel_closed": False,
        "sctp_state": None,
        "dtls_state": None,
        "dtls_states": [],
        "errors": [],
    }
    opened = asyncio.Event()
    closed = asyncio.Event()
    chat.on("open", opened.set)
    chat.on("close", closed.set)
    loop = asyncio.get_running_loop()
    answer = loop.create_future()
    leave = loop.create_future()

    await pc.setLocalDescription(await pc.createOffer())
    async with aiohttp.ClientSession() as session:
        async with session.ws_connect(url) as ws:

            async def read():
                async for msg in ws:
                    if msg.type != aiohttp.WSMsgType.TEXT:
                        continue
                    m = json.loads(msg.data)
                    if "answer" in m and not answer.done():
                        answer.set_result(m["answer"]["sdp"])
                    elif "leave" in m and not leave.done():
                        leave.set_result(m["leave"])
                    elif "error" in m:
                        report["errors"].append(m["error"])

            reader = asyncio.create_task(read())
            await ws.send_json({"join": {"room": room, "identity": me}})
            await ws.send_json({"offer": {"sdp": pc.localDescription.sdp}})
            step = "answer"
            try:
                sdp = await asyncio.wait_for(answer, timeout)
                await pc.setRemoteDescription(RTCSessionDescription(sdp, "answer"))
                step = "open"
                await asyncio.wait_for(opened.wait(), timeout)
                dtls = pc.sctp.transport
                dtls.on(
                    "statechange", lambda: report["dtls_states"].append(dtls.state)
                )
                print(json.dumps({"ready": True}), flush=True)
                step = "leave"
                report["leave"] = await asyncio.wait_for(leave, timeout)
                step = "channel close"
                await asyncio.wait_for(closed.wait(), timeout)
                report["channel_closed"] = True
                step = "dtls close"
                deadline = time.monotonic() + timeout
                while dtls.state not in ("closed", "failed"):
                    if time.monotonic() > deadline:
                        raise asyncio.TimeoutError
                    await asyncio.sleep(0.02)
            except asyncio.TimeoutError:
                report["errors"].append(f"timed out waiting for {step}")
            finally:
                report["sctp_state"] = pc.sctp.state if pc.sctp else None
                report["dtls_state"] = pc.sctp.transport.state if pc.sctp else None
                reader.cancel()
    await pc.close()
    return report


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("room")
    ap.add_argument("identity")
    ap.add_argument("--timeout", type=float, default=30.0)
    args = ap.parse_args()
    report = asyncio.run(run(args.url, args.room, args.identity, args.timeout))
    print(json.dumps(report), flush=True)
    ok = (
        report["leave"] is not None
        and report["channel_closed"]
        and report["dtls_state"] == "closed"
        and not report["errors"]
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
