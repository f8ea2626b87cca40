//! The Anthropic Messages API (`POST {base}/v1/messages`), plain and streamed.
//!
//! Wire format as Anthropic documents it: headers `x-api-key` and `anthropic-version: 2023-06-01`; a request of
//! `model`, `max_tokens` (required), `system`, `messages` (`user`/`assistant`) and `stream`; an answer whose
//! `content` is a list of blocks (the `text` blocks make the text), with `model`, `stop_reason` and
//! `usage.input_tokens`/`output_tokens`. A stream is named server-sent events: `message_start` (the model and the
//! input usage), `content_block_start`, `content_block_delta` (`text_delta`), `content_block_stop`, `message_delta`
//! (`stop_reason` and the cumulative `output_tokens`), `message_stop`, `ping`, and `error`.

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::backend::{BackendInfo, ChatRequest, ChatResponse, FinishReason, LlmBackend, OnDelta, StreamControl, Usage};
use crate::http::{self, Events, HttpOptions};
use crate::{ApiKey, LlmError};

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
        let messages: Vec<Value> =
            request.messages.iter().map(|m| json!({"role": m.role, "content": m.content})).collect();
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
        let text = answer.content.iter().filter(|b| b.kind == "text").filter_map(|b| b.text.as_deref()).collect();
        let usage = answer.usage.unwrap_or_default();
        Ok(ChatResponse {
            text,
            model: answer.model,
            usage: Usage { input_tokens: usage.input_tokens, output_tokens: usage.output_tokens },
            finish: finish(answer.stop_reason.as_deref()),
        })
    }

    async fn stream(&self, request: &ChatRequest, on_delta: &mut OnDelta<'_>) -> Result<ChatResponse, LlmError> {
        let resp = self.post(&self.body(request, true)).await?;
        let mut events = Events::new(resp, &self.opts);
        let mut out =
            ChatResponse { text: String::new(), model: None, usage: Usage::default(), finish: FinishReason::Stop };
        let mut stop_reason = None;
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
                "content_block_delta" => {
                    let delta = ev.delta.unwrap_or_default();
                    if delta.get("type").and_then(Value::as_str) != Some("text_delta") {
                        continue;
                    }
                    let Some(text) = delta.get("text").and_then(Value::as_str).filter(|t| !t.is_empty()) else {
                        continue;
                    };
                    out.text.push_str(text);
                    pieces += 1;
                    let so_far = Usage { input_tokens: out.usage.input_tokens, output_tokens: Some(pieces) };
                    if on_delta(text, &so_far) == StreamControl::Stop {
                        out.finish = FinishReason::Stopped;
                        out.usage = so_far;
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
        Ok(out)
    }
}
