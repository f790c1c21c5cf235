//! RE-CONFIG (RFC 6525 §3.1) and its parameters (§4.1–§4.6): stream resets, SSN/TSN
//! reset, adding streams, and responses. WebRTC closes a data channel by resetting its
//! stream (RFC 8831 §6.7).

use bytes::{BufMut, Bytes, BytesMut};

use super::param::{Param, ParamList, Params, WriteParam, param_type as pt};
use super::{
    CHUNK_HEADER_LEN, Header, WriteChunk, be16, be32, chunk_type, put_chunk_header, put_padding,
};
use crate::sctp::error::SctpError;
use crate::sctp::num::{StreamId, Tsn};

/// RFC 6525 §3.1 allows one or two parameters per RE-CONFIG chunk.
const MAX_RECONFIG_PARAMS: usize = 2;

/// A RE-CONFIG chunk. `P` is the parameter list: [`Params`] as parsed,
/// `&[ReconfigParam<&[StreamId]>]` to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReConfig<P = Params<ReconfigParam>> {
    /// One or two re-configuration parameters (RFC 6525 §3.1 lists which pairs).
    pub params: P,
}

impl ReConfig {
    pub(crate) fn parse(h: Header, value: Bytes) -> Result<ReConfig, SctpError> {
        let params = Params::parse(value, h.typ, MAX_RECONFIG_PARAMS)?;
        if params.is_empty() {
            return Err(SctpError::MissingParameter { chunk: h.typ });
        }
        Ok(ReConfig { params })
    }
}

impl<P: ParamList> WriteChunk for ReConfig<P> {
    fn encoded_len(&self) -> usize {
        CHUNK_HEADER_LEN + self.params.encoded_len()
    }

    fn write_to(&self, out: &mut BytesMut) {
        let len = self.encoded_len();
        put_chunk_header(out, chunk_type::RE_CONFIG, 0, len);
        self.params.write_to(out);
        put_padding(out, len);
    }
}

/// The Result field of a Re-configuration Response (RFC 6525 §4.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ReconfigResult(pub u32);

impl ReconfigResult {
    /// Success - Nothing to do.
    pub const SUCCESS_NOTHING_TO_DO: ReconfigResult = ReconfigResult(0);
    /// Success - Performed.
    pub const SUCCESS_PERFORMED: ReconfigResult = ReconfigResult(1);
    /// Denied.
    pub const DENIED: ReconfigResult = ReconfigResult(2);
    /// Error - Wrong SSN.
    pub const ERROR_WRONG_SSN: ReconfigResult = ReconfigResult(3);
    /// Error - Request already in progress.
    pub const ERROR_REQUEST_ALREADY_IN_PROGRESS: ReconfigResult = ReconfigResult(4);
    /// Error - Bad Sequence Number.
    pub const ERROR_BAD_SEQUENCE_NUMBER: ReconfigResult = ReconfigResult(5);
    /// In progress.
    pub const IN_PROGRESS: ReconfigResult = ReconfigResult(6);
}

/// A list of stream identifiers inside a reset request: a received view or a slice.
pub trait StreamIdList {
    /// Number of streams.
    fn count(&self) -> usize;
    /// Appends them, 2 bytes each.
    fn write_to(&self, out: &mut BytesMut);
}

/// The stream numbers of a received reset request; empty means "all streams".
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct StreamList(Bytes);

impl StreamList {
    /// The streams in packet order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = StreamId> + '_ {
        self.0
            .chunks_exact(2)
            .map(|p| StreamId(u16::from_be_bytes([p[0], p[1]])))
    }

    /// Number of streams.
    pub fn len(&self) -> usize {
        self.0.len() / 2
    }

    /// True when the request names no stream, i.e. all of them (RFC 6525 §4.1, §4.2).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn parse(typ: u16, raw: Bytes) -> Result<StreamList, SctpError> {
        if !raw.len().is_multiple_of(2) {
            return Err(SctpError::BadParameter { typ });
        }
        Ok(StreamList(raw))
    }
}

impl StreamIdList for StreamList {
    fn count(&self) -> usize {
        self.len()
    }

