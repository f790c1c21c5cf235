//! Handshake message reassembly (RFC 6347 §4.2.2, §4.2.3): fragments are buffered per
//! message_seq, overlapping ranges are allowed, and complete messages come out strictly
//! in message_seq order. Everything is bounded: how far ahead of next_receive_seq a
//! message may be, how long one message may be, how many bytes are buffered in all and
//! how many disjoint ranges one message may have.
//!
//! It also recognises the peer retransmitting its last flight (§4.2.4), which prompts
//! ours: only when every message of that flight has arrived whole again, in the epoch,
//! type and length it first had. A stray old fragment prompts nothing, so a peer cannot
//! make us resend a flight with a few bytes.

use crate::dtls::{HandshakeFragment, HandshakeType};

/// Messages further than this ahead of next_receive_seq are dropped (§4.2.2 allows
/// discarding future messages; a flight has at most five).
pub const MAX_FUTURE_MESSAGES: u16 = 8;
/// The longest handshake message accepted. A WebRTC certificate is under 1 KiB;
/// Chromium's ClientHello is 1413 bytes.
pub const MAX_MESSAGE_LEN: usize = 16 * 1024;
/// The most handshake bytes buffered at once.
pub const MAX_BUFFERED_BYTES: usize = 64 * 1024;
/// The most disjoint received ranges kept for one message.
const MAX_RANGES: usize = 32;
/// The most messages remembered of the peer's last flight (a flight has at most five).
const MAX_FLIGHT_MESSAGES: usize = 8;

/// A whole handshake message, reassembled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// Its type.
    pub msg_type: HandshakeType,
    /// Its message_seq.
    pub seq: u16,
    /// The epoch its fragments arrived in.
    pub epoch: u16,
    /// The highest record sequence number among its fragments.
    pub record_seq: u64,
    /// The body.
    pub body: Vec<u8>,
}

/// What became of a fragment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accepted {
    /// Buffered (or already had).
    Buffered,
    /// Part of a message of the peer's last flight, which it is retransmitting; the
    /// flight is not whole again yet.
    Old,
    /// With this fragment the peer's whole last flight has arrived again: the peer
    /// retransmitted it (§4.2.4).
    Retransmitted,
    /// Refused by a bound, inconsistent with earlier fragments of its message, or old
    /// but not of the peer's last flight.
    Dropped,
}

#[derive(Debug)]
struct Partial {
    seq: u16,
    msg_type: HandshakeType,
    epoch: u16,
    record_seq: u64,
    body: Vec<u8>,
    /// Received byte ranges `[start, end)`, sorted and merged.
    ranges: Vec<(usize, usize)>,
}

impl Partial {
    fn complete(&self) -> bool {
        covers(&self.ranges, self.body.len())
    }
}

/// A message the peer sent and we processed, and what of it has arrived again since.
#[derive(Debug)]
struct Seen {
    seq: u16,
    msg_type: HandshakeType,
    epoch: u16,
    length: usize,
    /// Byte ranges received again, sorted and merged.
    again: Vec<(usize, usize)>,
    /// All of it has arrived again.
    whole_again: bool,
}

/// The incoming side of the handshake layer.
#[derive(Debug, Default)]
pub struct Reassembler {
    next_seq: u16,
    partial: Vec<Partial>,
    buffered_bytes: usize,
    /// Messages popped since we last sent a flight: the peer's flight in progress.
    popped: Vec<Seen>,
    /// The peer's last flight: the messages popped before we sent our current flight.
    last_flight: Vec<Seen>,
}

impl Reassembler {
    /// next_receive_seq.
    pub fn next_seq(&self) -> u16 {
        self.next_seq
    }

    /// Forgets everything and expects `seq` next (a server answering a fresh ClientHello
    /// statelessly).
    pub fn reset_to(&mut self, seq: u16) {
        *self = Reassembler {
            next_seq: seq,
            ..Reassembler::default()
        };
    }

    /// We send a new flight: the messages popped since the last one were the peer's
    /// flight, and are what its retransmission will repeat.
    pub fn flight_sent(&mut self) {
        self.last_flight = std::mem::take(&mut self.popped);
    }

    /// The handshake is over: drops partial messages (nothing more is reassembled) and
    /// keeps only what recognises the peer retransmitting its last flight.
    pub fn finish(&mut self) {
        self.partial = Vec::new();
        self.buffered_bytes = 0;
        self.popped = Vec::new();
    }

