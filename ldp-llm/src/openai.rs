//! The OpenAI-compatible Chat Completions API (`POST {base}/chat/completions`), plain and streamed.
//!
//! Wire format as OpenAI documents it: a request of `model`, `messages` (`system`, `user`, `assistant` roles),
//! `max_tokens`, `stream` and `stream_options.include_usage`; an answer whose `choices[0].message.content` is the
//! text, with `model` and `usage.prompt_tokens`/`completion_tokens`; a stream of `data:` events each holding a
//! `chat.completion.chunk` (`choices[0].delta.content`, `finish_reason`), a last chunk with empty `choices` and the
//! `usage`, then `data: [DONE]`. Errors are `{"error": {"message": ...}}`.

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::backend::{BackendInfo, ChatRequest, ChatResponse, FinishReason, LlmBackend, OnDelta, StreamControl, Usage};
use crate::http::{self, Events, HttpOptions};
use crate::{ApiKey, LlmError};

/// A backend for the OpenAI-compatible Chat Completions API: OpenAI, vLLM, llama.cpp's server, Ollama's `/v1`,
/// LM Studio.
#[derive(Debug, Clone)]
pub struct OpenAiBackend {
    base_url: String,
    model: String,
    key: Option<ApiKey>,
    opts: HttpOptions,
    client: reqwest::Client,
}

impl OpenAiBackend {
    /// A backend for `model` at `base_url`, which includes the API version as the OpenAI SDKs expect
    /// (`https://api.openai.com/v1`, `http://127.0.0.1:8080/v1`); the key, when given, goes in
    /// `Authorization: Bearer`.
    pub fn new(
        base_url: impl Into<String>,
        model: impl Into<String>,
        key: Option<ApiKey>,
        opts: HttpOptions,
    ) -> Result<Self, LlmError> {
        let client = http::client(&opts)?;
        let base_url = http::base_url(base_url.into())?;
        Ok(Self { base_url, model: model.into(), key, opts, client })
    }

    fn body(&self, request: &ChatRequest, stream: bool) -> Value {
        let mut messages = Vec::with_capacity(request.messages.len() + 1);
        if let Some(system) = &request.system {
            messages.push(json!({"role": "system", "content": system}));
        }
        messages.extend(request.messages.iter().map(|m| json!({"role": m.role, "content": m.content})));
        let mut body = json!({"model": self.model, "messages": messages, "stream": stream});
        if let Some(max) = request.max_tokens {
            body["max_tokens"] = json!(max);
        }
        if stream {
            body["stream_options"] = json!({"include_usage": true});
        }
        body
    }

    async fn post(&self, body: &Value) -> Result<reqwest::Response, LlmError> {
        let url = format!("{}/chat/completions", self.base_url);
        let build = || {
            let req = self.client.post(&url).json(body);
            match &self.key {
                Some(key) => req.bearer_auth(key.expose()),
                None => req,
            }
        };
        http::send(&self.opts, self.key.as_ref(), build, error_message).await
    }
}

/// The message of an OpenAI error body.
fn error_message(body: &[u8]) -> Option<String> {
    let v: Value = serde_json::from_slice(body).ok()?;
    v.pointer("/error/message").and_then(Value::as_str).map(str::to_owned)
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
}

impl From<WireUsage> for Usage {
    fn from(u: WireUsage) -> Self {
        Self { input_tokens: u.prompt_tokens, output_tokens: u.completion_tokens }
    }
}

#[derive(Deserialize)]
struct Completion {
    #[serde(default)]
    model: Option<String>,
    choices: Vec<Choice>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
struct Choice {
    message: Message,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct Message {
    #[serde(default)]
    content: Option<String>,
}

#[derive(Deserialize)]
struct Chunk {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    choices: Vec<ChunkChoice>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct ChunkChoice {
    #[serde(default)]
    delta: Option<Delta>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct Delta {
    #[serde(default)]
    content: Option<String>,
}

fn finish(reason: Option<&str>) -> FinishReason {
    match reason {
        Some("stop") | None => FinishReason::Stop,
        Some("length") => FinishReason::Length,
        Some(other) => FinishReason::Other(other.to_owned()),
    }
}

#[async_trait]
impl LlmBackend for OpenAiBackend {
    fn info(&self) -> BackendInfo {
        BackendInfo { provider: "openai-compatible".into(), model: self.model.clone() }
    }

    async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let resp = self.post(&self.body(request, false)).await?;
        let body = http::read_body(resp, self.opts.max_body, self.opts.request_timeout).await?;
        let completion: Completion =
            serde_json::from_slice(&body).map_err(|e| LlmError::Malformed(format!("not a chat completion: {e}")))?;
        let Some(choice) = completion.choices.into_iter().next() else {
            return Err(LlmError::Malformed("a chat completion with no choices".into()));
        };
        Ok(ChatResponse {
            text: choice.message.content.unwrap_or_default(),
            model: completion.model,
            usage: completion.usage.map(Usage::from).unwrap_or_default(),
            finish: finish(choice.finish_reason.as_deref()),
        })
    }

    async fn stream(&self, request: &ChatRequest, on_delta: &mut OnDelta<'_>) -> Result<ChatResponse, LlmError> {
        let resp = self.post(&self.body(request, true)).await?;
        let mut events = Events::new(resp, &self.opts);
        let mut out =
            ChatResponse { text: String::new(), model: None, usage: Usage::default(), finish: FinishReason::Stop };
        let mut finished = None;
        // Until the provider's usage arrives (in the last chunk), each content piece counts as one generated
        // token: servers send one token per chunk, so the count checked while streaming tracks the real one.
        let mut pieces: u64 = 0;
        loop {
            let Some(event) = events.next().await? else {
                // The stream must end with `[DONE]`; one cut short is not an answer.
                return Err(LlmError::Malformed("the stream ended without [DONE]".into()));
            };
            let data = event.data.trim();
            if data == "[DONE]" {
                break;
            }
            if data.is_empty() {
                continue;
            }
            let chunk: Chunk =
                serde_json::from_str(data).map_err(|e| LlmError::Malformed(format!("not a completion chunk: {e}")))?;
            if let Some(error) = chunk.error {
                let message = error.get("message").and_then(Value::as_str).unwrap_or("an error event");
                let message = http::quote(self.key.as_ref(), message);
                return Err(LlmError::Unavailable { status: 500, attempts: 1, message });
            }
            if out.model.is_none() {
                out.model = chunk.model;
            }
            if let Some(usage) = chunk.usage {
                out.usage = usage.into();
            }
            for choice in chunk.choices {
                if let Some(reason) = choice.finish_reason {
                    finished = Some(reason);
                }
                let Some(text) = choice.delta.and_then(|d| d.content).filter(|t| !t.is_empty()) else { continue };
                out.text.push_str(&text);
                pieces += 1;
                let so_far = Usage { input_tokens: out.usage.input_tokens, output_tokens: Some(pieces) };
                if on_delta(&text, &so_far) == StreamControl::Stop {
                    out.finish = FinishReason::Stopped;
                    out.usage = so_far;
                    return Ok(out);
                }
            }
        }
        out.finish = finish(finished.as_deref());
        Ok(out)
    }
}
