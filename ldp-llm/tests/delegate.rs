#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `LlmDelegate` behind the LDP runtime (in memory): provenance from the provider's answer, the contract budget as
//! max_tokens and as a stop while streaming (CONTRACT_VIOLATED with the partial output under fail_closed),
//! provider errors as typed LDP errors, TASK_CANCEL stopping the provider's stream, prompts as configured.

mod common;
use common::backend;

use std::sync::Arc;
use std::time::Duration;

use ldp_llm::stub::{Behavior, Flavor, Stub, StubConfig};
use ldp_llm::{LlmDelegate, Price, PriceTable, PromptTemplate};
use ldp_session::runtime::{Client, Delegate, DelegateRuntime, MemoryTransport, Submission, TaskContext};
use ldp_session::{
    InitiatorConfig, PeerContext, Responder, ResponderConfig, SeededIds, SessionError, SystemClock, TaskKey,
    TaskOutput, TaskRequest,
};
use ldp_types::{Budget, DelegateId, DelegationContract, FailurePolicy, LdpError, SessionConfig, codes};

const FLAVORS: [Flavor; 2] = [Flavor::OpenAi, Flavor::Anthropic];

async fn client(delegate: LlmDelegate) -> (Client<MemoryTransport>, String) {
    client_of(delegate, Arc::default()).await
}

async fn client_of(
    delegate: LlmDelegate,
    keys: Arc<std::sync::Mutex<Vec<TaskKey>>>,
) -> (Client<MemoryTransport>, String) {
    let card = delegate.card(DelegateId::new("ldp:delegate:llm").unwrap(), 8192);
    let responder = Responder::new(ResponderConfig::new(card), Arc::new(SystemClock), Box::new(SeededIds::new(7)));
    let runtime = DelegateRuntime::new(responder, Arc::new(Noting(delegate, keys)));
    let transport = MemoryTransport::new(runtime, PeerContext::default());
    let mut cfg = InitiatorConfig::new("ldp:delegate:tester");
    cfg.trust_domain = Some("default".into());
    let client = Client::connect(transport, cfg, Arc::new(SystemClock), Box::new(SeededIds::new(8))).await.unwrap();
    let session = client.propose(SessionConfig::default()).await.unwrap();
    (client, session.session_id)
}

fn budget(tokens: u64, policy: FailurePolicy) -> DelegationContract {
    DelegationContract::new("ctr-llm", "answer")
        .with_failure_policy(policy)
        .with_budget(Budget { max_tokens: Some(tokens), max_cost_usd: None })
}

#[tokio::test]
async fn provenance_comes_from_the_providers_answer() {
    for flavor in FLAVORS {
        let stub = Stub::start(StubConfig::new(flavor).with_model("stub-model-2025")).await.unwrap();
        let prices =
            PriceTable::new().with("stub-model", Price { input_per_mtok: 1_000_000.0, output_per_mtok: 2_000_000.0 });
        for stream in [true, false] {
            let delegate = LlmDelegate::new(backend(&stub, flavor)).with_prices(prices.clone()).with_streaming(stream);
            let (client, sid) = client(delegate).await;
            let card = client.card();
            assert_eq!(
                (card.model_family.as_str(), card.model_version.as_str()),
                (if flavor == Flavor::OpenAi { "openai-compatible" } else { "anthropic" }, "stub-model")
            );
            assert_eq!(card.context_window, 8192);
            let out = client.submit(&sid, "chat", "how are you today", None).await.unwrap();
            assert_eq!(out.output.as_string().unwrap(), "how are you today");
            // 4 words in, 4 out; priced by the longest prefix of the model that answered ($1 and $2 a token).
            assert_eq!(out.provenance.tokens_used, Some(8), "{flavor:?} stream={stream}");
            assert_eq!(out.provenance.cost_usd, Some(4.0 + 8.0));
            assert_eq!(out.provenance.confidence, None);
            // The model that answered (the stub's dated name), not the configured "stub-model" of the card.
            assert_eq!(out.provenance.model_version, "stub-model-2025", "{flavor:?} stream={stream}");
        }
    }
}

