//! One typed configuration for a whole delegate server: what `ldp serve` reads from its flags, `LDP_*` variables
//! and a TOML file, and what [`DelegateBuilder`](crate::DelegateBuilder) fills from code.
//!
//! Every key has a default (stated on its field), an environment variable (`LDP_` and the key's path in capitals,
//! dots as `_`: `connections.max_connections` is `LDP_CONNECTIONS_MAX_CONNECTIONS`) and an entry in the reference
//! page `docs/config.md`, generated from these doc comments ([`reference_markdown`]). Durations are written as
//! `30s`, `2m`, `500ms`; sizes as bytes or `1MiB`, `16 MiB`, `1GB`.
//!
//! ```
//! let cfg = ldp::config::ServerConfig::from_toml_str(
//!     "bind = \"127.0.0.1:0\"\n[connections]\nrate_limit = \"50/s\"\n",
//!     "inline",
//! )
//! .unwrap();
//! assert_eq!(cfg.connections.rate_limit.as_deref(), Some("50/s"));
//! assert_eq!(cfg.connections.max_connections, 512);
//! ```

mod layers;
mod reference;
mod sections;
pub(crate) mod units;

#[cfg(test)]
mod tests;

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use layers::{ConfigError, Origin, Setting};
pub use reference::{KeyDoc, KeyKind, env_var, keys, reference_markdown};
pub use sections::{
    A2aConfig, AuthConfig, BackendConfig, BackendKind, ConnectionConfig, HeldConfig, IdentityConfig, JwtSection,
    LocalEngine, McpConfig, OauthSection, Precision, SessionConfig, SigningAlgorithm, SigningConfig, StoreConfig,
    TelemetryConfig, TlsConfig, WebSocketConfig,
};
pub(crate) use units::network;

/// Everything a delegate server is: where it listens, who it is, whom it lets in, what it keeps and how much, what
/// answers its tasks, and which other protocols it speaks. Sections are TOML tables (`[tls]`, `[store]`, ...).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct ServerConfig {
    /// The address to listen on, `HOST:PORT` (port 0 picks a free port). Default `127.0.0.1:8090`.
    #[serde(deserialize_with = "units::socket_address")]
    pub bind: String,
    /// On SIGTERM or SIGINT (or the caller's stop), how long running tasks may go on before they are answered
    /// TASK_FAILED `CANCELLED` (retryable); new sessions and tasks are refused from the signal on. Default `30s`.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "units::DurationText")]
    pub shutdown_grace: Duration,
    /// Longest time one request may take, task included. Default: `60s`; with an LLM backend, long enough for
    /// every attempt of the model: `backend.timeout` × (`backend.retries` + 1) + 10 s.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "Option<units::DurationText>")]
    pub request_timeout: Option<Duration>,
    /// Largest request body (and WebSocket message) accepted. Default `1MiB`.
    #[serde(with = "units::size")]
    #[schemars(with = "units::SizeText")]
    pub max_body: u64,
    /// Who the delegate is: its id, trust domain and card.
    pub identity: IdentityConfig,
    /// How peers authenticate: bearer tokens (client certificates are under `tls`).
    pub auth: AuthConfig,
    /// JWT access tokens of an identity provider, beside `auth.tokens`.
    pub jwt: JwtSection,
    /// The server as an OAuth protected resource: its metadata, scopes per skill and endpoint.
    pub oauth: OauthSection,
    /// Message signatures and their replay window.
    pub signing: SigningConfig,
    /// HTTPS, `wss://` and mutual TLS.
    pub tls: TlsConfig,
    /// Where sessions, the replay window and task results are kept.
    pub store: StoreConfig,
    /// Limits on sessions and identifiers.
    pub sessions: SessionConfig,
    /// Connection caps, timeouts, minimum rates, the rate limit and trusted proxies.
    pub connections: ConnectionConfig,
    /// The WebSocket binding (`/ldp/ws`).
    pub websocket: WebSocketConfig,
    /// Answers kept for disconnected sessions until they resume.
    pub held: HeldConfig,
    /// What answers tasks when no skills are given in code: the echo delegate, a language model, or an MCP server
    /// or A2A agent bridged in.
    pub backend: BackendConfig,
    /// The MCP bridge: the delegate's skills as MCP tools at `/mcp`.
    pub mcp: McpConfig,
    /// The A2A bridge: the delegate as an A2A agent at `/a2a`.
    pub a2a: A2aConfig,
    /// OpenTelemetry export.
    pub telemetry: TelemetryConfig,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            bind: "127.0.0.1:8090".to_owned(),
            shutdown_grace: Duration::from_secs(30),
            request_timeout: None,
            max_body: 1024 * 1024,
            identity: IdentityConfig::default(),
            auth: AuthConfig::default(),
            jwt: JwtSection::default(),
            oauth: OauthSection::default(),
            signing: SigningConfig::default(),
            tls: TlsConfig::default(),
            store: StoreConfig::default(),
            sessions: SessionConfig::default(),
            connections: ConnectionConfig::default(),
            websocket: WebSocketConfig::default(),
            held: HeldConfig::default(),
            backend: BackendConfig::default(),
            mcp: McpConfig::default(),
            a2a: A2aConfig::default(),
            telemetry: TelemetryConfig::default(),
        }
    }
}

