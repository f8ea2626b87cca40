//! Single-document rules: the spec's constraints that can be judged from one document.
//!
//! | rule | source in the spec |
//! |------|--------------------|
//! | [`Rule::HandoffUnknownFact`] | handoff ids cross-reference the fact registry |
//! | [`Rule::StepOrder`], [`Rule::StepGap`] | "increment step numbers sequentially" |
//! | [`Rule::ParallelSharing`], [`Rule::ParallelUnmerged`], [`Rule::ConflictNotHandedOff`] | "mark parallel steps explicitly", "track conflicts", "merge agent should reconcile" |
//! | [`Rule::DoNotPropagate`], [`Rule::FlagForReview`], [`Rule::VerifyBeforeActing`] | the confidence table |
//! | [`Rule::UnknownFactSource`] | "mark source agent and step for each fact" |
//! | [`Rule::FailedStepUnknown`] | `failed_at_step` must point into the trace |

use std::fmt;

use crate::model::{ChainStatus, FactId, LctlDocument, TraceStep};
use crate::{Analysis, ConfidenceBand, Value};

/// How much a finding matters. Only [`Severity::Error`] makes a check fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Severity {
    /// Advice from the confidence table; the document is fine.
    Note,
    /// Needs a human's attention, but breaks no rule.
    Warning,
    /// Breaks a rule.
    Error,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Note => "note",
            Severity::Warning => "warning",
            Severity::Error => "error",
        })
    }
}

/// Which rule a finding comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Rule {
    /// A handoff list names a fact the registry does not hold.
    HandoffUnknownFact,
    /// Trace step numbers go backwards, or `chain.step` is behind the trace.
    StepOrder,
    /// Trace step numbers skip a value.
    StepGap,
    /// Steps share a number without all being `parallel`, or a `parallel` step has no sibling.
    ParallelSharing,
    /// Parallel branches are followed by no merge step, and the receiver is not flagged as the merge.
    ParallelUnmerged,
    /// `chain.parallel_merge` is set but the trace has no parallel branches.
    MergeWithoutParallel,
    /// A conflict surfaced at a merge is not among the handoff's critical facts.
    ConflictNotHandedOff,
    /// A fact below 0.40 is being propagated.
    DoNotPropagate,
    /// A critical fact in 0.40-0.59: flag for human review.
    FlagForReview,
    /// A critical fact in 0.60-0.79: verify before acting.
    VerifyBeforeActing,
    /// A fact added or modified by a trace step is more confident than that step.
    FactAboveStep,
    /// A fact is more confident than a fact it says it was derived from (`derived_from`).
    FactAboveParent,
    /// A fact's `source` is an agent that never appears in the trace.
    UnknownFactSource,
    /// `failed_at_step` names no step of the trace.
    FailedStepUnknown,
    /// Chain checker: documents of one chain disagree on its id.
    ChainIdMismatch,
    /// Chain checker: `chain.step` of consecutive hops skips or repeats.
    HopStepGap,
    /// Chain checker: a later hop lost trace history.
    TraceHistoryLost,
    /// Chain checker: a critical fact is missing at a later hop.
    CriticalFactLost,
    /// Chain checker: a fact's confidence rose though no new step verified it.
    ConfidenceRoseUnverified,
    /// Chain checker: a fact changed between hops though no new step recorded the change.
    FactChangedUnrecorded,
    /// Chain checker: a fact was modified by an agent that never appears in the trace.
    FactModifiedByUnknownAgent,
}

