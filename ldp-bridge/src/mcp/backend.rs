//! MCP server -> LDP delegate: an MCP server's tools as the skills of an LDP delegate (`ldp serve --backend mcp`).
//!
//! The delegate is an [`ldp_session::runtime::Delegate`] like any other: the responder admits the task (session,
//! skill on the card, budget, contract), and [`McpDelegate::execute`] makes one `tools/call`. TASK_UPDATE progress
//! comes from the server's `notifications/progress`; TASK_CANCEL (or the call's deadline) becomes
//! `notifications/cancelled`. The card is generated from what the server declares, and claims nothing it does not:
//! no quality scores, the model `undeclared`, the tools' annotations kept as `self_claimed` hints.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use ldp_session::runtime::{Delegate, TaskContext};
use ldp_session::{TaskOutput, TaskRequest};
use ldp_types::{Capability, DelegateId, IdentityCard, LdpError, PayloadMode, RawJson, codes};
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientRequest, Implementation, JsonObject, ProgressNotificationParam,
    ProgressToken, Request, ServerResult, Tool,
};
use rmcp::service::{NotificationContext, PeerRequestOptions, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::{Value, json};
use tokio::sync::{Semaphore, mpsc};

use crate::BridgeError;

/// The model fields of a bridged MCP server's card: MCP does not say which model (if any) answers.
pub const UNDECLARED: &str = "undeclared";
/// The capability `extra` member holding a tool's MCP annotations (hints, the server's own word).
pub const ANNOTATIONS_EXTRA: &str = "mcp_annotations";
/// The card `extra` member naming the bridged protocol and server.
pub const BRIDGED_EXTRA: &str = "bridged_from";
/// The error code of a `tools/call` the MCP server answered as a tool error (`isError`).
pub const TOOL_ERROR: &str = "TOOL_ERROR";

/// Progress notifications kept for a call not yet subscribed (a server can report before the client has its token).
const EARLY_PROGRESS: usize = 256;
/// Progress notifications queued for one call; beyond it they are dropped (progress is advisory).
const QUEUED_PROGRESS: usize = 64;

#[derive(Default)]
struct Routes {
    calls: HashMap<ProgressToken, mpsc::Sender<ProgressNotificationParam>>,
    early: VecDeque<ProgressNotificationParam>,
}

/// The MCP client's handler: routes progress notifications to the call that asked for them. The token is known only
/// once the request is sent, so notifications for a token nobody listens to yet are kept (bounded) for it.
#[derive(Default)]
struct ProgressRouter {
    routes: std::sync::Mutex<Routes>,
}

impl ProgressRouter {
    fn subscribe(&self, token: &ProgressToken) -> mpsc::Receiver<ProgressNotificationParam> {
        let (tx, rx) = mpsc::channel(QUEUED_PROGRESS);
        if let Ok(mut routes) = self.routes.lock() {
            let (mine, others): (VecDeque<_>, VecDeque<_>) =
                routes.early.drain(..).partition(|p| &p.progress_token == token);
            routes.early = others;
            for p in mine {
                let _ = tx.try_send(p);
            }
            routes.calls.insert(token.clone(), tx);
        }
        rx
    }

    fn unsubscribe(&self, token: &ProgressToken) {
        if let Ok(mut routes) = self.routes.lock() {
            routes.calls.remove(token);
        }
    }
}

impl ClientHandler for ProgressRouter {
    async fn on_progress(&self, params: ProgressNotificationParam, _cx: NotificationContext<RoleClient>) {
        let Ok(mut routes) = self.routes.lock() else { return };
        match routes.calls.get(&params.progress_token) {
            Some(call) => {
                let _ = call.try_send(params);
            }
            None => {
                if routes.early.len() >= EARLY_PROGRESS {
                    routes.early.pop_front();
                }
                routes.early.push_back(params);
            }
        }
    }
}

/// The bounds of a bridged MCP server.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct BackendLimits {
    /// Longest the server may take to start and answer `initialize` and `tools/list`.
    pub connect_timeout: Duration,
    /// Longest one `tools/call` may run; then it is cancelled and the task fails with `TIMEOUT`.
    pub call_timeout: Duration,
    /// `tools/call`s in flight at once; beyond it a task fails with `CAPACITY_EXCEEDED` (retryable).
    pub max_calls: usize,
    /// Most tools taken from the server (the card's capabilities).
    pub max_tools: usize,
}

