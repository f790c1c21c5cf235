//! The per-tick work lists that carry a batch from one pass to the next, and the
//! events a shard reports.
//!
//! Each list has one consumer pass (a few have several producers: `SctpWork` gets
//! associations from the passes before `sack_batch` and from the shard's own
//! send calls) and is drained in the tick that filled it, so plain `Vec`s are used
//! rather than double-buffered `Messages`: the capacity is reused tick after tick
//! and nothing is allocated per packet once the shard is warm.

use std::net::SocketAddr;

use bevy_ecs::prelude::{Entity, Resource};
use bytes::{Bytes, BytesMut};

use crate::media::temporal::Shift;
use crate::media::{PayloadFormat, Track, TrackKind};
use crate::net::{Datagram, FiveTuple};
use crate::peer::PeerId;
use crate::rtp::ext::AbsCaptureTime;
use crate::rtp::payload::{Vp8Descriptor, h264_keyframe_start};
use crate::rtp::{RtpHeader, RtpPacket};
use crate::time::Time;
use crate::timer::TimerKind;

/// The current tick's time.
#[derive(Resource, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Now(pub Time);

/// Datagrams fed to the shard since the last tick (bounded by the shard's batch limit),
/// each with when it arrived: the kernel's receive time where the driver has one,
/// else the tick's. Only the transport-wide arrival log reads it; everything else
/// runs on the tick's time.
#[derive(Resource, Debug, Default)]
pub struct Inbox(pub Vec<(Datagram, Time)>);

/// STUN datagrams of this tick. The ice pass resolves their owner itself, at the
/// moment it handles each one, since earlier checks of the same batch may change it.
#[derive(Resource, Debug, Default)]
pub struct StunInbox(pub Vec<Datagram>);

/// DTLS datagrams of this tick; the dtls pass resolves their owner when it handles
/// them, after ICE may have validated their path in this very tick.
#[derive(Resource, Debug, Default)]
pub struct DtlsInbox(pub Vec<Datagram>);

/// Peers whose ICE nominated a path this tick: their DTLS may start.
#[derive(Resource, Debug, Default)]
pub struct DtlsStart(pub Vec<Entity>);

/// Decrypted DTLS application data (SCTP packets) of this tick, by peer.
#[derive(Resource, Debug, Default)]
pub struct SctpInbox(pub Vec<(Entity, bytes::Bytes)>);

/// Peers whose DTLS handshake completed this tick: their SCTP may start.
#[derive(Resource, Debug, Default)]
pub struct SctpStart(pub Vec<Entity>);

/// Associations that may have something to send this tick. The passes that fill it
/// may push one twice; `sack_batch` removes duplicates before `sctp_tx` reads it.
#[derive(Resource, Debug, Default)]
pub struct SctpWork(pub Vec<Entity>);

/// Timers that fell due this tick.
#[derive(Resource, Debug, Default)]
pub struct DueTimers(pub Vec<(Entity, TimerKind)>);

/// Packets the passes want sent this tick, before egress protection.
#[derive(Resource, Debug, Default)]
pub struct Outbox(pub Vec<Datagram>);

impl Outbox {
    /// Queues `payload` on `path`; without a path there is nowhere to send it.
    pub fn push_on(&mut self, path: Option<FiveTuple>, payload: Bytes) {
        if let Some(p) = path {
            self.0.push(Datagram {
                local: p.local,
                remote: p.remote,
                payload,
            });
        }
    }
}

/// SRTP/SRTCP datagrams of this tick, by peer (from `ingest`), with their arrival.
#[derive(Resource, Debug, Default)]
pub struct MediaInbox(pub Vec<(Entity, Datagram, Time)>);

/// Plaintext of this tick (from `srtp_in`).
#[derive(Resource, Debug, Default)]
pub struct MediaPlain {
    /// RTP packets, by peer, with their arrival.
    pub rtp: Vec<(Entity, Bytes, Time)>,
    /// RTCP compounds, by peer.
    pub rtcp: Vec<(Entity, Bytes)>,
}

/// Where a keyframe is now wanted (from `dtls`, the subscribe command and the relay
/// from a sibling): the media pass asks each track's publisher, throttled, through
/// one path whether the publisher is a peer here, on another shard, or the owner's
/// local source.
#[derive(Resource, Debug, Default)]
pub struct MediaStart {
    /// Peers whose SRTP keys arrived: each of their subscriptions' tracks.
    pub peers: Vec<Entity>,
    /// Tracks with a new receiver that can take a keyframe now (a subscription to an
    /// already connected peer, a keyframe request relayed from a mirror's shard).
    pub tracks: Vec<Entity>,
}

