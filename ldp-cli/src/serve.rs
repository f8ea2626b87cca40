//! `ldp serve`: a delegate over HTTP and WebSocket (`/ldp/ws`, same port), from flags, `LDP_*` variables and a
//! `--config` file. This module only maps them onto [`ldp::config::ServerConfig`]; the library assembles and runs
//! the server ([`ldp::Server`]).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::ArgMatches;
use clap::parser::ValueSource;
use ldp::config::{ConfigError, Origin, ServerConfig, Setting};

pub use crate::serve_limits::{LimitArgs, ProtocolLimitArgs};

/// Arguments of `ldp serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// A TOML configuration file (docs/config.md lists its keys). Flags override `LDP_*` environment variables,
    /// which override the file, which overrides the defaults.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Print the effective configuration (flags, environment and file merged; secrets left out) as TOML that
    /// --config reads back, and exit.
    #[arg(long)]
    pub print_config: bool,
    /// Print the reference of every configuration key (docs/config.md) as Markdown, and exit.
    #[arg(long, hide = true)]
    pub config_reference: bool,
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:8090")]
    pub bind: String,
    /// The delegate id (ignored with --card) [default: `ldp:delegate:echo`, with --backend `ldp:delegate:llm`].
    #[arg(long, value_name = "ID")]
    pub delegate_id: Option<String>,
    /// The delegate's trust domain [default: `default`, as in the reference SDKs; with --card, the card's].
    #[arg(long, value_name = "NAME")]
    pub trust_domain: Option<String>,
    /// A trust domain whose initiators are accepted too (repeatable; enables cross-domain sessions).
    #[arg(long = "trusted-peer", value_name = "DOMAIN")]
    pub trusted_peers: Vec<String>,
    /// A bearer token and the trust domain it authenticates (repeatable). Once any is given, requests without a
    /// known token are refused (401) and the token's domain is authoritative.
    #[arg(long = "token", value_name = "TOKEN=DOMAIN", value_delimiter = ',')]
    pub tokens: Vec<String>,
    /// Sign replies and require signed requests: hmac-sha256 (reference SDKs), hmac-sha256-jcs or ed25519-jcs.
    #[arg(long, value_name = "ALG", value_parser = ["hmac-sha256", "hmac-sha256-jcs", "ed25519-jcs"])]
    pub sign: Option<String>,
    /// The shared secret (hmac-*) or the 64-hex-digit Ed25519 seed (ed25519-jcs).
    #[arg(long, value_name = "S")]
    pub secret: Option<String>,
    /// The delegate's Ed25519 identity key (64 hex digits of seed): every result's provenance then carries a usage
    /// receipt signed with it, and the card publishes its public half as `receipt_public_key` (docs/receipts.md).
    #[arg(long, value_name = "SEED_HEX")]
    pub receipt_key: Option<String>,
    /// A signed quality attestation about this delegate (a JSON file from `ldp attest issue`; repeatable),
    /// published on the card for routers to verify.
    #[arg(long = "attestation", value_name = "FILE")]
    pub attestations: Vec<PathBuf>,
    /// Longest session TTL granted, in seconds (proposals asking for more get this).
    #[arg(long, value_name = "SECS", default_value_t = 3600)]
    pub ttl: u64,
    /// On SIGTERM or SIGINT, how long running tasks may go on before they are answered TASK_FAILED CANCELLED
    /// (retryable), in seconds; new sessions and tasks are refused from the signal on.
    #[arg(long, value_name = "SECS", default_value_t = 30)]
    pub shutdown_grace: u64,
    /// Largest request body accepted, in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = 1024 * 1024)]
    pub max_body: usize,
    /// Longest time one request may take, in seconds [default: 60; with --backend, long enough for the model's
    /// every attempt: --llm-timeout × (--llm-retries + 1) + 10].
    #[arg(long, value_name = "SECS")]
    pub timeout: Option<u64>,
    /// Serve this identity card (JSON) instead of the echo card; its capabilities are the accepted skills, all
    /// answered by echoing.
    #[arg(long, value_name = "FILE")]
    pub card: Option<PathBuf>,
    /// Shared state for replicas and restarts.
    #[command(flatten, next_help_heading = "State store (sessions, replay window, tasks; issue 17)")]
    pub store: StoreArgs,
    /// Limits on protocol state.
    #[command(
        flatten,
        next_help_heading = "Protocol limits (a peer is its bearer token or certificate, else its `from`)"
    )]
    pub protocol_limits: ProtocolLimitArgs,
    /// JWT access tokens and OAuth.
    #[command(flatten, next_help_heading = "JWT and OAuth (identity provider tokens; docs/oauth.md)")]
    pub oauth: crate::serve_flags::OauthArgs,
    /// HTTPS and mutual TLS.
    #[cfg(feature = "tls")]
    #[command(flatten, next_help_heading = "TLS (RFC 8.3)")]
    pub tls: TlsArgs,
    /// Connection limits, timeouts and rate limiting.
    #[command(flatten, next_help_heading = "Connections and limits")]
    pub limits: LimitArgs,
    /// A language model behind the delegate.
    #[command(
        flatten,
        next_help_heading = "LLM backend (the task input is the user message, the output the model's text)"
    )]
    pub llm: crate::serve_flags::LlmArgs,
    /// The MCP bridge.
    #[command(flatten, next_help_heading = "MCP (the delegate's skills as MCP tools, Streamable HTTP at /mcp)")]
    pub mcp: crate::serve_flags::McpArgs,
    /// The A2A bridge.
    #[command(flatten, next_help_heading = "A2A (the delegate as an A2A agent: Agent Card, JSON-RPC at /a2a)")]
    pub a2a: crate::serve_flags::A2aArgs,
}

