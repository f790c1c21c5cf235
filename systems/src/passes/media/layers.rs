//! Which simulcast stream each subscriber is sent: its estimate shared out over its
//! subscriptions. Single-stream tracks take what they arrive at; every simulcast
//! subscription starts on its track's lowest stream, then the subscriptions climb
//! one stream at a time, in turn, while the estimate has room for what each stream
//! arrives at over the last second. Streams rank by picture size, read from their
//! keyframes, and until every size is known by the offer's order (RFC 8853 §5.2 makes
//! that order one of preference, not of quality; libwebrtc lists its streams lowest
//! first). A stream that carries nothing (its publisher paused it, RFC 8853's `~`, or
//! its encoder dropped it) is passed over. A higher stream may cost less than a lower
//! one (an encoder far over its target at a small size): the climb to it is then
//! free.
//!
//! A climb needs the estimate to cover [`UPGRADE_HEADROOM`] times what the subscriber
//! would then receive in all; staying needs what it receives alone, so an estimate
//! hovering at one stream's rate does not flap. A new target is asked for a keyframe,
//! which the switch waits for (`super::admit`). A climb the subscriber falls back
//! from within [`CLIMB_TRIAL`] is not tried again for a while ([`MIN_HOLD`]), nor is a
//! stream the subscriber lost more than [`STEP_DOWN_LOSS`] of.

use bevy_ecs::prelude::*;
use shoal_components::media::{PeerMedia, Subscription, Track};
use shoal_components::time::Time;
use shoal_components::timer::Timers;
use shoal_components::transport::PeerSrtp;

use super::{MediaCtx, request_keyframe};

/// How much more than the subscriber would receive after a climb the estimate must
/// be for the climb: video comes in bursts (a keyframe is several times a frame),
/// and a path run at 80 % of its rate has room for them.
pub const UPGRADE_HEADROOM: f64 = 1.25;

/// A climb followed by a fall within this long failed.
pub const CLIMB_TRIAL: std::time::Duration = std::time::Duration::from_secs(5);
/// How long a failed climb holds a subscription below the stream it failed on, the
/// first time; each failure in a row doubles it, up to [`MAX_HOLD`]. A path whose
/// token bucket lets a probe through unharmed and then drops a stream's bursts would
/// otherwise be climbed and fallen from every few seconds.
pub const MIN_HOLD: std::time::Duration = std::time::Duration::from_secs(8);
/// See [`MIN_HOLD`].
pub const MAX_HOLD: std::time::Duration = std::time::Duration::from_secs(16);

/// How often the choice is made from feedback at most (feedback comes every 50 to
/// 100 ms per subscriber, and a compound may hold many messages).
pub const CHOICE_INTERVAL: std::time::Duration = std::time::Duration::from_millis(100);

/// The loss on a stream past which the subscriber is stepped down.
pub const STEP_DOWN_LOSS: f64 = 0.05;
/// How long a stream must have been the target for its loss to count.
pub const LOSS_SETTLE: std::time::Duration = std::time::Duration::from_secs(1);

/// One simulcast subscription's candidates while the estimate is shared out.
struct Pick {
    sub: Entity,
    /// The streams that carry something: (index, entity, bit/s), lowest first.
    ranked: Vec<(u8, Entity, u64)>,
    rank: usize,
    current: Option<u8>,
    max_rank: usize,
    /// The rank of the target chosen last time, if its stream still carries.
    old_rank: Option<usize>,
    /// The subscriber loses too much on it.
    lossy: bool,
}

/// What choosing found: subscriptions whose next climb the estimate could not pay
/// for (a probe would tell whether the path has more), and the rate the climb asks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Shortfall {
    /// The rate the next stream up would have the subscriber receive in all, bit/s.
    pub wanted_bps: u64,
}

