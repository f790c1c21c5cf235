"""An aiortc publisher (WHIP) or subscriber (WHEP) of audio and video, for shoal's
interop tests.

publish WHIP_URL: offers a sendonly video track (generated 320x240 frames at 30 fps:
a bar that moves, and the frame's number written in its top rows as 16 black or white
blocks; `--video-codec` limits the offer to VP8 or H264) and a sendonly audio track
(a 440 Hz tone). It prints one JSON line per step: `connected` once the connection
is up (answer applied, ICE and DTLS connected), `receiver_reports` once shoal's
receiver reports have covered both tracks, and `done` when its stdin is closed (or
DURATION seconds passed) and it leaves with a WHIP DELETE; `failed` instead if it
could not connect within the timeout.

subscribe WHEP_URL: offers recvonly video and audio, applies the answer, and decodes
what arrives with `track.recv()`. Once it has FRAMES video frames, an audio frame and
shoal's sender reports for both tracks it leaves with a WHEP DELETE, prints one JSON
line with what it saw (frames per kind, the frame sizes, the frame numbers read back
from the pictures, the loudest audio sample) and exits 0; after the timeout it
prints the same line with the reason and exits 1.

With `--tone-amplitude A` the tone peaks at A (default 8000); with `--swap-at T
--swap-amplitude B` it peaks at B from Unix time T on, and the publisher prints
{"event": "amplitude", "amplitude": B, "at": T'} when it switches.

Usage: python aiortc_video.py publish WHIP_URL [--video-codec VP8|H264]
                                               [--timeout S] [--duration S]
                                               [--tone-amplitude A]
                                               [--swap-at T --swap-amplitude B]
       python aiortc_video.py subscribe WHEP_URL [--frames N] [--timeout S]
  subscribe also: [--progress N] prints {"event": "frames", "video_frames": n}
        every N video frames, as they come.
  both: [--token TOKEN], sent as `Authorization: Bearer TOKEN` with every request
        (RFC 9725 §4.5).

The machine has no outside network: iceServers is empty (no public STUN server), and
aioice's host-address lookup, which skips 127.0.0.1 on purpose, is wrapped to offer
127.0.0.1 first so the client reaches shoal on loopback.
"""

import argparse
import asyncio
import fractions
import json
import math
import struct
import sys
import time
import urllib.parse
import urllib.request

import loopback  # noqa: F401  (127.0.0.1 first, before any gathering)
from aiortc import (
    AudioStreamTrack,
    RTCConfiguration,
    RTCPeerConnection,
    RTCRtpSender,
    RTCSessionDescription,
    VideoStreamTrack,
)
from aiortc.mediastreams import MediaStreamError
from av import AudioFrame, VideoFrame


WIDTH, HEIGHT = 320, 240
# The frame number is written as 16 blocks across the top rows, most significant
# first: wide and flat enough to come through VP8 or H264 at any quality.
INDEX_BITS = 16
INDEX_ROWS = 32
BLOCK_WIDTH = WIDTH // INDEX_BITS
BLACK, WHITE = 16, 235
BAR_WIDTH = 24
TONE_HZ = 440
TONE_AMPLITUDE = 8000
AUDIO_RATE = 48000


def emit(report: dict) -> None:
    print(json.dumps(report), flush=True)


# The bearer token of every WHIP/WHEP request (--token), if any.
TOKEN: str | None = None
# A subscriber prints its video frame count every PROGRESS frames (--progress), if set.
PROGRESS: int | None = None


def http(method: str, url: str, body: bytes | None = None, ctype: str | None = None):
    req = urllib.request.Request(url, data=body, method=method)
    if ctype:
        req.add_header("Content-Type", ctype)
    if TOKEN:
        req.add_header("Authorization", f"Bearer {TOKEN}")
    with urllib.request.urlopen(req, timeout=10) as resp:
        return resp.status, resp.headers, resp.read()


