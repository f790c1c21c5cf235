//! The sending side of the record layer: records written and sealed in place into one
//! reusable buffer, packed into datagrams of at most the MTU (RFC 6347 §4.1.1), and
//! handshake flights fragmented to fit (§4.2.3).

use std::collections::VecDeque;

use crate::dtls::{
    Alert, AlertDescription, AlertLevel, ContentType, DTLS_1_2, HANDSHAKE_HEADER_LEN,
    HandshakeHeader, HandshakeType, MAX_PLAINTEXT_LEN, RECORD_HEADER_LEN, RecordHeader,
};
use bytes::{BufMut, Bytes, BytesMut};

use super::DtlsError;
use super::crypto::{EXPLICIT_NONCE_LEN, RECORD_OVERHEAD, RecordCipher};

/// The most bytes waiting in the send buffer; past it application data is refused
/// with [`DtlsError::SendBufferFull`] until the caller drains `poll_transmit`.
pub const MAX_QUEUED_BYTES: usize = 256 * 1024;
/// The send buffer grows by at least this much at a time: sealed datagrams are split off
/// it as `Bytes`, and the allocation is reclaimed once they are all dropped. About one
/// GSO send's worth, so that a busy tick allocates once per ~50 datagrams and, as the
/// finished datagrams leave the front as they are written
/// ([`Sender::pop_finished`]), a new chunk never copies more than the open datagram.
const TX_CHUNK: usize = 64 * 1024;
/// A handshake fragment smaller than this is not worth starting in the remaining room
/// of a datagram: the next datagram takes it.
const MIN_FRAGMENT: usize = 64;
/// RFC 6347 §4.1: "implementations MUST either abandon an association or rehandshake
/// prior to allowing the sequence number to wrap".
const MAX_SEQUENCE: u64 = (1 << 48) - 1;

/// One message of a flight, kept whole so that retransmissions can fragment it anew.
#[derive(Clone, Debug)]
pub enum FlightItem {
    /// A handshake message, sent in `epoch`.
    Handshake {
        /// Its type.
        msg_type: HandshakeType,
        /// Its message_seq.
        seq: u16,
        /// The epoch it goes out in (1 only for Finished).
        epoch: u16,
        /// The body.
        body: Bytes,
    },
    /// ChangeCipherSpec, always in epoch 0; part of the flight for retransmission
    /// (RFC 6347 §4.2.5).
    ChangeCipherSpec,
}

/// Write keys, sequence numbers and the outgoing datagram buffer.
pub struct Sender {
    buf: BytesMut,
    /// Lengths of the finished datagrams at the front of `buf`, in order.
    ready: VecDeque<usize>,
    /// Bytes of the datagram still being filled at the end of `buf`.
    open_len: usize,
    mtu: usize,
    /// Next sequence number per epoch (0 and 1).
    next_seq: [u64; 2],
    /// The epoch-1 write cipher, once keys are derived.
    cipher: Option<RecordCipher>,
    /// The epoch that alerts and application data use: 1 after our ChangeCipherSpec.
    pub epoch: u16,
    /// Datagrams handed out.
    pub datagrams_sent: u64,
}

impl Sender {
    /// An empty sender for datagrams of at most `mtu` bytes.
    pub fn new(mtu: usize) -> Self {
        Sender {
            buf: BytesMut::new(),
            ready: VecDeque::new(),
            open_len: 0,
            mtu,
            next_seq: [0; 2],
            cipher: None,
            epoch: 0,
            datagrams_sent: 0,
        }
    }

    /// Installs the epoch-1 write cipher (records in epoch 1 can be written from now on).
    pub fn set_cipher(&mut self, cipher: RecordCipher) {
        self.cipher = Some(cipher);
    }

    /// Sets the next epoch-0 sequence number: RFC 6347 §4.2.1 has the server reuse the
    /// ClientHello's record sequence number for HelloVerifyRequest and ServerHello.
    pub fn set_epoch0_seq(&mut self, seq: u64) {
        self.next_seq[0] = seq.min(MAX_SEQUENCE);
    }

    /// The next finished datagram, if any; the datagram being filled is finished first.
    pub fn pop(&mut self) -> Option<Bytes> {
        self.close_datagram();
        self.pop_finished()
    }

