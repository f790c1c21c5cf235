//! `sfu-load --nodes N --kill-after S`: one node of the cluster killed with SIGKILL
//! (`kill -9`: no drain, no lease revoked) `S` seconds into the steady window, and
//! how long until its rooms are served again.
//!
//! Two kinds of participant are cut off by the kill:
//! - those that joined through the killed node: their `/signal` socket breaks at
//!   once;
//! - those on the other nodes whose room the killed node owned: their node closes
//!   the spanned room once the owner's room key has gone with its lease (one TTL),
//!   and their socket closes.
//!
//! Each cut-off participant joins again at once through a node still alive (the
//! others in turn, a try every [`RETRY`]), with a new connection. A join of a room
//! whose owner's key has not yet expired is refused or admitted and closed again a
//! moment later; it keeps trying. It is served again when its last connection
//! receives its first media packet (from another participant of the room, through
//! whichever node): the recovery time is from the kill to that packet. The issue's
//! bound is the lease TTL + 5 s for every cut-off participant.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How long a cut-off participant waits before it tries again.
pub(super) const RETRY: Duration = Duration::from_millis(100);
/// The bound beyond the lease TTL (the "TTL + 5 s").
const SLACK: Duration = Duration::from_secs(5);

/// Which node `--kill-node` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Target {
    /// The node with this index.
    Node(usize),
    /// The node that owns the run's first room (from the nodes' `room_placed` log
    /// lines), so that the kill takes a room's owner.
    Owner,
}

/// The node killed, once it has been.
#[derive(Debug)]
pub(super) struct Victim {
    /// Its index among the nodes (participant p of a room joins through p mod N).
    pub node: usize,
    /// Its HTTP address, as `/signal` URLs name it.
    pub http: String,
    pub at: Instant,
}

/// The kill, shared by the run and the signalling.
#[derive(Debug, Default)]
pub(super) struct Kill {
    pub victim: OnceLock<Victim>,
}

impl Kill {
    /// The node a participant joins through on its `attempt`th try: its own first,
    /// then, once cut off, the nodes still alive in turn.
    pub(super) fn via(&self, nodes: usize, participant: usize, attempt: u32) -> usize {
        let first = participant % nodes.max(1);
        let Some(victim) = self.victim.get().filter(|_| attempt > 0 && nodes > 1) else {
            return first;
        };
        let alive: Vec<usize> = (0..nodes).filter(|&n| n != victim.node).collect();
        alive[(participant + attempt as usize) % alive.len()]
    }

    /// Whether a session at `url` was on the killed node.
    pub(super) fn on_victim(&self, url: &str) -> bool {
        self.victim
            .get()
            .is_some_and(|v| url.contains(&format!("//{}/", v.http)))
    }
}

/// The id of the node that owns `room`, from the `room_placed` line (logged by the
/// node that placed it) among the nodes' `logs`.
pub(super) fn owner_of(room: &str, logs: &[String]) -> Option<String> {
    let placed = format!("event=\"room_placed\" room=\"{room}\" owner=\"");
    logs.iter().flat_map(|log| log.lines()).find_map(|l| {
        let (_, rest) = l.split_once(&placed)?;
        rest.split_once('"').map(|(owner, _)| owner.to_owned())
    })
}

/// A participant the kill cut off.
#[derive(Clone, Debug)]
pub(super) struct CutOff {
    pub room: usize,
    pub participant: usize,
    /// Its session was on the killed node (else its room's owner was killed).
    pub with_node: bool,
    /// Joins it tried after the cut.
    pub attempts: u32,
    /// Its last connection, if a join got that far.
    pub conn: Option<usize>,
    /// The last error it saw.
    pub last_error: String,
}

/// What the kill did.
#[derive(Debug)]
pub(super) struct Failover {
    pub node: usize,
    pub after_s: f64,
    pub ttl: Duration,
    /// Each cut-off participant with its recovery time (`None`: not served again
    /// before the window ended).
    pub cut: Vec<(CutOff, Option<Duration>)>,
}

impl Failover {
    pub(super) fn new(
        kill: &Kill,
        after: Duration,
        ttl: Duration,
        cut: Vec<CutOff>,
        first_media: &HashMap<usize, Instant>,
    ) -> Option<Failover> {
        let victim = kill.victim.get()?;
        let at = victim.at;
        let cut = cut
            .into_iter()
            .map(|c| {
                let served = c
                    .conn
                    .and_then(|conn| first_media.get(&conn))
                    .map(|t| t.saturating_duration_since(at));
                (c, served)
            })
            .collect();
        Some(Failover {
            node: victim.node,
            after_s: after.as_secs_f64(),
            ttl,
            cut,
        })
    }

    fn bound(&self) -> Duration {
        self.ttl + SLACK
    }

    /// Recovery times of one kind of cut (sorted), and how many were not served
    /// again.
    fn times(&self, with_node: bool) -> (Vec<Duration>, usize) {
        let of_kind = self.cut.iter().filter(|(c, _)| c.with_node == with_node);
        let mut times: Vec<Duration> = of_kind.clone().filter_map(|(_, t)| *t).collect();
        times.sort();
        (times, of_kind.filter(|(_, t)| t.is_none()).count())
    }

