//! RTCP wire formats against bytes we did not write: packets from aiortc's and pion's
//! test suites (several captured from browsers) parse into the values they hold and
//! write back byte for byte, padding included; packets built from typed values parse
//! back to the same values; compounds of several packets walk in order; malformed
//! packets get typed errors; and seeded random bytes, mutations and truncations never
//! panic, while whatever parses writes back identically.

mod mutate;

use bytes::{Bytes, BytesMut};
use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};
use shoal_components::rtcp::twcc::{RecvDelta, StatusChunk, Symbol};
use shoal_components::rtcp::*;

fn hex(s: &str) -> Bytes {
    let s: String = s.split_whitespace().collect();
    assert!(s.len().is_multiple_of(2), "odd hex");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect::<Vec<u8>>()
        .into()
}

// From aiortc's test suite (tests/rtcp_*.bin).
const AIORTC_SR: &str = "81c8000c6d2453eade46475b151a005c66a8dd3e0000010d000034f58ef891ed\
                         00000000000000f60000007f0000000000000000";
const AIORTC_RR: &str = "81c9000730b68407479437af0000000000000276000007720000000000000000";
const AIORTC_SDES: &str = "81ca000c6d2453ea01267b36336634353965612d343166652d343437342d39643\
                           3332d3937303763396565373964317d00000000";
const AIORTC_BYE: &str = "81cb0001ae528b43";
const AIORTC_BYE_NO_SOURCES: &str = "80cb0000";
const AIORTC_BYE_PADDING: &str = "a0cb000104040404";
const AIORTC_PLI: &str = "81ce00025450626523013fb9";
const AIORTC_NACK: &str = "81cd000c8b4477bbf71deee4000c00000020004000360000004c0000006e1000\
                           008e000000b7000800df1000010f000001240000";

// From pion/rtcp's test suite (its SR is malformed: see malformed_compounds_...). The compound is "an RTCP packet from a packet dump"
// (packet_test.go); the REMB is "real data sent by Chrome while watching a 6Mb/s
// stream" (receiver_estimated_maximum_bitrate_test.go).
const PION_COMPOUND: &str = "81c90007902f9e2ebc5e9a4000000000000046e10000011109f3643200024a79\
    81ca000c902f9e2e01267b39633030656239322d316166622d396434392d613437642d3931663634656565\
    363966357d00000000 81cb0001902f9e2e 81ce0002902f9e2e902f9e2e 85cd0002902f9e2e902f9e2e\
    80cc00034baae1ab4e414d4541424344";
const PION_REMB_CHROME: &str = "8fce0005000000010000000052454d42011a20df4874ed16";
const PION_SR: &str = "81c80007902f9e2eda8bd1fcdddda05aaaf4edd50000000100000002bc5e9a40\
                      00000000000046e10000011109f3643200024a79";
// extended_report_test.go, encodedPacket(): an XR with seven report block types.
const PION_XR: &str = "80cf003301020304010c0004123456890005000c400600068765000002060004123456890005000c41233fff\
    ffff000003030007987654323c483cd911111111222222223333333344444444555555550400000201020304\
    0506070805000009888888881234567899999999090909091234567899999999112233441234567899999999\
    06e80009fedcba98123456781111111122222222333333334444444455555555666666660102030407000008\
    89abcdef05060708111122223333444411223344556677889900112233445566";
const PION_FIR: &str = "84ce0004000000004bc4fcb41234567842000000";
const PION_FIR_TWO: &str = "84ce0006000000004bc4fcb4123456784200000098765432 57000000";
const PION_NACK: &str = "81cd0003902f9e2e902f9e2eaaaa5555";
const PION_APP_PADDED: &str = "a0cc00044baae1ab4e414d454142434445030303";
// transport_layer_cc_test.go, "example1", "example4", "example6", "example7".
const PION_TWCC_1: &str = "afcd0005 fa17fa17 43032fa0 00990001 3de80217 20019401";
const PION_TWCC_4: &str = "afcd0007 fa17fa17 193dd8bb 00040007 10636e01 20074c24 24100c0c 10000003";
const PION_TWCC_6: &str = "afcd00079b74f61f9371dcbc853c000963f916b3d55200309baa6aaa7b010901";
const PION_TWCC_7: &str = "8fcd00049acb04420000000000000000 00000000";

/// Parses one datagram whole.
fn parse_all(raw: &Bytes) -> Vec<RtcpPacket> {
    Compound::new(raw.clone())
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("{raw:02x?} should parse: {e}"))
}

/// Writes packets back to back.
fn write_all(packets: &[RtcpPacket]) -> Bytes {
    let mut out = BytesMut::new();
    for p in packets {
        let at = out.len();
        p.write_to(&mut out);
        assert_eq!(out.len() - at, p.encoded_len(), "encoded_len lies: {p:?}");
    }
    out.freeze()
}

/// Parses, writes back, and checks the bytes are the same; returns the packets.
fn roundtrip(raw_hex: &str) -> Vec<RtcpPacket> {
    let raw = hex(raw_hex);
    let packets = parse_all(&raw);
    assert_eq!(write_all(&packets), raw, "{packets:#?}");
    packets
}

