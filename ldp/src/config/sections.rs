//! The sections of [`ServerConfig`](super::ServerConfig), one TOML table each.

use std::path::PathBuf;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::units::{self, DurationText, SizeText};

/// Who the delegate is.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct IdentityConfig {
    /// The delegate id, `ldp:delegate:<name>`. Default: the builder's id in code; `ldp:delegate:echo`, with an LLM
    /// backend `ldp:delegate:llm`, bridged `ldp:delegate:mcp` or `ldp:delegate:a2a`; ignored with `card`.
    #[serde(deserialize_with = "units::delegate_id")]
    pub delegate_id: Option<String>,
    /// The delegate's trust domain. Default: `default`, as in the reference SDKs (with `card`, the card's).
    pub trust_domain: Option<String>,
    /// Trust domains whose initiators are accepted too (cross-domain sessions). Default none.
    pub trusted_peers: Vec<String>,
    /// Serve this identity card (a JSON file) instead of the generated one; its capabilities are the skills,
    /// answered by echoing. Default none.
    pub card: Option<PathBuf>,
    /// The delegate's Ed25519 identity key (64 hex digits of seed): every result's provenance carries a usage
    /// receipt signed with it, and the card publishes its public half (`docs/receipts.md`). Secret. Default none.
    #[serde(deserialize_with = "units::ed25519_seed")]
    pub receipt_key: Option<String>,
    /// Signed quality attestations about this delegate (JSON files, as `ldp attest issue` prints them), published
    /// on the card (`extra.attestations`) for routers to verify against their issuers' keys. Default none.
    pub attestations: Vec<PathBuf>,
}

/// How peers authenticate.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct AuthConfig {
    /// Bearer tokens, each `TOKEN=DOMAIN`: the token authenticates its holder as a peer of that trust domain. Once
    /// any is set, requests without a known token are refused (401) and the token's domain is authoritative; the
    /// session layer binds sessions and quotas to it. Secret. Default none (no authentication: declared domains are
    /// taken at their word, as the reference SDKs do for development).
    #[serde(deserialize_with = "units::tokens")]
    pub tokens: Vec<String>,
}

/// JWT access tokens from an identity provider (OIDC or OAuth 2.0), accepted beside `auth.tokens`: validated
/// against the issuer's published keys (cached, refetched on a schedule and for an unknown key), `iss`, `aud`, `exp`
/// and `nbf` checked. See `docs/oauth.md`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct JwtSection {
    /// The issuer (`iss`) tokens must name, an `http(s)://` URL; setting it turns JWT validation on. Without
    /// `jwks_url`, the keys are found through `<issuer>/.well-known/openid-configuration`. Default none.
    pub issuer: Option<String>,
    /// Where the issuer publishes its keys (a JWK Set). Default: the discovery document's `jwks_uri`.
    pub jwks_url: Option<String>,
    /// Audiences accepted: a token's `aud` must name one (required with `issuer`). Default none.
    pub audiences: Vec<String>,
    /// Algorithms accepted, among `RS256`, `RS384`, `RS512`, `PS256`, `PS384`, `PS512`, `ES256`, `ES384`, `EdDSA`
    /// (HMAC and `none` never are; a key's type decides which of them it verifies). Default all of them.
    #[serde(deserialize_with = "units::jwt_algorithms")]
    pub algorithms: Vec<String>,
    /// Clock skew allowed on `exp` and `nbf`. Default `60s`.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "DurationText")]
    pub leeway: Duration,
    /// Longest token accepted; a longer one is refused unread. Default `8KiB`.
    #[serde(with = "units::size")]
    #[schemars(with = "SizeText")]
    pub max_token_size: u64,
    /// How often the keys are refetched. Default `10m`.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "DurationText")]
    pub refresh_interval: Duration,
    /// Least time between two refetches caused by tokens naming an unknown key. Default `30s`.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "DurationText")]
    pub min_refetch_interval: Duration,
    /// The claim naming the principal sessions, replay room and rate limits are bound to. Default `sub`.
    pub principal_claim: String,
    /// The trust domain of token holders. Default: `identity.trust_domain` (`default`).
    pub trust_domain: Option<String>,
    /// A claim holding the holder's trust domain instead (then required in every token). Default none.
    pub trust_domain_claim: Option<String>,
    /// A claim holding the holder's delegate id (e.g. `client_id`, `azp`), which must then send every message.
    /// Default none.
    pub delegate_id_claim: Option<String>,
    /// Scopes every token must grant. Default none.
    pub required_scopes: Vec<String>,
}

