//! INIT and INIT ACK (RFC 9260 §3.3.2, §3.3.3): the same fixed fields and a list of
//! parameters, among them the State Cookie, Supported Extensions (RFC 5061 §4.2.7) and
//! Forward-TSN-Supported (RFC 3758 §3.1).

use std::net::{Ipv4Addr, Ipv6Addr};

use bytes::{BufMut, Bytes, BytesMut};

use super::param::{Param, ParamList, Params, WriteParam, exact, param_type as pt};
use super::{
    CHUNK_HEADER_LEN, Header, MAX_PARAMS_PER_CHUNK, WriteChunk, be16, be32, chunk_type,
    put_chunk_header, put_padding,
};
use crate::sctp::error::SctpError;
use crate::sctp::num::Tsn;

/// The fixed fields of INIT and INIT ACK after the chunk header (RFC 9260 §3.3.2).
const FIXED_LEN: usize = 16;

/// Error Detection Method Identifier 1 of RFC 9653's IANA registry: SCTP carried in
/// DTLS (RFC 8261), whose record protection detects every error the checksum would.
/// The one method WebRTC data channels use.
pub const EDMID_DTLS: u32 = 1;

/// INIT (`TYPE` 1) or INIT ACK (`TYPE` 2); use the [`Init`] and [`InitAck`] aliases.
/// `P` is the parameter list: [`Params`] as parsed, `&[InitParam]` to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InitChunk<const TYPE: u8, P = Params<InitParam>> {
    /// Initiate Tag: the Verification Tag the receiver of this chunk puts on every
    /// packet it sends in the association. Never 0.
    pub initiate_tag: u32,
    /// Advertised Receiver Window Credit, in bytes; at least 1500.
    pub a_rwnd: u32,
    /// Number of Outbound Streams (OS); never 0.
    pub outbound_streams: u16,
    /// Number of Inbound Streams (MIS); never 0.
    pub inbound_streams: u16,
    /// Initial TSN.
    pub initial_tsn: Tsn,
    /// Optional and variable-length parameters.
    pub params: P,
}

/// INIT (RFC 9260 §3.3.2).
pub type Init<P = Params<InitParam>> = InitChunk<{ chunk_type::INIT }, P>;
/// INIT ACK (RFC 9260 §3.3.3).
pub type InitAck<P = Params<InitParam>> = InitChunk<{ chunk_type::INIT_ACK }, P>;

impl<const TYPE: u8> InitChunk<TYPE> {
    pub(crate) fn parse(h: Header, value: Bytes) -> Result<Self, SctpError> {
        let fixed = value.get(..FIXED_LEN).ok_or(h.too_short())?;
        Ok(InitChunk {
            initiate_tag: be32(fixed, 0),
            a_rwnd: be32(fixed, 4),
            outbound_streams: be16(fixed, 8),
            inbound_streams: be16(fixed, 10),
            initial_tsn: Tsn(be32(fixed, 12)),
            params: Params::parse(value.slice(FIXED_LEN..), TYPE, MAX_PARAMS_PER_CHUNK)?,
        })
    }

    /// The State Cookie parameter's value, if present (INIT ACK carries it).
    pub fn state_cookie(&self) -> Option<Bytes> {
        self.params.iter().find_map(|p| match p {
            InitParam::StateCookie(c) => Some(c),
            _ => None,
        })
    }

    /// True when the Forward-TSN-Supported parameter is present (RFC 3758 §3.1).
    pub fn forward_tsn_supported(&self) -> bool {
        self.params
            .iter()
            .any(|p| matches!(p, InitParam::ForwardTsnSupported))
    }

    /// The Error Detection Method Identifier of a Zero Checksum Acceptable parameter
    /// (RFC 9653 §4), if the chunk carries one: the method under which its sender
    /// accepts packets whose checksum is zero.
    pub fn zero_checksum_method(&self) -> Option<u32> {
        self.params.iter().find_map(|p| match p {
            InitParam::ZeroChecksumAcceptable(edmid) => Some(edmid),
            _ => None,
        })
    }

