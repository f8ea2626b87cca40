//! The in-process backend: a GGUF model, loaded once, answering chat requests with one of two engines (candle, or
//! llama.cpp with the feature `llama`). What both share lives here: options, the prompt (built and fit to the
//! window by [`PromptCodec`]), the text of an answer as it grows, tool calls read back from constrained output, and
//! the counters tests and operators read.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use async_trait::async_trait;
use candle_core::quantized::gguf_file;
use ldp_llm::grammar::{ToolCallOutput, parse_tool_call_output};
use ldp_llm::{
    BackendInfo, ChatRequest, ChatResponse, FinishReason, LlmBackend, LlmError, OnDelta, StreamControl, ToolCall,
    Trimmed, Usage,
};
use tokio::sync::mpsc;

use crate::LoadError;
use crate::candle::CandleEngine;
use crate::prompt::PromptCodec;

/// How the next token is chosen.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum Sampling {
    /// Always the most likely token: the same prompt gives the same answer.
    Greedy,
    /// Drawn from the distribution at `temperature`, cut to the smallest set whose mass reaches `top_p` when set;
    /// the same `seed` gives the same answer.
    Temperature {
        /// Softmax temperature (> 0).
        temperature: f64,
        /// Nucleus cut-off in (0, 1].
        top_p: Option<f64>,
        /// The random stream's seed.
        seed: u64,
    },
}

/// The arithmetic the candle engine's matrix products run in (llama.cpp always keeps the file's quantized weights).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Precision {
    /// Weights are widened to `f32` at load (4 bytes per parameter in memory): the products are exact. candle's
    /// quantized kernels round the activations to 8 bits, and on small models that changes the answers (measured
    /// on SmolLM2-135M Q4_1, greedy, "What is the capital of France?": "The capital of France is Paris." here,
    /// a French word salad with the quantized kernels), so this is the default.
    F32,
    /// Weights stay as the file stores them (e.g. 4-bit) and candle's quantized kernels run: the least memory, for
    /// models too large to widen.
    Quantized,
}

/// Which runtime runs the model's arithmetic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Engine {
    /// candle, pure Rust: one generation per thread, attention caches kept per prefix. It refuses tools and
    /// response schemas ([`LlmError::Unsupported`]): it has no constrained decoding.
    #[default]
    Candle,
    /// llama.cpp in process (the crate's feature `llama`): quantized weights, one shared context whose sequences
    /// are decoded in one batch per step, attention caches kept per sequence, and grammar-constrained decoding for
    /// tools and response schemas. BENCHMARKS.md has the figures that made it the `ldp` binary's default.
    Llama,
}

/// How a [`LocalBackend`] runs its model.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct LocalOptions {
    /// The name reported as the answering model (provenance `model_version`) [default: the file's `general.name`,
    /// else its file stem].
    pub model_name: Option<String>,
    /// The context window, in tokens: prompt plus answer [default: the model's `context_length`, at most
    /// [`MAX_CONTEXT`]].
    pub context_window: Option<usize>,
    /// The longest answer when a request sets no `max_tokens`.
    pub default_max_tokens: usize,
    /// How tokens are chosen.
    pub sampling: Sampling,
    /// Divides the probability of tokens already in the answer (1.0: off).
    pub repeat_penalty: f32,
    /// How many answers are generated at once; more requests wait their turn. candle: each holds a copy of the
    /// attention cache. llama: the shared context holds this many sequences, each with its own cache of up to a
    /// context window, decoded together.
    pub max_concurrent: usize,
    /// The arithmetic of candle's matrix products (llama.cpp keeps the file's quantized weights).
    pub precision: Precision,
    /// candle: how many tokens of attention cache are kept between generations, over all of them, so that a prompt
    /// which extends an earlier one (the next turn of a conversation: the last prompt, its answer, the new
    /// message) decodes only its new tokens [default: four context windows]. The least recently used caches go
    /// first; a prompt whose cache was let go is decoded whole again (slower, the same answer). 0 keeps none.
    /// llama keeps one cache per sequence ([`LocalOptions::max_concurrent`]), given to the prompt that shares the
    /// longest start with it, else to the least recently used.
    pub prefix_cache_tokens: Option<usize>,
    /// The runtime [default: candle; `ldp serve` defaults to llama when built with it].
    pub engine: Engine,
    /// llama: the threads its arithmetic runs on [default: the machine's cores but one, at least one].
    pub threads: Option<usize>,
}

