//! Interop with the real `openssl` command line over UDP on 127.0.0.1: shoal's
//! `DtlsConn` as client against `openssl s_server -dtls1_2`, and as server against
//! `openssl s_client -dtls1_2`, with and without a cookie exchange (driven by either
//! side), fragmented flights, and every SRTP profile shoal speaks (AES-CM and both AEAD
//! profiles). Both sides authenticate with ECDSA P-256 certificates, negotiate
//! use_srtp, exchange application data both ways, and must agree on the profile and
//! the EXTRACTOR-dtls_srtp keying material that openssl prints.
//!
//! Every wait is bounded; the openssl child is killed by a drop guard.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use shoal_components::dtls::crypto::fingerprint_sha256;
use shoal_components::dtls::{
    DtlsCertificate, DtlsConfig, DtlsConn, DtlsError, DtlsEvent, DtlsRole, DtlsStats, SrtpKeys,
    SrtpProfile,
};
use shoal_components::time::Time;

const DEADLINE: Duration = Duration::from_secs(20);

/// Kills and reaps the child when the test ends, however it ends.
struct ChildGuard(Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A scratch directory removed at the end.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let dir =
            std::env::temp_dir().join(format!("shoal-dtls-{tag}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn openssl_available() -> bool {
    Command::new("openssl")
        .arg("version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// An ECDSA P-256 certificate and key made by the openssl CLI; returns the SHA-256 of
/// the certificate's DER.
fn make_openssl_cert(dir: &Path) -> [u8; 32] {
    let status = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
        ])
        .args(["-nodes", "-subj", "/CN=test", "-days", "1"])
        .arg("-keyout")
        .arg(dir.join("k.pem"))
        .arg("-out")
        .arg(dir.join("c.pem"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "openssl req failed");
    let status = Command::new("openssl")
        .args(["x509", "-outform", "DER"])
        .arg("-in")
        .arg(dir.join("c.pem"))
        .arg("-out")
        .arg(dir.join("c.der"))
        .status()
        .unwrap();
    assert!(status.success(), "openssl x509 failed");
    fingerprint_sha256(&std::fs::read(dir.join("c.der")).unwrap())
}

/// Spawns openssl with piped stdio; stdout and stderr lines arrive on one channel.
fn spawn_openssl(args: &[String]) -> (ChildGuard, ChildStdin, Receiver<String>) {
    let mut child = Command::new("openssl")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdin = child.stdin.take().unwrap();
    let (tx, rx) = channel();
    let out = child.stdout.take().unwrap();
    let tx2 = tx.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx2.send(line).is_err() {
                break;
            }
        }
    });
    let err = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            if tx.send(format!("[stderr] {line}")).is_err() {
                break;
            }
        }
    });
    (ChildGuard(child), stdin, rx)
}

/// Collects openssl's output lines and waits for one that matches.
struct Output {
    rx: Receiver<String>,
    seen: Vec<String>,
}

impl Output {
    /// Lines so far that match, without waiting.
    fn find(&mut self, pred: &dyn Fn(&str) -> bool) -> Option<String> {
        while let Ok(line) = self.rx.try_recv() {
            self.seen.push(line);
        }
        self.seen.iter().find(|l| pred(l)).cloned()
    }

    /// Waits up to `timeout` for a matching line.
    fn wait(&mut self, timeout: Duration, pred: &dyn Fn(&str) -> bool) -> Option<String> {
        let end = Instant::now() + timeout;
        loop {
            if let Some(l) = self.find(pred) {
                return Some(l);
            }
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            match self.rx.recv_timeout(left.min(Duration::from_millis(50))) {
                Ok(line) => self.seen.push(line),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return self.find(pred),
            }
        }
    }

    fn dump(&mut self) -> String {
        self.find(&|_| false);
        self.seen.join("\n")
    }
}

/// Drives one DtlsConn over a real socket.
struct Driver {
    conn: DtlsConn,
    socket: UdpSocket,
    start: Instant,
    events: Vec<DtlsEvent>,
}

