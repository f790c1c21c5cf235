//! Dishonest peers written against the wire formats and the crypto directly: a client
//! and a server that each run a real handshake with a shoal endpoint (suite 0xC02B,
//! X25519, whole messages in one record each) but let a test spoil one thing, send
//! records of its choosing, or retransmit a flight.

use bytes::{Bytes, BytesMut};
use shoal_components::dtls::crypto::{
    EphemeralKey, PrfHash, RecordCipher, extended_master_secret, key_block, verify_data,
};
use shoal_components::dtls::extension::{
    EXT_SIGNATURE_ALGORITHMS, EXT_SUPPORTED_GROUPS, write_ec_point_formats,
    write_extended_master_secret, write_renegotiation_info, write_u16_list_extension,
};
use shoal_components::dtls::{
    Alert, Certificate, CertificateRequest, ClientHello, ClientKeyExchange, ContentType, DTLS_1_2,
    DigitallySigned, Extensions, HandshakeFragments, HandshakeType, RecordHeader, Records,
    ServerHello, ServerKeyExchange, U16List, write_handshake,
};
use shoal_components::dtls::{CipherSuite, NamedGroup};

use super::certs;

/// The suite both raw peers speak.
pub const SUITE: CipherSuite = CipherSuite::EcdheEcdsaAes128GcmSha256;
/// SignatureAndHashAlgorithm {sha256, ecdsa}.
const ECDSA_SHA256: u16 = 0x0403;

/// Appends one plaintext record.
pub fn record(out: &mut BytesMut, ct: ContentType, epoch: u16, seq: u64, body: &[u8]) {
    RecordHeader {
        content_type: ct,
        version: DTLS_1_2,
        epoch,
        sequence_number: seq,
        length: u16::try_from(body.len()).unwrap(),
    }
    .write(out);
    out.extend_from_slice(body);
}

/// Appends one epoch-1 record sealed with `cipher`.
pub fn seal(out: &mut BytesMut, cipher: &RecordCipher, ct: ContentType, seq: u64, body: &[u8]) {
    let start = out.len();
    RecordHeader {
        content_type: ct,
        version: DTLS_1_2,
        epoch: 1,
        sequence_number: seq,
        length: 0,
    }
    .write(out);
    out.extend_from_slice(&[0; 8]);
    out.extend_from_slice(body);
    cipher.seal_record(out, start).unwrap();
}

/// The alert (level, description) in a datagram's first record: plaintext in epoch 0,
/// opened with `cipher` in epoch 1.
pub fn alert_in(d: &[u8], cipher: Option<&RecordCipher>) -> Option<(u8, u8)> {
    let r = Records::new(d).next()?.ok()?;
    if r.header.content_type != ContentType::Alert {
        return None;
    }
    let mut raw = r.raw.to_vec();
    let body = match (r.header.epoch, cipher) {
        (0, _) => r.fragment,
        (1, Some(c)) => c.open_record(&mut raw).ok()?,
        _ => return None,
    };
    let alert = Alert::parse(body).ok()?;
    Some((alert.level as u8, alert.description.0))
}

/// The whole epoch-0 handshake messages (type, message_seq, body) in `datagrams`.
fn whole_messages(datagrams: &[Bytes]) -> Vec<(HandshakeType, u16, Vec<u8>)> {
    let mut out = Vec::new();
    for d in datagrams {
        for r in Records::new(d) {
            let r = r.unwrap();
            if r.header.epoch != 0 || r.header.content_type != ContentType::Handshake {
                continue;
            }
            for f in HandshakeFragments::new(r.fragment) {
                let f = f.unwrap();
                assert!(f.header.is_whole(), "the raw peers want whole messages");
                out.push((f.header.msg_type, f.header.message_seq, f.body.to_vec()));
            }
        }
    }
    out
}

/// Record numbering and the handshake log, which both raw peers keep alike.
struct Wire {
    log: Vec<u8>,
    epoch0_seq: u64,
    epoch1_seq: u64,
}