    /// True when a Supported Extensions parameter lists `chunk` (RFC 5061 §4.2.7).
    pub fn supports_chunk(&self, chunk: u8) -> bool {
        self.params.iter().any(|p| match p {
            InitParam::SupportedExtensions(list) => list.contains(&chunk),
            _ => false,
        })
    }
}

impl<const TYPE: u8, P> InitChunk<TYPE, P> {
    /// RFC 9260 §3.3.2/§3.3.3 checks on the mandatory fields: Initiate Tag not 0, a_rwnd
    /// at least 1500, OS and MIS not 0. What to do on failure differs between INIT
    /// (discard, maybe ABORT) and INIT ACK (ABORT), so the association calls this.
    pub fn validate(&self) -> Result<(), SctpError> {
        let ok = self.initiate_tag != 0
            && self.a_rwnd >= 1500
            && self.outbound_streams != 0
            && self.inbound_streams != 0;
        ok.then_some(()).ok_or(SctpError::InvalidMandatoryParameter)
    }
}

impl<const TYPE: u8, P: ParamList> WriteChunk for InitChunk<TYPE, P> {
    fn encoded_len(&self) -> usize {
        CHUNK_HEADER_LEN + FIXED_LEN + self.params.encoded_len()
    }

    fn write_to(&self, out: &mut BytesMut) {
        let len = self.encoded_len();
        put_chunk_header(out, TYPE, 0, len);
        out.put_u32(self.initiate_tag);
        out.put_u32(self.a_rwnd);
        out.put_u16(self.outbound_streams);
        out.put_u16(self.inbound_streams);
        out.put_u32(self.initial_tsn.0);
        self.params.write_to(out);
        put_padding(out, len);
    }
}

/// A parameter of INIT or INIT ACK. Variable parts are slices of the received packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InitParam {
    /// IPv4 Address (RFC 9260 §3.3.2.1.1).
    Ipv4Address(Ipv4Addr),
    /// IPv6 Address (RFC 9260 §3.3.2.1.2).
    Ipv6Address(Ipv6Addr),
    /// State Cookie (RFC 9260 §3.3.3.1.1): opaque to its receiver.
    StateCookie(Bytes),
    /// Unrecognized Parameter (RFC 9260 §3.3.3.1.2): a whole TLV copied from the INIT.
    UnrecognizedParameter(Bytes),
    /// Cookie Preservative (RFC 9260 §3.3.2.1.3): suggested life-span increment, ms.
    CookiePreservative(u32),
    /// Host Name Address (RFC 9260 §3.3.2.1.4), deprecated: its receiver ABORTs.
    HostNameAddress(Bytes),
    /// Supported Address Types (RFC 9260 §3.3.2.1.5): 16-bit types, an even length.
    SupportedAddressTypes(Bytes),
    /// Supported Extensions (RFC 5061 §4.2.7): one Chunk Type per byte.
    SupportedExtensions(Bytes),
    /// Forward-TSN-Supported (RFC 3758 §3.1): no value.
    ForwardTsnSupported,
    /// Zero Checksum Acceptable (RFC 9653 §4): its sender accepts packets with a zero
    /// checksum under the error detection method this identifier names (see
    /// [`EDMID_DTLS`]).
    ZeroChecksumAcceptable(u32),
    /// Any other type; the receiver applies [`super::unknown_param_action`].
    Unknown {
        /// The Parameter Type.
        typ: u16,
        /// The Parameter Value, without padding.
        value: Bytes,
    },
}

impl InitParam {
    /// The address types of a Supported Address Types parameter.
    pub fn address_types(&self) -> impl Iterator<Item = u16> + '_ {
        let raw: &[u8] = match self {
            InitParam::SupportedAddressTypes(b) => b,
            _ => &[],
        };
        raw.chunks_exact(2)
            .map(|p| u16::from_be_bytes([p[0], p[1]]))
    }
}

