//! [`DtlsConn`]: one DTLS association, either role. This file holds the public surface,
//! the receiving side of the record layer (epochs, anti-replay, early records, alerts)
//! and the flight timer; `client.rs` and `server.rs` hold each role's handshake steps.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use crate::dtls::{
    Alert, AlertDescription, AlertLevel, ContentType, HandshakeFragments, HandshakeHeader,
    HandshakeType, RecordHeader, Records,
};
use crate::time::Time;
use bytes::{Bytes, BytesMut};

use super::crypto::{
    DtlsCertificate, EXPLICIT_NONCE_LEN, RECORD_HEADER_LEN, RecordCipher, SrtpKeys,
    export_keying_material,
};
use super::handshake::{Expect, Handshake, Session};
use super::reassembly::{Accepted, Message, Reassembler};
use super::replay::ReplayWindow;
use super::send::{FlightItem, Sender};
use super::{DtlsConfig, DtlsError, DtlsEvent, DtlsRole, DtlsStats};

/// Epoch-1 records kept while their keys or the Finished message are missing
/// (RFC 6347 §4.1 allows buffering or discarding them).
const MAX_EARLY_RECORDS: usize = 8;
/// ... and at most this many bytes of them.
const MAX_EARLY_BYTES: usize = 16 * 1024;
/// Where a sealed record's plaintext starts.
const PLAINTEXT_AT: usize = RECORD_HEADER_LEN + EXPLICIT_NONCE_LEN;
/// The receive buffer grows by at least this much at a time, so that decrypted
/// application data slices share few allocations.
const RX_CHUNK: usize = 16 * 1024;
/// A ClientHello in an epoch-0 record numbered above this is dropped. The server
/// numbers its HelloVerifyRequest and first ServerHello from the ClientHello's record
/// sequence number (RFC 6347 §4.2.1) and counts on from there for the rest of its
/// epoch-0 records, which must not reach 2^48 (§4.1). An honest client starts each
/// epoch at 0 (§4.1) and sends a handful of ClientHellos, so this bound only meets
/// forged ones and leaves the server far more numbers than a handshake uses.
const MAX_CLIENT_HELLO_RECORD_SEQ: u64 = 1 << 32;

/// Where the association stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Handshaking,
    Connected,
    Closed,
    Failed,
}

/// One DTLS 1.2 association. See the [module documentation](super).
///
/// Errors: [`DtlsConn::handle_datagram`] returns `Err` only when that datagram made the
/// connection fail (the same error is queued as [`DtlsEvent::Failed`] and the fatal
/// alert is queued for sending). Malformed, unauthenticated, replayed or unexpected
/// records are dropped silently and counted in [`DtlsConn::stats`].
pub struct DtlsConn {
    pub(super) role: DtlsRole,
    pub(super) config: Arc<DtlsConfig>,
    pub(super) cert: Arc<DtlsCertificate>,
    pub(super) remote_fingerprint: [u8; 32],
    state: State,
    pub(super) hs: Option<Box<Handshake>>,
    session: Option<Session>,
    pub(super) send: Sender,
    pub(super) read_cipher: Option<RecordCipher>,
    replay: ReplayWindow,
    pub(super) reasm: Reassembler,
    early: Vec<Bytes>,
    /// Our last flight, kept for retransmission.
    flight: Vec<FlightItem>,
    flight_sent_at: Time,
    retransmit_at: Option<Time>,
    rto: Duration,
    /// Timer-driven retransmissions of the current flight.
    retransmits: u32,
    /// Retransmissions of the current flight prompted by the peer's (§4.2.4), which
    /// have their own budget of `max_retransmits`.
    peer_retransmits: u32,
    deadline: Time,
    last_now: Time,
    rx: BytesMut,
    events: VecDeque<DtlsEvent>,
    pub(super) stats: DtlsStats,
    /// The handshake fails unless it agrees an SRTP profile ([`DtlsConn::require_srtp`]).
    pub(super) srtp_required: bool,
}