impl Default for JwtSection {
    fn default() -> Self {
        Self {
            issuer: None,
            jwks_url: None,
            audiences: Vec::new(),
            algorithms: Vec::new(),
            leeway: Duration::from_secs(60),
            max_token_size: 8 * 1024,
            refresh_interval: Duration::from_secs(600),
            min_refetch_interval: Duration::from_secs(30),
            principal_claim: "sub".to_owned(),
            trust_domain: None,
            trust_domain_claim: None,
            delegate_id_claim: None,
            required_scopes: Vec::new(),
        }
    }
}

/// The server as an OAuth 2.0 protected resource (RFC 9728), as MCP hosts expect: its metadata at
/// `/.well-known/oauth-protected-resource`, every 401 pointing at it, scopes per skill and per endpoint, the A2A
/// card's security schemes. Served when `jwt.issuer` is set.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct OauthSection {
    /// The resource identifier: the server's public base URL (tokens' audience should be it). Default: derived
    /// from each request's `Host` header.
    pub resource: Option<String>,
    /// Authorization servers whose tokens the server accepts, as their issuer URLs. Default: just `jwt.issuer`.
    pub authorization_servers: Vec<String>,
    /// The scopes the server publishes. Default: every scope named in `skill_scopes`, `endpoint_scopes` and
    /// `jwt.required_scopes`.
    pub scopes_supported: Vec<String>,
    /// Scopes a skill requires, each `SKILL=SCOPE[ SCOPE...]`: a TASK_SUBMIT for it without them is refused
    /// TRUST_VIOLATION. Static tokens and certificates grant no scope. Default none.
    #[serde(deserialize_with = "units::scope_entries")]
    pub skill_scopes: Vec<String>,
    /// Scopes an endpoint requires, each `PATH=SCOPE[ SCOPE...]` (`/mcp=mcp:tools`): a request to it or below it
    /// without them is refused 403 `insufficient_scope`. Default none.
    #[serde(deserialize_with = "units::scope_entries")]
    pub endpoint_scopes: Vec<String>,
}

/// A signature scheme `ldp serve` signs with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum SigningAlgorithm {
    /// HMAC-SHA256 over the reference SDKs' canonical string, without a nonce (what the reference SDKs speak).
    HmacSha256,
    /// HMAC-SHA256 over the JCS canonical JSON, with a nonce.
    HmacSha256Jcs,
    /// Ed25519 over the JCS canonical JSON; the secret is the 64-hex-digit seed.
    Ed25519Jcs,
}

/// Message signatures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct SigningConfig {
    /// Sign replies and require signed requests with this scheme (needs `secret`). Default none.
    pub algorithm: Option<SigningAlgorithm>,
    /// The shared secret (`hmac-*`) or the 64-hex-digit Ed25519 seed (`ed25519-jcs`). Secret. Default none.
    pub secret: Option<String>,
    /// Most signed messages of one peer remembered in the replay window; beyond it, or beyond the room the window
    /// has left, that peer gets CAPACITY_EXCEEDED (retryable), others are unaffected. A peer is its token or
    /// certificate, else its own signing key, else its address. Default `100000`.
    pub replay_entries_per_peer: usize,
    /// Most signed messages remembered in all (for the window's 300 s); beyond it new messages get
    /// CAPACITY_EXCEEDED (retryable), never an old entry evicted. Default `1000000`.
    pub replay_entries: usize,
}

