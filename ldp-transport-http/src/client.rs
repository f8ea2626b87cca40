//! The client side: [`HttpTransport`] implements the session crate's [`Transport`] over HTTP, so
//! `ldp_session::runtime::Client` can talk to any LDP server (ours, or the reference SDKs').

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use ldp_session::runtime::Transport;
use ldp_types::{Envelope, ErrorCategory, IdentityCard, LdpError, codes};
use reqwest::{RequestBuilder, StatusCode, header};
use serde_json::Value;
use tokio::sync::mpsc;
use tracing::Instrument;

use crate::error::Error;
use crate::options::{ConnectOptions, ConnectSettings, Credentials, RetryPolicy};
use crate::paths::{IDENTITY, MESSAGES, STREAM, WELL_KNOWN_IDENTITY};
use crate::trace_context::TraceHeaders;

/// Builds an [`HttpTransport`]: the shared [`ConnectOptions`] (set through [`ConnectSettings`]) and, for HTTP
/// alone, a caller's own `reqwest` client.
#[derive(Debug, Clone)]
pub struct HttpTransportBuilder {
    url: String,
    options: ConnectOptions,
    client: Option<reqwest::Client>,
}

impl ConnectSettings for HttpTransportBuilder {
    fn connect_options_mut(&mut self) -> &mut ConnectOptions {
        &mut self.options
    }
}

/// The request timeout when [`ConnectOptions::request_timeout`] is not set.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

impl HttpTransportBuilder {
    /// Uses this `reqwest` client (e.g. for proxies); the connect timeout and TLS settings are then those of the
    /// given client (setting TLS here as well is refused), the request timeout is still applied.
    pub fn http_client(mut self, client: reqwest::Client) -> Self {
        self.client = Some(client);
        self
    }

    /// Builds the transport.
    pub fn build(self) -> Result<HttpTransport, Error> {
        let url = self.url.trim_end_matches('/').to_owned();
        let valid = reqwest::Url::parse(&url).is_ok_and(|u| matches!(u.scheme(), "http" | "https") && u.has_host());
        // Parsed once here, not per request: URL parsing (with IDNA) was about 1 % of a loaded client's CPU.
        let endpoints =
            (reqwest::Url::parse(&format!("{url}{MESSAGES}")), reqwest::Url::parse(&format!("{url}{STREAM}")));
        let (true, (Ok(messages), Ok(stream))) = (valid, endpoints) else {
            return Err(Error::InvalidUrl(self.url));
        };
        let options = self.options;
        let client = match self.client {
            Some(_) if !options.tls.is_default() => {
                return Err(Error::Tls(
                    "tls_* options cannot be combined with http_client; configure that client".into(),
                ));
            }
            Some(c) => c,
            None => {
                let builder = reqwest::Client::builder()
                    .connect_timeout(options.connect_timeout)
                    .pool_idle_timeout(Duration::from_secs(90))
                    .tcp_nodelay(true);
                let builder = options.tls.configure(builder)?;
                builder.build().map_err(Error::Client)?
            }
        };
        Ok(HttpTransport {
            messages,
            stream,
            url,
            client,
            credentials: options.credentials(),
            timeout: options.request_timeout.unwrap_or(DEFAULT_REQUEST_TIMEOUT),
            retry: options.retry.unwrap_or_default(),
            stream_unsupported: AtomicBool::new(false),
            max_response_bytes: options.max_message,
        })
    }
}

/// An LDP client transport over HTTP: one `POST /ldp/messages` per envelope, `POST /ldp/stream` (SSE) when the
/// caller wants progress updates, connection reuse through one pooled `reqwest::Client`.
///
/// Replies are read by content, not only by status: any body that is an envelope (a SESSION_REJECT with 403, a
/// TASK_FAILED with 401) is returned for the session layer to interpret; `{"error": ...}` bodies become that typed
/// error; anything else becomes a `transport` error.
#[derive(Debug)]
pub struct HttpTransport {
    url: String,
    messages: reqwest::Url,
    stream: reqwest::Url,
    client: reqwest::Client,
    credentials: Credentials,
    timeout: Duration,
    retry: RetryPolicy,
    stream_unsupported: AtomicBool,
    max_response_bytes: usize,
}