#[tokio::test]
async fn the_budget_becomes_max_tokens_and_a_fail_closed_budget_stops_generation() {
    let reply = "one two three four five six seven eight nine ten eleven twelve";
    for flavor in FLAVORS {
        let stub = Stub::start(StubConfig::new(flavor).with_reply(reply)).await.unwrap();
        let (client, sid) = client(LlmDelegate::new(backend(&stub, flavor))).await;
        // 2 tokens of input ("hi there"), so a budget of 6 leaves room for 4 tokens of output: the 5th piece
        // exceeds it, generation stops, and the text so far travels as partial output.
        let err =
            client.submit(&sid, "chat", "hi there", Some(budget(6, FailurePolicy::FailClosed))).await.unwrap_err();
        let SessionError::Peer(err) = err else { panic!("{err:?}") };
        assert_eq!(err.code, codes::CONTRACT_VIOLATED, "{flavor:?}: {err:?}");
        let partial = err.partial_output.as_ref().and_then(|v| v.as_str()).unwrap();
        assert!(reply.starts_with(partial) && !partial.is_empty() && partial.len() < reply.len(), "{partial:?}");
        assert_eq!(stub.recorded()[0]["max_tokens"], 6, "{flavor:?}: the budget is the provider's max_tokens");
        // Within budget: the whole answer.
        let out = client.submit(&sid, "chat", "hi there", Some(budget(100, FailurePolicy::FailClosed))).await.unwrap();
        assert_eq!(out.output.as_string().unwrap(), reply);
        assert_eq!(stub.recorded()[1]["max_tokens"], 100);
        // fail_open: the cut answer is the result, and the initiator flags the overrun.
        let out = client.submit(&sid, "chat", "hi there", Some(budget(6, FailurePolicy::FailOpen))).await.unwrap();
        assert!(reply.starts_with(out.output.as_string().unwrap().as_ref()));
        assert_eq!(out.provenance.contract_satisfied, Some(false), "{:?}", out.provenance);
    }
}

#[tokio::test]
async fn a_non_streamed_answer_cut_by_the_budget_violates_a_fail_closed_contract() {
    let stub = Stub::start(StubConfig::new(Flavor::OpenAi).with_reply("a b c d e f g h i j")).await.unwrap();
    let (client, sid) = client(LlmDelegate::new(backend(&stub, Flavor::OpenAi)).with_streaming(false)).await;
    let err = client.submit(&sid, "chat", "x", Some(budget(4, FailurePolicy::FailClosed))).await.unwrap_err();
    let SessionError::Peer(err) = err else { panic!("{err:?}") };
    assert_eq!(err.code, codes::CONTRACT_VIOLATED);
    assert_eq!(err.partial_output, Some(serde_json::json!("a b c d")));
}

#[tokio::test]
async fn provider_errors_reach_the_initiator_typed() {
    for flavor in FLAVORS {
        let stub = Stub::start(StubConfig::new(flavor)).await.unwrap();
        let (client, sid) = client(LlmDelegate::new(backend(&stub, flavor))).await;
        for (status, code, retryable) in [
            (401, "PROVIDER_AUTH_FAILED", false),
            (429, codes::CAPACITY_EXCEEDED, true),
            (503, codes::TRANSPORT_ERROR, true),
        ] {
            stub.set_behavior(Behavior::Status { status, retry_after: Some(3) });
            let err = client.submit(&sid, "chat", "hi", None).await.unwrap_err();
            let SessionError::Peer(err) = err else { panic!("{err:?}") };
            assert_eq!((err.code.as_str(), err.retryable), (code, retryable), "{flavor:?} {status}: {err:?}");
        }
    }
}

