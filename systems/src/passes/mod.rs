//! The passes of a tick, one module each, in the order DESIGN.md names them. A pass
//! visits only the entities its work lists name; the schedule is built here, once,
//! from [`Pass::ORDER`].

pub mod datachannel;
pub mod dtls;
pub mod egress;
pub mod ice;
pub mod ingest;
pub mod media;
pub mod sack_batch;
pub mod sctp;
pub mod sctp_tx;
pub mod srtp_in;
pub mod timers;

use bevy_ecs::prelude::*;
use bevy_ecs::schedule::{ScheduleLabel, SingleThreadedExecutor};
use bevy_ecs::system::ScheduleSystem;

/// The schedule label of a shard tick.
#[derive(ScheduleLabel, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Tick;

/// One pass of a shard tick.
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
    /// Every pass, in schedule order: the one list of passes the schedule is built
    /// from.
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

    /// This pass's system: the one place a pass is tied to its code.
    pub fn system(self) -> ScheduleSystem {
        match self {
            Pass::Ingest => Box::new(IntoSystem::into_system(ingest::ingest)),
            Pass::Ice => Box::new(IntoSystem::into_system(ice::ice)),
            Pass::Dtls => Box::new(IntoSystem::into_system(dtls::dtls)),
            Pass::SrtpIn => Box::new(IntoSystem::into_system(srtp_in::srtp_in)),
            Pass::Sctp => Box::new(IntoSystem::into_system(sctp::sctp)),
            Pass::DataChannel => Box::new(IntoSystem::into_system(datachannel::datachannel)),
            Pass::Media => Box::new(IntoSystem::into_system(media::media)),
            Pass::SackBatch => Box::new(IntoSystem::into_system(sack_batch::sack_batch)),
            Pass::SctpTx => Box::new(IntoSystem::into_system(sctp_tx::sctp_tx)),
            Pass::Egress => Box::new(IntoSystem::into_system(egress::egress)),
            Pass::Timers => Box::new(IntoSystem::into_system(timers::timers)),
        }
    }
}

/// A shard tick's schedule: each pass's system in its set, the sets chained in
/// [`Pass::ORDER`], run on one thread.
pub fn build_schedule() -> Schedule {
    let mut schedule = Schedule::new(Tick);
    schedule.set_executor(SingleThreadedExecutor::new());
    for pair in Pass::ORDER.windows(2) {
        schedule.configure_sets(pair[0].before(pair[1]));
    }
    for pass in Pass::ORDER {
        schedule.add_systems(pass.system().in_set(pass));
    }
    schedule
}