fn only(raw_hex: &str) -> RtcpBody {
    let mut packets = roundtrip(raw_hex);
    assert_eq!(packets.len(), 1);
    packets.remove(0).body
}

fn first_error(raw: &Bytes) -> RtcpError {
    match Compound::new(raw.clone()).find_map(Result::err) {
        Some(e) => e,
        None => panic!("{raw:02x?} should not parse"),
    }
}

#[test]
fn sender_report_from_aiortc() {
    let RtcpBody::SenderReport(sr) = only(AIORTC_SR) else {
        panic!("not an SR")
    };
    assert_eq!(sr.ssrc, 0x6d24_53ea);
    assert_eq!(sr.ntp_time, 0xde46_475b_151a_005c);
    assert_eq!(sr.rtp_time, 0x66a8_dd3e);
    assert_eq!((sr.packet_count, sr.octet_count), (0x10d, 0x34f5));
    let blocks: Vec<ReportBlock> = sr.reports.iter().collect();
    assert_eq!(
        blocks,
        [ReportBlock {
            ssrc: 0x8ef8_91ed,
            fraction_lost: 0,
            cumulative_lost: 0,
            extended_highest_seq: 0xf6,
            jitter: 0x7f,
            last_sr: 0,
            delay_since_last_sr: 0,
        }]
    );
    assert!(sr.extension.is_empty());
}

#[test]
fn receiver_report_from_aiortc() {
    let RtcpBody::ReceiverReport(rr) = only(AIORTC_RR) else {
        panic!("not an RR")
    };
    assert_eq!(rr.ssrc, 0x30b6_8407);
    let b: Vec<ReportBlock> = rr.reports.iter().collect();
    assert_eq!(b.len(), 1);
    assert_eq!(b[0].ssrc, 0x4794_37af);
    assert_eq!(b[0].extended_highest_seq, 0x276);
    assert_eq!(b[0].jitter, 0x772);
}

#[test]
fn sdes_cname_from_aiortc() {
    let RtcpBody::Sdes(sdes) = only(AIORTC_SDES) else {
        panic!("not SDES")
    };
    let chunks: Vec<_> = sdes.chunks.iter().collect();
    assert_eq!(chunks.len(), 1);
    assert_eq!(chunks[0].ssrc, 0x6d24_53ea);
    assert_eq!(
        chunks[0].cname(),
        Some(&b"{63f459ea-41fe-4474-9d33-9707c9ee79d1}"[..])
    );
}

#[test]
fn bye_from_aiortc() {
    let RtcpBody::Bye(bye) = only(AIORTC_BYE) else {
        panic!("not BYE")
    };
    assert_eq!(bye.sources.iter().collect::<Vec<_>>(), [0xae52_8b43]);
    assert_eq!(bye.reason, None);

    let RtcpBody::Bye(bye) = only(AIORTC_BYE_NO_SOURCES) else {
        panic!("not BYE")
    };
    assert!(bye.sources.is_empty());

    // P set; the four octets are padding, the last one counting them.
    let packets = roundtrip(AIORTC_BYE_PADDING);
    assert_eq!(packets[0].padding, hex("04040404"));
    assert!(matches!(&packets[0].body, RtcpBody::Bye(b) if b.sources.is_empty()));
}

#[test]
fn pli_from_aiortc() {
    assert_eq!(
        only(AIORTC_PLI),
        RtcpBody::Pli(Pli {
            sender_ssrc: 0x5450_6265,
            media_ssrc: 0x2301_3fb9,
        })
    );
}

#[test]
fn nack_from_aiortc_expands_and_repacks_to_the_same_bytes() {
    let RtcpBody::Nack(nack) = only(AIORTC_NACK) else {
        panic!("not NACK")
    };
    assert_eq!(
        (nack.sender_ssrc, nack.media_ssrc),
        (0x8b44_77bb, 0xf71d_eee4)
    );
    let lost: Vec<u16> = nack.entries.lost().collect();
    assert_eq!(
        lost,
        [
            12, 32, 39, 54, 76, 110, 123, 142, 183, 187, 223, 236, 271, 292
        ]
    );
    // The sender packed them minimally; so does lost_to_nack_entries.
    let repacked: Vec<NackEntry> = lost_to_nack_entries(lost.iter().copied()).collect();
    assert_eq!(repacked, nack.entries.iter().collect::<Vec<_>>());
    let mut out = BytesMut::new();
    Nack {
        sender_ssrc: nack.sender_ssrc,
        media_ssrc: nack.media_ssrc,
        entries: &repacked[..],
    }
    .write_to(&mut out);
    assert_eq!(out.freeze(), hex(AIORTC_NACK));
}

