//! The Anthropic Messages API (`POST {base}/v1/messages`), plain and streamed.
//!
//! Wire format as Anthropic documents it: headers `x-api-key` and `anthropic-version: 2023-06-01`; a request of
//! `model`, `max_tokens` (required), `system`, `messages` (`user`/`assistant`) and `stream`; an answer whose
//! `content` is a list of blocks (the `text` blocks make the text), with `model`, `stop_reason` and
//! `usage.input_tokens`/`output_tokens`. A stream is named server-sent events: `message_start` (the model and the
//! input usage), `content_block_start`, `content_block_delta` (`text_delta`), `content_block_stop`, `message_delta`
//! (`stop_reason` and the cumulative `output_tokens`), `message_stop`, `ping`, and `error`.
//!
//! Tools: `tools` of `{name, description, input_schema}`; the answer's `tool_use` blocks (`id`, `name`, `input`) with
//! stop reason `tool_use`; streamed, a `content_block_start` of type `tool_use` and `input_json_delta` pieces of its
//! input. Results go back in a user message of `tool_result` blocks. Sampling: `temperature`, `top_p`,
//! `stop_sequences` (the API has no seed). Structured output has no field of its own: the model is made to call one
//! tool, [`ANSWER_TOOL`], whose input schema is the answer's, and that input is the answer.

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::backend::{
    BackendInfo, ChatMessage, ChatRequest, ChatResponse, FinishReason, LlmBackend, OnDelta, Role, StreamControl,
    ToolCall, Usage,
};
use crate::http::{self, Events, HttpOptions};
use crate::{ApiKey, LlmError};

/// The tool a structured answer is asked for by (its input is the answer), when the request has a response schema.
pub const ANSWER_TOOL: &str = "answer";

/// The most tool calls one answer may hold.
const MAX_TOOL_CALLS: usize = 128;

/// The API version this backend speaks.
const ANTHROPIC_VERSION: &str = "2023-06-01";

/// A backend for the Anthropic Messages API.
#[derive(Debug, Clone)]
pub struct AnthropicBackend {
    base_url: String,
    model: String,
    key: Option<ApiKey>,
    default_max_tokens: u64,
    opts: HttpOptions,
    client: reqwest::Client,
}

impl AnthropicBackend {
    /// A backend for `model` at `base_url`, without the API version as the Anthropic SDKs expect
    /// (`https://api.anthropic.com`). The API requires `max_tokens`; requests that set none get
    /// `default_max_tokens`.
    pub fn new(
        base_url: impl Into<String>,
        model: impl Into<String>,
        key: Option<ApiKey>,
        default_max_tokens: u64,
        opts: HttpOptions,
    ) -> Result<Self, LlmError> {
        let client = http::client(&opts)?;
        let base_url = http::base_url(base_url.into())?;
        Ok(Self { base_url, model: model.into(), key, default_max_tokens: default_max_tokens.max(1), opts, client })
    }

    fn body(&self, request: &ChatRequest, stream: bool) -> Value {
        let messages = wire_messages(&request.messages);
        let mut body = json!({
            "model": self.model,
            "max_tokens": request.max_tokens.unwrap_or(self.default_max_tokens),
            "messages": messages,
        });
        if let Some(system) = &request.system {
            body["system"] = json!(system);
        }
        if stream {
            body["stream"] = json!(true);
        }
        let mut tools: Vec<Value> = request
            .tools
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.input_schema}))
            .collect();
        if let Some(schema) = &request.response_schema {
            tools.push(json!({"name": ANSWER_TOOL, "description": "Give the answer.", "input_schema": schema}));
            // With other tools the model may call those first; without, only the answer.
            body["tool_choice"] = if request.tools.is_empty() {
                json!({"type": "tool", "name": ANSWER_TOOL})
            } else {
                json!({"type": "any"})
            };
        }
        if !tools.is_empty() {
            body["tools"] = json!(tools);
        }
        request.sampling.write_common(&mut body, "stop_sequences");
        body
    }

    async fn post(&self, body: &Value) -> Result<reqwest::Response, LlmError> {
        let url = format!("{}/v1/messages", self.base_url);
        let build = || {
            let req = self.client.post(&url).header("anthropic-version", ANTHROPIC_VERSION).json(body);
            match &self.key {
                Some(key) => req.header("x-api-key", key.expose()),
                None => req,
            }
        };
        http::send(&self.opts, self.key.as_ref(), build, error_message).await
    }

    /// The typed error of an `error` event (or an error body): its `error.type` says which.
    fn event_error(&self, v: &Value) -> LlmError {
        let kind = v.pointer("/error/type").and_then(Value::as_str).unwrap_or("error");
        let message = v.pointer("/error/message").and_then(Value::as_str).unwrap_or(kind);
        let message = http::quote(self.key.as_ref(), message);
        match kind {
            "rate_limit_error" => LlmError::RateLimited { retry_after: None, message },
            "overloaded_error" => LlmError::Unavailable { status: 529, attempts: 1, message },
            "authentication_error" => LlmError::Unauthorized { status: 401, message },
            "permission_error" => LlmError::Unauthorized { status: 403, message },
            "invalid_request_error" => LlmError::Rejected { status: 400, message },
            _ => LlmError::Unavailable { status: 500, attempts: 1, message },
        }
    }
}

