//! LDP delegate -> MCP server, on `rmcp` (the official Rust MCP SDK).
//!
//! Each capability on the delegate's identity card is a tool ([`tools::tool`]: name, description, input schema from
//! the skill). An MCP session gets one LDP session, opened by its first `tools/call` and closed with it; each
//! `tools/call` is one LDP task in it. A `progressToken` turns the task's TASK_UPDATEs into
//! `notifications/progress`; `notifications/cancelled` (or the call's deadline) sends TASK_CANCEL. A result carries
//! its provenance in `_meta["ldp/provenance"]`; a failure is a tool error (`isError`) whose structured content and
//! `_meta["ldp/error"]` are the typed `LdpError`.
//!
//! Two ways in: [`routes`] mounts MCP's Streamable HTTP transport at [`PATH`] in an axum app (`ldp serve --mcp`,
//! beside the LDP routes, behind their authentication), and [`serve_stdio`] answers on standard input and output
//! (`ldp mcp-proxy URL`, for desktop MCP hosts).

pub mod backend;
pub mod prompts;
pub mod resources;
mod server;
mod sessions;
pub mod tools;

use std::sync::Arc;

use rmcp::ServiceExt;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

pub use crate::upstream::{BRIDGE_ID, InProcess, Remote, Upstream};
pub use backend::{BackendLimits, McpDelegate};
pub use prompts::SkillPrompt;
pub use server::{LdpTools, McpLimits};
pub use sessions::{BoundedSessions, SessionsError};

use crate::BridgeError;

/// Where [`routes`] mounts the MCP endpoint.
pub const PATH: &str = "/mcp";

/// The MCP Streamable HTTP endpoint at [`PATH`], for the delegate behind `upstream`, as an axum router to merge
/// into (or pass as the extra routes of) an app of any state. Sessions, calls, bodies and waits are bounded by
/// `limits`; cancelling `stop` ends every MCP session (give it the server's shutdown).
pub fn routes<U: Upstream, S: Clone + Send + Sync + 'static>(
    upstream: Arc<U>,
    limits: McpLimits,
    stop: CancellationToken,
) -> axum::Router<S> {
    routes_with_prompts(upstream, limits, Vec::new(), stop)
}

/// [`routes`], with the delegate's skill templates as MCP prompts (`prompts/list`, `prompts/get`).
pub fn routes_with_prompts<U: Upstream, S: Clone + Send + Sync + 'static>(
    upstream: Arc<U>,
    limits: McpLimits,
    prompts: Vec<SkillPrompt>,
    stop: CancellationToken,
) -> axum::Router<S> {
    let sessions = Arc::new(BoundedSessions::new(limits.max_sessions, limits.session_idle));
    let mut config = StreamableHttpServerConfig::default()
        .with_max_request_body_bytes(limits.max_body)
        .with_cancellation_token(stop);
    config = if limits.allowed_hosts.is_empty() {
        config.disable_allowed_hosts()
    } else {
        config.with_allowed_hosts(limits.allowed_hosts.clone())
    };
    let shared = server::Shared::new(upstream, limits, prompts);
    let service = StreamableHttpService::new(move || Ok(LdpTools::new(shared.clone())), sessions.clone(), config);
    axum::Router::new()
        .route_service(PATH, service)
        .route_layer(axum::middleware::from_fn_with_state(sessions, refuse_when_full))
}

/// The SDK answers an `initialize` its session manager refuses with a bare 500; a full session table is a capacity
/// refusal, so it becomes 503 with `Retry-After` and a JSON-RPC error carrying the typed `CAPACITY_EXCEEDED`.
async fn refuse_when_full(
    axum::extract::State(sessions): axum::extract::State<Arc<BoundedSessions>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::http::{StatusCode, header};
    use axum::response::IntoResponse;

    let before = sessions.refused();
    let response = next.run(request).await;
    if response.status() != StatusCode::INTERNAL_SERVER_ERROR || sessions.refused() == before {
        return response;
    }
    let error = BridgeError::Capacity { what: "MCP sessions", limit: sessions.max() }.to_ldp_error();
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": { "code": -32000, "message": error.message, "data": { tools::ERROR_META: error } },
    });
    (StatusCode::SERVICE_UNAVAILABLE, [(header::RETRY_AFTER, "5")], axum::Json(body)).into_response()
}

/// Serves the delegate behind `upstream` as an MCP server on standard input and output (one MCP session) until the
/// peer closes them or `stop` is cancelled.
pub async fn serve_stdio<U: Upstream>(
    upstream: Arc<U>,
    limits: McpLimits,
    stop: CancellationToken,
) -> Result<(), BridgeError> {
    let tools = LdpTools::new(server::Shared::new(upstream, limits, Vec::new()));
    let running =
        tools.serve_with_ct(rmcp::transport::stdio(), stop).await.map_err(|e| BridgeError::Mcp(e.to_string()))?;
    running.waiting().await.map_err(|e| BridgeError::Mcp(e.to_string()))?;
    Ok(())
}