#[test]
fn nack_entries_pack_across_the_wrap_and_in_any_order() {
    let lost = [65534u16, 65535, 0, 1, 15, 16, 40];
    let entries: Vec<NackEntry> = lost_to_nack_entries(lost).collect();
    assert_eq!(
        entries,
        [
            NackEntry {
                pid: 65534,
                blp: 0b111
            },
            NackEntry { pid: 15, blp: 1 },
            NackEntry { pid: 40, blp: 0 },
        ]
    );
    let back: Vec<u16> = entries.iter().flat_map(|e| e.lost()).collect();
    assert_eq!(back, lost);
    // Unsorted input still names every number (and repeats none twice in one entry).
    let shuffled = [40u16, 1, 65535, 16, 0, 65534, 15];
    let mut named: Vec<u16> = lost_to_nack_entries(shuffled)
        .flat_map(NackEntry::lost)
        .collect();
    named.sort_unstable();
    named.dedup();
    let mut want = lost.to_vec();
    want.sort_unstable();
    assert_eq!(named, want);
    // The pion NACK: PID 0xAAAA with every other bit of BLP.
    let RtcpBody::Nack(n) = only(PION_NACK) else {
        panic!("not NACK")
    };
    let e: Vec<_> = n.entries.iter().collect();
    assert_eq!(
        e,
        [NackEntry {
            pid: 0xaaaa,
            blp: 0x5555
        }]
    );
    assert_eq!(n.entries.lost().count(), 9);
}

#[test]
fn remb_from_chrome() {
    let RtcpBody::Remb(remb) = only(PION_REMB_CHROME) else {
        panic!("not REMB")
    };
    assert_eq!((remb.sender_ssrc, remb.media_ssrc), (1, 0));
    assert_eq!((remb.exponent, remb.mantissa), (6, 139_487));
    assert_eq!(remb.bitrate_bps(), 8_927_168);
    assert_eq!(remb.ssrcs.iter().collect::<Vec<_>>(), [1_215_622_422]);
    // Encoding the same bitrate gives the same exponent and mantissa.
    assert_eq!(Remb::<&[u32]>::encode_bitrate(8_927_168), (6, 139_487));
    let (exponent, mantissa) = Remb::<&[u32]>::encode_bitrate(8_927_168);
    let mut out = BytesMut::new();
    Remb {
        sender_ssrc: 1,
        media_ssrc: 0,
        exponent,
        mantissa,
        ssrcs: &[1_215_622_422u32][..],
    }
    .write_to(&mut out);
    assert_eq!(out.freeze(), hex(PION_REMB_CHROME));
}

#[test]
fn remb_bitrate_encoding_is_exact_below_2_pow_18_and_saturates() {
    assert_eq!(Remb::<&[u32]>::encode_bitrate(0), (0, 0));
    assert_eq!(Remb::<&[u32]>::encode_bitrate(262_143), (0, 262_143));
    assert_eq!(Remb::<&[u32]>::encode_bitrate(262_144), (1, 131_072));
    let (e, m) = Remb::<&[u32]>::encode_bitrate(u64::MAX);
    assert!(m < 1 << 18 && e <= 63);
    let remb = Remb {
        sender_ssrc: 0,
        media_ssrc: 0,
        exponent: 63,
        mantissa: 0x3_FFFF,
        ssrcs: &[][..] as &[u32],
    };
    assert_eq!(remb.bitrate_bps(), u64::MAX);
}

#[test]
fn fir_from_pion() {
    let RtcpBody::Fir(fir) = only(PION_FIR) else {
        panic!("not FIR")
    };
    assert_eq!((fir.sender_ssrc, fir.media_ssrc), (0, 0x4bc4_fcb4));
    assert_eq!(
        fir.entries.iter().collect::<Vec<_>>(),
        [FirEntry {
            ssrc: 0x1234_5678,
            seq_nr: 0x42
        }]
    );
    let RtcpBody::Fir(two) = only(PION_FIR_TWO) else {
        panic!("not FIR")
    };
    let entries: Vec<FirEntry> = two.entries.iter().collect();
    assert_eq!(entries.len(), 2);
    assert_eq!(
        entries[1],
        FirEntry {
            ssrc: 0x9876_5432,
            seq_nr: 0x57
        }
    );
    let mut out = BytesMut::new();
    Fir {
        sender_ssrc: 0,
        media_ssrc: 0x4bc4_fcb4,
        entries: &entries[..],
    }
    .write_to(&mut out);
    assert_eq!(out.freeze(), hex(PION_FIR_TWO));
}

#[test]
fn app_with_padding_from_pion() {
    let packets = roundtrip(PION_APP_PADDED);
    let RtcpBody::App(app) = &packets[0].body else {
        panic!("not APP")
    };
    assert_eq!(&app.name, b"NAME");
    assert_eq!(app.data, Bytes::from_static(b"ABCDE"));
    assert_eq!(packets[0].padding, hex("030303"));
}

#[test]
fn extended_report_is_kept_opaque() {
    let body = only(PION_XR);
    assert!(matches!(body, RtcpBody::Other { pt: 207, count: 0, ref body } if body.len() == 204));
}