/// The longest context this backend runs (the rotary tables of candle's llama implementation stop there).
pub const MAX_CONTEXT: usize = candle_transformers::models::quantized_llama::MAX_SEQ_LEN;

impl Default for LocalOptions {
    fn default() -> Self {
        Self {
            model_name: None,
            context_window: None,
            default_max_tokens: 256,
            sampling: Sampling::Greedy,
            repeat_penalty: 1.0,
            max_concurrent: 1,
            precision: Precision::F32,
            prefix_cache_tokens: None,
            engine: Engine::Candle,
            threads: None,
        }
    }
}

/// An [`LlmBackend`] that runs a GGUF model of the llama family (Llama, SmolLM, Mistral, ...) in this process, on
/// the CPU: no server, no network. Token counts in the answers are the model's own.
///
/// At most [`LocalOptions::max_concurrent`] answers are generated at a time; a streamed answer stops generating as
/// soon as its consumer says [`StreamControl::Stop`] or drops the call.
#[derive(Clone)]
pub struct LocalBackend {
    inner: Arc<Inner>,
}

/// What every engine reads: the prompt codec, the settings, the counters.
pub(crate) struct Shared {
    pub(crate) codec: PromptCodec,
    pub(crate) name: String,
    pub(crate) context_window: usize,
    pub(crate) options: LocalOptions,
    pub(crate) counters: Counters,
}

struct Inner {
    shared: Arc<Shared>,
    engine: Engines,
}

enum Engines {
    Candle(Box<CandleEngine>),
    #[cfg(feature = "llama")]
    Llama(crate::llama::LlamaEngine),
}

/// Running totals of the model's work since load, for operators and tests: where the tokens went.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) decoded: AtomicU64,
    pub(crate) reused: AtomicU64,
    pub(crate) generated: AtomicU64,
}

/// What a [`LocalBackend`] has done since it was loaded ([`LocalBackend::work`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Work {
    /// Prompt tokens run through the model.
    pub prompt_tokens_decoded: u64,
    /// Prompt tokens not run again because a kept attention cache already held them.
    pub prompt_tokens_reused: u64,
    /// Tokens generated.
    pub generated_tokens: u64,
}

impl std::fmt::Debug for LocalBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = &self.inner.shared;
        f.debug_struct("LocalBackend")
            .field("model", &s.name)
            .field("context_window", &s.context_window)
            .field("options", &s.options)
            .finish_non_exhaustive()
    }
}

fn check_options(options: &LocalOptions) -> Result<(), LoadError> {
    if options.max_concurrent == 0 {
        return Err(LoadError::Options("max_concurrent must be at least 1"));
    }
    if let Sampling::Temperature { temperature, top_p, .. } = options.sampling {
        if !(temperature.is_finite() && temperature > 0.0) {
            return Err(LoadError::Options("temperature must be a positive number"));
        }
        if top_p.is_some_and(|p| !(p > 0.0 && p <= 1.0)) {
            return Err(LoadError::Options("top_p must be in (0, 1]"));
        }
    }
    if !(options.repeat_penalty.is_finite() && options.repeat_penalty > 0.0) {
        return Err(LoadError::Options("repeat_penalty must be a positive number"));
    }
    if options.threads == Some(0) {
        return Err(LoadError::Options("threads must be at least 1"));
    }
    Ok(())
}

