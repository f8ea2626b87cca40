//! A session's context (RFC 5.3): its earlier turns, bounded by count and bytes, handed to each task as a shared
//! snapshot and answered to status queries for finished tasks.

use std::collections::VecDeque;
use std::sync::Arc;

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

/// A session's earlier turns, oldest first: a snapshot shared with the responder, so handing it to each task costs
/// no copy of the inputs and outputs.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct History(Arc<[Arc<Turn>]>);

impl History {
    /// A history of these turns, oldest first (for tests of delegates).
    pub fn from_turns(turns: impl IntoIterator<Item = Turn>) -> Self {
        Self(turns.into_iter().map(Arc::new).collect())
    }

    /// The turns, oldest first.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &Turn> + ExactSizeIterator {
        self.0.iter().map(|t| &**t)
    }

    /// How many turns.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none (the session's first task, or context turned off).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The latest turn.
    pub fn last(&self) -> Option<&Turn> {
        self.0.last().map(|t| &**t)
    }
}

impl<'a> IntoIterator for &'a History {
    type Item = &'a Turn;
    type IntoIter = std::iter::Map<std::slice::Iter<'a, Arc<Turn>>, fn(&'a Arc<Turn>) -> &'a Turn>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter().map(|t| &**t)
    }
}

/// A finished task kept as session context, with its result's provenance when it completed (for status queries).
#[derive(Debug)]
pub(super) struct Kept {
    pub(super) turn: Arc<Turn>,
    pub(super) provenance: Option<Box<Provenance>>,
    pub(super) bytes: usize,
}

/// A session's context: its latest turns within the configured count and bytes.
#[derive(Debug, Default)]
pub(super) struct Context {
    pub(super) kept: VecDeque<Kept>,
    pub(super) bytes: usize,
    /// The snapshot handed to tasks, rebuilt after the context changed (once, however many tasks follow).
    pub(super) snapshot: Option<History>,
}

impl Context {
    pub(super) fn push(&mut self, turn: Turn, provenance: Option<Box<Provenance>>, max_turns: usize, max_bytes: usize) {
        if max_turns == 0 {
            return;
        }
        // Provenance is small and delegate-made; count its variable parts roughly.
        let bytes =
            turn.size() + provenance.as_ref().map_or(0, |p| 256 + p.lineage.len() * 128 + p.evidence.len() * 128);
        self.snapshot = None;
        if bytes > max_bytes {
            self.kept.clear();
            self.bytes = 0;
            return;
        }
        while self.kept.len() >= max_turns || self.bytes + bytes > max_bytes {
            let Some(old) = self.kept.pop_front() else { break };
            self.bytes -= old.bytes;
        }
        self.bytes += bytes;
        self.kept.push_back(Kept { turn: Arc::new(turn), provenance, bytes });
    }

    pub(super) fn snapshot(&mut self) -> History {
        self.snapshot.get_or_insert_with(|| History(self.kept.iter().map(|k| k.turn.clone()).collect())).clone()
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
        self.snapshot = None;
    }

    pub(super) fn result(&self, task_id: &str) -> Option<(&RawJson, &Provenance)> {
        self.kept.iter().rev().find(|k| k.turn.task_id == task_id).and_then(|k| {
            let output = k.turn.output.as_ref()?;
            Some((output, k.provenance.as_deref()?))
        })
    }
}
