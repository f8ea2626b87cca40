//! An embedded LLM backend for LDP delegates: a GGUF model of the llama family run in this process, on the CPU —
//! no model server, no network, no API key — with one of two engines ([`Engine`]):
//!
//! ```text
//!               ┌ prompt.rs: the file's tokenizer and chat template, history fit to the window (one rule) ┐
//! LocalBackend ─┤ candle.rs: candle, one blocking thread per generation, caches kept per prefix            │
//!               └ llama.rs (feature `llama`): llama.cpp, one scheduler thread, one batch per step over     ┘
//!                 every active sequence, a cache per sequence, grammar-constrained tools and schemas
//! ```
//!
//! llama.cpp is the `ldp` binary's default: it keeps the weights quantized, batches concurrent sessions, and
//! decodes tool calls and schema answers under a grammar (BENCHMARKS.md has the figures against `llama-server`).
//!
//! [`LocalBackend`] implements [`ldp_llm::LlmBackend`], so everything `ldp-llm` builds on a provider works on it
//! unchanged: [`ldp_llm::LlmDelegate`] serves it as an LDP delegate (session history as the chat, contract token
//! budgets as `max_tokens`, streamed partial output, provenance with the model's own token counts), and
//! `ldp serve --backend local --model FILE.gguf` puts it on the network.
//!
//! What the file says is what runs: the tokenizer is the file's (llama.cpp's own for the llama engine, the one
//! llama-server uses; for candle, built from the file's vocabulary and merges, byte-level BPE, with the
//! `tokenizers` crate), the prompt from its chat template (with `minijinja`; ChatML when the file has
//! none), and an answer ends at the end-of-sequence token or any control token. A peer's text never becomes
//! control tokens: `<|im_start|>` inside a task input is read as text.
//!
//! Every resource is bounded: answers by `max_tokens` and the context window (a prompt that leaves no room is
//! refused with [`ldp_llm::LlmError::PromptTooLong`] before any work), CPU by [`LocalOptions::max_concurrent`]
//! generations at a time, and a caller that stops reading or goes away stops the generation at its next token.
//!
//! ```no_run
//! use ldp_llm::{ChatMessage, ChatRequest, LlmBackend};
//! use ldp_llm_local::{LocalBackend, LocalOptions};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let model = LocalBackend::load("SmolLM2-135M-Instruct.Q4_1.gguf", LocalOptions::default())?;
//! let request = ChatRequest::new(vec![ChatMessage::user("What is the capital of France?")]).with_max_tokens(32);
//! let answer = model.complete(&request).await?;
//! println!("{} ({:?} tokens in, {:?} out)", answer.text, answer.usage.input_tokens, answer.usage.output_tokens);
//! # Ok(())
//! # }
//! ```

mod backend;
mod candle;
mod error;
#[cfg(feature = "fixture")]
pub mod fixture;
#[cfg(feature = "llama")]
mod llama;
mod prompt;

pub use backend::{Engine, LocalBackend, LocalOptions, MAX_CONTEXT, Precision, Sampling, Work};
pub use error::LoadError;
