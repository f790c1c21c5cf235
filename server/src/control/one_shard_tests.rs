//! The control plane over one real shard with room "r" open, for tests that drive
//! signalling's state directly (no sockets of their own).

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use super::auth::Permissions;
use super::grpc::ControlState;
use super::participants::{Admission, SignalLink};
use super::rooms::{RoomDirectory, RoomLimits, RoomSpec};
use crate::config::Config;
use crate::driver::Server;

const LIMITS: RoomLimits = RoomLimits {
    max_rooms: 10,
    max_participants_per_room: 10,
    default_empty_timeout: Duration::from_secs(300),
};

/// One shard, the control state over it, and a runtime to drive it on.
pub(super) struct OneShard {
    /// Kept: dropping it stops the shard.
    pub(super) _server: Server,
    pub(super) state: Arc<ControlState>,
    pub(super) runtime: tokio::runtime::Runtime,
}

/// A node of one shard on an ephemeral port, with room "r" open.
pub(super) fn one_shard() -> OneShard {
    let config = Config {
        shards: NonZeroUsize::new(1).expect("non-zero"),
        udp_port_base: 0,
        ..Config::default()
    };
    let mut server = Server::start(&config).expect("a shard");
    let shards = server.control_handles();
    let state = Arc::new(
        ControlState::new(RoomDirectory::new(LIMITS), shards.senders, 100).with_transport(
            shards.candidates,
            shards.tcp_candidates,
            shards.fingerprint_sha256,
        ),
    );
    let now = state.clock().now();
    state
        .rooms()
        .create(
            RoomSpec {
                name: "r".into(),
                ..RoomSpec::default()
            },
            now,
        )
        .expect("room");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    OneShard {
        _server: server,
        state,
        runtime,
    }
}

/// A participant of room "r" with every permission, `signal` its signalling.
pub(super) fn admission(identity: &str, signal: Option<SignalLink>) -> Admission {
    Admission {
        room: "r".into(),
        identity: identity.into(),
        name: String::new(),
        metadata: String::new(),
        http_session: None,
        signal,
        permissions: Permissions::ALL,
        from: None,
        auto_subscribe: true,
    }
}