    /// Within the bound: every cut-off participant served again within TTL + 5 s.
    pub(super) fn within(&self) -> bool {
        self.cut
            .iter()
            .all(|(_, t)| t.is_some_and(|t| t <= self.bound()))
    }

    fn line(&self, with_node: bool) -> String {
        let (times, lost) = self.times(with_node);
        let n = times.len() + lost;
        if n == 0 {
            return "none".into();
        }
        let s = |d: &Duration| format!("{:.2} s", d.as_secs_f64());
        let median = times.get(times.len() / 2).map_or("-".into(), s);
        let max = times.last().map_or("-".into(), s);
        format!(
            "{n}, served again: median {median}, max {max}{}",
            if lost > 0 {
                format!(", {lost} not served again")
            } else {
                String::new()
            }
        )
    }

    pub(super) fn summary(&self) -> String {
        format!(
            "sfu-load: failover: node {} killed {:.1} s into the window, lease TTL {} s: cut off with their node {}; cut off with their room's owner {}; bound TTL + 5 s = {} s: {}",
            self.node,
            self.after_s,
            self.ttl.as_secs(),
            self.line(true),
            self.line(false),
            self.bound().as_secs(),
            if self.within() {
                "within"
            } else {
                "NOT within"
            }
        )
    }

    pub(super) fn markdown(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "\n## Failover\n\nNode {} was killed with SIGKILL {:.1} s into the steady window (lease TTL {} s). Each participant it cut off joined again through a node still alive; served again = the kill to the first media packet on its last connection. Bound (TTL + 5 s): {} s, {}.\n",
            self.node,
            self.after_s,
            self.ttl.as_secs(),
            self.bound().as_secs(),
            if self.within() { "met" } else { "not met" }
        );
        let _ = writeln!(s, "- cut off with their node: {}", self.line(true));
        let _ = writeln!(
            s,
            "- cut off with their room's owner: {}\n",
            self.line(false)
        );
        let _ = writeln!(
            s,
            "| room | participant | cut off with | joins tried | served again after | last error |\n|---:|---:|---|---:|---:|---|"
        );
        for (c, t) in &self.cut {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} |",
                c.room,
                c.participant,
                if c.with_node {
                    "its node"
                } else {
                    "its room's owner"
                },
                c.attempts,
                t.map_or("not served again".into(), |t| format!(
                    "{:.2} s",
                    t.as_secs_f64()
                )),
                c.last_error.replace('|', "/"),
            );
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn killed(node: usize, at: Instant) -> Kill {
        let kill = Kill::default();
        let http = format!("127.0.0.1:{}", 8000 + node);
        kill.victim.set(Victim { node, http, at }).expect("once");
        kill
    }

    #[test]
    fn a_cut_off_participant_tries_the_nodes_still_alive_in_turn() {
        let kill = killed(1, Instant::now());
        assert_eq!(kill.via(3, 4, 0), 1, "first its own node");
        let tried: Vec<usize> = (1..5).map(|a| kill.via(3, 4, a)).collect();
        assert!(!tried.contains(&1), "{tried:?}");
        assert!(tried.contains(&0) && tried.contains(&2), "{tried:?}");
        assert!(kill.on_victim("ws://127.0.0.1:8001/signal"));
        assert!(!kill.on_victim("ws://127.0.0.1:80011/signal"));
        assert_eq!(Kill::default().via(3, 4, 2), 1, "nothing killed yet");
    }

    #[test]
    fn the_owner_is_the_node_that_logged_the_rooms_placement() {
        let line = |room: &str, owner: &str| {
            format!("INFO room placed event=\"room_placed\" room=\"{room}\" owner=\"{owner}\"\n")
        };
        let logs = [String::new(), line("r-10", "load-2"), line("r-1", "load-1")];
        assert_eq!(
            owner_of("r-1", &logs).as_deref(),
            Some("load-1"),
            "not r-10's"
        );
        assert_eq!(owner_of("r-2", &logs), None);
    }

    #[test]
    fn recovery_is_from_the_kill_to_the_last_connections_first_media() {
        let at = Instant::now();
        let kill = killed(0, at);
        let cut = |participant, conn| CutOff {
            room: 0,
            participant,
            with_node: participant == 0,
            attempts: 1,
            conn,
            last_error: String::new(),
        };
        let media = HashMap::from([
            (7, at + Duration::from_secs(2)),
            (8, at + Duration::from_secs(12)),
        ]);
        let ttl = Duration::from_secs(4);
        let f = Failover::new(&kill, Duration::ZERO, ttl, vec![cut(0, Some(7))], &media)
            .expect("killed");
        assert!(f.within());
        assert_eq!(f.cut[0].1, Some(Duration::from_secs(2)));
        let late = Failover::new(&kill, Duration::ZERO, ttl, vec![cut(1, Some(8))], &media)
            .expect("killed");
        assert!(!late.within(), "12 s is past TTL + 5 s");
        let never =
            Failover::new(&kill, Duration::ZERO, ttl, vec![cut(1, None)], &media).expect("killed");
        assert!(!never.within());
        assert!(never.summary().contains("1 not served again"));
    }
}
