//! `ldp lctl export --otlp URL FILE...`: an LCTL chain as OpenTelemetry spans, sent over OTLP/HTTP.
//!
//! The files are the hops of one chain, in order (as `lctl check` reads them); a later hop's copy of a step or a
//! fact replaces an earlier one. One trace: a root span for the chain (`lctl.chain <id>`: id, source, target, status,
//! purpose, handoff, analysis, the facts no step claims), and one child span per step (`lctl.step <n> <agent>`: action,
//! confidence, duration, the facts it added, modified or held at failure, each such fact's text, confidence and
//! source as `lctl.fact.<id>.*` attributes). A step with an `error` has status ERROR, as has a failed chain.
//!
//! LCTL records durations, not times: the steps are laid end to end, ending now (steps marked `parallel` that follow
//! each other start together), so a trace viewer shows their lengths and order.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use ldp_lctl::{ChainStatus, Fact, LctlDocument, TraceStep};
use ldp_transport_http::otlp::OtlpExport;
use opentelemetry::trace::{Span as _, SpanKind, Status, TraceContextExt, Tracer as _};
use opentelemetry::{Array, Context, KeyValue, StringValue, Value};

use crate::exit;

/// Exports the chain in `files` to the collector at `otlp`.
pub fn run(otlp: &str, files: &[PathBuf]) -> ExitCode {
    let mut documents = Vec::new();
    for file in files {
        match crate::lctl::load_document(file) {
            Ok(doc) => documents.push(doc),
            Err(code) => return code,
        }
    }
    let export = match OtlpExport::new(otlp, "ldp-lctl") {
        Ok(export) => export,
        Err(e) => {
            eprintln!("ldp lctl export: --otlp {otlp:?}: {e}");
            return ExitCode::from(exit::USAGE);
        }
    };
    let (trace_id, spans) = export_chain(&export, &documents, SystemTime::now());
    match export.shutdown() {
        Ok(()) => {
            println!("exported {spans} spans as trace {trace_id} to {}", ldp_transport_http::otlp::traces_url(otlp));
            ExitCode::from(exit::OK)
        }
        Err(e) => {
            eprintln!("ldp lctl export: {e}");
            ExitCode::from(exit::FAILED)
        }
    }
}

/// Builds and ends the spans (the exporter sends them); returns the trace id and the number of spans.
fn export_chain(export: &OtlpExport, documents: &[LctlDocument], end: SystemTime) -> (String, usize) {
    let tracer = export.tracer();
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
    let times = lay_out(steps.values().copied(), end);
    let start = times.first().map_or(end, |(s, _)| *s);

    let mut claimed = std::collections::BTreeSet::new();
    let mut root_attrs = vec![KeyValue::new("lctl.documents", len_i64(documents.len()))];
    root_attrs.push(KeyValue::new("lctl.steps", len_i64(steps.len())));
    let chain_id = chain.map_or_else(|| "unnamed".to_owned(), |c| c.id.clone());
    root_attrs.push(KeyValue::new("lctl.chain.id", chain_id.clone()));
    if let Some(chain) = chain {
        push_opt(&mut root_attrs, "lctl.chain.source", chain.source.as_deref());
        push_opt(&mut root_attrs, "lctl.chain.target", chain.target.as_deref());
        push_opt(&mut root_attrs, "lctl.chain.status", chain.status.as_ref().map(|s| s.as_str()));
        if let Some(step) = chain.failed_at_step {
            root_attrs.push(KeyValue::new("lctl.chain.failed_at_step", i64::from(step)));
        }
        if let Some(merge) = chain.parallel_merge {
            root_attrs.push(KeyValue::new("lctl.chain.parallel_merge", merge));
        }
    }
    if let Some(doc) = last {
        push_opt(&mut root_attrs, "lctl.purpose", doc.purpose.as_ref().map(|p| p.as_str()));
        if let Some(handoff) = &doc.handoff {
            root_attrs.push(ids("lctl.handoff.critical_facts", handoff.critical_facts.iter().map(|f| f.as_str())));
            root_attrs.push(ids("lctl.handoff.context_facts", handoff.context_facts.iter().map(|f| f.as_str())));
            root_attrs.push(ids("lctl.handoff.warnings", handoff.warnings.iter().map(String::as_str)));
        }
        if let Some(analysis) = &doc.analysis {
            push_opt(&mut root_attrs, "lctl.analysis.root_cause", analysis.root_cause.as_deref());
            push_opt(&mut root_attrs, "lctl.analysis.recommendation", analysis.recommendation.as_deref());
            if let Some(c) = analysis.confidence_in_analysis {
                root_attrs.push(KeyValue::new("lctl.analysis.confidence", c.value()));
            }
        }
    }
    let failed = chain.is_some_and(|c| c.failed_at_step.is_some() || c.status == Some(ChainStatus::Failed));

    let mut root = tracer
        .span_builder(format!("lctl.chain {chain_id}"))
        .with_kind(SpanKind::Internal)
        .with_start_time(start)
        .start(&tracer);
    let trace_id = root.span_context().trace_id().to_string();
    let parent = Context::new().with_remote_span_context(root.span_context().clone());
    let mut count = 1;
    for (step, (s_start, s_end)) in steps.values().zip(&times) {
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
        let mut span = tracer
            .span_builder(format!("lctl.step {} {}", step.step, step.agent))
            .with_kind(SpanKind::Internal)
            .with_start_time(*s_start)
            .with_attributes(attrs)
            .start_with_context(&tracer, &parent);
        if let Some(error) = &step.error {
            span.set_status(Status::error(error.clone()));
        }
        span.end_with_timestamp(*s_end);
        count += 1;
    }
    for (id, fact) in &facts {
        if !claimed.contains(id) {
            fact_attrs(&mut root_attrs, id, fact);
        }
    }
    root.set_attributes(root_attrs);
    if failed {
        root.set_status(Status::error("the chain failed"));
    }
    root.end_with_timestamp(end);
    (trace_id, count)
}

/// Each step's start and end: end to end, ending at `end`; consecutive `parallel` steps start together.
fn lay_out<'a>(steps: impl Iterator<Item = &'a TraceStep>, end: SystemTime) -> Vec<(SystemTime, SystemTime)> {
    let steps: Vec<&TraceStep> = steps.collect();
    // Offsets from the chain's start, in ms.
    let mut offsets = Vec::with_capacity(steps.len());
    let mut cursor = 0_u64;
    let mut group_start = 0_u64;
    let mut group_end = 0_u64;
    let mut in_group = false;
    for step in &steps {
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
    let start = end.checked_sub(Duration::from_millis(cursor)).unwrap_or(end);
    offsets.into_iter().map(|(s, e)| (start + Duration::from_millis(s), start + Duration::from_millis(e))).collect()
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
