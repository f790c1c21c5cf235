//! A `/signal` session whose first offer was data-only and whose DTLS connected
//! without SRTP keys, driven through the control plane over a real shard: when it
//! adds audio and video by renegotiation, shoal's answer rejects them (port 0, RFC
//! 3264 §6) instead of accepting media the shard could only drop. The same session
//! connected with a profile publishes them.

use shoal_components::peer::PeerId;
use shoal_components::sdp::{Attribute, MediaKind, SessionDescription};
use shoal_components::tick::ShardEvent;

use super::one_shard_tests::{OneShard, admission, one_shard};
use crate::endpoint::{OfferShape, media_offer, os_rng};

/// A data-only first offer, and the same offer with a publisher's audio and video
/// sections added after its data section (new mids), as a renegotiation.
fn offers() -> (SessionDescription, SessionDescription) {
    let mut rng = os_rng().expect("a random generator");
    let first = media_offer(PeerId(1), [0x5a; 32], OfferShape::DATA_ONLY, &mut rng);
    let first = SessionDescription::parse(first.sdp()).expect("parses");
    let av = media_offer(PeerId(1), [0x5a; 32], OfferShape::PUBLISH, &mut rng);
    let av = SessionDescription::parse(av.sdp()).expect("parses");
    let mut again = first.clone();
    let added = av
        .media
        .iter()
        .filter(|m| matches!(m.kind, MediaKind::Audio | MediaKind::Video));
    for (i, m) in added.enumerate() {
        let mut m = m.clone();
        for a in &mut m.attributes {
            if let Attribute::Mid(mid) = a {
                *mid = format!("m{i}");
            }
        }
        again.push_media(m);
    }
    (first, again)
}

/// The kind and port of each section of shoal's answer to the renegotiation of a
/// participant whose DTLS connected with `srtp_profile`.
fn renegotiated_ports(srtp_profile: Option<u16>) -> Vec<(MediaKind, u16)> {
    let OneShard {
        _server,
        state,
        runtime,
    } = one_shard();
    let (first, again) = offers();
    let answer = runtime.block_on(async {
        let admitted = state.admit(admission("dc", None)).await.expect("admitted");
        state
            .negotiate(&admitted, &first)
            .await
            .expect("the first answer");
        state.shard_event(&ShardEvent::DtlsConnected {
            peer: admitted.peer,
            srtp_profile,
        });
        state
            .answer_again(admitted.peer, &again)
            .expect("the renegotiation is answered")
    });
    let answer = SessionDescription::parse(&answer).expect("shoal's answer parses");
    answer
        .media
        .iter()
        .map(|m| (m.kind.clone(), m.port))
        .collect()
}

#[test]
fn media_added_to_a_session_without_srtp_keys_is_rejected() {
    let unkeyed = renegotiated_ports(None);
    assert_eq!(unkeyed.len(), 3, "{unkeyed:?}");
    assert_eq!(unkeyed[0].0, MediaKind::Application);
    assert_ne!(unkeyed[0].1, 0, "the data section stays: {unkeyed:?}");
    assert!(
        unkeyed[1..].iter().all(|(_, port)| *port == 0),
        "audio and video rejected: {unkeyed:?}"
    );
    // SRTP_AES128_CM_HMAC_SHA1_80 (RFC 5764 §4.1.2): the same offer publishes.
    let keyed = renegotiated_ports(Some(0x0001));
    assert!(keyed.iter().all(|(_, port)| *port != 0), "{keyed:?}");
}
