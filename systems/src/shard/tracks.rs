//! The media half of the [`Shard`] surface: tracks a peer publishes and the
//! subscriptions that send them to other peers (`Command::Publish`, `Unpublish`,
//! `Subscribe`, `Unsubscribe`), as entities (see `shoal_components::media`).
//!
//! A subscription needs its track on the same shard. Removing a track removes its
//! subscriptions, and a peer's departure removes its tracks and subscriptions (the
//! components' hooks), so no path leaves a dangling row.

use bevy_ecs::prelude::*;
use bytes::Bytes;
use shoal_components::media::temporal::ALL_LAYERS;
use shoal_components::media::{
    LayerChoice, Layering, MAX_LAYERS, PeerMedia, ReceiveStats, Subscription, SubscriptionSpec,
    Track, TrackId, TrackIndex, TrackSettings, TrackSpec,
};
use shoal_components::peer::PeerId;
use shoal_components::room::RoomMember;
use shoal_components::rtp::{RtpHeader, RtpPacket};
use shoal_components::time::Time;
use shoal_components::timer::{TimerHeap, TimerKind, Timers};

use shoal_components::congestion::TransportWide;
use shoal_components::congestion::pacer::Pacer;
use shoal_components::relay::{MediaRelay, MediaRelayOut};
use shoal_components::shared::PeerMediaLimits;
use shoal_components::tick::{MediaOut, MediaStart, Outgoing, SharedRtp};
use shoal_components::transport::PeerSrtp;

use super::{CommandError, Shard};
use crate::passes::media::{REPORT_INTERVAL, admit, note_picture_size};

