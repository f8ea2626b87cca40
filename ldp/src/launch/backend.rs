//! What answers tasks when no skills are given in code: the echo delegate, a language model (feature `llm`, and
//! `local-llm` for GGUF files in process), or an MCP server or A2A agent bridged in (features `mcp`, `a2a`); and the
//! routes by which the delegate is itself an MCP server and an A2A agent.

use std::sync::Arc;
use std::time::Duration;

use ldp_session::runtime::{Delegate as RunDelegate, EchoDelegate};
use ldp_types::{Capability, ClaimType, DelegateId, IdentityCard, PayloadMode, Score, TrustDomain};

use super::edge::FileError;
use crate::Error;
use crate::config::{BackendKind, ServerConfig};

/// A started backend: its card, its delegate, banner lines, and its skill prompts.
pub(super) struct Answered {
    pub(super) card: IdentityCard,
    pub(super) delegate: Arc<dyn RunDelegate>,
    pub(super) describe: Vec<String>,
    pub(super) prompts: Prompts,
}

/// How one skill's template renders a task input (the model backend's own code).
pub(super) type Render = Arc<dyn Fn(&str) -> String + Send + Sync>;

/// The skills whose model prompt is a template: name, description and how it renders (served as MCP prompts).
pub(super) type Prompts = Vec<(String, String, Render)>;

