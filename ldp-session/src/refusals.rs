//! Attack signals: a limit that starts refusing says so once, then at most once a period while it goes on (with the
//! count since its last line), and once more when it has been quiet for a while. A flood of refusals leaves a few
//! lines, never one per message, and never silence.
//!
//! ```
//! use std::time::{Duration, Instant};
//! use ldp_session::{RefusalLine, RefusalLog};
//!
//! let log = RefusalLog::new("the session table");
//! let start = Instant::now();
//! let at = |s| start + Duration::from_secs(s);
//! assert_eq!(log.refusal(at(0)), Some(RefusalLine::Started));
//! assert_eq!(log.refusal(at(1)), None); // counted, not logged
//! assert_eq!(log.refusal(at(11)), Some(RefusalLine::Continuing { refused: 2, total: 3 }));
//! assert_eq!(log.quiet(at(15)), None); // refused 4 s ago: still refusing
//! assert_eq!(log.quiet(at(21)), Some(RefusalLine::Stopped { total: 3, lasted: Duration::from_secs(11) }));
//! ```

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// At most one "still refusing" line per this period.
pub const REFUSAL_LINE_EVERY: Duration = Duration::from_secs(10);
/// A limit that refused nothing for this long has stopped refusing.
pub const REFUSAL_QUIET_AFTER: Duration = Duration::from_secs(10);

/// The log of one limit's refusals (a table's bound, a per-source share, a rate). Cheap when the limit refuses
/// nothing: [`RefusalLog::quiet`] then costs one atomic load.
#[derive(Debug)]
pub struct RefusalLog {
    limit: &'static str,
    every: Duration,
    quiet_after: Duration,
    /// Whether a run of refusals is going on: the check [`RefusalLog::quiet`] makes without the lock.
    refusing: AtomicBool,
    run: Mutex<Run>,
}

/// The current run of refusals.
#[derive(Debug, Default)]
struct Run {
    /// When it began, and when its last refusal and its last line came.
    since: Option<(Instant, Instant, Instant)>,
    /// Refusals in the run.
    total: u64,
    /// Refusals since its last line.
    unlogged: u64,
}

/// A line a [`RefusalLog`] decided to log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RefusalLine {
    /// The limit refused after a quiet time.
    Started,
    /// It goes on refusing: `refused` since the last line, `total` since it started.
    Continuing {
        /// Refusals since the last line.
        refused: u64,
        /// Refusals since the run started.
        total: u64,
    },
    /// It refused nothing for a while: the run is over.
    Stopped {
        /// Refusals of the run.
        total: u64,
        /// From its first refusal to its last.
        lasted: Duration,
    },
}

impl RefusalLog {
    /// The log of `limit`'s refusals (it names the limit in every line: "the session table", "the replay window"),
    /// with [`REFUSAL_LINE_EVERY`] and [`REFUSAL_QUIET_AFTER`].
    pub fn new(limit: &'static str) -> Self {
        Self::with_periods(limit, REFUSAL_LINE_EVERY, REFUSAL_QUIET_AFTER)
    }

    /// [`RefusalLog::new`] with other periods.
    pub fn with_periods(limit: &'static str, every: Duration, quiet_after: Duration) -> Self {
        Self { limit, every, quiet_after, refusing: AtomicBool::new(false), run: Mutex::new(Run::default()) }
    }

