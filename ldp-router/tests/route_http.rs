//! `route_and_submit` end to end over the real HTTP transport: in-process delegates served by
//! `ldp-transport-http` on 127.0.0.1:0, discovered by `ldp+http://` URLs through the scheme dispatcher.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use ldp_transport_http::ConnectSettings;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use ldp_router::{
    AttestationClaim, ClaimType, DiscoveryError, Endpoint, ExplainDepth, Exploration, FailoverAction, FailoverPolicy,
    GiveUpReason, JudgeScorer, LdpAdapter, LearnerConfig, Quality, Registry, RegistryConfig, RouteErrorKind, RouteTask,
    RouterConfig, SchemeDispatcher, ScoreFn, SelectionRequest, SharedTransport, Strategy, TrustedIssuers, Verdict,
    VerificationSource, sign_attestation,
};
use ldp_session::runtime::{Delegate, DelegateRuntime, TaskContext};
use ldp_session::{Responder, ResponderConfig, SeededIds, SystemClock, TaskOutput, TaskRequest};
use ldp_transport_http::{HttpServerConfig, HttpState, HttpTransport, RetryPolicy, ServerHandle};
use ldp_types::signing::SigningKey;
use ldp_types::{Capability, ClaimType as CardClaimType, DelegateId, IdentityCard, LdpError, Score, codes};
use serde_json::{Value, json};

/// A simulated delegate: answers with its true quality, after failing its first `transient` calls with a
/// retryable runtime error; `refuse` makes it fail every call with a capability error, `forbid` with a policy one;
/// `judge` makes it a judge that answers `{"score": judge}`.
#[derive(Default)]
struct Sim {
    quality: f64,
    transient: AtomicU32,
    refuse: bool,
    forbid: bool,
    judge: Option<f64>,
}

#[async_trait]
impl Delegate for Sim {
    async fn execute(&self, task: TaskRequest, _ctx: TaskContext) -> Result<TaskOutput, LdpError> {
        if self.refuse {
            return Err(LdpError::capability(codes::SKILL_NOT_FOUND, "cannot do that after all"));
        }
        if let Some(score) = self.judge {
            assert!(
                task.input.to_value().unwrap()["output"]["answer"].is_string(),
                "the judge sees the output: {}",
                task.input
            );
            return Ok(TaskOutput::new(json!({ "score": score })));
        }
        if self.forbid {
            return Err(LdpError::policy(codes::CONTRACT_VIOLATED, "not allowed"));
        }
        if self.transient.load(Ordering::SeqCst) > 0 {
            self.transient.fetch_sub(1, Ordering::SeqCst);
            return Err(LdpError::runtime(codes::EXECUTION_FAILED, "model server overloaded").with_retryable(true));
        }
        Ok(TaskOutput::new(json!({ "answer": format!("done: {}", task.input), "quality": self.quality })))
    }
}

fn card(name: &str, skill: &str, claimed: f64, cost: f64) -> IdentityCard {
    let mut card = IdentityCard::new(DelegateId::from_name(name).unwrap(), name, "sim", "1");
    card.capabilities.push(
        Capability::new(skill)
            .with_quality(Score::new(claimed).unwrap(), CardClaimType::SelfClaimed)
            .with_latency_p50_ms(500)
            .with_cost(cost, ldp_types::CostTier::Low),
    );
    card
}

async fn serve(card: IdentityCard, delegate: Sim) -> ServerHandle {
    let responder =
        Responder::new(ResponderConfig::new(card), Arc::new(SystemClock), Box::new(SeededIds::from_entropy()));
    let runtime = DelegateRuntime::new(responder, Arc::new(delegate));
    ldp_transport_http::spawn("127.0.0.1:0", HttpState::new(runtime, HttpServerConfig::default())).await.unwrap()
}

/// `ldp+http://` URL of a server (plain text, loopback).
fn ldp_url(server: &ServerHandle) -> String {
    format!("ldp+http://{}", server.addr())
}

