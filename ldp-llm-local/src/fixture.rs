//! Tiny GGUF models whose answers are known in advance, for tests of the layers above (feature `fixture`).
//!
//! A fixture model is a real llama-architecture GGUF file, loaded by the same code as any other, with weights
//! chosen so that its behaviour is a fact, not a sample: the attention and MLP blocks are zero, so every position
//! carries the same state, and the output matrix decides which tokens win. Its vocabulary is the 256 byte-level
//! tokens (no merges: a text of n bytes is n tokens) and three control tokens, `<|endoftext|>`, `<|im_start|>`
//! and `<|im_end|>` (the end-of-sequence token).

use std::path::Path;

use candle_core::quantized::gguf_file::{self, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};

use crate::LoadError;

/// The width of a fixture model's state.
const WIDTH: usize = 8;
/// Byte tokens, then the three control tokens.
const VOCAB: usize = 259;
/// The id of `<|im_start|>` (also the beginning-of-sequence token).
pub const IM_START: u32 = 257;
/// The id of `<|im_end|>`, the end-of-sequence token.
pub const IM_END: u32 = 258;

/// What a fixture model answers.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Behaviour {
    /// Repeats the byte forever (until `max_tokens` or the context window).
    Repeat(u8),
    /// Ends its answer at once (an empty answer).
    Silent,
    /// Chooses among these bytes with equal probability at each step (greedy sampling takes the first).
    Uniform(Vec<u8>),
}

/// A fixture model's file-level settings.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Fixture {
    /// What it answers.
    pub behaviour: Behaviour,
    /// Its `llama.context_length`.
    pub context_length: u32,
    /// Its `tokenizer.chat_template` (none: the backend's ChatML default).
    pub chat_template: Option<String>,
    /// Its `general.name`.
    pub name: String,
}

impl Fixture {
    /// A fixture model with `behaviour`, a 64-token context and no chat template of its own.
    pub fn new(behaviour: Behaviour) -> Self {
        Self { behaviour, context_length: 64, chat_template: None, name: "fixture".into() }
    }
}

/// GPT-2's byte-level alphabet: the printable bytes stand for themselves, the others for code points from U+0100.
fn byte_token(byte: u8) -> String {
    let printable = |b: u8| (b'!'..=b'~').contains(&b) || (0xA1..=0xAC).contains(&b) || (0xAE..=0xFF).contains(&b);
    if printable(byte) {
        return char::from(byte).to_string();
    }
    let offset = (0..byte).filter(|b| !printable(*b)).count() as u32;
    char::from_u32(0x100 + offset).map(String::from).unwrap_or_default()
}

fn tensor(rows: usize, cols: usize, fill: impl Fn(usize, usize) -> f32) -> Result<QTensor, candle_core::Error> {
    let data: Vec<f32> = (0..rows * cols).map(|i| fill(i / cols, i % cols)).collect();
    let t = if rows == 1 {
        Tensor::from_vec(data, cols, &Device::Cpu)?
    } else {
        Tensor::from_vec(data, (rows, cols), &Device::Cpu)?
    };
    QTensor::quantize(&t, GgmlDType::F32)
}

/// Writes the fixture model to `path`.
pub fn write(path: impl AsRef<Path>, fixture: &Fixture) -> Result<(), LoadError> {
    let gguf = |e: candle_core::Error| LoadError::Gguf(e.to_string());
    let mut tokens: Vec<Value> = (0..=255u8).map(|b| Value::String(byte_token(b))).collect();
    tokens.extend(["<|endoftext|>", "<|im_start|>", "<|im_end|>"].map(|t| Value::String(t.into())));
    let mut types: Vec<Value> = vec![Value::I32(1); 256];
    types.extend([Value::I32(3), Value::I32(3), Value::I32(3)]);
    let (winners, eos_weight): (Vec<u8>, f32) = match &fixture.behaviour {
        Behaviour::Repeat(b) => (vec![*b], -4.0),
        Behaviour::Silent => (Vec::new(), 4.0),
        Behaviour::Uniform(bytes) => (bytes.clone(), -4.0),
    };
    let output = tensor(VOCAB, WIDTH, |row, _| {
        if row == IM_END as usize {
            eos_weight
        } else if winners.iter().any(|b| usize::from(*b) == row) {
            2.0
        } else {
            0.0
        }
    })
    .map_err(gguf)?;
    let ones = |n| tensor(1, n, |_, _| 1.0);
    let zeros = |r, c| tensor(r, c, |_, _| 0.0);
    let mut named: Vec<(String, QTensor)> = vec![
        ("token_embd.weight".into(), tensor(VOCAB, WIDTH, |_, _| 1.0).map_err(gguf)?),
        ("output_norm.weight".into(), ones(WIDTH).map_err(gguf)?),
        ("output.weight".into(), output),
    ];
    let head_dim = WIDTH / 2;
    for (name, q) in [
        ("attn_norm", ones(WIDTH)),
        ("ffn_norm", ones(WIDTH)),
        ("attn_q", zeros(WIDTH, WIDTH)),
        ("attn_k", zeros(head_dim, WIDTH)),
        ("attn_v", zeros(head_dim, WIDTH)),
        ("attn_output", zeros(WIDTH, WIDTH)),
        ("ffn_gate", zeros(2 * WIDTH, WIDTH)),
        ("ffn_up", zeros(2 * WIDTH, WIDTH)),
        ("ffn_down", zeros(WIDTH, 2 * WIDTH)),
    ] {
        named.push((format!("blk.0.{name}.weight"), q.map_err(gguf)?));
    }
    let mut metadata: Vec<(&str, Value)> = vec![
        ("general.architecture", Value::String("llama".into())),
        ("general.name", Value::String(fixture.name.clone())),
        ("llama.context_length", Value::U32(fixture.context_length)),
        ("llama.embedding_length", Value::U32(WIDTH as u32)),
        ("llama.block_count", Value::U32(1)),
        ("llama.feed_forward_length", Value::U32(2 * WIDTH as u32)),
        ("llama.attention.head_count", Value::U32(2)),
        ("llama.attention.head_count_kv", Value::U32(1)),
        ("llama.rope.dimension_count", Value::U32(head_dim as u32)),
        ("llama.attention.layer_norm_rms_epsilon", Value::F32(1e-5)),
        ("tokenizer.ggml.model", Value::String("gpt2".into())),
        ("tokenizer.ggml.pre", Value::String("smollm".into())),
        ("tokenizer.ggml.tokens", Value::Array(tokens)),
        ("tokenizer.ggml.token_type", Value::Array(types)),
        ("tokenizer.ggml.merges", Value::Array(Vec::new())),
        ("tokenizer.ggml.bos_token_id", Value::U32(IM_START)),
        ("tokenizer.ggml.eos_token_id", Value::U32(IM_END)),
    ];
    if let Some(template) = &fixture.chat_template {
        metadata.push(("tokenizer.chat_template", Value::String(template.clone())));
    }
    let metadata: Vec<(&str, &Value)> = metadata.iter().map(|(k, v)| (*k, v)).collect();
    let tensors: Vec<(&str, &QTensor)> = named.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let mut file = std::fs::File::create(path)?;
    gguf_file::write(&mut file, &metadata, &tensors).map_err(gguf)
}
