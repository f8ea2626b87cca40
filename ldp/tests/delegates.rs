#![cfg(feature = "llm")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! A delegate that delegates, assembled from its configuration (`backend.delegates`), as `ldp serve --delegate`
//! does: an LLM delegate whose model (an OpenAI-compatible stub answering with scripted tool calls) calls the skills
//! of real delegates over HTTP, each call routed by the router (the better self-claimed quality first, failover
//! to the other when it fails), under the child contract; the parent's result carries the hop in its lineage.

use ldp::config::{BackendKind, ServerConfig};
use ldp::{Delegate, LdpError, TaskContext};
use ldp_llm::stub::{Flavor, Stub, StubConfig, StubTurn};
use ldp_session::runtime::Submission;
use ldp_types::{Budget, DelegationContract, FailurePolicy, codes};
use serde_json::json;

/// A delegate with one skill, `upper`, claiming `quality`; `broken` ones fail every task (retryably).
async fn upper(id: &str, quality: f64, broken: bool) -> ldp::Server {
    Delegate::builder(id)
        .skill("upper", move |input: String, _cx: TaskContext| async move {
            if broken {
                return Err(LdpError::runtime(codes::EXECUTION_FAILED, "out of order").with_retryable(true));
            }
            Ok(input.to_uppercase())
        })
        .describe("Upper-cases its input")
        .quality(quality)
        .spawn("127.0.0.1:0")
        .await
        .unwrap()
}

async fn planner(stub: &Stub, delegates: &[&ldp::Server]) -> ldp::Server {
    let mut config = ServerConfig::default();
    config.bind = "127.0.0.1:0".into();
    config.identity.delegate_id = Some("ldp:delegate:planner".into());
    config.backend.kind = Some(BackendKind::Openai);
    config.backend.base_url = Some(stub.base_url());
    config.backend.model = Some("stub-model".into());
    config.backend.delegates = delegates.iter().map(|d| d.url().to_owned()).collect();
    ldp::Server::start(config).await.unwrap()
}

