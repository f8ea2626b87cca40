//! The llama.cpp engine: one model and one context shared by every generation, driven by one scheduler thread.
//!
//! ```text
//!  LocalBackend::complete/stream ──Job──▶ scheduler thread ──one llama_batch per step──▶ llama.cpp
//!        ▲ pieces, answer                   slots: sequence id, the tokens its cache holds, the job on it
//!        └───────────────────────────────── sampling (greedy / seeded, under a grammar when asked)
//! ```
//!
//! Each step puts every active generation's next token (or the next chunk of its prompt) into one batch, so that
//! concurrent sessions share the weights' memory traffic: four decode at nearly the cost of one. Each slot is one
//! sequence of the context and keeps its attention cache after its generation: a prompt that starts with the
//! tokens a slot holds goes to that slot and decodes only the rest (the slot's divergent tail is removed first);
//! otherwise the least recently used free slot is emptied for it. A cache is only ever reused for exactly the
//! tokens it was computed on, prompt and generated alike: every token's values are the same however it was batched
//! ([`FLASH_ATTENTION`]), so reuse and eviction cost time, never a different answer.

use std::num::NonZeroU32;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc as std_mpsc;
use std::sync::{Arc, OnceLock};

use ldp_llm::{ChatRequest, ChatResponse, FinishReason, LlmError};
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::LlamaToken;
use llama_cpp_2::token::data::LlamaTokenData;
use llama_cpp_2::token::data_array::LlamaTokenDataArray;
use tokio::sync::{mpsc, oneshot};

use crate::LoadError;
use crate::backend::{Answer, Delta, Plan, Sampling, Shared};
use crate::prompt::{self, PromptCodec, Vocabulary};

/// The most tokens decoded in one step, over all sequences (llama.cpp's default logical batch).
const BATCH_TOKENS: usize = 512;

/// Flash attention off. Its CPU kernels depend on the batch: 64 or more queries of one sequence take a tiled
/// kernel, a single query over a cache of 512 or more splits the cache between threads, anything else takes the
/// per-row kernel. A generated token's values then differed from the same token's in a prompt, and reusing the
/// cache an answer left changed later answers (measured: SmolLM2's answer after a tool call differed between the
/// first and second run of one server). Without it, attention is two matrix products, and with llamafile's kernels
/// left out of the build (`GGML_LLAMAFILE=OFF`, `.cargo/config.toml`: they served prompts only) every product takes
/// ggml's per-row kernel whatever the batch, so a token's values are the same in a prompt, in a generation, alone
/// or beside other sessions.
const FLASH_ATTENTION: llama_cpp_sys_2::llama_flash_attn_type = llama_cpp_sys_2::LLAMA_FLASH_ATTN_TYPE_DISABLED;

/// `GGML_LLAMAFILE` as this crate was compiled with it: the same build environment in which llama-cpp-sys-2's build
/// script handed it to cmake (rustc records the variable, so a change rebuilds this crate).
const LLAMAFILE_SETTING: Option<&str> = option_env!("GGML_LLAMAFILE");

/// Whether llama.cpp was built without llamafile's kernels ([`FLASH_ATTENTION`] says why that is needed), from the
/// cmake setting `GGML_LLAMAFILE` (`None`: unset, which cmake takes as on, except on Android, where llama-cpp-sys-2
/// turns it off). A value is off when cmake reads it as a false constant (`OFF`, `0`, `NO`, `FALSE`, `N`, `IGNORE`,
/// `NOTFOUND`, empty or `*-NOTFOUND`, in any case); anything else is taken as on, so an unknown value refuses
/// rather than risks changed answers.
fn exact_kernels(setting: Option<&str>, android: bool) -> bool {
    if android {
        return true;
    }
    let Some(value) = setting.map(str::trim) else { return false };
    let upper = value.to_ascii_uppercase();
    matches!(upper.as_str(), "" | "0" | "OFF" | "NO" | "FALSE" | "N" | "IGNORE" | "NOTFOUND")
        || upper.ends_with("-NOTFOUND")
}