/// Parses `--store` (or `LDP_STORE`) into a [`ldp_store::StoreSpec`], reporting a refused value only as the store's
/// error shows it, password redacted: clap's own report of an invalid value repeats the value whole.
#[derive(Debug, Clone, Copy)]
struct StoreSpecParser;

impl clap::builder::TypedValueParser for StoreSpecParser {
    type Value = ldp_store::StoreSpec;

    fn parse_ref(
        &self,
        _cmd: &clap::Command,
        _arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<Self::Value, clap::Error> {
        let refuse =
            |why: String| clap::Error::raw(clap::error::ErrorKind::ValueValidation, format!("--store: {why}\n"));
        let text = value.to_str().ok_or_else(|| refuse("the value is not UTF-8".to_owned()))?;
        text.parse().map_err(|e: ldp_store::OpenError| refuse(e.to_string()))
    }
}

/// Where `ldp serve` keeps the protocol state that must outlive the process or be shared by replicas.
#[derive(Debug, clap::Args)]
pub struct StoreArgs {
    /// `memory` (this process only, the default), `sqlite:PATH` (an embedded database file that survives restarts
    /// and kill -9; a bare PATH means the same), or `redis://[USER:PASSWORD@]HOST:PORT[/DB]` (replicas of this
    /// delegate behind a load balancer share sessions, the replay window, task claims and results; `rediss://` for
    /// TLS, `redis+unix:///PATH` for a socket, `redis+cluster://HOST:PORT[,HOST:PORT...]` for a Redis Cluster,
    /// `redis+sentinel://HOST:PORT[,HOST:PORT...]/SERVICE[/DB][?sentinel_password=...]` for the primary Redis
    /// Sentinels name; `rediss+cluster://` and `rediss+sentinel://` over TLS).
    /// Replicas must be configured alike. A wrong password or database, or a TLS certificate that does not verify,
    /// stops the start; a Redis that is down does not (messages are refused STORE_UNAVAILABLE, retryable, until it
    /// is up). From LDP_STORE when not given, which keeps a password out of the process list.
    #[arg(long, value_name = "STORE", default_value = "memory", value_parser = StoreSpecParser)]
    pub store: ldp_store::StoreSpec,
    /// Longest a store call may take, in milliseconds; beyond it (or when the store is down) the message is refused
    /// STORE_UNAVAILABLE (retryable), never left hanging.
    #[arg(long, value_name = "MS", default_value_t = 2000)]
    pub store_timeout: u64,
    /// How long a running task's claim holds without renewal, in seconds (renewed every third of it). A task whose
    /// replica died is then failed TASK_LEASE_EXPIRED (retryable) for status queries on any replica.
    #[arg(long, value_name = "SECS", default_value_t = 30)]
    pub task_lease: u64,
    /// How long ended tasks' results (for status queries from any replica) and closed sessions' markers are kept in
    /// the store, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 3600)]
    pub result_ttl: u64,
    /// Longest task output kept in the store for status queries, in bytes; a longer one is still answered to its
    /// submitter, and other replicas (or this one after a restart) answer status queries for it TASK_FAILED
    /// RESULT_NOT_KEPT.
    #[arg(long, value_name = "BYTES", default_value_t = 1 << 20)]
    pub result_max_bytes: usize,
    /// How durable an SQLite commit is before the peer is answered: `process` (synchronous=NORMAL: survives the
    /// process dying, kill -9 included; an OS crash or power cut may lose the last commits) or `full`
    /// (synchronous=FULL: an fsync per commit batch; also survives power loss).
    #[arg(long, value_name = "MODE", default_value = "process")]
    pub sqlite_durability: ldp_store::Durability,
    /// SQLite: the WAL's size in 4 KiB pages beyond which the writer checkpoints (a background thread copies the WAL
    /// into the database file all along); the WAL file is truncated back to it when it starts over.
    #[arg(long, value_name = "PAGES", default_value_t = 32_768)]
    pub sqlite_wal_pages: u32,
    /// SQLite: the bytes of the database file read through a memory map, with a small page cache beside it; 0 reads
    /// with pread and a 64 MiB page cache (for storage whose read errors must not be a SIGBUS, such as NFS).
    #[arg(long, value_name = "BYTES", default_value_t = 1 << 30)]
    pub sqlite_mmap_bytes: u64,
    /// SQLite: the most bytes the database file may hold (at least 1 MiB). Past seven eighths of it, the oldest ended tasks' results
    /// are dropped before --result-ttl (never a running task's); at the bound, writes are refused STORE_UNAVAILABLE
    /// (retryable), as on a full disk. The WAL is bounded on its own (--sqlite-wal-pages).
    #[arg(long, value_name = "BYTES", default_value_t = 4 << 30)]
    pub sqlite_max_bytes: u64,
    /// Redis over TLS (`--store rediss://...`, `rediss+cluster://...`, `rediss+sentinel://...`): trust the CA
    /// certificates in this PEM file instead of the system's roots (for sentinels and primary alike).
    #[arg(long, value_name = "FILE")]
    pub redis_ca: Option<std::path::PathBuf>,
    /// Redis over TLS: present this client certificate chain (PEM) to a server that asks for one
    /// (`tls-auth-clients`).
    #[arg(long, value_name = "FILE")]
    pub redis_cert: Option<std::path::PathBuf>,
    /// Redis over TLS: the private key (PEM) of --redis-cert.
    #[arg(long, value_name = "FILE")]
    pub redis_key: Option<std::path::PathBuf>,
}

/// The TLS flags of `ldp serve`.
#[cfg(feature = "tls")]
#[derive(Debug, clap::Args)]
pub struct TlsArgs {
    /// Serve HTTPS (and wss:// for /ldp/ws) with this certificate chain: PEM, server certificate first.
    #[arg(long, value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert: PEM (PKCS#8, PKCS#1 or SEC1).
    #[arg(long, value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
    /// Mutual TLS: client certificates must chain to a CA in this PEM bundle and match a --client-cert-peer, or
    /// the handshake is refused (see --client-cert-optional).
    #[arg(long, value_name = "FILE")]
    pub client_ca: Option<PathBuf>,
    /// A client certificate and the peer it authenticates (repeatable). CERT is `sha256:<hex>`, the certificate's
    /// SHA-256 fingerprint (colons allowed, as `openssl x509 -noout -fingerprint -sha256` prints it), or
    /// `dns:<name>`, any --client-ca certificate whose subjectAltName covers that DNS name. As with --token, the
    /// domain is authoritative; a DELEGATE_ID, if given, must be the sender of every message.
    #[arg(long = "client-cert-peer", value_name = "CERT=[DELEGATE_ID@]DOMAIN")]
    pub client_cert_peers: Vec<String>,
    /// With --client-ca: also accept clients without a matching certificate; they then need a --token if any is
    /// set, and are anonymous otherwise.
    #[arg(long)]
    pub client_cert_optional: bool,
}

/// How a flag's number is written as a key's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unit {
    /// As given.
    Same,
    /// Seconds, a duration.
    Secs,
    /// Milliseconds, a duration.
    Millis,
    /// A switch that turns its key off (`--a2a-no-push` sets `a2a.push = false`).
    Not,
}

