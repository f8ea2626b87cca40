//! `ldp serve`: an echo delegate over HTTP and WebSocket (`/ldp/ws`, same port), configured from flags, so anyone can stand one up without code.
//! With the `tls` feature (default), `--tls-cert`/`--tls-key` serve HTTPS and `--client-ca` adds mutual TLS.

use std::collections::HashMap;
use std::future::Future;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use ldp_session::runtime::{DelegateRuntime, EchoDelegate};
use ldp_session::{
    AuthenticatedPeer, ReplayConfig, Responder, ResponderConfig, SecurityConfig, SeededIds, SystemClock, TrustPolicy,
};
use ldp_transport_http::{HttpServerConfig, HttpState};
use ldp_transport_ws::WsServer;
use ldp_types::signing::{SignatureAlgorithm, SigningKey};
use ldp_types::{Capability, ClaimType, DelegateId, IdentityCard, PayloadMode, Score, TrustDomain};

use crate::serve_bridges::Bridged;
pub use crate::serve_limits::{LimitArgs, ProtocolLimitArgs};

/// Arguments of `ldp serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
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
    #[arg(
        long = "token",
        value_name = "TOKEN=DOMAIN",
        env = "LDP_TOKENS",
        hide_env_values = true,
        value_delimiter = ','
    )]
    pub tokens: Vec<String>,
    /// Sign replies and require signed requests: hmac-sha256 (reference SDKs), hmac-sha256-jcs or ed25519-jcs.
    #[arg(long, value_name = "ALG", requires = "secret", value_parser = ["hmac-sha256", "hmac-sha256-jcs", "ed25519-jcs"])]
    pub sign: Option<String>,
    /// The shared secret (hmac-*) or the 64-hex-digit Ed25519 seed (ed25519-jcs).
    #[arg(long, value_name = "S", requires = "sign", env = "LDP_SECRET", hide_env_values = true)]
    pub secret: Option<String>,
    /// The delegate's Ed25519 identity key (64 hex digits of seed): every result's provenance then carries a usage
    /// receipt signed with it, and the card publishes its public half as `receipt_public_key` (docs/receipts.md).
    #[arg(long, value_name = "SEED_HEX", env = "LDP_RECEIPT_KEY", hide_env_values = true)]
    pub receipt_key: Option<String>,
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
    pub llm: crate::llm::LlmArgs,
    /// The MCP bridge.
    #[command(flatten, next_help_heading = "MCP (the delegate's skills as MCP tools, Streamable HTTP at /mcp)")]
    pub mcp: crate::serve_bridges::McpArgs,
    /// The A2A bridge.
    #[command(flatten, next_help_heading = "A2A (the delegate as an A2A agent: Agent Card, JSON-RPC at /a2a)")]
    pub a2a: crate::serve_bridges::A2aArgs,
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
    #[arg(
        long,
        value_name = "STORE",
        default_value = "memory",
        env = "LDP_STORE",
        hide_env_values = true,
        value_parser = StoreSpecParser
    )]
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
    #[arg(long, value_name = "FILE", requires = "redis_key")]
    pub redis_cert: Option<std::path::PathBuf>,
    /// Redis over TLS: the private key (PEM) of --redis-cert.
    #[arg(long, value_name = "FILE", requires = "redis_cert")]
    pub redis_key: Option<std::path::PathBuf>,
}

impl StoreArgs {
    /// The TLS files of a `rediss://` (`rediss+cluster://`, `rediss+sentinel://`) store, read; `None` when no
    /// --redis-* file is given.
    fn redis_tls(&self) -> Result<Option<ldp_store::RedisTls>, String> {
        if self.redis_ca.is_none() && self.redis_cert.is_none() {
            return Ok(None);
        }
        let read = |flag: &str, path: &std::path::Path| {
            std::fs::read(path).map_err(|e| format!("--{flag} {}: {e}", path.display()))
        };
        let mut tls = ldp_store::RedisTls::default();
        if let Some(ca) = &self.redis_ca {
            tls = tls.with_ca(read("redis-ca", ca)?);
        }
        if let (Some(cert), Some(key)) = (&self.redis_cert, &self.redis_key) {
            tls = tls.with_client_cert(read("redis-cert", cert)?, read("redis-key", key)?);
        }
        Ok(Some(tls))
    }

