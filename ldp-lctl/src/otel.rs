//! LCTL as OpenTelemetry (feature `otel`): one shape for an LCTL chain, used both by `ldp lctl export --otlp` (a
//! trace of its own: a chain span and a child span per step) and by a delegate attaching the LCTL trace of a task to
//! the task's span ([`attach`]: the chain's attributes on the span, one span event per step).
//!
//! The shape ([`shape`]): the files are the hops of one chain, in order; a later hop's copy of a step or a fact
//! replaces an earlier one. The chain carries `lctl.documents`, `lctl.steps`, `lctl.chain.*` (id, source, target,
//! status, failed step, parallel merge), `lctl.purpose`, `lctl.handoff.*`, `lctl.analysis.*` and the facts no step
//! claims; each step (named `lctl.step <n> <agent>`) carries `lctl.step`, `lctl.agent`, `lctl.parallel`,
//! `lctl.action`, `lctl.confidence`, `lctl.duration_ms`, `lctl.error`, `lctl.facts_added` / `_modified` /
//! `_at_failure`, and each fact it produced as `lctl.fact.<id>.text`, `.confidence`, `.source`.
//!
//! LCTL records durations, not times: [`StepShape::start_ms`] and [`StepShape::end_ms`] lay the steps end to end
//! from the chain's start (steps marked `parallel` that follow each other start together).

use std::collections::{BTreeMap, BTreeSet};

use opentelemetry::{Array, KeyValue, StringValue, Value};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use crate::{ChainStatus, Fact, LctlDocument, TraceStep};

/// An LCTL chain as OpenTelemetry data.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ChainShape {
    /// The chain's id (`unnamed` when no document names one).
    pub chain_id: String,
    /// The chain's attributes.
    pub attributes: Vec<KeyValue>,
    /// Whether the chain failed (a failed step recorded, or status `failed`).
    pub failed: bool,
    /// The steps, by step number.
    pub steps: Vec<StepShape>,
    /// The chain's length: the end of the last step, in ms from its start.
    pub total_ms: u64,
}

/// One step of a [`ChainShape`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct StepShape {
    /// `lctl.step <n> <agent>`.
    pub name: String,
    /// The step's attributes.
    pub attributes: Vec<KeyValue>,
    /// The step's `error`, if it failed.
    pub error: Option<String>,
    /// When it starts, in ms from the chain's start.
    pub start_ms: u64,
    /// When it ends, in ms from the chain's start.
    pub end_ms: u64,
}

/// The shape of the chain whose hops are `documents`, in order.
pub fn shape(documents: &[LctlDocument]) -> ChainShape {
    // The latest hop's view of each step and fact.
    let mut steps: BTreeMap<u32, &TraceStep> = BTreeMap::new();
    let mut facts: BTreeMap<&str, &Fact> = BTreeMap::new();
    for doc in documents {
        for step in &doc.trace {
            steps.insert(step.step, step);
        }
        for (id, fact) in doc.facts.iter() {
            facts.insert(id.as_str(), fact);
        }
    }
    let chain = documents.iter().rev().find_map(|d| d.chain.as_ref());
    let last = documents.last();
    let (times, total_ms) = lay_out(steps.values().copied());

    let mut root = vec![KeyValue::new("lctl.documents", len_i64(documents.len()))];
    root.push(KeyValue::new("lctl.steps", len_i64(steps.len())));
    let chain_id = chain.map_or_else(|| "unnamed".to_owned(), |c| c.id.clone());
    root.push(KeyValue::new("lctl.chain.id", chain_id.clone()));
    if let Some(chain) = chain {
        push_opt(&mut root, "lctl.chain.source", chain.source.as_deref());
        push_opt(&mut root, "lctl.chain.target", chain.target.as_deref());
        push_opt(&mut root, "lctl.chain.status", chain.status.as_ref().map(|s| s.as_str()));
        if let Some(step) = chain.failed_at_step {
            root.push(KeyValue::new("lctl.chain.failed_at_step", i64::from(step)));
        }
        if let Some(merge) = chain.parallel_merge {
            root.push(KeyValue::new("lctl.chain.parallel_merge", merge));
        }
    }
    if let Some(doc) = last {
        push_opt(&mut root, "lctl.purpose", doc.purpose.as_ref().map(|p| p.as_str()));
        if let Some(handoff) = &doc.handoff {
            root.push(ids("lctl.handoff.critical_facts", handoff.critical_facts.iter().map(|f| f.as_str())));
            root.push(ids("lctl.handoff.context_facts", handoff.context_facts.iter().map(|f| f.as_str())));
            root.push(ids("lctl.handoff.warnings", handoff.warnings.iter().map(String::as_str)));
        }
        if let Some(analysis) = &doc.analysis {
            push_opt(&mut root, "lctl.analysis.root_cause", analysis.root_cause.as_deref());
            push_opt(&mut root, "lctl.analysis.recommendation", analysis.recommendation.as_deref());
            if let Some(c) = analysis.confidence_in_analysis {
                root.push(KeyValue::new("lctl.analysis.confidence", c.value()));
            }
        }
    }
    let failed = chain.is_some_and(|c| c.failed_at_step.is_some() || c.status == Some(ChainStatus::Failed));

    let mut claimed = BTreeSet::new();
    let mut shaped = Vec::with_capacity(steps.len());
    for (step, (start_ms, end_ms)) in steps.values().zip(times) {
        let mut attrs = vec![
            KeyValue::new("lctl.step", i64::from(step.step)),
            KeyValue::new("lctl.agent", step.agent.clone()),
            KeyValue::new("lctl.parallel", step.parallel),
        ];
        push_opt(&mut attrs, "lctl.action", step.action.as_deref());
        if let Some(c) = step.confidence {
            attrs.push(KeyValue::new("lctl.confidence", c.value()));
        }
        if let Some(ms) = step.duration_ms {
            attrs.push(KeyValue::new("lctl.duration_ms", i64::try_from(ms).unwrap_or(i64::MAX)));
        }
        push_opt(&mut attrs, "lctl.error", step.error.as_deref());
        attrs.push(ids("lctl.facts_added", step.facts_added.iter().map(|f| f.as_str())));
        attrs.push(ids("lctl.facts_modified", step.facts_modified.iter().map(|f| f.as_str())));
        if !step.facts_at_failure.is_empty() {
            attrs.push(ids("lctl.facts_at_failure", step.facts_at_failure.iter().map(|f| f.as_str())));
        }
        // The facts this step produced: those naming it, and those it lists without naming a step.
        for (id, fact) in &facts {
            let listed = step.facts_added.iter().chain(&step.facts_modified).any(|f| f.as_str() == *id);
            if fact.step == Some(step.step) || (fact.step.is_none() && listed) {
                claimed.insert(*id);
                fact_attrs(&mut attrs, id, fact);
            }
        }
        shaped.push(StepShape {
            name: format!("lctl.step {} {}", step.step, step.agent),
            attributes: attrs,
            error: step.error.clone(),
            start_ms,
            end_ms,
        });
    }
    for (id, fact) in &facts {
        if !claimed.contains(id) {
            fact_attrs(&mut root, id, fact);
        }
    }
    ChainShape { chain_id, attributes: root, failed, steps: shaped, total_ms }
}

