//! Setting an association up (RFC 9260 §5): our INIT (§5.1 A), INITs answered
//! statelessly with a State Cookie (§5.1 B, §5.1.3), the INIT ACK turned into a COOKIE
//! ECHO (§5.1 C), and the COOKIE ECHO that establishes the association or, where one
//! exists, is sorted by the cases of §5.2.4.

use bytes::{Bytes, BytesMut};

use super::{
    AssocEnd, AssocState, Effects, Inputs, STREAMS, Sctp, SctpLimits, TxSide, solo_packet,
};
use crate::sctp::Tsn;
use crate::sctp::chunk::{
    Abort, CookieAck, CookieEcho, EDMID_DTLS, ErrorCause, Init, InitAck, InitParam, OperationError,
    WriteChunk, cause_code, chunk_type, param_type,
};
use crate::sctp::cookie::{CookieContents, CookieError, VALID_COOKIE_LIFE};
use crate::sctp::rx::{Receiver, RxLimits};

impl Sctp {
    /// The association's Tie-Tags (§5.2.2), made from `nonce` the first time they
    /// are needed.
    fn tie_tags(&mut self, nonce: u64) -> u64 {
        if self.tie_tags == 0 {
            self.tie_tags = nonce.max(1);
        }
        self.tie_tags
    }

    /// §5.2.4 A: the existing association "is treated the same as if it received an
    /// ABORT chunk followed by a new COOKIE ECHO chunk". Its DATA "MAY be retained";
    /// shoal keeps none, since the streams (and the data channels on them) go with
    /// it. Congestion control starts from its initial values, as §5.2.4 asks; the
    /// caller tells the owner (`Effects::restarted`).
    fn restart(&mut self, c: &CookieContents, limits: &SctpLimits) {
        *self = Sctp::new(self.initiator, self.local_port, self.remote_port);
        self.establish(c, limits);
    }

    /// Starts the association from this side: RFC 9260 §5.1 A, INIT with our tag.
    pub fn start(&mut self, vtag: u32, initial_tsn: Tsn, limits: &SctpLimits) {
        self.my_vtag = vtag;
        self.my_initial_tsn = initial_tsn;
        self.state = AssocState::CookieWait;
        self.init_transmissions = 1;
        self.queue_init(limits);
    }

    /// Queues our INIT again (first send or a T1-init retransmission).
    pub fn queue_init(&mut self, limits: &SctpLimits) {
        let params = our_init_params(None, limits);
        let init = Init {
            initiate_tag: self.my_vtag,
            a_rwnd: limits.receive_window as u32,
            outbound_streams: STREAMS,
            inbound_streams: STREAMS,
            initial_tsn: self.my_initial_tsn,
            params: params.as_slice(),
        };
        // RFC 9260 §8.5.1 A: an INIT carries verification tag 0.
        self.solo
            .push(solo_packet(self.local_port, self.remote_port, 0, &init));
    }

    /// Queues the COOKIE ECHO again (T1-cookie retransmission).
    pub fn queue_cookie_echo(&mut self) {
        if let Some(cookie) = &self.cookie {
            CookieEcho {
                cookie: cookie.as_ref(),
            }
            .write_to(&mut self.control.scratch);
            self.control.commit();
        }
    }

    pub(super) fn establish(&mut self, c: &CookieContents, limits: &SctpLimits) {
        self.peer_vtag = c.peer_vtag;
        self.my_vtag = c.my_vtag;
        self.my_initial_tsn = c.my_initial_tsn;
        self.rx = Some(Receiver::new(
            c.peer_initial_tsn,
            rx_limits(limits, c.inbound_streams),
        ));
        self.tx = Some(TxSide::new(
            c.my_initial_tsn,
            c.peer_a_rwnd,
            c.outbound_streams,
            limits,
        ));
        self.state = AssocState::Established;
        self.cookie = None;
        self.zero_checksum_tx = limits.zero_checksum && c.peer_zero_checksum;
        self.reset.next_request_seq = c.my_initial_tsn.0;
        self.reset.peer_next_seq = c.peer_initial_tsn.0;
    }
}

