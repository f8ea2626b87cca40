//! `ldp card` and `ldp call`: a delegate's identity card, and one task run against it, from the command line.
//!
//! Both discover the delegate the way every client of the workspace does (`Transport::identity`), so what they show
//! is what a router would see. With `--json` each prints JSON only on stdout (progress as JSON lines before the
//! result when `--stream` is given), for scripts; without it, a human summary.

use ldp_types::receipt::{ReceiptVerdict, check_receipt};
use std::io::{IsTerminal, Read};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, ValueEnum};
use ldp_session::runtime::{Client, Progress, Submission, TaskOutcome, Transport};
use ldp_session::{InitiatorConfig, SecurityConfig, SeededIds, SystemClock};
use ldp_transport_http::{ConnectOptions, ConnectSettings, HttpTransport};
use ldp_transport_ws::WsTransport;
use ldp_types::signing::{SignatureAlgorithm, SigningKey};
use ldp_types::{DelegationContract, IdentityCard, PayloadMode, RawJson, SessionConfig};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tracing::Instrument;

use crate::exit;

/// How to reach the delegate: its URL, the transport, the credentials.
#[derive(Debug, Args)]
pub struct Connection {
    /// The delegate's base URL: `http(s)://host:port` (or `ws(s)://host:port`, which picks the WebSocket transport).
    pub url: String,
    /// The transport; by default HTTP, or WebSocket for `ws://` and `wss://` URLs.
    #[arg(long, value_enum)]
    pub transport: Option<TransportKind>,
    /// A bearer token sent with every request.
    #[arg(long, env = "LDP_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// A token fetched instead: OAuth client credentials or a command.
    #[command(flatten)]
    pub fetched: crate::token_args::TokenArgs,
    /// Seconds to wait for the delegate (connection and each answer).
    #[arg(long, value_name = "SECS", default_value_t = 120)]
    pub timeout: u64,
    /// Print JSON only (for scripts).
    #[arg(long)]
    pub json: bool,
}

/// The transport of `--transport`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TransportKind {
    /// HTTP (RFC 8): `/ldp/messages`, `/ldp/stream` for streamed updates.
    Http,
    /// WebSocket: `/ldp/ws`.
    Ws,
}

/// `ldp card URL`.
#[derive(Debug, Args)]
pub struct CardArgs {
    #[command(flatten)]
    connection: Connection,
}

/// `ldp call URL SKILL INPUT`.
#[derive(Debug, Args)]
pub struct CallArgs {
    #[command(flatten)]
    connection: Connection,
    /// The skill (a capability name on the delegate's card).
    pub skill: String,
    /// The task input: JSON if it parses as JSON (`'{"text":"hi"}'`, `42`), else sent as a string; `-` reads stdin.
    pub input: String,
    /// A further task in the same session after the first (repeatable, in order): the delegate sees the earlier
    /// turns as the session's history. Each result is printed as it comes (with `--json`, one line each, with the
    /// task's `elapsed_ms`).
    #[arg(long = "then", value_name = "INPUT")]
    pub then: Vec<String>,
    /// Show progress as the delegate reports it (over SSE on HTTP, pushed frames on WebSocket).
    #[arg(long)]
    pub stream: bool,
    /// The payload mode to propose for the session (the delegate may fall back along the negotiated chain).
    #[arg(long, value_name = "MODE")]
    pub mode: Option<PayloadMode>,
    /// Our delegate id (the `from` of every message).
    #[arg(long, value_name = "ID", default_value = "ldp:delegate:cli")]
    pub from: String,
    /// Our trust domain, declared in the session proposal.
    #[arg(long, value_name = "DOMAIN", default_value = "default")]
    pub trust_domain: String,
    /// Sign every message, and require signed replies, with this algorithm.
    #[arg(long, value_enum, value_name = "ALG", requires = "secret")]
    pub sign: Option<SignArg>,
    /// The shared secret (hmac-*) or the 64-hex-digit Ed25519 seed (ed25519-jcs).
    #[arg(long, value_name = "S", env = "LDP_SECRET", hide_env_values = true, requires = "sign")]
    pub secret: Option<String>,
    /// Send every task under this delegation contract: a JSON file of the contract's wire shape
    /// (`{"contract_id": "c1", "objective": "...", "success_criteria": ["check: words <= 50"], "policy": {...}}`,
    /// docs/contracts.md). The delegate checks it before running anything and answers a violation as a typed failure.
    #[arg(long, value_name = "FILE")]
    pub contract: Option<std::path::PathBuf>,
    /// Write the result's chain as an LCTL document to FILE (the last task's, with `--then`): each hop of its
    /// provenance lineage a step, with the facts the hop reported. `ldp lctl check FILE` and `ldp lctl render FILE`
    /// read it.
    #[arg(long, value_name = "FILE")]
    pub lctl: Option<std::path::PathBuf>,
}