    /// The next datagram that is already finished; the one being filled stays open,
    /// so that records written next can still join it.
    pub fn pop_finished(&mut self) -> Option<Bytes> {
        let len = self.ready.pop_front()?;
        self.datagrams_sent += 1;
        let d = self.buf.split_to(len).freeze();
        if self.buf.is_empty() {
            // Let go of the chunk: the datagrams in flight own it now and free it once
            // sent, so an idle connection holds no send buffer (10 000 of them would
            // otherwise pin TX_CHUNK each).
            self.buf = BytesMut::new();
        }
        Some(d)
    }

    /// The most plaintext one application_data record may carry and still fit in a
    /// datagram alone.
    pub fn max_application_plaintext(&self) -> usize {
        self.mtu
            .saturating_sub(RECORD_HEADER_LEN + RECORD_OVERHEAD)
            .clamp(1, MAX_PLAINTEXT_LEN)
    }

    /// Ends the datagram being filled.
    pub fn close_datagram(&mut self) {
        if self.open_len > 0 {
            self.ready.push_back(self.open_len);
            self.open_len = 0;
        }
    }

    /// Room left in the datagram being filled.
    fn room(&self) -> usize {
        self.mtu.saturating_sub(self.open_len)
    }

    /// Appends one record of `plain_len` plaintext bytes written by `fill`, sealing it
    /// in place when `epoch` is 1. Starts a new datagram when this one is too full.
    fn write_record(
        &mut self,
        epoch: u16,
        content_type: ContentType,
        plain_len: usize,
        fill: impl FnOnce(&mut BytesMut),
    ) -> Result<(), DtlsError> {
        self.write_record_with(epoch, content_type, plain_len, |b| {
            fill(b);
            true
        })
        .map(|_| ())
    }

    /// Appends one record whose plaintext `fill` writes straight into the buffer (at
    /// most `max_plain` bytes), sealing it in place when `epoch` is 1. `fill` returning
    /// false leaves nothing behind and uses no sequence number. The record joins the
    /// open datagram if it fits there, else starts the next one: records lie back to
    /// back in the buffer, so ending the open datagram before it is only bookkeeping.
    /// Returns whether a record was written.
    fn write_record_with(
        &mut self,
        epoch: u16,
        content_type: ContentType,
        max_plain: usize,
        fill: impl FnOnce(&mut BytesMut) -> bool,
    ) -> Result<bool, DtlsError> {
        let protected = epoch > 0;
        if protected && self.cipher.is_none() {
            return Err(DtlsError::Internal("no write key for epoch 1"));
        }
        let slot = usize::from(epoch.min(1));
        let seq = self.next_seq[slot];
        if seq >= MAX_SEQUENCE {
            return Err(DtlsError::Internal("record sequence number exhausted"));
        }
        if max_plain > usize::from(u16::MAX) {
            return Err(DtlsError::Internal("record too long"));
        }
        let overhead = RECORD_HEADER_LEN + if protected { RECORD_OVERHEAD } else { 0 };
        let start = self.buf.len();
        let need = overhead + max_plain;
        if self.buf.capacity() - start < need {
            self.buf.reserve(need.max(TX_CHUNK));
        }
        RecordHeader {
            content_type,
            version: DTLS_1_2,
            epoch,
            sequence_number: seq,
            // Set below from what `fill` wrote.
            length: 0,
        }
        .write(&mut self.buf);
        if protected {
            self.buf.put_bytes(0, EXPLICIT_NONCE_LEN);
        }
        let body = self.buf.len();
        if !fill(&mut self.buf) {
            self.buf.truncate(start);
            return Ok(false);
        }
        let plain_len = self.buf.len() - body;
        if plain_len > max_plain {
            self.buf.truncate(start);
            return Err(DtlsError::Internal("record longer than announced"));
        }
        match &self.cipher {
            // `seal_record` sets the length field to the sealed fragment's.
            Some(c) if protected => {
                if let Err(e) = c.seal_record(&mut self.buf, start) {
                    self.buf.truncate(start);
                    return Err(e.into());
                }
            }
            // ≤ max_plain ≤ u16::MAX, checked above.
            _ => self.buf[start + 11..start + RECORD_HEADER_LEN]
                .copy_from_slice(&(plain_len as u16).to_be_bytes()),
        }
        self.next_seq[slot] = seq + 1;
        let len = self.buf.len() - start;
        if self.open_len > 0 && self.open_len + len > self.mtu {
            self.close_datagram();
        }
        self.open_len += len;
        Ok(true)
    }

