//! Handshake message reassembly (RFC 6347 §4.2.2, §4.2.3): fragments are buffered per
//! message_seq, overlapping ranges are allowed, and complete messages come out strictly
//! in message_seq order. Everything is bounded: how far ahead of next_receive_seq a
//! message may be, how long one message may be, how many bytes are buffered in all and
//! how many disjoint ranges one message may have.

use shoal_components::dtls::{HandshakeFragment, HandshakeType};

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
    /// Its message_seq is below next_receive_seq: part of a message already processed,
    /// i.e. the peer retransmitted (§4.2.4).
    Old,
    /// Refused by a bound or inconsistent with earlier fragments of its message.
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
        matches!(self.ranges.as_slice(), [(0, end)] if *end == self.body.len())
    }
}

/// The incoming side of the handshake layer.
#[derive(Debug, Default)]
pub struct Reassembler {
    next_seq: u16,
    partial: Vec<Partial>,
    buffered_bytes: usize,
}

impl Reassembler {
    /// next_receive_seq.
    pub fn next_seq(&self) -> u16 {
        self.next_seq
    }

    /// Forgets everything and expects `seq` next (a server answering a fresh ClientHello
    /// statelessly).
    pub fn reset_to(&mut self, seq: u16) {
        self.next_seq = seq;
        self.partial.clear();
        self.buffered_bytes = 0;
    }

    /// Takes one fragment that arrived in `epoch` in the record numbered `record_seq`.
    pub fn insert(&mut self, epoch: u16, record_seq: u64, frag: &HandshakeFragment) -> Accepted {
        let h = frag.header;
        if h.message_seq < self.next_seq {
            return Accepted::Old;
        }
        if u32::from(h.message_seq) >= u32::from(self.next_seq) + u32::from(MAX_FUTURE_MESSAGES) {
            return Accepted::Dropped;
        }
        let length = h.length as usize;
        if length > MAX_MESSAGE_LEN {
            return Accepted::Dropped;
        }
        let at = match self.partial.iter().position(|p| p.seq == h.message_seq) {
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
        Some(Message {
            msg_type: p.msg_type,
            seq: p.seq,
            epoch: p.epoch,
            record_seq: p.record_seq,
            body: p.body,
        })
    }
}

/// Adds `[start, end)` to a sorted, merged range list; false (and nothing changed) when
/// the list would grow past [`MAX_RANGES`].
fn add_range(ranges: &mut Vec<(usize, usize)>, start: usize, end: usize) -> bool {
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
    use shoal_components::dtls::HandshakeHeader;

    fn frag<'a>(seq: u16, len: u32, off: u32, body: &'a [u8]) -> HandshakeFragment<'a> {
        HandshakeFragment {
            header: HandshakeHeader {
                msg_type: HandshakeType::Certificate,
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
        assert_eq!(r.insert(0, 3, &frag(0, 6, 0, b"abcdef")), Accepted::Old);
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
}