#[test]
fn transport_cc_from_pion() {
    let RtcpBody::TransportCc(t) = only(PION_TWCC_1) else {
        panic!("not transport-cc")
    };
    assert_eq!((t.base_seq, t.status_count, t.fb_pkt_count), (153, 1, 23));
    assert_eq!(t.reference_time, 4_057_090);
    let p: Vec<_> = t.packets().collect();
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].seq, 153);
    assert_eq!(p[0].delta.map(RecvDelta::micros), Some(37_000));

    let RtcpBody::TransportCc(t) = only(PION_TWCC_4) else {
        panic!("not transport-cc")
    };
    let micros: Vec<_> = t
        .packets()
        .map(|p| p.delta.map(RecvDelta::micros))
        .collect();
    let want = [19_000, 9_000, 9_000, 4_000, 3_000, 3_000, 4_000];
    assert_eq!(micros, want.map(Some));

    // A two-bit vector, then a run of 48 "not received" of which only 2 are reported.
    let packets = roundtrip(PION_TWCC_6);
    let RtcpBody::TransportCc(t) = &packets[0].body else {
        panic!("not transport-cc")
    };
    assert_eq!(packets[0].padding, hex("01"));
    let p: Vec<_> = t.packets().collect();
    assert_eq!(p.len(), 9);
    assert_eq!(p[0].seq, 34108);
    assert_eq!(p[8].seq, 34116);
    let symbols: Vec<Symbol> = p.iter().map(|p| p.symbol).collect();
    use Symbol::*;
    assert_eq!(
        symbols,
        [
            SmallDelta,
            SmallDelta,
            SmallDelta,
            SmallDelta,
            SmallDelta,
            NotReceived,
            LargeDelta,
            NotReceived,
            NotReceived
        ]
    );
    let micros: Vec<i64> = p
        .iter()
        .filter_map(|p| p.delta)
        .map(RecvDelta::micros)
        .collect();
    assert_eq!(micros, [38_750, 42_500, 26_500, 42_500, 30_750, 66_250]);

    // No packets at all.
    let RtcpBody::TransportCc(t) = only(PION_TWCC_7) else {
        panic!("not transport-cc")
    };
    assert_eq!(t.status_count, 0);
    assert_eq!(t.packets().count(), 0);
}

#[test]
fn transport_cc_built_from_chunks_writes_libwebrtc_padding() {
    // The packets of pion's example 6, built from typed chunks and deltas.
    let chunks = [
        StatusChunk::TwoBit { bits: 0x1552 },
        StatusChunk::RunLength {
            symbol: Symbol::NotReceived,
            run_length: 48,
        },
    ];
    assert_eq!(chunks[0].to_u16(), 0xd552);
    let deltas = [
        RecvDelta::Small(0x9b),
        RecvDelta::Small(0xaa),
        RecvDelta::Small(0x6a),
        RecvDelta::Small(0xaa),
        RecvDelta::Small(0x7b),
        RecvDelta::Large(0x0109),
    ];
    let t = TransportCc {
        sender_ssrc: 0x9b74_f61f,
        media_ssrc: 0x9371_dcbc,
        base_seq: 34108,
        status_count: 9,
        reference_time: 0x63_f916,
        fb_pkt_count: 0xb3,
        chunks: &chunks[..],
        deltas: &deltas[..],
        trailing: Bytes::new(),
    };
    let mut out = BytesMut::new();
    t.write_to(&mut out);
    assert_eq!(out.len(), t.encoded_len());
    assert_eq!(out.freeze(), hex(PION_TWCC_6));
    assert_eq!(t.reference_time_us(), 0x63_f916 * 64_000);
    let negative = TransportCc {
        reference_time: 0xFF_FFFF,
        ..t
    };
    assert_eq!(negative.reference_time_us(), -64_000);
}

#[test]
fn one_bit_vectors_read_set_bits_as_received() {
    // The draft's §3.1.4 example 1: 1 not received, 5 received, 3 not, 3 received, 2 not.
    let c = StatusChunk::from_u16(0b10_01111100011100);
    assert!(matches!(c, StatusChunk::OneBit { .. }));
    let got: String = (0..c.len())
        .map(|i| {
            if c.symbol(i) == Symbol::SmallDelta {
                'R'
            } else {
                '.'
            }
        })
        .collect();
    assert_eq!(got, ".RRRRR...RRR..");
    // A run length chunk of 221 "not received" (§3.1.3 example 1).
    let run = StatusChunk::from_u16(0b0000_0000_1101_1101);
    assert_eq!(
        run,
        StatusChunk::RunLength {
            symbol: Symbol::NotReceived,
            run_length: 221
        }
    );
}

#[test]
fn pion_packet_dump_compound_walks_in_order() {
    let packets = roundtrip(PION_COMPOUND);
    let kinds: Vec<(u8, u8)> = packets
        .iter()
        .map(|p| (p.body.packet_type(), p.body.count()))
        .collect();
    assert_eq!(
        kinds,
        [(201, 1), (202, 1), (203, 1), (206, 1), (205, 5), (204, 0)]
    );
    let RtcpBody::ReceiverReport(rr) = &packets[0].body else {
        panic!("RR first")
    };
    let b = rr.reports.iter().next().unwrap();
    assert_eq!(
        (b.ssrc, b.jitter, b.delay_since_last_sr),
        (0xbc5e_9a40, 273, 150_137)
    );
    // RTPFB FMT 5 (TMMBN-range rapid resynchronisation request) is kept opaque.
    assert!(
        matches!(&packets[4].body, RtcpBody::Other { pt: 205, count: 5, body } if body.len() == 8)
    );
}