/// The signature algorithms of `--sign`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SignArg {
    /// HMAC-SHA256 over the reference SDKs' signing input (what the Python and Rust reference SDKs speak).
    #[value(name = "hmac-sha256")]
    HmacSha256,
    /// HMAC-SHA256 over the JCS-canonical envelope (covers every member).
    #[value(name = "hmac-sha256-jcs")]
    HmacSha256Jcs,
    /// Ed25519 over the JCS-canonical envelope (the secret is a 64-hex-digit seed).
    #[value(name = "ed25519-jcs")]
    Ed25519Jcs,
}

impl SignArg {
    /// The wire algorithm.
    pub fn algorithm(self) -> SignatureAlgorithm {
        match self {
            SignArg::HmacSha256 => SignatureAlgorithm::HmacSha256,
            SignArg::HmacSha256Jcs => SignatureAlgorithm::HmacSha256Jcs,
            SignArg::Ed25519Jcs => SignatureAlgorithm::Ed25519Jcs,
        }
    }
}

/// What went wrong, with the exit status it maps to.
enum Failure {
    /// The command line cannot be acted on (exit 2).
    Usage(String),
    /// The delegate could not be reached or refused (exit 1); the typed error when there is one.
    Failed { message: String, error: Option<Value> },
}

impl Failure {
    fn failed(message: impl std::fmt::Display) -> Self {
        Failure::Failed { message: message.to_string(), error: None }
    }
}

/// Runs `ldp card`.
pub fn run_card(args: CardArgs) -> ExitCode {
    let json = args.connection.json;
    finish("card", json, run_async(async move { card(&args.connection).await }))
}

/// Runs `ldp call`.
pub fn run_call(args: CallArgs) -> ExitCode {
    let json = args.connection.json;
    // One span around the whole call, so its HELLO, session and task are one trace.
    let span = tracing::info_span!("ldp.call", ldp.skill = args.skill.as_str());
    finish("call", json, run_async(async move { call(&args).await }.instrument(span)))
}

/// Reads `--contract FILE`; a file that is not a contract is a usage error, before anything is sent.
fn read_contract(path: &std::path::Path) -> Result<DelegationContract, Failure> {
    let text =
        std::fs::read_to_string(path).map_err(|e| Failure::Usage(format!("--contract {}: {e}", path.display())))?;
    serde_json::from_str(&text)
        .map_err(|e| Failure::Usage(format!("--contract {}: not a delegation contract: {e}", path.display())))
}

fn run_async<F: Future<Output = Result<(), Failure>>>(f: F) -> Result<(), Failure> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::failed(format!("cannot start the runtime: {e}")))?;
    rt.block_on(f)
}

fn finish(command: &str, json: bool, result: Result<(), Failure>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::from(exit::OK),
        Err(Failure::Usage(message)) => {
            eprintln!("ldp {command}: {message}");
            ExitCode::from(exit::USAGE)
        }
        Err(Failure::Failed { message, error }) => {
            if json {
                let error = error.unwrap_or_else(|| json!({ "message": message }));
                println!("{}", json!({ "error": error }));
            }
            eprintln!("ldp {command}: {message}");
            ExitCode::from(exit::FAILED)
        }
    }
}

