//! A session's context (RFC 5.3): its earlier turns, bounded by count and bytes, handed to each task as a view of
//! the session's turn log (no copy), and answered to status queries for finished tasks.

use std::collections::VecDeque;
use std::sync::{Arc, OnceLock};

use ldp_types::{Provenance, RawJson};

/// One earlier task of a session: what was asked and what was answered.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Turn {
    /// The task.
    pub task_id: String,
    /// Its skill.
    pub skill: String,
    /// Its input, as received (in the mode it ran in).
    pub input: RawJson,
    /// Its output; `None` for a task that failed or was cancelled.
    pub output: Option<RawJson>,
}

impl Turn {
    /// A turn (for tests of delegates; the responder records the real ones).
    pub fn new(
        task_id: impl Into<String>,
        skill: impl Into<String>,
        input: impl Into<RawJson>,
        output: Option<RawJson>,
    ) -> Self {
        Self { task_id: task_id.into(), skill: skill.into(), input: input.into(), output }
    }

    /// The bytes this turn is counted for against `context_bytes` (its provenance is counted by the caller).
    pub(super) fn size(&self) -> usize {
        TURN_OVERHEAD
            + self.task_id.len()
            + self.skill.len()
            + self.input.json().len()
            + self.output.as_ref().map_or(0, |o| o.json().len())
    }
}

/// What a turn costs besides its strings (the allocations and their headers), so that many empty turns still count.
pub(super) const TURN_OVERHEAD: usize = 64;

/// One place of a session's turn log: set once, when the turn is appended.
type Slot = OnceLock<Arc<Turn>>;

/// A session's earlier turns, oldest first: a view of the session's turn log, which the context appends to behind
/// it, so handing it to each task copies nothing (a reference count and two indices).
#[derive(Clone)]
pub struct History {
    log: Arc<[Slot]>,
    start: usize,
    end: usize,
}

impl Default for History {
    fn default() -> Self {
        Self { log: Arc::from(Vec::new()), start: 0, end: 0 }
    }
}

impl History {
    /// A history of these turns, oldest first (for tests of delegates).
    pub fn from_turns(turns: impl IntoIterator<Item = Turn>) -> Self {
        let log: Arc<[Slot]> = turns.into_iter().map(|t| OnceLock::from(Arc::new(t))).collect();
        Self { end: log.len(), log, start: 0 }
    }

    /// The turns, oldest first.
    pub fn iter(&self) -> Turns<'_> {
        Turns(self.slots().iter())
    }

    /// How many turns.
    pub fn len(&self) -> usize {
        self.end - self.start
    }

    /// Whether there are none (the session's first task, or context turned off).
    pub fn is_empty(&self) -> bool {
        self.end == self.start
    }

    /// The latest turn.
    pub fn last(&self) -> Option<&Turn> {
        self.iter().next_back()
    }

    fn slots(&self) -> &[Slot] {
        self.log.get(self.start..self.end).unwrap_or_default()
    }
}

impl PartialEq for History {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl std::fmt::Debug for History {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<'a> IntoIterator for &'a History {
    type Item = &'a Turn;
    type IntoIter = Turns<'a>;
    fn into_iter(self) -> Turns<'a> {
        self.iter()
    }
}

/// The turns of a [`History`], oldest first.
#[derive(Debug, Clone)]
pub struct Turns<'a>(std::slice::Iter<'a, Slot>);

impl<'a> Iterator for Turns<'a> {
    type Item = &'a Turn;

    fn next(&mut self) -> Option<&'a Turn> {
        // Every slot of a view was set before the view was taken.
        self.0.next().and_then(OnceLock::get).map(|t| &**t)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}

impl DoubleEndedIterator for Turns<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.0.next_back().and_then(OnceLock::get).map(|t| &**t)
    }
}

impl ExactSizeIterator for Turns<'_> {}

/// A finished task kept as session context, with its result's provenance when it completed (for status queries).
#[derive(Debug)]
pub(super) struct Kept {
    pub(super) turn: Arc<Turn>,
    pub(super) provenance: Option<Arc<Provenance>>,
    pub(super) bytes: usize,
}