impl Default for SigningConfig {
    fn default() -> Self {
        Self { algorithm: None, secret: None, replay_entries_per_peer: 100_000, replay_entries: 1_000_000 }
    }
}

/// HTTPS and mutual TLS (RFC 8.3).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct TlsConfig {
    /// Serve HTTPS (and `wss://`) with this certificate chain: PEM, server certificate first (needs `key`).
    /// Default none (plain HTTP).
    pub cert: Option<PathBuf>,
    /// The private key of `cert`: PEM (PKCS#8, PKCS#1 or SEC1). Default none.
    pub key: Option<PathBuf>,
    /// Mutual TLS: client certificates must chain to a CA in this PEM bundle and match a `client_cert_peers`
    /// entry, or the handshake is refused (see `client_cert_optional`). Default none.
    pub client_ca: Option<PathBuf>,
    /// Client certificates and the peers they authenticate, each `CERT=[DELEGATE_ID@]DOMAIN`. CERT is
    /// `sha256:<hex>` (the certificate's SHA-256 fingerprint; colons allowed) or `dns:<name>` (any `client_ca`
    /// certificate whose subjectAltName covers the name). The domain is authoritative; a DELEGATE_ID, if given,
    /// must send every message. Default none.
    #[serde(deserialize_with = "units::cert_peers")]
    pub client_cert_peers: Vec<String>,
    /// With `client_ca`: also accept clients without a matching certificate; they then need a token if any is set,
    /// and are anonymous otherwise. Default `false`.
    pub client_cert_optional: bool,
}

/// Where protocol state that must outlive the process, or be shared by replicas, is kept.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct StoreConfig {
    /// `memory` (this process only), `sqlite:PATH` (an embedded database file that survives restarts and kill -9;
    /// a bare PATH means the same), or `redis://[USER:PASSWORD@]HOST:PORT[/DB]` (replicas share sessions, the
    /// replay window, task claims and results; `rediss://` for TLS, `redis+unix:///PATH`, `redis+cluster://`,
    /// `redis+sentinel://HOST:PORT[,...]/SERVICE`). Secret (its password). Default `memory`.
    #[serde(deserialize_with = "units::store_url")]
    pub url: String,
    /// Longest a store call may take; beyond it (or when the store is down) the message is refused
    /// STORE_UNAVAILABLE (retryable), never left hanging. Default `2s`.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "DurationText")]
    pub timeout: Duration,
    /// How long a running task's claim holds without renewal (renewed every third of it); a task whose replica
    /// died is then failed TASK_LEASE_EXPIRED (retryable). Default `30s`.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "DurationText")]
    pub task_lease: Duration,
    /// How long ended tasks' results and closed sessions' markers are kept. Default `1h`.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "DurationText")]
    pub result_ttl: Duration,
    /// Longest task output kept for status queries; a longer one still reaches its submitter, and other replicas
    /// answer status queries for it TASK_FAILED RESULT_NOT_KEPT. Default `1MiB`.
    #[serde(with = "units::size")]
    #[schemars(with = "SizeText")]
    pub result_max_bytes: u64,
    /// SQLite: `process` (survives the process dying; an OS crash may lose the last commits) or `full` (an fsync
    /// per commit batch; survives power loss). Default `process`.
    #[serde(deserialize_with = "units::durability")]
    pub sqlite_durability: String,
    /// SQLite: the WAL's size in 4 KiB pages beyond which the writer checkpoints. Default `32768`.
    pub sqlite_wal_pages: u32,
    /// SQLite: bytes of the database read through a memory map; 0 reads with pread (for storage whose read errors
    /// must not be a SIGBUS, such as NFS). Default `1GiB`.
    #[serde(with = "units::size")]
    #[schemars(with = "SizeText")]
    pub sqlite_mmap_bytes: u64,
    /// SQLite: the most bytes the database may hold (at least 1 MiB); past seven eighths, the oldest ended results
    /// are dropped early; at the bound writes are refused STORE_UNAVAILABLE (retryable). Default `4GiB`.
    #[serde(with = "units::size")]
    #[schemars(with = "SizeText")]
    pub sqlite_max_bytes: u64,
    /// Redis over TLS: trust the CA certificates in this PEM file instead of the system's roots. Default none.
    pub redis_ca: Option<PathBuf>,
    /// Redis over TLS: the client certificate chain (PEM) for a server that asks for one (needs `redis_key`).
    /// Default none.
    pub redis_cert: Option<PathBuf>,
    /// Redis over TLS: the private key (PEM) of `redis_cert`. Default none.
    pub redis_key: Option<PathBuf>,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            url: "memory".to_owned(),
            timeout: Duration::from_secs(2),
            task_lease: Duration::from_secs(30),
            result_ttl: Duration::from_secs(3600),
            result_max_bytes: 1 << 20,
            sqlite_durability: "process".to_owned(),
            sqlite_wal_pages: 32_768,
            sqlite_mmap_bytes: 1 << 30,
            sqlite_max_bytes: 4 << 30,
            redis_ca: None,
            redis_cert: None,
            redis_key: None,
        }
    }
}

