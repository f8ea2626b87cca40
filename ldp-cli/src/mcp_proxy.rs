//! `ldp mcp-proxy URL`: a stdio MCP server in front of a remote LDP delegate, for desktop MCP hosts (they start it
//! as a child process and speak MCP on its standard input and output; logs go to standard error).

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use ldp_bridge::mcp::{McpLimits, Remote, serve_stdio};

/// Arguments of `ldp mcp-proxy`.
#[derive(Debug, clap::Args)]
pub struct McpProxyArgs {
    /// The LDP delegate's base URL (its identity card is fetched from it).
    pub url: String,
    /// A bearer token for the delegate.
    #[arg(long, value_name = "TOKEN", env = "LDP_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Longest a tool call may run, in seconds; then its task is cancelled (TASK_CANCEL) and the call fails TIMEOUT.
    #[arg(long, value_name = "SECS", default_value_t = 120)]
    pub timeout: u64,
    /// Tool calls in flight at once; beyond it a call fails with CAPACITY_EXCEEDED.
    #[arg(long, value_name = "N", default_value_t = 16)]
    pub max_calls: usize,
}

async fn proxy(args: McpProxyArgs) -> Result<(), String> {
    let timeout = Duration::from_secs(args.timeout.max(1));
    // The HTTP request of a task is answered when the task ends: give it the call's time and a margin, so the
    // bridge's own deadline (which cancels the task) comes first.
    let remote = Remote::discover(&args.url, args.token, timeout + Duration::from_secs(10))
        .await
        .map_err(|e| format!("{}: {e}", args.url))?;
    let card = ldp_bridge::mcp::Upstream::card(&remote);
    eprintln!("ldp mcp-proxy: {} ({} skills), MCP on stdio", card.delegate_id.as_str(), card.capabilities.len());
    let mut limits = McpLimits::default();
    limits.call_timeout = timeout;
    limits.max_calls = args.max_calls.max(1);
    limits.max_calls_per_session = limits.max_calls;
    let stop = tokio_util::sync::CancellationToken::new();
    serve_stdio(Arc::new(remote), limits, stop).await.map_err(|e| e.to_string())
}

/// Runs `ldp mcp-proxy` until the MCP host closes standard input.
pub fn run(args: McpProxyArgs) -> ExitCode {
    let rt = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("ldp mcp-proxy: cannot start the runtime: {e}");
            return ExitCode::from(crate::exit::FAILED);
        }
    };
    let status = match rt.block_on(proxy(args)) {
        Ok(()) => ExitCode::from(crate::exit::OK),
        Err(e) => {
            eprintln!("ldp mcp-proxy: {e}");
            ExitCode::from(crate::exit::FAILED)
        }
    };
    // Standard input's reader is a blocking thread the runtime would otherwise wait for.
    rt.shutdown_timeout(Duration::from_secs(1));
    status
}
