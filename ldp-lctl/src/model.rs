//! The LCTL v3.0 document model.
//!
//! Fields are public plain data; the invariants that matter on the wire (confidence range,
//! fact-id syntax, the version string) live in the field types, so a built document cannot
//! hold an out-of-range score. Cross-field rules (handoff references, step order) are checked
//! by [`check_document`](crate::check_document) instead, because broken traces must still
//! load to be debugged.

use std::fmt;

use crate::{Confidence, LctlError, Mapping};

/// The only LCTL version this crate speaks.
pub const LCTL_VERSION: &str = "3.0";

/// A fact identifier such as `F1`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FactId(String);

impl FactId {
    /// Validates an id: non-empty, no whitespace and none of YAML's flow indicators,
    /// so ids can always be written inside `[F1, F2]` lists.
    pub fn new(id: impl Into<String>) -> Result<Self, LctlError> {
        let id = id.into();
        let forbidden = |c: char| c.is_whitespace() || "[]{},:#&*!|>'\"%@`".contains(c);
        if id.is_empty() || id.chars().any(forbidden) { Err(LctlError::InvalidFactId(id)) } else { Ok(FactId(id)) }
    }

    /// The id text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for FactId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The document's `purpose`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Purpose {
    /// `observability`: a live handoff.
    Observability,
    /// `debugging`: a post-mortem trace.
    Debugging,
    /// Any other value, kept verbatim.
    Other(String),
}

impl Purpose {
    pub(crate) fn from_wire(text: &str) -> Self {
        match text {
            "observability" => Purpose::Observability,
            "debugging" => Purpose::Debugging,
            other => Purpose::Other(other.to_owned()),
        }
    }

    /// The wire spelling.
    pub fn as_str(&self) -> &str {
        match self {
            Purpose::Observability => "observability",
            Purpose::Debugging => "debugging",
            Purpose::Other(other) => other,
        }
    }
}

/// `chain.status`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ChainStatus {
    /// `FAILED`.
    Failed,
    /// `COMPLETED`.
    Completed,
    /// `IN_PROGRESS`.
    InProgress,
    /// Any other value, kept verbatim.
    Other(String),
}

impl ChainStatus {
    pub(crate) fn from_wire(text: &str) -> Self {
        // The spec writes FAILED; agents are not always careful about case.
        match text.to_ascii_uppercase().as_str() {
            "FAILED" => ChainStatus::Failed,
            "COMPLETED" => ChainStatus::Completed,
            "IN_PROGRESS" => ChainStatus::InProgress,
            _ => ChainStatus::Other(text.to_owned()),
        }
    }

    /// The wire spelling.
    pub fn as_str(&self) -> &str {
        match self {
            ChainStatus::Failed => "FAILED",
            ChainStatus::Completed => "COMPLETED",
            ChainStatus::InProgress => "IN_PROGRESS",
            ChainStatus::Other(other) => other,
        }
    }
}

/// Which spelling the sender used for the hop's endpoints; kept so a rewrite looks like the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum EndpointKeys {
    /// `source:` / `target:` (the full format).
    #[default]
    SourceTarget,
    /// `from:` / `to:` (the minimal format).
    FromTo,
}

/// The `chain` block: who is involved in this hop.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Chain {
    /// Unique workflow id.
    pub id: String,
    /// The current step number (the sender's step).
    pub step: Option<u32>,
    /// The sending agent (`source`, or `from` in the minimal format).
    pub source: Option<String>,
    /// The receiving agent (`target`, or `to` in the minimal format).
    pub target: Option<String>,
    /// `status`, e.g. `FAILED` in a debug trace.
    pub status: Option<ChainStatus>,
    /// `failed_at_step`: the trace step where the chain broke.
    pub failed_at_step: Option<u32>,
    /// `parallel_merge`: the receiver merges parallel branches.
    pub parallel_merge: Option<bool>,
    /// Which endpoint spelling to write (observable only when `source` or `target` is set).
    pub endpoint_keys: EndpointKeys,
    /// Keys this crate does not know, in document order.
    pub extra: Mapping,
}