#[test]
fn compound_of_every_captured_type_round_trips() {
    let all = [
        AIORTC_SR,
        AIORTC_SDES,
        AIORTC_RR,
        AIORTC_NACK,
        AIORTC_PLI,
        PION_REMB_CHROME,
        PION_FIR,
        PION_TWCC_4,
        AIORTC_BYE,
    ]
    .concat();
    let packets = roundtrip(&all);
    assert_eq!(packets.len(), 9);
    assert_eq!(Compound::validate(&hex(&all)), Ok(9));
}

#[test]
fn reduced_size_feedback_parses_alone() {
    // RFC 5506: a lone feedback packet, no SR or RR first.
    for raw in [AIORTC_PLI, AIORTC_NACK, PION_REMB_CHROME, PION_TWCC_6] {
        assert_eq!(roundtrip(raw).len(), 1);
    }
}

#[test]
fn every_type_built_from_values_parses_back() {
    let blocks = [
        ReportBlock {
            ssrc: 1,
            fraction_lost: 25,
            cumulative_lost: -3,
            extended_highest_seq: 0x0001_0005,
            jitter: 90,
            last_sr: 0x1234_5678,
            delay_since_last_sr: 65_536,
        },
        ReportBlock {
            ssrc: 2,
            cumulative_lost: 0x7F_FFFF,
            ..ReportBlock::default()
        },
    ];
    let items = [
        SdesItem {
            kind: sdes_type::CNAME,
            text: b"shoal",
        },
        SdesItem {
            kind: sdes_type::TOOL,
            text: b"x",
        },
    ];
    let chunks = [
        SdesChunk {
            ssrc: 7,
            items: &items,
        },
        SdesChunk {
            ssrc: 8,
            items: &[],
        },
    ];
    let mut out = BytesMut::new();
    SenderReport {
        ssrc: 9,
        ntp_time: 0xe000_0000_8000_0000,
        rtp_time: 48_000,
        packet_count: 10,
        octet_count: 1000,
        reports: &blocks[..],
        extension: Bytes::new(),
    }
    .write_to(&mut out);
    ReceiverReport {
        ssrc: 9,
        reports: &blocks[..1],
        extension: Bytes::new(),
    }
    .write_to(&mut out);
    Sdes {
        chunks: &chunks[..],
    }
    .write_to(&mut out);
    Bye {
        sources: &[9u32, 10][..],
        reason: Some(Bytes::from_static(b"done")),
    }
    .write_to(&mut out);
    Bye {
        sources: &[9u32][..],
        reason: Some(Bytes::from_static(b"bye")),
    }
    .write_to(&mut out);
    App {
        subtype: 3,
        ssrc: 9,
        name: *b"TEST",
        data: Bytes::from_static(b"12345"),
    }
    .write_to(&mut out);
    Pli {
        sender_ssrc: 1,
        media_ssrc: 2,
    }
    .write_to(&mut out);
    let raw = out.freeze();
    let packets = parse_all(&raw);
    assert_eq!(write_all(&packets), raw);
    assert_eq!(packets.len(), 7);

    let RtcpBody::SenderReport(sr) = &packets[0].body else {
        panic!("SR")
    };
    assert_eq!(sr.reports.iter().collect::<Vec<_>>(), blocks);
    let RtcpBody::ReceiverReport(rr) = &packets[1].body else {
        panic!("RR")
    };
    assert_eq!(rr.reports.len(), 1);
    let RtcpBody::Sdes(sdes) = &packets[2].body else {
        panic!("SDES")
    };
    let got: Vec<(u32, Vec<SdesItem>)> = sdes
        .chunks
        .iter()
        .map(|c| (c.ssrc, c.items.collect()))
        .collect();
    assert_eq!(got, [(7, items.to_vec()), (8, vec![])]);
    let RtcpBody::Bye(bye) = &packets[3].body else {
        panic!("BYE")
    };
    assert_eq!(bye.reason.as_deref(), Some(&b"done"[..]));
    // "bye" + its length octet fills 32 bits exactly: no null octets follow.
    assert_eq!(packets[4].body.body_len(), 8);
    let RtcpBody::App(app) = &packets[5].body else {
        panic!("APP")
    };
    // Five data bytes: the writer padded with the P bit.
    assert_eq!(app.data.len(), 5);
    assert_eq!(packets[5].padding, hex("000003"));
    assert!(matches!(packets[6].body, RtcpBody::Pli(_)));
}

#[test]
fn cumulative_lost_is_signed_24_bits_and_clamped_when_written() {
    let mut out = BytesMut::new();
    let block = ReportBlock {
        cumulative_lost: -(1 << 30),
        ..ReportBlock::default()
    };
    block.write(&mut out);
    assert_eq!(&out[5..8], &[0x80, 0, 0]);
    let mut rr = BytesMut::new();
    ReceiverReport {
        ssrc: 0,
        reports: &[block][..],
        extension: Bytes::new(),
    }
    .write_to(&mut rr);
    let RtcpBody::ReceiverReport(back) = &parse_all(&rr.freeze())[0].body else {
        panic!("RR")
    };
    assert_eq!(
        back.reports.iter().next().unwrap().cumulative_lost,
        -0x80_0000
    );
}