/// Every flag of `ldp serve` (by clap id) and the configuration key it sets: the whole of the mapping.
pub(crate) const FLAGS: &[(&str, &str, Unit)] = &[
    ("bind", "bind", Unit::Same),
    ("delegate_id", "identity.delegate_id", Unit::Same),
    ("trust_domain", "identity.trust_domain", Unit::Same),
    ("trusted_peers", "identity.trusted_peers", Unit::Same),
    ("card", "identity.card", Unit::Same),
    ("receipt_key", "identity.receipt_key", Unit::Same),
    ("attestations", "identity.attestations", Unit::Same),
    ("tokens", "auth.tokens", Unit::Same),
    ("jwt_issuer", "jwt.issuer", Unit::Same),
    ("jwt_jwks_url", "jwt.jwks_url", Unit::Same),
    ("jwt_audiences", "jwt.audiences", Unit::Same),
    ("jwt_algorithms", "jwt.algorithms", Unit::Same),
    ("jwt_leeway", "jwt.leeway", Unit::Secs),
    ("jwt_principal_claim", "jwt.principal_claim", Unit::Same),
    ("jwt_trust_domain", "jwt.trust_domain", Unit::Same),
    ("jwt_trust_domain_claim", "jwt.trust_domain_claim", Unit::Same),
    ("jwt_delegate_id_claim", "jwt.delegate_id_claim", Unit::Same),
    ("jwt_required_scopes", "jwt.required_scopes", Unit::Same),
    ("oauth_resource", "oauth.resource", Unit::Same),
    ("oauth_authorization_servers", "oauth.authorization_servers", Unit::Same),
    ("skill_scopes", "oauth.skill_scopes", Unit::Same),
    ("endpoint_scopes", "oauth.endpoint_scopes", Unit::Same),
    ("sign", "signing.algorithm", Unit::Same),
    ("secret", "signing.secret", Unit::Same),
    ("replay_entries_per_peer", "signing.replay_entries_per_peer", Unit::Same),
    ("replay_entries", "signing.replay_entries", Unit::Same),
    ("ttl", "sessions.max_ttl", Unit::Secs),
    ("max_sessions", "sessions.max_sessions", Unit::Same),
    ("max_sessions_per_peer", "sessions.max_sessions_per_peer", Unit::Same),
    ("max_id_len", "sessions.max_id_len", Unit::Same),
    ("shutdown_grace", "shutdown_grace", Unit::Secs),
    ("max_body", "max_body", Unit::Same),
    ("timeout", "request_timeout", Unit::Secs),
    ("store", "store.url", Unit::Same),
    ("store_timeout", "store.timeout", Unit::Millis),
    ("task_lease", "store.task_lease", Unit::Secs),
    ("result_ttl", "store.result_ttl", Unit::Secs),
    ("result_max_bytes", "store.result_max_bytes", Unit::Same),
    ("sqlite_durability", "store.sqlite_durability", Unit::Same),
    ("sqlite_wal_pages", "store.sqlite_wal_pages", Unit::Same),
    ("sqlite_mmap_bytes", "store.sqlite_mmap_bytes", Unit::Same),
    ("sqlite_max_bytes", "store.sqlite_max_bytes", Unit::Same),
    ("redis_ca", "store.redis_ca", Unit::Same),
    ("redis_cert", "store.redis_cert", Unit::Same),
    ("redis_key", "store.redis_key", Unit::Same),
    ("tls_cert", "tls.cert", Unit::Same),
    ("tls_key", "tls.key", Unit::Same),
    ("client_ca", "tls.client_ca", Unit::Same),
    ("client_cert_peers", "tls.client_cert_peers", Unit::Same),
    ("client_cert_optional", "tls.client_cert_optional", Unit::Same),
    ("max_connections", "connections.max_connections", Unit::Same),
    ("header_timeout", "connections.header_timeout", Unit::Secs),
    ("idle_timeout", "connections.idle_timeout", Unit::Secs),
    ("body_timeout", "connections.body_timeout", Unit::Secs),
    ("min_head_rate", "connections.min_head_rate", Unit::Same),
    ("min_body_rate", "connections.min_body_rate", Unit::Same),
    ("min_rate_window", "connections.min_rate_window", Unit::Secs),
    ("rate_limit", "connections.rate_limit", Unit::Same),
    ("trusted_proxies", "connections.trusted_proxies", Unit::Same),
    ("ws_idle_timeout", "websocket.idle_timeout", Unit::Secs),
    ("ws_write_timeout", "websocket.write_timeout", Unit::Secs),
    ("ws_max_outbound", "websocket.max_outbound", Unit::Same),
    ("ws_max_in_flight", "websocket.max_in_flight", Unit::Same),
    ("ws_max_inbound_rate", "websocket.max_inbound_rate", Unit::Same),
    ("allow_origins", "websocket.allow_origins", Unit::Same),
    ("held_results_per_session", "held.results_per_session", Unit::Same),
    ("held_bytes_per_session", "held.bytes_per_session", Unit::Same),
    ("held_results_total", "held.results_total", Unit::Same),
    ("held_bytes_total", "held.bytes_total", Unit::Same),
    ("backend", "backend.kind", Unit::Same),
    ("base_url", "backend.base_url", Unit::Same),
    ("model", "backend.model", Unit::Same),
    ("api_key_env", "backend.api_key_env", Unit::Same),
    ("system_prompt", "backend.system_prompt", Unit::Same),
    ("skills", "backend.skills", Unit::Same),
    ("context_window", "backend.context_window", Unit::Same),
    ("max_tokens", "backend.max_tokens", Unit::Same),
    ("no_stream", "backend.no_stream", Unit::Same),
    ("prices", "backend.prices", Unit::Same),
    ("llm_timeout", "backend.timeout", Unit::Secs),
    ("llm_retries", "backend.retries", Unit::Same),
    ("temperature", "backend.temperature", Unit::Same),
    ("top_p", "backend.top_p", Unit::Same),
    ("seed", "backend.seed", Unit::Same),
    ("repeat_penalty", "backend.repeat_penalty", Unit::Same),
    ("max_concurrent", "backend.max_concurrent", Unit::Same),
    ("engine", "backend.engine", Unit::Same),
    ("threads", "backend.threads", Unit::Same),
    ("precision", "backend.precision", Unit::Same),
    ("mcp_command", "backend.mcp_command", Unit::Same),
    ("mcp_url", "backend.mcp_url", Unit::Same),
    ("mcp_token", "backend.mcp_token", Unit::Same),
    ("a2a_url", "backend.a2a_url", Unit::Same),
    ("a2a_token", "backend.a2a_token", Unit::Same),
    ("delegates", "backend.delegates", Unit::Same),
    ("tool_rounds", "backend.tool_rounds", Unit::Same),
    ("delegate_issuers", "backend.delegates_issuers", Unit::Same),
    ("delegate_token_command", "backend.delegates_token_command", Unit::Same),
    ("delegate_oauth_token_url", "backend.delegates_oauth_token_url", Unit::Same),
    ("delegate_oauth_client_id", "backend.delegates_oauth_client_id", Unit::Same),
    ("delegate_oauth_client_secret_env", "backend.delegates_oauth_client_secret_env", Unit::Same),
    ("delegate_oauth_scopes", "backend.delegates_oauth_scopes", Unit::Same),
    ("delegate_oauth_audience", "backend.delegates_oauth_audience", Unit::Same),
    ("mcp", "mcp.enabled", Unit::Same),
    ("mcp_max_sessions", "mcp.max_sessions", Unit::Same),
    ("mcp_max_calls", "mcp.max_calls", Unit::Same),
    ("mcp_max_calls_per_session", "mcp.max_calls_per_session", Unit::Same),
    ("mcp_session_idle", "mcp.session_idle", Unit::Secs),
    ("mcp_allowed_hosts", "mcp.allowed_hosts", Unit::Same),
    ("a2a", "a2a.enabled", Unit::Same),
    ("a2a_max_contexts", "a2a.max_contexts", Unit::Same),
    ("a2a_max_tasks", "a2a.max_tasks", Unit::Same),
    ("a2a_max_running", "a2a.max_running", Unit::Same),
    ("a2a_context_idle", "a2a.context_idle", Unit::Secs),
    ("a2a_task_ttl", "a2a.task_ttl", Unit::Secs),
    ("a2a_max_body", "a2a.max_body", Unit::Same),
    ("a2a_no_push", "a2a.push", Unit::Not),
    ("a2a_push_allow_private", "a2a.push_allow_private", Unit::Same),
    ("a2a_push_allowed_hosts", "a2a.push_allowed_hosts", Unit::Same),
    ("a2a_push_attempts", "a2a.push_attempts", Unit::Same),
    ("a2a_push_timeout", "a2a.push_timeout", Unit::Millis),
    // The global flag of every command; its variable is read by the configuration's own layer.
    ("otlp_endpoint", "telemetry.otlp_endpoint", Unit::Same),
];