    fn write_to(&self, out: &mut BytesMut) {
        out.put_slice(&self.0);
    }
}

impl StreamIdList for &[StreamId] {
    fn count(&self) -> usize {
        self.len()
    }

    fn write_to(&self, out: &mut BytesMut) {
        for s in self.iter() {
            out.put_u16(s.0);
        }
    }
}

/// A RE-CONFIG parameter. `S` is the stream list of the reset requests: [`StreamList`]
/// as parsed, `&[StreamId]` to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReconfigParam<S = StreamList> {
    /// Outgoing SSN Reset Request (RFC 6525 §4.1): the sender resets its outgoing
    /// streams once every TSN up to `last_tsn` is received.
    OutgoingSsnReset {
        /// Re-configuration Request Sequence Number.
        request_seq: u32,
        /// Re-configuration Response Sequence Number: the incoming request this answers.
        response_seq: u32,
        /// Sender's Last Assigned TSN.
        last_tsn: Tsn,
        /// The streams to reset; empty means all.
        streams: S,
    },
    /// Incoming SSN Reset Request (RFC 6525 §4.2): asks the peer to reset its outgoing
    /// streams.
    IncomingSsnReset {
        /// Re-configuration Request Sequence Number.
        request_seq: u32,
        /// The streams to reset; empty means all.
        streams: S,
    },
    /// SSN/TSN Reset Request (RFC 6525 §4.3).
    SsnTsnReset {
        /// Re-configuration Request Sequence Number.
        request_seq: u32,
    },
    /// Re-configuration Response (RFC 6525 §4.4).
    Response {
        /// Re-configuration Response Sequence Number: the request answered.
        response_seq: u32,
        /// What became of the request.
        result: ReconfigResult,
        /// Sender's Next TSN and Receiver's Next TSN, present only in answer to an
        /// SSN/TSN Reset Request.
        next_tsns: Option<(Tsn, Tsn)>,
    },
    /// Add Outgoing Streams Request (RFC 6525 §4.5).
    AddOutgoingStreams {
        /// Re-configuration Request Sequence Number.
        request_seq: u32,
        /// Number of new streams.
        new_streams: u16,
    },
    /// Add Incoming Streams Request (RFC 6525 §4.6).
    AddIncomingStreams {
        /// Re-configuration Request Sequence Number.
        request_seq: u32,
        /// Number of new streams.
        new_streams: u16,
    },
    /// Any other parameter type; the receiver applies [`super::unknown_param_action`].
    Unknown {
        /// The Parameter Type.
        typ: u16,
        /// The Parameter Value, without padding.
        value: Bytes,
    },
}

impl Param for ReconfigParam {
    fn parse(typ: u16, value: Bytes) -> Result<Self, SctpError> {
        let bad = SctpError::BadParameter { typ };
        let v = &value[..];
        Ok(match typ {
            // §4.1: Parameter Length = 16 + 2 * N.
            pt::OUTGOING_SSN_RESET_REQUEST if v.len() >= 12 => ReconfigParam::OutgoingSsnReset {
                request_seq: be32(v, 0),
                response_seq: be32(v, 4),
                last_tsn: Tsn(be32(v, 8)),
                streams: StreamList::parse(typ, value.slice(12..))?,
            },
            // §4.2: Parameter Length = 8 + 2 * N.
            pt::INCOMING_SSN_RESET_REQUEST if v.len() >= 4 => ReconfigParam::IncomingSsnReset {
                request_seq: be32(v, 0),
                streams: StreamList::parse(typ, value.slice(4..))?,
            },
            // §4.3: Parameter Length = 8.
            pt::SSN_TSN_RESET_REQUEST if v.len() == 4 => ReconfigParam::SsnTsnReset {
                request_seq: be32(v, 0),
            },
            // §4.4: Parameter Length = 12, or 20 with both next TSNs.
            pt::RECONFIG_RESPONSE if v.len() == 8 || v.len() == 16 => ReconfigParam::Response {
                response_seq: be32(v, 0),
                result: ReconfigResult(be32(v, 4)),
                next_tsns: (v.len() == 16).then(|| (Tsn(be32(v, 8)), Tsn(be32(v, 12)))),
            },
            // §4.5, §4.6: Parameter Length = 12; the reserved field is ignored.
            pt::ADD_OUTGOING_STREAMS_REQUEST if v.len() == 8 => ReconfigParam::AddOutgoingStreams {
                request_seq: be32(v, 0),
                new_streams: be16(v, 4),
            },
            pt::ADD_INCOMING_STREAMS_REQUEST if v.len() == 8 => ReconfigParam::AddIncomingStreams {
                request_seq: be32(v, 0),
                new_streams: be16(v, 4),
            },
            pt::OUTGOING_SSN_RESET_REQUEST
            | pt::INCOMING_SSN_RESET_REQUEST
            | pt::SSN_TSN_RESET_REQUEST
            | pt::RECONFIG_RESPONSE
            | pt::ADD_OUTGOING_STREAMS_REQUEST
            | pt::ADD_INCOMING_STREAMS_REQUEST => return Err(bad),
            _ => ReconfigParam::Unknown { typ, value },
        })
    }
}