/// Refuses to start on a llama.cpp built with llamafile's kernels (`setting`: `GGML_LLAMAFILE` at build time): its
/// batched and reused answers could differ from a fresh run's, which this engine promises never happens. The
/// setting is read, not the library asked (llama.cpp reports its features only through C calls, and this crate has
/// no unsafe code); a llama-cpp-sys-2 built before the setting changed keeps its kernels until rebuilt.
fn check_build(setting: Option<&str>, android: bool) -> Result<(), LoadError> {
    if exact_kernels(setting, android) {
        return Ok(());
    }
    Err(LoadError::EngineStart {
        step: "check how llama.cpp was built",
        reason: format!(
            "GGML_LLAMAFILE is {}: llama.cpp's llamafile kernels make a token's values depend on how it was batched, \
             so reused caches and batched sessions could change answers; build with GGML_LLAMAFILE=OFF (the \
             environment, or [env] in .cargo/config.toml) and `cargo clean -p llama-cpp-sys-2`",
            setting.map_or_else(|| "unset (cmake's default: on)".to_owned(), |v| format!("{v:?}"))
        ),
    })
}

/// llama.cpp's process-wide state: initialised once, its log silenced (the server has its own).
fn backend() -> Result<&'static LlamaBackend, LoadError> {
    static BACKEND: OnceLock<Result<LlamaBackend, String>> = OnceLock::new();
    BACKEND
        .get_or_init(|| {
            let mut backend = LlamaBackend::init().map_err(|e| e.to_string())?;
            backend.void_logs();
            Ok(backend)
        })
        .as_ref()
        .map_err(|reason| LoadError::EngineStart { step: "initialise llama.cpp", reason: reason.clone() })
}

/// Loads the model file (its weights memory-mapped, as llama.cpp does by default).
pub(crate) fn load_model(path: &Path) -> Result<Arc<LlamaModel>, LoadError> {
    check_build(LLAMAFILE_SETTING, cfg!(target_os = "android"))?;
    let model = LlamaModel::load_from_file(backend()?, path, &LlamaModelParams::default())
        .map_err(|e| LoadError::EngineStart { step: "load the model", reason: e.to_string() })?;
    Ok(Arc::new(model))
}

/// The model's metadata value under `key`, if it has one.
pub(crate) fn metadata(model: &LlamaModel, key: &str) -> Option<String> {
    model.meta_val_str(key).ok()
}

/// The prompt codec of a loaded model: llama.cpp's own tokenizer (the one llama-server uses, so prompts are the
/// same token for token) and the file's chat template. Nothing is read twice: no second copy of the vocabulary
/// is built (it took 26 MiB of heap as a `tokenizers` BPE pair).
pub(crate) fn codec(model: &Arc<LlamaModel>) -> Result<PromptCodec, LoadError> {
    let vocab = model.vocab();
    let text = |token: LlamaToken| vocab.text(token).map(|t| t.to_string_lossy().into_owned()).unwrap_or_default();
    let n_tokens = vocab.n_tokens();
    let (bos, eos) = (vocab.bos(), vocab.eos());
    let in_range = |t: LlamaToken| (0..n_tokens).contains(&t.0);
    let id_of = |t: LlamaToken| if in_range(t) { u32::try_from(t.0).ok() } else { None };
    let control = (0..n_tokens).filter(|&t| vocab.is_control(LlamaToken(t))).filter_map(|t| u32::try_from(t).ok());
    let stop_tokens = prompt::stop_tokens(control, id_of(eos), id_of(bos))?;
    let name_of = |t: LlamaToken| if in_range(t) { text(t) } else { String::new() };
    let (bos_token, eos_token) = (name_of(bos), name_of(eos));
    let template = metadata(model, "tokenizer.chat_template");
    PromptCodec::new(Box::new(LlamaVocabulary(Arc::clone(model))), template, bos_token, eos_token, stop_tokens)
}

/// llama.cpp's tokenizer, read through the loaded model.
struct LlamaVocabulary(Arc<LlamaModel>);

/// The longest text tokenized at once: llama.cpp counts in `i32`, and the wrapper panics past it.
const MAX_TOKENIZED_BYTES: usize = (i32::MAX / 2) as usize;