fn setup(key: &str, source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Error {
    Error::Setup { key: key.to_owned(), source: source.into() }
}

fn delegate_id(config: &ServerConfig, default: &str) -> Result<DelegateId, Error> {
    let id = config.identity.delegate_id.as_deref().unwrap_or(default);
    DelegateId::new(id).map_err(|_| Error::InvalidDelegateId(id.to_owned()))
}

/// Starts (or loads, or discovers) the configured backend.
pub(super) async fn start(config: &ServerConfig, request_timeout: Duration) -> Result<Answered, Error> {
    let domain = config.identity.trust_domain.as_deref().unwrap_or("default");
    let mut answered = match config.backend.kind {
        None => {
            let card = echo_card(delegate_id(config, "ldp:delegate:echo")?, domain)?;
            Answered { card, delegate: Arc::new(EchoDelegate), describe: Vec::new(), prompts: Vec::new() }
        }
        Some(kind) if kind.is_bridge() => bridged(config, kind, request_timeout).await?,
        Some(_) => model(config).await?,
    };
    answered.card.trust_domain = TrustDomain::new(domain);
    if let Some(path) = &config.identity.card {
        let text = std::fs::read_to_string(path)
            .map_err(|e| setup("identity.card", FileError { path: path.clone(), source: e }))?;
        answered.card = IdentityCard::from_json(&text).map_err(|e| setup("identity.card", e))?;
    }
    Ok(answered)
}

/// The echo delegate's card: skill `echo`, semantic frames and text. The reference clients send raw input even
/// after negotiating `semantic_frame`; the responder's transparent fallback runs such tasks in text.
pub(crate) fn echo_card(id: DelegateId, domain: &str) -> Result<IdentityCard, Error> {
    let mut card = IdentityCard::new(id, "Echo", "echo", "1.0");
    card.description = Some("Answers every task with {\"echo\": <input>}".into());
    card.context_window = 4096;
    // An echo is exact and immediate; the claim says so, and says it is only the delegate's own word.
    let exact = Score::new(1.0).map_err(|e| setup("backend", e))?;
    let echo = Capability::new("echo")
        .with_description("Echoes its input")
        .with_quality(exact, ClaimType::SelfClaimed)
        .with_latency_p50_ms(1);
    card.capabilities.push(echo);
    card.trust_domain = TrustDomain::new(domain);
    card.supported_payload_modes = vec![PayloadMode::SemanticFrame, PayloadMode::Text];
    Ok(card)
}

/// A language model behind the delegate.
#[cfg(feature = "llm")]
async fn model(config: &ServerConfig) -> Result<Answered, Error> {
    use ldp_llm::{
        AnthropicBackend, ApiKey, EchoBackend, HttpOptions, LlmBackend, LlmDelegate, OpenAiBackend, PriceTable,
        PromptTemplate,
    };
    let b = &config.backend;
    let kind = b.kind.unwrap_or(BackendKind::Echo);
    #[cfg_attr(not(feature = "local-llm"), allow(unused_mut))] // Only a local model knows its own window.
    let mut context_window = b.context_window.unwrap_or(match kind {
        BackendKind::Anthropic => 200_000,
        BackendKind::Openai => 8192,
        _ => 4096,
    });
    let mut opts = HttpOptions::default();
    opts.request_timeout = b.timeout.max(Duration::from_secs(1));
    opts.idle_timeout = opts.request_timeout;
    opts.max_retries = b.retries;
    let model = b.model.clone().unwrap_or_default();
    let key = |default_var: &str| -> Result<Option<ApiKey>, Error> {
        match &b.api_key_env {
            Some(var) => ApiKey::from_env(var).map(Some).map_err(|e| setup("backend.api_key_env", e)),
            None => Ok(ApiKey::from_env(default_var).ok()),
        }
    };
    let backend: Arc<dyn LlmBackend> = match kind {
        BackendKind::Openai => {
            let url = b.base_url.as_deref().unwrap_or("https://api.openai.com/v1");
            Arc::new(
                OpenAiBackend::new(url, model, key("OPENAI_API_KEY")?, opts)
                    .map_err(|e| setup("backend.base_url", e))?,
            )
        }
        BackendKind::Anthropic => {
            let url = b.base_url.as_deref().unwrap_or("https://api.anthropic.com");
            let max = b.max_tokens.unwrap_or(1024);
            let key = key("ANTHROPIC_API_KEY")?;
            Arc::new(AnthropicBackend::new(url, model, key, max, opts).map_err(|e| setup("backend.base_url", e))?)
        }
        #[cfg(feature = "local-llm")]
        BackendKind::Local => {
            let local = local(config)?;
            context_window = local.context_window() as u64;
            Arc::new(local)
        }
        #[cfg(not(feature = "local-llm"))]
        BackendKind::Local => {
            return Err(Error::FeatureMissing { key: "backend.kind = \"local\"", feature: "local-llm" });
        }
        _ => Arc::new(EchoBackend),
    };
    let info = backend.info();
    let describe = vec![format!("backend {} model {}", info.provider, info.model)];
    let mut delegate = LlmDelegate::new(backend).with_streaming(!b.no_stream);
    if let Some(path) = &b.system_prompt {
        let text = std::fs::read_to_string(path)
            .map_err(|e| setup("backend.system_prompt", FileError { path: path.clone(), source: e }))?;
        delegate = delegate.with_system_prompt(text.trim_end());
    }
    let mut prompts: Prompts = Vec::new();
    if !b.skills.is_empty() {
        let mut skills = Vec::new();
        for entry in &b.skills {
            let (name, template) = match entry.split_once('=') {
                Some((name, file)) => {
                    let text = std::fs::read_to_string(file).map_err(|e| {
                        setup("backend.skills", FileError { path: std::path::PathBuf::from(file), source: e })
                    })?;
                    (name, PromptTemplate::new(text))
                }
                None => (entry.as_str(), PromptTemplate::identity()),
            };
            if name.is_empty() || name.chars().any(char::is_whitespace) {
                return Err(setup("backend.skills", format!("{entry:?}: a skill name is one word")));
            }
            if template != PromptTemplate::identity() {
                let render = template.clone();
                let description = format!("The prompt skill {name} sends its model, the task input filled in");
                prompts.push((name.to_owned(), description, Arc::new(move |input: &str| render.render(input))));
            }
            skills.push((name.to_owned(), template));
        }
        delegate = delegate.with_skills(skills);
    }
    if let Some(max) = b.max_tokens {
        delegate = delegate.with_max_tokens(max);
    }
    if let Some(path) = &b.prices {
        let text = std::fs::read_to_string(path)
            .map_err(|e| setup("backend.prices", FileError { path: path.clone(), source: e }))?;
        delegate = delegate.with_prices(PriceTable::from_json(&text).map_err(|e| setup("backend.prices", e))?);
    }
    let mut describe = describe;
    if !b.delegates.is_empty() {
        if b.tool_rounds == 0 {
            return Err(setup("backend.tool_rounds", "at least 1 with delegates"));
        }
        let mut options = ldp_transport_http::ConnectOptions::new();
        options.token_source = delegates_token_source(b)?;
        let tools = crate::delegates::RouterTools::over_trusting(&b.delegates, options, issuer_trust(b)?).await?;
        let mut limits = ldp_llm::ToolLoopLimits::default();
        limits.max_rounds = b.tool_rounds;
        limits.call_timeout = b.timeout.max(Duration::from_secs(1));
        describe.push(format!("tools: the skills of {} delegate(s)", b.delegates.len()));
        delegate = delegate.with_toolbox(Arc::new(tools), limits);
    }
    let card = delegate.card(delegate_id(config, "ldp:delegate:llm")?, context_window);
    Ok(Answered { card, delegate: Arc::new(delegate), describe, prompts })
}

#[cfg(not(feature = "llm"))]
async fn model(_: &ServerConfig) -> Result<Answered, Error> {
    Err(Error::FeatureMissing { key: "backend.kind", feature: "llm" })
}

/// A GGUF model loaded into this process (seconds).
#[cfg(feature = "local-llm")]
fn local(config: &ServerConfig) -> Result<ldp_llm_local::LocalBackend, Error> {
    use ldp_llm_local::{LocalBackend, LocalOptions, Sampling};
    let b = &config.backend;
    let path = b.model.as_deref().unwrap_or_default();
    let mut options = LocalOptions::default();
    options.context_window = b.context_window.map(|n| usize::try_from(n).unwrap_or(usize::MAX));
    options.default_max_tokens = b.max_tokens.map_or(512, |n| usize::try_from(n).unwrap_or(usize::MAX));
    if let Some(temperature) = b.temperature {
        options.sampling = Sampling::Temperature { temperature, top_p: b.top_p, seed: b.seed };
    }
    options.repeat_penalty = b.repeat_penalty;
    options.max_concurrent = b.max_concurrent;
    options.threads = b.threads;
    options.engine = match b.engine {
        Some(crate::config::LocalEngine::Candle) => ldp_llm_local::Engine::Candle,
        Some(_) => ldp_llm_local::Engine::Llama,
        None if cfg!(feature = "llama") => ldp_llm_local::Engine::Llama,
        None => ldp_llm_local::Engine::Candle,
    };
    options.precision = match b.precision {
        crate::config::Precision::Quantized => ldp_llm_local::Precision::Quantized,
        _ => ldp_llm_local::Precision::F32,
    };
    LocalBackend::load(path, options).map_err(|e| setup("backend.model", format!("{path}: {e}")))
}

#[cfg(any(feature = "mcp", feature = "a2a"))]
/// The longest a bridged call may run: a second less than the request waiting for it, so that it is cancelled and
/// answered before the request is cut.
fn bridged_call_timeout(request_timeout: Duration) -> Duration {
    request_timeout.saturating_sub(Duration::from_secs(1)).max(Duration::from_secs(1))
}

/// An MCP server (started, or at a URL) or an A2A agent (discovered) whose tools or skills are the delegate's.
async fn bridged(config: &ServerConfig, kind: BackendKind, request_timeout: Duration) -> Result<Answered, Error> {
    #[cfg(any(feature = "mcp", feature = "a2a"))]
    let b = &config.backend;
    #[cfg(not(any(feature = "mcp", feature = "a2a")))]
    let _ = (config, request_timeout);
    match kind {
        #[cfg(feature = "mcp")]
        BackendKind::Mcp => {
            use ldp_bridge::mcp::McpDelegate;
            let mut limits = ldp_bridge::mcp::BackendLimits::default();
            limits.call_timeout = bridged_call_timeout(request_timeout);
            let delegate = if let Some(url) = b.mcp_url.as_deref() {
                McpDelegate::connect_url(url, b.mcp_token.as_deref(), limits)
                    .await
                    .map_err(|e| setup("backend.mcp_url", e))?
            } else {
                let command = b.mcp_command.as_deref().unwrap_or_default();
                let mut words = command.split_whitespace().map(str::to_owned);
                let program = words.next().ok_or_else(|| setup("backend.mcp_command", "empty command"))?;
                McpDelegate::spawn_command(&program, &words.collect::<Vec<_>>(), limits)
                    .await
                    .map_err(|e| setup("backend.mcp_command", e))?
            };
            let describe = vec![format!("backend mcp server {} {}", delegate.server().name, delegate.server().version)];
            let card = delegate.card(delegate_id(config, "ldp:delegate:mcp")?);
            Ok(Answered { card, delegate: Arc::new(delegate), describe, prompts: Vec::new() })
        }
        #[cfg(feature = "a2a")]
        BackendKind::A2a => {
            use ldp_bridge::a2a::A2aDelegate;
            let url = b.a2a_url.as_deref().unwrap_or_default();
            let mut limits = ldp_bridge::a2a::BackendLimits::default();
            limits.call_timeout = bridged_call_timeout(request_timeout);
            let delegate = A2aDelegate::discover(url, b.a2a_token.clone(), limits)
                .await
                .map_err(|e| setup("backend.a2a_url", e))?;
            let describe = vec![format!("backend a2a agent {} {}", delegate.agent().name, delegate.agent().version)];
            let card = delegate.card(delegate_id(config, "ldp:delegate:a2a")?);
            Ok(Answered { card, delegate: Arc::new(delegate), describe, prompts: Vec::new() })
        }
        #[cfg(not(feature = "mcp"))]
        BackendKind::Mcp => Err(Error::FeatureMissing { key: "backend.kind = \"mcp\"", feature: "mcp" }),
        #[cfg(not(feature = "a2a"))]
        BackendKind::A2a => Err(Error::FeatureMissing { key: "backend.kind = \"a2a\"", feature: "a2a" }),
        // A model, not a bridge: `start` sends those to `model`.
        _ => model(config).await,
    }
}

/// The authenticated routes the bridges add (`/mcp`, `/a2a`), and the public ones (the Agent Card). The Agent Card
/// is public, as the LDP identity card is: A2A clients read it to learn how to authenticate.
#[cfg(any(feature = "mcp", feature = "a2a"))]
#[allow(clippy::too_many_arguments)] // Each is one piece of the launch the bridges read; a struct would only rename them.
pub(super) fn bridge_routes(
    runtime: &ldp_session::runtime::DelegateRuntime,
    config: &ServerConfig,
    prompts: &Prompts,
    http: &ldp_transport_http::HttpServerConfig,
    url: &str,
    certs_required: bool,
    stop: &tokio_util::sync::CancellationToken,
    describe: &mut Vec<String>,
) -> (axum::Router<ldp_transport_http::HttpState>, axum::Router) {
    let mut protected = axum::Router::new();
    #[cfg_attr(not(feature = "a2a"), allow(unused_mut))]
    let mut public = axum::Router::new();
    #[cfg(not(feature = "mcp"))]
    let _ = prompts;
    #[cfg(feature = "mcp")]
    if config.mcp.enabled {
        let m = &config.mcp;
        let mut limits = ldp_bridge::mcp::McpLimits::default();
        limits.max_sessions = m.max_sessions.max(1);
        limits.max_calls = m.max_calls.max(1);
        limits.max_calls_per_session = m.max_calls_per_session.max(1);
        limits.session_idle = m.session_idle.max(Duration::from_secs(1));
        limits.call_timeout = http.request_timeout;
        limits.max_body = http.max_body;
        if m.allowed_hosts.iter().any(|h| h == "*") {
            limits.allowed_hosts.clear();
        } else {
            let bind = config.bind.as_str();
            let host = bind.rsplit_once(':').map_or(bind, |(host, _)| host).trim_matches(['[', ']']);
            if !host.is_empty() && host != "0.0.0.0" && host != "::" {
                limits.allowed_hosts.push(host.to_owned());
            }
            limits.allowed_hosts.extend(m.allowed_hosts.iter().cloned());
        }
        let upstream = Arc::new(ldp_bridge::InProcess::new(runtime.clone()));
        let prompts = prompts
            .iter()
            .map(|(name, description, render)| ldp_bridge::mcp::SkillPrompt::new(name, description, render.clone()))
            .collect();
        protected = protected.merge(ldp_bridge::mcp::routes_with_prompts(upstream, limits, prompts, stop.clone()));
        describe.push(format!("MCP (Streamable HTTP) at {{url}}{}", ldp_bridge::mcp::PATH));
    }
    #[cfg(feature = "a2a")]
    if config.a2a.enabled {
        let a = &config.a2a;
        let mut limits = ldp_bridge::a2a::A2aLimits::default();
        limits.max_contexts = a.max_contexts.max(1);
        limits.max_tasks = a.max_tasks.max(1);
        limits.max_running = a.max_running.max(1);
        limits.context_idle = a.context_idle.max(Duration::from_secs(1));
        limits.task_ttl = a.task_ttl.max(Duration::from_secs(1));
        limits.call_timeout = bridged_call_timeout(http.request_timeout);
        limits.max_body = a.max_body.map_or(http.max_body, super::edge::usize_of).min(http.max_body);
        limits.push.enabled = a.push;
        limits.push.allow_private = a.push_allow_private;
        limits.push.allowed_hosts.clone_from(&a.push_allowed_hosts);
        limits.push.attempts = a.push_attempts.max(1);
        limits.push.timeout = a.push_timeout.max(Duration::from_millis(100));
        let upstream = Arc::new(ldp_bridge::InProcess::new(runtime.clone()).with_initiator(ldp_bridge::A2A_BRIDGE_ID));
        protected = protected.merge(ldp_bridge::a2a::routes(upstream.clone(), limits, stop.clone()));
        let card = ldp_bridge::a2a::CardOptions {
            base_url: url.to_owned(),
            bearer: !http.tokens.is_empty() || http.jwt.is_some(),
            mutual_tls: certs_required,
            oidc: http.jwt.as_ref().map(|jwt| ldp_bridge::a2a::CardOidc {
                issuer: jwt.config().issuer.clone(),
                required_scopes: jwt.config().required_scopes.clone(),
                skill_scopes: super::edge::skill_scopes(config),
            }),
            push_notifications: a.push,
        };
        public = public.merge(ldp_bridge::a2a::card_routes(upstream, card));
        let (card, rpc) = (ldp_bridge::a2a::CARD_PATH, ldp_bridge::a2a::RPC_PATH);
        describe
            .push(format!("A2A {} (JSON-RPC) at {{url}}{rpc}, Agent Card at {{url}}{card}", ldp_bridge::a2a::VERSION));
    }
    let _ = (url, certs_required);
    (protected, public)
}

#[cfg(feature = "llm")]
/// The attestation issuers `backend.delegates_issuers` pins (checked when the configuration was read).
#[cfg(feature = "llm")]
fn issuer_trust(b: &crate::config::BackendConfig) -> Result<crate::delegates::IssuerTrust, Error> {
    let mut trust = crate::delegates::IssuerTrust::default();
    for entry in &b.delegates_issuers {
        let bad = |why: String| setup("backend.delegates_issuers", why);
        let pin = crate::config::units::issuer_pin(entry).map_err(bad)?;
        let trusted = std::mem::take(&mut trust.trusted);
        trust.trusted = trusted.trust_key(pin.issuer_id, pin.key_id, pin.key).map_err(|e| bad(e.to_string()))?;
        if let Some(url) = pin.url {
            trust.fetched.push(crate::issuers::IssuerSource::new(pin.issuer_id, url).map_err(|e| bad(e.to_string()))?);
        }
    }
    Ok(trust)
}

/// Where the bearer token for `backend.delegates` comes from: a command, or OAuth client credentials with the
/// secret from the named environment variable; `None` for no token.
#[cfg(feature = "llm")]
fn delegates_token_source(
    b: &crate::config::BackendConfig,
) -> Result<Option<Arc<dyn ldp_transport_http::TokenSource>>, Error> {
    if let Some(command) = &b.delegates_token_command {
        return Ok(Some(Arc::new(ldp_transport_http::CommandToken::new(command.clone()))));
    }
    let (Some(url), Some(client_id)) = (&b.delegates_oauth_token_url, &b.delegates_oauth_client_id) else {
        return Ok(None);
    };
    let key = "backend.delegates_oauth_client_secret_env";
    let secret = std::env::var(&b.delegates_oauth_client_secret_env)
        .map_err(|_| setup(key, format!("the variable {} is not set", b.delegates_oauth_client_secret_env)))?;
    let source = ldp_transport_http::ClientCredentials::new(url.clone(), client_id.clone(), secret)
        .map_err(|e| setup("backend.delegates_oauth_token_url", e))?
        .scopes(b.delegates_oauth_scopes.clone());
    let source = match &b.delegates_oauth_audience {
        Some(audience) => source.audience(audience.clone()),
        None => source,
    };
    Ok(Some(Arc::new(source)))
}
