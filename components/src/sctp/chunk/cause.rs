//! Error causes (RFC 9260 §3.3.10), carried by ERROR and ABORT: kept as (code, bytes),
//! with typed accessors for the causes an association acts on.

use bytes::{BufMut, Bytes, BytesMut};

use super::param::{Param, WriteParam};
use super::{be16, be32};
use crate::sctp::error::SctpError;
use crate::sctp::num::{StreamId, Tsn};

/// Cause Code values (RFC 9260 §3.3.10).
pub mod cause_code {
    /// Invalid Stream Identifier (§3.3.10.1).
    pub const INVALID_STREAM_IDENTIFIER: u16 = 1;
    /// Missing Mandatory Parameter (§3.3.10.2).
    pub const MISSING_MANDATORY_PARAMETER: u16 = 2;
    /// Stale Cookie (§3.3.10.3).
    pub const STALE_COOKIE: u16 = 3;
    /// Out of Resource (§3.3.10.4).
    pub const OUT_OF_RESOURCE: u16 = 4;
    /// Unresolvable Address (§3.3.10.5).
    pub const UNRESOLVABLE_ADDRESS: u16 = 5;
    /// Unrecognized Chunk Type (§3.3.10.6).
    pub const UNRECOGNIZED_CHUNK_TYPE: u16 = 6;
    /// Invalid Mandatory Parameter (§3.3.10.7).
    pub const INVALID_MANDATORY_PARAMETER: u16 = 7;
    /// Unrecognized Parameters (§3.3.10.8).
    pub const UNRECOGNIZED_PARAMETERS: u16 = 8;
    /// No User Data (§3.3.10.9).
    pub const NO_USER_DATA: u16 = 9;
    /// Cookie Received While Shutting Down (§3.3.10.10).
    pub const COOKIE_RECEIVED_WHILE_SHUTTING_DOWN: u16 = 10;
    /// Restart of an Association with New Addresses (§3.3.10.11).
    pub const RESTART_WITH_NEW_ADDRESSES: u16 = 11;
    /// User-Initiated Abort (§3.3.10.12).
    pub const USER_INITIATED_ABORT: u16 = 12;
    /// Protocol Violation (§3.3.10.13).
    pub const PROTOCOL_VIOLATION: u16 = 13;
}

/// One error cause: its code and its Cause-Specific Information, unpadded. Any code is
/// kept; the accessors return `None` for another code or a malformed value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ErrorCause {
    /// Cause Code.
    pub code: u16,
    /// Cause-Specific Information, without padding.
    pub info: Bytes,
}

impl ErrorCause {
    /// A cause with the given code and information.
    pub fn new(code: u16, info: Bytes) -> ErrorCause {
        ErrorCause { code, info }
    }

    /// Invalid Stream Identifier (§3.3.10.1) for `stream`, reserved field zero.
    pub fn invalid_stream_identifier(stream: StreamId) -> ErrorCause {
        let [a, b] = stream.0.to_be_bytes();
        let info = Bytes::copy_from_slice(&[a, b, 0, 0]);
        ErrorCause::new(cause_code::INVALID_STREAM_IDENTIFIER, info)
    }

    /// Missing Mandatory Parameter (§3.3.10.2): the count, then each missing type.
    pub fn missing_mandatory_parameters(types: &[u16]) -> ErrorCause {
        let mut info = BytesMut::with_capacity(4 + 2 * types.len());
        info.put_u32(u32::try_from(types.len()).unwrap_or(u32::MAX));
        for t in types {
            info.put_u16(*t);
        }
        ErrorCause::new(cause_code::MISSING_MANDATORY_PARAMETER, info.freeze())
    }

    /// Stale Cookie (§3.3.10.3): how long past its lifespan the cookie was, in
    /// microseconds (saturating at the field's 32 bits).
    pub fn stale_cookie(staleness_us: u64) -> ErrorCause {
        let us = u32::try_from(staleness_us).unwrap_or(u32::MAX);
        ErrorCause::new(
            cause_code::STALE_COOKIE,
            Bytes::copy_from_slice(&us.to_be_bytes()),
        )
    }

