//! Run with: cargo run -p ldp-examples --example routing
//!
//! Identity-aware routing over real HTTP. Three delegates offer `summarize` on 127.0.0.1:
//!
//! * `honest` claims 0.80 about itself and delivers about 0.85;
//! * `inflator` claims 0.99 about itself and delivers 0.30;
//! * `vetted` claims 0.70, and carries an attestation of 0.88 signed by an evaluation service the operator trusts.
//!
//! The router discovers them by `ldp+http://` URL (fetching their identity cards), explains one selection, then
//! routes twenty tasks with `route_and_submit`, scoring each output with the caller's own scorer; the inflator's
//! claim buys it a task or two at most.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use async_trait::async_trait;
use ldp_router::{
    AttestationClaim, DiscoveryError, Endpoint, ExplainDepth, LdpAdapter, Quality, Registry, RegistryConfig, RouteTask,
    SchemeDispatcher, ScoreFn, SelectionRequest, SharedTransport, Strategy, TrustedIssuers, resolve_ldp_url,
    sign_attestation,
};
use ldp_session::runtime::{Delegate, DelegateRuntime, TaskContext};
use ldp_session::{Responder, ResponderConfig, SeededIds, SystemClock, TaskOutput, TaskRequest, WallClock};
use ldp_transport_http::{HttpServerConfig, HttpState, HttpTransport, ServerHandle};
use ldp_types::signing::SigningKey;
use ldp_types::{Capability, ClaimType, CostTier, DelegateId, IdentityCard, LdpError, Score};
use serde_json::{Value, json};

/// Answers every task, reporting the quality it really has (a stand-in for a verifier's judgement).
struct Simulated(f64);

#[async_trait]
impl Delegate for Simulated {
    async fn execute(&self, task: TaskRequest, _ctx: TaskContext) -> Result<TaskOutput, LdpError> {
        Ok(TaskOutput::new(json!({ "summary": format!("summary of {}", task.input), "quality": self.0 })))
    }
}

fn card(name: &str, claimed: f64, cost_usd: f64, latency_ms: u64) -> IdentityCard {
    let mut card = IdentityCard::new(DelegateId::from_name(name).unwrap(), name, "sim", "1");
    card.jurisdiction = Some("eu-west".into());
    card.capabilities.push(
        Capability::new("summarize")
            .with_quality(Score::new(claimed).unwrap(), ClaimType::SelfClaimed)
            .with_latency_p50_ms(latency_ms)
            .with_cost(cost_usd, CostTier::Low),
    );
    card
}

async fn serve(card: IdentityCard, quality: f64) -> ServerHandle {
    let responder =
        Responder::new(ResponderConfig::new(card), Arc::new(SystemClock), Box::new(SeededIds::from_entropy()));
    let runtime = DelegateRuntime::new(responder, Arc::new(Simulated(quality)));
    ldp_transport_http::spawn("127.0.0.1:0", HttpState::new(runtime, HttpServerConfig::default())).await.unwrap()
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    // An evaluation service's key; the operator trusts its public half.
    let evals = SigningKey::ed25519_from_seed(&[7; 32]);
    let now = SystemClock.now_utc();
    let attestation = sign_attestation(
        AttestationClaim::new("ldp:delegate:vetted", "summarize", Quality::new(0.88).unwrap(), "ldp:issuer:evals", now)
            .expiring_at(now + std::time::Duration::from_secs(90 * 24 * 3600))
            .with_evidence("https://evals.example/reports/summarize-42"),
        &evals,
    )
    .unwrap();
    let mut vetted = card("vetted", 0.70, 0.02, 900);
    vetted.extra.insert("attestations".into(), json!([attestation.to_value().unwrap()]));

    let servers = vec![
        serve(card("honest", 0.80, 0.01, 700), 0.85).await,
        serve(card("inflator", 0.99, 0.01, 400), 0.30).await,
        serve(vetted, 0.88).await,
    ];

    // The router never names HTTP: the application plugs an HTTP connector into the ldp:// adapter.
    let http = LdpAdapter::new().with_http(|endpoint: &Endpoint| {
        let transport = HttpTransport::new(endpoint.url.clone()).map_err(DiscoveryError::adapter)?;
        Ok(Arc::new(transport) as SharedTransport)
    });
    let dispatcher = SchemeDispatcher::new().with_ldp(http);
    println!("ldp://delegates.example:8443/qwen -> {:?}", resolve_ldp_url("ldp://delegates.example:8443/qwen"));

    let config = RegistryConfig {
        trusted_issuers: TrustedIssuers::new().trust("ldp:issuer:evals", evals.verifying_key()).unwrap(),
        ..RegistryConfig::default()
    };
    let registry = Registry::new(config, Arc::new(dispatcher), Arc::new(SystemClock)).unwrap();
    for server in &servers {
        let registered = registry.add_url(&format!("ldp+http://{}", server.addr())).await.unwrap();
        println!("registered {} for {:?}", registered.delegate_id, registered.skills);
    }

    let request = SelectionRequest::new("summarize").strategy(Strategy::Quality).explain(ExplainDepth::All);
    println!("\n{}\n", registry.select(&request).unwrap());

    let scorer = ScoreFn::caller(|output: &Value| output["quality"].as_f64().map(Quality::saturating));
    let task = RouteTask::new("summarize", json!("the quarterly report")).with_request(request);
    let mut chosen = Vec::new();
    let mut last = None;
    for _ in 0..20 {
        let routed = registry.route_and_submit(&task, &scorer).await.unwrap();
        chosen.push(routed.delegate_id.clone());
        last = Some(routed);
    }
    for id in registry.delegates() {
        println!("{id}: {} of 20 tasks", chosen.iter().filter(|c| **c == id).count());
    }
    if let Some(last) = last {
        println!("\nlast task: {} attempt(s), output {}\n{}", last.attempts.len(), last.output, last.decision);
    }
    for server in servers {
        server.shutdown().await.unwrap();
    }
}
