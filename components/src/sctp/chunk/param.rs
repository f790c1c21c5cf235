//! Type-Length-Value parameters (RFC 9260 §3.2.1), the shape of INIT parameters, error
//! causes and RE-CONFIG parameters alike: a validated zero-copy list and a writer.

use std::fmt;
use std::marker::PhantomData;

use bytes::{BufMut, Bytes, BytesMut};

use super::{UnknownAction, action_from_bits, be16, pad4};
use crate::sctp::error::SctpError;

/// Parameter Type values used by the chunks this module knows.
pub mod param_type {
    /// Heartbeat Info (RFC 9260 §3.3.5).
    pub const HEARTBEAT_INFO: u16 = 1;
    /// IPv4 Address (RFC 9260 §3.3.2.1.1).
    pub const IPV4_ADDRESS: u16 = 5;
    /// IPv6 Address (RFC 9260 §3.3.2.1.2).
    pub const IPV6_ADDRESS: u16 = 6;
    /// State Cookie (RFC 9260 §3.3.3.1.1).
    pub const STATE_COOKIE: u16 = 7;
    /// Unrecognized Parameter (RFC 9260 §3.3.3.1.2).
    pub const UNRECOGNIZED_PARAMETER: u16 = 8;
    /// Cookie Preservative (RFC 9260 §3.3.2.1.3).
    pub const COOKIE_PRESERVATIVE: u16 = 9;
    /// Host Name Address, deprecated (RFC 9260 §3.3.2.1.4).
    pub const HOST_NAME_ADDRESS: u16 = 11;
    /// Supported Address Types (RFC 9260 §3.3.2.1.5).
    pub const SUPPORTED_ADDRESS_TYPES: u16 = 12;
    /// Outgoing SSN Reset Request (RFC 6525 §4.1).
    pub const OUTGOING_SSN_RESET_REQUEST: u16 = 13;
    /// Incoming SSN Reset Request (RFC 6525 §4.2).
    pub const INCOMING_SSN_RESET_REQUEST: u16 = 14;
    /// SSN/TSN Reset Request (RFC 6525 §4.3).
    pub const SSN_TSN_RESET_REQUEST: u16 = 15;
    /// Re-configuration Response (RFC 6525 §4.4).
    pub const RECONFIG_RESPONSE: u16 = 16;
    /// Add Outgoing Streams Request (RFC 6525 §4.5).
    pub const ADD_OUTGOING_STREAMS_REQUEST: u16 = 17;
    /// Add Incoming Streams Request (RFC 6525 §4.6).
    pub const ADD_INCOMING_STREAMS_REQUEST: u16 = 18;
    /// Reserved for ECN Capable (RFC 9260 §3.3.2).
    pub const ECN_CAPABLE: u16 = 0x8000;
    /// Zero Checksum Acceptable (RFC 9653 §4).
    pub const ZERO_CHECKSUM_ACCEPTABLE: u16 = 0x8001;
    /// Supported Extensions (RFC 5061 §4.2.7).
    pub const SUPPORTED_EXTENSIONS: u16 = 0x8008;
    /// Forward-TSN-Supported (RFC 3758 §3.1).
    pub const FORWARD_TSN_SUPPORTED: u16 = 0xC000;
}

/// Every parameter header is 4 bytes: type and length (RFC 9260 §3.2.1).
pub const PARAM_HEADER_LEN: usize = 4;

/// RFC 9260 §3.2.1, "Processing of Unknown Parameters": the action the upper two bits
/// of an unrecognized Parameter Type call for. [`UnknownAction::Stop`] here means: stop
/// processing this chunk's parameters.
pub const fn unknown_param_action(typ: u16) -> UnknownAction {
    action_from_bits((typ >> 14) as u8)
}

/// A TLV parameter that can be written to the wire.
pub trait WriteParam {
    /// The Parameter Type.
    fn param_type(&self) -> u16;
    /// The length of the Parameter Value, without padding.
    fn value_len(&self) -> usize;
    /// Appends the Parameter Value, without padding.
    fn write_value(&self, out: &mut BytesMut);

    /// The Parameter Length field: header and value, without padding.
    fn encoded_len(&self) -> usize {
        PARAM_HEADER_LEN + self.value_len()
    }

    /// Appends the whole parameter, without trailing padding.
    ///
    /// # Panics
    ///
    /// Only on a programmer error: a parameter longer than 65535 bytes.
    fn write_to(&self, out: &mut BytesMut) {
        let len = u16::try_from(self.encoded_len()).expect("SCTP parameter over 65535 bytes");
        out.put_u16(self.param_type());
        out.put_u16(len);
        self.write_value(out);
    }
}

/// One kind of TLV parameter that can also be read from the wire.
pub trait Param: WriteParam + Sized {
    /// Parses a parameter from its type and value (padding excluded). Unknown types are
    /// kept, not refused; a known type with a malformed value is an error.
    fn parse(typ: u16, value: Bytes) -> Result<Self, SctpError>;
}

/// The parameters of a chunk, as written on the wire.
pub trait ParamList {
    /// Their length in the chunk: every parameter padded to 4 bytes but the last, whose
    /// padding the Chunk Length does not count (RFC 9260 §3.2).
    fn encoded_len(&self) -> usize;
    /// Appends them, padding between parameters, none after the last.
    fn write_to(&self, out: &mut BytesMut);
    /// How many there are.
    fn count(&self) -> usize;
}

