//! A backend with no provider: it answers with the last user message.

use async_trait::async_trait;

use crate::LlmError;
use crate::backend::{
    BackendInfo, ChatRequest, ChatResponse, FinishReason, LlmBackend, OnDelta, Role, StreamControl, Usage,
};

/// Answers each request with its last user message, streamed word by word; a "token" is a whitespace-separated
/// word (of the whole conversation for the input, of the answer for the output). `max_tokens` cuts the answer as a
/// model's limit would. For demos, tests and benchmarks of the layers above a provider.
#[derive(Debug, Clone, Copy, Default)]
pub struct EchoBackend;

impl EchoBackend {
    fn answer(request: &ChatRequest) -> (Vec<String>, u64, FinishReason) {
        let last = request.messages.iter().rev().find(|m| m.role == Role::User).map_or("", |m| m.content.as_str());
        let input =
            request.system.iter().map(String::as_str).chain(request.messages.iter().map(|m| m.content.as_str()));
        let input_tokens = input.map(|t| t.split_whitespace().count() as u64).sum();
        let words: Vec<&str> = last.split_whitespace().collect();
        let limit = request.max_tokens.map_or(words.len(), |m| usize::try_from(m).unwrap_or(usize::MAX));
        let finish = if words.len() > limit { FinishReason::Length } else { FinishReason::Stop };
        let pieces =
            words.iter().take(limit).enumerate().map(|(i, w)| if i == 0 { (*w).to_owned() } else { format!(" {w}") });
        (pieces.collect(), input_tokens, finish)
    }
}

#[async_trait]
impl LlmBackend for EchoBackend {
    fn info(&self) -> BackendInfo {
        BackendInfo { provider: "echo".into(), model: "echo".into() }
    }

    async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let (pieces, input, finish) = Self::answer(request);
        Ok(ChatResponse::new(pieces.concat(), Some("echo".into()), Usage::new(input, pieces.len() as u64), finish))
    }

    async fn stream(&self, request: &ChatRequest, on_delta: &mut OnDelta<'_>) -> Result<ChatResponse, LlmError> {
        let (pieces, input, finish) = Self::answer(request);
        let mut text = String::new();
        for (n, piece) in pieces.iter().enumerate() {
            text.push_str(piece);
            let usage = Usage::new(input, n as u64 + 1);
            if on_delta(piece, &usage) == StreamControl::Stop {
                return Ok(ChatResponse::new(text, Some("echo".into()), usage, FinishReason::Stopped));
            }
        }
        Ok(ChatResponse::new(text, Some("echo".into()), Usage::new(input, pieces.len() as u64), finish))
    }
}
