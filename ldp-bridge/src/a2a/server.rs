//! The A2A server: the Agent Card route and the JSON-RPC handler, each message one LDP task in its context's
//! LDP session.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use a2a::errors::error_code;
use a2a::{
    Artifact, CancelTaskRequest, DeleteTaskPushNotificationConfigRequest, GetTaskPushNotificationConfigRequest,
    GetTaskRequest, ListTaskPushNotificationConfigsRequest, ListTaskPushNotificationConfigsResponse, ListTasksRequest,
    ListTasksResponse, Message, Role, SendMessageRequest, StreamResponse, SubscribeToTaskRequest, Task,
    TaskPushNotificationConfig, TaskState, TaskStatusUpdateEvent,
};
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use ldp_session::runtime::{Progress, Submission};
use ldp_session::{PeerContext, SessionError};
use ldp_types::{LdpError, RawJson, SessionConfig, codes};
use serde_json::{Value, json};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, broadcast, mpsc};
use tokio_util::sync::CancellationToken;

use super::card::{self, CardOptions};
use super::push::{Pusher, Refused};
use super::rpc::{self, Dialect, Method, RpcError};
use super::tables::{Context, Filter, Opened, Refusal, Tables, TaskEntry};
use super::{A2aLimits, ERROR_META, INPUT_REQUIRED, PROGRESS_META, PROVENANCE_META, SKILL_META};
use crate::BridgeError;
use crate::upstream::Upstream;

/// What every request of one A2A endpoint shares.
struct Server<U: Upstream> {
    upstream: Arc<U>,
    limits: A2aLimits,
    tables: Tables<U>,
    running: Arc<Semaphore>,
    pusher: Pusher,
    stop: CancellationToken,
}

/// The cancellation signal of a running task (`CancelTask` notifies it; the task's runner sends TASK_CANCEL).
struct Running {
    entry: Arc<TaskEntry>,
    cancel: Arc<Notify>,
}

pub(super) fn router<U: Upstream, S: Clone + Send + Sync + 'static>(
    upstream: Arc<U>,
    limits: A2aLimits,
    stop: CancellationToken,
) -> axum::Router<S> {
    let tables = Tables::new(limits.max_contexts, limits.max_tasks, limits.context_idle, limits.task_ttl);
    let running = Arc::new(Semaphore::new(limits.max_running.max(1)));
    let pusher = Pusher::new(limits.push.clone());
    let server = Arc::new(Server { upstream, limits, tables, running, pusher, stop });
    let cancels: Arc<std::sync::Mutex<HashMap<String, Arc<Notify>>>> = Arc::default();
    axum::Router::new().route(super::RPC_PATH, axum::routing::post(handle::<U>)).with_state((server, cancels))
}

pub(super) fn card_router<U: Upstream, S: Clone + Send + Sync + 'static>(
    upstream: Arc<U>,
    options: CardOptions,
) -> axum::Router<S> {
    let serve_card = move || {
        let card = upstream.card();
        let mut options = options.clone();
        if options.base_url.is_empty() {
            options.base_url.clone_from(&card.endpoint);
        }
        async move { axum::Json(card::agent_card(&card, &options)) }
    };
    axum::Router::new().route(super::CARD_PATH, axum::routing::get(serve_card))
}

type Cancels = Arc<std::sync::Mutex<HashMap<String, Arc<Notify>>>>;
type Shared<U> = (Arc<Server<U>>, Cancels);

fn answer(status: StatusCode, body: Value) -> Response {
    (status, axum::Json(body)).into_response()
}

