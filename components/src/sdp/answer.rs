//! What every description shoal writes has in common: its parameters
//! ([`AnswerParams`]), the transport attributes of an accepted section, the data
//! channel section, and the shapes of a rejected or transport-only section. The
//! descriptions themselves come from [`super::Negotiation`].
//!
//! shoal is an ICE-lite (RFC 8445 §2.5) DTLS server whose shard hands out a UDP host
//! candidate per address it announces, so an accepted section carries:
//! - ice-ufrag/ice-pwd, the node's `sha-256` fingerprint (RFC 8122 §5), `a=setup`
//!   (`passive` for an `actpass` or `active` offer, `active` for a `passive` one: RFC
//!   8829 §5.3.1 makes the answer's role `active` or `passive` and consistent with the
//!   offer; shoal prefers to be the DTLS server), the shard's host candidates (the
//!   first, the most preferred, also on the `m=` and `c=` lines as the default
//!   candidate, RFC 8839 §4.2.1.2) and `a=end-of-candidates` (RFC 8840: nothing trickles from shoal), and `a=rtcp-mux`
//!   when offered (RFC 8829 §5.3.1); `a=ice-lite` goes at session level (RFC 8839
//!   §4.2.1.4, "a lite implementation MUST include an SDP ice-lite attribute");
//! - for the data channel (`m=application … UDP/DTLS/SCTP webrtc-datachannel`),
//!   `a=sctp-port` and `a=max-message-size` (RFC 8841 §5, §6).
//!
//! A rejected section gets port 0 and its mid only (RFC 3264 §6, RFC 8843 §7.3.3).
//! The offerer-tagged section of a BUNDLE group (RFC 8843 §7.3.1: the first mid whose
//! section does not have a zero port) cannot be rejected; when shoal has no use for
//! it, it stays in the group as `a=inactive` with one of the offered formats (RFC 3264
//! §6.1), carrying the shared transport and no media.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use super::{
    Attribute, Candidate, Connection, Direction, FORMAT_DATACHANNEL, Fingerprint, HashFunction,
    MediaDescription, MediaKind, PROTO_DTLS_SCTP, SessionDescription, Setup,
};

/// The SCTP port shoal announces (RFC 8841 §5; every WebRTC stack uses 5000).
pub const SCTP_PORT: u16 = 5000;
/// The largest data channel message shoal accepts, announced as `a=max-message-size`.
pub const MAX_MESSAGE_SIZE: u64 = 262_144;
/// The peer's largest message when its data section has no `a=max-message-size`:
/// RFC 8841 §6's default of 64K (65536 bytes), which RFC 8829 §5.8.2 ("Otherwise,
/// use the specified default") applies to an offer.
pub const DEFAULT_REMOTE_MAX_MESSAGE_SIZE: usize = 65_536;
/// The first host candidate's priority: RFC 8445 §5.1.2.1 with type preference 126
/// (host), local preference 65535 and component 1.
pub const HOST_PRIORITY: u32 = host_priority(0);
/// Where a description with no candidate points its `m=` and `c=` lines: RFC 8839
/// §4.3.2 lets an answer carry no candidate with the default destination 0.0.0.0,
/// port 9.
const NO_CANDIDATE: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 9);

/// The priority of the host candidate at `index` in an answer's list (0 is the most
/// preferred). RFC 8445 §5.1.2.1: priority = 2^24 × type preference + 2^8 × local
/// preference + (256 − component ID), here type preference 126 (§5.1.2.2's host
/// value), component 1, and local preference 65535 − `index`: §5.1.2.1 makes the
/// local preference of same-type candidates of one component unique, and the order
/// of the list (IPv6 and IPv4 intermingled, RFC 8421 §4) is the caller's. Past 65 535
/// candidates the local preference stays 0.
pub const fn host_priority(index: usize) -> u32 {
    let local = if index < 65_535 {
        65_535 - index as u32
    } else {
        0
    };
    (126 << 24) | (local << 8) | (256 - 1)
}

/// The priority of the passive TCP host candidate at `index` (RFC 6544 §4.2): the
/// host type preference 126, and local preference 2^13 × direction-pref +
/// other-pref, with the direction-pref RECOMMENDED for passive host candidates, 4,
/// and other-pref 8191 − `index` (unique per address). Every TCP candidate thus
/// ranks below every UDP one (local preference at most 40 959 against at least
/// 65 535 − 16).
pub const fn tcp_passive_priority(index: usize) -> u32 {
    let other = if index < 8191 { 8191 - index as u32 } else { 0 };
    let local = (4 << 13) + other;
    (126 << 24) | (local << 8) | (256 - 1)
}