/// Limits on protocol state (issue 14): beyond them, typed refusals.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct SessionConfig {
    /// Longest session TTL granted; proposals asking for more get this. Default `1h`.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "DurationText")]
    pub max_ttl: Duration,
    /// Most sessions held at once; further proposals get SESSION_REJECT CAPACITY_EXCEEDED (retryable), after the
    /// heaviest source's idle sessions make room. Default `10000`.
    pub max_sessions: usize,
    /// Most sessions one peer (its credential, else its signing key, else its address) holds at once. Default `100`.
    pub max_sessions_per_peer: usize,
    /// Longest identifier accepted (from, to, message_id, session_id, task_id, nonce, skill...), in bytes; longer
    /// ones get 400 MALFORMED_MESSAGE. Default `256`.
    pub max_id_len: usize,
}

impl Default for SessionConfig {
    fn default() -> Self {
        Self { max_ttl: Duration::from_secs(3600), max_sessions: 10_000, max_sessions_per_peer: 100, max_id_len: 256 }
    }
}

/// Connections, timeouts and rates: every one bounds what a peer can hold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct ConnectionConfig {
    /// Connections open at once (HTTP, TLS handshakes and WebSockets). At the cap, an idle or still-sending
    /// connection of the address holding the most is closed to make room; if there is none, 503 with Retry-After.
    /// Default `512`.
    pub max_connections: usize,
    /// Longest time from a request's first byte to the end of its headers, and for a TLS handshake. Default `10s`.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "DurationText")]
    pub header_timeout: Duration,
    /// Longest time an HTTP connection may stay open without a request in progress. Default `60s`.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "DurationText")]
    pub idle_timeout: Duration,
    /// Longest time a request body may take to arrive (then 408 and the connection closes). Default `30s`.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "DurationText")]
    pub body_timeout: Duration,
    /// Slowest a request head may arrive, in bytes per second over each `min_rate_window` (0: off). Default `1024`.
    pub min_head_rate: u64,
    /// Slowest a request body may arrive, in bytes per second over each `min_rate_window` (0: off). Default `1024`.
    pub min_body_rate: u64,
    /// The window the minimum rates are measured over, and the grace before the first check. Default `5s`.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "DurationText")]
    pub min_rate_window: Duration,
    /// Requests allowed per peer (credential, else client address), `N/s` or `N/m`; beyond it 429 with
    /// Retry-After. Default none (off).
    #[serde(deserialize_with = "units::rate")]
    pub rate_limit: Option<String>,
    /// Proxies (addresses or networks such as `10.0.0.0/8`) whose X-Forwarded-For names the client. List only
    /// proxies you run. Default none (the socket's peer is the client).
    #[serde(deserialize_with = "units::networks")]
    pub trusted_proxies: Vec<String>,
}

