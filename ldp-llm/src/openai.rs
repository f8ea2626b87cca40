//! The OpenAI-compatible Chat Completions API (`POST {base}/chat/completions`), plain and streamed.
//!
//! Wire format as OpenAI documents it: a request of `model`, `messages` (`system`, `user`, `assistant` roles),
//! `max_tokens`, `stream` and `stream_options.include_usage`; an answer whose `choices[0].message.content` is the
//! text, with `model` and `usage.prompt_tokens`/`completion_tokens`; a stream of `data:` events each holding a
//! `chat.completion.chunk` (`choices[0].delta.content`, `finish_reason`), a last chunk with empty `choices` and the
//! `usage`, then `data: [DONE]`. Errors are `{"error": {"message": ...}}`.
//!
//! Tools: `tools` of `{"type": "function", "function": {name, description, parameters}}`; the answer's
//! `message.tool_calls` (`id`, `function.name`, `function.arguments` as JSON text) with finish `tool_calls`; streamed,
//! `delta.tool_calls` pieces keyed by `index`, the id and name in the first, the arguments in several; results go
//! back as `{"role": "tool", "tool_call_id", "content"}` after the assistant message that holds the calls.
//! Sampling: `temperature`, `top_p`, `stop`, `seed`. Structured output: `response_format` of type `json_schema`.

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::backend::{
    BackendInfo, ChatMessage, ChatRequest, ChatResponse, FinishReason, LlmBackend, OnDelta, Role, StreamControl,
    ToolCall, Usage,
};
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
        messages.extend(request.messages.iter().map(wire_message));
        let mut body = json!({"model": self.model, "messages": messages, "stream": stream});
        if let Some(max) = request.max_tokens {
            body["max_tokens"] = json!(max);
        }
        if !request.tools.is_empty() {
            let tools: Vec<Value> = request
                .tools
                .iter()
                .map(|t| {
                    json!({"type": "function",
                           "function": {"name": t.name, "description": t.description, "parameters": t.input_schema}})
                })
                .collect();
            body["tools"] = json!(tools);
        }
        request.sampling.write_common(&mut body, "stop");
        if let Some(seed) = request.sampling.seed {
            body["seed"] = json!(seed);
        }
        if let Some(schema) = &request.response_schema {
            body["response_format"] =
                json!({"type": "json_schema", "json_schema": {"name": "answer", "schema": schema, "strict": true}});
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

/// One history message on the wire: tool calls on the assistant's, the call id on a tool result.
fn wire_message(m: &ChatMessage) -> Value {
    match m.role {
        Role::Tool => json!({"role": "tool", "tool_call_id": m.tool_call_id, "content": m.content}),
        Role::Assistant if !m.tool_calls.is_empty() => {
            let calls: Vec<Value> = m
                .tool_calls
                .iter()
                .map(
                    |c| json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}),
                )
                .collect();
            let content = if m.content.is_empty() { Value::Null } else { json!(m.content) };
            json!({"role": "assistant", "content": content, "tool_calls": calls})
        }
        _ => json!({"role": m.role, "content": m.content}),
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
    #[serde(default)]
    tool_calls: Vec<WireToolCall>,
}

#[derive(Deserialize)]
struct WireToolCall {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: WireFunction,
}

#[derive(Deserialize, Default)]
struct WireFunction {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
}

/// A piece of a streamed tool call: `index` says which call it continues.
#[derive(Deserialize)]
struct ToolCallPiece {
    #[serde(default)]
    index: usize,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: WireFunction,
}

/// The most tool calls one answer may hold: a stream naming call index 10,000 must not grow the client.
const MAX_TOOL_CALLS: usize = 128;

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
    #[serde(default)]
    tool_calls: Vec<ToolCallPiece>,
}

fn finish(reason: Option<&str>) -> FinishReason {
    match reason {
        Some("stop") | None => FinishReason::Stop,
        Some("length") => FinishReason::Length,
        Some("tool_calls" | "function_call") => FinishReason::ToolCalls,
        Some(other) => FinishReason::Other(other.to_owned()),
    }
}

