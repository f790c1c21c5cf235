//! SCTP wire formats against an implementation we did not write: every packet in
//! `tests/fixtures/sctp/` (made by aiortc, see its README) parses and writes back byte
//! for byte, chunks built from typed values write the same bytes aiortc wrote, CRC32c
//! matches known answers, and malformed packets, chunks and DCEP messages get typed
//! errors.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::path::PathBuf;

use bytes::{BufMut, Bytes, BytesMut};
use shoal_components::sctp::chunk::*;
use shoal_components::sctp::dcep::*;
use shoal_components::sctp::error::{DcepError, SctpError};
use shoal_components::sctp::packet::*;
use shoal_components::sctp::{Ppid, Ssn, StreamId, Tsn};

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sctp")
}

/// Every fixture whose name starts with `prefix`, sorted by name.
fn fixtures(prefix: &str) -> Vec<(String, Bytes)> {
    let mut out: Vec<(String, Bytes)> = std::fs::read_dir(fixture_dir())
        .expect("fixtures/sctp exists")
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            (name.starts_with(prefix) && name.ends_with(".bin"))
                .then(|| (name, Bytes::from(std::fs::read(e.path()).unwrap())))
        })
        .collect();
    out.sort();
    out
}

fn fixture(name: &str) -> Bytes {
    Bytes::from(std::fs::read(fixture_dir().join(name)).unwrap())
}

/// Every SCTP packet fixture (not the DCEP payloads).
fn packet_fixtures() -> Vec<(String, Bytes)> {
    let mut all = fixtures("assoc_");
    all.extend(fixtures("built_"));
    all
}

fn chunks_of(packet: &Packet) -> Vec<Chunk> {
    packet
        .chunks()
        .collect::<Result<_, _>>()
        .expect("chunks parse")
}

/// Parses a packet and writes it back with the same header and chunks.
fn rewrite(raw: &Bytes) -> (Packet, Vec<Chunk>, Bytes) {
    let packet = Packet::parse(raw).expect("packet parses");
    let chunks = chunks_of(&packet);
    let mut buf = BytesMut::new();
    let mut w = PacketWriter::new(
        &mut buf,
        packet.src_port,
        packet.dst_port,
        packet.verification_tag,
    );
    for c in &chunks {
        w.push(c);
    }
    let out = w.finish();
    (packet, chunks, out)
}

/// The one packet fixture's only chunk.
fn only_chunk(name: &str) -> Chunk {
    let packet = Packet::parse(&fixture(name)).unwrap();
    let mut chunks = chunks_of(&packet);
    assert_eq!(chunks.len(), 1, "{name}");
    chunks.remove(0)
}

/// A packet around `body` (raw chunk bytes) with a correct checksum.
fn raw_packet(body: &[u8]) -> Bytes {
    let mut p = BytesMut::new();
    p.put_u16(5000);
    p.put_u16(5000);
    p.put_u32(0x0102_0304);
    p.put_u32(0);
    p.put_slice(body);
    let crc = checksum(&p);
    p[8..12].copy_from_slice(&crc.to_le_bytes());
    p.freeze()
}

/// The first chunk's parse result of a packet around `body`.
fn first_chunk(body: &[u8]) -> Result<Chunk, SctpError> {
    let packet = Packet::parse(&raw_packet(body)).expect("header and checksum are fine");
    packet.chunks().next().expect("one chunk")
}

/// A raw chunk: header (length = 4 + value unless `length` is given), value, padding.
fn raw_chunk(typ: u8, flags: u8, value: &[u8], length: Option<u16>) -> Vec<u8> {
    let len = length.unwrap_or((4 + value.len()) as u16);
    let mut c = vec![typ, flags];
    c.extend_from_slice(&len.to_be_bytes());
    c.extend_from_slice(value);
    while !c.len().is_multiple_of(4) {
        c.push(0);
    }
    c
}

fn tlv(typ: u16, value: &[u8]) -> Vec<u8> {
    let mut p = typ.to_be_bytes().to_vec();
    p.extend_from_slice(&((4 + value.len()) as u16).to_be_bytes());
    p.extend_from_slice(value);
    p
}

fn padded(mut v: Vec<u8>) -> Vec<u8> {
    while !v.len().is_multiple_of(4) {
        v.push(0);
    }
    v
}

/// Writes one chunk on its own.
fn write_chunk<C: WriteChunk + ?Sized>(c: &C) -> Vec<u8> {
    let mut out = BytesMut::new();
    c.write_to(&mut out);
    assert_eq!(out.len(), c.padded_len());
    out.to_vec()
}

/// The chunk area of a fixture packet (everything after the common header).
fn chunk_area(name: &str) -> Vec<u8> {
    fixture(name)[COMMON_HEADER_LEN..].to_vec()
}

#[test]
fn sctp_chunk_roundtrip() {
    let all = packet_fixtures();
    assert!(all.len() >= 40, "fixtures missing: {}", all.len());
    let mut types = BTreeSet::new();
    for (name, raw) in &all {
        let (_, chunks, out) = rewrite(raw);
        assert_eq!(out, *raw, "{name} does not round-trip");
        // Each chunk alone writes the bytes it came from.
        let mut at = COMMON_HEADER_LEN;
        for c in &chunks {
            types.insert(c.chunk_type());
            let bytes = write_chunk(c);
            assert_eq!(bytes[..], raw[at..at + bytes.len()], "{name}: {c:?}");
            at += bytes.len();
        }
        assert_eq!(at, raw.len(), "{name}");
    }
    use chunk_type as t;
    let every: BTreeSet<u8> = [
        t::DATA,
        t::INIT,
        t::INIT_ACK,
        t::SACK,
        t::HEARTBEAT,
        t::HEARTBEAT_ACK,
        t::ABORT,
        t::SHUTDOWN,
        t::SHUTDOWN_ACK,
        t::ERROR,
        t::COOKIE_ECHO,
        t::COOKIE_ACK,
        t::SHUTDOWN_COMPLETE,
        t::RE_CONFIG,
        t::FORWARD_TSN,
    ]
    .into();
    assert_eq!(types, every, "a chunk type has no fixture");

    // The checks below each have their own test too; they run here as well so that
    // `cargo test sctp_chunk_roundtrip` covers the whole brief.
    built_chunks_write_what_aiortc_wrote();
    fields_decode_as_aiortc_meant();
    live_association_is_consistent();
    crc32c_known_answers();
    wrong_checksum_is_rejected();
    malformed_packets_and_chunks_are_rejected();
    packet_writer_bundles_to_the_mtu();
    dcep_roundtrip();
    dcep_rejects_malformed();
}

