//! A byte-rate budget for inbound WebSocket messages, shared by every connection of one principal (its bearer token
//! or certificate, else its address).
//!
//! Why: the per-connection budgets bound what a peer holds, not how fast it makes the server work. Eight
//! connections that each submit 16 tasks of 256 kB and drop, again and again, pushed about 550 MB/s of task input
//! through the server, and on two cores every other client's latency rose 32x. Messages are charged after they are
//! read; a principal in debt beyond its burst has its connections' sockets left unread until the debt drains, so
//! the peer meets TCP backpressure and the server does the work of `rate` bytes per second for it, no more.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

/// Principals tracked at once; beyond it, principals whose debt has drained are forgotten, and if none has, new
/// principals share one bucket (so the table stays bounded while a flood of new addresses stays throttled).
const MAX_PRINCIPALS: usize = 10_000;
/// The key shared by principals that found the table full.
const OVERFLOW_KEY: &str = "\u{0}overflow";

/// Per-principal byte debt that drains at `rate` bytes per second.
pub(crate) struct InboundBudget {
    rate: u64,
    burst: u64,
    debts: Mutex<HashMap<Box<str>, Debt>>,
    /// The attack signal: a line when principals start being held back, a few while it goes on, one when it stops.
    throttled: ldp_session::RefusalLog,
}

#[derive(Clone, Copy)]
struct Debt {
    bytes: f64,
    at: Instant,
}

impl Debt {
    /// The debt left at `now`.
    fn drained(self, rate: u64, now: Instant) -> f64 {
        let paid = now.saturating_duration_since(self.at).as_secs_f64() * rate as f64;
        (self.bytes - paid).max(0.0)
    }
}

impl InboundBudget {
    /// `rate` bytes per second (0: no budget); debt up to `burst` bytes costs no wait.
    pub(crate) fn new(rate: u64, burst: u64) -> Self {
        Self {
            rate,
            burst: burst.max(1),
            debts: Mutex::new(HashMap::new()),
            throttled: ldp_session::RefusalLog::new("the WebSocket inbound rate"),
        }
    }

    fn debts(&self) -> MutexGuard<'_, HashMap<Box<str>, Debt>> {
        self.debts.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Charges `bytes` to `principal` and returns how long its connections should leave their sockets unread
    /// (zero while within the burst).
    pub(crate) fn charge(&self, principal: &str, bytes: usize) -> Duration {
        if self.rate == 0 {
            return Duration::ZERO;
        }
        let now = Instant::now();
        let mut debts = self.debts();
        if !debts.contains_key(principal) && debts.len() >= MAX_PRINCIPALS {
            let rate = self.rate;
            debts.retain(|_, d| d.drained(rate, now) > 0.0);
        }
        let key = if debts.contains_key(principal) || debts.len() < MAX_PRINCIPALS { principal } else { OVERFLOW_KEY };
        let debt = debts.entry(Box::from(key)).or_insert(Debt { bytes: 0.0, at: now });
        let owed = debt.drained(self.rate, now) + bytes as f64;
        *debt = Debt { bytes: owed, at: now };
        drop(debts);
        let over = owed - self.burst as f64;
        if over <= 0.0 {
            self.throttled.tick(now.into_std());
            Duration::ZERO
        } else {
            self.throttled.refused(now.into_std());
            Duration::from_secs_f64(over / self.rate as f64)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn debt_beyond_the_burst_costs_time_and_drains_at_the_rate() {
        let budget = InboundBudget::new(1000, 2000);
        assert_eq!(budget.charge("a", 1500), Duration::ZERO);
        // 3,000 owed, 1,000 over the burst: one second at 1,000 bytes/s.
        assert_eq!(budget.charge("a", 1500), Duration::from_secs(1));
        // Another principal has its own budget.
        assert_eq!(budget.charge("b", 2000), Duration::ZERO);
        tokio::time::advance(Duration::from_secs(3)).await;
        assert_eq!(budget.charge("a", 2000), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn the_table_stays_bounded_and_newcomers_beyond_it_share_a_bucket() {
        let budget = InboundBudget::new(1, 10);
        for i in 0..MAX_PRINCIPALS + 50 {
            budget.charge(&format!("p{i}"), 5);
        }
        assert!(budget.debts().len() <= MAX_PRINCIPALS + 1);
        // The newcomers beyond the table share the overflow bucket: together they are over its burst.
        assert!(budget.charge("late", 5) > Duration::ZERO);
    }
}
