//! The provider-neutral chat call every backend implements.

use async_trait::async_trait;
use serde::Serialize;
use serde_json::Value;

use crate::LlmError;

/// Who said a message of the chat history.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
#[allow(clippy::exhaustive_enums)] // The turns of a chat; the system prompt travels apart.
pub enum Role {
    /// The initiator (a task's input).
    User,
    /// The model (a task's output, or the tools it calls).
    Assistant,
    /// The result of a tool the model called ([`ChatMessage::tool_result`]).
    Tool,
}

/// One message of the chat history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ChatMessage {
    /// Who said it.
    pub role: Role,
    /// What was said (for a tool result, the result's text).
    pub content: String,
    /// The tools an assistant message called, in the order the model called them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// For a [`Role::Tool`] message, the id of the call it answers ([`ToolCall::id`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl ChatMessage {
    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Self { role: Role::User, content: content.into(), tool_calls: Vec::new(), tool_call_id: None }
    }

    /// An assistant message.
    pub fn assistant(content: impl Into<String>) -> Self {
        Self { role: Role::Assistant, content: content.into(), tool_calls: Vec::new(), tool_call_id: None }
    }

    /// An assistant message that calls `calls` (with the text it said beside them, often empty): goes back into
    /// the history before the calls' results.
    pub fn assistant_calls(content: impl Into<String>, calls: Vec<ToolCall>) -> Self {
        Self { role: Role::Assistant, content: content.into(), tool_calls: calls, tool_call_id: None }
    }

    /// The result of the call `call_id`, as text (JSON text for structured results).
    pub fn tool_result(call_id: impl Into<String>, content: impl Into<String>) -> Self {
        Self { role: Role::Tool, content: content.into(), tool_calls: Vec::new(), tool_call_id: Some(call_id.into()) }
    }
}

/// A tool the model may call: its name, what it does, and the JSON Schema of its arguments.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ToolSpec {
    /// The name the model calls it by (providers allow `[a-zA-Z0-9_-]{1,64}`).
    pub name: String,
    /// What it does, for the model to choose by.
    pub description: String,
    /// The JSON Schema of its arguments (an object schema).
    pub input_schema: Value,
}

impl ToolSpec {
    /// A tool `name` described by `description`, taking arguments valid for `input_schema`.
    pub fn new(name: impl Into<String>, description: impl Into<String>, input_schema: Value) -> Self {
        Self { name: name.into(), description: description.into(), input_schema }
    }
}

/// A call of a tool by the model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ToolCall {
    /// The provider's id of the call, which its result names ([`ChatMessage::tool_result`]).
    pub id: String,
    /// The tool called.
    pub name: String,
    /// The arguments as the model wrote them: JSON text, not yet checked (a model can write anything).
    pub arguments: String,
}

impl ToolCall {
    /// A call `id` of tool `name` with `arguments` (JSON text).
    pub fn new(id: impl Into<String>, name: impl Into<String>, arguments: impl Into<String>) -> Self {
        Self { id: id.into(), name: name.into(), arguments: arguments.into() }
    }

    /// The arguments parsed; a model's text that is not JSON is [`LlmError::Malformed`].
    pub fn arguments_json(&self) -> Result<Value, LlmError> {
        let text = if self.arguments.trim().is_empty() { "{}" } else { self.arguments.as_str() };
        serde_json::from_str(text)
            .map_err(|e| LlmError::Malformed(format!("the arguments of tool call {} are not JSON: {e}", self.name)))
    }
}

/// Sampling parameters; unset ones are the provider's defaults.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct Sampling {
    /// Randomness, 0 (greedy) and up.
    pub temperature: Option<f64>,
    /// Nucleus sampling: the smallest set of tokens whose probabilities add up to this.
    pub top_p: Option<f64>,
    /// Sequences that end the answer when generated.
    pub stop: Vec<String>,
    /// A seed, for providers that make sampling repeatable with one (OpenAI-compatible; Anthropic has none).
    pub seed: Option<u64>,
}