impl Vocabulary for LlamaVocabulary {
    fn encode(&self, ids: &mut Vec<u32>, text: &str, control: bool) -> Result<(), LoadError> {
        if text.len() > MAX_TOKENIZED_BYTES {
            return Err(LoadError::Tokenizer(format!("a text of {} bytes is too long to tokenize", text.len())));
        }
        // No BOS or EOS added (the template writes what the model wants); `control` parses control tokens.
        let tokens = self.0.vocab().tokenize(text.as_bytes(), false, control);
        ids.extend(tokens.iter().filter_map(|t| u32::try_from(t.0).ok()));
        Ok(())
    }

    fn decode(&self, ids: &[u32]) -> Result<String, LoadError> {
        let vocab = self.0.vocab();
        let n_tokens = vocab.n_tokens();
        // llama.cpp aborts the process on an id outside its vocabulary (a C++ exception across the FFI).
        let tokens = ids
            .iter()
            .map(|&id| i32::try_from(id).ok().filter(|t| (0..n_tokens).contains(t)).map(LlamaToken))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| LoadError::Tokenizer("a token id outside the vocabulary".into()))?;
        // Control tokens are left out of the text (`unparse_special` off).
        let bytes = vocab.detokenize(&tokens, true, false);
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }
}

/// The handle on the scheduler thread: dropping the last one ends it.
pub(crate) struct LlamaEngine {
    jobs: std_mpsc::Sender<Job>,
}

/// One generation, as the scheduler receives it.
struct Job {
    plan: Plan,
    grammar: Option<String>,
    answer: Answer,
    cancel: Arc<AtomicBool>,
    reply: oneshot::Sender<Result<ChatResponse, LlmError>>,
}

/// The grammar `request` must be decoded under: its tools' call grammar, else its response schema's. A schema the
/// converter cannot enforce is refused here, before any decoding.
pub(crate) fn grammar_of(request: &ChatRequest, answer_only: bool) -> Result<Option<String>, LlmError> {
    if !request.tools.is_empty() {
        // The tools are checked all the same: a schema the grammar cannot enforce is refused either way.
        ldp_llm::grammar::tool_call_gbnf(&request.tools, request.response_schema.as_ref()).map_err(LlmError::Schema)?;
        let tools: &[ldp_llm::ToolSpec] = if answer_only { &[] } else { &request.tools };
        return ldp_llm::grammar::tool_call_gbnf(tools, request.response_schema.as_ref())
            .map(Some)
            .map_err(LlmError::Schema);
    }
    match &request.response_schema {
        Some(schema) => ldp_llm::grammar::schema_to_gbnf(schema).map(Some).map_err(LlmError::Schema),
        None => Ok(None),
    }
}

impl LlamaEngine {
    /// Starts the scheduler thread, which creates the model's context; returns once it is ready.
    pub(crate) fn start_on(model: Arc<LlamaModel>, shared: Arc<Shared>) -> Result<Self, LoadError> {
        let backend = backend()?;
        let (ready_tx, ready_rx) = std_mpsc::channel();
        let (jobs, jobs_rx) = std_mpsc::channel();
        std::thread::Builder::new()
            .name("ldp-llama".into())
            .spawn(move || run(backend, &model, &shared, &ready_tx, &jobs_rx))
            .map_err(LoadError::Io)?;
        ready_rx.recv().map_err(|_| LoadError::EngineStart { step: "start", reason: "the thread ended".into() })??;
        Ok(Self { jobs })
    }

    /// Queues a generation; its answer arrives on the returned receiver.
    pub(crate) fn start(
        &self,
        plan: Plan,
        grammar: Option<String>,
        events: Option<mpsc::UnboundedSender<Delta>>,
        cancel: Arc<AtomicBool>,
    ) -> Result<oneshot::Receiver<Result<ChatResponse, LlmError>>, LlmError> {
        let (reply, rx) = oneshot::channel();
        let answer = Answer::new(&plan, events);
        self.jobs
            .send(Job { plan, grammar, answer, cancel, reply })
            .map_err(|_| LlmError::Inference("the llama engine has stopped".into()))?;
        Ok(rx)
    }
}

