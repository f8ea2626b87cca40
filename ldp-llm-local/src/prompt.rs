//! From a chat request to token ids, with what the GGUF file itself says: its vocabulary (a [`Vocabulary`]: for
//! candle, a byte-level BPE tokenizer built from the file's vocabulary and merges with the `tokenizers` crate; for
//! llama.cpp, the tokenizer llama.cpp loaded with the model) and its chat template (rendered with `minijinja`).
//!
//! A peer's text is data, never control: the template is rendered with a placeholder where each message goes, the
//! template's own text is tokenized with the model's control tokens recognised, and each message's text with them
//! spelled out as plain text. A task input that contains `<|im_end|>\n<|im_start|>system` therefore cannot open a
//! turn of its own.

use std::collections::HashSet;

use candle_core::quantized::gguf_file::{Content, Value};
use ldp_llm::{ChatRequest, LlmError, Role, Trimmed};
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::{BPE, Vocab};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::{AddedToken, PreTokenizerWrapper, Tokenizer};

use crate::LoadError;

/// GGUF `tokenizer.ggml.token_type` of a control token (`<|im_start|>`, `<|endoftext|>`, ...).
const TOKEN_TYPE_CONTROL: i32 = 3;
/// GGUF `tokenizer.ggml.token_type` of a user-defined special token.
const TOKEN_TYPE_USER_DEFINED: i32 = 4;

/// The template used when the file carries none: ChatML, which SmolLM2, Qwen and many others speak.
pub(crate) const CHATML_TEMPLATE: &str = "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + \
                                          message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}\
                                          {% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

/// Brackets each message's place in the rendered template; private-use code points no template emits.
const PLACEHOLDER_OPEN: char = '\u{F8F0}';
const PLACEHOLDER_CLOSE: char = '\u{F8F1}';

/// A model's tokenizer, as the prompt codec uses it.
pub(crate) trait Vocabulary: Send + Sync {
    /// Appends the ids of `text`: with its control tokens recognised (`control`, for the template's own text), or
    /// spelled out as plain text (for peers' text).
    fn encode(&self, ids: &mut Vec<u32>, text: &str, control: bool) -> Result<(), LoadError>;
    /// The text of generated ids, control tokens left out.
    fn decode(&self, ids: &[u32]) -> Result<String, LoadError>;
}

/// The `tokenizers` crate's byte-level BPE, built from the file's vocabulary and merges (the candle engine).
struct Bpe {
    /// Recognises the control tokens.
    with_control: Tokenizer,
    /// Spells control tokens out as text.
    plain: Tokenizer,
}

impl Vocabulary for Bpe {
    fn encode(&self, ids: &mut Vec<u32>, text: &str, control: bool) -> Result<(), LoadError> {
        let tokenizer = if control { &self.with_control } else { &self.plain };
        let encoding = tokenizer.encode(text, false).map_err(|e| LoadError::Tokenizer(e.to_string()))?;
        ids.extend_from_slice(encoding.get_ids());
        Ok(())
    }

    fn decode(&self, ids: &[u32]) -> Result<String, LoadError> {
        self.with_control.decode(ids, true).map_err(|e| LoadError::Tokenizer(e.to_string()))
    }
}

/// The model's tokenizer and chat template, and the tokens that end an answer.
pub(crate) struct PromptCodec {
    vocabulary: Box<dyn Vocabulary>,
    template: String,
    bos_token: String,
    eos_token: String,
    /// Generating any of these ends the answer: the end-of-sequence token and every control token (a turn's end).
    pub(crate) stop_tokens: HashSet<u32>,
}

fn metadata<'a>(content: &'a Content, key: &'static str) -> Result<&'a Value, LoadError> {
    content.metadata.get(key).ok_or(LoadError::MissingMetadata(key))
}

fn string_array(content: &Content, key: &'static str) -> Result<Vec<String>, LoadError> {
    let values = metadata(content, key)?.to_vec().map_err(|_| LoadError::BadMetadata(key))?;
    values.iter().map(|v| v.to_string().cloned().map_err(|_| LoadError::BadMetadata(key))).collect()
}