#[tokio::test]
async fn task_cancel_stops_the_providers_stream() {
    for flavor in FLAVORS {
        let stub = Stub::start(StubConfig::new(flavor).with_token_delay(Duration::from_millis(50))).await.unwrap();
        let keys: Arc<std::sync::Mutex<Vec<TaskKey>>> = Arc::default();
        let (client, sid) = client_of(LlmDelegate::new(backend(&stub, flavor)), keys.clone()).await;
        let client = Arc::new(client);
        let submit = {
            let (client, sid) = (client.clone(), sid.clone());
            tokio::spawn(async move { client.submit(&sid, "chat", "w ".repeat(300).as_str(), None).await })
        };
        for _ in 0..100 {
            if stub.requests() == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
        let key = keys.lock().unwrap()[0].clone();
        client.cancel(&key).await.unwrap();
        let err = submit.await.unwrap().unwrap_err();
        let SessionError::Peer(err) = err else { panic!("{err:?}") };
        assert_eq!(err.code, codes::CANCELLED);
        for _ in 0..200 {
            if stub.cancelled_streams() == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(stub.cancelled_streams(), 1, "{flavor:?}: the provider's stream was not closed");
    }
}

/// The LLM delegate, noting the key of each task it runs (the client does not tell its task ids).
struct Noting(LlmDelegate, Arc<std::sync::Mutex<Vec<TaskKey>>>);

#[async_trait::async_trait]
impl Delegate for Noting {
    async fn execute(&self, task: TaskRequest, ctx: TaskContext) -> Result<TaskOutput, LdpError> {
        self.1.lock().unwrap().push(task.key.clone());
        self.0.execute(task, ctx).await
    }
}

#[tokio::test]
async fn system_prompt_and_skill_templates_shape_the_request() {
    let stub = Stub::start(StubConfig::new(Flavor::OpenAi)).await.unwrap();
    let delegate = LlmDelegate::new(backend(&stub, Flavor::OpenAi))
        .with_system_prompt("You are terse.")
        .with_skills([
            ("chat".to_owned(), PromptTemplate::identity()),
            ("summarize".to_owned(), PromptTemplate::new("Summarize this text:\n{{input}}\nEnd.")),
            ("translate".to_owned(), PromptTemplate::new("Translate to French:")),
        ])
        .with_max_tokens(64);
    let (client, sid) = client(delegate).await;
    let skills: Vec<_> = client.card().capabilities.iter().map(|c| c.name.clone()).collect();
    assert_eq!(skills, ["chat", "summarize", "translate"]);
    client.submit(&sid, "summarize", "the text", None).await.unwrap();
    client.submit(&sid, "translate", "good morning", Some(budget(1000, FailurePolicy::FailClosed))).await.unwrap();
    let sent = stub.recorded();
    assert_eq!(sent[0]["messages"][0], serde_json::json!({"role": "system", "content": "You are terse."}));
    assert_eq!(sent[0]["messages"][1]["content"], "Summarize this text:\nthe text\nEnd.");
    assert_eq!(sent[0]["max_tokens"], 64);
    // (after the first turn, which is now history)
    let last = sent[1]["messages"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["content"], "Translate to French:\ngood morning");
    // The configured cap wins over a larger budget.
    assert_eq!(sent[1]["max_tokens"], 64);
}

#[tokio::test]
async fn the_sessions_history_becomes_the_chat_history() {
    for flavor in FLAVORS {
        let stub = Stub::start(StubConfig::new(flavor)).await.unwrap();
        let delegate = LlmDelegate::new(backend(&stub, flavor)).with_system_prompt("sys").with_skills([
            ("chat".to_owned(), PromptTemplate::identity()),
            ("shout".to_owned(), PromptTemplate::new("Shout: {{input}}")),
        ]);
        let (client, sid) = client(delegate).await;
        let first = client.submit(&sid, "chat", "my name is Ada", None).await.unwrap();
        client.submit(&sid, "shout", "hello", None).await.unwrap();
        let third = client.submit(&sid, "chat", "what is my name", None).await.unwrap();
        let sent = stub.recorded();
        let messages = |v: &serde_json::Value| {
            let all = v["messages"].as_array().unwrap().clone();
            // OpenAI carries the system prompt as the first message; Anthropic as a field.
            all.into_iter().filter(|m| m["role"] != "system").collect::<Vec<_>>()
        };
        assert_eq!(
            messages(&sent[2]),
            [
                serde_json::json!({"role": "user", "content": "my name is Ada"}),
                serde_json::json!({"role": "assistant", "content": "my name is Ada"}),
                serde_json::json!({"role": "user", "content": "Shout: hello"}),
                serde_json::json!({"role": "assistant", "content": "Shout: hello"}),
                serde_json::json!({"role": "user", "content": "what is my name"}),
            ],
            "{flavor:?}"
        );
        // The provider counted the history as input: the third turn's tokens include the first two.
        assert!(third.provenance.tokens_used.unwrap() > first.provenance.tokens_used.unwrap() + 4);
        // A new session starts with no history.
        let session = client.propose(SessionConfig::default()).await.unwrap();
        client.submit(&session.session_id, "chat", "fresh", None).await.unwrap();
        assert_eq!(messages(&stub.recorded()[3]).len(), 1);
    }
}

#[tokio::test]
async fn streamed_pieces_reach_the_initiator_as_partial_output() {
    for flavor in FLAVORS {
        let stub = Stub::start(StubConfig::new(flavor).with_reply("one two three four")).await.unwrap();
        let (client, sid) = client(LlmDelegate::new(backend(&stub, flavor))).await;
        let (tx, mut rx) = tokio::sync::mpsc::channel(64);
        let out = client.submit_task(Submission::new(&sid, "chat", "go").progress(tx)).await.unwrap();
        assert_eq!(out.output.as_string().unwrap(), "one two three four");
        let mut pieces = Vec::new();
        while let Ok(Some(p)) = tokio::time::timeout(Duration::from_millis(500), rx.recv()).await {
            if let Some(partial) = p.partial {
                pieces.push(partial.as_string().unwrap().into_owned());
            }
            if pieces.len() == 4 {
                break;
            }
        }
        assert_eq!(pieces, ["one", " two", " three", " four"], "{flavor:?}");
    }
}
