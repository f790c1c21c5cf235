//! shoal's public API, package `shoal.v1`: types generated at build time from the
//! `.proto` files under `proto/`.

/// Package `shoal.v1`.
#[allow(missing_docs, clippy::all)]
pub mod v1 {
    include!(concat!(env!("OUT_DIR"), "/shoal.v1.rs"));
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::v1::{NodeInfo, ShardInfo};

    #[test]
    fn node_info_round_trips() {
        let info = NodeInfo {
            version: "0.1.0".into(),
            shards: vec![ShardInfo {
                index: 0,
                udp_addr: "127.0.0.1:7100".into(),
                peers: 3,
            }],
        };
        let bytes = info.encode_to_vec();
        assert_eq!(NodeInfo::decode(bytes.as_slice()).ok(), Some(info));
    }
}