impl<S: StreamIdList> WriteParam for ReconfigParam<S> {
    fn param_type(&self) -> u16 {
        match self {
            ReconfigParam::OutgoingSsnReset { .. } => pt::OUTGOING_SSN_RESET_REQUEST,
            ReconfigParam::IncomingSsnReset { .. } => pt::INCOMING_SSN_RESET_REQUEST,
            ReconfigParam::SsnTsnReset { .. } => pt::SSN_TSN_RESET_REQUEST,
            ReconfigParam::Response { .. } => pt::RECONFIG_RESPONSE,
            ReconfigParam::AddOutgoingStreams { .. } => pt::ADD_OUTGOING_STREAMS_REQUEST,
            ReconfigParam::AddIncomingStreams { .. } => pt::ADD_INCOMING_STREAMS_REQUEST,
            ReconfigParam::Unknown { typ, .. } => *typ,
        }
    }

    fn value_len(&self) -> usize {
        match self {
            ReconfigParam::OutgoingSsnReset { streams, .. } => 12 + 2 * streams.count(),
            ReconfigParam::IncomingSsnReset { streams, .. } => 4 + 2 * streams.count(),
            ReconfigParam::SsnTsnReset { .. } => 4,
            ReconfigParam::Response { next_tsns, .. } => 8 + 8 * usize::from(next_tsns.is_some()),
            ReconfigParam::AddOutgoingStreams { .. } | ReconfigParam::AddIncomingStreams { .. } => {
                8
            }
            ReconfigParam::Unknown { value, .. } => value.len(),
        }
    }

    fn write_value(&self, out: &mut BytesMut) {
        match self {
            ReconfigParam::OutgoingSsnReset {
                request_seq,
                response_seq,
                last_tsn,
                streams,
            } => {
                out.put_u32(*request_seq);
                out.put_u32(*response_seq);
                out.put_u32(last_tsn.0);
                streams.write_to(out);
            }
            ReconfigParam::IncomingSsnReset {
                request_seq,
                streams,
            } => {
                out.put_u32(*request_seq);
                streams.write_to(out);
            }
            ReconfigParam::SsnTsnReset { request_seq } => out.put_u32(*request_seq),
            ReconfigParam::Response {
                response_seq,
                result,
                next_tsns,
            } => {
                out.put_u32(*response_seq);
                out.put_u32(result.0);
                if let Some((sender, receiver)) = next_tsns {
                    out.put_u32(sender.0);
                    out.put_u32(receiver.0);
                }
            }
            ReconfigParam::AddOutgoingStreams {
                request_seq,
                new_streams,
            }
            | ReconfigParam::AddIncomingStreams {
                request_seq,
                new_streams,
            } => {
                out.put_u32(*request_seq);
                out.put_u16(*new_streams);
                out.put_u16(0);
            }
            ReconfigParam::Unknown { value, .. } => out.put_slice(value),
        }
    }
}
