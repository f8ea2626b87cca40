//! The one backoff rule of the workspace's clients: exponential, capped, with "equal jitter" (half of each wait
//! fixed, half random), so that many clients failing together do not retry in lockstep. The transports' retry
//! policy (`RetryPolicy::backoff`: HTTP retries and WebSocket reconnects) waits by it.
//!
//! Sans-IO: the random part comes from the caller, so the rule is deterministic and testable.

use std::time::Duration;

/// Exponential backoff with equal jitter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Backoff {
    /// The ceiling of the first wait; it doubles on each further attempt.
    pub initial: Duration,
    /// The upper bound of any wait.
    pub max: Duration,
}

impl Backoff {
    /// Waits starting at `initial`, doubling, capped at `max`.
    pub fn new(initial: Duration, max: Duration) -> Self {
        Self { initial, max }
    }

    /// The longest wait before attempt `attempt` (0-based): `initial` times 2^`attempt`, at most `max`.
    pub fn ceiling(&self, attempt: u32) -> Duration {
        self.initial.saturating_mul(2u32.saturating_pow(attempt.min(31))).min(self.max)
    }

    /// The wait before attempt `attempt` (0-based): half the [`Backoff::ceiling`] fixed, plus `random` (uniform over
    /// all `u64` values, from the caller's random source) scaled onto the other half, both ends included.
    pub fn delay(&self, attempt: u32, random: u64) -> Duration {
        let half = self.ceiling(attempt) / 2;
        let span = half.as_nanos().min(u128::from(u64::MAX)) + 1;
        // Multiply-shift maps the u64 onto 0..span without the bias of a remainder.
        let jitter = (u128::from(random) * span) >> 64;
        half + Duration::from_nanos(u64::try_from(jitter).unwrap_or(u64::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_double_up_to_the_cap_and_jitter_over_the_upper_half() {
        let b = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
        let ceilings: Vec<u128> = (0..6).map(|a| b.ceiling(a).as_millis()).collect();
        assert_eq!(ceilings, [100, 200, 400, 800, 1000, 1000]);
        assert_eq!(b.ceiling(u32::MAX), Duration::from_secs(1));
        for attempt in [0, 1, 3, 10, u32::MAX] {
            let ceiling = b.ceiling(attempt);
            // No randomness: the fixed half; all of it: the whole ceiling (to the nanosecond).
            assert_eq!(b.delay(attempt, 0), ceiling / 2);
            assert!(ceiling - b.delay(attempt, u64::MAX) <= Duration::from_nanos(1), "{attempt}");
            let mid = b.delay(attempt, 1 << 63);
            let three_quarters = ceiling / 4 * 3;
            assert!(mid.abs_diff(three_quarters) <= Duration::from_nanos(1), "{attempt}: {mid:?}");
            let mut last = Duration::ZERO;
            for r in [0, 1 << 20, 1 << 40, 1 << 60, u64::MAX] {
                let d = b.delay(attempt, r);
                assert!(d >= last && d <= ceiling);
                last = d;
            }
        }
    }

    #[test]
    fn a_zero_wait_stays_zero() {
        let b = Backoff::new(Duration::ZERO, Duration::from_secs(1));
        assert_eq!(b.delay(5, u64::MAX), Duration::ZERO);
    }
}
