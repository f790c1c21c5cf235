//! ICE restarts (RFC 8445 §9): a participant whose network changed, or whose path
//! failed, starts a new ICE session with new credentials of its own; shoal answers
//! with new credentials of its own (RFC 8839 §4.4.2.1) and keeps the DTLS
//! association, SRTP keys and SCTP association (RFC 8445 §9: a restart changes the
//! candidates, not the session on top). Two ways in:
//! - an offer over `/signal` or `SignalService` whose ice-ufrag and ice-pwd both
//!   differ from the session's (RFC 8839 §4.4.1.1.1), answered as any renegotiation;
//! - a WHIP/WHEP `PATCH` with an `application/trickle-ice-sdpfrag` carrying new
//!   credentials (RFC 9725 §4.3, RFC 8840), answered with shoal's new ones.
//!
//! One restart of a session at a time, its precondition (a PATCH's If-Match)
//! checked where it is claimed, so the records and the shard agree on the current
//! credentials; an offer over `/signal` is answered on a copy of the negotiation
//! before the shard is told, so an offer refused for another reason changes
//! nothing.
//!
//! The shard is told first: until the participant nominates a pair with the new
//! credentials, checks with the old ones are still answered and keep the old path's
//! consent (RFC 7675), so media flows on; a restart that never completes leaves the
//! old session as it was (RFC 9725 §4.3: a failed restart keeps the existing ICE
//! session).

use std::sync::Arc;

use shoal_components::peer::{IceCredentials, PeerId};
use shoal_components::sdp::{Negotiation, NegotiationError, SessionDescription};
use tonic::Status;

use super::grpc::ControlState;
use super::participants::{PWD_CHARS, UFRAG_CHARS, negotiation_error};
use super::shards::{self, SHARD_REPLY_TIMEOUT, ShardError};
use shoal_systems::CommandError;

/// What a restart must match before it starts: the session's current entity-tag,
/// for a WHIP/WHEP PATCH whose If-Match names one (RFC 9725 §4.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precondition<'a> {
    /// Nothing (`/signal`, or `If-Match: "*"`).
    None,
    /// One of these entity-tags is the current one.
    Etag(&'a str),
}

impl ControlState {
    /// The participant's new credentials if `offer` restarts ICE for `peer`'s
    /// session and would be answered, else `None`. The offer is answered on a copy
    /// of the negotiation first, so an offer that fails for another reason (a new
    /// fingerprint, a removed section) is refused before the shard is told.
    pub fn check_restart_offer(
        &self,
        peer: PeerId,
        offer: &SessionDescription,
    ) -> Result<Option<(String, String)>, Status> {
        let rooms = self.rooms();
        let members = self.members();
        let Some(media) = members.by_peer.get(&peer).and_then(|m| m.media.as_ref()) else {
            return Ok(None);
        };
        if !media.negotiation.restarts_ice(offer) {
            return Ok(None);
        }
        let Some((ufrag, pwd)) = Negotiation::offered_ice_credentials(offer) else {
            return Ok(None);
        };
        let tracks = Self::tracks_for(&rooms, &members, peer);
        let mut trial = media.negotiation.clone();
        let mut params = media.local.params(self.fingerprint_sha256());
        // Any valid credentials: the trial answer is thrown away.
        params.ice_ufrag = "trialrun";
        params.ice_pwd = "trialruntrialruntrialrun";
        trial
            .answer(offer, &params, &tracks, &mut || 1)
            .map_err(|e| negotiation_error(&e))?;
        Ok(Some((ufrag.to_owned(), pwd.to_owned())))
    }

