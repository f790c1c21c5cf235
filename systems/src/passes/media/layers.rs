//! Which simulcast stream, and which VP8 temporal layers, each subscriber is sent:
//! its estimate shared out over its subscriptions. Single-stream tracks take what
//! they arrive at, but for their temporal layers where they have them; every
//! simulcast subscription starts on its track's lowest stream (its base temporal
//! layer, where it has layers: the lowest stream's layers are steps of their own,
//! at their cumulative rates, RFC 7741 §4.2), then the subscriptions climb one step
//! at a time, in turn, while the estimate has room for what each step arrives at
//! over the last second. Streams rank by picture size, read from their
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

/// One subscription's candidates while the estimate is shared out.
struct Pick {
    sub: Entity,
    /// What it may be sent, cheapest first: (stream index, stream entity, bit/s,
    /// highest temporal layer). The streams that carry something, each with all the
    /// temporal layers the subscriber prefers; before the lowest, its temporal layers
    /// one by one, where it has them.
    ranked: Vec<(u8, Entity, u64, u8)>,
    /// A stream without simulcast: only its temporal layers are chosen.
    single: bool,
    rank: usize,
    /// The stream it is sent and the temporal layers chosen for it last.
    current: Option<u8>,
    current_tid: u8,
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
    /// No stream can be climbed: what the subscriber is sent at the least already
    /// passes the estimate (`wanted_bps`).
    pub sent_past_estimate: bool,
}

/// Whether `sub` has something to choose: a simulcast stream, or the temporal
/// layers of its VP8 stream.
pub(super) fn has_choice(
    sub: &Subscription,
    tracks: &Query<(&mut Track, &mut Timers), Without<Subscription>>,
    now: Time,
) -> bool {
    // One stream taken alone (a link's) is sent whole, every temporal layer: the
    // node at the other end chooses for its subscribers.
    sub.spec.stream.is_none()
        && (sub.layers.is_some()
            || tracks
                .get(sub.track)
                .is_ok_and(|(t, _)| t.temporal_bps(now).is_some()))
}

