//! What the owner reads of a peer (ICE, DTLS), and closing one.

use std::net::SocketAddr;
use std::sync::Arc;

use bevy_ecs::prelude::*;
use shoal_components::congestion::TransportWide;
use shoal_components::congestion::gcc::Estimator;
use shoal_components::congestion::pacer::Pacer;
use shoal_components::datachannel::{ChannelParams, DataChannels};
use shoal_components::dtls::{CipherSuite, SrtpKeys};
use shoal_components::media::temporal::ALL_LAYERS;
use shoal_components::media::{LayerChoice, PeerMedia, Subscription, Track, TrackId};
use shoal_components::net::FiveTuple;
use shoal_components::peer::{Ice, IceState, Peer, PeerId, PeerIndex};
use shoal_components::relay::{RelayClosing, RelayLimits};
use shoal_components::room::{RoomId, RoomMember};
use shoal_components::sctp::assoc::{AssocState, Sctp};
use shoal_components::sctp::dcep::{ChannelType, Reliability};
use shoal_components::stats::ShardStats;
use shoal_components::tick::{Events, Now, RemoveReason, ShardEvent};
use shoal_components::time::Time;
use shoal_components::timer::{TimerHeap, TimerKind, Timers};
use shoal_components::transport::DtlsSession;

use super::{CommandError, Shard};
use crate::peer;

/// What a shard holds now, by kind, as [`Shard::census`] counts it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Census {
    /// Peers.
    pub peers: usize,
    /// Rooms with at least one member on the shard.
    pub rooms: usize,
    /// Published tracks (local sources and mirrors of other shards' tracks among
    /// them).
    pub tracks: usize,
    /// Subscriptions: one per subscriber and track.
    pub subscriptions: usize,
    /// SCTP associations, in any state.
    pub associations: usize,
    /// Data channels, open, opening or closing.
    pub data_channels: usize,
    /// Every peer's current send-side bandwidth estimate, bit/s (peers whose
    /// transport-wide feedback has not come yet are left out).
    pub estimates_bps: Vec<u64>,
}

/// A peer's congestion control state as [`Shard::congestion`] reports it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CongestionReport {
    /// What the path from shoal to the peer carries, bit/s, by shoal's estimate
    /// (draft-ietf-rmcat-gcc-02), once the peer's feedback came.
    pub estimate_bps: Option<u64>,
    /// What reached the peer over the last half second, bit/s, by its feedback.
    pub incoming_bps: Option<u64>,
    /// Round-trip time from sending to feedback, ms.
    pub rtt_ms: Option<f64>,
    /// Times the estimate was cut for over-use.
    pub decreases: u64,
    /// RTP packets shoal stamped with its transport-wide number.
    pub stamped: u64,
    /// Transport-cc feedback messages the peer sent shoal.
    pub feedback_received: u64,
    /// Transport-cc feedback messages shoal sent the peer.
    pub feedback_sent: u64,
    /// Its subscriptions to simulcast tracks: which stream each is sent.
    pub layers: Vec<LayerReport>,
    /// Probe clusters sent to the peer.
    pub probe_clusters: u64,
    /// What the last one measured, bit/s.
    pub last_probe_bps: Option<u64>,
    /// Bytes of data-channel messages queued to the peer, not yet sent.
    pub data_queued: usize,
    /// Room messages on unreliable channels the relay dropped for it.
    pub relay_dropped: u64,
    /// Times its own room messages were held back for a slower receiver.
    pub relay_holds: u64,
    /// Its room messages are held back now.
    pub relay_held: bool,
    /// The largest burst its path earned over the last 10 s, bytes: what the rate
    /// its drained bursts crossed at carries in 2.25 ms, at most 8 times what crossed
    /// ([`shoal_components::congestion::bursts`]).
    pub earned_burst_bytes: Option<i64>,
    /// The most its pacer lets go at once now, bytes; 0 before it paced.
    pub pacer_burst_bytes: i64,
}

