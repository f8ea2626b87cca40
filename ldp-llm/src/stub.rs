//! Local provider stubs (feature `stub`): axum servers that speak the OpenAI Chat Completions and Anthropic
//! Messages wire formats as their public documentation defines them, for tests, examples, benchmarks and demos.
//!
//! The model "answers" with a fixed reply or by echoing the last user message; a token is a whitespace-separated
//! word (usage counts words of all messages in, words of the answer out), `max_tokens` cuts the answer (finish
//! `length` / `max_tokens`). Every request body is recorded, a [`Behavior`] makes the stub fail as a provider can,
//! and streams can be slowed down to observe cancellation ([`Stub::cancelled_streams`]). A script of turns
//! ([`StubConfig::with_script`]) makes the model answer with tool calls, one turn per request, as both wire formats
//! carry them (streamed, each call's arguments arrive in three pieces).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use futures::StreamExt;
use serde_json::{Value, json};

/// Which wire format a stub speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(clippy::exhaustive_enums)] // The two provider formats of this crate.
pub enum Flavor {
    /// `POST /v1/chat/completions`.
    OpenAi,
    /// `POST /v1/messages`.
    Anthropic,
}

/// How the stub answers the next requests.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Behavior {
    /// Answer normally.
    #[default]
    Answer,
    /// Answer with this HTTP status and a provider error body, with `Retry-After` when given.
    Status {
        /// The HTTP status.
        status: u16,
        /// The `Retry-After` header, in seconds.
        retry_after: Option<u64>,
    },
    /// Answer 500 this many times, then normally.
    FailTimes(usize),
    /// A streamed answer whose second event is not JSON.
    MalformedStream,
    /// A plain answer that is not the provider's format.
    MalformedAnswer,
    /// A streamed answer cut off before its end marker.
    TruncatedStream,
}

/// One scripted answer of the model.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum StubTurn {
    /// Answer this text.
    Text(String),
    /// Call these tools: (name, arguments as JSON text, which may be anything a model writes).
    Calls(Vec<(String, String)>),
}

impl StubTurn {
    /// A turn calling one tool `name` with `arguments`.
    pub fn call(name: impl Into<String>, arguments: &Value) -> Self {
        Self::Calls(vec![(name.into(), arguments.to_string())])
    }

    /// A turn answering `text`.
    pub fn text(text: impl Into<String>) -> Self {
        Self::Text(text.into())
    }
}

/// The stub's configuration.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct StubConfig {
    /// The wire format.
    pub flavor: Flavor,
    /// The model named in answers.
    pub model: String,
    /// A fixed answer; `None` echoes the last user message.
    pub reply: Option<String>,
    /// Delay before each streamed piece.
    pub token_delay: Duration,
    /// The API key required, if any (a wrong one gets 401, with a message quoting it as OpenAI's does).
    pub api_key: Option<String>,
    /// Delay before answering (a model's time to first token).
    pub latency: Duration,
    /// Scripted answers, one per request in order (the last repeats); empty: [`StubConfig::reply`] or the echo.
    pub script: Vec<StubTurn>,
}

impl StubConfig {
    /// An echoing stub of `flavor`, model `stub-model-1`, no delay, no key.
    pub fn new(flavor: Flavor) -> Self {
        Self {
            flavor,
            model: "stub-model-1".into(),
            reply: None,
            token_delay: Duration::ZERO,
            api_key: None,
            latency: Duration::ZERO,
            script: Vec::new(),
        }
    }
    /// Answers each request with the next turn of `script` (the last one repeats).
    #[must_use]
    pub fn with_script(mut self, script: Vec<StubTurn>) -> Self {
        self.script = script;
        self
    }
    /// Answers `reply` to everything.
    #[must_use]
    pub fn with_reply(mut self, reply: impl Into<String>) -> Self {
        self.reply = Some(reply.into());
        self
    }
    /// Waits `delay` before each streamed piece.
    #[must_use]
    pub fn with_token_delay(mut self, delay: Duration) -> Self {
        self.token_delay = delay;
        self
    }
    /// Waits `latency` before answering.
    #[must_use]
    pub fn with_latency(mut self, latency: Duration) -> Self {
        self.latency = latency;
        self
    }
    /// Requires `key`.
    #[must_use]
    pub fn with_api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(key.into());
        self
    }
    /// Names `model` in answers.
    #[must_use]
    pub fn with_model(mut self, model: impl Into<String>) -> Self {
        self.model = model.into();
        self
    }
}

