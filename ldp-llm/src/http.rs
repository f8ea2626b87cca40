//! The HTTP plumbing the provider backends share: timeouts, bounded retries, bounded bodies and bounded SSE.

use std::time::Duration;

use eventsource_stream::{Event, EventStreamError, Eventsource};
use futures::{Stream, StreamExt};
use reqwest::{RequestBuilder, Response, StatusCode};

use crate::LlmError;
use crate::key::{ApiKey, scrub};

/// Timeouts, retries and size bounds of a provider backend. Every wait on the provider has one of the timeouts and
/// every body read from it one of the bounds.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HttpOptions {
    /// Longest time to open a connection.
    pub connect_timeout: Duration,
    /// Longest time from sending a request to the end of a non-streamed answer, or to a streamed answer's headers.
    pub request_timeout: Duration,
    /// Longest silence between two pieces of a streamed answer (providers send keep-alive pings well within it).
    pub idle_timeout: Duration,
    /// Longest a streamed answer may take in all.
    pub stream_timeout: Duration,
    /// Largest answer read, in bytes (a whole body, or all of a stream's events).
    pub max_body: usize,
    /// Retries after a 5xx, a timeout or a connection failure (before any answer arrived); 0 disables them.
    pub max_retries: u32,
    /// The first retry's delay; each next one doubles it.
    pub retry_backoff: Duration,
}

impl Default for HttpOptions {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(120),
            idle_timeout: Duration::from_secs(60),
            stream_timeout: Duration::from_secs(600),
            max_body: 8 * 1024 * 1024,
            max_retries: 2,
            retry_backoff: Duration::from_millis(250),
        }
    }
}

/// Longest provider message quoted in an error.
const MAX_QUOTED: usize = 400;
/// Largest error body read.
const MAX_ERROR_BODY: usize = 64 * 1024;

/// A provider's base URL without its trailing slashes; only `http://` and `https://` are accepted.
pub(crate) fn base_url(url: String) -> Result<String, LlmError> {
    let url = url.trim_end_matches('/').to_owned();
    if url.starts_with("http://") || url.starts_with("https://") {
        Ok(url)
    } else {
        Err(LlmError::Config(format!("the base URL {url:?} is not http:// or https://")))
    }
}

/// A reqwest client for these options.
pub(crate) fn client(opts: &HttpOptions) -> Result<reqwest::Client, LlmError> {
    reqwest::Client::builder()
        .connect_timeout(opts.connect_timeout)
        // Provider redirects are not followed: a redirect would carry the key's header to another place.
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| LlmError::Config(format!("cannot build the HTTP client: {e}")))
}

/// Sends the request built by `build`, retrying 5xx answers, timeouts and connection failures up to
/// `opts.max_retries` times with doubling backoff, and turns error statuses into typed errors (`error_message`
/// extracts the provider's message from an error body). Returns the first 2xx response.
pub(crate) async fn send(
    opts: &HttpOptions,
    key: Option<&ApiKey>,
    build: impl Fn() -> RequestBuilder,
    error_message: fn(&[u8]) -> Option<String>,
) -> Result<Response, LlmError> {
    let mut attempt: u32 = 0;
    loop {
        attempt += 1;
        let retry = attempt <= opts.max_retries;
        let failure = match tokio::time::timeout(opts.request_timeout, build().send()).await {
            Err(_) => LlmError::Timeout { after: opts.request_timeout, attempts: attempt },
            Ok(Err(e)) if e.is_timeout() => LlmError::Timeout { after: opts.request_timeout, attempts: attempt },
            // reqwest's message names the URL, never the headers, so the key cannot be in it.
            Ok(Err(e)) => LlmError::Transport { attempts: attempt, message: quote(key, &e.to_string()) },
            Ok(Ok(resp)) if resp.status().is_success() => return Ok(resp),
            Ok(Ok(resp)) => {
                let status = resp.status();
                let retry_after = retry_after(&resp);
                let body = read_body(resp, MAX_ERROR_BODY, opts.request_timeout).await.unwrap_or_default();
                let message = error_message(&body)
                    .unwrap_or_else(|| String::from_utf8_lossy(&body[..body.len().min(MAX_QUOTED)]).into_owned());
                let message = quote(key, &message);
                match status {
                    StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
                        return Err(LlmError::Unauthorized { status: status.as_u16(), message });
                    }
                    StatusCode::TOO_MANY_REQUESTS => return Err(LlmError::RateLimited { retry_after, message }),
                    s if s.is_server_error() => {
                        LlmError::Unavailable { status: s.as_u16(), attempts: attempt, message }
                    }
                    s => return Err(LlmError::Rejected { status: s.as_u16(), message }),
                }
            }
        };
        if !retry {
            return Err(failure);
        }
        let backoff = opts.retry_backoff.saturating_mul(1u32 << (attempt - 1).min(10));
        tokio::time::sleep(backoff).await;
    }
}