impl Sampling {
    /// Writes the set parameters into a provider's request `body`, the stop sequences under `stop_key` (OpenAI
    /// `stop`, Anthropic `stop_sequences`); the seed is the caller's, since not every provider has one.
    pub(crate) fn write_common(&self, body: &mut Value, stop_key: &str) {
        if let Some(t) = self.temperature {
            body["temperature"] = Value::from(t);
        }
        if let Some(p) = self.top_p {
            body["top_p"] = Value::from(p);
        }
        if !self.stop.is_empty() {
            body[stop_key] = Value::from(self.stop.clone());
        }
    }
}

/// One chat-completion request.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct ChatRequest {
    /// The system prompt.
    pub system: Option<String>,
    /// The conversation, oldest first, ending with the user message (or the tool results) to answer.
    pub messages: Vec<ChatMessage>,
    /// The most tokens the model may generate (the provider's `max_tokens`); the backend's default when unset.
    pub max_tokens: Option<u64>,
    /// The tools the model may call; the answer then holds text, calls, or both.
    pub tools: Vec<ToolSpec>,
    /// Sampling parameters.
    pub sampling: Sampling,
    /// A JSON Schema the answer's text must be valid for (structured output): OpenAI-compatible providers get it
    /// as `response_format`; on Anthropic the model is made to call one tool whose input is the answer.
    pub response_schema: Option<Value>,
}

impl ChatRequest {
    /// A request of `messages` with no system prompt and the backend's default `max_tokens`.
    pub fn new(messages: Vec<ChatMessage>) -> Self {
        Self { system: None, messages, max_tokens: None, ..Self::default() }
    }

    /// Offers `tools` to the model.
    #[must_use]
    pub fn with_tools(mut self, tools: Vec<ToolSpec>) -> Self {
        self.tools = tools;
        self
    }

    /// Sets the sampling parameters.
    #[must_use]
    pub fn with_sampling(mut self, sampling: Sampling) -> Self {
        self.sampling = sampling;
        self
    }

    /// Asks for an answer valid for `schema` (a JSON Schema).
    #[must_use]
    pub fn with_response_schema(mut self, schema: Value) -> Self {
        self.response_schema = Some(schema);
        self
    }

    /// Sets the system prompt.
    #[must_use]
    pub fn with_system(mut self, system: impl Into<String>) -> Self {
        self.system = Some(system.into());
        self
    }

    /// Sets `max_tokens`.
    #[must_use]
    pub fn with_max_tokens(mut self, max_tokens: u64) -> Self {
        self.max_tokens = Some(max_tokens);
        self
    }
}

/// Token usage as the provider reported it (unknown parts stay `None`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Usage {
    /// Prompt tokens (OpenAI `prompt_tokens`, Anthropic `input_tokens`).
    pub input_tokens: Option<u64>,
    /// Generated tokens (OpenAI `completion_tokens`, Anthropic `output_tokens`).
    pub output_tokens: Option<u64>,
}

impl Usage {
    /// Usage of `input` prompt and `output` generated tokens.
    pub fn new(input: u64, output: u64) -> Self {
        Self { input_tokens: Some(input), output_tokens: Some(output) }
    }

    /// Input plus output, when either is known.
    pub fn total(&self) -> Option<u64> {
        match (self.input_tokens, self.output_tokens) {
            (None, None) => None,
            (i, o) => Some(i.unwrap_or(0).saturating_add(o.unwrap_or(0))),
        }
    }
}

/// Why generation ended.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FinishReason {
    /// The model finished its answer (OpenAI `stop`, Anthropic `end_turn`, `stop_sequence`).
    Stop,
    /// The `max_tokens` limit cut the answer (OpenAI `length`, Anthropic `max_tokens`).
    Length,
    /// The caller stopped a streamed answer ([`StreamControl::Stop`]); the text is what arrived until then.
    Stopped,
    /// The model called tools ([`ChatResponse::tool_calls`]) and waits for their results (OpenAI `tool_calls`,
    /// Anthropic `tool_use`).
    ToolCalls,
    /// Another reason, as the provider named it.
    Other(String),
}

