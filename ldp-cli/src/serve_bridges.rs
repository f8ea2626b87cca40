//! The bridges of `ldp serve`: its flags for MCP (`--mcp`, `--backend mcp`) and A2A (`--a2a`, `--backend a2a`),
//! the bridged backends they start, and the routes they add.

use std::sync::Arc;
use std::time::Duration;

use ldp_bridge::a2a::{A2aDelegate, A2aLimits, CardOptions};
use ldp_bridge::mcp::{McpDelegate, McpLimits};
use ldp_session::runtime::{Delegate, DelegateRuntime};
use ldp_transport_http::HttpServerConfig;
use ldp_types::{DelegateId, IdentityCard};

use crate::llm::BackendKind;

/// The flags of `ldp serve --mcp`: MCP's Streamable HTTP transport at `/mcp`, behind the same authentication, body
/// limit and rate limit as the LDP routes.
#[derive(Debug, clap::Args)]
pub struct McpArgs {
    /// Also serve MCP at /mcp: each capability a tool; an MCP session gets an LDP session; tools/call runs a task.
    #[arg(long)]
    pub mcp: bool,
    /// With --backend mcp: the MCP server to start, `PROGRAM ARG...` split on whitespace; it speaks MCP on its
    /// standard input and output, and its tools are the skills.
    #[arg(long, value_name = "COMMAND", requires = "backend", group = "mcp_server")]
    pub mcp_command: Option<String>,
    /// With --backend mcp: the URL of an MCP server speaking Streamable HTTP (`http://HOST:PORT/mcp`); its tools are
    /// the skills.
    #[arg(long, value_name = "URL", requires = "backend", group = "mcp_server")]
    pub mcp_url: Option<String>,
    /// With --mcp-url: the bearer token sent to that server.
    #[arg(long, value_name = "TOKEN", requires = "mcp_url")]
    pub mcp_token: Option<String>,
    /// MCP sessions open at once; an initialize beyond it is refused.
    #[arg(long, value_name = "N", default_value_t = 256, requires = "mcp")]
    pub mcp_max_sessions: usize,
    /// MCP tool calls in flight, all sessions together; beyond it a call fails with CAPACITY_EXCEEDED.
    #[arg(long, value_name = "N", default_value_t = 256, requires = "mcp")]
    pub mcp_max_calls: usize,
    /// MCP tool calls in flight in one MCP session.
    #[arg(long, value_name = "N", default_value_t = 16, requires = "mcp")]
    pub mcp_max_calls_per_session: usize,
    /// An MCP session without a request for this long is closed, with its LDP session, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 300, requires = "mcp")]
    pub mcp_session_idle: u64,
    /// A Host header value /mcp accepts besides the loopback names and the --bind host (repeatable; DNS-rebinding
    /// protection); `*` accepts any.
    #[arg(long = "mcp-allowed-host", value_name = "HOST", requires = "mcp")]
    pub mcp_allowed_hosts: Vec<String>,
}

impl McpArgs {
    /// The bridge's bounds: a call may run as long as an LDP request (`--timeout`), bodies as large as LDP's.
    pub fn limits(&self, bind: &str, http: &HttpServerConfig) -> McpLimits {
        let mut limits = McpLimits::default();
        limits.max_sessions = self.mcp_max_sessions.max(1);
        limits.max_calls = self.mcp_max_calls.max(1);
        limits.max_calls_per_session = self.mcp_max_calls_per_session.max(1);
        limits.session_idle = Duration::from_secs(self.mcp_session_idle.max(1));
        limits.call_timeout = http.request_timeout;
        limits.max_body = http.max_body;
        if self.mcp_allowed_hosts.iter().any(|h| h == "*") {
            limits.allowed_hosts.clear();
        } else {
            let host = bind.rsplit_once(':').map_or(bind, |(host, _)| host).trim_matches(['[', ']']);
            if !host.is_empty() && host != "0.0.0.0" && host != "::" {
                limits.allowed_hosts.push(host.to_owned());
            }
            limits.allowed_hosts.extend(self.mcp_allowed_hosts.iter().cloned());
        }
        limits
    }
}

