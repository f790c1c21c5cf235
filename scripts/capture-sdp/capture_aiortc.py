"""Captures real SDP offers from aiortc for shoal's SDP fixtures.

Usage: python capture_aiortc.py [OUT_DIR]
OUT_DIR defaults to components/tests/fixtures/sdp in the repository.

Each offer comes from a fresh aiortc RTCPeerConnection: createOffer, then
setLocalDescription (which in aiortc gathers all candidates before it returns), then
localDescription.sdp is written byte for byte.

Two things are set up for this machine, which has no outside network:
- iceServers=[] so aiortc does not try its default public STUN server;
- aioice's host-address lookup skips 127.0.0.1 on purpose; it is wrapped here to put
  127.0.0.1 first, so the offers carry a loopback host candidate like the Chromium ones
  (shoal's tests run peers on loopback). The other addresses are what aioice found.
"""

import asyncio
import pathlib
import sys

import aioice.ice
import aiortc
from aiortc import RTCConfiguration, RTCPeerConnection
from aiortc.mediastreams import AudioStreamTrack, VideoStreamTrack

_original_get_host_addresses = aioice.ice.get_host_addresses


def _with_loopback(use_ipv4: bool, use_ipv6: bool) -> list[str]:
    addresses = _original_get_host_addresses(use_ipv4, use_ipv6)
    if use_ipv4 and "127.0.0.1" not in addresses:
        addresses.insert(0, "127.0.0.1")
    return addresses


aioice.ice.get_host_addresses = _with_loopback

VERSION_TAG = "aiortc" + "".join(aiortc.__version__.split(".")[:2])


async def capture(kind: str) -> str:
    pc = RTCPeerConnection(configuration=RTCConfiguration(iceServers=[]))
    try:
        if kind == "av_data":
            pc.addTrack(AudioStreamTrack())
            pc.addTrack(VideoStreamTrack())
        pc.createDataChannel("shoal")
        offer = await pc.createOffer()
        await pc.setLocalDescription(offer)
        return pc.localDescription.sdp
    finally:
        await pc.close()


async def main() -> None:
    default_out = (
        pathlib.Path(__file__).resolve().parents[2] / "components" / "tests" / "fixtures" / "sdp"
    )
    out_dir = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else default_out
    out_dir.mkdir(parents=True, exist_ok=True)
    print(f"aiortc {aiortc.__version__}, aioice {aioice.__version__}")
    for kind in ("av_data", "data"):
        sdp = await capture(kind)
        out = out_dir / f"{VERSION_TAG}_{kind}_offer.sdp"
        # newline="" keeps aiortc's CRLF line endings exactly as produced.
        with open(out, "w", encoding="utf-8", newline="") as f:
            f.write(sdp)
        print(f"wrote {out} ({len(sdp.encode('utf-8'))} bytes)")


if __name__ == "__main__":
    asyncio.run(main())
