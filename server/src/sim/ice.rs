//! Setting up an ICE pair across the simulated network: fresh credentials from the
//! simulation's generator, an ICE-lite peer on the server shard and a controlling
//! peer on the client shard. The specs are built as for real endpoints
//! ([`crate::endpoint::pair_specs`]), drawing from the simulation's generator.

use std::net::SocketAddr;

use shoal_components::dtls::DtlsRole;
use shoal_components::peer::PeerId;
use shoal_components::room::RoomId;
use shoal_systems::{Command, CommandError, PeerDtls, PeerSpec};

use super::Sim;

/// The two peers [`Sim::connect_ice`] registered, as signalling would have set them up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IcePair {
    /// The ICE-lite peer on the server shard.
    pub server: PeerSpec,
    /// The controlling peer on the client shard, whose only candidate is the server.
    pub client: PeerSpec,
}

impl Sim {
    /// Registers peer `id` on both shards with fresh random credentials: an ICE-lite
    /// peer on `server` and a controlling peer on `client` whose remote candidate is
    /// `server`. The client starts checking at the next step.
    ///
    /// If the client shard refuses its peer, the server's is removed again (the server
    /// then reports a `PeerRemoved` event) and the client's error is returned.
    ///
    /// # Panics
    /// If no node has `server` or `client`.
    pub fn connect_ice(
        &mut self,
        server: SocketAddr,
        client: SocketAddr,
        id: PeerId,
    ) -> Result<IcePair, CommandError> {
        self.connect(server, client, id, None, None)
    }

    /// Like [`Sim::connect_ice`], and DTLS on top: the server shard's peer plays
    /// `server_role` in the handshake and the client's the other role, each expecting
    /// the other shard's certificate fingerprint, as an SDP exchange would set up.
    /// The handshake starts once ICE nominates a path.
    ///
    /// # Panics
    /// If no node has `server` or `client`.
    pub fn connect_dtls(
        &mut self,
        server: SocketAddr,
        client: SocketAddr,
        id: PeerId,
        server_role: DtlsRole,
    ) -> Result<IcePair, CommandError> {
        self.connect(server, client, id, Some(server_role), None)
    }

    /// Like [`Sim::connect_dtls`], with the server shard's peer a member of `room`:
    /// its data-channel messages are relayed to the room's other members.
    ///
    /// # Panics
    /// If no node has `server` or `client`.
    pub fn connect_dtls_in_room(
        &mut self,
        server: SocketAddr,
        client: SocketAddr,
        id: PeerId,
        server_role: DtlsRole,
        room: RoomId,
    ) -> Result<IcePair, CommandError> {
        self.connect(server, client, id, Some(server_role), Some(room))
    }

    /// Links two shards of different nodes for `room`, as two nodes cascading a room
    /// do: peer `id` on both, each a link of the room (`PeerSpec::link`), ICE-lite and
    /// DTLS server on `lite`, controlling and DTLS client on `controlling`, SRTP
    /// required. What one node's members send reaches the other node's members over
    /// it; tracks cross it as the caller subscribes and publishes them on the peers.
    ///
    /// # Panics
    /// If no node has `lite` or `controlling`.
    pub fn connect_link(
        &mut self,
        lite: SocketAddr,
        controlling: SocketAddr,
        id: PeerId,
        room: RoomId,
    ) -> Result<IcePair, CommandError> {
        let dtls = |role, remote_fingerprint| PeerDtls {
            role,
            remote_fingerprint,
            max_message_size: None,
            srtp_required: true,
        };
        let dtls = (
            dtls(DtlsRole::Server, self.shard(controlling).fingerprint()),
            dtls(DtlsRole::Client, self.shard(lite).fingerprint()),
        );
        let rng = self.rng();
        let (lite_spec, controlling_spec) =
            crate::endpoint::specs_from(id, lite, Some(dtls), &mut || rng.next_u64());
        let as_link = |spec: PeerSpec| PeerSpec {
            room: Some(room),
            link: true,
            ..spec
        };
        let pair = IcePair {
            server: as_link(lite_spec),
            client: as_link(controlling_spec),
        };
        self.command(lite, Command::AddPeer(pair.server.clone()))?;
        if let Err(e) = self.command(controlling, Command::AddPeer(pair.client.clone())) {
            let _ = self.command(lite, Command::RemovePeer(id));
            return Err(e);
        }
        Ok(pair)
    }

    fn connect(
        &mut self,
        server: SocketAddr,
        client: SocketAddr,
        id: PeerId,
        server_role: Option<DtlsRole>,
        room: Option<RoomId>,
    ) -> Result<IcePair, CommandError> {
        let dtls = server_role.map(|role| {
            let client_role = match role {
                DtlsRole::Server => DtlsRole::Client,
                DtlsRole::Client => DtlsRole::Server,
            };
            let server_fp = self.shard(server).fingerprint();
            let client_fp = self.shard(client).fingerprint();
            (
                PeerDtls {
                    role,
                    remote_fingerprint: client_fp,
                    max_message_size: None,
                    srtp_required: false,
                },
                PeerDtls {
                    role: client_role,
                    remote_fingerprint: server_fp,
                    max_message_size: None,
                    srtp_required: false,
                },
            )
        });
        let rng = self.rng();
        let (server_spec, client_spec) =
            crate::endpoint::specs_from(id, server, dtls, &mut || rng.next_u64());
        let pair = IcePair {
            server: PeerSpec {
                room,
                may_send_data: true,
                link: false,
                ..server_spec
            },
            client: client_spec,
        };
        self.command(server, Command::AddPeer(pair.server.clone()))?;
        if let Err(e) = self.command(client, Command::AddPeer(pair.client.clone())) {
            // Best effort: the server peer was just added, so removing it succeeds.
            let _ = self.command(server, Command::RemovePeer(id));
            return Err(e);
        }
        Ok(pair)
    }
}