async fn handle<U: Upstream>(
    State((server, cancels)): State<Shared<U>>,
    peer: Option<axum::Extension<PeerContext>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let limit = server.limits.max_body;
    let too_large = || {
        let error = LdpError::transport(codes::MESSAGE_TOO_LARGE, format!("the request body is over {limit} bytes"));
        answer(
            StatusCode::PAYLOAD_TOO_LARGE,
            rpc::error_answer(&Value::Null, &RpcError::ldp(error_code::INVALID_REQUEST, error), Dialect::V1),
        )
    };
    // As on /ldp/messages: a cross-origin page cannot send JSON without a preflight the server does not grant, so
    // requiring it keeps a page from running tasks on a local delegate without credentials.
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(';').next().unwrap_or_default().trim().to_ascii_lowercase())
        .is_some_and(|v| v == "application/json" || v == "application/a2a+json");
    if !json {
        let error = RpcError::new(error_code::INVALID_REQUEST, "the request must be application/json");
        return answer(StatusCode::UNSUPPORTED_MEDIA_TYPE, rpc::error_answer(&Value::Null, &error, Dialect::V1));
    }
    let declared =
        headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return too_large();
    }
    let Ok(bytes) = axum::body::to_bytes(body, limit).await else { return too_large() };
    let request = match rpc::parse(&bytes) {
        Ok(request) => request,
        Err((id, error)) => return answer(StatusCode::OK, rpc::error_answer(&id, &error, Dialect::V1)),
    };
    let Some((method, dialect)) = Method::parse(&request.method) else {
        let error = RpcError::new(error_code::METHOD_NOT_FOUND, format!("method {:?} is not served", request.method));
        return answer(StatusCode::OK, rpc::error_answer(&request.id, &error, Dialect::V1));
    };
    let params = match dialect {
        Dialect::V1 => request.params,
        Dialect::V03 => rpc::params_from_v03(request.params),
    };
    let peer = peer.map(|p| p.0).unwrap_or_default();
    let id = request.id;
    let result = match method {
        Method::Send | Method::Stream => match start(&server, &cancels, params, peer, method == Method::Stream).await {
            Ok((entry, None, immediately)) => send_result(&server, entry, immediately, dialect).await,
            Ok((entry, Some(events), _)) => return stream(&server, id, entry, events, dialect),
            Err(e) => Err(e),
        },
        Method::Get => get(&server, params, &peer, dialect),
        Method::Cancel => cancel(&server, &cancels, params, &peer, dialect).await,
        Method::List => list(&server, params, &peer),
        Method::Subscribe => match subscribe(&server, params, &peer) {
            Ok((entry, events)) => return resubscribed(&server, id, entry, events, dialect),
            Err(e) => Err(e),
        },
        Method::PushCreate | Method::PushGet | Method::PushList | Method::PushDelete => {
            push_config(&server, method, params, &peer).await
        }
    };
    let body = match result {
        Ok(result) => rpc::result_answer(&id, result),
        Err(error) => rpc::error_answer(&id, &error, dialect),
    };
    answer(StatusCode::OK, body)
}

fn invalid_params(e: impl std::fmt::Display) -> RpcError {
    RpcError::new(error_code::INVALID_PARAMS, format!("invalid params: {e}"))
}

fn refused(refusal: Refusal, what: &'static str) -> RpcError {
    match refusal {
        Refusal::Full(limit) => {
            RpcError::ldp(error_code::INTERNAL_ERROR, BridgeError::Capacity { what, limit }.to_ldp_error())
        }
        Refusal::OtherPrincipal => {
            RpcError::ldp(error_code::INVALID_PARAMS, BridgeError::NotSessionPeer.to_ldp_error())
        }
    }
}

fn task_value(task: &Task, dialect: Dialect) -> Value {
    let value = serde_json::to_value(task).unwrap_or(Value::Null);
    match dialect {
        Dialect::V1 => value,
        Dialect::V03 => rpc::task_v03(value),
    }
}

