#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `LlmDelegate` with a toolbox, behind the LDP runtime (in memory), its model a scripted stub on both wire
//! formats: a tool call runs as a sub-task under the child contract (budget left, depth minus one, the parent's
//! failure policy), its answer goes back to the model, usage is summed and the hop is in the lineage; and every
//! bound (rounds, budget, depth, a hanging or unknown tool) ends in a typed answer with nothing run twice.

mod common;
use common::backend;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use ldp_llm::stub::{Flavor, Stub, StubConfig, StubTurn};
use ldp_llm::{LlmDelegate, ToolLoopLimits, ToolOutcome, ToolRun, ToolSpec, Toolbox};
use ldp_session::runtime::{Client, DelegateRuntime, MemoryTransport, Submission};
use ldp_session::{InitiatorConfig, PeerContext, Responder, ResponderConfig, SeededIds, SessionError, SystemClock};
use ldp_types::{
    Budget, DelegateId, DelegationContract, FailurePolicy, LdpError, PayloadMode, Provenance, RawJson, SessionConfig,
    codes,
};
use serde_json::{Value, json};

const FLAVORS: [Flavor; 2] = [Flavor::OpenAi, Flavor::Anthropic];

/// One tool, `upper`, answered in process; records every run and the contract it came with.
#[derive(Debug, Default)]
struct Upper {
    runs: Mutex<Vec<(Value, Option<DelegationContract>)>>,
    hang: bool,
}

#[async_trait]
impl Toolbox for Upper {
    fn tools(&self) -> Vec<ToolSpec> {
        vec![ToolSpec::new(
            "upper",
            "Upper-cases a text",
            json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
        )]
    }

    async fn run(&self, call: ToolRun<'_>) -> Result<ToolOutcome, LdpError> {
        self.runs.lock().unwrap().push((call.arguments.clone(), call.contract.clone()));
        if self.hang {
            tokio::time::sleep(Duration::from_secs(3600)).await;
        }
        let text = call.arguments["text"].as_str().unwrap_or_default().to_uppercase();
        let mut provenance = Provenance::new("ldp:delegate:upper", "upper-1", PayloadMode::Text);
        provenance.tokens_used = Some(5);
        provenance.cost_usd = Some(0.25);
        Ok(ToolOutcome::new(RawJson::from(json!(text)), Some(provenance)))
    }
}

async fn client(delegate: LlmDelegate) -> (Client<MemoryTransport>, String) {
    let card = delegate.card(DelegateId::new("ldp:delegate:planner").unwrap(), 8192);
    let responder = Responder::new(ResponderConfig::new(card), Arc::new(SystemClock), Box::new(SeededIds::new(7)));
    let runtime = DelegateRuntime::new(responder, Arc::new(delegate));
    let transport = MemoryTransport::new(runtime, PeerContext::default());
    let mut cfg = InitiatorConfig::new("ldp:delegate:caller");
    cfg.trust_domain = Some("default".into());
    let client = Client::connect(transport, cfg, Arc::new(SystemClock), Box::new(SeededIds::new(8))).await.unwrap();
    let session = client.propose(SessionConfig::default()).await.unwrap();
    (client, session.session_id)
}

fn contract(tokens: Option<u64>, depth: Option<u32>) -> DelegationContract {
    let mut c = DelegationContract::new("ctr-plan", "plan")
        .with_failure_policy(FailurePolicy::FailClosed)
        .with_budget(Budget { max_tokens: tokens, max_cost_usd: None });
    c.policy.max_delegation_depth = depth;
    c
}

fn call_upper(text: &str) -> StubTurn {
    StubTurn::call("upper", &json!({ "text": text }))
}

fn peer_error(result: Result<ldp_session::runtime::TaskOutcome, SessionError>) -> LdpError {
    match result {
        Err(SessionError::Peer(e)) => e,
        other => panic!("expected a typed failure, got {other:?}"),
    }
}

#[tokio::test]
async fn a_tool_call_runs_as_a_sub_task_and_its_answer_goes_back_to_the_model() {
    for flavor in FLAVORS {
        let script = vec![call_upper("hello world"), StubTurn::text("the tool said HELLO WORLD")];
        let stub = Stub::start(StubConfig::new(flavor).with_script(script)).await.unwrap();
        let tools = Arc::new(Upper::default());
        let delegate = LlmDelegate::new(backend(&stub, flavor)).with_toolbox(tools.clone(), ToolLoopLimits::default());
        let (client, sid) = client(delegate).await;
        let task = Submission::new(&sid, "chat", "shout hello world").contract(contract(Some(10_000), Some(2)));
        let out = client.submit_task(task).await.unwrap();
        assert_eq!(out.output.as_string().unwrap(), "the tool said HELLO WORLD", "{flavor:?}");

        // The sub-task ran once, with the arguments the model wrote and the child contract.
        let runs = tools.runs.lock().unwrap().clone();
        assert_eq!(runs.len(), 1, "{flavor:?}");
        assert_eq!(runs[0].0, json!({"text": "hello world"}));
        let child = runs[0].1.clone().expect("a child contract");
        assert_eq!(child.policy.max_delegation_depth, Some(1), "depth minus one");
        assert_eq!(child.policy.failure_policy, FailurePolicy::FailClosed, "the parent's policy");
        let left = child.policy.budget.unwrap().max_tokens.unwrap();
        assert!(left < 10_000, "{flavor:?}: the budget the first model call left, not the whole ({left})");

        // The tool's answer went back to the model in the second request.
        let second = &stub.recorded()[1];
        assert!(second.to_string().contains("HELLO WORLD"), "{flavor:?}: {second}");
        // Usage sums the model's two answers and the sub-task's; the hop is in the lineage.
        let first_model_tokens = 10_000 - left;
        let total = out.provenance.tokens_used.unwrap();
        assert!(total > first_model_tokens + 5, "{flavor:?}: {total} sums the model's answers and the sub-task's");
        assert!(
            out.provenance.lineage.iter().any(|hop| hop.delegate_id == "ldp:delegate:upper"),
            "{flavor:?}: {:?}",
            out.provenance.lineage
        );
    }
}

