"""Makes shoal's SCTP and DCEP byte fixtures with aiortc, an implementation we did not write.

Usage: python make_fixtures.py [OUT_DIR]
OUT_DIR defaults to components/tests/fixtures/sctp in the repository.

Two sources, both aiortc's own code (aiortc.rtcsctptransport):

1. A live association. Two RTCSctpTransport objects talk over an in-memory stand-in for
   the DTLS transport (it only carries bytes between them); the client opens an
   unordered data channel with maxRetransmits=3, sends a message, the server answers,
   the client closes the channel (a stream reset) and then stops (ABORT). Every packet
   either side sends is saved as `assoc_NN_<from>_<chunk>.bin`: INIT, INIT ACK with a
   real State Cookie, COOKIE ECHO, COOKIE ACK, DATA carrying DCEP OPEN and ACK, SACK,
   RE-CONFIG requests and responses, ABORT.
2. Chunks built with aiortc's chunk classes (InitChunk, SackChunk, ForwardTsnChunk,
   ReconfigChunk, HeartbeatChunk, ...) and framed by aiortc's serialize_packet, which
   computes the CRC32c; one packet bundles several chunks, framed the same way by hand
   with the google_crc32c module aiortc itself imports. These cover chunk types and
   fields the live run does not produce (gap ack blocks, duplicate TSNs, FORWARD TSN
   streams, HEARTBEAT, SHUTDOWN*, ERROR causes, SSN/TSN reset, ...).

DCEP messages (`dcep_*.bin`, the user-message payload only): the OPEN and ACK that
crossed the live association (`dcep_assoc_*.bin`), and the OPEN aiortc's
RTCSctpTransport._data_channel_open builds for each channel type (`dcep_open_*.bin`).

Every packet is parsed back with aiortc's parse_packet before it is written. Tags, TSNs
and cookies are random per run, so a rerun writes different bytes; the Rust test checks
structure and round-trips whatever is there.
"""

import asyncio
import pathlib
import struct
import sys
from collections import deque

from google_crc32c import value as crc32c

import aiortc
from aiortc.rtcdatachannel import RTCDataChannel, RTCDataChannelParameters
from aiortc.rtcsctptransport import (
    AbortChunk,
    CookieAckChunk,
    CookieEchoChunk,
    DataChunk,
    ErrorChunk,
    ForwardTsnChunk,
    HeartbeatAckChunk,
    HeartbeatChunk,
    InitAckChunk,
    InitChunk,
    ReconfigChunk,
    RTCSctpTransport,
    SackChunk,
    ShutdownAckChunk,
    ShutdownChunk,
    ShutdownCompleteChunk,
    StreamAddOutgoingParam,
    StreamResetOutgoingParam,
    StreamResetResponseParam,
    parse_packet,
    serialize_packet,
)

PORT = 5000


def check(packet: bytes) -> bytes:
    """aiortc must accept its own packet (checksum, chunk lengths)."""
    parse_packet(packet)
    return packet


def bundle(src: int, dst: int, tag: int, chunks) -> bytes:
    """serialize_packet for several chunks: the same header and CRC32c, by hand."""
    header = struct.pack("!HHL", src, dst, tag)
    body = b"".join(bytes(c) for c in chunks)
    checksum = crc32c(header + b"\x00\x00\x00\x00" + body)
    return check(header + struct.pack("<L", checksum) + body)


def single(tag: int, chunk) -> bytes:
    return check(serialize_packet(PORT, PORT, tag, chunk))


class FakeDtls:
    """Just enough of RTCDtlsTransport for RTCSctpTransport: a role and a byte pipe."""

    def __init__(self, role: str, log: list, name: str) -> None:
        self._role = role
        self.state = "connected"
        self.peer = None
        self.receiver = None
        self.log = log
        self.name = name

    def _register_data_receiver(self, receiver) -> None:
        self.receiver = receiver

    def _unregister_data_receiver(self, receiver) -> None:
        self.receiver = None

    async def _send_data(self, data: bytes) -> None:
        self.log.append((self.name, bytes(data)))
        peer = self.peer
        if peer is not None and peer.receiver is not None:
            asyncio.ensure_future(peer.receiver._handle_data(data))


def chunk_name(packet: bytes) -> str:
    _, _, _, chunks = parse_packet(packet)
    return "+".join(type(c).__name__.removesuffix("Chunk").lower() for c in chunks)


