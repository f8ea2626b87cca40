//! The HTTP requests every client of the workspace makes the same way, whatever its binding: discovery of the
//! identity card (RFC 2.3), retries with backoff, bounded bodies, and `reqwest` failures as typed `transport`
//! errors. The HTTP transport sends its messages through them; the WebSocket transport fetches its card with them.

use std::time::Duration;

use ldp_types::{ErrorCategory, IdentityCard, LdpError, codes};
use reqwest::{RequestBuilder, StatusCode};

use crate::options::RetryPolicy;
use crate::paths::{IDENTITY, WELL_KNOWN_IDENTITY};

/// Sends a request built by `make` (called again for each attempt), retrying retryable transport failures (and 503/429 answers) per `retry`.
pub async fn send_retrying(
    make: impl Fn() -> RequestBuilder,
    idempotent: bool,
    retry: &RetryPolicy,
    url: &str,
) -> Result<reqwest::Response, LdpError> {
    send_checked(make, idempotent, retry, url).await.map_err(RequestFailure::into_error)
}

/// Why a client request failed: before the server could have handled it, or after it was written (its answer lost
/// on the way back, which a client that resumes tasks asks the server about instead of failing).
#[derive(Debug, Clone, PartialEq)]
#[allow(clippy::exhaustive_enums)] // Closed by definition: the request reached the server, or it may not have.
pub enum RequestFailure {
    /// The request failed for good: it did not reach the server (after the retries allowed), it timed out, or the
    /// server refused it.
    Failed(LdpError),
    /// The connection broke after the request was written and before the whole answer came back.
    AnswerLost(LdpError),
}

impl RequestFailure {
    /// The typed error, whichever way the request failed.
    pub fn into_error(self) -> LdpError {
        match self {
            Self::Failed(e) | Self::AnswerLost(e) => e,
        }
    }

    /// A `reqwest` failure: lost when the request may have been written (neither a connection failure nor the
    /// request's own timeout, which is final).
    pub fn of(e: &reqwest::Error, idempotent: bool) -> Self {
        let error = request_error(e, idempotent);
        if e.is_connect() || e.is_timeout() || e.is_builder() { Self::Failed(error) } else { Self::AnswerLost(error) }
    }
}

/// [`send_retrying`], telling a lost answer from a failure ([`RequestFailure`]).
pub async fn send_checked(
    make: impl Fn() -> RequestBuilder,
    idempotent: bool,
    retry: &RetryPolicy,
    url: &str,
) -> Result<reqwest::Response, RequestFailure> {
    let mut attempt = 0;
    loop {
        let failure = match make().send().await {
            Ok(resp) if matches!(resp.status(), StatusCode::SERVICE_UNAVAILABLE | StatusCode::TOO_MANY_REQUESTS) => {
                RequestFailure::Failed(LdpError::transport(
                    codes::TRANSPORT_ERROR,
                    format!("HTTP {} from {url}", resp.status()),
                ))
            }
            Ok(resp) => return Ok(resp),
            Err(e) => RequestFailure::of(&e, idempotent),
        };
        let error = match &failure {
            RequestFailure::Failed(e) | RequestFailure::AnswerLost(e) => e,
        };
        if !(error.category == ErrorCategory::Transport && error.retryable) || attempt >= retry.max_retries {
            return Err(failure);
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

/// A status the client did not expect, as a `transport` error (retryable for 503 and 429).
pub fn status_error(status: StatusCode, snippet: &str) -> LdpError {
    let retryable = matches!(status, StatusCode::SERVICE_UNAVAILABLE | StatusCode::TOO_MANY_REQUESTS);
    LdpError::transport(codes::TRANSPORT_ERROR, format!("HTTP {status}: {snippet}")).with_retryable(retryable)
}

/// Reads an answer's body up to `limit` bytes: a longer one (declared or sent) is `MESSAGE_TOO_LARGE`.
pub async fn read_body(resp: reqwest::Response, limit: usize, idempotent: bool) -> Result<Vec<u8>, LdpError> {
    read_body_checked(resp, limit, idempotent).await.map_err(RequestFailure::into_error)
}

/// [`read_body`], telling a lost answer (the connection broke mid-body) from a failure ([`RequestFailure`]).
pub async fn read_body_checked(
    mut resp: reqwest::Response,
    limit: usize,
    idempotent: bool,
) -> Result<Vec<u8>, RequestFailure> {
    let too_large = || {
        RequestFailure::Failed(
            LdpError::runtime(codes::MESSAGE_TOO_LARGE, format!("the delegate's answer is larger than {limit} bytes"))
                .with_retryable(false),
        )
    };
    if resp.content_length().is_some_and(|n| n > limit as u64) {
        return Err(too_large());
    }
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| RequestFailure::of(&e, idempotent))? {
        if body.len() + chunk.len() > limit {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// A `reqwest` failure as a `transport` error; retryable only when the request cannot have been processed
/// (`idempotent` requests may always be retried).
pub fn request_error(e: &reqwest::Error, idempotent: bool) -> LdpError {
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
