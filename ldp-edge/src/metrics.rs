//! Health and metrics for operators: `GET /healthz` (the process answers), `GET /readyz` (the session machine
//! answers within a bound) and `GET /metrics` (the Prometheus / OpenMetrics text format, written by the Prometheus
//! project's `prometheus-client`).
//!
//! What `/metrics` holds:
//!
//! | metric | kind | labels |
//! |---|---|---|
//! | `ldp_messages_total` | counter | `path` (`/ldp/messages`, `/ldp/stream`), `reply` (the reply's message type, or `none`), `status` (HTTP) |
//! | `ldp_refusals_total` | counter | `code` (the typed `LdpError` code of every refusal answered) |
//! | `ldp_tasks_total` | counter | `status` (`completed`, `failed`): TASK_RESULT and TASK_FAILED answered over HTTP |
//! | `ldp_message_duration_seconds` | histogram | `path`, `reply` |
//! | `ldp_active_sessions` | gauge | sessions the responder holds (read at scrape time) |
//! | `ldp_running_tasks` | gauge | tasks running now (read at scrape time) |
//! | `ldp_replay_window_entries`, `ldp_replay_window_capacity` | gauge | messages the responder's replay window remembers now, and the most it may (0 with replay protection off); read at scrape time, so they cover every transport serving the runtime (HTTP and WebSocket) |
//! | `ldp_backend_tokens_total` | counter | `tokens_used` of every TASK_RESULT's provenance answered (HTTP, and WebSocket when it reports here) |
//! | `ldp_backend_cost_usd_total` | counter | `cost_usd` of the same results |
//! | `ldp_ws_connections` | gauge | WebSocket connections open (from each [`TransportSource`], read at scrape time) |
//! | `ldp_ws_messages_received_total`, `ldp_ws_messages_sent_total` | counter | WebSocket text frames read and written |
//! | `ldp_held_results`, `ldp_held_result_bytes` | gauge | task answers held for suspended sessions to resume, and their bytes |
//!
//! The label values come from a closed set (paths, message types, status codes, error codes of the catalogue or a
//! peer's own, truncated), so a peer cannot grow the label space beyond a bound: codes outside the catalogue are
//! counted as `other`.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use ldp_session::runtime::RuntimeGauges;
use ldp_types::{Code, MessageType};

/// The media type of `/metrics` (OpenMetrics text, which Prometheus scrapes natively).
pub const METRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MessageLabels {
    path: &'static str,
    reply: &'static str,
    status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LatencyLabels {
    path: &'static str,
    reply: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CodeLabels {
    code: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabels {
    status: &'static str,
}

/// The server's metrics: cheap to clone (shared), updated by the handlers, encoded by `/metrics`.
#[derive(Clone)]
pub struct HttpMetrics {
    inner: Arc<Inner>,
}

struct Inner {
    registry: Registry,
    messages: Family<MessageLabels, Counter>,
    refusals: Family<CodeLabels, Counter>,
    tasks: Family<StatusLabels, Counter>,
    latency: Family<LatencyLabels, Histogram>,
    active_sessions: Gauge,
    running_tasks: Gauge,
    replay_entries: Gauge,
    replay_capacity: Gauge,
    tokens: Counter,
    cost_usd: Counter<f64, AtomicU64>,
    sources: Arc<Mutex<Vec<Arc<dyn TransportSource>>>>,
    /// The series of the commonest answer, a task answered with its result over `/ldp/messages`: looked up once,
    /// so that the hot path skips three hashed lookups under the families' locks.
    completed: OnceLock<CompletedSeries>,
}

/// Handles on the series [`HttpMetrics::observe`] counts a completed `/ldp/messages` task in.
struct CompletedSeries {
    path: &'static str,
    messages: Counter,
    latency: Histogram,
    tasks: Counter,
}

/// What another transport serving the same runtime (the WebSocket binding) reports at scrape time. Totals are
/// counted since the transport started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TransportFigures {
    /// Connections open now.
    pub connections: u64,
    /// Messages (text frames) read so far.
    pub messages_received: u64,
    /// Messages (text frames) written so far.
    pub messages_sent: u64,
    /// Task answers held now for sessions to resume.
    pub held_results: u64,
    /// Bytes of those answers.
    pub held_bytes: u64,
}

impl TransportFigures {
    /// Figures with every value given (the struct is non-exhaustive).
    pub fn new(
        connections: u64,
        messages_received: u64,
        messages_sent: u64,
        held_results: u64,
        held_bytes: u64,
    ) -> Self {
        Self { connections, messages_received, messages_sent, held_results, held_bytes }
    }
}

/// A transport whose figures `/metrics` reads at each scrape ([`HttpMetrics::add_source`]).
pub trait TransportSource: Send + Sync + 'static {
    /// The figures now.
    fn figures(&self) -> TransportFigures;
}

/// Sums the sources at scrape time.
struct Sources(Arc<Mutex<Vec<Arc<dyn TransportSource>>>>);

impl std::fmt::Debug for Sources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sources").finish_non_exhaustive()
    }
}