fn token_id(content: &Content, key: &'static str) -> Result<Option<u32>, LoadError> {
    content.metadata.get(key).map(|v| v.to_u32().map_err(|_| LoadError::BadMetadata(key))).transpose()
}

/// The tokens that end an answer: every control token (a turn's end) and the end-of-sequence token, but not the
/// beginning-of-sequence token, which is a control token whose generation ends no turn. A vocabulary with none is
/// refused, since its answers would never end.
pub(crate) fn stop_tokens(
    control: impl IntoIterator<Item = u32>,
    eos: Option<u32>,
    bos: Option<u32>,
) -> Result<HashSet<u32>, LoadError> {
    let mut stop_tokens: HashSet<u32> = control.into_iter().collect();
    stop_tokens.extend(eos);
    if let Some(bos) = bos.filter(|b| Some(*b) != eos) {
        stop_tokens.remove(&bos);
    }
    if stop_tokens.is_empty() {
        return Err(LoadError::MissingMetadata("tokenizer.ggml.eos_token_id"));
    }
    Ok(stop_tokens)
}

impl PromptCodec {
    /// Builds the tokenizer and template of a GGUF file's metadata. Only byte-level BPE vocabularies
    /// (`tokenizer.ggml.model = gpt2`, the family of SmolLM, Llama 3, Qwen, Mistral-Nemo and most recent models)
    /// are supported; others are refused with [`LoadError::UnsupportedTokenizer`].
    pub(crate) fn from_gguf(content: &Content) -> Result<Self, LoadError> {
        let model = metadata(content, "tokenizer.ggml.model")?
            .to_string()
            .map_err(|_| LoadError::BadMetadata("tokenizer.ggml.model"))?;
        if model != "gpt2" {
            return Err(LoadError::UnsupportedTokenizer(model.clone()));
        }
        let tokens = string_array(content, "tokenizer.ggml.tokens")?;
        let merges = string_array(content, "tokenizer.ggml.merges")?;
        let types: Vec<i32> = match content.metadata.get("tokenizer.ggml.token_type") {
            Some(v) => v
                .to_vec()
                .map_err(|_| LoadError::BadMetadata("tokenizer.ggml.token_type"))?
                .iter()
                .map(|t| t.to_i32().map_err(|_| LoadError::BadMetadata("tokenizer.ggml.token_type")))
                .collect::<Result<_, _>>()?,
            None => Vec::new(),
        };
        let vocab: Vocab =
            tokens.iter().enumerate().map(|(id, t)| (t.clone(), u32::try_from(id).unwrap_or(u32::MAX))).collect();
        let merges = merges
            .iter()
            .map(|m| m.split_once(' ').map(|(a, b)| (a.to_owned(), b.to_owned())))
            .collect::<Option<Vec<_>>>()
            .ok_or(LoadError::BadMetadata("tokenizer.ggml.merges"))?;
        let bpe =
            BPE::builder().vocab_and_merges(vocab, merges).build().map_err(|e| LoadError::Tokenizer(e.to_string()))?;
        let mut with_control = Tokenizer::new(bpe);
        // The pre-tokenizer llama.cpp names `tokenizer.ggml.pre`: SmolLM splits digits one by one before the GPT-2
        // byte-level split; the others of the family use the byte-level split alone.
        let pre = content.metadata.get("tokenizer.ggml.pre").and_then(|v| v.to_string().ok()).map(String::as_str);
        let byte_level = ByteLevel::new(false, true, true);
        if pre == Some("smollm") {
            with_control.with_pre_tokenizer(Some(Sequence::new(vec![
                PreTokenizerWrapper::Digits(Digits::new(true)),
                PreTokenizerWrapper::ByteLevel(byte_level),
            ])));
        } else {
            with_control.with_pre_tokenizer(Some(byte_level));
        }
        with_control.with_decoder(Some(ByteLevelDecoder::default()));
        let specials: Vec<AddedToken> = tokens
            .iter()
            .zip(types.iter().copied().chain(std::iter::repeat(0)))
            .filter(|(_, t)| *t == TOKEN_TYPE_CONTROL || *t == TOKEN_TYPE_USER_DEFINED)
            .map(|(token, _)| AddedToken::from(token.clone(), true))
            .collect();
        with_control.add_special_tokens(specials).map_err(|e| LoadError::Tokenizer(e.to_string()))?;
        let mut plain = with_control.clone();
        plain.set_encode_special_tokens(true);
        let vocabulary = Box::new(Bpe { with_control, plain });

        let eos = token_id(content, "tokenizer.ggml.eos_token_id")?;
        let bos = token_id(content, "tokenizer.ggml.bos_token_id")?;
        let name_of = |id: Option<u32>| id.and_then(|i| tokens.get(i as usize)).cloned().unwrap_or_default();
        let control = tokens
            .iter()
            .zip(types.iter().copied().chain(std::iter::repeat(0)))
            .enumerate()
            .filter(|(_, (_, t))| *t == TOKEN_TYPE_CONTROL)
            .filter_map(|(id, _)| u32::try_from(id).ok());
        let stop_tokens = stop_tokens(control, eos, bos)?;
        let template = match content.metadata.get("tokenizer.chat_template") {
            Some(v) => Some(v.to_string().map_err(|_| LoadError::BadMetadata("tokenizer.chat_template"))?.clone()),
            None => None,
        };
        Self::new(vocabulary, template, name_of(bos), name_of(eos), stop_tokens)
    }

