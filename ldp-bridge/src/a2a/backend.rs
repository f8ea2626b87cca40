//! A2A agent -> LDP delegate (`ldp serve --backend a2a --a2a-url URL`).
//!
//! The delegate is an [`ldp_session::runtime::Delegate`] like any other: the responder admits the task (session,
//! skill on the card, budget, contract) and stamps its provenance; [`A2aDelegate::execute`] sends one A2A message
//! (its `contextId` the LDP session id, so one LDP session is one A2A context) and relays the agent's status
//! updates as TASK_UPDATEs; TASK_CANCEL (or the deadline) becomes `CancelTask`. Every answer is read with a bound on
//! its size and its time.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use a2a::{AgentCard, Message, Role, SendMessageRequest, SendMessageResponse, StreamResponse, Task, TaskState};
use async_trait::async_trait;
use futures::StreamExt;
use ldp_session::runtime::{Delegate, TaskContext};
use ldp_session::{TaskOutput, TaskRequest};
use ldp_types::{DelegateId, EvidenceRef, IdentityCard, LdpError, RawJson, codes};
use serde_json::{Value, json};
use tokio::sync::Semaphore;

use super::card::{self, JSONRPC};
use super::sse::SseReader;
use super::{CARD_PATH, ERROR_META, INPUT_REQUIRED, PROGRESS_META, SKILL_META};
use crate::BridgeError;

/// The error code of a task the A2A agent ended in a state other than completed (failed, rejected, or waiting for
/// input or authentication, which a one-shot LDP task cannot give).
pub const AGENT_FAILED: &str = "A2A_TASK_FAILED";

/// The bounds of a bridged A2A agent.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct BackendLimits {
    /// Longest the card fetch, and any request's headers, may take.
    pub connect_timeout: Duration,
    /// Longest one task may run at the agent; then it is cancelled there and fails with `TIMEOUT`.
    pub call_timeout: Duration,
    /// Longest the `CancelTask` of a cancelled task may take.
    pub cancel_timeout: Duration,
    /// Tasks in flight at once; beyond it a task fails with `CAPACITY_EXCEEDED` (retryable).
    pub max_calls: usize,
    /// Largest Agent Card read, in bytes.
    pub max_card_bytes: usize,
    /// Largest answer read (a `SendMessage` result, or a whole event stream), in bytes.
    pub max_answer_bytes: usize,
    /// Largest single stream event, in bytes.
    pub max_event_bytes: usize,
    /// Most skills taken from the card.
    pub max_skills: usize,
}

impl Default for BackendLimits {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(10),
            call_timeout: Duration::from_secs(60),
            cancel_timeout: Duration::from_secs(5),
            max_calls: 64,
            max_card_bytes: 256 * 1024,
            max_answer_bytes: 8 * 1024 * 1024,
            max_event_bytes: 1024 * 1024,
            max_skills: 1024,
        }
    }
}

/// An A2A agent as an LDP delegate.
#[derive(Debug)]
pub struct A2aDelegate {
    http: reqwest::Client,
    rpc_url: String,
    token: Option<String>,
    agent: AgentCard,
    limits: BackendLimits,
    calls: Arc<Semaphore>,
    /// The agent task each LDP session's last task left waiting for input: the session's next task continues it.
    waiting: Mutex<VecDeque<(String, String)>>,
}

fn a2a_failed(what: impl std::fmt::Display) -> BridgeError {
    BridgeError::A2a(what.to_string())
}

