//! Other delegates as a model's tools, chosen by the router (feature `llm`): [`RouterTools`] offers the skills of
//! every delegate in a [`Registry`] to an [`LlmDelegate`](ldp_llm::LlmDelegate), and runs each call with
//! [`Registry::route_and_submit`]: the delegate picked by verified quality, cost, latency and trust, with failover,
//! under the child contract the tool loop gives it.
//!
//! ```no_run
//! # async fn run() -> Result<(), ldp::Error> {
//! use std::sync::Arc;
//! use ldp::delegates::RouterTools;
//! use ldp_llm::{EchoBackend, LlmDelegate, ToolLoopLimits};
//!
//! let tools = RouterTools::over(&["http://summarizer:8080", "http://translator:8080"], ldp::ConnectOptions::new()).await?;
//! let planner = LlmDelegate::new(Arc::new(EchoBackend)).with_toolbox(Arc::new(tools), ToolLoopLimits::default());
//! # let _ = planner; Ok(()) }
//! ```

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use ldp_llm::{ToolOutcome, ToolRun, ToolSpec, Toolbox};
use ldp_router::{
    DiscoveryError, Endpoint, LdpAdapter, NoScore, Registry, RegistryConfig, RouteErrorKind, RouteTask,
    SchemeDispatcher, SharedTransport, TrustedIssuers,
};
use ldp_session::SystemClock;
use ldp_transport_http::{ConnectOptions, HttpTransport};
use ldp_types::{DelegationContract, FailurePolicy, LdpError, RawJson, codes};
use serde_json::{Value, json};

use crate::Error;
use crate::issuers::{FetchLimits, IssuerFetcher, IssuerRefresher, IssuerSource, RefreshPolicy, TrustTarget};

/// The member a skill's non-object input travels in, since providers want an object of arguments.
const WRAPPED: &str = "input";

/// The skills of the delegates in a [`Registry`], as tools routed by it.
#[derive(Debug, Clone)]
pub struct RouterTools {
    registry: Arc<Registry>,
    /// The tasks keeping issuers' documents fresh in the registry; they stop with the last clone.
    _refreshers: Arc<Refreshers>,
}

/// Aborts the issuer refreshers when the tools are dropped, so that a stopped server leaves no fetch loop behind.
#[derive(Debug, Default)]
struct Refreshers(Vec<tokio::task::JoinHandle<()>>);

impl Drop for Refreshers {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

/// Who vouches for the delegates' quality: the attestation issuers a [`RouterTools`] trusts (pinned keys), and
/// those among them whose key sets and revocation lists it fetches and keeps fresh.
#[derive(Debug, Clone, Default)]
pub struct IssuerTrust {
    /// The pinned keys; an attestation on a delegate's card counts once it verifies against them.
    pub trusted: TrustedIssuers,
    /// Issuers to fetch at start (a failure stops the start) and refresh on their schedule; from then on their
    /// attestations count only while a fresh revocation list from them is held.
    pub fetched: Vec<IssuerSource>,
}

/// One tool: the skill it routes to, whether its input is wrapped in [`WRAPPED`], and the output schema the card
/// declares for it.
#[derive(Debug, Clone)]
struct Offered {
    spec: ToolSpec,
    skill: String,
    wrapped: bool,
    output_schema: Option<Value>,
}

/// The longest output schema carried as a `check: schema` criterion; a contract's predicate is bounded (4,096
/// bytes), and a longer one would make the whole contract invalid.
const MAX_CHECKED_SCHEMA: usize = 3_500;

impl RouterTools {
    /// The skills of the delegates `registry` holds now and later (the tools are read for each task).
    pub fn new(registry: Arc<Registry>) -> Self {
        Self { registry, _refreshers: Arc::default() }
    }

    /// A registry of the delegates at `urls` (`http(s)://`, `ldp://` resolving to HTTP, and with the feature `a2a`
    /// A2A agents at `a2a://`, `a2a+http://` or `a2a+https://`), reached with
    /// `options`, with the default router configuration and no attestation issuer: the delegates are ranked by
    /// what they claim of themselves. Fails on the first delegate that cannot be discovered.
    pub async fn over(urls: &[impl AsRef<str>], options: ConnectOptions) -> Result<Self, Error> {
        Self::over_trusting(urls, options, IssuerTrust::default()).await
    }

