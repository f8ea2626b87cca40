//! The client side: [`HttpTransport`] implements the session crate's [`Transport`] over HTTP, so
//! `ldp_session::runtime::Client` can talk to any LDP server (ours, or the reference SDKs').

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use ldp_session::runtime::{AttachedDrivers, DEFAULT_STATUS_POLL, Exchange, InitiatorDriver, Transport};
use ldp_types::{Envelope, IdentityCard, LdpError, codes};
use reqwest::{RequestBuilder, StatusCode, header};
use serde_json::Value;
use tokio::sync::mpsc;
use tracing::Instrument;

use ldp_edge::Error;
use ldp_edge::trace_context::TraceHeaders;
use ldp_edge::{ConnectOptions, ConnectSettings, Credentials, RetryPolicy};
use ldp_edge::{
    MESSAGES, RequestFailure, STREAM, fetch_identity, identity_urls, read_body_checked, send_checked, status_error,
};

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
            drivers: AttachedDrivers::default(),
        })
    }
}

/// An LDP client transport over HTTP: one `POST /ldp/messages` per envelope, `POST /ldp/stream` (SSE) when the
/// caller wants progress updates, connection reuse through one pooled `reqwest::Client`.
///
/// Attached to a client ([`Transport::attach`]), it leaves the answer deadlines of proposals and tasks to the
/// client's [`InitiatorDriver`] (its request timeout becomes the driver's answer timeout) and reports an answer lost
/// after the request was written as [`Exchange::Lost`], so that the driver asks the delegate about the task (and
/// polls it while it runs) instead of failing a task that may have run.
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
    /// The drivers of the clients it carries messages for.
    drivers: AttachedDrivers,
}

impl HttpTransport {
    /// Sends one envelope: over `/ldp/stream` when the caller wants updates and the server streams, else over
    /// `/ldp/messages`.
    async fn carry(
        &self,
        envelope: &Envelope,
        updates: Option<mpsc::Sender<Envelope>>,
    ) -> Result<Option<Vec<u8>>, RequestFailure> {
        let body = envelope.to_vec().map_err(|e| RequestFailure::Failed(LdpError::from(&e)))?;
        let driven = self.drivers.keeps_deadline(envelope);
        let span = ldp_session::spans::send_span(envelope);
        // The request carries this span's context, so the server's spans for it are its children.
        let trace = TraceHeaders::of(&span);
        let result = async {
            if let Some(tx) = &updates
                && !self.stream_unsupported.load(Ordering::Relaxed)
                && let Some(result) = self.post_stream(&body, tx, trace.as_ref(), driven).await
            {
                return result;
            }
            self.post_messages(&body, trace.as_ref(), driven).await
        }
        .instrument(span.clone())
        .await;
        match result {
            Ok(answer) => {
                let answered = Ok(answer);
                ldp_edge::trace_context::record_exchange(&span, &answered);
                answered.map_err(RequestFailure::Failed)
            }
            Err(failure) => {
                let (RequestFailure::Failed(error) | RequestFailure::AnswerLost(error)) = &failure;
                ldp_edge::trace_context::record_exchange(&span, &Err(error.clone()));
                Err(failure)
            }
        }
    }

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

    /// Adds the bearer token, and this transport's timeout unless the request is `driven` (a client's driver keeps
    /// its deadline, and dropping the request ends it).
    fn authorize(&self, req: RequestBuilder, token: Option<&str>, driven: bool) -> RequestBuilder {
        let req = if driven { req } else { req.timeout(self.timeout) };
        match token {
            Some(t) => req.bearer_auth(t),
            None => req,
        }
    }

    /// Sends a request built by `make`, retrying retryable transport failures with backoff.
    async fn send(
        &self,
        make: impl Fn() -> RequestBuilder,
        idempotent: bool,
    ) -> Result<reqwest::Response, RequestFailure> {
        send_checked(make, idempotent, &self.retry, &self.url).await
    }

    /// Adds the trace context headers, when there is a trace.
    fn traced(request: RequestBuilder, trace: Option<&TraceHeaders>) -> RequestBuilder {
        match trace {
            Some(trace) => trace.apply(request),
            None => request,
        }
    }

    async fn post_messages(
        &self,
        body: &[u8],
        trace: Option<&TraceHeaders>,
        driven: bool,
    ) -> Result<Option<Vec<u8>>, RequestFailure> {
        let token = self.credentials.current().await.map_err(RequestFailure::Failed)?;
        let make = || {
            Self::traced(self.authorize(self.client.post(self.messages.clone()), token.as_deref(), driven), trace)
                .header(header::CONTENT_TYPE, "application/json")
                .body(body.to_vec())
        };
        let resp = self.send(make, false).await?;
        let status = resp.status();
        let bytes = read_body_checked(resp, self.max_response_bytes, false).await?;
        decode_reply(status, bytes).map_err(RequestFailure::Failed)
    }