/// What `media` asks `egress` to send.
#[derive(Debug)]
pub enum Outgoing {
    /// A track's packet for one subscription: forwarded, or resent as RTX because the
    /// subscriber NACKed it.
    Rtp {
        /// The subscription.
        subscription: Entity,
        /// The packet, parsed once for every copy.
        packet: SharedRtp,
        /// A retransmission (RFC 4588 §4), else a forward.
        retransmission: bool,
        /// A packet of a probe cluster, paced by the cluster itself: it skips the
        /// subscriber's pacing queue.
        probe: bool,
    },
    /// A plaintext RTCP compound for a peer.
    Rtcp {
        /// The peer.
        peer: Entity,
        /// The compound.
        packet: Bytes,
    },
}

/// One packet of a track as every subscriber's copy is written from it: parsed once,
/// when it is queued, and shared (a reference count) by every copy.
#[derive(Clone, Debug)]
pub struct SharedRtp {
    /// The publisher's plaintext packet.
    pub packet: Bytes,
    /// Its header.
    pub header: RtpHeader,
    /// Its extended sequence number.
    pub seq: u64,
    /// Its audio level (RFC 6464: one byte), to carry over.
    pub audio_level: Option<u8>,
    /// Its abs-capture-time timestamp (NTP, 32.32), to carry over. The estimated
    /// capture clock offset is not: it is the capturer's clock against the
    /// publisher's, and a subscriber reads shoal's clock (its sender reports), not
    /// the publisher's.
    pub capture_time: Option<u64>,
    /// It is audio (paced ahead of video).
    pub audio: bool,
    /// For a simulcast stream: its index and whether it starts a keyframe.
    pub layer: Option<LayerPacket>,
    /// Its VP8 payload descriptor, for VP8: the picture numbers each subscriber's
    /// copy continues, and the temporal layer it belongs to.
    pub vp8: Option<Vp8Descriptor>,
    /// What this copy's sequence number and PictureID come down by: the packets and
    /// frames of temporal layers its subscriber is not sent
    /// ([`crate::media::temporal`]). Set per copy.
    pub shift: Shift,
}

/// What a simulcast stream's packet tells the switch between streams.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LayerPacket {
    /// The stream's index among its track's.
    pub index: u8,
    /// It starts a keyframe: a subscriber may switch to this stream here.
    pub keyframe: bool,
}

impl SharedRtp {
    /// `packet` of `track` (extended sequence number `seq`), or `None` if it is not
    /// RTP.
    pub fn of(track: &Track, packet: &Bytes, seq: u64) -> Option<SharedRtp> {
        let p = RtpPacket::parse(packet).ok()?;
        let audio_level = track
            .spec
            .extensions
            .audio_level
            .and_then(|id| match p.extension(id) {
                Some(&[level]) => Some(level),
                _ => None,
            });
        let capture_time = track
            .spec
            .extensions
            .abs_capture_time
            .and_then(|id| AbsCaptureTime::parse(p.extension(id)?))
            .map(|c| c.capture_ntp);
        let vp8 = match track.spec.format {
            PayloadFormat::Vp8 => Vp8Descriptor::parse(p.payload()),
            _ => None,
        };
        let layer = track.layering.as_ref().map(|l| {
            let keyframe = match track.spec.format {
                PayloadFormat::Vp8 => vp8.is_some_and(|d| d.keyframe_start),
                PayloadFormat::H264 => h264_keyframe_start(p.payload()),
                _ => false,
            };
            LayerPacket {
                index: l.index,
                keyframe,
            }
        });
        Some(SharedRtp {
            header: *p.header(),
            packet: packet.clone(),
            seq,
            audio_level,
            capture_time,
            audio: track.spec.kind == TrackKind::Audio,
            layer,
            vp8,
            shift: Shift::default(),
        })
    }
}

/// The media packets of this tick for `egress`.
#[derive(Resource, Debug, Default)]
pub struct MediaOut(pub Vec<Outgoing>);

/// Receivers the room relay found too slow for a reliable channel this tick: the
/// shard closes each (close_notify, then removal) once the passes are done.
#[derive(Resource, Debug, Default)]
pub struct SlowReceivers(pub Vec<Entity>);

/// Datagrams ready for the socket, drained by the driver.
#[derive(Resource, Debug, Default)]
pub struct Transmits(pub Vec<Datagram>);

/// A reusable buffer that passes write outgoing packets into; each packet is split off
/// as a frozen `Bytes`, so one allocation serves many packets.
#[derive(Resource, Debug, Default)]
pub struct WriteBuffer(pub BytesMut);

/// The address of the shard's own socket.
#[derive(Resource, Clone, Copy, Debug)]
pub struct LocalAddr(pub SocketAddr);

