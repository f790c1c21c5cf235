//! Counters a shard keeps of what it did and what it dropped.

use bevy_ecs::prelude::Resource;

/// Defines a struct of `u64` counters whose doc comments also describe them at run
/// time: `Self::each` hands every counter's name, its doc comment (the help an
/// exporter shows) and its value to a closure, in declaration order. The
/// node's `/metrics` reads shard and driver counters this way, so a counter added
/// here is exported with no second list to keep in step.
#[macro_export]
macro_rules! counters {
    (
        $(#[$attr:meta])*
        $vis:vis struct $name:ident {
            $( $(#[doc = $doc:literal])+ pub $field:ident: u64, )*
        }
    ) => {
        $(#[$attr])*
        $vis struct $name {
            $( $(#[doc = $doc])+ pub $field: u64, )*
        }

        impl $name {
            /// Every counter's name, description and value, in declaration order.
            pub fn each(&self, mut f: impl FnMut(&'static str, &'static str, u64)) {
                $( f(stringify!($field), concat!($($doc),+), self.$field); )*
            }
        }
    };
}

counters! {
/// Per-shard counters. Dropped input is counted here, never panicked on.
#[derive(Resource, Clone, Debug, Default, PartialEq, Eq)]
pub struct ShardStats {
    /// Datagrams fed to the shard.
    pub datagrams_in: u64,
    /// Datagrams the shard handed out for sending.
    pub datagrams_out: u64,
    /// Datagrams dropped because their first byte matched no protocol we speak (RFC 7983).
    pub dropped_unknown_class: u64,
    /// Datagrams dropped because the shard's per-tick input limit was reached.
    pub dropped_over_batch_limit: u64,
    /// STUN datagrams that failed to parse.
    pub stun_malformed: u64,
    /// STUN datagrams whose FINGERPRINT did not match.
    pub stun_bad_fingerprint: u64,
    /// STUN requests naming a ufrag no peer of this shard has.
    pub stun_unknown_ufrag: u64,
    /// STUN requests whose MESSAGE-INTEGRITY did not verify.
    pub stun_bad_integrity: u64,
    /// STUN requests that lacked USERNAME, MESSAGE-INTEGRITY or FINGERPRINT.
    pub stun_missing_attributes: u64,
    /// Valid checks from a path another peer of this shard has validated.
    pub stun_path_conflict: u64,
    /// Valid checks that repeat a recent transaction id from another path, or after
    /// a transaction's lifetime: replays. Answered, but they neither refresh consent
    /// nor move the selected path (RFC 7675 §5.1 wants a new id per consent check; a
    /// replay from a spoofed source must not redirect media).
    pub stun_repeated_transaction: u64,
    /// Retransmitted checks (same id, same path, within a transaction's lifetime):
    /// answered again and refreshing consent, nothing more.
    pub stun_retransmitted_checks: u64,
    /// Valid checks that arrived after consent had already lapsed (RFC 7675 §5.1).
    pub stun_after_consent_expiry: u64,
    /// Responses carrying unknown comprehension-required attributes, taken as failures
    /// (RFC 8489 §6.3.3, §6.3.4).
    pub stun_response_unknown_attributes: u64,
    /// STUN requests answered with an error response.
    pub stun_error_responses: u64,
    /// STUN messages that were not for us (e.g. stray responses).
    pub stun_ignored: u64,
    /// Datagrams of a known class from an address no peer owns.
    pub dropped_unknown_source: u64,
    /// DTLS datagrams from a path no peer has validated.
    pub dtls_unknown_source: u64,
    /// DTLS datagrams for a peer that runs no DTLS, or whose DTLS has not started
    /// and cannot start from this datagram (shoal is its client).
    pub dtls_not_started: u64,
    /// Records the peers' DTLS connections dropped (bad tag, replayed, malformed…).
    pub dtls_records_dropped: u64,
    /// DTLS handshakes completed.
    pub dtls_connected: u64,
    /// DTLS handshakes that failed.
    pub dtls_failed: u64,
    /// Decrypted application data no pass consumed yet (SCTP is not running).
    pub dtls_app_data_unhandled: u64,
    /// SCTP packets dropped: malformed, bad checksum, wrong verification tag, or not
    /// valid in the association's state.
    pub sctp_packets_dropped: u64,
    /// SCTP packets handed to DTLS.
    pub sctp_packets_sent: u64,
    /// Associations established where both ends announced zero checksums over DTLS
    /// (RFC 9653), so packets go without CRC32c.
    pub sctp_zero_checksum_associations: u64,
    /// SCTP packets DTLS refused (not connected, or its queue full).
    pub sctp_packets_unsent: u64,
    /// Associations a peer restarted (RFC 9260 §5.2.4 A).
    pub sctp_restarts: u64,
    /// HEARTBEATs idle associations sent (RFC 9260 §8.3).
    pub sctp_heartbeats_sent: u64,
    /// HEARTBEAT ACKs that answered ours, in time or late.
    pub sctp_heartbeats_acked: u64,
    /// SACK chunks put into packets: at most one per association per tick.
    pub sctp_sacks_sent: u64,
    /// Of those, the SACKs that shared their packet with DATA (RFC 9260 §6.2).
    pub sctp_sacks_bundled_with_data: u64,
    /// FORWARD TSN chunks put into packets (RFC 3758 §3.5).
    pub sctp_forward_tsn_sent: u64,
    /// FORWARD TSNs not sent for repeating one sent less than a round trip before
    /// (RFC 3758 §3.5 implementation note).
    pub sctp_forward_tsn_held: u64,
    /// T3-rtx expiries with DATA outstanding (RFC 9260 §6.3.3): each resends from
    /// the earliest outstanding chunk with cwnd at one packet.
    pub sctp_t3_expiries: u64,
    /// DATA chunks sent again: after a T3-rtx expiry or as fast retransmissions
    /// (RFC 9260 §6.3.3, §7.2.4).
    pub sctp_retransmissions: u64,
    /// DCEP messages that failed to parse.
    pub dcep_malformed: u64,
    /// DATA_CHANNEL_OPENs refused: a stream of our parity, or one in use.
    pub dcep_refused: u64,
    /// Valid ICE connectivity checks answered.
    pub ice_checks_answered: u64,
    /// ICE restarts begun (`Command::RestartIce`: new credentials, RFC 8445 §9).
    pub ice_restarts: u64,
    /// ICE restarts the peer completed: it nominated a pair with the new credentials,
    /// and the old ones stopped being answered.
    pub ice_restarts_completed: u64,
    /// Peers removed because consent expired (RFC 7675).
    pub consent_expired: u64,
    /// Room messages queued for a receiver (one per receiver per message), relayed
    /// or sent by the owner (`SendData`).
    pub relay_messages: u64,
    /// Room messages on an unreliable channel dropped for a receiver whose queue was
    /// over `RelayLimits::high_watermark` (or whose send buffer refused them):
    /// dropped for that receiver only.
    pub relay_dropped: u64,
    /// Receivers disconnected as too slow for a reliable channel
    /// (`RemoveReason::SlowReceiver`): they held a sender back past
    /// `RelayLimits::hold_limit`, or their full send buffer refused a message.
    pub relay_slow_receivers: u64,
    /// Times a room member's messages were held back in its receive buffer for a
    /// receiver over the high watermark.
    pub relay_holds: u64,
    /// Room messages a receiver could not take for another reason: its channel with
    /// that label is closing, it has no free stream id, or the message is over its
    /// size limit.
    pub relay_undeliverable: u64,
    /// Reliable channels of room members closed because messages may have been lost
    /// on their way to them (`Shard::close_reliable_channels`: a node-to-node link
    /// of the room failed, or a member that left went with messages it still held,
    /// `relay_closing_expired`, on this shard, another of the node, or another
    /// node the room spans, which told it over a link).
    pub relay_gap_channels_closed: u64,
    /// Room members whose connection ended (they closed it, the owner let them go
    /// with `Command::LetGo`, their consent expired, or they were cut off as slow
    /// receivers) with messages still in their receive
    /// buffer, kept until those were relayed (`relay::RelayClosing`).
    pub relay_closing_kept: u64,
    /// Closing room members removed with messages still in their receive buffer,
    /// which had not shrunk for twice the relay's hold limit; their room's reliable
    /// channels on the shard were closed (`relay_gap_channels_closed`), and on the
    /// room's other shards of the node and other nodes once they had what came
    /// before (`relay::Forwarded::gap`, `relay::LINK_GAP_PPID`).
    pub relay_closing_expired: u64,
    /// Gap markers (`relay::LINK_GAP_PPID`) this shard queued on node-to-node links,
    /// one per link and label, to tell the nodes at their other ends of a gap
    /// (each also counts in `relay_messages`).
    pub relay_gap_markers_sent: u64,
    /// Gap markers that links brought this shard from other nodes: each closed the
    /// link's room's reliable channels (`relay_gap_channels_closed`).
    pub relay_gap_markers_taken: u64,
    /// Room messages a member sent that were put out for the room's other shards
    /// (one per message, whatever the number of those shards).
    pub relay_forwards_out: u64,
    /// Forwarded room messages lost on the way to another shard (one per message per
    /// shard it missed): unreliable ones over the per-tick limit or refused by a
    /// full queue, and any for a shard that is gone. A reliable message is never
    /// dropped for a full queue: it waits (`relay_forwards_requeued`).
    pub relay_forwards_dropped: u64,
    /// Reliable room messages a sibling shard's full queue refused, kept to go to it
    /// again, first, at the next try (one per message per refusal; a gap record,
    /// `relay::Forwarded::gap`, counts as one, here and in `relay_forwards_dropped`).
    pub relay_forwards_requeued: u64,
    /// Times a room member's next reliable message waited in its receive buffer for
    /// room among the messages forwarded to other shards (the tick's limit reached,
    /// or messages refused by a full queue waiting to go again).
    pub relay_forward_waits: u64,
    /// Data-channel messages dropped because their sender may not send (a
    /// participant without the canPublishData grant).
    pub data_messages_refused: u64,
    /// Room messages another shard forwarded here, delivered to this shard's
    /// members of the room.
    pub relay_forwards_in: u64,
    /// SRTP and SRTCP datagrams from validated paths.
    pub media_in: u64,
    /// DTLS connections whose exported SRTP keys could not key a context.
    pub srtp_key_setup_failed: u64,
    /// Media datagrams from a peer with no SRTP keys (no DTLS-SRTP profile, or the
    /// handshake not done): dropped.
    pub media_without_keys: u64,
    /// SRTP/SRTCP datagrams that did not authenticate, replays among them (RFC 3711
    /// §3.3): dropped.
    pub srtp_unprotect_failed: u64,
    /// Decrypted RTP or RTCP that did not parse: dropped.
    pub media_malformed: u64,
    /// RTP from an SSRC that matched no published track (by SSRC or mid): dropped.
    pub rtp_unknown_ssrc: u64,
    /// RTP packets received on published tracks.
    pub rtp_received: u64,
    /// Of those, the original (not retransmitted) packets of tracks that came over a
    /// node-to-node link: other nodes' participants' media entering this node.
    pub rtp_received_from_links: u64,
    /// RTP packets of muted tracks: neither forwarded nor kept for retransmission.
    pub rtp_muted: u64,
    /// RTP packets sent to subscribers (copies, retransmissions excluded).
    pub rtp_forwarded: u64,
    /// Packets resent to subscribers that NACKed them (RFC 4585 §6.2.1, RTX RFC 4588).
    pub rtp_retransmitted: u64,
    /// NACKed packets no longer in the track's cache, or with no RTX negotiated.
    pub nack_unanswered: u64,
    /// Keyframe requests (PLI) sent to publishers.
    pub keyframe_requests_sent: u64,
    /// NACKs sent to publishers for packets that did not arrive.
    pub nacks_sent: u64,
    /// NACK messages subscribers sent (RFC 4585 §6.2.1), each naming one or more
    /// lost packets.
    pub nacks_received: u64,
    /// Keyframe requests subscribers sent: PLI (RFC 4585 §6.3.1) and FIR entries
    /// (RFC 5104 §4.3.1).
    pub keyframe_requests_received: u64,
    /// RTCP packets (compounds) sent: reports and feedback.
    pub rtcp_sent: u64,
    /// Transport-wide congestion control feedback messages sent to publishers
    /// (draft-holmer-rmcat-transport-wide-cc-extensions-01 §3.1).
    pub transport_feedback_sent: u64,
    /// REMB messages sent to publishers without transport-wide feedback
    /// (draft-alvestrand-rmcat-remb-03).
    pub remb_sent: u64,
    /// Transport-wide congestion control feedback messages subscribers sent on what
    /// shoal stamped.
    pub transport_feedback_received: u64,
    /// Outgoing media that waited in a subscriber's pacing queue.
    pub rtp_paced: u64,
    /// Outgoing media a full pacing queue dropped.
    pub pacer_dropped: u64,
    /// Outgoing media dropped because protection failed (an SSRC limit, a repeated
    /// index).
    pub media_send_failed: u64,
    /// Outgoing media dropped because the receiver could not take it yet (its DTLS,
    /// and so its SRTP keys, or its ICE path still to come): what is forwarded between
    /// an answer and the connection coming up.
    pub media_receiver_not_ready: u64,
    /// Media relay items (mirrored tracks' packets, keyframe requests) a sibling
    /// shard's full queue refused.
    pub media_relay_dropped: u64,
    /// Packets of tracks published here put out for the sibling shards that mirror
    /// them (one per packet and sibling).
    pub media_relay_out: u64,
    /// Packets of mirrored tracks taken from their origin shard.
    pub media_relay_in: u64,
}
}