/// What shoal puts into an answer besides what the offer dictates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AnswerParams<'a> {
    /// The shard's UDP host candidates, the most preferred first; each gets the
    /// priority [`host_priority`] gives its index, and a foundation of its own (RFC
    /// 8445 §5.1.1.3: candidates of different base addresses never share one). The
    /// first is also the `m=`/`c=` default destination; with none, the description
    /// points at `0.0.0.0:9` and carries no candidate.
    pub candidates: &'a [SocketAddr],
    /// The shard's passive TCP host candidates (ICE-TCP, RFC 6544), listed after
    /// the UDP ones with [`tcp_passive_priority`] and foundations of their own.
    pub tcp_candidates: &'a [SocketAddr],
    /// shoal's ICE ufrag for this peer (RFC 8839 §5.4: 4 to 256 ice-chars).
    pub ice_ufrag: &'a str,
    /// shoal's ICE password for this peer (RFC 8839 §5.4: 22 to 256 ice-chars).
    pub ice_pwd: &'a str,
    /// SHA-256 of the node's DTLS certificate.
    pub fingerprint_sha256: [u8; 32],
    /// The `o=` session id (RFC 8829 §5.2.1: random, below 2^63).
    pub session_id: u64,
}

impl AnswerParams<'_> {
    /// The candidates an answer carries, in order: the UDP host ones (priorities by
    /// [`host_priority`]), then the passive TCP ones ([`tcp_passive_priority`]),
    /// each with a foundation of its own (RFC 8445 §5.1.1.3).
    pub fn candidate_list(&self) -> Vec<Candidate> {
        let udp = self.candidates.iter().enumerate().map(|(i, addr)| {
            Candidate::host_udp(
                &(i + 1).to_string(),
                host_priority(i),
                addr.ip(),
                addr.port(),
            )
        });
        let tcp = self.tcp_candidates.iter().enumerate().map(|(i, addr)| {
            let foundation = (self.candidates.len() + i + 1).to_string();
            Candidate::host_tcp_passive(
                &foundation,
                tcp_passive_priority(i),
                addr.ip(),
                addr.port(),
            )
        });
        udp.chain(tcp).collect()
    }

    /// The candidates as `a=candidate:` lines (without the line ending).
    pub fn candidate_lines(&self) -> Vec<String> {
        self.candidate_list()
            .into_iter()
            .map(|c| format!("a=candidate:{c}"))
            .collect()
    }

    /// The address of the `m=` and `c=` lines: the most preferred candidate (the
    /// default candidate, RFC 8839 §4.2.1.2), or `0.0.0.0:9` when there is none.
    pub fn default_destination(&self) -> SocketAddr {
        self.candidates.first().copied().unwrap_or(NO_CANDIDATE)
    }
}

/// A data section's `a=max-message-size` as the limit for sending to its author (RFC 8841 §6;
/// RFC 8829 §5.8.2: absent means the default, and a value too big for `usize` is no
/// limit this host can reach either).
pub fn remote_max_message_size(data: &MediaDescription) -> usize {
    match data.max_message_size() {
        None => DEFAULT_REMOTE_MAX_MESSAGE_SIZE,
        Some(0) => usize::MAX,
        Some(size) => usize::try_from(size).unwrap_or(usize::MAX),
    }
}

/// The offerer-tagged section (RFC 8843 §7.3.1): the first mid of the BUNDLE group
/// whose section "does not contain a zero port value" (a disabled section is answered
/// with port 0, RFC 3264 §8.2, so shoal cannot keep it). shoal neither rejects nor moves
/// out the section it selects: a data section is accepted and a media one is kept
/// inactive. `None` when no mid qualifies (then there is no BUNDLE group).
pub(super) fn offerer_tagged(offer: &SessionDescription, bundle: &[String]) -> Option<usize> {
    bundle.iter().find_map(|mid| {
        offer
            .media
            .iter()
            .position(|m| m.mid() == Some(mid.as_str()) && m.port != 0)
    })
}

/// A data channel section shoal can take: RFC 8841's proto and format, and either a
/// non-zero port or bundle-only in a BUNDLE group that has a tagged section (`tagged`).
/// RFC 8843 §6 and §7.2: port 0 with `a=bundle-only` asks the answerer to accept the
/// section only within the BUNDLE group (JSEP max-bundle offers every section but the
/// first so, RFC 8829 §4.1.1); without bundle-only, port 0 disables it (§7.3, RFC 3264
/// §8.2). The answer gives it a real port and no bundle-only (RFC 8829 §5.3.1).
pub(super) fn is_data_section(m: &MediaDescription, bundle: &[String], tagged: bool) -> bool {
    let bundled_only =
        || tagged && m.bundle_only() && m.mid().is_some_and(|mid| bundle.iter().any(|b| b == mid));
    m.kind == MediaKind::Application
        && m.proto == PROTO_DTLS_SCTP
        && m.formats.iter().any(|f| f == FORMAT_DATACHANNEL)
        && (m.port != 0 || bundled_only())
}