/// Opens (or finds) the message's context, creates its task and starts running it. With `events`, the runner also
/// sends the task's stream events to the returned receiver. The flag is the request's `returnImmediately`.
#[allow(clippy::type_complexity)] // The task, its optional event stream and one flag.
async fn start<U: Upstream>(
    server: &Arc<Server<U>>,
    cancels: &Cancels,
    params: Value,
    peer: PeerContext,
    events: bool,
) -> Result<(Arc<TaskEntry>, Option<mpsc::Receiver<StreamResponse>>, bool), RpcError> {
    let request: SendMessageRequest = serde_json::from_value(params).map_err(invalid_params)?;
    let immediately = request.configuration.as_ref().and_then(|c| c.return_immediately).unwrap_or(false);
    let push = request.configuration.as_ref().and_then(|c| c.task_push_notification_config.clone());
    let message = &request.message;
    let input = card::parts_value(&message.parts).ok_or_else(|| invalid_params("the message has no parts"))?;
    let principal = peer.principal().map(|p| p.into_owned());
    // A message naming a task continues it (it must be waiting for input): the next LDP task of its session.
    let continued = match &message.task_id {
        Some(id) => {
            let entry = server.tables.task(id, principal.as_deref()).ok_or_else(|| not_found(id))?;
            if message
                .context_id
                .as_ref()
                .is_some_and(|c| *c != entry.snapshot().map(|t| t.context_id).unwrap_or_default())
            {
                return Err(invalid_params("the message's contextId is not its task's"));
            }
            Some(entry)
        }
        None => None,
    };
    let named = [message.metadata.as_ref(), request.metadata.as_ref()]
        .into_iter()
        .flatten()
        .find_map(|m| m.get(SKILL_META).and_then(Value::as_str).map(str::to_owned));
    let skill =
        match (&continued, named) {
            (Some(entry), _) => entry.skill.clone(),
            (None, Some(skill)) => skill,
            (None, None) => {
                server.upstream.card().capabilities.first().map(|c| c.name.clone()).ok_or_else(|| {
                    RpcError::new(error_code::UNSUPPORTED_OPERATION, "the delegate has no skill to run")
                })?
            }
        };
    if push.is_some() && !server.limits.push.enabled {
        return Err(push_unsupported());
    }
    let permit = server
        .running
        .clone()
        .try_acquire_owned()
        .map_err(|_| refused(Refusal::Full(server.limits.max_running), "A2A tasks running"))?;
    let context_id = match &continued {
        Some(entry) => entry.snapshot().map(|t| t.context_id).unwrap_or_default(),
        None => message.context_id.clone().unwrap_or_else(|| uuid::Uuid::new_v4().to_string()),
    };
    let (context, evicted) =
        server.tables.context(&context_id, principal.as_deref()).map_err(|r| refused(r, "A2A contexts"))?;
    for old in evicted {
        close(old, server.limits.cancel_timeout);
    }
    if let Err(e) = open(server, &context, peer).await {
        if context.opened.get().is_none() {
            server.tables.forget_context(&context_id);
        }
        return Err(RpcError::ldp(error_code::INTERNAL_ERROR, e.to_ldp_error()));
    }
    let entry = match continued {
        Some(entry) => {
            entry.resume().map_err(|state| {
                let state = serde_json::to_value(state).unwrap_or(Value::Null);
                RpcError::new(
                    error_code::UNSUPPORTED_OPERATION,
                    format!("the task is {state}: only a task waiting for input takes another message"),
                )
            })?;
            entry
        }
        None => {
            let task_id = uuid::Uuid::new_v4().to_string();
            let events = server.limits.max_queued_events;
            let entry = Arc::new(TaskEntry::new(task_id.clone(), context_id, principal, skill.clone(), events));
            server.tables.add_task(&task_id, entry.clone()).map_err(|r| refused(r, "A2A tasks"))?;
            if let Some(config) = push
                && let Err(refusal) = server.pusher.add(&entry.pushes, &task_id, config).await
            {
                server.tables.forget_task(&task_id);
                return Err(push_refused(refusal));
            }
            entry
        }
    };
    entry.record(message.clone());
    let task_id = entry.snapshot().map(|t| t.id).unwrap_or_default();
    let cancel = Arc::new(Notify::new());
    if let Ok(mut map) = cancels.lock() {
        map.retain(|_, n| Arc::strong_count(n) > 1);
        map.insert(task_id, cancel.clone());
    }
    let (tx, rx) = if events {
        let (tx, rx) = mpsc::channel(server.limits.max_queued_events.max(2));
        (Some(tx), Some(rx))
    } else {
        (None, None)
    };
    context.running.fetch_add(1, Ordering::SeqCst);
    let run = Run { server: server.clone(), context, running: Running { entry: entry.clone(), cancel }, permit };
    tokio::spawn(run.go(skill, RawJson::from(input), tx));
    Ok((entry, rx, immediately))
}

/// Opens the context's LDP session on its first message, as the peer the HTTP layer authenticated.
async fn open<U: Upstream>(server: &Server<U>, context: &Context<U>, peer: PeerContext) -> Result<(), BridgeError> {
    let limit = server.limits.connect_timeout;
    context
        .opened
        .get_or_try_init(|| async {
            let open = async {
                let client = server.upstream.connect(peer).await?;
                let info = client.propose(SessionConfig::default()).await?;
                Ok::<_, SessionError>(Opened { client: Arc::new(client), session_id: info.session_id })
            };
            tokio::time::timeout(limit, open)
                .await
                .map_err(|_| BridgeError::Timeout { what: "opening the LDP session", after: limit })?
                .map_err(BridgeError::from)
        })
        .await
        .map(|_| ())
}

