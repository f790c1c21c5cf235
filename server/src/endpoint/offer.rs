//! The client side of a data-only session with an answerer that speaks JSEP, a shoal
//! node first of all: the SDP offer a client endpoint sends (RFC 8829 §5.2.1) and the
//! peer it adds to its shard from the answer (§5.10).
//!
//! The endpoint is a full ICE agent in the controlling role (RFC 8445 §6.1.1: the
//! offerer controls against an ICE-lite answerer, and shoal answers ICE-lite). It
//! gathers no candidates and offers none: it sends its checks to the answer's
//! candidates, and the answerer learns its address from them (peer-reflexive, RFC 8445
//! §7.3.1.3). The offer says `a=setup:actpass` (RFC 8842 §5.2); the answer's `active`
//! or `passive` fixes the DTLS role.

use std::net::SocketAddr;

use rand_core::RngCore;
use shoal_components::dtls::DtlsRole;
use shoal_components::peer::{IceCredentials, IceRole, PeerId};
use shoal_components::sdp::{
    Attribute, BUNDLE, Connection, FORMAT_DATACHANNEL, Fingerprint, Group, HashFunction,
    MAX_MESSAGE_SIZE, MediaDescription, MediaKind, Origin, PROTO_DTLS_SCTP, SCTP_PORT, SdpError,
    SessionDescription, Setup, remote_max_message_size,
};
use shoal_systems::{PeerDtls, PeerSpec};

use super::{PWD_LEN, UFRAG_LEN, ice_chars};

/// The mid of the offer's one section.
const DATA_MID: &str = "0";
/// The discard port JSEP puts in an `m=` line before any candidate (RFC 8829 §5.2.1).
const NO_CANDIDATE_PORT: u16 = 9;

/// A client endpoint's offer of one data channel section, and what it needs to read
/// the answer.
#[derive(Clone, Debug)]
pub struct DataOffer {
    id: PeerId,
    ufrag: String,
    pwd: String,
    sdp: String,
}

/// Why an answer to a [`DataOffer`] cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AnswerError {
    /// Not a session description.
    #[error("the answer is not valid SDP: {0}")]
    Sdp(#[from] SdpError),
    /// No section with the offer's mid.
    #[error("the answer has no section for the data channel (mid {DATA_MID})")]
    NoDataSection,
    /// The data section has port 0 (RFC 8829 §5.10 step 2: rejected).
    #[error("the answer rejected the data channel section")]
    Rejected,
    /// No `a=ice-ufrag` and `a=ice-pwd`.
    #[error("the answer has no a=ice-ufrag and a=ice-pwd")]
    MissingIceCredentials,
    /// No `a=fingerprint:sha-256`.
    #[error("the answer has no a=fingerprint:sha-256")]
    MissingSha256Fingerprint,
    /// `a=setup` other than `active` or `passive` (RFC 8842 §5.2: an answer picks one).
    #[error("the answer's a=setup is {0:?}, not active or passive")]
    Setup(Setup),
    /// No UDP candidate with an IP address.
    #[error("the answer has no UDP candidate")]
    NoCandidate,
    /// No section with a mid the endpoint offered to send in.
    #[error("the answer has no section {0:?}")]
    NoSection(String),
    /// A section the endpoint sends in was rejected or has no usable codec.
    #[error("the answer rejected section {0:?}")]
    SectionRejected(String),
}

/// The controlling, DTLS-pinned peer `id` (local credentials `ufrag`, `pwd`) that the
/// answer `sdp` describes in section `m`: the answer's credentials and UDP
/// candidates, DTLS client if the answerer is `passive` and server if it is `active`
/// (RFC 8842 §5.2), its certificate pinned to its SHA-256 fingerprint; no data
/// channel limits (the caller sets them).
pub(super) fn transport_of(
    id: PeerId,
    local_ufrag: &str,
    local_pwd: &str,
    sdp: &SessionDescription,
    m: &MediaDescription,
) -> Result<PeerSpec, AnswerError> {
    let (ufrag, pwd) = sdp
        .ice_credentials_for(m)
        .ok_or(AnswerError::MissingIceCredentials)?;
    let remote_fingerprint = sdp
        .fingerprints_for(m)
        .find(|f| f.hash == HashFunction::Sha256)
        .and_then(|f| <[u8; 32]>::try_from(f.bytes.as_slice()).ok())
        .ok_or(AnswerError::MissingSha256Fingerprint)?;
    // RFC 4145 §4: "The default value of the setup attribute in an offer/answer
    // exchange is 'active' in the offer and 'passive' in the answer."
    let role = match sdp.setup_for(m).unwrap_or(Setup::Passive) {
        Setup::Passive => DtlsRole::Client,
        Setup::Active => DtlsRole::Server,
        other => return Err(AnswerError::Setup(other)),
    };
    let remote_candidates: Vec<SocketAddr> = m
        .candidates()
        .filter(|c| c.is_udp())
        .filter_map(|c| Some(SocketAddr::new(c.ip()?, c.port)))
        .collect();
    if remote_candidates.is_empty() {
        return Err(AnswerError::NoCandidate);
    }
    Ok(PeerSpec {
        id,
        role: IceRole::Controlling,
        credentials: IceCredentials {
            local_ufrag: local_ufrag.to_owned(),
            local_pwd: local_pwd.to_owned(),
            remote_ufrag: ufrag.to_owned(),
            remote_pwd: pwd.to_owned(),
        },
        remote_candidates,
        dtls: Some(PeerDtls {
            role,
            remote_fingerprint,
            max_message_size: None,
            srtp_required: false,
        }),
        room: None,
        may_send_data: false,
        link: false,
    })
}

