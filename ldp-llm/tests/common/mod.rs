//! What the LLM delegate's tests share: a backend of either wire format in front of a provider stub.

use std::sync::Arc;
use std::time::Duration;

use ldp_llm::stub::{Flavor, Stub};
use ldp_llm::{AnthropicBackend, HttpOptions, LlmBackend, OpenAiBackend};

/// A backend for `stub`'s wire format, retrying quickly.
#[allow(clippy::unwrap_used)]
pub fn backend(stub: &Stub, flavor: Flavor) -> Arc<dyn LlmBackend> {
    let mut opts = HttpOptions::default();
    opts.retry_backoff = Duration::from_millis(10);
    match flavor {
        Flavor::OpenAi => Arc::new(OpenAiBackend::new(stub.base_url(), "stub-model", None, opts).unwrap()),
        Flavor::Anthropic => Arc::new(AnthropicBackend::new(stub.base_url(), "stub-model", None, 512, opts).unwrap()),
    }
}