impl LocalBackend {
    /// Loads a GGUF model file (blocking: call it before serving, or in `spawn_blocking`).
    pub fn load(path: impl AsRef<Path>, options: LocalOptions) -> Result<Self, LoadError> {
        let path = path.as_ref();
        check_options(&options)?;
        let file_stem = || path.file_stem().map(|s| s.to_string_lossy().into_owned());
        let window = |model_context: usize| match options.context_window {
            Some(0) => Err(LoadError::Options("context_window must be at least 1")),
            Some(n) => Ok(n.min(MAX_CONTEXT)),
            None => Ok(model_context.min(MAX_CONTEXT)),
        };
        let shared = |codec, name: Option<String>, context_window| {
            let name = options.model_name.clone().or(name).or_else(file_stem).unwrap_or_else(|| "local".to_owned());
            Arc::new(Shared { codec, name, context_window, options: options.clone(), counters: Counters::default() })
        };
        let (engine, shared) = match options.engine {
            Engine::Candle => {
                let mut file = std::fs::File::open(path)?;
                let content = gguf_file::Content::read(&mut file).map_err(|e| LoadError::Gguf(e.to_string()))?;
                let context_window = window(crate::candle::check_shape(&content)?)?;
                let codec = PromptCodec::from_gguf(&content)?;
                let name = content.metadata.get("general.name").and_then(|v| v.to_string().ok()).cloned();
                let shared = shared(codec, name, context_window);
                (Engines::Candle(Box::new(CandleEngine::load(content, &mut file, &shared)?)), shared)
            }
            // llama.cpp reads the file itself, tokenizer included: nothing of it is parsed here.
            #[cfg(feature = "llama")]
            Engine::Llama => {
                // A file that cannot be opened is an I/O error whichever engine reads it.
                drop(std::fs::File::open(path)?);
                let model = crate::llama::load_model(path)?;
                let context_window = window(model.n_ctx_train() as usize)?;
                let codec = crate::llama::codec(&model)?;
                let shared = shared(codec, crate::llama::metadata(&model, "general.name"), context_window);
                let engine = crate::llama::LlamaEngine::start_on(model, Arc::clone(&shared))?;
                (Engines::Llama(engine), shared)
            }
            #[cfg(not(feature = "llama"))]
            Engine::Llama => return Err(LoadError::EngineMissing("llama")),
        };
        Ok(Self { inner: Arc::new(Inner { shared, engine }) })
    }

    /// What the model has done since load: prompt tokens decoded and reused from kept attention caches, tokens
    /// generated.
    pub fn work(&self) -> Work {
        let c = &self.inner.shared.counters;
        Work {
            prompt_tokens_decoded: c.decoded.load(Ordering::Relaxed),
            prompt_tokens_reused: c.reused.load(Ordering::Relaxed),
            generated_tokens: c.generated.load(Ordering::Relaxed),
        }
    }

    /// The context window in force, in tokens.
    pub fn context_window(&self) -> usize {
        self.inner.shared.context_window
    }

    /// The engine running the model.
    pub fn engine(&self) -> Engine {
        match self.inner.engine {
            Engines::Candle(_) => Engine::Candle,
            #[cfg(feature = "llama")]
            Engines::Llama(_) => Engine::Llama,
        }
    }

    /// The prompt's length in tokens, as the model will see it (chat template included).
    pub fn prompt_tokens(&self, request: &ChatRequest) -> Result<usize, LlmError> {
        self.inner.shared.codec.encode(request).map(|ids| ids.len()).map_err(|e| LlmError::Inference(e.to_string()))
    }
}

/// A piece of a streamed answer, with the usage so far.
pub(crate) struct Delta {
    pub(crate) text: String,
    pub(crate) usage: Usage,
}

/// Sets the flag when the caller goes away, so the generation stops at its next token.
pub(crate) struct CancelOnDrop(pub(crate) Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// What a request asks of the output's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    /// Free text.
    Text,
    /// JSON valid for the response schema: the answer is that text.
    Schema,
    /// `{"tool":NAME,"arguments":ARGS}` or `{"answer":...}`: read back into a call or an answer.
    ToolCall,
}

impl Shape {
    pub(crate) fn of(request: &ChatRequest) -> Self {
        if !request.tools.is_empty() {
            Self::ToolCall
        } else if request.response_schema.is_some() {
            Self::Schema
        } else {
            Self::Text
        }
    }
}

/// One generation's fixed facts: its prompt (fit to the window), how long its answer may be, what it may be.
pub(crate) struct Plan {
    pub(crate) prompt: Vec<u32>,
    pub(crate) trimmed: Option<Trimmed>,
    pub(crate) limit: usize,
    pub(crate) shape: Shape,
}

impl Shared {
    /// The prompt of `request` fit to the window, and the answer's length limit.
    pub(crate) fn plan(&self, request: &ChatRequest) -> Result<Plan, LlmError> {
        let wanted =
            request.max_tokens.map_or(self.options.default_max_tokens, |m| usize::try_from(m).unwrap_or(usize::MAX));
        let (prompt, trimmed) = self.codec.fit(request, wanted, self.context_window)?;
        let limit = wanted.min(self.context_window - prompt.len());
        Ok(Plan { prompt, trimmed, limit, shape: Shape::of(request) })
    }
}