impl Rule {
    /// The kebab-case name printed in diagnostics.
    pub fn name(self) -> &'static str {
        match self {
            Rule::HandoffUnknownFact => "handoff-unknown-fact",
            Rule::StepOrder => "step-order",
            Rule::StepGap => "step-gap",
            Rule::ParallelSharing => "parallel-sharing",
            Rule::ParallelUnmerged => "parallel-unmerged",
            Rule::MergeWithoutParallel => "merge-without-parallel",
            Rule::ConflictNotHandedOff => "conflict-not-handed-off",
            Rule::DoNotPropagate => "do-not-propagate",
            Rule::FlagForReview => "flag-for-review",
            Rule::VerifyBeforeActing => "verify-before-acting",
            Rule::FactAboveStep => "fact-above-step",
            Rule::FactAboveParent => "fact-above-parent",
            Rule::UnknownFactSource => "unknown-fact-source",
            Rule::FailedStepUnknown => "failed-step-unknown",
            Rule::ChainIdMismatch => "chain-id-mismatch",
            Rule::HopStepGap => "hop-step-gap",
            Rule::TraceHistoryLost => "trace-history-lost",
            Rule::CriticalFactLost => "critical-fact-lost",
            Rule::ConfidenceRoseUnverified => "confidence-rose-unverified",
            Rule::FactChangedUnrecorded => "fact-changed-unrecorded",
            Rule::FactModifiedByUnknownAgent => "fact-modified-by-unknown-agent",
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One diagnostic: which rule, how serious, where, and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The rule that produced it.
    pub rule: Rule,
    /// How much it matters.
    pub severity: Severity,
    /// Index of the document in the checked sequence (0 for a single document).
    pub document: usize,
    /// Dotted path inside that document, e.g. `handoff.critical_facts[2]`.
    pub path: String,
    /// A sentence for humans.
    pub message: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} [{}] {}: {}", self.severity, self.rule, self.path, self.message)
    }
}

/// The result of checking one document or one chain.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Report {
    /// Every finding, in the order the rules produced them.
    pub findings: Vec<Finding>,
    /// Parallel structure found in each document's trace (document index, group).
    pub parallel_groups: Vec<(usize, ParallelGroup)>,
    /// The failure recorded by each failed document (document index, report).
    pub failures: Vec<(usize, FailureReport)>,
}

impl Report {
    /// Whether any finding is an [`Severity::Error`].
    pub fn has_errors(&self) -> bool {
        self.findings.iter().any(|f| f.severity == Severity::Error)
    }

    /// Findings of one rule.
    pub fn by_rule(&self, rule: Rule) -> impl Iterator<Item = &Finding> {
        self.findings.iter().filter(move |f| f.rule == rule)
    }

    pub(crate) fn push(
        &mut self,
        rule: Rule,
        severity: Severity,
        document: usize,
        path: impl Into<String>,
        message: impl Into<String>,
    ) {
        self.findings.push(Finding { rule, severity, document, path: path.into(), message: message.into() });
    }
}

/// One branch of a parallel group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParallelBranch {
    /// Index into `trace`.
    pub trace_index: usize,
    /// The branch's agent.
    pub agent: String,
}

/// Where parallel branches come back together.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum MergePoint {
    /// A later trace step collected the branches.
    TraceStep {
        /// Index into `trace`.
        trace_index: usize,
        /// Its step number.
        step: u32,
        /// The merging agent.
        agent: String,
        /// Conflict facts (`CONFLICT: ...`) the merge step added.
        conflicts: Vec<FactId>,
    },
    /// The document's receiver is the merge agent (`chain.parallel_merge: true`, no later step yet).
    Receiver {
        /// The receiver's step, when known.
        step: Option<u32>,
        /// The receiving agent, when named.
        agent: Option<String>,
    },
}

/// Steps that ran in parallel under one step number, and where they merged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParallelGroup {
    /// The shared step number.
    pub step: u32,
    /// The branches, in trace order.
    pub branches: Vec<ParallelBranch>,
    /// The merge, if any.
    pub merge: Option<MergePoint>,
}

/// What a failed chain recorded about its failure.
#[derive(Debug, Clone, PartialEq)]
pub struct FailureReport {
    /// `chain.failed_at_step`, or the first failed step's number.
    pub failed_at_step: u32,
    /// The failed step's agent, when the trace has it.
    pub agent: Option<String>,
    /// The failed step's action.
    pub action: Option<String>,
    /// The failed step's error.
    pub error: Option<String>,
    /// Facts known at the failure.
    pub facts_at_failure: Vec<FactId>,
    /// The post-mortem analysis, when recorded.
    pub analysis: Option<Analysis>,
}