/// The flags given on the command line, onto `config` (a flag's default is not applied: the file's or the
/// variable's value stands unless the flag is given).
fn apply_flags(matches: &ArgMatches, config: &mut ServerConfig) -> Result<(), ConfigError> {
    for &(id, key, unit) in FLAGS {
        if matches.value_source(id) != Some(ValueSource::CommandLine) {
            continue;
        }
        let values: Vec<String> =
            matches.get_raw(id).map(|raw| raw.map(|v| v.to_string_lossy().into_owned()).collect()).unwrap_or_default();
        // A switch (`--mcp`) carries no value of its own.
        let values = if values.is_empty() { vec!["true".to_owned()] } else { values };
        let values = values
            .into_iter()
            .map(|v| match unit {
                Unit::Same => v,
                Unit::Secs => format!("{v}s"),
                Unit::Millis => format!("{v}ms"),
                Unit::Not => {
                    if v == "true" {
                        "false".to_owned()
                    } else {
                        "true".to_owned()
                    }
                }
            })
            .collect();
        config.set(key, Setting::Many(values), Origin::Flag(flag_name(id)))?;
    }
    Ok(())
}

/// `message` with each configuration key it names followed by its flag: `backend.model (--model)`.
fn with_flags(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut word = String::new();
    let is_key_char = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '.';
    let flush = |word: &mut String, out: &mut String| {
        out.push_str(word);
        if let Some((id, _, _)) = FLAGS.iter().find(|(_, key, _)| *key == word.trim_end_matches('.')) {
            out.push_str(&format!(" (--{})", flag_name(id)));
        }
        word.clear();
    };
    for c in message.chars() {
        if is_key_char(c) {
            word.push(c);
        } else {
            flush(&mut word, &mut out);
            out.push(c);
        }
    }
    flush(&mut word, &mut out);
    out
}

