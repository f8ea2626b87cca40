#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Tool calling, sampling and structured output on both wire formats (`ldp_llm::stub` scripted to answer with tool
//! calls): calls read whole from plain answers and assembled from streamed pieces, calls and results sent back as
//! each provider documents them, sampling parameters and response schemas on the wire, and what a hostile model
//! or provider can send.

use std::sync::Arc;
use std::time::Duration;

use ldp_llm::stub::{Flavor, Stub, StubConfig, StubTurn};
use ldp_llm::{
    ANSWER_TOOL, AnthropicBackend, ChatMessage, ChatRequest, FinishReason, HttpOptions, LlmBackend, LlmError,
    OpenAiBackend, Sampling, StreamControl, ToolCall, ToolSpec, Usage,
};
use serde_json::{Value, json};

const FLAVORS: [Flavor; 2] = [Flavor::OpenAi, Flavor::Anthropic];

fn fast() -> HttpOptions {
    let mut o = HttpOptions::default();
    o.retry_backoff = Duration::from_millis(10);
    o.request_timeout = Duration::from_secs(5);
    o
}

fn backend(stub: &Stub, flavor: Flavor) -> Arc<dyn LlmBackend> {
    match flavor {
        Flavor::OpenAi => Arc::new(OpenAiBackend::new(stub.base_url(), "stub-model", None, fast()).unwrap()),
        Flavor::Anthropic => Arc::new(AnthropicBackend::new(stub.base_url(), "stub-model", None, 256, fast()).unwrap()),
    }
}