/// The history on the wire: an assistant's calls as `tool_use` blocks after its text, and each run of tool results
/// as one user message of `tool_result` blocks (the API wants results in the user turn that follows the calls).
fn wire_messages(history: &[ChatMessage]) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::with_capacity(history.len());
    let mut results: Vec<Value> = Vec::new();
    for m in history {
        if m.role == Role::Tool {
            results.push(json!({"type": "tool_result", "tool_use_id": m.tool_call_id, "content": m.content}));
            continue;
        }
        if !results.is_empty() {
            out.push(json!({"role": "user", "content": std::mem::take(&mut results)}));
        }
        if m.role == Role::Assistant && !m.tool_calls.is_empty() {
            let mut blocks = Vec::with_capacity(m.tool_calls.len() + 1);
            if !m.content.is_empty() {
                blocks.push(json!({"type": "text", "text": m.content}));
            }
            for c in &m.tool_calls {
                // The model's own text went out as it was; what the API needs back is an object.
                let input = c.arguments_json().ok().filter(Value::is_object).unwrap_or_else(|| json!({}));
                blocks.push(json!({"type": "tool_use", "id": c.id, "name": c.name, "input": input}));
            }
            out.push(json!({"role": "assistant", "content": blocks}));
        } else {
            out.push(json!({"role": m.role, "content": m.content}));
        }
    }
    if !results.is_empty() {
        out.push(json!({"role": "user", "content": results}));
    }
    out
}

/// With a response schema, the [`ANSWER_TOOL`] call's input is the answer's text, not a call to make.
fn lift_answer(out: &mut ChatResponse, structured: bool) {
    if !structured {
        return;
    }
    if let Some(i) = out.tool_calls.iter().position(|c| c.name == ANSWER_TOOL) {
        let answer = out.tool_calls.remove(i);
        out.text = answer.arguments;
        if out.tool_calls.is_empty() && out.finish == FinishReason::ToolCalls {
            out.finish = FinishReason::Stop;
        }
    }
}

/// The message of an Anthropic error body.
fn error_message(body: &[u8]) -> Option<String> {
    let v: Value = serde_json::from_slice(body).ok()?;
    v.pointer("/error/message").and_then(Value::as_str).map(str::to_owned)
}

#[derive(Deserialize, Default)]
struct WireUsage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct MessageAnswer {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    model: Option<String>,
    content: Vec<Block>,
    #[serde(default)]
    stop_reason: Option<String>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
struct Block {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    input: Option<Value>,
}

#[derive(Deserialize)]
struct StreamEvent {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    message: Option<StartMessage>,
    #[serde(default)]
    delta: Option<Value>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    index: Option<usize>,
    #[serde(default)]
    content_block: Option<Block>,
}

#[derive(Deserialize)]
struct StartMessage {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

fn finish(reason: Option<&str>) -> FinishReason {
    match reason {
        Some("end_turn" | "stop_sequence") | None => FinishReason::Stop,
        Some("max_tokens") => FinishReason::Length,
        Some("tool_use") => FinishReason::ToolCalls,
        Some(other) => FinishReason::Other(other.to_owned()),
    }
}

#[async_trait]
impl LlmBackend for AnthropicBackend {
    fn info(&self) -> BackendInfo {
        BackendInfo { provider: "anthropic".into(), model: self.model.clone() }
    }

    async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let resp = self.post(&self.body(request, false)).await?;
        let body = http::read_body(resp, self.opts.max_body, self.opts.request_timeout).await?;
        let answer: MessageAnswer =
            serde_json::from_slice(&body).map_err(|e| LlmError::Malformed(format!("not a message: {e}")))?;
        if answer.kind != "message" {
            return Err(LlmError::Malformed(format!("an answer of type {:?}, not \"message\"", answer.kind)));
        }
        let text: String =
            answer.content.iter().filter(|b| b.kind == "text").filter_map(|b| b.text.as_deref()).collect();
        let calls = answer
            .content
            .iter()
            .filter(|b| b.kind == "tool_use")
            .take(MAX_TOOL_CALLS)
            .enumerate()
            .map(|(i, b)| {
                let input = b.input.as_ref().map_or_else(|| "{}".to_owned(), Value::to_string);
                ToolCall::new(
                    b.id.clone().unwrap_or_else(|| format!("toolu_{i}")),
                    b.name.clone().unwrap_or_default(),
                    input,
                )
            })
            .collect();
        let usage = answer.usage.unwrap_or_default();
        let mut out = ChatResponse::new(
            text,
            answer.model,
            Usage { input_tokens: usage.input_tokens, output_tokens: usage.output_tokens },
            finish(answer.stop_reason.as_deref()),
        )
        .with_tool_calls(calls);
        lift_answer(&mut out, request.response_schema.is_some());
        Ok(out)
    }