/// Receive limits; `inbound_streams` is what the handshake negotiated (RFC 9260
/// §6.5: DATA on a higher stream is acknowledged and discarded).
fn rx_limits(limits: &SctpLimits, inbound_streams: u16) -> RxLimits {
    let mut rx = RxLimits::default();
    rx.reassembly.inbound_streams = u32::from(inbound_streams);
    rx.reassembly.receive_window_bytes = u32::try_from(limits.receive_window).unwrap_or(u32::MAX);
    rx.reassembly.max_message_bytes = u32::try_from(limits.max_message_size).unwrap_or(u32::MAX);
    rx
}

/// INIT and INIT ACK parameters: FORWARD TSN (RFC 3758 §3.1) and RE-CONFIG (RFC 6525
/// §5) announced as supported extensions (RFC 5061 §4.2.7), zero checksums over DTLS
/// (RFC 9653 §5.1) when configured, plus the cookie.
fn our_init_params(cookie: Option<Bytes>, limits: &SctpLimits) -> Vec<InitParam> {
    let mut params = vec![
        InitParam::SupportedExtensions(Bytes::from_static(&[
            chunk_type::FORWARD_TSN,
            chunk_type::RE_CONFIG,
        ])),
        InitParam::ForwardTsnSupported,
    ];
    if limits.zero_checksum {
        params.push(InitParam::ZeroChecksumAcceptable(EDMID_DTLS));
    }
    if let Some(c) = cookie {
        params.push(InitParam::StateCookie(c));
    }
    params
}

pub(super) fn on_init(a: &mut Sctp, init: &Init, inp: &Inputs) {
    if init.validate().is_err() {
        return;
    }
    // RFC 9260 §5.1 B: when closed, a new tag and TSN and no Tie-Tags. §5.2.1: in
    // COOKIE-WAIT or COOKIE-ECHOED our own tag and TSN unchanged, and in COOKIE-ECHOED
    // our Tie-Tags. §5.2.2: with an association up, a new Initiate Tag and our
    // Tie-Tags in the cookie, and the association itself unchanged ("MUST NOT be
    // changed"): the COOKIE ECHO of that cookie is the peer's restart (§5.2.4 A).
    let (my_vtag, my_tsn, tie_tags) = match a.state {
        AssocState::Closed => (inp.fresh.0, inp.fresh.1, 0),
        AssocState::CookieWait => (a.my_vtag, a.my_initial_tsn, 0),
        AssocState::CookieEchoed => (a.my_vtag, a.my_initial_tsn, a.tie_tags(inp.nonce)),
        AssocState::Established
        | AssocState::ShutdownPending
        | AssocState::ShutdownSent
        | AssocState::ShutdownReceived => (inp.fresh.0, inp.fresh.1, a.tie_tags(inp.nonce)),
        // RFC 9260 §9.2: in SHUTDOWN-ACK-SENT an INIT (our SHUTDOWN COMPLETE may be
        // lost) is discarded and the SHUTDOWN ACK sent again.
        AssocState::ShutdownAckSent => {
            a.queue_shutdown_ack();
            return;
        }
    };
    if a.state == AssocState::Closed {
        a.my_vtag = my_vtag;
        a.my_initial_tsn = my_tsn;
    }
    let contents = CookieContents {
        created: inp.now,
        lifespan: VALID_COOKIE_LIFE,
        src_port: a.local_port,
        dst_port: a.remote_port,
        my_vtag,
        peer_vtag: init.initiate_tag,
        my_initial_tsn: my_tsn,
        peer_initial_tsn: init.initial_tsn,
        peer_a_rwnd: init.a_rwnd,
        outbound_streams: STREAMS.min(init.inbound_streams),
        inbound_streams: STREAMS.min(init.outbound_streams),
        peer_forward_tsn: init.forward_tsn_supported(),
        peer_reconfig: init.supports_chunk(chunk_type::RE_CONFIG),
        peer_zero_checksum: init.zero_checksum_method() == Some(EDMID_DTLS),
        tie_tags,
    };
    let mut cookie = BytesMut::new();
    inp.cookie_key.write(&contents, &mut cookie);
    let params = our_init_params(Some(cookie.freeze()), inp.limits);
    let ack = InitAck {
        initiate_tag: my_vtag,
        a_rwnd: inp.limits.receive_window as u32,
        outbound_streams: STREAMS,
        inbound_streams: STREAMS,
        initial_tsn: my_tsn,
        params: params.as_slice(),
    };
    // §8.5.1: the INIT ACK carries the INIT's Initiate Tag.
    a.solo.push(solo_packet(
        a.local_port,
        a.remote_port,
        init.initiate_tag,
        &ack,
    ));
}