/// A fresh offer for peer `id` of a shard whose certificate has SHA-256 `fingerprint`
/// ([`shoal_systems::Shard::fingerprint`]), with new ICE credentials from `rng` (use
/// [`super::os_rng`] over real sockets).
pub fn data_offer<R: RngCore + ?Sized>(
    id: PeerId,
    fingerprint: [u8; 32],
    rng: &mut R,
) -> DataOffer {
    let mut next = || rng.next_u64();
    let ufrag = ice_chars(UFRAG_LEN, &mut next);
    let pwd = ice_chars(PWD_LEN, &mut next);
    // RFC 8829 §5.2.1: the sess-id's initial value "MUST be less than (2**62)-1";
    // 62 random bits, the top two zero, as it recommends.
    let session_id = (next() >> 2).min((1 << 62) - 2);
    let mut sdp = SessionDescription::new(Origin::new(session_id, 1));
    // §5.2.1 asks for "trickle" and "ice2": the endpoint is an RFC 8445 agent, but it
    // takes the answer's candidates only and cannot take trickled ones, so it does
    // not say "trickle".
    sdp.push_attribute(Attribute::IceOptions(vec!["ice2".to_owned()]));
    sdp.push_attribute(Attribute::Group(Group::new(BUNDLE, &[DATA_MID])));
    let mut m = MediaDescription::new(
        MediaKind::Application,
        NO_CANDIDATE_PORT,
        PROTO_DTLS_SCTP,
        &[FORMAT_DATACHANNEL],
    );
    m.connections
        .push(Connection::new(std::net::Ipv4Addr::UNSPECIFIED.into()));
    m.push_attribute(Attribute::Mid(DATA_MID.to_owned()))
        .push_attribute(Attribute::IceUfrag(ufrag.clone()))
        .push_attribute(Attribute::IcePwd(pwd.clone()))
        .push_attribute(Attribute::Fingerprint(Fingerprint::new(
            HashFunction::Sha256,
            &fingerprint,
        )))
        .push_attribute(Attribute::Setup(Setup::ActPass))
        .push_attribute(Attribute::SctpPort(SCTP_PORT))
        .push_attribute(Attribute::MaxMessageSize(MAX_MESSAGE_SIZE));
    sdp.push_media(m);
    DataOffer {
        id,
        ufrag,
        pwd,
        sdp: sdp.to_sdp_string(),
    }
}

impl DataOffer {
    /// The offer's text.
    pub fn sdp(&self) -> &str {
        &self.sdp
    }