    /// Forgets the messages popped since the last flight (a server answering a
    /// ClientHello statelessly keeps nothing of it, RFC 6347 §4.2.1).
    pub fn forget_popped(&mut self) {
        self.popped.clear();
    }

    /// Takes one fragment that arrived in `epoch` in the record numbered `record_seq`.
    pub fn insert(&mut self, epoch: u16, record_seq: u64, frag: &HandshakeFragment) -> Accepted {
        let h = frag.header;
        // Serial-number distance, so a ClientHello numbered 65535 is followed by 0.
        if h.message_seq.wrapping_sub(self.next_seq) >= MAX_FUTURE_MESSAGES {
            return self.repeat(epoch, frag);
        }
        let length = h.length as usize;
        if length > MAX_MESSAGE_LEN {
            return Accepted::Dropped;
        }
        let existing = self.partial.iter().position(|p| p.seq == h.message_seq);
        // A fragment of a later epoch replaces a partial message of an earlier one: an
        // unprotected fragment that claims the Finished's message_seq must not shut
        // out the real, protected Finished (which comes in epoch 1, RFC 5246 §7.1).
        // An earlier epoch's fragment never displaces a later one's.
        let at = match existing {
            Some(i) if self.partial[i].epoch < epoch => {
                let old = self.partial.swap_remove(i);
                self.buffered_bytes = self.buffered_bytes.saturating_sub(old.body.len());
                None
            }
            other => other,
        };
        let at = match at {
            Some(i) => i,
            None => {
                if self.buffered_bytes + length > MAX_BUFFERED_BYTES {
                    return Accepted::Dropped;
                }
                self.buffered_bytes += length;
                self.partial.push(Partial {
                    seq: h.message_seq,
                    msg_type: h.msg_type,
                    epoch,
                    record_seq,
                    body: vec![0; length],
                    ranges: Vec::new(),
                });
                self.partial.len() - 1
            }
        };
        let Some(p) = self.partial.get_mut(at) else {
            return Accepted::Dropped;
        };
        // All fragments of one message must agree on what the message is.
        if p.msg_type != h.msg_type || p.body.len() != length || p.epoch != epoch {
            return Accepted::Dropped;
        }
        let start = h.fragment_offset as usize;
        let end = start + frag.body.len();
        let Some(dst) = p.body.get_mut(start..end) else {
            return Accepted::Dropped;
        };
        if !add_range(&mut p.ranges, start, end) {
            return Accepted::Dropped;
        }
        dst.copy_from_slice(frag.body);
        p.record_seq = p.record_seq.max(record_seq);
        Accepted::Buffered
    }

    /// The next message in order, once it is whole.
    pub fn pop(&mut self) -> Option<Message> {
        let i = self
            .partial
            .iter()
            .position(|p| p.seq == self.next_seq && p.complete())?;
        let p = self.partial.swap_remove(i);
        self.buffered_bytes = self.buffered_bytes.saturating_sub(p.body.len());
        self.next_seq = self.next_seq.wrapping_add(1);
        if self.popped.len() < MAX_FLIGHT_MESSAGES {
            self.popped.push(Seen {
                seq: p.seq,
                msg_type: p.msg_type,
                epoch: p.epoch,
                length: p.body.len(),
                again: Vec::new(),
                whole_again: false,
            });
        }
        Some(Message {
            msg_type: p.msg_type,
            seq: p.seq,
            epoch: p.epoch,
            record_seq: p.record_seq,
            body: p.body,
        })
    }
}

impl Reassembler {
    /// A fragment of a message already processed (RFC 6347 §4.2.2: it "MUST be
    /// discarded"), noted towards recognising the retransmission of the peer's last
    /// flight (§4.2.4). Also the way in for such fragments after the handshake.
    pub fn repeat(&mut self, epoch: u16, frag: &HandshakeFragment) -> Accepted {
        let h = frag.header;
        let Some(seen) = self.last_flight.iter_mut().find(|m| m.seq == h.message_seq) else {
            return Accepted::Dropped;
        };
        if seen.msg_type != h.msg_type || seen.length != h.length as usize || seen.epoch != epoch {
            return Accepted::Dropped;
        }
        let start = h.fragment_offset as usize;
        let end = start + frag.body.len();
        if end > seen.length || !add_range(&mut seen.again, start, end) {
            return Accepted::Dropped;
        }
        seen.whole_again = covers(&seen.again, seen.length);
        if !self.last_flight.iter().all(|m| m.whole_again) {
            return Accepted::Old;
        }
        for m in &mut self.last_flight {
            m.again.clear();
            m.whole_again = false;
        }
        Accepted::Retransmitted
    }
}