#[tokio::test]
async fn at_depth_zero_no_tool_is_offered() {
    for flavor in FLAVORS {
        let stub = Stub::start(StubConfig::new(flavor).with_script(vec![StubTurn::text("on my own")])).await.unwrap();
        let tools = Arc::new(Upper::default());
        let delegate = LlmDelegate::new(backend(&stub, flavor)).with_toolbox(tools.clone(), ToolLoopLimits::default());
        let (client, sid) = client(delegate).await;
        let task = Submission::new(&sid, "chat", "do it").contract(contract(None, Some(0)));
        let out = client.submit_task(task).await.unwrap();
        assert_eq!(out.output.as_string().unwrap(), "on my own");
        assert!(stub.recorded()[0].get("tools").is_none(), "{flavor:?}: tools offered at depth 0");
        assert!(tools.runs.lock().unwrap().is_empty());
    }
}

#[tokio::test]
async fn a_model_that_keeps_calling_is_stopped_at_the_round_bound() {
    for flavor in FLAVORS {
        // The last turn repeats: the model calls forever.
        let stub = Stub::start(StubConfig::new(flavor).with_script(vec![call_upper("again")])).await.unwrap();
        let tools = Arc::new(Upper::default());
        let mut limits = ToolLoopLimits::default();
        limits.max_rounds = 3;
        let delegate = LlmDelegate::new(backend(&stub, flavor)).with_toolbox(tools.clone(), limits);
        let (client, sid) = client(delegate).await;
        let e = peer_error(client.submit(&sid, "chat", "loop", None).await);
        assert_eq!(e.code, codes::BUDGET_EXCEEDED, "{flavor:?}: {e}");
        assert!(e.partial_output.is_some(), "{flavor:?}: the text so far is kept");
        assert_eq!(tools.runs.lock().unwrap().len(), 3, "{flavor:?}: one run per round, none after the bound");
        assert_eq!(stub.requests(), 4, "{flavor:?}: three rounds of calls and the answer that still called");
    }
}

#[tokio::test]
async fn the_budget_bounds_model_and_sub_tasks_together() {
    for flavor in FLAVORS {
        let script = vec![call_upper("a"), call_upper("b"), StubTurn::text("never reached")];
        let stub = Stub::start(StubConfig::new(flavor).with_script(script)).await.unwrap();
        let tools = Arc::new(Upper::default());
        let delegate = LlmDelegate::new(backend(&stub, flavor)).with_toolbox(tools.clone(), ToolLoopLimits::default());
        let (client, sid) = client(delegate).await;
        // The stub's tool-call answer costs 18 tokens (10 in, 8 out) and the sub-task 5: 23 > 20 after round one.
        let task = Submission::new(&sid, "chat", "go").contract(contract(Some(20), None));
        let e = peer_error(client.submit_task(task).await);
        assert_eq!(e.code, codes::BUDGET_EXCEEDED, "{flavor:?}: {e}");
        assert_eq!(tools.runs.lock().unwrap().len(), 1, "{flavor:?}: nothing ran once the budget was gone");
    }
}

#[tokio::test]
async fn unknown_tools_bad_arguments_and_hanging_tools_are_answered_to_the_model() {
    for flavor in FLAVORS {
        let script = vec![
            StubTurn::call("rm_rf", &json!({})),
            StubTurn::Calls(vec![("upper".into(), "{not json".into())]),
            call_upper("slow"),
            StubTurn::text("gave up on the tools"),
        ];
        let stub = Stub::start(StubConfig::new(flavor).with_script(script)).await.unwrap();
        let tools = Arc::new(Upper { hang: true, ..Upper::default() });
        let mut limits = ToolLoopLimits::default();
        limits.call_timeout = Duration::from_millis(200);
        let delegate = LlmDelegate::new(backend(&stub, flavor)).with_toolbox(tools.clone(), limits);
        let (client, sid) = client(delegate).await;
        let out = client.submit(&sid, "chat", "try things", None).await.unwrap();
        assert_eq!(out.output.as_string().unwrap(), "gave up on the tools", "{flavor:?}");
        let recorded = stub.recorded();
        let said = |i: usize| recorded[i].to_string();
        assert!(said(1).contains("SKILL_NOT_FOUND"), "{flavor:?}: {}", said(1));
        assert!(said(2).contains("MALFORMED_MESSAGE"), "{flavor:?}: {}", said(2));
        assert!(said(3).contains("TIMEOUT"), "{flavor:?}: {}", said(3));
        // The unknown tool and the broken call never ran; the hanging one ran once.
        assert_eq!(tools.runs.lock().unwrap().len(), 1, "{flavor:?}");
    }
}
