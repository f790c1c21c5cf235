//! Media commands (`Command::Publish`, `Unpublish`, `Subscribe`, `Unsubscribe`,
//! `DropMirror`) that a shard's full queue refused, kept in order until it takes
//! them. The control plane never blocks on a shard, and a shard's queue (of
//! `COMMAND_QUEUE_LEN`) is shared with its siblings' batches, so it can be full
//! for a moment under load; a command dropped then would be a track published that
//! no shard forwards, or a subscriber that never hears a track, with nothing to
//! send it again. So a refused command waits here, and so does every later command
//! for the same shard (they only make sense in the order they were negotiated),
//! until the shard takes them: at the next command for any shard and once a second
//! (`retry_media_commands`). Counted: `shoal_media_commands_delayed_total`; only
//! past [`MAX_MEDIA_BACKLOG`] waiting for one shard is a command dropped
//! (`shoal_media_commands_dropped_total`, a `media_command_dropped` log event).

use std::collections::VecDeque;

use shoal_systems::Command;

/// At most this many commands wait for one shard; one more is dropped. A shard
/// that has not taken 65 536 commands is stuck, not busy.
pub const MAX_MEDIA_BACKLOG: usize = 65_536;

/// Why a shard did not take a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Its queue is full: the command waits.
    Full,
    /// It has gone (its thread ended): the command is of no use.
    Gone,
}

/// A command a shard did not take, given back (boxed: a refusal is rare, and a
/// command large), and why.
pub type Refused = (Box<Command>, Refusal);

/// The commands waiting, per shard, and what became of the others.
#[derive(Debug, Default)]
pub struct MediaBacklog {
    waiting: Vec<VecDeque<Command>>,
    /// Commands that had to wait (each counted once).
    delayed: u64,
    /// Commands dropped: the shard's backlog was full, or the shard gone.
    dropped: u64,
}

impl MediaBacklog {
    /// Sends `command` to `shard` through `send`, after the commands already waiting
    /// for it; keeps it if the shard's queue is full.
    pub fn send(
        &mut self,
        shard: usize,
        command: Command,
        mut send: impl FnMut(usize, Command) -> Result<(), Refused>,
    ) {
        if self.waiting.len() <= shard {
            self.waiting.resize_with(shard + 1, VecDeque::new);
        }
        self.flush_shard(shard, &mut send);
        if !self.waiting[shard].is_empty() {
            self.wait(shard, command);
            return;
        }
        match send(shard, command) {
            Ok(()) => {}
            Err((command, Refusal::Full)) => self.wait(shard, *command),
            Err((_, Refusal::Gone)) => self.dropped += 1,
        }
    }

    /// Sends what waits, oldest first, for as long as each shard takes it.
    pub fn flush(&mut self, mut send: impl FnMut(usize, Command) -> Result<(), Refused>) {
        for shard in 0..self.waiting.len() {
            self.flush_shard(shard, &mut send);
        }
    }

    /// Commands waiting, over all shards.
    pub fn waiting(&self) -> usize {
        self.waiting.iter().map(VecDeque::len).sum()
    }

    /// Commands that had to wait.
    pub fn delayed(&self) -> u64 {
        self.delayed
    }

