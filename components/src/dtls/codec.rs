//! Bounds-checked reading and length-prefixed writing of the TLS presentation language
//! (RFC 5246 §4): big-endian integers and vectors with 1, 2 or 3 length bytes.

use bytes::{BufMut, BytesMut};

use super::DtlsWireError;

/// A cursor over untrusted bytes. Every read checks its bounds and names the field it
/// was reading when it fails.
#[derive(Clone, Debug)]
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    /// A reader over `buf`.
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Reader { buf }
    }

    /// Bytes not read yet.
    pub(crate) fn remaining(&self) -> usize {
        self.buf.len()
    }

    /// The bytes not read yet, as a slice.
    pub(crate) fn rest(&self) -> &'a [u8] {
        self.buf
    }

    /// The next `n` bytes.
    pub(crate) fn bytes(
        &mut self,
        n: usize,
        field: &'static str,
    ) -> Result<&'a [u8], DtlsWireError> {
        if n > self.buf.len() {
            return Err(DtlsWireError::Truncated { field });
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    /// The next `N` bytes as an array.
    pub(crate) fn array<const N: usize>(
        &mut self,
        field: &'static str,
    ) -> Result<[u8; N], DtlsWireError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.bytes(N, field)?);
        Ok(out)
    }

    /// A uint8.
    pub(crate) fn u8(&mut self, field: &'static str) -> Result<u8, DtlsWireError> {
        Ok(self.array::<1>(field)?[0])
    }

    /// A uint16.
    pub(crate) fn u16(&mut self, field: &'static str) -> Result<u16, DtlsWireError> {
        Ok(u16::from_be_bytes(self.array(field)?))
    }

    /// A uint24.
    pub(crate) fn u24(&mut self, field: &'static str) -> Result<u32, DtlsWireError> {
        let [a, b, c] = self.array(field)?;
        Ok(u32::from_be_bytes([0, a, b, c]))
    }

    /// A uint48.
    pub(crate) fn u48(&mut self, field: &'static str) -> Result<u64, DtlsWireError> {
        let [a, b, c, d, e, f] = self.array(field)?;
        Ok(u64::from_be_bytes([0, 0, a, b, c, d, e, f]))
    }

    /// `opaque x<min..2^8-1>`.
    pub(crate) fn vec8(
        &mut self,
        min: usize,
        field: &'static str,
    ) -> Result<&'a [u8], DtlsWireError> {
        let len = usize::from(self.u8(field)?);
        Self::check_min(len, min, field)?;
        self.bytes(len, field)
    }

    /// `opaque x<min..2^16-1>`.
    pub(crate) fn vec16(
        &mut self,
        min: usize,
        field: &'static str,
    ) -> Result<&'a [u8], DtlsWireError> {
        let len = usize::from(self.u16(field)?);
        Self::check_min(len, min, field)?;
        self.bytes(len, field)
    }

    /// `opaque x<min..2^24-1>`.
    pub(crate) fn vec24(
        &mut self,
        min: usize,
        field: &'static str,
    ) -> Result<&'a [u8], DtlsWireError> {
        let len = self.u24(field)? as usize;
        Self::check_min(len, min, field)?;
        self.bytes(len, field)
    }

    fn check_min(len: usize, min: usize, field: &'static str) -> Result<(), DtlsWireError> {
        if len < min {
            return Err(DtlsWireError::BadLength { field, len });
        }
        Ok(())
    }

    /// Succeeds only when every byte has been read.
    pub(crate) fn finish(&self, field: &'static str) -> Result<(), DtlsWireError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(DtlsWireError::TrailingBytes { field })
        }
    }
}

/// A vector of uint16 values on the wire (cipher suites, groups, signature schemes,
/// SRTP profiles), validated to have an even length. Iterating does not allocate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct U16List<'a>(&'a [u8]);

impl<'a> U16List<'a> {
    /// Wraps the body of a vector of uint16, refusing an odd length, fewer than `min`
    /// entries or more than [`MAX_U16_LIST`](super::MAX_U16_LIST).
    pub fn parse(raw: &'a [u8], min: usize, field: &'static str) -> Result<Self, DtlsWireError> {
        if !raw.len().is_multiple_of(2) || raw.len() / 2 < min {
            return Err(DtlsWireError::BadLength {
                field,
                len: raw.len(),
            });
        }
        if raw.len() / 2 > super::MAX_U16_LIST {
            return Err(DtlsWireError::TooMany { field });
        }
        Ok(U16List(raw))
    }

    /// The values in wire order.
    pub fn iter(&self) -> impl Iterator<Item = u16> + 'a {
        self.0
            .chunks_exact(2)
            .map(|c| u16::from_be_bytes([c[0], c[1]]))
    }

    /// True when `value` is in the list.
    pub fn contains(&self, value: u16) -> bool {
        self.iter().any(|v| v == value)
    }

    /// The number of values.
    pub fn len(&self) -> usize {
        self.0.len() / 2
    }

    /// True when the list has no values.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The raw bytes, two per value.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.0
    }
}

/// Appends a uint24. Panics (programmer error) when `v` does not fit in 24 bits.
pub(crate) fn put_u24(out: &mut BytesMut, v: u32) {
    assert!(v < 1 << 24, "uint24 out of range");
    out.put_slice(&v.to_be_bytes()[1..]);
}

/// Appends a uint48. Panics (programmer error) when `v` does not fit in 48 bits.
pub(crate) fn put_u48(out: &mut BytesMut, v: u64) {
    assert!(v < 1 << 48, "uint48 out of range");
    out.put_slice(&v.to_be_bytes()[2..]);
}

/// Appends `opaque x<0..2^8-1>`. Panics (programmer error) past 255 bytes.
pub(crate) fn put_vec8(out: &mut BytesMut, data: &[u8]) {
    let len = u8::try_from(data.len()).expect("vector of 2^8-1 bytes at most");
    out.put_u8(len);
    out.put_slice(data);
}

/// Appends `opaque x<0..2^16-1>`. Panics (programmer error) past 65535 bytes.
pub(crate) fn put_vec16(out: &mut BytesMut, data: &[u8]) {
    let len = u16::try_from(data.len()).expect("vector of 2^16-1 bytes at most");
    out.put_u16(len);
    out.put_slice(data);
}

/// Appends `opaque x<0..2^24-1>`. Panics (programmer error) past 2^24-1 bytes.
pub(crate) fn put_vec24(out: &mut BytesMut, data: &[u8]) {
    put_u24(
        out,
        u32::try_from(data.len()).expect("vector of 2^24-1 bytes at most"),
    );
    out.put_slice(data);
}

/// Appends a vector of uint16 values with a uint16 byte-length prefix.
pub(crate) fn put_u16_list(out: &mut BytesMut, values: &[u16]) {
    let len = u16::try_from(values.len() * 2).expect("list of 2^15-1 values at most");
    out.put_u16(len);
    for v in values {
        out.put_u16(*v);
    }
}

/// Starts a vector whose length is written later by [`end_vec16`]; returns where the
/// length goes.
pub(crate) fn begin_vec16(out: &mut BytesMut) -> usize {
    let at = out.len();
    out.put_u16(0);
    at
}

/// Writes the length of the vector started at `at`. Panics (programmer error) past
/// 65535 bytes.
pub(crate) fn end_vec16(out: &mut BytesMut, at: usize) {
    let len = u16::try_from(out.len() - at - 2).expect("vector of 2^16-1 bytes at most");
    out[at..at + 2].copy_from_slice(&len.to_be_bytes());
}
