//! The DTLS record layer framing (RFC 6347 §4.1): a 13-byte header and a fragment;
//! several records may share one datagram (§4.1.1).

use bytes::{BufMut, BytesMut};

use super::codec::{Reader, put_u48};
use super::{DTLS_1_0, DTLS_1_2, DtlsWireError, MAX_CIPHERTEXT_LEN, RECORD_HEADER_LEN};

/// The record content types of RFC 5246 §6.2.1 (the heartbeat type is not spoken).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ContentType {
    /// change_cipher_spec(20).
    ChangeCipherSpec = 20,
    /// alert(21).
    Alert = 21,
    /// handshake(22).
    Handshake = 22,
    /// application_data(23).
    ApplicationData = 23,
}

impl ContentType {
    /// The content type with this wire value.
    pub fn from_u8(v: u8) -> Result<ContentType, DtlsWireError> {
        match v {
            20 => Ok(ContentType::ChangeCipherSpec),
            21 => Ok(ContentType::Alert),
            22 => Ok(ContentType::Handshake),
            23 => Ok(ContentType::ApplicationData),
            _ => Err(DtlsWireError::UnknownContentType(v)),
        }
    }
}

/// The DTLSPlaintext / DTLSCiphertext header of RFC 6347 §4.1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordHeader {
    /// The record's content type.
    pub content_type: ContentType,
    /// The on-the-wire version: {254, 253} for DTLS 1.2, {254, 255} for 1.0.
    pub version: u16,
    /// "A counter value that is incremented on every cipher state change."
    pub epoch: u16,
    /// The explicit 48-bit sequence number, per epoch.
    pub sequence_number: u64,
    /// The fragment length.
    pub length: u16,
}

impl RecordHeader {
    /// Parses the 13-byte header at the start of `buf`. The version must be DTLS 1.2 or
    /// 1.0 (a 1.2 client may send its first ClientHello in a 1.0 record), and the length
    /// at most 2^14 + 2048 (RFC 5246 §6.2.3).
    pub fn parse(buf: &[u8]) -> Result<RecordHeader, DtlsWireError> {
        let mut r = Reader::new(buf);
        let content_type = ContentType::from_u8(r.u8("record type")?)?;
        let version = r.u16("record version")?;
        if version != DTLS_1_2 && version != DTLS_1_0 {
            return Err(DtlsWireError::BadVersion(version));
        }
        let epoch = r.u16("record epoch")?;
        let sequence_number = r.u48("record sequence number")?;
        let length = r.u16("record length")?;
        if usize::from(length) > MAX_CIPHERTEXT_LEN {
            return Err(DtlsWireError::BadLength {
                field: "record length",
                len: usize::from(length),
            });
        }
        Ok(RecordHeader {
            content_type,
            version,
            epoch,
            sequence_number,
            length,
        })
    }

    /// The 64-bit value of epoch and sequence number as they appear on the wire, which
    /// RFC 6347 §4.1.2.1 uses in place of TLS's implicit sequence number.
    pub fn epoch_and_sequence(&self) -> u64 {
        (u64::from(self.epoch) << 48) | self.sequence_number
    }

    /// Appends the header.
    ///
    /// # Panics
    ///
    /// When `sequence_number` does not fit in 48 bits (a programmer error: the sender
    /// must stop before the sequence number wraps, RFC 6347 §4.1).
    pub fn write(&self, out: &mut BytesMut) {
        out.put_u8(self.content_type as u8);
        out.put_u16(self.version);
        out.put_u16(self.epoch);
        put_u48(out, self.sequence_number);
        out.put_u16(self.length);
    }
}

/// One record of a datagram, borrowed from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record<'a> {
    /// The parsed header.
    pub header: RecordHeader,
    /// The fragment (plaintext in epoch 0, explicit nonce + ciphertext + tag after).
    pub fragment: &'a [u8],
    /// Header and fragment together, as received.
    pub raw: &'a [u8],
}

/// Iterates over the records of one datagram (RFC 6347 §4.1.1: "Multiple DTLS records
/// may be placed in a single datagram. They are simply encoded consecutively").
/// After the first malformed record it yields that error once and then stops, since the
/// framing of what follows is lost.
#[derive(Clone, Debug)]
pub struct Records<'a> {
    rest: &'a [u8],
    failed: bool,
}

impl<'a> Records<'a> {
    /// Records of `datagram`.
    pub fn new(datagram: &'a [u8]) -> Self {
        Records {
            rest: datagram,
            failed: false,
        }
    }
}

impl<'a> Iterator for Records<'a> {
    type Item = Result<Record<'a>, DtlsWireError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() || self.failed {
            return None;
        }
        let item = parse_one(self.rest);
        match item {
            Ok((record, rest)) => {
                self.rest = rest;
                Some(Ok(record))
            }
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

fn parse_one(buf: &[u8]) -> Result<(Record<'_>, &[u8]), DtlsWireError> {
    let header = RecordHeader::parse(buf)?;
    let end = RECORD_HEADER_LEN + usize::from(header.length);
    if buf.len() < end {
        return Err(DtlsWireError::Truncated {
            field: "record fragment",
        });
    }
    let (raw, rest) = buf.split_at(end);
    let record = Record {
        header,
        fragment: &raw[RECORD_HEADER_LEN..],
        raw,
    };
    Ok((record, rest))
}