fn contract() -> DelegationContract {
    let mut c = DelegationContract::new("ctr-plan", "shout")
        .with_failure_policy(FailurePolicy::FailClosed)
        .with_budget(Budget { max_tokens: Some(10_000), max_cost_usd: None });
    c.policy.max_delegation_depth = Some(2);
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_models_tool_call_is_routed_to_the_better_delegate_and_fails_over() {
    let good = upper("ldp:delegate:upper-good", 0.9, false).await;
    let poor = upper("ldp:delegate:upper-poor", 0.4, false).await;
    let script = vec![StubTurn::call("upper", &json!({"input": "hello"})), StubTurn::text("it said HELLO")];
    let stub = Stub::start(StubConfig::new(Flavor::OpenAi).with_script(script.clone())).await.unwrap();
    let server = planner(&stub, &[&good, &poor]).await;

    let conn = ldp::connect(server.url()).await.unwrap();
    let session = conn.session().await.unwrap();
    let task = Submission::new(&session, "chat", "shout hello").contract(contract());
    let out = conn.client().submit_task(task).await.unwrap();
    assert_eq!(out.output.as_string().unwrap(), "it said HELLO");
    // The tool offered was the skill, described from the card; its answer went back to the model.
    let recorded = stub.recorded();
    assert_eq!(recorded[0]["tools"][0]["function"]["name"], "upper");
    assert_eq!(recorded[0]["tools"][0]["function"]["description"], "Upper-cases its input");
    assert!(recorded[1].to_string().contains("HELLO"), "{}", recorded[1]);
    // The router chose the better claim; the hop is in the lineage.
    let hops: Vec<&str> = out.provenance.lineage.iter().map(|h| h.delegate_id.as_str()).collect();
    assert!(hops.contains(&"ldp:delegate:upper-good"), "{hops:?}");
    assert!(!hops.contains(&"ldp:delegate:upper-poor"), "{hops:?}");
    // The chain of hops as an LCTL document passes the checks `ldp lctl check` runs, and draws.
    let chain = ldp_lctl::ldp::document_from_ldp("ctr-plan", Some(&out.provenance), Some(&contract())).unwrap();
    let report = ldp_lctl::check_document(&chain);
    assert!(!report.has_errors(), "{report:?}");
    assert!(chain.trace.iter().any(|step| step.agent == "ldp:delegate:upper-good"), "{chain:?}");
    assert!(ldp_lctl::render_mermaid(&chain).contains("upper-good"));
    server.shutdown().await.unwrap();

    // The better one out of order: the call fails over to the other.
    let broken = upper("ldp:delegate:upper-broken", 0.95, true).await;
    let stub = Stub::start(StubConfig::new(Flavor::OpenAi).with_script(script)).await.unwrap();
    let server = planner(&stub, &[&broken, &poor]).await;
    let conn = ldp::connect(server.url()).await.unwrap();
    let session = conn.session().await.unwrap();
    let task = Submission::new(&session, "chat", "shout hello").contract(contract());
    let out = conn.client().submit_task(task).await.unwrap();
    assert_eq!(out.output.as_string().unwrap(), "it said HELLO");
    let hops: Vec<&str> = out.provenance.lineage.iter().map(|h| h.delegate_id.as_str()).collect();
    assert!(hops.contains(&"ldp:delegate:upper-poor"), "{hops:?}");
    for s in [server, broken, good, poor] {
        s.shutdown().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delegate_that_cannot_be_reached_stops_the_server_from_starting() {
    let stub = Stub::start(StubConfig::new(Flavor::OpenAi)).await.unwrap();
    let mut config = ServerConfig::default();
    config.bind = "127.0.0.1:0".into();
    config.backend.kind = Some(BackendKind::Openai);
    config.backend.base_url = Some(stub.base_url());
    config.backend.model = Some("stub-model".into());
    config.backend.delegates = vec!["http://127.0.0.1:1".into()];
    match ldp::Server::start(config).await {
        Err(ldp::Error::Setup { key, .. }) => assert_eq!(key, "backend.delegates"),
        other => panic!("expected a setup error naming backend.delegates, got {:?}", other.map(|s| s.url().to_owned())),
    }
    // Delegates need a model to call them: on the echo delegate or a bridge they are refused, not ignored.
    let mut config = ServerConfig::default();
    config.backend.delegates = vec!["http://127.0.0.1:1".into()];
    assert!(matches!(config.validate(), Err(ldp::config::ConfigError::Requires { key: "backend.delegates", .. })));
    config.backend.kind = Some(BackendKind::Mcp);
    config.backend.mcp_url = Some("http://127.0.0.1:1/mcp".into());
    assert!(matches!(config.validate(), Err(ldp::config::ConfigError::Requires { key: "backend.delegates", .. })));
}

/// A sub-delegate whose answer breaks the output schema its own card declares: the child contract carries that
/// schema as a `check:` criterion, so the answer comes back to the model as a typed `CONTRACT_VIOLATED`, not as
/// data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_outside_the_cards_output_schema_reaches_the_model_as_a_typed_error() {
    use std::sync::Arc;

    let mut card =
        ldp_types::IdentityCard::new(ldp_types::DelegateId::new("ldp:delegate:liar").unwrap(), "Liar", "echo", "1.0");
    card.supported_payload_modes = vec![ldp_types::PayloadMode::Text];
    let mut tally = ldp_types::Capability::new("tally").with_description("Counts things");
    tally.output_schema =
        Some(json!({"type": "object", "properties": {"count": {"type": "integer"}}, "required": ["count"]}));
    card.capabilities.push(tally);
    let mut config = ServerConfig::default();
    config.bind = "127.0.0.1:0".into();
    // The echo delegate answers {"echo": ...}, which the card's schema does not allow.
    let liar = ldp::Server::start_with(config, card, Arc::new(ldp_session::runtime::EchoDelegate)).await.unwrap();

    let script = vec![StubTurn::call("tally", &json!({"input": "apples"})), StubTurn::text("could not count")];
    let stub = Stub::start(StubConfig::new(Flavor::OpenAi).with_script(script)).await.unwrap();
    let server = planner(&stub, &[&liar]).await;
    let conn = ldp::connect(server.url()).await.unwrap();
    let out: ldp::Answer<String> = conn.call("chat", "count the apples").await.unwrap();
    assert_eq!(out.output, "could not count");
    let second = stub.recorded()[1].to_string();
    assert!(second.contains("CONTRACT_VIOLATED"), "the model was not told: {second}");
    assert!(!second.contains("\\\"echo\\\""), "the answer outside the schema reached the model as data: {second}");
    for s in [server, liar] {
        s.shutdown().await.unwrap();
    }
}