#[test]
fn built_chunks_write_what_aiortc_wrote() {
    // SACK from slices (RFC 9260 §3.3.4's example).
    let gaps = [
        GapAckBlock { start: 2, end: 3 },
        GapAckBlock { start: 5, end: 5 },
    ];
    let dups = [Tsn(19), Tsn(19)];
    let sack = Sack {
        cumulative_tsn_ack: Tsn(12),
        a_rwnd: 4660,
        gap_ack_blocks: &gaps[..],
        duplicate_tsns: &dups[..],
    };
    assert_eq!(write_chunk(&sack), chunk_area("built_sack_rfc_example.bin"));

    // FORWARD TSN from a slice.
    let skipped = [
        SkippedStream {
            stream_id: StreamId(1),
            ssn: Ssn(5),
        },
        SkippedStream {
            stream_id: StreamId(3),
            ssn: Ssn(0xFFFF),
        },
        SkippedStream {
            stream_id: StreamId(65535),
            ssn: Ssn(0),
        },
    ];
    let fwd = ForwardTsn {
        new_cumulative_tsn: Tsn(1000),
        skipped: &skipped[..],
    };
    assert_eq!(write_chunk(&fwd), chunk_area("built_forward_tsn.bin"));

    // INIT from typed parameters, odd lengths padded between them but not after the last.
    let params = [
        InitParam::ForwardTsnSupported,
        InitParam::SupportedExtensions(Bytes::from_static(&[192, 130, 193])),
        InitParam::Ipv4Address(Ipv4Addr::new(192, 0, 2, 1)),
        InitParam::Unknown {
            typ: 0x8123,
            value: Bytes::from_static(b"xyz"),
        },
    ];
    let init = Init {
        initiate_tag: 0x1234_5678,
        a_rwnd: 1_048_576,
        outbound_streams: 65535,
        inbound_streams: 65535,
        initial_tsn: Tsn(0xFFFF_FFF0),
        params: &params[..],
    };
    assert_eq!(write_chunk(&init), chunk_area("built_init.bin"));

    let unrecognized = tlv(0x8123, &[]);
    let ack_params = [
        InitParam::StateCookie(Bytes::from((0..37u8).collect::<Vec<_>>())),
        InitParam::ForwardTsnSupported,
        InitParam::UnrecognizedParameter(Bytes::from(unrecognized)),
    ];
    let init_ack = InitAck {
        initiate_tag: 0x0BAD_CAFE,
        a_rwnd: 131_072,
        outbound_streams: 1024,
        inbound_streams: 2048,
        initial_tsn: Tsn(7),
        params: &ack_params[..],
    };
    assert_eq!(write_chunk(&init_ack), chunk_area("built_init_ack.bin"));

    // DATA from a borrowed payload, and through PacketWriter::push_data.
    let header = DataHeader {
        tsn: Tsn(0xFFFF_FFFF),
        stream_id: StreamId(3),
        ssn: Ssn(0xFFFE),
        ppid: Ppid::STRING,
        beginning: true,
        ..DataHeader::default()
    };
    let data = Data {
        header,
        payload: &b"xxxxxxxxxxxxx"[..],
    };
    assert_eq!(write_chunk(&data), chunk_area("built_data_first.bin"));
    let mut buf = BytesMut::new();
    let mut w = PacketWriter::new(&mut buf, 5000, 5000, 0x9A3B_2C1D);
    let last = DataHeader {
        immediate: true,
        end: true,
        beginning: false,
        ..header
    };
    w.push_data(&last, b"zz");
    assert_eq!(w.finish(), fixture("built_data_last_immediate.bin"));

    // RE-CONFIG from typed parameters with borrowed stream lists.
    let streams = [StreamId(1), StreamId(3), StreamId(5)];
    let reset = [ReconfigParam::OutgoingSsnReset {
        request_seq: 0x1111_1111,
        response_seq: 0x2222_2222,
        last_tsn: Tsn(0x3333_3333),
        streams: &streams[..],
    }];
    let reconfig = ReConfig { params: &reset[..] };
    assert_eq!(
        write_chunk(&reconfig),
        chunk_area("built_reconfig_outgoing_reset.bin")
    );
    let no_streams: &[StreamId] = &[];
    let pair = [
        ReconfigParam::OutgoingSsnReset {
            request_seq: 10,
            response_seq: 20,
            last_tsn: Tsn(30),
            streams: no_streams,
        },
        ReconfigParam::IncomingSsnReset {
            request_seq: 11,
            streams: &[StreamId(7), StreamId(9)][..],
        },
    ];
    let reconfig = ReConfig { params: &pair[..] };
    assert_eq!(
        write_chunk(&reconfig),
        chunk_area("built_reconfig_outgoing_incoming.bin")
    );
    let responses: [ReconfigParam<&[StreamId]>; 2] = [
        ReconfigParam::Response {
            response_seq: 10,
            result: ReconfigResult::SUCCESS_PERFORMED,
            next_tsns: None,
        },
        ReconfigParam::Response {
            response_seq: 11,
            result: ReconfigResult::SUCCESS_NOTHING_TO_DO,
            next_tsns: Some((Tsn(0xAAAA_AAAA), Tsn(0xBBBB_BBBB))),
        },
    ];
    let reconfig = ReConfig {
        params: &responses[..],
    };
    assert_eq!(
        write_chunk(&reconfig),
        chunk_area("built_reconfig_responses.bin")
    );
    let add: [ReconfigParam<&[StreamId]>; 2] = [
        ReconfigParam::AddOutgoingStreams {
            request_seq: 77,
            new_streams: 16,
        },
        ReconfigParam::AddIncomingStreams {
            request_seq: 78,
            new_streams: 32,
        },
    ];
    let reconfig = ReConfig { params: &add[..] };
    assert_eq!(
        write_chunk(&reconfig),
        chunk_area("built_reconfig_add_streams.bin")
    );
    let tsn_reset: [ReconfigParam<&[StreamId]>; 1] =
        [ReconfigParam::SsnTsnReset { request_seq: 99 }];
    let reconfig = ReConfig {
        params: &tsn_reset[..],
    };
    assert_eq!(
        write_chunk(&reconfig),
        chunk_area("built_reconfig_ssn_tsn_reset.bin")
    );

    // HEARTBEAT / HEARTBEAT ACK from borrowed info.
    let info = &b"sender-specific heartbeat info!"[..];
    assert_eq!(
        write_chunk(&Heartbeat { info }),
        chunk_area("built_heartbeat.bin")
    );
    assert_eq!(
        write_chunk(&HeartbeatAck { info }),
        chunk_area("built_heartbeat_ack.bin")
    );

    // ABORT and ERROR from typed causes.
    let causes = [
        ErrorCause::user_initiated_abort(Bytes::from_static(b"bye now")),
        ErrorCause::protocol_violation(Bytes::from_static(b"protocol violation, sort of")),
    ];
    let abort = Abort {
        t_bit: true,
        causes: &causes[..],
    };
    assert_eq!(write_chunk(&abort), chunk_area("built_abort_t_bit.bin"));
    let none: &[ErrorCause] = &[];
    assert_eq!(
        write_chunk(&Abort {
            t_bit: false,
            causes: none
        }),
        chunk_area("built_abort_bare.bin")
    );
    let mut missing = 2u32.to_be_bytes().to_vec();
    missing.extend_from_slice(&[0, 7, 0xC0, 0x00]);
    let causes = [
        ErrorCause::invalid_stream_identifier(StreamId(42)),
        ErrorCause::new(
            cause_code::STALE_COOKIE,
            Bytes::copy_from_slice(&1_500_000u32.to_be_bytes()),
        ),
        ErrorCause::unrecognized_chunk(Bytes::from_static(&[0x41, 0, 0, 5, 0xEE])),
        ErrorCause::no_user_data(Tsn(1234)),
        ErrorCause::new(
            cause_code::MISSING_MANDATORY_PARAMETER,
            Bytes::from(missing),
        ),
    ];
    let error = OperationError {
        causes: &causes[..],
    };
    assert_eq!(write_chunk(&error), chunk_area("built_error_causes.bin"));

    // The fixed-size chunks.
    let shutdown = Shutdown {
        cumulative_tsn_ack: Tsn(0x7FFF_FFFF),
    };
    assert_eq!(write_chunk(&shutdown), chunk_area("built_shutdown.bin"));
    assert_eq!(
        write_chunk(&ShutdownAck),
        chunk_area("built_shutdown_ack.bin")
    );
    assert_eq!(
        write_chunk(&ShutdownComplete { t_bit: false }),
        chunk_area("built_shutdown_complete.bin")
    );
    assert_eq!(
        write_chunk(&ShutdownComplete { t_bit: true }),
        chunk_area("built_shutdown_complete_t_bit.bin")
    );
    let cookie: Vec<u8> = (1..24).collect();
    assert_eq!(
        write_chunk(&CookieEcho {
            cookie: &cookie[..]
        }),
        chunk_area("built_cookie_echo.bin")
    );
    assert_eq!(write_chunk(&CookieAck), chunk_area("built_cookie_ack.bin"));

    // A bundle: SACK + DATA + FORWARD TSN, written through PacketWriter.
    let mut buf = BytesMut::new();
    let mut w = PacketWriter::new(&mut buf, 5000, 5000, 0x9A3B_2C1D);
    let bundled = DataHeader {
        tsn: Tsn(500),
        stream_id: StreamId(2),
        ssn: Ssn(9),
        ppid: Ppid::BINARY,
        beginning: true,
        end: true,
        ..DataHeader::default()
    };
    w.push(&sack).push_data(&bundled, b"bundled!!").push(&fwd);
    assert_eq!(w.finish(), fixture("built_bundle_sack_data_fwd.bin"));
}