#[test]
fn malformed_captures_get_typed_errors() {
    use RtcpError::*;
    let cases: [(&str, RtcpError); 7] = [
        // aiortc's tests/rtcp_*_invalid.bin and truncated SDES.
        ("91cb0001ae528b43", CountMismatch { pt: 203, count: 17 }),
        ("81ce0001ae528b43", TooShort { pt: 206 }),
        ("81c90001ae528b43", CountMismatch { pt: 201, count: 1 }),
        ("81cd0001ae528b43", TooShort { pt: 205 }),
        ("81c80001ae528b43", TooShort { pt: 200 }),
        (
            "81ca000730b68407479437af0000000000000276000007720000000000000000",
            BadSdes,
        ),
        (
            "81ca00009000001b10000080d100",
            CountMismatch { pt: 202, count: 1 },
        ),
    ];
    for (raw, want) in cases {
        assert_eq!(first_error(&hex(raw)), want, "{raw}");
    }
}

#[test]
fn malformed_transport_cc_from_pion_is_refused() {
    use RtcpError::*;
    // pion's example2 and example5: a padding count that eats receive deltas.
    let example2 = "afcd0006fa17fa17193dd8bb0174000e45b15a40d800f0ffd0000003";
    assert_eq!(first_error(&hex(example2)), TwccInconsistent { count: 14 });
    let example5 = "afcd0006fa17fa17193dd8bb0001000e10636d00ba00100c0c100003";
    assert_eq!(first_error(&hex(example5)), TwccInconsistent { count: 14 });
    // example3: P set but the padding count is 0.
    let example3 = "afcd0007fa17fa17193dd8bb0174000645b15a40400220041ffe1f9ad000d000";
    assert_eq!(
        first_error(&hex(example3)),
        BadPadding { pt: 205, count: 0 }
    );
    // example8 and example9: counts the deltas cannot back.
    let example8 = "afcd0005fa17fa1743032fa0009900033de80217200394 01";
    assert_eq!(first_error(&hex(example8)), TwccInconsistent { count: 3 });
    let example9 = "afcd0005fa17fa1743032fa0009900023de80217400294 01";
    assert_eq!(first_error(&hex(example9)), TwccInconsistent { count: 2 });
}

#[test]
fn malformed_compounds_get_typed_errors() {
    use RtcpError::*;
    let rr = hex(AIORTC_RR);
    // Empty datagram, and a header cut short.
    assert_eq!(first_error(&Bytes::new()), Truncated { len: 0 });
    assert_eq!(first_error(&hex("81c9")), Truncated { len: 2 });
    // A good packet followed by three stray bytes.
    let stray = [AIORTC_RR, "81c900"].concat();
    assert_eq!(first_error(&hex(&stray)), Truncated { len: 3 });
    // Truncated: the length counts past the end.
    assert_eq!(
        first_error(&rr.slice(..rr.len() - 4)),
        LengthPastEnd {
            pt: 201,
            length_words: 7
        }
    );
    // Bad version in a later packet of a compound: the first still parses.
    let later = [AIORTC_PLI, "41cb0001ae528b43"].concat();
    let items: Vec<_> = Compound::new(hex(&later)).collect();
    assert!(items[0].is_ok());
    assert_eq!(items[1], Err(BadVersion { version: 1 }));
    assert_eq!(
        Compound::validate(&hex(&later)),
        Err(BadVersion { version: 1 })
    );
    // Padding bit with a padding count of 0, and one longer than the packet.
    assert_eq!(
        first_error(&hex("a0cb000100000000")),
        BadPadding { pt: 203, count: 0 }
    );
    assert_eq!(
        first_error(&hex("a0cb000100000009")),
        BadPadding { pt: 203, count: 9 }
    );
    assert_eq!(
        first_error(&hex("a0cb0000")),
        BadPadding { pt: 203, count: 0 }
    );
    // Report count exceeding the length: RC 2 with one block.
    let mut two = rr.to_vec();
    two[0] = 0x82;
    assert_eq!(
        first_error(&two.into()),
        CountMismatch { pt: 201, count: 2 }
    );
    // pion's sender_report_test.go "valid" SR says RC 1 but length 7 (32 bytes): no
    // room for its block.
    assert_eq!(
        first_error(&hex(PION_SR)),
        CountMismatch { pt: 200, count: 1 }
    );
    // SR claiming 31 blocks in a 52-byte packet.
    let mut sr = hex(AIORTC_SR).to_vec();
    sr[0] = 0x9f;
    assert_eq!(
        first_error(&sr.into()),
        CountMismatch { pt: 200, count: 31 }
    );
    // SDES with bytes after its chunks; BYE reason running past the end; BYE padding
    // that is not null.
    let sdes_extra = "81ca0003 00000001 00000000 00000000";
    assert_eq!(
        first_error(&hex(sdes_extra)),
        CountMismatch { pt: 202, count: 1 }
    );
    assert_eq!(first_error(&hex("81cb000200000001 09616263")), BadBye);
    assert_eq!(first_error(&hex("81cb000200000001 02616201")), BadBye);
    // PLI with an FCI, NACK with none or a half entry, FIR with a half entry, REMB whose
    // SSRC count disagrees.
    assert_eq!(
        first_error(&hex("81ce000354506265 23013fb9 00000000")),
        BadFci { pt: 206, fmt: 1 }
    );
    assert_eq!(
        first_error(&hex("81cd0002 00000001 00000002")),
        BadFci { pt: 205, fmt: 1 }
    );
    assert_eq!(
        first_error(&hex("84ce0003 00000000 00000001 12345678")),
        BadFci { pt: 206, fmt: 4 }
    );
    assert_eq!(
        first_error(&hex(
            "8fce0005 00000001 00000000 52454d42 021a20df 4874ed16"
        )),
        BadFci { pt: 206, fmt: 15 }
    );
}

