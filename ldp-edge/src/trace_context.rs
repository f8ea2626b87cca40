//! W3C trace context on the wire, mapped onto `tracing` spans through `tracing-opentelemetry`.
//!
//! A client puts the context of its `ldp.send` span ([`ldp_session::spans::send_span`]) in each request
//! ([`TraceHeaders::of`]: the `traceparent` and `tracestate` headers over HTTP, envelope members over WebSocket); a
//! server makes the context it receives the parent of its span for the message ([`adopt_remote_parent`]). A value
//! that is absent or malformed starts a fresh trace: tracing never fails a request. Without an OpenTelemetry layer in
//! the subscriber the spans have no context, and nothing is sent.

use std::str::FromStr;

use ldp_types::Envelope;
use ldp_types::LdpError;
use ldp_types::trace_context::{TRACEPARENT, TRACESTATE, TraceParent, tracestate};
use opentelemetry::Context;
use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The trace context of one outgoing request, as the values of the `traceparent` and `tracestate` headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceHeaders {
    /// The `traceparent` value: this process's span for the request.
    pub traceparent: String,
    /// The `tracestate` value, when the trace carries one.
    pub tracestate: Option<String>,
}

impl TraceHeaders {
    /// The context of `span`, `None` when no OpenTelemetry layer records it (then nothing goes on the wire).
    pub fn of(span: &tracing::Span) -> Option<TraceHeaders> {
        let cx = span.context();
        let otel = cx.span();
        let sc = otel.span_context();
        if !sc.is_valid() {
            return None;
        }
        let parent = TraceParent {
            trace_id: sc.trace_id().to_bytes(),
            parent_id: sc.span_id().to_bytes(),
            flags: sc.trace_flags().to_u8(),
        };
        let state = sc.trace_state().header();
        Some(TraceHeaders { traceparent: parent.to_string(), tracestate: (!state.is_empty()).then_some(state) })
    }

    /// Adds the headers to an outgoing HTTP request.
    #[cfg(feature = "client")]
    pub fn apply(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        let request = request.header(TRACEPARENT, &self.traceparent);
        match &self.tracestate {
            Some(state) => request.header(TRACESTATE, state),
            None => request,
        }
    }
}

/// Makes the remote span named by `traceparent` (with its `tracestate`) the parent of `span`, before `span` is first
/// entered. Returns whether it did: an absent or malformed `traceparent` leaves `span` as it was (a new trace when it
/// was created without a parent), and a malformed `tracestate` is dropped on its own.
pub fn adopt_remote_parent(span: &tracing::Span, traceparent: Option<&str>, state: Option<&str>) -> bool {
    let Some(parent) = traceparent.and_then(TraceParent::parse) else { return false };
    let state = state.and_then(tracestate).and_then(|s| TraceState::from_str(s).ok()).unwrap_or_default();
    let remote = SpanContext::new(
        TraceId::from_bytes(parent.trace_id),
        SpanId::from_bytes(parent.parent_id),
        TraceFlags::new(parent.flags),
        true,
        state,
    );
    span.set_parent(Context::new().with_remote_span_context(remote)).is_ok()
}

/// [`adopt_remote_parent`] from an HTTP request's headers.
pub fn adopt_from_headers(span: &tracing::Span, headers: &http::HeaderMap) -> bool {
    // A span no subscriber records has no parent to take: the header lookups are skipped on every request then.
    if span.is_disabled() {
        return false;
    }
    let value = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    adopt_remote_parent(span, value(TRACEPARENT), value(TRACESTATE))
}

/// Records what came back on the span of a sent message: the answer's type, error and usage, or the failure.
pub fn record_exchange(span: &tracing::Span, result: &Result<Option<Vec<u8>>, LdpError>) {
    match result {
        // Decoding the answer once more costs only when a subscriber records the span.
        Ok(Some(_)) if span.is_disabled() => {}
        Ok(Some(raw)) => {
            if let Ok(answer) = Envelope::from_slice(raw) {
                ldp_session::spans::record_answer(span, &answer);
            }
        }
        Ok(None) => {}
        Err(error) => ldp_session::spans::record_error(span, error.code.as_str()),
    }
}
