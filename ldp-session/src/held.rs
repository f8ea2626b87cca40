//! Task answers kept for sessions whose connection is gone, bounded per session and in total, by count and by
//! bytes. What does not fit is dropped oldest first, and its task id is remembered (a tombstone) so that the
//! resuming client is told, task by task, which results were not kept: nothing is lost silently.
//!
//! The store is the responder's ([`Responder::take_held`](crate::Responder::take_held)): answers the machine
//! finished for a suspended session and answers a transport could not deliver
//! ([`Responder::hold`](crate::Responder::hold)) share one bound, whichever binding carries the session. It holds
//! encoded messages, so that its byte bound counts what a resume will write.

use crate::keyed::PeerMap;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Limits on the answers kept for resume.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeldLimits {
    /// Answers kept for one session (default 64).
    pub per_session_results: usize,
    /// Bytes of answers kept for one session (default 16 MiB).
    pub per_session_bytes: usize,
    /// Answers kept for all sessions together (default 4,096).
    pub total_results: usize,
    /// Bytes of answers kept for all sessions together (default 128 MiB).
    pub total_bytes: usize,
    /// Task ids of dropped answers remembered per session (default 1,024) and in total (default 65,536, 64 times
    /// that); beyond, the oldest are forgotten and counted in [`HeldStats::tombstones_lost`].
    pub per_session_tombstones: usize,
    /// How long an answer is kept (default 1 h, the RFC's default session TTL); older ones are dropped to
    /// tombstones, and tombstones older than this are forgotten. A session's answers also go when it ends.
    pub ttl: Duration,
}

impl Default for HeldLimits {
    fn default() -> Self {
        Self {
            per_session_results: 64,
            per_session_bytes: 16 * 1024 * 1024,
            total_results: 4096,
            total_bytes: 128 * 1024 * 1024,
            per_session_tombstones: 1024,
            ttl: Duration::from_secs(3600),
        }
    }
}

impl HeldLimits {
    fn total_tombstones(&self) -> usize {
        self.per_session_tombstones.saturating_mul(64)
    }
}

/// What the store holds now, and what it dropped since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HeldStats {
    /// Answers held.
    pub results: usize,
    /// Bytes of answers held.
    pub bytes: usize,
    /// Task ids of dropped answers waiting to be reported.
    pub tombstones: usize,
    /// Answers dropped (over a limit, or expired) since the responder started.
    pub dropped: u64,
    /// Tombstones forgotten because there were too many (their clients are not told).
    pub tombstones_lost: u64,
}

/// One answer handed out for a resumed session ([`Responder::take_held`](crate::Responder::take_held)): its task
/// and the encoded message, a TASK_RESULT or TASK_FAILED, or the TASK_FAILED `RESULT_NOT_KEPT` that replaces an
/// answer that was not kept. Each is handed out once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldAnswer {
    task_id: Box<str>,
    json: String,
}

impl HeldAnswer {
    pub(crate) fn new(task_id: Box<str>, json: String) -> Self {
        Self { task_id, json }
    }

    /// The task answered.
    pub fn task_id(&self) -> &str {
        &self.task_id
    }

    /// The message as JSON text, as it is written to the peer.
    pub fn json(&self) -> &str {
        &self.json
    }

    /// The message as JSON text, without a copy.
    pub fn into_json(self) -> String {
        self.json
    }

    /// The message decoded.
    pub fn envelope(&self) -> Result<ldp_types::Envelope, ldp_types::Error> {
        ldp_types::Envelope::from_slice(self.json.as_bytes())
    }
}

#[derive(Debug)]
struct Held {
    seq: u64,
    at: Instant,
    task_id: Box<str>,
    text: String,
}

#[derive(Debug, Default)]
struct SessionHeld {
    results: VecDeque<Held>,
    bytes: usize,
    tombstones: VecDeque<(Instant, Box<str>)>,
}

/// What a resuming session gets back from the store.
#[derive(Debug, Default)]
pub(crate) struct Taken {
    /// Task ids and their encoded answers, oldest first.
    pub results: Vec<(Box<str>, String)>,
    /// Task ids whose answers were dropped.
    pub dropped: Vec<Box<str>>,
}

/// The store. Sans-IO: every call that depends on time takes `now`.
#[derive(Debug, Default)]
pub(crate) struct HeldStore {
    sessions: PeerMap<Box<str>, SessionHeld>,
    /// Every kept answer in arrival order, as (sequence, session); entries of answers already taken are skipped.
    order: VecDeque<(u64, Box<str>)>,
    next_seq: u64,
    stats: HeldStats,
}