/// The scheduler thread's body: create the context, report, then serve jobs until every handle is gone.
fn run(
    backend: &'static LlamaBackend,
    model: &LlamaModel,
    shared: &Shared,
    ready: &std_mpsc::Sender<Result<(), LoadError>>,
    jobs: &std_mpsc::Receiver<Job>,
) {
    let slots = shared.options.max_concurrent;
    // One core is left to the rest of the process (the server, a tool loop's delegates) and its neighbours:
    // llama.cpp's threads wait for each other at every step, so one of them preempted stalls the step (measured on
    // two busy cores: 15 s for a SmolLM2 tool loop on two threads, 2.8 s on one; 1.4 s and 1.8 s when idle).
    let threads = shared
        .options
        .threads
        .or_else(|| std::thread::available_parallelism().ok().map(|n| n.get().saturating_sub(1).max(1)))
        .unwrap_or(1);
    let threads = i32::try_from(threads).unwrap_or(i32::MAX);
    // Each sequence gets a cache of one context window (llama.cpp splits n_ctx evenly between sequences).
    let n_ctx = u32::try_from(shared.context_window.saturating_mul(slots)).ok().and_then(NonZeroU32::new);
    let params = LlamaContextParams::default()
        .with_n_ctx(n_ctx)
        .with_n_batch(BATCH_TOKENS as u32)
        .with_n_ubatch(BATCH_TOKENS as u32)
        .with_n_seq_max(u32::try_from(slots).unwrap_or(u32::MAX))
        .with_n_threads(threads)
        .with_n_threads_batch(threads)
        .with_flash_attention_policy(FLASH_ATTENTION);
    let context = match model.new_context(backend, params) {
        Ok(context) => context,
        Err(e) => {
            let _ = ready.send(Err(LoadError::EngineStart { step: "create its context", reason: e.to_string() }));
            return;
        }
    };
    if ready.send(Ok(())).is_err() {
        return;
    }
    let mut scheduler = Scheduler {
        model,
        context,
        shared,
        slots: (0..slots).map(|seq| Slot { seq: seq as i32, tokens: Vec::new(), used: 0, active: None }).collect(),
        waiting: std::collections::VecDeque::new(),
        clock: 0,
        batch: LlamaBatch::new(BATCH_TOKENS, 1),
    };
    scheduler.serve(jobs);
}

/// One sequence of the shared context.
struct Slot {
    seq: i32,
    /// The tokens this sequence's cache holds, positions 0.. in order (a prompt's and the answer's alike).
    tokens: Vec<u32>,
    /// When it last served a generation (the scheduler's clock): the least recent free slot is emptied first.
    used: u64,
    active: Option<Active>,
}

/// A generation running on a slot.
struct Active {
    job: Job,
    /// Tokens to decode before the next sampling: the rest of the prompt, then each sampled token.
    pending: Vec<u32>,
    /// How many of `pending` are still the prompt's.
    prompt_left: usize,
    sampler: Sampler,
}

/// How one generation picks its tokens.
struct Sampler {
    grammar: Option<LlamaSampler>,
    /// Temperature, nucleus and the seeded draw; `None` for greedy.
    random: Option<LlamaSampler>,
    repeat_penalty: f32,
}

struct Scheduler<'m> {
    model: &'m LlamaModel,
    context: LlamaContext<'m>,
    shared: &'m Shared,
    slots: Vec<Slot>,
    waiting: std::collections::VecDeque<Job>,
    clock: u64,
    batch: LlamaBatch<'static>,
}

fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// How much of `slot`'s cache a prompt may reuse: the start they share, but never the prompt's last token, whose
/// scores give the first answer token.
fn reusable(slot: &Slot, prompt: &[u32]) -> usize {
    common_prefix(&slot.tokens, prompt).min(prompt.len().saturating_sub(1))
}

fn llama_token(token: u32) -> Result<LlamaToken, LlmError> {
    i32::try_from(token).map(LlamaToken).map_err(|_| LlmError::Inference(format!("token id {token} out of range")))
}