    /// Restarts `peer`'s ICE with the participant's new `ufrag` and `pwd`, if
    /// `precondition` holds: makes shoal's new credentials, tells the peer's shard,
    /// then records both. One restart of a session at a time (another gets
    /// ABORTED); the precondition is checked and the restart claimed under one
    /// lock, so two PATCHes naming the same entity-tag cannot both pass. Returns
    /// shoal's new ufrag and password. On an error nothing has changed, unless the
    /// shard took the credentials and the participant left meanwhile.
    pub async fn restart_ice(
        self: &Arc<Self>,
        peer: PeerId,
        ufrag: &str,
        pwd: &str,
        precondition: Precondition<'_>,
    ) -> Result<(String, String), Status> {
        let local_ufrag = self.random_ice_chars(UFRAG_CHARS)?;
        let local_pwd = self.random_ice_chars(PWD_CHARS)?;
        let shard = {
            let mut members = self.members();
            let member = members
                .by_peer
                .get_mut(&peer)
                .ok_or_else(|| Status::not_found("no such participant"))?;
            let shard = member.shard;
            let media = member
                .media
                .as_mut()
                .ok_or_else(|| Status::failed_precondition("no session to restart"))?;
            if let Precondition::Etag(tags) = precondition {
                let current = format!("\"{}\"", media.local.ufrag);
                if !tags.split(',').any(|t| t.trim() == current) {
                    return Err(Status::failed_precondition(
                        "If-Match names another ICE session than the current one",
                    ));
                }
            }
            if media.restarting {
                return Err(Status::aborted(
                    "an ICE restart of this session is under way",
                ));
            }
            let t = media
                .negotiation
                .transport()
                .ok_or_else(|| Status::failed_precondition("no session to restart"))?;
            if ufrag == t.ufrag || pwd == t.pwd {
                return Err(negotiation_error(&NegotiationError::PartialIceRestart));
            }
            media.restarting = true;
            shard
        };
        let credentials = IceCredentials {
            local_ufrag: local_ufrag.clone(),
            local_pwd: local_pwd.clone(),
            remote_ufrag: ufrag.to_owned(),
            remote_pwd: pwd.to_owned(),
        };
        let state = self.clone();
        let told = tokio::task::spawn_blocking(move || {
            shards::restart_ice(
                state.shards(),
                shard,
                peer,
                credentials,
                SHARD_REPLY_TIMEOUT,
            )
        })
        .await
        .map_err(|_| ShardError::Gone(shard))
        .and_then(|r| r);
        let mut members = self.members();
        let media = members
            .by_peer
            .get_mut(&peer)
            .and_then(|m| m.media.as_mut())
            .ok_or_else(|| Status::not_found("the participant has left"))?;
        media.restarting = false;
        told.map_err(|e| match e {
            ShardError::Refused {
                source: CommandError::InvalidCredential(why),
                ..
            } => Status::invalid_argument(format!("bad ICE credentials: {why}")),
            ShardError::Refused {
                source: CommandError::UnknownPeer(_),
                ..
            } => Status::not_found("the participant has left"),
            e => Status::unavailable(e.to_string()),
        })?;
        media
            .negotiation
            .restart_remote_ice(ufrag, pwd)
            .map_err(|e| negotiation_error(&e))?;
        media.local.ufrag = local_ufrag.clone();
        media.local.pwd = local_pwd.clone();
        Ok((local_ufrag, local_pwd))
    }

    /// The participant's current ICE ufrag and password.
    pub fn remote_ice(&self, peer: PeerId) -> Option<(String, String)> {
        let members = self.members();
        let t = members
            .by_peer
            .get(&peer)?
            .media
            .as_ref()?
            .negotiation
            .transport()?;
        Some((t.ufrag.clone(), t.pwd.clone()))
    }

    /// The entity-tag of `peer`'s current ICE session (RFC 9725 §4.3.1): shoal's
    /// ufrag, new with every restart.
    pub fn ice_etag(&self, peer: PeerId) -> Option<String> {
        let members = self.members();
        let media = members.by_peer.get(&peer)?.media.as_ref()?;
        Some(format!("\"{}\"", media.local.ufrag))
    }

    /// The `a=candidate` lines of `peer`'s shard (UDP, then passive TCP), as the
    /// answer carries them, for a PATCH's answer (RFC 9725 §4.3).
    pub fn candidate_lines(&self, peer: PeerId) -> Option<(String, Vec<String>)> {
        let members = self.members();
        let member = members.by_peer.get(&peer)?;
        let media = member.media.as_ref()?;
        let mid = media
            .negotiation
            .sections()
            .first()
            .and_then(|s| s.mid.clone())
            .unwrap_or_else(|| "0".to_owned());
        let params = media.local.params(self.fingerprint_sha256());
        Some((mid, params.candidate_lines()))
    }
}
