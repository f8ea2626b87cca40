//! Serving: a delegate built from typed skill closures.

use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use ldp_session::runtime::{Delegate as RunDelegate, DelegateRuntime, TaskContext};
use ldp_session::{Limits, TaskOutput, TaskRequest};
use ldp_types::signing::SigningKey;
use ldp_types::{Capability, DelegateId, IdentityCard, LdpError, PayloadMode, RawJson, Score};
use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::Error;
use crate::config::ServerConfig;
use crate::launch::{Server, Skillset};

/// The error code of an input that does not fit the skill's input type (category `capability`, not retryable).
pub const INVALID_INPUT: &str = "INVALID_INPUT";

type BoxFuture = Pin<Box<dyn Future<Output = Result<TaskOutput, LdpError>> + Send>>;
type Handler = Arc<dyn Fn(TaskRequest, TaskContext) -> BoxFuture + Send + Sync>;

/// What a skill handler returns: any `Serialize` value (its JSON Schema becomes the capability's output schema), or
/// an [`Output`] with usage figures.
pub trait IntoOutput: Send + 'static {
    /// The task's output.
    fn into_output(self) -> Result<TaskOutput, LdpError>;
    /// The JSON Schema of the output, when the type gives one.
    fn schema() -> Option<Value>;
}

impl<T: Serialize + JsonSchema + Send + 'static> IntoOutput for T {
    fn into_output(self) -> Result<TaskOutput, LdpError> {
        let json = serde_json::to_string(&self)
            .map_err(|e| LdpError::runtime(ldp_types::codes::EXECUTION_FAILED, format!("output not encodable: {e}")))?;
        let raw = RawJson::from_json(json)
            .map_err(|e| LdpError::runtime(ldp_types::codes::EXECUTION_FAILED, format!("output not encodable: {e}")))?;
        Ok(TaskOutput::new(raw))
    }

    fn schema() -> Option<Value> {
        Some(schemars::schema_for!(T).to_value())
    }
}

/// A full output: the value and what the delegate reports about it (usage, confidence), which goes into the result's
/// provenance.
#[derive(Debug, Clone, Default)]
pub struct Output(TaskOutput);

impl Output {
    /// An output with no usage figures; `value` may be a `serde_json::Value`, a [`RawJson`] or a `&str`.
    pub fn new(value: impl Into<RawJson>) -> Self {
        Self(TaskOutput::new(value))
    }

    /// Tokens the work used.
    #[must_use]
    pub fn tokens(mut self, tokens: u64) -> Self {
        self.0.tokens_used = Some(tokens);
        self
    }

    /// What the work cost, in USD.
    #[must_use]
    pub fn cost_usd(mut self, usd: f64) -> Self {
        self.0.cost_usd = Some(usd);
        self
    }

    /// Self-reported confidence in 0.0-1.0 (out of range: left unset).
    #[must_use]
    pub fn confidence(mut self, confidence: f64) -> Self {
        self.0.confidence = Score::new(confidence).ok();
        self
    }
}

impl From<TaskOutput> for Output {
    fn from(out: TaskOutput) -> Self {
        Self(out)
    }
}

impl IntoOutput for Output {
    fn into_output(self) -> Result<TaskOutput, LdpError> {
        Ok(self.0)
    }

    fn schema() -> Option<Value> {
        None
    }
}

/// Reads a task's input into the handler's type. Text mode carries a string: it is tried as the type itself, then
/// (when it is JSON) as JSON. A semantic frame is tried as the type, then its `instruction` as the type.
fn extract<I: DeserializeOwned>(task: &TaskRequest) -> Result<I, LdpError> {
    let value: Value = task.input.parse().map_err(|e| invalid(task, &e))?;
    let first = match serde_json::from_value::<I>(value.clone()) {
        Ok(input) => return Ok(input),
        Err(e) => e,
    };
    let second = match (&value, task.payload_mode) {
        (Value::String(text), PayloadMode::Text) => serde_json::from_str::<I>(text).ok(),
        (Value::Object(frame), PayloadMode::SemanticFrame) => {
            frame.get("instruction").and_then(|i| serde_json::from_value::<I>(i.clone()).ok())
        }
        _ => None,
    };
    second.ok_or_else(|| invalid(task, &first))
}