impl Wire {
    /// One whole handshake message: logged (unless `log` is false) and returned with
    /// its header, ready for a record.
    fn message(&mut self, t: HandshakeType, seq: u16, body: &[u8], log: bool) -> BytesMut {
        let mut m = BytesMut::new();
        write_handshake(&mut m, t, seq, body);
        if log {
            self.log.extend_from_slice(&m);
        }
        m
    }

    fn plain(&mut self, out: &mut BytesMut, ct: ContentType, body: &[u8]) {
        record(out, ct, 0, self.epoch0_seq, body);
        self.epoch0_seq += 1;
    }

    fn sealed(&mut self, out: &mut BytesMut, cipher: &RecordCipher, ct: ContentType, body: &[u8]) {
        seal(out, cipher, ct, self.epoch1_seq, body);
        self.epoch1_seq += 1;
    }

    fn hash(&self) -> ring::digest::Digest {
        ring::digest::digest(&ring::digest::SHA256, &self.log)
    }
}

/// The keys of a finished key exchange.
pub struct Keys {
    /// Seals what the client sends.
    pub client: RecordCipher,
    /// Seals what the server sends.
    pub server: RecordCipher,
    master: [u8; 48],
}

fn derive(pre_master: &[u8], session_hash: &[u8], client: &[u8; 32], server: &[u8; 32]) -> Keys {
    let master = extended_master_secret(PrfHash::Sha256, pre_master, session_hash);
    let kb = key_block(SUITE, &master, client, server);
    Keys {
        client: RecordCipher::new(SUITE, &kb.client_write_key, kb.client_write_iv).unwrap(),
        server: RecordCipher::new(SUITE, &kb.server_write_key, kb.server_write_iv).unwrap(),
        master,
    }
}

/// What a raw client gets wrong on purpose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientSpoil {
    /// Nothing: an honest client.
    Nothing,
    /// No Certificate message at all.
    NoCertificate,
    /// A Certificate message with an empty certificate_list.
    EmptyCertificate,
    /// No CertificateVerify.
    NoCertificateVerify,
    /// A wrong verify_data in Finished.
    BadFinished,
    /// The right Finished, but in a plaintext epoch-0 record.
    PlaintextFinished,
}

/// A client flight 5, kept whole so that it can be sent again with new record numbers.
pub struct Flight5 {
    messages: Vec<BytesMut>,
    finished: BytesMut,
    finished_in_epoch0: bool,
}

/// The dishonest client.
pub struct RawClient {
    /// ClientHello.random.
    pub random: [u8; 32],
    /// ClientHello.client_version.
    pub version: u16,
    /// Whether ClientHello offers extended_master_secret.
    pub ems: bool,
    /// The keys, once flight 5 is made.
    pub keys: Option<Keys>,
    wire: Wire,
    next_message_seq: u16,
}

impl RawClient {
    /// An honest client whose first record is numbered 0.
    pub fn new(random: [u8; 32]) -> RawClient {
        RawClient {
            random,
            version: DTLS_1_2,
            ems: true,
            keys: None,
            wire: Wire {
                log: Vec::new(),
                epoch0_seq: 0,
                epoch1_seq: 0,
            },
            next_message_seq: 0,
        }
    }

    /// Numbers the next epoch-0 record `seq`.
    pub fn set_record_seq(&mut self, seq: u64) {
        self.wire.epoch0_seq = seq;
    }