#[test]
fn fields_decode_as_aiortc_meant() {
    let Chunk::Sack(sack) = only_chunk("built_sack_rfc_example.bin") else {
        panic!("not a SACK")
    };
    assert_eq!(sack.cumulative_tsn_ack, Tsn(12));
    assert_eq!(sack.a_rwnd, 4660);
    let blocks: Vec<_> = sack.gap_ack_blocks.iter().collect();
    assert_eq!(
        blocks,
        [
            GapAckBlock { start: 2, end: 3 },
            GapAckBlock { start: 5, end: 5 }
        ]
    );
    // RFC 9260 §3.3.4: TSNs 14-15 and 17 were received.
    let cum = sack.cumulative_tsn_ack;
    assert_eq!(
        (blocks[0].first_tsn(cum), blocks[0].last_tsn(cum)),
        (Tsn(14), Tsn(15))
    );
    assert_eq!(
        (blocks[1].first_tsn(cum), blocks[1].last_tsn(cum)),
        (Tsn(17), Tsn(17))
    );
    assert_eq!(
        sack.duplicate_tsns.iter().collect::<Vec<_>>(),
        [Tsn(19), Tsn(19)]
    );
    let Chunk::Sack(empty) = only_chunk("built_sack_empty.bin") else {
        panic!()
    };
    assert!(empty.gap_ack_blocks.is_empty() && empty.duplicate_tsns.is_empty());

    let Chunk::Init(init) = only_chunk("built_init.bin") else {
        panic!("not an INIT")
    };
    assert_eq!(init.initiate_tag, 0x1234_5678);
    assert_eq!(init.initial_tsn, Tsn(0xFFFF_FFF0));
    assert!(init.forward_tsn_supported());
    assert!(init.supports_chunk(chunk_type::RE_CONFIG));
    assert!(init.supports_chunk(chunk_type::FORWARD_TSN));
    assert!(!init.supports_chunk(chunk_type::DATA));
    assert!(init.validate().is_ok());
    let params: Vec<_> = init.params.iter().collect();
    assert_eq!(params.len(), 4);
    assert_eq!(
        params[2],
        InitParam::Ipv4Address(Ipv4Addr::new(192, 0, 2, 1))
    );
    let InitParam::Unknown { typ, value } = &params[3] else {
        panic!("{:?}", params[3])
    };
    assert_eq!((*typ, &value[..]), (0x8123, &b"xyz"[..]));
    // RFC 9260 §3.2.1: upper bits 10 mean skip and go on.
    assert_eq!(unknown_param_action(*typ), UnknownAction::Skip);
    // RFC 3758 chose 0xC000 so that a receiver without PR-SCTP skips and reports it.
    assert_eq!(
        unknown_param_action(param_type::FORWARD_TSN_SUPPORTED),
        UnknownAction::SkipAndReport
    );

    let Chunk::InitAck(ack) = only_chunk("built_init_ack.bin") else {
        panic!("not an INIT ACK")
    };
    assert_eq!(ack.state_cookie().unwrap(), (0..37u8).collect::<Vec<_>>());
    assert!(
        ack.params
            .iter()
            .any(|p| p == InitParam::UnrecognizedParameter(Bytes::from(tlv(0x8123, &[]))))
    );

    let data_cases = [
        (
            "built_data_unfragmented.bin",
            false,
            true,
            true,
            false,
            &b"hello"[..],
        ),
        ("built_data_unordered.bin", true, true, true, false, b"abcd"),
        (
            "built_data_first.bin",
            false,
            true,
            false,
            false,
            b"xxxxxxxxxxxxx",
        ),
        ("built_data_middle.bin", false, false, false, false, b"y"),
        (
            "built_data_last_immediate.bin",
            false,
            false,
            true,
            true,
            b"zz",
        ),
    ];
    for (name, unordered, beginning, end, immediate, payload) in data_cases {
        let Chunk::Data(d) = only_chunk(name) else {
            panic!("{name}")
        };
        let h = d.header;
        assert_eq!(
            (h.unordered, h.beginning, h.end, h.immediate),
            (unordered, beginning, end, immediate),
            "{name}"
        );
        assert_eq!(
            (h.tsn, h.stream_id, h.ssn, h.ppid),
            (Tsn(u32::MAX), StreamId(3), Ssn(0xFFFE), Ppid::STRING)
        );
        assert_eq!(&d.payload[..], payload, "{name}");
    }

    let Chunk::ForwardTsn(fwd) = only_chunk("built_forward_tsn.bin") else {
        panic!()
    };
    assert_eq!(fwd.new_cumulative_tsn, Tsn(1000));
    let s: Vec<_> = fwd
        .skipped
        .iter()
        .map(|s| (s.stream_id.0, s.ssn.0))
        .collect();
    assert_eq!(s, [(1, 5), (3, 0xFFFF), (65535, 0)]);
    let Chunk::ForwardTsn(bare) = only_chunk("built_forward_tsn_bare.bin") else {
        panic!()
    };
    assert!(bare.skipped.is_empty());

    let Chunk::ReConfig(rc) = only_chunk("built_reconfig_outgoing_incoming.bin") else {
        panic!()
    };
    let p: Vec<_> = rc.params.iter().collect();
    let ReconfigParam::OutgoingSsnReset {
        request_seq: 10,
        response_seq: 20,
        last_tsn: Tsn(30),
        streams,
    } = &p[0]
    else {
        panic!("{:?}", p[0])
    };
    assert!(streams.is_empty(), "no stream numbers: all streams");
    let ReconfigParam::IncomingSsnReset {
        request_seq: 11,
        streams,
    } = &p[1]
    else {
        panic!("{:?}", p[1])
    };
    assert_eq!(
        streams.iter().collect::<Vec<_>>(),
        [StreamId(7), StreamId(9)]
    );
    let Chunk::ReConfig(rc) = only_chunk("built_reconfig_responses.bin") else {
        panic!()
    };
    let p: Vec<_> = rc.params.iter().collect();
    assert_eq!(
        p[1],
        ReconfigParam::Response {
            response_seq: 11,
            result: ReconfigResult::SUCCESS_NOTHING_TO_DO,
            next_tsns: Some((Tsn(0xAAAA_AAAA), Tsn(0xBBBB_BBBB))),
        }
    );

    let Chunk::Error(err) = only_chunk("built_error_causes.bin") else {
        panic!()
    };
    let c: Vec<_> = err.causes.iter().collect();
    assert_eq!(c.len(), 5);
    assert_eq!(c[0].invalid_stream(), Some(StreamId(42)));
    assert_eq!(c[1].stale_cookie_staleness_us(), Some(1_500_000));
    assert_eq!(
        c[2].unrecognized_chunk_bytes().map(|b| &b[..]),
        Some(&[0x41, 0, 0, 5, 0xEE][..])
    );
    assert_eq!(c[3].no_user_data_tsn(), Some(Tsn(1234)));
    assert_eq!(
        c[4].missing_mandatory_params().unwrap().collect::<Vec<_>>(),
        [7, 0xC000]
    );
    assert_eq!(c[0].stale_cookie_staleness_us(), None);

    let Chunk::Abort(abort) = only_chunk("built_abort_t_bit.bin") else {
        panic!()
    };
    assert!(abort.t_bit);
    let c: Vec<_> = abort.causes.iter().collect();
    assert_eq!(
        c[0].user_abort_reason().map(|b| &b[..]),
        Some(&b"bye now"[..])
    );
    assert!(c[1].protocol_violation_info().is_some());

    let Chunk::Heartbeat(hb) = only_chunk("built_heartbeat.bin") else {
        panic!()
    };
    assert_eq!(&hb.info[..], b"sender-specific heartbeat info!");
    let Chunk::ShutdownComplete(sc) = only_chunk("built_shutdown_complete_t_bit.bin") else {
        panic!()
    };
    assert!(sc.t_bit);
    let Chunk::Shutdown(s) = only_chunk("built_shutdown.bin") else {
        panic!()
    };
    assert_eq!(s.cumulative_tsn_ack, Tsn(0x7FFF_FFFF));
}