impl HttpTransport {
    /// A transport to the delegate at `url` (e.g. `http://127.0.0.1:8090`) with default settings.
    pub fn new(url: impl Into<String>) -> Result<Self, Error> {
        Self::builder(url).build()
    }

    /// A transport to the delegate at `url` configured by `options`.
    pub fn with_options(url: impl Into<String>, options: ConnectOptions) -> Result<Self, Error> {
        Self::builder(url).connect_options(options).build()
    }

    /// A builder for a transport to `url`.
    pub fn builder(url: impl Into<String>) -> HttpTransportBuilder {
        HttpTransportBuilder { url: url.into(), options: ConnectOptions::default(), client: None }
    }

    /// The base URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    fn authorize(&self, req: RequestBuilder, token: Option<&str>) -> RequestBuilder {
        let req = req.timeout(self.timeout);
        match token {
            Some(t) => req.bearer_auth(t),
            None => req,
        }
    }

    /// Sends a request built by `make`, retrying retryable transport failures with backoff.
    async fn send(&self, make: impl Fn() -> RequestBuilder, idempotent: bool) -> Result<reqwest::Response, LdpError> {
        send_retrying(make, idempotent, &self.retry, &self.url).await
    }

    /// Adds the trace context headers, when there is a trace.
    fn traced(request: RequestBuilder, trace: Option<&TraceHeaders>) -> RequestBuilder {
        match trace {
            Some(trace) => trace.apply(request),
            None => request,
        }
    }

    async fn post_messages(&self, body: &[u8], trace: Option<&TraceHeaders>) -> Result<Option<Vec<u8>>, LdpError> {
        let token = self.credentials.current().await?;
        let make = || {
            Self::traced(self.authorize(self.client.post(self.messages.clone()), token.as_deref()), trace)
                .header(header::CONTENT_TYPE, "application/json")
                .body(body.to_vec())
        };
        let resp = self.send(make, false).await?;
        let status = resp.status();
        let bytes = read_body(resp, self.max_response_bytes, false).await?;
        decode_reply(status, bytes)
    }

    /// `None` when the server has no streaming endpoint (the caller falls back to `/ldp/messages`).
    async fn post_stream(
        &self,
        body: &[u8],
        updates: &mpsc::Sender<Envelope>,
        trace: Option<&TraceHeaders>,
    ) -> Option<Result<Option<Vec<u8>>, LdpError>> {
        let token = match self.credentials.current().await {
            Ok(token) => token,
            Err(e) => return Some(Err(e)),
        };
        let make = || {
            Self::traced(self.authorize(self.client.post(self.stream.clone()), token.as_deref()), trace)
                .header(header::CONTENT_TYPE, "application/json")
                .header(header::ACCEPT, "text/event-stream")
                .body(body.to_vec())
        };
        let resp = match self.send(make, false).await {
            Ok(r) => r,
            Err(e) => return Some(Err(e)),
        };
        let status = resp.status();
        if matches!(status, StatusCode::NOT_FOUND | StatusCode::METHOD_NOT_ALLOWED) {
            // Nothing was processed: the server (e.g. a reference SDK's) does not stream.
            self.stream_unsupported.store(true, Ordering::Relaxed);
            return None;
        }
        let is_sse = resp
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if !is_sse {
            let bytes = match read_body(resp, self.max_response_bytes, false).await {
                Ok(b) => b,
                Err(e) => return Some(Err(e)),
            };
            return Some(decode_reply(status, bytes));
        }
        Some(read_events(resp, updates, self.max_response_bytes).await)
    }
}