fn invalid(task: &TaskRequest, e: &dyn std::fmt::Display) -> LdpError {
    LdpError::capability(
        INVALID_INPUT,
        format!("the input does not fit skill {:?} ({} mode): {e}", task.skill, task.payload_mode),
    )
    .with_retryable(false)
}

/// The skills, dispatched by name.
struct Skills(HashMap<String, Handler>);

#[async_trait]
impl RunDelegate for Skills {
    async fn execute(&self, task: TaskRequest, ctx: TaskContext) -> Result<TaskOutput, LdpError> {
        // The machine admits only skills on the card, which lists exactly these.
        let handler = self.0.get(&task.skill).cloned().ok_or_else(|| {
            LdpError::capability(ldp_types::codes::SKILL_NOT_FOUND, format!("no skill {:?}", task.skill))
        })?;
        handler(task, ctx).await
    }
}

/// A delegate being declared: its identity, its skills, and the server around them (a [`ServerConfig`]: tokens,
/// TLS, store, limits, telemetry, bridges). Start with [`Delegate::builder`].
pub struct DelegateBuilder {
    id: String,
    name: Option<String>,
    model: (String, String),
    limits: Option<Limits>,
    cancel_grace: Option<Duration>,
    signing_key: Option<SigningKey>,
    config: ServerConfig,
    skills: Vec<(Capability, Handler)>,
    duplicate: Option<String>,
}

impl std::fmt::Debug for DelegateBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let skills: Vec<&str> = self.skills.iter().map(|(c, _)| c.name.as_str()).collect();
        f.debug_struct("DelegateBuilder").field("id", &self.id).field("skills", &skills).finish_non_exhaustive()
    }
}

/// The entry point for serving: `Delegate::builder("ldp:delegate:upper")`.
#[derive(Debug, Clone, Copy)]
pub struct Delegate;

impl Delegate {
    /// Starts declaring the delegate `id` (`ldp:delegate:<name>`). Defaults: the name part as display name, model
    /// `none`/`1`, and [`ServerConfig::default`]: trust domain `default` with permissive trust (the reference SDKs'
    /// development behaviour), no authentication, the memory store, the session layer's default limits.
    pub fn builder(id: impl Into<String>) -> DelegateBuilder {
        DelegateBuilder {
            id: id.into(),
            name: None,
            model: ("none".to_owned(), "1".to_owned()),
            limits: None,
            cancel_grace: None,
            signing_key: None,
            config: ServerConfig::default(),
            skills: Vec::new(),
            duplicate: None,
        }
    }
}

