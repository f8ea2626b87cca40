//! The page and its JSON API ([`router`]).

use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, Method, header};
use axum::middleware::{self, Next};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures::Stream;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::delegate::{self, CallRequest, ConnectRequest};
use crate::{InspectError, Inspector, assets, chain};

/// The largest API request body (an LCTL document or a task input; the page sends nothing bigger).
const MAX_BODY: usize = 2 * 1024 * 1024;

/// The longest a conformance run from the page may take (checks not started by then are reported NOT TESTABLE).
const CONFORMANCE_DEADLINE: Duration = Duration::from_secs(180);

/// The page and the API, over `inspector`'s state.
pub fn router(inspector: Inspector) -> Router {
    Router::new()
        .route("/", get(assets::index))
        .route("/app.js", get(assets::script))
        .route("/app.css", get(assets::style))
        .route("/api/defaults", get(defaults))
        .route("/api/connect", post(connect))
        .route("/api/connections/{id}/call", post(call))
        .route("/api/connections/{id}/sessions", get(sessions))
        .route("/api/connections/{id}/wire", get(wire))
        .route("/api/connections/{id}/conformance", post(conformance))
        .route("/api/tasks/{id}/events", get(events))
        .route("/api/tasks/{id}/cancel", post(cancel))
        .route("/api/tasks/{id}/chain", get(task_chain))
        .route("/api/lctl", post(lctl))
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY))
        .layer(middleware::from_fn(guard))
        .with_state(inspector)
}

/// Loopback `Host` only (a DNS-rebinding page cannot reach the API), and writes as JSON only (a cross-origin form
/// cannot send them without a CORS preflight, which is never answered).
async fn guard(request: Request, next: Next) -> Response {
    let host = request.headers().get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or_default();
    if !loopback_host(host) {
        return InspectError::BadRequest(format!("Host {host:?} is not a loopback name: open the page at 127.0.0.1"))
            .into_response();
    }
    if request.method() == Method::POST && !json_body(request.headers()) {
        return InspectError::BadRequest("API requests must be sent as application/json".into()).into_response();
    }
    next.run(request).await
}