/// Groups of steps that share a step number, with their merge points.
pub fn parallel_groups(doc: &LctlDocument) -> Vec<ParallelGroup> {
    let mut groups = Vec::new();
    let mut start = 0;
    while start < doc.trace.len() {
        let number = doc.trace[start].step;
        let end =
            doc.trace[start..].iter().position(|s| s.step != number).map_or(doc.trace.len(), |offset| start + offset);
        let members = &doc.trace[start..end];
        if members.len() > 1 || members.iter().any(|s| s.parallel) {
            let branches = members
                .iter()
                .enumerate()
                .map(|(offset, s)| ParallelBranch { trace_index: start + offset, agent: s.agent.clone() })
                .collect();
            let merge = match doc.trace.get(end) {
                Some(next) => Some(MergePoint::TraceStep {
                    trace_index: end,
                    step: next.step,
                    agent: next.agent.clone(),
                    conflicts: next
                        .facts_added
                        .iter()
                        .chain(&next.facts_modified)
                        .filter(|id| doc.facts.get(id).is_some_and(|f| f.is_conflict()))
                        .cloned()
                        .collect(),
                }),
                None if doc.chain.as_ref().and_then(|c| c.parallel_merge) == Some(true) => Some(MergePoint::Receiver {
                    step: doc.chain.as_ref().and_then(|c| c.step),
                    agent: doc.chain.as_ref().and_then(|c| c.target.clone()),
                }),
                None => None,
            };
            groups.push(ParallelGroup { step: number, branches, merge });
        }
        start = end;
    }
    groups
}

/// The failure a document records, if it records one.
///
/// A document counts as failed when `chain.status` is `FAILED`, `chain.failed_at_step` is set,
/// or a trace step carries an `error`.
pub fn failure_report(doc: &LctlDocument) -> Option<FailureReport> {
    let chain = doc.chain.as_ref();
    let declared = chain.and_then(|c| c.failed_at_step);
    let status_failed = chain.and_then(|c| c.status.as_ref()) == Some(&ChainStatus::Failed);
    let failed_step: Option<&TraceStep> = match declared {
        Some(number) => doc
            .trace
            .iter()
            .find(|s| s.step == number && s.is_failed())
            .or_else(|| doc.trace.iter().find(|s| s.step == number)),
        None => doc.trace.iter().find(|s| s.is_failed()),
    };
    if declared.is_none() && failed_step.is_none() && !status_failed {
        return None;
    }
    let failed_at_step = declared.or(failed_step.map(|s| s.step)).or_else(|| doc.last_trace_step()).unwrap_or(0);
    Some(FailureReport {
        failed_at_step,
        agent: failed_step.map(|s| s.agent.clone()),
        action: failed_step.and_then(|s| s.action.clone()),
        error: failed_step.and_then(|s| s.error.clone()),
        facts_at_failure: failed_step.map(|s| s.facts_at_failure.clone()).unwrap_or_default(),
        analysis: doc.analysis.clone(),
    })
}

/// Checks one document against every single-document rule.
pub fn check_document(doc: &LctlDocument) -> Report {
    let mut report = Report::default();
    check_document_into(doc, 0, &mut report);
    report
}

pub(crate) fn check_document_into(doc: &LctlDocument, index: usize, report: &mut Report) {
    check_handoff_references(doc, index, report);
    check_step_numbers(doc, index, report);
    check_parallel(doc, index, report);
    check_confidence_bands(doc, index, report);
    check_propagation_within(doc, index, report);
    check_fact_sources(doc, index, report);
    check_failed_step(doc, index, report);
    for group in parallel_groups(doc) {
        report.parallel_groups.push((index, group));
    }
    if let Some(failure) = failure_report(doc) {
        report.failures.push((index, failure));
    }
}

fn check_handoff_references(doc: &LctlDocument, index: usize, report: &mut Report) {
    let Some(handoff) = &doc.handoff else { return };
    let lists = [("critical_facts", &handoff.critical_facts), ("context_facts", &handoff.context_facts)];
    for (name, ids) in lists {
        for (position, id) in ids.iter().enumerate() {
            if !doc.facts.contains(id) {
                report.push(
                    Rule::HandoffUnknownFact,
                    Severity::Error,
                    index,
                    format!("handoff.{name}[{position}]"),
                    format!("{id} is not in the facts registry"),
                );
            }
        }
    }
}

