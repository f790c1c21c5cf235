//! shoal's public API, package `shoal.v1`: messages, tonic clients and tonic server
//! traits generated at build time from the `.proto` files under `proto/`, and the
//! encoded descriptor set for gRPC server reflection.
//!
//! Services: `RoomService` (rooms and participants), `NodeService` (the node's shards
//! and load) and `SignalService` (a full participant's signalling stream).
//!
//! Every message also derives serde's `Serialize` and `Deserialize` in the JSON shape
//! that shoal's `/signal` WebSocket speaks: lowerCamelCase fields, absent fields at
//! their defaults, enums as numbers. A WebSocket message is the `message` oneof itself
//! (`signal_request::Message`, `signal_response::Message`), externally tagged:
//! `{"join": {"room": "lobby"}}`.

/// Package `shoal.v1`.
#[allow(missing_docs, clippy::all)]
pub mod v1 {
    include!(concat!(env!("OUT_DIR"), "/shoal.v1.rs"));

    /// The encoded `FileDescriptorSet` of every `shoal.v1` file (with comments), for
    /// `tonic_reflection::server::Builder::register_encoded_file_descriptor_set`.
    pub const FILE_DESCRIPTOR_SET: &[u8] =
        include_bytes!(concat!(env!("OUT_DIR"), "/shoal_v1_descriptor.bin"));
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::v1::{NodeInfo, ShardInfo, SignalRequest, signal_request};

    #[test]
    fn node_info_round_trips() {
        let info = NodeInfo {
            version: "0.1.0".into(),
            shards: vec![ShardInfo {
                index: 0,
                udp_addr: "127.0.0.1:7100".into(),
                peers: 3,
                max_peers: 10,
                load: 0.3,
                ..ShardInfo::default()
            }],
            rooms: 2,
            ..NodeInfo::default()
        };
        let bytes = info.encode_to_vec();
        assert_eq!(NodeInfo::decode(bytes.as_slice()).ok(), Some(info));
    }

    #[test]
    fn signal_messages_round_trip() {
        let join = SignalRequest {
            message: Some(signal_request::Message::Join(super::v1::JoinRequest {
                room: "lobby".into(),
                identity: "alice".into(),
                auto_subscribe: Some(false),
                ..Default::default()
            })),
        };
        let bytes = join.encode_to_vec();
        assert_eq!(SignalRequest::decode(bytes.as_slice()).ok(), Some(join));
    }

    #[test]
    fn signal_messages_speak_camel_case_json() {
        let text = r#"{"join": {"room": "lobby", "identity": "alice", "autoSubscribe": true}}"#;
        let join: signal_request::Message = serde_json::from_str(text).unwrap();
        let signal_request::Message::Join(j) = &join else {
            panic!("{join:?}");
        };
        assert_eq!((j.room.as_str(), j.identity.as_str()), ("lobby", "alice"));
        assert_eq!(j.auto_subscribe, Some(true));
        // Absent is not false: the server takes it as true.
        let bare = r#"{"join": {"room": "lobby"}}"#;
        let Ok(signal_request::Message::Join(j)) = serde_json::from_str(bare) else {
            panic!("{bare}");
        };
        assert_eq!(j.auto_subscribe, None);
        let trickle = r#"{"trickle": {"candidate": "", "sdpMid": "0", "sdpMLineIndex": 0}}"#;
        let t: signal_request::Message = serde_json::from_str(trickle).unwrap();
        assert!(matches!(t, signal_request::Message::Trickle(_)));
        assert!(serde_json::from_str::<signal_request::Message>(r#"{"bogus": {}}"#).is_err());
        let answer = super::v1::signal_response::Message::Answer(super::v1::SessionDescription {
            sdp: "v=0".into(),
            id: 7,
        });
        assert_eq!(
            serde_json::to_string(&answer).unwrap(),
            r#"{"answer":{"sdp":"v=0","id":7}}"#
        );
        // An answer without an id (older clients) reads as id 0.
        let bare = r#"{"answer": {"sdp": "v=0"}}"#;
        let Ok(signal_request::Message::Answer(a)) = serde_json::from_str(bare) else {
            panic!("{bare}");
        };
        assert_eq!(a.id, 0);
        // An id out of range is an error, not a wrapped number.
        let negative = r#"{"answer": {"sdp": "v=0", "id": -1}}"#;
        assert!(serde_json::from_str::<signal_request::Message>(negative).is_err());
    }

    #[test]
    fn descriptor_set_names_every_service() {
        let set = prost_types::FileDescriptorSet::decode(super::v1::FILE_DESCRIPTOR_SET)
            .expect("a valid descriptor set");
        let services: Vec<String> = set
            .file
            .iter()
            .filter(|f| f.package() == "shoal.v1")
            .flat_map(|f| f.service.iter().map(|s| s.name().to_owned()))
            .collect();
        for name in ["NodeService", "RoomService", "SignalService"] {
            assert!(services.iter().any(|s| s == name), "{name} in {services:?}");
        }
    }
}