/// Reads an SSE answer: TASK_UPDATEs go to `updates`, the first other event's data is the reply (undecoded: the
/// initiator decodes it, as it does every reply).
async fn read_events(
    resp: reqwest::Response,
    updates: &mpsc::Sender<Envelope>,
    max_event_bytes: usize,
) -> Result<Option<Vec<u8>>, LdpError> {
    let mut parser = crate::sse::SseParser::with_max_event_bytes(max_event_bytes);
    let mut chunks = resp.bytes_stream();
    let mut seen_any = false;
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(|e| request_error(&e, false))?;
        let events = parser.push(&chunk).map_err(|e| {
            LdpError::runtime(codes::MESSAGE_TOO_LARGE, format!("stream from peer: {e}")).with_retryable(false)
        })?;
        for event in events {
            seen_any = true;
            if event.event == "error" {
                let error = serde_json::from_str::<Value>(&event.data).ok().and_then(|v| error_from_body(&v));
                return Err(error.unwrap_or_else(|| {
                    LdpError::transport(codes::TRANSPORT_ERROR, "stream failed").with_retryable(false)
                }));
            }
            if !looks_like_object(event.data.as_bytes()) {
                return Err(LdpError::runtime(codes::MALFORMED_MESSAGE, "an event from the peer is not a JSON object")
                    .with_retryable(false));
            }
            match Envelope::from_slice(event.data.as_bytes()) {
                Ok(env) if matches!(env.body, ldp_types::Body::TaskUpdate(_)) => {
                    // Updates are best-effort: a caller that stopped reading must not stall the result.
                    let _ = updates.try_send(env);
                }
                // The reply, or what the initiator will report as an undecodable one.
                _ => return Ok(Some(event.data.into_bytes())),
            }
        }
    }
    if seen_any {
        Err(LdpError::transport(codes::TRANSPORT_ERROR, "stream ended before the final envelope").with_retryable(false))
    } else {
        Ok(None)
    }
}

/// Sends a request built by `make`, retrying retryable transport failures (and 503/429 answers) per `retry`.
async fn send_retrying(
    make: impl Fn() -> RequestBuilder,
    idempotent: bool,
    retry: &RetryPolicy,
    url: &str,
) -> Result<reqwest::Response, LdpError> {
    let mut attempt = 0;
    loop {
        let error = match make().send().await {
            Ok(resp) if matches!(resp.status(), StatusCode::SERVICE_UNAVAILABLE | StatusCode::TOO_MANY_REQUESTS) => {
                LdpError::transport(codes::TRANSPORT_ERROR, format!("HTTP {} from {url}", resp.status()))
            }
            Ok(resp) => return Ok(resp),
            Err(e) => request_error(&e, idempotent),
        };
        if !(error.category == ErrorCategory::Transport && error.retryable) || attempt >= retry.max_retries {
            return Err(error);
        }
        let wait = retry.backoff(attempt);
        tracing::debug!(attempt, ?wait, %error, "retrying");
        tokio::time::sleep(wait).await;
        attempt += 1;
    }
}

/// Where a delegate at the base URL `base` serves its identity card: the RFC 2.3 well-known path, then the reference
/// SDKs' `/ldp/identity`.
pub fn identity_urls(base: &str) -> Vec<String> {
    let base = base.trim_end_matches('/');
    vec![format!("{base}{WELL_KNOWN_IDENTITY}"), format!("{base}{IDENTITY}")]
}

/// The one identity fetch of the workspace's clients (HTTP and WebSocket): `GET` each of `urls` in turn (see
/// [`identity_urls`]), with `token` as bearer token, each request within `timeout`, transport failures retried per
/// `retry`, the body bounded by `max_bytes`. Only a missing card (404) moves on to the next URL; any other status is
/// the server's answer and fails with its `transport` error (retryable for 503 and 429).
pub async fn fetch_identity(
    client: &reqwest::Client,
    urls: &[String],
    token: Option<&str>,
    timeout: Duration,
    retry: &RetryPolicy,
    max_bytes: usize,
) -> Result<IdentityCard, LdpError> {
    let mut last = None;
    for url in urls {
        let make = || {
            let req = client.get(url).timeout(timeout);
            match token {
                Some(t) => req.bearer_auth(t),
                None => req,
            }
        };
        let resp = send_retrying(make, true, retry, url).await?;
        let status = resp.status();
        let bytes = read_body(resp, max_bytes, true).await?;
        if status == StatusCode::NOT_FOUND {
            last = Some(status_error(status, url));
            continue;
        }
        if !status.is_success() {
            return Err(status_error(status, &String::from_utf8_lossy(&bytes[..bytes.len().min(200)])));
        }
        return serde_json::from_slice(&bytes).map_err(|e| {
            LdpError::runtime(codes::MALFORMED_MESSAGE, format!("identity card does not parse: {e}"))
                .with_retryable(false)
        });
    }
    Err(last.unwrap_or_else(|| status_error(StatusCode::NOT_FOUND, "no identity card")))
}