/// One entry of `trace`.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceStep {
    /// Step number; parallel branches share one.
    pub step: u32,
    /// The agent that acted.
    pub agent: String,
    /// What it did, briefly.
    pub action: Option<String>,
    /// The agent's confidence in its own step.
    pub confidence: Option<Confidence>,
    /// Facts the step established.
    pub facts_added: Vec<FactId>,
    /// Facts the step re-examined and updated (verified, corrected or contradicted).
    pub facts_modified: Vec<FactId>,
    /// Facts known when the step failed.
    pub facts_at_failure: Vec<FactId>,
    /// `parallel: true` marks one branch of a parallel group.
    pub parallel: bool,
    /// Wall-clock duration of the step.
    pub duration_ms: Option<u64>,
    /// The error that ended the step, if it failed.
    pub error: Option<String>,
    /// Keys this crate does not know, in document order.
    pub extra: Mapping,
}

impl TraceStep {
    /// A step with only its number and agent set.
    pub fn new(step: u32, agent: impl Into<String>) -> Self {
        TraceStep {
            step,
            agent: agent.into(),
            action: None,
            confidence: None,
            facts_added: Vec::new(),
            facts_modified: Vec::new(),
            facts_at_failure: Vec::new(),
            parallel: false,
            duration_ms: None,
            error: None,
            extra: Mapping::new(),
        }
    }

    /// Whether the step recorded a failure (an `error`, or an action starting with `FAILED`).
    pub fn is_failed(&self) -> bool {
        self.error.is_some() || self.action.as_deref().is_some_and(|action| action.trim_start().starts_with("FAILED"))
    }

    /// Whether the step added or modified `fact`.
    pub fn touches(&self, fact: &FactId) -> bool {
        self.facts_added.contains(fact) || self.facts_modified.contains(fact)
    }
}

/// One entry of the `facts` registry.
#[derive(Debug, Clone, PartialEq)]
pub struct Fact {
    /// The fact in natural language.
    pub text: String,
    /// How sure its source is.
    pub confidence: Confidence,
    /// The agent that established (or last updated) it.
    pub source: Option<String>,
    /// The step at which it was established.
    pub step: Option<u32>,
    /// A free-form remark, e.g. a post-mortem finding.
    pub note: Option<String>,
    /// Keys this crate does not know, in document order.
    pub extra: Mapping,
}

impl Fact {
    /// A fact with only text and confidence.
    pub fn new(text: impl Into<String>, confidence: Confidence) -> Self {
        Fact { text: text.into(), confidence, source: None, step: None, note: None, extra: Mapping::new() }
    }

    /// Whether the fact announces a conflict (the spec's `CONFLICT:` convention for merge results).
    pub fn is_conflict(&self) -> bool {
        self.text.trim_start().get(..8).is_some_and(|head| head.eq_ignore_ascii_case("CONFLICT"))
    }
}

/// The `facts` registry, in document order.
///
/// Equality ignores order (it is a map); iteration and writing keep document order.
#[derive(Debug, Clone, Default)]
pub struct FactRegistry {
    entries: Vec<(FactId, Fact)>,
}

impl PartialEq for FactRegistry {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().all(|(id, fact)| other.get(id) == Some(fact))
    }
}

