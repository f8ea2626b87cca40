//! The MCP server handler: one per MCP session, holding that session's LDP session.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ldp_session::runtime::{Client, Progress, Submission};
use ldp_session::{PeerContext, TaskKey};
use ldp_types::{RawJson, SessionConfig};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ErrorData, Implementation, ListToolsResult, MetaObject,
    PaginatedRequestParams, ProgressNotificationParam, ProgressToken, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{Peer, RequestContext};
use rmcp::{RoleServer, ServerHandler};
use tokio::sync::{OnceCell, Semaphore, mpsc};

use super::prompts::{self, SkillPrompt};
use super::resources::{self, TaskResources};
use super::tools;
use crate::BridgeError;
use crate::upstream::Upstream;

/// The bounds of an MCP bridge: everything an MCP peer can make it hold or wait for.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct McpLimits {
    /// MCP sessions open at once (Streamable HTTP); an `initialize` beyond it is refused.
    pub max_sessions: usize,
    /// `tools/call`s in flight, all sessions together; beyond it a call fails at once with `CAPACITY_EXCEEDED`.
    pub max_calls: usize,
    /// `tools/call`s in flight in one MCP session.
    pub max_calls_per_session: usize,
    /// Longest a `tools/call` may run; then its task is cancelled (TASK_CANCEL) and the call fails with `TIMEOUT`.
    pub call_timeout: Duration,
    /// Longest the LDP client may take to connect and open the session.
    pub connect_timeout: Duration,
    /// Longest to wait for a cancelled task's answer after TASK_CANCEL, and for the session's close.
    pub cancel_timeout: Duration,
    /// An MCP session idle this long is closed (with its LDP session).
    pub session_idle: Duration,
    /// Largest MCP request body, in bytes.
    pub max_body: usize,
    /// `Host` header values accepted (DNS-rebinding protection); empty accepts any.
    pub allowed_hosts: Vec<String>,
}

impl Default for McpLimits {
    fn default() -> Self {
        Self {
            max_sessions: 256,
            max_calls: 256,
            max_calls_per_session: 16,
            call_timeout: Duration::from_secs(60),
            connect_timeout: Duration::from_secs(10),
            cancel_timeout: Duration::from_secs(5),
            session_idle: Duration::from_secs(300),
            max_body: 1024 * 1024,
            allowed_hosts: vec!["localhost".into(), "127.0.0.1".into(), "::1".into()],
        }
    }
}

/// What all sessions of one MCP server share.
pub(crate) struct Shared<U: Upstream> {
    pub(crate) upstream: Arc<U>,
    pub(crate) limits: McpLimits,
    calls: Arc<Semaphore>,
    /// The delegate's skill templates, as prompts.
    prompts: Vec<SkillPrompt>,
}

impl<U: Upstream> Shared<U> {
    pub(crate) fn new(upstream: Arc<U>, limits: McpLimits, prompts: Vec<SkillPrompt>) -> Arc<Self> {
        let calls = Arc::new(Semaphore::new(limits.max_calls.max(1)));
        Arc::new(Self { upstream, limits, calls, prompts })
    }
}

/// An LDP session opened for an MCP session, and the principal that opened it.
struct Opened<U: Upstream> {
    client: Arc<Client<U::Transport>>,
    session_id: String,
    principal: Option<String>,
}

/// Closes the LDP session when the MCP session's handler goes (the MCP session ended or idled out); the LDP
/// session's TTL reaps it anyway if the close cannot be sent.
struct CloseOnDrop<U: Upstream> {
    opened: Arc<OnceCell<Opened<U>>>,
    timeout: Duration,
}

impl<U: Upstream> Drop for CloseOnDrop<U> {
    fn drop(&mut self) {
        let Some(opened) = self.opened.get() else { return };
        let (client, session, timeout) = (opened.client.clone(), opened.session_id.clone(), self.timeout);
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                let _ = tokio::time::timeout(timeout, client.close(&session)).await;
            });
        }
    }
}

