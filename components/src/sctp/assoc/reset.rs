//! Stream reconfiguration (RFC 6525), which closes data channels (RFC 8831 §6.7):
//! resetting our outgoing streams once their queued data has gone, answering the
//! peer's requests in sequence, and what the data-channel layer learns of both.

use bytes::{Bytes, BytesMut};

use super::{AssocState, STREAMS, Sctp};
use crate::sctp::StreamId;
use crate::sctp::Tsn;
use crate::sctp::chunk::{ReConfig, ReconfigParam, ReconfigResult, WriteChunk};
use crate::sctp::rx::ResetProgress;

/// RFC 6525 §5.2: a request to reset the peer's outgoing (our incoming) streams, or
/// the response to ours.
pub(super) fn on_reconfig(a: &mut Sctp, rc: &ReConfig) {
    // SHUTDOWN-PENDING too: a reset of ours in flight still needs its response,
    // and the peer's requests their answers, until our SHUTDOWN goes.
    if !matches!(
        a.state,
        AssocState::Established | AssocState::ShutdownPending
    ) {
        return;
    }
    for param in rc.params.iter() {
        match param {
            ReconfigParam::OutgoingSsnReset {
                request_seq,
                last_tsn,
                streams,
                ..
            } => {
                let streams: Vec<StreamId> = streams.iter().collect();
                on_reset_request(a, request_seq, last_tsn, &streams);
            }
            ReconfigParam::Response {
                response_seq,
                result,
                ..
            } => {
                on_reset_response(a, response_seq, result);
            }
            // Incoming-stream, SSN/TSN and add-stream requests are not supported.
            ReconfigParam::IncomingSsnReset { request_seq, .. }
            | ReconfigParam::SsnTsnReset { request_seq }
            | ReconfigParam::AddOutgoingStreams { request_seq, .. }
            | ReconfigParam::AddIncomingStreams { request_seq, .. } => {
                if !repeat_or_bad_seq(a, request_seq) {
                    // A final answer: the next request is expected after it.
                    a.reset.peer_next_seq = request_seq.wrapping_add(1);
                    respond(a, request_seq, ReconfigResult::DENIED);
                }
            }
            ReconfigParam::Unknown { .. } => {}
        }
    }
}

pub(super) fn on_reset_request(a: &mut Sctp, seq: u32, last_tsn: Tsn, streams: &[StreamId]) {
    if repeat_or_bad_seq(a, seq) {
        return;
    }
    let Some(rx) = a.rx.as_mut() else { return };
    // §5.2.2: performed once everything up to the sender's last TSN has arrived;
    // until then "in progress", and the sender asks again.
    let result = match rx.reset_streams(streams, last_tsn) {
        Ok(ResetProgress::Performed) => {
            // A reset done here leaves no "performed" flag for a later request.
            rx.take_reset_performed();
            a.reset.peer_next_seq = seq.wrapping_add(1);
            note_incoming_reset(&mut a.reset.incoming_done, streams);
            ReconfigResult::SUCCESS_PERFORMED
        }
        // A repeat of a deferred request: done if the receive side has caught up.
        Err(_) if rx.take_reset_performed() => {
            a.reset.peer_next_seq = seq.wrapping_add(1);
            note_incoming_reset(&mut a.reset.incoming_done, streams);
            ReconfigResult::SUCCESS_PERFORMED
        }
        Ok(ResetProgress::Deferred) | Err(_) => ReconfigResult::IN_PROGRESS,
    };
    respond(a, seq, result);
}

/// Tells the datachannel pass which incoming streams a performed reset covered.
/// RFC 6525 §5.2.2 E3: "If no stream numbers are listed in the parameter, then all
/// incoming streams MUST be reset", so an empty list names every stream we offered
/// (rare, and bounded by [`STREAMS`]).
fn note_incoming_reset(done: &mut Vec<StreamId>, streams: &[StreamId]) {
    if streams.is_empty() {
        done.extend((0..STREAMS).map(StreamId));
    } else {
        done.extend_from_slice(streams);
    }
}

