//! The hash map of the per-packet paths.

/// foldhash rather than SipHash: lookups by path, ufrag and TSN happen for every
/// datagram or chunk. Its random seed makes it "minimally DoS-resistant" (its
/// authors' words), no more: a peer that studied a long-running process could in
/// principle learn enough to aim collisions. What it holds keeps that out of reach
/// of strangers: ufrags and transaction ids are shoal's own, a path is indexed only
/// after a check authenticated it, and TSNs and stream ids come from inside DTLS.
pub type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