/// The MCP server of one LDP delegate, one instance per MCP session: `tools/list` lists the delegate's
/// capabilities, `tools/call` runs a task in this MCP session's LDP session (opened on the first call, closed with
/// the MCP session).
pub struct LdpTools<U: Upstream> {
    shared: Arc<Shared<U>>,
    opened: Arc<OnceCell<Opened<U>>>,
    calls: Arc<Semaphore>,
    /// The least severe level of the task events sent as `notifications/message` (`logging/setLevel`); none until
    /// the peer asks.
    log_level: Arc<Mutex<Option<u8>>>,
    /// This session's tasks as resources (result, provenance, LCTL chain).
    resources: Arc<TaskResources>,
    _close: CloseOnDrop<U>,
}

impl<U: Upstream> std::fmt::Debug for LdpTools<U> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LdpTools").field("session", &self.opened.get().map(|o| &o.session_id)).finish_non_exhaustive()
    }
}

impl<U: Upstream> LdpTools<U> {
    pub(crate) fn new(shared: Arc<Shared<U>>) -> Self {
        let opened = Arc::new(OnceCell::new());
        let calls = Arc::new(Semaphore::new(shared.limits.max_calls_per_session.max(1)));
        let close = CloseOnDrop { opened: opened.clone(), timeout: shared.limits.cancel_timeout };
        Self { shared, opened, calls, log_level: Arc::default(), resources: Arc::default(), _close: close }
    }

    /// This MCP session's LDP session, opened on first use by `peer`; later calls must come from the same principal.
    async fn session(&self, peer: PeerContext) -> Result<&Opened<U>, BridgeError> {
        let principal = peer.principal().map(|p| p.into_owned());
        let opened = self
            .opened
            .get_or_try_init(|| async {
                let limit = self.shared.limits.connect_timeout;
                let open = async {
                    let client = self.shared.upstream.connect(peer).await?;
                    let info = client.propose(SessionConfig::default()).await?;
                    Ok::<_, BridgeError>(Opened {
                        client: Arc::new(client),
                        session_id: info.session_id,
                        principal: principal.clone(),
                    })
                };
                tokio::time::timeout(limit, open)
                    .await
                    .map_err(|_| BridgeError::Timeout { what: "opening the LDP session", after: limit })?
            })
            .await?;
        if opened.principal != principal {
            return Err(BridgeError::NotSessionPeer);
        }
        Ok(opened)
    }

    /// Runs one task: bounded in number and time; cancelled by TASK_CANCEL when the MCP request is cancelled or
    /// runs out of time; progress relayed when the caller asked for it.
    async fn run(
        &self,
        skill: &str,
        input: RawJson,
        peer: PeerContext,
        cx: &RequestContext<RoleServer>,
    ) -> Result<(RawJson, ldp_types::Provenance), BridgeError> {
        let limits = &self.shared.limits;
        let _all = self
            .shared
            .calls
            .clone()
            .try_acquire_owned()
            .map_err(|_| BridgeError::Capacity { what: "MCP tool calls in flight", limit: limits.max_calls })?;
        let _mine = self.calls.clone().try_acquire_owned().map_err(|_| BridgeError::Capacity {
            what: "MCP tool calls in flight in this session",
            limit: limits.max_calls_per_session,
        })?;
        let opened = self.session(peer).await?;
        let relay = cx.meta.get_progress_token().map(|token| relay_progress(cx.peer.clone(), token));
        self.log(cx, Severity::Debug, serde_json::json!({"event": "task submitted", "skill": skill})).await;
        let key: Arc<Mutex<Option<TaskKey>>> = Arc::default();
        let (started, task_id) = tokio::sync::oneshot::channel::<String>();
        let note = {
            let (key, resources, skill) = (key.clone(), self.resources.clone(), skill.to_owned());
            move |k: &TaskKey| {
                if let Ok(mut slot) = key.lock() {
                    *slot = Some(k.clone());
                }
                resources.started(&k.task_id, &skill);
                let _ = started.send(k.task_id.clone());
            }
        };
        let progress = follow_task(cx.peer.clone(), self.resources.clone(), task_id, relay);
        let client = &opened.client;
        let submit =
            client.submit_task(Submission::new(&opened.session_id, skill, input).progress(progress).on_key(note));
        tokio::pin!(submit);
        let stop = tokio::select! {
            done = &mut submit => {
                let done = done.map(|o| (o.output, o.provenance)).map_err(BridgeError::from);
                self.log_end(cx, skill, &done).await;
                let task_id = key.lock().ok().and_then(|k| k.as_ref().map(|k| k.task_id.clone()));
                self.record_end(cx, task_id, &done).await;
                return done;
            }
            () = cx.ct.cancelled() => None,
            () = tokio::time::sleep(limits.call_timeout) => {
                Some(BridgeError::Timeout { what: "the LDP task", after: limits.call_timeout })
            }
        };
        // MCP cancellation (or the deadline) becomes TASK_CANCEL; the machine answers the submit with CANCELLED.
        let key = key.lock().ok().and_then(|k| k.clone());
        if let Some(key) = &key {
            let _ = tokio::time::timeout(limits.cancel_timeout, client.cancel(key)).await;
        }
        let answered = tokio::time::timeout(limits.cancel_timeout, &mut submit).await;
        let done = match (stop, answered) {
            (Some(timeout), _) => Err(timeout),
            (None, Ok(done)) => done.map(|o| (o.output, o.provenance)).map_err(BridgeError::from),
            (None, Err(_)) => {
                Err(BridgeError::Timeout { what: "the cancelled task's answer", after: limits.cancel_timeout })
            }
        };
        self.record_end(cx, key.map(|k| k.task_id), &done).await;
        done
    }