fn loopback_host(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or_default(),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    name.eq_ignore_ascii_case("localhost") || name.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

fn json_body(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(';').next().is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json")))
}

/// Reads a JSON body into `T`, a typed message when it does not fit.
fn parse<T: DeserializeOwned>(body: &Bytes) -> Result<T, InspectError> {
    serde_json::from_slice(body)
        .map_err(|e| InspectError::BadRequest(format!("the request is not what the API takes: {e}")))
}

async fn defaults(State(inspector): State<Inspector>) -> Json<Value> {
    let d = &inspector.inner.defaults;
    Json(json!({ "url": d.url, "token_given": d.token.is_some() }))
}

async fn connect(State(inspector): State<Inspector>, body: Bytes) -> Result<Json<Value>, InspectError> {
    let mut form: ConnectRequest = parse(&body)?;
    if form.url.trim().is_empty() {
        return Err(InspectError::BadRequest("enter the delegate's URL".into()));
    }
    if form.token.as_deref().is_none_or(|t| t.trim().is_empty()) {
        form.token = inspector.inner.defaults.token.clone();
    }
    let id = inspector.next_id();
    let connected = std::sync::Arc::new(delegate::connect(id, form).await?);
    let answer = json!({
        "connection": id,
        "url": connected.url,
        "view": connected.card,
        "manifest": connected.manifest,
        "signed": connected.signing.as_ref().map(|k| k.algorithm().as_str()),
    });
    inspector.keep_connection(connected);
    Ok(Json(answer))
}

async fn call(
    State(inspector): State<Inspector>,
    Path(id): Path<u64>,
    body: Bytes,
) -> Result<Json<Value>, InspectError> {
    let request: CallRequest = parse(&body)?;
    let connected = inspector.connection(id)?;
    let task = connected.call(inspector.next_id(), request).await?;
    let answer = json!({ "task": task.id, "session": task.session_id });
    inspector.keep_task(task);
    Ok(Json(answer))
}

async fn sessions(State(inspector): State<Inspector>, Path(id): Path<u64>) -> Result<Json<Value>, InspectError> {
    let connected = inspector.connection(id)?;
    let sessions: Vec<Value> = connected
        .sessions()
        .into_iter()
        .map(|s| {
            let turns: Vec<Value> = s.tasks.iter().filter_map(|t| inspector.task(*t).ok()).map(|t| t.turn()).collect();
            json!({ "session_id": s.session_id, "mode": s.mode, "fallback_chain": s.fallback_chain, "turns": turns })
        })
        .collect();
    Ok(Json(json!({ "sessions": sessions })))
}

#[derive(Deserialize)]
struct Since {
    #[serde(default)]
    since: u64,
}

async fn wire(
    State(inspector): State<Inspector>,
    Path(id): Path<u64>,
    Query(since): Query<Since>,
) -> Result<Json<Value>, InspectError> {
    let connected = inspector.connection(id)?;
    Ok(Json(json!({ "entries": connected.wire.since(since.since) })))
}

/// The task's events as Server-Sent Events: those so far, then each as it comes, until the task ends.
async fn events(
    State(inspector): State<Inspector>,
    Path(id): Path<u64>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, InspectError> {
    let task = inspector.task(id)?;
    let changes = task.subscribe();
    let stream =
        futures::stream::unfold((task, changes, 0usize, false), |(task, mut changes, sent, ended)| async move {
            if ended {
                return None;
            }
            loop {
                let (events, finished) = task.events(sent);
                if !events.is_empty() {
                    let sent = sent + events.len();
                    let data = serde_json::to_string(&events).unwrap_or_else(|_| "[]".into());
                    let event = Event::default().event("events").data(data);
                    // The ending is in this batch when the task has finished and nothing is left after it.
                    let ended = finished && task.events(sent).0.is_empty();
                    return Some((Ok(event), (task, changes, sent, ended)));
                }
                if finished {
                    return None;
                }
                // A task that ends always pushes its ending, which wakes this; the sender lives as long as the task.
                if changes.changed().await.is_err() {
                    return None;
                }
            }
        });
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

async fn cancel(State(inspector): State<Inspector>, Path(id): Path<u64>) -> Result<Json<Value>, InspectError> {
    let task = inspector.task(id)?;
    let connected = inspector.connection(task.connection)?;
    connected.cancel(&task).await?;
    Ok(Json(json!({ "cancel_sent": true })))
}

async fn task_chain(State(inspector): State<Inspector>, Path(id): Path<u64>) -> Result<Json<Value>, InspectError> {
    let task = inspector.task(id)?;
    let chain_id = task.key().map_or_else(|| format!("inspector-task-{id}"), |k| k.task_id);
    let provenance = task.provenance();
    if provenance.is_none() && task.contract.is_none() {
        return Err(InspectError::BadRequest(
            "the task has no chain yet: it has neither a result with provenance nor a contract".into(),
        ));
    }
    let doc = ldp_lctl::ldp::document_from_ldp(chain_id, provenance.as_ref(), task.contract.as_ref())
        .map_err(|e| InspectError::Delegate(format!("the task's provenance does not make an LCTL chain: {e}")))?;
    Ok(Json(serde_json::to_value(chain::view(&doc)).unwrap_or(Value::Null)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LctlRequest {
    text: String,
}

async fn lctl(body: Bytes) -> Result<Json<Value>, InspectError> {
    let request: LctlRequest = parse(&body)?;
    let view = chain::from_text(&request.text)?;
    Ok(Json(serde_json::to_value(view).unwrap_or(Value::Null)))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ConformanceRequest {
    #[serde(default)]
    level: Option<String>,
}

async fn conformance(
    State(inspector): State<Inspector>,
    Path(id): Path<u64>,
    body: Bytes,
) -> Result<Json<Value>, InspectError> {
    let request: ConformanceRequest = if body.is_empty() { ConformanceRequest::default() } else { parse(&body)? };
    let connected = inspector.connection(id)?;
    let mut config = ldp_conformance::Config::new(connected.url.clone());
    let websocket = connected.url.to_ascii_lowercase().starts_with("ws");
    config.transports =
        vec![if websocket { ldp_conformance::TransportKind::Ws } else { ldp_conformance::TransportKind::Http }];
    config.token = connected.token.clone();
    config.signing = connected.signing.clone();
    config.request_timeout = connected.timeout;
    config.deadline = CONFORMANCE_DEADLINE;
    if let Some(level) = request.level.as_deref().filter(|l| !l.is_empty()) {
        config.level = level.parse().map_err(InspectError::BadRequest)?;
    }
    // One run at a time: the kit opens many sessions and would compete with itself for the delegate's limits.
    let flag = &inspector.inner.conformance_running;
    if flag.swap(true, Ordering::AcqRel) {
        return Err(InspectError::BadRequest("a conformance run is already going; wait for its report".into()));
    }
    // Cleared however the run ends, the page's request dropped half-way included.
    let _running = ClearOnDrop(flag);
    let result = ldp_conformance::run(config).await;
    let report = result.map_err(|e| InspectError::Unreachable(format!("the conformance kit could not run: {e}")))?;
    let mut value = serde_json::to_value(&report).unwrap_or(Value::Null);
    value["passed"] = json!(report.passed());
    Ok(Json(value))
}

/// Clears the flag it holds when dropped.
struct ClearOnDrop<'a>(&'a AtomicBool);

impl Drop for ClearOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_hosts_pass() {
        for ok in ["127.0.0.1:8080", "localhost:1", "[::1]:9", "LOCALHOST", "127.1.2.3"] {
            assert!(loopback_host(ok), "{ok}");
        }
        for bad in ["evil.example:8080", "10.0.0.1:80", "", "[fe80::1]:80", "localhost.evil.example"] {
            assert!(!loopback_host(bad), "{bad}");
        }
    }
}