impl Shard {
    /// The peer's media index, created on first use with its transport-wide
    /// congestion control state.
    fn peer_media(&mut self, entity: Entity) -> Mut<'_, PeerMedia> {
        if self.world.get::<PeerMedia>(entity).is_none() {
            self.world.entity_mut(entity).insert((
                PeerMedia::default(),
                TransportWide::default(),
                Pacer::with_burst(self.config.pacer_burst),
            ));
        }
        self.world
            .get_mut::<PeerMedia>(entity)
            .expect("inserted just above")
    }

    /// What `entity`'s media may hold: a link's limits are a whole node's share of
    /// a room.
    fn peer_limits(&self, entity: Entity) -> PeerMediaLimits {
        let link = self.world.get::<RoomMember>(entity).is_some_and(|m| m.link);
        PeerMediaLimits::for_peer(link)
    }

    /// `Command::Publish`: `peer` sends `spec`'s track.
    pub(super) fn publish(&mut self, peer: PeerId, spec: TrackSpec) -> Result<(), CommandError> {
        self.receive_track(peer, spec, false)
    }

    /// `Command::Publish` or `Command::Receive`: a track that arrives from `peer`,
    /// reported packet by packet to the owner when `report`.
    pub(super) fn receive_track(
        &mut self,
        peer: PeerId,
        spec: TrackSpec,
        report: bool,
    ) -> Result<(), CommandError> {
        let publisher = self.peer_entity(peer)?;
        if self.track_entity(spec.id).is_ok() {
            return Err(CommandError::DuplicateTrack(spec.id));
        }
        let limits = self.peer_limits(publisher);
        let media = self.peer_media(publisher);
        // Every stream of a simulcast track is listed: count the tracks.
        let mut ids: Vec<TrackId> = media.tracks.iter().map(|(id, _)| *id).collect();
        ids.dedup();
        if ids.len() >= limits.tracks {
            return Err(CommandError::TooManyTracks(limits.tracks));
        }
        if spec.layers.len() > MAX_LAYERS {
            return Err(CommandError::TooManyLayers(MAX_LAYERS));
        }
        // A simulcast track's SSRCs are its streams' (`spawn_track` uses no other).
        let single = spec.layers.len() < 2;
        let announced: Vec<u32> = spec
            .ssrc
            .iter()
            .chain(&spec.rtx_ssrc)
            .filter(|_| single)
            .chain(
                spec.layers
                    .iter()
                    .flat_map(|l| l.ssrc.iter().chain(&l.rtx_ssrc)),
            )
            .copied()
            .collect();
        for (i, ssrc) in announced.iter().enumerate() {
            if media.tracks_by_ssrc.contains_key(ssrc) || announced[..i].contains(ssrc) {
                return Err(CommandError::SsrcInUse(*ssrc));
            }
        }
        let (id, mid) = (spec.id, spec.mid.clone());
        // One number space per transport (draft-holmer-rmcat-transport-wide-cc-
        // extensions-01 §2), under the one id the BUNDLE session gives the extension:
        // feedback goes to a publisher that negotiated it on any of its tracks.
        if let Some(id) = spec
            .extensions
            .transport_cc
            .filter(|_| spec.feedback.transport_cc)
            && let Some(mut tw) = self.world.get_mut::<TransportWide>(publisher)
        {
            tw.receive.ext_id = Some(id);
            tw.remb.ext_id = None;
        }
        // Without it, shoal estimates the path itself and tells the publisher in
        // REMB (draft-ietf-rmcat-gcc-02 §3), where the publisher agreed to both: one
        // estimate per transport, transport-cc's where any track has it.
        if let Some(id) = spec
            .extensions
            .abs_send_time
            .filter(|_| spec.feedback.remb && !spec.feedback.transport_cc)
            && let Some(mut tw) = self.world.get_mut::<TransportWide>(publisher)
            && tw.receive.ext_id.is_none()
        {
            tw.remb.ext_id = Some(id);
        }
        let streams = self.spawn_track(spec, Some(publisher), report);
        let from_link = self
            .world
            .get::<RoomMember>(publisher)
            .is_some_and(|m| m.link);
        for &entity in &streams {
            if let Some(mut t) = self.world.get_mut::<Track>(entity) {
                t.from_link = from_link;
            }
        }
        let mut media = self.peer_media(publisher);
        media.tracks_by_mid.push((mid, streams[0]));
        for &entity in &streams {
            media.tracks.push((id, entity));
        }
        for &entity in &streams {
            let Some(t) = self.world.get::<Track>(entity) else {
                continue;
            };
            let ssrcs: Vec<u32> = t.ssrc.iter().chain(&t.rtx_ssrc).copied().collect();
            let mut media = self.peer_media(publisher);
            for s in ssrcs {
                media.tracks_by_ssrc.insert(s, entity);
            }
        }
        Ok(())
    }

    /// Spawns a track's streams: one, or one per simulcast layer (the first standing
    /// for the track). Returns their entities, the first first.
    fn spawn_track(
        &mut self,
        spec: TrackSpec,
        publisher: Option<Entity>,
        report: bool,
    ) -> Vec<Entity> {
        let id = spec.id;
        if spec.layers.len() < 2 {
            let (ssrc, rtx_ssrc) = match spec.layers.first() {
                Some(l) => (l.ssrc.or(spec.ssrc), l.rtx_ssrc.or(spec.rtx_ssrc)),
                None => (spec.ssrc, spec.rtx_ssrc),
            };
            let entity = self.spawn_stream(spec, publisher, report, ssrc, rtx_ssrc, None);
            self.world.resource_mut::<TrackIndex>().0.insert(id, entity);
            return vec![entity];
        }
        let layers = spec.layers.clone();
        let streams: Vec<Entity> = layers
            .iter()
            .map(|l| self.spawn_stream(spec.clone(), publisher, report, l.ssrc, l.rtx_ssrc, None))
            .collect();
        for (i, (&entity, l)) in streams.iter().zip(&layers).enumerate() {
            if let Some(mut t) = self.world.get_mut::<Track>(entity) {
                t.layering = Some(Layering {
                    index: i as u8,
                    rid: l.rid.clone(),
                    siblings: streams.clone(),
                    size: None,
                });
            }
        }
        self.world
            .resource_mut::<TrackIndex>()
            .0
            .insert(id, streams[0]);
        streams
    }

    fn spawn_stream(
        &mut self,
        spec: TrackSpec,
        publisher: Option<Entity>,
        report: bool,
        ssrc: Option<u32>,
        rtx_ssrc: Option<u32>,
        layering: Option<Layering>,
    ) -> Entity {
        self.world
            .spawn(Track {
                spec,
                publisher,
                from_link: false,
                report,
                ssrc,
                rtx_ssrc,
                subscribers: Vec::new(),
                paused: Vec::new(),
                cache: Default::default(),
                stats: ReceiveStats::default(),
                last_keyframe_request: None,
                keyframe_wanted: false,
                missing: Default::default(),
                sender_report: None,
                relay_to: Vec::new(),
                origin: None,
                levels: Default::default(),
                muted: false,
                layering,
                rate: Default::default(),
                temporal_rates: Default::default(),
                temporal_seen: false,
            })
            .insert(Timers::default())
            .id()
    }

    /// `Command::AddSource`: a local source (`track`, fed by [`Shard::send_rtp`]) sent
    /// to `peer` as `subscription`: a client endpoint's camera or microphone. The peer's
    /// NACKs are answered from its cache like any track's.
    pub(super) fn add_source(
        &mut self,
        peer: PeerId,
        track: TrackSpec,
        subscription: SubscriptionSpec,
    ) -> Result<(), CommandError> {
        self.peer_entity(peer)?;
        if self.track_entity(track.id).is_ok() {
            return Err(CommandError::DuplicateTrack(track.id));
        }
        let id = track.id;
        let entity = self.spawn_track(track, None, false)[0];
        let made = self.subscribe(
            peer,
            SubscriptionSpec {
                track: id,
                ..subscription
            },
        );
        if made.is_err() {
            self.world.despawn(entity);
        }
        made
    }

    /// Sends `packet` (a plaintext RTP packet the owner made) on the local source
    /// `track` to its receivers, at `now`: cached for their NACKs and written out in
    /// this call's tick, each receiver's header rewritten as for any subscription.
    pub fn send_rtp(
        &mut self,
        now: Time,
        track: TrackId,
        packet: Bytes,
    ) -> Result<(), CommandError> {
        self.queue_rtp(now, track, packet)?;
        self.handle_timeout(now);
        Ok(())
    }

    /// [`Shard::send_rtp`] for several packets of one source at once (a video frame's),
    /// written out in one tick instead of one each. Returns how many were taken.
    ///
    /// # Errors
    /// As [`Shard::send_rtp`]'s, for the first packet refused: the batch stops there,
    /// and the packets before it are sent.
    pub fn send_rtp_batch(
        &mut self,
        now: Time,
        track: TrackId,
        packets: impl IntoIterator<Item = Bytes>,
    ) -> Result<usize, CommandError> {
        let mut taken = 0;
        let mut outcome = Ok(());
        for packet in packets {
            outcome = self.queue_rtp(now, track, packet);
            if outcome.is_err() {
                break;
            }
            taken += 1;
        }
        if taken > 0 {
            self.handle_timeout(now);
        }
        outcome.map(|()| taken)
    }

    /// Caches `packet` of local source `track` and queues it for its receivers, for
    /// the next tick to write out.
    fn queue_rtp(&mut self, now: Time, track: TrackId, packet: Bytes) -> Result<(), CommandError> {
        let entity = self.track_entity(track)?;
        let Ok(header) = RtpHeader::parse(&packet) else {
            return Err(CommandError::MalformedRtp);
        };
        let Some(mut t) = self.world.get_mut::<Track>(entity) else {
            return Err(CommandError::UnknownTrack(track));
        };
        if t.publisher.is_some() {
            return Err(CommandError::NotLocal(track));
        }
        let seq = t.stats.note(header.sequence_number);
        t.rate.add(now, packet.len());
        if let Some(payload) = packet.get(header.payload_range()) {
            t.note_temporal(now, payload, packet.len());
        }
        t.cache.insert(seq, packet.clone());
        self.forward_local(entity, &packet, seq);
        Ok(())
    }

    /// Queues `packet` of stream `entity` for its subscribers (outside the passes:
    /// a local source's, a sibling shard's).
    fn forward_local(&mut self, entity: Entity, packet: &Bytes, seq: u64) {
        let Some(t) = self.world.get::<Track>(entity) else {
            return;
        };
        if t.subscribers.is_empty() {
            return;
        }
        let Some(shared) = SharedRtp::of(t, packet, seq) else {
            return;
        };
        let n = t.subscribers.len();
        self.world.resource_scope(|world, mut out: Mut<MediaOut>| {
            for i in 0..n {
                let Some(&s) = world
                    .get::<Track>(entity)
                    .and_then(|t| t.subscribers.get(i))
                else {
                    break;
                };
                let shift = match world.get_mut::<Subscription>(s) {
                    Some(mut sub) => admit(&mut sub, entity, &shared),
                    None => None,
                };
                if let Some(shift) = shift {
                    out.0.push(Outgoing::Rtp {
                        subscription: s,
                        packet: SharedRtp {
                            shift,
                            ..shared.clone()
                        },
                        retransmission: false,
                        probe: false,
                    });
                }
            }
        });
    }

    /// `Command::Unpublish`: `peer` no longer sends `track`; its subscriptions end.
    pub(super) fn unpublish(&mut self, peer: PeerId, track: TrackId) -> Result<(), CommandError> {
        let publisher = self.peer_entity(peer)?;
        let entity = self
            .world
            .get::<PeerMedia>(publisher)
            .and_then(|m| find(&m.tracks, track))
            .ok_or(CommandError::UnknownTrack(track))?;
        let link = self
            .world
            .get::<RoomMember>(publisher)
            .is_some_and(|m| m.link);
        let ssrcs = if link {
            self.track_ssrcs(entity)
        } else {
            Vec::new()
        };
        self.world.despawn(entity);
        self.world.flush();
        // A link's tracks come and go for as long as the room spans the two nodes,
        // each under SSRCs the other node never uses again on the link: their SRTP
        // state goes with them, or the link's inbound context would fill up and
        // refuse every new track's packets (`SrtpError::TooManySsrcs`). A
        // participant's SSRC may come back on the same m-line with its rollover
        // counter past 0, so its state stays for the session.
        if let Some(mut srtp) = self.world.get_mut::<PeerSrtp>(publisher) {
            for ssrc in ssrcs {
                srtp.session.inbound.forget_ssrc(ssrc);
            }
        }
        Ok(())
    }

    /// The SSRCs `track` (all its simulcast streams) arrives with, bound so far.
    fn track_ssrcs(&self, track: Entity) -> Vec<u32> {
        let streams = match self
            .world
            .get::<Track>(track)
            .and_then(|t| t.layering.as_ref())
        {
            Some(l) => l.siblings.clone(),
            None => vec![track],
        };
        streams
            .iter()
            .filter_map(|&e| self.world.get::<Track>(e))
            .flat_map(|t| [t.ssrc, t.rtx_ssrc])
            .flatten()
            .collect()
    }

    /// `Command::Subscribe`: `peer` is sent `spec.track`, which must be published on
    /// this shard by another peer; with `spec.stream`, only that stream of it, which
    /// a peer may take of each stream once (a link takes each this way). The
    /// publisher is asked for a keyframe at once, so the new subscriber can start
    /// decoding (throttled by the media pass).
    pub(super) fn subscribe(
        &mut self,
        peer: PeerId,
        spec: SubscriptionSpec,
    ) -> Result<(), CommandError> {
        let subscriber = self.peer_entity(peer)?;
        let track = self.track_entity(spec.track)?;
        if self.world.get::<Track>(track).and_then(|t| t.publisher) == Some(subscriber) {
            return Err(CommandError::OwnTrack(spec.track));
        }
        // A simulcast track's subscription is listed on every stream and starts on
        // the first; the media pass moves it by the subscriber's estimate. One to a
        // single stream is listed on that stream alone and stays there.
        let mut listed_on = self.streams(track);
        if let Some(i) = spec.stream {
            let stream = *listed_on
                .get(usize::from(i))
                .ok_or(CommandError::UnknownStream(spec.track, i))?;
            listed_on = vec![stream];
        }
        // The stream it is sent first: the track's first, or the one it takes.
        let track = listed_on[0];
        let limits = self.peer_limits(subscriber);
        // A peer may take a track once, or each of its streams once.
        let taken = self.world.get::<PeerMedia>(subscriber).is_some_and(|m| {
            m.subscriptions.iter().any(|&(id, e)| {
                id == spec.track
                    && self.world.get::<Subscription>(e).is_none_or(|s| {
                        match (s.spec.stream, spec.stream) {
                            (Some(a), Some(b)) => a == b,
                            _ => true,
                        }
                    })
            })
        });
        if taken {
            return Err(CommandError::DuplicateTrack(spec.track));
        }
        let media = self.peer_media(subscriber);
        if media.subscriptions.len() >= limits.subscriptions {
            return Err(CommandError::TooManyTracks(limits.subscriptions));
        }
        // Every live subscription retires up to two SSRCs when it ends: the list
        // stays within its bound whatever ends when.
        if media.retired_ssrcs.len() + 2 * (media.subscriptions.len() + 1) > limits.retired_ssrcs {
            return Err(CommandError::SsrcsUsedUp(media.retired_ssrcs.len()));
        }
        for ssrc in std::iter::once(&spec.ssrc).chain(&spec.rtx_ssrc) {
            if media.subscriptions_by_ssrc.contains_key(ssrc) {
                return Err(CommandError::SsrcInUse(*ssrc));
            }
            // Its SRTP index would start over under the same keys.
            if media.retired_ssrcs.contains(ssrc) {
                return Err(CommandError::SsrcRetired(*ssrc));
            }
        }
        let (id, ssrc, rtx_ssrc) = (spec.track, spec.ssrc, spec.rtx_ssrc);
        let layers = (listed_on.len() > 1).then(|| LayerChoice {
            max_rank: (listed_on.len() - 1) as u8,
            ..LayerChoice::default()
        });
        let entity = self
            .world
            .spawn(Subscription {
                spec,
                subscriber,
                track,
                seq_offset: 0,
                ts_offset: 0,
                rtx_seq: 0,
                packets_sent: 0,
                octets_sent: 0,
                last_rtp_ts: None,
                started: false,
                first_seq: 0,
                recent_resends: Default::default(),
                layers,
                paused: false,
                temporal: Default::default(),
            })
            .id();
        // Sender reports start a report interval after the subscription.
        let now = self.world.resource::<shoal_components::tick::Now>().0;
        let mut timers = Timers::default();
        self.world.resource_mut::<TimerHeap>().arm(
            &mut timers,
            entity,
            TimerKind::MediaReport,
            now + REPORT_INTERVAL,
        );
        self.world.entity_mut(entity).insert(timers);
        let mut media = self.peer_media(subscriber);
        media.subscriptions.push((id, entity));
        for s in std::iter::once(ssrc).chain(rtx_ssrc) {
            media.subscriptions_by_ssrc.insert(s, entity);
        }
        for stream in listed_on {
            if let Some(mut t) = self.world.get_mut::<Track>(stream) {
                t.subscribers.push(entity);
            }
        }
        // A subscriber that can receive asks for a keyframe now; one whose SRTP keys
        // are still to come asks when they arrive. A local source's receiver asks its
        // owner with PLI when it needs one.
        let ready = self.world.get::<PeerSrtp>(subscriber).is_some();
        let local = self
            .world
            .get::<Track>(track)
            .is_some_and(|t| t.publisher.is_none() && t.origin.is_none());
        if ready && !local {
            self.world.resource_mut::<MediaStart>().tracks.push(track);
        }
        Ok(())
    }

    /// `Command::SetMuted`: a muted track forwards nothing; unmuted, it asks its
    /// publisher for a keyframe, which the subscribers start again on.
    pub(super) fn set_muted(&mut self, track: TrackId, muted: bool) -> Result<(), CommandError> {
        let entity = self.track_entity(track)?;
        let streams = self.streams(entity);
        for stream in streams {
            let Some(mut t) = self.world.get_mut::<Track>(stream) else {
                return Err(CommandError::UnknownTrack(track));
            };
            let was = std::mem::replace(&mut t.muted, muted);
            if was && !muted {
                self.world.resource_mut::<MediaStart>().tracks.push(stream);
            }
        }
        Ok(())
    }

    /// `Command::SetTrackSettings`: a paused subscription leaves its track's
    /// subscriber lists (the fan-out never sees it) and comes back with a keyframe
    /// asked of the publisher; a simulcast subscription's highest stream is bounded
    /// by rank and picture size, taken up at the next choice.
    pub(super) fn set_track_settings(
        &mut self,
        peer: PeerId,
        track: TrackId,
        settings: TrackSettings,
    ) -> Result<(), CommandError> {
        let subscriber = self.peer_entity(peer)?;
        let entities = self.subscriptions_to(subscriber, track)?;
        for entity in entities {
            self.apply_settings(entity, settings);
        }
        Ok(())
    }

    /// A peer's subscriptions to `track`: the one, or one to each of its streams.
    fn subscriptions_to(
        &self,
        subscriber: Entity,
        track: TrackId,
    ) -> Result<Vec<Entity>, CommandError> {
        let found: Vec<Entity> = self
            .world
            .get::<PeerMedia>(subscriber)
            .map(|m| {
                m.subscriptions
                    .iter()
                    .filter(|(id, _)| *id == track)
                    .map(|&(_, e)| e)
                    .collect()
            })
            .unwrap_or_default();
        if found.is_empty() {
            return Err(CommandError::UnknownTrack(track));
        }
        Ok(found)
    }

    /// [`Shard::set_track_settings`] for one subscription.
    fn apply_settings(&mut self, entity: Entity, settings: TrackSettings) {
        let Some(mut sub) = self.world.get_mut::<Subscription>(entity) else {
            return;
        };
        let was_paused = std::mem::replace(&mut sub.paused, settings.paused);
        let streams_of = sub.track;
        if let Some(choice) = sub.layers.as_mut() {
            choice.max_rank = settings.max_rank.unwrap_or(u8::MAX);
            choice.max_size = settings.max_size;
        }
        // Taken up at the next frame (down) or sync frame (up); the next choice
        // lowers it again where the subscriber's bandwidth asks.
        let preferred = settings.max_temporal.unwrap_or(ALL_LAYERS);
        sub.temporal.preferred = preferred;
        sub.temporal.target = preferred;
        let streams = match sub.spec.stream {
            Some(_) => vec![streams_of],
            None => self.streams(streams_of),
        };
        match (was_paused, settings.paused) {
            (false, true) => {
                for stream in streams {
                    if let Some(mut t) = self.world.get_mut::<Track>(stream) {
                        t.subscribers.retain(|e| *e != entity);
                        t.paused.push(entity);
                    }
                }
            }
            (true, false) => {
                for stream in streams {
                    if let Some(mut t) = self.world.get_mut::<Track>(stream) {
                        t.paused.retain(|e| *e != entity);
                        t.subscribers.push(entity);
                    }
                }
                // It starts again as a new subscription would: at a keyframe, its
                // numbers going on from the last sent, none of what it missed
                // retransmitted.
                let newest = self.world.get::<Track>(streams_of).map(|t| t.stats.max_seq);
                if let Some(mut sub) = self.world.get_mut::<Subscription>(entity) {
                    if let Some(newest) = newest.filter(|_| sub.started) {
                        sub.first_seq = newest + 1;
                    }
                    sub.temporal.resume();
                    if let Some(choice) = sub.layers.as_mut() {
                        choice.current = None;
                        if choice.sent.is_some() {
                            choice.sent = Some(u8::MAX);
                        }
                    }
                }
                self.world
                    .resource_mut::<MediaStart>()
                    .tracks
                    .push(streams_of);
            }
            _ => {}
        }
    }

    /// `Command::Unsubscribe`: `peer` is no longer sent `track` (nor any of its
    /// streams).
    pub(super) fn unsubscribe(&mut self, peer: PeerId, track: TrackId) -> Result<(), CommandError> {
        let subscriber = self.peer_entity(peer)?;
        for entity in self.subscriptions_to(subscriber, track)? {
            self.world.despawn(entity);
        }
        Ok(())
    }

    /// The streams of the track whose first stream is `entity`: itself alone unless
    /// it is simulcast.
    fn streams(&self, entity: Entity) -> Vec<Entity> {
        match self
            .world
            .get::<Track>(entity)
            .and_then(|t| t.layering.as_ref())
        {
            Some(l) => l.siblings.clone(),
            None => vec![entity],
        }
    }

    /// `Command::MirrorTrack`: a copy of a track published on shard `origin`, fed by
    /// that shard's relay (`Shard::deliver_media_relay`), for subscribers here.
    pub(super) fn mirror_track(
        &mut self,
        track: TrackSpec,
        origin: usize,
    ) -> Result<(), CommandError> {
        if self.track_entity(track.id).is_ok() {
            return Err(CommandError::DuplicateTrack(track.id));
        }
        if track.layers.len() > MAX_LAYERS {
            return Err(CommandError::TooManyLayers(MAX_LAYERS));
        }
        for entity in self.spawn_track(track, None, false) {
            if let Some(mut t) = self.world.get_mut::<Track>(entity) {
                t.origin = Some(origin);
            }
        }
        Ok(())
    }

    /// `Command::RelayTrack`: each packet of `track` goes to shard `to` as well.
    pub(super) fn relay_track(&mut self, track: TrackId, to: usize) -> Result<(), CommandError> {
        let entity = self.track_entity(track)?;
        for stream in self.streams(entity) {
            if let Some(mut t) = self.world.get_mut::<Track>(stream)
                && !t.relay_to.contains(&to)
            {
                t.relay_to.push(to);
            }
        }
        Ok(())
    }

    /// The entity of track `id` on this shard.
    fn track_entity(&self, id: TrackId) -> Result<Entity, CommandError> {
        self.world
            .resource::<TrackIndex>()
            .0
            .get(&id)
            .copied()
            .ok_or(CommandError::UnknownTrack(id))
    }

    /// `Command::DropMirror`: the mirror of `track` goes, with its subscriptions.
    pub(super) fn drop_mirror(&mut self, track: TrackId) -> Result<(), CommandError> {
        let entity = self.track_entity(track)?;
        if self
            .world
            .get::<Track>(entity)
            .is_some_and(|t| t.origin.is_none())
        {
            return Err(CommandError::NotLocal(track));
        }
        self.world.despawn(entity);
        self.world.flush();
        Ok(())
    }

    /// Moves what the media pass put out for sibling shards (mirrored tracks' packets,
    /// keyframe requests for their origins) into `out`.
    pub(crate) fn poll_media_relay(&mut self, out: &mut Vec<MediaRelay>) {
        let mut relay = self.world.resource_mut::<MediaRelayOut>();
        let packets = relay
            .0
            .iter()
            .filter(|m| matches!(m, MediaRelay::Packet { .. }))
            .count() as u64;
        out.append(&mut relay.0);
        self.world
            .resource_mut::<shoal_components::stats::ShardStats>()
            .media_relay_out += packets;
    }

    /// Counts media relay items the owner could not hand to another shard.
    pub(crate) fn count_media_relay_dropped(&mut self, items: u64) {
        self.world
            .resource_mut::<shoal_components::stats::ShardStats>()
            .media_relay_dropped += items;
    }

    /// Takes what a sibling shard relayed, at `now`: packets of tracks mirrored here
    /// go to their subscribers (cached for their NACKs), keyframe requests for tracks
    /// published here go to the publisher (throttled as any). Unknown tracks are
    /// skipped (a mirror dropped while packets were on their way).
    pub(crate) fn deliver_media_relay(&mut self, now: Time, batch: Vec<MediaRelay>) {
        let packets = batch
            .iter()
            .filter(|m| matches!(m, MediaRelay::Packet { .. }))
            .count() as u64;
        self.world
            .resource_mut::<shoal_components::stats::ShardStats>()
            .media_relay_in += packets;
        for item in batch {
            let Ok(first) = self.track_entity(item.track()) else {
                continue;
            };
            let entity = match self
                .world
                .get::<Track>(first)
                .and_then(|t| t.layering.as_ref())
            {
                Some(l) => match l.siblings.get(usize::from(item.layer())) {
                    Some(e) => *e,
                    None => continue,
                },
                None => first,
            };
            match item {
                MediaRelay::Packet { seq, packet, .. } => {
                    let Some(mut t) = self.world.get_mut::<Track>(entity) else {
                        continue;
                    };
                    if t.origin.is_none() || t.cache.get(seq).is_some() {
                        continue;
                    }
                    // The origin's extended numbers, kept: they count wraps.
                    t.stats.note_extended(seq);
                    t.rate.add(now, packet.len());
                    if let Ok(p) = RtpPacket::parse(&packet) {
                        if t.layering.is_some() {
                            note_picture_size(&mut t, p.payload());
                        }
                        t.note_temporal(now, p.payload(), packet.len());
                    }
                    t.cache.insert(seq, packet.clone());
                    self.forward_local(entity, &packet, seq);
                }
                // Asked in this call's tick, through the throttle of any request.
                MediaRelay::Keyframe { .. } => {
                    self.world.resource_mut::<MediaStart>().tracks.push(entity);
                }
            }
        }
        self.handle_timeout(now);
    }

    /// How many tracks and subscriptions the shard holds (for tests and reports).
    #[cfg(test)]
    pub(crate) fn media_counts(&mut self) -> (usize, usize) {
        self.world.flush();
        let tracks = self.world.query::<&Track>().iter(&self.world).count();
        let subs = self
            .world
            .query::<&Subscription>()
            .iter(&self.world)
            .count();
        (tracks, subs)
    }
}

