//! The in-process backend: a GGUF model, loaded once, answering chat requests on blocking threads.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use async_trait::async_trait;
use candle_core::quantized::{GgmlDType, QTensor, gguf_file};
use candle_core::{Device, Tensor};
use candle_transformers::generation::{LogitsProcessor, Sampling as CandleSampling};
use candle_transformers::models::quantized_llama::{MAX_SEQ_LEN, ModelWeights};
use ldp_llm::{
    BackendInfo, ChatRequest, ChatResponse, FinishReason, LlmBackend, LlmError, OnDelta, StreamControl, Trimmed, Usage,
};
use tokio::sync::{Semaphore, mpsc};

use crate::LoadError;
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

/// The arithmetic the model's matrix products run in.
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
    /// How many answers are generated at once; more requests wait their turn (each holds a copy of the attention
    /// cache; the weights are shared).
    pub max_concurrent: usize,
    /// The arithmetic of the matrix products.
    pub precision: Precision,
    /// How many tokens of attention cache are kept between generations, over all of them, so that a prompt which
    /// extends an earlier one (the next turn of a conversation: the last prompt, its answer, the new message)
    /// decodes only its new tokens [default: four context windows]. The least recently used caches go first; a
    /// prompt whose cache was let go is decoded whole again (slower, the same answer). 0 keeps none.
    pub prefix_cache_tokens: Option<usize>,
}

/// The longest context this backend runs (the rotary tables of candle's llama implementation stop there).
pub const MAX_CONTEXT: usize = MAX_SEQ_LEN;

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
        }
    }
}

/// An [`LlmBackend`] that runs a GGUF model of the llama family (Llama, SmolLM, Mistral, ...) in this process, on
/// the CPU, with candle: no server, no network. Token counts in the answers are the model's own.
///
/// Generation runs on tokio's blocking threads, at most [`LocalOptions::max_concurrent`] at a time; a streamed
/// answer stops generating as soon as its consumer says [`StreamControl::Stop`] or drops the call.
#[derive(Clone)]
pub struct LocalBackend {
    inner: Arc<Inner>,
}

struct Inner {
    weights: ModelWeights,
    codec: PromptCodec,
    name: String,
    context_window: usize,
    options: LocalOptions,
    permits: Arc<Semaphore>,
    prefixes: PrefixCache,
    counters: Counters,
}