impl Scheduler<'_> {
    fn serve(&mut self, jobs: &std_mpsc::Receiver<Job>) {
        loop {
            let busy = self.slots.iter().any(|s| s.active.is_some());
            if !busy && self.waiting.is_empty() {
                // Idle: wait for work; every handle gone ends the thread.
                match jobs.recv() {
                    Ok(job) => self.waiting.push_back(job),
                    Err(_) => return,
                }
            }
            while let Ok(job) = jobs.try_recv() {
                self.waiting.push_back(job);
            }
            self.admit();
            self.drop_cancelled();
            self.step();
        }
    }

    /// Gives free slots to waiting jobs, oldest first: each to the free slot whose cache shares the longest start
    /// with its prompt, else to the least recently used.
    fn admit(&mut self) {
        while let Some(job) = self.waiting.front() {
            let prompt = &job.plan.prompt;
            let best = self
                .slots
                .iter()
                .enumerate()
                .filter(|(_, s)| s.active.is_none())
                .max_by_key(|(_, s)| (reusable(s, prompt), std::cmp::Reverse(s.used)))
                .map(|(i, _)| i);
            let Some(index) = best else { return };
            let Some(job) = self.waiting.pop_front() else { return };
            if job.cancel.load(Ordering::Relaxed) || job.answer.abandoned() {
                continue;
            }
            self.clock += 1;
            let clock = self.clock;
            let slot = &mut self.slots[index];
            let keep = reusable(slot, &job.plan.prompt);
            let keep_u32 = u32::try_from(keep).unwrap_or(u32::MAX);
            if self.context.kv_cache_seq_rm(slot.seq, Some(keep_u32), None).is_err() {
                // A partial removal llama.cpp cannot do: start the sequence afresh.
                let _ = self.context.kv_cache_seq_rm(slot.seq, None, None);
                slot.tokens.clear();
            } else {
                slot.tokens.truncate(keep);
            }
            let kept = slot.tokens.len();
            let counters = &self.shared.counters;
            counters.reused.fetch_add(kept as u64, Ordering::Relaxed);
            counters.decoded.fetch_add((job.plan.prompt.len() - kept) as u64, Ordering::Relaxed);
            slot.used = clock;
            let sampler = match Sampler::new(self.model, self.shared, job.grammar.as_deref()) {
                Ok(sampler) => sampler,
                Err(e) => {
                    let _ = job.reply.send(Err(e));
                    continue;
                }
            };
            let pending = job.plan.prompt[kept..].to_vec();
            let prompt_left = pending.len();
            slot.active = Some(Active { job, pending, prompt_left, sampler });
        }
    }

    /// Ends the generations whose caller has gone or asked to stop, answering with what they have.
    fn drop_cancelled(&mut self) {
        for index in 0..self.slots.len() {
            let gone = self.slots[index]
                .active
                .as_ref()
                .is_some_and(|a| a.job.cancel.load(Ordering::Relaxed) || a.job.answer.abandoned());
            if gone {
                self.finish(index, Ok(FinishReason::Stopped));
            }
        }
    }

    /// Answers the slot's generation and frees the slot; its cache stays for the next prompt that extends it.
    fn finish(&mut self, index: usize, outcome: Result<FinishReason, LlmError>) {
        let Some(active) = self.slots[index].active.take() else { return };
        let Job { plan, answer, reply, .. } = active.job;
        let result = outcome.and_then(|finish| answer.finish(self.shared, &plan, finish));
        let _ = reply.send(result);
    }

    /// One decode: every active generation's next token or prompt chunk in one batch, then a token sampled for each
    /// whose prompt is done.
    fn step(&mut self) {
        self.batch.clear();
        // (slot, tokens added, batch index of its logits)
        let mut added: Vec<(usize, usize, Option<i32>)> = Vec::new();
        let mut room = BATCH_TOKENS;
        // Generating sequences first (one token each), then prompts with what room is left.
        let mut order: Vec<usize> = (0..self.slots.len()).filter(|&i| self.slots[i].active.is_some()).collect();
        order.sort_by_key(|&i| self.slots[i].active.as_ref().map_or(usize::MAX, |a| a.pending.len()));
        for index in order {
            if room == 0 {
                break;
            }
            let slot = &mut self.slots[index];
            let Some(active) = slot.active.as_mut() else { continue };
            if active.pending.is_empty() {
                continue;
            }
            if active.job.answer.tokens.len() >= active.job.plan.limit {
                continue;
            }
            // A prompt takes what room is left and goes on in the next step: how it is split changes no value.
            let take = if active.prompt_left > 0 { active.prompt_left.min(room) } else { active.pending.len() };
            if take > room {
                continue;
            }
            let mut logits_at = None;
            let mut failed = None;
            for (i, &token) in active.pending[..take].iter().enumerate() {
                let last = i + 1 == active.pending.len();
                let position = i32::try_from(slot.tokens.len() + i).unwrap_or(i32::MAX);
                let index_in_batch = self.batch.n_tokens();
                let added_ok = llama_token(token).and_then(|t| {
                    self.batch
                        .add(t, position, &[slot.seq], last)
                        .map_err(|e| LlmError::Inference(format!("batch: {e}")))
                });
                if let Err(e) = added_ok {
                    failed = Some(e);
                    break;
                }
                if last {
                    logits_at = Some(index_in_batch);
                }
            }
            if let Some(e) = failed {
                // Nothing of this slot was decoded yet, but the batch holds part of it: start over cleanly.
                self.batch.clear();
                self.finish(index, Err(e));
                return;
            }
            room -= take;
            added.push((index, take, logits_at));
        }
        // Generations that reached their limit end without another decode.
        for index in 0..self.slots.len() {
            let done = self.slots[index].active.as_ref().is_some_and(|a| a.job.answer.tokens.len() >= a.job.plan.limit);
            if done {
                self.finish(index, Ok(FinishReason::Length));
            }
        }
        if added.is_empty() {
            return;
        }
        if let Err(e) = self.context.decode(&mut self.batch) {
            // What the failed step left in the caches is unknown: those sequences start afresh.
            for (index, _, _) in added {
                let seq = self.slots[index].seq;
                let _ = self.context.kv_cache_seq_rm(seq, None, None);
                self.slots[index].tokens.clear();
                self.finish(index, Err(LlmError::Inference(format!("llama.cpp decode: {e}"))));
            }
            return;
        }
        for (index, take, logits_at) in added {
            let slot = &mut self.slots[index];
            let Some(active) = slot.active.as_mut() else { continue };
            slot.tokens.extend(active.pending.drain(..take));
            active.prompt_left = active.prompt_left.saturating_sub(take);
            let Some(at) = logits_at else { continue };
            let outcome = active.sampler.pick(self.model, &self.context, at, &active.job.answer.tokens, self.shared);
            match outcome {
                Err(e) => self.finish(index, Err(e)),
                Ok(None) => self.finish(index, Ok(FinishReason::Stop)),
                Ok(Some(token)) => {
                    active.pending.push(token);
                    match active.job.answer.push(&self.shared.codec, token) {
                        Ok(true) => {}
                        Ok(false) => self.finish(index, Ok(FinishReason::Stopped)),
                        Err(e) => self.finish(index, Err(e)),
                    }
                }
            }
        }
    }
}

