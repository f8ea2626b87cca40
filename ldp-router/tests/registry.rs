//! The registry over in-memory transports: discovery by URL through a scheme dispatcher, attestations arriving as
//! ATTESTATION bodies, and removal after repeated identity failures.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use ldp_router::{
    AttestationClaim, AttestationRejection, ClaimType, DiscoveryError, ExplainDepth, FailoverAction, NoScore, Quality,
    Registry, RegistryConfig, RouteTask, RouterError, SchemeDispatcher, SelectionRequest, SharedTransport, Strategy,
    TransportFactory, TrustedIssuers, sign_attestation,
};
use ldp_session::runtime::{DelegateRuntime, EchoDelegate, MemoryTransport, Transport};
use ldp_session::{ManualClock, PeerContext, Responder, ResponderConfig, SeededIds};
use ldp_types::signing::SigningKey;
use ldp_types::{Capability, ClaimType as CardClaimType, DelegateId, Envelope, IdentityCard, LdpError, Score, codes};
use time::macros::datetime;
use tokio::sync::mpsc;

fn card(name: &str, skills: &[(&str, f64)]) -> IdentityCard {
    let mut card = IdentityCard::new(DelegateId::from_name(name).unwrap(), name, "sim", "1");
    for (skill, quality) in skills {
        card.capabilities
            .push(Capability::new(*skill).with_quality(Score::new(*quality).unwrap(), CardClaimType::SelfClaimed));
    }
    card
}

/// An in-memory delegate whose identity can be made to fail, or to be someone else's.
struct Switchable {
    inner: MemoryTransport,
    broken: Arc<AtomicBool>,
    impostor: Option<IdentityCard>,
    /// Answer the next TASK_SUBMIT with a session failure, as a delegate that lost the session would.
    expire_next_submit: Arc<AtomicBool>,
}

#[async_trait]
impl Transport for Switchable {
    async fn identity(&self) -> Result<IdentityCard, LdpError> {
        if self.broken.load(Ordering::SeqCst) {
            return Err(LdpError::transport(codes::TRANSPORT_ERROR, "connection refused"));
        }
        match &self.impostor {
            Some(card) => Ok(card.clone()),
            None => self.inner.identity().await,
        }
    }

    async fn exchange(
        &self,
        env: &Envelope,
        updates: Option<mpsc::Sender<Envelope>>,
    ) -> Result<Option<Vec<u8>>, LdpError> {
        if env.body.type_name() == "TASK_SUBMIT" && self.expire_next_submit.swap(false, Ordering::SeqCst) {
            return Err(LdpError::session(codes::SESSION_EXPIRED, "session expired"));
        }
        self.inner.exchange(env, updates).await
    }
}

fn memory(card: IdentityCard) -> MemoryTransport {
    let clock = Arc::new(ManualClock::new(datetime!(2026-03-15 12:00 UTC)));
    let responder = Responder::new(ResponderConfig::new(card), clock, Box::new(SeededIds::new(3)));
    MemoryTransport::new(DelegateRuntime::new(responder, Arc::new(EchoDelegate)), PeerContext::default())
}

struct Fixture {
    registry: Registry,
    broken: Arc<AtomicBool>,
    expire: Arc<AtomicBool>,
}

