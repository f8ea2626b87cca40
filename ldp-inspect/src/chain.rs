//! LCTL chains for the page: a task's lineage as a chain, or a pasted document, checked as `ldp lctl check` checks
//! it and laid out as steps with the findings that concern each one.

use ldp_lctl::{LctlDocument, Report, Severity, check_chain};
use serde::Serialize;
use serde_json::{Value, json};

use crate::InspectError;

/// The largest LCTL text the page may send (a chain is a few kilobytes; this bounds the parser's work).
pub const MAX_LCTL_BYTES: usize = 1024 * 1024;

/// A chain as the page draws it.
#[derive(Debug, Clone, Serialize)]
pub struct ChainView {
    /// Whether the chain breaks no rule (warnings and notes allowed).
    pub ok: bool,
    /// The chain's id, source and target, when the document has a `chain` block.
    pub chain: Value,
    /// The trace, in order.
    pub steps: Vec<StepView>,
    /// Findings that point at no step (the facts registry, the handoff, the chain block).
    pub other_findings: Vec<FindingView>,
    /// Parallel groups, described.
    pub parallel_groups: Vec<String>,
    /// Where the chain failed, described.
    pub failures: Vec<Value>,
    /// Counts by severity.
    pub errors: usize,
    /// Warnings.
    pub warnings: usize,
    /// Notes.
    pub notes: usize,
    /// The document's canonical YAML, for copying.
    pub yaml: String,
}

/// One trace step.
#[derive(Debug, Clone, Serialize)]
pub struct StepView {
    /// Its position in the trace, from 0.
    pub index: usize,
    /// Its step number (parallel branches share one).
    pub step: u32,
    /// The agent.
    pub agent: String,
    /// What it did.
    pub action: Option<String>,
    /// Its confidence, 0-1.
    pub confidence: Option<f64>,
    /// Whether it is one branch of a parallel group.
    pub parallel: bool,
    /// Whether it recorded a failure.
    pub failed: bool,
    /// The error it recorded.
    pub error: Option<String>,
    /// Facts it added.
    pub facts_added: Vec<String>,
    /// Facts it modified.
    pub facts_modified: Vec<String>,
    /// The findings whose path is in this step.
    pub findings: Vec<FindingView>,
}

/// One `lctl check` finding.
#[derive(Debug, Clone, Serialize)]
pub struct FindingView {
    /// `error`, `warning` or `note`.
    pub severity: String,
    /// The rule's name.
    pub rule: String,
    /// Where in the document.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

/// Parses `text` (LCTL YAML) and checks it.
pub fn from_text(text: &str) -> Result<ChainView, InspectError> {
    if text.len() > MAX_LCTL_BYTES {
        return Err(InspectError::BadRequest(format!(
            "the LCTL document is {} bytes; the inspector reads at most {MAX_LCTL_BYTES}",
            text.len()
        )));
    }
    if text.trim().is_empty() {
        return Err(InspectError::BadRequest("paste or upload an LCTL document first".into()));
    }
    let doc =
        LctlDocument::from_yaml(text).map_err(|e| InspectError::BadRequest(format!("not an LCTL document: {e}")))?;
    Ok(view(&doc))
}

/// Checks `doc` and lays it out.
pub fn view(doc: &LctlDocument) -> ChainView {
    let report = check_chain(std::slice::from_ref(doc));
    let findings: Vec<(Option<usize>, FindingView)> = report
        .findings
        .iter()
        .map(|f| {
            let finding = FindingView {
                severity: f.severity.to_string(),
                rule: f.rule.name().to_owned(),
                path: f.path.clone(),
                message: f.message.clone(),
            };
            (trace_index(&f.path), finding)
        })
        .collect();
    let steps = doc
        .trace
        .iter()
        .enumerate()
        .map(|(index, s)| StepView {
            index,
            step: s.step,
            agent: s.agent.clone(),
            action: s.action.clone(),
            confidence: s.confidence.map(|c| c.value()),
            parallel: s.parallel,
            failed: s.is_failed(),
            error: s.error.clone(),
            facts_added: s.facts_added.iter().map(|f| f.as_str().to_owned()).collect(),
            facts_modified: s.facts_modified.iter().map(|f| f.as_str().to_owned()).collect(),
            findings: findings.iter().filter(|(i, _)| *i == Some(index)).map(|(_, f)| f.clone()).collect(),
        })
        .collect();
    let placed = |i: &Option<usize>| i.is_some_and(|i| i < doc.trace.len());
    let other_findings = findings.iter().filter(|(i, _)| !placed(i)).map(|(_, f)| f.clone()).collect();
    let count = |severity| report.findings.iter().filter(|f| f.severity == severity).count();
    let chain = doc.chain.as_ref().map_or(Value::Null, |c| {
        json!({ "id": c.id, "source": c.source, "target": c.target, "status": c.status.as_ref().map(|s| s.as_str()) })
    });
    ChainView {
        ok: !report.has_errors(),
        chain,
        steps,
        other_findings,
        parallel_groups: groups(&report),
        failures: report
            .failures
            .iter()
            .map(|(_, f)| json!({ "failed_at_step": f.failed_at_step, "agent": f.agent, "error": f.error }))
            .collect(),
        errors: count(Severity::Error),
        warnings: count(Severity::Warning),
        notes: count(Severity::Note),
        yaml: doc.to_yaml().unwrap_or_default(),
    }
}

fn groups(report: &Report) -> Vec<String> {
    report
        .parallel_groups
        .iter()
        .map(|(_, g)| {
            let agents: Vec<&str> = g.branches.iter().map(|b| b.agent.as_str()).collect();
            format!("step {}: {} in parallel", g.step, agents.join(", "))
        })
        .collect()
}

/// The trace position a finding's path names (`trace[3].confidence` -> 3), if it names one.
fn trace_index(path: &str) -> Option<usize> {
    let rest = path.strip_prefix("trace[")?;
    rest.split_once(']')?.0.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_name_trace_positions() {
        assert_eq!(trace_index("trace[3].confidence"), Some(3));
        assert_eq!(trace_index("trace[0]"), Some(0));
        assert_eq!(trace_index("facts.F1"), None);
        assert_eq!(trace_index("trace[x]"), None);
    }

    #[test]
    fn garbage_is_a_message() {
        assert!(matches!(from_text("  "), Err(InspectError::BadRequest(_))));
        assert!(matches!(from_text("lctl: [unclosed"), Err(InspectError::BadRequest(m)) if m.contains("LCTL")));
    }
}
