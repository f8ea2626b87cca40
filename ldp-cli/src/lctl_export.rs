//! `ldp lctl export --otlp URL FILE...`: an LCTL chain as OpenTelemetry spans, sent over OTLP/HTTP.
//!
//! The files are the hops of one chain, in order (as `lctl check` reads them); a later hop's copy of a step or a
//! fact replaces an earlier one. One trace: a root span for the chain (`lctl.chain <id>`: id, source, target, status,
//! purpose, handoff, analysis, the facts no step claims), and one child span per step (`lctl.step <n> <agent>`: action,
//! confidence, duration, the facts it added, modified or held at failure, each such fact's text, confidence and
//! source as `lctl.fact.<id>.*` attributes). A step with an `error` has status ERROR, as has a failed chain.
//!
//! LCTL records durations, not times: the steps are laid end to end, ending now (steps marked `parallel` that follow
//! each other start together), so a trace viewer shows their lengths and order. The attributes and the lay-out are
//! `ldp_lctl::otel::shape`'s, the same a delegate attaches to its task's span (`ldp_lctl::otel::attach`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use ldp_lctl::LctlDocument;
use ldp_transport_http::otlp::OtlpExport;
use opentelemetry::Context;
use opentelemetry::trace::{Span as _, SpanKind, Status, TraceContextExt, Tracer as _};

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
    let chain = ldp_lctl::otel::shape(documents);
    let start = end.checked_sub(Duration::from_millis(chain.total_ms)).unwrap_or(end);
    let at = |ms: u64| start + Duration::from_millis(ms);
    let mut root = tracer
        .span_builder(format!("lctl.chain {}", chain.chain_id))
        .with_kind(SpanKind::Internal)
        .with_start_time(start)
        .start(&tracer);
    let trace_id = root.span_context().trace_id().to_string();
    let parent = Context::new().with_remote_span_context(root.span_context().clone());
    let mut count = 1;
    for step in chain.steps {
        let mut span = tracer
            .span_builder(step.name)
            .with_kind(SpanKind::Internal)
            .with_start_time(at(step.start_ms))
            .with_attributes(step.attributes)
            .start_with_context(&tracer, &parent);
        if let Some(error) = step.error {
            span.set_status(Status::error(error));
        }
        span.end_with_timestamp(at(step.end_ms));
        count += 1;
    }
    root.set_attributes(chain.attributes);
    if chain.failed {
        root.set_status(Status::error("the chain failed"));
    }
    root.end_with_timestamp(end);
    (trace_id, count)
}
