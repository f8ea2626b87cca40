//! Usage receipts and contract predicates as the router sees them (issue 22): each result's receipt is checked
//! against the key the delegate's card publishes, verdicts are kept per delegate and steer routing on request; the
//! contract's `check:` predicates, evaluated by the router on the output, feed the delegate's observed quality.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use async_trait::async_trait;
use ldp_router::{
    DiscoveryError, NoScore, ReceiptPreference, ReceiptVerdict, Registry, RegistryConfig, RouteTask, SelectionRequest,
    SharedTransport, TransportFactory,
};
use ldp_session::runtime::{Delegate, DelegateRuntime, MemoryTransport, TaskContext};
use ldp_session::{ManualClock, PeerContext, Responder, ResponderConfig, SeededIds, TaskOutput, TaskRequest};
use ldp_types::receipt::RECEIPT_KEY_MEMBER;
use ldp_types::signing::SigningKey;
use ldp_types::{Capability, DelegateId, DelegationContract, IdentityCard, LdpError};
use serde_json::json;
use time::macros::datetime;

/// Answers `{"answer": <input>}` and reports 12 tokens.
struct Counting;

#[async_trait]
impl Delegate for Counting {
    async fn execute(&self, task: TaskRequest, _: TaskContext) -> Result<TaskOutput, LdpError> {
        let input = task.input.to_value().unwrap_or_default();
        Ok(TaskOutput { tokens_used: Some(12), ..TaskOutput::new(json!({ "answer": input })) })
    }
}

fn card(name: &str) -> IdentityCard {
    let mut card = IdentityCard::new(DelegateId::from_name(name).unwrap(), name, "sim", "1");
    card.capabilities.push(Capability::new("answer"));
    card
}

fn seed(n: u8) -> SigningKey {
    SigningKey::ed25519_from_seed(&[n; 32])
}

struct NoFactory;

impl TransportFactory for NoFactory {
    fn open(&self, url: &str) -> Result<SharedTransport, DiscoveryError> {
        Err(DiscoveryError::adapter(format!("no transport for {url}")))
    }
}

/// Registers a delegate whose responder is built from `cfg` (its card as the responder serves it).
fn add(registry: &Registry, cfg: ResponderConfig) {
    let card = cfg.card.clone();
    let clock = Arc::new(ManualClock::new(datetime!(2026-03-15 12:00 UTC)));
    let responder = Responder::new(cfg, clock, Box::new(SeededIds::new(5)));
    let transport = MemoryTransport::new(DelegateRuntime::new(responder, Arc::new(Counting)), PeerContext::default());
    registry.add_card(card, Some(Arc::new(transport) as SharedTransport)).unwrap();
}

/// `honest` signs receipts with the key its card publishes; `silent` publishes a key but signs nothing; `forger`
/// signs with a key other than the one it publishes; `plain` publishes no key.
fn registry() -> Registry {
    let clock = Arc::new(ManualClock::new(datetime!(2026-03-15 12:00 UTC)));
    let registry = Registry::new(RegistryConfig::default(), Arc::new(NoFactory), clock).unwrap();
    let mut honest = ResponderConfig::new(card("honest"));
    honest.set_receipt_key(seed(1)).unwrap();
    add(&registry, honest);
    let mut silent = ResponderConfig::new(card("silent"));
    silent.card.extra.insert(RECEIPT_KEY_MEMBER.into(), json!(seed(2).verifying_key().public_hex().unwrap()));
    add(&registry, silent);
    let mut forger = ResponderConfig::new(card("forger"));
    forger.set_receipt_key(seed(3)).unwrap();
    forger.card.extra.insert(RECEIPT_KEY_MEMBER.into(), json!(seed(4).verifying_key().public_hex().unwrap()));
    add(&registry, forger);
    add(&registry, ResponderConfig::new(card("plain")));
    registry
}

const ALL: [&str; 4] = ["honest", "silent", "forger", "plain"];

/// Routes one task to `name` alone.
async fn to(registry: &Registry, name: &str, task: RouteTask) -> ldp_router::Routed {
    let mut request = SelectionRequest::new("answer");
    for other in ALL.iter().filter(|o| **o != name) {
        request = request.exclude(format!("ldp:delegate:{other}"));
    }
    registry.route_and_submit(&task.with_request(request), &NoScore).await.unwrap()
}

