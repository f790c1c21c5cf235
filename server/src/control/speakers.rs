//! Each room's active speakers, from the audio levels the shards report (RFC 6464
//! levels of each published audio track, averaged over
//! [`AUDIO_LEVEL_INTERVAL`](shoal_components::media::AUDIO_LEVEL_INTERVAL)): smoothed
//! per participant, ranked loudest first, and announced when the ranking changes, at
//! most once per [`MIN_ANNOUNCE_INTERVAL`]. Pure data: the caller passes the time and
//! sends what comes back.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use shoal_components::media::{TrackId, level_amplitude};

/// Quieter than this (−dBov) is not speaking: RFC 6464 levels of a quiet room's
/// noise floor lie below, speech well above.
pub const SPEAKING_BELOW_DBOV: u8 = 60;
/// The weight of a new report in a participant's smoothed level: with a report
/// every 200 ms, a change shows within one or two reports.
const SMOOTHING: f64 = 0.5;
/// A participant whose level has not been reported for this long (it left, muted,
/// or stopped sending) is not speaking.
pub const STALE_AFTER: Duration = Duration::from_millis(1000);
/// Speakers an announcement names at most, the loudest: a noisy room of many
/// would otherwise send every listener a long list several times a second.
pub const MAX_SPEAKERS: usize = 16;
/// An entry not reported for this long is dropped from its board.
const FORGET_AFTER: Duration = Duration::from_secs(10);
/// Announcements to a room are at least this far apart; a change that comes
/// sooner is announced with the next report after it.
pub const MIN_ANNOUNCE_INTERVAL: Duration = Duration::from_millis(300);

/// One speaker as announced.
#[derive(Clone, Debug, PartialEq)]
pub struct Speaker {
    /// Its identity.
    pub identity: String,
    /// The track it speaks on.
    pub track: TrackId,
    /// Smoothed linear amplitude, 0 to 1.
    pub level: f32,
}

#[derive(Clone, Copy, Debug)]
struct Level {
    /// Smoothed linear amplitude.
    amplitude: f64,
    track: TrackId,
    at: Instant,
}

#[derive(Debug, Default)]
struct Board {
    levels: HashMap<String, Level>,
    /// The identities last announced, in order.
    announced: Vec<String>,
    announced_at: Option<Instant>,
}

/// Every room's speakers.
#[derive(Debug, Default)]
pub struct Speakers {
    rooms: HashMap<String, Board>,
}

impl Speakers {
    /// Takes `identity`'s level report (−dBov) for `track` in `room` at `now`; returns
    /// the room's ranking when it is to be announced.
    pub fn report(
        &mut self,
        room: &str,
        identity: &str,
        track: TrackId,
        level: u8,
        now: Instant,
    ) -> Option<Vec<Speaker>> {
        let board = self.rooms.entry(room.to_owned()).or_default();
        let new = level_amplitude(level);
        match board.levels.get_mut(identity) {
            Some(l) => {
                // A participant with two audio tracks: the louder one is its voice.
                if l.track == track || new >= l.amplitude || now - l.at >= STALE_AFTER {
                    let fresh = now - l.at < STALE_AFTER;
                    l.amplitude = if fresh {
                        SMOOTHING * new + (1.0 - SMOOTHING) * l.amplitude
                    } else {
                        new
                    };
                    l.track = track;
                    l.at = now;
                }
            }
            None => {
                board.levels.insert(
                    identity.to_owned(),
                    Level {
                        amplitude: new,
                        track,
                        at: now,
                    },
                );
            }
        }
        board.announce(now)
    }

    /// Forgets `identity` in `room` (it left); returns the ranking if that changed
    /// it and an announcement is due (else [`Speakers::sweep`] announces it).
    pub fn forget(&mut self, room: &str, identity: &str, now: Instant) -> Option<Vec<Speaker>> {
        let board = self.rooms.get_mut(room)?;
        board.levels.remove(identity)?;
        let announced = board.announce(now);
        if board.is_done() {
            self.rooms.remove(room);
        }
        announced
    }

    /// What each room's ranking became without a report to show it (speakers gone
    /// quiet, stopped, left within an announcement's interval): the rooms to
    /// announce to, with their rankings. Boards with nothing left go. Run every
    /// second or so.
    pub fn sweep(&mut self, now: Instant) -> Vec<(String, Vec<Speaker>)> {
        let mut out = Vec::new();
        for (room, board) in &mut self.rooms {
            board.levels.retain(|_, l| now - l.at < FORGET_AFTER);
            if let Some(ranking) = board.announce(now) {
                out.push((room.clone(), ranking));
            }
        }
        self.rooms.retain(|_, b| !b.is_done());
        out
    }

    /// Rooms with a board (for tests and bounds).
    pub fn rooms(&self) -> usize {
        self.rooms.len()
    }
}