/// Reads a response body, at most `limit` bytes.
async fn read_bounded(response: reqwest::Response, limit: usize) -> Result<Vec<u8>, BridgeError> {
    if response.content_length().is_some_and(|n| n > limit as u64) {
        return Err(BridgeError::Capacity { what: "bytes of an A2A answer", limit });
    }
    let mut body = Vec::new();
    let mut chunks = response.bytes_stream();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(a2a_failed)?;
        if body.len() + chunk.len() > limit {
            return Err(BridgeError::Capacity { what: "bytes of an A2A answer", limit });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The typed LDP error of a JSON-RPC error answer: the one it carries (an LDP delegate behind an A2A bridge), or
/// a transport error naming the A2A code and message.
fn rpc_failure(error: &Value) -> LdpError {
    let carried = error["data"]
        .as_array()
        .and_then(|details| details.iter().find_map(|d| d.get(ERROR_META)))
        .or_else(|| error["data"].get(ERROR_META))
        .and_then(|e| serde_json::from_value::<LdpError>(e.clone()).ok());
    carried.unwrap_or_else(|| {
        LdpError::runtime(
            AGENT_FAILED,
            format!("A2A error {}: {}", error["code"], error["message"].as_str().unwrap_or_default()),
        )
        .with_retryable(false)
    })
}

impl A2aDelegate {
    /// Fetches the Agent Card of the agent at `url` (its base URL, or the card's own URL when it ends in `.json`),
    /// sending `token` as a bearer token with every request when given, and picks its JSON-RPC interface.
    pub async fn discover(url: &str, token: Option<String>, limits: BackendLimits) -> Result<Self, BridgeError> {
        let http = reqwest::Client::builder().connect_timeout(limits.connect_timeout).build().map_err(a2a_failed)?;
        let card_url =
            if url.ends_with(".json") { url.to_owned() } else { format!("{}{CARD_PATH}", url.trim_end_matches('/')) };
        let mut request = http.get(&card_url).timeout(limits.connect_timeout);
        if let Some(token) = &token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.map_err(|e| a2a_failed(format!("{card_url}: {e}")))?;
        if !response.status().is_success() {
            return Err(a2a_failed(format!("{card_url}: HTTP {}", response.status())));
        }
        let body = tokio::time::timeout(limits.connect_timeout, read_bounded(response, limits.max_card_bytes))
            .await
            .map_err(|_| BridgeError::Timeout {
            what: "reading the Agent Card",
            after: limits.connect_timeout,
        })??;
        let mut agent: AgentCard = serde_json::from_slice(&body)
            .map_err(|e| a2a_failed(format!("{card_url}: not an A2A 1.0 Agent Card: {e}")))?;
        if agent.skills.len() > limits.max_skills {
            return Err(BridgeError::Capacity { what: "A2A skills", limit: limits.max_skills });
        }
        agent.skills.dedup_by(|a, b| a.id == b.id);
        let interface = agent
            .supported_interfaces
            .iter()
            .find(|i| i.protocol_binding.eq_ignore_ascii_case(JSONRPC) && i.protocol_version.starts_with("1."))
            .ok_or_else(|| a2a_failed(format!("{card_url}: the agent offers no A2A 1.x JSON-RPC interface")))?;
        let rpc_url = interface.url.clone();
        let calls = Arc::new(Semaphore::new(limits.max_calls.max(1)));
        Ok(Self { http, rpc_url, token, agent, limits, calls, waiting: Mutex::default() })
    }

    /// The agent's card as it served it.
    pub fn agent(&self) -> &AgentCard {
        &self.agent
    }

    /// The generated identity card ([`card::identity_card`]).
    pub fn card(&self, delegate_id: DelegateId) -> IdentityCard {
        card::identity_card(&self.agent, delegate_id)
    }

    fn post(&self, method: &str, params: Value) -> reqwest::RequestBuilder {
        let body =
            json!({"jsonrpc": "2.0", "id": uuid::Uuid::new_v4().to_string(), "method": method, "params": params});
        let mut request = self.http.post(&self.rpc_url).header(a2a::SVC_PARAM_VERSION, a2a::VERSION).json(&body);
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        request
    }

    /// One JSON-RPC call whose answer is a single result, read whole (bounded).
    async fn call(&self, method: &str, params: Value) -> Result<Value, LdpError> {
        let response = self.post(method, params).send().await.map_err(|e| a2a_failed(e).to_ldp_error())?;
        let body = read_bounded(response, self.limits.max_answer_bytes).await.map_err(|e| e.to_ldp_error())?;
        let answer: Value = serde_json::from_slice(&body)
            .map_err(|e| LdpError::transport(codes::MALFORMED_MESSAGE, format!("A2A: the answer is not JSON: {e}")))?;
        result_of(answer)
    }

    fn request(&self, task: &TaskRequest) -> SendMessageRequest {
        let mut message = Message::new(Role::User, card::input_parts(&task.input));
        message.context_id = Some(task.key.session_id.clone());
        message.task_id = self.take_waiting(&task.key.session_id);
        message.metadata = Some(HashMap::from([(SKILL_META.to_owned(), json!(task.skill))]));
        SendMessageRequest { message, configuration: None, metadata: None, tenant: None }
    }

    /// The agent task the session's last LDP task left waiting for input, if any (taken: one continuation each).
    fn take_waiting(&self, session: &str) -> Option<String> {
        let mut waiting = self.waiting.lock().ok()?;
        let at = waiting.iter().position(|(s, _)| s == session)?;
        waiting.remove(at).map(|(_, task)| task)
    }

    /// Remembers that the agent's task `task` waits for the session's next LDP task (bounded: the oldest goes).
    fn wait_for_input(&self, session: &str, task: String) {
        if let Ok(mut waiting) = self.waiting.lock() {
            waiting.retain(|(s, _)| s != session);
            if waiting.len() >= MAX_WAITING {
                waiting.pop_front();
            }
            waiting.push_back((session.to_owned(), task));
        }
    }

    /// Runs the task at the agent: streaming when the agent streams, relaying its status messages as progress.
    async fn run(
        &self,
        request: SendMessageRequest,
        ctx: &TaskContext,
        task_id: &mut Option<String>,
    ) -> Result<Task, LdpError> {
        let params = serde_json::to_value(&request).unwrap_or(Value::Null);
        if self.agent.capabilities.streaming != Some(true) {
            let result = self.call("SendMessage", params).await?;
            return match serde_json::from_value::<SendMessageResponse>(result) {
                Ok(SendMessageResponse::Task(task)) => Ok(task),
                Ok(SendMessageResponse::Message(message)) => Ok(message_task(message)),
                Err(e) => Err(malformed(e)),
            };
        }
        let response =
            self.post("SendStreamingMessage", params).send().await.map_err(|e| a2a_failed(e).to_ldp_error())?;
        let mut last: Option<Task> = None;
        let mut read = 0;
        let mut broken = match self.follow(response, ctx, task_id, &mut last, &mut read).await? {
            Followed::Ended(task) => return Ok(*task),
            Followed::Broken(why) => why,
        };
        // The stream dropped before the task ended: follow it again with SubscribeToTask (bounded, with backoff),
        // and read it with GetTask when it ended meanwhile.
        let Some(id) = task_id.clone() else { return Err(broken) };
        let mut wait = RESUBSCRIBE_BACKOFF;
        for _ in 0..RESUBSCRIBE_ATTEMPTS {
            tokio::time::sleep(wait).await;
            wait *= 2;
            let answer = match self.post("SubscribeToTask", json!({"id": id})).send().await {
                Ok(answer) => answer,
                Err(e) => {
                    broken = a2a_failed(e).to_ldp_error();
                    continue;
                }
            };
            match self.follow(answer, ctx, task_id, &mut last, &mut read).await {
                Ok(Followed::Ended(task)) => return Ok(*task),
                Ok(Followed::Broken(why)) => broken = why,
                // Refused (the task ended meanwhile, or the agent cannot resubscribe): its state is GetTask's.
                Err(_) => break,
            }
        }
        let got = tokio::time::timeout(self.limits.connect_timeout, self.call("GetTask", json!({"id": id})))
            .await
            .map_err(|_| broken.clone())??;
        let task: Task = serde_json::from_value(got).map_err(malformed)?;
        if task.status.state.is_terminal() || task.status.state == TaskState::InputRequired {
            return Ok(task);
        }
        Err(broken)
    }

    /// Reads one event stream of the task (`SendStreamingMessage`'s or `SubscribeToTask`'s), relaying progress and
    /// folding events into `last`, until the task ends or asks for input, or the stream breaks. An answer that is
    /// not a stream (a JSON-RPC error) is the error; so is an event that is not A2A or too large.
    async fn follow(
        &self,
        response: reqwest::Response,
        ctx: &TaskContext,
        task_id: &mut Option<String>,
        last: &mut Option<Task>,
        read: &mut usize,
    ) -> Result<Followed, LdpError> {
        let is_stream = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if !is_stream {
            // An error answered before any event, as plain JSON.
            let body = read_bounded(response, self.limits.max_answer_bytes).await.map_err(|e| e.to_ldp_error())?;
            let answer: Value = serde_json::from_slice(&body).map_err(malformed)?;
            return Err(result_of(answer).err().unwrap_or_else(|| malformed("a stream answered without events")));
        }
        let mut reader = SseReader::new(self.limits.max_event_bytes);
        let mut chunks = response.bytes_stream();
        while let Some(chunk) = chunks.next().await {
            let chunk = match chunk {
                Ok(chunk) => chunk,
                Err(e) => return Ok(Followed::Broken(a2a_failed(e).to_ldp_error())),
            };
            *read += chunk.len();
            if *read > self.limits.max_answer_bytes {
                return Err(BridgeError::Capacity {
                    what: "bytes of an A2A event stream",
                    limit: self.limits.max_answer_bytes,
                }
                .to_ldp_error());
            }
            let events =
                reader.feed(&chunk).map_err(|e| LdpError::transport(codes::MESSAGE_TOO_LARGE, e.to_string()))?;
            for data in events {
                let answer: Value = serde_json::from_str(&data).map_err(malformed)?;
                let event: StreamResponse = serde_json::from_value(result_of(answer)?).map_err(malformed)?;
                match event {
                    StreamResponse::Task(task) => {
                        task_id.get_or_insert_with(|| task.id.clone());
                        let over = task.status.state.is_terminal() || task.status.state == TaskState::InputRequired;
                        if over {
                            return Ok(Followed::Ended(Box::new(task)));
                        }
                        *last = Some(task);
                    }
                    StreamResponse::Message(message) => return Ok(Followed::Ended(Box::new(message_task(message)))),
                    StreamResponse::StatusUpdate(update) => {
                        task_id.get_or_insert_with(|| update.task_id.clone());
                        let fraction = update
                            .metadata
                            .as_ref()
                            .and_then(|m| m.get(PROGRESS_META))
                            .and_then(|p| p["progress"].as_f64());
                        let text = update.status.message.as_ref().and_then(|m| card::parts_value(&m.parts));
                        let text = text.map(|v| match v {
                            Value::String(s) => s,
                            other => other.to_string(),
                        });
                        let terminal =
                            update.status.state.is_terminal() || update.status.state == TaskState::InputRequired;
                        let task = last.get_or_insert_with(|| message_task(Message::new(Role::Agent, Vec::new())));
                        task.id.clone_from(&update.task_id);
                        task.status = update.status;
                        if update.metadata.is_some() {
                            task.metadata = update.metadata;
                        }
                        if terminal {
                            return Ok(Followed::Ended(Box::new(task.clone())));
                        }
                        // A bare state change (submitted, working) says nothing a TASK_UPDATE could carry.
                        if fraction.is_some() || text.is_some() {
                            ctx.progress(fraction, text);
                        }
                    }
                    StreamResponse::ArtifactUpdate(update) => {
                        task_id.get_or_insert_with(|| update.task_id.clone());
                        let task = last.get_or_insert_with(|| message_task(Message::new(Role::Agent, Vec::new())));
                        let artifacts = task.artifacts.get_or_insert_with(Vec::new);
                        match artifacts.iter_mut().find(|a| a.artifact_id == update.artifact.artifact_id) {
                            Some(known) if update.append == Some(true) => known.parts.extend(update.artifact.parts),
                            Some(known) => *known = update.artifact,
                            None => artifacts.push(update.artifact),
                        }
                    }
                }
            }
        }
        Ok(Followed::Broken(LdpError::transport(
            codes::TRANSPORT_ERROR,
            "A2A: the event stream ended before the task did",
        )))
    }

    /// `CancelTask` for the agent's task (best effort, bounded).
    async fn cancel(&self, task_id: &str) {
        let cancel = self.call("CancelTask", json!({"id": task_id}));
        let _ = tokio::time::timeout(self.limits.cancel_timeout, cancel).await;
    }
}

/// How one event stream of a task ended.
enum Followed {
    /// With the task ended, or waiting for input.
    Ended(Box<Task>),
    /// Before that: the connection broke or the stream closed early.
    Broken(LdpError),
}

/// How many times a dropped stream is followed again with `SubscribeToTask`, and the wait before the first.
const RESUBSCRIBE_ATTEMPTS: u32 = 3;
const RESUBSCRIBE_BACKOFF: Duration = Duration::from_millis(200);

/// Sessions whose agent task waits for input, remembered at most this many (the oldest is forgotten, and its
/// session's next task starts a new agent task).
const MAX_WAITING: usize = 1024;

fn malformed(e: impl std::fmt::Display) -> LdpError {
    LdpError::transport(codes::MALFORMED_MESSAGE, format!("A2A: {e}"))
}

/// The result of a JSON-RPC answer, or its error as a typed LDP error.
fn result_of(mut answer: Value) -> Result<Value, LdpError> {
    if let Some(error) = answer.get("error") {
        return Err(rpc_failure(error));
    }
    answer.get_mut("result").map(Value::take).ok_or_else(|| malformed("the answer has neither result nor error"))
}

/// A direct message answer as a completed task holding it.
fn message_task(message: Message) -> Task {
    Task {
        id: message.task_id.clone().unwrap_or_default(),
        context_id: message.context_id.clone().unwrap_or_default(),
        status: a2a::TaskStatus { state: TaskState::Completed, message: Some(message), timestamp: None },
        artifacts: None,
        history: None,
        metadata: None,
    }
}

/// The task output of an ended A2A task: its artifacts' parts ([`card::parts_value`]), else its status message's;
/// any state but completed is a typed failure: canceled is `CANCELLED`, failed or rejected (or waiting for input,
/// which a one-shot task cannot give) [`AGENT_FAILED`], carrying the LDP error the agent sent when it sent one.
pub fn output(task: &Task) -> Result<RawJson, LdpError> {
    let text = || task.status.message.as_ref().and_then(|m| card::parts_value(&m.parts));
    match &task.status.state {
        TaskState::Completed => {
            let parts: Vec<a2a::Part> = task.artifacts.iter().flatten().flat_map(|a| a.parts.clone()).collect();
            Ok(RawJson::from(card::parts_value(&parts).or_else(text).unwrap_or(Value::Null)))
        }
        TaskState::Canceled => Err(LdpError::runtime(codes::CANCELLED, "the A2A agent cancelled the task")),
        TaskState::InputRequired => {
            let question = text().unwrap_or(Value::Null);
            let message = question.as_str().map(str::to_owned).unwrap_or_else(|| question.to_string());
            Err(LdpError::runtime(INPUT_REQUIRED, message).with_partial_output(question).with_retryable(false))
        }
        state => {
            let carried = task
                .metadata
                .as_ref()
                .and_then(|m| m.get(ERROR_META))
                .and_then(|e| serde_json::from_value::<LdpError>(e.clone()).ok());
            Err(carried.unwrap_or_else(|| {
                let why = text().map(|v| v.as_str().map(str::to_owned).unwrap_or_else(|| v.to_string()));
                let state = serde_json::to_value(state).unwrap_or(Value::Null);
                LdpError::runtime(AGENT_FAILED, format!("the A2A task ended {state}: {}", why.unwrap_or_default()))
                    .with_retryable(false)
            }))
        }
    }
}

#[async_trait]
impl Delegate for A2aDelegate {
    async fn execute(&self, task: TaskRequest, ctx: TaskContext) -> Result<TaskOutput, LdpError> {
        let _slot = self.calls.clone().try_acquire_owned().map_err(|_| {
            BridgeError::Capacity { what: "A2A tasks in flight", limit: self.limits.max_calls }.to_ldp_error()
        })?;
        let request = self.request(&task);
        let mut task_id = None;
        let limit = self.limits.call_timeout;
        let stop = {
            let run = self.run(request, &ctx, &mut task_id);
            tokio::pin!(run);
            tokio::select! {
                done = &mut run => Ok(done),
                () = ctx.cancelled() => Err(LdpError::runtime(codes::CANCELLED, "cancelled by TASK_CANCEL")),
                () = tokio::time::sleep(limit) => Err(BridgeError::Timeout { what: "the A2A task", after: limit }.to_ldp_error()),
            }
        };
        let agent_task = match stop {
            Ok(done) => done?,
            Err(stop) => {
                // The agent is told, as A2A says: CancelTask for its task.
                if let Some(id) = &task_id {
                    self.cancel(id).await;
                }
                return Err(stop);
            }
        };
        if agent_task.status.state == TaskState::InputRequired && !agent_task.id.is_empty() {
            self.wait_for_input(&task.key.session_id, agent_task.id.clone());
        }
        let mut out = TaskOutput::new(output(&agent_task)?);
        if !agent_task.id.is_empty() {
            out.evidence.push(EvidenceRef {
                source: "a2a".to_owned(),
                kind: "a2a_task".to_owned(),
                uri: Some(format!("{}#task={}", self.rpc_url, agent_task.id)),
                summary: Some(format!(
                    "A2A task {} of agent {} {}",
                    agent_task.id, self.agent.name, self.agent.version
                )),
            });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ended_tasks_become_outputs_or_typed_failures() {
        let mut task = message_task(Message::new(Role::Agent, vec![a2a::Part::text("hi")]));
        assert_eq!(output(&task).unwrap().to_value().unwrap(), json!("hi"));
        task.artifacts = Some(vec![a2a::Artifact {
            artifact_id: "a".into(),
            name: None,
            description: None,
            parts: vec![a2a::Part::data(json!({"n": 1}))],
            metadata: None,
            extensions: None,
        }]);
        assert_eq!(output(&task).unwrap().to_value().unwrap(), json!({"n": 1}));
        task.status.state = TaskState::Failed;
        assert_eq!(output(&task).unwrap_err().code.as_str(), AGENT_FAILED);
        let carried = LdpError::capability(codes::SKILL_NOT_FOUND, "no");
        task.metadata = Some(HashMap::from([(ERROR_META.to_owned(), serde_json::to_value(&carried).unwrap())]));
        assert_eq!(output(&task).unwrap_err(), carried);
        task.status.state = TaskState::Canceled;
        assert_eq!(output(&task).unwrap_err().code.as_str(), codes::CANCELLED);
        task.status.state = TaskState::InputRequired;
        task.status.message = Some(Message::new(Role::Agent, vec![a2a::Part::text("which one?")]));
        let asked = output(&task).unwrap_err();
        assert_eq!((asked.code.as_str(), asked.message.as_str()), (INPUT_REQUIRED, "which one?"));
        assert_eq!(asked.partial_output, Some(json!("which one?")));
    }

    #[test]
    fn rpc_errors_keep_a_carried_ldp_error() {
        let carried = LdpError::runtime(codes::CAPACITY_EXCEEDED, "full");
        let error = super::super::rpc::RpcError::ldp(-32603, carried.clone());
        for dialect in [super::super::rpc::Dialect::V1, super::super::rpc::Dialect::V03] {
            assert_eq!(rpc_failure(&error.to_value(dialect)), carried);
        }
        let plain = rpc_failure(&json!({"code": -32601, "message": "no such method"}));
        assert_eq!(plain.code.as_str(), AGENT_FAILED);
        assert!(plain.message.contains("-32601"), "{plain:?}");
    }
}
