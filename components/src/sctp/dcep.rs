//! The Data Channel Establishment Protocol (RFC 8832 §5): DATA_CHANNEL_OPEN and
//! DATA_CHANNEL_ACK, sent as SCTP user messages with PPID 50 ([`super::Ppid::DCEP`]) on
//! the data channel's own stream. Parsing borrows the label and protocol from the
//! message bytes; writing appends to a caller-owned buffer.

use bytes::{BufMut, BytesMut};

use super::error::DcepError;

/// Message Type of DATA_CHANNEL_ACK (RFC 8832 §8.2.1).
pub const DATA_CHANNEL_ACK: u8 = 0x02;
/// Message Type of DATA_CHANNEL_OPEN (RFC 8832 §8.2.1).
pub const DATA_CHANNEL_OPEN: u8 = 0x03;
/// DATA_CHANNEL_OPEN's fixed part: type, channel type, priority, reliability parameter,
/// label length, protocol length (RFC 8832 §5.1).
pub const OPEN_HEADER_LEN: usize = 12;

/// RFC 8832 §5.1: the high bit of Channel Type marks an unordered channel.
const UNORDERED: u8 = 0x80;
// RFC 8832 §5.1 / §8.2.2: the low bits give the reliability.
const RELIABLE: u8 = 0x00;
const PARTIAL_RELIABLE_REXMIT: u8 = 0x01;
const PARTIAL_RELIABLE_TIMED: u8 = 0x02;

/// How reliable a data channel is (RFC 8832 §5.1, Channel Type and Reliability
/// Parameter).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Reliability {
    /// Every message is delivered (DATA_CHANNEL_RELIABLE); the Reliability Parameter is
    /// ignored, and written as 0.
    #[default]
    Reliable,
    /// A message is retransmitted at most this many times
    /// (DATA_CHANNEL_PARTIAL_RELIABLE_REXMIT).
    MaxRetransmits(u32),
    /// A message is abandoned this many milliseconds after it was first sent
    /// (DATA_CHANNEL_PARTIAL_RELIABLE_TIMED).
    MaxLifetimeMs(u32),
}

/// The Channel Type of RFC 8832 §5.1 with its Reliability Parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ChannelType {
    /// Ordered delivery; false for the `_UNORDERED` channel types.
    pub ordered: bool,
    /// Reliability and its parameter.
    pub reliability: Reliability,
}

impl Default for ChannelType {
    /// DATA_CHANNEL_RELIABLE: ordered and reliable.
    fn default() -> Self {
        ChannelType {
            ordered: true,
            reliability: Reliability::Reliable,
        }
    }
}

impl ChannelType {
    /// From the Channel Type byte and the Reliability Parameter; an undefined Channel
    /// Type is [`DcepError::UnknownChannelType`].
    pub fn from_wire(channel_type: u8, reliability_parameter: u32) -> Result<Self, DcepError> {
        let reliability = match channel_type & !UNORDERED {
            RELIABLE => Reliability::Reliable,
            PARTIAL_RELIABLE_REXMIT => Reliability::MaxRetransmits(reliability_parameter),
            PARTIAL_RELIABLE_TIMED => Reliability::MaxLifetimeMs(reliability_parameter),
            _ => return Err(DcepError::UnknownChannelType(channel_type)),
        };
        Ok(ChannelType {
            ordered: channel_type & UNORDERED == 0,
            reliability,
        })
    }

    /// The Channel Type byte.
    pub fn channel_type_byte(&self) -> u8 {
        let base = match self.reliability {
            Reliability::Reliable => RELIABLE,
            Reliability::MaxRetransmits(_) => PARTIAL_RELIABLE_REXMIT,
            Reliability::MaxLifetimeMs(_) => PARTIAL_RELIABLE_TIMED,
        };
        if self.ordered { base } else { base | UNORDERED }
    }

    /// The Reliability Parameter: 0 for a reliable channel.
    pub fn reliability_parameter(&self) -> u32 {
        match self.reliability {
            Reliability::Reliable => 0,
            Reliability::MaxRetransmits(n) | Reliability::MaxLifetimeMs(n) => n,
        }
    }
}

/// A DATA_CHANNEL_OPEN message (RFC 8832 §5.1). The label and protocol are checked UTF-8
/// of at most 65535 bytes each, borrowed from the message (when parsed) or the caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataChannelOpen<'a> {
    /// Ordering and reliability.
    pub channel_type: ChannelType,
    /// Priority of the channel (RFC 8831 §6.4 gives the values browsers use).
    pub priority: u16,
    label: &'a str,
    protocol: &'a str,
}