/// The entity listed under `id` in one of a peer's `(TrackId, Entity)` lists.
fn find(list: &[(TrackId, Entity)], id: TrackId) -> Option<Entity> {
    list.iter().find(|(t, _)| *t == id).map(|(_, e)| *e)
}

#[cfg(test)]
mod tests {
    use shoal_components::media::{ExtensionIds, FeedbackKinds, TrackKind};
    use shoal_components::peer::{IceCredentials, IceRole};
    use shoal_components::time::Time;

    use shoal_components::room::RoomId;
    use shoal_components::shared::{MAX_LINK_TRACKS, MAX_RETIRED_SSRCS, MAX_TRACKS_PER_PEER};

    use super::*;
    use crate::{Command, PeerSpec, ShardConfig};

    fn lite(id: u64) -> PeerSpec {
        PeerSpec {
            id: PeerId(id),
            role: IceRole::Lite,
            credentials: IceCredentials {
                local_ufrag: format!("ufrag{id}"),
                local_pwd: "0123456789012345678901".into(),
                remote_ufrag: "rufr".into(),
                remote_pwd: "0123456789012345678901".into(),
            },
            remote_candidates: Vec::new(),
            dtls: None,
            room: None,
            may_send_data: true,
            link: false,
        }
    }

    fn track(id: u64, ssrc: u32) -> TrackSpec {
        TrackSpec {
            id: TrackId(id),
            kind: TrackKind::Video,
            mid: "1".into(),
            ssrc: Some(ssrc),
            rtx_ssrc: Some(ssrc + 1),
            payload_type: 96,
            rtx_payload_type: Some(97),
            clock_rate: 90_000,
            extensions: ExtensionIds::default(),
            feedback: FeedbackKinds::default(),
            format: Default::default(),
            layers: Vec::new(),
        }
    }