#[test]
fn live_association_is_consistent() {
    let assoc = fixtures("assoc_");
    assert!(assoc.len() >= 10);
    let packets: Vec<(String, Packet, Vec<Chunk>)> = assoc
        .iter()
        .map(|(n, raw)| {
            let p = Packet::parse(raw).unwrap();
            let c = chunks_of(&p);
            (n.clone(), p, c)
        })
        .collect();
    // RFC 9260 §3.1: a packet with INIT has a zero Verification Tag; the INIT ACK is
    // sent with the INIT's Initiate Tag, and its State Cookie comes back in COOKIE ECHO.
    let init = packets
        .iter()
        .find(|(n, ..)| n.contains("client_init"))
        .unwrap();
    let Chunk::Init(client_init) = &init.2[0] else {
        panic!()
    };
    assert_eq!(init.1.verification_tag, 0);
    assert!(client_init.validate().is_ok());
    let ack = packets
        .iter()
        .find(|(n, ..)| n.contains("initack"))
        .unwrap();
    let Chunk::InitAck(init_ack) = &ack.2[0] else {
        panic!()
    };
    assert_eq!(ack.1.verification_tag, client_init.initiate_tag);
    let echo = packets
        .iter()
        .find(|(n, ..)| n.contains("cookieecho"))
        .unwrap();
    let Chunk::CookieEcho(cookie) = &echo.2[0] else {
        panic!()
    };
    assert_eq!(Some(cookie.cookie.clone()), init_ack.state_cookie());
    assert_eq!(echo.1.verification_tag, init_ack.initiate_tag);

    // The first client DATA carries the DCEP OPEN (PPID 50), zero-copy.
    let dcep: Vec<&Data> = packets
        .iter()
        .flat_map(|(_, _, c)| c)
        .filter_map(|c| match c {
            Chunk::Data(d) if d.header.ppid == Ppid::DCEP => Some(d),
            _ => None,
        })
        .collect();
    assert_eq!(dcep.len(), 2);
    assert_eq!(dcep[0].payload, fixture("dcep_assoc_open.bin"));
    assert_eq!(dcep[1].payload, fixture("dcep_assoc_ack.bin"));
    let DcepMessage::Open(open) = DcepMessage::parse(&dcep[0].payload).unwrap() else {
        panic!()
    };
    assert_eq!(open.label(), "chat");
    assert_eq!(
        open.channel_type,
        ChannelType {
            ordered: false,
            reliability: Reliability::MaxRetransmits(3)
        }
    );
    // Closing the channel resets its stream (RFC 8831 §6.7, RFC 6525 §4.1).
    let resets = packets
        .iter()
        .flat_map(|(_, _, c)| c)
        .filter_map(|c| match c {
            Chunk::ReConfig(r) => Some(r.params.iter().collect::<Vec<_>>()),
            _ => None,
        })
        .flatten()
        .filter(|p| matches!(p, ReconfigParam::OutgoingSsnReset { streams, .. } if streams.iter().eq([StreamId(0)])))
        .count();
    assert!(resets >= 1);
}