struct Shared {
    cfg: StubConfig,
    behavior: Mutex<Behavior>,
    recorded: Mutex<Vec<Value>>,
    requests: AtomicUsize,
    cancelled: AtomicUsize,
    /// Scripted turns answered so far.
    turns: AtomicUsize,
}

/// A running stub; it stops when dropped.
pub struct Stub {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for Stub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stub").field("addr", &self.addr).finish_non_exhaustive()
    }
}

impl Drop for Stub {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Most request bodies a stub records (the oldest are dropped).
const MAX_RECORDED: usize = 1024;

impl Stub {
    /// Starts a stub on `127.0.0.1` (a free port).
    pub async fn start(cfg: StubConfig) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        Self::serve(listener, cfg)
    }

    /// Serves a stub on `listener`.
    pub fn serve(listener: tokio::net::TcpListener, cfg: StubConfig) -> std::io::Result<Self> {
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            cfg,
            behavior: Mutex::new(Behavior::Answer),
            recorded: Mutex::new(Vec::new()),
            requests: AtomicUsize::new(0),
            cancelled: AtomicUsize::new(0),
            turns: AtomicUsize::new(0),
        });
        let app = axum::Router::new()
            .route("/v1/chat/completions", post(handle))
            .route("/v1/messages", post(handle))
            .with_state(shared.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self { addr, shared, task })
    }

    /// The address served.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The base URL a backend of the stub's flavor takes (`http://addr/v1` for OpenAI, `http://addr` for
    /// Anthropic, as their SDKs do).
    pub fn base_url(&self) -> String {
        match self.shared.cfg.flavor {
            Flavor::OpenAi => format!("http://{}/v1", self.addr),
            Flavor::Anthropic => format!("http://{}", self.addr),
        }
    }

    /// Sets how the next requests are answered.
    pub fn set_behavior(&self, behavior: Behavior) {
        *self.shared.behavior.lock().unwrap_or_else(PoisonError::into_inner) = behavior;
    }

    /// The request bodies received, oldest first.
    pub fn recorded(&self) -> Vec<Value> {
        self.shared.recorded.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Requests received.
    pub fn requests(&self) -> usize {
        self.shared.requests.load(Ordering::SeqCst)
    }

    /// Streamed answers whose client went away before the end.
    pub fn cancelled_streams(&self) -> usize {
        self.shared.cancelled.load(Ordering::SeqCst)
    }
}

fn words(text: &str) -> u64 {
    text.split_whitespace().count() as u64
}

fn error_response(flavor: Flavor, status: StatusCode, message: &str, retry_after: Option<u64>) -> Response {
    let body = match flavor {
        Flavor::OpenAi => json!({"error": {"message": message, "type": "stub_error", "param": null, "code": null}}),
        Flavor::Anthropic => {
            let kind = match status.as_u16() {
                401 => "authentication_error",
                403 => "permission_error",
                429 => "rate_limit_error",
                529 => "overloaded_error",
                400..=499 => "invalid_request_error",
                _ => "api_error",
            };
            json!({"type": "error", "error": {"type": kind, "message": message}})
        }
    };
    let mut resp = (status, axum::Json(body)).into_response();
    if let Some(secs) = retry_after
        && let Ok(v) = secs.to_string().parse()
    {
        resp.headers_mut().insert(header::RETRY_AFTER, v);
    }
    resp
}

/// Drops count as cancellations unless the stream reached its end.
struct StreamGuard {
    shared: Arc<Shared>,
    done: bool,
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        if !self.done {
            self.shared.cancelled.fetch_add(1, Ordering::SeqCst);
        }
    }
}