impl Default for BackendLimits {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(30),
            call_timeout: Duration::from_secs(60),
            max_calls: 64,
            max_tools: 1024,
        }
    }
}

/// An MCP server's tools as an LDP delegate.
pub struct McpDelegate {
    service: RunningService<RoleClient, ProgressRouter>,
    server: Implementation,
    tools: Vec<Tool>,
    by_name: HashMap<String, usize>,
    calls: Arc<Semaphore>,
    limits: BackendLimits,
}

impl std::fmt::Debug for McpDelegate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpDelegate").field("server", &self.server.name).field("tools", &self.tools.len()).finish()
    }
}

impl McpDelegate {
    /// Starts `program args` as an MCP server on its standard input and output (its standard error is inherited),
    /// and lists its tools.
    pub async fn spawn_command(program: &str, args: &[String], limits: BackendLimits) -> Result<Self, BridgeError> {
        let mut command = tokio::process::Command::new(program);
        command.args(args);
        let transport = TokioChildProcess::new(command)?;
        Self::start(transport, limits).await
    }

    /// Connects to an MCP server over Streamable HTTP at `url` (`http://` or `https://`, rmcp's client on reqwest),
    /// with `Authorization: Bearer <token>` when a token is given, and lists its tools. The server's answers are
    /// read under the same timeouts as a spawned server's.
    pub async fn connect_url(url: &str, token: Option<&str>, limits: BackendLimits) -> Result<Self, BridgeError> {
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(BridgeError::Mcp(format!("{url:?} is not an http:// or https:// URL")));
        }
        // rmcp's client builds a reqwest client with rustls and no crypto provider of its own, and panics without a
        // process default: ring, the provider of every other TLS connection here (already set is fine).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut config = StreamableHttpClientTransportConfig::with_uri(url);
        if let Some(token) = token {
            config = config.auth_header(token);
        }
        Self::start(StreamableHttpClientTransport::from_config(config), limits).await
    }

    async fn start<T, E, A>(transport: T, limits: BackendLimits) -> Result<Self, BridgeError>
    where
        T: rmcp::transport::IntoTransport<RoleClient, E, A>,
        E: std::error::Error + Send + Sync + 'static,
    {
        let wait = limits.connect_timeout;
        let timeout = |what| move |_| BridgeError::Timeout { what, after: wait };
        let handler = ProgressRouter::default();
        let service = tokio::time::timeout(wait, handler.serve(transport))
            .await
            .map_err(timeout("the MCP server's initialize"))?
            .map_err(|e| BridgeError::Mcp(e.to_string()))?;
        // A server that did not say who it is stays undeclared.
        let server = service
            .peer_info()
            .and_then(|info| info.server_info.clone())
            .unwrap_or_else(|| Implementation::new(UNDECLARED, UNDECLARED));
        let mut tools = tokio::time::timeout(wait, service.list_all_tools())
            .await
            .map_err(timeout("the MCP server's tools/list"))?
            .map_err(|e| BridgeError::Mcp(e.to_string()))?;
        if tools.len() > limits.max_tools {
            return Err(BridgeError::Capacity { what: "MCP tools", limit: limits.max_tools });
        }
        tools.dedup_by(|a, b| a.name == b.name);
        let by_name = tools.iter().enumerate().map(|(i, t)| (t.name.to_string(), i)).collect();
        let calls = Arc::new(Semaphore::new(limits.max_calls.max(1)));
        Ok(Self { service, server, tools, by_name, calls, limits })
    }

    /// The MCP server's own description of itself (name, version).
    pub fn server(&self) -> &Implementation {
        &self.server
    }

    /// The generated identity card: one capability per tool (name, description, input and output schemas), the
    /// tool's annotations under [`ANNOTATIONS_EXTRA`] marked `self_claimed`, no quality claim (MCP makes none), the
    /// model fields [`UNDECLARED`], and [`BRIDGED_EXTRA`] naming the server.
    pub fn card(&self, delegate_id: DelegateId) -> IdentityCard {
        let name = self.server.title.clone().unwrap_or_else(|| self.server.name.clone());
        let mut card = IdentityCard::new(delegate_id, name, UNDECLARED, UNDECLARED);
        card.description = Some(format!(
            "MCP server {} {} bridged to LDP; the model behind it, if any, is not declared",
            self.server.name, self.server.version
        ));
        card.supported_payload_modes = vec![PayloadMode::Text];
        card.extra.insert(
            BRIDGED_EXTRA.to_owned(),
            json!({"protocol": "mcp", "server": {"name": self.server.name, "version": self.server.version}}),
        );
        for tool in &self.tools {
            let mut capability = Capability::new(tool.name.to_string());
            capability.description = tool.description.as_ref().map(ToString::to_string);
            capability.input_schema = Some(Value::Object(tool.input_schema.as_ref().clone()));
            capability.output_schema = tool.output_schema.as_ref().map(|s| Value::Object(s.as_ref().clone()));
            if let Some(annotations) = &tool.annotations
                && let Ok(hints) = serde_json::to_value(annotations)
            {
                capability
                    .extra
                    .insert(ANNOTATIONS_EXTRA.to_owned(), json!({"claim_type": "self_claimed", "hints": hints}));
            }
            card.capabilities.push(capability);
        }
        card
    }

    /// Closes the connection to the server (a child process is ended).
    pub async fn close(self) {
        let _ = self.service.cancel().await;
    }

    async fn call(&self, tool: &Tool, arguments: JsonObject, ctx: &TaskContext) -> Result<CallToolResult, LdpError> {
        let _slot = self.calls.clone().try_acquire_owned().map_err(|_| {
            BridgeError::Capacity { what: "MCP tool calls in flight", limit: self.limits.max_calls }.to_ldp_error()
        })?;
        let request = CallToolRequestParams::new(tool.name.clone()).with_arguments(arguments);
        let request = ClientRequest::CallToolRequest(Request::new(request));
        let send = self.service.send_cancellable_request(request, PeerRequestOptions::no_options());
        let mut handle = tokio::time::timeout(self.limits.connect_timeout, send)
            .await
            .map_err(|_| {
                BridgeError::Timeout { what: "sending the MCP tools/call", after: self.limits.connect_timeout }
                    .to_ldp_error()
            })?
            .map_err(|e| mcp_failed(&e))?;
        let router = self.service.service();
        let token = handle.progress_token.clone();
        let mut progress = router.subscribe(&token);
        let answer = self.await_call(&mut handle, &mut progress, ctx).await;
        router.unsubscribe(&token);
        if let Err(stop) = &answer
            && stop.code.as_str() != codes::TRANSPORT_ERROR
            && stop.code.as_str() != codes::MALFORMED_MESSAGE
        {
            // The server is told, as MCP says: notifications/cancelled for the request.
            let reason = Some(stop.message.clone());
            let _ = tokio::time::timeout(self.limits.connect_timeout, handle.cancel(reason)).await;
        }
        answer
    }

    /// Waits for a call's answer, relaying its progress, until the task is cancelled or the deadline passes.
    async fn await_call(
        &self,
        handle: &mut rmcp::service::RequestHandle<RoleClient>,
        progress: &mut mpsc::Receiver<ProgressNotificationParam>,
        ctx: &TaskContext,
    ) -> Result<CallToolResult, LdpError> {
        let relay = async {
            // rmcp hands each notification to a task of its own, so they can arrive out of order. MCP requires a
            // call's progress to increase with each notification: one not above the last relayed is stale (the
            // call is past it) and dropped, so the task's TASK_UPDATEs never go backwards.
            let mut last = None;
            while let Some(p) = progress.recv().await {
                if !advances(&mut last, p.progress) {
                    continue;
                }
                let fraction = p.total.filter(|t| *t > 0.0).map(|t| (p.progress / t).clamp(0.0, 1.0));
                ctx.progress(fraction, p.message);
            }
            std::future::pending::<()>().await;
        };
        let limit = self.limits.call_timeout;
        let stop: LdpError = tokio::select! {
            answer = &mut handle.rx => {
                return match answer {
                    Ok(Ok(ServerResult::CallToolResult(result))) => Ok(result),
                    Ok(Ok(_)) => Err(LdpError::runtime(codes::MALFORMED_MESSAGE, "the MCP server answered tools/call with another result")),
                    Ok(Err(e)) => Err(mcp_failed(&e)),
                    Err(_) => Err(LdpError::transport(codes::TRANSPORT_ERROR, "the MCP server's connection ended")),
                };
            }
            () = relay => unreachable_relay(),
            () = ctx.cancelled() => LdpError::runtime(codes::CANCELLED, "cancelled by TASK_CANCEL"),
            () = tokio::time::sleep(limit) => {
                BridgeError::Timeout { what: "the MCP tools/call", after: limit }.to_ldp_error()
            }
        };
        Err(stop)
    }
}