/// RFC 9260 Appendix A's CRC, bit by bit: reflected polynomial 0x1EDC6F41 (0x82F63B78
/// reflected), register initialized to all ones, result complemented.
fn crc32c_bitwise(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

#[test]
fn crc32c_known_answers() {
    // iSCSI (RFC 3720 Appendix B.4) known answers for CRC32c.
    let inc: Vec<u8> = (0..32).collect();
    let dec: Vec<u8> = (0..32).rev().collect();
    let pdu: [u8; 48] = [
        0x01, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00,
        0x00, 0x18, 0x28, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00,
    ];
    let vectors: [(&[u8], u32); 6] = [
        (&[0; 32], 0x8A91_36AA),
        (&[0xFF; 32], 0x62A8_AB43),
        (&inc, 0x46DD_794E),
        (&dec, 0x113F_DB5C),
        (&pdu, 0xD996_3A56),
        (b"123456789", 0xE306_9283),
    ];
    for (data, want) in vectors {
        assert_eq!(crc32c(data), want);
        assert_eq!(crc32c_bitwise(data), want);
    }
    // The checksum of a packet is the CRC32c with the checksum field taken as zero: for
    // 32 zero bytes that is the first vector, whatever the field holds.
    let mut zeros = [0u8; 32];
    zeros[8..12].copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
    assert_eq!(checksum(&zeros), 0x8A91_36AA);
    // The hardware-accelerated crate agrees with the RFC's bitwise definition at every
    // length and alignment that matters.
    let noise: Vec<u8> = (0..700u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    for start in 0..8 {
        for len in 0..300 {
            let d = &noise[start..start + len];
            assert_eq!(crc32c(d), crc32c_bitwise(d));
        }
    }
    // On the wire (Appendix A), least significant byte first: aiortc's packets say so.
    for (name, raw) in packet_fixtures() {
        let mut zeroed = raw.to_vec();
        zeroed[8..12].fill(0);
        assert_eq!(raw[8..12], crc32c_bitwise(&zeroed).to_le_bytes(), "{name}");
    }
}

#[test]
fn wrong_checksum_is_rejected() {
    for (name, raw) in packet_fixtures() {
        for bit in [0usize, 9 * 8 + 3, raw.len() * 8 - 1] {
            let mut bad = raw.to_vec();
            bad[bit / 8] ^= 1 << (bit % 8);
            let err = Packet::parse(&Bytes::from(bad)).unwrap_err();
            assert!(
                matches!(err, SctpError::BadChecksum { .. }),
                "{name}: {err}"
            );
        }
    }
    // A zero checksum is not a wildcard.
    let mut zero = fixture("built_cookie_ack.bin").to_vec();
    zero[8..12].fill(0);
    assert!(matches!(
        Packet::parse(&Bytes::from(zero)),
        Err(SctpError::BadChecksum { .. })
    ));
}

/// RFC 9653: the Zero Checksum Acceptable parameter's bytes, and which zero checksums
/// a receiver that announced it accepts.
#[test]
fn zero_checksum_parameter_and_acceptance() {
    // §4: Type 0x8001, Length 8, the EDMID; read back from raw bytes, not our writer.
    let raw_param = [0x80, 0x01, 0x00, 0x08, 0x00, 0x00, 0x00, 0x01];
    let mut init = raw_chunk(chunk_type::INIT, 0, &[0; 16], None);
    init.truncate(4);
    init.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0x10, 0, 0, 1, 0, 1, 0, 0, 0, 1]);
    init.extend_from_slice(&raw_param);
    let len = init.len() as u16;
    init[2..4].copy_from_slice(&len.to_be_bytes());
    let Ok(Chunk::Init(parsed)) = first_chunk(&init) else {
        panic!("INIT with the parameter parses")
    };
    assert_eq!(parsed.zero_checksum_method(), Some(EDMID_DTLS));
    let rewritten = Init {
        initiate_tag: parsed.initiate_tag,
        a_rwnd: parsed.a_rwnd,
        outbound_streams: parsed.outbound_streams,
        inbound_streams: parsed.inbound_streams,
        initial_tsn: parsed.initial_tsn,
        params: &[InitParam::ZeroChecksumAcceptable(EDMID_DTLS)][..],
    };
    assert_eq!(write_chunk(&rewritten), init);
    // A wrong length is not understood: skipped (type bits 10), the chunk still parses.
    let mut odd = init.clone();
    odd.truncate(odd.len() - 8);
    odd.extend_from_slice(&[0x80, 0x01, 0x00, 0x06, 0, 1, 0, 0]);
    let Ok(Chunk::Init(parsed)) = first_chunk(&odd) else {
        panic!("INIT with a malformed parameter parses")
    };
    assert_eq!(parsed.zero_checksum_method(), None);

    let zeroed = |raw: &Bytes| {
        let mut z = raw.to_vec();
        z[8..12].fill(0);
        Bytes::from(z)
    };
    // §5.3: an endpoint that announced a method accepts zero checksums...
    let cookie_ack = fixture("built_cookie_ack.bin");
    assert!(Packet::parse_with(&zeroed(&cookie_ack), true).is_ok());
    assert!(matches!(
        Packet::parse_with(&zeroed(&cookie_ack), false),
        Err(SctpError::BadChecksum { .. })
    ));
    // ...and correct ones, but no other wrong value.
    assert!(Packet::parse_with(&cookie_ack, true).is_ok());
    let mut wrong = cookie_ack.to_vec();
    wrong[8] ^= 1;
    assert!(matches!(
        Packet::parse_with(&Bytes::from(wrong), true),
        Err(SctpError::BadChecksum { .. })
    ));
    // §5.2: INIT and COOKIE ECHO packets must carry a correct CRC32c.
    let init_packet = raw_packet(&init);
    assert!(Packet::parse_with(&init_packet, true).is_ok());
    assert!(Packet::parse_with(&zeroed(&init_packet), true).is_err());
    let echo = raw_packet(&raw_chunk(chunk_type::COOKIE_ECHO, 0, &[7; 12], None));
    assert!(Packet::parse_with(&echo, true).is_ok());
    assert!(Packet::parse_with(&zeroed(&echo), true).is_err());
}