    /// A datagram with one ClientHello numbered `message_seq` (the handshake log
    /// starts over with it).
    pub fn client_hello(&mut self, message_seq: u16) -> BytesMut {
        let mut ext = BytesMut::new();
        write_u16_list_extension(
            &mut ext,
            EXT_SUPPORTED_GROUPS,
            &[NamedGroup::X25519.to_u16()],
        );
        write_ec_point_formats(&mut ext);
        write_u16_list_extension(&mut ext, EXT_SIGNATURE_ALGORITHMS, &[ECDSA_SHA256]);
        if self.ems {
            write_extended_master_secret(&mut ext);
        }
        let suites = SUITE.to_u16().to_be_bytes();
        let mut body = BytesMut::new();
        ClientHello {
            client_version: self.version,
            random: self.random,
            session_id: &[],
            cookie: &[],
            cipher_suites: U16List::parse(&suites, 1, "suites").unwrap(),
            compression_methods: &[0],
            extensions: Extensions::parse(&ext).unwrap(),
        }
        .write(&mut body);
        self.wire.log.clear();
        let m = self
            .wire
            .message(HandshakeType::ClientHello, message_seq, &body, true);
        self.next_message_seq = message_seq.wrapping_add(1);
        let mut out = BytesMut::new();
        self.wire.plain(&mut out, ContentType::Handshake, &m);
        out
    }

    /// Flight 5 in answer to the server's flight 4, spoiled as asked; derives the keys.
    pub fn flight5(&mut self, flight4: &[Bytes], spoil: ClientSpoil) -> Flight5 {
        let (ccert, _) = certs();
        let mut server_random = [0u8; 32];
        let mut ske_public = Vec::new();
        for (t, seq, body) in whole_messages(flight4) {
            self.wire.message(t, seq, &body, true);
            match t {
                HandshakeType::ServerHello => {
                    server_random = ServerHello::parse(&body).unwrap().random;
                }
                HandshakeType::ServerKeyExchange => {
                    ske_public = ServerKeyExchange::parse(&body).unwrap().public.to_vec();
                }
                _ => {}
            }
        }
        let key = EphemeralKey::generate(NamedGroup::X25519).unwrap();
        let public = key.public_key().to_vec();
        let pre_master = key.agree(&ske_public).unwrap();
        let mut seq = self.next_message_seq;
        let mut messages = Vec::new();
        let mut b = BytesMut::new();
        match spoil {
            ClientSpoil::NoCertificate => {}
            ClientSpoil::EmptyCertificate => Certificate::write(&[], &mut b),
            _ => Certificate::write(&[ccert.der()], &mut b),
        }
        if spoil != ClientSpoil::NoCertificate {
            messages.push(self.wire.message(HandshakeType::Certificate, seq, &b, true));
            seq += 1;
        }
        let mut b = BytesMut::new();
        ClientKeyExchange { public: &public }.write(&mut b);
        messages.push(
            self.wire
                .message(HandshakeType::ClientKeyExchange, seq, &b, true),
        );
        seq += 1;
        let keys = derive(
            &pre_master,
            self.wire.hash().as_ref(),
            &self.random,
            &server_random,
        );
        if spoil != ClientSpoil::NoCertificateVerify {
            let signature = ccert.sign(&self.wire.log).unwrap();
            let mut b = BytesMut::new();
            DigitallySigned {
                scheme: ECDSA_SHA256,
                signature: &signature,
            }
            .write(&mut b);
            messages.push(
                self.wire
                    .message(HandshakeType::CertificateVerify, seq, &b, true),
            );
            seq += 1;
        }
        let hash = self.wire.hash();
        let mut vd = verify_data(
            PrfHash::Sha256,
            &keys.master,
            b"client finished",
            hash.as_ref(),
        );
        if spoil == ClientSpoil::BadFinished {
            vd[0] ^= 0xff;
        }
        let finished = self.wire.message(HandshakeType::Finished, seq, &vd, true);
        self.keys = Some(keys);
        Flight5 {
            messages,
            finished,
            finished_in_epoch0: spoil == ClientSpoil::PlaintextFinished,
        }
    }

    /// Flight 5 as one datagram, in new records.
    pub fn write(&mut self, f: &Flight5) -> BytesMut {
        self.write_with(f, None, None)
    }