/// One simulcast subscription's stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayerReport {
    /// The track.
    pub track: TrackId,
    /// The stream it is sent (the offer's order), once it started.
    pub current: Option<u8>,
    /// The stream chosen for it, sent from its next keyframe.
    pub target: u8,
    /// The rid of the stream it is sent, when rid-signalled.
    pub rid: Option<String>,
    /// Switches from one stream to another.
    pub switches: u32,
    /// The highest VP8 temporal layer it is sent now, `None` for all.
    pub temporal_current: Option<u8>,
    /// The highest temporal layer chosen for it, `None` for all.
    pub temporal_target: Option<u8>,
    /// Frames of temporal layers it was not sent.
    pub frames_dropped: u64,
}

impl Shard {
    /// The ICE state of a peer, if it exists.
    pub fn ice_state(&self, id: PeerId) -> Option<IceState> {
        let entity = *self.world.resource::<PeerIndex>().by_id.get(&id)?;
        self.world.get::<Ice>(entity).map(|ice| ice.state)
    }

    /// The peer's address on its nominated path, if it has one.
    pub fn selected_remote(&self, id: PeerId) -> Option<SocketAddr> {
        let entity = *self.world.resource::<PeerIndex>().by_id.get(&id)?;
        self.world.get::<Ice>(entity)?.selected.map(|p| p.remote)
    }

    /// The peer that has validated `path`, if any.
    pub fn path_owner(&self, path: FiveTuple) -> Option<PeerId> {
        let entity = *self.world.resource::<PeerIndex>().by_path.get(&path)?;
        self.world.get::<Peer>(entity).map(|p| p.id)
    }

    /// Whether the peer's DTLS handshake has completed and authenticated it.
    pub fn dtls_connected(&self, id: PeerId) -> bool {
        let Some(&entity) = self.world.resource::<PeerIndex>().by_id.get(&id) else {
            return false;
        };
        self.world
            .get::<DtlsSession>(entity)
            .and_then(|s| s.conn.as_deref())
            .is_some_and(|c| c.is_connected())
    }

    /// The SRTP keys the peer's DTLS exported, once connected.
    pub fn srtp_keys(&self, id: PeerId) -> Option<SrtpKeys> {
        let entity = *self.world.resource::<PeerIndex>().by_id.get(&id)?;
        self.world.get::<DtlsSession>(entity)?.srtp.clone()
    }

    /// The cipher suite the peer's DTLS negotiated, once connected.
    pub fn dtls_cipher_suite(&self, id: PeerId) -> Option<CipherSuite> {
        let entity = *self.world.resource::<PeerIndex>().by_id.get(&id)?;
        self.world.get::<DtlsSession>(entity)?.suite
    }

    /// The peer's transport-wide congestion control state: what shoal estimates of
    /// the path to it, and the feedback each way.
    ///
    /// A peer without media has only the data-channel part (the rest zero).
    pub fn congestion(&self, id: PeerId) -> Option<CongestionReport> {
        let entity = *self.world.resource::<PeerIndex>().by_id.get(&id)?;
        let mut report = match self.world.get::<TransportWide>(entity) {
            Some(tw) => {
                let est = tw.send.estimator.as_deref();
                CongestionReport {
                    estimate_bps: est.map(|e| e.bps()),
                    incoming_bps: est.and_then(|e| e.incoming_bps()),
                    rtt_ms: est.map(|e| e.rtt_ms()),
                    decreases: est.map_or(0, |e| e.decreases),
                    stamped: tw.send.history.stamped(),
                    feedback_received: tw.send.feedback_received,
                    feedback_sent: tw.receive.sent,
                    layers: self.layer_reports(entity),
                    probe_clusters: tw.send.prober.clusters,
                    last_probe_bps: tw.send.prober.last_result_bps,
                    earned_burst_bytes: est.and_then(|e| e.earned_burst(self.now())),
                    ..CongestionReport::default()
                }
            }
            None => CongestionReport::default(),
        };
        if let Some(pacer) = self.world.get::<Pacer>(entity) {
            report.pacer_burst_bytes = pacer.burst_bytes;
        }
        report.data_queued = self
            .world
            .get::<Sctp>(entity)
            .map_or(0, Sctp::buffered_amount);
        if let Some(dc) = self.world.get::<DataChannels>(entity) {
            report.relay_dropped = dc.relay_dropped;
            report.relay_holds = dc.relay_holds;
            report.relay_held = dc.relay_held;
        }
        Some(report)
    }

