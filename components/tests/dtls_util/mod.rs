//! A seeded in-memory network for DTLS tests: two `DtlsConn`s, a virtual clock, and
//! links with latency, loss, reordering and duplication, plus an optional
//! man-in-the-middle hook that may rewrite or drop any datagram.

#![allow(dead_code)]

pub mod raw;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};
use shoal_components::dtls::{DtlsCertificate, DtlsConfig, DtlsConn, DtlsEvent, DtlsRole};
use shoal_components::time::Time;

/// Two certificates, made once per test binary.
pub fn certs() -> (Arc<DtlsCertificate>, Arc<DtlsCertificate>) {
    static CERTS: OnceLock<(Arc<DtlsCertificate>, Arc<DtlsCertificate>)> = OnceLock::new();
    CERTS
        .get_or_init(|| {
            (
                Arc::new(DtlsCertificate::generate().unwrap()),
                Arc::new(DtlsCertificate::generate().unwrap()),
            )
        })
        .clone()
}

/// What the links do to datagrams.
#[derive(Clone, Copy, Debug)]
pub struct Link {
    /// One-way latency.
    pub latency: Duration,
    /// Extra random delay up to this much (reorders when larger than gaps).
    pub jitter: Duration,
    /// Probability a datagram is lost.
    pub loss: f64,
    /// Probability a datagram is delivered twice.
    pub duplicate: f64,
}

impl Link {
    /// A clean 10 ms link.
    pub fn clean() -> Self {
        Link {
            latency: Duration::from_millis(10),
            jitter: Duration::ZERO,
            loss: 0.0,
            duplicate: 0.0,
        }
    }
}

/// Which side a datagram came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The client.
    Client,
    /// The server.
    Server,
}

/// The MITM hook: sees every datagram before the link; returns what to deliver.
pub type Mitm = Box<dyn FnMut(Side, Bytes) -> Option<Bytes>>;

/// Two endpoints and the network between them.
pub struct Pair {
    pub client: DtlsConn,
    pub server: DtlsConn,
    pub now: Time,
    rng: ChaCha8Rng,
    link: Link,
    in_flight: Vec<(Time, u64, Side, Bytes)>,
    order: u64,
    pub client_events: Vec<DtlsEvent>,
    pub server_events: Vec<DtlsEvent>,
    pub mitm: Option<Mitm>,
    pub delivered: u64,
}

/// Builds a pair with the default certificates and fingerprints that match.
pub fn pair(client_cfg: DtlsConfig, server_cfg: DtlsConfig, seed: u64, link: Link) -> Pair {
    let (ccert, scert) = certs();
    let (cfp, sfp) = (ccert.fingerprint_sha256(), scert.fingerprint_sha256());
    pair_with(client_cfg, server_cfg, seed, link, sfp, cfp)
}

/// Builds a pair; the client expects `server_fp`, the server `client_fp`.
pub fn pair_with(
    client_cfg: DtlsConfig,
    server_cfg: DtlsConfig,
    seed: u64,
    link: Link,
    server_fp: [u8; 32],
    client_fp: [u8; 32],
) -> Pair {
    let (ccert, scert) = certs();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut cr = [0u8; 32];
    let mut sr = [0u8; 32];
    rng.fill_bytes(&mut cr);
    rng.fill_bytes(&mut sr);
    let now = Time::from_millis(1000);
    let client = DtlsConn::new(
        DtlsRole::Client,
        Arc::new(client_cfg),
        ccert,
        server_fp,
        cr,
        now,
    );
    let server = DtlsConn::new(
        DtlsRole::Server,
        Arc::new(server_cfg),
        scert,
        client_fp,
        sr,
        now,
    );
    Pair {
        client,
        server,
        now,
        rng,
        link,
        in_flight: Vec::new(),
        order: 0,
        client_events: Vec::new(),
        server_events: Vec::new(),
        mitm: None,
        delivered: 0,
    }
}

