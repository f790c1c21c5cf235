//! The hello messages: ClientHello with the DTLS cookie and HelloVerifyRequest
//! (RFC 6347 §4.2.1), and ServerHello (RFC 5246 §7.4.1.3).

use bytes::{BufMut, BytesMut};

use super::codec::{Reader, U16List, put_vec8, put_vec16};
use super::extension::Extensions;
use super::{DtlsWireError, MAX_COOKIE_LEN, MAX_SESSION_ID_LEN};

/// ClientHello as DTLS modifies it (RFC 6347 §4.2.1), borrowed from its message body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientHello<'a> {
    /// client_version: the highest version the client speaks (0xfefd for DTLS 1.2).
    pub client_version: u16,
    /// Random.
    pub random: [u8; 32],
    /// `SessionID session_id<0..32>`.
    pub session_id: &'a [u8],
    /// `opaque cookie<0..2^8-1>`, empty on a first ClientHello.
    pub cookie: &'a [u8],
    /// `CipherSuite cipher_suites<2..2^16-2>`.
    pub cipher_suites: U16List<'a>,
    /// `CompressionMethod compression_methods<1..2^8-1>`.
    pub compression_methods: &'a [u8],
    /// The extensions; empty when the vector is absent.
    pub extensions: Extensions<'a>,
}

impl<'a> ClientHello<'a> {
    /// Parses a ClientHello body.
    pub fn parse(body: &'a [u8]) -> Result<ClientHello<'a>, DtlsWireError> {
        let mut r = Reader::new(body);
        let client_version = r.u16("client_version")?;
        let random = r.array("client random")?;
        let session_id = session_id(&mut r)?;
        let cookie = r.vec8(0, "cookie")?;
        if cookie.len() > MAX_COOKIE_LEN {
            return Err(DtlsWireError::BadLength {
                field: "cookie",
                len: cookie.len(),
            });
        }
        let cipher_suites = U16List::parse(r.vec16(2, "cipher_suites")?, 1, "cipher_suites")?;
        let compression_methods = r.vec8(1, "compression_methods")?;
        let extensions = extensions(&mut r)?;
        Ok(ClientHello {
            client_version,
            random,
            session_id,
            cookie,
            cipher_suites,
            compression_methods,
            extensions,
        })
    }

    /// Appends the body. Panics (programmer error) when a vector is over its bound.
    pub fn write(&self, out: &mut BytesMut) {
        out.put_u16(self.client_version);
        out.put_slice(&self.random);
        put_vec8(out, self.session_id);
        put_vec8(out, self.cookie);
        put_vec16(out, self.cipher_suites.as_bytes());
        put_vec8(out, self.compression_methods);
        put_vec16(out, self.extensions.as_bytes());
    }
}

/// HelloVerifyRequest (RFC 6347 §4.2.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HelloVerifyRequest<'a> {
    /// server_version; RFC 6347 §4.2.1 says servers SHOULD send DTLS 1.0 here.
    pub server_version: u16,
    /// `opaque cookie<0..2^8-1>`.
    pub cookie: &'a [u8],
}

impl<'a> HelloVerifyRequest<'a> {
    /// Parses a HelloVerifyRequest body.
    pub fn parse(body: &'a [u8]) -> Result<HelloVerifyRequest<'a>, DtlsWireError> {
        let mut r = Reader::new(body);
        let server_version = r.u16("server_version")?;
        let cookie = r.vec8(0, "cookie")?;
        if cookie.len() > MAX_COOKIE_LEN {
            return Err(DtlsWireError::BadLength {
                field: "cookie",
                len: cookie.len(),
            });
        }
        r.finish("hello_verify_request")?;
        Ok(HelloVerifyRequest {
            server_version,
            cookie,
        })
    }

    /// Appends the body.
    pub fn write(&self, out: &mut BytesMut) {
        out.put_u16(self.server_version);
        put_vec8(out, self.cookie);
    }
}

/// ServerHello (RFC 5246 §7.4.1.3), borrowed from its message body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServerHello<'a> {
    /// server_version: the version chosen (0xfefd for DTLS 1.2).
    pub server_version: u16,
    /// Random.
    pub random: [u8; 32],
    /// `SessionID session_id<0..32>`.
    pub session_id: &'a [u8],
    /// The cipher suite chosen.
    pub cipher_suite: u16,
    /// The compression method chosen.
    pub compression_method: u8,
    /// The extensions; empty when the vector is absent.
    pub extensions: Extensions<'a>,
}

impl<'a> ServerHello<'a> {
    /// Parses a ServerHello body.
    pub fn parse(body: &'a [u8]) -> Result<ServerHello<'a>, DtlsWireError> {
        let mut r = Reader::new(body);
        let server_version = r.u16("server_version")?;
        let random = r.array("server random")?;
        let session_id = session_id(&mut r)?;
        let cipher_suite = r.u16("cipher_suite")?;
        let compression_method = r.u8("compression_method")?;
        let extensions = extensions(&mut r)?;
        Ok(ServerHello {
            server_version,
            random,
            session_id,
            cipher_suite,
            compression_method,
            extensions,
        })
    }

    /// Appends the body; the extensions vector is written only when it is not empty.
    pub fn write(&self, out: &mut BytesMut) {
        out.put_u16(self.server_version);
        out.put_slice(&self.random);
        put_vec8(out, self.session_id);
        out.put_u16(self.cipher_suite);
        out.put_u8(self.compression_method);
        if !self.extensions.is_empty() {
            put_vec16(out, self.extensions.as_bytes());
        }
    }
}

/// `SessionID session_id<0..32>` (RFC 5246 §7.4.1.2).
fn session_id<'a>(r: &mut Reader<'a>) -> Result<&'a [u8], DtlsWireError> {
    let id = r.vec8(0, "session_id")?;
    if id.len() > MAX_SESSION_ID_LEN {
        return Err(DtlsWireError::BadLength {
            field: "session_id",
            len: id.len(),
        });
    }
    Ok(id)
}

/// The optional trailing `extensions<0..2^16-1>` of a hello (RFC 5246 §7.4.1.2: "the
/// presence of extensions can be detected by determining whether there are bytes
/// following the compression_methods"); nothing may follow it.
fn extensions<'a>(r: &mut Reader<'a>) -> Result<Extensions<'a>, DtlsWireError> {
    if r.remaining() == 0 {
        return Ok(Extensions::default());
    }
    let raw = r.vec16(0, "extensions")?;
    r.finish("hello")?;
    Extensions::parse(raw)
}