    /// The limit this log is of.
    pub fn limit(&self) -> &'static str {
        self.limit
    }

    /// Counts a refusal at `now`: the line to log, if one is due.
    pub fn refusal(&self, now: Instant) -> Option<RefusalLine> {
        let mut run = self.run.lock().unwrap_or_else(PoisonError::into_inner);
        self.refusing.store(true, Ordering::Relaxed);
        run.total = run.total.saturating_add(1);
        let Some((since, _, last_line)) = run.since else {
            run.since = Some((now, now, now));
            return Some(RefusalLine::Started);
        };
        if now.saturating_duration_since(last_line) < self.every {
            run.unlogged = run.unlogged.saturating_add(1);
            run.since = Some((since, now, last_line));
            return None;
        }
        let refused = std::mem::take(&mut run.unlogged).saturating_add(1);
        run.since = Some((since, now, now));
        Some(RefusalLine::Continuing { refused, total: run.total })
    }

    /// Whether the run of refusals ended by `now` (none for [`REFUSAL_QUIET_AFTER`]): the line that says so.
    pub fn quiet(&self, now: Instant) -> Option<RefusalLine> {
        if !self.refusing.load(Ordering::Relaxed) {
            return None;
        }
        let mut run = self.run.lock().unwrap_or_else(PoisonError::into_inner);
        let (since, last, _) = run.since?;
        if now.saturating_duration_since(last) < self.quiet_after {
            return None;
        }
        self.refusing.store(false, Ordering::Relaxed);
        let total = run.total;
        *run = Run::default();
        Some(RefusalLine::Stopped { total, lasted: last.saturating_duration_since(since) })
    }

    /// When the current run of refusals ends if no refusal comes before (`None`: no run), for a driver's timer.
    pub fn quiet_deadline(&self) -> Option<Instant> {
        if !self.refusing.load(Ordering::Relaxed) {
            return None;
        }
        let run = self.run.lock().unwrap_or_else(PoisonError::into_inner);
        run.since.map(|(_, last, _)| last + self.quiet_after)
    }

    /// Counts a refusal at `now` and logs it, if due, as a warning.
    pub fn refused(&self, now: Instant) {
        if let Some(line) = self.refusal(now) {
            self.log(line);
        }
    }

    /// Logs the end of a run of refusals, if it ended by `now`.
    pub fn tick(&self, now: Instant) {
        if let Some(line) = self.quiet(now) {
            self.log(line);
        }
    }

    /// Writes `line` (all at warning level: wherever the refusals are seen, so is their end).
    pub fn log(&self, line: RefusalLine) {
        let limit = self.limit;
        match line {
            RefusalLine::Started => tracing::warn!(
                limit,
                "{limit} started refusing requests (logged again at most every {:?} while it goes on)",
                self.every
            ),
            RefusalLine::Continuing { refused, total } => {
                tracing::warn!(limit, refused, total, "{limit} is still refusing: {refused} since the last line")
            }
            RefusalLine::Stopped { total, lasted } => {
                let lasted_ms = u64::try_from(lasted.as_millis()).unwrap_or(u64::MAX);
                tracing::warn!(limit, total, lasted_ms, "{limit} stopped refusing after {total} refusals")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_of_refusals_leaves_a_line_per_period_and_one_at_its_end() {
        let log = RefusalLog::new("t");
        let start = Instant::now();
        let mut lines = Vec::new();
        // 100 refusals a second for 35 s.
        for ms in (0..35_000).step_by(10) {
            lines.extend(log.refusal(start + Duration::from_millis(ms)));
            lines.extend(log.quiet(start + Duration::from_millis(ms)));
        }
        let end = start + Duration::from_millis(34_990);
        lines.extend(log.quiet(end + REFUSAL_QUIET_AFTER));
        assert_eq!(lines.len(), 5, "{lines:?}");
        assert_eq!(lines[0], RefusalLine::Started);
        assert_eq!(lines[1], RefusalLine::Continuing { refused: 1000, total: 1001 });
        assert_eq!(lines[4], RefusalLine::Stopped { total: 3500, lasted: Duration::from_millis(34_990) });
        // A later refusal starts a new run.
        assert_eq!(log.refusal(end + 2 * REFUSAL_QUIET_AFTER), Some(RefusalLine::Started));
    }

    #[test]
    fn quiet_without_refusals_says_nothing() {
        let log = RefusalLog::new("t");
        assert_eq!(log.quiet(Instant::now() + Duration::from_secs(3600)), None);
    }
}
