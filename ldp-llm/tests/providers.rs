#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Both backends against local servers that speak each provider's documented wire format (`ldp_llm::stub`):
//! plain and streamed answers, usage, 401/429/500, malformed answers and streams, timeouts, cancellation, and what
//! is sent (system prompt, messages, max_tokens).

use std::sync::Arc;
use std::time::Duration;

use ldp_llm::stub::{Behavior, Flavor, Stub, StubConfig};
use ldp_llm::{
    AnthropicBackend, ApiKey, ChatMessage, ChatRequest, FinishReason, HttpOptions, LlmBackend, LlmError, OpenAiBackend,
    StreamControl, Usage,
};
use ldp_types::{ErrorCategory, codes};

const FLAVORS: [Flavor; 2] = [Flavor::OpenAi, Flavor::Anthropic];

fn fast() -> HttpOptions {
    let mut o = HttpOptions::default();
    o.retry_backoff = Duration::from_millis(10);
    o.request_timeout = Duration::from_secs(5);
    o.idle_timeout = Duration::from_secs(5);
    o
}

fn backend(stub: &Stub, flavor: Flavor, key: Option<&str>, opts: HttpOptions) -> Arc<dyn LlmBackend> {
    let key = key.map(ApiKey::new);
    match flavor {
        Flavor::OpenAi => Arc::new(OpenAiBackend::new(stub.base_url(), "stub-model", key, opts).unwrap()),
        Flavor::Anthropic => Arc::new(AnthropicBackend::new(stub.base_url(), "stub-model", key, 256, opts).unwrap()),
    }
}

fn hello(text: &str) -> ChatRequest {
    ChatRequest::new(vec![ChatMessage::user(text)])
}

#[tokio::test]
async fn plain_answers_carry_text_model_and_usage() {
    for flavor in FLAVORS {
        let stub = Stub::start(StubConfig::new(flavor).with_model("stub-model-2024-01-01")).await.unwrap();
        let b = backend(&stub, flavor, None, fast());
        let answer = b.complete(&hello("one two three").with_system("be brief now")).await.unwrap();
        assert_eq!(answer.text, "one two three", "{flavor:?}");
        // The dated model the provider answered with, not the configured name.
        assert_eq!(answer.model.as_deref(), Some("stub-model-2024-01-01"));
        // 3 words in the user message + 3 in the system prompt; 3 out.
        assert_eq!(answer.usage, Usage::new(6, 3), "{flavor:?}");
        assert_eq!(answer.finish, FinishReason::Stop);
    }
}

#[tokio::test]
async fn streamed_answers_arrive_piece_by_piece_with_usage() {
    for flavor in FLAVORS {
        let stub = Stub::start(StubConfig::new(flavor)).await.unwrap();
        let b = backend(&stub, flavor, None, fast());
        let mut pieces = Vec::new();
        let mut seen_usage = Vec::new();
        let mut sink = |p: &str, u: &Usage| {
            pieces.push(p.to_owned());
            seen_usage.push(u.output_tokens);
            StreamControl::Continue
        };
        let answer = b.stream(&hello("alpha beta gamma delta"), &mut sink).await.unwrap();
        assert_eq!(pieces, ["alpha", " beta", " gamma", " delta"], "{flavor:?}");
        // Usage known while streaming grows with each piece.
        assert_eq!(seen_usage, [Some(1), Some(2), Some(3), Some(4)]);
        assert_eq!(answer.text, "alpha beta gamma delta");
        assert_eq!(answer.usage, Usage::new(4, 4), "{flavor:?}: the provider's final usage");
        assert_eq!(answer.model.as_deref(), Some("stub-model-1"));
        let sent = &stub.recorded()[0];
        assert_eq!(sent["stream"], true);
        if flavor == Flavor::OpenAi {
            assert_eq!(sent["stream_options"]["include_usage"], true);
        }
    }
}

#[tokio::test]
async fn max_tokens_cuts_the_answer_and_is_sent() {
    for flavor in FLAVORS {
        let stub = Stub::start(StubConfig::new(flavor).with_reply("a b c d e f g h")).await.unwrap();
        let b = backend(&stub, flavor, None, fast());
        let answer = b.complete(&hello("x").with_max_tokens(3)).await.unwrap();
        assert_eq!(answer.text, "a b c");
        assert_eq!(answer.finish, FinishReason::Length);
        assert_eq!(stub.recorded()[0]["max_tokens"], 3);
        let mut sink = |_: &str, _: &Usage| StreamControl::Continue;
        let answer = b.stream(&hello("x").with_max_tokens(2), &mut sink).await.unwrap();
        assert_eq!((answer.text.as_str(), answer.finish), ("a b", FinishReason::Length), "{flavor:?}");
    }
}