/// A registry whose `mem://NAME` URLs reach in-memory delegates; `mem://impostor` serves another delegate's card.
fn fixture(threshold: u32, trusted: TrustedIssuers) -> Fixture {
    let broken = Arc::new(AtomicBool::new(false));
    let expire = Arc::new(AtomicBool::new(false));
    let flag = broken.clone();
    let expiry = expire.clone();
    let mem = move |url: &str| -> Result<SharedTransport, DiscoveryError> {
        let name = url.trim_start_matches("mem://");
        let expire = expiry.clone();
        let transport = match name {
            "alpha" => Switchable {
                inner: memory(card("alpha", &[("reasoning", 0.7), ("summarize", 0.6)])),
                broken: flag.clone(),
                impostor: None,
                expire_next_submit: expire.clone(),
            },
            "impostor" => Switchable {
                inner: memory(card("alpha", &[("reasoning", 0.7)])),
                broken: flag.clone(),
                impostor: Some(card("mallory", &[("reasoning", 0.99)])),
                expire_next_submit: expire.clone(),
            },
            other => return Err(DiscoveryError::adapter(format!("nothing at {other}"))),
        };
        Ok(Arc::new(transport) as SharedTransport)
    };
    let dispatcher = SchemeDispatcher::new().register("mem", Arc::new(mem));
    let config =
        RegistryConfig { identity_failure_threshold: threshold, trusted_issuers: trusted, ..RegistryConfig::default() };
    let clock = Arc::new(ManualClock::new(datetime!(2026-03-15 12:00 UTC)));
    let registry = Registry::new(config, Arc::new(dispatcher) as Arc<dyn TransportFactory>, clock).unwrap();
    Fixture { registry, broken, expire }
}

#[tokio::test]
async fn discovery_by_url_and_unknown_schemes() {
    let f = fixture(3, TrustedIssuers::new());
    let registered = f.registry.add_url("mem://alpha").await.unwrap();
    assert_eq!(registered.delegate_id, "ldp:delegate:alpha");
    assert_eq!(registered.skills, ["reasoning", "summarize"]);
    assert_eq!(f.registry.select(&SelectionRequest::new("reasoning")).unwrap().delegate_id, "ldp:delegate:alpha");
    assert!(matches!(f.registry.add_url("a2a://agent").await, Err(DiscoveryError::UnknownScheme { .. })));
    assert!(matches!(f.registry.add_url("mem://nobody").await, Err(DiscoveryError::Adapter(_))));
}

#[tokio::test]
async fn repeated_identity_failures_remove_a_delegate_and_a_success_resets_the_count() {
    let f = fixture(2, TrustedIssuers::new());
    f.registry.add_url("mem://alpha").await.unwrap();

    f.broken.store(true, Ordering::SeqCst);
    let report = f.registry.refresh().await;
    assert_eq!(report.failed.len(), 1);
    assert!(matches!(report.failed[0].1, DiscoveryError::Identity(_)));
    assert!(report.removed.is_empty());
    assert_eq!(f.registry.identity_failures("ldp:delegate:alpha"), Some(1));

    // One good refresh forgives the earlier failure.
    f.broken.store(false, Ordering::SeqCst);
    assert_eq!(f.registry.refresh().await.refreshed, ["ldp:delegate:alpha"]);
    assert_eq!(f.registry.identity_failures("ldp:delegate:alpha"), Some(0));

    f.broken.store(true, Ordering::SeqCst);
    assert!(f.registry.refresh().await.removed.is_empty());
    let report = f.registry.refresh().await;
    assert_eq!(report.removed, ["ldp:delegate:alpha"]);
    assert!(f.registry.delegates().is_empty());
    assert_eq!(
        f.registry.select(&SelectionRequest::new("reasoning")),
        Err(RouterError::UnknownSkill("reasoning".into()))
    );
}

#[tokio::test]
async fn a_card_naming_another_delegate_is_an_identity_failure() {
    let f = fixture(1, TrustedIssuers::new());
    // Registered as alpha by card, reached through a URL that now serves mallory's card.
    let transport: SharedTransport = Arc::new(Switchable {
        inner: memory(card("alpha", &[("reasoning", 0.7)])),
        broken: Arc::new(AtomicBool::new(false)),
        impostor: Some(card("mallory", &[("reasoning", 0.99)])),
        expire_next_submit: Arc::new(AtomicBool::new(false)),
    });
    f.registry.add_card(card("alpha", &[("reasoning", 0.7)]), Some(transport)).unwrap();
    let report = f.registry.refresh().await;
    assert_eq!(
        report.failed[0].1,
        DiscoveryError::IdentityMismatch {
            expected: "ldp:delegate:alpha".into(),
            actual: "ldp:delegate:mallory".into()
        }
    );
    assert_eq!(report.removed, ["ldp:delegate:alpha"]);
    // Discovering the impostor URL registers whoever the card says, under that name.
    assert_eq!(f.registry.add_url("mem://impostor").await.unwrap().delegate_id, "ldp:delegate:mallory");
}