    /// No User Data (§3.3.10.9) for the empty DATA chunk's TSN.
    pub fn no_user_data(tsn: Tsn) -> ErrorCause {
        let info = Bytes::copy_from_slice(&tsn.0.to_be_bytes());
        ErrorCause::new(cause_code::NO_USER_DATA, info)
    }

    /// Unrecognized Chunk Type (§3.3.10.6): the whole chunk, header included.
    pub fn unrecognized_chunk(chunk: Bytes) -> ErrorCause {
        ErrorCause::new(cause_code::UNRECOGNIZED_CHUNK_TYPE, chunk)
    }

    /// Protocol Violation (§3.3.10.13) with free-form additional information.
    pub fn protocol_violation(info: Bytes) -> ErrorCause {
        ErrorCause::new(cause_code::PROTOCOL_VIOLATION, info)
    }

    /// User-Initiated Abort (§3.3.10.12) with the upper layer's reason.
    pub fn user_initiated_abort(reason: Bytes) -> ErrorCause {
        ErrorCause::new(cause_code::USER_INITIATED_ABORT, reason)
    }

    /// The stream of an Invalid Stream Identifier cause (§3.3.10.1, Cause Length = 8).
    pub fn invalid_stream(&self) -> Option<StreamId> {
        (self.code == cause_code::INVALID_STREAM_IDENTIFIER && self.info.len() == 4)
            .then(|| StreamId(be16(&self.info, 0)))
    }

    /// The Measure of Staleness, in microseconds, of a Stale Cookie cause (§3.3.10.3).
    pub fn stale_cookie_staleness_us(&self) -> Option<u32> {
        (self.code == cause_code::STALE_COOKIE && self.info.len() == 4).then(|| be32(&self.info, 0))
    }

    /// The missing parameter types of a Missing Mandatory Parameter cause (§3.3.10.2):
    /// `None` unless the count matches the list.
    pub fn missing_mandatory_params(&self) -> Option<impl Iterator<Item = u16> + '_> {
        if self.code != cause_code::MISSING_MANDATORY_PARAMETER {
            return None;
        }
        let (count, list) = (self.info.get(..4)?, self.info.get(4..)?);
        let n = usize::try_from(be32(count, 0)).ok()?;
        (list.len() == n.checked_mul(2)?).then(|| {
            list.chunks_exact(2)
                .map(|p| u16::from_be_bytes([p[0], p[1]]))
        })
    }

    /// The chunk copied into an Unrecognized Chunk Type cause (§3.3.10.6).
    pub fn unrecognized_chunk_bytes(&self) -> Option<&Bytes> {
        (self.code == cause_code::UNRECOGNIZED_CHUNK_TYPE).then_some(&self.info)
    }

    /// The parameters copied into an Unrecognized Parameters cause (§3.3.10.8).
    pub fn unrecognized_parameters(&self) -> Option<&Bytes> {
        (self.code == cause_code::UNRECOGNIZED_PARAMETERS).then_some(&self.info)
    }

    /// The TSN of a No User Data cause (§3.3.10.9).
    pub fn no_user_data_tsn(&self) -> Option<Tsn> {
        (self.code == cause_code::NO_USER_DATA && self.info.len() == 4)
            .then(|| Tsn(be32(&self.info, 0)))
    }

    /// The Upper Layer Abort Reason of a User-Initiated Abort cause (§3.3.10.12).
    pub fn user_abort_reason(&self) -> Option<&Bytes> {
        (self.code == cause_code::USER_INITIATED_ABORT).then_some(&self.info)
    }

    /// The Additional Information of a Protocol Violation cause (§3.3.10.13).
    pub fn protocol_violation_info(&self) -> Option<&Bytes> {
        (self.code == cause_code::PROTOCOL_VIOLATION).then_some(&self.info)
    }
}

impl Param for ErrorCause {
    fn parse(typ: u16, value: Bytes) -> Result<Self, SctpError> {
        Ok(ErrorCause::new(typ, value))
    }
}

impl WriteParam for ErrorCause {
    fn param_type(&self) -> u16 {
        self.code
    }

    fn value_len(&self) -> usize {
        self.info.len()
    }

    fn write_value(&self, out: &mut BytesMut) {
        out.put_slice(&self.info);
    }
}