/// The model's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ChatResponse {
    /// The generated text.
    pub text: String,
    /// The model that answered, as the provider named it (often a dated version of the requested name).
    pub model: Option<String>,
    /// Token usage.
    pub usage: Usage,
    /// Why generation ended.
    pub finish: FinishReason,
    /// The tools the model called, in order, arguments assembled whole when they were streamed.
    pub tool_calls: Vec<ToolCall>,
    /// The oldest messages the backend left out so that the conversation fit its context window (the system
    /// prompt and the last message are always kept); `None` when the whole conversation was read.
    pub trimmed: Option<Trimmed>,
}

/// What a backend left out of a conversation longer than its context window: the oldest turns, first to last.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Trimmed {
    /// How many of the request's messages (oldest first) were left out.
    pub messages: usize,
    /// How many prompt tokens they would have taken.
    pub tokens: u64,
    /// The context window the rest was fit into, in tokens.
    pub context_window: u64,
}

impl Trimmed {
    /// `messages` oldest messages of `tokens` tokens left out to fit `context_window`.
    pub fn new(messages: usize, tokens: u64, context_window: u64) -> Self {
        Self { messages, tokens, context_window }
    }
}

impl ChatResponse {
    /// An answer of `text` from `model`, with its `usage`, ended for `finish` (for backends outside this crate).
    pub fn new(text: impl Into<String>, model: Option<String>, usage: Usage, finish: FinishReason) -> Self {
        Self { text: text.into(), model, usage, finish, tool_calls: Vec::new(), trimmed: None }
    }

    /// This answer, read from a conversation whose oldest messages were left out as `trimmed` says.
    #[must_use]
    pub fn with_trimmed(mut self, trimmed: Option<Trimmed>) -> Self {
        self.trimmed = trimmed;
        self
    }

    /// This answer calling `calls`.
    #[must_use]
    pub fn with_tool_calls(mut self, calls: Vec<ToolCall>) -> Self {
        self.tool_calls = calls;
        self
    }
}

/// What a streamed answer's consumer wants after each piece of text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(clippy::exhaustive_enums)] // Go on or stop: there is no third way.
pub enum StreamControl {
    /// Keep generating.
    Continue,
    /// Stop: the backend drops the request (the provider stops generating) and returns what arrived.
    Stop,
}

/// What a backend serves, for the identity card.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct BackendInfo {
    /// The API family, e.g. `openai-compatible`, `anthropic`, `echo`.
    pub provider: String,
    /// The configured model name.
    pub model: String,
}

impl BackendInfo {
    /// A backend of the `provider` API family serving `model`.
    pub fn new(provider: impl Into<String>, model: impl Into<String>) -> Self {
        Self { provider: provider.into(), model: model.into() }
    }
}

/// The sink a streamed call hands each piece of text to, with the usage known so far; its answer can stop the
/// generation.
pub type OnDelta<'a> = dyn FnMut(&str, &Usage) -> StreamControl + Send + 'a;

/// One chat-completion call against a provider.
#[async_trait]
pub trait LlmBackend: Send + Sync + std::fmt::Debug + 'static {
    /// What this backend serves.
    fn info(&self) -> BackendInfo;

    /// Asks for the whole answer at once.
    async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError>;

    /// Asks for a streamed answer, handing each piece of text to `on_delta` as it arrives, and returns the whole
    /// answer (with the provider's usage when it reports one). When `on_delta` answers [`StreamControl::Stop`] the
    /// request is dropped and the answer so far returned with [`FinishReason::Stopped`]. Dropping the returned
    /// future drops the request too (cancellation).
    async fn stream(&self, request: &ChatRequest, on_delta: &mut OnDelta<'_>) -> Result<ChatResponse, LlmError>;
}