impl Driver {
    fn now(&self) -> Time {
        Time::from_micros(self.start.elapsed().as_micros() as u64)
    }

    /// Sends what the connection has, receives for at most `slice`, runs timers.
    fn pump(&mut self, slice: Duration) {
        while let Some(d) = self.conn.poll_transmit() {
            self.socket.send(&d).unwrap();
        }
        self.socket.set_read_timeout(Some(slice)).unwrap();
        let mut buf = [0u8; 65536];
        if let Ok(n) = self.socket.recv(&mut buf) {
            let now = self.now();
            let _ = self.conn.handle_datagram(now, &buf[..n]);
        }
        let now = self.now();
        self.conn.handle_timeout(now);
        while let Some(d) = self.conn.poll_transmit() {
            self.socket.send(&d).unwrap();
        }
        while let Some(e) = self.conn.poll_event() {
            self.events.push(e);
        }
    }

    fn pump_until(&mut self, timeout: Duration, done: impl Fn(&Driver) -> bool) -> bool {
        let end = Instant::now() + timeout;
        while Instant::now() < end {
            if done(self) {
                return true;
            }
            self.pump(Duration::from_millis(20));
        }
        done(self)
    }

    fn received(&self) -> Vec<u8> {
        self.events
            .iter()
            .filter_map(|e| match e {
                DtlsEvent::ApplicationData(b) => Some(b.to_vec()),
                _ => None,
            })
            .flatten()
            .collect()
    }

    fn srtp(&self) -> Option<SrtpKeys> {
        self.events.iter().find_map(|e| match e {
            DtlsEvent::Connected { srtp, .. } => srtp.clone(),
            _ => None,
        })
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02X}")).collect()
}

fn random32() -> [u8; 32] {
    let mut r = [0u8; 32];
    shoal_components::dtls::crypto::fill_random(&mut r).unwrap();
    r
}

/// The profile's name on openssl's `-use_srtp`.
fn openssl_profile(p: SrtpProfile) -> &'static str {
    match p {
        SrtpProfile::Aes128CmHmacSha1_80 => "SRTP_AES128_CM_SHA1_80",
        SrtpProfile::AeadAes128Gcm => "SRTP_AEAD_AES_128_GCM",
        SrtpProfile::AeadAes256Gcm => "SRTP_AEAD_AES_256_GCM",
    }
}

/// The EXTRACTOR-dtls_srtp length, 2 × (master key + master salt) (RFC 5764 §4.2):
/// 2 × (16 + 14) for AES-CM (RFC 5764 §4.1.2), 2 × (16 + 12) and 2 × (32 + 12) for the
/// AEAD profiles (RFC 7714 §14.2).
fn exported_len(p: SrtpProfile) -> usize {
    match p {
        SrtpProfile::Aes128CmHmacSha1_80 => 60,
        SrtpProfile::AeadAes128Gcm => 56,
        SrtpProfile::AeadAes256Gcm => 88,
    }
}

/// One interop run: the role shoal plays (openssl plays the other, `s_server` or
/// `s_client -dtls1_2`), openssl's arguments beyond the common ones, shoal's
/// configuration, and the SRTP profile openssl is told to use, which both must land on.
struct Case<'a> {
    shoal: DtlsRole,
    openssl_extra: &'a [&'a str],
    config: DtlsConfig,
    profile: SrtpProfile,
}

impl Case<'_> {
    /// shoal's default configuration and AES-CM, the profile openssl picks by default.
    fn new(shoal: DtlsRole) -> Case<'static> {
        Case {
            shoal,
            openssl_extra: &[],
            config: DtlsConfig {
                srtp_profiles: vec![SrtpProfile::Aes128CmHmacSha1_80],
                ..DtlsConfig::default()
            },
            profile: SrtpProfile::Aes128CmHmacSha1_80,
        }
    }
}