/// The flags of `ldp serve --a2a` (A2A's Agent Card at `/.well-known/agent-card.json`, public, and its JSON-RPC
/// binding at `/a2a`, behind the LDP routes' authentication, body limit and rate limit) and of `--backend a2a`.
#[derive(Debug, clap::Args)]
pub struct A2aArgs {
    /// Also serve A2A: the Agent Card at /.well-known/agent-card.json and JSON-RPC (SendMessage,
    /// SendStreamingMessage, GetTask, CancelTask; the 0.3 names too) at /a2a; an A2A contextId gets an LDP session.
    #[arg(long)]
    pub a2a: bool,
    /// With --backend a2a: the A2A agent's base URL (its card at /.well-known/agent-card.json), or its card's URL.
    #[arg(long, value_name = "URL", requires = "backend")]
    pub a2a_url: Option<String>,
    /// With --backend a2a: a bearer token to send to the agent (never printed).
    #[arg(long, value_name = "TOKEN", env = "LDP_A2A_TOKEN", hide_env_values = true)]
    pub a2a_token: Option<String>,
    /// A2A contexts (LDP sessions) held at once; when full the least recently used idle one is closed.
    #[arg(long, value_name = "N", default_value_t = 256, requires = "a2a")]
    pub a2a_max_contexts: usize,
    /// A2A tasks held at once, running or ended (ended ones stay readable by GetTask for --a2a-task-ttl).
    #[arg(long, value_name = "N", default_value_t = 1024, requires = "a2a")]
    pub a2a_max_tasks: usize,
    /// A2A tasks running at once; beyond it a message is refused with CAPACITY_EXCEEDED.
    #[arg(long, value_name = "N", default_value_t = 256, requires = "a2a")]
    pub a2a_max_running: usize,
    /// An A2A context without a message for this long is closed, with its LDP session, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 300, requires = "a2a")]
    pub a2a_context_idle: u64,
    /// How long an ended A2A task stays readable by GetTask, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 600, requires = "a2a")]
    pub a2a_task_ttl: u64,
    /// Largest A2A request body, in bytes [default: --max-body].
    #[arg(long, value_name = "BYTES", requires = "a2a")]
    pub a2a_max_body: Option<usize>,
}

impl A2aArgs {
    /// The bridge's bounds: a task ends (and is cancelled) before the HTTP request waiting for it times out.
    pub fn limits(&self, http: &HttpServerConfig) -> A2aLimits {
        let mut limits = A2aLimits::default();
        limits.max_contexts = self.a2a_max_contexts.max(1);
        limits.max_tasks = self.a2a_max_tasks.max(1);
        limits.max_running = self.a2a_max_running.max(1);
        limits.context_idle = Duration::from_secs(self.a2a_context_idle.max(1));
        limits.task_ttl = Duration::from_secs(self.a2a_task_ttl.max(1));
        limits.call_timeout = bridged_call_timeout(http.request_timeout);
        limits.max_body = self.a2a_max_body.unwrap_or(http.max_body).min(http.max_body);
        limits
    }
}

/// The longest a bridged call may run: a second less than the request waiting for it, so that it is cancelled and
/// answered before the request is cut.
fn bridged_call_timeout(request_timeout: Duration) -> Duration {
    request_timeout.saturating_sub(Duration::from_secs(1)).max(Duration::from_secs(1))
}

/// Another protocol's server behind `ldp serve --backend mcp|a2a`.
pub enum Bridged {
    /// An MCP server started as a child process.
    Mcp(McpDelegate),
    /// An A2A agent at a URL.
    A2a(A2aDelegate),
}