/// Whether a progress value is above the last one relayed (and then the new last): MCP's progress increases with
/// each notification, so one that does not is stale.
fn advances(last: &mut Option<f64>, progress: f64) -> bool {
    if last.is_some_and(|l| progress <= l) {
        return false;
    }
    *last = Some(progress);
    true
}

/// The relay never ends on its own (it pends once the progress stream closes); a typed error if it ever did.
fn unreachable_relay() -> LdpError {
    LdpError::runtime(codes::EXECUTION_FAILED, "the progress relay ended before the call")
}

fn mcp_failed(e: &dyn std::fmt::Display) -> LdpError {
    LdpError::transport(codes::TRANSPORT_ERROR, format!("MCP: {e}"))
}

/// The tool arguments for a task input: a JSON object as it is (or a text-mode string holding one); any other value
/// goes into the tool's only property when it has exactly one, else the input does not fit (`INVALID_INPUT`).
pub fn arguments(tool: &Tool, input: &RawJson) -> Result<JsonObject, LdpError> {
    let invalid = |why: &str| {
        LdpError::capability(crate::mcp::tools::INVALID_INPUT, format!("tool {:?}: {why}", tool.name))
            .with_retryable(false)
    };
    let value = input.to_value().map_err(|e| invalid(&e.to_string()))?;
    let value = match value {
        Value::String(text) => serde_json::from_str::<JsonObject>(&text).map_or(Value::String(text), Value::Object),
        other => other,
    };
    if let Value::Object(object) = value {
        return Ok(object);
    }
    match tool.input_schema.get("properties").and_then(Value::as_object) {
        Some(properties) if properties.len() == 1 => {
            let name = properties.keys().next().cloned().unwrap_or_default();
            Ok(JsonObject::from_iter([(name, value)]))
        }
        _ => Err(invalid("the input must be a JSON object of the tool's arguments")),
    }
}