/// Adds a streamed piece to the call it continues (by `index`): the id and name arrive once, the arguments in
/// pieces. Bounded: at most [`MAX_TOOL_CALLS`] calls, and `max_bytes` of arguments in all.
fn assemble(calls: &mut Vec<ToolCall>, piece: ToolCallPiece, max_bytes: usize) -> Result<(), LlmError> {
    if piece.index >= MAX_TOOL_CALLS {
        return Err(LlmError::Malformed(format!("a tool call index of {} (at most {MAX_TOOL_CALLS})", piece.index)));
    }
    while calls.len() <= piece.index {
        let n = calls.len();
        calls.push(ToolCall::new(format!("call_{n}"), "", ""));
    }
    let call = &mut calls[piece.index];
    if let Some(id) = piece.id.filter(|id| !id.is_empty()) {
        call.id = id;
    }
    if let Some(name) = piece.function.name {
        call.name.push_str(&name);
    }
    if let Some(arguments) = piece.function.arguments {
        call.arguments.push_str(&arguments);
    }
    let total: usize = calls.iter().map(|c| c.arguments.len() + c.name.len()).sum();
    if total > max_bytes {
        return Err(LlmError::Malformed(format!("streamed tool calls larger than {max_bytes} bytes")));
    }
    Ok(())
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
        let calls = choice
            .message
            .tool_calls
            .into_iter()
            .take(MAX_TOOL_CALLS)
            .enumerate()
            .map(|(i, c)| {
                let id = c.id.unwrap_or_else(|| format!("call_{i}"));
                ToolCall::new(id, c.function.name.unwrap_or_default(), c.function.arguments.unwrap_or_default())
            })
            .collect();
        Ok(ChatResponse::new(
            choice.message.content.unwrap_or_default(),
            completion.model,
            completion.usage.map(Usage::from).unwrap_or_default(),
            finish(choice.finish_reason.as_deref()),
        )
        .with_tool_calls(calls))
    }

    async fn stream(&self, request: &ChatRequest, on_delta: &mut OnDelta<'_>) -> Result<ChatResponse, LlmError> {
        let resp = self.post(&self.body(request, true)).await?;
        let mut events = Events::new(resp, &self.opts);
        let mut out = ChatResponse::new(String::new(), None, Usage::default(), FinishReason::Stop);
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
                let Some(delta) = choice.delta else { continue };
                for piece in delta.tool_calls {
                    assemble(&mut out.tool_calls, piece, self.opts.max_body)?;
                }
                let Some(text) = delta.content.filter(|t| !t.is_empty()) else { continue };
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

#[cfg(test)]
mod tests {
    use super::*;

    fn piece(index: usize, id: Option<&str>, name: Option<&str>, arguments: Option<&str>) -> ToolCallPiece {
        ToolCallPiece {
            index,
            id: id.map(str::to_owned),
            function: WireFunction { name: name.map(str::to_owned), arguments: arguments.map(str::to_owned) },
        }
    }

    #[test]
    fn streamed_pieces_assemble_by_index_within_bounds() {
        let mut calls = Vec::new();
        assemble(&mut calls, piece(1, Some("b"), Some("fetch"), Some("{\"u\":")), 1024).unwrap();
        assemble(&mut calls, piece(0, Some("a"), Some("search"), Some("{}")), 1024).unwrap();
        assemble(&mut calls, piece(1, None, None, Some("1}")), 1024).unwrap();
        assert_eq!(calls[0], ToolCall::new("a", "search", "{}"));
        assert_eq!(calls[1], ToolCall::new("b", "fetch", "{\"u\":1}"));
        // A far index would make the client hold a call per index up to it.
        assert!(assemble(&mut calls, piece(MAX_TOOL_CALLS, None, Some("x"), None), 1024).is_err());
        // Arguments that never end are cut at the bound.
        let long = "x".repeat(2048);
        assert!(assemble(&mut calls, piece(0, None, None, Some(&long)), 1024).is_err());
    }
}