async fn handle(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    let cfg = &shared.cfg;
    shared.requests.fetch_add(1, Ordering::SeqCst);
    let Ok(request) = serde_json::from_slice::<Value>(&body) else {
        return error_response(cfg.flavor, StatusCode::BAD_REQUEST, "the body is not JSON", None);
    };
    {
        let mut recorded = shared.recorded.lock().unwrap_or_else(PoisonError::into_inner);
        if recorded.len() >= MAX_RECORDED {
            recorded.remove(0);
        }
        recorded.push(request.clone());
    }
    if let Some(expected) = &cfg.api_key {
        let given = match cfg.flavor {
            Flavor::OpenAi => headers
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .unwrap_or_default(),
            Flavor::Anthropic => headers.get("x-api-key").and_then(|v| v.to_str().ok()).unwrap_or_default(),
        };
        if given != expected {
            // As OpenAI does, the refusal quotes the key it was given.
            let message = format!("Incorrect API key provided: {given}.");
            return error_response(cfg.flavor, StatusCode::UNAUTHORIZED, &message, None);
        }
    }
    if cfg.flavor == Flavor::Anthropic && headers.get("anthropic-version").is_none() {
        return error_response(cfg.flavor, StatusCode::BAD_REQUEST, "anthropic-version header is required", None);
    }
    let behavior = {
        let mut b = shared.behavior.lock().unwrap_or_else(PoisonError::into_inner);
        let now = b.clone();
        if let Behavior::FailTimes(n) = now {
            *b = if n <= 1 { Behavior::Answer } else { Behavior::FailTimes(n - 1) };
        }
        now
    };
    match behavior {
        Behavior::Status { status, retry_after } => {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            return error_response(cfg.flavor, status, "stub failure", retry_after);
        }
        Behavior::FailTimes(_) => {
            return error_response(cfg.flavor, StatusCode::INTERNAL_SERVER_ERROR, "stub failure", None);
        }
        Behavior::MalformedAnswer => return (StatusCode::OK, axum::Json(json!({"unexpected": true}))).into_response(),
        _ => {}
    }
    if !cfg.latency.is_zero() {
        tokio::time::sleep(cfg.latency).await;
    }
    let turn = match cfg.script.len() {
        0 => None,
        n => Some(cfg.script[shared.turns.fetch_add(1, Ordering::SeqCst).min(n - 1)].clone()),
    };
    let stream = request.get("stream").and_then(Value::as_bool).unwrap_or(false);
    if let Some(StubTurn::Calls(calls)) = &turn {
        let events = tool_call_answer(cfg, calls, stream);
        return match events {
            Ok(body) => (StatusCode::OK, axum::Json(body)).into_response(),
            Err(events) => sse_response(&shared, events, cfg.token_delay),
        };
    }
    // The conversation: every message's text, and the last user message.
    let messages = request.get("messages").and_then(Value::as_array).cloned().unwrap_or_default();
    let text_of = |m: &Value| m.get("content").and_then(Value::as_str).unwrap_or_default().to_owned();
    let mut input_tokens: u64 = messages.iter().map(|m| words(&text_of(m))).sum();
    input_tokens += request.get("system").and_then(Value::as_str).map_or(0, words);
    let last_user = messages.iter().rev().find(|m| m["role"] == "user").map(text_of).unwrap_or_default();
    let answer = match turn {
        Some(StubTurn::Text(text)) => text,
        _ => cfg.reply.clone().unwrap_or(last_user),
    };
    let all: Vec<&str> = answer.split_whitespace().collect();
    let limit = request.get("max_tokens").and_then(Value::as_u64).map_or(all.len(), |m| m as usize);
    let cut = all.len() > limit;
    let pieces: Vec<String> = all
        .iter()
        .take(limit)
        .enumerate()
        .map(|(i, w)| if i == 0 { (*w).to_owned() } else { format!(" {w}") })
        .collect();
    let output_tokens = pieces.len() as u64;
    let text = pieces.concat();
    let model = cfg.model.clone();
    if !stream {
        let body = match cfg.flavor {
            Flavor::OpenAi => json!({
                "id": "chatcmpl-stub", "object": "chat.completion", "created": 0, "model": model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                             "finish_reason": if cut { "length" } else { "stop" }}],
                "usage": {"prompt_tokens": input_tokens, "completion_tokens": output_tokens,
                          "total_tokens": input_tokens + output_tokens},
            }),
            Flavor::Anthropic => json!({
                "id": "msg_stub", "type": "message", "role": "assistant", "model": model,
                "content": [{"type": "text", "text": text}],
                "stop_reason": if cut { "max_tokens" } else { "end_turn" }, "stop_sequence": null,
                "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens},
            }),
        };
        return (StatusCode::OK, axum::Json(body)).into_response();
    }
    // The stream's events, as SSE text.
    let mut events: Vec<String> = Vec::new();
    let sse = |event: Option<&str>, data: &Value| match event {
        Some(name) => format!("event: {name}\ndata: {data}\n\n"),
        None => format!("data: {data}\n\n"),
    };
    match cfg.flavor {
        Flavor::OpenAi => {
            let chunk = |delta: Value, finish: Value| {
                json!({"id": "chatcmpl-stub", "object": "chat.completion.chunk", "created": 0, "model": model,
                       "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], "usage": null})
            };
            events.push(sse(None, &chunk(json!({"role": "assistant", "content": ""}), Value::Null)));
            for p in &pieces {
                events.push(sse(None, &chunk(json!({"content": p}), Value::Null)));
            }
            events.push(sse(None, &chunk(json!({}), json!(if cut { "length" } else { "stop" }))));
            let include_usage = request.pointer("/stream_options/include_usage").and_then(Value::as_bool) == Some(true);
            if include_usage {
                events.push(sse(
                    None,
                    &json!({"id": "chatcmpl-stub", "object": "chat.completion.chunk", "created": 0,
                    "model": model, "choices": [],
                    "usage": {"prompt_tokens": input_tokens, "completion_tokens": output_tokens,
                              "total_tokens": input_tokens + output_tokens}}),
                ));
            }
            events.push("data: [DONE]\n\n".to_owned());
        }
        Flavor::Anthropic => {
            events.push(sse(
                Some("message_start"),
                &json!({"type": "message_start", "message": {
                "id": "msg_stub", "type": "message", "role": "assistant", "content": [], "model": model,
                "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": input_tokens, "output_tokens": 1}}}),
            ));
            events.push(sse(
                Some("content_block_start"),
                &json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            ));
            events.push(sse(Some("ping"), &json!({"type": "ping"})));
            for p in &pieces {
                events.push(sse(
                    Some("content_block_delta"),
                    &json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": p}}),
                ));
            }
            events.push(sse(Some("content_block_stop"), &json!({"type": "content_block_stop", "index": 0})));
            events.push(sse(
                Some("message_delta"),
                &json!({"type": "message_delta",
                "delta": {"stop_reason": if cut { "max_tokens" } else { "end_turn" }, "stop_sequence": null},
                "usage": {"output_tokens": output_tokens}}),
            ));
            events.push(sse(Some("message_stop"), &json!({"type": "message_stop"})));
        }
    }
    match behavior {
        Behavior::MalformedStream if events.len() > 1 => events[1] = "data: {not json\n\n".to_owned(),
        Behavior::TruncatedStream => {
            let keep = events.len() / 2;
            events.truncate(keep);
        }
        _ => {}
    }
    sse_response(&shared, events, cfg.token_delay)
}