impl<'a> DataChannelOpen<'a> {
    /// An OPEN message; [`DcepError::TooLong`] if the label or protocol does not fit its
    /// 16-bit length field.
    pub fn new(
        channel_type: ChannelType,
        priority: u16,
        label: &'a str,
        protocol: &'a str,
    ) -> Result<Self, DcepError> {
        if label.len() > usize::from(u16::MAX) || protocol.len() > usize::from(u16::MAX) {
            return Err(DcepError::TooLong);
        }
        Ok(DataChannelOpen {
            channel_type,
            priority,
            label,
            protocol,
        })
    }

    /// The channel's label ("may be empty").
    pub fn label(&self) -> &'a str {
        self.label
    }

    /// The sub-protocol: empty, or a name from the WebSocket Subprotocol Name Registry.
    pub fn protocol(&self) -> &'a str {
        self.protocol
    }

    /// The message's size in bytes.
    pub fn encoded_len(&self) -> usize {
        OPEN_HEADER_LEN + self.label.len() + self.protocol.len()
    }

    /// Appends the message (RFC 8832 §5.1). Lengths were checked by
    /// [`DataChannelOpen::new`] or by parsing.
    pub fn write_to(&self, out: &mut BytesMut) {
        out.put_u8(DATA_CHANNEL_OPEN);
        out.put_u8(self.channel_type.channel_type_byte());
        out.put_u16(self.priority);
        out.put_u32(self.channel_type.reliability_parameter());
        out.put_u16(self.label.len() as u16);
        out.put_u16(self.protocol.len() as u16);
        out.put_slice(self.label.as_bytes());
        out.put_slice(self.protocol.as_bytes());
    }

    /// Parses an OPEN message (its first byte already known to be 0x03). The message
    /// must end exactly after the protocol: a malformed OPEN closes the channel rather
    /// than being guessed at (RFC 8832 §6).
    fn parse(msg: &'a [u8]) -> Result<Self, DcepError> {
        let h = msg.get(..OPEN_HEADER_LEN).ok_or(DcepError::Truncated)?;
        let reliability_parameter = u32::from_be_bytes([h[4], h[5], h[6], h[7]]);
        let label_len = usize::from(u16::from_be_bytes([h[8], h[9]]));
        let protocol_len = usize::from(u16::from_be_bytes([h[10], h[11]]));
        let label_end = OPEN_HEADER_LEN + label_len;
        let end = label_end + protocol_len;
        let label = msg
            .get(OPEN_HEADER_LEN..label_end)
            .ok_or(DcepError::Truncated)?;
        let protocol = msg.get(label_end..end).ok_or(DcepError::Truncated)?;
        if msg.len() > end {
            return Err(DcepError::TrailingBytes {
                len: msg.len() - end,
            });
        }
        Ok(DataChannelOpen {
            channel_type: ChannelType::from_wire(h[1], reliability_parameter)?,
            priority: u16::from_be_bytes([h[2], h[3]]),
            label: std::str::from_utf8(label).map_err(|_| DcepError::LabelNotUtf8)?,
            protocol: std::str::from_utf8(protocol).map_err(|_| DcepError::ProtocolNotUtf8)?,
        })
    }
}

/// A DCEP message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DcepMessage<'a> {
    /// DATA_CHANNEL_OPEN (RFC 8832 §5.1).
    Open(DataChannelOpen<'a>),
    /// DATA_CHANNEL_ACK (RFC 8832 §5.2): the Message Type byte alone.
    Ack,
}

impl<'a> DcepMessage<'a> {
    /// Parses one DCEP message: the whole user message received with PPID 50.
    pub fn parse(msg: &'a [u8]) -> Result<Self, DcepError> {
        match msg.first() {
            None => Err(DcepError::Empty),
            Some(&DATA_CHANNEL_OPEN) => DataChannelOpen::parse(msg).map(DcepMessage::Open),
            Some(&DATA_CHANNEL_ACK) if msg.len() == 1 => Ok(DcepMessage::Ack),
            Some(&DATA_CHANNEL_ACK) => Err(DcepError::TrailingBytes { len: msg.len() - 1 }),
            Some(&other) => Err(DcepError::UnknownMessageType(other)),
        }
    }

    /// The message's size in bytes.
    pub fn encoded_len(&self) -> usize {
        match self {
            DcepMessage::Open(open) => open.encoded_len(),
            DcepMessage::Ack => 1,
        }
    }

    /// Appends the message.
    pub fn write_to(&self, out: &mut BytesMut) {
        match self {
            DcepMessage::Open(open) => open.write_to(out),
            DcepMessage::Ack => out.put_u8(DATA_CHANNEL_ACK),
        }
    }
}