/// An answer as it is generated: its tokens, the text that decoded cleanly so far, and where the pieces go.
pub(crate) struct Answer {
    pub(crate) tokens: Vec<u32>,
    text: String,
    events: Option<mpsc::UnboundedSender<Delta>>,
    input_tokens: u64,
    /// Constrained JSON is handed on whole at the end: a tool call is not text for the caller to read.
    hold: bool,
}

impl Answer {
    pub(crate) fn new(plan: &Plan, events: Option<mpsc::UnboundedSender<Delta>>) -> Self {
        let hold = plan.shape == Shape::ToolCall;
        Self { tokens: Vec::new(), text: String::new(), events, input_tokens: plan.prompt.len() as u64, hold }
    }

    /// Whoever waits for the pieces is gone.
    pub(crate) fn abandoned(&self) -> bool {
        self.events.as_ref().is_some_and(mpsc::UnboundedSender::is_closed)
    }

    /// Adds a generated token, handing on the text it completes. `false` when the consumer has gone.
    pub(crate) fn push(&mut self, codec: &PromptCodec, token: u32) -> Result<bool, LlmError> {
        self.tokens.push(token);
        if self.hold {
            return Ok(true);
        }
        // Byte-level tokens can split a character: a piece is handed on once the text decodes cleanly.
        let decoded = codec.decode(&self.tokens).map_err(|e| LlmError::Inference(e.to_string()))?;
        if decoded.len() > self.text.len() && decoded.starts_with(&self.text) && !decoded.ends_with('\u{FFFD}') {
            let piece = decoded[self.text.len()..].to_owned();
            self.text = decoded;
            return Ok(self.send(piece));
        }
        Ok(true)
    }

    fn send(&self, text: String) -> bool {
        let Some(events) = &self.events else { return true };
        let usage = Usage::new(self.input_tokens, self.tokens.len() as u64);
        events.send(Delta { text, usage }).is_ok()
    }

    /// The whole answer, read for its shape: the tail that never decoded cleanly (a cut character) still belongs
    /// to it; a tool call becomes a [`ToolCall`].
    pub(crate) fn finish(
        mut self,
        shared: &Shared,
        plan: &Plan,
        finish: FinishReason,
    ) -> Result<ChatResponse, LlmError> {
        shared.counters.generated.fetch_add(self.tokens.len() as u64, Ordering::Relaxed);
        let decoded = shared.codec.decode(&self.tokens).map_err(|e| LlmError::Inference(e.to_string()))?;
        let usage = Usage::new(self.input_tokens, self.tokens.len() as u64);
        let mut calls = Vec::new();
        let mut finish = finish;
        if plan.shape == Shape::ToolCall && finish == FinishReason::Stop {
            let output = parse_tool_call_output(&decoded)
                .map_err(|e| LlmError::Malformed(format!("the model's constrained output: {e}")))?;
            match output {
                ToolCallOutput::Call { name, arguments } => {
                    // One call per answer (the grammar has room for one), so its id is fixed.
                    calls.push(ToolCall::new("call_0", name, arguments.to_string()));
                    finish = FinishReason::ToolCalls;
                    self.text.clear();
                }
                // An answer that is a JSON string is its text; one under an answer schema, its JSON text.
                ToolCallOutput::Answer(answer) => {
                    let text = match answer {
                        serde_json::Value::String(text) => text,
                        other => other.to_string(),
                    };
                    self.send(text.clone());
                    self.text = text;
                }
                other => return Err(LlmError::Malformed(format!("unexpected tool output {other:?}"))),
            }
        } else if plan.shape == Shape::ToolCall {
            // Cut short (by the length limit or the caller): what was written is not a whole call.
            self.text = decoded;
        } else if finish != FinishReason::Stopped && decoded.len() > self.text.len() && decoded.starts_with(&self.text)
        {
            self.send(decoded[self.text.len()..].to_owned());
            self.text = decoded;
        }
        Ok(ChatResponse::new(self.text, Some(shared.name.clone()), usage, finish)
            .with_trimmed(plan.trimmed)
            .with_tool_calls(calls))
    }
}