impl DelegateBuilder {
    /// Declares a skill: its name goes on the card (with the JSON Schemas of `I` and of the output), and tasks for it
    /// run `handler` with the input read into `I` ([`INVALID_INPUT`] when it does not fit) and the task's context
    /// (history, partial output, cancellation).
    #[must_use]
    pub fn skill<I, O, F, Fut>(mut self, name: impl Into<String>, handler: F) -> Self
    where
        I: DeserializeOwned + JsonSchema + Send + 'static,
        O: IntoOutput,
        F: Fn(I, TaskContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<O, LdpError>> + Send + 'static,
    {
        let name = name.into();
        if self.skills.iter().any(|(c, _)| c.name == name) {
            self.duplicate.get_or_insert(name.clone());
        }
        let mut capability = Capability::new(name);
        capability.input_schema = Some(schemars::schema_for!(I).to_value());
        capability.output_schema = O::schema();
        let handler = Arc::new(handler);
        let run: Handler = Arc::new(move |task: TaskRequest, ctx: TaskContext| {
            let handler = handler.clone();
            Box::pin(async move {
                let input = extract::<I>(&task)?;
                handler(input, ctx).await?.into_output()
            }) as BoxFuture
        });
        self.skills.push((capability, run));
        self
    }

    /// The description of the skill declared last, on the card (and the tool description MCP hosts see through the
    /// bridge); without one the card names the skill only.
    #[must_use]
    pub fn describe(mut self, description: impl Into<String>) -> Self {
        if let Some((capability, _)) = self.skills.last_mut() {
            capability.description = Some(description.into());
        }
        self
    }

    /// The quality the delegate claims for the skill declared last, in 0.0-1.0 (out of range: left unset), on the
    /// card as a self-claimed score (`claim_type: self_claimed`): routers weigh it below attested quality.
    #[must_use]
    pub fn quality(mut self, score: f64) -> Self {
        if let (Some((capability, _)), Ok(score)) = (self.skills.last_mut(), Score::new(score)) {
            *capability = capability.clone().with_quality(score, ldp_types::ClaimType::SelfClaimed);
        }
        self
    }

    /// An example input of the skill declared last, added to its input schema's `examples` (JSON Schema), which
    /// the card, MCP tools and generated forms show.
    #[must_use]
    pub fn example(mut self, input: Value) -> Self {
        if let Some(Value::Object(schema)) = self.skills.last_mut().and_then(|(c, _)| c.input_schema.as_mut()) {
            match schema.entry("examples").or_insert_with(|| Value::Array(Vec::new())) {
                Value::Array(examples) => examples.push(input),
                other => *other = Value::Array(vec![input]),
            }
        }
        self
    }

    /// Replaces the input JSON Schema of the skill declared last, for a skill whose input type is known only at run
    /// time (a binding to another language: `ldp-py` reads it from Python annotations). The input still arrives as
    /// the handler's type; with `serde_json::Value` the handler checks it against the schema itself.
    #[must_use]
    pub fn input_schema(mut self, schema: Value) -> Self {
        if let Some((capability, _)) = self.skills.last_mut() {
            capability.input_schema = Some(schema);
        }
        self
    }

    /// Replaces the output JSON Schema of the skill declared last (see [`DelegateBuilder::input_schema`]).
    #[must_use]
    pub fn output_schema(mut self, schema: Value) -> Self {
        if let Some((capability, _)) = self.skills.last_mut() {
            capability.output_schema = Some(schema);
        }
        self
    }

    /// The display name on the card.
    #[must_use]
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// The model family and version on the card (and in every result's provenance).
    #[must_use]
    pub fn model(mut self, family: impl Into<String>, version: impl Into<String>) -> Self {
        self.model = (family.into(), version.into());
        self
    }

    /// The whole server configuration at once (read from a file with [`ServerConfig::from_toml_file`], say); the
    /// setters below change one part of it. Its `backend` is not used: the skills answer.
    #[must_use]
    pub fn config(mut self, config: ServerConfig) -> Self {
        self.config = config;
        self
    }

    /// The server configuration so far, to change any key the setters do not cover.
    pub fn config_mut(&mut self) -> &mut ServerConfig {
        &mut self.config
    }

    /// The trust domain on the card.
    #[must_use]
    pub fn trust_domain(mut self, domain: impl Into<String>) -> Self {
        self.config.identity.trust_domain = Some(domain.into());
        self
    }

    /// The session layer's limits (sessions, tasks, context kept per session, held answers, ...), replacing the
    /// configuration's `sessions` and `held` keys wholesale.
    #[must_use]
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = Some(limits);
        self
    }

    /// How long a cancelled task's handler may run on after its cancellation signal.
    #[must_use]
    pub fn cancel_grace(mut self, grace: Duration) -> Self {
        self.cancel_grace = Some(grace);
        self
    }

    /// How long a graceful shutdown ([`Server::shutdown`], a signal to [`DelegateBuilder::serve`]) lets running
    /// tasks finish before they are answered TASK_FAILED `CANCELLED` (default 30 s). New sessions and tasks are
    /// refused from its start.
    #[must_use]
    pub fn shutdown_grace(mut self, grace: Duration) -> Self {
        self.config.shutdown_grace = grace;
        self
    }

