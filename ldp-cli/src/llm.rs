//! What the `ldp` binary says when asked for what it was built without.

/// The answer of a binary built without the embedded model runtime to `paradox --real`.
#[cfg(not(feature = "local-llm"))]
pub const NO_LOCAL_LLM: &str = "this ldp was built without the `local-llm` feature, which runs GGUF models in process; \
     build it with its default features (`cargo install ldp-cli`)";
