//! The LLM backend flags of `ldp serve`: which provider, where, which model, and the prompts.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ldp_llm::{
    AnthropicBackend, ApiKey, EchoBackend, HttpOptions, LlmBackend, LlmDelegate, OpenAiBackend, PriceTable,
    PromptTemplate,
};
#[cfg(feature = "local-llm")]
use ldp_llm_local::{LocalBackend, LocalOptions, Precision, Sampling};

/// The provider API a backend speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BackendKind {
    /// OpenAI-compatible Chat Completions (OpenAI, vLLM, llama.cpp's server, Ollama's /v1, LM Studio).
    Openai,
    /// The Anthropic Messages API.
    Anthropic,
    /// No provider: answers with the user's message (for trying the LLM path without a model).
    Echo,
    /// A GGUF model run in this process on the CPU (`--model FILE.gguf`): no server, no network.
    Local,
    /// No model of ours: an MCP server's tools as the skills (`--mcp-command` or `--mcp-url`), with a generated card.
    Mcp,
    /// No model of ours: an A2A agent's skills (`--a2a-url`), with a generated card.
    A2a,
}

impl BackendKind {
    /// Whether this backend is another protocol's server bridged in (no model of ours behind it).
    pub fn is_bridge(self) -> bool {
        matches!(self, Self::Mcp | Self::A2a)
    }
}

/// The answer of a binary built without the embedded model runtime to `--backend local` and `paradox --real`.
#[cfg(not(feature = "local-llm"))]
pub const NO_LOCAL_LLM: &str = "this ldp was built without the `local-llm` feature, which runs GGUF models in process; \
     build it with its default features (`cargo install ldp-cli`)";

/// How `--backend local` widens the weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PrecisionArg {
    /// Weights widened to f32 at load: exact products, 4 bytes per parameter.
    F32,
    /// Weights as the file stores them, with candle's quantized kernels: least memory.
    Quantized,
}

/// The delegate `ldp serve --backend` builds, and the context window its card announces.
pub struct ServedModel {
    /// The delegate.
    pub delegate: LlmDelegate,
    /// The model's context window, in tokens.
    pub context_window: u64,
}

/// The LLM flags of `ldp serve`. Without --backend, `ldp serve` serves the echo delegate of the reference SDKs.
#[derive(Debug, clap::Args)]
pub struct LlmArgs {
    /// Serve a language model through this provider API.
    #[arg(long, value_enum, requires_ifs = [("openai", "model"), ("anthropic", "model"), ("local", "model"), ("mcp", "mcp_server"), ("a2a", "a2a_url")])]
    pub backend: Option<BackendKind>,
    /// The provider's base URL [default: `https://api.openai.com/v1` (openai: with the API version, as OpenAI's
    /// SDKs take it), `https://api.anthropic.com` (anthropic)].
    #[arg(long, value_name = "URL", requires = "backend")]
    pub base_url: Option<String>,
    /// The model name sent to the provider; it is the card's model_version. With `--backend local`, the GGUF
    /// file to run.
    #[arg(long, value_name = "NAME|FILE", requires = "backend")]
    pub model: Option<String>,
    /// The environment variable holding the API key (never printed) [default: OPENAI_API_KEY or ANTHROPIC_API_KEY
    /// when set; none for a local server].
    #[arg(long, value_name = "VAR", requires = "backend")]
    pub api_key_env: Option<String>,
    /// A file whose text is the system prompt.
    #[arg(long, value_name = "FILE", requires = "backend")]
    pub system_prompt: Option<PathBuf>,
    /// A skill (repeatable) [default: `chat`]: NAME passes the input as it is; NAME=FILE uses FILE as a prompt
    /// template where `{{input}}` stands for the input.
    #[arg(long = "skill", value_name = "NAME[=TEMPLATE_FILE]", requires = "backend")]
    pub skills: Vec<String>,
    /// The model's context window, in tokens, for the identity card [default: 8192 openai, 200000 anthropic,
    /// 4096 echo].
    #[arg(long, value_name = "TOKENS", requires = "backend")]
    pub context_window: Option<u64>,
    /// The most tokens an answer may have (a contract's budget may lower it); anthropic requires one [default:
    /// none for openai, 1024 for anthropic].
    #[arg(long, value_name = "TOKENS", requires = "backend")]
    pub max_tokens: Option<u64>,
    /// Ask for whole answers instead of streams (budgets are then checked after the answer, not during it).
    #[arg(long, requires = "backend")]
    pub no_stream: bool,
    /// A JSON price table, `{"model": {"input_per_mtok": 3.0, "output_per_mtok": 15.0}}`, that gives `cost_usd`.
    #[arg(long, value_name = "FILE", requires = "backend")]
    pub prices: Option<PathBuf>,
    /// Longest wait for the provider (to a whole answer, or to a stream's first byte, and between its pieces).
    #[arg(long, value_name = "SECS", default_value_t = 120, requires = "backend")]
    pub llm_timeout: u64,
    /// Retries after a provider 5xx, timeout or connection failure.
    #[arg(long, value_name = "N", default_value_t = 2, requires = "backend")]
    pub llm_retries: u32,
    /// `--backend local`: sample at this temperature instead of always taking the most likely token.
    #[arg(long, value_name = "T", requires = "backend")]
    pub temperature: Option<f64>,
    /// `--backend local`: nucleus sampling cut-off in (0, 1] (with --temperature).
    #[arg(long, value_name = "P", requires = "temperature")]
    pub top_p: Option<f64>,
    /// `--backend local`: the sampling seed (with --temperature): the same seed, the same answers.
    #[arg(long, value_name = "N", default_value_t = 1, requires = "backend")]
    pub seed: u64,
    /// `--backend local`: divide the probability of tokens already in the answer (1.0: off).
    #[arg(long, value_name = "X", default_value_t = 1.0, requires = "backend")]
    pub repeat_penalty: f32,
    /// `--backend local`: answers generated at once; more tasks wait their turn.
    #[arg(long, value_name = "N", default_value_t = 1, requires = "backend")]
    pub max_concurrent: usize,
    /// `--backend local`: the arithmetic of the model's matrix products.
    #[arg(long, value_enum, default_value_t = PrecisionArg::F32, requires = "backend")]
    pub precision: PrecisionArg,
}