#[tokio::test]
async fn an_attestation_message_upgrades_one_skill_and_a_bad_one_is_explained() {
    let issuer = SigningKey::ed25519_from_seed(&[9; 32]);
    let trusted = TrustedIssuers::new().trust("ldp:issuer:evals", issuer.verifying_key()).unwrap();
    let f = fixture(3, trusted);
    f.registry.add_url("mem://alpha").await.unwrap();
    let now = f.registry.now();

    let claim =
        AttestationClaim::new("ldp:delegate:alpha", "reasoning", Quality::new(0.9).unwrap(), "ldp:issuer:evals", now)
            .expiring_at(now + time::Duration::days(30));
    let body = sign_attestation(claim.clone(), &issuer).unwrap().to_attestation().unwrap();
    let registered = f.registry.add_attestation(AttestationClaim::from_attestation(&body).unwrap()).unwrap();
    assert!(registered.ignored.is_empty());
    let assessed = |skill: &str| f.registry.with_router(|r| r.assess("ldp:delegate:alpha", skill, now).unwrap());
    assert_eq!(assessed("reasoning").basis, Some(ClaimType::IssuerAttested));
    assert_eq!(assessed("summarize").basis, Some(ClaimType::SelfClaimed));

    // Signed by a key nobody trusts under that issuer's name: ignored, and the explanation says why.
    let forged = sign_attestation(
        AttestationClaim { skill: "summarize".into(), ..claim },
        &SigningKey::ed25519_from_seed(&[1; 32]),
    )
    .unwrap();
    let registered = f.registry.add_attestation(forged).unwrap();
    assert_eq!(registered.ignored[0].reason, AttestationRejection::BadSignature("ldp:issuer:evals".into()));
    assert_eq!(assessed("summarize").basis, Some(ClaimType::SelfClaimed));
    let request = SelectionRequest::new("summarize").strategy(Strategy::Quality).explain(ExplainDepth::All);
    let decision = f.registry.select(&request).unwrap();
    assert!(decision.chosen.notes.iter().any(|n| n.text.contains("signature does not verify")), "{decision}");
    assert!(decision.to_string().contains("note: attestation by ldp:issuer:evals ignored"), "{decision}");
    // The note is about summarize only.
    let decision = f.registry.select(&SelectionRequest::new("reasoning")).unwrap();
    assert!(decision.chosen.notes.is_empty());

    assert!(matches!(
        f.registry.add_attestation(AttestationClaim { subject: "ldp:delegate:ghost".into(), ..registered_claim() }),
        Err(DiscoveryError::UnknownDelegate(_))
    ));
}

fn registered_claim() -> AttestationClaim {
    AttestationClaim::new("x", "y", Quality::MAX, "z", datetime!(2026-03-15 12:00 UTC))
}

#[tokio::test]
async fn a_lost_session_is_re_established_and_the_task_retried() {
    let f = fixture(3, TrustedIssuers::new());
    f.registry.add_url("mem://alpha").await.unwrap();
    let task = RouteTask::new("reasoning", serde_json::json!("first"));
    let first = f.registry.route_and_submit(&task, &NoScore).await.unwrap();
    let first_session = first.provenance.unwrap().session_id.unwrap();
    assert_eq!(first.output, serde_json::json!({ "echo": "first" }));

    f.expire.store(true, Ordering::SeqCst);
    let routed = f.registry.route_and_submit(&task, &NoScore).await.unwrap();
    assert_eq!(routed.attempts.len(), 2, "{:?} {}", routed.attempts, f.expire.load(Ordering::SeqCst));
    assert!(matches!(routed.attempts[0].action, Some(FailoverAction::Retry { new_session: true, .. })));
    assert_ne!(routed.provenance.unwrap().session_id.unwrap(), first_session);
}