    /// Opens the store and attaches it to `runtime` (nothing for `memory`). Returns the store's name for the banner.
    async fn attach(&self, runtime: &DelegateRuntime, delegate_id: &str) -> Result<String, String> {
        let mut cfg = ldp_store::StoreConfig::new(delegate_id);
        cfg.result_ttl = Duration::from_secs(self.result_ttl.max(1));
        cfg.closed_ttl = cfg.result_ttl;
        cfg.sqlite_durability = self.sqlite_durability;
        cfg.sqlite_wal_pages = self.sqlite_wal_pages.max(1);
        cfg.sqlite_mmap_bytes = self.sqlite_mmap_bytes;
        cfg.sqlite_max_bytes = self.sqlite_max_bytes;
        cfg.redis_tls = self.redis_tls()?;
        let Some(store) = ldp_store::open(&self.store, cfg).await.map_err(|e| format!("--store: {e}"))? else {
            return Ok("memory".to_owned());
        };
        let opts = ldp_session::store::StoreOptions::new(
            Duration::from_millis(self.store_timeout.max(1)),
            Duration::from_secs(self.task_lease.max(1)),
        )
        .with_max_result_bytes(self.result_max_bytes);
        let name = store.backend();
        // The lease renewer runs for the life of the process.
        let _renewer = runtime.attach_store(store, opts);
        Ok(name.to_owned())
    }
}

/// The TLS flags of `ldp serve`.
#[cfg(feature = "tls")]
#[derive(Debug, clap::Args)]
pub struct TlsArgs {
    /// Serve HTTPS (and wss:// for /ldp/ws) with this certificate chain: PEM, server certificate first.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert: PEM (PKCS#8, PKCS#1 or SEC1).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Mutual TLS: client certificates must chain to a CA in this PEM bundle and match a --client-cert-peer, or
    /// the handshake is refused (see --client-cert-optional).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub client_ca: Option<PathBuf>,
    /// A client certificate and the peer it authenticates (repeatable). CERT is `sha256:<hex>`, the certificate's
    /// SHA-256 fingerprint (colons allowed, as `openssl x509 -noout -fingerprint -sha256` prints it), or
    /// `dns:<name>`, any --client-ca certificate whose subjectAltName covers that DNS name. As with --token, the
    /// domain is authoritative; a DELEGATE_ID, if given, must be the sender of every message.
    #[arg(long = "client-cert-peer", value_name = "CERT=[DELEGATE_ID@]DOMAIN", requires = "client_ca")]
    pub client_cert_peers: Vec<String>,
    /// With --client-ca: also accept clients without a matching certificate; they then need a --token if any is
    /// set, and are anonymous otherwise.
    #[arg(long, requires = "client_ca")]
    pub client_cert_optional: bool,
}

/// The echo delegate's card: skill `echo`, semantic frames and text. The reference clients send raw input even
/// after negotiating `semantic_frame`; the responder's transparent fallback runs such tasks in text.
pub fn echo_card(delegate_id: &str, domain: &str) -> Result<IdentityCard, String> {
    let id = DelegateId::new(delegate_id).map_err(|e| e.to_string())?;
    let mut card = IdentityCard::new(id, "Echo", "echo", "1.0");
    card.description = Some("Answers every task with {\"echo\": <input>}".into());
    card.context_window = 4096;
    // An echo is exact and immediate; the claim says so, and says it is only the delegate's own word.
    let exact = Score::new(1.0).map_err(|e| e.to_string())?;
    let echo = Capability::new("echo")
        .with_description("Echoes its input")
        .with_quality(exact, ClaimType::SelfClaimed)
        .with_latency_p50_ms(1);
    card.capabilities.push(echo);
    card.trust_domain = TrustDomain::new(domain);
    card.supported_payload_modes = vec![PayloadMode::SemanticFrame, PayloadMode::Text];
    Ok(card)
}

fn parse_tokens(tokens: &[String]) -> Result<HashMap<String, AuthenticatedPeer>, String> {
    tokens
        .iter()
        .map(|t| match t.split_once('=') {
            Some((token, domain)) if !token.is_empty() && !domain.is_empty() => {
                Ok((token.to_owned(), AuthenticatedPeer { delegate_id: None, trust_domain: domain.to_owned() }))
            }
            _ => Err(format!("--token {t:?}: expected TOKEN=DOMAIN")),
        })
        .collect()
}