async fn card(conn: &Connection) -> Result<(), Failure> {
    let card = match transport_kind(conn)? {
        TransportKind::Http => http_transport(conn)?.identity().await,
        TransportKind::Ws => ws_transport(conn).await?.identity().await,
    }
    .map_err(|e| unreachable_hint(conn, e.to_string(), Some(&e)))?;
    if conn.json {
        let text = serde_json::to_string(&card).map_err(Failure::failed)?;
        println!("{text}");
    } else {
        print_card(&card);
    }
    Ok(())
}

fn print_card(card: &IdentityCard) {
    println!("{} ({})", card.delegate_id.as_str(), card.name);
    println!("  model        {} {}", card.model_family, card.model_version);
    println!("  trust domain {}", card.trust_domain.name);
    let modes: Vec<&str> = card.supported_payload_modes.iter().map(|m| m.as_str()).collect();
    println!("  modes        {}", modes.join(", "));
    println!("  capabilities");
    for capability in &card.capabilities {
        let quality = capability
            .quality
            .as_ref()
            .and_then(|q| q.quality_score.map(|score| format!(" quality {} ({})", score.get(), q.claim_type.as_str())))
            .unwrap_or_default();
        println!("    {}{quality}", capability.name);
    }
}

async fn call(args: &CallArgs) -> Result<(), Failure> {
    let conn = &args.connection;
    let input = read_input(&args.input)?;
    let cfg = initiator_config(args)?;
    match transport_kind(conn)? {
        TransportKind::Http => call_over(args, http_transport(conn)?, cfg, input).await,
        TransportKind::Ws => call_over(args, ws_transport(conn).await?, cfg, input).await,
    }
}

async fn call_over<T: Transport>(
    args: &CallArgs,
    transport: T,
    cfg: InitiatorConfig,
    input: RawJson,
) -> Result<(), Failure> {
    let conn = &args.connection;
    let contract = args.contract.as_deref().map(read_contract).transpose()?;
    let client = Client::connect(transport, cfg, Arc::new(SystemClock), Box::new(SeededIds::from_entropy()))
        .await
        .map_err(|e| unreachable_hint(conn, e.to_string(), Some(&e.to_ldp_error())))?;
    let mut proposal = SessionConfig::default();
    if let Some(mode) = args.mode {
        proposal.preferred_payload_modes = Some(vec![mode]);
    }
    let session = client.propose(proposal).await.map_err(session_failure)?;
    let mut inputs = vec![input];
    for then in &args.then {
        inputs.push(read_input(then)?);
    }
    let mut result = Ok(());
    for input in inputs {
        let (progress_tx, progress_rx) = mpsc::channel::<Progress>(64);
        let printer = tokio::spawn(print_progress(progress_rx, conn.json));
        let progress = args.stream.then_some(progress_tx);
        let started = std::time::Instant::now();
        let outcome = client
            .submit_task(
                Submission::new(&session.session_id, &args.skill, input).contract(contract.clone()).progress(progress),
            )
            .await;
        let elapsed = started.elapsed();
        // The printer ends once every sender is gone, after the last update.
        let _ = printer.await;
        result = outcome.map_err(session_failure).and_then(|outcome| {
            let key = &outcome.key;
            let receipt = check_receipt(client.card(), &outcome.provenance, &key.session_id, &key.task_id);
            print_outcome(&outcome, &receipt, conn.json, elapsed)?;
            match &args.lctl {
                Some(path) => write_chain(path, &outcome),
                None => Ok(()),
            }
        });
        if result.is_err() {
            break;
        }
    }
    // A failed close leaves the session to expire on its TTL; the tasks' outcomes are what the caller asked for.
    let _ = client.close(&session.session_id).await;
    result
}