    fn sub(track: u64, ssrc: u32) -> SubscriptionSpec {
        SubscriptionSpec {
            track: TrackId(track),
            mid: "s0".into(),
            ssrc,
            rtx_ssrc: None,
            payload_type: 96,
            rtx_payload_type: None,
            extensions: ExtensionIds::default(),
            feedback: FeedbackKinds::default(),
            cname: "stream".into(),
            stream: None,
        }
    }

    /// Peers, tracks and subscriptions that come and go leave nothing behind: not
    /// even bevy's removal messages, which a World outside bevy's App keeps until
    /// they are cleared (the shard does at the end of every tick).
    #[test]
    fn removal_messages_do_not_pile_up_with_churn() {
        let mut shard = Shard::new(ShardConfig::new("127.0.0.1:7000".parse().unwrap(), 1));
        let mut t = Time::ZERO;
        let baseline = shard.entity_count();
        let mut most = 0;
        for round in 0..200u64 {
            let (a, b) = (2 * round + 1, 2 * round + 2);
            shard.command(t, Command::AddPeer(lite(a))).unwrap();
            shard.command(t, Command::AddPeer(lite(b))).unwrap();
            let track = Command::Publish {
                peer: PeerId(a),
                track: track(1000 + round, 100),
            };
            shard.command(t, track).unwrap();
            let subscribe = Command::Subscribe {
                peer: PeerId(b),
                subscription: sub(1000 + round, 5),
            };
            shard.command(t, subscribe).unwrap();
            shard.command(t, Command::RemovePeer(PeerId(a))).unwrap();
            shard.command(t, Command::RemovePeer(PeerId(b))).unwrap();
            t = t + std::time::Duration::from_millis(20);
            shard.handle_timeout(t);
            most = most.max(shard.removal_messages());
        }
        assert_eq!(shard.entity_count(), baseline);
        // At most the last two ticks' worth (one round's), not 200 rounds'.
        assert!(most > 0, "the rounds removed components");
        assert!(
            shard.removal_messages() <= most && most < 200,
            "{} removal messages held after 200 rounds (at most {most} at once)",
            shard.removal_messages()
        );
    }