/// The long name of a flag, from its clap id (they differ for the repeatable ones).
fn flag_name(id: &str) -> String {
    match id {
        "tokens" => "token".to_owned(),
        "trusted_peers" => "trusted-peer".to_owned(),
        "client_cert_peers" => "client-cert-peer".to_owned(),
        "trusted_proxies" => "trusted-proxy".to_owned(),
        "allow_origins" => "allow-origin".to_owned(),
        "skills" => "skill".to_owned(),
        "delegates" => "delegate".to_owned(),
        "attestations" => "attestation".to_owned(),
        "delegate_issuers" => "delegate-issuer".to_owned(),
        "mcp_allowed_hosts" => "mcp-allowed-host".to_owned(),
        "a2a_push_allowed_hosts" => "a2a-push-allowed-host".to_owned(),
        "jwt_audiences" => "jwt-audience".to_owned(),
        "jwt_algorithms" => "jwt-algorithm".to_owned(),
        "jwt_required_scopes" => "jwt-required-scope".to_owned(),
        "oauth_authorization_servers" => "oauth-authorization-server".to_owned(),
        "skill_scopes" => "skill-scope".to_owned(),
        "endpoint_scopes" => "endpoint-scope".to_owned(),
        "delegate_oauth_scopes" => "delegate-oauth-scope".to_owned(),
        other => other.replace('_', "-"),
    }
}