/// How a receipt verdict reads in `ldp call`'s output.
fn receipt_text(verdict: &ReceiptVerdict) -> String {
    match verdict {
        ReceiptVerdict::Verified => "verified".into(),
        ReceiptVerdict::Missing => "missing (the card publishes a receipt key)".into(),
        ReceiptVerdict::Invalid(why) => format!("INVALID: {why}"),
        _ => "none (figures self-reported)".into(),
    }
}

async fn print_progress(mut updates: mpsc::Receiver<Progress>, json: bool) {
    while let Some(update) = updates.recv().await {
        if json {
            println!("{}", json!({ "progress": update.progress, "message": update.message }));
        } else {
            let percent = update.progress.map(|p| format!("{:>3.0}%", p * 100.0)).unwrap_or_else(|| "   …".into());
            eprintln!("{percent} {}", update.message.unwrap_or_default());
        }
    }
}

fn print_outcome(
    outcome: &TaskOutcome,
    receipt: &ReceiptVerdict,
    json: bool,
    elapsed: Duration,
) -> Result<(), Failure> {
    let output = outcome.output.to_value().map_err(Failure::failed)?;
    let provenance = serde_json::to_value(&outcome.provenance).map_err(Failure::failed)?;
    if json {
        let receipt = match receipt {
            ReceiptVerdict::Verified => json!("verified"),
            ReceiptVerdict::Missing => json!("missing"),
            ReceiptVerdict::Invalid(why) => json!({ "invalid": why }),
            _ => Value::Null,
        };
        let elapsed_ms = elapsed.as_secs_f64() * 1000.0;
        println!(
            "{}",
            json!({ "output": output, "provenance": provenance, "receipt": receipt, "elapsed_ms": elapsed_ms })
        );
        return Ok(());
    }
    match &output {
        Value::String(text) => println!("{text}"),
        other => println!("{other}"),
    }
    let p = &outcome.provenance;
    let confidence = p.confidence.map(|c| format!(", confidence {}", c.get())).unwrap_or_default();
    let tokens = p.tokens_used.map(|t| format!(", {t} tokens")).unwrap_or_default();
    eprintln!(
        "produced by {} ({}) in {} mode{confidence}{tokens}; usage receipt: {}",
        p.produced_by,
        p.model_version,
        p.payload_mode_used.as_str(),
        receipt_text(receipt)
    );
    Ok(())
}

/// Writes the chain of `outcome` (its provenance lineage, hop by hop) to `path` as an LCTL document named after the
/// task.
fn write_chain(path: &std::path::Path, outcome: &TaskOutcome) -> Result<(), Failure> {
    let document = ldp_lctl::ldp::document_from_ldp(outcome.key.task_id.as_str(), Some(&outcome.provenance), None)
        .map_err(|e| Failure::failed(format!("--lctl: the result's chain: {e}")))?;
    let yaml = document.to_yaml().map_err(|e| Failure::failed(format!("--lctl: the result's chain: {e}")))?;
    std::fs::write(path, yaml).map_err(|e| Failure::failed(format!("--lctl {}: {e}", path.display())))
}

fn read_input(arg: &str) -> Result<RawJson, Failure> {
    let text = if arg == "-" {
        let mut buf = String::new();
        std::io::stdin().read_to_string(&mut buf).map_err(|e| Failure::Usage(format!("reading stdin: {e}")))?;
        buf
    } else {
        arg.to_owned()
    };
    // JSON when it is JSON (an object, a number, a quoted string); anything else is the text itself.
    match RawJson::from_json(text.trim()) {
        Ok(raw) => Ok(raw),
        Err(_) => Ok(RawJson::from(Value::String(text))),
    }
}