/// True when a sorted, merged range list covers `[0, len)`; the caller has received at
/// least one fragment, so an empty message is covered.
fn covers(ranges: &[(usize, usize)], len: usize) -> bool {
    len == 0 || matches!(ranges, [(0, end)] if *end == len)
}

/// Adds `[start, end)` to a sorted, merged range list; false (and nothing changed) when
/// the list would grow past [`MAX_RANGES`]. An empty range adds nothing.
fn add_range(ranges: &mut Vec<(usize, usize)>, start: usize, end: usize) -> bool {
    if start >= end {
        return true;
    }
    let mut merged = (start, end);
    let mut out: Vec<(usize, usize)> = Vec::with_capacity(ranges.len() + 1);
    let mut placed = false;
    for &(s, e) in ranges.iter() {
        if e < merged.0 {
            out.push((s, e));
        } else if s > merged.1 {
            if !placed {
                out.push(merged);
                placed = true;
            }
            out.push((s, e));
        } else {
            merged = (merged.0.min(s), merged.1.max(e));
        }
    }
    if !placed {
        out.push(merged);
    }
    if out.len() > MAX_RANGES {
        return false;
    }
    *ranges = out;
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtls::HandshakeHeader;

    fn frag<'a>(seq: u16, len: u32, off: u32, body: &'a [u8]) -> HandshakeFragment<'a> {
        typed(HandshakeType::Certificate, seq, len, off, body)
    }

    fn typed<'a>(
        msg_type: HandshakeType,
        seq: u16,
        len: u32,
        off: u32,
        body: &'a [u8],
    ) -> HandshakeFragment<'a> {
        HandshakeFragment {
            header: HandshakeHeader {
                msg_type,
                length: len,
                message_seq: seq,
                fragment_offset: off,
                fragment_length: body.len() as u32,
            },
            body,
        }
    }

    #[test]
    fn reassembles_overlapping_out_of_order_fragments() {
        let mut r = Reassembler::default();
        assert_eq!(r.insert(0, 1, &frag(0, 6, 3, b"def")), Accepted::Buffered);
        assert!(r.pop().is_none());
        assert_eq!(r.insert(0, 2, &frag(0, 6, 0, b"abcd")), Accepted::Buffered);
        let m = r.pop().unwrap();
        assert_eq!(m.body, b"abcdef");
        assert_eq!(m.record_seq, 2);
        assert_eq!(r.insert(0, 9, &frag(1, 2, 1, b"b")), Accepted::Buffered);
        assert_eq!(r.insert(0, 8, &frag(1, 2, 0, b"a")), Accepted::Buffered);
        assert_eq!(r.pop().unwrap().record_seq, 9);
        r.reset_to(0);
        assert_eq!(
            r.insert(0, 2, &frag(0, 6, 0, b"abcdef")),
            Accepted::Buffered
        );
        r.pop().unwrap();
        // Old, and not of the peer's last flight (no flight of ours since): dropped.
        assert_eq!(r.insert(0, 3, &frag(0, 6, 0, b"abcdef")), Accepted::Dropped);
        // Out of order: seq 2 before seq 1.
        assert_eq!(r.insert(0, 4, &frag(2, 1, 0, b"z")), Accepted::Buffered);
        assert!(r.pop().is_none());
        assert_eq!(r.insert(0, 5, &frag(1, 0, 0, b"")), Accepted::Buffered);
        assert_eq!(r.pop().unwrap().seq, 1);
        assert_eq!(r.pop().unwrap().seq, 2);
        assert_eq!(r.next_seq(), 3);
    }

    #[test]
    fn bounds_hold() {
        let mut r = Reassembler::default();
        assert_eq!(
            r.insert(0, 0, &frag(MAX_FUTURE_MESSAGES, 1, 0, b"x")),
            Accepted::Dropped
        );
        assert_eq!(
            r.insert(0, 0, &frag(0, MAX_MESSAGE_LEN as u32 + 1, 0, b"x")),
            Accepted::Dropped
        );
        for seq in 0..4 {
            assert_eq!(
                r.insert(0, 0, &frag(seq, MAX_MESSAGE_LEN as u32, 0, b"x")),
                Accepted::Buffered
            );
        }
        assert_eq!(r.insert(0, 0, &frag(4, 10, 0, b"x")), Accepted::Dropped);
        // Inconsistent length for a known message.
        assert_eq!(r.insert(0, 0, &frag(0, 7, 0, b"x")), Accepted::Dropped);
        // Many disjoint single bytes.
        let mut r = Reassembler::default();
        for i in 0..MAX_RANGES {
            assert_eq!(
                r.insert(0, 0, &frag(0, 1000, (i * 2) as u32, b"x")),
                Accepted::Buffered
            );
        }
        assert_eq!(r.insert(0, 0, &frag(0, 1000, 900, b"x")), Accepted::Dropped);
    }

    /// An unprotected fragment that claims the Finished's message_seq does not block
    /// the protected Finished; an unprotected one cannot displace a protected one.
    #[test]
    fn later_epoch_replaces_partial_message() {
        let fin = HandshakeType::Finished;
        let mut r = Reassembler::default();
        assert_eq!(
            r.insert(0, 50, &typed(fin, 0, 12, 0, b"x")),
            Accepted::Buffered
        );
        assert!(r.pop().is_none());
        assert_eq!(
            r.insert(1, 0, &typed(fin, 0, 12, 0, &[7; 6])),
            Accepted::Buffered
        );
        assert_eq!(
            r.insert(0, 51, &typed(fin, 0, 12, 6, &[0; 6])),
            Accepted::Dropped
        );
        assert_eq!(
            r.insert(1, 1, &typed(fin, 0, 12, 6, &[7; 6])),
            Accepted::Buffered
        );
        let m = r.pop().unwrap();
        assert_eq!((m.epoch, m.record_seq, m.body), (1, 1, vec![7; 12]));
        assert_eq!(r.buffered_bytes, 0);
    }

    /// Only the peer's whole last flight, again, counts as its retransmission; the
    /// messages of earlier flights and stray bits of the last one do not.
    #[test]
    fn retransmission_is_the_whole_last_flight() {
        let mut r = Reassembler::default();
        // The peer's first flight: seq 0; we answer; its second: seq 1 (5 bytes) and
        // seq 2 (empty); we answer again.
        r.insert(0, 0, &frag(0, 3, 0, b"abc"));
        r.pop().unwrap();
        r.flight_sent();
        r.insert(0, 1, &frag(1, 5, 0, b"hello"));
        r.insert(0, 2, &typed(HandshakeType::ServerHelloDone, 2, 0, 0, b""));
        r.pop().unwrap();
        r.pop().unwrap();
        r.flight_sent();
        // The earlier flight's message: not a retransmission of the last flight.
        assert_eq!(r.insert(0, 3, &frag(0, 3, 0, b"abc")), Accepted::Dropped);
        // An empty fragment, a wrong type, length or epoch: nothing.
        assert_eq!(r.insert(0, 4, &frag(1, 5, 0, b"")), Accepted::Old);
        assert_eq!(
            r.insert(0, 5, &typed(HandshakeType::ClientHello, 1, 5, 0, b"hello")),
            Accepted::Dropped
        );
        assert_eq!(r.insert(0, 6, &frag(1, 6, 0, b"hello!")), Accepted::Dropped);
        assert_eq!(r.insert(1, 0, &frag(1, 5, 0, b"hello")), Accepted::Dropped);
        // The flight again, seq 1 in two overlapping fragments, then the empty seq 2.
        assert_eq!(r.insert(0, 7, &frag(1, 5, 0, b"hel")), Accepted::Old);
        assert_eq!(r.insert(0, 8, &frag(1, 5, 2, b"llo")), Accepted::Old);
        let done = typed(HandshakeType::ServerHelloDone, 2, 0, 0, b"");
        assert_eq!(r.insert(0, 9, &done), Accepted::Retransmitted);
        // Counting starts over for the next retransmission.
        assert_eq!(r.insert(0, 10, &done), Accepted::Old);
        assert_eq!(
            r.insert(0, 11, &frag(1, 5, 0, b"hello")),
            Accepted::Retransmitted
        );
        // A stateless answer forgets what it answered.
        r.insert(0, 12, &frag(3, 1, 0, b"z"));
        r.pop().unwrap();
        r.forget_popped();
        r.flight_sent();
        assert_eq!(r.insert(0, 13, &frag(3, 1, 0, b"z")), Accepted::Dropped);
    }
}