/// The effective configuration: the file, then `LDP_*` variables, then the flags, checked whole.
pub(crate) fn resolve(args: &ServeArgs, matches: &ArgMatches) -> Result<ServerConfig, ConfigError> {
    let mut config = match &args.config {
        Some(path) => ServerConfig::from_toml_file(path)?,
        None => ServerConfig::default(),
    };
    config.apply_env(std::env::vars())?;
    apply_flags(matches, &mut config)?;
    config.validate()?;
    Ok(config)
}

/// Runs `ldp serve` until SIGINT or SIGTERM. Exits 2, having started nothing, when the configuration is bad.
pub fn run(args: &ServeArgs, matches: &ArgMatches, log_format: crate::LogFormat) -> ExitCode {
    if args.config_reference {
        print!("{}", ldp::config::reference_markdown());
        return ExitCode::SUCCESS;
    }
    let config = match resolve(args, matches) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("ldp serve: {}", with_flags(&e.to_string()));
            return ExitCode::from(crate::exit::USAGE);
        }
    };
    if args.print_config {
        print!("{}", config.to_toml_redacted());
        return ExitCode::SUCCESS;
    }
    let export = match crate::init_logging(log_format, &config.telemetry) {
        Ok(export) => export,
        Err(message) => {
            eprintln!("ldp serve: {message}");
            return ExitCode::from(crate::exit::USAGE);
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("ldp serve: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let status = match rt.block_on(serve(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ldp serve: {}", with_flags(&e.to_string()));
            ExitCode::from(crate::exit::USAGE)
        }
    };
    if let Some(export) = export
        && let Err(e) = export.shutdown()
    {
        eprintln!("ldp serve: exporting spans: {e}");
    }
    status
}