fn check_step_numbers(doc: &LctlDocument, index: usize, report: &mut Report) {
    for (position, pair) in doc.trace.windows(2).enumerate() {
        let (previous, current) = (&pair[0], &pair[1]);
        let path = format!("trace[{}].step", position + 1);
        if current.step < previous.step {
            report.push(
                Rule::StepOrder,
                Severity::Error,
                index,
                path,
                format!("step {} follows step {}; step numbers must increase", current.step, previous.step),
            );
        } else if current.step > previous.step + 1 {
            report.push(
                Rule::StepGap,
                Severity::Error,
                index,
                path,
                format!(
                    "step {} follows step {}; steps {}..{} are missing",
                    current.step,
                    previous.step,
                    previous.step + 1,
                    current.step - 1
                ),
            );
        }
    }
    if let (Some(chain_step), Some(last)) = (doc.chain.as_ref().and_then(|c| c.step), doc.last_trace_step()) {
        if chain_step < last {
            report.push(
                Rule::StepOrder,
                Severity::Error,
                index,
                "chain.step",
                format!("chain is at step {chain_step} but the trace already reached step {last}"),
            );
        } else if chain_step > last + 1 {
            report.push(
                Rule::StepGap,
                Severity::Error,
                index,
                "chain.step",
                format!("chain is at step {chain_step} but the trace ends at step {last}"),
            );
        }
    }
}

fn check_parallel(doc: &LctlDocument, index: usize, report: &mut Report) {
    let groups = parallel_groups(doc);
    for group in &groups {
        if group.branches.len() < 2 {
            for branch in &group.branches {
                report.push(
                    Rule::ParallelSharing,
                    Severity::Error,
                    index,
                    format!("trace[{}].parallel", branch.trace_index),
                    format!("parallel step {} has no sibling branch sharing its step number", group.step),
                );
            }
        } else {
            for branch in &group.branches {
                if !doc.trace[branch.trace_index].parallel {
                    report.push(
                        Rule::ParallelSharing,
                        Severity::Error,
                        index,
                        format!("trace[{}].step", branch.trace_index),
                        format!(
                            "{} shares step {} with other steps but is not marked parallel",
                            branch.agent, group.step
                        ),
                    );
                }
            }
        }
        match &group.merge {
            None => {
                let agents: Vec<&str> = group.branches.iter().map(|b| b.agent.as_str()).collect();
                report.push(
                    Rule::ParallelUnmerged,
                    Severity::Error,
                    index,
                    format!("trace[{}]", group.branches.last().map_or(0, |b| b.trace_index)),
                    format!(
                        "parallel branches at step {} ({}) are never merged: add a merge step or set chain.parallel_merge",
                        group.step,
                        agents.join(", ")
                    ),
                );
            }
            Some(MergePoint::TraceStep { trace_index, conflicts, .. }) => {
                for conflict in conflicts {
                    let handed_off = doc.critical_facts().contains(conflict);
                    if doc.handoff.is_some() && !handed_off {
                        report.push(
                            Rule::ConflictNotHandedOff,
                            Severity::Error,
                            index,
                            "handoff.critical_facts",
                            format!(
                                "conflict {conflict} surfaced by the merge at trace[{trace_index}] is not a critical fact"
                            ),
                        );
                    }
                }
            }
            Some(MergePoint::Receiver { .. }) => {}
        }
    }
    if doc.chain.as_ref().and_then(|c| c.parallel_merge) == Some(true) && groups.is_empty() {
        report.push(
            Rule::MergeWithoutParallel,
            Severity::Error,
            index,
            "chain.parallel_merge",
            "the receiver is flagged as a merge but the trace has no parallel branches",
        );
    }
}

fn check_confidence_bands(doc: &LctlDocument, index: usize, report: &mut Report) {
    for (id, fact) in doc.facts.iter() {
        let path = format!("facts.{id}.confidence");
        let critical = doc.critical_facts().contains(id);
        let c = fact.confidence;
        let finding = match c.band() {
            ConfidenceBand::Uncertain => Some((
                Rule::DoNotPropagate,
                Severity::Error,
                format!("{id} has confidence {c} (below 0.40): do not propagate"),
            )),
            ConfidenceBand::Low if critical => Some((
                Rule::FlagForReview,
                Severity::Warning,
                format!("critical fact {id} has low confidence {c}: flag for human review"),
            )),
            ConfidenceBand::Moderate if critical => Some((
                Rule::VerifyBeforeActing,
                Severity::Note,
                format!("critical fact {id} has moderate confidence {c}: verify before acting"),
            )),
            _ => None,
        };
        if let Some((rule, severity, message)) = finding {
            report.push(rule, severity, index, path, message);
        }
    }
}