impl<T: WriteParam> ParamList for &[T] {
    fn encoded_len(&self) -> usize {
        match self.split_last() {
            Some((last, rest)) => {
                rest.iter().map(|p| pad4(p.encoded_len())).sum::<usize>() + last.encoded_len()
            }
            None => 0,
        }
    }

    fn write_to(&self, out: &mut BytesMut) {
        for (i, p) in self.iter().enumerate() {
            let len = p.encoded_len();
            p.write_to(out);
            if i + 1 < self.len() {
                out.put_bytes(0, pad4(len) - len);
            }
        }
    }

    fn count(&self) -> usize {
        self.len()
    }
}

/// The validated parameters of a received chunk: the raw bytes, walked once at parse
/// time (lengths, bounds, and every known parameter's value), so iterating cannot fail.
pub struct Params<T> {
    raw: Bytes,
    count: usize,
    kind: PhantomData<fn() -> T>,
}

impl<T> Clone for Params<T> {
    fn clone(&self) -> Self {
        Params {
            raw: self.raw.clone(),
            count: self.count,
            kind: PhantomData,
        }
    }
}

impl<T> PartialEq for Params<T> {
    fn eq(&self, other: &Self) -> bool {
        self.raw == other.raw
    }
}

impl<T> Eq for Params<T> {}

impl<T: Param + fmt::Debug> fmt::Debug for Params<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<T: Param> Params<T> {
    /// Walks and validates the TLVs in `raw` (RFC 9260 §3.2.1): each at least 4 bytes,
    /// inside `raw`, padded to 4 except possibly the last; at most `max` of them.
    pub(crate) fn parse(raw: Bytes, chunk: u8, max: usize) -> Result<Params<T>, SctpError> {
        let mut count = 0;
        let mut at = 0;
        while let Some(tlv) = next_tlv(&raw, at) {
            let (typ, value, next) = tlv?;
            count += 1;
            if count > max {
                return Err(SctpError::TooManyParameters { chunk });
            }
            T::parse(typ, value)?;
            at = next;
        }
        Ok(Params {
            raw,
            count,
            kind: PhantomData,
        })
    }

    /// The parameters in order.
    pub fn iter(&self) -> ParamIter<'_, T> {
        ParamIter {
            raw: &self.raw,
            at: 0,
            kind: PhantomData,
        }
    }

    /// How many parameters there are.
    pub fn len(&self) -> usize {
        self.count
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The parameters' bytes as received (padding between them included).
    pub fn raw(&self) -> &Bytes {
        &self.raw
    }
}

impl<T: Param> ParamList for Params<T> {
    fn encoded_len(&self) -> usize {
        self.raw.len()
    }

    fn write_to(&self, out: &mut BytesMut) {
        out.put_slice(&self.raw);
    }

    fn count(&self) -> usize {
        self.count
    }
}

impl<'a, T: Param> IntoIterator for &'a Params<T> {
    type Item = T;
    type IntoIter = ParamIter<'a, T>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

/// Iterates validated parameters; see [`Params::iter`].
pub struct ParamIter<'a, T> {
    raw: &'a Bytes,
    at: usize,
    kind: PhantomData<fn() -> T>,
}

impl<T: Param> Iterator for ParamIter<'_, T> {
    type Item = T;

    fn next(&mut self) -> Option<T> {
        // Validated at parse time: neither the walk nor the parse can fail here, and if
        // they somehow did the iteration just ends.
        let (typ, value, next) = next_tlv(self.raw, self.at)?.ok()?;
        self.at = next;
        T::parse(typ, value).ok()
    }
}

/// The TLV at `at` in `raw`: its type, value and where the next one starts, or `None`
/// at the end. RFC 9260 §3.2.1: the length counts header and value, not padding.
pub(crate) fn next_tlv(raw: &Bytes, at: usize) -> Option<Result<(u16, Bytes, usize), SctpError>> {
    if at >= raw.len() {
        return None;
    }
    let Some(head) = raw.get(at..at + PARAM_HEADER_LEN) else {
        let typ = raw.get(at..at + 2).map_or(0, |b| be16(b, 0));
        return Some(Err(SctpError::ParameterTooShort { typ }));
    };
    let (typ, len) = (be16(head, 0), usize::from(be16(head, 2)));
    if len < PARAM_HEADER_LEN {
        return Some(Err(SctpError::ParameterTooShort { typ }));
    }
    let end = at + len;
    if end > raw.len() {
        return Some(Err(SctpError::ParameterOverrun { typ }));
    }
    let value = raw.slice(at + PARAM_HEADER_LEN..end);
    // The last parameter's padding lies outside the chunk length (RFC 9260 §3.2).
    Some(Ok((typ, value, pad4(end).min(raw.len()))))
}

/// Checks that `value` is exactly `len` bytes, for fixed-size parameters.
pub(crate) fn exact(typ: u16, value: &[u8], len: usize) -> Result<(), SctpError> {
    if value.len() == len {
        Ok(())
    } else {
        Err(SctpError::BadParameter { typ })
    }
}
