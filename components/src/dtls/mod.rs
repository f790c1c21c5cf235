//! DTLS 1.2 wire formats (RFC 6347 over RFC 5246): records, handshake fragments, the
//! handshake messages of an ECDHE_ECDSA handshake with mutual authentication, alerts,
//! and the hello extensions WebRTC uses (use_srtp of RFC 5764, extended_master_secret
//! of RFC 7627, renegotiation_info of RFC 5746, and the ECC ones of RFC 8422).
//!
//! Everything parses zero-copy: a parsed value borrows the bytes it came from, and
//! lists (cipher suites, groups, extensions, certificates) are validated once and then
//! iterated without allocating. Every parser takes untrusted input, checks every bound
//! and returns a typed [`DtlsWireError`]; nothing here panics on network bytes. Writers
//! append to a caller-owned [`bytes::BytesMut`] and panic only on programmer errors (a
//! vector longer than its length field can say).
//!
//! [`conn`] is the state machine built on them: [`DtlsConn`], both roles, sans-I/O.

pub mod alert;
mod codec;
pub mod conn;
mod error;
pub mod extension;
pub mod handshake;
pub mod hello;
pub mod messages;
pub mod record;

#[cfg(test)]
mod tests;

pub use alert::{Alert, AlertDescription, AlertLevel};
pub use codec::U16List;
pub use conn::{
    CipherSuite, DtlsCertificate, DtlsConfig, DtlsConn, DtlsError, DtlsEvent, DtlsRole, DtlsStats,
    MAX_BUFFERED_BYTES, MAX_FUTURE_MESSAGES, MAX_MESSAGE_LEN, MAX_QUEUED_BYTES, NamedGroup,
    REPLAY_WINDOW, ReplayWindow, SrtpKeys, SrtpProfile, crypto,
};
pub use error::DtlsWireError;
pub use extension::{Extension, Extensions, UseSrtp};
pub use handshake::{HandshakeFragment, HandshakeFragments, HandshakeHeader, HandshakeType};
pub use hello::{ClientHello, HelloVerifyRequest, ServerHello};
pub use messages::{
    Certificate, CertificateRequest, CertificateVerify, ClientKeyExchange, DigitallySigned,
    ServerKeyExchange,
};
pub use record::{ContentType, Record, RecordHeader, Records};

/// The on-the-wire version of DTLS 1.2, {254, 253} (RFC 6347 §4.1).
pub const DTLS_1_2: u16 = 0xfefd;
/// The on-the-wire version of DTLS 1.0, {254, 255}: allowed in the record of a first
/// ClientHello and in HelloVerifyRequest (RFC 6347 §4.2.1).
pub const DTLS_1_0: u16 = 0xfeff;
/// The record header: type, version, epoch, 48-bit sequence number, length (RFC 6347
/// §4.1).
pub const RECORD_HEADER_LEN: usize = 13;
/// The handshake header: msg_type, length, message_seq, fragment_offset,
/// fragment_length (RFC 6347 §4.2.2).
pub const HANDSHAKE_HEADER_LEN: usize = 12;
/// RFC 5246 §6.2.1: plaintext records carry at most 2^14 bytes.
pub const MAX_PLAINTEXT_LEN: usize = 1 << 14;
/// RFC 5246 §6.2.3: "The length MUST NOT exceed 2^14 + 2048."
pub const MAX_CIPHERTEXT_LEN: usize = (1 << 14) + 2048;
/// RFC 5246 §7.4.9: verify_data_length is 12 for every suite that does not say otherwise.
pub const VERIFY_DATA_LEN: usize = 12;
/// `SessionID session_id<0..32>` (RFC 5246 §7.4.1.2).
pub const MAX_SESSION_ID_LEN: usize = 32;
/// `opaque cookie<0..2^8-1>` (RFC 6347 §4.2.1).
pub const MAX_COOKIE_LEN: usize = 255;
/// shoal's bound on the extensions of one hello; Chromium sends about twenty.
pub const MAX_EXTENSIONS: usize = 64;
/// shoal's bound on a list of uint16 values (cipher suites, groups, algorithms,
/// profiles).
pub const MAX_U16_LIST: usize = 512;
/// shoal's bound on the certificates of one Certificate message.
pub const MAX_CERTIFICATES: usize = 16;
/// shoal's bound on the distinguished names of one CertificateRequest.
pub const MAX_DISTINGUISHED_NAMES: usize = 256;

/// Appends one unfragmented handshake message: the 12-byte header with
/// `fragment_offset = 0` and `fragment_length = length`, then `body`. This is also the
/// form that enters the handshake hash (RFC 6347 §4.2.6).
///
/// # Panics
///
/// When `body` is 2^24 bytes or more (a programmer error).
pub fn write_handshake(
    out: &mut bytes::BytesMut,
    msg_type: HandshakeType,
    message_seq: u16,
    body: &[u8],
) {
    let length = u32::try_from(body.len()).expect("handshake body fits in 24 bits");
    HandshakeHeader {
        msg_type,
        length,
        message_seq,
        fragment_offset: 0,
        fragment_length: length,
    }
    .write(out);
    out.extend_from_slice(body);
}