    #[test]
    fn tracks_and_subscriptions_go_with_their_peers() {
        let mut shard = Shard::new(ShardConfig::new("127.0.0.1:7000".parse().unwrap(), 1));
        let t = Time::ZERO;
        for id in 1..=3 {
            shard.command(t, Command::AddPeer(lite(id))).unwrap();
        }
        let baseline = shard.entity_count();
        let publish = |peer, track| Command::Publish {
            peer: PeerId(peer),
            track,
        };
        shard.command(t, publish(1, track(10, 100))).unwrap();
        shard.command(t, publish(1, track(11, 200))).unwrap();
        assert_eq!(
            shard.command(t, publish(2, track(10, 300))),
            Err(CommandError::DuplicateTrack(TrackId(10)))
        );
        assert_eq!(
            shard.command(t, publish(1, track(12, 101))),
            Err(CommandError::SsrcInUse(101))
        );
        let subscribe = |peer, subscription| Command::Subscribe {
            peer: PeerId(peer),
            subscription,
        };
        shard.command(t, subscribe(2, sub(10, 5))).unwrap();
        shard.command(t, subscribe(3, sub(10, 5))).unwrap();
        shard.command(t, subscribe(3, sub(11, 6))).unwrap();
        assert_eq!(
            shard.command(t, subscribe(1, sub(10, 7))),
            Err(CommandError::OwnTrack(TrackId(10)))
        );
        assert_eq!(
            shard.command(t, subscribe(2, sub(99, 8))),
            Err(CommandError::UnknownTrack(TrackId(99)))
        );
        assert_eq!(shard.media_counts(), (2, 3));

        // Unsubscribing one leaves the rest.
        shard
            .command(
                t,
                Command::Unsubscribe {
                    peer: PeerId(3),
                    track: TrackId(11),
                },
            )
            .unwrap();
        assert_eq!(shard.media_counts(), (2, 2));
        // Unpublishing takes the track's subscriptions along.
        shard
            .command(
                t,
                Command::Unpublish {
                    peer: PeerId(1),
                    track: TrackId(10),
                },
            )
            .unwrap();
        assert_eq!(shard.media_counts(), (1, 0));
        shard.command(t, subscribe(2, sub(11, 9))).unwrap();
        // The publisher leaves: its track, and the subscription to it, go.
        shard.command(t, Command::RemovePeer(PeerId(1))).unwrap();
        assert_eq!(shard.media_counts(), (0, 0));
        // And the ids are free again for whoever publishes next.
        shard.command(t, publish(2, track(11, 200))).unwrap();
        shard.command(t, subscribe(3, sub(11, 9))).unwrap();
        shard.command(t, Command::RemovePeer(PeerId(3))).unwrap();
        assert_eq!(shard.media_counts(), (1, 0));
        shard.command(t, Command::RemovePeer(PeerId(2))).unwrap();
        assert_eq!(shard.media_counts(), (0, 0));
        assert_eq!(
            shard.entity_count() + 3,
            baseline,
            "the three peers and nothing else"
        );
    }

