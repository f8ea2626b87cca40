//! Run with: cargo run -p ldp-examples --example orchestrator
//!
//! A delegate that delegates: an LLM delegate whose model calls other delegates' skills as tools. Two summarizers
//! serve `summarize`, one claiming better quality; the planner's model (a local stub speaking the OpenAI wire
//! format, scripted to call `summarize` once and then answer) is given both through `backend.delegates`, as
//! `ldp serve --backend openai ... --delegate URL --delegate URL` does. The router sends the call to the better
//! claim under a child contract (the budget left, the depth minus one), and the planner's result carries the hop in
//! its lineage and the summed usage.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use ldp::config::{BackendKind, ServerConfig};
use ldp::{Delegate, TaskContext};
use ldp_llm::stub::{Flavor, Stub, StubConfig, StubTurn};
use ldp_session::runtime::Submission;
use ldp_types::{Budget, DelegationContract, FailurePolicy};
use serde_json::json;

/// A summarizer claiming `quality`: the first `words` words of its input.
async fn summarizer(id: &str, quality: f64, words: usize) -> Result<ldp::Server, ldp::Error> {
    Delegate::builder(id)
        .skill("summarize", move |text: String, _cx: TaskContext| async move {
            Ok(text.split_whitespace().take(words).collect::<Vec<_>>().join(" "))
        })
        .describe("Summarizes a text")
        .quality(quality)
        .spawn("127.0.0.1:0")
        .await
}

/// Starts the delegates and the planner, runs one task, and shuts everything down.
#[tokio::main]
pub async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let sharp = summarizer("ldp:delegate:sharp", 0.9, 4).await?;
    let rough = summarizer("ldp:delegate:rough", 0.5, 2).await?;
    let input = "LDP lets a router pick delegates by verified quality, cost and trust";
    let script = vec![StubTurn::call("summarize", &json!({ "input": input })), StubTurn::text("Summary done.")];
    let model = Stub::start(StubConfig::new(Flavor::OpenAi).with_script(script)).await?;

    let mut config = ServerConfig::default();
    config.bind = "127.0.0.1:0".into();
    config.identity.delegate_id = Some("ldp:delegate:planner".into());
    config.backend.kind = Some(BackendKind::Openai);
    config.backend.base_url = Some(model.base_url());
    config.backend.model = Some("stub-model".into());
    config.backend.delegates = vec![sharp.url().to_owned(), rough.url().to_owned()];
    let planner = ldp::Server::start(config).await?;

    let mut contract = DelegationContract::new("ctr-1", "summarize the pitch")
        .with_failure_policy(FailurePolicy::FailClosed)
        .with_budget(Budget { max_tokens: Some(5_000), max_cost_usd: None });
    contract.policy.max_delegation_depth = Some(1);
    let conn = ldp::connect(planner.url()).await?;
    let session = conn.session().await?;
    let done = conn.client().submit_task(Submission::new(&session, "chat", input).contract(contract)).await?;
    println!("answer: {}", done.output);
    println!("tokens (model and sub-task): {:?}", done.provenance.tokens_used);
    for hop in &done.provenance.lineage {
        println!(
            "hop: {} ({}, {} {}): {} ms, {:?} tokens, confidence {:?}, {}",
            hop.delegate_id,
            hop.model_version,
            hop.step,
            hop.skill.as_deref().unwrap_or("?"),
            hop.latency_ms.unwrap_or_default(),
            hop.tokens_used,
            hop.confidence.map(|c| c.get()),
            hop.verification_status
        );
    }
    // The model saw the sharper summary: the first four words.
    let second = model.recorded().get(1).map(ToString::to_string).unwrap_or_default();
    assert!(second.contains("LDP lets a router"), "the sub-task's answer did not reach the model: {second}");
    assert!(done.provenance.lineage.iter().any(|hop| hop.delegate_id == "ldp:delegate:sharp"));
    for server in [planner, sharp, rough] {
        server.shutdown().await?;
    }
    Ok(())
}
