//! TLS hello extensions (RFC 5246 §7.4.1.4) and the typed bodies shoal reads and
//! writes: use_srtp (RFC 5764 §4.1.1), extended_master_secret (RFC 7627 §5.1),
//! supported_groups and ec_point_formats (RFC 8422 §5.1), signature_algorithms
//! (RFC 5246 §7.4.1.4.1) and renegotiation_info (RFC 5746 §3.2). Others, such as
//! supported_versions (43) in Chromium's ClientHello, are kept as (type, bytes).

use bytes::{BufMut, BytesMut};

use super::codec::{Reader, U16List, put_u16_list, put_vec8, put_vec16};
use super::{DtlsWireError, MAX_EXTENSIONS};

/// supported_groups, formerly elliptic_curves (RFC 8422 §5.1).
pub const EXT_SUPPORTED_GROUPS: u16 = 10;
/// ec_point_formats (RFC 8422 §5.1).
pub const EXT_EC_POINT_FORMATS: u16 = 11;
/// signature_algorithms (RFC 5246 §7.4.1.4.1).
pub const EXT_SIGNATURE_ALGORITHMS: u16 = 13;
/// use_srtp (RFC 5764 §9).
pub const EXT_USE_SRTP: u16 = 14;
/// extended_master_secret (RFC 7627 §5.1: "extension type 0x0017").
pub const EXT_EXTENDED_MASTER_SECRET: u16 = 0x0017;
/// supported_versions (RFC 8446 §4.2.1); a DTLS 1.2 server ignores it.
pub const EXT_SUPPORTED_VERSIONS: u16 = 43;
/// renegotiation_info (RFC 5746 §3.2: type 0xff01).
pub const EXT_RENEGOTIATION_INFO: u16 = 0xff01;

/// ECPointFormat uncompressed(0) (RFC 8422 §5.1.2).
pub const POINT_FORMAT_UNCOMPRESSED: u8 = 0;

/// One extension: its type and its extension_data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extension<'a> {
    /// The ExtensionType.
    pub typ: u16,
    /// The extension_data, as received.
    pub data: &'a [u8],
}

/// The body of a hello's `extensions<0..2^16-1>` vector, validated: every extension is
/// framed, there are at most [`MAX_EXTENSIONS`], and none repeats (RFC 5246 §7.4.1.4:
/// "There MUST NOT be more than one extension of the same type").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Extensions<'a>(&'a [u8]);

impl<'a> Extensions<'a> {
    /// Validates the body of an extensions vector (without its two length bytes).
    pub fn parse(raw: &'a [u8]) -> Result<Extensions<'a>, DtlsWireError> {
        let mut seen = [0u16; MAX_EXTENSIONS];
        let mut count = 0usize;
        let mut r = Reader::new(raw);
        while r.remaining() > 0 {
            let typ = r.u16("extension type")?;
            r.vec16(0, "extension data")?;
            let earlier = seen.get(..count).unwrap_or(&[]);
            if earlier.contains(&typ) {
                return Err(DtlsWireError::DuplicateExtension(typ));
            }
            let slot = seen.get_mut(count).ok_or(DtlsWireError::TooMany {
                field: "extensions",
            })?;
            *slot = typ;
            count += 1;
        }
        Ok(Extensions(raw))
    }

    /// The extensions in wire order.
    pub fn iter(&self) -> impl Iterator<Item = Extension<'a>> + 'a {
        let mut r = Reader::new(self.0);
        // The framing was validated by `parse`, so the reads below cannot fail; if they
        // did, iteration would simply stop.
        std::iter::from_fn(move || {
            let typ = r.u16("extension type").ok()?;
            let data = r.vec16(0, "extension data").ok()?;
            Some(Extension { typ, data })
        })
    }

    /// The data of the extension of type `typ`, if present.
    pub fn get(&self, typ: u16) -> Option<&'a [u8]> {
        self.iter().find(|e| e.typ == typ).map(|e| e.data)
    }

    /// True when an extension of type `typ` is present.
    pub fn contains(&self, typ: u16) -> bool {
        self.get(typ).is_some()
    }