    /// Records how the task ended in its resources and tells the host: `resources/updated` for each of its
    /// subscribed URIs, and a changed list (a completed task has its provenance and LCTL chain now).
    async fn record_end(
        &self,
        cx: &RequestContext<RoleServer>,
        task_id: Option<String>,
        done: &Result<(RawJson, ldp_types::Provenance), BridgeError>,
    ) {
        let Some(task_id) = task_id else { return };
        let outcome = match done {
            Ok((output, provenance)) => Ok((output, provenance)),
            Err(e) => Err(e.to_ldp_error()),
        };
        self.resources.ended(&task_id, outcome);
        notify_updated(&cx.peer, &self.resources, &task_id).await;
        let _ = tokio::time::timeout(NOTIFY_TIMEOUT, cx.peer.notify_resource_list_changed()).await;
    }
}

/// `notifications/resources/updated` for each subscribed resource of the task (bounded in time: a host that does
/// not read its stream loses notifications, never answers).
async fn notify_updated(peer: &Peer<RoleServer>, resources: &TaskResources, task_id: &str) {
    for uri in resources.subscribed_of(task_id) {
        let param = rmcp::model::ResourceUpdatedNotificationParam::new(uri);
        if tokio::time::timeout(NOTIFY_TIMEOUT, peer.notify_resource_updated(param)).await.is_err() {
            break;
        }
    }
}

/// The progress channel of a task: each TASK_UPDATE updates its `result` resource (and tells its subscribers), then
/// goes on to the `progressToken` relay when the host asked for progress. Once the task has its id, the host is told
/// the resource list changed.
fn follow_task(
    peer: Peer<RoleServer>,
    resources: Arc<TaskResources>,
    task_id: tokio::sync::oneshot::Receiver<String>,
    relay: Option<mpsc::Sender<Progress>>,
) -> mpsc::Sender<Progress> {
    let (tx, mut rx) = mpsc::channel::<Progress>(64);
    tokio::spawn(async move {
        let Ok(task_id) = task_id.await else { return };
        let _ = tokio::time::timeout(NOTIFY_TIMEOUT, peer.notify_resource_list_changed()).await;
        while let Some(update) = rx.recv().await {
            resources.progressed(&task_id, &update);
            notify_updated(&peer, &resources, &task_id).await;
            if let Some(relay) = &relay {
                // Progress is advisory: a relay that cannot keep up misses some.
                let _ = relay.try_send(update);
            }
        }
    });
    tx
}

/// MCP's log levels in order of severity (RFC 5424's, as MCP names them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Severity {
    Debug = 0,
    Info = 1,
    Warning = 3,
}