async def post_offer(pc: RTCPeerConnection, url: str) -> str:
    """Sends our offer, applies the answer; returns the session's URL."""
    await pc.setLocalDescription(await pc.createOffer())
    status, headers, answer = await asyncio.to_thread(
        http, "POST", url, pc.localDescription.sdp.encode(), "application/sdp"
    )
    if status != 201:
        raise RuntimeError(f"POST answered {status}")
    await pc.setRemoteDescription(RTCSessionDescription(answer.decode(), "answer"))
    return urllib.parse.urljoin(url, headers.get("Location", ""))


def negotiated(pc: RTCPeerConnection) -> dict:
    """The codec each transceiver ended up with, by kind (aiortc keeps the
    negotiated list, preferred first, in a private field)."""
    out = {}
    for t in pc.getTransceivers():
        codecs = [c.mimeType for c in t._codecs if c.name.lower() != "rtx"]
        out[t.kind] = codecs[0] if codecs else None
    return out


class PatternTrack(VideoStreamTrack):
    """320x240 frames at 30 fps: a moving bar, and the frame number in the top rows."""

    def __init__(self) -> None:
        super().__init__()
        self.sent = 0

    async def recv(self) -> VideoFrame:
        pts, time_base = await self.next_timestamp()
        n = self.sent
        self.sent += 1
        frame = VideoFrame(WIDTH, HEIGHT, "yuv420p")
        y = frame.planes[0]
        index_row = bytearray(y.line_size)
        for bit in range(INDEX_BITS):
            on = (n >> (INDEX_BITS - 1 - bit)) & 1
            start = bit * BLOCK_WIDTH
            index_row[start : start + BLOCK_WIDTH] = [WHITE if on else BLACK] * BLOCK_WIDTH
        body_row = bytearray([80]) * y.line_size
        bar = (n * 4) % (WIDTH - BAR_WIDTH)
        body_row[bar : bar + BAR_WIDTH] = [200] * BAR_WIDTH
        y.update(bytes(index_row) * INDEX_ROWS + bytes(body_row) * (HEIGHT - INDEX_ROWS))
        for plane in frame.planes[1:]:
            plane.update(bytes([128]) * plane.buffer_size)
        frame.pts = pts
        frame.time_base = time_base
        return frame


class ToneTrack(AudioStreamTrack):
    """A 440 Hz tone, 20 ms frames of 48 kHz mono."""

    def __init__(self, amplitude: int = TONE_AMPLITUDE) -> None:
        super().__init__()
        self.samples = 0
        self.start: float | None = None
        self.amplitude = amplitude

    async def recv(self) -> AudioFrame:
        if self.readyState != "live":
            raise MediaStreamError
        count = AUDIO_RATE // 50
        if self.start is None:
            self.start = time.time()
        else:
            wait = self.start + (self.samples + count) / AUDIO_RATE - time.time()
            await asyncio.sleep(wait)
        step = 2 * math.pi * TONE_HZ / AUDIO_RATE
        pcm = struct.pack(
            f"<{count}h",
            *(int(self.amplitude * math.sin(step * (self.samples + i))) for i in range(count)),
        )
        frame = AudioFrame(format="s16", layout="mono", samples=count)
        frame.planes[0].update(pcm)
        frame.pts = self.samples
        frame.sample_rate = AUDIO_RATE
        frame.time_base = fractions.Fraction(1, AUDIO_RATE)
        self.samples += count
        return frame


async def wait_connected(pc: RTCPeerConnection, timeout: float) -> None:
    """Returns once the connection is up (ICE and DTLS); raises if it fails."""
    up = asyncio.Event()
    failed = asyncio.Event()

    @pc.on("connectionstatechange")
    def _changed():
        if pc.connectionState == "connected":
            up.set()
        elif pc.connectionState in ("failed", "closed"):
            failed.set()

    if pc.connectionState == "connected":
        return
    waits = [asyncio.ensure_future(up.wait()), asyncio.ensure_future(failed.wait())]
    await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    for w in waits:
        w.cancel()
    if not up.is_set():
        raise RuntimeError(f"connection {pc.connectionState} instead of connected")