fn registry(exploration: Exploration, trusted: TrustedIssuers) -> Registry {
    let http = LdpAdapter::new().with_http(|endpoint: &Endpoint| {
        let transport = HttpTransport::builder(endpoint.url.clone())
            .retry(RetryPolicy::none())
            .build()
            .map_err(DiscoveryError::adapter)?;
        Ok(Arc::new(transport) as SharedTransport)
    });
    let config = RegistryConfig {
        router: RouterConfig {
            learner: LearnerConfig { exploration, seed: 11, ..LearnerConfig::default() },
            ..RouterConfig::default()
        },
        trusted_issuers: trusted,
        failover: FailoverPolicy { base_backoff: Duration::from_millis(10), ..FailoverPolicy::default() },
        id_seed: Some(5),
        ..RegistryConfig::default()
    };
    Registry::new(config, Arc::new(SchemeDispatcher::new().with_ldp(http)), Arc::new(SystemClock)).unwrap()
}

/// The verification hook: the caller's scorer reads the quality the simulated delegate reports.
fn scorer() -> ScoreFn<impl Fn(&Value) -> Option<Quality> + Send + Sync> {
    ScoreFn::caller(|output: &Value| output["quality"].as_f64().map(Quality::saturating))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routing_learns_to_avoid_the_inflator() {
    let honest = serve(card("honest", "summarize", 0.8, 0.01), Sim { quality: 0.85, ..Sim::default() }).await;
    let inflator = serve(card("inflator", "summarize", 0.99, 0.01), Sim { quality: 0.3, ..Sim::default() }).await;
    let modest = serve(card("modest", "summarize", 0.6, 0.01), Sim { quality: 0.65, ..Sim::default() }).await;
    let registry = registry(Exploration::Thompson, TrustedIssuers::new());
    for server in [&honest, &inflator, &modest] {
        registry.add_url(&ldp_url(server)).await.unwrap();
    }
    let task = RouteTask::new("summarize", json!("the quarterly report"))
        .with_request(SelectionRequest::new("summarize").strategy(Strategy::Quality));
    let mut chosen = Vec::new();
    for _ in 0..30 {
        let routed = registry.route_and_submit(&task, &scorer()).await.unwrap();
        assert_eq!(routed.attempts.len(), 1);
        assert_eq!(routed.provenance.as_ref().unwrap().produced_by, routed.delegate_id);
        assert_eq!(routed.decision.delegate_id, routed.delegate_id);
        assert!(routed.output.to_value().unwrap()["answer"].as_str().unwrap().contains("quarterly report"));
        chosen.push(routed.delegate_id);
    }
    let inflator_id = "ldp:delegate:inflator";
    let early = chosen[..5].iter().filter(|c| *c == inflator_id).count();
    let late = chosen[15..].iter().filter(|c| *c == inflator_id).count();
    assert!(early >= 1, "the inflator's claim wins it early traffic: {chosen:?}");
    assert!(late <= 1, "the inflator keeps traffic: {chosen:?}");
    let honest_late = chosen[15..].iter().filter(|c| *c == "ldp:delegate:honest").count();
    assert!(honest_late >= 12, "{chosen:?}");
    let observed = registry.with_router(|r| r.observed(inflator_id, "summarize")).unwrap();
    assert!(observed.mean < 0.35, "{observed:?}");
    for server in [honest, inflator, modest] {
        server.shutdown().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capability_failure_reroutes_and_a_transient_runtime_failure_is_retried() {
    let refuser =
        serve(card("refuser", "review", 0.99, 0.01), Sim { quality: 0.9, refuse: true, ..Sim::default() }).await;
    let backup = serve(card("backup", "review", 0.6, 0.01), Sim { quality: 0.7, ..Sim::default() }).await;
    let flaky = serve(
        card("flaky", "translate", 0.8, 0.01),
        Sim { quality: 0.8, transient: AtomicU32::new(1), ..Sim::default() },
    )
    .await;
    let registry = registry(Exploration::Greedy, TrustedIssuers::new());
    for server in [&refuser, &backup, &flaky] {
        registry.add_url(&ldp_url(server)).await.unwrap();
    }

    // Capability failure: reroute at once, excluding the delegate that failed.
    let review = RouteTask::new("review", json!("diff --git a/x b/x"))
        .with_request(SelectionRequest::new("review").strategy(Strategy::Quality));
    let routed = registry.route_and_submit(&review, &scorer()).await.unwrap();
    assert_eq!(routed.delegate_id, "ldp:delegate:backup");
    let delegates: Vec<&str> = routed.attempts.iter().map(|a| a.delegate_id.as_str()).collect();
    assert_eq!(delegates, ["ldp:delegate:refuser", "ldp:delegate:backup"]);
    assert_eq!(routed.attempts[0].error.as_ref().unwrap().code, codes::SKILL_NOT_FOUND);
    assert_eq!(routed.attempts[0].action, Some(FailoverAction::Reroute { after: Duration::ZERO }));
    assert_eq!(routed.decisions.len(), 2);
    assert_eq!(routed.decisions[0].delegate_id, "ldp:delegate:refuser");
    assert_eq!(routed.decisions[1].explanation.rejected.excluded, 1);
    // The failure was recorded: the next review goes straight to the backup.
    let again = registry.route_and_submit(&review, &scorer()).await.unwrap();
    assert_eq!((again.delegate_id.as_str(), again.attempts.len()), ("ldp:delegate:backup", 1));

    // Transient runtime failure: the same delegate again, after the backoff, over the cached session.
    let translate = RouteTask::new("translate", json!("bonjour"));
    let routed = registry.route_and_submit(&translate, &scorer()).await.unwrap();
    let delegates: Vec<&str> = routed.attempts.iter().map(|a| a.delegate_id.as_str()).collect();
    assert_eq!(delegates, ["ldp:delegate:flaky", "ldp:delegate:flaky"]);
    assert_eq!(routed.attempts[0].error.as_ref().unwrap().code, codes::EXECUTION_FAILED);
    assert_eq!(
        routed.attempts[0].action,
        Some(FailoverAction::Retry { after: Duration::from_millis(10), new_session: false })
    );
    assert_eq!(routed.decisions.len(), 1);
    assert_eq!(routed.verdict.as_ref().map(|v| v.score.get()), Some(0.8));

    for server in [refuser, backup, flaky] {
        server.shutdown().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_failures_escalate_and_contract_budgets_filter() {
    let strict = serve(card("strict", "audit", 0.9, 0.05), Sim { forbid: true, ..Sim::default() }).await;
    let registry = registry(Exploration::Greedy, TrustedIssuers::new());
    registry.add_url(&ldp_url(&strict)).await.unwrap();
    let task = RouteTask::new("audit", json!("ledger"));
    let error = registry.route_and_submit(&task, &scorer()).await.unwrap_err();
    let RouteErrorKind::Escalated { error: cause, reason } = &error.kind else { panic!("{error}") };
    assert_eq!((cause.code.as_str(), *reason), (codes::CONTRACT_VIOLATED, GiveUpReason::NotRecoverable));
    assert_eq!(error.attempts.len(), 1);

    // A budget below the only offer's price leaves nobody to select.
    let poor = task.clone().with_contract(
        ldp_types::DelegationContract::new("c-1", "audit")
            .with_budget(ldp_types::Budget { max_tokens: None, max_cost_usd: Some(0.01) }),
    );
    let error = registry.route_and_submit(&poor, &scorer()).await.unwrap_err();
    assert!(matches!(error.kind, RouteErrorKind::Selection(_)), "{error}");
    assert!(error.attempts.is_empty());
    strict.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attestations_fetched_with_the_card_count_and_forgeries_are_explained() {
    let issuer = SigningKey::ed25519_from_seed(&[21; 32]);
    let trusted = TrustedIssuers::new().trust("ldp:issuer:evals", issuer.verifying_key()).unwrap();
    let now = time::OffsetDateTime::now_utc();
    let attestation = |subject: &str, key: &SigningKey| {
        let claim = AttestationClaim::new(subject, "classify", Quality::new(0.9).unwrap(), "ldp:issuer:evals", now)
            .expiring_at(now + time::Duration::days(30));
        sign_attestation(claim, key).unwrap().to_value().unwrap()
    };
    let mut vetted = card("vetted", "classify", 0.7, 0.01);
    vetted.extra.insert("attestations".into(), json!([attestation("ldp:delegate:vetted", &issuer)]));
    // The forger labels its own boast issuer_attested and carries an attestation signed with its own key.
    let mut forger = card("forger", "classify", 0.97, 0.01);
    forger.capabilities[0] = Capability::new("classify")
        .with_quality(Score::new(0.97).unwrap(), CardClaimType::IssuerAttested)
        .with_cost(0.01, ldp_types::CostTier::Low);
    forger.capabilities[0]
        .extra
        .insert("attestation".into(), attestation("ldp:delegate:forger", &SigningKey::ed25519_from_seed(&[66; 32])));
    let vetted = serve(vetted, Sim { quality: 0.9, ..Sim::default() }).await;
    let forger = serve(forger, Sim { quality: 0.4, ..Sim::default() }).await;
    let registry = registry(Exploration::Greedy, trusted);
    let accepted = registry.add_url(&ldp_url(&vetted)).await.unwrap();
    assert!(accepted.ignored.is_empty(), "{:?}", accepted.ignored);
    let registration = registry.add_url(&ldp_url(&forger)).await.unwrap();
    assert_eq!(registration.ignored.len(), 1);

    let task = RouteTask::new("classify", json!("is this spam?"))
        .with_request(SelectionRequest::new("classify").strategy(Strategy::Quality).explain(ExplainDepth::All));
    // A lone self-claim is a weak prior, so the forger's 0.97 may win a first task; its labels and its forged
    // attestation count for nothing, and one poor outcome ends its run.
    let mut chosen = Vec::new();
    let mut routed = None;
    for _ in 0..4 {
        let r = registry.route_and_submit(&task, &scorer()).await.unwrap();
        chosen.push(r.delegate_id.clone());
        routed = Some(r);
    }
    let routed = routed.unwrap();
    assert!(chosen.iter().filter(|c| *c == "ldp:delegate:forger").count() <= 1, "{chosen:?}");
    assert_eq!(routed.delegate_id, "ldp:delegate:vetted", "{}", routed.decision);
    assert_eq!(routed.decision.chosen.assessment.basis, Some(ClaimType::IssuerAttested));
    let forger_row =
        routed.decision.explanation.ranking.iter().find(|c| c.delegate_id == "ldp:delegate:forger").unwrap();
    let notes: Vec<&str> = forger_row.notes.iter().map(|n| n.text.as_str()).collect();
    assert!(notes.iter().any(|n| n.contains("signature does not verify")), "{notes:?}");
    assert!(notes.iter().any(|n| n.contains("without a valid attestation")), "{notes:?}");
    assert_ne!(forger_row.assessment.basis, Some(ClaimType::IssuerAttested));
    vetted.shutdown().await.unwrap();
    forger.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_judge_delegate_scores_outcomes_and_deadlines_bound_routing() {
    let worker = serve(card("worker", "draft", 0.9, 0.01), Sim { quality: 0.9, ..Sim::default() }).await;
    let judge = serve(card("judge", "judge", 0.9, 0.01), Sim { judge: Some(0.25), ..Sim::default() }).await;
    let registry = Arc::new(registry(Exploration::Greedy, TrustedIssuers::new()));
    registry.add_url(&ldp_url(&worker)).await.unwrap();
    registry.add_url(&ldp_url(&judge)).await.unwrap();
    let judged_by = JudgeScorer::new(registry.clone(), SelectionRequest::new("judge"));
    let task = RouteTask::new("draft", json!("a letter"));
    let routed = registry.route_and_submit(&task, &judged_by).await.unwrap();
    assert_eq!(
        routed.verdict,
        Some(Verdict {
            score: Quality::new(0.25).unwrap(),
            source: VerificationSource::Judge("ldp:delegate:judge".into())
        })
    );
    let observed = registry.with_router(|r| r.observed("ldp:delegate:worker", "draft")).unwrap();
    assert_eq!((observed.count, observed.mean), (1, 0.25));

    // A deadline already past: nothing is attempted.
    let late =
        task.with_contract(ldp_types::DelegationContract::new("c-2", "draft").with_deadline("2020-01-01T00:00:00Z"));
    let error = registry.route_and_submit(&late, &judged_by).await.unwrap_err();
    assert!(matches!(error.kind, RouteErrorKind::Escalated { reason: GiveUpReason::DeadlineExhausted, .. }), "{error}");
    assert!(error.attempts.is_empty());
    let bad = RouteTask::new("draft", json!("x"))
        .with_contract(ldp_types::DelegationContract::new("c-3", "draft").with_deadline("tomorrow"));
    assert!(matches!(
        registry.route_and_submit(&bad, &judged_by).await.unwrap_err().kind,
        RouteErrorKind::InvalidContract(_)
    ));
    worker.shutdown().await.unwrap();
    judge.shutdown().await.unwrap();
}