impl DtlsConn {
    /// A new association. `random` is this side's Hello.random (32 bytes from the
    /// caller's RNG); `remote_fingerprint` the SHA-256 from the peer's SDP
    /// `a=fingerprint`. A client queues its ClientHello at once.
    pub fn new(
        role: DtlsRole,
        config: Arc<DtlsConfig>,
        cert: Arc<DtlsCertificate>,
        remote_fingerprint: [u8; 32],
        random: [u8; 32],
        now: Time,
    ) -> DtlsConn {
        let mtu = config.mtu.clamp(256, 16 * 1024);
        let expect = match role {
            DtlsRole::Client => Expect::ServerHello,
            DtlsRole::Server => Expect::ClientHello,
        };
        let mut hs = Box::new(Handshake::new(expect));
        match role {
            DtlsRole::Client => hs.client_random = random,
            DtlsRole::Server => hs.server_random = random,
        }
        let mut conn = DtlsConn {
            role,
            rto: config.retransmit_initial,
            deadline: now + config.handshake_timeout,
            config,
            cert,
            remote_fingerprint,
            state: State::Handshaking,
            hs: Some(hs),
            session: None,
            send: Sender::new(mtu),
            read_cipher: None,
            replay: ReplayWindow::default(),
            reasm: Reassembler::default(),
            early: Vec::new(),
            flight: Vec::new(),
            flight_sent_at: now,
            retransmit_at: None,
            retransmits: 0,
            peer_retransmits: 0,
            last_now: now,
            rx: BytesMut::new(),
            events: VecDeque::new(),
            stats: DtlsStats::default(),
            srtp_required: false,
        };
        let started = match role {
            DtlsRole::Client => conn.client_start(now),
            DtlsRole::Server => conn.server_init(),
        };
        if let Err(e) = started {
            conn.fail(e);
        }
        conn
    }

    /// Makes an agreed SRTP protection profile a condition of the handshake: for a
    /// session whose SDP has audio or video, which cannot go without SRTP keys. With
    /// none in common the handshake fails with [`DtlsError::NoSharedSrtpProfile`] and a
    /// fatal handshake_failure alert: as server once the ClientHello has been read
    /// (RFC 5764 §4.1.1: "If that is not acceptable, the server SHOULD return an
    /// appropriate DTLS alert"), as client when the ServerHello names none. Call it
    /// before the peer's hello arrives.
    pub fn require_srtp(&mut self) {
        self.srtp_required = true;
    }

    /// Takes one UDP datagram, which may hold several records (RFC 6347 §4.1.1).
    pub fn handle_datagram(&mut self, now: Time, datagram: &[u8]) -> Result<(), DtlsError> {
        let now = self.clamp(now);
        if !self.is_open() {
            return Ok(());
        }
        let mut peer_retransmitted = false;
        for record in Records::new(datagram) {
            let Ok(record) = record else {
                self.stats.records_malformed += 1;
                break;
            };
            self.stats.records_received += 1;
            let handled = self.handle_record(
                now,
                record.header,
                record.fragment,
                record.raw,
                &mut peer_retransmitted,
            );
            if let Err(e) = handled {
                return Err(self.fail(e));
            }
            if !self.is_open() {
                return Ok(());
            }
        }
        if let Err(e) = self.drain_early(now, &mut peer_retransmitted) {
            return Err(self.fail(e));
        }
        if peer_retransmitted {
            self.on_peer_retransmit(now);
        }
        Ok(())
    }

    /// Runs the timers: retransmits the current flight when its timer fired (RFC 6347
    /// §4.2.4) and fails the handshake when it ran out of time or retransmissions.
    pub fn handle_timeout(&mut self, now: Time) {
        let now = self.clamp(now);
        if self.state != State::Handshaking {
            return;
        }
        if now >= self.deadline {
            self.fail(DtlsError::Timeout);
            return;
        }
        let Some(at) = self.retransmit_at else {
            return;
        };
        if now < at {
            return;
        }
        if self.retransmits >= self.config.max_retransmits {
            self.fail(DtlsError::Timeout);
            return;
        }
        self.retransmits += 1;
        // §4.2.4.1: "double the value at each retransmission, up to no less than the
        // RFC 6298 maximum of 60 seconds".
        self.rto = self.rto.saturating_mul(2).min(self.config.retransmit_max);
        self.stats.retransmits_timer += 1;
        if let Err(e) = self.resend_flight(now) {
            self.fail(e);
            return;
        }
        self.retransmit_at = Some(now + self.rto);
    }