/// Running totals of the model's work since load, for operators and tests: where the tokens went.
#[derive(Debug, Default)]
struct Counters {
    decoded: AtomicU64,
    reused: AtomicU64,
    generated: AtomicU64,
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

/// A model state (its attention cache) after a known sequence of tokens: the weights are shared, so a kept state
/// costs only its cache.
struct Prefix {
    tokens: Vec<u32>,
    model: ModelWeights,
}

/// Attention caches of recent generations, found by the tokens they hold: a prompt that starts with every token of
/// one continues from it instead of decoding them again. Bounded in tokens over all entries, least recently used
/// out first. A state is only ever reused for exactly the tokens it was computed on, so reuse cannot change what
/// the model sees.
struct PrefixCache {
    /// Oldest first.
    entries: std::sync::Mutex<Vec<Prefix>>,
    max_tokens: usize,
}

impl PrefixCache {
    fn new(max_tokens: usize) -> Self {
        Self { entries: std::sync::Mutex::new(Vec::new()), max_tokens }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Prefix>> {
        // The list is consistent after every statement that changes it: a panic elsewhere leaves nothing to repair.
        self.entries.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The longest kept state whose tokens are a proper prefix of `prompt` (at least one token must be left to
    /// decode: the next token's scores come from it), taken out of the cache.
    fn take_longest(&self, prompt: &[u32]) -> Option<Prefix> {
        let mut entries = self.lock();
        let best = entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.tokens.len() < prompt.len() && prompt.starts_with(&e.tokens))
            .max_by_key(|(_, e)| e.tokens.len())
            .map(|(i, _)| i)?;
        Some(entries.remove(best))
    }

    /// Keeps `prefix` as the most recent, letting the oldest go until the total fits; a state longer than the
    /// whole bound is not kept.
    fn keep(&self, prefix: Prefix) {
        if prefix.tokens.is_empty() || prefix.tokens.len() > self.max_tokens {
            return;
        }
        let mut entries = self.lock();
        entries.retain(|e| e.tokens != prefix.tokens);
        entries.push(prefix);
        let mut total: usize = entries.iter().map(|e| e.tokens.len()).sum();
        while total > self.max_tokens && !entries.is_empty() {
            total -= entries.remove(0).tokens.len();
        }
    }
}

impl std::fmt::Debug for LocalBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalBackend")
            .field("model", &self.inner.name)
            .field("context_window", &self.inner.context_window)
            .field("options", &self.inner.options)
            .finish_non_exhaustive()
    }
}

fn metadata_u32(content: &gguf_file::Content, key: &'static str) -> Result<u32, LoadError> {
    content.metadata.get(key).ok_or(LoadError::MissingMetadata(key))?.to_u32().map_err(|_| LoadError::BadMetadata(key))
}

/// Refuses what would make candle's loader divide by zero or allocate without bound, before calling it.
fn check_shape(content: &gguf_file::Content) -> Result<usize, LoadError> {
    let arch = content.metadata.get("general.architecture").and_then(|v| v.to_string().ok()).cloned();
    match arch.as_deref() {
        Some("llama") => {}
        Some(other) => return Err(LoadError::UnsupportedArchitecture(other.to_owned())),
        None => return Err(LoadError::MissingMetadata("general.architecture")),
    }
    let heads = metadata_u32(content, "llama.attention.head_count")?;
    let kv_heads = metadata_u32(content, "llama.attention.head_count_kv")?;
    let embedding = metadata_u32(content, "llama.embedding_length")?;
    let blocks = metadata_u32(content, "llama.block_count")?;
    if heads == 0 || embedding % heads != 0 {
        return Err(LoadError::BadMetadata("llama.attention.head_count"));
    }
    if kv_heads == 0 || heads % kv_heads != 0 {
        return Err(LoadError::BadMetadata("llama.attention.head_count_kv"));
    }
    if blocks == 0 || blocks > 1024 {
        return Err(LoadError::BadMetadata("llama.block_count"));
    }
    let context = content.metadata.get("llama.context_length").and_then(|v| v.to_u32().ok()).unwrap_or(2048);
    Ok((context as usize).min(MAX_CONTEXT))
}

/// The same model with every quantized tensor widened to `f32`, as an in-memory GGUF file (candle's loader reads
/// tensors from a file; its matrix products run exactly on `f32` tensors).
fn widen(
    content: gguf_file::Content,
    file: &mut std::fs::File,
) -> candle_core::Result<(gguf_file::Content, std::io::Cursor<Vec<u8>>)> {
    let mut tensors = Vec::with_capacity(content.tensor_infos.len());
    for name in content.tensor_infos.keys() {
        let tensor = content.tensor(file, name, &Device::Cpu)?;
        let tensor = match tensor.dtype() {
            GgmlDType::F32 => tensor,
            _ => QTensor::quantize(&tensor.dequantize(&Device::Cpu)?, GgmlDType::F32)?,
        };
        tensors.push((name.as_str(), tensor));
    }
    let metadata: Vec<(&str, &gguf_file::Value)> = content.metadata.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let tensor_refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, t)| (*k, t)).collect();
    let mut buffer = std::io::Cursor::new(Vec::new());
    gguf_file::write(&mut buffer, &metadata, &tensor_refs)?;
    buffer.set_position(0);
    let widened = gguf_file::Content::read(&mut buffer)?;
    Ok((widened, buffer))
}