fn security(sign: Option<&str>, secret: Option<&str>) -> Result<(SecurityConfig, bool), String> {
    let (Some(alg), Some(secret)) = (sign, secret) else { return Ok((SecurityConfig::default(), true)) };
    let alg: SignatureAlgorithm = alg.parse().map_err(|e| format!("--sign: {e}"))?;
    match alg {
        SignatureAlgorithm::HmacSha256 | SignatureAlgorithm::HmacSha256Jcs => {
            let key = SigningKey::shared_secret(alg, secret).map_err(|e| format!("--secret: {e}"))?;
            // hmac-sha256 exists to talk to the reference SDKs, whose PyPI version signs without a nonce.
            Ok((SecurityConfig::symmetric(key), alg != SignatureAlgorithm::HmacSha256))
        }
        SignatureAlgorithm::Ed25519Jcs => {
            let key = SigningKey::ed25519_from_hex(secret).map_err(|e| format!("--secret: {e}"))?;
            if let Some(public) = key.verifying_key().public_hex() {
                eprintln!("ldp serve: ed25519 public key {public} (requests are not verified: peers' keys unknown)");
            }
            let cfg =
                SecurityConfig { signing_key: Some(key), replay: Some(ReplayConfig::default()), ..Default::default() };
            Ok((cfg, true))
        }
        other => Err(format!("--sign: {other} is not supported by ldp serve")),
    }
}

/// `CERT=[DELEGATE_ID@]DOMAIN` of --client-cert-peer.
#[cfg(feature = "tls")]
fn parse_cert_peer(arg: &str) -> Result<(ldp_transport_http::ClientCertMatch, AuthenticatedPeer), String> {
    let bad = |why: String| format!("--client-cert-peer {arg:?}: {why}");
    let (cert, peer) = arg.split_once('=').ok_or_else(|| bad("expected CERT=[DELEGATE_ID@]DOMAIN".into()))?;
    let cert = cert.parse().map_err(|e| bad(format!("{e}")))?;
    let (delegate_id, domain) = match peer.rsplit_once('@') {
        Some((id, domain)) => (Some(DelegateId::new(id).map_err(|e| bad(e.to_string()))?.as_str().to_owned()), domain),
        None => (None, peer),
    };
    if domain.is_empty() {
        return Err(bad("the trust domain is empty".into()));
    }
    Ok((cert, AuthenticatedPeer { delegate_id, trust_domain: domain.to_owned() }))
}

/// The TLS configuration of the flags, if --tls-cert is given.
#[cfg(feature = "tls")]
pub(crate) fn tls_config(args: &TlsArgs) -> Result<Option<ldp_transport_http::ServerTlsConfig>, String> {
    let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) else { return Ok(None) };
    let client_auth = match &args.client_ca {
        Some(ca) => {
            let mut auth = ldp_transport_http::ClientAuth::from_ca_file(ca).map_err(|e| format!("--client-ca: {e}"))?;
            for arg in &args.client_cert_peers {
                let (cert, peer) = parse_cert_peer(arg)?;
                auth = auth.peer(cert, peer);
            }
            if args.client_cert_optional {
                auth = auth.optional();
            } else if args.client_cert_peers.is_empty() {
                return Err("--client-ca: give at least one --client-cert-peer (or --client-cert-optional)".into());
            }
            Some(auth)
        }
        None => None,
    };
    let tls = ldp_transport_http::ServerTlsConfig::from_pem_files(cert, key, client_auth)
        .map_err(|e| format!("--tls-cert/--tls-key: {e}"))?;
    Ok(Some(tls))
}

/// Whether some credential authenticates peers (bearer tokens, or client certificates mapped to peers), in which
/// case only authenticated domains count.
fn authenticates(args: &ServeArgs) -> bool {
    #[cfg(feature = "tls")]
    let certs = !args.tls.client_cert_peers.is_empty();
    #[cfg(not(feature = "tls"))]
    let certs = false;
    !args.tokens.is_empty() || certs
}

/// The request timeout in force: a request that waits on a model must not be cut before the model's own timeout
/// (and retries) could answer it, or the peer is told TIMEOUT for a task that then completes unseen.
fn request_timeout(args: &ServeArgs) -> u64 {
    match (args.timeout, args.llm.backend) {
        (Some(secs), _) => secs,
        (None, None | Some(crate::llm::BackendKind::Mcp | crate::llm::BackendKind::A2a)) => 60,
        (None, Some(_)) => args.llm.llm_timeout.saturating_mul(u64::from(args.llm.llm_retries) + 1).saturating_add(10),
    }
}

