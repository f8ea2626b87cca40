//! The crate's one error type, and how each failure reaches an LDP peer.

use std::time::Duration;

use ldp_types::{LdpError, codes};

/// The code of a provider that refused the delegate's credentials (category `security`).
pub const PROVIDER_AUTH_FAILED: &str = "PROVIDER_AUTH_FAILED";
/// The code of a provider answer that does not follow the provider's wire format.
pub const PROVIDER_MALFORMED: &str = "PROVIDER_MALFORMED";
/// The code of a request the provider refused as invalid (HTTP 4xx other than 401, 403, 429).
pub const PROVIDER_REJECTED: &str = "PROVIDER_REJECTED";

/// Why a provider call failed. Provider messages quoted here are cut to a bounded length and scrubbed of the API
/// key.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
#[non_exhaustive]
pub enum LlmError {
    /// The provider refused the credentials (HTTP 401 or 403).
    #[error("the provider refused the credentials (HTTP {status}): {message}")]
    Unauthorized {
        /// The HTTP status.
        status: u16,
        /// The provider's message.
        message: String,
    },
    /// The provider is rate limiting (HTTP 429, or a `rate_limit_error` event).
    #[error("the provider is rate limiting{}: {message}", retry_after.map(|d| format!(" (retry after {} s)", d.as_secs())).unwrap_or_default())]
    RateLimited {
        /// The provider's `Retry-After`, when it sent one.
        retry_after: Option<Duration>,
        /// The provider's message.
        message: String,
    },
    /// The provider failed (HTTP 5xx, or an overloaded/api error event) on every attempt.
    #[error("the provider failed (HTTP {status}) after {attempts} attempt(s): {message}")]
    Unavailable {
        /// The last HTTP status (529 for an `overloaded_error` event, 500 for another server error event).
        status: u16,
        /// Attempts made.
        attempts: u32,
        /// The provider's message.
        message: String,
    },
    /// The provider did not answer, or stopped sending, within the time allowed.
    #[error("the provider did not answer within {} ms ({attempts} attempt(s))", after.as_millis())]
    Timeout {
        /// The timeout that ran out.
        after: Duration,
        /// Attempts made.
        attempts: u32,
    },
    /// The provider could not be reached.
    #[error("cannot reach the provider ({attempts} attempt(s)): {message}")]
    Transport {
        /// Attempts made.
        attempts: u32,
        /// What failed.
        message: String,
    },
    /// The provider refused the request as invalid (another HTTP 4xx).
    #[error("the provider refused the request (HTTP {status}): {message}")]
    Rejected {
        /// The HTTP status.
        status: u16,
        /// The provider's message.
        message: String,
    },
    /// The provider's answer does not follow its wire format.
    #[error("the provider's answer is malformed: {0}")]
    Malformed(String),
    /// The provider's answer is larger than the bound.
    #[error("the provider's answer exceeds {limit} bytes")]
    TooLarge {
        /// The bound, in bytes.
        limit: usize,
    },
    /// The backend is misconfigured.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The prompt leaves no room for an answer in the model's context window (what a provider answers with HTTP
    /// 400 `context_length_exceeded`; an in-process model finds it before generating).
    #[error("the prompt is {prompt_tokens} tokens; the context window holds {context_window}")]
    PromptTooLong {
        /// The prompt's length, in tokens.
        prompt_tokens: usize,
        /// The model's context window, in tokens.
        context_window: usize,
    },
    /// An in-process model failed while generating.
    #[error("the model failed: {0}")]
    Inference(String),
    /// The backend cannot honour part of the request (an engine without constrained decoding asked for tools or a
    /// response schema), before any work.
    #[error("this backend does not support {what}")]
    Unsupported {
        /// What it cannot do.
        what: &'static str,
    },
    /// A JSON Schema of the request (its response schema or a tool's input schema) uses what constrained decoding
    /// cannot enforce ([`crate::grammar`]), found before any decoding.
    #[error("cannot decode under the schema: {0}")]
    Schema(crate::grammar::SchemaError),
}

impl LlmError {
    /// The provider's `Retry-After`, for a rate-limited call.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::RateLimited { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// The typed LDP error a peer receives: 401/403 `security` (not retryable), 429 `CAPACITY_EXCEEDED`
    /// (retryable, the `Retry-After` in the message), 5xx `TRANSPORT_ERROR` and timeouts `TIMEOUT` (transient,
    /// retryable, after this delegate's own bounded retries), a malformed or oversized answer `PROVIDER_MALFORMED`, a prompt longer than the context window
    /// or a request the backend cannot honour (a schema it cannot enforce) `PROVIDER_REJECTED` (not retryable), an in-process model's failure `EXECUTION_FAILED`.
    pub fn to_ldp(&self) -> LdpError {
        let message = format!("LLM provider: {self}");
        match self {
            Self::Unauthorized { .. } => LdpError::security(PROVIDER_AUTH_FAILED, message).with_retryable(false),
            Self::RateLimited { .. } => LdpError::runtime(codes::CAPACITY_EXCEEDED, message).with_retryable(true),
            Self::Unavailable { .. } | Self::Transport { .. } => {
                LdpError::transport(codes::TRANSPORT_ERROR, message).with_retryable(true)
            }
            Self::Timeout { .. } => LdpError::transport(codes::TIMEOUT, message).with_retryable(true),
            Self::Rejected { .. } | Self::PromptTooLong { .. } | Self::Unsupported { .. } | Self::Schema(_) => {
                LdpError::capability(PROVIDER_REJECTED, message).with_retryable(false)
            }
            Self::Malformed(_) | Self::TooLarge { .. } => {
                LdpError::runtime(PROVIDER_MALFORMED, message).with_retryable(false)
            }
            Self::Config(_) | Self::Inference(_) => {
                LdpError::runtime(codes::EXECUTION_FAILED, message).with_retryable(false)
            }
        }
    }
}

impl From<LlmError> for LdpError {
    fn from(e: LlmError) -> Self {
        e.to_ldp()
    }
}