impl Board {
    /// The current ranking: fresh levels above the speaking threshold, loudest
    /// first (ties by identity, so the order is stable).
    fn ranking(&self, now: Instant) -> Vec<Speaker> {
        let floor = level_amplitude(SPEAKING_BELOW_DBOV);
        let mut out: Vec<Speaker> = self
            .levels
            .iter()
            .filter(|(_, l)| now - l.at < STALE_AFTER && l.amplitude > floor)
            .map(|(identity, l)| Speaker {
                identity: identity.clone(),
                track: l.track,
                level: l.amplitude as f32,
            })
            .collect();
        out.sort_by(|a, b| {
            b.level
                .total_cmp(&a.level)
                .then_with(|| a.identity.cmp(&b.identity))
        });
        out.truncate(MAX_SPEAKERS);
        out
    }

    /// Nothing to rank and nothing announced that would need taking back.
    fn is_done(&self) -> bool {
        self.levels.is_empty() && self.announced.is_empty()
    }

    fn announce(&mut self, now: Instant) -> Option<Vec<Speaker>> {
        // Not due: not even ranked (a report or the sweep looks again).
        let due = self
            .announced_at
            .is_none_or(|at| now - at >= MIN_ANNOUNCE_INTERVAL);
        if !due {
            return None;
        }
        let ranking = self.ranking(now);
        let same = ranking.len() == self.announced.len()
            && ranking
                .iter()
                .zip(&self.announced)
                .all(|(s, a)| &s.identity == a);
        if same {
            return None;
        }
        self.announced = ranking.iter().map(|s| s.identity.clone()).collect();
        self.announced_at = Some(now);
        Some(ranking)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    fn names(s: &Option<Vec<Speaker>>) -> Option<Vec<String>> {
        s.as_ref()
            .map(|v| v.iter().map(|s| s.identity.clone()).collect())
    }

    #[test]
    fn the_loudest_leads_and_a_swap_is_announced_within_a_few_reports() {
        let mut sp = Speakers::default();
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        assert_eq!(
            names(&sp.report("r", "ann", TrackId(1), 15, ms(0))),
            Some(v(&["ann"]))
        );
        // bob is quieter: second, announced once the interval allows.
        assert_eq!(names(&sp.report("r", "bob", TrackId(2), 45, ms(100))), None);
        assert_eq!(
            names(&sp.report("r", "ann", TrackId(1), 15, ms(400))),
            Some(v(&["ann", "bob"]))
        );
        // Nothing changes: nothing announced.
        assert_eq!(names(&sp.report("r", "bob", TrackId(2), 45, ms(500))), None);
        // They swap at 600 ms.
        let mut at = 600;
        let mut changed = None;
        while changed.is_none() && at < 2000 {
            let first = sp.report("r", "ann", TrackId(1), 45, ms(at));
            let second = sp.report("r", "bob", TrackId(2), 15, ms(at + 1));
            changed = names(&first.or(second)).filter(|n| n.first().is_some_and(|f| f == "bob"));
            at += 200;
        }
        assert!(at <= 1000, "announced at {at} ms");
        assert_eq!(changed, Some(v(&["bob", "ann"])));
    }

    #[test]
    fn silence_and_staleness_leave_the_ranking() {
        let mut sp = Speakers::default();
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        assert_eq!(
            names(&sp.report("r", "ann", TrackId(1), 20, ms(0))),
            Some(v(&["ann"]))
        );
        // Silence (127) pulls the smoothed level under the threshold in a few reports.
        let mut got = None;
        for i in 1..10 {
            got = got.or(names(&sp.report("r", "ann", TrackId(1), 127, ms(200 * i))));
        }
        assert_eq!(got, Some(v(&[])));
        // A participant that stops reporting drops out when anyone reports.
        sp.report("r", "bob", TrackId(2), 20, ms(3000));
        assert_eq!(
            names(&sp.report("r", "carl", TrackId(3), 127, ms(4500))),
            Some(v(&[]))
        );
        // Quiet for good, with nobody else reporting: the sweep takes it back.
        assert_eq!(
            names(&sp.report("r", "dan", TrackId(4), 20, ms(6000))),
            Some(v(&["dan"]))
        );
        assert!(sp.sweep(ms(6500)).is_empty(), "nothing changed yet");
        assert_eq!(
            sp.sweep(ms(7100))
                .into_iter()
                .map(|(room, r)| (room, names(&Some(r))))
                .collect::<Vec<_>>(),
            vec![("r".to_owned(), Some(v(&[])))],
            "dan went quiet (no report for a second)"
        );
        assert!(sp.sweep(ms(8000)).is_empty());
        for who in ["ann", "bob", "carl", "dan"] {
            assert_eq!(sp.forget("r", who, ms(9000)), None, "{who}");
        }
        assert_eq!(sp.rooms(), 0, "the room's board goes with its last speaker");
    }
}
