//! Maps keyed by what peers choose: session, task and message ids.
//!
//! A peer that could predict where its keys land could make them collide and turn every lookup into a scan. These
//! maps hash with aHash under keys drawn at random once per process (its `runtime-rng` feature), which its authors
//! design against exactly that, at a fraction of SipHash's cost per key (measured on the server's path: about 2,900
//! fewer instructions per task, BENCHMARKS.md). The keys live in one static, so that the hasher takes no room in
//! each map: a million idle sessions each hold one.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::OnceLock;

/// The hasher of [`PeerMap`]: aHash under this process's random keys.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct PeerKeyed;

impl BuildHasher for PeerKeyed {
    type Hasher = ahash::AHasher;

    fn build_hasher(&self) -> Self::Hasher {
        static KEYS: OnceLock<ahash::RandomState> = OnceLock::new();
        KEYS.get_or_init(ahash::RandomState::new).build_hasher()
    }
}

/// A map keyed by peer-chosen values. Build it with `PeerMap::default()`.
pub(crate) type PeerMap<K, V> = HashMap<K, V, PeerKeyed>;

#[cfg(test)]
mod tests {
    use super::*;

    /// The keys are drawn once: equal keys hash alike in every map, so maps of one process agree.
    #[test]
    fn one_process_hashes_alike_and_unpredictably() {
        let (a, b) = (PeerKeyed, PeerKeyed);
        assert_eq!(a.hash_one("session-1"), b.hash_one("session-1"));
        assert_ne!(a.hash_one("session-1"), a.hash_one("session-2"));
        // Not the hash of fixed keys: a process's keys are its own.
        assert_ne!(a.hash_one("session-1"), ahash::RandomState::with_seeds(0, 0, 0, 0).hash_one("session-1"));
        // And no room in the map for them.
        assert!(std::mem::size_of::<PeerMap<String, u8>>() < std::mem::size_of::<HashMap<String, u8>>());
    }
}