fn error_from_body(value: &Value) -> Option<LdpError> {
    serde_json::from_value(value.get("error")?.clone()).ok()
}

/// Whether `bytes` start like a JSON object (after whitespace): what every reply is, read without decoding it.
fn looks_like_object(bytes: &[u8]) -> bool {
    bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{')
}

/// Interprets an answer by content first (an envelope is a reply whatever the status), then by status. A successful
/// answer is handed on undecoded (the initiator decodes it once); only a failure status is read here, to tell an
/// envelope from an error object.
fn decode_reply(status: StatusCode, bytes: Vec<u8>) -> Result<Option<Vec<u8>>, LdpError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        if status.is_success() {
            return Ok(None);
        }
        return Err(status_error(status, ""));
    }
    if status.is_success() && looks_like_object(&bytes) {
        return Ok(Some(bytes));
    }
    let Ok(value) = serde_json::from_slice::<Value>(&bytes) else {
        if status.is_success() {
            return Err(
                LdpError::runtime(codes::MALFORMED_MESSAGE, "the peer's reply is not JSON").with_retryable(false)
            );
        }
        return Err(status_error(status, &String::from_utf8_lossy(&bytes[..bytes.len().min(200)])));
    };
    if value.get("body").is_some() || status.is_success() {
        return Ok(Some(bytes));
    }
    Err(error_from_body(&value).unwrap_or_else(|| status_error(status, &value.to_string())))
}

fn status_error(status: StatusCode, snippet: &str) -> LdpError {
    let retryable = matches!(status, StatusCode::SERVICE_UNAVAILABLE | StatusCode::TOO_MANY_REQUESTS);
    LdpError::transport(codes::TRANSPORT_ERROR, format!("HTTP {status}: {snippet}")).with_retryable(retryable)
}

/// A `reqwest` failure as a `transport` error; retryable only when the request cannot have been processed.
/// Reads an answer's body up to `limit` bytes: a longer one (declared or sent) is `MESSAGE_TOO_LARGE`.
async fn read_body(mut resp: reqwest::Response, limit: usize, idempotent: bool) -> Result<Vec<u8>, LdpError> {
    let too_large = || {
        LdpError::runtime(codes::MESSAGE_TOO_LARGE, format!("the delegate's answer is larger than {limit} bytes"))
            .with_retryable(false)
    };
    if resp.content_length().is_some_and(|n| n > limit as u64) {
        return Err(too_large());
    }
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| request_error(&e, idempotent))? {
        if body.len() + chunk.len() > limit {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

fn request_error(e: &reqwest::Error, idempotent: bool) -> LdpError {
    let described = with_causes(e);
    if e.is_connect() && tls_refused(e) {
        // A certificate one side does not trust is not fixed by retrying.
        LdpError::transport(codes::TRANSPORT_ERROR, format!("TLS handshake failed: {described}")).with_retryable(false)
    } else if e.is_connect() {
        LdpError::transport(codes::TRANSPORT_ERROR, format!("cannot connect: {described}"))
    } else if e.is_timeout() {
        LdpError::transport(codes::TIMEOUT, format!("no answer in time: {described}")).with_retryable(idempotent)
    } else {
        LdpError::transport(codes::TRANSPORT_ERROR, described).with_retryable(idempotent)
    }
}

/// Whether a connection failed in the TLS handshake: rustls reports its errors (an unknown issuer, a refused client
/// certificate, a name mismatch) to the connector as I/O errors of kind `InvalidData`, which the connector wraps in
/// further I/O errors (whose `source` skips the wrapped error, hence the look inside each).
fn tls_refused(e: &reqwest::Error) -> bool {
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        let mut io = cause.downcast_ref::<std::io::Error>();
        while let Some(err) = io {
            if err.kind() == std::io::ErrorKind::InvalidData {
                return true;
            }
            io = err.get_ref().and_then(|inner| inner.downcast_ref::<std::io::Error>());
        }
        source = cause.source();
    }
    false
}

/// `e` and its chain of causes: reqwest's own message names only the URL, while the reason (a refused connection,
/// an unknown certificate issuer) is in the causes.
fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let part = cause.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = cause.source();
    }
    text
}