/// Closes an evicted context's LDP session in the background (its TTL reaps it if the close cannot be sent).
fn close<U: Upstream>(context: Arc<Context<U>>, timeout: Duration) {
    if let Some(opened) = context.opened.get() {
        let (client, session) = (opened.client.clone(), opened.session_id.clone());
        tokio::spawn(async move {
            let _ = tokio::time::timeout(timeout, client.close(&session)).await;
        });
    }
}

/// One task running: the LDP submit, its progress relayed, its end recorded.
struct Run<U: Upstream> {
    server: Arc<Server<U>>,
    context: Arc<Context<U>>,
    running: Running,
    permit: OwnedSemaphorePermit,
}

/// Longest a terminal event may wait for a slow streaming client.
const FINAL_EVENT_TIMEOUT: Duration = Duration::from_secs(5);

fn agent_text(text: String) -> Message {
    Message::new(Role::Agent, vec![a2a::Part::text(text)])
}

fn status_event(task: &Task, metadata: Option<HashMap<String, Value>>) -> StreamResponse {
    StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
        task_id: task.id.clone(),
        context_id: task.context_id.clone(),
        status: task.status.clone(),
        metadata,
    })
}

impl<U: Upstream> Run<U> {
    async fn go(self, skill: String, input: RawJson, events: Option<mpsc::Sender<StreamResponse>>) {
        let entry = self.running.entry.clone();
        let limits = &self.server.limits;
        // Progress is advisory: a streaming client not keeping up misses some, never the end.
        let emit = |event: StreamResponse| {
            entry.publish(&event);
            if let Some(events) = &events {
                let _ = events.try_send(event);
            }
        };
        if let Some(task) = entry.update(|t| t.status.state = TaskState::Working) {
            emit(status_event(&task, None));
        }
        let (progress, mut updates) = mpsc::channel::<Progress>(limits.max_queued_events.max(2));
        let relay = async {
            while let Some(update) = updates.recv().await {
                let text = update.message.clone().or_else(|| {
                    update.partial.as_ref().map(|p| match p.to_value() {
                        Ok(Value::String(s)) => s,
                        _ => p.json().to_owned(),
                    })
                });
                let Some(mut task) = entry.snapshot() else { continue };
                task.status.message = text.map(agent_text);
                let meta = json!({"progress": update.progress, "message": update.message,
                    "partial": update.partial.and_then(|p| p.to_value().ok())});
                emit(status_event(&task, Some(HashMap::from([(PROGRESS_META.to_owned(), meta)]))));
            }
        };
        let outcome = async {
            {
                let Some(opened) = self.context.opened.get() else {
                    return Err(LdpError::session(codes::SESSION_NOT_FOUND, "the context has no LDP session"));
                };
                self.submit(opened, &skill, input, progress).await
            }
        };
        let (outcome, ()) = tokio::join!(outcome, relay);
        let final_events = match outcome {
            Ok((output, provenance)) => {
                let provenance = serde_json::to_value(&provenance).unwrap_or(Value::Null);
                let meta = HashMap::from([(PROVENANCE_META.to_owned(), provenance)]);
                let artifact = Artifact {
                    artifact_id: uuid::Uuid::new_v4().to_string(),
                    name: Some(skill.clone()),
                    description: None,
                    parts: card::output_parts(&output),
                    metadata: Some(meta.clone()),
                    extensions: None,
                };
                entry
                    .update(|t| {
                        t.artifacts = Some(vec![artifact.clone()]);
                        t.metadata = Some(meta);
                        t.status.state = TaskState::Completed;
                        t.status.message = None;
                    })
                    .map(|task| {
                        let update = a2a::TaskArtifactUpdateEvent {
                            task_id: task.id.clone(),
                            context_id: task.context_id.clone(),
                            artifact,
                            append: Some(false),
                            last_chunk: Some(true),
                            metadata: None,
                        };
                        vec![StreamResponse::ArtifactUpdate(update), status_event(&task, None)]
                    })
            }
            Err(error) if error.code == INPUT_REQUIRED && !entry.cancel_requested.load(Ordering::SeqCst) => {
                // The delegate asks: the task waits for the client's next message (the next LDP task).
                let question = match &error.partial_output {
                    Some(Value::String(text)) => vec![a2a::Part::text(text.clone())],
                    Some(data) => vec![a2a::Part::data(data.clone())],
                    None => vec![a2a::Part::text(error.message.clone())],
                };
                let question = Message::new(Role::Agent, question);
                entry.record(question.clone());
                entry
                    .update(|t| {
                        t.status.state = TaskState::InputRequired;
                        t.status.message = Some(question);
                    })
                    .map(|task| vec![status_event(&task, None)])
            }
            Err(error) => {
                let cancelled = error.code == codes::CANCELLED && entry.cancel_requested.load(Ordering::SeqCst);
                let typed = serde_json::to_value(&error).unwrap_or(Value::Null);
                entry
                    .update(|t| {
                        t.status.state = if cancelled { TaskState::Canceled } else { TaskState::Failed };
                        t.status.message = Some(agent_text(format!("{}: {}", error.code.as_str(), error.message)));
                        t.metadata = Some(HashMap::from([(ERROR_META.to_owned(), typed.clone())]));
                    })
                    .map(|task| vec![status_event(&task, Some(HashMap::from([(ERROR_META.to_owned(), typed)])))])
            }
        };
        let mut streaming = events.is_some();
        for event in final_events.unwrap_or_default() {
            entry.publish(&event);
            if let (Some(events), true) = (&events, streaming) {
                streaming =
                    tokio::time::timeout(FINAL_EVENT_TIMEOUT, events.send(event)).await.is_ok_and(|r| r.is_ok());
            }
        }
        if entry.snapshot().is_some_and(|t| t.status.state.is_terminal()) {
            entry.pushes.close();
        }
        self.context.running.fetch_sub(1, Ordering::SeqCst);
        drop(self.permit);
    }