#[tokio::test]
async fn the_request_follows_each_wire_format() {
    let request = ChatRequest::new(vec![
        ChatMessage::user("first"),
        ChatMessage::assistant("reply"),
        ChatMessage::user("second"),
    ])
    .with_system("sys prompt");
    let stub = Stub::start(StubConfig::new(Flavor::OpenAi)).await.unwrap();
    backend(&stub, Flavor::OpenAi, None, fast()).complete(&request).await.unwrap();
    let sent = &stub.recorded()[0];
    assert_eq!(sent["model"], "stub-model");
    assert_eq!(
        sent["messages"],
        serde_json::json!([
            {"role": "system", "content": "sys prompt"}, {"role": "user", "content": "first"},
            {"role": "assistant", "content": "reply"}, {"role": "user", "content": "second"}
        ])
    );
    assert!(sent.get("max_tokens").is_none(), "no max_tokens unless asked");
    let stub = Stub::start(StubConfig::new(Flavor::Anthropic)).await.unwrap();
    backend(&stub, Flavor::Anthropic, None, fast()).complete(&request).await.unwrap();
    let sent = &stub.recorded()[0];
    // The system prompt is a top-level field, and max_tokens is required (the backend's default).
    assert_eq!(sent["system"], "sys prompt");
    assert_eq!(sent["max_tokens"], 256);
    assert_eq!(
        sent["messages"],
        serde_json::json!([
            {"role": "user", "content": "first"}, {"role": "assistant", "content": "reply"},
            {"role": "user", "content": "second"}
        ])
    );
}

#[tokio::test]
async fn a_refused_key_is_a_security_error_that_never_shows_the_key() {
    let secret = "sk-test-SECRET-0123456789";
    for flavor in FLAVORS {
        let stub = Stub::start(StubConfig::new(flavor).with_api_key("the-right-key")).await.unwrap();
        let b = backend(&stub, flavor, Some(secret), fast());
        let err = b.complete(&hello("hi")).await.unwrap_err();
        assert!(matches!(err, LlmError::Unauthorized { status: 401, .. }), "{err:?}");
        let ldp = err.to_ldp();
        assert_eq!(ldp.category, ErrorCategory::Security);
        assert!(!ldp.retryable);
        // The stub quotes the key it got, as OpenAI does; it is scrubbed from every form of the error.
        for shown in [format!("{err}"), format!("{err:?}"), format!("{ldp:?}"), ldp.message.clone(), format!("{b:?}")] {
            assert!(!shown.contains(secret), "{flavor:?}: the key leaked: {shown}");
        }
        assert!(err.to_string().contains("<redacted>"), "{err}");
        assert_eq!(stub.requests(), 1, "a refused key is not retried");
        // The right key is accepted, in each provider's header.
        let b = backend(&stub, flavor, Some("the-right-key"), fast());
        assert_eq!(b.complete(&hello("hi")).await.unwrap().text, "hi");
    }
    assert_eq!(format!("{:?}", ApiKey::new(secret)), "ApiKey(<redacted>)");
}

#[tokio::test]
async fn rate_limits_are_capacity_errors_with_the_providers_retry_after() {
    for flavor in FLAVORS {
        let stub = Stub::start(StubConfig::new(flavor)).await.unwrap();
        stub.set_behavior(Behavior::Status { status: 429, retry_after: Some(7) });
        let err = backend(&stub, flavor, None, fast()).complete(&hello("hi")).await.unwrap_err();
        assert_eq!(err.retry_after(), Some(Duration::from_secs(7)), "{err:?}");
        let ldp = err.to_ldp();
        assert_eq!(ldp.code, codes::CAPACITY_EXCEEDED);
        assert!(ldp.retryable);
        assert!(ldp.message.contains("retry after 7 s"), "{}", ldp.message);
        assert_eq!(stub.requests(), 1, "the caller decides when to retry a rate limit");
    }
}

#[tokio::test]
async fn server_errors_are_retried_a_bounded_number_of_times() {
    for flavor in FLAVORS {
        let stub = Stub::start(StubConfig::new(flavor)).await.unwrap();
        // Two failures, then an answer: the default two retries get it.
        stub.set_behavior(Behavior::FailTimes(2));
        assert_eq!(backend(&stub, flavor, None, fast()).complete(&hello("hi")).await.unwrap().text, "hi");
        assert_eq!(stub.requests(), 3);
        // Always failing: three attempts, then a transient (retryable) transport error.
        stub.set_behavior(Behavior::Status { status: 500, retry_after: None });
        let mut sink = |_: &str, _: &Usage| StreamControl::Continue;
        let err = backend(&stub, flavor, None, fast()).stream(&hello("hi"), &mut sink).await.unwrap_err();
        assert!(matches!(err, LlmError::Unavailable { status: 500, attempts: 3, .. }), "{err:?}");
        assert_eq!(stub.requests(), 6);
        let ldp = err.to_ldp();
        assert_eq!(
            (ldp.category, ldp.code.as_str(), ldp.retryable),
            (ErrorCategory::Transport, codes::TRANSPORT_ERROR, true)
        );
        // No retries when told so.
        let mut opts = fast();
        opts.max_retries = 0;
        backend(&stub, flavor, None, opts).complete(&hello("hi")).await.unwrap_err();
        assert_eq!(stub.requests(), 7);
    }
}