    /// Flight 5 as one datagram, with application data sealed right before and after
    /// the Finished.
    pub fn write_with(
        &mut self,
        f: &Flight5,
        data_before_finished: Option<&[u8]>,
        data_after_finished: Option<&[u8]>,
    ) -> BytesMut {
        let mut out = BytesMut::new();
        for m in &f.messages {
            self.wire.plain(&mut out, ContentType::Handshake, m);
        }
        self.wire
            .plain(&mut out, ContentType::ChangeCipherSpec, &[1]);
        if let Some(data) = data_before_finished {
            out.extend_from_slice(&self.app_data(data));
        }
        if f.finished_in_epoch0 {
            self.wire
                .plain(&mut out, ContentType::Handshake, &f.finished);
        } else {
            let keys = self.keys.as_ref().unwrap();
            self.wire
                .sealed(&mut out, &keys.client, ContentType::Handshake, &f.finished);
        }
        if let Some(data) = data_after_finished {
            out.extend_from_slice(&self.app_data(data));
        }
        out
    }

    /// One application_data record, sealed.
    pub fn app_data(&mut self, data: &[u8]) -> BytesMut {
        let mut out = BytesMut::new();
        let keys = self.keys.as_ref().unwrap();
        self.wire
            .sealed(&mut out, &keys.client, ContentType::ApplicationData, data);
        out
    }

    /// A handshake message of our choosing, sealed in epoch 1.
    pub fn sealed_handshake(&mut self, t: HandshakeType, seq: u16, body: &[u8]) -> BytesMut {
        let m = self.wire.message(t, seq, body, false);
        let mut out = BytesMut::new();
        let keys = self.keys.as_ref().unwrap();
        self.wire
            .sealed(&mut out, &keys.client, ContentType::Handshake, &m);
        out
    }
}

/// What a raw server gets wrong on purpose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServerSpoil {
    /// Nothing: an honest server.
    Nothing,
    /// No extended_master_secret in ServerHello.
    NoEms,
    /// No Certificate message.
    NoCertificate,
    /// No ServerKeyExchange.
    NoServerKeyExchange,
    /// A wrong verify_data in Finished.
    BadFinished,
}

/// The dishonest server.
pub struct RawServer {
    /// ServerHello.random.
    pub random: [u8; 32],
    /// The keys, once the client's key exchange arrived.
    pub keys: Option<Keys>,
    client_random: [u8; 32],
    ephemeral: Option<EphemeralKey>,
    wire: Wire,
    next_message_seq: u16,
}

impl RawServer {
    /// A server with this random.
    pub fn new(random: [u8; 32]) -> RawServer {
        RawServer {
            random,
            keys: None,
            client_random: [0; 32],
            ephemeral: None,
            wire: Wire {
                log: Vec::new(),
                epoch0_seq: 0,
                epoch1_seq: 0,
            },
            next_message_seq: 0,
        }
    }