pub(super) fn on_init_ack(a: &mut Sctp, ack: &InitAck, inp: &Inputs) {
    if a.state != AssocState::CookieWait || ack.validate().is_err() {
        return; // §5.2.3: an INIT ACK anywhere else is discarded
    }
    let Some(cookie) = ack.state_cookie() else {
        // RFC 9260 §5.1: an INIT ACK missing a mandatory parameter (the State Cookie,
        // §3.3.3) "SHOULD" be answered with ABORT naming it (§3.3.10.2), and "The
        // Verification Tag field in the common header of the outbound SCTP packet
        // containing the ABORT chunk MUST be set to the Initiate Tag value of the
        // received INIT or INIT ACK chunk": the peer's own tag, so the T bit is clear
        // (§8.5.1 B).
        let causes = [ErrorCause::missing_mandatory_parameters(&[
            param_type::STATE_COOKIE,
        ])];
        let abort = Abort {
            t_bit: false,
            causes: causes.as_slice(),
        };
        let packet = solo_packet(a.local_port, a.remote_port, ack.initiate_tag, &abort);
        a.solo.push(packet);
        a.end(AssocEnd::ProtocolViolation);
        return;
    };
    a.peer_vtag = ack.initiate_tag;
    a.rx = Some(Receiver::new(
        ack.initial_tsn,
        rx_limits(inp.limits, STREAMS.min(ack.outbound_streams)),
    ));
    a.tx = Some(TxSide::new(
        a.my_initial_tsn,
        ack.a_rwnd,
        STREAMS.min(ack.inbound_streams),
        inp.limits,
    ));
    a.cookie = Some(cookie);
    // RFC 9653 §5.2: zero checksums go only to a peer that announced a method we use.
    a.zero_checksum_tx = inp.limits.zero_checksum && ack.zero_checksum_method() == Some(EDMID_DTLS);
    a.reset.next_request_seq = a.my_initial_tsn.0;
    a.reset.peer_next_seq = ack.initial_tsn.0;
    a.queue_cookie_echo();
    a.state = AssocState::CookieEchoed;
    a.init_transmissions = 1;
}