/// The task output of a tool result: its structured content when it has some, else its text (the text blocks
/// joined), else its content blocks as JSON. A tool error (`isError`) is a `TOOL_ERROR` failure with the text as
/// message and the structured content as partial output.
pub fn output(result: CallToolResult) -> Result<TaskOutput, LdpError> {
    let texts: Vec<&str> = result.content.iter().filter_map(|c| c.as_text().map(|t| t.text.as_str())).collect();
    let text = texts.join("");
    if result.is_error == Some(true) {
        let mut error = LdpError::runtime(TOOL_ERROR, text).with_retryable(false);
        if let Some(structured) = result.structured_content {
            error = error.with_partial_output(structured);
        }
        return Err(error);
    }
    let value = match result.structured_content {
        Some(structured) => structured,
        None if texts.len() == result.content.len() => Value::String(text),
        None => serde_json::to_value(&result.content).unwrap_or(Value::Null),
    };
    Ok(TaskOutput::new(RawJson::from(value)))
}

#[async_trait]
impl Delegate for McpDelegate {
    async fn execute(&self, task: TaskRequest, ctx: TaskContext) -> Result<TaskOutput, LdpError> {
        // The responder admits only skills on the card, which lists exactly these tools.
        let tool = self.by_name.get(&task.skill).and_then(|i| self.tools.get(*i)).ok_or_else(|| {
            LdpError::capability(codes::SKILL_NOT_FOUND, format!("no tool {:?} on the MCP server", task.skill))
        })?;
        let arguments = arguments(tool, &task.input)?;
        output(self.call(tool, arguments, &ctx).await?)
    }
}

#[cfg(test)]
mod tests {
    use super::advances;

    #[test]
    fn progress_overtaken_by_a_later_notification_is_dropped() {
        let mut last = None;
        let relayed: Vec<f64> = [1.0, 3.0, 2.0, 3.0, 4.0].into_iter().filter(|p| advances(&mut last, *p)).collect();
        assert_eq!(relayed, [1.0, 3.0, 4.0]);
    }
}
