//! Run with: cargo run -p ldp-examples --example llm_delegate [-- openai|anthropic BASE_URL MODEL]
//!
//! A language model as an LDP delegate: an `LlmDelegate` over a provider backend, served over HTTP, called by a
//! client that reads the provenance the model's answer filled in and sees a fail_closed token budget stop it.
//! With no arguments the provider is a local stub speaking the OpenAI wire format; with arguments, a real
//! provider (the key from OPENAI_API_KEY or ANTHROPIC_API_KEY when set), e.g. a llama.cpp server:
//! `cargo run -p ldp-examples --example llm_delegate -- openai http://127.0.0.1:8080/v1 smollm2`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::sync::Arc;

use ldp_llm::stub::{Flavor, Stub, StubConfig};
use ldp_llm::{AnthropicBackend, ApiKey, HttpOptions, LlmBackend, LlmDelegate, OpenAiBackend, PromptTemplate};
use ldp_session::runtime::{Client, DelegateRuntime};
use ldp_session::{InitiatorConfig, Responder, ResponderConfig, SeededIds, SessionError, SystemClock};
use ldp_transport_http::{HttpServerConfig, HttpState, HttpTransport};
use ldp_types::{Budget, DelegateId, DelegationContract, FailurePolicy, SessionConfig};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // The provider: a stub on loopback, or the one named on the command line.
    let mut stub = None;
    let backend: Arc<dyn LlmBackend> = match args.as_slice() {
        [kind, url, model] if kind == "anthropic" => {
            let key = ApiKey::from_env("ANTHROPIC_API_KEY").ok();
            Arc::new(AnthropicBackend::new(url, model, key, 512, HttpOptions::default())?)
        }
        [_, url, model] => {
            let key = ApiKey::from_env("OPENAI_API_KEY").ok();
            Arc::new(OpenAiBackend::new(url, model, key, HttpOptions::default())?)
        }
        _ => {
            let reply = "LDP carries the task, the contract and the provenance between delegates.";
            let s = Stub::start(StubConfig::new(Flavor::OpenAi).with_reply(reply)).await?;
            let backend = Arc::new(OpenAiBackend::new(s.base_url(), "stub-model", None, HttpOptions::default())?);
            stub = Some(s);
            backend
        }
    };

    // The delegate: a system prompt and two skills, served over HTTP.
    let delegate = LlmDelegate::new(backend).with_system_prompt("You are a concise assistant.").with_skills([
        ("chat".to_owned(), PromptTemplate::identity()),
        ("summarize".to_owned(), PromptTemplate::new("Summarize in one sentence: {{input}}")),
    ]);
    let card = delegate.card(DelegateId::new("ldp:delegate:llm-example")?, 8192);
    let responder =
        Responder::new(ResponderConfig::new(card), Arc::new(SystemClock), Box::new(SeededIds::from_entropy()));
    let runtime = DelegateRuntime::new(responder, Arc::new(delegate));
    let server = ldp_transport_http::spawn("127.0.0.1:0", HttpState::new(runtime, HttpServerConfig::default())).await?;
    println!("LLM delegate listening on {}", server.url());

    // The client.
    let mut cfg = InitiatorConfig::new("ldp:delegate:llm-example-client");
    cfg.trust_domain = Some("default".into());
    let client = Client::connect(
        HttpTransport::new(server.url())?,
        cfg,
        Arc::new(SystemClock),
        Box::new(SeededIds::from_entropy()),
    )
    .await?;
    let card = client.card();
    println!("card: {} {} ({} tokens of context)", card.model_family, card.model_version, card.context_window);
    let session = client.propose(SessionConfig::default()).await?;
    let text =
        "The LLM Delegate Protocol lets agents delegate tasks to models with identity, contracts and provenance.";
    let out = client.submit(&session.session_id, "summarize", text, None).await?;
    println!("summary: {}", out.output.as_string().unwrap_or_default());
    println!("tokens_used {:?}, cost_usd {:?}", out.provenance.tokens_used, out.provenance.cost_usd);

    // A fail_closed budget too small for the answer: generation stops, the partial output comes back.
    let contract = DelegationContract::new("tight", "answer in 5 tokens")
        .with_failure_policy(FailurePolicy::FailClosed)
        .with_budget(Budget { max_tokens: Some(5), max_cost_usd: None });
    match client.submit(&session.session_id, "chat", "Explain LDP in detail.", Some(contract)).await {
        Err(SessionError::Peer(e)) => println!("budget: {} with partial output {:?}", e.code, e.partial_output),
        other => println!("budget: unexpected {other:?}"),
    }
    client.close(&session.session_id).await?;
    server.shutdown().await?;
    drop(stub);
    Ok(())
}
