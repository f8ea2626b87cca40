//! OpenTelemetry across delegates, received by a real OTLP/HTTP receiver (`ldp-otlp-receiver`: an axum route at
//! `/v1/traces` decoding the collector protocol's protobuf with `opentelemetry-proto`'s prost types), fed by the
//! `otlp` exporter of `ldp-transport-http`.
//!
//! A client calls a router delegate that re-delegates with `route_and_submit` to two delegates, every hop over real
//! HTTP sockets; the spans of all four parties must form one trace with the parent/child links of the call chain.
//! Each hop's server span is a root of its own unless the request's `traceparent` names its parent, so the links
//! exist only if the header is sent and read. A malformed or absent `traceparent` starts a fresh trace and the
//! request is still answered.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use ldp_transport_http::ConnectSettings;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use ldp_otlp_receiver::{Receiver, Span, SpanKind, any_value, attr, f64_in, str_attr, str_in};
use ldp_router::{
    DiscoveryError, Endpoint, Exploration, LdpAdapter, LearnerConfig, Quality, Registry, RegistryConfig, RouteTask,
    RouterConfig, SchemeDispatcher, ScoreFn, SharedTransport,
};
use ldp_session::runtime::{Client, Delegate, DelegateRuntime, TaskContext};
use ldp_session::{
    Initiator, InitiatorConfig, Responder, ResponderConfig, SeededIds, SystemClock, TaskOutput, TaskRequest,
};
use ldp_transport_http::otlp::OtlpExport;
use ldp_transport_http::{HttpServerConfig, HttpState, HttpTransport, RetryPolicy, ServerHandle};
use ldp_types::{Capability, DelegateId, IdentityCard, LdpError, SessionConfig};
use reqwest::header;
use serde_json::{Value, json};
use tracing::Instrument;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// The receiver (shared by the tests of this binary) and the exporter sending to it, installed as the process's
/// subscriber.
struct Collector {
    receiver: Receiver,
    export: OtlpExport,
}

static COLLECTOR: OnceLock<Collector> = OnceLock::new();

fn collector() -> &'static Collector {
    COLLECTOR.get_or_init(|| {
        let receiver = Receiver::start();
        // The base URL, as OTEL_EXPORTER_OTLP_ENDPOINT would give it: the exporter appends /v1/traces.
        let export = OtlpExport::new(receiver.url(), "ldp-otel-test").unwrap();
        tracing_subscriber::registry().with(export.layer()).init();
        Collector { receiver, export }
    })
}

impl Collector {
    /// Flushes the exporter and returns a copy of every span received so far.
    async fn spans(&self) -> Vec<Span> {
        let export = self.export.clone();
        tokio::task::spawn_blocking(move || export.flush()).await.unwrap().unwrap();
        self.receiver.spans()
    }