    async fn stream(&self, request: &ChatRequest, on_delta: &mut OnDelta<'_>) -> Result<ChatResponse, LlmError> {
        let resp = self.post(&self.body(request, true)).await?;
        let mut events = Events::new(resp, &self.opts);
        let mut out = ChatResponse::new(String::new(), None, Usage::default(), FinishReason::Stop);
        let mut stop_reason = None;
        let structured = request.response_schema.is_some();
        // Which call each tool_use block (by its index in the content) fills.
        let mut blocks: std::collections::HashMap<usize, usize> = std::collections::HashMap::new();
        // Anthropic reports the output count only in `message_delta` (at the end): until then each text piece
        // counts as one token, so the usage checked while streaming tracks the real one.
        let mut pieces: u64 = 0;
        loop {
            let Some(event) = events.next().await? else {
                return Err(LlmError::Malformed("the stream ended without message_stop".into()));
            };
            if event.data.trim().is_empty() {
                continue;
            }
            let raw: Value = serde_json::from_str(&event.data)
                .map_err(|e| LlmError::Malformed(format!("an event that is not JSON: {e}")))?;
            if event.event == "error" || raw.get("type").and_then(Value::as_str) == Some("error") {
                return Err(self.event_error(&raw));
            }
            let ev: StreamEvent =
                serde_json::from_value(raw).map_err(|e| LlmError::Malformed(format!("an unexpected event: {e}")))?;
            match ev.kind.as_str() {
                "message_start" => {
                    let message =
                        ev.message.ok_or_else(|| LlmError::Malformed("message_start without message".into()))?;
                    out.model = message.model;
                    let usage = message.usage.unwrap_or_default();
                    out.usage.input_tokens = usage.input_tokens;
                }
                "content_block_start" => {
                    let Some(block) = ev.content_block.filter(|b| b.kind == "tool_use") else { continue };
                    if out.tool_calls.len() >= MAX_TOOL_CALLS {
                        return Err(LlmError::Malformed(format!("more than {MAX_TOOL_CALLS} tool calls")));
                    }
                    let n = out.tool_calls.len();
                    blocks.insert(ev.index.unwrap_or(usize::MAX), n);
                    let id = block.id.unwrap_or_else(|| format!("toolu_{n}"));
                    out.tool_calls.push(ToolCall::new(id, block.name.unwrap_or_default(), ""));
                }
                "content_block_delta" => {
                    let delta = ev.delta.unwrap_or_default();
                    let text = match delta.get("type").and_then(Value::as_str) {
                        Some("text_delta") => delta.get("text").and_then(Value::as_str),
                        Some("input_json_delta") => {
                            let Some(&call) = ev.index.and_then(|i| blocks.get(&i)) else { continue };
                            let piece = delta.get("partial_json").and_then(Value::as_str).unwrap_or_default();
                            out.tool_calls[call].arguments.push_str(piece);
                            let total: usize = out.tool_calls.iter().map(|c| c.arguments.len()).sum();
                            if total > self.opts.max_body {
                                return Err(LlmError::Malformed(
                                    "streamed tool calls larger than the body bound".into(),
                                ));
                            }
                            // A structured answer streams as text; other calls are not text.
                            if !(structured && out.tool_calls[call].name == ANSWER_TOOL) {
                                continue;
                            }
                            Some(piece)
                        }
                        _ => None,
                    };
                    let Some(text) = text.filter(|t| !t.is_empty()) else {
                        continue;
                    };
                    if !(structured && delta.get("type").and_then(Value::as_str) == Some("input_json_delta")) {
                        out.text.push_str(text);
                    }
                    pieces += 1;
                    let so_far = Usage { input_tokens: out.usage.input_tokens, output_tokens: Some(pieces) };
                    if on_delta(text, &so_far) == StreamControl::Stop {
                        out.finish = FinishReason::Stopped;
                        out.usage = so_far;
                        lift_answer(&mut out, structured);
                        return Ok(out);
                    }
                }
                "message_delta" => {
                    if let Some(reason) = ev.delta.as_ref().and_then(|d| d.get("stop_reason")).and_then(Value::as_str) {
                        stop_reason = Some(reason.to_owned());
                    }
                    if let Some(usage) = ev.usage {
                        // `output_tokens` is cumulative; `input_tokens`, when present, too.
                        out.usage.output_tokens = usage.output_tokens.or(out.usage.output_tokens);
                        out.usage.input_tokens = usage.input_tokens.or(out.usage.input_tokens);
                    }
                }
                "message_stop" => break,
                // ping, content_block_start/stop, and event types added later carry nothing needed here.
                _ => {}
            }
        }
        out.finish = finish(stop_reason.as_deref());
        // A tool_use block with no input pieces had an empty input.
        for call in &mut out.tool_calls {
            if call.arguments.is_empty() {
                call.arguments.push_str("{}");
            }
        }
        lift_answer(&mut out, structured);
        Ok(out)
    }
}