impl LocalBackend {
    /// Loads a GGUF model file (blocking: call it before serving, or in `spawn_blocking`).
    pub fn load(path: impl AsRef<Path>, options: LocalOptions) -> Result<Self, LoadError> {
        let path = path.as_ref();
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
        let mut file = std::fs::File::open(path)?;
        let content = gguf_file::Content::read(&mut file).map_err(|e| LoadError::Gguf(e.to_string()))?;
        let model_context = check_shape(&content)?;
        let codec = PromptCodec::from_gguf(&content)?;
        let name = match &options.model_name {
            Some(name) => name.clone(),
            None => content
                .metadata
                .get("general.name")
                .and_then(|v| v.to_string().ok())
                .cloned()
                .or_else(|| path.file_stem().map(|s| s.to_string_lossy().into_owned()))
                .unwrap_or_else(|| "local".to_owned()),
        };
        let context_window = match options.context_window {
            Some(0) => return Err(LoadError::Options("context_window must be at least 1")),
            Some(n) => n.min(MAX_CONTEXT),
            None => model_context,
        };
        // A damaged file can still trip an assertion inside candle's loader; it is the operator's file, but the
        // answer should be a typed error all the same.
        let weights = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match options.precision {
            Precision::Quantized => ModelWeights::from_gguf(content, &mut file, &Device::Cpu),
            Precision::F32 => {
                let (content, mut widened) = widen(content, &mut file)?;
                ModelWeights::from_gguf(content, &mut widened, &Device::Cpu)
            }
        }))
        .map_err(|_| LoadError::Gguf("the loader failed on this file".into()))?
        .map_err(|e| LoadError::Gguf(e.to_string()))?;
        let permits = Arc::new(Semaphore::new(options.max_concurrent));
        let prefixes = PrefixCache::new(options.prefix_cache_tokens.unwrap_or(4 * context_window));
        let counters = Counters::default();
        Ok(Self {
            inner: Arc::new(Inner { weights, codec, name, context_window, options, permits, prefixes, counters }),
        })
    }

    /// What the model has done since load: prompt tokens decoded and reused from kept attention caches, tokens
    /// generated.
    pub fn work(&self) -> Work {
        let c = &self.inner.counters;
        Work {
            prompt_tokens_decoded: c.decoded.load(Ordering::Relaxed),
            prompt_tokens_reused: c.reused.load(Ordering::Relaxed),
            generated_tokens: c.generated.load(Ordering::Relaxed),
        }
    }

    /// The context window in force, in tokens.
    pub fn context_window(&self) -> usize {
        self.inner.context_window
    }

    /// The prompt's length in tokens, as the model will see it (chat template included).
    pub fn prompt_tokens(&self, request: &ChatRequest) -> Result<usize, LlmError> {
        self.inner.codec.encode(request).map(|ids| ids.len()).map_err(|e| LlmError::Inference(e.to_string()))
    }
}

/// A piece of a streamed answer, with the usage so far.
struct Delta {
    text: String,
    usage: Usage,
}