#[test]
fn twcc_status_count_is_capped_and_chunks_must_cover_it() {
    use RtcpError::*;
    // 0xFFFF statuses in one run-length chunk: within the packet, beyond the cap.
    let huge = "8fcd0005 00000001 00000002 0000ffff 00000001 1fff0000";
    assert_eq!(
        first_error(&hex(huge)),
        TwccTooManyStatuses { count: 0xffff }
    );
    // 16 statuses, one chunk of 7 and nothing after it.
    let short = "8fcd0005 00000001 00000002 00000010 00000001 e0000000";
    assert_eq!(first_error(&hex(short)), TwccInconsistent { count: 16 });
    // Eight bytes after the deltas: not padding.
    let long = "8fcd0006 00000001 00000002 00000001 00000001 00010000 00000000";
    assert_eq!(first_error(&hex(long)), TwccInconsistent { count: 1 });
}

#[test]
fn nack_and_fir_entry_counts_are_capped() {
    let n = MAX_FCI_ENTRIES + 1;
    let mut raw = BytesMut::new();
    let entries: Vec<NackEntry> = (0..n as u16)
        .map(|i| NackEntry {
            pid: i * 17,
            blp: 0,
        })
        .collect();
    Nack {
        sender_ssrc: 1,
        media_ssrc: 2,
        entries: &entries[..],
    }
    .write_to(&mut raw);
    assert_eq!(
        first_error(&raw.freeze()),
        RtcpError::TooManyEntries { pt: 205, fmt: 1 }
    );
}

#[test]
fn too_many_packets_in_one_compound() {
    let one = hex(AIORTC_BYE_NO_SOURCES);
    let many: Vec<u8> = one
        .iter()
        .copied()
        .cycle()
        .take(4 * (MAX_PACKETS_PER_COMPOUND + 1))
        .collect();
    assert_eq!(first_error(&many.into()), RtcpError::TooManyPackets);
}

/// Every seed packet above, for the random tests.
fn seeds() -> Vec<Vec<u8>> {
    let mut all: Vec<Vec<u8>> = [
        AIORTC_SR,
        AIORTC_RR,
        AIORTC_SDES,
        AIORTC_BYE,
        AIORTC_BYE_NO_SOURCES,
        AIORTC_BYE_PADDING,
        AIORTC_PLI,
        AIORTC_NACK,
        PION_COMPOUND,
        PION_REMB_CHROME,
        PION_FIR,
        PION_SR,
        PION_XR,
        PION_FIR_TWO,
        PION_NACK,
        PION_APP_PADDED,
        PION_TWCC_1,
        PION_TWCC_4,
        PION_TWCC_6,
        PION_TWCC_7,
    ]
    .iter()
    .map(|h| hex(h).to_vec())
    .collect();
    all.push(hex(&[AIORTC_SR, AIORTC_SDES, PION_TWCC_6, AIORTC_NACK].concat()).to_vec());
    all
}

/// Parses `raw`; every packet that parses must write back the very bytes it was parsed
/// from, and read everything it offers without panicking.
fn check(raw: &Bytes) -> usize {
    let mut at = 0;
    let mut seen = 0;
    for item in Compound::new(raw.clone()) {
        let Ok(p) = item else { break };
        let mut out = BytesMut::new();
        p.write_to(&mut out);
        let len = out.len();
        assert_eq!(len, p.encoded_len());
        assert_eq!(&out[..], &raw[at..at + len], "{p:?}");
        at += len;
        seen += touch(&p.body);
    }
    seen
}

/// Reads every list a packet offers.
fn touch(body: &RtcpBody) -> usize {
    match body {
        RtcpBody::SenderReport(p) => p.reports.iter().count(),
        RtcpBody::ReceiverReport(p) => p.reports.iter().count(),
        RtcpBody::Sdes(p) => p.chunks.iter().map(|c| c.items.count()).sum(),
        RtcpBody::Bye(p) => p.sources.iter().count() + p.reason.as_ref().map_or(0, Bytes::len),
        RtcpBody::Nack(p) => p.entries.lost().count(),
        RtcpBody::Fir(p) => p.entries.iter().count(),
        RtcpBody::Remb(p) => p.ssrcs.iter().count() + p.bitrate_bps().count_ones() as usize,
        RtcpBody::TransportCc(p) => p
            .packets()
            .map(|f| f.delta.map_or(0, |d| d.micros().unsigned_abs() as usize))
            .sum(),
        RtcpBody::Pli(_) | RtcpBody::App(_) | RtcpBody::Other { .. } => 1,
    }
}