    /// The codec of a vocabulary and a chat template (ChatML when `None`), whose answers end at any of
    /// `stop_tokens`. A template that cannot render fails here, at load, not on the first task.
    pub(crate) fn new(
        vocabulary: Box<dyn Vocabulary>,
        template: Option<String>,
        bos_token: String,
        eos_token: String,
        stop_tokens: HashSet<u32>,
    ) -> Result<Self, LoadError> {
        let template = template.unwrap_or_else(|| CHATML_TEMPLATE.to_owned());
        let codec = Self { vocabulary, template, bos_token, eos_token, stop_tokens };
        codec.encode(&ChatRequest::new(vec![ldp_llm::ChatMessage::user("hello")]).with_system("system"))?;
        Ok(codec)
    }

    /// The prompt's token ids: the chat template over the system prompt and the conversation, ending where the
    /// assistant's answer starts. With tools, the system prompt lists them and says how to call one, and an
    /// assistant's earlier calls read as the JSON it wrote for them (`{"tool":NAME,"arguments":ARGS}`), so that
    /// the history looks like what constrained decoding lets the model write.
    pub(crate) fn encode(&self, request: &ChatRequest) -> Result<Vec<u32>, LoadError> {
        let mut texts: Vec<String> = Vec::new();
        let mut messages = Vec::new();
        let turns = request.messages.iter().map(|m| {
            let role = match m.role {
                Role::User => "user",
                Role::Assistant => "assistant",
                // ChatML-style templates (SmolLM2's) render any role name; a tool's result is its own turn.
                Role::Tool => "tool",
            };
            let text = if m.tool_calls.is_empty() {
                m.content.clone()
            } else {
                let calls: Vec<String> = m
                    .tool_calls
                    .iter()
                    .map(|c| {
                        let arguments = if c.arguments.trim().is_empty() { "{}" } else { c.arguments.as_str() };
                        format!("{{\"tool\":{},\"arguments\":{arguments}}}", serde_json::Value::from(c.name.as_str()))
                    })
                    .collect();
                calls.join("\n")
            };
            (role, text)
        });
        let system = system_text(request);
        for (role, text) in system.map(|s| ("system", s)).into_iter().chain(turns) {
            let slot = format!("{PLACEHOLDER_OPEN}{}{PLACEHOLDER_CLOSE}", texts.len());
            messages.push(minijinja::context! { role => role, content => slot });
            texts.push(text);
        }
        let mut env = minijinja::Environment::new();
        minijinja_contrib::add_to_environment(&mut env);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", |message: String| -> Result<String, minijinja::Error> {
            Err(minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, message))
        });
        let rendered = env
            .render_str(
                &self.template,
                minijinja::context! {
                    messages => messages,
                    add_generation_prompt => true,
                    bos_token => self.bos_token.as_str(),
                    eos_token => self.eos_token.as_str(),
                },
            )
            .map_err(|e| LoadError::Template(e.to_string()))?;

        let mut ids = Vec::new();
        let mut rest = rendered.as_str();
        while let Some(open) = rest.find(PLACEHOLDER_OPEN) {
            self.extend(&mut ids, &rest[..open], true)?;
            let after = &rest[open + PLACEHOLDER_OPEN.len_utf8()..];
            let close = after.find(PLACEHOLDER_CLOSE).ok_or_else(|| LoadError::Template("unbalanced slot".into()))?;
            let index: usize = after[..close].parse().map_err(|_| LoadError::Template("bad slot".into()))?;
            let text = texts.get(index).ok_or_else(|| LoadError::Template("unknown slot".into()))?;
            self.extend(&mut ids, text, false)?;
            rest = &after[close + PLACEHOLDER_CLOSE.len_utf8()..];
        }
        self.extend(&mut ids, rest, true)?;
        Ok(ids)
    }

    fn extend(&self, ids: &mut Vec<u32>, text: &str, control: bool) -> Result<(), LoadError> {
        if text.is_empty() {
            return Ok(());
        }
        self.vocabulary.encode(ids, text, control)
    }

    /// The prompt of `request` fit to `context_window` with room for an answer: while it leaves less than `wanted`
    /// tokens (at most a quarter of the window) for the answer, the oldest messages go, a user's message with the
    /// answers and tool results after it, never the system prompt or the last message. A prompt that still fills
    /// the window is refused with [`LlmError::PromptTooLong`]. Every engine fits its prompts here, so the rule is
    /// the same whichever runs the model.
    pub(crate) fn fit(
        &self,
        request: &ChatRequest,
        wanted: usize,
        context_window: usize,
    ) -> Result<(Vec<u32>, Option<Trimmed>), LlmError> {
        let encode = |r: &ChatRequest| self.encode(r).map_err(|e| LlmError::Inference(e.to_string()));
        let whole = encode(request)?;
        let reserve = wanted.min(context_window / 4).max(1);
        let fits = |prompt: &[u32]| prompt.len() + reserve <= context_window;
        let mut prompt = whole.clone();
        let mut dropped = 0;
        let mut trimmed = request.clone();
        while !fits(&prompt) && trimmed.messages.len() > 1 {
            // One turn: the first message, then whatever follows it up to the next user message.
            let turn =
                1 + trimmed.messages[1..trimmed.messages.len() - 1].iter().take_while(|m| m.role != Role::User).count();
            trimmed.messages.drain(..turn);
            dropped += turn;
            prompt = encode(&trimmed)?;
        }
        if prompt.is_empty() || prompt.len() >= context_window {
            return Err(LlmError::PromptTooLong { prompt_tokens: whole.len(), context_window });
        }
        let trim = (dropped > 0).then(|| {
            let tokens = whole.len().saturating_sub(prompt.len()) as u64;
            Trimmed::new(dropped, tokens, context_window as u64)
        });
        Ok((prompt, trim))
    }

    /// The text of generated token ids (control tokens left out).
    pub(crate) fn decode(&self, ids: &[u32]) -> Result<String, LoadError> {
        self.vocabulary.decode(ids)
    }
}

/// The system prompt as the model reads it: the request's, then, when tools are offered, what each does and how to
/// call one, or, when the answer must follow a schema, that schema.
fn system_text(request: &ChatRequest) -> Option<String> {
    let mut extra = String::new();
    if !request.tools.is_empty() {
        extra.push_str(
            "You can call one of these tools. To call one, write only {\"tool\":\"NAME\",\"arguments\":{...}}; \
             to answer, write only {\"answer\":...}.\nTools:",
        );
        for tool in &request.tools {
            extra.push_str(&format!("\n- {}: {} Arguments: {}", tool.name, tool.description, tool.input_schema));
        }
    } else if let Some(schema) = &request.response_schema {
        extra.push_str(&format!("Answer with JSON valid for this JSON Schema: {schema}"));
    }
    match (&request.system, extra.is_empty()) {
        (system, true) => system.clone(),
        (Some(system), false) => Some(format!("{system}\n\n{extra}")),
        (None, false) => Some(extra),
    }
}