#[test]
fn malformed_packets_and_chunks_are_rejected() {
    use chunk_type as t;
    // Header.
    assert_eq!(
        Packet::parse(&Bytes::from_static(&[0; 15])),
        Err(SctpError::PacketTooShort { len: 15 })
    );
    let mut p = raw_packet(&raw_chunk(t::COOKIE_ACK, 0, &[], None)).to_vec();
    p[0..2].fill(0);
    let crc = checksum(&p);
    p[8..12].copy_from_slice(&crc.to_le_bytes());
    assert_eq!(Packet::parse(&Bytes::from(p)), Err(SctpError::ZeroPort));

    // Chunk framing (RFC 9260 §3.2).
    let short = first_chunk(&[t::COOKIE_ACK, 0, 0, 3]);
    assert_eq!(short, Err(SctpError::ChunkTooShort { typ: 11, length: 3 }));
    let past = first_chunk(&raw_chunk(t::COOKIE_ECHO, 0, &[1, 2, 3, 4], Some(12)));
    assert_eq!(
        past,
        Err(SctpError::ChunkOverrun {
            typ: 10,
            length: 12
        })
    );
    let mut trailing = raw_chunk(t::COOKIE_ACK, 0, &[], None);
    trailing.extend_from_slice(&[0, 0]);
    let packet = Packet::parse(&raw_packet(&trailing)).unwrap();
    let all: Vec<_> = packet.chunks().collect();
    assert_eq!(all.len(), 2);
    assert_eq!(all[1], Err(SctpError::TrailingBytes { len: 2 }));
    // After an error the walk stops.
    let mut stop = raw_chunk(t::COOKIE_ACK, 0, &[], Some(2));
    stop.extend(raw_chunk(t::COOKIE_ACK, 0, &[], None));
    let packet = Packet::parse(&raw_packet(&stop)).unwrap();
    assert_eq!(packet.chunks().count(), 1);
    // Too many chunks in one packet.
    let many: Vec<u8> = (0..MAX_CHUNKS_PER_PACKET + 1)
        .flat_map(|_| raw_chunk(t::COOKIE_ACK, 0, &[], None))
        .collect();
    let packet = Packet::parse(&raw_packet(&many)).unwrap();
    let last = packet.chunks().last().unwrap();
    assert_eq!(last, Err(SctpError::TooManyChunks));

    // Fixed-size chunks with another size.
    let bad = first_chunk(&raw_chunk(t::SHUTDOWN, 0, &[0; 8], None));
    assert_eq!(bad, Err(SctpError::BadChunkLength { typ: 7, length: 12 }));
    for typ in [t::COOKIE_ACK, t::SHUTDOWN_ACK, t::SHUTDOWN_COMPLETE] {
        let bad = first_chunk(&raw_chunk(typ, 0, &[0; 4], None));
        assert_eq!(bad, Err(SctpError::BadChunkLength { typ, length: 8 }));
    }

    // DATA: fixed part cut short; no user data (RFC 9260 §3.3.1, §3.3.10.9).
    let short = first_chunk(&raw_chunk(t::DATA, 3, &[0; 11], None));
    assert_eq!(short, Err(SctpError::ChunkTooShort { typ: 0, length: 15 }));
    let mut empty = 77u32.to_be_bytes().to_vec();
    empty.extend_from_slice(&[0; 8]);
    let empty = first_chunk(&raw_chunk(t::DATA, 3, &empty, None));
    assert_eq!(empty, Err(SctpError::NoUserData { tsn: Tsn(77) }));

    // INIT parameters (RFC 9260 §3.2.1).
    let init = |params: &[u8]| {
        let mut v = vec![0, 0, 0, 1, 0, 0, 0x10, 0, 0, 1, 0, 1, 0, 0, 0, 0];
        v.extend_from_slice(params);
        first_chunk(&raw_chunk(t::INIT, 0, &v, None))
    };
    assert!(init(&padded(tlv(0x8123, b"abc"))).is_ok());
    assert_eq!(
        init(&[0xC0, 0x00, 0x00, 0x02]),
        Err(SctpError::ParameterTooShort { typ: 0xC000 })
    );
    assert_eq!(
        init(&[0x00, 0x07, 0x00, 0x20, 1, 2, 3, 4]),
        Err(SctpError::ParameterOverrun { typ: 7 })
    );
    assert_eq!(
        init(&[0x00, 0x07]),
        Err(SctpError::ParameterTooShort { typ: 7 })
    );
    assert_eq!(
        init(&tlv(param_type::FORWARD_TSN_SUPPORTED, &[0; 4])),
        Err(SctpError::BadParameter { typ: 0xC000 })
    );
    assert_eq!(
        init(&padded(tlv(param_type::IPV4_ADDRESS, &[1; 6]))),
        Err(SctpError::BadParameter { typ: 5 })
    );
    assert_eq!(
        init(&padded(tlv(
            param_type::SUPPORTED_ADDRESS_TYPES,
            &[0, 5, 0]
        ))),
        Err(SctpError::BadParameter { typ: 12 })
    );
    let too_many: Vec<u8> = (0..=MAX_PARAMS_PER_CHUNK)
        .flat_map(|_| tlv(param_type::FORWARD_TSN_SUPPORTED, &[]))
        .collect();
    assert_eq!(
        init(&too_many),
        Err(SctpError::TooManyParameters { chunk: 1 })
    );
    let Ok(Chunk::Init(zero_tag)) = first_chunk(&raw_chunk(t::INIT, 0, &[0; 16], None)) else {
        panic!()
    };
    assert_eq!(
        zero_tag.validate(),
        Err(SctpError::InvalidMandatoryParameter)
    );

    // SACK (RFC 9260 §3.3.4): counts that do not fit, bad blocks.
    let sack = |gaps: u16, dups: u16, rest: &[u8]| {
        let mut v = vec![0, 0, 0, 12, 0, 0, 0x12, 0x34];
        v.extend_from_slice(&gaps.to_be_bytes());
        v.extend_from_slice(&dups.to_be_bytes());
        v.extend_from_slice(rest);
        first_chunk(&raw_chunk(t::SACK, 0, &v, None))
    };
    assert!(sack(1, 1, &[0, 2, 0, 3, 0, 0, 0, 19]).is_ok());
    assert_eq!(
        sack(3, 0, &[0, 2, 0, 3, 0, 5, 0, 5]),
        Err(SctpError::SackCountMismatch {
            gap_ack_blocks: 3,
            duplicate_tsns: 0
        })
    );
    assert_eq!(
        sack(0xFFFF, 0xFFFF, &[]),
        Err(SctpError::SackCountMismatch {
            gap_ack_blocks: 0xFFFF,
            duplicate_tsns: 0xFFFF
        })
    );
    assert_eq!(
        sack(1, 0, &[0, 2, 0, 3, 0, 0, 0, 19]),
        Err(SctpError::SackCountMismatch {
            gap_ack_blocks: 1,
            duplicate_tsns: 0
        })
    );
    assert_eq!(
        sack(1, 0, &[0, 0, 0, 3]),
        Err(SctpError::BadGapAckBlock { start: 0, end: 3 })
    );
    assert_eq!(
        sack(1, 0, &[0, 4, 0, 3]),
        Err(SctpError::BadGapAckBlock { start: 4, end: 3 })
    );
    assert_eq!(
        first_chunk(&raw_chunk(t::SACK, 0, &[0; 8], None)),
        Err(SctpError::ChunkTooShort { typ: 3, length: 12 })
    );

    // FORWARD TSN (RFC 3758 §3.2): the stream list is whole 4-byte pairs.
    let odd = first_chunk(&raw_chunk(t::FORWARD_TSN, 0, &[0, 0, 0, 9, 0, 1], None));
    assert_eq!(odd, Err(SctpError::ForwardTsnBadLength { length: 10 }));
    let short = first_chunk(&raw_chunk(t::FORWARD_TSN, 0, &[0, 0], None));
    assert_eq!(
        short,
        Err(SctpError::ChunkTooShort {
            typ: 192,
            length: 6
        })
    );

    // HEARTBEAT: exactly one Heartbeat Info.
    let hb = |v: &[u8]| first_chunk(&raw_chunk(t::HEARTBEAT, 0, v, None));
    assert_eq!(hb(&[]), Err(SctpError::MissingParameter { chunk: 4 }));
    assert_eq!(
        hb(&tlv(2, &[1, 2, 3, 4])),
        Err(SctpError::BadParameter { typ: 2 })
    );
    let mut two = tlv(1, &[1, 2, 3, 4]);
    two.extend(tlv(1, &[5, 6, 7, 8]));
    assert_eq!(hb(&two), Err(SctpError::TooManyParameters { chunk: 4 }));
    assert_eq!(
        hb(&[0, 1, 0, 9, 1, 2]),
        Err(SctpError::ParameterOverrun { typ: 1 })
    );

    // ERROR needs a cause; ABORT may have none.
    assert_eq!(
        first_chunk(&raw_chunk(t::ERROR, 0, &[], None)),
        Err(SctpError::MissingParameter { chunk: 9 })
    );
    assert!(first_chunk(&raw_chunk(t::ABORT, 1, &[], None)).is_ok());
    assert_eq!(
        first_chunk(&raw_chunk(t::ABORT, 0, &[0, 12, 0, 1], None)),
        Err(SctpError::ParameterTooShort { typ: 12 })
    );

    // RE-CONFIG (RFC 6525 §3.1, §4): one or two parameters, each the right size.
    let rc = |v: &[u8]| first_chunk(&raw_chunk(t::RE_CONFIG, 0, v, None));
    assert_eq!(rc(&[]), Err(SctpError::MissingParameter { chunk: 130 }));
    let three: Vec<u8> = (0..3).flat_map(|_| tlv(15, &[0, 0, 0, 1])).collect();
    assert_eq!(rc(&three), Err(SctpError::TooManyParameters { chunk: 130 }));
    assert_eq!(
        rc(&padded(tlv(16, &[0; 10]))),
        Err(SctpError::BadParameter { typ: 16 })
    );
    assert_eq!(
        rc(&padded(tlv(13, &[0; 13]))),
        Err(SctpError::BadParameter { typ: 13 })
    );
    assert_eq!(
        rc(&tlv(13, &[0; 8])),
        Err(SctpError::BadParameter { typ: 13 })
    );
    assert_eq!(
        rc(&tlv(17, &[0; 4])),
        Err(SctpError::BadParameter { typ: 17 })
    );
    let Ok(Chunk::ReConfig(unknown)) = rc(&tlv(0x4321, &[9; 4])) else {
        panic!()
    };
    assert_eq!(
        unknown.params.iter().next(),
        Some(ReconfigParam::Unknown {
            typ: 0x4321,
            value: Bytes::from_static(&[9; 4])
        })
    );

    // Unknown chunks are kept; the upper two bits say what to do (RFC 9260 §3.2).
    let Ok(Chunk::Unknown { typ, flags, value }) = first_chunk(&raw_chunk(0xC1, 7, b"abcde", None))
    else {
        panic!()
    };
    assert_eq!((typ, flags, &value[..]), (0xC1, 7, &b"abcde"[..]));
    assert_eq!(unknown_chunk_action(63), UnknownAction::Stop);
    assert_eq!(unknown_chunk_action(127), UnknownAction::StopAndReport);
    assert_eq!(unknown_chunk_action(191), UnknownAction::Skip);
    assert_eq!(unknown_chunk_action(255), UnknownAction::SkipAndReport);
    // An unknown chunk written back is what arrived.
    let bytes = raw_chunk(0xC1, 7, b"abcde", None);
    assert_eq!(write_chunk(&first_chunk(&bytes).unwrap()), bytes);
}

