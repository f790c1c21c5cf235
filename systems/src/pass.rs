//! The passes of a tick, in the order DESIGN.md names them.

use bevy_ecs::prelude::SystemSet;

/// One pass of a shard tick. The schedule chains them in declaration order; a pass
/// with no systems yet costs nothing.
#[derive(SystemSet, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Pass {
    /// Datagram batch and due timers → per-protocol work lists (RFC 7983 demux).
    Ingest,
    /// STUN checks → responses, selected pair, consent.
    Ice,
    /// DTLS records → handshake progress, SCTP packets, SRTP keys.
    Dtls,
    /// SRTP/SRTCP → plaintext RTP/RTCP.
    SrtpIn,
    /// SCTP packets → reassembled messages, acked send queues, "SACK owed".
    Sctp,
    /// Messages and DCEP → deliveries and room relay.
    DataChannel,
    /// RTP/RTCP → fan-out to subscriptions, NACK/PLI/RR handling.
    Media,
    /// "SACK owed" → at most one SACK per association per tick.
    SackBatch,
    /// Send queues, cwnd, rwnd, timers → SCTP packets.
    SctpTx,
    /// Outgoing packets → encrypted datagrams, one batch out.
    Egress,
    /// Every timer → the shard's next wake-up time.
    Timers,
}

impl Pass {
    /// Every pass, in schedule order.
    pub const ORDER: [Pass; 11] = [
        Pass::Ingest,
        Pass::Ice,
        Pass::Dtls,
        Pass::SrtpIn,
        Pass::Sctp,
        Pass::DataChannel,
        Pass::Media,
        Pass::SackBatch,
        Pass::SctpTx,
        Pass::Egress,
        Pass::Timers,
    ];
}