/// RFC 9260 §5.1.5 and the §5.2.4 cases shoal supports. False: drop the packet.
pub(super) fn on_cookie_echo(
    a: &mut Sctp,
    vtag: u32,
    cookie: &Bytes,
    inp: &Inputs,
    fx: &mut Effects,
) -> bool {
    let (c, stale) = match inp.cookie_key.read(cookie, inp.now) {
        Ok(c) => (c, None),
        Err(CookieError::Stale {
            staleness_us,
            contents,
        }) => (contents, Some(staleness_us)),
        Err(CookieError::BadMac) | Err(CookieError::Malformed) => {
            fx.dropped = true;
            return false;
        }
    };
    // §5.1.5 step 3: ports and the packet's tag must match the cookie.
    if c.my_vtag != vtag || c.src_port != a.local_port || c.dst_port != a.remote_port {
        fx.dropped = true;
        return false;
    }
    if let Some(staleness_us) = stale {
        // §5.2.4 step 3: a stale cookie whose tags both match the association is
        // case E, valid all the same.
        let case_e = a.state == AssocState::Established
            && c.my_vtag == a.my_vtag
            && c.peer_vtag == a.peer_vtag;
        if !case_e {
            // §5.1.5 step 4 (and §5.2.4 step 3 for cases C and D): discard the
            // packet, DATA included, and "MUST transmit an ERROR chunk with a Stale
            // Cookie error cause", in a packet carrying the peer's tag from the
            // cookie (§8.5).
            let causes = [ErrorCause::stale_cookie(staleness_us)];
            let error = OperationError {
                causes: causes.as_slice(),
            };
            a.solo.push(solo_packet(
                a.local_port,
                a.remote_port,
                c.peer_vtag,
                &error,
            ));
            fx.dropped = true;
            return false;
        }
    }
    // §5.2.4 A: neither tag is the association's, but its Tie-Tags are.
    let restart = c.my_vtag != a.my_vtag
        && c.peer_vtag != a.peer_vtag
        && c.tie_tags != 0
        && c.tie_tags == a.tie_tags;
    match a.state {
        AssocState::Closed | AssocState::CookieWait | AssocState::CookieEchoed => {
            a.establish(&c, inp.limits);
            fx.established = true;
        }
        AssocState::Established
        | AssocState::ShutdownPending
        | AssocState::ShutdownSent
        | AssocState::ShutdownReceived
            if restart =>
        {
            a.restart(&c, inp.limits);
            fx.restarted = true;
        }
        // "If the endpoint is in the SHUTDOWN-ACK-SENT state and recognizes that the
        // peer has restarted (Action A), it MUST NOT set up a new association but
        // instead resend the SHUTDOWN ACK chunk and send an ERROR chunk with a
        // 'Cookie Received While Shutting Down' error cause to its peer."
        AssocState::ShutdownAckSent if restart => {
            a.queue_shutdown_ack();
            let causes = [ErrorCause::new(
                cause_code::COOKIE_RECEIVED_WHILE_SHUTTING_DOWN,
                Bytes::new(),
            )];
            OperationError {
                causes: causes.as_slice(),
            }
            .write_to(&mut a.control.scratch);
            a.control.commit();
            fx.shutdown_acked = true;
            return false;
        }
        // §5.2.4 case D: tags match the existing association: just acknowledge.
        AssocState::Established if c.my_vtag == a.my_vtag && c.peer_vtag == a.peer_vtag => {}
        // §5.2.4 case B: our tag, another of the peer's (a collision's late cookie):
        // "MUST update its peer's Verification Tag from the State Cookie, stop any
        // T1-init or T1-cookie timers that might be running, and send a COOKIE ACK".
        AssocState::Established if c.my_vtag == a.my_vtag => a.peer_vtag = c.peer_vtag,
        // Any other case (C, and A or B in SHUTDOWN-SENT or SHUTDOWN-RECEIVED beyond
        // the restart above) "SHOULD be silently discarded".
        _ => return false,
    }
    CookieAck.write_to(&mut a.control.scratch);
    a.control.commit();
    true
}

/// Stale Cookie errors one setup answers with a new INIT before it gives up.
pub const MAX_STALE_COOKIES: u8 = 4;

/// §5.2.6: an ERROR with a Stale Cookie cause while COOKIE-ECHOED ("In all cases, if
/// the association is not in the COOKIE-ECHOED state, the ERROR chunk SHOULD be
/// silently discarded"). The first alternative: a new INIT for a new cookie; after
/// [`MAX_STALE_COOKIES`] of them the second: the setup fails and is reported, so a
/// peer whose cookies always go stale cannot keep the setup going forever.
pub(super) fn on_stale_cookie(a: &mut Sctp, limits: &SctpLimits) {
    if a.state != AssocState::CookieEchoed {
        return;
    }
    a.stale_cookies = a.stale_cookies.saturating_add(1);
    if a.stale_cookies > MAX_STALE_COOKIES {
        a.give_up(AssocEnd::SetupFailed);
        return;
    }
    // Back to COOKIE-WAIT with our tag and TSN; the INIT ACK makes both sides anew.
    a.state = AssocState::CookieWait;
    a.cookie = None;
    a.peer_vtag = 0;
    a.rx = None;
    a.tx = None;
    a.control = super::ControlQueue::default();
    a.queue_init(limits);
}
