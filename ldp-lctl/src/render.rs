//! Rendering a trace: Mermaid, Graphviz DOT, and a plain-text timeline.
//!
//! All three share one reading of the trace: consecutive steps with the same number form a
//! group (a parallel group when it has several members), every member of a group feeds every
//! member of the next group, and an edge carries the confidence of the step it leaves.

use std::fmt::Write as _;

use crate::model::{ChainStatus, LctlDocument, TraceStep};
use crate::rules::{MergePoint, parallel_groups};

/// Output formats of [`render`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RenderFormat {
    /// A Mermaid `flowchart`.
    Mermaid,
    /// A Graphviz `digraph`.
    Dot,
    /// A plain-text timeline.
    Timeline,
}

/// Renders the document's trace in `format`.
///
/// A document without a trace (the minimal format) is drawn as its one hop: the sending agent (`chain.from`), at
/// `chain.step`, with the facts it hands over, then the receiver.
pub fn render(doc: &LctlDocument, format: RenderFormat) -> String {
    match format {
        RenderFormat::Mermaid => render_mermaid(doc),
        RenderFormat::Dot => render_dot(doc),
        RenderFormat::Timeline => render_timeline(doc),
    }
}

/// Index ranges into `trace` of steps sharing a number, in order.
fn step_groups(trace: &[TraceStep]) -> Vec<std::ops::Range<usize>> {
    let mut groups = Vec::new();
    let mut start = 0;
    for index in 1..=trace.len() {
        if index == trace.len() || trace[index].step != trace[start].step {
            groups.push(start..index);
            start = index;
        }
    }
    groups
}

struct Layout<'a> {
    doc: &'a LctlDocument,
    groups: Vec<std::ops::Range<usize>>,
    merge_indices: Vec<usize>,
}

/// The document to draw: itself, or for a minimal document (no trace) one with the sending agent as its only step,
/// which established every fact of the registry.
fn drawable(doc: &LctlDocument) -> std::borrow::Cow<'_, LctlDocument> {
    let source = doc.chain.as_ref().and_then(|c| c.source.clone());
    match source {
        Some(agent) if doc.trace.is_empty() => {
            let mut step = TraceStep::new(doc.chain.as_ref().and_then(|c| c.step).unwrap_or(1), agent);
            step.facts_added = doc.facts.iter().map(|(id, _)| id.clone()).collect();
            let mut drawn = doc.clone();
            drawn.trace.push(step);
            std::borrow::Cow::Owned(drawn)
        }
        _ => std::borrow::Cow::Borrowed(doc),
    }
}

/// The facts a step added (`+F1 0.95`) and modified (`~F1 0.95`), with their text when `with_text`.
fn fact_lines(doc: &LctlDocument, step: &TraceStep, with_text: bool) -> Vec<String> {
    let added = step.facts_added.iter().map(|id| ('+', id));
    let modified = step.facts_modified.iter().map(|id| ('~', id));
    added
        .chain(modified)
        .map(|(mark, id)| match doc.facts.get(id) {
            Some(fact) if with_text => format!("{mark}{id} {}: {}", fact.confidence, fact.text),
            Some(fact) => format!("{mark}{id} {}", fact.confidence),
            None => format!("{mark}{id}"),
        })
        .collect()
}

impl<'a> Layout<'a> {
    fn new(doc: &'a LctlDocument) -> Self {
        let merge_indices = parallel_groups(doc)
            .into_iter()
            .filter_map(|group| match group.merge {
                Some(MergePoint::TraceStep { trace_index, .. }) => Some(trace_index),
                _ => None,
            })
            .collect();
        Layout { doc, groups: step_groups(&doc.trace), merge_indices }
    }

    fn is_failed(&self, index: usize) -> bool {
        let step = &self.doc.trace[index];
        let chain = self.doc.chain.as_ref();
        step.is_failed()
            || chain.and_then(|c| c.failed_at_step) == Some(step.step)
                && chain.and_then(|c| c.status.as_ref()) != Some(&ChainStatus::Completed)
    }

    fn is_merge(&self, index: usize) -> bool {
        self.merge_indices.contains(&index)
    }

    fn receiver(&self) -> Option<String> {
        let chain = self.doc.chain.as_ref()?;
        let target = chain.target.clone()?;
        Some(if chain.parallel_merge == Some(true) { format!("{target} (merge)") } else { target })
    }

    /// (from, to, label) between trace indices; `None` as `to` is the receiver.
    fn edges(&self) -> Vec<(usize, Option<usize>, String)> {
        let mut edges = Vec::new();
        for pair in self.groups.windows(2) {
            for from in pair[0].clone() {
                for to in pair[1].clone() {
                    edges.push((from, Some(to), confidence_label(&self.doc.trace[from])));
                }
            }
        }
        if self.receiver().is_some()
            && let Some(last) = self.groups.last()
        {
            for from in last.clone() {
                edges.push((from, None, confidence_label(&self.doc.trace[from])));
            }
        }
        edges
    }

