//! The DTLS handshake header (RFC 6347 §4.2.2): message type, length, message_seq and
//! the fragment's offset and length, so a message can span several records (§4.2.3).

use bytes::{BufMut, BytesMut};

use super::DtlsWireError;
use super::codec::{Reader, put_u24};

/// The handshake message types of RFC 5246 §7.4 plus hello_verify_request (RFC 6347
/// §4.2.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum HandshakeType {
    /// hello_request(0).
    HelloRequest = 0,
    /// client_hello(1).
    ClientHello = 1,
    /// server_hello(2).
    ServerHello = 2,
    /// hello_verify_request(3).
    HelloVerifyRequest = 3,
    /// certificate(11).
    Certificate = 11,
    /// server_key_exchange(12).
    ServerKeyExchange = 12,
    /// certificate_request(13).
    CertificateRequest = 13,
    /// server_hello_done(14).
    ServerHelloDone = 14,
    /// certificate_verify(15).
    CertificateVerify = 15,
    /// client_key_exchange(16).
    ClientKeyExchange = 16,
    /// finished(20).
    Finished = 20,
}

impl HandshakeType {
    /// The handshake type with this wire value.
    pub fn from_u8(v: u8) -> Result<HandshakeType, DtlsWireError> {
        Ok(match v {
            0 => HandshakeType::HelloRequest,
            1 => HandshakeType::ClientHello,
            2 => HandshakeType::ServerHello,
            3 => HandshakeType::HelloVerifyRequest,
            11 => HandshakeType::Certificate,
            12 => HandshakeType::ServerKeyExchange,
            13 => HandshakeType::CertificateRequest,
            14 => HandshakeType::ServerHelloDone,
            15 => HandshakeType::CertificateVerify,
            16 => HandshakeType::ClientKeyExchange,
            20 => HandshakeType::Finished,
            _ => return Err(DtlsWireError::UnknownHandshakeType(v)),
        })
    }
}

/// The 12-byte DTLS handshake header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HandshakeHeader {
    /// The message type.
    pub msg_type: HandshakeType,
    /// The length of the whole message body.
    pub length: u32,
    /// The message's sequence number within the handshake.
    pub message_seq: u16,
    /// Where this fragment's bytes start in the message body.
    pub fragment_offset: u32,
    /// How many body bytes this fragment carries.
    pub fragment_length: u32,
}

impl HandshakeHeader {
    /// Appends the header. Panics (programmer error) when a length does not fit in 24
    /// bits.
    pub fn write(&self, out: &mut BytesMut) {
        out.put_u8(self.msg_type as u8);
        put_u24(out, self.length);
        out.put_u16(self.message_seq);
        put_u24(out, self.fragment_offset);
        put_u24(out, self.fragment_length);
    }

    /// True when this fragment is the whole message.
    pub fn is_whole(&self) -> bool {
        self.fragment_offset == 0 && self.fragment_length == self.length
    }
}

/// One handshake fragment borrowed from a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HandshakeFragment<'a> {
    /// Its header.
    pub header: HandshakeHeader,
    /// The `fragment_length` body bytes at `fragment_offset`.
    pub body: &'a [u8],
}

/// Iterates over the handshake fragments of one record: "multiple handshake messages
/// may be placed in the same DTLS record" (RFC 6347 §4.2.3). Stops after the first error.
#[derive(Clone, Debug)]
pub struct HandshakeFragments<'a> {
    rest: &'a [u8],
    failed: bool,
}

impl<'a> HandshakeFragments<'a> {
    /// Fragments of a handshake record's plaintext.
    pub fn new(record_plaintext: &'a [u8]) -> Self {
        HandshakeFragments {
            rest: record_plaintext,
            failed: false,
        }
    }
}

impl<'a> Iterator for HandshakeFragments<'a> {
    type Item = Result<HandshakeFragment<'a>, DtlsWireError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() || self.failed {
            return None;
        }
        match parse_fragment(self.rest) {
            Ok((fragment, rest)) => {
                self.rest = rest;
                Some(Ok(fragment))
            }
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

/// Parses one fragment at the start of `buf`: RFC 6347 §4.2.3 requires that the
/// fragment lie inside the message (`fragment_offset + fragment_length <= length`).
fn parse_fragment(buf: &[u8]) -> Result<(HandshakeFragment<'_>, &[u8]), DtlsWireError> {
    let mut r = Reader::new(buf);
    let msg_type = HandshakeType::from_u8(r.u8("handshake type")?)?;
    let length = r.u24("handshake length")?;
    let message_seq = r.u16("handshake message_seq")?;
    let fragment_offset = r.u24("handshake fragment_offset")?;
    let fragment_length = r.u24("handshake fragment_length")?;
    if u64::from(fragment_offset) + u64::from(fragment_length) > u64::from(length) {
        return Err(DtlsWireError::BadLength {
            field: "handshake fragment",
            len: fragment_length as usize,
        });
    }
    let body = r.bytes(fragment_length as usize, "handshake fragment body")?;
    let header = HandshakeHeader {
        msg_type,
        length,
        message_seq,
        fragment_offset,
        fragment_length,
    };
    Ok((HandshakeFragment { header, body }, r.rest()))
}