impl Pair {
    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && (self.rng.next_u64() as f64 / u64::MAX as f64) < p
    }

    fn delay(&mut self) -> Duration {
        let jitter_us = self.link.jitter.as_micros() as u64;
        let extra = if jitter_us == 0 {
            0
        } else {
            self.rng.next_u64() % jitter_us
        };
        self.link.latency + Duration::from_micros(extra)
    }

    fn transmit(&mut self, from: Side, d: Bytes) {
        let d = match self.mitm.as_mut() {
            Some(m) => match m(from, d) {
                Some(d) => d,
                None => return,
            },
            None => d,
        };
        if self.chance(self.link.loss) {
            return;
        }
        let copies = if self.chance(self.link.duplicate) {
            2
        } else {
            1
        };
        for _ in 0..copies {
            let at = self.now + self.delay();
            self.order += 1;
            self.in_flight.push((at, self.order, from, d.clone()));
        }
    }

    /// Moves everything both endpoints want to send onto the links, and their events
    /// into the event logs.
    pub fn flush(&mut self) {
        while let Some(d) = self.client.poll_transmit() {
            assert!(d.len() <= 1200, "datagram of {} bytes", d.len());
            self.transmit(Side::Client, d);
        }
        while let Some(d) = self.server.poll_transmit() {
            assert!(d.len() <= 1200, "datagram of {} bytes", d.len());
            self.transmit(Side::Server, d);
        }
        while let Some(e) = self.client.poll_event() {
            self.client_events.push(e);
        }
        while let Some(e) = self.server.poll_event() {
            self.server_events.push(e);
        }
    }

    /// One step: jump to the next delivery or timer and run it. False when nothing is
    /// left to happen.
    pub fn step(&mut self) -> bool {
        self.flush();
        let next_delivery = self.in_flight.iter().map(|(t, o, _, _)| (*t, *o)).min();
        let next_timer = [self.client.poll_timeout(), self.server.poll_timeout()]
            .into_iter()
            .flatten()
            .min();
        let next = match (next_delivery, next_timer) {
            (Some((d, _)), Some(t)) => d.min(t),
            (Some((d, _)), None) => d,
            (None, Some(t)) => t,
            (None, None) => return false,
        };
        self.now = self.now.max(next);
        if let Some((t, o)) = next_delivery
            && t <= self.now
        {
            {
                let i = self
                    .in_flight
                    .iter()
                    .position(|(t2, o2, _, _)| *t2 == t && *o2 == o)
                    .unwrap();
                let (_, _, from, d) = self.in_flight.swap_remove(i);
                self.delivered += 1;
                let _ = match from {
                    Side::Client => self.server.handle_datagram(self.now, &d),
                    Side::Server => self.client.handle_datagram(self.now, &d),
                };
            }
        }
        self.client.handle_timeout(self.now);
        self.server.handle_timeout(self.now);
        self.flush();
        true
    }

    /// Steps until `done` holds or `max_steps` pass; returns whether `done` held.
    pub fn run_until(&mut self, max_steps: usize, mut done: impl FnMut(&Pair) -> bool) -> bool {
        for _ in 0..max_steps {
            if done(self) {
                return true;
            }
            if !self.step() {
                return done(self);
            }
        }
        done(self)
    }

    /// Runs until both sides are connected.
    pub fn handshake(&mut self, max_steps: usize) -> bool {
        self.run_until(max_steps, |p| {
            p.client.is_connected() && p.server.is_connected()
        })
    }
}

/// The `Connected` event among `events`.
pub fn connected(events: &[DtlsEvent]) -> Option<&DtlsEvent> {
    events
        .iter()
        .find(|e| matches!(e, DtlsEvent::Connected { .. }))
}

/// The application data received, concatenated per record.
pub fn app_data(events: &[DtlsEvent]) -> Vec<Bytes> {
    events
        .iter()
        .filter_map(|e| match e {
            DtlsEvent::ApplicationData(b) => Some(b.clone()),
            _ => None,
        })
        .collect()
}

/// The `Failed` error among `events`.
pub fn failed(events: &[DtlsEvent]) -> Option<&shoal_components::dtls::DtlsError> {
    events.iter().find_map(|e| match e {
        DtlsEvent::Failed(err) => Some(err),
        _ => None,
    })
}

/// The description of the alert that closed the connection, if it closed.
pub fn closed(events: &[DtlsEvent]) -> Option<Option<u8>> {
    events.iter().find_map(|e| match e {
        DtlsEvent::Closed { alert } => Some(*alert),
        _ => None,
    })
}