impl ServerConfig {
    /// The request timeout in force: a request that waits on a model must not be cut before the model's own timeout
    /// and retries could answer it, or the peer is told TIMEOUT for a task that then completes unseen.
    pub fn effective_request_timeout(&self) -> Duration {
        if let Some(timeout) = self.request_timeout {
            return timeout.max(Duration::from_secs(1));
        }
        match self.backend.kind {
            Some(kind) if !kind.is_bridge() => self
                .backend
                .timeout
                .saturating_mul(self.backend.retries.saturating_add(1))
                .saturating_add(Duration::from_secs(10)),
            _ => Duration::from_secs(60),
        }
    }

    /// Whether a credential authenticates peers (bearer tokens, or client certificates mapped to peers): then only
    /// authenticated trust domains count, never a declared one.
    pub fn authenticates(&self) -> bool {
        !self.auth.tokens.is_empty() || !self.tls.client_cert_peers.is_empty() || self.jwt.issuer.is_some()
    }

    /// Checks what no single key can: keys that need one another, and files that must exist.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.recheck()?;
        let need = |key: &'static str, needs: &'static str| ConfigError::Requires { key, needs };
        if self.signing.algorithm.is_some() && self.signing.secret.is_none() {
            return Err(need("signing.algorithm", "signing.secret"));
        }
        if self.signing.secret.is_some() && self.signing.algorithm.is_none() {
            return Err(need("signing.secret", "signing.algorithm"));
        }
        if self.tls.cert.is_some() != self.tls.key.is_some() {
            return Err(if self.tls.cert.is_some() {
                need("tls.cert", "tls.key")
            } else {
                need("tls.key", "tls.cert")
            });
        }
        if self.tls.client_ca.is_some() && self.tls.cert.is_none() {
            return Err(need("tls.client_ca", "tls.cert"));
        }
        if self.tls.client_ca.is_some() && self.tls.client_cert_peers.is_empty() && !self.tls.client_cert_optional {
            return Err(need("tls.client_ca", "tls.client_cert_peers (or tls.client_cert_optional)"));
        }
        if !self.tls.client_cert_peers.is_empty() && self.tls.client_ca.is_none() {
            return Err(need("tls.client_cert_peers", "tls.client_ca"));
        }
        if self.jwt.issuer.is_some() && self.jwt.audiences.is_empty() {
            return Err(need("jwt.issuer", "jwt.audiences"));
        }
        if self.jwt.issuer.is_none() {
            let set = [
                ("jwt.jwks_url", self.jwt.jwks_url.is_some()),
                ("jwt.audiences", !self.jwt.audiences.is_empty()),
                ("oauth.authorization_servers", !self.oauth.authorization_servers.is_empty()),
                ("oauth.resource", self.oauth.resource.is_some()),
                ("oauth.endpoint_scopes", !self.oauth.endpoint_scopes.is_empty()),
                ("oauth.skill_scopes", !self.oauth.skill_scopes.is_empty()),
            ];
            if let Some((key, _)) = set.into_iter().find(|(_, set)| *set) {
                return Err(need(key, "jwt.issuer"));
            }
        }
        if self.store.redis_cert.is_some() != self.store.redis_key.is_some() {
            return Err(need("store.redis_cert", "store.redis_key"));
        }
        let b = &self.backend;
        if b.kind.is_none() {
            let set = [
                ("backend.model", b.model.is_some()),
                ("backend.base_url", b.base_url.is_some()),
                ("backend.api_key_env", b.api_key_env.is_some()),
                ("backend.system_prompt", b.system_prompt.is_some()),
                ("backend.skills", !b.skills.is_empty()),
                ("backend.prices", b.prices.is_some()),
                ("backend.mcp_command", b.mcp_command.is_some()),
                ("backend.mcp_url", b.mcp_url.is_some()),
                ("backend.a2a_url", b.a2a_url.is_some()),
                ("backend.delegates", !b.delegates.is_empty()),
            ];
            if let Some((key, _)) = set.into_iter().find(|(_, set)| *set) {
                return Err(need(key, "backend.kind"));
            }
        }
        if b.delegates.is_empty() {
            let set = [
                ("backend.delegates_token_command", b.delegates_token_command.is_some()),
                ("backend.delegates_issuers", !b.delegates_issuers.is_empty()),
                ("backend.delegates_oauth_token_url", b.delegates_oauth_token_url.is_some()),
            ];
            if let Some((key, _)) = set.into_iter().find(|(_, set)| *set) {
                return Err(need(key, "backend.delegates"));
            }
        }
        if b.delegates_oauth_token_url.is_some() != b.delegates_oauth_client_id.is_some() {
            return Err(if b.delegates_oauth_token_url.is_some() {
                need("backend.delegates_oauth_token_url", "backend.delegates_oauth_client_id")
            } else {
                need("backend.delegates_oauth_client_id", "backend.delegates_oauth_token_url")
            });
        }
        if !b.delegates.is_empty() && b.kind.is_some_and(BackendKind::is_bridge) {
            return Err(need("backend.delegates", "a model backend (openai, anthropic, local or echo)"));
        }
        if b.top_p.is_some() && b.temperature.is_none() {
            return Err(need("backend.top_p", "backend.temperature"));
        }
        match self.backend.kind {
            Some(BackendKind::Openai | BackendKind::Anthropic | BackendKind::Local) if self.backend.model.is_none() => {
                Err(need("backend.kind", "backend.model"))
            }
            Some(BackendKind::Mcp) if self.backend.mcp_command.is_none() && self.backend.mcp_url.is_none() => {
                Err(need("backend.kind = \"mcp\"", "backend.mcp_command or backend.mcp_url"))
            }
            Some(BackendKind::A2a) if self.backend.a2a_url.is_none() => {
                Err(need("backend.kind = \"a2a\"", "backend.a2a_url"))
            }
            _ => Ok(()),
        }
    }
}