/// Sets the flag when the caller goes away, so the generating thread stops at its next token.
struct CancelOnDrop(Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

impl Inner {
    /// Runs one generation to its end, handing each new piece of text to `events` (which may be `None` for a whole
    /// answer). Returns early, with [`FinishReason::Stopped`], once `cancel` is set.
    fn generate(
        &self,
        request: &ChatRequest,
        events: Option<&mpsc::Sender<Delta>>,
        cancel: &AtomicBool,
    ) -> Result<ChatResponse, LlmError> {
        let inference = |e: candle_core::Error| LlmError::Inference(e.to_string());
        let wanted =
            request.max_tokens.map_or(self.options.default_max_tokens, |m| usize::try_from(m).unwrap_or(usize::MAX));
        let (prompt, trimmed) = self.fit(request, wanted)?;
        let room = self.context_window - prompt.len();
        let limit = wanted.min(room);
        let sampling = match self.options.sampling {
            Sampling::Greedy => CandleSampling::ArgMax,
            Sampling::Temperature { temperature, top_p: None, .. } => CandleSampling::All { temperature },
            Sampling::Temperature { temperature, top_p: Some(p), .. } => CandleSampling::TopP { p, temperature },
        };
        let seed = match self.options.sampling {
            Sampling::Temperature { seed, .. } => seed,
            Sampling::Greedy => 0,
        };
        let mut sampler = LogitsProcessor::from_sampling(seed, sampling);
        let input_tokens = prompt.len() as u64;
        // Continue from the longest kept state this prompt extends, else from the bare weights.
        let (mut model, mut seen) = match self.prefixes.take_longest(&prompt) {
            Some(Prefix { tokens, model }) => (model, tokens),
            None => (self.weights.clone(), Vec::new()),
        };
        self.counters.reused.fetch_add(seen.len() as u64, Ordering::Relaxed);
        self.counters.decoded.fetch_add((prompt.len() - seen.len()) as u64, Ordering::Relaxed);
        let mut answer: Vec<u32> = Vec::new();
        let mut text = String::new();
        let mut position = seen.len();
        let mut next_input = prompt[seen.len()..].to_vec();
        let finish = loop {
            if cancel.load(Ordering::Relaxed) {
                break FinishReason::Stopped;
            }
            if answer.len() >= limit {
                break FinishReason::Length;
            }
            let input =
                Tensor::new(next_input.as_slice(), &Device::Cpu).and_then(|t| t.unsqueeze(0)).map_err(inference)?;
            // A failed step leaves the state unknown: it is dropped, not kept.
            let logits = model.forward(&input, position).and_then(|l| l.squeeze(0)).map_err(inference)?;
            position += next_input.len();
            seen.extend_from_slice(&next_input);
            let logits = if self.options.repeat_penalty == 1.0 {
                logits
            } else {
                candle_transformers::utils::apply_repeat_penalty(&logits, self.options.repeat_penalty, &answer)
                    .map_err(inference)?
            };
            let token = sampler.sample(&logits).map_err(inference)?;
            if self.codec.stop_tokens.contains(&token) {
                break FinishReason::Stop;
            }
            answer.push(token);
            next_input = vec![token];
            // Byte-level tokens can split a character: a piece is handed on once the text decodes cleanly.
            let decoded = self.codec.decode(&answer).map_err(|e| LlmError::Inference(e.to_string()))?;
            if decoded.len() > text.len() && decoded.starts_with(&text) && !decoded.ends_with('\u{FFFD}') {
                let piece = decoded[text.len()..].to_owned();
                text = decoded;
                if let Some(events) = events {
                    let usage = Usage::new(input_tokens, answer.len() as u64);
                    if events.blocking_send(Delta { text: piece, usage }).is_err() {
                        break FinishReason::Stopped;
                    }
                }
            }
        };
        let decoded = self.codec.decode(&answer).map_err(|e| LlmError::Inference(e.to_string()))?;
        if finish != FinishReason::Stopped && decoded.len() > text.len() && decoded.starts_with(&text) {
            // The tail that never decoded cleanly (a cut character) still belongs to the answer.
            if let Some(events) = events {
                let usage = Usage::new(input_tokens, answer.len() as u64);
                let _ = events.blocking_send(Delta { text: decoded[text.len()..].to_owned(), usage });
            }
            text = decoded;
        }
        self.counters.generated.fetch_add(answer.len() as u64, Ordering::Relaxed);
        // The state after the prompt and the answer so far: the next turn of this conversation starts with them.
        self.prefixes.keep(Prefix { tokens: seen, model });
        let usage = Usage::new(input_tokens, answer.len() as u64);
        Ok(ChatResponse::new(text, Some(self.name.clone()), usage, finish).with_trimmed(trimmed))
    }

    /// The prompt of `request`, fit to the context window with room for an answer: while it leaves less than
    /// `wanted` tokens (at most a quarter of the window) for the answer, the oldest messages go, a user's message
    /// with the answers and tool results after it, never the system prompt or the last message. A prompt that
    /// still fills the window is refused with [`LlmError::PromptTooLong`].
    fn fit(&self, request: &ChatRequest, wanted: usize) -> Result<(Vec<u32>, Option<Trimmed>), LlmError> {
        let encode = |r: &ChatRequest| self.codec.encode(r).map_err(|e| LlmError::Inference(e.to_string()));
        let whole = encode(request)?;
        let reserve = wanted.min(self.context_window / 4).max(1);
        let fits = |prompt: &[u32]| prompt.len() + reserve <= self.context_window;
        let mut prompt = whole.clone();
        let mut dropped = 0;
        let mut trimmed = request.clone();
        while !fits(&prompt) && trimmed.messages.len() > 1 {
            // One turn: the first message, then whatever follows it up to the next user message.
            let turn = 1 + trimmed.messages[1..trimmed.messages.len() - 1]
                .iter()
                .take_while(|m| m.role != ldp_llm::Role::User)
                .count();
            trimmed.messages.drain(..turn);
            dropped += turn;
            prompt = encode(&trimmed)?;
        }
        if prompt.is_empty() || prompt.len() >= self.context_window {
            return Err(LlmError::PromptTooLong { prompt_tokens: whole.len(), context_window: self.context_window });
        }
        let trim = (dropped > 0).then(|| {
            let tokens = whole.len().saturating_sub(prompt.len()) as u64;
            Trimmed::new(dropped, tokens, self.context_window as u64)
        });
        Ok((prompt, trim))
    }
}

impl LocalBackend {
    /// Waits for a generation slot, then generates `request` on a blocking thread that holds the slot until it
    /// ends, handing its pieces to `events` when given. The thread stops at its next token once the returned guard
    /// is dropped or set.
    async fn start(
        &self,
        request: &ChatRequest,
        events: Option<mpsc::Sender<Delta>>,
    ) -> Result<(tokio::task::JoinHandle<Result<ChatResponse, LlmError>>, CancelOnDrop), LlmError> {
        let permit = Arc::clone(&self.inner.permits)
            .acquire_owned()
            .await
            .map_err(|_| LlmError::Inference("the backend is shut down".into()))?;
        let cancel = Arc::new(AtomicBool::new(false));
        let guard = CancelOnDrop(Arc::clone(&cancel));
        let inner = Arc::clone(&self.inner);
        let request = request.clone();
        let handle = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            inner.generate(&request, events.as_ref(), &cancel)
        });
        Ok((handle, guard))
    }
}