    /// When [`DtlsConn::handle_timeout`] wants to run next.
    pub fn poll_timeout(&self) -> Option<Time> {
        if self.state != State::Handshaking {
            return None;
        }
        Some(match self.retransmit_at {
            Some(at) => at.min(self.deadline),
            None => self.deadline,
        })
    }

    /// The next datagram to send (at most the MTU; records packed together).
    pub fn poll_transmit(&mut self) -> Option<Bytes> {
        let d = self.send.pop();
        self.stats.datagrams_sent = self.send.datagrams_sent;
        d
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<DtlsEvent> {
        self.events.pop_front()
    }

    /// Seals `data` into application_data records (several if it exceeds one
    /// datagram), in place in the outgoing buffer.
    pub fn send_application_data(&mut self, data: &[u8]) -> Result<(), DtlsError> {
        match self.state {
            State::Connected => self.send.write_application_data(data),
            State::Handshaking => Err(DtlsError::NotConnected),
            State::Closed | State::Failed => Err(DtlsError::Closed),
        }
    }

    /// One application_data record whose plaintext `fill` writes straight into the
    /// outgoing buffer, sealed in place (see [`Sender::write_application_with`]):
    /// at most `max_plain` bytes, capped at [`DtlsConn::max_application_plaintext`].
    /// Returns whether `fill` wrote a record.
    pub fn send_application_with(
        &mut self,
        max_plain: usize,
        fill: impl FnOnce(&mut BytesMut) -> bool,
    ) -> Result<bool, DtlsError> {
        match self.state {
            State::Connected => self.send.write_application_with(max_plain, fill),
            State::Handshaking => Err(DtlsError::NotConnected),
            State::Closed | State::Failed => Err(DtlsError::Closed),
        }
    }

    /// The most plaintext one application_data record carries in one datagram.
    pub fn max_application_plaintext(&self) -> usize {
        self.send.max_application_plaintext()
    }

    /// The next finished datagram, leaving the one still being filled open (records
    /// written next may join it); [`DtlsConn::poll_transmit`] finishes that one too.
    pub fn poll_transmit_finished(&mut self) -> Option<Bytes> {
        let d = self.send.pop_finished();
        self.stats.datagrams_sent = self.send.datagrams_sent;
        d
    }

    /// Sends close_notify (RFC 5246 §7.2.1) and closes; queues `Closed { alert: None }`.
    pub fn close(&mut self) {
        if !self.is_open() {
            return;
        }
        self.send_alert(AlertLevel::Warning, AlertDescription::CLOSE_NOTIFY);
        self.shut(State::Closed);
        self.events.push_back(DtlsEvent::Closed { alert: None });
    }

    /// True once the handshake completed and until the connection closes.
    pub fn is_connected(&self) -> bool {
        self.state == State::Connected
    }

    /// True once closed (by either side) or failed: the connection will do nothing
    /// more and its owner can drop it.
    pub fn is_closed(&self) -> bool {
        !self.is_open()
    }

    /// The role.
    pub fn role(&self) -> DtlsRole {
        self.role
    }

    /// Counters.
    pub fn stats(&self) -> DtlsStats {
        let mut s = self.stats;
        s.datagrams_sent = self.send.datagrams_sent;
        s
    }

    /// RFC 5705 keying material exporter with no context: `PRF(master_secret, label,
    /// client_random + server_random)`, `out.len()` bytes. DTLS-SRTP uses label
    /// `EXTRACTOR-dtls_srtp` (RFC 5764 §4.2).
    pub fn export_keying_material(&self, label: &[u8], out: &mut [u8]) -> Result<(), DtlsError> {
        // RFC 5705 §6: the TLS PRF's own labels "are reserved and MUST NOT be used".
        const RESERVED: [&[u8]; 4] = [
            b"client finished",
            b"server finished",
            b"master secret",
            b"key expansion",
        ];
        if RESERVED.contains(&label) {
            return Err(DtlsError::ReservedExporterLabel);
        }
        let s = match (&self.session, self.state) {
            (Some(s), State::Connected) => s,
            (_, State::Closed | State::Failed) => return Err(DtlsError::Closed),
            _ => return Err(DtlsError::NotConnected),
        };
        export_keying_material(
            s.suite.prf_hash(),
            &s.master,
            label,
            &s.client_random,
            &s.server_random,
            out,
        );
        Ok(())
    }

    fn is_open(&self) -> bool {
        matches!(self.state, State::Handshaking | State::Connected)
    }

    /// Time never runs backwards: an earlier `now` is taken as the last one.
    fn clamp(&mut self, now: Time) -> Time {
        self.last_now = self.last_now.max(now);
        self.last_now
    }

    fn handle_record(
        &mut self,
        now: Time,
        header: RecordHeader,
        fragment: &[u8],
        raw: &[u8],
        peer_retransmitted: &mut bool,
    ) -> Result<(), DtlsError> {
        match header.epoch {
            0 => self.handle_plaintext(now, header, fragment, peer_retransmitted),
            1 => self.handle_protected(now, header, raw, peer_retransmitted),
            _ => {
                self.stats.records_unexpected += 1;
                Ok(())
            }
        }
    }

    /// Epoch 0: the unprotected handshake, ChangeCipherSpec, and alerts before keys.
    fn handle_plaintext(
        &mut self,
        now: Time,
        header: RecordHeader,
        fragment: &[u8],
        peer_retransmitted: &mut bool,
    ) -> Result<(), DtlsError> {
        match header.content_type {
            ContentType::Handshake => {
                self.handle_handshake(now, 0, header.sequence_number, fragment, peer_retransmitted)
            }
            // DTLS carries the epoch in every record, so the peer's ChangeCipherSpec
            // needs no action: epoch-1 records are opened whenever keys exist, and a
            // Finished counts only when it arrived in epoch 1.
            ContentType::ChangeCipherSpec => {
                if fragment != [1] {
                    self.stats.records_unexpected += 1;
                }
                Ok(())
            }
            // An unprotected alert after the handshake is unauthenticated: ignore it.
            ContentType::Alert if self.state == State::Handshaking => {
                self.handle_alert(fragment);
                Ok(())
            }
            ContentType::Alert | ContentType::ApplicationData => {
                self.stats.records_unexpected += 1;
                Ok(())
            }
        }
    }

    /// Epoch 1: anti-replay check, then AEAD open in place, then dispatch.
    fn handle_protected(
        &mut self,
        now: Time,
        header: RecordHeader,
        raw: &[u8],
        peer_retransmitted: &mut bool,
    ) -> Result<(), DtlsError> {
        if self.must_wait(header.content_type) {
            // RFC 6347 §4.2.4: application data of the new epoch is buffered until the
            // Finished message arrives; records before keys likewise.
            let held: usize = self.early.iter().map(|r| r.len()).sum();
            if self.early.len() < MAX_EARLY_RECORDS && held + raw.len() <= MAX_EARLY_BYTES {
                self.early.push(Bytes::copy_from_slice(raw));
                self.stats.records_early_buffered += 1;
            } else {
                self.stats.records_early_dropped += 1;
            }
            return Ok(());
        }
        // §4.1.2.6: the replay check is the first check, before MAC verification.
        let seq = header.sequence_number;
        if !self.replay.check(seq) {
            self.stats.records_replayed += 1;
            return Ok(());
        }
        let Some(cipher) = &self.read_cipher else {
            return Ok(());
        };
        if self.rx.capacity() < raw.len() {
            self.rx.reserve(raw.len().max(RX_CHUNK));
        }
        self.rx.extend_from_slice(raw);
        let plain_len = match cipher.open_record(&mut self.rx[..]) {
            Ok(p) => p.len(),
            Err(_) => {
                // §4.1.2.7: invalid records are silently discarded.
                self.rx.clear();
                self.stats.records_bad_tag += 1;
                return Ok(());
            }
        };
        self.replay.update(seq);
        let record = self.rx.split().freeze();
        let plaintext = record.slice(PLAINTEXT_AT..PLAINTEXT_AT + plain_len);
        match header.content_type {
            ContentType::ApplicationData => {
                self.events.push_back(DtlsEvent::ApplicationData(plaintext));
                self.peer_has_our_finished();
                Ok(())
            }
            ContentType::Handshake => {
                self.handle_handshake(now, 1, seq, &plaintext, peer_retransmitted)
            }
            ContentType::Alert => {
                self.handle_alert(&plaintext);
                Ok(())
            }
            ContentType::ChangeCipherSpec => {
                self.stats.records_unexpected += 1;
                Ok(())
            }
        }
    }

    /// An epoch-1 record of this type cannot be processed yet: no keys, or application
    /// data before the handshake completed.
    fn must_wait(&self, content_type: ContentType) -> bool {
        self.read_cipher.is_none()
            || (content_type == ContentType::ApplicationData && self.state != State::Connected)
    }

    /// Re-runs the records kept in [`Self::early`] that can now be processed; the others
    /// stay.
    fn drain_early(&mut self, now: Time, peer_retransmitted: &mut bool) -> Result<(), DtlsError> {
        let ready = |c: &Self, raw: &Bytes| match RecordHeader::parse(raw) {
            Ok(h) => !c.must_wait(h.content_type),
            Err(_) => true,
        };
        if !self.early.iter().any(|raw| ready(self, raw)) {
            return Ok(());
        }
        let early = std::mem::take(&mut self.early);
        for raw in early {
            if !self.is_open() {
                break;
            }
            let Ok(header) = RecordHeader::parse(&raw) else {
                continue;
            };
            if self.must_wait(header.content_type) {
                self.early.push(raw);
                continue;
            }
            self.handle_protected(now, header, &raw, peer_retransmitted)?;
        }
        Ok(())
    }

    /// Handshake fragments of one record.
    fn handle_handshake(
        &mut self,
        now: Time,
        epoch: u16,
        record_seq: u64,
        plaintext: &[u8],
        peer_retransmitted: &mut bool,
    ) -> Result<(), DtlsError> {
        if self.state == State::Connected {
            self.handshake_after_connect(epoch, plaintext, peer_retransmitted);
            return Ok(());
        }
        for fragment in HandshakeFragments::new(plaintext) {
            let Ok(fragment) = fragment else {
                self.stats.handshake_fragments_dropped += 1;
                break;
            };
            let h = fragment.header;
            if !h.is_whole() {
                self.stats.handshake_partial_fragments += 1;
            }
            if self.ignored_during_handshake(epoch, record_seq, &h) {
                self.stats.handshake_fragments_dropped += 1;
                continue;
            }
            // A server waiting for ClientHello keeps no state before it (the cookie
            // exchange is stateless, RFC 6347 §4.2.1): any ClientHello starts afresh.
            let fresh_hello = self.role == DtlsRole::Server
                && self
                    .hs
                    .as_ref()
                    .is_some_and(|hs| hs.expect == Expect::ClientHello)
                && h.msg_type == HandshakeType::ClientHello
                && epoch == 0
                && h.message_seq != self.reasm.next_seq();
            if fresh_hello {
                self.reasm.reset_to(h.message_seq);
            }
            match self.reasm.insert(epoch, record_seq, &fragment) {
                Accepted::Buffered | Accepted::Old => {}
                Accepted::Retransmitted => *peer_retransmitted = true,
                Accepted::Dropped => self.stats.handshake_fragments_dropped += 1,
            }
        }
        while self.state == State::Handshaking {
            let Some(message) = self.reasm.pop() else {
                break;
            };
            self.handle_message(now, message)?;
        }
        Ok(())
    }

    /// Fragments dropped before reassembly, so that they use up no message_seq:
    /// - a HelloRequest at a client: RFC 5246 §7.4.1.1, "This message will be ignored
    ///   by the client if the client is currently negotiating a session";
    /// - a ClientHello in a record numbered above [`MAX_CLIENT_HELLO_RECORD_SEQ`], whose
    ///   number the server could not reuse for its answer.
    fn ignored_during_handshake(&self, epoch: u16, record_seq: u64, h: &HandshakeHeader) -> bool {
        match (self.role, h.msg_type) {
            (DtlsRole::Client, HandshakeType::HelloRequest) => true,
            (DtlsRole::Server, HandshakeType::ClientHello) => {
                epoch == 0 && record_seq > MAX_CLIENT_HELLO_RECORD_SEQ
            }
            _ => false,
        }
    }

    fn handle_message(&mut self, now: Time, message: Message) -> Result<(), DtlsError> {
        match self.role {
            DtlsRole::Client => self.client_message(now, message),
            DtlsRole::Server => self.server_message(now, message),
        }
    }

    /// Handshake records after the handshake: the peer retransmitting its last flight
    /// (answered with ours, §4.2.4; its Finished is in epoch 1, so only the peer can
    /// complete that flight), or a renegotiation attempt, which shoal refuses with a
    /// no_renegotiation warning (RFC 5246 §7.2.2, RFC 5746 §4.2).
    fn handshake_after_connect(
        &mut self,
        epoch: u16,
        plaintext: &[u8],
        peer_retransmitted: &mut bool,
    ) {
        let mut refuse = false;
        for fragment in HandshakeFragments::new(plaintext) {
            let Ok(fragment) = fragment else {
                self.stats.handshake_fragments_dropped += 1;
                break;
            };
            let h = fragment.header;
            match (self.role, h.msg_type) {
                (DtlsRole::Server, HandshakeType::ClientHello) if epoch == 1 => refuse = true,
                (DtlsRole::Client, HandshakeType::HelloRequest) if epoch == 1 => refuse = true,
                _ => match self.reasm.repeat(epoch, &fragment) {
                    Accepted::Retransmitted => *peer_retransmitted = true,
                    Accepted::Old | Accepted::Buffered => {}
                    Accepted::Dropped => self.stats.handshake_fragments_dropped += 1,
                },
            }
        }
        if refuse {
            self.send_alert(AlertLevel::Warning, AlertDescription::NO_RENEGOTIATION);
        }
    }

    /// An alert from the peer: close_notify and fatal alerts close the connection;
    /// other warnings are ignored.
    fn handle_alert(&mut self, plaintext: &[u8]) {
        let Ok(alert) = Alert::parse(plaintext) else {
            self.stats.records_unexpected += 1;
            return;
        };
        if alert.description == AlertDescription::CLOSE_NOTIFY {
            // RFC 5246 §7.2.1: "The other party MUST respond with a close_notify alert
            // of its own and close down the connection immediately".
            self.send_alert(AlertLevel::Warning, AlertDescription::CLOSE_NOTIFY);
        } else if alert.level == AlertLevel::Warning {
            return;
        }
        self.shut(State::Closed);
        self.events.push_back(DtlsEvent::Closed {
            alert: Some(alert.description.0),
        });
    }

    /// The peer retransmitted its whole last flight: retransmit ours (§4.2.4: "the
    /// receipt of a duplicate message is the likely result of timer expiry on the
    /// peer"). Bounded three ways, since what prompts it need not come from the peer:
    /// at most once per quarter of the initial timeout (duplicated datagrams do not
    /// multiply our flight), at most `max_retransmits` times per flight (after the
    /// handshake too, where §4.2.4 has the server answer a retransmitted flight 5),
    /// and the retransmission timer keeps its schedule. §4.2.4 resets the timer here;
    /// shoal does not, so that such prompts cannot postpone its own retransmissions.
    fn on_peer_retransmit(&mut self, now: Time) {
        if self.flight.is_empty() || !self.is_open() {
            return;
        }
        let guard = self.config.retransmit_initial / 4;
        if now < self.flight_sent_at + guard || self.peer_retransmits >= self.config.max_retransmits
        {
            return;
        }
        self.peer_retransmits += 1;
        self.stats.retransmits_peer += 1;
        if let Err(e) = self.resend_flight(now) {
            self.fail(e);
        }
    }

    /// Epoch-1 application data proves the peer has our Finished: it may send data only
    /// once it has "received and validated the Finished message from its peer" (RFC
    /// 5246 §7.4.9). The server then stops keeping flight 6 for retransmission. RFC
    /// 6347 §4.2.4 has it answer retransmissions of flight 5 "for at least twice the
    /// default MSL" because "This avoids deadlock conditions if the last flight gets
    /// lost"; once the client has our Finished, no deadlock is left to avoid. (A
    /// client that sent data before receiving our Finished, which TLS False Start, RFC
    /// 7918, allows and RFC 5246 does not, would lose this safety net.)
    fn peer_has_our_finished(&mut self) {
        if self.state == State::Connected && !self.flight.is_empty() {
            self.flight = Vec::new();
            self.reasm = Reassembler::default();
        }
    }

    fn resend_flight(&mut self, now: Time) -> Result<(), DtlsError> {
        self.send.write_flight(&self.flight)?;
        self.flight_sent_at = now;
        Ok(())
    }

    /// Sends a new flight and arms the timer when a reply is expected. §4.2.4.1: the
    /// timer value is kept after a loss, and reset only after a flight went through
    /// without retransmission.
    pub(super) fn send_flight(
        &mut self,
        now: Time,
        items: Vec<FlightItem>,
        expects_reply: bool,
    ) -> Result<(), DtlsError> {
        if self.retransmits == 0 {
            self.rto = self.config.retransmit_initial;
        }
        self.retransmits = 0;
        self.peer_retransmits = 0;
        self.reasm.flight_sent();
        self.flight = items;
        self.resend_flight(now)?;
        self.retransmit_at = expects_reply.then(|| now + self.rto);
        Ok(())
    }

    /// Writes a one-off datagram (HelloVerifyRequest) that is not kept for
    /// retransmission.
    pub(super) fn send_stateless(&mut self, items: &[FlightItem]) -> Result<(), DtlsError> {
        self.send.write_flight(items)
    }

    /// The handshake completed: keep the session, drop the handshake state, tell the
    /// owner.
    pub(super) fn connected(&mut self) -> Result<(), DtlsError> {
        let hs = self
            .hs
            .take()
            .ok_or(DtlsError::Internal("no handshake state"))?;
        let session = hs.session()?;
        let srtp = session.srtp.map(|profile| {
            SrtpKeys::derive(
                session.suite.prf_hash(),
                profile,
                &session.master,
                &session.client_random,
                &session.server_random,
            )
        });
        self.events.push_back(DtlsEvent::Connected {
            suite: session.suite,
            srtp,
            peer_fingerprint: self.remote_fingerprint,
        });
        self.session = Some(session);
        self.state = State::Connected;
        self.retransmit_at = None;
        self.reasm.finish();
        if self.role == DtlsRole::Client {
            // Only the side that sent the last flight answers retransmissions of the
            // peer's last flight (§4.2.4); in a full handshake that is the server.
            self.flight = Vec::new();
            self.reasm = Reassembler::default();
        }
        Ok(())
    }

    fn send_alert(&mut self, level: AlertLevel, description: AlertDescription) {
        if self.send.write_alert(level, description).is_ok() {
            self.stats.alerts_sent += 1;
        }
    }

    fn shut(&mut self, state: State) {
        self.state = state;
        self.hs = None;
        self.flight.clear();
        self.retransmit_at = None;
        self.early.clear();
    }

    /// Fails the connection: the fatal alert (if the error has one), the event, and the
    /// error back for the caller.
    pub(super) fn fail(&mut self, e: DtlsError) -> DtlsError {
        if !self.is_open() {
            return e;
        }
        if let Some(description) = e.alert() {
            self.send_alert(AlertLevel::Fatal, description);
        }
        self.shut(State::Failed);
        self.events.push_back(DtlsEvent::Failed(e.clone()));
        e
    }
}

impl std::fmt::Debug for DtlsConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DtlsConn")
            .field("role", &self.role)
            .field("state", &self.state)
            .field("expect", &self.hs.as_ref().map(|h| h.expect))
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}