impl Sampler {
    fn new(model: &LlamaModel, shared: &Shared, grammar: Option<&str>) -> Result<Self, LlmError> {
        let grammar = grammar
            .map(|text| {
                LlamaSampler::grammar(model, text, "root")
                    .map_err(|e| LlmError::Inference(format!("llama.cpp refused the grammar: {e}")))
            })
            .transpose()?;
        let random = match shared.options.sampling {
            Sampling::Greedy => None,
            Sampling::Temperature { temperature, top_p, seed } => {
                let mut chain = vec![LlamaSampler::temp(temperature as f32)];
                if let Some(p) = top_p {
                    chain.push(LlamaSampler::top_p(p as f32, 1));
                }
                // llama.cpp's seeds are 32 bits: the low half of ours.
                chain.push(LlamaSampler::dist(seed as u32));
                Some(LlamaSampler::chain_simple(chain))
            }
        };
        Ok(Self { grammar, random, repeat_penalty: shared.options.repeat_penalty })
    }

    /// The next token from the scores at batch index `at`, or `None` when the model ends its answer (a stop token).
    /// Under a grammar only a token it allows is taken, and the grammar is told of it; a grammar that allows no
    /// token at all is an error, never a token it forbids.
    fn pick(
        &mut self,
        model: &LlamaModel,
        context: &LlamaContext<'_>,
        at: i32,
        answer: &[u32],
        shared: &Shared,
    ) -> Result<Option<u32>, LlmError> {
        let mut logits = context.get_logits_ith(at).to_vec();
        if self.repeat_penalty != 1.0 {
            // The same rule as candle's `apply_repeat_penalty`: each token already in the answer, once.
            let mut seen = std::collections::HashSet::new();
            for &token in answer {
                if seen.insert(token)
                    && let Some(logit) = logits.get_mut(token as usize)
                {
                    *logit = if *logit >= 0.0 { *logit / self.repeat_penalty } else { *logit * self.repeat_penalty };
                }
            }
        }
        let token = match (&mut self.grammar, &mut self.random) {
            (None, None) => argmax(&logits),
            (Some(grammar), None) => {
                // The most likely token is usually allowed: check it alone before filtering the whole vocabulary.
                let best = argmax(&logits);
                let allowed = best.is_some_and(|t| {
                    let mut one = candidates_of(&[(t, logits[t as usize])]);
                    one.apply_sampler(grammar);
                    one.data.first().is_some_and(|d| d.logit().is_finite())
                });
                if allowed {
                    best
                } else {
                    let mut all = all_candidates(&logits);
                    all.apply_sampler(grammar);
                    all.data
                        .iter()
                        .filter(|d| d.logit().is_finite())
                        .max_by(|a, b| a.logit().total_cmp(&b.logit()))
                        .map(|d| d.id().0 as u32)
                }
            }
            (grammar, Some(random)) => {
                let mut all = all_candidates(&logits);
                if let Some(grammar) = grammar {
                    all.apply_sampler(grammar);
                }
                all.apply_sampler(random);
                all.selected_token().map(|t| t.0 as u32)
            }
        };
        let Some(token) = token else {
            return Err(LlmError::Inference("the grammar allows no next token".into()));
        };
        let llama = llama_token(token)?;
        if shared.codec.stop_tokens.contains(&token) || model.vocab().is_eog(llama) {
            return Ok(None);
        }
        if let Some(grammar) = &mut self.grammar {
            grammar.accept(llama);
        }
        Ok(Some(token))
    }
}