#[test]
fn random_bytes_and_mutations_never_panic_and_reserialize_identically() {
    let mut rng = ChaCha8Rng::seed_from_u64(0x05ee_d7c9);
    let seeds = seeds();
    let boundary = [
        0x00, 0x01, 0x03, 0x1f, 0x20, 0x7f, 0x80, 0x81, 0x9f, 0xa0, 0xbf, 0xc8, 0xc9, 0xca, 0xcb,
        0xcc, 0xcd, 0xce, 0xcf, 0xff,
    ];
    let mut parsed_whole = 0;
    for i in 0..60_000 {
        let seed = seeds[mutate::pick(&mut rng, seeds.len())].clone();
        let op = rng.next_u32() % 7;
        let mut d = mutate::generic(&mut rng, seed, op, 96, &boundary);
        // Keep most mutants RTCP-looking so the parsers behind the header see them.
        if i % 4 != 0
            && let Some(b) = d.first_mut()
        {
            *b = 0x80 | (*b & 0x3f);
        }
        let raw = Bytes::from(d);
        check(&raw);
        if Compound::validate(&raw).is_ok() {
            parsed_whole += 1;
        }
    }
    assert!(
        parsed_whole > 1_000,
        "too few mutants parse: {parsed_whole}"
    );
}

#[test]
fn every_truncation_of_every_seed_is_refused_or_reserializes() {
    for seed in seeds() {
        for cut in 0..=seed.len() {
            check(&Bytes::copy_from_slice(&seed[..cut]));
        }
    }
}

/// Encodes `arrivals`, writes and parses the feedback, and checks that every arrival
/// comes back within one 250 µs tick (rounded down) and every loss as a loss.
fn encode_and_read_back(arrivals: &[Option<i64>]) -> usize {
    use shoal_components::rtcp::twcc::FeedbackEncoder;
    let mut enc = FeedbackEncoder::default();
    let encoded = enc.encode(arrivals);
    let fb = enc.feedback(1, 2, 65530, 7, encoded);
    let mut out = BytesMut::new();
    fb.write_to(&mut out);
    assert_eq!(out.len(), fb.encoded_len());
    let raw = out.freeze();
    let packets = parse_all(&raw);
    assert_eq!(write_all(&packets), raw);
    let RtcpBody::TransportCc(t) = &packets[0].body else {
        panic!("not transport-cc")
    };
    assert_eq!(t.status_count, encoded.status_count);
    let mut now_us = t.reference_time_us();
    let n = usize::from(t.status_count);
    for (i, (p, want)) in t.packets().zip(&arrivals[..n]).enumerate() {
        assert_eq!(p.seq, 65530u16.wrapping_add(i as u16));
        match (p.delta, want) {
            (None, None) => assert_eq!(p.symbol, Symbol::NotReceived),
            (Some(d), Some(want)) => {
                now_us += d.micros();
                assert!(
                    (0..250).contains(&(want - now_us)),
                    "packet {i}: sent {want}, read {now_us}"
                );
            }
            other => panic!("packet {i}: {other:?}"),
        }
    }
    assert_eq!(t.packets().count(), n);
    n
}

#[test]
fn feedback_encoder_round_trips_arrival_times() {
    let base = 1_000_000_123i64;
    // Small steps, a loss run long enough for a run length chunk, reordering (a
    // negative delta), a gap needing a large delta, and a lone loss.
    let mut arrivals: Vec<Option<i64>> = (0..20).map(|i| Some(base + i * 1_013)).collect();
    arrivals.extend(std::iter::repeat_n(None, 30));
    arrivals.push(Some(base + 25_000));
    arrivals.push(Some(base + 24_000));
    arrivals.push(Some(base + 900_000));
    arrivals.push(None);
    arrivals.push(Some(base + 900_300));
    assert_eq!(encode_and_read_back(&arrivals), arrivals.len());
    // All lost, and nothing at all.
    assert_eq!(encode_and_read_back(&[None; 40]), 40);
    assert_eq!(encode_and_read_back(&[]), 0);
    // A delta beyond 8191.75 ms ends the feedback before that packet.
    let far = [
        Some(base),
        Some(base + 1_000),
        Some(base + 9_000_000),
        Some(base + 9_000_100),
    ];
    assert_eq!(encode_and_read_back(&far), 2);
}

#[test]
fn feedback_encoder_random_arrivals() {
    let mut rng = ChaCha8Rng::seed_from_u64(0x7cc);
    for _ in 0..300 {
        let n = 1 + (rng.next_u32() % 400) as usize;
        let mut t = i64::from(rng.next_u32());
        let arrivals: Vec<Option<i64>> = (0..n)
            .map(|_| {
                t += i64::from(rng.next_u32() % 3_000) - 200;
                (rng.next_u32() % 5 != 0).then_some(t)
            })
            .collect();
        assert_eq!(encode_and_read_back(&arrivals), n);
    }
}