fn joined(result: Result<Result<ChatResponse, LlmError>, tokio::task::JoinError>) -> Result<ChatResponse, LlmError> {
    result.map_err(|e| LlmError::Inference(format!("the generating thread failed: {e}")))?
}

#[async_trait]
impl LlmBackend for LocalBackend {
    fn info(&self) -> BackendInfo {
        BackendInfo::new("local", self.inner.name.clone())
    }

    async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let (handle, _guard) = self.start(request, None).await?;
        joined(handle.await)
    }

    async fn stream(&self, request: &ChatRequest, on_delta: &mut OnDelta<'_>) -> Result<ChatResponse, LlmError> {
        // A few pieces of slack: the model never runs far ahead of a slow consumer.
        let (tx, mut rx) = mpsc::channel(8);
        let (handle, guard) = self.start(request, Some(tx)).await?;
        let mut text = String::new();
        // The thread drops its sender when it ends, which ends this loop.
        while let Some(Delta { text: piece, usage }) = rx.recv().await {
            text.push_str(&piece);
            if on_delta(&piece, &usage) == StreamControl::Stop {
                guard.0.store(true, Ordering::Relaxed);
                return Ok(ChatResponse::new(text, Some(self.inner.name.clone()), usage, FinishReason::Stopped));
            }
        }
        joined(handle.await)
    }
}