    /// As [`RouterTools::over`], with the attestations of the issuers in `trust` counting: an attested quality
    /// outranks any self-claim, and a card that labels its own score attested without a valid attestation is
    /// counted as self-claimed. The issuers to fetch are fetched before the delegates are discovered (so their
    /// cards' attestations verify at once) and then kept fresh until the tools are dropped.
    pub async fn over_trusting(
        urls: &[impl AsRef<str>],
        options: ConnectOptions,
        trust: IssuerTrust,
    ) -> Result<Self, Error> {
        let registry = Arc::new(registry(options, trust.trusted)?);
        let mut refreshers = Refreshers::default();
        for source in trust.fetched {
            let setup = |e: Error| Error::Setup {
                key: "backend.delegates_issuers".to_owned(),
                source: format!("{}: {e}", source.issuer_id()).into(),
            };
            let fetcher = IssuerFetcher::new(FetchLimits::default()).map_err(setup)?;
            let target = Arc::clone(&registry) as Arc<dyn TrustTarget>;
            let refresher =
                IssuerRefresher::new(source.clone(), fetcher, RefreshPolicy::default(), target, Arc::new(SystemClock));
            refresher.refresh().await.map_err(setup)?;
            refreshers.0.push(refresher.spawn());
        }
        for url in urls {
            registry.add_url(url.as_ref()).await.map_err(|e| Error::Setup {
                key: "backend.delegates".to_owned(),
                source: format!("{}: {e}", url.as_ref()).into(),
            })?;
        }
        Ok(Self { registry, _refreshers: Arc::new(refreshers) })
    }

    /// The registry the tools are routed by.
    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// Every skill of every registered delegate, once, by name (the first description and schema found).
    fn offered(&self) -> BTreeMap<String, Offered> {
        let mut tools = BTreeMap::new();
        for id in self.registry.delegates() {
            let Some(card) = self.registry.card(&id) else { continue };
            for capability in &card.capabilities {
                let name = tool_name(&capability.name);
                if tools.contains_key(&name) {
                    continue;
                }
                let description = capability
                    .description
                    .clone()
                    .unwrap_or_else(|| format!("The skill {} of {}", capability.name, card.name));
                let (input_schema, wrapped) = match &capability.input_schema {
                    Some(schema) if schema.get("type").and_then(Value::as_str) == Some("object") => {
                        (schema.clone(), false)
                    }
                    other => {
                        let inner = other.clone().unwrap_or_else(|| json!({}));
                        (json!({"type": "object", "properties": {WRAPPED: inner}, "required": [WRAPPED]}), true)
                    }
                };
                let spec = ToolSpec::new(name.clone(), description, input_schema);
                let output_schema = capability.output_schema.clone();
                tools.insert(name, Offered { spec, skill: capability.name.clone(), wrapped, output_schema });
            }
        }
        tools
    }
}

/// A skill's name as providers accept a tool's: `[a-zA-Z0-9_-]`, at most 64 characters.
fn tool_name(skill: &str) -> String {
    let name: String =
        skill.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }).collect();
    let name: String = name.chars().take(64).collect();
    if name.is_empty() { "_".to_owned() } else { name }
}

/// A registry reaching delegates over HTTP with `options`, trusting `trusted`.
fn registry(options: ConnectOptions, trusted: TrustedIssuers) -> Result<Registry, Error> {
    let http = move |endpoint: &Endpoint| {
        let transport =
            HttpTransport::with_options(endpoint.url.clone(), options.clone()).map_err(DiscoveryError::adapter)?;
        Ok(Arc::new(transport) as SharedTransport)
    };
    // HTTP only: a factory may not do IO, and opening a WebSocket is IO. Delegates served by `ldp serve` answer
    // HTTP on the same port as their WebSocket.
    let adapter = LdpAdapter::new().with_http(http);
    let dispatcher = with_a2a(SchemeDispatcher::new().with_ldp(adapter));
    let config = RegistryConfig { trusted_issuers: trusted, ..RegistryConfig::default() };
    Registry::new(config, Arc::new(dispatcher), Arc::new(SystemClock))
        .map_err(|e| Error::Setup { key: "backend.delegates".to_owned(), source: e.to_string().into() })
}