impl Default for ConnectionConfig {
    fn default() -> Self {
        // The HTTP edge's own defaults, so the two cannot drift apart.
        let limits = ldp_transport_http::ConnectionLimits::default();
        Self {
            max_connections: limits.max_connections,
            header_timeout: limits.header_timeout,
            idle_timeout: limits.idle_timeout,
            body_timeout: limits.body_timeout,
            min_head_rate: limits.min_head_rate,
            min_body_rate: limits.min_body_rate,
            min_rate_window: limits.min_rate_window,
            rate_limit: None,
            trusted_proxies: Vec::new(),
        }
    }
}

/// The WebSocket binding's bounds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct WebSocketConfig {
    /// A WebSocket that sends nothing, not even a pong to the server's pings, for this long is closed.
    /// Default `45s`.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "DurationText")]
    pub idle_timeout: Duration,
    /// A client that does not take the server's frames for this long is closed. Default `30s`.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "DurationText")]
    pub write_timeout: Duration,
    /// Bytes of frames queued for one WebSocket before its writer is waited on. Default `4MiB`.
    #[serde(with = "units::size")]
    #[schemars(with = "SizeText")]
    pub max_outbound: u64,
    /// Bytes of inbound messages one WebSocket may have in handling at once; beyond it the socket is not read.
    /// Default `8MiB`.
    #[serde(with = "units::size")]
    #[schemars(with = "SizeText")]
    pub max_in_flight: u64,
    /// Bytes per second one peer may send across its WebSockets, after a burst of as many; beyond it its sockets
    /// are left unread (0: off). Default `16MiB`.
    #[serde(with = "units::size")]
    #[schemars(with = "SizeText")]
    pub max_inbound_rate: u64,
    /// Web origins (`scheme://host[:port]`, or `*`) allowed to open `/ldp/ws` from a browser; other cross-origin
    /// upgrades get 403. Clients without an Origin header, and the server's own origin, are allowed. Default none.
    pub allow_origins: Vec<String>,
}

impl Default for WebSocketConfig {
    fn default() -> Self {
        Self {
            idle_timeout: Duration::from_secs(45),
            write_timeout: Duration::from_secs(30),
            max_outbound: 4 << 20,
            max_in_flight: 8 << 20,
            max_inbound_rate: 16 << 20,
            allow_origins: Vec::new(),
        }
    }
}

/// Answers kept for sessions whose connection dropped, until they resume (over any binding).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct HeldConfig {
    /// Task results kept per session; the oldest beyond it are dropped and reported on resume as TASK_FAILED
    /// RESULT_NOT_KEPT. Default `64`.
    pub results_per_session: usize,
    /// Bytes of results kept per session. Default `16MiB`.
    #[serde(with = "units::size")]
    #[schemars(with = "SizeText")]
    pub bytes_per_session: u64,
    /// Results kept for all sessions together. Default `4096`.
    pub results_total: usize,
    /// Bytes of results kept for all sessions together. Default `128MiB`.
    #[serde(with = "units::size")]
    #[schemars(with = "SizeText")]
    pub bytes_total: u64,
    /// How long held results wait for their session to resume. Default `1h`.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "DurationText")]
    pub ttl: Duration,
}

impl Default for HeldConfig {
    fn default() -> Self {
        let held = ldp_session::HeldLimits::default();
        Self {
            results_per_session: held.per_session_results,
            bytes_per_session: held.per_session_bytes as u64,
            results_total: held.total_results,
            bytes_total: held.total_bytes as u64,
            ttl: held.ttl,
        }
    }
}

/// The provider API (or bridged server) behind a delegate without code of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum BackendKind {
    /// OpenAI-compatible Chat Completions (OpenAI, vLLM, llama.cpp's server, Ollama's /v1, LM Studio).
    Openai,
    /// The Anthropic Messages API.
    Anthropic,
    /// No provider: answers with the user's message (the LLM path without a model).
    Echo,
    /// A GGUF model run in this process on the CPU (`model` is the file).
    Local,
    /// An MCP server's tools as the skills (`mcp_command` or `mcp_url`).
    Mcp,
    /// An A2A agent's skills (`a2a_url`).
    A2a,
}

