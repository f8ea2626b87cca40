//! Injected sources of nondeterminism: wall-clock time and ids.
//!
//! The machines never read a clock or an entropy source themselves. Monotonic time arrives as the `now: Instant`
//! argument of every `handle_*` method; wall-clock time (for envelope timestamps and the replay window) comes from a
//! [`WallClock`]; message ids, session ids and nonces come from an [`IdSource`]. Tests use [`ManualClock`] and a
//! seeded [`SeededIds`], so every run is identical.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha20Rng;
use time::OffsetDateTime;

/// Wall-clock time, for timestamps and replay windows.
pub trait WallClock: Send + Sync + std::fmt::Debug {
    /// The current UTC time.
    fn now_utc(&self) -> OffsetDateTime;
}

/// The system clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl WallClock for SystemClock {
    fn now_utc(&self) -> OffsetDateTime {
        OffsetDateTime::now_utc()
    }
}

/// A clock that only moves when told to; clones share the same time.
#[derive(Debug, Clone)]
pub struct ManualClock {
    unix_nanos: Arc<AtomicI64>,
}

impl ManualClock {
    /// A clock stopped at `start`.
    pub fn new(start: OffsetDateTime) -> Self {
        let nanos = i64::try_from(start.unix_timestamp_nanos()).unwrap_or(i64::MAX);
        Self { unix_nanos: Arc::new(AtomicI64::new(nanos)) }
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: std::time::Duration) {
        let nanos = i64::try_from(by.as_nanos()).unwrap_or(i64::MAX);
        self.unix_nanos.fetch_add(nanos, Ordering::SeqCst);
    }

    /// Sets the clock.
    pub fn set(&self, to: OffsetDateTime) {
        self.unix_nanos.store(i64::try_from(to.unix_timestamp_nanos()).unwrap_or(i64::MAX), Ordering::SeqCst);
    }
}

impl WallClock for ManualClock {
    fn now_utc(&self) -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp_nanos(i128::from(self.unix_nanos.load(Ordering::SeqCst)))
            .unwrap_or(OffsetDateTime::UNIX_EPOCH)
    }
}

/// Where ids and nonces come from.
pub trait IdSource: Send + std::fmt::Debug {
    /// A fresh UUID-formatted id (message ids, session ids, task ids).
    fn uuid(&mut self) -> String;
    /// A fresh 16-byte nonce, hex-encoded.
    fn nonce(&mut self) -> String;
}

/// A ChaCha20-based id source: seeded for tests, from OS entropy in production ([`SeededIds::from_entropy`]).
#[derive(Debug, Clone)]
pub struct SeededIds {
    rng: ChaCha20Rng,
}

impl SeededIds {
    /// A deterministic source.
    pub fn new(seed: u64) -> Self {
        Self { rng: ChaCha20Rng::seed_from_u64(seed) }
    }

    /// A source seeded from the operating system.
    pub fn from_entropy() -> Self {
        Self { rng: ChaCha20Rng::from_os_rng() }
    }
}

impl IdSource for SeededIds {
    fn uuid(&mut self) -> String {
        let mut b = [0u8; 16];
        self.rng.fill_bytes(&mut b);
        // Version 4, variant 10: random UUIDs as RFC 4122 lays them out.
        b[6] = (b[6] & 0x0f) | 0x40;
        b[8] = (b[8] & 0x3f) | 0x80;
        let mut id = String::with_capacity(36);
        for (i, range) in [0..4, 4..6, 6..8, 8..10, 10..16].into_iter().enumerate() {
            if i > 0 {
                id.push('-');
            }
            push_hex(&mut id, &b[range]);
        }
        id
    }

    fn nonce(&mut self) -> String {
        let mut b = [0u8; 16];
        self.rng.fill_bytes(&mut b);
        let mut nonce = String::with_capacity(32);
        push_hex(&mut nonce, &b);
        nonce
    }
}

/// Appends lowercase hex without an allocation per byte (ids are made on every outbound message).
fn push_hex(out: &mut String, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for b in bytes {
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 0x0f)]));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_ids_are_deterministic_and_uuid_shaped() {
        let (mut a, mut b) = (SeededIds::new(1), SeededIds::new(1));
        let id = a.uuid();
        assert_eq!(id, b.uuid());
        assert_eq!(id.len(), 36);
        assert_eq!(&id[14..15], "4");
        assert_ne!(a.uuid(), id);
        assert_eq!(a.nonce().len(), 32);
    }

    #[test]
    fn manual_clock_moves_only_when_told() {
        let c = ManualClock::new(OffsetDateTime::UNIX_EPOCH);
        assert_eq!(c.now_utc(), OffsetDateTime::UNIX_EPOCH);
        c.advance(std::time::Duration::from_secs(5));
        assert_eq!(c.now_utc().unix_timestamp(), 5);
    }
}