#[test]
fn packet_writer_bundles_to_the_mtu() {
    let mut buf = BytesMut::with_capacity(4096);
    let payload = [0xAB; 300];
    let mut sent = 0u32;
    let mut w = PacketWriter::new(&mut buf, 5000, 5000, 42);
    assert_eq!(w.remaining(DEFAULT_MTU), DEFAULT_MTU - COMMON_HEADER_LEN);
    let header = |tsn: u32| DataHeader {
        tsn: Tsn(tsn),
        beginning: true,
        end: true,
        ppid: Ppid::BINARY,
        ..DataHeader::default()
    };
    while w.remaining_data_payload(DEFAULT_MTU) >= payload.len() {
        w.push_data(&header(sent), &payload);
        sent += 1;
    }
    // A last, smaller DATA takes what is left exactly.
    let rest = w.remaining_data_payload(DEFAULT_MTU);
    w.push_data(&header(sent), &payload[..rest]);
    assert!(
        w.len() <= DEFAULT_MTU && DEFAULT_MTU - w.len() < 4,
        "{}",
        w.len()
    );
    let packet = w.finish();
    assert!(buf.is_empty(), "the packet was split off");
    let parsed = Packet::parse(&packet).unwrap();
    let chunks = chunks_of(&parsed);
    assert_eq!(chunks.len(), sent as usize + 1);
    let Chunk::Data(last) = chunks.last().unwrap() else {
        panic!()
    };
    assert_eq!(last.payload.len(), rest);
    // The DATA payload is a slice of the packet, not a copy.
    let at = last.payload.as_ptr() as usize - packet.as_ptr() as usize;
    assert!(at < packet.len());

    // A packet written after other bytes in the buffer comes out alone.
    let mut buf = BytesMut::from(&b"previous"[..]);
    let mut w = PacketWriter::new(&mut buf, 1, 2, 3);
    w.push(&CookieAck);
    let packet = w.finish();
    assert_eq!(&buf[..], b"previous");
    let parsed = Packet::parse(&packet).unwrap();
    assert_eq!(
        (parsed.src_port, parsed.dst_port, parsed.verification_tag),
        (1, 2, 3)
    );
    assert_eq!(chunks_of(&parsed), [Chunk::CookieAck(CookieAck)]);
}