/// RFC 6525 §5.2.1: a repeat of the last request gets the same answer again, and a
/// request that is neither the expected one nor that repeat gets "bad sequence
/// number" (not remembered as the last answer). True when the request was handled.
fn repeat_or_bad_seq(a: &mut Sctp, seq: u32) -> bool {
    if seq == a.reset.peer_next_seq {
        return false;
    }
    match &a.reset.last_response {
        Some((last_seq, bytes)) if *last_seq == seq => {
            let bytes = bytes.clone();
            a.control.push(bytes);
        }
        _ => {
            let last = a.reset.last_response.take();
            respond(a, seq, ReconfigResult::ERROR_BAD_SEQUENCE_NUMBER);
            a.reset.last_response = last;
        }
    }
    true
}

fn respond(a: &mut Sctp, seq: u32, result: ReconfigResult) {
    let param: ReconfigParam<&[StreamId]> = ReconfigParam::Response {
        response_seq: seq,
        result,
        next_tsns: None,
    };
    let bytes = encode_reconfig(param);
    a.control.push(bytes.clone());
    a.reset.last_response = Some((seq, bytes));
}

pub(super) fn on_reset_response(a: &mut Sctp, seq: u32, result: ReconfigResult) {
    let Some((ours, streams, _)) = &a.reset.in_flight else {
        return;
    };
    if *ours != seq {
        return;
    }
    match result {
        ReconfigResult::IN_PROGRESS => {} // the reconfig timer asks again
        r => {
            let streams = streams.clone();
            if let Some(tx) = a.tx.as_mut() {
                if r == ReconfigResult::SUCCESS_PERFORMED
                    || r == ReconfigResult::SUCCESS_NOTHING_TO_DO
                {
                    tx.queue.commit_reset(&streams);
                } else {
                    tx.queue.rollback_reset(&streams);
                }
            }
            // Whatever the answer, the channel is gone from our side.
            a.reset.outgoing_done.extend_from_slice(&streams);
            a.reset.in_flight = None;
        }
    }
}

/// Sends our reset request for the wanted streams whose queued data has gone
/// (RFC 6525 §5.1.2), if none is in flight. True when a request went out.
pub fn maybe_request_reset(a: &mut Sctp) -> bool {
    if a.reset.in_flight.is_some()
        || a.reset.wanted.is_empty()
        || a.state != AssocState::Established
    {
        return false;
    }
    let Some(tx) = a.tx.as_mut() else {
        return false;
    };
    let mut ready = Vec::new();
    tx.queue.take_streams_ready_to_reset(&mut ready);
    if ready.is_empty() {
        return false;
    }
    a.reset.wanted.retain(|s| !ready.contains(s));
    let last_tsn = tx.outstanding.next_tsn().prev();
    tx.outstanding.begin_stream_reset();
    let seq = a.reset.next_request_seq;
    a.reset.next_request_seq = seq.wrapping_add(1);
    let param = ReconfigParam::OutgoingSsnReset {
        request_seq: seq,
        response_seq: a.reset.peer_next_seq.wrapping_sub(1),
        last_tsn,
        streams: ready.as_slice(),
    };
    let bytes = encode_reconfig(param);
    a.control.push(bytes.clone());
    a.reset.in_flight = Some((seq, ready, bytes));
    true
}

/// Re-sends our reset request (the reconfig timer fired, or the answer was "in
/// progress").
pub fn resend_reset(a: &mut Sctp) -> bool {
    match &a.reset.in_flight {
        Some((_, _, bytes)) => {
            a.control.push(bytes.clone());
            true
        }
        None => false,
    }
}

/// One RE-CONFIG chunk carrying `param` (RFC 6525 §3.1), encoded.
pub(super) fn encode_reconfig(param: ReconfigParam<&[StreamId]>) -> Bytes {
    let params = [param];
    let chunk = ReConfig {
        params: params.as_slice(),
    };
    let mut buf = BytesMut::with_capacity(chunk.padded_len());
    chunk.write_to(&mut buf);
    buf.freeze()
}