    /// Writes a whole flight, fragmenting handshake messages to fit the MTU, and ends
    /// the last datagram so the flight stands alone.
    pub fn write_flight(&mut self, items: &[FlightItem]) -> Result<(), DtlsError> {
        for item in items {
            match item {
                FlightItem::ChangeCipherSpec => {
                    // RFC 5246 §7.1: the message "consists of a single byte of value 1".
                    self.write_record(0, ContentType::ChangeCipherSpec, 1, |b| b.put_u8(1))?;
                }
                FlightItem::Handshake {
                    msg_type,
                    seq,
                    epoch,
                    body,
                } => self.write_message(*msg_type, *seq, *epoch, body)?,
            }
        }
        self.close_datagram();
        Ok(())
    }

    /// One handshake message in as many fragments as the MTU needs (RFC 6347 §4.2.3:
    /// contiguous, non-overlapping ranges, each labelled with its offset and length).
    fn write_message(
        &mut self,
        msg_type: HandshakeType,
        seq: u16,
        epoch: u16,
        body: &[u8],
    ) -> Result<(), DtlsError> {
        let overhead =
            RECORD_HEADER_LEN + HANDSHAKE_HEADER_LEN + if epoch > 0 { RECORD_OVERHEAD } else { 0 };
        let total = body.len();
        let length = u32::try_from(total).map_err(|_| DtlsError::Internal("message too long"))?;
        let mut offset = 0usize;
        loop {
            let left = total - offset;
            if self.room() < overhead + left.min(MIN_FRAGMENT) {
                self.close_datagram();
            }
            let max_fragment = self.room().saturating_sub(overhead).max(1);
            let n = left
                .min(max_fragment)
                .min(MAX_PLAINTEXT_LEN - HANDSHAKE_HEADER_LEN);
            let header = HandshakeHeader {
                msg_type,
                length,
                message_seq: seq,
                fragment_offset: offset as u32,
                fragment_length: n as u32,
            };
            let part = body.get(offset..offset + n).unwrap_or(&[]);
            self.write_record(
                epoch,
                ContentType::Handshake,
                HANDSHAKE_HEADER_LEN + n,
                |b| {
                    header.write(b);
                    b.put_slice(part);
                },
            )?;
            offset += n;
            if offset >= total {
                return Ok(());
            }
        }
    }

    /// An alert in the current write epoch. Alerts are never retransmitted (RFC 6347
    /// §4.2.7).
    pub fn write_alert(
        &mut self,
        level: AlertLevel,
        description: AlertDescription,
    ) -> Result<(), DtlsError> {
        let epoch = if self.cipher.is_some() { self.epoch } else { 0 };
        self.write_record(epoch, ContentType::Alert, 2, |b| {
            Alert { level, description }.write(b)
        })?;
        self.close_datagram();
        Ok(())
    }

    /// One application_data record in epoch 1 whose plaintext `fill` appends to the
    /// outgoing buffer itself, then sealed in place: a caller that builds its packet
    /// there (SCTP does) needs no buffer of its own and no copy. `fill` may write at
    /// most `max_plain` bytes (at most [`Sender::max_application_plaintext`]); returning
    /// false, it writes nothing and no record is made. Returns whether a record was
    /// written.
    pub fn write_application_with(
        &mut self,
        max_plain: usize,
        fill: impl FnOnce(&mut BytesMut) -> bool,
    ) -> Result<bool, DtlsError> {
        let max_plain = max_plain.min(self.max_application_plaintext());
        if self.buf.len() + max_plain > MAX_QUEUED_BYTES {
            return Err(DtlsError::SendBufferFull);
        }
        self.write_record_with(1, ContentType::ApplicationData, max_plain, fill)
    }

