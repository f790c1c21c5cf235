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
//! The shard is told first: until the participant nominates a pair with the new
//! credentials, checks with the old ones are still answered and keep the old path's
//! consent (RFC 7675), so media flows on; a restart that never completes leaves the
//! old session as it was (RFC 9725 §4.3: a failed restart keeps the existing ICE
//! session).

use std::sync::Arc;

use shoal_components::peer::{IceCredentials, PeerId};
use shoal_components::sdp::SessionDescription;
use tonic::Status;

use super::grpc::ControlState;
use super::participants::{PWD_CHARS, UFRAG_CHARS, negotiation_error};
use super::shards::{self, SHARD_REPLY_TIMEOUT, ShardError};
use shoal_systems::CommandError;

impl ControlState {
    /// The participant's new credentials if `offer` restarts ICE for `peer`'s
    /// session, else `None`.
    pub fn offer_restarts_ice(
        &self,
        peer: PeerId,
        offer: &SessionDescription,
    ) -> Option<(String, String)> {
        let members = self.members();
        let media = members.by_peer.get(&peer)?.media.as_ref()?;
        if !media.negotiation.restarts_ice(offer) {
            return None;
        }
        offer
            .media
            .iter()
            .find_map(|m| offer.ice_credentials_for(m))
            .map(|(u, p)| (u.to_owned(), p.to_owned()))
    }

    /// Restarts `peer`'s ICE with the participant's new `ufrag` and `pwd`: makes
    /// shoal's new credentials, tells the peer's shard, then records both. Returns
    /// shoal's new ufrag and password. On an error nothing has changed.
    pub async fn restart_ice(
        self: &Arc<Self>,
        peer: PeerId,
        ufrag: &str,
        pwd: &str,
    ) -> Result<(String, String), Status> {
        let local_ufrag = self.random_ice_chars(UFRAG_CHARS)?;
        let local_pwd = self.random_ice_chars(PWD_CHARS)?;
        let shard = {
            let members = self.members();
            let member = members
                .by_peer
                .get(&peer)
                .ok_or_else(|| Status::not_found("no such participant"))?;
            let media = member
                .media
                .as_ref()
                .ok_or_else(|| Status::failed_precondition("no session to restart"))?;
            let t = media
                .negotiation
                .transport()
                .ok_or_else(|| Status::failed_precondition("no session to restart"))?;
            if ufrag == t.ufrag || pwd == t.pwd {
                return Err(negotiation_error(
                    &shoal_components::sdp::NegotiationError::PartialIceRestart,
                ));
            }
            member.shard
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
        .map_err(|_| Status::unavailable("the shard did not answer"))?;
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
        let mut members = self.members();
        let media = members
            .by_peer
            .get_mut(&peer)
            .and_then(|m| m.media.as_mut())
            .ok_or_else(|| Status::not_found("the participant has left"))?;
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
}