impl LlmArgs {
    /// The context window for the card of a provider backend.
    fn provider_context_window(&self) -> u64 {
        self.context_window.unwrap_or(match self.backend {
            Some(BackendKind::Anthropic) => 200_000,
            Some(BackendKind::Echo | BackendKind::Local | BackendKind::Mcp | BackendKind::A2a) | None => 4096,
            Some(BackendKind::Openai) => 8192,
        })
    }

    #[cfg(feature = "local-llm")]
    fn local(&self) -> Result<LocalBackend, String> {
        let path = self.model.as_deref().unwrap_or_default();
        let mut options = LocalOptions::default();
        options.context_window = self.context_window.map(|n| usize::try_from(n).unwrap_or(usize::MAX));
        options.default_max_tokens = self.max_tokens.map_or(512, |n| usize::try_from(n).unwrap_or(usize::MAX));
        if let Some(temperature) = self.temperature {
            options.sampling = Sampling::Temperature { temperature, top_p: self.top_p, seed: self.seed };
        }
        options.repeat_penalty = self.repeat_penalty;
        options.max_concurrent = self.max_concurrent;
        options.precision = match self.precision {
            PrecisionArg::F32 => Precision::F32,
            PrecisionArg::Quantized => Precision::Quantized,
        };
        LocalBackend::load(path, options).map_err(|e| format!("--model {path}: {e}"))
    }

    fn key(&self, default_var: &str) -> Result<Option<ApiKey>, String> {
        match &self.api_key_env {
            Some(var) => ApiKey::from_env(var).map(Some).map_err(|e| format!("--api-key-env: {e}")),
            None => Ok(ApiKey::from_env(default_var).ok()),
        }
    }

    /// The delegate the flags describe, if --backend is given (a local model is loaded here: seconds).
    pub fn delegate(&self) -> Result<Option<ServedModel>, String> {
        // A bridged server is no model: `ldp serve` starts or discovers it itself (`serve_bridges::Bridged`).
        let Some(kind) = self.backend.filter(|k| !k.is_bridge()) else { return Ok(None) };
        #[cfg_attr(not(feature = "local-llm"), allow(unused_mut))] // Only a local model knows its own window.
        let mut context_window = self.provider_context_window();
        let mut opts = HttpOptions::default();
        opts.request_timeout = Duration::from_secs(self.llm_timeout.max(1));
        opts.idle_timeout = opts.request_timeout;
        opts.max_retries = self.llm_retries;
        let model = self.model.clone().unwrap_or_default();
        let backend: Arc<dyn LlmBackend> = match kind {
            BackendKind::Openai => {
                let url = self.base_url.as_deref().unwrap_or("https://api.openai.com/v1");
                Arc::new(OpenAiBackend::new(url, model, self.key("OPENAI_API_KEY")?, opts).map_err(|e| e.to_string())?)
            }
            BackendKind::Anthropic => {
                let url = self.base_url.as_deref().unwrap_or("https://api.anthropic.com");
                let max = self.max_tokens.unwrap_or(1024);
                let key = self.key("ANTHROPIC_API_KEY")?;
                Arc::new(AnthropicBackend::new(url, model, key, max, opts).map_err(|e| e.to_string())?)
            }
            BackendKind::Echo | BackendKind::Mcp | BackendKind::A2a => Arc::new(EchoBackend),
            #[cfg(feature = "local-llm")]
            BackendKind::Local => {
                let local = self.local()?;
                context_window = local.context_window() as u64;
                Arc::new(local)
            }
            #[cfg(not(feature = "local-llm"))]
            BackendKind::Local => return Err(NO_LOCAL_LLM.to_owned()),
        };
        let mut delegate = LlmDelegate::new(backend).with_streaming(!self.no_stream);
        if let Some(path) = &self.system_prompt {
            let text = std::fs::read_to_string(path).map_err(|e| format!("--system-prompt {}: {e}", path.display()))?;
            delegate = delegate.with_system_prompt(text.trim_end());
        }
        if !self.skills.is_empty() {
            let mut skills = Vec::new();
            for arg in &self.skills {
                let (name, template) = match arg.split_once('=') {
                    Some((name, file)) => {
                        let text = std::fs::read_to_string(file).map_err(|e| format!("--skill {name}: {file}: {e}"))?;
                        (name, PromptTemplate::new(text))
                    }
                    None => (arg.as_str(), PromptTemplate::identity()),
                };
                if name.is_empty() || name.chars().any(char::is_whitespace) {
                    return Err(format!("--skill {arg:?}: a skill name is one word"));
                }
                skills.push((name.to_owned(), template));
            }
            delegate = delegate.with_skills(skills);
        }
        if let Some(max) = self.max_tokens {
            delegate = delegate.with_max_tokens(max);
        }
        if let Some(path) = &self.prices {
            let text = std::fs::read_to_string(path).map_err(|e| format!("--prices {}: {e}", path.display()))?;
            delegate = delegate.with_prices(PriceTable::from_json(&text).map_err(|e| format!("--prices: {e}"))?);
        }
        Ok(Some(ServedModel { delegate, context_window }))
    }
}