    /// Application data in epoch 1, in records of at most what one datagram holds;
    /// several small records share a datagram.
    pub fn write_application_data(&mut self, data: &[u8]) -> Result<(), DtlsError> {
        if self.buf.len() + data.len() > MAX_QUEUED_BYTES {
            return Err(DtlsError::SendBufferFull);
        }
        let max_plain = self.max_application_plaintext();
        let mut chunks = data.chunks(max_plain);
        // An empty write still sends one (empty) record.
        let first = chunks.next().unwrap_or(&[]);
        for chunk in std::iter::once(first).chain(chunks) {
            self.write_record(1, ContentType::ApplicationData, chunk.len(), |b| {
                b.put_slice(chunk)
            })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtls::CipherSuite;

    fn sender(mtu: usize) -> (Sender, RecordCipher) {
        let mut s = Sender::new(mtu);
        let key = [7u8; 16];
        s.set_cipher(
            RecordCipher::new(CipherSuite::EcdheEcdsaAes128GcmSha256, &key, [1; 4]).unwrap(),
        );
        let open = RecordCipher::new(CipherSuite::EcdheEcdsaAes128GcmSha256, &key, [1; 4]).unwrap();
        (s, open)
    }

    /// The records of one datagram, opened: (sequence number, plaintext).
    fn open_all(open: &RecordCipher, datagram: &[u8]) -> Vec<(u64, Vec<u8>)> {
        let mut out = Vec::new();
        let mut rest = datagram.to_vec();
        while !rest.is_empty() {
            let len = RECORD_HEADER_LEN + usize::from(u16::from_be_bytes([rest[11], rest[12]]));
            let mut record: Vec<u8> = rest.drain(..len).collect();
            let seq = u64::from_be_bytes([
                0, 0, record[5], record[6], record[7], record[8], record[9], record[10],
            ]);
            out.push((seq, open.open_record(&mut record).unwrap().to_vec()));
        }
        out
    }

    #[test]
    fn records_written_in_place_pack_into_datagrams_of_at_most_the_mtu() {
        let (mut s, open) = sender(1200);
        let max = s.max_application_plaintext();
        // A fill that writes nothing uses no sequence number and leaves no bytes.
        assert!(!s.write_application_with(max, |_| false).unwrap());
        assert!(s.pop().is_none());
        // Small records share a datagram; one that would overflow it starts the next.
        for fill in [1u8, 2, 3] {
            assert!(
                s.write_application_with(max, |b| {
                    b.put_bytes(fill, 300);
                    true
                })
                .unwrap()
            );
        }
        // Exactly the largest record: alone in its datagram, at exactly the MTU.
        assert!(
            s.write_application_with(max, |b| {
                b.put_bytes(4, max);
                true
            })
            .unwrap()
        );
        // Mixed with the copying form.
        s.write_application_data(&[5u8; 10]).unwrap();
        // Longer than announced: refused, nothing left behind, no sequence number.
        assert!(
            s.write_application_with(10, |b| {
                b.put_bytes(6, 11);
                true
            })
            .is_err()
        );
        let mut datagrams = Vec::new();
        while let Some(d) = s.pop() {
            assert!(d.len() <= 1200, "{}", d.len());
            datagrams.push(d);
        }
        assert_eq!(
            datagrams.len(),
            3,
            "{:?}",
            datagrams.iter().map(|d| d.len()).collect::<Vec<_>>()
        );
        assert_eq!(datagrams[1].len(), 1200);
        let records: Vec<(u64, Vec<u8>)> =
            datagrams.iter().flat_map(|d| open_all(&open, d)).collect();
        let seqs: Vec<u64> = records.iter().map(|r| r.0).collect();
        assert_eq!(seqs, vec![0, 1, 2, 3, 4]);
        let lens: Vec<usize> = records.iter().map(|r| r.1.len()).collect();
        assert_eq!(lens, vec![300, 300, 300, max, 10]);
        for (i, (_, plain)) in records.iter().enumerate() {
            assert!(plain.iter().all(|&b| b == i as u8 + 1));
        }
        // Emptied, the sender holds no buffer.
        assert_eq!(s.buf.capacity(), 0);
    }
}