    /// Flight 4 in answer to a ClientHello datagram (no cookie exchange), spoiled as
    /// asked.
    pub fn flight4(&mut self, client_hello: &[u8], spoil: ServerSpoil) -> BytesMut {
        let (_, scert) = certs();
        let hello = whole_messages(&[Bytes::copy_from_slice(client_hello)]);
        let (t, seq, body) = &hello[0];
        assert_eq!(*t, HandshakeType::ClientHello);
        self.client_random = ClientHello::parse(body).unwrap().random;
        self.wire.message(*t, *seq, body, true);
        // RFC 6347 §4.2.2: each side numbers its own messages from 0; with no cookie
        // exchange the ServerHello is 0, like the ClientHello.
        self.next_message_seq = *seq;

        let mut out = BytesMut::new();
        let mut ext = BytesMut::new();
        write_renegotiation_info(&mut ext, &[]);
        if spoil != ServerSpoil::NoEms {
            write_extended_master_secret(&mut ext);
        }
        let mut b = BytesMut::new();
        ServerHello {
            server_version: DTLS_1_2,
            random: self.random,
            session_id: &[],
            cipher_suite: SUITE.to_u16(),
            compression_method: 0,
            extensions: Extensions::parse(&ext).unwrap(),
        }
        .write(&mut b);
        self.send(&mut out, HandshakeType::ServerHello, &b);

        if spoil != ServerSpoil::NoCertificate {
            let mut b = BytesMut::new();
            Certificate::write(&[scert.der()], &mut b);
            self.send(&mut out, HandshakeType::Certificate, &b);
        }

        let key = EphemeralKey::generate(NamedGroup::X25519).unwrap();
        let mut b = BytesMut::new();
        ServerKeyExchange::write_params(NamedGroup::X25519.to_u16(), key.public_key(), &mut b);
        let mut signed = self.client_random.to_vec();
        signed.extend_from_slice(&self.random);
        signed.extend_from_slice(&b);
        let signature = scert.sign(&signed).unwrap();
        DigitallySigned {
            scheme: ECDSA_SHA256,
            signature: &signature,
        }
        .write(&mut b);
        self.ephemeral = Some(key);
        if spoil != ServerSpoil::NoServerKeyExchange {
            self.send(&mut out, HandshakeType::ServerKeyExchange, &b);
        }

        let mut b = BytesMut::new();
        CertificateRequest::write(&[64], &[ECDSA_SHA256], &mut b);
        self.send(&mut out, HandshakeType::CertificateRequest, &b);
        self.send(&mut out, HandshakeType::ServerHelloDone, &[]);
        out
    }

    fn send(&mut self, out: &mut BytesMut, t: HandshakeType, body: &[u8]) {
        let m = self.wire.message(t, self.next_message_seq, body, true);
        self.next_message_seq += 1;
        self.wire.plain(out, ContentType::Handshake, &m);
    }

    /// Takes the client's flight 5 (whole messages) and answers with ChangeCipherSpec
    /// and Finished, spoiled as asked, then `data` as application data if given.
    pub fn flight6(
        &mut self,
        flight5: &[Bytes],
        spoil: ServerSpoil,
        data: Option<&[u8]>,
    ) -> BytesMut {
        for (t, seq, body) in whole_messages(flight5) {
            self.wire.message(t, seq, &body, true);
            if t == HandshakeType::ClientKeyExchange {
                let public = ClientKeyExchange::parse(&body).unwrap().public.to_vec();
                let pre_master = self.ephemeral.take().unwrap().agree(&public).unwrap();
                let hash = self.wire.hash();
                self.keys = Some(derive(
                    &pre_master,
                    hash.as_ref(),
                    &self.client_random,
                    &self.random,
                ));
            }
        }
        let keys = self.keys.take().expect("a ClientKeyExchange");
        // The client's Finished, in epoch 1, enters the log too.
        for d in flight5 {
            for r in Records::new(d) {
                let r = r.unwrap();
                if r.header.epoch == 1 && r.header.content_type == ContentType::Handshake {
                    let mut raw = r.raw.to_vec();
                    let plain = keys.client.open_record(&mut raw).unwrap();
                    self.wire.log.extend_from_slice(plain);
                }
            }
        }
        let hash = self.wire.hash();
        let mut vd = verify_data(
            PrfHash::Sha256,
            &keys.master,
            b"server finished",
            hash.as_ref(),
        );
        if spoil == ServerSpoil::BadFinished {
            vd[0] ^= 0xff;
        }
        let m = self
            .wire
            .message(HandshakeType::Finished, self.next_message_seq, &vd, true);
        let mut out = BytesMut::new();
        self.wire
            .plain(&mut out, ContentType::ChangeCipherSpec, &[1]);
        self.wire
            .sealed(&mut out, &keys.server, ContentType::Handshake, &m);
        if let Some(data) = data {
            self.wire
                .sealed(&mut out, &keys.server, ContentType::ApplicationData, data);
        }
        self.keys = Some(keys);
        out
    }
}
