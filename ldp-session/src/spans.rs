//! The `tracing` spans of LDP messages, with the same fields wherever a message is handled or sent, so any
//! subscriber (logs, or OpenTelemetry through `tracing-opentelemetry` in the transports and the CLI) sees one schema.
//!
//! Field names follow OpenTelemetry's attribute style (`ldp.session_id`, ...); `otel.name`, `otel.kind` and
//! `otel.status_code` are the names `tracing-opentelemetry` maps onto the span's name, kind and status. This module
//! only creates and fills spans: where their context comes from and goes to (the `traceparent` of a request) is the
//! transports' business.
//!
//! | field | set from |
//! |---|---|
//! | `ldp.message_type`, `ldp.message_id`, `ldp.session_id`, `ldp.payload_mode`, `ldp.from`, `ldp.to` | the envelope |
//! | `ldp.task_id`, `ldp.skill` | the body (TASK_SUBMIT carries the skill) |
//! | `ldp.reply_type` | the answer's body type |
//! | `ldp.error_code` | a TASK_FAILED's or SESSION_REJECT's error, or the refusal's code |
//! | `ldp.tokens`, `ldp.cost_usd` | a TASK_RESULT's provenance |

use ldp_types::{Body, Envelope};
use tracing::Span;
use tracing::field::Empty;

/// A span named `$name` of OpenTelemetry kind `$kind` with every field of the schema above, those the envelope
/// gives filled in: one field list for handled and sent messages alike.
macro_rules! message_span {
    ($name:literal, $kind:literal, $env:expr) => {{
        let env: &Envelope = $env;
        let span = tracing::info_span!(
            $name,
            otel.name = format!("{} {}", $name, env.body.type_name()),
            otel.kind = $kind,
            otel.status_code = Empty,
            ldp.message_type = env.body.type_name(),
            ldp.message_id = env.message_id.as_str(),
            ldp.session_id = Empty,
            ldp.task_id = Empty,
            ldp.skill = Empty,
            ldp.payload_mode = env.payload_mode.as_str(),
            ldp.from = env.from.as_str(),
            ldp.to = env.to.as_str(),
            ldp.reply_type = Empty,
            ldp.error_code = Empty,
            ldp.tokens = Empty,
            ldp.cost_usd = Empty,
        );
        record_request(&span, env);
        span
    }};
}

/// The span of a message this process handles (internal to the transport's server span, which carries the remote
/// parent).
pub fn handle_span(env: &Envelope) -> Span {
    message_span!("ldp.handle", "internal", env)
}

/// The span of a message this process sends and waits on (an OpenTelemetry client span: its context is what the
/// transport puts in the request's `traceparent`).
pub fn send_span(env: &Envelope) -> Span {
    message_span!("ldp.send", "client", env)
}

fn record_request(span: &Span, env: &Envelope) {
    if !env.session_id.is_empty() {
        span.record("ldp.session_id", env.session_id.as_str());
    }
    if let Some(task) = env.body.task_id() {
        span.record("ldp.task_id", task);
    }
    if let Body::TaskSubmit(submit) = &env.body {
        span.record("ldp.skill", submit.skill.as_str());
    }
}

/// Records the answer to the span's message: its type, the error it carries, the tokens and cost it reports.
pub fn record_answer(span: &Span, answer: &Envelope) {
    span.record("ldp.reply_type", answer.body.type_name());
    if !answer.session_id.is_empty() {
        // A SESSION_ACCEPT names the session the HELLO/PROPOSE did not have yet.
        span.record("ldp.session_id", answer.session_id.as_str());
    }
    match &answer.body {
        Body::TaskResult(result) => {
            if let Some(tokens) = result.provenance.tokens_used {
                // As i64: OpenTelemetry's integers are signed, and a u64 would be exported as a string.
                span.record("ldp.tokens", i64::try_from(tokens).unwrap_or(i64::MAX));
            }
            if let Some(cost) = result.provenance.cost_usd {
                span.record("ldp.cost_usd", cost);
            }
        }
        Body::TaskFailed(failed) => record_error(span, failed.error.code.as_str()),
        Body::SessionReject(reject) => {
            record_error(span, reject.error.as_ref().map_or("SESSION_REJECTED", |e| e.code.as_str()));
        }
        _ => {}
    }
}

/// Records that the span's message failed with `code` (an LDP error code), marking the span as an error.
pub fn record_error(span: &Span, code: &str) {
    span.record("ldp.error_code", code);
    span.record("otel.status_code", "ERROR");
}