// Logging is deprecated by a later MCP revision (SEP-2577), but the protocol versions MCP hosts speak today and the
// official conformance suite still have it.
#[allow(deprecated)]
fn severity_of(level: rmcp::model::LoggingLevel) -> u8 {
    use rmcp::model::LoggingLevel as L;
    match level {
        L::Debug => 0,
        L::Info => 1,
        L::Notice => 2,
        L::Warning => 3,
        L::Error => 4,
        L::Critical => 5,
        L::Alert => 6,
        L::Emergency => 7,
    }
}

impl<U: Upstream> LdpTools<U> {
    /// Sends a task event as `notifications/message` when the peer asked for its severity or a lower one.
    #[allow(deprecated)]
    async fn log(&self, cx: &RequestContext<RoleServer>, severity: Severity, data: serde_json::Value) {
        let wanted = self.log_level.lock().ok().and_then(|l| *l);
        if wanted.is_none_or(|w| (severity as u8) < w) {
            return;
        }
        let level = match severity {
            Severity::Debug => rmcp::model::LoggingLevel::Debug,
            Severity::Info => rmcp::model::LoggingLevel::Info,
            Severity::Warning => rmcp::model::LoggingLevel::Warning,
        };
        let param = rmcp::model::LoggingMessageNotificationParam::new(level, data).with_logger("ldp");
        // Best effort, bounded: a peer that does not read its stream loses its log lines, not its answers.
        let _ = tokio::time::timeout(NOTIFY_TIMEOUT, cx.peer.notify_logging_message(param)).await;
    }

    /// The end of a task as a log line: who produced it, or how it failed.
    async fn log_end(
        &self,
        cx: &RequestContext<RoleServer>,
        skill: &str,
        done: &Result<(RawJson, ldp_types::Provenance), BridgeError>,
    ) {
        match done {
            Ok((_, provenance)) => {
                let data = serde_json::json!({
                    "event": "task completed", "skill": skill, "produced_by": provenance.produced_by,
                    "tokens_used": provenance.tokens_used,
                });
                self.log(cx, Severity::Info, data).await;
            }
            Err(e) => {
                let error = e.to_ldp_error();
                let data = serde_json::json!({"event": "task failed", "skill": skill, "code": error.code});
                self.log(cx, Severity::Warning, data).await;
            }
        }
    }
}

/// Longest one progress notification may wait for the MCP peer's stream; past it the relay stops.
const NOTIFY_TIMEOUT: Duration = Duration::from_secs(5);

/// Relays a task's TASK_UPDATEs as `notifications/progress` for `token`. MCP's progress must increase with every
/// notification: a fraction becomes a percentage (`total` 100); an update without one (a message, a chunk of
/// partial output, which MCP has no place for but the message) moves the value on by a thousandth.
fn relay_progress(peer: Peer<RoleServer>, token: ProgressToken) -> mpsc::Sender<Progress> {
    let (tx, mut rx) = mpsc::channel::<Progress>(64);
    tokio::spawn(async move {
        let mut last = 0.0_f64;
        while let Some(update) = rx.recv().await {
            let percent = update.progress.map(|f| f.clamp(0.0, 1.0) * 100.0);
            let value = match percent {
                Some(p) if p > last => p,
                _ => last + 0.001,
            };
            last = value;
            let mut param = ProgressNotificationParam::new(token.clone(), value).with_total(100.0);
            let message = match (update.message, update.partial) {
                (Some(m), _) => Some(m),
                (None, Some(chunk)) => Some(match chunk.to_value() {
                    Ok(serde_json::Value::String(s)) => s,
                    _ => chunk.json().to_owned(),
                }),
                (None, None) => None,
            };
            if let Some(message) = message {
                param = param.with_message(message);
            }
            // The MCP peer may be gone or not reading; the task's answer still ends the call.
            match tokio::time::timeout(NOTIFY_TIMEOUT, peer.notify_progress(param)).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) | Err(_) => break,
            }
        }
    });
    tx
}

/// The authenticated peer of the HTTP request carrying an MCP message (set by the LDP HTTP layer's bearer or TLS
/// authentication); an unauthenticated peer on stdio or without credentials.
fn peer_of(cx: &RequestContext<RoleServer>) -> PeerContext {
    cx.extensions
        .get::<axum::http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<PeerContext>())
        .cloned()
        .unwrap_or_default()
}