    /// Starts `id`'s send-side estimate at `bps` (libwebrtc's start bitrate): from a
    /// previous session's, or a link known in advance. Feedback moves it from there;
    /// its pacer paces at it at once. The peer needs media state first (a track or a
    /// subscription); `UnknownPeer` otherwise.
    pub fn seed_estimate(&mut self, id: PeerId, bps: u64) -> Result<(), CommandError> {
        let entity = self.peer_entity(id)?;
        let Some(mut tw) = self.world.get_mut::<TransportWide>(entity) else {
            return Err(CommandError::UnknownPeer(id));
        };
        tw.send.estimator = Some(Box::new(Estimator::new(bps as f64)));
        Ok(())
    }

    fn layer_reports(&self, peer: Entity) -> Vec<LayerReport> {
        let Some(media) = self.world.get::<PeerMedia>(peer) else {
            return Vec::new();
        };
        media
            .subscriptions
            .iter()
            .filter_map(|&(track, e)| {
                let sub = self.world.get::<Subscription>(e)?;
                let t = &sub.temporal;
                let layered = |tid: u8| (tid != ALL_LAYERS).then_some(tid);
                let temporal = t.dropping() || t.target != ALL_LAYERS || t.frames_dropped > 0;
                let choice = match sub.layers {
                    Some(choice) => choice,
                    // A single stream with temporal layers.
                    None if temporal => LayerChoice {
                        current: Some(0),
                        ..LayerChoice::default()
                    },
                    None => return None,
                };
                let rid = choice
                    .current
                    .and(self.world.get::<Track>(sub.track))
                    .and_then(|t| t.layering.as_ref()?.rid.clone());
                Some(LayerReport {
                    track,
                    current: choice.current,
                    target: choice.target,
                    rid,
                    switches: choice.switches,
                    temporal_current: layered(t.current),
                    temporal_target: layered(t.target),
                    frames_dropped: t.frames_dropped,
                })
            })
            .collect()
    }

    /// How many peers the shard holds.
    pub fn peer_count(&self) -> usize {
        self.world.resource::<PeerIndex>().by_id.len()
    }

    /// Ends the peer's DTLS connection with close_notify (RFC 5246 §7.2.1: either
    /// side may close this way) and removes the peer with everything it had, as
    /// [`Command::RemovePeer`](super::Command::RemovePeer) does. The alert is ready
    /// at the next [`Shard::poll_transmit`]; a peer without a DTLS connection is
    /// just removed.
    pub fn close_peer(&mut self, id: PeerId) -> Result<(), CommandError> {
        let entity = self.peer_entity(id)?;
        self.close_entity(entity, RemoveReason::Command);
        Ok(())
    }

