//! The candle engine: the model's weights (widened to `f32` or kept quantized) shared by generations that each run
//! on a blocking thread with their own attention cache, kept afterwards for a prompt that extends it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use candle_core::quantized::{GgmlDType, QTensor, gguf_file};
use candle_core::{Device, Tensor};
use candle_transformers::generation::{LogitsProcessor, Sampling as CandleSampling};
use candle_transformers::models::quantized_llama::ModelWeights;
use ldp_llm::{ChatResponse, FinishReason, LlmError};
use tokio::sync::{Semaphore, mpsc, oneshot};

use crate::LoadError;
use crate::backend::{Answer, Delta, MAX_CONTEXT, Plan, Precision, Sampling, Shared};

/// The weights, the generation slots and the kept caches.
pub(crate) struct CandleEngine {
    weights: ModelWeights,
    permits: Arc<Semaphore>,
    prefixes: Arc<PrefixCache>,
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

fn metadata_u32(content: &gguf_file::Content, key: &'static str) -> Result<u32, LoadError> {
    content.metadata.get(key).ok_or(LoadError::MissingMetadata(key))?.to_u32().map_err(|_| LoadError::BadMetadata(key))
}

/// Refuses what would make candle's loader divide by zero or allocate without bound, before calling it.
pub(crate) fn check_shape(content: &gguf_file::Content) -> Result<usize, LoadError> {
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

impl CandleEngine {
    /// Loads the weights of a file whose header was read into `content`.
    pub(crate) fn load(
        content: gguf_file::Content,
        file: &mut std::fs::File,
        shared: &Shared,
    ) -> Result<Self, LoadError> {
        let options = &shared.options;
        // A damaged file can still trip an assertion inside candle's loader; it is the operator's file, but the
        // answer should be a typed error all the same.
        let weights = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match options.precision {
            Precision::Quantized => ModelWeights::from_gguf(content, file, &Device::Cpu),
            Precision::F32 => {
                let (content, mut widened) = widen(content, file)?;
                ModelWeights::from_gguf(content, &mut widened, &Device::Cpu)
            }
        }))
        .map_err(|_| LoadError::Gguf("the loader failed on this file".into()))?
        .map_err(|e| LoadError::Gguf(e.to_string()))?;
        let permits = Arc::new(Semaphore::new(options.max_concurrent));
        let prefixes = Arc::new(PrefixCache::new(options.prefix_cache_tokens.unwrap_or(4 * shared.context_window)));
        Ok(Self { weights, permits, prefixes })
    }

    /// Waits for a generation slot, then generates `plan` on a blocking thread that holds the slot until it ends.
    pub(crate) async fn start(
        &self,
        shared: Arc<Shared>,
        plan: Plan,
        events: Option<mpsc::UnboundedSender<Delta>>,
        cancel: Arc<AtomicBool>,
    ) -> Result<oneshot::Receiver<Result<ChatResponse, LlmError>>, LlmError> {
        let permit = Arc::clone(&self.permits)
            .acquire_owned()
            .await
            .map_err(|_| LlmError::Inference("the backend is shut down".into()))?;
        let (tx, rx) = oneshot::channel();
        let weights = self.weights.clone();
        let prefixes = Arc::clone(&self.prefixes);
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            let answer = Answer::new(&plan, events);
            let result = generate(&shared, &prefixes, weights, &plan, answer, &cancel);
            // The caller may be gone; nothing waits for the answer then.
            let _ = tx.send(result);
        });
        Ok(rx)
    }
}

/// Runs one generation to its end. Returns early, with [`FinishReason::Stopped`], once `cancel` is set or the
/// pieces' reader is gone.
fn generate(
    shared: &Shared,
    prefixes: &PrefixCache,
    weights: ModelWeights,
    plan: &Plan,
    mut answer: Answer,
    cancel: &AtomicBool,
) -> Result<ChatResponse, LlmError> {
    let inference = |e: candle_core::Error| LlmError::Inference(e.to_string());
    let options = &shared.options;
    let prompt = &plan.prompt;
    let sampling = match options.sampling {
        Sampling::Greedy => CandleSampling::ArgMax,
        Sampling::Temperature { temperature, top_p: None, .. } => CandleSampling::All { temperature },
        Sampling::Temperature { temperature, top_p: Some(p), .. } => CandleSampling::TopP { p, temperature },
    };
    let seed = match options.sampling {
        Sampling::Temperature { seed, .. } => seed,
        Sampling::Greedy => 0,
    };
    let mut sampler = LogitsProcessor::from_sampling(seed, sampling);
    // Continue from the longest kept state this prompt extends, else from the bare weights.
    let (mut model, mut seen) = match prefixes.take_longest(prompt) {
        Some(Prefix { tokens, model }) => (model, tokens),
        None => (weights, Vec::new()),
    };
    shared.counters.reused.fetch_add(seen.len() as u64, Ordering::Relaxed);
    shared.counters.decoded.fetch_add((prompt.len() - seen.len()) as u64, Ordering::Relaxed);
    let mut position = seen.len();
    let mut next_input = prompt[seen.len()..].to_vec();
    let finish = loop {
        if cancel.load(Ordering::Relaxed) || answer.abandoned() {
            break FinishReason::Stopped;
        }
        if answer.tokens.len() >= plan.limit {
            break FinishReason::Length;
        }
        let input = Tensor::new(next_input.as_slice(), &Device::Cpu).and_then(|t| t.unsqueeze(0)).map_err(inference)?;
        // A failed step leaves the state unknown: it is dropped, not kept.
        let logits = model.forward(&input, position).and_then(|l| l.squeeze(0)).map_err(inference)?;
        position += next_input.len();
        seen.extend_from_slice(&next_input);
        let logits = if options.repeat_penalty == 1.0 {
            logits
        } else {
            candle_transformers::utils::apply_repeat_penalty(&logits, options.repeat_penalty, &answer.tokens)
                .map_err(inference)?
        };
        let token = sampler.sample(&logits).map_err(inference)?;
        if shared.codec.stop_tokens.contains(&token) {
            break FinishReason::Stop;
        }
        next_input = vec![token];
        if !answer.push(&shared.codec, token)? {
            break FinishReason::Stopped;
        }
    };
    // The state after the prompt and the answer so far: the next turn of this conversation starts with them.
    prefixes.keep(Prefix { tokens: seen, model });
    answer.finish(shared, plan, finish)
}
