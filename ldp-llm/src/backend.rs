//! The provider-neutral chat call every backend implements.

use async_trait::async_trait;
use serde::Serialize;

use crate::LlmError;

/// Who said a message of the chat history.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
#[allow(clippy::exhaustive_enums)] // The two turns of a chat; the system prompt travels apart.
pub enum Role {
    /// The initiator (a task's input).
    User,
    /// The model (a task's output).
    Assistant,
}

/// One message of the chat history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ChatMessage {
    /// Who said it.
    pub role: Role,
    /// What was said.
    pub content: String,
}

impl ChatMessage {
    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Self { role: Role::User, content: content.into() }
    }
    /// An assistant message.
    pub fn assistant(content: impl Into<String>) -> Self {
        Self { role: Role::Assistant, content: content.into() }
    }
}

/// One chat-completion request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ChatRequest {
    /// The system prompt.
    pub system: Option<String>,
    /// The conversation, oldest first, ending with the user message to answer.
    pub messages: Vec<ChatMessage>,
    /// The most tokens the model may generate (the provider's `max_tokens`); the backend's default when unset.
    pub max_tokens: Option<u64>,
}

impl ChatRequest {
    /// A request of `messages` with no system prompt and the backend's default `max_tokens`.
    pub fn new(messages: Vec<ChatMessage>) -> Self {
        Self { system: None, messages, max_tokens: None }
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
}

impl ChatResponse {
    /// An answer of `text` from `model`, with its `usage`, ended for `finish` (for backends outside this crate).
    pub fn new(text: impl Into<String>, model: Option<String>, usage: Usage, finish: FinishReason) -> Self {
        Self { text: text.into(), model, usage, finish }
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