/// A session's context: its latest turns within the configured count and bytes.
///
/// The kept turns are also `view`, a view of an append-only log that tasks' histories share: handing one to a task
/// clones the view, O(1). Turns dropped from the front stay in the log until it is replaced by one holding only the
/// kept turns, which happens when it is full or when the dropped turns' bytes and the kept ones' would pass the
/// byte bound, so the log never holds more than the bound either (each replacement copies as many references as
/// turns were appended since the last: O(1) a turn).
#[derive(Debug, Default)]
pub(super) struct Context {
    pub(super) kept: VecDeque<Kept>,
    pub(super) bytes: usize,
    /// The kept turns, in the log that holds them.
    view: History,
    /// The bytes of the turns before the view's start, which the log still holds.
    dropped_bytes: usize,
}

/// The fewest places of a new log.
const MIN_LOG: usize = 4;

impl Context {
    pub(super) fn push(&mut self, turn: Turn, provenance: Option<Arc<Provenance>>, max_turns: usize, max_bytes: usize) {
        if max_turns == 0 {
            return;
        }
        // Provenance is small and delegate-made; count its variable parts roughly.
        let bytes =
            turn.size() + provenance.as_ref().map_or(0, |p| 256 + p.lineage.len() * 128 + p.evidence.len() * 128);
        if bytes > max_bytes {
            *self = Self::default();
            return;
        }
        while self.kept.len() >= max_turns || self.bytes + bytes > max_bytes {
            let Some(old) = self.kept.pop_front() else { break };
            self.bytes -= old.bytes;
            self.dropped_bytes += old.bytes;
            self.view.start += 1;
        }
        let view = &self.view;
        if view.end == view.log.len() || self.bytes + self.dropped_bytes + bytes > max_bytes {
            self.relog(1);
        }
        let turn = Arc::new(turn);
        if let Some(slot) = self.view.log.get(self.view.end) {
            // A place past the view's end is never set (a new log starts empty past its kept turns).
            let _ = slot.set(Arc::clone(&turn));
        }
        self.view.end += 1;
        self.bytes += bytes;
        self.kept.push_back(Kept { turn, provenance, bytes });
    }

    /// Replaces the log by one holding the kept turns only, with room for at least `room` more.
    fn relog(&mut self, room: usize) {
        let capacity = (2 * (self.kept.len() + room)).max(MIN_LOG);
        let turns = self.kept.iter().map(|k| Some(Arc::clone(&k.turn)));
        let slot = |turn: Option<Arc<Turn>>| turn.map_or_else(OnceLock::new, OnceLock::from);
        let log = turns.chain(std::iter::repeat_with(|| None)).take(capacity).map(slot).collect();
        self.view = History { log, start: 0, end: self.kept.len() };
        self.dropped_bytes = 0;
    }

    /// The turns kept now, for a task: a view of the log (no copy).
    pub(super) fn snapshot(&self) -> History {
        self.view.clone()
    }

    /// Takes back the result of `task_id` (a task the store says ended otherwise): its turn stays, as the turn of a
    /// task that ended without a result does.
    pub(super) fn withdraw_result(&mut self, task_id: &str) {
        let Some(kept) = self.kept.iter_mut().rev().find(|k| k.turn.task_id == task_id) else { return };
        let mut turn = (*kept.turn).clone();
        turn.output = None;
        let bytes = turn.size();
        self.bytes = self.bytes - kept.bytes + bytes;
        *kept = Kept { turn: Arc::new(turn), provenance: None, bytes };
        // The log's turns are set once: histories taken before keep the result, later ones see it withdrawn.
        self.relog(0);
    }

    pub(super) fn result(&self, task_id: &str) -> Option<(&RawJson, &Provenance)> {
        self.kept.iter().rev().find(|k| k.turn.task_id == task_id).and_then(|k| {
            let output = k.turn.output.as_ref()?;
            Some((output, k.provenance.as_deref()?))
        })
    }
}

#[cfg(test)]
mod tests;