impl BackendKind {
    /// Whether this is another protocol's server bridged in (no model of ours behind it).
    pub fn is_bridge(self) -> bool {
        matches!(self, Self::Mcp | Self::A2a)
    }
}

/// How a local model's weights are computed with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Precision {
    /// Weights widened to f32 at load: exact products, 4 bytes per parameter.
    #[default]
    F32,
    /// Weights as the file stores them, with quantized kernels: least memory.
    Quantized,
}

/// Which runtime runs a local model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum LocalEngine {
    /// llama.cpp in process: quantized weights, sessions decoded in one batch, constrained decoding (tools,
    /// response schemas).
    Llama,
    /// candle, pure Rust: no tools or response schemas.
    Candle,
}

/// What answers tasks when no skills are given in code.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct BackendConfig {
    /// `openai`, `anthropic`, `echo`, `local`, `mcp` or `a2a`. Default none: the reference SDKs' echo delegate.
    pub kind: Option<BackendKind>,
    /// The provider's base URL. Default: `https://api.openai.com/v1` (openai), `https://api.anthropic.com`
    /// (anthropic).
    #[serde(deserialize_with = "units::url_opt")]
    pub base_url: Option<String>,
    /// The model name sent to the provider (the card's model_version); with `local`, the GGUF file. Default none.
    pub model: Option<String>,
    /// The environment variable holding the API key (never printed). Default: `OPENAI_API_KEY` or
    /// `ANTHROPIC_API_KEY` when set.
    pub api_key_env: Option<String>,
    /// A file whose text is the system prompt. Default none.
    pub system_prompt: Option<PathBuf>,
    /// Skills, each `NAME` (the input as it is) or `NAME=TEMPLATE_FILE` (`{{input}}` stands for the input).
    /// Default: one skill, `chat`.
    pub skills: Vec<String>,
    /// The model's context window in tokens, for the card. Default 8192 openai, 200000 anthropic, 4096 others
    /// (a local model knows its own).
    pub context_window: Option<u64>,
    /// The most tokens an answer may have (a contract's budget may lower it). Default none for openai, 1024
    /// anthropic, 512 local.
    pub max_tokens: Option<u64>,
    /// Ask for whole answers instead of streams (budgets are then checked after the answer). Default `false`.
    pub no_stream: bool,
    /// A JSON price table, `{"model": {"input_per_mtok": 3.0, "output_per_mtok": 15.0}}`, for `cost_usd`.
    /// Default none.
    pub prices: Option<PathBuf>,
    /// Longest wait for the provider (a whole answer, a stream's first byte, or between its pieces).
    /// Default `2m`.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "DurationText")]
    pub timeout: Duration,
    /// Retries after a provider 5xx, timeout or connection failure. Default `2`.
    pub retries: u32,
    /// `local`: sample at this temperature instead of taking the most likely token. Default none.
    pub temperature: Option<f64>,
    /// `local`: nucleus sampling cut-off in (0, 1] (with `temperature`). Default none.
    pub top_p: Option<f64>,
    /// `local`: the sampling seed: the same seed, the same answers. Default `1`.
    pub seed: u64,
    /// `local`: divide the probability of tokens already in the answer (1.0: off). Default `1.0`.
    pub repeat_penalty: f32,
    /// `local`: answers generated at once (llama: sequences decoded together, each keeping its session's cache);
    /// more tasks wait their turn. Default `4`.
    pub max_concurrent: usize,
    /// `local`: the runtime, `llama` (llama.cpp in process) or `candle`. Unset: `llama` when built in, else
    /// `candle`.
    pub engine: Option<LocalEngine>,
    /// `local` with `llama`: threads of the model's arithmetic. Default: the machine's cores but one, at least one.
    pub threads: Option<usize>,
    /// `local`: `f32` or `quantized`. Default `f32`.
    pub precision: Precision,
    /// `mcp`: the MCP server to start, `PROGRAM ARG...` split on whitespace, speaking MCP on stdio. Default none.
    pub mcp_command: Option<String>,
    /// `mcp`: the URL of an MCP server speaking Streamable HTTP (`http://HOST:PORT/mcp`). Default none.
    #[serde(deserialize_with = "units::url_opt")]
    pub mcp_url: Option<String>,
    /// `mcp` with `mcp_url`: the bearer token sent to that server. Secret. Default none.
    pub mcp_token: Option<String>,
    /// `a2a`: the agent's base URL (its card at /.well-known/agent-card.json), or its card's URL. Default none.
    #[serde(deserialize_with = "units::url_opt")]
    pub a2a_url: Option<String>,
    /// `a2a`: the bearer token sent to the agent. Secret. Default none.
    pub a2a_token: Option<String>,
    /// Other delegates (`http(s)://` or `ldp://` URLs; A2A agents as `a2a+http(s)://` URLs) whose skills the model
    /// may call as tools, each call a sub-task routed by verified quality, cost and trust under a child contract.
    /// An MCP server is reached through its bridge (`ldp serve --backend mcp`). Default none.
    pub delegates: Vec<String>,
    /// With `delegates`: rounds of tool calls before the model must answer. Default `8`.
    pub tool_rounds: u32,
    /// With `delegates`: attestation issuers whose signed quality claims count when routing among them, each
    /// `ISSUER_ID=KEY_ID=PUBLIC_HEX[@URL]`: the issuer's pinned Ed25519 key and, optionally, its base URL, from
    /// which its key set and revocation list are fetched at start and kept fresh (its attestations then count only
    /// while that list is fresh). Without any, the delegates are ranked by what they claim of themselves. Default
    /// none.
    #[serde(deserialize_with = "units::issuer_pins")]
    pub delegates_issuers: Vec<String>,
    /// With `delegates`: a command (run with `sh -c`) printing the bearer token sent to them; run again after 5
    /// minutes or a minute before a JWT's `exp`. Default none.
    pub delegates_token_command: Option<String>,
    /// With `delegates`: get their bearer token from this OAuth 2.0 token endpoint by client credentials (needs
    /// `delegates_oauth_client_id`), refreshed before it expires. Default none.
    #[serde(deserialize_with = "units::url_opt")]
    pub delegates_oauth_token_url: Option<String>,
    /// The OAuth client id for `delegates_oauth_token_url`. Default none.
    pub delegates_oauth_client_id: Option<String>,
    /// The environment variable holding that client's secret. Default `LDP_OAUTH_CLIENT_SECRET`.
    pub delegates_oauth_client_secret_env: String,
    /// Scopes asked for with `delegates_oauth_token_url`. Default none.
    pub delegates_oauth_scopes: Vec<String>,
    /// The resource (audience) asked for with `delegates_oauth_token_url`. Default none.
    pub delegates_oauth_audience: Option<String>,
}

