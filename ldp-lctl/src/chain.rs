//! The chain checker: rules that need several hops of one chain to judge.

use std::collections::BTreeSet;

use crate::model::{FactId, LctlDocument};
use crate::rules::{Report, Rule, Severity, check_document_into};

/// Checks a sequence of documents from one chain, in hop order.
///
/// Every document is first checked on its own ([`check_document`](crate::check_document));
/// then each consecutive pair is compared:
///
/// - all documents carry the same `chain.id`;
/// - `chain.step` advances by exactly one per hop;
/// - the later trace still contains every earlier step (history is preserved);
/// - a fact that was ever critical is present in every later registry;
/// - a fact whose confidence rises between hops is re-verified by a step new at that hop
///   (a step listing it in `facts_added` or `facts_modified`); otherwise the propagation rule
///   `child <= min(parent, own)` is broken;
/// - a fact whose source changes is recorded by a new step, and its new source is an agent of
///   the trace; a reworded text without a recording step is a warning (the spec's Example 1
///   rewords F2 that way).
///
/// Finding paths point into the later document of the pair.
pub fn check_chain(documents: &[LctlDocument]) -> Report {
    let mut report = Report::default();
    for (index, doc) in documents.iter().enumerate() {
        check_document_into(doc, index, &mut report);
    }
    let mut ever_critical: Vec<(FactId, usize)> = Vec::new();
    let mut already_lost: BTreeSet<FactId> = BTreeSet::new();
    for (index, doc) in documents.iter().enumerate() {
        for (id, origin) in &ever_critical {
            if !doc.facts.contains(id) && already_lost.insert(id.clone()) {
                report.push(
                    Rule::CriticalFactLost,
                    Severity::Error,
                    index,
                    "facts",
                    format!("critical fact {id} (critical in document {}) disappeared", origin + 1),
                );
            }
        }
        for id in doc.critical_facts() {
            if !ever_critical.iter().any(|(known, _)| known == id) {
                ever_critical.push((id.clone(), index));
            }
        }
        if index > 0 {
            compare_hops(&documents[index - 1], doc, index, &mut report);
        }
    }
    dedupe_source_findings(&mut report);
    report
}

fn compare_hops(previous: &LctlDocument, next: &LctlDocument, index: usize, report: &mut Report) {
    if let (Some(before), Some(after)) = (previous.chain_id(), next.chain_id())
        && before != after
    {
        report.push(
            Rule::ChainIdMismatch,
            Severity::Error,
            index,
            "chain.id",
            format!("chain {after} follows a document of chain {before}"),
        );
    }
    let steps = (previous.chain.as_ref().and_then(|c| c.step), next.chain.as_ref().and_then(|c| c.step));
    if let (Some(before), Some(after)) = steps
        && after != before + 1
    {
        let what = if after <= before { "does not advance past" } else { "skips ahead of" };
        report.push(
            Rule::HopStepGap,
            Severity::Error,
            index,
            "chain.step",
            format!("hop step {after} {what} the previous hop's step {before}"),
        );
    }
    for old in &previous.trace {
        let kept = next.trace.iter().any(|new| new.step == old.step && new.agent == old.agent);
        if !kept {
            report.push(
                Rule::TraceHistoryLost,
                Severity::Error,
                index,
                "trace",
                format!("step {} by {} from the previous hop is missing", old.step, old.agent),
            );
        }
    }
    let boundary = previous.last_trace_step().unwrap_or(0);
    let new_steps: Vec<_> = next.trace.iter().filter(|s| s.step > boundary).collect();
    let agents = next.trace_agents();
    for (id, child) in next.facts.iter() {
        let Some(parent) = previous.facts.get(id) else {
            continue;
        };
        let recorded = new_steps.iter().any(|step| step.touches(id));
        if recorded {
            continue;
        }
        let path = format!("facts.{id}");
        let source_changed = parent.source != child.source;
        if source_changed
            && let Some(modifier) = &child.source
            && !agents.contains(&modifier.as_str())
        {
            report.push(
                Rule::FactModifiedByUnknownAgent,
                Severity::Error,
                index,
                format!("{path}.source"),
                format!("{id} was modified by {modifier}, who never appears in the trace"),
            );
            continue;
        }
        // Nobody re-assessed a carried fact, so its own confidence is the parent's and the
        // propagation bound min(parent, own) is just the parent.
        if crate::check_propagation(parent.confidence, parent.confidence, child.confidence).is_err() {
            report.push(
                Rule::ConfidenceRoseUnverified,
                Severity::Error,
                index,
                format!("{path}.confidence"),
                format!(
                    "{id} rose from {} to {} but no step at this hop verified it",
                    parent.confidence, child.confidence
                ),
            );
        } else if source_changed {
            report.push(
                Rule::FactChangedUnrecorded,
                Severity::Error,
                index,
                format!("{path}.source"),
                format!("{id} changed hands but no step at this hop lists it in facts_modified"),
            );
        } else if parent.text != child.text {
            // The spec's own Example 1 rewords F2 between hops without recording it, so a
            // rewording is worth a look but not a failure.
            report.push(
                Rule::FactChangedUnrecorded,
                Severity::Warning,
                index,
                format!("{path}.text"),
                format!(
                    "{id} was reworded but no step at this hop lists it in facts_modified; check its meaning survived"
                ),
            );
        }
    }
}

/// A fact modified by an unknown agent is also attributed to an unknown source; one
/// diagnostic per place is enough, and the chain-level one says more.
fn dedupe_source_findings(report: &mut Report) {
    let chain_level: Vec<(usize, String)> =
        report.by_rule(Rule::FactModifiedByUnknownAgent).map(|f| (f.document, f.path.clone())).collect();
    report
        .findings
        .retain(|f| f.rule != Rule::UnknownFactSource || !chain_level.contains(&(f.document, f.path.clone())));
}