    /// The spans received once `complete` holds of them, flushing again until it does (for at most ten seconds).
    ///
    /// A server span closes, and so is exported, only after its reply is written: the client can have its answer
    /// before the span that handled it is on its way.
    async fn spans_once(&self, complete: impl Fn(&[Span]) -> bool) -> Vec<Span> {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let spans = self.spans().await;
            if complete(&spans) || tokio::time::Instant::now() >= deadline {
                return spans;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
}

/// Whether the span named `root` is received, and in its trace at least `count` spans named `name` with all of their
/// ancestors.
fn ancestries_received(spans: &[Span], root: &str, name: &str, count: usize) -> bool {
    let Some(root) = spans.iter().find(|s| s.name == root) else { return false };
    let by_id: HashMap<&[u8], &Span> = spans.iter().map(|s| (s.span_id.as_slice(), s)).collect();
    let named: Vec<&Span> = spans.iter().filter(|s| s.trace_id == root.trace_id && s.name == name).collect();
    named.len() >= count
        && named.iter().all(|span| {
            let mut parent = span.parent_span_id.as_slice();
            // Bounded: a parent cycle is `ancestry`'s to report.
            for _ in 0..64 {
                if parent.is_empty() {
                    return true;
                }
                match by_id.get(parent) {
                    Some(p) => parent = p.parent_span_id.as_slice(),
                    None => return false,
                }
            }
            true
        })
}

/// A delegate at the end of the chain: answers with its skill and input, reporting 42 tokens.
struct Leaf;

#[async_trait]
impl Delegate for Leaf {
    async fn execute(&self, task: TaskRequest, _ctx: TaskContext) -> Result<TaskOutput, LdpError> {
        let mut out = TaskOutput::new(json!({ "answer": format!("{}: {}", task.skill, task.input) }));
        out.tokens_used = Some(42);
        Ok(out)
    }
}

/// The router delegate: one task becomes a `lookup` and a `summarize` task, each routed by the registry.
struct Planner {
    registry: Arc<Registry>,
}

#[async_trait]
impl Delegate for Planner {
    async fn execute(&self, task: TaskRequest, _ctx: TaskContext) -> Result<TaskOutput, LdpError> {
        let scorer = ScoreFn::caller(|_: &Value| Some(Quality::saturating(0.9)));
        let mut parts = Vec::new();
        for skill in ["lookup", "summarize"] {
            let routed = self
                .registry
                .route_and_submit(&RouteTask::new(skill, task.input.clone()), &scorer)
                .await
                .map_err(|e| LdpError::runtime("ROUTING_FAILED", e.to_string()))?;
            parts.push(routed.output.to_value().unwrap_or(Value::Null));
        }
        Ok(TaskOutput::new(Value::Array(parts)))
    }
}

fn card(name: &str, skill: &str) -> IdentityCard {
    let mut card = IdentityCard::new(DelegateId::from_name(name).unwrap(), name, "sim", "1");
    card.capabilities.push(Capability::new(skill));
    card
}

async fn serve(card: IdentityCard, delegate: Arc<dyn Delegate>) -> ServerHandle {
    let responder =
        Responder::new(ResponderConfig::new(card), Arc::new(SystemClock), Box::new(SeededIds::from_entropy()));
    let runtime = DelegateRuntime::new(responder, delegate);
    ldp_transport_http::spawn("127.0.0.1:0", HttpState::new(runtime, HttpServerConfig::default())).await.unwrap()
}

fn registry() -> Registry {
    let http = LdpAdapter::new().with_http(|endpoint: &Endpoint| {
        let transport = HttpTransport::builder(endpoint.url.clone())
            .retry(RetryPolicy::none())
            .build()
            .map_err(DiscoveryError::adapter)?;
        Ok(Arc::new(transport) as SharedTransport)
    });
    let config = RegistryConfig {
        router: RouterConfig {
            learner: LearnerConfig { exploration: Exploration::Greedy, seed: 3, ..LearnerConfig::default() },
            ..RouterConfig::default()
        },
        id_seed: Some(9),
        ..RegistryConfig::default()
    };
    Registry::new(config, Arc::new(SchemeDispatcher::new().with_ldp(http)), Arc::new(SystemClock)).unwrap()
}

/// The names of `span`'s ancestors, nearest first, following `parent_span_id` within the received spans.
fn ancestry(span: &Span, by_id: &HashMap<Vec<u8>, &Span>) -> Vec<String> {
    let mut names = Vec::new();
    let mut parent = span.parent_span_id.clone();
    while let Some(p) = by_id.get(&parent) {
        names.push(p.name.clone());
        parent = p.parent_span_id.clone();
        assert!(names.len() < 64, "a parent cycle");
    }
    assert!(parent.is_empty(), "{}'s ancestry ends at a span that was not received", span.name);
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_a_router_delegate_and_two_delegates_are_one_trace() {
    let collector = collector();
    let lookup = serve(card("lookup", "lookup"), Arc::new(Leaf)).await;
    let summarize = serve(card("summarize", "summarize"), Arc::new(Leaf)).await;
    let registry = Arc::new(registry());
    for leaf in [&lookup, &summarize] {
        registry.add_url(&format!("ldp+http://{}", leaf.addr())).await.unwrap();
    }
    let planner = serve(card("planner", "research"), Arc::new(Planner { registry })).await;

    let root = tracing::info_span!("test.client");
    let output = async {
        let transport = HttpTransport::builder(planner.url()).retry(RetryPolicy::none()).build().unwrap();
        submit_one(transport, "research", json!("otters")).await
    }
    .instrument(root)
    .await;
    let output = output.to_value().unwrap();
    assert_eq!(output[0]["answer"], "lookup: \"otters\"", "{output}");
    assert_eq!(output[1]["answer"], "summarize: \"otters\"", "{output}");

    let spans = collector
        .spans_once(|s| {
            // The router delegate's task and its two sub-tasks; the client's HELLO and the router's two.
            ancestries_received(s, "test.client", "ldp.handle TASK_SUBMIT", 3)
                && ancestries_received(s, "test.client", "ldp.handle HELLO", 3)
        })
        .await;
    let client_root = spans.iter().find(|s| s.name == "test.client").expect("the client's span was exported");
    let trace: Vec<&Span> = spans.iter().filter(|s| s.trace_id == client_root.trace_id).collect();
    let by_id: HashMap<Vec<u8>, &Span> = trace.iter().map(|s| (s.span_id.clone(), *s)).collect();

    // The delegates' handling of their tasks, each reached through both hops.
    for skill in ["lookup", "summarize"] {
        let handled = trace
            .iter()
            .find(|s| s.name == "ldp.handle TASK_SUBMIT" && str_attr(s, "ldp.skill") == Some(skill))
            .unwrap_or_else(|| panic!("{skill}'s TASK_SUBMIT handling is not in the client's trace"));
        let route = format!("ldp.route {skill}");
        let expected = [
            "POST /ldp/messages",     // the delegate's server span, child of the router's request
            "ldp.send TASK_SUBMIT",   // the router delegate's request to it
            route.as_str(),           // route_and_submit
            "ldp.handle TASK_SUBMIT", // the router delegate handling the client's task
            "POST /ldp/messages",     // the router delegate's server span, child of the client's request
            "ldp.send TASK_SUBMIT",   // the client's request
            "test.client",
        ];
        assert_eq!(ancestry(handled, &by_id), expected, "{skill}");
        assert!(str_attr(handled, "ldp.session_id").is_some_and(|s| !s.is_empty()));
        assert!(str_attr(handled, "ldp.task_id").is_some_and(|s| !s.is_empty()));
        assert_eq!(str_attr(handled, "ldp.payload_mode"), Some("text"));
        assert_eq!(attr(handled, "ldp.tokens"), Some(&any_value::Value::IntValue(42)));
        assert_eq!(str_attr(handled, "ldp.reply_type"), Some("TASK_RESULT"));
        // The router's request to the delegate saw the tokens in the answer's provenance.
        let sent = by_id[&handled.parent_span_id].parent_span_id.clone();
        assert_eq!(attr(by_id[&sent], "ldp.tokens"), Some(&any_value::Value::IntValue(42)));
        assert_eq!(by_id[&sent].kind, SpanKind::Client as i32);
        assert_eq!(by_id[&handled.parent_span_id].kind, SpanKind::Server as i32);
    }
    // The sub-sessions' set-up (HELLO, SESSION_PROPOSE to each delegate) happened within the same trace.
    let hellos = trace.iter().filter(|s| s.name == "ldp.handle HELLO").count();
    assert_eq!(hellos, 3, "the client's HELLO and the router's two");
    for server in [planner, lookup, summarize] {
        server.shutdown().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_or_absent_traceparent_starts_a_fresh_trace() {
    let collector = collector();
    let leaf = serve(card("leaf", "lookup"), Arc::new(Leaf)).await;
    let mut initiator = Initiator::new(
        InitiatorConfig::new("ldp:delegate:raw"),
        "ldp:delegate:leaf",
        Arc::new(SystemClock),
        Box::new(SeededIds::from_entropy()),
    );
    let http = reqwest::Client::new();
    let given_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let given_parent = "00f067aa0ba902b7";
    let valid = format!("00-{given_trace}-{given_parent}-01");
    let cases: [(&str, Option<&str>); 4] = [
        ("valid", Some(&valid)),
        ("malformed", Some("00-not-a-trace-01")),
        ("zero trace id", Some("00-00000000000000000000000000000000-00f067aa0ba902b7-01")),
        ("absent", None),
    ];
    let mut ids = Vec::new();
    for (case, traceparent) in cases {
        let hello = initiator.hello();
        let mut request = http.post(format!("{}/ldp/messages", leaf.url())).body(hello.to_vec().unwrap());
        request = request.header(header::CONTENT_TYPE, "application/json");
        if let Some(tp) = traceparent {
            request = request.header("traceparent", tp).header("tracestate", "vendor=1");
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 200, "{case}: tracing never fails a request");
        let reply: Value = response.json().await.unwrap();
        assert_eq!(reply["body"]["type"], "CAPABILITY_MANIFEST", "{case}");
        ids.push((case, hello.message_id));
    }
    let spans = collector
        .spans_once(|spans| {
            // Each HELLO's handling and the server span it is a child of.
            let received: HashSet<&[u8]> = spans.iter().map(|s| s.span_id.as_slice()).collect();
            ids.iter().all(|(_, id)| {
                spans.iter().any(|s| {
                    str_attr(s, "ldp.message_id") == Some(id.as_str()) && received.contains(s.parent_span_id.as_slice())
                })
            })
        })
        .await;
    let by_id: HashMap<Vec<u8>, &Span> = spans.iter().map(|s| (s.span_id.clone(), s)).collect();
    let server_span = |message_id: &str| {
        let handled = spans
            .iter()
            .find(|s| str_attr(s, "ldp.message_id") == Some(message_id))
            .expect("the HELLO's handling was exported");
        by_id[&handled.parent_span_id]
    };
    let hex = |bytes: &[u8]| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();

    let valid = server_span(&ids[0].1);
    assert_eq!(valid.name, "POST /ldp/messages");
    assert_eq!(hex(&valid.trace_id), given_trace, "the server joins the caller's trace");
    assert_eq!(hex(&valid.parent_span_id), given_parent, "as a child of the caller's span");
    assert_eq!(valid.trace_state, "vendor=1", "tracestate passed on");

    let mut fresh = HashSet::new();
    for (case, id) in &ids[1..] {
        let span = server_span(id);
        assert_eq!(span.name, "POST /ldp/messages", "{case}");
        assert!(span.parent_span_id.is_empty(), "{case}: a root span");
        assert_ne!(hex(&span.trace_id), given_trace, "{case}");
        assert!(span.trace_id.iter().any(|b| *b != 0), "{case}: a real trace id");
        fresh.insert(span.trace_id.clone());
    }
    assert_eq!(fresh.len(), 3, "each request its own trace");
    leaf.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_websocket_the_frame_member_carries_the_trace() {
    let collector = collector();
    let responder = Responder::new(
        ResponderConfig::new(card("wsleaf", "lookup")),
        Arc::new(SystemClock),
        Box::new(SeededIds::from_entropy()),
    );
    let runtime = DelegateRuntime::new(responder, Arc::new(Leaf));
    let server =
        ldp_transport_ws::spawn_ws("127.0.0.1:0", runtime, ldp_transport_ws::WsServerConfig::default()).await.unwrap();
    let root = tracing::info_span!("test.ws-client");
    async {
        let transport =
            ldp_transport_ws::WsTransport::connect(server.url(), ldp_transport_ws::WsOptions::default()).await.unwrap();
        submit_one(transport, "lookup", json!("seals")).await;
    }
    .instrument(root)
    .await;
    let spans = collector.spans_once(|s| ancestries_received(s, "test.ws-client", "ldp.handle TASK_SUBMIT", 1)).await;
    let client_root = spans.iter().find(|s| s.name == "test.ws-client").expect("the client's span was exported");
    let by_id: HashMap<Vec<u8>, &Span> = spans.iter().map(|s| (s.span_id.clone(), s)).collect();
    let handled = spans
        .iter()
        .find(|s| {
            s.trace_id == client_root.trace_id
                && s.name == "ldp.handle TASK_SUBMIT"
                && str_attr(s, "ldp.skill") == Some("lookup")
        })
        .expect("the delegate's handling is in the client's trace");
    assert_eq!(ancestry(handled, &by_id), ["WS /ldp/ws", "ldp.send TASK_SUBMIT", "test.ws-client"]);
    assert_eq!(attr(handled, "ldp.tokens"), Some(&any_value::Value::IntValue(42)));
    server.shutdown().await.unwrap();
}

/// Connects a client over `transport`, opens a session and submits one task; returns its output.
async fn submit_one<T: ldp_session::runtime::Transport>(transport: T, skill: &str, input: Value) -> ldp_types::RawJson {
    let client = Client::connect(
        transport,
        InitiatorConfig::new("ldp:delegate:client"),
        Arc::new(SystemClock),
        Box::new(SeededIds::from_entropy()),
    )
    .await
    .unwrap();
    let session = client.propose(SessionConfig::default()).await.unwrap();
    client.submit(&session.session_id, skill, input, None).await.unwrap().output
}

/// A delegate that keeps an LCTL trace of its task (here, the spec's two-hop example) and attaches it to the task's
/// span.
struct Chronicler {
    chain: Vec<ldp_lctl::LctlDocument>,
}

#[async_trait]
impl Delegate for Chronicler {
    async fn execute(&self, _task: TaskRequest, _ctx: TaskContext) -> Result<TaskOutput, LdpError> {
        // Inside `execute`, the current span is the task's `ldp.handle TASK_SUBMIT` span.
        let events = ldp_lctl::otel::attach(&tracing::Span::current(), &self.chain);
        Ok(TaskOutput::new(json!({ "steps": events })))
    }
}

fn lctl_fixture(name: &str) -> ldp_lctl::LctlDocument {
    let path = format!("{}/../ldp-lctl/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    ldp_lctl::LctlDocument::from_yaml(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delegate_attaches_the_lctl_trace_of_its_task_to_the_task_span() {
    let collector = collector();
    let chain = vec![lctl_fixture("spec-example1-step1.yaml"), lctl_fixture("spec-example1-step2.yaml")];
    let last = chain.last().unwrap().clone();
    let server = serve(card("chronicler", "research"), Arc::new(Chronicler { chain })).await;
    let root = tracing::info_span!("test.lctl-client");
    async {
        let transport = HttpTransport::builder(server.url()).retry(RetryPolicy::none()).build().unwrap();
        submit_one(transport, "research", json!("otters")).await;
    }
    .instrument(root)
    .await;
    let spans = collector.spans_once(|s| ancestries_received(s, "test.lctl-client", "ldp.handle TASK_SUBMIT", 1)).await;
    let client_root = spans.iter().find(|s| s.name == "test.lctl-client").expect("the client's span was exported");
    let handled = spans
        .iter()
        .find(|s| {
            s.trace_id == client_root.trace_id
                && s.name == "ldp.handle TASK_SUBMIT"
                && str_attr(s, "ldp.skill") == Some("research")
        })
        .expect("the task's span, in the client's trace");

    // The chain's attributes on the task's span, as `ldp lctl export` puts them on its chain span.
    let chain_id = &last.chain.as_ref().unwrap().id;
    assert_eq!(str_attr(handled, "lctl.chain.id"), Some(chain_id.as_str()));
    assert_eq!(attr(handled, "lctl.documents"), Some(&any_value::Value::IntValue(2)));
    assert_eq!(
        attr(handled, "lctl.steps"),
        Some(&any_value::Value::IntValue(i64::try_from(last.trace.len()).unwrap()))
    );
    // One event per step, with the step's agent, confidence and the facts it produced.
    assert_eq!(handled.events.len(), last.trace.len(), "{:?}", handled.events);
    for step in &last.trace {
        let event = handled
            .events
            .iter()
            .find(|e| e.name == format!("lctl.step {} {}", step.step, step.agent))
            .unwrap_or_else(|| panic!("step {}'s event", step.step));
        assert_eq!(str_in(&event.attributes, "lctl.agent"), Some(step.agent.as_str()));
        assert_eq!(f64_in(&event.attributes, "lctl.confidence"), step.confidence.map(|c| c.value()));
        for (id, fact) in last.facts.iter().filter(|(_, f)| f.step == Some(step.step)) {
            let key = format!("lctl.fact.{}.text", id.as_str());
            assert_eq!(str_in(&event.attributes, &key), Some(fact.text.as_str()), "{key}");
        }
    }
    assert_eq!(str_attr(handled, "ldp.reply_type"), Some("TASK_RESULT"), "the task's own fields are still there");
    server.shutdown().await.unwrap();
}