impl Default for BackendConfig {
    fn default() -> Self {
        Self {
            kind: None,
            base_url: None,
            model: None,
            api_key_env: None,
            system_prompt: None,
            skills: Vec::new(),
            context_window: None,
            max_tokens: None,
            no_stream: false,
            prices: None,
            timeout: Duration::from_secs(120),
            retries: 2,
            temperature: None,
            top_p: None,
            seed: 1,
            repeat_penalty: 1.0,
            max_concurrent: 4,
            engine: None,
            threads: None,
            precision: Precision::F32,
            mcp_command: None,
            mcp_url: None,
            mcp_token: None,
            a2a_url: None,
            a2a_token: None,
            delegates: Vec::new(),
            tool_rounds: 8,
            delegates_issuers: Vec::new(),
            delegates_token_command: None,
            delegates_oauth_token_url: None,
            delegates_oauth_client_id: None,
            delegates_oauth_client_secret_env: "LDP_OAUTH_CLIENT_SECRET".to_owned(),
            delegates_oauth_scopes: Vec::new(),
            delegates_oauth_audience: None,
        }
    }
}

/// The MCP bridge (Streamable HTTP at `/mcp`, behind the LDP routes' authentication and limits).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct McpConfig {
    /// Serve MCP at /mcp: each capability a tool, an MCP session an LDP session, tools/call a task.
    /// Default `false`.
    pub enabled: bool,
    /// MCP sessions open at once. Default `256`.
    pub max_sessions: usize,
    /// Tool calls in flight, all sessions together; beyond it CAPACITY_EXCEEDED. Default `256`.
    pub max_calls: usize,
    /// Tool calls in flight in one MCP session. Default `16`.
    pub max_calls_per_session: usize,
    /// An MCP session without a request for this long is closed, with its LDP session. Default `5m`.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "DurationText")]
    pub session_idle: Duration,
    /// Host header values accepted besides the loopback names and the bind host (DNS-rebinding protection); `*`
    /// accepts any. Default none.
    pub allowed_hosts: Vec<String>,
}