/// `events` as a streamed answer, `delay` before each after the first.
fn sse_response(shared: &Arc<Shared>, events: Vec<String>, delay: Duration) -> Response {
    let guard = StreamGuard { shared: shared.clone(), done: false };
    let total = events.len();
    let body =
        futures::stream::unfold((events.into_iter().enumerate(), guard), move |(mut it, mut guard)| async move {
            let (i, event) = it.next()?;
            if !delay.is_zero() && i > 0 {
                tokio::time::sleep(delay).await;
            }
            if i + 1 == total {
                guard.done = true;
            }
            Some((Ok::<_, Infallible>(Bytes::from(event)), (it, guard)))
        });
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(body.boxed()))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// `text` in three pieces (at character boundaries), as a model streams a call's arguments.
fn thirds(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let step = chars.len().div_ceil(3).max(1);
    chars.chunks(step).map(|c| c.iter().collect()).collect()
}

/// A turn of tool calls: the plain answer's body (`Ok`), or the stream's events (`Err`).
fn tool_call_answer(cfg: &StubConfig, calls: &[(String, String)], stream: bool) -> Result<Value, Vec<String>> {
    let model = cfg.model.as_str();
    let sse = |event: Option<&str>, data: &Value| match event {
        Some(name) => format!("event: {name}\ndata: {data}\n\n"),
        None => format!("data: {data}\n\n"),
    };
    let usage_out = calls.len() as u64 * 8;
    match (cfg.flavor, stream) {
        (Flavor::OpenAi, false) => {
            let wire: Vec<Value> = calls
                .iter()
                .enumerate()
                .map(|(i, (name, args))| {
                    json!({"id": format!("call_stub_{i}"), "type": "function",
                           "function": {"name": name, "arguments": args}})
                })
                .collect();
            Ok(json!({
                "id": "chatcmpl-stub", "object": "chat.completion", "created": 0, "model": model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": null, "tool_calls": wire},
                             "finish_reason": "tool_calls"}],
                "usage": {"prompt_tokens": 10, "completion_tokens": usage_out, "total_tokens": 10 + usage_out},
            }))
        }
        (Flavor::Anthropic, false) => {
            let blocks: Vec<Value> = calls
                .iter()
                .enumerate()
                .map(|(i, (name, args))| {
                    let input: Value = serde_json::from_str(args).unwrap_or_else(|_| json!({"raw": args}));
                    json!({"type": "tool_use", "id": format!("toolu_stub_{i}"), "name": name, "input": input})
                })
                .collect();
            Ok(json!({
                "id": "msg_stub", "type": "message", "role": "assistant", "model": model, "content": blocks,
                "stop_reason": "tool_use", "stop_sequence": null,
                "usage": {"input_tokens": 10, "output_tokens": usage_out},
            }))
        }
        (Flavor::OpenAi, true) => {
            let chunk = |delta: Value, finish: Value| {
                json!({"id": "chatcmpl-stub", "object": "chat.completion.chunk", "created": 0, "model": model,
                       "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], "usage": null})
            };
            let mut events = vec![sse(None, &chunk(json!({"role": "assistant", "content": null}), Value::Null))];
            for (i, (name, args)) in calls.iter().enumerate() {
                let first = json!({"tool_calls": [{"index": i, "id": format!("call_stub_{i}"), "type": "function",
                                                   "function": {"name": name, "arguments": ""}}]});
                events.push(sse(None, &chunk(first, Value::Null)));
                for piece in thirds(args) {
                    let more = json!({"tool_calls": [{"index": i, "function": {"arguments": piece}}]});
                    events.push(sse(None, &chunk(more, Value::Null)));
                }
            }
            events.push(sse(None, &chunk(json!({}), json!("tool_calls"))));
            events.push(sse(
                None,
                &json!({"id": "chatcmpl-stub", "object": "chat.completion.chunk", "created": 0, "model": model,
                        "choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": usage_out,
                                                 "total_tokens": 10 + usage_out}}),
            ));
            events.push("data: [DONE]\n\n".to_owned());
            Err(events)
        }
        (Flavor::Anthropic, true) => {
            let mut events = vec![sse(
                Some("message_start"),
                &json!({"type": "message_start", "message": {"id": "msg_stub", "type": "message",
                        "role": "assistant", "content": [], "model": model, "stop_reason": null,
                        "stop_sequence": null, "usage": {"input_tokens": 10, "output_tokens": 1}}}),
            )];
            for (i, (name, args)) in calls.iter().enumerate() {
                events.push(sse(
                    Some("content_block_start"),
                    &json!({"type": "content_block_start", "index": i, "content_block":
                            {"type": "tool_use", "id": format!("toolu_stub_{i}"), "name": name, "input": {}}}),
                ));
                for piece in thirds(args) {
                    events.push(sse(
                        Some("content_block_delta"),
                        &json!({"type": "content_block_delta", "index": i,
                                "delta": {"type": "input_json_delta", "partial_json": piece}}),
                    ));
                }
                events.push(sse(Some("content_block_stop"), &json!({"type": "content_block_stop", "index": i})));
            }
            events.push(sse(
                Some("message_delta"),
                &json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null},
                        "usage": {"output_tokens": usage_out}}),
            ));
            events.push(sse(Some("message_stop"), &json!({"type": "message_stop"})));
            Err(events)
        }
    }
}