    /// Peers 1 and 2, and track 10 of peer 1 in three streams on SSRCs 100 to 105, as
    /// an a=ssrc-group:SIM offer gives it (the first FID pair is the first stream's
    /// too).
    fn simulcast_shard() -> Shard {
        use shoal_components::media::LayerSpec;
        let mut shard = Shard::new(ShardConfig::new("127.0.0.1:7000".parse().unwrap(), 1));
        for id in 1..=2 {
            shard
                .command(Time::ZERO, Command::AddPeer(lite(id)))
                .unwrap();
        }
        let mut spec = track(10, 100);
        spec.layers = (0..3)
            .map(|i| LayerSpec {
                rid: None,
                ssrc: Some(100 + 2 * i),
                rtx_ssrc: Some(101 + 2 * i),
            })
            .collect();
        let publish = Command::Publish {
            peer: PeerId(1),
            track: spec,
        };
        shard.command(Time::ZERO, publish).unwrap();
        shard
    }

    #[test]
    fn a_simulcast_track_is_one_track_of_streams_that_go_together() {
        use shoal_components::media::TrackSettings;
        let mut shard = simulcast_shard();
        let t = Time::ZERO;
        let publish = |track| Command::Publish {
            peer: PeerId(1),
            track,
        };
        assert_eq!(shard.media_counts(), (3, 0), "three streams");
        // Another track may not take a stream's SSRC.
        assert_eq!(
            shard.command(t, publish(track(11, 104))),
            Err(CommandError::SsrcInUse(104))
        );
        shard
            .command(
                t,
                Command::Subscribe {
                    peer: PeerId(2),
                    subscription: sub(10, 5),
                },
            )
            .unwrap();
        // Paused, the subscription leaves the streams' lists; it still goes with
        // the track.
        shard
            .command(
                t,
                Command::SetTrackSettings {
                    peer: PeerId(2),
                    track: TrackId(10),
                    settings: TrackSettings {
                        paused: true,
                        ..TrackSettings::default()
                    },
                },
            )
            .unwrap();
        assert_eq!(shard.media_counts(), (3, 1));
        shard
            .command(
                t,
                Command::Unpublish {
                    peer: PeerId(1),
                    track: TrackId(10),
                },
            )
            .unwrap();
        assert_eq!(
            shard.media_counts(),
            (0, 0),
            "every stream and the paused subscription"
        );
        // And its SSRCs are free again.
        shard.command(t, publish(track(12, 104))).unwrap();
    }