/// The first of the highest scores, as llama.cpp's greedy sampler takes it.
fn argmax(logits: &[f32]) -> Option<u32> {
    let mut best: Option<(usize, f32)> = None;
    for (i, &logit) in logits.iter().enumerate() {
        if best.is_none_or(|(_, b)| logit > b) {
            best = Some((i, logit));
        }
    }
    best.and_then(|(i, _)| u32::try_from(i).ok())
}

fn candidates_of(pairs: &[(u32, f32)]) -> LlamaTokenDataArray {
    LlamaTokenDataArray::from_iter(
        pairs.iter().map(|&(t, logit)| LlamaTokenData::new(LlamaToken(t as i32), logit, 0.0)),
        false,
    )
}

fn all_candidates(logits: &[f32]) -> LlamaTokenDataArray {
    LlamaTokenDataArray::from_iter(
        logits.iter().enumerate().map(|(i, &logit)| LlamaTokenData::new(LlamaToken(i as i32), logit, 0.0)),
        false,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_setting_is_off_only_when_cmake_reads_it_false() {
        for off in ["OFF", "off", " 0 ", "No", "FALSE", "n", "Ignore", "NOTFOUND", "", "LIBFOO-NOTFOUND"] {
            assert!(exact_kernels(Some(off), false), "{off:?} is off");
        }
        for on in ["ON", "1", "yes", "TRUE", "Y", "2", "0.5", "whatever"] {
            assert!(!exact_kernels(Some(on), false), "{on:?} is not off");
        }
        assert!(!exact_kernels(None, false), "unset is cmake's default: on");
        assert!(exact_kernels(None, true), "llama-cpp-sys-2 turns it off on Android");
    }

    #[test]
    fn a_build_with_llamafile_s_kernels_is_refused_with_the_fix() {
        for setting in [None, Some("ON")] {
            let Err(LoadError::EngineStart { step, reason }) = check_build(setting, false) else {
                panic!("{setting:?} started");
            };
            assert_eq!(step, "check how llama.cpp was built");
            assert!(
                reason.contains("GGML_LLAMAFILE=OFF") && reason.contains("cargo clean -p llama-cpp-sys-2"),
                "{reason}"
            );
        }
    }

    /// The workspace's `.cargo/config.toml` sets it: losing that line fails here, not only in the answers.
    #[test]
    fn this_workspace_builds_llama_cpp_without_llamafile_s_kernels() {
        assert_eq!(LLAMAFILE_SETTING, Some("OFF"));
        assert!(check_build(LLAMAFILE_SETTING, false).is_ok());
    }
}
