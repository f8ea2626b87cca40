//! `ldp`: the command-line tool of the LDP workspace.
//!
//! Each subcommand lives in its own module and owns its arguments, so the protocol layers stay independent here too.

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use ldp_transport_http::otlp::OtlpExport;

mod attest;
mod client;
mod conformance;
mod demo;
#[cfg(feature = "inspect")]
mod inspect;
// A server allocates a few short-lived buffers per message; mimalloc serves that pattern markedly better than the
// system allocator (BENCHMARKS.md, ldp-transport-http).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod lctl;
mod lctl_export;
mod llm;
mod llmx;
mod mcp_proxy;
mod paradox;
#[cfg(feature = "local-llm")]
mod paradox_real;
mod serve;
mod serve_flags;
mod serve_limits;
mod token_args;

/// Exit statuses, the same for every subcommand (listed in `ldp --help`).
pub(crate) mod exit {
    /// The operation succeeded.
    pub const OK: u8 = 0;
    /// The operation ran and failed: a delegate unreachable or refusing, a check that did not pass, input that
    /// does not parse.
    pub const FAILED: u8 = 1;
    /// The command line cannot be acted on: an unknown flag, a bad value, a file named on it that cannot be read.
    pub const USAGE: u8 = 2;
}

/// The LLM Delegate Protocol toolkit.
#[derive(Debug, Parser)]
#[command(
    name = "ldp",
    version,
    about,
    after_help = "Exit status (every command): 0 the operation succeeded, 1 it ran and failed, 2 usage error \
                  (a bad flag or value, an unreadable input file).\n\
                  Secrets can come from the environment instead of the command line: LDP_TOKEN (ldp card/call \
                  --token), LDP_SECRET (--secret), LDP_TOKENS (ldp serve --token, comma-separated), LDP_A2A_TOKEN \
                  (ldp serve --a2a-token)."
)]
struct Cli {
    /// Log format on stderr: text (coloured only on a terminal, never with NO_COLOR set) or JSON lines.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// Export OpenTelemetry spans (every LDP message handled and sent) over OTLP/HTTP to this collector base URL
    /// (`/v1/traces` is appended); the service is named by OTEL_SERVICE_NAME, else `ldp`.
    #[arg(long, global = true, value_name = "URL", env = "OTEL_EXPORTER_OTLP_ENDPOINT")]
    otlp_endpoint: Option<String>,
    #[command(subcommand)]
    command: Command,
}

/// The format of `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per event (for log collectors).
    Json,
}

/// Installs the subscriber: logs on stderr filtered by `RUST_LOG` (default `warn`), so stdout stays the command's
/// output; and, with an OTLP endpoint, the spans (level `info` and above, whatever `RUST_LOG` says) for the exporter,
/// which is returned so `main` can flush it before exiting.
pub(crate) fn init_logging(
    format: LogFormat,
    telemetry: &ldp::config::TelemetryConfig,
) -> Result<Option<OtlpExport>, String> {
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;

    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let logs = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let logs = match format {
        LogFormat::Text => logs.with_ansi(client::colour_wanted()).boxed(),
        LogFormat::Json => logs.json().with_ansi(false).boxed(),
    };
    let export = match telemetry.otlp_endpoint.as_deref().filter(|e| !e.trim().is_empty()) {
        Some(endpoint) => {
            let service = telemetry
                .service_name
                .clone()
                .or_else(|| std::env::var("OTEL_SERVICE_NAME").ok())
                .unwrap_or_else(|| "ldp".to_owned());
            Some(OtlpExport::new(endpoint, &service).map_err(|e| format!("--otlp-endpoint {endpoint:?}: {e}"))?)
        }
        None => None,
    };
    let spans = export.as_ref().map(|e| e.layer().with_filter(tracing_subscriber::filter::LevelFilter::INFO));
    // A second initialisation (tests calling `run` twice) keeps the first subscriber.
    let _ = tracing_subscriber::registry().with(logs.with_filter(filter)).with(spans).try_init();
    Ok(export)
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Parse, format and bridge LLMX v1.0 text.
    #[command(subcommand)]
    Llmx(llmx::LlmxCommand),
    /// Check, render and acknowledge LCTL v3.0 chain traces.
    #[command(subcommand)]
    Lctl(lctl::LctlCommand),
    /// Reproduce the provenance-paradox routing experiment of the paper.
    Paradox(paradox::ParadoxArgs),
    /// Serve an echo delegate, a language model, an MCP server or an A2A agent (--backend), over HTTP (RFC 8),
    /// WebSocket (`/ldp/ws`) and optionally TLS; also as an MCP server (--mcp) and an A2A agent (--a2a).
    // Boxed, like `Conformance`: their many flags make them several times larger than the other commands.
    Serve(Box<serve::ServeArgs>),
    /// Run the end-to-end demo: delegates on loopback, HELLO through SESSION_CLOSE over HTTP or WebSocket.
    Demo(demo::DemoArgs),
    /// Run the conformance kit against an LDP implementation.
    Conformance(Box<conformance::ConformanceArgs>),
    /// Issue, publish, revoke and verify signed quality attestations (keys and revocations served at
    /// /.well-known/ldp-issuer-keys and /.well-known/ldp-issuer-revocations).
    #[command(subcommand)]
    Attest(attest::AttestCommand),
    /// Show a delegate's identity card and capabilities.
    Card(client::CardArgs),
    /// Run one task on a delegate: discover it, open a session, submit, print the output and its provenance.
    Call(client::CallArgs),
    /// Serve a web inspector on loopback: a delegate's card, calls with streamed output and cancel, the wire log,
    /// LCTL chains and the conformance kit, in the browser.
    #[cfg(feature = "inspect")]
    Inspect(inspect::InspectArgs),
    /// A stdio MCP server in front of a remote LDP delegate (its skills as tools), for desktop MCP hosts.
    McpProxy(mcp_proxy::McpProxyArgs),
}

fn main() -> ExitCode {
    let matches = Cli::command().get_matches();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    // `ldp serve` reads its telemetry from its configuration (flags, variables, file) and sets logging up itself.
    let serving = matches!(cli.command, Command::Serve(_));
    let telemetry = ldp::config::TelemetryConfig::with_otlp_endpoint(cli.otlp_endpoint);
    let export = match if serving { Ok(None) } else { init_logging(cli.log_format, &telemetry) } {
        Ok(export) => export,
        Err(message) => {
            eprintln!("ldp: {message}");
            return ExitCode::from(exit::USAGE);
        }
    };
    let status = match cli.command {
        Command::Llmx(cmd) => llmx::run(cmd),
        Command::Lctl(cmd) => lctl::run(cmd),
        Command::Paradox(args) => paradox::run(args),
        Command::Serve(args) => {
            serve::run(&args, matches.subcommand_matches("serve").unwrap_or(&matches), cli.log_format)
        }
        Command::Demo(args) => demo::run(args),
        Command::Conformance(args) => conformance::run(*args),
        Command::Attest(cmd) => attest::run(cmd),
        Command::Card(args) => client::run_card(args),
        Command::Call(args) => client::run_call(args),
        Command::McpProxy(args) => mcp_proxy::run(args),
        #[cfg(feature = "inspect")]
        Command::Inspect(args) => inspect::run(args),
    };
    if let Some(export) = export
        && let Err(e) = export.shutdown()
    {
        // The command's own outcome stands; the lost spans are worth a line on stderr.
        eprintln!("ldp: exporting spans: {e}");
    }
    status
}