#[async_trait]
impl Transport for HttpTransport {
    /// `GET /.well-known/ldp-identity`, falling back to `/ldp/identity` (reference SDKs) when it is missing
    /// ([`fetch_identity`]).
    async fn identity(&self) -> Result<IdentityCard, LdpError> {
        let urls = identity_urls(&self.url);
        let token = self.credentials.current().await?;
        fetch_identity(&self.client, &urls, token.as_deref(), self.timeout, &self.retry, self.max_response_bytes).await
    }

    async fn exchange(
        &self,
        envelope: &Envelope,
        updates: Option<mpsc::Sender<Envelope>>,
    ) -> Result<Option<Vec<u8>>, LdpError> {
        let body = envelope.to_vec().map_err(|e| LdpError::from(&e))?;
        let span = ldp_session::spans::send_span(envelope);
        // The request carries this span's context, so the server's spans for it are its children.
        let trace = TraceHeaders::of(&span);
        let result = async {
            if let Some(tx) = &updates
                && !self.stream_unsupported.load(Ordering::Relaxed)
                && let Some(result) = self.post_stream(&body, tx, trace.as_ref()).await
            {
                return result;
            }
            self.post_messages(&body, trace.as_ref()).await
        }
        .instrument(span.clone())
        .await;
        crate::trace_context::record_exchange(&span, &result);
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_is_capped_and_jittered() {
        let p = RetryPolicy {
            max_retries: 5,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(1000),
        };
        for attempt in 0..8 {
            let ceiling = (Duration::from_millis(100) * 2u32.pow(attempt)).min(Duration::from_millis(1000));
            for _ in 0..50 {
                let b = p.backoff(attempt);
                assert!(b >= ceiling / 2 && b <= ceiling, "attempt {attempt}: {b:?}");
            }
        }
        assert_eq!(RetryPolicy::none().max_retries, 0);
    }

    #[test]
    fn replies_are_read_by_content() {
        let env = br#"{"body":{"type":"SESSION_REJECT"}}"#;
        assert!(decode_reply(StatusCode::FORBIDDEN, env.to_vec()).unwrap().is_some());
        let err = br#"{"error":{"code":"UNAUTHENTICATED","category":"identity","message":"m"}}"#;
        assert_eq!(decode_reply(StatusCode::UNAUTHORIZED, err.to_vec()).unwrap_err().code, "UNAUTHENTICATED");
        assert_eq!(decode_reply(StatusCode::ACCEPTED, Vec::new()).unwrap(), None);
        let e = decode_reply(StatusCode::INTERNAL_SERVER_ERROR, b"Internal Server Error".to_vec()).unwrap_err();
        assert_eq!(e.category, ErrorCategory::Transport);
        assert!(!e.retryable);
        assert!(decode_reply(StatusCode::SERVICE_UNAVAILABLE, Vec::new()).unwrap_err().retryable);
        // A success is handed on as received, undecoded; one that is no JSON object at all is refused here.
        assert_eq!(decode_reply(StatusCode::OK, env.to_vec()).unwrap().as_deref(), Some(&env[..]));
        assert_eq!(decode_reply(StatusCode::OK, b"<html>".to_vec()).unwrap_err().code, codes::MALFORMED_MESSAGE);
    }

    #[test]
    fn urls_are_checked() {
        assert!(HttpTransport::new("ftp://x").is_err());
        assert!(HttpTransport::new("not a url").is_err());
        assert_eq!(HttpTransport::new("http://127.0.0.1:1/").unwrap().url(), "http://127.0.0.1:1");
    }
}