impl LocalBackend {
    /// Starts a generation of `request`, its pieces sent to `events` when given; it stops at its next token once
    /// the returned guard is dropped or set.
    async fn start(
        &self,
        request: &ChatRequest,
        events: Option<mpsc::UnboundedSender<Delta>>,
        answer_only: bool,
    ) -> Result<(tokio::sync::oneshot::Receiver<Result<ChatResponse, LlmError>>, CancelOnDrop), LlmError> {
        // Only the llama engine decodes under a grammar, which `answer_only` narrows.
        #[cfg(not(feature = "llama"))]
        let _ = answer_only;
        let cancel = Arc::new(AtomicBool::new(false));
        let guard = CancelOnDrop(Arc::clone(&cancel));
        let shared = &self.inner.shared;
        let receiver = match &self.inner.engine {
            Engines::Candle(engine) => {
                if !request.tools.is_empty() {
                    return Err(LlmError::Unsupported {
                        what: "tools (the candle engine has no constrained decoding)",
                    });
                }
                if request.response_schema.is_some() {
                    return Err(LlmError::Unsupported {
                        what: "response schemas (the candle engine has no constrained decoding)",
                    });
                }
                let plan = shared.plan(request)?;
                engine.start(Arc::clone(shared), plan, events, cancel).await?
            }
            #[cfg(feature = "llama")]
            Engines::Llama(engine) => {
                let grammar = crate::llama::grammar_of(request, answer_only)?;
                let plan = shared.plan(request)?;
                engine.start(plan, grammar, events, cancel)?
            }
        };
        Ok((receiver, guard))
    }
}

/// The answer calls a tool with the same arguments as a call whose result the history already holds: a small model
/// loops so, and the call would learn nothing new. The engine then decodes again under the answer branch only.
fn repeats_a_call(request: &ChatRequest, answer: &ChatResponse) -> bool {
    let same = |a: &ToolCall, b: &ToolCall| {
        a.name == b.name
            && serde_json::from_str::<serde_json::Value>(&a.arguments).ok()
                == serde_json::from_str::<serde_json::Value>(&b.arguments).ok()
    };
    answer
        .tool_calls
        .iter()
        .any(|call| request.messages.iter().flat_map(|m| m.tool_calls.iter()).any(|earlier| same(call, earlier)))
}

impl LocalBackend {
    /// One streamed generation; `answer_only` keeps the grammar's answer branch only (see [`repeats_a_call`]).
    async fn stream_once(
        &self,
        request: &ChatRequest,
        on_delta: &mut OnDelta<'_>,
        answer_only: bool,
    ) -> Result<ChatResponse, LlmError> {
        // Unbounded: an answer is at most `max_tokens` pieces, and the llama engine's one thread, which serves every
        // generation, must never wait for one slow reader.
        let (tx, mut rx) = mpsc::unbounded_channel();
        let (receiver, guard) = self.start(request, Some(tx), answer_only).await?;
        let mut text = String::new();
        // The generation drops its sender when it ends, which ends this loop.
        while let Some(Delta { text: piece, usage }) = rx.recv().await {
            text.push_str(&piece);
            if on_delta(&piece, &usage) == StreamControl::Stop {
                guard.0.store(true, Ordering::Relaxed);
                let name = Some(self.inner.shared.name.clone());
                return Ok(ChatResponse::new(text, name, usage, FinishReason::Stopped));
            }
        }
        joined(receiver.await)
    }
}

fn joined(
    result: Result<Result<ChatResponse, LlmError>, tokio::sync::oneshot::error::RecvError>,
) -> Result<ChatResponse, LlmError> {
    result.map_err(|_| LlmError::Inference("the generating thread failed".into()))?
}

#[async_trait]
impl LlmBackend for LocalBackend {
    fn info(&self) -> BackendInfo {
        BackendInfo::new("local", self.inner.shared.name.clone())
    }

    async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let (receiver, _guard) = self.start(request, None, false).await?;
        let answer = joined(receiver.await)?;
        if !repeats_a_call(request, &answer) {
            return Ok(answer);
        }
        let (receiver, _guard) = self.start(request, None, true).await?;
        joined(receiver.await)
    }

    async fn stream(&self, request: &ChatRequest, on_delta: &mut OnDelta<'_>) -> Result<ChatResponse, LlmError> {
        let answer = self.stream_once(request, on_delta, false).await?;
        if !repeats_a_call(request, &answer) {
            return Ok(answer);
        }
        // A tool call's pieces are held back, so the caller has seen nothing of the refused call.
        self.stream_once(request, on_delta, true).await
    }
}