    /// A link takes each stream of a simulcast track as a subscription of its own:
    /// each listed on its stream alone, none switched, all going together.
    #[test]
    fn each_stream_of_a_simulcast_track_may_be_taken_alone() {
        let mut shard = simulcast_shard();
        let t = Time::ZERO;
        let subscribe = |ssrc: u32, stream: Option<u8>| Command::Subscribe {
            peer: PeerId(2),
            subscription: SubscriptionSpec {
                stream,
                ..sub(10, ssrc)
            },
        };
        for i in 0..3u8 {
            shard
                .command(t, subscribe(50 + u32::from(i), Some(i)))
                .unwrap();
        }
        assert_eq!(shard.media_counts(), (3, 3));
        // A stream, or the whole track, once only; no stream past the track's.
        assert_eq!(
            shard.command(t, subscribe(60, Some(1))),
            Err(CommandError::DuplicateTrack(TrackId(10)))
        );
        assert_eq!(
            shard.command(t, subscribe(61, None)),
            Err(CommandError::DuplicateTrack(TrackId(10)))
        );
        assert_eq!(
            shard.command(t, subscribe(62, Some(3))),
            Err(CommandError::UnknownStream(TrackId(10), 3))
        );
        // Each stream lists the one subscription to it, which is not switched.
        let first = shard.track_entity(TrackId(10)).unwrap();
        for (i, stream) in shard.streams(first).into_iter().enumerate() {
            let listed = shard
                .world
                .get::<Track>(stream)
                .unwrap()
                .subscribers
                .clone();
            assert_eq!(listed.len(), 1, "stream {i}");
            let s = shard.world.get::<Subscription>(listed[0]).unwrap();
            assert_eq!(
                (s.spec.stream, s.spec.ssrc, s.track, s.layers),
                (Some(i as u8), 50 + i as u32, stream, None),
                "stream {i}"
            );
        }
        // Paused, each leaves its own stream's list for its paused list, and comes
        // back to it.
        let listed = |shard: &Shard| -> Vec<(usize, usize)> {
            let first = shard.track_entity(TrackId(10)).unwrap();
            shard
                .streams(first)
                .into_iter()
                .map(|e| {
                    let t = shard.world.get::<Track>(e).unwrap();
                    (t.subscribers.len(), t.paused.len())
                })
                .collect()
        };
        for paused in [true, false] {
            let settings = Command::SetTrackSettings {
                peer: PeerId(2),
                track: TrackId(10),
                settings: shoal_components::media::TrackSettings {
                    paused,
                    ..Default::default()
                },
            };
            shard.command(t, settings).unwrap();
            let each = if paused { (0, 1) } else { (1, 0) };
            assert_eq!(listed(&shard), [each; 3], "paused {paused}");
        }
        // Unsubscribing the track ends all three.
        shard
            .command(
                t,
                Command::Unsubscribe {
                    peer: PeerId(2),
                    track: TrackId(10),
                },
            )
            .unwrap();
        assert_eq!(shard.media_counts(), (3, 0));
        // So does the track's end.
        for i in 0..3u8 {
            shard
                .command(t, subscribe(80 + u32::from(i), Some(i)))
                .unwrap();
        }
        assert_eq!(shard.media_counts(), (3, 3));
        let unpublish = Command::Unpublish {
            peer: PeerId(1),
            track: TrackId(10),
        };
        shard.command(t, unpublish).unwrap();
        assert_eq!(shard.media_counts(), (0, 0));
        // A track of one stream has only stream 0.
        shard
            .command(
                t,
                Command::Publish {
                    peer: PeerId(1),
                    track: track(11, 200),
                },
            )
            .unwrap();
        assert_eq!(
            shard.command(
                t,
                Command::Subscribe {
                    peer: PeerId(2),
                    subscription: SubscriptionSpec {
                        stream: Some(1),
                        ..sub(11, 70)
                    },
                }
            ),
            Err(CommandError::UnknownStream(TrackId(11), 1))
        );
    }

    #[test]
    fn a_session_retires_at_most_its_bound_of_ssrcs() {
        let mut shard = Shard::new(ShardConfig::new("127.0.0.1:7000".parse().unwrap(), 1));
        let t = Time::ZERO;
        for id in 1..=2 {
            shard.command(t, Command::AddPeer(lite(id))).unwrap();
        }
        shard
            .command(
                t,
                Command::Publish {
                    peer: PeerId(1),
                    track: track(10, 100),
                },
            )
            .unwrap();
        let mut made = 0u32;
        let refused = loop {
            let spec = SubscriptionSpec {
                rtx_ssrc: Some(3 * made + 2),
                ..sub(10, 3 * made + 1)
            };
            let subscribe = Command::Subscribe {
                peer: PeerId(2),
                subscription: spec,
            };
            match shard.command(t, subscribe) {
                Ok(()) => made += 1,
                Err(e) => break e,
            }
            let unsubscribe = Command::Unsubscribe {
                peer: PeerId(2),
                track: TrackId(10),
            };
            shard.command(t, unsubscribe).unwrap();
            assert!(made < 10_000, "no bound");
        };
        assert_eq!(made as usize, MAX_RETIRED_SSRCS / 2);
        assert_eq!(refused, CommandError::SsrcsUsedUp(MAX_RETIRED_SSRCS));
    }