/// Attaches the LCTL trace of a task (its chain's hops, in order) to `span`, normally the task's span: inside a
/// `Delegate::execute`, `tracing::Span::current()` is the `ldp.handle TASK_SUBMIT` span of the task. The chain's
/// attributes go on the span, and each step becomes a span event named and attributed as [`shape`] gives it (with
/// `lctl.start_ms` and `lctl.end_ms`, its place in the chain). The span's status is left alone: the task may well
/// succeed with a chain that recorded a failure, which `lctl.chain.status` says. Returns the number of events added.
///
/// Without an OpenTelemetry layer in the subscriber (`ldp_transport_http::otlp`, `tracing-opentelemetry`), this
/// does nothing.
pub fn attach(span: &tracing::Span, documents: &[LctlDocument]) -> usize {
    let shape = shape(documents);
    for kv in shape.attributes {
        span.set_attribute(kv.key, kv.value);
    }
    let events = shape.steps.len();
    for step in shape.steps {
        let mut attributes = step.attributes;
        attributes.push(KeyValue::new("lctl.start_ms", i64::try_from(step.start_ms).unwrap_or(i64::MAX)));
        attributes.push(KeyValue::new("lctl.end_ms", i64::try_from(step.end_ms).unwrap_or(i64::MAX)));
        span.add_event(step.name, attributes);
    }
    events
}

/// Each step's start and end in ms from the chain's start, and the chain's length: end to end; consecutive
/// `parallel` steps start together.
fn lay_out<'a>(steps: impl Iterator<Item = &'a TraceStep>) -> (Vec<(u64, u64)>, u64) {
    let mut offsets = Vec::new();
    let mut cursor = 0_u64;
    let mut group_start = 0_u64;
    let mut group_end = 0_u64;
    let mut in_group = false;
    for step in steps {
        let ms = step.duration_ms.unwrap_or(0);
        if step.parallel {
            if !in_group {
                group_start = cursor;
                group_end = cursor;
                in_group = true;
            }
            offsets.push((group_start, group_start.saturating_add(ms)));
            group_end = group_end.max(group_start.saturating_add(ms));
            cursor = group_end;
        } else {
            in_group = false;
            offsets.push((cursor, cursor.saturating_add(ms)));
            cursor = cursor.saturating_add(ms);
        }
    }
    (offsets, cursor)
}

fn fact_attrs(attrs: &mut Vec<KeyValue>, id: &str, fact: &Fact) {
    attrs.push(KeyValue::new(format!("lctl.fact.{id}.text"), fact.text.clone()));
    attrs.push(KeyValue::new(format!("lctl.fact.{id}.confidence"), fact.confidence.value()));
    if let Some(source) = &fact.source {
        attrs.push(KeyValue::new(format!("lctl.fact.{id}.source"), source.clone()));
    }
}

fn push_opt(attrs: &mut Vec<KeyValue>, key: &'static str, value: Option<&str>) {
    if let Some(value) = value {
        attrs.push(KeyValue::new(key, value.to_owned()));
    }
}

fn ids<'a>(key: &'static str, values: impl Iterator<Item = &'a str>) -> KeyValue {
    let values: Vec<StringValue> = values.map(|v| StringValue::from(v.to_owned())).collect();
    KeyValue::new(key, Value::Array(Array::String(values)))
}

fn len_i64(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}