/// Runs the handshake against openssl over loopback, then [`exchange`]; returns shoal's
/// stats as they were when the handshake completed.
fn run(case: Case) -> DtlsStats {
    assert!(
        openssl_available(),
        "the openssl command line is required (apt-get install openssl)"
    );
    let dir = TempDir::new(&format!("{:?}", case.shoal).to_lowercase());
    let openssl_fp = make_openssl_cert(&dir.0);
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let (command, address_flag, port) = match case.shoal {
        // s_server listens on a port that was free a moment ago.
        DtlsRole::Client => {
            let free = UdpSocket::bind("127.0.0.1:0").unwrap();
            ("s_server", "-accept", free.local_addr().unwrap().port())
        }
        DtlsRole::Server => ("s_client", "-connect", socket.local_addr().unwrap().port()),
    };
    let p = |x: &str| dir.0.join(x).to_string_lossy().into_owned();
    let mut args: Vec<String> = vec![
        command.into(),
        "-dtls1_2".into(),
        address_flag.into(),
        format!("127.0.0.1:{port}"),
        "-cert".into(),
        p("c.pem"),
        "-key".into(),
        p("k.pem"),
        "-use_srtp".into(),
        openssl_profile(case.profile).into(),
        "-keymatexport".into(),
        "EXTRACTOR-dtls_srtp".into(),
        "-keymatexportlen".into(),
        exported_len(case.profile).to_string(),
    ];
    if case.shoal == DtlsRole::Client {
        // s_server asks for shoal's certificate (shoal as server always does).
        args.extend(["-verify".into(), "1".into()]);
    }
    args.extend(case.openssl_extra.iter().map(|s| s.to_string()));
    let (_child, mut stdin, rx) = spawn_openssl(&args);
    let mut out = Output {
        rx,
        seen: Vec::new(),
    };
    let first = match case.shoal {
        DtlsRole::Client => {
            assert!(
                out.wait(DEADLINE, &|l| l.contains("ACCEPT")).is_some(),
                "s_server did not start:\n{}",
                out.dump()
            );
            socket.connect(("127.0.0.1", port)).unwrap();
            None
        }
        // The first datagram tells us where the client is.
        DtlsRole::Server => {
            let (datagram, from) = first_datagram(&socket, &mut out);
            socket.connect(from).unwrap();
            Some(datagram)
        }
    };
    let cert = Arc::new(DtlsCertificate::generate().unwrap());
    let conn = DtlsConn::new(
        case.shoal,
        Arc::new(case.config),
        cert,
        openssl_fp,
        random32(),
        Time::ZERO,
    );
    let mut driver = Driver {
        conn,
        socket,
        start: Instant::now(),
        events: Vec::new(),
    };
    if let Some(d) = first {
        let now = driver.now();
        let _ = driver.conn.handle_datagram(now, &d);
    }
    let ok = driver.pump_until(DEADLINE, |d| d.conn.is_connected());
    assert!(
        ok,
        "handshake with openssl {command} failed: {:?} {:?}\n{}",
        driver.events,
        driver.conn.stats(),
        out.dump()
    );
    let stats = driver.conn.stats();
    exchange(&mut driver, &mut stdin, &mut out, case.profile);
    stats
}

fn first_datagram(socket: &UdpSocket, out: &mut Output) -> (Vec<u8>, SocketAddr) {
    socket
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let mut buf = [0u8; 65536];
    let end = Instant::now() + DEADLINE;
    loop {
        match socket.recv_from(&mut buf) {
            Ok((n, from)) => return (buf[..n].to_vec(), from),
            Err(_) if Instant::now() < end => continue,
            Err(e) => panic!("no ClientHello from s_client: {e}\n{}", out.dump()),
        }
    }
}