    /// Submits the task; TASK_CANCEL when `CancelTask` asks or the deadline passes.
    async fn submit(
        &self,
        opened: &Opened<U>,
        skill: &str,
        input: RawJson,
        progress: mpsc::Sender<Progress>,
    ) -> Result<(RawJson, ldp_types::Provenance), LdpError> {
        let limits = &self.server.limits;
        let entry = &self.running.entry;
        let note = |key: &ldp_session::TaskKey| {
            if let Ok(mut slot) = entry.key.lock() {
                *slot = Some(key.clone());
            }
        };
        let submit = opened
            .client
            .submit_task(Submission::new(&opened.session_id, skill, input).progress(progress).on_key(note));
        tokio::pin!(submit);
        let timeout = tokio::select! {
            done = &mut submit => return done.map(|o| (o.output, o.provenance)).map_err(|e| e.to_ldp_error()),
            () = self.running.cancel.notified() => None,
            () = self.server.stop.cancelled() => None,
            () = tokio::time::sleep(limits.call_timeout) => {
                Some(BridgeError::Timeout { what: "the LDP task", after: limits.call_timeout }.to_ldp_error())
            }
        };
        let key = entry.key.lock().ok().and_then(|k| k.clone());
        if let Some(key) = key {
            let _ = tokio::time::timeout(limits.cancel_timeout, opened.client.cancel(&key)).await;
        }
        let answered = tokio::time::timeout(limits.cancel_timeout, &mut submit).await;
        match (timeout, answered) {
            (Some(timeout), _) => Err(timeout),
            (None, Ok(done)) => done.map(|o| (o.output, o.provenance)).map_err(|e| e.to_ldp_error()),
            (None, Err(_)) => {
                Err(BridgeError::Timeout { what: "the cancelled task's answer", after: limits.cancel_timeout }
                    .to_ldp_error())
            }
        }
    }
}