impl HeldStore {
    pub(crate) fn stats(&self) -> HeldStats {
        self.stats
    }

    /// Whether nothing is held (no answers, no tombstones).
    pub(crate) fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }

    /// Keeps `text`, the answer to `task_id`, for `session`; drops the oldest answers over the limits.
    pub(crate) fn push(&mut self, now: Instant, limits: &HeldLimits, session: &str, task_id: &str, text: String) {
        let entry = self.sessions.entry(session.into()).or_default();
        if text.len() > limits.per_session_bytes.min(limits.total_bytes)
            || limits.per_session_results == 0
            || limits.total_results == 0
        {
            self.stats.dropped += 1;
            Self::bury(&mut self.stats, limits, entry, now, task_id.into());
            self.enforce_total_tombstones(limits);
            return;
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        entry.bytes += text.len();
        self.stats.bytes += text.len();
        self.stats.results += 1;
        entry.results.push_back(Held { seq, at: now, task_id: task_id.into(), text });
        self.order.push_back((seq, session.into()));
        while entry.results.len() > limits.per_session_results || entry.bytes > limits.per_session_bytes {
            let Some(oldest) = entry.results.pop_front() else { break };
            Self::drop_result(&mut self.stats, limits, entry, now, oldest);
        }
        while self.stats.results > limits.total_results || self.stats.bytes > limits.total_bytes {
            let Some((seq, session)) = self.order.pop_front() else { break };
            let Some(entry) = self.sessions.get_mut(&session) else { continue };
            if entry.results.front().is_some_and(|h| h.seq == seq)
                && let Some(oldest) = entry.results.pop_front()
            {
                Self::drop_result(&mut self.stats, limits, entry, now, oldest);
            }
        }
        self.compact_order();
        self.enforce_total_tombstones(limits);
    }

    /// Everything kept for `session`, and the task ids of what was dropped; the session's entry is removed.
    pub(crate) fn take(&mut self, session: &str) -> Taken {
        let Some(entry) = self.sessions.remove(session) else { return Taken::default() };
        self.stats.results -= entry.results.len();
        self.stats.bytes -= entry.bytes;
        self.stats.tombstones -= entry.tombstones.len();
        Taken {
            results: entry.results.into_iter().map(|h| (h.task_id, h.text)).collect(),
            dropped: entry.tombstones.into_iter().map(|(_, id)| id).collect(),
        }
    }

    /// Records that the answer to `task_id` could not be kept at all (it could not be encoded): the resume reports it.
    pub(crate) fn bury_one(&mut self, now: Instant, limits: &HeldLimits, session: &str, task_id: &str) {
        let entry = self.sessions.entry(session.into()).or_default();
        self.stats.dropped += 1;
        Self::bury(&mut self.stats, limits, entry, now, task_id.into());
        self.enforce_total_tombstones(limits);
    }

    /// Forgets `session` entirely (it ended).
    pub(crate) fn forget(&mut self, session: &str) {
        drop(self.take(session));
    }

    /// Drops answers older than `ttl` (their tombstones stay, for a client that still resumes) and tombstones
    /// older than `ttl` (their session has outlived any resume).
    pub(crate) fn expire(&mut self, now: Instant, limits: &HeldLimits) {
        let ttl = limits.ttl;
        let mut stats = self.stats;
        self.sessions.retain(|_, entry| {
            while entry.results.front().is_some_and(|h| now.duration_since(h.at) >= ttl) {
                if let Some(old) = entry.results.pop_front() {
                    Self::drop_result(&mut stats, limits, entry, now, old);
                }
            }
            while entry.tombstones.front().is_some_and(|(at, _)| now.duration_since(*at) >= ttl) {
                entry.tombstones.pop_front();
                stats.tombstones -= 1;
            }
            !(entry.results.is_empty() && entry.tombstones.is_empty())
        });
        self.stats = stats;
        self.compact_order();
    }

    fn drop_result(stats: &mut HeldStats, limits: &HeldLimits, entry: &mut SessionHeld, now: Instant, held: Held) {
        entry.bytes -= held.text.len();
        stats.bytes -= held.text.len();
        stats.results -= 1;
        stats.dropped += 1;
        Self::bury(stats, limits, entry, now, held.task_id);
    }

    fn bury(stats: &mut HeldStats, limits: &HeldLimits, entry: &mut SessionHeld, now: Instant, task_id: Box<str>) {
        entry.tombstones.push_back((now, task_id));
        stats.tombstones += 1;
        while entry.tombstones.len() > limits.per_session_tombstones {
            entry.tombstones.pop_front();
            stats.tombstones -= 1;
            stats.tombstones_lost += 1;
        }
    }

    /// Keeps the total of tombstones bounded: the sessions with most lose their oldest first.
    fn enforce_total_tombstones(&mut self, limits: &HeldLimits) {
        while self.stats.tombstones > limits.total_tombstones() {
            let Some(entry) = self.sessions.values_mut().max_by_key(|e| e.tombstones.len()) else { break };
            if entry.tombstones.pop_front().is_none() {
                break;
            }
            self.stats.tombstones -= 1;
            self.stats.tombstones_lost += 1;
        }
        self.sessions.retain(|_, e| !(e.results.is_empty() && e.tombstones.is_empty()));
    }

    /// Removes stale entries from the arrival order once they outnumber live ones, so it stays proportional to
    /// what is held.
    fn compact_order(&mut self) {
        if self.order.len() <= 2 * self.stats.results + 64 {
            return;
        }
        let sessions = &self.sessions;
        self.order
            .retain(|(seq, session)| sessions.get(session).is_some_and(|e| e.results.iter().any(|h| h.seq == *seq)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t0() -> Instant {
        Instant::now()
    }

    fn limits() -> HeldLimits {
        HeldLimits {
            per_session_results: 3,
            per_session_bytes: 100,
            total_results: 5,
            total_bytes: 1000,
            per_session_tombstones: 4,
            ttl: Duration::from_secs(60),
        }
    }

    #[test]
    fn the_oldest_answers_are_dropped_to_tombstones_per_session_and_in_total() {
        let mut store = HeldStore::default();
        let l = limits();
        for i in 0..5 {
            store.push(t0(), &l, "a", &format!("t{i}"), "x".repeat(10));
        }
        assert_eq!((store.stats().results, store.stats().bytes, store.stats().tombstones), (3, 30, 2));
        // Bytes: one answer of 90 bytes pushes out two of 10 (3 kept would be 110 > 100).
        store.push(t0(), &l, "a", "big", "y".repeat(90));
        for i in 0..4 {
            store.push(t0(), &l, "b", &format!("u{i}"), "z".repeat(10));
        }
        // Total of 5: b's three plus a's ... the oldest overall went first.
        assert!(store.stats().results <= 5);
        let a = store.take("a");
        let b = store.take("b");
        let kept: usize = a.results.len() + b.results.len();
        assert_eq!(kept + a.dropped.len() + b.dropped.len(), 10, "every answer is kept or reported: {a:?} {b:?}");
        assert_eq!(a.dropped.iter().map(AsRef::as_ref).collect::<Vec<&str>>()[..2], ["t0", "t1"]);
        assert_eq!(b.dropped.first().map(AsRef::as_ref), Some("u0"));
        assert_eq!(store.stats(), HeldStats { dropped: store.stats().dropped, ..Default::default() });
    }

    #[test]
    fn an_answer_larger_than_the_limit_is_a_tombstone_at_once_and_tombstones_are_bounded() {
        let mut store = HeldStore::default();
        let l = limits();
        store.push(t0(), &l, "a", "huge", "x".repeat(101));
        assert_eq!((store.stats().results, store.stats().tombstones), (0, 1));
        for i in 0..10 {
            store.push(t0(), &l, "a", &format!("h{i}"), "x".repeat(200));
        }
        assert_eq!(store.stats().tombstones, 4);
        assert_eq!(store.stats().tombstones_lost, 7);
        let taken = store.take("a");
        assert_eq!(taken.dropped.len(), 4);
    }

    #[test]
    fn the_order_index_stays_proportional_when_answers_are_taken() {
        let mut store = HeldStore::default();
        let l = HeldLimits { per_session_results: 1000, total_results: 1000, ..limits() };
        store.push(t0(), &l, "old", "o", "x".to_owned());
        for i in 0..10_000 {
            store.push(t0(), &l, "s", &format!("t{i}"), "x".to_owned());
            drop(store.take("s"));
        }
        assert!(store.order.len() <= 2 * store.stats().results + 65, "{}", store.order.len());
    }
}