#[tokio::test]
async fn each_result_s_receipt_is_checked_and_recorded_per_delegate() {
    let registry = registry();
    let task = || RouteTask::new("answer", json!("42"));
    let honest = to(&registry, "honest", task()).await;
    assert_eq!(honest.receipt, ReceiptVerdict::Verified);
    assert_eq!(honest.provenance.as_ref().unwrap().tokens_used, Some(12));
    assert_eq!(to(&registry, "silent", task()).await.receipt, ReceiptVerdict::Missing);
    let forged = to(&registry, "forger", task()).await.receipt;
    assert!(matches!(&forged, ReceiptVerdict::Invalid(why) if why.contains("signature")), "{forged:?}");
    assert_eq!(to(&registry, "plain", task()).await.receipt, ReceiptVerdict::NotPublished);

    let record = |name: &str| registry.receipt_record(&format!("ldp:delegate:{name}")).unwrap();
    assert!(record("honest").trustworthy() && record("honest").verified == 1);
    assert_eq!((record("silent").published, record("silent").missing), (true, 1));
    assert_eq!((record("forger").published, record("forger").invalid), (true, 1));
    assert!(!record("plain").published && !record("plain").trustworthy());
}

#[tokio::test]
async fn require_and_prefer_route_only_to_delegates_whose_receipts_verify() {
    let registry = registry();
    for name in ALL {
        to(&registry, name, RouteTask::new("answer", json!("warm-up"))).await;
    }
    for preference in [ReceiptPreference::Require, ReceiptPreference::Prefer] {
        for i in 0..12 {
            let task = RouteTask::new("answer", json!(i)).with_receipts(preference);
            let routed = registry.route_and_submit(&task, &NoScore).await.unwrap();
            assert_eq!(routed.delegate_id, "ldp:delegate:honest", "{preference:?}");
            assert_eq!(routed.receipt, ReceiptVerdict::Verified);
        }
    }
    // With the honest delegate out of reach, Require finds no one and Prefer falls back to the others.
    let without_honest = || SelectionRequest::new("answer").exclude("ldp:delegate:honest");
    let required =
        RouteTask::new("answer", json!(1)).with_request(without_honest()).with_receipts(ReceiptPreference::Require);
    assert!(registry.route_and_submit(&required, &NoScore).await.is_err());
    let preferred =
        RouteTask::new("answer", json!(1)).with_request(without_honest()).with_receipts(ReceiptPreference::Prefer);
    assert_ne!(registry.route_and_submit(&preferred, &NoScore).await.unwrap().delegate_id, "ldp:delegate:honest");
}

#[tokio::test]
async fn contract_predicates_checked_by_the_router_feed_observed_quality() {
    let registry = registry();
    let mut contract = DelegationContract::new("c-1", "answer with a number");
    // The output is {"answer": <input>}: a number input passes both predicates, a text input fails one of two.
    contract.success_criteria = vec!["check: has answer".into(), "check: answer >= 0".into()];
    let observed = |registry: &Registry| {
        registry.with_router(|r| r.observed("ldp:delegate:plain", "answer")).map(|o| (o.count, o.mean))
    };
    assert_eq!(observed(&registry), None);
    to(&registry, "plain", RouteTask::new("answer", json!(7)).with_contract(contract.clone())).await;
    let (count, mean) = observed(&registry).unwrap();
    assert_eq!(count, 1);
    assert!((mean - 1.0).abs() < 1e-9, "{mean}");
    to(&registry, "plain", RouteTask::new("answer", json!("seven")).with_contract(contract)).await;
    let (count, mean) = observed(&registry).unwrap();
    assert_eq!(count, 2);
    assert!(mean < 1.0 && mean > 0.5, "one of two predicates failed once: {mean}");
    // Without predicates, nothing is learned from the result itself.
    to(&registry, "honest", RouteTask::new("answer", json!(7))).await;
    assert!(registry.with_router(|r| r.observed("ldp:delegate:honest", "answer")).is_none());
}