#[tokio::test]
async fn malformed_answers_and_streams_are_typed_errors() {
    for flavor in FLAVORS {
        let stub = Stub::start(StubConfig::new(flavor)).await.unwrap();
        let b = backend(&stub, flavor, None, fast());
        let mut sink = |_: &str, _: &Usage| StreamControl::Continue;
        for behavior in [Behavior::MalformedStream, Behavior::TruncatedStream] {
            stub.set_behavior(behavior.clone());
            let err = b.stream(&hello("one two three four"), &mut sink).await.unwrap_err();
            assert!(matches!(err, LlmError::Malformed(_)), "{flavor:?} {behavior:?}: {err:?}");
            assert_eq!(err.to_ldp().code, "PROVIDER_MALFORMED");
            assert!(!err.to_ldp().retryable);
        }
        stub.set_behavior(Behavior::MalformedAnswer);
        let err = b.complete(&hello("hi")).await.unwrap_err();
        assert!(matches!(err, LlmError::Malformed(_)), "{flavor:?}: {err:?}");
    }
}

#[tokio::test]
async fn bodies_beyond_the_bound_are_refused() {
    for flavor in FLAVORS {
        let stub = Stub::start(StubConfig::new(flavor).with_reply("word ".repeat(2000))).await.unwrap();
        let mut opts = fast();
        opts.max_body = 4096;
        let b = backend(&stub, flavor, None, opts);
        let request = hello("hi").with_max_tokens(10_000);
        let err = b.complete(&request).await.unwrap_err();
        assert_eq!(err, LlmError::TooLarge { limit: 4096 }, "{flavor:?}");
        let mut sink = |_: &str, _: &Usage| StreamControl::Continue;
        let err = b.stream(&request, &mut sink).await.unwrap_err();
        assert_eq!(err, LlmError::TooLarge { limit: 4096 }, "{flavor:?}");
    }
}

#[tokio::test]
async fn a_silent_stream_times_out() {
    for flavor in FLAVORS {
        let stub = Stub::start(StubConfig::new(flavor).with_token_delay(Duration::from_millis(400))).await.unwrap();
        let mut opts = fast();
        opts.idle_timeout = Duration::from_millis(100);
        let mut sink = |_: &str, _: &Usage| StreamControl::Continue;
        let err = backend(&stub, flavor, None, opts).stream(&hello("a b c"), &mut sink).await.unwrap_err();
        assert!(matches!(err, LlmError::Timeout { .. }), "{flavor:?}: {err:?}");
        assert_eq!(err.to_ldp().code, codes::TIMEOUT);
        assert!(err.to_ldp().retryable);
    }
}

#[tokio::test]
async fn a_slow_stream_is_cancelled_by_dropping_the_call_or_by_stop() {
    for flavor in FLAVORS {
        let stub = Stub::start(StubConfig::new(flavor).with_token_delay(Duration::from_millis(50))).await.unwrap();
        let b = backend(&stub, flavor, None, fast());
        let long = "w ".repeat(200);
        // Dropping the future (what the runtime does on TASK_CANCEL) closes the provider's stream.
        let call = {
            let b = b.clone();
            let long = long.clone();
            tokio::spawn(async move {
                let mut sink = |_: &str, _: &Usage| StreamControl::Continue;
                b.stream(&hello(&long), &mut sink).await
            })
        };
        tokio::time::sleep(Duration::from_millis(200)).await;
        call.abort();
        wait_for(|| stub.cancelled_streams() == 1).await;
        // StreamControl::Stop ends it too, with the text so far.
        let mut n = 0;
        let mut sink = |_: &str, _: &Usage| {
            n += 1;
            if n == 3 { StreamControl::Stop } else { StreamControl::Continue }
        };
        let answer = b.stream(&hello(&long), &mut sink).await.unwrap();
        assert_eq!((answer.text.as_str(), answer.finish), ("w w w", FinishReason::Stopped), "{flavor:?}");
        wait_for(|| stub.cancelled_streams() == 2).await;
    }
}

#[tokio::test]
async fn an_unreachable_provider_is_a_transient_error_after_retries() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let b = OpenAiBackend::new(format!("http://{addr}/v1"), "m", None, fast()).unwrap();
    let err = b.complete(&hello("hi")).await.unwrap_err();
    assert!(matches!(err, LlmError::Transport { attempts: 3, .. }), "{err:?}");
    assert!(err.to_ldp().retryable);
}

async fn wait_for(cond: impl Fn() -> bool) {
    for _ in 0..200 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting");
}