    /// Starts draining the shard (the node is shutting down): every peer's SCTP
    /// association gets the SHUTDOWN primitive (RFC 9260 §9.2: what is queued and in
    /// flight is delivered first, then SHUTDOWN, SHUTDOWN ACK, SHUTDOWN COMPLETE),
    /// and once it has ended the peer is closed with close_notify
    /// ([`Shard::close_peer`]) and removed ([`RemoveReason::Drained`]). A peer
    /// without an association, or whose association is not up, is closed at once.
    /// An association that does not finish its shutdown ends as the RFC says (T2
    /// expiring Association.Max.Retrans times; T3-rtx likewise); the owner bounds the
    /// whole drain by its own deadline. From now on the shard takes no new peer
    /// ([`CommandError::Draining`]). Calling it again changes nothing.
    pub fn drain(&mut self) {
        if self.draining.is_some() {
            return;
        }
        let now = self.world.resource::<Now>().0;
        let entities: Vec<Entity> = self
            .world
            .resource::<PeerIndex>()
            .by_id
            .values()
            .copied()
            .collect();
        let mut closing = Vec::new();
        for entity in entities {
            let shutting_down = self
                .world
                .get_mut::<Sctp>(entity)
                .is_some_and(|mut a| a.shutdown());
            if shutting_down {
                // The sctp pass sends the SHUTDOWN (or the last data first) in the
                // next tick, which `poll_timeout` asks for at once.
                self.wake_sctp(entity, now);
                closing.push(entity);
            } else {
                self.close_entity(entity, RemoveReason::Drained);
            }
        }
        self.draining = Some(closing);
    }

    /// Whether [`Shard::drain`] was called.
    pub fn is_draining(&self) -> bool {
        self.draining.is_some()
    }

    /// Closes the draining peers whose associations have ended (after the tick
    /// that ended them, so their last SCTP packet goes before the close_notify). An
    /// association the peer restarted meanwhile (RFC 9260 §5.2.4 A: a new one,
    /// established) gets the SHUTDOWN primitive again.
    pub(super) fn close_drained(&mut self) {
        let Some(mut list) = self.draining.take() else {
            return;
        };
        let now = self.world.resource::<Now>().0;
        for &entity in &list {
            let restarted = self
                .world
                .get_mut::<Sctp>(entity)
                .is_some_and(|mut a| a.state == AssocState::Established && a.shutdown());
            if restarted {
                self.wake_sctp(entity, now);
            }
        }
        let world = &self.world;
        let (done, waiting): (Vec<Entity>, Vec<Entity>) = list
            .drain(..)
            .filter(|&e| world.get_entity(e).is_ok())
            .partition(|&e| world.get::<Sctp>(e).is_none_or(|a| a.ended.is_some()));
        for entity in done {
            self.close_entity(entity, RemoveReason::Drained);
        }
        self.draining = Some(waiting);
    }

    /// Lets the peer go: its session ended on the client's side (it left). As
    /// [`Shard::close_peer`], the peer is closed with close_notify and is gone at
    /// once for the owner ([`RemoveReason::Left`] at the end of the next tick, which
    /// comes at once); but a room member whose receive buffer still holds messages
    /// stays, receiving nothing, until the relay has taken them: what SCTP
    /// acknowledged to it reaches its room (`RelayClosing`).
    pub fn let_go(&mut self, id: PeerId) -> Result<(), CommandError> {
        let entity = self.peer_entity(id)?;
        self.retire_entity(entity, RemoveReason::Left);
        Ok(())
    }

    /// Ends the peer's connection with close_notify, as [`Shard::close_entity`]
    /// does, but retires it (`RelayClosing`) instead of despawning it: what SCTP
    /// acknowledged to it still reaches its room. It is reported removed for
    /// `reason` at the end of the next tick, which comes at once.
    pub(crate) fn retire_entity(&mut self, entity: Entity, reason: RemoveReason) {
        peer::retire_now(&mut self.world, entity, reason);
        // (Nothing is armed for an entity `retire_now` removed: it has no timers.)
        let now = self.world.resource::<Now>().0;
        self.arm(entity, TimerKind::RelayClosing, now);
        self.collect_events();
    }