/// The common second half: the keying material and the SRTP profile agree with
/// openssl's, then data both ways.
fn exchange(driver: &mut Driver, stdin: &mut ChildStdin, out: &mut Output, profile: SrtpProfile) {
    // openssl prints the profile and the keying material after the handshake.
    let name = openssl_profile(profile);
    let negotiated = format!("SRTP Extension negotiated, profile={name}");
    assert!(
        out.wait(DEADLINE, &|l| l.contains(&negotiated)).is_some(),
        "openssl did not negotiate {name}:\n{}",
        out.dump()
    );
    let mut ours = vec![0u8; exported_len(profile)];
    driver
        .conn
        .export_keying_material(b"EXTRACTOR-dtls_srtp", &mut ours)
        .unwrap();
    let line = out
        .wait(DEADLINE, &|l| l.contains("Keying material:"))
        .unwrap_or_else(|| panic!("no keying material from openssl:\n{}", out.dump()));
    let theirs = line
        .split("Keying material:")
        .nth(1)
        .unwrap()
        .trim()
        .to_uppercase();
    assert_eq!(theirs, hex(&ours), "EXTRACTOR-dtls_srtp differs ({name})");
    let keys = driver.srtp().expect("use_srtp negotiated");
    assert_eq!(keys.profile, profile);
    assert_eq!(keys, SrtpKeys::from_exported(profile, &ours).unwrap());

    // shoal → openssl: it prints what it receives.
    driver
        .conn
        .send_application_data(b"hello from shoal\n")
        .unwrap();
    driver.pump(Duration::from_millis(1));
    assert!(
        out.wait(DEADLINE, &|l| l.contains("hello from shoal"))
            .is_some(),
        "openssl did not print our data:\n{}",
        out.dump()
    );

    // openssl → shoal: a line on its stdin goes out as application data.
    stdin.write_all(b"hello from openssl\n").unwrap();
    stdin.flush().unwrap();
    let got = driver.pump_until(DEADLINE, |d| {
        String::from_utf8_lossy(&d.received()).contains("hello from openssl")
    });
    assert!(got, "no data from openssl:\n{}", out.dump());
    assert_eq!(driver.conn.stats().records_bad_tag, 0);
    if std::env::var_os("SHOAL_DTLS_DEBUG").is_some() {
        eprintln!("{:?}\n{}", driver.conn.stats(), out.dump());
    }
}

/// P-256 and AES-256-GCM only, and a 400-byte MTU on both sides, so both fragment
/// their flights.
const P256_AES256_MTU400: &[&str] = &[
    "-curves",
    "prime256v1",
    "-cipher",
    "ECDHE-ECDSA-AES256-GCM-SHA384",
    "-mtu",
    "400",
];

/// The default configuration with a 400-byte MTU.
fn mtu400() -> DtlsConfig {
    DtlsConfig {
        mtu: 400,
        ..Case::new(DtlsRole::Client).config
    }
}

#[test]
fn interop_openssl_dtls_server() {
    run(Case::new(DtlsRole::Client));
}

/// s_server with `-listen` insists on a cookie exchange (HelloVerifyRequest); and P-256,
/// AES-256-GCM and fragmented flights.
#[test]
fn interop_openssl_dtls_server_cookie_p256_aes256_fragmented() {
    let extra: Vec<&str> = ["-listen"]
        .iter()
        .chain(P256_AES256_MTU400)
        .copied()
        .collect();
    let stats = run(Case {
        openssl_extra: &extra,
        config: mtu400(),
        ..Case::new(DtlsRole::Client)
    });
    assert!(stats.hello_verify_requests > 0, "{stats:?}");
    assert!(stats.handshake_partial_fragments > 0, "{stats:?}");
}

#[test]
fn interop_openssl_dtls_client() {
    run(Case::new(DtlsRole::Server));
}

#[test]
fn interop_openssl_dtls_client_p256_aes256_fragmented() {
    let stats = run(Case {
        openssl_extra: P256_AES256_MTU400,
        config: mtu400(),
        ..Case::new(DtlsRole::Server)
    });
    assert!(stats.handshake_partial_fragments > 0, "{stats:?}");
}