impl Param for InitParam {
    fn parse(typ: u16, value: Bytes) -> Result<Self, SctpError> {
        Ok(match typ {
            pt::IPV4_ADDRESS => {
                exact(typ, &value, 4)?;
                InitParam::Ipv4Address(Ipv4Addr::from(be32(&value, 0)))
            }
            pt::IPV6_ADDRESS => {
                let octets: [u8; 16] = value[..]
                    .try_into()
                    .map_err(|_| SctpError::BadParameter { typ })?;
                InitParam::Ipv6Address(Ipv6Addr::from(octets))
            }
            pt::STATE_COOKIE => InitParam::StateCookie(value),
            pt::UNRECOGNIZED_PARAMETER => InitParam::UnrecognizedParameter(value),
            pt::COOKIE_PRESERVATIVE => {
                exact(typ, &value, 4)?;
                InitParam::CookiePreservative(be32(&value, 0))
            }
            pt::HOST_NAME_ADDRESS => InitParam::HostNameAddress(value),
            pt::SUPPORTED_ADDRESS_TYPES => {
                if !value.len().is_multiple_of(2) {
                    return Err(SctpError::BadParameter { typ });
                }
                InitParam::SupportedAddressTypes(value)
            }
            pt::SUPPORTED_EXTENSIONS => InitParam::SupportedExtensions(value),
            pt::FORWARD_TSN_SUPPORTED => {
                // RFC 3758 §3.1: Parameter Length = 4, no value.
                exact(typ, &value, 0)?;
                InitParam::ForwardTsnSupported
            }
            // RFC 9653 §4: Length 8, the 32-bit EDMID. One of another length is not a
            // parameter we understand; it stays Unknown, and its type's upper bits
            // (10: skip, RFC 9260 §3.2.1) let the rest of the chunk through.
            pt::ZERO_CHECKSUM_ACCEPTABLE if value.len() == 4 => {
                InitParam::ZeroChecksumAcceptable(be32(&value, 0))
            }
            _ => InitParam::Unknown { typ, value },
        })
    }
}

impl WriteParam for InitParam {
    fn param_type(&self) -> u16 {
        match self {
            InitParam::Ipv4Address(_) => pt::IPV4_ADDRESS,
            InitParam::Ipv6Address(_) => pt::IPV6_ADDRESS,
            InitParam::StateCookie(_) => pt::STATE_COOKIE,
            InitParam::UnrecognizedParameter(_) => pt::UNRECOGNIZED_PARAMETER,
            InitParam::CookiePreservative(_) => pt::COOKIE_PRESERVATIVE,
            InitParam::HostNameAddress(_) => pt::HOST_NAME_ADDRESS,
            InitParam::SupportedAddressTypes(_) => pt::SUPPORTED_ADDRESS_TYPES,
            InitParam::SupportedExtensions(_) => pt::SUPPORTED_EXTENSIONS,
            InitParam::ForwardTsnSupported => pt::FORWARD_TSN_SUPPORTED,
            InitParam::ZeroChecksumAcceptable(_) => pt::ZERO_CHECKSUM_ACCEPTABLE,
            InitParam::Unknown { typ, .. } => *typ,
        }
    }

    fn value_len(&self) -> usize {
        match self {
            InitParam::Ipv4Address(_)
            | InitParam::CookiePreservative(_)
            | InitParam::ZeroChecksumAcceptable(_) => 4,
            InitParam::Ipv6Address(_) => 16,
            InitParam::ForwardTsnSupported => 0,
            InitParam::StateCookie(b)
            | InitParam::UnrecognizedParameter(b)
            | InitParam::HostNameAddress(b)
            | InitParam::SupportedAddressTypes(b)
            | InitParam::SupportedExtensions(b)
            | InitParam::Unknown { value: b, .. } => b.len(),
        }
    }

    fn write_value(&self, out: &mut BytesMut) {
        match self {
            InitParam::Ipv4Address(a) => out.put_slice(&a.octets()),
            InitParam::Ipv6Address(a) => out.put_slice(&a.octets()),
            InitParam::CookiePreservative(ms) => out.put_u32(*ms),
            InitParam::ZeroChecksumAcceptable(edmid) => out.put_u32(*edmid),
            InitParam::ForwardTsnSupported => {}
            InitParam::StateCookie(b)
            | InitParam::UnrecognizedParameter(b)
            | InitParam::HostNameAddress(b)
            | InitParam::SupportedAddressTypes(b)
            | InitParam::SupportedExtensions(b)
            | InitParam::Unknown { value: b, .. } => out.put_slice(b),
        }
    }
}