/// Everything `ldp serve` needs, checked before anything is bound.
pub(crate) fn build(
    args: &ServeArgs,
    delegate: Option<&crate::llm::ServedModel>,
    bridged: Option<&Bridged>,
) -> Result<(ResponderConfig, HttpServerConfig), String> {
    let mut card = match &args.card {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| format!("--card {}: {e}", path.display()))?;
            IdentityCard::from_json(&text).map_err(|e| format!("--card {}: {e}", path.display()))?
        }
        None => {
            let domain = args.trust_domain.as_deref().unwrap_or("default");
            match (delegate, bridged) {
                (Some(served), _) => {
                    let id = args.delegate_id.as_deref().unwrap_or("ldp:delegate:llm");
                    let mut card =
                        served.delegate.card(DelegateId::new(id).map_err(|e| e.to_string())?, served.context_window);
                    card.trust_domain = TrustDomain::new(domain);
                    card
                }
                (None, Some(bridged)) => {
                    let mut card = bridged.card(args.delegate_id.as_deref())?;
                    card.trust_domain = TrustDomain::new(domain);
                    card
                }
                (None, None) => echo_card(args.delegate_id.as_deref().unwrap_or("ldp:delegate:echo"), domain)?,
            }
        }
    };
    if let Some(domain) = &args.trust_domain {
        card.trust_domain.name.clone_from(domain);
    }
    for peer in &args.trusted_peers {
        card.trust_domain = card.trust_domain.clone().trusting(peer.clone());
    }
    let tokens = parse_tokens(&args.tokens)?;
    let (security, hmac_sha256_nonce) = security(args.sign.as_deref(), args.secret.as_deref())?;
    let mut cfg = ResponderConfig::new(card);
    // Without tokens or client certificates a declared domain is taken at its word (reference behaviour, for
    // development); with them only the authenticated domain counts (and unauthenticated requests never reach the
    // session layer, unless --client-cert-optional lets anonymous peers in, whose declarations then do not count).
    cfg.trust =
        if authenticates(args) { TrustPolicy::strict() } else { TrustPolicy::permissive(&cfg.card.trust_domain.name) };
    cfg.security = security;
    cfg.hmac_sha256_nonce = hmac_sha256_nonce;
    cfg.limits.max_ttl = Duration::from_secs(args.ttl.max(1));
    if let Some(seed) = &args.receipt_key {
        let key = SigningKey::ed25519_from_hex(seed).map_err(|e| format!("--receipt-key: {e}"))?;
        cfg.set_receipt_key(key).map_err(|e| format!("--receipt-key: {e}"))?;
    }
    args.protocol_limits.apply(&mut cfg);
    cfg.limits.held = args.limits.held_limits();
    let http = HttpServerConfig {
        max_body: args.max_body,
        request_timeout: Duration::from_secs(request_timeout(args).max(1)),
        tokens,
        limits: args.limits.connection_limits(),
        rate_limit: args.limits.rate_limit,
        trusted_proxies: args.limits.trusted_proxies.clone(),
    };
    Ok((cfg, http))
}

