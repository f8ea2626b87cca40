//! LLM provider backends for LDP delegates, and a delegate that serves a model.
//!
//! [`LlmBackend`] is one chat-completion call, plain or streamed, against a provider: [`OpenAiBackend`] speaks the
//! OpenAI-compatible Chat Completions API (OpenAI, vLLM, llama.cpp's server, Ollama's `/v1`, LM Studio),
//! [`AnthropicBackend`] the Anthropic Messages API, and [`EchoBackend`] answers with the user's message (no
//! provider, for demos and tests). [`LlmDelegate`] implements [`ldp_session::runtime::Delegate`] over any backend:
//! the task input is the user message, the output is the model's text, the contract's token budget becomes the
//! provider's `max_tokens`, and the provider's answer fills the provenance (tokens used, cost from a
//! [`PriceTable`]).
//!
//! The crate sits above `ldp-session` and re-implements no protocol rule: a contract violation is answered through
//! the responder's own `TASK_FAILED` path, and provider failures become typed [`ldp_types::LdpError`]s
//! ([`LlmError::to_ldp`]). Every wait on a provider has a timeout and every body read from one a size bound
//! ([`HttpOptions`]); the API key ([`ApiKey`]) never appears in `Debug` output, logs or errors.

mod anthropic;
mod backend;
mod delegate;
mod echo;
mod error;
pub mod grammar;
mod http;
mod key;
mod openai;
mod price;
#[cfg(feature = "stub")]
pub mod stub;
mod tools;

pub use anthropic::{ANSWER_TOOL, AnthropicBackend};
pub use backend::{
    BackendInfo, ChatMessage, ChatRequest, ChatResponse, FinishReason, LlmBackend, OnDelta, Role, Sampling,
    StreamControl, ToolCall, ToolSpec, Trimmed, Usage,
};
pub use delegate::{LlmDelegate, PromptTemplate, TRIM_EVIDENCE_KIND};
pub use echo::EchoBackend;
pub use error::LlmError;
pub use http::HttpOptions;
pub use key::ApiKey;
pub use openai::OpenAiBackend;
pub use price::{Price, PriceTable};
pub use tools::{ToolLoopLimits, ToolOutcome, ToolRun, Toolbox};