    /// The peer to add to the endpoint's shard (`Command::AddPeer`) for `answer`:
    /// ICE-controlling with the answer's credentials and UDP candidates, DTLS client
    /// if the answerer is `passive` and server if it is `active` (RFC 8842 §5.2), the
    /// answerer's certificate pinned to its SHA-256 fingerprint, and the answerer's
    /// `a=max-message-size` kept (RFC 8841 §6: absent is 64 KiB, 0 no limit).
    ///
    /// # Errors
    /// If the answer is not SDP, rejects or lacks the data section, or lacks what the
    /// transport needs.
    pub fn accept(&self, answer: &str) -> Result<PeerSpec, AnswerError> {
        let sdp = SessionDescription::parse(answer)?;
        let m = sdp
            .media_by_mid(DATA_MID)
            .ok_or(AnswerError::NoDataSection)?;
        if m.port == 0 {
            return Err(AnswerError::Rejected);
        }
        let mut spec = transport_of(self.id, &self.ufrag, &self.pwd, &sdp, m)?;
        if let Some(dtls) = spec.dtls.as_mut() {
            dtls.max_message_size = Some(remote_max_message_size(m));
        }
        spec.may_send_data = true;
        Ok(spec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_chacha::ChaCha12Rng;
    use rand_core::SeedableRng;
    use shoal_components::sdp::{AnswerParams, Negotiation};

    const SHARD_FINGERPRINT: [u8; 32] = [0xab; 32];
    const NODE_FINGERPRINT: [u8; 32] = [0xcd; 32];

    fn offer() -> DataOffer {
        data_offer(
            PeerId(4),
            SHARD_FINGERPRINT,
            &mut ChaCha12Rng::seed_from_u64(9),
        )
    }

    /// shoal's own answer to `offer`.
    fn answer(offer: &DataOffer, node: SocketAddr) -> String {
        let params = AnswerParams {
            candidates: &[node],
            tcp_candidates: &[],
            ice_ufrag: "nodeufrag",
            ice_pwd: "nodepasswordnodepassword",
            fingerprint_sha256: NODE_FINGERPRINT,
            session_id: 7,
        };
        let parsed = SessionDescription::parse(offer.sdp()).expect("the offer parses");
        let answered = Negotiation::new(7)
            .answer(&parsed, &params, &[], &mut || 1)
            .expect("shoal answers the offer");
        // What the answerer read from the offer is what the endpoint will present.
        assert_eq!(answered.transport.ufrag, offer.ufrag);
        assert_eq!(answered.transport.pwd, offer.pwd);
        assert_eq!(answered.transport.fingerprint_sha256, SHARD_FINGERPRINT);
        assert!(answered.data_mid.is_some());
        answered.sdp.to_sdp_string()
    }

    #[test]
    fn the_offer_is_one_data_section_with_actpass() {
        let o = offer();
        let sdp = SessionDescription::parse(o.sdp()).expect("parses");
        assert_eq!(sdp.media.len(), 1);
        let m = &sdp.media[0];
        assert_eq!(m.kind, MediaKind::Application);
        assert_eq!(m.proto, PROTO_DTLS_SCTP);
        assert_eq!(m.sctp_port(), Some(SCTP_PORT));
        assert_eq!(sdp.setup_for(m), Some(Setup::ActPass));
        assert_eq!(sdp.bundle_mids(), Some(&[DATA_MID.to_owned()][..]));
        assert_eq!(
            sdp.ice_credentials_for(m),
            Some((o.ufrag.as_str(), o.pwd.as_str()))
        );
        assert_eq!((o.ufrag.len(), o.pwd.len()), (UFRAG_LEN, PWD_LEN));
        // Fresh credentials for every offer.
        let again = data_offer(
            PeerId(4),
            SHARD_FINGERPRINT,
            &mut ChaCha12Rng::seed_from_u64(10),
        );
        assert_ne!((&again.ufrag, &again.pwd), (&o.ufrag, &o.pwd));
    }

    #[test]
    fn shoals_answer_gives_a_controlling_dtls_client_peer() {
        let o = offer();
        let node: SocketAddr = "127.0.0.1:7100".parse().unwrap();
        let spec = o.accept(&answer(&o, node)).expect("accepted");
        assert_eq!(spec.id, PeerId(4));
        assert_eq!(spec.role, IceRole::Controlling);
        assert_eq!(spec.remote_candidates, vec![node]);
        assert_eq!(
            spec.credentials,
            IceCredentials {
                local_ufrag: o.ufrag.clone(),
                local_pwd: o.pwd.clone(),
                remote_ufrag: "nodeufrag".into(),
                remote_pwd: "nodepasswordnodepassword".into(),
            }
        );
        let dtls = spec.dtls.expect("DTLS");
        assert_eq!(dtls.role, DtlsRole::Client);
        assert_eq!(dtls.remote_fingerprint, NODE_FINGERPRINT);
        assert_eq!(
            dtls.max_message_size,
            Some(usize::try_from(MAX_MESSAGE_SIZE).unwrap())
        );
    }

    #[test]
    fn unusable_answers_are_refused_with_the_reason() {
        let o = offer();
        let node: SocketAddr = "127.0.0.1:7100".parse().unwrap();
        let good = answer(&o, node);
        let without = |needle: &str| -> String {
            let kept: Vec<&str> = good
                .split("\r\n")
                .filter(|l| !l.starts_with(needle))
                .collect();
            kept.join("\r\n")
        };
        let cases = [
            ("not sdp".to_owned(), "Sdp"),
            (without("a=fingerprint"), "MissingSha256Fingerprint"),
            (without("a=ice-pwd"), "MissingIceCredentials"),
            (without("a=candidate"), "NoCandidate"),
            (good.replace("a=mid:0", "a=mid:1"), "NoDataSection"),
            (good.replace("a=setup:passive", "a=setup:actpass"), "Setup"),
            (
                good.replacen("m=application 7100", "m=application 0", 1),
                "Rejected",
            ),
        ];
        for (text, want) in cases {
            let got = o.accept(&text).expect_err(want);
            assert!(format!("{got:?}").starts_with(want), "{want}: got {got:?}");
        }
        // An answer without a=setup is passive (RFC 4145 §4): the endpoint is then the
        // DTLS client; an active answerer makes it the server.
        let spec = o.accept(&without("a=setup")).expect("accepted");
        assert_eq!(spec.dtls.map(|d| d.role), Some(DtlsRole::Client));
        let active = good.replace("a=setup:passive", "a=setup:active");
        let spec = o.accept(&active).expect("accepted");
        assert_eq!(spec.dtls.map(|d| d.role), Some(DtlsRole::Server));
    }
}