impl Bridged {
    /// Starts (MCP) or discovers (A2A) the backend the flags name; `None` for the other backends.
    pub async fn start(
        backend: Option<BackendKind>,
        mcp: &McpArgs,
        a2a: &A2aArgs,
        request_timeout: Duration,
    ) -> Result<Option<Self>, String> {
        match backend {
            Some(BackendKind::Mcp) => {
                let mut limits = ldp_bridge::mcp::BackendLimits::default();
                limits.call_timeout = bridged_call_timeout(request_timeout);
                let delegate = if let Some(url) = mcp.mcp_url.as_deref() {
                    McpDelegate::connect_url(url, mcp.mcp_token.as_deref(), limits)
                        .await
                        .map_err(|e| format!("--mcp-url {url}: {e}"))?
                } else {
                    let command = mcp.mcp_command.as_deref().unwrap_or_default();
                    let mut words = command.split_whitespace().map(str::to_owned);
                    let program = words.next().ok_or("--backend mcp: give --mcp-command or --mcp-url")?;
                    McpDelegate::spawn_command(&program, &words.collect::<Vec<_>>(), limits)
                        .await
                        .map_err(|e| format!("--mcp-command {command:?}: {e}"))?
                };
                Ok(Some(Self::Mcp(delegate)))
            }
            Some(BackendKind::A2a) => {
                let url = a2a.a2a_url.as_deref().unwrap_or_default();
                let mut limits = ldp_bridge::a2a::BackendLimits::default();
                limits.call_timeout = bridged_call_timeout(request_timeout);
                let delegate = A2aDelegate::discover(url, a2a.a2a_token.clone(), limits)
                    .await
                    .map_err(|e| format!("--a2a-url {url}: {e}"))?;
                Ok(Some(Self::A2a(delegate)))
            }
            _ => Ok(None),
        }
    }

    /// The generated identity card, under `id` or the bridge's default id.
    pub fn card(&self, id: Option<&str>) -> Result<IdentityCard, String> {
        let default = match self {
            Self::Mcp(_) => "ldp:delegate:mcp",
            Self::A2a(_) => "ldp:delegate:a2a",
        };
        let id = DelegateId::new(id.unwrap_or(default)).map_err(|e| e.to_string())?;
        Ok(match self {
            Self::Mcp(m) => m.card(id),
            Self::A2a(a) => a.card(id),
        })
    }

    /// A line saying what is bridged.
    pub fn describe(&self) -> String {
        match self {
            Self::Mcp(m) => format!("mcp server {} {}", m.server().name, m.server().version),
            Self::A2a(a) => format!("a2a agent {} {}", a.agent().name, a.agent().version),
        }
    }

    /// The delegate that answers the tasks.
    pub fn into_delegate(self) -> Arc<dyn Delegate> {
        match self {
            Self::Mcp(m) => Arc::new(m),
            Self::A2a(a) => Arc::new(a),
        }
    }
}

/// The authenticated routes the bridges add to the LDP app (`/mcp`, `/a2a`), and the public ones (the Agent Card).
pub fn routes(
    runtime: &DelegateRuntime,
    args: &crate::serve::ServeArgs,
    http: &HttpServerConfig,
    card: CardOptions,
    stop: &tokio_util::sync::CancellationToken,
) -> (axum::Router<ldp_transport_http::HttpState>, axum::Router) {
    let mut protected = axum::Router::new();
    let mut public = axum::Router::new();
    if args.mcp.mcp {
        let upstream = Arc::new(ldp_bridge::InProcess::new(runtime.clone()));
        protected = protected.merge(ldp_bridge::mcp::routes(upstream, args.mcp.limits(&args.bind, http), stop.clone()));
    }
    if args.a2a.a2a {
        let upstream = Arc::new(ldp_bridge::InProcess::new(runtime.clone()).with_initiator(ldp_bridge::A2A_BRIDGE_ID));
        protected = protected.merge(ldp_bridge::a2a::routes(upstream.clone(), args.a2a.limits(http), stop.clone()));
        public = public.merge(ldp_bridge::a2a::card_routes(upstream, card));
    }
    (protected, public)
}