/// The `Retry-After` header in seconds (the HTTP-date form is not used by these providers).
fn retry_after(resp: &Response) -> Option<Duration> {
    let value = resp.headers().get(reqwest::header::RETRY_AFTER)?.to_str().ok()?;
    let secs: f64 = value.trim().parse().ok()?;
    (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs.min(86_400.0)))
}

/// A provider message made safe to quote: cut to a bounded length and scrubbed of the key.
pub(crate) fn quote(key: Option<&ApiKey>, text: &str) -> String {
    let scrubbed = scrub(key, text);
    match scrubbed.char_indices().nth(MAX_QUOTED) {
        Some((cut, _)) => format!("{}...", &scrubbed[..cut]),
        None => scrubbed,
    }
}

/// Reads a whole body, at most `max` bytes, within `timeout`.
pub(crate) async fn read_body(resp: Response, max: usize, timeout: Duration) -> Result<Vec<u8>, LlmError> {
    if resp.content_length().is_some_and(|n| n > max as u64) {
        return Err(LlmError::TooLarge { limit: max });
    }
    let read = async {
        let mut body = Vec::new();
        let mut chunks = resp.bytes_stream();
        while let Some(chunk) = chunks.next().await {
            let chunk = chunk.map_err(|e| LlmError::Transport { attempts: 1, message: e.to_string() })?;
            if body.len() + chunk.len() > max {
                return Err(LlmError::TooLarge { limit: max });
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    };
    tokio::time::timeout(timeout, read).await.map_err(|_| LlmError::Timeout { after: timeout, attempts: 1 })?
}

/// Why the byte stream under the SSE parser ended early.
#[derive(Debug)]
enum BodyError {
    Http(reqwest::Error),
    TooLarge,
}

impl std::fmt::Display for BodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Http(e) => write!(f, "{e}"),
            Self::TooLarge => f.write_str("too large"),
        }
    }
}

/// A streamed answer's server-sent events, read with the options' idle and total timeouts and byte bound.
pub(crate) struct Events {
    inner: std::pin::Pin<Box<dyn Stream<Item = Result<Event, EventStreamError<BodyError>>> + Send>>,
    idle: Duration,
    deadline: tokio::time::Instant,
    total: Duration,
    max: usize,
}

impl Events {
    /// The events of `resp`.
    pub(crate) fn new(resp: Response, opts: &HttpOptions) -> Self {
        let max = opts.max_body;
        let mut seen = 0usize;
        // The bound is on the bytes, under the parser: the parser's own buffers then cannot outgrow it.
        let bytes = resp.bytes_stream().map(move |chunk| {
            let chunk = chunk.map_err(BodyError::Http)?;
            seen = seen.saturating_add(chunk.len());
            if seen > max { Err(BodyError::TooLarge) } else { Ok(chunk) }
        });
        Self {
            inner: Box::pin(bytes.eventsource()),
            idle: opts.idle_timeout,
            deadline: tokio::time::Instant::now() + opts.stream_timeout,
            total: opts.stream_timeout,
            max,
        }
    }

    /// The next event; `None` when the stream ended.
    pub(crate) async fn next(&mut self) -> Result<Option<Event>, LlmError> {
        let wait = self.idle.min(self.deadline.saturating_duration_since(tokio::time::Instant::now()));
        let after = if wait < self.idle { self.total } else { self.idle };
        match tokio::time::timeout(wait, self.inner.next()).await {
            Err(_) => Err(LlmError::Timeout { after, attempts: 1 }),
            Ok(None) => Ok(None),
            Ok(Some(Ok(event))) => Ok(Some(event)),
            Ok(Some(Err(EventStreamError::Transport(BodyError::TooLarge)))) => {
                Err(LlmError::TooLarge { limit: self.max })
            }
            Ok(Some(Err(EventStreamError::Transport(BodyError::Http(e))))) => {
                Err(LlmError::Transport { attempts: 1, message: e.to_string() })
            }
            Ok(Some(Err(e))) => Err(LlmError::Malformed(format!("the event stream: {e}"))),
        }
    }
}
