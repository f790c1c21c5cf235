//! Packets for an association this side does not have (RFC 9260 §8.4, "out of the
//! blue"), and the rules on which chunks may share a packet with an INIT (§5.1,
//! §8.5.1 A), checked before a packet's chunks are handled.

use super::{Sctp, solo_packet};
use crate::sctp::chunk::{Abort, Chunk, ErrorCause, ShutdownComplete, chunk_type};
use crate::sctp::packet::{COMMON_HEADER_LEN, Packet};
use crate::time::Time;

/// Whether the packet's INIT or INIT ACK, if it leads, is its only chunk, and a
/// packet with tag 0 is an INIT alone (one further along is refused in the chunk
/// loop). Read from the first chunk's header, without parsing the packet's chunks.
pub(super) fn init_alone_or_absent(packet: &Packet) -> bool {
    let raw = packet.raw();
    let Some(&typ) = raw.get(COMMON_HEADER_LEN) else {
        return packet.verification_tag != 0;
    };
    let alone = raw
        .get(COMMON_HEADER_LEN + 2..COMMON_HEADER_LEN + 4)
        .map(|l| usize::from(u16::from_be_bytes([l[0], l[1]])))
        .is_some_and(|len| COMMON_HEADER_LEN + len.next_multiple_of(4) >= raw.len());
    if packet.verification_tag == 0 {
        return typ == chunk_type::INIT && alone;
    }
    !(typ == chunk_type::INIT || typ == chunk_type::INIT_ACK) || alone
}

/// Whether a packet for an association that does not exist yet may set one up: an
/// INIT (RFC 9260 §8.4 rule 3) or a COOKIE ECHO (rule 4) first.
pub(super) fn starts_setup(packet: &Packet) -> bool {
    matches!(
        packet.chunks().next(),
        Some(Ok(Chunk::Init(_) | Chunk::CookieEcho(_)))
    )
}

/// A packet for an association this side does not have (RFC 9260 §8.4): never set
/// up here, ended, or (the peer's INIT or COOKIE ECHO after an end) one shoal does
/// not set up again on the same DTLS session.
pub(super) fn out_of_the_blue(a: &mut Sctp, packet: &Packet, now: Time) {
    let vtag = packet.verification_tag;
    let chunks = || packet.chunks().map_while(Result::ok);
    // Rule 2: "If the OOTB packet contains an ABORT chunk, the receiver MUST silently
    // discard the OOTB packet and take no further action."
    if chunks().any(|c| matches!(c, Chunk::Abort(_))) {
        return;
    }
    // Rule 5: a SHUTDOWN ACK is answered with SHUTDOWN COMPLETE, "the Verification
    // Tag from the received SHUTDOWN ACK chunk" and the T bit set.
    if chunks().any(|c| matches!(c, Chunk::ShutdownAck(_))) {
        let sc = ShutdownComplete { t_bit: true };
        a.solo
            .push(solo_packet(a.local_port, a.remote_port, vtag, &sc));
        return;
    }
    // Rules 6 and 7: SHUTDOWN COMPLETE, COOKIE ACK and a Stale Cookie ERROR are
    // discarded.
    let quiet = chunks().any(|c| match c {
        Chunk::ShutdownComplete(_) | Chunk::CookieAck(_) => true,
        Chunk::Error(e) => e
            .causes
            .iter()
            .any(|c| c.code == crate::sctp::chunk::cause_code::STALE_COOKIE),
        _ => false,
    });
    if quiet || a.last_ootb_abort == Some(now) {
        return;
    }
    a.last_ootb_abort = Some(now);
    let causes: &[ErrorCause] = &[];
    let abort = match chunks().next() {
        // Rule 3: an INIT (here: after our association ended) is refused with the
        // INIT's Initiate Tag and the T bit clear.
        Some(Chunk::Init(init)) => {
            let abort = Abort {
                t_bit: false,
                causes,
            };
            solo_packet(a.local_port, a.remote_port, init.initiate_tag, &abort)
        }
        // Rule 8: anything else gets ABORT with the packet's own Verification Tag
        // and the T bit set.
        _ => {
            let abort = Abort {
                t_bit: true,
                causes,
            };
            solo_packet(a.local_port, a.remote_port, vtag, &abort)
        }
    };
    a.solo.push(abort);
}
