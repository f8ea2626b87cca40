//! The crate's one error type: why a model could not be loaded or a prompt not be built.

/// Why a GGUF model could not be loaded, or a request not be turned into tokens.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The model file could not be read.
    #[error("cannot read the model file: {0}")]
    Io(#[from] std::io::Error),
    /// The file is not a GGUF model candle can load, or its tensors do not match its metadata.
    #[error("not a loadable GGUF model: {0}")]
    Gguf(String),
    /// The architecture is not one this backend runs.
    #[error("unsupported architecture {0:?} (this backend runs the llama family: llama, SmolLM, Mistral, ...)")]
    UnsupportedArchitecture(String),
    /// The tokenizer is not one this backend builds.
    #[error("unsupported tokenizer {0:?} (byte-level BPE, `gpt2`, is supported)")]
    UnsupportedTokenizer(String),
    /// A metadata key the model needs is missing.
    #[error("the model's metadata has no {0}")]
    MissingMetadata(&'static str),
    /// A metadata key holds a value of the wrong type or an impossible value.
    #[error("the model's metadata has an invalid {0}")]
    BadMetadata(&'static str),
    /// The tokenizer could not be built or failed on a text.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// The chat template could not be rendered.
    #[error("chat template: {0}")]
    Template(String),
    /// The options are inconsistent.
    #[error("invalid options: {0}")]
    Options(&'static str),
    /// The engine asked for was not compiled in (the crate's feature of that name).
    #[error("the {0} engine is not built in (feature `{0}` of ldp-llm-local)")]
    EngineMissing(&'static str),
    /// The engine could not start on this file: `step` says what it was doing, `reason` what its library said.
    #[error("the engine failed to {step}: {reason}")]
    EngineStart {
        /// What failed: `load the model`, `create its context`, ...
        step: &'static str,
        /// The engine's own account.
        reason: String,
    },
}