    /// Peers retired this tick or before (`RelayClosing`: they left, or their
    /// consent expired, or they were cut off as slow receivers). At the end of the
    /// tick they left in, each is reported removed (`ShardEvent::PeerRemoved`, for
    /// the reason it left); one in no room, or whose receive buffer has no message
    /// left, or a node-to-node link that did not leave cleanly, is despawned then. A room member with messages still there
    /// stays while the relay takes them under its usual back-pressure (a receiver
    /// that holds it back past the hold limit is cut off as for any sender), and is
    /// despawned once they are gone. Its buffer must shrink within twice the hold
    /// limit, again and again; one whose buffer has not is despawned with what is
    /// left, and its room's reliable channels on this shard are closed
    /// (`close_reliable_channels`), and so are those on the room's other shards of
    /// the node, behind what this shard forwarded them before (a
    /// `relay::Forwarded::gap` record), and on the other nodes it spans, behind what
    /// went out on the links (`expire_closing`): a member learns that its channel may have
    /// missed messages. At most one receive window, and what its association still
    /// had queued for it (one send buffer at most), per closing member.
    pub(super) fn sweep_closing(&mut self) {
        if self.world.resource::<RelayClosing>().0.is_empty() {
            return;
        }
        let now = self.world.resource::<Now>().0;
        let patience = self.world.resource::<RelayLimits>().hold_limit * 2;
        let list = std::mem::take(&mut self.world.resource_mut::<RelayClosing>().0);
        let mut keep = Vec::with_capacity(list.len());
        for mut m in list {
            let entity = m.entity;
            let Some(id) = self.world.get::<Peer>(entity).map(|p| p.id) else {
                continue;
            };
            if m.deadline.is_none() {
                self.world
                    .resource_mut::<Events>()
                    .0
                    .push(ShardEvent::PeerRemoved {
                        peer: id,
                        reason: m.reason,
                    });
            }
            // A node-to-node link whose connection failed (its consent expired)
            // or that was cut off as a slow receiver lost messages in flight both
            // ways, and the node closes the room's reliable channels for it
            // (docs/cluster.md, "A link that fails"): what it holds would reach
            // members after that close, on new channels, with the loss before it
            // unseen. It goes with what it holds, which the close covers.
            let clean = matches!(m.reason, RemoveReason::DtlsClosed | RemoveReason::Left);
            let room = self
                .world
                .get::<RoomMember>(entity)
                .filter(|r| !r.link || clean)
                .map(|r| r.room);
            let buffered = self
                .world
                .get::<Sctp>(entity)
                .filter(|a| a.peek_message().is_some())
                .and_then(|a| a.rx.as_ref())
                .map(|rx| rx.reassembly().buffered_bytes());
            let (Some(room), Some(buffered)) = (room, buffered) else {
                self.world.despawn(entity);
                continue;
            };
            match m.deadline {
                None => self.world.resource_mut::<ShardStats>().relay_closing_kept += 1,
                // It went on: a new deadline from now.
                Some(_) if buffered < m.buffered => {}
                Some(deadline) if now < deadline => {
                    self.arm_closing(entity, deadline, now);
                    keep.push(m);
                    continue;
                }
                Some(_) => {
                    self.world
                        .resource_mut::<ShardStats>()
                        .relay_closing_expired += 1;
                    self.expire_closing(entity, room);
                    continue;
                }
            }
            let deadline = now + patience;
            (m.deadline, m.buffered) = (Some(deadline), buffered);
            self.arm_closing(entity, deadline, now);
            keep.push(m);
        }
        self.world.resource_mut::<RelayClosing>().0.extend(keep);
    }