    /// The raw body of the vector.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.0
    }

    /// True when there are no extensions.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// use_srtp, parsed, if present.
    pub fn use_srtp(&self) -> Option<Result<UseSrtp<'a>, DtlsWireError>> {
        self.get(EXT_USE_SRTP).map(UseSrtp::parse)
    }

    /// supported_groups, parsed, if present.
    pub fn supported_groups(&self) -> Option<Result<U16List<'a>, DtlsWireError>> {
        self.get(EXT_SUPPORTED_GROUPS)
            .map(|d| parse_u16_vector(d, 1, "supported_groups"))
    }

    /// signature_algorithms, parsed, if present.
    pub fn signature_algorithms(&self) -> Option<Result<U16List<'a>, DtlsWireError>> {
        self.get(EXT_SIGNATURE_ALGORITHMS)
            .map(|d| parse_u16_vector(d, 1, "signature_algorithms"))
    }

    /// ec_point_formats, parsed (the list of formats), if present.
    pub fn ec_point_formats(&self) -> Option<Result<&'a [u8], DtlsWireError>> {
        self.get(EXT_EC_POINT_FORMATS).map(|d| {
            let mut r = Reader::new(d);
            let formats = r.vec8(1, "ec_point_formats")?;
            r.finish("ec_point_formats")?;
            Ok(formats)
        })
    }

    /// renegotiation_info's renegotiated_connection, if present.
    pub fn renegotiation_info(&self) -> Option<Result<&'a [u8], DtlsWireError>> {
        self.get(EXT_RENEGOTIATION_INFO).map(|d| {
            let mut r = Reader::new(d);
            let conn = r.vec8(0, "renegotiation_info")?;
            r.finish("renegotiation_info")?;
            Ok(conn)
        })
    }

    /// extended_master_secret: `Some(true)` when present and empty as RFC 7627 §5.1
    /// requires, `Some(false)` when present with data, `None` when absent.
    pub fn extended_master_secret(&self) -> Option<bool> {
        self.get(EXT_EXTENDED_MASTER_SECRET).map(|d| d.is_empty())
    }
}

/// A uint16 vector with a two-byte length that fills the extension data exactly.
fn parse_u16_vector<'a>(
    data: &'a [u8],
    min: usize,
    field: &'static str,
) -> Result<U16List<'a>, DtlsWireError> {
    let mut r = Reader::new(data);
    let list = U16List::parse(r.vec16(0, field)?, min, field)?;
    r.finish(field)?;
    Ok(list)
}

/// UseSRTPData of RFC 5764 §4.1.1: protection profiles in preference order and an MKI.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UseSrtp<'a> {
    /// `SRTPProtectionProfile SRTPProtectionProfiles<2..2^16-1>`.
    pub profiles: U16List<'a>,
    /// `opaque srtp_mki<0..255>`.
    pub mki: &'a [u8],
}

impl<'a> UseSrtp<'a> {
    /// Parses the extension data.
    pub fn parse(data: &'a [u8]) -> Result<UseSrtp<'a>, DtlsWireError> {
        let mut r = Reader::new(data);
        let profiles = U16List::parse(r.vec16(2, "use_srtp profiles")?, 1, "use_srtp profiles")?;
        let mki = r.vec8(0, "use_srtp mki")?;
        r.finish("use_srtp")?;
        Ok(UseSrtp { profiles, mki })
    }
}

/// Appends one extension (type, length, data).
pub fn write_extension(out: &mut BytesMut, typ: u16, data: &[u8]) {
    out.put_u16(typ);
    put_vec16(out, data);
}

/// Appends use_srtp with these profiles and MKI (RFC 5764 §4.1.1).
pub fn write_use_srtp(out: &mut BytesMut, profiles: &[u16], mki: &[u8]) {
    out.put_u16(EXT_USE_SRTP);
    let at = super::codec::begin_vec16(out);
    put_u16_list(out, profiles);
    put_vec8(out, mki);
    super::codec::end_vec16(out, at);
}

/// Appends a uint16-list extension: supported_groups or signature_algorithms.
pub fn write_u16_list_extension(out: &mut BytesMut, typ: u16, values: &[u16]) {
    out.put_u16(typ);
    let at = super::codec::begin_vec16(out);
    put_u16_list(out, values);
    super::codec::end_vec16(out, at);
}

/// Appends ec_point_formats offering uncompressed points only (RFC 8422 §5.1.2).
pub fn write_ec_point_formats(out: &mut BytesMut) {
    write_extension(out, EXT_EC_POINT_FORMATS, &[1, POINT_FORMAT_UNCOMPRESSED]);
}

/// Appends renegotiation_info with this renegotiated_connection (empty on an initial
/// handshake, RFC 5746 §3.2: "zero length in both the ClientHello and the ServerHello").
pub fn write_renegotiation_info(out: &mut BytesMut, renegotiated_connection: &[u8]) {
    out.put_u16(EXT_RENEGOTIATION_INFO);
    let at = super::codec::begin_vec16(out);
    put_vec8(out, renegotiated_connection);
    super::codec::end_vec16(out, at);
}

/// Appends extended_master_secret, whose data is empty (RFC 7627 §5.1).
pub fn write_extended_master_secret(out: &mut BytesMut) {
    write_extension(out, EXT_EXTENDED_MASTER_SECRET, &[]);
}