    /// Requires a bearer token on every protected route (messages, stream, WebSocket, bridges): `token`
    /// authenticates its holder as a peer of `trust_domain` (repeatable; with none, no token is asked for). The
    /// session layer then trusts the token's domain, not what the peer declares, and binds sessions and quotas to it.
    #[must_use]
    pub fn token(mut self, token: impl Into<String>, trust_domain: impl Into<String>) -> Self {
        self.config.auth.tokens.push(format!("{}={}", token.into(), trust_domain.into()));
        self
    }

    /// Accepts JWT access tokens of the OIDC/OAuth `issuer` (keys from its discovery document) whose `aud` names
    /// `audience`, beside any static token; their `sub` is the principal. The server then also publishes its OAuth
    /// protected resource metadata. Finer settings (claims, JWKS URL, algorithms) are the `jwt` section's.
    #[must_use]
    pub fn jwt_issuer(mut self, issuer: impl Into<String>, audience: impl Into<String>) -> Self {
        self.config.jwt.issuer = Some(issuer.into());
        self.config.jwt.audiences.push(audience.into());
        self
    }

    /// Requires `scope` of whoever submits a task for `skill` (repeatable): a JWT must grant it; static tokens and
    /// certificates grant no scope.
    #[must_use]
    pub fn skill_scope(mut self, skill: impl Into<String>, scope: impl Into<String>) -> Self {
        self.config.oauth.skill_scopes.push(format!("{}={}", skill.into(), scope.into()));
        self
    }

    /// Signs every answer with `key` and requires every message signed with it (or, for `ed25519-jcs`, with the
    /// matching public key), with replay protection.
    #[must_use]
    pub fn signing_key(mut self, key: SigningKey) -> Self {
        self.signing_key = Some(key);
        self
    }

    /// Serves HTTPS and `wss://` with the certificate chain and private key in these PEM files.
    #[must_use]
    pub fn tls(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        self.config.tls.cert = Some(cert.into());
        self.config.tls.key = Some(key.into());
        self
    }

    /// Mutual TLS: client certificates chaining to a CA of `ca` (PEM) and matching `peer` (`sha256:<hex>` or
    /// `dns:<name>`, then `=[DELEGATE_ID@]DOMAIN`) authenticate as that peer (repeatable with more peers).
    #[must_use]
    pub fn client_cert(mut self, ca: impl Into<PathBuf>, peer: impl Into<String>) -> Self {
        self.config.tls.client_ca = Some(ca.into());
        self.config.tls.client_cert_peers.push(peer.into());
        self
    }

    /// Keeps sessions, the replay window and task results in this store: `memory`, `sqlite:PATH` (feature `sqlite`)
    /// or a Redis URL (feature `redis`).
    #[must_use]
    pub fn store(mut self, url: impl Into<String>) -> Self {
        self.config.store.url = url.into();
        self
    }

    /// Allows each peer `rate` requests (`50/s`, `600/m`); beyond it 429 with Retry-After.
    #[must_use]
    pub fn rate_limit(mut self, rate: impl Into<String>) -> Self {
        self.config.connections.rate_limit = Some(rate.into());
        self
    }

    /// Exports the spans of every message over OTLP/HTTP to this collector (feature `otel`).
    #[must_use]
    pub fn otlp(mut self, endpoint: impl Into<String>) -> Self {
        self.config.telemetry.otlp_endpoint = Some(endpoint.into());
        self
    }

    /// Also serves the skills as MCP tools at `/mcp` (feature `mcp`).
    #[must_use]
    pub fn mcp(mut self) -> Self {
        self.config.mcp.enabled = true;
        self
    }

    /// Also serves the delegate as an A2A agent at `/a2a` (feature `a2a`).
    #[must_use]
    pub fn a2a(mut self) -> Self {
        self.config.a2a.enabled = true;
        self
    }

    /// The identity card and the runtime serving it (for a transport of your own). Only the identity, skills,
    /// signing and limits of the configuration apply: the rest belongs to a server.
    pub fn runtime(self) -> Result<DelegateRuntime, Error> {
        let (config, skills) = self.into_parts()?;
        crate::launch::runtime(&config, skills, "", &mut Vec::new())
    }