fn search_tool() -> ToolSpec {
    ToolSpec::new(
        "search",
        "Finds documents about a topic",
        json!({"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}),
    )
}

fn ask_with_tools() -> ChatRequest {
    ChatRequest::new(vec![ChatMessage::user("find LDP papers")]).with_tools(vec![search_tool()])
}

async fn both_ways(b: &dyn LlmBackend, request: &ChatRequest) -> [ldp_llm::ChatResponse; 2] {
    let plain = b.complete(request).await.unwrap();
    let mut pieces = Vec::new();
    let mut sink = |p: &str, _: &Usage| {
        pieces.push(p.to_owned());
        StreamControl::Continue
    };
    let streamed = b.stream(request, &mut sink).await.unwrap();
    [plain, streamed]
}

#[tokio::test]
async fn tool_calls_are_read_plain_and_assembled_from_a_stream() {
    let args = json!({"query": "delegate protocol \"quoted\" ünïcode", "limit": 3});
    let calls = StubTurn::Calls(vec![("search".into(), args.to_string()), ("fetch".into(), "{}".into())]);
    for flavor in FLAVORS {
        let stub = Stub::start(StubConfig::new(flavor).with_script(vec![calls.clone()])).await.unwrap();
        let b = backend(&stub, flavor);
        for answer in both_ways(&*b, &ask_with_tools()).await {
            assert_eq!(answer.finish, FinishReason::ToolCalls, "{flavor:?}");
            let names: Vec<&str> = answer.tool_calls.iter().map(|c| c.name.as_str()).collect();
            assert_eq!(names, ["search", "fetch"], "{flavor:?}");
            // Streamed in three pieces each, the arguments come out whole and equal to what the model wrote.
            assert_eq!(answer.tool_calls[0].arguments_json().unwrap(), args, "{flavor:?}");
            assert_eq!(answer.tool_calls[1].arguments_json().unwrap(), json!({}), "{flavor:?}");
            assert_ne!(answer.tool_calls[0].id, answer.tool_calls[1].id, "{flavor:?}: each call has its own id");
        }
        // The tools went out in the provider's shape.
        let sent = &stub.recorded()[0];
        match flavor {
            Flavor::OpenAi => {
                assert_eq!(sent["tools"][0]["type"], "function");
                assert_eq!(sent["tools"][0]["function"]["name"], "search");
                assert_eq!(sent["tools"][0]["function"]["parameters"], search_tool().input_schema);
            }
            Flavor::Anthropic => {
                assert_eq!(sent["tools"][0]["name"], "search");
                assert_eq!(sent["tools"][0]["input_schema"], search_tool().input_schema);
            }
        }
    }
}

#[tokio::test]
async fn calls_and_results_go_back_in_each_providers_shape() {
    for flavor in FLAVORS {
        let stub =
            Stub::start(StubConfig::new(flavor).with_script(vec![StubTurn::text("two papers found")])).await.unwrap();
        let b = backend(&stub, flavor);
        let call = ToolCall::new("call-7", "search", r#"{"query":"ldp"}"#);
        let history = vec![
            ChatMessage::user("find LDP papers"),
            ChatMessage::assistant_calls("", vec![call]),
            ChatMessage::tool_result("call-7", r#"["paper A","paper B"]"#),
        ];
        let answer = b.complete(&ChatRequest::new(history).with_tools(vec![search_tool()])).await.unwrap();
        assert_eq!(answer.text, "two papers found");
        assert!(answer.tool_calls.is_empty());
        let sent = &stub.recorded()[0];
        let messages = sent["messages"].as_array().unwrap();
        match flavor {
            Flavor::OpenAi => {
                assert_eq!(messages.len(), 3);
                assert_eq!(messages[1]["tool_calls"][0]["id"], "call-7");
                assert_eq!(messages[1]["tool_calls"][0]["function"]["arguments"], r#"{"query":"ldp"}"#);
                assert_eq!(
                    messages[2],
                    json!({"role": "tool", "tool_call_id": "call-7",
                                               "content": r#"["paper A","paper B"]"#})
                );
            }
            Flavor::Anthropic => {
                assert_eq!(messages.len(), 3);
                assert_eq!(
                    messages[1]["content"][0],
                    json!({"type": "tool_use", "id": "call-7", "name": "search", "input": {"query": "ldp"}})
                );
                assert_eq!(messages[2]["role"], "user");
                assert_eq!(messages[2]["content"][0]["type"], "tool_result");
                assert_eq!(messages[2]["content"][0]["tool_use_id"], "call-7");
            }
        }
    }
}

#[tokio::test]
async fn sampling_parameters_reach_the_wire() {
    let mut sampling = Sampling::default();
    sampling.temperature = Some(0.0);
    sampling.top_p = Some(0.9);
    sampling.stop = vec!["END".into()];
    sampling.seed = Some(42);
    for flavor in FLAVORS {
        let stub = Stub::start(StubConfig::new(flavor)).await.unwrap();
        let b = backend(&stub, flavor);
        b.complete(&ChatRequest::new(vec![ChatMessage::user("hi")]).with_sampling(sampling.clone())).await.unwrap();
        let sent = &stub.recorded()[0];
        assert_eq!(sent["temperature"], 0.0, "{flavor:?}");
        assert_eq!(sent["top_p"], 0.9, "{flavor:?}");
        match flavor {
            Flavor::OpenAi => {
                assert_eq!(sent["stop"], json!(["END"]));
                assert_eq!(sent["seed"], 42);
            }
            Flavor::Anthropic => {
                assert_eq!(sent["stop_sequences"], json!(["END"]));
                assert!(sent.get("seed").is_none(), "the Messages API has no seed");
            }
        }
        // Unset parameters are left to the provider.
        b.complete(&ChatRequest::new(vec![ChatMessage::user("hi")])).await.unwrap();
        let sent = &stub.recorded()[1];
        for field in ["temperature", "top_p", "stop", "seed", "stop_sequences", "tools", "response_format"] {
            assert!(sent.get(field).is_none(), "{flavor:?}: {field} sent unasked");
        }
    }
}

#[tokio::test]
async fn a_response_schema_is_asked_for_and_the_answer_is_its_json() {
    let schema = json!({"type": "object", "properties": {"verdict": {"type": "string"}}, "required": ["verdict"]});
    let answer_json = json!({"verdict": "accept"});
    // On Anthropic the model answers by calling the answer tool; the OpenAI stub answers the text itself.
    for flavor in FLAVORS {
        let turn = match flavor {
            Flavor::OpenAi => StubTurn::text(answer_json.to_string()),
            Flavor::Anthropic => StubTurn::call(ANSWER_TOOL, &answer_json),
        };
        let stub = Stub::start(StubConfig::new(flavor).with_script(vec![turn])).await.unwrap();
        let b = backend(&stub, flavor);
        let request = ChatRequest::new(vec![ChatMessage::user("judge")]).with_response_schema(schema.clone());
        for answer in both_ways(&*b, &request).await {
            let parsed: Value = serde_json::from_str(&answer.text).unwrap();
            assert_eq!(parsed, answer_json, "{flavor:?}");
            assert!(answer.tool_calls.is_empty(), "{flavor:?}: the answer tool is not a call to make");
            assert_eq!(answer.finish, FinishReason::Stop, "{flavor:?}");
        }
        let sent = &stub.recorded()[0];
        match flavor {
            Flavor::OpenAi => {
                assert_eq!(sent["response_format"]["type"], "json_schema");
                assert_eq!(sent["response_format"]["json_schema"]["schema"], schema);
            }
            Flavor::Anthropic => {
                assert_eq!(sent["tools"][0]["name"], ANSWER_TOOL);
                assert_eq!(sent["tools"][0]["input_schema"], schema);
                assert_eq!(sent["tool_choice"], json!({"type": "tool", "name": ANSWER_TOOL}));
            }
        }
    }
}

#[tokio::test]
async fn what_a_model_writes_as_arguments_is_checked_when_read() {
    for flavor in FLAVORS {
        let broken = StubTurn::Calls(vec![("search".into(), r#"{"query": "unterminated"#.into())]);
        let stub = Stub::start(StubConfig::new(flavor).with_script(vec![broken])).await.unwrap();
        let b = backend(&stub, flavor);
        let answer = b.stream(&ask_with_tools(), &mut |_, _| StreamControl::Continue).await.unwrap();
        // The text arrives as the model wrote it; reading it is where it fails, typed.
        assert_eq!(answer.tool_calls.len(), 1, "{flavor:?}");
        assert!(matches!(answer.tool_calls[0].arguments_json(), Err(LlmError::Malformed(_))), "{flavor:?}");
    }
}
