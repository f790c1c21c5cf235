//! The `sack_batch` pass: at most one SACK per association per tick, covering every
//! DATA chunk the tick brought (RFC 9260 §6.2: a receiver need not acknowledge each
//! packet), written where `sctp_tx` puts it at the front of the next packet after
//! the control chunks. A delayed SACK rides on outgoing DATA when there is some.

use bevy_ecs::entity::EntityHashSet;
use bevy_ecs::prelude::*;
use shoal_components::sctp::Tsn;
use shoal_components::sctp::assoc::Sctp;
use shoal_components::sctp::chunk::{GapAckBlock, Sack, WriteChunk};
use shoal_components::tick::SctpWork;
use shoal_components::timer::{TimerKind, Timers};

/// The pass's own lists, reused tick after tick.
#[derive(Default)]
pub struct SackScratch {
    gaps: Vec<GapAckBlock>,
    dups: Vec<Tsn>,
    seen: EntityHashSet,
}

/// The sack_batch pass: one SACK per association that owes one, written where
/// `sctp_tx` will put it at the front of the next packet, after control chunks.
pub fn sack_batch(
    mut work: ResMut<SctpWork>,
    mut scratch: Local<SackScratch>,
    mut q: Query<(&mut Sctp, &mut Timers)>,
) {
    let scratch = &mut *scratch;
    // The passes before push an association once per packet or send: visit each
    // once, here and in sctp_tx (whose every visit builds packets), in the order
    // they first came (no association is always last in the tick's output).
    scratch.seen.clear();
    work.0.retain(|e| scratch.seen.insert(*e));
    for &entity in &work.0 {
        let Ok((mut a, mut timers)) = q.get_mut(entity) else {
            continue;
        };
        let a = &mut *a;
        // An association that ended acknowledges nothing more.
        if a.ended.is_some() {
            continue;
        }
        let Some(rx) = a.rx.as_mut() else { continue };
        let data_going_out =
            a.tx.as_ref()
                .is_some_and(|tx| tx.queue.has_data() || tx.outstanding.has_retransmissions());
        // A delayed SACK rides along when DATA goes out anyway (RFC 9260 §6.2).
        let due = a.sack_now || (data_going_out && rx.ack_urgency().is_some());
        if !due {
            continue;
        }
        a.sack_now = false;
        let fields = rx.build_sack(&mut scratch.gaps, &mut scratch.dups);
        let sack = Sack {
            cumulative_tsn_ack: fields.cumulative_tsn_ack,
            a_rwnd: fields.a_rwnd,
            gap_ack_blocks: scratch.gaps.as_slice(),
            duplicate_tsns: scratch.dups.as_slice(),
        };
        a.pending_sack.clear();
        sack.write_to(&mut a.pending_sack);
        timers.cancel(TimerKind::SctpDelayedAck);
    }
}