/// `SendMessage`: the task when it ends (or at once, as it stands, with `returnImmediately`).
async fn send_result<U: Upstream>(
    server: &Server<U>,
    entry: Arc<TaskEntry>,
    immediately: bool,
    dialect: Dialect,
) -> Result<Value, RpcError> {
    let limits = &server.limits;
    if !immediately {
        // The runner ends the task by its own deadline; this bound only guards against a runner that could not.
        let wait = limits.call_timeout + limits.cancel_timeout * 3;
        let mut done = entry.done.subscribe();
        let _ = tokio::time::timeout(wait, done.wait_for(|d| *d)).await;
    }
    let task = entry.snapshot().ok_or_else(|| RpcError::new(error_code::INTERNAL_ERROR, "the task's state is lost"))?;
    Ok(match dialect {
        Dialect::V1 => json!({ "task": task_value(&task, dialect) }),
        Dialect::V03 => task_value(&task, dialect),
    })
}

/// `SendStreamingMessage`: an SSE stream of JSON-RPC answers, the task first, then its events until it ends (or the
/// server stops).
fn stream<U: Upstream>(
    server: &Server<U>,
    id: Value,
    entry: Arc<TaskEntry>,
    events: mpsc::Receiver<StreamResponse>,
    dialect: Dialect,
) -> Response {
    let first = entry.snapshot().map(StreamResponse::Task);
    let rest = futures::stream::unfold(events, |mut rx| async move { rx.recv().await.map(|e| (e, rx)) });
    sse_answer(server, id, futures::stream::iter(first).chain(rest), dialect)
}

/// An SSE answer: each event a JSON-RPC result answering request `id`, until the events end or the server stops.
fn sse_answer<U: Upstream>(
    server: &Server<U>,
    id: Value,
    events: impl futures::Stream<Item = StreamResponse> + Send + 'static,
    dialect: Dialect,
) -> Response {
    let to_event = move |event: StreamResponse| {
        let value = serde_json::to_value(&event).unwrap_or(Value::Null);
        let value = match dialect {
            Dialect::V1 => value,
            Dialect::V03 => rpc::event_v03(value),
        };
        Ok::<_, Infallible>(Event::default().data(rpc::result_answer(&id, value).to_string()))
    };
    let stream = events.map(to_event).take_until(server.stop.clone().cancelled_owned());
    Sse::new(stream).keep_alive(KeepAlive::default()).into_response()
}

fn get<U: Upstream>(
    server: &Server<U>,
    params: Value,
    peer: &PeerContext,
    dialect: Dialect,
) -> Result<Value, RpcError> {
    let request: GetTaskRequest = serde_json::from_value(params).map_err(invalid_params)?;
    let principal = peer.principal();
    let entry = server.tables.task(&request.id, principal.as_deref()).ok_or_else(|| not_found(&request.id))?;
    let task = entry.snapshot().ok_or_else(|| not_found(&request.id))?;
    Ok(task_value(&with_history(task, request.history_length)?, dialect))
}

/// The task with at most `length` of its latest history messages (A2A: absent means all of them, 0 none).
fn with_history(mut task: Task, length: Option<i32>) -> Result<Task, RpcError> {
    match length {
        None => {}
        Some(n) if n < 0 => return Err(invalid_params("historyLength must not be negative")),
        Some(0) => task.history = None,
        Some(n) => {
            if let Some(history) = &mut task.history {
                let keep = usize::try_from(n).unwrap_or(usize::MAX);
                let drop = history.len().saturating_sub(keep);
                history.drain(..drop);
            }
        }
    }
    Ok(task)
}

/// Most tasks one `ListTasks` page holds, and how many when the request does not say.
const MAX_PAGE: usize = 100;
const DEFAULT_PAGE: usize = 50;