async def stdin_closed() -> None:
    """Returns when our stdin reaches its end."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while await reader.read(4096):
        pass


async def report_kinds(pc: RTCPeerConnection, stat_type: str) -> list[str]:
    """The kinds of media with a `stat_type` entry in the connection's stats: what
    shoal's RTCP has told us about (`remote-inbound-rtp` from its receiver reports,
    `remote-outbound-rtp` from its sender reports)."""
    stats = await pc.getStats()
    return sorted({s.kind for s in stats.values() if s.type == stat_type})


async def swap_amplitude(audio: ToneTrack, at: float, amplitude: int) -> None:
    """At Unix time `at`, the tone's amplitude becomes `amplitude`; reported."""
    await asyncio.sleep(max(0.0, at - time.time()))
    audio.amplitude = amplitude
    emit({"event": "amplitude", "amplitude": amplitude, "at": time.time()})


async def publish(
    url: str,
    codec: str | None,
    timeout: float,
    duration: float,
    amplitude: int = TONE_AMPLITUDE,
    swap: tuple[float, int] | None = None,
) -> int:
    pc = RTCPeerConnection(configuration=RTCConfiguration(iceServers=[]))
    video, audio = PatternTrack(), ToneTrack(amplitude)
    transceiver = pc.addTransceiver(video, direction="sendonly")
    if codec:
        # Only that codec (every profile aiortc has of it) and its RTX.
        wanted = (f"video/{codec}".lower(), "video/rtx")
        transceiver.setCodecPreferences(
            [
                c
                for c in RTCRtpSender.getCapabilities("video").codecs
                if c.mimeType.lower() in wanted
            ]
        )
    pc.addTransceiver(audio, direction="sendonly")
    location = None

    async def receiver_reports() -> None:
        while (kinds := await report_kinds(pc, "remote-inbound-rtp")) != ["audio", "video"]:
            await asyncio.sleep(0.1)
        emit({"event": "receiver_reports", "kinds": kinds})

    try:
        location = await post_offer(pc, url)
        await wait_connected(pc, timeout)
        emit(
            {
                "event": "connected",
                "width": WIDTH,
                "height": HEIGHT,
                "codecs": negotiated(pc),
                # What shoal's answer asks of the publisher's RTCP and RTP.
                "feedback": [
                    line
                    for line in pc.remoteDescription.sdp.splitlines()
                    if line.startswith(("a=rtcp-fb:", "a=extmap:"))
                ],
            }
        )
        reports = asyncio.ensure_future(receiver_reports())
        if swap is not None:
            asyncio.ensure_future(swap_amplitude(audio, *swap))
        try:
            await asyncio.wait_for(stdin_closed(), duration)
        except asyncio.TimeoutError:
            pass
        reports.cancel()
        # The bitrate aiortc's video encoder was last told to keep to: its default
        # until a REMB names the stream (aiortc has no public accessor for it).
        encoder = getattr(transceiver.sender, "_RTCRtpSender__encoder", None)
        emit(
            {
                "event": "done",
                "video_frames_sent": video.sent,
                "connection": pc.connectionState,
                "video_target_bitrate": getattr(encoder, "target_bitrate", None),
            }
        )
        return 0
    except Exception as e:  # the report says it; the test decides
        emit({"event": "failed", "error": f"{type(e).__name__}: {e}"})
        return 1
    finally:
        if location:
            try:
                await asyncio.to_thread(http, "DELETE", location)
            except Exception:
                pass
        await pc.close()