    /// `None` when the server has no streaming endpoint (the caller falls back to `/ldp/messages`).
    async fn post_stream(
        &self,
        body: &[u8],
        updates: &mpsc::Sender<Envelope>,
        trace: Option<&TraceHeaders>,
        driven: bool,
    ) -> Option<Result<Option<Vec<u8>>, RequestFailure>> {
        let token = match self.credentials.current().await {
            Ok(token) => token,
            Err(e) => return Some(Err(RequestFailure::Failed(e))),
        };
        let make = || {
            Self::traced(self.authorize(self.client.post(self.stream.clone()), token.as_deref(), driven), trace)
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
            let bytes = match read_body_checked(resp, self.max_response_bytes, false).await {
                Ok(b) => b,
                Err(e) => return Some(Err(e)),
            };
            return Some(decode_reply(status, bytes).map_err(RequestFailure::Failed));
        }
        Some(read_events(resp, updates, self.max_response_bytes).await)
    }
}

/// Reads an SSE answer: TASK_UPDATEs go to `updates`, the first other event's data is the reply (undecoded: the
/// initiator decodes it, as it does every reply). A stream that breaks before its final event lost the answer.
async fn read_events(
    resp: reqwest::Response,
    updates: &mpsc::Sender<Envelope>,
    max_event_bytes: usize,
) -> Result<Option<Vec<u8>>, RequestFailure> {
    let mut parser = crate::sse::SseParser::with_max_event_bytes(max_event_bytes);
    let mut chunks = resp.bytes_stream();
    let mut seen_any = false;
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(|e| RequestFailure::of(&e, false))?;
        let events = parser.push(&chunk).map_err(|e| {
            RequestFailure::Failed(
                LdpError::runtime(codes::MESSAGE_TOO_LARGE, format!("stream from peer: {e}")).with_retryable(false),
            )
        })?;
        for event in events {
            seen_any = true;
            if event.event == "error" {
                let error = serde_json::from_str::<Value>(&event.data).ok().and_then(|v| error_from_body(&v));
                return Err(RequestFailure::Failed(error.unwrap_or_else(|| {
                    LdpError::transport(codes::TRANSPORT_ERROR, "stream failed").with_retryable(false)
                })));
            }
            if !looks_like_object(event.data.as_bytes()) {
                return Err(RequestFailure::Failed(
                    LdpError::runtime(codes::MALFORMED_MESSAGE, "an event from the peer is not a JSON object")
                        .with_retryable(false),
                ));
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
        Err(RequestFailure::AnswerLost(
            LdpError::transport(codes::TRANSPORT_ERROR, "stream ended before the final envelope").with_retryable(false),
        ))
    } else {
        Ok(None)
    }
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
        self.carry(envelope, updates).await.map_err(RequestFailure::into_error)
    }

    async fn exchange_outcome(&self, envelope: &Envelope, updates: Option<mpsc::Sender<Envelope>>) -> Exchange {
        match self.carry(envelope, updates).await {
            Ok(answer) => Exchange::Answered(answer),
            Err(RequestFailure::AnswerLost(error)) => Exchange::Lost(error),
            Err(RequestFailure::Failed(error)) => Exchange::Failed(error),
        }
    }

    /// Leaves the answer deadlines of proposals and tasks to `driver` (this transport's request timeout), and has
    /// it poll tasks whose answer was lost, since HTTP pushes nothing.
    fn attach(&self, driver: &Arc<InitiatorDriver>) {
        driver.set_answer_timeout(Some(self.timeout));
        driver.set_status_poll(Some(DEFAULT_STATUS_POLL));
        self.drivers.add(driver);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_read_by_content() {
        let env = br#"{"body":{"type":"SESSION_REJECT"}}"#;
        assert!(decode_reply(StatusCode::FORBIDDEN, env.to_vec()).unwrap().is_some());
        let err = br#"{"error":{"code":"UNAUTHENTICATED","category":"identity","message":"m"}}"#;
        assert_eq!(decode_reply(StatusCode::UNAUTHORIZED, err.to_vec()).unwrap_err().code, "UNAUTHENTICATED");
        assert_eq!(decode_reply(StatusCode::ACCEPTED, Vec::new()).unwrap(), None);
        let e = decode_reply(StatusCode::INTERNAL_SERVER_ERROR, b"Internal Server Error".to_vec()).unwrap_err();
        assert_eq!(e.category, ldp_types::ErrorCategory::Transport);
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