    /// The configuration and the skills, the card listing them.
    fn into_parts(self) -> Result<(ServerConfig, Skillset), Error> {
        if let Some(name) = self.duplicate {
            return Err(Error::DuplicateSkill(name));
        }
        let id = DelegateId::new(self.id.as_str()).map_err(|_| Error::InvalidDelegateId(self.id.clone()))?;
        let display = self.name.unwrap_or_else(|| self.id.trim_start_matches(DelegateId::PREFIX).to_owned());
        let mut card = IdentityCard::new(id, display, self.model.0, self.model.1);
        // `extract` reads a semantic frame as well as text into a skill's input type.
        card.supported_payload_modes = vec![PayloadMode::SemanticFrame, PayloadMode::Text];
        let mut skills = HashMap::new();
        for (capability, handler) in self.skills {
            skills.insert(capability.name.clone(), handler);
            card.capabilities.push(capability);
        }
        let skills = Skillset {
            card,
            delegate: Arc::new(Skills(skills)),
            cancel_grace: self.cancel_grace,
            limits: self.limits,
            signing_key: self.signing_key,
        };
        Ok((self.config, skills))
    }

    /// An axum app answering LDP over HTTP (RFC 8: identity, messages, SSE stream) and WebSocket (`/ldp/ws`), to
    /// mount in an existing app, with the configuration's tokens, body and rate limits. Call it within a tokio
    /// runtime: it starts the task that reaps expired sessions there (without one, sessions expire when next
    /// touched). TLS, connection limits and the store belong to a server ([`DelegateBuilder::spawn`]).
    pub fn router(self) -> Result<axum::Router, Error> {
        let (config, skills) = self.into_parts()?;
        let (runtime, app) = crate::launch::app(&config, skills)?;
        if tokio::runtime::Handle::try_current().is_ok() {
            // Detached: it runs as long as the runtime, which is as long as the app can be served.
            drop(runtime.spawn_reaper());
        }
        Ok(app)
    }

    /// Binds `addr` (`127.0.0.1:0` for a free port) and serves there on a background task: HTTP (HTTPS with
    /// [`DelegateBuilder::tls`]) and WebSocket on one port, with everything the configuration sets.
    pub async fn spawn(mut self, addr: impl std::fmt::Display) -> Result<Server, Error> {
        self.config.bind = addr.to_string();
        let (config, skills) = self.into_parts()?;
        crate::launch::launch(config, Some(skills)).await
    }

    /// Serves on `addr` until SIGINT (Ctrl-C) or SIGTERM, then shuts down gracefully ([`Server::shutdown`]).
    pub async fn serve(self, addr: impl std::fmt::Display) -> Result<(), Error> {
        let signal = crate::launch::shutdown_signal()?;
        self.serve_until(addr, signal).await
    }

    /// Serves on `addr` until `stop` resolves, then shuts down gracefully ([`Server::shutdown`]).
    pub async fn serve_until(
        self,
        addr: impl std::fmt::Display,
        stop: impl Future<Output = ()> + Send,
    ) -> Result<(), Error> {
        let server = self.spawn(addr).await?;
        stop.await;
        server.shutdown().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ldp_session::HeldLimits;

    /// The limits given to the builder are the machine's, whichever binding serves it: the WebSocket binding kept
    /// its own copy of the held-answer limits and wrote it over the machine's.
    #[tokio::test]
    async fn the_builders_limits_are_the_machines_over_every_binding() {
        let held = HeldLimits { per_session_results: 3, ttl: Duration::from_secs(5), ..HeldLimits::default() };
        let limits = Limits { held, max_sessions: 7, ..Limits::default() };
        let builder = Delegate::builder("ldp:delegate:limited").limits(limits);
        let (config, skills) = builder.into_parts().expect("a valid builder");
        let (runtime, _app) = crate::launch::app(&config, skills).expect("an app");
        let served = runtime.limits();
        assert_eq!((served.held, served.max_sessions), (held, 7));
    }
}