async def live_association() -> list:
    log: list = []
    client_dtls = FakeDtls("client", log, "client")
    server_dtls = FakeDtls("server", log, "server")
    client_dtls.peer, server_dtls.peer = server_dtls, client_dtls
    client = RTCSctpTransport(client_dtls, port=PORT)
    server = RTCSctpTransport(server_dtls, port=PORT)
    received = []

    @server.on("datachannel")
    def on_channel(channel):
        @channel.on("message")
        def on_message(message):
            received.append(message)
            channel.send(b"pong from aiortc")

    await server.start(client.getCapabilities(), PORT)
    await client.start(server.getCapabilities(), PORT)
    for _ in range(100):
        if client._association_state == RTCSctpTransport.State.ESTABLISHED:
            break
        await asyncio.sleep(0.01)
    channel = RTCDataChannel(
        client,
        RTCDataChannelParameters(label="chat", ordered=False, maxRetransmits=3),
    )
    for _ in range(100):
        if channel.readyState == "open":
            break
        await asyncio.sleep(0.01)
    channel.send("hello shoal")
    for _ in range(100):
        if received:
            break
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.3)
    channel.close()
    await asyncio.sleep(0.5)
    await client.stop()
    await asyncio.sleep(0.1)
    await server.stop()
    return log


def dcep_open(ordered: bool, max_retransmits=None, max_lifetime=None, label="", protocol=""):
    """The DATA_CHANNEL_OPEN aiortc builds for a channel with these parameters."""
    transport = RTCSctpTransport.__new__(RTCSctpTransport)
    transport._data_channels = {}
    transport._data_channel_queue = deque()

    async def no_flush():
        return None

    transport._data_channel_flush = no_flush
    channel = RTCDataChannel.__new__(RTCDataChannel)
    channel._RTCDataChannel__id = None
    channel._RTCDataChannel__parameters = RTCDataChannelParameters(
        label=label,
        ordered=ordered,
        maxRetransmits=max_retransmits,
        maxPacketLifeTime=max_lifetime,
        protocol=protocol,
        id=None,
    )
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        RTCSctpTransport._data_channel_open(transport, channel)
        loop.run_until_complete(asyncio.sleep(0))
    finally:
        loop.close()
    (_, ppid, data) = transport._data_channel_queue[0]
    assert ppid == 50
    return data


def built_chunks() -> dict:
    out = {}
    tag = 0x9A3B2C1D

    init = InitChunk()
    init.initiate_tag = 0x12345678
    init.advertised_rwnd = 1048576
    init.outbound_streams = 65535
    init.inbound_streams = 65535
    init.initial_tsn = 0xFFFFFFF0
    # Forward-TSN-Supported, Supported Extensions (odd length: padded), an IPv4 address,
    # and an unknown parameter of the "skip" kind with an odd length.
    init.params = [
        (0xC000, b""),
        (0x8008, bytes([192, 130, 193])),
        (5, bytes([192, 0, 2, 1])),
        (0x8123, b"xyz"),
    ]
    out["built_init"] = single(0, init)

    init_ack = InitAckChunk()
    init_ack.initiate_tag = 0x0BADCAFE
    init_ack.advertised_rwnd = 131072
    init_ack.outbound_streams = 1024
    init_ack.inbound_streams = 2048
    init_ack.initial_tsn = 7
    init_ack.params = [(7, bytes(range(37))), (0xC000, b""), (8, struct.pack("!HH", 0x8123, 4))]
    out["built_init_ack"] = single(0x12345678, init_ack)

    for flags, name, payload in [
        (0x03, "data_unfragmented", b"hello"),
        (0x07, "data_unordered", b"abcd"),
        (0x02, "data_first", b"x" * 13),
        (0x00, "data_middle", b"y" * 1),
        (0x09, "data_last_immediate", b"z" * 2),
    ]:
        data = DataChunk(flags=flags)
        data.tsn = 0xFFFFFFFF
        data.stream_id = 3
        data.stream_seq = 0xFFFE
        data.protocol = 51
        data.user_data = payload
        out["built_" + name] = single(tag, data)

    # RFC 9260 §3.3.4's example (cum TSN 12, a_rwnd 4660, blocks 2-3 and 5-5) with TSN 19
    # received three times.
    sack = SackChunk()
    sack.cumulative_tsn = 12
    sack.advertised_rwnd = 4660
    sack.gaps = [(2, 3), (5, 5)]
    sack.duplicates = [19, 19]
    out["built_sack_rfc_example"] = single(tag, sack)
    empty_sack = SackChunk()
    empty_sack.cumulative_tsn = 0xFFFFFFFF
    empty_sack.advertised_rwnd = 0
    out["built_sack_empty"] = single(tag, empty_sack)

    fwd = ForwardTsnChunk()
    fwd.cumulative_tsn = 1000
    fwd.streams = [(1, 5), (3, 0xFFFF), (65535, 0)]
    out["built_forward_tsn"] = single(tag, fwd)
    fwd_bare = ForwardTsnChunk()
    fwd_bare.cumulative_tsn = 0
    out["built_forward_tsn_bare"] = single(tag, fwd_bare)

    reset = ReconfigChunk()
    reset.params.append((13, bytes(StreamResetOutgoingParam(
        request_sequence=0x11111111, response_sequence=0x22222222, last_tsn=0x33333333,
        streams=[1, 3, 5]))))
    out["built_reconfig_outgoing_reset"] = single(tag, reset)
    both = ReconfigChunk()
    both.params.append((13, bytes(StreamResetOutgoingParam(
        request_sequence=10, response_sequence=20, last_tsn=30, streams=[]))))
    both.params.append((14, struct.pack("!LHH", 11, 7, 9)))
    out["built_reconfig_outgoing_incoming"] = single(tag, both)
    resp = ReconfigChunk()
    resp.params.append((16, bytes(StreamResetResponseParam(response_sequence=10, result=1))))
    resp.params.append((16, struct.pack("!LLLL", 11, 0, 0xAAAAAAAA, 0xBBBBBBBB)))
    out["built_reconfig_responses"] = single(tag, resp)
    add = ReconfigChunk()
    add.params.append((17, bytes(StreamAddOutgoingParam(request_sequence=77, new_streams=16))))
    add.params.append((18, struct.pack("!LHH", 78, 32, 0)))
    out["built_reconfig_add_streams"] = single(tag, add)
    tsn_reset = ReconfigChunk()
    tsn_reset.params.append((15, struct.pack("!L", 99)))
    out["built_reconfig_ssn_tsn_reset"] = single(tag, tsn_reset)

    hb = HeartbeatChunk()
    hb.params.append((1, b"sender-specific heartbeat info!"))
    out["built_heartbeat"] = single(tag, hb)
    hb_ack = HeartbeatAckChunk()
    hb_ack.params.append((1, b"sender-specific heartbeat info!"))
    out["built_heartbeat_ack"] = single(tag, hb_ack)

    abort = AbortChunk(flags=1)
    abort.params.append((12, b"bye now"))
    abort.params.append((13, b"protocol violation, sort of"))
    out["built_abort_t_bit"] = single(tag, abort)
    out["built_abort_bare"] = single(tag, AbortChunk())

    error = ErrorChunk()
    error.params.append((1, struct.pack("!HH", 42, 0)))
    error.params.append((3, struct.pack("!L", 1500000)))
    error.params.append((6, bytes([0x41, 0, 0, 5, 0xEE])))
    error.params.append((9, struct.pack("!L", 1234)))
    error.params.append((2, struct.pack("!LHH", 2, 7, 0xC000)))
    out["built_error_causes"] = single(tag, error)

    shutdown = ShutdownChunk()
    shutdown.cumulative_tsn = 0x7FFFFFFF
    out["built_shutdown"] = single(tag, shutdown)
    out["built_shutdown_ack"] = single(tag, ShutdownAckChunk())
    out["built_shutdown_complete"] = single(tag, ShutdownCompleteChunk())
    out["built_shutdown_complete_t_bit"] = single(tag, ShutdownCompleteChunk(flags=1))
    out["built_cookie_echo"] = single(tag, CookieEchoChunk(body=bytes(range(1, 24))))
    out["built_cookie_ack"] = single(tag, CookieAckChunk())

    # A bundle a sender would write: SACK, then DATA (padded), then FORWARD TSN.
    data = DataChunk(flags=0x03)
    data.tsn, data.stream_id, data.stream_seq, data.protocol = 500, 2, 9, 53
    data.user_data = b"bundled!!"
    out["built_bundle_sack_data_fwd"] = bundle(PORT, PORT, tag, [sack, data, fwd])
    return out