/// `ListTasks`: the caller's tasks (another principal's do not exist for it), newest first, filtered by context,
/// state and status time, paged by an opaque token; artifacts only when asked for, history as `GetTask`'s.
fn list<U: Upstream>(server: &Server<U>, params: Value, peer: &PeerContext) -> Result<Value, RpcError> {
    let request: ListTasksRequest = serde_json::from_value(params).map_err(invalid_params)?;
    let size = match request.page_size {
        None | Some(0) => DEFAULT_PAGE,
        Some(n) if n < 0 => return Err(invalid_params("pageSize must not be negative")),
        Some(n) => usize::try_from(n).unwrap_or(MAX_PAGE).min(MAX_PAGE),
    };
    let before = match request.page_token.as_deref().filter(|t| !t.is_empty()) {
        None => None,
        Some(token) => Some(token.parse::<u64>().map_err(|_| invalid_params("the pageToken is not one of ours"))?),
    };
    let filter = Filter {
        context_id: request.context_id.filter(|c| !c.is_empty()),
        state: request.status.filter(|s| *s != TaskState::Unspecified),
        after: request.status_timestamp_after,
        before,
    };
    let principal = peer.principal();
    let page = server.tables.list(principal.as_deref(), &filter, size);
    let artifacts = request.include_artifacts.unwrap_or(false);
    let tasks = page
        .tasks
        .into_iter()
        .map(|mut task| {
            if !artifacts {
                task.artifacts = None;
            }
            with_history(task, request.history_length)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let response = ListTasksResponse {
        page_size: i32::try_from(tasks.len()).unwrap_or(i32::MAX),
        tasks,
        next_page_token: page.next.map(|n| n.to_string()).unwrap_or_default(),
        total_size: i32::try_from(page.total).unwrap_or(i32::MAX),
    };
    serde_json::to_value(&response).map_err(|e| RpcError::new(error_code::INTERNAL_ERROR, e.to_string()))
}

/// `SubscribeToTask`: the task's events from now on. A task that ended has nothing more to send (A2A's
/// unsupported operation).
fn subscribe<U: Upstream>(
    server: &Server<U>,
    params: Value,
    peer: &PeerContext,
) -> Result<(Arc<TaskEntry>, broadcast::Receiver<StreamResponse>), RpcError> {
    let request: SubscribeToTaskRequest = serde_json::from_value(params).map_err(invalid_params)?;
    let principal = peer.principal();
    let entry = server.tables.task(&request.id, principal.as_deref()).ok_or_else(|| not_found(&request.id))?;
    // Subscribed before the state is read: nothing that happens after the check is missed.
    let events = entry.events.subscribe();
    if entry.snapshot().is_none_or(|t| t.status.state.is_terminal()) {
        return Err(RpcError::new(
            error_code::UNSUPPORTED_OPERATION,
            format!("task {:?} has ended: read it with GetTask", request.id),
        ));
    }
    Ok((entry, events))
}

/// Whether a stream of the task ends after `event`: a terminal state, or a question for the client.
fn ends_stream(event: &StreamResponse) -> bool {
    match event {
        StreamResponse::StatusUpdate(u) => u.status.state.is_terminal() || u.status.state == TaskState::InputRequired,
        StreamResponse::Task(t) => t.status.state.is_terminal() || t.status.state == TaskState::InputRequired,
        _ => false,
    }
}

/// The SSE answer of `SubscribeToTask`: the task as it stands, then its events until it ends or asks; a subscriber
/// that lagged past the bound is sent the task anew instead of what it missed.
fn resubscribed<U: Upstream>(
    server: &Server<U>,
    id: Value,
    entry: Arc<TaskEntry>,
    events: broadcast::Receiver<StreamResponse>,
    dialect: Dialect,
) -> Response {
    let first = entry.snapshot().map(StreamResponse::Task);
    let over = first.as_ref().is_some_and(ends_stream);
    let rest = futures::stream::unfold((events, entry, over), |(mut rx, entry, over)| async move {
        if over {
            return None;
        }
        let event = match rx.recv().await {
            Ok(event) => event,
            Err(broadcast::error::RecvError::Lagged(_)) => StreamResponse::Task(entry.snapshot()?),
            Err(broadcast::error::RecvError::Closed) => return None,
        };
        let over = ends_stream(&event);
        Some((event, (rx, entry, over)))
    });
    sse_answer(server, id, futures::stream::iter(first).chain(rest), dialect)
}

fn to_json(value: &impl serde::Serialize) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
}

fn push_unsupported() -> RpcError {
    RpcError::new(error_code::PUSH_NOTIFICATION_NOT_SUPPORTED, "push notifications are not enabled on this server")
}

fn push_refused(refusal: Refused) -> RpcError {
    match refusal {
        Refused::Url(why) => invalid_params(why),
        Refused::Full(what, limit) => {
            RpcError::ldp(error_code::INTERNAL_ERROR, BridgeError::Capacity { what, limit }.to_ldp_error())
        }
    }
}

/// The push notification config methods: create (checked against the address rules), get, list and delete, on a
/// task the caller may see.
async fn push_config<U: Upstream>(
    server: &Server<U>,
    method: Method,
    params: Value,
    peer: &PeerContext,
) -> Result<Value, RpcError> {
    if !server.limits.push.enabled {
        return Err(push_unsupported());
    }
    let principal = peer.principal();
    let entry = |id: &str| server.tables.task(id, principal.as_deref()).ok_or_else(|| not_found(id));
    let no_config = |id: &str| invalid_params(format!("the task has no push notification config {id:?}"));
    let value = match method {
        Method::PushCreate => {
            let config: TaskPushNotificationConfig = serde_json::from_value(params).map_err(invalid_params)?;
            let task = entry(&config.task_id)?;
            let id = config.task_id.clone();
            let stored = server.pusher.add(&task.pushes, &id, config).await.map_err(push_refused)?;
            to_json(&stored)
        }
        Method::PushGet => {
            let request: GetTaskPushNotificationConfigRequest =
                serde_json::from_value(params).map_err(invalid_params)?;
            let task = entry(&request.task_id)?;
            to_json(&Pusher::find(&task.pushes, &request.id).ok_or_else(|| no_config(&request.id))?)
        }
        Method::PushList => {
            let request: ListTaskPushNotificationConfigsRequest =
                serde_json::from_value(params).map_err(invalid_params)?;
            let task = entry(&request.task_id)?;
            let configs = Pusher::all(&task.pushes);
            to_json(&ListTaskPushNotificationConfigsResponse { configs, next_page_token: None })
        }
        _ => {
            let request: DeleteTaskPushNotificationConfigRequest =
                serde_json::from_value(params).map_err(invalid_params)?;
            let task = entry(&request.task_id)?;
            if !Pusher::remove(&task.pushes, &request.id) {
                return Err(no_config(&request.id));
            }
            json!({})
        }
    };
    Ok(value)
}

fn not_found(id: &str) -> RpcError {
    let error = LdpError::runtime(codes::TASK_NOT_FOUND, format!("no task {id:?}"));
    RpcError { code: error_code::TASK_NOT_FOUND, message: format!("task {id:?} not found"), ldp: Some(Box::new(error)) }
}

/// `CancelTask`: TASK_CANCEL for the running LDP task, then the task once it ended (or as it stands after the
/// cancel bound).
async fn cancel<U: Upstream>(
    server: &Server<U>,
    cancels: &Cancels,
    params: Value,
    peer: &PeerContext,
    dialect: Dialect,
) -> Result<Value, RpcError> {
    let request: CancelTaskRequest = serde_json::from_value(params).map_err(invalid_params)?;
    let principal = peer.principal();
    let entry = server.tables.task(&request.id, principal.as_deref()).ok_or_else(|| not_found(&request.id))?;
    if *entry.done.borrow() {
        // A task waiting for input runs nothing: cancelling it only ends it.
        let waiting = entry.snapshot().is_some_and(|t| t.status.state == TaskState::InputRequired);
        let error = LdpError::runtime(codes::CANCELLED, "cancelled by CancelTask while waiting for input");
        let typed = serde_json::to_value(&error).unwrap_or(Value::Null);
        let ended = waiting.then(|| {
            entry.update(|t| {
                t.status.state = TaskState::Canceled;
                t.status.message = Some(agent_text(format!("{}: {}", error.code.as_str(), error.message)));
                t.metadata = Some(HashMap::from([(ERROR_META.to_owned(), typed.clone())]));
            })
        });
        let Some(Some(task)) = ended else {
            return Err(RpcError::new(error_code::TASK_NOT_CANCELABLE, format!("task {:?} has ended", request.id)));
        };
        entry.publish(&status_event(&task, Some(HashMap::from([(ERROR_META.to_owned(), typed)]))));
        entry.pushes.close();
        return Ok(task_value(&task, dialect));
    }
    entry.cancel_requested.store(true, Ordering::SeqCst);
    if let Some(signal) = cancels.lock().ok().and_then(|m| m.get(&request.id).cloned()) {
        signal.notify_one();
    }
    let mut done = entry.done.subscribe();
    let _ = tokio::time::timeout(server.limits.cancel_timeout * 2, done.wait_for(|d| *d)).await;
    let task = entry.snapshot().ok_or_else(|| not_found(&request.id))?;
    Ok(task_value(&task, dialect))
}