/// shoal as server drives the cookie exchange (RFC 6347 §4.2.1): s_client answers its
/// HelloVerifyRequest with a second ClientHello carrying the cookie.
#[test]
fn interop_openssl_dtls_client_hello_verify() {
    let stats = run(Case {
        config: DtlsConfig {
            hello_verify: true,
            ..Case::new(DtlsRole::Server).config
        },
        ..Case::new(DtlsRole::Server)
    });
    assert!(stats.hello_verify_requests >= 1, "{stats:?}");
}

/// The AEAD profiles (RFC 7714 §14.2) in both roles, shoal offering or choosing from
/// its default list: openssl prints the profile and 56 or 88 bytes of keying material.
#[test]
fn interop_openssl_srtp_aead_profiles() {
    for shoal in [DtlsRole::Client, DtlsRole::Server] {
        for profile in [SrtpProfile::AeadAes128Gcm, SrtpProfile::AeadAes256Gcm] {
            run(Case {
                config: DtlsConfig::default(),
                profile,
                ..Case::new(shoal)
            });
        }
    }
}

/// A session with media needs SRTP keys: openssl's `s_client` offering no use_srtp, or
/// only a profile shoal does not implement (AES_CM_128_HMAC_SHA1_32), is refused by
/// shoal as DTLS server with a fatal handshake_failure alert (RFC 5764 §4.1.1), which
/// openssl reports. The same client without the requirement (a data-only session)
/// connects without SRTP, as the RFC's fallback allows.
#[test]
fn interop_openssl_client_without_a_shared_srtp_profile_is_refused_for_media() {
    assert!(
        openssl_available(),
        "the openssl command line is required (apt-get install openssl)"
    );
    for (use_srtp, required) in [
        (None, true),
        (Some("SRTP_AES128_CM_SHA1_32"), true),
        (Some("SRTP_AES128_CM_SHA1_32"), false),
    ] {
        let dir = TempDir::new("no-srtp");
        let openssl_fp = make_openssl_cert(&dir.0);
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        let p = |x: &str| dir.0.join(x).to_string_lossy().into_owned();
        let mut args: Vec<String> = vec![
            "s_client".into(),
            "-dtls1_2".into(),
            "-connect".into(),
            format!("127.0.0.1:{}", socket.local_addr().unwrap().port()),
            "-cert".into(),
            p("c.pem"),
            "-key".into(),
            p("k.pem"),
        ];
        if let Some(profile) = use_srtp {
            args.extend(["-use_srtp".into(), profile.into()]);
        }
        let (_child, _stdin, rx) = spawn_openssl(&args);
        let mut out = Output {
            rx,
            seen: Vec::new(),
        };
        let (first, from) = first_datagram(&socket, &mut out);
        socket.connect(from).unwrap();
        let mut conn = DtlsConn::new(
            DtlsRole::Server,
            Arc::new(DtlsConfig::default()),
            Arc::new(DtlsCertificate::generate().unwrap()),
            openssl_fp,
            random32(),
            Time::ZERO,
        );
        if required {
            conn.require_srtp();
        }
        let mut driver = Driver {
            conn,
            socket,
            start: Instant::now(),
            events: Vec::new(),
        };
        let now = driver.now();
        let _ = driver.conn.handle_datagram(now, &first);
        let case = format!("use_srtp {use_srtp:?}, required {required}");
        if required {
            let failed = driver.pump_until(DEADLINE, |d| {
                d.events
                    .iter()
                    .any(|e| matches!(e, DtlsEvent::Failed(DtlsError::NoSharedSrtpProfile)))
            });
            assert!(failed, "{case}: {:?}", driver.events);
            assert!(
                out.wait(DEADLINE, &|l| l.contains("alert handshake failure"))
                    .is_some(),
                "{case}: openssl did not report the alert:\n{}",
                out.dump()
            );
        } else {
            let ok = driver.pump_until(DEADLINE, |d| d.conn.is_connected());
            assert!(ok, "{case}: {:?}\n{}", driver.events, out.dump());
            assert_eq!(driver.srtp(), None, "{case}");
        }
    }
}
