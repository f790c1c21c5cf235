//! The room protocol of `scripts/interop/aiortc_room_client.py`, in Rust: the numbered
//! payloads, how a received message is recognised, and the per-participant report with
//! its checks. Kept byte-for-byte compatible with the Python client, since the two
//! check each other's messages.

use std::collections::HashSet;

/// Label of the reliable, ordered channel that also carries `ready:` and `done:`.
pub const ORDERED: &str = "ordered";
/// Label of the unordered channel (`ordered=false`, `maxRetransmits=0`).
pub const UNORDERED: &str = "unordered";

/// One data-channel message: a string (PPID "WebRTC String") or bytes ("WebRTC Binary").
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message {
    /// A string message.
    Text(String),
    /// A binary message.
    Binary(Vec<u8>),
}

impl Message {
    /// The message as received: `is_string` says which PPID it came with. A string that
    /// is not valid UTF-8 is kept lossily; it can then never match a payload.
    pub fn received(is_string: bool, data: &[u8]) -> Self {
        if is_string {
            Message::Text(String::from_utf8_lossy(data).into_owned())
        } else {
            Message::Binary(data.to_vec())
        }
    }

    /// The message's bytes (UTF-8 for a string).
    pub fn bytes(&self) -> &[u8] {
        match self {
            Message::Text(s) => s.as_bytes(),
            Message::Binary(b) => b,
        }
    }

    /// A short, printable form for error reports (at most 40 characters of content).
    pub fn preview(&self) -> String {
        match self {
            Message::Text(s) => format!("{:?}", s.chars().take(40).collect::<String>()),
            Message::Binary(b) => format!("b{:?}", String::from_utf8_lossy(&b[..b.len().min(40)])),
        }
    }
}

/// Message `i` of `sender`: a string for even `i`, bytes for odd `i`; sizes 0..~3 KB.
/// Python: `payload()` in aiortc_room_client.py.
pub fn payload(sender: &str, i: u64) -> Message {
    let size = (i * 37) % 3000;
    let prefix = format!("{sender}:{i}:");
    if i.is_multiple_of(2) {
        Message::Text(prefix + &"x".repeat(size as usize))
    } else {
        let mut bytes = prefix.into_bytes();
        bytes.extend((0..size).map(|k| ((i + k) % 251) as u8));
        Message::Binary(bytes)
    }
}

/// `(sender, index)` of a well-formed message from someone other than `me`, else `None`.
/// The sender is read from the message itself, as the Python client does, so an
/// unordered message that overtakes its sender's first `ready` is still checked.
pub fn parse_index(message: &Message, me: &str) -> Option<(String, u64)> {
    let mut parts = message.bytes().splitn(3, |&b| b == b':');
    let sender = std::str::from_utf8(parts.next()?).ok()?;
    let index = std::str::from_utf8(parts.next()?).ok()?;
    parts.next()?;
    // Python's int() also takes "+5" or " 5"; the payload comparison below rejects
    // every such spelling anyway, as it does there.
    let i: u64 = index.trim().parse().ok()?;
    if sender == me || payload(sender, i) != *message {
        return None;
    }
    Some((sender.to_owned(), i))
}

/// What one participant saw; the same fields, with the same meaning, as the JSON line
/// the Python client prints.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Who wrote this report.
    pub identity: String,
    /// The other participant, from its `ready:` message.
    pub peer: Option<String>,
    /// Data messages received on `ordered` (well-formed or not).
    pub ordered_received: u64,
    /// Everything wrong on `ordered`, and timeouts and a failed WHIP DELETE.
    pub ordered_errors: Vec<String>,
    /// Messages received on `unordered`.
    pub unordered_received: u64,
    /// Malformed or duplicated messages on `unordered`.
    pub unordered_errors: Vec<String>,
    /// Messages sent on each channel.
    pub sent: u64,
}