impl<U: Upstream> ServerHandler for LdpTools<U> {
    fn get_info(&self) -> ServerConfig {
        let card = self.shared.upstream.card();
        let implementation = Implementation::new(card.delegate_id.as_str(), env!("CARGO_PKG_VERSION"))
            .with_title(format!("{} (LDP delegate, bridged to MCP)", card.name));
        // Resources are the session's tasks (result, provenance, LCTL chain), subscribable; prompts are the skill
        // templates the server was given (none is a valid empty list). Completions are declared with nothing behind
        // them (an empty answer, as MCP allows) rather than "method not found". Logging carries task events.
        #[allow(deprecated)]
        let capabilities = ServerCapabilities::builder()
            .enable_logging()
            .enable_completions()
            .enable_prompts()
            .enable_resources()
            .enable_resources_subscribe()
            .enable_resources_list_changed()
            .enable_tools()
            .build();
        let mut info = ServerConfig::new(capabilities).with_server_info(implementation);
        if let Some(description) = &card.description {
            info = info.with_instructions(description.clone());
        }
        if let Ok(card) = serde_json::to_value(&card) {
            let mut meta = MetaObject::new();
            meta.insert(tools::IDENTITY_META.to_owned(), card);
            info.meta = Some(meta);
        }
        info
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _cx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools::tools(&self.shared.upstream.card())))
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _cx: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListPromptsResult, ErrorData> {
        let listed = self.shared.prompts.iter().map(SkillPrompt::listed).collect();
        Ok(rmcp::model::ListPromptsResult::with_all_items(listed))
    }

    async fn get_prompt(
        &self,
        request: rmcp::model::GetPromptRequestParams,
        _cx: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::GetPromptResponse, ErrorData> {
        let prompt = prompts::find(&self.shared.prompts, &request.name)?;
        prompt.get(request.arguments.as_ref()).map(Into::into)
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _cx: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListResourcesResult, ErrorData> {
        Ok(rmcp::model::ListResourcesResult::with_all_items(self.resources.list()))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _cx: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListResourceTemplatesResult, ErrorData> {
        Ok(rmcp::model::ListResourceTemplatesResult::with_all_items(resources::templates()))
    }

    async fn read_resource(
        &self,
        request: rmcp::model::ReadResourceRequestParams,
        _cx: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ReadResourceResponse, ErrorData> {
        self.resources.read(&request.uri).map(Into::into)
    }

    // `resources/subscribe` is what the MCP versions hosts speak today offer; the 2026-07-28 `subscriptions/listen`
    // is not served.
    #[allow(deprecated)]
    async fn subscribe(
        &self,
        request: rmcp::model::SubscribeRequestParams,
        _cx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.resources.subscribe(&request.uri)
    }

    #[allow(deprecated)]
    async fn unsubscribe(
        &self,
        request: rmcp::model::UnsubscribeRequestParams,
        _cx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.resources.unsubscribe(&request.uri);
        Ok(())
    }

    #[allow(deprecated)]
    async fn set_level(
        &self,
        request: rmcp::model::SetLevelRequestParams,
        _cx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        if let Ok(mut level) = self.log_level.lock() {
            *level = Some(severity_of(request.level));
        }
        Ok(())
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.shared.upstream.card().capabilities.iter().find(|c| c.name == name).map(tools::tool)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let card = self.shared.upstream.card();
        let Some(capability) = card.capabilities.iter().find(|c| c.name == request.name) else {
            return Err(ErrorData::invalid_params(format!("unknown tool {:?}", request.name), None));
        };
        let input = match tools::task_input(capability, request.arguments) {
            Ok(input) => input,
            Err(e) => return Ok(tools::failure(&e).into()),
        };
        let peer = peer_of(&cx);
        let result = match self.run(&capability.name, input, peer, &cx).await {
            Ok((output, provenance)) => tools::success(&output, &provenance),
            Err(e) => tools::failure(&e.to_ldp_error()),
        };
        Ok(result.into())
    }
}