impl Collector for Sources {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let sources: Vec<Arc<dyn TransportSource>> =
            self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        let mut sum = TransportFigures::default();
        for source in sources {
            let f = source.figures();
            sum.connections += f.connections;
            sum.messages_received += f.messages_received;
            sum.messages_sent += f.messages_sent;
            sum.held_results += f.held_results;
            sum.held_bytes += f.held_bytes;
        }
        let gauge = |v: u64| ConstGauge::new(i64::try_from(v).unwrap_or(i64::MAX));
        for (name, help, value) in [
            ("ldp_ws_connections", "WebSocket connections open", sum.connections),
            ("ldp_held_results", "Task answers held for suspended sessions to resume", sum.held_results),
            ("ldp_held_result_bytes", "Bytes of the task answers held for resume", sum.held_bytes),
        ] {
            let metric = gauge(value);
            metric.encode(encoder.encode_descriptor(name, help, None, metric.metric_type())?)?;
        }
        for (name, help, value) in [
            ("ldp_ws_messages_received", "WebSocket text frames read", sum.messages_received),
            ("ldp_ws_messages_sent", "WebSocket text frames written", sum.messages_sent),
        ] {
            let metric = ConstCounter::new(value);
            metric.encode(encoder.encode_descriptor(name, help, None, metric.metric_type())?)?;
        }
        Ok(())
    }
}

impl std::fmt::Debug for HttpMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpMetrics").finish_non_exhaustive()
    }
}

impl Default for HttpMetrics {
    fn default() -> Self {
        Self::new()
    }
}

/// Message types as `'static` label values (the twelve of RFC 3.2, and `other` for anything else).
/// The label of an answer's message type (`none` for no answer, `other` for an unknown type).
pub fn reply_label(reply: Option<&str>) -> &'static str {
    match reply {
        None => "none",
        Some(name) => MessageType::ALL.iter().map(|t| t.as_str()).find(|t| *t == name).unwrap_or("other"),
    }
}