impl Report {
    /// Reads the Python client's report: the last line of its stdout that is a JSON
    /// object.
    pub fn from_json_output(stdout: &str) -> Result<Report, String> {
        let line = stdout
            .lines()
            .rev()
            .map(str::trim)
            .find(|l| l.starts_with('{'))
            .ok_or_else(|| format!("no JSON report in the output {stdout:?}"))?;
        let v: serde_json::Value =
            serde_json::from_str(line).map_err(|e| format!("report {line:?}: {e}"))?;
        let text = |key: &str| v.get(key).and_then(|x| x.as_str()).map(str::to_owned);
        let number = |key: &str| {
            v.get(key)
                .and_then(serde_json::Value::as_u64)
                .ok_or_else(|| format!("report {line:?}: no number {key:?}"))
        };
        let strings = |key: &str| -> Result<Vec<String>, String> {
            v.get(key)
                .and_then(|x| x.as_array())
                .ok_or_else(|| format!("report {line:?}: no list {key:?}"))?
                .iter()
                .map(|e| {
                    e.as_str()
                        .map(str::to_owned)
                        .ok_or_else(|| format!("report {line:?}: {key:?} holds {e}"))
                })
                .collect()
        };
        Ok(Report {
            identity: text("identity").ok_or_else(|| format!("report {line:?}: no identity"))?,
            peer: text("peer"),
            ordered_received: number("ordered_received")?,
            ordered_errors: strings("ordered_errors")?,
            unordered_received: number("unordered_received")?,
            unordered_errors: strings("unordered_errors")?,
            sent: number("sent")?,
        })
    }

    /// Every way this report falls short of a clean exchange of `count` messages with
    /// `peer`: the Python client's exit-status checks (every ordered message exactly
    /// once and in order, no error on either channel), plus that the peer was the one
    /// expected, all `count` messages were sent, and no more unordered messages arrived
    /// than were sent.
    pub fn failures(&self, count: u64, peer: &str) -> Vec<String> {
        let mut failures = Vec::new();
        if self.peer.as_deref() != Some(peer) {
            failures.push(format!("heard peer {:?}, expected {peer:?}", self.peer));
        }
        if self.sent != count {
            failures.push(format!("sent {} of {count}", self.sent));
        }
        if self.ordered_received != count {
            failures.push(format!(
                "received {} ordered messages, expected {count}",
                self.ordered_received
            ));
        }
        if self.unordered_received > count {
            failures.push(format!(
                "received {} unordered messages, more than the {count} sent",
                self.unordered_received
            ));
        }
        failures.extend(self.ordered_errors.iter().map(|e| format!("ordered: {e}")));
        failures.extend(
            self.unordered_errors
                .iter()
                .map(|e| format!("unordered: {e}")),
        );
        failures
    }
}

/// What a received message on `ordered` means for the exchange.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    /// The other participant said `ready:`.
    PeerHeard,
    /// The other participant said `done:`.
    PeerDone,
    /// The `count`-th data message arrived.
    AllReceived,
}

/// The receiving half of a participant: checks every message as the Python client's
/// `_on_ordered` and `_on_unordered` do, and keeps the report.
#[derive(Debug)]
pub struct Tally {
    me: String,
    count: u64,
    next_ordered: u64,
    seen_unordered: HashSet<u64>,
    /// The report so far.
    pub report: Report,
}

impl Tally {
    /// A tally for participant `me`, expecting `count` messages per channel.
    pub fn new(me: &str, count: u64) -> Self {
        Tally {
            me: me.to_owned(),
            count,
            next_ordered: 0,
            seen_unordered: HashSet::new(),
            report: Report {
                identity: me.to_owned(),
                ..Report::default()
            },
        }
    }

