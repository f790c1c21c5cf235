//! A participant event tells the participant as it is after the event
//! (`ParticipantEvent.participant` in signal.proto), tracks included: a client keeps
//! the room's view by replacing what it knew of that participant with what the event
//! says. Driven through the control plane over a real shard: a publisher's tracks are
//! placed, then its DTLS connects, and a listener in the room hears UPDATED with the
//! tracks it heard published.

use std::time::Duration;

use shoal_components::peer::PeerId;
use shoal_components::sdp::SessionDescription;
use shoal_components::tick::ShardEvent;
use shoal_proto::v1::{self, participant_event, signal_response, track_event};
use tokio::sync::oneshot;

use super::one_shard_tests::{OneShard, admission, one_shard};
use super::outbox::{Next, Outbox};
use super::participants::SignalLink;
use crate::endpoint::{OfferShape, media_offer, os_rng};

/// Everything queued on `out` so far.
async fn queued(out: &Outbox) -> Vec<signal_response::Message> {
    let mut messages = Vec::new();
    while let Ok(Some(next)) = tokio::time::timeout(Duration::from_millis(50), out.next()).await {
        if let Next::Message(m) = next {
            messages.push(m.into_message());
        }
    }
    messages
}

#[test]
fn an_updated_participant_carries_its_tracks() {
    let OneShard {
        _server,
        state,
        runtime,
    } = one_shard();
    let mut rng = os_rng().expect("a random generator");
    let offer = media_offer(PeerId(1), [0x5a; 32], OfferShape::PUBLISH, &mut rng);
    let offer = SessionDescription::parse(offer.sdp()).expect("parses");
    let out = Outbox::new(1 << 20);
    let (ended, _ended) = oneshot::channel();
    let (published, updated) = runtime.block_on(async {
        let link = SignalLink {
            outbox: out.clone(),
            ended,
        };
        state
            .admit(admission("watcher", Some(link)))
            .await
            .expect("the watcher is admitted");
        let publisher = state
            .admit(admission("pub", None))
            .await
            .expect("the publisher is admitted");
        state
            .negotiate(&publisher, &offer)
            .await
            .expect("the publisher's offer is answered");
        let published: Vec<v1::TrackInfo> = queued(&out)
            .await
            .into_iter()
            .filter_map(|m| match m {
                signal_response::Message::Track(e)
                    if e.kind == i32::from(track_event::Kind::Published) =>
                {
                    e.track
                }
                _ => None,
            })
            .collect();
        state.shard_event(&ShardEvent::DtlsConnected {
            peer: publisher.peer,
            srtp_profile: Some(0x0001),
        });
        let updated: Vec<v1::Participant> = queued(&out)
            .await
            .into_iter()
            .filter_map(|m| match m {
                signal_response::Message::Participant(e)
                    if e.kind == i32::from(participant_event::Kind::Updated) =>
                {
                    e.participant
                }
                _ => None,
            })
            .collect();
        (published, updated)
    });
    assert_eq!(published.len(), 2, "its audio and video: {published:?}");
    assert_eq!(updated.len(), 1, "{updated:?}");
    let p = &updated[0];
    assert_eq!(p.identity, "pub");
    assert_eq!(p.state, i32::from(v1::ParticipantState::Active), "{p:?}");
    assert_eq!(p.tracks, published, "UPDATED tells its tracks as published");
}