/// The propagation rule, "Child confidence ≤ min(parent confidence, own confidence)", inside one document.
///
/// A fact's producing step is the last trace step that added or modified it. A fact above that step's confidence
/// is a warning, not an error: the spec's own examples do it (Example 1: step 1 at 0.85 adds F1 at 0.95; Example 2:
/// the merge at 0.80 adds F6 at 0.95), so the sentence cannot be meant to refuse them. A fact above a fact it names in
/// `derived_from` (an extension key: the spec has no field for derivation, so the rule applies where a document says
/// which) is an error: there the document itself states the parent, and the rule applies as written.
fn check_propagation_within(doc: &LctlDocument, index: usize, report: &mut Report) {
    for (id, fact) in doc.facts.iter() {
        if let Some(step) = doc.trace.iter().rev().find(|s| s.touches(id))
            && let Some(step_confidence) = step.confidence
            && fact.confidence.value() > step_confidence.value()
        {
            report.push(
                Rule::FactAboveStep,
                Severity::Warning,
                index,
                format!("facts.{id}.confidence"),
                format!(
                    "{id} has confidence {} but step {} ({}) that produced it has {step_confidence}: child confidence \
                     <= min(parent confidence, own confidence)",
                    fact.confidence, step.step, step.agent
                ),
            );
        }
        let parents: Vec<&Value> = match fact.extra.get("derived_from") {
            Some(Value::Sequence(parents)) => parents.iter().collect(),
            Some(one) => vec![one],
            None => continue,
        };
        for (position, parent) in parents.into_iter().enumerate() {
            let path = format!("facts.{id}.derived_from[{position}]");
            let parent_fact = match parent {
                Value::String(p) => FactId::new(p.clone()).ok().and_then(|p| doc.facts.get(&p).map(|f| (p, f))),
                _ => None,
            };
            match parent_fact {
                None => report.push(
                    Rule::FactAboveParent,
                    Severity::Error,
                    index,
                    path,
                    format!("{id} is derived from {}, which is not in the facts registry", describe(parent)),
                ),
                Some((parent_id, parent_fact)) if fact.confidence.value() > parent_fact.confidence.value() => report
                    .push(
                        Rule::FactAboveParent,
                        Severity::Error,
                        index,
                        format!("facts.{id}.confidence"),
                        format!(
                            "{id} has confidence {} but is derived from {parent_id} at {}: child confidence <= \
                             min(parent confidence, own confidence)",
                            fact.confidence, parent_fact.confidence
                        ),
                    ),
                Some(_) => {}
            }
        }
    }
}

fn describe(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => format!("a {}", other.kind()),
    }
}

fn check_fact_sources(doc: &LctlDocument, index: usize, report: &mut Report) {
    // A document without a trace (the minimal format) has nothing to attribute facts to.
    if doc.trace.is_empty() {
        return;
    }
    let agents = doc.trace_agents();
    for (id, fact) in doc.facts.iter() {
        if let Some(source) = &fact.source
            && !agents.contains(&source.as_str())
        {
            report.push(
                Rule::UnknownFactSource,
                Severity::Error,
                index,
                format!("facts.{id}.source"),
                format!("{id} is attributed to {source}, who never appears in the trace"),
            );
        }
    }
}

fn check_failed_step(doc: &LctlDocument, index: usize, report: &mut Report) {
    if let Some(failed) = doc.chain.as_ref().and_then(|c| c.failed_at_step)
        && !doc.trace.is_empty()
        && !doc.trace.iter().any(|s| s.step == failed)
    {
        report.push(
            Rule::FailedStepUnknown,
            Severity::Error,
            index,
            "chain.failed_at_step",
            format!("step {failed} is not in the trace"),
        );
    }
}