    /// Lets a closing member go with what its buffer still holds, and tells
    /// everyone of `room` who missed it: the room's reliable channels close on this
    /// shard at once; on the room's other shards of the node behind what this one
    /// forwarded them before (a `relay::Forwarded::gap` for each label it sent reliable
    /// messages on); and at the other end of each of the room's node-to-node links,
    /// here and on those shards, behind what went out on the link's channel of each
    /// such label (a gap marker, `LINK_GAP_PPID`).
    fn expire_closing(&mut self, entity: Entity, room: RoomId) {
        // A link's messages were the other node's: they go to members only, so its
        // gap goes to no link either (one hop).
        let link = self.world.get::<RoomMember>(entity).is_some_and(|m| m.link);
        let mut labels: Vec<(Arc<str>, Arc<str>, u16)> = self
            .world
            .get::<DataChannels>(entity)
            .map(|dc| {
                dc.channels
                    .values()
                    .filter(|ch| ch.kind.reliability == Reliability::Reliable)
                    .map(|ch| (ch.label.clone(), ch.protocol.clone(), ch.priority))
                    .collect()
            })
            .unwrap_or_default();
        labels.sort_unstable();
        labels.dedup_by(|a, b| a.0 == b.0);
        self.world.despawn(entity);
        self.close_reliable_channels(room);
        for (label, protocol, priority) in &labels {
            let channel = ChannelParams {
                label,
                protocol,
                kind: ChannelType::default(),
                priority: *priority,
            };
            self.pass_gap_on(room, Some(channel), link);
        }
    }

    /// Keeps a closing member's timer armed: it wakes an idle shard at the
    /// deadline. Armed anew only once the last one has fired (a deadline that moved
    /// on is found by the sweep, which runs every tick), so a member whose buffer
    /// shrinks tick after tick leaves one heap entry, not one per tick.
    fn arm_closing(&mut self, entity: Entity, deadline: Time, now: Time) {
        let armed = self
            .world
            .get::<Timers>(entity)
            .and_then(|t| t.get(TimerKind::RelayClosing));
        if armed.is_none_or(|at| at <= now) {
            self.arm(entity, TimerKind::RelayClosing, deadline);
        }
    }

    /// Arms the entity's timer of `kind` for `at`.
    fn arm(&mut self, entity: Entity, kind: TimerKind, at: Time) {
        let Some(mut timers) = self.world.get::<Timers>(entity).copied() else {
            return;
        };
        self.world
            .resource_mut::<TimerHeap>()
            .arm(&mut timers, entity, kind, at);
        if let Some(mut t) = self.world.get_mut::<Timers>(entity) {
            *t = timers;
        }
    }

    /// [`Shard::close_peer`] for an entity, removed for `reason`. RFC 7675 §5.2 and
    /// RFC 9725 (a server ending a session revokes consent at once, e.g. by an
    /// authenticated closing alert): the peer learns it is gone now, not when its
    /// consent checks go unanswered.
    pub(crate) fn close_entity(&mut self, entity: Entity, reason: RemoveReason) {
        peer::close_now(&mut self.world, entity, reason);
        self.collect_events();
    }

    /// How many peers, rooms, tracks, subscriptions, associations and channels the
    /// shard holds, and its peers' bandwidth estimates. O(entities): for reports, not
    /// for the packet path.
    pub fn census(&self) -> Census {
        fn count<C: Component>(world: &World) -> usize {
            world
                .try_query::<&C>()
                .map_or(0, |mut q| q.iter(world).count())
        }
        let world = &self.world;
        let data_channels = world
            .try_query::<&DataChannels>()
            .map_or(0, |mut q| q.iter(world).map(|dc| dc.channels.len()).sum());
        let estimates_bps = world
            .try_query::<&TransportWide>()
            .map_or_else(Vec::new, |mut q| {
                q.iter(world)
                    .filter_map(|tw| tw.send.estimate_bps())
                    .collect()
            });
        Census {
            peers: self.peer_count(),
            rooms: self.room_count(),
            tracks: count::<Track>(world),
            subscriptions: count::<Subscription>(world),
            associations: count::<Sctp>(world),
            data_channels,
            estimates_bps,
        }
    }

    /// How many entities the shard's World holds: one per peer (with all of its
    /// components), plus the ones bevy keeps for the shard's resources, so compare
    /// it with a baseline. O(entities): for tests and reports.
    pub fn entity_count(&self) -> usize {
        self.world.entity_count() as usize
    }
}