#[test]
fn dcep_roundtrip() {
    let all = fixtures("dcep_");
    assert!(all.len() >= 8);
    for (name, raw) in &all {
        let msg = DcepMessage::parse(raw).unwrap_or_else(|e| panic!("{name}: {e}"));
        let mut out = BytesMut::new();
        msg.write_to(&mut out);
        assert_eq!(out, raw[..], "{name}");
        assert_eq!(msg.encoded_len(), raw.len());
    }
    let open = |name: &str| match DcepMessage::parse(&fixture(name)).unwrap() {
        DcepMessage::Open(o) => (
            o.channel_type,
            o.priority,
            o.label().to_owned(),
            o.protocol().to_owned(),
        ),
        DcepMessage::Ack => panic!("{name}"),
    };
    let ct = |ordered, reliability| ChannelType {
        ordered,
        reliability,
    };
    use Reliability::*;
    let s = |x: &str| x.to_owned();
    assert_eq!(
        open("dcep_open_reliable_ordered.bin"),
        (ct(true, Reliable), 0, s("chat"), s(""))
    );
    assert_eq!(
        open("dcep_open_reliable_unordered.bin"),
        (ct(false, Reliable), 0, s("x"), s("json"))
    );
    assert_eq!(
        open("dcep_open_rexmit_ordered.bin"),
        (ct(true, MaxRetransmits(0)), 0, s("rexmit"), s(""))
    );
    assert_eq!(
        open("dcep_open_rexmit_unordered.bin"),
        (ct(false, MaxRetransmits(5)), 0, s(""), s(""))
    );
    assert_eq!(
        open("dcep_open_timed_ordered.bin"),
        (ct(true, MaxLifetimeMs(1500)), 0, s("t"), s("p"))
    );
    assert_eq!(
        open("dcep_open_timed_unordered.bin"),
        (ct(false, MaxLifetimeMs(u32::MAX)), 0, s("timed"), s(""))
    );
    assert_eq!(
        DcepMessage::parse(&fixture("dcep_assoc_ack.bin")),
        Ok(DcepMessage::Ack)
    );

    // A non-ASCII label and protocol, laid out by hand per RFC 8832 §5.1's figure:
    // type, channel type, priority; reliability parameter; label length, protocol
    // length; label; protocol. The lengths count bytes.
    let (label, protocol) = ("données ✓", "protocolø");
    let mut raw = vec![0x03, 0x81, 0x01, 0x00, 0, 0, 0, 7];
    raw.extend_from_slice(&(label.len() as u16).to_be_bytes());
    raw.extend_from_slice(&(protocol.len() as u16).to_be_bytes());
    raw.extend_from_slice(label.as_bytes());
    raw.extend_from_slice(protocol.as_bytes());
    let DcepMessage::Open(o) = DcepMessage::parse(&raw).unwrap() else {
        panic!()
    };
    assert_eq!(
        (o.label(), o.protocol(), o.priority),
        (label, protocol, 256)
    );
    assert_eq!(o.channel_type, ct(false, MaxRetransmits(7)));
    let built = DataChannelOpen::new(ct(false, MaxRetransmits(7)), 256, label, protocol).unwrap();
    let mut out = BytesMut::new();
    built.write_to(&mut out);
    assert_eq!(out, raw[..]);
    assert_eq!(built, o);
}

#[test]
fn dcep_rejects_malformed() {
    let open = |ct: u8, label: &[u8], protocol: &[u8]| {
        let mut raw = vec![0x03, ct, 0, 0, 0, 0, 0, 0];
        raw.extend_from_slice(&(label.len() as u16).to_be_bytes());
        raw.extend_from_slice(&(protocol.len() as u16).to_be_bytes());
        raw.extend_from_slice(label);
        raw.extend_from_slice(protocol);
        raw
    };
    assert_eq!(DcepMessage::parse(&[]), Err(DcepError::Empty));
    assert_eq!(
        DcepMessage::parse(&[0x01]),
        Err(DcepError::UnknownMessageType(1))
    );
    assert_eq!(
        DcepMessage::parse(&[0x02, 0]),
        Err(DcepError::TrailingBytes { len: 1 })
    );
    assert_eq!(
        DcepMessage::parse(&open(0, b"ok", b"")[..11]),
        Err(DcepError::Truncated)
    );
    let full = open(0, b"label", b"proto");
    assert_eq!(
        DcepMessage::parse(&full[..full.len() - 1]),
        Err(DcepError::Truncated)
    );
    let mut longer = full.clone();
    longer.push(0);
    assert_eq!(
        DcepMessage::parse(&longer),
        Err(DcepError::TrailingBytes { len: 1 })
    );
    for bad in [0x03, 0x7F, 0x83, 0xFF, 0x40] {
        assert_eq!(
            DcepMessage::parse(&open(bad, b"", b"")),
            Err(DcepError::UnknownChannelType(bad))
        );
    }
    assert_eq!(
        DcepMessage::parse(&open(0, &[0xC3, 0x28], b"")),
        Err(DcepError::LabelNotUtf8)
    );
    assert_eq!(
        DcepMessage::parse(&open(0, b"fine", &[0xFF])),
        Err(DcepError::ProtocolNotUtf8)
    );
    let huge = "x".repeat(65536);
    assert_eq!(
        DataChannelOpen::new(ChannelType::default(), 0, &huge, ""),
        Err(DcepError::TooLong)
    );
    assert!(DataChannelOpen::new(ChannelType::default(), 0, &huge[1..], "").is_ok());
}