/// Registers the SIGINT and SIGTERM handlers at once and returns a future that resolves on either. Registering before
/// the URL is printed means a signal sent as soon as the URL appears stops the server cleanly instead of killing it.
fn shutdown_signal() -> impl Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{Signal, SignalKind, signal};
        let terminate = signal(SignalKind::terminate()).ok();
        let interrupt = signal(SignalKind::interrupt()).ok();
        let wait = |s: Option<Signal>| async move {
            match s {
                Some(mut s) => {
                    s.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        async move {
            tokio::select! {
                () = wait(terminate) => {}
                () = wait(interrupt) => {}
            }
        }
    }
    #[cfg(not(unix))]
    async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

async fn serve(args: ServeArgs) -> Result<(), String> {
    let timeout = Duration::from_secs(request_timeout(&args).max(1));
    let bridged = Bridged::start(args.llm.backend, &args.mcp, &args.a2a, timeout).await?;
    let llm = args.llm.delegate()?;
    let (mut cfg, http) = build(&args, llm.as_ref(), bridged.as_ref())?;
    #[cfg(feature = "tls")]
    let tls = tls_config(&args.tls)?
        .map(|tls| tls.with_handshake_timeout(Duration::from_secs(args.limits.header_timeout.max(1))));
    #[cfg(not(feature = "tls"))]
    let tls: Option<std::convert::Infallible> = None;
    let listener =
        tokio::net::TcpListener::bind(&args.bind).await.map_err(|e| format!("cannot bind {}: {e}", args.bind))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let (scheme, ws_scheme) = if tls.is_some() { ("https", "wss") } else { ("http", "ws") };
    let url = format!("{scheme}://{addr}");
    if cfg.card.endpoint.is_empty() {
        cfg.card.endpoint.clone_from(&url);
    }
    let summary = format!(
        "{} (trust domain {}, skills: {})",
        cfg.card.delegate_id.as_str(),
        cfg.card.trust_domain.name,
        cfg.card.capabilities.iter().map(|c| c.name.as_str()).collect::<Vec<_>>().join(", ")
    );
    let auth = if http.tokens.is_empty() { "no authentication" } else { "bearer tokens required" }.to_owned();
    #[cfg(feature = "tls")]
    let certs_required = tls
        .as_ref()
        .and_then(ldp_transport_http::ServerTlsConfig::client_auth)
        .is_some_and(|client_auth| client_auth.is_required());
    #[cfg(not(feature = "tls"))]
    let certs_required = false;
    #[cfg(feature = "tls")]
    let auth = match tls.as_ref().and_then(ldp_transport_http::ServerTlsConfig::client_auth) {
        Some(client_auth) if client_auth.is_required() => "client certificates required".to_owned(),
        Some(_) => format!("client certificates optional, otherwise {auth}"),
        None => auth,
    };
    let responder = Responder::new(cfg, Arc::new(SystemClock), Box::new(SeededIds::from_entropy()));
    let delegate: Arc<dyn ldp_session::runtime::Delegate> = match (llm, bridged) {
        (Some(served), _) => {
            let info = served.delegate.backend().info();
            println!("ldp serve: backend {} model {}", info.provider, info.model);
            Arc::new(served.delegate)
        }
        (None, Some(bridged)) => {
            println!("ldp serve: backend {}", bridged.describe());
            bridged.into_delegate()
        }
        (None, None) => Arc::new(EchoDelegate),
    };
    let delegate_id = responder.config().card.delegate_id.as_str().to_owned();
    let runtime = DelegateRuntime::new(responder, delegate);
    let store = args.store.attach(&runtime, &delegate_id).await?;
    // The WebSocket binding on the same port, with the same tokens and message limit.
    let ws_config = args.limits.ws_config(&http);
    let limits = http.limits.clone();
    let ws = WsServer::new(runtime.clone(), ws_config);
    // MCP at /mcp and A2A at /a2a, as extra routes of the LDP app: the same bearer or certificate authentication
    // (the bridges open their LDP sessions as the peer authenticated there), body limit and rate limit. The Agent
    // Card is public, as the LDP identity card is: A2A clients read it to learn how to authenticate.
    let bridge_stop = tokio_util::sync::CancellationToken::new();
    let card = ldp_bridge::a2a::CardOptions {
        base_url: url.clone(),
        bearer: !http.tokens.is_empty(),
        mutual_tls: certs_required,
    };
    let (bridges, public) = crate::serve_bridges::routes(&runtime, &args, &http, card, &bridge_stop);
    let state = HttpState::new(runtime.clone(), http);
    // One /metrics for both bindings.
    ws.report_to(state.metrics());
    // The WebSocket route is an extra route too: its upgrades are authenticated, rate limited and keyed on the
    // client's address (behind `--trusted-proxy`, the client the proxy names) as the other routes are.
    let app = ldp_transport_http::router_with(state, bridges.merge(ws.router())).merge(public);
    let signal = shutdown_signal();
    {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "ldp serve: {summary}, {auth}, store {store}");
        let _ = writeln!(out, "ldp serve: listening on {url} (WebSocket: {ws_scheme}://{addr}/ldp/ws)");
        if args.mcp.mcp {
            let _ = writeln!(out, "ldp serve: MCP (Streamable HTTP) at {url}{}", ldp_bridge::mcp::PATH);
        }
        if args.a2a.a2a {
            let (card, rpc) = (ldp_bridge::a2a::CARD_PATH, ldp_bridge::a2a::RPC_PATH);
            let _ = writeln!(
                out,
                "ldp serve: A2A {} (JSON-RPC) at {url}{rpc}, Agent Card at {url}{card}",
                ldp_bridge::a2a::VERSION
            );
        }
        let _ = out.flush();
    }
    let (draining, grace) = (runtime.clone(), Duration::from_secs(args.shutdown_grace));
    let shutdown = async move {
        signal.await;
        eprintln!("ldp serve: shutting down: new sessions refused, running tasks have {grace:?} to finish");
        draining.drain(grace).await;
        ws.shutdown();
        // Ends the MCP sessions' and A2A tasks' event streams, which would otherwise hold the drain open.
        bridge_stop.cancel();
    };
    let served = match tls {
        #[cfg(feature = "tls")]
        Some(tls) => {
            ldp_transport_http::serve_router_tls_with_limits(listener, runtime, app, tls, limits, shutdown).await
        }
        #[cfg(not(feature = "tls"))]
        Some(never) => match never {},
        None => ldp_transport_http::serve_router_with_limits(listener, runtime, app, limits, shutdown).await,
    };
    served.map_err(|e| e.to_string())?;
    eprintln!("ldp serve: stopped");
    Ok(())
}

/// Runs `ldp serve` until SIGINT or SIGTERM.
pub fn run(args: ServeArgs) -> ExitCode {
    let rt = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("ldp serve: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(serve(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ldp serve: {e}");
            ExitCode::from(2)
        }
    }
}