/// The attributes every accepted section carries (RFC 8829 §5.3.1: IDENTICAL and
/// TRANSPORT categories, the same in every section of a BUNDLE group).
pub(super) struct TransportAttributes<'a> {
    pub(super) params: &'a AnswerParams<'a>,
    pub(super) setup: Setup,
    pub(super) connection: Connection,
}

impl TransportAttributes<'_> {
    /// An accepted section's `m=` line, `c=` line, mid and transport attributes.
    pub(super) fn section(&self, offered: &MediaDescription, formats: &[&str]) -> MediaDescription {
        self.section_for(
            &offered.kind,
            &offered.proto,
            offered.mid(),
            offered.rtcp_mux(),
            formats,
        )
    }

    /// A section's `m=` line (kind, proto, formats), `c=` line, mid and transport
    /// attributes, with `a=rtcp-mux` if `rtcp_mux`.
    pub(super) fn section_for(
        &self,
        kind: &MediaKind,
        proto: &str,
        mid: Option<&str>,
        rtcp_mux: bool,
        formats: &[&str],
    ) -> MediaDescription {
        let p = self.params;
        let mut m =
            MediaDescription::new(kind.clone(), p.default_destination().port(), proto, formats);
        m.connections.push(self.connection.clone());
        if let Some(mid) = mid {
            m.push_attribute(Attribute::Mid(mid.to_owned()));
        }
        m.push_attribute(Attribute::IceUfrag(p.ice_ufrag.to_owned()))
            .push_attribute(Attribute::IcePwd(p.ice_pwd.to_owned()))
            .push_attribute(Attribute::Fingerprint(Fingerprint::new(
                HashFunction::Sha256,
                &p.fingerprint_sha256,
            )))
            .push_attribute(Attribute::Setup(self.setup));
        for c in p.candidate_list() {
            m.push_attribute(Attribute::Candidate(c));
        }
        m.push_attribute(Attribute::EndOfCandidates);
        if rtcp_mux {
            m.push_attribute(Attribute::RtcpMux);
        }
        m
    }

    /// The data channel section (RFC 8829 §5.3.1; RFC 8841 §5, §6).
    pub(super) fn data_section(&self, offered: &MediaDescription) -> MediaDescription {
        let mut m = self.section(offered, &[FORMAT_DATACHANNEL]);
        m.push_attribute(Attribute::SctpPort(SCTP_PORT))
            .push_attribute(Attribute::MaxMessageSize(MAX_MESSAGE_SIZE));
        m
    }

    /// The offerer-tagged media section kept as the group's transport, with no media:
    /// one offered codec (RFC 3264 §6.1 needs a common format) and `a=inactive`.
    pub(super) fn inactive_section(&self, offered: &MediaDescription) -> MediaDescription {
        let format = primary_format(offered);
        let mut m = self.section(offered, &[format.as_str()]);
        m.push_attribute(Attribute::Direction(Direction::Inactive));
        for a in &offered.attributes {
            let keep = match a {
                Attribute::RtpMap(r) => r.payload_type.to_string() == format,
                Attribute::Fmtp(f) => f.format == format,
                _ => false,
            };
            if keep {
                m.push_attribute(a.clone());
            }
        }
        m
    }
}

/// The first offered format that is a codec of its own (not a retransmission, FEC or
/// redundancy format), else the first format.
fn primary_format(m: &MediaDescription) -> String {
    const HELPERS: [&str; 4] = ["rtx", "red", "ulpfec", "flexfec-03"];
    m.payload_types()
        .find(|pt| {
            m.rtpmap(*pt)
                .is_some_and(|r| !HELPERS.iter().any(|h| r.is(h)))
        })
        .map(|pt| pt.to_string())
        .or_else(|| m.formats.first().cloned())
        .unwrap_or_else(|| "0".to_owned())
}

/// A rejected section: port 0 and the offered `m=` line otherwise (RFC 3264 §6), with
/// its mid (RFC 8829 §5.3.1) and nothing else (RFC 8843 §7.3.3: no bundle-only).
pub(super) fn rejected_section(offered: &MediaDescription) -> MediaDescription {
    let formats: Vec<&str> = offered.formats.iter().map(String::as_str).collect();
    let mut m = MediaDescription::new(offered.kind.clone(), 0, &offered.proto, &formats);
    m.connections
        .push(Connection::new(std::net::Ipv4Addr::UNSPECIFIED.into()));
    if let Some(mid) = offered.mid() {
        m.push_attribute(Attribute::Mid(mid.to_owned()));
    }
    m
}