impl FactRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// The fact with this id.
    pub fn get(&self, id: &FactId) -> Option<&Fact> {
        self.entries.iter().find(|(k, _)| k == id).map(|(_, f)| f)
    }

    /// Whether the registry holds `id`.
    pub fn contains(&self, id: &FactId) -> bool {
        self.get(id).is_some()
    }

    /// Adds or replaces a fact; a replaced fact keeps its position.
    pub fn insert(&mut self, id: FactId, fact: Fact) {
        match self.entries.iter_mut().find(|(k, _)| *k == id) {
            Some(entry) => entry.1 = fact,
            None => self.entries.push((id, fact)),
        }
    }

    /// Removes a fact.
    pub fn remove(&mut self, id: &FactId) -> Option<Fact> {
        let index = self.entries.iter().position(|(k, _)| k == id)?;
        Some(self.entries.remove(index).1)
    }

    /// Facts in order.
    pub fn iter(&self) -> impl Iterator<Item = (&FactId, &Fact)> {
        self.entries.iter().map(|(k, f)| (k, f))
    }

    /// Number of facts.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no facts.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// The `handoff` block: what the receiver must keep.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Handoff {
    /// Facts that MUST be preserved through the rest of the chain.
    pub critical_facts: Vec<FactId>,
    /// Facts that are nice to have.
    pub context_facts: Vec<FactId>,
    /// Concerns for the receiver.
    pub warnings: Vec<String>,
    /// Keys this crate does not know, in document order.
    pub extra: Mapping,
}

/// The post-mortem `analysis` block.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Analysis {
    /// What went wrong.
    pub root_cause: Option<String>,
    /// How sure the analyst is.
    pub confidence_in_analysis: Option<Confidence>,
    /// What to change.
    pub recommendation: Option<String>,
    /// Keys this crate does not know, in document order.
    pub extra: Mapping,
}

/// `lctl_ack.status`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum AckStatus {
    /// `received`.
    Received,
    /// Any other value, kept verbatim.
    Other(String),
}

impl AckStatus {
    pub(crate) fn from_wire(text: &str) -> Self {
        match text {
            "received" => AckStatus::Received,
            other => AckStatus::Other(other.to_owned()),
        }
    }

    /// The wire spelling.
    pub fn as_str(&self) -> &str {
        match self {
            AckStatus::Received => "received",
            AckStatus::Other(other) => other,
        }
    }
}

/// The receiver's acknowledgement (`lctl_ack`).
#[derive(Debug, Clone, PartialEq)]
pub struct LctlAck {
    /// The chain being acknowledged.
    pub chain_id: String,
    /// The receiver's step number.
    pub step: u32,
    /// The receiving agent.
    pub agent: String,
    /// Receipt status.
    pub status: AckStatus,
    /// Facts the receiver loaded.
    pub facts_loaded: Vec<FactId>,
    /// Loaded facts whose confidence worries the receiver.
    pub confidence_concerns: Vec<FactId>,
    /// Keys this crate does not know, in document order.
    pub extra: Mapping,
}

/// A whole LCTL v3.0 document, full or minimal.
///
/// Empty lists and absent blocks are equivalent: writing omits them and reading yields them empty.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LctlDocument {
    /// `purpose`.
    pub purpose: Option<Purpose>,
    /// `chain`.
    pub chain: Option<Chain>,
    /// `trace`, in document order.
    pub trace: Vec<TraceStep>,
    /// `facts`.
    pub facts: FactRegistry,
    /// `handoff`.
    pub handoff: Option<Handoff>,
    /// `instruction`: the full natural-language task.
    pub instruction: Option<String>,
    /// `analysis`.
    pub analysis: Option<Analysis>,
    /// `lctl_ack`.
    pub ack: Option<LctlAck>,
    /// Top-level keys this crate does not know, in document order.
    pub extra: Mapping,
}

impl LctlDocument {
    /// The chain id, if the document has a chain block.
    pub fn chain_id(&self) -> Option<&str> {
        self.chain.as_ref().map(|chain| chain.id.as_str())
    }

    /// The highest step number in the trace.
    pub fn last_trace_step(&self) -> Option<u32> {
        self.trace.iter().map(|step| step.step).max()
    }

    /// Critical facts named by the handoff (empty without a handoff).
    pub fn critical_facts(&self) -> &[FactId] {
        self.handoff.as_ref().map_or(&[], |h| h.critical_facts.as_slice())
    }

    /// Every agent that appears in the trace, in order of first appearance.
    pub fn trace_agents(&self) -> Vec<&str> {
        let mut agents: Vec<&str> = Vec::new();
        for step in &self.trace {
            if !agents.contains(&step.agent.as_str()) {
                agents.push(&step.agent);
            }
        }
        agents
    }
}