impl Default for McpConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            max_sessions: 256,
            max_calls: 256,
            max_calls_per_session: 16,
            session_idle: Duration::from_secs(300),
            allowed_hosts: Vec::new(),
        }
    }
}

/// The A2A bridge (Agent Card at `/.well-known/agent-card.json`, JSON-RPC at `/a2a`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct A2aConfig {
    /// Serve A2A: the Agent Card and JSON-RPC (SendMessage, SendStreamingMessage, GetTask, ListTasks, CancelTask,
    /// SubscribeToTask, the push notification configs). Default `false`.
    pub enabled: bool,
    /// A2A contexts (LDP sessions) held at once; when full the least recently used idle one is closed.
    /// Default `256`.
    pub max_contexts: usize,
    /// A2A tasks held at once, running or ended. Default `1024`.
    pub max_tasks: usize,
    /// A2A tasks running at once; beyond it CAPACITY_EXCEEDED. Default `256`.
    pub max_running: usize,
    /// A context without a message for this long is closed, with its LDP session. Default `5m`.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "DurationText")]
    pub context_idle: Duration,
    /// How long an ended task stays readable by GetTask. Default `10m`.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "DurationText")]
    pub task_ttl: Duration,
    /// Largest A2A request body. Default: `max_body`.
    #[serde(with = "units::size_opt")]
    #[schemars(with = "Option<SizeText>")]
    pub max_body: Option<u64>,
    /// Take push notification configs (webhooks that receive a task's events). Default `true`.
    pub push: bool,
    /// Deliver push notifications to loopback, private, link-local and other non-public addresses too (a closed
    /// network, tests); off, a webhook resolving to one is refused. Default `false`.
    pub push_allow_private: bool,
    /// Webhook hosts (as written in the URL) exempt from the non-public address rule. Default none.
    pub push_allowed_hosts: Vec<String>,
    /// Attempts to deliver one event (the first and the retries, with doubling backoff from half a second).
    /// Default `4`.
    pub push_attempts: u32,
    /// Longest one delivery attempt may take. Default `5s`.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "DurationText")]
    pub push_timeout: Duration,
}

impl Default for A2aConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            max_contexts: 256,
            max_tasks: 1024,
            max_running: 256,
            context_idle: Duration::from_secs(300),
            task_ttl: Duration::from_secs(600),
            max_body: None,
            push: true,
            push_allow_private: false,
            push_allowed_hosts: Vec::new(),
            push_attempts: 4,
            push_timeout: Duration::from_secs(5),
        }
    }
}

/// OpenTelemetry export of the spans of every LDP message handled and sent.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct TelemetryConfig {
    /// An OTLP/HTTP collector's base URL (`/v1/traces` is appended). Also read from
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`. Default none (no export).
    #[serde(deserialize_with = "units::url_opt")]
    pub otlp_endpoint: Option<String>,
    /// The service name on the spans. Default: `OTEL_SERVICE_NAME`, else `ldp`.
    pub service_name: Option<String>,
}

impl TelemetryConfig {
    /// Export to `endpoint` (none: no export), the service named by `OTEL_SERVICE_NAME`, else `ldp`.
    pub fn with_otlp_endpoint(endpoint: Option<String>) -> Self {
        Self { otlp_endpoint: endpoint, service_name: None }
    }
}