    /// Commands dropped.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    fn flush_shard(
        &mut self,
        shard: usize,
        send: &mut impl FnMut(usize, Command) -> Result<(), Refused>,
    ) {
        let Some(queue) = self.waiting.get_mut(shard) else {
            return;
        };
        while let Some(command) = queue.pop_front() {
            match send(shard, command) {
                Ok(()) => {}
                Err((command, Refusal::Full)) => {
                    queue.push_front(*command);
                    return;
                }
                Err((_, Refusal::Gone)) => {
                    self.dropped += 1 + queue.len() as u64;
                    queue.clear();
                    return;
                }
            }
        }
    }

    fn wait(&mut self, shard: usize, command: Command) {
        let queue = &mut self.waiting[shard];
        if queue.len() >= MAX_MEDIA_BACKLOG {
            self.dropped += 1;
            tracing::warn!(
                event = "media_command_dropped",
                shard,
                waiting = queue.len(),
                "a shard has not taken its waiting media commands: one more is dropped"
            );
            return;
        }
        queue.push_back(command);
        self.delayed += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_components::media::TrackId;

    fn unpublish(n: u64) -> Command {
        Command::Unpublish {
            peer: shoal_components::peer::PeerId(1),
            track: TrackId(n),
        }
    }

    fn number(c: &Command) -> u64 {
        match c {
            Command::Unpublish { track, .. } => track.0,
            _ => unreachable!("only unpublish commands here"),
        }
    }

    /// A shard whose queue holds `room` more commands; what it took, in order.
    struct FakeShard {
        room: usize,
        taken: Vec<u64>,
        gone: bool,
    }

    impl FakeShard {
        fn send(&mut self, command: Command) -> Result<(), Refused> {
            if self.gone {
                return Err((Box::new(command), Refusal::Gone));
            }
            if self.room == 0 {
                return Err((Box::new(command), Refusal::Full));
            }
            self.room -= 1;
            self.taken.push(number(&command));
            Ok(())
        }
    }

    #[test]
    fn refused_commands_wait_and_go_in_order() {
        let mut shards = [
            FakeShard {
                room: 3,
                taken: Vec::new(),
                gone: false,
            },
            FakeShard {
                room: usize::MAX,
                taken: Vec::new(),
                gone: false,
            },
        ];
        let mut backlog = MediaBacklog::default();
        for n in 0..10 {
            backlog.send(0, unpublish(n), |s, c| shards_send(&mut shards, s, c));
            backlog.send(1, unpublish(100 + n), |s, c| shards_send(&mut shards, s, c));
        }
        // Shard 0 took three; seven wait. Shard 1 took all, unaffected.
        assert_eq!((backlog.waiting(), backlog.delayed()), (7, 7));
        assert_eq!(shards[0].taken, [0, 1, 2]);
        assert_eq!(shards[1].taken, (100..110).collect::<Vec<_>>());
        // The shard takes two more: the oldest waiting go, and a new command
        // queues behind the rest even though there is room by then.
        shards[0].room = 2;
        backlog.flush(|s, c| shards_send(&mut shards, s, c));
        assert_eq!(shards[0].taken, [0, 1, 2, 3, 4]);
        shards[0].room = 100;
        backlog.send(0, unpublish(10), |s, c| shards_send(&mut shards, s, c));
        assert_eq!(shards[0].taken, (0..=10).collect::<Vec<_>>());
        assert_eq!((backlog.waiting(), backlog.dropped()), (0, 0));
    }

    #[test]
    fn a_backlog_is_bounded_and_a_gone_shard_drops_its_own() {
        let mut shards = [
            FakeShard {
                room: 0,
                taken: Vec::new(),
                gone: false,
            },
            FakeShard {
                room: 0,
                taken: Vec::new(),
                gone: false,
            },
        ];
        let mut backlog = MediaBacklog::default();
        for n in 0..MAX_MEDIA_BACKLOG as u64 + 5 {
            backlog.send(0, unpublish(n), |s, c| shards_send(&mut shards, s, c));
        }
        assert_eq!(backlog.waiting(), MAX_MEDIA_BACKLOG);
        assert_eq!(backlog.dropped(), 5);
        backlog.send(1, unpublish(7), |s, c| shards_send(&mut shards, s, c));
        // Shard 0 goes away: what waits for it is dropped; shard 1's still waits.
        shards[0].gone = true;
        backlog.flush(|s, c| shards_send(&mut shards, s, c));
        assert_eq!(backlog.waiting(), 1);
        assert_eq!(backlog.dropped(), 5 + MAX_MEDIA_BACKLOG as u64);
        shards[1].room = 1;
        backlog.flush(|s, c| shards_send(&mut shards, s, c));
        assert_eq!(
            (backlog.waiting(), shards[1].taken.as_slice()),
            (0, &[7][..])
        );
    }

    fn shards_send(
        shards: &mut [FakeShard],
        shard: usize,
        command: Command,
    ) -> Result<(), Refused> {
        shards[shard].send(command)
    }
}
