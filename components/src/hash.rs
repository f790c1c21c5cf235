//! The hash map of the per-packet paths.

/// foldhash rather than SipHash: lookups by path, ufrag and TSN happen for every
/// datagram or chunk. Seeded at random per process, so a peer cannot aim collisions
/// at it.
pub type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