/// Why a peer was removed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RemoveReason {
    /// The caller asked for it.
    Command,
    /// No valid check refreshed consent in time (RFC 7675 §5.1).
    ConsentExpired,
    /// The controlling agent's checks all went unanswered.
    IceFailed,
    /// The DTLS handshake failed (bad certificate fingerprint, signature or Finished,
    /// a fatal alert from the peer, or the handshake timed out).
    DtlsFailed,
    /// The peer closed DTLS (close_notify).
    DtlsClosed,
    /// The peer does not read a reliable room channel as fast as the room sends: it
    /// held the room's senders back for the relay's hold limit
    /// (`RelayLimits::hold_limit`), or a reliable message did not fit its send
    /// buffer. Holding more for it would stall the room or grow memory without
    /// bound, and dropping a message would lose it silently.
    SlowReceiver,
    /// The shard drains (the node shuts down): the peer's SCTP association shut
    /// down (or it had none), and it was closed with close_notify.
    Drained,
    /// The owner let it go (`Command::LetGo`: its session ended on the client's
    /// side): closed with close_notify, what its receive buffer held still relayed
    /// to its room.
    Left,
}

/// Something the shard tells its owner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ShardEvent {
    /// ICE nominated a path for the peer.
    IceConnected {
        /// Which peer.
        peer: PeerId,
        /// The peer's address on the nominated path.
        remote: SocketAddr,
    },
    /// The DTLS handshake completed and the peer is authenticated.
    DtlsConnected {
        /// Which peer.
        peer: PeerId,
        /// The negotiated SRTP protection profile (RFC 5764 §4.1.2 number), if any.
        srtp_profile: Option<u16>,
    },
    /// The peer's SCTP association is established.
    SctpEstablished {
        /// Which peer.
        peer: PeerId,
    },
    /// A user message arrived on one of the peer's SCTP streams.
    SctpMessage {
        /// Which peer.
        peer: PeerId,
        /// The stream (a data channel's id).
        stream: u16,
        /// Its Payload Protocol Identifier (RFC 8831 §8).
        ppid: u32,
        /// The message.
        payload: bytes::Bytes,
    },
    /// A data channel is open: the peer opened it (DATA_CHANNEL_OPEN arrived) or
    /// acknowledged ours.
    ChannelOpen {
        /// Which peer.
        peer: PeerId,
        /// Its stream id.
        channel: u16,
        /// Its label.
        label: String,
        /// Its sub-protocol.
        protocol: String,
        /// Its ordering and reliability (RFC 8832 §5.1).
        kind: crate::sctp::dcep::ChannelType,
    },
    /// A user message arrived on a data channel.
    ChannelMessage {
        /// Which peer.
        peer: PeerId,
        /// Which channel.
        channel: u16,
        /// Binary (else a UTF-8 string).
        binary: bool,
        /// The message; empty for the "empty" PPIDs.
        payload: bytes::Bytes,
    },
    /// The bytes queued on a stream (a data channel) fell to its low watermark
    /// (set with `Shard::set_buffered_amount_low_threshold`).
    BufferedAmountLow {
        /// Which peer.
        peer: PeerId,
        /// Which stream or channel.
        stream: u16,
    },
    /// A data channel closed: both of its streams were reset (RFC 8831 §6.7). Its
    /// id may be used again.
    ChannelClosed {
        /// Which peer.
        peer: PeerId,
        /// Which channel.
        channel: u16,
    },
    /// The peer's SCTP association ended (after a restart, `SctpEstablished`
    /// follows for the new one).
    SctpClosed {
        /// Which peer.
        peer: PeerId,
        /// Why.
        reason: crate::sctp::assoc::AssocEnd,
    },
    /// An RTP packet arrived on a track the owner receives (`Command::Receive`),
    /// in arrival order, retransmissions included, duplicates not.
    RtpReceived {
        /// The peer it came from.
        peer: PeerId,
        /// The track.
        track: crate::media::TrackId,
        /// Its sequence number, extended past wraps.
        seq: u64,
        /// The plaintext packet.
        packet: bytes::Bytes,
    },
    /// A published audio track's level over the last
    /// [`AUDIO_LEVEL_INTERVAL`](crate::media::AUDIO_LEVEL_INTERVAL) (RFC 6464: the
    /// mean amplitude of what the publisher's packets said, in −dBov).
    AudioLevel {
        /// The publisher.
        peer: PeerId,
        /// The track.
        track: crate::media::TrackId,
        /// 0 (loudest) to 127 (silence), −dBov.
        level: u8,
        /// Whether most packets had the voice activity flag set.
        voice: bool,
    },
    /// A receiver asked for a keyframe of a local source (PLI or FIR).
    KeyframeRequested {
        /// The track.
        track: crate::media::TrackId,
    },
    /// The peer and every component it had are gone.
    PeerRemoved {
        /// Which peer.
        peer: PeerId,
        /// Why.
        reason: RemoveReason,
    },
}

/// Events waiting for the owner.
#[derive(Resource, Debug, Default)]
pub struct Events(pub Vec<ShardEvent>);