def read_index(frame: VideoFrame) -> int:
    """The frame number written in the picture's top rows."""
    y = frame.planes[0]
    data = memoryview(y)
    row = INDEX_ROWS // 2 * y.line_size
    n = 0
    for bit in range(INDEX_BITS):
        n = (n << 1) | (data[row + bit * BLOCK_WIDTH + BLOCK_WIDTH // 2] > 128)
    return n


def peak(frame: AudioFrame) -> int:
    """The loudest sample of a decoded frame (s16, interleaved)."""
    raw = bytes(frame.planes[0])[: frame.samples * len(frame.layout.channels) * 2]
    samples = struct.unpack(f"<{len(raw) // 2}h", raw)
    return max((abs(s) for s in samples), default=0)


async def subscribe(url: str, frames: int, timeout: float) -> int:
    pc = RTCPeerConnection(configuration=RTCConfiguration(iceServers=[]))
    pc.addTransceiver("video", direction="recvonly")
    pc.addTransceiver("audio", direction="recvonly")
    report = {
        "event": "result",
        "video_frames": 0,
        "audio_frames": 0,
        "sizes": [],
        "first_index": None,
        "last_index": None,
        "index_regressions": 0,
        "audio_peak": 0,
        "sender_reports": [],
        "tracks": [],
        "codecs": None,
        "connection": None,
        "error": None,
    }
    enough = asyncio.Event()

    def check() -> None:
        if (
            report["video_frames"] >= frames
            and report["audio_frames"] >= 1
            and report["sender_reports"] == ["audio", "video"]
        ):
            enough.set()

    async def sender_reports() -> None:
        while report["sender_reports"] != ["audio", "video"]:
            await asyncio.sleep(0.1)
            report["sender_reports"] = await report_kinds(pc, "remote-outbound-rtp")
        check()

    async def consume(track) -> None:
        while True:
            try:
                frame = await track.recv()
            except MediaStreamError:
                return
            if track.kind == "video":
                size = f"{frame.width}x{frame.height}"
                if size not in report["sizes"]:
                    report["sizes"].append(size)
                n = read_index(frame)
                if report["last_index"] is not None and n <= report["last_index"]:
                    report["index_regressions"] += 1
                if report["first_index"] is None:
                    report["first_index"] = n
                report["last_index"] = n
                report["video_frames"] += 1
                if PROGRESS and report["video_frames"] % PROGRESS == 0:
                    emit({"event": "frames", "video_frames": report["video_frames"]})
            else:
                report["audio_peak"] = max(report["audio_peak"], peak(frame))
                report["audio_frames"] += 1
            check()

    consumers = []

    @pc.on("track")
    def _on_track(track):
        report["tracks"].append(track.kind)
        consumers.append(asyncio.ensure_future(consume(track)))

    location = None
    try:
        location = await post_offer(pc, url)
        report["codecs"] = negotiated(pc)
        consumers.append(asyncio.ensure_future(sender_reports()))
        await asyncio.wait_for(enough.wait(), timeout)
    except asyncio.TimeoutError:
        report["error"] = f"timed out after {timeout} s"
    except Exception as e:
        report["error"] = f"{type(e).__name__}: {e}"
    finally:
        report["connection"] = pc.connectionState
        if location:
            try:
                await asyncio.to_thread(http, "DELETE", location)
            except Exception as e:
                report["error"] = report["error"] or f"WHEP DELETE failed: {e}"
        for c in consumers:
            c.cancel()
        await pc.close()
    emit(report)
    return 0 if report["error"] is None else 1


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("role", choices=["publish", "subscribe"])
    ap.add_argument("url")
    ap.add_argument("--frames", type=int, default=60)
    ap.add_argument("--video-codec", choices=["VP8", "H264"], default=None)
    ap.add_argument("--timeout", type=float, default=20.0)
    ap.add_argument("--duration", type=float, default=120.0)
    ap.add_argument("--token", default=None)
    ap.add_argument("--progress", type=int, default=None)
    ap.add_argument("--tone-amplitude", type=int, default=TONE_AMPLITUDE)
    ap.add_argument("--swap-at", type=float, default=None, help="Unix time")
    ap.add_argument("--swap-amplitude", type=int, default=None)
    args = ap.parse_args()
    global TOKEN, PROGRESS
    TOKEN = args.token
    PROGRESS = args.progress
    if args.role == "publish":
        swap = None
        if args.swap_at is not None and args.swap_amplitude is not None:
            swap = (args.swap_at, args.swap_amplitude)
        return asyncio.run(
            publish(
                args.url,
                args.video_codec,
                args.timeout,
                args.duration,
                args.tone_amplitude,
                swap,
            )
        )
    return asyncio.run(subscribe(args.url, args.frames, args.timeout))


if __name__ == "__main__":
    sys.exit(main())
