//! A real OTLP/HTTP trace receiver for the workspace's tests: an axum route at `/v1/traces` on loopback decoding
//! each export as the collector protocol's `ExportTraceServiceRequest` (`opentelemetry-proto`'s prost types), as a
//! collector would. The tests of `ldp-router` (traces across delegates) and `ldp-cli` (`--otlp-endpoint`, `ldp lctl
//! export`) point their exporters at [`Receiver::url`] and read back what arrived.
//!
//! Test code: it panics on what a test should fail on (a request that does not decode, spans that never arrive).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use prost::Message as _;

pub use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
pub use opentelemetry_proto::tonic::trace::v1::span::{Event, SpanKind};
pub use opentelemetry_proto::tonic::trace::v1::status::StatusCode as SpanStatus;
pub use opentelemetry_proto::tonic::trace::v1::{Span, Status};

/// Spans received, each with its resource's `service.name`; and the count of requests that did not decode.
#[derive(Default)]
struct Received {
    spans: Vec<(String, Span)>,
    undecodable: usize,
}

type Store = Arc<Mutex<Received>>;

async fn receive(State(store): State<Store>, body: Bytes) -> axum::response::Response {
    let Ok(request) = ExportTraceServiceRequest::decode(body) else {
        store.lock().unwrap().undecodable += 1;
        return StatusCode::BAD_REQUEST.into_response();
    };
    let mut received = store.lock().unwrap();
    for resource in request.resource_spans {
        let service = resource
            .resource
            .iter()
            .flat_map(|r| &r.attributes)
            .find(|kv| kv.key == "service.name")
            .and_then(|kv| kv.value.as_ref())
            .and_then(|v| match &v.value {
                Some(any_value::Value::StringValue(s)) => Some(s.clone()),
                _ => None,
            })
            .unwrap_or_default();
        for scope in resource.scope_spans {
            received.spans.extend(scope.spans.into_iter().map(|s| (service.clone(), s)));
        }
    }
    ([(header::CONTENT_TYPE, "application/x-protobuf")], ExportTraceServiceResponse::default().encode_to_vec())
        .into_response()
}

/// A running receiver (on a thread and runtime of its own, so it serves whatever runtime the test uses, or none).
#[derive(Clone)]
pub struct Receiver {
    url: String,
    store: Store,
}

impl std::fmt::Debug for Receiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Receiver").field("url", &self.url).finish_non_exhaustive()
    }
}

impl Receiver {
    /// Starts a receiver on a free loopback port.
    pub fn start() -> Self {
        let store = Store::default();
        let app = axum::Router::new().route("/v1/traces", axum::routing::post(receive)).with_state(store.clone());
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                tx.send(listener.local_addr().unwrap()).unwrap();
                axum::serve(listener, app).await.unwrap();
            });
        });
        Receiver { url: format!("http://{}", rx.recv().unwrap()), store }
    }

    /// The base URL, as `OTEL_EXPORTER_OTLP_ENDPOINT` gives it (exporters append `/v1/traces`).
    pub fn url(&self) -> &str {
        &self.url
    }

    fn received(&self) -> MutexGuard<'_, Received> {
        let received = self.store.lock().unwrap();
        assert_eq!(received.undecodable, 0, "every export decodes as ExportTraceServiceRequest");
        received
    }

    /// Every span received so far, with its service name.
    pub fn spans_by_service(&self) -> Vec<(String, Span)> {
        self.received().spans.clone()
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<Span> {
        self.received().spans.iter().map(|(_, s)| s.clone()).collect()
    }

    /// Waits (polling, at most 30 s) until `done` holds for the spans received, then returns them.
    pub fn wait_for(&self, done: impl Fn(&[(String, Span)]) -> bool) -> Vec<(String, Span)> {
        let started = Instant::now();
        loop {
            {
                let received = self.received();
                if done(&received.spans) {
                    return received.spans.clone();
                }
            }
            assert!(started.elapsed() < Duration::from_secs(30), "the spans did not arrive within 30 s");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// The value of attribute `key` among `attributes`.
pub fn attr_in<'a>(attributes: &'a [KeyValue], key: &str) -> Option<&'a any_value::Value> {
    attributes.iter().find(|kv| kv.key == key).and_then(|kv| kv.value.as_ref()).and_then(|v| v.value.as_ref())
}

/// The value of `span`'s attribute `key`.
pub fn attr<'a>(span: &'a Span, key: &str) -> Option<&'a any_value::Value> {
    attr_in(&span.attributes, key)
}

/// A string attribute among `attributes`.
pub fn str_in<'a>(attributes: &'a [KeyValue], key: &str) -> Option<&'a str> {
    match attr_in(attributes, key) {
        Some(any_value::Value::StringValue(s)) => Some(s),
        _ => None,
    }
}

/// A floating-point attribute among `attributes`.
pub fn f64_in(attributes: &[KeyValue], key: &str) -> Option<f64> {
    match attr_in(attributes, key) {
        Some(any_value::Value::DoubleValue(v)) => Some(*v),
        _ => None,
    }
}

/// `span`'s string attribute `key`.
pub fn str_attr<'a>(span: &'a Span, key: &str) -> Option<&'a str> {
    str_in(&span.attributes, key)
}

/// `span`'s floating-point attribute `key`.
pub fn f64_attr(span: &Span, key: &str) -> Option<f64> {
    f64_in(&span.attributes, key)
}