def main() -> None:
    root = pathlib.Path(__file__).resolve().parents[2]
    out_dir = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else root / "components/tests/fixtures/sctp"
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("*.bin"):
        old.unlink()

    log = asyncio.run(live_association())
    for i, (sender, packet) in enumerate(log):
        check(packet)
        (out_dir / f"assoc_{i:02d}_{sender}_{chunk_name(packet)}.bin").write_bytes(packet)

    for name, packet in built_chunks().items():
        (out_dir / f"{name}.bin").write_bytes(packet)

    dcep = {
        "dcep_open_reliable_ordered": dcep_open(True, label="chat"),
        "dcep_open_reliable_unordered": dcep_open(False, label="x", protocol="json"),
        "dcep_open_rexmit_ordered": dcep_open(True, max_retransmits=0, label="rexmit"),
        "dcep_open_rexmit_unordered": dcep_open(False, max_retransmits=5, label=""),
        "dcep_open_timed_ordered": dcep_open(True, max_lifetime=1500, label="t", protocol="p"),
        "dcep_open_timed_unordered": dcep_open(False, max_lifetime=0xFFFFFFFF, label="timed"),
    }
    for _, packet in log:
        for chunk in parse_packet(packet)[3]:
            if isinstance(chunk, DataChunk) and chunk.protocol == 50:
                kind = {2: "ack", 3: "open"}[chunk.user_data[0]]
                dcep[f"dcep_assoc_{kind}"] = chunk.user_data
    for name, msg in dcep.items():
        (out_dir / f"{name}.bin").write_bytes(msg)
    print(f"aiortc {aiortc.__version__}: wrote {len(log)} association packets, "
          f"{len(built_chunks())} built packets and {len(dcep)} DCEP messages to {out_dir}")


if __name__ == "__main__":
    main()