/// Chooses the streams of `peer`'s simulcast subscriptions from `estimate` (`None`:
/// no estimate, so every subscription gets the highest stream it prefers), asks
/// each new target's publisher for a keyframe, and returns what a climb would need
/// where the estimate held one back.
pub(super) fn choose(
    ctx: &mut MediaCtx,
    now: Time,
    peer: Entity,
    estimate: Option<u64>,
    loss: Option<(f64, Time)>,
    peers: &Query<(&mut PeerMedia, Option<&PeerSrtp>)>,
    tracks: &mut Query<(&mut Track, &mut Timers), Without<Subscription>>,
    subs: &mut Query<(&mut Subscription, &mut Timers), Without<Track>>,
) -> Option<Shortfall> {
    let Ok((media, _)) = peers.get(peer) else {
        return None;
    };
    let estimate_total = estimate.map_or(i64::MAX, |e| e.min(i64::MAX as u64 / 2) as i64);
    let mut used: i64 = 0;
    let mut picks: Vec<Pick> = Vec::new();
    for &(_, entity) in &media.subscriptions {
        let Ok((sub, _)) = subs.get(entity) else {
            continue;
        };
        // A paused subscription is sent nothing: it takes no share.
        if sub.paused {
            continue;
        }
        let Ok((track, _)) = tracks.get(sub.track) else {
            continue;
        };
        let (Some(choice), Some(layering)) = (sub.layers, track.layering.as_ref()) else {
            used += track.rate.bps(now) as i64;
            continue;
        };
        let mut ranked: Vec<(u8, Entity, u64, Option<u32>)> = layering
            .siblings
            .iter()
            .filter_map(|&s| {
                let (t, _) = tracks.get(s).ok()?;
                let bps = t.rate.bps(now);
                let l = t.layering.as_ref()?;
                let pixels = l.size.map(|(w, h)| u32::from(w) * u32::from(h));
                (bps > 0 && !t.muted).then_some((l.index, s, bps, pixels))
            })
            .collect();
        if ranked.is_empty() {
            continue;
        }
        // By picture size once every stream's is known, else in the offer's order
        // (libwebrtc lists its streams lowest first).
        if ranked.iter().all(|r| r.3.is_some()) {
            ranked.sort_by_key(|r| (r.3, r.0));
        }
        let ranked: Vec<(u8, Entity, u64)> =
            ranked.into_iter().map(|(i, e, b, _)| (i, e, b)).collect();
        used += ranked[0].2 as i64;
        // A climb that failed holds the subscription below it for a while.
        let held = choice
            .held_until
            .filter(|until| now < *until)
            .and_then(|_| ranked.iter().position(|(i, _, _)| *i == choice.held_below))
            .map_or(usize::MAX, |r| r.saturating_sub(1));
        let old_rank = ranked.iter().position(|(i, _, _)| *i == choice.target);
        // Losing more than STEP_DOWN_LOSS on a stream held for a loss interval: one
        // stream down, as a failed climb (a token bucket's short queue drops a
        // stream's bursts without the delay ever growing, and GCC holds its estimate
        // through 2 to 10 % loss).
        let lossy = match (loss, choice.target_since, old_rank) {
            (Some((p, at)), Some(since), Some(r)) => {
                p > STEP_DOWN_LOSS && at.saturating_since(since) >= LOSS_SETTLE && r > 0
            }
            _ => false,
        };
        // The subscriber's own bound: by rank, and by picture size where known
        // (the highest stream that fits, the lowest if none does).
        let fits = |r: &(u8, Entity, u64)| {
            let size = tracks
                .get(r.1)
                .ok()
                .and_then(|(t, _)| t.layering.as_ref()?.size);
            match (choice.max_size, size) {
                (Some((mw, mh)), Some((w, h))) => (mw == 0 || w <= mw) && (mh == 0 || h <= mh),
                _ => true,
            }
        };
        let by_size = ranked.iter().rposition(fits).unwrap_or(0);
        let max_rank = usize::from(choice.max_rank).min(held).min(by_size);
        picks.push(Pick {
            sub: entity,
            ranked,
            rank: 0,
            current: choice.current,
            max_rank: match (lossy, old_rank) {
                (true, Some(r)) => max_rank.min(r - 1),
                _ => max_rank,
            },
            old_rank,
            lossy,
        });
    }
    if picks.is_empty() {
        return None;
    }
    let mut shortfall = None;
    loop {
        let mut climbed = false;
        for p in &mut picks {
            let next = p.rank + 1;
            if next >= p.ranked.len() || next > p.max_rank {
                continue;
            }
            let extra = p.ranked[next].2 as i64 - p.ranked[p.rank].2 as i64;
            // What the subscriber would receive in all, with the headroom a climb
            // needs (none to stay where it is).
            let total = used + extra;
            let needs = if Some(p.ranked[next].0) == p.current {
                total
            } else {
                (total as f64 * UPGRADE_HEADROOM) as i64
            };
            if needs <= estimate_total {
                used = total;
                p.rank = next;
                climbed = true;
            } else if shortfall.is_none() {
                shortfall = Some(Shortfall {
                    wanted_bps: needs.max(0) as u64,
                });
            }
        }
        if !climbed {
            break;
        }
    }
    for p in &picks {
        let (index, stream, _) = p.ranked[p.rank];
        let Ok((mut sub, _)) = subs.get_mut(p.sub) else {
            continue;
        };
        let Some(choice) = sub.layers.as_mut() else {
            continue;
        };
        match p.old_rank {
            Some(old) if p.rank > old => choice.climbed_at = Some(now),
            Some(old) if p.rank < old => {
                // Down again soon after a climb: the climb failed. Held below the
                // stream it failed on, twice as long as the last time.
                let failed = p.lossy
                    || choice
                        .climbed_at
                        .is_some_and(|at| now.saturating_since(at) < CLIMB_TRIAL);
                if failed {
                    let hold = (choice.hold * 2).clamp(MIN_HOLD, MAX_HOLD);
                    choice.hold = hold;
                    choice.held_until = Some(now + hold);
                    choice.held_below = choice.target;
                }
                choice.climbed_at = None;
            }
            // A climb that lasted its trial: the next failure starts over.
            _ if choice
                .climbed_at
                .is_some_and(|at| now.saturating_since(at) >= CLIMB_TRIAL) =>
            {
                choice.climbed_at = None;
                choice.hold = std::time::Duration::ZERO;
            }
            _ => {}
        }
        if choice.target != index || choice.target_since.is_none() {
            choice.target_since = Some(now);
        }
        choice.target = index;
        if choice.current != Some(index) {
            // Before its first packet the subscription waits on its target.
            if choice.current.is_none() {
                sub.track = stream;
            }
            request_keyframe(ctx, now, stream, tracks, peers);
        }
    }
    shortfall
}