    fn node_text(&self, index: usize) -> (String, String) {
        let step = &self.doc.trace[index];
        let mut title = format!("{}: {}", step.step, step.agent);
        if let Some(ms) = step.duration_ms {
            let _ = write!(title, " ({ms} ms)");
        }
        if self.is_failed(index) {
            title.push_str(" [FAILED]");
        } else if self.is_merge(index) {
            title.push_str(" [merge]");
        }
        let mut detail = step.action.clone().unwrap_or_default();
        if let Some(error) = &step.error {
            if !detail.is_empty() {
                detail.push('\n');
            }
            detail.push_str(error);
        }
        // The facts themselves with their text only where there is no trace to tell the story (the minimal format).
        let with_text = self.doc.trace.len() == 1 && step.action.is_none();
        for line in fact_lines(self.doc, step, with_text) {
            if !detail.is_empty() {
                detail.push('\n');
            }
            detail.push_str(&line);
        }
        (title, detail)
    }
}

fn confidence_label(step: &TraceStep) -> String {
    step.confidence.map_or_else(|| "?".to_owned(), |c| c.to_string())
}

fn mermaid_escape(text: &str) -> String {
    text.replace('"', "#quot;").replace('<', "#lt;").replace('>', "#gt;").replace('\n', "<br/>")
}

/// Renders the trace as a Mermaid flowchart.
pub fn render_mermaid(doc: &LctlDocument) -> String {
    let doc = &*drawable(doc);
    let layout = Layout::new(doc);
    let mut out = String::from("flowchart TD\n");
    let node = |out: &mut String, index: usize, indent: &str| {
        let (title, detail) = layout.node_text(index);
        let label = if detail.is_empty() {
            mermaid_escape(&title)
        } else {
            format!("{}<br/>{}", mermaid_escape(&title), mermaid_escape(&detail))
        };
        let _ = writeln!(out, "{indent}s{index}[\"{label}\"]");
    };
    for range in &layout.groups {
        if range.len() > 1 {
            let step = doc.trace[range.start].step;
            let _ = writeln!(out, "    subgraph parallel_{step}[\"parallel step {step}\"]");
            for index in range.clone() {
                node(&mut out, index, "        ");
            }
            out.push_str("    end\n");
        } else {
            node(&mut out, range.start, "    ");
        }
    }
    if let Some(receiver) = layout.receiver() {
        let _ = writeln!(out, "    next([\"next: {}\"])", mermaid_escape(&receiver));
    }
    for (from, to, label) in layout.edges() {
        let to = to.map_or_else(|| "next".to_owned(), |to| format!("s{to}"));
        let _ = writeln!(out, "    s{from} -->|\"{label}\"| {to}");
    }
    let failed: Vec<String> = (0..doc.trace.len()).filter(|&i| layout.is_failed(i)).map(|i| format!("s{i}")).collect();
    let merges: Vec<String> = layout.merge_indices.iter().map(|i| format!("s{i}")).collect();
    if !failed.is_empty() {
        out.push_str("    classDef failed fill:#f8d7da,stroke:#c00,stroke-width:2px,color:#000\n");
        let _ = writeln!(out, "    class {} failed", failed.join(","));
    }
    if !merges.is_empty() {
        out.push_str("    classDef merge fill:#e2e3f3,stroke:#336,stroke-width:2px,color:#000\n");
        let _ = writeln!(out, "    class {} merge", merges.join(","));
    }
    out
}