fn initiator_config(args: &CallArgs) -> Result<InitiatorConfig, Failure> {
    let mut cfg = InitiatorConfig::new(args.from.clone());
    cfg.trust_domain = Some(args.trust_domain.clone());
    if let (Some(sign), Some(secret)) = (args.sign, args.secret.as_deref()) {
        let alg = sign.algorithm();
        let key = match alg {
            SignatureAlgorithm::Ed25519Jcs => SigningKey::ed25519_from_hex(secret),
            _ => SigningKey::shared_secret(alg, secret),
        }
        .map_err(|e| Failure::Usage(format!("--secret: {e}")))?;
        cfg.security = SecurityConfig::symmetric(key);
        // The reference SDKs sign hmac-sha256 without a nonce; our own servers accept both.
        cfg.hmac_sha256_nonce = alg != SignatureAlgorithm::HmacSha256;
    }
    Ok(cfg)
}

fn transport_kind(conn: &Connection) -> Result<TransportKind, Failure> {
    let url = conn.url.to_ascii_lowercase();
    let websocket_url = url.starts_with("ws://") || url.starts_with("wss://");
    if !websocket_url && !url.starts_with("http://") && !url.starts_with("https://") {
        return Err(Failure::Usage(format!("{}: expected an http://, https://, ws:// or wss:// URL", conn.url)));
    }
    match conn.transport {
        Some(TransportKind::Http) if websocket_url => {
            Err(Failure::Usage(format!("{}: a WebSocket URL needs --transport ws", conn.url)))
        }
        Some(kind) => Ok(kind),
        None if websocket_url => Ok(TransportKind::Ws),
        None => Ok(TransportKind::Http),
    }
}

/// What `--timeout` and `--token` (or a fetched token) ask of either transport.
fn connect_options(conn: &Connection) -> Result<ConnectOptions, Failure> {
    let timeout = Duration::from_secs(conn.timeout);
    let mut options = ConnectOptions::new().connect_timeout(timeout).request_timeout(timeout);
    options.token = conn.token.clone();
    options.token_source = conn.fetched.source().map_err(Failure::Usage)?;
    Ok(options)
}

fn http_transport(conn: &Connection) -> Result<HttpTransport, Failure> {
    HttpTransport::with_options(&conn.url, connect_options(conn)?).map_err(|e| Failure::Usage(e.to_string()))
}

async fn ws_transport(conn: &Connection) -> Result<WsTransport, Failure> {
    WsTransport::connect(&conn.url, connect_options(conn)?)
        .await
        .map_err(|e| unreachable_hint(conn, e.to_string(), None))
}

fn session_failure(e: ldp_session::SessionError) -> Failure {
    let error = serde_json::to_value(e.to_ldp_error()).ok();
    Failure::Failed { message: e.to_string(), error }
}

/// A failure to reach the delegate, with a hint when an `https://`/`wss://` URL met a plain-HTTP server (the TLS
/// handshake then fails with an error that does not say so).
fn unreachable_hint(conn: &Connection, message: String, error: Option<&ldp_types::LdpError>) -> Failure {
    let error = error.and_then(|e| serde_json::to_value(e).ok());
    let lower = conn.url.to_ascii_lowercase();
    let plain = if let Some(rest) = lower.strip_prefix("https://") {
        Some(format!("http://{rest}"))
    } else {
        lower.strip_prefix("wss://").map(|rest| format!("ws://{rest}"))
    };
    let tls_failure = ["tls", "handshake", "corrupt message", "invalidcontenttype", "wrong version"]
        .iter()
        .any(|needle| message.to_ascii_lowercase().contains(needle));
    let message = match plain {
        Some(plain) if tls_failure => {
            format!("{message}\nhint: the TLS handshake failed; if the server speaks plain HTTP, use {plain}")
        }
        _ => message,
    };
    Failure::Failed { message, error }
}

/// Whether stderr is a terminal on which colour is wanted (never with `NO_COLOR` set, per no-color.org).
pub fn colour_wanted() -> bool {
    std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()) && std::io::stderr().is_terminal()
}