/// A2A agents by their `a2a://`, `a2a+http://` or `a2a+https://` URL (feature `a2a`): each is bridged in process,
/// its skills offered as tools like an LDP delegate's.
#[cfg(feature = "a2a")]
fn with_a2a(dispatcher: SchemeDispatcher) -> SchemeDispatcher {
    use ldp_bridge::a2a::{A2A_SCHEMES, A2aTransport, BackendLimits};
    let bridge = |url: &str| {
        let id = a2a_delegate_id(url).map_err(DiscoveryError::adapter)?;
        Ok(Arc::new(A2aTransport::new(url, id, None, BackendLimits::default())) as SharedTransport)
    };
    let bridge: Arc<dyn ldp_router::TransportFactory> = Arc::new(bridge);
    A2A_SCHEMES.iter().fold(dispatcher, |dispatcher, (scheme, _)| dispatcher.register(scheme, Arc::clone(&bridge)))
}

#[cfg(not(feature = "a2a"))]
fn with_a2a(dispatcher: SchemeDispatcher) -> SchemeDispatcher {
    dispatcher
}

/// The id an A2A agent is known by, from where it is: `ldp:delegate:a2a-HOST-PORT` (an A2A card names no LDP id).
#[cfg(feature = "a2a")]
fn a2a_delegate_id(url: &str) -> Result<ldp_types::DelegateId, ldp_types::Error> {
    let place = url.split_once("://").map_or(url, |(_, rest)| rest);
    let place = place.split(['/', '?', '#']).next().unwrap_or_default();
    let name: String = place.chars().map(|c| if c.is_ascii_alphanumeric() || c == '.' { c } else { '-' }).collect();
    ldp_types::DelegateId::new(format!("ldp:delegate:a2a-{name}"))
}

/// `contract` with the card's output schema as a success criterion (`check: schema ...`): the sub-delegate's answer
/// is checked against what its card declares, by the contract rules every initiator applies (a `fail_closed`
/// violation comes back typed, `CONTRACT_VIOLATED`), and the router learns from it. A tool call without a contract
/// gets one for that check alone.
fn with_output_check(contract: Option<DelegationContract>, tool: &Offered) -> Option<DelegationContract> {
    let Some(schema) = tool.output_schema.as_ref().map(Value::to_string).filter(|s| s.len() <= MAX_CHECKED_SCHEMA)
    else {
        return contract;
    };
    let mut contract = contract.unwrap_or_else(|| {
        DelegationContract::new(format!("tool-{}", tool.skill), format!("tool {}", tool.skill))
            .with_failure_policy(FailurePolicy::FailClosed)
    });
    contract.success_criteria.push(format!("check: schema {schema}"));
    Some(contract)
}

#[async_trait]
impl Toolbox for RouterTools {
    fn tools(&self) -> Vec<ToolSpec> {
        self.offered().into_values().map(|o| o.spec).collect()
    }

    async fn run(&self, call: ToolRun<'_>) -> Result<ToolOutcome, LdpError> {
        let offered = self.offered();
        let Some(tool) = offered.get(call.tool) else {
            return Err(LdpError::capability(codes::SKILL_NOT_FOUND, format!("no delegate offers {:?}", call.tool)));
        };
        // What the model sent and the schema it was offered, for whoever audits a model's calls (`scripts/smollm2`
        // checks every call against its schema from this line). Debug only: the arguments may carry user data.
        tracing::debug!(tool = call.tool, skill = %tool.skill, arguments = %call.arguments,
            schema = %tool.spec.input_schema, "routing a tool call");
        let input =
            if tool.wrapped { call.arguments.get(WRAPPED).cloned().unwrap_or(Value::Null) } else { call.arguments };
        let mut task = RouteTask::new(tool.skill.clone(), RawJson::from(input));
        task.contract = with_output_check(call.contract, tool);
        match self.registry.route_and_submit(&task, &NoScore).await {
            Ok(routed) => Ok(ToolOutcome::new(routed.output, routed.provenance).with_skill(tool.skill.as_str())),
            Err(e) => Err(match e.kind {
                RouteErrorKind::Escalated { error, .. } => error,
                RouteErrorKind::Selection(why) => {
                    LdpError::capability(codes::SKILL_NOT_FOUND, format!("no delegate to run {}: {why}", tool.skill))
                }
                other => LdpError::policy(codes::CONTRACT_VIOLATED, other.to_string()),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skill_names_become_names_providers_accept() {
        assert_eq!(tool_name("summarize"), "summarize");
        assert_eq!(tool_name("translate.fr en"), "translate_fr_en");
        assert_eq!(tool_name(""), "_");
        assert_eq!(tool_name(&"x".repeat(100)).len(), 64);
    }
}