fn dot_escape(text: &str) -> String {
    text.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// Renders the trace as a Graphviz digraph.
pub fn render_dot(doc: &LctlDocument) -> String {
    let doc = &*drawable(doc);
    let layout = Layout::new(doc);
    let name = doc.chain_id().unwrap_or("lctl");
    let mut out =
        format!("digraph \"{}\" {{\n    rankdir=TB;\n    node [shape=box, style=rounded];\n", dot_escape(name));
    let node = |out: &mut String, index: usize, indent: &str| {
        let (title, detail) = layout.node_text(index);
        let label = if detail.is_empty() { title } else { format!("{title}\n{detail}") };
        let mut attributes = format!("label=\"{}\"", dot_escape(&label));
        if layout.is_failed(index) {
            attributes.push_str(", color=red, style=\"rounded,filled\", fillcolor=\"#f8d7da\"");
        } else if layout.is_merge(index) {
            attributes.push_str(", peripheries=2");
        }
        let _ = writeln!(out, "{indent}s{index} [{attributes}];");
    };
    for range in &layout.groups {
        if range.len() > 1 {
            let step = doc.trace[range.start].step;
            let _ = writeln!(
                out,
                "    subgraph cluster_parallel_{step} {{\n        label=\"parallel step {step}\";\n        style=dashed;"
            );
            for index in range.clone() {
                node(&mut out, index, "        ");
            }
            out.push_str("    }\n");
        } else {
            node(&mut out, range.start, "    ");
        }
    }
    if let Some(receiver) = layout.receiver() {
        let _ = writeln!(out, "    next [label=\"next: {}\", shape=ellipse, style=dashed];", dot_escape(&receiver));
    }
    for (from, to, label) in layout.edges() {
        let to = to.map_or_else(|| "next".to_owned(), |to| format!("s{to}"));
        let _ = writeln!(out, "    s{from} -> {to} [label=\"{label}\"];");
    }
    out.push_str("}\n");
    out
}

/// Renders the trace as a plain-text timeline that marks where confidence degrades.
///
/// Each step is compared with the weakest step of the group before it (the least certain
/// input it could have received); a drop is marked `v`, a rise `^`, and a step that falls into
/// a lower band of the confidence table is called out.
pub fn render_timeline(doc: &LctlDocument) -> String {
    let doc = &*drawable(doc);
    let layout = Layout::new(doc);
    let mut out = String::new();
    let chain = doc.chain.as_ref();
    let _ = write!(out, "chain {}", chain.map_or("(no chain id)", |c| c.id.as_str()));
    if let Some(purpose) = &doc.purpose {
        let _ = write!(out, " ({})", purpose.as_str());
    }
    if let Some(status) = chain.and_then(|c| c.status.as_ref()) {
        let _ = write!(out, " status {}", status.as_str());
    }
    out.push('\n');
    let agent_width = doc.trace.iter().map(|s| s.agent.chars().count()).max().unwrap_or(5).max(5);
    let _ = writeln!(out, "step  {:<agent_width$}  conf  {:<12}  change    action", "agent", "confidence");
    let mut degradations = Vec::new();
    let mut previous_floor: Option<crate::Confidence> = None;
    for range in &layout.groups {
        let parallel = range.len() > 1;
        for index in range.clone() {
            let step = &doc.trace[index];
            let bar = step.confidence.map_or_else(
                || "[  ?  ]".to_owned(),
                |c| {
                    let filled = (c.value() * 10.0).round() as usize;
                    format!("[{}{}]", "#".repeat(filled), ".".repeat(10 - filled.min(10)))
                },
            );
            let change = match (previous_floor, step.confidence) {
                (Some(before), Some(now)) => {
                    let delta = now.value() - before.value();
                    if delta < -0.005 {
                        let note = format!("v {delta:+.2}");
                        if now.band() < before.band() {
                            degradations.push(format!(
                                "step {} {}: {before} -> {now} ({} -> {})",
                                step.step,
                                step.agent,
                                before.band().meaning(),
                                now.band().meaning()
                            ));
                        } else {
                            degradations.push(format!("step {} {}: {before} -> {now}", step.step, step.agent));
                        }
                        note
                    } else if delta > 0.005 {
                        format!("^ {delta:+.2}")
                    } else {
                        "=".to_owned()
                    }
                }
                _ => String::new(),
            };
            let marker = if parallel { "|" } else { " " };
            let mut action = step.action.clone().unwrap_or_default();
            if layout.is_merge(index) {
                action = format!("[merge] {action}");
            }
            if layout.is_failed(index) && !action.starts_with("FAILED") {
                action = format!("FAILED {action}");
            }
            if let Some(ms) = step.duration_ms {
                let _ = write!(action, " ({ms} ms)");
            }
            let _ = writeln!(
                out,
                "{:>3}{marker}  {:<agent_width$}  {:<4}  {bar}  {change:<8}  {}",
                step.step,
                step.agent,
                step.confidence.map_or_else(|| "?".to_owned(), |c| c.to_string()),
                action.trim_start(),
            );
            let with_text = doc.trace.len() == 1 && step.action.is_none();
            for line in fact_lines(doc, step, with_text) {
                let _ = writeln!(out, "      {:<agent_width$}  {line}", "");
            }
            if let Some(error) = &step.error {
                let _ = writeln!(out, "      {:<agent_width$}  error: {error}", "");
            }
            if !step.facts_at_failure.is_empty() {
                let ids: Vec<&str> = step.facts_at_failure.iter().map(|f| f.as_str()).collect();
                let _ = writeln!(out, "      {:<agent_width$}  facts at failure: {}", "", ids.join(", "));
            }
        }
        previous_floor =
            range.clone().filter_map(|i| doc.trace[i].confidence).reduce(crate::Confidence::min).or(previous_floor);
    }
    if let Some(receiver) = layout.receiver() {
        let _ = writeln!(out, "  ->  {receiver}");
    }
    if degradations.is_empty() {
        out.push_str("confidence never degrades between steps\n");
    } else {
        out.push_str("confidence degrades at:\n");
        for line in degradations {
            let _ = writeln!(out, "  {line}");
        }
    }
    out
}