async fn serve(config: ServerConfig) -> Result<(), ldp::Error> {
    let grace = config.shutdown_grace;
    let server = ldp::Server::start(config).await?;
    let signal = ldp::shutdown_signal()?;
    {
        use std::io::Write as _;
        let mut out = std::io::stdout().lock();
        for line in server.banner() {
            let _ = writeln!(out, "ldp serve: {line}");
        }
        let _ = out.flush();
    }
    signal.await;
    eprintln!("ldp serve: shutting down: new sessions refused, running tasks have {grace:?} to finish");
    server.shutdown().await?;
    eprintln!("ldp serve: stopped");
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, FromArgMatches, Parser};

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        serve: ServeArgs,
        /// Stands for the global flag of the `ldp` binary.
        #[arg(long)]
        otlp_endpoint: Option<String>,
    }

    /// The flags that act on the command itself rather than set a key.
    const OWN: [&str; 3] = ["config", "print_config", "config_reference"];

    fn resolved(argv: &[&str]) -> Result<ServerConfig, ConfigError> {
        let matches = Cli::command().try_get_matches_from(argv).expect("the flags parse");
        let cli = Cli::from_arg_matches(&matches).expect("the flags parse");
        let mut config = ServerConfig::default();
        apply_flags(&matches, &mut config)?;
        let _ = cli.serve;
        Ok(config)
    }

    #[test]
    fn every_flag_sets_a_key_and_every_mapped_key_exists() {
        let keys: Vec<String> = ldp::config::keys().into_iter().map(|k| k.key).collect();
        let command = Cli::command();
        for arg in command.get_arguments() {
            let id = arg.get_id().as_str();
            if OWN.contains(&id) || id == "help" {
                continue;
            }
            let mapped = FLAGS.iter().find(|(flag, _, _)| *flag == id);
            let (_, key, _) = mapped.unwrap_or_else(|| panic!("--{} sets no configuration key", flag_name(id)));
            assert!(keys.iter().any(|k| k == key), "--{id} maps onto {key}, which is no key");
            if let Some(long) = arg.get_long() {
                assert_eq!(long, flag_name(id), "the flag of {id}");
            }
        }
        for (id, _, _) in FLAGS {
            assert!(command.get_arguments().any(|a| a.get_id() == *id), "FLAGS names {id}, which is no flag");
        }
    }

    /// `--help` shows each flag's default; the configuration must have the same one.
    #[test]
    fn every_flag_default_is_the_configuration_default() {
        let command = Cli::command();
        let mut argv = vec!["serve".to_owned()];
        for arg in command.get_arguments() {
            let Some(default) = arg.get_default_values().first() else { continue };
            if matches!(arg.get_action(), clap::ArgAction::SetTrue) {
                continue;
            }
            argv.push(format!("--{}={}", arg.get_long().unwrap_or_default(), default.to_string_lossy()));
        }
        assert!(argv.len() > 40, "{argv:?}");
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        assert_eq!(resolved(&argv).expect("the defaults are valid"), ServerConfig::default(), "{argv:?}");
    }

    #[test]
    fn flags_set_their_keys_in_the_keys_units() {
        let config = resolved(&[
            "serve",
            "--ttl",
            "90",
            "--store-timeout",
            "250",
            "--token",
            "a=one,b=two",
            "--token",
            "c=three",
            "--mcp",
            "--no-stream",
            "--max-sessions-per-peer",
            "3",
            "--ws-max-outbound",
            "1024",
        ])
        .unwrap();
        assert_eq!(config.sessions.max_ttl, std::time::Duration::from_secs(90));
        assert_eq!(config.store.timeout, std::time::Duration::from_millis(250));
        assert_eq!(config.auth.tokens, ["a=one", "b=two", "c=three"]);
        assert!(config.mcp.enabled && config.backend.no_stream);
        assert_eq!(config.sessions.max_sessions_per_peer, 3);
        assert_eq!(config.websocket.max_outbound, 1024);
    }

    #[test]
    fn errors_name_the_flags_of_the_keys_they_name() {
        assert_eq!(
            with_flags("backend.kind needs backend.model"),
            "backend.kind (--backend) needs backend.model (--model)"
        );
        assert_eq!(with_flags("auth.tokens: entry 1"), "auth.tokens (--token): entry 1");
        assert_eq!(with_flags("no key here."), "no key here.");
    }
}