    /// A shard with a node-to-node link's peer (1) and a participant (2).
    fn link_and_participant() -> Shard {
        let mut shard = Shard::new(ShardConfig::new("127.0.0.1:7000".parse().unwrap(), 1));
        let link = PeerSpec {
            room: Some(RoomId(1)),
            link: true,
            ..lite(1)
        };
        shard.command(Time::ZERO, Command::AddPeer(link)).unwrap();
        shard
            .command(Time::ZERO, Command::AddPeer(lite(2)))
            .unwrap();
        shard
    }

    /// A node-to-node link's peer publishes a whole node's share of a room: more
    /// tracks than a participant may.
    #[test]
    fn a_link_publishes_more_tracks_than_a_participant() {
        let mut shard = link_and_participant();
        let t = Time::ZERO;
        let publish = |shard: &mut Shard, peer: u64, n: u64| {
            shard.command(
                t,
                Command::Publish {
                    peer: PeerId(peer),
                    track: track(peer * 10_000 + n, (peer * 10_000 + 2 * n) as u32 + 2),
                },
            )
        };
        for n in 0..MAX_TRACKS_PER_PEER as u64 {
            publish(&mut shard, 2, n).unwrap();
        }
        assert_eq!(
            publish(&mut shard, 2, MAX_TRACKS_PER_PEER as u64),
            Err(CommandError::TooManyTracks(MAX_TRACKS_PER_PEER))
        );
        for n in 0..MAX_LINK_TRACKS as u64 {
            publish(&mut shard, 1, n).unwrap();
        }
        assert_eq!(
            publish(&mut shard, 1, MAX_LINK_TRACKS as u64),
            Err(CommandError::TooManyTracks(MAX_LINK_TRACKS))
        );
    }

    /// Over a long-lived link, tracks come and go under fresh SSRCs: each one's
    /// SRTP state goes when it is unpublished, so the link's inbound context never
    /// fills up. A participant's stays (its SSRC may come back on its m-line).
    #[test]
    fn a_links_unpublished_tracks_leave_its_srtp_context() {
        use shoal_components::dtls::{DtlsRole, SrtpKeys};
        use shoal_components::srtp::{SrtpConfig, SrtpOutbound, SrtpProfile};
        use shoal_components::transport::RtcpSender;

        let mut shard = link_and_participant();
        let t = Time::ZERO;
        let profile = SrtpProfile::AeadAes128Gcm;
        let keys = SrtpKeys {
            profile,
            client_key: vec![1; 16],
            client_salt: vec![2; 12],
            server_key: vec![3; 16],
            server_salt: vec![4; 12],
        };
        // Each peer's DTLS client protects what it sends with the client key.
        let mut senders = Vec::new();
        for id in 1..=2u64 {
            let entity = shard.peer_entity(PeerId(id)).unwrap();
            let limits = shard.peer_limits(entity);
            let srtp = PeerSrtp::new(&keys, DtlsRole::Server, RtcpSender::new(9, 9), limits)
                .expect("keys of the profile's lengths");
            shard.world.entity_mut(entity).insert(srtp);
            let config = SrtpConfig {
                max_ssrcs: usize::MAX,
                ..SrtpConfig::default()
            };
            senders.push(
                SrtpOutbound::new(profile, &keys.client_key, &keys.client_salt, config).unwrap(),
            );
        }
        // One packet of `ssrc` from `peer`, through its inbound context as srtp_in
        // would take it; returns the SSRCs the context holds.
        let mut receive = |shard: &mut Shard, peer: u64, ssrc: u32| {
            let mut buf = vec![0u8; 64];
            buf[0] = 0x80;
            buf[1] = 96;
            buf[8..12].copy_from_slice(&ssrc.to_be_bytes());
            let len = senders[peer as usize - 1]
                .protect_rtp(&mut buf, 20)
                .unwrap();
            buf.truncate(len);
            let entity = shard.peer_entity(PeerId(peer)).unwrap();
            let mut srtp = shard.world.get_mut::<PeerSrtp>(entity).unwrap();
            srtp.session
                .inbound
                .unprotect_rtp(&mut buf)
                .expect("authentic");
            srtp.session.inbound.ssrc_count()
        };
        let cycle = |shard: &mut Shard, peer: u64, n: u64| {
            let id = peer * 100_000 + n;
            let ssrc = (peer * 100_000 + 2 * n) as u32 + 2;
            let publish = Command::Publish {
                peer: PeerId(peer),
                track: track(id, ssrc),
            };
            shard.command(t, publish).unwrap();
            let unpublish = Command::Unpublish {
                peer: PeerId(peer),
                track: TrackId(id),
            };
            (ssrc, unpublish)
        };
        // Twice as many tracks as the link's context holds, one after another.
        let holds = PeerMediaLimits::for_peer(true).srtp_ssrcs() as u64;
        for n in 0..2 * holds {
            let (ssrc, unpublish) = cycle(&mut shard, 1, n);
            assert_eq!(receive(&mut shard, 1, ssrc), 1, "track {n}");
            shard.command(t, unpublish).unwrap();
            let entity = shard.peer_entity(PeerId(1)).unwrap();
            let srtp = shard.world.get::<PeerSrtp>(entity).unwrap();
            assert_eq!(srtp.session.inbound.ssrc_count(), 0, "track {n}");
        }
        // A participant's state outlives its track.
        let (ssrc, unpublish) = cycle(&mut shard, 2, 0);
        assert_eq!(receive(&mut shard, 2, ssrc), 1);
        shard.command(t, unpublish).unwrap();
        let entity = shard.peer_entity(PeerId(2)).unwrap();
        let srtp = shard.world.get::<PeerSrtp>(entity).unwrap();
        assert_eq!(srtp.session.inbound.ssrc_count(), 1);
    }
}