    /// A message received on `ordered`.
    pub fn on_ordered(&mut self, message: &Message) -> Option<Signal> {
        if let Message::Text(text) = message {
            if let Some(peer) = text.strip_prefix("ready:") {
                if peer == self.me {
                    return None;
                }
                self.report.peer = Some(peer.to_owned());
                return Some(Signal::PeerHeard);
            }
            if text.starts_with("done:") {
                return Some(Signal::PeerDone);
            }
        }
        let index = match parse_index(message, &self.me) {
            Some((sender, i)) if self.report.peer.as_deref() == Some(sender.as_str()) => Some(i),
            _ => None,
        };
        match index {
            None => self
                .report
                .ordered_errors
                .push(format!("malformed: {}", message.preview())),
            Some(i) if i != self.next_ordered => {
                self.report
                    .ordered_errors
                    .push(format!("expected {}, got {i}", self.next_ordered));
                self.next_ordered = i + 1;
            }
            Some(_) => self.next_ordered += 1,
        }
        self.report.ordered_received += 1;
        (self.report.ordered_received == self.count).then_some(Signal::AllReceived)
    }

    /// A message received on `unordered`.
    pub fn on_unordered(&mut self, message: &Message) {
        match parse_index(message, &self.me) {
            None => self
                .report
                .unordered_errors
                .push(format!("malformed: {}", message.preview())),
            Some((_, i)) if !self.seen_unordered.insert(i) => {
                self.report.unordered_errors.push(format!("duplicate {i}"));
            }
            Some(_) => {}
        }
        self.report.unordered_received += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_match_the_python_client() {
        // Values worked out from `payload()` in aiortc_room_client.py.
        assert_eq!(payload("aiortc", 0), Message::Text("aiortc:0:".into()));
        let Message::Binary(one) = payload("a", 1) else {
            panic!("odd messages are binary")
        };
        let mut expected = b"a:1:".to_vec();
        expected.extend((1u8..=37).collect::<Vec<u8>>());
        assert_eq!(one, expected);
        let Message::Text(two) = payload("webrtc-rs", 2) else {
            panic!("even messages are strings")
        };
        assert_eq!(two, format!("webrtc-rs:2:{}", "x".repeat(74)));
        // The byte pattern wraps at 251; sizes wrap at 3000.
        let Message::Binary(b) = payload("s", 299) else {
            panic!("odd messages are binary")
        };
        let prefix = b"s:299:".len();
        assert_eq!(b.len(), prefix + (299 * 37) % 3000);
        assert_eq!(b[prefix], (299 % 251) as u8);
        assert_eq!(b[prefix + 1], ((299 + 1) % 251) as u8);
        assert_eq!(payload("s", 81).bytes().len(), b"s:81:".len() + 2997);
        assert_eq!(payload("s", 82).bytes().len(), b"s:82:".len() + 34);
    }

    #[test]
    fn parse_index_accepts_only_exact_payloads_of_others() {
        for i in [0, 1, 2, 17, 81, 299] {
            assert_eq!(
                parse_index(&payload("aiortc", i), "webrtc-rs"),
                Some(("aiortc".to_owned(), i))
            );
            // Our own messages are not counted.
            assert_eq!(parse_index(&payload("aiortc", i), "aiortc"), None);
        }
        // The right bytes with the wrong type.
        let text = payload("aiortc", 2);
        assert_eq!(
            parse_index(&Message::Binary(text.bytes().to_vec()), "me"),
            None
        );
        let binary = payload("aiortc", 3);
        assert_eq!(
            parse_index(&Message::received(true, binary.bytes()), "me"),
            None
        );
        // Truncated, extended, renumbered, or not a payload at all.
        let mut short = payload("aiortc", 5).bytes().to_vec();
        short.pop();
        assert_eq!(parse_index(&Message::Binary(short), "me"), None);
        assert_eq!(parse_index(&Message::Text("aiortc:0:x".into()), "me"), None);
        assert_eq!(parse_index(&Message::Text("aiortc:+0:".into()), "me"), None);
        assert_eq!(parse_index(&Message::Text("aiortc:0".into()), "me"), None);
        assert_eq!(
            parse_index(&Message::Text("ready:aiortc".into()), "me"),
            None
        );
        assert_eq!(
            parse_index(&Message::Binary(vec![0xff, b':', b'1', b':']), "me"),
            None
        );
    }

    #[test]
    fn tally_counts_an_in_order_exchange() {
        let mut tally = Tally::new("webrtc-rs", 4);
        assert_eq!(
            tally.on_ordered(&Message::Text("ready:webrtc-rs".into())),
            None
        );
        assert_eq!(
            tally.on_ordered(&Message::Text("ready:aiortc".into())),
            Some(Signal::PeerHeard)
        );
        // The repeated `ready` is not a data message.
        assert_eq!(
            tally.on_ordered(&Message::Text("ready:aiortc".into())),
            Some(Signal::PeerHeard)
        );
        for i in 0..3 {
            assert_eq!(tally.on_ordered(&payload("aiortc", i)), None);
        }
        assert_eq!(
            tally.on_ordered(&payload("aiortc", 3)),
            Some(Signal::AllReceived)
        );
        assert_eq!(
            tally.on_ordered(&Message::Text("done:aiortc".into())),
            Some(Signal::PeerDone)
        );
        for i in [3, 0, 2] {
            tally.on_unordered(&payload("aiortc", i));
        }
        assert_eq!(tally.report.ordered_received, 4);
        assert_eq!(tally.report.unordered_received, 3);
        tally.report.sent = 4;
        assert_eq!(tally.report.failures(4, "aiortc"), Vec::<String>::new());
    }

    #[test]
    fn tally_reports_gaps_duplicates_and_strangers() {
        let mut tally = Tally::new("webrtc-rs", 10);
        tally.on_ordered(&Message::Text("ready:aiortc".into()));
        tally.on_ordered(&payload("aiortc", 0));
        tally.on_ordered(&payload("aiortc", 2));
        tally.on_ordered(&payload("aiortc", 2));
        tally.on_ordered(&payload("someone-else", 3));
        tally.on_ordered(&Message::Binary(b"garbage".to_vec()));
        assert_eq!(
            tally.report.ordered_errors,
            vec![
                "expected 1, got 2".to_owned(),
                "expected 3, got 2".to_owned(),
                format!("malformed: {}", payload("someone-else", 3).preview()),
                "malformed: b\"garbage\"".to_owned(),
            ]
        );
        tally.on_unordered(&payload("aiortc", 1));
        tally.on_unordered(&payload("aiortc", 1));
        tally.on_unordered(&payload("webrtc-rs", 4));
        assert_eq!(
            tally.report.unordered_errors,
            vec![
                "duplicate 1".to_owned(),
                format!("malformed: {}", payload("webrtc-rs", 4).preview()),
            ]
        );
        let failures = tally.report.failures(10, "aiortc");
        assert!(
            failures.iter().any(|f| f.contains("received 5 ordered")),
            "{failures:?}"
        );
        assert!(
            failures.iter().any(|f| f.contains("sent 0 of 10")),
            "{failures:?}"
        );
    }

    #[test]
    fn report_reads_the_python_json_line() {
        let out = "noise\n{\"identity\": \"aiortc\", \"peer\": \"webrtc-rs\", \"ordered_received\": 300, \
                   \"ordered_errors\": [], \"unordered_received\": 297, \"unordered_errors\": [\"duplicate 4\"], \"sent\": 300}\n";
        let report = Report::from_json_output(out).expect("a report");
        assert_eq!(
            report,
            Report {
                identity: "aiortc".into(),
                peer: Some("webrtc-rs".into()),
                ordered_received: 300,
                ordered_errors: vec![],
                unordered_received: 297,
                unordered_errors: vec!["duplicate 4".into()],
                sent: 300,
            }
        );
        assert_eq!(
            report.failures(300, "webrtc-rs"),
            vec!["unordered: duplicate 4".to_owned()]
        );
        let unheard = Report::from_json_output(
            "{\"identity\": \"aiortc\", \"peer\": null, \"ordered_received\": 0, \"ordered_errors\": [\"timed out: heard=False got=0\"], \"unordered_received\": 0, \"unordered_errors\": [], \"sent\": 0}",
        )
        .expect("a report");
        assert_eq!(unheard.peer, None);
        assert!(Report::from_json_output("Traceback (most recent call last):").is_err());
    }
}