impl HttpMetrics {
    /// Empty metrics, registered under their names.
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let messages = Family::<MessageLabels, Counter>::default();
        let refusals = Family::<CodeLabels, Counter>::default();
        let tasks = Family::<StatusLabels, Counter>::default();
        // 0.5 ms to about 16 s.
        let latency = Family::<LatencyLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.000_5, 2.0, 16))
        });
        let (active_sessions, running_tasks) = (Gauge::default(), Gauge::default());
        registry.register("ldp_messages", "LDP messages answered over HTTP", messages.clone());
        registry.register("ldp_refusals", "Refusals answered, by LdpError code", refusals.clone());
        registry.register("ldp_tasks", "Tasks answered over HTTP, by outcome", tasks.clone());
        registry.register("ldp_message_duration_seconds", "Time to answer one message", latency.clone());
        registry.register("ldp_active_sessions", "Sessions the responder holds", active_sessions.clone());
        registry.register("ldp_running_tasks", "Tasks running now", running_tasks.clone());
        let (replay_entries, replay_capacity) = (Gauge::default(), Gauge::default());
        registry.register(
            "ldp_replay_window_entries",
            "Messages the replay window remembers now",
            replay_entries.clone(),
        );
        registry.register(
            "ldp_replay_window_capacity",
            "Most messages the replay window may remember (0: replay protection off)",
            replay_capacity.clone(),
        );
        let tokens = Counter::default();
        let cost_usd = Counter::<f64, AtomicU64>::default();
        registry.register(
            "ldp_backend_tokens",
            "Tokens the delegate reported in its results' provenance",
            tokens.clone(),
        );
        registry.register(
            "ldp_backend_cost_usd",
            "Cost in USD the delegate reported in its results' provenance",
            cost_usd.clone(),
        );
        let sources = Arc::new(Mutex::new(Vec::new()));
        registry.register_collector(Box::new(Sources(sources.clone())));
        HttpMetrics {
            inner: Arc::new(Inner {
                registry,
                messages,
                refusals,
                tasks,
                latency,
                active_sessions,
                running_tasks,
                replay_entries,
                replay_capacity,
                tokens,
                cost_usd,
                sources,
                completed: OnceLock::new(),
            }),
        }
    }

    /// Reads `source` at every scrape from now on (a WebSocket server sharing this server's runtime).
    pub fn add_source(&self, source: Arc<dyn TransportSource>) {
        self.inner.sources.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(source);
    }

    /// Counts the usage a result reports: a TASK_RESULT's provenance `tokens_used` and `cost_usd` (what a model
    /// backend fills in), whichever transport answered it. Other messages count nothing.
    pub fn record_answer(&self, answer: &ldp_types::Envelope) {
        if let ldp_types::Body::TaskResult(result) = &answer.body {
            if let Some(tokens) = result.provenance.tokens_used {
                self.inner.tokens.inc_by(tokens);
            }
            // A negative or non-finite cost is the delegate's error; a counter only grows.
            if let Some(cost) = result.provenance.cost_usd.filter(|c| c.is_finite() && *c > 0.0) {
                self.inner.cost_usd.inc_by(cost);
            }
        }
    }

    /// Records one answered message.
    pub fn observe(
        &self,
        path: &'static str,
        reply: Option<&str>,
        status: u16,
        code: Option<&Code>,
        elapsed: Duration,
    ) {
        let reply = reply_label(reply);
        let inner = &self.inner;
        const RESULT: &str = MessageType::TaskResult.as_str();
        const FAILED: &str = MessageType::TaskFailed.as_str();
        if reply == RESULT && status == 200 && code.is_none() {
            let hot = inner.completed.get_or_init(|| CompletedSeries {
                path,
                messages: inner.messages.get_or_create(&MessageLabels { path, reply, status }).clone(),
                latency: inner.latency.get_or_create(&LatencyLabels { path, reply }).clone(),
                tasks: inner.tasks.get_or_create(&StatusLabels { status: "completed" }).clone(),
            });
            if hot.path == path {
                hot.messages.inc();
                hot.latency.observe(elapsed.as_secs_f64());
                hot.tasks.inc();
                return;
            }
        }
        inner.messages.get_or_create(&MessageLabels { path, reply, status }).inc();
        inner.latency.get_or_create(&LatencyLabels { path, reply }).observe(elapsed.as_secs_f64());
        match reply {
            RESULT => {
                inner.tasks.get_or_create(&StatusLabels { status: "completed" }).inc();
            }
            FAILED => {
                inner.tasks.get_or_create(&StatusLabels { status: "failed" }).inc();
            }
            _ => {}
        }
        if let Some(code) = code {
            inner.refusals.get_or_create(&CodeLabels { code: code_label(code) }).inc();
        }
    }

    /// The text of `/metrics`, with the gauges read now.
    pub fn encode(&self, gauges: &RuntimeGauges) -> String {
        let inner = &self.inner;
        let set = |gauge: &Gauge, value: usize| {
            gauge.set(i64::try_from(value).unwrap_or(i64::MAX));
        };
        set(&inner.active_sessions, gauges.sessions);
        set(&inner.running_tasks, gauges.running);
        set(&inner.replay_entries, gauges.replay_window.0);
        set(&inner.replay_capacity, gauges.replay_window.1);
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &inner.registry);
        text
    }
}

/// An error code as a `'static` label: the catalogue's codes by name, anything else (a peer's own code) `other`.
fn code_label(code: &Code) -> &'static str {
    Code::KNOWN.iter().find(|known| *known == code).map_or("other", Code::as_str)
}