#[cfg(all(test, feature = "tls"))]
mod tls_tests {
    use super::*;

    #[test]
    fn client_cert_peers_parse() {
        let (cert, peer) = parse_cert_peer("dns:planner.example=ldp:delegate:me@research").unwrap();
        assert_eq!(cert.to_string(), "dns:planner.example");
        assert_eq!(
            peer,
            AuthenticatedPeer { delegate_id: Some("ldp:delegate:me".into()), trust_domain: "research".into() }
        );
        let fp = "AB:".repeat(31) + "AB";
        let (cert, peer) = parse_cert_peer(&format!("sha256:{fp}=partners")).unwrap();
        assert_eq!(cert.to_string(), format!("sha256:{}", "ab".repeat(32)));
        assert_eq!(peer, AuthenticatedPeer { delegate_id: None, trust_domain: "partners".into() });
        for bad in [
            "dns:planner.example",
            "dns:planner.example=",
            "sha256:12=d",
            "cn:x=d",
            "dns:a.example=@d",
            "dns:a.example=x@",
        ] {
            assert!(parse_cert_peer(bad).is_err(), "{bad}");
        }
    }
}

#[cfg(test)]
mod limit_tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        serve: ServeArgs,
    }

    #[test]
    fn a_model_backend_gets_a_request_timeout_its_attempts_fit_in() {
        let http = |argv: &[&str]| build(&Cli::try_parse_from(argv).unwrap().serve, None, None).unwrap().1;
        assert_eq!(http(&["serve"]).request_timeout, Duration::from_secs(60));
        assert_eq!(http(&["serve", "--timeout", "5"]).request_timeout, Duration::from_secs(5));
        // 120 s per attempt, 3 attempts, 10 s of slack.
        assert_eq!(http(&["serve", "--backend", "echo"]).request_timeout, Duration::from_secs(370));
        let tight = http(&["serve", "--backend", "echo", "--llm-timeout", "20", "--llm-retries", "0"]);
        assert_eq!(tight.request_timeout, Duration::from_secs(30));
        assert_eq!(http(&["serve", "--backend", "echo", "--timeout", "9"]).request_timeout, Duration::from_secs(9));
    }

    #[test]
    fn protocol_limit_flags_reach_the_responder() {
        let cfg = |argv: &[&str]| build(&Cli::try_parse_from(argv).unwrap().serve, None, None).unwrap().0;
        let defaults = cfg(&["serve", "--sign", "hmac-sha256-jcs", "--secret", "s"]);
        assert_eq!(defaults.limits.max_sessions, 10_000);
        assert_eq!(defaults.limits.max_sessions_per_principal, 100);
        assert_eq!(defaults.limits.max_identifier_len, 256);
        assert_eq!(defaults.security.replay.unwrap().max_entries_per_principal, 100_000);
        let set = cfg(&[
            "serve",
            "--sign",
            "hmac-sha256-jcs",
            "--secret",
            "s",
            "--max-sessions",
            "7",
            "--max-sessions-per-peer",
            "3",
            "--max-id-len",
            "64",
            "--replay-entries-per-peer",
            "5",
        ]);
        assert_eq!(set.limits.max_sessions, 7);
        assert_eq!(set.limits.max_sessions_per_principal, 3);
        assert_eq!(set.limits.max_identifier_len, 64);
        assert_eq!(set.security.replay.unwrap().max_entries_per_principal, 5);
    }
}