/// Chooses the streams and temporal layers of `peer`'s subscriptions from `estimate` (`None`:
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
        // A paused subscription is sent nothing: it takes no share. One stream
        // taken alone is sent whole (see `has_choice`).
        if sub.paused || sub.spec.stream.is_some() {
            continue;
        }
        let Ok((track, _)) = tracks.get(sub.track) else {
            continue;
        };
        let preferred = sub.temporal.preferred;
        let (Some(choice), Some(layering)) = (sub.layers, track.layering.as_ref()) else {
            // A muted single stream is sent nothing (its rate counts what arrives).
            if track.muted {
                continue;
            }
            // A single stream: its temporal layers, where it has them, are the choice.
            match track.temporal_bps(now) {
                Some(rates) => {
                    let ranked = temporal_steps(0, sub.track, &rates, preferred, true);
                    let old_rank = ranked.iter().position(|r| r.3 == sub.temporal.target);
                    used += ranked[0].2 as i64;
                    picks.push(Pick {
                        sub: entity,
                        current: Some(0),
                        current_tid: sub.temporal.target,
                        max_rank: ranked.len() - 1,
                        ranked,
                        single: true,
                        rank: 0,
                        old_rank,
                        lossy: false,
                    });
                }
                None => used += track.rate.bps(now) as i64,
            }
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
        // Each stream with the temporal layers preferred; the lowest, one layer at
        // a time too.
        let mut steps: Vec<(u8, Entity, u64, u8)> = Vec::with_capacity(ranked.len() + 3);
        // The subscriber's bound by rank counts streams, not steps: the last step of
        // the highest stream it allows.
        let mut rank_bound = 0;
        for (k, &(i, e, bps, _)) in ranked.iter().enumerate() {
            match tracks.get(e).ok().and_then(|(t, _)| t.temporal_bps(now)) {
                Some(rates) => steps.extend(temporal_steps(i, e, &rates, preferred, k == 0)),
                None => steps.push((i, e, bps, preferred)),
            }
            if k <= usize::from(choice.max_rank) {
                rank_bound = steps.len() - 1;
            }
        }
        let ranked = steps;
        used += ranked[0].2 as i64;
        // A climb that failed holds the subscription below it for a while.
        let held = choice
            .held_until
            .filter(|until| now < *until)
            .and_then(|_| {
                let stream = |r: &(u8, Entity, u64, u8)| r.0 == choice.held_below;
                ranked
                    .iter()
                    .position(|r| stream(r) && r.3 == choice.held_below_temporal)
                    .or_else(|| ranked.iter().position(stream))
            })
            .map_or(usize::MAX, |r| r.saturating_sub(1));
        // Where it was chosen last: its stream, with the temporal layers chosen.
        let old_rank = ranked
            .iter()
            .position(|r| r.0 == choice.target && r.3 == sub.temporal.target)
            .or_else(|| ranked.iter().rposition(|r| r.0 == choice.target));
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
        let fits = |r: &(u8, Entity, u64, u8)| {
            let size = tracks
                .get(r.1)
                .ok()
                .and_then(|(t, _)| t.layering.as_ref()?.size);
            match (choice.max_size, size) {
                (Some((mw, mh)), Some((w, h))) => (mw == 0 || w <= mw) && (mh == 0 || h <= mh),
                _ => true,
            }
        };
        // None fits: the lowest stream, with all of its temporal layers (its last
        // step), not only its base layer.
        let by_size = ranked.iter().rposition(fits).unwrap_or_else(|| {
            let lowest = ranked.first().map(|r| r.0);
            ranked
                .iter()
                .rposition(|r| Some(r.0) == lowest)
                .unwrap_or(0)
        });
        let max_rank = rank_bound.min(held).min(by_size);
        picks.push(Pick {
            sub: entity,
            ranked,
            single: false,
            rank: 0,
            current: choice.current,
            current_tid: sub.temporal.target,
            max_rank: match (lossy, old_rank) {
                (true, Some(r)) => max_rank.min(r - 1),
                _ => max_rank,
            },
            old_rank,
            lossy,
        });
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
            let staying = Some(p.ranked[next].0) == p.current && p.ranked[next].3 == p.current_tid;
            let needs = if staying {
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
                    sent_past_estimate: false,
                });
            }
        }
        if !climbed {
            break;
        }
    }
    // No climb is wanted (nothing to choose, or nothing that can climb), but what
    // is sent at the least already passes the estimate: only a probe tells whether
    // the path carries it, or the pacer holds it back until the estimate has
    // climbed at 8 % a second from what arrives (a fresh subscriber in a room of
    // ten, at the initial 1 Mbit/s, for some 20 s). libwebrtc's sender probes when
    // what it allocates passes its estimate
    // (`ProbeController::OnMaxTotalAllocatedBitrate`); see `start_probe` for when
    // shoal does.
    if shortfall.is_none() && used > estimate_total {
        shortfall = Some(Shortfall {
            wanted_bps: used.max(0) as u64,
            sent_past_estimate: true,
        });
    }
    for p in &picks {
        let (index, stream, _, tid) = p.ranked[p.rank];
        let Ok((mut sub, _)) = subs.get_mut(p.sub) else {
            continue;
        };
        // Lower at the next frame, higher at the next sync frame.
        sub.temporal.target = tid;
        if p.single {
            continue;
        }
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
                    choice.held_below_temporal = p.current_tid;
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
        if choice.target != index || p.current_tid != tid || choice.target_since.is_none() {
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

/// A stream's candidates by temporal layer: with `each`, one per layer up to the
/// preferred one (`rates` are cumulative, bit/s), else only the preferred one. The
/// last is the stream with every layer preferred, and carries `preferred` itself, so
/// a stream without more layers than preferred reads as "all".
fn temporal_steps(
    index: u8,
    stream: Entity,
    rates: &[u64],
    preferred: u8,
    each: bool,
) -> Vec<(u8, Entity, u64, u8)> {
    let top = rates.len() - 1;
    let last = usize::from(preferred).min(top);
    let mut steps: Vec<(u8, Entity, u64, u8)> = if each {
        (0..last)
            .map(|t| (index, stream, rates[t], t as u8))
            .collect()
    } else {
        Vec::new()
    };
    steps.push((index, stream, rates[last], preferred));
    steps
}
